//! The catalog's `set-namespace` (v0.4.5 behaviour), in Rust.
//!
//! functionConfig: a `v1` ConfigMap (`data.namespace`, optional
//! `data.namespaceMatcher`; or `data.name` when the ConfigMap is the package
//! context `kptfile.kpt.dev`), or `fn.kpt.dev/v1alpha1 SetNamespace`
//! (`namespace`, `namespaceMatcher`). A bad or missing config is reported as
//! an error result while the function still succeeds (exit 0), as the Go
//! function does.
//!
//! Objects marked local-config are left alone. Namespace-scoped objects
//! (known Kubernetes kinds by scope table; other kinds when they have a
//! `metadata.namespace` field) get `metadata.namespace` (an empty one counts
//! as `default`); cluster-scoped `Namespace` objects are renamed; the
//! namespace fields of CRD conversion webhooks, APIServices and
//! ClusterRoleBinding subjects are set; `config.kubernetes.io/depends-on`
//! annotations pointing at a renamed namespace follow. With a matcher only
//! values equal to it (or whose upstream origin is in it) change. Results:
//! a summary and a depends-on summary (info), plus one info per object whose
//! origin matches.

use std::collections::{BTreeSet, HashSet};

use serde_json::Value;

use super::{go_list, group_version, is_gvk, set_str, str_at};
use crate::domain::render::annotations as ann;
use crate::domain::resource_list::{FileRef, ResourceList, ResourceRef, ResultItem, Severity};

const UNKNOWN_NAMESPACE: &str = "~C";
const DEFAULT_NAMESPACE: &str = "default";
const PACKAGE_CONTEXT: &str = "kptfile.kpt.dev";
const DEPENDS_ON: &str = "config.kubernetes.io/depends-on";
const UPSTREAM_IDENTIFIER: &str = "internal.kpt.dev/upstream-identifier";

