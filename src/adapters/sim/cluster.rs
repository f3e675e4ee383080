//! The simulated cluster: a plain struct stepped with virtual time.

use std::collections::{BTreeMap, VecDeque};
use std::time::Duration;

use k8s_openapi::api::core::v1::{Pod, PodCondition, PodStatus, Service};

use crate::domain::pod_cache::UnixTime;
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
    /// A created pod stays `Pending` forever (bad image, no capacity).
    pub never_ready: f64,
    /// A created pod ends in phase `Failed` instead of becoming ready.
    pub crash: f64,
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
    /// Most pods alive at once.
    pub peak_pods: usize,
    /// Sum over deleted pods of their lifetime, plus live pods up to now (cost).
    pub pod_seconds: f64,
}

#[derive(Debug)]
struct SimPod {
    pod: Pod,
    created_at: UnixTime,
    ready_at: Option<UnixTime>,
    crashes: bool,
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
/// secrets, with pods that start after a sampled latency of virtual time.
///
/// It is synchronous: a simulator or property test calls its methods and
/// [`advance_to`](Self::advance_to) directly; [`SimPlatform`](super::SimPlatform)
/// wraps it behind the async [`PodPlatform`](crate::ports::PodPlatform) port.
/// Pod changes are queued as [`PodEvent`]s, drained with
/// [`drain_events`](Self::drain_events).
#[derive(Debug)]
pub struct SimCluster {
    namespace: String,
    now: UnixTime,
    pods: BTreeMap<String, SimPod>,
    services: BTreeMap<String, Service>,
    config_maps: BTreeMap<(String, String), ConfigMapData>,
    secrets: BTreeMap<String, Vec<u8>>,
    latency: StartLatency,
    failures: FailureRates,
    scripted: VecDeque<(Operation, PlatformError)>,
    rng: SplitMix64,
    events: Vec<PodEvent>,
    next_id: u64,
    stats: SimStats,
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
            failures: FailureRates::default(),
            scripted: VecDeque::new(),
            rng: SplitMix64(seed),
            events: Vec::new(),
            next_id: 1,
            stats: SimStats::default(),
        }
    }

    /// Sets the pod start latency distribution.
    pub fn with_latency(mut self, latency: StartLatency) -> Self {
        self.latency = latency;
        self
    }

    /// Sets the random failure rates.
    pub fn with_failures(mut self, failures: FailureRates) -> Self {
        self.failures = failures;
        self
    }

    /// The namespace pods live in.
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// The current virtual time.
    pub fn now(&self) -> UnixTime {
        self.now
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

    /// Makes the next call of `op` fail with `error` (queued in order).
    pub fn inject(&mut self, op: Operation, error: PlatformError) {
        self.scripted.push_back((op, error));
    }

    fn scripted(&mut self, op: Operation) -> Result<(), PlatformError> {
        match self.scripted.iter().position(|(o, _)| *o == op) {
            Some(i) => Err(self.scripted.remove(i).expect("index found").1),
            None => Ok(()),
        }
    }

    /// Moves virtual time forward to `now` (never backwards); pods whose
    /// start latency has elapsed become ready, or fail if drawn to crash.
    pub fn advance_to(&mut self, now: UnixTime) {
        self.now = self.now.max(now);
        let due: Vec<String> = self
            .pods
            .iter()
            .filter(|(_, p)| p.ready_at.is_some_and(|t| t <= self.now))
            .map(|(n, _)| n.clone())
            .collect();
        for name in due {
            let crashes = self.pods[&name].crashes;
            if crashes {
                self.set_phase(&name, "Failed", false);
            } else {
                self.set_phase(&name, "Running", true);
            }
        }
    }

    /// The earliest time a pending pod will change on its own, if any.
    pub fn next_change(&self) -> Option<UnixTime> {
        self.pods.values().filter_map(|p| p.ready_at).min()
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

    fn set_phase(&mut self, name: &str, phase: &str, ready: bool) {
        let ip = format!(
            "10.{}.{}.{}",
            (self.next_id >> 16) & 0xff,
            (self.next_id >> 8) & 0xff,
            self.next_id & 0xff
        );
        self.next_id += 1;
        let Some(p) = self.pods.get_mut(name) else {
            return;
        };
        p.ready_at = None;
        p.pod.status = Some(PodStatus {
            phase: Some(phase.to_string()),
            pod_ip: ready.then_some(ip),
            conditions: Some(vec![PodCondition {
                type_: "Ready".to_string(),
                status: if ready { "True" } else { "False" }.to_string(),
                ..PodCondition::default()
            }]),
            ..PodStatus::default()
        });
        self.events.push(PodEvent::Applied(p.pod.clone()));
    }

    /// Makes pod `name` ready now (for [`StartLatency::Manual`]).
    /// Errors: [`PlatformError::NotFound`].
    pub fn set_pod_ready(&mut self, name: &str) -> Result<(), PlatformError> {
        self.pod_ref(name)?;
        self.set_phase(name, "Running", true);
        Ok(())
    }

    /// Puts pod `name` in phase `Failed` now (a crash, an eviction).
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

    /// Every pod, by name.
    pub fn pods(&self) -> impl Iterator<Item = &Pod> + '_ {
        self.pods.values().map(|p| &p.pod)
    }

    /// Pod changes since the last drain, in order.
    pub fn drain_events(&mut self) -> Vec<PodEvent> {
        std::mem::take(&mut self.events)
    }

    /// Creates `pod` in phase `Pending`; it becomes ready after a sampled
    /// start latency (or never, or crashes, per the failure rates).
    ///
    /// Errors: scripted or random failures; [`PlatformError::Invalid`] without
    /// a name; [`PlatformError::AlreadyExists`] if the name is taken.
    pub fn create_pod(&mut self, mut pod: Pod) -> Result<Pod, PlatformError> {
        self.scripted(Operation::CreatePod)?;
        let name = pod
            .metadata
            .name
            .clone()
            .ok_or_else(|| PlatformError::Invalid("pod has no metadata.name".into()))?;
        if self.pods.contains_key(&name) {
            self.stats.already_exists += 1;
            return Err(PlatformError::AlreadyExists { kind: "Pod", name });
        }
        if self.rng.chance(self.failures.create_error) {
            return Err(PlatformError::Transient(format!(
                "simulated failure creating pod {name}"
            )));
        }
        pod.metadata.namespace = Some(self.namespace.clone());
        pod.metadata.uid = Some(format!("uid-{}", self.next_id));
        pod.metadata.resource_version = Some(self.next_id.to_string());
        self.next_id += 1;
        pod.status = Some(PodStatus {
            phase: Some("Pending".to_string()),
            ..PodStatus::default()
        });
        let stuck = self.rng.chance(self.failures.never_ready);
        let crashes = self.rng.chance(self.failures.crash);
        let ready_at = self
            .sample_latency()
            .filter(|_| !stuck)
            .map(|d| self.now + d);
        self.events.push(PodEvent::Applied(pod.clone()));
        self.pods.insert(
            name,
            SimPod {
                pod: pod.clone(),
                created_at: self.now,
                ready_at,
                crashes,
            },
        );
        self.stats.pods_created += 1;
        self.stats.peak_pods = self.stats.peak_pods.max(self.pods.len());
        Ok(pod)
    }

    /// Reads pod `name`. Errors: [`PlatformError::NotFound`], scripted failures.
    pub fn get_pod(&mut self, name: &str) -> Result<Pod, PlatformError> {
        self.scripted(Operation::GetPod)?;
        self.pod_ref(name).map(|p| p.pod.clone())
    }

    /// Lists pods matching `label_selector` (`k=v`, `k==v`, `k!=v`, `k`,
    /// `!k`, comma-separated; empty matches all). Errors: scripted failures,
    /// [`PlatformError::Invalid`] for an unsupported selector.
    pub fn list_pods(&mut self, label_selector: &str) -> Result<Vec<Pod>, PlatformError> {
        self.scripted(Operation::ListPods)?;
        let selector = Selector::parse(label_selector)?;
        Ok(self
            .pods
            .values()
            .filter(|p| selector.matches(&p.pod))
            .map(|p| p.pod.clone())
            .collect())
    }

    /// Deletes pod `name` at once (no grace period in the simulation).
    /// Errors: [`PlatformError::NotFound`], scripted failures.
    pub fn delete_pod(&mut self, name: &str) -> Result<(), PlatformError> {
        self.scripted(Operation::DeletePod)?;
        self.pod_ref(name)?;
        let p = self.pods.remove(name).expect("checked above");
        self.stats.pods_deleted += 1;
        self.stats.pod_seconds += self.now.saturating_since(p.created_at).as_secs_f64();
        self.events.push(PodEvent::Deleted(p.pod));
        Ok(())
    }

    /// Merge-patches pod `name`'s annotations.
    /// Errors: [`PlatformError::NotFound`], scripted failures.
    pub fn patch_pod_annotations(
        &mut self,
        name: &str,
        annotations: BTreeMap<String, String>,
    ) -> Result<(), PlatformError> {
        self.scripted(Operation::PatchPod)?;
        self.pod_ref(name)?;
        let p = self.pods.get_mut(name).expect("checked above");
        p.pod
            .metadata
            .annotations
            .get_or_insert_with(BTreeMap::new)
            .extend(annotations);
        self.events.push(PodEvent::Applied(p.pod.clone()));
        Ok(())
    }

    /// Creates `service`. Errors: [`PlatformError::AlreadyExists`],
    /// [`PlatformError::Invalid`] without a name, scripted failures.
    pub fn create_service(&mut self, mut service: Service) -> Result<Service, PlatformError> {
        self.scripted(Operation::CreateService)?;
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
        self.services.insert(name, service.clone());
        Ok(service)
    }

    /// Reads service `name`. Errors: [`PlatformError::NotFound`], scripted failures.
    pub fn get_service(&mut self, name: &str) -> Result<Service, PlatformError> {
        self.scripted(Operation::GetService)?;
        self.services
            .get(name)
            .cloned()
            .ok_or_else(|| PlatformError::NotFound {
                kind: "Service",
                name: name.to_string(),
            })
    }

    /// Deletes service `name`. Errors: [`PlatformError::NotFound`], scripted failures.
    pub fn delete_service(&mut self, name: &str) -> Result<(), PlatformError> {
        self.scripted(Operation::DeleteService)?;
        self.services
            .remove(name)
            .map(|_| ())
            .ok_or_else(|| PlatformError::NotFound {
                kind: "Service",
                name: name.to_string(),
            })
    }

    /// Services by name.
    pub fn services(&self) -> impl Iterator<Item = &Service> + '_ {
        self.services.values()
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
        self.scripted(Operation::ReadConfigMap)?;
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
        self.scripted(Operation::EnsureSecret)?;
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
        let events = c.drain_events();
        assert_eq!(events.len(), 2);
        c.delete_pod("a").unwrap();
        assert!(c.delete_pod("a").unwrap_err().is_not_found());
        let s = c.stats();
        assert_eq!((s.pods_created, s.pods_deleted, s.peak_pods), (1, 1, 1));
        assert!((s.pod_seconds - 2.0).abs() < 1e-9);
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
