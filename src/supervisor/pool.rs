//! The resident supervisor: one long-lived process that keeps per-call
//! supervisors forked ahead of time (spares) waiting for the requests the
//! runner sends on its control socket (descriptor 0; the protocol is
//! [`super::protocol`]'s), or forks one for a request when
//! no spare is idle.
//!
//! - It is single-threaded, so its per-call children can tie their death
//!   signal to it; it is tied to the runner the same way, and it also ends
//!   when the runner's end of the control socket closes (the runner exited
//!   or was killed), which a death signal tied to one runner thread could
//!   miss. When it ends, each per-call supervisor is signalled and kills
//!   its function's whole tree.
//! - Each per-call child is the child subreaper of its function, starts it
//!   exactly as the per-call program does, and reports on the call's status
//!   socket once the function and every descendant are gone (or why the
//!   function could not start). It stops the call when the runner closes
//!   that socket.
//! - A spare serves call after call: once a call's tree is gone and
//!   reported it puts itself back in the pool (nothing of the call is left
//!   in it: no child, no descriptor, working directory, environment, death
//!   signal or pending signal), so under load no process is forked per
//!   call at all. Spares beyond `SPARES` that get no call for
//!   [`RETIRE_AFTER_SECONDS`] end.
use std::ffi::c_char;
use std::io::{IoSlice, IoSliceMut};
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};

use nix::sys::socket::{ControlMessage, ControlMessageOwned, MsgFlags, recvmsg, sendmsg};

use super::per_call::{FUNCTION_STACK, Start, start_function};
use super::protocol::{
    MAX_REQUEST, REPORT_BAD_REQUEST, REPORT_EXITED, REPORT_START_FAILED, SETUP_FAILED,
    decode_request, encode_report,
};
use super::{last_errno, layers, tree};

unsafe extern "C" {
    static mut environ: *const *const c_char;
}

/// Sends a report on a call's status socket (nothing when the runner
/// has already closed its end).
fn report(status: RawFd, kind: u32, value: i32) {
    let bytes = encode_report(kind, value);
    // SAFETY: a send from a stack buffer.
    unsafe {
        libc::send(
            status,
            bytes.as_ptr().cast(),
            bytes.len(),
            libc::MSG_NOSIGNAL,
        );
    }
}

fn close_all(fds: &[RawFd]) {
    for &fd in fds {
        // SAFETY: closing descriptors this process received.
        unsafe {
            libc::close(fd);
        }
    }
}

/// The most pre-forked spares a resident supervisor keeps idle.
pub(crate) const MAX_SPARES: usize = 16;

/// The most per-call supervisors in the pool (idle and serving calls);
/// with that many, further calls get a supervisor forked for them alone.
const MAX_POOL: usize = 1024;

/// Seconds a spare beyond the wanted number of idle ones waits for a
/// call before it ends (`SO_RCVTIMEO` on the control socket).
pub(super) const RETIRE_AFTER_SECONDS: u16 = 5;

/// A pool slot's state ([`Pool::states`]).
const FREE: u8 = 0;
const IDLE: u8 = 1;
const BUSY: u8 = 2;

/// What the resident process and its spares share (an anonymous
/// `MAP_SHARED` mapping made before the first fork): how many spares
/// are idle, how many should be, and each pool slot's state.
#[repr(C)]
struct Pool {
    idle: AtomicUsize,
    wanted: AtomicUsize,
    states: [AtomicU8; MAX_POOL],
}

