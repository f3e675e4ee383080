//! The policy simulator's pure parts: request traces and reports.
//!
//! The replay itself (the pod-cache state machine driven on virtual time
//! against the simulated platform) is in `crate::adapters::sim::replay`.

pub mod policy;
pub mod replicas;
pub mod report;
pub mod trace;

pub use policy::{SimPolicy, SimPolicyError};
pub use report::{PolicyReport, Sample};
pub use trace::{TraceEntry, TraceSpec, generate, parse_trace};
