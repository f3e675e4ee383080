//! The pod runtime on a real node, side by side with Porch's Go function
//! runner v1.5.3: `cargo bench --bench pod_real`.
//!
//! One node of the real-node bed (`testbed/src/node_support.rs`: kubelet, containerd,
//! runc, kube-proxy, CoreDNS, in a network namespace of this process's own)
//! runs the function pods of three runners, each in a namespace of its own:
//! - ours in `pod-ip` mode (the wrapper's own health check makes a pod
//!   ready; `--wrapper-health-check`, the default),
//! - ours in `service` mode (Porch's addressing: the kubelet's readiness,
//!   then the service's endpoint, then a health check through it),
//! - Porch's runner v1.5.3 (config.yaml generation, its own wrapper-server
//!   image, its inline template: readiness probe every 10 s).
//!
//! Measured, interleaved round by round (the order rotates):
//! - cold start: a call that needs a new pod, the images cached on the node
//!   (the runner's pods deleted and gone before each sample);
//! - warm call: calls on a ready pod over one client connection;
//! - the node's own share of a cold start, measured in the same rounds: a
//!   copy of the pod ours creates (same spec, its own namespace, no runner
//!   watching) created directly, timed until its wrapper server answers a
//!   gRPC health check at the pod IP (the least any runner can wait with
//!   this pod) and until the kubelet reports it Ready (the least a runner
//!   waiting for readiness, as Porch's does, can wait);
//! - time to a clear error when the node cannot pull the image (its layer
//!   missing from the registry, its manifest readable): ours answers with
//!   the kubelet's reason; Porch waits for its fixed 60 s pod-ready timeout.
//!
//! `KRM_FN_BENCH_COLD_ROUNDS` (default 8), `KRM_FN_BENCH_WARM_CALLS` (default
//! 300) and `KRM_FN_BENCH_UNPULLABLE` (ours' samples, default 3; Porch gets
//! two) size the run. Needs root (network namespaces), the node's builds
//! (`scripts/build-node.sh`, `scripts/build-node-images.sh`) and Porch
//! (`scripts/build-porch.sh`), all cached per machine.

use std::time::{Duration, Instant};

use krm_fn_testbed::common;
use krm_fn_testbed::k8s_support;
use krm_fn_testbed::node_support;

use common::{Runner, set_namespace_rl};
use k8s_openapi::api::core::v1::Pod;
use krm_fn_runner::adapters::grpc::pb::EvaluateFunctionRequest;
use krm_fn_runner::adapters::grpc::pb::function_evaluator_client::FunctionEvaluatorClient;
use kube::api::{DeleteParams, ListParams};
use kube::{Api, Client};
use node_support::{Node, Tools};
use tonic::transport::{Channel, Endpoint};

/// A runner under measurement.
struct Contender {
    name: &'static str,
    namespace: String,
    address: String,
    /// Keeps the process alive (killed on drop).
    _process: Process,
}

/// A runner process (ours is killed on drop by [`Runner`] itself).
enum Process {
    /// Held to keep the runner up; dropping it stops the runner.
    Ours {
        _runner: Runner,
    },
    Porch(std::process::Child),
}

