//! Telemetry: logs, metrics and traces following the OpenTelemetry
//! conventions, configured by the environment variables Porch's manifests
//! set ([`config`]).
//!
//! Everything is built on `tracing` spans ([`spans`]): the evaluators open
//! one span per phase and know nothing else of telemetry. [`Telemetry::install`]
//! puts three layers on the process's subscriber:
//! - the log formatter (`--log-level`/`RUST_LOG`), as before;
//! - with metrics on, a layer that turns closed spans into the
//!   instruments of [`metrics`], exported through the OpenTelemetry SDK's
//!   Prometheus exporter on `/metrics` ([`http`]) and/or over OTLP;
//! - with traces on, `tracing-opentelemetry`, exporting the same spans over
//!   OTLP (gRPC or HTTP/protobuf) in batches.
//!
//! The gRPC server opens the per-call span in a tower layer ([`grpc`]),
//! continuing the caller's W3C trace context.

pub mod config;
pub mod grpc;
pub mod http;
pub mod metrics;
pub mod spans;

use std::fmt;
use std::net::SocketAddr;

use opentelemetry::propagation::TextMapCompositePropagator;
use opentelemetry::propagation::text_map_propagator::TextMapPropagator;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::metrics::SdkMeterProvider;
use opentelemetry_sdk::propagation::{BaggagePropagator, TraceContextPropagator};
use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing::Level;
use tracing::field::{Field, Visit};
use tracing_subscriber::field::RecordFields;
use tracing_subscriber::filter::{Targets, filter_fn};
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FormatFields, FormattedFields};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer, Registry};

pub use config::{ConfigError, PrometheusEndpoint, Propagator, TelemetryConfig};
pub use metrics::{PodSample, PodState, count_admission_denial, observe_pods};

/// The instrumentation scope (tracer and meter name) of this crate.
pub const SCOPE: &str = "krm-fn-runner";

/// Why telemetry cannot start; the process stops (as Porch's does).
#[derive(Debug, thiserror::Error)]
pub enum TelemetryError {
    /// A variable has a value that cannot be used.
    #[error("{0}")]
    Config(#[from] ConfigError),
    /// The `/metrics` address cannot be bound.
    #[error(
        "cannot serve metrics on {host}:{port} (OTEL_EXPORTER_PROMETHEUS_HOST, OTEL_EXPORTER_PROMETHEUS_PORT): {source}"
    )]
    Bind {
        /// The host.
        host: String,
        /// The port.
        port: u16,
        /// The socket error.
        source: std::io::Error,
    },
    /// An exporter could not be built.
    #[error("cannot set up the {what}: {detail}")]
    Exporter {
        /// Which exporter.
        what: &'static str,
        /// The SDK's error.
        detail: String,
    },
}

/// Span and event fields the log lines leave out: the OpenTelemetry span
/// settings and RPC attributes of the per-call span, which say the same on
/// every call.
fn hidden(field: &Field) -> bool {
    let name = field.name();
    name.starts_with("otel.") || name.starts_with("rpc.") || name.starts_with("log.")
}

/// Writes fields as the default formatter does (`name=value`, the message
/// bare), skipping [`hidden`] ones.
struct FieldWriter<'a> {
    writer: Writer<'a>,
    empty: bool,
    result: fmt::Result,
}

impl Visit for FieldWriter<'_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            self.record_debug(field, &format_args!("{value}"));
        } else {
            self.record_debug(field, &value);
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        if self.result.is_err() || hidden(field) {
            return;
        }
        let sep = if self.empty { "" } else { " " };
        self.empty = false;
        self.result = if field.name() == "message" {
            write!(self.writer, "{sep}{value:?}")
        } else {
            write!(self.writer, "{sep}{}={value:?}", field.name())
        };
    }
}

/// The log formatter's field formatter.
struct LogFields;

