//! The pod-cache state machine: inputs in, commands out, no I/O.
//!
//! Semantics of Porch's current generation (spec §5.2–5.8, §5.12), with the
//! defects of spec §10 fixed by construction, and every decision the driver
//! used to make on its own (creation and readiness, "is this outcome still
//! mine", orphaned services, what a failed call does to its pod, when to
//! list for GC) made here, where the property tests and the simulator see
//! it:
//! - outcomes name the slot they belong to ([`SlotId`]), never "the first
//!   pending slot" (item 6); an outcome for a slot given up deletes what
//!   it created;
//! - a creation goes through sub-states: creating (the objects are being
//!   made), starting (they exist; the watch reports readiness), publishing
//!   (service mode: the service must publish the pod); each ends at the
//!   slot's deadline at the latest (items 15, 28);
//! - the machine counts each slot's load itself and every exit path (reply
//!   with an error, call finished, cancelled) gives the unit back (items 4–5);
//! - waiters of a failed creation are moved to another slot of the image
//!   (counted and really queued) or get the error, never lost (item 5);
//! - pod names never repeat a live pod's name (items 7–8, [`naming`](super::naming)),
//!   and an AlreadyExists answer is taken as this creation's own pod only
//!   when the pod carries this creation's
//!   [`CREATION_ANNOTATION`](super::CREATION_ANNOTATION) (item 29);
//! - once an image has all its pods and each carries `max_load_per_pod`
//!   requests, further requests are rejected with a RESOURCE_EXHAUSTED-class
//!   error (item 33) — the driver never blocks on the machine (item 27);
//! - pods built from an older template are replaced on their next use and
//!   reclaimed by GC like any other pod, never orphaned (items 11, 29).
//!
//! Pods are shared by the runner replicas through their reclaim-after
//! annotation. The safety rules that keep a pod from being deleted while a
//! replica has a call in it:
//! - **persist before extend**: a slot counts on a new reclaim-after only
//!   once the patch that wrote it succeeded ([`Input::Persisted`]); a
//!   failed patch is retried with backoff while the pod is in use; the
//!   patch carries the UID of the pod the slot uses, so it never lands on
//!   another pod of the same name, and a refusal (the pod gone or its name
//!   taken by another pod) ends the slot instead of being retried;
//! - **reuse margin**: a ready pod takes a new call only while the
//!   reclaim-after it counts on is at least [`reuse_margin`] ahead, which
//!   covers a call started just before another replica's GC may act, the
//!   API latency and the clock skew between replicas;
//! - **listing age**: GC judges a listing by the time it asked for it, so a
//!   listing that arrives late never deletes a pod another replica extended
//!   after the listing was taken; and it deletes with a precondition on the
//!   listed `resourceVersion`, so a write in between makes the delete fail;
//! - **drain before delete**: a call that finds its pod unavailable never
//!   deletes the pod (other calls, of this or another replica, may be in
//!   it); the pod takes no new call here and is forgotten once idle here,
//!   and GC reclaims it by its annotation;
//! - **resync**: a pod missing from a listing taken after this replica knew
//!   it was deleted (a watch may miss deletions during an outage): its slot
//!   is dropped and its waiters move on.
//!
//! ## Warm pools (`minReady`, `maxPods`)
//!
//! A function with a pool ([`FunctionSettings::pool`]) names its pods from a
//! set every replica computes alike: pod `i` (`0 <= i < maxPods`) of the
//! pods built from template version `T` with settings version `S` is
//! [`naming::pool_pod_name`]`(image, pool_key(T, S), i)`. No other shared
//! state is needed; the API server's name uniqueness is the lock.
//! - **Bound.** The API server never holds two pods of one name, so no more
//!   than `maxPods` pods of one pool exist at any moment, whatever the
//!   replicas know, however late their listings and watches are, whatever
//!   fails: a replica creating a name another replica's pod holds is
//!   answered AlreadyExists. Pods being deleted keep their name, so they
//!   count too. The transient beyond `maxPods` is zero within a pool; across
//!   pools it is the old pool's pods after a template or settings change
//!   (they take no new call, are never kept warm, and are reclaimed by TTL
//!   once idle), so at most `maxPods` per version the replicas run at once,
//!   for at most 1.5 TTL after their last call plus a GC period.
//! - **Joining, not duplicating.** A creation answered AlreadyExists by a
//!   pod it did not make (its [`CREATION_ANNOTATION`](super::CREATION_ANNOTATION)
//!   differs) that is live joins it: waits for it to be ready, then claims
//!   it (writes a later reclaim-after, before any call) like an adopted pod;
//!   it never deletes it. Two replicas restoring the same missing pod hence
//!   end with one pod both use. A creation with waiters whose name holds a
//!   dead pod tries the pool's next free name; a warm restore stops there
//!   and GC tries again.
//! - **Minimum.** Pods `0..minReady` are warm: each replica holding one
//!   extends its reclaim-after while idle (persist before extend, as for any
//!   pod), and GC claims the warm pods it does not hold, however close their
//!   reclaim-after is (the claim is written before any call, and a deletion
//!   judged on an older listing fails its `resourceVersion` precondition).
//!   GC creates the warm pods its listing lacks, and a watch deletion of a
//!   warm pod creates it again at once; both are idempotent across replicas
//!   by the bound above.
//! - **Reclaim only above the minimum.** GC deletes an expired pool pod only
//!   while its listing shows more than `minReady` live pods of the pool,
//!   highest index first, so replicas reading the same listing pick the same
//!   pods; it never deletes a warm pod by TTL. Replicas acting on different
//!   listings can take the pool below its minimum only while a warm pod is
//!   already missing, until the next GC creates it. A pod that never got
//!   ready and whose reclaim-after passed serves nobody and is deleted
//!   whatever the count.
//! - **Names come back.** A pool name is reused once its pod is gone, so a
//!   slot ends as soon as its name is seen (watch or listing) with another
//!   UID: calls never reach a pod the replica did not create, join or claim.
//!   A failed pod listed under a slot's name with another UID (a late
//!   listing may show the previous pod) is deleted by its own UID only,
//!   never by the slot's.
//!   GC claims a warm pod back only from a listing asked for after the
//!   replica stopped using it, so a stale listing cannot bring back a pod
//!   that failed a call.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

// A fast hasher (randomly seeded per process): the GC hashes every listed
// pod name several times per scan.
use foldhash::{HashMap, HashMapExt, HashSet, HashSetExt};
use std::sync::Arc;
use std::time::Duration;

use super::config::{FunctionSettings, PodCachePolicy, Pool};
use super::io::{
    Assignment, Command, CreateFailure, DeleteFailure, DeletePrecondition, DeleteReason, Input,
    Listing, ListingId, ObservedPhase, ObservedPod, PersistFailure, PodCacheError, PodCreation,
    RequestId, SlotId, SlotState, SlotView,
};
use super::naming;
use super::template::pod_ip_endpoint;
use super::time::UnixTime;
use crate::domain::image::ImageRef;

/// How often a creation may pick another name after an AlreadyExists for a
/// pod that is not its own, before it fails.
const MAX_RENAMES: u32 = 3;

/// How often a failed deletion is retried before it is left to the next GC.
const MAX_DELETE_ATTEMPTS: u32 = 5;

/// How far ahead a ready pod's reclaim-after must be for the pod to take a
/// new request: a quarter of its TTL, at most 30 s. Another replica's GC
/// reads the annotation; the margin covers a call started just before the
/// annotation passes, the latency of the patch that extends it and the
/// clock skew between replicas, so a pod is never picked just before
/// another replica may delete it.
pub fn reuse_margin(ttl: Duration) -> Duration {
    (ttl / 4).min(Duration::from_secs(30))
}

/// The reclaim-after written when a pod is used at `now`: `now + 1.5 × ttl`,
/// rounded up to a whole second. Writing half a TTL ahead lets the next write
/// wait half a TTL while still guaranteeing `reclaim-after >= last use + ttl`.
fn extended(now: UnixTime, ttl: Duration) -> UnixTime {
    (now + ttl + ttl / 2).ceil_secs()
}

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum Timer {
    /// A pending slot's creation deadline.
    Deadline(SlotId),
    /// A busy slot's reclaim-after is due for extension.
    Renew(SlotId),
    /// Retry a failed reclaim-after patch.
    PersistRetry(SlotId),
    /// Retry a failed deletion.
    DeleteRetry(String),
    /// Ask for a GC listing.
    Gc,
}

/// How far a pending slot's creation has come.
#[derive(Debug)]
enum Step {
    /// [`Command::CreatePod`] is out; `seen` holds the pod's endpoint and IP
    /// if the watch reported it ready before the answer.
    Creating {
        seen: Option<(String, Option<String>)>,
    },
    /// The objects exist; waiting for the watch to report the pod ready.
    Starting,
    /// [`Command::AwaitEndpoint`] is out.
    Publishing,
    /// An adopted pod: its claim ([`Command::PersistReclaimAfter`]) is out
    /// or waits for its retry; it serves at `endpoint` once the claim
    /// succeeded.
    Claiming { endpoint: String },
    /// A pool creation found its name held by a terminating pod (a real
    /// kubelet keeps a deleted pod, and so its name, for up to its grace
    /// period): the creation waits until that pod is gone — its deletion
    /// reported, or a listing asked for after `since` without it — then
    /// creates the pod again under the same name, within its deadline.
    NameHeld { since: UnixTime },
}

