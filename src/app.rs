//! The composition root: turns settings into a wired evaluator chain.
//!
//! This is the one place that knows which adapters exist and in what order
//! they are tried (exec, then pod — deterministic, unlike Porch; for
//! `render`: builtins, local binaries, a function runner, `exec:` commands;
//! for `eval` and the wrapper server: see [`build_eval_evaluator`] and
//! [`build_wrapper_evaluator`]), and which
//! of Porch's two configuration generations the runner serves
//! ([`choose_generation`]): `config.yaml` + `pod-cache-config.yaml` +
//! template ConfigMap, or the FunctionConfig CRD + template objects.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use crate::adapters::admission::{Admission, AdmittedEvaluator, AdmittedRuntime};
use crate::adapters::exec::wrapper::EmptyEntrypoint;
use crate::adapters::exec::{ExecEvaluator, ExecSettings, WrapperEvaluator};
use crate::adapters::grpc::RemoteEvaluator;
use crate::adapters::kube::function_configs::{
    FunctionConfigWatch, FunctionConfigWatchError, crd_installed,
};
use crate::adapters::kube::templates::watch_template_objects;
use crate::adapters::kube::{ApiRetry, KubePlatform};
use crate::adapters::oci::{InspectorConfig, OciImageInspector, PullSecretSync};
use crate::adapters::pod::connections::{DirectResolver, MapFileResolver, Resolver};
use crate::adapters::pod::{
    AddressMode, PodEvaluator, PodRuntimeConfig, PodRuntimeError, TemplateFeed,
};
use crate::adapters::runtime::{
    BuiltinRuntime, DeadlineRuntime, EvaluatorRuntime, ExecCommandRuntime, NextStepOnNotFound,
    RuntimeChain,
};
use crate::domain::chain::EvaluatorChain;
use crate::domain::exec_config::ExecConfig;
use crate::domain::function_config::{FunctionConfigStore, GROUP, PLURAL};
use crate::domain::pod_cache::template::inline_templates;
use crate::domain::pod_cache::{FunctionSettings, PodCacheConfig, PodCachePolicy};
use crate::ports::{FunctionEvaluator, ImageInspector, PodPlatform, SystemClock};

/// Porch's error when the pod runtime is enabled without its init image.
const WRAPPER_IMAGE_MISSING: &str =
    "environment variable WRAPPER_SERVER_IMAGE must be set to use pod function evaluator runtime";

/// The default `--config` of the config.yaml generation.
const DEFAULT_CONFIG: &str = "./config.yaml";
/// The default `--pod-cache-config`.
pub const DEFAULT_POD_CACHE_CONFIG: &str = "/pod-cache-config/pod-cache-config.yaml";

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
    /// `--max-concurrent-functions`, `--max-queued-functions`.
    pub slots: crate::adapters::exec::FunctionSlots,
    /// `--sandbox-allow`: sandbox layers every exec function may do without.
    pub sandbox_allow: crate::adapters::exec::SandboxAllow,
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
    /// The pod runtime's own start-up failed (its templates, its pod watch).
    #[error(transparent)]
    PodRuntime(#[from] PodRuntimeError),
    /// Neither configuration generation can work (the message says why
    /// and names both ways to fix it).
    #[error("{0}")]
    Generation(String),
    /// The FunctionConfigs could not be read (FunctionConfig generation).
    #[error("failed to read the FunctionConfigs: {0}")]
    FunctionConfigs(#[source] FunctionConfigWatchError),
}

/// Which of Porch's configuration surfaces the runner serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Generation {
    /// Porch's config.yaml era: `--config` (exec), `--pod-cache-config`
    /// (per-function pod settings and warm-up), `--function-pod-template`
    /// (a template ConfigMap) or the inline templates.
    ConfigYaml,
    /// Porch as it ships today: `FunctionConfig` objects in
    /// `--pod-namespace` (exec binaries and pod settings, followed live),
    /// and the `PodTemplate`/`ServiceTemplate` objects there.
    FunctionConfig,
}

impl std::fmt::Display for Generation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Generation::ConfigYaml => "config.yaml",
            Generation::FunctionConfig => "FunctionConfig",
        })
    }
}

