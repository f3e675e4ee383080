//! The pod evaluator on a real node: `krm-fn-runner serve` with the pod
//! runtime against a real kubelet, containerd and runc, kube-proxy, the
//! endpoint controllers, the scheduler and cluster DNS (`node_support`),
//! with the real wrapper-server and catalog function images pulled from a
//! real registry. Each scenario uses its own pod namespace on the one node
//! this test binary starts; the node is removed when the binary ends, also
//! after failures.
//!
//! A custom harness (libtest-mimic): `main` moves the process into its own
//! network namespace before any thread starts, so the node, the runners and
//! the test itself share it and no traffic leaves it.

mod common;
mod k8s_support;
mod node_support;
mod registry_support;

use std::future::Future;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{Runner, eventually};
use k8s_openapi::api::core::v1::{Pod, Service};
use krm_fn_runner::adapters::grpc::pb::{EvaluateFunctionRequest, EvaluateFunctionResponse};
use kube::api::ListParams;
use kube::{Api, Client};
use libtest_mimic::{Arguments, Failed, Trial};
use node_support::{Node, Tools};

/// How long a scenario waits for something the node does (pull, start,
/// graceful deletion: 30 s grace at most).
const PATIENCE: Duration = Duration::from_secs(90);

fn main() -> ExitCode {
    let args = Arguments::from_args();
    let scenarios: Vec<(&'static str, Scenario)> = vec![(
        "cold_start_then_warm_reuse_then_reclaim",
        cold_start_then_warm_reuse_then_reclaim,
    )];
    if args.list {
        let trials = scenarios
            .into_iter()
            .map(|(name, _)| Trial::test(name, || Ok(())))
            .collect();
        return libtest_mimic::run(&args, trials).exit_code();
    }
    let tools = Tools::prepare();
    node_support::clean_stale_nodes();
    node_support::enter_network_namespace();
    let node = Arc::new(
        tokio::runtime::Runtime::new()
            .unwrap()
            .block_on(Node::start(&tools)),
    );
    let trials = scenarios
        .into_iter()
        .map(|(name, scenario)| {
            let node = node.clone();
            Trial::test(name, move || run_scenario(name, &node, scenario))
        })
        .collect();
    let conclusion = libtest_mimic::run(&args, trials);
    match Arc::try_unwrap(node) {
        Ok(node) => drop(node),
        Err(node) => node.stop(),
    }
    conclusion.exit_code()
}

/// A scenario: gets the node and its own pod namespace.
type Scenario = fn(Bed) -> std::pin::Pin<Box<dyn Future<Output = ()> + Send>>;

/// Runs `scenario` on a fresh runtime with a fresh namespace named after it.
fn run_scenario(name: &str, node: &Arc<Node>, scenario: Scenario) -> Result<(), Failed> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let namespace = name.replace('_', "-");
        let namespace = namespace[..namespace.len().min(50)]
            .trim_end_matches('-')
            .to_string();
        let client = node.client().await;
        k8s_support::create_namespace(&client, &namespace).await;
        let bed = Bed {
            node: node.clone(),
            client,
            namespace,
            dir: tempfile::tempdir().unwrap(),
        };
        scenario(bed).await;
    });
    Ok(())
}

/// What a scenario works with.
struct Bed {
    node: Arc<Node>,
    client: Client,
    /// The scenario's pod namespace.
    namespace: String,
    /// Scratch files.
    dir: tempfile::TempDir,
}

impl Bed {
    /// Starts `serve` with the pod runtime only, in the config.yaml
    /// generation (inline templates), on this scenario's namespace, plus
    /// `extra` flags (replacing defaults they name).
    fn runner(&self, extra: &[&str]) -> Runner {
        let kubeconfig = format!(
            "--kubeconfig={}",
            self.node.plane.kubeconfig_file().display()
        );
        let registry = format!("--plain-http-registry={}", self.node.registry.addr);
        let namespace = format!("--pod-namespace={}", self.namespace);
        let cache_config = format!(
            "--pod-cache-config={}",
            self.dir.path().join("absent.yaml").display()
        );
        let mut args = vec![
            "--disable-runtimes=exec",
            &kubeconfig,
            &namespace,
            &registry,
            &cache_config,
            "--warm-up-pod-cache=false",
            "--pod-ttl=20s",
            "--scan-interval=2s",
            "--log-level=3",
        ];
        let flag = |a: &str| a.split('=').next().unwrap_or(a).to_string();
        args.retain(|a| !extra.iter().any(|e| flag(e) == flag(a)));
        args.extend_from_slice(extra);
        let mut cmd = self.node.host_command(&common::runner_binary());
        cmd.env("WRAPPER_SERVER_IMAGE", self.node.wrapper_image());
        Runner::start_command(cmd, &args)
    }

