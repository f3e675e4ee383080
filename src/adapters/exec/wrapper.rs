//! The wrapper server's evaluator: runs one fixed entrypoint (the function
//! image's own command) for every call, inside a function pod.
//!
//! Outcome rules are Porch's wrapper server's (spec: wrapper server,
//! EvaluateFunction), except where Porch has a defect:
//! - non-zero exit: stdout is read as a ResourceList for its structured
//!   results; unparseable → `INTERNAL` "failed to parse the output of
//!   function …"; parseable → a function failure carrying stderr and results;
//! - the entrypoint cannot be started → `INTERNAL` "Failed to execute function …";
//! - exit 0: stdout must parse as a ResourceList (else the parse error);
//!   error-severity results on exit 0 are logged and the output is returned.
//!
//! An empty entrypoint is refused when the evaluator is built (Porch crashes
//! on the first call instead).

use std::ffi::OsString;
use std::path::PathBuf;

use async_trait::async_trait;
use tracing::Instrument;

use super::evaluator::{CallOptions, ExecSettings};
use crate::adapters::parse_pool::parse_off_workers;
use crate::adapters::telemetry::spans;
use crate::domain::evaluation::{
    EvalError, EvaluationRequest, EvaluationResponse, ExitReason, FunctionFailure, log_excerpt,
};
use crate::domain::resource_list::{ResourceList, ResourceListError};
use crate::ports::FunctionEvaluator;

/// Why a wrapper evaluator cannot be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "no function entrypoint given: pass the function's command after `--`, \
     e.g. `wrapper-server --port 9446 -- /usr/local/bin/function`"
)]
pub struct EmptyEntrypoint;

/// Runs `entrypoint` for every request, whatever image it names.
#[derive(Debug, Clone)]
pub struct WrapperEvaluator {
    program: PathBuf,
    args: Vec<OsString>,
    settings: ExecSettings,
}

impl WrapperEvaluator {
    /// An evaluator for the argv `entrypoint` (program first).
    ///
    /// Errors: [`EmptyEntrypoint`] when `entrypoint` is empty.
    pub fn new(entrypoint: Vec<OsString>, settings: ExecSettings) -> Result<Self, EmptyEntrypoint> {
        let mut argv = entrypoint.into_iter();
        let program = argv
            .next()
            .filter(|p| !p.is_empty())
            .ok_or(EmptyEntrypoint)?;
        Ok(Self {
            program: PathBuf::from(program),
            args: argv.collect(),
            settings,
        })
    }
}

fn parse_failure(image: &str, stderr: &[u8], source: ResourceListError) -> EvalError {
    EvalError::BadOutput {
        context: format!(
            "failed to parse the output of function {image:?} with stderr '{}'",
            String::from_utf8_lossy(stderr).trim_end()
        ),
        source,
    }
}

#[async_trait]
impl FunctionEvaluator for WrapperEvaluator {
    async fn evaluate(&self, request: EvaluationRequest) -> Result<EvaluationResponse, EvalError> {
        let image = request.image.as_str();
        spans::claim("wrapper");
        // In the wrapper's working directory (the image's `WORKDIR`), as
        // Porch's wrapper runs the function: a relative entrypoint names a
        // file there. Its scratch directory is its `HOME` and `TMPDIR`.
        let options = CallOptions {
            keep_work_dir: true,
            ..CallOptions::default()
        };
        let out = self
            .settings
            .run(&self.program, &self.args, &request, options)
            .instrument(spans::function_run("wrapper", image))
            .await?;
        let stdout = out.stdout.clone();
        let parsed = parse_off_workers(move || ResourceList::parse(&stdout)).await?;
        if out.exit != ExitReason::Code(0) {
            let output = match parsed {
                Err(e) => return Err(parse_failure(image, &out.stderr, e)),
                Ok(output) => output,
            };
            let mut failure = FunctionFailure::new(image, out.exit, Default::default(), out.stderr)
                .with_sandbox_hint(self.settings.sandbox.refusal_hint(&Default::default()));
            failure.output = out.stdout;
            failure.results = output.results;
            return Err(EvalError::FunctionFailed(Box::new(failure)));
        }
        let output = parsed.map_err(|e| parse_failure(image, &out.stderr, e))?;
        if output.has_error_results() {
            tracing::warn!(
                image = %log_excerpt(image),
                results = %log_excerpt(&crate::domain::resource_list::format_results(&output.results)),
                stderr = %log_excerpt(&String::from_utf8_lossy(&out.stderr)),
                "function exited 0 but reported error results"
            );
        }
        Ok(EvaluationResponse {
            resource_list: out.stdout,
            log: out.stderr,
        })
    }
}
