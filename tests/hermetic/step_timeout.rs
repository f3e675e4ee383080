//! Per-step time limits in `krm-fn-runner render`: a Kptfile step's
//! `timeout:` (our extension) and the `--step-timeout` default, for a
//! validator that never finishes, run by each runtime render has — an
//! `image:` mapped to a local binary (--exec-config), an `exec:` command,
//! and a remote function runner (`serve` over gRPC). The render must end
//! within the limit plus one second, fail the step with a result saying it
//! ran out of time, write nothing (or, with
//! `kpt.dev/save-on-render-failure`, what the mutators produced), and leave
//! no function process behind.

use krm_fn_testbed::common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use common::{Runner, alive, catalog_dir, script};

const HANG: &str = "example.com/test/hang:v1";

/// A function that records its pid in `hang.pid` and never finishes. The
/// file is next to it, outside the scratch directory the sandbox lets a
/// function write: its config entry and the `exec:` steps' render allow
/// the `filesystem` layer (the sandbox is `tests/hermetic/sandbox.rs`'s subject).
fn hang_script(dir: &Path) -> PathBuf {
    script(
        dir,
        "hang",
        &format!(
            "#!/bin/sh\necho $$ > '{}'\nexec sleep 600\n",
            dir.join("hang.pid").display()
        ),
    )
}

/// An exec config.yaml mapping [`HANG`] to the hanging script.
fn config(dir: &Path) -> PathBuf {
    let path = dir.join("config.yaml");
    std::fs::write(
        &path,
        format!(
            "functions:\n- function: {}\n  images:\n  - {HANG}\n  sandbox: {{allow: [filesystem]}}\n",
            hang_script(dir).display()
        ),
    )
    .unwrap();
    path
}

/// A package: the builtin set-namespace as mutator, then `validator`.
fn package(dir: &Path, validator: &str, metadata_lines: &str) -> PathBuf {
    common::write_cm_package(
        dir,
        metadata_lines,
        &format!(
            "  mutators:\n  - image: set-namespace:v0.4.5\n    configMap:\n      namespace: prod\n  validators:\n{validator}"
        ),
    )
}

/// Runs render with `args`; returns its output, results.yaml and how long it took.
fn render(dir: &Path, pkg: &Path, args: &[String]) -> (Output, String, Duration) {
    common::render_cli(dir, pkg, args)
}

