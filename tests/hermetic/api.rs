//! The crate-root API, one test per thing a library user does, each using
//! only items imported from `krm_fn_runner::` (no module paths): render a
//! package, evaluate a function in process, serve it over gRPC and call it
//! back, and simulate the pod cache. The render and exec paths also run in
//! the render-only build (`--no-default-features --features render`).

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use krm_fn_runner::{
    DEFAULT_MAX_MESSAGE_BYTES, EvaluationRequest, EvaluatorChain, ExecConfig, ExecEvaluator,
    ExecSettings, FunctionEvaluator, PackageRender, RenderEvents, RenderOptions, RuntimeChain,
    StepRecord, render_dir,
};

fn hello_package() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/packages/hello")
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).unwrap();
        }
    }
}

const RESOURCE_LIST: &str = "apiVersion: config.kubernetes.io/v1
kind: ResourceList
items:
- apiVersion: v1
  kind: ConfigMap
  metadata:
    name: settings
";

/// A functions directory whose `config.yaml` maps `example.com/label:v1` to
/// a real shell script that adds a label with `sed` (a KRM function: a
/// ResourceList on stdin, the changed one on stdout).
fn functions_dir(dir: &Path) -> ExecEvaluator {
    let script = dir.join("label.sh");
    std::fs::write(
        &script,
        "#!/bin/sh\nsed 's/^    name: settings$/    name: settings\\n    labels: {app: demo}/'\n",
    )
    .unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    let config = "functions:\n- function: label.sh\n  images: [example.com/label:v1]\n";
    let config = ExecConfig::parse(config.as_bytes(), "config.yaml").unwrap();
    let (table, warnings) = config.table(dir, "");
    assert!(warnings.is_empty(), "{warnings:?}");
    ExecEvaluator::new(table, ExecSettings::new(DEFAULT_MAX_MESSAGE_BYTES, &[]))
}

#[tokio::test]
async fn renders_a_package_in_place_from_the_crate_root() {
    let work = tempfile::tempdir().unwrap();
    copy_dir(&hello_package(), work.path());
    let options = RenderOptions::builder().allow_exec(true).build();
    let rendered = render_dir(work.path(), &RuntimeChain::local(), options)
        .await
        .unwrap();
    rendered.write_in_place().unwrap();
    let rendered = rendered.into_result().unwrap();
    assert!(rendered.is_ok());
    let written = std::fs::read_to_string(work.path().join("deployment.yaml")).unwrap();
    assert!(written.contains("namespace: hello-prod"), "{written}");
    assert!(written.contains("replicas: 2 # scale here"), "{written}");
}

/// Moving the rendered objects into the files writes the same bytes as
/// writing copies of them, and leaves the outcome's records.
#[tokio::test]
async fn a_write_that_moves_the_objects_writes_what_a_copying_write_does() {
    let mut written = Vec::new();
    for moving in [false, true] {
        let work = tempfile::tempdir().unwrap();
        copy_dir(&hello_package(), work.path());
        let options = RenderOptions::builder().allow_exec(true).build();
        let mut rendered = render_dir(work.path(), &RuntimeChain::local(), options)
            .await
            .unwrap();
        let steps = rendered.outcome.steps.len();
        if moving {
            rendered.write_in_place_moving_objects().unwrap();
            assert!(rendered.resources().is_none());
        } else {
            rendered.write_in_place().unwrap();
            assert!(rendered.resources().is_some());
        }
        assert!(steps > 0 && rendered.outcome.steps.len() == steps);
        let mut files = Vec::new();
        for name in ["Kptfile", "deployment.yaml"] {
            files.push(std::fs::read_to_string(work.path().join(name)).unwrap());
        }
        written.push(files);
    }
    assert!(written[0][0].contains("renderStatus"), "{}", written[0][0]);
    assert!(
        written[0][1].contains("namespace: hello-prod"),
        "{}",
        written[0][1]
    );
    assert_eq!(written[0], written[1]);
}

