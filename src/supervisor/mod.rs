//! `krm-fn-supervisor`: the program that supervises the function processes
//! of krm-fn-runner and its wrapper server, as a module of the library (the
//! binary, `src/bin/krm-fn-supervisor.rs`, only calls `main`). Hidden from
//! the documentation: nothing here is for use outside this crate.
//!
//! A function runs under a supervisor so that a call never ends while a
//! process it started is alive (`tree`: the child subreaper, the death
//! signals, killing and reaping the whole tree, relaying the exit status).
//! The runner reaches the program in one of two ways
//! (`protocol` holds both command lines and the messages):
//!
//! - **Resident pool** (the default): `krm-fn-supervisor --resident
//!   RUNNER_PID [SPARES]`, started once by the runner with its control
//!   socket as descriptor 0, serves every call, keeping `SPARES` (default
//!   0, at most `pool::MAX_SPARES`) pre-forked per-call supervisors idle
//!   for the next call; each serves call after call (`pool`).
//! - **Per call**: `krm-fn-supervisor RUNNER_PID TOKEN SANDBOX PROGRAM
//!   [ARG...]`, with the function's stdin, stdout and stderr as descriptors
//!   0, 1 and 2 and its environment and working directory as its own
//!   (`per_call`), when a call cannot go through the pool.
//!
//! Either way the runner starts the program with `posix_spawn`
//! (`std::process::Command` without a `pre_exec` hook: a `vfork`-style
//! clone that copies none of the runner's memory), and the supervisor
//! starts the function with a `vfork`-style clone (`CLONE_VM |
//! CLONE_VFORK`, on a stack of its own: nothing is copied) after preparing
//! the call's sandbox `layers`. When the function cannot be started
//! (program missing, not executable, a failed set-up call), the function
//! has written nothing, and the runner is told why with the `errno`
//! (`protocol::START_FAILED` on stderr and exit code 127 per call, a
//! report on the call's status socket in the pool); it turns that into the
//! same start-up error as a failed `exec` of its own.
//!
//! The binary is `no_main`: the C runtime calls its `main` directly,
//! skipping the Rust runtime's start-up (which would, among other things,
//! set SIGPIPE to be ignored, a disposition the function would inherit).

use std::ffi::{CStr, c_char, c_int};

pub(crate) mod layers;
mod per_call;
pub(crate) mod pool;
pub(crate) mod protocol;
pub(crate) mod tree;

use protocol::{MAX_TOKEN, parse_count, parse_hex, parse_pid};

/// The calling thread's `errno`, `EIO` when there is none.
fn last_errno() -> i32 {
    std::io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EIO)
}

/// Writes the program's usage to stderr and exits with 2.
fn usage() -> ! {
    let text = b"usage: krm-fn-supervisor RUNNER_PID TOKEN SANDBOX PROGRAM [ARG...]\n\
        \x20      krm-fn-supervisor --resident RUNNER_PID [SPARES]\n\
        krm-fn-runner starts this program for each function it runs; it is not meant to be run by hand.\n";
    // SAFETY: a write from a static buffer, then the process ends.
    unsafe {
        libc::write(2, text.as_ptr().cast(), text.len());
        libc::_exit(2)
    }
}

/// The `krm-fn-supervisor` program: reads its command line (`argc`
/// strings at `argv`, as the C runtime passes them; the forms are in the
/// module's description) and serves the resident pool or the one call. It
/// never returns: it exits with 2 and the usage on a command line it cannot
/// read, otherwise as `pool` or `per_call` say.
///
/// # Safety
/// Called once, as the process's entry point: `argv` holds `argc` valid C
/// strings followed by a null pointer, and descriptors 0 to 2 are the
/// runner's (the control socket, or the function's stdin, stdout and
/// stderr).
pub unsafe fn main(argc: c_int, argv: *const *const c_char) -> c_int {
    // SAFETY: argv[i] is a valid C string for i < argc.
    let arg = |i: c_int| (argc > i).then(|| unsafe { CStr::from_ptr(*argv.add(i as usize)) });
    if arg(1).is_some_and(|a| a.to_bytes() == b"--resident") {
        let runner = arg(2).and_then(|r| parse_pid(r.to_bytes()));
        let spares = match arg(3) {
            None => Some(0),
            Some(n) => parse_count(n.to_bytes()).filter(|&n| n <= pool::MAX_SPARES),
        };
        match (runner, spares, argc <= 4) {
            // SAFETY: called once, at the start of the process.
            (Some(runner), Some(spares), true) => unsafe { pool::serve(runner, spares) },
            _ => usage(),
        }
    }
    let (Some(runner), Some(token), Some(sandbox), true) = (arg(1), arg(2), arg(3), argc >= 5)
    else {
        usage();
    };
    let Some(runner) = parse_pid(runner.to_bytes()) else {
        usage();
    };
    let token = token.to_bytes();
    if token.is_empty() || token.len() > MAX_TOKEN {
        usage();
    }
    let Some(sandbox) = parse_hex(sandbox.to_bytes()) else {
        usage();
    };
    // SAFETY: once, at the start of the process; `argv + 4` is the
    // null-terminated argv of the function (argc ≥ 5).
    unsafe { per_call::run(runner, token, &sandbox, argv.add(4)) }
}
