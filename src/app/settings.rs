//! The plain settings `serve`'s wiring takes (the command line fills them
//! in, `src/cli/serve.rs`), read by the exec runtime's wiring
//! ([`super::serve`]) and by the configuration-generation decision
//! ([`super::generation`]).

use std::path::PathBuf;
use std::sync::Arc;

use crate::domain::chain::EvaluatorChain;

/// The default `--config` of the config.yaml generation.
pub const DEFAULT_CONFIG: &str = "./config.yaml";

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
    /// `--sandbox-allow`, `--sandbox-read`, `--sandbox-write`: what every
    /// exec function is granted beyond the sandbox's rules.
    pub sandbox: crate::adapters::exec::SandboxGrant,
    /// Whether functions get `render`'s read rules (everything but the
    /// credential stores, [`crate::adapters::exec::Sandbox::render`])
    /// rather than the exec runtime's.
    pub render_read_rules: bool,
    /// `--builtin-functions`: the builtin tier
    /// ([`crate::adapters::runtime::builtin::evaluator::BuiltinEvaluator`])
    /// goes first in the chain.
    pub builtins: bool,
}

impl RuntimeSettings {
    /// The exec functions' sandbox: `render`'s rules or the exec
    /// runtime's, with [`RuntimeSettings::sandbox`] granted.
    pub(super) fn sandbox_rules(&self) -> crate::adapters::exec::Sandbox {
        use crate::adapters::exec::Sandbox;
        if self.render_read_rules {
            Sandbox::render(&self.sandbox)
        } else {
            Sandbox::exec(&self.sandbox)
        }
    }

    /// An empty chain, or one holding the builtin tier when
    /// [`RuntimeSettings::builtins`] is set (it goes before every runtime).
    pub(super) fn chain_start(&self) -> EvaluatorChain {
        use crate::adapters::runtime::BuiltinRuntime;
        use crate::adapters::runtime::builtin::evaluator::BuiltinEvaluator;
        let chain = EvaluatorChain::new();
        if !self.builtins {
            return chain;
        }
        tracing::info!("builtin tier on: apply-setters runs in process");
        chain.with(
            "builtin",
            Arc::new(BuiltinEvaluator::new(BuiltinRuntime::new(
                &self.default_image_prefix,
            ))),
        )
    }

    /// Whether the runtime named `runtime` (`exec`, `pod`) is not in
    /// `--disable-runtimes`.
    pub(super) fn enabled(&self, runtime: &str) -> bool {
        !self.disabled.iter().any(|d| d == runtime)
    }
}
