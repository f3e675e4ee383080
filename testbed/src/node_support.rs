//! A real single-node Kubernetes cluster for tests: etcd and kube-apiserver
//! (the control plane of `k8s_support`), containerd with runc and the CNI
//! bridge plugin (Debian's packages), kube-controller-manager,
//! kube-scheduler, kubelet and kube-proxy (iptables mode) of the same
//! release, CoreDNS with its kubernetes plugin (cluster DNS), and two OCI
//! registries: a plain one and one with basic auth and TLS, both serving the
//! images of `scripts/build-node-images.sh` (the pause image, the
//! wrapper-server images, the catalog functions).
//!
//! Everything lives in a network namespace of the test process's own: the
//! test binary's `main` calls [`enter_network_namespace`] before it starts
//! any thread, so the test, the node's processes and the runners the tests
//! start all share a namespace that has only `lo`, an empty bridge `node0`
//! (the node's address, [`NODE_IP`]; a default route into it, so anything not
//! local is dropped) and the CNI bridge of the pods. No traffic leaves it.
//! The mount namespace is the host's (kubelet's volume mounts must be
//! visible to containerd); runners get a private one only to see a
//! `resolv.conf` naming the cluster DNS ([`Node::host_command`]).
//!
//! Every path of the node is under one directory, `/tmp/krm-node-<pid>`;
//! the kubelet's cgroups under `/krm-node-<pid>` in every hierarchy; runc's
//! state under the node directory. [`Node::stop`] (also on drop) stops every
//! component, kills the containers, unmounts what the kubelet and containerd
//! mounted, removes the cgroups and the directory and detaches the
//! namespace's name; [`clean_stale_nodes`] does the same for the nodes of
//! test processes that were killed before they could.
//!
//! Facts of this environment the bed works around (see the book's pod
//! evaluator page, `docs/src/operators/pod-evaluator.md`): root here lacks `CAP_SYS_RESOURCE`, so containerd
//! clamps `oom_score_adj` (`restrict_oom_score_adj`); there is no `dummy`
//! link driver, so `node0` is an empty bridge.

use std::collections::BTreeMap;
use std::ffi::CString;
use std::io::Write as _;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Node as NodeObject;
use kube::{Api, Client};

use crate::k8s_support::{self, ControlPlane};
use crate::registry_support::{Setup, TestRegistry};

/// The node's address (on `node0`), where the kubelet and CoreDNS listen.
pub const NODE_IP: &str = "10.255.0.1";
/// The pods' addresses (the CNI bridge's host-local range).
pub const POD_CIDR: &str = "10.244.0.0/24";
/// The node's name.
pub const NODE_NAME: &str = "krmnode";
/// User and password of the private registry.
pub const PRIVATE_USER: &str = "puller";
/// See [`PRIVATE_USER`].
pub const PRIVATE_PASSWORD: &str = "node-bed-secret";
/// How long components get to start.
const START_PATIENCE: Duration = Duration::from_secs(120);

/// The built things the node runs, found (and built on first use) before
/// the test enters its network namespace, where the Go module proxy is out
/// of reach.
#[derive(Debug, Clone)]
pub struct Tools {
    /// `kube-apiserver` and `etcd` (scripts/build-test-apiserver.sh).
    pub assets: PathBuf,
    /// kubelet, kube-proxy, kube-scheduler, kube-controller-manager,
    /// coredns (scripts/build-node.sh).
    pub node: PathBuf,
    /// `registry/` and `images.txt` (scripts/build-node-images.sh).
    pub images: PathBuf,
}

impl Tools {
    /// Finds or builds everything: environment variables
    /// `KUBEBUILDER_ASSETS`, `KRM_FN_NODE_BIN` and `KRM_FN_NODE_IMAGES`, or
    /// the cached build scripts (which scripts/test.sh runs first).
    pub fn prepare() -> Tools {
        Tools {
            assets: k8s_support::assets(),
            node: k8s_support::cached_build("KRM_FN_NODE_BIN", "scripts/build-node.sh"),
            images: k8s_support::cached_build("KRM_FN_NODE_IMAGES", "scripts/build-node-images.sh"),
        }
    }
}

