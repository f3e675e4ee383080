//! A simulated pod platform on virtual time.
//!
//! [`SimCluster`] is a plain, synchronous struct: pods, services, ConfigMaps
//! and pull secrets of one namespace, with a configurable pod start latency
//! distribution ([`StartLatency`]), random failure rates ([`FailureRates`])
//! and scripted failures ([`SimCluster::inject`]). Time moves only when the
//! caller says so ([`SimCluster::advance_to`]), so property tests and the
//! policy simulator step it deterministically from a seed.
//!
//! [`SimPlatform`] wraps a shared `SimCluster` behind the async
//! [`PodPlatform`](crate::ports::PodPlatform) port, for testing the driver
//! exactly as it will run against Kubernetes.

mod cluster;
mod platform;
pub mod replay;

pub use cluster::{FailureRates, Operation, SimCluster, SimStats, StartLatency};
pub use platform::SimPlatform;
pub use replay::{ReplayOptions, replay};
