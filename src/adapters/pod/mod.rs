//! The pod evaluator: runs functions in function pods on Kubernetes (Porch
//! spec §5), as a [`FunctionEvaluator`].
//!
//! [`PodEvaluator::start`] takes the templates from a [`TemplateFeed`]
//! (and follows its changes), opens a watch on the labelled pods of the pod
//! namespace, adopts the pods an earlier run or
//! another replica left (by the pod cache's rules), starts warm-up and spawns
//! the driver task (`driver`) that carries out the pod-cache state machine's
//! commands. Each call then asks the driver for a pod (answered from memory
//! when one is ready), calls the wrapper server in it over a pooled
//! connection ([`connections`]), and releases the pod. A call that finds its
//! pod unavailable drains it: this replica gives it no new call, so the next
//! call gets another pod; the pod itself is left to GC, since calls of other
//! replicas may still be in it.

pub mod connections;
mod driver;
mod endpoints;
#[cfg(test)]
mod sim_tests;
mod tags;
pub mod templates;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use tokio::sync::{mpsc, oneshot, watch};
use tonic::Code;

use tracing::Instrument;

use crate::adapters::grpc::pb::EvaluateFunctionRequest;
use crate::adapters::grpc::status::{StatusSource, connection_lost, from_status};
use crate::adapters::oci::PullSecretSync;
use crate::adapters::telemetry::{self, PodSample, PodState, spans};
use crate::domain::evaluation::{EvalError, EvaluationRequest, EvaluationResponse};
use crate::domain::function_config::FunctionConfigStore;
use crate::domain::image::resolve_image;
use crate::domain::pod_cache::Input;
use crate::domain::pod_cache::template::{kubelet_failure, warning_failure};
use crate::domain::pod_cache::{
    Assignment, ErrorClass, IMAGE_LABEL, PodCacheError, PodCachePolicy, RequestId, SlotState,
};
use crate::ports::{Clock, FunctionEvaluator, ImageInspector, PodPlatform, PodWarningStream};
use connections::{ConnectionPool, Resolver};
use driver::{Ctx, Driver, Msg, Shared};
pub use tags::DEFAULT_TAG_LIST_TTL;
pub use templates::{TemplateFeed, TemplatePublisher};
use tokio_stream::StreamExt;

/// How the runner addresses the wrapper server in a function pod
/// (`--pod-address-mode service|pod-ip`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum AddressMode {
    /// `<service>.<namespace>.svc.cluster.local:9446` through the pod's
    /// ClusterIP service (Porch's way; needed behind service meshes). The
    /// pod counts as ready once the service publishes it as a ready endpoint.
    #[default]
    Service,
    /// `<pod IP>:9446`, straight to the pod; ready as soon as the pod is.
    PodIp,
}

/// Everything the pod runtime is configured with.
#[derive(Debug, Clone)]
pub struct PodRuntimeConfig {
    /// `--pod-namespace`.
    pub namespace: String,
    /// Per-function settings, pod-ready timeout and replica token.
    pub policy: PodCachePolicy,
    /// The pod and service templates, and their changes.
    pub templates: TemplateFeed,
    /// `WRAPPER_SERVER_IMAGE`: the image of the init container that provides
    /// the wrapper server.
    pub wrapper_image: String,
    /// Images to start one pod for at startup (`--pod-cache-config` with
    /// `--warm-up-pod-cache`).
    pub warm_up: Vec<String>,
    /// `--scan-interval`: GC period; zero disables GC.
    pub scan_interval: Duration,
    /// `--pod-address-mode`.
    pub address_mode: AddressMode,
    /// `--max-request-body-size`, bytes: passed to the wrapper and used as
    /// the client's message limit.
    pub max_message_bytes: usize,
    /// Bound on connecting to a wrapper server.
    pub connect_timeout: Duration,
    /// `--api-timeout`: bound on each API call the driver makes (a pod
    /// creation is bounded by its pod-ready deadline instead).
    pub api_timeout: Duration,
    /// `--default-image-prefix`, applied to short image names.
    pub default_image_prefix: String,
    /// `--tag-list-ttl`: how long a registry's tag list answers step tag
    /// constraints before it is listed again (zero: listed on every call).
    pub tag_list_ttl: Duration,
    /// Where the time fed to the pod cache comes from: the wall clock in
    /// production (reclaim-after annotations are wall-clock times shared by
    /// the replicas).
    pub clock: Arc<dyn Clock>,
}

