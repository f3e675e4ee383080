//! The builtin `set-namespace` and `set-labels` against the functions
//! catalog's own fixtures for those functions, and the builtin
//! `set-namespace` against the real catalog binary (v0.4.5).
//!
//! Fixture cases (`examples/set-namespace-*`, `examples/set-labels-*`,
//! `tests/set-namespace/**`, `tests/set-labels/**` under
//! `KRM_FN_CATALOG_FIXTURES`) are rendered with the library's render
//! pipeline — the Kptfile's catalog image (`gcr.io/kpt-fn/<fn>:unstable`)
//! served by the builtin — or, for `testType: eval` cases, run once on all
//! objects as `kpt fn eval` does. The package is written back to a temporary
//! copy and compared, as parsed YAML, with the copy after `git apply
//! .expected/diff.patch`; the exit code must match, and `results.yaml`, when
//! present, must equal the render's FunctionResultList.

use krm_fn_testbed::packages;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use async_trait::async_trait;
use krm_fn_runner::adapters::runtime::{BuiltinRuntime, ExecCommandRuntime};
use krm_fn_runner::domain::codec;
use krm_fn_runner::domain::evaluation::EvalError;
use krm_fn_runner::domain::render::{Package, RenderOptions, RenderOutcome, Renderer};
use krm_fn_runner::domain::resource_list::ResourceList;
use krm_fn_runner::ports::{FunctionCall, FunctionOutput, FunctionRuntime, FunctionTarget};
use packages::{
    case_config, case_dirs, compare_trees, copy_case, expected_tree, read_items, read_tree,
    write_items,
};
use serde_json::{Map, Value, json};

/// The catalog function an image names (`…/set-namespace:unstable` → `set-namespace`).
fn function_name(image: &str) -> &str {
    let last = image.rsplit('/').next().unwrap_or(image);
    last.split([':', '@']).next().unwrap_or(last)
}

/// Serves catalog images of set-namespace/set-labels, whatever their tag,
/// with one runtime: the builtin (re-tagged to a served version) or the
/// real binary (as an exec function). Results keep the image as written.
struct Serve {
    inner: Arc<dyn FunctionRuntime>,
    route: fn(&str) -> Option<FunctionTarget>,
}

#[async_trait]
impl FunctionRuntime for Serve {
    async fn run(&self, mut call: FunctionCall) -> Result<FunctionOutput, EvalError> {
        let Some(target) = (self.route)(call.target.name()) else {
            return Err(EvalError::not_found(call.target.name()));
        };
        call.target = target;
        self.inner.run(call).await
    }
}

fn builtin_route(image: &str) -> Option<FunctionTarget> {
    match function_name(image) {
        "set-namespace" => Some(FunctionTarget::Image("set-namespace:v0.4.5".into())),
        "set-labels" => Some(FunctionTarget::Image("set-labels:v0.2.4".into())),
        _ => None,
    }
}

fn builtin() -> Serve {
    Serve {
        inner: Arc::new(BuiltinRuntime::default()),
        route: builtin_route,
    }
}

/// The installed catalog binary of set-namespace, if any.
fn set_namespace_binary() -> Option<PathBuf> {
    let dir = std::env::var_os("KRM_FN_CATALOG")
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("KRM_FN_CACHE")
                .map(|c| PathBuf::from(c).join("catalog"))
                .or_else(|| {
                    std::env::var_os("HOME")
                        .map(|h| PathBuf::from(h).join(".cache/krm-fn-runner/catalog"))
                })
        })?;
    let bin = dir.join("bin/set-namespace");
    bin.is_file().then_some(bin)
}

fn binary_route(image: &str) -> Option<FunctionTarget> {
    (function_name(image) == "set-namespace")
        .then(|| FunctionTarget::Exec(set_namespace_binary().unwrap().display().to_string()))
}

fn binary() -> Serve {
    Serve {
        inner: Arc::new(ExecCommandRuntime::inheriting(64 << 20)),
        route: binary_route,
    }
}

/// What a case produced.
struct Outcome {
    exit_code: i64,
    message: String,
    results: Option<Value>,
    tree: std::collections::BTreeMap<String, Vec<Value>>,
}

