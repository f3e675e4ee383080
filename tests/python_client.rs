//! A gRPC client not written here — Python's grpcio, with stubs generated
//! from `proto/evaluator.proto` — calls the runner over TCP and over a Unix
//! socket.

mod common;

use common::{Runner, catalog_dir, catalog_image, python_evaluator_client};

fn call(runner: &Runner) -> serde_json::Value {
    call_with(runner, &[])
}

fn call_with(runner: &Runner, extra: &[&str]) -> serde_json::Value {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("rl.yaml");
    std::fs::write(
        &input,
        "apiVersion: config.kubernetes.io/v1\nkind: ResourceList\nitems:\n- apiVersion: v1\n  kind: ConfigMap\n  metadata:\n    name: cm\nfunctionConfig:\n  apiVersion: v1\n  kind: ConfigMap\n  metadata:\n    name: fn\n  data:\n    namespace: from-python\n",
    )
    .unwrap();
    let image = catalog_image("set-namespace");
    let mut args = vec!["--image", image.as_str()];
    args.extend_from_slice(extra);
    python_evaluator_client(runner, &input, &args)
}

fn check(seen: serde_json::Value) {
    assert_eq!(seen["health"], "SERVING");
    assert!(
        seen["output"]
            .as_str()
            .unwrap()
            .contains("namespace: from-python"),
        "{seen}"
    );
    assert_eq!(seen["missing"]["code"], "NOT_FOUND");
    assert_eq!(
        seen["missing"]["details"],
        "function \"example.com/none:v0\" not found"
    );
}

fn config() -> String {
    let catalog = catalog_dir();
    format!("--config={}", catalog.join("config.yaml").display())
}

fn functions() -> String {
    format!("--functions={}", catalog_dir().join("bin").display())
}

#[test]
fn python_grpcio_client_over_tcp() {
    let runner = Runner::start(&[&config(), &functions(), "--disable-runtimes=pod"]);
    check(call(&runner));
}

#[test]
fn python_grpcio_client_over_a_unix_socket() {
    let dir = tempfile::tempdir().unwrap();
    let listen = format!("--listen=unix:{}", dir.path().join("r.sock").display());
    let runner = Runner::start(&[&config(), &functions(), "--disable-runtimes=pod", &listen]);
    check(call(&runner));
}

/// A function that fails with 100 KB of non-ASCII stderr (300 KB once
/// percent-encoded in `grpc-message`): grpcio (C-core) receives INTERNAL
/// with the function's message, not `RESOURCE_EXHAUSTED: Stream removed
/// (received metadata size exceeds hard limit (18440 vs. 16384))`, because
/// the status message is capped after encoding.
#[test]
fn python_grpcio_client_gets_a_huge_non_ascii_error() {
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("unicode-fail");
    std::fs::write(
        &script,
        "#!/bin/sh\ncat >/dev/null\ni=0\nwhile [ $i -lt 5000 ]; do printf 'üüüüüüüüüü' >&2; i=$((i+1)); done\nexit 1\n",
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    let mut config = std::fs::read_to_string(catalog_dir().join("config.yaml")).unwrap();
    config.push_str(&format!(
        "- function: {}\n  images:\n  - example.com/unicode-fail:v1\n",
        script.display()
    ));
    let config_path = dir.path().join("config.yaml");
    std::fs::write(&config_path, config).unwrap();
    let config_flag = format!("--config={}", config_path.display());
    let runner = Runner::start(&[&config_flag, &functions(), "--disable-runtimes=pod"]);
    let seen = call_with(&runner, &["--failing-image", "example.com/unicode-fail:v1"]);
    let failing = &seen["failing"];
    assert_eq!(failing["code"], "INTERNAL", "{failing}");
    let details = failing["details"].as_str().unwrap();
    assert!(
        details.starts_with(
            "Failed to execute function \"example.com/unicode-fail:v1\": exit status 1 (üüüüü"
        ),
        "{details}"
    );
    assert!(details.contains("bytes cut"), "{details}");
}
