//! Running one function process: the mechanics shared by the exec evaluator
//! and the wrapper server.
//!
//! - no shell: the program is executed directly with the given argv;
//! - a scrubbed environment: only the variables in [`ProcessSpec::env`];
//! - the process leads its own process group, and the whole group is killed
//!   (SIGKILL) when the call ends for any reason — normal exit, timeout,
//!   output over the limit, or the future being dropped (caller cancelled) —
//!   so no grandchild outlives the call;
//! - stdin is written while stdout and stderr are drained, so large
//!   ResourceLists cannot deadlock on pipe buffers;
//! - stdout and stderr are each capped at a byte limit: memory stays bounded
//!   and a flooding function gets a clear error.

use std::ffi::OsString;
use std::io;
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use bytes::Bytes;
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::process::Command;

use crate::domain::evaluation::{ExitReason, Payload};

/// What to run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcessSpec {
    /// The executable (absolute path, or a name looked up in the spec's `PATH`).
    pub program: PathBuf,
    /// Arguments after `argv[0]`.
    pub args: Vec<OsString>,
    /// The complete environment of the process.
    pub env: Vec<(OsString, OsString)>,
    /// Working directory; the runner's own when `None`.
    pub cwd: Option<PathBuf>,
}

/// Bounds on one run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcessLimits {
    /// Maximum bytes kept from stdout, and separately from stderr.
    pub max_output_bytes: usize,
    /// Wall-clock limit for the whole run.
    pub timeout: Option<Duration>,
}

/// A finished run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcessOutput {
    /// How the process ended.
    pub exit: ExitReason,
    /// Everything written to stdout.
    pub stdout: Bytes,
    /// Everything written to stderr.
    pub stderr: Bytes,
}

/// Why a run produced no [`ProcessOutput`].
#[derive(Debug, thiserror::Error)]
pub enum ProcessError {
    /// The program could not be started (missing, not executable, bad format).
    #[error("cannot start {program:?}: {source}")]
    Spawn {
        /// The program.
        program: PathBuf,
        /// The OS error.
        source: io::Error,
    },
    /// stdout or stderr went over [`ProcessLimits::max_output_bytes`]; the process group was killed.
    #[error("{payload} went over the limit of {limit} bytes; the function was stopped")]
    OutputTooLarge {
        /// Which stream.
        payload: Payload,
        /// The limit in bytes.
        limit: usize,
    },
    /// The timeout passed; the process group was killed.
    #[error("the function did not finish within {0:?}; it was stopped")]
    TimedOut(Duration),
    /// Reading or writing the pipes failed.
    #[error("I/O error talking to the function: {0}")]
    Io(#[from] io::Error),
}

/// Kills the process group when dropped: the one exit path every outcome,
/// including cancellation, goes through.
struct GroupKiller(Option<Pid>);

impl Drop for GroupKiller {
    fn drop(&mut self) {
        if let Some(pgid) = self.0.take() {
            // ESRCH (group already gone) is the normal case after a clean exit.
            let _ = killpg(pgid, Signal::SIGKILL);
        }
    }
}

/// Runs `spec` with `stdin` as its standard input, within `limits`.
///
/// Errors: see [`ProcessError`]. A non-zero exit is not an error here; it is
/// reported in [`ProcessOutput::exit`].
pub async fn run(
    spec: &ProcessSpec,
    stdin: Bytes,
    limits: ProcessLimits,
) -> Result<ProcessOutput, ProcessError> {
    let mut cmd = Command::new(&spec.program);
    cmd.args(&spec.args)
        .env_clear()
        .envs(spec.env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);
    if let Some(cwd) = &spec.cwd {
        cmd.current_dir(cwd);
    }
    let mut child = cmd.spawn().map_err(|source| ProcessError::Spawn {
        program: spec.program.clone(),
        source,
    })?;
    let killer = GroupKiller(child.id().map(|id| Pid::from_raw(id as i32)));

    let input = child.stdin.take();
    let stdout = child.stdout.take();
    let stderr = child.stderr.take();
    let limit = limits.max_output_bytes;

    let write_stdin = async move {
        if let Some(mut pipe) = input {
            match pipe.write_all(&stdin).await {
                // A function may exit without reading all of its input.
                Err(e) if e.kind() != io::ErrorKind::BrokenPipe => return Err(e.into()),
                _ => {}
            }
        }
        Ok::<(), ProcessError>(())
    };
    let wait_then_kill_group = async {
        let status = child.wait().await?;
        // The function is done: take its process group (any background
        // grandchild) with it, which also closes the pipes they hold.
        drop(GroupKiller(killer.0));
        Ok::<_, ProcessError>(status)
    };
    let work = async {
        tokio::try_join!(
            write_stdin,
            read_capped(stdout, limit, Payload::Output),
            read_capped(stderr, limit, Payload::Log),
            wait_then_kill_group,
        )
    };
    let (_, stdout, stderr, status) = match limits.timeout {
        Some(t) => tokio::time::timeout(t, work)
            .await
            .map_err(|_| ProcessError::TimedOut(t))??,
        None => work.await?,
    };
    drop(killer);
    let exit = match (status.code(), status.signal()) {
        (Some(code), _) => ExitReason::Code(code),
        (None, Some(sig)) => ExitReason::Signal(sig),
        (None, None) => ExitReason::Code(-1),
    };
    Ok(ProcessOutput {
        exit,
        stdout,
        stderr,
    })
}

async fn read_capped<R: AsyncRead + Unpin>(
    pipe: Option<R>,
    limit: usize,
    payload: Payload,
) -> Result<Bytes, ProcessError> {
    let Some(pipe) = pipe else {
        return Ok(Bytes::new());
    };
    let mut buf = Vec::new();
    pipe.take(limit as u64 + 1).read_to_end(&mut buf).await?;
    if buf.len() > limit {
        return Err(ProcessError::OutputTooLarge { payload, limit });
    }
    Ok(buf.into())
}
