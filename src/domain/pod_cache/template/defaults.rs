//! The inline default templates (Porch's built-in pod and service) and
//! their PodTemplate/ServiceTemplate objects.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Container, EmptyDirVolumeSource, EnvVar, ExecAction, Pod, PodSpec, PodTemplate,
    PodTemplateSpec, Probe, Service, ServicePort, ServiceSpec, Volume, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use crate::domain::pod_cache::{
    FUNCTION_CONTAINER, IMAGE_LABEL, INLINE_TEMPLATE_VERSION, WRAPPER_PORT,
};

use super::*;

pub(super) fn string_map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

pub(super) fn tools_mount() -> VolumeMount {
    VolumeMount {
        name: TOOLS_VOLUME.to_string(),
        mount_path: TOOLS_PATH.to_string(),
        ..VolumeMount::default()
    }
}

/// Where Porch's current wrapper-server image keeps the wrapper server
/// and its health probe (`/home/nonroot/wrapper-server/`): what the
/// FunctionConfig generation's inline template copies.
pub const WRAPPER_IMAGE_DIR: &str = "/home/nonroot/wrapper-server";

/// Where Porch v1.5.3's wrapper-server image keeps them (`/wrapper-server/`,
/// its `func/Dockerfile-wrapperserver`): what that release's inline
/// template, the config.yaml generation's, copies. This project's wrapper
/// image has both.
pub const WRAPPER_IMAGE_DIR_V1_5: &str = "/wrapper-server";

/// Porch's inline default pod template (spec §5.10; Porch's current
/// release): an init container `copy-wrapper-server` (image
/// `wrapper_image`) copies the wrapper out of [`WRAPPER_IMAGE_DIR`] into an
/// emptyDir, and the `function` container runs it, with a gRPC readiness
/// probe and the OTEL environment.
pub fn default_pod_template(wrapper_image: &str) -> Pod {
    pod_template_copying(wrapper_image, WRAPPER_IMAGE_DIR)
}

/// The inline default pod template of Porch v1.5.3, the config.yaml
/// generation: as [`default_pod_template`], the init container copying out
/// of [`WRAPPER_IMAGE_DIR_V1_5`], where that release's wrapper image keeps
/// the wrapper server (its `podevaluator.go`).
pub fn config_yaml_pod_template(wrapper_image: &str) -> Pod {
    pod_template_copying(wrapper_image, WRAPPER_IMAGE_DIR_V1_5)
}

/// The inline default pod template, its init container copying the
/// wrapper out of directory `from` of `wrapper_image`.
fn pod_template_copying(wrapper_image: &str, from: &str) -> Pod {
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
                    ["cp", "-a", &format!("{from}/."), TOOLS_PATH]
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

/// The inline templates of the config.yaml generation (Porch v1.5.3's),
/// with version [`INLINE_TEMPLATE_VERSION`].
pub fn inline_templates(wrapper_image: &str) -> Templates {
    Templates {
        pod: config_yaml_pod_template(wrapper_image),
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
