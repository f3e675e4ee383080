//! Runner replicas and Porch's own Go client for the connection-ageing
//! tests (`tests/beds/replicas.rs`, behind a stand-in Service, and
//! `tests/pod_real.rs`, behind a real ClusterIP on the real node).
//!
//! **The client** is `tests/go/porch-runtime-client`, built by
//! `scripts/build-porch-client.sh` from the Go module proxy: it dials as
//! porch-server v1.5.3's gRPC function runtime does (one `grpc.NewClient`
//! with Porch's options, Porch's `func/evaluator` client package, the
//! grpc-go v1.72.0 Porch requires, pick_first), so all its calls share one
//! connection at a time, and it reports every call and every change of its
//! channel's state (each READY is a new connection).
//!
//! **The replicas** are `krm-fn-runner serve` processes (exec runtime) whose
//! test function answers `served-by-<replica>` (the replica's name reaches
//! it through `--exec-env REPLICA=…`), so the client itself tells which
//! replica served each call.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};

use serde::Deserialize;

use crate::common::{self, Runner, built_tool, script};

/// Answers a ResourceList naming the replica that ran it.
pub const WHOAMI: &str = "#!/bin/sh\ncat >/dev/null\nprintf 'apiVersion: config.kubernetes.io/v1\\nkind: ResourceList\\nitems:\\n- apiVersion: v1\\n  kind: ConfigMap\\n  metadata:\\n    name: served-by-%s\\n' \"$REPLICA\"\n";
/// The same after 1.5 s: a call still running when its connection ages.
pub const SLOW_WHOAMI: &str = "#!/bin/sh\nsleep 1.5\ncat >/dev/null\nprintf 'apiVersion: config.kubernetes.io/v1\\nkind: ResourceList\\nitems:\\n- apiVersion: v1\\n  kind: ConfigMap\\n  metadata:\\n    name: served-by-%s\\n' \"$REPLICA\"\n";
/// Runs for 4 s: longer than a 1 s grace.
pub const SLOWER: &str = "#!/bin/sh\nsleep 4\ncat\n";

pub const WHOAMI_IMAGE: &str = "example.com/test/whoami:v1";
pub const SLOW_IMAGE: &str = "example.com/test/slow-whoami:v1";
pub const SLOWER_IMAGE: &str = "example.com/test/slower:v1";

/// The ages in these tests: 1 s (the shortest the flag takes), jittered to
/// 0.9–1.1 s; the grace, 3 s, outlasts the 1.5 s calls.
pub const AGE: Duration = Duration::from_secs(1);
pub const AGE_FLAGS: [&str; 2] = ["--max-connection-age=1s", "--max-connection-age-grace=3s"];

/// `/metrics` on an ephemeral loopback port, as Porch's manifest asks.
pub const METRICS_ENV: [(&str, &str); 4] = [
    ("OTEL_METRICS_EXPORTER", "prometheus"),
    ("OTEL_EXPORTER_PROMETHEUS_HOST", "127.0.0.1"),
    ("OTEL_EXPORTER_PROMETHEUS_PORT", "0"),
    ("OTEL_TRACES_EXPORTER", "none"),
];

/// The client, from `KRM_FN_PORCH_CLIENT` or `scripts/build-porch-client.sh`.
pub fn porch_client() -> PathBuf {
    built_tool("KRM_FN_PORCH_CLIENT", "build-porch-client.sh")
}

/// The functions every replica serves, and a ResourceList to send.
pub struct Functions {
    dir: tempfile::TempDir,
    config: String,
    /// The ResourceList the client sends.
    pub input: PathBuf,
}

impl Default for Functions {
    /// [`Functions::new`].
    fn default() -> Self {
        Self::new()
    }
}

impl Functions {
    /// The three test functions in a scratch directory, and their config.yaml.
    pub fn new() -> Functions {
        let dir = tempfile::tempdir().unwrap();
        let mut yaml = String::from("functions:\n");
        for (name, body, image) in [
            ("whoami", WHOAMI, WHOAMI_IMAGE),
            ("slow-whoami", SLOW_WHOAMI, SLOW_IMAGE),
            ("slower", SLOWER, SLOWER_IMAGE),
        ] {
            let path = script(dir.path(), name, body);
            yaml.push_str(&format!(
                "- function: {}\n  images:\n  - {image}\n",
                path.display()
            ));
        }
        let config = dir.path().join("config.yaml");
        std::fs::write(&config, yaml).unwrap();
        let input = dir.path().join("input.yaml");
        std::fs::write(&input, common::config_map_rl("in")).unwrap();
        Functions {
            config: format!("--config={}", config.display()),
            input,
            dir,
        }
    }

    /// A replica named `name` with `flags` (exec runtime only).
    pub fn replica(&self, name: &str, flags: &[&str]) -> Runner {
        let replica = format!("--exec-env=REPLICA={name}");
        let functions = format!("--functions={}", self.dir.path().display());
        let mut args = vec![
            self.config.as_str(),
            functions.as_str(),
            "--disable-runtimes=pod",
            replica.as_str(),
        ];
        args.extend_from_slice(flags);
        Runner::start_with_env(&args, &METRICS_ENV)
    }
}

