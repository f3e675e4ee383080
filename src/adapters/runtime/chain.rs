//! Runtimes tried in order with NotFound fall-through (Porch's multi-runtime),
//! on the one fall-through [`Chain`].

use std::sync::Arc;

use async_trait::async_trait;

use super::{BuiltinRuntime, ExecCommandRuntime};
use crate::domain::chain::Chain;
use crate::domain::evaluation::{DEFAULT_MAX_MESSAGE_BYTES, EvalError};
use crate::ports::{FunctionCall, FunctionOutput, FunctionRuntime, FunctionTarget};

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
    /// Members that cannot serve the target ([`FunctionRuntime::may_serve`])
    /// are skipped as if they had answered NotFound, without being asked.
    async fn run(&self, call: FunctionCall) -> Result<FunctionOutput, EvalError> {
        let what = call.target.to_string();
        let name = call.target.name().to_string();
        // The last member that may serve the target gets the call itself: a
        // render's call holds every item and its texts, so only runtimes that
        // may fall through get a copy, and those that cannot serve it none.
        let mut left = self.members().filter(|m| m.may_serve(&call.target)).count();
        let mut call = Some(call);
        let missing = &name;
        let answer = self
            .first_found(&what, |runtime| {
                let serves = call.as_ref().is_some_and(|c| runtime.may_serve(&c.target));
                let call = if !serves {
                    None
                } else {
                    left = left.saturating_sub(1);
                    if left == 0 { call.take() } else { call.clone() }
                };
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

    /// True when a member may serve `target`.
    fn may_serve(&self, target: &FunctionTarget) -> bool {
        self.members().any(|m| m.may_serve(target))
    }

    /// True when every member that may serve `target` hands its input back
    /// (whichever answers, the items come back).
    fn returns_input(&self, target: &FunctionTarget) -> bool {
        let mut serving = self.members().filter(|m| m.may_serve(target)).peekable();
        serving.peek().is_some() && serving.all(|m| m.returns_input(target))
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
        a.expect_may_serve().return_const(true);
        a.expect_run()
            .times(1)
            .returning(|c| Err(EvalError::not_found(c.target.name())));
        let mut b = MockFunctionRuntime::new();
        b.expect_may_serve().return_const(true);
        b.expect_run().times(1).returning(|_| ok());
        let mut c = MockFunctionRuntime::new();
        c.expect_may_serve().return_const(true);
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
        a.expect_may_serve().return_const(true);
        a.expect_run()
            .returning(|_| Err(EvalError::Internal("broken".into())));
        let mut b = MockFunctionRuntime::new();
        b.expect_may_serve().return_const(true);
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

    #[tokio::test]
    async fn members_that_cannot_serve_the_target_are_not_asked() {
        let mut builtin = MockFunctionRuntime::new();
        builtin.expect_may_serve().return_const(false);
        builtin.expect_run().never();
        let mut exec = MockFunctionRuntime::new();
        exec.expect_may_serve().return_const(true);
        exec.expect_run().times(1).returning(|_| ok());
        let mut images = MockFunctionRuntime::new();
        images.expect_may_serve().return_const(false);
        images.expect_run().never();
        let chain = RuntimeChain::new()
            .with("builtin", Arc::new(builtin))
            .with("exec", Arc::new(exec))
            .with("images", Arc::new(images));
        assert!(chain.may_serve(&call().target));
        assert_eq!(chain.run(call()).await.unwrap().stderr, "second");

        let mut none = MockFunctionRuntime::new();
        none.expect_may_serve().return_const(false);
        none.expect_run().never();
        let chain = RuntimeChain::new().with("none", Arc::new(none));
        assert!(!chain.may_serve(&call().target));
        let e = chain.run(call()).await.unwrap_err();
        assert_eq!(e.to_string(), "function \"img\" not found");
    }

    #[test]
    fn local_runtimes_say_which_targets_they_serve() {
        let local = RuntimeChain::local();
        let [builtin, exec] = [0, 1].map(|i| local.members().nth(i).unwrap().clone());
        let image = |i: &str| FunctionTarget::Image(i.into());
        let exec_target = FunctionTarget::Exec("/bin/cat".into());
        assert!(builtin.may_serve(&image(
            "ghcr.io/kptdev/krm-functions-catalog/set-namespace:v0.4.5"
        )));
        assert!(!builtin.may_serve(&image("ghcr.io/example/unknown:v1")));
        assert!(!builtin.may_serve(&exec_target));
        assert!(exec.may_serve(&exec_target));
        assert!(!exec.may_serve(&image("ghcr.io/example/unknown:v1")));
    }
}
