//! `krm-fn-runner simulate` end to end: generate a trace, replay it against
//! two policy files (one a bare pod-cache-config list, as deployed), and read
//! the table, the JSON report and the SVG plot.

use std::process::Command;

fn runner(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_krm-fn-runner"))
        .args(args)
        .output()
        .unwrap()
}

/// The JSON reports of a `simulate --json` run that succeeded.
fn json_reports(out: &std::process::Output) -> serde_json::Value {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn generate_then_compare_two_policies() {
    let dir = tempfile::tempdir().unwrap();
    let p = |name: &str| dir.path().join(name).display().to_string();
    let out = runner(&[
        "simulate",
        "--generate",
        "--trace",
        &p("t.csv"),
        "--duration",
        "6h",
        "--requests",
        "3000",
        "--functions",
        "40",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    std::fs::write(
        p("porch.yaml"),
        "- name: example.com/sim/fn-001:v1\n  timeToLive: 30m\n  maxParallelPodsPerFunction: 2\n",
    )
    .unwrap();
    std::fs::write(
        p("long.yaml"),
        "podTTL: 4h\nmaxParallelPodsPerFunction: 2\n",
    )
    .unwrap();

    let out = runner(&[
        "simulate",
        "--trace",
        &p("t.csv"),
        "--policy",
        &p("porch.yaml"),
        "--policy",
        &p("long.yaml"),
        "--plot",
        &p("plot.svg"),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let table = String::from_utf8(out.stdout).unwrap();
    assert!(table.starts_with("policy"), "{table}");
    assert!(
        table.contains("porch.yaml") && table.contains("long.yaml"),
        "{table}"
    );
    let svg = std::fs::read_to_string(p("plot.svg")).unwrap();
    assert!(svg.starts_with("<svg") && svg.contains("pods alive") && svg.contains("long.yaml"));

    let out = runner(&[
        "simulate",
        "--trace",
        &p("t.csv"),
        "--policy",
        &p("porch.yaml"),
        "--policy",
        &p("long.yaml"),
        "--json",
    ]);
    let reports: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let (short, long) = (&reports[0], &reports[1]);
    assert_eq!(short["requests"], long["requests"]);
    // A longer TTL keeps pods: fewer cold starts, more pod-seconds.
    assert!(
        long["cold_starts"].as_u64() < short["cold_starts"].as_u64(),
        "{reports}"
    );
    assert!(
        long["pod_seconds"].as_f64() > short["pod_seconds"].as_f64(),
        "{reports}"
    );
    assert_eq!(short["rejected"], 0);
}

#[test]
fn bad_inputs_are_named() {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("t.csv");
    std::fs::write(&trace, "at_seconds,image,run_seconds\n1,a:v1\n").unwrap();
    let policy = dir.path().join("p.yaml");
    std::fs::write(&policy, "podTTL: 30m\n").unwrap();
    let out = runner(&[
        "simulate",
        "--trace",
        trace.to_str().unwrap(),
        "--policy",
        policy.to_str().unwrap(),
    ]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("trace line 2"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    std::fs::write(&trace, "1,a:v1,1\n").unwrap();
    std::fs::write(&policy, "podTTL: never\n").unwrap();
    let out = runner(&[
        "simulate",
        "--trace",
        trace.to_str().unwrap(),
        "--policy",
        policy.to_str().unwrap(),
    ]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("podTTL"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A malformed trace, a policy with a duplicate key and a missing file are
/// the user's errors: `Error: …` naming the file, the line and the problem,
/// never "unexpected error" nor the YAML library's advice.
#[test]
fn user_errors_are_reported_as_such() {
    let dir = tempfile::tempdir().unwrap();
    let p = |name: &str| dir.path().join(name).display().to_string();
    std::fs::write(
        p("t.csv"),
        "at_seconds,image,run_seconds\n1,a:v1,2\n3,b:v1\n",
    )
    .unwrap();
    std::fs::write(p("ok.csv"), "1,a:v1,2\n").unwrap();
    std::fs::write(p("dup.yaml"), "podTTL: 4h\npodTTL: 5h\n").unwrap();
    for (trace, policy, expect) in [
        (
            "t.csv",
            "dup.yaml",
            vec!["t.csv", "line 3", "expected 3 CSV fields"],
        ),
        (
            "ok.csv",
            "dup.yaml",
            vec!["dup.yaml", "line 2", "duplicate"],
        ),
        ("ok.csv", "none.yaml", vec!["none.yaml"]),
    ] {
        let out = runner(&["simulate", "--trace", &p(trace), "--policy", &p(policy)]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{stderr}");
        assert!(stderr.starts_with("Error: "), "{stderr}");
        assert!(!stderr.contains("unexpected"), "{stderr}");
        assert!(!stderr.contains("DuplicateKeyPolicy"), "{stderr}");
        for e in expect {
            assert!(stderr.contains(e), "{e:?} not in {stderr}");
        }
    }
}

/// A day/night trace from the generator (the same file again for the same
/// seed), replayed on three replicas with API latency, fault rates, caller
/// deadlines and a rolling restart, all from the command line: the faults
/// happen and are counted, the invariants hold, and the JSON timeline adds
/// up to the summary next to a decisions/s figure.
#[test]
fn replicas_faults_and_deadlines_from_the_command_line() {
    let dir = tempfile::tempdir().unwrap();
    let p = |name: &str| dir.path().join(name).display().to_string();
    for name in ["a.csv", "b.csv"] {
        let out = runner(&[
            "simulate",
            "--generate",
            "--trace",
            &p(name),
            "--duration",
            "24h",
            "--requests",
            "4000",
            "--functions",
            "30",
            "--diurnal",
            "4",
            "--peak-hour",
            "14",
            "--bursts",
            "0",
            "--seed",
            "3",
        ]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let trace = std::fs::read_to_string(p("a.csv")).unwrap();
    assert_eq!(trace, std::fs::read_to_string(p("b.csv")).unwrap());
    // The day is busier around 14:00 than around 02:00.
    let hour_of =
        |line: &str| line.split(',').next().unwrap().parse::<f64>().unwrap() as u64 / 3600;
    let hours: Vec<u64> = trace.lines().skip(1).map(hour_of).collect();
    let (day, night) = (
        hours.iter().filter(|h| (12..16).contains(*h)).count(),
        hours.iter().filter(|h| (0..4).contains(*h)).count(),
    );
    assert!(day > 2 * night, "{day} requests at 12-16h, {night} at 0-4h");

    std::fs::write(
        p("p.yaml"),
        "podTTL: 10m\nmaxParallelPodsPerFunction: 2\nscanInterval: 20s\n",
    )
    .unwrap();
    let out = runner(&[
        "simulate",
        "--trace",
        &p("a.csv"),
        "--policy",
        &p("p.yaml"),
        "--replicas",
        "3",
        "--api-latency",
        "400ms",
        "--patch-failures",
        "0.2",
        "--list-failures",
        "0.2",
        "--delete-failures",
        "0.2",
        "--unavailable",
        "0.3",
        "--watch-gaps",
        "0.01",
        "--slow-lists",
        "0.1",
        "--clock-skew",
        "1s",
        "--start-latency",
        "4s",
        "--deadline",
        "5s",
        "--restart-every",
        "3h",
        "--json",
    ]);
    let reports = json_reports(&out);
    let r = &reports[0];
    let n = |k: &str| r[k].as_u64().unwrap_or_else(|| panic!("{k} in {r}"));
    assert_eq!(n("replicas"), 3);
    assert_eq!(r["violations"], serde_json::json!([]), "{r}");
    assert!(
        n("api_errors") > 0 && n("call_failures") > 0,
        "faults happened: {r}"
    );
    assert!(n("cancelled") > 0, "deadlines passed: {r}");
    assert!(r["decisions_per_s"].as_f64().unwrap() > 0.0);
    let timeline = r["timeline"].as_array().unwrap();
    assert!(timeline.len() > 100, "{} buckets", timeline.len());
    for key in ["cold_starts", "cancelled", "rejected"] {
        let sum: u64 = timeline.iter().map(|s| s[key].as_u64().unwrap()).sum();
        assert_eq!(sum, n(key), "{key}: the timeline sums to the total");
    }
    let peak = timeline.iter().map(|s| s["pods"].as_u64().unwrap()).max();
    assert_eq!(peak, Some(n("peak_pods")));
    for s in timeline {
        assert!(s["in_use"].as_u64() <= s["pods"].as_u64(), "{s}");
        assert!(s.get("waiting").is_some() && s.get("calls").is_some() && s.get("at_s").is_some());
    }
}

#[test]
fn fault_rates_must_be_probabilities() {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("t.csv");
    std::fs::write(&trace, "1,a:v1,1\n").unwrap();
    let out = runner(&[
        "simulate",
        "--trace",
        trace.to_str().unwrap(),
        "--policy",
        "p.yaml",
        "--patch-failures",
        "1.5",
    ]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("--patch-failures") && stderr.contains("probability"),
        "{stderr}"
    );
    let out = runner(&[
        "simulate",
        "--generate",
        "--trace",
        trace.to_str().unwrap(),
        "--diurnal",
        "0.5",
    ]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("diurnal ratio"), "{stderr}");
}

// Warm pools: the book's trade-off (`docs/src/operators/warm-pools.md`) on `examples/warm-pool` (two working
// days with quiet nights and gaps longer than the TTL): each pod kept warm
// removes cold starts and costs pod-hours; the pool never exceeds maxPods.
#[test]
fn warm_pool_minimums_trade_pod_hours_for_cold_starts() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/warm-pool");
    let policy = |m: u32| format!("{dir}/min-ready-{m}.yaml");
    let out = runner(&[
        "simulate",
        "--trace",
        &format!("{dir}/quiet-nights.csv"),
        "--policy",
        &policy(0),
        "--policy",
        &policy(1),
        "--policy",
        &policy(2),
        "--json",
    ]);
    let reports = json_reports(&out);
    let field = |i: usize, k: &str| reports[i][k].as_f64().unwrap();
    for i in 0..3 {
        assert_eq!(reports[i]["requests"], 203, "{reports}");
        assert!(field(i, "peak_pods") <= 3.0, "{reports}");
        assert_eq!(reports[i]["violations"].as_array().map(Vec::len), Some(0));
    }
    for i in 1..3 {
        assert!(
            field(i, "cold_starts") < field(i - 1, "cold_starts"),
            "{reports}"
        );
        assert!(
            field(i, "pod_seconds") > field(i - 1, "pod_seconds"),
            "{reports}"
        );
    }
    // A minimum of one keeps the first call after each night warm.
    assert!(
        field(0, "cold_starts") - field(1, "cold_starts") >= 2.0,
        "{reports}"
    );
}

/// `simulate … | head`: a reader that closes the pipe early ends the run
/// quietly (exit 0, no panic), for the table and `--json`.
#[test]
fn a_closed_stdout_ends_quietly() {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("t.csv").display().to_string();
    let policy = dir.path().join("p.yaml");
    std::fs::write(&policy, "podTTL: 30m\n").unwrap();
    let policy = policy.display().to_string();
    let generated = runner(&[
        "simulate",
        "--generate",
        "--trace",
        &trace,
        "--duration",
        "1h",
        "--requests",
        "200",
        "--functions",
        "5",
    ]);
    assert!(
        generated.status.success(),
        "{}",
        String::from_utf8_lossy(&generated.stderr)
    );
    for extra in [&[][..], &["--json"][..]] {
        let (reader, writer) = std::io::pipe().unwrap();
        drop(reader);
        let out = Command::new(env!("CARGO_BIN_EXE_krm-fn-runner"))
            .args(["simulate", "--trace", &trace, "--policy", &policy])
            .args(extra)
            .stdout(writer)
            .stderr(std::process::Stdio::piped())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success() && !stderr.contains("panicked"),
            "{extra:?}: {:?} {stderr}",
            out.status
        );
    }
}
