//! Metrics: the instruments, and the `tracing` layer that feeds them from
//! the spans of [`super::spans`].
//!
//! | OpenTelemetry instrument | Prometheus name | type | labels |
//! |---|---|---|---|
//! | `krm_fn_runner.evaluations` | `krm_fn_runner_evaluations_total` | counter | `image`, `runtime`, `code` |
//! | `krm_fn_runner.evaluation.duration` (s) | `krm_fn_runner_evaluation_duration_seconds` | histogram | `image`, `runtime`, `code` |
//! | `krm_fn_runner.evaluations.in_flight` | `krm_fn_runner_evaluations_in_flight` | gauge | |
//! | `krm_fn_runner.pod.wait.duration` (s) | `krm_fn_runner_pod_wait_duration_seconds` | histogram | `image` |
//! | `krm_fn_runner.pod.start.duration` (s) | `krm_fn_runner_pod_start_duration_seconds` | histogram | `image`, `outcome` |
//! | `krm_fn_runner.function.run.duration` (s) | `krm_fn_runner_function_run_duration_seconds` | histogram | `image`, `runtime` |
//! | `krm_fn_runner.pods` | `krm_fn_runner_pods` | gauge | `image`, `state` |
//! | `krm_fn_runner.pod.waiting_requests` | `krm_fn_runner_pod_waiting_requests` | gauge | `image` |
//! | `krm_fn_runner.exec.processes` | `krm_fn_runner_exec_processes` | gauge | |
//! | `krm_fn_runner.admission.denials` | `krm_fn_runner_admission_denials_total` | counter | `rule` |
//! | `krm_fn_runner.connections.aged` | `krm_fn_runner_connections_aged_total` | counter | `outcome` |
//! | `krm_fn_runner.connections` | `krm_fn_runner_connections` | gauge | |
//! | `krm_fn_runner.tag_lists` | `krm_fn_runner_tag_lists_total` | counter | `result` |
//!
//! Image labels are bounded: a call no runtime took (NOT_FOUND, a request
//! refused before evaluation) is labelled [`OTHER_IMAGE`], and so is every
//! image after the first [`MAX_IMAGE_LABELS`] distinct ones and any image
//! longer than [`MAX_IMAGE_LABEL_BYTES`].

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::sync::{Arc, Mutex, OnceLock, RwLock};
use std::time::Instant;

use opentelemetry::metrics::{Counter, Histogram, Meter, UpDownCounter};
use opentelemetry::{KeyValue, StringValue, Value};
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Subscriber, span};
use tracing_subscriber::Layer;
use tracing_subscriber::layer::Context;
use tracing_subscriber::registry::LookupSpan;

use super::spans;

/// The image label of calls no runtime took, and of images past the cap
/// (the name follows the semantic conventions' `_OTHER` for folded values).
pub const OTHER_IMAGE: &str = "_OTHER";
/// Distinct image label values kept per process.
pub const MAX_IMAGE_LABELS: usize = 100;
/// Longest image label kept, in bytes.
pub const MAX_IMAGE_LABEL_BYTES: usize = 256;

/// Histogram bucket boundaries, in seconds: the semantic conventions'
/// advice for request durations, extended to two minutes for pod starts.
pub const DURATION_BUCKETS: [f64; 17] = [
    0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 30.0, 60.0,
    120.0,
];

