//! Running one function process: the mechanics shared by the exec evaluator
//! and the wrapper server.
//!
//! - no shell: the program is executed directly with the given argv;
//! - a scrubbed environment: only the variables in [`ProcessSpec::env`];
//! - the function runs under a supervisor (`crate::supervisor::tree`; see
//!   [`Confinement`] for how it is started) that kills
//!   every descendant (whatever session or group it moved to) when the
//!   function exits, when the call ends for any other reason — timeout,
//!   output over the limit, or the future being dropped (caller cancelled) —
//!   and when the runner itself dies, even by SIGKILL; the call returns only
//!   once they are all gone;
//! - reading stops when the function has exited and its output is complete:
//!   output still arriving after the supervisor exited (a pipe handed to a
//!   process outside the function's tree) is read for at most
//!   [`OUTPUT_GRACE`];
//! - stdin is written while stdout and stderr are drained, so large
//!   ResourceLists cannot deadlock on pipe buffers;
//! - stdout and stderr are each capped at a byte limit: memory stays bounded
//!   and a flooding function gets a clear error.

use std::ffi::OsString;
use std::future::Future;
use std::io;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::OnceLock;
use std::time::Duration;

use bytes::Bytes;
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::process::Command;

use crate::adapters::parse_pool::parse_off_workers;
use crate::domain::evaluation::{EvalError, ExitReason, FunctionFailure, Payload};

/// How each function process gets its supervisor (`crate::supervisor::tree`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Confinement {
    /// The runner starts the `krm-fn-supervisor` program at this path with
    /// `posix_spawn` (a `vfork`-style clone: nothing of the runner is
    /// copied) as `krm-fn-supervisor RUNNER_PID TOKEN SANDBOX PROGRAM
    /// ARG...` (SANDBOX: the call's sandbox spec in hexadecimal, or `-`), and
    /// that program supervises the function (TOKEN: 16 random hex digits
    /// per call, which mark its report of a function it could not start).
    Program(PathBuf),
    /// The runner forks itself and its forked child becomes the supervisor
    /// (`Command::pre_exec`). Same confinement, but each call copies the
    /// runner's page tables, and the runner takes a copy-on-write fault on
    /// each page it writes while any supervisor lives: slower under
    /// concurrency. The fallback when the program is not found.
    InProcess,
    /// The default: one long-lived `krm-fn-supervisor --resident
    /// RUNNER_PID` started from this path (on first use, and again after it
    /// ended), which forks a small per-call supervisor for each call and
    /// gets the call's pipes and a status socket over a Unix socket: no
    /// `exec` of a supervisor per call. A call whose argv and environment
    /// exceed 64 KiB is started the [`Confinement::Program`] way.
    Resident(PathBuf),
}

impl Confinement {
    /// The supervisor program's file name.
    pub const PROGRAM: &'static str = "krm-fn-supervisor";

    /// The environment variable that overrides where the program is looked
    /// for and how it runs: a path to it (resident), `per-call` for
    /// [`Confinement::Program`] with the program found as without the
    /// variable, or `in-process` for [`Confinement::InProcess`].
    pub const ENV: &'static str = "KRM_FN_SUPERVISOR";

    /// The [`Confinement::ENV`] value that selects [`Confinement::Program`].
    pub const PER_CALL: &'static str = "per-call";

    /// Finds the supervisor program: the path in [`Confinement::ENV`] when
    /// set (an unusable path is reported in the result's reason), else
    /// [`Confinement::PROGRAM`] next to the running executable, or one
    /// directory up when the executable sits in a `deps` directory (cargo's
    /// test and bench binaries); [`Confinement::Resident`] with it, or
    /// [`Confinement::Program`] when the variable is
    /// [`Confinement::PER_CALL`]. Returns the choice and, for
    /// [`Confinement::InProcess`], why.
    pub fn detect() -> (Confinement, Option<String>) {
        let per_call = std::env::var_os(Self::ENV).is_some_and(|v| v == Self::PER_CALL);
        let found = Self::find();
        match found {
            (Confinement::Resident(path), why) if per_call => (Confinement::Program(path), why),
            other => other,
        }
    }

