//! Property tests of the pod cache state machine on random interleavings
//! (proptest-state-machine), against the simulated platform.
//!
//! A small synchronous driver ([`World`]) carries out the machine's commands
//! on a [`SimCluster`] and feeds back what a real driver would: pod
//! outcomes, watch events (pod deleted/failed go to every replica), pod
//! lists for GC and adoption. Two tests: one replica, and two replicas
//! sharing one platform. Invariants (issue 4 §5) are checked after every
//! transition and at every command:
//! - every request gets exactly one reply, and none is ever lost (a request
//!   without a reply is on a waitlist);
//! - never more slots per image than its limit; never more load per slot than
//!   its bound;
//! - at most one creation per slot, and no two creations of the same pod name
//!   (the platform never answers AlreadyExists);
//! - a pod that failed or was deleted is never handed out;
//! - no pod is deleted while a replica uses it; GC never deletes a ready pod
//!   whose reclaim-after has not passed;
//! - each slot's load equals the requests counted on it (never negative) and
//!   is zero once every call has finished;
//! - reclaim-after is persisted at most once per half-TTL per pod and replica
//!   (and once more when the replica's settings change);
//!   persists land only when time next moves (never on the request path), and
//!   the invariants above hold although decisions meanwhile see old values;
//! - all of this while per-function settings change under the replicas (a
//!   FunctionConfig created or deleted, seen by each replica at its own time).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::Duration;

use krm_fn_runner::adapters::sim::{SimCluster, StartLatency};
use krm_fn_runner::domain::pod_cache::naming::is_valid_name;
use krm_fn_runner::domain::pod_cache::template::{
    PodBuild, TemplateOverrides, build_pod, build_service, default_pod_template,
    default_service_template, observe_pod, service_endpoint,
};
use krm_fn_runner::domain::pod_cache::{
    Command, FunctionSettings, IMAGE_LABEL, Input, ObservedPod, PodCache, PodCacheConfig,
    PodCacheConfigEntry, PodCachePolicy, RECLAIM_AFTER_ANNOTATION, RequestId, SlotId, UnixTime,
};
use krm_fn_runner::ports::PlatformError;
use proptest::prelude::*;
use proptest::sample::Index;
use proptest_state_machine::{ReferenceStateMachine, StateMachineTest, prop_state_machine};

const NS: &str = "porch-fn-system";
const TTL: Duration = Duration::from_secs(60);
const IMAGES: [&str; 3] = [
    "ghcr.io/kptdev/krm-functions-catalog/set-namespace:v0.4.5",
    "ghcr.io/kptdev/krm-functions-catalog/apply-setters:v0.2.2",
    "example.com/fns/my_fn@sha256:f930d9248001fa763799cc81cf2d89bbf83954fc65de0db20ab038a21784f323",
];

fn policy(token: &str) -> PodCachePolicy {
    let defaults = FunctionSettings {
        ttl: TTL,
        max_waitlist: 1,
        max_parallel_pods: 2,
        max_load_per_pod: 3,
        resources: None,
        ..FunctionSettings::default()
    };
    let config = PodCacheConfig::parse(
        format!(
            "- name: {}\n  maxWaitlistLength: 3\n  maxParallelPodsPerFunction: 1\n  maxLoadPerPod: 4\n",
            IMAGES[1]
        )
        .as_bytes(),
        "pod-cache-config.yaml",
    )
    .unwrap();
    let mut p = PodCachePolicy::new(defaults, token)
        .unwrap()
        .with_config(&config);
    p.pod_ready_timeout = Duration::from_secs(20);
    p
}

