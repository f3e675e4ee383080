//! The `krm-fn-runner` binary; everything lives in the library.

/// The process's allocator: mimalloc instead of the C library's `malloc`
/// (musl's, in the static image builds, cost a render of 1,000 resources
/// 0.52 s of its own CPU against mimalloc's 0.32 s; see the
/// "Allocator" section of the book's `docs/src/benchmarks/history.md`). Set here, not in the library, whose users choose
/// their own.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// mimalloc's `mi_option_purge_delay` (its position in `mi_option_t` of the
/// vendored mimalloc 3, which the Rust bindings do not name; the test
/// below checks it is the option `MIMALLOC_PURGE_DELAY` sets): how long,
/// in milliseconds, freed memory stays before it is given back to the OS;
/// -1 keeps it.
const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

fn main() -> std::process::ExitCode {
    let command = std::env::args_os().nth(1);
    let explicit = std::env::var_os("MIMALLOC_PURGE_DELAY").is_some();
    if let Some(delay) = purge_delay(command.as_deref(), explicit) {
        // SAFETY: sets one integer option; mimalloc reads it on each purge
        // decision and is initialised before `main`.
        unsafe { libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, delay) };
    }
    krm_fn_runner::bin::krm_fn_runner()
}

/// The purge delay to set for `command` (the first argument), `None` to
/// keep mimalloc's. For `render`, a short-lived process, -1: freed memory
/// is kept for reuse instead of being given back to the OS and faulted in
/// again by the next step (each step frees the objects and texts it replaces, and page
/// faults were about a quarter of the render's own CPU). At 5,000
/// resources this took a tenth off the render's own CPU for a tenth more
/// peak RSS (the book's measurement log, "Allocator"). `serve` keeps mimalloc's default, so its
/// RSS goes back down after a large call. An explicit
/// `MIMALLOC_PURGE_DELAY` in the environment (`explicit`) wins.
fn purge_delay(command: Option<&std::ffi::OsStr>, explicit: bool) -> Option<std::ffi::c_long> {
    (command.is_some_and(|c| c == "render") && !explicit).then_some(-1)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Run in a child process whose environment sets `MIMALLOC_PURGE_DELAY`
    /// (mimalloc reads its options from the environment when it starts).
    #[test]
    #[ignore = "run by the_purge_delay_option_is_the_one_the_environment_names"]
    fn child_reads_the_purge_delay() {
        // Outside that child (`cargo test -- --include-ignored`) there is
        // nothing to compare with.
        let Ok(want) = std::env::var("MIMALLOC_PURGE_DELAY") else {
            return;
        };
        let want: std::ffi::c_long = want.parse().unwrap();
        // SAFETY: reads one integer option.
        let got = unsafe { libmimalloc_sys::mi_option_get(MI_OPTION_PURGE_DELAY) };
        assert_eq!(got, want);
    }

    #[test]
    fn only_render_keeps_freed_memory_unless_the_environment_says_otherwise() {
        let render = Some(std::ffi::OsStr::new("render"));
        assert_eq!(purge_delay(render, false), Some(-1));
        assert_eq!(purge_delay(render, true), None);
        assert_eq!(
            purge_delay(Some(std::ffi::OsStr::new("serve")), false),
            None
        );
        assert_eq!(purge_delay(None, false), None);
    }

    #[test]
    fn the_purge_delay_option_is_the_one_the_environment_names() {
        for value in ["777", "-1"] {
            let out = std::process::Command::new(std::env::current_exe().unwrap())
                .args(["--exact", "tests::child_reads_the_purge_delay", "--ignored"])
                .env("MIMALLOC_PURGE_DELAY", value)
                .output()
                .unwrap();
            let text = String::from_utf8_lossy(&out.stdout);
            assert!(out.status.success() && text.contains("1 passed"), "{text}");
        }
    }
}