/// The name of this process's network namespace under `/run/netns`.
pub fn namespace_name() -> String {
    format!("krm-node-{}", std::process::id())
}

/// Moves this process into a new network namespace of its own and sets it
/// up as the node's host network: `lo`, the node's address on `node0`, IP
/// forwarding and bridge netfilter (kube-proxy's rules see bridged pod
/// traffic). Names it [`namespace_name`] (for `nsenter --net=/run/netns/…`
/// while debugging). Must run before any thread starts: a namespace change
/// applies to the calling thread only, and threads started later inherit it.
///
/// Panics when the process may not (it needs root, `CAP_SYS_ADMIN`).
pub fn enter_network_namespace() {
    // SAFETY: unshare takes no pointers; called while single-threaded.
    if unsafe { libc::unshare(libc::CLONE_NEWNET) } != 0 {
        panic!(
            "the real-node tests need their own network namespace, which needs root (CAP_SYS_ADMIN): unshare(CLONE_NEWNET) failed: {}",
            std::io::Error::last_os_error()
        );
    }
    let name = namespace_name();
    let pid = std::process::id().to_string();
    run("ip", &["netns", "attach", &name, &pid]);
    run("ip", &["link", "set", "lo", "up"]);
    run("ip", &["link", "add", "node0", "type", "bridge"]);
    run(
        "ip",
        &["addr", "add", &format!("{NODE_IP}/24"), "dev", "node0"],
    );
    run("ip", &["link", "set", "node0", "up"]);
    run("ip", &["route", "add", "default", "dev", "node0"]);
    std::fs::write("/proc/sys/net/ipv4/ip_forward", "1").expect("enable IP forwarding");
    std::fs::write("/proc/sys/net/bridge/bridge-nf-call-iptables", "1")
        .expect("bridge netfilter (the br_netfilter module) must be loaded");
}

/// Runs `program args`, panicking with its output if it fails.
fn run(program: &str, args: &[&str]) {
    let out = Command::new(program)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("run {program}: {e}"));
    assert!(
        out.status.success(),
        "{program} {} failed: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The cgroup v1 hierarchies of the machine (or the v2 root), where the
/// kubelet's cgroup root is made.
fn cgroup_mounts() -> Vec<PathBuf> {
    let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap_or_default();
    mounts
        .lines()
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            let (_, target, fstype) = (f.next()?, f.next()?, f.next()?);
            (fstype == "cgroup" || fstype == "cgroup2").then(|| PathBuf::from(target))
        })
        .collect()
}

/// Mount points under `dir`, deepest first.
fn mounts_under(dir: &Path) -> Vec<PathBuf> {
    let prefix = dir.to_string_lossy().into_owned();
    let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let mut found: Vec<PathBuf> = info
        .lines()
        .filter_map(|l| l.split_whitespace().nth(4))
        .filter(|m| *m == prefix || m.starts_with(&format!("{prefix}/")))
        .map(PathBuf::from)
        .collect();
    found.sort_by_key(|p| std::cmp::Reverse(p.as_os_str().len()));
    found.dedup();
    found
}

/// Processes whose command line mentions `needle` (components, containerd's
/// shims: their `-address` names the node's socket).
fn processes_mentioning(needle: &str) -> Vec<i32> {
    let me = std::process::id() as i32;
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|&pid| pid != me)
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|c| String::from_utf8_lossy(&c).contains(needle))
        })
        .collect()
}

/// Whether process `pid` exists.
fn alive(pid: i32) -> bool {
    // SAFETY: signal 0 only checks.
    unsafe { libc::kill(pid, 0) == 0 }
}

