//! The one harness that carries out pod-cache commands on the simulated
//! cluster: N runner replicas, each its own [`PodCache`] with its own clock
//! (skew), sharing one [`SimCluster`] on virtual time, with API latency,
//! slow listings, outages, watch gaps and the cluster's random failures.
//! The policy simulator ([`replay`](super::replay())) and the property tests
//! both run on it; the real driver runs on [`SimPlatform`](super::SimPlatform)
//! instead.
//!
//! It carries a command out the way the driver does, with time in between:
//! an API call's effect on the cluster happens half its latency after the
//! command, its answer is delivered as the machine's input after the other
//! half; a listing is taken when it is asked for and may arrive late; pod
//! changes reach each replica through its watch, in order, after the watch
//! latency, or are missed during a watch gap that ends with a re-list
//! ([`Input::Resync`]). A call assigned by a reply begins on the pod's
//! wrapper at once and ends after its run time (or when its caller's
//! deadline passes). A wrapper health check ([`Command::ProbeWrapper`],
//! pod-IP mode's fast path) asks the cluster whether the pod's wrapper
//! answers at its IP ([`SimCluster::wrapper_serves`]) and reports
//! [`Input::WrapperServing`] once it does, as the driver's probe; the
//! platform's answers become the machine's inputs through the same
//! mapping the driver uses ([`PlatformError::into_create_failure`],
//! [`delete_outcome`], [`PlatformError::into_persist_failure`],
//! [`listing_outcome`]).
//!
//! What must never happen is recorded as it happens ([`Harness::violations`]):
//! a pod deleted with a call in it, a pod name created twice, a call sent
//! to a pod after its replica was told it is gone, a request answered
//! twice.

use std::cmp::{Ordering, Reverse};
use std::collections::{BinaryHeap, VecDeque};

use foldhash::{HashMap, HashMapExt};
use std::sync::Arc;
use std::time::Duration;

use super::cluster::{CallError, SimCluster};
use crate::domain::pod_cache::{
    Command, CreateFailure, INLINE_TEMPLATE_VERSION, Input, ObservedPhase, PodCache, PodCacheError,
    PodCachePolicy, RECLAIM_AFTER_ANNOTATION, RequestId, SlotState, UnixTime, naming,
};
use crate::ports::{PlatformError, delete_outcome, listing_outcome};

/// What a replica's API calls meet during an outage
/// ([`Harness::set_outage`]): the error a client gets from an API server
/// it cannot reach, mapped to the machine's inputs as any other.
fn unreachable() -> PlatformError {
    PlatformError::Transient("API server unreachable".into())
}

/// How the simulated API server, watches and clocks behave.
#[derive(Debug, Clone, PartialEq)]
pub struct HarnessConfig {
    /// Runner replicas.
    pub replicas: usize,
    /// Each API call takes a latency drawn uniformly from zero to this.
    pub api_latency: Duration,
    /// Probability that a GC listing is slow: it is taken when asked for
    /// and arrives [`slow_list_latency`](Self::slow_list_latency) later.
    pub slow_list: f64,
    /// How late a slow listing arrives.
    pub slow_list_latency: Duration,
    /// Each watch event arrives after a latency drawn from zero to this
    /// (in order, per replica).
    pub watch_latency: Duration,
    /// Probability, per pod change and replica, that the replica's watch
    /// breaks: it misses every change for
    /// [`watch_gap_length`](Self::watch_gap_length), then lists anew.
    pub watch_gap: f64,
    /// How long a watch gap lasts.
    pub watch_gap_length: Duration,
    /// In service address mode, how long a ready pod takes to be published
    /// by its service.
    pub endpoint_latency: Duration,
    /// Each replica's clock offset from true time, in milliseconds
    /// (positive: ahead); missing entries are zero.
    pub skew_ms: Vec<i64>,
    /// Each wrapper health check ([`Command::ProbeWrapper`]) answers after
    /// a latency drawn from zero to this; one that finds the wrapper not
    /// answering yet is tried again [`PROBE_INTERVAL`] later, as the pod
    /// driver does.
    pub probe_latency: Duration,
}

/// How often the harness tries the health check of a starting pod's
/// wrapper again: the pod driver's interval,
/// [`WRAPPER_PROBE_INTERVAL`](crate::domain::pod_cache::WRAPPER_PROBE_INTERVAL).
pub const PROBE_INTERVAL: Duration = crate::domain::pod_cache::WRAPPER_PROBE_INTERVAL;

impl Default for HarnessConfig {
    /// One replica, instant API, no faults.
    fn default() -> Self {
        Self {
            replicas: 1,
            api_latency: Duration::ZERO,
            slow_list: 0.0,
            slow_list_latency: Duration::ZERO,
            watch_latency: Duration::ZERO,
            watch_gap: 0.0,
            watch_gap_length: Duration::from_secs(30),
            endpoint_latency: Duration::ZERO,
            skew_ms: Vec::new(),
            probe_latency: Duration::ZERO,
        }
    }
}

/// What became of one request.
#[derive(Debug, Clone, PartialEq)]
pub struct RequestRecord {
    /// The replica it was sent to.
    pub replica: usize,
    /// When it arrived (true time).
    pub arrival: UnixTime,
    /// How long its call runs once assigned.
    pub run: Duration,
    /// Replies received (exactly one in the end).
    pub replies: u32,
    /// When the reply came, if any.
    pub replied_at: Option<UnixTime>,
    /// The pod it was assigned to.
    pub pod: Option<String>,
    /// The error it got instead, if any.
    pub error: Option<PodCacheError>,
    /// Whether its call is running.
    pub calling: bool,
    /// Whether the replica still counts it (assigned or waiting, not released).
    pub held: bool,
    /// Whether its call failed because the pod did not answer.
    pub call_failed: bool,
    /// Whether that was because the pod was gone (not merely overloaded).
    pub pod_gone: bool,
    /// Whether its caller's deadline passed before it was done.
    pub cancelled: bool,
}