#[tokio::test]
async fn a_failed_render_is_an_error_that_names_the_step() {
    let work = tempfile::tempdir().unwrap();
    copy_dir(&hello_package(), work.path());
    std::fs::write(
        work.path().join("Kptfile"),
        "apiVersion: kpt.dev/v1\nkind: Kptfile\nmetadata:\n  name: hello\npipeline:\n  mutators:\n  - exec: \"false\"\n",
    )
    .unwrap();
    // exec: functions need allow_exec; the default options refuse them.
    let rendered = render_dir(
        work.path(),
        &RuntimeChain::local(),
        RenderOptions::default(),
    )
    .await
    .unwrap();
    let error = rendered.into_result().unwrap_err();
    assert!(error.to_string().contains("allow-exec"), "{error}");
}

struct Count(std::sync::atomic::AtomicUsize);

impl RenderEvents for Count {
    fn step_finished(&self, _step: &StepRecord) {
        self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }
}

#[tokio::test]
async fn a_package_render_reports_each_step() {
    let runtime = RuntimeChain::local();
    let events = Count(Default::default());
    let rendered = PackageRender::new(&runtime)
        .options(
            RenderOptions::builder()
                .image_prefix("ghcr.io/kptdev/krm-functions-catalog/")
                .build(),
        )
        .events(&events)
        .render(&hello_package())
        .await
        .unwrap();
    assert!(rendered.is_ok(), "{}", rendered.render_status().error);
    assert_eq!(
        events.0.load(std::sync::atomic::Ordering::SeqCst),
        rendered.outcome.steps.len()
    );
    assert!(!rendered.outcome.steps.is_empty());
}

#[tokio::test]
async fn evaluates_a_function_through_an_evaluator_chain() {
    let dir = tempfile::tempdir().unwrap();
    let exec: Arc<dyn FunctionEvaluator> = Arc::new(functions_dir(dir.path()));
    let chain = EvaluatorChain::new().with("exec", exec);
    let out = chain
        .evaluate(EvaluationRequest::new(
            "example.com/label:v1",
            RESOURCE_LIST,
        ))
        .await
        .unwrap();
    let text = String::from_utf8_lossy(&out.resource_list);
    assert!(text.contains("app: demo"), "{text}");
    let missing = chain
        .evaluate(EvaluationRequest::new(
            "example.com/other:v1",
            RESOURCE_LIST,
        ))
        .await
        .unwrap_err();
    assert!(missing.is_not_found(), "{missing:?}");
}

#[cfg(feature = "full")]
#[tokio::test]
async fn serves_an_evaluator_over_grpc_and_calls_it_back() {
    use krm_fn_runner::{Listen, RemoteEvaluator, ServeOptions, Server};

    let dir = tempfile::tempdir().unwrap();
    let exec: Arc<dyn FunctionEvaluator> = Arc::new(functions_dir(dir.path()));
    let server = Server::bind(&Listen::Tcp("127.0.0.1:0".parse().unwrap()))
        .await
        .unwrap();
    let address = server.local_addr().to_string();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let serving = tokio::spawn(server.run(exec, ServeOptions::default(), async {
        let _ = stopped.await;
    }));
    let client = RemoteEvaluator::new(&address, DEFAULT_MAX_MESSAGE_BYTES).unwrap();
    let out = client
        .evaluate(EvaluationRequest::new(
            "example.com/label:v1",
            RESOURCE_LIST,
        ))
        .await
        .unwrap();
    assert!(String::from_utf8_lossy(&out.resource_list).contains("app: demo"));
    stop.send(()).unwrap();
    serving.await.unwrap().unwrap();
}

#[cfg(feature = "full")]
#[test]
fn simulates_a_pod_cache_policy() {
    use krm_fn_runner::{ReplayOptions, SimPolicy, parse_trace, replay};

    let trace =
        parse_trace("at_seconds,image,run_seconds\n0,fn-a:v1,1\n0.5,fn-a:v1,1\n60,fn-b:v1,2\n")
            .unwrap();
    let policy = SimPolicy::parse(
        b"podTTL: 30m\nmaxParallelPodsPerFunction: 1\n",
        "one-pod.yaml",
    )
    .unwrap();
    let report = replay(&trace, &policy, &ReplayOptions::default()).unwrap();
    assert_eq!(report.requests, 3);
    assert_eq!(report.pods_created, 2, "{report:?}");
    assert!(report.violations.is_empty(), "{:?}", report.violations);
}