/// One call as the client reports it.
#[derive(Debug, Clone, Deserialize)]
pub struct Call {
    pub start_ms: i64,
    pub end_ms: i64,
    pub slow: bool,
    #[serde(default)]
    pub replica: String,
    pub code: String,
    #[serde(default)]
    pub error: String,
}

/// A change of the client channel's state.
#[derive(Debug, Clone, Deserialize)]
pub struct Change {
    pub at_ms: i64,
    pub state: String,
}

/// The client's report.
#[derive(Debug, Clone, Deserialize)]
pub struct Report {
    #[serde(default)]
    pub calls: Vec<Call>,
    #[serde(default)]
    pub changes: Vec<Change>,
}

impl Report {
    /// Calls that did not succeed.
    pub fn failed(&self) -> Vec<&Call> {
        self.calls.iter().filter(|c| c.code != "OK").collect()
    }

    /// Times (client ms) at which the channel was seen to leave READY: a
    /// GOAWAY received (or the connection lost). A change seen from READY
    /// to READY is a reconnection quicker than the client's watcher.
    pub fn goaways(&self) -> Vec<i64> {
        self.changes
            .windows(2)
            .filter(|w| w[0].state == "READY")
            .map(|w| w[1].at_ms)
            .collect()
    }

    /// Connections the client opened (times it became READY).
    pub fn connections(&self) -> usize {
        self.changes.iter().filter(|c| c.state == "READY").count()
    }

    /// Calls per replica among those started at or after `from_ms`.
    pub fn per_replica(&self, from_ms: i64) -> BTreeMap<String, usize> {
        let mut out = BTreeMap::new();
        for c in self.calls.iter().filter(|c| c.start_ms >= from_ms) {
            *out.entry(c.replica.clone()).or_insert(0) += 1;
        }
        out
    }

    /// Calls that were running when a GOAWAY arrived.
    pub fn across_goaway(&self) -> Vec<&Call> {
        let goaways = self.goaways();
        self.calls
            .iter()
            .filter(|c| goaways.iter().any(|g| c.start_ms < *g && *g < c.end_ms))
            .collect()
    }
}

/// Runs the client against `address` for `duration` (regular calls at 40
/// per second, 4 in flight at most, plus `slow_callers` callers of `slow`
/// back to back); `during` runs meanwhile, given when the client started.
pub async fn run_client<F, Fut>(
    functions: &Functions,
    address: SocketAddr,
    duration: Duration,
    slow: &str,
    slow_callers: usize,
    during: F,
) -> Report
where
    F: FnOnce(Instant) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let started = Instant::now();
    let child = tokio::process::Command::new(porch_client())
        .arg(format!("-address={address}"))
        .arg(format!("-image={WHOAMI_IMAGE}"))
        .arg(format!("-input={}", functions.input.display()))
        .arg(format!("-duration={}ms", duration.as_millis()))
        .arg("-rate=40")
        .arg("-callers=4")
        .arg(format!("-slow-image={slow}"))
        .arg(format!("-slow-callers={slow_callers}"))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("start porch-runtime-client");
    let (out, ()) = tokio::join!(child.wait_with_output(), during(started));
    let out = out.unwrap();
    assert!(
        out.status.success(),
        "porch-runtime-client failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "porch-runtime-client printed no report ({e}): {}",
            String::from_utf8_lossy(&out.stdout)
        )
    })
}

/// The failed calls of `report`, counted, and the first few.
pub fn failures(report: &Report) -> String {
    let failed = report.failed();
    format!(
        "{} of {} calls failed, first: {:?}",
        failed.len(),
        report.calls.len(),
        &failed[..failed.len().min(3)]
    )
}

/// `n` of `of` as a percentage.
pub fn pct(n: usize, of: usize) -> f64 {
    100.0 * n as f64 / of.max(1) as f64
}

/// Each replica's count and share, for messages.
pub fn shares(counts: &BTreeMap<String, usize>) -> String {
    let total: usize = counts.values().sum();
    counts
        .iter()
        .map(|(r, n)| format!("{r}: {n} ({:.0}%)", pct(*n, total)))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Prints `report` under `what` and asserts what a client connection that
/// is never aged shows: no call failed, one connection, one replica took
/// every call.
pub fn assert_one_replica_took_every_call(report: &Report, what: &str) {
    let all = report.per_replica(i64::MIN);
    eprintln!(
        "{what}: {} calls, {} failed, {} GOAWAYs, {} connections: {}",
        report.calls.len(),
        report.failed().len(),
        report.goaways().len(),
        report.connections(),
        shares(&all)
    );
    assert!(report.failed().is_empty(), "{}", failures(report));
    assert_eq!(
        all.len(),
        1,
        "one replica took every call: {}",
        shares(&all)
    );
    assert_eq!(report.connections(), 1);
}

/// Asserts each replica of `names` served at least `min_percent` of the
/// calls counted in `counts` (calls per replica, `when` naming the span
/// for the message).
pub fn assert_each_replica_served(
    counts: &BTreeMap<String, usize>,
    names: &[&str],
    min_percent: f64,
    when: &str,
) {
    let total: usize = counts.values().sum();
    for n in names {
        let share = pct(*counts.get(*n).unwrap_or(&0), total);
        assert!(
            share >= min_percent,
            "replica {n} served {share:.0}% of the calls {when}: {}",
            shares(counts)
        );
    }
}