/// What became of the requests, counted as they were answered.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Outcomes {
    /// Requests answered.
    pub answered: u64,
    /// Wait for a pod of every request that got one (arrival to reply).
    pub waits: Vec<Duration>,
    /// Requests that got a pod after waiting for one to start.
    pub cold: u64,
    /// Requests refused (capacity, creation failure, timeout…), their
    /// caller's deadline aside.
    pub rejected: u64,
    /// Requests whose caller's deadline passed before they were done.
    pub cancelled: u64,
    /// Calls that found their pod unavailable (or lost it).
    pub call_failures: u64,
    /// Requests waiting or running on a replica when it restarted (their
    /// callers get an error; see [`Harness::restart`]).
    pub lost_in_restarts: u64,
}

/// One bucket of time: the highest pods alive, pods in use, requests
/// waiting and calls running within it, and the requests answered in it
/// by outcome.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Bucket {
    /// Pods alive, at most.
    pub pods: usize,
    /// Pods with a call in them, at most.
    pub in_use: usize,
    /// Requests waiting for a pod, at most.
    pub waiting: usize,
    /// Calls running, at most.
    pub calls: usize,
    /// Requests that got a pod after waiting for one to start (counted
    /// when they got it).
    pub cold_starts: u64,
    /// Requests refused (counted when refused).
    pub rejected: u64,
    /// Requests whose caller's deadline passed (counted when it passed).
    pub cancelled: u64,
}

#[derive(Debug)]
enum Event {
    Deliver {
        replica: usize,
        input: Input,
    },
    Tick {
        replica: usize,
    },
    CallEnd {
        replica: usize,
        request: RequestId,
    },
    Deadline {
        replica: usize,
        request: RequestId,
    },
    ClusterChange,
    Create {
        replica: usize,
        creation: Box<crate::domain::pod_cache::PodCreation>,
    },
    Persist {
        replica: usize,
        pod: String,
        uid: Option<String>,
        value: UnixTime,
    },
    Delete {
        replica: usize,
        pod: String,
        precondition: crate::domain::pod_cache::DeletePrecondition,
        reason: crate::domain::pod_cache::DeleteReason,
    },
    DeleteService {
        pod: String,
    },
    EnsureService {
        pod: String,
    },
    GapEnd {
        replica: usize,
    },
    Probe {
        replica: usize,
        generation: u32,
        slot: crate::domain::pod_cache::SlotId,
        pod: String,
        endpoint: String,
        deadline: UnixTime,
    },
}

struct Timed {
    at: UnixTime,
    seq: u64,
    event: Event,
}

impl PartialEq for Timed {
    fn eq(&self, other: &Self) -> bool {
        (self.at, self.seq) == (other.at, other.seq)
    }
}
impl Eq for Timed {}
impl PartialOrd for Timed {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Timed {
    fn cmp(&self, other: &Self) -> Ordering {
        (self.at, self.seq).cmp(&(other.at, other.seq))
    }
}

struct Replica {
    cache: PodCache,
    skew_ms: i64,
    tick_at: Option<UnixTime>,
    outage_until: Option<UnixTime>,
    gap_since: Option<UnixTime>,
    /// Watch deliveries are in order: none before this time.
    watch_clock: UnixTime,
    /// When this replica was told a pod is gone (watch deletion, failed
    /// call), and the UID of the pod it was told about.
    told_gone: HashMap<String, (UnixTime, Option<String>)>,
    /// The UID of the last deletion of each pod name sent to this
    /// replica's watch.
    deleted_uid: HashMap<String, Option<String>>,
    generation: u32,
}

/// N replicas of the pod cache on one simulated cluster; see the module docs.
pub struct Harness {
    cluster: SimCluster,
    config: HarnessConfig,
    policy: PodCachePolicy,
    replicas: Vec<Replica>,
    now: UnixTime,
    queue: BinaryHeap<Reverse<Timed>>,
    immediate: VecDeque<(usize, Input)>,
    seq: u64,
    cluster_wake: Option<UnixTime>,
    requests: HashMap<(usize, RequestId), RequestRecord>,
    keep_records: bool,
    outcomes: Outcomes,
    /// Events queued that are not timers (work still to do).
    work: usize,
    next_request: u64,
    decisions: u64,
    violations: Vec<String>,
    waiting: usize,
    calls: usize,
    timeline: Option<(UnixTime, Duration, Vec<Bucket>)>,
    /// When set, every input handled and every command carried out, in
    /// order (for tests that look at them).
    pub log: Option<Vec<Logged>>,
}

/// One entry of [`Harness::log`]: replica, its time, and what happened.
#[derive(Debug, Clone, PartialEq)]
pub enum Logged {
    /// An input handled by a replica.
    Input(usize, UnixTime, Input),
    /// A command a replica issued.
    Command(usize, UnixTime, Command),
}

impl std::fmt::Debug for Harness {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Harness")
            .field("now", &self.now)
            .field("replicas", &self.replicas.len())
            .finish_non_exhaustive()
    }
}

fn skewed(t: UnixTime, skew_ms: i64) -> UnixTime {
    let d = Duration::from_millis(skew_ms.unsigned_abs());
    if skew_ms >= 0 {
        t + d
    } else {
        t.saturating_sub(d)
    }
}

impl Harness {
    /// Replicas of `policy` (each with its own replica token `r<i>` and
    /// instance) on `cluster`, at the cluster's time, building pods from the
    /// inline template version.
    pub fn new(config: HarnessConfig, policy: PodCachePolicy, cluster: SimCluster) -> Self {
        let now = cluster.now();
        let mut h = Self {
            cluster,
            replicas: Vec::new(),
            policy,
            now,
            queue: BinaryHeap::new(),
            immediate: VecDeque::new(),
            seq: 0,
            cluster_wake: None,
            requests: HashMap::new(),
            keep_records: true,
            outcomes: Outcomes::default(),
            work: 0,
            next_request: 1,
            decisions: 0,
            violations: Vec::new(),
            waiting: 0,
            calls: 0,
            timeline: None,
            log: None,
            config,
        };
        for r in 0..h.config.replicas.max(1) {
            let skew_ms = h.config.skew_ms.get(r).copied().unwrap_or(0);
            let cache = PodCache::new(h.replica_policy(r, 0), INLINE_TEMPLATE_VERSION);
            h.replicas.push(Replica {
                cache,
                skew_ms,
                tick_at: None,
                outage_until: None,
                gap_since: None,
                watch_clock: now,
                told_gone: HashMap::new(),
                deleted_uid: HashMap::new(),
                generation: 0,
            });
        }
        h
    }

