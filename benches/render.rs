//! Render benchmark, in one run:
//!
//! 1. `krm-fn-runner render --allow-exec` versus `kpt fn render --allow-exec`
//!    on a generated package of 1,000 resources (Deployments, ConfigMaps and
//!    Services across 10 files) whose pipeline has three mutators
//!    (`set-namespace`, `apply-setters`, `apply-replacements`) and one
//!    validator (a `starlark` check), all the installed catalog binaries run
//!    through `exec:`;
//! 2. `set-namespace` as a builtin (image `set-namespace:v0.4.5`, run
//!    in-process) versus the same step through the exec binary: the whole
//!    `render` command on the same package with only that step, and the step
//!    alone (one runtime call on the package's 1,000 resources).
//!
//! Each render starts from a fresh copy of the package; medians of several
//! runs are printed with the ratios.
//!
//! Needs the kpt CLI (`KRM_FN_KPT_BIN`, from `scripts/build-kpt.sh`) and the
//! catalog functions (`scripts/install-catalog-functions.sh`); builds on
//! `cargo bench`'s release binary of `krm-fn-runner`.
//! Run: `KRM_FN_KPT_BIN="$(scripts/build-kpt.sh)" cargo bench --bench render`.
//!
//! To profile a render by hand, `KRM_FN_BENCH_PACKAGE=DIR cargo bench --bench
//! render` only writes the full-pipeline package into `DIR` (which must not
//! exist) and exits.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

#[path = "../tests/common/mod.rs"]
mod common;

use krm_fn_runner::adapters::runtime::{BuiltinRuntime, ExecCommandRuntime};
use krm_fn_runner::domain::resource_list::ResourceList;
use krm_fn_runner::ports::{FunctionCall, FunctionRuntime, FunctionTarget};
use serde_json::json;

/// Resources in the generated package.
const RESOURCES: usize = 1_000;
/// Files they are spread over.
const FILES: usize = 10;
/// Timed renders per contender (after one warm-up).
const RUNS: usize = 5;
/// Timed runtime calls per contender for the step-only comparison.
const STEP_RUNS: usize = 15;

fn kpt_bin() -> PathBuf {
    let path = std::env::var_os("KRM_FN_KPT_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            panic!("KRM_FN_KPT_BIN is not set: export KRM_FN_KPT_BIN=\"$(scripts/build-kpt.sh)\"")
        });
    assert!(path.is_file(), "{} does not exist", path.display());
    path
}

fn catalog_bin() -> PathBuf {
    common::catalog_dir().join("bin")
}

/// The package's resource files: `FILES` files, `RESOURCES` objects cycling
/// Deployment, ConfigMap, Service, with `kpt-set` comments for apply-setters.
fn resource_files() -> Vec<(String, String)> {
    let per_file = RESOURCES / FILES;
    (0..FILES)
        .map(|f| {
            let mut text = String::new();
            for i in 0..per_file {
                let n = f * per_file + i;
                if i > 0 {
                    text.push_str("---\n");
                }
                text.push_str(&match n % 3 {
                    0 => format!(
                        "# Deployment {n}\n\
                         apiVersion: apps/v1\n\
                         kind: Deployment\n\
                         metadata:\n  name: app-{n}\n  labels:\n    app: app-{n}\n\
                         spec:\n  replicas: 1 # kpt-set: ${{replicas}}\n\
                         \x20 selector:\n    matchLabels:\n      app: app-{n}\n\
                         \x20 template:\n    metadata:\n      labels:\n        app: app-{n}\n\
                         \x20   spec:\n      containers:\n      - name: app\n\
                         \x20       image: nginx:1.25 # kpt-set: nginx:${{tag}}\n\
                         \x20       ports:\n        - containerPort: 8080\n"
                    ),
                    1 => format!(
                        "apiVersion: v1\n\
                         kind: ConfigMap\n\
                         metadata:\n  name: config-{n} # config of app {n}\n\
                         data:\n  LOG_LEVEL: info\n  FEATURE: \"on\"\n"
                    ),
                    _ => format!(
                        "apiVersion: v1\n\
                         kind: Service\n\
                         metadata:\n  name: svc-{n}\n\
                         spec:\n  selector:\n    app: app-{n}\n  ports:\n  - port: 80\n    targetPort: 8080\n"
                    ),
                });
            }
            (format!("resources-{f:02}.yaml"), text)
        })
        .collect()
}

