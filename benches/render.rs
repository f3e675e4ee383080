//! Render benchmark, in one run:
//!
//! 1. `krm-fn-runner render --allow-exec` versus `kpt fn render --allow-exec`
//!    on generated packages of 1,000 and 5,000 resources (Deployments,
//!    ConfigMaps and Services, 100 to a file) whose pipeline has three
//!    mutators (`set-namespace`, `apply-setters`, `apply-replacements`) and
//!    one validator (a `starlark` check), all the installed catalog binaries
//!    run through `exec:`: wall time, and the CPU of the whole render split
//!    into the renderer's own and its descendants' (the function processes
//!    and their supervisors), see [`Measured`];
//! 2. the three mutators alone on 1,000 resources: as builtins (`image:`
//!    steps run in process) in our render, as the exec binaries in ours and
//!    in kpt's (target: builtins >= 10x kpt);
//! 3. `set-namespace` as a builtin (image `set-namespace:v0.4.5`, run
//!    in-process) versus the same step through the exec binary: the whole
//!    `render` command on the same package with only that step, and the step
//!    alone (one runtime call on the package's 1,000 resources).
//!
//! Each render starts from a fresh copy of the package; medians of several
//! runs are printed with the ratios. `KRM_FN_BENCH_RESOURCES` (a
//! comma-separated list, default `1000,5000`) sets the package sizes of the
//! full-pipeline comparison. `KRM_FN_BENCH_BASELINE=PATH[:PATH...]` (other
//! `krm-fn-runner` binaries, e.g. copies of earlier builds each with its
//! `krm-fn-supervisor` beside it) adds them to that comparison, taking turns
//! with the others, for before/after figures from one run;
//! `KRM_FN_BENCH_AB_ONLY=1` leaves kpt and the set-namespace comparisons
//! out (krm-fn-runner builds against each other only);
//! `KRM_FN_BENCH_RUNS` sets the timed renders per contender and size
//! (default 5 up to 1,000 resources, 3 above). Each round starts with the
//! next contender in turn.
//!
//! Needs the kpt CLI (`KRM_FN_KPT_BIN`, from `scripts/build-kpt.sh`) and the
//! catalog functions (`scripts/install-catalog-functions.sh`); builds on
//! `cargo bench`'s release binary of `krm-fn-runner`.
//! Run: `KRM_FN_KPT_BIN="$(scripts/build-kpt.sh)" cargo bench --bench render`.
//!
//! To profile a render by hand, `KRM_FN_BENCH_PACKAGE=DIR cargo bench --bench
//! render` only writes the full-pipeline package into `DIR` (which must not
//! exist) and exits; render it under `perf record` with the binary of the
//! `profiling` profile (`cargo build --profile profiling`: release code with
//! line tables and symbols, in `target/profiling/`). `cargo bench --profile
//! profiling --bench render` runs the whole bench on those binaries.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use krm_fn_testbed::common;

use krm_fn_runner::adapters::runtime::{BuiltinRuntime, ExecCommandRuntime};
use krm_fn_runner::domain::resource_list::ResourceList;
use krm_fn_runner::ports::{FunctionCall, FunctionRuntime, FunctionTarget};
use serde_json::json;

/// Resources in the package of the set-namespace comparisons.
const RESOURCES: usize = 1_000;
/// Resources per file of the generated packages.
const PER_FILE: usize = 100;
/// Timed renders per contender (after one warm-up) up to
/// [`RESOURCES`] resources.
const RUNS: usize = 5;
/// Timed renders per contender (after one warm-up) of larger packages.
const LARGE_RUNS: usize = 3;
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

