//! The pod-template contract, as pure functions over k8s-openapi types.
//!
//! A pod template must (seed 003, spec §5.10):
//! 1. have a container named `function`;
//! 2. start the wrapper gRPC server from that container's entrypoint;
//! 3. keep working when that container's image is replaced by the function image;
//! 4. accept the function's entrypoint appended to that container's args.
//!
//! Porch only checks point 1 and then applies overrides to `containers[0]`
//! and `initContainers[0]` (crashing without one) — spec §10 item 23. Here
//! [`validate_pod_template`] checks what can be checked without running the
//! pod and says exactly what is wrong; [`build_pod`] patches the `function`
//! container by name and merges rather than replaces (labels, annotations,
//! image pull secrets, env).

mod build;
mod contract;
mod defaults;
mod observe;
mod overrides;

use k8s_openapi::api::core::v1::{Pod, Service};

use super::WRAPPER_PORT;

pub use build::{
    PodBuild, build_pod, build_service, has_template_version, pod_ip_endpoint, service_endpoint,
};
use contract::inspect;
pub use contract::{
    templates_from_config_map, templates_from_objects, validate_pod_template,
    validate_service_template,
};
pub use defaults::{
    POD_TEMPLATE_NAME, SERVICE_TEMPLATE_KIND, SERVICE_TEMPLATE_NAME, SERVICE_TEMPLATE_PLURAL,
    ServiceTemplateObject, ServiceTemplateSpec, WRAPPER_IMAGE_DIR, WRAPPER_IMAGE_DIR_V1_5,
    config_yaml_pod_template, default_pod_template, default_pod_template_object,
    default_service_template, default_service_template_object, inline_templates,
};
pub use observe::{failure_reason, kubelet_failure, observe_pod, observe_service, warning_failure};
use overrides::apply_container_overrides;
pub use overrides::{ContainerOverrides, TemplateOverrides, merge_image_pull_secrets};

/// ConfigMap key holding the pod template (Porch Gen B `--function-pod-template`).
pub const POD_TEMPLATE_KEY: &str = "template";
/// ConfigMap key holding the service template.
pub const SERVICE_TEMPLATE_KEY: &str = "serviceTemplate";
/// Label the service carries with the pod name as value (Porch Gen A/B).
pub const SERVICE_NAME_LABEL: &str = "app.kubernetes.io/name";
/// Field manager for objects the runner creates (Porch's name).
pub const FIELD_MANAGER: &str = "krm-function-runner";
/// Path of the wrapper server inside function pods of the inline template.
pub const WRAPPER_SERVER_PATH: &str = "/wrapper-server-tools/wrapper-server";

/// Name of the init container that copies the wrapper server into the
/// pod (Porch's templates); overrides and `WRAPPER_SERVER_IMAGE` go to it.
pub const WRAPPER_INIT_CONTAINER: &str = "copy-wrapper-server";

const TOOLS_VOLUME: &str = "wrapper-server-tools";
const TOOLS_PATH: &str = "/wrapper-server-tools";

/// Why a template cannot be used or a pod cannot be built from it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TemplateError {
    /// The ConfigMap has no `template` key (Porch's message).
    #[error("function pod template with key template does not exist in Configmap {config_map}")]
    MissingPodTemplate {
        /// The ConfigMap's name.
        config_map: String,
    },
    /// The ConfigMap has no `serviceTemplate` key (Porch's message).
    #[error(
        "function pod service template with key serviceTemplate does not exist in Configmap {config_map}"
    )]
    MissingServiceTemplate {
        /// The ConfigMap's name.
        config_map: String,
    },
    /// The pod template is not a Pod manifest (Porch's message).
    #[error("unable to decode function pod template: {0}")]
    DecodePod(String),
    /// The service template is not a Service manifest (Porch's message).
    #[error("unable to decode function service template: {0}")]
    DecodeService(String),
    /// The pod template has no `spec`.
    #[error(
        "the pod template has no spec: it needs at least spec.containers with a container named \"function\""
    )]
    NoPodSpec,
    /// Contract point 1.
    #[error(
        "failed to find the function container in the pod: the pod template needs a container named \"function\" (it has: {found}); the runner puts the function image into that container"
    )]
    NoFunctionContainer {
        /// The container names the template has, comma-separated.
        found: String,
    },
    /// Contract points 2–3: without a command the function image's own
    /// entrypoint would run instead of the wrapper server.
    #[error(
        "container \"function\" of the pod template has no command: set it to the wrapper server (e.g. {WRAPPER_SERVER_PATH}), because the runner replaces the container's image with the function image, whose own entrypoint is the function"
    )]
    NoWrapperEntrypoint,
    /// A volume mount names a volume the pod does not define.
    #[error(
        "container {container:?} of the pod template mounts volume {volume:?}, which spec.volumes does not define"
    )]
    UndefinedVolume {
        /// The container.
        container: String,
        /// The volume name.
        volume: String,
    },
    /// The wrapper is expected in an emptyDir that nothing fills.
    #[error(
        "container \"function\" runs {command:?} from the emptyDir volume {volume:?}, but no init container mounts {volume:?} to copy the wrapper server into it; add one (as the inline default template does) or use an image volume"
    )]
    WrapperNotProvided {
        /// The first element of the function container's command.
        command: String,
        /// The emptyDir volume it lives on.
        volume: String,
    },
    /// The service template has no `spec`.
    #[error("the service template has no spec: it needs spec.ports with port {WRAPPER_PORT}")]
    NoServiceSpec,
    /// The service does not expose the wrapper's port.
    #[error(
        "the service template has no port {WRAPPER_PORT} (the wrapper server's port); add {{port: {WRAPPER_PORT}, targetPort: {WRAPPER_PORT}}}"
    )]
    NoWrapperPort,
    /// Contract point 4 needs something to append (spec §10 item 17).
    #[error(
        "image {image:?} has no entrypoint (neither ENTRYPOINT nor CMD); the wrapper server needs the function's command to run"
    )]
    EmptyEntrypoint {
        /// The function image.
        image: String,
    },
    /// A template object (Gen C) breaks the contract.
    #[error("{object}: {message}")]
    InObject {
        /// The object, e.g. `PodTemplate base-pod-template`.
        object: String,
        /// What is wrong with it.
        message: String,
    },
    /// Init-container overrides were configured, but the template has no
    /// init container providing the wrapper server.
    #[error(
        "overrides for the init container are configured, but the pod template has no init container that provides the wrapper server"
    )]
    NoInitContainerForOverrides,
}

/// A pod template, its service template and the version recorded on pods.
#[derive(Debug, Clone, PartialEq)]
pub struct Templates {
    /// The pod template.
    pub pod: Pod,
    /// The service template.
    pub service: Service,
    /// Its version ([`INLINE_TEMPLATE_VERSION`](super::INLINE_TEMPLATE_VERSION) or the source object's `resourceVersion`).
    pub version: String,
}

#[cfg(test)]
mod tests;
