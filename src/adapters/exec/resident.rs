//! The runner's side of the resident supervisor: one long-lived
//! `krm-fn-supervisor --resident RUNNER_PID` process per supervisor program,
//! started with the server (or on first use), whose pool of per-call
//! supervisors (forked ahead of time, each serving call after call) takes
//! the calls (see `crate::supervisor::pool` and the protocol in
//! `crate::supervisor::protocol`).
//!
//! The control socket is shared by every call without a lock: each request
//! is one `SOCK_SEQPACKET` message, sent whole or not at all. A resident
//! supervisor found gone when a request is sent (killed, crashed) is
//! replaced by a new one and the request sent again, once.

use std::io::{self, IoSlice};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use nix::errno::Errno;
use nix::fcntl::{FcntlArg, OFlag, fcntl};
use nix::sys::socket::{
    AddressFamily, ControlMessage, MsgFlags, SockFlag, SockType, sendmsg, socketpair,
};
use tokio::io::Interest;
use tokio::io::unix::AsyncFd;

/// One running resident supervisor.
#[derive(Debug)]
pub(crate) struct Resident {
    /// The runner's end of the control socket (non-blocking).
    control: OwnedFd,
    /// Set once the process has ended (it was waited for): a request is
    /// then not sent to it, since a per-call supervisor still ending its
    /// call's tree could hold the other end for a moment and take the
    /// request down with it.
    ended: Arc<AtomicBool>,
}

/// The resident supervisor of each program path in use (normally one).
static RESIDENTS: Mutex<Vec<(PathBuf, Arc<Resident>)>> = Mutex::new(Vec::new());

/// A connected pair of `SOCK_SEQPACKET` Unix sockets, close-on-exec, both
/// non-blocking when `nonblocking` says so.
pub(crate) fn seqpacket_pair(nonblocking: bool) -> io::Result<(OwnedFd, OwnedFd)> {
    let mut flags = SockFlag::SOCK_CLOEXEC;
    if nonblocking {
        flags |= SockFlag::SOCK_NONBLOCK;
    }
    Ok(socketpair(
        AddressFamily::Unix,
        SockType::SeqPacket,
        None,
        flags,
    )?)
}

/// `fd` registered with the current tokio runtime for `interest`.
pub(crate) fn register(fd: OwnedFd, interest: Interest) -> io::Result<AsyncFd<OwnedFd>> {
    // SAFETY: an `OwnedFd` keeps its descriptor open, and the same one,
    // until it is dropped.
    Ok(unsafe { AsyncFd::register_with_interest(fd, interest) }?)
}

/// Puts `fd` in non-blocking mode.
pub(crate) fn set_nonblocking(fd: &OwnedFd) -> io::Result<()> {
    let flags = OFlag::from_bits_truncate(fcntl(fd, FcntlArg::F_GETFL)?);
    fcntl(fd, FcntlArg::F_SETFL(flags | OFlag::O_NONBLOCK))?;
    Ok(())
}

/// Sends one request with `fds` attached to the resident supervisor of
/// `program`, starting it first when none runs, and starting a new one when
/// the current one is found gone.
///
/// Errors: the supervisor program cannot be started (the `io::Error` of its
/// spawn, in `Err(Ok(..))`), or the request cannot be sent (`Err(Err(..))`).
pub(crate) async fn send(
    program: &Path,
    request: &[u8],
    fds: &[RawFd; 4],
) -> Result<(), Result<io::Error, io::Error>> {
    let mut retried = false;
    loop {
        let resident = current(program).map_err(Ok)?;
        match resident.send(request, fds).await {
            Ok(()) => return Ok(()),
            Err(e)
                if !retried
                    && matches!(
                        e.raw_os_error(),
                        Some(libc::EPIPE | libc::ECONNRESET | libc::ECONNREFUSED | libc::ENOTCONN)
                    ) =>
            {
                tracing::warn!(
                    supervisor = %program.display(),
                    "the resident function supervisor had ended; starting a new one"
                );
                forget(program, &resident);
                retried = true;
            }
            Err(e) => return Err(Err(e)),
        }
    }
}

/// Starts the resident supervisor of `program` unless one runs already.
///
/// Errors: the `io::Error` of the program's spawn.
pub(crate) fn start(program: &Path) -> io::Result<()> {
    current(program).map(drop)
}

/// The resident supervisor of `program`, started when there is none.
fn current(program: &Path) -> io::Result<Arc<Resident>> {
    let mut all = RESIDENTS.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((_, r)) = all.iter().find(|(p, _)| p == program) {
        if !r.ended.load(Ordering::SeqCst) {
            return Ok(r.clone());
        }
        tracing::warn!(
            supervisor = %program.display(),
            "the resident function supervisor had ended; starting a new one"
        );
        all.retain(|(p, _)| p != program);
    }
    let r = Arc::new(Resident::start(program)?);
    all.push((program.to_path_buf(), r.clone()));
    Ok(r)
}

/// Drops `stale` as the resident supervisor of `program` (unless another
/// call has replaced it already).
fn forget(program: &Path, stale: &Arc<Resident>) {
    let mut all = RESIDENTS.lock().unwrap_or_else(|e| e.into_inner());
    all.retain(|(p, r)| !(p == program && Arc::ptr_eq(r, stale)));
}

