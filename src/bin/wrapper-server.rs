//! The `wrapper-server` binary, copied into function pods; everything lives in the library.

/// The process's allocator: mimalloc instead of the C library's `malloc`
/// (musl's, in the static image builds, costs the render half again as
/// much CPU; see the README's "Allocator" section).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    krm_fn_runner::bin::wrapper_server()
}
