//! What the pod cache observes of a pod or service: phase, readiness,
//! annotations, and why a pod failed — including what the kubelet says
//! while the pod's phase still reads `Pending` or `Running` (an image it
//! cannot pull, a container it cannot create, a crash loop, a container
//! killed for memory): such a pod will not serve until something outside
//! the runner changes, and waiting for the pod-ready deadline teaches the
//! caller nothing.

use k8s_openapi::api::core::v1::{ContainerStatus, Pod, Service};

use crate::domain::pod_cache::io::{ObservedPhase, ObservedPod, ObservedService};
use crate::domain::pod_cache::{
    CREATION_ANNOTATION, FUNCTION_CONTAINER, IMAGE_LABEL, RECLAIM_AFTER_ANNOTATION,
    SETTINGS_VERSION_ANNOTATION, TEMPLATE_VERSION_ANNOTATION,
};

use super::*;

/// Reduces a platform pod to what the pod cache decides on; `None` for a pod
/// without a name. A pod with a `deletionTimestamp` is terminating, whatever
/// its phase and Ready condition say (a real kubelet keeps a deleted pod
/// `Running` and `Ready=True` for up to its grace period). Ready means phase
/// `Running` with condition `Ready=True`; phases `Failed` and `Succeeded`
/// both mean it will never serve again (the reason is taken from the
/// status), and so does a container the kubelet cannot run
/// ([`kubelet_failure`]). The ready endpoint is the service's
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
    } else if let Some(reason) = kubelet_failure(pod) {
        ObservedPhase::Failed { reason }
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

/// Waiting reasons with which the kubelet reports a container it cannot
/// run: it keeps retrying (with back-off), but nothing changes until the
/// image, the registry, the pull secret or the pod template does.
const CANNOT_RUN: [&str; 8] = [
    "ErrImagePull",
    "ImagePullBackOff",
    "InvalidImageName",
    "ErrImageNeverPull",
    "CreateContainerConfigError",
    "CreateContainerError",
    "RunContainerError",
    "CrashLoopBackOff",
];

/// Why the kubelet cannot run one of the pod's containers, when it says so
/// while the pod's phase is still `Pending` or `Running`; `None` when
/// nothing is wrong (yet). A container is broken when:
/// - it waits with one of the reasons of a container that cannot run
///   (`ErrImagePull`, `ImagePullBackOff`, `InvalidImageName`,
///   `ErrImageNeverPull`, `CreateContainerConfigError`,
///   `CreateContainerError`, `RunContainerError`, `CrashLoopBackOff`);
/// - it was, or last was, killed for memory (`OOMKilled`);
/// - an init container exited with a non-zero code (it is retried, and the
///   pod never starts while it fails), or the `function` container (the
///   wrapper server, which serves until the pod is deleted) exited at all.
///
/// The text names the container, its image, the kubelet's reason and
/// message, the last exit, and what to check.
pub fn kubelet_failure(pod: &Pod) -> Option<String> {
    let status = pod.status.as_ref()?;
    let spec = pod.spec.as_ref();
    let init = status
        .init_container_statuses
        .iter()
        .flatten()
        .map(|c| (c, true));
    let main = status
        .container_statuses
        .iter()
        .flatten()
        .map(|c| (c, false));
    init.chain(main).find_map(|(c, is_init)| {
        let image = spec
            .and_then(|s| {
                let list = if is_init {
                    s.init_containers.as_deref()
                } else {
                    Some(s.containers.as_slice())
                };
                list?.iter().find(|x| x.name == c.name)?.image.clone()
            })
            .unwrap_or_else(|| c.image.clone());
        broken_container(c, is_init).map(|(reason, message)| {
            let mut text = format!("container {} (image {image}): {reason}", c.name);
            if let Some(m) = message.filter(|m| !m.is_empty()) {
                text.push_str(": ");
                text.push_str(m.trim());
            }
            if let Some(t) = c.last_state.as_ref().and_then(|s| s.terminated.as_ref()) {
                text.push_str(&format!(
                    "; last exit code {}{}",
                    t.exit_code,
                    t.reason
                        .as_deref()
                        .map(|r| format!(" ({r})"))
                        .unwrap_or_default()
                ));
            }
            text.push_str("; ");
            text.push_str(what_to_check(reason, &c.name));
            text
        })
    })
}

/// The kubelet's reason and message for a container that cannot serve, per
/// the rules of [`kubelet_failure`].
fn broken_container(c: &ContainerStatus, is_init: bool) -> Option<(&str, Option<&str>)> {
    let state = c.state.as_ref();
    if let Some(w) = state.and_then(|s| s.waiting.as_ref())
        && let Some(reason) = w.reason.as_deref().filter(|r| CANNOT_RUN.contains(r))
    {
        return Some((reason, w.message.as_deref()));
    }
    let oom = |t: &k8s_openapi::api::core::v1::ContainerStateTerminated| {
        t.reason.as_deref() == Some("OOMKilled")
    };
    let last = c.last_state.as_ref().and_then(|s| s.terminated.as_ref());
    if let Some(t) = state
        .and_then(|s| s.terminated.as_ref())
        .or(last)
        .filter(|t| oom(t))
    {
        return Some(("OOMKilled", t.message.as_deref()));
    }
    let terminated = state.and_then(|s| s.terminated.as_ref())?;
    if is_init && terminated.exit_code == 0 {
        return None;
    }
    let reason = terminated.reason.as_deref().unwrap_or("Error");
    Some((reason, terminated.message.as_deref()))
}

/// Whether a warning the kubelet recorded about a pod (an Event's `reason`
/// and `message`, about `container` when it names one) says that the pod
/// cannot start, and why, with what to check. The kubelet records these
/// the moment it fails, while the pod's status shows the failure only at
/// its next sync of the pod (about ten seconds later for an image pull):
/// - `Failed` "Failed to pull image …" — `ErrImagePull`;
/// - `Failed` "Error: …" — a container that could not be pulled, created
///   or started (the message is the error: a missing ConfigMap, an
///   `ErrImagePull`, a runtime error);
/// - `InspectFailed` — the image reference is invalid (`InvalidImageName`);
/// - `ErrImageNeverPull`;
/// - `BackOff` "Back-off restarting failed container …" — `CrashLoopBackOff`.
///
/// Anything else (`BackOff` pulling, `Unhealthy` probes, `FailedMount`,
/// scheduling warnings) is not taken as final: the status decides.
pub fn warning_failure(reason: &str, message: &str, container: Option<&str>) -> Option<String> {
    // (what the text calls it, which advice applies)
    let (kind, advice) = match reason {
        "Failed" if message.starts_with("Failed to pull image") => ("ErrImagePull", "ErrImagePull"),
        "Failed" if message.starts_with("Error: ") => {
            let error = &message["Error: ".len()..];
            match CANNOT_RUN.into_iter().find(|r| error.starts_with(r)) {
                Some(r) => (r, r),
                // The error itself (a missing ConfigMap, a runtime error):
                // the status will say CreateContainerConfigError,
                // CreateContainerError or RunContainerError.
                None => ("Failed", "CreateContainerError"),
            }
        }
        "InspectFailed" => ("InvalidImageName", "InvalidImageName"),
        "ErrImageNeverPull" => ("ErrImageNeverPull", "ErrImageNeverPull"),
        "BackOff" if message.starts_with("Back-off restarting failed container") => {
            ("CrashLoopBackOff", "CrashLoopBackOff")
        }
        _ => return None,
    };
    let container = container.unwrap_or(FUNCTION_CONTAINER);
    Some(format!(
        "container {container}: {kind}: {}; {}",
        message.trim(),
        what_to_check(advice, container)
    ))
}

/// What an operator should look at for the kubelet's `reason`.
fn what_to_check(reason: &str, container: &str) -> &'static str {
    match reason {
        "ErrImagePull" | "ImagePullBackOff" | "ErrImageNeverPull" => {
            "check that the image exists in its registry, that the node can reach the registry (and trusts its certificate), and for a private registry the pull secret (--enable-private-registries, --registry-auth-secret-name)"
        }
        "InvalidImageName" => {
            "the kubelet refuses the image reference: check the function's image and WRAPPER_SERVER_IMAGE"
        }
        "CreateContainerConfigError" | "CreateContainerError" | "RunContainerError" => {
            "the pod template or the function's templateOverrides ask for something the node cannot provide (a missing ConfigMap or Secret, a user, a command): check them"
        }
        "OOMKilled" => {
            "the container exceeded its memory limit: raise it in the pod template or the function's templateOverrides"
        }
        _ if container == FUNCTION_CONTAINER => {
            "the wrapper server in the function container exits: check its log (kubectl logs --previous -c function) and the pod template's command"
        }
        _ => {
            "the init container exits: check its log (kubectl logs -c <container>) and WRAPPER_SERVER_IMAGE (it must hold the wrapper server and a `cp`)"
        }
    }
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