/// Why the pod runtime cannot start.
#[derive(Debug, thiserror::Error)]
pub enum PodRuntimeError {
    /// The pod template could not be loaded.
    #[error("failed to initialize pod evaluator: failed to generate a base pod template: {0}")]
    Template(String),
    /// The pod watch could not be opened.
    #[error(
        "failed to initialize pod evaluator: cannot watch pods in namespace {namespace:?}: {detail}"
    )]
    Watch {
        /// The pod namespace.
        namespace: String,
        /// The platform's error.
        detail: String,
    },
}

/// The pod runtime as a [`FunctionEvaluator`]: answers NotFound only for a
/// step's tag constraint that no registry tag satisfies (any image can run
/// in a pod), so it goes last in a chain.
pub struct PodEvaluator {
    shared: Arc<Shared>,
    tx: mpsc::UnboundedSender<Msg>,
    /// The policy the runtime started with; FunctionConfig changes replace
    /// its per-function part.
    policy: PodCachePolicy,
    pool: Arc<ConnectionPool>,
    health: watch::Receiver<bool>,
    next_id: AtomicU64,
    prefix: String,
    /// To ask a pod whose connection broke what the kubelet says of it.
    platform: Arc<dyn PodPlatform>,
    /// Registry tag lists, to resolve a step's tag constraint.
    tag_lists: tags::TagLists,
}

impl std::fmt::Debug for PodEvaluator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PodEvaluator")
            .field("prefix", &self.prefix)
            .finish_non_exhaustive()
    }
}

/// Returns the request's load unit to the driver however the call ends
/// (success, error, or the caller's future being dropped).
struct Release {
    shared: Arc<Shared>,
    id: RequestId,
    unavailable: bool,
}

impl Drop for Release {
    fn drop(&mut self) {
        self.shared.handle(Msg::Release {
            id: self.id,
            unavailable: self.unavailable,
        });
    }
}

/// A pod assigned to one call: call the wrapper at
/// [`assignment`](Self::assignment), then drop the lease (or
/// [`unavailable`](Self::unavailable) if the pod did not answer).
pub(crate) struct Lease {
    /// The pod and its endpoint.
    pub(crate) assignment: Assignment,
    release: Release,
}

impl Lease {
    /// The pod did not answer (UNAVAILABLE, a refused or broken
    /// connection): released, and the pod drained on this replica.
    pub(crate) fn unavailable(mut self) {
        self.release.unavailable = true;
    }
}