/// Removes what a node left behind in `dir` (cgroup root `cgroup`,
/// namespace name `netns`): its processes and shims, its containers (runc
/// state under `dir/runc`), its mounts, its cgroups, the namespace's name
/// and the directory. Safe to run twice.
fn remove_node(dir: &Path, cgroup: &str, netns: &str) {
    let needle = dir.to_string_lossy().into_owned();
    for pid in processes_mentioning(&needle) {
        // SAFETY: plain signal.
        unsafe { libc::kill(pid, libc::SIGKILL) };
    }
    let runc_root = dir.join("runc/k8s.io");
    if runc_root.is_dir() {
        let out = Command::new("runc")
            .arg("--root")
            .arg(&runc_root)
            .args(["list", "-q"])
            .output();
        for id in out
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .unwrap_or_default()
            .lines()
        {
            let _ = Command::new("runc")
                .arg("--root")
                .arg(&runc_root)
                .args(["kill", "--all", id, "KILL"])
                .stderr(Stdio::null())
                .status();
            let _ = Command::new("runc")
                .arg("--root")
                .arg(&runc_root)
                .args(["delete", "--force", id])
                .stderr(Stdio::null())
                .status();
        }
    }
    // Shims may have outlived the first pass (containerd restarts them).
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let left = processes_mentioning(&needle);
        if left.is_empty() || Instant::now() > deadline {
            break;
        }
        for pid in left {
            // SAFETY: plain signal.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    for m in mounts_under(dir) {
        let path = CString::new(m.to_string_lossy().as_bytes()).unwrap();
        // SAFETY: a valid C string; MNT_DETACH never blocks.
        unsafe { libc::umount2(path.as_ptr(), libc::MNT_DETACH) };
    }
    for hierarchy in cgroup_mounts() {
        let root = hierarchy.join(cgroup.trim_start_matches('/'));
        if root.is_dir() {
            remove_cgroup_tree(&root);
        }
    }
    let _ = Command::new("ip")
        .args(["netns", "delete", netns])
        .stderr(Stdio::null())
        .status();
    let _ = std::fs::remove_dir_all(dir);
}

