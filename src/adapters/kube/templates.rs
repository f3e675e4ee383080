//! Porch's template objects (FunctionConfig generation): the core/v1
//! `PodTemplate` [`POD_TEMPLATE_NAME`] and the `ServiceTemplate`
//! [`SERVICE_TEMPLATE_NAME`] of the pod namespace, watched into a
//! [`TemplateFeed`], so an edit reaches the next new pod without waiting for
//! `--scan-interval`.
//!
//! As in Porch (spec §5.10), a missing object is created from the inline
//! default (the init container on `WRAPPER_SERVER_IMAGE`), also when it is
//! deleted later. The template version is both objects' `resourceVersion`s.
//! An edit that breaks the template contract is refused with a warning and
//! the last good templates stay in use.
//!
//! The Kubernetes calls: `list` and `watch` (by name) and `create` on
//! `podtemplates` and `servicetemplates.config.porch.kpt.dev` in the pod
//! namespace.

use std::time::Duration;

use k8s_openapi::api::core::v1::PodTemplate;
use kube::api::{ApiResource, DynamicObject, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client};
use tokio::sync::oneshot;
use tokio_stream::StreamExt;

use super::FIELD_MANAGER;
use crate::adapters::pod::{TemplateFeed, TemplatePublisher};
use crate::domain::function_config::{GROUP, VERSION};
use crate::domain::pod_cache::template::{
    POD_TEMPLATE_NAME, SERVICE_TEMPLATE_KIND, SERVICE_TEMPLATE_NAME, SERVICE_TEMPLATE_PLURAL,
    ServiceTemplateObject, default_pod_template_object, default_service_template_object,
    templates_from_objects,
};

/// The `ServiceTemplate` resource for kube's dynamic API.
pub fn service_template_resource() -> ApiResource {
    ApiResource {
        group: GROUP.to_string(),
        version: VERSION.to_string(),
        api_version: format!("{GROUP}/{VERSION}"),
        kind: SERVICE_TEMPLATE_KIND.to_string(),
        plural: SERVICE_TEMPLATE_PLURAL.to_string(),
    }
}

enum Event {
    Pod(Box<Result<watcher::Event<PodTemplate>, watcher::Error>>),
    Service(Box<Result<watcher::Event<DynamicObject>, watcher::Error>>),
}

struct State {
    pods: Api<PodTemplate>,
    services: Api<DynamicObject>,
    namespace: String,
    wrapper_image: String,
    pod: Option<PodTemplate>,
    service: Option<ServiceTemplateObject>,
    publisher: Option<TemplatePublisher>,
    started: Option<oneshot::Sender<Result<TemplateFeed, String>>>,
    last_error: Option<String>,
}

/// Starts watching the template objects of `namespace` and returns a feed
/// of their templates once both exist (created from the inline default,
/// built on `wrapper_image`, when absent). Needs a Tokio runtime; the watch
/// stops when every clone of the feed is dropped.
///
/// Errors: an object breaks the template contract (its name and the broken
/// rule), reading or creating them is forbidden (the RBAC rule to add), or
/// nothing usable arrived within `within` (with the last error).
pub async fn watch_template_objects(
    client: Client,
    namespace: &str,
    wrapper_image: &str,
    within: Duration,
) -> Result<TemplateFeed, String> {
    let pods: Api<PodTemplate> = Api::namespaced(client.clone(), namespace);
    let services: Api<DynamicObject> =
        Api::namespaced_with(client, namespace, &service_template_resource());
    let by_name = |name: &str| watcher::Config::default().fields(&format!("metadata.name={name}"));
    let pod_events = watcher(pods.clone(), by_name(POD_TEMPLATE_NAME))
        .default_backoff()
        .map(|e| Event::Pod(Box::new(e)));
    let service_events = watcher(services.clone(), by_name(SERVICE_TEMPLATE_NAME))
        .default_backoff()
        .map(|e| Event::Service(Box::new(e)));
    let (started, feed) = oneshot::channel();
    let mut state = State {
        pods,
        services,
        namespace: namespace.to_string(),
        wrapper_image: wrapper_image.to_string(),
        pod: None,
        service: None,
        publisher: None,
        started: Some(started),
        last_error: None,
    };
    let (last_tx, last_rx) = tokio::sync::watch::channel(None::<String>);
    tokio::spawn(async move {
        let mut events = Box::pin(pod_events.merge(service_events));
        while let Some(event) = events.next().await {
            state.on_event(event).await;
            if state.started.is_some() {
                last_tx.send_replace(state.last_error.clone());
            } else if state
                .publisher
                .as_ref()
                .is_none_or(TemplatePublisher::is_closed)
            {
                // Startup failed, or the pod runtime is gone.
                return;
            }
        }
    });
    match tokio::time::timeout(within, feed).await {
        Ok(Ok(result)) => result,
        Ok(Err(_)) => Err("the template watch stopped".into()),
        Err(_) => {
            let last = last_rx.borrow().clone();
            Err(format!(
                "PodTemplate {POD_TEMPLATE_NAME} and {SERVICE_TEMPLATE_KIND} {SERVICE_TEMPLATE_NAME} were not readable within {}s{}",
                within.as_secs(),
                last.map(|e| format!(": {e}")).unwrap_or_default()
            ))
        }
    }
}

fn forbidden(e: &watcher::Error) -> Option<String> {
    match e {
        watcher::Error::InitialListFailed(kube::Error::Api(s))
        | watcher::Error::WatchStartFailed(kube::Error::Api(s))
            if s.code == 403 || s.code == 404 =>
        {
            Some(s.message.clone())
        }
        _ => None,
    }
}

