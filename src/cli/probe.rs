//! `grpc-health-probe`: asks a gRPC server for its health, for Kubernetes
//! exec probes.
//!
//! A drop-in for the grpc-ecosystem `grpc_health_probe` command that Porch's
//! manifests run (`/home/nonroot/grpc-health-probe -addr localhost:9445` in
//! the runner, `/wrapper-server-tools/grpc-health-probe -addr localhost:9446`
//! in function pods): same flags, Go flag syntax (`-addr x`, `-addr=x`,
//! `--addr x`), defaults and exit codes. It makes one
//! `grpc.health.v1.Health/Check` call over plaintext HTTP/2 and exits
//!
//! | code | meaning |
//! |---|---|
//! | 0 | the answer is `SERVING` |
//! | 1 | invalid command-line arguments |
//! | 2 | the connection failed or timed out |
//! | 3 | the RPC failed or timed out |
//! | 4 | the RPC succeeded but the answer is not `SERVING` |
//!
//! TLS, ALTS and SPIFFE transports are not supported (krm-fn-runner and its
//! wrapper server serve plaintext gRPC): asking for them is exit code 1 with
//! a message saying so.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::{ArgAction, Parser};
use tonic::metadata::{MetadataKey, MetadataValue};
use tonic::transport::Endpoint;
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;

/// Exit code: the answer is `SERVING`.
pub const EXIT_SERVING: u8 = 0;
/// Exit code: invalid command-line arguments.
pub const EXIT_INVALID_ARGUMENTS: u8 = 1;
/// Exit code: the connection failed or timed out.
pub const EXIT_CONNECTION_FAILURE: u8 = 2;
/// Exit code: the health RPC failed or timed out.
pub const EXIT_RPC_FAILURE: u8 = 3;
/// Exit code: the RPC succeeded but the status is not `SERVING`.
pub const EXIT_UNHEALTHY: u8 = 4;

/// The probe's flags (grpc_health_probe's names and defaults).
#[derive(Debug, Parser)]
#[command(
    name = "grpc-health-probe",
    version,
    about = "Checks a gRPC server's health (grpc.health.v1.Health/Check); exit 0 only when SERVING"
)]
pub struct ProbeArgs {
    /// (required) host:port to connect to (`:port` means localhost), or unix:/path/to.sock.
    #[arg(long, default_value = "")]
    pub addr: String,
    /// Service name to check; empty is the convention for the whole server.
    #[arg(long, default_value = "")]
    pub service: String,
    /// Timeout for establishing the connection (Go duration, e.g. 250ms, 1s, 1m30s).
    #[arg(long, default_value = "1s", value_parser = parse_go_duration)]
    pub connect_timeout: Duration,
    /// Timeout for the health-check RPC (Go duration).
    #[arg(long, default_value = "1s", value_parser = parse_go_duration)]
    pub rpc_timeout: Duration,
    /// User-agent header of the health-check request.
    #[arg(long, default_value = "grpc_health_probe")]
    pub user_agent: String,
    /// Extra request metadata, `name: value`. Repeatable.
    #[arg(long = "rpc-header", value_name = "NAME: VALUE")]
    pub rpc_headers: Vec<String>,
    /// Verbose logs.
    #[arg(short = 'v', long = "v", action = ArgAction::Set, num_args = 0..=1,
          require_equals = true, default_value_t = false, default_missing_value = "true")]
    pub verbose: bool,
    /// Use TLS (not supported: exit code 1).
    #[arg(long, action = ArgAction::Set, num_args = 0..=1, require_equals = true,
          default_value_t = false, default_missing_value = "true")]
    pub tls: bool,
    /// With -tls, do not verify the server certificate (not supported).
    #[arg(long, action = ArgAction::Set, num_args = 0..=1, require_equals = true,
          default_value_t = false, default_missing_value = "true")]
    pub tls_no_verify: bool,
    /// With -tls, trusted CA certificates (not supported).
    #[arg(long, default_value = "")]
    pub tls_ca_cert: String,
    /// With -tls, client certificate (not supported).
    #[arg(long, default_value = "")]
    pub tls_client_cert: String,
    /// With -tls, client key (not supported).
    #[arg(long, default_value = "")]
    pub tls_client_key: String,
    /// With -tls, server name to verify (not supported).
    #[arg(long, default_value = "")]
    pub tls_server_name: String,
    /// Use ALTS (not supported).
    #[arg(long, action = ArgAction::Set, num_args = 0..=1, require_equals = true,
          default_value_t = false, default_missing_value = "true")]
    pub alts: bool,
    /// Use SPIFFE workload identity (not supported).
    #[arg(long, action = ArgAction::Set, num_args = 0..=1, require_equals = true,
          default_value_t = false, default_missing_value = "true")]
    pub spiffe: bool,
    /// Compress the request with gzip (not supported).
    #[arg(long, action = ArgAction::Set, num_args = 0..=1, require_equals = true,
          default_value_t = false, default_missing_value = "true")]
    pub gzip: bool,
}

