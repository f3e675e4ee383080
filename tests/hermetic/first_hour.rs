//! A new user's first hour: the mistakes people make while following the
//! README and the book, each answered by the real binaries with a message that names the
//! problem and the next step, printed once, with the documented exit code —
//! and nothing of theirs destroyed.

use krm_fn_testbed::common;

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::{Runner, config_map_rl, free_port, script};
use krm_fn_runner::adapters::grpc::pb::EvaluateFunctionRequest;
use tonic::Code;

const RUNNER: &str = env!("CARGO_BIN_EXE_krm-fn-runner");
const WRAPPER: &str = env!("CARGO_BIN_EXE_wrapper-server");

/// Runs `bin args` in `cwd` with stdin from `input`; the environment as
/// given plus `env`, without a Kubernetes configuration.
fn run_in(cwd: &Path, bin: &str, args: &[&str], env: &[(&str, &str)], input: &[u8]) -> Output {
    let mut child = Command::new(bin)
        .args(args)
        .current_dir(cwd)
        .env_remove("RUST_LOG")
        .env_remove("WRAPPER_SERVER_IMAGE")
        .env_remove("KUBERNETES_SERVICE_HOST")
        .env("KUBECONFIG", cwd.join("no-such-kubeconfig"))
        .env("HOME", cwd)
        .envs(env.iter().copied())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let _ = stdin.write_all(input);
    drop(stdin);
    // A command that should have stopped (a server that started although
    // it must not) is killed after a while, and the test then fails on its
    // exit status.
    let pid = child.id();
    let (done, waited) = std::sync::mpsc::channel::<()>();
    std::thread::spawn(move || {
        if waited.recv_timeout(Duration::from_secs(30)).is_err() {
            let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
        }
    });
    let out = child.wait_with_output().unwrap();
    let _ = done.send(());
    out
}

fn run(cwd: &Path, args: &[&str]) -> Output {
    run_in(cwd, RUNNER, args, &[], b"")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Exit code 1, one `Error:` line (first line of the error) and no
/// "unexpected error".
fn assert_user_error(o: &Output, what: &str) -> String {
    let err = stderr(o);
    assert_eq!(o.status.code(), Some(1), "{what}: {err}");
    assert!(!err.contains("unexpected error"), "{what}: {err}");
    assert_eq!(err.matches("Error: ").count(), 1, "{what}: {err}");
    err
}

fn example(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("examples")
        .join(name)
}

fn copy_dir(from: &Path, to: &Path) {
    let status = Command::new("cp")
        .arg("-a")
        .arg(from)
        .arg(to)
        .status()
        .unwrap();
    assert!(status.success());
}

/// `serve` and `wrapper-server` both refuse `listen` with `wanted` in the message.
fn both_servers_refuse(cwd: &Path, config: &str, listen: &str, wanted: &str) {
    for (bin, args) in [
        (
            RUNNER,
            vec!["serve", "--disable-runtimes=pod", config, listen],
        ),
        (WRAPPER, vec![listen, "--", "cat"]),
    ] {
        let o = run_in(cwd, bin, &args, &[], b"");
        let err = assert_user_error(&o, bin);
        assert!(err.contains(wanted), "{bin}: {err}");
    }
}

#[test]
fn a_unix_socket_path_never_replaces_a_file_or_a_live_socket() {
    let dir = tempfile::tempdir().unwrap();
    let cwd = dir.path();
    let config = cwd.join("config.yaml");
    std::fs::write(&config, "functions: []\n").unwrap();
    let config = format!("--config={}", config.display());
    // A file with text in it, named by mistake: both servers refuse and keep it.
    let notes = cwd.join("notes.txt");
    std::fs::write(&notes, "precious").unwrap();
    let listen = format!("--listen=unix:{}", notes.display());
    let wanted = format!(
        "Error: cannot listen on unix:{}: {} exists and is not a socket; it was left untouched",
        notes.display(),
        notes.display()
    );
    both_servers_refuse(cwd, &config, &listen, &wanted);
    assert_eq!(std::fs::read_to_string(&notes).unwrap(), "precious");

    // A live socket: the second server refuses, the first keeps serving.
    let sock = cwd.join("runner.sock");
    let listen = format!("--listen=unix:{}", sock.display());
    let first = Runner::start(&["--disable-runtimes=pod", &config, &listen]);
    let wanted = format!(
        "another process is listening on {}; stop it or choose another socket path",
        sock.display()
    );
    both_servers_refuse(cwd, &config, &listen, &wanted);
    assert!(sock.exists(), "the live socket was removed");
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let mut health = tonic_health::pb::health_client::HealthClient::new(first.channel().await);
        health
            .check(tonic_health::pb::HealthCheckRequest::default())
            .await
            .expect("the first server still answers");
    });

    // A dead socket left by a killed server is replaced.
    drop(first); // SIGKILL: the socket file stays, nobody accepts
    assert!(sock.exists());
    let second = Runner::start(&["--disable-runtimes=pod", &config, &listen]);
    assert!(
        second.log().contains("replacing a dead socket"),
        "{}",
        second.log()
    );
}

