//! Shared integration-test harness: starts the real `krm-fn-runner serve`
//! process on loopback and finds the catalog functions installed by
//! `scripts/install-catalog-functions.sh`.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

use krm_fn_runner::adapters::grpc::pb::function_evaluator_client::FunctionEvaluatorClient;
use krm_fn_runner::adapters::pod::connections::WrapperChannel;
use tonic::transport::{Channel, Endpoint};

/// The catalog installation: `bin/`, `config.yaml`, `modules.txt`.
pub fn catalog_dir() -> PathBuf {
    let dir = std::env::var_os("KRM_FN_CATALOG")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            let cache = std::env::var_os("KRM_FN_CACHE")
                .map(PathBuf::from)
                .unwrap_or_else(|| {
                    PathBuf::from(std::env::var("HOME").unwrap()).join(".cache/krm-fn-runner")
                });
            cache.join("catalog")
        });
    assert!(
        dir.join("config.yaml").is_file(),
        "catalog functions are not installed at {}: run scripts/install-catalog-functions.sh \
         (or set KRM_FN_CATALOG to its destination)",
        dir.display()
    );
    dir
}

/// The pinned catalog version of `function`, from `DEST/versions.txt` or `modules.txt`.
pub fn catalog_version(function: &str) -> String {
    let modules = std::fs::read_to_string(catalog_dir().join("modules.txt")).unwrap();
    modules
        .lines()
        .find_map(|l| {
            let mut parts = l.split_whitespace();
            (parts.next() == Some(function)).then(|| parts.next().unwrap().to_string())
        })
        .unwrap_or_else(|| panic!("{function} is not in the catalog installation"))
}

/// The fully qualified catalog image of `function` at its pinned version.
pub fn catalog_image(function: &str) -> String {
    format!(
        "ghcr.io/kptdev/krm-functions-catalog/{function}:{}",
        catalog_version(function)
    )
}

/// The Python with grpcio and prometheus_client, from `KRM_FN_PYTHON` or
/// `scripts/setup-python-client.sh`.
pub fn python() -> String {
    built_tool("KRM_FN_PYTHON", "setup-python-client.sh")
        .display()
        .to_string()
}

/// Runs `tests/python/evaluator_client.py` (Python's grpcio, stubs
/// generated from `proto/`) against `runner` with the ResourceList file
/// `input` and the client's further `args` (`--image`, `--probe`, ...);
/// asserts the client exits 0 (showing its stderr and the runner's log) and
/// returns the JSON it prints.
pub fn python_evaluator_client(runner: &Runner, input: &Path, args: &[&str]) -> serde_json::Value {
    let root = repo_root();
    let out = Command::new(python())
        .arg(root.join("tests/python/evaluator_client.py"))
        .arg("--proto")
        .arg(root.join("proto"))
        .args(["--address", &runner.address, "--input"])
        .arg(input)
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "python client failed: {}\nrunner log:\n{}",
        String::from_utf8_lossy(&out.stderr),
        runner.log()
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// What `tests/python/tag_client.py` saw for one request.
#[derive(Debug, Clone)]
pub struct TagClientAnswer {
    /// `OK` or the gRPC status name (`NOT_FOUND`, ...).
    pub code: String,
    /// The status message; empty when `OK`.
    pub details: String,
    /// The response's `log` (the function's stderr); empty on an error.
    pub log: String,
    /// The response's ResourceList, as text; empty on an error.
    pub output: String,
}

/// Runs `tests/python/tag_client.py` — Python's grpcio with its own copy of
/// Porch's request message, `string Tag = 3` included, not generated from
/// `proto/` — against the FunctionEvaluator at `address` (`host:port` or
/// `unix:/path`): one request per `(image, tag)` case, sending the
/// ResourceList `rl` and the tag (none for `None`), each with a deadline of
/// `timeout_secs` seconds. Asserts the client exits 0 (showing its stderr
/// and `log`, e.g. the runner's log); returns one answer per case.
pub fn porch_tag_client(
    address: &str,
    rl: &[u8],
    cases: &[(&str, Option<&str>)],
    timeout_secs: u64,
    log: &dyn Fn() -> String,
) -> Vec<TagClientAnswer> {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("rl.yaml");
    std::fs::write(&input, rl).unwrap();
    let cases_json: Vec<serde_json::Value> = cases
        .iter()
        .map(|(image, tag)| match tag {
            Some(t) => serde_json::json!({"image": image, "tag": t}),
            None => serde_json::json!({"image": image}),
        })
        .collect();
    let cases_path = dir.path().join("cases.json");
    std::fs::write(&cases_path, serde_json::to_vec(&cases_json).unwrap()).unwrap();
    let out = Command::new(python())
        .arg(repo_root().join("tests/python/tag_client.py"))
        .args([
            "--address",
            address,
            "--timeout",
            &timeout_secs.to_string(),
            "--input",
        ])
        .arg(&input)
        .arg("--cases")
        .arg(&cases_path)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "tag client failed: {}\nlog:\n{}",
        String::from_utf8_lossy(&out.stderr),
        log()
    );
    let seen: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).unwrap();
    seen.iter()
        .map(|s| {
            let text = |k: &str| s[k].as_str().unwrap_or_default().to_string();
            TagClientAnswer {
                code: text("code"),
                details: text("details"),
                log: text("log"),
                output: text("output"),
            }
        })
        .collect()
}

