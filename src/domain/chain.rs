//! The fall-through chain: Porch's "multi evaluator" and the render
//! pipeline's runtime chain.
//!
//! Evaluators are tried in a fixed order; the first that does not answer
//! [`EvalError::NotFound`] decides. Porch builds its list from a map, so its
//! order is random per start (exec may never be consulted); here the order is
//! the one given, and the composition root gives exec before pod, as Porch's
//! docs intend.

use std::future::Future;
use std::sync::Arc;

use async_trait::async_trait;

use super::evaluation::{EvalError, EvaluationRequest, EvaluationResponse};
use crate::ports::FunctionEvaluator;

/// An ordered list of named members — evaluators ([`EvaluatorChain`]) or
/// render runtimes (`RuntimeChain`) — with Porch's NotFound fall-through:
/// the first member that does not answer [`EvalError::NotFound`] decides.
pub struct Chain<T: ?Sized> {
    members: Vec<(String, Arc<T>)>,
}

/// Evaluators tried in order (Porch's multi evaluator).
pub type EvaluatorChain = Chain<dyn FunctionEvaluator>;

impl<T: ?Sized> Default for Chain<T> {
    fn default() -> Self {
        Self {
            members: Vec::new(),
        }
    }
}

impl<T: ?Sized> Clone for Chain<T> {
    fn clone(&self) -> Self {
        Self {
            members: self.members.clone(),
        }
    }
}

impl<T: ?Sized> Chain<T> {
    /// An empty chain (an evaluator chain answers every call with
    /// [`EvalError::Unavailable`], a runtime chain with NotFound).
    pub fn new() -> Self {
        Self::default()
    }

    /// Appends `member` under `name` (used in logs and errors, e.g. `exec`,
    /// `pod`, `builtin`).
    pub fn with(mut self, name: impl Into<String>, member: Arc<T>) -> Self {
        self.members.push((name.into(), member));
        self
    }

    /// The members, in the order they are tried.
    pub fn members(&self) -> impl Iterator<Item = &Arc<T>> {
        self.members.iter().map(|(_, m)| m)
    }

    /// The names of the members, in the order they are tried.
    pub fn names(&self) -> Vec<&str> {
        self.members.iter().map(|(n, _)| n.as_str()).collect()
    }

    /// Calls `call` on each member in order: returns the first answer that
    /// is not NotFound, else the last NotFound (the last one with a detail,
    /// when a later one has none); `None` for an empty chain.
    /// `what` names the function in the debug log of each fall-through.
    pub async fn first_found<R, Fut>(
        &self,
        what: &str,
        mut call: impl FnMut(Arc<T>) -> Fut,
    ) -> Option<Result<R, EvalError>>
    where
        Fut: Future<Output = Result<R, EvalError>>,
    {
        let mut last = None;
        for (name, member) in &self.members {
            match call(Arc::clone(member)).await {
                Err(e) if e.is_not_found() => {
                    tracing::debug!(member = %name, function = %what, "not found, trying the next");
                    // A NotFound that says why (a builtin that leaves the
                    // call to the function's binary) outlives later plain ones.
                    let said_why = |r: &Option<Result<R, EvalError>>| {
                        matches!(
                            r,
                            Some(Err(EvalError::NotFound {
                                detail: Some(_),
                                ..
                            }))
                        )
                    };
                    let plain = matches!(&e, EvalError::NotFound { detail: None, .. });
                    if !(plain && said_why(&last)) {
                        last = Some(Err(e));
                    }
                }
                other => return Some(other),
            }
        }
        last
    }
}

#[async_trait]
impl FunctionEvaluator for EvaluatorChain {
    /// Tries each evaluator in order. Success or any error other than
    /// NotFound is returned at once; when all say NotFound, the last NotFound
    /// is returned (Porch: `function "<image>" not found`). With no evaluators
    /// the answer is [`EvalError::Unavailable`] naming the cause.
    async fn evaluate(&self, request: EvaluationRequest) -> Result<EvaluationResponse, EvalError> {
        let answer = self
            .first_found(&request.image, |evaluator| {
                let request = request.clone();
                async move { evaluator.evaluate(request).await }
            })
            .await;
        answer.unwrap_or_else(|| {
            Err(EvalError::Unavailable(format!(
                "no runtime is enabled in krm-fn-runner, so function {:?} cannot be evaluated; \
                 remove `exec`/`pod` from --disable-runtimes",
                request.image
            )))
        })
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
        assert!(matches!(
            chain.evaluate(req()).await.unwrap_err(),
            EvalError::Internal(m) if m == "disk on fire"
        ));
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
    async fn a_not_found_that_says_why_outlives_later_plain_ones() {
        let mut first = MockFunctionEvaluator::new();
        first.expect_evaluate().returning(|r| {
            Err(EvalError::NotFound {
                image: r.image,
                detail: Some("left to the binary".into()),
            })
        });
        let mut second = MockFunctionEvaluator::new();
        second
            .expect_evaluate()
            .returning(|r| Err(EvalError::not_found(&r.image)));
        let chain = EvaluatorChain::new()
            .with("builtin", Arc::new(first))
            .with("exec", Arc::new(second));
        assert_eq!(
            chain.evaluate(req()).await.unwrap_err().to_string(),
            "function \"img\" not found: left to the binary"
        );
    }

    #[tokio::test]
    async fn empty_chain_is_a_clear_error() {
        let err = EvaluatorChain::new().evaluate(req()).await.unwrap_err();
        assert!(matches!(err, EvalError::Unavailable(_)));
        assert!(err.to_string().contains("--disable-runtimes"));
    }
}
