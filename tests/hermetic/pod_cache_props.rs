//! Property tests of the pod cache state machine on random interleavings
//! (proptest-state-machine): N runner replicas sharing one simulated
//! cluster through the harness the policy simulator uses too
//! (`adapters::sim::Harness`), under faults: API latency and outages
//! (a replica partitioned from the API server), failing patches, listings
//! and deletions, slow (stale) listings, watch gaps that miss deletions,
//! lost creation answers (AlreadyExists on the retry), clock skew between
//! the replicas, wrappers refusing calls under load, crashed pods, pods
//! deleted by hand, replicas restarting and adopting each other's pods
//! mid-run, template and settings changes.
//!
//! Invariants, checked after every step and at the end:
//! - no pod is deleted while a call of any replica is in it;
//! - no call goes to a pod after its replica was told the pod is gone
//!   (a pod deleted behind its back may fail one call per replica, no more);
//! - GC never deletes a pod before its reclaim-after (by the deleting
//!   replica's clock);
//! - no pod name is created twice;
//! - every request gets exactly one reply, and none is ever lost (a
//!   request without a reply is on a waitlist);
//! - never more pods per image than its limit, never more load per pod
//!   than its bound; each slot's load equals the requests counted on it and
//!   is zero once every call has ended;
//! - reclaim-after is written at most once per half-TTL per pod and
//!   replica, except to retry a write that failed, or after a settings
//!   change;
//! - warm pool (`IMAGES[2]`: `minReady: 2`, `maxPods: 3`): never more
//!   than 3 pods of one pool in the cluster, whatever the replicas do;
//!   once faults stop and time passes, every running replica's pool has
//!   at least 2 ready pods, and never more than 3.
//!
//! The fault model stays within what the reuse margin covers: calls of
//! at most 1 s, API latency of at most 0.5 s, clock skew of at most 0.3 s,
//! against a margin of 5 s (TTL 20 s); outages and failure rates are
//! unbounded.

use std::collections::HashMap;
use std::time::Duration;

use krm_fn_runner::adapters::sim::{
    FailureRates, Harness, HarnessConfig, Logged, SimCluster, StartLatency,
};
use krm_fn_runner::domain::pod_cache::template::TemplateOverrides;
use krm_fn_runner::domain::pod_cache::{
    Command, FunctionSettings, Input, ObservedPhase, PodCacheConfig, PodCacheConfigEntry,
    PodCachePolicy, RequestId, SlotId, UnixTime, naming,
};
use proptest::prelude::*;
use proptest::sample::Index;
use proptest_state_machine::{ReferenceStateMachine, StateMachineTest, prop_state_machine};

const NS: &str = "porch-fn-system";
const TTL: Duration = Duration::from_secs(20);
const IMAGES: [&str; 3] = [
    "ghcr.io/kptdev/krm-functions-catalog/set-namespace:v0.4.5",
    "ghcr.io/kptdev/krm-functions-catalog/apply-setters:v0.2.2",
    "example.com/fns/my_fn@sha256:f930d9248001fa763799cc81cf2d89bbf83954fc65de0db20ab038a21784f323",
];

/// `IMAGES[2]`'s warm pool.
const POOL_MIN: usize = 2;
const POOL_MAX: usize = 3;

fn policy() -> PodCachePolicy {
    policy_with(None)
}

/// [`policy`]'s `--pod-cache-config` entries, and `extra` after them.
fn policy_with(extra: Option<PodCacheConfigEntry>) -> PodCachePolicy {
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
            "- name: {}\n  maxWaitlistLength: 3\n  maxParallelPodsPerFunction: 1\n  maxLoadPerPod: 4\n- name: {}\n  minReady: {POOL_MIN}\n  maxPods: {POOL_MAX}\n",
            IMAGES[1], IMAGES[2]
        )
        .as_bytes(),
        "pod-cache-config.yaml",
    )
    .unwrap();
    let mut config = config;
    config.entries.extend(extra);
    let mut p = PodCachePolicy::new(defaults, "r0")
        .unwrap()
        .with_config(&config);
    p.pod_ready_timeout = Duration::from_secs(5);
    p.scan_interval = Duration::from_secs(4);
    p.retry_backoff = Duration::from_millis(500);
    p.retry_backoff_max = Duration::from_secs(4);
    p
}

