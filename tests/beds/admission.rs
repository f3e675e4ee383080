//! The function admission policy (`--admission-policy FILE`) on the real
//! binaries: `serve` called by Python's grpcio client, `eval` and `render`
//! run as commands. Every function here is a script that creates a marker
//! file when it starts, so "denied" is checked as "no process was started",
//! not only as an error code.

use krm_fn_testbed::common;
use krm_fn_testbed::otel_support;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use common::{Runner, catalog_dir, catalog_image, python_evaluator_client, runner_binary, script};
use otel_support::{Scrape, metrics_url};

const DIGEST: &str = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

/// The policy every test starts from: one rule of each kind.
const POLICY: &str = r#"apiVersion: krm-fn-runner.dev/v1alpha1
kind: FunctionAdmissionPolicy
default: deny
rules:
- name: no-old-tags
  action: deny
  registry: example.com
  tag: "v0.*"
- name: no-sandbox
  action: deny
  repository: "sandbox/**"
- name: no-other-registry
  action: deny
  registry: "*.other.io"
- name: ours-pinned
  action: allow
  registry: example.com
  requireDigest: true
- name: catalog
  action: allow
  registry: ghcr.io
  repository: "kptdev/krm-functions-catalog/*"
"#;

/// Test functions: (label, image). Each label is a script that touches
/// `<label>.ran` in the scratch directory and echoes its input.
fn functions() -> Vec<(&'static str, String)> {
    vec![
        ("pinned", format!("example.com/fns/pinned@{DIGEST}")),
        ("unpinned", "example.com/fns/unpinned:v1".into()),
        ("old", "example.com/fns/old:v0.9".into()),
        ("sandbox", "example.com/sandbox/team/fn:v1".into()),
        ("other", "registry.other.io/fns/other:v1".into()),
        ("elsewhere", "quay.io/fns/elsewhere:v1".into()),
    ]
}

/// The rule expected to decide each image of [`functions`] (`None`: allowed).
fn expected_rule(label: &str) -> Option<&'static str> {
    match label {
        "pinned" => None,
        "unpinned" => Some("ours-pinned"),
        "old" => Some("no-old-tags"),
        "sandbox" => Some("no-sandbox"),
        "other" => Some("no-other-registry"),
        "elsewhere" => Some("default"),
        other => panic!("unknown label {other}"),
    }
}

/// Writes the marker scripts, an exec config.yaml (catalog functions plus
/// the scripts) and the policy into `dir`; returns (config, policy).
fn setup(dir: &Path) -> (PathBuf, PathBuf) {
    let mut config = common::catalog_functions_yaml();
    for (label, image) in functions() {
        let marker = dir.join(format!("{label}.ran"));
        let path = script(
            dir,
            label,
            &format!("#!/bin/sh\ntouch '{}'\nexec cat\n", marker.display()),
        );
        // The marker is written next to the script, outside the scratch
        // directory the sandbox lets a function write.
        config.push_str(&format!(
            "- function: {}\n  images:\n  - {image}\n  sandbox: {{allow: [filesystem]}}\n",
            path.display()
        ));
    }
    let config_path = dir.join("config.yaml");
    std::fs::write(&config_path, config).unwrap();
    let policy = dir.join("policy.yaml");
    std::fs::write(&policy, POLICY).unwrap();
    (config_path, policy)
}

fn ran(dir: &Path, label: &str) -> bool {
    dir.join(format!("{label}.ran")).exists()
}

