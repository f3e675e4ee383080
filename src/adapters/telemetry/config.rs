//! Telemetry settings from the OpenTelemetry SDK's environment variables,
//! the ones Porch's manifests set on the runner and on function pods.
//!
//! | variable | values | unset |
//! |---|---|---|
//! | `OTEL_METRICS_EXPORTER` | `prometheus`, `otlp`, both comma-separated, or `none` | `none` |
//! | `OTEL_EXPORTER_PROMETHEUS_HOST` | host name or address to serve `/metrics` on | `localhost` |
//! | `OTEL_EXPORTER_PROMETHEUS_PORT` | TCP port, `0` for any free one | `9464` |
//! | `OTEL_TRACES_EXPORTER` | `otlp` or `none` | `none` |
//! | `OTEL_EXPORTER_OTLP_PROTOCOL` (and `_TRACES_`/`_METRICS_` forms) | `grpc`, `http/protobuf` | `http/protobuf` |
//! | `OTEL_PROPAGATORS` | `tracecontext`, `baggage`, comma-separated, or `none` | `tracecontext,baggage` |
//! | `OTEL_SDK_DISABLED` | `true` turns every exporter off | `false` |
//!
//! `OTEL_SERVICE_NAME`, `OTEL_RESOURCE_ATTRIBUTES`, `OTEL_EXPORTER_OTLP_ENDPOINT`,
//! `_HEADERS`, `_TIMEOUT` and the `OTEL_BSP_*` batch settings
//! are read by the OpenTelemetry SDK itself.
//!
//! Unset exporters are off, unlike the OpenTelemetry SDK's default of `otlp`
//! (Porch's Go SDK): a runner started without telemetry settings opens no
//! extra port and dials no collector, so nothing retries exports to a
//! `localhost:4317` that is not there. Porch's manifests set both variables
//! explicitly, so they behave the same here.

use std::fmt;

/// Porch's and the OpenTelemetry specification's default Prometheus port.
pub const DEFAULT_PROMETHEUS_PORT: u16 = 9464;

/// The OpenTelemetry specification's default Prometheus host.
pub const DEFAULT_PROMETHEUS_HOST: &str = "localhost";

/// Where `/metrics` is served.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PrometheusEndpoint {
    /// `OTEL_EXPORTER_PROMETHEUS_HOST`.
    pub host: String,
    /// `OTEL_EXPORTER_PROMETHEUS_PORT` (0: any free port).
    pub port: u16,
}

/// A W3C propagator named in `OTEL_PROPAGATORS`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Propagator {
    /// `tracecontext`: the `traceparent` and `tracestate` headers.
    TraceContext,
    /// `baggage`: the `baggage` header.
    Baggage,
}

/// What the process exports, read from the environment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TelemetryConfig {
    /// Serve metrics in Prometheus text format here.
    pub prometheus: Option<PrometheusEndpoint>,
    /// Push metrics over OTLP (`OTEL_METRICS_EXPORTER` contains `otlp`).
    pub otlp_metrics: bool,
    /// Export spans over OTLP (`OTEL_TRACES_EXPORTER=otlp`).
    pub otlp_traces: bool,
    /// How trace context travels in gRPC metadata, in and out.
    pub propagators: Vec<Propagator>,
}

/// A telemetry variable with a value the runner cannot use; startup stops.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    /// The variable.
    pub variable: &'static str,
    /// Its value.
    pub value: String,
    /// What it may be instead.
    pub expected: &'static str,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}={:?} is not supported: use {}",
            self.variable, self.value, self.expected
        )
    }
}

impl std::error::Error for ConfigError {}

/// The protocol variables checked at startup (the SDK would only warn and
/// fall back to its default).
const PROTOCOL_VARIABLES: [&str; 3] = [
    "OTEL_EXPORTER_OTLP_PROTOCOL",
    "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
    "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL",
];

/// Splits a comma-separated list, trimming and lower-casing entries and
/// dropping empty ones.
fn list(value: &str) -> Vec<String> {
    value
        .split(',')
        .map(|s| s.trim().to_ascii_lowercase())
        .filter(|s| !s.is_empty())
        .collect()
}