/// Parses a Go `time.Duration` string (`300ms`, `1.5s`, `1m30s`).
fn parse_go_duration(s: &str) -> Result<Duration, String> {
    let nanos = go_parse_duration::parse_duration(s)
        .map_err(|e| format!("invalid duration {s:?}: {e:?}"))?;
    u64::try_from(nanos)
        .map(Duration::from_nanos)
        .map_err(|_| format!("{s} is negative"))
}

/// What the probe found, with the exit code it maps to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// The server answered `SERVING`.
    Serving,
    /// The arguments are unusable; the message names the problem.
    InvalidArguments(String),
    /// No connection within the connect timeout, or it was refused.
    ConnectionFailure(String),
    /// The Check call failed or did not finish within the RPC timeout.
    RpcFailure(String),
    /// The server answered with this status name instead of `SERVING`.
    Unhealthy(String),
}

impl Outcome {
    /// The grpc_health_probe exit code of this outcome.
    pub fn exit_code(&self) -> u8 {
        match self {
            Outcome::Serving => EXIT_SERVING,
            Outcome::InvalidArguments(_) => EXIT_INVALID_ARGUMENTS,
            Outcome::ConnectionFailure(_) => EXIT_CONNECTION_FAILURE,
            Outcome::RpcFailure(_) => EXIT_RPC_FAILURE,
            Outcome::Unhealthy(_) => EXIT_UNHEALTHY,
        }
    }
}

/// The reasons the arguments are unusable, as grpc_health_probe words them.
fn validate(args: &ProbeArgs) -> Result<(), String> {
    if args.addr.is_empty() {
        return Err("-addr not specified".into());
    }
    if args.connect_timeout.is_zero() {
        return Err("-connect-timeout must be greater than zero (specified: 0s)".into());
    }
    if args.rpc_timeout.is_zero() {
        return Err("-rpc-timeout must be greater than zero (specified: 0s)".into());
    }
    let unsupported = [
        ("-tls", args.tls),
        ("-tls-no-verify", args.tls_no_verify),
        ("-tls-ca-cert", !args.tls_ca_cert.is_empty()),
        ("-tls-client-cert", !args.tls_client_cert.is_empty()),
        ("-tls-client-key", !args.tls_client_key.is_empty()),
        ("-tls-server-name", !args.tls_server_name.is_empty()),
        ("-alts", args.alts),
        ("-spiffe", args.spiffe),
        ("-gzip", args.gzip),
    ];
    if let Some((flag, _)) = unsupported.iter().find(|(_, given)| *given) {
        return Err(format!(
            "{flag} is not supported by this probe: it speaks plaintext gRPC only, as \
             krm-fn-runner and its wrapper server serve it"
        ));
    }
    for h in &args.rpc_headers {
        parse_header(h)?;
    }
    Ok(())
}

/// Splits `name: value` into a gRPC metadata entry.
fn parse_header(
    h: &str,
) -> Result<
    (
        MetadataKey<tonic::metadata::Ascii>,
        MetadataValue<tonic::metadata::Ascii>,
    ),
    String,
> {
    let (name, value) = h
        .split_once(':')
        .ok_or_else(|| format!("-rpc-header {h:?}: expected \"name: value\""))?;
    let key = MetadataKey::from_bytes(name.trim().to_ascii_lowercase().as_bytes())
        .map_err(|e| format!("-rpc-header {h:?}: invalid name: {e}"))?;
    let value = value
        .trim()
        .parse()
        .map_err(|e| format!("-rpc-header {h:?}: invalid value: {e}"))?;
    Ok((key, value))
}

/// The URI tonic dials for `addr`: `http://host:port` (an empty host is
/// localhost, as Go's dialer takes it), or a `unix:` socket path as given.
fn target_uri(addr: &str) -> String {
    if addr.starts_with("unix:") {
        addr.to_string()
    } else if let Some(port) = addr.strip_prefix(':') {
        format!("http://localhost:{port}")
    } else {
        format!("http://{addr}")
    }
}

