//! The pod-cache state machine: inputs in, commands out, no I/O.
//!
//! Semantics of Porch's current generation (spec §5.2–5.8, §5.12), with the
//! defects of spec §10 fixed by construction:
//! - outcomes name the slot they belong to ([`SlotId`]), never "the first
//!   pending slot" (item 6);
//! - the machine counts each slot's load itself and every exit path (reply
//!   with an error, call finished, cancelled) gives the unit back (items 4–5);
//! - waiters of a failed creation are moved to another slot of the image
//!   (counted and really queued) or get the error, never lost (item 5);
//! - pod names never repeat a live pod's name (items 7–8, [`naming`](super::naming));
//! - a pending slot has a creation deadline (items 15, 28);
//! - once an image has all its pods and each carries `max_load_per_pod`
//!   requests, further requests are rejected with a RESOURCE_EXHAUSTED-class
//!   error (item 33) — the driver never blocks on the machine (item 27);
//! - pods built from an older template are replaced on their next use and
//!   reclaimed by GC like any other pod, never orphaned (items 11, 29);
//! - expiry lives in the pod's reclaim-after annotation, extended on use at
//!   most once per half-TTL, and GC deletes only labelled pods whose
//!   reclaim-after has passed and that this replica does not use (item 25's
//!   silent disable is the driver's concern: it sends [`Input::Gc`]).

use std::collections::{BTreeSet, HashMap, HashSet, VecDeque};
use std::fmt;
use std::time::Duration;

use super::config::{FunctionSettings, PodCachePolicy};
use super::naming;
use super::time::UnixTime;
use crate::domain::image::ImageRef;

/// Identifies one connection request; chosen by the driver, unique among the
/// requests it has not released yet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RequestId(pub u64);

impl fmt::Display for RequestId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "request#{}", self.0)
    }
}

/// Identifies one pod slot; allocated by the machine, never reused. Pod
/// outcomes ([`Input::PodReady`], [`Input::PodFailed`]) carry it, so an
/// outcome always reaches the slot whose creation produced it (spec §10 item 6).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SlotId(pub u64);

impl fmt::Display for SlotId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "slot#{}", self.0)
    }
}

/// A pod as the platform reports it (from a pod list or watch), reduced to
/// what the pod cache decides on. Build it from a k8s `Pod` with
/// [`template::observe_pod`](super::template::observe_pod).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObservedPod {
    /// Pod name (also its service's name).
    pub name: String,
    /// The image of its `function` container.
    pub image: String,
    /// Whether it carries the [`IMAGE_LABEL`](super::IMAGE_LABEL) label; GC
    /// never touches pods without it.
    pub labelled: bool,
    /// Its [`TEMPLATE_VERSION_ANNOTATION`](super::TEMPLATE_VERSION_ANNOTATION), if any.
    pub template_version: Option<String>,
    /// Its [`SETTINGS_VERSION_ANNOTATION`](super::SETTINGS_VERSION_ANNOTATION), if any.
    pub settings_version: Option<String>,
    /// Its raw [`RECLAIM_AFTER_ANNOTATION`](super::RECLAIM_AFTER_ANNOTATION), if any.
    pub reclaim_after: Option<String>,
    /// Where it is in its life.
    pub phase: ObservedPhase,
}

/// The life stage of an observed pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ObservedPhase {
    /// Not ready yet (scheduling, pulling, starting).
    Pending,
    /// Running and ready; its service answers at `endpoint` (`host:port`).
    Ready {
        /// The wrapper's address, `<service>.<namespace>.svc.cluster.local:9446`.
        endpoint: String,
    },
    /// Phase `Failed`: it will never serve again.
    Failed,
    /// Has a deletion timestamp: already on its way out.
    Terminating,
}

