//! gRPC: Porch's `evaluator.FunctionEvaluator` service, our server and client.

pub mod client;
pub mod connections;
pub mod limits;
pub mod server;
pub mod shutdown;
pub mod socket;
pub mod status;

/// Code generated from `proto/evaluator.proto` (package `evaluator`).
#[allow(clippy::all, missing_docs)]
pub mod pb {
    tonic::include_proto!("evaluator");
}

pub use client::RemoteEvaluator;
pub use limits::ServerLimits;
pub use server::{Listen, ServeOptions, Server};
