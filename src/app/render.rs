//! `render`'s and `eval`'s runtime wiring: the render runtime chain
//! (builtins, local binaries, a function runner, `exec:` commands) behind
//! the step time limit and the admission policy, and `eval`'s evaluator.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::adapters::admission::{Admission, AdmittedEvaluator, AdmittedRuntime};
use crate::adapters::grpc::RemoteEvaluator;
use crate::adapters::oci::{CaError, InspectorConfig, OciImageInspector};
use crate::adapters::runtime::{
    BuiltinRuntime, DeadlineRuntime, EvaluatorRuntime, ExecCommandRuntime, NextStepOnNotFound,
    RuntimeChain,
};
use crate::domain::evaluation::EvalError;
use crate::ports::FunctionEvaluator;

use super::serve::{StartupError, build_runtime};
use super::settings::RuntimeSettings;

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
    /// `--sandbox-allow`, `--sandbox-read`, `--sandbox-write`: what every
    /// exec function is granted beyond `render`'s sandbox rules.
    pub sandbox: crate::adapters::exec::SandboxGrant,
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

/// Why `render` could not wire its runtime; each message is printed as is.
#[derive(Debug, thiserror::Error)]
pub enum RenderSetupError {
    /// `--exec-config` cannot be read or parsed.
    #[error(transparent)]
    ExecConfig(#[from] StartupError),
    /// `--function-runner` is not a valid address.
    #[error(transparent)]
    FunctionRunner(EvalError),
    /// The registry client for tag lists cannot be built.
    #[error(transparent)]
    Registry(#[from] CaError),
    /// `--admission-policy` cannot be read (the policy's own message).
    #[error("{0}")]
    Admission(String),
}

/// Wires `render`'s runtime from its flags.
///
/// Errors: an exec config that cannot be read or parsed, a function-runner
/// address that does not parse, a registry client that cannot be built, an
/// admission policy that cannot be read ([`RenderSetupError`]).
pub fn build_render_runtime(
    settings: &RenderRuntimeSettings,
) -> Result<RenderRuntime, RenderSetupError> {
    let chain = render_chain(settings)?;
    let tags = OciImageInspector::new(InspectorConfig {
        plain_http_registries: settings.plain_http_registries.clone(),
        ..InspectorConfig::new(&settings.image_prefix)
    })?;
    let admission =
        Admission::from_option(settings.admission_policy.as_deref(), &settings.image_prefix)
            .map_err(RenderSetupError::Admission)?;
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

/// The runtime chain: builtins, then local binaries for images
/// (`--exec-config`, the exec runtime exactly as `serve --config` builds
/// it; its warnings are logged), then a function runner, then `exec:`
/// commands (kpt's order: builtins before images).
///
/// Errors: the exec config cannot be read or parsed, or the function-runner
/// address does not parse.
fn render_chain(args: &RenderRuntimeSettings) -> Result<RuntimeChain, RenderSetupError> {
    let mut chain =
        RuntimeChain::new().with("builtin", Arc::new(BuiltinRuntime::new(&args.image_prefix)));
    if let Some(config) = &args.exec_config {
        let runtime = build_runtime(&RuntimeSettings {
            config: Some(config.clone()),
            functions: args.functions.clone(),
            disabled: vec!["pod".into()],
            max_message_bytes: args.max_message_bytes,
            default_image_prefix: args.image_prefix.clone(),
            exec_env: Vec::new(),
            slots: Default::default(),
            sandbox: args.sandbox.clone(),
            render_read_rules: true,
            builtins: false,
        })?;
        for warning in &runtime.warnings {
            tracing::warn!("{warning}");
        }
        let images = EvaluatorRuntime::new(Arc::new(runtime.chain));
        chain = chain.with("exec-images", Arc::new(images));
    }
    if let Some(address) = &args.function_runner {
        let remote = EvaluatorRuntime::remote(address, args.max_message_bytes)
            .map_err(RenderSetupError::FunctionRunner)?;
        chain = chain.with("function-runner", Arc::new(remote));
    }
    Ok(chain.with(
        "exec",
        Arc::new(ExecCommandRuntime::inheriting_with(
            args.max_message_bytes,
            &args.sandbox,
        )),
    ))
}

/// `eval`'s evaluator: a function runner at `address`, else the local exec
/// runtime of `runtime` (pod runtime disabled); the admission policy of
/// `admission_policy` in front of either. Start-up warnings are logged.
///
/// Errors: an address that does not parse ([`EvalSetupError::Remote`]) or
/// an exec config that cannot be read or parsed
/// ([`EvalSetupError::Runtime`]); an admission policy that cannot be read
/// ([`EvalSetupError::Admission`]).
pub fn build_eval_evaluator(
    address: Option<&str>,
    runtime: &RuntimeSettings,
    admission_policy: Option<&Path>,
) -> Result<AdmittedEvaluator, EvalSetupError> {
    let evaluator: Arc<dyn FunctionEvaluator> = match address {
        Some(addr) => Arc::new(
            RemoteEvaluator::new(addr, runtime.max_message_bytes)
                .map_err(EvalSetupError::Remote)?,
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

/// Why `eval` could not wire its evaluator.
#[derive(Debug, thiserror::Error)]
pub enum EvalSetupError {
    /// `--address` is not a valid function-runner address.
    #[error(transparent)]
    Remote(EvalError),
    /// The local exec runtime could not be built (`--config`).
    #[error(transparent)]
    Runtime(#[from] StartupError),
    /// The admission policy could not be read (the policy's own message).
    #[error("{0}")]
    Admission(String),
}