/// [`policy`], with (`configured`) or without an entry for `IMAGES[0]` as a
/// FunctionConfig would give it: its own source and overrides (so its pods
/// are built differently) and a longer TTL.
fn changed_policy(token: &str, configured: bool) -> PodCachePolicy {
    let mut p = policy(token);
    if configured {
        let overrides = TemplateOverrides {
            service_account_name: Some("fn-sa".into()),
            ..TemplateOverrides::default()
        };
        let entry = PodCacheConfigEntry {
            name: IMAGES[0].to_string(),
            ttl: Some(TTL * 2),
            overrides: Some(std::sync::Arc::new(overrides)),
            source: Some("FunctionConfig set-namespace".into()),
            ..PodCacheConfigEntry::default()
        };
        p.functions.insert(entry.name.clone(), entry);
    }
    p
}

/// One step of the random interleaving. `Index` values pick among whatever
/// exists when the step runs (requests, creations, pods), so every sequence
/// is valid and shrinks well.
#[derive(Debug, Clone)]
enum Step {
    Request { replica: usize, image: usize },
    Finish { replica: usize, pick: Index },
    Cancel { replica: usize, pick: Index },
    Ready { pick: Index },
    FailCreation { pick: Index },
    CrashPod { pick: Index },
    DeletePodExternally { pick: Index },
    Advance { millis: u64 },
    Gc { replica: usize },
    Adopt { replica: usize },
    TemplateChange { replica: usize },
    PolicyChange { replica: usize, configured: bool },
    WarmUp { replica: usize, image: usize },
    Shutdown { replica: usize },
}

fn steps(replicas: usize) -> BoxedStrategy<Step> {
    let r = 0..replicas;
    let img = 0..IMAGES.len();
    prop_oneof![
        12 => (r.clone(), img.clone()).prop_map(|(replica, image)| Step::Request { replica, image }),
        8 => (r.clone(), any::<Index>()).prop_map(|(replica, pick)| Step::Finish { replica, pick }),
        2 => (r.clone(), any::<Index>()).prop_map(|(replica, pick)| Step::Cancel { replica, pick }),
        6 => any::<Index>().prop_map(|pick| Step::Ready { pick }),
        2 => any::<Index>().prop_map(|pick| Step::FailCreation { pick }),
        1 => any::<Index>().prop_map(|pick| Step::CrashPod { pick }),
        1 => any::<Index>().prop_map(|pick| Step::DeletePodExternally { pick }),
        5 => (0..TTL.as_millis() as u64 / 2).prop_map(|millis| Step::Advance { millis }),
        3 => r.clone().prop_map(|replica| Step::Gc { replica }),
        1 => r.clone().prop_map(|replica| Step::Adopt { replica }),
        1 => r.clone().prop_map(|replica| Step::TemplateChange { replica }),
        1 => (r.clone(), any::<bool>()).prop_map(|(replica, configured)| Step::PolicyChange { replica, configured }),
        1 => (r.clone(), img).prop_map(|(replica, image)| Step::WarmUp { replica, image }),
        1 => r.prop_map(|replica| Step::Shutdown { replica }),
    ]
    .boxed()
}

/// The reference model only knows how many replicas there are: every
/// decision is checked against the invariants, not against a second
/// implementation of the policy.
struct OneReplica;
struct TwoReplicas;

impl ReferenceStateMachine for OneReplica {
    type State = usize;
    type Transition = Step;
    fn init_state() -> BoxedStrategy<usize> {
        Just(1).boxed()
    }
    fn transitions(state: &usize) -> BoxedStrategy<Step> {
        steps(*state)
    }
    fn apply(state: usize, _: &Step) -> usize {
        state
    }
}

impl ReferenceStateMachine for TwoReplicas {
    type State = usize;
    type Transition = Step;
    fn init_state() -> BoxedStrategy<usize> {
        Just(2).boxed()
    }
    fn transitions(state: &usize) -> BoxedStrategy<Step> {
        steps(*state)
    }
    fn apply(state: usize, _: &Step) -> usize {
        state
    }
}

#[derive(Debug, Default)]
struct Req {
    replica: usize,
    replies: u32,
    active: bool,
    pod: Option<String>,
}

