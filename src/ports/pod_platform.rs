//! The `PodPlatform` port: the Kubernetes work the pod evaluator's driver
//! needs, and nothing more.
//!
//! The driver carries out the pod cache's commands
//! ([`crate::domain::pod_cache::Command`]) through this trait: create the pod
//! and its service, watch it become ready, patch its reclaim-after
//! annotation, list and delete pods for GC, read the template ConfigMap and
//! keep the registry pull secret in place. One implementation talks to a
//! real API server (kube-rs); [`crate::adapters::sim::SimPlatform`] simulates
//! one on virtual time for tests and the policy simulator.
//!
//! A platform instance is bound to the pod namespace (`--pod-namespace`);
//! only the template ConfigMap may live elsewhere (the runner's namespace).

use std::collections::BTreeMap;
use std::pin::Pin;

use async_trait::async_trait;
use k8s_openapi::api::core::v1::{Pod, Service};
use tokio_stream::Stream;

use crate::domain::pod_cache::{
    CreateFailure, DeleteFailure, DeletePrecondition, Listing, ObservedPod, ObservedService,
    PersistFailure,
};

/// Why a platform call failed, in the classes the driver decides on.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlatformError {
    /// The object does not exist (HTTP 404). For deletes this is success.
    #[error("{kind} {name:?} not found")]
    NotFound {
        /// Object kind, e.g. `Pod`.
        kind: &'static str,
        /// Object name.
        name: String,
    },
    /// An object of that name exists (HTTP 409 AlreadyExists). Unlike Porch
    /// (spec §10 item 29) this is not success: the existing object may be
    /// terminating or from an old template.
    #[error("{kind} {name:?} already exists")]
    AlreadyExists {
        /// Object kind.
        kind: &'static str,
        /// Object name.
        name: String,
    },
    /// A precondition or resourceVersion did not match (HTTP 409 Conflict);
    /// re-read and retry.
    #[error("conflict on {kind} {name:?}: {message}")]
    Conflict {
        /// Object kind.
        kind: &'static str,
        /// Object name.
        name: String,
        /// The server's message.
        message: String,
    },
    /// The runner's service account may not do this (HTTP 403); retrying will
    /// not help — fix the RBAC rules.
    #[error("forbidden: {0}")]
    Forbidden(String),
    /// The object was rejected as invalid (HTTP 422), e.g. a bad name.
    #[error("invalid: {0}")]
    Invalid(String),
    /// A failure that may pass (timeouts, 5xx, 429, connection errors); retry
    /// with backoff.
    #[error("transient platform error: {0}")]
    Transient(String),
}

impl PlatformError {
    /// True for [`PlatformError::NotFound`].
    pub fn is_not_found(&self) -> bool {
        matches!(self, PlatformError::NotFound { .. })
    }

    /// How a failed [`PodPlatform::patch_pod_annotations`] of a
    /// reclaim-after counts for the pod cache: a pod gone
    /// ([`PlatformError::NotFound`]) or another incarnation of its name
    /// (the UID precondition's [`PlatformError::Conflict`]) is
    /// [`PersistFailure::NotThePod`], never retried; anything else is
    /// [`PersistFailure::Platform`], retried while the pod is in use.
    pub fn into_persist_failure(self) -> PersistFailure {
        match self {
            PlatformError::NotFound { .. } | PlatformError::Conflict { .. } => {
                PersistFailure::NotThePod(self.to_string())
            }
            other => PersistFailure::Platform(other.to_string()),
        }
    }

    /// True for [`PlatformError::AlreadyExists`]: the answer to a
    /// [`PodPlatform::create_pod`] after which the executor of a creation
    /// reads the pod back for [`PlatformError::into_create_failure`].
    pub fn is_already_exists(&self) -> bool {
        matches!(self, PlatformError::AlreadyExists { .. })
    }

    /// How a failed [`PodPlatform::create_pod`] of a creation
    /// ([`Command::CreatePod`](crate::domain::pod_cache::Command::CreatePod))
    /// counts for the pod cache, whoever carries the command out (the pod
    /// driver, the simulator's harness).
    ///
    /// [`PlatformError::AlreadyExists`] is
    /// [`CreateFailure::AlreadyExists`] with `existing`, the pod of that
    /// name as read back (`None` when the read failed): the machine decides
    /// whether it is this creation's own earlier attempt (never success by
    /// itself, unlike Porch, spec §10 item 29). `existing` is ignored for
    /// any other error, which is [`CreateFailure::Failed`] with
    /// `unable to apply the pod: <error>` (Porch's message for a failed
    /// pod apply).
    pub fn into_create_failure(self, existing: Option<ObservedPod>) -> CreateFailure {
        match self {
            PlatformError::AlreadyExists { .. } => CreateFailure::AlreadyExists {
                existing: existing.map(Box::new),
            },
            other => CreateFailure::Failed {
                reason: format!("unable to apply the pod: {other}"),
            },
        }
    }

