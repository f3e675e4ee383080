//! `wrapper-server`: the server that runs inside every function pod.
//!
//! Porch's name and command line, so existing pod templates work:
//! `wrapper-server [template args…] --port 9446 --max-request-body-size N -- <entrypoint…>`.
//! Everything after `--` is the function's entrypoint; positional arguments
//! before it are ignored.

use std::ffi::OsString;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use clap::{CommandFactory, Parser};

use super::serve::{DEFAULT_MAX_MESSAGE_BYTES, shutdown_signal};
use crate::adapters::grpc::ServeOptions;
use crate::app::build_wrapper_evaluator;

/// The wrapper server's command line.
#[derive(Debug, Parser)]
#[command(
    name = "wrapper-server",
    version,
    about = "Serves one KRM function over gRPC inside a function pod"
)]
pub struct WrapperArgs {
    /// TCP port to listen on (all interfaces).
    #[arg(long, default_value_t = 9446)]
    pub port: u16,
    /// Listen here instead of --port: `host:port` or `unix:/path/to.sock`.
    #[arg(long, value_parser = super::listen_address)]
    pub listen: Option<String>,
    /// Largest request and response, in bytes (the runner passes its own limit).
    #[arg(long, default_value_t = DEFAULT_MAX_MESSAGE_BYTES)]
    pub max_request_body_size: usize,
    /// Verbosity 0–5 (klog style; 2 = info; Porch's name; `serve` calls it --log-level). RUST_LOG overrides it.
    #[arg(long, visible_alias = "log-level", default_value_t = 2)]
    pub verbosity: u8,
    /// How long in-flight evaluations may finish after SIGTERM/SIGINT.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "25s")]
    pub shutdown_grace_period: Duration,
    /// Pass an environment variable to the function: NAME or NAME=VALUE. Repeatable.
    #[arg(long = "exec-env", value_name = "NAME[=VALUE]", value_parser = super::serve::exec_env_entry)]
    pub exec_env: Vec<String>,
    /// Bounds on function processes, requests and connections.
    #[command(flatten)]
    pub limits: super::limits::LimitArgs,
    #[command(flatten)]
    pub sandbox: super::sandbox::SandboxArgs,
    /// Arguments a pod template puts before the flags; ignored.
    #[arg(hide = true)]
    pub ignored: Vec<String>,
    /// The function's entrypoint (after `--`).
    #[arg(last = true)]
    pub entrypoint: Vec<OsString>,
}

/// Runs the wrapper server until SIGTERM/SIGINT.
pub async fn run(args: WrapperArgs) -> anyhow::Result<ExitCode> {
    let telemetry = super::init_telemetry("wrapper-server", args.verbosity).await?;
    let evaluator = build_wrapper_evaluator(
        args.entrypoint.clone(),
        args.max_request_body_size,
        &super::serve::parse_exec_env(&args.exec_env)?,
        args.limits.slots(),
        &args.sandbox.grant(),
    )?;
    crate::adapters::exec::process::start_resident();
    let server = super::bind("wrapper-server", args.listen.as_deref(), args.port).await?;
    let options = ServeOptions {
        max_message_bytes: args.max_request_body_size,
        shutdown_grace: args.shutdown_grace_period,
        limits: args.limits.server_limits(args.max_request_body_size),
        // Each function pod has a Service of its own: nothing to rebalance.
        connection_age: None,
    };
    server
        .run(Arc::new(evaluator), options, shutdown_signal())
        .await
        .context("gRPC server failed")?;
    telemetry.shutdown().await;
    Ok(ExitCode::SUCCESS)
}

/// Entry point of the `wrapper-server` binary.
pub fn main() -> ExitCode {
    let args = WrapperArgs::parse_from(super::normalize_go_flags(
        WrapperArgs::command(),
        std::env::args().collect(),
    ));
    super::run_async(false, run(args))
}
