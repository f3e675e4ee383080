//! The render pipeline over the real runtimes: a chain of the builtin
//! runtime and a remote function runner (`krm-fn-runner serve` over gRPC,
//! exec runtime with the installed catalog functions), and the exec-backed
//! runtime for `image:` functions.

use krm_fn_testbed::common;

use std::sync::Arc;

use common::{Runner, catalog_dir};
use krm_fn_runner::adapters::exec::{ExecEvaluator, ExecSettings};
use krm_fn_runner::adapters::runtime::{BuiltinRuntime, EvaluatorRuntime, RuntimeChain};
use krm_fn_runner::domain::exec_config::ExecConfig;
use krm_fn_runner::domain::image::DEFAULT_IMAGE_PREFIX;
use krm_fn_runner::domain::render::annotations as ann;
use krm_fn_runner::domain::render::{Package, RenderOptions, Renderer};
use serde_json::{Value, json};

const STARLARK: &str = "ghcr.io/kptdev/krm-functions-catalog/starlark:v0.5.5";

fn package(pipeline: Value) -> Package {
    let mut kptfile = json!({"apiVersion": "kpt.dev/v1", "kind": "Kptfile", "metadata": {"name": "app"}, "pipeline": pipeline});
    ann::set_path(&mut kptfile, "Kptfile");
    let mut cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm"}, "data": {"a": "b"}});
    ann::set_path(&mut cm, "cm.yaml");
    let mut script = json!({
        "apiVersion": "fn.kpt.dev/v1alpha1", "kind": "StarlarkRun",
        "metadata": {"name": "annotate", "annotations": {"config.kubernetes.io/local-config": "true"}},
        "source": "for r in ctx.resource_list[\"items\"]:\n  r[\"metadata\"].setdefault(\"annotations\", {})[\"starlark\"] = \"ran\"\n"
    });
    ann::set_path(&mut script, "annotate.yaml");
    let mut fail = json!({
        "apiVersion": "fn.kpt.dev/v1alpha1", "kind": "StarlarkRun",
        "metadata": {"name": "fail", "annotations": {"config.kubernetes.io/local-config": "true"}},
        "source": "fail(\"no thanks\")\n"
    });
    ann::set_path(&mut fail, "fail.yaml");
    Package::from_flat(vec![kptfile, cm, script, fail]).unwrap()
}

fn pipeline() -> Value {
    json!({"mutators": [
        {"image": "set-labels:v0.2.4", "configMap": {"tier": "db"}},
        {"image": STARLARK, "configPath": "annotate.yaml"},
        {"image": "set-namespace:v0.4.5", "configMap": {"namespace": "prod"}}
    ]})
}

