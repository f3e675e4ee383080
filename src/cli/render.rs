//! `krm-fn-runner render`: `kpt fn render` on a local package directory.
//!
//! Flags, output modes, progress lines and exit codes follow kpt
//! (`krm-functions.md` §3.1, §3.3, §3.7). Functions run in process when a
//! builtin serves them (package context, `set-namespace`, `set-labels`),
//! else through an exec config mapping images to local binaries
//! (`--exec-config`), else through a function runner over gRPC
//! (`--function-runner`); `exec:` functions run as child processes with
//! `--allow-exec`. There is no container runtime: images that none of these
//! serve fail with a message saying so.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use clap::Args;

use super::serve::DEFAULT_MAX_MESSAGE_BYTES;
use crate::adapters::package::{PackageIoError, PackageRender};
use crate::app::{RenderRuntime, RenderRuntimeSettings, build_render_runtime};
use crate::domain::image::DEFAULT_IMAGE_PREFIX;
use crate::domain::render::results::RESULTS_FILE;
use crate::domain::render::{RenderErrorKind, RenderEvents, RenderOptions, StepRecord, StepStart};

/// Flags of `render`.
#[derive(Debug, Args)]
pub struct RenderArgs {
    /// The package directory (default: the current directory).
    pub pkg_path: Option<PathBuf>,
    /// Where the output goes: in place when omitted; `stdout` (a ResourceList),
    /// `unwrap` (multi-document YAML) or a new directory.
    #[arg(short = 'o', long)]
    pub output: Option<String>,
    /// Write the FunctionResultList to DIR/results.yaml.
    #[arg(long, value_name = "DIR")]
    pub results_dir: Option<PathBuf>,
    /// Allow `exec:` functions (local binaries).
    #[arg(long)]
    pub allow_exec: bool,
    #[command(flatten)]
    pub sandbox: super::sandbox::SandboxArgs,
    /// Prefix for short image names.
    #[arg(long, env = "KPT_IMAGE_PREFIX", default_value = DEFAULT_IMAGE_PREFIX)]
    pub image_prefix: String,
    /// Run `image:` functions that no builtin serves on this function runner
    /// (host:port or unix:/path), e.g. `krm-fn-runner serve` or Porch's.
    #[arg(long, value_name = "HOST:PORT")]
    pub function_runner: Option<String>,
    /// Run `image:` functions with local binaries: an exec-runtime config.yaml
    /// (Porch's format; with --functions).
    #[arg(long, value_name = "FILE")]
    pub exec_config: Option<PathBuf>,
    /// Directory holding the binaries named in --exec-config.
    #[arg(long, default_value = "./functions")]
    pub functions: PathBuf,
    /// Time limit of a pipeline step that has no `timeout:` of its own (kpt: 5m per function call).
    #[arg(long, visible_alias = "fn-timeout", value_parser = humantime::parse_duration, default_value = "5m")]
    pub step_timeout: Duration,
    /// Function admission policy (allow/deny rules on image references); every `image:` step, builtins included, is checked before it runs.
    #[arg(long, value_name = "FILE")]
    pub admission_policy: Option<PathBuf>,
    /// Largest ResourceList a function may read or write, in bytes.
    #[arg(long, default_value_t = DEFAULT_MAX_MESSAGE_BYTES)]
    pub max_message_size: usize,
    /// A registry (host:port) reached over plain HTTP when a step's `tag`
    /// constraint (`~0.4`) makes render list its tags; repeatable.
    #[arg(long = "plain-http-registry", value_name = "HOST:PORT")]
    pub plain_http_registries: Vec<String>,
}