/// Instrument names (OpenTelemetry form; see the module table for the
/// Prometheus names).
pub mod names {
    /// Calls answered, by image, runtime and gRPC code.
    pub const EVALUATIONS: &str = "krm_fn_runner.evaluations";
    /// Whole-call latency.
    pub const EVALUATION_DURATION: &str = "krm_fn_runner.evaluation.duration";
    /// Calls being evaluated now (arrived, not answered yet).
    pub const EVALUATIONS_IN_FLIGHT: &str = "krm_fn_runner.evaluations.in_flight";
    /// Time a call waited for a function pod.
    pub const POD_WAIT_DURATION: &str = "krm_fn_runner.pod.wait.duration";
    /// Time from creating a function pod to ready (or failed).
    pub const POD_START_DURATION: &str = "krm_fn_runner.pod.start.duration";
    /// Time the function itself ran.
    pub const FUNCTION_RUN_DURATION: &str = "krm_fn_runner.function.run.duration";
    /// Function pods by state.
    pub const PODS: &str = "krm_fn_runner.pods";
    /// Calls queued on pods that are not ready yet.
    pub const POD_WAITING_REQUESTS: &str = "krm_fn_runner.pod.waiting_requests";
    /// Function processes running.
    pub const EXEC_PROCESSES: &str = "krm_fn_runner.exec.processes";
    /// Calls the function admission policy refused, by deciding rule.
    pub const ADMISSION_DENIALS: &str = "krm_fn_runner.admission.denials";
    /// Connections that reached their maximum age (GOAWAY sent), by outcome.
    pub const CONNECTIONS_AGED: &str = "krm_fn_runner.connections.aged";
    /// Client connections open now.
    pub const CONNECTIONS: &str = "krm_fn_runner.connections";
    /// Registry tag lists the pod runtime needed to resolve a step's tag
    /// constraint, by result.
    pub const TAG_LISTS: &str = "krm_fn_runner.tag_lists";
}

/// Bounded set of image label values.
#[derive(Debug)]
pub(crate) struct ImageLabels {
    known: RwLock<HashSet<Arc<str>>>,
    other: Arc<str>,
}

impl ImageLabels {
    fn new() -> Self {
        Self {
            known: RwLock::new(HashSet::new()),
            other: Arc::from(OTHER_IMAGE),
        }
    }

    /// The label for `image`: itself while there is room, else [`OTHER_IMAGE`].
    fn label(&self, image: &str) -> Arc<str> {
        if image.is_empty() || image.len() > MAX_IMAGE_LABEL_BYTES {
            return self.other.clone();
        }
        if let Some(v) = self
            .known
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(image)
        {
            return v.clone();
        }
        let mut known = self.known.write().unwrap_or_else(|e| e.into_inner());
        if let Some(v) = known.get(image) {
            return v.clone();
        }
        if known.len() >= MAX_IMAGE_LABELS {
            return self.other.clone();
        }
        let v: Arc<str> = Arc::from(image);
        known.insert(v.clone());
        v
    }

    fn value(&self, image: Option<&str>) -> Value {
        let label = match image {
            Some(i) => self.label(i),
            None => self.other.clone(),
        };
        Value::String(StringValue::from(label))
    }
}

/// What the metrics need besides the layer: the meter (for gauges
/// registered later) and the image labels.
pub(crate) struct MetricsState {
    meter: Meter,
    images: Arc<ImageLabels>,
}

static STATE: OnceLock<MetricsState> = OnceLock::new();
static DENIALS: OnceLock<Counter<u64>> = OnceLock::new();
static AGED: OnceLock<Counter<u64>> = OnceLock::new();
static CONNECTIONS: OnceLock<UpDownCounter<i64>> = OnceLock::new();
static TAG_LISTS: OnceLock<Counter<u64>> = OnceLock::new();

/// Counts one tag list the pod runtime needed to resolve a step's tag
/// constraint (`krm_fn_runner_tag_lists_total{result}`): `result` is
/// `cached` when a list younger than `--tag-list-ttl` answered, `listed`
/// when the registry was asked, `failed` when asking it failed. Does
/// nothing when metrics are off.
pub fn count_tag_list(result: &'static str) {
    let Some(state) = STATE.get() else {
        return;
    };
    TAG_LISTS
        .get_or_init(|| {
            state
                .meter
                .u64_counter(names::TAG_LISTS)
                .with_unit("{list}")
                .with_description(
                    "Registry tag lists needed to resolve a step's tag constraint, by result: \
                     cached (no registry request), listed, failed",
                )
                .build()
        })
        .add(1, &[KeyValue::new("result", result)]);
}

