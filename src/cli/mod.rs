//! The `krm-fn-runner` command line: `serve`, `eval`, `simulate`, `render`;
//! and the `wrapper-server` and `grpc-health-probe` commands.
//!
//! Flags keep Porch's names and defaults, and Go's flag syntax is accepted
//! too (`-port 9445`, `--warm-up-pod-cache=false`), so deployment manifests
//! written for Porch's function runner work unchanged. Porch's Deployment
//! runs `/home/nonroot/server --pod-namespace=… --functions=…` (flags only,
//! no subcommand): invoked under the file name `server`, as the container
//! image installs it, the binary is `krm-fn-runner serve`.

mod eval;
mod limits;
mod pod;
pub mod probe;
mod render;
mod sandbox;
mod serve;
mod simulate;
pub mod wrapper;

use std::process::ExitCode;

use clap::{CommandFactory, Parser, Subcommand};

/// The runner's command line.
#[derive(Debug, Parser)]
#[command(
    name = "krm-fn-runner",
    version,
    about = "Runs KRM functions for Porch and kpt render pipelines"
)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Serve Porch's FunctionEvaluator gRPC API (drop-in for Porch's function runner).
    Serve(Box<serve::ServeArgs>),
    /// Evaluate one function on a ResourceList read from stdin.
    Eval(Box<eval::EvalArgs>),
    /// Replay a request trace against pod-cache policies on virtual time, size the runner's replicas for it (--replica-model), or generate a trace.
    Simulate(Box<simulate::SimulateArgs>),
    /// Render a kpt package in place, like `kpt fn render`.
    Render(Box<render::RenderArgs>),
    /// Print the shell completion script for SHELL to stdout.
    Completions {
        /// The shell: bash, elvish, fish, powershell or zsh.
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Write the man pages (krm-fn-runner.1 and one per command) into DIR.
    Man {
        /// An existing directory.
        dir: std::path::PathBuf,
    },
}

/// Prints the completion script for `shell` (generated from the
/// command-line definition). A closed stdout (`| head`) ends it quietly.
fn print_completions(shell: clap_complete::Shell) -> ExitCode {
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut Cli::command(), "krm-fn-runner", &mut script);
    match write_stdout(&script) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("Error: cannot write the completion script: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Writes `bytes` to stdout and flushes it. A reader that closed the pipe
/// early (`| head`) is not an error: the rest is dropped quietly, as
/// command-line tools do, instead of the panic `print!` raises.
///
/// Errors: any other write error of stdout (a full disk, a closed terminal).
pub(crate) fn write_stdout(bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    let mut stdout = std::io::stdout().lock();
    match stdout.write_all(bytes).and_then(|()| stdout.flush()) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        other => other,
    }
}

/// Writes `krm-fn-runner.1` and `krm-fn-runner-COMMAND.1` for each command
/// into `dir`, generated from the command-line definition.
///
/// Errors: `dir` cannot be written.
fn write_man_pages(dir: &std::path::Path) -> ExitCode {
    match clap_mangen::generate_to(Cli::command(), dir) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("Error: cannot write man pages into {}: {e}", dir.display());
            ExitCode::FAILURE
        }
    }
}

/// Turns Go-style single-dash long flags (`-port=9445`) into clap's
/// `--port=9445`, for the long flags `cmd` (and its subcommands) define.
/// Arguments after a bare `--` are left alone.
fn normalize_go_flags(cmd: clap::Command, args: Vec<String>) -> Vec<String> {
    let mut longs: Vec<String> = cmd
        .get_arguments()
        .filter_map(|a| a.get_long().map(str::to_string))
        .collect();
    for sub in cmd.get_subcommands() {
        longs.extend(
            sub.get_arguments()
                .filter_map(|a| a.get_long().map(str::to_string)),
        );
    }
    let end = args.iter().position(|a| a == "--").unwrap_or(args.len());
    args.into_iter()
        .enumerate()
        .map(|(i, a)| {
            let single =
                i > 0 && i < end && a.starts_with('-') && !a.starts_with("--") && a.len() > 2;
            let name = a
                .trim_start_matches('-')
                .split('=')
                .next()
                .unwrap_or_default();
            if single && longs.iter().any(|l| l == name) {
                format!("-{a}")
            } else {
                a
            }
        })
        .collect()
}

