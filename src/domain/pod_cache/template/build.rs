//! Building a function's pod and service from the templates: the pod
//! name, image, entrypoint, labels and annotations of one pod.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Pod, Service, ServiceSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::domain::pod_cache::io::PodCreation;
use crate::domain::pod_cache::time::UnixTime;
use crate::domain::pod_cache::{
    CREATION_ANNOTATION, IMAGE_LABEL, RECLAIM_AFTER_ANNOTATION, SETTINGS_VERSION_ANNOTATION,
    TEMPLATE_VERSION_ANNOTATION, WRAPPER_PORT,
};

use super::*;

/// Everything [`build_pod`] needs besides the template.
#[derive(Debug, Clone, Copy)]
pub struct PodBuild<'a> {
    /// Pod name, service name and [`IMAGE_LABEL`] value.
    pub pod_name: &'a str,
    /// The pod namespace (`--pod-namespace`).
    pub namespace: &'a str,
    /// The function image.
    pub image: &'a str,
    /// The image's entrypoint (ENTRYPOINT followed by CMD), appended to the args.
    pub entrypoint: &'a [String],
    /// Template version recorded in [`TEMPLATE_VERSION_ANNOTATION`].
    pub template_version: &'a str,
    /// Settings version recorded in [`SETTINGS_VERSION_ANNOTATION`], if any.
    pub settings_version: Option<&'a str>,
    /// Creation identity recorded in [`CREATION_ANNOTATION`], if any.
    pub creation: Option<&'a str>,
    /// Initial [`RECLAIM_AFTER_ANNOTATION`].
    pub reclaim_after: UnixTime,
    /// Value of the wrapper's `--max-request-body-size`, in bytes.
    pub max_request_body_size: usize,
    /// Image for the wrapper's init container (`WRAPPER_SERVER_IMAGE`), if set.
    pub wrapper_image: Option<&'a str>,
    /// Pull secrets to add (merged by name, never replacing the template's).
    pub image_pull_secrets: &'a [String],
    /// Per-function overrides.
    pub overrides: &'a TemplateOverrides,
}

impl<'a> PodBuild<'a> {
    /// The build parameters of a [`Command::CreatePod`](crate::domain::pod_cache::Command::CreatePod):
    /// name, image, template version and initial reclaim-after from
    /// `creation`, in `namespace`, with the image's `entrypoint`, the
    /// `overrides` derived from the creation's settings
    /// ([`TemplateOverrides::from_settings`]) and the wrapper's message limit
    /// `max_request_body_size` (bytes). No wrapper image and no pull secrets:
    /// set those with struct-update syntax where they apply. The one place
    /// that turns a creation command into a build (driver, simulator, tests).
    pub fn for_creation(
        creation: &'a PodCreation,
        namespace: &'a str,
        entrypoint: &'a [String],
        overrides: &'a TemplateOverrides,
        max_request_body_size: usize,
    ) -> Self {
        Self {
            pod_name: &creation.pod_name,
            namespace,
            image: &creation.image,
            entrypoint,
            template_version: &creation.template_version,
            settings_version: creation.settings_version.as_deref(),
            creation: Some(&creation.creation),
            reclaim_after: creation.reclaim_after,
            max_request_body_size,
            wrapper_image: None,
            image_pull_secrets: &[],
            overrides,
        }
    }
}

/// Clears what the API server owns, so a template read from the cluster can
/// be created again.
pub(super) fn reset_server_fields(meta: &mut ObjectMeta) {
    meta.uid = None;
    meta.resource_version = None;
    meta.creation_timestamp = None;
    meta.deletion_timestamp = None;
    meta.deletion_grace_period_seconds = None;
    meta.generation = None;
    meta.managed_fields = None;
    meta.self_link = None;
    meta.generate_name = None;
}