impl Pool {
    /// A zeroed shared mapping (every slot [`FREE`]), or `None`.
    unsafe fn map() -> Option<&'static Pool> {
        // SAFETY: a fresh anonymous mapping, zero-filled by the kernel;
        // all-zero is a valid `Pool` (atomics of 0).
        unsafe {
            let at = libc::mmap(
                std::ptr::null_mut(),
                std::mem::size_of::<Pool>(),
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_ANONYMOUS,
                -1,
                0,
            );
            (at != libc::MAP_FAILED).then(|| &*(at as *const Pool))
        }
    }

    fn idle(&self) -> usize {
        self.idle.load(Ordering::SeqCst)
    }

    fn wanted(&self) -> usize {
        self.wanted.load(Ordering::SeqCst)
    }

    /// Slot `slot` goes from idle to serving a call; returns how many
    /// spares are left idle.
    fn take(&self, slot: usize) -> usize {
        self.states[slot].store(BUSY, Ordering::SeqCst);
        self.idle.fetch_sub(1, Ordering::SeqCst) - 1
    }

    /// Slot `slot` is idle again.
    fn back(&self, slot: usize) {
        self.states[slot].store(IDLE, Ordering::SeqCst);
        self.idle.fetch_add(1, Ordering::SeqCst);
    }

    /// Whether idle slot `slot` may end: only while more than the
    /// wanted number are idle; it is then counted out.
    fn retire(&self, slot: usize) -> bool {
        let mut idle = self.idle();
        loop {
            if idle <= self.wanted() {
                return false;
            }
            match self
                .idle
                .compare_exchange(idle, idle - 1, Ordering::SeqCst, Ordering::SeqCst)
            {
                Ok(_) => {
                    self.states[slot].store(FREE, Ordering::SeqCst);
                    return true;
                }
                Err(now) => idle = now,
            }
        }
    }

    /// The process in slot `slot` ended: the slot is free again, and no
    /// longer counted idle if it was.
    fn ended(&self, slot: usize) {
        if self.states[slot].swap(FREE, Ordering::SeqCst) == IDLE {
            self.idle.fetch_sub(1, Ordering::SeqCst);
        }
    }
}

/// The received request: its bytes (a prefix of the buffer), its
/// descriptors, and whether it arrived whole; `None` when the runner
/// closed its end, `Some(Err(()))` when nothing was there to read
/// (or nothing came within the receive timeout).
type Received = Option<Result<(usize, Vec<RawFd>, bool), ()>>;

/// Reads one request from the control socket `control` into `buf`, its
/// descriptors close-on-exec; `flags` adds `MSG_DONTWAIT` or not.
#[allow(clippy::ptr_arg)] // nix's `recvmsg` takes the control buffer as a `Vec`
fn receive(control: RawFd, buf: &mut [u8], space: &mut Vec<u8>, flags: MsgFlags) -> Received {
    let mut iov = [IoSliceMut::new(buf)];
    match recvmsg::<()>(
        control,
        &mut iov,
        Some(space),
        MsgFlags::MSG_CMSG_CLOEXEC | flags,
    ) {
        Ok(msg) => {
            let mut received = Vec::new();
            if let Ok(cmsgs) = msg.cmsgs() {
                for c in cmsgs {
                    if let ControlMessageOwned::ScmRights(fds) = c {
                        received.extend(fds);
                    }
                }
            }
            let whole = !msg
                .flags
                .intersects(MsgFlags::MSG_TRUNC | MsgFlags::MSG_CTRUNC);
            if msg.bytes == 0 && received.is_empty() {
                // The runner closed its end: it exited or was killed.
                return None;
            }
            Some(Ok((msg.bytes, received, whole)))
        }
        Err(nix::errno::Errno::EAGAIN | nix::errno::Errno::EINTR) => Some(Err(())),
        // The runner is gone.
        Err(_) => None,
    }
}

/// What the resident process and its children share: its own pid, the
/// handled signals, the mask from before, its signalfd, both ends of
/// the spares' wake-up pipe, both ends of the hand-off socket (a spare
/// passes on there a request it may not serve, see [`spare`]) and the
/// pool.
struct Resident {
    me: libc::pid_t,
    handled: libc::sigset_t,
    before: libc::sigset_t,
    signals: RawFd,
    notify: [RawFd; 2],
    handoff: [RawFd; 2],
    pool: &'static Pool,
}

impl Resident {
    /// In a child just forked: closes the descriptors that are the
    /// resident process's own.
    unsafe fn leave(&self) {
        close_all(&[
            self.signals,
            self.notify[0],
            self.notify[1],
            self.handoff[0],
            self.handoff[1],
        ]);
    }
}

