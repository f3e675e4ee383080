//! Porch's own end-to-end suite judges us: `TestE2E` of Porch v1.5.3's
//! `test/e2e` (a testify `PorchSuite`, built unchanged from the module zip
//! the Go module proxy serves by `scripts/build-porch-e2e.sh`) runs against
//! porch-server twice with one configuration — once with `--function-runner`
//! at Porch's own Go function runner v1.5.3, once at `krm-fn-runner serve` —
//! and the verdicts per test and case must be the same.
//!
//! The bed, per runner: kube-apiserver + etcd, Porch's CRDs, porch-server in
//! standalone mode behind an APIService `v1alpha1.porch.kpt.dev` (an
//! ExternalName Service `porch-system/api` naming `localhost`, as Porch's
//! `deployments/local/localconfig.yaml` does for a porch-server outside the
//! cluster), so that the suite's controller-runtime client reaches Porch's
//! API through the kube-apiserver like any user. The suite runs in its
//! local mode (`RUN_E2E_LOCALLY=true`: its own git server on 127.0.0.1 in
//! the test process; the pod tests skip themselves) from its package
//! directory (it reads `testdata/` from there), one process per test method,
//! with the upstream repositories it clones served as `file://` mirrors of
//! the git bundles in `KRM_FN_UPSTREAM_PACKAGES` (Google's blueprints at the
//! suite's refs, `platkrm/test-blueprints`).
//!
//! Both runners run the exec runtime only, on the same programs: the
//! [`FUNCTIONS`] table maps every image the selected tests name to one binary,
//! the same for both — the catalog release the suite names where the module
//! proxy serves it, else the nearest served release (an alias), else a
//! stand-in (`tests/go/porch-e2e-stand-ins`, doing what the suite's
//! assertions check) for functions the proxy does not serve at all.
//!
//! Whether a case reached a runner is read from the runner's own log (each
//! image it evaluated): porch-server v1.5.3 runs apply-replacements v0.1.1,
//! set-namespace v0.4.1 and starlark v0.4.3 itself, so the cases naming only
//! those never reach one.
//!
//! `#[ignore]`d unless the bundles are at hand: `scripts/test.sh` runs it
//! with `--ignored` when `KRM_FN_UPSTREAM_PACKAGES` is set (`.ci/run` sets
//! it to `../shared/sources`).

use krm_fn_testbed::common;
use krm_fn_testbed::k8s_support;
use krm_fn_testbed::porch_support;

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Service;
use kube::Api;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind, PostParams};
use porch_support::{FunctionRunner, Peer, PorchServer, install_crds, porch_resource};
use serde_json::json;

/// The image prefix the suite uses (`PORCH_GCR_PREFIX_URL`'s default, and
/// porch-server's `--default-image-prefix`).
const PREFIX: &str = "gcr.io/kpt-fn";

/// How a function image the suite names is served, the same for both runners.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Source {
    /// The catalog release of that very version.
    Exact,
    /// A nearer release the module proxy serves: the version the suite
    /// names is not served.
    Alias,
    /// The module proxy serves no release of the function: a stand-in.
    StandIn,
}

/// Every image the selected tests name that a runner may be asked for
/// (under [`PREFIX`], `-demo` for Porch's demo prefix), the binary serving
/// it (a file of `scripts/build-porch-e2e.sh`'s `functions/`, or `catalog:`
/// NAME for the installed catalog's), and how.
const FUNCTIONS: &[(&str, &str, Source)] = &[
    ("apply-setters:v0.1", "apply-setters-v0.2.0", Source::Alias),
    (
        "apply-setters:v0.1.1",
        "apply-setters-v0.2.0",
        Source::Alias,
    ),
    (
        "apply-setters:v0.2.0",
        "apply-setters-v0.2.0",
        Source::Exact,
    ),
    (
        "set-namespace:v0.2.0",
        "set-namespace-v0.4.1",
        Source::Alias,
    ),
    (
        "set-namespace:v0.3.4",
        "set-namespace-v0.4.1",
        Source::Alias,
    ),
    // porch-server's builtin answers it first; mapped all the same.
    (
        "set-namespace:v0.4.1",
        "set-namespace-v0.4.1",
        Source::Exact,
    ),
    ("starlark:v0.3.0", "starlark-v0.3.0", Source::Exact),
    // porch-server's builtin answers it first; mapped all the same.
    ("starlark:v0.4.3", "starlark-v0.4.3", Source::Exact),
    ("starlark:v0.5.0", "catalog:starlark", Source::Alias),
    ("set-labels:v0.1.5", "set-labels", Source::StandIn),
    ("set-labels:v0.2.0", "set-labels", Source::StandIn),
    ("set-annotations:v0.1.4", "set-annotations", Source::StandIn),
    ("search-replace:v0.2.0", "search-replace", Source::StandIn),
    (
        "ensure-name-substring:v0.1.1",
        "ensure-name-substring",
        Source::StandIn,
    ),
    (
        "ensure-name-substring:v0.2.0",
        "ensure-name-substring",
        Source::StandIn,
    ),
];