/// Builds a function pod from `template` (Porch §5.11 steps 4–10, fixed):
/// - the `function` container gets the image and args = template args +
///   `--port 9446 --max-request-body-size <n> --` + the image entrypoint;
/// - metadata: the fixed name, the namespace, label [`IMAGE_LABEL`] = name,
///   annotations [`TEMPLATE_VERSION_ANNOTATION`] and
///   [`RECLAIM_AFTER_ANNOTATION`], existing labels/annotations kept;
/// - the wrapper's init container (the one filling the wrapper volume, not
///   `initContainers[0]`) gets `wrapper_image`;
/// - pull secrets merged by name; overrides applied to the containers by role.
///
/// Errors: the template breaks the contract ([`validate_pod_template`]), the
/// entrypoint is empty, or init-container overrides have no target.
pub fn build_pod(template: &Pod, b: &PodBuild<'_>) -> Result<Pod, TemplateError> {
    let layout = inspect(template)?;
    if b.entrypoint.is_empty() {
        return Err(TemplateError::EmptyEntrypoint {
            image: b.image.to_string(),
        });
    }
    if layout.wrapper_init.is_none() && !b.overrides.init_container.is_empty() {
        return Err(TemplateError::NoInitContainerForOverrides);
    }
    let mut pod = template.clone();
    pod.status = None;
    let meta = &mut pod.metadata;
    reset_server_fields(meta);
    meta.name = Some(b.pod_name.to_string());
    meta.namespace = Some(b.namespace.to_string());
    meta.labels
        .get_or_insert_with(BTreeMap::new)
        .insert(IMAGE_LABEL.to_string(), b.pod_name.to_string());
    let annotations = meta.annotations.get_or_insert_with(BTreeMap::new);
    annotations.insert(
        TEMPLATE_VERSION_ANNOTATION.to_string(),
        b.template_version.to_string(),
    );
    annotations.insert(
        RECLAIM_AFTER_ANNOTATION.to_string(),
        b.reclaim_after.to_annotation(),
    );
    if let Some(v) = b.settings_version {
        annotations.insert(SETTINGS_VERSION_ANNOTATION.to_string(), v.to_string());
    }
    if let Some(v) = b.creation {
        annotations.insert(CREATION_ANNOTATION.to_string(), v.to_string());
    }

    let spec = pod.spec.as_mut().expect("inspected");
    let function = &mut spec.containers[layout.function];
    function.image = Some(b.image.to_string());
    let args = function.args.get_or_insert_with(Vec::new);
    args.extend([
        "--port".to_string(),
        WRAPPER_PORT.to_string(),
        "--max-request-body-size".to_string(),
        b.max_request_body_size.to_string(),
        "--".to_string(),
    ]);
    args.extend(b.entrypoint.iter().cloned());
    apply_container_overrides(function, &b.overrides.container);
    if let Some(i) = layout.wrapper_init {
        let init = &mut spec.init_containers.as_mut().expect("inspected")[i];
        if let Some(image) = b.wrapper_image {
            init.image = Some(image.to_string());
        }
        apply_container_overrides(init, &b.overrides.init_container);
    }
    merge_image_pull_secrets(spec, b.image_pull_secrets);
    if let Some(sa) = b
        .overrides
        .service_account_name
        .as_deref()
        .filter(|s| !s.is_empty())
    {
        spec.service_account_name = Some(sa.to_string());
    }
    if b.overrides.security_context.is_some() {
        spec.security_context
            .clone_from(&b.overrides.security_context);
    }
    Ok(pod)
}

/// Builds the ClusterIP service in front of pod `pod_name` (Porch §5.11 step
/// 12): name = pod name, selector [`IMAGE_LABEL`] = pod name (other selector
/// keys kept), label [`SERVICE_NAME_LABEL`] = pod name, the template's other
/// labels and annotations kept (Porch Gen C drops them, spec §10 item 24).
pub fn build_service(template: &Service, pod_name: &str, namespace: &str) -> Service {
    let mut svc = template.clone();
    svc.status = None;
    let meta = &mut svc.metadata;
    reset_server_fields(meta);
    meta.name = Some(pod_name.to_string());
    meta.namespace = Some(namespace.to_string());
    meta.labels
        .get_or_insert_with(BTreeMap::new)
        .insert(SERVICE_NAME_LABEL.to_string(), pod_name.to_string());
    let spec = svc.spec.get_or_insert_with(ServiceSpec::default);
    spec.selector
        .get_or_insert_with(BTreeMap::new)
        .insert(IMAGE_LABEL.to_string(), pod_name.to_string());
    spec.cluster_ip = None;
    spec.cluster_ips = None;
    spec.type_.get_or_insert_with(|| "ClusterIP".to_string());
    svc
}

/// The wrapper's address behind service `name` in `namespace`:
/// `<name>.<namespace>.svc.cluster.local:9446` (Porch's connection target).
pub fn service_endpoint(name: &str, namespace: &str) -> String {
    format!("{name}.{namespace}.svc.cluster.local:{WRAPPER_PORT}")
}

/// The wrapper's address at pod IP `ip`: `<ip>:9446`, the IP bracketed
/// when it is IPv6 (pod-IP address mode).
pub fn pod_ip_endpoint(ip: &str) -> String {
    if ip.contains(':') {
        format!("[{ip}]:{WRAPPER_PORT}")
    } else {
        format!("{ip}:{WRAPPER_PORT}")
    }
}

/// True only when the pod's [`TEMPLATE_VERSION_ANNOTATION`] exists and equals
/// `version` (Porch `isPodTemplateSameVersion`).
pub fn has_template_version(pod: &Pod, version: &str) -> bool {
    pod.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(TEMPLATE_VERSION_ANNOTATION))
        .is_some_and(|v| v == version)
}
