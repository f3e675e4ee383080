//! Porch itself on the test bed: porch-server v1.5.3 (built from the Go
//! module proxy by `scripts/build-porch.sh`, cached per machine) in
//! standalone mode on the real kube-apiserver + etcd of `k8s_support`, with
//! Porch's CRDs from the module, a local bare git repository as its package
//! repository, and a function runner behind `--function-runner`: ours
//! (`krm-fn-runner serve`) or Porch's own Go runner, taking turns on one
//! fixed port so that one porch-server renders through either.
//!
//! The git transport is `file://`: Porch's go-git accepts it (go-git runs the
//! system's `git-upload-pack`/`git-receive-pack`) and Porch does not check the
//! URL scheme, so no git daemon is needed.
//!
//! Users of this module also declare `mod common;` and `mod k8s_support;`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{ApiResource, DynamicObject, PostParams};
use kube::config::{Config, KubeConfigOptions, Kubeconfig};
use kube::{Api, Client};
use serde_json::{Value, json};

use crate::common::{Runner, catalog_dir, catalog_image, eventually};
use crate::k8s_support::{ControlPlane, free_port};

/// The Porch release on the bed.
pub const PORCH_VERSION: &str = "v1.5.3";

/// The namespace the repository and its package revisions live in.
pub const NS: &str = "porch-e2e";

/// The Repository object's name.
pub const REPO: &str = "blueprints";

/// How long to wait for the bed's components.
pub const PATIENCE: Duration = Duration::from_secs(60);

/// The directory `scripts/build-porch.sh` fills: `porch-server`, `porchctl`,
/// `porch-function-runner`, `crds/`. `KRM_FN_PORCH`, or the script's output
/// (it builds on first use).
pub fn porch_dir() -> PathBuf {
    crate::k8s_support::cached_build("KRM_FN_PORCH", "scripts/build-porch.sh")
}

/// Runs `git` with `args` in `dir`; panics with its stderr on failure.
pub fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .current_dir(dir)
        .args(args)
        .env("GIT_AUTHOR_NAME", "bed")
        .env("GIT_AUTHOR_EMAIL", "bed@example.com")
        .env("GIT_COMMITTER_NAME", "bed")
        .env("GIT_COMMITTER_EMAIL", "bed@example.com")
        .output()
        .expect("git is installed (apt-get install git)");
    assert!(
        out.status.success(),
        "git {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A bare git repository with one commit on `main`, reached as `file://`.
pub struct GitRemote {
    dir: tempfile::TempDir,
    /// `file:///…/blueprints.git`.
    pub url: String,
}

impl Default for GitRemote {
    /// [`GitRemote::new`].
    fn default() -> Self {
        Self::new()
    }
}

impl GitRemote {
    /// Creates the bare repository and pushes a first commit (a README) to `main`.
    pub fn new() -> GitRemote {
        let dir = tempfile::tempdir().unwrap();
        let bare = dir.path().join("blueprints.git");
        std::fs::create_dir_all(&bare).unwrap();
        git(
            &bare,
            &["init", "--quiet", "--bare", "--initial-branch=main"],
        );
        let seed = dir.path().join("seed");
        std::fs::create_dir_all(&seed).unwrap();
        git(&seed, &["init", "--quiet", "--initial-branch=main"]);
        std::fs::write(seed.join("README.md"), "Packages rendered by Porch.\n").unwrap();
        git(&seed, &["add", "README.md"]);
        git(&seed, &["commit", "--quiet", "-m", "first commit"]);
        git(&seed, &["push", "--quiet", bare.to_str().unwrap(), "main"]);
        GitRemote {
            url: format!("file://{}", bare.display()),
            dir,
        }
    }

    /// The bare repository's directory.
    pub fn path(&self) -> PathBuf {
        self.dir.path().join("blueprints.git")
    }

    /// The file `path` at `rev` (a branch, tag or commit), if it exists.
    pub fn show(&self, rev: &str, path: &str) -> Option<String> {
        let out = Command::new("git")
            .current_dir(self.path())
            .args(["show", &format!("{rev}:{path}")])
            .output()
            .unwrap();
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// Every ref of the repository, one `<name>` a line.
    pub fn refs(&self) -> Vec<String> {
        git(&self.path(), &["for-each-ref", "--format=%(refname)"])
            .lines()
            .map(str::to_string)
            .collect()
    }
}

/// Which function runner serves porch-server.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Peer {
    /// `krm-fn-runner serve`.
    Ours,
    /// Porch's Go function runner v1.5.3 (`porch-function-runner`).
    Porch,
}

impl Peer {
    /// The name used in reports.
    pub fn name(self) -> &'static str {
        match self {
            Peer::Ours => "krm-fn-runner",
            Peer::Porch => "porch function runner v1.5.3",
        }
    }
}