fn cm(items: &[Value]) -> &Value {
    items.iter().find(|i| ann::name(i) == "cm").unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn builtin_then_remote_function_runner() {
    let config = format!("--config={}", catalog_dir().join("config.yaml").display());
    let functions = format!("--functions={}", catalog_dir().join("bin").display());
    let runner = Runner::start(&[&config, &functions, "--disable-runtimes=pod"]);
    let remote = EvaluatorRuntime::remote(&runner.address, 6 << 20).unwrap();
    let chain = RuntimeChain::new()
        .with("builtin", Arc::new(BuiltinRuntime::default()))
        .with("remote", Arc::new(remote));

    let out = Renderer::new(&chain, RenderOptions::default())
        .render(package(pipeline()))
        .await;
    assert!(out.is_ok(), "{:?}", out.error);
    let items = out.resources.unwrap();
    let cm = cm(&items);
    assert_eq!(cm["metadata"]["labels"]["tier"], "db", "builtin set-labels");
    assert_eq!(
        cm["metadata"]["annotations"]["starlark"], "ran",
        "remote starlark"
    );
    assert_eq!(cm["metadata"]["namespace"], "prod", "builtin set-namespace");
    let log = runner.log();
    assert!(
        log.contains("starlark"),
        "starlark ran on the runner: {log}"
    );
    assert!(
        !log.contains("set-labels"),
        "builtins never reach the runner: {log}"
    );

    // A failing remote function fails the render with Porch's shape: exit 1, no stderr.
    let failing = json!({"mutators": [{"image": STARLARK, "configPath": "fail.yaml"}]});
    let out = Renderer::new(&chain, RenderOptions::default())
        .render(package(failing))
        .await;
    let err = out.error.as_ref().unwrap().to_string();
    assert!(
        err.starts_with("pkg.render: pkg .:\n\tpipeline.run: "),
        "{err}"
    );
    assert!(err.contains("no thanks"), "{err}");
    let status = out.render_status();
    assert_eq!(status.result.as_ref().unwrap().items[0].exit_code, 1);
    assert_eq!(status.result.unwrap().exit_code, 1);
    assert!(out.resources.is_none());
}

#[tokio::test]
async fn exec_backed_image_runtime() {
    let text = std::fs::read(catalog_dir().join("config.yaml")).unwrap();
    let config = ExecConfig::parse(&text, "config.yaml").unwrap();
    let (table, _) = config.table(&catalog_dir().join("bin"), DEFAULT_IMAGE_PREFIX);
    let exec = EvaluatorRuntime::exec(ExecEvaluator::new(table, ExecSettings::new(6 << 20, &[])));
    let out = Renderer::new(&exec, RenderOptions::default())
        .render(package(json!({"mutators": [
            {"image": STARLARK, "configPath": "annotate.yaml"},
            {"image": "set-namespace:v0.4.5", "configMap": {"namespace": "prod"}}
        ]})))
        .await;
    assert!(out.is_ok(), "{:?}", out.error);
    let items = out.resources.unwrap();
    assert_eq!(
        cm(&items)["metadata"]["namespace"],
        "prod",
        "the catalog binary"
    );
    let failing = json!({"mutators": [{"image": STARLARK, "configPath": "fail.yaml"}]});
    let out = Renderer::new(&exec, RenderOptions::default())
        .render(package(failing))
        .await;
    assert!(out.error.as_ref().unwrap().is_function_failure());
    let list = out.result_list();
    assert_eq!(list.items[0].exit_code, 1);
    assert_eq!(
        list.items[0].stderr,
        "failed to evaluate function: error: function failure"
    );
    assert_eq!(list.items[0].results[0].message, "fail: no thanks");
}

/// D4: a rendered package renders again, and again. The root Kptfile then
/// carries the previous render's `status`, which list-setters v0.1.0 (whose
/// Kptfile type has no `status`) refuses: functions get the Kptfile without
/// the render's own status, and the new one replaces it. Each render is
/// `krm-fn-runner render` with the catalog binaries behind `image:` names.
#[test]
fn a_rendered_package_renders_again() {
    let dir = tempfile::tempdir().unwrap();
    let pkg = dir.path().join("pkg");
    std::fs::create_dir_all(&pkg).unwrap();
    std::fs::write(
        pkg.join("Kptfile"),
        "apiVersion: kpt.dev/v1\nkind: Kptfile\nmetadata:\n  name: pkg # setters\npipeline:\n  mutators:\n  \
         - image: gcr.io/kpt-fn/apply-setters:v0.2.2\n    configMap:\n      replicas: \"4\"\n      tier: gold\n  \
         validators:\n  - image: gcr.io/kpt-fn/list-setters:v0.1.0\n",
    )
    .unwrap();
    std::fs::write(
        pkg.join("app.yaml"),
        "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: app\n  labels:\n    tier: free # kpt-set: ${tier}\nspec:\n  replicas: 1 # kpt-set: ${replicas}\n",
    )
    .unwrap();
    let render = || {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_krm-fn-runner"))
            .arg("render")
            .arg(&pkg)
            .arg("--exec-config")
            .arg(catalog_dir().join("config.yaml"))
            .arg("--functions")
            .arg(catalog_dir().join("bin"))
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert_eq!(out.status.code(), Some(0), "{stderr}");
        (
            std::fs::read_to_string(pkg.join("Kptfile")).unwrap(),
            std::fs::read_to_string(pkg.join("app.yaml")).unwrap(),
        )
    };
    let first = render();
    assert!(
        first.1.contains("tier: gold # kpt-set: ${tier}")
            && first.1.contains("replicas: 4 # kpt-set: ${replicas}"),
        "{}",
        first.1
    );
    assert!(first.0.contains("status: \"True\""), "{}", first.0);
    assert!(
        first
            .0
            .contains("Name: replicas, Value: 4, Type: int, Count: 1"),
        "list-setters saw the applied setters: {}",
        first.0
    );
    for _ in 0..2 {
        assert_eq!(render(), first, "a re-render changes nothing");
    }
}

/// kyaml's SyncOrder after an `exec:` function: an object the function
/// writes back with its keys in another order keeps the input's key order.
/// The call gets the items themselves when the render keeps no partial
/// result (the exec runtime hands back those it did not move into the
/// output, and the order is restored from them), and a copy when it does
/// (`kpt.dev/save-on-render-failure`); both ways give the same order.
#[tokio::test]
async fn exec_output_keeps_the_input_key_order() {
    use krm_fn_runner::adapters::package::render_dir;
    use krm_fn_runner::adapters::runtime::ExecCommandRuntime;
    // Reverses the top-level keys of every item of the ResourceList it reads.
    const REVERSE: &str = r##"import sys
lines = sys.stdin.read().split("\n")
head, items, tail, state = [], [], [], "head"
for l in lines:
    if state == "head":
        head.append(l)
        if l.startswith("items:"):
            state = "items"
    elif state == "items" and l.startswith("- "):
        items.append([l[2:]])
    elif state == "items" and (l.startswith("  ") or l == "") and items:
        items[-1].append(l[2:])
    else:
        state = "tail"
        tail.append(l)
out = head
for item in items:
    blocks = []
    for l in item:
        if l and not l.startswith((" ", "#")):
            blocks.append([l])
        elif blocks:
            blocks[-1].append(l)
    flat = [l for b in reversed(blocks) for l in b if l]
    out += ["- " + flat[0]] + ["  " + l for l in flat[1:]]
sys.stdout.write("\n".join(out + tail))
"##;
    for save in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        let function = dir.path().join("reverse.py");
        std::fs::write(&function, REVERSE).unwrap();
        let pkg = dir.path().join("pkg");
        std::fs::create_dir(&pkg).unwrap();
        let annotations = if save {
            "  annotations:\n    kpt.dev/save-on-render-failure: \"true\"\n"
        } else {
            ""
        };
        // The system's interpreter: one installed beneath a home directory
        // (pyenv's shims on `PATH`) is outside what the sandbox lets a
        // function read.
        std::fs::write(
            pkg.join("Kptfile"),
            format!(
                "apiVersion: kpt.dev/v1\nkind: Kptfile\nmetadata:\n  name: pkg\n{annotations}\
                 pipeline:\n  mutators:\n  - exec: /usr/bin/python3 {}\n",
                function.display()
            ),
        )
        .unwrap();
        std::fs::write(
            pkg.join("cm.yaml"),
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cm\ndata:\n  a: \"1\"\n  b: \"2\"\n",
        )
        .unwrap();
        let runtime = ExecCommandRuntime::inheriting(1 << 20);
        let options = RenderOptions::builder().allow_exec(true).build();
        let rendered = render_dir(&pkg, &runtime, options).await.unwrap();
        assert!(rendered.is_ok(), "{:?}", rendered.outcome.error);
        let items = rendered.resources().unwrap();
        let keys: Vec<&str> = cm(items)
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        assert_eq!(
            keys,
            ["apiVersion", "kind", "metadata", "data"],
            "save-on-render-failure: {save}"
        );
        rendered.write_in_place().unwrap();
        let text = std::fs::read_to_string(pkg.join("cm.yaml")).unwrap();
        assert!(
            text.starts_with("apiVersion: v1\nkind: ConfigMap\n"),
            "{text}"
        );
    }
}

