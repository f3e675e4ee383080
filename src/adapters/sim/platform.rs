//! The async `PodPlatform` over a shared [`SimCluster`].
//!
//! Two ways to run it:
//! - on explicit virtual time ([`SimPlatform::new`]): time moves only
//!   through [`SimPlatform::advance_to`]; every call completes at once;
//! - on a [`Clock`] ([`SimPlatform::with_clock`]), typically a
//!   [`TokioClock`] on tokio's paused time: every call first brings the
//!   cluster to the clock's time, API calls take their latency as tokio
//!   sleeps, and a background task ([`SimPlatform::spawn_kubelet`]) starts
//!   pods and ends watch gaps when their time comes. The real pod-runtime
//!   driver runs on it exactly as on Kubernetes.
//!
//! Faults: the cluster's random and scripted failures, plus, per client (a
//! runner replica's handle, [`SimPlatform::for_client`]), API outages that
//! fail fast or hang (a stopped API server, a partition), and watch gaps
//! that miss events and end with a re-list.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use async_trait::async_trait;
use k8s_openapi::api::core::v1::{Pod, Service};
use tokio::sync::Notify;
use tokio::sync::mpsc::{UnboundedSender, unbounded_channel};
use tokio_stream::wrappers::UnboundedReceiverStream;

use super::cluster::{Selector, SimCluster};
use crate::domain::pod_cache::{DeletePrecondition, ObservedPhase, UnixTime};
use crate::ports::{
    Clock, ConfigMapData, PlatformError, PodEvent, PodEventStream, PodPlatform, ServiceEndpoint,
};

/// A clock on tokio's time: `origin` at the moment it is made, advancing
/// with [`tokio::time::Instant`] (so with tokio's paused time in tests),
/// shifted by `skew` (a replica whose clock runs ahead or behind).
#[derive(Debug, Clone)]
pub struct TokioClock {
    origin: UnixTime,
    start: tokio::time::Instant,
    ahead: Duration,
    behind: Duration,
}

impl TokioClock {
    /// A clock reading `origin` now.
    pub fn new(origin: UnixTime) -> Self {
        Self {
            origin,
            start: tokio::time::Instant::now(),
            ahead: Duration::ZERO,
            behind: Duration::ZERO,
        }
    }

    /// The same clock running `ahead` in front of it.
    pub fn ahead(&self, ahead: Duration) -> Self {
        Self {
            ahead,
            behind: Duration::ZERO,
            ..self.clone()
        }
    }

    /// The same clock running `behind` it.
    pub fn behind(&self, behind: Duration) -> Self {
        Self {
            behind,
            ahead: Duration::ZERO,
            ..self.clone()
        }
    }

    /// The tokio instant at which this clock reads `t`.
    pub fn instant_at(&self, t: UnixTime) -> tokio::time::Instant {
        let unskewed = (t + self.behind).saturating_sub(self.ahead);
        self.start + unskewed.saturating_since(self.origin)
    }
}

impl Clock for TokioClock {
    fn now(&self) -> UnixTime {
        (self.origin + self.start.elapsed() + self.ahead).saturating_sub(self.behind)
    }
}

/// How a client's API outage behaves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outage {
    /// Calls fail at once with a transient error (connection refused).
    Failing,
    /// Calls hang until the outage ends, then proceed (a stopped API
    /// server: SIGSTOP, then SIGCONT).
    Hanging,
}

struct Watcher {
    selector: Selector,
    tx: UnboundedSender<PodEvent>,
    /// Until when it misses events (then it lists anew).
    gap_until: Option<UnixTime>,
}

struct Inner {
    cluster: SimCluster,
    watchers: Vec<Watcher>,
    clock: Option<Arc<dyn Clock>>,
    tokio_clock: Option<TokioClock>,
    latency: Duration,
    outages: BTreeMap<Option<usize>, (UnixTime, Outage)>,
}