/// A function runner process listening on a fixed loopback port.
pub enum FunctionRunner {
    /// Ours.
    Ours(Runner),
    /// Porch's, with its log file.
    Porch(PorchRunner),
}

/// Porch's Go function runner; killed on drop.
pub struct PorchRunner {
    child: Child,
    log: PathBuf,
    _dir: tempfile::TempDir,
}

impl Drop for PorchRunner {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The exec runtime's flags for the installed catalog functions.
fn exec_flags() -> [String; 2] {
    let catalog = catalog_dir();
    [
        format!("--config={}", catalog.join("config.yaml").display()),
        format!("--functions={}", catalog.join("bin").display()),
    ]
}

/// Waits until something accepts connections on `127.0.0.1:port`.
fn wait_for_port(port: u16, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "{what} did not listen on {port}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

impl FunctionRunner {
    /// Starts `peer` with the exec runtime only (the catalog binaries and
    /// their config.yaml) on `127.0.0.1:port`, plus `extra` flags.
    pub fn start_exec(peer: Peer, port: u16, extra: &[&str]) -> FunctionRunner {
        Self::start_exec_with_env(peer, port, extra, &[])
    }

    /// As [`FunctionRunner::start_exec`], with environment variables `env`.
    pub fn start_exec_with_env(
        peer: Peer,
        port: u16,
        extra: &[&str],
        env: &[(&str, &str)],
    ) -> FunctionRunner {
        let [config, functions] = exec_flags();
        let mut args = vec![
            config.as_str(),
            functions.as_str(),
            "--disable-runtimes=pod",
        ];
        args.extend_from_slice(extra);
        Self::start(peer, port, &args, env)
    }

    /// Starts `peer` on `127.0.0.1:port` with exactly `args` (and `env`).
    pub fn start(peer: Peer, port: u16, args: &[&str], env: &[(&str, &str)]) -> FunctionRunner {
        match peer {
            Peer::Ours => {
                let listen = format!("--listen=127.0.0.1:{port}");
                let mut all = vec![listen.as_str()];
                all.extend_from_slice(args);
                FunctionRunner::Ours(Runner::start_with_env(&all, env))
            }
            Peer::Porch => {
                let dir = tempfile::tempdir().unwrap();
                let log = dir.path().join("function-runner.log");
                let child = Command::new(porch_dir().join("porch-function-runner"))
                    .arg(format!("--port={port}"))
                    .args(args)
                    .envs(env.iter().copied())
                    .stdout(Stdio::null())
                    .stderr(std::fs::File::create(&log).unwrap())
                    .spawn()
                    .expect("start porch-function-runner");
                wait_for_port(port, "porch-function-runner");
                FunctionRunner::Porch(PorchRunner {
                    child,
                    log,
                    _dir: dir,
                })
            }
        }
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        match self {
            FunctionRunner::Ours(r) => r.pid(),
            FunctionRunner::Porch(r) => r.child.id(),
        }
    }

    /// Sends SIGTERM (what Kubernetes sends on a rolling update).
    pub fn sigterm(&self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.pid().to_string()])
            .status();
    }

