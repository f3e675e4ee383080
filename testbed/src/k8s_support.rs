//! A real Kubernetes control plane for tests, envtest style: etcd and
//! kube-apiserver built from the Go module proxy
//! (`scripts/build-test-apiserver.sh`, cached per machine) and started on
//! loopback with ephemeral ports, each test binary its own control plane.
//!
//! Authentication is a static bearer token for an admin in `system:masters`;
//! the serving certificate is the one kube-apiserver writes into its
//! `--cert-dir`, which the client does not verify (loopback only).

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use kube::Client;
use kube::config::{Config, KubeConfigOptions, Kubeconfig};

/// Directory with `kube-apiserver` and `etcd`: `KUBEBUILDER_ASSETS`, or the
/// cached build of `scripts/build-test-apiserver.sh` (built on first use).
pub fn assets() -> PathBuf {
    cached_build("KUBEBUILDER_ASSETS", "scripts/build-test-apiserver.sh")
}

/// The path in environment variable `var`, or else what the cached build
/// script `script` (relative to the repository) prints, running it (and so
/// building on first use).
pub fn cached_build(var: &str, script: &str) -> PathBuf {
    if let Some(dir) = std::env::var_os(var) {
        return PathBuf::from(dir);
    }
    let out = Command::new("bash")
        .arg(crate::common::repo_root().join(script))
        .stderr(Stdio::inherit())
        .output()
        .unwrap_or_else(|e| panic!("run {script}: {e}"));
    assert!(
        out.status.success(),
        "{script} failed (needs Go and the Go module proxy)"
    );
    PathBuf::from(String::from_utf8(out.stdout).unwrap().trim())
}

/// A free loopback TCP port.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// One process of the control plane, stopped (SIGTERM, then SIGKILL) on drop.
struct Proc(Child);

impl Drop for Proc {
    fn drop(&mut self) {
        self.stop();
    }
}

impl Proc {
    /// SIGTERM, then SIGKILL after 10 s; nothing if it has exited already.
    fn stop(&mut self) {
        if let Ok(Some(_)) = self.0.try_wait() {
            return;
        }
        let _ = Command::new("kill")
            .args(["-TERM", &self.0.id().to_string()])
            .status();
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.0.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts kube-apiserver with `args`, appending its output to
/// `apiserver.log` in `dir`.
fn spawn_apiserver(args: &[String], dir: &std::path::Path) -> Proc {
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join("apiserver.log"))
        .unwrap();
    Proc(
        Command::new(assets().join("kube-apiserver"))
            .args(args)
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start kube-apiserver"),
    )
}

/// A running etcd + kube-apiserver.
pub struct ControlPlane {
    // Field order is drop order: the apiserver stops before etcd.
    apiserver: Proc,
    /// Its flags, to start it again.
    apiserver_args: Vec<String>,
    /// Held to stop etcd when the control plane is dropped.
    _etcd: Proc,
    dir: tempfile::TempDir,
    /// `https://127.0.0.1:<port>`.
    pub url: String,
    /// The admin bearer token.
    pub token: String,
}

const TOKEN: &str = "krm-fn-runner-test-admin";

/// Audit creations and deletions of pods (metadata only), nothing else.
const AUDIT_POLICY: &str = "apiVersion: audit.k8s.io/v1\nkind: Policy\nomitStages: [RequestReceived]\nrules:\n- level: Metadata\n  verbs: [create, delete, deletecollection]\n  resources:\n  - group: \"\"\n    resources: [pods]\n- level: None\n";

/// One audited pod creation or deletion.
#[derive(Debug, Clone)]
pub struct PodAudit {
    /// `create`, `delete` or `deletecollection`.
    pub verb: String,
    /// The pod (empty for a collection).
    pub name: String,
    /// When the API server received the request.
    pub received: std::time::SystemTime,
    /// The HTTP status the API server answered.
    pub code: i64,
}

/// Audit every request of `user` (metadata only).
fn user_audit_rule(user: &str) -> String {
    format!("- level: Metadata\n  users: [\"{user}\"]\n")
}

/// One audited request.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct AuditEvent {
    /// The user who made it.
    pub user: String,
    /// The verb (`get`, `list`, `watch`, `create`, `patch`, …).
    pub verb: String,
    /// API group (`""` for core), resource and subresource (`""` if none);
    /// all empty for a non-resource URL.
    pub group: String,
    /// The resource, e.g. `pods`.
    pub resource: String,
    /// The subresource, e.g. `status`.
    pub subresource: String,
    /// The object's name (empty for lists and watches).
    pub name: String,
    /// The request path for non-resource URLs (discovery), else `""`.
    pub path: String,
    /// The HTTP status the API server answered.
    pub code: i64,
}

