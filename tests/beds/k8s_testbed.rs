//! The test bed itself: a real kube-apiserver + etcd (built from the Go
//! module proxy) accepts the function pods and services the pod cache's
//! template contract builds, and lets a test kubelet report them ready.

use krm_fn_testbed::k8s_support;

use k8s_openapi::api::core::v1::{Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use krm_fn_runner::domain::pod_cache::template::{
    PodBuild, TemplateOverrides, build_pod, build_service, default_pod_template,
    default_service_template,
};
use krm_fn_runner::domain::pod_cache::{FunctionSettings, IMAGE_LABEL, UnixTime};
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};

const NS: &str = "porch-fn-system";

#[tokio::test(flavor = "multi_thread")]
async fn api_server_accepts_function_pods_and_a_test_kubelet_marks_them_ready() {
    let plane = k8s_support::ControlPlane::start().await;
    let client = plane.client().await.unwrap();
    k8s_support::create_namespace(&client, NS).await;

    // The pod and service exactly as the pod cache builds them.
    let name = "set-namespace-v045-0123abcd-r1-1";
    let image = "ghcr.io/kptdev/krm-functions-catalog/set-namespace:v0.4.5";
    let entrypoint = vec!["/usr/local/bin/function".to_string()];
    let overrides = TemplateOverrides::from_settings(&FunctionSettings::default());
    let pod = build_pod(
        &default_pod_template("docker.io/nephio/porch-wrapper-server:latest"),
        &PodBuild {
            pod_name: name,
            namespace: NS,
            image,
            entrypoint: &entrypoint,
            template_version: "inline-v1",
            settings_version: None,
            creation: Some("r1-1"),
            reclaim_after: UnixTime::from_secs(1_900_000_000),
            max_request_body_size: 6 << 20,
            wrapper_image: None,
            image_pull_secrets: &["auth-secret".to_string()],
            overrides: &overrides,
        },
    )
    .unwrap();
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    let created = pods
        .create(&PostParams::default(), &pod)
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", plane.logs()));
    assert_eq!(created.metadata.labels.unwrap()[IMAGE_LABEL], name);
    let services: Api<Service> = Api::namespaced(client.clone(), NS);
    let service = build_service(&default_service_template(), name, NS);
    let svc = services
        .create(&PostParams::default(), &service)
        .await
        .unwrap();
    assert!(
        svc.spec
            .unwrap()
            .cluster_ip
            .is_some_and(|ip| ip.starts_with("10.96."))
    );

    // The test kubelet's job: report the pod running and ready, publish its endpoint.
    let status = serde_json::json!({"status": {
        "phase": "Running",
        "podIP": "127.0.0.2",
        "conditions": [{"type": "Ready", "status": "True"}],
    }});
    pods.patch_status(name, &PatchParams::default(), &Patch::Merge(&status))
        .await
        .unwrap();
    let seen = pods.get(name).await.unwrap();
    let st = seen.status.unwrap();
    assert_eq!(st.phase.as_deref(), Some("Running"));
    assert_eq!(st.pod_ip.as_deref(), Some("127.0.0.2"));

    // EndpointSlices refuse loopback IPs (the wrappers of the test bed listen
    // on 127.0.0.0/8), so the test kubelet publishes them by host name
    // (RFC 6761 `.localhost`, at least two labels as the API requires).
    let slices: Api<EndpointSlice> = Api::namespaced(client, NS);
    let slice: EndpointSlice = serde_json::from_value(serde_json::json!({
        "metadata": {"name": name, "labels": {"kubernetes.io/service-name": name}},
        "addressType": "FQDN",
        "endpoints": [{"addresses": [format!("{name}.pods.localhost")], "conditions": {"ready": true}}],
        "ports": [{"port": 9446, "protocol": "TCP"}],
    }))
    .unwrap();
    slices.create(&PostParams::default(), &slice).await.unwrap();
    let listed = slices
        .list(
            &kube::api::ListParams::default().labels(&format!("kubernetes.io/service-name={name}")),
        )
        .await
        .unwrap();
    assert_eq!(listed.items.len(), 1);
}