/// The local set: the suite's test methods that need no pods.
const LOCAL_SET: &[&str] = &[
    "TestUpdateResources",
    "TestGitRepository",
    "TestExecFunctionEvaluator",
    "TestBuiltinFunctionEvaluator",
    "TestApplySetters",
    "TestSetNamespace",
    "TestStarlark",
    "TestSetLabels",
    "TestSetAnnotations",
    "TestSearchReplace",
    "TestEnsureNameSubstring",
];

/// porch-server v1.5.3's own builtins (`pkg/engine/builtinruntime.go`):
/// these images never reach a function runner.
const PORCH_BUILTINS: &[&str] = &[
    "apply-replacements:v0.1.1",
    "set-namespace:v0.4.1",
    "starlark:v0.4.3",
];

/// The directory `scripts/build-porch-e2e.sh` fills (`e2e.test`, `src/`,
/// `functions/`): `KRM_FN_PORCH_E2E`, or the script's answer.
fn suite_dir() -> PathBuf {
    k8s_support::cached_build("KRM_FN_PORCH_E2E", "scripts/build-porch-e2e.sh")
}

/// The exec runtime's `--config` and `--functions` for [`FUNCTIONS`]: a
/// directory of links to the binaries, and a config naming them.
fn exec_config(dir: &Path, suite: &Path) -> (PathBuf, PathBuf) {
    let functions = dir.join("functions");
    std::fs::create_dir_all(&functions).unwrap();
    let mut by_binary: BTreeMap<&str, Vec<String>> = BTreeMap::new();
    for (image, binary, _) in FUNCTIONS {
        by_binary
            .entry(binary)
            .or_default()
            .push(format!("{PREFIX}/{image}"));
    }
    // Porch's demo prefix (TestPodFunctionEvaluatorWithDistrolessImage).
    by_binary
        .entry("set-namespace-v0.4.1")
        .or_default()
        .push(format!("{PREFIX}-demo/set-namespace:v0.1.0"));
    let mut config = String::from("functions:\n");
    for (binary, images) in &by_binary {
        let (name, target) = match binary.strip_prefix("catalog:") {
            Some(name) => (
                name.to_string(),
                common::catalog_dir().join("bin").join(name),
            ),
            None => (binary.to_string(), suite.join("functions").join(binary)),
        };
        assert!(
            target.is_file(),
            "{} is missing: rerun scripts/build-porch-e2e.sh",
            target.display()
        );
        std::os::unix::fs::symlink(&target, functions.join(&name)).unwrap();
        writeln!(config, "- function: {name}\n  images:").unwrap();
        for image in images {
            writeln!(config, "  - {image}").unwrap();
        }
    }
    let path = dir.join("config.yaml");
    std::fs::write(&path, config).unwrap();
    (path, functions)
}

/// `file://` mirrors of the bundles the suite clones.
struct Upstream {
    _dir: tempfile::TempDir,
    blueprints: String,
    test_blueprints: String,
}

impl Upstream {
    fn clone_from(sources: &Path) -> Upstream {
        let dir = tempfile::tempdir().unwrap();
        let mirror = |bundle: &str, name: &str| {
            let src = sources.join(bundle);
            assert!(
                src.is_file(),
                "KRM_FN_UPSTREAM_PACKAGES={} holds no {bundle}",
                sources.display()
            );
            let dest = dir.path().join(name);
            common::run_checked(
                Command::new("git")
                    .args(["clone", "--quiet", "--mirror"])
                    .arg(&src)
                    .arg(&dest),
            );
            format!("file://{}", dest.display())
        };
        let blueprints = mirror("blueprints-catalog.bundle", "blueprints.git");
        let test_blueprints = mirror("test-blueprints.bundle", "test-blueprints.git");
        Upstream {
            _dir: dir,
            blueprints,
            test_blueprints,
        }
    }
}