impl ControlPlane {
    /// Starts etcd and kube-apiserver and waits until the API answers (60 s at most).
    pub async fn start() -> ControlPlane {
        Self::start_auditing(None).await
    }

    /// As [`ControlPlane::start`], and audits every request `user` makes
    /// (read them with [`ControlPlane::audit_events`]).
    pub async fn start_auditing_user(user: &str) -> ControlPlane {
        Self::start_auditing(Some(user)).await
    }

    async fn start_auditing(user: Option<&str>) -> ControlPlane {
        let assets = assets();
        let dir = tempfile::tempdir().unwrap();
        let (client_port, peer_port, api_port) = (free_port(), free_port(), free_port());
        let etcd_url = format!("http://127.0.0.1:{client_port}");
        let etcd = Proc(
            Command::new(assets.join("etcd"))
                .arg(format!("--data-dir={}", dir.path().join("etcd").display()))
                .arg(format!("--listen-client-urls={etcd_url}"))
                .arg(format!("--advertise-client-urls={etcd_url}"))
                .arg(format!("--listen-peer-urls=http://127.0.0.1:{peer_port}"))
                .arg(format!(
                    "--initial-advertise-peer-urls=http://127.0.0.1:{peer_port}"
                ))
                .arg(format!(
                    "--initial-cluster=default=http://127.0.0.1:{peer_port}"
                ))
                .args(["--unsafe-no-fsync=true", "--log-level=warn"])
                .stdout(Stdio::null())
                .stderr(std::fs::File::create(dir.path().join("etcd.log")).unwrap())
                .spawn()
                .expect("start etcd"),
        );
        let certs = dir.path().join("certs");
        std::fs::create_dir_all(&certs).unwrap();
        let sa_key = certs.join("sa.key");
        let st = Command::new("openssl")
            .args(["genrsa", "-out"])
            .arg(&sa_key)
            .arg("2048")
            .stderr(Stdio::null())
            .status()
            .expect("openssl (apt-get install openssl)");
        assert!(st.success(), "openssl genrsa failed");
        let tokens = dir.path().join("tokens.csv");
        std::fs::write(&tokens, format!("{TOKEN},admin,admin,\"system:masters\"\n")).unwrap();
        let url = format!("https://127.0.0.1:{api_port}");
        // An audit log of pod creations and deletions: the proof, read by
        // tests, of what was done to pods and when.
        let policy = dir.path().join("audit-policy.yaml");
        let rules = match user {
            // Rules match in order: the user's first, then the pod rules.
            Some(u) => {
                AUDIT_POLICY.replacen("rules:\n", &format!("rules:\n{}", user_audit_rule(u)), 1)
            }
            None => AUDIT_POLICY.to_string(),
        };
        std::fs::write(&policy, rules).unwrap();
        let apiserver_args: Vec<String> = vec![
            format!("--etcd-servers={etcd_url}"),
            format!("--secure-port={api_port}"),
            "--bind-address=127.0.0.1".into(),
            "--advertise-address=127.0.0.1".into(),
            "--endpoint-reconciler-type=none".into(),
            format!("--cert-dir={}", certs.display()),
            format!("--token-auth-file={}", tokens.display()),
            "--authorization-mode=RBAC".into(),
            "--disable-admission-plugins=ServiceAccount".into(),
            "--allow-privileged=true".into(),
            "--service-cluster-ip-range=10.96.0.0/16".into(),
            format!("--service-account-issuer={url}/"),
            format!("--service-account-key-file={}", sa_key.display()),
            format!("--service-account-signing-key-file={}", sa_key.display()),
            format!("--audit-policy-file={}", policy.display()),
            format!(
                "--audit-log-path={}",
                dir.path().join("audit.log").display()
            ),
            "--v=1".into(),
        ];
        let apiserver = spawn_apiserver(&apiserver_args, dir.path());
        let plane = ControlPlane {
            apiserver,
            apiserver_args,
            _etcd: etcd,
            dir,
            url,
            token: TOKEN.into(),
        };
        plane.wait_ready().await;
        plane
    }