/// Kubernetes kinds whose scope the functions SDK knows (its precomputed
/// scope table): `(apiVersion, kind, namespaced)`.
const SCOPES: &[(&str, &str, bool)] = &[
    (
        "admissionregistration.k8s.io/v1",
        "MutatingWebhookConfiguration",
        false,
    ),
    (
        "admissionregistration.k8s.io/v1",
        "ValidatingWebhookConfiguration",
        false,
    ),
    (
        "admissionregistration.k8s.io/v1beta1",
        "MutatingWebhookConfiguration",
        false,
    ),
    (
        "admissionregistration.k8s.io/v1beta1",
        "ValidatingWebhookConfiguration",
        false,
    ),
    ("apiextensions.k8s.io/v1", "CustomResourceDefinition", false),
    (
        "apiextensions.k8s.io/v1beta1",
        "CustomResourceDefinition",
        false,
    ),
    ("apiregistration.k8s.io/v1", "APIService", false),
    ("apiregistration.k8s.io/v1beta1", "APIService", false),
    ("apps/v1", "ControllerRevision", true),
    ("apps/v1", "DaemonSet", true),
    ("apps/v1", "Deployment", true),
    ("apps/v1", "ReplicaSet", true),
    ("apps/v1", "StatefulSet", true),
    ("autoscaling/v1", "HorizontalPodAutoscaler", true),
    ("autoscaling/v1", "Scale", true),
    ("autoscaling/v2beta1", "HorizontalPodAutoscaler", true),
    ("autoscaling/v2beta2", "HorizontalPodAutoscaler", true),
    ("batch/v1", "CronJob", true),
    ("batch/v1", "Job", true),
    ("batch/v1beta1", "CronJob", true),
    ("certificates.k8s.io/v1", "CertificateSigningRequest", false),
    (
        "certificates.k8s.io/v1beta1",
        "CertificateSigningRequest",
        false,
    ),
    ("coordination.k8s.io/v1", "Lease", true),
    ("coordination.k8s.io/v1beta1", "Lease", true),
    ("discovery.k8s.io/v1", "EndpointSlice", true),
    ("discovery.k8s.io/v1beta1", "EndpointSlice", true),
    ("events.k8s.io/v1", "Event", true),
    ("events.k8s.io/v1beta1", "Event", true),
    ("extensions/v1beta1", "Ingress", true),
    ("flowcontrol.apiserver.k8s.io/v1beta1", "FlowSchema", false),
    (
        "flowcontrol.apiserver.k8s.io/v1beta1",
        "PriorityLevelConfiguration",
        false,
    ),
    ("networking.k8s.io/v1", "Ingress", true),
    ("networking.k8s.io/v1", "IngressClass", false),
    ("networking.k8s.io/v1", "NetworkPolicy", true),
    ("networking.k8s.io/v1beta1", "Ingress", true),
    ("networking.k8s.io/v1beta1", "IngressClass", false),
    ("node.k8s.io/v1", "RuntimeClass", false),
    ("node.k8s.io/v1beta1", "RuntimeClass", false),
    ("policy/v1", "PodDisruptionBudget", true),
    ("policy/v1beta1", "PodDisruptionBudget", true),
    ("policy/v1beta1", "PodSecurityPolicy", false),
    ("rbac.authorization.k8s.io/v1", "ClusterRole", false),
    ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding", false),
    ("rbac.authorization.k8s.io/v1", "Role", true),
    ("rbac.authorization.k8s.io/v1", "RoleBinding", true),
    ("rbac.authorization.k8s.io/v1beta1", "ClusterRole", false),
    (
        "rbac.authorization.k8s.io/v1beta1",
        "ClusterRoleBinding",
        false,
    ),
    ("rbac.authorization.k8s.io/v1beta1", "Role", true),
    ("rbac.authorization.k8s.io/v1beta1", "RoleBinding", true),
    ("scheduling.k8s.io/v1", "PriorityClass", false),
    ("scheduling.k8s.io/v1beta1", "PriorityClass", false),
    ("storage.k8s.io/v1", "CSIDriver", false),
    ("storage.k8s.io/v1", "CSINode", false),
    ("storage.k8s.io/v1", "StorageClass", false),
    ("storage.k8s.io/v1", "VolumeAttachment", false),
    ("storage.k8s.io/v1beta1", "CSIDriver", false),
    ("storage.k8s.io/v1beta1", "CSINode", false),
    ("storage.k8s.io/v1beta1", "CSIStorageCapacity", true),
    ("storage.k8s.io/v1beta1", "StorageClass", false),
    ("storage.k8s.io/v1beta1", "VolumeAttachment", false),
    ("v1", "ComponentStatus", false),
    ("v1", "ConfigMap", true),
    ("v1", "Endpoints", true),
    ("v1", "Event", true),
    ("v1", "LimitRange", true),
    ("v1", "Namespace", false),
    ("v1", "Node", false),
    ("v1", "NodeProxyOptions", false),
    ("v1", "PersistentVolume", false),
    ("v1", "PersistentVolumeClaim", true),
    ("v1", "Pod", true),
    ("v1", "PodAttachOptions", true),
    ("v1", "PodExecOptions", true),
    ("v1", "PodPortForwardOptions", true),
    ("v1", "PodProxyOptions", true),
    ("v1", "PodTemplate", true),
    ("v1", "ReplicationController", true),
    ("v1", "ResourceQuota", true),
    ("v1", "Secret", true),
    ("v1", "Service", true),
    ("v1", "ServiceAccount", true),
    ("v1", "ServiceProxyOptions", true),
];

/// The SDK's `HasNamespace`: `metadata.namespace` is present (even empty).
fn has_namespace(o: &Value) -> bool {
    o.get("metadata")
        .and_then(|m| m.get("namespace"))
        .is_some_and(|n| !n.is_null())
}

/// The SDK's `IsNamespaceScoped`: the scope table, else "has a namespace field".
pub fn is_namespace_scoped(o: &Value) -> bool {
    let api = str_at(o, &["apiVersion"]);
    let kind = str_at(o, &["kind"]);
    SCOPES
        .iter()
        .find(|(a, k, _)| *a == api && *k == kind)
        .map(|(_, _, ns)| *ns)
        .unwrap_or_else(|| has_namespace(o))
}

/// The namespace an object lives in for identity purposes.
fn effective_namespace(o: &Value) -> String {
    if has_namespace(o) {
        str_at(o, &["metadata", "namespace"]).to_string()
    } else if is_namespace_scoped(o) {
        DEFAULT_NAMESPACE.to_string()
    } else {
        UNKNOWN_NAMESPACE.to_string()
    }
}

fn short_string(o: &Value) -> String {
    format!(
        "Resource(apiVersion={}, kind={}, namespace={}, name={})",
        str_at(o, &["apiVersion"]),
        str_at(o, &["kind"]),
        str_at(o, &["metadata", "namespace"]),
        str_at(o, &["metadata", "name"])
    )
}