/// Runs the probe: connect within `connect_timeout`, then one Check call
/// within `rpc_timeout`. Each line of `log` is what grpc_health_probe would
/// print to stderr.
pub async fn probe(args: &ProbeArgs, log: &mut dyn FnMut(String)) -> Outcome {
    if let Err(e) = validate(args) {
        return Outcome::InvalidArguments(e);
    }
    let verbose = args.verbose;
    if verbose {
        log("parsed options:".into());
        log(format!(
            "> addr={} conn_timeout={:?} rpc_timeout={:?}",
            args.addr, args.connect_timeout, args.rpc_timeout
        ));
        log("> tls=false".into());
        log("establishing connection".into());
    }
    let endpoint = match Endpoint::from_shared(target_uri(&args.addr))
        .and_then(|e| e.user_agent(args.user_agent.clone()))
    {
        Ok(e) => e.connect_timeout(args.connect_timeout),
        Err(e) => return Outcome::InvalidArguments(format!("-addr {:?}: {e}", args.addr)),
    };
    let started = Instant::now();
    let channel = match tokio::time::timeout(args.connect_timeout, endpoint.connect()).await {
        Ok(Ok(channel)) => channel,
        Ok(Err(e)) => {
            return Outcome::ConnectionFailure(format!(
                "error: failed to connect service at {:?}: {}",
                args.addr,
                error_chain(&e)
            ));
        }
        Err(_) => {
            return Outcome::ConnectionFailure(format!(
                "timeout: failed to connect service {:?} within {:?}",
                args.addr, args.connect_timeout
            ));
        }
    };
    let connect_took = started.elapsed();
    if verbose {
        log(format!("connection established (took {connect_took:?})"));
    }
    let mut request = tonic::Request::new(HealthCheckRequest {
        service: args.service.clone(),
    });
    request.set_timeout(args.rpc_timeout);
    for h in &args.rpc_headers {
        if let Ok((k, v)) = parse_header(h) {
            request.metadata_mut().append(k, v);
        }
    }
    let rpc_started = Instant::now();
    let mut client = HealthClient::new(channel);
    let response = match tokio::time::timeout(args.rpc_timeout, client.check(request)).await {
        Err(_) => {
            return Outcome::RpcFailure(format!(
                "timeout: health rpc did not complete within {:?}",
                args.rpc_timeout
            ));
        }
        Ok(Err(status)) => {
            // tonic's own deadline (the grpc-timeout it sends) ends the call
            // as CANCELLED "Timeout expired".
            let timed_out = status.code() == tonic::Code::DeadlineExceeded
                || (status.code() == tonic::Code::Cancelled
                    && rpc_started.elapsed() >= args.rpc_timeout);
            return Outcome::RpcFailure(if timed_out {
                format!(
                    "timeout: health rpc did not complete within {:?}",
                    args.rpc_timeout
                )
            } else if status.code() == tonic::Code::Unimplemented {
                format!(
                    "error: this server does not implement the grpc health protocol \
                     (grpc.health.v1.Health): {}",
                    status.message()
                )
            } else {
                format!(
                    "error: health rpc failed: {:?}: {}",
                    status.code(),
                    status.message()
                )
            });
        }
        Ok(Ok(response)) => response.into_inner(),
    };
    let status = ServingStatus::try_from(response.status)
        .map(|s| s.as_str_name().to_string())
        .unwrap_or_else(|_| format!("status {}", response.status));
    if verbose {
        log(format!(
            "time elapsed: connect={connect_took:?} rpc={:?}",
            rpc_started.elapsed()
        ));
    }
    if response.status == ServingStatus::Serving as i32 {
        Outcome::Serving
    } else {
        Outcome::Unhealthy(status)
    }
}

/// `err` and its sources, `: `-joined (tonic's transport errors hide the
/// cause, such as "Connection refused", in their source chain).
fn error_chain(err: &dyn std::error::Error) -> String {
    let mut out = err.to_string();
    let mut next = err.source();
    while let Some(e) = next {
        out.push_str(": ");
        out.push_str(&e.to_string());
        next = e.source();
    }
    out
}

/// Go's flag syntax as clap reads it: every single-dash argument longer
/// than `-x` (before a bare `--`) is a long flag, known or not, so that an
/// unknown `-foo` is reported by its name. The program name stays as is.
fn go_flags(args: Vec<String>) -> Vec<String> {
    let end = args.iter().position(|a| a == "--").unwrap_or(args.len());
    args.into_iter()
        .enumerate()
        .map(|(i, a)| {
            if i > 0 && i < end && a.len() > 2 && a.starts_with('-') && !a.starts_with("--") {
                format!("-{a}")
            } else {
                a
            }
        })
        .collect()
}

