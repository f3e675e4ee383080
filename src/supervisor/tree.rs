//! The process tree: confining a function process and every descendant to
//! its call.
//!
//! A process group is not enough: a function may start a child with
//! `setsid` (a new session and group), fork twice so the grandchild is
//! re-parented away from it, or keep its pipes open in a background process;
//! and a process group does not die with the server when the server is
//! killed with SIGKILL.
//!
//! Each function therefore runs under a small **supervisor** process that
//! forks the function and stays as
//!
//! - a *child subreaper* (`PR_SET_CHILD_SUBREAPER`): every orphaned
//!   descendant of the function, whatever session or group it moved to, is
//!   re-parented to the supervisor instead of to init, so the supervisor can
//!   always find all of them among its own children;
//! - tied to the runner's life (`PR_SET_PDEATHSIG`): when the runner dies,
//!   even by SIGKILL, the supervisor is signalled and cleans up;
//! - the one that relays the function's exit status: when the function
//!   exits (or the runner asks it to stop, with SIGTERM), it SIGKILLs every
//!   remaining descendant — its children, listed in
//!   `/proc/thread-self/children` or, without that file, found by scanning
//!   `/proc` — reaps them until it has no child left, and only then exits
//!   with the function's own status. Since the runner waits for the
//!   supervisor, a call never ends while a process it started is alive, and
//!   the pipes to the runner are closed by then.
//!
//! The function itself runs in its own process group with
//! `PR_SET_PDEATHSIG(SIGKILL)` tied to the supervisor, under `SCHED_BATCH`
//! ([`run_as_batch`]).
//!
//! The supervisor is normally a per-call process of the resident
//! `krm-fn-supervisor --resident`'s pool (forked ahead of time and serving
//! one call at a time, call after call; [`super::pool`]), one long-lived
//! process the runner starts once with `posix_spawn` and sends each call to
//! over a Unix socket ([`super::protocol`]); there it waits with [`supervise_call`], which
//! also stops the call when the runner closes the call's status socket. It
//! can also be that program started per call (`posix_spawn`, no copy of the
//! runner's address space), or, without the program, the runner's own
//! forked child ([`become_supervisor`]).
//!
//! This needs no privilege (no cgroup, no namespace), so it works the same
//! in a non-root Kubernetes container where cgroups are read-only and
//! user namespaces are blocked by the runtime's seccomp profile.
//!
//! Everything in this module may run in the forked child of a
//! multi-threaded process, between `fork` and `exec`, where only
//! async-signal-safe calls are allowed: no allocation, no locks — raw system
//! calls on stack buffers.

use std::io;

use super::protocol::SETUP_FAILED;

/// The signal the kernel sends the supervisor when the runner dies; told
/// apart from a thread exit of the runner (which also fires it) by checking
/// that the supervisor was re-parented.
pub(crate) const PARENT_DIED: libc::c_int = libc::SIGUSR2;

/// Signals the supervisor handles itself; blocked and taken with `sigwaitinfo`.
const HANDLED: [libc::c_int; 6] = [
    libc::SIGCHLD,
    libc::SIGTERM,
    libc::SIGINT,
    libc::SIGHUP,
    libc::SIGQUIT,
    PARENT_DIED,
];

fn errno() -> i32 {
    io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

/// Blocks the [`HANDLED`] signals (taken later with `sigwaitinfo`).
/// Returns the blocked set and the mask from before, which the function gets
/// back.
pub(crate) unsafe fn block_handled() -> io::Result<(libc::sigset_t, libc::sigset_t)> {
    // SAFETY: signal-mask calls on stack values.
    unsafe {
        let mut handled: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut handled);
        for s in HANDLED {
            libc::sigaddset(&mut handled, s);
        }
        let mut before: libc::sigset_t = std::mem::zeroed();
        if libc::pthread_sigmask(libc::SIG_BLOCK, &handled, &mut before) != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok((handled, before))
    }
}

