//! `serve`'s runtime wiring: the exec runtime from `config.yaml`
//! ([`build_runtime`]), and everything `serve` runs in either configuration
//! generation ([`start_runtimes`]).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::adapters::exec::{ExecEvaluator, ExecSettings};
use crate::adapters::kube::function_configs::{FunctionConfigWatch, FunctionConfigWatchError};
use crate::adapters::pod::{PodEvaluator, PodRuntimeError};
use crate::domain::chain::EvaluatorChain;
use crate::domain::exec_config::ExecConfig;
use crate::domain::function_config::FunctionConfigStore;

use super::generation::{Generation, GenerationError, choose_generation};
use super::pod::{PodSettings, PodStartError, start_pod_runtime};
use super::settings::{DEFAULT_CONFIG, RUNTIMES, RuntimeSettings};

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
    /// The pod runtime could not start (no `WRAPPER_SERVER_IMAGE`, no
    /// cluster, a bad registry CA or replica token).
    #[error(transparent)]
    Pod(PodStartError),
    /// The pod runtime's own start-up failed (its templates, its pod watch).
    #[error(transparent)]
    PodRuntime(#[from] PodRuntimeError),
    /// Neither configuration generation can work (the message says why
    /// and names both ways to fix it).
    #[error(transparent)]
    Generation(#[from] GenerationError),
    /// The FunctionConfigs could not be read (FunctionConfig generation).
    #[error("failed to read the FunctionConfigs: {0}")]
    FunctionConfigs(#[source] FunctionConfigWatchError),
}

impl From<PodStartError> for StartupError {
    /// The pod runtime's own start-up failures ([`PodStartError::Runtime`])
    /// are [`StartupError::PodRuntime`]; the rest [`StartupError::Pod`].
    fn from(e: PodStartError) -> Self {
        match e {
            PodStartError::Runtime(e) => StartupError::PodRuntime(e),
            other => StartupError::Pod(other),
        }
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

/// The warning when every runtime is disabled.
const NO_RUNTIME: &str =
    "no runtime is enabled in krm-fn-runner: every call will fail with UNAVAILABLE";

/// Builds everything `serve` runs: chooses the generation, then the exec
/// runtime and (when enabled) the pod runtime for it. In the FunctionConfig
/// generation the FunctionConfigs are listed first, so warm-up and the
/// first call see them; later changes reach the exec runtime and the pod
/// cache at once.
///
/// Errors: the pod runtime enabled without `WRAPPER_SERVER_IMAGE` (checked
/// first, as Porch does), and see [`choose_generation`], [`build_runtime`],
/// [`start_pod_runtime`], and FunctionConfigs that cannot be listed.
pub async fn start_runtimes(
    settings: &RuntimeSettings,
    pod: &PodSettings,
) -> Result<Started, StartupError> {
    if settings.enabled("pod") && pod.wrapper_image.as_deref().is_none_or(str::is_empty) {
        return Err(PodStartError::WrapperImageMissing.into());
    }
    let choice = choose_generation(settings, pod, settings.enabled("pod")).await?;
    tracing::info!(
        generation = %choice.generation,
        reason = %choice.reason,
        "serving the {} generation of Porch's configuration",
        choice.generation
    );
    match choice.generation {
        Generation::ConfigYaml => start_config_yaml(settings, pod, choice.client).await,
        Generation::FunctionConfig => {
            let client = choice
                .client
                .expect("the FunctionConfig generation has a client");
            start_function_config(settings, pod, client).await
        }
    }
}

/// [`start_runtimes`] in the config.yaml generation: [`build_runtime`],
/// then the pod runtime with `--pod-cache-config` and the template
/// ConfigMap or inline templates, reusing `client` if one was made.
async fn start_config_yaml(
    settings: &RuntimeSettings,
    pod: &PodSettings,
    client: Option<kube::Client>,
) -> Result<Started, StartupError> {
    let runtime = build_runtime(settings)?;
    if settings.enabled("exec") {
        crate::adapters::exec::process::start_resident();
    }
    let mut warnings = runtime.warnings;
    let mut chain = runtime.chain;
    let mut pod_runtime = None;
    if runtime.pod {
        let (p, w) = start_pod_runtime(pod, client, None).await?;
        warnings.extend(w);
        let p = Arc::new(p);
        chain = chain.with("pod", p.clone());
        pod_runtime = Some(p);
    }
    Ok(Started {
        chain,
        pod: pod_runtime,
        warnings,
        function_configs: None,
    })
}

/// [`start_runtimes`] in the FunctionConfig generation: lists and watches
/// the FunctionConfigs of `--pod-namespace`, then the exec runtime on
/// their live catalog and the pod runtime on their pod settings, which
/// each change reaches.
async fn start_function_config(
    settings: &RuntimeSettings,
    pod: &PodSettings,
    client: kube::Client,
) -> Result<Started, StartupError> {
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
    let mut chain = settings.chain_start();
    if settings.enabled("exec") {
        // Missing binaries are reported by the watch, also for later changes.
        let mut exec_settings = ExecSettings::new(settings.max_message_bytes, &settings.exec_env);
        exec_settings.sandbox = settings.sandbox_rules();
        let exec = ExecEvaluator::with_catalog(watch.catalog(), exec_settings);
        chain = chain.with("exec", Arc::new(exec));
        crate::adapters::exec::process::start_resident();
    }
    let mut pod_runtime = None;
    if settings.enabled("pod") {
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
        warnings.push(NO_RUNTIME.into());
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

/// Builds the evaluator chain from `settings`: the exec runtime from
/// `--config` (or `./config.yaml` if it exists) unless disabled; the pod
/// runtime, when enabled, is only flagged ([`Runtime::pod`]).
///
/// Errors: an explicitly given `--config` that cannot be read or parsed
/// (Porch treats both as fatal): [`StartupError::ReadConfig`],
/// [`StartupError::ParseConfig`].
pub fn build_runtime(settings: &RuntimeSettings) -> Result<Runtime, StartupError> {
    let mut warnings = unknown_runtimes(settings);
    let mut chain = settings.chain_start();
    if settings.enabled("exec") {
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
        exec_settings.sandbox = settings.sandbox_rules();
        let exec = ExecEvaluator::new(table, exec_settings);
        warnings.extend(exec.check_binaries());
        tracing::info!(images = exec.image_count(), "exec runtime ready");
        chain = chain.with("exec", Arc::new(exec));
    }
    let pod = settings.enabled("pod");
    if chain.names().is_empty() && !pod {
        warnings.push(NO_RUNTIME.into());
    }
    Ok(Runtime {
        chain,
        warnings,
        pod,
    })
}
