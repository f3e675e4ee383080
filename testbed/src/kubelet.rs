//! A test kubelet for the pod evaluator's test bed: it watches the function
//! pods of one namespace on the real API server and, for each, starts the
//! real `wrapper-server` binary as a local process on its own loopback port
//! with the catalog function the pod's image names, then publishes the pod
//! through the API server as a kubelet and the endpoint controllers would:
//! pod status (podIP, phase Running, Ready), an EndpointSlice and a core/v1
//! Endpoints object for the pod's service (Porch's Role grants the runner
//! only the latter). The runner reaches the wrapper through its
//! `--wrapper-address-map` file, which this kubelet keeps up to date for
//! both address modes (service DNS name and pod IP).
//!
//! With [`Kubelet::start_with_images`] it runs the pod's own containers
//! instead, from image layouts on disk: every init container's command
//! (Porch's `copy-wrapper-server` copies the wrapper server out of the
//! wrapper image into the `emptyDir`), then the `function` container's
//! command and args with its environment. Absolute paths in commands and
//! arguments are mapped the way the container would see them: under a
//! volume mount to that volume's directory, anything else into the image's
//! layout. Only the network is emulated (the wrapper listens on a loopback
//! port instead of 9446).
//!
//! On request it makes the next pod of a function fail or never become
//! ready, fails a running pod, or kills a wrapper process (a crash).
//!
//! Pods are never bound to a node (there is no scheduler), so the API
//! server deletes them at once; the pod IPs are fake but valid (10.244/16),
//! since the API server rejects loopback addresses in EndpointSlices.
//!
//! What it is for now that a real node exists (`node_support`,
//! `tests/pod_real.rs`): fault injection a real node cannot do cheaply or
//! deterministically — a pod that fails at start or never becomes ready on
//! demand, a wrapper SIGKILLed mid-call at a chosen moment, an API server
//! frozen or restarted under load with pods starting in milliseconds, and
//! the property-style loads of `tests/beds/k8s_pod_evaluator.rs` — and the
//! FunctionConfig generation's RBAC audit (`tests/beds/k8s_function_config.rs`),
//! which runs on a bare API server. What it cannot show moved to the real
//! node: cold start and readiness (probe period, the wrapper's own health
//! check), graceful deletion (a deleted pod stays Running and Ready with a
//! deletion timestamp), image pull and container errors with the kubelet's
//! reasons, pull secrets used by the kubelet, kube-proxy's ClusterIP and
//! EndpointSlices from the real controller, cluster DNS, memory limits in
//! cgroups, Porch's own wrapper image and template, a warm-pool name held
//! by a terminating pod, adoption and two replicas on real pods.
//!
//! Tests use it as `krm_fn_testbed::kubelet`, beside
//! [`k8s_support`](crate::k8s_support) and [`common`](crate::common).

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::{Container, Endpoints, Pod};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client};
use tokio_stream::StreamExt;

use crate::common::Runner;

/// What happens to the next pod of a function.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Plan {
    /// Phase Failed at once (an image that cannot run).
    Fail,
    /// Stays Pending forever.
    NeverReady,
}

struct Wrapper {
    process: Runner,
    ip: String,
    /// The pod's volumes, when its containers run from image layouts.
    _volumes: Option<tempfile::TempDir>,
}

/// Image layouts for [`Kubelet::start_with_images`]: the wrapper image's
/// files, and function images made from the catalog binaries.
pub struct Images {
    /// The wrapper server's image (`WRAPPER_SERVER_IMAGE`).
    pub wrapper_image: String,
    /// The root of its layout (holding `home/nonroot/wrapper-server/`).
    pub wrapper_root: PathBuf,
    /// Where function image layouts are made: `<dir>/<function>/usr/local/bin/function`
    /// is the catalog binary of the function the image names.
    pub function_roots: PathBuf,
}