impl Inner {
    /// Brings the cluster to the clock's time, ends watch gaps that are
    /// over, and hands the cluster's queued pod events to every matching
    /// watcher that is not in a gap.
    fn publish(&mut self) {
        if let Some(clock) = &self.clock {
            let now = clock.now();
            self.cluster.advance_to(now);
        }
        let now = self.cluster.now();
        let events = self.cluster.drain_events();
        self.watchers.retain(|w| !w.tx.is_closed());
        for w in &mut self.watchers {
            if w.gap_until.is_some_and(|t| t <= now) {
                w.gap_until = None;
                let pods = self
                    .cluster
                    .pods()
                    .filter(|p| w.selector.matches(p))
                    .cloned()
                    .collect();
                let _ = w.tx.send(PodEvent::Listed(pods));
            }
        }
        for event in events {
            let Some(pod_event) = event.pod_event() else {
                continue;
            };
            let pod = match &pod_event {
                PodEvent::Applied(p) | PodEvent::Deleted(p) => p,
                _ => continue,
            };
            for w in &self.watchers {
                if w.gap_until.is_none() && w.selector.matches(pod) {
                    let _ = w.tx.send(pod_event.clone());
                }
            }
        }
    }

    /// The next time something happens on its own: a pod starting, a watch
    /// gap ending.
    fn next_change(&mut self) -> Option<UnixTime> {
        let gaps = self.watchers.iter().filter_map(|w| w.gap_until).min();
        [self.cluster.next_change(), gaps]
            .into_iter()
            .flatten()
            .min()
    }
}

/// A [`PodPlatform`] backed by a [`SimCluster`] shared between clones (two
/// runner replicas can share one; give each its own
/// [`for_client`](Self::for_client) handle for per-replica outages).
#[derive(Clone)]
pub struct SimPlatform {
    inner: Arc<Mutex<Inner>>,
    wake: Arc<Notify>,
    client: usize,
}

impl std::fmt::Debug for SimPlatform {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SimPlatform")
            .field("client", &self.client)
            .finish_non_exhaustive()
    }
}

impl SimPlatform {
    /// Wraps `cluster`, on explicit virtual time.
    pub fn new(cluster: SimCluster) -> Self {
        Self {
            inner: Arc::new(Mutex::new(Inner {
                cluster,
                watchers: Vec::new(),
                clock: None,
                tokio_clock: None,
                latency: Duration::ZERO,
                outages: BTreeMap::new(),
            })),
            wake: Arc::new(Notify::new()),
            client: 0,
        }
    }

    /// Wraps `cluster` on `clock`: API calls take `latency` (half before
    /// the cluster acts, half after); call [`spawn_kubelet`](Self::spawn_kubelet)
    /// so that pods start and watch gaps end on time.
    pub fn with_clock(cluster: SimCluster, clock: TokioClock, latency: Duration) -> Self {
        let platform = Self::new(cluster);
        {
            let mut inner = platform.lock();
            inner.clock = Some(Arc::new(clock.clone()));
            inner.tokio_clock = Some(clock);
            inner.latency = latency;
        }
        platform
    }

