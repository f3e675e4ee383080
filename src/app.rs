//! The composition root: turns settings into a wired evaluator chain.
//!
//! This is the one place that knows which adapters exist and in what order
//! they are tried (exec, then pod — deterministic, unlike Porch).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use crate::adapters::exec::{ExecEvaluator, ExecSettings};
use crate::adapters::kube::KubePlatform;
use crate::adapters::oci::{InspectorConfig, OciImageInspector, PullSecretSync};
use crate::adapters::pod::connections::{DirectResolver, MapFileResolver, Resolver};
use crate::adapters::pod::{AddressMode, PodEvaluator, PodRuntimeConfig, TemplateSource};
use crate::domain::chain::EvaluatorChain;
use crate::domain::exec_config::ExecConfig;
use crate::domain::pod_cache::{FunctionSettings, PodCacheConfig, PodCachePolicy};
use crate::ports::{ImageInspector, PodPlatform};

/// The Porch runtime names accepted by `--disable-runtimes`.
pub const RUNTIMES: [&str; 2] = ["exec", "pod"];

/// What the runner needs to build its evaluators.
#[derive(Debug, Clone)]
pub struct RuntimeSettings {
    /// `--config`: the exec runtime's `config.yaml`; `None` means "the
    /// default `./config.yaml` if it exists".
    pub config: Option<PathBuf>,
    /// `--functions`: the directory holding function binaries.
    pub functions: PathBuf,
    /// Runtimes named in `--disable-runtimes`.
    pub disabled: Vec<String>,
    /// `--max-request-body-size`, bytes.
    pub max_message_bytes: usize,
    /// `--default-image-prefix`.
    pub default_image_prefix: String,
    /// `--exec-env`: extra environment for function processes.
    pub exec_env: Vec<(String, String)>,
}

/// The wired evaluator chain plus start-up warnings to log.
pub struct Runtime {
    /// Evaluators in the order they are tried.
    pub chain: EvaluatorChain,
    /// Problems worth a warning (missing binaries, duplicates, disabled runtimes…).
    pub warnings: Vec<String>,
    /// Whether the pod runtime is enabled; it is started separately
    /// ([`start_pod_runtime`]) because it needs a cluster and a Tokio runtime,
    /// and goes after the exec runtime in the chain.
    pub pod: bool,
}