/// What a spare brings to the call it serves ([`start_call`]).
struct SpareCall<'a> {
    /// Its signalfd of the handled signals.
    signals: RawFd,
    /// Its copy of the control socket.
    control: RawFd,
    /// The function's start stack.
    stack: &'a mut [u8],
    /// The inheritable sandbox layers it took on at its first call
    /// (`layers::INHERITABLE`), `None` before it.
    in_force: &'a mut Option<u8>,
    /// Its end of the hand-off socket.
    handoff: RawFd,
}

/// Serves calls until the runner's end of the control socket closes or
/// the runner dies, keeping `spares` pre-forked per-call supervisors
/// ([`spare`]) idle on the control socket.
///
/// While at least one spare is idle, this process does not read the
/// control socket at all (with `SOCK_SEQPACKET` each request goes to
/// exactly one reader, a blocked spare); it only watches the socket for
/// the runner's hang-up, reaps, and forks spares while fewer than
/// `spares` are idle: at the start, when a spare that took a call left
/// fewer idle (it writes a byte on the wake-up pipe), or when an idle
/// spare died. Spares come back to the pool after their call, so under
/// steady load none is forked. When no spare is idle (none configured,
/// a fork failed, the pool is full, or spares could not set themselves
/// up) it reads requests itself and forks a per-call supervisor for
/// each, which serves that one call.
///
/// # Safety
/// Once, at the start of the process, with the control socket as
/// descriptor 0.
pub(super) unsafe fn serve(runner: libc::pid_t, spares: usize) -> ! {
    // SAFETY: raw system calls on values of this function.
    unsafe {
        tree::close_descriptors_from(3);
        tree::reset_inherited_signals();
        let Ok((handled, before)) = tree::block_handled() else {
            libc::_exit(SETUP_FAILED);
        };
        if tree::tie_to(runner).is_err() {
            libc::_exit(SETUP_FAILED);
        }
        let signals = libc::signalfd(-1, &handled, libc::SFD_CLOEXEC | libc::SFD_NONBLOCK);
        if signals < 0 {
            libc::_exit(SETUP_FAILED);
        }
        let mut notify = [-1; 2];
        if libc::pipe2(notify.as_mut_ptr(), libc::O_CLOEXEC | libc::O_NONBLOCK) != 0 {
            libc::_exit(SETUP_FAILED);
        }
        // Spares write requests they may not serve on one end; this
        // process reads them on the other (and keeps both, so that the
        // socket never reads as closed).
        let mut handoff = [-1; 2];
        if libc::socketpair(
            libc::AF_UNIX,
            libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC,
            0,
            handoff.as_mut_ptr(),
        ) != 0
        {
            libc::_exit(SETUP_FAILED);
        }
        let Some(pool) = Pool::map() else {
            libc::_exit(SETUP_FAILED);
        };
        // Compiled once here, before any spare is forked: every
        // per-call supervisor shares them.
        for (syscalls, network) in [(true, true), (true, false), (false, true)] {
            layers::filter(syscalls, network);
        }
        pool.wanted.store(spares.min(MAX_SPARES), Ordering::SeqCst);
        // Spares beyond the wanted number end after this long without a
        // call (this process itself reads without waiting).
        let retire = libc::timeval {
            tv_sec: RETIRE_AFTER_SECONDS.into(),
            tv_usec: 0,
        };
        libc::setsockopt(
            0,
            libc::SOL_SOCKET,
            libc::SO_RCVTIMEO,
            (&retire as *const libc::timeval).cast(),
            std::mem::size_of::<libc::timeval>() as libc::socklen_t,
        );
        let resident = Resident {
            me: libc::getpid(),
            handled,
            before,
            signals,
            notify,
            handoff,
            pool,
        };
        // The live spares: pid and pool slot (a slot is free for a new
        // spare once its last one was reaped).
        let mut live: Vec<(libc::pid_t, usize)> = Vec::new();
        let mut buf = vec![0u8; MAX_REQUEST];
        let mut space = nix::cmsg_space!([RawFd; 4]);
        loop {
            while pool.idle() < pool.wanted() {
                let Some(slot) = (0..MAX_POOL).find(|&s| live.iter().all(|&(_, l)| l != s)) else {
                    break;
                };
                pool.back(slot);
                match libc::fork() {
                    0 => spare(&resident, slot, &mut buf, &mut space),
                    pid if pid > 0 => live.push((pid, slot)),
                    _ => {
                        // Serve the calls itself until a fork works again.
                        pool.ended(slot);
                        break;
                    }
                }
            }
            let mut fds = [
                libc::pollfd {
                    fd: 0,
                    // With an idle spare, only the hang-up is watched.
                    events: if pool.idle() == 0 { libc::POLLIN } else { 0 },
                    revents: 0,
                },
                libc::pollfd {
                    fd: signals,
                    events: libc::POLLIN,
                    revents: 0,
                },
                libc::pollfd {
                    fd: notify[0],
                    events: libc::POLLIN,
                    revents: 0,
                },
                libc::pollfd {
                    fd: handoff[0],
                    events: libc::POLLIN,
                    revents: 0,
                },
            ];
            if libc::poll(fds.as_mut_ptr(), 4, -1) < 0 {
                if last_errno() == libc::EINTR {
                    continue;
                }
                libc::_exit(SETUP_FAILED);
            }
            if fds[2].revents != 0 {
                // Only a wake-up: the pool says what changed.
                let mut bytes = [0u8; 64];
                while libc::read(notify[0], bytes.as_mut_ptr().cast(), bytes.len()) > 0 {}
            }
            if fds[1].revents != 0 {
                take_signals(signals, runner, pool, &mut live);
            }
            if fds[3].revents != 0
                && let Some(Ok((len, received, whole))) =
                    receive(handoff[0], &mut buf, &mut space, MsgFlags::MSG_DONTWAIT)
            {
                // A request a spare passed on: a per-call supervisor
                // forked for it serves it.
                start_call(&resident, &buf[..len], &received, whole, None);
            }
            if fds[0].revents == 0 {
                continue;
            }
            if pool.idle() > 0 {
                // Hang-up (or an error) with spares waiting: the runner
                // closed its end.
                if fds[0].revents & libc::POLLIN == 0 {
                    libc::_exit(0);
                }
                continue;
            }
            let Some(got) = receive(0, &mut buf, &mut space, MsgFlags::MSG_DONTWAIT) else {
                libc::_exit(0);
            };
            let Ok((len, received, whole)) = got else {
                continue;
            };
            start_call(&resident, &buf[..len], &received, whole, None);
        }
    }
}

