//! The Kubernetes adapter of the PodPlatform port against a real
//! kube-apiserver: every method, the typed errors, the pod watch and the
//! endpoint watch.

use krm_fn_testbed::k8s_support;

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret};
use krm_fn_runner::adapters::kube::KubePlatform;
use krm_fn_runner::domain::pod_cache::DeletePrecondition;
use krm_fn_runner::domain::pod_cache::template::{build_service, default_service_template};
use krm_fn_runner::ports::{
    EndpointEvent, EndpointEventStream, PlatformError, PodEvent, PodPlatform,
};
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use tokio_stream::StreamExt;

const NS: &str = "porch-fn-system";

fn pod(name: &str) -> Pod {
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": name, "labels": {"fn.kpt.dev/image": name}},
        "spec": {"containers": [{"name": "function", "image": "example.com/fn:v1"}]},
    }))
    .unwrap()
}

async fn next_event(stream: &mut krm_fn_runner::ports::PodEventStream) -> PodEvent {
    tokio::time::timeout(Duration::from_secs(20), stream.next())
        .await
        .expect("a pod event within 20 s")
        .expect("the watch goes on")
}

async fn next_endpoint_event(stream: &mut EndpointEventStream) -> EndpointEvent {
    tokio::time::timeout(Duration::from_secs(20), stream.next())
        .await
        .expect("an endpoint event within 20 s")
        .expect("the watch goes on")
}

