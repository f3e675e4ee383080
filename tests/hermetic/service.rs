//! The gRPC service end to end: a real `krm-fn-runner serve` process on
//! loopback, called over a socket, running real catalog functions and small
//! scripts that misbehave on purpose.

use krm_fn_testbed::common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::{Runner, alive, catalog_config_with, catalog_image, config_map_rl, script};
use krm_fn_runner::adapters::grpc::pb::EvaluateFunctionRequest;
use krm_fn_runner::domain::resource_list::ResourceList;
use tonic::Code;
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;

/// Scripts that fail, sleep, spawn grandchildren or flood their output.
fn write_scripts(dir: &Path) {
    script(
        dir,
        "fail",
        "#!/bin/sh\ncat >/dev/null\nprintf 'apiVersion: config.kubernetes.io/v1\\nkind: ResourceList\\nitems: []\\nresults:\\n- message: replicas must be positive\\n  severity: error\\n'\necho 'failed to evaluate function: error: function failure' >&2\nexit 1\n",
    );
    // Starts a background grandchild, then sleeps ([`sleeper_tree`] finds
    // them: the function may write nothing outside its scratch directory).
    script(
        dir,
        "sleepy",
        "#!/bin/sh\ncat >/dev/null\nsleep 300 &\nsleep 300\n",
    );
    script(dir, "slow-ok", "#!/bin/sh\nsleep 1\ncat\n");
    script(dir, "flood", "#!/bin/sh\ncat >/dev/null\nexec yes krm\n");
}

struct Bed {
    dir: tempfile::TempDir,
    runner: Runner,
}

fn bed(extra: &[&str]) -> Bed {
    let dir = tempfile::tempdir().unwrap();
    write_scripts(dir.path());
    let config = catalog_config_with(dir.path(), &["fail", "sleepy", "slow-ok", "flood"]);
    let mut args = vec!["--config", &config, "--disable-runtimes=pod"];
    args.extend_from_slice(extra);
    let runner = Runner::start(&args);
    Bed { dir, runner }
}

fn request(image: &str, rl: Vec<u8>) -> EvaluateFunctionRequest {
    EvaluateFunctionRequest {
        tag: String::new(),
        resource_list: rl.into(),
        image: image.to_string(),
    }
}

fn with_config(item: &str, config: &str) -> Vec<u8> {
    format!("apiVersion: config.kubernetes.io/v1\nkind: ResourceList\nitems:\n{item}functionConfig:\n{config}")
        .into_bytes()
}

const DEPLOYMENT: &str = "- apiVersion: apps/v1\n  kind: Deployment\n  metadata:\n    name: web\n  spec:\n    template:\n      spec:\n        containers:\n        - name: nginx\n          image: nginx:1.14\n";

