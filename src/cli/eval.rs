//! `krm-fn-runner eval`: one function on one ResourceList.

use std::io::{IsTerminal, Read, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Args;

use super::serve::{DEFAULT_MAX_MESSAGE_BYTES, parse_exec_env};
use crate::app::{EvalSetupError, RuntimeSettings, build_eval_evaluator};
use crate::domain::evaluation::{EvalError, EvaluationRequest};
use crate::domain::image::DEFAULT_IMAGE_PREFIX;
use crate::domain::resource_list::{ResourceList, format_results};
use crate::ports::FunctionEvaluator;

/// Flags of `eval`.
#[derive(Debug, Args)]
#[command(group(clap::ArgGroup::new("where").required(true).args(["config", "address"])))]
pub struct EvalArgs {
    /// The function image, e.g. ghcr.io/kptdev/krm-functions-catalog/set-namespace:v0.4.5.
    #[arg(long)]
    pub image: String,
    /// The step's tag, sent as Porch sends a Kptfile step's `tag` (field 3): a literal tag or a semver constraint (~0.4, >=0.5), winning over any tag in --image.
    #[arg(long)]
    pub tag: Option<String>,
    /// Run locally with this exec config.yaml (with --functions).
    #[arg(long, conflicts_with = "address")]
    pub config: Option<PathBuf>,
    /// Directory holding the binaries named in --config.
    #[arg(long, default_value = "./functions")]
    pub functions: PathBuf,
    /// Call this function runner instead (host:port or unix:/path).
    #[arg(long, value_name = "HOST:PORT")]
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
    #[arg(long = "exec-env", value_name = "NAME[=VALUE]", value_parser = super::serve::exec_env_entry)]
    pub exec_env: Vec<String>,
    /// Function admission policy (allow/deny rules on image references), checked before the function runs.
    #[arg(long, value_name = "FILE")]
    pub admission_policy: Option<PathBuf>,
    /// Verbosity 0–5 (1 = warnings only).
    #[arg(long, default_value_t = 1)]
    pub log_level: u8,
    #[command(flatten)]
    pub sandbox: super::sandbox::SandboxArgs,
}

/// Reads stdin, evaluates, prints the output ResourceList to stdout and the
/// function's log to stderr. Exit 0 on success; 1 with `Error: <message>`
/// on any failure (a failed function's stderr comes first, as its log, and
/// the message names its exit status and results); 2 for usage errors
/// (clap). Local input must be a ResourceList, as the server requires.
pub async fn run(args: EvalArgs) -> anyhow::Result<ExitCode> {
    super::init_logging(args.log_level);
    let local = args.address.is_none();
    let runtime = RuntimeSettings {
        config: args.config.clone(),
        functions: args.functions.clone(),
        disabled: vec!["pod".into()],
        max_message_bytes: args.max_request_body_size,
        default_image_prefix: args.default_image_prefix.clone(),
        exec_env: parse_exec_env(&args.exec_env)?,
        slots: Default::default(),
        sandbox: args.sandbox.grant(),
        render_read_rules: false,
        // Locally, the builtins that keep their input's text run in process.
        builtins: local,
    };
    let evaluator = match build_eval_evaluator(
        args.address.as_deref(),
        &runtime,
        args.admission_policy.as_deref(),
    ) {
        Ok(e) => e,
        Err(e @ (EvalSetupError::Remote(_) | EvalSetupError::Runtime(_))) => return Err(e.into()),
        Err(e @ EvalSetupError::Admission(_)) => {
            eprintln!("Error: {e}");
            return Ok(ExitCode::FAILURE);
        }
    };
    let input = read_input()?;
    if local && let Err(e) = ResourceList::validate(&input) {
        // The server's check and wording (INVALID_ARGUMENT there).
        let e = EvalError::InvalidInput(format!("resource_list: {e}"));
        eprintln!(
            "Error: {e}; eval reads one ResourceList (kind: ResourceList, items: [...]) on stdin"
        );
        return Ok(ExitCode::FAILURE);
    }
    let mut request = EvaluationRequest::new(args.image.clone(), input);
    request.timeout = args.timeout;
    if let Some(tag) = &args.tag {
        request = request.with_tag(tag.clone());
    }
    match evaluator.evaluate(request).await {
        Ok(response) => {
            std::io::stderr().write_all(&response.log)?;
            super::write_stdout(&response.resource_list)?;
            Ok(ExitCode::SUCCESS)
        }
        Err(EvalError::FunctionFailed(f)) => {
            // The function's own log, then our message, each on its own lines.
            let mut stderr = std::io::stderr().lock();
            stderr.write_all(&f.stderr)?;
            if !f.stderr.is_empty() && !f.stderr.ends_with(b"\n") {
                writeln!(stderr)?;
            }
            let log = if f.stderr.is_empty() {
                "it wrote nothing to stderr"
            } else {
                "its stderr is above"
            };
            writeln!(
                stderr,
                "Error: function {:?} failed: {} ({log})",
                f.image, f.exit
            )?;
            if let Some(hint) = &f.sandbox_hint {
                writeln!(stderr, "{hint}")?;
            }
            if !f.results.is_empty() {
                writeln!(
                    stderr,
                    "structured results:\n{}",
                    format_results(&f.results)
                )?;
            }
            Ok(ExitCode::FAILURE)
        }
        Err(e @ EvalError::NotFound { .. }) if local => {
            eprintln!(
                "Error: {e}: map it to a binary in the --config file (functions: [{{function, images}}]), \
                 or run it on a function runner with --address HOST:PORT"
            );
            Ok(ExitCode::FAILURE)
        }
        Err(e) => {
            eprintln!("Error: {e}");
            Ok(ExitCode::FAILURE)
        }
    }
}

/// stdin, read to the end. On a terminal, a hint says what is expected
/// first, so eval does not seem to hang.
fn read_input() -> anyhow::Result<Vec<u8>> {
    let stdin = std::io::stdin();
    if stdin.is_terminal() {
        eprintln!(
            "eval reads a ResourceList from stdin: paste it and end with Ctrl-D, \
             or redirect a file (krm-fn-runner eval ... < resourcelist.yaml)"
        );
    }
    let mut input = Vec::new();
    stdin.lock().read_to_end(&mut input)?;
    Ok(input)
}