/// The repository's root: `Cargo.toml`, `scripts/`, `tests/`, `proto/`.
pub fn repo_root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the test beds live in a folder of the repository")
}

/// Porch's own deployment files, which this repository does not ship: the
/// folder `KRM_FN_PORCH_DEPLOY` names, with `head/` (the FunctionConfig
/// generation: namespaces, runner, templates, FunctionConfigs, CRDs, RBAC)
/// and `config-yaml-era/` (the generation before it), as in CI's shared
/// fixtures. `None` after a message on stderr naming the variable when it is
/// unset or names no folder: the caller skips.
pub fn porch_deploy() -> Option<PathBuf> {
    const VAR: &str = "KRM_FN_PORCH_DEPLOY";
    let Some(dir) = std::env::var_os(VAR).map(PathBuf::from) else {
        eprintln!(
            "skipped: {VAR} is not set; point it at a folder of Porch's deployment files (head/, config-yaml-era/)"
        );
        return None;
    };
    if !dir.is_dir() {
        eprintln!(
            "skipped: {VAR}={} is not a folder; point it at Porch's deployment files (head/, config-yaml-era/)",
            dir.display()
        );
        return None;
    }
    Some(dir)
}

/// The directory cargo put this build's binaries in (`target/debug`,
/// `target/release`…): the running test or bench is in its `deps/`, and
/// cargo builds the package's binaries before its tests and benches.
pub fn build_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("the running test's path");
    let dir = exe.parent().expect("the test binary's directory");
    if dir.ends_with("deps") {
        dir.parent().unwrap_or(dir).to_path_buf()
    } else {
        dir.to_path_buf()
    }
}

/// This build's binary `name` (`krm-fn-runner`, `wrapper-server`,
/// `krm-fn-supervisor`, `grpc-health-probe`) in [`build_dir`]. Panics,
/// naming the path, when it is not there.
pub fn built_binary(name: &str) -> PathBuf {
    let path = build_dir().join(name);
    assert!(
        path.is_file(),
        "{} is not built: run the tests with cargo (`cargo test`), which builds the binaries first",
        path.display()
    );
    path
}

