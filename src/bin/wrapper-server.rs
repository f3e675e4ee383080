//! The `wrapper-server` binary, copied into function pods; everything lives in the library.

/// The process's allocator: mimalloc instead of the C library's `malloc`
/// (musl's, in the static image builds, cost a render of 1,000 resources
/// 0.52 s of its own CPU against mimalloc's 0.32 s; see the
/// "Allocator" section of the book's `docs/src/benchmarks/history.md`). Set here, not in the library, whose users choose
/// their own.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    krm_fn_runner::bin::wrapper_server()
}