    /// A handle on the same cluster for client `client` (a runner replica),
    /// subject to that client's outages.
    pub fn for_client(&self, client: usize) -> Self {
        Self {
            client,
            ..self.clone()
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic in another holder cannot leave the cluster half-updated in
        // a way that matters to a simulation; keep going.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Runs `f` on the cluster (inspect it, inject failures, fail pods), then
    /// delivers the pod events it caused to the watchers.
    pub fn with_cluster<R>(&self, f: impl FnOnce(&mut SimCluster) -> R) -> R {
        let mut inner = self.lock();
        inner.publish();
        let out = f(&mut inner.cluster);
        inner.publish();
        drop(inner);
        self.wake.notify_one();
        out
    }

    /// Moves virtual time to `now` (see [`SimCluster::advance_to`]).
    pub fn advance_to(&self, now: UnixTime) {
        self.with_cluster(|c| c.advance_to(now));
    }

    /// The current virtual time.
    pub fn now(&self) -> UnixTime {
        let mut inner = self.lock();
        inner.publish();
        inner.cluster.now()
    }

    /// Makes API calls of `client` (`None`: every client) fail or hang, as
    /// `outage` says, until `until`.
    pub fn set_outage(&self, client: Option<usize>, until: UnixTime, outage: Outage) {
        self.lock().outages.insert(client, (until, outage));
    }

    /// Every current pod watch misses events until `until`: each reports
    /// [`PodEvent::Lost`] now and a [`PodEvent::Listed`] when the gap ends.
    pub fn break_watches(&self, until: UnixTime) {
        let mut inner = self.lock();
        inner.publish();
        for w in &mut inner.watchers {
            if w.gap_until.is_none() {
                let _ = w.tx.send(PodEvent::Lost);
            }
            w.gap_until = Some(until);
        }
        drop(inner);
        self.wake.notify_one();
    }

    /// Spawns the task that starts pods and ends watch gaps when their
    /// time comes on the clock (see [`with_clock`](Self::with_clock)). It
    /// ends when every handle on the platform is gone.
    pub fn spawn_kubelet(&self) {
        let weak = Arc::downgrade(&self.inner);
        let wake = self.wake.clone();
        tokio::spawn(async move {
            loop {
                let Some(inner) = weak.upgrade() else {
                    return;
                };
                let next = {
                    let mut g = inner.lock().unwrap_or_else(|e| e.into_inner());
                    g.publish();
                    let clock = g.tokio_clock.clone();
                    g.next_change().and_then(|t| clock.map(|c| c.instant_at(t)))
                };
                drop(inner);
                match next {
                    Some(at) => {
                        tokio::select! {
                            () = tokio::time::sleep_until(at) => {}
                            () = wake.notified() => {}
                        }
                    }
                    None => {
                        // Idle: check now and then that the platform is
                        // still in use.
                        tokio::select! {
                            () = tokio::time::sleep(Duration::from_secs(3600)) => {}
                            () = wake.notified() => {}
                        }
                    }
                }
            }
        });
    }

    /// One API call: the client's outage, the latency, then `f` on the
    /// cluster at the time it arrives.
    async fn call<R>(
        &self,
        f: impl FnOnce(&mut SimCluster) -> Result<R, PlatformError>,
    ) -> Result<R, PlatformError> {
        let (latency, outage, clock) = {
            let mut inner = self.lock();
            inner.publish();
            let now = inner.cluster.now();
            let outage = [Some(self.client), None]
                .iter()
                .filter_map(|k| inner.outages.get(k).copied())
                .filter(|(until, _)| *until > now)
                .max_by_key(|(until, _)| *until);
            (inner.latency, outage, inner.tokio_clock.clone())
        };
        if let Some((until, kind)) = outage {
            match (kind, &clock) {
                (Outage::Failing, _) | (Outage::Hanging, None) => {
                    tokio::time::sleep(latency).await;
                    return Err(PlatformError::Transient(
                        "simulated API outage: connection refused".into(),
                    ));
                }
                (Outage::Hanging, Some(c)) => tokio::time::sleep_until(c.instant_at(until)).await,
            }
        }
        if !latency.is_zero() {
            tokio::time::sleep(latency / 2).await;
        }
        let out = self.with_cluster(f);
        if !latency.is_zero() {
            tokio::time::sleep(latency - latency / 2).await;
        }
        out
    }
}

#[async_trait]
impl PodPlatform for SimPlatform {
    async fn create_pod(&self, pod: Pod) -> Result<Pod, PlatformError> {
        self.call(|c| c.create_pod(pod)).await
    }

    async fn get_pod(&self, name: &str) -> Result<Pod, PlatformError> {
        self.call(|c| c.get_pod(name)).await
    }

    async fn list_pods(&self, label_selector: &str) -> Result<Vec<Pod>, PlatformError> {
        self.call(|c| c.list_pods(label_selector)).await
    }

    async fn delete_pod(
        &self,
        name: &str,
        precondition: &DeletePrecondition,
    ) -> Result<(), PlatformError> {
        match self.call(|c| c.delete_pod(name, precondition)).await {
            Err(e) if e.is_not_found() => Ok(()),
            other => other,
        }
    }

    async fn create_service(&self, service: Service) -> Result<Service, PlatformError> {
        self.call(|c| c.create_service(service)).await
    }

    async fn get_service(&self, name: &str) -> Result<Service, PlatformError> {
        self.call(|c| c.get_service(name)).await
    }

    async fn list_services(&self) -> Result<Vec<Service>, PlatformError> {
        self.call(|c| {
            c.list_services()?;
            Ok(c.services().cloned().collect())
        })
        .await
    }

    async fn delete_service(&self, name: &str) -> Result<(), PlatformError> {
        match self.call(|c| c.delete_service(name)).await {
            Err(e) if e.is_not_found() => Ok(()),
            other => other,
        }
    }

    /// The simulated endpoints controller: the service's pod (same name, as
    /// the pod cache names them), as a ready address once it is ready.
    async fn service_endpoints(&self, name: &str) -> Result<Vec<ServiceEndpoint>, PlatformError> {
        self.call(|c| {
            if !c.has_service(name) {
                return Ok(Vec::new());
            }
            Ok(c.observed_pod(name)
                .map(|o| ServiceEndpoint {
                    address: o.ip.clone().unwrap_or_else(|| name.to_string()),
                    ready: matches!(o.phase, ObservedPhase::Ready { .. }),
                    pod_name: Some(name.to_string()),
                })
                .into_iter()
                .collect())
        })
        .await
    }

    async fn patch_pod_annotations(
        &self,
        name: &str,
        uid: Option<String>,
        annotations: BTreeMap<String, String>,
    ) -> Result<(), PlatformError> {
        self.call(|c| c.patch_pod_annotations(name, uid.as_deref(), annotations))
            .await
    }

    async fn read_config_map(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<ConfigMapData, PlatformError> {
        self.call(|c| c.read_config_map(namespace, name)).await
    }

    async fn ensure_pull_secret(
        &self,
        name: &str,
        docker_config_json: &[u8],
    ) -> Result<(), PlatformError> {
        self.call(|c| c.ensure_pull_secret(name, docker_config_json).map(|_| ()))
            .await
    }

    async fn watch_pods(&self, label_selector: &str) -> Result<PodEventStream, PlatformError> {
        let selector = Selector::parse(label_selector)?;
        let (tx, rx) = unbounded_channel();
        let mut inner = self.lock();
        inner.publish();
        let pods = inner
            .cluster
            .pods()
            .filter(|p| selector.matches(p))
            .cloned()
            .collect();
        let _ = tx.send(PodEvent::Listed(pods));
        inner.watchers.push(Watcher {
            selector,
            tx,
            gap_until: None,
        });
        Ok(Box::pin(UnboundedReceiverStream::new(rx)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::adapters::sim::StartLatency;
    use crate::domain::pod_cache::IMAGE_LABEL;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    use tokio_stream::StreamExt;

    fn pod(name: &str) -> Pod {
        Pod {
            metadata: ObjectMeta {
                name: Some(name.into()),
                labels: Some([(IMAGE_LABEL.to_string(), name.to_string())].into()),
                ..ObjectMeta::default()
            },
            ..Pod::default()
        }
    }

    #[tokio::test]
    async fn the_port_works_on_virtual_time_and_watches_see_changes() {
        let cluster = SimCluster::new("ns", UnixTime::from_secs(10), 1)
            .with_latency(StartLatency::Fixed(Duration::from_secs(3)));
        let platform = SimPlatform::new(cluster);
        let dyn_platform: Arc<dyn PodPlatform> = Arc::new(platform.clone());
        dyn_platform.create_pod(pod("a")).await.unwrap();
        let mut watch = dyn_platform.watch_pods(IMAGE_LABEL).await.unwrap();
        let PodEvent::Listed(first) = watch.next().await.unwrap() else {
            panic!("a watch starts with a listing")
        };
        assert_eq!(first[0].metadata.name.as_deref(), Some("a"));
        platform.advance_to(UnixTime::from_secs(13));
        let PodEvent::Applied(p) = watch.next().await.unwrap() else {
            panic!("expected applied")
        };
        assert_eq!(p.status.unwrap().phase.as_deref(), Some("Running"));
        dyn_platform
            .patch_pod_annotations("a", None, [("k".to_string(), "v".to_string())].into())
            .await
            .unwrap();
        assert!(matches!(watch.next().await.unwrap(), PodEvent::Applied(_)));
        let none = DeletePrecondition::default();
        dyn_platform.delete_pod("a", &none).await.unwrap();
        assert!(matches!(watch.next().await.unwrap(), PodEvent::Deleted(_)));
        assert!(dyn_platform.get_pod("a").await.unwrap_err().is_not_found());
        dyn_platform.delete_pod("a", &none).await.unwrap();
        dyn_platform
            .ensure_pull_secret("auth", b"{}")
            .await
            .unwrap();
        assert_eq!(
            platform.with_cluster(|c| c.pull_secret("auth").map(<[u8]>::to_vec)),
            Some(b"{}".to_vec())
        );
    }

    #[tokio::test(start_paused = true)]
    async fn on_a_clock_pods_start_calls_take_time_and_outages_and_gaps_happen() {
        let origin = UnixTime::from_secs(1_000);
        let clock = TokioClock::new(origin);
        let cluster = SimCluster::new("ns", origin, 1)
            .with_latency(StartLatency::Fixed(Duration::from_secs(3)));
        let platform = SimPlatform::with_clock(cluster, clock.clone(), Duration::from_millis(200));
        platform.spawn_kubelet();
        let started = tokio::time::Instant::now();
        platform.create_pod(pod("a")).await.unwrap();
        assert_eq!(started.elapsed(), Duration::from_millis(200));
        let mut watch = platform.watch_pods(IMAGE_LABEL).await.unwrap();
        assert!(matches!(watch.next().await, Some(PodEvent::Listed(_))));
        // The pod starts 3 s after its creation, with nobody calling.
        let PodEvent::Applied(p) = watch.next().await.unwrap() else {
            panic!("expected applied")
        };
        assert_eq!(p.status.unwrap().phase.as_deref(), Some("Running"));
        assert_eq!(clock.now(), origin + Duration::from_millis(3100));

        // A failing outage for client 1 only; a hanging one for everyone.
        let replica = platform.for_client(1);
        platform.set_outage(
            Some(1),
            clock.now() + Duration::from_secs(5),
            Outage::Failing,
        );
        assert!(replica.get_pod("a").await.is_err());
        assert!(platform.get_pod("a").await.is_ok());
        let until = clock.now() + Duration::from_secs(2);
        platform.set_outage(None, until, Outage::Hanging);
        platform.get_pod("a").await.unwrap();
        assert!(clock.now() >= until);

        // A watch gap misses a deletion and ends with a listing without it.
        platform.break_watches(clock.now() + Duration::from_secs(4));
        assert_eq!(watch.next().await, Some(PodEvent::Lost));
        platform
            .delete_pod("a", &DeletePrecondition::default())
            .await
            .unwrap();
        let PodEvent::Listed(pods) = watch.next().await.unwrap() else {
            panic!("the gap ends with a listing")
        };
        assert!(pods.is_empty());
    }
}
