//! The function sandbox against a hostile function
//! (`tests/sandbox_support/hostile.py`), run by the real `serve`, `eval`,
//! `render` and `wrapper-server` processes: each attack is its own call,
//! refused with every layer on while the call itself succeeds (the
//! function reports the refusal and exits 0) and nothing of the runner or
//! its resident supervisor changes; and each attack succeeds once the one
//! layer that refuses it is turned off (a `config.yaml` entry's
//! `sandbox.allow` for `serve`, `--sandbox-allow` for `eval`, `render` and
//! `wrapper-server`), which shows that layer is what refuses it. A kernel
//! without Landlock or seccomp (simulated by a filter on the server) is one
//! warning per missing layer at start.
//!
//! The secrets sit where a Porch deployment mounts them: the
//! service-account token under `/var/run/secrets/kubernetes.io/` and the
//! registry credentials at `--registry-auth-secret-path`'s default.

use krm_fn_testbed::common;

use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use common::{Runner, wait_until};
use krm_fn_runner::adapters::grpc::pb::EvaluateFunctionRequest;

/// Each attack and the layer that refuses it.
const CASES: &[(&str, &str)] = &[
    ("token", "filesystem"),
    ("registry-auth", "filesystem"),
    ("environ", "filesystem"),
    ("mem", "filesystem"),
    ("write", "filesystem"),
    ("signal", "filesystem"),
    ("connect-api", "network"),
    ("connect-loopback", "network"),
    ("renice", "syscalls"),
    ("prlimit", "syscalls"),
    ("chrt", "syscalls"),
    ("ptrace", "syscalls"),
    ("new-privileges", "new-privileges"),
];

/// The service-account token's path in a pod.
const TOKEN: &str = "/var/run/secrets/kubernetes.io/serviceaccount/token";
/// `--registry-auth-secret-path`'s default.
const REGISTRY_AUTH: &str = "/var/tmp/config-secret/.dockerconfigjson";

/// The secret files, made where a deployment mounts them unless already
/// there; what was made is removed when dropped. One test holds them at a
/// time (another would remove them under it).
struct Secrets {
    made: Vec<PathBuf>,
    _one_at_a_time: std::sync::MutexGuard<'static, ()>,
}

impl Secrets {
    fn place() -> Secrets {
        static HELD: std::sync::Mutex<()> = std::sync::Mutex::new(());
        let held = HELD.lock().unwrap_or_else(|e| e.into_inner());
        let mut made = Vec::new();
        for (path, text) in [
            (TOKEN, "eyJhbGciOiJSUzI1NiJ9.service-account-token"),
            (
                REGISTRY_AUTH,
                "{\"auths\":{\"registry.example\":{\"auth\":\"c2VjcmV0\"}}}",
            ),
        ] {
            let path = Path::new(path);
            if path.exists() {
                continue;
            }
            // The topmost directory made, to remove the whole branch.
            let mut top = path.parent().unwrap().to_path_buf();
            while !top.parent().unwrap().exists() {
                top = top.parent().unwrap().to_path_buf();
            }
            let dir_existed = path.parent().unwrap().exists();
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, text).unwrap();
            made.push(if dir_existed { path.to_path_buf() } else { top });
        }
        Secrets {
            made,
            _one_at_a_time: held,
        }
    }
}

impl Drop for Secrets {
    fn drop(&mut self) {
        for p in &self.made {
            let _ = std::fs::remove_dir_all(p).or_else(|_| std::fs::remove_file(p));
        }
    }
}

/// Listeners standing for the API server (the machine's own non-loopback
/// address when it has one) and for a loopback service.
struct Listeners {
    api: TcpListener,
    loopback: TcpListener,
}

impl Listeners {
    fn open() -> Listeners {
        // The address a packet out would leave from (nothing is sent).
        let own = std::net::UdpSocket::bind("0.0.0.0:0")
            .and_then(|s| s.connect("192.0.2.1:9").map(|()| s))
            .and_then(|s| s.local_addr())
            .map(|a| a.ip())
            .ok()
            .filter(|ip| !ip.is_loopback() && !ip.is_unspecified())
            .unwrap_or_else(|| "127.0.0.2".parse().unwrap());
        Listeners {
            api: TcpListener::bind(SocketAddr::new(own, 0)).unwrap(),
            loopback: TcpListener::bind("127.0.0.1:0").unwrap(),
        }
    }
}

