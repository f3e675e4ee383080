//! Runtimes tried in order with NotFound fall-through (Porch's multi-runtime),
//! on the one fall-through [`Chain`].

use std::sync::Arc;

use async_trait::async_trait;

use super::{BuiltinRuntime, ExecCommandRuntime};
use crate::domain::chain::Chain;
use crate::domain::evaluation::{DEFAULT_MAX_MESSAGE_BYTES, EvalError};
use crate::ports::{FunctionCall, FunctionOutput, FunctionRuntime};

/// Render runtimes tried in order ([`Chain`]): the first runtime that does
/// not answer [`EvalError::NotFound`] decides; when all say NotFound the
/// answer is NotFound (`function "<image>" not found`), as in Porch.
pub type RuntimeChain = Chain<dyn FunctionRuntime>;

impl Chain<dyn FunctionRuntime> {
    /// What `kpt fn render --allow-exec` runs locally: the builtin
    /// functions in process, then `exec:` functions as child processes that
    /// inherit this process's environment and working directory (output
    /// capped at [`DEFAULT_MAX_MESSAGE_BYTES`] each for stdout and stderr).
    /// `exec:` steps still need [`RenderOptions::allow_exec`](crate::RenderOptions).
    pub fn local() -> Self {
        Self::new()
            .with("builtin", Arc::new(BuiltinRuntime::default()))
            .with(
                "exec",
                Arc::new(ExecCommandRuntime::inheriting(DEFAULT_MAX_MESSAGE_BYTES)),
            )
    }
}

#[async_trait]
impl FunctionRuntime for Chain<dyn FunctionRuntime> {
    /// Tries each runtime in order; returns the first answer that is not
    /// NotFound, else the last NotFound (or a plain NotFound for an empty chain).
    async fn run(&self, call: FunctionCall) -> Result<FunctionOutput, EvalError> {
        let what = call.target.to_string();
        let name = call.target.name().to_string();
        // The last member gets the call itself: a render's call holds every
        // item and its texts, so only runtimes that may fall through get a copy.
        let mut left = self.names().len();
        let mut call = Some(call);
        let missing = &name;
        let answer = self
            .first_found(&what, |runtime| {
                left = left.saturating_sub(1);
                let call = if left == 0 { call.take() } else { call.clone() };
                async move {
                    match call {
                        Some(call) => runtime.run(call).await,
                        None => Err(EvalError::not_found(missing)),
                    }
                }
            })
            .await;
        answer.unwrap_or_else(|| Err(EvalError::not_found(&name)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::resource_list::ResourceList;
    use crate::ports::{FunctionTarget, MockFunctionRuntime};

    fn call() -> FunctionCall {
        FunctionCall {
            target: FunctionTarget::Image("img".into()),
            resource_list: ResourceList::new(vec![]),
            timeout: None,
            sources: None,
        }
    }

    fn ok() -> Result<FunctionOutput, EvalError> {
        Ok(FunctionOutput::new(ResourceList::new(vec![]), "second"))
    }

    #[tokio::test]
    async fn falls_through_only_on_not_found() {
        let mut a = MockFunctionRuntime::new();
        a.expect_run()
            .times(1)
            .returning(|c| Err(EvalError::not_found(c.target.name())));
        let mut b = MockFunctionRuntime::new();
        b.expect_run().times(1).returning(|_| ok());
        let mut c = MockFunctionRuntime::new();
        c.expect_run().never();
        let chain = RuntimeChain::new()
            .with("a", Arc::new(a))
            .with("b", Arc::new(b))
            .with("c", Arc::new(c));
        assert_eq!(chain.names(), ["a", "b", "c"]);
        assert_eq!(chain.run(call()).await.unwrap().stderr, "second");
    }

    #[tokio::test]
    async fn other_errors_stop_and_all_not_found_is_not_found() {
        let mut a = MockFunctionRuntime::new();
        a.expect_run()
            .returning(|_| Err(EvalError::Internal("broken".into())));
        let mut b = MockFunctionRuntime::new();
        b.expect_run().never();
        let chain = RuntimeChain::new()
            .with("a", Arc::new(a))
            .with("b", Arc::new(b));
        assert!(matches!(
            chain.run(call()).await.unwrap_err(),
            EvalError::Internal(m) if m == "broken"
        ));
        let empty = RuntimeChain::new().run(call()).await.unwrap_err();
        assert_eq!(empty.to_string(), "function \"img\" not found");
    }
}
