//! The pod runtime's wiring: its settings, per-function pod settings and
//! warm-up list, templates and replica token, and [`start_pod_runtime`].

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use crate::adapters::kube::templates::watch_template_objects;
use crate::adapters::kube::{ApiRetry, KubePlatform};
use crate::adapters::oci::{CaError, InspectorConfig, OciImageInspector, PullSecretSync};
use crate::adapters::pod::connections::{DirectResolver, MapFileResolver, Resolver};
use crate::adapters::pod::{
    AddressMode, PodEvaluator, PodRuntimeConfig, PodRuntimeError, TemplateFeed,
};
use crate::domain::function_config::FunctionConfigStore;
use crate::domain::pod_cache::template::inline_templates;
use crate::domain::pod_cache::{FunctionSettings, PodCacheConfig, PodCachePolicy, PolicyError};
use crate::ports::{ImageInspector, PodPlatform, SystemClock};

use super::cluster::{KubeClientError, kube_client};

/// Porch's error when the pod runtime is enabled without its init image.
pub(super) const WRAPPER_IMAGE_MISSING: &str =
    "environment variable WRAPPER_SERVER_IMAGE must be set to use pod function evaluator runtime";

/// The default `--pod-cache-config`.
pub const DEFAULT_POD_CACHE_CONFIG: &str = "/pod-cache-config/pod-cache-config.yaml";

/// What the pod runtime needs besides the cluster: Porch's pod-runtime and
/// registry settings (the command line's flags, with Porch's names and
/// defaults), plus `WRAPPER_SERVER_IMAGE` and the settings shared with the
/// exec runtime. Each field names the flag it comes from.
#[derive(Debug, Clone, PartialEq)]
pub struct PodSettings {
    /// `--pod-namespace`: namespace for function pods, services and the
    /// pull secret (also where FunctionConfigs and template objects are read).
    pub namespace: String,
    /// `--pod-ttl`: default idle time-to-live of a function pod.
    pub ttl: Duration,
    /// `--scan-interval`: garbage-collection period of the pod cache (and
    /// how often the template ConfigMap is re-read).
    pub scan_interval: Duration,
    /// `--warm-up-pod-cache`: pre-create one pod per configured function at
    /// start-up.
    pub warm_up: bool,
    /// `--pod-cache-config`: per-function pod settings and warm-up list
    /// (`None`: [`DEFAULT_POD_CACHE_CONFIG`] if it exists); giving it selects
    /// the config.yaml generation.
    pub pod_cache_config: Option<PathBuf>,
    /// `--function-pod-template`: ConfigMap holding the pod and service
    /// templates (`NAME` in the runner's namespace, or `NAMESPACE/NAME`;
    /// empty: the inline templates); giving it selects the config.yaml
    /// generation.
    pub function_pod_template: String,
    /// `--max-waitlist-length`: load on a pod before another pod is started.
    pub max_waitlist_length: i64,
    /// `--max-parallel-pods-per-function`: most pods per function image.
    pub max_parallel_pods_per_function: i64,
    /// `--enable-private-registries`: use the Docker config at
    /// `registry_auth_secret_path` for private registries.
    pub enable_private_registries: bool,
    /// `--registry-auth-secret-path`: mounted Docker config JSON.
    pub registry_auth_secret_path: PathBuf,
    /// `--registry-auth-secret-name`: the pull secret created in the pod
    /// namespace.
    pub registry_auth_secret_name: String,
    /// `--enable-private-registries-tls`: trust the CA in `tls_secret_path`.
    pub enable_private_registries_tls: bool,
    /// `--tls-secret-path`: directory holding `ca.crt` or `ca.pem`.
    pub tls_secret_path: PathBuf,
    /// `--kubeconfig` (`None`: as kube-rs infers it).
    pub kubeconfig: Option<PathBuf>,
    /// `--max-load-per-pod`: requests a pod may carry once the function has
    /// all its pods.
    pub max_load_per_pod: u32,
    /// `--pod-ready-timeout`: how long a new function pod may take to
    /// become ready.
    pub pod_ready_timeout: Duration,
    /// `--pod-address-mode`: how the runner reaches wrapper servers.
    pub address_mode: AddressMode,
    /// `--replica-token`: this replica's short name inside pod names
    /// (`None`: random per process start).
    pub replica_token: Option<String>,
    /// `--wrapper-health-check`: in pod-ip mode, take calls once the
    /// wrapper answers a gRPC health check, before the pod is Ready.
    pub wrapper_health_check: bool,
    /// `--wrapper-address-map`: a file mapping wrapper endpoints to
    /// dialable addresses (a test seam).
    pub wrapper_address_map: Option<PathBuf>,
    /// `--wrapper-connect-timeout`: bound on connecting to a wrapper server.
    pub connect_timeout: Duration,
    /// `--api-timeout`: bound on each Kubernetes API call.
    pub api_timeout: Duration,
    /// `--tag-list-ttl`: how long a registry's tag list answers a step's
    /// tag constraint.
    pub tag_list_ttl: Duration,
    /// `--api-retries`: attempts of a transiently failing Kubernetes API
    /// call, the first included.
    pub api_retries: u32,
    /// `--api-retry-backoff`: first delay between those attempts.
    pub api_retry_backoff: Duration,
    /// `--write-retry-backoff`: first delay before the pod cache retries a
    /// failed write.
    pub write_retry_backoff: Duration,
    /// `--sync-timeout`: how long start-up waits for the watches to list
    /// their objects.
    pub sync_timeout: Duration,
    /// `--plain-http-registry`: registries reached over plain HTTP.
    pub plain_http_registries: Vec<String>,
    /// `WRAPPER_SERVER_IMAGE` (from the environment, not a flag).
    pub wrapper_image: Option<String>,
    /// `--max-request-body-size`, bytes (shared with the exec runtime).
    pub max_message_bytes: usize,
    /// `--default-image-prefix` (shared with the exec runtime).
    pub default_image_prefix: String,
}

