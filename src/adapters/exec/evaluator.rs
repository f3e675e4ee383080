//! The exec evaluator: functions as local binaries (Porch's "executable"
//! evaluator, configured by `config.yaml` and `--functions`).

use std::ffi::OsString;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use async_trait::async_trait;
use tracing::Instrument;

use super::process::{self, ProcessError, ProcessLimits, ProcessSpec};
use super::sandbox::{Sandbox, SandboxGrant};
use super::slots::FunctionSlots;
use crate::adapters::telemetry::spans;
use crate::domain::evaluation::{
    EvalError, EvaluationRequest, EvaluationResponse, ExitReason, log_excerpt,
};
use crate::domain::exec_config::{BinaryCatalog, ExecTable};
use crate::ports::FunctionEvaluator;

/// The `PATH` functions see. Functions get no other variable from the runner
/// unless it is named in [`ExecSettings::env`].
pub const FUNCTION_PATH: &str = "/usr/local/bin:/usr/bin:/bin";

/// How function processes are run.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ExecSettings {
    /// Cap on the function's stdout and, separately, its stderr, in bytes
    /// (the runner's `--max-request-body-size`).
    pub max_message_bytes: usize,
    /// The environment given to every function: `PATH` ([`FUNCTION_PATH`]),
    /// `HOME` and `TMPDIR` (the system temporary directory), plus whatever
    /// `--exec-env` adds.
    pub env: Vec<(OsString, OsString)>,
    /// Working directory of functions (the system temporary directory).
    pub work_dir: PathBuf,
    /// How many functions may run at once and wait for a slot
    /// (`--max-concurrent-functions`, `--max-queued-functions`); shared by
    /// every clone of these settings.
    pub slots: FunctionSlots,
    /// The sandbox every function starts in ([`Sandbox::exec`] unless set).
    pub sandbox: Sandbox,
}

/// What one call of [`ExecSettings::run`] adds to the settings' sandbox.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct CallOptions {
    /// What this function's own `sandbox:` grants besides the settings'
    /// (layers off, paths to read and write).
    pub(crate) grant: SandboxGrant,
    /// Directories the function may read and execute beneath besides the
    /// sandbox's own: those of the files its command line names (never
    /// one that would open a refused path up again).
    pub(crate) read: Vec<PathBuf>,
    /// Whether the function keeps [`ExecSettings::work_dir`] as its working
    /// directory with Landlock on (kpt's `exec:` steps, whose command lines
    /// name files relative to it), rather than its scratch directory.
    pub(crate) keep_work_dir: bool,
}

impl ExecSettings {
    /// Runs `program args…` on `request`'s ResourceList with these settings
    /// (environment, working directory, output cap, sandbox with what
    /// `options` adds) and the request's timeout; shared by the exec and
    /// wrapper evaluators and `render`'s `exec:` steps.
    ///
    /// With Landlock on, the function gets a scratch directory of its own
    /// (its `TMPDIR`, its `HOME` unless the sandbox keeps the caller's
    /// ([`Sandbox::keeps_home`]), and its working directory unless
    /// `options.keep_work_dir`; with the granted writes the one place it
    /// may write), removed once the call's processes are gone.
    ///
    /// The call first takes one of [`ExecSettings::slots`] and waits for
    /// their start limiter; its timeout covers both waits and the run. Once
    /// the function has run for the limiter's grace period it stops
    /// counting against the start limit.
    ///
    /// Errors: the evaluation error for a process that could not run to
    /// completion (see [`process_error`]); [`EvalError::Exhausted`] when the
    /// slot queue is full; a non-zero exit is not an error here.
    pub(crate) async fn run(
        &self,
        program: &Path,
        args: &[OsString],
        request: &EvaluationRequest,
        options: CallOptions,
    ) -> Result<process::ProcessOutput, EvalError> {
        let path = self
            .env
            .iter()
            .find(|(k, _)| k == "PATH")
            .map(|(_, v)| v.as_os_str());
        let sandbox = self
            .sandbox
            .call(program, path, &options.grant, &options.read)
            .map_err(|source| EvalError::Io {
                context: format!(
                    "Failed to execute function {:?}: cannot make its scratch directory",
                    request.image
                ),
                source: std::sync::Arc::new(source),
            })?;
        let mut spec = ProcessSpec {
            program: program.to_path_buf(),
            args: args.to_vec(),
            env: self.env.clone(),
            cwd: Some(self.work_dir.clone()),
            sandbox: sandbox.spec.clone(),
        };
        if let Some(scratch) = &sandbox.scratch {
            let dir = scratch.path().as_os_str().to_os_string();
            let home = !self.sandbox.keeps_home();
            spec.env
                .retain(|(k, _)| k != "TMPDIR" && !(home && k == "HOME"));
            if home {
                spec.env.push(("HOME".into(), dir.clone()));
            }
            spec.env.push(("TMPDIR".into(), dir));
            if !options.keep_work_dir {
                spec.cwd = Some(scratch.path().to_path_buf());
            }
        }
        let started = std::time::Instant::now();
        let slot = match request.timeout {
            Some(t) => tokio::time::timeout(t, self.slots.acquire())
                .await
                .map_err(|_| EvalError::Timeout {
                    image: request.image.clone(),
                    after: t,
                })??,
            None => self.slots.acquire().await?,
        };
        let limits = ProcessLimits {
            max_output_bytes: self.max_message_bytes,
            timeout: request.timeout.map(|t| t.saturating_sub(started.elapsed())),
        };
        let run = process::run(&spec, request.resource_list.clone(), limits);
        let result = match slot.grace() {
            Some(grace) => {
                tokio::pin!(run);
                tokio::select! {
                    biased;
                    done = &mut run => done,
                    () = tokio::time::sleep(grace) => {
                        slot.outgrown();
                        run.await
                    }
                }
            }
            None => run.await,
        };
        // The scratch directory goes once the call's processes are gone.
        drop(sandbox);
        result.map_err(|e| process_error(&request.image, e))
    }

