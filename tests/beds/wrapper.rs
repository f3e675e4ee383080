//! The wrapper server (runs inside function pods) over a real socket: Porch's
//! seven wrapper behaviours with small scripts, plus a real catalog function.

use krm_fn_testbed::common;
use krm_fn_testbed::otel_support;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use common::{Runner, catalog_dir, catalog_image, script};
use krm_fn_runner::adapters::grpc::pb::EvaluateFunctionRequest;
use krm_fn_runner::domain::resource_list::ResourceList;
use otel_support::{Collector, Scrape, metrics_url, one, trace_ids};
use tonic::Code;

/// Global text substitution over stdin; usage on stdout and exit 1 unless given two args.
const REPLACE: &str = "#!/bin/sh\nif [ $# -ne 2 ]; then echo 'usage: replace SEARCH REPLACE'; exit 1; fi\nsed \"s/$1/$2/g\"\n";
/// Echoes its input and fails.
const ECHO_FAIL: &str = "#!/bin/sh\ncat\necho 'function failure' >&2\nexit 1\n";

fn rl(item: &str) -> String {
    format!("apiVersion: config.kubernetes.io/v1\nkind: ResourceList\nitems:\n{item}")
}

const DEPLOYMENT: &str = "- apiVersion: apps/v1\n  kind: Deployment\n  metadata:\n    name: web\n    namespace: old-ns\n  spec:\n    replicas: 2\n";
const CONFIG_MAP: &str = "- apiVersion: v1\n  kind: ConfigMap\n  metadata:\n    name: settings\n    namespace: old-ns\n  data:\n    peer: db.old-ns.svc\n";
const CRON_JOB: &str = "- apiVersion: batch/v1\n  kind: CronJob\n  metadata:\n    name: nightly\n    namespace: old-ns\n  spec:\n    schedule: '0 2 * * *'\n";

async fn call(runner: &Runner, input: &[u8]) -> Result<Vec<u8>, tonic::Status> {
    runner
        .client()
        .await
        .evaluate_function(EvaluateFunctionRequest {
            tag: String::new(),
            resource_list: input.to_vec().into(),
            image: "example.com/fn:v1".into(),
        })
        .await
        .map(|r| r.into_inner().resource_list.to_vec())
}

fn replace_wrapper(dir: &Path) -> Runner {
    let replace = script(dir, "replace", REPLACE);
    // Porch's command line: template args, the flags, then the entrypoint.
    Runner::start_wrapper(&[
        "template-arg",
        "--port",
        "9446",
        "--max-request-body-size",
        "6291456",
        "--",
        replace.to_str().unwrap(),
        "old-ns",
        "new-ns",
    ])
}