    fn find() -> (Confinement, Option<String>) {
        if let Some(value) = std::env::var_os(Self::ENV).filter(|v| v != Self::PER_CALL) {
            if value == "in-process" {
                return (
                    Confinement::InProcess,
                    Some(format!("{}=in-process", Self::ENV)),
                );
            }
            let path = PathBuf::from(value);
            return match executable(&path) {
                Ok(()) => (Confinement::Resident(path), None),
                Err(why) => (
                    Confinement::InProcess,
                    Some(format!("{}={}: {why}", Self::ENV, path.display())),
                ),
            };
        }
        let exe = match std::env::current_exe() {
            Ok(exe) => exe,
            Err(e) => {
                return (
                    Confinement::InProcess,
                    Some(format!("the running executable's path is unknown: {e}")),
                );
            }
        };
        let mut tried = Vec::new();
        let mut dir = exe.parent();
        while let Some(d) = dir {
            let candidate = d.join(Self::PROGRAM);
            if executable(&candidate).is_ok() {
                return (Confinement::Resident(candidate), None);
            }
            tried.push(candidate);
            dir = d
                .parent()
                .filter(|_| d.file_name() == Some("deps".as_ref()));
        }
        let tried: Vec<_> = tried.iter().map(|p| p.display().to_string()).collect();
        (
            Confinement::InProcess,
            Some(format!("no executable {}", tried.join(" or "))),
        )
    }

    /// The process-wide choice: [`Confinement::detect`] on first use,
    /// logged once (a warning for [`Confinement::InProcess`], with the
    /// reason and how to fix it).
    pub fn current() -> &'static Confinement {
        static CURRENT: OnceLock<Confinement> = OnceLock::new();
        CURRENT.get_or_init(|| {
            let (choice, why) = Self::detect();
            match &choice {
                Confinement::Resident(path) => tracing::info!(
                    supervisor = %path.display(),
                    "functions start under the resident supervisor program"
                ),
                Confinement::Program(path) => tracing::info!(
                    supervisor = %path.display(),
                    "functions start under the supervisor program, one per call"
                ),
                Confinement::InProcess => tracing::warn!(
                    reason = why.as_deref().unwrap_or_default(),
                    "functions start under a forked copy of this process (slower under \
                     concurrency); install {} next to this executable or set {} to its path",
                    Self::PROGRAM,
                    Self::ENV
                ),
            }
            choice
        })
    }
}

/// Starts the resident supervisor now when functions run under one
/// ([`Confinement::Resident`], the default), so that the first call does
/// not wait for its start; the `serve` and `wrapper-server` commands call
/// this when their exec runtime starts. Nothing happens for the other
/// confinement ways. A program that cannot be started is logged as a
/// warning and left to the first call, which reports it as its error.
/// Must run inside a tokio runtime (the process is reaped by it).
///
/// A runner that is PID 1 (a container's first process) also starts
/// reaping the orphans it inherits here, whatever the confinement (see
/// `reap.rs`).
pub fn start_resident() {
    super::reap::reap_orphans_when_pid1();
    if let Confinement::Resident(path) = Confinement::current()
        && let Err(e) = super::resident::start(path)
    {
        tracing::warn!(
            supervisor = %path.display(),
            error = %e,
            "the resident function supervisor could not be started; the first call will try again"
        );
    }
}

/// Whether `path` is a regular file someone may execute.
fn executable(path: &Path) -> Result<(), String> {
    use std::os::unix::fs::PermissionsExt;
    match std::fs::metadata(path) {
        Ok(m) if m.is_file() && m.permissions().mode() & 0o111 != 0 => Ok(()),
        Ok(_) => Err("not an executable file".into()),
        Err(e) => Err(e.to_string()),
    }
}

/// What to run.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProcessSpec {
    /// The executable (absolute path, or a name looked up in the spec's `PATH`).
    pub program: PathBuf,
    /// Arguments after `argv[0]`.
    pub args: Vec<OsString>,
    /// The complete environment of the process.
    pub env: Vec<(OsString, OsString)>,
    /// Working directory; the runner's own when `None`.
    pub cwd: Option<PathBuf>,
    /// The sandbox layers the function enters before its `exec`
    /// (`super::sandbox::Sandbox` makes them; the default is none).
    pub sandbox: super::sandbox::LayerSpec,
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