/// The generation chosen, why, and the cluster client made on the way.
pub struct GenerationChoice {
    /// The generation.
    pub generation: Generation,
    /// Why, for the start-up log.
    pub reason: String,
    /// The Kubernetes client, if one was made.
    pub client: Option<kube::Client>,
}

/// The end of the error when no generation can work.
fn both_options() -> String {
    format!(
        "either give --config FILE (and --functions DIR), --pod-cache-config or --function-pod-template for the config.yaml generation, or run with access to a cluster (in-cluster, KUBECONFIG or --kubeconfig) where Porch's FunctionConfig CRD ({PLURAL}.{GROUP}) is installed for the FunctionConfig generation"
    )
}

/// Chooses the configuration generation (Porch has one per release; the
/// runner serves both):
/// - any of `--config`, `--pod-cache-config`, `--function-pod-template`
///   given → config.yaml, no cluster asked;
/// - otherwise the FunctionConfig generation when the cluster serves the
///   FunctionConfig CRD (API discovery), else config.yaml with its defaults
///   (`./config.yaml` if it exists, inline templates).
///
/// `pod_enabled` says whether the pod runtime will run: without it and
/// without a cluster, config.yaml works only if `./config.yaml` exists.
///
/// Errors: no generation can serve anything (no cluster and no config file,
/// an unreachable cluster while the pod runtime is on or no config file
/// exists, or exec only with neither the CRD nor a config file) — the
/// message names both ways out.
pub async fn choose_generation(
    settings: &RuntimeSettings,
    pod: &PodSettings,
    pod_enabled: bool,
) -> Result<GenerationChoice, StartupError> {
    let mut explicit = Vec::new();
    if settings.config.is_some() {
        explicit.push("--config");
    }
    if pod.pod_cache_config.is_some() {
        explicit.push("--pod-cache-config");
    }
    if !pod.function_pod_template.is_empty() {
        explicit.push("--function-pod-template");
    }
    if !explicit.is_empty() {
        return Ok(GenerationChoice {
            generation: Generation::ConfigYaml,
            reason: format!("{} given", explicit.join(", ")),
            client: None,
        });
    }
    let config_file = Path::new(DEFAULT_CONFIG).is_file();
    let client = match kube_client(pod.kubeconfig.as_deref()).await {
        Ok(c) => c,
        Err(e) if !pod_enabled && config_file => {
            return Ok(GenerationChoice {
                generation: Generation::ConfigYaml,
                reason: format!("{DEFAULT_CONFIG} exists and there is no cluster ({e})"),
                client: None,
            });
        }
        Err(e) => {
            let needs = if pod_enabled {
                "the pod runtime and the FunctionConfig generation need a cluster"
            } else {
                "the exec runtime reads FunctionConfigs from a cluster when no --config is given"
            };
            return Err(StartupError::Generation(format!(
                "no configuration to serve: no --config given, {needs}, and there is none ({e}); {}",
                both_options()
            )));
        }
    };
    match crd_installed(&client).await {
        Ok(true) => Ok(GenerationChoice {
            generation: Generation::FunctionConfig,
            reason: format!("no config.yaml flags given and the cluster serves {PLURAL}.{GROUP}"),
            client: Some(client),
        }),
        Ok(false) if pod_enabled || config_file => Ok(GenerationChoice {
            generation: Generation::ConfigYaml,
            reason: format!(
                "no config.yaml flags given and the cluster does not serve {PLURAL}.{GROUP} (Porch's FunctionConfig CRD is not installed)"
            ),
            client: Some(client),
        }),
        Ok(false) => Err(StartupError::Generation(format!(
            "nothing to serve: the exec runtime has no --config, {DEFAULT_CONFIG} does not exist and the cluster does not serve {PLURAL}.{GROUP}; {}",
            both_options()
        ))),
        Err(e) if !pod_enabled && config_file => Ok(GenerationChoice {
            generation: Generation::ConfigYaml,
            reason: format!(
                "{DEFAULT_CONFIG} exists and the cluster cannot be asked whether it serves {PLURAL}.{GROUP} ({e})"
            ),
            client: None,
        }),
        Err(e) => Err(StartupError::Generation(format!(
            "cannot ask the cluster whether Porch's FunctionConfig CRD is installed: {e}; {}",
            both_options()
        ))),
    }
}