/// The open-connections gauge (`krm_fn_runner_connections`), made on first
/// use; `None` when metrics are off.
fn connections_gauge() -> Option<&'static UpDownCounter<i64>> {
    let state = STATE.get()?;
    Some(CONNECTIONS.get_or_init(|| {
        let gauge = state
            .meter
            .i64_up_down_counter(names::CONNECTIONS)
            .with_unit("{connection}")
            .with_description("Client connections open now")
            .build();
        gauge.add(0, &[]);
        gauge
    }))
}

/// One open client connection in `krm_fn_runner_connections`, for as long
/// as it lives (from [`open_connection`]).
#[derive(Debug)]
pub struct OpenConnection(Option<&'static UpDownCounter<i64>>);

/// Counts a client connection as open until the returned guard is dropped.
/// Does nothing when metrics are off.
pub fn open_connection() -> OpenConnection {
    let gauge = connections_gauge();
    if let Some(g) = gauge {
        g.add(1, &[]);
    }
    OpenConnection(gauge)
}

impl Drop for OpenConnection {
    fn drop(&mut self) {
        if let Some(g) = self.0 {
            g.add(-1, &[]);
        }
    }
}

/// Counts one connection that reached its maximum age and was sent GOAWAY
/// (`krm_fn_runner_connections_aged_total{outcome}`): `outcome` is
/// `drained` when its calls finished within the grace, `cut` when calls
/// were still running at its end and were stopped. Does nothing when
/// metrics are off.
pub fn count_aged_connection(outcome: &'static str) {
    let Some(state) = STATE.get() else {
        return;
    };
    AGED.get_or_init(|| {
        state
            .meter
            .u64_counter(names::CONNECTIONS_AGED)
            .with_unit("{connection}")
            .with_description(
                "Client connections that reached --max-connection-age and were sent GOAWAY, by \
                 outcome: drained (calls finished within the grace) or cut (calls stopped)",
            )
            .build()
    })
    .add(1, &[KeyValue::new("outcome", outcome)]);
}

/// Counts one call refused by the function admission policy under `rule`
/// (`krm_fn_runner_admission_denials_total{rule}`; the label values are the
/// policy file's rule names and `default`, so they stay bounded). Does
/// nothing when metrics are off.
pub fn count_admission_denial(rule: &str) {
    let Some(state) = STATE.get() else {
        return;
    };
    DENIALS
        .get_or_init(|| {
            state
                .meter
                .u64_counter(names::ADMISSION_DENIALS)
                .with_unit("{call}")
                .with_description(
                    "Function calls refused by the admission policy, by deciding rule",
                )
                .build()
        })
        .add(1, &[KeyValue::new("rule", rule.to_string())]);
}

/// Builds the instruments on `meter` and returns the layer that feeds them.
/// The first call in a process also makes the meter available to
/// [`observe_pods`].
pub(crate) fn layer(meter: Meter) -> MetricsLayer {
    let images = Arc::new(ImageLabels::new());
    let seconds = |name: &'static str, description: &'static str| {
        meter
            .f64_histogram(name)
            .with_unit("s")
            .with_description(description)
            .with_boundaries(DURATION_BUCKETS.to_vec())
            .build()
    };
    let layer = MetricsLayer {
        evaluations: meter
            .u64_counter(names::EVALUATIONS)
            .with_unit("{evaluation}")
            .with_description("EvaluateFunction calls answered, by image, runtime and gRPC code")
            .build(),
        evaluation_duration: seconds(
            names::EVALUATION_DURATION,
            "Time from an EvaluateFunction call's arrival to its answer",
        ),
        in_flight: meter
            .i64_up_down_counter(names::EVALUATIONS_IN_FLIGHT)
            .with_unit("{evaluation}")
            .with_description(
                "EvaluateFunction calls arrived and not answered yet (a load signal for autoscaling)",
            )
            .build(),
        pod_wait: seconds(
            names::POD_WAIT_DURATION,
            "Time a call waited for a function pod (including its start, if it caused one)",
        ),
        pod_start: seconds(
            names::POD_START_DURATION,
            "Time from creating a function pod to its wrapper server answering, or to giving up",
        ),
        function_run: seconds(
            names::FUNCTION_RUN_DURATION,
            "Time the function itself ran: its process, or the call to its pod's wrapper server",
        ),
        exec_processes: meter
            .i64_up_down_counter(names::EXEC_PROCESSES)
            .with_unit("{process}")
            .with_description("Function processes running")
            .build(),
        images: images.clone(),
    };
    // Reported from the start, at 0: a replica that has had no call yet is
    // an idle replica to an autoscaler, not one without data.
    layer.in_flight.add(0, &[]);
    let _ = STATE.set(MetricsState { meter, images });
    // Reported from the start, at 0, like the in-flight gauge.
    connections_gauge();
    layer
}

/// A function pod's state as the `krm_fn_runner_pods` gauge reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum PodState {
    /// Being created, not ready yet.
    Starting,
    /// Ready, no call in it.
    Idle,
    /// Ready, serving at least one call.
    Busy,
}