/// Errors that stop the runner from starting.
#[derive(Debug, thiserror::Error)]
pub enum StartupError {
    /// `--config` could not be read.
    #[error(
        "failed to initialize executable evaluator: failed to read configuration file {path:?}: {source}"
    )]
    ReadConfig {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// `--config` could not be parsed.
    #[error("failed to initialize executable evaluator: {0}")]
    ParseConfig(#[from] crate::domain::exec_config::ExecConfigError),
    /// The pod runtime could not start.
    #[error("{0}")]
    Pod(String),
}

/// Builds the evaluator chain from `settings`.
///
/// Errors: an explicitly given `--config` that cannot be read or parsed
/// (Porch treats both as fatal).
pub fn build_runtime(settings: &RuntimeSettings) -> Result<Runtime, StartupError> {
    let mut warnings = Vec::new();
    for name in &settings.disabled {
        if !RUNTIMES.contains(&name.as_str()) {
            warnings.push(format!(
                "--disable-runtimes: unknown runtime {name:?} ignored (known: exec, pod)"
            ));
        }
    }
    let enabled = |r: &str| !settings.disabled.iter().any(|d| d == r);
    let mut chain = EvaluatorChain::new();
    if enabled("exec") {
        let (path, explicit) = match &settings.config {
            Some(p) => (p.clone(), true),
            None => (PathBuf::from("./config.yaml"), false),
        };
        let text = match std::fs::read(&path) {
            Ok(t) => t,
            Err(e) if !explicit && e.kind() == std::io::ErrorKind::NotFound => {
                warnings.push(format!(
                    "exec runtime: no --config given and {} does not exist; no function is served by exec",
                    path.display()
                ));
                Vec::new()
            }
            Err(source) => return Err(StartupError::ReadConfig { path, source }),
        };
        let config = ExecConfig::parse(&text, &path.display().to_string())?;
        // Functions run in the temporary directory, so relative paths are
        // resolved against the runner's working directory now.
        let functions =
            std::path::absolute(&settings.functions).unwrap_or_else(|_| settings.functions.clone());
        let (table, dupes) = config.table(&functions, &settings.default_image_prefix);
        warnings.extend(dupes);
        let exec = ExecEvaluator::new(
            table,
            ExecSettings::new(settings.max_message_bytes, &settings.exec_env),
        );
        warnings.extend(exec.check_binaries());
        tracing::info!(images = exec.image_count(), "exec runtime ready");
        chain = chain.with("exec", Arc::new(exec));
    }
    let pod = enabled("pod");
    if chain.names().is_empty() && !pod {
        warnings.push(
            "no runtime is enabled in krm-fn-runner: every call will fail with UNAVAILABLE".into(),
        );
    }
    Ok(Runtime {
        chain,
        warnings,
        pod,
    })
}

/// What the pod runtime needs besides the cluster (Porch's pod flags and
/// `WRAPPER_SERVER_IMAGE`).
#[derive(Debug, Clone)]
pub struct PodSettings {
    /// `--kubeconfig`; `None` lets kube-rs infer the configuration
    /// (`KUBECONFIG`, `~/.kube/config`, then in-cluster).
    pub kubeconfig: Option<PathBuf>,
    /// `--pod-namespace`.
    pub namespace: String,
    /// `--pod-ttl`.
    pub ttl: Duration,
    /// `--scan-interval`.
    pub scan_interval: Duration,
    /// `--warm-up-pod-cache`.
    pub warm_up: bool,
    /// `--pod-cache-config`: read if it exists.
    pub pod_cache_config: PathBuf,
    /// `--function-pod-template`: ConfigMap name in the runner's namespace,
    /// `<namespace>/<name>` elsewhere, or empty for the inline templates.
    pub function_pod_template: String,
    /// `--max-waitlist-length` (≤ 0 means 2, as in Porch).
    pub max_waitlist_length: i64,
    /// `--max-parallel-pods-per-function` (≤ 0 means 1, as in Porch).
    pub max_parallel_pods_per_function: i64,
    /// `--max-load-per-pod`.
    pub max_load_per_pod: u32,
    /// `--pod-ready-timeout`.
    pub pod_ready_timeout: Duration,
    /// `--replica-token`; derived from the host name and process id when unset.
    pub replica_token: Option<String>,
    /// `--pod-address-mode`.
    pub address_mode: AddressMode,
    /// `--wrapper-address-map`.
    pub wrapper_address_map: Option<PathBuf>,
    /// `--wrapper-connect-timeout`.
    pub connect_timeout: Duration,
    /// `WRAPPER_SERVER_IMAGE`.
    pub wrapper_image: Option<String>,
    /// `--max-request-body-size`, bytes.
    pub max_message_bytes: usize,
    /// `--default-image-prefix`.
    pub default_image_prefix: String,
    /// `--enable-private-registries`.
    pub enable_private_registries: bool,
    /// `--registry-auth-secret-path`.
    pub registry_auth_secret_path: PathBuf,
    /// `--registry-auth-secret-name`.
    pub registry_auth_secret_name: String,
    /// `--enable-private-registries-tls`.
    pub enable_private_registries_tls: bool,
    /// `--tls-secret-path`.
    pub tls_secret_path: PathBuf,
    /// `--plain-http-registry`: registries reached over plain HTTP.
    pub plain_http_registries: Vec<String>,
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

/// A replica token from the host name (the pod name in a Deployment) and
/// the process id: 6 base-36 characters.
fn default_replica_token() -> String {
    use std::hash::{Hash, Hasher};
    let host = std::env::var("HOSTNAME")
        .ok()
        .or_else(|| std::fs::read_to_string("/etc/hostname").ok())
        .unwrap_or_default();
    let mut h = std::collections::hash_map::DefaultHasher::new();
    host.trim().hash(&mut h);
    std::process::id().hash(&mut h);
    let mut n = h.finish();
    (0..6)
        .map(|_| {
            let c = b"0123456789abcdefghijklmnopqrstuvwxyz"[(n % 36) as usize] as char;
            n /= 36;
            c
        })
        .collect()
}

/// Starts the pod runtime: Kubernetes client, image inspector, pull-secret
/// sync, pod-cache policy and the [`PodEvaluator`] itself. Returns it with
/// warnings to log.
///
/// Errors: `WRAPPER_SERVER_IMAGE` unset (Porch's message), no usable
/// Kubernetes configuration, an invalid replica token or registry CA, or the
/// pod runtime failing to start (template, watch).
pub async fn start_pod_runtime(
    s: &PodSettings,
) -> Result<(PodEvaluator, Vec<String>), StartupError> {
    let pod_err = |m: String| StartupError::Pod(m);
    let mut warnings = Vec::new();
    let wrapper_image = s.wrapper_image.clone().filter(|w| !w.is_empty()).ok_or_else(|| {
        pod_err(
            "environment variable WRAPPER_SERVER_IMAGE must be set to use pod function evaluator runtime"
                .into(),
        )
    })?;
    let client = match &s.kubeconfig {
        Some(path) => {
            let kubeconfig = kube::config::Kubeconfig::read_from(path).map_err(|e| {
                pod_err(format!("cannot read --kubeconfig {}: {e}", path.display()))
            })?;
            let config = kube::Config::from_custom_kubeconfig(
                kubeconfig,
                &kube::config::KubeConfigOptions::default(),
            )
            .await
            .map_err(|e| pod_err(format!("invalid --kubeconfig {}: {e}", path.display())))?;
            kube::Client::try_from(config)
        }
        None => kube::Client::try_default().await,
    }
    .map_err(|e| {
        pod_err(format!(
            "no usable Kubernetes configuration for the pod runtime (in-cluster, KUBECONFIG or --kubeconfig): {e}"
        ))
    })?;
    let platform: Arc<dyn PodPlatform> = Arc::new(KubePlatform::new(client, &s.namespace));

    let mut inspector_config = InspectorConfig::new(&s.default_image_prefix).with_registry_flags(
        s.enable_private_registries,
        s.registry_auth_secret_path.clone(),
        s.enable_private_registries_tls,
        s.tls_secret_path.clone(),
    );
    inspector_config.plain_http_registries = s.plain_http_registries.clone();
    let inspector: Arc<dyn ImageInspector> = Arc::new(
        OciImageInspector::new(inspector_config)
            .map_err(|e| pod_err(format!("failed to initialize pod evaluator: {e}")))?,
    );
    let pull_secret = s.enable_private_registries.then(|| {
        Arc::new(PullSecretSync::new(
            platform.clone(),
            &s.registry_auth_secret_name,
            s.registry_auth_secret_path.clone(),
        ))
    });

    let defaults = FunctionSettings {
        ttl: s.ttl,
        max_waitlist: if s.max_waitlist_length <= 0 {
            2
        } else {
            u32::try_from(s.max_waitlist_length).unwrap_or(u32::MAX)
        },
        max_parallel_pods: if s.max_parallel_pods_per_function <= 0 {
            1
        } else {
            u32::try_from(s.max_parallel_pods_per_function).unwrap_or(u32::MAX)
        },
        max_load_per_pod: s.max_load_per_pod,
        resources: None,
        ..FunctionSettings::default()
    };
    let token = s
        .replica_token
        .clone()
        .unwrap_or_else(default_replica_token);
    let mut policy = PodCachePolicy::new(defaults, &token)
        .map_err(|e| pod_err(format!("--replica-token: {e}")))?;
    policy.pod_ready_timeout = s.pod_ready_timeout;
    let cache_config = match std::fs::read(&s.pod_cache_config) {
        Ok(text) => match PodCacheConfig::parse(&text, &s.pod_cache_config.display().to_string()) {
            Ok(c) => Some(c),
            Err(e) => {
                warnings.push(format!("{e}; using the global pod settings"));
                None
            }
        },
        Err(e) => {
            if e.kind() != std::io::ErrorKind::NotFound || s.warm_up {
                warnings.push(format!(
                    "cannot read --pod-cache-config {}: {e}; using the global pod settings and warming nothing",
                    s.pod_cache_config.display()
                ));
            }
            None
        }
    };
    let mut warm_up = Vec::new();
    if let Some(c) = &cache_config {
        warnings.extend(c.warnings.iter().cloned());
        policy = policy.with_config(c);
        if s.warm_up {
            warm_up = c.warm_up_images();
        }
    }
    let templates = match s.function_pod_template.split_once('/') {
        _ if s.function_pod_template.is_empty() => TemplateSource::Inline,
        Some((namespace, name)) => TemplateSource::ConfigMap {
            namespace: namespace.to_string(),
            name: name.to_string(),
        },
        None => TemplateSource::ConfigMap {
            namespace: runner_namespace(),
            name: s.function_pod_template.clone(),
        },
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
        default_image_prefix: s.default_image_prefix.clone(),
    };
    tracing::info!(namespace = %s.namespace, replica = %token, mode = ?s.address_mode, "starting the pod runtime");
    let pod = PodEvaluator::start(config, platform, inspector, pull_secret, resolver)
        .await
        .map_err(|e| pod_err(e.to_string()))?;
    Ok((pod, warnings))
}
