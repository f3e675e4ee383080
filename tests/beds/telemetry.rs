//! Metrics and traces of the real `krm-fn-runner serve` (exec runtime, real
//! catalog functions and small scripts), configured by the `OTEL_*`
//! variables of Porch's manifest: `/metrics` scraped and parsed by Python's
//! prometheus_client, spans and OTLP metrics received by a real
//! OpenTelemetry Collector.

use krm_fn_testbed::common;
use krm_fn_testbed::otel_support;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{Runner, catalog_config_with, catalog_image, config_map_rl, script};
use krm_fn_runner::adapters::grpc::pb::EvaluateFunctionRequest;
use otel_support::{Collector, Scrape, metrics_url, one, trace_ids};
use tonic::Code;

/// Fails with structured results (INTERNAL).
const FAIL: &str = "#!/bin/sh\ncat >/dev/null\nprintf 'apiVersion: config.kubernetes.io/v1\\nkind: ResourceList\\nitems: []\\nresults:\\n- message: replicas must be positive\\n  severity: error\\n'\nexit 1\n";
/// Runs for a little over a second.
const SLOW: &str = "#!/bin/sh\nsleep 1.2\ncat\n";

const FAIL_IMAGE: &str = "example.com/test/fail:v1";
const SLOW_IMAGE: &str = "example.com/test/slow-ok:v1";

/// `serve` (exec only) with the catalog and the two scripts, and `env`.
fn runner(dir: &Path, env: &[(&str, &str)]) -> Runner {
    script(dir, "fail", FAIL);
    script(dir, "slow-ok", SLOW);
    let config = format!(
        "--config={}",
        catalog_config_with(dir, &["fail", "slow-ok"])
    );
    Runner::start_with_env(&[&config, "--disable-runtimes=pod"], env)
}

fn with_config(config: &str) -> Vec<u8> {
    format!(
        "apiVersion: config.kubernetes.io/v1\nkind: ResourceList\nitems:\n- apiVersion: v1\n  kind: ConfigMap\n  metadata:\n    name: cm\nfunctionConfig:\n  apiVersion: v1\n  kind: ConfigMap\n  metadata:\n    name: fn\n  data:\n{config}"
    )
    .into_bytes()
}

/// Calls `image` on `rl`, with a W3C `traceparent` when given.
async fn call(
    runner: &Runner,
    image: &str,
    rl: Vec<u8>,
    traceparent: Option<&str>,
) -> Result<(), tonic::Status> {
    let mut request = tonic::Request::new(EvaluateFunctionRequest {
        tag: String::new(),
        resource_list: rl.into(),
        image: image.to_string(),
    });
    if let Some(t) = traceparent {
        request
            .metadata_mut()
            .insert("traceparent", t.parse().unwrap());
    }
    runner
        .client()
        .await
        .evaluate_function(request)
        .await
        .map(|_| ())
}

const EVALUATIONS: &str = "krm_fn_runner_evaluations_total";
const DURATION: &str = "krm_fn_runner_evaluation_duration_seconds";
const RUN: &str = "krm_fn_runner_function_run_duration_seconds";
const PROCESSES: &str = "krm_fn_runner_exec_processes";
const IN_FLIGHT: &str = "krm_fn_runner_evaluations_in_flight";

/// Porch's manifest settings, with `/metrics` on an ephemeral loopback port.
const PORCH_METRICS_ENV: [(&str, &str); 5] = [
    ("OTEL_METRICS_EXPORTER", "prometheus"),
    ("OTEL_EXPORTER_PROMETHEUS_HOST", "127.0.0.1"),
    ("OTEL_EXPORTER_PROMETHEUS_PORT", "0"),
    ("OTEL_TRACES_EXPORTER", "none"),
    ("OTEL_SERVICE_NAME", "porch-function-runner"),
];

