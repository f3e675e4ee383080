//! Reaping the orphans a runner inherits when it is PID 1 (the first
//! process of a container): a process whose parent dies is handed to PID 1,
//! and stays a zombie until PID 1 waits for it. The runner inherits such
//! processes when the resident supervisor is killed or crashes: its spares
//! and per-call supervisors end with it (their death signal) and would stay
//! zombies for the life of the pod.
//!
//! The runner's own children are waited for by tokio, by pid; a
//! `waitpid(-1)` would take their exit status from under it. So only a
//! zombie whose parent is this process and that this process did not start
//! itself is reaped, with a `waitpid` on its pid: every child the runner
//! starts is recorded ([`spawn_own`]) from before it exists until it has
//! been waited for.

use std::collections::BTreeSet;
use std::io;
use std::sync::{Mutex, MutexGuard};

use nix::sys::wait::{WaitPidFlag, waitpid};
use nix::unistd::Pid;

/// The pids of the children this process started and tokio waits for.
static OWN: Mutex<BTreeSet<i32>> = Mutex::new(BTreeSet::new());

fn own() -> MutexGuard<'static, BTreeSet<i32>> {
    OWN.lock().unwrap_or_else(|e| e.into_inner())
}

/// Keeps a child's pid out of [`reap_orphans`] until dropped, which must
/// happen only once the child has been waited for or is no longer needed.
#[derive(Debug)]
pub(crate) struct Own(Option<i32>);

impl Drop for Own {
    fn drop(&mut self) {
        if let Some(pid) = self.0 {
            own().remove(&pid);
        }
    }
}

/// Runs `spawn` (which starts one child) and records the child's pid
/// (`pid` reads it from what `spawn` returned) as this process's own, both
/// under one lock, so that [`reap_orphans`] never sees the child before it
/// is recorded.
///
/// Errors: those of `spawn`.
pub(crate) fn spawn_own<T>(
    spawn: impl FnOnce() -> io::Result<T>,
    pid: impl FnOnce(&T) -> Option<u32>,
) -> io::Result<(T, Own)> {
    let mut all = own();
    let child = spawn()?;
    let pid = pid(&child).map(|p| p as i32);
    if let Some(p) = pid {
        all.insert(p);
    }
    Ok((child, Own(pid)))
}

/// Reaps each zombie whose parent is this process and that it did not
/// start itself ([`spawn_own`]); returns their pids. Reads `/proc/<pid>/stat`
/// (state `Z`, parent pid) and waits for each with `waitpid(pid, WNOHANG)`.
pub(crate) fn reap_orphans() -> Vec<i32> {
    let me = std::process::id() as i32;
    let all = own();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut reaped = Vec::new();
    for pid in dir
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
    {
        if all.contains(&pid) || zombie_parent(pid) != Some(me) {
            continue;
        }
        if let Ok(status) = waitpid(Pid::from_raw(pid), Some(WaitPidFlag::WNOHANG))
            && status.pid().is_some()
        {
            reaped.push(pid);
        }
    }
    reaped
}

/// The parent pid of `pid` when it is a zombie (`/proc/<pid>/stat` state
/// `Z`).
fn zombie_parent(pid: i32) -> Option<i32> {
    let stat = std::fs::read(format!("/proc/{pid}/stat")).ok()?;
    let (state, ppid) = crate::supervisor::tree::stat_state_ppid(&stat)?;
    (state == b'Z').then_some(ppid)
}

/// When this process is PID 1 (of the host or of a PID namespace, as in a
/// container), reaps the orphans it inherits ([`reap_orphans`]) each time a
/// child ends (SIGCHLD), for as long as the tokio runtime runs. Nothing
/// happens for any other pid, or after the first call. Must run inside a
/// tokio runtime.
pub(crate) fn reap_orphans_when_pid1() {
    static STARTED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    if std::process::id() != 1 || STARTED.swap(true, std::sync::atomic::Ordering::AcqRel) {
        return;
    }
    let mut children = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::child()) {
        Ok(s) => s,
        Err(e) => {
            tracing::warn!(error = %e, "cannot watch for ended children; orphans will not be reaped");
            return;
        }
    };
    tokio::spawn(async move {
        loop {
            let reaped = reap_orphans();
            if !reaped.is_empty() {
                tracing::debug!(?reaped, "reaped orphaned processes");
            }
            if children.recv().await.is_none() {
                return;
            }
        }
    });
}
