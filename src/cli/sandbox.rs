//! The sandbox flags shared by `serve`, `eval`, `render` and
//! `wrapper-server`.

use std::path::PathBuf;

use clap::Args;

use crate::domain::sandbox::{SandboxAllow, SandboxGrant};

/// What every function is granted beyond the sandbox's rules.
#[derive(Debug, Clone, Args)]
pub struct SandboxArgs {
    /// Sandbox layers every function may do without, comma-separated: new-privileges, filesystem (Landlock), syscalls (the seccomp filter), network. Default: none (every layer on). One function's own: `sandbox: {allow: [...]}` in its --config entry or FunctionConfig binaryExecutor.
    #[arg(long, value_name = "LAYER[,LAYER]", value_parser = sandbox_allow, default_value = "")]
    pub sandbox_allow: SandboxAllow,
    /// A path every function may also read and execute beneath, with the filesystem layer on (repeatable; relative to the working directory). One function's own: `sandbox: {read: [PATH]}`.
    #[arg(long, value_name = "PATH", value_parser = absolute_path)]
    pub sandbox_read: Vec<PathBuf>,
    /// A path every function may also write (create, change, remove) beneath, with the filesystem layer on (repeatable; relative to the working directory). One function's own: `sandbox: {write: [PATH]}`.
    #[arg(long, value_name = "PATH", value_parser = absolute_path)]
    pub sandbox_write: Vec<PathBuf>,
}

impl SandboxArgs {
    /// The grant these flags make.
    pub fn grant(&self) -> SandboxGrant {
        SandboxGrant {
            allow: self.sandbox_allow,
            read: self.sandbox_read.clone(),
            write: self.sandbox_write.clone(),
        }
    }
}

/// clap's reading of `--sandbox-allow` (a usage error, exit 2, naming the
/// unknown layer and the valid ones).
fn sandbox_allow(value: &str) -> Result<SandboxAllow, String> {
    SandboxAllow::parse(value.split(','))
}

/// clap's reading of `--sandbox-read` and `--sandbox-write`: the path made
/// absolute against the working directory (not resolved: a path that is
/// not there yet is kept as named).
///
/// Errors: an empty path, or a working directory that cannot be read.
fn absolute_path(value: &str) -> Result<PathBuf, String> {
    if value.is_empty() {
        return Err("the path is empty: name a file or directory".into());
    }
    std::path::absolute(value).map_err(|e| format!("cannot make {value:?} absolute: {e}"))
}
