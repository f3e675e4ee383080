//! The pod evaluator end to end on the test bed: the real `krm-fn-runner
//! serve` with the pod runtime, a real kube-apiserver and etcd, a real OCI
//! registry holding the function images' metadata, and the test kubelet
//! running the real `wrapper-server` with the real catalog functions.
//!
//! Each scenario runs on its own control plane and ends by waiting for the
//! runner's GC to remove every pod and service it made, then checks that no
//! wrapper process is left.

use krm_fn_testbed::common;
use krm_fn_testbed::k8s_support;
use krm_fn_testbed::kubelet;
use krm_fn_testbed::otel_support;
use krm_fn_testbed::registry_support;

use std::collections::HashSet;
use std::future::Future;
use std::time::{Duration, Instant};

use common::{
    NOT_SERVING, Runner, SERVING, call, catalog_dir, catalog_version, eventually, health, output,
    set_namespace_rl,
};
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret, Service};
use k8s_support::ControlPlane;
use krm_fn_runner::adapters::grpc::pb::EvaluateFunctionRequest;
use krm_fn_runner::domain::pod_cache::naming;
use kube::api::{DeleteParams, ListParams, PostParams};
use kube::{Api, Client};
use kubelet::{Kubelet, PATIENCE, Plan};
use otel_support::{Collector, Scrape, metrics_url, named, one, trace_ids};
use registry_support::{Setup, TestRegistry};
use tonic::Code;

const NS: &str = "porch-fn-system";
const FUNCTIONS: [&str; 2] = ["set-namespace", "starlark"];

/// The whole bed; fields drop in order: wrappers first, the API server last.
struct Bed {
    kubelet: Kubelet,
    registry: TestRegistry,
    client: Client,
    plane: ControlPlane,
    dir: tempfile::TempDir,
}

/// A ResourceList on which starlark spins for a while (about a second or
/// more on a debug CI machine).
fn slow_starlark_rl() -> Vec<u8> {
    "apiVersion: config.kubernetes.io/v1\nkind: ResourceList\nitems: []\nfunctionConfig:\n  apiVersion: fn.kpt.dev/v1alpha1\n  kind: StarlarkRun\n  metadata:\n    name: slow\n  source: |\n    def spin():\n      n = 0\n      for i in range(30000000):\n        n += i\n      return n\n    spin()\n"
        .as_bytes()
        .to_vec()
}

impl Bed {
    async fn start() -> Bed {
        let plane = ControlPlane::start().await;
        let client = plane.client().await.expect("client");
        k8s_support::create_namespace(&client, NS).await;
        k8s_support::create_namespace(&client, "porch-system").await;
        let registry = TestRegistry::start(Setup::anonymous());
        for f in FUNCTIONS {
            registry.push_catalog_function(f).await;
        }
        let dir = tempfile::tempdir().unwrap();
        let kubelet = Kubelet::start(
            client.clone(),
            NS,
            catalog_dir().join("bin"),
            dir.path().join("wrappers.map"),
        );
        Bed {
            kubelet,
            registry,
            client,
            plane,
            dir,
        }
    }

    /// The image of catalog function `f` in the test registry.
    fn image(&self, f: &str) -> String {
        format!("{}/{f}:{}", self.registry.addr, catalog_version(f))
    }

    /// Starts `serve` with the pod runtime only, short TTL (3 s) and scan
    /// interval (1 s), plus `extra` flags (replacing the defaults they name).
    fn runner(&self, extra: &[&str]) -> Runner {
        self.runner_with_env(extra, &[])
    }

    /// As [`Bed::runner`], with extra environment variables.
    fn runner_with_env(&self, extra: &[&str], env: &[(&str, &str)]) -> Runner {
        let kubeconfig = format!("--kubeconfig={}", self.plane.kubeconfig_file().display());
        let map = format!(
            "--wrapper-address-map={}",
            self.dir.path().join("wrappers.map").display()
        );
        let registry = format!("--plain-http-registry={}", self.registry.addr);
        let cache_config = format!(
            "--pod-cache-config={}",
            self.dir.path().join("absent.yaml").display()
        );
        let mut args = vec![
            "--disable-runtimes=exec",
            &kubeconfig,
            "--pod-namespace",
            NS,
            &map,
            &registry,
            &cache_config,
            "--warm-up-pod-cache=false",
            "--pod-ttl=3s",
            "--scan-interval=1s",
            "--log-level=3",
        ];
        let flag = |a: &str| a.split('=').next().unwrap_or(a).to_string();
        args.retain(|a| {
            !extra
                .iter()
                .any(|e| a.starts_with("--") && flag(e) == flag(a))
        });
        args.extend_from_slice(extra);
        let mut all = vec![("WRAPPER_SERVER_IMAGE", "example.com/wrapper:test")];
        all.extend_from_slice(env);
        Runner::start_with_env(&args, &all)
    }

    async fn pods(&self) -> Vec<Pod> {
        Api::<Pod>::namespaced(self.client.clone(), NS)
            .list(&ListParams::default())
            .await
            .expect("list pods")
            .items
    }

    async fn pod_names(&self) -> Vec<String> {
        let mut names: Vec<String> = self
            .pods()
            .await
            .into_iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none())
            .filter_map(|p| p.metadata.name)
            .collect();
        names.sort();
        names
    }

    async fn services(&self) -> Vec<String> {
        Api::<Service>::namespaced(self.client.clone(), NS)
            .list(&ListParams::default())
            .await
            .expect("list services")
            .items
            .into_iter()
            .filter_map(|s| s.metadata.name)
            .collect()
    }

    /// Waits until the namespace has no pods and no services left (GC), then
    /// checks that no wrapper process is running.
    async fn assert_clean(&self, runner: &Runner) {
        self.assert_clean_within(runner, PATIENCE).await;
    }

    /// As [`Bed::assert_clean`], waiting up to `within` for GC (pods live
    /// 1.5 TTL after their last use).
    async fn assert_clean_within(&self, runner: &Runner, within: Duration) {
        eventually("GC to remove every pod and service", within, || async {
            (self.pods().await.is_empty() && self.services().await.is_empty()).then_some(())
        })
        .await;
        eventually("every wrapper process to stop", PATIENCE, || async {
            (self.kubelet.processes() == 0).then_some(())
        })
        .await;
        let _ = runner;
    }
}

fn annotation(pod: &Pod, key: &str) -> Option<String> {
    pod.metadata.annotations.as_ref()?.get(key).cloned()
}

