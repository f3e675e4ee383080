//! What goes into the pod-cache machine and what comes out: inputs,
//! commands, observations of the platform and the errors callers see.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use super::config::{FunctionSettings, PodCachePolicy};
use super::time::UnixTime;

/// Identifies one connection request; chosen by the driver, unique among the
/// requests it has not released yet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RequestId(pub u64);

impl fmt::Display for RequestId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "request#{}", self.0)
    }
}

/// Identifies one pod slot; allocated by the machine, never reused. The
/// outcomes of a creation ([`Input::Created`], [`Input::EndpointReady`])
/// carry it, so an outcome always reaches the slot whose creation produced
/// it (spec §10 item 6).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SlotId(pub u64);

impl fmt::Display for SlotId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "slot#{}", self.0)
    }
}

/// Identifies one GC listing the machine asked for ([`Command::ListPods`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ListingId(pub u64);

/// A pod as the platform reports it (from a pod list or watch), reduced to
/// what the pod cache decides on. Build it from a k8s `Pod` with
/// [`template::observe_pod`](super::template::observe_pod).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
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
    /// Its [`CREATION_ANNOTATION`](super::CREATION_ANNOTATION), if any.
    pub creation: Option<String>,
    /// `metadata.uid`.
    pub uid: Option<String>,
    /// `metadata.resourceVersion`: changes with every write to the pod.
    pub resource_version: Option<String>,
    /// `status.podIP`, if assigned.
    pub ip: Option<String>,
    /// Where it is in its life.
    pub phase: ObservedPhase,
}

/// The life stage of an observed pod.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum ObservedPhase {
    /// Not ready yet (scheduling, pulling, starting).
    #[default]
    Pending,
    /// Running and ready; its wrapper answers at `endpoint` (`host:port`).
    Ready {
        /// The wrapper's address, `<service>.<namespace>.svc.cluster.local:9446`
        /// or `<pod IP>:9446`.
        endpoint: String,
    },
    /// Phase `Failed` (or `Succeeded`), or a container the kubelet cannot
    /// run ([`kubelet_failure`](super::template::kubelet_failure)): it will
    /// never serve again.
    Failed {
        /// Why, from the pod's status (phase, reason, message).
        reason: String,
    },
    /// Has a deletion timestamp: already on its way out.
    Terminating,
}

/// A service of the pod namespace, as a GC listing reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObservedService {
    /// Its name.
    pub name: String,
    /// Whether it is a function service: it selects
    /// [`IMAGE_LABEL`](super::IMAGE_LABEL)` = <its own name>`, the pod of the
    /// same name. GC deletes only such services, and only once that pod is
    /// gone.
    pub selects_own_pod: bool,
}

/// What a GC listing found: services listed first, then the labelled pods
/// (a pod is created before its service, so a function service listed
/// whose pod is missing from the later pod list has lost its pod for good).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Listing {
    /// The labelled pods.
    pub pods: Vec<Arc<ObservedPod>>,
    /// The services of the pod namespace.
    pub services: Vec<ObservedService>,
}

/// How a creation ([`Command::CreatePod`]) failed.
#[derive(Debug, Clone, PartialEq)]
pub enum CreateFailure {
    /// A pod of that name exists. `existing` is that pod as read back
    /// (`None` if it could not be read). The machine takes it as its own
    /// only if it carries this creation's
    /// [`CREATION_ANNOTATION`](super::CREATION_ANNOTATION) (an earlier
    /// attempt of the same creation whose answer was lost); otherwise it
    /// picks another name.
    AlreadyExists {
        /// The pod found under the name.
        existing: Option<Box<ObservedPod>>,
    },
    /// Anything else (API error, image metadata error, template error…).
    Failed {
        /// What went wrong, for the waiters' error message.
        reason: String,
    },
}

/// Why a [`Command::PersistReclaimAfter`] failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PersistFailure {
    /// The pod is gone, or its name holds another pod (the UID the patch
    /// carried differs: the API server refused the patch).
    /// Never retried: the slot ends and its waiters move on.
    NotThePod(String),
    /// Any other failure (the platform's error), retried with backoff
    /// while the pod is in use.
    Platform(String),
}

/// How a deletion ([`Command::DeletePod`]) failed. A pod already gone is a
/// success.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeleteFailure {
    /// The precondition did not hold: the pod changed since it was listed
    /// (another replica extended it) or is another pod of the same name.
    /// Not retried; the next GC decides again on a fresh listing.
    Conflict,
    /// Anything else; retried with backoff.
    Failed {
        /// The platform's error.
        reason: String,
    },
}