struct Replica {
    cache: PodCache,
    version: u32,
}

/// The system under test: replicas, the simulated platform and a tiny
/// synchronous driver with the bookkeeping the invariants need.
struct World {
    sim: SimCluster,
    replicas: Vec<Replica>,
    now: UnixTime,
    latest_version: u32,
    next_request: u64,
    requests: BTreeMap<RequestId, Req>,
    creations: Vec<(usize, SlotId, String)>,
    seen_slots: HashSet<(usize, SlotId)>,
    created_names: HashSet<String>,
    persists: HashMap<(usize, String), UnixTime>,
    /// Reclaim-after patches issued but not yet applied: they land when time
    /// next moves, so decisions made meanwhile see the old annotation.
    unflushed: Vec<(String, UnixTime)>,
}

fn version_name(v: u32) -> String {
    format!("v{v}")
}

impl World {
    fn new(replicas: usize) -> Self {
        let now = UnixTime::from_secs(1_700_000_000);
        World {
            sim: SimCluster::new(NS, now, 42).with_latency(StartLatency::Manual),
            replicas: (0..replicas)
                .map(|i| Replica {
                    cache: PodCache::new(policy(&format!("r{i}")), version_name(1)),
                    version: 1,
                })
                .collect(),
            now,
            latest_version: 1,
            next_request: 1,
            requests: BTreeMap::new(),
            creations: Vec::new(),
            seen_slots: HashSet::new(),
            created_names: HashSet::new(),
            persists: HashMap::new(),
            unflushed: Vec::new(),
        }
    }

    fn usage(&self, pod: &str) -> usize {
        self.requests
            .values()
            .filter(|r| r.active && r.pod.as_deref() == Some(pod))
            .count()
    }

    fn phase(&self, pod: &str) -> Option<String> {
        self.sim
            .pods()
            .find(|p| p.metadata.name.as_deref() == Some(pod))
            .map(|p| {
                p.status
                    .as_ref()
                    .and_then(|s| s.phase.clone())
                    .unwrap_or_default()
            })
    }

    fn observed(&mut self) -> Vec<ObservedPod> {
        self.sim
            .list_pods(IMAGE_LABEL)
            .unwrap()
            .iter()
            .filter_map(observe_pod)
            .collect()
    }

    /// Feeds `input` to replica `r`, then carries out every command, and the
    /// watch events they cause, until the system is quiet.
    fn feed(&mut self, r: usize, input: Input, in_gc: bool) {
        let mut queue = vec![(r, input)];
        while let Some((r, input)) = queue.pop() {
            self.replicas[r].cache.handle(self.now, input);
            while let Some(cmd) = self.replicas[r].cache.poll_command() {
                self.execute(r, cmd, in_gc, &mut queue);
            }
        }
    }

    fn gone(&mut self, pod: &str, failed: bool, queue: &mut Vec<(usize, Input)>) {
        for r in 0..self.replicas.len() {
            let pod_name = pod.to_string();
            queue.push((r, Input::PodGone { pod_name, failed }));
        }
    }

