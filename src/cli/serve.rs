//! `krm-fn-runner serve`.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use clap::{ArgAction, Args};

use crate::adapters::grpc::ServeOptions;
use crate::app::{RuntimeSettings, build_runtime};
use crate::domain::image::DEFAULT_IMAGE_PREFIX;

/// Porch's default `--max-request-body-size`: 6 MiB.
pub const DEFAULT_MAX_MESSAGE_BYTES: usize = 6 * 1024 * 1024;

/// Flags of `serve` (Porch's names and defaults).
#[derive(Debug, Args)]
pub struct ServeArgs {
    /// TCP port to listen on (all interfaces).
    #[arg(long, default_value_t = 9445)]
    pub port: u16,
    /// Listen here instead of --port: `host:port` or `unix:/path/to.sock`.
    #[arg(long, value_parser = clap::value_parser!(String))]
    pub listen: Option<String>,
    /// The exec runtime's config.yaml (`functions: [{function, images}]`) [default: ./config.yaml].
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Directory holding the function binaries named in --config.
    #[arg(long, default_value = "./functions")]
    pub functions: PathBuf,
    /// Comma-separated runtimes to disable: exec, pod.
    #[arg(long, default_value = "")]
    pub disable_runtimes: String,
    /// Largest request and response, in bytes (keep equal to Porch's --max-request-body-size).
    #[arg(long, default_value_t = DEFAULT_MAX_MESSAGE_BYTES)]
    pub max_request_body_size: usize,
    /// Verbosity 0–5 (klog style; 2 = info). RUST_LOG overrides it.
    #[arg(long, default_value_t = 2)]
    pub log_level: u8,
    /// Prefix for function names without a registry.
    #[arg(long, default_value = DEFAULT_IMAGE_PREFIX)]
    pub default_image_prefix: String,
    /// How long in-flight evaluations may finish after SIGTERM/SIGINT before they are stopped.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "25s")]
    pub shutdown_grace_period: Duration,
    /// Pass an environment variable to functions: NAME (the runner's value) or NAME=VALUE. Repeatable.
    #[arg(long = "exec-env", value_name = "NAME[=VALUE]")]
    pub exec_env: Vec<String>,
    #[command(flatten)]
    pub pod: PodArgs,
}

/// Pod-runtime and registry flags, accepted with Porch's names and defaults.
#[derive(Debug, Args)]
pub struct PodArgs {
    /// Namespace for function pods, services and the pull secret.
    #[arg(long, default_value = "porch-fn-system")]
    pub pod_namespace: String,
    /// Default idle time-to-live of a function pod.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "30m")]
    pub pod_ttl: Duration,
    /// Garbage-collection period of the pod cache.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "1m")]
    pub scan_interval: Duration,
    /// Pre-create pods listed in --pod-cache-config at start-up.
    #[arg(long, action = ArgAction::Set, num_args = 0..=1, default_value_t = true, default_missing_value = "true")]
    pub warm_up_pod_cache: bool,
    /// Per-function pod settings and warm-up list.
    #[arg(long, default_value = "/pod-cache-config/pod-cache-config.yaml")]
    pub pod_cache_config: PathBuf,
    /// ConfigMap holding `template` and `serviceTemplate` for function pods.
    #[arg(long, default_value = "")]
    pub function_pod_template: String,
    /// Load on a pod before another pod is started.
    #[arg(long, default_value_t = 2)]
    pub max_waitlist_length: i64,
    /// Most pods per function image.
    #[arg(long, default_value_t = 1)]
    pub max_parallel_pods_per_function: i64,
    /// Use the Docker config at --registry-auth-secret-path for private registries.
    #[arg(long, action = ArgAction::Set, num_args = 0..=1, default_value_t = false, default_missing_value = "true")]
    pub enable_private_registries: bool,
    /// Mounted Docker config JSON for private registries.
    #[arg(long, default_value = "/var/tmp/config-secret/.dockerconfigjson")]
    pub registry_auth_secret_path: PathBuf,
    /// Name of the pull secret created in --pod-namespace.
    #[arg(long, default_value = "auth-secret")]
    pub registry_auth_secret_name: String,
    /// Trust the CA in --tls-secret-path for private registries.
    #[arg(long, action = ArgAction::Set, num_args = 0..=1, default_value_t = false, default_missing_value = "true")]
    pub enable_private_registries_tls: bool,
    /// Directory holding ca.crt or ca.pem.
    #[arg(long, default_value = "/var/tmp/tls-secret/")]
    pub tls_secret_path: PathBuf,
    /// Kubeconfig file (default: in-cluster, then KUBECONFIG, then ~/.kube/config).
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,
}

/// Parses `--exec-env` entries: `NAME=VALUE`, or `NAME` for the runner's own value.
pub(crate) fn parse_exec_env(entries: &[String]) -> anyhow::Result<Vec<(String, String)>> {
    entries
        .iter()
        .map(|e| match e.split_once('=') {
            Some((k, v)) if !k.is_empty() => Ok((k.to_string(), v.to_string())),
            None if !e.is_empty() => Ok((e.clone(), std::env::var(e).unwrap_or_default())),
            _ => anyhow::bail!("--exec-env {e:?}: expected NAME or NAME=VALUE"),
        })
        .collect()
}

/// Resolves on the first SIGTERM or SIGINT.
pub(crate) async fn shutdown_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = match signal(SignalKind::terminate()) {
        Ok(s) => s,
        Err(e) => {
            tracing::error!("cannot listen for SIGTERM: {e}");
            return std::future::pending().await;
        }
    };
    tokio::select! {
        _ = term.recv() => tracing::info!("SIGTERM received"),
        _ = tokio::signal::ctrl_c() => tracing::info!("SIGINT received"),
    }
}

/// Runs the server until SIGTERM/SIGINT.
pub async fn run(args: ServeArgs) -> anyhow::Result<ExitCode> {
    super::init_logging(args.log_level);
    let settings = RuntimeSettings {
        config: args.config.clone(),
        functions: args.functions.clone(),
        disabled: args
            .disable_runtimes
            .split(',')
            .filter(|s| !s.is_empty())
            .map(str::to_string)
            .collect(),
        max_message_bytes: args.max_request_body_size,
        default_image_prefix: args.default_image_prefix.clone(),
        exec_env: parse_exec_env(&args.exec_env)?,
    };
    let runtime = build_runtime(&settings)?;
    for w in &runtime.warnings {
        tracing::warn!("{w}");
    }
    tracing::info!(runtimes = ?runtime.chain.names(), "starting");
    let server = super::bind("krm-fn-runner", args.listen.as_deref(), args.port).await?;
    let options = ServeOptions {
        max_message_bytes: args.max_request_body_size,
        shutdown_grace: args.shutdown_grace_period,
    };
    server
        .run(Arc::new(runtime.chain), options, shutdown_signal())
        .await
        .context("gRPC server failed")?;
    tracing::info!("stopped");
    Ok(ExitCode::SUCCESS)
}
