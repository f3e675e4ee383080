//! The builtins apply-setters and apply-replacements against the
//! catalog's Go binaries, per call through `krm-fn-runner serve`, side by
//! side in one run: one server with `--builtin-functions` (and no exec
//! function configured, so the builtin tier answers every call) and one with
//! the exec runtime on the catalog's `config.yaml` (the Go binary,
//! sandboxed, per call). Both get the same ResourceList — for apply-setters
//! 100 or 1,000 ConfigMaps, each with three `# kpt-set:` fields, and a
//! setter config; for apply-replacements 100 or 1,000 Deployments and a
//! ConfigMap whose image and team every Deployment gets — from 1 and 16
//! concurrent callers for a fixed time each; prints calls/s per cell and the
//! builtin/exec ratio (target >= 10x).
//!
//! Needs the catalog functions (`scripts/install-catalog-functions.sh`).
//! Run: `cargo bench --bench builtins`. `KRM_FN_BENCH_SECONDS` sets the
//! time per cell (default 5).

use std::time::{Duration, Instant};

use krm_fn_runner::adapters::grpc::pb::EvaluateFunctionRequest;
use krm_fn_runner::domain::resource_list::ResourceList;
use krm_fn_testbed::common::{self, Runner};

/// A ResourceList of `n` ConfigMaps with setter comments, and the setters.
fn input(n: usize) -> Vec<u8> {
    let mut s = String::from("apiVersion: config.kubernetes.io/v1\nkind: ResourceList\nitems:\n");
    for i in 0..n {
        s.push_str(&format!(
            "- apiVersion: v1\n  kind: ConfigMap\n  metadata:\n    name: cm-{i} # kpt-set: ${{app}}-{i}\n    \
             annotations:\n      config.kubernetes.io/path: 'cm/{i}.yaml'\n  data:\n    \
             image: \"nginx:1.14\" # kpt-set: nginx:${{tag}}\n    replicas: 1 # kpt-set: ${{replicas}}\n    \
             envs: # kpt-set: ${{envs}}\n    - dev\n    note: untouched # a comment\n"
        ));
    }
    s.push_str(
        "functionConfig:\n  apiVersion: v1\n  kind: ConfigMap\n  metadata:\n    name: setters\n  data:\n    \
         app: shop\n    tag: \"1.27\"\n    replicas: \"3\"\n    envs: '[dev, staging, prod]'\n",
    );
    s.into_bytes()
}

/// A ResourceList of `n` Deployments and the ConfigMap they take their
/// image and team label from, and the replacements.
fn replacements_input(n: usize) -> Vec<u8> {
    let mut s = String::from(
        "apiVersion: config.kubernetes.io/v1\nkind: ResourceList\nitems:\n- apiVersion: v1\n  kind: ConfigMap\n  \
         metadata:\n    name: settings\n  data:\n    image: nginx:1.27\n    team: payments\n",
    );
    for i in 0..n {
        s.push_str(&format!(
            "- apiVersion: apps/v1\n  kind: Deployment\n  metadata:\n    name: app-{i} # app {i}\n    \
             labels:\n      app: app-{i}\n  spec:\n    template:\n      spec:\n        containers:\n        \
             - name: app\n          image: \"nginx:1.14\" # replaced\n        - name: side\n          image: busybox\n"
        ));
    }
    s.push_str(
        "functionConfig:\n  apiVersion: fn.kpt.dev/v1alpha1\n  kind: ApplyReplacements\n  metadata:\n    name: r\n  \
         replacements:\n  - source:\n      kind: ConfigMap\n      fieldPath: data.image\n    targets:\n    \
         - select:\n        kind: Deployment\n      fieldPaths:\n      - spec.template.spec.containers.[name=app].image\n  \
         - source:\n      kind: ConfigMap\n      fieldPath: data.team\n    targets:\n    - select:\n        \
         kind: Deployment\n      fieldPaths:\n      - metadata.labels.team\n      options:\n        create: true\n",
    );
    s.into_bytes()
}

/// Calls of `function` per second from `callers` concurrent callers over
/// `seconds`; the first answer is checked.
async fn calls_per_second(
    runner: &Runner,
    function: &str,
    body: &[u8],
    callers: usize,
    seconds: f64,
) -> f64 {
    let image = common::catalog_image(function);
    let function = function.to_string();
    let end = Instant::now() + Duration::from_secs_f64(seconds);
    let mut tasks = Vec::new();
    for _ in 0..callers {
        let mut client = runner.client().await;
        let body = body.to_vec();
        let image = image.clone();
        let function = function.clone();
        tasks.push(tokio::spawn(async move {
            let mut calls = 0u64;
            while Instant::now() < end {
                let out = client
                    .evaluate_function(EvaluateFunctionRequest {
                        image: image.clone(),
                        resource_list: body.clone().into(),
                        tag: String::new(),
                    })
                    .await
                    .expect("the call")
                    .into_inner();
                if calls == 0 {
                    let rl = ResourceList::parse(&out.resource_list).unwrap();
                    if function == "apply-setters" {
                        assert_eq!(rl.items[0]["data"]["image"], "nginx:1.27");
                    } else {
                        let d = &rl.items[0];
                        assert_eq!(d["kind"], "Deployment", "{d}");
                        assert_eq!(
                            d["spec"]["template"]["spec"]["containers"][0]["image"],
                            "nginx:1.27"
                        );
                        assert_eq!(d["metadata"]["labels"]["team"], "payments");
                    }
                }
                calls += 1;
            }
            calls
        }));
    }
    let start = Instant::now();
    let mut total = 0;
    for t in tasks {
        total += t.await.unwrap();
    }
    total as f64 / start.elapsed().as_secs_f64()
}

fn main() {
    let seconds: f64 = std::env::var("KRM_FN_BENCH_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(5.0);
    let dir = tempfile::tempdir().unwrap();
    let empty = dir.path().join("config.yaml");
    std::fs::write(&empty, "functions: []\n").unwrap();
    let empty = empty.display().to_string();
    let catalog = common::catalog_dir();
    let config = catalog.join("config.yaml").display().to_string();
    let functions = catalog.join("bin").display().to_string();
    let builtin = Runner::start(&[
        "--config",
        &empty,
        "--disable-runtimes=pod",
        "--builtin-functions",
        "--log-level=0",
    ]);
    let exec = Runner::start(&[
        "--config",
        &config,
        "--functions",
        &functions,
        "--disable-runtimes=pod",
        "--log-level=0",
        "--max-concurrent-functions=16",
    ]);
    let rt = tokio::runtime::Runtime::new().unwrap();
    println!("per call through serve, {seconds} s per cell (calls/s)");
    println!("| function | resources | callers | builtin | exec (Go binary) | builtin/exec |");
    println!("|---|---|---|---|---|---|");
    for function in ["apply-setters", "apply-replacements"] {
        for n in [100, 1_000] {
            let body = if function == "apply-setters" {
                input(n)
            } else {
                replacements_input(n)
            };
            for callers in [1, 16] {
                let b = rt.block_on(calls_per_second(
                    &builtin, function, &body, callers, seconds,
                ));
                let e = rt.block_on(calls_per_second(&exec, function, &body, callers, seconds));
                println!(
                    "| {function} | {n} | {callers} | {b:.1} | {e:.1} | {:.1}x (target >= 10x) |",
                    b / e
                );
            }
        }
    }
}