/// `(namespace, name)` of the object's upstream origin:
/// `internal.kpt.dev/upstream-identifier` (`group|Kind|namespace|name`) when
/// present, else the object's own identity. `Err` for a malformed identifier.
fn origin(o: &Value) -> Result<(String, String), ()> {
    match ann::get(o, UPSTREAM_IDENTIFIER).filter(|s| !s.is_empty()) {
        Some(id) => {
            let parts: Vec<&str> = id.trim().split('|').collect();
            let label = |s: &str| {
                (1..=63).contains(&s.len())
                    && s.chars()
                        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
            };
            let ok = parts.len() == 4
                && parts[0]
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.')
                && parts[1]
                    .chars()
                    .next()
                    .is_some_and(|c| c.is_ascii_uppercase())
                && parts[1].chars().all(|c| c.is_ascii_alphanumeric())
                && (parts[2] == UNKNOWN_NAMESPACE || label(parts[2]))
                && label(parts[3]);
            if ok {
                Ok((parts[2].to_string(), parts[3].to_string()))
            } else {
                Err(())
            }
        }
        None => Ok((
            effective_namespace(o),
            str_at(o, &["metadata", "name"]).to_string(),
        )),
    }
}

struct Config {
    namespace: String,
    matcher: String,
}

fn config_error(rl: &mut ResourceList, message: String) {
    let fc = rl.function_config.clone().unwrap_or(Value::Null);
    let index = ann::get(&fc, ann::INDEX)
        .and_then(|i| i.parse().ok())
        .unwrap_or(-1);
    rl.results.push(ResultItem {
        message,
        severity: Some(Severity::Error),
        resource_ref: Some(ResourceRef {
            api_version: str_at(&fc, &["apiVersion"]).to_string(),
            kind: str_at(&fc, &["kind"]).to_string(),
            name: str_at(&fc, &["metadata", "name"]).to_string(),
            namespace: str_at(&fc, &["metadata", "namespace"]).to_string(),
        }),
        file: Some(FileRef {
            path: ann::get(&fc, ann::PATH).unwrap_or_default(),
            index: Some(index),
        }),
        ..Default::default()
    });
}

fn parse_config(fc: Option<&Value>) -> Result<Config, String> {
    let fc = match fc {
        Some(v) if v.as_object().is_some_and(|m| !m.is_empty()) => v,
        _ => {
            return Err(
                "FunctionConfig is missing. Expect `ConfigMap.v1` or `SetNamespace.v1alpha1.fn.kpt.dev`"
                    .into(),
            );
        }
    };
    let string_field = |v: Option<&Value>| -> Result<String, ()> {
        match v {
            None | Some(Value::Null) => Ok(String::new()),
            Some(Value::String(s)) => Ok(s.clone()),
            Some(_) => Err(()),
        }
    };
    if is_gvk(fc, "", "v1", "ConfigMap") {
        let bad = || "failed to parse FunctionConfig as ConfigMap".to_string();
        let data = match fc.get("data") {
            None | Some(Value::Null) => serde_json::Map::new(),
            Some(Value::Object(m)) => m.clone(),
            Some(_) => return Err(bad()),
        };
        if data.values().any(|v| !v.is_string() && !v.is_null()) {
            return Err(bad());
        }
        let get = |k: &str| string_field(data.get(k)).unwrap_or_default();
        let matcher = get("namespaceMatcher");
        let namespace = get("namespace");
        if !namespace.is_empty() {
            return Ok(Config { namespace, matcher });
        }
        let name = get("name");
        if !name.is_empty() && str_at(fc, &["metadata", "name"]) == PACKAGE_CONTEXT {
            return Ok(Config {
                namespace: name,
                matcher,
            });
        }
        return Err("`data.namespace` should not be empty".into());
    }
    if is_gvk(fc, "fn.kpt.dev", "v1alpha1", "SetNamespace") {
        let parsed = (
            string_field(fc.get("namespace")),
            string_field(fc.get("namespaceMatcher")),
        );
        let (Ok(namespace), Ok(matcher)) = parsed else {
            return Err(
                "failed to parse FunctionConfig as SetNamespace.v1alpha1.fn.kpt.dev".into(),
            );
        };
        if namespace.is_empty() {
            return Err("`namespace` should not be empty".into());
        }
        return Ok(Config { namespace, matcher });
    }
    Err(format!(
        "unknown functionConfig Kind={} ApiVersion={}, expect `ConfigMap.v1` or `SetNamespace.v1alpha1.fn.kpt.dev`",
        str_at(fc, &["kind"]),
        str_at(fc, &["apiVersion"])
    ))
}

/// The walk state shared by all visited namespace fields.
struct Walk<'a> {
    new_ns: &'a str,
    matcher: Option<&'a str>,
    count: usize,
    old: BTreeSet<String>,
    results: Vec<ResultItem>,
}

