//! `krm-fn-runner render` on the example packages: the builtin-only one and
//! the one with a subpackage, selectors and a validator run through the
//! catalog's real function binaries (`exec:`).

use krm_fn_testbed::common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use krm_fn_runner::domain::codec;
use serde_json::Value;

fn example(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("examples/packages")
        .join(name)
}

/// A copy of the example in a temporary directory.
fn copy(name: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let status = Command::new("cp")
        .arg("-a")
        .arg(format!("{}/.", example(name).display()))
        .arg(dir.path())
        .status()
        .unwrap();
    assert!(status.success());
    dir
}

fn render(dir: &Path, args: &[&str]) -> Output {
    let path = format!(
        "{}:{}",
        common::catalog_dir().join("bin").display(),
        std::env::var("PATH").unwrap_or_default()
    );
    Command::new(env!("CARGO_BIN_EXE_krm-fn-runner"))
        .arg("render")
        .arg(dir)
        .args(args)
        .env("PATH", path)
        .output()
        .unwrap()
}

fn docs(path: &Path) -> Vec<Value> {
    codec::from_yaml_documents(&std::fs::read(path).unwrap()).unwrap()
}

fn text(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn builtin_example_renders_in_place_keeping_comments() {
    let dir = copy("hello");
    let out = render(dir.path(), &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    let log = stderr(&out);
    assert!(
        log.contains("[PASS] \"ghcr.io/kptdev/krm-functions-catalog/set-namespace:v0.4.5\" in ")
    );
    assert!(log.contains("Successfully executed 2 function(s) in 1 package(s)."));

    let deploy = &docs(&dir.path().join("deployment.yaml"))[0];
    assert_eq!(deploy["metadata"]["namespace"], "hello-prod");
    assert_eq!(deploy["metadata"]["labels"]["env"], "prod");
    assert_eq!(
        deploy["spec"]["template"]["metadata"]["labels"]["env"],
        "prod"
    );
    let deploy_text = text(&dir.path().join("deployment.yaml"));
    for comment in [
        "# The web server. Comments like this one survive a render.",
        "name: hello # the Service below selects these pods",
        "replicas: 2 # scale here",
        "image: nginx:1.27 # pinned",
    ] {
        assert!(
            deploy_text.contains(comment),
            "{comment:?} lost:\n{deploy_text}"
        );
    }
    // The second document of a file keeps its own comment.
    assert!(text(&dir.path().join("service.yaml")).contains("# Settings read by the web server."));
    assert_eq!(
        text(&dir.path().join("README.md")),
        text(&example("hello").join("README.md"))
    );
    let kptfile = &docs(&dir.path().join("Kptfile"))[0];
    assert_eq!(
        kptfile["status"]["conditions"][0]["reason"],
        "RenderSuccess"
    );

    // Rendering again changes nothing but is still a success.
    let before = text(&dir.path().join("deployment.yaml"));
    let again = render(dir.path(), &[]);
    assert!(again.status.success(), "{}", stderr(&again));
    assert_eq!(text(&dir.path().join("deployment.yaml")), before);
}

#[test]
fn out_of_place_modes_leave_the_package_alone() {
    let dir = copy("hello");
    let out = render(dir.path(), &["-o", "stdout"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let list: Value = codec::from_yaml_slice(&out.stdout).unwrap();
    assert_eq!(list["kind"], "ResourceList");
    let items = list["items"].as_array().unwrap();
    assert_eq!(items.len(), 4);
    assert!(
        items
            .iter()
            .all(|i| i["kind"] == "Kptfile" || i["metadata"]["namespace"] == "hello-prod")
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("# pinned"));

    let out = render(dir.path(), &["-o", "unwrap"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let unwrapped: Vec<Value> = codec::from_yaml_documents(&out.stdout).unwrap();
    assert_eq!(unwrapped.len(), 4);

    let target = dir.path().join("rendered");
    let out = render(dir.path(), &["-o", target.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        docs(&target.join("deployment.yaml"))[0]["metadata"]["namespace"],
        "hello-prod"
    );
    // The source package is untouched in every out-of-place mode.
    for file in ["Kptfile", "deployment.yaml", "service.yaml"] {
        assert_eq!(
            text(&dir.path().join(file)),
            text(&example("hello").join(file)),
            "{file}"
        );
    }
    let again = render(dir.path(), &["-o", target.to_str().unwrap()]);
    assert!(!again.status.success());
    assert!(
        stderr(&again).contains("already exists"),
        "{}",
        stderr(&again)
    );
}

#[test]
fn exec_example_runs_subpackage_selectors_setters_and_validator() {
    let dir = copy("webshop");
    let results = tempfile::tempdir().unwrap();
    let out = render(
        dir.path(),
        &[
            "--allow-exec",
            "--results-dir",
            results.path().to_str().unwrap(),
        ],
    );
    let log = stderr(&out);
    assert!(out.status.success(), "{log}");
    // The subpackage renders first, then the root.
    let db_at = log.find("/db\": ").expect("db package line");
    let root_at = log.find("[RUNNING] \"apply-setters\"").expect("root steps");
    assert!(db_at < root_at, "{log}");
    assert!(
        log.contains("[RUNNING] \"set-namespace\" on 2 resource(s)"),
        "{log}"
    );

    let front = docs(&dir.path().join("frontend.yaml"));
    assert_eq!(front[0]["spec"]["replicas"], 3);
    assert_eq!(
        front[0]["spec"]["template"]["spec"]["containers"][0]["image"],
        "ghcr.io/example/shop:2.4.1"
    );
    assert_eq!(front[0]["metadata"]["namespace"], "shop");
    assert_eq!(front[1]["metadata"]["namespace"], "shop");
    let front_text = text(&dir.path().join("frontend.yaml"));
    assert!(
        front_text.contains("replicas: 3 # kpt-set: ${replicas}"),
        "{front_text}"
    );
    assert!(
        front_text.contains("shop:2.4.1 # kpt-set: ${image}"),
        "{front_text}"
    );

    let db = &docs(&dir.path().join("db/statefulset.yaml"))[0];
    assert!(
        db["metadata"].get("namespace").is_none(),
        "selectors keep db out"
    );
    assert_eq!(db["metadata"]["labels"]["tier"], "database");
    assert_eq!(
        db["metadata"]["labels"]["app.kubernetes.io/part-of"],
        "webshop"
    );
    assert!(text(&dir.path().join("db/statefulset.yaml")).contains("replicas: 1 # one primary"));

    let results: Value =
        codec::from_yaml_slice(&std::fs::read(results.path().join("results.yaml")).unwrap())
            .unwrap();
    assert_eq!(results["kind"], "FunctionResultList");
    assert_eq!(results["items"].as_array().unwrap().len(), 5);
}

#[test]
fn a_failing_validator_writes_nothing_but_the_kptfile_status() {
    let dir = copy("webshop");
    let kptfile = dir.path().join("Kptfile");
    std::fs::write(
        &kptfile,
        text(&kptfile).replace("replicas: \"3\"", "replicas: \"11\""),
    )
    .unwrap();
    let out = render(dir.path(), &["--allow-exec"]);
    let log = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{log}");
    assert!(log.contains("[FAIL] \"starlark\" in "), "{log}");
    assert!(log.contains("asks for more than 10 replicas"), "{log}");
    for file in [
        "frontend.yaml",
        "db/statefulset.yaml",
        "validate-replicas.yaml",
    ] {
        assert_eq!(
            text(&dir.path().join(file)),
            text(&example("webshop").join(file)),
            "{file}"
        );
    }
    let status = &docs(&kptfile)[0]["status"];
    assert_eq!(status["conditions"][0]["status"], "False");
    assert_eq!(status["conditions"][0]["reason"], "RenderFailed");
}

#[test]
fn exec_functions_need_allow_exec() {
    let dir = copy("webshop");
    let out = render(dir.path(), &[]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out)
            .contains("must run with `--allow-exec` option to allow running function binaries"),
        "{}",
        stderr(&out)
    );
    assert_eq!(
        text(&dir.path().join("frontend.yaml")),
        text(&example("webshop").join("frontend.yaml"))
    );
}

#[test]
fn a_directory_without_kptfile_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let out = render(dir.path(), &[]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("No Kptfile found at"),
        "{}",
        stderr(&out)
    );
}

/// `-o stdout | head`: a reader that closes the pipe early ends the render
/// quietly (exit 0, no panic), for both stdout modes.
#[test]
fn a_closed_stdout_ends_quietly() {
    for mode in ["stdout", "unwrap"] {
        let dir = copy("hello");
        let (reader, writer) = std::io::pipe().unwrap();
        drop(reader);
        let out = Command::new(env!("CARGO_BIN_EXE_krm-fn-runner"))
            .arg("render")
            .arg(dir.path())
            .args(["-o", mode])
            .stdout(writer)
            .stderr(std::process::Stdio::piped())
            .output()
            .unwrap();
        assert!(
            out.status.success() && !stderr(&out).contains("panicked"),
            "-o {mode}: {:?} {}",
            out.status,
            stderr(&out)
        );
    }
}