#[tokio::test(flavor = "multi_thread")]
async fn prometheus_metrics_count_every_call_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let runner = runner(dir.path(), &PORCH_METRICS_ENV);
    let url = metrics_url(&runner);
    let set_namespace = catalog_image("set-namespace");
    let apply_setters = catalog_image("apply-setters");

    for ns in ["a", "b", "c"] {
        call(
            &runner,
            &set_namespace,
            with_config(&format!("    namespace: {ns}\n")),
            None,
        )
        .await
        .unwrap();
    }
    for tier in ["web", "db"] {
        call(
            &runner,
            &apply_setters,
            with_config(&format!("    tier: {tier}\n")),
            None,
        )
        .await
        .unwrap();
    }
    let failed = call(&runner, FAIL_IMAGE, config_map_rl("x"), None).await;
    assert_eq!(failed.unwrap_err().code(), Code::Internal);
    for _ in 0..2 {
        let missing = call(&runner, "example.com/none:v0", config_map_rl("x"), None).await;
        assert_eq!(missing.unwrap_err().code(), Code::NotFound);
    }
    let invalid = call(
        &runner,
        &set_namespace,
        b"not a resource list".to_vec(),
        None,
    )
    .await;
    assert_eq!(invalid.unwrap_err().code(), Code::InvalidArgument);

    // While the slow function runs, one process is running and one call is
    // in flight.
    let slow = {
        let runner = &runner;
        async move { call(runner, SLOW_IMAGE, config_map_rl("s"), None).await }
    };
    let watch = async {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let url = url.clone();
            let scrape = tokio::task::spawn_blocking(move || Scrape::take(&url))
                .await
                .unwrap();
            if scrape.value(PROCESSES, &[]) == 1.0 {
                assert_eq!(
                    scrape.value(IN_FLIGHT, &[]),
                    1.0,
                    "the slow call is in flight"
                );
                return;
            }
            assert!(Instant::now() < deadline, "no running process seen");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    };
    let (slow, ()) = tokio::join!(slow, watch);
    slow.unwrap();

    let m = tokio::task::spawn_blocking(move || Scrape::take(&url))
        .await
        .unwrap();
    assert!(
        m.content_type.starts_with("text/plain; version=0.0.4"),
        "{}",
        m.content_type
    );
    assert_eq!(m.kind("krm_fn_runner_evaluations"), "counter");
    assert_eq!(
        m.kind("krm_fn_runner_evaluation_duration_seconds"),
        "histogram"
    );
    assert_eq!(
        m.kind("krm_fn_runner_function_run_duration_seconds"),
        "histogram"
    );
    assert_eq!(m.kind(PROCESSES), "gauge");
    assert_eq!(m.kind(IN_FLIGHT), "gauge");
    // The resource, from OTEL_SERVICE_NAME.
    let target = m.samples("target_info", &[("service_name", "porch-function-runner")]);
    assert_eq!(target.len(), 1, "{:?}", m.families.get("target_info"));
    assert_eq!(target[0].value, 1.0);

    // Every call, once, by image, runtime and code; calls no runtime took
    // are folded into _OTHER.
    let expected: [(&str, &str, &str, f64); 6] = [
        (&set_namespace, "exec", "OK", 3.0),
        (&apply_setters, "exec", "OK", 2.0),
        (FAIL_IMAGE, "exec", "INTERNAL", 1.0),
        (SLOW_IMAGE, "exec", "OK", 1.0),
        ("_OTHER", "none", "NOT_FOUND", 2.0),
        ("_OTHER", "none", "INVALID_ARGUMENT", 1.0),
    ];
    let total: f64 = m.samples(EVALUATIONS, &[]).iter().map(|s| s.value).sum();
    assert_eq!(total, 10.0, "{:?}", m.samples(EVALUATIONS, &[]));
    for (image, runtime, code, n) in expected {
        let labels = [("image", image), ("runtime", runtime), ("code", code)];
        assert_eq!(m.value(EVALUATIONS, &labels), n, "{labels:?}");
        // The whole-call histogram has one observation per call.
        assert_eq!(m.count(DURATION, &labels), n, "{labels:?}");
    }
    // Refused or unknown calls are answered well within a second; the slow
    // one takes more than a second, end to end and in its function.
    for code in ["NOT_FOUND", "INVALID_ARGUMENT"] {
        let labels = [("image", "_OTHER"), ("runtime", "none"), ("code", code)];
        assert_eq!(m.bucket(DURATION, &labels, 1.0), m.count(DURATION, &labels));
    }
    let slow = [("image", SLOW_IMAGE), ("runtime", "exec"), ("code", "OK")];
    assert_eq!(m.bucket(DURATION, &slow, 1.0), 0.0);
    assert_eq!(m.bucket(DURATION, &slow, f64::INFINITY), 1.0);

    // The function ran for each call a runtime took, and only then.
    for (image, n) in [
        (set_namespace.as_str(), 3.0),
        (apply_setters.as_str(), 2.0),
        (FAIL_IMAGE, 1.0),
        (SLOW_IMAGE, 1.0),
    ] {
        assert_eq!(
            m.count(RUN, &[("image", image), ("runtime", "exec")]),
            n,
            "{image}"
        );
    }
    let runs: f64 = m
        .samples(&format!("{RUN}_count"), &[])
        .iter()
        .map(|s| s.value)
        .sum();
    assert_eq!(runs, 7.0);
    let slow_run = [("image", SLOW_IMAGE), ("runtime", "exec")];
    assert_eq!(m.bucket(RUN, &slow_run, 1.0), 0.0);
    assert!(m.value(&format!("{RUN}_sum"), &slow_run) >= 1.2);
    // Nothing runs any more, nothing is in flight; no pod runtime, no pod
    // metrics.
    assert_eq!(m.value(PROCESSES, &[]), 0.0);
    assert_eq!(m.value(IN_FLIGHT, &[]), 0.0);
    assert!(!m.families.contains_key("krm_fn_runner_pods"));
}

