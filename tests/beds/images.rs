//! The container images, for real: `scripts/build-images.sh --push` (the
//! book's command, `docs/src/operators/deploying.md`) builds both with buildah and pushes them to a real
//! registry (Debian's docker-registry); the runner's own image inspection
//! (OciImageInspector) reads their digests and entrypoints back. Then, as a
//! kubelet would run them:
//!
//! - the wrapper image's init step, Porch's exact `cp -a
//!   /home/nonroot/wrapper-server/. /wrapper-server-tools` as uid 10001 into
//!   a shared directory, then a function image with no shell and no libc
//!   (FROM scratch + a catalog function) runs
//!   `/wrapper-server-tools/wrapper-server` with Porch's arguments, answers
//!   an evaluation and `/wrapper-server-tools/grpc-health-probe`;
//! - the runner image runs `/home/nonroot/server` with Porch's config.yaml
//!   flags, evaluates a catalog function from `/home/nonroot/functions`, and
//!   answers `/home/nonroot/grpc-health-probe`.
//!
//! Containers are `buildah run --isolation chroot` (host network), with
//! buildah's storage in a temporary directory (vfs driver).
//! Needs buildah, musl-tools, busybox-static, docker-registry (.ci/run
//! installs them).

use krm_fn_testbed::common;
use krm_fn_testbed::registry_support;

use std::io::{BufRead, BufReader};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{catalog_dir, catalog_version, free_port};
use krm_fn_runner::adapters::grpc::pb::EvaluateFunctionRequest;
use krm_fn_runner::adapters::grpc::pb::function_evaluator_client::FunctionEvaluatorClient;
use krm_fn_runner::adapters::oci::{InspectorConfig, OciImageInspector};
use krm_fn_runner::ports::ImageInspector;
use registry_support::{Setup, TestRegistry, require_tool};

const REPO: &str = env!("CARGO_MANIFEST_DIR");

/// buildah with its storage in `root` (vfs driver).
struct Buildah {
    conf: PathBuf,
}

impl Buildah {
    fn new(root: &Path) -> Self {
        require_tool("buildah", "buildah");
        std::fs::create_dir_all(root).unwrap();
        let conf = root.join("storage.conf");
        std::fs::write(
            &conf,
            format!(
                "[storage]\ndriver = \"vfs\"\ngraphroot = \"{}\"\nrunroot = \"{}\"\n",
                root.join("graph").display(),
                root.join("run").display()
            ),
        )
        .unwrap();
        Self { conf }
    }

    /// A command with this storage (for buildah and the scripts calling it).
    fn env(&self, cmd: &mut Command) {
        cmd.env("CONTAINERS_STORAGE_CONF", &self.conf)
            .env("STORAGE_DRIVER", "vfs");
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new("buildah");
        self.env(&mut cmd);
        cmd.args(["--storage-driver", "vfs"]).args(args);
        cmd
    }

