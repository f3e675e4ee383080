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
/// and returns its result. On a single-threaded (`current_thread`) runtime
/// — `krm-fn-runner render`, whose steps run one after another — it runs
/// in place instead: there are no async workers to keep free, and the
/// parsed values stay with the thread that uses and frees them (no hand-off
/// to a blocking thread and back, no frees across threads).
///
/// Errors: [`EvalError::Internal`] only if `parse` panicked.
pub async fn parse_off_workers<T: Send + 'static>(
    parse: impl FnOnce() -> T + Send + 'static,
) -> Result<T, EvalError> {
    if tokio::runtime::Handle::current().runtime_flavor()
        == tokio::runtime::RuntimeFlavor::CurrentThread
    {
        return std::panic::catch_unwind(std::panic::AssertUnwindSafe(parse)).map_err(|panic| {
            let message = super::panic_message(&*panic).unwrap_or_default();
            EvalError::Internal(format!("parsing failed: the parser panicked: {message}"))
        });
    }
    let _turn = PARSERS
        .clone()
        .acquire_owned()
        .await
        .map_err(|_| EvalError::Internal("the parser pool is closed".into()))?;
    tokio::task::spawn_blocking(parse)
        .await
        .map_err(|e| EvalError::Internal(format!("parsing failed: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// On a single-threaded runtime the parse runs on the calling thread; on
    /// a multi-threaded one it runs on another (the blocking pool). A panic
    /// is an internal error either way, not a crash.
    #[test]
    fn the_parse_runs_in_place_only_on_a_single_threaded_runtime() {
        let caller = || std::thread::current().id();
        let one = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let many = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .build()
            .unwrap();
        for (runtime, in_place) in [(&one, true), (&many, false)] {
            let (here, ran) = runtime.block_on(async {
                let here = caller();
                (here, parse_off_workers(caller).await.unwrap())
            });
            assert_eq!(here == ran, in_place);
        }
        for runtime in [&one, &many] {
            let err = runtime
                .block_on(parse_off_workers(|| -> u8 { panic!("bad input") }))
                .unwrap_err();
            assert!(
                matches!(&err, EvalError::Internal(m) if m.starts_with("parsing failed")),
                "{err:?}"
            );
        }
    }
}