/// Makes this process the subreaper of its descendants and ties it to the
/// runner `runner`: exits with [`SETUP_FAILED`] when the runner is already
/// gone (it died before the death signal was armed).
pub(crate) unsafe fn arm(runner: libc::pid_t) -> io::Result<()> {
    // SAFETY: prctl on values.
    unsafe {
        if libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0 {
            return Err(io::Error::last_os_error());
        }
        tie_to(runner)
    }
}

/// Ties this process to its parent `parent` ([`PARENT_DIED`] when the
/// thread that started it ends): exits with [`SETUP_FAILED`] when the
/// parent is already gone.
pub(crate) unsafe fn tie_to(parent: libc::pid_t) -> io::Result<()> {
    // SAFETY: prctl and getppid on values.
    unsafe {
        if libc::prctl(libc::PR_SET_PDEATHSIG, PARENT_DIED, 0, 0, 0) != 0 {
            return Err(io::Error::last_os_error());
        }
        if libc::getppid() != parent {
            libc::_exit(SETUP_FAILED);
        }
    }
    Ok(())
}

/// Gives every signal below `SIGRTMIN` its default disposition back: an
/// ignored signal stays ignored across `exec`, so a function would
/// otherwise inherit what the process that starts it was started with —
/// the C library's internal signals, which glibc's `posix_spawn` ignores in
/// the new process, and `SIGHUP`, `SIGINT` or `SIGQUIT` when the runner was
/// started ignoring them (`nohup`, a background job of a script). A caught
/// signal is reset by `exec` anyway. The raw system call, since glibc's
/// `sigaction` refuses the internal signals; async-signal-safe.
///
/// # Safety
/// Changes this process's dispositions: only in a process about to `exec`
/// (or a supervisor at its start), whose signal table is its own.
pub(crate) unsafe fn reset_inherited_signals() {
    // The kernel's `struct sigaction`, all zero: SIG_DFL, no flags, empty
    // mask (32 bytes cover every layout).
    let default = [0u64; 4];
    for sig in (1..libc::SIGRTMIN()).filter(|&s| s != libc::SIGKILL && s != libc::SIGSTOP) {
        // SAFETY: rt_sigaction reads `default`; the old action is not asked for.
        unsafe {
            libc::syscall(
                libc::SYS_rt_sigaction,
                sig,
                default.as_ptr(),
                std::ptr::null_mut::<u64>(),
                8usize,
            );
        }
    }
}

/// In the function process just forked from `supervisor`: its own process
/// group, death with the supervisor (exits with [`SETUP_FAILED`] when the
/// supervisor is already gone), every signal at its default disposition
/// ([`reset_inherited_signals`]), the signal mask `before` the supervisor
/// blocked its own, the batch scheduling policy ([`run_as_batch`]), and
/// last the sandbox `layers` the supervisor prepared for this call
/// ([`super::layers::enter`]: no new privileges, Landlock, the syscall
/// filter).
///
/// Errors: a failed set-up call, or a layer the kernel refused; the
/// function is then not started.
pub(crate) unsafe fn enter_function(
    supervisor: libc::pid_t,
    before: &libc::sigset_t,
    layers: &super::layers::Prepared,
) -> io::Result<()> {
    // SAFETY: raw system calls on values.
    unsafe {
        libc::setpgid(0, 0);
        if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) != 0 {
            return Err(io::Error::last_os_error());
        }
        if libc::getppid() != supervisor {
            libc::_exit(SETUP_FAILED);
        }
        reset_inherited_signals();
        libc::pthread_sigmask(libc::SIG_SETMASK, before, std::ptr::null_mut());
        run_as_batch();
        super::layers::enter(layers)
    }
}