/// Why the pod runtime could not start (before the [`PodEvaluator`]
/// itself starts: see [`PodRuntimeError`] for that).
#[derive(Debug, thiserror::Error)]
pub enum PodStartError {
    /// `WRAPPER_SERVER_IMAGE` is unset or empty (Porch's message).
    #[error("{WRAPPER_IMAGE_MISSING}")]
    WrapperImageMissing,
    /// No Kubernetes client could be made.
    #[error("the pod runtime needs a cluster: {0}")]
    NoCluster(#[source] KubeClientError),
    /// The image inspector could not be built (the registry CA).
    #[error("failed to initialize pod evaluator: {0}")]
    Inspector(#[source] CaError),
    /// `--replica-token` cannot be part of a pod name.
    #[error("--replica-token: {0}")]
    ReplicaToken(#[source] PolicyError),
    /// The pod runtime's own start-up failed (its templates, its pod watch).
    #[error(transparent)]
    Runtime(#[from] PodRuntimeError),
}

/// Where Kubernetes mounts the pod's namespace.
const SERVICE_ACCOUNT_NAMESPACE: &str = "/var/run/secrets/kubernetes.io/serviceaccount/namespace";

/// The runner's own namespace (where the template ConfigMap lives): the
/// service account's, else `porch-system` (Porch §2.3).
fn runner_namespace() -> String {
    std::fs::read_to_string(SERVICE_ACCOUNT_NAMESPACE)
        .map(|s| s.trim().to_string())
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "porch-system".into())
}

/// The images to warm at start: every configured one with
/// `--warm-up-pod-cache`, else only those with a warm-pool minimum (a
/// minimum is kept whatever that flag says).
fn warm_up_list(warm_up: bool, images: Vec<String>, policy: &PodCachePolicy) -> Vec<String> {
    images
        .into_iter()
        .filter(|image| warm_up || policy.settings_for(image).min_ready.is_some_and(|m| m > 0))
        .collect()
}

/// The config.yaml generation's per-function pod settings: `policy` with
/// the entries of `--pod-cache-config` (or its default file, if it exists),
/// and the warm-up list; problems become warnings, as in Porch.
fn pod_cache_config(
    s: &PodSettings,
    policy: PodCachePolicy,
    warnings: &mut Vec<String>,
) -> (PodCachePolicy, Vec<String>) {
    let path = s
        .pod_cache_config
        .clone()
        .unwrap_or_else(|| PathBuf::from(DEFAULT_POD_CACHE_CONFIG));
    let config = match std::fs::read(&path) {
        Ok(text) => match PodCacheConfig::parse(&text, &path.display().to_string()) {
            Ok(c) => c,
            Err(e) => {
                warnings.push(format!("{e}; using the global pod settings"));
                return (policy, Vec::new());
            }
        },
        Err(e) => {
            if e.kind() != std::io::ErrorKind::NotFound || s.warm_up {
                warnings.push(format!(
                    "cannot read --pod-cache-config {}: {e}; using the global pod settings and warming nothing",
                    path.display()
                ));
            }
            return (policy, Vec::new());
        }
    };
    warnings.extend(config.warnings.iter().cloned());
    (policy.with_config(&config), config.warm_up_images())
}

/// The config.yaml generation's templates: the ConfigMap of
/// `--function-pod-template` (runner's namespace, or `NAMESPACE/NAME`),
/// re-read every scan interval, or Porch's inline templates.
///
/// Errors: the ConfigMap cannot be read or its templates are unusable.
async fn config_yaml_templates(
    s: &PodSettings,
    platform: &Arc<dyn PodPlatform>,
    wrapper_image: &str,
) -> Result<TemplateFeed, PodStartError> {
    if s.function_pod_template.is_empty() {
        return Ok(TemplateFeed::fixed(inline_templates(wrapper_image)));
    }
    let (namespace, name) = match s.function_pod_template.split_once('/') {
        Some((namespace, name)) => (namespace.to_string(), name.to_string()),
        None => (runner_namespace(), s.function_pod_template.clone()),
    };
    TemplateFeed::config_map(platform.clone(), &namespace, &name, s.scan_interval)
        .await
        .map_err(|e| PodRuntimeError::Template(e).into())
}

/// A replica token unique per process start: 6 base-36 characters from a
/// randomly keyed hash (the standard library seeds it from the operating
/// system) of the host name, the process id and the time. A restarted
/// runner (same host name, and pid 1 in a container) gets a new token, so
/// its pod names never repeat those of its earlier run.
fn default_replica_token() -> String {
    base36_token(start_nonce(), 6)
}

/// A value unique per process start (and per call).
fn start_nonce() -> u64 {
    use std::hash::{BuildHasher, Hash, Hasher};
    let host = std::env::var("HOSTNAME")
        .ok()
        .or_else(|| std::fs::read_to_string("/etc/hostname").ok())
        .unwrap_or_default();
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    host.trim().hash(&mut h);
    std::process::id().hash(&mut h);
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_nanos()
        .hash(&mut h);
    h.finish()
}

/// `n` as `len` base-36 digits (`0-9a-z`), least significant first.
fn base36_token(mut n: u64, len: usize) -> String {
    (0..len)
        .map(|_| {
            let c = b"0123456789abcdefghijklmnopqrstuvwxyz"[(n % 36) as usize] as char;
            n /= 36;
            c
        })
        .collect()
}

/// Starts the pod runtime: Kubernetes client (`client`, or one made from
/// the settings), image inspector, pull-secret sync, pod-cache policy,
/// templates and the [`PodEvaluator`] itself. Returns it with warnings to
/// log.
///
/// With `function_configs` (the FunctionConfig generation) per-function
/// settings and the warm-up list come from those objects and the templates
/// from the PodTemplate/ServiceTemplate objects; without, from
/// `--pod-cache-config` and `--function-pod-template` (or the inline
/// templates).
///
/// Errors: `WRAPPER_SERVER_IMAGE` unset (Porch's message), no usable
/// Kubernetes configuration, an invalid replica token or registry CA, or
/// the pod runtime failing to start (templates, watch:
/// [`PodStartError::Runtime`]).
pub async fn start_pod_runtime(
    s: &PodSettings,
    client: Option<kube::Client>,
    function_configs: Option<Arc<FunctionConfigStore>>,
) -> Result<(PodEvaluator, Vec<String>), PodStartError> {
    let mut warnings = Vec::new();
    let wrapper_image = s
        .wrapper_image
        .clone()
        .filter(|w| !w.is_empty())
        .ok_or(PodStartError::WrapperImageMissing)?;
    let client = match client {
        Some(c) => c,
        None => kube_client(s.kubeconfig.as_deref())
            .await
            .map_err(PodStartError::NoCluster)?,
    };
    let retry = ApiRetry {
        attempts: s.api_retries.max(1),
        first_backoff: s.api_retry_backoff,
        timeout: s.api_timeout,
    };
    let platform: Arc<dyn PodPlatform> =
        Arc::new(KubePlatform::new(client.clone(), &s.namespace).with_retry(retry));

    let mut inspector_config = InspectorConfig::new(&s.default_image_prefix).with_registry_flags(
        s.enable_private_registries,
        s.registry_auth_secret_path.clone(),
        s.enable_private_registries_tls,
        s.tls_secret_path.clone(),
    );
    inspector_config.plain_http_registries = s.plain_http_registries.clone();
    let inspector: Arc<dyn ImageInspector> =
        Arc::new(OciImageInspector::new(inspector_config).map_err(PodStartError::Inspector)?);
    let pull_secret = s.enable_private_registries.then(|| {
        Arc::new(PullSecretSync::new(
            platform.clone(),
            &s.registry_auth_secret_name,
            s.registry_auth_secret_path.clone(),
        ))
    });

    let defaults = FunctionSettings::from_flags(
        s.ttl,
        s.max_waitlist_length,
        s.max_parallel_pods_per_function,
        s.max_load_per_pod,
    );
    let token = s
        .replica_token
        .clone()
        .unwrap_or_else(default_replica_token);
    let mut policy = PodCachePolicy::new(defaults, &token).map_err(PodStartError::ReplicaToken)?;
    policy.pod_ready_timeout = s.pod_ready_timeout;
    policy.probe_wrapper = s.wrapper_health_check;
    policy.instance = format!("{token}-{:016x}", start_nonce());
    policy.retry_backoff = s.write_retry_backoff;
    policy.retry_backoff_max = Duration::from_secs(30).max(s.write_retry_backoff);
    let warm_up;
    let templates = match function_configs {
        Some(store) => {
            let images = store.warm_up_images();
            policy = policy.with_settings_source(store);
            warm_up = warm_up_list(s.warm_up, images, &policy);
            watch_template_objects(client, &s.namespace, &wrapper_image, s.sync_timeout)
                .await
                .map_err(PodRuntimeError::Template)?
        }
        None => {
            let (with_config, images) = pod_cache_config(s, policy, &mut warnings);
            policy = with_config;
            warm_up = warm_up_list(s.warm_up, images, &policy);
            config_yaml_templates(s, &platform, &wrapper_image).await?
        }
    };
    let resolver: Box<dyn Resolver> = match &s.wrapper_address_map {
        Some(path) => Box::new(MapFileResolver::new(path.clone())),
        None => Box::new(DirectResolver),
    };
    let config = PodRuntimeConfig {
        namespace: s.namespace.clone(),
        policy,
        templates,
        wrapper_image,
        warm_up,
        scan_interval: s.scan_interval,
        address_mode: s.address_mode,
        max_message_bytes: s.max_message_bytes,
        connect_timeout: s.connect_timeout,
        api_timeout: s.api_timeout,
        default_image_prefix: s.default_image_prefix.clone(),
        tag_list_ttl: s.tag_list_ttl,
        clock: Arc::new(SystemClock),
    };
    tracing::info!(namespace = %s.namespace, replica = %token, mode = ?s.address_mode, "starting the pod runtime");
    let pod = PodEvaluator::start(config, platform, inspector, pull_secret, resolver).await?;
    Ok((pod, warnings))
}

#[cfg(test)]
impl PodSettings {
    /// The settings of `serve` without flags (Porch's defaults), for tests.
    pub(crate) fn for_tests() -> Self {
        Self {
            namespace: "porch-fn-system".into(),
            ttl: Duration::from_secs(30 * 60),
            scan_interval: Duration::from_secs(60),
            warm_up: true,
            pod_cache_config: None,
            function_pod_template: String::new(),
            max_waitlist_length: 2,
            max_parallel_pods_per_function: 1,
            enable_private_registries: false,
            registry_auth_secret_path: "/var/tmp/config-secret/.dockerconfigjson".into(),
            registry_auth_secret_name: "auth-secret".into(),
            enable_private_registries_tls: false,
            tls_secret_path: "/var/tmp/tls-secret/".into(),
            kubeconfig: None,
            max_load_per_pod: 64,
            pod_ready_timeout: Duration::from_secs(60),
            address_mode: AddressMode::Service,
            replica_token: None,
            wrapper_health_check: true,
            wrapper_address_map: None,
            connect_timeout: Duration::from_secs(5),
            api_timeout: Duration::from_secs(10),
            tag_list_ttl: Duration::from_secs(5 * 60),
            api_retries: 4,
            api_retry_backoff: Duration::from_millis(100),
            write_retry_backoff: Duration::from_secs(1),
            sync_timeout: Duration::from_secs(60),
            plain_http_registries: Vec::new(),
            wrapper_image: None,
            max_message_bytes: 1 << 20,
            default_image_prefix: String::new(),
        }
    }
}
