//! The simulated cluster: a plain struct stepped with virtual time.
//!
//! Its cost is O(changes): every pod keeps its observation
//! ([`ObservedPod`]) up to date as it changes, so a listing only shares
//! them ([`Arc`]), and pods due to start are kept in a heap by time instead
//! of being scanned.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, VecDeque};

use foldhash::{HashMap, HashMapExt, HashSet, HashSetExt};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Pod, PodCondition, PodStatus, Service};

use crate::domain::pod_cache::template::{
    observe_pod, observe_service, pod_ip_endpoint, service_endpoint,
};
use crate::domain::pod_cache::{
    CREATION_ANNOTATION, DeletePrecondition, ObservedPhase, ObservedPod, ObservedService,
    PodCreation, RECLAIM_AFTER_ANNOTATION, SETTINGS_VERSION_ANNOTATION,
    TEMPLATE_VERSION_ANNOTATION, UnixTime, naming,
};
use crate::ports::{ConfigMapData, PlatformError, PodEvent};

/// How long a created pod takes to become ready, in virtual time.
#[derive(Debug, Clone, PartialEq)]
pub enum StartLatency {
    /// Always the same.
    Fixed(Duration),
    /// Uniform between `min` and `max` (inclusive of `min`).
    Uniform {
        /// Shortest start.
        min: Duration,
        /// Longest start.
        max: Duration,
    },
    /// Log-normal around `median` with shape `sigma` (image pulls have a long tail).
    LogNormal {
        /// The median start time.
        median: Duration,
        /// Standard deviation of the underlying normal (0.5 is a fair tail).
        sigma: f64,
    },
    /// Never on its own: the test calls [`SimCluster::set_pod_ready`].
    Manual,
}

/// Random failures, as probabilities in `[0, 1]` drawn per operation.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FailureRates {
    /// `create_pod` fails with [`PlatformError::Transient`].
    pub create_error: f64,
    /// `create_pod` creates the pod but its answer is lost: the caller sees
    /// a transient error, and a retry meets AlreadyExists.
    pub create_lost: f64,
    /// A created pod stays `Pending` forever (bad image, no capacity).
    pub never_ready: f64,
    /// A created pod ends in phase `Failed` instead of becoming ready.
    pub crash: f64,
    /// `patch_pod_annotations` fails with a transient error.
    pub patch_error: f64,
    /// `list_pods` and `list_services` fail with a transient error.
    pub list_error: f64,
    /// `delete_pod` fails with a transient error.
    pub delete_error: f64,
    /// A call ([`SimCluster::begin_call`]) to a pod that already carries at
    /// least [`unavailable_load`](Self::unavailable_load) calls is refused
    /// as UNAVAILABLE (a wrapper overloaded, healthy otherwise).
    pub unavailable: f64,
    /// The load from which [`unavailable`](Self::unavailable) applies.
    pub unavailable_load: u32,
}

/// Platform operations, for scripted failures ([`SimCluster::inject`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operation {
    /// `create_pod`.
    CreatePod,
    /// `get_pod`.
    GetPod,
    /// `list_pods`.
    ListPods,
    /// `delete_pod`.
    DeletePod,
    /// `create_service`.
    CreateService,
    /// `get_service`.
    GetService,
    /// `list_services`.
    ListServices,
    /// `delete_service`.
    DeleteService,
    /// `patch_pod_annotations`.
    PatchPod,
    /// `read_config_map`.
    ReadConfigMap,
    /// `ensure_pull_secret`.
    EnsureSecret,
}

/// Counters a simulation reports.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SimStats {
    /// Pods created successfully.
    pub pods_created: u64,
    /// Pods deleted (by anyone).
    pub pods_deleted: u64,
    /// `create_pod` calls refused with AlreadyExists.
    pub already_exists: u64,
    /// Deletions refused because their precondition did not hold.
    pub delete_conflicts: u64,
    /// API calls made (creations, reads, lists, patches, deletions).
    pub api_calls: u64,
    /// API calls that failed (scripted or random faults).
    pub api_errors: u64,
    /// Most pods alive at once.
    pub peak_pods: usize,
    /// Sum over deleted pods of their lifetime, plus live pods up to now (cost).
    pub pod_seconds: f64,
}

/// What the cluster saw that must never happen; the invariants of the
/// property tests and of the simulator's reports.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Audit {
    /// Pods deleted while calls were in them: (time, pod, calls).
    pub deleted_in_use: Vec<(UnixTime, String, u32)>,
    /// Pod names created twice (a second successful creation of a name
    /// that existed before), warm pool names excepted.
    pub created_twice: Vec<String>,
    /// Calls begun on a pod that did not exist (or was not ready): (time,
    /// pod, caller).
    pub calls_to_missing: Vec<(UnixTime, String, usize)>,
}

/// Why a call could not begin or broke.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CallError {
    /// The pod does not exist, is not ready, or failed.
    Gone,
    /// The wrapper refused it (overloaded).
    Unavailable,
}

/// A change to a pod, for watchers.
#[derive(Debug, Clone)]
pub struct ClusterEvent {
    /// True for a deletion.
    pub deleted: bool,
    /// The pod's state (its last one for a deletion).
    pub observed: Arc<ObservedPod>,
    /// The full object, for pods created as objects (see
    /// [`SimCluster::create_pod`]).
    pub pod: Option<Pod>,
}

impl ClusterEvent {
    /// The watch event of a [`PodPlatform`](crate::ports::PodPlatform), if
    /// the pod was created as an object.
    pub fn pod_event(&self) -> Option<PodEvent> {
        let pod = self.pod.clone()?;
        Some(if self.deleted {
            PodEvent::Deleted(pod)
        } else {
            PodEvent::Applied(pod)
        })
    }
}

#[derive(Debug)]
struct SimPod {
    /// The object, when created through [`SimCluster::create_pod`].
    pod: Option<Pod>,
    observed: Arc<ObservedPod>,
    created_at: UnixTime,
    ready_at: Option<UnixTime>,
    crashes: bool,
    /// Whether its wrapper server answers (from its start until it fails).
    serving: bool,
    calls: u32,
    rv: u64,
}

