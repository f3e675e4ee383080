//! A simulated pod platform on virtual time.
//!
//! [`SimCluster`] is a plain, synchronous struct: pods, services, ConfigMaps
//! and pull secrets of one namespace, with a configurable pod start latency
//! distribution ([`StartLatency`]), random failure rates ([`FailureRates`]),
//! scripted failures ([`SimCluster::inject`]), wrappers that take calls, and
//! an [`Audit`] of what must never happen. Time moves only when the caller
//! says so ([`SimCluster::advance_to`]), so property tests and the policy
//! simulator step it deterministically from a seed.
//!
//! [`Harness`] carries out the pod-cache commands of N replicas on a
//! `SimCluster` with API latency, outages, slow listings, watch gaps and
//! clock skew: it executes the machine's commands for the simulator
//! ([`replay()`]) and the property tests, as the pod driver
//! (`adapters::pod`) does against Kubernetes.
//!
//! [`SimPlatform`] wraps a shared `SimCluster` behind the async
//! [`PodPlatform`](crate::ports::PodPlatform) port, on explicit virtual time
//! or on tokio's (paused) clock ([`TokioClock`]), for running the real
//! driver exactly as it runs against Kubernetes.

mod cluster;
pub mod harness;
mod platform;
pub mod replay;

pub use cluster::{
    Audit, CallError, ClusterEvent, FailureRates, Operation, SimCluster, SimStats, StartLatency,
};
pub use harness::{Harness, HarnessConfig, Logged};
pub use platform::{Outage, SimPlatform, TokioClock};
pub use replay::{ReplayOptions, replay};