    /// Why the service `name` of a function pod could not be created, as
    /// the creation's failure reason ([`CreateFailure::Failed`]) and the log
    /// of [`Command::EnsureService`](crate::domain::pod_cache::Command::EnsureService)
    /// say it: `unable to create the service <name>: <error>`.
    pub fn service_failure(&self, name: &str) -> String {
        format!("unable to create the service {name}: {self}")
    }

    /// How a failed [`PodPlatform::delete_pod`] counts for the pod cache
    /// ([`Input::Deleted`](crate::domain::pod_cache::Input::Deleted)):
    /// `None` for [`PlatformError::NotFound`] (a pod already gone is a
    /// success: its service is deleted next);
    /// [`DeleteFailure::Conflict`] for [`PlatformError::Conflict`] (the
    /// precondition did not hold: never retried, the next GC decides on a
    /// fresh listing); [`DeleteFailure::Failed`] with the error otherwise
    /// (retried with backoff).
    pub fn into_delete_failure(self) -> Option<DeleteFailure> {
        match self {
            PlatformError::NotFound { .. } => None,
            PlatformError::Conflict { .. } => Some(DeleteFailure::Conflict),
            other => Some(DeleteFailure::Failed {
                reason: other.to_string(),
            }),
        }
    }

    /// True for errors worth retrying ([`PlatformError::Transient`] and
    /// [`PlatformError::Conflict`]).
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            PlatformError::Transient(_) | PlatformError::Conflict { .. }
        )
    }
}

/// The outcome of a pod deletion
/// ([`Command::DeletePod`](crate::domain::pod_cache::Command::DeletePod)),
/// as [`Input::Deleted`](crate::domain::pod_cache::Input::Deleted) carries
/// it: the answer of [`PodPlatform::delete_pod`] (or of the read that
/// checks a creation precondition first) through
/// [`PlatformError::into_delete_failure`]. `Ok` means the pod is gone, and
/// its service is to be deleted.
pub fn delete_outcome(result: Result<(), PlatformError>) -> Result<(), DeleteFailure> {
    match result {
        Ok(()) => Ok(()),
        Err(e) => e.into_delete_failure().map_or(Ok(()), Err),
    }
}

/// The outcome of a GC listing
/// ([`Command::ListPods`](crate::domain::pod_cache::Command::ListPods)), as
/// [`Input::Listed`](crate::domain::pod_cache::Input::Listed) carries it,
/// from the two answers in the order they were asked for: the services
/// (listed first: a pod is created before its service, so a function
/// service listed whose pod is missing from the later pod list has lost its
/// pod for good) and the labelled pods, both already observed.
///
/// Errors: the services' error if that listing failed, else the pods'
/// (as text, for the log; the machine retries at its next GC period).
pub fn listing_outcome(
    services: Result<Vec<ObservedService>, PlatformError>,
    pods: Result<Vec<std::sync::Arc<ObservedPod>>, PlatformError>,
) -> Result<Listing, String> {
    match (services, pods) {
        (Ok(services), Ok(pods)) => Ok(Listing { pods, services }),
        (Err(e), _) | (_, Err(e)) => Err(e.to_string()),
    }
}

/// A ConfigMap's data with the `resourceVersion` that becomes the template
/// version.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ConfigMapData {
    /// The `data` map.
    pub data: BTreeMap<String, String>,
    /// `metadata.resourceVersion`.
    pub resource_version: String,
}

/// A change to a pod, as a watch reports it (kube-runtime's
/// `watcher::Event` reduced to what the driver needs).
#[derive(Debug, Clone, PartialEq)]
pub enum PodEvent {
    /// Every pod matching the watch's selector, listed: the first event of
    /// a watch, and again whenever the watch had to list anew after an
    /// outage it could not resume from. A pod missing from it is gone,
    /// whether or not its deletion was reported.
    Listed(Vec<Pod>),
    /// The pod was created or changed; this is its new state.
    Applied(Pod),
    /// The pod is gone; this is its last known state.
    Deleted(Pod),
    /// The watch failed and is retrying: changes (deletions included) may
    /// go unreported until the next [`PodEvent::Listed`].
    Lost,
}

/// One address behind a service, as its EndpointSlices (or, on clusters
/// without them, its core/v1 Endpoints) publish it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServiceEndpoint {
    /// The published address (an IP, or an FQDN for `addressType: FQDN`).
    pub address: String,
    /// The `ready` condition (an absent condition counts as ready, as
    /// Kubernetes consumers read it); not-ready addresses of core/v1
    /// Endpoints are reported with `false`.
    pub ready: bool,
    /// The pod named by the endpoint's `targetRef`, if it names a pod.
    pub pod_name: Option<String>,
}

