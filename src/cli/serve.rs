//! `krm-fn-runner serve`.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use clap::Args;

use super::pod::PodArgs;
use crate::adapters::admission::Admission;
use crate::adapters::grpc::ServeOptions;
use crate::app::{RuntimeSettings, StartupError, admitted, start_runtimes};
use crate::domain::connection_age::{self, ConnectionAge};
use crate::domain::image::DEFAULT_IMAGE_PREFIX;

pub use crate::domain::evaluation::DEFAULT_MAX_MESSAGE_BYTES;

/// Flags of `serve` (Porch's names and defaults).
#[derive(Debug, Args)]
pub struct ServeArgs {
    /// TCP port to listen on (all interfaces).
    #[arg(long, default_value_t = 9445)]
    pub port: u16,
    /// Listen here instead of --port: `host:port` or `unix:/path/to.sock`.
    #[arg(long, value_parser = super::listen_address)]
    pub listen: Option<String>,
    /// The exec runtime's config.yaml (`functions: [{function, images}]`); giving it selects the config.yaml generation [default: ./config.yaml].
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Directory holding the function binaries named in --config or in FunctionConfig binaryExecutor.path.
    #[arg(long, default_value = "./functions")]
    pub functions: PathBuf,
    /// Comma-separated runtimes to disable: exec, pod.
    // A plain string, not a value enum: Porch ignores names it does not know
    // (we warn), so a deployment naming another runtime must still start.
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
    /// Send a client connection GOAWAY once it is this old (each connection's age jittered ±10%), so the client reconnects through the Service to any replica: 1s to 365d, 0 keeps connections.
    #[arg(long, value_parser = max_connection_age, default_value = "2m")]
    pub max_connection_age: Duration,
    /// After a connection's GOAWAY, how long its calls in flight may still run before they are stopped (UNAVAILABLE): 1s to 365d.
    #[arg(long, value_parser = max_connection_age_grace, default_value = "10m")]
    pub max_connection_age_grace: Duration,
    /// Run apply-setters (catalog v0.2.2) in process, before the exec and pod runtimes (off: Porch's runner has no builtins; porch-server runs its own).
    #[arg(long)]
    pub builtin_functions: bool,
    /// Pass an environment variable to functions: NAME (the runner's value) or NAME=VALUE. Repeatable.
    #[arg(long = "exec-env", value_name = "NAME[=VALUE]", value_parser = exec_env_entry)]
    pub exec_env: Vec<String>,
    /// Function admission policy: ordered allow/deny rules on image references, checked before any runtime runs a call (denied: PERMISSION_DENIED naming the rule); re-read when the file changes. Default: every image allowed.
    #[arg(long, value_name = "FILE")]
    pub admission_policy: Option<PathBuf>,
    #[command(flatten)]
    pub limits: super::limits::LimitArgs,
    #[command(flatten)]
    pub sandbox: super::sandbox::SandboxArgs,
    #[command(flatten)]
    pub pod: PodArgs,
}

/// clap's check of `--max-connection-age` (a usage error, exit 2, when bad).
///
/// Errors: not a duration, or outside 1s..=365d and not 0.
pub(crate) fn max_connection_age(s: &str) -> Result<Duration, String> {
    let d = humantime::parse_duration(s).map_err(|e| format!("{s:?}: {e}"))?;
    ConnectionAge::new(d, connection_age::MIN_SETTING)
        .map(|_| d)
        .map_err(|e| e.to_string())
}

/// clap's check of `--max-connection-age-grace` (a usage error, exit 2,
/// when bad).
///
/// Errors: not a duration, or outside 1s..=365d.
fn max_connection_age_grace(s: &str) -> Result<Duration, String> {
    let d = humantime::parse_duration(s).map_err(|e| format!("{s:?}: {e}"))?;
    ConnectionAge::new(Duration::ZERO, d)
        .map(|_| d)
        .map_err(|e| e.to_string())
}

