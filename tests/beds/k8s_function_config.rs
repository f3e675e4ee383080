//! The FunctionConfig generation end to end, on Porch's own manifests:
//! a real kube-apiserver and etcd get Porch's CRDs and `head/` objects
//! (read from `KRM_FN_PORCH_DEPLOY` and applied unchanged; the scenario
//! skips, naming the variable, without them), and `krm-fn-runner serve` runs
//! with the exact command-line arguments and environment of Porch's
//! Deployment (`2-function-runner.yaml`; paths mapped to the built binaries
//! and catalog functions, no `--config`), under the `porch-fn-runner`
//! ServiceAccount's RBAC only (a token for that account). Functions run
//! through exec (`binaryExecutor`) and through pods (`podExecutor`): the
//! test kubelet runs each pod's own containers from image layouts — the
//! init container copies the wrapper server out of the wrapper image into
//! the `emptyDir`, the `function` container runs it from there.
//!
//! The scenario runs twice: under Porch's own Role (every call checked
//! against its rules) and under `deploy/head`'s least-privilege Role, where
//! not one call may be refused.
//!
//! The generation choice (config flags, CRD discovery, the error when
//! neither works) is tested here too.

use krm_fn_testbed::common;
use krm_fn_testbed::k8s_support;
use krm_fn_testbed::kubelet;
use krm_fn_testbed::registry_support;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::{
    Runner, SERVING, built_tool, call, catalog_dir, catalog_version, eventually, free_port, health,
    set_namespace_rl,
};
use k8s_openapi::api::authentication::v1::TokenRequest;
use k8s_openapi::api::core::v1::{Pod, PodTemplate, Service, ServiceAccount};
use k8s_support::ControlPlane;
use krm_fn_runner::adapters::kube::function_configs;
use krm_fn_runner::adapters::kube::templates::service_template_resource;
use krm_fn_runner::domain::codec;
use kube::api::{
    DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams, PostParams,
};
use kube::discovery::pinned_kind;
use kube::{Api, Client};
use kubelet::{Images, Kubelet, PATIENCE};
use registry_support::{Setup, TestRegistry};
use tonic::Code;

const NS: &str = "porch-fn-system";
const CATALOG: &str = "ghcr.io/kptdev/krm-functions-catalog";
const FINALIZER: &str = "config.porch.kpt.dev/functionconfig-function-runner";
/// Porch's runner's ServiceAccount, as the API server names its user.
const RUNNER_USER: &str = "system:serviceaccount:porch-system:porch-fn-runner";

/// The FunctionConfig objects of the pod namespace.
fn function_configs(client: &Client) -> Api<DynamicObject> {
    Api::namespaced_with(client.clone(), NS, &function_configs::resource())
}

/// The rules of Role `role` in Porch's `5-rbac.yaml` (in `head`, Porch's
/// files of the FunctionConfig generation): (API group, resource, verb)
/// triples.
fn porch_role_rules(
    head: &Path,
    role: &str,
) -> std::collections::BTreeSet<(String, String, String)> {
    let text = std::fs::read(head.join("5-rbac.yaml")).unwrap();
    let docs: Vec<serde_json::Value> = codec::from_yaml_documents(&text).unwrap();
    let role = docs
        .iter()
        .find(|d| d["kind"] == "Role" && d["metadata"]["name"] == role)
        .expect("the Role");
    let mut rules = std::collections::BTreeSet::new();
    for rule in role["rules"].as_array().unwrap() {
        let list = |k: &str| -> Vec<String> {
            rule[k]
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_str().unwrap().to_string())
                .collect()
        };
        for g in list("apiGroups") {
            for r in list("resources") {
                for v in list("verbs") {
                    rules.insert((g.clone(), r.clone(), v));
                }
            }
        }
    }
    rules
}

