//! Adapters: the only code that touches processes, sockets and files.

pub mod admission;
pub mod exec;
pub mod grpc;
pub mod kube;
pub mod oci;
pub mod package;
pub mod parse_pool;
pub mod pod;
pub mod runtime;
pub mod sim;
pub mod telemetry;