/// A test's or case's verdict, as `go test -v` prints it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Verdict {
    Pass,
    Fail,
    Skip,
}

/// One runner's whole run: per test method, the verdicts of it and its
/// cases (`TestE2E/TestX[/case]`), the images the runner evaluated while it
/// ran, and its output.
struct Run {
    verdicts: BTreeMap<String, Verdict>,
    evaluated: BTreeMap<String, Vec<String>>,
    outputs: BTreeMap<String, String>,
}

/// The `--- PASS|FAIL|SKIP: NAME` lines of `go test -v` output.
fn verdicts(output: &str) -> BTreeMap<String, Verdict> {
    let mut out = BTreeMap::new();
    for line in output.lines() {
        let line = line.trim_start();
        for (tag, verdict) in [
            ("--- PASS: ", Verdict::Pass),
            ("--- FAIL: ", Verdict::Fail),
            ("--- SKIP: ", Verdict::Skip),
        ] {
            if let Some(rest) = line.strip_prefix(tag)
                && let Some(name) = rest.split_whitespace().next()
            {
                out.insert(name.to_string(), verdict);
            }
        }
    }
    out
}

/// The images a runner's log says it evaluated, in order. Porch's runner
/// logs `Evaluating "IMAGE" in executable mode`; ours logs each call's
/// outcome in a span carrying `image=IMAGE`.
fn evaluated_images(peer: Peer, log: &str) -> Vec<String> {
    let mut out = Vec::new();
    for line in log.lines() {
        let image = match peer {
            Peer::Porch => line
                .split_once("Evaluating \"")
                .and_then(|(_, rest)| rest.split_once("\" in executable mode"))
                .map(|(image, _)| image),
            Peer::Ours => (line.contains("evaluation succeeded")
                || line.contains("evaluation failed"))
            .then(|| line.split_once("image=").map(|(_, rest)| rest))
            .flatten()
            .map(|rest| {
                let end = rest.find(['}', ' ', ',']).unwrap_or(rest.len());
                rest[..end].trim_matches('"')
            }),
        };
        if let Some(image) = image {
            out.push(image.to_string());
        }
    }
    out
}

