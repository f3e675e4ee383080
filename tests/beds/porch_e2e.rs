//! Porch renders through us, end to end: porch-server v1.5.3 in standalone
//! mode on the real kube-apiserver + etcd, with a git repository
//! (`file://`), renders package revisions whose Kptfile pipelines use
//! catalog functions it does not run in-process (apply-setters and starlark
//! v0.5.5) through `krm-fn-runner serve` — the exec runtime with the catalog
//! binaries, and the pod runtime on the test kubelet — driven by `porchctl`
//! and the `porch.kpt.dev` API as a Porch user would.
//!
//! Where the question is what a Porch user sees, Porch's own Go function
//! runner v1.5.3 (built the same way) takes the same turn on the same port
//! behind the same porch-server, and both answers are compared.
//!
//! And porch-server itself keeps rendering, without a failed render, while
//! its one connection to the runner is aged across three replicas behind a
//! stand-in Service (`testbed/src/service_support.rs`).
//!
//! Needs `scripts/build-porch.sh` (porch-server, porchctl and Porch's
//! function runner, cached per machine), the catalog functions and the
//! kube-apiserver build; `scripts/test.sh` provides all three.

use krm_fn_testbed::common;
use krm_fn_testbed::k8s_support;
use krm_fn_testbed::kubelet;
use krm_fn_testbed::otel_support;
use krm_fn_testbed::porch_support;
use krm_fn_testbed::registry_support;
use krm_fn_testbed::service_support;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use porch_support::{
    FunctionRunner, Peer, PorchBed, Porchctl, deployments, documents, image, kptfile,
    setters_and_starlark_pipeline,
};
use serde_json::Value;

/// The package's files: the success pipeline and `count` Deployments.
fn app_package(name: &str, count: usize) -> BTreeMap<String, String> {
    let mut files = setters_and_starlark_pipeline(name);
    let (path, text) = deployments(count);
    files.insert(path, text);
    files
}

/// Asserts the Deployments of `files` are rendered as the success pipeline says.
fn assert_rendered(files: &BTreeMap<String, String>, count: usize) {
    let docs = documents(&files["deployments.yaml"]);
    assert_eq!(docs.len(), count, "{}", files["deployments.yaml"]);
    for (i, d) in docs.iter().enumerate() {
        assert_eq!(
            d["metadata"]["name"],
            format!("web-{i:02}"),
            "apply-setters set the name: {d}"
        );
        assert_eq!(
            d["spec"]["replicas"], 3,
            "apply-setters set the replicas: {d}"
        );
        assert_eq!(d["metadata"]["labels"]["tier"], "frontend", "{d}");
        assert_eq!(
            d["metadata"]["labels"]["rendered-by"], "starlark",
            "the starlark mutator labelled it: {d}"
        );
    }
    assert!(
        files["deployments.yaml"].contains("# kpt-set: ${app}-00"),
        "setter comments are kept: {}",
        files["deployments.yaml"]
    );
}

/// The render status of a PackageRevisionResources update answer.
fn render_status(prr: &kube::api::DynamicObject) -> Value {
    prr.data["status"]["renderStatus"].clone()
}