/// Parses the process arguments, probes, prints the outcome to stderr and
/// returns its exit code.
pub fn main() -> ExitCode {
    let args = match ProbeArgs::try_parse_from(go_flags(std::env::args().collect())) {
        Ok(a) => a,
        Err(e) if !e.use_stderr() => {
            // --help and --version.
            let _ = e.print();
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            let _ = e.print();
            return ExitCode::from(EXIT_INVALID_ARGUMENTS);
        }
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::from(EXIT_CONNECTION_FAILURE);
        }
    };
    let outcome = runtime.block_on(probe(&args, &mut |line| eprintln!("{line}")));
    match &outcome {
        Outcome::Serving => eprintln!("status: SERVING"),
        Outcome::InvalidArguments(m) => eprintln!("error: {m}"),
        Outcome::ConnectionFailure(m) | Outcome::RpcFailure(m) => eprintln!("{m}"),
        Outcome::Unhealthy(s) => eprintln!("service unhealthy (responded with {s:?})"),
    }
    ExitCode::from(outcome.exit_code())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(line: &str) -> Result<ProbeArgs, clap::Error> {
        ProbeArgs::try_parse_from(go_flags(
            line.split_whitespace().map(String::from).collect(),
        ))
    }

    #[test]
    fn porch_probe_command_lines_parse() {
        let a = parse("grpc-health-probe -addr localhost:9446").unwrap();
        assert_eq!(a.addr, "localhost:9446");
        assert_eq!(a.connect_timeout, Duration::from_secs(1));
        assert_eq!(a.rpc_timeout, Duration::from_secs(1));
        assert_eq!(a.user_agent, "grpc_health_probe");
        assert!(!a.verbose);
        let a = parse(
            "p -addr=:5000 -service=evaluator -connect-timeout 250ms -rpc-timeout=1.5s -v \
             --rpc-header=x-a:b",
        )
        .unwrap();
        assert_eq!(a.addr, ":5000");
        assert_eq!(a.service, "evaluator");
        assert_eq!(a.connect_timeout, Duration::from_millis(250));
        assert_eq!(a.rpc_timeout, Duration::from_millis(1500));
        assert!(a.verbose);
        assert_eq!(a.rpc_headers, ["x-a:b"]);
        assert_eq!(
            parse("p -addr x:1 -rpc-timeout 1m30s").unwrap().rpc_timeout,
            Duration::from_secs(90)
        );
        assert!(!parse("p -addr x:1 -v=false").unwrap().verbose);
    }

    #[test]
    fn bad_arguments_are_named() {
        for (line, needle) in [
            ("p", "-addr not specified"),
            ("p -addr x:1 -connect-timeout 0s", "-connect-timeout"),
            ("p -addr x:1 -rpc-timeout 0s", "-rpc-timeout"),
            ("p -addr x:1 -tls", "-tls is not supported"),
            (
                "p -addr x:1 -tls-ca-cert /ca.pem",
                "-tls-ca-cert is not supported",
            ),
            (
                "p -addr x:1 -rpc-header nocolon",
                "expected \"name: value\"",
            ),
        ] {
            let args = parse(line).unwrap();
            let e = validate(&args).unwrap_err();
            assert!(e.contains(needle), "{line}: {e}");
        }
        assert!(parse("p -addr x:1 -connect-timeout soon").is_err());
        assert!(parse("p -addr x:1 -rpc-timeout -1s").is_err());
        assert!(parse("p -addr x:1 -no-such-flag").is_err());
    }

    #[test]
    fn addresses_become_uris() {
        assert_eq!(target_uri("localhost:9445"), "http://localhost:9445");
        assert_eq!(target_uri(":9445"), "http://localhost:9445");
        assert_eq!(target_uri("unix:/run/s.sock"), "unix:/run/s.sock");
    }

    #[test]
    fn outcomes_map_to_documented_exit_codes() {
        assert_eq!(Outcome::Serving.exit_code(), 0);
        assert_eq!(Outcome::InvalidArguments(String::new()).exit_code(), 1);
        assert_eq!(Outcome::ConnectionFailure(String::new()).exit_code(), 2);
        assert_eq!(Outcome::RpcFailure(String::new()).exit_code(), 3);
        assert_eq!(Outcome::Unhealthy(String::new()).exit_code(), 4);
    }
}