/// Puts this process (a function about to `exec`) under `SCHED_BATCH`
/// when it runs under the normal policy (`SCHED_OTHER`), as every function
/// does unless the runner itself was started under another one.
///
/// A KRM function is non-interactive work: under `SCHED_BATCH` (Linux's
/// policy for CPU-bound, non-interactive tasks, `sched(7)`) it keeps its
/// nice value and its fair share of the CPU, but its wakeups never preempt
/// a running task, so concurrent functions run in longer stretches and
/// switch less, while the runner, the supervisors and everything else on
/// the machine still preempt them as soon as they wake: less CPU per call
/// and more calls per second under concurrency (figures in the book,
/// `docs/src/benchmarks/history.md`). The function's threads and children inherit it.
///
/// Any other policy is left as it is: `SCHED_IDLE` (which an unprivileged
/// process may leave for `SCHED_BATCH`) is not raised, and a real-time
/// policy an operator chose is kept. A refusal (a seccomp filter, for
/// example) is ignored: the function runs under the policy it had.
fn run_as_batch() {
    // SAFETY: system calls on this process and a value of this function.
    unsafe {
        if libc::sched_getscheduler(0) == libc::SCHED_OTHER {
            // Priority 0, the only one of SCHED_BATCH (the C libraries
            // differ in the struct's other fields, all unused here).
            let param: libc::sched_param = std::mem::zeroed();
            libc::sched_setscheduler(0, libc::SCHED_BATCH, &param);
        }
    }
}

/// Turns the freshly forked child into a supervisor of the function: the
/// in-process way, used when the `krm-fn-supervisor` program is not
/// available (it costs a copy-on-write copy of the whole runner per call).
///
/// Called from `Command::pre_exec`, with `runner` the runner's process id
/// read before spawning and `layers` the call's sandbox, prepared before
/// spawning. Returns `Ok(())` only in the function process (which the
/// caller then `exec`s); the supervisor never returns.
///
/// # Safety
/// Only in a `pre_exec` closure: it forks and runs the supervisor loop with
/// async-signal-safe calls only.
pub(crate) unsafe fn become_supervisor(
    runner: libc::pid_t,
    layers: &super::layers::Prepared,
) -> io::Result<()> {
    // SAFETY: raw system calls on stack values, in a single-threaded child.
    unsafe {
        let (handled, before) = block_handled()?;
        arm(runner)?;
        let supervisor = libc::getpid();
        let function = libc::fork();
        if function < 0 {
            return Err(io::Error::last_os_error());
        }
        if function == 0 {
            return enter_function(supervisor, &before, layers);
        }
        // The supervisor keeps no descriptor: the pipes belong to the
        // function, and std's exec-error pipe must close so spawn returns.
        close_descriptors_from(0);
        let status = supervise(runner, function, &handled);
        relay(status)
    }
}

/// Closes every open descriptor of this process numbered `first` or above.
pub(crate) unsafe fn close_descriptors_from(first: libc::c_int) {
    // SAFETY: closing descriptors has no memory-safety effect.
    unsafe {
        if libc::syscall(libc::SYS_close_range, first as u32, u32::MAX, 0u32) == 0 {
            return;
        }
        let mut limit: libc::rlimit = std::mem::zeroed();
        let max = if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) == 0 {
            limit.rlim_cur.min(1 << 16) as libc::c_int
        } else {
            1024
        };
        for fd in first..max {
            libc::close(fd);
        }
    }
}

/// Waits for the function to exit or for a stop request, then kills and
/// reaps every descendant. Returns the function's wait status.
pub(crate) unsafe fn supervise(
    runner: libc::pid_t,
    function: libc::pid_t,
    handled: &libc::sigset_t,
) -> libc::c_int {
    let mut status: Option<libc::c_int> = None;
    // SAFETY: raw system calls on stack values.
    unsafe {
        loop {
            reap(function, &mut status);
            if status.is_some() {
                break;
            }
            let mut info: libc::siginfo_t = std::mem::zeroed();
            let sig = libc::sigwaitinfo(handled, &mut info);
            match sig {
                libc::SIGCHLD => {}
                // Fired by a thread of the runner exiting: not a stop.
                s if s == PARENT_DIED && libc::getppid() == runner => {}
                s if s > 0 => break,
                _ => {}
            }
        }
    }
    // SAFETY: as above.
    unsafe { end_tree(function, status) }
}

