//! The `krm-fn-runner` binary; everything lives in the library.

/// The process's allocator: mimalloc instead of the C library's `malloc`
/// (musl's, in the static image builds, cost a render of 1,000 resources
/// 0.52 s of its own CPU against mimalloc's 0.32 s; see the README's
/// "Allocator" section). Set here, not in the library, whose users choose
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
    if std::env::args_os().nth(1).is_some_and(|a| a == "render") {
        keep_freed_memory();
    }
    krm_fn_runner::bin::krm_fn_runner()
}

/// For `render`, a short-lived process: freed memory is kept for reuse
/// instead of being given back to the OS and faulted in again by the next
/// step (each step frees the objects and texts it replaces, and page
/// faults were about a quarter of the render's own CPU). At 5,000
/// resources this took a tenth off the render's own CPU for a tenth more
/// peak RSS (README, "Allocator"). `serve` keeps mimalloc's default, so its
/// RSS goes back down after a large call. An explicit
/// `MIMALLOC_PURGE_DELAY` in the environment wins.
fn keep_freed_memory() {
    if std::env::var_os("MIMALLOC_PURGE_DELAY").is_none() {
        // SAFETY: sets one integer option; mimalloc reads it on each purge
        // decision and is initialised before `main`.
        unsafe { libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, -1) };
    }
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