#[derive(Debug)]
struct SimService {
    service: Option<Service>,
    observed: ObservedService,
}

/// A tiny deterministic PRNG (SplitMix64), so simulations replay exactly
/// from a seed without another dependency.
#[derive(Debug, Clone)]
struct SplitMix64(u64);

impl SplitMix64 {
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `[0, 1)`.
    fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    fn chance(&mut self, p: f64) -> bool {
        p > 0.0 && self.next_f64() < p
    }
}

/// A simulated Kubernetes namespace: pods, services, ConfigMaps and pull
/// secrets, with pods that start after a sampled latency of virtual time,
/// wrappers that take calls, and an [`Audit`] of what must never happen.
///
/// It is synchronous: a simulator or property test calls its methods and
/// [`advance_to`](Self::advance_to) directly; [`SimPlatform`](super::SimPlatform)
/// wraps it behind the async [`PodPlatform`](crate::ports::PodPlatform) port.
/// Pod changes are queued as [`ClusterEvent`]s, drained with
/// [`drain_events`](Self::drain_events).
#[derive(Debug)]
pub struct SimCluster {
    namespace: String,
    now: UnixTime,
    pods: BTreeMap<String, SimPod>,
    services: BTreeMap<String, SimService>,
    config_maps: BTreeMap<(String, String), ConfigMapData>,
    secrets: BTreeMap<String, Vec<u8>>,
    latency: StartLatency,
    readiness_delay: Duration,
    failures: FailureRates,
    scripted: VecDeque<(Operation, PlatformError)>,
    rng: SplitMix64,
    events: Vec<ClusterEvent>,
    starting: BinaryHeap<Reverse<(UnixTime, String)>>,
    ever_created: HashSet<String>,
    /// Pods with at least one call in them.
    in_use: usize,
    /// The UID of the latest pod created under each name, live or not.
    latest_uid: HashMap<String, String>,
    next_id: u64,
    stats: SimStats,
    audit: Audit,
}

impl SimCluster {
    /// An empty namespace at virtual time `now`, pods ready after 2 s, no
    /// failures; `seed` fixes every random draw.
    pub fn new(namespace: &str, now: UnixTime, seed: u64) -> Self {
        Self {
            namespace: namespace.to_string(),
            now,
            pods: BTreeMap::new(),
            services: BTreeMap::new(),
            config_maps: BTreeMap::new(),
            secrets: BTreeMap::new(),
            latency: StartLatency::Fixed(Duration::from_secs(2)),
            readiness_delay: Duration::ZERO,
            failures: FailureRates::default(),
            scripted: VecDeque::new(),
            rng: SplitMix64(seed),
            events: Vec::new(),
            starting: BinaryHeap::new(),
            ever_created: HashSet::new(),
            in_use: 0,
            latest_uid: HashMap::new(),
            next_id: 1,
            stats: SimStats::default(),
            audit: Audit::default(),
        }
    }

    /// Sets the pod start latency distribution.
    pub fn with_latency(mut self, latency: StartLatency) -> Self {
        self.latency = latency;
        self
    }

    /// Sets how long after its wrapper server starts answering a pod is
    /// reported ready (the kubelet's readiness probe and status sync lag
    /// behind the container: Porch's template probes every 10 s). Zero (the
    /// default): the pod is ready the moment its wrapper answers. Otherwise
    /// a pod whose start latency has elapsed first runs with an IP but not
    /// ready — its wrapper answers health checks and calls at that IP
    /// ([`wrapper_serves`](Self::wrapper_serves)), the pod-IP fast path of
    /// [`Command::ProbeWrapper`](crate::domain::pod_cache::Command::ProbeWrapper) —
    /// and becomes ready `delay` later.
    pub fn with_readiness_delay(mut self, delay: Duration) -> Self {
        self.readiness_delay = delay;
        self
    }

    /// Sets the random failure rates.
    pub fn with_failures(mut self, failures: FailureRates) -> Self {
        self.failures = failures;
        self
    }

    /// Changes the random failure rates from now on.
    pub fn set_failures(&mut self, failures: FailureRates) {
        self.failures = failures;
    }

    /// The random failure rates.
    pub fn failures(&self) -> &FailureRates {
        &self.failures
    }

    /// The namespace pods live in.
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// The current virtual time.
    pub fn now(&self) -> UnixTime {
        self.now
    }

    /// A uniform draw in `[0, 1)` from the cluster's seeded generator, for
    /// callers that simulate latencies and faults of their own.
    pub fn draw(&mut self) -> f64 {
        self.rng.next_f64()
    }

    /// True with probability `p`, from the cluster's seeded generator.
    pub fn chance(&mut self, p: f64) -> bool {
        self.rng.chance(p)
    }

    /// The counters so far (pod-seconds include live pods up to now).
    pub fn stats(&self) -> SimStats {
        let mut s = self.stats.clone();
        s.pod_seconds += self
            .pods
            .values()
            .map(|p| self.now.saturating_since(p.created_at).as_secs_f64())
            .sum::<f64>();
        s
    }

    /// What must never happen, as far as it happened.
    pub fn audit(&self) -> &Audit {
        &self.audit
    }

    /// Makes the next call of `op` fail with `error` (queued in order).
    pub fn inject(&mut self, op: Operation, error: PlatformError) {
        self.scripted.push_back((op, error));
    }

    /// A scripted failure of `op`, else a random one with probability `rate`.
    fn fault(&mut self, op: Operation, rate: f64) -> Result<(), PlatformError> {
        self.stats.api_calls += 1;
        if let Some(i) = self.scripted.iter().position(|(o, _)| *o == op) {
            self.stats.api_errors += 1;
            return Err(self.scripted.remove(i).expect("index found").1);
        }
        if self.rng.chance(rate) {
            self.stats.api_errors += 1;
            return Err(PlatformError::Transient(format!(
                "simulated failure of {op:?}"
            )));
        }
        Ok(())
    }