/// The resident supervisor's per-call process: waits for the function
/// `function` to exit, for a stop signal, for the death of the resident
/// supervisor `resident` (its parent), or for the runner to close its end
/// of the call's status socket `status_fd` (the call was dropped: timeout,
/// output over the limit, client cancel), then kills and reaps every
/// descendant ([`end_tree`]). The handled signals are read from `signals`
/// (a non-blocking signalfd of `handled` the caller keeps), or from one
/// made for this call. When the resident supervisor died, `control` (the
/// caller's copy of its control socket, or -1) is closed at once, before
/// the tree is ended, so that the runner finds the socket closed instead of
/// sending a request no one will read. Returns the function's wait status
/// (SIGKILL when it was stopped before it exited), or `None` when the
/// resident supervisor died first (the call has no status to report then).
#[allow(dead_code)] // used by the supervisor program
pub(crate) unsafe fn supervise_call(
    resident: libc::pid_t,
    function: libc::pid_t,
    handled: &libc::sigset_t,
    signals: Option<libc::c_int>,
    control: libc::c_int,
    status_fd: libc::c_int,
) -> Option<libc::c_int> {
    let mut status: Option<libc::c_int> = None;
    let mut lost = false;
    // SAFETY: raw system calls on stack values.
    unsafe {
        // Without a signalfd, the signals are polled for every 10 ms.
        let own = signals.is_none();
        let signals = signals
            .unwrap_or_else(|| libc::signalfd(-1, handled, libc::SFD_CLOEXEC | libc::SFD_NONBLOCK));
        'wait: loop {
            reap(function, &mut status);
            if status.is_some() {
                break;
            }
            let mut fds = [
                libc::pollfd {
                    fd: signals,
                    events: libc::POLLIN,
                    revents: 0,
                },
                // The runner never writes here: readable means hang-up.
                libc::pollfd {
                    fd: status_fd,
                    events: libc::POLLIN,
                    revents: 0,
                },
            ];
            let n = libc::poll(fds.as_mut_ptr(), 2, if signals < 0 { 10 } else { -1 });
            if n < 0 && errno() != libc::EINTR {
                break;
            }
            if fds[1].revents != 0 {
                break;
            }
            if signals < 0 {
                let pending = libc::timespec {
                    tv_sec: 0,
                    tv_nsec: 0,
                };
                loop {
                    match libc::sigtimedwait(handled, std::ptr::null_mut(), &pending) {
                        s if s <= 0 => break,
                        s if stops(s, resident) => {
                            lost = s == PARENT_DIED;
                            break 'wait;
                        }
                        _ => {}
                    }
                }
                continue;
            }
            while let Some(sig) = next_signal(signals) {
                if stops(sig, resident) {
                    lost = sig == PARENT_DIED;
                    break 'wait;
                }
            }
        }
        if own && signals >= 0 {
            libc::close(signals);
        }
        if lost && control >= 0 {
            libc::close(control);
        }
        let status = end_tree(function, status);
        (!lost).then_some(status)
    }
}

/// The next signal pending on the non-blocking signalfd `signals`, or
/// `None` when there is none.
pub(crate) unsafe fn next_signal(signals: libc::c_int) -> Option<libc::c_int> {
    // SAFETY: a read into a stack value of the size it is.
    unsafe {
        let mut info: libc::signalfd_siginfo = std::mem::zeroed();
        let size = std::mem::size_of::<libc::signalfd_siginfo>();
        let n = libc::read(
            signals,
            (&mut info as *mut libc::signalfd_siginfo).cast(),
            size,
        );
        (n == size as isize).then_some(info.ssi_signo as libc::c_int)
    }
}

/// Whether the handled signal `sig` stops the function: any but SIGCHLD,
/// and [`PARENT_DIED`] only once this process was re-parented away from
/// `parent`.
#[allow(dead_code)] // used by the supervisor program
pub(crate) unsafe fn stops(sig: libc::c_int, parent: libc::pid_t) -> bool {
    match sig {
        libc::SIGCHLD => false,
        // SAFETY: getppid has no memory effect.
        PARENT_DIED => (unsafe { libc::getppid() }) != parent,
        _ => true,
    }
}

