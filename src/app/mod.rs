//! The composition root: turns settings into a wired evaluator chain.
//!
//! This is the one place that knows which adapters exist and in what order
//! they are tried (exec, then pod — deterministic, unlike Porch; for
//! `render`: builtins, local binaries, a function runner, `exec:` commands;
//! for `eval` and the wrapper server: see [`build_eval_evaluator`] and
//! [`build_wrapper_evaluator`]), and which
//! of Porch's two configuration generations the runner serves
//! ([`generation`]): `config.yaml` + `pod-cache-config.yaml` +
//! template ConfigMap, or the FunctionConfig CRD + template objects.
//!
//! By concern:
//! - [`serve`]: `serve`'s runtimes ([`start_runtimes`],
//!   [`serve::build_runtime`]);
//! - [`generation`]: choosing the configuration generation, from facts
//!   gathered first;
//! - [`pod`]: the pod runtime ([`pod::start_pod_runtime`]);
//! - [`cluster`]: the Kubernetes client (from `--kubeconfig` or as kube-rs
//!   infers it);
//! - [`render`]: `render`'s and `eval`'s runtimes ([`build_render_runtime`],
//!   [`build_eval_evaluator`]);
//! - here: the wrapper server's evaluator and the admission wrapper, shared
//!   by the servers.
//!
//! Settings come in as plain structs (the command line in `src/cli` fills
//! them from its flags); errors are typed, each message the one printed.

pub mod cluster;
pub mod generation;
pub mod pod;
pub mod render;
pub mod serve;
pub mod settings;

use std::sync::Arc;

use crate::adapters::admission::{Admission, AdmittedEvaluator};
use crate::adapters::exec::wrapper::EmptyEntrypoint;
use crate::adapters::exec::{ExecSettings, WrapperEvaluator};
use crate::ports::FunctionEvaluator;

pub use pod::PodSettings;
pub use render::{
    EvalSetupError, RenderRuntime, RenderRuntimeSettings, build_eval_evaluator,
    build_render_runtime,
};
pub use serve::{StartupError, start_runtimes};
pub use settings::RuntimeSettings;

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
    sandbox: &crate::adapters::exec::SandboxGrant,
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
    settings.sandbox = crate::adapters::exec::Sandbox::wrapper(sandbox);
    WrapperEvaluator::new(entrypoint, settings)
}