    /// The pods of the namespace.
    async fn pods(&self) -> Vec<Pod> {
        Api::<Pod>::namespaced(self.client.clone(), &self.namespace)
            .list(&ListParams::default())
            .await
            .expect("list pods")
            .items
    }

    /// The services of the namespace.
    async fn services(&self) -> Vec<Service> {
        Api::<Service>::namespaced(self.client.clone(), &self.namespace)
            .list(&ListParams::default())
            .await
            .expect("list services")
            .items
    }
}

/// A ResourceList for set-namespace.
fn set_namespace_rl(namespace: &str) -> Vec<u8> {
    format!(
        "apiVersion: config.kubernetes.io/v1\nkind: ResourceList\nitems:\n- apiVersion: v1\n  kind: ConfigMap\n  metadata:\n    name: cm\n  data:\n    k: v\nfunctionConfig:\n  apiVersion: v1\n  kind: ConfigMap\n  metadata:\n    name: fn\n  data:\n    namespace: {namespace}\n"
    )
    .into_bytes()
}

/// Calls `image` through `runner`.
async fn call(
    runner: &Runner,
    image: &str,
    rl: Vec<u8>,
) -> Result<EvaluateFunctionResponse, tonic::Status> {
    let mut client = runner.client().await;
    client
        .evaluate_function(EvaluateFunctionRequest {
            resource_list: rl.into(),
            image: image.to_string(),
        })
        .await
        .map(|r| r.into_inner())
}

fn output(r: &EvaluateFunctionResponse) -> String {
    String::from_utf8_lossy(&r.resource_list).into_owned()
}

fn cold_start_then_warm_reuse_then_reclaim(
    bed: Bed,
) -> std::pin::Pin<Box<dyn Future<Output = ()> + Send>> {
    Box::pin(async move {
        let runner = bed.runner(&["--pod-ttl=10s"]);
        let image = bed.node.function_image("set-namespace");
        let started = Instant::now();
        let first = call(&runner, &image, set_namespace_rl("cold"))
            .await
            .unwrap_or_else(|e| panic!("first call: {e}\n{}", runner.log()));
        let cold = started.elapsed();
        assert!(
            output(&first).contains("namespace: cold"),
            "{}",
            output(&first)
        );
        let pods = bed.pods().await;
        assert_eq!(pods.len(), 1, "one pod");
        let pod = &pods[0];
        let status = pod.status.as_ref().unwrap();
        assert_eq!(status.phase.as_deref(), Some("Running"));
        let ip = status.pod_ip.clone().unwrap();
        assert!(
            ip.starts_with("10.244.0."),
            "a pod IP of the CNI bridge: {ip}"
        );
        let function = status
            .container_statuses
            .as_ref()
            .unwrap()
            .iter()
            .find(|c| c.name == "function")
            .unwrap();
        assert!(
            function
                .container_id
                .as_deref()
                .unwrap_or_default()
                .starts_with("containerd://"),
            "a real container: {function:?}"
        );
        let started = Instant::now();
        let second = call(&runner, &image, set_namespace_rl("warm"))
            .await
            .unwrap();
        let warm = started.elapsed();
        assert!(output(&second).contains("namespace: warm"));
        assert_eq!(bed.pods().await.len(), 1, "the warm call reused the pod");
        eprintln!("cold start {cold:?}, warm call {warm:?}");
        eventually(
            "GC to reclaim the pod and its service",
            PATIENCE,
            || async {
                (bed.pods().await.is_empty() && bed.services().await.is_empty()).then_some(())
            },
        )
        .await;
    })
}