/// The package's resource files: `resources / PER_FILE` files of
/// [`PER_FILE`] objects cycling Deployment, ConfigMap, Service, with
/// `kpt-set` comments for apply-setters.
fn resource_files(resources: usize) -> Vec<(String, String)> {
    (0..resources / PER_FILE)
        .map(|f| {
            let mut text = String::new();
            for i in 0..PER_FILE {
                let n = f * PER_FILE + i;
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

/// Writes the package of `resources` resources into `dir` with `pipeline`
/// (the Kptfile's `pipeline:` body, indented by two spaces).
fn write_package(dir: &Path, resources: usize, pipeline: &str) {
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
    for (name, text) in resource_files(resources) {
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

/// The three mutators of [`full_pipeline`] without the validator, as
/// `image:` steps (the builtins `set-namespace`, `apply-setters`,
/// `apply-replacements`) or as `exec:` steps (the catalog binaries).
fn mutators_pipeline(builtin: bool) -> String {
    let f = |name: &str, tag: &str| {
        if builtin {
            format!("image: {name}:{tag}")
        } else {
            format!("exec: {}", catalog_bin().join(name).display())
        }
    };
    format!(
        "  mutators:\n\
         \x20   - {}\n      configMap:\n        namespace: bench\n\
         \x20   - {}\n      configMap:\n        replicas: \"3\"\n        tag: \"1.27\"\n\
         \x20   - {}\n      configPath: replacements.yaml\n",
        f("set-namespace", "v0.4.5"),
        f("apply-setters", "v0.2.2"),
        f("apply-replacements", "v0.1.5"),
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

/// One render: its wall time and CPU.
///
/// `own` is the render process's own CPU (user + system, all its threads),
/// read from its `/proc/PID/stat` (`utime`, `stime`) while it is a zombie:
/// the bench waits for it with `waitid(WEXITED | WNOWAIT)`, which leaves it
/// unreaped. `total` adds everything its descendants used: the bench's
/// `getrusage(RUSAGE_CHILDREN)` grows, once the render is reaped, by the
/// render's own CPU plus every descendant the render reaped (its `cutime` and
/// `cstime`), and the bench, a child subreaper (`PR_SET_CHILD_SUBREAPER`),
/// also reaps what the render left running when it exited: krm-fn-runner's
/// resident function supervisor is not waited for by the render (it ends when
/// the render does), and the function processes are reaped by the per-call
/// supervisors it forks, which it reaps itself; without the subreaper their
/// CPU would go to init and be missing from the total. `orphaned` is that
/// part (CPU reaped by the bench after the render had exited).
#[derive(Clone, Copy)]
struct Measured {
    wall: Duration,
    own: Duration,
    total: Duration,
    orphaned: Duration,
}

impl Measured {
    /// Own CPU as a share of the whole render's.
    fn own_share(&self) -> f64 {
        self.own.as_secs_f64() / self.total.as_secs_f64()
    }
}

/// Makes this process the reaper of its descendants that are orphaned
/// (see [`Measured`]).
fn become_subreaper() {
    // SAFETY: prctl with PR_SET_CHILD_SUBREAPER only sets a flag on this
    // process.
    let r = unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) };
    assert_eq!(
        r,
        0,
        "PR_SET_CHILD_SUBREAPER: {}",
        std::io::Error::last_os_error()
    );
}

/// CPU time (user + system) of the children this process has reaped so far.
fn children_cpu() -> Duration {
    // SAFETY: getrusage writes into the zeroed struct it is given.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    let r = unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut usage) };
    assert_eq!(r, 0, "getrusage: {}", std::io::Error::last_os_error());
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1_000);
    tv(usage.ru_utime) + tv(usage.ru_stime)
}

/// Waits until child `pid` has exited, leaving it a zombie (not reaped).
fn wait_exited_unreaped(pid: u32) {
    loop {
        // SAFETY: waitid fills the zeroed siginfo it is given.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        let r = unsafe {
            libc::waitid(
                libc::P_PID,
                pid as libc::id_t,
                &mut info,
                libc::WEXITED | libc::WNOWAIT,
            )
        };
        if r == 0 {
            return;
        }
        let e = std::io::Error::last_os_error();
        assert_eq!(e.kind(), std::io::ErrorKind::Interrupted, "waitid: {e}");
    }
}

/// The own CPU (`utime` + `stime` of `/proc/PID/stat`) of process `pid`.
fn own_cpu(pid: u32) -> Duration {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    // The fields after the command name, which is in parentheses and may
    // hold spaces; `utime` is the stat file's 14th field, the 12th here.
    let fields: Vec<&str> = stat[stat.rfind(')').unwrap() + 2..]
        .split_whitespace()
        .collect();
    let ticks: u64 = fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
    // SAFETY: sysconf has no preconditions.
    let per_second = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    Duration::from_secs_f64(ticks as f64 / per_second)
}

/// Reaps every remaining child of this process (orphans re-parented to it),
/// waiting for them to exit. The bench has no other children while a render
/// is measured (the in-process runtimes start later).
fn reap_orphans() {
    loop {
        let mut status = 0;
        // SAFETY: waitpid writes the status into `status`.
        let r = unsafe { libc::waitpid(-1, &mut status, 0) };
        if r < 0 {
            let e = std::io::Error::last_os_error();
            match e.raw_os_error() {
                Some(libc::ECHILD) => return,
                Some(libc::EINTR) => continue,
                _ => panic!("waitpid: {e}"),
            }
        }
    }
}

/// Renders a fresh copy of `template` with `program` + args; returns its
/// wall time and CPU.
fn time_render(
    template: &Path,
    program: &Path,
    args: &[&str],
    work: &Path,
    run: usize,
) -> Measured {
    let pkg = work.join(format!("run-{run}"));
    copy_dir(template, &pkg);
    let stderr_path = work.join("stderr.txt");
    let stderr = std::fs::File::create(&stderr_path).unwrap();
    let before = children_cpu();
    let start = Instant::now();
    let mut child = Command::new(program)
        .args(args)
        .arg(&pkg)
        .arg("--allow-exec")
        .current_dir(work)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(stderr)
        .spawn()
        .unwrap();
    wait_exited_unreaped(child.id());
    let wall = start.elapsed();
    let own = own_cpu(child.id());
    let status = child.wait().unwrap();
    let reaped = children_cpu();
    reap_orphans();
    let after = children_cpu();
    assert!(
        status.success(),
        "{} {args:?} failed:\n{}",
        program.display(),
        std::fs::read_to_string(&stderr_path).unwrap_or_default()
    );
    if run == 0
        && template
            .file_name()
            .is_some_and(|n| n.to_string_lossy().starts_with("full"))
    {
        check_full_render(&pkg);
    }
    std::fs::remove_dir_all(&pkg).unwrap();
    Measured {
        wall,
        own,
        total: after - before,
        orphaned: after - reaped,
    }
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
    assert_eq!(docs.len(), PER_FILE);
}

/// One contender: a package template rendered by a program with arguments.
struct Contender<'a> {
    template: &'a Path,
    program: &'a Path,
    args: &'a [&'a str],
}

/// Medians of one contender's renders, each figure's median on its own.
struct Medians {
    wall: Duration,
    own: Duration,
    total: Duration,
    orphaned: Duration,
    own_share: f64,
}

impl Medians {
    fn of(runs: &[Measured]) -> Self {
        let pick = |f: fn(&Measured) -> Duration| median(runs.iter().map(f).collect());
        let mut shares: Vec<f64> = runs.iter().map(Measured::own_share).collect();
        shares.sort_by(f64::total_cmp);
        Self {
            wall: pick(|m| m.wall),
            own: pick(|m| m.own),
            total: pick(|m| m.total),
            orphaned: pick(|m| m.orphaned),
            own_share: shares[shares.len() / 2],
        }
    }

    /// `own X s of Y s CPU (Z%)`.
    fn cpu(&self) -> String {
        format!(
            "own {:.2} s of {:.2} s CPU ({:.1}%)",
            self.own.as_secs_f64(),
            self.total.as_secs_f64(),
            self.own_share * 100.0
        )
    }
}

/// Medians of `runs` renders (after one warm-up each) of fresh copies, one
/// per contender; the contenders take turns, so load that comes and goes on
/// the machine affects them alike.
fn median_renders(contenders: &[Contender], work: &Path, runs: usize) -> Vec<Medians> {
    for c in contenders {
        time_render(c.template, c.program, c.args, work, 0);
    }
    let mut samples = vec![Vec::new(); contenders.len()];
    for run in 1..=runs {
        // Each run starts with the next contender: none always follows the
        // same one (whose exiting processes and freed memory it would meet).
        for k in 0..contenders.len() {
            let i = (run + k) % contenders.len();
            let c = &contenders[i];
            samples[i].push(time_render(c.template, c.program, c.args, work, run));
        }
    }
    samples.iter().map(|s| Medians::of(s)).collect()
}

/// The package's resources as one ResourceList, with a set-namespace config.
fn step_input() -> ResourceList {
    let mut items = Vec::new();
    for (name, text) in resource_files(RESOURCES) {
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

/// The package sizes of the full-pipeline comparison:
/// `KRM_FN_BENCH_RESOURCES` (comma-separated, multiples of [`PER_FILE`]) or
/// 1,000 and 5,000.
fn sizes() -> Vec<usize> {
    let Ok(list) = std::env::var("KRM_FN_BENCH_RESOURCES") else {
        return vec![1_000, 5_000];
    };
    list.split(',')
        .map(|n| {
            let n: usize = n.trim().parse().unwrap_or_else(|_| {
                panic!("KRM_FN_BENCH_RESOURCES={list:?}: {n:?} is not a number")
            });
            assert!(
                n > 0 && n.is_multiple_of(PER_FILE),
                "KRM_FN_BENCH_RESOURCES={list:?}: {n} is not a positive multiple of {PER_FILE}"
            );
            n
        })
        .collect()
}

fn main() {
    // `cargo bench` passes `--bench`; nothing to parse.
    if let Some(dir) = std::env::var_os("KRM_FN_BENCH_PACKAGE") {
        let dir = PathBuf::from(dir);
        assert!(!dir.exists(), "{} already exists", dir.display());
        let resources = sizes()[0];
        write_package(&dir, resources, &full_pipeline());
        println!(
            "wrote the full-pipeline package of {resources} resources to {}",
            dir.display()
        );
        return;
    }
    become_subreaper();
    let ours = PathBuf::from(env!("CARGO_BIN_EXE_krm-fn-runner"));
    let kpt = kpt_bin();
    let baselines: Vec<PathBuf> = std::env::var_os("KRM_FN_BENCH_BASELINE")
        .map(|v| std::env::split_paths(&v).collect())
        .unwrap_or_default();
    let ab_only = std::env::var_os("KRM_FN_BENCH_AB_ONLY").is_some();
    let work = tempfile::tempdir().unwrap();

    let runs_set: Option<usize> = std::env::var("KRM_FN_BENCH_RUNS")
        .ok()
        .and_then(|r| r.parse().ok());

    for resources in sizes() {
        let full = work.path().join(format!("full-{resources}"));
        write_package(&full, resources, &full_pipeline());
        let runs = runs_set.unwrap_or(if resources <= RESOURCES {
            RUNS
        } else {
            LARGE_RUNS
        });
        println!(
            "render: {resources} resources, {PER_FILE} to a file; medians of {runs} runs on fresh copies"
        );
        let mut contenders = vec![Contender {
            template: &full,
            program: &ours,
            args: &["render"],
        }];
        contenders.extend(baselines.iter().map(|b| Contender {
            template: &full,
            program: b,
            args: &["render"],
        }));
        if !ab_only {
            contenders.push(Contender {
                template: &full,
                program: &kpt,
                args: &["fn", "render"],
            });
        }
        let times = median_renders(&contenders, work.path(), runs);
        let ours_full = &times[0];
        if let Some(kpt_full) = times.get(1 + baselines.len()) {
            println!(
                "3 mutators + 1 validator (exec): kpt fn render {}, krm-fn-runner render {}: ours is {:.2}x faster (target >= 2x)",
                ms(kpt_full.wall),
                ms(ours_full.wall),
                kpt_full.wall.as_secs_f64() / ours_full.wall.as_secs_f64()
            );
            println!("kpt CPU: {}", kpt_full.cpu());
        }
        println!(
            "krm-fn-runner CPU (own = the render process; the rest its function processes and their \
             supervisors): {} (target <= 10%; {:.2} s reaped after it exited), wall {}",
            ours_full.cpu(),
            ours_full.orphaned.as_secs_f64(),
            ms(ours_full.wall)
        );
        for (path, base) in baselines.iter().zip(&times[1..]) {
            println!(
                "baseline {}: {}, wall {}",
                path.display(),
                base.cpu(),
                ms(base.wall)
            );
        }
        std::fs::remove_dir_all(&full).unwrap();
    }

    if ab_only {
        return;
    }
    // The three mutators: builtins against the binaries, ours and kpt's.
    // The templates' names start with `full`, so each contender's first
    // render is checked (`check_full_render`).
    let mutators_builtin = work.path().join("full-mutators-builtin");
    write_package(&mutators_builtin, RESOURCES, &mutators_pipeline(true));
    let mutators_exec = work.path().join("full-mutators-exec");
    write_package(&mutators_exec, RESOURCES, &mutators_pipeline(false));
    let m = median_renders(
        &[
            Contender {
                template: &mutators_builtin,
                program: &ours,
                args: &["render"],
            },
            Contender {
                template: &mutators_exec,
                program: &ours,
                args: &["render"],
            },
            Contender {
                template: &mutators_exec,
                program: &kpt,
                args: &["fn", "render"],
            },
        ],
        work.path(),
        RUNS,
    );
    println!(
        "set-namespace + apply-setters + apply-replacements on {RESOURCES} resources: builtins {}, \
         exec binaries {}, kpt with the binaries {}: builtins are {:.1}x faster than kpt (target >= 10x), \
         {:.1}x faster than our exec path",
        ms(m[0].wall),
        ms(m[1].wall),
        ms(m[2].wall),
        m[2].wall.as_secs_f64() / m[0].wall.as_secs_f64(),
        m[1].wall.as_secs_f64() / m[0].wall.as_secs_f64()
    );
    let builtin_pkg = work.path().join("builtin");
    write_package(&builtin_pkg, RESOURCES, &set_namespace_pipeline(true));
    let exec_pkg = work.path().join("exec");
    write_package(&exec_pkg, RESOURCES, &set_namespace_pipeline(false));

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
        RUNS,
    );
    let (ours_builtin, ours_exec, kpt_exec) =
        (sn_times[0].wall, sn_times[1].wall, sn_times[2].wall);
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