    /// Waits up to `within` for the process to exit; true if it did.
    pub fn wait_exit(&mut self, within: Duration) -> bool {
        let deadline = Instant::now() + within;
        while Instant::now() < deadline {
            if !crate::common::alive(self.pid()) {
                // Reap it.
                if let FunctionRunner::Porch(r) = self {
                    let _ = r.child.try_wait();
                }
                return true;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        false
    }

    /// The runner's log so far.
    pub fn log(&self) -> String {
        match self {
            FunctionRunner::Ours(r) => r.log(),
            FunctionRunner::Porch(r) => std::fs::read_to_string(&r.log).unwrap_or_default(),
        }
    }
}

/// porch-server in standalone mode; killed on drop.
pub struct PorchServer {
    child: Child,
    dir: tempfile::TempDir,
    /// `https://127.0.0.1:<port>`.
    pub url: String,
}

impl Drop for PorchServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl PorchServer {
    /// Starts porch-server against `plane`, rendering through
    /// `function_runner` (`host:port`), with `extra` flags.
    pub fn start(plane: &ControlPlane, function_runner: &str, extra: &[&str]) -> PorchServer {
        let dir = tempfile::tempdir().unwrap();
        let port = free_port();
        let kubeconfig = dir.path().join("core.kubeconfig");
        std::fs::write(&kubeconfig, plane.kubeconfig_yaml()).unwrap();
        let child = Command::new(porch_dir().join("porch-server"))
            .env_remove("KUBERNETES_SERVICE_HOST")
            .env_remove("KUBERNETES_SERVICE_PORT")
            .env("HOME", dir.path())
            .arg("--standalone-debug-mode")
            .arg(format!("--kubeconfig={}", kubeconfig.display()))
            .arg(format!("--secure-port={port}"))
            .arg("--bind-address=127.0.0.1")
            .arg(format!("--cert-dir={}", dir.path().join("certs").display()))
            .arg(format!(
                "--cache-directory={}",
                dir.path().join("cache").display()
            ))
            .arg(format!("--function-runner={function_runner}"))
            .args(extra)
            .stdout(std::fs::File::create(dir.path().join("porch.out")).unwrap())
            .stderr(std::fs::File::create(dir.path().join("porch.log")).unwrap())
            .spawn()
            .expect("start porch-server");
        PorchServer {
            child,
            dir,
            url: format!("https://127.0.0.1:{port}"),
        }
    }

    /// A kubeconfig for porch-server's own API (anonymous: standalone mode
    /// authorizes everything).
    pub fn kubeconfig_yaml(&self) -> String {
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: porch\n  cluster:\n    server: {}\n    insecure-skip-tls-verify: true\nusers:\n- name: user\n  user: {{}}\ncontexts:\n- name: porch\n  context:\n    cluster: porch\n    user: user\n    namespace: {NS}\ncurrent-context: porch\n",
            self.url
        )
    }

    /// Writes that kubeconfig next to the server's files and returns its path.
    pub fn kubeconfig_file(&self) -> PathBuf {
        let path = self.dir.path().join("porch.kubeconfig");
        std::fs::write(&path, self.kubeconfig_yaml()).unwrap();
        path
    }

    /// A kube-rs client for porch-server's API.
    pub async fn client(&self) -> Client {
        let kubeconfig = Kubeconfig::from_yaml(&self.kubeconfig_yaml()).unwrap();
        let mut config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
            .await
            .unwrap();
        // A render may take a while; the default read timeout is 295 s.
        config.read_timeout = Some(Duration::from_secs(120));
        Client::try_from(config).unwrap()
    }

    /// The tail of porch-server's log, for failure messages.
    pub fn log_tail(&self, lines: usize) -> String {
        let text = std::fs::read_to_string(self.dir.path().join("porch.log")).unwrap_or_default();
        let all: Vec<&str> = text.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }
}

/// `porch.kpt.dev/v1alpha1` resources by kind.
pub fn porch_resource(kind: &str, plural: &str) -> ApiResource {
    ApiResource {
        group: "porch.kpt.dev".into(),
        version: "v1alpha1".into(),
        api_version: "porch.kpt.dev/v1alpha1".into(),
        kind: kind.into(),
        plural: plural.into(),
    }
}

fn repository_resource() -> ApiResource {
    ApiResource {
        group: "config.porch.kpt.dev".into(),
        version: "v1alpha1".into(),
        api_version: "config.porch.kpt.dev/v1alpha1".into(),
        kind: "Repository".into(),
        plural: "repositories".into(),
    }
}

/// Installs the CRDs `scripts/build-porch.sh` copied from the module and
/// waits until each is established.
pub async fn install_crds(core: &Client) {
    let crds: Api<CustomResourceDefinition> = Api::all(core.clone());
    let dir = porch_dir().join("crds");
    let mut names = Vec::new();
    for entry in std::fs::read_dir(&dir).expect("the Porch CRDs") {
        let path = entry.unwrap().path();
        let text = std::fs::read_to_string(&path).unwrap();
        let crd: CustomResourceDefinition = serde_saphyr::from_str(&text)
            .unwrap_or_else(|e| panic!("{} is a CRD: {e}", path.display()));
        names.push(crd.metadata.name.clone().unwrap());
        crds.create(&PostParams::default(), &crd)
            .await
            .expect("create the CRD");
    }
    for name in names {
        eventually(&format!("CRD {name} to be established"), PATIENCE, || {
            let crds = crds.clone();
            let name = name.clone();
            async move {
                let crd = crds.get(&name).await.ok()?;
                let established = crd
                    .status?
                    .conditions?
                    .iter()
                    .any(|c| c.type_ == "Established" && c.status == "True");
                established.then_some(())
            }
        })
        .await;
    }
}

/// The whole bed. Fields drop in order: porch-server, the runner, the API
/// server, the git repository.
pub struct PorchBed {
    /// porch-server.
    pub porch: PorchServer,
    /// The function runner behind `--function-runner`, if one runs now.
    pub runner: Option<FunctionRunner>,
    /// The runner's fixed port.
    pub runner_port: u16,
    /// A client of porch-server's API.
    pub api: Client,
    /// A client of the core API server.
    pub core: Client,
    /// etcd + kube-apiserver (the bed's own, or a real node's).
    pub plane: Arc<ControlPlane>,
    /// The package repository.
    pub git: GitRemote,
    /// Scratch space (pulled packages).
    pub work: tempfile::TempDir,
}

/// What one `porchctl` run printed.
#[derive(Debug)]
pub struct Porchctl {
    /// Exit status was 0.
    pub ok: bool,
    /// Standard output.
    pub stdout: String,
    /// Standard error.
    pub stderr: String,
}

impl From<Output> for Porchctl {
    fn from(o: Output) -> Self {
        Porchctl {
            ok: o.status.success(),
            stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
        }
    }
}

impl PorchBed {
    /// Starts the control plane, installs Porch's CRDs, creates the
    /// repository, starts `runner` (if any) on a fixed port and porch-server
    /// pointed at that port, registers the repository and waits until Porch
    /// reports it ready. `porch_flags` go to porch-server.
    pub async fn start(runner: Option<(Peer, &[&str])>, porch_flags: &[&str]) -> PorchBed {
        let runner_port = free_port();
        let plane = Arc::new(ControlPlane::start().await);
        Self::start_with(plane, runner_port, runner, porch_flags).await
    }