/// A Kubernetes client from `--kubeconfig`, or as kube-rs infers it
/// (`KUBECONFIG`, `~/.kube/config`, then in-cluster).
///
/// Errors: the file cannot be read or used, or no configuration exists.
pub async fn kube_client(kubeconfig: Option<&Path>) -> Result<kube::Client, String> {
    match kubeconfig {
        Some(path) => {
            let kubeconfig = kube::config::Kubeconfig::read_from(path)
                .map_err(|e| format!("cannot read --kubeconfig {}: {e}", path.display()))?;
            let config = kube::Config::from_custom_kubeconfig(
                kubeconfig,
                &kube::config::KubeConfigOptions::default(),
            )
            .await
            .map_err(|e| format!("invalid --kubeconfig {}: {e}", path.display()))?;
            kube::Client::try_from(config).map_err(|e| e.to_string())
        }
        None => kube::Client::try_default().await.map_err(|e| {
            format!(
                "no usable Kubernetes configuration (in-cluster, KUBECONFIG or --kubeconfig): {e}"
            )
        }),
    }
}

/// Everything `serve` runs: the chain and what keeps it configured.
pub struct Started {
    /// Evaluators in the order they are tried.
    pub chain: EvaluatorChain,
    /// The pod runtime, when enabled (its readiness gates the health
    /// service; it is shut down with the server).
    pub pod: Option<Arc<PodEvaluator>>,
    /// Problems worth a warning.
    pub warnings: Vec<String>,
    /// The FunctionConfig watch (FunctionConfig generation); dropping it
    /// stops following changes.
    pub function_configs: Option<FunctionConfigWatch>,
}

/// Builds everything `serve` runs: chooses the generation, then the exec
/// runtime and (when enabled) the pod runtime for it. In the FunctionConfig
/// generation the FunctionConfigs are listed first, so warm-up and the
/// first call see them; later changes reach the exec runtime and the pod
/// cache at once.
///
/// Errors: see [`choose_generation`], [`build_runtime`],
/// [`start_pod_runtime`], and FunctionConfigs that cannot be listed.
pub async fn start_runtimes(
    settings: &RuntimeSettings,
    pod: &PodSettings,
) -> Result<Started, StartupError> {
    let enabled = |r: &str| !settings.disabled.iter().any(|d| d == r);
    if enabled("pod") && pod.wrapper_image.as_deref().is_none_or(str::is_empty) {
        return Err(StartupError::Pod(WRAPPER_IMAGE_MISSING.into()));
    }
    let choice = choose_generation(settings, pod, enabled("pod")).await?;
    tracing::info!(
        generation = %choice.generation,
        reason = %choice.reason,
        "serving the {} generation of Porch's configuration",
        choice.generation
    );
    if choice.generation == Generation::ConfigYaml {
        let runtime = build_runtime(settings)?;
        if enabled("exec") {
            crate::adapters::exec::process::start_resident();
        }
        let mut warnings = runtime.warnings;
        let mut chain = runtime.chain;
        let mut pod_runtime = None;
        if runtime.pod {
            let (p, w) = start_pod_runtime(pod, choice.client, None).await?;
            warnings.extend(w);
            let p = Arc::new(p);
            chain = chain.with("pod", p.clone());
            pod_runtime = Some(p);
        }
        return Ok(Started {
            chain,
            pod: pod_runtime,
            warnings,
            function_configs: None,
        });
    }
    let client = choice
        .client
        .expect("the FunctionConfig generation has a client");
    let mut warnings = unknown_runtimes(settings);
    let functions = absolute(&settings.functions);
    let watch = FunctionConfigWatch::start(
        client.clone(),
        &pod.namespace,
        FunctionConfigStore::new(&functions, &settings.default_image_prefix),
        pod.sync_timeout,
    )
    .await
    .map_err(StartupError::FunctionConfigs)?;
    let mut updates = watch.subscribe();
    let store = updates.borrow_and_update().clone();
    tracing::info!(
        namespace = %pod.namespace,
        objects = store.len(),
        "FunctionConfigs listed"
    );
    let mut chain = EvaluatorChain::new();
    if enabled("exec") {
        // Missing binaries are reported by the watch, also for later changes.
        let mut exec_settings = ExecSettings::new(settings.max_message_bytes, &settings.exec_env);
        exec_settings.sandbox.allow = settings.sandbox_allow;
        let exec = ExecEvaluator::with_catalog(watch.catalog(), exec_settings);
        chain = chain.with("exec", Arc::new(exec));
        crate::adapters::exec::process::start_resident();
    }
    let mut pod_runtime = None;
    if enabled("pod") {
        let (p, w) = start_pod_runtime(pod, Some(client), Some(store)).await?;
        warnings.extend(w);
        let p = Arc::new(p);
        chain = chain.with("pod", p.clone());
        let weak = Arc::downgrade(&p);
        tokio::spawn(async move {
            while updates.changed().await.is_ok() {
                let store = updates.borrow_and_update().clone();
                match weak.upgrade() {
                    Some(p) => p.update_function_configs(store),
                    None => return,
                }
            }
        });
        pod_runtime = Some(p);
    }
    if chain.names().is_empty() {
        warnings.push(
            "no runtime is enabled in krm-fn-runner: every call will fail with UNAVAILABLE".into(),
        );
    }
    Ok(Started {
        chain,
        pod: pod_runtime,
        warnings,
        function_configs: Some(watch),
    })
}

