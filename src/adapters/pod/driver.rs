//! The driver: the [`PodCache`] state machine of one runner behind a lock,
//! fed by one task (pod watch events, timers, the outcomes of background
//! work) and by the callers themselves (requests and releases, so a request
//! for a ready pod is answered on the caller's task without a task switch),
//! carrying out the machine's commands.
//!
//! Kubernetes work never runs on the driver task itself: pod creation, the
//! readiness wait for service endpoints, deletions, reclaim-after patches
//! and GC listings are spawned tasks that report back
//! through the driver's channel. Deletions and patches are detached from any
//! request, so a cancelled call never leaves a pod half-deleted. A request
//! for a function with a ready pod is answered from memory: no API call.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use k8s_openapi::api::core::v1::{Pod, Service};
use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::Instant;
use tokio_stream::StreamExt;

use super::connections::ConnectionPool;
use super::{AddressMode, PodRuntimeConfig};
use crate::adapters::oci::PullSecretSync;
use crate::adapters::telemetry::spans::PodStarts;
use crate::domain::pod_cache::template::{
    PodBuild, TemplateOverrides, Templates, build_pod, build_service, has_template_version,
    observe_pod, service_endpoint,
};
use crate::domain::pod_cache::{
    Assignment, Command, IMAGE_LABEL, Input, ObservedPhase, ObservedPod, PodCache, PodCacheError,
    PodCachePolicy, PodCreation, RECLAIM_AFTER_ANNOTATION, RequestId, SlotId, SlotState, UnixTime,
    WRAPPER_PORT,
};
use crate::ports::{
    EndpointEvent, EndpointEventStream, ImageInspector, PlatformError, PodEvent, PodEventStream,
    PodPlatform,
};

/// The reply channel of one connection request.
pub(super) type ReplyTx = oneshot::Sender<Result<Assignment, PodCacheError>>;

/// What the driver handles: requests and releases on the caller's task
/// ([`Shared::handle`]), the rest through the driver task's channel.
pub(super) enum Msg {
    /// A caller needs a pod for `image`.
    Request {
        id: RequestId,
        image: String,
        reply: ReplyTx,
    },
    /// The caller is done with request `id` (call finished, failed or cancelled).
    Release { id: RequestId },
    /// A call to `pod_name` failed with UNAVAILABLE: evict the pod.
    Unavailable { pod_name: String },
    /// The creation task of `slot` ended.
    Created {
        slot: SlotId,
        pod_name: String,
        result: Result<(), String>,
    },
    /// The endpoint wait of `slot` ended.
    Endpoint {
        slot: SlotId,
        pod_name: String,
        result: Result<String, String>,
    },
    /// A GC listing ended: the services (listed first) and the labelled pods.
    Listed {
        services: Result<Vec<Service>, PlatformError>,
        pods: Result<Vec<Pod>, PlatformError>,
    },
    /// The template feed has new templates.
    Template(Arc<Templates>),
    /// New per-function settings (FunctionConfig generation).
    Policy(Box<PodCachePolicy>),
    /// Stop: waiters fail, new requests are refused.
    Shutdown,
}

/// The wall clock as the pod cache's time.
pub(super) fn now() -> UnixTime {
    UnixTime::from_duration(
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default(),
    )
}

/// The monotonic instant at which wall-clock time `t` is reached.
fn instant_at(t: UnixTime) -> Instant {
    Instant::now() + t.saturating_since(now())
}

/// The next GC tick, or never when GC is disabled.
async fn next_gc(gc: &mut Option<tokio::time::Interval>) {
    match gc {
        Some(i) => {
            i.tick().await;
        }
        None => std::future::pending().await,
    }
}

/// What the background tasks share.
pub(super) struct Ctx {
    pub(super) config: PodRuntimeConfig,
    pub(super) platform: Arc<dyn PodPlatform>,
    pub(super) inspector: Arc<dyn ImageInspector>,
    pub(super) pull_secret: Option<Arc<PullSecretSync>>,
    pub(super) pool: Arc<ConnectionPool>,
    pub(super) endpoints: Arc<EndpointSignal>,
}

/// What the endpoint watch has reported, for the tasks that wait for a
/// new pod's service: a change counter, and whether the watch is up to date
/// (only then may a waiter rely on it instead of polling).
#[derive(Debug)]
pub(super) struct EndpointSignal {
    changes: watch::Sender<u64>,
    live: AtomicBool,
}

impl EndpointSignal {
    /// No watch yet: waiters poll.
    pub(super) fn new() -> Self {
        Self {
            changes: watch::Sender::new(0),
            live: AtomicBool::new(false),
        }
    }

