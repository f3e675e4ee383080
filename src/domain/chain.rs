//! The evaluator chain (Porch's "multi evaluator").
//!
//! Evaluators are tried in a fixed order; the first that does not answer
//! [`EvalError::NotFound`] decides. Porch builds its list from a map, so its
//! order is random per start (exec may never be consulted); here the order is
//! the one given, and the composition root gives exec before pod, as Porch's
//! docs intend.

use std::sync::Arc;

use async_trait::async_trait;

use super::evaluation::{EvalError, EvaluationRequest, EvaluationResponse};
use crate::ports::FunctionEvaluator;

/// An ordered list of named evaluators with NotFound fall-through.
#[derive(Clone, Default)]
pub struct EvaluatorChain {
    evaluators: Vec<(String, Arc<dyn FunctionEvaluator>)>,
}

impl EvaluatorChain {
    /// An empty chain; every call fails with [`EvalError::Unavailable`] until
    /// an evaluator is added.
    pub fn new() -> Self {
        Self::default()
    }

    /// Appends `evaluator` under `name` (used in logs and errors, e.g. `exec`, `pod`).
    pub fn with(mut self, name: impl Into<String>, evaluator: Arc<dyn FunctionEvaluator>) -> Self {
        self.evaluators.push((name.into(), evaluator));
        self
    }

    /// The names of the evaluators, in the order they are tried.
    pub fn names(&self) -> Vec<&str> {
        self.evaluators.iter().map(|(n, _)| n.as_str()).collect()
    }
}

#[async_trait]
impl FunctionEvaluator for EvaluatorChain {
    /// Tries each evaluator in order. Success or any error other than
    /// NotFound is returned at once; when all say NotFound, the last NotFound
    /// is returned (Porch: `function "<image>" not found`). With no evaluators
    /// the answer is [`EvalError::Unavailable`] naming the cause.
    async fn evaluate(&self, request: EvaluationRequest) -> Result<EvaluationResponse, EvalError> {
        let mut last_not_found = None;
        for (name, evaluator) in &self.evaluators {
            match evaluator.evaluate(request.clone()).await {
                Err(e) if e.is_not_found() => {
                    tracing::debug!(evaluator = %name, image = %request.image, "not found, trying the next evaluator");
                    last_not_found = Some(e);
                }
                other => return other,
            }
        }
        Err(last_not_found.unwrap_or_else(|| {
            EvalError::Unavailable(format!(
                "no runtime is enabled in krm-fn-runner, so function {:?} cannot be evaluated; \
                 remove `exec`/`pod` from --disable-runtimes",
                request.image
            ))
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ports::MockFunctionEvaluator;
    use bytes::Bytes;

    fn req() -> EvaluationRequest {
        EvaluationRequest::new("img", Bytes::from_static(b"kind: ResourceList"))
    }

    fn ok(body: &'static [u8]) -> Result<EvaluationResponse, EvalError> {
        Ok(EvaluationResponse {
            resource_list: Bytes::from_static(body),
            log: Bytes::new(),
        })
    }

    #[tokio::test]
    async fn falls_through_only_on_not_found() {
        let mut first = MockFunctionEvaluator::new();
        first
            .expect_evaluate()
            .times(1)
            .returning(|r| Err(EvalError::not_found(&r.image)));
        let mut second = MockFunctionEvaluator::new();
        second
            .expect_evaluate()
            .times(1)
            .returning(|_| ok(b"second"));
        let mut third = MockFunctionEvaluator::new();
        third.expect_evaluate().never();
        let chain = EvaluatorChain::new()
            .with("a", Arc::new(first))
            .with("b", Arc::new(second))
            .with("c", Arc::new(third));
        assert_eq!(chain.evaluate(req()).await.unwrap().resource_list, "second");
    }

    #[tokio::test]
    async fn other_errors_stop_the_chain() {
        let mut first = MockFunctionEvaluator::new();
        first
            .expect_evaluate()
            .returning(|_| Err(EvalError::Internal("disk on fire".into())));
        let mut second = MockFunctionEvaluator::new();
        second.expect_evaluate().never();
        let chain = EvaluatorChain::new()
            .with("a", Arc::new(first))
            .with("b", Arc::new(second));
        assert_eq!(
            chain.evaluate(req()).await.unwrap_err(),
            EvalError::Internal("disk on fire".into())
        );
    }

    #[tokio::test]
    async fn all_not_found_is_not_found() {
        let mut only = MockFunctionEvaluator::new();
        only.expect_evaluate()
            .returning(|r| Err(EvalError::not_found(&r.image)));
        let chain = EvaluatorChain::new().with("exec", Arc::new(only));
        assert_eq!(
            chain.evaluate(req()).await.unwrap_err().to_string(),
            "function \"img\" not found"
        );
    }

    #[tokio::test]
    async fn empty_chain_is_a_clear_error() {
        let err = EvaluatorChain::new().evaluate(req()).await.unwrap_err();
        assert!(matches!(err, EvalError::Unavailable(_)));
        assert!(err.to_string().contains("--disable-runtimes"));
    }
}
