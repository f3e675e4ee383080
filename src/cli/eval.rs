//! `krm-fn-runner eval`: one function on one ResourceList.

use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::Args;

use super::serve::{DEFAULT_MAX_MESSAGE_BYTES, parse_exec_env};
use crate::adapters::grpc::RemoteEvaluator;
use crate::app::{RuntimeSettings, build_runtime};
use crate::domain::evaluation::{EvalError, EvaluationRequest};
use crate::domain::image::DEFAULT_IMAGE_PREFIX;
use crate::ports::FunctionEvaluator;

/// Flags of `eval`.
#[derive(Debug, Args)]
pub struct EvalArgs {
    /// The function image, e.g. ghcr.io/kptdev/krm-functions-catalog/set-namespace:v0.4.5.
    #[arg(long)]
    pub image: String,
    /// Run locally with this exec config.yaml (with --functions).
    #[arg(long, conflicts_with = "address")]
    pub config: Option<PathBuf>,
    /// Directory holding the binaries named in --config.
    #[arg(long, default_value = "./functions")]
    pub functions: PathBuf,
    /// Call this function runner instead (host:port or unix:/path).
    #[arg(long)]
    pub address: Option<String>,
    /// Give up after this long (e.g. 30s).
    #[arg(long, value_parser = humantime::parse_duration)]
    pub timeout: Option<Duration>,
    /// Largest request and response, in bytes.
    #[arg(long, default_value_t = DEFAULT_MAX_MESSAGE_BYTES)]
    pub max_request_body_size: usize,
    /// Prefix for function names without a registry.
    #[arg(long, default_value = DEFAULT_IMAGE_PREFIX)]
    pub default_image_prefix: String,
    /// Pass an environment variable to the function: NAME or NAME=VALUE. Repeatable.
    #[arg(long = "exec-env", value_name = "NAME[=VALUE]")]
    pub exec_env: Vec<String>,
    /// Verbosity 0–5 (1 = warnings only).
    #[arg(long, default_value_t = 1)]
    pub log_level: u8,
}

/// Reads stdin, evaluates, prints the output ResourceList to stdout and the
/// function's log to stderr; non-zero exit with the error on failure.
pub async fn run(args: EvalArgs) -> anyhow::Result<ExitCode> {
    super::init_logging(args.log_level);
    let evaluator: Arc<dyn FunctionEvaluator> = match (&args.address, &args.config) {
        (Some(addr), _) => Arc::new(RemoteEvaluator::new(addr, args.max_request_body_size)?),
        (None, Some(config)) => {
            let runtime = build_runtime(&RuntimeSettings {
                config: Some(config.clone()),
                functions: args.functions.clone(),
                disabled: vec!["pod".into()],
                max_message_bytes: args.max_request_body_size,
                default_image_prefix: args.default_image_prefix.clone(),
                exec_env: parse_exec_env(&args.exec_env)?,
            })?;
            for w in &runtime.warnings {
                tracing::warn!("{w}");
            }
            Arc::new(runtime.chain)
        }
        (None, None) => anyhow::bail!(
            "say where to run the function: --config FILE [--functions DIR] to run it here, \
             or --address HOST:PORT to call a function runner"
        ),
    };
    let mut input = Vec::new();
    std::io::stdin().read_to_end(&mut input)?;
    let request = EvaluationRequest {
        image: args.image.clone(),
        resource_list: input.into(),
        timeout: args.timeout,
    };
    match evaluator.evaluate(request).await {
        Ok(response) => {
            std::io::stderr().write_all(&response.log)?;
            std::io::stdout().write_all(&response.resource_list)?;
            Ok(ExitCode::SUCCESS)
        }
        Err(EvalError::FunctionFailed(f)) => {
            std::io::stderr().write_all(&f.stderr)?;
            let exit = f.exit;
            let f = EvalError::FunctionFailed(f);
            eprintln!("error: {f}");
            Ok(ExitCode::from(exit.exit_code().clamp(1, 255) as u8))
        }
        Err(e) => {
            eprintln!("error: {e}");
            Ok(ExitCode::FAILURE)
        }
    }
}
