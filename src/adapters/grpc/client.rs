//! A client of a function runner (ours or Porch's) as a [`FunctionEvaluator`].

use async_trait::async_trait;
use tonic::transport::{Channel, Endpoint};

use super::pb::EvaluateFunctionRequest;
use super::pb::function_evaluator_client::FunctionEvaluatorClient;
use super::status::{StatusSource, from_status};
use crate::domain::evaluation::{EvalError, EvaluationRequest, EvaluationResponse};
use crate::ports::FunctionEvaluator;

/// Evaluates functions by calling `EvaluateFunction` on a remote runner over
/// one persistent HTTP/2 connection (multiplexed across concurrent calls).
#[derive(Debug, Clone)]
pub struct RemoteEvaluator {
    client: FunctionEvaluatorClient<Channel>,
    /// The address as given, for messages.
    address: String,
}

impl RemoteEvaluator {
    /// A client for `address` (`host:port`, `http://host:port` or
    /// `unix:/path`) with send and receive limits of `max_message_bytes`
    /// (match the server's `--max-request-body-size`). The connection is made
    /// on first use and re-made after failures.
    ///
    /// Errors: the address is not a valid endpoint URI.
    pub fn new(address: &str, max_message_bytes: usize) -> Result<Self, EvalError> {
        let uri = if address.contains("://") || address.starts_with("unix:") {
            address.to_string()
        } else {
            format!("http://{address}")
        };
        let endpoint = Endpoint::from_shared(uri)
            .map_err(|e| {
                EvalError::InvalidInput(format!("invalid function runner address {address:?}: {e}"))
            })?
            .tcp_nodelay(true);
        let channel = endpoint.connect_lazy();
        let client = FunctionEvaluatorClient::new(channel)
            .max_decoding_message_size(max_message_bytes + 64 * 1024)
            .max_encoding_message_size(max_message_bytes + 64 * 1024);
        Ok(Self {
            client,
            address: address.to_string(),
        })
    }
}

#[async_trait]
impl FunctionEvaluator for RemoteEvaluator {
    /// Sends the request unchanged (the step's tag as `Tag`, field 3);
    /// `request.timeout` becomes the call's
    /// `grpc-timeout`, and the remote status is mapped back to an [`EvalError`]
    /// (`UNAVAILABLE`, whether the runner said it or the connection failed,
    /// names the runner's address).
    async fn evaluate(&self, request: EvaluationRequest) -> Result<EvaluationResponse, EvalError> {
        let mut call = tonic::Request::new(EvaluateFunctionRequest {
            resource_list: request.resource_list,
            image: request.image.clone(),
            tag: request.tag.clone().unwrap_or_default(),
        });
        if let Some(t) = request.timeout {
            call.set_timeout(t);
        }
        let mut client = self.client.clone();
        match client.evaluate_function(call).await {
            Ok(r) => {
                let r = r.into_inner();
                Ok(EvaluationResponse {
                    resource_list: r.resource_list,
                    log: r.log,
                })
            }
            Err(status) if status.code() == tonic::Code::Unavailable => {
                Err(EvalError::Unavailable(format!(
                    "the function runner at {} is unavailable: {}; check that it runs and \
                     listens there",
                    self.address,
                    with_causes(&status)
                )))
            }
            Err(status) => Err(from_status(
                StatusSource::Runner,
                &request.image,
                &status,
                request.timeout,
            )),
        }
    }
}

/// A status message followed by the transport errors behind it
/// (`tcp connect error: Connection refused (os error 111)`), each once.
fn with_causes(status: &tonic::Status) -> String {
    let mut text = status.message().to_string();
    let mut cause = std::error::Error::source(status);
    while let Some(c) = cause {
        let c_text = c.to_string();
        if !text.contains(&c_text) {
            text.push_str(": ");
            text.push_str(&c_text);
        }
        cause = c.source();
    }
    text
}