#[tokio::test(flavor = "multi_thread")]
async fn cold_start_then_reuse() {
    let bed = Bed::start().await;
    let runner = bed.runner(&["--pod-ttl=4s"]);
    let image = bed.image("set-namespace");

    let started = Instant::now();
    let first = call(&runner, &image, set_namespace_rl("cold")).await;
    let cold = started.elapsed();
    let first = first.unwrap_or_else(|e| panic!("{e}\n{}", runner.log()));
    assert!(
        output(&first).contains("namespace: cold"),
        "{}",
        output(&first)
    );
    let pods = bed.pod_names().await;
    assert_eq!(pods.len(), 1, "{pods:?}");
    assert_eq!(bed.services().await, pods, "one service named like its pod");
    let pod = &bed.pods().await[0];
    let reclaim: u64 = annotation(pod, "fn.kpt.dev/reclaim-after")
        .expect("reclaim-after")
        .parse()
        .unwrap();
    assert_eq!(
        annotation(pod, "fn.kpt.dev/template-version").as_deref(),
        Some("inline-v1")
    );

    // Reuse later: same pod, nothing created, and the
    // reclaim-after moves forward in the background.
    // The API server is frozen during the call: the request path must not
    // need it.
    // Created at t0 with reclaim-after ceil(t0 + 6 s) ≤ t0 + 7 s; a use
    // after t0 + 3 s finds it less than a TTL (4 s) ahead and extends it.
    tokio::time::sleep(Duration::from_millis(3200)).await;
    let mut client = runner.client().await;
    bed.plane.pause_apiserver();
    let started = Instant::now();
    let second = tokio::time::timeout(
        Duration::from_secs(5),
        client.evaluate_function(EvaluateFunctionRequest {
            tag: String::new(),
            resource_list: set_namespace_rl("warm").into(),
            image: image.clone(),
        }),
    )
    .await;
    let warm = started.elapsed();
    bed.plane.resume_apiserver();
    let second = second
        .expect("the warm call does not wait for the API server")
        .expect("warm call")
        .into_inner();
    assert!(output(&second).contains("namespace: warm"));
    assert_eq!(bed.pod_names().await, pods, "second call created nothing");
    assert_eq!(bed.kubelet.started(), 1);
    eprintln!("cold call {cold:?}, warm call {warm:?}");
    let extended = eventually("reclaim-after to be extended", PATIENCE, || async {
        let pod = bed.pods().await.into_iter().next()?;
        let r: u64 = annotation(&pod, "fn.kpt.dev/reclaim-after")?.parse().ok()?;
        (r > reclaim).then_some(r)
    })
    .await;
    assert!(extended > reclaim);

    bed.assert_clean(&runner).await;
}