#[tokio::test(flavor = "multi_thread")]
async fn porch_renders_through_us_then_proposes_and_approves() {
    let bed = PorchBed::start(Some((Peer::Ours, &[])), &[]).await;

    let name = bed.init("app", "v1").await;
    let files = app_package("app", 2);
    let push = bed.edit_and_push(&name, &files).await;
    assert!(
        push.ok,
        "porchctl rpkg push failed: {push:?}\n{}",
        bed.porch.log_tail(30)
    );
    // porchctl prints (on stderr) the render status porch-server answered
    // with, including apply-setters' structured results.
    for f in ["apply-setters", "starlark"] {
        assert!(
            push.stderr.contains(&format!("[PASS] \"{}\"", image(f))),
            "{f} passed: {push:?}"
        );
    }
    assert!(
        push.stderr
            .contains("[info] metadata.name: set field value to \"web-00\""),
        "{push:?}"
    );
    assert!(!push.stderr.contains("[FAIL]"), "{push:?}");
    assert!(push.stdout.contains(&format!("{name} pushed")), "{push:?}");

    // The package's resources changed as the functions say.
    let rendered = bed.resources(&name).await;
    assert_rendered(&rendered, 2);

    // The same update through the API: a clean render status, every
    // function with exit code 0 and no error.
    let answer = bed
        .update_resources(&name, &rendered)
        .await
        .expect("update the resources");
    let status = render_status(&answer);
    assert_eq!(status["error"].as_str().unwrap_or(""), "", "{status}");
    let items = status["result"]["items"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let images: Vec<&str> = items.iter().filter_map(|i| i["image"].as_str()).collect();
    assert_eq!(
        images,
        [image("apply-setters"), image("starlark")],
        "{status}"
    );
    assert!(items.iter().all(|i| i["exitCode"] == 0), "{status}");

    // Both functions went through our runner (porch-server runs neither
    // in-process: its builtin starlark is v0.4).
    let log = bed.runner.as_ref().unwrap().log();
    for f in ["apply-setters", "starlark"] {
        assert!(
            log.lines()
                .any(|l| l.contains(&image(f)) && l.contains("evaluation succeeded")),
            "{f} was evaluated by krm-fn-runner:\n{log}"
        );
    }

    // Propose and approve: published, and committed to main in git.
    let out = bed.porchctl(&["rpkg", "propose", &name]).await;
    assert!(out.ok && out.stdout.contains("proposed"), "{out:?}");
    assert_eq!(bed.lifecycle(&name).await, "Proposed");
    let out = bed.porchctl(&["rpkg", "approve", &name]).await;
    assert!(out.ok && out.stdout.contains("approved"), "{out:?}");
    assert_eq!(bed.lifecycle(&name).await, "Published");
    let on_main = bed
        .git
        .show("main", "app/deployments.yaml")
        .expect("the package is on main");
    assert!(on_main.contains("name: web-01"), "{on_main}");
    assert!(
        bed.git.refs().iter().any(|r| r == "refs/tags/app/v1"),
        "{:?}",
        bed.git.refs()
    );
}

/// What the Porch user saw in one failure scenario, through each runner.
#[derive(Debug, Default)]
struct Seen {
    /// `porchctl rpkg push` (exit status, stdout and stderr).
    porchctl: String,
    /// The API error message of the same update.
    api: String,
}

/// Pushes `files` to a fresh draft and returns what porchctl and the API said.
async fn failing_push(bed: &PorchBed, package: &str, files: &BTreeMap<String, String>) -> Seen {
    let name = bed.init(package, "v1").await;
    let push: Porchctl = bed.edit_and_push(&name, files).await;
    assert!(!push.ok, "the push was expected to fail: {push:?}");
    let api = bed
        .update_resources(&name, files)
        .await
        .expect_err("the update was expected to fail");
    let api = match api {
        kube::Error::Api(s) => format!("HTTP {} {}: {}", s.code, s.reason, s.message),
        other => panic!("porch-server did not answer with an API error: {other}"),
    };
    // Names differ per draft; the rest must not.
    Seen {
        porchctl: format!("{}{}", push.stdout, push.stderr).replace(&name, "<draft>"),
        api: api.replace(&name, "<draft>"),
    }
}

/// A validator that fails: replicas above 5 are refused by a starlark check.
fn failing_validator_package(package: &str) -> BTreeMap<String, String> {
    let validators = format!(
        "  - image: {}\n    configPath: check-replicas.yaml\n",
        image("starlark")
    );
    let mut files = BTreeMap::new();
    files.insert("Kptfile".into(), kptfile(package, "", &validators));
    files.insert(
        "check-replicas.yaml".into(),
        "apiVersion: fn.kpt.dev/v1alpha1\nkind: StarlarkRun\nmetadata:\n  name: check-replicas\n  annotations:\n    config.kubernetes.io/local-config: \"true\"\nsource: |\n  for r in ctx.resource_list[\"items\"]:\n    if r[\"kind\"] == \"Deployment\" and r[\"spec\"][\"replicas\"] > 5:\n      fail(\"deployment \" + r[\"metadata\"][\"name\"] + \" has \" + str(r[\"spec\"][\"replicas\"]) + \" replicas, more than 5\")\n".into(),
    );
    files.insert(
        "deployment.yaml".into(),
        "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: big\nspec:\n  replicas: 9\n"
            .into(),
    );
    files
}

/// A function the runner does not have (set-labels is not installed).
fn missing_function_package(package: &str) -> BTreeMap<String, String> {
    let mutators = "  - image: ghcr.io/kptdev/krm-functions-catalog/set-labels:v0.2.2\n    configMap:\n      team: porch\n";
    let mut files = BTreeMap::new();
    files.insert("Kptfile".into(), kptfile(package, mutators, ""));
    files.insert(
        "cm.yaml".into(),
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cm\ndata:\n  k: v\n".into(),
    );
    files
}

/// Runner limit for the size scenario: 1 MiB (porch-server keeps its 6 MiB).
const SMALL_LIMIT: usize = 1 << 20;

/// A package whose ResourceList is about 1.5 MiB, through apply-setters.
fn oversize_package(package: &str) -> BTreeMap<String, String> {
    let mutators = format!(
        "  - image: {}\n    configMap:\n      team: porch\n",
        image("apply-setters")
    );
    let mut files = BTreeMap::new();
    files.insert("Kptfile".into(), kptfile(package, &mutators, ""));
    let mut big = String::from("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: big\ndata:\n");
    for i in 0..1536 {
        big.push_str(&format!("  k{i:04}: {}\n", "x".repeat(1000)));
    }
    files.insert("big.yaml".into(), big);
    files
}

#[tokio::test(flavor = "multi_thread")]
async fn failures_reach_the_porch_user_as_with_porchs_runner() {
    let mut bed = PorchBed::start(None, &[]).await;
    let starlark = image("starlark");
    let mut seen: BTreeMap<(&str, Peer), Seen> = BTreeMap::new();
    for peer in [Peer::Ours, Peer::Porch] {
        let tag = peer_tag(peer);
        bed.switch_runner(peer, &[]);
        seen.insert(
            ("function fails", peer),
            failing_push(
                &bed,
                &format!("fails-{tag}"),
                &failing_validator_package("fails"),
            )
            .await,
        );
        seen.insert(
            ("function missing", peer),
            failing_push(
                &bed,
                &format!("missing-{tag}"),
                &missing_function_package("missing"),
            )
            .await,
        );
        bed.switch_runner(peer, &[&format!("--max-request-body-size={SMALL_LIMIT}")]);
        seen.insert(
            ("request too large", peer),
            failing_push(&bed, &format!("large-{tag}"), &oversize_package("large")).await,
        );
    }
    for ((scenario, peer), s) in &seen {
        eprintln!(
            "=== {scenario}, through {}:\n--- porchctl rpkg push:\n{}\n--- API:\n{}\n",
            peer.name(),
            s.porchctl,
            s.api
        );
    }
    let get = |scenario, peer| &seen[&(scenario, peer)];

    // A failing function: porch-server reports it as a render failure and
    // does not push. Both runners give Porch's wording with the function's
    // stderr; ours adds the structured results, which Porch's runner drops.
    let failure = format!(
        "func eval \"{starlark}\" failed: rpc error: code = Internal desc = Failed to execute function \"{starlark}\": exit status 1 (failed to evaluate function: error: function failure)"
    );
    for peer in [Peer::Ours, Peer::Porch] {
        let s = get("function fails", peer);
        assert!(s.api.starts_with("HTTP 500 InternalError"), "{s:?}");
        assert!(
            s.api.contains("Package has NOT been pushed to remote."),
            "{s:?}"
        );
        assert!(s.api.contains(&failure), "{}: {s:?}", peer.name());
        assert!(
            s.porchctl
                .contains("exit status 1 (failed to evaluate function: error: function failure)"),
            "{s:?}"
        );
    }
    let results = "[error]: fail: deployment big has 9 replicas, more than 5";
    assert!(get("function fails", Peer::Ours).api.contains(results));
    assert!(get("function fails", Peer::Ours).porchctl.contains(results));
    assert!(
        !get("function fails", Peer::Porch)
            .api
            .contains("more than 5")
    );

    // A missing function: NOT_FOUND in the same words, so Porch shows the same.
    assert_eq!(
        get("function missing", Peer::Ours).api,
        get("function missing", Peer::Porch).api
    );
    assert!(
        get("function missing", Peer::Ours).api.contains(
            "rpc error: code = NotFound desc = function \"ghcr.io/kptdev/krm-functions-catalog/set-labels:v0.2.2\" not found"
        ),
        "{:?}",
        get("function missing", Peer::Ours)
    );

    // A request over the runner's limit: RESOURCE_EXHAUSTED from both.
    for peer in [Peer::Ours, Peer::Porch] {
        let s = get("request too large", peer);
        assert!(
            s.api.contains("code = ResourceExhausted"),
            "{}: {s:?}",
            peer.name()
        );
    }
    // Both name the request's size; ours also names the flag to raise.
    let porch = &get("request too large", Peer::Porch).api;
    let size = porch
        .split("grpc: received message larger than max (")
        .nth(1)
        .and_then(|r| r.split(" vs. ").next())
        .unwrap_or_else(|| panic!("{porch}"));
    let ours = &get("request too large", Peer::Ours).api;
    assert!(
        ours.contains(&format!(
            "the request is {size} bytes, over the limit of {SMALL_LIMIT} bytes; raise --max-request-body-size"
        )),
        "{ours}"
    );
}

/// A starlark mutator that spins (a second or more on a loaded machine)
/// before labelling every item `slow: done`.
fn slow_package(package: &str) -> BTreeMap<String, String> {
    let mutators = format!(
        "  - image: {}\n    configPath: slow.yaml\n",
        image("starlark")
    );
    let mut files = BTreeMap::new();
    files.insert("Kptfile".into(), kptfile(package, &mutators, ""));
    files.insert(
        "slow.yaml".into(),
        "apiVersion: fn.kpt.dev/v1alpha1\nkind: StarlarkRun\nmetadata:\n  name: slow\n  annotations:\n    config.kubernetes.io/local-config: \"true\"\nsource: |\n  def spin():\n    n = 0\n    for i in range(20000000):\n      n += i\n    return n\n  spin()\n  for r in ctx.resource_list[\"items\"]:\n    r[\"metadata\"].setdefault(\"labels\", {})[\"slow\"] = \"done\"\n".into(),
    );
    files.insert(
        "cm.yaml".into(),
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cm\ndata:\n  k: v\n".into(),
    );
    files
}

#[tokio::test(flavor = "multi_thread")]
async fn runner_restarted_mid_session() {
    let mut bed = PorchBed::start(None, &[]).await;
    let mut in_flight: BTreeMap<Peer, String> = BTreeMap::new();
    for peer in [Peer::Ours, Peer::Porch] {
        // Our grace period well above the slow function's run time, which
        // on a loaded 2-core machine has reached the default 25 s.
        let extra: &[&str] = match peer {
            Peer::Ours => &["--shutdown-grace-period=120s"],
            Peer::Porch => &[],
        };
        bed.switch_runner(peer, extra);
        let name = bed.init(&format!("slow-{}", peer_tag(peer)), "v1").await;
        // A rolling update: SIGTERM while a render is in flight.
        let files = slow_package("slow");
        let push = {
            let bed = &bed;
            let name = name.clone();
            let files = files.clone();
            async move { bed.update_resources(&name, &files).await }
        };
        let terminate = async {
            // Until the function is running.
            let started = Instant::now();
            let runner = bed.runner.as_ref().unwrap().pid();
            while !function_running_under(runner, "starlark") {
                assert!(
                    started.elapsed() < Duration::from_secs(30),
                    "starlark never started"
                );
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            bed.runner.as_ref().unwrap().sigterm();
        };
        let (answer, ()) = tokio::join!(push, terminate);
        let outcome = match answer {
            Ok(prr) => {
                let files: BTreeMap<String, String> =
                    serde_json::from_value(prr.data["spec"]["resources"].clone()).unwrap();
                assert!(files["cm.yaml"].contains("slow: done"), "{files:?}");
                "rendered".to_string()
            }
            Err(kube::Error::Api(s)) => s.message.replace(&name, "<draft>"),
            Err(e) => panic!("{e}"),
        };
        eprintln!(
            "=== SIGTERM during a render, through {}: {outcome}",
            peer.name()
        );
        in_flight.insert(peer, outcome);
        let runner = bed.runner.as_mut().unwrap();
        assert!(
            runner.wait_exit(Duration::from_secs(30)),
            "the runner exits after SIGTERM"
        );
        bed.runner = None;
    }
    // Ours lets the evaluation in flight finish before it exits (its grace
    // period); Porch's runner stops at once and the render fails.
    assert_eq!(in_flight[&Peer::Ours], "rendered");
    assert!(
        in_flight[&Peer::Porch].contains("code = Unavailable"),
        "{:?}",
        in_flight[&Peer::Porch]
    );

    // While no runner listens: a clear connection error.
    let name = bed.init("restart", "v1").await;
    let files = app_package("restart", 1);
    let down = match bed.update_resources(&name, &files).await {
        Err(kube::Error::Api(s)) => s.message.replace(&name, "<draft>"),
        other => panic!("a render without a runner must fail: {other:?}"),
    };
    eprintln!("=== no runner listening: {down}");
    assert!(down.contains("code = Unavailable"), "{down}");
    assert!(down.contains("connection refused"), "{down}");

    // Back on the same port: porch-server's connection recovers by itself.
    bed.runner = Some(FunctionRunner::start_exec(Peer::Ours, bed.runner_port, &[]));
    let restarted = Instant::now();
    let mut failures = 0;
    loop {
        match bed.update_resources(&name, &files).await {
            Ok(_) => break,
            Err(e) => {
                failures += 1;
                assert!(
                    restarted.elapsed() < Duration::from_secs(60),
                    "porch-server never rendered again: {e}"
                );
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    }
    eprintln!(
        "=== rendering again {:?} after the restart ({failures} failed attempts in between)",
        restarted.elapsed()
    );
    assert_rendered(&bed.resources(&name).await, 1);

    // A restart between renders (SIGTERM, a new process on the same port)
    // costs porch-server nothing: its next render goes through at once.
    let mut old = bed.runner.take().unwrap();
    old.sigterm();
    assert!(
        old.wait_exit(Duration::from_secs(30)),
        "the runner exits after SIGTERM"
    );
    bed.runner = Some(FunctionRunner::start_exec(Peer::Ours, bed.runner_port, &[]));
    bed.update_resources(&name, &files)
        .await
        .expect("the first render after a restart goes through");
}

fn peer_tag(peer: Peer) -> &'static str {
    match peer {
        Peer::Ours => "ours",
        Peer::Porch => "porch",
    }
}

/// True while the catalog binary `name` runs as a descendant of process
/// `ancestor` (other tests on the machine may run the same binary).
fn function_running_under(ancestor: u32, name: &str) -> bool {
    let bin = common::catalog_dir().join("bin").join(name);
    let parent = |pid: u32| -> Option<u32> {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        stat.rsplit(')')
            .next()?
            .split_whitespace()
            .nth(1)?
            .parse()
            .ok()
    };
    let descends = |mut pid: u32| {
        while pid > 1 {
            match parent(pid) {
                Some(p) if p == ancestor => return true,
                Some(p) => pid = p,
                None => return false,
            }
        }
        false
    };
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .any(|pid| {
            std::fs::read_link(format!("/proc/{pid}/exe")).is_ok_and(|exe| exe == bin)
                && descends(pid)
        })
}

#[tokio::test(flavor = "multi_thread")]
async fn porch_renders_through_our_pod_runtime() {
    use registry_support::{Setup, TestRegistry};
    let mut bed = PorchBed::start(None, &[]).await;
    let fn_ns = "porch-fn-system";
    k8s_support::create_namespace(&bed.core, fn_ns).await;
    let registry = TestRegistry::start(Setup::anonymous());
    let setters = registry.push_catalog_function("apply-setters").await;
    let starlark = registry.push_catalog_function("starlark").await;
    let map = bed.work.path().join("wrappers.map");
    let kubelet = kubelet::Kubelet::start(
        bed.core.clone(),
        fn_ns,
        common::catalog_dir().join("bin"),
        map.clone(),
    );
    let kubeconfig = format!("--kubeconfig={}", bed.plane.kubeconfig_file().display());
    let map_flag = format!("--wrapper-address-map={}", map.display());
    let registry_flag = format!("--plain-http-registry={}", registry.addr);
    let cache_config = format!(
        "--pod-cache-config={}",
        bed.work.path().join("absent.yaml").display()
    );
    bed.runner = Some(FunctionRunner::start(
        Peer::Ours,
        bed.runner_port,
        &[
            "--disable-runtimes=exec",
            &kubeconfig,
            "--pod-namespace",
            fn_ns,
            &map_flag,
            &registry_flag,
            &cache_config,
            "--warm-up-pod-cache=false",
        ],
        &[("WRAPPER_SERVER_IMAGE", "example.com/wrapper:test")],
    ));

    // The same package, its functions named by their images in the registry.
    let name = bed.init("pods", "v1").await;
    let mut files = app_package("pods", 2);
    let kptfile = files["Kptfile"]
        .replace(&image("apply-setters"), &setters)
        .replace(&image("starlark"), &starlark);
    files.insert("Kptfile".into(), kptfile);
    let push = bed.edit_and_push(&name, &files).await;
    assert!(
        push.ok,
        "porchctl rpkg push failed: {push:?}\n--- runner:\n{}\n--- porch:\n{}",
        bed.runner.as_ref().unwrap().log(),
        bed.porch.log_tail(30)
    );
    assert!(!push.stderr.contains("[FAIL]"), "{push:?}");
    assert_rendered(&bed.resources(&name).await, 2);
    // Each function ran in its own pod, through a wrapper server.
    let pods: kube::Api<k8s_openapi::api::core::v1::Pod> =
        kube::Api::namespaced(bed.core.clone(), fn_ns);
    let pods = pods.list(&Default::default()).await.unwrap().items;
    assert_eq!(pods.len(), 2, "one pod per function");
    assert_eq!(kubelet.started(), 2);
}

#[tokio::test(flavor = "multi_thread")]
async fn porch_server_renders_without_a_failure_while_its_connection_is_aged_across_three_replicas()
{
    // porch-server dials the stand-in Service on the runner port; three
    // replicas (exec runtime, the catalog functions) age connections at 1 s.
    let bed = PorchBed::start(None, &[]).await;
    let service = service_support::Balancer::start_on(bed.runner_port).await;
    let metrics = [
        ("OTEL_METRICS_EXPORTER", "prometheus"),
        ("OTEL_EXPORTER_PROMETHEUS_HOST", "127.0.0.1"),
        ("OTEL_EXPORTER_PROMETHEUS_PORT", "0"),
    ];
    let age = ["--max-connection-age=1s", "--max-connection-age-grace=10s"];
    let replicas: Vec<FunctionRunner> = (0..3)
        .map(|_| {
            FunctionRunner::start_exec_with_env(Peer::Ours, common::free_port(), &age, &metrics)
        })
        .collect();
    let runners: Vec<&common::Runner> = replicas
        .iter()
        .map(|r| match r {
            FunctionRunner::Ours(r) => r,
            FunctionRunner::Porch(_) => unreachable!(),
        })
        .collect();
    for (i, r) in runners.iter().enumerate() {
        service.add(&format!("r{}", i + 1), &r.address);
    }

    // Renders one after the other for 8 ages, the package's content
    // changing each time (two Deployments, then three).
    let name = bed.init("aged", "v1").await;
    let started = Instant::now();
    let (mut renders, mut failed) = (0, Vec::new());
    while started.elapsed() < Duration::from_secs(8) {
        let count = 2 + renders % 2;
        match bed
            .update_resources(&name, &app_package("aged", count))
            .await
        {
            Ok(answer) => {
                let status = render_status(&answer);
                if !status["error"].as_str().unwrap_or("").is_empty() {
                    failed.push(status.to_string());
                }
            }
            Err(e) => failed.push(e.to_string()),
        }
        renders += 1;
    }
    assert_rendered(&bed.resources(&name).await, 2 + (renders - 1) % 2);

    let counts: Vec<(f64, f64)> = runners
        .iter()
        .map(|r| {
            let scrape = otel_support::Scrape::take(&otel_support::metrics_url(r));
            let sum = |name: &str, labels: &[(&str, &str)]| -> f64 {
                scrape.samples(name, labels).iter().map(|s| s.value).sum()
            };
            (
                sum("krm_fn_runner_evaluations_total", &[]),
                sum("krm_fn_runner_connections_aged_total", &[]),
            )
        })
        .collect();
    let calls: f64 = counts.iter().map(|c| c.0).sum();
    let goaways: f64 = counts.iter().map(|c| c.1).sum();
    let connections = service.forwarded().len();
    eprintln!(
        "porch-server over three aged replicas: {renders} renders, {} failed, {calls} calls \
         ({}), {goaways} GOAWAYs, {connections} connections",
        failed.len(),
        counts
            .iter()
            .map(|c| format!("{} ({:.0}%)", c.0, 100.0 * c.0 / calls))
            .collect::<Vec<_>>()
            .join(" / ")
    );
    assert!(failed.is_empty(), "failed renders: {failed:?}");
    // Each render is two calls (apply-setters, starlark).
    assert_eq!(calls, 2.0 * renders as f64);
    assert!(goaways >= 5.0, "{goaways} GOAWAYs in 8 ages");
    assert!(
        connections as f64 >= goaways,
        "porch-server reconnected through the Service after each GOAWAY: \
         {connections} connections"
    );
    for (i, (served, _)) in counts.iter().enumerate() {
        assert!(
            served / calls >= 0.2,
            "replica {} served {served} of {calls} calls",
            i + 1
        );
    }
}
