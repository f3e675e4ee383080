//! `render`'s sandbox, run by the real `krm-fn-runner render`: a function
//! reads every file its user could but the credential stores (in a home
//! made for the test, the files `KUBECONFIG` and `DOCKER_CONFIG` name,
//! `/etc/shadow`, other processes' `/proc`), keeps the user's `HOME`,
//! writes only its scratch directory unless `--sandbox-write` adds a path;
//! `--sandbox-read` opens one refused path without turning the layer off;
//! a failing step says which layers were on and how to relax each.

use krm_fn_testbed::common;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Command;

/// A home, a kubeconfig and a Docker config made for the test, the paths a
/// function tries, and the function.
struct Fixture {
    dir: tempfile::TempDir,
    home: PathBuf,
    kubeconfig: PathBuf,
    docker_config: PathBuf,
    /// `(path, readable)`: what the function tries, and whether `render`'s
    /// sandbox should let it read that.
    tries: Vec<(PathBuf, bool)>,
}

impl Fixture {
    fn new() -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        let home = dir.path().join("home");
        let mut tries = Vec::new();
        let mut put = |path: PathBuf, readable: bool| {
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(&path, "secret or not\n").unwrap();
            tries.push((path, readable));
        };
        for (store, file) in [
            (".ssh", "id_ed25519"),
            (".gnupg", "private-keys-v1.d/key"),
            (".kube", "config"),
            (".docker", "config.json"),
            (".aws", "credentials"),
            (".azure", "msal_token_cache.json"),
            (".config/gcloud", "credentials.db"),
            (".config/gh", "hosts.yml"),
            (".password-store", "bank.gpg"),
        ] {
            put(home.join(store).join(file), false);
        }
        put(home.join(".netrc"), false);
        put(home.join(".git-credentials"), false);
        // Beside the stores: readable.
        put(home.join("notes.txt"), true);
        put(home.join(".config/app/settings.yaml"), true);
        put(home.join(".cache/pip/wheel"), true);
        let kubeconfig = dir.path().join("elsewhere/admin.kubeconfig");
        put(kubeconfig.clone(), false);
        put(dir.path().join("elsewhere/data.csv"), true);
        let docker_config = dir.path().join("docker");
        put(docker_config.join("config.json"), false);
        put(dir.path().join("venv/lib/site-packages/lib.py"), true);
        tries.push(("/etc/shadow".into(), false));
        tries.push(("/proc/1/environ".into(), false));
        // World-readable, unlike environ (which Landlock's ptrace rule
        // refuses too): refused by the read rules alone.
        tries.push(("/proc/1/cmdline".into(), false));
        tries.push(("/etc/hostname".into(), true));
        tries.push(("/proc/cpuinfo".into(), true));
        Fixture {
            dir,
            home,
            kubeconfig,
            docker_config,
            tries,
        }
    }

    /// A package whose one step runs the checking function (`exit` is its
    /// exit code after it has reported) with `extra` flags, rendered to
    /// stdout; returns `(exit code, what the function reported, render's
    /// stderr)`.
    fn render(&self, exit: i32, extra: &[&str]) -> (i32, BTreeMap<String, String>, String) {
        let function = self.dir.path().join("fn/check.sh");
        std::fs::create_dir_all(function.parent().unwrap()).unwrap();
        let paths: String = self
            .tries
            .iter()
            .map(|(p, _)| format!("{}\n", p.display()))
            .collect();
        std::fs::write(self.dir.path().join("fn/paths.txt"), paths).unwrap();
        let out_file = self.dir.path().join("written/out.txt");
        std::fs::create_dir_all(out_file.parent().unwrap()).unwrap();
        // Reports `read` or `refused` per path (by its position), its HOME,
        // whether its TMPDIR and `written/` take a file, as one ConfigMap.
        std::fs::write(
            &function,
            format!(
                "cat >/dev/null\n\
                 echo 'apiVersion: config.kubernetes.io/v1'\n\
                 echo 'kind: ResourceList'\n\
                 echo 'items:'\n\
                 echo '- apiVersion: v1'\n\
                 echo '  kind: ConfigMap'\n\
                 echo '  metadata: {{name: reads}}'\n\
                 echo '  data:'\n\
                 i=0\n\
                 while read -r p; do\n\
                   if cat \"$p\" >/dev/null 2>&1; then r=read; else r=refused; fi\n\
                   echo \"    p$i: $r\"\n\
                   i=$((i+1))\n\
                 done < \"$(dirname \"$0\")/paths.txt\"\n\
                 echo \"    home: '$HOME'\"\n\
                 if echo x > \"$TMPDIR/f\" 2>/dev/null; then echo '    tmpdir: written'; else echo '    tmpdir: refused'; fi\n\
                 if echo x > '{out}' 2>/dev/null; then echo '    written: written'; else echo '    written: refused'; fi\n\
                 exit {exit}\n",
                out = out_file.display()
            ),
        )
        .unwrap();
        let pkg = self.dir.path().join(format!("pkg-{exit}-{}", extra.len()));
        std::fs::create_dir_all(&pkg).unwrap();
        std::fs::write(
            pkg.join("Kptfile"),
            format!(
                "apiVersion: kpt.dev/v1\nkind: Kptfile\nmetadata:\n  name: pkg\npipeline:\n  mutators:\n  - exec: sh {}\n",
                function.display()
            ),
        )
        .unwrap();
        std::fs::write(
            pkg.join("cm.yaml"),
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cm\n",
        )
        .unwrap();
        let out = Command::new(common::runner_binary())
            .arg("render")
            .arg(&pkg)
            .args(["--allow-exec", "--output=stdout"])
            .args(extra)
            .env("HOME", &self.home)
            .env("KUBECONFIG", &self.kubeconfig)
            .env("DOCKER_CONFIG", &self.docker_config)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        let mut data = BTreeMap::new();
        if out.status.success() {
            let text = String::from_utf8_lossy(&out.stdout);
            let items: Vec<serde_json::Value> =
                krm_fn_runner::domain::codec::from_yaml_documents(text.as_bytes())
                    .unwrap_or_else(|e| panic!("{e}: {text}"));
            let reads = items
                .iter()
                .flat_map(|i| {
                    i["items"]
                        .as_array()
                        .cloned()
                        .unwrap_or_else(|| vec![i.clone()])
                })
                .find(|i| i["metadata"]["name"] == "reads")
                .unwrap_or_else(|| panic!("no report in {text}\n{stderr}"));
            for (k, v) in reads["data"].as_object().unwrap() {
                data.insert(k.clone(), v.as_str().unwrap_or_default().to_string());
            }
        }
        (out.status.code().unwrap_or(-1), data, stderr)
    }
}