async fn assert_serving(runner: &Runner) {
    let mut health = HealthClient::new(runner.channel().await);
    for service in ["", "evaluator.FunctionEvaluator"] {
        let r = health
            .check(HealthCheckRequest {
                service: service.into(),
            })
            .await
            .unwrap()
            .into_inner();
        assert_eq!(r.status(), ServingStatus::Serving, "service {service:?}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn health_reports_serving() {
    let bed = bed(&[]);
    assert_serving(&bed.runner).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn catalog_function_transforms_the_resource_list() {
    let bed = bed(&[]);
    let rl = with_config(
        DEPLOYMENT,
        "  apiVersion: v1\n  kind: ConfigMap\n  metadata:\n    name: fn\n  data:\n    namespace: prod\n",
    );
    let out = bed
        .runner
        .client()
        .await
        .evaluate_function(request(&catalog_image("set-namespace"), rl))
        .await
        .unwrap()
        .into_inner();
    let rl = ResourceList::parse(&out.resource_list).unwrap();
    assert_eq!(rl.items[0]["metadata"]["namespace"], "prod");
}

#[tokio::test(flavor = "multi_thread")]
async fn unknown_image_is_not_found_naming_the_image() {
    let bed = bed(&[]);
    let err = bed
        .runner
        .client()
        .await
        .evaluate_function(request("example.com/nope:v9", config_map_rl("a")))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::NotFound);
    assert_eq!(err.message(), "function \"example.com/nope:v9\" not found");
}

#[tokio::test(flavor = "multi_thread")]
async fn failing_function_reports_stderr_and_structured_results() {
    let bed = bed(&[]);
    let err = bed
        .runner
        .client()
        .await
        .evaluate_function(request("example.com/test/fail:v1", config_map_rl("a")))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::Internal);
    let m = err.message();
    assert!(
        m.starts_with("Failed to execute function \"example.com/test/fail:v1\": exit status 1"),
        "{m}"
    );
    assert!(
        m.contains("failed to evaluate function: error: function failure"),
        "{m}"
    );
    assert!(m.contains("[error]: replicas must be positive"), "{m}");
}

/// Sends `call` to `bed` with a `timeout`, and checks that it fails with
/// `DEADLINE_EXCEEDED` in less than `within`; returns the status.
async fn deadline_exceeded(
    bed: &Bed,
    call: EvaluateFunctionRequest,
    timeout: Duration,
    within: Duration,
) -> tonic::Status {
    let mut call = tonic::Request::new(call);
    call.set_timeout(timeout);
    let started = Instant::now();
    // The runner's own answer: this client does not also end the call on
    // its own timer.
    let mut client = bed.runner.client_without_local_deadline();
    let err = tokio::time::timeout(within, client.evaluate_function(call))
        .await
        .unwrap_or_else(|_| panic!("no answer within {within:?}"))
        .unwrap_err();
    assert_eq!(err.code(), Code::DeadlineExceeded, "{err:?}");
    assert!(started.elapsed() < within);
    err
}

/// The `sleepy` function of `bed` once it runs: the shell and its two
/// `sleep` children (one in the background), found in `/proc`.
async fn sleeper_tree(bed: &Bed) -> Vec<u32> {
    let marker = bed.dir.path().join("sleepy").display().to_string();
    common::eventually(
        "the sleeping function and its two sleeps",
        Duration::from_secs(20),
        || {
            let found = match common::processes_matching(&marker)[..] {
                [shell] => {
                    let sleeps: Vec<u32> = common::children_of(shell)
                        .into_iter()
                        .filter(|&(pid, zombie)| {
                            !zombie
                                && std::fs::read(format!("/proc/{pid}/cmdline"))
                                    .is_ok_and(|c| c.starts_with(b"sleep\0"))
                        })
                        .map(|(pid, _)| pid)
                        .collect();
                    (sleeps.len() == 2).then(|| [vec![shell], sleeps].concat())
                }
                _ => None,
            };
            async move { found }
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread")]
async fn deadline_stops_the_function_and_its_children() {
    let bed = bed(&[]);
    let call = request("example.com/test/sleepy:v1", config_map_rl("a"));
    let (_, pids) = tokio::join!(
        deadline_exceeded(
            &bed,
            call,
            Duration::from_millis(800),
            Duration::from_secs(5),
        ),
        sleeper_tree(&bed)
    );
    let deadline = Instant::now() + Duration::from_secs(5);
    while pids.iter().any(|p| alive(*p)) && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    for p in pids {
        assert!(!alive(p), "process {p} survived the deadline");
    }
    assert_serving(&bed.runner).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn oversize_request_is_resource_exhausted_naming_the_flag() {
    let bed = bed(&["--max-request-body-size", "4096"]);
    let mut client = bed.runner.client().await;
    // Just over the limit: refused by the runner's own check.
    let mut rl = config_map_rl("a");
    rl.extend(std::iter::repeat_n(b'#', 5000));
    let err = client
        .evaluate_function(request(&catalog_image("set-namespace"), rl))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::ResourceExhausted);
    assert!(
        err.message().contains("--max-request-body-size"),
        "{}",
        err.message()
    );
    // Far over the limit: refused by the transport, still RESOURCE_EXHAUSTED.
    let mut rl = config_map_rl("a");
    rl.extend(std::iter::repeat_n(b'#', 2 << 20));
    let err = client
        .evaluate_function(request(&catalog_image("set-namespace"), rl))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::ResourceExhausted, "{err:?}");
    assert!(
        err.message().contains("--max-request-body-size"),
        "{}",
        err.message()
    );
    assert_serving(&bed.runner).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn malformed_input_is_invalid_argument() {
    let bed = bed(&[]);
    let mut client = bed.runner.client().await;
    let image = catalog_image("set-namespace");
    for (bytes, needle) in [
        (b"\xff\xfe\x00garbage".to_vec(), "not valid YAML"),
        (b"items: [unclosed".to_vec(), "not valid YAML"),
        (
            b"apiVersion: apps/v1\nkind: Deployment\n".to_vec(),
            "expected kind ResourceList",
        ),
        (Vec::new(), "empty"),
        // An alias anywhere gets the bounded parse, whose alias budget
        // refuses a bomb inside the items too.
        (items_alias_bomb(), "alias"),
        (
            b"kind: ResourceList\nkind: List\nitems: []\n".to_vec(),
            "duplicate",
        ),
        (b"- kind: ResourceList\n".to_vec(), "not valid YAML"),
    ] {
        let err = client
            .evaluate_function(request(&image, bytes))
            .await
            .unwrap_err();
        assert_eq!(err.code(), Code::InvalidArgument, "{err:?}");
        assert!(err.message().contains(needle), "{}", err.message());
    }
    let err = client
        .evaluate_function(request("", config_map_rl("a")))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
    assert_serving(&bed.runner).await;
}

/// A ResourceList whose top level is right and whose items hold a 9-level,
/// 9-way alias chain (387 million nodes once expanded).
fn items_alias_bomb() -> Vec<u8> {
    let mut s = String::from("apiVersion: config.kubernetes.io/v1\nkind: ResourceList\nitems:\n");
    s.push_str("- a0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n");
    for i in 1..9 {
        let refs = vec![format!("*a{}", i - 1); 9].join(", ");
        s.push_str(&format!("  a{i}: &a{i} [{refs}]\n"));
    }
    s.into_bytes()
}

/// The input check reads the top level of the ResourceList; the syntax
/// inside its items is the function's to report, as with Porch's runner.
#[tokio::test(flavor = "multi_thread")]
async fn broken_items_reach_the_function() {
    let bed = bed(&[]);
    let mut client = bed.runner.client().await;
    // `labels` is indented under nothing.
    let rl = b"apiVersion: config.kubernetes.io/v1\nkind: ResourceList\nitems:\n\
               - apiVersion: v1\n  kind: ConfigMap\n  metadata:\n    name: a\n   labels: x\n"
        .to_vec();
    assert!(ResourceList::parse(&rl).is_err());
    let err = client
        .evaluate_function(request(&catalog_image("set-namespace"), rl))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::Internal, "{err:?}");
    assert!(err.message().contains("set-namespace"), "{}", err.message());
    assert_serving(&bed.runner).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn flooding_function_is_stopped_with_a_clear_error() {
    let bed = bed(&["--max-request-body-size", "65536"]);
    let err = bed
        .runner
        .client()
        .await
        .evaluate_function(request("example.com/test/flood:v1", config_map_rl("a")))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::ResourceExhausted);
    assert!(err.message().contains("output"), "{}", err.message());
    assert_serving(&bed.runner).await;
}

/// One request per function, with a check of its effect. These are the five
/// catalog functions the Go module proxy serves (see the install script).
/// Checks a function's output.
type Check = Box<dyn Fn(&ResourceList) + Send>;

fn catalog_case(i: usize) -> (String, Vec<u8>, Check) {
    let item = format!(
        "- apiVersion: v1\n  kind: ConfigMap\n  metadata:\n    name: cm-{i}\n  data:\n    k: v{i}\n    image: nginx:1.1 # kpt-set: ${{tag}}\n"
    );
    let cm = |data: &str| {
        format!("  apiVersion: v1\n  kind: ConfigMap\n  metadata:\n    name: fn\n  data:\n{data}")
    };
    match i % 5 {
        0 => (
            catalog_image("set-namespace"),
            with_config(&item, &cm(&format!("    namespace: ns-{i}\n"))),
            Box::new(move |rl| assert_eq!(rl.items[0]["metadata"]["namespace"], format!("ns-{i}"))),
        ),
        1 => (
            catalog_image("apply-setters"),
            with_config(&item, &cm(&format!("    tag: nginx:1.{i}\n"))),
            Box::new(move |rl| assert_eq!(rl.items[0]["data"]["image"], format!("nginx:1.{i}"))),
        ),
        2 => (
            catalog_image("apply-replacements"),
            with_config(
                &item,
                &format!(
                    "  apiVersion: fn.kpt.dev/v1alpha1\n  kind: ApplyReplacements\n  metadata:\n    name: fn\n  replacements:\n  - source:\n      kind: ConfigMap\n      name: cm-{i}\n      fieldPath: data.k\n    targets:\n    - select:\n        kind: ConfigMap\n      fieldPaths:\n      - data.copied\n      options:\n        create: true\n"
                ),
            ),
            Box::new(move |rl| assert_eq!(rl.items[0]["data"]["copied"], format!("v{i}"))),
        ),
        3 => (
            catalog_image("list-setters"),
            with_config(&item, &cm("    tag: unused\n")),
            Box::new(move |rl| {
                assert!(
                    rl.results
                        .iter()
                        .any(|r| r.message.contains("Name: tag, Value: nginx:1.1")),
                    "{rl:?}"
                )
            }),
        ),
        _ => (
            catalog_image("starlark"),
            with_config(
                &item,
                &format!(
                    "  apiVersion: fn.kpt.dev/v1alpha1\n  kind: StarlarkRun\n  metadata:\n    name: fn\n  source: |\n    for r in ctx.resource_list[\"items\"]:\n      r[\"metadata\"][\"annotations\"] = {{\"seen\": \"{i}\"}}\n"
                ),
            ),
            Box::new(move |rl| {
                assert_eq!(
                    rl.items[0]["metadata"]["annotations"]["seen"],
                    format!("{i}")
                )
            }),
        ),
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn fifty_concurrent_requests_across_five_functions() {
    let bed = bed(&[]);
    let client = bed.runner.client().await;
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..50 {
        let mut client = client.clone();
        tasks.spawn(async move {
            let (image, rl, check) = catalog_case(i);
            let out = client
                .evaluate_function(request(&image, rl))
                .await
                .unwrap_or_else(|e| panic!("request {i} ({image}): {e:?}"))
                .into_inner();
            check(&ResourceList::parse(&out.resource_list).unwrap());
        });
    }
    let mut done = 0;
    while let Some(r) = tasks.join_next().await {
        r.unwrap();
        done += 1;
    }
    assert_eq!(done, 50);
}

#[tokio::test(flavor = "multi_thread")]
async fn serves_on_a_unix_socket() {
    let dir = tempfile::tempdir().unwrap();
    let sock = format!("--listen=unix:{}", dir.path().join("runner.sock").display());
    let bed = bed(&[&sock]);
    assert!(bed.runner.address.starts_with("unix:"));
    let (image, rl, check) = catalog_case(0);
    let out = bed
        .runner
        .client()
        .await
        .evaluate_function(request(&image, rl))
        .await
        .unwrap();
    check(&ResourceList::parse(&out.into_inner().resource_list).unwrap());
}

#[tokio::test(flavor = "multi_thread")]
async fn sigterm_lets_in_flight_calls_finish() {
    let mut bed = bed(&["--shutdown-grace-period", "10s"]);
    let mut client = bed.runner.client().await;
    let call = tokio::spawn(async move {
        client
            .evaluate_function(request(
                "example.com/test/slow-ok:v1",
                config_map_rl("kept"),
            ))
            .await
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let status = tokio::task::block_in_place(|| bed.runner.terminate(Duration::from_secs(10)));
    let out = call
        .await
        .unwrap()
        .expect("in-flight call finished")
        .into_inner();
    assert!(String::from_utf8_lossy(&out.resource_list).contains("name: kept"));
    assert!(status.expect("runner exited").success());
}

#[tokio::test(flavor = "multi_thread")]
async fn sigterm_stops_what_outlives_the_grace_period() {
    let mut bed = bed(&["--shutdown-grace-period", "300ms"]);
    let mut client = bed.runner.client().await;
    let call = tokio::spawn(async move {
        client
            .evaluate_function(request("example.com/test/sleepy:v1", config_map_rl("a")))
            .await
    });
    let pids = sleeper_tree(&bed).await;
    let started = Instant::now();
    let status = tokio::task::block_in_place(|| bed.runner.terminate(Duration::from_secs(10)));
    assert!(
        status.is_some(),
        "runner did not exit after the grace period"
    );
    assert!(started.elapsed() < Duration::from_secs(5));
    assert!(call.await.unwrap().is_err());
    let deadline = Instant::now() + Duration::from_secs(5);
    for p in pids {
        while alive(p) && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(!alive(p), "process {p} survived shutdown");
    }
}

/// Starts a `sleepy` call (it sleeps for minutes) on `bed` and returns once
/// its function runs.
async fn start_sleeper(bed: &Bed) -> tokio::task::JoinHandle<Result<(), tonic::Status>> {
    let mut client = bed.runner.client().await;
    let sleeper = tokio::spawn(async move {
        let mut call =
            tonic::Request::new(request("example.com/test/sleepy:v1", config_map_rl("a")));
        call.set_timeout(Duration::from_secs(60));
        client.evaluate_function(call).await.map(drop)
    });
    sleeper_tree(bed).await;
    sleeper
}

#[tokio::test(flavor = "multi_thread")]
async fn a_sleeping_function_holds_back_the_start_limit_only_for_its_grace_period() {
    let bed = bed(&["--function-start-limit=1", "--function-start-grace=200ms"]);
    let sleeper = start_sleeper(&bed).await;
    let mut call = tonic::Request::new(request(
        &catalog_image("set-namespace"),
        with_config(
            DEPLOYMENT,
            "  apiVersion: v1\n  kind: ConfigMap\n  metadata:\n    name: fn\n  data:\n    namespace: after-the-sleeper\n",
        ),
    ));
    call.set_timeout(Duration::from_secs(20));
    let out = bed
        .runner
        .client()
        .await
        .evaluate_function(call)
        .await
        .expect("the call after a sleeping function ran")
        .into_inner();
    assert!(String::from_utf8_lossy(&out.resource_list).contains("namespace: after-the-sleeper"));
    assert!(!sleeper.is_finished(), "the sleeping function ended first");
    sleeper.abort();
}

#[tokio::test(flavor = "multi_thread")]
async fn waiting_for_the_start_limit_counts_against_the_deadline() {
    let bed = bed(&["--function-start-limit=1", "--function-start-grace=1h"]);
    let sleeper = start_sleeper(&bed).await;
    let call = request(&catalog_image("set-namespace"), config_map_rl("b"));
    let err = deadline_exceeded(
        &bed,
        call,
        Duration::from_millis(500),
        Duration::from_secs(10),
    )
    .await;
    // The runner's own deadline error, not only the client's.
    assert!(err.message().contains("did not finish"), "{err:?}");
    assert!(!sleeper.is_finished());
    sleeper.abort();
    assert_serving(&bed.runner).await;
}

/// `--builtin-functions`: apply-setters runs in process before exec — the
/// response keeps the items' comments and is the one the catalog binary
/// gives (same items, same results) — and without the flag nothing is
/// served in process (exec off: NotFound).
#[tokio::test(flavor = "multi_thread")]
async fn builtin_functions_flag_serves_apply_setters_and_apply_replacements_in_process() {
    let rl = with_config(
        "- apiVersion: v1\n  kind: ConfigMap\n  metadata:\n    name: cm # kpt-set: ${name}\n  data:\n    image: \"nginx:1.1\" # kpt-set: nginx:${tag}\n    keep: x # an ordinary comment\n",
        "  apiVersion: v1\n  kind: ConfigMap\n  metadata:\n    name: fn\n  data:\n    name: web\n    tag: \"1.2\"\n",
    );
    // No function configured for exec: only the builtin tier can serve it.
    let dir = tempfile::tempdir().unwrap();
    let empty = dir.path().join("config.yaml");
    std::fs::write(&empty, "functions: []\n").unwrap();
    let empty = empty.to_str().unwrap();
    let builtin = Runner::start(&[
        "--config",
        empty,
        "--disable-runtimes=pod",
        "--builtin-functions",
    ]);
    let out = builtin
        .client()
        .await
        .evaluate_function(request(&catalog_image("apply-setters"), rl.clone()))
        .await
        .unwrap()
        .into_inner();
    let text = String::from_utf8(out.resource_list.to_vec()).unwrap();
    assert!(text.contains("name: web # kpt-set: ${name}"), "{text}");
    assert!(
        text.contains("image: \"nginx:1.2\" # kpt-set: nginx:${tag}"),
        "{text}"
    );
    assert!(text.contains("keep: x # an ordinary comment"), "{text}");
    let ours = ResourceList::parse(&out.resource_list).unwrap();
    let bed = bed(&[]);
    let go = bed
        .runner
        .client()
        .await
        .evaluate_function(request(&catalog_image("apply-setters"), rl.clone()))
        .await
        .unwrap()
        .into_inner();
    let go = ResourceList::parse(&go.resource_list).unwrap();
    assert_eq!(ours.items, go.items);
    assert_eq!(ours.results, go.results);
    // apply-replacements as well: the items sorted as the Go function
    // sorts them, the target's quoting and comment kept.
    let replacements = with_config(
        "- apiVersion: v1\n  kind: Service\n  metadata:\n    name: web\n  spec:\n    selector:\n      app: \"old\" # set from the ConfigMap\n- apiVersion: v1\n  kind: ConfigMap\n  metadata:\n    name: settings\n  data:\n    app: shop\n",
        "  apiVersion: fn.kpt.dev/v1alpha1\n  kind: ApplyReplacements\n  metadata:\n    name: r\n  replacements:\n  - source:\n      kind: ConfigMap\n      fieldPath: data.app\n    targets:\n    - select:\n        kind: Service\n      fieldPaths:\n      - spec.selector.app\n",
    );
    let out = builtin
        .client()
        .await
        .evaluate_function(request(
            &catalog_image("apply-replacements"),
            replacements.clone(),
        ))
        .await
        .unwrap()
        .into_inner();
    let text = String::from_utf8(out.resource_list.to_vec()).unwrap();
    assert!(
        text.contains("app: \"shop\" # set from the ConfigMap"),
        "{text}"
    );
    let ours = ResourceList::parse(&out.resource_list).unwrap();
    let go = bed
        .runner
        .client()
        .await
        .evaluate_function(request(&catalog_image("apply-replacements"), replacements))
        .await
        .unwrap()
        .into_inner();
    let go = ResourceList::parse(&go.resource_list).unwrap();
    assert_eq!(ours.items, go.items);
    assert_eq!(ours.results, go.results);
    let off = Runner::start(&["--config", empty, "--disable-runtimes=pod"]);
    let err = off
        .client()
        .await
        .evaluate_function(request(&catalog_image("apply-setters"), rl))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::NotFound, "{err:?}");
}
