//! `image:` functions through a [`FunctionEvaluator`]: the exec evaluator
//! (local binaries by image), a remote function runner, or a chain of them.

use std::sync::Arc;

use async_trait::async_trait;

use crate::adapters::exec::ExecEvaluator;
use crate::domain::evaluation::{EvalError, EvaluationRequest};
use crate::ports::{
    FunctionCall, FunctionEvaluator, FunctionOutput, FunctionRuntime, FunctionTarget,
};

/// Serves `image:` functions by serialising the ResourceList to YAML,
/// calling a [`FunctionEvaluator`] and parsing its output; `exec:` targets
/// are NotFound (a chain passes them on).
#[derive(Clone)]
pub struct EvaluatorRuntime {
    evaluator: Arc<dyn FunctionEvaluator>,
}

impl EvaluatorRuntime {
    /// Wraps any evaluator.
    pub fn new(evaluator: Arc<dyn FunctionEvaluator>) -> Self {
        Self { evaluator }
    }

    /// The exec evaluator: images mapped to local binaries (Porch's
    /// `config.yaml` table; unknown images are NotFound).
    pub fn exec(evaluator: ExecEvaluator) -> Self {
        Self::new(Arc::new(evaluator))
    }

    /// A function runner (ours or Porch's) at `address` (`host:port`,
    /// `http://…`, `unix:/path`) over one persistent gRPC connection, with
    /// message limits of `max_message_bytes` (match the server's
    /// `--max-request-body-size`); each call's timeout becomes the gRPC deadline.
    ///
    /// Errors: the address is not a valid endpoint.
    #[cfg(feature = "full")]
    pub fn remote(address: &str, max_message_bytes: usize) -> Result<Self, EvalError> {
        Ok(Self::new(Arc::new(
            crate::adapters::grpc::RemoteEvaluator::new(address, max_message_bytes)?,
        )))
    }
}

#[async_trait]
impl FunctionRuntime for EvaluatorRuntime {
    /// Runs `call.target` (an image) through the evaluator. Errors are the
    /// evaluator's; output that is not a ResourceList is [`EvalError::Internal`].
    async fn run(&self, call: FunctionCall) -> Result<FunctionOutput, EvalError> {
        let FunctionTarget::Image(image) = &call.target else {
            return Err(EvalError::not_found(call.target.name()));
        };
        let (bytes, sent) = call.input_texts().map_err(|e| {
            EvalError::Internal(format!(
                "cannot serialise the ResourceList for function {image:?}: {e}"
            ))
        })?;
        let mut request = EvaluationRequest::new(image.clone(), bytes.into_bytes());
        request.timeout = call.timeout;
        let response = self.evaluator.evaluate(request).await?;
        let image = image.clone();
        let written = response.resource_list.clone();
        let mut output = crate::adapters::parse_pool::parse_off_workers(move || {
            call.read_output(&written, sent.as_deref())
        })
        .await?
        .map_err(|source| EvalError::BadOutput {
            context: format!("function {image:?} did not return a ResourceList"),
            source,
        })?;
        output.stderr = String::from_utf8_lossy(&response.log).into_owned();
        Ok(output)
    }

    /// Only images (an evaluator runs images, never `exec:` commands).
    fn may_serve(&self, target: &FunctionTarget) -> bool {
        !target.is_exec()
    }

    /// Images: their output is read with [`FunctionCall::read_output`].
    fn returns_input(&self, target: &FunctionTarget) -> bool {
        !target.is_exec()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::evaluation::EvaluationResponse;
    use crate::domain::resource_list::ResourceList;
    use crate::ports::MockFunctionEvaluator;
    use bytes::Bytes;

    #[tokio::test]
    async fn serialises_calls_and_parses_output() {
        let mut ev = MockFunctionEvaluator::new();
        ev.expect_evaluate().returning(|r| {
            assert_eq!(r.image, "ghcr.io/x/fn:v1");
            assert_eq!(r.timeout, Some(std::time::Duration::from_secs(7)));
            let rl = ResourceList::parse(&r.resource_list).unwrap();
            assert_eq!(rl.items.len(), 1);
            Ok(EvaluationResponse {
                resource_list: Bytes::from_static(
                    b"kind: ResourceList\nitems: []\nresults:\n- message: done\n",
                ),
                log: Bytes::from_static(b"note\n"),
            })
        });
        let rt = EvaluatorRuntime::new(Arc::new(ev));
        let out = rt
            .run(FunctionCall {
                target: FunctionTarget::Image("ghcr.io/x/fn:v1".into()),
                resource_list: ResourceList::new(vec![serde_json::json!({"kind": "A"})]),
                timeout: Some(std::time::Duration::from_secs(7)),
                sources: None,
            })
            .await
            .unwrap();
        assert_eq!(out.resource_list.results[0].message, "done");
        assert_eq!(out.stderr, "note\n");
        let exec = rt
            .run(FunctionCall {
                target: FunctionTarget::Exec("./fn".into()),
                resource_list: ResourceList::new(vec![]),
                timeout: None,
                sources: None,
            })
            .await
            .unwrap_err();
        assert!(exec.is_not_found());
    }
}