#[derive(Debug)]
struct Creation {
    deadline: UnixTime,
    waitlist: VecDeque<RequestId>,
    step: Step,
    /// The [`CREATION_ANNOTATION`](super::CREATION_ANNOTATION) value.
    nonce: String,
    /// Names tried before this one.
    renames: u32,
    /// The reclaim-after the pod is created with.
    reclaim_after: UnixTime,
    /// A pool creation answered AlreadyExists by another replica's pod of
    /// the same pool name: the slot waits for that pod instead and claims
    /// it (never deletes it) once it is ready.
    joined: bool,
    /// Pool names this creation found taken.
    tried: Vec<String>,
    /// The wrapper's pod-IP endpoint once the watch showed the pod with an
    /// IP (its containers may still be starting).
    address: Option<String>,
    /// Whether [`Command::ProbeWrapper`] is out for it.
    probing: bool,
}

#[derive(Debug)]
enum Phase {
    Pending(Box<Creation>),
    Ready { endpoint: String },
}

/// Where the slot's reclaim-after patch is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Persist {
    Idle,
    InFlight {
        value: UnixTime,
        attempt: u32,
    },
    /// The last patch failed; a [`Timer::PersistRetry`] is set.
    Failed {
        attempt: u32,
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
    /// The reclaim-after known to be on the pod: written by a patch that
    /// succeeded, or observed. Never raised by a patch still in flight.
    confirmed: UnixTime,
    persist: Persist,
    /// Since when the pod is known to exist (creation answered, adopted or
    /// observed); a listing taken later without it proves it gone.
    known_since: Option<UnixTime>,
    /// A call found it unavailable: out of its function's slots, forgotten
    /// once its load here is zero.
    draining: bool,
    uid: Option<String>,
    renew_at: Option<UnixTime>,
    /// The pod's index in its function's warm pool (its name is
    /// [`naming::pool_pod_name`]); `None` for a per-replica name.
    pool: Option<u32>,
    /// A pool pod among the function's first `minReady`: kept ready, its
    /// reclaim-after extended even while idle, never reclaimed by TTL.
    warm: bool,
}

impl Slot {
    fn is_ready(&self) -> bool {
        matches!(self.phase, Phase::Ready { .. })
    }

    /// A pod seen under the slot's name with `uid` is another incarnation
    /// of the name (a warm pool's names come back), not the slot's pod.
    /// Unknown UIDs on either side prove nothing.
    fn is_other_pod(&self, uid: &Option<String>) -> bool {
        uid.is_some() && self.uid.is_some() && *uid != self.uid
    }

    /// The pod exists at `now` carrying `reclaim_after` (its annotation):
    /// another replica's extension may be on it, so count on it.
    fn seen_with(&mut self, now: UnixTime, reclaim_after: Option<&str>) {
        self.known_since.get_or_insert(now);
        if let Some(r) = reclaim_after.and_then(UnixTime::parse_annotation) {
            self.confirmed = self.confirmed.max(r);
        }
    }

    /// A ready slot may take new requests only while the reclaim-after it
    /// counts on is at least [`reuse_margin`] ahead: once it has passed,
    /// another replica's GC may delete the pod.
    fn usable(&self, now: UnixTime) -> bool {
        !self.draining
            && match self.phase {
                Phase::Pending(_) => true,
                Phase::Ready { .. } => self.confirmed > now + reuse_margin(self.ttl),
            }
    }