impl Images {
    /// The layout of `image`.
    fn root(&self, image: &str, functions: &std::path::Path) -> PathBuf {
        if image == self.wrapper_image {
            return self.wrapper_root.clone();
        }
        let function = function_of(image);
        let root = self.function_roots.join(&function);
        let entry = root.join("usr/local/bin/function");
        if !entry.exists() {
            std::fs::create_dir_all(entry.parent().unwrap()).unwrap();
            let _ = std::os::unix::fs::symlink(functions.join(&function), &entry);
        }
        root
    }
}

/// Makes the wrapper image's layout in `root`: Porch's
/// `/home/nonroot/wrapper-server/wrapper-server`, the built binary.
pub fn wrapper_image_layout(root: &std::path::Path) {
    let dir = root.join("home/nonroot/wrapper-server");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::copy(
        crate::common::built_binary("wrapper-server"),
        dir.join("wrapper-server"),
    )
    .expect("copy wrapper-server into the image layout");
}

#[derive(Default)]
struct State {
    wrappers: HashMap<String, Wrapper>,
    handled: HashSet<String>,
    plans: HashMap<String, Vec<Plan>>,
    started: u64,
    next_ip: u32,
}

struct Inner {
    client: Client,
    namespace: String,
    functions: PathBuf,
    map_file: PathBuf,
    images: Option<Images>,
    state: Mutex<State>,
}

/// The running test kubelet; stops its wrappers and its watch when dropped.
pub struct Kubelet {
    inner: Arc<Inner>,
    task: tokio::task::JoinHandle<()>,
}

/// The function name of an image: its last path segment without tag or digest.
pub fn function_of(image: &str) -> String {
    let last = image.rsplit('/').next().unwrap_or(image);
    let last = last.split('@').next().unwrap_or(last);
    last.split(':').next().unwrap_or(last).to_string()
}

fn function_image(pod: &Pod) -> Option<String> {
    pod.spec
        .as_ref()?
        .containers
        .iter()
        .find(|c| c.name == "function")
        .and_then(|c| c.image.clone())
}

/// The `name: value` environment of the pod's `function` container, which
/// a kubelet gives the container (here: the wrapper process), through
/// [`loopback_metrics`].
fn container_env(pod: &Pod) -> Vec<(String, String)> {
    loopback_metrics(
        pod.spec
            .as_ref()
            .and_then(|s| s.containers.iter().find(|c| c.name == "function"))
            .and_then(|c| c.env.clone())
            .unwrap_or_default()
            .into_iter()
            .filter_map(|v| Some((v.name, v.value?)))
            .collect(),
    )
}

/// In a cluster each pod has its own network namespace; here every wrapper
/// shares the host's loopback, so the metrics endpoint a pod template sets
/// (Porch's `0.0.0.0:9464`) becomes a free loopback port, as the wrapper's
/// 9446 does.
fn loopback_metrics(env: Vec<(String, String)>) -> Vec<(String, String)> {
    let mut env: Vec<(String, String)> = env
        .into_iter()
        .filter(|(name, _)| {
            name != "OTEL_EXPORTER_PROMETHEUS_HOST" && name != "OTEL_EXPORTER_PROMETHEUS_PORT"
        })
        .collect();
    env.push(("OTEL_EXPORTER_PROMETHEUS_HOST".into(), "127.0.0.1".into()));
    env.push(("OTEL_EXPORTER_PROMETHEUS_PORT".into(), "0".into()));
    env
}

/// The `--max-request-body-size` value the runner put into the pod's args.
fn body_size(pod: &Pod) -> String {
    let args = pod
        .spec
        .as_ref()
        .and_then(|s| s.containers.iter().find(|c| c.name == "function"))
        .and_then(|c| c.args.clone())
        .unwrap_or_default();
    args.iter()
        .position(|a| a == "--max-request-body-size")
        .and_then(|i| args.get(i + 1).cloned())
        .unwrap_or_else(|| "6291456".into())
}

impl Kubelet {
    /// Starts watching the function pods of `namespace`; wrappers run the
    /// binaries in `functions` (named like the functions) and are announced
    /// in `map_file`.
    pub fn start(client: Client, namespace: &str, functions: PathBuf, map_file: PathBuf) -> Self {
        Self::launch(client, namespace, functions, map_file, None)
    }