fn config_map(args: &Value) -> Value {
    let data: Map<String, Value> = args
        .as_object()
        .map(|m| {
            m.iter()
                .map(|(k, v)| {
                    let s = v
                        .as_str()
                        .map(str::to_string)
                        .unwrap_or_else(|| v.to_string());
                    (k.clone(), Value::String(s))
                })
                .collect()
        })
        .unwrap_or_default();
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "function-input"}, "data": data})
}

async fn run_case(case: &Path, runtime: &Serve) -> Result<Outcome, String> {
    let work = tempfile::tempdir().unwrap();
    copy_case(case, work.path());
    let config = case_config(case);
    let before = read_items(work.path());
    if config["testType"] == "eval" {
        let image = config["image"].as_str().ok_or("eval case without image")?;
        let function_config = if let Some(args) = config.get("args") {
            Some(config_map(args))
        } else if let Some(fc) = config["fnConfig"].as_str() {
            let text = std::fs::read(case.join(".expected").join(fc)).map_err(|e| e.to_string())?;
            Some(codec::from_yaml_slice::<Value>(&text).map_err(|e| e.to_string())?)
        } else {
            None
        };
        let mut rl = ResourceList::new(before.clone());
        rl.function_config = function_config;
        let call = FunctionCall {
            target: FunctionTarget::Image(image.to_string()),
            resource_list: rl,
            timeout: None,
            sources: None,
        };
        return match runtime.run(call).await {
            Ok(out) => {
                write_items(work.path(), &before, &out.resource_list.items);
                Ok(Outcome {
                    exit_code: 0,
                    message: String::new(),
                    results: None,
                    tree: read_tree(work.path()),
                })
            }
            Err(e) => Ok(Outcome {
                exit_code: 1,
                message: e.to_string(),
                results: None,
                tree: read_tree(work.path()),
            }),
        };
    }
    let package = Package::from_flat(before.clone()).map_err(|e| e.to_string())?;
    let outcome: RenderOutcome = Renderer::new(runtime, RenderOptions::default())
        .render(package)
        .await;
    if let Some(items) = &outcome.resources {
        write_items(work.path(), &before, items);
    }
    let results: Value = codec::from_yaml_str(&outcome.result_list().to_yaml().unwrap()).unwrap();
    Ok(Outcome {
        exit_code: i64::from(!outcome.is_ok()),
        message: outcome.error.map(|e| e.to_string()).unwrap_or_default(),
        results: Some(results),
        tree: read_tree(work.path()),
    })
}

fn check(case: &Path, out: &Outcome) -> Result<(), String> {
    let config = case_config(case);
    let want_exit = config["exitCode"].as_i64().unwrap_or(0);
    if out.exit_code != want_exit {
        return Err(format!(
            "exit code {} (want {want_exit}): {}",
            out.exit_code, out.message
        ));
    }
    compare_trees(&expected_tree(case)?, &out.tree)?;
    let results_file = case.join(".expected/results.yaml");
    if results_file.exists()
        && let Some(got) = &out.results
    {
        let want: Value = codec::from_yaml_slice(&std::fs::read(&results_file).unwrap()).unwrap();
        if &want != got {
            return Err(format!(
                "results differ:\n--- want\n{}\n--- got\n{}",
                codec::to_yaml_string(&want).unwrap(),
                codec::to_yaml_string(got).unwrap()
            ));
        }
    }
    Ok(())
}

fn cases(root: &Path, function: &str) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = case_dirs(&root.join("examples"))
        .into_iter()
        .filter(|d| {
            d.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with(&format!("{function}-")))
        })
        .collect();
    out.extend(case_dirs(&root.join("tests").join(function)));
    out
}

async fn suite(function: &str, runtime: &Serve) -> (Vec<String>, Vec<String>) {
    let Ok(root) = std::env::var("KRM_FN_CATALOG_FIXTURES") else {
        return (Vec::new(), Vec::new());
    };
    let root = PathBuf::from(root);
    let (mut passed, mut failed) = (Vec::new(), Vec::new());
    for case in cases(&root, function) {
        let rel = case.strip_prefix(&root).unwrap().display().to_string();
        let result = match run_case(&case, runtime).await {
            Ok(out) => check(&case, &out),
            Err(e) => Err(e),
        };
        match result {
            Ok(()) => {
                println!("PASS  {rel}");
                passed.push(rel);
            }
            Err(e) => {
                println!("FAIL  {rel}: {e}");
                failed.push(format!("{rel}: {e}"));
            }
        }
    }
    (passed, failed)
}