    /// As [`PorchBed::start`] on an API server that runs already (a real
    /// node's), with porch-server rendering through the runner listening at
    /// `function_runner` (`127.0.0.1:<port>`, started by the caller).
    pub async fn start_on(
        plane: Arc<ControlPlane>,
        function_runner: &str,
        porch_flags: &[&str],
    ) -> PorchBed {
        let runner_port = function_runner
            .rsplit_once(':')
            .and_then(|(_, p)| p.parse().ok())
            .unwrap_or_else(|| panic!("not host:port: {function_runner}"));
        Self::start_with(plane, runner_port, None, porch_flags).await
    }

    async fn start_with(
        plane: Arc<ControlPlane>,
        runner_port: u16,
        runner: Option<(Peer, &[&str])>,
        porch_flags: &[&str],
    ) -> PorchBed {
        let core = plane.client().await.expect("core client");
        install_crds(&core).await;
        crate::k8s_support::create_namespace(&core, NS).await;
        let git = GitRemote::new();
        let runner =
            runner.map(|(peer, extra)| FunctionRunner::start_exec(peer, runner_port, extra));
        let porch = PorchServer::start(&plane, &format!("127.0.0.1:{runner_port}"), porch_flags);
        let api = porch.client().await;
        let bed = PorchBed {
            porch,
            runner,
            runner_port,
            api,
            core,
            plane,
            git,
            work: tempfile::tempdir().unwrap(),
        };
        bed.wait_for_porch().await;
        bed.register_repository().await;
        bed
    }