    fn execute(&mut self, r: usize, cmd: Command, in_gc: bool, queue: &mut Vec<(usize, Input)>) {
        match cmd {
            Command::CreatePod(c) => {
                assert!(
                    self.seen_slots.insert((r, c.slot)),
                    "second creation for {}",
                    c.slot
                );
                assert!(
                    is_valid_name(&c.pod_name),
                    "invalid pod name {}",
                    c.pod_name
                );
                assert!(
                    self.created_names.insert(c.pod_name.clone()),
                    "pod name {} reused",
                    c.pod_name
                );
                assert!(
                    c.reclaim_after >= self.now + TTL,
                    "new pods get at least a TTL"
                );
                let entrypoint = vec!["/fn".to_string()];
                let overrides = TemplateOverrides::from_settings(&c.settings);
                let pod = build_pod(
                    &default_pod_template("wrapper:test"),
                    &PodBuild::for_creation(&c, NS, &entrypoint, &overrides, 6 << 20),
                )
                .unwrap();
                match self.sim.create_pod(pod) {
                    Ok(_) => {}
                    Err(PlatformError::AlreadyExists { name, .. }) => {
                        panic!("duplicate pod {name}")
                    }
                    Err(e) => panic!("unexpected platform error {e}"),
                }
                self.sim
                    .create_service(build_service(&default_service_template(), &c.pod_name, NS))
                    .expect("service names are unique too");
                self.creations.push((r, c.slot, c.pod_name));
            }
            Command::Reply { request, result } => {
                let req = self
                    .requests
                    .get_mut(&request)
                    .expect("reply to an issued request");
                assert_eq!(req.replica, r, "reply from the wrong replica");
                req.replies += 1;
                assert_eq!(req.replies, 1, "{request} answered twice");
                match result {
                    Ok(a) => {
                        let phase = self.phase(&a.pod_name);
                        assert_eq!(
                            phase.as_deref(),
                            Some("Running"),
                            "{} handed out while {phase:?}",
                            a.pod_name
                        );
                        assert_eq!(a.endpoint, service_endpoint(&a.pod_name, NS));
                        self.requests.get_mut(&request).unwrap().pod = Some(a.pod_name);
                    }
                    Err(_) => req.active = false,
                }
            }
            Command::DeletePod { pod_name } => {
                if let Some(phase) = self.phase(&pod_name).filter(|p| p != "Failed") {
                    assert_eq!(self.usage(&pod_name), 0, "{pod_name} deleted while in use");
                    if in_gc && phase == "Running" {
                        let pod = self.sim.get_pod(&pod_name).unwrap();
                        let annotations = pod.metadata.annotations.unwrap_or_default();
                        let reclaim =
                            UnixTime::parse_annotation(&annotations[RECLAIM_AFTER_ANNOTATION])
                                .unwrap();
                        assert!(
                            reclaim <= self.now,
                            "GC deleted {pod_name} before its reclaim-after"
                        );
                    }
                }
                if self.sim.delete_pod(&pod_name).is_ok() {
                    self.gone(&pod_name, false, queue);
                }
                let _ = self.sim.delete_service(&pod_name);
            }
            Command::PersistReclaimAfter {
                pod_name,
                reclaim_after,
            } => {
                assert!(reclaim_after > self.now + TTL, "persisted value is ahead");
                if let Some(prev) = self.persists.insert((r, pod_name.clone()), self.now) {
                    let gap = self.now.saturating_since(prev);
                    assert!(gap >= TTL / 2, "{pod_name} persisted twice within {gap:?}");
                }
                self.unflushed.push((pod_name, reclaim_after));
            }
        }
    }

    fn active_on(&self, r: usize) -> Vec<RequestId> {
        self.requests
            .iter()
            .filter(|(_, q)| q.replica == r && q.active)
            .map(|(id, _)| *id)
            .collect()
    }

    fn resolve_creation(&mut self, pick: Option<Index>, fail: bool) {
        if self.creations.is_empty() {
            return;
        }
        let at = pick.map_or(0, |p| p.index(self.creations.len()));
        let (r, slot, name) = self.creations.remove(at);
        let exists = self.phase(&name).is_some_and(|p| p == "Pending");
        let input = if fail || !exists {
            Input::PodFailed {
                slot,
                reason: "simulated creation failure".into(),
            }
        } else {
            self.sim.set_pod_ready(&name).unwrap();
            Input::PodReady {
                slot,
                endpoint: service_endpoint(&name, NS),
            }
        };
        self.feed(r, input, false);
    }

    fn pick_running(&self, pick: Index) -> Option<String> {
        let running: Vec<String> = self
            .sim
            .pods()
            .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
            .filter_map(|p| p.metadata.name.clone())
            .collect();
        (!running.is_empty()).then(|| running[pick.index(running.len())].clone())
    }

