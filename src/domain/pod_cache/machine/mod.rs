//! The pod-cache state machine: inputs in, commands out, no I/O.
//!
//! Semantics of Porch's current generation (spec §5.2–5.8, §5.12), with the
//! defects of spec §10 fixed by construction, and every decision the driver
//! used to make on its own (creation and readiness, "is this outcome still
//! mine", orphaned services, what a failed call does to its pod, when to
//! list for GC) made here, where the property tests and the simulator see
//! it. [`PodCache::handle`] takes each [`Input`] to the file that decides
//! on it; every file adds its own `impl PodCache` block and states at its
//! top the invariants it keeps:
//! - [`state`]: what the machine keeps per slot, creation, function,
//!   request, deletion and timer;
//! - [`requests`]: taking a call, choosing its slot, queueing it on the
//!   slot's waitlist, finishing or cancelling it, and the slots that may no
//!   longer take one;
//! - [`creation`]: creating pods, through the creating, starting and
//!   publishing sub-states, and the outcomes of each;
//! - [`watch`]: what the watch reports about the pods of this replica's
//!   slots;
//! - [`leases`]: the reclaim-after this replica writes on the pods it uses
//!   (persist before extend, reuse margin, patch retries);
//! - [`eviction`]: how a slot ends, where its waiters go, and how
//!   deletions are sent and retried;
//! - [`gc`]: GC listings, the age they are judged at, preconditioned
//!   deletes, and resync;
//! - [`pools`]: warm pools (`minReady`, `maxPods`), adoption of pods
//!   another replica made, and template or settings changes.
//!
//! Pods are shared by the runner replicas through their reclaim-after
//! annotation ([`RECLAIM_AFTER_ANNOTATION`](super::RECLAIM_AFTER_ANNOTATION)).
//! The safety rules that keep a pod from being deleted while a replica has
//! a call in it are stated where they are kept: persist before extend and
//! the reuse margin in [`leases`], the listing age and resync in [`gc`],
//! drain before delete in [`requests`].
//!
//! Timers ([`Timer`]) are kept here: [`PodCache::poll_timeout`] names the
//! earliest, and a timer that has become moot by the time it fires does
//! nothing.

mod creation;
mod eviction;
mod gc;
mod leases;
mod pools;
mod requests;
mod state;
mod watch;

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

// A fast hasher (randomly seeded per process): the GC hashes every listed
// pod name several times per scan.
use foldhash::{HashMap, HashMapExt, HashSet, HashSetExt};

use super::config::PodCachePolicy;
use super::io::{
    Assignment, Command, Input, ListingId, PodCacheError, RequestId, SlotId, SlotState, SlotView,
};
use super::time::UnixTime;
use crate::domain::image::ImageRef;
use state::{Abandoned, Deletion, Function, Persist, Phase, Request, Slot, Step, Timer, view};

pub use leases::reuse_margin;

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
}
