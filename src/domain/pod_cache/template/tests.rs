//! Tests of the pod-template contract, defaults, overrides, build and observation.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Container, EnvFromSource, EnvVar, LocalObjectReference, Pod, PodSpec, PodTemplate,
    ResourceRequirements,
};

use super::defaults::string_map;
use super::*;
use crate::domain::codec;
use crate::domain::pod_cache::io::ObservedPhase;
use crate::domain::pod_cache::time::UnixTime;
use crate::domain::pod_cache::{
    FUNCTION_CONTAINER, IMAGE_LABEL, INLINE_TEMPLATE_VERSION, RECLAIM_AFTER_ANNOTATION,
    SETTINGS_VERSION_ANNOTATION, TEMPLATE_VERSION_ANNOTATION,
};
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

// Each generation's inline template copies the wrapper from where that
// Porch release's wrapper image keeps it: v1.5.3 (config.yaml) from
// /wrapper-server, the current one (the PodTemplate object) from
// /home/nonroot/wrapper-server.
#[test]
fn inline_templates_copy_from_their_releases_wrapper_image_layout() {
    let copy = |pod: &Pod| {
        pod.spec.as_ref().unwrap().init_containers.as_ref().unwrap()[0]
            .command
            .clone()
            .unwrap()
    };
    assert_eq!(
        copy(&inline_templates("w").pod),
        ["cp", "-a", "/wrapper-server/.", "/wrapper-server-tools"]
    );
    let object = default_pod_template_object("ns", "w");
    let pod = Pod {
        metadata: Default::default(),
        spec: object.template.unwrap().spec,
        status: None,
    };
    assert_eq!(
        copy(&pod),
        [
            "cp",
            "-a",
            "/home/nonroot/wrapper-server/.",
            "/wrapper-server-tools"
        ]
    );
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

/// Porch's `22-function-templates.yaml` (read from `KRM_FN_PORCH_DEPLOY`):
/// the PodTemplate and the ServiceTemplate, or `None` when that copy is not
/// at hand (the test skips).
fn porch_objects() -> Option<(PodTemplate, ServiceTemplateObject)> {
    let text = crate::domain::porch_files::read("head/22-function-templates.yaml")?;
    let docs: Vec<serde_json::Value> = codec::from_yaml_documents(text.as_bytes()).unwrap();
    let mut pod: PodTemplate = serde_json::from_value(docs[0].clone()).unwrap();
    let mut svc: ServiceTemplateObject = serde_json::from_value(docs[1].clone()).unwrap();
    pod.metadata.resource_version = Some("11".into());
    svc.metadata.resource_version = Some("12".into());
    Some((pod, svc))
}

#[test]
fn porchs_template_objects_satisfy_the_contract() {
    // The defaults created when the objects are absent are valid, as Porch's
    // own objects are (below, where their copy is at hand).
    let mut dp = default_pod_template_object("ns", "w");
    let mut ds = default_service_template_object("ns");
    assert_eq!(dp.metadata.name.as_deref(), Some(POD_TEMPLATE_NAME));
    assert_eq!(ds.metadata.name.as_deref(), Some(SERVICE_TEMPLATE_NAME));
    dp.metadata.resource_version = Some("1".into());
    ds.metadata.resource_version = Some("2".into());
    let t = templates_from_objects(&dp, &ds).unwrap();
    assert_eq!(t.pod.spec, default_pod_template("w").spec);
    assert_eq!(t.version, "1/2");
    let Some((pod, svc)) = porch_objects() else {
        return;
    };
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
    // A broken object is named.
    let (mut pod, svc) = porch_objects().unwrap();
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
    let (pod, mut svc) = porch_objects().unwrap();
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
            endpoint: "set-labels-v041-0a1b2c3d-r1-1.porch-fn-system.svc.cluster.local:9446".into()
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

/// A function pod (from the default template) with `status`.
fn pod_with_status(status: serde_json::Value) -> Pod {
    let entry = vec!["f".to_string()];
    let overrides = TemplateOverrides::default();
    let mut pod = build_pod(
        &default_pod_template("wrapper:1"),
        &build_args(&entry, &overrides, &[]),
    )
    .unwrap();
    pod.status = Some(serde_json::from_value(status).unwrap());
    pod
}

fn waiting(name: &str, reason: &str, message: &str) -> serde_json::Value {
    serde_json::json!({"name": name, "image": "x", "imageID": "", "ready": false, "restartCount": 0,
        "state": {"waiting": {"reason": reason, "message": message}}})
}

// A real kubelet keeps a deleted pod Running with Ready=True for up to its
// grace period: the deletion timestamp decides, not the condition.
#[test]
fn a_deleted_pod_is_terminating_whatever_its_ready_condition() {
    let mut pod = pod_with_status(serde_json::json!({
        "phase": "Running", "podIP": "10.244.0.9",
        "conditions": [{"type": "Ready", "status": "True"}],
    }));
    assert!(matches!(
        observe_pod(&pod).unwrap().phase,
        ObservedPhase::Ready { .. }
    ));
    pod.metadata.deletion_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
        Default::default(),
    ));
    assert_eq!(observe_pod(&pod).unwrap().phase, ObservedPhase::Terminating);
}