    /// Runs buildah; returns stdout, panics with stderr on failure.
    fn run(&self, args: &[&str]) -> String {
        let out = self.command(args).output().expect("run buildah");
        assert!(
            out.status.success(),
            "buildah {args:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    /// A working container of `image` (from local storage).
    fn from(&self, image: &str) -> String {
        self.run(&["from", "--pull-never", "--quiet", image])
    }

    /// `buildah run` in `container` as uid 10001 with `mounts` (host:container).
    fn run_in(&self, container: &str, mounts: &[(&Path, &str)], argv: &[&str]) -> Command {
        let mut cmd = self.command(&["run", "--isolation", "chroot", "--user", "10001:10001"]);
        for (host, path) in mounts {
            cmd.arg("-v").arg(format!("{}:{path}", host.display()));
        }
        cmd.arg(container).arg("--").args(argv);
        cmd
    }
}

/// A long-running `buildah run`, in its own process group, stopped on drop.
struct Running {
    child: Child,
    log: std::sync::Arc<std::sync::Mutex<String>>,
}

impl Running {
    /// Spawns `cmd` and waits until it logs `listening on`.
    fn start(mut cmd: Command, what: &str) -> Running {
        cmd.stdout(Stdio::null())
            .stderr(Stdio::piped())
            .process_group(0);
        let mut child = cmd.spawn().unwrap_or_else(|e| panic!("start {what}: {e}"));
        let stderr = child.stderr.take().unwrap();
        let log = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
        let (tx, rx) = std::sync::mpsc::channel();
        let sink = log.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if line.contains("listening on ") {
                    let _ = tx.send(());
                }
                let mut l = sink.lock().unwrap();
                l.push_str(&line);
                l.push('\n');
            }
        });
        if rx.recv_timeout(Duration::from_secs(60)).is_err() {
            panic!("{what} did not start:\n{}", log.lock().unwrap());
        }
        Running { child, log }
    }

    /// The server found the `krm-fn-supervisor` program shipped next to it
    /// and runs it as the resident supervisor (the default way).
    fn assert_supervised(&self) {
        let log = self.log.lock().unwrap();
        assert!(
            log.contains("functions start under the resident supervisor program"),
            "{log}"
        );
    }

    fn stop(&mut self) {
        if let Ok(Some(_)) = self.child.try_wait() {
            return;
        }
        let group = format!("-{}", self.child.id());
        let kill = |signal: &str| {
            let _ = Command::new("kill")
                .args([signal, "--", &group])
                .stderr(Stdio::null())
                .status();
        };
        kill("-TERM");
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        kill("-KILL");
        let _ = self.child.wait();
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A set-namespace call: the ConfigMap of `common::config_map_rl` moved to `ns`.
async fn set_namespace(port: u16, image: &str, ns: &str) -> Result<String, tonic::Status> {
    let rl = String::from_utf8(common::config_map_rl("settings")).unwrap();
    let rl = format!(
        "{rl}functionConfig:\n  apiVersion: v1\n  kind: ConfigMap\n  metadata:\n    name: fc\n  data:\n    namespace: {ns}\n"
    );
    let mut client = FunctionEvaluatorClient::connect(format!("http://127.0.0.1:{port}"))
        .await
        .expect("connect");
    client
        .evaluate_function(EvaluateFunctionRequest {
            tag: String::new(),
            resource_list: rl.into_bytes().into(),
            image: image.into(),
        })
        .await
        .map(|r| String::from_utf8_lossy(&r.into_inner().resource_list).into_owned())
}

/// Sum of the compressed layer sizes and the config size of `image`'s manifest.
async fn pushed_size(reg: &TestRegistry, image: &str) -> u64 {
    let reference = reg.reference(image);
    let (manifest, _) = reg
        .push_client()
        .pull_image_manifest(&reference, &reg.push_auth())
        .await
        .expect("pull manifest");
    manifest.layers.iter().map(|l| l.size as u64).sum::<u64>() + manifest.config.size as u64
}

/// Where `scripts/build-images.sh` leaves the stripped binaries and their
/// `.debug` files.
fn image_bin_dir() -> PathBuf {
    let target = std::env::var_os("KRM_FN_IMAGE_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            std::env::var_os("KRM_FN_CACHE")
                .map(PathBuf::from)
                .unwrap_or_else(|| {
                    PathBuf::from(std::env::var("HOME").unwrap()).join(".cache/krm-fn-runner")
                })
                .join("image-target")
        });
    target.join("image-bin")
}

/// The section names of ELF file `path` (`readelf -S`).
fn sections(path: &Path) -> Vec<String> {
    let out = Command::new("readelf")
        .args(["-S", "--wide"])
        .arg(path)
        .output()
        .expect("run readelf");
    assert!(out.status.success(), "readelf -S {}", path.display());
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| Some(l.split_once("] ")?.1.split_whitespace().next()?.to_string()))
        .collect()
}

