//! The Kubernetes adapter of the [`PodPlatform`] port (kube-rs).
//!
//! Errors are typed from the API server's status (404 → NotFound, 409
//! AlreadyExists vs. Conflict, 403 → Forbidden, 400/422 → Invalid, anything
//! else — 5xx, 429, connection and timeout failures — Transient), and only
//! transient failures are retried, with exponential backoff. A create never
//! treats `AlreadyExists` as success (Porch does, spec §10 item 29): the
//! caller decides whether the existing object is usable. Pod state reaches
//! the driver from a watch on the labelled pods, not from polling.
//!
//! The FunctionConfig generation's objects are here too:
//! [`function_configs`] (the FunctionConfig watch, its status writes and
//! CRD discovery) and [`templates`] (the PodTemplate and ServiceTemplate
//! watch).

pub mod function_configs;
pub mod templates;

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use backon::{ExponentialBuilder, Retryable};
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{ConfigMap, Endpoints, Event, Pod, Secret, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams, Preconditions};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client};
use tokio_stream::StreamExt;

use crate::domain::pod_cache::DeletePrecondition;
use crate::ports::{
    ConfigMapData, EndpointEvent, EndpointEventStream, PlatformError, PodEvent, PodEventStream,
    PodPlatform, PodWarning, PodWarningStream, ServiceEndpoint,
};

/// The field manager recorded on objects the runner writes (Porch's name).
pub const FIELD_MANAGER: &str = "krm-function-runner";
/// The key of a `kubernetes.io/dockerconfigjson` Secret.
pub const DOCKER_CONFIG_KEY: &str = ".dockerconfigjson";
/// How API calls are bounded and retried (`serve --api-timeout`,
/// `--api-retries`, `--api-retry-backoff`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ApiRetry {
    /// Attempts for a call failing transiently (the first included).
    pub attempts: u32,
    /// First retry delay; doubled each time, and each delay lengthened by
    /// a random jitter of up to as much again.
    pub first_backoff: Duration,
    /// Bound on each attempt: an API server that does not answer (stopped,
    /// partitioned) fails the attempt as transient after this long.
    pub timeout: Duration,
}

impl Default for ApiRetry {
    /// 4 attempts, 100 ms first backoff (100, 200, 400 ms before jitter),
    /// 10 s per attempt.
    fn default() -> Self {
        Self {
            attempts: 4,
            first_backoff: Duration::from_millis(100),
            timeout: Duration::from_secs(10),
        }
    }
}

/// Pods, services and secrets in one namespace (`--pod-namespace`), and
/// ConfigMaps anywhere, through a kube-rs client.
#[derive(Clone)]
pub struct KubePlatform {
    client: Client,
    namespace: String,
    retry: ApiRetry,
    /// Set once the API server refused EndpointSlices (Porch's Role grants
    /// core/v1 `endpoints` only): services are then read from their
    /// Endpoints directly and not watched.
    slices_denied: Arc<AtomicBool>,
}

impl KubePlatform {
    /// A platform for `namespace` using `client` (in-cluster or kubeconfig,
    /// as `kube::Client::try_default` infers it), with the default
    /// [`ApiRetry`].
    pub fn new(client: Client, namespace: impl Into<String>) -> Self {
        Self {
            client,
            namespace: namespace.into(),
            retry: ApiRetry::default(),
            slices_denied: Arc::new(AtomicBool::new(false)),
        }
    }

    /// The same platform with `retry` bounding and retrying its calls.
    pub fn with_retry(mut self, retry: ApiRetry) -> Self {
        self.retry = retry;
        self
    }

    /// Runs `call` under [`ApiRetry`]: until it succeeds, fails with a
    /// non-transient error, or the attempts are used, each attempt bounded
    /// by the timeout, sleeping the doubling backoff between tries.
    async fn with_retries<T, F, Fut>(
        &self,
        kind: &'static str,
        name: &str,
        call: F,
    ) -> Result<T, PlatformError>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, kube::Error>>,
    {
        with_retries(self.retry, kind, name, call).await
    }

