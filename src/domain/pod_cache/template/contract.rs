//! The template contract checked without running a pod, and templates
//! read from a ConfigMap or from PodTemplate/ServiceTemplate objects.

use std::collections::BTreeMap;
use std::path::Path;

use k8s_openapi::api::core::v1::{Pod, PodTemplate, Service};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::domain::codec;
use crate::domain::pod_cache::{FUNCTION_CONTAINER, WRAPPER_PORT};

use super::*;

/// Where the template keeps the pieces the runner patches.
pub(super) struct Layout {
    pub(super) function: usize,
    pub(super) wrapper_init: Option<usize>,
}

pub(super) fn inspect(pod: &Pod) -> Result<Layout, TemplateError> {
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