    /// Takes in one event of the watch.
    fn on_event(&self, event: EndpointEvent) {
        match event {
            EndpointEvent::Synced => {
                self.live.store(true, Ordering::Release);
                self.changes.send_modify(|n| *n += 1);
            }
            EndpointEvent::Changed(_) => self.changes.send_modify(|n| *n += 1),
            EndpointEvent::Lost => self.live.store(false, Ordering::Release),
        }
    }

    fn is_live(&self) -> bool {
        self.live.load(Ordering::Acquire)
    }
}

/// A pod being created: its slot, whether the pod and service objects exist,
/// and the pod once the watch reported it ready.
struct Creating {
    slot: SlotId,
    deadline: UnixTime,
    created: bool,
    ready_pod: Option<Pod>,
    checking: bool,
}

/// The driver task's state.
pub(super) struct Driver {
    ctx: Arc<Ctx>,
    cache: PodCache,
    templates: Arc<Templates>,
    replies: HashMap<RequestId, ReplyTx>,
    creating: HashMap<String, Creating>,
    warming: Option<HashSet<String>>,
    ready: watch::Sender<bool>,
    tx: mpsc::UnboundedSender<Msg>,
    listing: bool,
    runtime: tokio::runtime::Handle,
    deadline_added: bool,
    starts: PodStarts<SlotId>,
}

/// The driver behind a lock, shared by the driver task (events, timers,
/// background results) and the callers (requests and releases, handled on
/// the caller's task so that a request for a ready pod costs no task switch).
pub(super) struct Shared {
    driver: std::sync::Mutex<Driver>,
    /// Wakes the driver task when a new creation deadline may be earlier
    /// than the one it sleeps until.
    wake: tokio::sync::Notify,
}

