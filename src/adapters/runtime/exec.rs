//! `exec:` functions: a Kptfile command line run as a child process
//! (kpt `ExecFn`), on the exec evaluator's process runner.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use async_trait::async_trait;

use crate::adapters::exec::evaluator::CallOptions;
use crate::adapters::exec::{ExecSettings, Sandbox, SandboxGrant};
use crate::adapters::parse_pool::parse_off_workers;
use crate::domain::evaluation::{EvalError, EvaluationRequest, ExitReason};
use crate::ports::{FunctionCall, FunctionOutput, FunctionRuntime, FunctionTarget};

/// Runs `exec:` functions: the command line is split shell-style (no shell
/// is involved); the first word is the program — absolute, relative to the
/// working directory when it contains `/`, else looked up on `PATH` — and the
/// rest are its arguments. `image:` targets are NotFound.
#[derive(Debug, Clone)]
pub struct ExecCommandRuntime {
    settings: ExecSettings,
}

impl ExecCommandRuntime {
    /// Runs functions with `settings` (environment, working directory,
    /// output cap; see [`ExecSettings`]).
    pub fn new(settings: ExecSettings) -> Self {
        Self { settings }
    }

    /// As kpt does: functions inherit this process's environment (but for
    /// `TMPDIR`, which is the call's scratch directory while Landlock is
    /// on) and working directory, so that relative paths of a command line
    /// name what they name for kpt; in `render`'s sandbox
    /// ([`Sandbox::render`]: every file but the credential stores, nothing
    /// granted beyond; see [`ExecCommandRuntime::inheriting_with`]); stdout and
    /// stderr are each capped at `max_message_bytes`.
    pub fn inheriting(max_message_bytes: usize) -> Self {
        Self::inheriting_with(max_message_bytes, &SandboxGrant::default())
    }

    /// [`ExecCommandRuntime::inheriting`] with `render`'s sandbox granting
    /// every function `grant` (`--sandbox-allow`, `--sandbox-read`,
    /// `--sandbox-write`); the sandbox's rules are built once.
    pub fn inheriting_with(max_message_bytes: usize, grant: &SandboxGrant) -> Self {
        let mut settings = ExecSettings::new(max_message_bytes, &[]);
        settings.env = std::env::vars_os().collect();
        if let Ok(cwd) = std::env::current_dir() {
            settings.work_dir = cwd;
        }
        settings.sandbox = Sandbox::render(grant);
        Self::new(settings)
    }

    fn program(&self, word: &str) -> PathBuf {
        let p = Path::new(word);
        if word.contains('/') && p.is_relative() {
            self.settings.work_dir.join(p)
        } else {
            p.to_path_buf()
        }
    }

    /// The directories of the files that `args` name (relative ones
    /// beneath the working directory), as named and with links resolved:
    /// an interpreter's script (`python3 fn.py`) and what sits beside it
    /// are readable to the function, as a program's own directory is. The
    /// command line is the Kptfile's, in plain sight; the sandbox confines
    /// what the function's code reaches beyond it.
    fn named_file_dirs(&self, args: &[String]) -> Vec<PathBuf> {
        let mut dirs: Vec<PathBuf> = Vec::new();
        for arg in args {
            let path = self.settings.work_dir.join(arg);
            if !path.is_file() {
                continue;
            }
            let real = std::fs::canonicalize(&path).ok();
            for file in std::iter::once(path).chain(real) {
                if let Some(dir) = file.parent()
                    && !dirs.iter().any(|d| d == dir)
                {
                    dirs.push(dir.to_path_buf());
                }
            }
        }
        dirs
    }
}