/// A pre-forked per-call supervisor in pool slot `slot`: the child
/// subreaper, killed by the kernel (`SIGKILL` death signal) if the
/// resident process dies while it is idle, blocked in `recvmsg` on the
/// control socket for the next call. When it takes one it counts itself
/// out of the idle spares (waking the resident process when fewer than
/// the wanted number are left), ties itself to the resident process the
/// way every per-call supervisor is ([`tree::arm`]:
/// [`tree::PARENT_DIED`], and an exit when the resident process is
/// already gone: the runner then reads the closed status socket as a
/// lost supervisor) and serves the call exactly as a freshly forked one
/// ([`run_call`]). Then it puts back what the call changed (descriptors
/// 0–2 on `/dev/null`, the working directory, the environment, the
/// `SIGKILL` death signal), and goes back to the pool; it ends instead
/// when the resident process is gone, when a stop signal arrived, when
/// its own resource limits, scheduling (policy, nice value, priority,
/// time slice) or CPU affinity changed ([`Own`]), or when it is a spare beyond the wanted number and no
/// call came for [`RETIRE_AFTER_SECONDS`].
#[allow(clippy::ptr_arg)] // passed on to `receive`
unsafe fn spare(resident: &Resident, slot: usize, buf: &mut [u8], space: &mut Vec<u8>) -> ! {
    // SAFETY: raw system calls in this single-threaded process.
    unsafe {
        if libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0
            || libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) != 0
            || libc::getppid() != resident.me
        {
            libc::_exit(SETUP_FAILED);
        }
        // Of the resident process's descriptors only the write end of
        // the wake-up pipe is kept (close-on-exec). The control socket
        // moves above the standard descriptors, which hold /dev/null
        // between calls, so the descriptors a request brings are never
        // 0, 1 or 2.
        let notify = resident.notify[1];
        let handoff = resident.handoff[1];
        close_all(&[resident.signals, resident.notify[0], resident.handoff[0]]);
        let control = libc::fcntl(0, libc::F_DUPFD_CLOEXEC, 3);
        let null = libc::open(c"/dev/null".as_ptr(), libc::O_RDWR | libc::O_CLOEXEC);
        let home = libc::open(
            c".".as_ptr(),
            libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC,
        );
        let signals = libc::signalfd(
            -1,
            &resident.handled,
            libc::SFD_CLOEXEC | libc::SFD_NONBLOCK,
        );
        if control < 0 || null < 0 || home < 0 || signals < 0 || !standard_on(null) {
            libc::_exit(SETUP_FAILED);
        }
        let original = environ;
        let own = Own::read();
        let mut stack = vec![0u8; FUNCTION_STACK];
        let mut in_force = None;
        loop {
            let (len, received, whole) = loop {
                match receive(control, buf, space, MsgFlags::empty()) {
                    None => libc::_exit(0),
                    Some(Ok(got)) => break got,
                    Some(Err(())) if resident.pool.retire(slot) => libc::_exit(0),
                    Some(Err(())) => {}
                }
            };
            if resident.pool.take(slot) < resident.pool.wanted() {
                libc::write(notify, [1u8].as_ptr().cast(), 1);
            }
            let served = start_call(
                resident,
                &buf[..len],
                &received,
                whole,
                Some(SpareCall {
                    signals,
                    control,
                    stack: &mut stack,
                    in_force: &mut in_force,
                    handoff,
                }),
            );
            environ = original;
            if !served
                || !standard_on(null)
                || libc::fchdir(home) != 0
                || stop_pending(signals, resident.me)
                || Own::read() != own
                || libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) != 0
                || libc::getppid() != resident.me
            {
                libc::_exit(0);
            }
            resident.pool.back(slot);
        }
    }
}