/// An input to [`PodCache::handle`]. Every input comes with the time it is
/// handled at, so the machine never reads a clock.
#[derive(Debug, Clone, PartialEq)]
pub enum Input {
    /// A caller needs a pod for `image` (Porch's connection request). Answered
    /// by exactly one [`Command::Reply`] for `request`, now or later.
    Request {
        /// Fresh id chosen by the driver.
        request: RequestId,
        /// The image as the evaluator resolved it (Porch Gen C resolves short
        /// names before this point); per-function settings are looked up by
        /// this exact string.
        image: String,
    },
    /// The call made with an assignment returned, successfully or not: the
    /// slot's load goes down by one. Unknown ids are ignored.
    CallFinished {
        /// The request whose call finished.
        request: RequestId,
    },
    /// The caller went away. A request still waiting for a pod is removed
    /// from its waitlist and answered with [`PodCacheError::Cancelled`]; an
    /// assigned request is released as by [`Input::CallFinished`].
    Cancelled {
        /// The request that was cancelled.
        request: RequestId,
    },
    /// The pod created for `slot` is ready and its service answers at
    /// `endpoint`.
    PodReady {
        /// The slot named in the [`Command::CreatePod`].
        slot: SlotId,
        /// `<service>.<namespace>.svc.cluster.local:9446`.
        endpoint: String,
    },
    /// Creating the pod for `slot` failed (API error, readiness timeout in the
    /// driver, image metadata error…).
    PodFailed {
        /// The slot named in the [`Command::CreatePod`].
        slot: SlotId,
        /// What went wrong, for the waiters' error message.
        reason: String,
    },
    /// The platform reports a pod deleted (`failed: false`) or in phase
    /// `Failed` (`failed: true`), e.g. from a watch. Its slot, if any, is
    /// evicted at once and never handed out again.
    PodGone {
        /// The pod's name.
        pod_name: String,
        /// True if the pod failed rather than disappeared.
        failed: bool,
    },
    /// Time passed: expire creation deadlines and keep the reclaim-after of
    /// busy pods ahead of time. Send it at [`PodCache::poll_timeout`] and at
    /// least every half of the shortest TTL (the GC period, 1 min by default,
    /// is fine), so that a pod in use never reaches its reclaim-after.
    Tick,
    /// Garbage collection over every pod the platform lists with our label
    /// (Porch `--scan-interval`, default 1 min). Includes a [`Input::Tick`].
    Gc {
        /// The current pod list of the pod namespace.
        observed: Vec<ObservedPod>,
    },
    /// Adopt ready pods of the current template version left by an earlier
    /// run or another replica (Porch's `retrieveFunctionPods`), up to each
    /// image's pod limit. Pods not adopted are left for GC, never orphaned.
    Adopt {
        /// The current pod list of the pod namespace.
        observed: Vec<ObservedPod>,
    },
    /// Start one pod for each image that has none yet (Porch warm-up).
    WarmUp {
        /// Images to warm, e.g. [`PodCacheConfig::warm_up_images`](super::PodCacheConfig::warm_up_images).
        images: Vec<String>,
    },
    /// The pod template changed: new pods get `version`; pods of older
    /// versions are replaced on their next use.
    TemplateChanged {
        /// The new template version (the template object's `resourceVersion`).
        version: String,
    },
    /// The per-function settings changed (a FunctionConfig was created,
    /// changed or deleted): every function takes its settings from
    /// `policy` from now on. TTL and limits apply to existing pods at once
    /// (pods beyond a lowered limit take no new calls). A function whose
    /// pods would now be built differently (overrides, resources, or a
    /// different or no configuring object) gets new pods: the old ones take
    /// no new calls and, no longer used, are reclaimed by GC once their
    /// reclaim-after passes, like any idle pod — never deleted while
    /// another replica may still use them.
    PolicyChanged {
        /// The new policy (its replica token and pod-ready timeout are kept
        /// from the old one).
        policy: Box<PodCachePolicy>,
    },
    /// The runner is stopping: waiters get [`PodCacheError::ShuttingDown`] and
    /// new requests are refused. Pods are left for other replicas and GC.
    Shutdown,
}

/// What the driver must do; drained with [`PodCache::poll_command`].
// Commands are drained as soon as an input is handled, a few at a time:
// boxing the creation would cost more than the queue's spare bytes.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq)]
pub enum Command {
    /// Create the pod (and its service) for a new slot, then report
    /// [`Input::PodReady`] or [`Input::PodFailed`] for `creation.slot`.
    CreatePod(PodCreation),
    /// Answer a connection request. Exactly one per [`Input::Request`].
    Reply {
        /// The request answered.
        request: RequestId,
        /// The pod to call, or why there is none.
        result: Result<Assignment, PodCacheError>,
    },
    /// Delete the pod and the service of the same name (not-found is fine).
    DeletePod {
        /// Name of both the pod and its service.
        pod_name: String,
    },
    /// Patch the pod's [`RECLAIM_AFTER_ANNOTATION`](super::RECLAIM_AFTER_ANNOTATION)
    /// to `reclaim_after` (as [`UnixTime::to_annotation`]). In the background:
    /// no reply waits for it.
    PersistReclaimAfter {
        /// The pod to patch.
        pod_name: String,
        /// The new expiry.
        reclaim_after: UnixTime,
    },
}

/// Everything the driver needs to create one function pod.
#[derive(Debug, Clone, PartialEq)]
pub struct PodCreation {
    /// The slot to report the outcome for.
    pub slot: SlotId,
    /// Name of the pod and its service, also the [`IMAGE_LABEL`](super::IMAGE_LABEL)
    /// value. A fixed name, never `generateName`.
    pub pod_name: String,
    /// The function image.
    pub image: String,
    /// The template version to build from and record on the pod.
    pub template_version: String,
    /// The settings version to record on the pod
    /// ([`FunctionSettings::pod_version`] of `settings`).
    pub settings_version: Option<String>,
    /// The image's settings (resources go on the `function` container).
    pub settings: FunctionSettings,
    /// Initial reclaim-after annotation.
    pub reclaim_after: UnixTime,
    /// When the machine gives up on this creation (it then emits a
    /// [`Command::DeletePod`] and fails or moves the waiters); the driver may
    /// stop waiting then too.
    pub deadline: UnixTime,
}

/// A successful reply: call the wrapper at `endpoint`, then send
/// [`Input::CallFinished`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Assignment {
    /// The slot serving the request.
    pub slot: SlotId,
    /// The pod's name.
    pub pod_name: String,
    /// The wrapper's address.
    pub endpoint: String,
}