#[test]
fn a_port_in_use_is_named_plainly() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("config.yaml"), "functions: []\n").unwrap();
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let o = run(
        dir.path(),
        &[
            "serve",
            "--disable-runtimes=pod",
            "--config=config.yaml",
            "--listen",
            &addr,
        ],
    );
    let err = assert_user_error(&o, "serve");
    assert!(
        err.contains(&format!("Error: cannot listen on {addr}: ")),
        "{err}"
    );
    assert!(err.contains("another process is using the port"), "{err}");
    assert!(!err.contains("Tcp("), "{err}");
}

#[test]
fn serve_without_a_cluster_says_how_to_run_exec_only() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("config.yaml"), "functions: []\n").unwrap();
    // As the README's first serve command would be typed without the flag.
    let o = run(
        dir.path(),
        &[
            "serve",
            "--config",
            "config.yaml",
            "--functions",
            "./functions",
        ],
    );
    let err = assert_user_error(&o, "no WRAPPER_SERVER_IMAGE");
    assert!(
        err.contains("environment variable WRAPPER_SERVER_IMAGE must be set to use pod function evaluator runtime"),
        "{err}"
    );
    assert!(err.contains("add --disable-runtimes=pod"), "{err}");
    // With the image set, no cluster configuration either.
    let o = run_in(
        dir.path(),
        RUNNER,
        &["serve", "--config", "config.yaml"],
        &[("WRAPPER_SERVER_IMAGE", "example.com/wrapper:1")],
        b"",
    );
    let err = assert_user_error(&o, "no kubeconfig");
    assert!(err.contains("no usable Kubernetes configuration"), "{err}");
    assert!(err.contains("add --disable-runtimes=pod"), "{err}");
}

#[test]
fn exec_config_typos_are_warned_with_file_line_and_valid_keys() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("config.yaml"),
        "funtions:\n- function: set-namespace\n  images: [set-namespace:v0.4.5]\n",
    )
    .unwrap();
    let want = "config.yaml: line 1 column 1: unknown key \"funtions\" (did you mean \"functions\"?); \
                valid keys: functions; the key is ignored (Porch ignores unknown keys too)";
    // serve logs it at start-up, and still starts (as Porch would).
    let abs = dir.path().join("config.yaml");
    let runner = Runner::start(&["--disable-runtimes=pod", "--config", abs.to_str().unwrap()]);
    assert!(
        runner.log().contains(&format!(
            "{}: line 1 column 1: unknown key \"funtions\"",
            abs.display()
        )),
        "{}",
        runner.log()
    );
    // eval and render print it too.
    let rl = std::fs::read(example("resourcelists/hello-namespace.yaml")).unwrap();
    let o = run_in(
        dir.path(),
        RUNNER,
        &[
            "eval",
            "--image",
            "set-namespace:v0.4.5",
            "--config",
            "config.yaml",
        ],
        &[],
        &rl,
    );
    assert!(stderr(&o).contains(want), "{}", stderr(&o));
    copy_dir(&example("packages/hello"), dir.path());
    let o = run(
        dir.path(),
        &[
            "render",
            "hello",
            "-o",
            "stdout",
            "--exec-config",
            "config.yaml",
        ],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stderr(&o).contains(want), "{}", stderr(&o));
}

#[test]
fn simulator_policy_typos_are_errors_with_line_and_valid_keys() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("day.csv"), "0,example.com/fn:v1,1\n").unwrap();
    std::fs::write(
        dir.path().join("p.yaml"),
        "podTTL: 4h\npodCacheConfig:\n- name: example.com/fn:v1\n  image: example.com/fn:v2\n",
    )
    .unwrap();
    let o = run(
        dir.path(),
        &["simulate", "--trace", "day.csv", "--policy", "p.yaml"],
    );
    let err = assert_user_error(&o, "simulate");
    assert!(
        err.contains(
            "Error: policy p.yaml: line 4 column 3: unknown key \"image\" in podCacheConfig[0]; valid keys: \
             name, timeToLive, maxWaitlistLength, maxParallelPodsPerFunction, resources, maxLoadPerPod"
        ),
        "{err}"
    );
}