/// Starts `serve` with `env` and returns its exit status and stderr; it
/// must stop on its own within 20 s.
fn start_failing(env: &[(&str, &str)]) -> (std::process::ExitStatus, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_krm-fn-runner"))
        .args(["serve", "--disable-runtimes=pod", "--listen", "127.0.0.1:0"])
        .envs(env.iter().copied())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("serve kept running with {env:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr).unwrap();
    (status, stderr)
}

#[test]
fn misconfigured_telemetry_stops_the_runner_with_a_clear_error() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port().to_string();
    let cases: [(Vec<(&str, &str)>, String); 5] = [
        (
            vec![("OTEL_METRICS_EXPORTER", "prometheous")],
            "OTEL_METRICS_EXPORTER=\"prometheous\" is not supported: use prometheus, otlp, prometheus,otlp or none".into(),
        ),
        (
            vec![
                ("OTEL_METRICS_EXPORTER", "prometheus"),
                ("OTEL_EXPORTER_PROMETHEUS_PORT", "99999"),
            ],
            "OTEL_EXPORTER_PROMETHEUS_PORT=\"99999\" is not supported: use a TCP port number from 0 to 65535".into(),
        ),
        (
            vec![("OTEL_TRACES_EXPORTER", "zipkin")],
            "OTEL_TRACES_EXPORTER=\"zipkin\" is not supported: use otlp or none".into(),
        ),
        (
            vec![("OTEL_PROPAGATORS", "b3")],
            "OTEL_PROPAGATORS=\"b3\" is not supported".into(),
        ),
        (
            vec![
                ("OTEL_METRICS_EXPORTER", "prometheus"),
                ("OTEL_EXPORTER_PROMETHEUS_HOST", "127.0.0.1"),
                ("OTEL_EXPORTER_PROMETHEUS_PORT", &port),
            ],
            format!(
                "cannot serve metrics on 127.0.0.1:{port} (OTEL_EXPORTER_PROMETHEUS_HOST, OTEL_EXPORTER_PROMETHEUS_PORT): "
            ),
        ),
    ];
    for (env, message) in cases {
        let (status, stderr) = start_failing(&env);
        assert_eq!(status.code(), Some(1), "{env:?}: {stderr}");
        assert!(
            stderr.contains(&format!("Error: {message}")),
            "{env:?}: {stderr}"
        );
        assert!(!stderr.contains("listening on"), "{env:?}: {stderr}");
    }
    drop(taken);
}