impl ProcessOutput {
    /// The failure of a run that did not exit 0, for the function named
    /// `name`: its stdout's structured results and its stderr, read by
    /// [`FunctionFailure::new`] on the parser pool (off the async workers,
    /// as every parse of a function's output is).
    ///
    /// Errors: the parser pool's [`EvalError`] when it cannot take the work.
    pub async fn into_failure(self, name: String) -> Result<FunctionFailure, EvalError> {
        parse_off_workers(move || FunctionFailure::new(&name, self.exit, self.stdout, self.stderr))
            .await
    }
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
    /// stdout or stderr went over [`ProcessLimits::max_output_bytes`]; the function and its descendants were killed.
    #[error("{payload} went over the limit of {limit} bytes; the function was stopped")]
    OutputTooLarge {
        /// Which stream.
        payload: Payload,
        /// The limit in bytes.
        limit: usize,
    },
    /// The timeout passed; the function and its descendants were killed.
    #[error("the function did not finish within {0:?}; it was stopped")]
    TimedOut(Duration),
    /// The resident supervisor ended (killed or crashed) before it reported
    /// how the function ended; the function's processes were signalled to
    /// stop. The next call starts a new resident supervisor.
    #[error(
        "the function's supervisor (krm-fn-supervisor) ended before the function did: it was \
         killed or crashed; the function was stopped, and the next call starts a new supervisor"
    )]
    SupervisorLost,
    /// Reading or writing the pipes failed.
    #[error("I/O error talking to the function: {0}")]
    Io(#[from] io::Error),
}

/// How long output is still read after the function and its supervisor
/// have exited; only a pipe passed to a process outside the function's
/// tree can keep it open that long.
pub const OUTPUT_GRACE: Duration = Duration::from_millis(500);

/// Asks the supervisor to stop the function and all its descendants when
/// dropped (SIGTERM; it kills them with SIGKILL and exits): the one exit
/// path every outcome, including cancellation, goes through. Disarmed once
/// the supervisor has been reaped, when its pid may already be reused.
struct Stopper(Option<Pid>, std::sync::atomic::AtomicBool);

impl Drop for Stopper {
    fn drop(&mut self) {
        if self.1.load(std::sync::atomic::Ordering::Acquire) {
            return;
        }
        if let Some(pid) = self.0.take() {
            let _ = kill(pid, Signal::SIGTERM);
        }
    }
}

/// Runs `spec` with `stdin` as its standard input, within `limits`,
/// confined the [`Confinement::current`] way.
///
/// Errors: see [`ProcessError`]. A non-zero exit is not an error here; it is
/// reported in [`ProcessOutput::exit`].
pub async fn run(
    spec: &ProcessSpec,
    stdin: Bytes,
    limits: ProcessLimits,
) -> Result<ProcessOutput, ProcessError> {
    run_confined(spec, stdin, limits, Confinement::current()).await
}

