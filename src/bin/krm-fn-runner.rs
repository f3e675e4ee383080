//! The `krm-fn-runner` binary; everything lives in the library.

fn main() -> std::process::ExitCode {
    krm_fn_runner::bin::krm_fn_runner()
}