/// Kills the function `function` (unless its wait status is already in
/// `status`) and every descendant of this process, and reaps them all.
/// Their own descendants become this subreaper's children as they are
/// orphaned and are killed in the next round, until none is left. Returns
/// the function's wait status, SIGKILL when it had not exited by itself.
pub(crate) unsafe fn end_tree(
    function: libc::pid_t,
    mut status: Option<libc::c_int>,
) -> libc::c_int {
    // SAFETY: raw system calls on stack values.
    unsafe {
        if status.is_none() {
            libc::kill(function, libc::SIGKILL);
        }
        libc::kill(-function, libc::SIGKILL);
        // Kill every child; their own descendants become children as they
        // are orphaned and are killed in the next round, until none is left.
        let mut quiet: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut quiet);
        libc::sigaddset(&mut quiet, libc::SIGCHLD);
        loop {
            if !reap(function, &mut status) {
                break;
            }
            kill_children();
            let pause = libc::timespec {
                tv_sec: 0,
                tv_nsec: 5_000_000,
            };
            libc::sigtimedwait(&quiet, std::ptr::null_mut(), &pause);
        }
    }
    // SIGKILL when the function was stopped before it exited.
    status.unwrap_or(libc::SIGKILL)
}

/// Reaps every exited child, recording the function's status. Returns
/// whether any child is left.
unsafe fn reap(function: libc::pid_t, status: &mut Option<libc::c_int>) -> bool {
    loop {
        let mut st: libc::c_int = 0;
        // SAFETY: waitpid on a stack integer.
        let pid = unsafe { libc::waitpid(-1, &mut st, libc::WNOHANG) };
        if pid == function {
            *status = Some(st);
        } else if pid == 0 {
            return true;
        } else if pid < 0 {
            return errno() != libc::ECHILD;
        }
    }
}

/// Sends SIGKILL to every child of this process (and to its group, which
/// takes that child's non-escaped descendants along).
unsafe fn kill_children() {
    // SAFETY: raw file reads into stack buffers.
    unsafe {
        let fd = libc::open(
            c"/proc/thread-self/children".as_ptr(),
            libc::O_RDONLY | libc::O_CLOEXEC,
        );
        if fd >= 0 {
            let mut buf = [0u8; 4096];
            let n = libc::read(fd, buf.as_mut_ptr().cast(), buf.len());
            libc::close(fd);
            if n > 0 {
                for pid in pids(&buf[..n as usize]) {
                    kill_child(pid);
                }
            }
            return;
        }
        scan_proc_for_children();
    }
}

unsafe fn kill_child(pid: libc::pid_t) {
    // SAFETY: signals only.
    unsafe {
        libc::kill(pid, libc::SIGKILL);
        if libc::getpgid(pid) == pid {
            libc::kill(-pid, libc::SIGKILL);
        }
    }
}

/// The decimal numbers in `text`, separated by anything else.
fn pids(text: &[u8]) -> impl Iterator<Item = libc::pid_t> + '_ {
    text.split(|b| !b.is_ascii_digit())
        .filter(|w| !w.is_empty())
        .filter_map(|w| {
            w.iter().try_fold(0 as libc::pid_t, |n, d| {
                n.checked_mul(10)?.checked_add((d - b'0') as libc::pid_t)
            })
        })
}

/// The state and the parent pid in the text of `/proc/<pid>/stat`: the
/// first and second fields after the command name, which ends at the last
/// `)`. Allocates nothing (it also runs in a forked supervisor).
pub(crate) fn stat_state_ppid(stat: &[u8]) -> Option<(u8, libc::pid_t)> {
    let close = stat.iter().rposition(|&b| b == b')')?;
    let mut fields = stat[close + 1..]
        .split(|&b| b == b' ')
        .filter(|f| !f.is_empty());
    let state = *fields.next()?.first()?;
    Some((state, pids(fields.next()?).next()?))
}

