//! The `wrapper-server` binary, copied into function pods; everything lives in the library.

fn main() -> std::process::ExitCode {
    krm_fn_runner::bin::wrapper_server()
}