/// Why a request got no pod.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PodCacheError {
    /// Every pod the image may have is at its load limit (spec §10 item 33).
    #[error(
        "no capacity for {image:?}: its {pods} pod(s) each already carry {max_load_per_pod} requests; retry later, or raise maxParallelPodsPerFunction or maxLoadPerPod for this function"
    )]
    Exhausted {
        /// The image.
        image: String,
        /// Pods the image has (its limit).
        pods: u32,
        /// The per-pod load limit.
        max_load_per_pod: u32,
    },
    /// The pod the request waited for could not be created, and no other pod
    /// of the image could take the request.
    #[error("unable to create a function pod {pod} for {image:?}: {reason}")]
    CreationFailed {
        /// The image.
        image: String,
        /// The pod that was being created.
        pod: String,
        /// The driver's reason.
        reason: String,
    },
    /// The pod was not ready before its creation deadline.
    #[error(
        "function pod {pod} for {image:?} was not ready within {}s; examine the pod and its events in the pod namespace",
        after.as_secs()
    )]
    CreationTimedOut {
        /// The image.
        image: String,
        /// The pod.
        pod: String,
        /// The pod-ready timeout.
        after: Duration,
    },
    /// The pod the request waited for was deleted or failed before it was ready.
    #[error("function pod {pod} for {image:?} {} before it was ready", if *failed { "failed" } else { "was deleted" })]
    PodGone {
        /// The image.
        image: String,
        /// The pod.
        pod: String,
        /// True if it failed rather than disappeared.
        failed: bool,
    },
    /// The image string is not a valid reference.
    #[error("unable to parse image reference {image:?}: {reason}")]
    InvalidImage {
        /// The image as given.
        image: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The runner is shutting down.
    #[error("the function runner is shutting down; retry on another replica")]
    ShuttingDown,
    /// The request was cancelled while it waited for a pod.
    #[error("the request for {image:?} was cancelled while waiting for a pod")]
    Cancelled {
        /// The image.
        image: String,
    },
    /// The driver reused a request id that is still active.
    #[error("{request} is already in use; the driver must give every request a fresh id")]
    DuplicateRequest {
        /// The id.
        request: RequestId,
    },
}

/// The gRPC status class of a [`PodCacheError`], for the one place that maps
/// errors to status codes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorClass {
    /// `RESOURCE_EXHAUSTED`: capacity reached, retry later.
    ResourceExhausted,
    /// `UNAVAILABLE`: the platform could not provide a pod; retrying may help.
    Unavailable,
    /// `DEADLINE_EXCEEDED`: a pod did not start in time.
    DeadlineExceeded,
    /// `CANCELLED`.
    Cancelled,
    /// `INVALID_ARGUMENT`: the request itself is wrong.
    InvalidArgument,
    /// `INTERNAL`: a bug in the caller of the machine.
    Internal,
}

impl PodCacheError {
    /// The status class the caller should see.
    pub fn class(&self) -> ErrorClass {
        match self {
            PodCacheError::Exhausted { .. } => ErrorClass::ResourceExhausted,
            PodCacheError::CreationFailed { .. }
            | PodCacheError::PodGone { .. }
            | PodCacheError::ShuttingDown => ErrorClass::Unavailable,
            PodCacheError::CreationTimedOut { .. } => ErrorClass::DeadlineExceeded,
            PodCacheError::Cancelled { .. } => ErrorClass::Cancelled,
            PodCacheError::InvalidImage { .. } => ErrorClass::InvalidArgument,
            PodCacheError::DuplicateRequest { .. } => ErrorClass::Internal,
        }
    }
}

/// Whether a slot's pod is usable yet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SlotState {
    /// Creation in flight; requests queue on its waitlist.
    Pending,
    /// The pod answers; requests are handed out at once.
    Ready,
}

/// A read-only view of one slot, for tests, metrics and the simulator.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlotView<'a> {
    /// The slot.
    pub id: SlotId,
    /// Its image.
    pub image: &'a str,
    /// Its pod's name.
    pub pod_name: &'a str,
    /// Pending or ready.
    pub state: SlotState,
    /// Requests assigned and not finished (queued and running), Porch's counter.
    pub load: u32,
    /// Requests on the waitlist of a pending slot.
    pub waiting: usize,
    /// The template version its pod is built from.
    pub template_version: &'a str,
    /// The latest reclaim-after this replica persisted or observed.
    pub reclaim_after: UnixTime,
    /// When a request was last assigned to it, or it became ready.
    pub last_used: UnixTime,
}

#[derive(Debug)]
enum Phase {
    Pending {
        deadline: UnixTime,
        waitlist: VecDeque<RequestId>,
    },
    Ready {
        endpoint: String,
    },
}

#[derive(Debug)]
struct Slot {
    image: String,
    pod_name: String,
    template_version: String,
    /// The [`Function::shape`] its pod was built with.
    shape: u64,
    ttl: Duration,
    phase: Phase,
    load: u32,
    last_used: UnixTime,
    reclaim_after: UnixTime,
}

/// How far ahead a ready pod's reclaim-after must be for the pod to take a
/// new request: a quarter of its TTL, at most 30 s. Another replica's GC
/// reads the annotation, and the extension a new use triggers is written in
/// the background; the margin covers that write's latency and clock skew
/// between replicas, so a pod is never picked just before another replica
/// may delete it.
fn reuse_margin(ttl: Duration) -> Duration {
    (ttl / 4).min(Duration::from_secs(30))
}