#[test]
fn config_file_errors_are_printed_once() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("bad.yaml"), "functions: {oops\n").unwrap();
    let o = run(
        dir.path(),
        &["serve", "--disable-runtimes=pod", "--config", "bad.yaml"],
    );
    let err = assert_user_error(&o, "unparsable config");
    assert_eq!(
        err.matches("failed to parse configuration file \"bad.yaml\"")
            .count(),
        1,
        "{err}"
    );
    assert!(err.matches("functions: {oops").count() <= 1, "{err}");
    let o = run(
        dir.path(),
        &[
            "serve",
            "--disable-runtimes=pod",
            "--config",
            "missing.yaml",
        ],
    );
    let err = assert_user_error(&o, "missing config");
    assert!(
        err.contains("failed to read configuration file \"missing.yaml\""),
        "{err}"
    );
    assert_eq!(err.matches("No such file or directory").count(), 1, "{err}");
}

#[test]
fn exit_codes_are_the_documented_ones() {
    let dir = tempfile::tempdir().unwrap();
    let cwd = dir.path();
    // 2: usage errors, for every command.
    for args in [
        vec!["serve", "--no-such-flag"],
        vec!["serve", "--listen", "nonsense"],
        vec!["serve", "--exec-env", "=x"],
        vec!["eval", "--image", "x"],
        vec!["render", "--output"],
        vec!["simulate", "--trace", "t.csv"],
        vec!["no-such-command"],
    ] {
        let o = run(cwd, &args);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", stderr(&o));
    }
    let o = run_in(cwd, WRAPPER, &["--port", "x"], &[], b"");
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    // 0: success.
    copy_dir(&example("packages/hello"), cwd);
    assert_eq!(
        run(cwd, &["render", "hello", "-o", "stdout"]).status.code(),
        Some(0)
    );
    // 1: failed runs.
    std::fs::write(cwd.join("config.yaml"), "functions: []\n").unwrap();
    let rl = std::fs::read(example("resourcelists/hello-namespace.yaml")).unwrap();
    let o = run_in(
        cwd,
        RUNNER,
        &["eval", "--image", "nothing:v1", "--config", "config.yaml"],
        &[],
        &rl,
    );
    let err = assert_user_error(&o, "eval not found");
    assert!(
        err.contains("function \"nothing:v1\" not found: map it to a binary in the --config file"),
        "{err}"
    );
    let o = run(
        cwd,
        &["simulate", "--trace", "none.csv", "--policy", "p.yaml"],
    );
    assert_user_error(&o, "simulate without a trace");
}

#[test]
fn eval_on_a_terminal_says_what_it_waits_for() {
    let pty = nix::pty::openpty(None, None).unwrap();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("config.yaml"), "functions: []\n").unwrap();
    let mut child = Command::new(RUNNER)
        .args(["eval", "--image", "x", "--config", "config.yaml"])
        .current_dir(dir.path())
        .stdin(Stdio::from(std::fs::File::from(pty.slave)))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut err = child.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        let mut text = String::new();
        while let Ok(n) = err.read(&mut buf) {
            if n == 0 {
                break;
            }
            text.push_str(&String::from_utf8_lossy(&buf[..n]));
            let _ = tx.send(text.clone());
        }
    });
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut seen = String::new();
    while !seen.contains("eval reads a ResourceList from stdin") && Instant::now() < deadline {
        if let Ok(t) = rx.recv_timeout(Duration::from_millis(100)) {
            seen = t;
        }
    }
    assert!(
        seen.contains("paste it and end with Ctrl-D, or redirect a file"),
        "no hint on a terminal: {seen:?}"
    );
    // It then takes what is typed, up to Ctrl-D.
    let mut master = std::fs::File::from(pty.master);
    master
        .write_all(b"kind: ResourceList\nitems: []\n\x04")
        .unwrap();
    let status = child.wait().unwrap();
    while let Ok(t) = rx.recv_timeout(Duration::from_millis(200)) {
        seen = t;
    }
    assert_eq!(status.code(), Some(1), "{seen}");
    assert!(seen.contains("function \"x\" not found"), "{seen}");
}

