//! `render`'s NotFound with a next step: what was tried for an image nothing
//! serves, and the flags that would make it run.

use std::path::PathBuf;

use async_trait::async_trait;

use super::{BuiltinRuntime, RuntimeChain};
use crate::domain::evaluation::EvalError;
use crate::ports::{FunctionCall, FunctionOutput, FunctionRuntime, FunctionTarget};

/// A runtime chain whose NotFound for an `image:` function says what to do
/// next. kpt would pull and run the image in a container; `render` has no
/// container runtime, so an image that no runtime of the chain serves fails
/// with [`EvalError::NotFound`] whose detail names what was tried (no
/// builtin, the `--exec-config` file, the `--function-runner`), the tags the
/// builtins serve when the image names a builtin's function with another
/// tag ([`BuiltinRuntime::tags_note`]), and the flags that would make the
/// image run (`--exec-config FILE --functions DIR`, `--function-runner
/// HOST:PORT`).
///
/// Every other answer — a success, another error, a NotFound that already
/// has a detail, and any answer for an `exec:` function — is the chain's,
/// unchanged.
pub struct NextStepOnNotFound {
    chain: RuntimeChain,
    builtins: BuiltinRuntime,
    exec_config: Option<PathBuf>,
    function_runner: Option<String>,
}

impl NextStepOnNotFound {
    /// Wraps `chain`. `builtins` answers which tags a builtin serves (the
    /// builtin runtime of the chain, with the same image prefix);
    /// `exec_config` and `function_runner` are `render`'s `--exec-config`
    /// and `--function-runner`, named in the message when given and
    /// suggested when not.
    pub fn new(
        chain: RuntimeChain,
        builtins: BuiltinRuntime,
        exec_config: Option<PathBuf>,
        function_runner: Option<String>,
    ) -> Self {
        Self {
            chain,
            builtins,
            exec_config,
            function_runner,
        }
    }

    /// The detail of the NotFound for `image`: what was tried, why nothing
    /// else is, a builtin's tags, and the next step.
    fn hint(&self, image: &str) -> String {
        let mut tried = vec!["no builtin".to_string()];
        if let Some(c) = &self.exec_config {
            tried.push(format!("no entry of --exec-config {}", c.display()));
        }
        if let Some(r) = &self.function_runner {
            tried.push(format!("not the function runner at {r}"));
        }
        let mut hint = format!(
            "{} serves it, and render has no container runtime",
            tried.join(", ")
        );
        if let Some(note) = self.builtins.tags_note(image) {
            hint.push_str(&format!(" ({note})"));
        }
        if self.exec_config.is_none() {
            hint.push_str(
                "; map the image to a local binary with --exec-config FILE --functions DIR",
            );
        } else {
            hint.push_str("; add the image to the --exec-config file");
        }
        if self.function_runner.is_none() {
            hint.push_str(", or run it on a function runner with --function-runner HOST:PORT");
        }
        hint
    }
}

#[async_trait]
impl FunctionRuntime for NextStepOnNotFound {
    /// The chain's answer; for an `image:` function, a NotFound without a
    /// detail gets the next step as its detail.
    async fn run(&self, call: FunctionCall) -> Result<FunctionOutput, EvalError> {
        let image = match &call.target {
            FunctionTarget::Image(i) => Some(i.clone()),
            FunctionTarget::Exec(_) => None,
        };
        match (self.chain.run(call).await, image) {
            (
                Err(EvalError::NotFound {
                    image,
                    detail: None,
                }),
                Some(_),
            ) => {
                let detail = Some(self.hint(&image));
                Err(EvalError::NotFound { image, detail })
            }
            (other, _) => other,
        }
    }

    crate::ports::forward_capabilities!(chain);
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::domain::image::DEFAULT_IMAGE_PREFIX;
    use crate::domain::resource_list::ResourceList;

    fn runtime(exec_config: Option<&str>, function_runner: Option<&str>) -> NextStepOnNotFound {
        let chain = RuntimeChain::new().with(
            "builtin",
            Arc::new(BuiltinRuntime::new(DEFAULT_IMAGE_PREFIX)),
        );
        NextStepOnNotFound::new(
            chain,
            BuiltinRuntime::new(DEFAULT_IMAGE_PREFIX),
            exec_config.map(PathBuf::from),
            function_runner.map(str::to_string),
        )
    }

    #[tokio::test]
    async fn an_image_nothing_serves_names_the_next_step() {
        let call = FunctionCall::new(
            FunctionTarget::Image("example.com/fn:v1".into()),
            ResourceList::new(Vec::new()),
            None,
        );
        let e = runtime(None, None).run(call).await.unwrap_err();
        assert_eq!(
            e.to_string(),
            "function \"example.com/fn:v1\" not found: no builtin serves it, and render has no \
             container runtime; map the image to a local binary with --exec-config FILE \
             --functions DIR, or run it on a function runner with --function-runner HOST:PORT"
        );
    }

    #[test]
    fn the_next_step_names_what_was_tried() {
        assert_eq!(
            runtime(Some("config.yaml"), Some("localhost:9445")).hint("example.com/fn:v1"),
            "no builtin, no entry of --exec-config config.yaml, not the function runner at \
             localhost:9445 serves it, and render has no container runtime; add the image to \
             the --exec-config file"
        );
    }
}