    /// As [`Kubelet::start`], but runs each pod's own init and `function`
    /// containers from the layouts of `images`.
    pub fn start_with_images(
        client: Client,
        namespace: &str,
        functions: PathBuf,
        map_file: PathBuf,
        images: Images,
    ) -> Self {
        Self::launch(client, namespace, functions, map_file, Some(images))
    }

    fn launch(
        client: Client,
        namespace: &str,
        functions: PathBuf,
        map_file: PathBuf,
        images: Option<Images>,
    ) -> Self {
        let inner = Arc::new(Inner {
            client,
            namespace: namespace.to_string(),
            functions,
            map_file,
            images,
            state: Mutex::new(State::default()),
        });
        inner.write_map();
        let task = tokio::spawn(inner.clone().run());
        Kubelet { inner, task }
    }

    /// The next pod of `function` gets `plan` (plans queue up per function).
    pub fn plan(&self, function: &str, plan: Plan) {
        self.inner
            .state
            .lock()
            .unwrap()
            .plans
            .entry(function.to_string())
            .or_default()
            .push(plan);
    }

    /// Wrapper processes running now.
    pub fn processes(&self) -> usize {
        let mut state = self.inner.state.lock().unwrap();
        state
            .wrappers
            .retain(|_, w| crate::common::alive(w.process.pid()));
        state.wrappers.len()
    }

    /// Wrapper processes started so far.
    pub fn started(&self) -> u64 {
        self.inner.state.lock().unwrap().started
    }

    /// Pods with a running wrapper.
    pub fn running_pods(&self) -> Vec<String> {
        let mut pods: Vec<String> = self
            .inner
            .state
            .lock()
            .unwrap()
            .wrappers
            .keys()
            .cloned()
            .collect();
        pods.sort();
        pods
    }

    /// The loopback address the wrapper of `pod` listens on.
    pub fn wrapper_address(&self, pod: &str) -> Option<String> {
        let state = self.inner.state.lock().unwrap();
        state.wrappers.get(pod).map(|w| w.process.address.clone())
    }

    /// What the wrapper of `pod` logged so far.
    pub fn wrapper_log(&self, pod: &str) -> Option<String> {
        let state = self.inner.state.lock().unwrap();
        state.wrappers.get(pod).map(|w| w.process.log())
    }

    /// Kills the wrapper of `pod` and its function processes with SIGKILL,
    /// as a crash would; the pod object is left as it is.
    pub fn kill_wrapper(&self, pod: &str) {
        let wrapper = self.inner.state.lock().unwrap().wrappers.remove(pod);
        if let Some(w) = wrapper {
            kill_tree(w.process.pid());
        }
        self.inner.write_map();
    }

    /// Stops the wrapper of `pod` and sets the pod's phase to Failed.
    pub async fn fail(&self, pod: &str) {
        self.inner.stop(pod);
        self.inner.set_failed(pod).await;
    }

    /// Deletes `pod` through the API server, behind the runner's back.
    pub async fn vanish(&self, pod: &str) {
        let pods: Api<Pod> = Api::namespaced(self.inner.client.clone(), &self.inner.namespace);
        pods.delete(pod, &DeleteParams::default())
            .await
            .expect("delete the pod");
    }
}

impl Drop for Kubelet {
    fn drop(&mut self) {
        self.task.abort();
        let wrappers: Vec<Wrapper> = self
            .inner
            .state
            .lock()
            .unwrap()
            .wrappers
            .drain()
            .map(|(_, w)| w)
            .collect();
        for w in wrappers {
            kill_tree(w.process.pid());
        }
    }
}

