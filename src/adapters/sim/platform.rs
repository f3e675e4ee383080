//! The async `PodPlatform` over a shared [`SimCluster`].

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};

use async_trait::async_trait;
use k8s_openapi::api::core::v1::{Pod, Service};
use tokio::sync::mpsc::{UnboundedSender, unbounded_channel};
use tokio_stream::wrappers::UnboundedReceiverStream;

use super::cluster::{Selector, SimCluster};
use crate::domain::pod_cache::template::observe_pod;
use crate::domain::pod_cache::{ObservedPhase, UnixTime};
use crate::ports::{
    ConfigMapData, PlatformError, PodEvent, PodEventStream, PodPlatform, ServiceEndpoint,
};

struct Inner {
    cluster: SimCluster,
    watchers: Vec<(Selector, UnboundedSender<PodEvent>)>,
}

impl Inner {
    /// Hands the cluster's queued pod events to every matching watcher.
    fn publish(&mut self) {
        let events = self.cluster.drain_events();
        self.watchers.retain(|(_, tx)| !tx.is_closed());
        for event in events {
            let pod = match &event {
                PodEvent::Applied(p) | PodEvent::Deleted(p) => p,
            };
            for (selector, tx) in &self.watchers {
                if selector.matches(pod) {
                    let _ = tx.send(event.clone());
                }
            }
        }
    }
}

/// A [`PodPlatform`] backed by a [`SimCluster`] shared between clones (two
/// runner replicas can share one). Virtual time moves only through
/// [`advance_to`](Self::advance_to); every call runs at the current virtual
/// time and completes without waiting.
#[derive(Clone)]
pub struct SimPlatform {
    inner: Arc<Mutex<Inner>>,
}

impl std::fmt::Debug for SimPlatform {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SimPlatform").finish_non_exhaustive()
    }
}

impl SimPlatform {
    /// Wraps `cluster`.
    pub fn new(cluster: SimCluster) -> Self {
        Self {
            inner: Arc::new(Mutex::new(Inner {
                cluster,
                watchers: Vec::new(),
            })),
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
        let out = f(&mut inner.cluster);
        inner.publish();
        out
    }

    /// Moves virtual time to `now` (see [`SimCluster::advance_to`]).
    pub fn advance_to(&self, now: UnixTime) {
        self.with_cluster(|c| c.advance_to(now));
    }

    /// The current virtual time.
    pub fn now(&self) -> UnixTime {
        self.lock().cluster.now()
    }
}

#[async_trait]
impl PodPlatform for SimPlatform {
    async fn create_pod(&self, pod: Pod) -> Result<Pod, PlatformError> {
        self.with_cluster(|c| c.create_pod(pod))
    }

    async fn get_pod(&self, name: &str) -> Result<Pod, PlatformError> {
        self.with_cluster(|c| c.get_pod(name))
    }

    async fn list_pods(&self, label_selector: &str) -> Result<Vec<Pod>, PlatformError> {
        self.with_cluster(|c| c.list_pods(label_selector))
    }

    async fn delete_pod(&self, name: &str) -> Result<(), PlatformError> {
        self.with_cluster(|c| c.delete_pod(name))
    }

    async fn create_service(&self, service: Service) -> Result<Service, PlatformError> {
        self.with_cluster(|c| c.create_service(service))
    }

    async fn get_service(&self, name: &str) -> Result<Service, PlatformError> {
        self.with_cluster(|c| c.get_service(name))
    }

    async fn list_services(&self) -> Result<Vec<Service>, PlatformError> {
        self.with_cluster(|c| Ok(c.services().cloned().collect()))
    }

    async fn delete_service(&self, name: &str) -> Result<(), PlatformError> {
        self.with_cluster(|c| c.delete_service(name))
    }

    /// The simulated endpoints controller: the service's pod (same name, as
    /// the pod cache names them), as a ready address once it is ready.
    async fn service_endpoints(&self, name: &str) -> Result<Vec<ServiceEndpoint>, PlatformError> {
        self.with_cluster(|c| {
            if c.get_service(name).is_err() {
                return Ok(Vec::new());
            }
            Ok(c.pods()
                .filter(|p| p.metadata.name.as_deref() == Some(name))
                .filter_map(|p| {
                    let seen = observe_pod(p)?;
                    let ready = matches!(seen.phase, ObservedPhase::Ready { .. });
                    let address = p
                        .status
                        .as_ref()
                        .and_then(|s| s.pod_ip.clone())
                        .unwrap_or_else(|| name.to_string());
                    Some(ServiceEndpoint {
                        address,
                        ready,
                        pod_name: Some(name.to_string()),
                    })
                })
                .collect())
        })
    }

    async fn patch_pod_annotations(
        &self,
        name: &str,
        annotations: BTreeMap<String, String>,
    ) -> Result<(), PlatformError> {
        self.with_cluster(|c| c.patch_pod_annotations(name, annotations))
    }

    async fn read_config_map(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<ConfigMapData, PlatformError> {
        self.with_cluster(|c| c.read_config_map(namespace, name))
    }

    async fn ensure_pull_secret(
        &self,
        name: &str,
        docker_config_json: &[u8],
    ) -> Result<(), PlatformError> {
        self.with_cluster(|c| c.ensure_pull_secret(name, docker_config_json).map(|_| ()))
    }

    async fn watch_pods(&self, label_selector: &str) -> Result<PodEventStream, PlatformError> {
        let selector = Selector::parse(label_selector)?;
        let (tx, rx) = unbounded_channel();
        let mut inner = self.lock();
        inner.publish();
        for pod in inner.cluster.pods().filter(|p| selector.matches(p)) {
            let _ = tx.send(PodEvent::Applied(pod.clone()));
        }
        inner.watchers.push((selector, tx));
        Ok(Box::pin(UnboundedReceiverStream::new(rx)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::adapters::sim::StartLatency;
    use crate::domain::pod_cache::IMAGE_LABEL;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    use std::time::Duration;
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
        let first = watch.next().await.unwrap();
        assert!(
            matches!(first, PodEvent::Applied(ref p) if p.metadata.name.as_deref() == Some("a"))
        );
        platform.advance_to(UnixTime::from_secs(13));
        let PodEvent::Applied(p) = watch.next().await.unwrap() else {
            panic!("expected applied")
        };
        assert_eq!(p.status.unwrap().phase.as_deref(), Some("Running"));
        dyn_platform
            .patch_pod_annotations("a", [("k".to_string(), "v".to_string())].into())
            .await
            .unwrap();
        assert!(matches!(watch.next().await.unwrap(), PodEvent::Applied(_)));
        dyn_platform.delete_pod("a").await.unwrap();
        assert!(matches!(watch.next().await.unwrap(), PodEvent::Deleted(_)));
        assert!(dyn_platform.get_pod("a").await.unwrap_err().is_not_found());
        dyn_platform
            .ensure_pull_secret("auth", b"{}")
            .await
            .unwrap();
        assert_eq!(
            platform.with_cluster(|c| c.pull_secret("auth").map(<[u8]>::to_vec)),
            Some(b"{}".to_vec())
        );
    }
}