impl PodEvaluator {
    /// Starts the pod runtime: takes the current templates of the feed,
    /// opens the pod watch, lists existing pods for adoption (a failed
    /// listing only skips adoption, as in Porch), starts warm-up and spawns
    /// the driver. Returns at once; [`ready`](Self::ready) resolves when
    /// adoption and warm-up are done. Needs a Tokio runtime.
    ///
    /// The machine's GC period is `config.scan_interval` and it waits for
    /// service endpoints in [`AddressMode::Service`], whatever
    /// `config.policy` says.
    ///
    /// Errors: [`PodRuntimeError::Watch`] when the pods cannot be watched.
    pub async fn start(
        mut config: PodRuntimeConfig,
        platform: Arc<dyn PodPlatform>,
        inspector: Arc<dyn ImageInspector>,
        pull_secret: Option<Arc<PullSecretSync>>,
        resolver: Box<dyn Resolver>,
    ) -> Result<Self, PodRuntimeError> {
        config.policy.scan_interval = config.scan_interval;
        config.policy.await_endpoints = config.address_mode == AddressMode::Service;
        let templates = config.templates.current();
        let watch_stream =
            platform
                .watch_pods(IMAGE_LABEL)
                .await
                .map_err(|e| PodRuntimeError::Watch {
                    namespace: config.namespace.clone(),
                    detail: e.to_string(),
                })?;
        // Without an endpoint watch the service wait polls; not fatal.
        let endpoint_stream = platform.watch_endpoints().await.unwrap_or_else(|e| {
            tracing::warn!("cannot watch endpoints; waiting for services by polling: {e}");
            Box::pin(tokio_stream::pending())
        });
        // Without Events, pods that cannot start are seen in their status.
        let warnings = platform.watch_pod_warnings().await.unwrap_or_else(|e| {
            tracing::warn!("cannot watch pod warnings; pods that cannot start are seen in their status only: {e}");
            Box::pin(tokio_stream::pending())
        });
        let listed = tokio::time::timeout(config.api_timeout, platform.list_pods(IMAGE_LABEL))
            .await
            .unwrap_or_else(|_| {
                Err(crate::ports::PlatformError::Transient(
                    "no answer from the API server".into(),
                ))
            });
        let existing = match listed {
            Ok(pods) => Some(pods),
            Err(e) => {
                tracing::warn!("cannot list existing function pods; adoption skipped: {e}");
                None
            }
        };
        let status_platform = platform.clone();
        let pool = Arc::new(ConnectionPool::new(
            resolver,
            config.connect_timeout,
            config.max_message_bytes,
        ));
        let prefix = config.default_image_prefix.clone();
        let tag_lists = tags::TagLists::new(inspector.clone(), config.tag_list_ttl);
        let warm_up = tag_lists
            .resolve_warm_up(&config.warm_up, &prefix, config.api_timeout)
            .await;
        let policy = config.policy.clone();
        let ctx = Arc::new(Ctx {
            config,
            platform,
            inspector,
            pull_secret,
            pool: pool.clone(),
            endpoints: Arc::new(endpoints::EndpointSignal::new()),
        });
        let (tx, rx) = mpsc::unbounded_channel();
        tokio::spawn(forward_warnings(warnings, tx.clone()));
        let (health_tx, health) = watch::channel(false);
        let mut driver = Driver::new(ctx, templates, health_tx, tx.clone());
        driver.start(existing, warm_up);
        let shared = Arc::new(Shared::new(driver));
        let weak = Arc::downgrade(&shared);
        telemetry::observe_pods(move || {
            weak.upgrade()
                .map(|s| s.with_cache(pod_samples))
                .unwrap_or_default()
        });
        tokio::spawn(Driver::run(
            shared.clone(),
            rx,
            watch_stream,
            endpoint_stream,
        ));
        Ok(Self {
            shared,
            tx,
            policy,
            pool,
            health,
            next_id: AtomicU64::new(1),
            prefix,
            platform: status_platform,
            tag_lists,
        })
    }