/// What must still hold for a deletion to go ahead (Kubernetes
/// `DeleteOptions.preconditions`, plus the creation check below).
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct DeletePrecondition {
    /// The pod must have this `metadata.uid`.
    pub uid: Option<String>,
    /// The pod must have this `metadata.resourceVersion`: nothing has
    /// written to it since it was listed.
    pub resource_version: Option<String>,
    /// The pod must carry this [`CREATION_ANNOTATION`](super::CREATION_ANNOTATION)
    /// and be deleted as it is now: whoever carries out the deletion reads
    /// the pod first, deletes nothing (a [`DeleteFailure::Conflict`]) if
    /// the value differs, and otherwise deletes on the UID and
    /// resourceVersion it read. For a creation given up, whose pod another
    /// replica may have adopted meanwhile: that replica's first write (its
    /// claim, see [`Input::Adopt`]) makes the deletion fail.
    pub creation: Option<String>,
    /// With `creation`: the pod must still carry this
    /// [`RECLAIM_AFTER_ANNOTATION`](super::RECLAIM_AFTER_ANNOTATION), the
    /// one its creation wrote. A replica that adopted the pod before it was
    /// read has changed it with its claim (a claim always writes a later
    /// value than the one it found), so the read itself shows the pod is no
    /// longer only this creation's.
    pub reclaim_after: Option<UnixTime>,
}

impl DeletePrecondition {
    /// Whether `pod`, as read by whoever carries out the deletion, is still
    /// what creation `nonce` (the value taken out of [`Self::creation`])
    /// made and nobody else has written: it carries that
    /// [`CREATION_ANNOTATION`](super::CREATION_ANNOTATION) and, if
    /// [`Self::reclaim_after`] is set, exactly that reclaim-after.
    pub fn creation_holds(&self, nonce: &str, pod: &ObservedPod) -> bool {
        pod.creation.as_deref() == Some(nonce)
            && self.reclaim_after.is_none_or(|r| {
                pod.reclaim_after
                    .as_deref()
                    .and_then(UnixTime::parse_annotation)
                    == Some(r)
            })
    }
}

/// Why a pod is deleted, for the log.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DeleteReason {
    /// Its reclaim-after passed and nobody here uses it (GC).
    Expired,
    /// It reached phase Failed.
    Failed,
    /// Its creation failed or was given up.
    CreationFailed,
}

impl fmt::Display for DeleteReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            DeleteReason::Expired => "its reclaim-after passed and it is idle",
            DeleteReason::Failed => "it failed",
            DeleteReason::CreationFailed => "its creation failed or was given up",
        })
    }
}

