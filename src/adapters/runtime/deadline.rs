//! The per-step time limit, enforced around any runtime.

use std::sync::Arc;

use async_trait::async_trait;

use crate::domain::evaluation::EvalError;
use crate::ports::{FunctionCall, FunctionOutput, FunctionRuntime};

/// Bounds every call of `inner` by the call's own `timeout` (a Kptfile
/// step's `timeout:` or render's `--step-timeout`), whatever the runtime:
/// the exec and remote runtimes stop the function themselves at that time
/// (kill, gRPC deadline); this wrapper also bounds in-process builtins and
/// anything else by running the call as its own task and giving up on it
/// when the time is out. A call that runs out answers
/// [`EvalError::Timeout`]; its task is aborted (which kills a function
/// process it started).
#[derive(Clone)]
pub struct DeadlineRuntime {
    inner: Arc<dyn FunctionRuntime>,
}

impl DeadlineRuntime {
    /// Wraps `inner`.
    pub fn new(inner: Arc<dyn FunctionRuntime>) -> Self {
        Self { inner }
    }
}

#[async_trait]
impl FunctionRuntime for DeadlineRuntime {
    /// `inner`'s answer, or [`EvalError::Timeout`] once `call.timeout` has passed.
    async fn run(&self, call: FunctionCall) -> Result<FunctionOutput, EvalError> {
        let Some(limit) = call.timeout else {
            return self.inner.run(call).await;
        };
        let image = call.target.name().to_string();
        let inner = self.inner.clone();
        let mut task = tokio::spawn(async move { inner.run(call).await });
        match tokio::time::timeout(limit, &mut task).await {
            Ok(Ok(answer)) => answer,
            Ok(Err(e)) => Err(EvalError::Internal(format!(
                "function {image:?} stopped abnormally: {e}"
            ))),
            Err(_) => {
                task.abort();
                Err(EvalError::Timeout {
                    image,
                    after: limit,
                })
            }
        }
    }

    crate::ports::forward_capabilities!(inner);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::resource_list::ResourceList;
    use crate::ports::FunctionTarget;
    use std::time::Duration;

    struct Hangs;

    #[async_trait]
    impl FunctionRuntime for Hangs {
        async fn run(&self, _: FunctionCall) -> Result<FunctionOutput, EvalError> {
            std::future::pending().await
        }
    }

    /// In-process work that never yields (a builtin computing).
    struct Computes;

    #[async_trait]
    impl FunctionRuntime for Computes {
        async fn run(&self, _: FunctionCall) -> Result<FunctionOutput, EvalError> {
            std::thread::sleep(Duration::from_secs(2));
            Err(EvalError::Internal("finished too late".into()))
        }
    }

    /// A decorator answers `may_serve` and `returns_input` as the runtime
    /// it wraps ([`crate::ports::forward_capabilities`]), not with the
    /// trait's defaults (true, false).
    #[test]
    fn capabilities_are_the_wrapped_runtimes() {
        let target = FunctionTarget::Image("example.com/f:v1".into());
        for (serves, returns) in [(false, true), (true, false)] {
            let mut inner = crate::ports::MockFunctionRuntime::new();
            inner.expect_may_serve().return_const(serves);
            inner.expect_returns_input().return_const(returns);
            let rt = DeadlineRuntime::new(Arc::new(inner));
            assert_eq!(rt.may_serve(&target), serves);
            assert_eq!(rt.returns_input(&target), returns);
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn in_process_work_that_never_yields_is_given_up_at_the_limit() {
        let rt = DeadlineRuntime::new(Arc::new(Computes));
        let call = FunctionCall::new(
            FunctionTarget::Image("builtin".into()),
            ResourceList::new(vec![]),
            Some(Duration::from_millis(200)),
        );
        let started = std::time::Instant::now();
        let e = rt.run(call).await.unwrap_err();
        assert!(matches!(e, EvalError::Timeout { .. }), "{e:?}");
        assert!(
            started.elapsed() < Duration::from_secs(1),
            "{:?}",
            started.elapsed()
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_runtime_that_never_answers_times_out() {
        let rt = DeadlineRuntime::new(Arc::new(Hangs));
        let call = FunctionCall::new(
            FunctionTarget::Image("example.com/hang:v1".into()),
            ResourceList::new(vec![]),
            Some(Duration::from_secs(3)),
        );
        let e = rt.run(call).await.unwrap_err();
        assert!(
            matches!(
                &e,
                EvalError::Timeout { image, after }
                    if image == "example.com/hang:v1" && *after == Duration::from_secs(3)
            ),
            "{e:?}"
        );
    }
}