/// Writes the package into `dir` with `pipeline` (the Kptfile's `pipeline:`
/// body, indented by two spaces).
fn write_package(dir: &Path, pipeline: &str) {
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(
        dir.join("Kptfile"),
        format!(
            "apiVersion: kpt.dev/v1\nkind: Kptfile\nmetadata:\n  name: bench\n  annotations:\n    \
             config.kubernetes.io/local-config: \"true\"\npipeline:\n{pipeline}"
        ),
    )
    .unwrap();
    std::fs::write(
        dir.join("owner.yaml"),
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: owner\n  annotations:\n    \
         config.kubernetes.io/local-config: \"true\"\ndata:\n  team: payments\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("replacements.yaml"),
        "apiVersion: fn.kpt.dev/v1alpha1\nkind: ApplyReplacements\nmetadata:\n  name: owner-label\n  \
         annotations:\n    config.kubernetes.io/local-config: \"true\"\nreplacements:\n\
         - source:\n    kind: ConfigMap\n    name: owner\n    fieldPath: data.team\n  targets:\n\
         \x20 - select:\n      kind: Deployment\n    fieldPaths:\n\
         \x20   - spec.template.metadata.labels.team\n    options:\n      create: true\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("validate.yaml"),
        "apiVersion: fn.kpt.dev/v1alpha1\nkind: StarlarkRun\nmetadata:\n  name: validate\n  \
         annotations:\n    config.kubernetes.io/local-config: \"true\"\nsource: |\n  \
         for r in ctx.resource_list[\"items\"]:\n    \
         if r[\"kind\"] == \"Deployment\" and r[\"metadata\"].get(\"namespace\") != \"bench\":\n      \
         fail(\"%s is not in namespace bench\" % r[\"metadata\"][\"name\"])\n",
    )
    .unwrap();
    for (name, text) in resource_files() {
        std::fs::write(dir.join(name), text).unwrap();
    }
}

/// Three exec mutators and one exec validator.
fn full_pipeline() -> String {
    let bin = catalog_bin();
    let b = |f: &str| bin.join(f).display().to_string();
    format!(
        "  mutators:\n\
         \x20   - exec: {}\n      configMap:\n        namespace: bench\n\
         \x20   - exec: {}\n      configMap:\n        replicas: \"3\"\n        tag: \"1.27\"\n\
         \x20   - exec: {}\n      configPath: replacements.yaml\n\
         \x20 validators:\n\
         \x20   - exec: {}\n      configPath: validate.yaml\n",
        b("set-namespace"),
        b("apply-setters"),
        b("apply-replacements"),
        b("starlark"),
    )
}

/// One `set-namespace` step, as `image:` (builtin) or `exec:` (binary).
fn set_namespace_pipeline(builtin: bool) -> String {
    let function = if builtin {
        "image: set-namespace:v0.4.5".to_string()
    } else {
        format!("exec: {}", catalog_bin().join("set-namespace").display())
    };
    format!("  mutators:\n    - {function}\n      configMap:\n        namespace: bench\n")
}

/// Renders a fresh copy of `template` with `command` + args; returns the time.
fn time_render(
    template: &Path,
    program: &Path,
    args: &[&str],
    work: &Path,
    run: usize,
) -> Duration {
    let pkg = work.join(format!("run-{run}"));
    copy_dir(template, &pkg);
    let start = Instant::now();
    let out = Command::new(program)
        .args(args)
        .arg(&pkg)
        .arg("--allow-exec")
        .current_dir(work)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    let elapsed = start.elapsed();
    assert!(
        out.status.success(),
        "{} {args:?} failed:\n{}",
        program.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    if run == 0 && template.ends_with("full") {
        check_full_render(&pkg);
    }
    std::fs::remove_dir_all(&pkg).unwrap();
    elapsed
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap().flatten() {
        let target = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &target);
        } else {
            std::fs::copy(e.path(), &target).unwrap();
        }
    }
}

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

/// Checks that a render of the full pipeline did its work: the first
/// Deployment is in namespace `bench`, has the setter values and the label
/// apply-replacements copies from the `owner` ConfigMap.
fn check_full_render(pkg: &Path) {
    let text = std::fs::read(pkg.join("resources-00.yaml")).unwrap();
    let docs: Vec<serde_json::Value> =
        krm_fn_runner::domain::codec::from_yaml_documents(&text).unwrap();
    let d = &docs[0];
    assert_eq!(d["metadata"]["namespace"], "bench", "{d}");
    assert_eq!(d["spec"]["replicas"], 3, "{d}");
    assert_eq!(
        d["spec"]["template"]["spec"]["containers"][0]["image"], "nginx:1.27",
        "{d}"
    );
    assert_eq!(
        d["spec"]["template"]["metadata"]["labels"]["team"], "payments",
        "{d}"
    );
    assert_eq!(docs.len(), RESOURCES / FILES);
}

/// One contender: a package template rendered by a program with arguments.
struct Contender<'a> {
    template: &'a Path,
    program: &'a Path,
    args: &'a [&'a str],
}

/// Median times of `RUNS` renders (after one warm-up each) of fresh copies,
/// one per contender; the contenders take turns, so load that comes and
/// goes on the machine affects them alike.
fn median_renders(contenders: &[Contender], work: &Path) -> Vec<Duration> {
    for c in contenders {
        time_render(c.template, c.program, c.args, work, 0);
    }
    let mut samples = vec![Vec::new(); contenders.len()];
    for run in 1..=RUNS {
        for (c, s) in contenders.iter().zip(&mut samples) {
            s.push(time_render(c.template, c.program, c.args, work, run));
        }
    }
    samples.into_iter().map(median).collect()
}