/// [`policy`], with (`configured`) or without an entry for `IMAGES[0]` as a
/// FunctionConfig would give it: its own source and overrides (so its pods
/// are built differently) and a longer TTL.
fn changed_policy(configured: bool) -> PodCachePolicy {
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
        return policy_with(Some(entry));
    }
    policy()
}

fn faults(level: u8) -> FailureRates {
    let p = f64::from(level) * 0.15;
    FailureRates {
        create_error: p / 2.0,
        create_lost: p / 2.0,
        never_ready: p / 4.0,
        crash: p / 4.0,
        patch_error: p,
        list_error: p,
        delete_error: p,
        unavailable: p,
        unavailable_load: 1,
    }
}

/// One step of the random interleaving. `Index` values pick among whatever
/// exists when the step runs (requests, pods), so every sequence is valid
/// and shrinks well.
#[derive(Debug, Clone)]
enum Step {
    Request {
        replica: usize,
        image: usize,
        run_ms: u64,
        deadline_ms: Option<u64>,
    },
    Cancel {
        replica: usize,
        pick: Index,
    },
    Advance {
        millis: u64,
    },
    Outage {
        replica: usize,
        millis: u64,
    },
    BreakWatch {
        replica: usize,
        millis: u64,
    },
    CrashPod {
        pick: Index,
    },
    VanishPod {
        pick: Index,
    },
    Faults {
        level: u8,
    },
    Adopt {
        replica: usize,
    },
    Restart {
        replica: usize,
    },
    TemplateChange {
        replica: usize,
    },
    PolicyChange {
        replica: usize,
        configured: bool,
    },
    WarmUp {
        replica: usize,
        image: usize,
    },
    Shutdown {
        replica: usize,
    },
}

