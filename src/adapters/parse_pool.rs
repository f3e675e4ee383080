//! Parsing off the async workers.
//!
//! Parsing a ResourceList is CPU work proportional to its size (bounded by
//! the codec's budget, see [`crate::domain::codec`]). Done on the async
//! worker threads, a burst of large or hostile inputs would stall every
//! other call on the server, health checks included. Every parse of input
//! or function output in the adapters therefore runs here: on tokio's
//! blocking pool, at most one per core but one at once (at least one), so
//! a core stays free for the async workers; the rest wait their turn
//! without holding a thread.

use std::sync::{Arc, LazyLock};

use tokio::sync::Semaphore;

use crate::domain::evaluation::EvalError;

static PARSERS: LazyLock<Arc<Semaphore>> = LazyLock::new(|| {
    let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
    Arc::new(Semaphore::new(cores.saturating_sub(1).max(1)))
});

/// Runs `parse` on the blocking pool, at most one parse per core but one at once,
/// and returns its result.
///
/// Errors: [`EvalError::Internal`] only if `parse` panicked.
pub async fn parse_off_workers<T: Send + 'static>(
    parse: impl FnOnce() -> T + Send + 'static,
) -> Result<T, EvalError> {
    let _turn = PARSERS
        .clone()
        .acquire_owned()
        .await
        .map_err(|_| EvalError::Internal("the parser pool is closed".into()))?;
    tokio::task::spawn_blocking(parse)
        .await
        .map_err(|e| EvalError::Internal(format!("parsing failed: {e}")))
}