/// Whether this kernel has Landlock (else the filesystem layer is off and
/// there is nothing to check).
fn landlock() -> bool {
    let on = krm_fn_runner::adapters::exec::sandbox::support()
        .landlock_abi
        .is_some();
    if !on {
        eprintln!("skipped: this kernel has no Landlock");
    }
    on
}

/// Every credential store is refused and everything beside it read; the
/// function keeps its user's `HOME`; it writes its `TMPDIR` and nowhere
/// else.
#[test]
fn render_reads_everything_but_the_credential_stores() {
    if !landlock() {
        return;
    }
    let fx = Fixture::new();
    let (code, data, stderr) = fx.render(0, &[]);
    assert_eq!(code, 0, "{stderr}");
    for (i, (path, readable)) in fx.tries.iter().enumerate() {
        let want = if *readable { "read" } else { "refused" };
        assert_eq!(data[&format!("p{i}")], want, "{}", path.display());
    }
    assert_eq!(
        data["home"],
        fx.home.display().to_string(),
        "the user's HOME"
    );
    assert_eq!(data["tmpdir"], "written");
    assert_eq!(data["written"], "refused");
}

/// `--sandbox-read` opens a refused path, `--sandbox-write` adds a place
/// to write, neither turning the layer off: every other store stays
/// refused.
#[test]
fn sandbox_read_and_write_add_paths_without_turning_the_layer_off() {
    if !landlock() {
        return;
    }
    let fx = Fixture::new();
    let kube = fx.home.join(".kube");
    let written = fx.dir.path().join("written");
    let (code, data, stderr) = fx.render(
        0,
        &[
            &format!("--sandbox-read={}", kube.display()),
            &format!("--sandbox-write={}", written.display()),
        ],
    );
    assert_eq!(code, 0, "{stderr}");
    for (i, (path, readable)) in fx.tries.iter().enumerate() {
        let want = if *readable || path.starts_with(&kube) {
            "read"
        } else {
            "refused"
        };
        assert_eq!(data[&format!("p{i}")], want, "{}", path.display());
    }
    assert_eq!(data["written"], "written");
}

/// A failing step, with the layers on, says which were on and the flag
/// that relaxes each; with every layer off it says nothing of the sandbox.
#[test]
fn a_failing_step_names_the_layers_that_were_on_and_how_to_relax_them() {
    let fx = Fixture::new();
    let (code, _, stderr) = fx.render(1, &[]);
    assert_eq!(code, 1, "{stderr}");
    let line = stderr
        .lines()
        .find(|l| l.trim_start().starts_with("Sandbox: "))
        .unwrap_or_else(|| panic!("no sandbox line in\n{stderr}"));
    for part in [
        "--sandbox-allow network",
        "--sandbox-allow syscalls",
        "--sandbox-allow new-privileges",
    ] {
        assert!(line.contains(part), "{part}: {line}");
    }
    if landlock() {
        for part in [
            "filesystem (Landlock: read every file but the credential stores",
            "--sandbox-read PATH",
            "--sandbox-write PATH",
            "--sandbox-allow filesystem",
        ] {
            assert!(line.contains(part), "{part}: {line}");
        }
    }
    let (code, _, stderr) = fx.render(
        1,
        &["--sandbox-allow=new-privileges,filesystem,syscalls,network"],
    );
    assert_eq!(code, 1, "{stderr}");
    assert!(!stderr.contains("Sandbox: "), "{stderr}");
}

/// Paths a `--sandbox-read` or `--sandbox-write` may not be: empty.
#[test]
fn an_empty_sandbox_path_is_a_usage_error() {
    let out = Command::new(common::runner_binary())
        .args(["render", ".", "--sandbox-read="])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("the path is empty"), "{stderr}");
}