/// Replaces `path` atomically (as a ConfigMap update does).
fn replace(path: &Path, text: &str) {
    let tmp = path.with_extension("new");
    std::fs::write(&tmp, text).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

/// Python's grpcio client evaluating each of `images` on `runner`.
fn probe(runner: &Runner, dir: &Path, images: &[String]) -> serde_json::Value {
    let input = dir.join("rl.yaml");
    std::fs::write(
        &input,
        "apiVersion: config.kubernetes.io/v1\nkind: ResourceList\nitems:\n- apiVersion: v1\n  kind: ConfigMap\n  metadata:\n    name: cm\nfunctionConfig:\n  apiVersion: v1\n  kind: ConfigMap\n  metadata:\n    name: fn\n  data:\n    namespace: probed\n",
    )
    .unwrap();
    let args: Vec<&str> = images
        .iter()
        .flat_map(|i| ["--probe", i.as_str()])
        .collect();
    python_evaluator_client(runner, &input, &args)
}

#[test]
fn serve_refuses_each_rule_kind_with_permission_denied_and_reloads_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let (config, policy) = setup(dir.path());
    let runner = Runner::start_with_env(
        &[
            &format!("--config={}", config.display()),
            &format!("--functions={}", catalog_dir().join("bin").display()),
            "--disable-runtimes=pod",
            &format!("--admission-policy={}", policy.display()),
        ],
        &[
            ("OTEL_METRICS_EXPORTER", "prometheus"),
            ("OTEL_EXPORTER_PROMETHEUS_HOST", "127.0.0.1"),
            ("OTEL_EXPORTER_PROMETHEUS_PORT", "0"),
            ("OTEL_TRACES_EXPORTER", "none"),
        ],
    );
    let catalog = catalog_image("set-namespace");
    let mut images: Vec<String> = functions().into_iter().map(|(_, i)| i).collect();
    images.push(catalog.clone());
    let seen = probe(&runner, dir.path(), &images);
    for (label, image) in functions() {
        let answer = &seen["probes"][&image];
        match expected_rule(label) {
            None => {
                assert_eq!(answer["code"], "OK", "{image}: {answer}");
                assert!(ran(dir.path(), label), "{image} was allowed and ran");
            }
            Some(rule) => {
                assert_eq!(answer["code"], "PERMISSION_DENIED", "{image}: {answer}");
                let details = answer["details"].as_str().unwrap();
                assert!(
                    details.contains(&format!("denied by admission rule {rule:?}")),
                    "{image}: {details}"
                );
                assert!(details.contains(&image), "{details}");
                assert!(
                    !ran(dir.path(), label),
                    "{image} was denied but a process started"
                );
            }
        }
    }
    assert!(
        seen["probes"]["example.com/fns/unpinned:v1"]["details"]
            .as_str()
            .unwrap()
            .contains("requires a digest")
    );
    assert_eq!(seen["probes"][&catalog]["code"], "OK");

    // Denials by rule, as Prometheus scrapes them.
    let url = metrics_url(&runner);
    let scrape = Scrape::take(&url);
    // ours-pinned twice: the client's own NOT_FOUND probe
    // (example.com/none:v0) is unpinned too.
    for (rule, n) in [
        ("ours-pinned", 2.0),
        ("no-old-tags", 1.0),
        ("no-sandbox", 1.0),
        ("no-other-registry", 1.0),
        ("default", 1.0),
    ] {
        assert_eq!(
            scrape.value("krm_fn_runner_admission_denials_total", &[("rule", rule)]),
            n,
            "{rule}"
        );
    }

    // An edit applies to the next call, without a restart.
    let pid = runner.pid();
    replace(
        &policy,
        "rules:\n- name: lockdown\n  action: deny\n  registry: ghcr.io\n",
    );
    let seen = probe(&runner, dir.path(), std::slice::from_ref(&catalog));
    let answer = &seen["probes"][&catalog];
    assert_eq!(answer["code"], "PERMISSION_DENIED", "{answer}");
    assert!(
        answer["details"].as_str().unwrap().contains("\"lockdown\""),
        "{answer}"
    );
    // A broken edit keeps the policy in force and says so in the log.
    replace(&policy, "rules:\n- name: typo\n  acton: allow\n");
    let seen = probe(&runner, dir.path(), std::slice::from_ref(&catalog));
    assert_eq!(seen["probes"][&catalog]["code"], "PERMISSION_DENIED");
    assert!(
        runner
            .log()
            .contains("the previous admission policy stays in force"),
        "{}",
        runner.log()
    );
    assert_eq!(runner.pid(), pid);
    assert!(common::alive(pid), "the runner stays up");
}

#[test]
fn serve_refuses_to_start_on_a_bad_policy_file() {
    let dir = tempfile::tempdir().unwrap();
    let policy = dir.path().join("policy.yaml");
    std::fs::write(&policy, "rules:\n- name: a\n  action: perhaps\n").unwrap();
    let out = Command::new(runner_binary())
        .args([
            "serve",
            "--disable-runtimes=pod,exec",
            "--listen=127.0.0.1:0",
        ])
        .arg(format!("--admission-policy={}", policy.display()))
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&policy.display().to_string()) && stderr.contains("perhaps"),
        "{stderr}"
    );
}

fn eval(dir: &Path, config: &Path, policy: &Path, image: &str) -> Output {
    use std::io::Write;
    let mut child = Command::new(runner_binary())
        .arg("eval")
        .arg(format!("--config={}", config.display()))
        .arg(format!("--admission-policy={}", policy.display()))
        .args(["--image", image])
        .current_dir(dir)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"apiVersion: config.kubernetes.io/v1\nkind: ResourceList\nitems: []\n")
        .unwrap();
    child.wait_with_output().unwrap()
}