/// The book's "Allocator" promise (`docs/src/benchmarks/history.md`): the static `bin` in `dir` allocates
/// with mimalloc (asked to be verbose through its `MIMALLOC_VERBOSE`
/// option, it reports its start on stderr; the C library's `malloc` says
/// nothing).
fn assert_allocates_with_mimalloc(dir: &Path, bin: &str) {
    let out = Command::new(dir.join(bin))
        .arg("--version")
        .env("MIMALLOC_VERBOSE", "1")
        .output()
        .unwrap_or_else(|e| panic!("run {bin} --version: {e}"));
    assert!(out.status.success(), "{bin} --version: {out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("mimalloc: process init"),
        "{bin} does not allocate with mimalloc; stderr: {stderr}"
    );
}

/// The book's promise (`docs/src/operators/deploying.md`): the runner at most 31 MB and the wrapper server at
/// most 15 MB, stripped (no symbols, no debug info), each with its debug
/// info (line tables) in a `.debug` file beside it that it names.
fn assert_binaries_stripped_and_split() {
    let dir = image_bin_dir();
    for (bin, limit) in [
        ("krm-fn-runner", 31_000_000),
        ("wrapper-server", 15_000_000),
        ("grpc-health-probe", 15_000_000),
        ("krm-fn-supervisor", 15_000_000),
    ] {
        let path = dir.join(bin);
        let size = std::fs::metadata(&path)
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
            .len();
        eprintln!("{bin}: {size} bytes");
        assert!(size <= limit, "{bin} is {size} bytes, over {limit}");
        let names = sections(&path);
        // `.debug_gdb_scripts` is loaded with the program (rustc's hint
        // to gdb for its pretty-printers), not debug info.
        assert!(
            !names
                .iter()
                .any(|n| n == ".symtab" || (n.starts_with(".debug_") && n != ".debug_gdb_scripts")),
            "{bin} is not stripped: {names:?}"
        );
        assert!(names.iter().any(|n| n == ".gnu_debuglink"), "{names:?}");
        let debug = sections(&dir.join(format!("{bin}.debug")));
        assert!(
            debug.iter().any(|n| n == ".debug_line") && debug.iter().any(|n| n == ".symtab"),
            "{bin}.debug lacks line tables or symbols: {debug:?}"
        );
    }
    for bin in ["krm-fn-runner", "wrapper-server"] {
        assert_allocates_with_mimalloc(&dir, bin);
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn images_build_push_inspect_and_run() {
    let reg = TestRegistry::start(Setup::anonymous());
    let work = tempfile::tempdir().unwrap();
    let buildah = Buildah::new(&work.path().join("storage"));
    let runner_image = format!("{}/krm-fn-runner:test", reg.addr);
    let wrapper_image = format!("{}/krm-fn-wrapper-server:test", reg.addr);

    // Build and push with the book's command; "IMAGE DIGEST" per image.
    let build_and_push = || {
        let mut build = Command::new("bash");
        build
            .arg(Path::new(REPO).join("scripts/build-images.sh"))
            .args([
                "--push",
                "--tls-verify=false",
                &runner_image,
                &wrapper_image,
            ])
            .stderr(Stdio::inherit());
        buildah.env(&mut build);
        let out = build.output().expect("run build-images.sh");
        assert!(out.status.success(), "scripts/build-images.sh failed");
        String::from_utf8(out.stdout)
            .unwrap()
            .lines()
            .filter_map(|l| l.split_once(' '))
            .map(|(i, d)| (i.to_string(), d.to_string()))
            .collect::<Vec<(String, String)>>()
    };
    let pushed = build_and_push();
    assert_eq!(pushed.len(), 2, "{pushed:?}");
    // Built again from the same inputs: the same digests (fixed timestamps).
    assert_eq!(build_and_push(), pushed, "the images are reproducible");

    // The runner's image inspection reads them back.
    let mut config = InspectorConfig::new("ghcr.io/kptdev/krm-functions-catalog/");
    config.plain_http_registries = vec![reg.addr.clone()];
    config.docker_config_path = Some(work.path().join("no-docker-config.json"));
    let inspector = OciImageInspector::new(config).unwrap();
    for ((image, digest), entrypoint) in pushed.iter().zip([
        &[
            "/home/nonroot/server",
            "--functions=/home/nonroot/functions",
        ][..],
        &["/home/nonroot/wrapper-server/wrapper-server"][..],
    ]) {
        let meta = inspector.inspect(image).await.expect("inspect");
        assert_eq!(&meta.digest, digest, "{image}");
        assert_eq!(meta.entrypoint, entrypoint, "{image}");
    }
    assert_binaries_stripped_and_split();
    let runner_size = pushed_size(&reg, "krm-fn-runner:test").await;
    let wrapper_size = pushed_size(&reg, "krm-fn-wrapper-server:test").await;
    eprintln!("pushed (compressed) sizes: runner {runner_size} B, wrapper {wrapper_size} B");

    // The init container: Porch's exact command, as the image's user.
    let tools = work.path().join("wrapper-server-tools");
    std::fs::create_dir(&tools).unwrap();
    let st = Command::new("chown")
        .args(["10001:10001"])
        .arg(&tools)
        .status()
        .unwrap();
    assert!(st.success(), "chown the emptyDir stand-in");
    let init = buildah.from(&wrapper_image);
    let out = buildah
        .run_in(
            &init,
            &[(&tools, "/wrapper-server-tools")],
            &[
                "cp",
                "-a",
                "/home/nonroot/wrapper-server/.",
                "/wrapper-server-tools",
            ],
        )
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "init container cp failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Porch v1.5.3's inline template (the config.yaml generation) copies
    // from /wrapper-server: the same files.
    let old_tools = work.path().join("wrapper-server-tools-v1.5");
    std::fs::create_dir(&old_tools).unwrap();
    let st = Command::new("chown")
        .args(["10001:10001"])
        .arg(&old_tools)
        .status()
        .unwrap();
    assert!(st.success(), "chown the second emptyDir stand-in");
    let out = buildah
        .run_in(
            &init,
            &[(&old_tools, "/wrapper-server-tools")],
            &["cp", "-a", "/wrapper-server/.", "/wrapper-server-tools"],
        )
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "the v1.5.3 layout's cp failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    for f in ["wrapper-server", "grpc-health-probe", "krm-fn-supervisor"] {
        assert!(old_tools.join(f).is_file(), "{f} under /wrapper-server");
        let meta = std::fs::metadata(tools.join(f)).unwrap_or_else(|e| panic!("{f}: {e}"));
        assert!(
            std::os::unix::fs::PermissionsExt::mode(&meta.permissions()) & 0o111 != 0,
            "{f} is executable"
        );
    }

    // A function image with no shell and no libc: a static catalog function.
    let fn_ctx = work.path().join("fn");
    std::fs::create_dir(&fn_ctx).unwrap();
    std::fs::copy(
        catalog_dir().join("bin/set-namespace"),
        fn_ctx.join("function"),
    )
    .unwrap();
    std::fs::write(
        fn_ctx.join("Containerfile"),
        "FROM scratch\nCOPY function /usr/local/bin/function\nENTRYPOINT [\"/usr/local/bin/function\"]\n",
    )
    .unwrap();
    let fn_image = "localhost/set-namespace:test";
    buildah.run(&[
        "bud",
        "--isolation",
        "chroot",
        "--quiet",
        "-t",
        fn_image,
        fn_ctx.to_str().unwrap(),
    ]);

    // The function container: Porch's command and arguments.
    let function = buildah.from(fn_image);
    let port = free_port();
    let port_arg = port.to_string();
    let mut wrapper = Running::start(
        buildah.run_in(
            &function,
            &[(&tools, "/wrapper-server-tools")],
            &[
                "/wrapper-server-tools/wrapper-server",
                "--port",
                &port_arg,
                "--max-request-body-size",
                "6291456",
                "--",
                "/usr/local/bin/function",
            ],
        ),
        "the wrapper server in the function image",
    );
    wrapper.assert_supervised();
    let addr = format!("localhost:{port}");
    let probe = |container: &str, path: &str, addr: &str| {
        buildah
            .run_in(
                container,
                &[(&tools, "/wrapper-server-tools")],
                &[path, "-addr", addr],
            )
            .output()
            .unwrap()
    };
    let out = probe(&function, "/wrapper-server-tools/grpc-health-probe", &addr);
    assert_eq!(
        out.status.code(),
        Some(0),
        "readiness probe: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let image = format!(
        "ghcr.io/kptdev/krm-functions-catalog/set-namespace:{}",
        catalog_version("set-namespace")
    );
    let result = set_namespace(port, &image, "from-the-wrapper")
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", wrapper.log.lock().unwrap()));
    assert!(result.contains("namespace: from-the-wrapper"), "{result}");
    wrapper.stop();
    let out = probe(&function, "/wrapper-server-tools/grpc-health-probe", &addr);
    assert_eq!(out.status.code(), Some(2), "no server: connection failure");

    // The runner image with the config.yaml generation's flags, exec runtime only.
    let runner = buildah.from(&runner_image);
    let port = free_port();
    let port_arg = format!("--port={port}");
    let server = Running::start(
        buildah.run_in(
            &runner,
            &[],
            &[
                "/home/nonroot/server",
                "--config=/home/nonroot/config.yaml",
                "--functions=/home/nonroot/functions",
                "--max-request-body-size=6291456",
                "--disable-runtimes=pod",
                &port_arg,
            ],
        ),
        "the runner image",
    );
    server.assert_supervised();
    let out = probe(
        &runner,
        "/home/nonroot/grpc-health-probe",
        &format!("localhost:{port}"),
    );
    assert_eq!(
        out.status.code(),
        Some(0),
        "runner readiness probe: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let result = set_namespace(port, &image, "from-the-runner")
        .await
        .unwrap();
    assert!(result.contains("namespace: from-the-runner"), "{result}");

    // FunctionConfig layout: binaryExecutor.path resolves under
    // /home/nonroot/functions for every catalog function this image carries,
    // of those Porch's FunctionConfigs name (KRM_FN_PORCH_DEPLOY; skipped
    // without it).
    let root = PathBuf::from(buildah.run(&["mount", &runner]));
    let functions = root.join("home/nonroot/functions");
    if let Some(porch) = common::porch_deploy() {
        let configs =
            std::fs::read_to_string(porch.join("head/23-function-configurations.yaml")).unwrap();
        let mut paths: Vec<&str> = configs
            .split("binaryExecutor:")
            .skip(1)
            .filter_map(|s| s.lines().find_map(|l| l.trim().strip_prefix("path: ")))
            .collect();
        paths.sort();
        let shipped: Vec<String> = std::fs::read_dir(catalog_dir().join("bin"))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        let (present, absent): (Vec<&str>, Vec<&str>) =
            paths.iter().partition(|p| functions.join(p).is_file());
        for p in &absent {
            assert!(
                !shipped.iter().any(|s| s == p),
                "{p} is built but missing from the image"
            );
        }
        assert!(
            ["apply-setters", "set-namespace", "starlark"]
                .iter()
                .all(|p| present.contains(p)),
            "binaryExecutor paths in the image: {present:?}"
        );
        eprintln!("binaryExecutor paths in the image: {present:?}; not built here: {absent:?}");
    }
    buildah.run(&["umount", &runner]);
    buildah.run(&["rm", "--all"]);
}