impl PodState {
    const ALL: [PodState; 3] = [PodState::Starting, PodState::Idle, PodState::Busy];

    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            PodState::Starting => "starting",
            PodState::Idle => "idle",
            PodState::Busy => "busy",
        }
    }
}

/// One function pod as a sample for the pod gauges.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodSample {
    /// The function image (as the pod runtime resolved it).
    pub image: String,
    /// Its state.
    pub state: PodState,
    /// Calls queued on it while it starts.
    pub waiting: u64,
}

/// Pods per (image label, state), and waiting calls per image label.
type Census = (BTreeMap<(Arc<str>, PodState), u64>, BTreeMap<Arc<str>, u64>);

/// Pod counts per image label and state, and waiting calls per image label;
/// every image label ever seen is reported (zero when it has no pod), so a
/// function whose pods are gone reads 0 rather than its last count.
fn census(
    images: &ImageLabels,
    seen: &Mutex<BTreeSet<Arc<str>>>,
    samples: Vec<PodSample>,
) -> Census {
    let mut seen = seen.lock().unwrap_or_else(|e| e.into_inner());
    let mut pods = BTreeMap::new();
    let mut waiting = BTreeMap::new();
    for s in samples {
        let image = images.label(&s.image);
        seen.insert(image.clone());
        *pods.entry((image.clone(), s.state)).or_insert(0) += 1;
        *waiting.entry(image).or_insert(0) += s.waiting;
    }
    for image in seen.iter() {
        for state in PodState::ALL {
            pods.entry((image.clone(), state)).or_insert(0);
        }
        waiting.entry(image.clone()).or_insert(0);
    }
    (pods, waiting)
}

/// Registers the pod gauges (`krm_fn_runner_pods`,
/// `krm_fn_runner_pod_waiting_requests`), read from `source` at each
/// collection (a scrape). Does nothing when metrics are off.
pub fn observe_pods(source: impl Fn() -> Vec<PodSample> + Send + Sync + 'static) {
    let Some(state) = STATE.get() else {
        return;
    };
    let source = Arc::new(source);
    let seen = Arc::new(Mutex::new(BTreeSet::new()));
    let (images, s, seen2) = (state.images.clone(), source.clone(), seen.clone());
    state
        .meter
        .u64_observable_gauge(names::PODS)
        .with_unit("{pod}")
        .with_description("Function pods of this runner by function image and state")
        .with_callback(move |observer| {
            let (pods, _) = census(&images, &seen2, s());
            for ((image, state), n) in pods {
                observer.observe(
                    n,
                    &[
                        KeyValue::new("image", StringValue::from(image)),
                        KeyValue::new("state", state.as_str()),
                    ],
                );
            }
        })
        .build();
    let images = state.images.clone();
    state
        .meter
        .u64_observable_gauge(names::POD_WAITING_REQUESTS)
        .with_unit("{request}")
        .with_description("Calls waiting for a function pod that is starting, by function image")
        .with_callback(move |observer| {
            let (_, waiting) = census(&images, &seen, source());
            for (image, n) in waiting {
                observer.observe(n, &[KeyValue::new("image", StringValue::from(image))]);
            }
        })
        .build();
}