#[tokio::test(flavor = "multi_thread")]
async fn kube_platform_against_a_real_api_server() {
    let plane = k8s_support::ControlPlane::start().await;
    let client = plane.client().await.unwrap();
    k8s_support::create_namespace(&client, NS).await;
    let platform = KubePlatform::new(client.clone(), NS);
    let mut watch = platform.watch_pods("fn.kpt.dev/image").await.unwrap();

    // Pods: create, no silent AlreadyExists, get, list, annotate, watch, delete.
    platform.create_pod(pod("fn-a")).await.unwrap();
    let again = platform.create_pod(pod("fn-a")).await.unwrap_err();
    assert!(
        matches!(again, PlatformError::AlreadyExists { kind: "Pod", .. }),
        "{again}"
    );
    assert_eq!(
        platform
            .get_pod("fn-a")
            .await
            .unwrap()
            .metadata
            .name
            .as_deref(),
        Some("fn-a")
    );
    let created_b = platform.create_pod(pod("fn-b")).await.unwrap();
    let listed = platform.list_pods("fn.kpt.dev/image=fn-b").await.unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(
        platform.list_pods("fn.kpt.dev/image").await.unwrap().len(),
        2
    );
    platform
        .patch_pod_annotations(
            "fn-a",
            None,
            BTreeMap::from([(
                "fn.kpt.dev/reclaim-after".to_string(),
                "1900000000".to_string(),
            )]),
        )
        .await
        .unwrap();
    let annotated = platform.get_pod("fn-a").await.unwrap();
    assert_eq!(
        annotated.metadata.annotations.unwrap()["fn.kpt.dev/reclaim-after"],
        "1900000000"
    );
    // With a UID, the patch applies only to that incarnation of the name:
    // another UID is refused with a Conflict and changes nothing.
    let reclaim =
        |v: &str| BTreeMap::from([("fn.kpt.dev/reclaim-after".to_string(), v.to_string())]);
    let uid_a = annotated.metadata.uid.clone();
    let refused = platform
        .patch_pod_annotations(
            "fn-a",
            Some("00000000-0000-0000-0000-000000000000".into()),
            reclaim("1900000500"),
        )
        .await
        .unwrap_err();
    assert!(
        matches!(refused, PlatformError::Conflict { kind: "Pod", .. }),
        "{refused:?}"
    );
    let unchanged = platform.get_pod("fn-a").await.unwrap();
    assert_eq!(
        unchanged.metadata.annotations.unwrap()["fn.kpt.dev/reclaim-after"],
        "1900000000"
    );
    assert_eq!(unchanged.metadata.uid, uid_a);
    platform
        .patch_pod_annotations("fn-a", uid_a.clone(), reclaim("1900000600"))
        .await
        .unwrap();
    let missing = platform
        .patch_pod_annotations("fn-gone", uid_a, reclaim("1900000600"))
        .await
        .unwrap_err();
    assert!(missing.is_not_found(), "{missing:?}");

    let mut applied = Vec::new();
    while applied.len() < 2 {
        match next_event(&mut watch).await {
            PodEvent::Applied(p) => applied.push(p.metadata.name.unwrap()),
            PodEvent::Listed(pods) => {
                applied.extend(pods.into_iter().filter_map(|p| p.metadata.name))
            }
            _ => {}
        }
    }
    assert!(applied.contains(&"fn-a".to_string()) && applied.contains(&"fn-b".to_string()));
    // A status change (the test kubelet's job) arrives as an event, not by polling.
    let status = serde_json::json!({"status": {"phase": "Failed"}});
    Api::<Pod>::namespaced(client.clone(), NS)
        .patch_status("fn-b", &PatchParams::default(), &Patch::Merge(&status))
        .await
        .unwrap();
    loop {
        if let PodEvent::Applied(p) = next_event(&mut watch).await
            && p.metadata.name.as_deref() == Some("fn-b")
            && p.status.and_then(|s| s.phase).as_deref() == Some("Failed")
        {
            break;
        }
    }
    // A deletion under a precondition the pod no longer meets (it was
    // written since) deletes nothing and says so.
    let stale = DeletePrecondition {
        resource_version: created_b.metadata.resource_version.clone(),
        ..DeletePrecondition::default()
    };
    let conflict = platform.delete_pod("fn-b", &stale).await.unwrap_err();
    assert!(
        matches!(conflict, PlatformError::Conflict { .. }),
        "{conflict}"
    );
    let current = platform.get_pod("fn-b").await.unwrap();
    let fresh = DeletePrecondition {
        uid: current.metadata.uid.clone(),
        resource_version: current.metadata.resource_version.clone(),
        ..DeletePrecondition::default()
    };
    platform.delete_pod("fn-b", &fresh).await.unwrap();
    loop {
        if let PodEvent::Deleted(p) = next_event(&mut watch).await {
            assert_eq!(p.metadata.name.as_deref(), Some("fn-b"));
            break;
        }
    }
    platform
        .delete_pod("fn-b", &DeletePrecondition::default())
        .await
        .expect("deleting a missing pod is fine");
    assert!(platform.get_pod("fn-b").await.unwrap_err().is_not_found());
    let invalid = platform
        .create_pod(pod("Not_A_Valid_Name"))
        .await
        .unwrap_err();
    assert!(matches!(invalid, PlatformError::Invalid(_)), "{invalid}");

    // Services.
    platform
        .create_service(build_service(&default_service_template(), "fn-a", NS))
        .await
        .unwrap();
    let dup = platform
        .create_service(build_service(&default_service_template(), "fn-a", NS))
        .await
        .unwrap_err();
    assert!(
        matches!(
            dup,
            PlatformError::AlreadyExists {
                kind: "Service",
                ..
            }
        ),
        "{dup}"
    );
    assert!(
        platform
            .get_service("fn-a")
            .await
            .unwrap()
            .spec
            .unwrap()
            .cluster_ip
            .is_some()
    );
    // Endpoints: nothing published yet is an empty list; an EndpointSlice
    // (what a real cluster's controller writes, here by hand) is read with
    // its ready condition and pod; a core/v1 Endpoints object is the fallback.
    assert!(platform.service_endpoints("fn-a").await.unwrap().is_empty());
    let mut endpoint_watch = platform.watch_endpoints().await.unwrap();
    assert_eq!(
        next_endpoint_event(&mut endpoint_watch).await,
        EndpointEvent::Synced
    );
    let slice: k8s_openapi::api::discovery::v1::EndpointSlice =
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "fn-a-1", "labels": {"kubernetes.io/service-name": "fn-a"}},
            "addressType": "IPv4",
            "endpoints": [{
                "addresses": ["10.244.0.9"],
                "conditions": {"ready": true},
                "targetRef": {"kind": "Pod", "name": "fn-a", "namespace": NS},
            }],
            "ports": [{"name": "", "port": 9446, "protocol": "TCP"}],
        }))
        .unwrap();
    Api::<k8s_openapi::api::discovery::v1::EndpointSlice>::namespaced(client.clone(), NS)
        .create(&PostParams::default(), &slice)
        .await
        .unwrap();
    // The watch reports the new slice under its service's name.
    assert_eq!(
        next_endpoint_event(&mut endpoint_watch).await,
        EndpointEvent::Changed("fn-a".into())
    );
    let eps = platform.service_endpoints("fn-a").await.unwrap();
    assert_eq!(eps.len(), 1);
    assert_eq!(
        (
            eps[0].address.as_str(),
            eps[0].ready,
            eps[0].pod_name.as_deref()
        ),
        ("10.244.0.9", true, Some("fn-a"))
    );
    #[allow(deprecated)]
    let core: k8s_openapi::api::core::v1::Endpoints = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "fn-legacy"},
        "subsets": [{"notReadyAddresses": [{"ip": "10.244.0.10"}], "ports": [{"port": 9446}]}],
    }))
    .unwrap();
    #[allow(deprecated)]
    Api::<k8s_openapi::api::core::v1::Endpoints>::namespaced(client.clone(), NS)
        .create(&PostParams::default(), &core)
        .await
        .unwrap();
    let eps = platform.service_endpoints("fn-legacy").await.unwrap();
    assert_eq!(eps.len(), 1);
    assert!(!eps[0].ready && eps[0].address == "10.244.0.10");

    platform.delete_service("fn-a").await.unwrap();
    platform.delete_service("fn-a").await.unwrap();
    assert!(
        platform
            .get_service("fn-a")
            .await
            .unwrap_err()
            .is_not_found()
    );

    // The template ConfigMap and its resourceVersion (the template version).
    let cm: ConfigMap = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "function-pod-template"},
        "data": {"template": "kind: Pod", "serviceTemplate": "kind: Service"},
    }))
    .unwrap();
    Api::<ConfigMap>::namespaced(client.clone(), "default")
        .create(&PostParams::default(), &cm)
        .await
        .unwrap();
    let read = platform
        .read_config_map("default", "function-pod-template")
        .await
        .unwrap();
    assert_eq!(read.data["template"], "kind: Pod");
    assert!(!read.resource_version.is_empty());
    assert!(
        platform
            .read_config_map("default", "missing")
            .await
            .unwrap_err()
            .is_not_found()
    );

    // The pull secret: created, left alone when identical, updated when the bytes change.
    let secrets: Api<Secret> = Api::namespaced(client.clone(), NS);
    platform
        .ensure_pull_secret("auth-secret", br#"{"auths":{}}"#)
        .await
        .unwrap();
    let v1 = secrets.get("auth-secret").await.unwrap();
    assert_eq!(v1.type_.as_deref(), Some("kubernetes.io/dockerconfigjson"));
    platform
        .ensure_pull_secret("auth-secret", br#"{"auths":{}}"#)
        .await
        .unwrap();
    let same = secrets.get("auth-secret").await.unwrap();
    assert_eq!(
        same.metadata.resource_version, v1.metadata.resource_version,
        "identical secret rewritten"
    );
    platform
        .ensure_pull_secret("auth-secret", br#"{"auths":{"ghcr.io":{}}}"#)
        .await
        .unwrap();
    let v2 = secrets.get("auth-secret").await.unwrap();
    assert_ne!(v2.metadata.resource_version, v1.metadata.resource_version);
    assert_eq!(
        v2.data.unwrap()[".dockerconfigjson"].0,
        br#"{"auths":{"ghcr.io":{}}}"#.to_vec()
    );
}
