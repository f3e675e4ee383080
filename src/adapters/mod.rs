//! Adapters: the implementations of the port traits ([`crate::ports`]) on
//! real things — processes and the sandbox (`exec`, `runtime`), gRPC
//! (`grpc`), Kubernetes (`kube`, `pod`), OCI registries (`oci`), package
//! directories (`package`), telemetry — and the simulated pod platform
//! (`sim`). The domain reaches I/O only through them; the composition root
//! (`app`) and the command line (`cli`) wire them together and do the
//! process's own I/O (flags, environment, exit codes).

#[cfg(feature = "full")]
pub mod admission;
pub mod exec;
#[cfg(feature = "full")]
pub mod grpc;
#[cfg(feature = "full")]
pub mod kube;
#[cfg(feature = "full")]
pub mod oci;
pub mod package;
pub mod parse_pool;
#[cfg(feature = "full")]
pub mod pod;
pub mod runtime;
#[cfg(feature = "full")]
pub mod sim;
#[cfg(feature = "full")]
pub mod telemetry;
/// Telemetry of the render-only build: the tracing spans the runtimes open
/// (no exporters; a subscriber the application installs sees them).
#[cfg(not(feature = "full"))]
pub mod telemetry {
    #[path = "spans.rs"]
    pub mod spans;
}

/// The message a panic carried (its payload when it is a `&str` or a
/// `String`, as `panic!` makes it), `None` for any other payload. Used
/// where the adapters catch a panic and turn it into an error.
pub(crate) fn panic_message(payload: &(dyn std::any::Any + Send)) -> Option<String> {
    payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
}
