//! What the pod cache observes of a pod or service: phase, readiness,
//! annotations, and why a pod failed.

use k8s_openapi::api::core::v1::{Pod, Service};

use crate::domain::pod_cache::io::{ObservedPhase, ObservedPod, ObservedService};
use crate::domain::pod_cache::{
    CREATION_ANNOTATION, FUNCTION_CONTAINER, IMAGE_LABEL, RECLAIM_AFTER_ANNOTATION,
    SETTINGS_VERSION_ANNOTATION, TEMPLATE_VERSION_ANNOTATION,
};

use super::*;

/// Reduces a platform pod to what the pod cache decides on; `None` for a pod
/// without a name. Ready means phase `Running` with condition `Ready=True`;
/// phases `Failed` and `Succeeded` both mean it will never serve again (the
/// reason is taken from the status). The ready endpoint is the service's
/// ([`service_endpoint`]).
pub fn observe_pod(pod: &Pod) -> Option<ObservedPod> {
    let meta = &pod.metadata;
    let name = meta.name.clone()?;
    let annotation = |key: &str| meta.annotations.as_ref().and_then(|a| a.get(key)).cloned();
    let containers = pod
        .spec
        .as_ref()
        .map(|s| s.containers.as_slice())
        .unwrap_or_default();
    let image = containers
        .iter()
        .find(|c| c.name == FUNCTION_CONTAINER)
        .or(containers.first())
        .and_then(|c| c.image.clone())
        .unwrap_or_default();
    let status = pod.status.as_ref();
    let phase = status.and_then(|s| s.phase.as_deref()).unwrap_or("Pending");
    let ready = status
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
    let phase = if meta.deletion_timestamp.is_some() {
        ObservedPhase::Terminating
    } else if phase == "Failed" || phase == "Succeeded" {
        ObservedPhase::Failed {
            reason: failure_reason(pod),
        }
    } else if phase == "Running" && ready {
        let namespace = meta.namespace.as_deref().unwrap_or("default");
        ObservedPhase::Ready {
            endpoint: service_endpoint(&name, namespace),
        }
    } else {
        ObservedPhase::Pending
    };
    Some(ObservedPod {
        labelled: meta
            .labels
            .as_ref()
            .is_some_and(|l| l.contains_key(IMAGE_LABEL)),
        template_version: annotation(TEMPLATE_VERSION_ANNOTATION),
        settings_version: annotation(SETTINGS_VERSION_ANNOTATION),
        reclaim_after: annotation(RECLAIM_AFTER_ANNOTATION),
        creation: annotation(CREATION_ANNOTATION),
        uid: meta.uid.clone(),
        resource_version: meta.resource_version.clone(),
        ip: status.and_then(|s| s.pod_ip.clone()),
        image,
        name,
        phase,
    })
}

/// Why a pod reached phase Failed, from its status: `pod phase <phase>`,
/// then the status reason and message when set.
pub fn failure_reason(pod: &Pod) -> String {
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

/// Reduces a service to what GC decides on: its name and whether it is a
/// function service (selects [`IMAGE_LABEL`] = its own name); `None`
/// without a name.
pub fn observe_service(service: &Service) -> Option<ObservedService> {
    let name = service.metadata.name.clone()?;
    let selects_own_pod = service
        .spec
        .as_ref()
        .and_then(|s| s.selector.as_ref())
        .and_then(|s| s.get(IMAGE_LABEL))
        .is_some_and(|v| *v == name);
    Some(ObservedService {
        name,
        selects_own_pod,
    })
}