/// Renders, prints kpt-style progress on stderr, writes the output; exit 0
/// on success, 1 on any failure (nothing written but the Kptfile status and
/// the results file, as kpt).
pub async fn run(args: RenderArgs) -> anyhow::Result<ExitCode> {
    super::init_logging(1);
    let dir = args.pkg_path.clone().unwrap_or_else(|| PathBuf::from("."));
    if !dir.is_dir() {
        let what = if dir.exists() {
            "is not a directory: render takes the directory of a kpt package (the one holding its Kptfile)"
        } else {
            "does not exist: give the directory of a kpt package (the one holding its Kptfile)"
        };
        return fail(&format!("package directory {} {what}", dir.display()));
    }
    let dir = std::fs::canonicalize(&dir).unwrap_or(dir);
    let out_dir = match args.output.as_deref() {
        None | Some("stdout") | Some("unwrap") => None,
        Some(d) => {
            let d = PathBuf::from(d);
            if d.exists() {
                return fail(&PackageIoError::OutputExists(d).to_string());
            }
            Some(d)
        }
    };
    let options = RenderOptions::builder()
        .image_prefix(&args.image_prefix)
        .allow_exec(args.allow_exec)
        .step_timeout(args.step_timeout)
        .package_root(dir.display().to_string())
        .attribution(attribution_enabled())
        .build();
    let root_name = dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| ".".into());
    let printer = Printer::new(root_name);
    let RenderRuntime { runtime, tags } = match build_render_runtime(&RenderRuntimeSettings {
        image_prefix: args.image_prefix.clone(),
        exec_config: args.exec_config.clone(),
        functions: args.functions.clone(),
        function_runner: args.function_runner.clone(),
        max_message_bytes: args.max_message_size,
        admission_policy: args.admission_policy.clone(),
        plain_http_registries: args.plain_http_registries.clone(),
        sandbox: args.sandbox.grant(),
    }) {
        Ok(r) => r,
        Err(e) => return fail(&e.to_string()),
    };
    let mut rendered = match PackageRender::new(&runtime)
        .options(options)
        .events(&printer)
        .tag_lister(tags)
        .render(&dir)
        .await
    {
        Ok(r) => r,
        Err(e) => return fail(&e.to_string()),
    };
    // Write first (all or nothing), then say what happened, as kpt does.
    let written = match args.output.as_deref() {
        None => rendered.write_in_place_moving_objects().map(|_| ()),
        Some(_) if rendered.resources().is_none() => Ok(()),
        Some("stdout") => match rendered.wrapped() {
            Ok(text) => write_to_stdout(&text.unwrap_or_default()),
            Err(e) => Err(PackageIoError::Parse {
                path: "-".into(),
                message: e.to_string(),
                source: Some(e),
            }),
        },
        Some("unwrap") => write_to_stdout(&rendered.unwrapped().unwrap_or_default()),
        Some(_) => {
            let out = out_dir.as_deref().unwrap_or(Path::new("."));
            rendered.write_to_dir(out).map(|_| ())
        }
    };
    let outcome = &rendered.outcome;
    let mut stderr = std::io::stderr().lock();
    let _ = writeln!(stderr);
    let total = outcome.steps.iter().filter(|s| s.ran || s.failed()).count();
    if written.is_ok() {
        if outcome.is_ok() {
            let _ = writeln!(
                stderr,
                "Successfully executed {} function(s) in {} package(s).",
                outcome.executed, outcome.packages
            );
        } else if outcome.executed > 0 {
            let _ = writeln!(
                stderr,
                "Partially executed {}/{} function(s) in {} package(s).",
                outcome.executed, total, outcome.packages
            );
        }
    }
    // kpt fails while loading a root package whose pipeline is invalid,
    // before any results file exists.
    let root_invalid = matches!(
        outcome.error.as_ref().map(|e| &e.kind),
        Some(RenderErrorKind::InvalidRootKptfile(_))
    );
    if let Some(results) = args.results_dir.as_ref().filter(|_| !root_invalid) {
        let path = results.join(RESULTS_FILE);
        let written = std::fs::create_dir_all(results).and_then(|_| {
            let text = outcome
                .result_list()
                .to_yaml()
                .map_err(|e| std::io::Error::other(e.to_string()))?;
            std::fs::write(&path, text)
        });
        match written {
            Ok(()) => {
                let _ = writeln!(stderr, "For complete results, see {}", path.display());
            }
            Err(e) => {
                let _ = writeln!(stderr, "Error: writing {}: {e}", path.display());
                return Ok(ExitCode::from(1));
            }
        }
    }
    drop(stderr);
    let code = match (written, &outcome.error) {
        (Err(e), _) => fail(&e.to_string()),
        (Ok(()), None) => Ok(ExitCode::SUCCESS),
        (Ok(()), Some(e)) if e.is_function_failure() => Ok(ExitCode::from(1)),
        (Ok(()), Some(e)) => fail(&e.to_string()),
    };
    // The process ends next: freeing every object and text of the render
    // one by one would only spend CPU time (about 4% of render's own at
    // 1,000 resources, by `perf` samples) on memory the exit gives back at
    // once.
    std::mem::forget(rendered);
    code
}