/// The runner's command line and environment from Porch's Deployment (in
/// `head`'s `2-function-runner.yaml`): the container's `command` without the
/// binary, and its `env`.
fn deployment_command(head: &Path) -> (Vec<String>, Vec<(String, String)>) {
    let text = std::fs::read(head.join("2-function-runner.yaml")).unwrap();
    let docs: Vec<serde_json::Value> = codec::from_yaml_documents(&text).unwrap();
    let deployment = docs
        .iter()
        .find(|d| d["kind"] == "Deployment")
        .expect("the Deployment");
    let container = &deployment["spec"]["template"]["spec"]["containers"][0];
    let command: Vec<String> = container["command"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap().to_string())
        .collect();
    assert_eq!(command[0], "/home/nonroot/server");
    let env = container["env"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["name"].as_str().unwrap().to_string(),
                e["value"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    (command[1..].to_vec(), env)
}

/// Calls set-namespace `image`: `Ok(true)` if it ran, `Ok(false)` on
/// NOT_FOUND, panics on anything else.
async fn runs(runner: &Runner, image: &str) -> bool {
    match call(runner, image, set_namespace_rl("fc")).await {
        Ok(r) => {
            let out = String::from_utf8_lossy(&r.resource_list);
            assert!(out.contains("namespace: fc"), "{image}: {out}");
            true
        }
        Err(s) if s.code() == Code::NotFound => false,
        Err(s) => panic!("{image}: {s:?}\n{}", runner.log()),
    }
}

/// Whether FunctionConfig `name` carries the runner's finalizer and its
/// status says generation `generation` was applied with `error` (`None`:
/// no error).
async fn status_is(api: &Api<DynamicObject>, name: &str, error: Option<&str>) -> bool {
    let Ok(o) = api.get(name).await else {
        return false;
    };
    let finalized = o
        .metadata
        .finalizers
        .iter()
        .flatten()
        .any(|f| f == FINALIZER);
    let status = &o.data["status"];
    let observed = status["functionRunnerObservedGeneration"].as_i64() == o.metadata.generation;
    let err = status["error"].as_str().filter(|e| !e.is_empty());
    let err_ok = match (err, error) {
        (None, None) => true,
        (Some(e), Some(want)) => e.contains(want),
        _ => false,
    };
    finalized && observed && err_ok
}

/// A kubeconfig that authenticates as ServiceAccount `porch-system/porch-fn-runner`
/// with a token from the TokenRequest API.
async fn service_account_kubeconfig(plane: &ControlPlane, client: &Client, dir: &Path) -> PathBuf {
    let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), "porch-system");
    let request: TokenRequest = serde_json::from_value(serde_json::json!({
        "spec": {"audiences": [], "expirationSeconds": 3600},
    }))
    .unwrap();
    let token = accounts
        .create_token_request("porch-fn-runner", &PostParams::default(), &request)
        .await
        .expect("a token for porch-fn-runner")
        .status
        .expect("token status")
        .token;
    let path = dir.join("porch-fn-runner.kubeconfig");
    let yaml = plane.kubeconfig_yaml().replace(&plane.token, &token);
    std::fs::write(&path, yaml).unwrap();
    path
}

/// Pods of `NS` that are not being deleted.
async fn live_pods(client: &Client) -> Vec<Pod> {
    Api::<Pod>::namespaced(client.clone(), NS)
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .collect()
}

fn annotation(pod: &Pod, key: &str) -> Option<String> {
    pod.metadata.annotations.as_ref()?.get(key).cloned()
}

fn env_of(pod: &Pod) -> Vec<(String, String)> {
    pod.spec
        .as_ref()
        .unwrap()
        .containers
        .iter()
        .find(|c| c.name == "function")
        .unwrap()
        .env
        .iter()
        .flatten()
        .map(|e| (e.name.clone(), e.value.clone().unwrap_or_default()))
        .collect()
}

/// Runs `serve` with `args` and `env` and returns its exit status and stderr
/// (for start-ups that must fail).
fn serve_output(args: &[&str], env: &[(&str, &str)]) -> (bool, String) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_krm-fn-runner"))
        .arg("serve")
        .args(["--listen", "127.0.0.1:0"])
        .args(args)
        .env_remove("KUBERNETES_SERVICE_HOST")
        .env_remove("KUBERNETES_SERVICE_PORT")
        .envs(env.iter().copied())
        .output()
        .expect("run serve");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn without_a_config_file_or_a_cluster_no_generation_can_work() {
    let dir = tempfile::tempdir().unwrap();
    let absent = dir.path().join("absent.kubeconfig");
    let env = [
        ("KUBECONFIG", absent.to_str().unwrap()),
        ("HOME", dir.path().to_str().unwrap()),
        ("WRAPPER_SERVER_IMAGE", "example.com/wrapper:test"),
    ];
    for args in [&["--disable-runtimes=pod"][..], &[][..]] {
        let (ok, stderr) = serve_output(args, &env);
        assert!(!ok, "{args:?}: {stderr}");
        assert!(stderr.contains("no configuration to serve"), "{stderr}");
        let why = if args.is_empty() {
            "the pod runtime and the FunctionConfig generation need a cluster"
        } else {
            "the exec runtime reads FunctionConfigs from a cluster when no --config is given"
        };
        assert!(stderr.contains(why), "{stderr}");
        assert!(
            stderr.contains("give --config FILE")
                && stderr.contains("FunctionConfig CRD (functionconfigs.config.porch.kpt.dev)"),
            "both ways out are named: {stderr}"
        );
    }
    // An explicit --config needs no cluster.
    let config = catalog_dir().join("config.yaml");
    let runner = Runner::start_with_env(
        &[
            &format!("--config={}", config.display()),
            &format!("--functions={}", catalog_dir().join("bin").display()),
            "--disable-runtimes=pod",
        ],
        &env,
    );
    assert!(
        runner.log().contains("serving the config.yaml generation")
            && runner.log().contains("--config given"),
        "{}",
        runner.log()
    );
}

