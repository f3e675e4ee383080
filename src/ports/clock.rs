//! The `Clock` port: where the pod runtime reads the time it feeds the pod
//! cache.
//!
//! The pod cache is sans-IO and takes the time with every input; the driver
//! reads it here. [`SystemClock`] is the wall clock (what reclaim-after
//! annotations shared between replicas are written in); tests run the real
//! driver on tokio's paused clock through an adapter of their own
//! ([`crate::adapters::sim::TokioClock`]).

use std::time::{SystemTime, UNIX_EPOCH};

use crate::domain::pod_cache::UnixTime;

/// A source of the current time.
pub trait Clock: Send + Sync + std::fmt::Debug {
    /// The current time.
    fn now(&self) -> UnixTime;
}

/// The wall clock (`SystemTime::now()`).
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> UnixTime {
        UnixTime::from_duration(
            SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .unwrap_or_default(),
        )
    }
}