/// [`run`] with the supervisor started the `confinement` way.
///
/// Errors: as [`run`]; a function the supervisor program could not start
/// is the same [`ProcessError::Spawn`] (with the `exec` error) as with
/// [`Confinement::InProcess`], and a supervisor program that cannot be
/// started is a [`ProcessError::Spawn`] naming that program. With
/// [`Confinement::Resident`], a resident supervisor that ends before the
/// call's report (killed, crashed) is [`ProcessError::SupervisorLost`].
pub async fn run_confined(
    spec: &ProcessSpec,
    stdin: Bytes,
    limits: ProcessLimits,
    confinement: &Confinement,
) -> Result<ProcessOutput, ProcessError> {
    let per_call;
    let confinement = match confinement {
        Confinement::Resident(supervisor) => match resident_request(spec)? {
            Some(request) => {
                return run_resident(spec, stdin, limits, supervisor, &request).await;
            }
            // Too large for one message: a supervisor of its own.
            None => {
                per_call = Confinement::Program(supervisor.clone());
                &per_call
            }
        },
        other => other,
    };
    let runner = std::process::id() as libc::pid_t;
    let token = format!("{:016x}", rand::random::<u64>());
    let mut cmd = match confinement {
        Confinement::Program(supervisor) | Confinement::Resident(supervisor) => {
            // No `pre_exec`: std spawns it with `posix_spawn`.
            let mut cmd = Command::new(supervisor);
            let sandbox = spec.sandbox.bytes();
            let sandbox = if sandbox.is_empty() {
                "-".to_string()
            } else {
                sandbox.iter().map(|b| format!("{b:02x}")).collect()
            };
            cmd.arg(runner.to_string())
                .arg(&token)
                .arg(sandbox)
                .arg(&spec.program);
            cmd
        }
        Confinement::InProcess => {
            let mut cmd = Command::new(&spec.program);
            // Made ready here, before the fork: it allocates.
            let layers =
                crate::supervisor::layers::prepare(spec.sandbox.bytes()).map_err(|source| {
                    ProcessError::Spawn {
                        program: spec.program.clone(),
                        source,
                    }
                })?;
            // SAFETY: `become_supervisor` uses only async-signal-safe system calls.
            unsafe {
                cmd.pre_exec(move || crate::supervisor::tree::become_supervisor(runner, &layers));
            }
            cmd
        }
    };
    cmd.args(&spec.args)
        .env_clear()
        .envs(spec.env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    if let Some(cwd) = &spec.cwd {
        cmd.current_dir(cwd);
    }
    let spawned = super::reap::spawn_own(|| cmd.spawn(), tokio::process::Child::id);
    let (mut child, _own) = spawned.map_err(|source| ProcessError::Spawn {
        program: match confinement {
            Confinement::Program(supervisor) | Confinement::Resident(supervisor) => {
                supervisor.clone()
            }
            Confinement::InProcess => spec.program.clone(),
        },
        source,
    })?;
    let stopper = Stopper(
        child.id().map(|id| Pid::from_raw(id as i32)),
        std::sync::atomic::AtomicBool::new(false),
    );
    let input = child.stdin.take();
    let stdout = child.stdout.take();
    let stderr = child.stderr.take();
    let wait = async {
        // The supervisor exits only when the function and every descendant
        // are gone.
        let status = child.wait().await?;
        stopper.1.store(true, std::sync::atomic::Ordering::Release);
        Ok::<_, ProcessError>(status)
    };
    let (out, err, status) =
        exchange(&spec.program, stdin, limits, input, stdout, stderr, wait).await?;
    drop(stopper);
    if let Confinement::Program(_) = confinement
        && let Some(errno) = start_failure(status.code(), &err, &token)
    {
        return Err(ProcessError::Spawn {
            program: spec.program.clone(),
            source: io::Error::from_raw_os_error(errno),
        });
    }
    Ok(output(status, out, err))
}

/// The result of a run that ended with `status`.
fn output(status: std::process::ExitStatus, out: Vec<u8>, err: Vec<u8>) -> ProcessOutput {
    let exit = match (status.code(), status.signal()) {
        (Some(code), _) => ExitReason::Code(code),
        (None, Some(sig)) => ExitReason::Signal(sig),
        (None, None) => ExitReason::Code(-1),
    };
    ProcessOutput {
        exit,
        stdout: out.into(),
        stderr: err.into(),
    }
}

/// Bytes of stdout room reserved before a call's output is read, beyond
/// the input's size and a quarter of it (the results a function adds,
/// changed fields). Room never written costs next to no memory for large
/// buffers, whose pages are only mapped in when written.
const OUTPUT_HEADROOM: usize = 4 << 10;

/// Writes `stdin` to `input` while reading `stdout` and `stderr` (each
/// capped at the limit) and waiting for `wait`, the supervisor's report that
/// the function and every descendant are gone; output still open
/// [`OUTPUT_GRACE`] after that is taken as complete. The whole exchange is
/// bounded by the limits' timeout. Returns stdout, stderr and `wait`'s value.
async fn exchange<W, R, E, T>(
    program: &Path,
    stdin: Bytes,
    limits: ProcessLimits,
    input: Option<W>,
    stdout: Option<R>,
    stderr: Option<E>,
    wait: impl Future<Output = Result<T, ProcessError>>,
) -> Result<(Vec<u8>, Vec<u8>, T), ProcessError>
where
    W: AsyncWrite + Unpin,
    R: AsyncRead + Unpin,
    E: AsyncRead + Unpin,
{
    let limit = limits.max_output_bytes;
    // A function writes back the ResourceList it was given, changed: room
    // for that from the start, so stdout is read in as few reads as the
    // pipe allows and, unless the output outgrows it, never moved (an
    // empty Vec grows from 32 bytes, one read and one move per doubling).
    let mut out = Vec::with_capacity(
        stdin
            .len()
            .saturating_add(stdin.len() / 4)
            .saturating_add(OUTPUT_HEADROOM)
            .min(limit.saturating_add(1)),
    );
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
    let mut err = Vec::new();
    let (exited, on_exit) = tokio::sync::oneshot::channel::<()>();
    let io = async {
        let all = async {
            tokio::try_join!(
                write_stdin,
                read_capped(stdout, &mut out, limit, Payload::Output),
                read_capped(stderr, &mut err, limit, Payload::Log),
            )
            .map(|_| ())
        };
        tokio::select! {
            r = all => r,
            _ = async {
                let _ = on_exit.await;
                tokio::time::sleep(OUTPUT_GRACE).await;
            } => {
                tracing::warn!(program = %program.display(), "the function's pipes stayed open after it exited; its output was taken as complete");
                Ok(())
            }
        }
    };
    let wait = async {
        let status = wait.await?;
        let _ = exited.send(());
        Ok::<_, ProcessError>(status)
    };
    let work = async { tokio::try_join!(io, wait) };
    let (_, status) = match limits.timeout {
        Some(t) => tokio::time::timeout(t, work)
            .await
            .map_err(|_| ProcessError::TimedOut(t))??,
        None => work.await?,
    };
    Ok((out, err, status))
}

/// The resident supervisor's request for `spec`, or `None` when it takes
/// more than [`crate::supervisor::protocol::MAX_REQUEST`] bytes.
///
/// Errors: a NUL byte in the program, an argument, the environment or the
/// working directory: the same [`ProcessError::Spawn`] as `std`'s.
fn resident_request(spec: &ProcessSpec) -> Result<Option<Vec<u8>>, ProcessError> {
    use std::os::unix::ffi::OsStrExt;
    let argv: Vec<&[u8]> = std::iter::once(spec.program.as_os_str().as_bytes())
        .chain(spec.args.iter().map(|a| a.as_bytes()))
        .collect();
    let env: Vec<Vec<u8>> = spec
        .env
        .iter()
        .map(|(k, v)| [k.as_bytes(), b"=", v.as_bytes()].concat())
        .collect();
    let env: Vec<&[u8]> = env.iter().map(Vec::as_slice).collect();
    let cwd = spec.cwd.as_ref().map(|c| c.as_os_str().as_bytes());
    let request =
        crate::supervisor::protocol::encode_request(cwd, spec.sandbox.bytes(), &argv, &env)
            .ok_or_else(|| ProcessError::Spawn {
                program: spec.program.clone(),
                source: io::Error::new(
                    io::ErrorKind::InvalidInput,
                    "nul byte found in provided data",
                ),
            })?;
    Ok((request.len() <= crate::supervisor::protocol::MAX_REQUEST).then_some(request))
}

/// [`run_confined`] through the resident supervisor `supervisor`: new
/// pipes and a status socket for this call, passed with `request`; the call
/// is stopped (the whole function tree killed) when the status socket is
/// closed, which dropping this future does.
async fn run_resident(
    spec: &ProcessSpec,
    stdin: Bytes,
    limits: ProcessLimits,
    supervisor: &Path,
    request: &[u8],
) -> Result<ProcessOutput, ProcessError> {
    use crate::supervisor::protocol::{
        REPORT_BYTES, REPORT_EXITED, REPORT_START_FAILED, decode_report,
    };
    use nix::fcntl::{FcntlArg, OFlag, fcntl};
    use nix::unistd::pipe2;
    use std::os::fd::{AsRawFd, OwnedFd};
    use tokio::net::unix::pipe;

    let (input_theirs, input) = pipe2(OFlag::O_CLOEXEC).map_err(io::Error::from)?;
    let (stdout, stdout_theirs) = pipe2(OFlag::O_CLOEXEC).map_err(io::Error::from)?;
    let (stderr, stderr_theirs) = pipe2(OFlag::O_CLOEXEC).map_err(io::Error::from)?;
    // Both ends non-blocking: the supervisor only polls its end and sends
    // one report into the empty buffer.
    let (status, status_theirs) = super::resident::seqpacket_pair(true)?;
    let fds = [
        input_theirs.as_raw_fd(),
        stdout_theirs.as_raw_fd(),
        stderr_theirs.as_raw_fd(),
        status_theirs.as_raw_fd(),
    ];
    // Starting the resident supervisor and waiting for room on its control
    // socket count against the call's timeout.
    let started = std::time::Instant::now();
    let timeout = limits.timeout;
    let send = super::resident::send(supervisor, request, &fds);
    let sent = match timeout {
        Some(t) => tokio::time::timeout(t, send)
            .await
            .map_err(|_| ProcessError::TimedOut(t))?,
        None => send.await,
    };
    sent.map_err(|e| match e {
        Ok(source) => ProcessError::Spawn {
            program: supervisor.to_path_buf(),
            source,
        },
        Err(_) => ProcessError::SupervisorLost,
    })?;
    let limits = ProcessLimits {
        timeout: timeout.map(|t| t.saturating_sub(started.elapsed())),
        ..limits
    };
    // Only the supervisor's copies remain.
    drop((input_theirs, stdout_theirs, stderr_theirs, status_theirs));
    // Our ends of the pipes made non-blocking here, the function's ends
    // staying blocking (tokio's checked constructors would ask the kernel
    // for the type and flags of each again).
    let nonblocking =
        |fd: &OwnedFd| fcntl(fd, FcntlArg::F_SETFL(OFlag::O_NONBLOCK)).map_err(io::Error::from);
    nonblocking(&input)?;
    nonblocking(&stdout)?;
    nonblocking(&stderr)?;
    let input = pipe::Sender::from_owned_fd_unchecked(input)?;
    let stdout = pipe::Receiver::from_owned_fd_unchecked(stdout)?;
    let stderr = pipe::Receiver::from_owned_fd_unchecked(stderr)?;
    let status = super::resident::register(status, tokio::io::Interest::READABLE)?;
    let wait = async {
        let mut report = [0u8; REPORT_BYTES + 1];
        let len = loop {
            let mut ready = status.readable().await?;
            match ready.try_io(|fd| {
                nix::sys::socket::recv(
                    fd.as_raw_fd(),
                    &mut report,
                    nix::sys::socket::MsgFlags::MSG_DONTWAIT,
                )
                .map_err(io::Error::from)
            }) {
                Ok(len) => break len?,
                Err(_would_block) => continue,
            }
        };
        match decode_report(&report[..len]) {
            Some((REPORT_EXITED, st)) => Ok(std::process::ExitStatus::from_raw(st)),
            Some((REPORT_START_FAILED, errno)) => Err(ProcessError::Spawn {
                program: spec.program.clone(),
                source: io::Error::from_raw_os_error(errno),
            }),
            // The end of the socket without a report: the supervisor ended.
            None if len == 0 => Err(ProcessError::SupervisorLost),
            _ => Err(ProcessError::Io(io::Error::new(
                io::ErrorKind::InvalidData,
                "the function's supervisor could not read the request",
            ))),
        }
    };
    let (out, err, status) = exchange(
        &spec.program,
        stdin,
        limits,
        Some(input),
        Some(stdout),
        Some(stderr),
        wait,
    )
    .await
    // The timeout reported is the call's whole timeout.
    .map_err(|e| match (e, timeout) {
        (ProcessError::TimedOut(_), Some(t)) => ProcessError::TimedOut(t),
        (e, _) => e,
    })?;
    Ok(output(status, out, err))
}

/// The `errno` the supervisor program reported for a function it could not
/// start: exit code [`crate::supervisor::protocol::START_FAILED_CODE`] and `stderr`
/// exactly the report line with this call's `token`.
fn start_failure(code: Option<i32>, stderr: &[u8], token: &str) -> Option<i32> {
    use crate::supervisor::protocol::{START_FAILED, START_FAILED_CODE};
    if code != Some(START_FAILED_CODE) {
        return None;
    }
    let digits = stderr
        .strip_prefix(START_FAILED)?
        .strip_prefix(token.as_bytes())?
        .strip_prefix(b" errno ")?
        .strip_suffix(b"\n")?;
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(digits).ok()?.parse().ok()
}

/// Reads `pipe` into `buf` until end of file; more than `limit` bytes is an
/// error. `buf` keeps what was read if the future is dropped midway.
async fn read_capped<R: AsyncRead + Unpin>(
    pipe: Option<R>,
    buf: &mut Vec<u8>,
    limit: usize,
    payload: Payload,
) -> Result<(), ProcessError> {
    let Some(pipe) = pipe else {
        return Ok(());
    };
    pipe.take(limit as u64 + 1).read_to_end(buf).await?;
    if buf.len() > limit {
        return Err(ProcessError::OutputTooLarge { payload, limit });
    }
    Ok(())
}