impl Shared {
    /// Shares `driver`.
    pub(super) fn new(driver: Driver) -> Self {
        Self {
            driver: std::sync::Mutex::new(driver),
            wake: tokio::sync::Notify::new(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Driver> {
        // Every driver method leaves the state consistent between inputs;
        // a panic elsewhere while holding the lock does not break that.
        self.driver.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Runs `f` on the pod cache (a read-only look, e.g. for gauges).
    pub(super) fn with_cache<R>(&self, f: impl FnOnce(&PodCache) -> R) -> R {
        f(&self.lock().cache)
    }

    /// Handles `msg` on the calling task, waking the driver task if the
    /// pod cache now has an earlier deadline.
    pub(super) fn handle(&self, msg: Msg) {
        let added = {
            let mut d = self.lock();
            d.on_msg(msg);
            std::mem::take(&mut d.deadline_added)
        };
        if added {
            self.wake.notify_one();
        }
    }
}

/// How often the driver ticks: at least every half of the shortest TTL (so
/// a busy pod's reclaim-after stays ahead), at most every scan interval,
/// never more than 10 times a second.
fn tick_period(policy: &PodCachePolicy, scan: Duration) -> Duration {
    let shortest_ttl = policy.shortest_ttl();
    (shortest_ttl / 2)
        .min(if scan.is_zero() { shortest_ttl } else { scan })
        .max(Duration::from_millis(100))
}

/// The endpoint of a ready pod in `mode`: the service DNS name, or the pod
/// IP (bracketed for IPv6), with the wrapper port.
fn endpoint_of(pod: &Pod, name: &str, namespace: &str, mode: AddressMode) -> Option<String> {
    match mode {
        AddressMode::Service => Some(service_endpoint(name, namespace)),
        AddressMode::PodIp => {
            let ip = pod.status.as_ref()?.pod_ip.as_deref()?;
            Some(if ip.contains(':') {
                format!("[{ip}]:{WRAPPER_PORT}")
            } else {
                format!("{ip}:{WRAPPER_PORT}")
            })
        }
    }
}

/// Why a pod reached phase Failed, from its status.
fn failure_reason(pod: &Pod) -> String {
    let status = pod.status.as_ref();
    let mut parts = vec![format!(
        "pod phase {}",
        status.and_then(|s| s.phase.as_deref()).unwrap_or("Failed")
    )];
    if let Some(r) = status.and_then(|s| s.reason.as_deref()) {
        parts.push(format!("reason {r}"));
    }
    if let Some(m) = status.and_then(|s| s.message.as_deref()) {
        parts.push(m.to_string());
    }
    parts.join(", ")
}

impl Driver {
    /// A driver over `ctx` with `templates`, reporting readiness on `ready`
    /// and posting background results to `tx`. Must be called inside a
    /// Tokio runtime, where its background tasks will run.
    pub(super) fn new(
        ctx: Arc<Ctx>,
        templates: Arc<Templates>,
        ready: watch::Sender<bool>,
        tx: mpsc::UnboundedSender<Msg>,
    ) -> Self {
        let cache = PodCache::new(ctx.config.policy.clone(), templates.version.clone());
        Self {
            ctx,
            cache,
            templates,
            replies: HashMap::new(),
            creating: HashMap::new(),
            warming: None,
            ready,
            tx,
            listing: false,
            runtime: tokio::runtime::Handle::current(),
            deadline_added: false,
            starts: PodStarts::default(),
        }
    }

    /// Observed pods with, in pod-IP mode, the pod IP as the ready endpoint.
    fn observe(&self, pods: &[Pod]) -> Vec<ObservedPod> {
        let (ns, mode) = (&self.ctx.config.namespace, self.ctx.config.address_mode);
        pods.iter()
            .filter_map(|p| {
                let mut o = observe_pod(p)?;
                if let ObservedPhase::Ready { endpoint } = &mut o.phase {
                    match endpoint_of(p, &o.name, ns, mode) {
                        Some(e) => *endpoint = e,
                        None => o.phase = ObservedPhase::Pending,
                    }
                }
                Some(o)
            })
            .collect()
    }

    /// Startup adoption (Porch `retrieveFunctionPods`, by the machine's
    /// rules) over `pods`, then warm-up of `images`. Services of adopted
    /// pods are re-created in the background if missing.
    pub(super) fn start(&mut self, pods: Option<Vec<Pod>>, images: Vec<String>) {
        if let Some(pods) = pods {
            let observed = self.observe(&pods);
            self.feed(Input::Adopt { observed });
            let adopted: Vec<String> = self.cache.slots().map(|s| s.pod_name.to_string()).collect();
            for name in adopted {
                tracing::info!(pod = %name, "adopted function pod");
                let ctx = self.ctx.clone();
                let templates = self.templates.clone();
                self.runtime.spawn(async move {
                    if let Err(e) = ensure_service(&ctx, &templates, &name).await {
                        tracing::warn!(pod = %name, "cannot ensure the service of an adopted pod: {e}");
                    }
                });
            }
        }
        let mut warming = HashSet::new();
        if !images.is_empty() {
            let before: HashSet<String> = self.creating.keys().cloned().collect();
            self.feed(Input::WarmUp { images });
            warming.extend(
                self.creating
                    .keys()
                    .filter(|k| !before.contains(*k))
                    .cloned(),
            );
        }
        self.warming = Some(warming);
        self.check_warm();
    }

    /// Marks the runtime ready once every warm-up pod is ready or given up.
    fn check_warm(&mut self) {
        let Some(warming) = &mut self.warming else {
            return;
        };
        let cache = &self.cache;
        warming.retain(|name| {
            cache
                .slots()
                .any(|s| s.pod_name == name.as_str() && s.state == SlotState::Pending)
        });
        if warming.is_empty() {
            self.warming = None;
            self.ready.send_replace(true);
            tracing::info!("pod runtime ready");
        }
    }

    /// Runs the driver task until [`Msg::Shutdown`] or until every sender
    /// is gone: pod events, timers and background results are fed to the
    /// shared driver.
    pub(super) async fn run(
        shared: std::sync::Arc<Shared>,
        mut rx: mpsc::UnboundedReceiver<Msg>,
        mut pods: PodEventStream,
        mut endpoints: EndpointEventStream,
    ) {
        let ctx = shared.lock().ctx.clone();
        let config = &ctx.config;
        let scan = config.scan_interval;
        let mut templates = config.templates.clone();
        let mut tick_period = tick_period(&config.policy, scan);
        let mut gc = (!scan.is_zero()).then(|| {
            let mut i = tokio::time::interval_at(Instant::now() + scan, scan);
            i.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            i
        });
        if gc.is_none() {
            tracing::warn!(
                "--scan-interval is 0: garbage collection of idle function pods is disabled"
            );
        }
        let mut next_tick = Instant::now() + tick_period;
        loop {
            let wake = {
                let mut d = shared.lock();
                d.deadline_added = false;
                d.cache
                    .poll_timeout()
                    .map(instant_at)
                    .map_or(next_tick, |t| t.min(next_tick))
            };
            tokio::select! {
                msg = rx.recv() => match msg {
                    None | Some(Msg::Shutdown) => {
                        shared.lock().feed(Input::Shutdown);
                        break;
                    }
                    Some(Msg::Policy(policy)) => {
                        tick_period = self::tick_period(&policy, scan);
                        next_tick = next_tick.min(Instant::now() + tick_period);
                        shared.lock().on_msg(Msg::Policy(policy));
                    }
                    Some(m) => shared.lock().on_msg(m),
                },
                t = templates.changed() => shared.lock().on_msg(Msg::Template(t)),
                event = pods.next() => match event {
                    Some(e) => shared.lock().on_event(e),
                    None => {
                        tracing::warn!("the pod watch ended; restarting it");
                        tokio::time::sleep(Duration::from_millis(500)).await;
                        match ctx.platform.watch_pods(IMAGE_LABEL).await {
                            Ok(s) => pods = s,
                            Err(e) => tracing::warn!("cannot restart the pod watch: {e}"),
                        }
                    }
                },
                event = endpoints.next() => match event {
                    Some(e) => ctx.endpoints.on_event(e),
                    None => {
                        ctx.endpoints.on_event(EndpointEvent::Lost);
                        tracing::warn!("the endpoint watch ended; restarting it");
                        tokio::time::sleep(Duration::from_millis(500)).await;
                        match ctx.platform.watch_endpoints().await {
                            Ok(s) => endpoints = s,
                            Err(e) => tracing::warn!("cannot restart the endpoint watch: {e}"),
                        }
                    }
                },
                () = tokio::time::sleep_until(wake) => {
                    if Instant::now() >= next_tick {
                        next_tick = Instant::now() + tick_period;
                    }
                    shared.lock().feed(Input::Tick);
                }
                () = next_gc(&mut gc) => {
                    shared.lock().start_scan();
                }
                () = shared.wake.notified() => {}
            }
        }
        tracing::info!("pod runtime stopped");
    }

    /// Feeds one input at the current time and carries out the commands.
    fn feed(&mut self, input: Input) {
        match &input {
            Input::PodReady { slot, .. } => self.starts.end(slot, true),
            Input::PodFailed { slot, .. } => self.starts.end(slot, false),
            Input::Shutdown => self.starts.clear(),
            _ => {}
        }
        self.cache.handle(now(), input);
        while let Some(cmd) = self.cache.poll_command() {
            self.execute(cmd);
        }
        if self.warming.is_some() {
            self.check_warm();
        }
    }

    fn execute(&mut self, cmd: Command) {
        match cmd {
            Command::CreatePod(c) => {
                tracing::info!(pod = %c.pod_name, image = %c.image, "creating function pod");
                self.starts.begin(c.slot, &c.image, &c.pod_name);
                self.deadline_added = true;
                self.creating.insert(
                    c.pod_name.clone(),
                    Creating {
                        slot: c.slot,
                        deadline: c.deadline,
                        created: false,
                        ready_pod: None,
                        checking: false,
                    },
                );
                let (ctx, templates, tx) =
                    (self.ctx.clone(), self.templates.clone(), self.tx.clone());
                self.runtime.spawn(async move {
                    let deadline = instant_at(c.deadline);
                    let result = match tokio::time::timeout_at(
                        deadline,
                        create_pod_and_service(&ctx, &templates, &c),
                    )
                    .await
                    {
                        Ok(r) => r,
                        Err(_) => {
                            Err("pod creation did not finish before the pod-ready deadline".into())
                        }
                    };
                    let _ = tx.send(Msg::Created {
                        slot: c.slot,
                        pod_name: c.pod_name,
                        result,
                    });
                });
            }
            Command::Reply { request, result } => {
                if let Some(reply) = self.replies.remove(&request) {
                    // A dropped receiver means the caller went away; its
                    // release message follows and returns the load unit.
                    let _ = reply.send(result);
                }
            }
            Command::DeletePod { pod_name } => {
                tracing::info!(pod = %pod_name, "deleting function pod and its service");
                // A start given up (its deadline passed) ends here.
                if let Some(c) = self.creating.remove(&pod_name) {
                    self.starts.end(&c.slot, false);
                }
                self.spawn_delete(pod_name);
            }
            Command::PersistReclaimAfter {
                pod_name,
                reclaim_after,
            } => {
                let platform = self.ctx.platform.clone();
                self.runtime.spawn(async move {
                    let annotations = BTreeMap::from([(
                        RECLAIM_AFTER_ANNOTATION.to_string(),
                        reclaim_after.to_annotation(),
                    )]);
                    match platform.patch_pod_annotations(&pod_name, annotations).await {
                        Ok(()) => {}
                        Err(e) if e.is_not_found() => {}
                        Err(e) => {
                            tracing::warn!(pod = %pod_name, "cannot extend reclaim-after: {e}")
                        }
                    }
                });
            }
        }
    }

    /// Deletes pod `pod_name` and its service in the background, whatever
    /// happens to the request that caused it.
    fn spawn_delete(&self, pod_name: String) {
        self.ctx.pool.remove(&pod_name);
        let platform = self.ctx.platform.clone();
        self.runtime.spawn(async move {
            if let Err(e) = platform.delete_pod(&pod_name).await {
                tracing::warn!(pod = %pod_name, "cannot delete the pod (GC retries): {e}");
            }
            if let Err(e) = platform.delete_service(&pod_name).await {
                tracing::warn!(service = %pod_name, "cannot delete the service: {e}");
            }
        });
    }

    fn on_msg(&mut self, msg: Msg) {
        match msg {
            Msg::Request { id, image, reply } => {
                self.replies.insert(id, reply);
                self.feed(Input::Request { request: id, image });
            }
            Msg::Release { id } => {
                self.replies.remove(&id);
                self.feed(Input::CallFinished { request: id });
            }
            Msg::Unavailable { pod_name } => {
                tracing::warn!(pod = %pod_name, "wrapper unavailable: evicting the pod");
                self.ctx.pool.remove(&pod_name);
                self.feed(Input::PodGone {
                    pod_name,
                    failed: true,
                });
            }
            Msg::Created {
                slot,
                pod_name,
                result,
            } => {
                let mine = self.creating.get(&pod_name).is_some_and(|c| c.slot == slot);
                if !mine {
                    // The slot was given up or its pod evicted while the
                    // task ran: whatever the task created after that is
                    // deleted here (names are never reused, so this cannot
                    // hit another pod).
                    self.spawn_delete(pod_name.clone());
                }
                match result {
                    Ok(()) if mine => {
                        if let Some(c) = self.creating.get_mut(&pod_name) {
                            c.created = true;
                        }
                        self.maybe_ready(&pod_name);
                    }
                    // Given up meanwhile: tell the machine, which forgets the slot.
                    Ok(()) => self.feed(Input::PodFailed {
                        slot,
                        reason: "abandoned".into(),
                    }),
                    Err(reason) => {
                        if mine {
                            self.creating.remove(&pod_name);
                        }
                        tracing::warn!(pod = %pod_name, "function pod creation failed: {reason}");
                        self.feed(Input::PodFailed { slot, reason });
                    }
                }
            }
            Msg::Endpoint {
                slot,
                pod_name,
                result,
            } => {
                if self.creating.get(&pod_name).is_some_and(|c| c.slot == slot) {
                    self.creating.remove(&pod_name);
                }
                match result {
                    Ok(endpoint) => {
                        tracing::info!(pod = %pod_name, %endpoint, "function pod ready");
                        self.feed(Input::PodReady { slot, endpoint });
                    }
                    Err(reason) => self.feed(Input::PodFailed { slot, reason }),
                }
            }
            Msg::Listed { services, pods } => {
                self.listing = false;
                match pods {
                    Ok(pods) => {
                        if let Ok(services) = services {
                            self.delete_orphan_services(&services, &pods);
                        }
                        let observed = self.observe(&pods);
                        self.feed(Input::Gc { observed });
                    }
                    Err(e) => tracing::warn!("cannot list function pods for GC: {e}"),
                }
            }
            Msg::Template(t) => {
                if t.version != self.templates.version {
                    tracing::info!(version = %t.version, "new function pods use the changed pod template");
                    let version = t.version.clone();
                    self.templates = t;
                    self.feed(Input::TemplateChanged { version });
                }
            }
            Msg::Policy(policy) => {
                tracing::debug!("per-function pod settings changed");
                self.feed(Input::PolicyChanged { policy });
            }
            Msg::Shutdown => self.feed(Input::Shutdown),
        }
    }

    fn on_event(&mut self, event: PodEvent) {
        match event {
            PodEvent::Applied(pod) => {
                let Some(seen) = observe_pod(&pod) else {
                    return;
                };
                if let Some(c) = self.creating.get_mut(&seen.name) {
                    let slot = c.slot;
                    match seen.phase {
                        ObservedPhase::Pending => {}
                        ObservedPhase::Ready { .. } => {
                            c.ready_pod = Some(pod);
                            self.maybe_ready(&seen.name);
                        }
                        ObservedPhase::Failed => {
                            self.creating.remove(&seen.name);
                            let reason = failure_reason(&pod);
                            tracing::warn!(pod = %seen.name, "function pod failed while starting: {reason}");
                            self.feed(Input::PodFailed { slot, reason });
                        }
                        ObservedPhase::Terminating => {
                            self.creating.remove(&seen.name);
                            self.feed(Input::PodFailed {
                                slot,
                                reason: "the pod is being deleted".into(),
                            });
                        }
                    }
                    return;
                }
                match seen.phase {
                    ObservedPhase::Failed => {
                        self.ctx.pool.remove(&seen.name);
                        self.feed(Input::PodGone {
                            pod_name: seen.name,
                            failed: true,
                        })
                    }
                    ObservedPhase::Terminating => {
                        self.ctx.pool.remove(&seen.name);
                        self.feed(Input::PodGone {
                            pod_name: seen.name,
                            failed: false,
                        })
                    }
                    _ => {}
                }
            }
            PodEvent::Deleted(pod) => {
                let Some(name) = pod.metadata.name else {
                    return;
                };
                self.ctx.pool.remove(&name);
                if let Some(c) = self.creating.remove(&name) {
                    self.feed(Input::PodFailed {
                        slot: c.slot,
                        reason: "the pod was deleted before it was ready".into(),
                    });
                } else {
                    self.feed(Input::PodGone {
                        pod_name: name,
                        failed: false,
                    });
                }
            }
        }
    }

    /// Once both the objects exist and the pod is ready: report it (pod-IP
    /// mode) or wait for the service to publish it (service mode).
    fn maybe_ready(&mut self, name: &str) {
        let Some(c) = self.creating.get_mut(name) else {
            return;
        };
        if !c.created || c.checking {
            return;
        }
        let Some(pod) = c.ready_pod.clone() else {
            return;
        };
        let slot = c.slot;
        let ns = self.ctx.config.namespace.clone();
        match self.ctx.config.address_mode {
            AddressMode::PodIp => {
                self.creating.remove(name);
                match endpoint_of(&pod, name, &ns, AddressMode::PodIp) {
                    Some(endpoint) => {
                        tracing::info!(pod = %name, %endpoint, "function pod ready");
                        self.feed(Input::PodReady { slot, endpoint });
                    }
                    None => self.feed(Input::PodFailed {
                        slot,
                        reason: "the pod is ready but has no status.podIP".into(),
                    }),
                }
            }
            AddressMode::Service => {
                c.checking = true;
                let deadline = instant_at(c.deadline);
                let (platform, signal, tx, name) = (
                    self.ctx.platform.clone(),
                    self.ctx.endpoints.clone(),
                    self.tx.clone(),
                    name.to_string(),
                );
                let pod_ip = pod.status.and_then(|s| s.pod_ip);
                self.runtime.spawn(async move {
                    let target = EndpointTarget {
                        name: &name,
                        namespace: &ns,
                        pod_ip,
                    };
                    let result = wait_for_endpoint(&*platform, &signal, &target, deadline).await;
                    let _ = tx.send(Msg::Endpoint {
                        slot,
                        pod_name: name,
                        result,
                    });
                });
            }
        }
    }

    /// Deletes function services whose pod is gone (a runner stopped
    /// between deleting a pod and its service, or the pod was deleted by
    /// hand): services named like the value of their [`IMAGE_LABEL`]
    /// selector, with no pod of that name in `pods` (listed after
    /// `services`) and none being created here. Porch never deletes these.
    fn delete_orphan_services(&self, services: &[Service], pods: &[Pod]) {
        let live: HashSet<&str> = pods
            .iter()
            .filter_map(|p| p.metadata.name.as_deref())
            .collect();
        for svc in services {
            let Some(name) = svc.metadata.name.as_deref() else {
                continue;
            };
            let ours = svc
                .spec
                .as_ref()
                .and_then(|s| s.selector.as_ref())
                .and_then(|s| s.get(IMAGE_LABEL))
                .is_some_and(|v| v == name);
            let busy = live.contains(name)
                || self.creating.contains_key(name)
                || self.cache.slots().any(|s| s.pod_name == name);
            if ours && !busy {
                tracing::info!(service = %name, "deleting a function service whose pod is gone");
                let platform = self.ctx.platform.clone();
                let name = name.to_string();
                self.runtime.spawn(async move {
                    if let Err(e) = platform.delete_service(&name).await {
                        tracing::warn!(service = %name, "cannot delete the orphaned service: {e}");
                    }
                });
            }
        }
    }

    /// Starts a GC listing.
    fn start_scan(&mut self) {
        if !self.listing {
            self.listing = true;
            let (platform, tx) = (self.ctx.platform.clone(), self.tx.clone());
            self.runtime.spawn(async move {
                // Services first: a function's pod is created before its
                // service, so a service listed here whose pod is missing
                // from the later pod list has lost its pod for good.
                let services = platform.list_services().await;
                let pods = platform.list_pods(IMAGE_LABEL).await;
                let _ = tx.send(Msg::Listed { services, pods });
            });
        }
    }
}

/// Creates the pod of `c` and its service, idempotently: an existing pod of
/// that name is used only if it is ours, for the same image and template
/// version, and neither terminating nor failed (Porch takes any, spec §10
/// item 29); an existing service is used if it selects the pod.
async fn create_pod_and_service(
    ctx: &Ctx,
    templates: &Templates,
    c: &PodCreation,
) -> Result<(), String> {
    let config = &ctx.config;
    let mut secrets = Vec::new();
    if let Some(sync) = &ctx.pull_secret {
        sync.ensure()
            .await
            .map_err(|e| format!("cannot sync the registry pull secret: {e}"))?;
        secrets.push(sync.name().to_string());
    }
    let meta = ctx
        .inspector
        .inspect(&c.image)
        .await
        .map_err(|e| format!("unable to get the entrypoint for {}: {e}", c.image))?;
    let overrides = TemplateOverrides::from_settings(&c.settings);
    let build = PodBuild {
        wrapper_image: Some(&config.wrapper_image),
        image_pull_secrets: &secrets,
        ..PodBuild::for_creation(
            c,
            &config.namespace,
            &meta.entrypoint,
            &overrides,
            config.max_message_bytes,
        )
    };
    let pod =
        build_pod(&templates.pod, &build).map_err(|e| format!("unable to apply the pod: {e}"))?;
    match ctx.platform.create_pod(pod).await {
        Ok(_) => {}
        Err(PlatformError::AlreadyExists { .. }) => {
            let existing = ctx
                .platform
                .get_pod(&c.pod_name)
                .await
                .map_err(|e| format!("pod {} exists but cannot be read: {e}", c.pod_name))?;
            let seen = observe_pod(&existing);
            let labelled = existing
                .metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(IMAGE_LABEL))
                .is_some_and(|v| *v == c.pod_name);
            let usable = labelled
                && has_template_version(&existing, &c.template_version)
                && seen.is_some_and(|s| {
                    s.image == c.image
                        && s.settings_version == c.settings_version
                        && !matches!(s.phase, ObservedPhase::Failed | ObservedPhase::Terminating)
                });
            if !usable {
                return Err(format!(
                    "a pod named {} already exists and is not a usable pod for {} with template version {}",
                    c.pod_name, c.image, c.template_version
                ));
            }
        }
        Err(e) => return Err(format!("unable to apply the pod: {e}")),
    }
    ensure_service(ctx, templates, &c.pod_name).await
}

/// Creates the service of pod `name` unless one exists that selects it.
async fn ensure_service(ctx: &Ctx, templates: &Templates, name: &str) -> Result<(), String> {
    let service = build_service(&templates.service, name, &ctx.config.namespace);
    let existing = match ctx.platform.create_service(service).await {
        Ok(_) => return Ok(()),
        Err(PlatformError::AlreadyExists { .. }) => ctx
            .platform
            .get_service(name)
            .await
            .map_err(|e| format!("service {name} exists but cannot be read: {e}"))?,
        Err(e) => return Err(format!("unable to create the service {name}: {e}")),
    };
    let selects = existing
        .spec
        .as_ref()
        .and_then(|s| s.selector.as_ref())
        .and_then(|s| s.get(IMAGE_LABEL))
        .is_some_and(|v| v == name);
    if selects {
        Ok(())
    } else {
        Err(format!(
            "a service named {name} already exists and does not select pod {name} ({IMAGE_LABEL}={name})"
        ))
    }
}

/// The pod whose service a creation waits for.
struct EndpointTarget<'a> {
    /// Pod and service name.
    name: &'a str,
    namespace: &'a str,
    /// The pod's IP, to match endpoints without a `targetRef`.
    pod_ip: Option<String>,
}

/// Waits until the service of `target` publishes a ready endpoint for its
/// pod (matched by `targetRef`, or by the pod IP), until `deadline`; returns
/// the service endpoint.
///
/// The endpoints are read once, then again whenever the endpoint watch
/// reports a change; while the watch is not up to date (not synced yet,
/// failing, or a platform without one) they are polled with a backoff from
/// 20 ms to 500 ms instead. A live watch is still re-checked every second,
/// in case an event was missed.
async fn wait_for_endpoint(
    platform: &dyn PodPlatform,
    signal: &EndpointSignal,
    target: &EndpointTarget<'_>,
    deadline: Instant,
) -> Result<String, String> {
    let (name, namespace) = (target.name, target.namespace);
    let mut changes = signal.changes.subscribe();
    let mut delay = Duration::from_millis(20);
    loop {
        changes.borrow_and_update();
        let last = match platform.service_endpoints(name).await {
            Ok(eps) => {
                let found = eps.iter().any(|e| {
                    e.ready
                        && (e.pod_name.as_deref() == Some(name)
                            || target.pod_ip.as_deref() == Some(e.address.as_str()))
                });
                if found {
                    return Ok(service_endpoint(name, namespace));
                }
                format!("{} endpoint(s), none ready for pod {name}", eps.len())
            }
            Err(e @ PlatformError::Forbidden(_)) => {
                return Err(format!("cannot read the endpoints of service {name}: {e}"));
            }
            Err(e) => e.to_string(),
        };
        let now = Instant::now();
        if now >= deadline {
            return Err(format!(
                "error occurred when waiting the pod and service to be ready. If the error is caused by timeout, you may want to examine the pod/service in namespace {namespace:?}. Error: service {name} has no ready endpoint for its pod ({last})"
            ));
        }
        let wait = if signal.is_live() {
            Duration::from_secs(1)
        } else {
            delay
        };
        tokio::select! {
            changed = changes.changed(), if signal.is_live() => {
                // The sender lives as long as the runtime; if it is gone,
                // fall back to the timer.
                if changed.is_err() {
                    tokio::time::sleep_until((now + delay).min(deadline)).await;
                }
            }
            () = tokio::time::sleep_until((now + wait).min(deadline)) => {}
        }
        delay = (delay * 2).min(Duration::from_millis(500));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ports::{MockPodPlatform, ServiceEndpoint};
    use std::sync::atomic::AtomicUsize;

    /// A platform whose service publishes pod `p` from the `ready_from`-th
    /// read of its endpoints on; counts the reads.
    fn platform(ready_from: usize, reads: Arc<AtomicUsize>) -> MockPodPlatform {
        let mut platform = MockPodPlatform::new();
        platform.expect_service_endpoints().returning(move |_| {
            let n = reads.fetch_add(1, Ordering::SeqCst) + 1;
            Ok(if n >= ready_from {
                vec![ServiceEndpoint {
                    address: "10.0.0.7".into(),
                    ready: true,
                    pod_name: Some("p".into()),
                }]
            } else {
                Vec::new()
            })
        });
        platform
    }

    const TARGET: EndpointTarget<'static> = EndpointTarget {
        name: "p",
        namespace: "ns",
        pod_ip: None,
    };

    #[tokio::test(start_paused = true)]
    async fn a_live_endpoint_watch_replaces_polling() {
        let reads = Arc::new(AtomicUsize::new(0));
        let platform = platform(2, reads.clone());
        let signal = Arc::new(EndpointSignal::new());
        signal.on_event(EndpointEvent::Synced);
        let publisher = signal.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(700)).await;
            publisher.on_event(EndpointEvent::Changed("p".into()));
        });
        let started = Instant::now();
        let deadline = started + Duration::from_secs(30);
        let endpoint = wait_for_endpoint(&platform, &signal, &TARGET, deadline).await;
        assert_eq!(endpoint.as_deref(), Ok("p.ns.svc.cluster.local:9446"));
        // One read at the start, one on the event: no polling in between.
        assert_eq!(reads.load(Ordering::SeqCst), 2);
        assert_eq!(started.elapsed(), Duration::from_millis(700));
    }

    #[tokio::test(start_paused = true)]
    async fn without_a_synced_watch_endpoints_are_polled_until_the_deadline() {
        let reads = Arc::new(AtomicUsize::new(0));
        let platform = platform(usize::MAX, reads.clone());
        let signal = EndpointSignal::new();
        let started = Instant::now();
        let deadline = started + Duration::from_secs(2);
        let err = wait_for_endpoint(&platform, &signal, &TARGET, deadline)
            .await
            .unwrap_err();
        assert!(err.contains("service p has no ready endpoint"), "{err}");
        assert_eq!(started.elapsed(), Duration::from_secs(2));
        // 20, 40, 80, 160, 320, then every 500 ms, and a last read at the deadline.
        assert_eq!(reads.load(Ordering::SeqCst), 9);
        // A watch that was lost falls back to polling as well.
        signal.on_event(EndpointEvent::Synced);
        signal.on_event(EndpointEvent::Lost);
        assert!(!signal.is_live());
    }

    fn pod(ip: Option<&str>) -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p"},
            "status": {"phase": "Failed", "reason": "Evicted", "message": "low memory", "podIP": ip},
        }))
        .unwrap()
    }

    #[test]
    fn endpoints_by_address_mode() {
        let p = pod(Some("10.244.0.7"));
        assert_eq!(
            endpoint_of(&p, "p", "ns", AddressMode::Service).as_deref(),
            Some("p.ns.svc.cluster.local:9446")
        );
        assert_eq!(
            endpoint_of(&p, "p", "ns", AddressMode::PodIp).as_deref(),
            Some("10.244.0.7:9446")
        );
        assert_eq!(
            endpoint_of(&pod(Some("fd00::7")), "p", "ns", AddressMode::PodIp).as_deref(),
            Some("[fd00::7]:9446")
        );
        assert_eq!(endpoint_of(&pod(None), "p", "ns", AddressMode::PodIp), None);
    }

    #[test]
    fn failure_reasons_come_from_the_status() {
        assert_eq!(
            failure_reason(&pod(None)),
            "pod phase Failed, reason Evicted, low memory"
        );
    }

    #[test]
    fn instants_follow_the_wall_clock() {
        let soon = now() + Duration::from_secs(5);
        let at = instant_at(soon);
        let left = at - Instant::now();
        assert!(left <= Duration::from_secs(5) && left > Duration::from_secs(4));
        assert!(instant_at(UnixTime::EPOCH) <= Instant::now());
    }
}
