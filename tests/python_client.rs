//! A gRPC client not written here — Python's grpcio, with stubs generated
//! from `proto/evaluator.proto` — calls the runner over TCP and over a Unix
//! socket.

mod common;

use std::path::Path;
use std::process::Command;

use common::{Runner, catalog_dir, catalog_image, python};

fn call(runner: &Runner) -> serde_json::Value {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("rl.yaml");
    std::fs::write(
        &input,
        "apiVersion: config.kubernetes.io/v1\nkind: ResourceList\nitems:\n- apiVersion: v1\n  kind: ConfigMap\n  metadata:\n    name: cm\nfunctionConfig:\n  apiVersion: v1\n  kind: ConfigMap\n  metadata:\n    name: fn\n  data:\n    namespace: from-python\n",
    )
    .unwrap();
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = Command::new(python())
        .arg(root.join("tests/python/evaluator_client.py"))
        .arg("--proto")
        .arg(root.join("proto"))
        .args([
            "--address",
            &runner.address,
            "--image",
            &catalog_image("set-namespace"),
        ])
        .arg("--input")
        .arg(&input)
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