/// Whose RBAC the runner's ServiceAccount gets in the scenario.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Rbac {
    /// Porch's `5-rbac.yaml` and `6-rbac-bind.yaml`, unchanged.
    Porch,
    /// The Role and RoleBinding of `kustomize build deploy/head`.
    Deploy,
}

/// One scenario at a time: each runs a control plane, kubelet and runners.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

#[tokio::test(flavor = "multi_thread")]
async fn porchs_manifests_drive_exec_and_pods_live() {
    let _serial = SERIAL.lock().await;
    porchs_manifests_under(Rbac::Porch).await;
}

/// The same scenario under deploy/'s least-privilege Role: not one call is
/// refused.
#[tokio::test(flavor = "multi_thread")]
async fn deploy_role_grants_every_call_the_runner_makes() {
    let _serial = SERIAL.lock().await;
    porchs_manifests_under(Rbac::Deploy).await;
}

/// The Role and RoleBinding of `kustomize build deploy/head` (on a copy
/// whose base holds Porch's files from `KRM_FN_PORCH_DEPLOY`), written into
/// `dir` as a YAML stream; returns its path.
fn deploy_rbac_file(dir: &Path) -> PathBuf {
    let deploy = crate::deploy::deploy_copy().expect("Porch's files (KRM_FN_PORCH_DEPLOY)");
    let kustomize = built_tool("KRM_FN_KUSTOMIZE_BIN", "build-kustomize.sh");
    let out = std::process::Command::new(kustomize)
        .arg("build")
        .arg(deploy.overlay("head"))
        .output()
        .expect("run kustomize");
    assert!(out.status.success(), "kustomize build deploy/head failed");
    let docs: Vec<serde_json::Value> = codec::from_yaml_documents(&out.stdout).unwrap();
    let rbac: Vec<String> = docs
        .iter()
        .filter(|d| d["kind"] == "Role" || d["kind"] == "RoleBinding")
        .map(|d| serde_json::to_string(d).unwrap())
        .collect();
    assert_eq!(
        rbac.len(),
        2,
        "deploy/head has the runner's Role and RoleBinding"
    );
    let path = dir.join("deploy-rbac.yaml");
    std::fs::write(&path, rbac.join("\n---\n")).unwrap();
    path
}