    /// Waits until porch-server serves the package revision API.
    async fn wait_for_porch(&self) {
        let deadline = Instant::now() + PATIENCE;
        loop {
            let revisions = self.revisions();
            match revisions.list(&Default::default()).await {
                Ok(_) => return,
                Err(e) => assert!(
                    Instant::now() < deadline,
                    "porch-server did not serve its API: {e}\n{}",
                    self.porch.log_tail(40)
                ),
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Creates the Repository object and waits for its Ready condition.
    async fn register_repository(&self) {
        let repos: Api<DynamicObject> =
            Api::namespaced_with(self.core.clone(), NS, &repository_resource());
        let repo: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "config.porch.kpt.dev/v1alpha1",
            "kind": "Repository",
            "metadata": {"name": REPO, "namespace": NS},
            "spec": {
                "description": "packages rendered through the function runner",
                "type": "git",
                "content": "Package",
                "git": {"repo": self.git.url, "branch": "main", "directory": "/"},
            },
        }))
        .unwrap();
        repos
            .create(&PostParams::default(), &repo)
            .await
            .expect("create the Repository");
        let deadline = Instant::now() + PATIENCE;
        loop {
            let repo = repos.get(REPO).await.expect("get the Repository");
            let ready = repo.data["status"]["conditions"]
                .as_array()
                .into_iter()
                .flatten()
                .find(|c| c["type"] == "Ready")
                .cloned();
            if let Some(c) = &ready
                && c["status"] == "True"
            {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "the Repository did not become ready: {ready:?}\n{}",
                self.porch.log_tail(40)
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// `porch.kpt.dev` PackageRevisions in the namespace.
    pub fn revisions(&self) -> Api<DynamicObject> {
        Api::namespaced_with(
            self.api.clone(),
            NS,
            &porch_resource("PackageRevision", "packagerevisions"),
        )
    }

    /// `porch.kpt.dev` PackageRevisionResources in the namespace.
    pub fn revision_resources(&self) -> Api<DynamicObject> {
        Api::namespaced_with(
            self.api.clone(),
            NS,
            &porch_resource("PackageRevisionResources", "packagerevisionresources"),
        )
    }

    /// Runs `porchctl` with `args` against porch-server (namespace [`NS`]).
    pub async fn porchctl(&self, args: &[&str]) -> Porchctl {
        let kubeconfig = self.porch.kubeconfig_file();
        let mut cmd = tokio::process::Command::new(porch_dir().join("porchctl"));
        cmd.args(args)
            .arg(format!("--kubeconfig={}", kubeconfig.display()))
            .arg(format!("--namespace={NS}"))
            .env("HOME", self.work.path())
            .stdin(Stdio::null());
        cmd.output().await.expect("run porchctl").into()
    }

    /// `porchctl rpkg init PACKAGE --repository=REPO --workspace=WS`: a new
    /// draft; returns the package revision's name.
    pub async fn init(&self, package: &str, workspace: &str) -> String {
        let out = self
            .porchctl(&[
                "rpkg",
                "init",
                package,
                &format!("--repository={REPO}"),
                &format!("--workspace={workspace}"),
            ])
            .await;
        assert!(out.ok, "porchctl rpkg init failed: {out:?}");
        out.stdout
            .lines()
            .find_map(|l| l.strip_suffix(" created"))
            .unwrap_or_else(|| panic!("porchctl rpkg init printed no name: {out:?}"))
            .trim()
            .to_string()
    }

    /// `porchctl rpkg pull NAME DIR`; returns DIR.
    pub async fn pull(&self, name: &str) -> PathBuf {
        let dir = self.work.path().join(format!("pull-{}", rand_suffix()));
        let out = self
            .porchctl(&["rpkg", "pull", name, dir.to_str().unwrap()])
            .await;
        assert!(out.ok, "porchctl rpkg pull failed: {out:?}");
        dir
    }

    /// `porchctl rpkg push NAME DIR`: updates the draft, porch-server renders.
    pub async fn push(&self, name: &str, dir: &Path) -> Porchctl {
        self.porchctl(&["rpkg", "push", name, dir.to_str().unwrap()])
            .await
    }

    /// Pulls `name`, writes `files` over the pulled copy and pushes it.
    pub async fn edit_and_push(&self, name: &str, files: &BTreeMap<String, String>) -> Porchctl {
        let dir = self.pull(name).await;
        for (path, text) in files {
            let file = dir.join(path);
            std::fs::create_dir_all(file.parent().unwrap()).unwrap();
            std::fs::write(file, text).unwrap();
        }
        self.push(name, &dir).await
    }

    /// The package revision's files as porch-server serves them.
    pub async fn resources(&self, name: &str) -> BTreeMap<String, String> {
        let prr = self
            .revision_resources()
            .get(name)
            .await
            .expect("get PackageRevisionResources");
        serde_json::from_value(prr.data["spec"]["resources"].clone()).unwrap()
    }

    /// Writes `files` over the package revision's files through the API
    /// (what `rpkg push` does) and returns porch-server's answer: the updated object
    /// (with `status.renderStatus`) or the API error.
    pub async fn update_resources(
        &self,
        name: &str,
        files: &BTreeMap<String, String>,
    ) -> Result<DynamicObject, kube::Error> {
        let api = self.revision_resources();
        let mut prr = api.get(name).await?;
        let resources = &mut prr.data["spec"]["resources"];
        for (path, text) in files {
            resources[path] = Value::String(text.clone());
        }
        api.replace(name, &PostParams::default(), &prr).await
    }

    /// The package revision's lifecycle.
    pub async fn lifecycle(&self, name: &str) -> String {
        let pr = self
            .revisions()
            .get(name)
            .await
            .expect("get PackageRevision");
        pr.data["spec"]["lifecycle"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    }

    /// Starts `peer` (exec runtime, catalog functions) on the runner port,
    /// stopping the one running now first.
    pub fn switch_runner(&mut self, peer: Peer, extra: &[&str]) {
        self.stop_runner();
        self.runner = Some(FunctionRunner::start_exec(peer, self.runner_port, extra));
    }

    /// Kills the runner now running (if any) and waits until it is gone.
    pub fn stop_runner(&mut self) {
        if let Some(mut r) = self.runner.take() {
            let _ = Command::new("kill")
                .args(["-KILL", &r.pid().to_string()])
                .status();
            assert!(r.wait_exit(Duration::from_secs(10)), "runner did not stop");
        }
    }
}

/// A short random suffix for scratch names.
pub fn rand_suffix() -> String {
    format!("{:08x}", rand::random::<u32>())
}

/// The catalog image of `function` (the exact string the runner's
/// config.yaml maps, which porch-server's builtin runtime does not serve).
pub fn image(function: &str) -> String {
    catalog_image(function)
}

/// A Kptfile named `name` whose pipeline is `mutators` (YAML list items,
/// already indented by two spaces) and `validators`.
pub fn kptfile(name: &str, mutators: &str, validators: &str) -> String {
    let mut text = format!(
        "apiVersion: kpt.dev/v1\nkind: Kptfile\nmetadata:\n  name: {name}\n  annotations:\n    config.kubernetes.io/local-config: \"true\"\ninfo:\n  description: rendered by Porch through a function runner\npipeline:\n"
    );
    if !mutators.is_empty() {
        text.push_str("  mutators:\n");
        text.push_str(mutators);
    }
    if !validators.is_empty() {
        text.push_str("  validators:\n");
        text.push_str(validators);
    }
    text
}

/// The success pipeline: apply-setters (app, replicas, tier) then a
/// starlark mutator that labels every Deployment `rendered-by: starlark`.
pub fn setters_and_starlark_pipeline(package: &str) -> BTreeMap<String, String> {
    let mutators = format!(
        "  - image: {}\n    configMap:\n      app: web\n      replicas: \"3\"\n      tier: frontend\n  - image: {}\n    configPath: label-deployments.yaml\n",
        image("apply-setters"),
        image("starlark")
    );
    let mut files = BTreeMap::new();
    files.insert("Kptfile".to_string(), kptfile(package, &mutators, ""));
    files.insert(
        "label-deployments.yaml".to_string(),
        "apiVersion: fn.kpt.dev/v1alpha1\nkind: StarlarkRun\nmetadata:\n  name: label-deployments\n  annotations:\n    config.kubernetes.io/local-config: \"true\"\nsource: |\n  for r in ctx.resource_list[\"items\"]:\n    if r[\"kind\"] == \"Deployment\":\n      r[\"metadata\"].setdefault(\"labels\", {})[\"rendered-by\"] = \"starlark\"\n".to_string(),
    );
    files
}

/// `count` Deployments with setter comments, in `deployments.yaml`.
pub fn deployments(count: usize) -> (String, String) {
    let mut text = String::new();
    for i in 0..count {
        if i > 0 {
            text.push_str("---\n");
        }
        text.push_str(&format!(
            "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: app-{i:02} # kpt-set: ${{app}}-{i:02}\n  labels:\n    tier: backend # kpt-set: ${{tier}}\nspec:\n  replicas: 1 # kpt-set: ${{replicas}}\n  selector:\n    matchLabels:\n      app: app-{i:02}\n  template:\n    metadata:\n      labels:\n        app: app-{i:02}\n    spec:\n      containers:\n      - name: app\n        image: nginx:1.27\n"
        ));
    }
    ("deployments.yaml".to_string(), text)
}

/// Parses every YAML document of `text` to JSON values.
pub fn documents(text: &str) -> Vec<Value> {
    text.split("\n---\n")
        .filter(|d| !d.trim().is_empty())
        .map(|d| serde_saphyr::from_str::<Value>(d).expect("valid YAML"))
        .collect()
}