impl Walk<'_> {
    /// The SDK visitor: decides whether `current` changes to the new namespace.
    fn visit(&mut self, origin: &str, current: &mut String, id: Option<&str>) {
        if origin == UNKNOWN_NAMESPACE {
            return;
        }
        if current.is_empty() {
            *current = DEFAULT_NAMESPACE.to_string();
        }
        if current == self.new_ns {
            return;
        }
        let change = match self.matcher {
            None => true,
            Some(m) => {
                if m == origin {
                    self.results.push(info(format!(
                        "[{}] has matching origin {origin}",
                        id.unwrap_or("")
                    )));
                }
                m == current || m == origin
            }
        };
        if change {
            self.old.insert(current.clone());
            *current = self.new_ns.to_string();
            self.count += 1;
        }
    }
}

fn info(message: String) -> ResultItem {
    ResultItem {
        message,
        severity: Some(Severity::Info),
        ..Default::default()
    }
}

/// Runs set-namespace on `rl` in place. Always succeeds (config problems
/// become an error result, as in the Go function).
pub fn run(rl: &mut ResourceList) -> bool {
    let config = match parse_config(rl.function_config.as_ref()) {
        Ok(c) => c,
        Err(message) => {
            config_error(rl, message);
            return true;
        }
    };
    let matcher = (!config.matcher.is_empty()).then_some(config.matcher.as_str());
    let targets: Vec<usize> = (0..rl.items.len())
        .filter(|&i| !ann::is_local_config(&rl.items[i]))
        .collect();
    // Identities before any change, for depends-on.
    let depends_on: HashSet<String> = targets
        .iter()
        .map(|&i| &rl.items[i])
        .filter_map(|o| {
            let ns = effective_namespace(o);
            (ns != UNKNOWN_NAMESPACE).then(|| {
                let (group, _) = group_version(str_at(o, &["apiVersion"]));
                format!(
                    "{group}/namespaces/{ns}/{}/{}",
                    str_at(o, &["kind"]),
                    str_at(o, &["metadata", "name"])
                )
            })
        })
        .collect();
    let mut walk = Walk {
        new_ns: &config.namespace,
        matcher,
        count: 0,
        old: BTreeSet::new(),
        results: Vec::new(),
    };
    // Cluster-scoped objects with namespace references first, then namespaced objects.
    for &i in &targets {
        let o = &mut rl.items[i];
        if is_namespace_scoped(o) {
            continue;
        }
        if is_gvk(o, "", "v1", "Namespace") {
            let id = short_string(o);
            let origin_name = origin(o).map(|(_, name)| name).unwrap_or_default();
            let mut name = str_at(o, &["metadata", "name"]).to_string();
            walk.visit(&origin_name, &mut name, Some(&id));
            set_str(o, &["metadata", "name"], &name);
        } else if is_gvk(o, "apiextensions.k8s.io", "v1", "CustomResourceDefinition") {
            let path = [
                "spec",
                "conversion",
                "webhook",
                "clientConfig",
                "service",
                "namespace",
            ];
            let mut ns = str_at(o, &path).to_string();
            walk.visit("", &mut ns, None);
            set_str(o, &path, &ns);
        } else if is_gvk(o, "apiregistration.k8s.io", "v1", "APIService") {
            let path = ["spec", "service", "namespace"];
            let mut ns = str_at(o, &path).to_string();
            walk.visit("", &mut ns, None);
            set_str(o, &path, &ns);
        } else if matches!(str_at(o, &["kind"]), "ClusterRoleBinding" | "RoleBinding")
            && let Some(subjects) = o.get_mut("subjects").and_then(Value::as_array_mut)
        {
            for s in subjects {
                if let Some(Value::String(ns)) = s.get("namespace") {
                    let mut ns = ns.clone();
                    walk.visit("", &mut ns, None);
                    set_str(s, &["namespace"], &ns);
                }
            }
        }
    }
    for &i in &targets {
        let o = &mut rl.items[i];
        if !is_namespace_scoped(o) {
            continue;
        }
        let id = short_string(o);
        let origin_ns = origin(o)
            .map(|(ns, _)| ns)
            .unwrap_or_else(|()| UNKNOWN_NAMESPACE.to_string());
        let mut ns = str_at(o, &["metadata", "namespace"]).to_string();
        walk.visit(&origin_ns, &mut ns, Some(&id));
        set_str(o, &["metadata", "namespace"], &ns);
    }
    let new_ns = config.namespace.clone();
    let mut results = std::mem::take(&mut walk.results);
    results.push(info(if walk.count == 0 {
        format!("all matching namespaces are already {new_ns:?}. no value changed")
    } else {
        format!(
            "namespace {} updated to {new_ns:?}, {} value(s) changed",
            go_list(&walk.old),
            walk.count
        )
    }));
    // depends-on annotations.
    let mut count = 0;
    let mut old = BTreeSet::new();
    for &i in &targets {
        let o = &mut rl.items[i];
        let Some(value) = ann::get(o, DEPENDS_ON).filter(|v| namespaced_depends_on(v)) else {
            continue;
        };
        if !depends_on.contains(&value) {
            continue;
        }
        let mut segments: Vec<String> = value.split('/').map(str::to_string).collect();
        if segments[2] == new_ns {
            continue;
        }
        if matcher.is_none_or(|m| m == segments[2]) {
            old.insert(segments[2].clone());
            segments[2] = new_ns.clone();
            count += 1;
            ann::set(o, DEPENDS_ON, segments.join("/"));
        }
    }
    results.push(info(if count == 0 {
        "all `depends-on` annotations are up-to-date. no `namespace` changed".to_string()
    } else {
        format!(
            "`depends-on` annotation namespace {} updated to {new_ns:?}, {count} value(s) changed",
            go_list(&old)
        )
    }));
    rl.results.extend(results);
    true
}