    /// Records that EndpointSlices may not be read, saying so once.
    fn deny_slices(&self, why: &PlatformError) {
        if !self.slices_denied.swap(true, Ordering::Relaxed) {
            tracing::info!(
                "EndpointSlices are not readable here ({why}); services are read from their core/v1 Endpoints, polled while a new pod starts"
            );
        }
    }

    /// The pod namespace.
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    fn pods(&self) -> Api<Pod> {
        Api::namespaced(self.client.clone(), &self.namespace)
    }

    fn services(&self) -> Api<Service> {
        Api::namespaced(self.client.clone(), &self.namespace)
    }

    fn secrets(&self) -> Api<Secret> {
        Api::namespaced(self.client.clone(), &self.namespace)
    }
}

/// Maps a kube-rs error for an object of `kind` named `name`.
pub fn classify(kind: &'static str, name: &str, err: kube::Error) -> PlatformError {
    match err {
        kube::Error::Api(status) => {
            let message = status.message.clone();
            match status.code {
                404 => PlatformError::NotFound {
                    kind,
                    name: name.to_string(),
                },
                409 if status.reason == "AlreadyExists" => PlatformError::AlreadyExists {
                    kind,
                    name: name.to_string(),
                },
                409 => PlatformError::Conflict {
                    kind,
                    name: name.to_string(),
                    message,
                },
                403 => PlatformError::Forbidden(format!(
                    "{kind} {name:?}: {message} (grant the runner's service account this verb in its Role)"
                )),
                400 | 422 => PlatformError::Invalid(format!("{kind} {name:?}: {message}")),
                code => {
                    PlatformError::Transient(format!("{kind} {name:?}: HTTP {code}: {message}"))
                }
            }
        }
        other => PlatformError::Transient(format!("{kind} {name:?}: {other}")),
    }
}

/// Runs `call` under `retry` (see [`KubePlatform::with_retries`]): each
/// attempt bounded by `retry.timeout`, transient failures retried after an
/// exponential backoff with full jitter (the n-th delay drawn from
/// `[d, 2d)` with `d = first_backoff · 2ⁿ⁻¹`), so replicas that failed
/// together do not retry in lockstep.
async fn with_retries<T, F, Fut>(
    retry: ApiRetry,
    kind: &'static str,
    name: &str,
    mut call: F,
) -> Result<T, PlatformError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, kube::Error>>,
{
    let backoff = ExponentialBuilder::new()
        .with_min_delay(retry.first_backoff)
        .with_factor(2.0)
        .without_max_delay()
        .with_jitter()
        .with_max_times(retry.attempts.max(1) as usize - 1);
    let attempt = || {
        let call = call();
        async move {
            match tokio::time::timeout(retry.timeout, call).await {
                Ok(r) => r.map_err(|e| classify(kind, name, e)),
                Err(_) => Err(PlatformError::Transient(format!(
                    "{kind} {name:?}: no answer from the API server within {:?}",
                    retry.timeout
                ))),
            }
        }
    };
    attempt
        .retry(backoff)
        .sleep(tokio::time::sleep)
        .when(|e| matches!(e, PlatformError::Transient(_)))
        .notify(|e, delay| {
            tracing::debug!(kind, name, ?delay, "transient error, retrying: {e}");
        })
        .await
}

fn object_name(meta: &kube::api::ObjectMeta) -> Result<String, PlatformError> {
    meta.name.clone().ok_or_else(|| {
        PlatformError::Invalid("the object has no metadata.name (generateName is not used)".into())
    })
}

fn post_params() -> PostParams {
    PostParams {
        field_manager: Some(FIELD_MANAGER.into()),
        ..PostParams::default()
    }
}

fn ignore_not_found(r: Result<(), PlatformError>) -> Result<(), PlatformError> {
    match r {
        Err(e) if e.is_not_found() => Ok(()),
        other => other,
    }
}