    /// The documented defaults for a given message limit, with `extra_env`
    /// added (later entries override earlier ones).
    pub fn new(max_message_bytes: usize, extra_env: &[(String, String)]) -> Self {
        // Chosen (and logged) once, when the first settings are made.
        process::Confinement::current();
        super::sandbox::support();
        let tmp = std::env::temp_dir();
        let mut env: Vec<(OsString, OsString)> = vec![
            ("PATH".into(), FUNCTION_PATH.into()),
            ("HOME".into(), tmp.clone().into_os_string()),
            ("TMPDIR".into(), tmp.clone().into_os_string()),
        ];
        for (k, v) in extra_env {
            env.retain(|(name, _)| name.as_os_str() != k.as_str());
            env.push((k.into(), v.into()));
        }
        Self {
            max_message_bytes,
            env,
            work_dir: tmp,
            slots: FunctionSlots::default(),
            sandbox: Sandbox::exec(&SandboxGrant::default()),
        }
    }
}

/// Runs functions as local binaries looked up by image in a
/// [`BinaryCatalog`]: an [`ExecTable`] (`config.yaml`) or the live
/// FunctionConfig objects.
#[derive(Debug, Clone)]
pub struct ExecEvaluator {
    catalog: Arc<dyn BinaryCatalog>,
    settings: ExecSettings,
}

/// Why a configured binary cannot be run, or `None` when it can.
fn binary_problem(path: &Path) -> Option<String> {
    match std::fs::metadata(path) {
        Err(e) => Some(format!("binary {} cannot be used: {e}", path.display())),
        Ok(m) if !m.is_file() => Some(format!("binary {} is not a regular file", path.display())),
        Ok(m) if m.permissions().mode() & 0o111 == 0 => Some(format!(
            "binary {} is not executable (chmod +x it)",
            path.display()
        )),
        Ok(_) => None,
    }
}

impl ExecEvaluator {
    /// An evaluator serving the images of `table`.
    pub fn new(table: ExecTable, settings: ExecSettings) -> Self {
        Self::with_catalog(Arc::new(table), settings)
    }

    /// An evaluator serving what `catalog` answers at the time of each call
    /// (a live catalog follows configuration changes without a restart).
    pub fn with_catalog(catalog: Arc<dyn BinaryCatalog>, settings: ExecSettings) -> Self {
        Self { catalog, settings }
    }

    /// One message per configured binary that is missing or not executable;
    /// logged as warnings at start-up.
    pub fn check_binaries(&self) -> Vec<String> {
        self.catalog
            .binaries()
            .iter()
            .filter_map(|p| binary_problem(p))
            .collect()
    }

    /// Number of configured entries (image strings of `config.yaml`, or
    /// FunctionConfig objects).
    pub fn image_count(&self) -> usize {
        self.catalog.len()
    }
}