#[async_trait]
impl FunctionRuntime for ExecCommandRuntime {
    /// Runs the command on the serialised ResourceList. Exit 0 → the parsed
    /// output; another exit → [`EvalError::FunctionFailed`] with the results
    /// read from stdout; a command line that does not split →
    /// [`EvalError::InvalidInput`]; a program that cannot start →
    /// [`EvalError::Internal`].
    async fn run(&self, call: FunctionCall) -> Result<FunctionOutput, EvalError> {
        let FunctionTarget::Exec(command) = &call.target else {
            return Err(EvalError::not_found(call.target.name()));
        };
        let words = shlex::split(command)
            .filter(|w| !w.is_empty())
            .ok_or_else(|| {
                EvalError::InvalidInput(format!("exec command {command:?} must be valid"))
            })?;
        let program = self.program(&words[0]);
        let args: Vec<OsString> = words[1..].iter().map(OsString::from).collect();
        let options = CallOptions {
            read: self.named_file_dirs(&words[1..]),
            keep_work_dir: true,
            ..CallOptions::default()
        };
        let (bytes, sent) = call.input_texts().map_err(|e| {
            EvalError::Internal(format!(
                "cannot serialise the ResourceList for {command:?}: {e}"
            ))
        })?;
        let mut request = EvaluationRequest::new(command.clone(), bytes.into_bytes());
        request.timeout = call.timeout;
        let out = self
            .settings
            .run(&program, &args, &request, options)
            .await?;
        if out.exit != ExitReason::Code(0) {
            let failure = out
                .into_failure(command.clone())
                .await?
                .with_sandbox_hint(self.settings.sandbox.refusal_hint(&Default::default()));
            return Err(EvalError::FunctionFailed(Box::new(failure)));
        }
        let command = command.clone();
        let stdout = out.stdout;
        let mut output = parse_off_workers(move || call.read_output(&stdout, sent.as_deref()))
            .await?
            .map_err(|source| EvalError::BadOutput {
                context: format!("function {command:?} did not write a ResourceList to stdout"),
                source,
            })?;
        output.stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        Ok(output)
    }

    /// Only `exec:` targets.
    fn may_serve(&self, target: &FunctionTarget) -> bool {
        target.is_exec()
    }

    /// `exec:` targets: their output is read with [`FunctionCall::read_output`].
    fn returns_input(&self, target: &FunctionTarget) -> bool {
        target.is_exec()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::resource_list::ResourceList;

    fn call(cmd: &str) -> FunctionCall {
        FunctionCall {
            target: FunctionTarget::Exec(cmd.into()),
            resource_list: ResourceList::new(vec![
                serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "foo"}}),
            ]),
            timeout: Some(std::time::Duration::from_secs(20)),
            sources: None,
        }
    }

    #[tokio::test]
    async fn runs_a_command_line_with_arguments() {
        let rt = ExecCommandRuntime::inheriting(1 << 20);
        let out = rt.run(call("sed -e 's/foo/bar/'")).await.unwrap();
        assert_eq!(out.resource_list.items[0]["metadata"]["name"], "bar");
    }

    #[tokio::test]
    async fn failures_keep_exit_code_and_stderr() {
        let rt = ExecCommandRuntime::inheriting(1 << 20);
        let err = rt
            .run(call("sh -c 'echo oops >&2; exit 3'"))
            .await
            .unwrap_err();
        let EvalError::FunctionFailed(f) = err else {
            panic!("{err:?}")
        };
        assert_eq!(f.exit, ExitReason::Code(3));
        assert_eq!(&f.stderr[..], b"oops\n");
        assert!(matches!(
            rt.run(call("'unterminated")).await.unwrap_err(),
            EvalError::InvalidInput(_)
        ));
        let image = FunctionCall {
            target: FunctionTarget::Image("x".into()),
            ..call("x")
        };
        assert!(rt.run(image).await.unwrap_err().is_not_found());
    }

    /// kpt runs `exec:` commands in its own working directory: a script
    /// named relative to it by an interpreter's command line is found and
    /// read with every sandbox layer on, while a file beside the working
    /// directory that the command line does not name stays out of reach.
    #[tokio::test]
    async fn a_script_the_command_line_names_is_read_in_the_sandbox() {
        let dir = tempfile::tempdir().unwrap();
        let scripts = dir.path().join("scripts");
        std::fs::create_dir(&scripts).unwrap();
        std::fs::write(
            scripts.join("fn.sh"),
            ". ./scripts/lib.sh\nsed -e \"s/foo/$NEW/\"\n",
        )
        .unwrap();
        std::fs::write(scripts.join("lib.sh"), "NEW=bar\n").unwrap();
        std::fs::write(dir.path().join("secret"), "s3cret\n").unwrap();
        let mut settings = ExecSettings::new(1 << 20, &[]);
        settings.work_dir = dir.path().to_path_buf();
        let rt = ExecCommandRuntime::new(settings);
        let out = rt.run(call("sh scripts/fn.sh")).await.unwrap();
        assert_eq!(out.resource_list.items[0]["metadata"]["name"], "bar");
        if crate::adapters::exec::sandbox::support()
            .landlock_abi
            .is_some()
        {
            let err = rt.run(call("sh -c 'cat secret'")).await.unwrap_err();
            let EvalError::FunctionFailed(f) = err else {
                panic!("{err:?}")
            };
            let stderr = String::from_utf8_lossy(&f.stderr);
            assert!(stderr.contains("Permission denied"), "{stderr}");
        }
    }
}