/// SIGKILLs `pid` and its descendants (the function processes of a wrapper).
fn kill_tree(pid: u32) {
    let mut children = Vec::new();
    if let Ok(dir) = std::fs::read_dir("/proc") {
        for entry in dir.flatten() {
            let Ok(child) = entry.file_name().to_string_lossy().parse::<u32>() else {
                continue;
            };
            let stat = std::fs::read_to_string(format!("/proc/{child}/stat")).unwrap_or_default();
            let ppid = stat
                .rsplit(')')
                .next()
                .and_then(|r| r.split_whitespace().nth(1))
                .and_then(|p| p.parse::<u32>().ok());
            if ppid == Some(pid) {
                children.push(child);
            }
        }
    }
    let _ = std::process::Command::new("kill")
        .args(["-KILL", &pid.to_string()])
        .status();
    for c in children {
        kill_tree(c);
    }
}

impl Inner {
    fn pods(&self) -> Api<Pod> {
        Api::namespaced(self.client.clone(), &self.namespace)
    }

    fn slices(&self) -> Api<EndpointSlice> {
        Api::namespaced(self.client.clone(), &self.namespace)
    }

    fn endpoints(&self) -> Api<Endpoints> {
        Api::namespaced(self.client.clone(), &self.namespace)
    }

    /// Runs `pod`'s init containers, then starts its `function` container,
    /// from the image layouts, with its volumes in a fresh directory.
    fn run_containers(
        &self,
        pod: &Pod,
        images: &Images,
    ) -> Result<(Runner, tempfile::TempDir), String> {
        let spec = pod.spec.as_ref().ok_or("no spec")?;
        let volumes = tempfile::tempdir().map_err(|e| e.to_string())?;
        for v in spec.volumes.iter().flatten() {
            std::fs::create_dir_all(volumes.path().join(&v.name)).map_err(|e| e.to_string())?;
        }
        let map = |c: &Container, arg: &str| -> String {
            if !arg.starts_with('/') {
                return arg.to_string();
            }
            let mount = c
                .volume_mounts
                .iter()
                .flatten()
                .filter(|m| std::path::Path::new(arg).starts_with(&m.mount_path))
                .max_by_key(|m| m.mount_path.len());
            let path = match mount {
                Some(m) => volumes.path().join(&m.name).join(
                    std::path::Path::new(arg)
                        .strip_prefix(&m.mount_path)
                        .unwrap(),
                ),
                None => {
                    let root = images.root(c.image.as_deref().unwrap_or_default(), &self.functions);
                    root.join(arg.trim_start_matches('/'))
                }
            };
            // Keep a trailing "/." (cp -a SRC/. DST copies the contents).
            let mut path = path.display().to_string();
            if arg.ends_with("/.") && !path.ends_with("/.") {
                path.push_str("/.");
            }
            path
        };
        let command_line = |c: &Container| -> Vec<String> {
            c.command
                .iter()
                .flatten()
                .chain(c.args.iter().flatten())
                .map(|a| map(c, a))
                .collect()
        };
        for init in spec.init_containers.iter().flatten() {
            let argv = command_line(init);
            let (program, args) = argv.split_first().ok_or("init container without command")?;
            let out = std::process::Command::new(program)
                .args(args)
                .output()
                .map_err(|e| format!("init container {}: {program}: {e}", init.name))?;
            if !out.status.success() {
                return Err(format!(
                    "init container {} failed: {}",
                    init.name,
                    String::from_utf8_lossy(&out.stderr)
                ));
            }
        }
        let function = spec
            .containers
            .iter()
            .find(|c| c.name == "function")
            .ok_or("no function container")?;
        let argv = command_line(function);
        let (program, args) = argv
            .split_first()
            .ok_or("function container without command")?;
        if !std::path::Path::new(program).is_file() {
            return Err(format!(
                "{program} does not exist (was the wrapper copied?)"
            ));
        }
        let env = loopback_metrics(
            function
                .env
                .iter()
                .flatten()
                .map(|e| (e.name.clone(), e.value.clone().unwrap_or_default()))
                .collect(),
        );
        let mut args = args.to_vec();
        args.push("--shutdown-grace-period=1s".into());
        // Flags after `--` belong to the function: put ours before it.
        if let Some(i) = args.iter().position(|a| a == "--") {
            let flag = args.pop().unwrap();
            args.insert(i, flag);
        }
        Ok((
            Runner::start_program(std::path::Path::new(program), &args, &env),
            volumes,
        ))
    }