/// Which of our spans a span is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Evaluate,
    PodWait,
    PodStart,
    FunctionRun,
}

/// The fields the metrics read.
#[derive(Debug, Default)]
struct Fields {
    image: Option<String>,
    runtime: Option<String>,
    code: Option<String>,
    outcome: Option<String>,
}

impl Fields {
    fn slot(&mut self, field: &Field) -> Option<&mut Option<String>> {
        match field.name() {
            "image" => Some(&mut self.image),
            "runtime" => Some(&mut self.runtime),
            "code" => Some(&mut self.code),
            "outcome" => Some(&mut self.outcome),
            _ => None,
        }
    }
}

impl Visit for Fields {
    fn record_str(&mut self, field: &Field, value: &str) {
        if let Some(slot) = self.slot(field) {
            *slot = Some(value.to_string());
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if let Some(slot) = self.slot(field) {
            *slot = Some(format!("{value:?}"));
        }
    }
}

/// Timing state kept in a span's extensions.
///
/// A span can close well after its phase ended: the registry keeps a span
/// open while a child is open, and a `pod.start` caused by a call may
/// outlive that call. So a phase ends when its span was last exited (an
/// instrumented future completes), and a call is counted when its code is
/// recorded (its answer is ready), not when the span closes.
struct Timing {
    kind: Kind,
    start: Instant,
    last_exit: Option<Instant>,
    recorded: bool,
    fields: Fields,
}

/// Whether a `function.run` of `runtime` is a local process.
fn is_process(runtime: Option<&str>) -> bool {
    matches!(runtime, Some("exec" | "wrapper"))
}

/// The `tracing` layer that records the instruments from our spans:
/// evaluations and whole-call latency when an `evaluate` span closes, the
/// phase histograms when a phase span closes, and running processes while
/// a local `function.run` span is open.
pub(crate) struct MetricsLayer {
    evaluations: Counter<u64>,
    evaluation_duration: Histogram<f64>,
    in_flight: UpDownCounter<i64>,
    pod_wait: Histogram<f64>,
    pod_start: Histogram<f64>,
    function_run: Histogram<f64>,
    exec_processes: UpDownCounter<i64>,
    images: Arc<ImageLabels>,
}

impl MetricsLayer {
    fn kind(metadata: &tracing::Metadata<'_>) -> Option<Kind> {
        if metadata.target() != spans::TARGET {
            return None;
        }
        match metadata.name() {
            spans::EVALUATE => Some(Kind::Evaluate),
            spans::POD_WAIT => Some(Kind::PodWait),
            spans::POD_START => Some(Kind::PodStart),
            spans::FUNCTION_RUN => Some(Kind::FunctionRun),
            _ => None,
        }
    }

    fn record(&self, timing: &Timing, end: Instant) {
        let seconds = end.saturating_duration_since(timing.start).as_secs_f64();
        let f = &timing.fields;
        let text = |v: &Option<String>, default: &'static str| -> Value {
            v.clone().map(Value::from).unwrap_or(Value::from(default))
        };
        match timing.kind {
            Kind::Evaluate => {
                // A call no runtime took is folded into the other images.
                let image = if f.runtime.is_some() {
                    self.images.value(f.image.as_deref())
                } else {
                    self.images.value(None)
                };
                let labels = [
                    KeyValue::new("image", image),
                    KeyValue::new("runtime", text(&f.runtime, "none")),
                    // A call dropped before it was answered: the caller left.
                    KeyValue::new("code", text(&f.code, "CANCELLED")),
                ];
                self.evaluations.add(1, &labels);
                self.evaluation_duration.record(seconds, &labels);
                self.in_flight.add(-1, &[]);
            }
            Kind::PodWait => self.pod_wait.record(
                seconds,
                &[KeyValue::new(
                    "image",
                    self.images.value(f.image.as_deref()),
                )],
            ),
            Kind::PodStart => self.pod_start.record(
                seconds,
                &[
                    KeyValue::new("image", self.images.value(f.image.as_deref())),
                    KeyValue::new("outcome", text(&f.outcome, "failed")),
                ],
            ),
            Kind::FunctionRun => {
                if is_process(f.runtime.as_deref()) {
                    self.exec_processes.add(-1, &[]);
                }
                self.function_run.record(
                    seconds,
                    &[
                        KeyValue::new("image", self.images.value(f.image.as_deref())),
                        KeyValue::new("runtime", text(&f.runtime, "none")),
                    ],
                );
            }
        }
    }
}