/// A ResourceList of about 5 MiB (under the default 6 MiB limit, several
/// times the HTTP/2 flow-control windows on both connections) goes to the
/// pod and back whole, and the pod keeps serving small calls after it.
#[tokio::test(flavor = "multi_thread")]
async fn a_five_mib_resource_list_goes_through_the_pod_and_back() {
    let bed = Bed::start().await;
    let runner = bed.runner(&[]);
    let image = bed.image("set-namespace");
    let mut rl = String::from(
        "apiVersion: config.kubernetes.io/v1\nkind: ResourceList\nitems:\n- apiVersion: v1\n  kind: ConfigMap\n  metadata:\n    name: big\n  data:\n",
    );
    for i in 0..5200 {
        rl.push_str(&format!("    k{i:05}: {}\n", "x".repeat(1000)));
    }
    rl.push_str("functionConfig:\n  apiVersion: v1\n  kind: ConfigMap\n  metadata:\n    name: fn\n  data:\n    namespace: big\n");
    assert!(rl.len() > 5 << 20 && rl.len() < 6 << 20, "{}", rl.len());
    let big = call(&runner, &image, rl.into_bytes())
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", runner.log()));
    let out = output(&big);
    assert!(
        out.contains("namespace: big"),
        "{}",
        &out[..out.len().min(500)]
    );
    assert_eq!(out.matches(&"x".repeat(1000)).count(), 5200);
    assert!(out.contains("k05199: "));
    let small = call(&runner, &image, set_namespace_rl("after"))
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", runner.log()));
    assert!(output(&small).contains("namespace: after"));
    assert_eq!(bed.kubelet.started(), 1, "both calls ran on one pod");
    bed.assert_clean(&runner).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn failed_pods_are_replaced_and_never_served() {
    let bed = Bed::start().await;
    let runner = bed.runner(&[]);
    let image = bed.image("set-namespace");

    // A pod that fails while starting: its waiter gets a clear error.
    bed.kubelet.plan("set-namespace", Plan::Fail);
    let err = call(&runner, &image, set_namespace_rl("a"))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::Unavailable, "{err:?}");
    assert!(
        err.message()
            .contains("unable to get the grpc client to the pod"),
        "{err:?}"
    );
    assert!(err.message().contains("Failed"), "{err:?}");
    // The next call gets a fresh pod.
    let ok = call(&runner, &image, set_namespace_rl("b")).await.unwrap();
    assert!(output(&ok).contains("namespace: b"));
    assert_eq!(bed.kubelet.started(), 1);

    // A serving pod that fails is evicted and deleted; the next call runs
    // on a new pod.
    let serving = bed.kubelet.running_pods();
    assert_eq!(serving.len(), 1);
    bed.kubelet.fail(&serving[0]).await;
    eventually("the failed pod to be deleted", PATIENCE, || async {
        (!bed.pod_names().await.contains(&serving[0])).then_some(())
    })
    .await;
    let ok = call(&runner, &image, set_namespace_rl("c")).await.unwrap();
    assert!(output(&ok).contains("namespace: c"));
    assert_eq!(bed.kubelet.started(), 2);
    assert!(!bed.kubelet.running_pods().contains(&serving[0]));

    bed.assert_clean(&runner).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn gc_deletes_expired_pods_and_services_only() {
    let bed = Bed::start().await;
    let runner = bed.runner(&["--pod-ttl=2s"]);
    // Things in the namespace that are not the runner's.
    let foreign_pod: Pod = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "not-a-function", "labels": {"app": "other"}},
        "spec": {"containers": [{"name": "c", "image": "example.com/other:v1"}]},
    }))
    .unwrap();
    let pods: Api<Pod> = Api::namespaced(bed.client.clone(), NS);
    pods.create(&PostParams::default(), &foreign_pod)
        .await
        .unwrap();
    let foreign_svc: Service = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "other-service"},
        "spec": {"ports": [{"port": 80}], "selector": {"app": "other"}},
    }))
    .unwrap();
    let services: Api<Service> = Api::namespaced(bed.client.clone(), NS);
    services
        .create(&PostParams::default(), &foreign_svc)
        .await
        .unwrap();
    // A function service whose pod is gone (a runner stopped between the two
    // deletions): GC deletes it too.
    let orphan: Service = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "set-namespace-v045-0-orphan-1"},
        "spec": {"ports": [{"port": 9446}], "selector": {"fn.kpt.dev/image": "set-namespace-v045-0-orphan-1"}},
    }))
    .unwrap();
    services
        .create(&PostParams::default(), &orphan)
        .await
        .unwrap();

    for f in FUNCTIONS {
        let rl = if f == "starlark" {
            noop_starlark_rl()
        } else {
            set_namespace_rl("gc")
        };
        call(&runner, &bed.image(f), rl)
            .await
            .unwrap_or_else(|e| panic!("{f}: {e}"));
    }
    assert_eq!(
        bed.pod_names().await.len(),
        3,
        "two function pods and the foreign one"
    );
    eventually(
        "GC to delete both function pods and services, and the orphaned service",
        PATIENCE,
        || async {
            let pods = bed.pod_names().await;
            let svcs = bed.services().await;
            (pods == ["not-a-function"] && svcs == ["other-service"]).then_some(())
        },
    )
    .await;
    // Still there a few scans later.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(bed.pod_names().await, ["not-a-function"]);
    assert_eq!(bed.services().await, ["other-service"]);

    pods.delete("not-a-function", &DeleteParams::default())
        .await
        .unwrap();
    services
        .delete("other-service", &DeleteParams::default())
        .await
        .unwrap();
    bed.assert_clean(&runner).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn burst_creates_as_many_pods_as_the_policy_allows() {
    let bed = Bed::start().await;
    let runner = bed.runner(&[
        "--max-parallel-pods-per-function=3",
        "--max-waitlist-length=2",
        "--pod-address-mode=pod-ip",
    ]);
    let image = bed.image("set-namespace");
    let mut calls = Vec::new();
    for i in 0..50 {
        let (runner, image) = (&runner, image.clone());
        calls.push(async move { call(runner, &image, set_namespace_rl(&format!("ns-{i}"))).await });
    }
    let results = futures_join_all(calls).await;
    for (i, r) in results.iter().enumerate() {
        let r = r
            .as_ref()
            .unwrap_or_else(|e| panic!("call {i}: {e}\n{}", runner.log()));
        assert!(output(r).contains(&format!("namespace: ns-{i}\n")));
    }
    let pods = bed.pod_names().await;
    assert_eq!(pods.len(), 3, "{pods:?}");
    assert_eq!(bed.kubelet.started(), 3);
    assert_eq!(pods.iter().collect::<HashSet<_>>().len(), 3);
    bed.assert_clean(&runner).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn full_pods_answer_resource_exhausted() {
    let bed = Bed::start().await;
    let runner = bed.runner(&["--max-parallel-pods-per-function=1", "--max-load-per-pod=4"]);
    let image = bed.image("starlark");
    let mut calls = Vec::new();
    for _ in 0..12 {
        let (runner, image) = (&runner, image.clone());
        calls.push(async move { call(runner, &image, slow_starlark_rl()).await });
    }
    let results = futures_join_all(calls).await;
    let ok = results.iter().filter(|r| r.is_ok()).count();
    let exhausted: Vec<&tonic::Status> = results
        .iter()
        .filter_map(|r| r.as_ref().err())
        .filter(|e| e.code() == Code::ResourceExhausted)
        .collect();
    assert_eq!(ok, 4, "{results:?}");
    assert_eq!(exhausted.len(), 8, "{results:?}");
    assert!(
        exhausted[0].message().contains("no capacity"),
        "{:?}",
        exhausted[0]
    );
    assert_eq!(bed.kubelet.started(), 1);
    bed.assert_clean(&runner).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_pod_deleted_behind_our_back_is_recreated() {
    let bed = Bed::start().await;
    let runner = bed.runner(&["--pod-address-mode=pod-ip"]);
    let image = bed.image("set-namespace");
    call(&runner, &image, set_namespace_rl("a")).await.unwrap();
    let first = bed.pod_names().await;
    assert_eq!(first.len(), 1);
    bed.kubelet.vanish(&first[0]).await;
    eventually("the pod to be gone", PATIENCE, || async {
        bed.pod_names().await.is_empty().then_some(())
    })
    .await;
    let ok = call(&runner, &image, set_namespace_rl("b")).await.unwrap();
    assert!(output(&ok).contains("namespace: b"));
    let second = bed.pod_names().await;
    assert_eq!(second.len(), 1);
    assert_ne!(second, first);
    assert_eq!(bed.kubelet.started(), 2);
    bed.assert_clean(&runner).await;
}

/// `call` with a W3C `traceparent` for trace `trace` (parent span `parent`).
async fn traced_call(
    runner: &Runner,
    image: &str,
    rl: Vec<u8>,
    (trace, parent): &(String, String),
) -> Result<krm_fn_runner::adapters::grpc::pb::EvaluateFunctionResponse, tonic::Status> {
    let mut request = tonic::Request::new(EvaluateFunctionRequest {
        tag: String::new(),
        resource_list: rl.into(),
        image: image.to_string(),
    });
    request.metadata_mut().insert(
        "traceparent",
        format!("00-{trace}-{parent}-01").parse().unwrap(),
    );
    runner
        .client()
        .await
        .evaluate_function(request)
        .await
        .map(|r| r.into_inner())
}

/// Scrapes `url` off the async runtime.
async fn scrape(url: &str) -> Scrape {
    let url = url.to_string();
    tokio::task::spawn_blocking(move || Scrape::take(&url))
        .await
        .unwrap()
}

/// Also the pod path's telemetry: while the stuck pod starts, the pod
/// gauges show it starting with the call waiting on it; afterwards the
/// phase histograms hold exactly the calls and pod starts made; the spans
/// of each call (sent to a real collector) nest pod.wait → pod.start and
/// function.run under the call's span, in the caller's trace; and the
/// wrapper server in the pod, configured by the pod template's OTEL
/// environment, serves /metrics and continues the trace under the runner's
/// function.run.
#[tokio::test(flavor = "multi_thread")]
async fn a_pod_that_never_becomes_ready_fails_within_the_deadline() {
    let bed = Bed::start().await;
    let collector = Collector::start();
    let endpoint = format!("http://{}", collector.grpc);
    // Porch's pod template, with wrapper traces to the collector too.
    let cms: Api<ConfigMap> = Api::namespaced(bed.client.clone(), "porch-system");
    let template = template_config_map_with_env(
        "traced",
        &[
            ("OTEL_TRACES_EXPORTER", "otlp"),
            ("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
            ("OTEL_BSP_SCHEDULE_DELAY", "100"),
        ],
    );
    cms.create(&PostParams::default(), &template).await.unwrap();
    let runner = bed.runner_with_env(
        &[
            "--pod-ready-timeout=3s",
            "--function-pod-template=fn-template",
        ],
        &[
            ("OTEL_METRICS_EXPORTER", "prometheus"),
            ("OTEL_EXPORTER_PROMETHEUS_HOST", "127.0.0.1"),
            ("OTEL_EXPORTER_PROMETHEUS_PORT", "0"),
            ("OTEL_TRACES_EXPORTER", "otlp"),
            ("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
            ("OTEL_BSP_SCHEDULE_DELAY", "100"),
        ],
    );
    let url = metrics_url(&runner);
    let image = bed.image("set-namespace");
    bed.kubelet.plan("set-namespace", Plan::NeverReady);
    let stuck = trace_ids();
    let started = Instant::now();
    let first = traced_call(&runner, &image, set_namespace_rl("a"), &stuck);
    let starting = async {
        let pods = [("image", image.as_str()), ("state", "starting")];
        let waiting = [("image", image.as_str())];
        eventually("the gauges to show the starting pod", PATIENCE, || async {
            let m = scrape(&url).await;
            (m.value("krm_fn_runner_pods", &pods) == 1.0
                && m.value("krm_fn_runner_pod_waiting_requests", &waiting) == 1.0)
                .then_some(())
        })
        .await
    };
    let (first, ()) = tokio::join!(first, starting);
    let err = first.unwrap_err();
    let took = started.elapsed();
    assert_eq!(err.code(), Code::DeadlineExceeded, "{err:?}");
    assert!(err.message().contains("was not ready within 3s"), "{err:?}");
    assert!(
        took >= Duration::from_secs(3) && took < Duration::from_secs(6),
        "{took:?}"
    );
    // The stuck pod is deleted; the next call gets a working one.
    let working = trace_ids();
    let ok = traced_call(&runner, &image, set_namespace_rl("b"), &working)
        .await
        .unwrap();
    assert!(output(&ok).contains("namespace: b"));
    // The wrapper in the pod got the template's OTEL environment.
    let pod = bed.kubelet.running_pods().pop().expect("a running wrapper");
    let wrapper_url = otel_support::metrics_url_in(&bed.kubelet.wrapper_log(&pod).unwrap())
        .expect("the wrapper serves /metrics");
    let w = scrape(&wrapper_url).await;
    assert_eq!(
        w.value(
            "krm_fn_runner_evaluations_total",
            &[
                ("image", image.as_str()),
                ("runtime", "wrapper"),
                ("code", "OK")
            ]
        ),
        1.0
    );

    let m = scrape(&url).await;
    let evaluations = |code| {
        m.value(
            "krm_fn_runner_evaluations_total",
            &[
                ("image", image.as_str()),
                ("runtime", "pod"),
                ("code", code),
            ],
        )
    };
    assert_eq!(
        evaluations("DEADLINE_EXCEEDED"),
        1.0,
        "{:?}",
        m.samples("krm_fn_runner_evaluations_total", &[])
    );
    assert_eq!(evaluations("OK"), 1.0);
    // Both calls waited for a pod; the first for at least the 3 s timeout.
    let wait = "krm_fn_runner_pod_wait_duration_seconds";
    let by_image = [("image", image.as_str())];
    assert_eq!(m.count(wait, &by_image), 2.0);
    assert!(
        m.count(wait, &by_image) - m.bucket(wait, &by_image, 2.5) >= 1.0,
        "{:?}",
        m.buckets(wait, &by_image)
    );
    // One pod start gave up after the 3 s timeout, one succeeded.
    let start = "krm_fn_runner_pod_start_duration_seconds";
    let failed = [("image", image.as_str()), ("outcome", "failed")];
    let ready = [("image", image.as_str()), ("outcome", "ready")];
    assert_eq!(m.count(start, &failed), 1.0);
    assert_eq!(m.bucket(start, &failed, 2.5), 0.0);
    assert_eq!(m.count(start, &ready), 1.0);
    // A pod start happens inside the wait of the call that caused it.
    assert!(m.value(&format!("{start}_sum"), &ready) <= m.value(&format!("{wait}_sum"), &by_image));
    // The function ran once, through the wrapper of the working pod.
    let run = "krm_fn_runner_function_run_duration_seconds";
    assert_eq!(
        m.count(run, &[("image", image.as_str()), ("runtime", "pod")]),
        1.0
    );
    // The working pod is idle now; nothing waits.
    for (state, n) in [("starting", 0.0), ("idle", 1.0), ("busy", 0.0)] {
        assert_eq!(
            m.value(
                "krm_fn_runner_pods",
                &[("image", image.as_str()), ("state", state)]
            ),
            n,
            "{state}"
        );
    }
    assert_eq!(
        m.value("krm_fn_runner_pod_waiting_requests", &by_image),
        0.0
    );
    assert_eq!(m.value("krm_fn_runner_exec_processes", &[]), 0.0);

    // Traces: the caller's trace continues; phases nest under the call.
    let call_name = "evaluator.FunctionEvaluator/EvaluateFunction";
    let spans = collector.wait_for_trace(&stuck.0, PATIENCE, |s| {
        s.iter().any(|s| s.name == call_name) && s.iter().any(|s| s.name == "pod.start")
    });
    let call_span = one(&spans, call_name);
    assert_eq!(call_span.parent_span_id, stuck.1);
    assert_eq!(call_span.attributes["code"], "DEADLINE_EXCEEDED");
    let wait_span = one(&spans, "pod.wait");
    assert_eq!(wait_span.parent_span_id, call_span.span_id);
    let start_span = one(&spans, "pod.start");
    assert_eq!(start_span.parent_span_id, wait_span.span_id);
    assert_eq!(start_span.attributes["outcome"], "failed");
    assert!(named(&spans, "function.run").is_empty());

    let spans = collector.wait_for_trace(&working.0, PATIENCE, |s| {
        named(s, call_name).len() == 2
            && s.iter().any(|s| s.name == "pod.start")
            && named(s, "function.run").len() == 2
    });
    let (runner_spans, wrapper_spans): (Vec<_>, Vec<_>) = spans
        .into_iter()
        .partition(|s| s.service == "krm-fn-runner");
    let call_span = one(&runner_spans, call_name);
    assert_eq!(call_span.parent_span_id, working.1);
    assert_eq!(call_span.attributes["runtime"], "pod");
    let wait_span = one(&runner_spans, "pod.wait");
    assert_eq!(wait_span.parent_span_id, call_span.span_id);
    let start_span = one(&runner_spans, "pod.start");
    assert_eq!(start_span.parent_span_id, wait_span.span_id);
    assert_eq!(start_span.attributes["outcome"], "ready");
    let run_span = one(&runner_spans, "function.run");
    assert_eq!(run_span.parent_span_id, call_span.span_id);
    assert_eq!(run_span.attributes["runtime"], "pod");
    // The wrapper server continues the trace under the runner's call to it.
    let wrapper_call = one(&wrapper_spans, call_name);
    assert_eq!(wrapper_call.service, "wrapper-server");
    assert_eq!(wrapper_call.parent_span_id, run_span.span_id);
    let wrapper_run = one(&wrapper_spans, "function.run");
    assert_eq!(wrapper_run.parent_span_id, wrapper_call.span_id);
    assert_eq!(wrapper_run.attributes["runtime"], "wrapper");

    bed.assert_clean(&runner).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_wrapper_killed_mid_call_fails_clearly_and_the_next_call_gets_a_fresh_pod() {
    let bed = Bed::start().await;
    let runner = bed.runner(&[]);
    let image = bed.image("starlark");
    let slow = {
        let (runner, image) = (&runner, image.clone());
        async move { call(runner, &image, slow_starlark_rl()).await }
    };
    let kill = async {
        let pod = eventually("the wrapper to run", PATIENCE, || async {
            bed.kubelet.running_pods().into_iter().next()
        })
        .await;
        // Let the call reach the function, then crash the wrapper.
        tokio::time::sleep(Duration::from_millis(300)).await;
        bed.kubelet.kill_wrapper(&pod);
        pod
    };
    let (result, killed) = tokio::join!(slow, kill);
    let err = result.expect_err("the call cannot succeed without its wrapper");
    assert_eq!(err.code(), Code::Unavailable, "{err:?}");
    assert!(
        err.message().contains(&killed) && err.message().contains("evicted"),
        "{err:?}"
    );
    eventually("the crashed pod to be deleted", PATIENCE, || async {
        (!bed.pod_names().await.contains(&killed)).then_some(())
    })
    .await;
    let ok = call(&runner, &bed.image("starlark"), noop_starlark_rl())
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", runner.log()));
    assert!(output(&ok).contains("ResourceList"));
    assert_eq!(bed.kubelet.started(), 2);

    // A caller's deadline ends the call with DEADLINE_EXCEEDED; the pod is
    // fine and keeps serving. (The runner's own answer: this client does not
    // also end the call on its own timer.)
    let mut client = runner.client_without_local_deadline();
    let mut late = tonic::Request::new(EvaluateFunctionRequest {
        tag: String::new(),
        resource_list: slow_starlark_rl().into(),
        image: image.clone(),
    });
    late.set_timeout(Duration::from_millis(300));
    let err = tokio::time::timeout(PATIENCE, client.evaluate_function(late))
        .await
        .expect("the runner answers a call past its deadline")
        .unwrap_err();
    assert_eq!(err.code(), Code::DeadlineExceeded, "{err:?}");
    let ok = call(&runner, &image, noop_starlark_rl())
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", runner.log()));
    assert!(output(&ok).contains("ResourceList"));
    assert_eq!(bed.kubelet.started(), 2, "the pod survived the deadline");
    bed.assert_clean(&runner).await;
}

/// A starlark ResourceList that does nothing.
fn noop_starlark_rl() -> Vec<u8> {
    b"apiVersion: config.kubernetes.io/v1\nkind: ResourceList\nitems: []\nfunctionConfig:\n  apiVersion: fn.kpt.dev/v1alpha1\n  kind: StarlarkRun\n  metadata:\n    name: noop\n  source: |\n    pass\n".to_vec()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_restarted_runner_adopts_the_pods_it_left() {
    let bed = Bed::start().await;
    let image = bed.image("set-namespace");
    let mut first = bed.runner(&["--pod-ttl=20s", "--pod-address-mode=pod-ip"]);
    call(&first, &image, set_namespace_rl("a")).await.unwrap();
    let pods = bed.pod_names().await;
    assert_eq!(pods.len(), 1);
    assert!(first.terminate(Duration::from_secs(10)).is_some());
    assert_eq!(bed.pod_names().await, pods, "pods outlive the runner");

    let second = bed.runner(&["--pod-ttl=20s", "--pod-address-mode=pod-ip"]);
    let ok = call(&second, &image, set_namespace_rl("b")).await.unwrap();
    assert!(output(&ok).contains("namespace: b"));
    assert_eq!(
        bed.pod_names().await,
        pods,
        "the pod was adopted, not replaced"
    );
    assert_eq!(bed.kubelet.started(), 1);
    assert!(
        second.log().contains("adopted function pod"),
        "{}",
        second.log()
    );
    // Shorten the wait for GC: a runner with a 1 s TTL deletes the pod once
    // its reclaim-after (up to 30 s ahead) passes; expire it by hand instead.
    let pods_api: Api<Pod> = Api::namespaced(bed.client.clone(), NS);
    let patch = serde_json::json!({"metadata": {"annotations": {"fn.kpt.dev/reclaim-after": "1"}}});
    pods_api
        .patch(
            &pods[0],
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(&patch),
        )
        .await
        .unwrap();
    drop(second);
    let third = bed.runner(&[]);
    bed.assert_clean(&third).await;
}

/// Private registries (Porch's `--enable-private-registries`): the image is
/// inspected with the mounted credentials, the credentials are synced into
/// the pod namespace as a `kubernetes.io/dockerconfigjson` Secret, and the
/// function pod pulls with it.
#[tokio::test(flavor = "multi_thread")]
async fn private_registry_credentials_reach_the_function_pod() {
    let bed = Bed::start().await;
    let private = TestRegistry::start(Setup::basic("fnuser", "s3cret"));
    let f = "set-namespace";
    let tag = format!("{f}:{}", catalog_version(f));
    private
        .push_image(&tag, "amd64", Some(&["/usr/local/bin/function"]), None, f)
        .await;
    let config = private.docker_config("auth.json", &private.addr, "fnuser", "s3cret");
    let secret_path = format!("--registry-auth-secret-path={}", config.display());
    let registry = format!("--plain-http-registry={}", private.addr);
    let runner = bed.runner(&[
        "--enable-private-registries",
        &secret_path,
        "--registry-auth-secret-name=fn-pull-secret",
        &registry,
    ]);
    let image = format!("{}/{tag}", private.addr);

    let out = call(&runner, &image, set_namespace_rl("private"))
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", runner.log()));
    assert!(
        output(&out).contains("namespace: private"),
        "{}",
        output(&out)
    );

    let secret = Api::<Secret>::namespaced(bed.client.clone(), NS)
        .get("fn-pull-secret")
        .await
        .expect("the pull secret is created in the pod namespace");
    assert_eq!(
        secret.type_.as_deref(),
        Some("kubernetes.io/dockerconfigjson")
    );
    let data = secret.data.expect("secret data");
    assert_eq!(
        data.get(".dockerconfigjson").map(|b| b.0.clone()),
        Some(std::fs::read(&config).unwrap())
    );
    let pods = bed.pods().await;
    assert_eq!(pods.len(), 1);
    let pulls: Vec<String> = pods[0]
        .spec
        .as_ref()
        .and_then(|s| s.image_pull_secrets.clone())
        .unwrap_or_default()
        .into_iter()
        .map(|r| r.name)
        .collect();
    assert_eq!(pulls, ["fn-pull-secret"]);

    // Without the credentials the same image cannot be inspected: the
    // caller is told why and no pod is made for it.
    drop(runner);
    bed.assert_clean(&bed.runner(&[])).await;
    let anonymous = bed.runner(&[&registry]);
    let err = call(&anonymous, &image, set_namespace_rl("x"))
        .await
        .unwrap_err();
    assert!(
        err.message().contains("unable to get the entrypoint"),
        "{}",
        err.message()
    );
    assert!(bed.pod_names().await.is_empty());
}

#[test]
fn the_pod_runtime_needs_the_wrapper_server_image() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_krm-fn-runner"))
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--disable-runtimes=exec",
        ])
        .env_remove("WRAPPER_SERVER_IMAGE")
        .output()
        .expect("run serve");
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(
            "environment variable WRAPPER_SERVER_IMAGE must be set to use pod function evaluator runtime"
        ),
        "{stderr}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn warm_up_from_the_pod_cache_config_before_serving() {
    let bed = Bed::start().await;
    let (ns_image, star_image) = (bed.image("set-namespace"), bed.image("starlark"));
    let config = bed.dir.path().join("pod-cache-config.yaml");
    std::fs::write(
        &config,
        format!(
            "- name: {ns_image}\n  timeToLive: 6s\n  maxWaitlistLength: 2\n  maxParallelPodsPerFunction: 2\n- name: {star_image}\n  timeToLive: 3s\n"
        ),
    )
    .unwrap();
    // The starlark pod never gets ready: health stays NOT_SERVING until its
    // pod-ready deadline gives up on it.
    bed.kubelet.plan("starlark", Plan::NeverReady);
    let started = Instant::now();
    let runner = bed.runner(&[
        "--warm-up-pod-cache=true",
        &format!("--pod-cache-config={}", config.display()),
        "--pod-ready-timeout=3s",
    ]);
    assert_eq!(health(&runner).await, NOT_SERVING);
    eventually("the set-namespace pod to be warmed", PATIENCE, || async {
        (bed.kubelet.started() == 1).then_some(())
    })
    .await;
    assert_eq!(
        health(&runner).await,
        NOT_SERVING,
        "starlark is still warming"
    );
    eventually("health to report SERVING", PATIENCE, || async {
        (health(&runner).await == SERVING).then_some(())
    })
    .await;
    assert!(
        started.elapsed() >= Duration::from_millis(2500),
        "{:?}",
        started.elapsed()
    );
    let warmed = bed.kubelet.running_pods();
    assert_eq!(warmed.len(), 1);
    assert!(warmed[0].starts_with("set-namespace-"), "{warmed:?}");
    // The first call runs on the warm pod.
    let ok = call(&runner, &ns_image, set_namespace_rl("w"))
        .await
        .unwrap();
    assert!(output(&ok).contains("namespace: w"));
    assert_eq!(bed.kubelet.started(), 1);
    assert_eq!(bed.kubelet.running_pods(), warmed);
    bed.assert_clean(&runner).await;
}

fn template_config_map(revision: &str) -> ConfigMap {
    template_config_map_with_env(revision, &[])
}

/// As [`template_config_map`], with `env` set on the function container
/// (replacing variables of the same name).
fn template_config_map_with_env(revision: &str, env: &[(&str, &str)]) -> ConfigMap {
    use krm_fn_runner::domain::pod_cache::template::{
        default_pod_template, default_service_template,
    };
    let mut pod = serde_json::to_value(default_pod_template("example.com/wrapper:test")).unwrap();
    pod["metadata"]["annotations"]["test.kpt.dev/revision"] = revision.into();
    for container in pod["spec"]["containers"].as_array_mut().unwrap() {
        if container["name"] != "function" {
            continue;
        }
        let vars = container["env"].as_array_mut().unwrap();
        for (name, value) in env {
            vars.retain(|v| v["name"] != *name);
            vars.push(serde_json::json!({"name": name, "value": value}));
        }
    }
    let service = serde_json::to_value(default_service_template()).unwrap();
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": "fn-template"},
        "data": {
            "template": serde_json::to_string(&pod).unwrap(),
            "serviceTemplate": serde_json::to_string(&service).unwrap(),
        },
    }))
    .unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_changed_template_config_map_replaces_pods_on_next_use() {
    let bed = Bed::start().await;
    let cms: Api<ConfigMap> = Api::namespaced(bed.client.clone(), "porch-system");
    let v1 = cms
        .create(&PostParams::default(), &template_config_map("1"))
        .await
        .unwrap()
        .metadata
        .resource_version
        .unwrap();
    let runner = bed.runner(&["--function-pod-template=porch-system/fn-template"]);
    let image = bed.image("set-namespace");
    call(&runner, &image, set_namespace_rl("a")).await.unwrap();
    let first = bed.pods().await;
    assert_eq!(first.len(), 1);
    assert_eq!(
        annotation(&first[0], "fn.kpt.dev/template-version"),
        Some(v1.clone())
    );
    assert_eq!(
        annotation(&first[0], "test.kpt.dev/revision").as_deref(),
        Some("1")
    );

    let v2 = cms
        .replace(
            "fn-template",
            &PostParams::default(),
            &template_config_map("2"),
        )
        .await
        .unwrap()
        .metadata
        .resource_version
        .unwrap();
    assert_ne!(v1, v2);
    // The runner re-reads the template every scan interval (1 s).
    tokio::time::sleep(Duration::from_millis(2500)).await;
    call(&runner, &image, set_namespace_rl("b")).await.unwrap();
    assert_eq!(bed.kubelet.started(), 2, "the next use replaced the pod");
    let fresh = bed
        .pods()
        .await
        .into_iter()
        .find(|p| annotation(p, "fn.kpt.dev/template-version") == Some(v2.clone()))
        .expect("a pod of the new template");
    assert_eq!(
        annotation(&fresh, "test.kpt.dev/revision").as_deref(),
        Some("2")
    );
    bed.assert_clean(&runner).await;
    cms.delete("fn-template", &DeleteParams::default())
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn two_replicas_share_the_namespace_under_load() {
    let bed = Bed::start().await;
    let flags = [
        "--pod-ttl=2s",
        "--max-parallel-pods-per-function=2",
        "--max-waitlist-length=1",
    ];
    let a = bed.runner(&flags);
    let b = bed.runner(&flags);
    let image = bed.image("set-namespace");
    let until = Instant::now() + Duration::from_secs(7);
    let mut workers = Vec::new();
    for w in 0..6 {
        let runner = if w % 2 == 0 { &a } else { &b };
        let image = image.clone();
        workers.push(async move {
            let mut done = 0u32;
            while Instant::now() < until {
                let ns = format!("w{w}-{done}");
                let r = call(runner, &image, set_namespace_rl(&ns)).await;
                let r = r.unwrap_or_else(|e| panic!("worker {w} call {done}: {e}"));
                assert!(output(&r).contains(&format!("namespace: {ns}\n")));
                done += 1;
                if done.is_multiple_of(5) {
                    // Idle gaps let GC run while the other replica works.
                    tokio::time::sleep(Duration::from_millis(700)).await;
                }
            }
            done
        });
    }
    let done: u32 = futures_join_all(workers).await.into_iter().sum();
    assert!(done > 30, "only {done} calls");
    let pods = bed.pod_names().await;
    assert!(pods.len() <= 4, "at most two pods per replica: {pods:?}");
    assert!(bed.kubelet.started() >= 2, "both replicas made pods");
    assert!(!a.log().contains("already exists") && !b.log().contains("already exists"));
    bed.assert_clean(&a).await;

    let (_, deletes, uses) =
        k8s_support::assert_no_pod_deleted_in_use(&bed.plane, &[a.log(), b.log()]);
    assert!(deletes > 0, "GC deleted the pods");
    assert!(uses as u32 >= done, "{uses} uses for {done} calls");
    drop(b);
}

/// The bed's pods that are not terminating: name -> UID.
async fn live_pods(bed: &Bed) -> std::collections::BTreeMap<String, String> {
    bed.pods()
        .await
        .into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .filter_map(|p| Some((p.metadata.name?, p.metadata.uid?)))
        .collect()
}

// Warm pool (`minReady: 2`, `maxPods: 3`) shared by two replicas on the real
// API server: together they make exactly two pods, not four (the pool's
// names are shared; the second creation of a name is answered AlreadyExists
// and joins the pod); a pod deleted behind their back comes back; a quiet
// period of three TTLs reclaims nothing; a burst from both replicas never
// has more than three pods at once (terminating ones included) and falls
// back to two once idle. From the audit log: no pod was deleted with a call
// in it.
#[tokio::test(flavor = "multi_thread")]
async fn a_warm_pool_keeps_its_minimum_and_maximum_across_two_replicas() {
    let bed = Bed::start().await;
    let image = bed.image("starlark");
    let config = bed.dir.path().join("pod-cache-config.yaml");
    std::fs::write(
        &config,
        format!("- name: {image}\n  timeToLive: 2s\n  maxWaitlistLength: 1\n  minReady: 2\n  maxPods: 3\n"),
    )
    .unwrap();
    let flags = [format!("--pod-cache-config={}", config.display())];
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let a = bed.runner(&flags);
    let b = bed.runner(&flags);

    // Exactly the minimum, with --warm-up-pod-cache=false.
    eventually("two warm pods", PATIENCE, || async {
        (bed.kubelet.running_pods().len() == 2).then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let warm = live_pods(&bed).await;
    assert_eq!(warm.len(), 2, "{warm:?}");
    assert_eq!(bed.kubelet.started(), 2, "two replicas made two pods");
    assert!(warm.keys().all(|n| naming::is_pool_name(n)), "{warm:?}");

    // A pod deleted behind the replicas' back comes back under its name.
    let victim = warm.keys().next().unwrap().clone();
    bed.kubelet.vanish(&victim).await;
    eventually("the deleted warm pod to come back", PATIENCE, || async {
        let now = live_pods(&bed).await;
        (now.len() == 2
            && now.get(&victim).is_some_and(|uid| *uid != warm[&victim])
            && bed.kubelet.running_pods().len() == 2)
            .then_some(now)
    })
    .await;
    let restored = live_pods(&bed).await;

    // Quiet for three TTLs: nothing is reclaimed or replaced.
    tokio::time::sleep(Duration::from_secs(6)).await;
    assert_eq!(live_pods(&bed).await, restored, "quiet period");
    assert_eq!(bed.kubelet.started(), 3);

    // A burst from both replicas: at most three pods at any time.
    let done = std::sync::atomic::AtomicBool::new(false);
    let sampler = async {
        let mut most = 0;
        while !done.load(std::sync::atomic::Ordering::Relaxed) {
            most = most.max(bed.pods().await.len());
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        most
    };
    let burst = async {
        let mut workers = Vec::new();
        for w in 0..8 {
            let runner = if w % 2 == 0 { &a } else { &b };
            let image = image.clone();
            workers.push(async move {
                for i in 0..3 {
                    let r = call(runner, &image, slow_starlark_rl()).await;
                    r.unwrap_or_else(|e| panic!("worker {w} call {i}: {e}"));
                }
            });
        }
        futures_join_all(workers).await;
        done.store(true, std::sync::atomic::Ordering::Relaxed);
    };
    let (most, ()) = tokio::join!(sampler, burst);
    assert!(most <= 3, "{most} pods during the burst");
    assert!(bed.kubelet.started() > 3, "the burst scaled out");
    eventually(
        "the pool back at its minimum",
        Duration::from_secs(30),
        || async {
            let now = live_pods(&bed).await;
            (now.len() == 2 && bed.pods().await.len() == 2).then_some(())
        },
    )
    .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(live_pods(&bed).await.len(), 2, "stays at the minimum");

    let (created, deletes, uses) =
        k8s_support::assert_no_pod_deleted_in_use(&bed.plane, &[a.log(), b.log()]);
    eprintln!("warm pool: {created} pods created, {deletes} deleted, {uses} calls checked");
    assert!(uses >= 24, "{uses} uses");
    // The pool outlives its runners: clean up by hand.
    drop(a);
    drop(b);
    let pods: Api<Pod> = Api::namespaced(bed.client.clone(), NS);
    let services: Api<Service> = Api::namespaced(bed.client.clone(), NS);
    for name in live_pods(&bed).await.keys() {
        let _ = pods.delete(name, &DeleteParams::default()).await;
        let _ = services.delete(name, &DeleteParams::default()).await;
    }
    eventually("every wrapper process to stop", PATIENCE, || async {
        (bed.kubelet.processes() == 0).then_some(())
    })
    .await;
}

/// Calls `image` on `runner` in a loop until `until`, each call recorded as
/// (when it ended, whether it succeeded, the error if not).
async fn keep_calling(
    runner: &Runner,
    image: &str,
    worker: usize,
    until: Instant,
) -> Vec<(Instant, Result<(), tonic::Status>)> {
    let mut calls = Vec::new();
    while Instant::now() < until {
        let ns = format!("w{worker}-{}", calls.len());
        let r = tokio::time::timeout(
            Duration::from_secs(20),
            call(runner, image, set_namespace_rl(&ns)),
        )
        .await
        .unwrap_or_else(|_| Err(tonic::Status::deadline_exceeded("no answer in 20 s")));
        let r = r.map(|r| {
            assert!(output(&r).contains(&format!("namespace: {ns}\n")));
        });
        if r.is_err() {
            // Refused calls come back at once: do not spin.
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        calls.push((Instant::now(), r));
    }
    calls
}

// Reclaim-after lost on a failed patch, on the real API server: two
// replicas share one pod (the second adopts the first's) under load; then
// only the first calls it, and the API server is frozen (SIGSTOP) for
// longer than the pod's whole reclaim-after, across the extensions the
// first needs. Its calls go on without the API server while the
// reclaim-after it has seen acknowledged is far enough ahead, and are
// refused after that (it never counts on an extension the API server did
// not take); once the API server is back, the second replica's GC may
// reclaim the idle pod, a new one is made and calls succeed again. From
// the audit log: no pod was deleted while either replica had a call in it.
#[tokio::test(flavor = "multi_thread")]
async fn a_frozen_api_server_across_an_extension_deletes_no_pod_in_use() {
    let bed = Bed::start().await;
    let flags = [
        "--pod-ttl=4s",
        "--max-parallel-pods-per-function=1",
        "--max-waitlist-length=4",
        "--max-load-per-pod=8",
        "--api-timeout=1s",
        "--api-retries=1",
        // A failed extension is retried only 5 s later: after the freeze
        // the other replica's GC (every second) sees the annotation as the
        // first replica last managed to write it.
        "--write-retry-backoff=5s",
    ];
    let a = bed.runner(&flags);
    let image = bed.image("set-namespace");
    call(&a, &image, set_namespace_rl("first"))
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", a.log()));
    let shared = bed.pod_names().await;
    assert_eq!(shared.len(), 1);
    let b = bed.runner(&flags);
    eventually("the second replica to adopt the pod", PATIENCE, || async {
        b.log().contains("adopted function pod").then_some(())
    })
    .await;

    // Both replicas call the pod for 4 s; then only A does, across the
    // freeze, while B's GC keeps looking at the pod.
    let start = Instant::now();
    let until = start + Duration::from_secs(22);
    let workers: Vec<_> = (0..4)
        .map(|w| {
            if w % 2 == 0 {
                keep_calling(&a, &image, w, until)
            } else {
                keep_calling(&b, &image, w, start + Duration::from_secs(4))
            }
        })
        .collect();
    let freeze = async {
        tokio::time::sleep(Duration::from_secs(4)).await;
        bed.plane.pause_apiserver();
        let frozen = Instant::now();
        tokio::time::sleep(Duration::from_secs(8)).await;
        bed.plane.resume_apiserver();
        (frozen, Instant::now())
    };
    let (calls, (frozen, resumed)) = tokio::join!(futures_join_all(workers), freeze);
    let calls: Vec<_> = calls.into_iter().flatten().collect();
    let ok = |from: Instant, to: Instant| {
        calls
            .iter()
            .filter(|(at, r)| *at >= from && *at < to && r.is_ok())
            .count()
    };
    let refused: Vec<_> = calls
        .iter()
        .filter_map(|(at, r)| r.as_ref().err().map(|e| (*at, e)))
        .collect();
    let before = ok(start, frozen);
    let during = ok(frozen, resumed);
    let after = ok(resumed + Duration::from_secs(6), until);
    eprintln!(
        "calls: {} ok before the freeze, {during} ok during it, {after} ok from 6 s after it, {} refused",
        before,
        refused.len()
    );
    assert!(before > 0 && after > 0, "{refused:?}");
    assert!(during > 0, "calls went on without the API server at first");
    for (at, e) in &refused {
        eprintln!(
            "refused {:?} after the freeze began: {:?} {}",
            at.duration_since(frozen),
            e.code(),
            e.message()
        );
        assert!(
            *at > frozen && *at < resumed + Duration::from_secs(6),
            "only calls during the freeze (and while the runners catch up) may be refused: {e} at {:?} after the start",
            at.duration_since(start)
        );
        assert!(
            matches!(
                e.code(),
                Code::ResourceExhausted | Code::Unavailable | Code::DeadlineExceeded
            ),
            "{e}"
        );
    }
    bed.assert_clean(&a).await;
    let (_, deletes, uses) =
        k8s_support::assert_no_pod_deleted_in_use(&bed.plane, &[a.log(), b.log()]);
    assert!(deletes > 0 && uses >= calls.len() - refused.len());
    drop(b);
}

// Deletions missed during a watch outage, on the real API server: the
// runner is frozen (so its pod watch cannot see anything), the API server
// restarted (every watch breaks) and the runner's pod deleted; when the
// runner goes on, its watch lists the pods again (the deletion itself is
// never reported) and the runner drops the vanished pod: no call goes to
// it, the next gets a new pod.
// Then the API server is restarted again under load: calls on ready pods
// go on, and from the audit log no pod was deleted with a call in it.
#[tokio::test(flavor = "multi_thread")]
async fn a_pod_deleted_during_a_watch_outage_and_an_api_server_restart_under_load() {
    let mut bed = Bed::start().await;
    // A TTL long enough that the pod is still far from its reclaim-after
    // when the runner goes on: only the re-listing can tell it is gone.
    let runner = bed.runner(&["--pod-ttl=20s", "--api-timeout=2s"]);
    let image = bed.image("set-namespace");
    call(&runner, &image, set_namespace_rl("a"))
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", runner.log()));
    let first = bed.pod_names().await;
    assert_eq!(first.len(), 1);

    let pid = runner.pid().to_string();
    let signal = |sig: &str| {
        let st = std::process::Command::new("kill")
            .args([sig, &pid])
            .status()
            .unwrap();
        assert!(st.success());
    };
    signal("-STOP");
    bed.plane.restart_apiserver().await;
    bed.kubelet.vanish(&first[0]).await;
    eventually("the pod and its wrapper to be gone", PATIENCE, || async {
        (bed.pod_names().await.is_empty() && bed.kubelet.processes() == 0).then_some(())
    })
    .await;
    signal("-CONT");
    eventually("the runner's pod watch to list again", PATIENCE, || async {
        runner
            .log()
            .contains("the pod watch listed the pods again after an outage")
            .then_some(())
    })
    .await;
    let failures = std::sync::Mutex::new(Vec::new());
    let served = eventually("a call to succeed on a new pod", PATIENCE, || async {
        match call(&runner, &image, set_namespace_rl("b")).await {
            Ok(r) => Some(r),
            Err(e) => {
                failures.lock().unwrap().push(e);
                tokio::time::sleep(Duration::from_millis(200)).await;
                None
            }
        }
    })
    .await;
    let failures = failures.into_inner().unwrap();
    assert!(output(&served).contains("namespace: b"));
    assert!(
        failures.is_empty(),
        "a call went to the vanished pod: {failures:?}\n{}",
        runner.log()
    );
    let second = bed.pod_names().await;
    assert_eq!(second.len(), 1);
    assert_ne!(second, first, "a new pod");
    eprintln!(
        "after the missed deletion: {} failed call(s) before a new pod served",
        failures.len()
    );

    // The API server restarted under load.
    let until = Instant::now() + Duration::from_secs(12);
    let load = futures_join_all(
        (0..3)
            .map(|w| keep_calling(&runner, &image, w, until))
            .collect(),
    );
    let restart = async {
        tokio::time::sleep(Duration::from_secs(3)).await;
        bed.plane.restart_apiserver().await;
    };
    let (calls, ()) = tokio::join!(load, restart);
    let calls: Vec<_> = calls.into_iter().flatten().collect();
    let ok = calls.iter().filter(|(_, r)| r.is_ok()).count();
    eprintln!("under the restart: {ok} of {} calls ok", calls.len());
    assert!(ok > 0);
    bed.assert_clean_within(&runner, Duration::from_secs(75))
        .await;
    k8s_support::assert_no_pod_deleted_in_use(&bed.plane, &[runner.log()]);
}

/// Runs futures concurrently and collects their outputs in order.
async fn futures_join_all<F: Future>(futures: Vec<F>) -> Vec<F::Output> {
    let mut set = Vec::new();
    for f in futures {
        set.push(Box::pin(f));
    }
    let mut out = Vec::with_capacity(set.len());
    // Poll all together: join them through a select-free join.
    let joined = join_vec(set).await;
    out.extend(joined);
    out
}

async fn join_vec<F: Future + Unpin>(mut futures: Vec<F>) -> Vec<F::Output> {
    use std::pin::Pin;
    use std::task::Poll;
    let mut results: Vec<Option<F::Output>> = futures.iter().map(|_| None).collect();
    std::future::poll_fn(|cx| {
        let mut pending = false;
        for (i, f) in futures.iter_mut().enumerate() {
            if results[i].is_none() {
                match Pin::new(f).poll(cx) {
                    Poll::Ready(v) => results[i] = Some(v),
                    Poll::Pending => pending = true,
                }
            }
        }
        if pending {
            Poll::Pending
        } else {
            Poll::Ready(())
        }
    })
    .await;
    results
        .into_iter()
        .map(|r| r.expect("every future finished"))
        .collect()
}

/// The admission policy and the step timeout on the pod runtime: a denied
/// image answers PERMISSION_DENIED naming the rule and creates no pod (none
/// in the namespace, none started by the kubelet); a render whose
/// validator (starlark, in a pod, through `--function-runner`) spins past
/// its step `timeout:` ends within the limit plus 1 s with the timeout
/// result, and the pod is reclaimed as usual.
#[tokio::test(flavor = "multi_thread")]
async fn admission_and_step_timeouts_on_the_pod_runtime() {
    let bed = Bed::start().await;
    let policy = bed.dir.path().join("policy.yaml");
    std::fs::write(
        &policy,
        "rules:\n- name: no-set-namespace\n  action: deny\n  repository: set-namespace\n",
    )
    .unwrap();
    let runner = bed.runner(&[&format!("--admission-policy={}", policy.display())]);
    let err = call(&runner, &bed.image("set-namespace"), set_namespace_rl("a"))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::PermissionDenied, "{err:?}");
    assert!(
        err.message()
            .contains("denied by admission rule \"no-set-namespace\""),
        "{err:?}"
    );
    assert!(
        bed.pod_names().await.is_empty(),
        "a denied call creates no pod"
    );
    assert_eq!(bed.kubelet.started(), 0);

    let pkg = common::write_cm_package(
        bed.dir.path(),
        "",
        &format!(
            "  validators:\n  - image: {}\n    configPath: slow.yaml\n    timeout: 2s\n",
            bed.image("starlark")
        ),
    );
    std::fs::write(
        pkg.join("slow.yaml"),
        "apiVersion: fn.kpt.dev/v1alpha1\nkind: StarlarkRun\nmetadata:\n  name: slow\n  annotations:\n    config.kubernetes.io/local-config: \"true\"\nsource: |\n  def spin():\n    n = 0\n    for i in range(1000000000):\n      n += i\n    return n\n  spin()\n",
    )
    .unwrap();
    // The pod's start is not the step's: warm it up with a quick call first.
    call(&runner, &bed.image("starlark"), noop_starlark_rl())
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", runner.log()));
    let (out, text, took) = common::render_cli(
        bed.dir.path(),
        &pkg,
        &[format!("--function-runner={}", runner.address)],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(took < Duration::from_secs(3), "render took {took:?}");
    assert!(
        stderr.contains("did not finish within 2.000s"),
        "{stderr}\n{}",
        runner.log()
    );
    assert!(text.contains("timeout: 2.000s"), "{text}");
    assert_eq!(bed.kubelet.started(), 1, "the validator ran in a pod");
    bed.assert_clean(&runner).await;
}

/// Porch's `Tag` (field 3) on the pod runtime: a constraint is resolved
/// against the registry's tag list, to the highest tag that satisfies it,
/// and the pod runs that concrete version; the list answers later calls
/// (one registry request for all of them, `--tag-list-ttl`); no match is
/// NOT_FOUND naming the tag and the tags seen.
#[tokio::test(flavor = "multi_thread")]
async fn a_step_tag_constraint_runs_the_highest_matching_registry_tag() {
    let bed = Bed::start().await;
    let installed = catalog_version("set-namespace");
    for tag in ["v0.4.1", "v0.5.2", "latest"] {
        bed.registry
            .push_image(
                &format!("set-namespace:{tag}"),
                "amd64",
                Some(&["/usr/local/bin/function"]),
                None,
                "set-namespace",
            )
            .await;
    }
    let runner = bed.runner(&["--pod-ttl=30s"]);
    let repo = format!("{}/set-namespace", bed.registry.addr);
    for (image, tag, want) in [
        (repo.clone(), "~0.4", installed.as_str()),
        (repo.clone(), ">=0.5", "v0.5.2"),
        (repo.clone(), "~0.4 || ~0.5", "v0.5.2"),
        (repo.clone(), "<0.4.2", "v0.4.1"),
        // The step's tag wins over the image's own.
        (format!("{repo}:v0.4.1"), "~0.5", "v0.5.2"),
        // A literal needs no list.
        (repo.clone(), "latest", "latest"),
    ] {
        let r = common::call_with_tag(&runner, &image, tag, set_namespace_rl("tagged"))
            .await
            .unwrap_or_else(|e| panic!("{image} {tag:?}: {e}\n{}", runner.log()));
        assert!(output(&r).contains("namespace: tagged"), "{image} {tag:?}");
        let images: Vec<String> = bed
            .pods()
            .await
            .iter()
            .filter_map(|p| p.spec.as_ref()?.containers.first()?.image.clone())
            .collect();
        assert!(
            images.contains(&format!("{repo}:{want}")),
            "{image} {tag:?} should run {want} in a pod: {images:?}"
        );
    }
    assert_eq!(
        bed.registry
            .runner_requests("/v2/set-namespace/tags/list")
            .len(),
        1,
        "one tag list answers every constraint within --tag-list-ttl"
    );
    let e = common::call_with_tag(&runner, &repo, ">=1.0", set_namespace_rl("none"))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::NotFound, "{e:?}");
    assert!(e.message().contains("\">=1.0\""), "{e:?}");
    assert!(e.message().contains("v0.5.2"), "names the tags seen: {e:?}");
}