impl Slot {
    /// A ready slot may take new requests only while its reclaim-after is
    /// at least [`reuse_margin`] ahead: once it has passed, another
    /// replica's GC may delete the pod.
    fn usable(&self, now: UnixTime) -> bool {
        match self.phase {
            Phase::Pending { .. } => true,
            Phase::Ready { .. } => self.reclaim_after > now + reuse_margin(self.ttl),
        }
    }
}

#[derive(Debug)]
struct Function {
    slots: Vec<SlotId>,
    round_robin: usize,
    settings: FunctionSettings,
    /// Changes whenever `settings` change in a way that shapes the pod
    /// ([`FunctionSettings::same_pod`]); slots of another shape are stale.
    shape: u64,
    /// [`FunctionSettings::pod_version`] of `settings`.
    pod_version: Option<String>,
    invalid: Option<String>,
}

#[derive(Debug, Clone, Copy)]
struct Request {
    slot: SlotId,
    waiting: bool,
}

/// The pod cache of one runner replica, as a sans-IO state machine.
///
/// Feed inputs with [`handle`](Self::handle), then drain commands with
/// [`poll_command`](Self::poll_command) until it returns `None`. Handling an
/// input costs O(pods of that image), independent of other images (except
/// [`Input::Tick`]/[`Input::Gc`], which look at every slot).
#[derive(Debug)]
pub struct PodCache {
    policy: PodCachePolicy,
    template_version: String,
    functions: HashMap<String, Function>,
    slots: HashMap<SlotId, Slot>,
    by_name: HashMap<String, SlotId>,
    requests: HashMap<RequestId, Request>,
    deadlines: BTreeSet<(UnixTime, SlotId)>,
    abandoned: HashMap<SlotId, String>,
    observed_names: HashSet<String>,
    commands: VecDeque<Command>,
    next_slot: u64,
    next_seq: u64,
    next_shape: u64,
    shutting_down: bool,
}

/// The reclaim-after written when a pod is used at `now`: `now + 1.5 × ttl`,
/// rounded up to a whole second. Writing half a TTL ahead lets the next write
/// wait half a TTL while still guaranteeing `reclaim-after >= last use + ttl`.
fn extended(now: UnixTime, ttl: Duration) -> UnixTime {
    (now + ttl + ttl / 2).ceil_secs()
}

impl PodCache {
    /// An empty pod cache; new pods are built from `template_version`.
    pub fn new(policy: PodCachePolicy, template_version: impl Into<String>) -> Self {
        Self {
            policy,
            template_version: template_version.into(),
            functions: HashMap::new(),
            slots: HashMap::new(),
            by_name: HashMap::new(),
            requests: HashMap::new(),
            deadlines: BTreeSet::new(),
            abandoned: HashMap::new(),
            observed_names: HashSet::new(),
            commands: VecDeque::new(),
            next_slot: 1,
            next_seq: 1,
            next_shape: 1,
            shutting_down: false,
        }
    }

    /// The policy the cache was built with.
    pub fn policy(&self) -> &PodCachePolicy {
        &self.policy
    }

    /// The template version new pods are built from.
    pub fn template_version(&self) -> &str {
        &self.template_version
    }

    /// Handles one input at time `now`; the resulting commands are queued for
    /// [`poll_command`](Self::poll_command). Never fails: problems become
    /// error replies.
    pub fn handle(&mut self, now: UnixTime, input: Input) {
        match input {
            Input::Request { request, image } => self.on_request(now, request, &image),
            Input::CallFinished { request } | Input::Cancelled { request } => {
                self.on_release(now, request)
            }
            Input::PodReady { slot, endpoint } => self.on_ready(now, slot, endpoint),
            Input::PodFailed { slot, reason } => self.on_failed(now, slot, reason),
            Input::PodGone { pod_name, failed } => self.on_gone(now, &pod_name, failed),
            Input::Tick => self.on_tick(now),
            Input::Gc { observed } => self.on_gc(now, observed),
            Input::Adopt { observed } => self.on_adopt(now, observed),
            Input::WarmUp { images } => {
                for image in images {
                    self.on_warm_up(now, &image);
                }
            }
            Input::TemplateChanged { version } => self.template_version = version,
            Input::PolicyChanged { policy } => self.on_policy(now, policy),
            Input::Shutdown => self.on_shutdown(),
        }
    }

    /// The next command for the driver, in the order decided.
    pub fn poll_command(&mut self) -> Option<Command> {
        self.commands.pop_front()
    }

    /// The earliest creation deadline, when the driver should send
    /// [`Input::Tick`] at the latest.
    pub fn poll_timeout(&self) -> Option<UnixTime> {
        self.deadlines.first().map(|(t, _)| *t)
    }

    /// Every slot, in no particular order.
    pub fn slots(&self) -> impl Iterator<Item = SlotView<'_>> + '_ {
        self.slots.iter().map(|(id, s)| view(*id, s))
    }

