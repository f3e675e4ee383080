//! deploy/ against a real kube-apiserver, with the book's "Deploying with
//! Porch" commands, on a copy of deploy/ whose bases (`deploy/porch/head`,
//! `deploy/porch/config-yaml-era`) are filled with Porch's files from
//! `KRM_FN_PORCH_DEPLOY` as the book says (the tests skip, naming the
//! variable, without it): the real kustomize CLI
//! (`scripts/build-kustomize.sh`) builds each generation's kustomization,
//! real kubectl (`scripts/build-kubectl.sh`) applies Porch's CRDs and
//! namespaces, waits for the CRDs, then applies the build with
//! `--server-side --dry-run=server` and for real. The runner's
//! ServiceAccount is then asked, through the API server's authorizer
//! (`kubectl auth can-i --as`), for every call the runner makes (allowed)
//! and for neighbouring ones it never makes (denied).

use krm_fn_testbed::common;
use krm_fn_testbed::k8s_support;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use common::built_tool;
use k8s_support::ControlPlane;

const REPO: &str = env!("CARGO_MANIFEST_DIR");
const RUNNER_SA: &str = "system:serviceaccount:porch-system:porch-fn-runner";

fn kustomize() -> PathBuf {
    built_tool("KRM_FN_KUSTOMIZE_BIN", "build-kustomize.sh")
}

fn kubectl_bin() -> PathBuf {
    built_tool("KRM_FN_KUBECTL_BIN", "build-kubectl.sh")
}