/// `<group>/namespaces/<namespace>/<kind>/<name>` with `[-.\w]*` segments.
fn namespaced_depends_on(v: &str) -> bool {
    let parts: Vec<&str> = v.split('/').collect();
    parts.len() == 5
        && parts[1] == "namespaces"
        && parts.iter().all(|p| {
            p.chars()
                .all(|c| c.is_ascii_alphanumeric() || "-._".contains(c))
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn rl(items: Vec<Value>, fc: Value) -> ResourceList {
        let mut rl = ResourceList::new(items);
        rl.function_config = Some(fc);
        rl
    }

    fn cm(data: Value) -> Value {
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "function-input"}, "data": data})
    }

    #[test]
    fn sets_namespaces_and_counts() {
        let mut r = rl(
            vec![
                json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}}),
                json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d", "namespace": "old"}}),
                json!({"apiVersion": "example.com/v1", "kind": "Foo", "metadata": {"name": "cluster"}}),
                json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "l", "annotations": {ann::LOCAL_CONFIG: "true"}}}),
            ],
            cm(json!({"namespace": "new"})),
        );
        assert!(run(&mut r));
        assert_eq!(r.items[0]["metadata"]["namespace"], "new");
        assert_eq!(r.items[1]["metadata"]["namespace"], "new");
        assert!(r.items[2]["metadata"].get("namespace").is_none());
        assert!(r.items[3]["metadata"].get("namespace").is_none());
        assert_eq!(
            r.results[0].message,
            "namespace [default old] updated to \"new\", 2 value(s) changed"
        );
    }

    #[test]
    fn matcher_limits_changes_and_reports_origins() {
        let mut r = rl(
            vec![
                json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "a", "namespace": "x"}}),
                json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "b", "namespace": "y"}}),
            ],
            json!({"apiVersion": "fn.kpt.dev/v1alpha1", "kind": "SetNamespace", "metadata": {"name": "c"}, "namespace": "z", "namespaceMatcher": "x"}),
        );
        run(&mut r);
        assert_eq!(r.items[0]["metadata"]["namespace"], "z");
        assert_eq!(r.items[1]["metadata"]["namespace"], "y");
        assert_eq!(
            r.results[0].message,
            "[Resource(apiVersion=v1, kind=Service, namespace=x, name=a)] has matching origin x"
        );
    }

    #[test]
    fn config_errors_are_results_not_failures() {
        let mut r = ResourceList::new(vec![]);
        assert!(run(&mut r));
        assert_eq!(
            r.results[0].message,
            "FunctionConfig is missing. Expect `ConfigMap.v1` or `SetNamespace.v1alpha1.fn.kpt.dev`"
        );
        assert_eq!(r.results[0].file.as_ref().unwrap().index, Some(-1));
        let mut r = rl(vec![], cm(json!({"x": "y"})));
        run(&mut r);
        assert_eq!(r.results[0].message, "`data.namespace` should not be empty");
        assert_eq!(
            r.results[0].resource_ref.as_ref().unwrap().name,
            "function-input"
        );
        let mut r = rl(
            vec![],
            json!({"apiVersion": "v2", "kind": "Other", "metadata": {"name": "o"}}),
        );
        run(&mut r);
        assert!(
            r.results[0]
                .message
                .starts_with("unknown functionConfig Kind=Other ApiVersion=v2")
        );
        let ctx = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "kptfile.kpt.dev"}, "data": {"name": "pkg"}});
        let mut r = rl(
            vec![json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"}})],
            ctx,
        );
        run(&mut r);
        assert_eq!(r.items[0]["metadata"]["namespace"], "pkg");
    }
}