/// Prints `Error: <message>` and returns exit code 1.
/// `-o stdout` and `-o unwrap`: the rendered text to stdout, a write error
/// reported like a file's (`writing "-": …`).
fn write_to_stdout(text: &str) -> Result<(), PackageIoError> {
    super::write_stdout(text.as_bytes()).map_err(|source| PackageIoError::Io {
        action: "writing",
        path: "-".into(),
        source,
    })
}

fn fail(message: &str) -> anyhow::Result<ExitCode> {
    eprintln!("Error: {message}");
    Ok(ExitCode::from(1))
}

/// kpt's progress lines on stderr.
struct Printer {
    root: String,
    started: Mutex<Option<Instant>>,
}

impl Printer {
    fn new(root: String) -> Self {
        Self {
            root,
            started: Mutex::new(None),
        }
    }

    fn display(&self, path: &str) -> String {
        if path.is_empty() {
            self.root.clone()
        } else {
            format!("{}/{path}", self.root)
        }
    }
}

impl RenderEvents for Printer {
    fn package_started(&self, path: &str, _name: &str) {
        eprintln!("Package \"{}\": ", self.display(path));
    }

    fn step_started(&self, step: &StepStart<'_>) {
        if let Ok(mut s) = self.started.lock() {
            *s = Some(Instant::now());
        }
        let on = step
            .resource_count
            .map(|n| format!(" on {n} resource(s)"))
            .unwrap_or_default();
        eprintln!(
            "[RUNNING] \"{}\"{on} on package \"{}\"",
            step.target,
            self.display(step.package)
        );
    }

    fn step_finished(&self, record: &StepRecord) {
        let elapsed = self
            .started
            .lock()
            .ok()
            .and_then(|mut s| s.take())
            .map(|t| t.elapsed())
            .unwrap_or_default();
        let verdict = if record.failed() { "FAIL" } else { "PASS" };
        let mut text = format!(
            "[{verdict}] \"{}\" in {}\n",
            record.target,
            go_duration(elapsed)
        );
        if !record.results.is_empty() {
            text.push_str("  [Results]:\n");
            for r in &record.results {
                text.push_str(&format!("    {r}\n"));
            }
        }
        // kpt prints a function's stderr under the step, passed or failed.
        let stderr = record.stderr.trim_end();
        if !stderr.is_empty() {
            text.push_str("  Stderr:\n");
            for line in stderr.lines() {
                text.push_str(&format!("    {line}\n"));
            }
        }
        if record.failed() {
            if let Some(e) = &record.execution_error {
                text.push_str(&format!("  Error: {e}\n"));
            }
            text.push_str(&format!("  Exit code: {}\n", record.exit_code));
            if let Some(hint) = &record.sandbox_hint {
                text.push_str(&format!("  Sandbox: {hint}\n"));
            }
        }
        eprint!("{text}");
    }
}

/// A duration as kpt prints it: Go's `Duration.String()` of the value
/// truncated to 100 ms (`0s`, `300ms`, `1.2s`, `1m5.3s`).
fn go_duration(d: Duration) -> String {
    let tenths = d.as_millis() / 100;
    if tenths == 0 {
        return "0s".into();
    }
    if tenths < 10 {
        return format!("{}ms", tenths * 100);
    }
    let secs = tenths / 10;
    let frac = tenths % 10;
    let (m, s) = (secs / 60, secs % 60);
    let s = if frac == 0 {
        format!("{s}s")
    } else {
        format!("{s}.{frac}s")
    };
    if m == 0 { s } else { format!("{m}m{s}") }
}

/// kpt's opt-out of its Config Connector attribution:
/// `KPT_DISABLE_ATTRIBUTION` set to anything non-empty turns it off (kpt's
/// rule, `internal/util/attribution`).
fn attribution_enabled() -> bool {
    std::env::var_os(crate::domain::render::attribution::DISABLE_ATTRIBUTION_ENV)
        .is_none_or(|v| v.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::render::DEFAULT_STEP_TIMEOUT;

    #[test]
    fn durations_print_like_go() {
        assert_eq!(go_duration(Duration::from_millis(40)), "0s");
        assert_eq!(go_duration(Duration::from_millis(350)), "300ms");
        assert_eq!(go_duration(Duration::from_millis(1_250)), "1.2s");
        assert_eq!(go_duration(Duration::from_secs(65)), "1m5s");
        assert_eq!(DEFAULT_STEP_TIMEOUT, Duration::from_secs(300));
    }
}