#[async_trait]
impl PodPlatform for KubePlatform {
    async fn create_pod(&self, pod: Pod) -> Result<Pod, PlatformError> {
        let name = object_name(&pod.metadata)?;
        let (api, params) = (self.pods(), post_params());
        self.with_retries("Pod", &name, || api.create(&params, &pod))
            .await
    }

    async fn get_pod(&self, name: &str) -> Result<Pod, PlatformError> {
        let api = self.pods();
        self.with_retries("Pod", name, || api.get(name)).await
    }

    async fn list_pods(&self, label_selector: &str) -> Result<Vec<Pod>, PlatformError> {
        let api = self.pods();
        let params = ListParams::default().labels(label_selector);
        self.with_retries("Pod", label_selector, || api.list(&params))
            .await
            .map(|l| l.items)
    }

    async fn delete_pod(
        &self,
        name: &str,
        precondition: &DeletePrecondition,
    ) -> Result<(), PlatformError> {
        let api = self.pods();
        let mut params = DeleteParams::background();
        if precondition.uid.is_some() || precondition.resource_version.is_some() {
            params = params.preconditions(Preconditions {
                uid: precondition.uid.clone(),
                resource_version: precondition.resource_version.clone(),
            });
        }
        ignore_not_found(
            self.with_retries("Pod", name, || api.delete(name, &params))
                .await
                .map(|_| ()),
        )
    }

    async fn create_service(&self, service: Service) -> Result<Service, PlatformError> {
        let name = object_name(&service.metadata)?;
        let (api, params) = (self.services(), post_params());
        self.with_retries("Service", &name, || api.create(&params, &service))
            .await
    }

    async fn get_service(&self, name: &str) -> Result<Service, PlatformError> {
        let api = self.services();
        self.with_retries("Service", name, || api.get(name)).await
    }

    async fn list_services(&self) -> Result<Vec<Service>, PlatformError> {
        let api = self.services();
        let params = ListParams::default();
        self.with_retries("Service", "*", || api.list(&params))
            .await
            .map(|l| l.items)
    }

    async fn delete_service(&self, name: &str) -> Result<(), PlatformError> {
        let (api, params) = (self.services(), DeleteParams::background());
        ignore_not_found(
            self.with_retries("Service", name, || api.delete(name, &params))
                .await
                .map(|_| ()),
        )
    }

    /// EndpointSlices labelled `kubernetes.io/service-name=<name>`; when
    /// that API is absent (404) or denied (403), or lists nothing, the
    /// core/v1 Endpoints object of the same name (a missing one is an empty
    /// list).
    async fn service_endpoints(&self, name: &str) -> Result<Vec<ServiceEndpoint>, PlatformError> {
        let slice_error = if self.slices_denied.load(Ordering::Relaxed) {
            None
        } else {
            let slices: Api<EndpointSlice> = Api::namespaced(self.client.clone(), &self.namespace);
            let params = ListParams::default().labels(&format!("{SERVICE_NAME_LABEL}={name}"));
            match self
                .with_retries("EndpointSlice", name, || slices.list(&params))
                .await
            {
                Ok(list) => {
                    let found = endpoints_from_slices(&list.items);
                    if !found.is_empty() {
                        return Ok(found);
                    }
                    None
                }
                Err(e @ (PlatformError::NotFound { .. } | PlatformError::Forbidden(_))) => {
                    self.deny_slices(&e);
                    Some(e)
                }
                Err(e) => return Err(e),
            }
        };
        let endpoints: Api<Endpoints> = Api::namespaced(self.client.clone(), &self.namespace);
        match self
            .with_retries("Endpoints", name, || endpoints.get(name))
            .await
        {
            Ok(e) => Ok(endpoints_from_core(&e)),
            Err(e) if e.is_not_found() => Ok(Vec::new()),
            Err(PlatformError::Forbidden(m)) => Err(PlatformError::Forbidden(match slice_error {
                Some(s) => format!("{m}; EndpointSlices: {s}"),
                None => m,
            })),
            Err(e) => Err(e),
        }
    }