impl Drop for Process {
    fn drop(&mut self) {
        if let Process::Porch(child) = self {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

fn env_number(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn main() {
    if !std::env::args().any(|a| a == "--bench") {
        return;
    }
    let node = node_support::enter_and_start(&Tools::prepare());
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(bench(&node));
    node.stop();
}

async fn connect(address: &str) -> FunctionEvaluatorClient<Channel> {
    let channel = Endpoint::from_shared(format!("http://{address}"))
        .unwrap()
        .tcp_nodelay(true)
        .timeout(Duration::from_secs(120))
        .connect()
        .await
        .expect("connect");
    FunctionEvaluatorClient::new(channel)
        .max_decoding_message_size(64 << 20)
        .max_encoding_message_size(64 << 20)
}

/// One call on a fresh connection: its duration, and its error if any.
async fn timed_call(address: &str, image: &str) -> (Duration, Result<(), tonic::Status>) {
    let started = Instant::now();
    let mut client = connect(address).await;
    let r = client
        .evaluate_function(EvaluateFunctionRequest {
            tag: String::new(),
            resource_list: set_namespace_rl("bench").into(),
            image: image.to_string(),
        })
        .await
        .map(|_| ());
    (started.elapsed(), r)
}

/// Deletes every pod of `namespace` and waits until they are gone.
async fn clear_pods(client: &Client, namespace: &str) {
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let _ = pods
        .delete_collection(&DeleteParams::default(), &ListParams::default())
        .await;
    let deadline = Instant::now() + Duration::from_secs(90);
    while Instant::now() < deadline {
        if pods
            .list(&ListParams::default())
            .await
            .map(|l| l.items.is_empty())
            .unwrap_or(false)
        {
            return;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    panic!("the pods of {namespace} did not go within 90 s");
}

/// One sample of the node alone: creates a pod named `name` in
/// `namespace` from `spec` (a copy of a spec ours created), then polls
/// (every 10 ms) its status for the pod IP and its wrapper server there
/// for a gRPC health answer, and the status for the kubelet's Ready.
/// Returns the time to a serving wrapper and to Ready, from the create
/// call; deletes the pod (no grace) and waits until it is gone.
async fn node_floor(
    client: &Client,
    namespace: &str,
    name: &str,
    spec: &k8s_openapi::api::core::v1::PodSpec,
) -> (Duration, Duration) {
    use tonic_health::pb::HealthCheckRequest;
    use tonic_health::pb::health_check_response::ServingStatus;
    use tonic_health::pb::health_client::HealthClient;
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let pod = Pod {
        metadata: kube::api::ObjectMeta {
            name: Some(name.to_string()),
            ..Default::default()
        },
        spec: Some(spec.clone()),
        status: None,
    };
    let started = Instant::now();
    pods.create(&kube::api::PostParams::default(), &pod)
        .await
        .expect("create the floor pod");
    let (mut serving, mut ready) = (None, None);
    let deadline = started + Duration::from_secs(60);
    while (serving.is_none() || ready.is_none()) && Instant::now() < deadline {
        let Ok(p) = pods.get(name).await else {
            continue;
        };
        let status = p.status.unwrap_or_default();
        if ready.is_none()
            && status
                .conditions
                .iter()
                .flatten()
                .any(|c| c.type_ == "Ready" && c.status == "True")
        {
            ready = Some(started.elapsed());
        }
        if serving.is_none()
            && let Some(ip) = status.pod_ip
        {
            let endpoint = Endpoint::from_shared(format!(
                "http://{ip}:{}",
                krm_fn_runner::domain::pod_cache::WRAPPER_PORT
            ))
            .unwrap()
            .connect_timeout(Duration::from_millis(100))
            .timeout(Duration::from_millis(200));
            if let Ok(channel) = endpoint.connect().await
                && let Ok(r) = HealthClient::new(channel)
                    .check(HealthCheckRequest::default())
                    .await
                && r.get_ref().status == ServingStatus::Serving as i32
            {
                serving = Some(started.elapsed());
            }
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let _ = pods
        .delete(name, &DeleteParams::default().grace_period(0))
        .await;
    clear_pods(client, namespace).await;
    (
        serving.expect("the floor pod's wrapper answered within 60 s"),
        ready.expect("the floor pod became Ready within 60 s"),
    )
}

fn quantile(sorted: &[Duration], q: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    sorted[((sorted.len() as f64 - 1.0) * q).round() as usize]
}

fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1e3)
}

/// Starts ours on `namespace` with the pod runtime only and `mode`.
fn start_ours(node: &Node, namespace: &str, mode: &str, dir: &std::path::Path) -> Contender {
    let args = [
        "--disable-runtimes=exec".to_string(),
        format!("--kubeconfig={}", node.plane.kubeconfig_file().display()),
        format!("--pod-namespace={namespace}"),
        format!("--plain-http-registry={}", node.registry.addr),
        format!("--pod-cache-config={}", dir.join("absent.yaml").display()),
        "--warm-up-pod-cache=false".into(),
        "--pod-ttl=30m".into(),
        format!("--pod-address-mode={mode}"),
        "--log-level=1".into(),
    ];
    let mut cmd = node.host_command(&common::runner_binary());
    cmd.arg("serve")
        .env("WRAPPER_SERVER_IMAGE", node.wrapper_image());
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    let runner = Runner::start_command(cmd, &refs);
    Contender {
        name: if mode == "pod-ip" {
            "krm-fn-runner (pod-ip)"
        } else {
            "krm-fn-runner (service)"
        },
        namespace: namespace.to_string(),
        address: runner.address.clone(),
        _process: Process::Ours { _runner: runner },
    }
}

/// Starts Porch's runner v1.5.3 on `namespace` with the pod runtime only
/// and Porch's own wrapper-server image.
fn start_porch(node: &Node, namespace: &str, dir: &std::path::Path) -> Contender {
    let porch = k8s_support::cached_build("KRM_FN_PORCH", "scripts/build-porch.sh");
    let port = common::free_port();
    let log = std::fs::File::create(dir.join("porch-function-runner.log")).unwrap();
    let child = node
        .host_command(&porch.join("porch-function-runner"))
        .arg(format!("--port={port}"))
        .arg("--disable-runtimes=exec")
        .arg(format!("--pod-namespace={namespace}"))
        .arg(format!(
            "--pod-cache-config={}",
            dir.join("absent.yaml").display()
        ))
        .arg("--warm-up-pod-cache=false")
        .arg("--pod-ttl=30m")
        .arg(format!(
            "--kubeconfig={}",
            node.plane.kubeconfig_file().display()
        ))
        .env("WRAPPER_SERVER_IMAGE", node.porch_wrapper_image())
        .env("OTEL_TRACES_EXPORTER", "none")
        .env("OTEL_METRICS_EXPORTER", "none")
        .stdout(std::process::Stdio::null())
        .stderr(log)
        .spawn()
        .expect("start porch-function-runner");
    let deadline = Instant::now() + Duration::from_secs(30);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            Instant::now() < deadline,
            "porch-function-runner did not listen"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    Contender {
        name: "porch-function-runner v1.5.3",
        namespace: namespace.to_string(),
        address: format!("127.0.0.1:{port}"),
        _process: Process::Porch(child),
    }
}

async fn bench(node: &Node) {
    let cold_rounds = env_number("KRM_FN_BENCH_COLD_ROUNDS", 8);
    let warm_calls = env_number("KRM_FN_BENCH_WARM_CALLS", 300);
    let unpullable_samples = env_number("KRM_FN_BENCH_UNPULLABLE", 3);
    let client = node.client().await;
    let dir = tempfile::tempdir().unwrap();
    for ns in ["bench-ours-ip", "bench-ours-svc", "bench-porch"] {
        k8s_support::create_namespace(&client, ns).await;
    }
    let contenders = [
        start_ours(node, "bench-ours-ip", "pod-ip", dir.path()),
        start_ours(node, "bench-ours-svc", "service", dir.path()),
        start_porch(node, "bench-porch", dir.path()),
    ];
    let image = node.function_image("set-namespace");

    // Pull the images once (the samples are of a cached image).
    for c in &contenders {
        let (took, r) = timed_call(&c.address, &image).await;
        eprintln!(
            "{}: first call (pulls the images) {} {:?}",
            c.name,
            ms(took),
            r.err()
        );
    }

    // The spec of the pod ours (pod-ip) created, for the node's own share.
    let mut spec = Api::<Pod>::namespaced(client.clone(), "bench-ours-ip")
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .next()
        .and_then(|p| p.spec)
        .expect("ours created a pod");
    spec.node_name = None;
    k8s_support::create_namespace(&client, "bench-floor").await;
    let (mut floor_serving, mut floor_ready) = (Vec::new(), Vec::new());

    // Cold starts, interleaved.
    let mut cold: Vec<Vec<Duration>> = vec![Vec::new(); contenders.len()];
    let mut cold_errors = vec![0usize; contenders.len()];
    for round in 0..cold_rounds {
        for k in 0..contenders.len() {
            let i = (round + k) % contenders.len();
            let c = &contenders[i];
            clear_pods(&client, &c.namespace).await;
            // Let the runner see the deletion before the next call.
            tokio::time::sleep(Duration::from_secs(2)).await;
            let (took, r) = timed_call(&c.address, &image).await;
            match r {
                Ok(()) => cold[i].push(took),
                Err(e) => {
                    cold_errors[i] += 1;
                    eprintln!("{} cold round {round}: {e:?}", c.name);
                }
            }
            eprintln!("{} cold round {round}: {}", c.name, ms(took));
        }
        let (serving, ready) =
            node_floor(&client, "bench-floor", &format!("floor-{round}"), &spec).await;
        eprintln!(
            "the node alone, round {round}: wrapper serving {}, Ready {}",
            ms(serving),
            ms(ready)
        );
        floor_serving.push(serving);
        floor_ready.push(ready);
    }

    // Warm calls over one connection each, in interleaved blocks of 50.
    let mut warm: Vec<Vec<Duration>> = vec![Vec::new(); contenders.len()];
    let mut clients = Vec::new();
    for c in &contenders {
        let mut client = connect(&c.address).await;
        // A ready pod first.
        client
            .evaluate_function(EvaluateFunctionRequest {
                tag: String::new(),
                resource_list: set_namespace_rl("warm").into(),
                image: image.clone(),
            })
            .await
            .unwrap_or_else(|e| panic!("{}: {e:?}", c.name));
        clients.push(client);
    }
    for _ in 0..warm_calls.div_ceil(50) {
        for (i, client) in clients.iter_mut().enumerate() {
            for _ in 0..50 {
                let started = Instant::now();
                client
                    .evaluate_function(EvaluateFunctionRequest {
                        tag: String::new(),
                        resource_list: set_namespace_rl("warm").into(),
                        image: image.clone(),
                    })
                    .await
                    .unwrap_or_else(|e| panic!("{}: {e:?}", contenders[i].name));
                warm[i].push(started.elapsed());
            }
        }
    }

    // Time to a clear error for an image the node cannot pull.
    let broken = node.unpullable_image("broken/no-layer:v1").await;
    let mut unpullable: Vec<Vec<(Duration, String)>> = vec![Vec::new(); contenders.len()];
    for (i, c) in contenders.iter().enumerate() {
        let samples = if c.name.starts_with("porch") {
            unpullable_samples.min(2)
        } else {
            unpullable_samples
        };
        for _ in 0..samples {
            let (took, r) = timed_call(&c.address, &broken).await;
            let message = match r {
                Ok(()) => "succeeded?".to_string(),
                Err(e) => format!("{:?}: {}", e.code(), e.message()),
            };
            eprintln!("{} unpullable: {} {message}", c.name, ms(took));
            unpullable[i].push((took, message));
            clear_pods(&client, &c.namespace).await;
        }
    }

    floor_serving.sort();
    floor_ready.sort();
    println!(
        "\nthe node alone (a copy of ours' pod created directly): wrapper serving p50 / p95 {} / {}, kubelet's Ready p50 / p95 {} / {} ({} rounds)",
        ms(quantile(&floor_serving, 0.5)),
        ms(quantile(&floor_serving, 0.95)),
        ms(quantile(&floor_ready, 0.5)),
        ms(quantile(&floor_ready, 0.95)),
        floor_serving.len()
    );
    println!(
        "\n| | cold start p50 / p95 (n, errors) | warm call p50 / p99 | unpullable image: time to error, first words |"
    );
    println!("|---|---|---|---|");
    for (i, c) in contenders.iter().enumerate() {
        cold[i].sort();
        warm[i].sort();
        let u = &unpullable[i];
        let mut times: Vec<Duration> = u.iter().map(|(d, _)| *d).collect();
        times.sort();
        let first = u
            .first()
            .map(|(_, m)| m.chars().take(110).collect::<String>())
            .unwrap_or_default();
        println!(
            "| {} | {} / {} ({}, {}) | {} / {} | {} ({}) |",
            c.name,
            ms(quantile(&cold[i], 0.5)),
            ms(quantile(&cold[i], 0.95)),
            cold[i].len(),
            cold_errors[i],
            ms(quantile(&warm[i], 0.5)),
            ms(quantile(&warm[i], 0.99)),
            ms(quantile(&times, 0.5)),
            first
        );
    }
}
