//! The spans of one evaluation: the only telemetry hooks the evaluators
//! carry. Each phase is a `tracing` span; the telemetry layers turn the same
//! spans into OpenTelemetry spans (traces) and into latency histograms
//! (metrics), so a hook is one span and nothing else.
//!
//! | span (OpenTelemetry name) | level | opened by | fields |
//! |---|---|---|---|
//! | `evaluate` (`evaluator.FunctionEvaluator/EvaluateFunction`, kind server) | info | the gRPC server layer, per call | `request_id`, `image`, `runtime`, `code`, `rpc.*` |
//! | `pod.wait` | debug | the pod evaluator, while it waits for a pod | `image` |
//! | `pod.start` | debug | the pod runtime, from pod creation to ready or failed | `image`, `pod`, `outcome` |
//! | `function.run` | debug | each runtime, around the function itself | `runtime`, `image` |
//!
//! Phase spans are at debug level so that, with telemetry off, they cost
//! nothing at the default log level; the telemetry layers enable them for
//! themselves whatever the log level.

use std::collections::HashMap;
use std::hash::Hash;

use tracing::Span;
use tracing::field::{Empty, display};

/// The `tracing` target of every span here.
pub const TARGET: &str = "krm_fn_runner::telemetry";
/// Name of the per-call span.
pub const EVALUATE: &str = "evaluate";
/// Name of the span of a call waiting for a function pod.
pub const POD_WAIT: &str = "pod.wait";
/// Name of the span of one function pod's start.
pub const POD_START: &str = "pod.start";
/// Name of the span of the function itself.
pub const FUNCTION_RUN: &str = "function.run";

/// The OpenTelemetry name of the per-call span: the RPC semantic
/// conventions' `{rpc.service}/{rpc.method}`, as otelgrpc names it in Porch.
pub const EVALUATE_OTEL_NAME: &str = "evaluator.FunctionEvaluator/EvaluateFunction";

/// The span of one `EvaluateFunction` call, a server span under the RPC
/// semantic conventions. `image`, `tag`, `runtime` and `code` are recorded
/// later ([`record_image`], [`record_tag`], [`claim`], the server layer).
pub fn evaluate(request_id: u64) -> Span {
    tracing::info_span!(
        target: TARGET,
        "evaluate",
        otel.name = EVALUATE_OTEL_NAME,
        otel.kind = "server",
        otel.status_code = Empty,
        rpc.system = "grpc",
        rpc.service = "evaluator.FunctionEvaluator",
        rpc.method = "EvaluateFunction",
        rpc.grpc.status_code = Empty,
        request_id,
        image = Empty,
        tag = Empty,
        runtime = Empty,
        code = Empty,
    )
}

/// Records the requested image on the current (per-call) span.
pub fn record_image(image: &str) {
    Span::current().record("image", display(image));
}

/// Records the step's tag (`EvaluateFunctionRequest.Tag`, a literal or a
/// semver constraint) on the current (per-call) span, when the caller sent one.
pub fn record_tag(tag: &str) {
    Span::current().record("tag", display(tag));
}

/// Records on the current (per-call) span that `runtime` (`exec`, `pod`,
/// `wrapper`) took the call. Called by a runtime once it knows it serves
/// the image; a call no runtime claims is counted with runtime `none`.
pub fn claim(runtime: &'static str) {
    Span::current().record("runtime", display(runtime));
}

/// The span of a call waiting for a pod of `image`.
pub fn pod_wait(image: &str) -> Span {
    tracing::debug_span!(target: TARGET, "pod.wait", image = %image)
}

/// The span of `runtime` running the function of `image` (a process, or
/// the call to the wrapper server in a function pod).
pub fn function_run(runtime: &'static str, image: &str) -> Span {
    tracing::debug_span!(target: TARGET, "function.run", runtime, image = %image)
}

/// Open `pod.start` spans, one per pod being started, keyed by whatever
/// identifies a start (the pod cache's slot). Its parent is the span
/// current when the start began: the `pod.wait` of the call that caused it,
/// or none for warm-up.
#[derive(Debug)]
pub struct PodStarts<K> {
    open: HashMap<K, Span>,
}

impl<K: Eq + Hash> Default for PodStarts<K> {
    fn default() -> Self {
        Self {
            open: HashMap::new(),
        }
    }
}

impl<K: Eq + Hash> PodStarts<K> {
    /// Opens the span of starting pod `pod` of `image` under `key`.
    pub fn begin(&mut self, key: K, image: &str, pod: &str) {
        let span = tracing::debug_span!(
            target: TARGET,
            "pod.start",
            image = %image,
            pod = %pod,
            outcome = Empty,
        );
        if !span.is_disabled() {
            self.open.insert(key, span);
        }
    }

    /// Closes the span under `key` with outcome `ready` or `failed`; a key
    /// with no open span (already closed, or telemetry off) is ignored.
    pub fn end(&mut self, key: &K, ready: bool) {
        if let Some(span) = self.open.remove(key) {
            span.record("outcome", if ready { "ready" } else { "failed" });
        }
    }

    /// Closes every open span as failed (the pod runtime stops).
    pub fn clear(&mut self) {
        for (_, span) in self.open.drain() {
            span.record("outcome", "failed");
        }
    }
}