/// What a spare passes on to every function it starts and a function
/// running as the same user could change from outside (`prlimit`,
/// `renice`, `chrt`, `taskset` on its parent): the resource limits, the
/// scheduling policy with its nice value, priority and time slice, and
/// the CPU affinity. A spare whose own changed during a call ends
/// instead of serving another (a lowered hard limit could not be raised
/// back without privilege, nor `SCHED_IDLE` left for a policy it had).
#[derive(PartialEq)]
struct Own {
    /// Soft and hard limit of each of Linux's 16 resources (`RLIMIT_*`).
    limits: [(libc::rlim_t, libc::rlim_t); 16],
    /// Policy, its flags, nice value, static priority and time slice
    /// (nanoseconds) of `sched_getattr` (without it: policy and nice
    /// value only).
    scheduling: (u32, u64, i32, u32, u64),
    /// The affinity mask: 1,024 CPUs (`CPU_SETSIZE`), 64 per word.
    cpus: [u64; 16],
}

impl Own {
    fn read() -> Own {
        let mut own = Own {
            limits: [(0, 0); 16],
            scheduling: (0, 0, 0, 0, 0),
            cpus: [0; 16],
        };
        // SAFETY: reads into values of this function.
        unsafe {
            for (resource, limit) in own.limits.iter_mut().enumerate() {
                let mut l: libc::rlimit = std::mem::zeroed();
                if libc::getrlimit(resource as _, &mut l) == 0 {
                    *limit = (l.rlim_cur, l.rlim_max);
                }
            }
            let mut attr: libc::sched_attr = std::mem::zeroed();
            if libc::syscall(
                libc::SYS_sched_getattr,
                0,
                &mut attr as *mut libc::sched_attr,
                std::mem::size_of::<libc::sched_attr>() as libc::c_uint,
                0,
            ) == 0
            {
                own.scheduling = (
                    attr.sched_policy,
                    attr.sched_flags,
                    attr.sched_nice,
                    attr.sched_priority,
                    attr.sched_runtime,
                );
            } else {
                // Without `sched_getattr` (a seccomp filter): the
                // policy and the nice value alone.
                own.scheduling.0 = libc::sched_getscheduler(0) as u32;
                own.scheduling.2 = libc::getpriority(libc::PRIO_PROCESS, 0);
            }
            libc::syscall(
                libc::SYS_sched_getaffinity,
                0,
                std::mem::size_of_val(&own.cpus),
                own.cpus.as_mut_ptr(),
            );
        }
        own
    }
}