    fn replica_policy(&self, r: usize, generation: u32) -> PodCachePolicy {
        let mut p = self.policy.clone();
        p.replica_token = if generation == 0 {
            format!("r{r}")
        } else {
            format!("r{r}g{generation}")
        };
        p.instance = p.replica_token.clone();
        p
    }

    /// Keeps, per bucket of `every` from `start`, the highest pods alive,
    /// requests waiting and calls running ([`timeline`](Self::timeline)).
    pub fn sample(&mut self, start: UnixTime, every: Duration) {
        self.timeline = Some((start, every.max(Duration::from_millis(1)), Vec::new()));
    }

    /// The buckets kept since [`sample`](Self::sample).
    pub fn timeline(&self) -> &[Bucket] {
        self.timeline.as_ref().map_or(&[], |t| t.2.as_slice())
    }

    /// True time.
    pub fn now(&self) -> UnixTime {
        self.now
    }

    /// Replica `r`'s time.
    pub fn replica_now(&self, r: usize) -> UnixTime {
        skewed(self.now, self.replicas[r].skew_ms)
    }

    /// The cluster.
    pub fn cluster(&self) -> &SimCluster {
        &self.cluster
    }

    /// The cluster, to inject failures or act behind the replicas' backs.
    /// Pod changes made here reach the watches.
    pub fn cluster_mut(&mut self) -> &mut SimCluster {
        &mut self.cluster
    }

    /// Replica `r`'s pod cache.
    pub fn cache(&self, r: usize) -> &PodCache {
        &self.replicas[r].cache
    }

    /// Number of replicas.
    pub fn replicas(&self) -> usize {
        self.replicas.len()
    }

    /// Inputs handled by all replicas so far.
    pub fn decisions(&self) -> u64 {
        self.decisions
    }

    /// Forget each request once it is done, keeping only the
    /// [`outcomes`](Self::outcomes) (long simulations).
    pub fn forget_done_requests(&mut self) {
        self.keep_records = false;
    }

    /// What became of the requests so far.
    pub fn outcomes(&self) -> &Outcomes {
        &self.outcomes
    }

    fn done(&mut self, r: usize, id: RequestId) {
        if self.keep_records {
            return;
        }
        if self
            .requests
            .get(&(r, id))
            .is_some_and(|q| q.replies > 0 && !q.held && !q.calling)
        {
            self.requests.remove(&(r, id));
        }
    }