/// An input to [`PodCache::handle`](super::PodCache::handle). Every input
/// comes with the time it is handled at, so the machine never reads a clock.
#[derive(Debug, Clone, PartialEq)]
pub enum Input {
    /// A caller needs a pod for `image` (Porch's connection request). Answered
    /// by exactly one [`Command::Reply`] for `request`, now or later.
    Request {
        /// Fresh id chosen by the driver.
        request: RequestId,
        /// The image as the evaluator resolved it; per-function settings are
        /// looked up by this exact string.
        image: String,
    },
    /// The call made with an assignment returned (successfully or with an
    /// error of the function): the slot's load goes down by one. Unknown ids
    /// are ignored.
    CallFinished {
        /// The request whose call finished.
        request: RequestId,
    },
    /// The call made with an assignment ended because the pod did not
    /// answer (gRPC UNAVAILABLE, a refused or broken connection). Releases
    /// the load unit like [`Input::CallFinished`] and drains the pod: this
    /// replica gives it no new call and, once its last call here has ended,
    /// forgets it. The pod is not deleted: calls of other replicas may be in
    /// it; GC reclaims it once its reclaim-after passes, which this replica
    /// no longer extends.
    CallUnavailable {
        /// The request whose call failed.
        request: RequestId,
    },
    /// The caller went away. A request still waiting for a pod is removed
    /// from its waitlist and answered with [`PodCacheError::Cancelled`]; an
    /// assigned request is released as by [`Input::CallFinished`].
    Cancelled {
        /// The request that was cancelled.
        request: RequestId,
    },
    /// The outcome of [`Command::CreatePod`] for `slot`: the pod and its
    /// service exist (`Ok`), or not.
    Created {
        /// The slot named in the command.
        slot: SlotId,
        /// What happened.
        result: Result<(), CreateFailure>,
    },
    /// The outcome of [`Command::AwaitEndpoint`] for `slot`: the endpoint
    /// to call, or why the service never published the pod.
    EndpointReady {
        /// The slot named in the command.
        slot: SlotId,
        /// The endpoint, or the reason.
        result: Result<String, String>,
    },
    /// The wrapper server of `slot`'s pod answered the health check of
    /// [`Command::ProbeWrapper`] with `SERVING` at `endpoint`: the pod may
    /// take calls there (pod-IP address mode), whether or not the kubelet
    /// has reported it ready yet.
    WrapperServing {
        /// The slot named in the command.
        slot: SlotId,
        /// The address that answered (`<pod IP>:9446`).
        endpoint: String,
    },
    /// The kubelet cannot start the pod `pod_name` with UID `uid` (a
    /// warning it recorded: [`warning_failure`](super::template::warning_failure)).
    /// A pending slot whose pod has that UID fails its waiters with
    /// [`PodCacheError::CannotStart`] and deletes the pod; anything else
    /// (a ready pod, another pod of the name, an unknown UID) is left to
    /// what the pod's status says.
    PodCannotStart {
        /// The pod.
        pod_name: String,
        /// Its UID, as the warning names it.
        uid: Option<String>,
        /// What the kubelet said, and what to check.
        reason: String,
    },
    /// The outcome of [`Command::PersistReclaimAfter`]. Only a success lets
    /// the slot count on the new reclaim-after; a platform failure is
    /// retried with backoff while the pod is in use; a refusal
    /// ([`PersistFailure::NotThePod`]) ends the slot.
    Persisted {
        /// The pod patched.
        pod_name: String,
        /// The value written.
        reclaim_after: UnixTime,
        /// What happened.
        result: Result<(), PersistFailure>,
    },
    /// The outcome of [`Command::DeletePod`].
    Deleted {
        /// The pod.
        pod_name: String,
        /// What happened (a pod already gone is `Ok`).
        result: Result<(), DeleteFailure>,
    },
    /// The outcome of [`Command::ListPods`]. The machine judges the listing
    /// by the time it asked for it, never by the time the answer arrives.
    Listed {
        /// The listing named in the command.
        listing: ListingId,
        /// The pods and services, or the platform's error.
        result: Result<Listing, String>,
    },
    /// A pod watch reports a pod created or changed.
    PodObserved {
        /// The pod's new state.
        pod: ObservedPod,
    },
    /// A pod watch reports a pod deleted.
    PodDeleted {
        /// The pod's name.
        pod_name: String,
    },
    /// The pod watch listed every labelled pod again (after an outage it
    /// cannot resume from): each pod is taken as observed, and every pod
    /// this replica knew of before `since` that is missing was deleted
    /// meanwhile.
    Resync {
        /// The pods listed.
        observed: Vec<Arc<ObservedPod>>,
        /// A time no later than the start of the listing (when the watch
        /// was lost, by the driver's clock).
        since: UnixTime,
    },
    /// Time passed: run the timers that are due (creation deadlines,
    /// reclaim-after renewals of busy pods, retries, the GC period). Send it
    /// at [`PodCache::poll_timeout`](super::PodCache::poll_timeout).
    Tick,
    /// Adopt ready pods of the current template and settings version left
    /// by an earlier run or another replica (Porch's `retrieveFunctionPods`),
    /// up to each image's pod limit. Pods not adopted are left for GC, never
    /// orphaned. An adopted pod takes calls only once this replica has
    /// claimed it: extended its reclaim-after, with the write acknowledged
    /// ([`Input::Persisted`]), so that a deletion another replica decided
    /// on the pod as it was before fails its precondition.
    Adopt {
        /// The current pod list of the pod namespace.
        observed: Vec<Arc<ObservedPod>>,
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
        /// The new policy; only its per-function part is taken
        /// ([`PodCachePolicy::set_settings_from`]).
        policy: Box<PodCachePolicy>,
    },
    /// The runner is stopping: waiters get [`PodCacheError::ShuttingDown`] and
    /// new requests are refused. Pods are left for other replicas and GC.
    Shutdown,
}