fn steps(replicas: usize) -> BoxedStrategy<Step> {
    let r = 0..replicas;
    let img = 0..IMAGES.len();
    let deadline = prop_oneof![3 => Just(None), 1 => (500u64..8_000).prop_map(Some)];
    prop_oneof![
        14 => (r.clone(), img.clone(), 0u64..1_000, deadline).prop_map(|(replica, image, run_ms, deadline_ms)| Step::Request { replica, image, run_ms, deadline_ms }),
        1 => (r.clone(), any::<Index>()).prop_map(|(replica, pick)| Step::Cancel { replica, pick }),
        10 => (0..TTL.as_millis() as u64 / 2).prop_map(|millis| Step::Advance { millis }),
        2 => (r.clone(), 0u64..30_000).prop_map(|(replica, millis)| Step::Outage { replica, millis }),
        1 => (r.clone(), 0u64..15_000).prop_map(|(replica, millis)| Step::BreakWatch { replica, millis }),
        1 => any::<Index>().prop_map(|pick| Step::CrashPod { pick }),
        1 => any::<Index>().prop_map(|pick| Step::VanishPod { pick }),
        2 => (0u8..4).prop_map(|level| Step::Faults { level }),
        1 => r.clone().prop_map(|replica| Step::Adopt { replica }),
        1 => r.clone().prop_map(|replica| Step::Restart { replica }),
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
macro_rules! replicas {
    ($name:ident, $n:expr) => {
        struct $name;

        impl ReferenceStateMachine for $name {
            type State = usize;
            type Transition = Step;
            fn init_state() -> BoxedStrategy<usize> {
                Just($n).boxed()
            }
            fn transitions(state: &usize) -> BoxedStrategy<Step> {
                steps(*state)
            }
            fn apply(state: usize, _: &Step) -> usize {
                state
            }
        }

        impl StateMachineTest for $name {
            type SystemUnderTest = World;
            type Reference = $name;
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
    };
}

replicas!(OneReplica, 1);
replicas!(TwoReplicas, 2);
replicas!(ThreeReplicas, 3);

/// The system under test: the harness and the template versions handed out.
struct World {
    h: Harness,
    versions: Vec<u32>,
    latest_version: u32,
    /// Replicas shut down (until restarted).
    shut: Vec<bool>,
}

impl World {
    fn new(replicas: usize) -> Self {
        let now = UnixTime::from_secs(1_700_000_000);
        let cluster = SimCluster::new(NS, now, 42).with_latency(StartLatency::Uniform {
            min: Duration::from_millis(300),
            max: Duration::from_secs(3),
        });
        let skew = [0i64, 300, -300];
        let config = HarnessConfig {
            replicas,
            api_latency: Duration::from_millis(500),
            slow_list: 0.2,
            slow_list_latency: Duration::from_secs(8),
            watch_latency: Duration::from_millis(300),
            watch_gap: 0.01,
            watch_gap_length: Duration::from_secs(6),
            endpoint_latency: Duration::from_millis(100),
            skew_ms: skew[..replicas].to_vec(),
            probe_latency: Duration::ZERO,
        };
        let mut h = Harness::new(config, policy(), cluster);
        h.log = Some(Vec::new());
        // As `serve` starts: the warm pool minimums are warmed.
        for r in 0..replicas {
            let images = h.cache(r).policy().min_ready_images();
            h.feed(r, Input::WarmUp { images });
        }
        World {
            h,
            versions: vec![1; replicas],
            latest_version: 1,
            shut: vec![false; replicas],
        }
    }

    fn pick_pod(&self, pick: Index, running: bool) -> Option<String> {
        let pods: Vec<String> = self
            .h
            .observed()
            .into_iter()
            .filter(|o| !running || matches!(o.phase, ObservedPhase::Ready { .. }))
            .map(|o| o.name.clone())
            .collect();
        (!pods.is_empty()).then(|| pods[pick.index(pods.len())].clone())
    }

    fn step(&mut self, step: Step) {
        let h = &mut self.h;
        match step {
            Step::Request {
                replica,
                image,
                run_ms,
                deadline_ms,
            } => {
                h.submit(
                    replica,
                    IMAGES[image],
                    Duration::from_millis(run_ms),
                    deadline_ms.map(Duration::from_millis),
                );
            }
            Step::Cancel { replica, pick } => {
                let mut held: Vec<RequestId> = h
                    .requests()
                    .filter(|((r, _), q)| *r == replica && q.held)
                    .map(|((_, id), _)| *id)
                    .collect();
                held.sort();
                if !held.is_empty() {
                    h.cancel(replica, held[pick.index(held.len())]);
                }
            }
            Step::Advance { millis } => {
                let t = h.now() + Duration::from_millis(millis);
                h.run_until(t);
            }
            Step::Outage { replica, millis } => {
                let until = h.now() + Duration::from_millis(millis);
                h.set_outage(replica, until);
            }
            Step::BreakWatch { replica, millis } => {
                h.break_watch(replica, Duration::from_millis(millis));
            }
            Step::CrashPod { pick } => {
                if let Some(name) = self.pick_pod(pick, true) {
                    self.h.crash(&name);
                }
            }
            Step::VanishPod { pick } => {
                if let Some(name) = self.pick_pod(pick, false) {
                    self.h.vanish(&name);
                }
            }
            Step::Faults { level } => h.cluster_mut().set_failures(faults(level)),
            Step::Adopt { replica } => {
                let observed = h.observed();
                h.feed(replica, Input::Adopt { observed });
            }
            Step::Restart { replica } => {
                self.shut[replica] = false;
                h.restart(replica);
            }
            Step::TemplateChange { replica } => {
                if self.versions[replica] == self.latest_version {
                    self.latest_version += 1;
                }
                self.versions[replica] = self.latest_version;
                let version = format!("v{}", self.latest_version);
                h.feed(replica, Input::TemplateChanged { version });
            }
            Step::PolicyChange {
                replica,
                configured,
            } => {
                let policy = Box::new(changed_policy(configured));
                h.feed(replica, Input::PolicyChanged { policy });
            }
            Step::WarmUp { replica, image } => {
                let images = vec![IMAGES[image].to_string()];
                h.feed(replica, Input::WarmUp { images });
            }
            Step::Shutdown { replica } => {
                self.shut[replica] = true;
                h.feed(replica, Input::Shutdown);
            }
        }
    }

    /// The last entries of the harness log, for failure messages.
    fn recent(&self) -> String {
        let log = self.h.log.as_deref().unwrap_or_default();
        log[log.len().saturating_sub(
            std::env::var("RECENT")
                .ok()
                .and_then(|s| s.parse().ok())
                .unwrap_or(60),
        )..]
            .iter()
            .map(|e| format!("{e:?}"))
            .collect::<Vec<_>>()
            .join("\n")
    }

    fn check(&self) {
        let h = &self.h;
        let violations = h.violations();
        assert!(
            violations.is_empty(),
            "{violations:#?}\nrecent inputs and commands:\n{}",
            self.recent()
        );
        for r in 0..h.replicas() {
            let cache = h.cache(r);
            let mut counted: HashMap<SlotId, u32> = HashMap::new();
            for ((rr, id), q) in h.requests() {
                if *rr != r {
                    continue;
                }
                let slot = cache.request_slot(*id);
                match (q.held, q.replies) {
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
                assert_eq!(
                    s.load,
                    counted.get(&s.id).copied().unwrap_or(0),
                    "replica {r}: load of {} is off",
                    s.id
                );
                assert!(
                    s.load <= settings.max_load_per_pod,
                    "{} over its load bound",
                    s.id
                );
            }
            for image in IMAGES {
                let n = cache.slots_for(image).count() as u32;
                let limit = cache.policy().settings_for(image).max_parallel_pods;
                assert!(
                    n <= limit,
                    "replica {r}: {n} slots for {image}, limit {limit}"
                );
            }
        }
        self.check_persists();
        self.check_pool_bound();
    }

    /// The pool's pods in the cluster, by pool (the name without its
    /// index): never more than `maxPods` of one pool.
    fn pools(
        &self,
    ) -> HashMap<String, Vec<std::sync::Arc<krm_fn_runner::domain::pod_cache::ObservedPod>>> {
        let mut pools: HashMap<String, Vec<_>> = HashMap::new();
        for o in self.h.observed() {
            if o.image != IMAGES[2] {
                continue;
            }
            assert!(
                naming::is_pool_name(&o.name),
                "{} is not a pool name",
                o.name
            );
            let (pool, _) = o.name.rsplit_once('-').expect("indexed");
            pools.entry(pool.to_string()).or_default().push(o);
        }
        pools
    }

    fn check_pool_bound(&self) {
        for (pool, pods) in self.pools() {
            assert!(
                pods.len() <= POOL_MAX,
                "{} pods of pool {pool}: {:?}\nrecent inputs and commands:\n{}",
                pods.len(),
                pods.iter().map(|o| &o.name).collect::<Vec<_>>(),
                self.recent()
            );
        }
    }

    /// Once faults stop and two minutes pass, every running replica's pool
    /// (the names of its template and settings versions) has at least
    /// `minReady` ready pods.
    fn check_pool_minimum(&mut self) {
        let t = self.h.now() + Duration::from_secs(120);
        self.h.run_until(t);
        let pools = self.pools();
        for r in 0..self.h.replicas() {
            if self.shut[r] {
                continue;
            }
            let cache = self.h.cache(r);
            let pod_version = cache.policy().settings_for(IMAGES[2]).pod_version();
            let key = naming::pool_key(cache.template_version(), pod_version.as_deref());
            let name = naming::pool_pod_name(IMAGES[2], &key, 0);
            let (pool, _) = name.rsplit_once('-').expect("indexed");
            let ready = pools
                .get(pool)
                .into_iter()
                .flatten()
                .filter(|o| matches!(o.phase, ObservedPhase::Ready { .. }))
                .count();
            assert!(
                ready >= POOL_MIN,
                "replica {r}: {ready} ready pods in pool {pool} after recovery: {:?}\nrecent inputs and commands:\n{}",
                pools.get(pool),
                self.recent()
            );
        }
    }

    /// Reclaim-after is written at most once per half-TTL per pod and
    /// replica, unless the previous write failed or the settings changed.
    fn check_persists(&self) {
        let log = self.h.log.as_ref().expect("logging");
        // (replica, pod) -> (time of the last write, whether it may be
        // followed early).
        let mut last: HashMap<(usize, String), (UnixTime, bool)> = HashMap::new();
        let mut generation = vec![0usize; self.h.replicas()];
        for entry in log {
            match entry {
                Logged::Input(
                    r,
                    _,
                    Input::Persisted {
                        pod_name, result, ..
                    },
                ) if result.is_err() => {
                    if let Some(l) = last.get_mut(&(*r, pod_name.clone())) {
                        l.1 = true;
                    }
                }
                Logged::Input(r, _, Input::PolicyChanged { .. }) => {
                    last.retain(|(rr, _), _| rr != r);
                }
                // A pool name may come back as a new pod, and a pod
                // forgotten may be claimed again as a new slot.
                Logged::Input(r, _, Input::PodDeleted { pod_name })
                | Logged::Command(r, _, Command::DeletePod { pod_name, .. })
                | Logged::Command(r, _, Command::Forget { pod_name }) => {
                    last.remove(&(*r, pod_name.clone()));
                }
                Logged::Command(r, _, Command::CreatePod(c)) => {
                    last.remove(&(*r, c.pod_name.clone()));
                }
                Logged::Input(r, _, Input::Adopt { .. }) => {
                    generation[*r] += 1;
                    last.retain(|(rr, _), _| rr != r);
                }
                Logged::Command(
                    r,
                    t,
                    Command::PersistReclaimAfter {
                        pod_name,
                        reclaim_after,
                        ..
                    },
                ) => {
                    assert!(
                        *reclaim_after > *t + TTL,
                        "replica {r}: {pod_name} extended to {reclaim_after} at {t}"
                    );
                    if let Some((prev, early_ok)) = last.insert((*r, pod_name.clone()), (*t, false))
                    {
                        let gap = t.saturating_since(prev);
                        assert!(
                            early_ok || gap >= TTL / 2,
                            "replica {r}: {pod_name} written twice within {gap:?}"
                        );
                    }
                }
                _ => {}
            }
        }
    }

    /// Lets every call end and every creation resolve, then checks that
    /// every request got its one reply and every load is back to zero.
    fn finish(mut self) {
        self.h.cluster_mut().set_failures(FailureRates::default());
        for r in 0..self.h.replicas() {
            self.h.set_outage(r, self.h.now());
        }
        let limit = self.h.now() + Duration::from_secs(3600);
        assert!(self.h.drain(limit), "the system never settles");
        self.check();
        let quiet = self.h.check_quiet();
        assert!(quiet.is_empty(), "{quiet:#?}");
        self.check_pool_minimum();
        self.check();
    }
}

/// 512 random interleavings per test; `PROPTEST_CASES=N` runs more.
fn config() -> ProptestConfig {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(512);
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

    #[test]
    fn three_replicas_under_faults_keep_their_invariants(sequential 1..150 => ThreeReplicas);
}
