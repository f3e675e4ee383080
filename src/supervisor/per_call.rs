//! The per-call supervisor program: `krm-fn-supervisor RUNNER_PID TOKEN
//! SANDBOX PROGRAM [ARG...]`, one process for one call, started by the
//! runner with `posix_spawn` when the resident pool cannot take the call
//! (see [`super`]). It confines itself ([`tree::arm`]), prepares the call's
//! sandbox layers, starts the function with a `vfork`-style clone and
//! exits the way the function did once its whole tree is gone
//! ([`tree::supervise`], [`tree::relay`]). The function's start
//! ([`Start`], [`start_function`]) is shared with the resident pool's
//! per-call supervisors ([`super::pool`]).

use std::ffi::{c_char, c_int};

use super::{last_errno, layers, protocol, tree};

/// Writes the start-failure report for `token` and `errno`
/// ([`protocol::start_failed_report`]) to stderr and exits with
/// [`protocol::START_FAILED_CODE`].
pub(super) fn start_failed(token: &[u8], errno: i32) -> ! {
    let (line, len) = protocol::start_failed_report(token, errno);
    // SAFETY: a write from a stack buffer, then the process ends.
    unsafe {
        libc::write(2, line.as_ptr().cast(), len);
        libc::_exit(protocol::START_FAILED_CODE)
    }
}

/// Serves the one call of a per-call supervisor: `runner` is the runner's
/// pid, `token` the call's token, `sandbox` its sandbox spec (decoded) and
/// `function_argv` the function's null-terminated argv (`argv[0]` the
/// program, looked up in `PATH`). Never returns: exits with the function's
/// status, or with [`protocol::START_FAILED_CODE`] and the report.
///
/// # Safety
/// Once, at the start of the process, with the function's stdin, stdout and
/// stderr as descriptors 0 to 2; `function_argv` points to valid C strings
/// followed by a null pointer.
pub(super) unsafe fn run(
    runner: libc::pid_t,
    token: &[u8],
    sandbox: &[u8],
    function_argv: *const *const c_char,
) -> ! {
    // SAFETY: raw system calls on stack values; `function_argv` is the
    // null-terminated argv of the function.
    unsafe {
        // Nothing but the function's three pipes is for this process.
        tree::close_descriptors_from(3);
        tree::reset_inherited_signals();
        let (handled, before) =
            tree::block_handled().unwrap_or_else(|_| start_failed(token, last_errno()));
        if tree::arm(runner).is_err() {
            start_failed(token, last_errno());
        }
        let layers = layers::prepare(sandbox)
            .unwrap_or_else(|e| start_failed(token, e.raw_os_error().unwrap_or(libc::EPERM)));
        // The function starts with a `vfork`-style clone on a stack of its
        // own: this process waits until the function has `exec`ed or
        // failed, and nothing is copied.
        let mut start = Start {
            supervisor: libc::getpid(),
            before,
            layers: &layers,
            argv: function_argv,
            errno: 0,
        };
        let mut stack = vec![0u8; FUNCTION_STACK];
        let top = (stack.as_mut_ptr() as usize + FUNCTION_STACK) & !15;
        let function = libc::clone(
            start_function,
            top as *mut libc::c_void,
            libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD,
            (&mut start as *mut Start).cast(),
        );
        if function < 0 {
            start_failed(token, last_errno());
        }
        drop(stack);
        // stdin and stdout belong to the function; stderr is kept until the
        // function has started, to report a failure.
        libc::close(0);
        libc::close(1);
        let errno = std::ptr::read_volatile(&start.errno);
        if errno != 0 {
            let mut status = 0;
            libc::waitpid(function, &mut status, 0);
            start_failed(token, errno);
        }
        libc::close(2);
        let status = tree::supervise(runner, function, &handled);
        tree::relay(status)
    }
}

/// Bytes of stack for the function between its clone and its `exec`
/// (`execvp` builds each candidate path on it).
pub(super) const FUNCTION_STACK: usize = 256 << 10;

/// What the function needs between its clone and its `exec`, shared with
/// this process (`CLONE_VM`).
pub(super) struct Start {
    /// This process.
    pub(super) supervisor: libc::pid_t,
    /// The signal mask the function starts with.
    pub(super) before: libc::sigset_t,
    /// The call's sandbox layers, prepared before the clone.
    pub(super) layers: *const layers::Prepared,
    /// The function's null-terminated argv; `argv[0]` is the program.
    pub(super) argv: *const *const c_char,
    /// Set when the function could not start: the `errno`.
    pub(super) errno: i32,
}

/// The function's side of the clone: its own process group, death signal
/// and sandbox layers, then `execvp`. Only returns (by `_exit`) when the program could
/// not be started, with the reason in [`Start::errno`].
pub(super) extern "C" fn start_function(start: *mut libc::c_void) -> c_int {
    // SAFETY: `start` is the parent's `Start`, which waits (CLONE_VFORK)
    // until this exits or execs; only system calls follow.
    unsafe {
        let start = &mut *start.cast::<Start>();
        let errno = match tree::enter_function(start.supervisor, &start.before, &*start.layers) {
            Ok(()) => {
                libc::execvp(*start.argv, start.argv);
                last_errno()
            }
            Err(_) => last_errno(),
        };
        std::ptr::write_volatile(&mut start.errno, errno);
        libc::_exit(protocol::START_FAILED_CODE)
    }
}