/// Fails the (ignored unless asked for) test when the catalog's fixtures are
/// not at hand: the Go module proxy does not serve them.
fn require_fixtures() {
    assert!(
        std::env::var_os("KRM_FN_CATALOG_FIXTURES").is_some(),
        "KRM_FN_CATALOG_FIXTURES is not set: point it at a copy of the catalog's examples/ and tests/"
    );
}

#[tokio::test]
#[ignore = "needs the catalog's examples/ and tests/ (KRM_FN_CATALOG_FIXTURES); scripts/test.sh runs it when set"]
async fn builtin_set_namespace_passes_the_catalog_fixtures() {
    require_fixtures();
    let (passed, failed) = suite("set-namespace", &builtin()).await;
    println!(
        "set-namespace builtin: {} passed, {} failed",
        passed.len(),
        failed.len()
    );
    assert!(
        passed.len() >= 8,
        "too few set-namespace cases ran: {passed:?}"
    );
    assert!(failed.is_empty(), "{}", failed.join("\n\n"));
}

#[tokio::test]
#[ignore = "needs the catalog's examples/ and tests/ (KRM_FN_CATALOG_FIXTURES); scripts/test.sh runs it when set"]
async fn builtin_set_labels_passes_the_catalog_fixtures() {
    require_fixtures();
    let (passed, failed) = suite("set-labels", &builtin()).await;
    println!(
        "set-labels builtin: {} passed, {} failed",
        passed.len(),
        failed.len()
    );
    assert!(
        passed.len() >= 10,
        "too few set-labels cases ran: {passed:?}"
    );
    assert!(failed.is_empty(), "{}", failed.join("\n\n"));
}

#[tokio::test]
#[ignore = "needs the catalog's examples/ and tests/ (KRM_FN_CATALOG_FIXTURES); scripts/test.sh runs it when set"]
async fn catalog_set_namespace_binary_passes_the_same_fixtures() {
    require_fixtures();
    set_namespace_binary()
        .expect("set-namespace binary not installed: run scripts/install-catalog-functions.sh");
    let (passed, failed) = suite("set-namespace", &binary()).await;
    println!(
        "set-namespace binary: {} passed, {} failed",
        passed.len(),
        failed.len()
    );
    assert!(failed.is_empty(), "{}", failed.join("\n\n"));
}