impl<S> Layer<S> for MetricsLayer
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        let Some(kind) = Self::kind(attrs.metadata()) else {
            return;
        };
        let mut fields = Fields::default();
        attrs.record(&mut fields);
        if kind == Kind::FunctionRun && is_process(fields.runtime.as_deref()) {
            self.exec_processes.add(1, &[]);
        }
        if kind == Kind::Evaluate {
            self.in_flight.add(1, &[]);
        }
        if let Some(span) = ctx.span(id) {
            span.extensions_mut().insert(Timing {
                kind,
                start: Instant::now(),
                last_exit: None,
                recorded: false,
                fields,
            });
        }
    }

    fn on_record(&self, id: &span::Id, values: &Record<'_>, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(id) else {
            return;
        };
        if let Some(timing) = span.extensions_mut().get_mut::<Timing>() {
            values.record(&mut timing.fields);
            if timing.kind == Kind::Evaluate && timing.fields.code.is_some() && !timing.recorded {
                timing.recorded = true;
                self.record(timing, Instant::now());
            }
        }
    }

    fn on_exit(&self, id: &Id, ctx: Context<'_, S>) {
        if let Some(span) = ctx.span(id)
            && let Some(timing) = span.extensions_mut().get_mut::<Timing>()
        {
            timing.last_exit = Some(Instant::now());
        }
    }

    fn on_close(&self, id: Id, ctx: Context<'_, S>) {
        let timing = ctx
            .span(&id)
            .and_then(|span| span.extensions_mut().remove::<Timing>());
        if let Some(timing) = timing
            && !timing.recorded
        {
            self.record(&timing, timing.last_exit.unwrap_or_else(Instant::now));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn image_labels_are_capped_and_bounded_in_length() {
        let labels = ImageLabels::new();
        for i in 0..MAX_IMAGE_LABELS {
            assert_eq!(&*labels.label(&format!("img{i}")), format!("img{i}"));
        }
        assert_eq!(&*labels.label("one-too-many"), OTHER_IMAGE);
        assert_eq!(
            &*labels.label("img7"),
            "img7",
            "known images keep their label"
        );
        let fresh = ImageLabels::new();
        assert_eq!(&*fresh.label(&"x".repeat(300)), OTHER_IMAGE);
        assert_eq!(&*fresh.label(""), OTHER_IMAGE);
    }

    #[test]
    fn census_reports_zero_for_functions_whose_pods_are_gone() {
        let labels = ImageLabels::new();
        let seen = Mutex::new(BTreeSet::new());
        let sample = |state, waiting| PodSample {
            image: "a".into(),
            state,
            waiting,
        };
        let (pods, waiting) = census(
            &labels,
            &seen,
            vec![
                sample(PodState::Starting, 2),
                sample(PodState::Busy, 0),
                sample(PodState::Busy, 0),
            ],
        );
        let a: Arc<str> = Arc::from("a");
        assert_eq!(pods[&(a.clone(), PodState::Starting)], 1);
        assert_eq!(pods[&(a.clone(), PodState::Busy)], 2);
        assert_eq!(pods[&(a.clone(), PodState::Idle)], 0);
        assert_eq!(waiting[&a], 2);
        let (pods, waiting) = census(&labels, &seen, Vec::new());
        assert!(pods.values().all(|n| *n == 0) && pods.len() == 3);
        assert_eq!(waiting[&a], 0);
    }
}