impl<'w> FormatFields<'w> for LogFields {
    fn format_fields<R: RecordFields>(&self, writer: Writer<'w>, fields: R) -> fmt::Result {
        let mut v = FieldWriter {
            writer,
            empty: true,
            result: Ok(()),
        };
        fields.record(&mut v);
        v.result
    }

    fn add_fields(
        &self,
        current: &'w mut FormattedFields<Self>,
        fields: &tracing::span::Record<'_>,
    ) -> fmt::Result {
        let mut more = String::new();
        self.format_fields(Writer::new(&mut more), fields)?;
        if !more.is_empty() {
            if !current.fields.is_empty() {
                current.fields.push(' ');
            }
            current.fields.push_str(&more);
        }
        Ok(())
    }
}

/// The log layer: klog-style verbosity (Porch's `--log-level`, 0–5) unless
/// `RUST_LOG` is set, on stderr.
fn log_layer<S>(level: u8) -> impl Layer<S>
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
{
    let default = match level {
        0 => "error",
        1 => "warn",
        2 => "info",
        3 => "debug",
        _ => "trace",
    };
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default));
    tracing_subscriber::fmt::layer()
        .fmt_fields(LogFields)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_target(false)
        .with_filter(filter)
}

/// Sets up logging only (commands that export no telemetry). A process
/// keeps the first subscriber it sets.
pub fn init_logging(level: u8) {
    let _ = Registry::default().with(log_layer(level)).try_init();
}

/// The resource describing this process: `OTEL_SERVICE_NAME` or
/// `service.name` in `OTEL_RESOURCE_ATTRIBUTES` if given, else `service`.
fn resource(service: &'static str) -> Resource {
    let named = std::env::var("OTEL_SERVICE_NAME").is_ok_and(|v| !v.trim().is_empty())
        || std::env::var("OTEL_RESOURCE_ATTRIBUTES").is_ok_and(|v| {
            v.split(',')
                .any(|kv| kv.trim().starts_with("service.name="))
        });
    let builder = Resource::builder();
    if named {
        builder.build()
    } else {
        builder.with_service_name(service).build()
    }
}

/// The installed telemetry of a process: flushes and stops its exporters
/// on [`shutdown`](Self::shutdown).
#[derive(Debug)]
pub struct Telemetry {
    meters: Option<SdkMeterProvider>,
    tracers: Option<SdkTracerProvider>,
    metrics_server: Option<http::MetricsServer>,
}

