//! The `grpc-health-probe` binary (Kubernetes exec probes of the runner and
//! of function pods); everything lives in the library.

fn main() -> std::process::ExitCode {
    krm_fn_runner::bin::grpc_health_probe()
}
