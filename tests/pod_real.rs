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

use krm_fn_testbed::common;
use krm_fn_testbed::k8s_support;
use krm_fn_testbed::node_support;
use krm_fn_testbed::porch_support;
use krm_fn_testbed::replicas_support;

use std::future::Future;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{Runner, call, eventually, output, set_namespace_rl};
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret, Service};
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use libtest_mimic::{Arguments, Failed, Trial};
use node_support::{Node, Tools};
use tonic::Code;

/// How long a scenario waits for something the node does (pull, start,
/// graceful deletion: 30 s grace at most).
const PATIENCE: Duration = Duration::from_secs(90);

/// The scenarios, named after their functions.
macro_rules! scenarios {
    ($($f:ident),* $(,)?) => {
        vec![$((stringify!($f), $f as Scenario)),*]
    };
}

fn main() -> ExitCode {
    let args = Arguments::from_args();
    let scenarios = scenarios![
        cold_start_then_warm_reuse_then_reclaim,
        pod_ip_mode_calls_a_wrapper_before_the_kubelet_reports_it_ready,
        a_pod_deleted_while_in_use_finishes_its_call_and_takes_no_more,
        an_image_the_node_cannot_pull_fails_the_call_at_once,
        container_errors_fail_the_call_at_once_with_the_kubelets_reason,
        a_private_registry_is_pulled_with_the_runners_pull_secret,
        a_restarted_runner_adopts_its_live_pod,
        a_warm_pool_name_held_by_a_terminating_pod_is_waited_for,
        two_replicas_share_a_warm_pool,
        porchs_template_and_a_memory_limit_override,
        the_config_yaml_generation_runs_porchs_own_wrapper_image,
        replicas_behind_a_cluster_ip_take_turns_with_ageing_and_not_without,
        a_replica_added_behind_the_cluster_ip_is_reached,
        porch_server_renders_a_package_revision_through_our_pods,
        the_pod_evaluator_role_answers_image_and_tag_on_port_9447,
    ];
    if args.list {
        let trials = scenarios
            .into_iter()
            .map(|(name, _)| Trial::test(name, || Ok(())))
            .collect();
        return libtest_mimic::run(&args, trials).exit_code();
    }
    let node = Arc::new(node_support::enter_and_start(&Tools::prepare()));
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
        self.runner_with_env(extra, &[])
    }

    /// As [`Bed::runner`], with extra environment variables (replacing
    /// `WRAPPER_SERVER_IMAGE` when they name it).
    fn runner_with_env(&self, extra: &[&str], env: &[(&str, &str)]) -> Runner {
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
        cmd.arg("serve")
            .env("WRAPPER_SERVER_IMAGE", self.node.wrapper_image());
        cmd.envs(env.iter().copied());
        Runner::start_command(cmd, &args)
    }

    /// Starts `serve` in the FunctionConfig generation (no config.yaml
    /// flags; Porch's CRDs installed) with the pod runtime only, on this
    /// scenario's namespace, plus `extra` flags.
    fn gen_c_runner(&self, extra: &[&str]) -> Runner {
        let kubeconfig = format!(
            "--kubeconfig={}",
            self.node.plane.kubeconfig_file().display()
        );
        let registry = format!("--plain-http-registry={}", self.node.registry.addr);
        let namespace = format!("--pod-namespace={}", self.namespace);
        let mut args = vec![
            "--disable-runtimes=exec",
            &kubeconfig,
            &namespace,
            &registry,
            "--warm-up-pod-cache=false",
            "--pod-ttl=20s",
            "--scan-interval=2s",
            "--log-level=3",
        ];
        args.extend_from_slice(extra);
        let mut cmd = self.node.host_command(&common::runner_binary());
        cmd.arg("serve")
            .env("WRAPPER_SERVER_IMAGE", self.node.wrapper_image());
        Runner::start_command(cmd, &args)
    }

    fn pod_api(&self) -> Api<Pod> {
        Api::namespaced(self.client.clone(), &self.namespace)
    }

    /// The pods of the namespace without a deletion timestamp.
    async fn live_pods(&self) -> Vec<Pod> {
        self.pods()
            .await
            .into_iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none())
            .collect()
    }

    /// Waits until GC has removed every pod and service of the namespace.
    async fn assert_clean(&self) {
        eventually("GC to remove every pod and service", PATIENCE, || async {
            (self.pods().await.is_empty() && self.services().await.is_empty()).then_some(())
        })
        .await;
    }

    /// Creates a Gen B pod-template ConfigMap `name` in this namespace from
    /// the inline default template (with `edit` applied to its JSON), for
    /// `--function-pod-template=<namespace>/<name>`.
    async fn template_config_map(
        &self,
        name: &str,
        edit: impl FnOnce(&mut serde_json::Value),
    ) -> String {
        use krm_fn_runner::domain::pod_cache::template::{
            default_pod_template, default_service_template,
        };
        let mut pod =
            serde_json::to_value(default_pod_template(&self.node.wrapper_image())).unwrap();
        edit(&mut pod);
        let service = serde_json::to_value(default_service_template()).unwrap();
        let cm: ConfigMap = serde_json::from_value(serde_json::json!({
            "metadata": {"name": name},
            "data": {
                "template": serde_json::to_string(&pod).unwrap(),
                "serviceTemplate": serde_json::to_string(&service).unwrap(),
            },
        }))
        .unwrap();
        Api::<ConfigMap>::namespaced(self.client.clone(), &self.namespace)
            .create(&PostParams::default(), &cm)
            .await
            .expect("create the template ConfigMap");
        format!("--function-pod-template={}/{name}", self.namespace)
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

/// A ResourceList on which starlark spins for `seconds` or so (a loop the
/// function cannot skip).
fn slow_starlark_rl(iterations: u64) -> Vec<u8> {
    format!("apiVersion: config.kubernetes.io/v1\nkind: ResourceList\nitems: []\nfunctionConfig:\n  apiVersion: fn.kpt.dev/v1alpha1\n  kind: StarlarkRun\n  metadata:\n    name: slow\n  source: |\n    def spin():\n      n = 0\n      for i in range({iterations}):\n        n += i\n      return n\n    spin()\n")
        .into_bytes()
}

/// Whether the pod's `Ready` condition is `True`.
fn is_ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// The pods the runner's log says its calls ran in, in the order the
/// calls came in (by request id).
fn pods_called(runner: &Runner) -> Vec<String> {
    let field = |l: &str, key: &str| -> Option<String> {
        let rest = &l[l.find(key)? + key.len()..];
        Some(rest.split([' ', '}']).next()?.to_string())
    };
    let mut calls: Vec<(u64, String)> = runner
        .log()
        .lines()
        .filter(|l| l.contains("evaluated in pod"))
        .filter_map(|l| Some((field(l, "request_id=")?.parse().ok()?, field(l, " pod=")?)))
        .collect();
    calls.sort();
    calls.into_iter().map(|(_, pod)| pod).collect()
}

/// Boxes a scenario's future.
fn scenario(
    f: impl Future<Output = ()> + Send + 'static,
) -> std::pin::Pin<Box<dyn Future<Output = ()> + Send>> {
    Box::pin(f)
}

/// The first call of a function creates its pod (a real container on the
/// CNI bridge, pulled from the registry) and runs in it; the second reuses
/// it without a new pod; after the TTL, GC deletes the pod and its service
/// (graceful termination included) and the namespace is empty again.
fn cold_start_then_warm_reuse_then_reclaim(
    bed: Bed,
) -> std::pin::Pin<Box<dyn Future<Output = ()> + Send>> {
    scenario(async move {
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
        bed.assert_clean().await;
    })
}

/// In pod-IP mode the runner asks a starting pod's wrapper server for its
/// health itself: the call is served by a pod the kubelet does not report
/// ready yet (its readiness probe waits 30 s here); without the health
/// check the call waits for the kubelet.
fn pod_ip_mode_calls_a_wrapper_before_the_kubelet_reports_it_ready(
    bed: Bed,
) -> std::pin::Pin<Box<dyn Future<Output = ()> + Send>> {
    scenario(async move {
        let template = bed
            .template_config_map("late-probe", |pod| {
                pod["spec"]["containers"][0]["readinessProbe"]["initialDelaySeconds"] = 30.into();
            })
            .await;
        let image = bed.node.function_image("set-namespace");
        let runner = bed.runner(&["--pod-address-mode=pod-ip", &template]);
        let first = call(&runner, &image, set_namespace_rl("early"))
            .await
            .unwrap_or_else(|e| panic!("first call: {e}\n{}", runner.log()));
        assert!(output(&first).contains("namespace: early"));
        let pods = bed.live_pods().await;
        assert_eq!(pods.len(), 1);
        assert!(
            !is_ready(&pods[0]),
            "the call was served before the kubelet's first readiness probe: {:?}",
            pods[0].status
        );
        assert!(
            runner
                .log()
                .contains("wrapper server answers its health check"),
            "{}",
            runner.log()
        );
        drop(runner);
        // Without the runner's own check the call waits for the kubelet.
        let ns = &bed.namespace;
        let slow = bed.runner(&[
            "--pod-address-mode=pod-ip",
            &template,
            "--wrapper-health-check=false",
            "--replica-token=slow",
            "--max-parallel-pods-per-function=2",
        ]);
        bed.pod_api()
            .delete_collection(&DeleteParams::default(), &ListParams::default())
            .await
            .unwrap();
        eventually("the first pod to go", PATIENCE, || async {
            bed.pods().await.is_empty().then_some(())
        })
        .await;
        let second = call(&slow, &image, set_namespace_rl(ns)).await.unwrap();
        assert!(output(&second).contains(&format!("namespace: {ns}")));
        let pods = bed.live_pods().await;
        assert_eq!(pods.len(), 1);
        assert!(
            is_ready(&pods[0]),
            "without the check the call waited for Ready"
        );
    })
}

/// A pod deleted (graceful, 30 s) while a call runs in it: the kubelet
/// keeps it Running and Ready with a deletion timestamp while the wrapper
/// finishes the call; the call succeeds, and the next call goes to a new
/// pod, never to the terminating one.
fn a_pod_deleted_while_in_use_finishes_its_call_and_takes_no_more(
    bed: Bed,
) -> std::pin::Pin<Box<dyn Future<Output = ()> + Send>> {
    scenario(async move {
        let runner = Arc::new(bed.runner(&["--max-parallel-pods-per-function=2"]));
        let image = bed.node.function_image("starlark");
        call(&runner, &image, slow_starlark_rl(10))
            .await
            .expect("warm the pod");
        let first = bed.live_pods().await.remove(0);
        let first_name = first.metadata.name.clone().unwrap();
        let (r, i) = (runner.clone(), image.clone());
        let slow = tokio::spawn(async move { call(&r, &i, slow_starlark_rl(20_000_000)).await });
        // The call is in the pod once the runner logs nothing new for it;
        // give it a moment to start.
        tokio::time::sleep(Duration::from_secs(1)).await;
        bed.pod_api()
            .delete(&first_name, &DeleteParams::default())
            .await
            .expect("delete the pod");
        eventually("the deletion to be seen", PATIENCE, || async {
            let p = bed.pod_api().get_opt(&first_name).await.ok().flatten()?;
            p.metadata.deletion_timestamp.is_some().then_some(())
        })
        .await;
        let next = call(&runner, &image, slow_starlark_rl(10))
            .await
            .expect("a call after the deletion");
        assert!(output(&next).contains("ResourceList"));
        let outcome = slow.await.unwrap();
        outcome.unwrap_or_else(|e| panic!("the call in the deleted pod: {e}\n{}", runner.log()));
        let called = pods_called(&runner);
        assert_eq!(called.len(), 3, "{called:?}");
        assert_eq!(called[0], first_name);
        assert_eq!(called[1], first_name, "the slow call ran in the first pod");
        assert_ne!(
            called[2], first_name,
            "no call after the deletion went to the terminating pod"
        );
        eventually("the deleted pod to go", PATIENCE, || async {
            bed.pod_api()
                .get_opt(&first_name)
                .await
                .ok()
                .flatten()
                .is_none()
                .then_some(())
        })
        .await;
        drop(runner);
    })
}

/// An image whose manifest and config the runner reads (its entrypoint)
/// but whose layer the node cannot pull: the kubelet reports
/// `ErrImagePull` within seconds, and the call fails with that reason and
/// what to check, not at the pod-ready deadline; the pod is removed and
/// the next call tries again.
fn an_image_the_node_cannot_pull_fails_the_call_at_once(
    bed: Bed,
) -> std::pin::Pin<Box<dyn Future<Output = ()> + Send>> {
    scenario(async move {
        let repo_tag = "broken/no-layer:v1";
        let image = bed.node.unpullable_image(repo_tag).await;
        let runner = bed.runner(&["--pod-ready-timeout=120s"]);
        let started = Instant::now();
        let err = call(&runner, &image, set_namespace_rl("x"))
            .await
            .expect_err("the pull fails");
        eprintln!("unpullable image answered in {:?}", started.elapsed());
        assert_eq!(err.code(), Code::Unavailable, "{err:?}");
        let message = err.message();
        for part in [
            "ErrImagePull",
            "cannot start",
            repo_tag,
            "check that the image exists",
        ] {
            assert!(message.contains(part), "{part:?} in {message}");
        }
        eventually("the broken pod to be removed", PATIENCE, || async {
            bed.live_pods().await.is_empty().then_some(())
        })
        .await;
        let again = call(&runner, &image, set_namespace_rl("x"))
            .await
            .expect_err("fails again");
        assert!(again.message().contains("ErrImagePull"), "{again:?}");
        let created = runner.log().matches("creating function pod").count();
        assert_eq!(created, 2, "the second call tried a new pod");
    })
}

/// Templates whose containers the kubelet cannot run: an invalid wrapper
/// image name (`InvalidImageName`), a missing ConfigMap in `envFrom`
/// (`CreateContainerConfigError`), a wrapper that exits at once (a crash,
/// then `CrashLoopBackOff`). Each call fails at once naming the kubelet's
/// reason, and the broken pod is removed.
fn container_errors_fail_the_call_at_once_with_the_kubelets_reason(
    bed: Bed,
) -> std::pin::Pin<Box<dyn Future<Output = ()> + Send>> {
    scenario(async move {
        let image = bed.node.function_image("set-namespace");
        let invalid = bed
            .node
            .wrapper_image()
            .replace("krm/wrapper-server", "KRM/Wrapper-Server");
        // (what the error names, the template flag, extra environment)
        type Case<'a> = (&'a str, String, Vec<(&'a str, String)>);
        let cases: Vec<Case> = vec![
            (
                "InvalidImageName",
                bed.template_config_map("invalid-image", |_| {}).await,
                vec![("WRAPPER_SERVER_IMAGE", invalid)],
            ),
            (
                // The kubelet's warning names the error; its status, later,
                // says CreateContainerConfigError.
                "configmap \"no-such-config-map\" not found",
                bed.template_config_map("missing-config", |pod| {
                    pod["spec"]["containers"][0]["envFrom"] =
                        serde_json::json!([{"configMapRef": {"name": "no-such-config-map"}}]);
                })
                .await,
                vec![],
            ),
            (
                "the wrapper server in the function container exits",
                bed.template_config_map("crashing", |pod| {
                    pod["spec"]["containers"][0]["args"] = serde_json::json!(["--no-such-flag"]);
                })
                .await,
                vec![],
            ),
        ];
        for (reason, template, env) in cases {
            let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
            let runner = bed.runner_with_env(&["--pod-ready-timeout=120s", &template], &env);
            let err = call(&runner, &image, set_namespace_rl("x"))
                .await
                .expect_err("the pod cannot start");
            assert_eq!(err.code(), Code::Unavailable, "{reason}: {err:?}");
            assert!(
                err.message().contains("cannot start"),
                "{reason}: {}",
                err.message()
            );
            assert!(
                err.message().contains(reason),
                "{reason}: {}",
                err.message()
            );
            eventually("the broken pod to be removed", PATIENCE, || async {
                bed.live_pods().await.is_empty().then_some(())
            })
            .await;
        }
    })
}

/// A private registry (basic auth and TLS): the runner reads the image
/// with its mounted Docker config and CA, creates the pull secret in the
/// pod namespace and names it in the pod; the real kubelet pulls with it
/// (the node trusts the registry's CA but has no credentials of its own).
fn a_private_registry_is_pulled_with_the_runners_pull_secret(
    bed: Bed,
) -> std::pin::Pin<Box<dyn Future<Output = ()> + Send>> {
    scenario(async move {
        let private = &bed.node.private_registry;
        let config = private.docker_config(
            &format!("{}.json", bed.namespace),
            &private.addr,
            node_support::PRIVATE_USER,
            node_support::PRIVATE_PASSWORD,
        );
        let ca = private.ca_dir.clone().unwrap();
        let version = common::catalog_version("set-namespace");
        let image = format!("{}/krm-fn/set-namespace:{version}", private.addr);
        let secret_path = format!("--registry-auth-secret-path={}", config.display());
        let tls_path = format!("--tls-secret-path={}/", ca.display());
        let runner = bed.runner(&[
            "--enable-private-registries",
            &secret_path,
            "--enable-private-registries-tls",
            &tls_path,
            "--registry-auth-secret-name=pull-me",
        ]);
        let r = call(&runner, &image, set_namespace_rl("private"))
            .await
            .unwrap_or_else(|e| panic!("{e}\n{}", runner.log()));
        assert!(output(&r).contains("namespace: private"));
        let pod = bed.live_pods().await.remove(0);
        let secrets: Vec<String> = pod
            .spec
            .unwrap()
            .image_pull_secrets
            .unwrap_or_default()
            .into_iter()
            .map(|s| s.name)
            .collect();
        assert_eq!(secrets, ["pull-me"]);
        let secret = Api::<Secret>::namespaced(bed.client.clone(), &bed.namespace)
            .get("pull-me")
            .await
            .expect("the pull secret");
        assert_eq!(
            secret.type_.as_deref(),
            Some("kubernetes.io/dockerconfigjson")
        );
        // The registry refuses anonymous pulls, and the node has no
        // credentials of its own: the pull secret is what the kubelet used.
        let anonymous = std::process::Command::new("curl")
            .args(["-s", "-o", "/dev/null", "-w", "%{http_code}", "--cacert"])
            .arg(ca.join("ca.crt"))
            .arg(format!(
                "https://{}/v2/krm-fn/set-namespace/manifests/{version}",
                private.addr
            ))
            .output()
            .unwrap();
        assert_eq!(String::from_utf8_lossy(&anonymous.stdout), "401");
    })
}

/// A runner killed (SIGKILL) leaves its pod; the next runner adopts it:
/// its call runs in that pod and no pod is created.
fn a_restarted_runner_adopts_its_live_pod(
    bed: Bed,
) -> std::pin::Pin<Box<dyn Future<Output = ()> + Send>> {
    scenario(async move {
        let image = bed.node.function_image("set-namespace");
        let mut first = bed.runner(&["--pod-ttl=60s"]);
        call(&first, &image, set_namespace_rl("one")).await.unwrap();
        let pod = bed.live_pods().await.remove(0).metadata.name.unwrap();
        first.kill();
        let second = bed.runner(&["--pod-ttl=60s"]);
        eventually("the second runner to serve", PATIENCE, || async {
            (common::health(&second).await == common::SERVING).then_some(())
        })
        .await;
        let r = call(&second, &image, set_namespace_rl("two"))
            .await
            .unwrap();
        assert!(output(&r).contains("namespace: two"));
        assert_eq!(pods_called(&second), [pod], "{}", second.log());
        assert!(
            !second.log().contains("creating function pod"),
            "{}",
            second.log()
        );
        assert_eq!(bed.live_pods().await.len(), 1);
    })
}

/// A warm pool of one (`minReady: 1`, `maxPods: 1`) whose pod is deleted
/// and held terminating (a finalizer stands in for a long grace period):
/// a call meanwhile waits for the name instead of failing, and runs in the
/// pod created again under the same name once the old one is gone.
fn a_warm_pool_name_held_by_a_terminating_pod_is_waited_for(
    bed: Bed,
) -> std::pin::Pin<Box<dyn Future<Output = ()> + Send>> {
    scenario(async move {
        let image = bed.node.function_image("set-namespace");
        let config = bed.dir.path().join("pool.yaml");
        std::fs::write(
            &config,
            format!("- name: {image}\n  timeToLive: 60s\n  minReady: 1\n  maxPods: 1\n"),
        )
        .unwrap();
        let runner = Arc::new(bed.runner(&[&format!("--pod-cache-config={}", config.display())]));
        let warm = eventually("the warm pod to be ready", PATIENCE, || async {
            bed.live_pods().await.into_iter().find(is_ready)
        })
        .await;
        let name = warm.metadata.name.clone().unwrap();
        let old_uid = warm.metadata.uid.clone().unwrap();
        let hold = serde_json::json!({"metadata": {"finalizers": ["test.kpt.dev/hold"]}});
        bed.pod_api()
            .patch(&name, &PatchParams::default(), &Patch::Merge(&hold))
            .await
            .unwrap();
        bed.pod_api()
            .delete(&name, &DeleteParams::default())
            .await
            .unwrap();
        eventually("the pod to terminate and stay", PATIENCE, || async {
            let p = bed.pod_api().get_opt(&name).await.ok().flatten()?;
            let stopped = p.status.as_ref()?.phase.as_deref() != Some("Running");
            (p.metadata.deletion_timestamp.is_some() && stopped).then_some(())
        })
        .await;
        let (r, i) = (runner.clone(), image.clone());
        let waiting = tokio::spawn(async move { call(&r, &i, set_namespace_rl("held")).await });
        tokio::time::sleep(Duration::from_secs(3)).await;
        assert!(
            !waiting.is_finished(),
            "the call waits for the name: {:?}",
            runner.log()
        );
        let release = serde_json::json!({"metadata": {"finalizers": null}});
        bed.pod_api()
            .patch(&name, &PatchParams::default(), &Patch::Merge(&release))
            .await
            .unwrap();
        let r = waiting
            .await
            .unwrap()
            .unwrap_or_else(|e| panic!("{e}\n{}", runner.log()));
        assert!(output(&r).contains("namespace: held"));
        let now = bed.pod_api().get(&name).await.expect("the name's new pod");
        assert_ne!(now.metadata.uid.as_deref(), Some(old_uid.as_str()));
        assert_eq!(pods_called(&runner).last(), Some(&name));
    })
}

/// Two runner replicas, one warm pool (`minReady: 1`, `maxPods: 2`), a TTL
/// of 6 s and workers on both calling with idle gaps: no call fails, the
/// replicas share the pool's pods (never more than two), and the API
/// server's audit log shows no pod deleted while either had a call in it.
fn two_replicas_share_a_warm_pool(bed: Bed) -> std::pin::Pin<Box<dyn Future<Output = ()> + Send>> {
    scenario(async move {
        let image = bed.node.function_image("set-namespace");
        let config = bed.dir.path().join("pool.yaml");
        std::fs::write(
            &config,
            format!("- name: {image}\n  timeToLive: 6s\n  minReady: 1\n  maxPods: 2\n"),
        )
        .unwrap();
        let config = format!("--pod-cache-config={}", config.display());
        let flags = [
            config.as_str(),
            "--max-waitlist-length=1",
            "--scan-interval=1s",
        ];
        let a = Arc::new(bed.runner(&flags));
        let b = Arc::new(bed.runner(&flags));
        eventually("the warm pod to be ready", PATIENCE, || async {
            bed.live_pods().await.into_iter().find(is_ready)
        })
        .await;
        let until = Instant::now() + Duration::from_secs(20);
        let mut workers = Vec::new();
        for w in 0..4 {
            let runner = if w % 2 == 0 { a.clone() } else { b.clone() };
            let image = image.clone();
            workers.push(tokio::spawn(async move {
                let mut done = 0u32;
                while Instant::now() < until {
                    let ns = format!("w{w}-{done}");
                    let r = call(&runner, &image, set_namespace_rl(&ns)).await;
                    let r = r.unwrap_or_else(|e| panic!("worker {w} call {done}: {e}"));
                    assert!(output(&r).contains(&format!("namespace: {ns}\n")));
                    done += 1;
                    if done.is_multiple_of(4) {
                        // Idle gaps let GC run while the other replica works.
                        tokio::time::sleep(Duration::from_secs(4)).await;
                    }
                }
                done
            }));
        }
        let mut done = 0;
        for w in workers {
            done += w.await.unwrap();
        }
        let (used_a, used_b) = (pods_called(&a), pods_called(&b));
        let shared: Vec<&String> = used_a.iter().filter(|p| used_b.contains(p)).collect();
        assert!(
            !shared.is_empty(),
            "the replicas shared a pod: {used_a:?} {used_b:?}"
        );
        for p in used_a.iter().chain(&used_b) {
            assert!(
                krm_fn_runner::domain::pod_cache::naming::is_pool_name(p),
                "a pool pod: {p}"
            );
        }
        let (created, _, uses) =
            k8s_support::assert_no_pod_deleted_in_use(&bed.node.plane, &[a.log(), b.log()]);
        assert!(uses as u32 >= done, "{uses} uses for {done} calls");
        let distinct: std::collections::BTreeSet<&String> = used_a.iter().chain(&used_b).collect();
        assert!(
            distinct.len() <= 2,
            "at most maxPods pods at a time: {distinct:?}"
        );
        eprintln!("two replicas: {done} calls, {created} pods created, pods used {distinct:?}");
    })
}

/// The FunctionConfig generation with Porch's own templates (its
/// `22-function-templates.yaml` and CRDs from `KRM_FN_PORCH_DEPLOY`; skipped
/// without them; the init container's image replaced by
/// `WRAPPER_SERVER_IMAGE`) and a FunctionConfig whose `templateOverrides`
/// set the function container's memory limit: the pod runs under that
/// limit (the container's memory cgroup says so), a call within it
/// succeeds, and a limit too small for the wrapper server makes the call
/// fail naming `OOMKilled` and what to do.
fn porchs_template_and_a_memory_limit_override(
    bed: Bed,
) -> std::pin::Pin<Box<dyn Future<Output = ()> + Send>> {
    scenario(async move {
        if !install_head_generation(&bed).await {
            return;
        }
        let version = common::catalog_version("set-namespace");
        let prefix = format!("{}/krm-fn", bed.node.registry.addr);
        let function_config = |memory: &str| {
            format!(
                "apiVersion: config.porch.kpt.dev/v1alpha1\nkind: FunctionConfig\nmetadata:\n  name: set-namespace\n  namespace: {ns}\nspec:\n  image: set-namespace\n  prefixes: [\"{prefix}\"]\n  podExecutor:\n    tags: [{version}]\n    timeToLive: 30s\n    templateOverrides:\n      container:\n        resources:\n          limits:\n            memory: {memory}\n",
                ns = bed.namespace
            )
        };
        let fc = bed.dir.path().join("fc.yaml");
        std::fs::write(&fc, function_config("64Mi")).unwrap();
        k8s_support::apply_file(&bed.client, &fc).await;
        let runner = bed.gen_c_runner(&[]);
        let image = format!("{prefix}/set-namespace:{version}");
        let r = call(&runner, &image, set_namespace_rl("limited"))
            .await
            .unwrap_or_else(|e| panic!("{e}\n{}", runner.log()));
        assert!(output(&r).contains("namespace: limited"));
        let pod = bed.live_pods().await.remove(0);
        let spec = pod.spec.clone().unwrap();
        let function = spec
            .containers
            .iter()
            .find(|c| c.name == "function")
            .unwrap();
        let limit = function
            .resources
            .as_ref()
            .unwrap()
            .limits
            .as_ref()
            .unwrap()["memory"]
            .0
            .clone();
        assert_eq!(limit, "64Mi");
        assert!(
            spec.containers[0].liveness_probe.is_some(),
            "Porch's template (with its liveness probe) was used"
        );
        let uid = pod.metadata.uid.clone().unwrap();
        let limits = bed.node.container_memory_limits(&uid);
        assert!(
            limits.contains(&(64 << 20)),
            "the function container's memory cgroup: {limits:?}"
        );
        // A limit the wrapper server cannot start in.
        let api = Api::<kube::api::DynamicObject>::namespaced_with(
            bed.client.clone(),
            &bed.namespace,
            &krm_fn_runner::adapters::kube::function_configs::resource(),
        );
        let patch = serde_json::json!({"spec": {"podExecutor": {"templateOverrides": {"container": {"resources": {"limits": {"memory": "3Mi"}}}}}}});
        api.patch(
            "set-namespace",
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await
        .unwrap();
        // The wrapper starts within 3Mi and is killed for memory by its
        // first call: the call fails naming OOMKilled (from the pod's
        // status), whether it waited for the pod or was in it.
        let err = eventually("the tight limit to be used", PATIENCE, || async {
            match call(&runner, &image, set_namespace_rl("tight")).await {
                Err(e) if e.message().contains("OOMKilled") => Some(e),
                other => {
                    eprintln!("with a 3Mi limit: {other:?}");
                    None
                }
            }
        })
        .await;
        assert_eq!(err.code(), Code::Unavailable);
        let message = err.message();
        assert!(message.contains("OOMKilled"), "{message}");
        assert!(message.contains("raise it"), "{message}");
        eprintln!("a 3Mi limit: {message}");
    })
}

/// The config.yaml generation's inline template is Porch v1.5.3's: its
/// init container copies `/wrapper-server/.`, where that release's wrapper
/// image keeps the wrapper server. Porch's own v1.5.3 wrapper-server image
/// (its Go wrapper server) serves our runner's calls, and so does this
/// project's image, which has both layouts.
fn the_config_yaml_generation_runs_porchs_own_wrapper_image(
    bed: Bed,
) -> std::pin::Pin<Box<dyn Future<Output = ()> + Send>> {
    scenario(async move {
        let image = bed.node.function_image("set-namespace");
        let porch_wrapper = bed.node.porch_wrapper_image();
        let runner = bed.runner_with_env(&[], &[("WRAPPER_SERVER_IMAGE", &porch_wrapper)]);
        let r = call(&runner, &image, set_namespace_rl("porch-wrapper"))
            .await
            .unwrap_or_else(|e| panic!("{e}\n{}", runner.log()));
        assert!(output(&r).contains("namespace: porch-wrapper"));
        let pod = bed.live_pods().await.remove(0);
        let init = &pod.spec.unwrap().init_containers.unwrap()[0];
        assert_eq!(init.image.as_deref(), Some(porch_wrapper.as_str()));
        assert_eq!(
            init.command.as_deref().unwrap()[2],
            "/wrapper-server/.",
            "Porch v1.5.3's inline template"
        );
    })
}

/// Porch's FunctionConfig generation for this scenario: its CRDs
/// ([`install_porch_crds`]) and its function templates
/// (`22-function-templates.yaml`) in the scenario's namespace. Returns
/// `false` (the scenario skips, with the message naming the variable) when
/// Porch's files are not at hand.
async fn install_head_generation(bed: &Bed) -> bool {
    let Some(porch) = common::porch_deploy() else {
        return false;
    };
    let head = porch.join("head");
    install_porch_crds(bed, &head).await;
    let templates = std::fs::read_to_string(head.join("22-function-templates.yaml"))
        .unwrap()
        .replace("porch-fn-system", &bed.namespace);
    let file = bed.dir.path().join("templates.yaml");
    std::fs::write(&file, templates).unwrap();
    k8s_support::apply_file(&bed.client, &file).await;
    true
}

/// Installs Porch's FunctionConfig and ServiceTemplate CRDs (from `head`,
/// Porch's files of that generation; once per node) and waits until they
/// are served.
async fn install_porch_crds(bed: &Bed, head: &std::path::Path) {
    use kube::api::GroupVersionKind;
    static ONCE: tokio::sync::OnceCell<()> = tokio::sync::OnceCell::const_new();
    let client = bed.client.clone();
    ONCE.get_or_init(|| async move {
        for file in [
            "config.porch.kpt.dev_functionconfigs.yaml",
            "config.porch.kpt.dev_servicetemplates.yaml",
        ] {
            k8s_support::apply_file(&client, &head.join(file)).await;
        }
    })
    .await;
    let client = bed.client.clone();
    eventually("the CRDs to be served", PATIENCE, || {
        let client = client.clone();
        async move {
            let fc = GroupVersionKind::gvk("config.porch.kpt.dev", "v1alpha1", "FunctionConfig");
            let st = GroupVersionKind::gvk("config.porch.kpt.dev", "v1alpha1", "ServiceTemplate");
            let served = kube::discovery::pinned_kind(&client, &fc).await.is_ok()
                && kube::discovery::pinned_kind(&client, &st).await.is_ok();
            served.then_some(())
        }
    })
    .await;
}

/// A ClusterIP Service `name` without a selector, port 9445 named `grpc`,
/// in the scenario's namespace; its endpoints are the EndpointSlices
/// [`add_replica_endpoint`] adds. Returns its cluster address.
async fn replica_service(bed: &Bed, name: &str) -> std::net::SocketAddr {
    service_on_port(bed, name, 9445).await
}

/// As [`replica_service`], on `port`.
async fn service_on_port(bed: &Bed, name: &str, port: u16) -> std::net::SocketAddr {
    let service: Service = serde_json::from_value(serde_json::json!({
        "metadata": {"name": name},
        "spec": {"type": "ClusterIP", "ports": [{"name": "grpc", "port": port, "protocol": "TCP"}]},
    }))
    .unwrap();
    let created = Api::<Service>::namespaced(bed.client.clone(), &bed.namespace)
        .create(&PostParams::default(), &service)
        .await
        .expect("create the runners' Service");
    let ip = created
        .spec
        .and_then(|s| s.cluster_ip)
        .expect("a cluster IP");
    format!("{ip}:{port}").parse().unwrap()
}

/// Adds the runner `replica` (listening on the node's address) to the
/// Service `service` as a ready endpoint: an EndpointSlice of its own, as
/// the EndpointSlice controller writes one for a ready pod of a Deployment.
async fn add_replica_endpoint(bed: &Bed, service: &str, name: &str, replica: &Runner) {
    use k8s_openapi::api::discovery::v1::EndpointSlice;
    let (ip, port) = replica.address.rsplit_once(':').unwrap();
    let slice: EndpointSlice = serde_json::from_value(serde_json::json!({
        "metadata": {
            "name": format!("{service}-{name}"),
            "labels": {
                "kubernetes.io/service-name": service,
                "endpointslice.kubernetes.io/managed-by": "krm-fn-runner-tests",
            },
        },
        "addressType": "IPv4",
        "endpoints": [{"addresses": [ip], "conditions": {"ready": true}}],
        "ports": [{"name": "grpc", "port": port.parse::<i32>().unwrap(), "protocol": "TCP"}],
    }))
    .unwrap();
    Api::<EndpointSlice>::namespaced(bed.client.clone(), &bed.namespace)
        .create(&PostParams::default(), &slice)
        .await
        .expect("create the replica's EndpointSlice");
}

/// Waits until kube-proxy forwards `address` (a connection is accepted).
async fn wait_for_cluster_ip(address: std::net::SocketAddr) {
    eventually("kube-proxy to forward the Service", PATIENCE, || async {
        tokio::net::TcpStream::connect(address).await.ok().map(drop)
    })
    .await;
}

/// The Service `service` ([`replica_service`]) with `replicas` (named
/// `names`) as its endpoints, once kube-proxy forwards it; returns its
/// cluster address.
async fn serve_behind_cluster_ip(
    bed: &Bed,
    service: &str,
    names: &[&str],
    replicas: &[Runner],
) -> std::net::SocketAddr {
    let address = replica_service(bed, service).await;
    for (n, r) in names.iter().zip(replicas) {
        add_replica_endpoint(bed, service, n, r).await;
    }
    wait_for_cluster_ip(address).await;
    address
}

/// `serve` replicas named `names` (exec runtime, the whoami functions of
/// `replicas_support`) listening on the node's address, with `flags`.
fn node_replicas(
    functions: &replicas_support::Functions,
    names: &[&str],
    flags: &[&str],
) -> Vec<Runner> {
    let listen = format!("--listen={}:0", node_support::NODE_IP);
    names
        .iter()
        .map(|n| {
            let mut args = vec![listen.as_str()];
            args.extend_from_slice(flags);
            functions.replica(n, &args)
        })
        .collect()
}

/// Connection ageing behind a real Service: three `serve` replicas behind
/// one ClusterIP (kube-proxy in iptables mode, which picks an endpoint at
/// random for each new connection), Porch's own Go client calling through
/// it over one connection at a time for 120 ages of 1 s, one 1.5 s call
/// in flight across every GOAWAY: no call fails, and each replica serves
/// at least 20% of the calls after the first age. (At random, 120
/// connections put fewer than 24 on a replica about once in a thousand
/// runs; 3 ages, as with a turn-taking balancer, would not do.) Then the
/// same client with ageing off: one connection, one replica takes every
/// call.
fn replicas_behind_a_cluster_ip_take_turns_with_ageing_and_not_without(
    bed: Bed,
) -> std::pin::Pin<Box<dyn Future<Output = ()> + Send>> {
    use replicas_support::{AGE, AGE_FLAGS, Functions, SLOW_IMAGE, failures, run_client, shares};
    scenario(async move {
        let functions = Functions::new();
        let names = ["r1", "r2", "r3"];
        let replicas = node_replicas(&functions, &names, &AGE_FLAGS);
        let address = serve_behind_cluster_ip(&bed, "runners", &names, &replicas).await;
        let report = run_client(&functions, address, AGE * 120, SLOW_IMAGE, 1, |_| async {}).await;
        let goaways = report.goaways();
        let first_age = *goaways.first().expect("the first connection was aged");
        let after = report.per_replica(first_age);
        let total: usize = after.values().sum();
        eprintln!(
            "ClusterIP, ageing on, 3 replicas, 120 ages of 1 s: {} calls, {} failed, {} GOAWAYs, \
             {} connections; after the first age: {total} calls, {}; {} calls in flight across a \
             GOAWAY",
            report.calls.len(),
            report.failed().len(),
            goaways.len(),
            report.connections(),
            shares(&after),
            report.across_goaway().len(),
        );
        assert!(report.failed().is_empty(), "{}", failures(&report));
        replicas_support::assert_each_replica_served(&after, &names, 20.0, "after the first age");
        assert!(
            (100..=135).contains(&goaways.len()),
            "about one GOAWAY per age: {}",
            goaways.len()
        );
        assert!(
            report.across_goaway().iter().filter(|c| c.slow).count() >= 50,
            "slow calls were in flight across GOAWAYs, and all succeeded"
        );
        drop(replicas);

        // Ageing off: the client's one connection stays on one replica.
        let off = node_replicas(&functions, &["o1", "o2", "o3"], &["--max-connection-age=0"]);
        let address = serve_behind_cluster_ip(&bed, "runners-off", &["o1", "o2", "o3"], &off).await;
        let report = run_client(&functions, address, AGE * 10, SLOW_IMAGE, 1, |_| async {}).await;
        replicas_support::assert_one_replica_took_every_call(
            &report,
            "ClusterIP, ageing off, 3 replicas, 10 s",
        );
    })
}

/// A replica added behind the ClusterIP mid-run (its EndpointSlice
/// created, as when a Deployment scales out) is reached by a reconnection
/// of the client's one connection and serves calls from then on, no call
/// failing. kube-proxy's iptables mode sends each new connection to one of
/// the three at random, so the first reaches it in about 3 ages on average;
/// the scenario allows 30 (missed about once in 60,000 runs).
fn a_replica_added_behind_the_cluster_ip_is_reached(
    bed: Bed,
) -> std::pin::Pin<Box<dyn Future<Output = ()> + Send>> {
    use replicas_support::{
        AGE, AGE_FLAGS, Functions, SLOW_IMAGE, failures, pct, run_client, shares,
    };
    scenario(async move {
        let functions = Functions::new();
        let first = node_replicas(&functions, &["r1", "r2"], &AGE_FLAGS);
        let address = serve_behind_cluster_ip(&bed, "runners", &["r1", "r2"], &first).await;
        let joined: Arc<std::sync::Mutex<Option<(Runner, i64)>>> = Arc::default();
        let slot = joined.clone();
        let (functions_ref, bed_ref) = (&functions, &bed);
        let report = run_client(
            &functions,
            address,
            AGE * 40,
            SLOW_IMAGE,
            1,
            |started| async move {
                tokio::time::sleep(AGE * 5).await;
                let r3 = node_replicas(functions_ref, &["r3"], &AGE_FLAGS).remove(0);
                add_replica_endpoint(bed_ref, "runners", "r3", &r3).await;
                *slot.lock().unwrap() = Some((r3, started.elapsed().as_millis() as i64));
            },
        )
        .await;
        let (_r3, joined_ms) = joined.lock().unwrap().take().unwrap();
        let first_call = report
            .calls
            .iter()
            .filter(|c| c.replica == "r3")
            .map(|c| c.start_ms)
            .min();
        let after = report.per_replica(joined_ms);
        let total: usize = after.values().sum();
        eprintln!(
            "ClusterIP, two replicas, a third added at {joined_ms} ms: {} calls, {} failed, {} \
             GOAWAYs, {} connections; the third's first call {} ms after it was added; calls \
             since: {total}, {} (r3 {:.0}%)",
            report.calls.len(),
            report.failed().len(),
            report.goaways().len(),
            report.connections(),
            first_call.map_or(-1, |t| t - joined_ms),
            shares(&after),
            pct(*after.get("r3").unwrap_or(&0), total),
        );
        assert!(report.failed().is_empty(), "{}", failures(&report));
        let first_call = first_call.expect("the added replica served calls");
        assert!(
            first_call - joined_ms <= 30_000,
            "the added replica's first call came {} ms after it was added",
            first_call - joined_ms
        );
    })
}

/// porch-server v1.5.3 (`porch_support`, on the node's API server) renders
/// a package revision through our runner on the pod runtime: `porchctl rpkg
/// push` of a package whose Kptfile names two catalog function images of
/// the node's registry; each function runs in a real pod of its own, and
/// the package revision porch-server serves is the rendered one.
fn porch_server_renders_a_package_revision_through_our_pods(
    bed: Bed,
) -> std::pin::Pin<Box<dyn Future<Output = ()> + Send>> {
    scenario(async move {
        let runner = bed.runner(&[]);
        let porch =
            porch_support::PorchBed::start_on(bed.node.plane.clone(), &runner.address, &[]).await;
        let name = porch.init("on-node", "v1").await;
        let setters = bed.node.function_image("apply-setters");
        let namespace = bed.node.function_image("set-namespace");
        let files = std::collections::BTreeMap::from([
            (
                "Kptfile".to_string(),
                format!(
                    "apiVersion: kpt.dev/v1\nkind: Kptfile\nmetadata:\n  name: on-node\npipeline:\n  mutators:\n  - image: {setters}\n    configMap:\n      app: rendered-app\n  - image: {namespace}\n    configMap:\n      namespace: rendered\n"
                ),
            ),
            (
                "app.yaml".to_string(),
                "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: app # kpt-set: ${app}\ndata:\n  k: v\n"
                    .to_string(),
            ),
        ]);
        let push = porch.edit_and_push(&name, &files).await;
        assert!(
            push.ok && !push.stderr.contains("[FAIL]"),
            "porchctl rpkg push: {push:?}\n--- runner:\n{}\n--- porch:\n{}",
            runner.log(),
            porch.porch.log_tail(30)
        );
        let resources = porch.resources(&name).await;
        let app = &resources["app.yaml"];
        assert!(
            app.contains("name: rendered-app") && app.contains("namespace: rendered"),
            "the package revision is rendered: {app}"
        );
        let used = pods_called(&runner);
        assert_eq!(used.len(), 2, "two calls, each in a pod: {used:?}");
        let pods = bed.pods().await;
        assert_eq!(pods.len(), 2, "one pod per function");
        for pod in &pods {
            let container = pod
                .status
                .as_ref()
                .and_then(|s| s.container_statuses.as_ref())
                .and_then(|cs| cs.iter().find(|c| c.name == "function"))
                .and_then(|c| c.container_id.clone())
                .unwrap_or_default();
            assert!(
                container.starts_with("containerd://"),
                "a real container: {container}"
            );
        }
        eprintln!("porch-server rendered {name} through pods {used:?}");
    })
}

/// The container command of `deploy/components/pod-evaluator`'s Deployment
/// after the server binary: the flags the pod-evaluator role runs with.
fn pod_evaluator_component_flags() -> Vec<String> {
    let file = common::repo_root().join("deploy/components/pod-evaluator/deployment.yaml");
    let text = std::fs::read_to_string(&file).unwrap();
    let deployment: k8s_openapi::api::apps::v1::Deployment =
        krm_fn_runner::domain::codec::from_yaml_str(&text).unwrap();
    let container = deployment.spec.unwrap().template.spec.unwrap().containers[0].clone();
    container.command.unwrap()[1..].to_vec()
}

/// The pod-evaluator role newer porch-servers call at
/// `POD_EVALUATOR_ADDRESS` (`deploy/components/pod-evaluator`): `serve` in
/// the FunctionConfig generation with that component's own flags (exec off,
/// Porch's pod flags), reached through a ClusterIP Service on port 9447 as
/// the component's Service is. A client with its own copy of Porch's
/// request (Python grpcio, `string Tag = 3`) sends what porch-server sends
/// a pod evaluator — the image without a tag or binary path, and the step's
/// Tag — and each call runs in a pod of the version Porch's rule picks from
/// the registry's tags; no match is NOT_FOUND naming the tags seen.
fn the_pod_evaluator_role_answers_image_and_tag_on_port_9447(
    bed: Bed,
) -> std::pin::Pin<Box<dyn Future<Output = ()> + Send>> {
    scenario(async move {
        if !install_head_generation(&bed).await {
            return;
        }
        let installed = common::catalog_version("set-namespace");
        for version in ["v0.4.1", "v0.5.2"] {
            bed.node
                .registry
                .retag("krm-fn/set-namespace", &installed, version)
                .await;
        }
        let prefix = format!("{}/krm-fn", bed.node.registry.addr);
        let fc = bed.dir.path().join("fc.yaml");
        std::fs::write(
            &fc,
            format!(
                "apiVersion: config.porch.kpt.dev/v1alpha1\nkind: FunctionConfig\nmetadata:\n  name: set-namespace\n  namespace: {ns}\nspec:\n  image: set-namespace\n  prefixes: [\"{prefix}\"]\n  podExecutor:\n    tags: [\"~0.4\", \"~0.5\"]\n    timeToLive: 30s\n",
                ns = bed.namespace
            ),
        )
        .unwrap();
        k8s_support::apply_file(&bed.client, &fc).await;

        let component = pod_evaluator_component_flags();
        assert!(
            component.iter().any(|f| f == "--disable-runtimes=exec")
                && component.iter().any(|f| f == "--port=9447"),
            "the component serves pods only, on 9447: {component:?}"
        );
        // The component's flags, but the scenario's pod namespace, and
        // listening on the node's address behind the Service below in place
        // of the pod's port 9447.
        let own = |f: &String| f.starts_with("--port=") || f.starts_with("--pod-namespace=");
        let mut flags: Vec<String> = component.iter().filter(|f| !own(f)).cloned().collect();
        flags.extend([
            format!("--listen={}:0", node_support::NODE_IP),
            format!("--pod-namespace={}", bed.namespace),
            format!(
                "--kubeconfig={}",
                bed.node.plane.kubeconfig_file().display()
            ),
            format!("--plain-http-registry={}", bed.node.registry.addr),
            "--scan-interval=2s".to_string(),
            "--log-level=3".to_string(),
        ]);
        let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
        let mut cmd = bed.node.host_command(&common::runner_binary());
        cmd.arg("serve")
            .env("WRAPPER_SERVER_IMAGE", bed.node.wrapper_image());
        let runner = Runner::start_command(cmd, &flags);
        let address = service_on_port(&bed, "function-pod-evaluator", 9447).await;
        add_replica_endpoint(&bed, "function-pod-evaluator", "evaluator", &runner).await;
        wait_for_cluster_ip(address).await;

        let repo = format!("{prefix}/set-namespace");
        let pinned = format!("{repo}:v0.4.1");
        let cases: Vec<(&str, Option<&str>, Result<&str, &str>)> = vec![
            (&repo, Some("~0.4"), Ok(installed.as_str())),
            (&repo, Some(">=0.5"), Ok("v0.5.2")),
            (&repo, Some("~0.4 || ~0.5"), Ok("v0.5.2")),
            (&repo, Some("<0.4.2"), Ok("v0.4.1")),
            // What an older porch-server sends: the tag in the image.
            (&pinned, None, Ok("v0.4.1")),
            (&repo, Some(">=1.0"), Err("\">=1.0\"")),
        ];
        let seen = common::porch_tag_client(
            &address.to_string(),
            &set_namespace_rl("evaluated"),
            &cases.iter().map(|(i, t, _)| (*i, *t)).collect::<Vec<_>>(),
            PATIENCE.as_secs(),
            &|| runner.log(),
        );
        let pod_images = || async {
            bed.pods()
                .await
                .iter()
                .filter_map(|p| p.spec.as_ref()?.containers.first()?.image.clone())
                .collect::<Vec<_>>()
        };
        for ((image, tag, want), seen) in cases.iter().zip(&seen) {
            match want {
                Ok(version) => {
                    assert_eq!(
                        seen.code,
                        "OK",
                        "{image} {tag:?}: {}\n{}",
                        seen.details,
                        runner.log()
                    );
                    assert!(
                        seen.output.contains("namespace: evaluated"),
                        "{image} {tag:?}: {}",
                        seen.output
                    );
                    let images = pod_images().await;
                    assert!(
                        images.contains(&format!("{repo}:{version}")),
                        "{image} {tag:?} should run {version} in a pod: {images:?}"
                    );
                }
                Err(text) => {
                    assert_eq!(seen.code, "NOT_FOUND", "{image} {tag:?}: {}", seen.details);
                    assert!(seen.details.contains(text), "{}", seen.details);
                    assert!(
                        seen.details.contains("v0.5.2"),
                        "names the tags: {}",
                        seen.details
                    );
                }
            }
        }
        // Reclaiming pods is the subject of the other scenarios.
        drop(runner);
    })
}