/// Puts `/dev/null` (descriptor `null`) on descriptors 0, 1 and 2,
/// closing what was there (a call's pipes).
unsafe fn standard_on(null: RawFd) -> bool {
    // SAFETY: dup2 of descriptors this process owns.
    unsafe { (0..3).all(|fd| libc::dup2(null, fd) == fd) }
}

/// Reads the signals left pending after a call: whether one of them
/// asks this process to stop ([`tree::stops`]: anything but
/// `SIGCHLD`, and [`tree::PARENT_DIED`] only once the resident
/// process `resident` is gone).
unsafe fn stop_pending(signals: RawFd, resident: libc::pid_t) -> bool {
    let mut stop = false;
    // SAFETY: reads of the signalfd; `stops` only asks for the parent.
    unsafe {
        while let Some(sig) = tree::next_signal(signals) {
            stop |= tree::stops(sig, resident);
        }
    }
    stop
}

/// Reads the pending signals: reaps finished children (an idle spare
/// among them leaves the idle count, and the wanted number drops when
/// it could not set itself up), and ends this process on a stop signal
/// or when the runner died.
unsafe fn take_signals(
    signals: RawFd,
    runner: libc::pid_t,
    pool: &Pool,
    live: &mut Vec<(libc::pid_t, usize)>,
) {
    // SAFETY: reads of the signalfd, waitpid on a stack integer.
    unsafe {
        while let Some(sig) = tree::next_signal(signals) {
            match sig {
                libc::SIGCHLD => {
                    let mut st = 0;
                    loop {
                        let pid = libc::waitpid(-1, &mut st, libc::WNOHANG);
                        if pid <= 0 {
                            break;
                        }
                        let Some(at) = live.iter().position(|&(p, _)| p == pid) else {
                            continue;
                        };
                        let (_, slot) = live.swap_remove(at);
                        pool.ended(slot);
                        if libc::WIFEXITED(st) && libc::WEXITSTATUS(st) == SETUP_FAILED {
                            let wanted = pool.wanted();
                            pool.wanted
                                .store(wanted.saturating_sub(1), Ordering::SeqCst);
                        }
                    }
                }
                // Fired by a thread of the runner exiting: not a stop.
                tree::PARENT_DIED if libc::getppid() == runner => {}
                _ => libc::_exit(0),
            }
        }
    }
}

