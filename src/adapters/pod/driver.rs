//! The driver: the [`PodCache`] state machine of one runner behind a lock,
//! fed by one task (pod watch events, timers, the outcomes of background
//! work) and by the callers themselves (requests and releases, so a request
//! for a ready pod is answered on the caller's task without a task switch),
//! carrying out the machine's commands.
//!
//! It decides nothing: creation and readiness, what an outcome belongs to,
//! retries, GC and its timing, orphaned services and what a failed call
//! does to its pod are the machine's. The driver turns each command into
//! platform calls on spawned tasks (never on the driver task, never under
//! the lock) and feeds their outcomes back as inputs; it turns watch events
//! into observations (outside the lock) and sleeps until the machine's next
//! timer. Deletions and patches are detached from any request, so a
//! cancelled call never leaves a pod half-deleted. A request for a function
//! with a ready pod is answered from memory: no API call.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::Instant;
use tokio_stream::StreamExt;

use super::connections::ConnectionPool;
use super::endpoints::{EndpointSignal, EndpointTarget, wait_for_endpoint};
use super::{AddressMode, PodRuntimeConfig};
use crate::adapters::oci::PullSecretSync;
use crate::adapters::telemetry::spans::PodStarts;
use crate::domain::pod_cache::template::{
    PodBuild, TemplateOverrides, Templates, build_pod, build_service, observe_pod, observe_service,
    pod_ip_endpoint,
};
use crate::domain::pod_cache::{
    Assignment, Command, CreateFailure, DeleteFailure, DeletePrecondition, IMAGE_LABEL, Input,
    ObservedPhase, ObservedPod, PersistFailure, PodCache, PodCacheError, PodCachePolicy,
    PodCreation, RECLAIM_AFTER_ANNOTATION, RequestId, SlotId, SlotState, UnixTime,
};
use crate::ports::{
    EndpointEvent, EndpointEventStream, ImageInspector, PlatformError, PodEvent, PodEventStream,
    PodPlatform, delete_outcome, listing_outcome,
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
    /// The caller is done with request `id` (call finished, failed or
    /// cancelled); `unavailable` when the pod did not answer.
    Release { id: RequestId, unavailable: bool },
    /// The outcome of background work, for the machine.
    Outcome(Box<Input>),
    /// The template feed has new templates.
    Template(Arc<Templates>),
    /// New per-function settings (FunctionConfig generation).
    Policy(Box<PodCachePolicy>),
    /// Stop: waiters fail, new requests are refused.
    Shutdown,
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

impl Ctx {
    fn now(&self) -> UnixTime {
        self.config.clock.now()
    }

    /// The tokio instant at which the driver's clock reaches `t`.
    fn instant_at(&self, t: UnixTime) -> Instant {
        Instant::now() + t.saturating_since(self.now())
    }

    /// Observes `pod`, with (in pod-IP mode) the pod IP as the ready
    /// endpoint; a ready pod without an IP there counts as pending.
    pub(super) fn observe(&self, pod: &Pod) -> Option<ObservedPod> {
        let mut o = observe_pod(pod)?;
        if self.config.address_mode == AddressMode::PodIp
            && let ObservedPhase::Ready { endpoint } = &mut o.phase
        {
            match &o.ip {
                Some(ip) => *endpoint = pod_ip_endpoint(ip),
                None => o.phase = ObservedPhase::Pending,
            }
        }
        Some(o)
    }

    /// Runs a platform call bounded by `--api-timeout`.
    async fn bounded<T>(
        &self,
        what: &str,
        call: impl std::future::Future<Output = Result<T, PlatformError>>,
    ) -> Result<T, PlatformError> {
        let limit = self.config.api_timeout;
        tokio::time::timeout(limit, call).await.unwrap_or_else(|_| {
            Err(PlatformError::Transient(format!(
                "{what}: no answer from the API server within {limit:?}"
            )))
        })
    }
}

/// The driver task's state.
pub(super) struct Driver {
    ctx: Arc<Ctx>,
    cache: PodCache,
    templates: Arc<Templates>,
    replies: HashMap<RequestId, ReplyTx>,
    warming: Option<HashSet<String>>,
    health: watch::Sender<bool>,
    tx: mpsc::UnboundedSender<Msg>,
    runtime: tokio::runtime::Handle,
    /// The machine timer the driver task sleeps until.
    sleeping_until: Option<UnixTime>,
    /// Set when the machine's next timer became earlier than that.
    earlier_timer: bool,
    /// When the pod watch was lost (not synced since), if it is.
    watch_lost: Option<UnixTime>,
    /// The `pod.start` spans of the creations in flight, and their slots.
    starts: PodStarts<SlotId>,
    starting: HashSet<SlotId>,
    /// The wrapper health checks out ([`Command::ProbeWrapper`]), stopped
    /// once their slot is no longer pending.
    probes: HashMap<SlotId, tokio::task::AbortHandle>,
}

/// The driver behind a lock, shared by the driver task (events, timers,
/// background results) and the callers (requests and releases, handled on
/// the caller's task so that a request for a ready pod costs no task switch).
pub(super) struct Shared {
    driver: std::sync::Mutex<Driver>,
    /// Wakes the driver task when the machine's next timer is earlier than
    /// the one it sleeps until.
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
    /// pod cache now has an earlier timer.
    pub(super) fn handle(&self, msg: Msg) {
        let earlier = {
            let mut d = self.lock();
            d.on_msg(msg);
            std::mem::take(&mut d.earlier_timer)
        };
        if earlier {
            self.wake.notify_one();
        }
    }

    /// Feeds `input` under the lock.
    fn feed(&self, input: Input) {
        self.lock().feed(input);
    }
}

impl Driver {
    /// A driver over `ctx` with `templates`, reporting health on `health`
    /// and posting background results to `tx`. Must be called inside a
    /// Tokio runtime, where its background tasks will run.
    pub(super) fn new(
        ctx: Arc<Ctx>,
        templates: Arc<Templates>,
        health: watch::Sender<bool>,
        tx: mpsc::UnboundedSender<Msg>,
    ) -> Self {
        let cache = PodCache::new(ctx.config.policy.clone(), templates.version.clone());
        Self {
            ctx,
            cache,
            templates,
            replies: HashMap::new(),
            warming: None,
            health,
            tx,
            runtime: tokio::runtime::Handle::current(),
            sleeping_until: None,
            earlier_timer: false,
            watch_lost: None,
            starts: PodStarts::default(),
            starting: HashSet::new(),
            probes: HashMap::new(),
        }
    }

    /// Startup adoption (Porch `retrieveFunctionPods`, by the machine's
    /// rules) over `pods`, then warm-up of `images`.
    pub(super) fn start(&mut self, pods: Option<Vec<Pod>>, images: Vec<String>) {
        if let Some(pods) = pods {
            let observed = pods
                .iter()
                .filter_map(|p| self.ctx.observe(p))
                .map(Arc::new)
                .collect();
            self.feed(Input::Adopt { observed });
            for s in self.cache.slots() {
                tracing::info!(pod = %s.pod_name, "adopted function pod");
            }
        }
        let mut warming = HashSet::new();
        if !images.is_empty() {
            let before: HashSet<String> =
                self.cache.slots().map(|s| s.pod_name.to_string()).collect();
            self.feed(Input::WarmUp { images });
            warming.extend(
                self.cache
                    .slots()
                    .map(|s| s.pod_name.to_string())
                    .filter(|k| !before.contains(k)),
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
            tracing::info!("pod runtime ready");
            self.update_health();
        }
    }

    /// SERVING once warm, unless the pod watch has been lost for longer
    /// than the pod-ready timeout: the runtime then cannot see its pods
    /// start or go, and says so until the watch lists the pods again.
    fn update_health(&mut self) {
        let grace = self.ctx.config.policy.pod_ready_timeout;
        let blind = self
            .watch_lost
            .is_some_and(|t| self.ctx.now().saturating_since(t) >= grace);
        let healthy = self.warming.is_none() && !blind;
        self.health.send_if_modified(|h| {
            let changed = *h != healthy;
            if changed {
                if healthy {
                    tracing::info!("pod runtime healthy");
                } else {
                    tracing::warn!(
                        "pod runtime unhealthy: the pod watch has been down for {grace:?} or more"
                    );
                }
            }
            *h = healthy;
            changed
        });
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
        let mut templates = config.templates.clone();
        if config.policy.scan_interval.is_zero() {
            tracing::warn!(
                "--scan-interval is 0: garbage collection of idle function pods is disabled"
            );
        }
        let mut watch_since = ctx.now();
        let far = Duration::from_secs(86_400);
        loop {
            let (timer, health_check) = {
                let mut d = shared.lock();
                d.earlier_timer = false;
                d.sleeping_until = d.cache.poll_timeout();
                let grace = d.ctx.config.policy.pod_ready_timeout;
                (
                    d.sleeping_until.map(|t| ctx.instant_at(t)),
                    // Only while still healthy: once the check has marked
                    // the runtime unhealthy, a timer in the past would
                    // fire at once, every time round.
                    d.watch_lost
                        .map(|t| ctx.instant_at(t + grace))
                        .filter(|_| *d.health.borrow()),
                )
            };
            let wake = timer.unwrap_or_else(|| Instant::now() + far);
            tokio::select! {
                msg = rx.recv() => match msg {
                    None | Some(Msg::Shutdown) => {
                        shared.feed(Input::Shutdown);
                        break;
                    }
                    Some(m) => shared.lock().on_msg(m),
                },
                t = templates.changed() => shared.lock().on_msg(Msg::Template(t)),
                event = pods.next() => match event {
                    Some(PodEvent::Listed(list)) => {
                        let observed = list
                            .iter()
                            .filter_map(|p| ctx.observe(p))
                            .map(Arc::new)
                            .collect();
                        let mut d = shared.lock();
                        if d.watch_lost.is_some() {
                            tracing::info!(pods = list.len(), "the pod watch listed the pods again after an outage");
                        }
                        d.feed(Input::Resync { observed, since: watch_since });
                        d.watch_lost = None;
                        d.update_health();
                    }
                    Some(PodEvent::Applied(pod)) => {
                        if let Some(pod) = ctx.observe(&pod) {
                            shared.feed(Input::PodObserved { pod });
                        }
                    }
                    Some(PodEvent::Deleted(pod)) => {
                        if let Some(pod_name) = pod.metadata.name {
                            shared.feed(Input::PodDeleted { pod_name });
                        }
                    }
                    Some(PodEvent::Lost) => {
                        let mut d = shared.lock();
                        if d.watch_lost.is_none() {
                            let now = ctx.now();
                            d.watch_lost = Some(now);
                            watch_since = now;
                        }
                    }
                    None => {
                        tracing::warn!("the pod watch ended; restarting it");
                        {
                            let mut d = shared.lock();
                            let now = ctx.now();
                            d.watch_lost.get_or_insert(now);
                            watch_since = now;
                        }
                        tokio::time::sleep(config.policy.retry_backoff).await;
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
                        tokio::time::sleep(config.policy.retry_backoff).await;
                        match ctx.platform.watch_endpoints().await {
                            Ok(s) => endpoints = s,
                            Err(e) => tracing::warn!("cannot restart the endpoint watch: {e}"),
                        }
                    }
                },
                () = tokio::time::sleep_until(wake) => shared.feed(Input::Tick),
                () = async {
                    match health_check {
                        Some(at) => tokio::time::sleep_until(at).await,
                        None => std::future::pending().await,
                    }
                } => shared.lock().update_health(),
                () = shared.wake.notified() => {}
            }
        }
        shared.lock().health.send_replace(false);
        tracing::info!("pod runtime stopped");
    }

    /// Feeds one input at the current time and carries out the commands.
    pub(super) fn feed(&mut self, input: Input) {
        let shutdown = matches!(input, Input::Shutdown);
        self.cache.handle(self.ctx.now(), input);
        while let Some(cmd) = self.cache.poll_command() {
            self.execute(cmd);
        }
        self.end_starts(shutdown);
        if !self.probes.is_empty() {
            let cache = &self.cache;
            self.probes.retain(|slot, probe| {
                let pending = cache.slot_state(*slot) == Some(SlotState::Pending);
                if !pending {
                    probe.abort();
                }
                pending
            });
        }
        if self.warming.is_some() {
            self.check_warm();
        }
        if let Some(t) = self.cache.poll_timeout()
            && self.sleeping_until.is_none_or(|s| t < s)
        {
            self.earlier_timer = true;
        }
    }

    /// Closes the `pod.start` span of each creation that has ended: its
    /// slot is ready (ready) or gone (failed); every one on shutdown.
    fn end_starts(&mut self, shutdown: bool) {
        if shutdown {
            self.starts.clear();
            self.starting.clear();
            return;
        }
        if self.starting.is_empty() {
            return;
        }
        let cache = &self.cache;
        let starts = &mut self.starts;
        self.starting.retain(|slot| match cache.slot_state(*slot) {
            Some(SlotState::Pending) => true,
            Some(_) => {
                starts.end(slot, true);
                false
            }
            None => {
                starts.end(slot, false);
                false
            }
        });
    }

    /// Posts the outcome of background work to the driver task.
    fn report(tx: &mpsc::UnboundedSender<Msg>, input: Input) {
        // Gone only when the runtime stopped: nothing to report to.
        let _ = tx.send(Msg::Outcome(Box::new(input)));
    }

    fn execute(&mut self, cmd: Command) {
        let (ctx, tx) = (self.ctx.clone(), self.tx.clone());
        match cmd {
            Command::Reply { request, result } => {
                if let Some(reply) = self.replies.remove(&request) {
                    // A dropped receiver means the caller went away; its
                    // release message follows and returns the load unit.
                    let _ = reply.send(result);
                }
            }
            Command::CreatePod(c) => {
                tracing::info!(pod = %c.pod_name, image = %c.image, "creating function pod");
                if self.starting.insert(c.slot) {
                    self.starts.begin(c.slot, &c.image, &c.pod_name);
                }
                let templates = self.templates.clone();
                self.runtime.spawn(async move {
                    let deadline = ctx.instant_at(c.deadline);
                    let result = tokio::time::timeout_at(
                        deadline,
                        create_pod_and_service(&ctx, &templates, &c),
                    )
                    .await
                    .unwrap_or_else(|_| {
                        Err(CreateFailure::Failed {
                            reason: "pod creation did not finish before the pod-ready deadline"
                                .into(),
                        })
                    });
                    if let Err(e) = &result {
                        tracing::warn!(pod = %c.pod_name, "function pod creation failed: {e:?}");
                    }
                    Self::report(
                        &tx,
                        Input::Created {
                            slot: c.slot,
                            result,
                        },
                    );
                });
            }
            Command::AwaitEndpoint {
                slot,
                pod_name,
                pod_ip,
                deadline,
            } => {
                self.runtime.spawn(async move {
                    let target = EndpointTarget {
                        name: &pod_name,
                        namespace: &ctx.config.namespace,
                        pod_ip,
                    };
                    let deadline = ctx.instant_at(deadline);
                    let mut result =
                        wait_for_endpoint(&*ctx.platform, &ctx.endpoints, &target, deadline).await;
                    if let Ok(endpoint) = &result {
                        // Published is not yet reachable: kube-proxy writes
                        // the service's rules (and cluster DNS learns its
                        // name) on its own time, and a call dialled before
                        // that fails. Wait until the wrapper answers through
                        // the address calls will use.
                        result = match ctx.pool.address(endpoint) {
                            Ok(address) if probe_until_serving(&address, deadline).await => {
                                tracing::info!(pod = %pod_name, %endpoint, "function pod ready");
                                Ok(endpoint.clone())
                            }
                            Ok(address) => Err(format!(
                                "the service publishes the pod, but its wrapper server did not answer a health check at {address} before the pod-ready deadline (is kube-proxy running, and does cluster DNS resolve the service?)"
                            )),
                            Err(e) => Err(e),
                        };
                    }
                    Self::report(&tx, Input::EndpointReady { slot, result });
                });
            }
            Command::ProbeWrapper {
                slot,
                pod_name,
                endpoint,
                deadline,
            } => {
                let probe = self.runtime.spawn(async move {
                    let deadline = ctx.instant_at(deadline);
                    let Ok(address) = ctx.pool.address(&endpoint) else {
                        return;
                    };
                    if probe_until_serving(&address, deadline).await {
                        tracing::info!(pod = %pod_name, %endpoint, "function pod's wrapper server answers its health check");
                        Self::report(&tx, Input::WrapperServing { slot, endpoint });
                    }
                });
                self.probes.insert(slot, probe.abort_handle());
            }
            Command::DeletePod {
                pod_name,
                precondition,
                reason,
            } => {
                tracing::info!(pod = %pod_name, %reason, "deleting function pod and its service");
                ctx.pool.remove(&pod_name);
                self.runtime.spawn(async move {
                    let result = delete_outcome(delete_pod(&ctx, &pod_name, precondition).await);
                    match &result {
                        Ok(()) => {
                            let service = ctx
                                .bounded("delete service", ctx.platform.delete_service(&pod_name))
                                .await;
                            if let Err(e) = service {
                                tracing::warn!(service = %pod_name, "cannot delete the service (GC retries): {e}");
                            }
                        }
                        Err(DeleteFailure::Conflict) => {
                            tracing::info!(pod = %pod_name, "not deleted: the pod changed since it was listed");
                        }
                        Err(DeleteFailure::Failed { reason }) => {
                            tracing::warn!(pod = %pod_name, "cannot delete the pod (retrying): {reason}");
                        }
                    }
                    Self::report(&tx, Input::Deleted { pod_name, result });
                });
            }
            Command::DeleteService { name } => {
                tracing::info!(service = %name, "deleting a function service whose pod is gone");
                self.runtime.spawn(async move {
                    let r = ctx
                        .bounded("delete service", ctx.platform.delete_service(&name))
                        .await;
                    if let Err(e) = r {
                        tracing::warn!(service = %name, "cannot delete the orphaned service: {e}");
                    }
                });
            }
            Command::EnsureService { pod_name } => {
                let templates = self.templates.clone();
                self.runtime.spawn(async move {
                    if let Err(e) = ensure_service(&ctx, &templates, &pod_name).await {
                        tracing::warn!(pod = %pod_name, "cannot ensure the service of the pod: {e}");
                    }
                });
            }
            Command::PersistReclaimAfter {
                pod_name,
                uid,
                reclaim_after,
            } => {
                self.runtime.spawn(async move {
                    let annotations = BTreeMap::from([(
                        RECLAIM_AFTER_ANNOTATION.to_string(),
                        reclaim_after.to_annotation(),
                    )]);
                    let patched = ctx
                        .bounded(
                            "patch pod",
                            ctx.platform
                                .patch_pod_annotations(&pod_name, uid, annotations),
                        )
                        .await;
                    let result = patched.map_err(PlatformError::into_persist_failure);
                    if let Err(PersistFailure::Platform(e)) = &result {
                        tracing::warn!(pod = %pod_name, "cannot extend reclaim-after (retrying while in use): {e}");
                    }
                    Self::report(
                        &tx,
                        Input::Persisted {
                            pod_name,
                            reclaim_after,
                            result,
                        },
                    );
                });
            }
            Command::ListPods { listing } => {
                self.runtime.spawn(async move {
                    // Services first: a function's pod is created before its
                    // service, so a service listed here whose pod is missing
                    // from the later pod list has lost its pod for good.
                    let services = ctx
                        .bounded("list services", ctx.platform.list_services())
                        .await;
                    let pods = ctx
                        .bounded("list pods", ctx.platform.list_pods(IMAGE_LABEL))
                        .await;
                    let result = listing_outcome(
                        services.map(|s| s.iter().filter_map(observe_service).collect()),
                        pods.map(|p| {
                            p.iter()
                                .filter_map(|p| ctx.observe(p))
                                .map(Arc::new)
                                .collect()
                        }),
                    );
                    if let Err(e) = &result {
                        tracing::warn!("cannot list function pods for GC: {e}");
                    }
                    Self::report(&tx, Input::Listed { listing, result });
                });
            }
            Command::Forget { pod_name } => ctx.pool.remove(&pod_name),
        }
    }

    fn on_msg(&mut self, msg: Msg) {
        match msg {
            Msg::Request { id, image, reply } => {
                self.replies.insert(id, reply);
                self.feed(Input::Request { request: id, image });
            }
            Msg::Release { id, unavailable } => {
                self.replies.remove(&id);
                let input = if unavailable {
                    Input::CallUnavailable { request: id }
                } else {
                    Input::CallFinished { request: id }
                };
                self.feed(input);
            }
            Msg::Outcome(input) => self.feed(*input),
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
}

/// How often a starting pod's wrapper server is asked for its health
/// (the one value the simulator models too).
const PROBE_INTERVAL: Duration = crate::domain::pod_cache::WRAPPER_PROBE_INTERVAL;

/// Asks the wrapper server at `endpoint` (`host:port`) for its health
/// (`grpc.health.v1.Health/Check`, the whole server) every
/// [`PROBE_INTERVAL`] until it answers `SERVING` (true) or `deadline`
/// passes (false). Each try opens its own connection, bounded by the
/// interval, so a pod whose IP does not answer costs one short timeout.
async fn probe_until_serving(endpoint: &str, deadline: Instant) -> bool {
    use tonic_health::pb::HealthCheckRequest;
    use tonic_health::pb::health_check_response::ServingStatus;
    use tonic_health::pb::health_client::HealthClient;
    let Ok(target) = tonic::transport::Endpoint::from_shared(format!("http://{endpoint}")) else {
        return false;
    };
    let target = target
        .connect_timeout(PROBE_INTERVAL * 5)
        .timeout(PROBE_INTERVAL * 5);
    while Instant::now() < deadline {
        let next = Instant::now() + PROBE_INTERVAL;
        let check = async {
            let channel = target.connect().await.ok()?;
            let answer = HealthClient::new(channel)
                .check(HealthCheckRequest::default())
                .await
                .ok()?;
            Some(answer.into_inner().status() == ServingStatus::Serving)
        };
        if tokio::time::timeout_at(deadline, check).await == Ok(Some(true)) {
            return true;
        }
        tokio::time::sleep_until(next.min(deadline)).await;
    }
    false
}

/// Deletes pod `name` under `precondition`; a creation precondition is
/// resolved here: the pod is read, left alone (Conflict) unless it carries
/// that creation's annotation and still the reclaim-after the creation
/// wrote (no replica claimed it), and deleted on the UID and
/// resourceVersion read. A pod already gone is a success.
async fn delete_pod(
    ctx: &Ctx,
    name: &str,
    mut precondition: DeletePrecondition,
) -> Result<(), PlatformError> {
    if let Some(nonce) = precondition.creation.take() {
        let pod = match ctx.bounded("get pod", ctx.platform.get_pod(name)).await {
            Ok(p) => p,
            Err(e) if e.is_not_found() => return Ok(()),
            Err(e) => return Err(e),
        };
        let seen = observe_pod(&pod);
        if !seen
            .as_ref()
            .is_some_and(|o| precondition.creation_holds(&nonce, o))
        {
            return Err(PlatformError::Conflict {
                kind: "Pod",
                name: name.to_string(),
                message: "the pod is not the one this creation made".into(),
            });
        }
        precondition.uid = pod.metadata.uid;
        precondition.resource_version = pod.metadata.resource_version;
    }
    ctx.bounded("delete pod", ctx.platform.delete_pod(name, &precondition))
        .await
}

/// Creates the pod of `c` and its service. A pod of that name that exists
/// already is read back and reported as it is: the machine decides whether
/// it is this creation's own (an earlier attempt whose answer was lost).
async fn create_pod_and_service(
    ctx: &Ctx,
    templates: &Templates,
    c: &PodCreation,
) -> Result<(), CreateFailure> {
    let failed = |reason: String| CreateFailure::Failed { reason };
    let config = &ctx.config;
    let mut secrets = Vec::new();
    if let Some(sync) = &ctx.pull_secret {
        sync.ensure()
            .await
            .map_err(|e| failed(format!("cannot sync the registry pull secret: {e}")))?;
        secrets.push(sync.name().to_string());
    }
    let meta = ctx
        .inspector
        .inspect(&c.image)
        .await
        .map_err(|e| failed(format!("unable to get the entrypoint for {}: {e}", c.image)))?;
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
    let pod = build_pod(&templates.pod, &build)
        .map_err(|e| failed(format!("unable to apply the pod: {e}")))?;
    match ctx.platform.create_pod(pod).await {
        Ok(_) => {}
        Err(e) if e.is_already_exists() => {
            // Read back, for the machine to decide whether it is this
            // creation's own; its service is the machine's to ensure then.
            let existing = ctx
                .bounded("get pod", ctx.platform.get_pod(&c.pod_name))
                .await
                .ok()
                .and_then(|p| ctx.observe(&p));
            return Err(e.into_create_failure(existing));
        }
        Err(e) => return Err(e.into_create_failure(None)),
    }
    ensure_service(ctx, templates, &c.pod_name)
        .await
        .map_err(failed)
}

/// Creates the service of pod `name` unless one exists that selects it.
async fn ensure_service(ctx: &Ctx, templates: &Templates, name: &str) -> Result<(), String> {
    let service = build_service(&templates.service, name, &ctx.config.namespace);
    let existing = match ctx
        .bounded("create service", ctx.platform.create_service(service))
        .await
    {
        Ok(_) => return Ok(()),
        Err(PlatformError::AlreadyExists { .. }) => ctx
            .bounded("get service", ctx.platform.get_service(name))
            .await
            .map_err(|e| format!("service {name} exists but cannot be read: {e}"))?,
        Err(e) => return Err(e.service_failure(name)),
    };
    if observe_service(&existing).is_some_and(|s| s.selects_own_pod)
        || existing.metadata.name.is_none()
    {
        Ok(())
    } else {
        Err(format!(
            "a service named {name} already exists and does not select pod {name} ({IMAGE_LABEL}={name})"
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(ip: Option<&str>) -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p"},
            "status": {"phase": "Failed", "reason": "Evicted", "message": "low memory", "podIP": ip},
        }))
        .unwrap()
    }

    #[test]
    fn pod_ip_endpoints() {
        assert_eq!(pod_ip_endpoint("10.244.0.7"), "10.244.0.7:9446");
        assert_eq!(pod_ip_endpoint("fd00::7"), "[fd00::7]:9446");
    }

    #[test]
    fn failure_reasons_come_from_the_status() {
        assert_eq!(
            crate::domain::pod_cache::template::failure_reason(&pod(None)),
            "pod phase Failed, reason Evicted, low memory"
        );
    }
}