/// The package's resources as one ResourceList, with a set-namespace config.
fn step_input() -> ResourceList {
    let mut items = Vec::new();
    for (name, text) in resource_files() {
        let docs: Vec<serde_json::Value> =
            krm_fn_runner::domain::codec::from_yaml_documents(text.as_bytes()).unwrap();
        for (index, mut doc) in docs.into_iter().enumerate() {
            let annotations = doc["metadata"]
                .as_object_mut()
                .unwrap()
                .entry("annotations")
                .or_insert_with(|| json!({}));
            annotations["internal.config.kubernetes.io/path"] = json!(name);
            annotations["internal.config.kubernetes.io/index"] = json!(index.to_string());
            items.push(doc);
        }
    }
    assert_eq!(items.len(), RESOURCES);
    let mut rl = ResourceList::new(items);
    rl.function_config = Some(json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "function-input"},
        "data": {"namespace": "bench"},
    }));
    rl
}

/// Median time of one runtime call on the 1,000 resources.
fn median_step(
    rt: &tokio::runtime::Runtime,
    runtime: &dyn FunctionRuntime,
    target: FunctionTarget,
) -> Duration {
    let input = step_input();
    let once = || {
        let call = FunctionCall::new(target.clone(), input.clone(), None);
        let start = Instant::now();
        let out = rt.block_on(runtime.run(call)).expect("set-namespace step");
        let elapsed = start.elapsed();
        assert_eq!(out.resource_list.items.len(), RESOURCES);
        assert!(
            out.resource_list
                .items
                .iter()
                .all(|o| o["metadata"]["namespace"] == "bench")
        );
        elapsed
    };
    once();
    median((0..STEP_RUNS).map(|_| once()).collect())
}

fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1e3)
}

fn main() {
    // `cargo bench` passes `--bench`; nothing to parse.
    if let Some(dir) = std::env::var_os("KRM_FN_BENCH_PACKAGE") {
        let dir = PathBuf::from(dir);
        assert!(!dir.exists(), "{} already exists", dir.display());
        write_package(&dir, &full_pipeline());
        println!("wrote the full-pipeline package to {}", dir.display());
        return;
    }
    let ours = PathBuf::from(env!("CARGO_BIN_EXE_krm-fn-runner"));
    let kpt = kpt_bin();
    let work = tempfile::tempdir().unwrap();
    let full = work.path().join("full");
    write_package(&full, &full_pipeline());
    let builtin_pkg = work.path().join("builtin");
    write_package(&builtin_pkg, &set_namespace_pipeline(true));
    let exec_pkg = work.path().join("exec");
    write_package(&exec_pkg, &set_namespace_pipeline(false));

    println!(
        "render: {RESOURCES} resources in {FILES} files; medians of {RUNS} runs on fresh copies"
    );
    let full_times = median_renders(
        &[
            Contender {
                template: &full,
                program: &kpt,
                args: &["fn", "render"],
            },
            Contender {
                template: &full,
                program: &ours,
                args: &["render"],
            },
        ],
        work.path(),
    );
    let (kpt_full, ours_full) = (full_times[0], full_times[1]);
    println!(
        "3 mutators + 1 validator (exec): kpt fn render {}, krm-fn-runner render {}: ours is {:.2}x faster (target >= 2x)",
        ms(kpt_full),
        ms(ours_full),
        kpt_full.as_secs_f64() / ours_full.as_secs_f64()
    );

    let sn_times = median_renders(
        &[
            Contender {
                template: &builtin_pkg,
                program: &ours,
                args: &["render"],
            },
            Contender {
                template: &exec_pkg,
                program: &ours,
                args: &["render"],
            },
            Contender {
                template: &exec_pkg,
                program: &kpt,
                args: &["fn", "render"],
            },
        ],
        work.path(),
    );
    let (ours_builtin, ours_exec, kpt_exec) = (sn_times[0], sn_times[1], sn_times[2]);
    println!(
        "set-namespace render: builtin {}, exec binary {} (kpt with the binary {}): builtin is {:.2}x faster",
        ms(ours_builtin),
        ms(ours_exec),
        ms(kpt_exec),
        ours_exec.as_secs_f64() / ours_builtin.as_secs_f64()
    );

    let rt = tokio::runtime::Runtime::new().unwrap();
    let builtin = BuiltinRuntime::new("ghcr.io/kptdev/krm-functions-catalog");
    let exec = ExecCommandRuntime::inheriting(64 << 20);
    let step_builtin = median_step(
        &rt,
        &builtin,
        FunctionTarget::Image("ghcr.io/kptdev/krm-functions-catalog/set-namespace:v0.4.5".into()),
    );
    let step_exec = median_step(
        &rt,
        &exec,
        FunctionTarget::Exec(catalog_bin().join("set-namespace").display().to_string()),
    );
    println!(
        "set-namespace step on {RESOURCES} resources (medians of {STEP_RUNS}): builtin {}, exec binary {}: builtin is {:.1}x faster (target >= 20x)",
        ms(step_builtin),
        ms(step_exec),
        step_exec.as_secs_f64() / step_builtin.as_secs_f64()
    );
}