/// Creates the APIService in front of porch-server (`https://127.0.0.1:port`)
/// and waits until the kube-apiserver serves `porch.kpt.dev` through it.
async fn register_api_service(plane: &k8s_support::ControlPlane, port: u16) {
    let core = plane.client().await.expect("core client");
    k8s_support::create_namespace(&core, "porch-system").await;
    let service: Service = serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "api", "namespace": "porch-system"},
        "spec": {"type": "ExternalName", "externalName": "localhost"},
    }))
    .unwrap();
    Api::<Service>::namespaced(core.clone(), "porch-system")
        .create(&PostParams::default(), &service)
        .await
        .expect("create the ExternalName Service porch-system/api");
    let gvk = GroupVersionKind::gvk("apiregistration.k8s.io", "v1", "APIService");
    let resource = ApiResource::from_gvk_with_plural(&gvk, "apiservices");
    let api_services: Api<DynamicObject> = Api::all_with(core.clone(), &resource);
    let api_service: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "apiregistration.k8s.io/v1",
        "kind": "APIService",
        "metadata": {"name": "v1alpha1.porch.kpt.dev"},
        "spec": {
            "insecureSkipTLSVerify": true,
            "group": "porch.kpt.dev",
            "groupPriorityMinimum": 1000,
            "versionPriority": 15,
            "service": {"name": "api", "namespace": "porch-system", "port": port},
            "version": "v1alpha1",
        },
    }))
    .unwrap();
    api_services
        .create(&PostParams::default(), &api_service)
        .await
        .expect("create the APIService v1alpha1.porch.kpt.dev");
    let revisions: Api<DynamicObject> = Api::namespaced_with(
        core.clone(),
        "default",
        &porch_resource("PackageRevision", "packagerevisions"),
    );
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        match revisions.list(&Default::default()).await {
            Ok(_) => return,
            Err(e) => {
                let status = api_services
                    .get("v1alpha1.porch.kpt.dev")
                    .await
                    .map(|s| s.data["status"].to_string())
                    .unwrap_or_default();
                assert!(
                    Instant::now() < deadline,
                    "the kube-apiserver does not serve porch.kpt.dev through the APIService: {e}; \
                     its status: {status}"
                );
            }
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// The suite's whole run with `peer` behind porch-server: a bed of its own,
/// one `e2e.test` process per method of `methods`.
async fn run_suite(peer: Peer, methods: &[&str], upstream: &Upstream, suite: &Path) -> Run {
    let plane = Arc::new(k8s_support::ControlPlane::start().await);
    let core = plane.client().await.expect("core client");
    install_crds(&core).await;
    let work = tempfile::tempdir().unwrap();
    let (config, functions) = exec_config(work.path(), suite);
    let runner_port = common::free_port();
    let config_flag = format!("--config={}", config.display());
    let functions_flag = format!("--functions={}", functions.display());
    let runner = FunctionRunner::start(
        peer,
        runner_port,
        &[&config_flag, &functions_flag, "--disable-runtimes=pod"],
        &[],
    );
    let porch = PorchServer::start(&plane, &format!("127.0.0.1:{runner_port}"), &[]);
    let porch_port: u16 = porch
        .url
        .rsplit_once(':')
        .and_then(|(_, p)| p.parse().ok())
        .unwrap();
    register_api_service(&plane, porch_port).await;
    let kubeconfig = plane.kubeconfig_file();
    let home = work.path().join("home");
    std::fs::create_dir_all(&home).unwrap();

    let mut run = Run {
        verdicts: BTreeMap::new(),
        evaluated: BTreeMap::new(),
        outputs: BTreeMap::new(),
    };
    for method in methods {
        let before = evaluated_images(peer, &runner.log()).len();
        let out = tokio::task::spawn_blocking({
            let suite = suite.to_path_buf();
            let kubeconfig = kubeconfig.clone();
            let home = home.clone();
            let blueprints = upstream.blueprints.clone();
            let test_blueprints = upstream.test_blueprints.clone();
            let method = method.to_string();
            move || {
                Command::new(suite.join("e2e.test"))
                    .current_dir(suite.join("src"))
                    .env("E2E", "1")
                    .env("RUN_E2E_LOCALLY", "true")
                    .env("KUBECONFIG", &kubeconfig)
                    .env("HOME", &home)
                    .env("PORCH_GCP_BLUEPRINTS_REPO_URL", &blueprints)
                    .env("PORCH_TEST_BLUEPRINTS_REPO_URL", &test_blueprints)
                    .env("PORCH_GCP_HIERARCHY_REF", "hierarchy-783380ce")
                    .env("PORCH_GCR_PREFIX_URL", PREFIX)
                    .env_remove("KUBERNETES_SERVICE_HOST")
                    .args([
                        "-test.v",
                        "-test.run",
                        "^TestE2E$",
                        "-test.timeout",
                        "10m",
                        "-testify.m",
                    ])
                    .arg(format!("^{method}$"))
                    .output()
                    .expect("run e2e.test")
            }
        })
        .await
        .unwrap();
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let found = verdicts(&text);
        let own = format!("TestE2E/{method}");
        assert!(
            found.contains_key(&own),
            "{}: e2e.test ran no {own} (exit {:?}):\n{text}\nporch-server:\n{}",
            peer.name(),
            out.status.code(),
            porch.log_tail(40)
        );
        for (name, verdict) in found {
            if name.starts_with(&own) {
                run.verdicts.insert(name, verdict);
            }
        }
        let images = evaluated_images(peer, &runner.log());
        run.evaluated
            .insert(method.to_string(), images[before..].to_vec());
        run.outputs.insert(method.to_string(), text);
    }
    drop(porch);
    drop(runner);
    run
}

/// The images of [`FUNCTIONS`] a verdict's name selects: a case is named
/// after its image (`…/apply-setter:v0.1`), so its images are those whose
/// tag part it names.
fn case_image(case: &str) -> Option<String> {
    let (_, last) = case.rsplit_once('/')?;
    let (name, tag) = last.split_once(':')?;
    FUNCTIONS
        .iter()
        .map(|(image, _, _)| *image)
        .find(|image| {
            image
                .split_once(':')
                .is_some_and(|(n, t)| t == tag && n.starts_with(name))
        })
        .map(|image| format!("{PREFIX}/{image}"))
}

/// The local set, against both runners: the pass sets are the same, every
/// case naming a function porch-server does not run itself reached the
/// runner, and the per-test table is printed.
#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs the upstream git bundles (KRM_FN_UPSTREAM_PACKAGES); scripts/test.sh runs it when set"]
async fn local_set_same_verdicts_as_porchs_runner() {
    let Some(sources) = std::env::var_os("KRM_FN_UPSTREAM_PACKAGES") else {
        panic!(
            "KRM_FN_UPSTREAM_PACKAGES is not set: point it at a folder holding \
             blueprints-catalog.bundle and test-blueprints.bundle"
        );
    };
    let suite = suite_dir();
    let upstream = Upstream::clone_from(Path::new(&sources));

    let porch = run_suite(Peer::Porch, LOCAL_SET, &upstream, &suite).await;
    let ours = run_suite(Peer::Ours, LOCAL_SET, &upstream, &suite).await;

    // The table: every test and case either side reported.
    let mut names: Vec<&String> = porch.verdicts.keys().chain(ours.verdicts.keys()).collect();
    names.sort();
    names.dedup();
    let mut table = String::from(
        "| test / case | Porch's runner | ours | reached a runner (Porch's / ours) |\n|---|---|---|---|\n",
    );
    let mut differences = Vec::new();
    for name in &names {
        let p = porch.verdicts.get(*name).copied();
        let o = ours.verdicts.get(*name).copied();
        let method = name.split('/').nth(1).unwrap_or_default();
        let reached = |run: &Run| -> String {
            let images = run.evaluated.get(method).cloned().unwrap_or_default();
            match case_image(name) {
                Some(image) => images.iter().filter(|i| **i == image).count().to_string(),
                None => images.len().to_string(),
            }
        };
        let shown = |v: Option<Verdict>| v.map_or("not run".to_string(), |v| format!("{v:?}"));
        writeln!(
            table,
            "| {name} | {} | {} | {} / {} |",
            shown(p),
            shown(o),
            reached(&porch),
            reached(&ours)
        )
        .unwrap();
        if p != o {
            differences.push(format!("{name}: Porch's runner {p:?}, ours {o:?}"));
        }
    }
    eprintln!("Porch v1.5.3's e2e suite, local set:\n{table}");
    for (method, images) in &ours.evaluated {
        eprintln!(
            "{method}: ours evaluated {images:?}; Porch's runner {:?}",
            porch.evaluated[method]
        );
    }
    let failed_output = |run: &Run, who: &str| -> String {
        let mut s = String::new();
        for (method, text) in &run.outputs {
            if run
                .verdicts
                .get(&format!("TestE2E/{method}"))
                .is_some_and(|v| *v == Verdict::Fail)
            {
                let _ = writeln!(s, "--- {who}, {method}:\n{text}");
            }
        }
        s
    };
    assert!(
        differences.is_empty(),
        "the verdicts differ:\n{}\n{}{}",
        differences.join("\n"),
        failed_output(&porch, "Porch's runner"),
        failed_output(&ours, "ours")
    );

    // Every method ran on both sides, and what reached a runner is what the
    // function table says: each case whose image porch-server does not run
    // itself was evaluated by the runner, on both sides.
    for method in LOCAL_SET {
        let name = format!("TestE2E/{method}");
        assert!(
            porch.verdicts.contains_key(&name) && ours.verdicts.contains_key(&name),
            "{name}"
        );
    }
    for name in &names {
        let Some(image) = case_image(name) else {
            continue;
        };
        let builtin = PORCH_BUILTINS
            .iter()
            .any(|b| image == format!("{PREFIX}/{b}"));
        let method = name.split('/').nth(1).unwrap_or_default();
        for (who, run) in [("Porch's runner", &porch), ("ours", &ours)] {
            let evaluated = run.evaluated[method].contains(&image);
            assert_eq!(
                evaluated, !builtin,
                "{name}: {who} evaluated {image}: {evaluated} (porch-server's builtin: {builtin})"
            );
        }
    }
    // The pass set: every test of the local set passes with Porch's runner
    // (else the bed, not the runner, is wrong).
    let porch_failures: Vec<_> = porch
        .verdicts
        .iter()
        .filter(|(_, v)| **v == Verdict::Fail)
        .map(|(n, _)| n.clone())
        .collect();
    assert!(
        porch_failures.is_empty(),
        "with Porch's own runner these fail: {porch_failures:?}\n{}",
        failed_output(&porch, "Porch's runner")
    );
}