#[test]
fn local_eval_keeps_the_function_log_apart_and_refuses_what_the_server_refuses() {
    let dir = tempfile::tempdir().unwrap();
    let cwd = dir.path();
    let ran = cwd.join("ran");
    script(
        cwd,
        "fail",
        &format!(
            "#!/bin/sh\ntouch {}\ncat >/dev/null\nprintf 'apiVersion: config.kubernetes.io/v1\\nkind: ResourceList\\nitems: []\\nresults:\\n- message: replicas must be positive\\n  severity: error\\n'\nprintf 'function failure' >&2\nexit 3\n",
            ran.display()
        ),
    );
    std::fs::write(
        cwd.join("config.yaml"),
        format!(
            // The marker is written next to the script, outside the
            // scratch directory the sandbox lets a function write.
            "functions:\n- function: {}\n  images: [example.com/fail:v1]\n  sandbox: {{allow: [filesystem]}}\n",
            cwd.join("fail").display()
        ),
    )
    .unwrap();
    let args = [
        "eval",
        "--image",
        "example.com/fail:v1",
        "--config",
        "config.yaml",
    ];
    // Not a ResourceList: refused as the server refuses it, nothing runs.
    let o = run_in(
        cwd,
        RUNNER,
        &args,
        &[],
        b"apiVersion: v1\nkind: ConfigMap\n",
    );
    let err = assert_user_error(&o, "not a ResourceList");
    assert!(
        err.starts_with("Error: invalid request: resource_list: "),
        "{err}"
    );
    assert!(!ran.exists(), "the function ran on a ConfigMap");
    // A failing function: its stderr on its own line, then our message.
    let o = run_in(cwd, RUNNER, &args, &[], &config_map_rl("a"));
    let err = assert_user_error(&o, "failing function");
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines[0], "function failure", "{err}");
    assert_eq!(
        lines[1],
        "Error: function \"example.com/fail:v1\" failed: exit status 3 (its stderr is above)",
        "{err}"
    );
    assert!(err.contains("[error]: replicas must be positive"), "{err}");
    assert_eq!(err.matches("function failure").count(), 1, "{err}");
}

#[test]
fn render_mistakes_are_named() {
    let dir = tempfile::tempdir().unwrap();
    let cwd = dir.path();
    // A missing directory, and a file instead of a directory.
    let o = run(cwd, &["render", "no-such-package"]);
    let err = assert_user_error(&o, "missing package");
    assert!(
        err.contains("Error: package directory no-such-package does not exist"),
        "{err}"
    );
    assert!(!err.contains("No Kptfile"), "{err}");
    copy_dir(&example("packages/hello"), cwd);
    let o = run(cwd, &["render", "hello/Kptfile"]);
    assert!(assert_user_error(&o, "a file").contains("is not a directory"));
    // An unknown Kptfile field: the file and the line.
    let kptfile = cwd.join("hello/Kptfile");
    let text = std::fs::read_to_string(&kptfile).unwrap();
    let line = text.lines().position(|l| l.starts_with("info:")).unwrap() + 1;
    std::fs::write(&kptfile, text.replace("\ninfo:", "\ninfos:")).unwrap();
    let o = run(cwd, &["render", "hello"]);
    let err = assert_user_error(&o, "unknown field");
    assert!(
        err.contains(&format!(
            "Error: {}: yaml: unmarshal errors:\n  line {line}: field infos not found in type v1.KptFile",
            std::fs::canonicalize(&kptfile).unwrap().display()
        )),
        "{err}"
    );
    // A Kptfile that is not YAML: no .krmignore advice (it cannot be ignored).
    std::fs::write(
        &kptfile,
        "apiVersion: kpt.dev/v1\nkind: Kptfile\nmetadata: {name: [x\n",
    )
    .unwrap();
    let o = run(cwd, &["render", "hello"]);
    let err = assert_user_error(&o, "Kptfile syntax");
    assert!(err.contains("failed to parse \"Kptfile\""), "{err}");
    assert!(err.contains("fix the Kptfile"), "{err}");
    assert!(!err.contains(".krmignore"), "{err}");
}

