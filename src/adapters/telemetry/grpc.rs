//! Telemetry at the gRPC boundary: a tower layer that opens the per-call
//! span of every `EvaluateFunction` call, continuing the trace context the
//! caller sent in its metadata (Porch's client sends W3C `traceparent`
//! through otelgrpc) and recording the call's gRPC code; and the injection
//! of the current trace context into calls the runner makes (to wrapper
//! servers).

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};

use opentelemetry::propagation::{Extractor, Injector};
use opentelemetry::trace::TraceContextExt;
use tonic::metadata::{MetadataKey, MetadataMap, MetadataValue};
use tracing::{Instrument, Span};
use tracing_opentelemetry::OpenTelemetrySpanExt;

use super::spans;

/// The HTTP/2 path of `evaluator.FunctionEvaluator/EvaluateFunction`.
pub const EVALUATE_PATH: &str = "/evaluator.FunctionEvaluator/EvaluateFunction";

/// The canonical name of gRPC status code `code` (`NOT_FOUND`…), as the
/// RPC semantic conventions' `rpc.response.status_code` spells it.
pub fn code_name(code: i32) -> &'static str {
    match code {
        0 => "OK",
        1 => "CANCELLED",
        2 => "UNKNOWN",
        3 => "INVALID_ARGUMENT",
        4 => "DEADLINE_EXCEEDED",
        5 => "NOT_FOUND",
        6 => "ALREADY_EXISTS",
        7 => "PERMISSION_DENIED",
        8 => "RESOURCE_EXHAUSTED",
        9 => "FAILED_PRECONDITION",
        10 => "ABORTED",
        11 => "OUT_OF_RANGE",
        12 => "UNIMPLEMENTED",
        13 => "INTERNAL",
        14 => "UNAVAILABLE",
        15 => "DATA_LOSS",
        16 => "UNAUTHENTICATED",
        _ => "UNKNOWN",
    }
}

/// Codes that mark a server span as failed (the gRPC semantic conventions:
/// the server's fault, not the caller's).
fn server_error(code: i32) -> bool {
    matches!(code, 2 | 4 | 12 | 13 | 14 | 15)
}

/// Reads W3C trace context from HTTP/2 request headers.
struct HeaderExtractor<'a>(&'a http::HeaderMap);

impl Extractor for HeaderExtractor<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(|v| v.to_str().ok())
    }

    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(|k| k.as_str()).collect()
    }
}

/// Writes trace context into outgoing gRPC metadata.
struct MetadataInjector<'a>(&'a mut MetadataMap);

impl Injector for MetadataInjector<'_> {
    fn set(&mut self, key: &str, value: String) {
        if let (Ok(k), Ok(v)) = (
            MetadataKey::from_bytes(key.as_bytes()),
            MetadataValue::try_from(value.as_str()),
        ) {
            self.0.insert(k, v);
        }
    }
}

/// Adds the current span's trace context (`traceparent`, and `baggage`
/// when configured) to `metadata`, so the callee continues the trace.
/// Does nothing when traces are off.
pub fn inject_context(metadata: &mut MetadataMap) {
    let cx = Span::current().context();
    if !cx.span().span_context().is_valid() {
        return;
    }
    opentelemetry::global::get_text_map_propagator(|p| {
        p.inject_context(&cx, &mut MetadataInjector(metadata))
    });
}

/// Makes `span` continue the trace whose context `headers` carry, if any.
fn continue_remote_trace(span: &Span, headers: &http::HeaderMap) {
    let cx =
        opentelemetry::global::get_text_map_propagator(|p| p.extract(&HeaderExtractor(headers)));
    if cx.span().span_context().is_valid() {
        // Fails only without the OpenTelemetry layer (traces off).
        let _ = span.set_parent(cx);
    }
}

/// Records the answer's gRPC code on the per-call span.
fn record_code(span: &Span, code: i32) {
    span.record("code", code_name(code));
    span.record("rpc.grpc.status_code", code);
    if server_error(code) {
        span.record("otel.status_code", "ERROR");
    }
}

static REQUEST_ID: AtomicU64 = AtomicU64::new(1);

/// Tower layer opening the per-call span ([`spans::evaluate`]) of each
/// `EvaluateFunction` call; other calls (health) pass through untouched.
#[derive(Debug, Clone, Copy, Default)]
pub struct EvaluationLayer;

impl<S> tower::Layer<S> for EvaluationLayer {
    type Service = EvaluationService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        EvaluationService { inner }
    }
}

/// The service of [`EvaluationLayer`].
#[derive(Debug, Clone)]
pub struct EvaluationService<S> {
    inner: S,
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

impl<S, B, RB> tower::Service<http::Request<B>> for EvaluationService<S>
where
    S: tower::Service<http::Request<B>, Response = http::Response<RB>>,
    S::Future: Send + 'static,
    S::Error: 'static,
    RB: 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = BoxFuture<Result<S::Response, S::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    /// The span lasts from the call's arrival until its answer is ready:
    /// the code is `grpc-status` of a trailers-only answer (every error),
    /// else OK; a call dropped first (the caller went away) closes the span
    /// without a code, which the metrics count as CANCELLED.
    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        if req.uri().path() != EVALUATE_PATH {
            return Box::pin(self.inner.call(req));
        }
        let span = spans::evaluate(REQUEST_ID.fetch_add(1, Ordering::Relaxed));
        continue_remote_trace(&span, req.headers());
        let future = span.in_scope(|| self.inner.call(req));
        let record = span.clone();
        Box::pin(async move {
            let result = future.instrument(span).await;
            let code = match &result {
                Ok(response) => response
                    .headers()
                    .get("grpc-status")
                    .and_then(|v| v.to_str().ok())
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(0),
                Err(_) => 2,
            };
            record_code(&record, code);
            result
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn code_names_follow_the_grpc_spelling() {
        assert_eq!(code_name(0), "OK");
        assert_eq!(code_name(5), "NOT_FOUND");
        assert_eq!(code_name(13), "INTERNAL");
        assert_eq!(code_name(99), "UNKNOWN");
        assert!(server_error(13) && !server_error(5) && !server_error(3));
    }
}
