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

use std::collections::BTreeMap;
use std::path::Path;

use k8s_openapi::api::core::v1::{
    Container, EmptyDirVolumeSource, EnvFromSource, EnvVar, ExecAction, LocalObjectReference, Pod,
    PodSecurityContext, PodSpec, PodTemplate, PodTemplateSpec, Probe, ResourceRequirements,
    Service, ServicePort, ServiceSpec, Volume, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::io::{ObservedPhase, ObservedPod, ObservedService, PodCreation};
use super::time::UnixTime;
use super::{
    CREATION_ANNOTATION, FUNCTION_CONTAINER, FunctionSettings, IMAGE_LABEL,
    INLINE_TEMPLATE_VERSION, RECLAIM_AFTER_ANNOTATION, SETTINGS_VERSION_ANNOTATION,
    TEMPLATE_VERSION_ANNOTATION, WRAPPER_PORT,
};
use crate::domain::codec;

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
    /// Its version ([`INLINE_TEMPLATE_VERSION`] or the source object's `resourceVersion`).
    pub version: String,
}

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
    fn is_empty(&self) -> bool {
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
    /// The build parameters of a [`Command::CreatePod`](super::Command::CreatePod):
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

/// Where the template keeps the pieces the runner patches.
struct Layout {
    function: usize,
    wrapper_init: Option<usize>,
}

fn inspect(pod: &Pod) -> Result<Layout, TemplateError> {
    let spec = pod.spec.as_ref().ok_or(TemplateError::NoPodSpec)?;
    let function = spec
        .containers
        .iter()
        .position(|c| c.name == FUNCTION_CONTAINER)
        .ok_or_else(|| TemplateError::NoFunctionContainer {
            found: match spec
                .containers
                .iter()
                .map(|c| c.name.as_str())
                .collect::<Vec<_>>()
            {
                names if names.is_empty() => "no containers".to_string(),
                names => names.join(", "),
            },
        })?;
    let volumes = spec.volumes.as_deref().unwrap_or_default();
    let inits = spec.init_containers.as_deref().unwrap_or_default();
    for c in spec.containers.iter().chain(inits) {
        for m in c.volume_mounts.as_deref().unwrap_or_default() {
            if !volumes.iter().any(|v| v.name == m.name) {
                return Err(TemplateError::UndefinedVolume {
                    container: c.name.clone(),
                    volume: m.name.clone(),
                });
            }
        }
    }
    let fc = &spec.containers[function];
    let command = fc
        .command
        .as_deref()
        .and_then(|c| c.first())
        .filter(|c| !c.is_empty())
        .ok_or(TemplateError::NoWrapperEntrypoint)?;
    // The volume the wrapper binary lives on, if it lives on one.
    let mount = fc
        .volume_mounts
        .as_deref()
        .unwrap_or_default()
        .iter()
        .filter(|m| Path::new(command).starts_with(&m.mount_path))
        .max_by_key(|m| m.mount_path.len());
    // The wrapper's init container: Porch's `copy-wrapper-server` by name,
    // else the one that mounts the wrapper's volume (never merely the
    // first, spec §10 item 23).
    let named = inits.iter().position(|c| c.name == WRAPPER_INIT_CONTAINER);
    let Some(mount) = mount else {
        return Ok(Layout {
            function,
            wrapper_init: named,
        });
    };
    let provider = inits.iter().position(|c| {
        c.volume_mounts
            .as_deref()
            .unwrap_or_default()
            .iter()
            .any(|m| m.name == mount.name)
    });
    let empty_dir = volumes
        .iter()
        .any(|v| v.name == mount.name && v.empty_dir.is_some());
    if empty_dir && provider.is_none() {
        return Err(TemplateError::WrapperNotProvided {
            command: command.clone(),
            volume: mount.name.clone(),
        });
    }
    Ok(Layout {
        function,
        wrapper_init: named.or(provider),
    })
}

/// Checks a pod template against the contract.
///
/// Errors: no spec; no container named `function`; that container has no
/// command; a volume mount names an undefined volume; the command lives on an
/// emptyDir volume that no init container mounts.
pub fn validate_pod_template(pod: &Pod) -> Result<(), TemplateError> {
    inspect(pod).map(|_| ())
}

/// Checks a service template: it needs a spec with port 9446.
pub fn validate_service_template(service: &Service) -> Result<(), TemplateError> {
    let spec = service.spec.as_ref().ok_or(TemplateError::NoServiceSpec)?;
    let ports = spec.ports.as_deref().unwrap_or_default();
    if ports.iter().any(|p| p.port == i32::from(WRAPPER_PORT)) {
        Ok(())
    } else {
        Err(TemplateError::NoWrapperPort)
    }
}

/// Reads the templates from a ConfigMap's `data` (Porch Gen B): the pod from
/// key `template`, the service from `serviceTemplate`, version =
/// `resource_version`. Both are validated.
///
/// Errors: a missing key, a manifest that does not decode, or a template that
/// breaks the contract — with Porch's messages where Porch has one.
pub fn templates_from_config_map(
    config_map: &str,
    data: &BTreeMap<String, String>,
    resource_version: &str,
) -> Result<Templates, TemplateError> {
    let pod_text = data
        .get(POD_TEMPLATE_KEY)
        .ok_or_else(|| TemplateError::MissingPodTemplate {
            config_map: config_map.to_string(),
        })?;
    let pod: Pod =
        codec::from_yaml_str(pod_text).map_err(|e| TemplateError::DecodePod(e.to_string()))?;
    let service_text =
        data.get(SERVICE_TEMPLATE_KEY)
            .ok_or_else(|| TemplateError::MissingServiceTemplate {
                config_map: config_map.to_string(),
            })?;
    let service: Service = codec::from_yaml_str(service_text)
        .map_err(|e| TemplateError::DecodeService(e.to_string()))?;
    validate_pod_template(&pod)?;
    validate_service_template(&service)?;
    Ok(Templates {
        pod,
        service,
        version: resource_version.to_string(),
    })
}

fn string_map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn tools_mount() -> VolumeMount {
    VolumeMount {
        name: TOOLS_VOLUME.to_string(),
        mount_path: TOOLS_PATH.to_string(),
        ..VolumeMount::default()
    }
}

/// Porch's inline default pod template (spec §5.10): an init container
/// `copy-wrapper-server` (image `wrapper_image`) copies the wrapper into an
/// emptyDir, and the `function` container runs it, with a gRPC readiness
/// probe and the OTEL environment.
pub fn default_pod_template(wrapper_image: &str) -> Pod {
    let env = |name: &str, value: &str| EnvVar {
        name: name.to_string(),
        value: Some(value.to_string()),
        ..EnvVar::default()
    };
    Pod {
        metadata: ObjectMeta {
            annotations: Some(string_map(&[(
                "cluster-autoscaler.kubernetes.io/safe-to-evict",
                "true",
            )])),
            ..ObjectMeta::default()
        },
        spec: Some(PodSpec {
            init_containers: Some(vec![Container {
                name: WRAPPER_INIT_CONTAINER.to_string(),
                image: Some(wrapper_image.to_string()),
                command: Some(
                    ["cp", "-a", "/home/nonroot/wrapper-server/.", TOOLS_PATH]
                        .map(String::from)
                        .to_vec(),
                ),
                volume_mounts: Some(vec![tools_mount()]),
                ..Container::default()
            }]),
            containers: vec![Container {
                name: FUNCTION_CONTAINER.to_string(),
                image: Some("to-be-replaced".to_string()),
                command: Some(vec![WRAPPER_SERVER_PATH.to_string()]),
                env: Some(vec![
                    env("OTEL_METRICS_EXPORTER", "prometheus"),
                    env("OTEL_TRACES_EXPORTER", "none"),
                    env("OTEL_EXPORTER_PROMETHEUS_HOST", "0.0.0.0"),
                ]),
                readiness_probe: Some(Probe {
                    exec: Some(ExecAction {
                        command: Some(
                            [
                                "/wrapper-server-tools/grpc-health-probe",
                                "-addr",
                                &format!("localhost:{WRAPPER_PORT}"),
                            ]
                            .map(String::from)
                            .to_vec(),
                        ),
                    }),
                    ..Probe::default()
                }),
                volume_mounts: Some(vec![tools_mount()]),
                ..Container::default()
            }],
            volumes: Some(vec![Volume {
                name: TOOLS_VOLUME.to_string(),
                empty_dir: Some(EmptyDirVolumeSource::default()),
                ..Volume::default()
            }]),
            ..PodSpec::default()
        }),
        status: None,
    }
}

/// Porch's inline default service template: ClusterIP, one TCP port 9446.
pub fn default_service_template() -> Service {
    Service {
        metadata: ObjectMeta {
            annotations: Some(string_map(&[(
                "internal.kpt.dev/upstream-identifier",
                "|Service|porch-system|function-runner",
            )])),
            labels: Some(string_map(&[(SERVICE_NAME_LABEL, "to-be-replaced")])),
            ..ObjectMeta::default()
        },
        spec: Some(ServiceSpec {
            type_: Some("ClusterIP".to_string()),
            selector: Some(string_map(&[(IMAGE_LABEL, "to-be-replaced")])),
            ports: Some(vec![ServicePort {
                protocol: Some("TCP".to_string()),
                port: i32::from(WRAPPER_PORT),
                target_port: Some(IntOrString::Int(i32::from(WRAPPER_PORT))),
                ..ServicePort::default()
            }]),
            ..ServiceSpec::default()
        }),
        status: None,
    }
}

/// The inline templates with version [`INLINE_TEMPLATE_VERSION`].
pub fn inline_templates(wrapper_image: &str) -> Templates {
    Templates {
        pod: default_pod_template(wrapper_image),
        service: default_service_template(),
        version: INLINE_TEMPLATE_VERSION.to_string(),
    }
}

/// Name of the core/v1 `PodTemplate` holding the function pod template in
/// the pod namespace (Porch Gen C).
pub const POD_TEMPLATE_NAME: &str = "base-pod-template";
/// Name of the `ServiceTemplate` (`config.porch.kpt.dev/v1alpha1`) holding
/// the function service template in the pod namespace (Porch Gen C).
pub const SERVICE_TEMPLATE_NAME: &str = "base-service-template";
/// Kind of Porch's service template object.
pub const SERVICE_TEMPLATE_KIND: &str = "ServiceTemplate";
/// Resource (plural) name of Porch's service template object.
pub const SERVICE_TEMPLATE_PLURAL: &str = "servicetemplates";

/// Porch's `ServiceTemplate` object: a Service's metadata and spec under
/// `template` (the fields the runner reads).
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ServiceTemplateObject {
    /// The object's own metadata (name, namespace, resourceVersion).
    #[serde(default)]
    pub metadata: ObjectMeta,
    /// The service template.
    #[serde(default)]
    pub template: ServiceTemplateSpec,
}

/// `template` of a [`ServiceTemplateObject`].
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ServiceTemplateSpec {
    /// Labels and annotations for the services. (Porch's CRD does not
    /// preserve unknown fields here, so the API server may prune them.)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<ObjectMeta>,
    /// The service spec.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spec: Option<ServiceSpec>,
}

/// The templates from Porch's Gen C objects: the pod from the
/// `PodTemplate`'s `template`, the service from the `ServiceTemplate`'s,
/// both validated. The version is `<PodTemplate resourceVersion>/<ServiceTemplate
/// resourceVersion>`, so editing either object makes new pods carry a new
/// version (Porch's version is the PodTemplate's alone).
///
/// Errors: either template breaks the contract; the message names the object.
pub fn templates_from_objects(
    pod_template: &PodTemplate,
    service_template: &ServiceTemplateObject,
) -> Result<Templates, TemplateError> {
    let spec = pod_template.template.clone().unwrap_or_default();
    let pod = Pod {
        metadata: spec.metadata.unwrap_or_default(),
        spec: spec.spec,
        status: None,
    };
    let service = Service {
        metadata: service_template
            .template
            .metadata
            .clone()
            .unwrap_or_default(),
        spec: service_template.template.spec.clone(),
        status: None,
    };
    let named = |object: &str, e: TemplateError| TemplateError::InObject {
        object: object.to_string(),
        message: e.to_string(),
    };
    validate_pod_template(&pod)
        .map_err(|e| named(&format!("PodTemplate {POD_TEMPLATE_NAME}"), e))?;
    validate_service_template(&service).map_err(|e| {
        named(
            &format!("{SERVICE_TEMPLATE_KIND} {SERVICE_TEMPLATE_NAME}"),
            e,
        )
    })?;
    let rv = |m: &ObjectMeta| m.resource_version.clone().unwrap_or_default();
    Ok(Templates {
        pod,
        service,
        version: format!(
            "{}/{}",
            rv(&pod_template.metadata),
            rv(&service_template.metadata)
        ),
    })
}

/// The `PodTemplate` created in `namespace` when none exists: Porch's inline
/// default pod template with the init container on `wrapper_image`.
pub fn default_pod_template_object(namespace: &str, wrapper_image: &str) -> PodTemplate {
    let pod = default_pod_template(wrapper_image);
    PodTemplate {
        metadata: ObjectMeta {
            name: Some(POD_TEMPLATE_NAME.to_string()),
            namespace: Some(namespace.to_string()),
            ..ObjectMeta::default()
        },
        template: Some(PodTemplateSpec {
            metadata: Some(pod.metadata),
            spec: pod.spec,
        }),
    }
}

/// The `ServiceTemplate` created in `namespace` when none exists: Porch's
/// inline default service template.
pub fn default_service_template_object(namespace: &str) -> ServiceTemplateObject {
    let service = default_service_template();
    ServiceTemplateObject {
        metadata: ObjectMeta {
            name: Some(SERVICE_TEMPLATE_NAME.to_string()),
            namespace: Some(namespace.to_string()),
            ..ObjectMeta::default()
        },
        template: ServiceTemplateSpec {
            metadata: Some(service.metadata),
            spec: service.spec,
        },
    }
}

/// Clears what the API server owns, so a template read from the cluster can
/// be created again.
fn reset_server_fields(meta: &mut ObjectMeta) {
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

fn apply_container_overrides(c: &mut Container, o: &ContainerOverrides) {
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

/// True only when the pod's [`TEMPLATE_VERSION_ANNOTATION`] exists and equals
/// `version` (Porch `isPodTemplateSameVersion`).
pub fn has_template_version(pod: &Pod, version: &str) -> bool {
    pod.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(TEMPLATE_VERSION_ANNOTATION))
        .is_some_and(|v| v == version)
}

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

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{PodCondition, PodStatus};

    fn build_args<'a>(
        entrypoint: &'a [String],
        overrides: &'a TemplateOverrides,
        secrets: &'a [String],
    ) -> PodBuild<'a> {
        PodBuild {
            pod_name: "set-labels-v041-0a1b2c3d-r1-1",
            namespace: "porch-fn-system",
            image: "gcr.io/kpt-fn/set-labels:v0.4.1",
            entrypoint,
            template_version: "42",
            settings_version: None,
            creation: None,
            reclaim_after: UnixTime::from_secs(1_000),
            max_request_body_size: 6_291_456,
            wrapper_image: Some("wrapper:v2"),
            image_pull_secrets: secrets,
            overrides,
        }
    }

    fn function_container(pod: &Pod) -> &Container {
        let spec = pod.spec.as_ref().unwrap();
        spec.containers
            .iter()
            .find(|c| c.name == FUNCTION_CONTAINER)
            .unwrap()
    }

    #[test]
    fn inline_templates_satisfy_the_contract() {
        let t = inline_templates("wrapper:v1");
        assert_eq!(t.version, INLINE_TEMPLATE_VERSION);
        validate_pod_template(&t.pod).unwrap();
        validate_service_template(&t.service).unwrap();
    }

    // Porch TestPatchNewPodContainer: image set, args appended, other containers untouched.
    #[test]
    fn build_patches_the_function_container_by_name() {
        let mut template = default_pod_template("wrapper:v1");
        let spec = template.spec.as_mut().unwrap();
        let sidecar = Container {
            name: "sidecar".into(),
            image: Some("proxy:1".into()),
            ..Container::default()
        };
        spec.containers.insert(0, sidecar.clone());
        spec.containers[1].args = Some(vec!["--verbose".into()]);
        let entry = vec!["/usr/local/bin/function".to_string()];
        let overrides = TemplateOverrides::default();
        let pod = build_pod(&template, &build_args(&entry, &overrides, &[])).unwrap();
        let f = function_container(&pod);
        assert_eq!(f.image.as_deref(), Some("gcr.io/kpt-fn/set-labels:v0.4.1"));
        assert_eq!(
            f.args.as_ref().unwrap(),
            &[
                "--verbose",
                "--port",
                "9446",
                "--max-request-body-size",
                "6291456",
                "--",
                "/usr/local/bin/function"
            ]
        );
        assert_eq!(pod.spec.as_ref().unwrap().containers[0], sidecar);
        let init = &pod.spec.as_ref().unwrap().init_containers.as_ref().unwrap()[0];
        assert_eq!(init.image.as_deref(), Some("wrapper:v2"));
    }

    // Porch TestPatchNewPodMetadata: namespace, version annotation and image label set; existing ones kept.
    #[test]
    fn build_sets_metadata_and_keeps_existing() {
        let mut template = default_pod_template("w");
        template.metadata.labels = Some(string_map(&[("team", "a")]));
        template.metadata.resource_version = Some("99".into());
        let entry = vec!["f".to_string()];
        let overrides = TemplateOverrides::default();
        let pod = build_pod(&template, &build_args(&entry, &overrides, &[])).unwrap();
        let m = &pod.metadata;
        assert_eq!(m.name.as_deref(), Some("set-labels-v041-0a1b2c3d-r1-1"));
        assert_eq!(m.generate_name, None);
        assert_eq!(m.resource_version, None);
        assert_eq!(m.namespace.as_deref(), Some("porch-fn-system"));
        let labels = m.labels.as_ref().unwrap();
        assert_eq!(labels["team"], "a");
        assert_eq!(labels[IMAGE_LABEL], "set-labels-v041-0a1b2c3d-r1-1");
        let a = m.annotations.as_ref().unwrap();
        assert_eq!(a["cluster-autoscaler.kubernetes.io/safe-to-evict"], "true");
        assert_eq!(a[TEMPLATE_VERSION_ANNOTATION], "42");
        assert_eq!(a[RECLAIM_AFTER_ANNOTATION], "1000");
        assert!(has_template_version(&pod, "42"));
        assert!(!has_template_version(&pod, "41"));
        assert!(!has_template_version(&default_pod_template("w"), "42"));
    }

    // Porch TestAppendImagePullSecret / TestHasImagePullSecret: merged by name, never duplicated or replaced.
    #[test]
    fn pull_secrets_are_merged() {
        let mut template = default_pod_template("w");
        template.spec.as_mut().unwrap().image_pull_secrets = Some(vec![LocalObjectReference {
            name: "mine".into(),
        }]);
        let entry = vec!["f".to_string()];
        let overrides = TemplateOverrides::default();
        let secrets = ["auth-secret".to_string(), "mine".to_string()];
        let pod = build_pod(&template, &build_args(&entry, &overrides, &secrets)).unwrap();
        let names: Vec<_> = pod
            .spec
            .unwrap()
            .image_pull_secrets
            .unwrap()
            .into_iter()
            .map(|s| s.name)
            .collect();
        assert_eq!(names, ["mine", "auth-secret"]);
        let mut spec = PodSpec::default();
        merge_image_pull_secrets(&mut spec, &[]);
        assert_eq!(spec.image_pull_secrets, None);
    }

    #[test]
    fn overrides_go_to_containers_by_role_and_env_is_merged() {
        let mut template = default_pod_template("w");
        let spec = template.spec.as_mut().unwrap();
        spec.containers.insert(
            0,
            Container {
                name: "sidecar".into(),
                ..Container::default()
            },
        );
        spec.init_containers.as_mut().unwrap().insert(
            0,
            Container {
                name: "setup".into(),
                ..Container::default()
            },
        );
        let mut requests = BTreeMap::new();
        requests.insert(
            "cpu".to_string(),
            k8s_openapi::apimachinery::pkg::api::resource::Quantity("250m".into()),
        );
        let overrides = TemplateOverrides {
            service_account_name: Some("fn-sa".into()),
            container: ContainerOverrides {
                resources: Some(ResourceRequirements {
                    requests: Some(requests.clone()),
                    ..Default::default()
                }),
                env: Some(vec![EnvVar {
                    name: "OTEL_TRACES_EXPORTER".into(),
                    value: Some("otlp".into()),
                    ..Default::default()
                }]),
                env_from: None,
            },
            init_container: ContainerOverrides {
                resources: Some(ResourceRequirements {
                    limits: Some(requests.clone()),
                    ..Default::default()
                }),
                ..Default::default()
            },
            ..Default::default()
        };
        let entry = vec!["f".to_string()];
        let pod = build_pod(&template, &build_args(&entry, &overrides, &[])).unwrap();
        let spec = pod.spec.as_ref().unwrap();
        assert_eq!(spec.service_account_name.as_deref(), Some("fn-sa"));
        assert_eq!(spec.containers[0].resources, None, "sidecar untouched");
        let f = function_container(&pod);
        assert_eq!(
            f.resources.as_ref().unwrap().requests.as_ref(),
            Some(&requests)
        );
        let env = f.env.as_ref().unwrap();
        assert_eq!(env.len(), 3, "template env kept");
        assert_eq!(
            env.iter()
                .find(|e| e.name == "OTEL_TRACES_EXPORTER")
                .unwrap()
                .value
                .as_deref(),
            Some("otlp")
        );
        let inits = spec.init_containers.as_ref().unwrap();
        assert_eq!(
            inits[0].resources, None,
            "unrelated init container untouched"
        );
        assert_eq!(
            inits[1].resources.as_ref().unwrap().limits.as_ref(),
            Some(&requests)
        );
        assert_eq!(inits[1].image.as_deref(), Some("wrapper:v2"));
    }

    /// Porch's `22-function-templates.yaml`: the PodTemplate and the ServiceTemplate.
    const PORCH_TEMPLATES: &str =
        include_str!("../../../third_party/porch/22-function-templates.yaml");

    fn porch_objects() -> (PodTemplate, ServiceTemplateObject) {
        let docs: Vec<serde_json::Value> =
            codec::from_yaml_documents(PORCH_TEMPLATES.as_bytes()).unwrap();
        let mut pod: PodTemplate = serde_json::from_value(docs[0].clone()).unwrap();
        let mut svc: ServiceTemplateObject = serde_json::from_value(docs[1].clone()).unwrap();
        pod.metadata.resource_version = Some("11".into());
        svc.metadata.resource_version = Some("12".into());
        (pod, svc)
    }

    #[test]
    fn porchs_template_objects_satisfy_the_contract() {
        let (pod, svc) = porch_objects();
        let t = templates_from_objects(&pod, &svc).unwrap();
        assert_eq!(t.version, "11/12", "both resourceVersions");
        let entry = vec!["f".to_string()];
        let overrides = TemplateOverrides::default();
        let built = build_pod(&t.pod, &build_args(&entry, &overrides, &[])).unwrap();
        let f = function_container(&built);
        assert!(
            f.liveness_probe.is_some(),
            "the object's probe, not the inline template"
        );
        let init = &built
            .spec
            .as_ref()
            .unwrap()
            .init_containers
            .as_ref()
            .unwrap()[0];
        assert_eq!(init.image.as_deref(), Some("wrapper:v2"));
        let service = build_service(&t.service, "p", "ns");
        assert_eq!(
            service.spec.as_ref().unwrap().ports.as_ref().unwrap()[0].port,
            9446
        );
        // The defaults created when the objects are absent are valid too.
        let mut dp = default_pod_template_object("ns", "w");
        let mut ds = default_service_template_object("ns");
        assert_eq!(dp.metadata.name.as_deref(), Some(POD_TEMPLATE_NAME));
        assert_eq!(ds.metadata.name.as_deref(), Some(SERVICE_TEMPLATE_NAME));
        dp.metadata.resource_version = Some("1".into());
        ds.metadata.resource_version = Some("2".into());
        let t = templates_from_objects(&dp, &ds).unwrap();
        assert_eq!(t.pod.spec, default_pod_template("w").spec);
        assert_eq!(t.version, "1/2");
        // A broken object is named.
        let (mut pod, svc) = porch_objects();
        pod.template
            .as_mut()
            .unwrap()
            .spec
            .as_mut()
            .unwrap()
            .containers[0]
            .name = "fn".into();
        let err = templates_from_objects(&pod, &svc).unwrap_err().to_string();
        assert!(
            err.starts_with("PodTemplate base-pod-template: failed to find the function container"),
            "{err}"
        );
        let (pod, mut svc) = porch_objects();
        svc.template.spec.as_mut().unwrap().ports = None;
        let err = templates_from_objects(&pod, &svc).unwrap_err().to_string();
        assert!(
            err.starts_with(
                "ServiceTemplate base-service-template: the service template has no port 9446"
            ),
            "{err}"
        );
    }

    #[test]
    fn the_wrapper_init_container_is_found_by_name() {
        let mut template = default_pod_template("w");
        let spec = template.spec.as_mut().unwrap();
        // Another init container that also mounts the wrapper volume, first.
        let mut other = spec.init_containers.as_ref().unwrap()[0].clone();
        other.name = "prepare-tools".into();
        spec.init_containers.as_mut().unwrap().insert(0, other);
        let overrides = TemplateOverrides {
            init_container: ContainerOverrides {
                env_from: Some(vec![EnvFromSource::default()]),
                ..ContainerOverrides::default()
            },
            ..TemplateOverrides::default()
        };
        let entry = vec!["f".to_string()];
        let mut args = build_args(&entry, &overrides, &[]);
        args.settings_version = Some("abc");
        let pod = build_pod(&template, &args).unwrap();
        let inits = pod.spec.as_ref().unwrap().init_containers.clone().unwrap();
        assert_eq!(inits[0].env_from, None);
        assert_eq!(inits[0].image.as_deref(), Some("w"));
        assert_eq!(inits[1].name, WRAPPER_INIT_CONTAINER);
        assert!(inits[1].env_from.is_some());
        assert_eq!(inits[1].image.as_deref(), Some("wrapper:v2"));
        let annotations = pod.metadata.annotations.unwrap();
        assert_eq!(annotations[SETTINGS_VERSION_ANNOTATION], "abc");
    }

    #[test]
    fn validation_errors_say_what_is_wrong() {
        let mut no_fn = default_pod_template("w");
        no_fn.spec.as_mut().unwrap().containers[0].name = "main".into();
        let e = validate_pod_template(&no_fn).unwrap_err();
        assert!(
            e.to_string()
                .contains("failed to find the function container")
                && e.to_string().contains("main"),
            "{e}"
        );

        let mut no_cmd = default_pod_template("w");
        no_cmd.spec.as_mut().unwrap().containers[0].command = None;
        assert_eq!(
            validate_pod_template(&no_cmd),
            Err(TemplateError::NoWrapperEntrypoint)
        );

        let mut no_init = default_pod_template("w");
        no_init.spec.as_mut().unwrap().init_containers = None;
        assert_eq!(
            validate_pod_template(&no_init),
            Err(TemplateError::WrapperNotProvided {
                command: WRAPPER_SERVER_PATH.into(),
                volume: TOOLS_VOLUME.into()
            })
        );

        let mut no_volume = default_pod_template("w");
        no_volume.spec.as_mut().unwrap().volumes = None;
        assert!(matches!(
            validate_pod_template(&no_volume),
            Err(TemplateError::UndefinedVolume { .. })
        ));

        // A wrapper baked into the image needs no init container.
        let mut baked = default_pod_template("w");
        let spec = baked.spec.as_mut().unwrap();
        spec.init_containers = None;
        spec.volumes = None;
        spec.containers[0].volume_mounts = None;
        spec.containers[0].command = Some(vec!["/wrapper-server".into()]);
        validate_pod_template(&baked).unwrap();
        let overrides = TemplateOverrides {
            init_container: ContainerOverrides {
                env_from: Some(vec![]),
                ..Default::default()
            },
            ..Default::default()
        };
        let entry = vec!["f".to_string()];
        assert_eq!(
            build_pod(&baked, &build_args(&entry, &overrides, &[])),
            Err(TemplateError::NoInitContainerForOverrides)
        );
        assert!(matches!(
            build_pod(&baked, &build_args(&[], &TemplateOverrides::default(), &[])),
            Err(TemplateError::EmptyEntrypoint { .. })
        ));

        let mut svc = default_service_template();
        svc.spec.as_mut().unwrap().ports.as_mut().unwrap()[0].port = 80;
        assert_eq!(
            validate_service_template(&svc),
            Err(TemplateError::NoWrapperPort)
        );
    }

    #[test]
    fn service_is_named_after_the_pod_and_keeps_template_metadata() {
        let svc = build_service(&default_service_template(), "p-1", "ns");
        assert_eq!(svc.metadata.name.as_deref(), Some("p-1"));
        assert_eq!(
            svc.metadata.labels.as_ref().unwrap()[SERVICE_NAME_LABEL],
            "p-1"
        );
        assert!(
            svc.metadata
                .annotations
                .as_ref()
                .unwrap()
                .contains_key("internal.kpt.dev/upstream-identifier")
        );
        let spec = svc.spec.unwrap();
        assert_eq!(spec.selector.unwrap()[IMAGE_LABEL], "p-1");
        assert_eq!(spec.type_.as_deref(), Some("ClusterIP"));
        assert_eq!(
            service_endpoint("p-1", "ns"),
            "p-1.ns.svc.cluster.local:9446"
        );
    }

    // Gen B ConfigMap templates, with Porch's error messages.
    #[test]
    fn config_map_templates() {
        let pod = "apiVersion: v1\nkind: Pod\nspec:\n  containers:\n  - name: function\n    image: x\n    command: [/wrapper-server]\n";
        let svc = "apiVersion: v1\nkind: Service\nspec:\n  ports:\n  - port: 9446\n    targetPort: 9446\n  selector:\n    fn.kpt.dev/image: to-be-replaced\n  type: ClusterIP\n";
        let mut data = BTreeMap::new();
        assert_eq!(
            templates_from_config_map("tpl", &data, "7")
                .unwrap_err()
                .to_string(),
            "function pod template with key template does not exist in Configmap tpl"
        );
        data.insert(POD_TEMPLATE_KEY.to_string(), pod.to_string());
        assert_eq!(
            templates_from_config_map("tpl", &data, "7")
                .unwrap_err()
                .to_string(),
            "function pod service template with key serviceTemplate does not exist in Configmap tpl"
        );
        data.insert(SERVICE_TEMPLATE_KEY.to_string(), svc.to_string());
        let t = templates_from_config_map("tpl", &data, "7").unwrap();
        assert_eq!(t.version, "7");
        data.insert(POD_TEMPLATE_KEY.to_string(), "spec: [".to_string());
        let e = templates_from_config_map("tpl", &data, "7")
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("unable to decode function pod template: "),
            "{e}"
        );
        // Porch "Function template invalid resource type".
        data.insert(
            POD_TEMPLATE_KEY.to_string(),
            "apiVersion: v1\nkind: ConfigMap\ndata: {}\n".to_string(),
        );
        let e = templates_from_config_map("tpl", &data, "7")
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("unable to decode function pod template: ") && e.contains("expected Pod"),
            "{e}"
        );
        data.insert(
            POD_TEMPLATE_KEY.to_string(),
            "apiVersion: v1\nkind: Pod\nmetadata: {}\n".to_string(),
        );
        assert_eq!(
            templates_from_config_map("tpl", &data, "7"),
            Err(TemplateError::NoPodSpec)
        );
    }

    #[test]
    fn observing_pods() {
        let entry = vec!["f".to_string()];
        let overrides = TemplateOverrides::default();
        let mut pod = build_pod(
            &default_pod_template("w"),
            &build_args(&entry, &overrides, &[]),
        )
        .unwrap();
        let o = observe_pod(&pod).unwrap();
        assert!(o.labelled);
        assert_eq!(o.image, "gcr.io/kpt-fn/set-labels:v0.4.1");
        assert_eq!(o.template_version.as_deref(), Some("42"));
        assert_eq!(o.reclaim_after.as_deref(), Some("1000"));
        assert_eq!(o.phase, ObservedPhase::Pending);
        pod.status = Some(PodStatus {
            phase: Some("Running".into()),
            conditions: Some(vec![PodCondition {
                type_: "Ready".into(),
                status: "True".into(),
                ..Default::default()
            }]),
            ..Default::default()
        });
        assert_eq!(
            observe_pod(&pod).unwrap().phase,
            ObservedPhase::Ready {
                endpoint: "set-labels-v041-0a1b2c3d-r1-1.porch-fn-system.svc.cluster.local:9446"
                    .into()
            }
        );
        pod.status.as_mut().unwrap().phase = Some("Failed".into());
        assert!(matches!(
            observe_pod(&pod).unwrap().phase,
            ObservedPhase::Failed { .. }
        ));
        pod.metadata.labels = None;
        assert!(!observe_pod(&pod).unwrap().labelled);
        pod.metadata.name = None;
        assert_eq!(observe_pod(&pod), None);
    }
}