#[test]
fn an_image_nothing_serves_names_the_next_step() {
    let dir = tempfile::tempdir().unwrap();
    let cwd = dir.path();
    copy_dir(&example("packages/hello"), cwd);
    let kptfile = cwd.join("hello/Kptfile");
    let text = std::fs::read_to_string(&kptfile).unwrap();
    std::fs::write(
        &kptfile,
        text.replace("set-namespace:v0.4.5", "set-namespace:v0.4.3"),
    )
    .unwrap();
    let o = run(cwd, &["render", "hello"]);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    for part in [
        "function \"ghcr.io/kptdev/krm-functions-catalog/set-namespace:v0.4.3\" not found: no builtin serves it",
        "the builtin set-namespace serves only tags v0.4, v0.4.1, v0.4.5",
        "--exec-config FILE --functions DIR",
        "--function-runner HOST:PORT",
    ] {
        assert!(err.contains(part), "{part:?} missing from:\n{err}");
    }
    // The served tags do render.
    std::fs::write(
        &kptfile,
        text.replace("set-namespace:v0.4.5", "set-namespace:v0.4.1"),
    )
    .unwrap();
    let o = run(cwd, &["render", "hello", "-o", "stdout"]);
    assert!(o.status.success(), "{}", stderr(&o));
}

#[test]
fn a_runner_that_is_down_is_named_by_its_address() {
    let dir = tempfile::tempdir().unwrap();
    let cwd = dir.path();
    let addr = format!("127.0.0.1:{}", free_port());
    let o = run_in(
        cwd,
        RUNNER,
        &[
            "eval",
            "--image",
            "set-namespace:v0.4.5",
            "--address",
            &addr,
        ],
        &[],
        &config_map_rl("a"),
    );
    let err = assert_user_error(&o, "eval to a dead runner");
    assert!(
        err.contains(&format!("the function runner at {addr} is unavailable")),
        "{err}"
    );
    assert!(err.contains("Connection refused"), "{err}");
    // render's steps through --function-runner too.
    copy_dir(&example("packages/hello"), cwd);
    let kptfile = cwd.join("hello/Kptfile");
    let text = std::fs::read_to_string(&kptfile).unwrap();
    std::fs::write(
        &kptfile,
        text.replace("set-namespace:v0.4.5", "list-setters:v0.1.0"),
    )
    .unwrap();
    let o = run(cwd, &["render", "hello", "--function-runner", &addr]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains(&format!("the function runner at {addr} is unavailable")),
        "{}",
        stderr(&o)
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_call_cut_at_the_end_of_shutdown_gets_a_clear_status() {
    let dir = tempfile::tempdir().unwrap();
    script(
        dir.path(),
        "sleepy",
        "#!/bin/sh\ncat >/dev/null\nsleep 300\n",
    );
    let config = dir.path().join("config.yaml");
    std::fs::write(
        &config,
        format!(
            "functions:\n- function: {}\n  images: [example.com/sleepy:v1]\n",
            dir.path().join("sleepy").display()
        ),
    )
    .unwrap();
    let mut runner = Runner::start(&[
        "--disable-runtimes=pod",
        "--config",
        config.to_str().unwrap(),
        "--shutdown-grace-period",
        "500ms",
    ]);
    let mut client = runner.client().await;
    let call = tokio::spawn(async move {
        client
            .evaluate_function(EvaluateFunctionRequest {
                tag: String::new(),
                resource_list: config_map_rl("a").into(),
                image: "example.com/sleepy:v1".into(),
            })
            .await
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    let status = tokio::task::block_in_place(|| runner.terminate(Duration::from_secs(10)));
    assert!(status.expect("the runner exits").success());
    let err = call.await.unwrap().expect_err("the call was stopped");
    assert_eq!(err.code(), Code::Unavailable, "{err:?}");
    assert!(
        err.message().contains(
            "the function runner shut down while function \"example.com/sleepy:v1\" was running"
        ) && err.message().contains("(500ms)")
            && err.message().contains("retry the call"),
        "{}",
        err.message()
    );
}

#[test]
fn render_to_a_directory_writes_krm_files_only() {
    let dir = tempfile::tempdir().unwrap();
    let cwd = dir.path();
    assert!(example("packages/hello/README.md").exists());
    let pkg = example("packages/hello");
    let o = run(cwd, &["render", pkg.to_str().unwrap(), "-o", "out"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let mut files: Vec<String> = std::fs::read_dir(cwd.join("out"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    files.sort();
    assert_eq!(files, ["Kptfile", "deployment.yaml", "service.yaml"]);
}