impl TelemetryConfig {
    /// Everything off: what a process without telemetry variables gets.
    pub fn disabled() -> Self {
        Self {
            prometheus: None,
            otlp_metrics: false,
            otlp_traces: false,
            propagators: vec![Propagator::TraceContext, Propagator::Baggage],
        }
    }

    /// Reads the process environment.
    ///
    /// Errors: see [`from_lookup`](Self::from_lookup).
    pub fn from_env() -> Result<Self, ConfigError> {
        Self::from_lookup(|name| std::env::var(name).ok())
    }

    /// Reads the variables through `lookup` (name → value).
    ///
    /// Errors: an exporter, protocol or propagator name not listed in the
    /// module table, `none` combined with another exporter, or an
    /// `OTEL_EXPORTER_PROMETHEUS_PORT` that is not a number from 0 to 65535.
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<Self, ConfigError> {
        let get = |name: &str| lookup(name).filter(|v| !v.trim().is_empty());
        let mut config = Self::disabled();
        if get("OTEL_SDK_DISABLED").is_some_and(|v| v.trim().eq_ignore_ascii_case("true")) {
            return Ok(config);
        }

        if let Some(value) = get("OTEL_METRICS_EXPORTER") {
            let bad = || ConfigError {
                variable: "OTEL_METRICS_EXPORTER",
                value: value.clone(),
                expected: "prometheus, otlp, prometheus,otlp or none",
            };
            let names = list(&value);
            let mut prometheus = false;
            for name in &names {
                match name.as_str() {
                    "prometheus" => prometheus = true,
                    "otlp" => config.otlp_metrics = true,
                    "none" if names.len() == 1 => {}
                    _ => return Err(bad()),
                }
            }
            if prometheus {
                let host = get("OTEL_EXPORTER_PROMETHEUS_HOST")
                    .map(|h| h.trim().to_string())
                    .unwrap_or_else(|| DEFAULT_PROMETHEUS_HOST.to_string());
                let port = match get("OTEL_EXPORTER_PROMETHEUS_PORT") {
                    None => DEFAULT_PROMETHEUS_PORT,
                    Some(p) => p.trim().parse().map_err(|_| ConfigError {
                        variable: "OTEL_EXPORTER_PROMETHEUS_PORT",
                        value: p.clone(),
                        expected: "a TCP port number from 0 to 65535 (default 9464)",
                    })?,
                };
                config.prometheus = Some(PrometheusEndpoint { host, port });
            }
        }

        if let Some(value) = get("OTEL_TRACES_EXPORTER") {
            match list(&value).as_slice() {
                [one] if one == "otlp" => config.otlp_traces = true,
                [one] if one == "none" => {}
                _ => {
                    return Err(ConfigError {
                        variable: "OTEL_TRACES_EXPORTER",
                        value,
                        expected: "otlp or none",
                    });
                }
            }
        }

        if config.otlp_traces || config.otlp_metrics {
            for variable in PROTOCOL_VARIABLES {
                if let Some(value) = get(variable)
                    && !matches!(value.trim(), "grpc" | "http/protobuf")
                {
                    return Err(ConfigError {
                        variable,
                        value,
                        expected: "grpc or http/protobuf",
                    });
                }
            }
        }

        if let Some(value) = get("OTEL_PROPAGATORS") {
            let names = list(&value);
            let mut propagators = Vec::new();
            for name in &names {
                match name.as_str() {
                    "tracecontext" => propagators.push(Propagator::TraceContext),
                    "baggage" => propagators.push(Propagator::Baggage),
                    "none" if names.len() == 1 => {}
                    _ => {
                        return Err(ConfigError {
                            variable: "OTEL_PROPAGATORS",
                            value,
                            expected: "tracecontext, baggage, tracecontext,baggage or none",
                        });
                    }
                }
            }
            config.propagators = propagators;
        }
        Ok(config)
    }