#[tokio::test(flavor = "multi_thread")]
async fn spans_and_metrics_reach_a_real_collector_continuing_the_callers_trace() {
    let collector = Collector::start();
    let endpoint = format!("http://{}", collector.grpc);
    let dir = tempfile::tempdir().unwrap();
    let runner = runner(
        dir.path(),
        &[
            ("OTEL_TRACES_EXPORTER", "otlp"),
            ("OTEL_METRICS_EXPORTER", "otlp"),
            ("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
            ("OTEL_SERVICE_NAME", "porch-function-runner"),
            ("OTEL_BSP_SCHEDULE_DELAY", "100"),
            ("OTEL_METRIC_EXPORT_INTERVAL", "300"),
        ],
    );
    let (ok_trace, ok_parent) = trace_ids();
    let (fail_trace, fail_parent) = trace_ids();
    let set_namespace = catalog_image("set-namespace");
    call(
        &runner,
        &set_namespace,
        with_config("    namespace: traced\n"),
        Some(&format!("00-{ok_trace}-{ok_parent}-01")),
    )
    .await
    .unwrap();
    let failed = call(
        &runner,
        FAIL_IMAGE,
        config_map_rl("x"),
        Some(&format!("00-{fail_trace}-{fail_parent}-01")),
    )
    .await;
    assert_eq!(failed.unwrap_err().code(), Code::Internal);

    let complete = |spans: &[otel_support::Span]| {
        spans.iter().any(|s| s.name == "function.run")
            && spans
                .iter()
                .any(|s| s.name == "evaluator.FunctionEvaluator/EvaluateFunction")
    };
    let spans = collector.wait_for_trace(&ok_trace, Duration::from_secs(20), complete);
    // The runner's span continues the caller's: same trace, the caller's
    // span as parent, a server span under the RPC conventions.
    let call_span = one(&spans, "evaluator.FunctionEvaluator/EvaluateFunction");
    assert_eq!(call_span.parent_span_id, ok_parent);
    assert_eq!(call_span.kind, 2, "server span");
    assert_eq!(call_span.service, "porch-function-runner");
    for (k, v) in [
        ("rpc.system", "grpc"),
        ("rpc.service", "evaluator.FunctionEvaluator"),
        ("rpc.method", "EvaluateFunction"),
        ("rpc.grpc.status_code", "0"),
        ("image", set_namespace.as_str()),
        ("runtime", "exec"),
        ("code", "OK"),
    ] {
        assert_eq!(
            call_span.attributes.get(k).map(String::as_str),
            Some(v),
            "{k} in {call_span:#?}"
        );
    }
    // Its phase child: the function's process.
    let run = one(&spans, "function.run");
    assert_eq!(run.parent_span_id, call_span.span_id);
    assert_eq!(run.attributes["runtime"], "exec");
    assert_eq!(run.attributes["image"], set_namespace);

    let spans = collector.wait_for_trace(&fail_trace, Duration::from_secs(20), complete);
    let call_span = one(&spans, "evaluator.FunctionEvaluator/EvaluateFunction");
    assert_eq!(call_span.parent_span_id, fail_parent);
    assert_eq!(call_span.attributes["code"], "INTERNAL");
    assert_eq!(call_span.attributes["rpc.grpc.status_code"], "13");
    assert_eq!(
        call_span.status, 2,
        "an INTERNAL answer is a failed server span"
    );
    assert_eq!(
        one(&spans, "function.run").parent_span_id,
        call_span.span_id
    );

    // The same instruments also go out over OTLP.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let names = collector.metric_names();
        if names.iter().any(|(service, name)| {
            service == "porch-function-runner" && name == "krm_fn_runner.evaluations"
        }) && names
            .iter()
            .any(|(_, name)| name == "krm_fn_runner.function.run.duration")
        {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no OTLP metrics: {names:?}\n{}",
            collector.log()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_stalled_scrape_is_dropped_and_others_are_served() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let dir = tempfile::tempdir().unwrap();
    let runner = runner(dir.path(), &PORCH_METRICS_ENV);
    let url = metrics_url(&runner);
    let address = url
        .trim_start_matches("http://")
        .trim_end_matches("/metrics")
        .to_string();
    // A client that starts a request and never finishes its headers.
    let mut stalled = tokio::net::TcpStream::connect(&address).await.unwrap();
    stalled
        .write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")
        .await
        .unwrap();
    let started = Instant::now();
    // Others are served meanwhile.
    let m = tokio::task::spawn_blocking(move || Scrape::take(&url))
        .await
        .unwrap();
    assert_eq!(m.kind("target_info"), "gauge");
    // The stalled connection is closed after the header timeout (10 s).
    let mut buf = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(20), stalled.read_to_end(&mut buf)).await;
    assert!(read.is_ok(), "the stalled connection is still open");
    let took = started.elapsed();
    assert!(took >= Duration::from_secs(9), "{took:?}");
}