/// A functions directory with the hostile function and a `config.yaml`:
/// `example.com/hostile:v1` with every layer, and
/// `example.com/hostile-LAYER:v1` with `sandbox: {allow: [LAYER]}`.
fn functions(dir: &Path) -> (PathBuf, PathBuf) {
    let fns = dir.join("fns");
    std::fs::create_dir_all(&fns).unwrap();
    let hostile = common::script(
        &fns,
        "hostile",
        include_str!("../sandbox_support/hostile.py"),
    );
    let mut config = format!(
        "functions:\n- function: {}\n  images: [example.com/hostile:v1]\n",
        hostile.display()
    );
    for layer in ["new-privileges", "filesystem", "syscalls", "network"] {
        config.push_str(&format!(
            "- function: {}\n  images: [example.com/hostile-{layer}:v1]\n  sandbox: {{allow: [{layer}]}}\n",
            hostile.display()
        ));
    }
    let path = dir.join("config.yaml");
    std::fs::write(&path, config).unwrap();
    (hostile, path)
}

/// Writes the hostile function's targets next to it (atomically).
fn write_victims(function: &Path, runner: u32, supervisor: u32, listeners: &Listeners) {
    let text = format!(
        "runner={runner} supervisor={supervisor} api={} loopback={} secrets={TOKEN},{REGISTRY_AUTH}\n",
        listeners.api.local_addr().unwrap(),
        listeners.loopback.local_addr().unwrap(),
    );
    let dir = function.parent().unwrap();
    std::fs::write(dir.join("victims.new"), text).unwrap();
    std::fs::rename(dir.join("victims.new"), dir.join("victims")).unwrap();
}

/// The resident supervisor of the runner `runner`, once it runs.
fn resident_of(runner: u32) -> u32 {
    let find = || {
        std::fs::read_dir("/proc").ok()?.flatten().find_map(|e| {
            let pid = e.file_name().to_str()?.parse::<u32>().ok()?;
            let cmdline = std::fs::read(e.path().join("cmdline")).ok()?;
            let argv: Vec<&[u8]> = cmdline.split(|&b| b == 0).collect();
            (argv.len() >= 3
                && argv[0].ends_with(b"/krm-fn-supervisor")
                && argv[1] == b"--resident"
                && argv[2] == runner.to_string().as_bytes())
            .then_some(pid)
        })
    };
    let mut found = None;
    assert!(
        wait_until(Duration::from_secs(20), || {
            found = find();
            found.is_some()
        }),
        "no resident supervisor of {runner}"
    );
    found.unwrap()
}

/// A ResourceList whose functionConfig names the attack.
fn input(attempt: &str) -> Vec<u8> {
    format!(
        "apiVersion: config.kubernetes.io/v1\nkind: ResourceList\nitems:\n- apiVersion: v1\n  kind: ConfigMap\n  metadata:\n    name: app\n  data:\n    v: \"1\"\nfunctionConfig:\n  apiVersion: v1\n  kind: ConfigMap\n  metadata:\n    name: fn\n  data:\n    attempt: {attempt}\n"
    )
    .into_bytes()
}

/// The `result` of the `outcome` ConfigMap in a ResourceList's YAML.
fn outcome(resource_list: &[u8]) -> String {
    let rl: serde_json::Value = krm_fn_runner::domain::codec::from_yaml_slice(resource_list)
        .unwrap_or_else(|e| {
            panic!("{e}: {}", String::from_utf8_lossy(resource_list));
        });
    rl["items"]
        .as_array()
        .and_then(|items| items.iter().find(|i| i["metadata"]["name"] == "outcome"))
        .and_then(|i| i["data"]["result"].as_str())
        .unwrap_or_else(|| panic!("no outcome in {}", String::from_utf8_lossy(resource_list)))
        .to_string()
}