    /// Whether any metrics exporter is on.
    pub fn metrics(&self) -> bool {
        self.prometheus.is_some() || self.otlp_metrics
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn read(vars: &[(&str, &str)]) -> Result<TelemetryConfig, ConfigError> {
        let map: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        TelemetryConfig::from_lookup(|k| map.get(k).cloned())
    }

    #[test]
    fn unset_means_off() {
        assert_eq!(read(&[]).unwrap(), TelemetryConfig::disabled());
    }

    #[test]
    fn porch_runner_manifest() {
        let c = read(&[
            ("OTEL_METRICS_EXPORTER", "prometheus"),
            ("OTEL_EXPORTER_PROMETHEUS_HOST", "0.0.0.0"),
            ("OTEL_EXPORTER_PROMETHEUS_PORT", "9464"),
            ("OTEL_TRACES_EXPORTER", "none"),
            ("OTEL_SERVICE_NAME", "porch-function-runner"),
        ])
        .unwrap();
        assert_eq!(
            c.prometheus,
            Some(PrometheusEndpoint {
                host: "0.0.0.0".into(),
                port: 9464
            })
        );
        assert!(!c.otlp_traces && !c.otlp_metrics);
    }

    #[test]
    fn porch_pod_template_defaults_the_port() {
        let c = read(&[
            ("OTEL_METRICS_EXPORTER", "prometheus"),
            ("OTEL_TRACES_EXPORTER", "none"),
            ("OTEL_EXPORTER_PROMETHEUS_HOST", "0.0.0.0"),
        ])
        .unwrap();
        assert_eq!(c.prometheus.unwrap().port, DEFAULT_PROMETHEUS_PORT);
    }

    #[test]
    fn otlp_everything() {
        let c = read(&[
            ("OTEL_METRICS_EXPORTER", "prometheus, OTLP"),
            ("OTEL_TRACES_EXPORTER", "otlp"),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
            ("OTEL_PROPAGATORS", "tracecontext"),
        ])
        .unwrap();
        assert!(c.otlp_metrics && c.otlp_traces && c.prometheus.is_some());
        assert_eq!(c.propagators, vec![Propagator::TraceContext]);
    }

    #[test]
    fn misconfiguration_names_the_variable_and_the_choices() {
        let e = read(&[("OTEL_METRICS_EXPORTER", "prometheous")]).unwrap_err();
        assert_eq!(
            e.to_string(),
            "OTEL_METRICS_EXPORTER=\"prometheous\" is not supported: use prometheus, otlp, prometheus,otlp or none"
        );
        let e = read(&[
            ("OTEL_METRICS_EXPORTER", "prometheus"),
            ("OTEL_EXPORTER_PROMETHEUS_PORT", "94640"),
        ])
        .unwrap_err();
        assert_eq!(e.variable, "OTEL_EXPORTER_PROMETHEUS_PORT");
        assert_eq!(
            read(&[("OTEL_TRACES_EXPORTER", "jaeger")])
                .unwrap_err()
                .variable,
            "OTEL_TRACES_EXPORTER"
        );
        assert_eq!(
            read(&[("OTEL_METRICS_EXPORTER", "none,prometheus")])
                .unwrap_err()
                .variable,
            "OTEL_METRICS_EXPORTER"
        );
        assert_eq!(
            read(&[
                ("OTEL_TRACES_EXPORTER", "otlp"),
                ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "http/json")
            ])
            .unwrap_err()
            .variable,
            "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"
        );
        assert_eq!(
            read(&[("OTEL_PROPAGATORS", "b3")]).unwrap_err().variable,
            "OTEL_PROPAGATORS"
        );
    }

    #[test]
    fn sdk_disabled_wins() {
        let c = read(&[
            ("OTEL_SDK_DISABLED", "true"),
            ("OTEL_METRICS_EXPORTER", "prometheus"),
            ("OTEL_TRACES_EXPORTER", "otlp"),
        ])
        .unwrap();
        assert_eq!(c, TelemetryConfig::disabled());
    }
}