/// clap's check of a `--listen` value (`host:port` or `unix:/path`), so a
/// bad one is a usage error (exit 2).
///
/// Errors: the value is neither form.
pub(crate) fn listen_address(value: &str) -> Result<String, String> {
    value
        .parse::<crate::adapters::grpc::Listen>()
        .map(|_| value.to_string())
}

/// Binds `listen` (`host:port` or `unix:/path`), or all interfaces on
/// `port`, and prints `<name> listening on <address>` to stderr whatever the
/// log level (scripts and tests wait for that line).
///
/// Errors: an unparseable `listen`, or the address cannot be bound; the
/// message names the address as given and what to do.
pub(crate) async fn bind(
    name: &str,
    listen: Option<&str>,
    port: u16,
) -> anyhow::Result<crate::adapters::grpc::Server> {
    use crate::adapters::grpc::Listen;
    let listen: Listen = match listen {
        Some(l) => l.parse().map_err(anyhow::Error::msg)?,
        None => Listen::Tcp(([0, 0, 0, 0], port).into()),
    };
    let server = crate::adapters::grpc::Server::bind(&listen)
        .await
        .map_err(|e| {
            let hint = match (&listen, e.kind()) {
                (Listen::Tcp(_), std::io::ErrorKind::AddrInUse) => {
                    "; another process is using the port: stop it, or choose another with --port or --listen"
                }
                (Listen::Tcp(_), std::io::ErrorKind::PermissionDenied) => {
                    "; ports below 1024 need privileges: choose another with --port or --listen"
                }
                _ => "",
            };
            anyhow::anyhow!("cannot listen on {listen}: {e}{hint}")
        })?;
    eprintln!("{name} listening on {}", server.local_addr());
    Ok(server)
}

/// Klog-style verbosity (Porch's `--log-level`, 0–5) as the log filter,
/// for commands that export no telemetry.
pub(crate) fn init_logging(level: u8) {
    crate::adapters::telemetry::init_logging(level);
}

/// Sets up logging and the telemetry the `OTEL_*` environment asks for,
/// with `service` as the default service name.
///
/// Errors: a telemetry variable with an unusable value, a `/metrics`
/// address that cannot be bound, an exporter that cannot be built.
pub(crate) async fn init_telemetry(
    service: &'static str,
    level: u8,
) -> anyhow::Result<crate::adapters::telemetry::Telemetry> {
    use crate::adapters::telemetry::{Telemetry, TelemetryConfig};
    let config = TelemetryConfig::from_env()?;
    Ok(Telemetry::install(&config, service, level).await?)
}

/// The file name under which the binary is `serve` without a subcommand:
/// Porch's runner binary, `/home/nonroot/server` in its image.
pub const SERVER_NAME: &str = "server";

/// `args` (the process arguments, program name first) with `serve`
/// inserted after the program name when the program's file name is
/// [`SERVER_NAME`] and `serve` is not already there.
fn with_implied_serve(mut args: Vec<String>) -> Vec<String> {
    let invoked_as_server = args
        .first()
        .and_then(|a| std::path::Path::new(a).file_name())
        .is_some_and(|n| n == SERVER_NAME);
    if invoked_as_server && args.get(1).map(String::as_str) != Some("serve") {
        args.insert(1, "serve".into());
    }
    args
}