#[tokio::test(flavor = "multi_thread")]
async fn successful_evaluations_replace_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let runner = replace_wrapper(dir.path());
    for item in [DEPLOYMENT, CONFIG_MAP, CRON_JOB] {
        let out = call(&runner, rl(item).as_bytes()).await.unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            rl(&item.replace("old-ns", "new-ns"))
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn entrypoint_without_its_arguments_is_a_parse_failure() {
    let dir = tempfile::tempdir().unwrap();
    let replace = script(dir.path(), "replace", REPLACE);
    let runner = Runner::start_wrapper(&["--", replace.to_str().unwrap()]);
    let err = call(&runner, rl(DEPLOYMENT).as_bytes()).await.unwrap_err();
    assert_eq!(err.code(), Code::Internal);
    assert!(
        err.message()
            .starts_with("failed to parse the output of function \"example.com/fn:v1\""),
        "{}",
        err.message()
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn empty_and_invalid_input_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let runner = replace_wrapper(dir.path());
    for input in [&b""[..], b"this is not a resource list"] {
        let err = call(&runner, input).await.unwrap_err();
        assert_eq!(err.code(), Code::InvalidArgument, "{err:?}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn failure_with_structured_results_reaches_the_caller() {
    let dir = tempfile::tempdir().unwrap();
    let echo = script(dir.path(), "echo-fail", ECHO_FAIL);
    let runner = Runner::start_wrapper(&["--", echo.to_str().unwrap()]);
    let input = format!(
        "{}results:\n- message: replicas too low\n  severity: error\n  resourceRef: {{apiVersion: apps/v1, kind: Deployment, name: web, namespace: old-ns}}\n",
        rl(DEPLOYMENT)
    );
    let err = call(&runner, input.as_bytes()).await.unwrap_err();
    assert_eq!(err.code(), Code::Internal);
    assert!(
        err.message().contains("exit status 1 (function failure)"),
        "{}",
        err.message()
    );
    assert!(
        err.message()
            .contains("[error] apps/v1/Deployment/old-ns/web: replicas too low"),
        "{}",
        err.message()
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn runs_a_real_catalog_function() {
    let binary = catalog_dir().join("bin/set-namespace");
    let runner = Runner::start_wrapper(&["--", binary.to_str().unwrap()]);
    let input = format!(
        "{}functionConfig:\n  apiVersion: v1\n  kind: ConfigMap\n  metadata:\n    name: fn\n  data:\n    namespace: from-wrapper\n",
        rl("- apiVersion: v1\n  kind: ConfigMap\n  metadata:\n    name: a\n")
    );
    let out = runner
        .client()
        .await
        .evaluate_function(EvaluateFunctionRequest {
            tag: String::new(),
            resource_list: input.into_bytes().into(),
            image: catalog_image("set-namespace"),
        })
        .await
        .unwrap()
        .into_inner();
    let out = ResourceList::parse(&out.resource_list).unwrap();
    assert_eq!(out.items[0]["metadata"]["namespace"], "from-wrapper");
}

#[test]
fn refuses_to_start_without_an_entrypoint() {
    let out = Command::new(env!("CARGO_BIN_EXE_wrapper-server"))
        .args(["--port", "0"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("no function entrypoint given"), "{stderr}");
}

#[tokio::test(flavor = "multi_thread")]
async fn serves_metrics_and_continues_the_callers_trace() {
    let collector = Collector::start();
    let endpoint = format!("http://{}", collector.http);
    let dir = tempfile::tempdir().unwrap();
    let replace = script(dir.path(), "replace", REPLACE);
    // Porch's pod template sets metrics on 0.0.0.0:9464 (here loopback and
    // any free port); traces go to the collector over OTLP/HTTP.
    let wrapper = Runner::start_wrapper_with_env(
        &["--", replace.to_str().unwrap(), "old-ns", "new-ns"],
        &[
            ("OTEL_METRICS_EXPORTER", "prometheus"),
            ("OTEL_EXPORTER_PROMETHEUS_HOST", "127.0.0.1"),
            ("OTEL_EXPORTER_PROMETHEUS_PORT", "0"),
            ("OTEL_TRACES_EXPORTER", "otlp"),
            ("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"),
            ("OTEL_BSP_SCHEDULE_DELAY", "100"),
        ],
    );
    let (trace, parent) = trace_ids();
    let mut client = wrapper.client().await;
    for (item, traced) in [(DEPLOYMENT, true), (CONFIG_MAP, false), ("", false)] {
        let input = if item.is_empty() {
            b"not a resource list".to_vec()
        } else {
            rl(item).into_bytes()
        };
        let mut request = tonic::Request::new(EvaluateFunctionRequest {
            tag: String::new(),
            resource_list: input.into(),
            image: "example.com/fn:v1".into(),
        });
        if traced {
            request.metadata_mut().insert(
                "traceparent",
                format!("00-{trace}-{parent}-01").parse().unwrap(),
            );
        }
        let result = client.evaluate_function(request).await;
        assert_eq!(result.is_ok(), !item.is_empty(), "{result:?}");
    }

    let url = metrics_url(&wrapper);
    let m = tokio::task::spawn_blocking(move || Scrape::take(&url))
        .await
        .unwrap();
    let ok = [
        ("image", "example.com/fn:v1"),
        ("runtime", "wrapper"),
        ("code", "OK"),
    ];
    assert_eq!(m.value("krm_fn_runner_evaluations_total", &ok), 2.0);
    let refused = [
        ("image", "_OTHER"),
        ("runtime", "none"),
        ("code", "INVALID_ARGUMENT"),
    ];
    assert_eq!(m.value("krm_fn_runner_evaluations_total", &refused), 1.0);
    assert_eq!(
        m.count(
            "krm_fn_runner_function_run_duration_seconds",
            &[("image", "example.com/fn:v1"), ("runtime", "wrapper")]
        ),
        2.0
    );
    assert_eq!(m.value("krm_fn_runner_exec_processes", &[]), 0.0);
    assert_eq!(
        m.samples("target_info", &[("service_name", "wrapper-server")])
            .len(),
        1
    );

    let spans = collector.wait_for_trace(&trace, Duration::from_secs(20), |s| {
        s.iter().any(|s| s.name == "function.run")
            && s.iter()
                .any(|s| s.name == "evaluator.FunctionEvaluator/EvaluateFunction")
    });
    let call = one(&spans, "evaluator.FunctionEvaluator/EvaluateFunction");
    assert_eq!(call.parent_span_id, parent);
    assert_eq!(call.service, "wrapper-server");
    assert_eq!(call.attributes["runtime"], "wrapper");
    let run = one(&spans, "function.run");
    assert_eq!(run.parent_span_id, call.span_id);
    assert_eq!(run.attributes["runtime"], "wrapper");
}
