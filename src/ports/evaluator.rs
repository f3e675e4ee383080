//! The `FunctionEvaluator` port.

use async_trait::async_trait;

use crate::domain::evaluation::{EvalError, EvaluationRequest, EvaluationResponse};

/// Something that runs KRM functions: the exec evaluator, the pod evaluator, a
/// remote function runner, or a chain of them.
///
/// Contract (mirrors Porch's `Evaluator` interface):
/// - `Ok` carries the function's output ResourceList and log;
/// - [`EvalError::NotFound`] means "not mine", and only that lets a chain try
///   the next evaluator;
/// - dropping the returned future cancels the evaluation, and the evaluator
///   must then stop any work it started (kill processes, release pods);
/// - a `request.timeout` is enforced by the evaluator and reported as
///   [`EvalError::Timeout`].
#[cfg_attr(test, mockall::automock)]
#[async_trait]
pub trait FunctionEvaluator: Send + Sync {
    /// Runs the function named by `request.image` on `request.resource_list`.
    async fn evaluate(&self, request: EvaluationRequest) -> Result<EvaluationResponse, EvalError>;
}