    /// What the kubelet says of pod `name` once a call's connection to it
    /// broke: a container killed for memory or crashed
    /// ([`kubelet_failure`]), read from the pod's status, which the kubelet
    /// writes a second or two after the container died; `None` when it
    /// says nothing within [`BROKEN_POD_PATIENCE`], or the pod is gone or
    /// being deleted.
    async fn why_broken(&self, name: &str) -> Option<String> {
        let deadline = Instant::now() + BROKEN_POD_PATIENCE;
        loop {
            match tokio::time::timeout(BROKEN_POD_PATIENCE, self.platform.get_pod(name)).await {
                Ok(Ok(pod)) => {
                    if let Some(reason) = kubelet_failure(&pod) {
                        return Some(reason);
                    }
                    if pod.metadata.deletion_timestamp.is_some() {
                        // Deleted: that is why, and the error says the pod
                        // went away.
                        return None;
                    }
                }
                Ok(Err(e)) if e.is_not_found() => return None,
                _ => {}
            }
            if Instant::now() >= deadline {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    /// Resolves once startup adoption and warm-up are done (warm-up pods
    /// ready or given up); health reports NOT_SERVING until then.
    pub fn ready(&self) -> impl std::future::Future<Output = ()> + Send + 'static {
        let mut health = self.health.clone();
        async move {
            let _ = health.wait_for(|h| *h).await;
        }
    }

    /// The runtime's health, as it changes: false until adoption and
    /// warm-up are done, false while the pod watch has been down for
    /// longer than the pod-ready timeout (the runtime cannot see pods start
    /// or go), and false once the runtime has stopped.
    pub fn health(&self) -> watch::Receiver<bool> {
        self.health.clone()
    }

    /// Stops the driver: waiting callers get UNAVAILABLE, new calls are
    /// refused; pods are left for GC and other replicas.
    pub fn shutdown(&self) {
        let _ = self.tx.send(Msg::Shutdown);
    }

    /// Takes per-function settings from `store` from now on (the
    /// FunctionConfig generation: called with every new snapshot). The next
    /// request sees them; see the pod cache's `Input::PolicyChanged` for
    /// what happens to existing pods.
    pub fn update_function_configs(&self, store: Arc<FunctionConfigStore>) {
        let policy = self.policy.clone().with_settings_source(store);
        let _ = self.tx.send(Msg::Policy(Box::new(policy)));
    }

    /// Asks the driver for a pod for `image` (already resolved); the lease
    /// holds its load unit until dropped.
    pub(crate) async fn lease(&self, image: &str) -> Result<Lease, EvalError> {
        let id = RequestId(self.next_id.fetch_add(1, Ordering::Relaxed));
        let release = Release {
            shared: self.shared.clone(),
            id,
            unavailable: false,
        };
        let (reply, rx) = oneshot::channel();
        self.shared.handle(Msg::Request {
            id,
            image: image.to_string(),
            reply,
        });
        match rx.await {
            Ok(Ok(assignment)) => Ok(Lease {
                assignment,
                release,
            }),
            Ok(Err(e)) => Err(pod_error(image, &e)),
            Err(_) => Err(EvalError::Unavailable("the pod runtime has stopped".into())),
        }
    }
}

impl Drop for PodEvaluator {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// The pod cache's slots as samples for the pod gauges (a draining pod
/// counts as busy while calls are still in it).
fn pod_samples(cache: &crate::domain::pod_cache::PodCache) -> Vec<PodSample> {
    cache
        .slots()
        .map(|s| PodSample {
            image: s.image.to_string(),
            state: match s.state {
                SlotState::Pending => PodState::Starting,
                _ if s.load == 0 => PodState::Idle,
                SlotState::Ready | SlotState::Draining => PodState::Busy,
            },
            waiting: s.waiting as u64,
        })
        .collect()
}

/// How long a call whose connection to its pod broke waits for the pod's
/// status to say why (the kubelet writes it after its next look at the
/// containers, about a second).
const BROKEN_POD_PATIENCE: Duration = Duration::from_secs(3);

/// Feeds the pod cache every warning that says the kubelet cannot start a
/// pod ([`warning_failure`]), until the stream or the driver ends.
async fn forward_warnings(mut warnings: PodWarningStream, tx: mpsc::UnboundedSender<Msg>) {
    while let Some(w) = warnings.next().await {
        let Some(reason) = warning_failure(&w.reason, &w.message, w.container.as_deref()) else {
            continue;
        };
        tracing::info!(pod = %w.pod_name, "the kubelet cannot start the function pod: {reason}");
        let input = Input::PodCannotStart {
            pod_name: w.pod_name,
            uid: w.pod_uid,
            reason,
        };
        if tx.send(Msg::Outcome(Box::new(input))).is_err() {
            return;
        }
    }
}

/// Maps a pod-cache error to an evaluation error by its class, with Porch's
/// `unable to get the grpc client to the pod for <image>` prefix.
fn pod_error(image: &str, e: &PodCacheError) -> EvalError {
    let message = format!("unable to get the grpc client to the pod for {image}: {e}");
    match e.class() {
        ErrorClass::ResourceExhausted => EvalError::Exhausted(message),
        ErrorClass::DeadlineExceeded => EvalError::NotReadyInTime(message),
        ErrorClass::Cancelled => EvalError::Cancelled {
            image: image.to_string(),
        },
        ErrorClass::InvalidArgument => EvalError::InvalidInput(message),
        ErrorClass::Unavailable => EvalError::Unavailable(message),
        ErrorClass::Internal => EvalError::Internal(message),
    }
}

#[async_trait]
impl FunctionEvaluator for PodEvaluator {
    /// Gets a pod for the (resolved) image — at the version the step's
    /// `tag` picks from the registry's tag list when the request carries one
    /// (Porch's rule; each list kept for `--tag-list-ttl`) — then forwards
    /// the ResourceList to its wrapper server; `request.timeout` covers
    /// both.
    async fn evaluate(&self, request: EvaluationRequest) -> Result<EvaluationResponse, EvalError> {
        let started = Instant::now();
        let image = match request.tag.as_deref() {
            Some(tag) => {
                self.tag_lists
                    .resolve(&request.image, tag, &self.prefix)
                    .await?
            }
            None => resolve_image(&request.image, &self.prefix),
        };
        spans::claim("pod");
        let lease = self.lease(&image).instrument(spans::pod_wait(&image));
        let lease = match request.timeout {
            Some(t) => tokio::time::timeout(t, lease)
                .await
                .map_err(|_| EvalError::Timeout {
                    image: request.image.clone(),
                    after: t,
                })??,
            None => lease.await?,
        };
        let assignment = &lease.assignment;
        let mut client = match self.pool.client(&assignment.pod_name, &assignment.endpoint) {
            Ok(c) => c,
            Err(e) => {
                return Err(EvalError::Unavailable(format!(
                    "unable to get the grpc client to the pod for {image}: {e}"
                )));
            }
        };
        let mut call = tonic::Request::new(EvaluateFunctionRequest {
            resource_list: request.resource_list,
            // The version the pod runs; its wrapper server needs no tag.
            image: if request.tag.is_some() {
                image.clone()
            } else {
                request.image.clone()
            },
            tag: String::new(),
        });
        let remaining = request.timeout.map(|t| t.saturating_sub(started.elapsed()));
        if let Some(left) = remaining {
            call.set_timeout(left);
        }
        let call_started = Instant::now();
        let result = async move {
            // The wrapper server continues this call's trace.
            telemetry::grpc::inject_context(call.metadata_mut());
            let answer = client.evaluate_function(call);
            match remaining {
                // The wrapper server keeps the same deadline (grpc-timeout);
                // this one also holds when the pod stops answering. `None`:
                // the time is up.
                Some(left) => tokio::time::timeout(left, answer).await.ok(),
                None => Some(answer.await),
            }
        }
        .instrument(spans::function_run("pod", &image))
        .await;
        // `call_us`: how long the pod was in use by this call (microseconds).
        tracing::debug!(
            image = %request.image,
            pod = %assignment.pod_name,
            elapsed = ?started.elapsed(),
            call_us = u64::try_from(call_started.elapsed().as_micros()).unwrap_or(u64::MAX),
            "evaluated in pod"
        );
        match result {
            None => Err(EvalError::Timeout {
                image: request.image.clone(),
                after: request.timeout.unwrap_or_default(),
            }),
            Some(Ok(r)) => {
                let r = r.into_inner();
                if !r.log.is_empty() {
                    tracing::warn!(
                        "evaluating {} succeeded, but stderr is: {}",
                        request.image,
                        String::from_utf8_lossy(&r.log)
                    );
                }
                Ok(EvaluationResponse {
                    resource_list: r.resource_list,
                    log: r.log,
                })
            }
            // A wrapper server that gave up on the call's deadline.
            Some(Err(status))
                if status.code() == Code::Cancelled
                    && request.timeout.is_some_and(|t| started.elapsed() >= t) =>
            {
                Err(EvalError::Timeout {
                    image: request.image.clone(),
                    after: request.timeout.unwrap_or_default(),
                })
            }
            Some(Err(status)) => {
                let pod = lease.assignment.pod_name.clone();
                let source = StatusSource::WrapperPod(&pod);
                let mut error = from_status(source, &request.image, &status, request.timeout);
                if connection_lost(&status) {
                    self.pool.remove(&pod);
                    lease.unavailable();
                    // A wrapper killed for memory or crashed: say so, rather
                    // than only that the connection broke.
                    if let EvalError::Unavailable(message) = &mut error
                        && let Some(why) = self.why_broken(&pod).await
                    {
                        message.push_str(&format!("; the kubelet reports {why}"));
                    }
                }
                Err(error)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn address_modes_parse() {
        use clap::ValueEnum;
        assert_eq!(
            AddressMode::from_str("service", false),
            Ok(AddressMode::Service)
        );
        assert_eq!(
            AddressMode::from_str("pod-ip", false),
            Ok(AddressMode::PodIp)
        );
        assert!(AddressMode::from_str("ip", false).is_err());
    }

    #[test]
    fn pod_cache_errors_keep_their_class() {
        let e = PodCacheError::Exhausted {
            image: "i".into(),
            pods: 1,
            max_load_per_pod: 2,
        };
        let mapped = pod_error("i", &e);
        assert!(matches!(mapped, EvalError::Exhausted(_)), "{mapped:?}");
        assert!(
            mapped
                .to_string()
                .starts_with("unable to get the grpc client to the pod for i: no capacity")
        );
        let gone = PodCacheError::PodGone {
            image: "i".into(),
            pod: "p".into(),
            failed: true,
        };
        assert!(matches!(pod_error("i", &gone), EvalError::Unavailable(_)));
        let late = PodCacheError::CreationTimedOut {
            image: "i".into(),
            pod: "p".into(),
            after: Duration::from_secs(1),
        };
        assert!(matches!(
            pod_error("i", &late),
            EvalError::NotReadyInTime(_)
        ));
    }
}