    /// Rewrites the address map: service name and pod IP of every wrapper.
    fn write_map(&self) {
        let state = self.state.lock().unwrap();
        let mut text = String::from("# test kubelet: wrapper endpoints\n");
        for (pod, w) in &state.wrappers {
            let addr = &w.process.address;
            text.push_str(&format!(
                "{pod}.{}.svc.cluster.local:9446 {addr}\n{}:9446 {addr}\n",
                self.namespace, w.ip
            ));
        }
        let tmp = self.map_file.with_extension("tmp");
        std::fs::write(&tmp, text).expect("write the address map");
        std::fs::rename(&tmp, &self.map_file).expect("replace the address map");
    }

    async fn run(self: Arc<Self>) {
        let config = watcher::Config::default().labels("fn.kpt.dev/image");
        let mut events = Box::pin(watcher(self.pods(), config).default_backoff());
        // The pods of a (re)listing, to stop those it no longer holds: a
        // deletion made while the watch was down is never reported.
        let mut listed: Option<HashSet<String>> = None;
        while let Some(event) = events.next().await {
            match event {
                Ok(watcher::Event::Init) => listed = Some(HashSet::new()),
                Ok(watcher::Event::InitDone) => {
                    let present = listed.take().unwrap_or_default();
                    let vanished: Vec<String> = self
                        .state
                        .lock()
                        .unwrap()
                        .handled
                        .iter()
                        .filter(|n| !present.contains(*n))
                        .cloned()
                        .collect();
                    for name in vanished {
                        self.gone(&name).await;
                    }
                }
                Ok(watcher::Event::Apply(pod)) | Ok(watcher::Event::InitApply(pod)) => {
                    let name = pod.metadata.name.clone().unwrap_or_default();
                    if let Some(l) = &mut listed {
                        l.insert(name.clone());
                    }
                    if pod.metadata.deletion_timestamp.is_some() {
                        self.gone(&name).await;
                        continue;
                    }
                    let new = self.state.lock().unwrap().handled.insert(name.clone());
                    if new {
                        let me = self.clone();
                        tokio::spawn(async move { me.admit(pod).await });
                    }
                }
                Ok(watcher::Event::Delete(pod)) => {
                    let name = pod.metadata.name.clone().unwrap_or_default();
                    self.gone(&name).await;
                }
                Err(e) => eprintln!("test kubelet: watch error: {e}"),
            }
        }
    }

    /// Stops the wrapper of `name`, forgets the pod and removes its slice.
    async fn gone(&self, name: &str) {
        self.stop(name);
        self.state.lock().unwrap().handled.remove(name);
        let _ = self
            .slices()
            .delete(&format!("{name}-kubelet"), &DeleteParams::default())
            .await;
        let _ = self
            .endpoints()
            .delete(name, &DeleteParams::default())
            .await;
    }

    fn stop(&self, name: &str) {
        let wrapper = self.state.lock().unwrap().wrappers.remove(name);
        if let Some(w) = wrapper {
            kill_tree(w.process.pid());
            self.write_map();
        }
    }

    async fn set_failed(&self, name: &str) {
        let status = serde_json::json!({"status": {
            "phase": "Failed",
            "reason": "TestKubelet",
            "message": "failed on request of the test",
            "conditions": [{"type": "Ready", "status": "False"}],
        }});
        let _ = self
            .pods()
            .patch_status(name, &PatchParams::default(), &Patch::Merge(&status))
            .await;
    }