/// Serves one request: in a spare (`spare`) directly, returning whether
/// the spare may serve another; otherwise (in the resident process
/// itself) in a per-call supervisor forked for it, which serves this
/// call only. Or reports why not. Closes each of the `received`
/// descriptors once, whatever happens: a spare's copies of the
/// function's pipes go as soon as it has started (so that their other
/// ends read the function's end of file), and a descriptor this process
/// opens meanwhile may take one of their numbers (the Landlock rules'
/// paths stay open from call to call).
///
/// A spare takes the request's inheritable sandbox layers (no new
/// privileges, the filter: `layers::INHERITABLE`) on itself at its
/// first call ([`layers::take_on`]), so that the functions of every
/// later call inherit them instead of installing them again. It serves
/// only requests asking for the same ones from then on (the layers
/// cannot be taken off); it passes any other on to the resident process
/// on the hand-off socket, request and descriptors as they came, and
/// that one forks a per-call supervisor for it.
unsafe fn start_call(
    resident: &Resident,
    bytes: &[u8],
    received: &[RawFd],
    whole: bool,
    spare: Option<SpareCall<'_>>,
) -> bool {
    let &[input, output, errors, status] = received else {
        if let Some(&status) = received.get(3) {
            report(status, REPORT_BAD_REQUEST, 0);
        }
        close_all(received);
        return true;
    };
    let Some(request) = decode_request(bytes).filter(|_| whole) else {
        report(status, REPORT_BAD_REQUEST, 0);
        close_all(received);
        return true;
    };
    // Null-terminated arrays of the strings (each ends with its NUL).
    let pointers = |strings: &[&[u8]]| -> Vec<*const c_char> {
        strings
            .iter()
            .map(|s| s.as_ptr().cast())
            .chain([std::ptr::null()])
            .collect()
    };
    let argv = pointers(&request.argv);
    let envp = pointers(&request.env);
    let call = || Call {
        resident: resident.me,
        handled: &resident.handled,
        before: &resident.before,
        fds: [input, output, errors, status],
        sandbox: request.sandbox,
        cwd: request.cwd.map(|c| c.as_ptr().cast()),
        argv: argv.as_ptr(),
        envp: envp.as_ptr(),
    };
    // SAFETY: fork of this single-threaded process; the child only
    // makes system calls and never returns.
    unsafe {
        if let Some(spare) = spare {
            let wanted = layers::layer_bits(request.sandbox) & layers::INHERITABLE;
            match *spare.in_force {
                Some(taken) if taken != wanted => {
                    let fds = ControlMessage::ScmRights(received);
                    if let Err(e) = sendmsg::<()>(
                        spare.handoff,
                        &[IoSlice::new(bytes)],
                        &[fds],
                        MsgFlags::MSG_NOSIGNAL,
                        None,
                    ) {
                        report(status, REPORT_START_FAILED, e as i32);
                    }
                    close_all(received);
                    return true;
                }
                Some(_) => {}
                None => {
                    if let Err(e) = layers::take_on(wanted) {
                        let errno = e.raw_os_error().unwrap_or(libc::EPERM);
                        report(status, REPORT_START_FAILED, errno);
                        close_all(received);
                        return false;
                    }
                    *spare.in_force = Some(wanted);
                }
            }
            let served = run_call(
                call(),
                Some(spare.signals),
                spare.control,
                spare.stack,
                wanted,
            );
            close_all(&[status]);
            return served;
        }
        match libc::fork() {
            0 => {
                resident.leave();
                let mut stack = vec![0u8; FUNCTION_STACK];
                run_call(call(), None, -1, &mut stack, 0);
                libc::_exit(0)
            }
            pid if pid < 0 => report(status, REPORT_START_FAILED, last_errno()),
            _ => {}
        }
        close_all(received);
        true
    }
}

/// What a per-call supervisor needs.
struct Call<'a> {
    resident: libc::pid_t,
    handled: &'a libc::sigset_t,
    before: &'a libc::sigset_t,
    /// The function's stdin, stdout and stderr, and the status socket.
    fds: [RawFd; 4],
    /// The call's sandbox spec.
    sandbox: &'a [u8],
    cwd: Option<*const c_char>,
    argv: *const *const c_char,
    envp: *const *const c_char,
}