/// Parses the process arguments and runs the chosen command.
pub fn main() -> ExitCode {
    let cli = Cli::parse_from(normalize_go_flags(
        Cli::command(),
        with_implied_serve(std::env::args().collect()),
    ));
    match cli.command {
        Command::Completions { shell } => return print_completions(shell),
        Command::Man { dir } => return write_man_pages(&dir),
        _ => {}
    }
    // A render's steps run one after another (see `run_async`).
    let one_thread = matches!(cli.command, Command::Render(_));
    run_async(one_thread, async {
        match cli.command {
            Command::Serve(args) => serve::run(*args).await,
            Command::Eval(args) => eval::run(*args).await,
            Command::Simulate(args) => simulate::run(*args).await,
            Command::Render(args) => render::run(*args).await,
            Command::Completions { .. } | Command::Man { .. } => Ok(ExitCode::SUCCESS),
        }
    })
}

/// Runs `main` on a tokio runtime and turns its result into an exit code:
/// the command's own code, or 1 with `Error: <message>` on stderr (see
/// [`error_message`]). Usage errors exit with 2 before this (clap's
/// convention). `one_thread`: a single-threaded runtime (`render`, whose
/// steps run one after another and whose parallel parts use rayon's pool and
/// tokio's blocking threads; one thread hands no task between worker
/// threads and keeps one allocator heap warm — about 8% fewer page faults
/// at 1,000 resources), else one worker thread per core (the servers).
fn run_async(
    one_thread: bool,
    main: impl std::future::Future<Output = anyhow::Result<ExitCode>>,
) -> ExitCode {
    let mut builder = if one_thread {
        tokio::runtime::Builder::new_current_thread()
    } else {
        tokio::runtime::Builder::new_multi_thread()
    };
    let runtime = match builder.enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("unexpected error: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(main);
    // Dropping the runtime drops every task still running, which stops
    // (kills) any function process left after a shutdown grace period.
    drop(runtime);
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("Error: {}", error_message(&e));
            ExitCode::FAILURE
        }
    }
}

/// An error and its causes on one line, each text once: a cause whose text
/// the message already holds (an error that prints its source, then the
/// source itself) is not repeated.
pub(crate) fn error_message(e: &anyhow::Error) -> String {
    let mut out = String::new();
    for cause in e.chain() {
        let text = cause.to_string();
        let text = text.trim_end();
        if text.is_empty() || out.contains(text) {
            continue;
        }
        if !out.is_empty() {
            out.push_str(": ");
        }
        out.push_str(text);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_style_flags_are_accepted() {
        let args = [
            "x",
            "serve",
            "-port=1",
            "-functions",
            "/f",
            "--config=c",
            "-v",
        ]
        .map(String::from)
        .to_vec();
        assert_eq!(
            normalize_go_flags(Cli::command(), args),
            [
                "x",
                "serve",
                "--port=1",
                "--functions",
                "/f",
                "--config=c",
                "-v"
            ]
        );
    }

    #[test]
    fn invoked_as_server_it_serves() {
        let argv = |s: &str| s.split_whitespace().map(String::from).collect::<Vec<_>>();
        assert_eq!(
            with_implied_serve(argv("/home/nonroot/server --functions=/f")),
            argv("/home/nonroot/server serve --functions=/f")
        );
        assert_eq!(
            with_implied_serve(argv("server serve --port=1")),
            argv("server serve --port=1")
        );
        assert_eq!(
            with_implied_serve(argv("/usr/bin/krm-fn-runner eval x")),
            argv("/usr/bin/krm-fn-runner eval x")
        );
    }

    #[test]
    fn porch_manifest_flags_parse() {
        let argv = normalize_go_flags(
            Cli::command(),
            "krm-fn-runner serve --pod-namespace=porch-fn-system --max-request-body-size=6291456 \
             --max-parallel-pods-per-function=2 --max-waitlist-length=1 --warm-up-pod-cache=true \
             --functions=/home/nonroot/functions --config=/home/nonroot/config.yaml"
                .split_whitespace()
                .map(String::from)
                .collect(),
        );
        let cli = Cli::try_parse_from(argv).unwrap();
        let Command::Serve(s) = cli.command else {
            panic!("not serve")
        };
        assert_eq!(s.port, 9445);
        assert_eq!(s.max_request_body_size, 6291456);
        assert!(s.pod.warm_up);
    }
}