    fn flush_persists(&mut self) {
        for (pod_name, reclaim_after) in std::mem::take(&mut self.unflushed) {
            let patch = [(
                RECLAIM_AFTER_ANNOTATION.to_string(),
                reclaim_after.to_annotation(),
            )]
            .into();
            let _ = self.sim.patch_pod_annotations(&pod_name, patch);
        }
    }

    fn step(&mut self, step: Step) {
        match step {
            Step::Request { replica, image } => {
                let request = RequestId(self.next_request);
                self.next_request += 1;
                self.requests.insert(
                    request,
                    Req {
                        replica,
                        active: true,
                        ..Req::default()
                    },
                );
                let image = IMAGES[image].to_string();
                self.feed(replica, Input::Request { request, image }, false);
            }
            Step::Finish { replica, pick } => {
                let assigned: Vec<RequestId> = self
                    .active_on(replica)
                    .into_iter()
                    .filter(|id| self.requests[id].pod.is_some())
                    .collect();
                if !assigned.is_empty() {
                    let request = assigned[pick.index(assigned.len())];
                    self.requests.get_mut(&request).unwrap().active = false;
                    self.feed(replica, Input::CallFinished { request }, false);
                }
            }
            Step::Cancel { replica, pick } => {
                let active = self.active_on(replica);
                if !active.is_empty() {
                    let request = active[pick.index(active.len())];
                    let req = self.requests.get_mut(&request).unwrap();
                    if req.pod.is_some() {
                        req.active = false;
                    }
                    self.feed(replica, Input::Cancelled { request }, false);
                    assert!(
                        !self.requests[&request].active,
                        "a cancelled waiter gets its reply"
                    );
                }
            }
            Step::Ready { pick } => self.resolve_creation(Some(pick), false),
            Step::FailCreation { pick } => self.resolve_creation(Some(pick), true),
            Step::CrashPod { pick } => {
                if let Some(name) = self.pick_running(pick) {
                    self.sim.fail_pod(&name).unwrap();
                    let mut queue = Vec::new();
                    self.gone(&name, true, &mut queue);
                    for (r, input) in queue {
                        self.feed(r, input, false);
                    }
                }
            }
            Step::DeletePodExternally { pick } => {
                if let Some(name) = self.pick_running(pick) {
                    self.sim.delete_pod(&name).unwrap();
                    let mut queue = Vec::new();
                    self.gone(&name, false, &mut queue);
                    for (r, input) in queue {
                        self.feed(r, input, false);
                    }
                }
            }
            Step::Advance { millis } => {
                self.flush_persists();
                self.now = self.now + Duration::from_millis(millis);
                self.sim.advance_to(self.now);
                for r in 0..self.replicas.len() {
                    self.feed(r, Input::Tick, false);
                }
            }
            Step::Gc { replica } => {
                let observed = self.observed();
                self.feed(replica, Input::Gc { observed }, true);
            }
            Step::Adopt { replica } => {
                let observed = self.observed();
                self.feed(replica, Input::Adopt { observed }, false);
            }
            Step::TemplateChange { replica } => {
                if self.replicas[replica].version == self.latest_version {
                    self.latest_version += 1;
                }
                self.replicas[replica].version = self.latest_version;
                let version = version_name(self.latest_version);
                self.feed(replica, Input::TemplateChanged { version }, false);
            }
            Step::PolicyChange {
                replica,
                configured,
            } => {
                // A longer TTL may extend a pod's reclaim-after once at once.
                self.persists.retain(|(r, _), _| *r != replica);
                let policy = Box::new(changed_policy(&format!("r{replica}"), configured));
                self.feed(replica, Input::PolicyChanged { policy }, false);
            }
            Step::WarmUp { replica, image } => {
                let images = vec![IMAGES[image].to_string()];
                self.feed(replica, Input::WarmUp { images }, false);
            }
            Step::Shutdown { replica } => self.feed(replica, Input::Shutdown, false),
        }
    }