    /// Runs a new pod: its wrapper, its status, its endpoint.
    async fn admit(&self, pod: Pod) {
        let name = pod.metadata.name.clone().unwrap_or_default();
        let Some(image) = function_image(&pod) else {
            return;
        };
        let function = function_of(&image);
        let plan = {
            let mut state = self.state.lock().unwrap();
            state
                .plans
                .get_mut(&function)
                .and_then(|p| (!p.is_empty()).then(|| p.remove(0)))
        };
        match plan {
            Some(Plan::Fail) => return self.set_failed(&name).await,
            Some(Plan::NeverReady) => return,
            None => {}
        }
        let (process, volumes) = if let Some(images) = &self.images {
            match tokio::task::block_in_place(|| self.run_containers(&pod, images)) {
                Ok((p, v)) => (p, Some(v)),
                Err(e) => {
                    eprintln!("test kubelet: pod {name} cannot run: {e}");
                    return self.set_failed(&name).await;
                }
            }
        } else {
            let binary = self.functions.join(&function);
            let size = body_size(&pod);
            let env = container_env(&pod);
            let p = tokio::task::spawn_blocking(move || {
                let env: Vec<(&str, &str)> =
                    env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
                Runner::start_wrapper_with_env(
                    &[
                        "--max-request-body-size",
                        &size,
                        "--shutdown-grace-period=1s",
                        "--",
                        binary.to_str().unwrap(),
                    ],
                    &env,
                )
            })
            .await
            .expect("start wrapper-server");
            (p, None)
        };
        let ip = {
            let mut state = self.state.lock().unwrap();
            state.next_ip += 1;
            state.started += 1;
            let n = state.next_ip;
            format!("10.244.{}.{}", n / 250, n % 250 + 1)
        };
        {
            let mut state = self.state.lock().unwrap();
            if !state.handled.contains(&name) {
                // Deleted while the wrapper started.
                kill_tree(process.pid());
                return;
            }
            state.wrappers.insert(
                name.clone(),
                Wrapper {
                    process,
                    ip: ip.clone(),
                    _volumes: volumes,
                },
            );
        }
        self.write_map();
        let now = humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string();
        let cond =
            |t: &str| serde_json::json!({"type": t, "status": "True", "lastTransitionTime": now});
        let status = serde_json::json!({"status": {
            "phase": "Running",
            "startTime": now,
            "hostIP": "10.0.0.1",
            "hostIPs": [{"ip": "10.0.0.1"}],
            "podIP": ip,
            "podIPs": [{"ip": ip}],
            "conditions": [cond("PodScheduled"), cond("Initialized"), cond("ContainersReady"), cond("Ready")],
            "containerStatuses": [{
                "name": "function", "image": image, "imageID": "", "ready": true, "started": true,
                "restartCount": 0, "state": {"running": {"startedAt": now}},
            }],
        }});
        if let Err(e) = self
            .pods()
            .patch_status(&name, &PatchParams::default(), &Patch::Merge(&status))
            .await
        {
            eprintln!("test kubelet: cannot set the status of {name}: {e}");
            return;
        }
        let slice: EndpointSlice = serde_json::from_value(serde_json::json!({
            "metadata": {
                "name": format!("{name}-kubelet"),
                "labels": {
                    "kubernetes.io/service-name": name,
                    "endpointslice.kubernetes.io/managed-by": "test-kubelet",
                },
            },
            "addressType": "IPv4",
            "endpoints": [{
                "addresses": [ip],
                "conditions": {"ready": true, "serving": true, "terminating": false},
                "targetRef": {"kind": "Pod", "namespace": self.namespace, "name": name},
            }],
            "ports": [{"name": "", "port": 9446, "protocol": "TCP"}],
        }))
        .unwrap();
        if let Err(e) = self.slices().create(&PostParams::default(), &slice).await {
            eprintln!("test kubelet: cannot publish the endpoint of {name}: {e}");
        }
        let endpoints: Endpoints = serde_json::from_value(serde_json::json!({
            "metadata": {"name": name},
            "subsets": [{
                "addresses": [{"ip": ip, "targetRef": {"kind": "Pod", "namespace": self.namespace, "name": name}}],
                "ports": [{"port": 9446, "protocol": "TCP"}],
            }],
        }))
        .unwrap();
        if let Err(e) = self
            .endpoints()
            .create(&PostParams::default(), &endpoints)
            .await
        {
            eprintln!("test kubelet: cannot publish the endpoints of {name}: {e}");
        }
    }
}

/// How long to wait for conditions in the test bed.
pub const PATIENCE: Duration = Duration::from_secs(30);