/// Inputs beyond the fixtures: matcher, SetNamespace config, package
/// context, depends-on, upstream identifiers, scopes, bad configs. (A
/// malformed upstream identifier is left out: the Go function crashes on it
/// with a nil dereference, while the builtin leaves that object alone.)
fn comparison_inputs() -> Vec<(&'static str, Value)> {
    let items = json!([
        {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition", "metadata": {"name": "crd-no-webhook"}},
        {"apiVersion": "apiextensions.k8s.io/v1beta1", "kind": "CustomResourceDefinition", "metadata": {"name": "crd-beta"}, "spec": {"conversion": {"webhook": {"clientConfig": {"service": {"namespace": "old"}}}}}},
        {"apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService", "metadata": {"name": "as"}, "spec": {}},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": "crb"}, "subjects": [{"kind": "User", "name": "u"}, {"kind": "ServiceAccount", "name": "sa", "namespace": ""}, {"kind": "ServiceAccount", "name": "sb", "namespace": "old"}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": {"name": "rb", "namespace": "old"}, "subjects": [{"kind": "ServiceAccount", "name": "sa", "namespace": "old"}]},
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "nons"}},
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "old"}},
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "other"}},
        {"apiVersion": "example.com/v1", "kind": "Foo", "metadata": {"name": "foo"}},
        {"apiVersion": "example.com/v1", "kind": "Foo", "metadata": {"name": "foo2", "namespace": "other", "annotations": {"config.kubernetes.io/depends-on": "apps/namespaces/old/Deployment/d"}}},
        {"apiVersion": "example.com/v1", "kind": "Foo", "metadata": {"name": "foo3", "namespace": "old", "annotations": {"config.kubernetes.io/depends-on": "/namespaces/old/ConfigMap/missing"}}},
        {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d", "namespace": "old", "annotations": {"internal.kpt.dev/upstream-identifier": "apps|Deployment|example|d"}}},
        {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "svc", "namespace": "example"}},
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "local", "annotations": {"config.kubernetes.io/local-config": "true"}}},
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "notlocal", "annotations": {"config.kubernetes.io/local-config": "false"}}}
    ]);
    let cm = |data: Value| json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "function-input"}, "data": data});
    let mut out = Vec::new();
    for (name, fc) in [
        ("configmap", cm(json!({"namespace": "newns"}))),
        (
            "matcher old",
            cm(json!({"namespace": "newns", "namespaceMatcher": "old"})),
        ),
        (
            "matcher example (origin)",
            cm(json!({"namespace": "newns", "namespaceMatcher": "example"})),
        ),
        (
            "matcher unused",
            cm(json!({"namespace": "newns", "namespaceMatcher": "nothing"})),
        ),
        ("already set", cm(json!({"namespace": "old"}))),
        (
            "setnamespace kind",
            json!({"apiVersion": "fn.kpt.dev/v1alpha1", "kind": "SetNamespace", "metadata": {"name": "x"}, "namespace": "viakind"}),
        ),
        (
            "setnamespace empty",
            json!({"apiVersion": "fn.kpt.dev/v1alpha1", "kind": "SetNamespace", "metadata": {"name": "x"}}),
        ),
        (
            "package context",
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "kptfile.kpt.dev", "annotations": {"internal.config.kubernetes.io/path": "package-context.yaml", "internal.config.kubernetes.io/index": "0"}}, "data": {"name": "ctxns"}}),
        ),
        ("configmap without namespace", cm(json!({"other": "x"}))),
        (
            "unknown kind",
            json!({"apiVersion": "example.com/v2", "kind": "Nope", "metadata": {"name": "n", "namespace": "q"}}),
        ),
        ("missing config", Value::Null),
    ] {
        let mut rl = json!({"apiVersion": "config.kubernetes.io/v1", "kind": "ResourceList", "items": items});
        if !fc.is_null() {
            rl["functionConfig"] = fc;
        }
        out.push((name, rl));
    }
    out
}

#[tokio::test]
async fn builtin_set_namespace_matches_the_catalog_binary() {
    let bin = set_namespace_binary()
        .expect("set-namespace binary not installed: run scripts/install-catalog-functions.sh");
    let exec = ExecCommandRuntime::inheriting(64 << 20);
    let builtin = BuiltinRuntime::default();
    let mut differences = Vec::new();
    for (name, rl) in comparison_inputs() {
        let input: ResourceList = serde_json::from_value(rl).unwrap();
        let call = |target| FunctionCall {
            target,
            resource_list: input.clone(),
            timeout: Some(std::time::Duration::from_secs(30)),
            sources: None,
        };
        let go = exec
            .run(call(FunctionTarget::Exec(bin.display().to_string())))
            .await
            .unwrap_or_else(|e| panic!("{name}: binary failed: {e}"));
        let rust = builtin
            .run(call(FunctionTarget::Image("set-namespace:v0.4.5".into())))
            .await
            .unwrap_or_else(|e| panic!("{name}: builtin failed: {e}"));
        let (go, rust) = (go.resource_list, rust.resource_list);
        if go.items != rust.items {
            differences.push(format!(
                "{name}: items differ\n--- go\n{}\n--- rust\n{}",
                codec::to_yaml_string(&go.items).unwrap(),
                codec::to_yaml_string(&rust.items).unwrap()
            ));
        }
        let order = |rl: &ResourceList| -> Vec<String> {
            rl.items
                .iter()
                .map(|i| format!("{}/{}", i["kind"], i["metadata"]["name"]))
                .collect()
        };
        if order(&go) != order(&rust) {
            differences.push(format!(
                "{name}: item order differs: {:?} vs {:?}",
                order(&go),
                order(&rust)
            ));
        }
        if go.results != rust.results {
            differences.push(format!(
                "{name}: results differ\n--- go\n{}\n--- rust\n{}",
                codec::to_yaml_string(&go.results).unwrap(),
                codec::to_yaml_string(&rust.results).unwrap()
            ));
        }
    }
    assert!(differences.is_empty(), "{}", differences.join("\n\n"));
}