/// The render failed the validator for running out of `limit`, wrote
/// nothing, and the function process is gone.
fn check_timed_out(
    dir: &Path,
    pkg: &Path,
    out: &Output,
    results: &str,
    took: Duration,
    limit: &str,
) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    let secs: f64 = limit.trim_end_matches('s').parse().unwrap();
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        took < Duration::from_secs_f64(secs + 1.0),
        "render took {took:?} with a {limit} step timeout"
    );
    // A function runner stops the function slightly before the deadline,
    // so that the answer is its own.
    assert!(
        took >= Duration::from_secs_f64(secs - 0.25),
        "render ended well before the limit: {took:?}"
    );
    let said = format!("did not finish within {secs:.3}s; it was stopped");
    assert!(stderr.contains(&said), "{stderr}");
    assert!(results.contains(&said), "{results}");
    assert!(
        results.contains(&format!("timeout: {secs:.3}s")),
        "{results}"
    );
    assert!(stderr.contains("[FAIL]"), "{stderr}");
    let cm = std::fs::read_to_string(pkg.join("cm.yaml")).unwrap();
    assert!(!cm.contains("namespace"), "nothing is written: {cm}");
    let pid: u32 = std::fs::read_to_string(dir.join("hang.pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    while alive(pid) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(!alive(pid), "the hanging function {pid} was stopped");
}

#[test]
fn a_steps_timeout_stops_a_hanging_image_validator() {
    let dir = tempfile::tempdir().unwrap();
    let config = config(dir.path());
    let pkg = package(
        dir.path(),
        &format!("  - image: {HANG}\n    timeout: 2s\n"),
        "",
    );
    let (out, results, took) = render(
        dir.path(),
        &pkg,
        &[format!("--exec-config={}", config.display())],
    );
    check_timed_out(dir.path(), &pkg, &out, &results, took, "2s");
}

/// `exec:` steps: `--step-timeout` is the default, a step's own
/// `timeout:` wins over it.
#[test]
fn exec_steps_get_their_own_timeout_or_the_flags() {
    for (own, flag) in [
        ("", "--step-timeout=1s"),
        ("    timeout: 1s\n", "--step-timeout=1h"),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let hang = hang_script(dir.path());
        let pkg = package(
            dir.path(),
            &format!("  - exec: {}\n{own}", hang.display()),
            "",
        );
        let (out, results, took) = render(
            dir.path(),
            &pkg,
            &[
                "--allow-exec".into(),
                "--sandbox-allow=filesystem".into(),
                flag.into(),
            ],
        );
        check_timed_out(dir.path(), &pkg, &out, &results, took, "1s");
    }
}

#[test]
fn a_hanging_validator_on_a_function_runner_is_stopped_there() {
    let dir = tempfile::tempdir().unwrap();
    let config = config(dir.path());
    let runner = Runner::start(&[
        &format!("--config={}", config.display()),
        &format!("--functions={}", catalog_dir().join("bin").display()),
        "--disable-runtimes=pod",
    ]);
    let pkg = package(
        dir.path(),
        &format!("  - image: {HANG}\n    timeout: 2s\n"),
        "",
    );
    let (out, results, took) = render(
        dir.path(),
        &pkg,
        &[format!("--function-runner={}", runner.address)],
    );
    check_timed_out(dir.path(), &pkg, &out, &results, took, "2s");
    assert!(common::alive(runner.pid()), "the runner stays up");
}

#[test]
fn save_on_render_failure_keeps_the_mutators_work_after_a_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let hang = hang_script(dir.path());
    let pkg = package(
        dir.path(),
        &format!("  - exec: {}\n    timeout: 1s\n", hang.display()),
        "  annotations:\n    kpt.dev/save-on-render-failure: \"true\"\n",
    );
    let (out, results, _) = render(
        dir.path(),
        &pkg,
        &["--allow-exec".into(), "--sandbox-allow=filesystem".into()],
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(results.contains("timeout: 1.000s"), "{results}");
    let cm = std::fs::read_to_string(pkg.join("cm.yaml")).unwrap();
    assert!(
        cm.contains("namespace: prod"),
        "the mutator's output is saved: {cm}"
    );
}

#[test]
fn a_bad_timeout_is_a_kptfile_error() {
    let dir = tempfile::tempdir().unwrap();
    let pkg = package(
        dir.path(),
        "  - image: set-labels:v0.2.4\n    timeout: soon\n",
        "",
    );
    let (out, _, _) = render(dir.path(), &pkg, &[]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("pipeline.validators[0].timeout") && stderr.contains("Go duration"),
        "{stderr}"
    );
}

/// What kpt does with the field: the kpt CLI the tests build
/// (`scripts/build-kpt.sh`, through `KRM_FN_KPT_BIN`) refuses the Kptfile.
#[test]
fn kpt_refuses_a_kptfile_with_timeout() {
    let kpt = std::env::var_os("KRM_FN_KPT_BIN").expect(
        "KRM_FN_KPT_BIN is not set: run through scripts/test.sh, or export KRM_FN_KPT_BIN=\"$(scripts/build-kpt.sh)\"",
    );
    let dir = tempfile::tempdir().unwrap();
    let pkg = package(
        dir.path(),
        "  - exec: \"sh -c 'cat'\"\n    timeout: 2s\n",
        "",
    );
    let out = Command::new(kpt)
        .args(["fn", "render", "--allow-exec"])
        .arg(&pkg)
        .env("HOME", dir.path())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(stderr.contains("can't be read"), "{stderr}");
    assert!(
        stderr.contains("field timeout not found in type v1.Function"),
        "{stderr}"
    );
    let cm = std::fs::read_to_string(pkg.join("cm.yaml")).unwrap();
    assert!(!cm.contains("namespace"), "{cm}");
}