/// A process's nice value, scheduling policy and open-file limits.
fn state(pid: u32) -> (String, String, String) {
    let fields = common::stat_fields(pid).unwrap();
    let limits = std::fs::read_to_string(format!("/proc/{pid}/limits")).unwrap();
    let nofile = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .unwrap()
        .to_string();
    (fields[16].clone(), fields[38].clone(), nofile)
}

/// Checks one result: refused with every layer on, done with its layer off.
fn check(way: &str, attempt: &str, relaxed: Option<&str>, result: &str) {
    match relaxed {
        None => assert!(
            result.starts_with("refused "),
            "{way}: {attempt} was not refused: {result}"
        ),
        Some(layer) => assert!(
            result.starts_with("done "),
            "{way}: {attempt} with {layer} allowed: {result}"
        ),
    }
    eprintln!(
        "{way:>8} | {attempt:<16} | {:<15} | {result}",
        relaxed.map_or("every layer".to_string(), |l| format!("{l} allowed"))
    );
}

async fn call(runner: &Runner, image: &str, attempt: &str) -> String {
    let mut client = runner.client().await;
    let reply = client
        .evaluate_function(EvaluateFunctionRequest {
            tag: String::new(),
            resource_list: input(attempt).into(),
            image: image.to_string(),
        })
        .await
        .unwrap_or_else(|e| panic!("{image} {attempt}: the call failed: {e}\n{}", runner.log()))
        .into_inner();
    outcome(&reply.resource_list)
}

/// Every attack on `runner` (the server `way`) is refused, the call
/// succeeding, and neither the runner nor its resident supervisor changes,
/// nor is a file written next to the function.
async fn refuses_every_attack(way: &str, runner: &Runner, hostile: &Path, listeners: &Listeners) {
    let supervisor = resident_of(runner.pid());
    write_victims(hostile, runner.pid(), supervisor, listeners);
    let before = (state(runner.pid()), state(supervisor));
    for (attempt, _) in CASES {
        let result = call(runner, "example.com/hostile:v1", attempt).await;
        check(way, attempt, None, &result);
    }
    assert_eq!(
        (state(runner.pid()), state(supervisor)),
        before,
        "{way}: the runner or its supervisor changed"
    );
    assert!(
        !hostile.with_file_name("written-by-the-function").exists(),
        "{way}: a file was written outside the scratch directory"
    );
}

/// `serve`: every attack refused, the runner and its resident supervisor
/// unchanged; each attack done with its layer allowed in the function's
/// `config.yaml` entry.
#[tokio::test(flavor = "multi_thread")]
async fn serve_refuses_every_attack_and_each_layer_is_what_refuses_it() {
    let _secrets = Secrets::place();
    let listeners = Listeners::open();
    let dir = tempfile::tempdir().unwrap();
    let (hostile, config) = functions(dir.path());
    let runner = Runner::start(&[
        &format!("--config={}", config.display()),
        "--disable-runtimes=pod",
    ]);
    refuses_every_attack("serve", &runner, &hostile, &listeners).await;
    for (attempt, layer) in CASES {
        let image = format!("example.com/hostile-{layer}:v1");
        let result = call(&runner, &image, attempt).await;
        check("serve", attempt, Some(layer), &result);
    }
}

/// `wrapper-server` (inside a function pod): the same attacks refused.
#[tokio::test(flavor = "multi_thread")]
async fn the_wrapper_server_refuses_every_attack() {
    let _secrets = Secrets::place();
    let listeners = Listeners::open();
    let dir = tempfile::tempdir().unwrap();
    let (hostile, _) = functions(dir.path());
    let runner = Runner::start_wrapper(&["--", hostile.to_str().unwrap()]);
    refuses_every_attack("wrapper", &runner, &hostile, &listeners).await;
    let relaxed = Runner::start_wrapper(&[
        "--sandbox-allow=filesystem",
        "--",
        hostile.to_str().unwrap(),
    ]);
    write_victims(
        &hostile,
        relaxed.pid(),
        resident_of(relaxed.pid()),
        &listeners,
    );
    let result = call(&relaxed, "example.com/hostile:v1", "token").await;
    check("wrapper", "token", Some("filesystem"), &result);
}