/// The scenario: Porch's manifests drive exec and pods live, the runner's
/// ServiceAccount bound by `rbac`.
async fn porchs_manifests_under(rbac: Rbac) {
    let Some(porch) = common::porch_deploy() else {
        return;
    };
    let head = porch.join("head");
    let plane = ControlPlane::start_auditing_user(RUNNER_USER).await;
    let admin = plane.client().await.expect("client");
    let dir = tempfile::tempdir().unwrap();
    let admin_kubeconfig = plane.kubeconfig_file();
    let functions = catalog_dir().join("bin");

    // Before the CRD exists: no config flags and a cluster without the CRD
    // → the config.yaml generation; exec only without a config file has
    // nothing to serve.
    let (ok, stderr) = serve_output(
        &["--disable-runtimes=pod"],
        &[("KUBECONFIG", admin_kubeconfig.to_str().unwrap())],
    );
    assert!(
        !ok && stderr.contains("does not serve functionconfigs.config.porch.kpt.dev"),
        "{stderr}"
    );
    assert!(stderr.contains("give --config FILE"), "{stderr}");

    // Porch's manifests, unchanged.
    for file in [
        "1-namespace.yaml",
        "config.porch.kpt.dev_functionconfigs.yaml",
        "config.porch.kpt.dev_servicetemplates.yaml",
    ] {
        k8s_support::apply_file(&admin, &head.join(file)).await;
    }
    eventually("the CRDs to be served", PATIENCE, || async {
        let fc = GroupVersionKind::gvk("config.porch.kpt.dev", "v1alpha1", "FunctionConfig");
        let st = GroupVersionKind::gvk("config.porch.kpt.dev", "v1alpha1", "ServiceTemplate");
        (pinned_kind(&admin, &fc).await.is_ok() && pinned_kind(&admin, &st).await.is_ok())
            .then_some(())
    })
    .await;
    for file in [
        "2-function-runner.yaml",
        "22-function-templates.yaml",
        "23-function-configurations.yaml",
    ] {
        k8s_support::apply_file(&admin, &head.join(file)).await;
    }
    match rbac {
        Rbac::Porch => {
            k8s_support::apply_file(&admin, &head.join("5-rbac.yaml")).await;
            k8s_support::apply_file(&admin, &head.join("6-rbac-bind.yaml")).await;
        }
        Rbac::Deploy => k8s_support::apply_file(&admin, &deploy_rbac_file(dir.path())).await,
    }
    let kubeconfig = service_account_kubeconfig(&plane, &admin, dir.path()).await;

    // Function images in the test registry, and the layouts the test
    // kubelet runs pods from.
    let registry = TestRegistry::start(Setup::anonymous());
    let version = catalog_version("set-namespace");
    registry
        .push_image(
            &format!("set-namespace:{version}"),
            "amd64",
            Some(&["/usr/local/bin/function"]),
            None,
            "set-namespace",
        )
        .await;
    let pod_image = format!("{}/set-namespace:{version}", registry.addr);
    let (command, env) = deployment_command(&head);
    let wrapper_image = env
        .iter()
        .find(|(k, _)| k == "WRAPPER_SERVER_IMAGE")
        .map(|(_, v)| v.clone())
        .unwrap();
    let wrapper_root = dir.path().join("wrapper-image");
    kubelet::wrapper_image_layout(&wrapper_root);
    let map = dir.path().join("wrappers.map");
    let _kubelet = Kubelet::start_with_images(
        admin.clone(),
        NS,
        functions.clone(),
        map.clone(),
        Images {
            wrapper_image: wrapper_image.clone(),
            wrapper_root,
            function_roots: dir.path().join("function-images"),
        },
    );

    // The Deployment's command and environment; paths and the metrics port
    // mapped (a local process, not a pod), plus what a runner outside the
    // cluster network needs: the wrapper address map and the plain-HTTP
    // test registry.
    let mut args: Vec<String> = command
        .iter()
        .map(|a| a.replace("/home/nonroot/functions", functions.to_str().unwrap()))
        .collect();
    assert!(args.iter().all(|a| !a.starts_with("--config")), "{args:?}");
    args.push(format!("--wrapper-address-map={}", map.display()));
    args.push(format!("--plain-http-registry={}", registry.addr));
    let mut env: Vec<(String, String)> = env
        .into_iter()
        .map(|(k, v)| match k.as_str() {
            "OTEL_EXPORTER_PROMETHEUS_PORT" => (k, free_port().to_string()),
            _ => (k, v),
        })
        .collect();
    env.push(("KUBECONFIG".into(), kubeconfig.display().to_string()));
    let env_refs: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let arg_refs: Vec<&str> = args.iter().map(String::as_str).collect();
    let started = Instant::now();
    let runner = Runner::start_with_env(&arg_refs, &env_refs);
    // The same runner with exec only, to see NOT_FOUND (the full one falls
    // through to the pod runtime); its metrics on a port of its own.
    let mut exec_args = arg_refs.clone();
    exec_args.push("--disable-runtimes=pod");
    let exec_port = free_port().to_string();
    let exec_env: Vec<(&str, &str)> = env_refs
        .iter()
        .map(|&(k, v)| match k {
            "OTEL_EXPORTER_PROMETHEUS_PORT" => (k, exec_port.as_str()),
            _ => (k, v),
        })
        .collect();
    let exec = Runner::start_with_env(&exec_args, &exec_env);
    for r in [&runner, &exec] {
        assert!(
            r.log().contains("serving the FunctionConfig generation"),
            "{}",
            r.log()
        );
    }
    // Warm-up of the head objects' podExecutor images (ghcr.io, not
    // reachable here) is given up; then the runner serves.
    eventually(
        "health to report SERVING",
        Duration::from_secs(90),
        || async { (health(&runner).await == SERVING).then_some(()) },
    )
    .await;
    eprintln!("runner ready after {:?}", started.elapsed());
    // Warm-up saw every listed FunctionConfig (Porch warms whatever its
    // reconciler happened to have stored by then).
    let log = runner.log();
    let ready_at = log.find("pod runtime ready").expect("ready");
    let warmed = log[..ready_at]
        .lines()
        .filter(|l| l.contains("creating function pod") && l.contains(&format!("image={CATALOG}/")))
        .count();
    assert_eq!(warmed, 19, "{log}");

    // Every head FunctionConfig got the runner's finalizer and status.
    let fcs = function_configs(&admin);
    let names: Vec<String> = fcs
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|o| o.metadata.name)
        .collect();
    assert_eq!(names.len(), 19, "{names:?}");
    for name in &names {
        eventually(&format!("the status of {name}"), PATIENCE, || async {
            status_is(&fcs, name, None).await.then_some(())
        })
        .await;
    }

    // Exec, as the head objects configure it (binaryExecutor tags).
    for image in [
        format!("{CATALOG}/set-namespace:v0.4.2"),
        "set-namespace:v0.4.2".to_string(),
    ] {
        assert!(runs(&runner, &image).await, "{image}");
        assert!(runs(&exec, &image).await, "{image}");
    }
    assert!(runner.log().contains("Evaluating in executable mode"));
    // Only those tags, only under those prefixes (end-anchored).
    for image in [
        format!("{CATALOG}/set-namespace:v0.4.1"),
        format!("{CATALOG}-fork/set-namespace:v0.4.2"),
        format!("{CATALOG}/nested/set-namespace:v0.4.2"),
    ] {
        assert!(!runs(&exec, &image).await, "{image}");
    }
    // Porch's Tag (field 3), sent by a client with its own copy of Porch's
    // request (Python grpcio, tests/python/tag_client.py): the step's tag is
    // read against the object's binaryExecutor.tags (constraints; a
    // constraint selects through a version entry that satisfies it) and wins
    // over the image's own tag; the prefix is still checked.
    let repo = format!("{CATALOG}/set-namespace");
    let pinned = format!("{repo}:v0.4.1");
    let newer = format!("{repo}:v0.4.2");
    let fork = format!("{CATALOG}-fork/set-namespace");
    let cases = [
        (repo.as_str(), Some("v0.4.2"), true),
        (&repo, Some("~0.4"), true),
        (&repo, Some(">=0.4.2, <0.5"), true),
        (&pinned, Some("v0.4.2"), true),
        (&newer, None, true),
        (&newer, Some("~0.5"), false),
        (&repo, Some(">=1.0"), false),
        (&fork, Some("~0.4"), false),
    ];
    let seen = common::porch_tag_client(
        &exec.address,
        &set_namespace_rl("fc"),
        &cases.iter().map(|(i, t, _)| (*i, *t)).collect::<Vec<_>>(),
        60,
        &|| exec.log(),
    );
    for ((image, tag, served), seen) in cases.iter().zip(&seen) {
        if *served {
            assert_eq!(seen.code, "OK", "{image} {tag:?}: {}", seen.details);
            assert!(seen.output.contains("namespace: fc"), "{image} {tag:?}");
        } else {
            assert_eq!(seen.code, "NOT_FOUND", "{image} {tag:?}: {}", seen.details);
            assert!(
                tag.is_some_and(|t| seen.details.contains(&format!("{t:?}")))
                    || seen.details.contains("no FunctionConfig configures"),
                "{image} {tag:?}: {}",
                seen.details
            );
        }
    }
    // A new FunctionConfig serves at once; changing its tags moves the
    // binary to the new tag; deleting it makes the image NOT_FOUND again.
    let object = |name: &str, spec: serde_json::Value| -> DynamicObject {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "config.porch.kpt.dev/v1alpha1",
            "kind": "FunctionConfig",
            "metadata": {"name": name, "namespace": NS},
            "spec": spec,
        }))
        .unwrap()
    };
    let mine = "example.com/fns/set-namespace";
    assert!(!runs(&exec, &format!("{mine}:v1")).await);
    fcs.create(
        &PostParams::default(),
        &object(
            "test-exec",
            serde_json::json!({"image": "set-namespace", "prefixes": ["example.com/fns"],
                "binaryExecutor": {"tags": ["v1"], "path": "set-namespace"}}),
        ),
    )
    .await
    .unwrap();
    eventually("the new FunctionConfig to serve", PATIENCE, || async {
        runs(&exec, &format!("{mine}:v1")).await.then_some(())
    })
    .await;
    let retag =
        serde_json::json!({"spec": {"binaryExecutor": {"tags": ["v2"], "path": "set-namespace"}}});
    fcs.patch("test-exec", &PatchParams::default(), &Patch::Merge(&retag))
        .await
        .unwrap();
    eventually("the next call to follow the new tag", PATIENCE, || async {
        (runs(&exec, &format!("{mine}:v2")).await && !runs(&exec, &format!("{mine}:v1")).await)
            .then_some(())
    })
    .await;
    assert!(runs(&runner, &format!("{mine}:v2")).await);
    eventually("the status of test-exec generation 2", PATIENCE, || async {
        status_is(&fcs, "test-exec", None).await.then_some(())
    })
    .await;

    // A second object for the same image and prefix: the older one wins,
    // the newer says so in its status and serves nothing.
    fcs.create(
        &PostParams::default(),
        &object(
            "dup-set-namespace",
            serde_json::json!({"image": "set-namespace", "prefixes": [""],
                "binaryExecutor": {"tags": ["v9"], "path": "set-namespace"}}),
        ),
    )
    .await
    .unwrap();
    eventually("the conflict in the status", PATIENCE, || async {
        status_is(
            &fcs,
            "dup-set-namespace",
            Some("FunctionConfig set-namespace already configures"),
        )
        .await
        .then_some(())
    })
    .await;
    assert!(!runs(&exec, "set-namespace:v9").await);
    assert!(runs(&exec, "set-namespace:v0.4.2").await);

    // Deleting: the runner removes its finalizer, the object goes, and its
    // images are NOT_FOUND again.
    for name in ["dup-set-namespace", "test-exec"] {
        fcs.delete(name, &DeleteParams::default()).await.unwrap();
    }
    eventually("the deleted objects to be gone", PATIENCE, || async {
        let gone = fcs.get_opt("test-exec").await.unwrap().is_none()
            && fcs.get_opt("dup-set-namespace").await.unwrap().is_none();
        gone.then_some(())
    })
    .await;
    eventually("the deleted image to be NOT_FOUND", PATIENCE, || async {
        (!runs(&exec, &format!("{mine}:v2")).await).then_some(())
    })
    .await;

    // Pods: a FunctionConfig with podExecutor for the registry's image.
    let registry_prefix = registry.addr.clone();
    fcs.create(
        &PostParams::default(),
        &object(
            "test-pods",
            serde_json::json!({"image": "set-namespace", "prefixes": [registry_prefix],
                "podExecutor": {"tags": [version], "timeToLive": "10m", "maxParallelExecutions": 1,
                    "templateOverrides": {"container": {"env": [{"name": "KRM_TEST", "value": "one"}]}}}}),
        ),
    )
    .await
    .unwrap();
    eventually("test-pods to be applied", PATIENCE, || async {
        status_is(&fcs, "test-pods", None).await.then_some(())
    })
    .await;
    let first = call(&runner, &pod_image, set_namespace_rl("pod-1"))
        .await
        .unwrap_or_else(|e| panic!("{e:?}\n{}", runner.log()));
    assert!(String::from_utf8_lossy(&first.resource_list).contains("namespace: pod-1"));
    let pods = live_pods(&admin).await;
    assert_eq!(pods.len(), 1, "{pods:?}");
    let pod = &pods[0];
    let templates: Api<PodTemplate> = Api::namespaced(admin.clone(), NS);
    let pod_template = templates.get("base-pod-template").await.unwrap();
    let service_template =
        Api::<DynamicObject>::namespaced_with(admin.clone(), NS, &service_template_resource())
            .get("base-service-template")
            .await
            .unwrap();
    let version_of = |pt: &PodTemplate| {
        format!(
            "{}/{}",
            pt.metadata.resource_version.as_deref().unwrap(),
            service_template
                .metadata
                .resource_version
                .as_deref()
                .unwrap()
        )
    };
    assert_eq!(
        annotation(pod, "fn.kpt.dev/template-version").as_deref(),
        Some(version_of(&pod_template).as_str())
    );
    assert!(annotation(pod, "fn.kpt.dev/settings-version").is_some());
    let spec = pod.spec.as_ref().unwrap();
    let init = &spec.init_containers.as_ref().unwrap()[0];
    assert_eq!(
        (init.name.as_str(), init.image.as_deref()),
        ("copy-wrapper-server", Some(wrapper_image.as_str()))
    );
    let function = spec
        .containers
        .iter()
        .find(|c| c.name == "function")
        .unwrap();
    assert_eq!(function.image.as_deref(), Some(pod_image.as_str()));
    assert!(
        function.liveness_probe.is_some(),
        "built from the PodTemplate object"
    );
    let env = env_of(pod);
    assert!(env.contains(&("KRM_TEST".into(), "one".into())), "{env:?}");
    assert!(
        env.iter().any(|(k, _)| k == "OTEL_METRICS_EXPORTER"),
        "template env kept: {env:?}"
    );
    let service = Api::<Service>::namespaced(admin.clone(), NS)
        .get(pod.metadata.name.as_deref().unwrap())
        .await
        .unwrap();
    assert_eq!(service.spec.unwrap().ports.unwrap()[0].port, 9446);

    // Editing the PodTemplate reaches the next new pod at once (the scan
    // interval is Porch's 1m).
    let edited = Instant::now();
    let patch = serde_json::json!({"template": {"metadata": {"annotations": {"example.com/edited": "yes"}}}});
    let pod_template = templates
        .patch(
            "base-pod-template",
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await
        .unwrap();
    let new_version = version_of(&pod_template);
    let serving = eventually("a pod from the edited template", PATIENCE, || async {
        let r = call(&runner, &pod_image, set_namespace_rl("pod-2"))
            .await
            .ok()?;
        assert!(String::from_utf8_lossy(&r.resource_list).contains("namespace: pod-2"));
        live_pods(&admin).await.into_iter().find(|p| {
            annotation(p, "fn.kpt.dev/template-version").as_deref() == Some(new_version.as_str())
        })
    })
    .await;
    assert!(
        edited.elapsed() < Duration::from_secs(30),
        "{:?}",
        edited.elapsed()
    );
    assert_eq!(
        annotation(&serving, "example.com/edited").as_deref(),
        Some("yes")
    );

    // An edit that breaks the template contract is refused: new pods keep
    // the last good template.
    let good = pod_template
        .template
        .clone()
        .unwrap()
        .spec
        .unwrap()
        .containers;
    let mut broken = good.clone();
    broken
        .iter_mut()
        .find(|c| c.name == "function")
        .unwrap()
        .name = "fn".into();
    let set_containers = |containers: &Vec<k8s_openapi::api::core::v1::Container>| serde_json::json!({"template": {"spec": {"containers": containers}}});
    templates
        .patch(
            "base-pod-template",
            &PatchParams::default(),
            &Patch::Merge(&set_containers(&broken)),
        )
        .await
        .unwrap();
    eventually("the broken template to be refused", PATIENCE, || async {
        runner
            .log()
            .contains("not usable, keeping version")
            .then_some(())
    })
    .await;
    assert!(
        runner
            .log()
            .contains("PodTemplate base-pod-template: failed to find the function container"),
        "{}",
        runner.log()
    );
    let before: Vec<Option<String>> = live_pods(&admin)
        .await
        .into_iter()
        .map(|p| p.metadata.name)
        .collect();
    _kubelet
        .vanish(serving.metadata.name.as_deref().unwrap())
        .await;
    let replaced = eventually("a new pod after the old one vanished", PATIENCE, || async {
        call(&runner, &pod_image, set_namespace_rl("pod-2b"))
            .await
            .ok()?;
        live_pods(&admin)
            .await
            .into_iter()
            .find(|p| !before.contains(&p.metadata.name))
    })
    .await;
    assert_eq!(
        annotation(&replaced, "fn.kpt.dev/template-version").as_deref(),
        Some(new_version.as_str()),
        "the last good template"
    );
    templates
        .patch(
            "base-pod-template",
            &PatchParams::default(),
            &Patch::Merge(&set_containers(&good)),
        )
        .await
        .unwrap();

    // A missing template object is created from the built-in default, as
    // Porch does.
    let service_templates =
        Api::<DynamicObject>::namespaced_with(admin.clone(), NS, &service_template_resource());
    service_templates
        .delete("base-service-template", &DeleteParams::default())
        .await
        .unwrap();
    let recreated = eventually("the ServiceTemplate to be re-created", PATIENCE, || async {
        service_templates
            .get_opt("base-service-template")
            .await
            .unwrap()
    })
    .await;
    assert_eq!(recreated.data["template"]["spec"]["ports"][0]["port"], 9446);
    // The runner logs once its create has returned, which may be after the
    // object is visible here.
    eventually("the runner to log the re-creation", PATIENCE, || async {
        runner
            .log()
            .contains(
                "ServiceTemplate base-service-template did not exist; created it from the built-in default",
            )
            .then_some(())
    })
    .await;

    // Changing the podExecutor gives the function new pods with the new
    // settings.
    let patch = serde_json::json!({"spec": {"podExecutor": {"templateOverrides": {"container": {"env": [{"name": "KRM_TEST", "value": "two"}]}}}}});
    fcs.patch("test-pods", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    eventually("a pod with the changed overrides", PATIENCE, || async {
        call(&runner, &pod_image, set_namespace_rl("pod-3"))
            .await
            .ok()?;
        live_pods(&admin)
            .await
            .into_iter()
            .find(|p| env_of(p).contains(&("KRM_TEST".into(), "two".into())))
    })
    .await;

    // Deleting it: new pods get the global settings.
    fcs.delete("test-pods", &DeleteParams::default())
        .await
        .unwrap();
    let plain = eventually("a pod with the global settings", PATIENCE, || async {
        call(&runner, &pod_image, set_namespace_rl("pod-4"))
            .await
            .ok()?;
        live_pods(&admin).await.into_iter().find(|p| {
            !env_of(p).iter().any(|(k, _)| k == "KRM_TEST")
                && annotation(p, "fn.kpt.dev/settings-version").is_none()
        })
    })
    .await;
    assert!(
        env_of(&plain)
            .iter()
            .any(|(k, _)| k == "OTEL_METRICS_EXPORTER")
    );
    eventually("test-pods to be gone", PATIENCE, || async {
        fcs.get_opt("test-pods")
            .await
            .unwrap()
            .is_none()
            .then_some(())
    })
    .await;

    // Statuses are written only when they change: once per head object
    // and runner at most (no write loop on the runners' own updates).
    let events = plane.audit_events();
    for name in &names {
        let writes = events
            .iter()
            .filter(|e| e.user == RUNNER_USER && e.resource == "functionconfigs" && &e.name == name)
            .filter(|e| e.verb == "patch" && e.code == 200)
            .count();
        assert!((1..=4).contains(&writes), "{name}: {writes} writes");
    }

    // Every Kubernetes call the runners made, from the API server's audit
    // log: all granted by Porch's Role, except the one probe for
    // EndpointSlices (refused: the runner then reads core/v1 Endpoints)
    // and the one for Events (refused: pod start failures are then read
    // from pod status only).
    let granted = porch_role_rules(&head, "porch-function-executor");
    let mut used = std::collections::BTreeSet::new();
    let mut refused = std::collections::BTreeSet::new();
    for e in plane
        .audit_events()
        .into_iter()
        .filter(|e| e.user == RUNNER_USER)
    {
        if !e.path.is_empty() {
            used.insert(format!("{} {}", e.verb, e.path));
            continue;
        }
        let resource = if e.subresource.is_empty() {
            e.resource.clone()
        } else {
            format!("{}/{}", e.resource, e.subresource)
        };
        if e.code == 403 {
            refused.insert((e.group.clone(), resource, e.verb.clone()));
            continue;
        }
        assert!(
            rbac != Rbac::Porch
                || granted.contains(&(e.group.clone(), resource.clone(), e.verb.clone())),
            "{resource} {} is not granted by Porch's Role",
            e.verb
        );
        let group = if e.group.is_empty() {
            "core"
        } else {
            e.group.as_str()
        };
        used.insert(format!("{} {resource} ({group})", e.verb));
    }
    eprintln!("calls the runners made under {rbac:?}'s RBAC: {used:#?}\nrefused: {refused:#?}");
    match rbac {
        Rbac::Porch => assert_eq!(
            refused.into_iter().collect::<Vec<_>>(),
            [
                ("".to_string(), "events".to_string(), "list".to_string()),
                (
                    "discovery.k8s.io".to_string(),
                    "endpointslices".to_string(),
                    "list".to_string()
                )
            ]
        ),
        Rbac::Deploy => assert!(refused.is_empty(), "refused: {refused:#?}"),
    }

    // The ServiceAccount's RBAC was enough for all of it: no warning or
    // error about a refused call.
    for r in [&runner, &exec] {
        let log = r.log();
        let refused: Vec<&str> = log
            .lines()
            .filter(|l| l.contains(" WARN ") || l.contains(" ERROR "))
            .filter(|l| l.to_lowercase().contains("forbidden"))
            .collect();
        assert!(refused.is_empty(), "{refused:#?}");
    }
}

/// Without Porch's FunctionConfig CRD the watch does not start: the error
/// says to install the CRD, and keeps the watcher's error (the API
/// server's 404) as its source.
#[tokio::test(flavor = "multi_thread")]
async fn a_missing_crd_is_named_and_the_api_error_kept() {
    let _serial = SERIAL.lock().await;
    let plane = ControlPlane::start().await;
    let client = plane.client().await.unwrap();
    let store = krm_fn_runner::domain::function_config::FunctionConfigStore::new(
        Path::new("/nonexistent"),
        "ghcr.io/kptdev/krm-functions-catalog",
    );
    let Err(err) = function_configs::FunctionConfigWatch::start(
        client,
        "default",
        store,
        Duration::from_secs(30),
    )
    .await
    else {
        panic!("the watch started without the CRD");
    };
    let text = err.to_string();
    assert!(
        text.starts_with("cannot list FunctionConfigs in namespace \"default\": ")
            && text.contains("install Porch's FunctionConfig CRD"),
        "{text}"
    );
    let source = std::error::Error::source(&err).expect("the watcher's error is kept");
    let watcher = source
        .downcast_ref::<std::sync::Arc<kube::runtime::watcher::Error>>()
        .expect("a kube watcher error");
    assert!(
        matches!(
            &**watcher,
            kube::runtime::watcher::Error::InitialListFailed(kube::Error::Api(s)) if s.code == 404
        ),
        "{watcher:?}"
    );
}