    /// Moves virtual time forward to `now` (never backwards); pods whose
    /// start latency has elapsed become ready, or fail if drawn to crash.
    pub fn advance_to(&mut self, now: UnixTime) {
        self.now = self.now.max(now);
        while let Some(Reverse((at, _))) = self.starting.peek() {
            if *at > self.now {
                break;
            }
            let Reverse((at, name)) = self.starting.pop().expect("peeked");
            let Some(p) = self.pods.get(&name) else {
                continue;
            };
            if p.ready_at != Some(at) {
                continue;
            }
            if p.crashes {
                self.set_phase(&name, "Failed", false);
            } else if !p.serving && !self.readiness_delay.is_zero() {
                // The wrapper answers; the kubelet reports it ready later.
                let ready_at = at + self.readiness_delay;
                self.starting.push(Reverse((ready_at, name.clone())));
                let p = self.pods.get_mut(&name).expect("looked up above");
                p.ready_at = Some(ready_at);
                self.set_phase(&name, "Running", false);
            } else {
                self.set_phase(&name, "Running", true);
            }
        }
    }

    /// The earliest time a pending pod will change on its own, if any.
    pub fn next_change(&mut self) -> Option<UnixTime> {
        while let Some(Reverse((at, name))) = self.starting.peek() {
            if self.pods.get(name).is_some_and(|p| p.ready_at == Some(*at)) {
                return Some(*at);
            }
            self.starting.pop();
        }
        None
    }

    fn sample_latency(&mut self) -> Option<Duration> {
        Some(match self.latency.clone() {
            StartLatency::Fixed(d) => d,
            StartLatency::Uniform { min, max } => {
                let span = max.saturating_sub(min).as_secs_f64();
                min + Duration::from_secs_f64(span * self.rng.next_f64())
            }
            StartLatency::LogNormal { median, sigma } => {
                // Box–Muller.
                let u1 = self.rng.next_f64().max(f64::MIN_POSITIVE);
                let u2 = self.rng.next_f64();
                let z = (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos();
                let secs = median.as_secs_f64() * (sigma * z).exp();
                Duration::from_secs_f64(secs.clamp(0.0, 86_400.0))
            }
            StartLatency::Manual => return None,
        })
    }

    /// Records a change of pod `name` (new resourceVersion) and queues its event.
    fn changed(&mut self, name: &str) {
        let rv = self.next_id;
        self.next_id += 1;
        let Some(p) = self.pods.get_mut(name) else {
            return;
        };
        p.rv = rv;
        let o = Arc::make_mut(&mut p.observed);
        o.resource_version = Some(rv.to_string());
        if let Some(pod) = &mut p.pod {
            pod.metadata.resource_version = Some(rv.to_string());
        }
        self.events.push(ClusterEvent {
            deleted: false,
            observed: p.observed.clone(),
            pod: p.pod.clone(),
        });
    }

    fn set_phase(&mut self, name: &str, phase: &str, ready: bool) {
        let ip = format!(
            "10.{}.{}.{}",
            (self.next_id >> 16) & 0xff,
            (self.next_id >> 8) & 0xff,
            self.next_id & 0xff
        );
        self.next_id += 1;
        let namespace = self.namespace.clone();
        let Some(p) = self.pods.get_mut(name) else {
            return;
        };
        // Running, its containers started: it has an IP (kept once
        // assigned) and its wrapper answers, ready or not.
        let running = phase == "Running";
        let ip = match (&p.observed.ip, running) {
            (Some(ip), true) => ip.clone(),
            _ => ip,
        };
        let starting = running && !ready;
        if !starting {
            p.ready_at = None;
        }
        p.serving = running;
        if phase == "Failed" {
            // Whatever ran in it broke with it.
            if p.calls > 0 {
                self.in_use -= 1;
            }
            p.calls = 0;
        }
        let o = Arc::make_mut(&mut p.observed);
        o.ip = running.then(|| ip.clone());
        o.phase = match (phase, ready) {
            ("Failed", _) => ObservedPhase::Failed {
                reason: "pod phase Failed".into(),
            },
            (_, true) => ObservedPhase::Ready {
                endpoint: service_endpoint(name, &namespace),
            },
            _ => ObservedPhase::Pending,
        };
        if let Some(pod) = &mut p.pod {
            pod.status = Some(PodStatus {
                phase: Some(phase.to_string()),
                pod_ip: running.then_some(ip),
                conditions: Some(vec![PodCondition {
                    type_: "Ready".to_string(),
                    status: if ready { "True" } else { "False" }.to_string(),
                    ..PodCondition::default()
                }]),
                ..PodStatus::default()
            });
        }
        self.changed(name);
    }

    /// Makes pod `name` ready now (for [`StartLatency::Manual`]).
    /// Errors: [`PlatformError::NotFound`].
    pub fn set_pod_ready(&mut self, name: &str) -> Result<(), PlatformError> {
        self.pod_ref(name)?;
        self.set_phase(name, "Running", true);
        Ok(())
    }

    /// Puts pod `name` in phase `Failed` now (a crash, an eviction); calls
    /// in it break.
    /// Errors: [`PlatformError::NotFound`].
    pub fn fail_pod(&mut self, name: &str) -> Result<(), PlatformError> {
        self.pod_ref(name)?;
        self.set_phase(name, "Failed", false);
        Ok(())
    }

    fn pod_ref(&self, name: &str) -> Result<&SimPod, PlatformError> {
        self.pods.get(name).ok_or_else(|| PlatformError::NotFound {
            kind: "Pod",
            name: name.to_string(),
        })
    }

    /// Every pod created as an object, by name.
    pub fn pods(&self) -> impl Iterator<Item = &Pod> + '_ {
        self.pods.values().filter_map(|p| p.pod.as_ref())
    }