/// A stream of pod events; it ends when the platform stops watching.
pub type PodEventStream = Pin<Box<dyn Stream<Item = PodEvent> + Send>>;

/// What a watch on the pod namespace's published endpoints reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EndpointEvent {
    /// The watch is (again) up to date: every later change is reported.
    Synced,
    /// What the service of this name publishes changed.
    Changed(String),
    /// The watch failed and is retrying: changes may go unreported until
    /// the next [`EndpointEvent::Synced`].
    Lost,
}

/// A stream of endpoint events; it ends when the platform stops watching.
pub type EndpointEventStream = Pin<Box<dyn Stream<Item = EndpointEvent> + Send>>;

/// A warning recorded about a pod (a core/v1 Event of type `Warning`), as
/// the kubelet records one the moment it fails to pull an image or to
/// create or start a container — seconds before the pod's status says so
/// (the kubelet writes that status only at its next sync of the pod).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodWarning {
    /// The pod's name (`involvedObject.name`).
    pub pod_name: String,
    /// The pod's UID (`involvedObject.uid`): a warning about an earlier pod
    /// of the same name must not count against a new one.
    pub pod_uid: Option<String>,
    /// The container it is about, from `involvedObject.fieldPath`
    /// (`spec.containers{function}` → `function`), when it names one.
    pub container: Option<String>,
    /// The event's reason (`Failed`, `BackOff`, `InspectFailed`, …).
    pub reason: String,
    /// The event's message.
    pub message: String,
}

/// A stream of pod warnings; it ends when the platform stops watching.
pub type PodWarningStream = Pin<Box<dyn Stream<Item = PodWarning> + Send>>;

/// Pod, service, ConfigMap and Secret operations in the pod namespace.
///
/// Every method is cancel-safe in the sense that dropping the future leaves
/// the platform in a state a later list can observe; none retries on its own.
#[cfg_attr(test, mockall::automock)]
#[async_trait]
pub trait PodPlatform: Send + Sync {
    /// Creates `pod` under its `metadata.name` (never `generateName`).
    ///
    /// Errors: [`PlatformError::AlreadyExists`] if the name is taken,
    /// [`PlatformError::Invalid`], [`PlatformError::Forbidden`], transient errors.
    async fn create_pod(&self, pod: Pod) -> Result<Pod, PlatformError>;

    /// Reads the pod `name`. Errors: [`PlatformError::NotFound`] and the usual.
    async fn get_pod(&self, name: &str) -> Result<Pod, PlatformError>;

    /// Lists pods matching `label_selector` (Kubernetes syntax: `k=v,k2`, or
    /// empty for all).
    async fn list_pods(&self, label_selector: &str) -> Result<Vec<Pod>, PlatformError>;

    /// Deletes the pod `name` (background propagation) if `precondition`
    /// holds (Kubernetes `DeleteOptions.preconditions`: its UID and
    /// resourceVersion, where given).
    /// Errors: [`PlatformError::NotFound`] when already gone (the pod-cache
    /// executors count that as deleted: [`PlatformError::into_delete_failure`]),
    /// [`PlatformError::Conflict`] when the precondition does not hold.
    async fn delete_pod(
        &self,
        name: &str,
        precondition: &DeletePrecondition,
    ) -> Result<(), PlatformError>;

    /// Creates `service` under its `metadata.name`.
    /// Errors: [`PlatformError::AlreadyExists`] and the usual.
    async fn create_service(&self, service: Service) -> Result<Service, PlatformError>;

    /// Reads the service `name`. Errors: [`PlatformError::NotFound`] and the usual.
    async fn get_service(&self, name: &str) -> Result<Service, PlatformError>;

    /// Lists the services of the pod namespace (GC looks for services whose
    /// function pod is gone).
    async fn list_services(&self) -> Result<Vec<Service>, PlatformError>;

    /// Deletes the service `name`. Errors: [`PlatformError::NotFound`] when already gone.
    async fn delete_service(&self, name: &str) -> Result<(), PlatformError>;

    /// The addresses published for service `name`: from its EndpointSlices
    /// (label `kubernetes.io/service-name`), or from the core/v1 Endpoints of
    /// the same name when the cluster has no EndpointSlice API or denies
    /// access to it. An empty list means "nothing published yet", not an
    /// error (Porch aborts on a missing Endpoints object, spec §10 item 12).
    ///
    /// Errors: [`PlatformError::Forbidden`] when neither API may be read,
    /// and transient errors.
    async fn service_endpoints(&self, name: &str) -> Result<Vec<ServiceEndpoint>, PlatformError>;

