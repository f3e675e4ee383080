//! The end of a graceful shutdown: calls still running when the grace period
//! is over get an answer before the connections close.
//!
//! After SIGTERM the server stops accepting calls and lets the running ones
//! finish for `--shutdown-grace-period`. Calls still running then are
//! stopped (their function processes killed). Dropping them together with
//! their connections would leave clients with a bare transport failure
//! (`Unknown: transport error` in tonic, a reset stream elsewhere); instead
//! each is answered `UNAVAILABLE` with a message saying the runner shut down
//! and the call may be retried, and the server waits briefly for those
//! answers to be sent.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use tokio_util::sync::CancellationToken;

use crate::domain::evaluation::{EvalError, EvaluationRequest, EvaluationResponse};
use crate::ports::FunctionEvaluator;

/// How long the server waits, once the grace period is over, for the
/// answers of the calls it stopped to be sent.
pub const FINAL_ANSWER_WAIT: Duration = Duration::from_secs(2);

/// An evaluator whose calls end with [`EvalError::Unavailable`] (and their
/// work stopped) once `cut` is cancelled.
pub struct CutOnShutdown {
    inner: Arc<dyn FunctionEvaluator>,
    cut: CancellationToken,
    grace: Duration,
}

impl CutOnShutdown {
    /// Wraps `inner`; `grace` is the shutdown grace period, named in the answer.
    pub fn new(inner: Arc<dyn FunctionEvaluator>, cut: CancellationToken, grace: Duration) -> Self {
        Self { inner, cut, grace }
    }
}

/// The answer of a call stopped at the end of the grace period.
pub fn stopped_at_shutdown(image: &str, grace: Duration) -> EvalError {
    EvalError::Unavailable(format!(
        "the function runner shut down while function {image:?} was running: it was stopped \
         when the shutdown grace period ({}) ended; retry the call (another replica, or this \
         runner once it is back), or give calls more time with --shutdown-grace-period",
        humantime::format_duration(grace)
    ))
}

#[async_trait]
impl FunctionEvaluator for CutOnShutdown {
    /// Runs the inner evaluation until it ends or the cut comes; then the
    /// inner future is dropped, which stops its work (the port's contract).
    async fn evaluate(&self, request: EvaluationRequest) -> Result<EvaluationResponse, EvalError> {
        let image = request.image.clone();
        tokio::select! {
            biased;
            () = self.cut.cancelled() => Err(stopped_at_shutdown(&image, self.grace)),
            r = self.inner.evaluate(request) => r,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ports::MockFunctionEvaluator;

    #[tokio::test]
    async fn a_cut_call_is_unavailable_naming_the_grace_period() {
        let mut slow = MockFunctionEvaluator::new();
        slow.expect_evaluate().returning(|_| {
            std::thread::sleep(Duration::from_millis(1));
            Ok(EvaluationResponse::default())
        });
        let cut = CancellationToken::new();
        let e = CutOnShutdown::new(Arc::new(slow), cut.clone(), Duration::from_secs(25));
        assert!(e.evaluate(EvaluationRequest::new("img", "x")).await.is_ok());
        cut.cancel();
        let err = e
            .evaluate(EvaluationRequest::new("img", "x"))
            .await
            .unwrap_err();
        assert!(matches!(err, EvalError::Unavailable(_)));
        assert!(err.to_string().contains("25s"), "{err}");
        assert!(err.to_string().contains("retry"), "{err}");
    }
}