/// clap's check of one `--exec-env` value (a usage error, exit 2, when bad).
///
/// Errors: an empty name (`=VALUE`, or an empty string).
pub(crate) fn exec_env_entry(entry: &str) -> Result<String, String> {
    match entry.split_once('=') {
        Some((k, _)) if !k.is_empty() => Ok(entry.to_string()),
        None if !entry.is_empty() => Ok(entry.to_string()),
        _ => Err(format!("{entry:?}: expected NAME or NAME=VALUE")),
    }
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

/// A start-up failure of the pod runtime or of the cluster it needs stops
/// `serve`; while the exec runtime is on, the message then says how to do
/// without them (the pod runtime is on by default). The pod runtime's and
/// the generation's own messages are printed without their causes' chain
/// (they hold their causes already).
fn startup_error(e: StartupError, settings: &RuntimeSettings) -> anyhow::Error {
    let on = |r: &str| !settings.disabled.iter().any(|d| d == r);
    let cluster = matches!(
        e,
        StartupError::Pod(_)
            | StartupError::PodRuntime(_)
            | StartupError::Generation(_)
            | StartupError::FunctionConfigs(_)
    );
    if cluster && on("pod") && on("exec") {
        anyhow::anyhow!(
            "{e}\nThe pod runtime is on by default and needs a cluster; to run functions with \
             the exec runtime only (local binaries, no cluster), add --disable-runtimes=pod \
             with --config FILE --functions DIR"
        )
    } else if matches!(e, StartupError::Pod(_) | StartupError::Generation(_)) {
        // These messages name their causes in place (a generation error
        // then names both ways out): printed alone, so the causes below
        // kube-rs's errors (a refused TCP connection…) do not follow them.
        anyhow::anyhow!("{e}")
    } else {
        e.into()
    }
}

/// Runs the server until SIGTERM/SIGINT.
pub async fn run(args: ServeArgs) -> anyhow::Result<ExitCode> {
    let telemetry = super::init_telemetry("krm-fn-runner", args.log_level).await?;
    let admission = args
        .admission_policy
        .as_deref()
        .map(|p| Admission::from_file(p, &args.default_image_prefix))
        .transpose()
        .map_err(anyhow::Error::msg)?;
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
        slots: args.limits.slots(),
        sandbox: args.sandbox.grant(),
        render_read_rules: false,
        builtins: args.builtin_functions,
    };
    let pod_settings = args.pod.clone().settings(
        std::env::var("WRAPPER_SERVER_IMAGE").ok(),
        args.max_request_body_size,
        &args.default_image_prefix,
    );
    let started = start_runtimes(&settings, &pod_settings)
        .await
        .map_err(|e| startup_error(e, &settings))?;
    for w in &started.warnings {
        tracing::warn!("{w}");
    }
    let chain = started.chain;
    let pod_runtime = started.pod;
    // Kept for the server's lifetime: it feeds FunctionConfig changes to
    // the exec runtime and the pod cache.
    let _function_configs = started.function_configs;
    // Health follows the pod runtime (readiness after start-up, its watch
    // afterwards); without one, SERVING at once.
    let (always, serving) = tokio::sync::watch::channel(true);
    let health = match &pod_runtime {
        Some(pod) => pod.health(),
        None => serving,
    };
    tracing::info!(runtimes = ?chain.names(), "starting");
    let server = super::bind("krm-fn-runner", args.listen.as_deref(), args.port).await?;
    let options = ServeOptions {
        max_message_bytes: args.max_request_body_size,
        shutdown_grace: args.shutdown_grace_period,
        limits: args.limits.server_limits(args.max_request_body_size),
        connection_age: ConnectionAge::new(args.max_connection_age, args.max_connection_age_grace)?,
    };
    server
        .run_with_health(
            admitted(Arc::new(chain), admission),
            options,
            shutdown_signal(),
            health,
        )
        .await
        .context("gRPC server failed")?;
    drop(always);
    if let Some(pod) = pod_runtime {
        pod.shutdown();
    }
    telemetry.shutdown().await;
    tracing::info!("stopped");
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct T {
        #[command(flatten)]
        serve: ServeArgs,
    }

    fn parse(args: &[&str]) -> Result<ServeArgs, String> {
        T::try_parse_from(std::iter::once("serve").chain(args.iter().copied()))
            .map(|t| t.serve)
            .map_err(|e| e.to_string())
    }

    #[test]
    fn connection_age_flags_default_to_the_documented_values() {
        let a = parse(&[]).unwrap();
        let age = ConnectionAge::new(a.max_connection_age, a.max_connection_age_grace)
            .unwrap()
            .unwrap();
        assert_eq!(age, ConnectionAge::default());
        assert_eq!(age.max_age(), Duration::from_secs(120));
        assert_eq!(age.grace(), Duration::from_secs(600));
    }

    #[test]
    fn connection_age_flags_are_bounded() {
        let a = parse(&["--max-connection-age=0"]).unwrap();
        assert_eq!(
            ConnectionAge::new(a.max_connection_age, a.max_connection_age_grace),
            Ok(None),
            "0 turns ageing off"
        );
        let a = parse(&["--max-connection-age=1s", "--max-connection-age-grace=1s"]).unwrap();
        assert_eq!(a.max_connection_age, Duration::from_secs(1));
        assert_eq!(a.max_connection_age_grace, Duration::from_secs(1));
        parse(&[
            "--max-connection-age=365d",
            "--max-connection-age-grace=365d",
        ])
        .unwrap();
        for bad in ["500ms", "366d", "soon", "-1s"] {
            let e = parse(&[&format!("--max-connection-age={bad}")]).unwrap_err();
            assert!(e.contains("--max-connection-age"), "{bad}: {e}");
        }
        let e = parse(&["--max-connection-age=500ms"]).unwrap_err();
        assert!(e.contains("1s to 365d, or 0"), "{e}");
        for bad in ["0", "999ms", "366d", "later"] {
            let e = parse(&[&format!("--max-connection-age-grace={bad}")]).unwrap_err();
            assert!(e.contains("--max-connection-age-grace"), "{bad}: {e}");
        }
        let e = parse(&["--max-connection-age-grace=0"]).unwrap_err();
        assert!(e.contains("1s to 365d"), "{e}");
    }
}