    /// The slots of `image`, in selection order.
    pub fn slots_for<'a>(&'a self, image: &str) -> impl Iterator<Item = SlotView<'a>> + 'a {
        self.functions
            .get(image)
            .map(|f| f.slots.as_slice())
            .unwrap_or_default()
            .iter()
            .filter_map(|id| self.slots.get(id).map(|s| view(*id, s)))
    }

    /// The slot a request is assigned to and whether it still waits for its
    /// pod; `None` once released or answered with an error.
    pub fn request_slot(&self, request: RequestId) -> Option<(SlotId, bool)> {
        self.requests.get(&request).map(|r| (r.slot, r.waiting))
    }

    fn reply(&mut self, request: RequestId, result: Result<Assignment, PodCacheError>) {
        self.commands.push_back(Command::Reply { request, result });
    }

    fn function_entry(&mut self, image: &str) -> &mut Function {
        if !self.functions.contains_key(image) {
            let shape = self.next_shape;
            self.next_shape += 1;
            let settings = self.policy.settings_for(image);
            let f = Function {
                slots: Vec::new(),
                round_robin: 0,
                pod_version: settings.pod_version(),
                settings,
                shape,
                invalid: ImageRef::parse(image).err().map(|e| e.reason),
            };
            self.functions.insert(image.to_string(), f);
        }
        self.functions.get_mut(image).expect("inserted above")
    }

    // Porch §5.4: pick the least-loaded slot, scale out past the waitlist
    // length while under the pod limit, else queue — bounded (item 33).
    fn on_request(&mut self, now: UnixTime, request: RequestId, image: &str) {
        if self.shutting_down {
            return self.reply(request, Err(PodCacheError::ShuttingDown));
        }
        if self.requests.contains_key(&request) {
            return self.reply(request, Err(PodCacheError::DuplicateRequest { request }));
        }
        let f = self.function_entry(image);
        if let Some(reason) = f.invalid.clone() {
            let image = image.to_string();
            return self.reply(request, Err(PodCacheError::InvalidImage { image, reason }));
        }
        let (max_waitlist, max_pods) = (f.settings.max_waitlist, f.settings.max_parallel_pods);
        self.retire_unusable(now, image);
        let fresh = self.best_slot(now, image, true);
        let pods = self.functions[image].slots.len() as u32;
        if pods < max_pods && fresh.is_none_or(|(_, load)| load >= max_waitlist) {
            self.scale_out(now, image, Some(request));
        } else {
            self.queue(now, request, image, fresh);
        }
    }

    /// Queues `request` on `choice` (or the best slot of any template
    /// version), or rejects it when that slot is at its load limit.
    fn queue(
        &mut self,
        now: UnixTime,
        request: RequestId,
        image: &str,
        choice: Option<(SlotId, u32)>,
    ) {
        let choice = choice.or_else(|| self.best_slot(now, image, false));
        let f = &self.functions[image];
        let max_load = f.settings.max_load_per_pod;
        match choice {
            Some((slot, load)) if load < max_load => self.assign(now, request, slot),
            _ => {
                let err = PodCacheError::Exhausted {
                    image: image.to_string(),
                    pods: f.slots.len() as u32,
                    max_load_per_pod: max_load,
                };
                self.reply(request, Err(err));
            }
        }
    }

    /// Porch §5.5: least loaded, ties broken round-robin from the entry's
    /// index. Only usable slots count; with `fresh_only`, only slots of the
    /// current template version.
    fn best_slot(&mut self, now: UnixTime, image: &str, fresh_only: bool) -> Option<(SlotId, u32)> {
        let f = self.functions.get_mut(image)?;
        let slots = &self.slots;
        let version = &self.template_version;
        let shape = f.shape;
        let eligible = |id: &SlotId| {
            slots.get(id).filter(|s| {
                s.usable(now)
                    && (!fresh_only || (s.template_version == *version && s.shape == shape))
            })
        };
        let min = f.slots.iter().filter_map(eligible).map(|s| s.load).min()?;
        let n = f.slots.len();
        (0..n)
            .map(|i| (f.round_robin + i) % n)
            .find(|&i| eligible(&f.slots[i]).is_some_and(|s| s.load == min))
            .map(|i| {
                f.round_robin = (i + 1) % n;
                (f.slots[i], min)
            })
    }

    /// Drops idle ready slots that must not take new requests: their pod is
    /// from an older template or was built with settings the function no
    /// longer has (replaced on next use), their reclaim-after has passed, or
    /// the function has more pods than its (lowered) limit. The pods are not
    /// deleted here — another replica may use them; GC deletes them once
    /// their reclaim-after has passed, which no use extends any more.
    fn retire_unusable(&mut self, now: UnixTime, image: &str) {
        let Some((shape, limit)) = self
            .functions
            .get(image)
            .map(|f| (f.shape, f.settings.max_parallel_pods as usize))
        else {
            return;
        };
        let idle = |s: &Slot| matches!(s.phase, Phase::Ready { .. }) && s.load == 0;
        while let Some(id) = self.functions.get(image).and_then(|f| {
            let surplus = f.slots.len() > limit;
            f.slots.iter().copied().find(|id| {
                self.slots.get(id).is_some_and(|s| {
                    idle(s)
                        && (surplus
                            || s.template_version != self.template_version
                            || s.shape != shape
                            || !s.usable(now))
                })
            })
        }) {
            self.detach(id);
        }
    }

    // New per-function settings: see [`Input::PolicyChanged`].
    fn on_policy(&mut self, now: UnixTime, policy: Box<PodCachePolicy>) {
        let mut policy = *policy;
        policy.replica_token = std::mem::take(&mut self.policy.replica_token);
        policy.pod_ready_timeout = self.policy.pod_ready_timeout;
        self.policy = policy;
        let images: Vec<String> = self.functions.keys().cloned().collect();
        for image in images {
            let settings = self.policy.settings_for(&image);
            let Some(f) = self.functions.get_mut(&image) else {
                continue;
            };
            if f.settings == settings {
                continue;
            }
            if !f.settings.same_pod(&settings) {
                f.shape = self.next_shape;
                self.next_shape += 1;
                f.pod_version = settings.pod_version();
            }
            for id in &f.slots {
                if let Some(slot) = self.slots.get_mut(id) {
                    slot.ttl = settings.ttl;
                }
            }
            f.settings = settings;
            self.retire_unusable(now, &image);
        }
    }

    fn fresh_name(&mut self, image: &str) -> String {
        loop {
            let seq = self.next_seq;
            self.next_seq += 1;
            let name = naming::pod_name(image, &self.policy.replica_token, seq);
            if !self.by_name.contains_key(&name) && !self.observed_names.contains(&name) {
                return name;
            }
        }
    }

    /// Porch §5.4 step 5 (and warm-up): a new pending slot, with `waiter` on
    /// its waitlist if given, and a creation command.
    fn scale_out(&mut self, now: UnixTime, image: &str, waiter: Option<RequestId>) {
        let id = SlotId(self.next_slot);
        self.next_slot += 1;
        let pod_name = self.fresh_name(image);
        let settings = self.functions[image].settings.clone();
        let deadline = now + self.policy.pod_ready_timeout;
        let reclaim_after = extended(now, settings.ttl);
        let slot = Slot {
            image: image.to_string(),
            pod_name: pod_name.clone(),
            template_version: self.template_version.clone(),
            shape: self.functions[image].shape,
            ttl: settings.ttl,
            phase: Phase::Pending {
                deadline,
                waitlist: waiter.into_iter().collect(),
            },
            load: u32::from(waiter.is_some()),
            last_used: now,
            reclaim_after,
        };
        if let Some(request) = waiter {
            self.requests.insert(
                request,
                Request {
                    slot: id,
                    waiting: true,
                },
            );
        }
        self.slots.insert(id, slot);
        self.by_name.insert(pod_name.clone(), id);
        self.deadlines.insert((deadline, id));
        self.function_entry(image).slots.push(id);
        self.commands.push_back(Command::CreatePod(PodCreation {
            slot: id,
            pod_name,
            image: image.to_string(),
            template_version: self.template_version.clone(),
            settings_version: self.functions[image].pod_version.clone(),
            settings,
            reclaim_after,
            deadline,
        }));
    }

    /// Counts `request` on `slot` and replies at once if the pod is ready,
    /// else puts it on the waitlist (Porch §5.4 step 6).
    fn assign(&mut self, now: UnixTime, request: RequestId, id: SlotId) {
        let slot = self.slots.get_mut(&id).expect("assign to a live slot");
        slot.load += 1;
        slot.last_used = now;
        match &mut slot.phase {
            Phase::Pending { waitlist, .. } => {
                waitlist.push_back(request);
                self.requests.insert(
                    request,
                    Request {
                        slot: id,
                        waiting: true,
                    },
                );
            }
            Phase::Ready { endpoint } => {
                let a = Assignment {
                    slot: id,
                    pod_name: slot.pod_name.clone(),
                    endpoint: endpoint.clone(),
                };
                self.requests.insert(
                    request,
                    Request {
                        slot: id,
                        waiting: false,
                    },
                );
                self.reply(request, Ok(a));
                self.touch(now, id);
            }
        }
    }

    /// Records a use of a ready slot: if its reclaim-after is less than a TTL
    /// ahead, extend it to 1.5 TTL ahead and emit the persist command. Hence
    /// at most one write per half-TTL per pod, and `reclaim-after >= now + ttl`
    /// after every use.
    fn touch(&mut self, now: UnixTime, id: SlotId) {
        let Some(slot) = self.slots.get_mut(&id) else {
            return;
        };
        if !matches!(slot.phase, Phase::Ready { .. }) || slot.reclaim_after >= now + slot.ttl {
            return;
        }
        slot.reclaim_after = extended(now, slot.ttl);
        self.commands.push_back(Command::PersistReclaimAfter {
            pod_name: slot.pod_name.clone(),
            reclaim_after: slot.reclaim_after,
        });
    }

    fn on_release(&mut self, now: UnixTime, request: RequestId) {
        let Some(req) = self.requests.remove(&request) else {
            return;
        };
        let Some(slot) = self.slots.get_mut(&req.slot) else {
            return;
        };
        debug_assert!(slot.load > 0, "load of {} would go negative", req.slot);
        slot.load = slot.load.saturating_sub(1);
        if req.waiting {
            if let Phase::Pending { waitlist, .. } = &mut slot.phase {
                waitlist.retain(|r| *r != request);
            }
            let image = slot.image.clone();
            self.reply(request, Err(PodCacheError::Cancelled { image }));
        } else {
            slot.last_used = now;
            let idle = slot.load == 0;
            self.touch(now, req.slot);
            // A pod of outdated settings, or beyond a lowered limit, takes no
            // new call once its last one has ended.
            let stale = idle
                .then(|| self.slots.get(&req.slot))
                .flatten()
                .filter(|s| {
                    self.functions.get(&s.image).is_some_and(|f| {
                        f.shape != s.shape || f.slots.len() > f.settings.max_parallel_pods as usize
                    })
                })
                .map(|s| s.image.clone());
            if let Some(image) = stale {
                self.retire_unusable(now, &image);
            }
        }
    }

    // Porch §5.6 success path, matched by slot id (item 6).
    fn on_ready(&mut self, now: UnixTime, id: SlotId, endpoint: String) {
        let Some(slot) = self.slots.get_mut(&id) else {
            // The slot was given up (deadline, shutdown race): its pod exists
            // now, so delete it rather than leave it behind.
            if let Some(pod_name) = self.abandoned.remove(&id) {
                self.commands.push_back(Command::DeletePod { pod_name });
            }
            return;
        };
        let Phase::Pending { deadline, waitlist } = &mut slot.phase else {
            return;
        };
        self.deadlines.remove(&(*deadline, id));
        let waiters = std::mem::take(waitlist);
        slot.phase = Phase::Ready {
            endpoint: endpoint.clone(),
        };
        slot.last_used = now;
        let pod_name = slot.pod_name.clone();
        let served = !waiters.is_empty();
        for request in waiters {
            if let Some(r) = self.requests.get_mut(&request) {
                r.waiting = false;
            }
            let a = Assignment {
                slot: id,
                pod_name: pod_name.clone(),
                endpoint: endpoint.clone(),
            };
            self.reply(request, Ok(a));
        }
        if served {
            self.touch(now, id);
        }
    }

    // Porch §5.6 error path: evict, move or fail the waiters (item 5), clean up.
    fn on_failed(&mut self, now: UnixTime, id: SlotId, reason: String) {
        let Some(slot) = self.slots.get(&id) else {
            if let Some(pod_name) = self.abandoned.remove(&id) {
                self.commands.push_back(Command::DeletePod { pod_name });
            }
            return;
        };
        let err = match slot.phase {
            Phase::Pending { .. } => PodCacheError::CreationFailed {
                image: slot.image.clone(),
                pod: slot.pod_name.clone(),
                reason,
            },
            Phase::Ready { .. } => PodCacheError::PodGone {
                image: slot.image.clone(),
                pod: slot.pod_name.clone(),
                failed: true,
            },
        };
        self.evict(now, id, err);
    }

    // Porch §5.7: a deleted or failed pod is evicted at once.
    fn on_gone(&mut self, now: UnixTime, pod_name: &str, failed: bool) {
        let Some(&id) = self.by_name.get(pod_name) else {
            return;
        };
        let slot = &self.slots[&id];
        let err = PodCacheError::PodGone {
            image: slot.image.clone(),
            pod: slot.pod_name.clone(),
            failed,
        };
        self.evict(now, id, err);
    }

    /// Removes a slot, deletes its pod and moves or fails its waiters with `err`.
    fn evict(&mut self, now: UnixTime, id: SlotId, err: PodCacheError) {
        let (slot, waiters) = self.detach(id);
        self.commands.push_back(Command::DeletePod {
            pod_name: slot.pod_name.clone(),
        });
        self.redistribute(now, &slot.image, waiters, err);
    }

    /// Takes a slot out of every index; returns it with its waitlist. Requests
    /// already answered keep pointing at it and are released as no-ops.
    fn detach(&mut self, id: SlotId) -> (Slot, VecDeque<RequestId>) {
        let mut slot = self.slots.remove(&id).expect("detach a live slot");
        self.by_name.remove(&slot.pod_name);
        if let Some(f) = self.functions.get_mut(&slot.image) {
            f.slots.retain(|s| *s != id);
            if f.round_robin >= f.slots.len() {
                f.round_robin = 0;
            }
        }
        let waiters = match &mut slot.phase {
            Phase::Pending { deadline, waitlist } => {
                self.deadlines.remove(&(*deadline, id));
                std::mem::take(waitlist)
            }
            Phase::Ready { .. } => VecDeque::new(),
        };
        (slot, waiters)
    }

    /// Porch §5.6.1, done right: each waiter is counted on and queued in the
    /// best remaining slot of the image, or gets `err`.
    fn redistribute(
        &mut self,
        now: UnixTime,
        image: &str,
        waiters: VecDeque<RequestId>,
        err: PodCacheError,
    ) {
        if waiters.is_empty() {
            return;
        }
        self.retire_unusable(now, image);
        for request in waiters {
            self.requests.remove(&request);
            let max_load = self
                .functions
                .get(image)
                .map_or(0, |f| f.settings.max_load_per_pod);
            let choice = self
                .best_slot(now, image, true)
                .or_else(|| self.best_slot(now, image, false));
            match choice {
                Some((slot, load)) if load < max_load => self.assign(now, request, slot),
                _ => self.reply(request, Err(err.clone())),
            }
        }
    }

    fn on_tick(&mut self, now: UnixTime) {
        while let Some(&(deadline, id)) = self.deadlines.first() {
            if deadline > now {
                break;
            }
            let slot = &self.slots[&id];
            let err = PodCacheError::CreationTimedOut {
                image: slot.image.clone(),
                pod: slot.pod_name.clone(),
                after: self.policy.pod_ready_timeout,
            };
            self.abandoned.insert(id, slot.pod_name.clone());
            self.evict(now, id, err);
        }
        let busy: Vec<SlotId> = self
            .slots
            .iter()
            .filter(|(_, s)| s.load > 0 && matches!(s.phase, Phase::Ready { .. }))
            .map(|(id, _)| *id)
            .collect();
        for id in busy {
            self.touch(now, id);
        }
    }

    // Seeds / Gen A GC over the shared annotation, with Porch Gen B/C's
    // "never while in use" on top.
    fn on_gc(&mut self, now: UnixTime, observed: Vec<ObservedPod>) {
        self.on_tick(now);
        self.observed_names = observed.iter().map(|o| o.name.clone()).collect();
        for o in observed {
            if !o.labelled || o.phase == ObservedPhase::Terminating {
                continue;
            }
            let local = self.by_name.get(&o.name).copied();
            if o.phase == ObservedPhase::Failed {
                match local {
                    Some(id) => {
                        let err = PodCacheError::PodGone {
                            image: o.image.clone(),
                            pod: o.name.clone(),
                            failed: true,
                        };
                        self.evict(now, id, err);
                    }
                    None => self
                        .commands
                        .push_back(Command::DeletePod { pod_name: o.name }),
                }
                continue;
            }
            let ttl = match local {
                Some(id) => self.slots[&id].ttl,
                None => self.policy.settings_for(&o.image).ttl,
            };
            let Some(annotated) = o
                .reclaim_after
                .as_deref()
                .and_then(UnixTime::parse_annotation)
            else {
                // Missing or invalid annotation: grace, not deletion.
                let reclaim_after = extended(now, ttl);
                if let Some(slot) = local.and_then(|id| self.slots.get_mut(&id)) {
                    slot.reclaim_after = slot.reclaim_after.max(reclaim_after);
                }
                self.commands.push_back(Command::PersistReclaimAfter {
                    pod_name: o.name,
                    reclaim_after,
                });
                continue;
            };
            match local {
                Some(id) => {
                    let slot = self.slots.get_mut(&id).expect("indexed slot");
                    slot.reclaim_after = slot.reclaim_after.max(annotated);
                    let idle = slot.load == 0 && matches!(slot.phase, Phase::Ready { .. });
                    if idle && slot.reclaim_after <= now {
                        self.detach(id);
                        self.commands
                            .push_back(Command::DeletePod { pod_name: o.name });
                    }
                }
                None if annotated <= now => {
                    self.commands
                        .push_back(Command::DeletePod { pod_name: o.name });
                }
                None => {}
            }
        }
        self.functions.retain(|_, f| !f.slots.is_empty());
    }

    // Porch §5.9, safely: only ready pods of the current template whose
    // reclaim-after is ahead, within the per-function limit (item 26); the
    // rest is left to GC instead of being deleted or orphaned (item 11).
    fn on_adopt(&mut self, now: UnixTime, observed: Vec<ObservedPod>) {
        self.observed_names
            .extend(observed.iter().map(|o| o.name.clone()));
        for o in observed {
            let ObservedPhase::Ready { endpoint } = o.phase else {
                continue;
            };
            let Some(reclaim_after) = o
                .reclaim_after
                .as_deref()
                .and_then(UnixTime::parse_annotation)
            else {
                continue;
            };
            let current = o.template_version.as_deref() == Some(self.template_version.as_str());
            if !o.labelled || !current || reclaim_after <= now || self.by_name.contains_key(&o.name)
            {
                continue;
            }
            let id = SlotId(self.next_slot);
            let f = self.function_entry(&o.image);
            if f.invalid.is_some()
                || f.slots.len() as u32 >= f.settings.max_parallel_pods
                || o.settings_version != f.pod_version
            {
                continue;
            }
            let (ttl, shape) = (f.settings.ttl, f.shape);
            f.slots.push(id);
            self.next_slot += 1;
            self.by_name.insert(o.name.clone(), id);
            self.slots.insert(
                id,
                Slot {
                    image: o.image,
                    pod_name: o.name,
                    template_version: self.template_version.clone(),
                    shape,
                    ttl,
                    phase: Phase::Ready { endpoint },
                    load: 0,
                    last_used: now,
                    reclaim_after,
                },
            );
        }
    }

    // Porch §5.12: one pod for each listed image that has none.
    fn on_warm_up(&mut self, now: UnixTime, image: &str) {
        if self.shutting_down {
            return;
        }
        let f = self.function_entry(image);
        if f.invalid.is_none() && f.slots.is_empty() {
            self.scale_out(now, image, None);
        }
    }

    fn on_shutdown(&mut self) {
        self.shutting_down = true;
        let mut failed = Vec::new();
        for slot in self.slots.values_mut() {
            if let Phase::Pending { waitlist, .. } = &mut slot.phase {
                slot.load -= waitlist.len() as u32;
                failed.extend(waitlist.drain(..));
            }
        }
        for request in failed {
            self.requests.remove(&request);
            self.reply(request, Err(PodCacheError::ShuttingDown));
        }
    }
}

fn view(id: SlotId, s: &Slot) -> SlotView<'_> {
    let (state, waiting) = match &s.phase {
        Phase::Pending { waitlist, .. } => (SlotState::Pending, waitlist.len()),
        Phase::Ready { .. } => (SlotState::Ready, 0),
    };
    SlotView {
        id,
        image: &s.image,
        pod_name: &s.pod_name,
        state,
        load: s.load,
        waiting,
        template_version: &s.template_version,
        reclaim_after: s.reclaim_after,
        last_used: s.last_used,
    }
}
