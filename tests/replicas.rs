//! Runner replicas behind one Service address share the calls of one
//! client connection: connection ageing (`--max-connection-age`,
//! `--max-connection-age-grace`), proven with Porch's own Go client.
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
//! replica served each call. Their `/metrics` must agree.
//!
//! **The Service is a stand-in**, not kube-proxy: `Balancer`
//! (`tests/service_support`), a TCP
//! connection balancer on loopback that, like a ClusterIP, forwards each new
//! client connection to one ready endpoint and never looks inside it. It
//! takes endpoints in turn (the IPVS mode's `rr` scheduler). kube-proxy's
//! default iptables and nftables modes pick an endpoint at random for each
//! new connection: the same spread on average, but it takes more connection
//! ages to even out (`krm-fn-runner simulate --replica-model` gives how
//! many), and a replica added later is reached at the first reconnection
//! the Service sends to it.
//!
//! To run the same against a real Service (a ClusterIP on a real node):
//! the replicas become the pods of the runner's Deployment with these flags
//! and `REPLICA` set from the pod name (downward API), the client's
//! `-address` becomes the ClusterIP, an added replica is `kubectl scale`,
//! and the per-replica shares are read from the client's report exactly as
//! here; with iptables-mode kube-proxy the spread needs more ages than the
//! turn-taking stand-in does.

mod common;
mod otel_support;
mod service_support;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{Runner, built_tool, script};
use otel_support::{Scrape, metrics_url};
use serde::Deserialize;
use service_support::Balancer;

/// Answers a ResourceList naming the replica that ran it.
const WHOAMI: &str = "#!/bin/sh\ncat >/dev/null\nprintf 'apiVersion: config.kubernetes.io/v1\\nkind: ResourceList\\nitems:\\n- apiVersion: v1\\n  kind: ConfigMap\\n  metadata:\\n    name: served-by-%s\\n' \"$REPLICA\"\n";
/// The same after 1.5 s: a call still running when its connection ages.
const SLOW_WHOAMI: &str = "#!/bin/sh\nsleep 1.5\ncat >/dev/null\nprintf 'apiVersion: config.kubernetes.io/v1\\nkind: ResourceList\\nitems:\\n- apiVersion: v1\\n  kind: ConfigMap\\n  metadata:\\n    name: served-by-%s\\n' \"$REPLICA\"\n";
/// Runs for 4 s: longer than a 1 s grace.
const SLOWER: &str = "#!/bin/sh\nsleep 4\ncat\n";

const WHOAMI_IMAGE: &str = "example.com/test/whoami:v1";
const SLOW_IMAGE: &str = "example.com/test/slow-whoami:v1";
const SLOWER_IMAGE: &str = "example.com/test/slower:v1";

/// The ages in these tests: 1 s (the shortest the flag takes), jittered to
/// 0.9–1.1 s; the grace, 3 s, outlasts the 1.5 s calls.
const AGE: Duration = Duration::from_secs(1);
const AGE_FLAGS: [&str; 2] = ["--max-connection-age=1s", "--max-connection-age-grace=3s"];

/// `/metrics` on an ephemeral loopback port, as Porch's manifest asks.
const METRICS_ENV: [(&str, &str); 4] = [
    ("OTEL_METRICS_EXPORTER", "prometheus"),
    ("OTEL_EXPORTER_PROMETHEUS_HOST", "127.0.0.1"),
    ("OTEL_EXPORTER_PROMETHEUS_PORT", "0"),
    ("OTEL_TRACES_EXPORTER", "none"),
];

/// The scenarios share the machine's two cores: one at a time.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The client, from `KRM_FN_PORCH_CLIENT` or `scripts/build-porch-client.sh`.
fn porch_client() -> PathBuf {
    built_tool("KRM_FN_PORCH_CLIENT", "build-porch-client.sh")
}

/// The functions every replica serves, and a ResourceList to send.
struct Functions {
    dir: tempfile::TempDir,
    config: String,
    input: PathBuf,
}