/// `krm-fn-runner render PKG --results-dir RESULTS` with an empty PATH
/// (nothing but the builtins can serve a step).
fn render_without_path(pkg: &std::path::Path, results: &std::path::Path) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_krm-fn-runner"))
        .arg("render")
        .arg(pkg)
        .arg("--results-dir")
        .arg(results)
        .env("PATH", "/nonexistent")
        .output()
        .unwrap()
}

/// `apply-setters` (catalog v0.2.2) is a builtin: an `image:` step for it
/// renders with no binary on the PATH and no `--allow-exec`, comments kept,
/// and its results are recorded; a construct the builtin leaves to the Go
/// function (an anchor on a tagged field) fails the step naming why,
/// since there is no other runtime to hand it to.
#[test]
fn apply_setters_runs_in_process() {
    let dir = tempfile::tempdir().unwrap();
    let pkg = dir.path().join("pkg");
    std::fs::create_dir_all(&pkg).unwrap();
    std::fs::write(
        pkg.join("Kptfile"),
        "apiVersion: kpt.dev/v1\nkind: Kptfile\nmetadata:\n  name: pkg\npipeline:\n  mutators:\n  \
         - image: ghcr.io/kptdev/krm-functions-catalog/apply-setters:v0.2\n    configMap:\n      app: shop\n      \
         envs: '[dev, prod]'\n",
    )
    .unwrap();
    let app = "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: app # kpt-set: ${app}\nspec:\n  \
               envs: # kpt-set: ${envs}\n  - x\n  image: \"nginx\" # kpt-set: ${app}\n";
    std::fs::write(pkg.join("app.yaml"), app).unwrap();
    let render = |pkg: &std::path::Path| render_without_path(pkg, &dir.path().join("results"));
    let out = render(&pkg);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        std::fs::read_to_string(pkg.join("app.yaml")).unwrap(),
        "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: shop # kpt-set: ${app}\nspec:\n  \
         envs: # kpt-set: ${envs}\n  - dev\n  - prod\n  image: \"shop\" # kpt-set: ${app}\n"
    );
    let results = std::fs::read_to_string(dir.path().join("results/results.yaml")).unwrap();
    assert!(
        results.contains("message: set field value to \"[dev, prod]\""),
        "{results}"
    );
    // An anchored field: left to the Go function, and nothing else serves it.
    std::fs::write(
        pkg.join("app.yaml"),
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c\ndata:\n  a: &x old # kpt-set: ${app}\n  b: *x\n",
    )
    .unwrap();
    let out = render(&pkg);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("the builtin apply-setters leaves this call"),
        "{stderr}"
    );
}