/// The parent pid in the text of `/proc/<pid>/stat` ([`stat_state_ppid`]).
fn stat_ppid(stat: &[u8]) -> Option<libc::pid_t> {
    stat_state_ppid(stat).map(|(_, ppid)| ppid)
}

/// Without `/proc/thread-self/children` (kernels built without
/// `CONFIG_PROC_CHILDREN`): reads every `/proc/<pid>/stat` and kills those
/// whose parent is this process.
unsafe fn scan_proc_for_children() {
    // SAFETY: raw directory and file reads into stack buffers.
    unsafe {
        let me = libc::getpid();
        let dir = libc::open(
            c"/proc".as_ptr(),
            libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC,
        );
        if dir < 0 {
            return;
        }
        let mut entries = [0u8; 8192];
        loop {
            let n = libc::syscall(
                libc::SYS_getdents64,
                dir,
                entries.as_mut_ptr(),
                entries.len(),
            );
            if n <= 0 {
                break;
            }
            let mut at = 0usize;
            while at < n as usize {
                // struct linux_dirent64 { u64 ino; i64 off; u16 reclen; u8 type; char name[]; }
                let reclen = u16::from_ne_bytes([entries[at + 16], entries[at + 17]]) as usize;
                let name = &entries[at + 19..at + reclen];
                let name = &name[..name.iter().position(|&b| b == 0).unwrap_or(name.len())];
                at += reclen;
                if name.is_empty() || !name.iter().all(u8::is_ascii_digit) || name.len() > 10 {
                    continue;
                }
                let mut path = [0u8; 32];
                let prefix = b"/proc/";
                path[..prefix.len()].copy_from_slice(prefix);
                path[prefix.len()..prefix.len() + name.len()].copy_from_slice(name);
                let end = prefix.len() + name.len();
                path[end..end + 5].copy_from_slice(b"/stat");
                let fd = libc::open(path.as_ptr().cast(), libc::O_RDONLY | libc::O_CLOEXEC);
                if fd < 0 {
                    continue;
                }
                let mut stat = [0u8; 512];
                let len = libc::read(fd, stat.as_mut_ptr().cast(), stat.len());
                libc::close(fd);
                if len <= 0 {
                    continue;
                }
                if stat_ppid(&stat[..len as usize]) == Some(me)
                    && let Some(pid) = pids(name).next()
                {
                    kill_child(pid);
                }
            }
        }
        libc::close(dir);
    }
}

/// Exits the way the function did: the same exit code, or the same signal.
pub(crate) unsafe fn relay(status: libc::c_int) -> ! {
    // SAFETY: the process ends here.
    unsafe {
        if libc::WIFEXITED(status) {
            libc::_exit(libc::WEXITSTATUS(status));
        }
        let sig = if libc::WIFSIGNALED(status) {
            libc::WTERMSIG(status)
        } else {
            libc::SIGKILL
        };
        let no_core = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        libc::setrlimit(libc::RLIMIT_CORE, &no_core);
        libc::signal(sig, libc::SIG_DFL);
        let mut all: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut all);
        libc::pthread_sigmask(libc::SIG_UNBLOCK, &all, std::ptr::null_mut());
        libc::kill(libc::getpid(), sig);
        libc::_exit(128 + sig)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_pid_lists_and_stat_lines() {
        assert_eq!(pids(b"12 345 \n").collect::<Vec<_>>(), [12, 345]);
        assert_eq!(pids(b"").count(), 0);
        assert_eq!(pids(b"99999999999999").count(), 0);
        assert_eq!(
            stat_ppid(b"4242 (a) b) weird) S 17 4242 4242 0 -1"),
            Some(17)
        );
        assert_eq!(stat_ppid(b"garbage"), None);
        assert_eq!(
            stat_state_ppid(b"77 (spare) x) Z 1 77 77 0 -1"),
            Some((b'Z', 1))
        );
    }
}