    async fn patch_pod_annotations(
        &self,
        name: &str,
        uid: Option<String>,
        annotations: BTreeMap<String, String>,
    ) -> Result<(), PlatformError> {
        let api = self.pods();
        // A `metadata.uid` in a merge patch is a precondition: the API
        // server validates the patched object, and an object whose UID
        // would change is refused with 422 ("metadata.uid: ... field is
        // immutable") before anything is written. The port reports that
        // as the Conflict it is.
        let mut metadata = serde_json::json!({"annotations": annotations});
        let precondition = uid.is_some();
        if let Some(uid) = uid {
            metadata["uid"] = uid.into();
        }
        let patch = Patch::Merge(serde_json::json!({"metadata": metadata}));
        let params = PatchParams {
            field_manager: Some(FIELD_MANAGER.into()),
            ..PatchParams::default()
        };
        match self
            .with_retries("Pod", name, || api.patch(name, &params, &patch))
            .await
        {
            Ok(_) => Ok(()),
            Err(PlatformError::Invalid(message))
                if precondition && message.contains("metadata.uid") =>
            {
                Err(PlatformError::Conflict {
                    kind: "Pod",
                    name: name.to_string(),
                    message,
                })
            }
            Err(e) => Err(e),
        }
    }

    async fn read_config_map(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<ConfigMapData, PlatformError> {
        let api: Api<ConfigMap> = Api::namespaced(self.client.clone(), namespace);
        let cm = self
            .with_retries("ConfigMap", name, || api.get(name))
            .await?;
        Ok(ConfigMapData {
            data: cm.data.unwrap_or_default(),
            resource_version: cm.metadata.resource_version.unwrap_or_default(),
        })
    }

    /// Creates the `kubernetes.io/dockerconfigjson` Secret, or updates its
    /// data when the bytes differ (optimistically, on the read
    /// `resourceVersion`); an identical Secret is left alone.
    async fn ensure_pull_secret(
        &self,
        name: &str,
        docker_config_json: &[u8],
    ) -> Result<(), PlatformError> {
        let (api, params) = (self.secrets(), post_params());
        let wanted = BTreeMap::from([(
            DOCKER_CONFIG_KEY.to_string(),
            ByteString(docker_config_json.to_vec()),
        )]);
        for _ in 0..self.retry.attempts.max(1) {
            match self.with_retries("Secret", name, || api.get(name)).await {
                Err(e) if e.is_not_found() => {
                    let secret = Secret {
                        metadata: kube::api::ObjectMeta {
                            name: Some(name.to_string()),
                            namespace: Some(self.namespace.clone()),
                            ..Default::default()
                        },
                        type_: Some("kubernetes.io/dockerconfigjson".into()),
                        data: Some(wanted.clone()),
                        ..Default::default()
                    };
                    match self
                        .with_retries("Secret", name, || api.create(&params, &secret))
                        .await
                    {
                        Err(PlatformError::AlreadyExists { .. }) => continue,
                        other => return other.map(|_| ()),
                    }
                }
                Err(e) => return Err(e),
                Ok(existing) if existing.data.as_ref() == Some(&wanted) => return Ok(()),
                Ok(mut existing) => {
                    existing.data = Some(wanted.clone());
                    match self
                        .with_retries("Secret", name, || api.replace(name, &params, &existing))
                        .await
                    {
                        Err(PlatformError::Conflict { .. }) => continue,
                        other => return other.map(|_| ()),
                    }
                }
            }
        }
        Err(PlatformError::Conflict {
            kind: "Secret",
            name: name.to_string(),
            message: "kept changing while being updated".into(),
        })
    }

    /// A watch on the pods matching `label_selector` in the pod namespace
    /// (kube-runtime's watcher: re-lists and resumes on its own, with
    /// backoff). Each (re)listing arrives as one [`PodEvent::Listed`]; a
    /// watch error as [`PodEvent::Lost`].
    async fn watch_pods(&self, label_selector: &str) -> Result<PodEventStream, PlatformError> {
        let config = watcher::Config::default().labels(label_selector);
        let mut listing: Option<Vec<Pod>> = None;
        let stream = watcher(self.pods(), config)
            .default_backoff()
            .filter_map(move |event| match event {
                Ok(watcher::Event::Init) => {
                    listing = Some(Vec::new());
                    None
                }
                Ok(watcher::Event::InitApply(pod)) => {
                    listing.get_or_insert_with(Vec::new).push(pod);
                    None
                }
                Ok(watcher::Event::InitDone) => {
                    Some(PodEvent::Listed(listing.take().unwrap_or_default()))
                }
                Ok(watcher::Event::Apply(pod)) => Some(PodEvent::Applied(pod)),
                Ok(watcher::Event::Delete(pod)) => Some(PodEvent::Deleted(pod)),
                Err(e) => {
                    tracing::warn!("pod watch error (retrying): {e}");
                    listing = None;
                    Some(PodEvent::Lost)
                }
            });
        Ok(Box::pin(stream))
    }

    /// EndpointSlices of the namespace, each change reported under the
    /// slice's `kubernetes.io/service-name`. A watch error is reported as
    /// [`EndpointEvent::Lost`] and retried with kube-runtime's default
    /// backoff. When the API server refuses to list EndpointSlices (Porch's
    /// Role grants only core/v1 `endpoints`; or no such API) there is no
    /// watch: a stream that never reports, so callers poll.
    async fn watch_endpoints(&self) -> Result<EndpointEventStream, PlatformError> {
        let slices: Api<EndpointSlice> = Api::namespaced(self.client.clone(), &self.namespace);
        let probe = ListParams::default().limit(1);
        match self
            .with_retries("EndpointSlice", "*", || slices.list(&probe))
            .await
        {
            Err(e @ (PlatformError::NotFound { .. } | PlatformError::Forbidden(_))) => {
                self.deny_slices(&e);
                return Ok(Box::pin(tokio_stream::pending()));
            }
            Err(e) => return Err(e),
            Ok(_) => {}
        }
        let stream = watcher(slices, watcher::Config::default())
            .default_backoff()
            .filter_map(|event| match event {
                Ok(
                    watcher::Event::Apply(s)
                    | watcher::Event::InitApply(s)
                    | watcher::Event::Delete(s),
                ) => s
                    .metadata
                    .labels
                    .as_ref()
                    .and_then(|l| l.get(SERVICE_NAME_LABEL))
                    .map(|name| EndpointEvent::Changed(name.clone())),
                Ok(watcher::Event::InitDone) => Some(EndpointEvent::Synced),
                Ok(watcher::Event::Init) => None,
                Err(e) => {
                    tracing::debug!("EndpointSlice watch error (retrying): {e}");
                    Some(EndpointEvent::Lost)
                }
            });
        Ok(Box::pin(stream))
    }

    /// Watches the namespace's `Warning` Events about pods. Where Events
    /// may not be read (Porch's Role grants none), says so once and
    /// reports nothing: pod start failures are then seen in pod status.
    async fn watch_pod_warnings(&self) -> Result<PodWarningStream, PlatformError> {
        let events: Api<Event> = Api::namespaced(self.client.clone(), &self.namespace);
        let probe = ListParams::default().fields(POD_WARNINGS).limit(1);
        match self
            .with_retries("Event", "*", || events.list(&probe))
            .await
        {
            Err(e @ (PlatformError::NotFound { .. } | PlatformError::Forbidden(_))) => {
                tracing::info!(
                    "Events are not readable here ({e}); a function pod that cannot start is seen in its status, at the kubelet's next sync of it (grant list and watch on events to fail its callers within seconds)"
                );
                return Ok(Box::pin(tokio_stream::pending()));
            }
            Err(e) => return Err(e),
            Ok(_) => {}
        }
        let config = watcher::Config::default().fields(POD_WARNINGS);
        let stream = watcher(events, config)
            .default_backoff()
            .filter_map(|event| match event {
                Ok(watcher::Event::Apply(e) | watcher::Event::InitApply(e)) => pod_warning(e),
                Ok(_) => None,
                Err(e) => {
                    tracing::debug!("Event watch error (retrying): {e}");
                    None
                }
            });
        Ok(Box::pin(stream))
    }
}

/// The Events the pod warnings come from: `Warning`s about pods.
const POD_WARNINGS: &str = "involvedObject.kind=Pod,type=Warning";

/// The container an Event's `involvedObject.fieldPath` names
/// (`spec.containers{function}`, `spec.initContainers{copy-wrapper-server}`).
fn field_path_container(path: Option<&str>) -> Option<String> {
    let path = path?;
    let start = path.find('{')? + 1;
    let end = path[start..].find('}')? + start;
    Some(path[start..end].to_string())
}

/// A pod warning from a core/v1 Event (`None` unless it is one).
fn pod_warning(e: Event) -> Option<PodWarning> {
    let o = e.involved_object;
    if o.kind.as_deref() != Some("Pod") || e.type_.as_deref() != Some("Warning") {
        return None;
    }
    Some(PodWarning {
        pod_name: o.name?,
        pod_uid: o.uid,
        container: field_path_container(o.field_path.as_deref()),
        reason: e.reason.unwrap_or_default(),
        message: e.message.unwrap_or_default(),
    })
}

/// The label that ties an EndpointSlice to its service.
const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";

fn target_pod(r: Option<&k8s_openapi::api::core::v1::ObjectReference>) -> Option<String> {
    r.filter(|r| r.kind.as_deref().is_none_or(|k| k == "Pod"))
        .and_then(|r| r.name.clone())
}

/// Flattens EndpointSlices into addresses; an absent `ready` condition
/// counts as ready (the EndpointSlice API's rule for consumers).
pub fn endpoints_from_slices(slices: &[EndpointSlice]) -> Vec<ServiceEndpoint> {
    slices
        .iter()
        .flat_map(|s| &s.endpoints)
        .flat_map(|e| {
            let ready = e.conditions.as_ref().and_then(|c| c.ready).unwrap_or(true);
            let pod_name = target_pod(e.target_ref.as_ref());
            e.addresses.iter().map(move |a| ServiceEndpoint {
                address: a.clone(),
                ready,
                pod_name: pod_name.clone(),
            })
        })
        .collect()
}

/// Flattens a core/v1 Endpoints object: `addresses` are ready,
/// `notReadyAddresses` are not; every subset counts (Porch reads only
/// `subsets[0]`, spec §10 item 13).
pub fn endpoints_from_core(e: &Endpoints) -> Vec<ServiceEndpoint> {
    let mut out = Vec::new();
    for subset in e.subsets.iter().flatten() {
        for (list, ready) in [
            (&subset.addresses, true),
            (&subset.not_ready_addresses, false),
        ] {
            for a in list.iter().flatten() {
                out.push(ServiceEndpoint {
                    address: a.ip.clone(),
                    ready,
                    pod_name: target_pod(a.target_ref.as_ref()),
                });
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::core::Status;

    fn api_error(code: u16, reason: &str) -> kube::Error {
        kube::Error::Api(Status::failure("m", reason).with_code(code).boxed())
    }

    /// Transient failures are retried up to `attempts` in all, each delay
    /// within `[d, 2d)` of its doubling base `d` (jitter), and a failure that
    /// is not transient is returned at once.
    #[tokio::test(start_paused = true)]
    async fn transient_failures_are_retried_with_jittered_doubling_delays() {
        let retry = ApiRetry {
            attempts: 4,
            first_backoff: Duration::from_millis(100),
            timeout: Duration::from_secs(10),
        };
        let mut first_delays = std::collections::BTreeSet::new();
        for _ in 0..20 {
            let calls = std::sync::Mutex::new(Vec::new());
            let start = tokio::time::Instant::now();
            let out: Result<(), PlatformError> = with_retries(retry, "Pod", "p", || {
                calls.lock().unwrap().push(start.elapsed());
                async { Err(api_error(500, "InternalError")) }
            })
            .await;
            assert!(matches!(out, Err(PlatformError::Transient(_))), "{out:?}");
            let at = calls.into_inner().unwrap();
            assert_eq!(at.len(), 4, "{at:?}");
            first_delays.insert(at[1] - at[0]);
            for (i, pair) in at.windows(2).enumerate() {
                let base = Duration::from_millis(100 << i);
                let delay = pair[1] - pair[0];
                // The timer rounds up to whole milliseconds.
                assert!(delay >= base && delay <= base * 2, "delay {i}: {delay:?}");
            }
        }
        // Jitter: the retries of calls that failed together spread out.
        assert!(first_delays.len() > 5, "{first_delays:?}");
        let calls = std::sync::atomic::AtomicU32::new(0);
        let out: Result<(), PlatformError> = with_retries(retry, "Pod", "p", || {
            calls.fetch_add(1, Ordering::SeqCst);
            async { Err(api_error(404, "NotFound")) }
        })
        .await;
        assert!(
            matches!(out, Err(PlatformError::NotFound { .. })),
            "{out:?}"
        );
        assert_eq!(calls.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn endpoints_from_slices_and_core_endpoints() {
        let slice: EndpointSlice = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "s"},
            "addressType": "IPv4",
            "endpoints": [
                {"addresses": ["10.0.0.1"], "targetRef": {"kind": "Pod", "name": "a"}},
                {"addresses": ["10.0.0.2"], "conditions": {"ready": false}},
            ],
        }))
        .unwrap();
        let eps = endpoints_from_slices(&[slice]);
        assert_eq!(eps.len(), 2);
        assert!(eps[0].ready && eps[0].pod_name.as_deref() == Some("a"));
        assert!(!eps[1].ready && eps[1].pod_name.is_none());
        let core: Endpoints = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "s"},
            "subsets": [
                {"addresses": [{"ip": "10.0.0.3", "targetRef": {"kind": "Pod", "name": "b"}}]},
                {"notReadyAddresses": [{"ip": "10.0.0.4"}]},
            ],
        }))
        .unwrap();
        let eps = endpoints_from_core(&core);
        assert_eq!(eps.len(), 2, "every subset counts");
        assert!(eps[0].ready && eps[0].pod_name.as_deref() == Some("b"));
        assert!(!eps[1].ready && eps[1].address == "10.0.0.4");
        assert!(endpoints_from_core(&Endpoints::default()).is_empty());
    }

    #[test]
    fn statuses_become_typed_errors() {
        assert!(classify("Pod", "p", api_error(404, "NotFound")).is_not_found());
        assert!(matches!(
            classify("Pod", "p", api_error(409, "AlreadyExists")),
            PlatformError::AlreadyExists { .. }
        ));
        assert!(matches!(
            classify("Pod", "p", api_error(409, "Conflict")),
            PlatformError::Conflict { .. }
        ));
        assert!(matches!(
            classify("Pod", "p", api_error(403, "Forbidden")),
            PlatformError::Forbidden(_)
        ));
        assert!(matches!(
            classify("Pod", "p", api_error(422, "Invalid")),
            PlatformError::Invalid(_)
        ));
        assert!(classify("Pod", "p", api_error(503, "ServiceUnavailable")).is_retryable());
        assert!(classify("Pod", "p", api_error(429, "TooManyRequests")).is_retryable());
    }
}