/// Removes cgroup directory `dir` and its children, deepest first; a
/// cgroup still holding a process is killed first (a stray container).
fn remove_cgroup_tree(dir: &Path) {
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                remove_cgroup_tree(&e.path());
            }
        }
    }
    for _ in 0..50 {
        if std::fs::remove_dir(dir).is_ok() || !dir.exists() {
            return;
        }
        let procs = std::fs::read_to_string(dir.join("cgroup.procs")).unwrap_or_default();
        for pid in procs.lines().filter_map(|l| l.trim().parse::<i32>().ok()) {
            // SAFETY: plain signal.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Removes the nodes of test processes that died without stopping theirs
/// (a killed CI job, a SIGKILL): every `/tmp/krm-node-<pid>` whose process
/// is gone.
pub fn clean_stale_nodes() {
    let Ok(entries) = std::fs::read_dir("/tmp") else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(pid) = name
            .strip_prefix("krm-node-")
            .and_then(|p| p.parse::<i32>().ok())
        else {
            continue;
        };
        if pid as u32 == std::process::id() || alive(pid) {
            continue;
        }
        eprintln!("node bed: removing the node left by process {pid}");
        remove_node(&e.path(), &format!("/krm-node-{pid}"), &name);
    }
}

/// What a test binary's or benchmark's `main` does first, before any
/// thread starts: removes nodes left by killed runs, moves the process into
/// its own network namespace and starts the node there (on a runtime of
/// its own, dropped before returning). Call [`Tools::prepare`] before it:
/// builds need the Go module proxy, out of reach from the namespace.
pub fn enter_and_start(tools: &Tools) -> Node {
    clean_stale_nodes();
    enter_network_namespace();
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(Node::start(tools))
}

/// One component process; killed (SIGTERM, then SIGKILL) by [`Node::stop`].
struct Component {
    name: &'static str,
    child: Child,
}

/// A running single-node cluster; see the module documentation.
pub struct Node {
    /// The node directory (`/tmp/krm-node-<pid>`): configs, state, logs.
    pub dir: PathBuf,
    components: Mutex<Vec<Component>>,
    /// etcd and kube-apiserver.
    pub plane: std::sync::Arc<ControlPlane>,
    /// The plain registry (`127.0.0.1:<port>`), holding every node image.
    pub registry: TestRegistry,
    /// The registry with basic auth ([`PRIVATE_USER`]) and TLS, holding the
    /// same images; the node trusts its CA but has no credentials for it.
    pub private_registry: TestRegistry,
    /// `repository:tag` → manifest digest, of the node's images.
    pub images: BTreeMap<String, String>,
    cgroup_root: String,
    stopped: std::sync::atomic::AtomicBool,
}

impl Node {
    /// Starts the whole node in the current network namespace (see
    /// [`enter_network_namespace`]) and waits until the node is Ready and
    /// cluster DNS answers. Panics with the failing component's log.
    pub async fn start(tools: &Tools) -> Node {
        let started = Instant::now();
        let dir = PathBuf::from(format!("/tmp/{}", namespace_name()));
        let _ = std::fs::remove_dir_all(&dir);
        for sub in [
            "log",
            "run",
            "etc",
            "cni/net.d",
            "cni/ipam",
            "certs.d",
            "kubelet",
            "pod-logs",
        ] {
            std::fs::create_dir_all(dir.join(sub)).unwrap();
        }
        let cgroup_root = format!("/{}", namespace_name());
        make_cgroup_root(&cgroup_root);
        let images: BTreeMap<String, String> =
            std::fs::read_to_string(tools.images.join("images.txt"))
                .expect("images.txt of scripts/build-node-images.sh")
                .lines()
                .filter_map(|l| l.split_once(' '))
                .map(|(r, d)| (r.to_string(), d.to_string()))
                .collect();
        let seed = tools.images.join("registry");
        let registry = TestRegistry::start(Setup::anonymous().seeded(&seed));
        let private_registry =
            TestRegistry::start(Setup::tls_basic(PRIVATE_USER, PRIVATE_PASSWORD).seeded(&seed));
        let plane = std::sync::Arc::new(ControlPlane::start().await);
        let node = Node {
            dir,
            components: Mutex::new(Vec::new()),
            plane,
            registry,
            private_registry,
            images,
            cgroup_root,
            stopped: std::sync::atomic::AtomicBool::new(false),
        };
        node.write_configs();
        node.spawn(
            "containerd",
            Command::new("containerd")
                .arg("--config")
                .arg(node.dir.join("etc/containerd.toml")),
        );
        let kubeconfig = node.plane.kubeconfig_file();
        let bin = |name: &str| tools.node.join(name);
        node.spawn(
            "kube-controller-manager",
            Command::new(bin("kube-controller-manager"))
                .arg(format!("--kubeconfig={}", kubeconfig.display()))
                .args([
                    "--leader-elect=false",
                    "--bind-address=127.0.0.1",
                    "--allocate-node-cidrs=false",
                    "--controllers=*,-serviceaccount-token",
                    "--use-service-account-credentials=false",
                    "--v=1",
                ]),
        );
        node.spawn(
            "kube-scheduler",
            Command::new(bin("kube-scheduler"))
                .arg(format!("--kubeconfig={}", kubeconfig.display()))
                .args(["--leader-elect=false", "--bind-address=127.0.0.1", "--v=1"]),
        );
        node.wait_for("containerd's socket", || {
            node.dir.join("run/containerd.sock").exists()
        });
        node.spawn(
            "kubelet",
            Command::new(bin("kubelet"))
                .arg(format!(
                    "--config={}",
                    node.dir.join("etc/kubelet.yaml").display()
                ))
                .arg(format!("--kubeconfig={}", kubeconfig.display()))
                .arg(format!("--root-dir={}", node.dir.join("kubelet").display()))
                .arg(format!(
                    "--cert-dir={}",
                    node.dir.join("kubelet/pki").display()
                ))
                .arg(format!("--hostname-override={NODE_NAME}"))
                .arg(format!("--node-ip={NODE_IP}"))
                .arg("--v=1"),
        );
        node.spawn(
            "kube-proxy",
            Command::new(bin("kube-proxy"))
                .arg(format!(
                    "--config={}",
                    node.dir.join("etc/kube-proxy.yaml").display()
                ))
                .arg("--v=1"),
        );
        node.spawn(
            "coredns",
            Command::new(bin("coredns"))
                .arg("-conf")
                .arg(node.dir.join("etc/Corefile")),
        );
        let client = node.plane.client().await.expect("client");
        let nodes: Api<NodeObject> = Api::all(client);
        let deadline = Instant::now() + START_PATIENCE;
        loop {
            let ready = nodes
                .get_opt(NODE_NAME)
                .await
                .ok()
                .flatten()
                .is_some_and(|n| {
                    n.status
                        .and_then(|s| s.conditions)
                        .unwrap_or_default()
                        .iter()
                        .any(|c| c.type_ == "Ready" && c.status == "True")
                });
            if ready {
                break;
            }
            node.check_alive();
            assert!(
                Instant::now() < deadline,
                "the node did not become Ready:\n{}",
                node.logs("kubelet")
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        node.wait_for("CoreDNS to be ready", || {
            Command::new("curl")
                .args(["-sf", "-m", "1", "http://127.0.0.1:8181/ready"])
                .stdout(Stdio::null())
                .status()
                .is_ok_and(|s| s.success())
        });
        eprintln!(
            "node bed: node {NODE_NAME} ready in {:.1} s ({})",
            started.elapsed().as_secs_f64(),
            node.dir.display()
        );
        node
    }

    /// Writes containerd's, the CNI's, the kubelet's, kube-proxy's and
    /// CoreDNS's configuration, and the registries' hosts files.
    fn write_configs(&self) {
        let d = self.dir.display();
        let reg = &self.registry.addr;
        let pause = format!("{reg}/pause:3.10");
        write(
            &self.dir.join("etc/containerd.toml"),
            &format!(
                r#"version = 2
root = "{d}/containerd/root"
state = "{d}/containerd/state"
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper"]
[grpc]
  address = "{d}/run/containerd.sock"
[plugins."io.containerd.internal.v1.opt"]
  path = "{d}/containerd/opt"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{pause}"
  disable_apparmor = true
  # Root here lacks CAP_SYS_RESOURCE: runc cannot give the pause container
  # the oom_score_adj -998 the kubelet asks for; clamp to containerd's own.
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = "{d}/runc"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "{d}/cni/net.d"
  [plugins."io.containerd.grpc.v1.cri".registry]
    config_path = "{d}/certs.d"
"#
            ),
        );
        self.trust_registry(reg, None);
        let private = &self.private_registry.addr;
        let ca = self
            .private_registry
            .ca_dir
            .as_ref()
            .expect("the private registry serves TLS")
            .join("ca.crt");
        self.trust_registry(private, Some(&ca));
        write(
            &self.dir.join("cni/net.d/10-krmnet.conflist"),
            &format!(
                r#"{{
  "cniVersion": "1.0.0",
  "name": "krmnet",
  "plugins": [
    {{"type": "bridge", "bridge": "cni0", "isGateway": true, "ipMasq": false, "hairpinMode": true,
     "ipam": {{"type": "host-local", "dataDir": "{d}/cni/ipam",
              "ranges": [[{{"subnet": "{POD_CIDR}"}}]], "routes": [{{"dst": "0.0.0.0/0"}}]}}}},
    {{"type": "portmap", "capabilities": {{"portMappings": true}}}}
  ]
}}
"#
            ),
        );
        write(
            &self.dir.join("etc/resolv.conf"),
            &format!("nameserver {NODE_IP}\n"),
        );
        write(
            &self.dir.join("etc/kubelet.yaml"),
            &format!(
                r#"apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
cgroupDriver: cgroupfs
cgroupRoot: {cg}
failSwapOn: false
failCgroupV1: false
containerRuntimeEndpoint: unix://{d}/run/containerd.sock
address: {NODE_IP}
healthzBindAddress: 127.0.0.1
readOnlyPort: 0
authentication:
  anonymous: {{enabled: true}}
  webhook: {{enabled: false}}
authorization: {{mode: AlwaysAllow}}
clusterDNS: [{NODE_IP}]
clusterDomain: cluster.local
resolvConf: {d}/etc/resolv.conf
podLogsDir: {d}/pod-logs
registerNode: true
serializeImagePulls: false
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {{memory.available: "100Mi", nodefs.available: "1%", imagefs.available: "1%", nodefs.inodesFree: "1%"}}
syncFrequency: 10s
fileCheckFrequency: 20s
nodeStatusReportFrequency: 10s
"#,
                cg = self.cgroup_root
            ),
        );
        write(
            &self.dir.join("etc/kube-proxy.yaml"),
            &format!(
                r#"apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection: {{kubeconfig: {kc}}}
mode: iptables
hostnameOverride: {NODE_NAME}
clusterCIDR: 10.244.0.0/16
bindAddress: {NODE_IP}
healthzBindAddress: 127.0.0.1:10256
metricsBindAddress: 127.0.0.1:10249
conntrack: {{maxPerCore: 0, min: 0, tcpEstablishedTimeout: 0s, tcpCloseWaitTimeout: 0s}}
iptables: {{localhostNodePorts: false, syncPeriod: 30s, minSyncPeriod: 0s}}
"#,
                kc = self.plane.kubeconfig_file().display()
            ),
        );
        write(
            &self.dir.join("etc/Corefile"),
            &format!(
                r#".:53 {{
    bind {NODE_IP}
    errors
    ready 127.0.0.1:8181
    kubernetes cluster.local in-addr.arpa ip6.arpa {{
        kubeconfig {kc} test
        pods insecure
        ttl 5
    }}
    cache 5
}}
"#,
                kc = self.plane.kubeconfig_file().display()
            ),
        );
    }

    /// Tells containerd how to reach registry `host` (`host:port`): over
    /// HTTPS trusting `ca`, or over plain HTTP without one. Read at each
    /// pull, so a test may add a registry while the node runs.
    pub fn trust_registry(&self, host: &str, ca: Option<&Path>) {
        let (scheme, ca_line) = match ca {
            Some(ca) => ("https", format!("  ca = \"{}\"\n", ca.display())),
            None => ("http", String::new()),
        };
        let dir = self.dir.join("certs.d").join(host);
        std::fs::create_dir_all(&dir).unwrap();
        write(
            &dir.join("hosts.toml"),
            &format!(
                "server = \"{scheme}://{host}\"\n[host.\"{scheme}://{host}\"]\n  capabilities = [\"pull\", \"resolve\"]\n{ca_line}"
            ),
        );
    }

    /// Starts component `name` with its output in `log/<name>.log`; it is
    /// killed when the test process dies (`PR_SET_PDEATHSIG`: the node is
    /// started from the main thread, which lives as long as the process).
    fn spawn(&self, name: &'static str, cmd: &mut Command) {
        let log = std::fs::File::create(self.dir.join(format!("log/{name}.log"))).unwrap();
        // SAFETY: prctl is async-signal-safe.
        unsafe {
            cmd.pre_exec(|| {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                Ok(())
            });
        }
        let child = cmd
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("start {name}: {e}"));
        self.components
            .lock()
            .unwrap()
            .push(Component { name, child });
    }

    /// Panics with its log if a component has exited.
    fn check_alive(&self) {
        let mut components = self.components.lock().unwrap();
        for c in components.iter_mut() {
            if let Ok(Some(status)) = c.child.try_wait() {
                let name = c.name;
                drop(components);
                panic!("{name} exited with {status}:\n{}", self.logs(name));
            }
        }
    }

    /// Polls `ok` every 100 ms until it holds; panics after
    /// [`START_PATIENCE`] or when a component exits.
    fn wait_for(&self, what: &str, mut ok: impl FnMut() -> bool) {
        let deadline = Instant::now() + START_PATIENCE;
        while !ok() {
            self.check_alive();
            assert!(Instant::now() < deadline, "timed out waiting for {what}");
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// The last 40 lines of component `name`'s log.
    pub fn logs(&self, name: &str) -> String {
        let text =
            std::fs::read_to_string(self.dir.join(format!("log/{name}.log"))).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        format!(
            "--- {name}.log\n{}",
            lines[lines.len().saturating_sub(40)..].join("\n")
        )
    }

    /// A kube-rs client as admin.
    pub async fn client(&self) -> Client {
        self.plane.client().await.expect("client")
    }

    /// The full reference of node image `repo_tag` in the plain registry.
    pub fn image(&self, repo_tag: &str) -> String {
        assert!(
            self.images.contains_key(repo_tag),
            "no node image {repo_tag} (scripts/build-node-images.sh builds {:?})",
            self.images.keys().collect::<Vec<_>>()
        );
        format!("{}/{repo_tag}", self.registry.addr)
    }

    /// The image of catalog function `f` in the plain registry.
    pub fn function_image(&self, f: &str) -> String {
        self.image(&format!("krm-fn/{f}:{}", crate::common::catalog_version(f)))
    }

    /// Pushes a one-layer function image `repo_tag` to the plain registry
    /// and deletes its layer blob: the runner reads its manifest and config
    /// (the entrypoint), the node cannot pull it (`ErrImagePull`). Returns
    /// the image reference.
    pub async fn unpullable_image(&self, repo_tag: &str) -> String {
        let registry = &self.registry;
        registry
            .push_image(
                repo_tag,
                "amd64",
                Some(&["/usr/local/bin/function"]),
                None,
                "no-layer",
            )
            .await;
        let (repo, tag) = repo_tag.rsplit_once(':').expect("repository:tag");
        let out = Command::new("curl")
            .args([
                "-sf",
                "-H",
                "Accept: application/vnd.oci.image.manifest.v1+json",
            ])
            .arg(format!(
                "http://{}/v2/{repo}/manifests/{tag}",
                registry.addr
            ))
            .output()
            .expect("run curl");
        assert!(out.status.success(), "read the manifest of {repo_tag}");
        let manifest: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let layer = manifest["layers"][0]["digest"].as_str().unwrap();
        let deleted = Command::new("curl")
            .args(["-sf", "-X", "DELETE"])
            .arg(format!("http://{}/v2/{repo}/blobs/{layer}", registry.addr))
            .status()
            .expect("run curl");
        assert!(deleted.success(), "delete the layer blob of {repo_tag}");
        format!("{}/{repo_tag}", registry.addr)
    }

    /// This checkout's wrapper-server image in the plain registry.
    pub fn wrapper_image(&self) -> String {
        self.image("krm/wrapper-server:node")
    }

    /// Porch v1.5.3's wrapper-server image in the plain registry.
    pub fn porch_wrapper_image(&self) -> String {
        self.image("porch/wrapper-server:v1.5.3")
    }

    /// The memory limits (bytes) that the memory cgroups of the containers
    /// of the pod with UID `pod_uid` enforce (cgroup v1
    /// `memory.limit_in_bytes` or v2 `memory.max`), unlimited ones left
    /// out, smallest first; empty when the pod's cgroup is not found.
    pub fn container_memory_limits(&self, pod_uid: &str) -> Vec<u64> {
        // The kubelet names pod cgroups pod<uid> under the QoS classes of
        // its cgroup root; containerd adds one per container (its ID).
        let root = cgroup_mounts()
            .into_iter()
            .map(|h| h.join(self.cgroup_root.trim_start_matches('/')))
            .find(|p| p.join("kubepods").is_dir() && p.to_string_lossy().contains("memory"));
        let Some(pod_dir) = root.and_then(|r| find_dir(&r, &format!("pod{pod_uid}"))) else {
            return Vec::new();
        };
        let Ok(entries) = std::fs::read_dir(&pod_dir) else {
            return Vec::new();
        };
        let mut limits: Vec<u64> = entries
            .flatten()
            .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
            .filter_map(|e| {
                let text = std::fs::read_to_string(e.path().join("memory.limit_in_bytes"))
                    .or_else(|_| std::fs::read_to_string(e.path().join("memory.max")))
                    .ok()?;
                text.trim().parse().ok()
            })
            .filter(|&l: &u64| l < u64::MAX / 2)
            .collect();
        limits.sort();
        limits
    }

    /// A command running `program` as a process of the node's host network
    /// that resolves names through the cluster DNS (as a pod would): in a
    /// private mount namespace where `/etc/resolv.conf` names CoreDNS. For
    /// the runners under test, Porch's runner and porch-server.
    pub fn host_command(&self, program: &Path) -> Command {
        let resolv = CString::new(
            self.dir
                .join("etc/resolv.conf")
                .to_string_lossy()
                .as_bytes(),
        )
        .unwrap();
        let mut cmd = Command::new(program);
        // SAFETY: only async-signal-safe system calls, on memory prepared
        // before the fork.
        unsafe {
            cmd.pre_exec(move || {
                let none = std::ptr::null();
                if libc::unshare(libc::CLONE_NEWNS) != 0
                    || libc::mount(
                        none,
                        c"/".as_ptr(),
                        none,
                        libc::MS_REC | libc::MS_PRIVATE,
                        std::ptr::null(),
                    ) != 0
                    || libc::mount(
                        resolv.as_ptr(),
                        c"/etc/resolv.conf".as_ptr(),
                        none,
                        libc::MS_BIND,
                        std::ptr::null(),
                    ) != 0
                {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        cmd
    }

    /// Stops everything and removes what the node left (see
    /// [`remove_node`]); the control plane and registries stop when the
    /// node is dropped. Idempotent.
    pub fn stop(&self) {
        if self.stopped.swap(true, std::sync::atomic::Ordering::SeqCst) {
            return;
        }
        let mut components = std::mem::take(&mut *self.components.lock().unwrap());
        // The node agents first, containerd after them.
        components.sort_by_key(|c| c.name == "containerd");
        for c in &components {
            // SAFETY: plain signal.
            unsafe { libc::kill(c.child.id() as i32, libc::SIGTERM) };
        }
        let deadline = Instant::now() + Duration::from_secs(5);
        for c in &mut components {
            while Instant::now() < deadline && matches!(c.child.try_wait(), Ok(None)) {
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = c.child.kill();
            let _ = c.child.wait();
        }
        if let Some(keep) = std::env::var_os("KRM_FN_NODE_KEEP_LOGS") {
            // The components' logs, for a look after the node is gone.
            let _ = Command::new("cp")
                .arg("-a")
                .arg(self.dir.join("log"))
                .arg(&keep)
                .status();
        }
        remove_node(&self.dir, &self.cgroup_root, &namespace_name());
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The first directory named `name` under `dir` (depth first).
fn find_dir(dir: &Path, name: &str) -> Option<PathBuf> {
    for e in std::fs::read_dir(dir).ok()?.flatten() {
        if !e.file_type().is_ok_and(|t| t.is_dir()) {
            continue;
        }
        if e.file_name() == name {
            return Some(e.path());
        }
        if let Some(found) = find_dir(&e.path(), name) {
            return Some(found);
        }
    }
    None
}

/// Makes the kubelet's cgroup root in every hierarchy (cpuset's needs its
/// CPUs and memory nodes from the parent before a process may join).
fn make_cgroup_root(root: &str) {
    for hierarchy in cgroup_mounts() {
        let dir = hierarchy.join(root.trim_start_matches('/'));
        let _ = std::fs::create_dir_all(&dir);
        for file in ["cpuset.cpus", "cpuset.mems"] {
            if let Ok(v) = std::fs::read_to_string(hierarchy.join(file)) {
                let _ = std::fs::write(dir.join(file), v.trim());
            }
        }
    }
}

fn write(path: &Path, text: &str) {
    let mut f = std::fs::File::create(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    f.write_all(text.as_bytes()).unwrap();
}