    /// Every request so far (all of them unless
    /// [`forget_done_requests`](Self::forget_done_requests)).
    pub fn requests(&self) -> impl Iterator<Item = (&(usize, RequestId), &RequestRecord)> + '_ {
        self.requests.iter()
    }

    /// The record of request `id` of replica `r`.
    pub fn request(&self, r: usize, id: RequestId) -> Option<&RequestRecord> {
        self.requests.get(&(r, id))
    }

    /// Requests waiting for a reply.
    pub fn waiting(&self) -> usize {
        self.waiting
    }

    /// Everything that must never happen and did: the cluster's audit and
    /// what the harness saw.
    pub fn violations(&self) -> Vec<String> {
        let audit = self.cluster.audit();
        let mut v = self.violations.clone();
        v.extend(
            audit
                .deleted_in_use
                .iter()
                .map(|(t, pod, n)| format!("{pod} deleted at {t} with {n} call(s) in it")),
        );
        v.extend(
            audit
                .created_twice
                .iter()
                .map(|pod| format!("pod name {pod} created twice")),
        );
        v
    }

    fn push(&mut self, at: UnixTime, event: Event) {
        if !matches!(event, Event::Tick { .. } | Event::ClusterChange) {
            self.work += 1;
        }
        self.seq += 1;
        let at = at.max(self.now);
        self.queue.push(Reverse(Timed {
            at,
            seq: self.seq,
            event,
        }));
    }

    fn latency(&mut self, max: Duration) -> Duration {
        if max.is_zero() {
            Duration::ZERO
        } else {
            max.mul_f64(self.cluster.draw())
        }
    }

    fn down(&self, r: usize) -> bool {
        self.replicas[r].outage_until.is_some_and(|t| t > self.now)
    }

    /// Replica `r`'s API calls fail until `until` (true time): an API
    /// server it cannot reach.
    pub fn set_outage(&mut self, r: usize, until: UnixTime) {
        self.replicas[r].outage_until = Some(until);
    }

    /// Replica `r`'s watch misses every change for `length`, then lists anew.
    pub fn break_watch(&mut self, r: usize, length: Duration) {
        if self.replicas[r].gap_since.is_none() {
            self.replicas[r].gap_since = Some(self.now);
            self.push(self.now + length, Event::GapEnd { replica: r });
        }
    }

    /// Pod `name` is deleted behind the replicas' backs (by hand); the
    /// calls in it break first (it is not the runner's doing).
    pub fn vanish(&mut self, name: &str) {
        self.stop_calls(name);
        self.cluster.remove_pod(name);
        self.settle();
    }

    /// Pod `name` fails (a crash, an eviction); the calls in it break.
    pub fn crash(&mut self, name: &str) {
        self.stop_calls(name);
        let _ = self.cluster.fail_pod(name);
        self.settle();
    }

    fn stop_calls(&mut self, pod: &str) {
        let running: Vec<(usize, RequestId)> = self
            .requests
            .iter()
            .filter(|(_, q)| q.calling && q.pod.as_deref() == Some(pod))
            .map(|(k, _)| *k)
            .collect();
        for _ in &running {
            self.cluster.end_call(pod);
        }
        self.break_calls(pod);
    }

    /// A new request from a caller of replica `r` for `image`, whose call
    /// runs for `run` once assigned; the caller gives up after `deadline`.
    pub fn submit(
        &mut self,
        r: usize,
        image: &str,
        run: Duration,
        deadline: Option<Duration>,
    ) -> RequestId {
        let request = RequestId(self.next_request);
        self.next_request += 1;
        self.requests.insert(
            (r, request),
            RequestRecord {
                replica: r,
                arrival: self.now,
                run,
                replies: 0,
                replied_at: None,
                pod: None,
                error: None,
                calling: false,
                held: true,
                call_failed: false,
                pod_gone: false,
                cancelled: false,
            },
        );
        self.waiting += 1;
        if let Some(d) = deadline {
            self.push(
                self.now + d,
                Event::Deadline {
                    replica: r,
                    request,
                },
            );
        }
        let input = Input::Request {
            request,
            image: image.to_string(),
        };
        self.handle(r, input);
        self.settle();
        request
    }

    /// The caller of request `id` of replica `r` goes away now.
    pub fn cancel(&mut self, r: usize, request: RequestId) {
        self.on_deadline(r, request);
        self.settle();
    }

    /// Feeds `input` to replica `r` now (warm-up, template or settings
    /// changes) and carries out what follows.
    pub fn feed(&mut self, r: usize, input: Input) {
        self.handle(r, input);
        self.settle();
    }

    /// Restarts replica `r` as a new process: its callers lose their
    /// requests (the calls stop), the new process has a new replica token
    /// and instance, lists the pods (which may fail) and adopts what it may.
    pub fn restart(&mut self, r: usize) {
        let held: Vec<RequestId> = self
            .requests
            .iter()
            .filter(|((rr, _), q)| *rr == r && (q.held || q.replies == 0))
            .map(|((_, id), _)| *id)
            .collect();
        for id in held {
            let q = self.requests.get_mut(&(r, id)).expect("listed");
            if q.calling || q.replies == 0 {
                self.outcomes.lost_in_restarts += 1;
            }
            if q.calling {
                q.calling = false;
                self.calls -= 1;
                if let Some(pod) = q.pod.clone() {
                    self.cluster.end_call(&pod);
                }
            }
            if q.replies == 0 {
                q.replies = 1;
                q.error = Some(PodCacheError::ShuttingDown);
                self.waiting -= 1;
            }
            q.held = false;
        }
        let generation = self.replicas[r].generation + 1;
        let policy = self.replica_policy(r, generation);
        let replica = &mut self.replicas[r];
        replica.generation = generation;
        replica.cache = PodCache::new(policy, INLINE_TEMPLATE_VERSION);
        replica.told_gone.clear();
        replica.tick_at = None;
        let listed = if self.down(r) {
            Err(PlatformError::Transient("outage".into()))
        } else {
            self.cluster.list_observed()
        };
        if let Ok(observed) = listed {
            self.handle(r, Input::Adopt { observed });
        }
        // As `serve` starts: the warm pool minimums are warmed whatever
        // the warm-up setting.
        let images = self.replicas[r].cache.policy().min_ready_images();
        if !images.is_empty() {
            self.handle(r, Input::WarmUp { images });
        }
        self.settle();
    }

    /// Runs every event up to `t` (true time), then sets the time to `t`.
    pub fn run_until(&mut self, t: UnixTime) {
        while let Some(Reverse(next)) = self.queue.peek() {
            if next.at > t {
                break;
            }
            let Reverse(Timed { at, event, .. }) = self.queue.pop().expect("peeked");
            if !matches!(event, Event::Tick { .. } | Event::ClusterChange) {
                self.work -= 1;
            }
            self.set_now(at);
            self.on_event(event);
            self.settle();
        }
        self.set_now(t);
        self.settle();
    }

    /// When the next event is due, if any.
    pub fn next_event(&self) -> Option<UnixTime> {
        self.queue.peek().map(|Reverse(t)| t.at)
    }

    fn set_now(&mut self, t: UnixTime) {
        if t > self.now {
            self.now = t;
        }
        self.cluster.advance_to(self.now);
        self.observe_gauges();
    }

    fn observe_gauges(&mut self) {
        if let Some((start, every, buckets)) = &mut self.timeline {
            let i = (self.now.saturating_since(*start).as_nanos() / every.as_nanos()) as usize;
            if buckets.len() <= i {
                // The state held since the last event, through the buckets
                // in between.
                let held = Bucket {
                    pods: self.cluster.pod_count(),
                    in_use: self.cluster.pods_in_use(),
                    waiting: self.waiting,
                    calls: self.calls,
                    ..Bucket::default()
                };
                buckets.resize(i + 1, held);
            }
            let b = &mut buckets[i];
            b.pods = b.pods.max(self.cluster.pod_count());
            b.in_use = b.in_use.max(self.cluster.pods_in_use());
            b.waiting = b.waiting.max(self.waiting);
            b.calls = b.calls.max(self.calls);
        }
    }

    /// The bucket of now, to count an outcome in (none unless sampling).
    fn count(&mut self, add: impl FnOnce(&mut Bucket)) {
        self.observe_gauges();
        if let Some(b) = self.timeline.as_mut().and_then(|t| t.2.last_mut()) {
            add(b);
        }
    }

    /// Delivers the cluster's pod changes to the watches, handles every
    /// immediate input, and sets the timers that follow.
    fn settle(&mut self) {
        loop {
            if self.cluster.has_events() {
                self.publish();
            }
            let Some((r, input)) = self.immediate.pop_front() else {
                break;
            };
            self.handle(r, input);
        }
        self.observe_gauges();
        if let Some(at) = self.cluster.next_change()
            && self.cluster_wake.is_none_or(|w| at < w)
        {
            self.cluster_wake = Some(at);
            self.push(at, Event::ClusterChange);
        }
        for r in 0..self.replicas.len() {
            let Some(t) = self.replicas[r].cache.poll_timeout() else {
                continue;
            };
            let at = skewed(t, -self.replicas[r].skew_ms).max(self.now);
            if self.replicas[r].tick_at.is_none_or(|s| at < s) {
                self.replicas[r].tick_at = Some(at);
                self.push(at, Event::Tick { replica: r });
            }
        }
    }

    fn deliver(&mut self, r: usize, at: UnixTime, input: Input) {
        if at <= self.now {
            self.immediate.push_back((r, input));
        } else {
            self.push(at, Event::Deliver { replica: r, input });
        }
    }

    fn publish(&mut self) {
        let events = self.cluster.drain_events();
        for r in 0..self.replicas.len() {
            for e in &events {
                if self.replicas[r].gap_since.is_none()
                    && self.config.watch_gap > 0.0
                    && self.cluster.chance(self.config.watch_gap)
                {
                    let length = self.config.watch_gap_length;
                    self.break_watch(r, length);
                }
                if self.replicas[r].gap_since.is_some() {
                    continue;
                }
                let lat = self.latency(self.config.watch_latency);
                let at = (self.now + lat).max(self.replicas[r].watch_clock);
                self.replicas[r].watch_clock = at;
                let input = if e.deleted {
                    self.replicas[r]
                        .deleted_uid
                        .insert(e.observed.name.clone(), e.observed.uid.clone());
                    Input::PodDeleted {
                        pod_name: e.observed.name.clone(),
                    }
                } else {
                    Input::PodObserved {
                        pod: (*e.observed).clone(),
                    }
                };
                self.deliver(r, at, input);
            }
        }
    }

    fn handle(&mut self, r: usize, input: Input) {
        let now = self.replica_now(r);
        match &input {
            Input::PodDeleted { pod_name } => {
                let uid = self.replicas[r]
                    .deleted_uid
                    .get(pod_name)
                    .cloned()
                    .flatten();
                self.replicas[r]
                    .told_gone
                    .insert(pod_name.clone(), (self.now, uid));
            }
            Input::CallUnavailable { request } => {
                if let Some(pod) = self
                    .requests
                    .get(&(r, *request))
                    .filter(|q| q.pod_gone)
                    .and_then(|q| q.pod.clone())
                {
                    // A warm pool's name may hold a newer pod that is still
                    // starting (the call was meant for the one before it):
                    // that pod is not gone, and may be claimed once ready.
                    let starting = naming::is_pool_name(&pod)
                        && matches!(self.cluster.phase_of(&pod), Some(ObservedPhase::Pending));
                    if !starting {
                        let uid = self.cluster.latest_uid(&pod).map(str::to_string);
                        self.replicas[r].told_gone.insert(pod, (self.now, uid));
                    }
                }
            }
            _ => {}
        }
        let failed = match &input {
            Input::CallUnavailable { request } => Some(*request),
            _ => None,
        };
        if let Some(log) = &mut self.log {
            log.push(Logged::Input(r, now, input.clone()));
        }
        self.decisions += 1;
        self.replicas[r].cache.handle(now, input);
        while let Some(cmd) = self.replicas[r].cache.poll_command() {
            if let Some(log) = &mut self.log {
                log.push(Logged::Command(r, now, cmd.clone()));
            }
            self.execute(r, cmd);
        }
        if let Some(request) = failed {
            self.done(r, request);
        }
    }

    fn on_event(&mut self, event: Event) {
        match event {
            Event::Deliver { replica, input } => self.handle(replica, input),
            Event::Tick { replica } => {
                if self.replicas[replica]
                    .tick_at
                    .is_some_and(|t| t <= self.now)
                {
                    self.replicas[replica].tick_at = None;
                    self.handle(replica, Input::Tick);
                }
            }
            Event::CallEnd { replica, request } => {
                let Some(q) = self.requests.get_mut(&(replica, request)) else {
                    return;
                };
                if !q.calling {
                    return;
                }
                q.calling = false;
                self.calls -= 1;
                let pod = q.pod.clone().unwrap_or_default();
                let intact = self.cluster.end_call(&pod);
                let q = self.requests.get_mut(&(replica, request)).expect("exists");
                q.held = false;
                let input = if intact {
                    Input::CallFinished { request }
                } else {
                    q.call_failed = true;
                    q.pod_gone = true;
                    self.outcomes.call_failures += 1;
                    Input::CallUnavailable { request }
                };
                self.handle(replica, input);
                self.done(replica, request);
            }
            Event::Deadline { replica, request } => self.on_deadline(replica, request),
            Event::ClusterChange => {
                self.cluster_wake = None;
            }
            Event::Create { replica, creation } => self.create(replica, &creation),
            Event::Persist {
                replica,
                pod,
                uid,
                value,
            } => {
                let patch = [(RECLAIM_AFTER_ANNOTATION.to_string(), value.to_annotation())].into();
                let result = self
                    .cluster
                    .patch_pod_annotations(&pod, uid.as_deref(), patch)
                    .map_err(PlatformError::into_persist_failure);
                let at = self.now + self.latency(self.config.api_latency / 2);
                let input = Input::Persisted {
                    pod_name: pod,
                    reclaim_after: value,
                    result,
                };
                self.deliver(replica, at, input);
            }
            Event::Delete {
                replica,
                pod,
                precondition,
                reason,
            } => {
                let seen = self.cluster.observed_pod(&pod).cloned();
                let annotated = seen.as_ref().and_then(|o| {
                    o.reclaim_after
                        .as_deref()
                        .and_then(UnixTime::parse_annotation)
                });
                let mut precondition = precondition;
                // Read, check, then delete what was read (as the driver).
                let read = match precondition.creation.take() {
                    None => Ok(()),
                    Some(nonce) => match self.cluster.get_observed(&pod) {
                        Ok(o) if precondition.creation_holds(&nonce, &o) => {
                            precondition.uid.clone_from(&o.uid);
                            precondition
                                .resource_version
                                .clone_from(&o.resource_version);
                            Ok(())
                        }
                        Ok(_) => Err(PlatformError::Conflict {
                            kind: "Pod",
                            name: pod.clone(),
                            message: "the pod is not the one this creation made".into(),
                        }),
                        Err(e) => Err(e),
                    },
                };
                let deleted = read.and_then(|()| self.cluster.delete_pod(&pod, &precondition));
                let gone_before = matches!(&deleted, Err(e) if e.is_not_found());
                let result = delete_outcome(deleted);
                match &result {
                    Ok(()) if !gone_before => {
                        let replica_now = self.replica_now(replica);
                        if reason == crate::domain::pod_cache::DeleteReason::Expired
                            && annotated.is_some_and(|a| a > replica_now)
                        {
                            self.violations.push(format!(
                                "replica {replica} deleted {pod} at {replica_now} as expired, before its reclaim-after {}",
                                annotated.unwrap_or_default()
                            ));
                        }
                        self.break_calls(&pod);
                        let _ = self.cluster.delete_service(&pod);
                    }
                    Ok(()) => {
                        let _ = self.cluster.delete_service(&pod);
                    }
                    Err(_) => {}
                }
                let at = self.now + self.latency(self.config.api_latency / 2);
                self.deliver(
                    replica,
                    at,
                    Input::Deleted {
                        pod_name: pod,
                        result,
                    },
                );
            }
            Event::DeleteService { pod } => {
                if self.cluster.observed_pod(&pod).is_none() {
                    let _ = self.cluster.delete_service(&pod);
                }
            }
            Event::EnsureService { pod } => {
                let _ = self.cluster.create_service_for(&pod);
            }
            probe @ Event::Probe { .. } => self.on_probe(probe),
            Event::GapEnd { replica } => {
                let Some(since) = self.replicas[replica].gap_since.take() else {
                    return;
                };
                let observed: Vec<_> = self
                    .cluster
                    .observed()
                    .filter(|o| o.labelled)
                    .cloned()
                    .collect();
                let since = skewed(since, self.replicas[replica].skew_ms);
                let at = self.now.max(self.replicas[replica].watch_clock);
                self.replicas[replica].watch_clock = at;
                self.deliver(replica, at, Input::Resync { observed, since });
            }
        }
    }

    /// One health check of [`Command::ProbeWrapper`] answers: `SERVING`
    /// is reported to the replica now; a wrapper not answering yet is
    /// tried again [`PROBE_INTERVAL`] later. As the driver's probe, it
    /// reports nothing when it gives up: at its deadline, once the slot is
    /// no longer pending (the driver aborts the probe then), or — the
    /// simulator's shortcut for what would only fail until then — once the
    /// pod can no longer answer at that address (gone, failed, another IP).
    /// A probe of a replica that restarted since is dropped with its process.
    fn on_probe(&mut self, event: Event) {
        let Event::Probe {
            replica,
            generation,
            slot,
            ref pod,
            ref endpoint,
            deadline,
        } = event
        else {
            return;
        };
        let r = &self.replicas[replica];
        let pending = r.cache.slot_state(slot) == Some(SlotState::Pending);
        if r.generation != generation || !pending || self.replica_now(replica) >= deadline {
            return;
        }
        if self.cluster.wrapper_serves(pod, endpoint) {
            let endpoint = endpoint.clone();
            self.immediate
                .push_back((replica, Input::WrapperServing { slot, endpoint }));
        } else if self.cluster.wrapper_may_serve(pod, endpoint) {
            // The same probe, again.
            let at = self.now + PROBE_INTERVAL + self.latency(self.config.probe_latency);
            self.push(at, event);
        }
    }

    fn on_deadline(&mut self, r: usize, request: RequestId) {
        let Some(q) = self.requests.get_mut(&(r, request)) else {
            return;
        };
        if !q.held {
            return;
        }
        q.cancelled = true;
        if q.calling {
            q.calling = false;
            self.calls -= 1;
            let pod = q.pod.clone().unwrap_or_default();
            self.cluster.end_call(&pod);
        }
        let q = self.requests.get_mut(&(r, request)).expect("exists");
        q.held = q.replies == 0;
        self.outcomes.cancelled += 1;
        self.count(|b| b.cancelled += 1);
        self.handle(r, Input::Cancelled { request });
        self.done(r, request);
    }

    /// Calls running in `pod`, which was just deleted, break.
    fn break_calls(&mut self, pod: &str) {
        let broken: Vec<(usize, RequestId)> = self
            .requests
            .iter()
            .filter(|(_, q)| q.calling && q.pod.as_deref() == Some(pod))
            .map(|(k, _)| *k)
            .collect();
        for (r, request) in broken {
            let q = self.requests.get_mut(&(r, request)).expect("listed");
            q.calling = false;
            q.held = false;
            q.call_failed = true;
            q.pod_gone = true;
            self.calls -= 1;
            self.outcomes.call_failures += 1;
            self.immediate
                .push_back((r, Input::CallUnavailable { request }));
        }
    }

    fn create(&mut self, r: usize, c: &crate::domain::pod_cache::PodCreation) {
        let result = match self.cluster.create_from(c) {
            Ok(()) => Ok(()),
            Err(PlatformError::Transient(m)) if m.contains("lost answer") => {
                // The client retries a transient failure; the pod exists.
                Err(PlatformError::AlreadyExists {
                    kind: "Pod",
                    name: c.pod_name.clone(),
                })
            }
            Err(e) => Err(e),
        };
        let result =
            match result {
                // A pod is created before its service.
                Ok(()) => self.cluster.create_service_for(&c.pod_name).map_err(|e| {
                    CreateFailure::Failed {
                        reason: e.service_failure(&c.pod_name),
                    }
                }),
                // Read back, as the driver does; the machine ensures the
                // service if the pod is this creation's own.
                Err(e) if e.is_already_exists() => {
                    let existing = self.cluster.get_observed(&c.pod_name).ok();
                    Err(e.into_create_failure(existing.map(|o| (*o).clone())))
                }
                Err(e) => Err(e.into_create_failure(None)),
            };
        let at = self.now + self.latency(self.config.api_latency / 2);
        self.deliver(
            r,
            at,
            Input::Created {
                slot: c.slot,
                result,
            },
        );
    }

    fn execute(&mut self, r: usize, cmd: Command) {
        match cmd {
            Command::Reply { request, result } => self.on_reply(r, request, result),
            Command::CreatePod(c) => {
                let d = self.latency(self.config.api_latency);
                if self.down(r) {
                    let input = Input::Created {
                        slot: c.slot,
                        result: Err(unreachable().into_create_failure(None)),
                    };
                    self.deliver(r, self.now + d, input);
                } else {
                    let creation = Box::new(c);
                    self.push(
                        self.now + d / 2,
                        Event::Create {
                            replica: r,
                            creation,
                        },
                    );
                }
            }
            Command::AwaitEndpoint { slot, pod_name, .. } => {
                let at = self.now + self.config.endpoint_latency;
                let ready = self
                    .cluster
                    .observed_pod(&pod_name)
                    .and_then(|o| match &o.phase {
                        crate::domain::pod_cache::ObservedPhase::Ready { endpoint } => {
                            Some(endpoint.clone())
                        }
                        _ => None,
                    });
                let result =
                    ready.ok_or_else(|| format!("service {pod_name} has no ready endpoint"));
                self.deliver(r, at, Input::EndpointReady { slot, result });
            }
            Command::DeletePod {
                pod_name,
                precondition,
                reason,
            } => {
                let d = self.latency(self.config.api_latency);
                if self.down(r) {
                    let input = Input::Deleted {
                        pod_name,
                        result: delete_outcome(Err(unreachable())),
                    };
                    self.deliver(r, self.now + d, input);
                } else {
                    let event = Event::Delete {
                        replica: r,
                        pod: pod_name,
                        precondition,
                        reason,
                    };
                    self.push(self.now + d / 2, event);
                }
            }
            Command::DeleteService { name } => {
                if !self.down(r) {
                    let d = self.latency(self.config.api_latency);
                    self.push(self.now + d / 2, Event::DeleteService { pod: name });
                }
            }
            Command::EnsureService { pod_name } => {
                if !self.down(r) {
                    let d = self.latency(self.config.api_latency);
                    self.push(self.now + d / 2, Event::EnsureService { pod: pod_name });
                }
            }
            Command::PersistReclaimAfter {
                pod_name,
                uid,
                reclaim_after,
            } => {
                let d = self.latency(self.config.api_latency);
                if self.down(r) {
                    let input = Input::Persisted {
                        pod_name,
                        reclaim_after,
                        result: Err(unreachable().into_persist_failure()),
                    };
                    self.deliver(r, self.now + d, input);
                } else {
                    let event = Event::Persist {
                        replica: r,
                        pod: pod_name,
                        uid,
                        value: reclaim_after,
                    };
                    self.push(self.now + d / 2, event);
                }
            }
            Command::ListPods { listing } => {
                let slow =
                    self.config.slow_list > 0.0 && self.cluster.chance(self.config.slow_list);
                let d = if slow {
                    self.config.slow_list_latency
                } else {
                    self.latency(self.config.api_latency)
                };
                let result = if self.down(r) {
                    listing_outcome(Err(unreachable()), Err(unreachable()))
                } else {
                    // Taken now, whenever it arrives.
                    let services = self.cluster.list_services();
                    let pods = self.cluster.list_observed();
                    listing_outcome(services, pods)
                };
                self.deliver(r, self.now + d, Input::Listed { listing, result });
            }
            Command::ProbeWrapper {
                slot,
                pod_name,
                endpoint,
                deadline,
            } => {
                let at = self.now + self.latency(self.config.probe_latency);
                let generation = self.replicas[r].generation;
                let event = Event::Probe {
                    replica: r,
                    generation,
                    slot,
                    pod: pod_name,
                    endpoint,
                    deadline,
                };
                self.push(at, event);
            }
            // The driver drops the pod's pooled connections. A simulated
            // call goes straight to the cluster's wrapper, so a replica
            // keeps nothing per pod to drop: `told_gone` and `deleted_uid`
            // are the audit's memory of what the replica was told, which
            // must outlive the pod for the audit to see a call sent to it
            // afterwards.
            Command::Forget { .. } => {}
        }
    }

    fn on_reply(
        &mut self,
        r: usize,
        request: RequestId,
        result: Result<crate::domain::pod_cache::Assignment, PodCacheError>,
    ) {
        let now = self.now;
        let Some(q) = self.requests.get_mut(&(r, request)) else {
            self.violations
                .push(format!("replica {r} answered unknown {request}"));
            return;
        };
        q.replies += 1;
        if q.replies > 1 {
            self.violations
                .push(format!("replica {r} answered {request} twice"));
            return;
        }
        q.replied_at = Some(now);
        self.waiting -= 1;
        self.outcomes.answered += 1;
        match result {
            Err(e) => {
                q.held = false;
                let rejected = !matches!(e, PodCacheError::Cancelled { .. });
                q.error = Some(e);
                if rejected {
                    self.outcomes.rejected += 1;
                    self.count(|b| b.rejected += 1);
                }
                self.done(r, request);
            }
            Ok(a) => {
                let wait = now.saturating_since(q.arrival);
                self.outcomes.waits.push(wait);
                let cancelled = q.cancelled;
                if !wait.is_zero() {
                    self.outcomes.cold += 1;
                    self.count(|b| b.cold_starts += 1);
                }
                if cancelled {
                    return;
                }
                let q = self.requests.get_mut(&(r, request)).expect("exists");
                q.pod = Some(a.pod_name.clone());
                let run = q.run;
                // A warm pool's name comes back with a new pod: only the
                // pod the replica was told about counts.
                let reborn = |(_, told_uid): &(UnixTime, Option<String>)| {
                    naming::is_pool_name(&a.pod_name)
                        && told_uid.is_some()
                        && self.cluster.latest_uid(&a.pod_name) != told_uid.as_deref()
                };
                if let Some((told, _)) = self.replicas[r]
                    .told_gone
                    .get(&a.pod_name)
                    .filter(|t| !reborn(t))
                {
                    self.violations.push(format!(
                        "replica {r} sent {request} to {} at {now}, after it was told at {told} that the pod is gone",
                        a.pod_name
                    ));
                }
                match self.cluster.begin_call(&a.pod_name, r) {
                    Ok(()) => {
                        let q = self.requests.get_mut(&(r, request)).expect("exists");
                        q.calling = true;
                        self.calls += 1;
                        self.push(
                            now + run,
                            Event::CallEnd {
                                replica: r,
                                request,
                            },
                        );
                    }
                    Err(e) => {
                        let q = self.requests.get_mut(&(r, request)).expect("exists");
                        q.held = false;
                        q.call_failed = true;
                        q.pod_gone = e == CallError::Gone;
                        self.outcomes.call_failures += 1;
                        self.immediate
                            .push_back((r, Input::CallUnavailable { request }));
                    }
                }
            }
        }
    }

    /// Runs events until nothing is left but the replicas' periodic timers
    /// and every call has ended, or until `limit`; returns whether it got
    /// there.
    pub fn drain(&mut self, limit: UnixTime) -> bool {
        loop {
            let busy = self.waiting > 0 || self.calls > 0 || self.work > 0;
            if !busy {
                return true;
            }
            let Some(next) = self.next_event() else {
                return true;
            };
            if next > limit {
                return false;
            }
            self.run_until(next);
        }
    }

    /// Checks that every replica's load is back to zero and every request
    /// got exactly one reply; returns what is off.
    pub fn check_quiet(&self) -> Vec<String> {
        let mut v = Vec::new();
        for ((r, id), q) in &self.requests {
            if q.replies != 1 {
                v.push(format!("replica {r}: {id} got {} replies", q.replies));
            }
        }
        for (r, replica) in self.replicas.iter().enumerate() {
            for s in replica.cache.slots() {
                if s.load != 0 {
                    v.push(format!("replica {r}: {} keeps load {}", s.pod_name, s.load));
                }
            }
        }
        v
    }

    /// Every observation of the cluster's labelled pods.
    pub fn observed(&self) -> Vec<Arc<crate::domain::pod_cache::ObservedPod>> {
        self.cluster
            .observed()
            .filter(|o| o.labelled)
            .cloned()
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::pod_cache::template::pod_ip_endpoint;
    use crate::domain::pod_cache::{FunctionSettings, SlotId};

    use super::super::cluster::StartLatency;

    const START: UnixTime = UnixTime::from_secs(1_800_000_000);
    const IMAGE: &str = "example.com/fn:v1";
    /// The wrapper answers 2 s after creation; the kubelet reports the pod
    /// ready 5 s after that.
    const STARTS: Duration = Duration::from_secs(2);
    const READINESS_DELAY: Duration = Duration::from_secs(5);

    /// The address mode a harness run simulates.
    #[derive(Clone, Copy, PartialEq)]
    enum Mode {
        /// Pod IP, with the wrapper health check (the fast path).
        PodIpProbed,
        /// Pod IP, ready when the kubelet says so.
        PodIpKubelet,
        /// Service: ready, then published by the service.
        Service,
    }

    fn harness(mode: Mode) -> Harness {
        let mut policy = PodCachePolicy::new(FunctionSettings::default(), "r").unwrap();
        policy.probe_wrapper = mode == Mode::PodIpProbed;
        policy.await_endpoints = mode == Mode::Service;
        let cluster = SimCluster::new("ns", START, 7)
            .with_latency(StartLatency::Fixed(STARTS))
            .with_readiness_delay(READINESS_DELAY);
        let config = HarnessConfig {
            endpoint_latency: Duration::from_secs(1),
            probe_latency: Duration::from_millis(50),
            ..HarnessConfig::default()
        };
        let mut h = Harness::new(config, policy, cluster);
        h.log = Some(Vec::new());
        h
    }

    fn wrapper_serving(h: &Harness) -> Vec<(SlotId, String)> {
        h.log
            .iter()
            .flatten()
            .filter_map(|l| match l {
                Logged::Input(_, _, Input::WrapperServing { slot, endpoint }) => {
                    Some((*slot, endpoint.clone()))
                }
                _ => None,
            })
            .collect()
    }

    /// One request on a fresh cluster: when it was answered (after its
    /// arrival), the endpoint it was given, and the harness.
    fn one_request(mode: Mode) -> (Duration, String, Harness) {
        let mut h = harness(mode);
        let id = h.submit(0, IMAGE, Duration::from_secs(1), None);
        assert!(h.drain(START + Duration::from_secs(120)));
        assert_eq!(h.violations(), Vec::<String>::new());
        assert_eq!(h.check_quiet(), Vec::<String>::new());
        let q = h.request(0, id).expect("recorded").clone();
        assert_eq!(q.error, None);
        assert!(!q.call_failed, "the call ran in the pod: {q:?}");
        let waited = q.replied_at.expect("answered").saturating_since(START);
        let endpoint = assignment_endpoint(&h);
        (waited, endpoint, h)
    }

    fn assignment_endpoint(h: &Harness) -> String {
        h.log
            .iter()
            .flatten()
            .find_map(|l| match l {
                Logged::Command(_, _, Command::Reply { result: Ok(a), .. }) => {
                    Some(a.endpoint.clone())
                }
                _ => None,
            })
            .expect("a successful reply")
    }

    // Pod-IP mode with the wrapper health check: the harness carries out
    // ProbeWrapper, the wrapper answering at the pod IP is reported as
    // WrapperServing, and the request is answered then — before the kubelet
    // reports the pod ready, and before a service would publish it.
    #[test]
    fn the_pod_ip_fast_path_is_simulated() {
        let (probed, endpoint, h) = one_request(Mode::PodIpProbed);
        let serving = wrapper_serving(&h);
        assert_eq!(serving.len(), 1, "{serving:?}");
        assert_eq!(serving[0].1, endpoint);
        let ip = h
            .cluster()
            .observed()
            .find_map(|o| o.ip.clone())
            .expect("the pod has an IP");
        assert_eq!(endpoint, pod_ip_endpoint(&ip));
        assert!(probed >= STARTS, "{probed:?}");
        assert!(
            probed < STARTS + Duration::from_millis(100),
            "answered at the first health check: {probed:?}"
        );

        let (kubelet, endpoint, h) = one_request(Mode::PodIpKubelet);
        assert!(wrapper_serving(&h).is_empty());
        assert!(!endpoint.is_empty());
        assert_eq!(kubelet, STARTS + READINESS_DELAY);

        let (published, _, h) = one_request(Mode::Service);
        assert!(wrapper_serving(&h).is_empty());
        assert_eq!(published, STARTS + READINESS_DELAY + Duration::from_secs(1));
        assert!(probed < kubelet && kubelet < published);
    }

    // A probe reports nothing once it cannot succeed: the pod went before
    // its wrapper answered the check, and the waiter is told the pod is gone.
    #[test]
    fn a_probe_of_a_pod_gone_reports_nothing() {
        let mut h = harness(Mode::PodIpProbed);
        let id = h.submit(0, IMAGE, Duration::from_secs(1), None);
        h.run_until(START + STARTS);
        let probing = h
            .log
            .iter()
            .flatten()
            .any(|l| matches!(l, Logged::Command(_, _, Command::ProbeWrapper { .. })));
        assert!(probing, "the starting pod is probed");
        let pod = h.cluster().observed().next().expect("one pod").name.clone();
        h.vanish(&pod);
        assert!(h.drain(START + Duration::from_secs(120)));
        assert!(wrapper_serving(&h).is_empty());
        let q = h.request(0, id).expect("recorded");
        assert!(
            matches!(q.error, Some(PodCacheError::PodGone { .. })),
            "{q:?}"
        );
        assert_eq!(h.violations(), Vec::<String>::new());
    }
}
