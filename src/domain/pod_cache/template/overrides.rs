//! Per-function overrides of the `function` container (resources, env)
//! and the merge of image pull secrets.

use k8s_openapi::api::core::v1::{
    Container, EnvFromSource, EnvVar, LocalObjectReference, PodSecurityContext, PodSpec,
    ResourceRequirements,
};

use crate::domain::pod_cache::FunctionSettings;

/// Overrides for one container (Porch Gen C `templateOverrides.container` /
/// `.initContainer`; Gen B `resources`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ContainerOverrides {
    /// Requests and limits replace the template's separately when set.
    pub resources: Option<ResourceRequirements>,
    /// Variables merged into the template's by name (the override wins);
    /// Porch replaces the whole list and loses the template's OTEL settings.
    pub env: Option<Vec<EnvVar>>,
    /// Replaces the template's `envFrom` when set.
    pub env_from: Option<Vec<EnvFromSource>>,
}

impl ContainerOverrides {
    pub(super) fn is_empty(&self) -> bool {
        self.resources.is_none() && self.env.is_none() && self.env_from.is_none()
    }
}

/// Per-function changes to the built pod.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TemplateOverrides {
    /// Replaces `serviceAccountName` when non-empty.
    pub service_account_name: Option<String>,
    /// Replaces the pod security context when set.
    pub security_context: Option<PodSecurityContext>,
    /// Applied to the container named `function` (not to `containers[0]`).
    pub container: ContainerOverrides,
    /// Applied to the init container that provides the wrapper server.
    pub init_container: ContainerOverrides,
}

impl TemplateOverrides {
    /// The overrides a function's settings imply: its FunctionConfig
    /// `templateOverrides` (Porch Gen C), and its pod-cache config
    /// `resources` on the `function` container (Porch Gen B) unless those
    /// overrides set resources themselves.
    pub fn from_settings(settings: &FunctionSettings) -> Self {
        let mut o = settings.overrides.as_deref().cloned().unwrap_or_default();
        if o.container.resources.is_none() {
            o.container.resources.clone_from(&settings.resources);
        }
        o
    }
}

/// Adds each of `names` to the pod's `imagePullSecrets` unless an entry with
/// that name is already there (Porch `appendImagePullSecret`, never replacing).
pub fn merge_image_pull_secrets(spec: &mut PodSpec, names: &[String]) {
    let secrets = spec.image_pull_secrets.get_or_insert_with(Vec::new);
    for name in names {
        if !secrets.iter().any(|s| &s.name == name) {
            secrets.push(LocalObjectReference { name: name.clone() });
        }
    }
    if secrets.is_empty() {
        spec.image_pull_secrets = None;
    }
}

pub(super) fn apply_container_overrides(c: &mut Container, o: &ContainerOverrides) {
    if let Some(r) = &o.resources {
        let target = c
            .resources
            .get_or_insert_with(ResourceRequirements::default);
        if r.requests.is_some() {
            target.requests.clone_from(&r.requests);
        }
        if r.limits.is_some() {
            target.limits.clone_from(&r.limits);
        }
    }
    if let Some(env) = &o.env {
        let target = c.env.get_or_insert_with(Vec::new);
        for var in env {
            match target.iter_mut().find(|v| v.name == var.name) {
                Some(existing) => *existing = var.clone(),
                None => target.push(var.clone()),
            }
        }
    }
    if o.env_from.is_some() {
        c.env_from.clone_from(&o.env_from);
    }
}