/// Runs `krm-fn-runner ARGS` (`eval` or `render`) with `stdin`, writing
/// the hostile function's targets once the process and its resident
/// supervisor run; returns its stdout.
fn run_cli(args: &[String], stdin: &[u8], hostile: &Path, listeners: &Listeners) -> Vec<u8> {
    use std::io::Write;
    let _ = std::fs::remove_file(hostile.with_file_name("victims"));
    let mut child = Command::new(common::runner_binary())
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(stdin).unwrap();
    let pid = child.id();
    write_victims(hostile, pid, resident_of(pid), listeners);
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

/// `eval` and `render` (an `exec:` step): every attack refused; each done
/// with `--sandbox-allow` naming its layer.
#[test]
fn eval_and_render_refuse_every_attack_and_each_layer_is_what_refuses_it() {
    let _secrets = Secrets::place();
    let listeners = Listeners::open();
    let dir = tempfile::tempdir().unwrap();
    let (hostile, config) = functions(dir.path());
    for (attempt, layer) in CASES {
        for relaxed in [None, Some(*layer)] {
            let allow = relaxed
                .map(|l| vec![format!("--sandbox-allow={l}")])
                .unwrap_or_default();
            let mut eval = vec![
                "eval".to_string(),
                "--image=example.com/hostile:v1".into(),
                format!("--config={}", config.display()),
            ];
            eval.extend(allow.clone());
            let out = run_cli(&eval, &input(attempt), &hostile, &listeners);
            check("eval", attempt, relaxed, &outcome(&out));

            let pkg = dir.path().join(format!("pkg-{attempt}"));
            std::fs::create_dir_all(&pkg).unwrap();
            std::fs::write(
                pkg.join("Kptfile"),
                format!(
                    "apiVersion: kpt.dev/v1\nkind: Kptfile\nmetadata:\n  name: pkg\npipeline:\n  mutators:\n  - exec: {}\n    configMap:\n      attempt: {attempt}\n",
                    hostile.display()
                ),
            )
            .unwrap();
            std::fs::write(
                pkg.join("app.yaml"),
                "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: app\ndata:\n  v: \"1\"\n",
            )
            .unwrap();
            let mut render = vec![
                "render".to_string(),
                pkg.display().to_string(),
                "--allow-exec".into(),
                "--output=stdout".into(),
            ];
            render.extend(allow);
            let out = run_cli(&render, b"", &hostile, &listeners);
            check("render", attempt, relaxed, &outcome(&out));
        }
    }
}

/// A kernel without Landlock and seccomp filters (the server started under
/// a filter answering `ENOSYS` to both): one warning each at start, not
/// one per call, and functions still run, unconfined by those layers (the
/// token is read).
#[tokio::test(flavor = "multi_thread")]
async fn a_kernel_without_a_layer_is_one_warning_at_start() {
    use seccompiler::{SeccompAction, SeccompFilter};
    use std::os::unix::process::CommandExt;
    let _secrets = Secrets::place();
    let listeners = Listeners::open();
    let dir = tempfile::tempdir().unwrap();
    let (hostile, config) = functions(dir.path());
    let missing = [
        libc::SYS_landlock_create_ruleset,
        libc::SYS_landlock_add_rule,
        libc::SYS_landlock_restrict_self,
        libc::SYS_seccomp,
    ];
    let filter: seccompiler::BpfProgram = SeccompFilter::new(
        missing.iter().map(|&nr| (nr, vec![])).collect(),
        SeccompAction::Allow,
        SeccompAction::Errno(libc::ENOSYS as u32),
        std::env::consts::ARCH.try_into().unwrap(),
    )
    .unwrap()
    .try_into()
    .unwrap();
    let mut cmd = Command::new(common::runner_binary());
    cmd.arg("serve");
    // SAFETY: `apply_filter` makes two system calls on a prepared program.
    unsafe {
        cmd.pre_exec(move || seccompiler::apply_filter(&filter).map_err(std::io::Error::other));
    }
    let runner = Runner::start_command(
        cmd,
        &[
            &format!("--config={}", config.display()),
            "--disable-runtimes=pod",
        ],
    );
    write_victims(
        &hostile,
        runner.pid(),
        resident_of(runner.pid()),
        &listeners,
    );
    for _ in 0..3 {
        let result = call(&runner, "example.com/hostile:v1", "token").await;
        assert!(result.starts_with("done "), "{result}");
    }
    let log = runner.log();
    for warning in [
        "this kernel has no Landlock",
        "this kernel has no seccomp filters",
    ] {
        assert_eq!(log.matches(warning).count(), 1, "{warning}:\n{log}");
    }
}

/// A function that fails reading a file outside what the sandbox lets it
/// read: `serve`'s gRPC message and `eval`'s stderr end with the line
/// naming the layers that were on and what relaxes each; the entry's
/// `sandbox.read` of that file's directory makes it pass, the filesystem
/// layer still on; with every layer off the message says nothing of the
/// sandbox.
#[tokio::test]
async fn a_failure_names_the_layers_that_were_on_and_a_read_grant_relaxes_one() {
    let dir = tempfile::tempdir().unwrap();
    let fns = dir.path().join("fns");
    std::fs::create_dir_all(&fns).unwrap();
    let data = dir.path().join("data");
    std::fs::create_dir_all(&data).unwrap();
    std::fs::write(data.join("table.csv"), "a,b\n").unwrap();
    let reader = common::script(
        &fns,
        "reader",
        &format!(
            "#!/bin/sh\nset -e\ncat {}/table.csv >/dev/null\ncat\n",
            data.display()
        ),
    );
    let config = dir.path().join("config.yaml");
    std::fs::write(
        &config,
        format!(
            "functions:\n\
             - function: {r}\n  images: [example.com/reader:v1]\n\
             - function: {r}\n  images: [example.com/reader-granted:v1]\n  sandbox: {{read: [{d}]}}\n\
             - function: {r}\n  images: [example.com/reader-unconfined:v1]\n  sandbox: {{allow: [new-privileges, filesystem, syscalls, network]}}\n",
            r = reader.display(),
            d = data.display()
        ),
    )
    .unwrap();
    let landlock = krm_fn_runner::adapters::exec::sandbox::support()
        .landlock_abi
        .is_some();
    let runner = Runner::start(&[
        &format!("--config={}", config.display()),
        "--disable-runtimes=pod",
    ]);
    let mut client = runner.client().await;
    let ask = |image: &str| EvaluateFunctionRequest {
        tag: String::new(),
        resource_list: input("none").into(),
        image: image.to_string(),
    };
    let hint = "the function ran in the sandbox, with these layers on: ";
    if landlock {
        let status = client
            .evaluate_function(ask("example.com/reader:v1"))
            .await
            .unwrap_err();
        let message = status.message();
        assert!(message.contains("Permission denied"), "{message}");
        assert!(message.contains(hint), "{message}");
        for part in [
            "filesystem (Landlock: read the system libraries and its program's directory only",
            "--sandbox-read PATH",
            "--sandbox-allow network",
        ] {
            assert!(message.contains(part), "{part}: {message}");
        }
        client
            .evaluate_function(ask("example.com/reader-granted:v1"))
            .await
            .unwrap_or_else(|e| panic!("the read grant: {e}"));

        let rl = dir.path().join("rl.yaml");
        std::fs::write(&rl, input("none")).unwrap();
        let out = Command::new(common::runner_binary())
            .args(["eval", "--image=example.com/reader:v1"])
            .arg(format!("--config={}", config.display()))
            .stdin(std::fs::File::open(&rl).unwrap())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success());
        assert!(stderr.contains(hint), "{stderr}");
    }
    // Unconfined: the read is done, the function fails on its input
    // (nothing of the sandbox in the message).
    std::fs::remove_file(data.join("table.csv")).unwrap();
    let status = client
        .evaluate_function(ask("example.com/reader-unconfined:v1"))
        .await
        .unwrap_err();
    assert!(!status.message().contains(hint), "{}", status.message());
}