    /// Waits (up to 120 s: with the other beds starting theirs beside it on
    /// two cores, one start took over 60 s) until the API server is ready: `/readyz` answers
    /// `ok` (its post-start hooks done, the bootstrap RBAC roles among them,
    /// which `kubectl auth can-i` needs) and the `default` namespace exists.
    async fn wait_ready(&self) {
        let plane = self;
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            if let Ok(client) = plane.client().await {
                let readyz = http::Request::get("/readyz").body(Vec::new()).unwrap();
                let ready = matches!(client.request_text(readyz).await, Ok(t) if t.trim() == "ok");
                let ns: kube::Api<k8s_openapi::api::core::v1::Namespace> = kube::Api::all(client);
                if ready && ns.get("default").await.is_ok() {
                    break;
                }
            }
            assert!(
                Instant::now() < deadline,
                "kube-apiserver did not become ready:\n{}",
                plane.logs()
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// The pod creations and deletions the API server has audited so far
    /// (completed requests), in order.
    pub fn pod_audit(&self) -> Vec<PodAudit> {
        let text = std::fs::read_to_string(self.dir.path().join("audit.log")).unwrap_or_default();
        text.lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .filter(|e| e["stage"] == "ResponseComplete" && e["objectRef"]["resource"] == "pods")
            .map(|e| PodAudit {
                verb: e["verb"].as_str().unwrap_or_default().to_string(),
                name: e["objectRef"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
                received: humantime::parse_rfc3339(
                    e["requestReceivedTimestamp"].as_str().unwrap_or_default(),
                )
                .expect("audit timestamps are RFC 3339"),
                code: e["responseStatus"]["code"].as_i64().unwrap_or_default(),
            })
            .collect()
    }

    /// Every request the API server audited so far, in order (pod
    /// creations and deletions, and all requests of the user given to
    /// [`ControlPlane::start_auditing_user`]): completed requests, and
    /// watches once started (they complete only when they end).
    pub fn audit_events(&self) -> Vec<AuditEvent> {
        let text = std::fs::read_to_string(self.dir.path().join("audit.log")).unwrap_or_default();
        text.lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .filter(|e| {
                e["stage"] == "ResponseComplete"
                    || (e["stage"] == "ResponseStarted" && e["verb"] == "watch")
            })
            .map(|e| {
                let s = |v: &serde_json::Value| v.as_str().unwrap_or_default().to_string();
                let object = &e["objectRef"];
                AuditEvent {
                    user: s(&e["user"]["username"]),
                    verb: s(&e["verb"]),
                    group: s(&object["apiGroup"]),
                    resource: s(&object["resource"]),
                    subresource: s(&object["subresource"]),
                    name: s(&object["name"]),
                    path: if object.is_null() {
                        s(&e["requestURI"])
                    } else {
                        String::new()
                    },
                    code: e["responseStatus"]["code"].as_i64().unwrap_or_default(),
                }
            })
            .collect()
    }

    /// Freezes the API server process (SIGSTOP): connections stay open but
    /// nothing is answered, so any API call made meanwhile hangs. Undo with
    /// [`resume_apiserver`](Self::resume_apiserver).
    pub fn pause_apiserver(&self) {
        self.signal_apiserver("-STOP");
    }

    /// Restarts the API server: stops it (SIGTERM, as a rollout would), so
    /// every connection and watch to it breaks, starts it again with the
    /// same flags on the same etcd and port, and waits until it answers.
    pub async fn restart_apiserver(&mut self) {
        self.apiserver.stop();
        self.apiserver = spawn_apiserver(&self.apiserver_args, self.dir.path());
        self.wait_ready().await;
    }

    /// Lets a paused API server go on (SIGCONT).
    pub fn resume_apiserver(&self) {
        self.signal_apiserver("-CONT");
    }

    fn signal_apiserver(&self, signal: &str) {
        let status = Command::new("kill")
            .args([signal, &self.apiserver.0.id().to_string()])
            .status()
            .expect("run kill");
        assert!(status.success(), "kill {signal} kube-apiserver failed");
    }

    /// A kubeconfig for this control plane (also what `KUBECONFIG` would point at).
    pub fn kubeconfig_yaml(&self) -> String {
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: test\n  cluster:\n    server: {}\n    insecure-skip-tls-verify: true\nusers:\n- name: admin\n  user:\n    token: {}\ncontexts:\n- name: test\n  context:\n    cluster: test\n    user: admin\ncurrent-context: test\n",
            self.url, self.token
        )
    }

    /// Writes the kubeconfig into the control plane's directory and returns its path.
    /// Written once (tests running side by side read it while another asks
    /// for it again).
    pub fn kubeconfig_file(&self) -> PathBuf {
        let path = self.dir.path().join("kubeconfig");
        if !path.exists() {
            // A whole file or none: written aside, then renamed.
            let aside = self
                .dir
                .path()
                .join(format!("kubeconfig.{:?}", std::thread::current().id()));
            std::fs::write(&aside, self.kubeconfig_yaml()).unwrap();
            std::fs::rename(&aside, &path).unwrap();
        }
        path
    }

    /// A kube-rs client as admin.
    pub async fn client(&self) -> Result<Client, kube::Error> {
        let kubeconfig = Kubeconfig::from_yaml(&self.kubeconfig_yaml()).expect("valid kubeconfig");
        let config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
            .await
            .expect("kubeconfig loads");
        Client::try_from(config)
    }

    /// The tails of both logs, for failure messages.
    pub fn logs(&self) -> String {
        let tail = |name: &str| {
            let text = std::fs::read_to_string(self.dir.path().join(name)).unwrap_or_default();
            let lines: Vec<&str> = text.lines().collect();
            lines[lines.len().saturating_sub(30)..].join("\n")
        };
        format!(
            "--- etcd.log\n{}\n--- apiserver.log\n{}",
            tail("etcd.log"),
            tail("apiserver.log")
        )
    }
}

/// Creates namespace `name` through `client`; panics if the API server refuses.
pub async fn create_namespace(client: &Client, name: &str) {
    let ns: k8s_openapi::api::core::v1::Namespace =
        serde_json::from_value(serde_json::json!({"metadata": {"name": name}})).expect("namespace");
    kube::Api::<k8s_openapi::api::core::v1::Namespace>::all(client.clone())
        .create(&kube::api::PostParams::default(), &ns)
        .await
        .expect("create namespace");
}

/// The audit-log check: from the API server's audit log, no pod was
/// deleted while one of the runners whose debug logs are `logs` had a call
/// in it (each call's time in its pod comes from the log), and no pod name
/// was created twice. Returns (pods created, pods deleted, calls checked).
pub fn assert_no_pod_deleted_in_use(
    plane: &ControlPlane,
    logs: &[String],
) -> (usize, usize, usize) {
    let uses: Vec<(String, std::time::SystemTime, std::time::SystemTime)> = logs
        .iter()
        .flat_map(|log| log.lines().filter_map(pod_use).collect::<Vec<_>>())
        .collect();
    let audit = plane.pod_audit();
    let deletes: Vec<_> = audit.iter().filter(|e| e.verb == "delete").collect();
    for d in &deletes {
        let in_use = uses
            .iter()
            .find(|(pod, from, to)| *pod == d.name && *from <= d.received && d.received <= *to);
        assert!(
            in_use.is_none(),
            "pod {} was deleted at {:?} while a call used it ({in_use:?})",
            d.name,
            d.received
        );
    }
    let created: Vec<&str> = audit
        .iter()
        .filter(|e| e.verb == "create" && e.code == 201)
        .map(|e| e.name.as_str())
        .collect();
    // A warm pool's names come back once their pod is gone.
    let once: Vec<&str> = created
        .iter()
        .copied()
        .filter(|n| !krm_fn_runner::domain::pod_cache::naming::is_pool_name(n))
        .collect();
    let unique: std::collections::HashSet<&str> = once.iter().copied().collect();
    assert_eq!(unique.len(), once.len(), "a pod created twice: {created:?}");
    eprintln!(
        "audit: {} pods created, {} deleted, {} calls checked against the deletions",
        created.len(),
        deletes.len(),
        uses.len()
    );
    (created.len(), deletes.len(), uses.len())
}

/// A pod's use by one call, from a runner's `evaluated in pod` debug line:
/// (pod, start, end), the end being the line's timestamp.
pub fn pod_use(line: &str) -> Option<(String, std::time::SystemTime, std::time::SystemTime)> {
    if !line.contains("evaluated in pod") {
        return None;
    }
    let end = humantime::parse_rfc3339(line.split_whitespace().next()?).ok()?;
    let field = |name: &str| {
        line.split_whitespace()
            .find_map(|w| w.strip_prefix(name)?.strip_prefix('='))
            .map(str::to_string)
    };
    let pod = field("pod")?;
    let call_us: u64 = field("call_us")?.parse().ok()?;
    Some((pod, end - Duration::from_micros(call_us), end))
}

/// Creates every object of the YAML stream `file` through `client` (what
/// `kubectl create -f` does), resolving each kind by API discovery.
pub async fn apply_file(client: &Client, file: &std::path::Path) {
    let text = std::fs::read(file).unwrap();
    let docs: Vec<serde_json::Value> =
        krm_fn_runner::domain::codec::from_yaml_documents(&text).unwrap();
    for doc in docs {
        let (group, version) = match doc["apiVersion"].as_str().unwrap().split_once('/') {
            Some((g, v)) => (g.to_string(), v.to_string()),
            None => (
                String::new(),
                doc["apiVersion"].as_str().unwrap().to_string(),
            ),
        };
        let gvk = kube::api::GroupVersionKind::gvk(&group, &version, doc["kind"].as_str().unwrap());
        let (resource, caps) = kube::discovery::pinned_kind(client, &gvk)
            .await
            .unwrap_or_else(|e| panic!("{gvk:?} from {}: {e}", file.display()));
        let object: kube::api::DynamicObject = serde_json::from_value(doc.clone()).unwrap();
        let api: kube::Api<kube::api::DynamicObject> = match caps.scope {
            kube::discovery::Scope::Namespaced => kube::Api::namespaced_with(
                client.clone(),
                doc["metadata"]["namespace"].as_str().unwrap_or("default"),
                &resource,
            ),
            kube::discovery::Scope::Cluster => kube::Api::all_with(client.clone(), &resource),
        };
        api.create(&kube::api::PostParams::default(), &object)
            .await
            .unwrap_or_else(|e| panic!("create {gvk:?} from {}: {e}", file.display()));
    }
}