    /// Whether the reclaim-after should be extended now: the pod is in use,
    /// or was used less than a TTL before the reclaim-after it counts on…
    /// and that reclaim-after is less than a TTL ahead.
    fn wants_extension(&self, now: UnixTime) -> bool {
        self.is_ready()
            && !self.draining
            && (self.load > 0 || self.warm || self.last_used + self.ttl > self.confirmed)
            && self.confirmed <= now.max(self.last_used) + self.ttl
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

impl Function {
    /// Whether a slot may take new requests under the function's current
    /// template version and settings: same template, same pod shape, and
    /// named the way the function names its pods now (from its pool, within
    /// the pool's size, or per replica without a pool).
    fn fresh(&self, s: &Slot, template_version: &str) -> bool {
        fresh(self.settings.pool(), self.shape, s, template_version)
    }
}

/// [`Function::fresh`] from its parts.
fn fresh(pool: Option<Pool>, shape: u64, s: &Slot, template_version: &str) -> bool {
    let named = match (pool, s.pool) {
        (None, None) => true,
        (Some(pool), Some(i)) => i < pool.max,
        _ => false,
    };
    named && s.template_version == template_version && s.shape == shape
}

#[derive(Debug, Clone, Copy)]
struct Request {
    slot: SlotId,
    waiting: bool,
}

/// A creation given up while its [`Command::CreatePod`] was out.
#[derive(Debug)]
struct Abandoned {
    pod_name: String,
    nonce: String,
    /// The reclaim-after the creation wrote.
    reclaim_after: UnixTime,
}

#[derive(Debug)]
struct Deletion {
    precondition: DeletePrecondition,
    reason: DeleteReason,
    attempt: u32,
    in_flight: bool,
}

/// The pod cache of one runner replica, as a sans-IO state machine.
///
/// Feed inputs with [`handle`](Self::handle), then drain commands with
/// [`poll_command`](Self::poll_command) until it returns `None`, and send
/// [`Input::Tick`] at [`poll_timeout`](Self::poll_timeout). Handling an
/// input costs O(pods of that image) and O(log timers), independent of
/// other images, except listings ([`Input::Listed`], [`Input::Resync`],
/// [`Input::Adopt`]), which look at every pod listed.
#[derive(Debug)]
pub struct PodCache {
    policy: PodCachePolicy,
    template_version: String,
    functions: HashMap<String, Function>,
    slots: HashMap<SlotId, Slot>,
    by_name: HashMap<String, SlotId>,
    requests: HashMap<RequestId, Request>,
    timers: BinaryHeap<Reverse<(UnixTime, Timer)>>,
    /// Slots given up while their creation was out: what it created is
    /// deleted when its answer comes.
    abandoned: HashMap<SlotId, Abandoned>,
    /// Names of pods seen that this replica's naming could produce.
    observed_names: HashSet<String>,
    /// `-<replica token>`, to recognise such names.
    token_suffix: String,
    deleting: HashMap<String, Deletion>,
    /// The listing out, and when it was asked for.
    listing: Option<(ListingId, UnixTime)>,
    next_listing: u64,
    gc_started: bool,
    commands: VecDeque<Command>,
    next_slot: u64,
    next_seq: u64,
    next_shape: u64,
    shutting_down: bool,
    /// Pods this replica stopped using because a call found them
    /// unavailable or they were reported gone, and when: a GC listing
    /// asked for before then may not claim them back.
    given_up: HashMap<String, UnixTime>,
}

impl PodCache {
    /// An empty pod cache; new pods are built from `template_version`.
    pub fn new(policy: PodCachePolicy, template_version: impl Into<String>) -> Self {
        let token_suffix = format!("-{}", policy.replica_token);
        Self {
            policy,
            template_version: template_version.into(),
            functions: HashMap::new(),
            slots: HashMap::new(),
            by_name: HashMap::new(),
            requests: HashMap::new(),
            timers: BinaryHeap::new(),
            abandoned: HashMap::new(),
            observed_names: HashSet::new(),
            token_suffix,
            deleting: HashMap::new(),
            listing: None,
            next_listing: 1,
            gc_started: false,
            commands: VecDeque::new(),
            next_slot: 1,
            next_seq: 1,
            next_shape: 1,
            shutting_down: false,
            given_up: HashMap::new(),
        }
    }

    /// The policy the cache runs with.
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
        if !self.gc_started {
            self.gc_started = true;
            if !self.policy.scan_interval.is_zero() {
                self.timers
                    .push(Reverse((now + self.policy.scan_interval, Timer::Gc)));
            }
        }
        match input {
            Input::Request { request, image } => self.on_request(now, request, &image),
            Input::CallFinished { request } | Input::Cancelled { request } => {
                self.on_release(now, request, false)
            }
            Input::CallUnavailable { request } => self.on_release(now, request, true),
            Input::Created { slot, result } => self.on_created(now, slot, result),
            Input::EndpointReady { slot, result } => self.on_endpoint(now, slot, result),
            Input::WrapperServing { slot, endpoint } => {
                self.on_wrapper_serving(now, slot, endpoint)
            }
            Input::PodCannotStart {
                pod_name,
                uid,
                reason,
            } => self.on_cannot_start(now, &pod_name, uid, reason),
            Input::Persisted {
                pod_name,
                reclaim_after,
                result,
            } => self.on_persisted(now, &pod_name, reclaim_after, result),
            Input::Deleted { pod_name, result } => self.on_deleted(now, &pod_name, result),
            Input::Listed { listing, result } => self.on_listed(now, listing, result),
            Input::PodObserved { pod } => self.on_observed(now, &pod),
            Input::PodDeleted { pod_name } => self.on_pod_deleted(now, &pod_name),
            Input::Resync { observed, since } => self.on_resync(now, &observed, since),
            Input::Tick => self.on_tick(now),
            Input::Adopt { observed } => self.on_adopt(now, &observed),
            Input::WarmUp { images } => {
                for image in images {
                    self.on_warm_up(now, &image);
                }
            }
            Input::TemplateChanged { version } => {
                self.template_version = version;
                let images: Vec<String> = self.functions.keys().cloned().collect();
                for image in images {
                    self.refresh_pool(now, &image);
                }
            }
            Input::PolicyChanged { policy } => self.on_policy(now, *policy),
            Input::Shutdown => self.on_shutdown(),
        }
    }

    /// The next command for the driver, in the order decided.
    pub fn poll_command(&mut self) -> Option<Command> {
        self.commands.pop_front()
    }

    /// When the driver should send [`Input::Tick`] at the latest: the
    /// earliest timer (creation deadline, renewal, retry, GC period). It may
    /// name a timer that has become moot; the tick then does nothing.
    pub fn poll_timeout(&self) -> Option<UnixTime> {
        self.timers.peek().map(|Reverse((t, _))| *t)
    }

    /// Every slot, in no particular order.
    pub fn slots(&self) -> impl Iterator<Item = SlotView<'_>> + '_ {
        self.slots.iter().map(|(id, s)| view(*id, s))
    }

    /// The slots of `image` that take calls, in selection order (draining
    /// slots are not among them).
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

    /// The state of slot `id`, or `None` once it is gone. O(1).
    pub fn slot_state(&self, id: SlotId) -> Option<SlotState> {
        self.slots.get(&id).map(|s| view(id, s).state)
    }

    /// The GC listing out, if any.
    pub fn listing_out(&self) -> Option<ListingId> {
        self.listing.map(|(id, _)| id)
    }

    fn reply(&mut self, request: RequestId, result: Result<Assignment, PodCacheError>) {
        self.commands.push_back(Command::Reply { request, result });
    }

    fn schedule(&mut self, at: UnixTime, timer: Timer) {
        self.timers.push(Reverse((at, timer)));
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
            // A pool scales out only to a name of its pool not known to be
            // taken; with every name taken the request waits like one at
            // the pod limit.
            match self.functions[image].settings.pool() {
                None => return self.scale_out(now, image, Some(request), None),
                Some(_) => {
                    if let Some(i) = self.free_pool_index(image, &[]) {
                        return self.scale_out(now, image, Some(request), Some(i));
                    }
                }
            }
        }
        self.queue(now, request, image, fresh);
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
    /// current template version and settings.
    fn best_slot(&mut self, now: UnixTime, image: &str, fresh_only: bool) -> Option<(SlotId, u32)> {
        let f = self.functions.get_mut(image)?;
        let slots = &self.slots;
        let version = &self.template_version;
        let (pool, shape) = (f.settings.pool(), f.shape);
        let eligible = |id: &SlotId| {
            slots
                .get(id)
                .filter(|s| s.usable(now) && (!fresh_only || fresh(pool, shape, s, version)))
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
    /// longer has (replaced on next use), their reclaim-after is too close,
    /// or the function has more pods than its (lowered) limit. The pods are
    /// not deleted here — another replica may use them; GC deletes them
    /// once their reclaim-after has passed, which no use extends any more.
    /// A warm pool pod whose reclaim-after is too close is kept: it is
    /// extended while idle (see [`Slot::warm`]).
    fn retire_unusable(&mut self, now: UnixTime, image: &str) {
        let Some(limit) = self
            .functions
            .get(image)
            .map(|f| f.settings.max_parallel_pods as usize)
        else {
            return;
        };
        while let Some(id) = self.functions.get(image).and_then(|f| {
            let surplus = f.slots.len() > limit;
            f.slots.iter().copied().find(|id| {
                self.slots.get(id).is_some_and(|s| {
                    s.is_ready()
                        && s.load == 0
                        && (surplus
                            || !f.fresh(s, &self.template_version)
                            || (!s.usable(now) && !s.warm))
                })
            })
        }) {
            self.retire(id);
        }
    }

    /// Forgets a slot without deleting its pod (left to GC).
    fn retire(&mut self, id: SlotId) {
        let (slot, _) = self.detach(id);
        self.commands.push_back(Command::Forget {
            pod_name: slot.pod_name,
        });
    }

    // New per-function settings: see [`Input::PolicyChanged`].
    fn on_policy(&mut self, now: UnixTime, policy: PodCachePolicy) {
        self.policy.set_settings_from(policy);
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
            self.refresh_pool(now, &image);
        }
    }

    /// After a template or settings change: only pods of the current pool
    /// stay warm (older ones are reclaimed by TTL once idle), idle pods that
    /// may take no new call are let go, and the pool's minimum is created.
    fn refresh_pool(&mut self, now: UnixTime, image: &str) {
        let Some(f) = self.functions.get(image) else {
            return;
        };
        let min = f.settings.pool().map_or(0, |p| p.min);
        for id in &f.slots {
            if let Some(slot) = self.slots.get_mut(id) {
                let current = f.fresh(slot, &self.template_version);
                slot.warm = current && slot.pool.is_some_and(|i| i < min);
            }
        }
        self.retire_unusable(now, image);
        self.restore_pool(now, image);
    }

    /// The name of pod `index` of `image`'s pool, for pods built now.
    fn pool_name(&self, image: &str, index: u32) -> String {
        let pod_version = self
            .functions
            .get(image)
            .and_then(|f| f.pod_version.as_deref());
        let key = naming::pool_key(&self.template_version, pod_version);
        naming::pool_pod_name(image, &key, index)
    }

    /// The lowest index of `image`'s pool whose name this replica does not
    /// hold, is not deleting or abandoning, and is not in `skip`.
    fn free_pool_index(&self, image: &str, skip: &[String]) -> Option<u32> {
        let pool = self.functions.get(image)?.settings.pool()?;
        (0..pool.max).find(|&i| {
            let name = self.pool_name(image, i);
            !self.by_name.contains_key(&name)
                && !self.deleting.contains_key(&name)
                && !self.abandoned.values().any(|a| a.pod_name == name)
                && !skip.contains(&name)
        })
    }

    /// Creates the warm pods of `image`'s pool (indices below `minReady`)
    /// that this replica neither holds nor is deleting and that `absent`
    /// does not rule out (a listing holding the name). A name another
    /// replica's pod has already taken is answered AlreadyExists; the
    /// creation then joins that pod, so the pool never grows past its
    /// names (see [`PodCache`]'s doc on warm pools).
    fn restore_pool_where(&mut self, now: UnixTime, image: &str, absent: impl Fn(&str) -> bool) {
        if self.shutting_down {
            return;
        }
        let Some(f) = self.functions.get(image) else {
            return;
        };
        let Some(pool) = f.settings.pool() else {
            return;
        };
        if f.invalid.is_some() {
            return;
        }
        for i in 0..pool.min {
            let name = self.pool_name(image, i);
            // Pods of an older template or settings still at work count
            // against the limit until they are idle.
            let room = self.functions[image].slots.len() < pool.max as usize;
            if room
                && !self.by_name.contains_key(&name)
                && !self.deleting.contains_key(&name)
                && !self.abandoned.values().any(|a| a.pod_name == name)
                && absent(&name)
            {
                self.scale_out(now, image, None, Some(i));
            }
        }
    }

    fn restore_pool(&mut self, now: UnixTime, image: &str) {
        self.restore_pool_where(now, image, |_| true);
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

    /// Remembers `name` if this replica's naming could produce it, so that
    /// it is never chosen for a new pod.
    fn note_name(&mut self, name: &str) {
        let ours = name
            .rsplit_once('-')
            .is_some_and(|(prefix, _)| prefix.ends_with(&self.token_suffix));
        if ours && !self.observed_names.contains(name) {
            self.observed_names.insert(name.to_string());
        }
    }

    fn creation_command(&self, id: SlotId) -> Command {
        let slot = &self.slots[&id];
        let Phase::Pending(c) = &slot.phase else {
            unreachable!("creation of a pending slot")
        };
        let f = &self.functions[&slot.image];
        Command::CreatePod(PodCreation {
            slot: id,
            pod_name: slot.pod_name.clone(),
            image: slot.image.clone(),
            template_version: slot.template_version.clone(),
            settings_version: f.pod_version.clone(),
            creation: c.nonce.clone(),
            settings: f.settings.clone(),
            reclaim_after: c.reclaim_after,
            deadline: c.deadline,
        })
    }

    /// Porch §5.4 step 5 (and warm-up): a new pending slot, with `waiter` on
    /// its waitlist if given, and a creation command.
    fn scale_out(
        &mut self,
        now: UnixTime,
        image: &str,
        waiter: Option<RequestId>,
        pool: Option<u32>,
    ) {
        let id = SlotId(self.next_slot);
        self.next_slot += 1;
        let pod_name = match pool {
            Some(i) => self.pool_name(image, i),
            None => self.fresh_name(image),
        };
        let min = self.functions[image].settings.pool().map_or(0, |p| p.min);
        let ttl = self.functions[image].settings.ttl;
        let deadline = now + self.policy.pod_ready_timeout;
        let creation = Creation {
            deadline,
            waitlist: waiter.into_iter().collect(),
            step: Step::Creating { seen: None },
            nonce: format!("{}-{}", self.policy.instance, id.0),
            renames: 0,
            reclaim_after: extended(now, ttl),
            joined: false,
            tried: Vec::new(),
            address: None,
            probing: false,
        };
        let slot = Slot {
            image: image.to_string(),
            pod_name: pod_name.clone(),
            template_version: self.template_version.clone(),
            shape: self.functions[image].shape,
            ttl,
            phase: Phase::Pending(Box::new(creation)),
            load: u32::from(waiter.is_some()),
            last_used: now,
            confirmed: UnixTime::EPOCH,
            persist: Persist::Idle,
            known_since: None,
            draining: false,
            uid: None,
            renew_at: None,
            pool,
            warm: pool.is_some_and(|i| i < min),
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
        self.by_name.insert(pod_name, id);
        self.schedule(deadline, Timer::Deadline(id));
        self.function_entry(image).slots.push(id);
        let cmd = self.creation_command(id);
        self.commands.push_back(cmd);
    }

    /// Counts `request` on `slot` and replies at once if the pod is ready,
    /// else puts it on the waitlist (Porch §5.4 step 6).
    fn assign(&mut self, now: UnixTime, request: RequestId, id: SlotId) {
        let slot = self.slots.get_mut(&id).expect("assign to a live slot");
        slot.load += 1;
        slot.last_used = now;
        match &mut slot.phase {
            Phase::Pending(c) => {
                c.waitlist.push_back(request);
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

    /// Keeps a ready slot's reclaim-after ahead: if it wants an extension
    /// and no patch is out or waiting for its retry, write `now + 1.5 TTL`.
    /// Hence at most one write per half-TTL per pod, and, once the write
    /// succeeded, `reclaim-after >= last use + ttl`. A busy slot that needs
    /// nothing yet gets a renewal timer instead.
    fn touch(&mut self, now: UnixTime, id: SlotId) {
        let Some(slot) = self.slots.get_mut(&id) else {
            return;
        };
        if slot.persist == Persist::Idle && slot.wants_extension(now) {
            self.issue_persist(now, id, 0);
        } else {
            self.schedule_renew(now, id);
        }
    }

    fn issue_persist(&mut self, now: UnixTime, id: SlotId, attempt: u32) {
        let slot = self.slots.get_mut(&id).expect("persist a live slot");
        // Always a later value than the one on the pod: a claim must change
        // the annotation, or the deletion of a creation given up could not
        // tell it from the creation's own value.
        let value = extended(now, slot.ttl).max(slot.confirmed + Duration::from_secs(1));
        slot.persist = Persist::InFlight { value, attempt };
        self.commands.push_back(Command::PersistReclaimAfter {
            pod_name: slot.pod_name.clone(),
            uid: slot.uid.clone(),
            reclaim_after: value,
        });
    }

    /// A renewal timer at the time a busy slot's reclaim-after becomes less
    /// than a TTL ahead, unless an earlier one is set.
    fn schedule_renew(&mut self, now: UnixTime, id: SlotId) {
        let Some(slot) = self.slots.get_mut(&id) else {
            return;
        };
        if !slot.is_ready()
            || slot.draining
            || (slot.load == 0 && !slot.warm)
            || slot.persist != Persist::Idle
        {
            return;
        }
        let at = slot.confirmed.saturating_sub(slot.ttl);
        if at <= now || slot.renew_at.is_some_and(|r| r <= at) {
            // Due already: the next use or tick extends it.
            return;
        }
        slot.renew_at = Some(at);
        self.schedule(at, Timer::Renew(id));
    }

    fn on_release(&mut self, now: UnixTime, request: RequestId, unavailable: bool) {
        let Some(req) = self.requests.remove(&request) else {
            return;
        };
        let Some(slot) = self.slots.get_mut(&req.slot) else {
            return;
        };
        debug_assert!(slot.load > 0, "load of {} would go negative", req.slot);
        slot.load = slot.load.saturating_sub(1);
        if req.waiting {
            if let Phase::Pending(c) = &mut slot.phase {
                c.waitlist.retain(|r| *r != request);
            }
            let image = slot.image.clone();
            self.reply(request, Err(PodCacheError::Cancelled { image }));
            return;
        }
        slot.last_used = now;
        if unavailable && !slot.draining {
            self.drain(now, req.slot);
        }
        let slot = &self.slots[&req.slot];
        if slot.draining {
            if slot.load == 0 {
                self.retire(req.slot);
            }
            return;
        }
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

    /// Takes a slot out of its function's slots: it gets no new call.
    fn drain(&mut self, now: UnixTime, id: SlotId) {
        let Some(slot) = self.slots.get_mut(&id) else {
            return;
        };
        slot.draining = true;
        if slot.pool.is_some() {
            self.given_up.insert(slot.pod_name.clone(), now);
        }
        if let Some(f) = self.functions.get_mut(&slot.image) {
            f.slots.retain(|s| *s != id);
            if f.round_robin >= f.slots.len() {
                f.round_robin = 0;
            }
        }
    }

    fn on_created(&mut self, now: UnixTime, id: SlotId, result: Result<(), CreateFailure>) {
        let Some(slot) = self.slots.get_mut(&id) else {
            // Given up while the creation was out: whatever it made exists
            // now, so delete it rather than leave it behind.
            if let Some(a) = self.abandoned.remove(&id)
                && !matches!(result, Err(CreateFailure::Failed { .. }))
            {
                let precondition = DeletePrecondition {
                    creation: Some(a.nonce),
                    reclaim_after: Some(a.reclaim_after),
                    ..DeletePrecondition::default()
                };
                self.delete_with(a.pod_name, precondition, DeleteReason::CreationFailed);
            }
            return;
        };
        let Phase::Pending(c) = &mut slot.phase else {
            return;
        };
        let Step::Creating { seen } = &mut c.step else {
            return;
        };
        match result {
            Ok(()) => {
                let seen = seen.take();
                self.on_objects_exist(now, id, seen);
            }
            Err(CreateFailure::AlreadyExists { existing }) => {
                let ours = existing.as_ref().filter(|e| {
                    e.labelled
                        && e.creation.as_deref() == Some(c.nonce.as_str())
                        && !matches!(
                            e.phase,
                            ObservedPhase::Failed { .. } | ObservedPhase::Terminating
                        )
                });
                if let Some(e) = ours {
                    // An earlier attempt of this same creation made it; its
                    // service may be missing.
                    slot.uid.clone_from(&e.uid);
                    let seen = match &e.phase {
                        ObservedPhase::Ready { endpoint } => Some((endpoint.clone(), e.ip.clone())),
                        _ => seen.take(),
                    };
                    self.commands.push_back(Command::EnsureService {
                        pod_name: slot.pod_name.clone(),
                    });
                    self.on_objects_exist(now, id, seen);
                } else if slot.pool.is_some() {
                    self.pool_name_taken(now, id, existing);
                } else if c.renames < MAX_RENAMES && !self.shutting_down {
                    c.renames += 1;
                    let old = std::mem::take(&mut slot.pod_name);
                    let image = slot.image.clone();
                    self.by_name.remove(&old);
                    self.observed_names.insert(old);
                    let name = self.fresh_name(&image);
                    self.by_name.insert(name.clone(), id);
                    self.slots.get_mut(&id).expect("live slot").pod_name = name;
                    let cmd = self.creation_command(id);
                    self.commands.push_back(cmd);
                } else {
                    let err = PodCacheError::CreationFailed {
                        image: slot.image.clone(),
                        pod: slot.pod_name.clone(),
                        reason: format!(
                            "a pod named {} already exists and was not created by this runner (is --replica-token shared by two replicas?)",
                            slot.pod_name
                        ),
                    };
                    self.observed_names.insert(slot.pod_name.clone());
                    // Not ours: never delete it.
                    self.evict(now, id, err, None);
                }
            }
            Err(CreateFailure::Failed { reason }) => {
                let err = PodCacheError::CreationFailed {
                    image: slot.image.clone(),
                    pod: slot.pod_name.clone(),
                    reason,
                };
                // The pod may exist (its service failed): delete it.
                self.evict(now, id, err, Some(DeleteReason::CreationFailed));
            }
        }
    }

    /// A pool creation found its name taken by `existing`, a pod this
    /// creation did not make. A live pod of the same pool (same name, so
    /// same image, template and settings) is joined: the slot waits for it
    /// to be ready and claims it like an adopted pod, and never deletes it.
    /// A terminating pod is waited for ([`Step::NameHeld`]): it keeps the
    /// name until its grace period ends, never serves again, and the name
    /// is the pool's. Otherwise (failed, unreadable) a creation with waiters
    /// tries the next free name of the pool and, with none left, hands its
    /// waiters to the function's other pods; a warm-pool restore just stops
    /// (the next GC tries again).
    fn pool_name_taken(&mut self, now: UnixTime, id: SlotId, existing: Option<Box<ObservedPod>>) {
        let pod_version = self
            .slots
            .get(&id)
            .and_then(|s| self.functions.get(&s.image))
            .map(|f| f.pod_version.clone());
        let slot = self.slots.get_mut(&id).expect("live slot");
        let Phase::Pending(c) = &mut slot.phase else {
            return;
        };
        if existing
            .as_ref()
            .is_some_and(|e| e.phase == ObservedPhase::Terminating)
            && !self.shutting_down
        {
            // Its name comes free once it is gone: wait for that rather
            // than give up or spill to another name.
            c.step = Step::NameHeld { since: now };
            return;
        }
        let live = existing.filter(|e| {
            e.labelled
                && Some(&e.settings_version) == pod_version.as_ref()
                && e.template_version.as_deref() == Some(slot.template_version.as_str())
                && !matches!(
                    e.phase,
                    ObservedPhase::Failed { .. } | ObservedPhase::Terminating
                )
        });
        if let Some(e) = live {
            c.joined = true;
            c.step = Step::Starting;
            slot.uid.clone_from(&e.uid);
            slot.seen_with(now, e.reclaim_after.as_deref());
            if let ObservedPhase::Ready { endpoint } = &e.phase {
                let (endpoint, ip) = (endpoint.clone(), e.ip.clone());
                self.on_pod_ready(now, id, endpoint, ip);
            }
            return;
        }
        let name = slot.pod_name.clone();
        c.tried.push(name.clone());
        let (image, tried, waiting) = (slot.image.clone(), c.tried.clone(), !c.waitlist.is_empty());
        let next = if waiting && !self.shutting_down {
            self.free_pool_index(&image, &tried)
        } else {
            None
        };
        match next {
            Some(i) => {
                let name = self.pool_name(&image, i);
                let min = self.functions[&image].settings.pool().map_or(0, |p| p.min);
                self.by_name.remove(&slot_name(&self.slots, id));
                self.by_name.insert(name.clone(), id);
                let slot = self.slots.get_mut(&id).expect("live slot");
                slot.pod_name = name;
                slot.pool = Some(i);
                slot.warm = i < min;
                let cmd = self.creation_command(id);
                self.commands.push_back(cmd);
            }
            None => {
                let err = PodCacheError::CreationFailed {
                    image,
                    pod: name.clone(),
                    reason: format!(
                        "pod {name} of the function's pool exists and is not ready to share; every name of the pool is taken"
                    ),
                };
                self.evict(now, id, err, None);
            }
        }
    }

    /// The pod and service of a pending slot exist: wait for readiness, or
    /// go on at once if the watch already reported it.
    fn on_objects_exist(
        &mut self,
        now: UnixTime,
        id: SlotId,
        seen: Option<(String, Option<String>)>,
    ) {
        let slot = self.slots.get_mut(&id).expect("live slot");
        let Phase::Pending(c) = &mut slot.phase else {
            return;
        };
        c.step = Step::Starting;
        slot.confirmed = slot.confirmed.max(c.reclaim_after);
        slot.known_since.get_or_insert(now);
        if let Some((endpoint, ip)) = seen {
            self.on_pod_ready(now, id, endpoint, ip);
        } else {
            self.probe_if_addressed(id);
        }
    }

    /// Emits [`Command::ProbeWrapper`] for a starting pod of this replica's
    /// own creation once it has an IP, once, when the policy asks for it
    /// (pod-IP address mode): the wrapper may answer well before the
    /// kubelet's next readiness probe, and before the kubelet's status
    /// even says its container runs (the kubelet learns that at its next
    /// relist of the containers, up to a second later). The probe retries
    /// until the wrapper answers.
    fn probe_if_addressed(&mut self, id: SlotId) {
        if !self.policy.probe_wrapper || self.policy.await_endpoints {
            return;
        }
        let Some(slot) = self.slots.get_mut(&id) else {
            return;
        };
        let Phase::Pending(c) = &mut slot.phase else {
            return;
        };
        if c.probing || c.joined || !matches!(c.step, Step::Starting) {
            return;
        }
        let Some(endpoint) = c.address.clone() else {
            return;
        };
        c.probing = true;
        self.commands.push_back(Command::ProbeWrapper {
            slot: id,
            pod_name: slot.pod_name.clone(),
            endpoint,
            deadline: c.deadline,
        });
    }

    /// The kubelet says it cannot start the pod of a pending slot: fail its
    /// waiters now (not at the pod-ready deadline) and delete the pod; the
    /// next request tries a new one. Only for the slot's own pod (same UID).
    fn on_cannot_start(
        &mut self,
        now: UnixTime,
        pod_name: &str,
        uid: Option<String>,
        reason: String,
    ) {
        let Some(&id) = self.by_name.get(pod_name) else {
            return;
        };
        let slot = &self.slots[&id];
        let Phase::Pending(c) = &slot.phase else {
            return;
        };
        if uid.is_none() || slot.uid != uid || matches!(c.step, Step::NameHeld { .. }) {
            return;
        }
        let err = PodCacheError::CannotStart {
            image: slot.image.clone(),
            pod: slot.pod_name.clone(),
            reason,
        };
        self.evict(now, id, err, Some(DeleteReason::Failed));
    }

    /// The wrapper of a starting pod answered its health check: it takes
    /// calls now (pod-IP address mode), as if the kubelet had reported it
    /// ready.
    fn on_wrapper_serving(&mut self, now: UnixTime, id: SlotId, endpoint: String) {
        let Some(slot) = self.slots.get(&id) else {
            return;
        };
        let Phase::Pending(c) = &slot.phase else {
            return;
        };
        if matches!(c.step, Step::Starting) && !c.joined && !self.policy.await_endpoints {
            self.make_ready(now, id, endpoint);
        }
    }

    /// The pending slot's pod is ready: wait for its service to publish it
    /// (service mode), or take calls now.
    fn on_pod_ready(&mut self, now: UnixTime, id: SlotId, endpoint: String, ip: Option<String>) {
        let slot = self.slots.get_mut(&id).expect("live slot");
        let Phase::Pending(c) = &mut slot.phase else {
            return;
        };
        if c.joined {
            // Another replica's pod: claim it before any call.
            c.step = Step::Claiming { endpoint };
            return self.issue_persist(now, id, 0);
        }
        self.publish_then_ready(now, id, endpoint, ip);
    }

    /// A pending slot's pod is ready and, if adopted or joined, claimed:
    /// in service mode its service must publish it (and the driver see the
    /// wrapper answer through it) first — a pod the kubelet reports ready is
    /// not yet routable through its ClusterIP until kube-proxy has written
    /// the service's rules; otherwise it takes calls now.
    fn publish_then_ready(
        &mut self,
        now: UnixTime,
        id: SlotId,
        endpoint: String,
        ip: Option<String>,
    ) {
        let await_endpoints = self.policy.await_endpoints;
        let slot = self.slots.get_mut(&id).expect("live slot");
        let Phase::Pending(c) = &mut slot.phase else {
            return;
        };
        if await_endpoints {
            c.step = Step::Publishing;
            let cmd = Command::AwaitEndpoint {
                slot: id,
                pod_name: slot.pod_name.clone(),
                pod_ip: ip,
                deadline: c.deadline,
            };
            self.commands.push_back(cmd);
        } else {
            self.make_ready(now, id, endpoint);
        }
    }

    fn on_endpoint(&mut self, now: UnixTime, id: SlotId, result: Result<String, String>) {
        let Some(slot) = self.slots.get(&id) else {
            return;
        };
        let Phase::Pending(c) = &slot.phase else {
            return;
        };
        if !matches!(c.step, Step::Publishing) {
            return;
        }
        match result {
            Ok(endpoint) => self.make_ready(now, id, endpoint),
            Err(reason) => {
                let err = PodCacheError::CreationFailed {
                    image: slot.image.clone(),
                    pod: slot.pod_name.clone(),
                    reason,
                };
                // An adopted or joined pod is not this replica's to delete.
                let ours = !c.joined && !c.nonce.is_empty();
                let delete = ours.then_some(DeleteReason::CreationFailed);
                self.evict(now, id, err, delete);
            }
        }
    }

    // Porch §5.6 success path, matched by slot id (item 6).
    fn make_ready(&mut self, now: UnixTime, id: SlotId, endpoint: String) {
        let slot = self.slots.get_mut(&id).expect("live slot");
        let Phase::Pending(c) = &mut slot.phase else {
            return;
        };
        let waiters = std::mem::take(&mut c.waitlist);
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
        if served || self.slots[&id].warm {
            self.touch(now, id);
        }
    }

    /// Removes a slot, deletes its pod if `delete` says why, and moves or
    /// fails its waiters with `err`. A failed pod is deleted whoever uses
    /// it (it serves nobody); a creation given up is deleted only if the
    /// pod is still that creation's and unchanged since it is read (another
    /// replica may have adopted and claimed it meanwhile).
    fn evict(
        &mut self,
        now: UnixTime,
        id: SlotId,
        err: PodCacheError,
        delete: Option<DeleteReason>,
    ) {
        let (slot, waiters) = self.detach(id);
        if slot.pool.is_some() {
            self.given_up.insert(slot.pod_name.clone(), now);
        }
        self.commands.push_back(Command::Forget {
            pod_name: slot.pod_name.clone(),
        });
        if let Some(reason) = delete {
            let (creation, reclaim_after) = match (&slot.phase, reason) {
                (Phase::Pending(c), DeleteReason::CreationFailed) => {
                    (Some(c.nonce.clone()), Some(c.reclaim_after))
                }
                _ => (None, None),
            };
            let precondition = DeletePrecondition {
                uid: slot.uid.clone(),
                resource_version: None,
                creation,
                reclaim_after,
            };
            self.delete_with(slot.pod_name.clone(), precondition, reason);
        }
        self.redistribute(now, &slot.image, waiters, err);
    }

    /// Asks for the deletion of failed pod `pod_name` (with a UID
    /// precondition when known), unless one is out already.
    fn delete_failed(&mut self, pod_name: String, uid: Option<String>) {
        let precondition = DeletePrecondition {
            uid,
            ..DeletePrecondition::default()
        };
        self.delete_with(pod_name, precondition, DeleteReason::Failed);
    }

    fn delete_with(
        &mut self,
        pod_name: String,
        precondition: DeletePrecondition,
        reason: DeleteReason,
    ) {
        if self.deleting.contains_key(&pod_name) {
            return;
        }
        self.deleting.insert(
            pod_name.clone(),
            Deletion {
                precondition: precondition.clone(),
                reason,
                attempt: 0,
                in_flight: true,
            },
        );
        self.commands.push_back(Command::DeletePod {
            pod_name,
            precondition,
            reason,
        });
    }

    fn on_deleted(&mut self, now: UnixTime, pod_name: &str, result: Result<(), DeleteFailure>) {
        let Some(d) = self.deleting.get_mut(pod_name) else {
            return;
        };
        match result {
            Ok(()) | Err(DeleteFailure::Conflict) => {
                self.deleting.remove(pod_name);
            }
            Err(DeleteFailure::Failed { .. }) => {
                d.attempt += 1;
                d.in_flight = false;
                if d.attempt >= MAX_DELETE_ATTEMPTS {
                    // The next GC finds it again.
                    self.deleting.remove(pod_name);
                } else {
                    let at = now + self.policy.backoff(d.attempt);
                    self.schedule(at, Timer::DeleteRetry(pod_name.to_string()));
                }
            }
        }
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
            Phase::Pending(c) => std::mem::take(&mut c.waitlist),
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

    fn on_persisted(
        &mut self,
        now: UnixTime,
        pod_name: &str,
        value: UnixTime,
        result: Result<(), PersistFailure>,
    ) {
        let Some(&id) = self.by_name.get(pod_name) else {
            return;
        };
        let slot = self.slots.get_mut(&id).expect("indexed slot");
        let ours = match slot.persist {
            Persist::InFlight { value: v, attempt } if v == value => Some(attempt),
            _ => None,
        };
        if ours.is_some() && matches!(result, Err(PersistFailure::NotThePod(_))) {
            // The API server refused the write: the pod is gone or its name
            // holds another pod (the patch carried the slot's UID). Nothing
            // here may count on that name any more; retrying cannot help.
            let err = gone(slot, false);
            return self.evict(now, id, err, None);
        }
        if let Phase::Pending(c) = &mut slot.phase
            && let Step::Claiming { endpoint } = &mut c.step
        {
            match (result, ours) {
                (Ok(()), Some(_)) => {
                    slot.confirmed = slot.confirmed.max(value);
                    slot.persist = Persist::Idle;
                    let endpoint = std::mem::take(endpoint);
                    self.publish_then_ready(now, id, endpoint, None);
                }
                (Err(_), Some(attempt)) => {
                    let attempt = attempt + 1;
                    slot.persist = Persist::Failed { attempt };
                    let at = now + self.policy.backoff(attempt);
                    self.schedule(at, Timer::PersistRetry(id));
                }
                _ => {}
            }
            return;
        }
        match (result, ours) {
            (Ok(()), ours) => {
                // Persisted: only now does the slot count on it.
                slot.confirmed = slot.confirmed.max(value);
                if ours.is_some() {
                    slot.persist = Persist::Idle;
                    self.touch(now, id);
                }
            }
            (Err(_), Some(attempt)) => {
                let attempt = attempt + 1;
                slot.persist = Persist::Failed { attempt };
                let at = now + self.policy.backoff(attempt);
                self.schedule(at, Timer::PersistRetry(id));
            }
            (Err(_), None) => {}
        }
    }

    // Porch §5.7: what the watch reports about a pod.
    fn on_observed(&mut self, now: UnixTime, pod: &ObservedPod) {
        let Some(&id) = self.by_name.get(&pod.name) else {
            return;
        };
        let slot = self.slots.get_mut(&id).expect("indexed slot");
        if slot.is_other_pod(&pod.uid) {
            // Another pod under the slot's name (a warm pool's names come
            // back): the slot's own pod is gone.
            let err = gone(slot, false);
            return self.evict(now, id, err, None);
        }
        if let Phase::Pending(c) = &slot.phase
            && matches!(c.step, Step::NameHeld { .. })
        {
            // The terminating pod holding the name: its deletion (or a
            // listing without it) lets the creation go on.
            return;
        }
        if let Phase::Pending(c) = &slot.phase
            && matches!(c.step, Step::Creating { .. })
            && slot.pool.is_some()
            && pod.creation.as_deref() != Some(c.nonce.as_str())
        {
            // Not (yet) the pod this creation makes.
            return;
        }
        if pod.uid.is_some() {
            slot.uid.clone_from(&pod.uid);
        }
        match (&mut slot.phase, &pod.phase) {
            (Phase::Pending(c), ObservedPhase::Ready { endpoint }) => match &mut c.step {
                Step::Creating { seen } => *seen = Some((endpoint.clone(), pod.ip.clone())),
                Step::Starting => {
                    let (endpoint, ip) = (endpoint.clone(), pod.ip.clone());
                    self.on_pod_ready(now, id, endpoint, ip);
                }
                Step::Publishing | Step::Claiming { .. } | Step::NameHeld { .. } => {}
            },
            (Phase::Pending(_), ObservedPhase::Failed { reason }) => {
                // The kubelet says it will not run (an image it cannot
                // pull, a crash loop…): fail the waiters now, not at the
                // pod-ready deadline; the next request tries a new pod.
                let err = PodCacheError::CannotStart {
                    image: slot.image.clone(),
                    pod: slot.pod_name.clone(),
                    reason: reason.clone(),
                };
                self.evict(now, id, err, Some(DeleteReason::Failed));
            }
            (Phase::Pending(c), ObservedPhase::Terminating) => {
                if !matches!(c.step, Step::Creating { .. }) {
                    let err = PodCacheError::PodGone {
                        image: slot.image.clone(),
                        pod: slot.pod_name.clone(),
                        failed: false,
                    };
                    self.evict(now, id, err, None);
                }
            }
            (Phase::Pending(c), ObservedPhase::Pending) => {
                if let Some(ip) = &pod.ip {
                    c.address = Some(pod_ip_endpoint(ip));
                }
                if !matches!(c.step, Step::Creating { .. }) {
                    slot.known_since.get_or_insert(now);
                    self.probe_if_addressed(id);
                }
            }
            (Phase::Ready { .. }, ObservedPhase::Failed { .. }) => {
                let err = gone(slot, true);
                self.evict(now, id, err, Some(DeleteReason::Failed));
            }
            (Phase::Ready { .. }, ObservedPhase::Terminating) => {
                let err = gone(slot, false);
                self.evict(now, id, err, None);
            }
            (Phase::Ready { .. }, _) => slot.seen_with(now, pod.reclaim_after.as_deref()),
        }
    }

    // Porch §5.7: a deleted pod is evicted at once; a warm pool pod is
    // created anew.
    fn on_pod_deleted(&mut self, now: UnixTime, pod_name: &str) {
        self.evict_deleted(now, pod_name);
        if naming::is_pool_name(pod_name) {
            let images: Vec<String> = self
                .functions
                .iter()
                .filter(|(_, f)| f.settings.pool().is_some_and(|p| p.min > 0))
                .map(|(image, _)| image.clone())
                .collect();
            for image in images {
                self.restore_pool_where(now, &image, |name| name == pod_name);
            }
        }
    }

    fn evict_deleted(&mut self, now: UnixTime, pod_name: &str) {
        let Some(&id) = self.by_name.get(pod_name) else {
            return;
        };
        let slot = &self.slots[&id];
        if let Phase::Pending(c) = &slot.phase
            && matches!(c.step, Step::NameHeld { .. })
        {
            return self.name_freed(id);
        }
        if let Phase::Pending(c) = &slot.phase
            && matches!(c.step, Step::Creating { .. })
            && slot.known_since.is_none()
        {
            // A pod of this name went away before this creation made its
            // own: not this slot's pod.
            return;
        }
        let err = gone(slot, false);
        self.evict(now, id, err, None);
    }

    /// The terminating pod that held the name of `id`'s creation is gone:
    /// create the pod under that name now.
    fn name_freed(&mut self, id: SlotId) {
        let Some(slot) = self.slots.get_mut(&id) else {
            return;
        };
        let Phase::Pending(c) = &mut slot.phase else {
            return;
        };
        c.step = Step::Creating { seen: None };
        let cmd = self.creation_command(id);
        self.commands.push_back(cmd);
    }

    /// Creations waiting for a name ([`Step::NameHeld`]) since before
    /// `asked` whose name a listing asked for at `asked` does not hold: the
    /// name is free.
    fn names_freed_by_listing(&mut self, asked: UnixTime, present: &HashSet<&str>) {
        let freed: Vec<SlotId> = self
            .slots
            .iter()
            .filter(|(_, s)| {
                matches!(&s.phase, Phase::Pending(c)
                    if matches!(c.step, Step::NameHeld { since } if since <= asked))
                    && !present.contains(s.pod_name.as_str())
            })
            .map(|(id, _)| *id)
            .collect();
        for id in freed {
            self.name_freed(id);
        }
    }

    /// Slots whose pod this replica knew of before `since` and that a
    /// listing taken after `since` does not hold: the pod was deleted.
    fn drop_vanished(&mut self, now: UnixTime, since: UnixTime, present: &HashSet<&str>) {
        let vanished: Vec<String> = self
            .slots
            .values()
            .filter(|s| s.known_since.is_some_and(|k| k <= since))
            .filter(|s| !present.contains(s.pod_name.as_str()))
            .map(|s| s.pod_name.clone())
            .collect();
        for name in vanished {
            self.on_pod_deleted(now, &name);
        }
    }

    fn on_resync(&mut self, now: UnixTime, observed: &[Arc<ObservedPod>], since: UnixTime) {
        for o in observed {
            self.on_observed(now, o);
        }
        let present: HashSet<&str> = observed.iter().map(|o| o.name.as_str()).collect();
        self.drop_vanished(now, since, &present);
        self.names_freed_by_listing(since, &present);
    }

    fn on_tick(&mut self, now: UnixTime) {
        while let Some(Reverse((at, _))) = self.timers.peek() {
            if *at > now {
                break;
            }
            let Reverse((at, timer)) = self.timers.pop().expect("peeked");
            match timer {
                Timer::Deadline(id) => self.on_deadline(now, id),
                Timer::Renew(id) => {
                    if let Some(slot) = self.slots.get_mut(&id)
                        && slot.renew_at == Some(at)
                    {
                        slot.renew_at = None;
                        if slot.load > 0 || slot.warm {
                            self.touch(now, id);
                        }
                    }
                }
                Timer::PersistRetry(id) => {
                    if let Some(slot) = self.slots.get_mut(&id)
                        && let Persist::Failed { attempt } = slot.persist
                    {
                        let claiming = matches!(
                            &slot.phase,
                            Phase::Pending(c) if matches!(c.step, Step::Claiming { .. })
                        );
                        if claiming || slot.wants_extension(now) {
                            self.issue_persist(now, id, attempt);
                        } else {
                            slot.persist = Persist::Idle;
                        }
                    }
                }
                Timer::DeleteRetry(pod_name) => {
                    if let Some(d) = self.deleting.get_mut(&pod_name)
                        && !d.in_flight
                    {
                        d.in_flight = true;
                        let cmd = Command::DeletePod {
                            pod_name,
                            precondition: d.precondition.clone(),
                            reason: d.reason,
                        };
                        self.commands.push_back(cmd);
                    }
                }
                Timer::Gc => {
                    if self.listing.is_none() && !self.shutting_down {
                        let listing = ListingId(self.next_listing);
                        self.next_listing += 1;
                        self.listing = Some((listing, now));
                        self.commands.push_back(Command::ListPods { listing });
                    }
                    let next = now + self.policy.scan_interval;
                    self.schedule(next, Timer::Gc);
                }
            }
        }
    }

    fn on_deadline(&mut self, now: UnixTime, id: SlotId) {
        let Some(slot) = self.slots.get(&id) else {
            return;
        };
        let Phase::Pending(c) = &slot.phase else {
            return;
        };
        if c.deadline > now {
            return;
        }
        let err = PodCacheError::CreationTimedOut {
            image: slot.image.clone(),
            pod: slot.pod_name.clone(),
            after: self.policy.pod_ready_timeout,
        };
        if matches!(c.step, Step::Claiming { .. } | Step::NameHeld { .. }) || c.joined {
            // Not ours to delete: left to GC.
            return self.evict(now, id, err, None);
        }
        if matches!(c.step, Step::Creating { .. }) {
            let a = Abandoned {
                pod_name: slot.pod_name.clone(),
                nonce: c.nonce.clone(),
                reclaim_after: c.reclaim_after,
            };
            self.abandoned.insert(id, a);
        }
        self.evict(now, id, err, Some(DeleteReason::CreationFailed));
    }

    fn on_listed(&mut self, now: UnixTime, listing: ListingId, result: Result<Listing, String>) {
        let Some((out, started)) = self.listing else {
            return;
        };
        if out != listing {
            return;
        }
        self.listing = None;
        if let Ok(l) = result {
            let present: HashSet<&str> = l.pods.iter().map(|o| o.name.as_str()).collect();
            self.names_freed_by_listing(started, &present);
            self.gc(now, started, &l);
        }
    }

    // Seeds / Gen A GC over the shared annotation, with Porch Gen B/C's
    // "never while in use" on top, judged at the time the listing was
    // asked for (`started`), with deletions conditional on the pod being
    // as listed. Warm pools: pods are reclaimed only while their function
    // keeps more than its minimum, warm pods are claimed and the missing
    // ones created.
    fn gc(&mut self, now: UnixTime, started: UnixTime, listing: &Listing) {
        if !self.shutting_down {
            for image in self.policy.min_ready_images() {
                self.function_entry(&image);
            }
        }
        // The names of every pool as built now: name -> (image, index).
        let pooled: Vec<(String, Pool)> = self
            .functions
            .iter()
            .filter(|(_, f)| f.invalid.is_none())
            .filter_map(|(image, f)| f.settings.pool().map(|p| (image.clone(), p)))
            .collect();
        let mut pool_of: HashMap<String, (String, u32, u32)> = HashMap::new();
        for (image, p) in &pooled {
            for i in 0..p.max {
                pool_of.insert(self.pool_name(image, i), (image.clone(), i, p.min));
            }
        }
        // Live pods of each pool in the listing: what a reclaim may not
        // take below the minimum.
        let mut live: HashMap<String, u32> = HashMap::new();
        for o in &listing.pods {
            let dying = matches!(
                o.phase,
                ObservedPhase::Failed { .. } | ObservedPhase::Terminating
            );
            if let Some((image, _, _)) = pool_of.get(&o.name)
                && o.labelled
                && !dying
            {
                *live.entry(image.clone()).or_default() += 1;
            }
        }
        // Expired pool pods: (index, name, precondition, local slot).
        let mut expired: Vec<(u32, String, DeletePrecondition, Option<SlotId>)> = Vec::new();
        let mut claims: Vec<Arc<ObservedPod>> = Vec::new();
        let mut keep_warm: Vec<SlotId> = Vec::new();
        for o in &listing.pods {
            let local = self.by_name.get(&o.name).copied();
            // A local pod's name is known already (created here, or noted
            // when adopted); only strangers need noting.
            if local.is_none() {
                self.note_name(&o.name);
            }
            if !o.labelled || o.phase == ObservedPhase::Terminating {
                continue;
            }
            if let ObservedPhase::Failed { .. } = o.phase {
                match local {
                    Some(id) if self.slots[&id].is_other_pod(&o.uid) => {
                        // Another pod under the slot's name failed (a warm
                        // pool's names come back, and a late listing may
                        // show the previous one): the slot's own pod is not
                        // known to have failed and may carry calls of other
                        // replicas, so only the listed pod is deleted, by
                        // its own UID; the slot ends as for any other pod
                        // under its name.
                        let err = gone(&self.slots[&id], false);
                        self.evict(now, id, err, None);
                        self.delete_failed(o.name.clone(), o.uid.clone());
                    }
                    Some(id) => {
                        let slot = self.slots.get_mut(&id).expect("indexed slot");
                        if slot.uid.is_none() {
                            slot.uid.clone_from(&o.uid);
                        }
                        let err = gone(slot, true);
                        self.evict(now, id, err, Some(DeleteReason::Failed));
                    }
                    None => self.delete_failed(o.name.clone(), o.uid.clone()),
                }
                continue;
            }
            if let Some(id) = local
                && matches!(self.slots[&id].phase, Phase::Pending(_))
            {
                continue;
            }
            let in_pool = pool_of.get(&o.name).map(|(_, i, min)| (*i, *i < *min));
            let ready = matches!(o.phase, ObservedPhase::Ready { .. });
            let Some(annotated) = o
                .reclaim_after
                .as_deref()
                .and_then(UnixTime::parse_annotation)
            else {
                // Missing or invalid annotation: grace, not deletion.
                match local {
                    Some(id) => {
                        if self.slots[&id].persist == Persist::Idle {
                            self.issue_persist(now, id, 0);
                        }
                    }
                    None => {
                        let ttl = self.policy.settings_for(&o.image).ttl;
                        self.commands.push_back(Command::PersistReclaimAfter {
                            pod_name: o.name.clone(),
                            uid: o.uid.clone(),
                            reclaim_after: extended(now, ttl),
                        });
                    }
                }
                continue;
            };
            // Built only for a deletion: the scan visits every pod.
            let precondition = || DeletePrecondition {
                uid: o.uid.clone(),
                resource_version: o.resource_version.clone(),
                ..DeletePrecondition::default()
            };
            if let Some(id) = local
                && self.slots[&id].is_other_pod(&o.uid)
            {
                // Another pod under the slot's name: the slot's is gone.
                let err = gone(&self.slots[&id], false);
                self.evict(now, id, err, None);
                continue;
            }
            match local {
                Some(id) => {
                    let slot = self.slots.get_mut(&id).expect("indexed slot");
                    slot.confirmed = slot.confirmed.max(annotated);
                    let idle = slot.load == 0 && slot.persist == Persist::Idle;
                    if slot.warm {
                        keep_warm.push(id);
                    } else if idle && slot.confirmed <= started && annotated <= started {
                        match in_pool {
                            Some((i, _)) => {
                                expired.push((i, o.name.clone(), precondition(), Some(id)))
                            }
                            None => {
                                self.retire(id);
                                self.delete_with(
                                    o.name.clone(),
                                    precondition(),
                                    DeleteReason::Expired,
                                );
                            }
                        }
                    }
                }
                None => match in_pool {
                    Some(_) if !ready && annotated <= started => {
                        // Never became ready and nobody extends it: it
                        // serves nobody, so the minimum does not keep it.
                        if let Some(n) = live.get_mut(&o.image) {
                            *n = n.saturating_sub(1);
                        }
                        self.delete_with(o.name.clone(), precondition(), DeleteReason::Expired);
                    }
                    // Not from a listing older than this replica's news
                    // that the pod failed a call or is gone.
                    Some((_, true))
                        if ready && self.given_up.get(&o.name).is_none_or(|t| *t < started) =>
                    {
                        claims.push(o.clone())
                    }
                    Some((i, false)) if annotated <= started => {
                        expired.push((i, o.name.clone(), precondition(), None));
                    }
                    None if annotated <= started => {
                        self.delete_with(o.name.clone(), precondition(), DeleteReason::Expired);
                    }
                    _ => {}
                },
            }
        }
        self.given_up.retain(|_, t| *t >= started);
        // Reclaim only above the minimum, highest index first, so that
        // replicas reading the same listing pick the same pods.
        expired.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
        for (_, name, precondition, local) in expired {
            let Some((image, _, min)) = pool_of.get(&name) else {
                continue;
            };
            let n = live.entry(image.clone()).or_default();
            if *n <= *min {
                continue;
            }
            *n -= 1;
            if let Some(id) = local {
                self.retire(id);
            }
            self.delete_with(name, precondition, DeleteReason::Expired);
        }
        for id in keep_warm {
            self.touch(now, id);
        }
        self.on_adopt(now, &claims);
        let present: HashSet<&str> = listing.pods.iter().map(|o| o.name.as_str()).collect();
        self.drop_vanished(now, started, &present);
        // Function services whose pod is gone (a runner stopped between the
        // two deletions, or the pod was deleted by hand). Porch never
        // deletes these.
        for s in &listing.services {
            if s.selects_own_pod
                && !present.contains(s.name.as_str())
                && !self.by_name.contains_key(&s.name)
            {
                self.commands.push_back(Command::DeleteService {
                    name: s.name.clone(),
                });
            }
        }
        // The minimum after failures and deletions: warm pods no listing
        // holds are created anew.
        for (image, p) in &pooled {
            if p.min > 0 {
                // Idle pods of an older pool make room first.
                self.retire_unusable(now, image);
                self.restore_pool_where(now, image, |name| !present.contains(name));
            }
        }
        self.functions
            .retain(|_, f| !f.slots.is_empty() || f.settings.pool().is_some_and(|p| p.min > 0));
    }

    // Porch §5.9, safely: only ready pods of the current template and
    // settings whose reclaim-after is far enough ahead, within the
    // per-function limit (item 26); the rest is left to GC instead of being
    // deleted or orphaned (item 11).
    fn on_adopt(&mut self, now: UnixTime, observed: &[Arc<ObservedPod>]) {
        for o in observed {
            self.observed_names.insert(o.name.clone());
        }
        for o in observed {
            let ObservedPhase::Ready { endpoint } = &o.phase else {
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
            let given_up = self.deleting.contains_key(&o.name)
                || self.abandoned.values().any(|a| a.pod_name == o.name);
            if !o.labelled || !current || given_up || self.by_name.contains_key(&o.name) {
                continue;
            }
            let id = SlotId(self.next_slot);
            self.function_entry(&o.image);
            let index = self.pool_index_of(&o.image, &o.name);
            let f = &self.functions[&o.image];
            let pool = f.settings.pool();
            // A pool adopts only its own names; without a pool, no pool
            // names.
            let named = match pool {
                Some(_) => index.is_some(),
                None => !naming::is_pool_name(&o.name),
            };
            let warm = pool.zip(index).is_some_and(|(p, i)| i < p.min);
            // A warm pod is claimed however close its reclaim-after is: the
            // claim writes a later value before any call, and a deletion
            // judged on the old value carries a precondition the claim
            // breaks.
            if f.invalid.is_some()
                || !named
                || f.slots.len() as u32 >= f.settings.max_parallel_pods
                || o.settings_version != f.pod_version
                || (!warm && reclaim_after <= now + reuse_margin(f.settings.ttl))
            {
                continue;
            }
            let (ttl, shape) = (f.settings.ttl, f.shape);
            let f = self.functions.get_mut(&o.image).expect("entered above");
            f.slots.push(id);
            self.next_slot += 1;
            self.by_name.insert(o.name.clone(), id);
            let deadline = now + self.policy.pod_ready_timeout;
            let claim = Creation {
                deadline,
                waitlist: VecDeque::new(),
                step: Step::Claiming {
                    endpoint: endpoint.clone(),
                },
                nonce: String::new(),
                renames: 0,
                reclaim_after,
                joined: false,
                tried: Vec::new(),
                address: None,
                probing: false,
            };
            self.slots.insert(
                id,
                Slot {
                    image: o.image.clone(),
                    pod_name: o.name.clone(),
                    template_version: self.template_version.clone(),
                    shape,
                    ttl,
                    phase: Phase::Pending(Box::new(claim)),
                    load: 0,
                    last_used: now,
                    confirmed: reclaim_after,
                    persist: Persist::Idle,
                    known_since: Some(now),
                    draining: false,
                    uid: o.uid.clone(),
                    renew_at: None,
                    pool: index,
                    warm,
                },
            );
            self.schedule(deadline, Timer::Deadline(id));
            self.commands.push_back(Command::EnsureService {
                pod_name: o.name.clone(),
            });
            // The claim: no call before this write has succeeded.
            self.issue_persist(now, id, 0);
        }
    }

    /// The index of `name` in `image`'s pool of pods built now, if it is one.
    fn pool_index_of(&self, image: &str, name: &str) -> Option<u32> {
        if !naming::is_pool_name(name) {
            return None;
        }
        let pool = self.functions.get(image)?.settings.pool()?;
        (0..pool.max).find(|&i| self.pool_name(image, i) == name)
    }

    // Porch §5.12: one pod for each listed image that has none; with a
    // warm pool, its minimum.
    fn on_warm_up(&mut self, now: UnixTime, image: &str) {
        if self.shutting_down {
            return;
        }
        let f = self.function_entry(image);
        if f.invalid.is_some() {
            return;
        }
        let pool = f.settings.pool();
        match pool {
            // A minimum replaces Porch's one pod.
            Some(p) if f.settings.min_ready.is_some() => {
                if p.min > 0 {
                    self.restore_pool(now, image);
                }
            }
            _ if !f.slots.is_empty() => {}
            None => self.scale_out(now, image, None, None),
            Some(_) => {
                if let Some(i) = self.free_pool_index(image, &[]) {
                    self.scale_out(now, image, None, Some(i));
                }
            }
        }
    }

    fn on_shutdown(&mut self) {
        self.shutting_down = true;
        let mut failed = Vec::new();
        for slot in self.slots.values_mut() {
            if let Phase::Pending(c) = &mut slot.phase {
                slot.load -= c.waitlist.len() as u32;
                failed.extend(c.waitlist.drain(..));
            }
        }
        for request in failed {
            self.requests.remove(&request);
            self.reply(request, Err(PodCacheError::ShuttingDown));
        }
    }
}

fn slot_name(slots: &HashMap<SlotId, Slot>, id: SlotId) -> String {
    slots[&id].pod_name.clone()
}

/// The error for the waiters of a slot whose pod is gone.
fn gone(slot: &Slot, failed: bool) -> PodCacheError {
    PodCacheError::PodGone {
        image: slot.image.clone(),
        pod: slot.pod_name.clone(),
        failed,
    }
}

fn view(id: SlotId, s: &Slot) -> SlotView<'_> {
    let (state, waiting) = match &s.phase {
        Phase::Pending(c) => (SlotState::Pending, c.waitlist.len()),
        Phase::Ready { .. } if s.draining => (SlotState::Draining, 0),
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
        reclaim_after: s.confirmed,
        last_used: s.last_used,
    }
}
