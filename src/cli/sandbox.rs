//! The sandbox flag shared by `serve`, `eval`, `render` and
//! `wrapper-server`.

use clap::Args;

use crate::domain::sandbox::SandboxAllow;

/// Which sandbox layers every function may do without.
#[derive(Debug, Clone, Args)]
pub struct SandboxArgs {
    /// Sandbox layers every function may do without, comma-separated: new-privileges, filesystem (Landlock), syscalls (the seccomp filter), network. Default: none (every layer on). One function's own: `sandbox: {allow: [...]}` in its --config entry or FunctionConfig binaryExecutor.
    #[arg(long, value_name = "LAYER[,LAYER]", value_parser = sandbox_allow, default_value = "")]
    pub sandbox_allow: SandboxAllow,
}

/// clap's reading of `--sandbox-allow` (a usage error, exit 2, naming the
/// unknown layer and the valid ones).
fn sandbox_allow(value: &str) -> Result<SandboxAllow, String> {
    SandboxAllow::parse(value.split(','))
}