// What the kubelet reports of a container it cannot run, while the pod's
// phase still reads Pending or Running, makes the pod failed with the
// reason, the message, the image and what to check.
#[test]
fn kubelet_reasons_fail_the_pod() {
    let cases = [
        (
            serde_json::json!({"phase": "Pending", "containerStatuses": [waiting("function", "ErrImagePull", "rpc error: code = NotFound")]}),
            vec![
                "container function (image gcr.io/kpt-fn/set-labels:v0.4.1): ErrImagePull: rpc error: code = NotFound",
                "check that the image exists",
            ],
        ),
        (
            serde_json::json!({"phase": "Pending", "containerStatuses": [waiting("function", "ImagePullBackOff", "Back-off pulling image")]}),
            vec!["ImagePullBackOff", "pull secret"],
        ),
        (
            serde_json::json!({"phase": "Pending", "initContainerStatuses": [waiting("copy-wrapper-server", "InvalidImageName", "couldn't parse image name")]}),
            vec![
                "container copy-wrapper-server (image wrapper:v2): InvalidImageName",
                "WRAPPER_SERVER_IMAGE",
            ],
        ),
        (
            serde_json::json!({"phase": "Pending", "containerStatuses": [waiting("function", "CreateContainerConfigError", "configmap \"c\" not found")]}),
            vec![
                "CreateContainerConfigError: configmap \"c\" not found",
                "templateOverrides",
            ],
        ),
        (
            serde_json::json!({"phase": "Running", "containerStatuses": [{"name": "function", "image": "x", "imageID": "", "ready": false, "restartCount": 2,
                "state": {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off 20s"}},
                "lastState": {"terminated": {"exitCode": 2, "reason": "Error"}}}]}),
            vec![
                "CrashLoopBackOff: back-off 20s; last exit code 2 (Error)",
                "kubectl logs --previous",
            ],
        ),
        (
            serde_json::json!({"phase": "Running", "containerStatuses": [{"name": "function", "image": "x", "imageID": "", "ready": false, "restartCount": 1,
                "state": {"running": {}},
                "lastState": {"terminated": {"exitCode": 137, "reason": "OOMKilled"}}}]}),
            vec!["OOMKilled", "memory limit"],
        ),
        (
            serde_json::json!({"phase": "Pending", "initContainerStatuses": [{"name": "copy-wrapper-server", "image": "x", "imageID": "", "ready": false, "restartCount": 0,
                "state": {"terminated": {"exitCode": 1, "reason": "Error", "message": "cp: can't stat"}}}]}),
            vec![
                "container copy-wrapper-server (image wrapper:v2): Error: cp: can't stat",
                "init container exits",
            ],
        ),
        (
            serde_json::json!({"phase": "Running", "containerStatuses": [{"name": "function", "image": "x", "imageID": "", "ready": false, "restartCount": 0,
                "state": {"terminated": {"exitCode": 2, "reason": "Error"}}}]}),
            vec![
                "container function (image gcr.io/kpt-fn/set-labels:v0.4.1): Error",
                "wrapper server in the function container exits",
            ],
        ),
    ];
    for (status, parts) in cases {
        let pod = pod_with_status(status.clone());
        let ObservedPhase::Failed { reason } = observe_pod(&pod).unwrap().phase else {
            panic!("not failed: {status}");
        };
        for part in parts {
            assert!(reason.contains(part), "{part:?} in {reason:?}");
        }
    }
}

// A pod on its way up is pending: pulling, creating, an init container
// that finished, a running container not yet ready; its IP is observed as
// soon as the status has one.
#[test]
fn a_starting_pod_is_pending_with_its_ip_once_assigned() {
    let cases = [
        (serde_json::json!({"phase": "Pending"}), false),
        (
            serde_json::json!({"phase": "Pending", "containerStatuses": [waiting("function", "ContainerCreating", "")],
            "initContainerStatuses": [{"name": "copy-wrapper-server", "image": "x", "imageID": "", "ready": false, "restartCount": 0,
                "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}}]}),
            false,
        ),
        (
            serde_json::json!({"phase": "Pending", "initContainerStatuses": [waiting("copy-wrapper-server", "PodInitializing", "")]}),
            false,
        ),
        (
            serde_json::json!({"phase": "Running", "podIP": "10.244.0.3", "containerStatuses": [{"name": "function", "image": "x", "imageID": "", "ready": false, "restartCount": 0,
                "state": {"running": {}}}]}),
            true,
        ),
    ];
    for (status, has_ip) in cases {
        let o = observe_pod(&pod_with_status(status.clone())).unwrap();
        assert_eq!(o.phase, ObservedPhase::Pending, "{status}");
        assert_eq!(o.ip.is_some(), has_ip, "{status}");
    }
}

// The kubelet's warnings (Events) say at once what its status says at the
// next sync of the pod.
#[test]
fn kubelet_warnings_that_mean_a_pod_cannot_start() {
    let failing = [
        (
            "Failed",
            "Failed to pull image \"r/x:1\": not found",
            None,
            "container function: ErrImagePull: Failed to pull image \"r/x:1\": not found; check that the image exists",
        ),
        (
            "Failed",
            "Error: ErrImagePull",
            None,
            "container function: ErrImagePull: Error: ErrImagePull",
        ),
        (
            "Failed",
            "Error: configmap \"c\" not found",
            Some("function"),
            "container function: Failed: Error: configmap \"c\" not found; the pod template or the function's templateOverrides",
        ),
        (
            "InspectFailed",
            "Failed to apply default image tag \"R/X\": couldn't parse image name",
            Some("copy-wrapper-server"),
            "container copy-wrapper-server: InvalidImageName: Failed to apply default image tag",
        ),
        (
            "ErrImageNeverPull",
            "Container image \"x\" is not present with pull policy of Never",
            None,
            "ErrImageNeverPull",
        ),
        (
            "BackOff",
            "Back-off restarting failed container function in pod p",
            None,
            "container function: CrashLoopBackOff: Back-off restarting failed container",
        ),
    ];
    for (reason, message, container, expected) in failing {
        let text = warning_failure(reason, message, container)
            .unwrap_or_else(|| panic!("{reason}: {message}"));
        assert!(
            text.starts_with(expected) || text.contains(expected),
            "{expected:?} in {text:?}"
        );
    }
    for (reason, message) in [
        ("BackOff", "Back-off pulling image \"r/x:1\""),
        ("Unhealthy", "Readiness probe failed"),
        ("FailedMount", "MountVolume.SetUp failed"),
        ("FailedScheduling", "0/1 nodes are available"),
    ] {
        assert_eq!(warning_failure(reason, message, None), None, "{reason}");
    }
}