/// Warnings for `--disable-runtimes` names that are not runtimes.
fn unknown_runtimes(settings: &RuntimeSettings) -> Vec<String> {
    settings
        .disabled
        .iter()
        .filter(|name| !RUNTIMES.contains(&name.as_str()))
        .map(|name| {
            format!("--disable-runtimes: unknown runtime {name:?} ignored (known: exec, pod)")
        })
        .collect()
}

/// `path` made absolute against the working directory (functions run in
/// the temporary directory).
fn absolute(path: &Path) -> PathBuf {
    std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf())
}

/// Builds the evaluator chain from `settings`.
///
/// Errors: an explicitly given `--config` that cannot be read or parsed
/// (Porch treats both as fatal).
pub fn build_runtime(settings: &RuntimeSettings) -> Result<Runtime, StartupError> {
    let mut warnings = unknown_runtimes(settings);
    let enabled = |r: &str| !settings.disabled.iter().any(|d| d == r);
    let mut chain = EvaluatorChain::new();
    if enabled("exec") {
        let (path, explicit) = match &settings.config {
            Some(p) => (p.clone(), true),
            None => (PathBuf::from(DEFAULT_CONFIG), false),
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
        warnings.extend(config.warnings.iter().cloned());
        // Functions run in the temporary directory, so relative paths are
        // resolved against the runner's working directory now.
        let functions = absolute(&settings.functions);
        let (table, dupes) = config.table(&functions, &settings.default_image_prefix);
        warnings.extend(dupes);
        let mut exec_settings = ExecSettings::new(settings.max_message_bytes, &settings.exec_env);
        exec_settings.slots = settings.slots.clone();
        exec_settings.sandbox.allow = settings.sandbox_allow;
        let exec = ExecEvaluator::new(table, exec_settings);
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

/// How `render` runs functions: its flags.
#[derive(Debug, Clone)]
pub struct RenderRuntimeSettings {
    /// `--image-prefix`: prefix for short image names.
    pub image_prefix: String,
    /// `--exec-config`: an exec-runtime `config.yaml` mapping images to local binaries.
    pub exec_config: Option<PathBuf>,
    /// `--functions`: the directory holding the binaries of `exec_config`.
    pub functions: PathBuf,
    /// `--function-runner`: a function runner (host:port or unix:/path) for images.
    pub function_runner: Option<String>,
    /// `--max-message-size`: largest ResourceList a function may read or write, bytes.
    pub max_message_bytes: usize,
    /// `--admission-policy`: allow/deny rules checked before every `image:` step.
    pub admission_policy: Option<PathBuf>,
    /// `--plain-http-registry`: registries reached over plain HTTP when listing tags.
    pub plain_http_registries: Vec<String>,
    /// `--sandbox-allow`: sandbox layers every exec function may do without.
    pub sandbox_allow: crate::adapters::exec::SandboxAllow,
}

/// `render`'s wired function runtime and the tag lister for `tag` constraints.
pub struct RenderRuntime {
    /// The admission policy first (a denied step starts nothing), then the
    /// step's time limit, then the chain of [`render_chain`] (with a next
    /// step in the message of an image nothing serves).
    pub runtime: AdmittedRuntime<DeadlineRuntime>,
    /// Lists a registry's tags (with the Docker config's credentials, as kpt
    /// through its container CLI) to resolve a step's `tag` constraint.
    pub tags: Arc<OciImageInspector>,
}

/// Wires `render`'s runtime from its flags.
///
/// Errors: an exec config that cannot be read or parsed, a function-runner
/// address that does not parse, a registry client that cannot be built, an
/// admission policy that cannot be read; each as the message to print.
pub fn build_render_runtime(settings: &RenderRuntimeSettings) -> Result<RenderRuntime, String> {
    let chain = render_chain(settings).map_err(|e| e.to_string())?;
    let tags = OciImageInspector::new(InspectorConfig {
        plain_http_registries: settings.plain_http_registries.clone(),
        ..InspectorConfig::new(&settings.image_prefix)
    })
    .map_err(|e| e.to_string())?;
    let admission =
        Admission::from_option(settings.admission_policy.as_deref(), &settings.image_prefix)?;
    let runtime = NextStepOnNotFound::new(
        chain,
        BuiltinRuntime::new(&settings.image_prefix),
        settings.exec_config.clone(),
        settings.function_runner.clone(),
    );
    Ok(RenderRuntime {
        runtime: AdmittedRuntime::new(DeadlineRuntime::new(Arc::new(runtime)), Arc::new(admission)),
        tags: Arc::new(tags),
    })
}

/// The runtime chain: builtins, then local binaries for images, then a
/// function runner, then `exec:` commands.
fn render_chain(args: &RenderRuntimeSettings) -> anyhow::Result<RuntimeChain> {
    let mut chain =
        RuntimeChain::new().with("builtin", Arc::new(BuiltinRuntime::new(&args.image_prefix)));
    if let Some(config) = &args.exec_config {
        // The exec runtime exactly as `serve --config` builds it.
        let runtime = build_runtime(&RuntimeSettings {
            config: Some(config.clone()),
            functions: args.functions.clone(),
            disabled: vec!["pod".into()],
            max_message_bytes: args.max_message_bytes,
            default_image_prefix: args.image_prefix.clone(),
            exec_env: Vec::new(),
            slots: Default::default(),
            sandbox_allow: args.sandbox_allow,
        })?;
        for warning in &runtime.warnings {
            tracing::warn!("{warning}");
        }
        let images = EvaluatorRuntime::new(Arc::new(runtime.chain));
        chain = chain.with("exec-images", Arc::new(images));
    }
    if let Some(address) = &args.function_runner {
        let remote = EvaluatorRuntime::remote(address, args.max_message_bytes)?;
        chain = chain.with("function-runner", Arc::new(remote));
    }
    Ok(chain.with(
        "exec",
        Arc::new(
            ExecCommandRuntime::inheriting(args.max_message_bytes)
                .with_sandbox_allow(args.sandbox_allow),
        ),
    ))
}

/// `eval`'s evaluator: a function runner at `address`, else the local exec
/// runtime of `runtime` (pod runtime disabled); the admission policy of
/// `admission_policy` in front of either. Start-up warnings are logged.
///
/// Errors: an address that does not parse or an exec config that cannot be
/// read ([`EvalSetupError::Runtime`]); an admission policy that cannot be
/// read ([`EvalSetupError::Admission`]).
pub fn build_eval_evaluator(
    address: Option<&str>,
    runtime: &RuntimeSettings,
    admission_policy: Option<&Path>,
) -> Result<AdmittedEvaluator, EvalSetupError> {
    let evaluator: Arc<dyn FunctionEvaluator> = match address {
        Some(addr) => Arc::new(
            RemoteEvaluator::new(addr, runtime.max_message_bytes).map_err(anyhow::Error::from)?,
        ),
        None => {
            let runtime = build_runtime(runtime)?;
            for w in &runtime.warnings {
                tracing::warn!("{w}");
            }
            Arc::new(runtime.chain)
        }
    };
    let admission = Admission::from_option(admission_policy, &runtime.default_image_prefix)
        .map_err(EvalSetupError::Admission)?;
    Ok(AdmittedEvaluator::new(evaluator, Arc::new(admission)))
}

/// `evaluator` behind the admission policy `admission`; without a policy
/// the evaluator serves directly (nothing to check).
pub fn admitted(
    evaluator: Arc<dyn FunctionEvaluator>,
    admission: Option<Admission>,
) -> Arc<dyn FunctionEvaluator> {
    match admission {
        Some(a) => Arc::new(AdmittedEvaluator::new(evaluator, Arc::new(a))),
        None => evaluator,
    }
}

/// Why `eval` could not wire its evaluator.
#[derive(Debug, thiserror::Error)]
pub enum EvalSetupError {
    /// The runtime could not be built (address, exec config).
    #[error(transparent)]
    Runtime(#[from] anyhow::Error),
    /// The admission policy could not be read.
    #[error("{0}")]
    Admission(String),
}

impl From<StartupError> for EvalSetupError {
    fn from(e: StartupError) -> Self {
        Self::Runtime(e.into())
    }
}

/// The wrapper server's evaluator: the function `entrypoint` run as a child
/// process with the scrubbed environment plus `exec_env` and the
/// container's `PATH`, in the wrapper's working directory (the function
/// image's `WORKDIR`, as Porch's wrapper runs it: a `FROM scratch` image
/// has no `/tmp`), within `slots`. Porch's function processes inherit the
/// container's whole environment instead.
///
/// Errors: an empty entrypoint.
pub fn build_wrapper_evaluator(
    entrypoint: Vec<std::ffi::OsString>,
    max_message_bytes: usize,
    exec_env: &[(String, String)],
    slots: crate::adapters::exec::FunctionSlots,
    sandbox_allow: crate::adapters::exec::SandboxAllow,
) -> Result<WrapperEvaluator, EmptyEntrypoint> {
    let mut env = exec_env.to_vec();
    if let Ok(path) = std::env::var("PATH") {
        env.insert(0, ("PATH".into(), path));
    }
    let mut settings = ExecSettings::new(max_message_bytes, &env);
    if let Ok(dir) = std::env::current_dir() {
        settings.work_dir = dir;
    }
    settings.slots = slots;
    settings.sandbox = crate::adapters::exec::Sandbox::wrapper(sandbox_allow);
    WrapperEvaluator::new(entrypoint, settings)
}

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
) -> Result<TemplateFeed, StartupError> {
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
/// Kubernetes configuration, an invalid replica token or registry CA, or the
/// pod runtime failing to start (templates, watch).
pub async fn start_pod_runtime(
    s: &PodSettings,
    client: Option<kube::Client>,
    function_configs: Option<Arc<FunctionConfigStore>>,
) -> Result<(PodEvaluator, Vec<String>), StartupError> {
    let pod_err = |m: String| StartupError::Pod(m);
    let mut warnings = Vec::new();
    let wrapper_image = s
        .wrapper_image
        .clone()
        .filter(|w| !w.is_empty())
        .ok_or_else(|| pod_err(WRAPPER_IMAGE_MISSING.into()))?;
    let client = match client {
        Some(c) => c,
        None => kube_client(s.kubeconfig.as_deref())
            .await
            .map_err(|e| pod_err(format!("the pod runtime needs a cluster: {e}")))?,
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
    let mut policy = PodCachePolicy::new(defaults, &token)
        .map_err(|e| pod_err(format!("--replica-token: {e}")))?;
    policy.pod_ready_timeout = s.pod_ready_timeout;
    policy.probe_wrapper = s.wrapper_health_check;
    policy.instance = format!("{token}-{:016x}", start_nonce());
    policy.retry_backoff = s.write_retry_backoff;
    policy.retry_backoff_max = Duration::from_secs(30).max(s.write_retry_backoff);
    let warm_up;
    let templates = match function_configs {
        Some(store) => {
            let images = store.warm_up_images();
            policy = policy.with_function_configs(store);
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
