//! The warm pod path: EvaluateFunction through `krm-fn-runner serve` with
//! the pod runtime (a ready pod, so the runner only picks the pod and
//! forwards the call over its pooled connection) versus a direct call to
//! the same wrapper server, interleaved in one run. Prints the p50, p90 and
//! p99 of both and the runner's added latency at p50 and p99 (targets: at
//! most 0.2 ms and 0.5 ms). `KRM_FN_RUNNER_BIN` runs another build of the
//! runner (an A/B pair on the same machine).
//!
//! Runs on the pod evaluator's test bed (kube-apiserver and etcd from
//! `scripts/build-test-apiserver.sh`, Debian's `docker-registry`, the test
//! kubelet); the function is `cat`, so the function's own run time barely
//! adds noise. Run: `cargo bench --bench pod_warm`.

use std::time::{Duration, Instant};

use krm_fn_testbed::common;
use krm_fn_testbed::k8s_support;
use krm_fn_testbed::kubelet;
use krm_fn_testbed::registry_support;

use krm_fn_runner::adapters::grpc::pb::EvaluateFunctionRequest;
use krm_fn_runner::adapters::grpc::pb::function_evaluator_client::FunctionEvaluatorClient;
use tonic::transport::{Channel, Endpoint};

const NS: &str = "porch-fn-system";
const ROUNDS: usize = 2000;
const INPUT: &str = "apiVersion: config.kubernetes.io/v1\nkind: ResourceList\nitems:\n- apiVersion: v1\n  kind: ConfigMap\n  metadata:\n    name: cm\n  data:\n    k: v\n";

async fn once(client: &mut FunctionEvaluatorClient<Channel>, image: &str) -> Duration {
    let started = Instant::now();
    let r = client
        .evaluate_function(EvaluateFunctionRequest {
            tag: String::new(),
            resource_list: INPUT.as_bytes().to_vec().into(),
            image: image.to_string(),
        })
        .await
        .expect("evaluate");
    let took = started.elapsed();
    assert_eq!(r.into_inner().resource_list.as_ref(), INPUT.as_bytes());
    took
}

fn percentile(sorted: &[Duration], p: f64) -> f64 {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i].as_secs_f64() * 1e3
}

async fn connect(address: &str) -> FunctionEvaluatorClient<Channel> {
    let channel = Endpoint::from_shared(format!("http://{address}"))
        .unwrap()
        .tcp_nodelay(true)
        .connect()
        .await
        .expect("connect");
    FunctionEvaluatorClient::new(channel)
}

async fn run() {
    let plane = k8s_support::ControlPlane::start().await;
    let client = plane.client().await.unwrap();
    k8s_support::create_namespace(&client, NS).await;
    let registry = registry_support::TestRegistry::start(registry_support::Setup::anonymous());
    registry
        .push_image(
            "echo:v1",
            "amd64",
            Some(&["/usr/local/bin/function"]),
            None,
            "echo",
        )
        .await;
    let dir = tempfile::tempdir().unwrap();
    let functions = dir.path().join("functions");
    std::fs::create_dir_all(&functions).unwrap();
    std::os::unix::fs::symlink("/bin/cat", functions.join("echo")).unwrap();
    let map = dir.path().join("wrappers.map");
    let kubelet = kubelet::Kubelet::start(client.clone(), NS, functions, map.clone());
    let runner = common::Runner::start_with_env(
        &[
            "--disable-runtimes=exec",
            &format!("--kubeconfig={}", plane.kubeconfig_file().display()),
            "--pod-namespace",
            NS,
            &format!("--wrapper-address-map={}", map.display()),
            &format!("--plain-http-registry={}", registry.addr),
            &format!(
                "--pod-cache-config={}",
                dir.path().join("none.yaml").display()
            ),
            "--warm-up-pod-cache=false",
            "--log-level=1",
        ],
        &[("WRAPPER_SERVER_IMAGE", "example.com/wrapper:bench")],
    );
    let image = format!("{}/echo:v1", registry.addr);
    let mut via_runner = connect(&runner.address).await;
    once(&mut via_runner, &image).await;
    let pod = kubelet.running_pods().pop().expect("a pod");
    let mut direct = connect(&kubelet.wrapper_address(&pod).unwrap()).await;
    for _ in 0..50 {
        once(&mut via_runner, &image).await;
        once(&mut direct, &image).await;
    }
    let (mut a, mut b) = (Vec::with_capacity(ROUNDS), Vec::with_capacity(ROUNDS));
    for _ in 0..ROUNDS {
        b.push(once(&mut direct, &image).await);
        a.push(once(&mut via_runner, &image).await);
    }
    a.sort();
    b.sort();
    let (a50, b50) = (percentile(&a, 0.5), percentile(&b, 0.5));
    let (a99, b99) = (percentile(&a, 0.99), percentile(&b, 0.99));
    println!(
        "warm pod path ({ROUNDS} calls each, interleaved): direct to the wrapper p50 {b50:.3} ms p90 {:.3} ms p99 {b99:.3} ms; \
         through the runner p50 {a50:.3} ms p90 {:.3} ms p99 {a99:.3} ms; \
         added at p50 {:.3} ms (target <= 0.2 ms), at p99 {:.3} ms (target <= 0.5 ms)",
        percentile(&b, 0.9),
        percentile(&a, 0.9),
        a50 - b50,
        a99 - b99
    );
    assert_eq!(kubelet.started(), 1, "every call ran on the one warm pod");
    drop(runner);
    drop(kubelet);
}

fn main() {
    common::bench_main(run);
}