impl Telemetry {
    /// Sets up logging at `log_level` plus what `config` asks for, with
    /// `service` as the default service name, and installs it as the
    /// process's subscriber (and the OpenTelemetry globals). Needs a Tokio
    /// runtime. Logs what is exported at info level.
    ///
    /// Errors: [`TelemetryError`]: the `/metrics` address cannot be bound,
    /// or an exporter cannot be built from the `OTEL_EXPORTER_OTLP_*`
    /// variables.
    pub async fn install(
        config: &TelemetryConfig,
        service: &'static str,
        log_level: u8,
    ) -> Result<Self, TelemetryError> {
        let resource = resource(service);
        let mut metrics_server = None;
        let mut meters = None;
        let mut metrics_layer = None;
        if config.metrics() {
            let mut builder = SdkMeterProvider::builder().with_resource(resource.clone());
            if let Some(endpoint) = &config.prometheus {
                let registry = prometheus::Registry::new();
                let exporter = opentelemetry_prometheus::exporter()
                    .with_registry(registry.clone())
                    .scope_info_enabled(false)
                    .build()
                    .map_err(|e| TelemetryError::Exporter {
                        what: "Prometheus exporter",
                        detail: e.to_string(),
                    })?;
                builder = builder.with_reader(exporter);
                let server = http::MetricsServer::start(&endpoint.host, endpoint.port, registry)
                    .await
                    .map_err(|source| TelemetryError::Bind {
                        host: endpoint.host.clone(),
                        port: endpoint.port,
                        source,
                    })?;
                metrics_server = Some(server);
            }
            if config.otlp_metrics {
                let exporter = opentelemetry_otlp::MetricExporter::builder()
                    .build()
                    .map_err(|e| TelemetryError::Exporter {
                        what: "OTLP metric exporter (OTEL_EXPORTER_OTLP_*)",
                        detail: e.to_string(),
                    })?;
                builder = builder.with_periodic_exporter(exporter);
            }
            let provider = builder.build();
            opentelemetry::global::set_meter_provider(provider.clone());
            metrics_layer = Some(
                metrics::layer(opentelemetry::metrics::MeterProvider::meter(
                    &provider, SCOPE,
                ))
                .with_filter(filter_fn(|m| m.target() == spans::TARGET)),
            );
            meters = Some(provider);
        }

        let mut tracers = None;
        let mut trace_layer = None;
        if config.otlp_traces {
            let exporter = opentelemetry_otlp::SpanExporter::builder()
                .build()
                .map_err(|e| TelemetryError::Exporter {
                    what: "OTLP span exporter (OTEL_EXPORTER_OTLP_*)",
                    detail: e.to_string(),
                })?;
            let provider = SdkTracerProvider::builder()
                .with_resource(resource)
                .with_batch_exporter(exporter)
                .build();
            let layer = tracing_opentelemetry::layer()
                .with_tracer(provider.tracer(SCOPE))
                .with_threads(false)
                .with_location(false)
                .with_filter(
                    Targets::new()
                        .with_target("krm_fn_runner", Level::INFO)
                        .with_target(spans::TARGET, Level::DEBUG),
                );
            trace_layer = Some(layer);
            tracers = Some(provider);
        }
        let propagators: Vec<Box<dyn TextMapPropagator + Send + Sync>> = config
            .propagators
            .iter()
            .map(|p| -> Box<dyn TextMapPropagator + Send + Sync> {
                match p {
                    Propagator::TraceContext => Box::new(TraceContextPropagator::new()),
                    Propagator::Baggage => Box::new(BaggagePropagator::new()),
                }
            })
            .collect();
        opentelemetry::global::set_text_map_propagator(TextMapCompositePropagator::new(
            propagators,
        ));

        let _ = Registry::default()
            .with(log_layer(log_level))
            .with(metrics_layer)
            .with(trace_layer)
            .try_init();
        let telemetry = Self {
            meters,
            tracers,
            metrics_server,
        };
        telemetry.announce(config);
        Ok(telemetry)
    }

    /// Logs what is exported; the `/metrics` address goes to stderr whatever
    /// the log level (tests and scripts read it when the port is 0).
    fn announce(&self, config: &TelemetryConfig) {
        if let Some(address) = self.metrics_address() {
            eprintln!("metrics served on http://{address}/metrics");
        }
        tracing::info!(
            prometheus = self.metrics_address().map(|a| a.to_string()),
            otlp_metrics = config.otlp_metrics,
            otlp_traces = config.otlp_traces,
            "telemetry ready"
        );
    }

    /// Where `/metrics` is served, if it is.
    pub fn metrics_address(&self) -> Option<SocketAddr> {
        self.metrics_server
            .as_ref()
            .map(http::MetricsServer::address)
    }

    /// Exports what is still buffered (spans, a last metrics push) and stops
    /// the exporters and the `/metrics` server.
    pub async fn shutdown(self) {
        drop(self.metrics_server);
        let (tracers, meters) = (self.tracers, self.meters);
        if tracers.is_none() && meters.is_none() {
            return;
        }
        // The SDK's shutdown blocks until the exporters are done.
        let done = tokio::task::spawn_blocking(move || {
            if let Some(Err(e)) = tracers.map(|t| t.shutdown()) {
                tracing::warn!("exporting the last spans failed: {e}");
            }
            if let Some(Err(e)) = meters.map(|m| m.shutdown()) {
                tracing::warn!("exporting the last metrics failed: {e}");
            }
        });
        let _ = done.await;
    }
}