    /// Every pod's observation, by name.
    pub fn observed(&self) -> impl Iterator<Item = &Arc<ObservedPod>> + '_ {
        self.pods.values().map(|p| &p.observed)
    }

    /// The observation of pod `name`, if it exists.
    pub fn observed_pod(&self, name: &str) -> Option<&Arc<ObservedPod>> {
        self.pods.get(name).map(|p| &p.observed)
    }

    /// Pods alive.
    pub fn pod_count(&self) -> usize {
        self.pods.len()
    }

    /// Pods with at least one call in flight.
    pub fn pods_in_use(&self) -> usize {
        self.in_use
    }

    /// Calls in flight in pod `name`.
    pub fn calls_in(&self, name: &str) -> u32 {
        self.pods.get(name).map_or(0, |p| p.calls)
    }

    /// Pod changes since the last drain, in order.
    pub fn drain_events(&mut self) -> Vec<ClusterEvent> {
        std::mem::take(&mut self.events)
    }

    /// Whether pod changes are queued.
    pub fn has_events(&self) -> bool {
        !self.events.is_empty()
    }

    /// Creates `pod` in phase `Pending`; it becomes ready after a sampled
    /// start latency (or never, or crashes, per the failure rates).
    ///
    /// Errors: scripted or random failures; [`PlatformError::Invalid`] without
    /// a name; [`PlatformError::AlreadyExists`] if the name is taken.
    pub fn create_pod(&mut self, mut pod: Pod) -> Result<Pod, PlatformError> {
        self.fault(Operation::CreatePod, self.failures.create_error)?;
        let name = pod
            .metadata
            .name
            .clone()
            .ok_or_else(|| PlatformError::Invalid("pod has no metadata.name".into()))?;
        if self.pods.contains_key(&name) {
            self.stats.already_exists += 1;
            return Err(PlatformError::AlreadyExists { kind: "Pod", name });
        }
        pod.metadata.namespace = Some(self.namespace.clone());
        pod.metadata.uid = Some(format!("uid-{}", self.next_id));
        pod.metadata.resource_version = Some(self.next_id.to_string());
        pod.status = Some(PodStatus {
            phase: Some("Pending".to_string()),
            ..PodStatus::default()
        });
        let observed = observe_pod(&pod).expect("named pod");
        let lost = self.rng.chance(self.failures.create_lost);
        self.insert_pod(name.clone(), observed, Some(pod.clone()));
        if lost {
            return Err(PlatformError::Transient(format!(
                "simulated lost answer creating pod {name}"
            )));
        }
        Ok(pod)
    }

    /// Creates the pod of `creation` as the runner would build it (labelled,
    /// with its annotations), without a full object: the cheap path of the
    /// simulator. Same errors as [`create_pod`](Self::create_pod).
    pub fn create_from(&mut self, creation: &PodCreation) -> Result<(), PlatformError> {
        self.fault(Operation::CreatePod, self.failures.create_error)?;
        let name = &creation.pod_name;
        if self.pods.contains_key(name) {
            self.stats.already_exists += 1;
            return Err(PlatformError::AlreadyExists {
                kind: "Pod",
                name: name.clone(),
            });
        }
        let observed = ObservedPod {
            name: name.clone(),
            image: creation.image.clone(),
            labelled: true,
            template_version: Some(creation.template_version.clone()),
            settings_version: creation.settings_version.clone(),
            reclaim_after: Some(creation.reclaim_after.to_annotation()),
            creation: Some(creation.creation.clone()),
            uid: Some(format!("uid-{}", self.next_id)),
            resource_version: Some(self.next_id.to_string()),
            ip: None,
            phase: ObservedPhase::Pending,
        };
        let lost = self.rng.chance(self.failures.create_lost);
        self.insert_pod(name.clone(), observed, None);
        if lost {
            return Err(PlatformError::Transient(format!(
                "simulated lost answer creating pod {name}"
            )));
        }
        Ok(())
    }

    fn insert_pod(&mut self, name: String, observed: ObservedPod, pod: Option<Pod>) {
        let rv = self.next_id;
        self.next_id += 1;
        let stuck = self.rng.chance(self.failures.never_ready);
        let crashes = self.rng.chance(self.failures.crash);
        let ready_at = self
            .sample_latency()
            .filter(|_| !stuck)
            .map(|d| self.now + d);
        if let Some(at) = ready_at {
            self.starting.push(Reverse((at, name.clone())));
        }
        // A warm pool's names are meant to be created again once their pod
        // is gone; the API server's name uniqueness is their guard.
        if let Some(uid) = &observed.uid {
            self.latest_uid.insert(name.clone(), uid.clone());
        }
        if !self.ever_created.insert(name.clone()) && !naming::is_pool_name(&name) {
            self.audit.created_twice.push(name.clone());
        }
        let observed = Arc::new(observed);
        self.events.push(ClusterEvent {
            deleted: false,
            observed: observed.clone(),
            pod: pod.clone(),
        });
        self.pods.insert(
            name,
            SimPod {
                pod,
                observed,
                created_at: self.now,
                ready_at,
                crashes,
                serving: false,
                calls: 0,
                rv,
            },
        );
        self.stats.pods_created += 1;
        self.stats.peak_pods = self.stats.peak_pods.max(self.pods.len());
    }

    /// The phase of the live pod `name`; `None` if there is none.
    pub fn phase_of(&self, name: &str) -> Option<&ObservedPhase> {
        self.pods.get(name).map(|p| &p.observed.phase)
    }

    /// The UID of the latest pod created under `name`, whether it still
    /// exists or not; `None` if none ever was.
    pub fn latest_uid(&self, name: &str) -> Option<&str> {
        self.latest_uid.get(name).map(String::as_str)
    }

    /// Reads pod `name`. Errors: [`PlatformError::NotFound`], scripted failures.
    pub fn get_pod(&mut self, name: &str) -> Result<Pod, PlatformError> {
        self.fault(Operation::GetPod, 0.0)?;
        let p = self.pod_ref(name)?;
        Ok(p.pod.clone().unwrap_or_else(|| Pod {
            metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                name: Some(name.to_string()),
                ..Default::default()
            },
            ..Pod::default()
        }))
    }

    /// Reads the observation of pod `name` (the cheap path of
    /// [`get_pod`](Self::get_pod)).
    /// Errors: [`PlatformError::NotFound`], scripted failures.
    pub fn get_observed(&mut self, name: &str) -> Result<Arc<ObservedPod>, PlatformError> {
        self.fault(Operation::GetPod, 0.0)?;
        self.pod_ref(name).map(|p| p.observed.clone())
    }

    /// Lists pods matching `label_selector` (`k=v`, `k==v`, `k!=v`, `k`,
    /// `!k`, comma-separated; empty matches all). Only pods created as
    /// objects are returned. Errors: scripted and random failures,
    /// [`PlatformError::Invalid`] for an unsupported selector.
    pub fn list_pods(&mut self, label_selector: &str) -> Result<Vec<Pod>, PlatformError> {
        self.fault(Operation::ListPods, self.failures.list_error)?;
        let selector = Selector::parse(label_selector)?;
        Ok(self
            .pods
            .values()
            .filter_map(|p| p.pod.as_ref())
            .filter(|p| selector.matches(p))
            .cloned()
            .collect())
    }

    /// The observations of every labelled pod: a listing at O(pods)
    /// reference counts. Errors: scripted and random failures.
    pub fn list_observed(&mut self) -> Result<Vec<Arc<ObservedPod>>, PlatformError> {
        self.fault(Operation::ListPods, self.failures.list_error)?;
        Ok(self
            .pods
            .values()
            .filter(|p| p.observed.labelled)
            .map(|p| p.observed.clone())
            .collect())
    }

    /// Deletes pod `name` at once (no grace period in the simulation) if
    /// `precondition` holds. A deletion of a pod with calls in it is
    /// recorded in the [`Audit`]; the calls break.
    ///
    /// Errors: [`PlatformError::NotFound`], [`PlatformError::Conflict`] when
    /// the precondition does not hold, scripted and random failures.
    pub fn delete_pod(
        &mut self,
        name: &str,
        precondition: &DeletePrecondition,
    ) -> Result<(), PlatformError> {
        self.fault(Operation::DeletePod, self.failures.delete_error)?;
        let p = self.pod_ref(name)?;
        let uid_ok = precondition
            .uid
            .as_ref()
            .is_none_or(|u| p.observed.uid.as_ref() == Some(u));
        let rv_ok = precondition
            .resource_version
            .as_ref()
            .is_none_or(|v| *v == p.rv.to_string());
        if !uid_ok || !rv_ok {
            self.stats.delete_conflicts += 1;
            return Err(PlatformError::Conflict {
                kind: "Pod",
                name: name.to_string(),
                message: "the precondition of the deletion does not hold".into(),
            });
        }
        let calls = self.remove(name);
        if calls > 0 {
            self.audit
                .deleted_in_use
                .push((self.now, name.to_string(), calls));
        }
        Ok(())
    }

    /// Removes pod `name`, if any: counts it, reports the deletion to
    /// watchers and returns the calls that were in it.
    fn remove(&mut self, name: &str) -> u32 {
        let Some(p) = self.pods.remove(name) else {
            return 0;
        };
        self.stats.pods_deleted += 1;
        self.stats.pod_seconds += self.now.saturating_since(p.created_at).as_secs_f64();
        if p.calls > 0 {
            self.in_use -= 1;
        }
        self.events.push(ClusterEvent {
            deleted: true,
            observed: p.observed,
            pod: p.pod,
        });
        p.calls
    }

    /// Deletes pod `name` and its service by hand, behind the runner's back:
    /// no API fault applies and nothing is audited (whoever does it ends the
    /// calls in it). A watch reports the deletion.
    pub fn remove_pod(&mut self, name: &str) {
        self.remove(name);
        self.services.remove(name);
    }

    /// Merge-patches pod `name`'s annotations; with `uid`, only if the pod
    /// has that UID (the API server's answer to a `metadata.uid` in a merge
    /// patch).
    /// Errors: [`PlatformError::NotFound`], [`PlatformError::Conflict`] when
    /// the UID differs, scripted and random failures.
    pub fn patch_pod_annotations(
        &mut self,
        name: &str,
        uid: Option<&str>,
        annotations: BTreeMap<String, String>,
    ) -> Result<(), PlatformError> {
        self.fault(Operation::PatchPod, self.failures.patch_error)?;
        let current = self.pod_ref(name)?.observed.uid.as_deref();
        if let Some(uid) = uid
            && current != Some(uid)
        {
            return Err(PlatformError::Conflict {
                kind: "Pod",
                name: name.to_string(),
                message: format!(
                    "Precondition failed: UID in precondition: {uid}, UID in object meta: {}",
                    current.unwrap_or_default()
                ),
            });
        }
        let p = self.pods.get_mut(name).expect("checked above");
        let o = Arc::make_mut(&mut p.observed);
        for (k, v) in &annotations {
            match k.as_str() {
                RECLAIM_AFTER_ANNOTATION => o.reclaim_after = Some(v.clone()),
                TEMPLATE_VERSION_ANNOTATION => o.template_version = Some(v.clone()),
                SETTINGS_VERSION_ANNOTATION => o.settings_version = Some(v.clone()),
                CREATION_ANNOTATION => o.creation = Some(v.clone()),
                _ => {}
            }
        }
        if let Some(pod) = &mut p.pod {
            pod.metadata
                .annotations
                .get_or_insert_with(BTreeMap::new)
                .extend(annotations);
        }
        self.changed(name);
        Ok(())
    }

    /// Whether the wrapper server of pod `name` answers a health check at
    /// `endpoint` (`<pod IP>:9446`) now: the pod exists, runs (ready, or
    /// started and not yet reported ready, see
    /// [`with_readiness_delay`](Self::with_readiness_delay)) and has that
    /// IP. No API call: the check goes to the pod's network.
    pub fn wrapper_serves(&self, name: &str, endpoint: &str) -> bool {
        self.pods.get(name).is_some_and(|p| {
            p.serving && p.observed.ip.as_deref().map(pod_ip_endpoint).as_deref() == Some(endpoint)
        })
    }

    /// Whether the wrapper of pod `name` may still answer at `endpoint`
    /// later: the pod exists, has not failed, and has no other IP.
    pub fn wrapper_may_serve(&self, name: &str, endpoint: &str) -> bool {
        self.pods.get(name).is_some_and(|p| {
            !matches!(p.observed.phase, ObservedPhase::Failed { .. })
                && p.observed
                    .ip
                    .as_deref()
                    .is_none_or(|ip| pod_ip_endpoint(ip) == endpoint)
        })
    }

    /// Begins a call from `caller` to the wrapper of pod `name`.
    ///
    /// Errors: [`CallError::Gone`] when the pod does not exist or its
    /// wrapper does not answer (not started, or failed; recorded in the
    /// [`Audit`]), [`CallError::Unavailable`] when the wrapper refuses it
    /// under load (the failure rates).
    pub fn begin_call(&mut self, name: &str, caller: usize) -> Result<(), CallError> {
        let serving = self.pods.get(name).is_some_and(|p| p.serving);
        if !serving {
            self.audit
                .calls_to_missing
                .push((self.now, name.to_string(), caller));
            return Err(CallError::Gone);
        }
        let (rate, from) = (self.failures.unavailable, self.failures.unavailable_load);
        let calls = self.pods[name].calls;
        if calls >= from && self.rng.chance(rate) {
            return Err(CallError::Unavailable);
        }
        if calls == 0 {
            self.in_use += 1;
        }
        self.pods.get_mut(name).expect("checked above").calls += 1;
        Ok(())
    }

    /// Ends a call begun with [`begin_call`](Self::begin_call); returns
    /// whether it was still running (false when its pod failed or was
    /// deleted meanwhile).
    pub fn end_call(&mut self, name: &str) -> bool {
        match self.pods.get_mut(name) {
            Some(p) if p.calls > 0 => {
                p.calls -= 1;
                if p.calls == 0 {
                    self.in_use -= 1;
                }
                true
            }
            _ => false,
        }
    }

    /// Creates `service`. Errors: [`PlatformError::AlreadyExists`],
    /// [`PlatformError::Invalid`] without a name, scripted failures.
    pub fn create_service(&mut self, mut service: Service) -> Result<Service, PlatformError> {
        self.fault(Operation::CreateService, 0.0)?;
        let name = service
            .metadata
            .name
            .clone()
            .ok_or_else(|| PlatformError::Invalid("service has no metadata.name".into()))?;
        if self.services.contains_key(&name) {
            return Err(PlatformError::AlreadyExists {
                kind: "Service",
                name,
            });
        }
        service.metadata.namespace = Some(self.namespace.clone());
        let observed = observe_service(&service).expect("named service");
        self.services.insert(
            name,
            SimService {
                service: Some(service.clone()),
                observed,
            },
        );
        Ok(service)
    }

    /// Creates the function service of pod `name` (selecting it), without a
    /// full object; an existing one is kept. Errors: scripted failures.
    pub fn create_service_for(&mut self, name: &str) -> Result<(), PlatformError> {
        self.fault(Operation::CreateService, 0.0)?;
        self.services
            .entry(name.to_string())
            .or_insert_with(|| SimService {
                service: None,
                observed: ObservedService {
                    name: name.to_string(),
                    selects_own_pod: true,
                },
            });
        Ok(())
    }

    /// Reads service `name`. Errors: [`PlatformError::NotFound`], scripted failures.
    pub fn get_service(&mut self, name: &str) -> Result<Service, PlatformError> {
        self.fault(Operation::GetService, 0.0)?;
        let s = self
            .services
            .get(name)
            .ok_or_else(|| PlatformError::NotFound {
                kind: "Service",
                name: name.to_string(),
            })?;
        Ok(s.service.clone().unwrap_or_default())
    }

    /// Whether service `name` exists (no API call).
    pub fn has_service(&self, name: &str) -> bool {
        self.services.contains_key(name)
    }

    /// The observations of every service. Errors: scripted and random failures.
    pub fn list_services(&mut self) -> Result<Vec<ObservedService>, PlatformError> {
        self.fault(Operation::ListServices, self.failures.list_error)?;
        Ok(self.services.values().map(|s| s.observed.clone()).collect())
    }

    /// Deletes service `name`. Errors: [`PlatformError::NotFound`], scripted failures.
    pub fn delete_service(&mut self, name: &str) -> Result<(), PlatformError> {
        self.fault(Operation::DeleteService, 0.0)?;
        self.services
            .remove(name)
            .map(|_| ())
            .ok_or_else(|| PlatformError::NotFound {
                kind: "Service",
                name: name.to_string(),
            })
    }

    /// Services created as objects, by name.
    pub fn services(&self) -> impl Iterator<Item = &Service> + '_ {
        self.services.values().filter_map(|s| s.service.as_ref())
    }

    /// Names of every service.
    pub fn service_names(&self) -> impl Iterator<Item = &str> + '_ {
        self.services.keys().map(String::as_str)
    }

    /// Stores ConfigMap `name` in `namespace` with a new resourceVersion,
    /// which it returns (a template change, as the tests make one).
    pub fn put_config_map(
        &mut self,
        namespace: &str,
        name: &str,
        data: BTreeMap<String, String>,
    ) -> String {
        let resource_version = self.next_id.to_string();
        self.next_id += 1;
        self.config_maps.insert(
            (namespace.to_string(), name.to_string()),
            ConfigMapData {
                data,
                resource_version: resource_version.clone(),
            },
        );
        resource_version
    }

    /// Reads ConfigMap `name` in `namespace`. Errors: [`PlatformError::NotFound`], scripted failures.
    pub fn read_config_map(
        &mut self,
        namespace: &str,
        name: &str,
    ) -> Result<ConfigMapData, PlatformError> {
        self.fault(Operation::ReadConfigMap, 0.0)?;
        self.config_maps
            .get(&(namespace.to_string(), name.to_string()))
            .cloned()
            .ok_or_else(|| PlatformError::NotFound {
                kind: "ConfigMap",
                name: name.to_string(),
            })
    }

    /// Creates or updates pull secret `name`; returns true if it changed.
    /// Errors: scripted failures.
    pub fn ensure_pull_secret(
        &mut self,
        name: &str,
        docker_config_json: &[u8],
    ) -> Result<bool, PlatformError> {
        self.fault(Operation::EnsureSecret, 0.0)?;
        if self
            .secrets
            .get(name)
            .is_some_and(|s| s == docker_config_json)
        {
            return Ok(false);
        }
        self.secrets
            .insert(name.to_string(), docker_config_json.to_vec());
        Ok(true)
    }

    /// The stored pull secret `name`, if any.
    pub fn pull_secret(&self, name: &str) -> Option<&[u8]> {
        self.secrets.get(name).map(Vec::as_slice)
    }
}