/// Runs `cmd` to completion, failing the test with the command and its
/// stderr when it cannot start or exits unsuccessfully.
pub fn run_checked(cmd: &mut Command) {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The `krm-fn-runner` binary under test: this build's, or
/// `KRM_FN_RUNNER_BIN` (to run a test against another build).
pub fn runner_binary() -> PathBuf {
    std::env::var_os("KRM_FN_RUNNER_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| built_binary("krm-fn-runner"))
}

/// The `wrapper-server` binary under test: this build's, or `KRM_FN_WRAPPER_BIN`.
pub fn wrapper_binary() -> PathBuf {
    std::env::var_os("KRM_FN_WRAPPER_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| built_binary("wrapper-server"))
}

/// The cargo target directory this test or bench was built in
/// (`CARGO_TARGET_DIR`, `build.target-dir` or `<repository>/target`): the
/// parent of [`build_dir`]. Where reports such as a bench's JSON summary
/// go.
pub fn target_dir() -> PathBuf {
    let dir = build_dir();
    dir.parent().map(Path::to_path_buf).unwrap_or(dir)
}

/// The `main` of a benchmark without criterion: under `cargo bench` (which
/// passes `--bench`) runs `bench` on a multi-threaded tokio runtime; under
/// `cargo test --benches` (no `--bench`) does nothing, the build was the
/// check.
pub fn bench_main<F: std::future::Future<Output = ()>>(bench: impl FnOnce() -> F) {
    if !std::env::args().any(|a| a == "--bench") {
        return;
    }
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(bench());
}

/// A running `krm-fn-runner serve` process, killed on drop.
pub struct Runner {
    child: Child,
    /// `ip:port` or `unix:/path`.
    pub address: String,
    log: Arc<Mutex<Vec<String>>>,
}

impl Runner {
    /// Starts `serve` with `args` (plus `--listen 127.0.0.1:0` unless a
    /// `--listen` is given) and waits until it listens.
    pub fn start(args: &[&str]) -> Runner {
        let mut cmd = Command::new(runner_binary());
        cmd.arg("serve");
        Self::spawn(cmd, args)
    }

    /// As [`Runner::start`], with extra environment variables for the runner.
    pub fn start_with_env(args: &[&str], env: &[(&str, &str)]) -> Runner {
        let mut cmd = Command::new(runner_binary());
        cmd.arg("serve").envs(env.iter().copied());
        Self::spawn(cmd, args)
    }

    /// As [`Runner::start`], with the runner's open-file limit
    /// (RLIMIT_NOFILE) set to `limit`.
    pub fn start_with_nofile(args: &[&str], limit: u64) -> Runner {
        use std::os::unix::process::CommandExt;
        let mut cmd = Command::new(runner_binary());
        cmd.arg("serve");
        // SAFETY: setrlimit is async-signal-safe.
        unsafe {
            cmd.pre_exec(move || {
                let l = libc::rlimit {
                    rlim_cur: limit,
                    rlim_max: limit,
                };
                if libc::setrlimit(libc::RLIMIT_NOFILE, &l) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        Self::spawn(cmd, args)
    }

    /// Starts `wrapper-server` with `args` (plus `--listen 127.0.0.1:0`
    /// unless given; put the entrypoint after `--` in `args`).
    pub fn start_wrapper(args: &[&str]) -> Runner {
        Self::spawn(Command::new(wrapper_binary()), args)
    }

    /// Starts `program` (a server that prints `listening on <address>`,
    /// as `wrapper-server` does) with `args` and exactly the environment
    /// `env` (plus `PATH`), adding `--listen 127.0.0.1:0` unless given.
    pub fn start_program(program: &Path, args: &[String], env: &[(String, String)]) -> Runner {
        let mut cmd = Command::new(program);
        cmd.env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .envs(env.iter().map(|(k, v)| (k, v)));
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        Self::spawn(cmd, &args)
    }

    /// Starts the server `cmd` (a prepared command: program, subcommand,
    /// environment, a `pre_exec` hook) with `args`, as [`Runner::start`].
    pub fn start_command(cmd: Command, args: &[&str]) -> Runner {
        Self::spawn(cmd, args)
    }

    /// As [`Runner::start_wrapper`], with extra environment variables.
    pub fn start_wrapper_with_env(args: &[&str], env: &[(&str, &str)]) -> Runner {
        let mut cmd = Command::new(built_binary("wrapper-server"));
        cmd.envs(env.iter().copied());
        Self::spawn(cmd, args)
    }

    fn spawn(mut cmd: Command, args: &[&str]) -> Runner {
        if !args.iter().any(|a| a.starts_with("--listen")) {
            cmd.args(["--listen", "127.0.0.1:0"]);
        }
        cmd.args(args).stdout(Stdio::null()).stderr(Stdio::piped());
        let mut child = cmd.spawn().expect("start krm-fn-runner serve");
        let stderr = child.stderr.take().unwrap();
        let log = Arc::new(Mutex::new(Vec::new()));
        let (tx, rx) = mpsc::channel();
        let sink = log.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if let Some(i) = line.find("listening on ") {
                    let addr = line[i + "listening on ".len()..]
                        .split_whitespace()
                        .next()
                        .unwrap_or("");
                    let _ = tx.send(addr.to_string());
                }
                sink.lock().unwrap().push(line);
            }
        });
        let address = rx
            .recv_timeout(Duration::from_secs(20))
            .unwrap_or_else(|_| panic!("runner did not start: {:?}", log.lock().unwrap()));
        Runner {
            child,
            address,
            log,
        }
    }

    /// A channel to the runner.
    pub async fn channel(&self) -> Channel {
        let uri = if self.address.starts_with("unix:") {
            self.address.clone()
        } else {
            format!("http://{}", self.address)
        };
        Endpoint::from_shared(uri)
            .unwrap()
            .connect()
            .await
            .expect("connect to runner")
    }

    /// A FunctionEvaluator client with generous message limits.
    pub async fn client(&self) -> FunctionEvaluatorClient<Channel> {
        FunctionEvaluatorClient::new(self.channel().await)
            .max_decoding_message_size(64 << 20)
            .max_encoding_message_size(64 << 20)
    }

    /// A FunctionEvaluator client that leaves a call's deadline
    /// (`grpc-timeout`) to the runner. tonic's `Channel` also keeps the
    /// deadline on the client side, and when its own timer fires first it
    /// ends the call with `CANCELLED` ("Timeout expired") before the runner's
    /// answer arrives; on a loaded machine that races the runner's
    /// `DEADLINE_EXCEEDED`. Tests of the runner's answer to a deadline use
    /// this client, and bound their wait themselves. TCP addresses only.
    pub fn client_without_local_deadline(&self) -> FunctionEvaluatorClient<WrapperChannel> {
        assert!(
            !self.address.starts_with("unix:"),
            "a TCP address is needed, not {}",
            self.address
        );
        let origin = format!("http://{}", self.address).parse().unwrap();
        let channel = WrapperChannel::new(self.address.clone(), Duration::from_secs(10));
        FunctionEvaluatorClient::with_origin(channel, origin)
            .max_decoding_message_size(64 << 20)
            .max_encoding_message_size(64 << 20)
    }

    /// The process id of the runner.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Everything the runner logged so far.
    pub fn log(&self) -> String {
        self.log.lock().unwrap().join("\n")
    }

    /// Kills the runner with SIGKILL and reaps it.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Sends SIGTERM and waits up to `within` for the exit status.
    pub fn terminate(&mut self, within: Duration) -> Option<std::process::ExitStatus> {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let deadline = Instant::now() + within;
        while Instant::now() < deadline {
            if let Ok(Some(s)) = self.child.try_wait() {
                return Some(s);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    }
}

impl Drop for Runner {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The catalog's config.yaml (`functions:` and its entries) with every
/// binary named by absolute path, ready for more entries to be appended.
pub fn catalog_functions_yaml() -> String {
    let catalog = std::fs::read_to_string(catalog_dir().join("config.yaml")).unwrap();
    let bin = catalog_dir().join("bin");
    let mut out = String::from("functions:\n");
    // Re-root the catalog entries on absolute paths.
    for line in catalog
        .lines()
        .skip_while(|l| !l.starts_with("functions:"))
        .skip(1)
    {
        if let Some(name) = line.trim_start().strip_prefix("- function: ") {
            out.push_str(&format!(
                "- function: {}\n",
                bin.join(name.trim()).display()
            ));
        } else {
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}

/// Writes a config.yaml into `dir` serving the catalog functions plus the
/// scripts named `scripts` (in `dir`, as `example.com/test/<name>:v1`), all
/// by absolute path; returns its path.
pub fn catalog_config_with(dir: &Path, scripts: &[&str]) -> String {
    let mut out = catalog_functions_yaml();
    for s in scripts {
        out.push_str(&format!(
            "- function: {}\n  images:\n  - example.com/test/{s}:v1\n",
            dir.join(s).display()
        ));
    }
    let path = dir.join("config.yaml");
    std::fs::write(&path, out).unwrap();
    path.display().to_string()
}

/// Writes the package `dir/pkg`: a Kptfile named `pkg` whose `metadata`
/// gets the lines `metadata_lines` (indented by two, e.g. annotations)
/// and whose `pipeline` is the lines `pipeline_lines` (indented by two),
/// and `cm.yaml` holding ConfigMap `cm` without namespace. Returns the
/// package directory.
pub fn write_cm_package(dir: &Path, metadata_lines: &str, pipeline_lines: &str) -> PathBuf {
    let pkg = dir.join("pkg");
    std::fs::create_dir_all(&pkg).unwrap();
    std::fs::write(
        pkg.join("Kptfile"),
        format!(
            "apiVersion: kpt.dev/v1\nkind: Kptfile\nmetadata:\n  name: pkg\n{metadata_lines}pipeline:\n{pipeline_lines}"
        ),
    )
    .unwrap();
    std::fs::write(
        pkg.join("cm.yaml"),
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cm\ndata:\n  a: b\n",
    )
    .unwrap();
    pkg
}

/// Runs `krm-fn-runner render PKG --results-dir DIR/results ARGS` (an
/// earlier `DIR/results` removed first); returns its output, the
/// results.yaml text ("" when none was written) and how long it took.
pub fn render_cli(
    dir: &Path,
    pkg: &Path,
    args: &[String],
) -> (std::process::Output, String, Duration) {
    let results = dir.join("results");
    let _ = std::fs::remove_dir_all(&results);
    let started = Instant::now();
    let out = Command::new(runner_binary())
        .arg("render")
        .arg(pkg)
        .arg(format!("--results-dir={}", results.display()))
        .args(args)
        .output()
        .unwrap();
    let took = started.elapsed();
    let text = std::fs::read_to_string(results.join("results.yaml")).unwrap_or_default();
    (out, text, took)
}

/// Writes an executable script `name` into `dir`.
pub fn script(dir: &Path, name: &str, body: &str) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let path = dir.join(name);
    std::fs::write(&path, body).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

/// The fields of `/proc/PID/stat` after the command name (the state is
/// field 0, the parent field 1, the nice value field 16, the scheduling
/// policy field 38); `None` once the process is gone.
pub fn stat_fields(pid: u32) -> Option<Vec<String>> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    Some(
        stat.rsplit(')')
            .next()?
            .split_whitespace()
            .map(str::to_string)
            .collect(),
    )
}

/// True while process `pid` exists and is not a zombie.
pub fn alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => false,
        Ok(stat) => {
            let state = stat
                .rsplit(')')
                .next()
                .unwrap_or("")
                .split_whitespace()
                .next()
                .unwrap_or("");
            state != "Z" && state != "X"
        }
    }
}

/// The children of `pid` (from `/proc/<pid>/stat` of every process), with
/// whether each is a zombie.
pub fn children_of(pid: u32) -> Vec<(u32, bool)> {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| {
            let child = e.file_name().to_str()?.parse::<u32>().ok()?;
            let stat = std::fs::read_to_string(e.path().join("stat")).ok()?;
            let mut rest = stat.rsplit_once(')')?.1.split_whitespace();
            let zombie = rest.next()? == "Z";
            let parent: u32 = rest.next()?.parse().ok()?;
            (parent == pid).then_some((child, zombie))
        })
        .collect()
}

/// Processes whose command line contains `marker` (NULs read as spaces),
/// the functions' supervisors (`krm-fn-supervisor RUNNER_PID TOKEN PROGRAM
/// …`, whose argv names the function) excepted.
pub fn processes_matching(marker: &str) -> Vec<u32> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        let text: String = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        let supervisor = text
            .split(' ')
            .next()
            .is_some_and(|argv0| argv0.ends_with("/krm-fn-supervisor"));
        if text.contains(marker) && !supervisor && alive(pid) {
            found.push(pid);
        }
    }
    found
}

/// Polls `ok` every 20 ms until it holds or `within` has passed; returns
/// its last answer.
pub fn wait_until(within: Duration, mut ok: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + within;
    while Instant::now() < deadline {
        if ok() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    ok()
}

/// A tool built by one of the repository's scripts (`scripts/<script>`):
/// the path in environment variable `env` (scripts/test.sh sets it), else
/// the script's answer (it builds once per machine, then answers from its
/// cache). Panics when the script fails.
pub fn built_tool(env: &str, script: &str) -> PathBuf {
    if let Some(p) = std::env::var_os(env) {
        return PathBuf::from(p);
    }
    let out = Command::new("bash")
        .arg(repo_root().join("scripts").join(script))
        .stderr(Stdio::inherit())
        .output()
        .unwrap_or_else(|e| panic!("run scripts/{script}: {e}"));
    assert!(
        out.status.success(),
        "scripts/{script} failed (needs Go and the Go module proxy)"
    );
    PathBuf::from(String::from_utf8(out.stdout).unwrap().trim())
}

/// A loopback TCP port that was free a moment ago.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A ResourceList for set-namespace: one ConfigMap, the function config
/// asking for `namespace`.
pub fn set_namespace_rl(namespace: &str) -> Vec<u8> {
    format!(
        "apiVersion: config.kubernetes.io/v1\nkind: ResourceList\nitems:\n- apiVersion: v1\n  kind: ConfigMap\n  metadata:\n    name: cm\n  data:\n    k: v\nfunctionConfig:\n  apiVersion: v1\n  kind: ConfigMap\n  metadata:\n    name: fn\n  data:\n    namespace: {namespace}\n"
    )
    .into_bytes()
}

/// Calls `image` on `rl` through `runner` (a fresh client).
pub async fn call(
    runner: &Runner,
    image: &str,
    rl: Vec<u8>,
) -> Result<krm_fn_runner::adapters::grpc::pb::EvaluateFunctionResponse, tonic::Status> {
    call_with_tag(runner, image, "", rl).await
}

/// [`call`] with Porch's `Tag` (field 3): the step's tag, a literal or a
/// semver constraint; `""` sends none.
pub async fn call_with_tag(
    runner: &Runner,
    image: &str,
    tag: &str,
    rl: Vec<u8>,
) -> Result<krm_fn_runner::adapters::grpc::pb::EvaluateFunctionResponse, tonic::Status> {
    runner
        .client()
        .await
        .evaluate_function(krm_fn_runner::adapters::grpc::pb::EvaluateFunctionRequest {
            tag: tag.to_string(),
            resource_list: rl.into(),
            image: image.to_string(),
        })
        .await
        .map(|r| r.into_inner())
}

/// The output ResourceList of `r`, as text.
pub fn output(r: &krm_fn_runner::adapters::grpc::pb::EvaluateFunctionResponse) -> String {
    String::from_utf8_lossy(&r.resource_list).into_owned()
}

/// A small valid ResourceList holding one ConfigMap named `name`.
pub fn config_map_rl(name: &str) -> Vec<u8> {
    format!(
        "apiVersion: config.kubernetes.io/v1\nkind: ResourceList\nitems:\n- apiVersion: v1\n  kind: ConfigMap\n  metadata:\n    name: {name}\n  data:\n    k: v\n"
    )
    .into_bytes()
}

/// Polls `check` every 100 ms until it returns `Some`, or panics after `within`.
pub async fn eventually<T, F, Fut>(what: &str, within: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + within;
    loop {
        if let Some(v) = check().await {
            return v;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The runner's overall health (service `""`) from `grpc.health.v1`.
pub async fn health(runner: &Runner) -> i32 {
    use tonic_health::pb::HealthCheckRequest;
    use tonic_health::pb::health_client::HealthClient;
    HealthClient::new(runner.channel().await)
        .check(HealthCheckRequest {
            service: String::new(),
        })
        .await
        .expect("health check")
        .into_inner()
        .status
}

/// `grpc.health.v1` SERVING.
pub const SERVING: i32 = tonic_health::pb::health_check_response::ServingStatus::Serving as i32;
/// `grpc.health.v1` NOT_SERVING.
pub const NOT_SERVING: i32 =
    tonic_health::pb::health_check_response::ServingStatus::NotServing as i32;

/// A runtime call of `target` on the objects whose YAML texts are `items`
/// (each text its object's origin, as render sends them) with
/// `function_config`, and a 30 s timeout.
///
/// Panics: an item that is not one YAML document (a test's own input).
pub fn call_with_texts(
    target: krm_fn_runner::ports::FunctionTarget,
    items: &[String],
    function_config: Option<&serde_json::Value>,
) -> krm_fn_runner::ports::FunctionCall {
    use krm_fn_runner::domain::codec::tree::YamlDoc;
    use krm_fn_runner::domain::render::source::{CallSources, ObjectText};
    let docs: Vec<YamlDoc> = items
        .iter()
        .map(|t| YamlDoc::parse(t.as_str()).unwrap())
        .collect();
    let mut rl = krm_fn_runner::domain::resource_list::ResourceList::new(
        docs.iter().map(|d| d.value().clone()).collect(),
    );
    rl.function_config = function_config.cloned();
    krm_fn_runner::ports::FunctionCall {
        target,
        resource_list: rl,
        timeout: Some(Duration::from_secs(30)),
        sources: Some(CallSources {
            texts: docs
                .into_iter()
                .map(|d| {
                    Some(ObjectText {
                        origin: Some(Arc::new(d)),
                        wire: None,
                    })
                })
                .collect(),
            checked_only_output: false,
        }),
    }
}

/// The installed catalog binary of `function` (`catalog_dir()/bin/NAME`).
///
/// Panics, naming the install script, when it is not installed.
pub fn installed_catalog_binary(function: &str) -> PathBuf {
    let bin = catalog_dir().join("bin").join(function);
    assert!(
        bin.is_file(),
        "{} is not installed: run scripts/install-catalog-functions.sh (or set KRM_FN_CATALOG)",
        bin.display()
    );
    bin
}

/// How two failures of one function call differ (the Go binary's and a
/// builtin's): exit code, stderr and results, and the items written with
/// the failure (compared as values). Empty when they are the same.
pub fn failure_differences(
    go: &krm_fn_runner::domain::evaluation::FunctionFailure,
    rust: &krm_fn_runner::domain::evaluation::FunctionFailure,
) -> Vec<String> {
    use krm_fn_runner::domain::resource_list::ResourceList;
    let mut diffs = Vec::new();
    if go.exit != rust.exit || go.stderr != rust.stderr || go.results != rust.results {
        diffs.push(format!(
            "failures differ\n--- go\n{:?} {:?} {:?}\n--- rust\n{:?} {:?} {:?}",
            go.exit, go.stderr, go.results, rust.exit, rust.stderr, rust.results
        ));
    }
    let items_of = |b: &[u8]| ResourceList::parse(b).map(|l| l.items).ok();
    if items_of(&go.output) != items_of(&rust.output) {
        diffs.push(format!(
            "items written on failure differ\n--- go\n{}\n--- rust\n{}",
            String::from_utf8_lossy(&go.output),
            String::from_utf8_lossy(&rust.output)
        ));
    }
    diffs
}

/// Each output item's text as lines with their leading blanks removed
/// (an unchanged item is its input's text, `inputs[j]`); `None` when the
/// runtime gave no item texts.
pub fn output_item_lines(
    out: &krm_fn_runner::ports::FunctionOutput,
    inputs: &[String],
) -> Option<Vec<Vec<String>>> {
    use krm_fn_runner::domain::resource_list::OutputItem;
    let texts = out.item_texts.as_ref()?;
    Some(
        texts
            .iter()
            .map(|t| {
                let text = match t {
                    OutputItem::Same(j) => inputs[*j].as_str(),
                    OutputItem::Text(doc) => doc.text(),
                };
                text.lines().map(|l| l.trim_start().to_string()).collect()
            })
            .collect(),
    )
}