    /// Merge-patches the pod's annotations with `annotations` (others kept).
    /// With `uid`, the patch carries it as `metadata.uid`, which the API
    /// server takes as a precondition: the patch applies only to that
    /// incarnation of the name.
    /// Errors: [`PlatformError::NotFound`], [`PlatformError::Conflict`] when
    /// the pod's UID is not `uid`, and the usual.
    async fn patch_pod_annotations(
        &self,
        name: &str,
        uid: Option<String>,
        annotations: BTreeMap<String, String>,
    ) -> Result<(), PlatformError>;

    /// Reads ConfigMap `name` in `namespace` (the template ConfigMap lives in
    /// the runner's namespace, not the pod namespace).
    async fn read_config_map(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<ConfigMapData, PlatformError>;

    /// Makes the `kubernetes.io/dockerconfigjson` Secret `name` hold
    /// `docker_config_json`: created if missing, updated if different, left
    /// alone if equal (Porch `inspectOrCreateSecret`).
    async fn ensure_pull_secret(
        &self,
        name: &str,
        docker_config_json: &[u8],
    ) -> Result<(), PlatformError>;

    /// Watches pods matching `label_selector`: first a [`PodEvent::Listed`]
    /// with every existing pod, then every change; after an outage,
    /// [`PodEvent::Lost`] and, once the watch is back, a new
    /// [`PodEvent::Listed`].
    async fn watch_pods(&self, label_selector: &str) -> Result<PodEventStream, PlatformError>;

    /// Watches what the services of the pod namespace publish (their
    /// EndpointSlices), so that a caller waiting for a new pod's service
    /// learns of it from an event instead of by polling
    /// [`PodPlatform::service_endpoints`].
    ///
    /// The default is a stream that never reports anything, for platforms
    /// without such a watch: callers keep polling then, as they must while
    /// the watch is not [`EndpointEvent::Synced`].
    async fn watch_endpoints(&self) -> Result<EndpointEventStream, PlatformError> {
        Ok(Box::pin(tokio_stream::pending()))
    }

    /// Watches the warnings recorded about the pod namespace's pods (its
    /// `Warning` Events), so that a pod the kubelet cannot start fails its
    /// callers at once. The first items may be warnings recorded before the
    /// watch began (match them by [`PodWarning::pod_uid`]).
    ///
    /// The default never reports anything, for platforms without Events;
    /// failures are then seen in the pod's status only. Implementations
    /// return such a stream, too, when Events may not be read here.
    async fn watch_pod_warnings(&self) -> Result<PodWarningStream, PlatformError> {
        Ok(Box::pin(tokio_stream::pending()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn not_found() -> PlatformError {
        PlatformError::NotFound {
            kind: "Pod",
            name: "p".into(),
        }
    }

    fn conflict() -> PlatformError {
        PlatformError::Conflict {
            kind: "Pod",
            name: "p".into(),
            message: "precondition".into(),
        }
    }

    // One mapping of the platform's answers to the machine's outcomes,
    // for the pod driver and the simulator's harness alike.
    #[test]
    fn platform_answers_map_to_the_machines_outcomes() {
        let existing = ObservedPod {
            name: "p".into(),
            ..ObservedPod::default()
        };
        let taken = PlatformError::AlreadyExists {
            kind: "Pod",
            name: "p".into(),
        };
        assert!(taken.is_already_exists());
        assert_eq!(
            taken.into_create_failure(Some(existing.clone())),
            CreateFailure::AlreadyExists {
                existing: Some(Box::new(existing.clone()))
            }
        );
        assert_eq!(
            PlatformError::Forbidden("no".into()).into_create_failure(Some(existing)),
            CreateFailure::Failed {
                reason: "unable to apply the pod: forbidden: no".into()
            }
        );
        assert_eq!(
            PlatformError::Transient("down".into()).service_failure("p"),
            "unable to create the service p: transient platform error: down"
        );

        assert_eq!(delete_outcome(Ok(())), Ok(()));
        assert_eq!(delete_outcome(Err(not_found())), Ok(()));
        assert_eq!(
            delete_outcome(Err(conflict())),
            Err(DeleteFailure::Conflict)
        );
        assert_eq!(
            delete_outcome(Err(PlatformError::Transient("down".into()))),
            Err(DeleteFailure::Failed {
                reason: "transient platform error: down".into()
            })
        );

        assert!(matches!(
            conflict().into_persist_failure(),
            PersistFailure::NotThePod(_)
        ));

        let service = ObservedService {
            name: "p".into(),
            selects_own_pod: true,
        };
        let listed = listing_outcome(Ok(vec![service.clone()]), Ok(Vec::new()));
        assert_eq!(listed.map(|l| l.services), Ok(vec![service]));
        let failed = listing_outcome(
            Err(PlatformError::Transient("services".into())),
            Err(PlatformError::Transient("pods".into())),
        );
        assert_eq!(failed, Err("transient platform error: services".into()));
        let failed = listing_outcome(Ok(Vec::new()), Err(not_found()));
        assert_eq!(failed, Err(not_found().to_string()));
    }
}