/// A parsed equality-based label selector.
#[derive(Debug, Clone, Default)]
pub(crate) struct Selector(Vec<(String, Term)>);

#[derive(Debug, Clone)]
enum Term {
    Equals(String),
    NotEquals(String),
    Exists,
    NotExists,
}

impl Selector {
    pub(crate) fn parse(s: &str) -> Result<Self, PlatformError> {
        let mut terms = Vec::new();
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let term = if let Some((k, v)) = part.split_once("!=") {
                (k.trim().to_string(), Term::NotEquals(v.trim().to_string()))
            } else if let Some((k, v)) = part.split_once("==").or_else(|| part.split_once('=')) {
                (k.trim().to_string(), Term::Equals(v.trim().to_string()))
            } else if let Some(k) = part.strip_prefix('!') {
                (k.trim().to_string(), Term::NotExists)
            } else if part.contains(' ') || part.contains('(') {
                return Err(PlatformError::Invalid(format!(
                    "unsupported label selector {s:?}: the simulator understands k=v, k!=v, k and !k"
                )));
            } else {
                (part.to_string(), Term::Exists)
            };
            terms.push(term);
        }
        Ok(Selector(terms))
    }

    pub(crate) fn matches(&self, pod: &Pod) -> bool {
        let labels = pod.metadata.labels.as_ref();
        self.0.iter().all(|(k, term)| {
            let v = labels.and_then(|l| l.get(k));
            match term {
                Term::Equals(want) => v == Some(want),
                Term::NotEquals(want) => v != Some(want),
                Term::Exists => v.is_some(),
                Term::NotExists => v.is_none(),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn pod(name: &str, label: Option<&str>) -> Pod {
        Pod {
            metadata: ObjectMeta {
                name: Some(name.into()),
                labels: label.map(|v| [("fn.kpt.dev/image".to_string(), v.to_string())].into()),
                ..ObjectMeta::default()
            },
            ..Pod::default()
        }
    }

    fn none() -> DeletePrecondition {
        DeletePrecondition::default()
    }

    #[test]
    fn pods_start_after_the_latency_and_names_are_unique() {
        let mut c = SimCluster::new("ns", UnixTime::from_secs(100), 7);
        c.create_pod(pod("a", Some("a"))).unwrap();
        assert!(matches!(
            c.create_pod(pod("a", None)),
            Err(PlatformError::AlreadyExists { .. })
        ));
        assert_eq!(c.stats().already_exists, 1);
        assert_eq!(c.next_change(), Some(UnixTime::from_secs(102)));
        c.advance_to(UnixTime::from_secs(101));
        assert_eq!(
            c.get_pod("a").unwrap().status.unwrap().phase.as_deref(),
            Some("Pending")
        );
        c.advance_to(UnixTime::from_secs(102));
        let status = c.get_pod("a").unwrap().status.unwrap();
        assert_eq!(status.phase.as_deref(), Some("Running"));
        assert!(status.pod_ip.is_some());
        assert!(matches!(
            c.observed_pod("a").unwrap().phase,
            ObservedPhase::Ready { .. }
        ));
        let events = c.drain_events();
        assert_eq!(events.len(), 2);
        c.delete_pod("a", &none()).unwrap();
        assert!(c.delete_pod("a", &none()).unwrap_err().is_not_found());
        let s = c.stats();
        assert_eq!((s.pods_created, s.pods_deleted, s.peak_pods), (1, 1, 1));
        assert!((s.pod_seconds - 2.0).abs() < 1e-9);
        assert!(c.audit().created_twice.is_empty());
        c.create_pod(pod("a", Some("a"))).unwrap();
        assert_eq!(c.audit().created_twice, ["a"]);
    }

    #[test]
    fn a_patch_with_a_uid_applies_only_to_that_pod() {
        let mut c = SimCluster::new("ns", UnixTime::EPOCH, 1).with_latency(StartLatency::Manual);
        c.create_pod(pod("a", Some("a"))).unwrap();
        let first = c.observed_pod("a").unwrap().uid.clone();
        // The name comes back as another pod.
        c.remove_pod("a");
        c.create_pod(pod("a", Some("a"))).unwrap();
        let patch = || [(RECLAIM_AFTER_ANNOTATION.to_string(), "9".to_string())].into();
        assert!(matches!(
            c.patch_pod_annotations("a", first.as_deref(), patch()),
            Err(PlatformError::Conflict { .. })
        ));
        assert_eq!(c.observed_pod("a").unwrap().reclaim_after, None);
        let second = c.observed_pod("a").unwrap().uid.clone();
        c.patch_pod_annotations("a", second.as_deref(), patch())
            .unwrap();
        assert_eq!(
            c.observed_pod("a").unwrap().reclaim_after.as_deref(),
            Some("9")
        );
    }

    #[test]
    fn deletions_honour_their_precondition_and_calls_are_audited() {
        let mut c = SimCluster::new("ns", UnixTime::EPOCH, 1).with_latency(StartLatency::Manual);
        c.create_pod(pod("a", Some("a"))).unwrap();
        c.set_pod_ready("a").unwrap();
        let listed = c.observed_pod("a").unwrap().clone();
        // A write after the listing changes the resourceVersion.
        c.patch_pod_annotations(
            "a",
            None,
            [(RECLAIM_AFTER_ANNOTATION.into(), "9".into())].into(),
        )
        .unwrap();
        let stale = DeletePrecondition {
            uid: listed.uid.clone(),
            resource_version: listed.resource_version.clone(),
            ..DeletePrecondition::default()
        };
        assert!(matches!(
            c.delete_pod("a", &stale),
            Err(PlatformError::Conflict { .. })
        ));
        let other_uid = DeletePrecondition {
            uid: Some("uid-other".into()),
            ..DeletePrecondition::default()
        };
        assert!(c.delete_pod("a", &other_uid).is_err());
        c.begin_call("a", 0).unwrap();
        assert_eq!(c.calls_in("a"), 1);
        let fresh = c.observed_pod("a").unwrap().clone();
        let current = DeletePrecondition {
            uid: fresh.uid.clone(),
            resource_version: fresh.resource_version.clone(),
            ..DeletePrecondition::default()
        };
        c.delete_pod("a", &current).unwrap();
        assert_eq!(c.audit().deleted_in_use.len(), 1);
        assert!(!c.end_call("a"));
        assert_eq!(c.begin_call("a", 3), Err(CallError::Gone));
        assert_eq!(c.audit().calls_to_missing.len(), 1);
    }

    #[test]
    fn selectors_and_scripted_failures() {
        let mut c = SimCluster::new("ns", UnixTime::EPOCH, 1).with_latency(StartLatency::Manual);
        c.create_pod(pod("a", Some("x"))).unwrap();
        c.create_pod(pod("b", None)).unwrap();
        assert_eq!(c.list_pods("fn.kpt.dev/image").unwrap().len(), 1);
        assert_eq!(c.list_pods("!fn.kpt.dev/image").unwrap().len(), 1);
        assert_eq!(c.list_pods("fn.kpt.dev/image=x").unwrap().len(), 1);
        assert_eq!(c.list_pods("").unwrap().len(), 2);
        assert!(c.list_pods("a in (b)").is_err());
        c.inject(Operation::ListPods, PlatformError::Forbidden("no".into()));
        assert_eq!(c.list_pods(""), Err(PlatformError::Forbidden("no".into())));
        assert_eq!(c.list_pods("").unwrap().len(), 2);
        assert_eq!(
            c.next_change(),
            None,
            "manual pods never start on their own"
        );
        c.set_pod_ready("a").unwrap();
        c.fail_pod("b").unwrap();
        assert_eq!(
            c.get_pod("b").unwrap().status.unwrap().phase.as_deref(),
            Some("Failed")
        );
    }

    #[test]
    fn random_latency_and_failures_replay_from_the_seed() {
        let run = |seed| {
            let mut c = SimCluster::new("ns", UnixTime::EPOCH, seed)
                .with_latency(StartLatency::LogNormal {
                    median: Duration::from_secs(5),
                    sigma: 0.5,
                })
                .with_failures(FailureRates {
                    create_error: 0.2,
                    never_ready: 0.1,
                    crash: 0.1,
                    ..FailureRates::default()
                });
            (0..50)
                .map(|i| c.create_pod(pod(&format!("p{i}"), None)).is_ok())
                .collect::<Vec<_>>()
        };
        assert_eq!(run(3), run(3));
        let oks = run(3).iter().filter(|ok| **ok).count();
        assert!((25..50).contains(&oks), "{oks}");
    }

    #[test]
    fn overloaded_wrappers_refuse_calls() {
        let mut c = SimCluster::new("ns", UnixTime::EPOCH, 1)
            .with_latency(StartLatency::Manual)
            .with_failures(FailureRates {
                unavailable: 1.0,
                unavailable_load: 2,
                ..FailureRates::default()
            });
        c.create_pod(pod("a", Some("a"))).unwrap();
        c.set_pod_ready("a").unwrap();
        c.begin_call("a", 0).unwrap();
        c.begin_call("a", 1).unwrap();
        assert_eq!(c.begin_call("a", 0), Err(CallError::Unavailable));
        assert_eq!(c.pods_in_use(), 1);
        assert!(c.end_call("a"));
        c.begin_call("a", 0).unwrap();
        assert!(c.end_call("a") && c.end_call("a"));
        assert_eq!(c.pods_in_use(), 0);
        c.begin_call("a", 0).unwrap();
        c.fail_pod("a").unwrap();
        assert_eq!(c.pods_in_use(), 0, "a failed pod carries no call");
    }

    #[test]
    fn secrets_and_config_maps() {
        let mut c = SimCluster::new("ns", UnixTime::EPOCH, 1);
        assert!(c.ensure_pull_secret("auth", b"{}").unwrap());
        assert!(!c.ensure_pull_secret("auth", b"{}").unwrap());
        assert!(c.ensure_pull_secret("auth", b"{\"a\":1}").unwrap());
        assert_eq!(c.pull_secret("auth"), Some(&b"{\"a\":1}"[..]));
        assert!(
            c.read_config_map("runner", "tpl")
                .unwrap_err()
                .is_not_found()
        );
        let v1 = c.put_config_map("runner", "tpl", BTreeMap::new());
        let v2 = c.put_config_map("runner", "tpl", BTreeMap::new());
        assert_ne!(v1, v2);
        assert_eq!(
            c.read_config_map("runner", "tpl").unwrap().resource_version,
            v2
        );
    }
}