/// An `image:` step for apply-replacements runs in process too: no binary
/// on PATH, no `--allow-exec`; a field whose type the value does not read
/// as (kyaml would write `!!int web`) is left to the Go function, and with
/// none at hand the step fails naming why.
#[test]
fn apply_replacements_runs_in_process() {
    let dir = tempfile::tempdir().unwrap();
    let pkg = dir.path().join("pkg");
    std::fs::create_dir_all(&pkg).unwrap();
    std::fs::write(
        pkg.join("Kptfile"),
        "apiVersion: kpt.dev/v1\nkind: Kptfile\nmetadata:\n  name: pkg\npipeline:\n  mutators:\n  \
         - image: gcr.io/kpt-fn/apply-replacements:v0.1.5\n    configPath: replacements.yaml\n",
    )
    .unwrap();
    std::fs::write(
        pkg.join("replacements.yaml"),
        "apiVersion: fn.kpt.dev/v1alpha1\nkind: ApplyReplacements\nmetadata:\n  name: r\n  annotations:\n    \
         config.kubernetes.io/local-config: \"true\"\nreplacements:\n- source:\n    kind: ConfigMap\n    \
         fieldPath: data.image\n  targets:\n  - select:\n      kind: Deployment\n    fieldPaths:\n    \
         - spec.template.spec.containers.[name=app].image\n",
    )
    .unwrap();
    let config = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\ndata:\n  image: nginx:1.25\n";
    std::fs::write(pkg.join("settings.yaml"), config).unwrap();
    let app = "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: app\nspec:\n  template:\n    spec:\n      \
               containers:\n      - name: app\n        image: \"nginx\" # the image\n";
    std::fs::write(pkg.join("app.yaml"), app).unwrap();
    let render = |pkg: &std::path::Path| render_without_path(pkg, &dir.path().join("results"));
    let out = render(&pkg);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        std::fs::read_to_string(pkg.join("app.yaml")).unwrap(),
        app.replace("\"nginx\"", "\"nginx:1.25\"")
    );
    // An integer target for a string value: left to the Go function, and
    // nothing else serves it.
    std::fs::write(
        pkg.join("app.yaml"),
        "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: app\nspec:\n  template:\n    spec:\n      \
         containers:\n      - name: app\n        image: 3\n",
    )
    .unwrap();
    let out = render(&pkg);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("the builtin apply-replacements leaves this call"),
        "{stderr}"
    );
}