/// What the driver must do; drained with
/// [`PodCache::poll_command`](super::PodCache::poll_command). Every command
/// that reports an outcome names the input that carries it.
// Commands are drained as soon as an input is handled, a few at a time:
// boxing the creation would cost more than the queue's spare bytes.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq)]
pub enum Command {
    /// Create the pod (recording [`PodCreation::creation`]) and its service,
    /// then report [`Input::Created`]. The pod's readiness arrives through
    /// the watch ([`Input::PodObserved`]).
    CreatePod(PodCreation),
    /// Wait until the service of `pod_name` publishes the pod as a ready
    /// endpoint (service address mode), at most until `deadline`; report
    /// [`Input::EndpointReady`].
    AwaitEndpoint {
        /// The slot to report for.
        slot: SlotId,
        /// Pod and service name.
        pod_name: String,
        /// The pod's IP, to match endpoints without a `targetRef`.
        pod_ip: Option<String>,
        /// When to give up.
        deadline: UnixTime,
    },
    /// Check the health of the wrapper server at `endpoint` (the pod's IP)
    /// until it answers `SERVING`, then report [`Input::WrapperServing`];
    /// give up silently at `deadline` or once the slot is no longer
    /// pending (the kubelet's readiness, a failure or the deadline decide
    /// then).
    ProbeWrapper {
        /// The slot to report for.
        slot: SlotId,
        /// The pod, for the log.
        pod_name: String,
        /// `<pod IP>:9446`.
        endpoint: String,
        /// When to give up.
        deadline: UnixTime,
    },
    /// Answer a connection request. Exactly one per [`Input::Request`].
    Reply {
        /// The request answered.
        request: RequestId,
        /// The pod to call, or why there is none.
        result: Result<Assignment, PodCacheError>,
    },
    /// Delete the pod under `precondition`, then (if the pod is gone) the
    /// service of the same name; report [`Input::Deleted`].
    DeletePod {
        /// Name of both the pod and its service.
        pod_name: String,
        /// What must still hold.
        precondition: DeletePrecondition,
        /// Why, for the log.
        reason: DeleteReason,
    },
    /// Delete the function service `name`, whose pod is gone (not-found is
    /// fine; nothing is reported: the next GC tries again).
    DeleteService {
        /// The service.
        name: String,
    },
    /// Create the service of an adopted pod unless one exists that selects
    /// it (nothing is reported).
    EnsureService {
        /// The pod (and service) name.
        pod_name: String,
    },
    /// Patch the pod's [`RECLAIM_AFTER_ANNOTATION`](super::RECLAIM_AFTER_ANNOTATION)
    /// to `reclaim_after` (as [`UnixTime::to_annotation`]); report
    /// [`Input::Persisted`]. In the background: no reply waits for it.
    ///
    /// The patch carries `uid` as `metadata.uid` when given, so the API
    /// server refuses it when the name now holds another pod (a warm pool's
    /// names come back): report that, and a pod gone, as
    /// [`PersistFailure::NotThePod`].
    PersistReclaimAfter {
        /// The pod to patch.
        pod_name: String,
        /// The UID of the pod the slot uses, when known.
        uid: Option<String>,
        /// The new expiry.
        reclaim_after: UnixTime,
    },
    /// List the services and then the labelled pods of the pod namespace;
    /// report [`Input::Listed`].
    ListPods {
        /// The listing to report.
        listing: ListingId,
    },
    /// This replica no longer uses the pod: drop what it keeps for it
    /// (pooled connections).
    Forget {
        /// The pod.
        pod_name: String,
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
    /// The value of [`CREATION_ANNOTATION`](super::CREATION_ANNOTATION):
    /// unique to this creation.
    pub creation: String,
    /// The image's settings (resources go on the `function` container).
    pub settings: FunctionSettings,
    /// Initial reclaim-after annotation.
    pub reclaim_after: UnixTime,
    /// When the machine gives up on this creation (it then deletes the pod
    /// and fails or moves the waiters); the driver may stop waiting then too.
    pub deadline: UnixTime,
}

/// A successful reply: call the wrapper at `endpoint`, then send
/// [`Input::CallFinished`] (or [`Input::CallUnavailable`]).
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
    /// Every pod the image may have is at its load limit (spec §10 item 33),
    /// or too close to its reclaim-after to take a new call while the
    /// patch extending it keeps failing.
    #[error(
        "no capacity for {image:?}: its {pods} pod(s) each already carry {max_load_per_pod} requests or are about to be reclaimed; retry later, or raise maxParallelPodsPerFunction or maxLoadPerPod for this function"
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
    /// The pod the request waited for cannot start: the kubelet cannot pull
    /// an image or create a container, or a container crashed or ran out of
    /// memory ([`kubelet_failure`](super::template::kubelet_failure)), or
    /// the pod failed. The pod is deleted; the next request tries a new one.
    #[error("function pod {pod} for {image:?} cannot start: {reason}")]
    CannotStart {
        /// The image.
        image: String,
        /// The pod.
        pod: String,
        /// What the kubelet reports, and what to check.
        reason: String,
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
            | PodCacheError::CannotStart { .. }
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
    /// A call found the pod unavailable: no new calls; the slot is
    /// forgotten once its last call here has ended.
    Draining,
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
    /// Pending, ready or draining.
    pub state: SlotState,
    /// Requests assigned and not finished (queued and running), Porch's counter.
    pub load: u32,
    /// Requests on the waitlist of a pending slot.
    pub waiting: usize,
    /// The template version its pod is built from.
    pub template_version: &'a str,
    /// The latest reclaim-after known to be on the pod (persisted and
    /// acknowledged, or observed): what this replica relies on.
    pub reclaim_after: UnixTime,
    /// When a request was last assigned to it, or it became ready.
    pub last_used: UnixTime,
}