impl State {
    async fn on_event(&mut self, event: Event) {
        let error = match event {
            Event::Pod(e) => match *e {
                Ok(watcher::Event::Apply(p) | watcher::Event::InitApply(p)) => {
                    self.pod = Some(p);
                    None
                }
                Ok(watcher::Event::Delete(_)) => {
                    self.pod = None;
                    self.create_pod_template().await;
                    None
                }
                Ok(watcher::Event::InitDone) => {
                    if self.pod.is_none() {
                        self.create_pod_template().await;
                    }
                    None
                }
                Ok(watcher::Event::Init) => None,
                Err(e) => Some(e),
            },
            Event::Service(e) => match *e {
                Ok(watcher::Event::Apply(o) | watcher::Event::InitApply(o)) => {
                    match serde_json::to_value(&o).and_then(serde_json::from_value) {
                        Ok(s) => self.service = Some(s),
                        Err(e) => self.problem(format!(
                            "{SERVICE_TEMPLATE_KIND} {SERVICE_TEMPLATE_NAME} does not decode: {e}"
                        )),
                    }
                    None
                }
                Ok(watcher::Event::Delete(_)) => {
                    self.service = None;
                    self.create_service_template().await;
                    None
                }
                Ok(watcher::Event::InitDone) => {
                    if self.service.is_none() {
                        self.create_service_template().await;
                    }
                    None
                }
                Ok(watcher::Event::Init) => None,
                Err(e) => Some(e),
            },
        };
        match error {
            Some(e) => match forbidden(&e) {
                Some(m) => self.fail(format!(
                    "cannot watch the template objects in namespace {:?}: {m} (the runner's service account needs list and watch on podtemplates and servicetemplates.{GROUP})",
                    self.namespace
                )),
                None => self.problem(format!("template watch error (retrying): {e}")),
            },
            None => self.update(),
        }
    }

    /// Publishes the templates when both objects are known and valid.
    fn update(&mut self) {
        let (Some(pod), Some(service)) = (&self.pod, &self.service) else {
            return;
        };
        match templates_from_objects(pod, service) {
            Ok(t) => {
                if let Some(publisher) = &self.publisher {
                    let version = t.version.clone();
                    if publisher.publish(t) {
                        tracing::info!(%version, "the function pod template objects changed");
                    }
                } else {
                    tracing::info!(version = %t.version, "function pod templates from PodTemplate {POD_TEMPLATE_NAME} and {SERVICE_TEMPLATE_KIND} {SERVICE_TEMPLATE_NAME}");
                    let (publisher, feed) = TemplateFeed::new(t);
                    self.publisher = Some(publisher);
                    if let Some(started) = self.started.take() {
                        let _ = started.send(Ok(feed));
                    }
                }
            }
            Err(e) => {
                let e = e.to_string();
                if self.started.is_some() {
                    self.fail(e);
                } else {
                    tracing::warn!(
                        "the changed function pod templates are not usable, keeping version {}: {e}",
                        self.publisher
                            .as_ref()
                            .map(|p| p.current().version.clone())
                            .unwrap_or_default()
                    );
                }
            }
        }
    }

    /// A startup failure; after startup, a warning.
    fn fail(&mut self, message: String) {
        match self.started.take() {
            Some(s) => {
                let _ = s.send(Err(message));
            }
            None => tracing::warn!("{message}"),
        }
    }

    fn problem(&mut self, message: String) {
        if self.started.is_none() {
            tracing::warn!("{message}");
        }
        self.last_error = Some(message);
    }

    async fn create_pod_template(&mut self) {
        let object = default_pod_template_object(&self.namespace, &self.wrapper_image);
        let result = self.pods.create(&post_params(), &object).await.map(|_| ());
        self.created(&format!("PodTemplate {POD_TEMPLATE_NAME}"), result);
    }

    async fn create_service_template(&mut self) {
        let object = default_service_template_object(&self.namespace);
        let mut value = match serde_json::to_value(&object) {
            Ok(v) => v,
            Err(e) => return self.problem(e.to_string()),
        };
        value["apiVersion"] = format!("{GROUP}/{VERSION}").into();
        value["kind"] = SERVICE_TEMPLATE_KIND.into();
        let object: DynamicObject = match serde_json::from_value(value) {
            Ok(o) => o,
            Err(e) => return self.problem(e.to_string()),
        };
        let result = self
            .services
            .create(&post_params(), &object)
            .await
            .map(|_| ());
        self.created(
            &format!("{SERVICE_TEMPLATE_KIND} {SERVICE_TEMPLATE_NAME}"),
            result,
        );
    }

    fn created(&mut self, what: &str, result: Result<(), kube::Error>) {
        match result {
            Ok(()) => tracing::info!(
                namespace = %self.namespace,
                "{what} did not exist; created it from the built-in default"
            ),
            // Another replica was faster; the watch delivers its object.
            Err(kube::Error::Api(s)) if s.code == 409 => {}
            Err(kube::Error::Api(s)) if s.code == 403 => self.fail(format!(
                "cannot create {what} in namespace {:?}: {} (create it, or grant the runner's service account create on it)",
                self.namespace, s.message
            )),
            Err(e) => self.problem(format!("cannot create {what}: {e}")),
        }
    }
}

fn post_params() -> PostParams {
    PostParams {
        field_manager: Some(FIELD_MANAGER.into()),
        ..PostParams::default()
    }
}