/// The per-call supervisor's work: starts the function (its stdio on
/// descriptors 0–2, on `stack` between its clone and its `exec`),
/// supervises it (with `signals`, a signalfd of the handled signals, or
/// one of its own; `control`, a spare's copy of the control socket or
/// -1, is closed as soon as the resident supervisor is found gone) and
/// reports on the status socket. The sandbox layers `in_force` this
/// process took on already are not applied again (the function
/// inherits them). Returns whether
/// this process may serve another call: not when its own set-up failed
/// or the resident supervisor died.
unsafe fn run_call(
    call: Call<'_>,
    signals: Option<RawFd>,
    control: RawFd,
    stack: &mut [u8],
    in_force: u8,
) -> bool {
    let [input, output, errors, status] = call.fds;
    // SAFETY: raw system calls in this single-threaded process.
    unsafe {
        if tree::arm(call.resident).is_err() {
            report(status, REPORT_START_FAILED, last_errno());
            close_all(&[input, output, errors]);
            return false;
        }
        // Descriptors 0–2 (the control socket or /dev/null) are
        // replaced by the function's pipes.
        if libc::dup2(input, 0) < 0 || libc::dup2(output, 1) < 0 || libc::dup2(errors, 2) < 0 {
            report(status, REPORT_START_FAILED, last_errno());
            close_all(&[input, output, errors]);
            return false;
        }
        close_all(&[input, output, errors]);
        if let Some(cwd) = call.cwd
            && libc::chdir(cwd) != 0
        {
            let errno = last_errno();
            close_all(&[0, 1, 2]);
            report(status, REPORT_START_FAILED, errno);
            return true;
        }
        let layers = match layers::prepare(call.sandbox) {
            Ok(layers) => layers.without(in_force),
            Err(e) => {
                close_all(&[0, 1, 2]);
                report(
                    status,
                    REPORT_START_FAILED,
                    e.raw_os_error().unwrap_or(libc::EPERM),
                );
                return true;
            }
        };
        environ = call.envp;
        let mut start = Start {
            supervisor: libc::getpid(),
            before: *call.before,
            layers: &layers,
            argv: call.argv,
            errno: 0,
        };
        let top = (stack.as_mut_ptr() as usize + stack.len()) & !15;
        let function = libc::clone(
            start_function,
            top as *mut libc::c_void,
            libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD,
            (&mut start as *mut Start).cast(),
        );
        let clone_errno = last_errno();
        // The pipes belong to the function.
        close_all(&[0, 1, 2]);
        if function < 0 {
            report(status, REPORT_START_FAILED, clone_errno);
            return true;
        }
        let errno = std::ptr::read_volatile(&start.errno);
        if errno != 0 {
            let mut st = 0;
            libc::waitpid(function, &mut st, 0);
            report(status, REPORT_START_FAILED, errno);
            return true;
        }
        // Nothing to report when the resident supervisor died: the
        // runner reads the end of the socket as that.
        match tree::supervise_call(
            call.resident,
            function,
            call.handled,
            signals,
            control,
            status,
        ) {
            Some(st) => {
                report(status, REPORT_EXITED, st);
                true
            }
            None => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pool_slots_count_idle_spares_through_take_back_retire_and_end() {
        // SAFETY: a fresh anonymous mapping, used by this test alone.
        let pool = unsafe { Pool::map() }.expect("an anonymous shared mapping");
        assert_eq!((pool.idle(), pool.wanted()), (0, 0));
        pool.wanted.store(1, Ordering::SeqCst);
        pool.back(0);
        pool.back(1);
        assert_eq!(pool.idle(), 2);
        // One more idle than wanted: one may retire, the next may not.
        assert!(pool.retire(0));
        assert_eq!(pool.states[0].load(Ordering::SeqCst), FREE);
        assert!(!pool.retire(1));
        assert_eq!(pool.idle(), 1);
        // Taking the last idle spare leaves none; its end does not count
        // it out twice.
        assert_eq!(pool.take(1), 0);
        assert_eq!(pool.states[1].load(Ordering::SeqCst), BUSY);
        pool.ended(1);
        assert_eq!(pool.idle(), 0);
        // An idle spare that dies is counted out.
        pool.back(2);
        assert_eq!(pool.idle(), 1);
        pool.ended(2);
        assert_eq!(
            (pool.idle(), pool.states[2].load(Ordering::SeqCst)),
            (0, FREE)
        );
    }

    #[test]
    fn a_spares_own_settings_read_the_same_until_they_change() {
        let own = Own::read();
        assert!(Own::read() == own);
        let mut changed = Own::read();
        changed.limits[libc::RLIMIT_NOFILE as usize].0 ^= 1;
        assert!(changed != own);
    }
}
