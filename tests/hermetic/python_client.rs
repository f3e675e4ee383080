//! A gRPC client not written here — Python's grpcio, with stubs generated
//! from `proto/evaluator.proto` — calls the runner over TCP and over a Unix
//! socket.

use krm_fn_testbed::common;

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

/// A stand-in function per configured version: each passes its ResourceList
/// through and says on stderr which version ran. Returns the config.yaml of
/// the config-yaml generation that maps `<repository>:<version>` to each.
fn versioned_functions(dir: &std::path::Path, repository: &str, versions: &[&str]) -> String {
    use std::os::unix::fs::PermissionsExt;
    let mut config = String::from("functions:\n");
    for v in versions {
        let script = dir.join(format!("fn-{v}"));
        std::fs::write(&script, format!("#!/bin/sh\ncat\necho \"ran {v}\" >&2\n")).unwrap();
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
        config.push_str(&format!(
            "- function: {}\n  images:\n  - {repository}:{v}\n",
            script.display()
        ));
    }
    config
}

/// Porch's `Tag` (field 3) from a client that knows only Porch's wire
/// format, against the config-yaml generation's exec runtime: every request
/// shape Porch's runner answers since the Tag change, and which version ran.
#[test]
fn a_porch_client_sending_tag_runs_the_version_porch_picks() {
    let dir = tempfile::tempdir().unwrap();
    let x = "ghcr.io/kptdev/krm-functions-catalog/set-namespace";
    let mut config = versioned_functions(dir.path(), x, &["v0.4.1", "v0.4.3", "v0.4.5", "v0.5.2"]);
    config.push_str(&format!(
        "- function: {}\n  images:\n  - {x}:latest\n",
        dir.path().join("fn-v0.4.5").display()
    ));
    let config_path = dir.path().join("config.yaml");
    std::fs::write(&config_path, config).unwrap();
    let config_flag = format!("--config={}", config_path.display());
    let runner = Runner::start(&[&config_flag, "--disable-runtimes=pod"]);
    let pinned = format!("{x}:v0.4.1");
    let cases: Vec<(&str, Option<&str>, Result<&str, &str>)> = vec![
        (&pinned, None, Ok("v0.4.1")),
        (x, Some("~0.4"), Ok("v0.4.5")),
        (x, Some(">=0.5"), Ok("v0.5.2")),
        (x, Some("<0.4.2"), Ok("v0.4.1")),
        (x, Some("v0.4.5"), Ok("v0.4.5")),
        (x, Some("~0.4 || ~0.5"), Ok("v0.5.2")),
        (x, Some(">=0.4.2, <0.4.4"), Ok("v0.4.3")),
        (x, Some("latest"), Ok("v0.4.5")),
        // The Tag wins over the image's own tag.
        (&pinned, Some("~0.5"), Ok("v0.5.2")),
        // An empty Tag is no Tag.
        (&pinned, Some(""), Ok("v0.4.1")),
        (
            x,
            Some(">=1.0"),
            Err("no version satisfies the tag constraint \">=1.0\""),
        ),
        (x, Some("~0.4 |"), Err("is not a valid semver constraint")),
    ];
    let seen = common::porch_tag_client(
        &runner.address,
        b"apiVersion: config.kubernetes.io/v1\nkind: ResourceList\nitems: []\n",
        &cases.iter().map(|(i, t, _)| (*i, *t)).collect::<Vec<_>>(),
        60,
        &|| runner.log(),
    );
    for ((image, tag, want), seen) in cases.iter().zip(&seen) {
        let (code, details, log) = (&seen.code, &seen.details, &seen.log);
        match want {
            Ok(version) => {
                assert_eq!(code, "OK", "{image} {tag:?}: {details}");
                assert_eq!(log.trim(), format!("ran {version}"), "{image} {tag:?}");
            }
            Err(text) => {
                assert_eq!(code, "NOT_FOUND", "{image} {tag:?}: {details}");
                assert!(details.contains(text), "{image} {tag:?}: {details}");
                assert!(details.contains(x), "names the image: {details}");
                assert!(
                    details.contains("v0.4.1, v0.4.3, v0.4.5, v0.5.2, latest"),
                    "names the versions: {details}"
                );
            }
        }
    }
}
