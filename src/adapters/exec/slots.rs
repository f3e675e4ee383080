//! A bound on how many function processes run at once, with a bounded
//! queue in front of it.
//!
//! Porch starts a process for every call, however many arrive; here at most
//! `running` functions run at once, at most `queued` more calls wait for a
//! slot (in arrival order, each within its own deadline), and a call beyond
//! that is refused at once with `RESOURCE_EXHAUSTED`, so memory and process
//! count stay bounded and the caller learns which flag to raise.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::domain::evaluation::EvalError;

/// Default of `--max-concurrent-functions`: four per core, at least 8.
pub fn default_max_running() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get() * 4)
        .unwrap_or(8)
        .max(8)
}

/// Default of `--max-queued-functions`.
pub const DEFAULT_MAX_QUEUED: usize = 1024;

/// Shared slots for function processes; clones share the same bound.
#[derive(Debug, Clone)]
pub struct FunctionSlots {
    running: Arc<Semaphore>,
    waiting: Arc<AtomicUsize>,
    max_running: usize,
    max_queued: usize,
}

/// A running function's slot; freed when dropped.
#[derive(Debug)]
pub struct Slot(#[allow(dead_code)] OwnedSemaphorePermit);

impl PartialEq for FunctionSlots {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.running, &other.running)
    }
}

impl Eq for FunctionSlots {}

impl FunctionSlots {
    /// At most `max_running` functions at once (at least 1) and at most
    /// `max_queued` calls waiting for a slot.
    pub fn new(max_running: usize, max_queued: usize) -> Self {
        let max_running = max_running.max(1);
        Self {
            running: Arc::new(Semaphore::new(max_running)),
            waiting: Arc::new(AtomicUsize::new(0)),
            max_running,
            max_queued,
        }
    }

    /// Takes a slot, waiting in the queue if all are taken.
    ///
    /// Errors: [`EvalError::Exhausted`] naming the flags when the queue is
    /// full. Waiting is cancelled with the caller's future (its deadline).
    pub async fn acquire(&self) -> Result<Slot, EvalError> {
        if let Ok(p) = self.running.clone().try_acquire_owned() {
            return Ok(Slot(p));
        }
        let before = self.waiting.fetch_add(1, Ordering::AcqRel);
        let _leave = Leave(&self.waiting);
        if before >= self.max_queued {
            return Err(EvalError::Exhausted(format!(
                "{} functions are running and {} calls are waiting for one to finish; \
                 retry later, or raise --max-concurrent-functions / --max-queued-functions",
                self.max_running, self.max_queued
            )));
        }
        let permit = self
            .running
            .clone()
            .acquire_owned()
            .await
            .map_err(|_| EvalError::Unavailable("the runner is shutting down".into()))?;
        Ok(Slot(permit))
    }
}

impl Default for FunctionSlots {
    fn default() -> Self {
        Self::new(default_max_running(), DEFAULT_MAX_QUEUED)
    }
}

struct Leave<'a>(&'a AtomicUsize);

impl Drop for Leave<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn queue_then_refuse() {
        let slots = FunctionSlots::new(1, 1);
        let first = slots.acquire().await.unwrap();
        let s2 = slots.clone();
        let waiter = tokio::spawn(async move { s2.acquire().await.map(|_| ()) });
        while slots.waiting.load(Ordering::Acquire) == 0 {
            tokio::task::yield_now().await;
        }
        let refused = slots.acquire().await.unwrap_err();
        assert!(
            refused.to_string().contains("--max-queued-functions"),
            "{refused}"
        );
        drop(first);
        waiter.await.unwrap().unwrap();
        assert_eq!(slots.waiting.load(Ordering::Acquire), 0);
    }
}
