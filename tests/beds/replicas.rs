//! Runner replicas behind one Service address share the calls of one
//! client connection: connection ageing (`--max-connection-age`,
//! `--max-connection-age-grace`), proven with Porch's own Go client.
//!
//! The client (Porch's own Go client package) and the replicas (`serve`
//! processes whose test function names the replica) are in
//! `testbed/src/replicas_support.rs`; their `/metrics` must agree with the client.
//!
//! **The Service is a stand-in**, not kube-proxy: `Balancer`
//! (`testbed/src/service_support.rs`), a TCP
//! connection balancer on loopback that, like a ClusterIP, forwards each new
//! client connection to one ready endpoint and never looks inside it. It
//! takes endpoints in turn (the IPVS mode's `rr` scheduler). kube-proxy's
//! default iptables and nftables modes pick an endpoint at random for each
//! new connection: the same spread on average, but it takes more connection
//! ages to even out (`krm-fn-runner simulate --replica-model` gives how
//! many), and a replica added later is reached at the first reconnection
//! the Service sends to it.
//!
//! The same behind a real ClusterIP (kube-proxy in iptables mode, on the
//! real node) is in `tests/pod_real.rs`:
//! `replicas_behind_a_cluster_ip_take_turns_with_ageing_and_not_without`
//! and `a_replica_added_behind_the_cluster_ip_is_reached`; random picks
//! need more ages there (120) than the turn-taking stand-in (8).

use krm_fn_testbed::common;
use krm_fn_testbed::otel_support;
use krm_fn_testbed::replicas_support;
use krm_fn_testbed::service_support;

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::Runner;
use otel_support::{Scrape, metrics_url};
use replicas_support::{
    AGE, AGE_FLAGS, Call, Functions, Report, SLOW_IMAGE, SLOWER_IMAGE, assert_each_replica_served,
    assert_one_replica_took_every_call, failures, pct, run_client, shares,
};
use service_support::Balancer;

/// The scenarios share the machine's two cores: one at a time.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

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
    assert_each_replica_served(&after, &names, 20.0, "after the first age");
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
    assert_one_replica_took_every_call(&report, "ageing off, 3 replicas, 8 s");
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