    fn check(&self) {
        for (r, replica) in self.replicas.iter().enumerate() {
            let cache = &replica.cache;
            let mut per_image: HashMap<&str, u32> = HashMap::new();
            let mut counted: HashMap<SlotId, u32> = HashMap::new();
            for (id, req) in self.requests.iter().filter(|(_, q)| q.replica == r) {
                let slot = cache.request_slot(*id);
                match (req.active, req.replies) {
                    (true, 0) => assert!(matches!(slot, Some((_, true))), "{id} is lost: {slot:?}"),
                    (true, _) => assert!(
                        matches!(slot, Some((_, false))),
                        "{id} not assigned: {slot:?}"
                    ),
                    (false, _) => assert_eq!(slot, None, "{id} released but still counted"),
                }
                if let Some((s, _)) = slot {
                    *counted.entry(s).or_default() += 1;
                }
            }
            for s in cache.slots() {
                let settings = cache.policy().settings_for(s.image);
                *per_image.entry(s.image).or_default() += 1;
                assert_eq!(
                    s.load,
                    counted.get(&s.id).copied().unwrap_or(0),
                    "load of {} is off",
                    s.id
                );
                assert!(
                    s.load <= settings.max_load_per_pod,
                    "{} over its load bound",
                    s.id
                );
            }
            for (image, n) in per_image {
                let limit = cache.policy().settings_for(image).max_parallel_pods;
                assert!(
                    n <= limit,
                    "replica {r}: {n} slots for {image}, limit {limit}"
                );
            }
        }
    }

    /// Ends every creation, checks that every request got its one reply,
    /// finishes every call and checks that all loads are back to zero.
    fn finish(mut self) {
        while !self.creations.is_empty() {
            self.resolve_creation(None, false);
            self.check();
        }
        for (id, req) in &self.requests {
            assert_eq!(req.replies, 1, "{id} never answered");
        }
        let active: Vec<(RequestId, usize)> = self
            .requests
            .iter()
            .filter(|(_, q)| q.active)
            .map(|(id, q)| (*id, q.replica))
            .collect();
        for (request, r) in active {
            self.requests.get_mut(&request).unwrap().active = false;
            self.feed(r, Input::CallFinished { request }, false);
        }
        self.check();
        for replica in &self.replicas {
            assert!(replica.cache.slots().all(|s| s.load == 0));
        }
    }
}

impl StateMachineTest for OneReplica {
    type SystemUnderTest = World;
    type Reference = OneReplica;
    fn init_test(replicas: &usize) -> World {
        World::new(*replicas)
    }
    fn apply(mut world: World, _: &usize, step: Step) -> World {
        world.step(step);
        world
    }
    fn check_invariants(world: &World, _: &usize) {
        world.check();
    }
    fn teardown(world: World, _: usize) {
        world.finish();
    }
}

impl StateMachineTest for TwoReplicas {
    type SystemUnderTest = World;
    type Reference = TwoReplicas;
    fn init_test(replicas: &usize) -> World {
        World::new(*replicas)
    }
    fn apply(mut world: World, _: &usize, step: Step) -> World {
        world.step(step);
        world
    }
    fn check_invariants(world: &World, _: &usize) {
        world.check();
    }
    fn teardown(world: World, _: usize) {
        world.finish();
    }
}

/// 1024 random interleavings per test; `PROPTEST_CASES=N` runs more.
fn config() -> ProptestConfig {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1024);
    ProptestConfig {
        cases,
        ..ProptestConfig::default()
    }
}

prop_state_machine! {
    #![proptest_config(config())]

    #[test]
    fn one_replica_keeps_its_invariants(sequential 1..120 => OneReplica);

    #[test]
    fn two_replicas_sharing_a_platform_keep_their_invariants(sequential 1..120 => TwoReplicas);
}