impl Functions {
    fn new() -> Functions {
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
    fn replica(&self, name: &str, flags: &[&str]) -> Runner {
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

/// Replicas r1, r2 and r3 with `flags`, behind a new stand-in Service.
async fn three_replicas(
    functions: &Functions,
    flags: &[&str],
) -> ([&'static str; 3], Vec<Runner>, Balancer) {
    let names = ["r1", "r2", "r3"];
    let replicas: Vec<Runner> = names.iter().map(|n| functions.replica(n, flags)).collect();
    let service = Balancer::start().await;
    for (n, r) in names.iter().zip(&replicas) {
        service.add(n, &r.address);
    }
    (names, replicas, service)
}

/// One call as the client reports it.
#[derive(Debug, Clone, Deserialize)]
struct Call {
    start_ms: i64,
    end_ms: i64,
    slow: bool,
    #[serde(default)]
    replica: String,
    code: String,
    #[serde(default)]
    error: String,
}

/// A change of the client channel's state.
#[derive(Debug, Clone, Deserialize)]
struct Change {
    at_ms: i64,
    state: String,
}

/// The client's report.
#[derive(Debug, Clone, Deserialize)]
struct Report {
    #[serde(default)]
    calls: Vec<Call>,
    #[serde(default)]
    changes: Vec<Change>,
}

impl Report {
    /// Calls that did not succeed.
    fn failed(&self) -> Vec<&Call> {
        self.calls.iter().filter(|c| c.code != "OK").collect()
    }

    /// Times (client ms) at which the channel was seen to leave READY: a
    /// GOAWAY received (or the connection lost). A change seen from READY
    /// to READY is a reconnection quicker than the client's watcher.
    fn goaways(&self) -> Vec<i64> {
        self.changes
            .windows(2)
            .filter(|w| w[0].state == "READY")
            .map(|w| w[1].at_ms)
            .collect()
    }

    /// Connections the client opened (times it became READY).
    fn connections(&self) -> usize {
        self.changes.iter().filter(|c| c.state == "READY").count()
    }

    /// Calls per replica among those started at or after `from_ms`.
    fn per_replica(&self, from_ms: i64) -> BTreeMap<String, usize> {
        let mut out = BTreeMap::new();
        for c in self.calls.iter().filter(|c| c.start_ms >= from_ms) {
            *out.entry(c.replica.clone()).or_insert(0) += 1;
        }
        out
    }

    /// Calls that were running when a GOAWAY arrived.
    fn across_goaway(&self) -> Vec<&Call> {
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
async fn run_client<F, Fut>(
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

/// The client through `service` for 8 ages, with one caller of 1.5 s calls.
async fn eight_ages(functions: &Functions, service: &Balancer) -> Report {
    run_client(
        functions,
        service.address,
        AGE * 8,
        SLOW_IMAGE,
        1,
        |_| async {},
    )
    .await
}

/// Calls each replica's `/metrics` counts: evaluations (any code), aged
/// connections by outcome, and the in-flight gauge.
struct Counted {
    evaluations: f64,
    drained: f64,
    cut: f64,
    in_flight: f64,
    open: f64,
}

fn counted(replica: &Runner) -> Counted {
    let scrape = Scrape::take(&metrics_url(replica));
    assert_eq!(scrape.kind("krm_fn_runner_evaluations_in_flight"), "gauge");
    assert_eq!(scrape.kind("krm_fn_runner_connections"), "gauge");
    let sum = |name: &str, labels: &[(&str, &str)]| -> f64 {
        scrape.samples(name, labels).iter().map(|s| s.value).sum()
    };
    Counted {
        evaluations: sum("krm_fn_runner_evaluations_total", &[]),
        drained: sum(
            "krm_fn_runner_connections_aged_total",
            &[("outcome", "drained")],
        ),
        cut: sum(
            "krm_fn_runner_connections_aged_total",
            &[("outcome", "cut")],
        ),
        in_flight: scrape.value("krm_fn_runner_evaluations_in_flight", &[]),
        open: scrape.value("krm_fn_runner_connections", &[]),
    }
}

/// The failed calls of `report`, counted, and the first few.
fn failures(report: &Report) -> String {
    let failed = report.failed();
    format!(
        "{} of {} calls failed, first: {:?}",
        failed.len(),
        report.calls.len(),
        &failed[..failed.len().min(3)]
    )
}

/// `n` of `of` as a percentage.
fn pct(n: usize, of: usize) -> f64 {
    100.0 * n as f64 / of.max(1) as f64
}

fn shares(counts: &BTreeMap<String, usize>) -> String {
    let total: usize = counts.values().sum();
    counts
        .iter()
        .map(|(r, n)| format!("{r}: {n} ({:.0}%)", pct(*n, total)))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Asserts the replicas' own counts match what the client saw, and
/// returns the GOAWAYs they sent (drained, cut).
fn assert_metrics_agree(replicas: &[(&str, &Runner)], report: &Report) -> (f64, f64) {
    let seen = report.per_replica(i64::MIN);
    let (mut drained, mut cut) = (0.0, 0.0);
    for (name, runner) in replicas {
        // The last connection closes as the client exits: give it a moment.
        let mut c = counted(runner);
        let deadline = Instant::now() + Duration::from_secs(3);
        while (c.open > 0.0 || c.in_flight > 0.0) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(100));
            c = counted(runner);
        }
        assert_eq!(
            c.evaluations,
            *seen.get(*name).unwrap_or(&0) as f64,
            "replica {name}'s krm_fn_runner_evaluations_total is what the client saw it serve"
        );
        assert_eq!(c.in_flight, 0.0, "{name}: nothing in flight after the run");
        assert_eq!(c.open, 0.0, "{name}: no connection open after the run");
        drained += c.drained;
        cut += c.cut;
    }
    (drained, cut)
}

#[tokio::test(flavor = "multi_thread")]
async fn ageing_spreads_one_client_connection_over_three_replicas_without_a_failed_call() {
    let _serial = SERIAL.lock().await;
    let functions = Functions::new();
    let (names, replicas, service) = three_replicas(&functions, &AGE_FLAGS).await;
    // 8 ages; one caller of 1.5 s calls keeps a call in flight at every GOAWAY.
    let report = eight_ages(&functions, &service).await;

    let failed = report.failed();
    assert!(failed.is_empty(), "{}", failures(&report));
    let goaways = report.goaways();
    let first_age = *goaways.first().expect("the first connection was aged");
    let after = report.per_replica(first_age);
    let total: usize = after.values().sum();
    eprintln!(
        "ageing on, 3 replicas, 8 ages of 1 s: {} calls, {} failed, {} GOAWAYs, {} connections; \
         after the first age: {total} calls, {}; all calls: {}; {} calls in flight across a GOAWAY",
        report.calls.len(),
        failed.len(),
        goaways.len(),
        report.connections(),
        shares(&after),
        shares(&report.per_replica(i64::MIN)),
        report.across_goaway().len(),
    );
    for n in names {
        let share = pct(*after.get(n).unwrap_or(&0), total);
        assert!(
            share >= 20.0,
            "replica {n} served {share:.0}% of the calls after the first age: {}",
            shares(&after)
        );
    }
    // Connections end at their age (0.9–1.1 s), so about 8 in 8 s.
    assert!(
        (6..=10).contains(&goaways.len()),
        "{} GOAWAYs in 8 ages: {:?}",
        goaways.len(),
        report.changes
    );
    let across = report.across_goaway();
    assert!(
        across.iter().filter(|c| c.slow).count() >= 4,
        "slow calls were in flight across GOAWAYs, and all succeeded: {across:?}"
    );
    let refs: Vec<(&str, &Runner)> = names.iter().copied().zip(replicas.iter()).collect();
    let (drained, cut) = assert_metrics_agree(&refs, &report);
    assert_eq!(cut, 0.0, "no connection's calls were stopped");
    // The server counted the GOAWAYs the client received (one more may
    // have gone out as the client was closing).
    let sent = drained as usize;
    assert!(
        sent == goaways.len() || sent == goaways.len() + 1,
        "GOAWAYs sent {sent}, received {}",
        goaways.len()
    );
    let forwarded = service.forwarded();
    assert_eq!(
        forwarded.len(),
        report.connections(),
        "every connection went through the Service: {forwarded:?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn without_ageing_one_replica_takes_every_call() {
    let _serial = SERIAL.lock().await;
    let functions = Functions::new();
    let (names, replicas, service) = three_replicas(&functions, &["--max-connection-age=0"]).await;
    let report = eight_ages(&functions, &service).await;
    let all = report.per_replica(i64::MIN);
    eprintln!(
        "ageing off, 3 replicas, 8 s: {} calls, {} failed, {} GOAWAYs, {} connections: {}",
        report.calls.len(),
        report.failed().len(),
        report.goaways().len(),
        report.connections(),
        shares(&all)
    );
    assert!(report.failed().is_empty(), "{}", failures(&report));
    assert_eq!(
        all.len(),
        1,
        "one replica took every call: {}",
        shares(&all)
    );
    assert_eq!(report.connections(), 1);
    assert!(report.goaways().is_empty());
    let refs: Vec<(&str, &Runner)> = names.iter().copied().zip(replicas.iter()).collect();
    assert_eq!(assert_metrics_agree(&refs, &report), (0.0, 0.0));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_replica_added_mid_run_takes_its_share() {
    let _serial = SERIAL.lock().await;
    let functions = Functions::new();
    let first = [
        functions.replica("r1", &AGE_FLAGS),
        functions.replica("r2", &AGE_FLAGS),
    ];
    let service = Balancer::start().await;
    service.add("r1", &first[0].address);
    service.add("r2", &first[1].address);
    let added: Arc<Mutex<Option<(Runner, i64, usize)>>> = Arc::new(Mutex::new(None));
    let slot = added.clone();
    let (functions_ref, service_ref) = (&functions, &service);
    // 3 ages with two replicas, then a third joins (started, then added as
    // a ready endpoint) for 7 more.
    let report = run_client(
        &functions,
        service.address,
        AGE * 10,
        SLOW_IMAGE,
        1,
        |started| async move {
            tokio::time::sleep(AGE * 3).await;
            let r3 = functions_ref.replica("r3", &AGE_FLAGS);
            let joined_ms = started.elapsed().as_millis() as i64;
            let before = service_ref.forwarded().len();
            service_ref.add("r3", &r3.address);
            *slot.lock().unwrap() = Some((r3, joined_ms, before));
        },
    )
    .await;
    let (r3, joined_ms, before) = added.lock().unwrap().take().unwrap();
    assert!(report.failed().is_empty(), "{}", failures(&report));
    let forwarded = service.forwarded();
    let reached_after = forwarded[before..]
        .iter()
        .position(|f| f.endpoint == "r3")
        .map(|i| i + 1);
    let first_call = report
        .calls
        .iter()
        .filter(|c| c.replica == "r3")
        .map(|c| c.start_ms)
        .min();
    let after = report.per_replica(joined_ms);
    let total: usize = after.values().sum();
    eprintln!(
        "two replicas, a third joined at {joined_ms} ms: {} calls, {} failed, {} GOAWAYs, {} \
         connections; the third reached by the {} connection after joining, first call {} ms \
         after joining; calls since joining: {total}, {}",
        report.calls.len(),
        report.failed().len(),
        report.goaways().len(),
        report.connections(),
        reached_after.map_or("no".to_string(), |n| format!("#{n}")),
        first_call.map_or(-1, |t| t - joined_ms),
        shares(&after)
    );
    // Taking endpoints in turn, the Service sends it one of the next two
    // connections (two more endpoints); each lasts one age.
    assert!(
        matches!(reached_after, Some(1 | 2)),
        "r3 got a connection within two ages of joining: {forwarded:?}"
    );
    let first_call = first_call.expect("r3 served calls");
    assert!(
        first_call - joined_ms <= 2 * 1100 + 500,
        "r3's first call came {} ms after it joined",
        first_call - joined_ms
    );
    let share = pct(*after.get("r3").unwrap_or(&0), total);
    assert!(
        share >= 20.0,
        "r3 served {share:.0}% of the calls since it joined: {}",
        shares(&after)
    );
    let refs = [("r1", &first[0]), ("r2", &first[1]), ("r3", &r3)];
    let (_, cut) = assert_metrics_agree(&refs, &report);
    assert_eq!(cut, 0.0);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_call_outlasting_the_grace_is_answered_unavailable_and_the_replica_stays_up() {
    let _serial = SERIAL.lock().await;
    let functions = Functions::new();
    let replica = functions.replica(
        "r1",
        &["--max-connection-age=1s", "--max-connection-age-grace=1s"],
    );
    let address: SocketAddr = replica.address.parse().unwrap();
    // One 4 s call on a connection aged at 0.9–1.1 s with a 1 s grace.
    let report = run_client(
        &functions,
        address,
        Duration::from_millis(300),
        SLOWER_IMAGE,
        1,
        |_| async {},
    )
    .await;
    let slow: Vec<&Call> = report.calls.iter().filter(|c| c.slow).collect();
    assert_eq!(slow.len(), 1, "{slow:?}");
    let cut = slow[0];
    assert_eq!(cut.code, "Unavailable", "{cut:?}");
    assert!(
        cut.error.contains("--max-connection-age-grace")
            && cut.error.contains("1s")
            && cut.error.contains("retry"),
        "{}",
        cut.error
    );
    let took = cut.end_ms - cut.start_ms;
    assert!(
        (1800..=3000).contains(&took),
        "stopped at the age plus the grace (1.9–2.1 s), not after 4 s: {took} ms"
    );
    let c = counted(&replica);
    assert_eq!((c.drained, c.cut), (0.0, 1.0), "one connection cut");
    assert_eq!(c.in_flight, 0.0);
    // The replica serves the next connection.
    let again = run_client(
        &functions,
        address,
        Duration::from_millis(300),
        SLOW_IMAGE,
        0,
        |_| async {},
    )
    .await;
    assert!(
        !again.calls.is_empty() && again.failed().is_empty(),
        "{again:?}"
    );
    assert!(
        replica.log().contains("age grace ran out"),
        "{}",
        replica.log()
    );
}