fn check(what: &str, out: Output) -> String {
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{what} failed: {}\n{stdout}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// `kustomize build DIR`.
fn kustomize_build(dir: &Path) -> String {
    let out = Command::new(kustomize())
        .arg("build")
        .arg(dir)
        .output()
        .expect("run kustomize");
    check(&format!("kustomize build {}", dir.display()), out)
}

/// kubectl against `plane`, with its own discovery cache.
struct Kubectl {
    bin: PathBuf,
    kubeconfig: PathBuf,
    cache: tempfile::TempDir,
}

impl Kubectl {
    fn new(plane: &ControlPlane) -> Self {
        Self {
            bin: kubectl_bin(),
            kubeconfig: plane.kubeconfig_file(),
            cache: tempfile::tempdir().unwrap(),
        }
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(&self.bin);
        cmd.arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .arg("--cache-dir")
            .arg(self.cache.path())
            .args(args);
        cmd
    }

    /// Runs kubectl with `args`; panics with its output unless it succeeds.
    fn run(&self, args: &[&str]) -> String {
        let out = self.command(args).output().expect("run kubectl");
        check(&format!("kubectl {}", args.join(" ")), out)
    }

    /// Runs kubectl with `args`, `stdin` piped in.
    fn run_with_input(&self, args: &[&str], stdin: &str) -> String {
        use std::io::Write;
        let mut child = self
            .command(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("run kubectl");
        child
            .stdin
            .take()
            .unwrap()
            .write_all(stdin.as_bytes())
            .unwrap();
        let out = child.wait_with_output().unwrap();
        check(&format!("kubectl {}", args.join(" ")), out)
    }

    /// Whether the runner's ServiceAccount may `verb` `resource` (or
    /// `resource/name`, or `resource:subresource`) in `namespace`.
    fn runner_can(&self, verb: &str, resource: &str, namespace: &str) -> bool {
        let (resource, sub) = resource.split_once(':').unwrap_or((resource, ""));
        let sub = format!("--subresource={sub}");
        let mut args = vec![
            "auth", "can-i", verb, resource, "-n", namespace, "--as", RUNNER_SA,
        ];
        if sub.len() > "--subresource=".len() {
            args.push(&sub);
        }
        let out = self
            .command(&args)
            .output()
            .expect("run kubectl auth can-i");
        let answer = String::from_utf8_lossy(&out.stdout).trim().to_string();
        match answer.as_str() {
            "yes" => true,
            "no" => false,
            _ => panic!(
                "kubectl auth can-i {verb} {resource}: {answer} {}",
                String::from_utf8_lossy(&out.stderr)
            ),
        }
    }
}

/// Porch's own installation of the FunctionConfig generation, as its
/// manifests ship (client-side `kubectl apply` of the files in `head`, its
/// RBAC included): the state the book's commands take over.
fn install_porch(kubectl: &Kubectl, head: &Path) {
    let file = |f: &str| head.join(f).display().to_string();
    let (crd1, crd2) = (
        file("config.porch.kpt.dev_functionconfigs.yaml"),
        file("config.porch.kpt.dev_servicetemplates.yaml"),
    );
    kubectl.run(&["apply", "-f", &crd1, "-f", &crd2]);
    wait_for_crds(kubectl);
    let ns = head.join("1-namespace.yaml");
    let mut args = vec!["apply", "-f", ns.to_str().unwrap()];
    let files: Vec<String> = [
        "2-function-runner.yaml",
        "5-rbac.yaml",
        "6-rbac-bind.yaml",
        "22-function-templates.yaml",
        "23-function-configurations.yaml",
    ]
    .iter()
    .map(|f| file(f))
    .collect();
    for f in &files {
        args.extend(["-f", f]);
    }
    kubectl.run(&args);
}

fn wait_for_crds(kubectl: &Kubectl) {
    kubectl.run(&[
        "wait",
        "--for",
        "condition=established",
        "--timeout=60s",
        "crd/functionconfigs.config.porch.kpt.dev",
        "crd/servicetemplates.config.porch.kpt.dev",
    ]);
}

/// Porch's CRDs of the FunctionConfig generation, applied and waited for
/// before `deploy/head`.
const HEAD_CRDS: &[&str] = &[
    "config.porch.kpt.dev_functionconfigs.yaml",
    "config.porch.kpt.dev_servicetemplates.yaml",
];

/// The book's steps for one generation: Porch's namespaces (and, given
/// `crds`, its CRDs, waited for) applied for real from the overlay's base
/// `deploy/porch/<variant>`, then the kustomize build of `deploy/<variant>`
/// applied with a server-side dry run, then for real (`--force-conflicts`:
/// over a Porch installation it takes over the fields Porch's apply owns).
/// Returns the build and the number of objects in it.
fn apply(kubectl: &Kubectl, deploy: &Deploy, variant: &str, crds: &[&str]) -> (String, usize) {
    apply_dir(
        kubectl,
        &deploy.overlay(variant),
        &deploy.base(variant),
        crds,
    )
}

/// As [`apply`], for the kustomization in `dir`, with the namespaces and
/// CRDs from `porch`.
fn apply_dir(kubectl: &Kubectl, dir: &Path, porch: &Path, crds: &[&str]) -> (String, usize) {
    let mut first = vec!["apply", "--server-side", "--force-conflicts", "-f"];
    let namespaces = porch.join("1-namespace.yaml");
    first.push(namespaces.to_str().unwrap());
    let crd_paths: Vec<String> = crds
        .iter()
        .map(|c| porch.join(c).display().to_string())
        .collect();
    for c in &crd_paths {
        first.extend(["-f", c]);
    }
    kubectl.run(&first);
    if !crds.is_empty() {
        wait_for_crds(kubectl);
    }
    let built = kustomize_build(dir);
    let objects = built.matches("\nkind: ").count();
    let dry = kubectl.run_with_input(
        &[
            "apply",
            "--server-side",
            "--force-conflicts",
            "--dry-run=server",
            "-f",
            "-",
        ],
        &built,
    );
    assert_eq!(
        dry.matches("(server dry run)").count(),
        objects,
        "every object passes the server-side dry run:\n{dry}"
    );
    let real = kubectl.run_with_input(
        &["apply", "--server-side", "--force-conflicts", "-f", "-"],
        &built,
    );
    assert_eq!(
        real.matches("serverside-applied").count(),
        objects,
        "{real}"
    );
    (built, objects)
}

/// What deploy/components/runner adds to Porch's Deployment and Service,
/// as the API server stored it.
fn assert_hardened(kubectl: &Kubectl) {
    let get = |what: &str| -> serde_json::Value {
        serde_json::from_str(&kubectl.run(&["get", what, "-n", "porch-system", "-o", "json"]))
            .unwrap()
    };
    let deployment = get("deployment/function-runner");
    let pod = &deployment["spec"]["template"]["spec"];
    let c = &pod["containers"][0];
    assert_eq!(deployment["spec"]["replicas"], 2);
    assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
    assert_eq!(
        pod["securityContext"]["seccompProfile"]["type"],
        "RuntimeDefault"
    );
    assert_eq!(
        pod["topologySpreadConstraints"][0]["topologyKey"],
        "kubernetes.io/hostname"
    );
    let sc = &c["securityContext"];
    assert_eq!(sc["runAsUser"], 10001);
    assert_eq!(sc["readOnlyRootFilesystem"], true);
    assert_eq!(sc["allowPrivilegeEscalation"], false);
    assert_eq!(sc["capabilities"]["drop"], serde_json::json!(["ALL"]));
    assert_eq!(c["resources"]["limits"]["memory"], "1Gi");
    let probe = serde_json::json!(["/home/nonroot/grpc-health-probe", "-addr", "localhost:9445"]);
    assert_eq!(c["readinessProbe"]["exec"]["command"], probe);
    assert_eq!(c["livenessProbe"]["exec"]["command"], probe);
    assert_eq!(c["volumeMounts"][0]["mountPath"], "/tmp");
    assert!(
        c["ports"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["containerPort"] == 9464 && p["name"] == "metrics"),
        "{c}"
    );
    let service = get("service/function-runner");
    let ports: Vec<(i64, String)> = service["spec"]["ports"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            (
                p["port"].as_i64().unwrap(),
                p["name"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert!(ports.contains(&(9445, "grpc".into())), "{ports:?}");
    assert!(ports.contains(&(9464, "metrics".into())), "{ports:?}");
    let pdb = get("poddisruptionbudget/function-runner");
    assert_eq!(pdb["spec"]["minAvailable"], 1);
    assert_eq!(
        pdb["spec"]["selector"]["matchLabels"]["app"],
        "function-runner"
    );
}

/// The calls of the pod runtime, in the pod namespace (both generations).
const POD_RUNTIME_CALLS: &[(&str, &str)] = &[
    ("create", "pods"),
    ("get", "pods"),
    ("list", "pods"),
    ("watch", "pods"),
    ("patch", "pods"),
    ("delete", "pods"),
    ("create", "services"),
    ("get", "services"),
    ("list", "services"),
    ("delete", "services"),
    ("list", "endpointslices.discovery.k8s.io"),
    ("watch", "endpointslices.discovery.k8s.io"),
    ("get", "endpoints"),
    ("list", "events"),
    ("watch", "events"),
];

/// Calls the runner never makes (Porch's own Role grants several of them).
const NEVER: &[(&str, &str)] = &[
    ("update", "pods"),
    ("deletecollection", "pods"),
    ("watch", "services"),
    ("update", "services"),
    ("create", "endpoints"),
    ("get", "endpointslices.discovery.k8s.io"),
    ("get", "secrets"),
    ("create", "secrets"),
    ("get", "configmaps"),
    ("create", "pods:exec"),
    ("get", "events"),
    ("create", "events"),
];

/// The FunctionConfig generation's extra calls (`kind/name`: a call on that
/// object only; `resource:subresource`).
const FUNCTION_CONFIG_CALLS: &[(&str, &str)] = &[
    ("list", "functionconfigs.config.porch.kpt.dev"),
    ("watch", "functionconfigs.config.porch.kpt.dev"),
    ("patch", "functionconfigs.config.porch.kpt.dev"),
    ("patch", "functionconfigs.config.porch.kpt.dev:status"),
    ("list", "podtemplates/base-pod-template"),
    ("watch", "podtemplates/base-pod-template"),
    ("create", "podtemplates"),
    (
        "list",
        "servicetemplates.config.porch.kpt.dev/base-service-template",
    ),
    (
        "watch",
        "servicetemplates.config.porch.kpt.dev/base-service-template",
    ),
    ("create", "servicetemplates.config.porch.kpt.dev"),
];

/// Calls of the FunctionConfig generation's kinds that it never makes.
const FUNCTION_CONFIG_NEVER: &[(&str, &str)] = &[
    ("get", "functionconfigs.config.porch.kpt.dev"),
    ("update", "functionconfigs.config.porch.kpt.dev"),
    ("delete", "functionconfigs.config.porch.kpt.dev"),
    ("update", "functionconfigs.config.porch.kpt.dev:status"),
    ("list", "podtemplates"),
    ("get", "podtemplates/base-pod-template"),
    ("watch", "podtemplates/other"),
    ("update", "podtemplates/base-pod-template"),
    ("delete", "podtemplates/base-pod-template"),
    ("list", "servicetemplates.config.porch.kpt.dev"),
    (
        "update",
        "servicetemplates.config.porch.kpt.dev/base-service-template",
    ),
];

fn assert_grants(kubectl: &Kubectl, allowed: &[&[(&str, &str)]], denied: &[&[(&str, &str)]]) {
    let mut wrong = Vec::new();
    for (set, want) in allowed
        .iter()
        .map(|s| (s, true))
        .chain(denied.iter().map(|s| (s, false)))
    {
        for (verb, resource) in set.iter() {
            if kubectl.runner_can(verb, resource, "porch-fn-system") != want {
                wrong.push(format!("{verb} {resource}: expected {want}"));
            }
        }
    }
    // Nothing anywhere else: not in the runner's own namespace, not cluster-wide.
    for ns in ["porch-system", "default"] {
        for (verb, resource) in [("create", "pods"), ("list", "pods"), ("get", "configmaps")] {
            if kubectl.runner_can(verb, resource, ns) {
                wrong.push(format!("{verb} {resource} in {ns}: expected false"));
            }
        }
    }
    assert!(wrong.is_empty(), "the runner's RBAC is off: {wrong:#?}");
}

#[tokio::test]
async fn function_config_generation_applies_with_least_privilege() {
    let Some(deploy) = deploy_copy() else { return };
    let plane = ControlPlane::start().await;
    let kubectl = Kubectl::new(&plane);
    // Over Porch as installed by its own manifests, whose Role grants more.
    install_porch(&kubectl, &deploy.porch.join("head"));
    assert!(kubectl.runner_can("watch", "services", "porch-fn-system"));
    let (built, objects) = apply(&kubectl, &deploy, "head", HEAD_CRDS);
    // Porch's objects are all there: 19 FunctionConfigs, both templates,
    // both CRDs, namespaces, the runner's ServiceAccount, Deployment, Service;
    // plus the Role, RoleBinding and PodDisruptionBudget.
    assert_eq!(objects, 31, "{built}");
    assert_eq!(built.matches("\nkind: FunctionConfig\n").count(), 19);
    let configs = kubectl.run(&[
        "get",
        "functionconfigs",
        "-n",
        "porch-fn-system",
        "-o",
        "name",
    ]);
    assert_eq!(configs.lines().count(), 19, "{configs}");

    // Our Deployment and Service fields won over those Porch's apply owned.
    assert_hardened(&kubectl);

    // Our images, also as WRAPPER_SERVER_IMAGE and the pod template's init container.
    let deployment = kubectl.run(&[
        "get",
        "deployment/function-runner",
        "-n",
        "porch-system",
        "-o",
        "jsonpath={.spec.template.spec.containers[0].image} \
         {.spec.template.spec.containers[0].env[?(@.name==\"WRAPPER_SERVER_IMAGE\")].value} \
         {.spec.template.spec.containers[0].command[0]}",
    ]);
    assert_eq!(
        deployment,
        "localhost/krm-fn-runner:latest localhost/krm-fn-wrapper-server:latest /home/nonroot/server"
    );
    let init = kubectl.run(&[
        "get",
        "podtemplate/base-pod-template",
        "-n",
        "porch-fn-system",
        "-o",
        "jsonpath={.template.spec.initContainers[0].image}",
    ]);
    assert_eq!(init, "localhost/krm-fn-wrapper-server:latest");

    assert_grants(
        &kubectl,
        &[POD_RUNTIME_CALLS, FUNCTION_CONFIG_CALLS],
        &[NEVER, FUNCTION_CONFIG_NEVER],
    );
    // The warm pool fields survive the API server's pruning: the CRD as
    // deployed carries them.
    let warm = "apiVersion: config.porch.kpt.dev/v1alpha1\nkind: FunctionConfig\nmetadata:\n  name: warm-pool\n  namespace: porch-fn-system\nspec:\n  image: set-namespace\n  prefixes: [\"\"]\n  podExecutor:\n    tags: [v0.4.1]\n    minReady: 2\n    maxPods: 3\n";
    kubectl.run_with_input(&["apply", "-f", "-"], warm);
    let kept = kubectl.run(&[
        "get",
        "functionconfig/warm-pool",
        "-n",
        "porch-fn-system",
        "-o",
        "jsonpath={.spec.podExecutor.minReady} {.spec.podExecutor.maxPods}",
    ]);
    assert_eq!(kept, "2 3");
    // The template watch's request shape, as the ServiceAccount: a list by
    // `metadata.name` field selector is allowed by the name-restricted rule.
    for (kind, name) in [
        ("podtemplates", "base-pod-template"),
        ("servicetemplates", "base-service-template"),
    ] {
        let listed = kubectl.run(&[
            "get",
            kind,
            "-n",
            "porch-fn-system",
            "--field-selector",
            &format!("metadata.name={name}"),
            "-o",
            "name",
            "--as",
            RUNNER_SA,
        ]);
        assert!(listed.contains(name), "{listed}");
    }
}

#[tokio::test]
async fn config_yaml_generation_applies_with_least_privilege() {
    let Some(deploy) = deploy_copy() else { return };
    let plane = ControlPlane::start().await;
    let kubectl = Kubectl::new(&plane);
    let (built, objects) = apply(&kubectl, &deploy, "config-yaml-era", &[]);
    // ServiceAccount, Deployment, Service, pod-cache-config; Role,
    // RoleBinding, PodDisruptionBudget (the namespaces are applied first).
    assert_eq!(objects, 7, "{built}");
    let command = kubectl.run(&[
        "get",
        "deployment/function-runner",
        "-n",
        "porch-system",
        "-o",
        "jsonpath={.spec.template.spec.containers[0].command}",
    ]);
    assert!(
        command.contains("--config=/home/nonroot/config.yaml"),
        "{command}"
    );
    assert_hardened(&kubectl);
    assert_grants(
        &kubectl,
        &[POD_RUNTIME_CALLS],
        &[NEVER, FUNCTION_CONFIG_CALLS],
    );
}

/// The files of Porch's `head/` the book copies into `deploy/porch/head`.
const HEAD_FILES: &[&str] = &[
    "1-namespace.yaml",
    "2-function-runner.yaml",
    "22-function-templates.yaml",
    "23-function-configurations.yaml",
    "config.porch.kpt.dev_functionconfigs.yaml",
    "config.porch.kpt.dev_servicetemplates.yaml",
];

/// The files of Porch's `config-yaml-era/` the book copies into
/// `deploy/porch/config-yaml-era` (the namespaces are applied before the
/// build, not built).
const CONFIG_YAML_ERA_FILES: &[&str] = &["1-namespace.yaml", "2-function-runner.yaml"];

/// A scratch copy of `deploy/` with its bases filled.
pub(crate) struct Deploy {
    dir: tempfile::TempDir,
    /// Porch's files (`KRM_FN_PORCH_DEPLOY`).
    porch: PathBuf,
}

impl Deploy {
    /// The copy's `deploy/<variant>`.
    pub(crate) fn overlay(&self, variant: &str) -> PathBuf {
        self.dir.path().join("deploy").join(variant)
    }

    /// The copy's `deploy/porch/<variant>`, the base of that overlay.
    fn base(&self, variant: &str) -> PathBuf {
        self.dir.path().join("deploy/porch").join(variant)
    }
}

/// A scratch copy of `deploy/` (for `kustomize edit`) whose bases hold
/// Porch's files from `KRM_FN_PORCH_DEPLOY`, copied as the book says; `None`
/// (the test skips, the message names the variable) without them.
pub(crate) fn deploy_copy() -> Option<Deploy> {
    let porch = common::porch_deploy()?;
    let dir = tempfile::tempdir().unwrap();
    let status = Command::new("cp")
        .arg("-a")
        .arg(Path::new(REPO).join("deploy"))
        .arg(dir.path())
        .status()
        .unwrap();
    assert!(status.success());
    let deploy = Deploy { dir, porch };
    for (variant, files) in [
        ("head", HEAD_FILES),
        ("config-yaml-era", CONFIG_YAML_ERA_FILES),
    ] {
        for file in files {
            let from = deploy.porch.join(variant).join(file);
            std::fs::copy(&from, deploy.base(variant).join(file))
                .unwrap_or_else(|e| panic!("copy {}: {e}", from.display()));
        }
    }
    Some(deploy)
}

#[test]
fn images_are_set_with_kustomize_edit() {
    // The book's way to point the manifests at a registry, on a copy.
    let Some(deploy) = deploy_copy() else { return };
    let head = deploy.overlay("head");
    for set in [
        "docker.io/nephio/porch-function-runner=registry.example:5000/krm-fn-runner:v9",
        "docker.io/nephio/porch-wrapper-server=registry.example:5000/krm-fn-wrapper-server:v9",
    ] {
        let out = Command::new(kustomize())
            .current_dir(&head)
            .args(["edit", "set", "image", set])
            .output()
            .unwrap();
        check("kustomize edit set image", out);
    }
    let built = kustomize_build(&head);
    assert_eq!(
        built
            .matches("registry.example:5000/krm-fn-wrapper-server:v9")
            .count(),
        2,
        "WRAPPER_SERVER_IMAGE and the pod template's init container:\n{built}"
    );
    assert_eq!(
        built
            .matches("image: registry.example:5000/krm-fn-runner:v9")
            .count(),
        1
    );
    assert!(!built.contains("docker.io/nephio"), "{built}");
    assert!(!built.contains("localhost/krm-fn"), "{built}");
}

#[test]
fn the_base_is_pointed_elsewhere_with_kustomize_edit() {
    // The book's other way to give an overlay Porch's files: a folder of
    // one's own holding them and a copy of the base's kustomization, named
    // in the overlay's resources instead of deploy/porch/<variant>. The
    // build is the same as with the base filled.
    let Some(deploy) = deploy_copy() else { return };
    for variant in ["head", "config-yaml-era"] {
        let overlay = deploy.overlay(variant);
        let filled = kustomize_build(&overlay);
        let elsewhere = deploy.dir.path().join("my-porch").join(variant);
        std::fs::create_dir_all(&elsewhere).unwrap();
        for entry in std::fs::read_dir(deploy.base(variant)).unwrap() {
            let entry = entry.unwrap();
            std::fs::rename(entry.path(), elsewhere.join(entry.file_name())).unwrap();
        }
        for edit in [
            ["remove", "resource", &format!("../porch/{variant}")],
            ["add", "resource", &format!("../../my-porch/{variant}")],
        ] {
            let out = Command::new(kustomize())
                .current_dir(&overlay)
                .arg("edit")
                .args(edit)
                .output()
                .unwrap();
            check(&format!("kustomize edit {}", edit.join(" ")), out);
        }
        assert_eq!(
            kustomize_build(&overlay),
            filled,
            "deploy/{variant} on ../../my-porch/{variant}"
        );
    }
}

/// Adds component `name` of `deploy/components` to the overlay at `overlay`,
/// the book's way (`kustomize edit add component`).
fn add_component(overlay: &Path, name: &str) {
    let out = Command::new(kustomize())
        .current_dir(overlay)
        .args(["edit", "add", "component", &format!("../components/{name}")])
        .output()
        .unwrap();
    check("kustomize edit add component", out);
}

#[tokio::test]
async fn autoscaling_component_applies_and_takes_over_the_replica_count() {
    // The book's way to add it, on a copy of deploy/.
    let Some(deploy) = deploy_copy() else { return };
    let head = deploy.overlay("head");
    add_component(&head, "autoscaling");
    let built = kustomize_build(&head);
    assert!(
        built.contains("\nkind: HorizontalPodAutoscaler\n"),
        "{built}"
    );
    // The Deployment leaves its replica count to the HPA.
    let deployment = built
        .split("\n---\n")
        .find(|d| d.contains("\nkind: Deployment\n"))
        .unwrap();
    assert!(!deployment.contains("replicas:"), "{deployment}");

    let plane = ControlPlane::start().await;
    let kubectl = Kubectl::new(&plane);
    let (_, objects) = apply(&kubectl, &deploy, "head", HEAD_CRDS);
    assert_eq!(objects, 32, "deploy/head's 31 objects and the HPA");
    let hpa: serde_json::Value = serde_json::from_str(&kubectl.run(&[
        "get",
        "hpa/function-runner",
        "-n",
        "porch-system",
        "-o",
        "json",
    ]))
    .unwrap();
    let spec = &hpa["spec"];
    assert_eq!(hpa["apiVersion"], "autoscaling/v2");
    assert_eq!(spec["scaleTargetRef"]["kind"], "Deployment");
    assert_eq!(spec["scaleTargetRef"]["name"], "function-runner");
    // At least the PodDisruptionBudget's minAvailable plus one.
    assert_eq!(
        (spec["minReplicas"].as_i64(), spec["maxReplicas"].as_i64()),
        (Some(2), Some(6))
    );
    let pdb = kubectl.run(&[
        "get",
        "pdb/function-runner",
        "-n",
        "porch-system",
        "-o",
        "jsonpath={.spec.minAvailable}",
    ]);
    assert_eq!(pdb, "1");
    // The Pods metric is the gauge the runner exports, in its Prometheus
    // name (tests/beds/replicas.rs and tests/beds/telemetry.rs read it off /metrics).
    let metric = &spec["metrics"][0]["pods"];
    assert_eq!(
        metric["metric"]["name"],
        krm_fn_runner::adapters::telemetry::metrics::names::EVALUATIONS_IN_FLIGHT.replace('.', "_")
    );
    assert_eq!(metric["target"]["type"], "AverageValue");
    assert_eq!(metric["target"]["averageValue"], "4");
    assert_eq!(spec["metrics"][1]["resource"]["name"], "cpu");
    assert_eq!(
        spec["metrics"][1]["resource"]["target"]["averageUtilization"],
        75
    );
    // CPU utilization needs a request on the runner's container.
    let cpu = kubectl.run(&[
        "get",
        "deployment/function-runner",
        "-n",
        "porch-system",
        "-o",
        "jsonpath={.spec.template.spec.containers[0].resources.requests.cpu}",
    ]);
    assert_eq!(cpu, "125m");
}

/// The pod-evaluator component (newer porch-servers' POD_EVALUATOR_ADDRESS,
/// port 9447): added as the book says, it gives a second Deployment of the
/// runner's image running `serve` with the pod runtime only on port 9447,
/// under the runner's ServiceAccount, and a Service on 9447 whose selector
/// picks that Deployment's pods; the images set on the overlay reach it;
/// the whole overlay applies to a real API server.
#[tokio::test]
async fn the_pod_evaluator_component_adds_a_pods_only_runner_on_port_9447() {
    let Some(deploy) = deploy_copy() else { return };
    let head = deploy.overlay("head");
    add_component(&head, "pod-evaluator");
    let built = kustomize_build(&head);
    let docs: Vec<serde_json::Value> =
        krm_fn_runner::domain::codec::from_yaml_documents(built.as_bytes()).unwrap();
    let find = |kind: &str, name: &str| {
        docs.iter()
            .find(|d| d["kind"] == kind && d["metadata"]["name"] == name)
            .unwrap_or_else(|| panic!("no {kind} {name} in\n{built}"))
    };
    let deployment = find("Deployment", "function-pod-evaluator");
    let pod = &deployment["spec"]["template"];
    let container = &pod["spec"]["containers"][0];
    let command: Vec<&str> = container["command"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    assert!(command.contains(&"--port=9447"), "{command:?}");
    assert!(command.contains(&"--disable-runtimes=exec"), "{command:?}");
    assert_eq!(pod["spec"]["serviceAccountName"], "porch-fn-runner");
    // The overlay's images reach the second Deployment, its wrapper image too.
    let runner_image =
        find("Deployment", "function-runner")["spec"]["template"]["spec"]["containers"][0]["image"]
            .clone();
    assert_eq!(container["image"], runner_image);
    let wrapper = container["env"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["name"] == "WRAPPER_SERVER_IMAGE")
        .unwrap();
    assert!(
        !wrapper["value"].as_str().unwrap().contains("nephio"),
        "{wrapper}"
    );
    let service = find("Service", "function-pod-evaluator");
    assert_eq!(service["spec"]["ports"][0]["port"], 9447);
    assert_eq!(
        service["spec"]["selector"], pod["metadata"]["labels"],
        "the Service selects the pod evaluator's pods"
    );
    // Every flag it gives is one `serve` has.
    let help = Command::new(common::runner_binary())
        .args(["serve", "--help"])
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&help.stdout);
    for flag in command.iter().skip(1) {
        let name = flag.split('=').next().unwrap();
        assert!(help.contains(name), "serve has no {name}");
    }

    let plane = ControlPlane::start().await;
    let kubectl = Kubectl::new(&plane);
    let (_, objects) = apply(&kubectl, &deploy, "head", HEAD_CRDS);
    assert_eq!(
        objects, 33,
        "deploy/head's 31 objects, the Deployment and its Service"
    );
    let ports = kubectl.run(&[
        "get",
        "service/function-pod-evaluator",
        "-n",
        "porch-system",
        "-o",
        "jsonpath={.spec.ports[0].port}",
    ]);
    assert_eq!(ports, "9447");
}