/// Maps a failure to run a function process (not the function's own exit)
/// to an evaluation error; shared by the exec and wrapper evaluators.
pub(crate) fn process_error(image: &str, err: ProcessError) -> EvalError {
    match err {
        ProcessError::TimedOut(after) => EvalError::Timeout {
            image: image.to_string(),
            after,
        },
        ProcessError::OutputTooLarge { payload, limit } => EvalError::TooLarge {
            payload,
            size: None,
            limit,
        },
        ProcessError::Spawn { program, source } => EvalError::Io {
            context: format!("Failed to execute function {image:?}: cannot start {program:?}"),
            source: Arc::new(source),
        },
        ProcessError::Io(source) => EvalError::Io {
            context: format!(
                "Failed to execute function {image:?}: I/O error talking to the function"
            ),
            source: Arc::new(source),
        },
        e => EvalError::Internal(format!("Failed to execute function {image:?}: {e}")),
    }
}

#[async_trait]
impl FunctionEvaluator for ExecEvaluator {
    /// Looks the image up — at the version the step's `tag` picks when the
    /// request carries one ([`BinaryCatalog::binary_for_tag`], Porch's rule)
    /// — unknown images and tags no configured version matches are
    /// [`EvalError::NotFound`] (naming the tag and the versions), and so are
    /// images whose binary is missing or not executable (with the path in
    /// the message), so a pod evaluator behind this one can still serve them.
    /// Exit 0 returns stdout and stderr verbatim; a non-zero exit is
    /// [`EvalError::FunctionFailed`] with the structured results read from
    /// stdout.
    async fn evaluate(&self, request: EvaluationRequest) -> Result<EvaluationResponse, EvalError> {
        let image = request.image.as_str();
        let binary =
            match request.tag.as_deref() {
                None => self
                    .catalog
                    .binary_for(image)
                    .ok_or_else(|| EvalError::not_found(image))?,
                Some(tag) => self.catalog.binary_for_tag(image, tag).map_err(|detail| {
                    EvalError::NotFound {
                        image: image.to_string(),
                        detail: Some(detail),
                    }
                })?,
            };
        let path = binary.path.as_path();
        if let Some(problem) = binary_problem(path) {
            return Err(EvalError::NotFound {
                image: image.to_string(),
                detail: Some(format!(
                    "{problem}; check --functions and {}",
                    self.catalog.origin()
                )),
            });
        }
        spans::claim("exec");
        let logged = log_excerpt(image);
        tracing::info!(image = %logged, binary = %path.display(), "Evaluating in executable mode");
        let out = self
            .settings
            .run(
                path,
                &[],
                &request,
                CallOptions {
                    grant: binary.sandbox.clone(),
                    ..CallOptions::default()
                },
            )
            .instrument(spans::function_run("exec", image))
            .await?;
        if out.exit != ExitReason::Code(0) {
            let failure = out
                .into_failure(image.to_string())
                .await?
                .with_sandbox_hint(self.settings.sandbox.refusal_hint(&binary.sandbox));
            tracing::info!(image = %logged, exit = %failure.exit, "function failed");
            return Err(EvalError::FunctionFailed(Box::new(failure)));
        }
        tracing::info!(
            image = %logged,
            stdout_bytes = out.stdout.len(),
            stderr = %log_excerpt(&String::from_utf8_lossy(&out.stderr)),
            "Evaluated"
        );
        Ok(EvaluationResponse {
            resource_list: out.stdout,
            log: out.stderr,
        })
    }
}

#[cfg(test)]
mod tests {
    use std::io;

    use super::*;

    #[test]
    fn start_and_pipe_failures_keep_the_os_error_as_source() {
        let spawn = process_error(
            "example.com/fn:v1",
            ProcessError::Spawn {
                program: PathBuf::from("/no/such/fn"),
                source: io::Error::from(io::ErrorKind::NotFound),
            },
        );
        assert!(
            spawn.to_string().starts_with(
                "Failed to execute function \"example.com/fn:v1\": cannot start \"/no/such/fn\": "
            ),
            "{spawn}"
        );
        let source = std::error::Error::source(&spawn).expect("the OS error is kept");
        let os = source
            .downcast_ref::<Arc<io::Error>>()
            .expect("an io::Error");
        assert_eq!(os.kind(), io::ErrorKind::NotFound);
        let pipe = process_error(
            "example.com/fn:v1",
            ProcessError::Io(io::Error::from(io::ErrorKind::BrokenPipe)),
        );
        assert!(
            matches!(&pipe, EvalError::Io { source, .. } if source.kind() == io::ErrorKind::BrokenPipe)
        );
        assert!(
            pipe.to_string().starts_with(
                "Failed to execute function \"example.com/fn:v1\": I/O error talking to the function: "
            ),
            "{pipe}"
        );
    }
}