/// The environment variable that sets how many pre-forked per-call
/// supervisors (spares) the resident supervisor keeps waiting for the next
/// call: 0 to [`MAX_SPARES`]; 0 forks one per call when it arrives.
pub(crate) const SPARES_ENV: &str = "KRM_FN_SUPERVISOR_SPARES";

/// The number of spares without [`SPARES_ENV`].
pub(crate) const DEFAULT_SPARES: usize = 2;

/// The most spares [`SPARES_ENV`] may ask for (the supervisor program's
/// limit).
pub(crate) use crate::supervisor::pool::MAX_SPARES;

/// The number of spares: [`SPARES_ENV`] when it holds a number up to
/// [`MAX_SPARES`], otherwise [`DEFAULT_SPARES`] (with a warning naming the
/// value when it is set but unusable, see [`spares_from`]).
pub(crate) fn spares() -> usize {
    spares_from(std::env::var(SPARES_ENV).ok().as_deref()).unwrap_or_else(|warning| {
        tracing::warn!("{warning}");
        DEFAULT_SPARES
    })
}

/// The number of spares for a [`SPARES_ENV`] value (`None`: unset, which
/// is [`DEFAULT_SPARES`]).
///
/// Errors: the warning to log for a value that is not a number from 0 to
/// [`MAX_SPARES`], naming the value and the number kept instead.
pub(crate) fn spares_from(value: Option<&str>) -> Result<usize, String> {
    let Some(v) = value else {
        return Ok(DEFAULT_SPARES);
    };
    match v.trim().parse::<usize>() {
        Ok(n) if n <= MAX_SPARES => Ok(n),
        _ => Err(format!(
            "{SPARES_ENV}={v:?} is not a number from 0 to {MAX_SPARES}; \
             keeping {DEFAULT_SPARES} spare function supervisors"
        )),
    }
}

impl Resident {
    /// Starts `program --resident RUNNER_PID SPARES` ([`spares`]) with
    /// `posix_spawn`, its
    /// control socket as stdin, in its own process group (a terminal's
    /// Ctrl-C reaches the runner, which ends calls its own way).
    fn start(program: &Path) -> io::Result<Self> {
        let (ours, theirs) = seqpacket_pair(false)?;
        set_nonblocking(&ours)?;
        let mut command = tokio::process::Command::new(program);
        command
            .arg("--resident")
            .arg(std::process::id().to_string())
            .arg(spares().to_string())
            .env_clear()
            .stdin(Stdio::from(theirs))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0);
        let (process, own) = super::reap::spawn_own(|| command.spawn(), tokio::process::Child::id)?;
        tracing::debug!(pid = process.id(), supervisor = %program.display(), "resident function supervisor started");
        // Waited for as soon as it ends, so that it never stays a zombie;
        // its pid is this process's own until then.
        let ended = Arc::new(AtomicBool::new(false));
        let mark = ended.clone();
        tokio::spawn(async move {
            let mut process = process;
            let status = process.wait().await;
            mark.store(true, Ordering::SeqCst);
            drop(own);
            tracing::debug!(?status, "the resident function supervisor ended");
        });
        Ok(Self {
            control: ours,
            ended,
        })
    }

    /// Sends one request; waits (without blocking the thread) while the
    /// socket's buffer is full.
    async fn send(&self, request: &[u8], fds: &[RawFd; 4]) -> io::Result<()> {
        loop {
            match sendmsg::<()>(
                self.control.as_raw_fd(),
                &[IoSlice::new(request)],
                &[ControlMessage::ScmRights(fds)],
                MsgFlags::MSG_NOSIGNAL | MsgFlags::MSG_DONTWAIT,
                None,
            ) {
                Ok(_) => return Ok(()),
                Err(Errno::EINTR) => {}
                Err(Errno::EAGAIN) => {
                    // A duplicate, registered with this call's runtime only
                    // while it waits.
                    let fd = register(self.control.try_clone()?, Interest::WRITABLE)?;
                    let _ = fd.writable().await?;
                }
                Err(e) => return Err(e.into()),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spares_come_from_the_variable_and_a_bad_value_is_named_in_a_warning() {
        assert_eq!(spares_from(None), Ok(DEFAULT_SPARES));
        assert_eq!(spares_from(Some("0")), Ok(0));
        assert_eq!(spares_from(Some(" 16 ")), Ok(MAX_SPARES));
        for bad in ["17", "-1", "two", ""] {
            let warning = spares_from(Some(bad)).unwrap_err();
            assert!(
                warning.contains(&format!("{SPARES_ENV}={bad:?}"))
                    && warning.contains("keeping 2 spare"),
                "{warning}"
            );
        }
    }

    /// A resident supervisor whose process has ended (here a program that
    /// refuses `--resident` and exits at once) is replaced by the next
    /// call's look-up instead of being sent the request: one of its
    /// per-call supervisors could still hold the other end of its control
    /// socket while it ends its call's tree, and the request would be lost
    /// with it.
    #[tokio::test]
    async fn an_ended_resident_supervisor_is_replaced_before_a_request_is_sent() {
        let program = Path::new("/bin/false");
        let first = current(program).unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while !first.ended.load(Ordering::SeqCst) {
            assert!(std::time::Instant::now() < deadline, "not waited for");
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        let next = current(program).unwrap();
        assert!(!Arc::ptr_eq(&first, &next), "the ended one was kept");
    }
}