#[test]
fn eval_refuses_each_rule_kind_before_running_anything() {
    let dir = tempfile::tempdir().unwrap();
    let (config, policy) = setup(dir.path());
    for (label, image) in functions() {
        let out = eval(dir.path(), &config, &policy, &image);
        let stderr = String::from_utf8_lossy(&out.stderr);
        match expected_rule(label) {
            None => {
                assert!(out.status.success(), "{image}: {stderr}");
                assert!(ran(dir.path(), label));
            }
            Some(rule) => {
                assert_eq!(out.status.code(), Some(1), "{image}: {stderr}");
                assert!(
                    stderr.contains(&format!("denied by admission rule {rule:?}")),
                    "{stderr}"
                );
                assert!(!ran(dir.path(), label), "{image} started a process");
            }
        }
    }
}

/// A package whose pipeline runs the builtin set-namespace, then `step`.
fn package(dir: &Path, step: &str) -> PathBuf {
    common::write_cm_package(
        dir,
        "",
        &format!(
            "  mutators:\n  - image: set-namespace:v0.4.5\n    configMap:\n      namespace: prod\n  - image: {step}\n"
        ),
    )
}

fn render(dir: &Path, pkg: &Path, config: &Path, policy: &Path) -> (Output, String) {
    let (out, results, _) = common::render_cli(
        dir,
        pkg,
        &[
            format!("--exec-config={}", config.display()),
            format!("--admission-policy={}", policy.display()),
        ],
    );
    (out, results)
}

#[test]
fn render_fails_a_denied_step_with_kpt_results_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let (config, policy) = setup(dir.path());
    for (label, image) in functions() {
        let pkg = package(dir.path(), &image);
        let (out, results) = render(dir.path(), &pkg, &config, &policy);
        let stderr = String::from_utf8_lossy(&out.stderr);
        let cm = std::fs::read_to_string(pkg.join("cm.yaml")).unwrap();
        match expected_rule(label) {
            None => {
                assert!(out.status.success(), "{image}: {stderr}");
                assert!(ran(dir.path(), label));
                assert!(cm.contains("namespace: prod"), "{cm}");
            }
            Some(rule) => {
                assert_eq!(out.status.code(), Some(1), "{image}: {stderr}");
                assert!(!ran(dir.path(), label), "{image} started a process");
                assert!(
                    results.contains(&format!("admission-rule: {rule}")),
                    "{results}"
                );
                assert!(results.contains("exitCode: 1"), "{results}");
                assert!(stderr.contains("[FAIL]"), "{stderr}");
                assert!(!cm.contains("namespace"), "nothing written: {cm}");
            }
        }
        std::fs::remove_dir_all(&pkg).unwrap();
    }
}

#[test]
fn render_checks_builtins_by_their_image_name() {
    let dir = tempfile::tempdir().unwrap();
    let (config, policy) = setup(dir.path());
    replace(
        &policy,
        "rules:\n- name: no-set-namespace\n  action: deny\n  repository: '**/set-namespace'\n",
    );
    let pkg = package(dir.path(), &format!("example.com/fns/pinned@{DIGEST}"));
    let (out, results) = render(dir.path(), &pkg, &config, &policy);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        results.contains("admission-rule: no-set-namespace"),
        "{results}"
    );
    assert!(
        results.contains("ghcr.io/kptdev/krm-functions-catalog/set-namespace:v0.4.5"),
        "{results}"
    );
    assert!(
        !ran(dir.path(), "pinned"),
        "the render stopped at the denial"
    );
}

/// render → serve over gRPC: the runner's denial reaches render as a
/// failed step naming the rule.
#[test]
fn render_through_a_function_runner_reports_its_denial() {
    let dir = tempfile::tempdir().unwrap();
    let (config, policy) = setup(dir.path());
    let runner = Runner::start(&[
        &format!("--config={}", config.display()),
        &format!("--functions={}", catalog_dir().join("bin").display()),
        "--disable-runtimes=pod",
        &format!("--admission-policy={}", policy.display()),
    ]);
    let pkg = package(dir.path(), "example.com/fns/unpinned:v1");
    let (out, text, _) = common::render_cli(
        dir.path(),
        &pkg,
        &[format!("--function-runner={}", runner.address)],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(text.contains("admission-rule: ours-pinned"), "{text}");
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("denied by admission rule \\\"ours-pinned\\\"")
            || stderr.contains("denied by admission rule \"ours-pinned\""),
        "{stderr}"
    );
    assert!(!ran(dir.path(), "unpinned"));
}
