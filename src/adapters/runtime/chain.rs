//! Runtimes tried in order with NotFound fall-through (Porch's multi-runtime).

use std::sync::Arc;

use async_trait::async_trait;

use super::{BuiltinRuntime, ExecCommandRuntime};
use crate::domain::evaluation::{DEFAULT_MAX_MESSAGE_BYTES, EvalError};
use crate::ports::{FunctionCall, FunctionOutput, FunctionRuntime};

/// An ordered list of named runtimes. The first runtime that does not answer
/// [`EvalError::NotFound`] decides; when all say NotFound the answer is
/// NotFound (`function "<image>" not found`), as in Porch.
#[derive(Clone, Default)]
pub struct RuntimeChain {
    runtimes: Vec<(String, Arc<dyn FunctionRuntime>)>,
}

impl RuntimeChain {
    /// An empty chain (every call answers NotFound).
    pub fn new() -> Self {
        Self::default()
    }

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

    /// Appends `runtime` under `name` (used in logs: `builtin`, `exec`, `remote`…).
    pub fn with(mut self, name: impl Into<String>, runtime: Arc<dyn FunctionRuntime>) -> Self {
        self.runtimes.push((name.into(), runtime));
        self
    }

    /// The runtime names in the order they are tried.
    pub fn names(&self) -> Vec<&str> {
        self.runtimes.iter().map(|(n, _)| n.as_str()).collect()
    }
}

#[async_trait]
impl FunctionRuntime for RuntimeChain {
    /// Tries each runtime in order; returns the first answer that is not
    /// NotFound, else the last NotFound (or a plain NotFound for an empty chain).
    async fn run(&self, call: FunctionCall) -> Result<FunctionOutput, EvalError> {
        let mut last = None;
        for (name, runtime) in &self.runtimes {
            match runtime.run(call.clone()).await {
                Err(e) if e.is_not_found() => {
                    tracing::debug!(runtime = %name, function = %call.target, "not found, trying the next runtime");
                    last = Some(e);
                }
                other => return other,
            }
        }
        Err(last.unwrap_or_else(|| EvalError::not_found(call.target.name())))
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
        assert_eq!(
            chain.run(call()).await.unwrap_err(),
            EvalError::Internal("broken".into())
        );
        let empty = RuntimeChain::new().run(call()).await.unwrap_err();
        assert_eq!(empty.to_string(), "function \"img\" not found");
    }
}
