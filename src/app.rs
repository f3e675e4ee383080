//! The composition root: turns settings into a wired evaluator chain.
//!
//! This is the one place that knows which adapters exist and in what order
//! they are tried (exec, then pod — deterministic, unlike Porch).

use std::path::PathBuf;
use std::sync::Arc;

use crate::adapters::exec::{ExecEvaluator, ExecSettings};
use crate::domain::chain::EvaluatorChain;
use crate::domain::exec_config::ExecConfig;

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
    if enabled("pod") {
        warnings.push(
            "the pod runtime is not available in this version of krm-fn-runner; \
             only exec functions are served (pass --disable-runtimes=pod to silence this)"
                .into(),
        );
    }
    if chain.names().is_empty() {
        warnings.push(
            "no runtime is enabled in krm-fn-runner: every call will fail with UNAVAILABLE".into(),
        );
    }
    Ok(Runtime { chain, warnings })
}
