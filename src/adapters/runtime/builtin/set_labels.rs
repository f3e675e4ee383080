//! The catalog's `set-labels` (the current `setlabels` transformer, v0.2
//! line), in Rust.
//!
//! functionConfig: a `v1` ConfigMap (its `data` are the labels) or
//! `fn.kpt.dev SetLabels` (`labels`). Without config the function reports
//! `` `FunctionConfig` is not given `` and fails (exit 1) unless there is
//! nothing to label. Local-config objects are skipped. Labels go to
//! `metadata.labels` of every object and, by kind, to selectors and pod
//! templates: Service/ReplicationController `spec.selector`;
//! Deployment/ReplicaSet/DaemonSet/StatefulSet `spec.selector.matchLabels`
//! (created) and Job/PodDisruptionBudget (only existing keys); pod
//! templates of workloads (metadata, topology spread constraints); CronJob
//! job templates; StatefulSet volume claim templates; NetworkPolicy pod
//! selectors and ingress/egress peers (existing keys only). The result
//! `set N labels in total` counts every (place, key) visited, as the Go
//! function does.

use std::collections::BTreeMap;

use serde_json::Value;

use super::{group_version, is_gvk, str_at};
use crate::domain::render::annotations as ann;
use crate::domain::resource_list::{ResourceList, ResultItem, Severity};

fn result(message: impl Into<String>, severity: Severity) -> ResultItem {
    ResultItem {
        message: message.into(),
        severity: Some(severity),
        ..Default::default()
    }
}

/// Go's JSON type word for a value that did not fit (`json: cannot unmarshal <word> …`).
fn json_kind(v: &Value) -> &'static str {
    match v {
        Value::Array(_) => "array",
        Value::Object(_) => "object",
        Value::Number(_) => "number",
        Value::Bool(_) => "bool",
        Value::String(_) => "string",
        Value::Null => "null",
    }
}

/// The SDK's `EmptyFunctionConfig` / set-labels' `EmptyfnConfig` check on the data map.
fn empty_data(fc: &Value) -> bool {
    match fc.get("data") {
        Some(Value::Object(m)) => m.is_empty(),
        _ => true,
    }
}

/// Reads the labels from the functionConfig (the SDK's `runnerProcessor`):
/// `Ok(None)` when no config is given.
fn parse_config(fc: Option<&Value>) -> Result<Option<BTreeMap<String, String>>, String> {
    let Some(fc) = fc.filter(|v| v.as_object().is_some_and(|m| !m.is_empty())) else {
        return Ok(None);
    };
    let kind = str_at(fc, &["kind"]);
    let name = str_at(fc, &["metadata", "name"]);
    if kind == "ConfigMap"
        && name == "function-input"
        && matches!(fc.get("data"), Some(Value::Object(m)) if m.is_empty())
    {
        return Ok(None);
    }
    let (group, _) = group_version(str_at(fc, &["apiVersion"]));
    match (group, kind) {
        ("", "ConfigMap") => match fc.get("data") {
            None | Some(Value::Null) => Ok(Some(BTreeMap::new())),
            Some(Value::Object(m)) => {
                let mut labels = BTreeMap::new();
                for (k, v) in m {
                    let Value::String(s) = v else {
                        return Err(format!(
                            ".data.{k} accessor error: {} is of the type {}, expected string",
                            v,
                            json_kind(v)
                        ));
                    };
                    labels.insert(k.clone(), s.clone());
                }
                Ok(Some(labels))
            }
            Some(other) => Err(format!(
                ".data accessor error: {other} is of the type {}, expected map[string]interface{{}}",
                json_kind(other)
            )),
        },
        ("fn.kpt.dev", "SetLabels") => {
            let prefix = "unable to convert object to *setlabels.SetLabels with error: json: cannot unmarshal";
            match fc.get("labels") {
                None | Some(Value::Null) => Ok(Some(BTreeMap::new())),
                Some(Value::Object(m)) => {
                    let mut labels = BTreeMap::new();
                    for (k, v) in m {
                        match v {
                            Value::String(s) => {
                                labels.insert(k.clone(), s.clone());
                            }
                            Value::Null => {
                                labels.insert(k.clone(), String::new());
                            }
                            other => {
                                return Err(format!(
                                    "{prefix} {} into Go struct field SetLabels.labels of type string",
                                    json_kind(other)
                                ));
                            }
                        }
                    }
                    Ok(Some(labels))
                }
                Some(other) => Err(format!(
                    "{prefix} {} into Go struct field SetLabels.labels of type map[string]string",
                    json_kind(other)
                )),
            }
        }
        _ => {
            let gk = if group.is_empty() {
                kind.to_string()
            } else {
                format!("{kind}.{group}")
            };
            Err(format!(
                "unknown FunctionConfig `{gk}`, expect `SetLabels.fn.kpt.dev` or `ConfigMap.v1`"
            ))
        }
    }
}

struct Labeler<'a> {
    labels: &'a BTreeMap<String, String>,
    count: usize,
}

impl Labeler<'_> {
    /// Sets every label under `path` inside `o` when the key exists with
    /// another value, or (with `create`) when it is missing. Counts each key.
    fn update(&mut self, o: &mut Value, path: &[&str], create: bool) -> Result<(), String> {
        for (key, val) in self.labels {
            self.count += 1;
            // Walk to the parent map, checking the shape like the SDK does.
            let mut cur: &Value = o;
            let mut exists = true;
            for (i, seg) in path.iter().enumerate() {
                match cur.get(seg) {
                    Some(Value::Null) | None => {
                        exists = false;
                        break;
                    }
                    Some(next @ Value::Object(_)) => cur = next,
                    Some(other) => {
                        return Err(format!(
                            ".{} accessor error: {other} is of the type {}, expected map[string]interface{{}}",
                            path[..=i].join("."),
                            json_kind(other)
                        ));
                    }
                }
            }
            let old = if exists {
                match cur.get(key) {
                    None | Some(Value::Null) => None,
                    Some(Value::String(s)) => Some(s.clone()),
                    Some(other) => {
                        return Err(format!(
                            ".{}.{key} accessor error: {other} is of the type {}, expected string",
                            path.join("."),
                            json_kind(other)
                        ));
                    }
                }
            } else {
                None
            };
            let set = match &old {
                Some(v) => v != val,
                None => create,
            };
            if set {
                let mut full: Vec<&str> = path.to_vec();
                full.push(key);
                super::set_str(o, &full, val);
            }
        }
        Ok(())
    }

    fn meta(&mut self, o: &mut Value) -> Result<(), String> {
        self.update(o, &["metadata", "labels"], true)
    }

    fn pod(&mut self, pod: Option<&mut Value>) -> Result<(), String> {
        let Some(pod) = pod.filter(|p| p.is_object()) else {
            return Ok(());
        };
        self.meta(pod)?;
        let Some(spec) = pod.get_mut("spec").filter(|s| s.is_object()) else {
            return Ok(());
        };
        if let Some(list) = spec
            .get_mut("topologySpreadConstraints")
            .and_then(Value::as_array_mut)
        {
            for c in list.iter_mut().filter(|c| c.is_object()) {
                self.update(c, &["labelSelector", "matchLabels"], false)?;
            }
        }
        // The Go function looks for the affinity term lists directly under
        // `affinity` (not under podAffinity/podAntiAffinity); kept as is.
        if let Some(aff) = spec.get_mut("affinity").filter(|a| a.is_object()) {
            for kind in ["podAffinity", "podAntiAffinity"] {
                if !aff.get(kind).is_some_and(Value::is_object) {
                    continue;
                }
                if let Some(list) = aff
                    .get_mut("preferredDuringSchedulingIgnoredDuringExecution")
                    .and_then(Value::as_array_mut)
                {
                    for t in list.iter_mut() {
                        if let Some(term) = t.get_mut("podAffinityTerm").filter(|x| x.is_object()) {
                            self.update(term, &["labelSelector", "matchLabels"], false)?;
                        }
                    }
                }
                if let Some(list) = aff
                    .get_mut("requiredDuringSchedulingIgnoredDuringExecution")
                    .and_then(Value::as_array_mut)
                {
                    for t in list.iter_mut().filter(|t| t.is_object()) {
                        self.update(t, &["labelSelector", "matchLabels"], false)?;
                    }
                }
            }
        }
        Ok(())
    }

    fn object(&mut self, o: &mut Value) -> Result<(), String> {
        self.meta(o)?;
        // Selectors.
        if is_gvk(o, "", "v1", "Service") || is_gvk(o, "", "v1", "ReplicationController") {
            self.update(o, &["spec", "selector"], true)?;
        }
        let creates_selector = is_gvk(o, "", "", "Deployment")
            || is_gvk(o, "", "", "ReplicaSet")
            || is_gvk(o, "", "", "DaemonSet")
            || is_gvk(o, "apps", "", "StatefulSet");
        let keeps_selector =
            is_gvk(o, "batch", "", "Job") || is_gvk(o, "policy", "", "PodDisruptionBudget");
        if creates_selector || keeps_selector {
            self.update(o, &["spec", "selector", "matchLabels"], creates_selector)?;
        }
        let network_policy = is_gvk(o, "networking.k8s.io", "", "NetworkPolicy");
        if network_policy {
            self.update(o, &["spec", "podSelector", "matchLabels"], false)?;
        }
        let has_pod = is_gvk(o, "", "v1", "ReplicationController")
            || is_gvk(o, "", "", "Deployment")
            || is_gvk(o, "", "", "ReplicaSet")
            || is_gvk(o, "", "", "DaemonSet")
            || is_gvk(o, "apps", "", "StatefulSet")
            || is_gvk(o, "batch", "", "Job");
        let cron = is_gvk(o, "batch", "", "CronJob");
        let volumes = is_gvk(o, "apps", "", "StatefulSet");
        let Some(spec) = o.get_mut("spec").filter(|s| s.is_object()) else {
            return Ok(());
        };
        if has_pod {
            // The Go function ignores errors from the pod template.
            let _ = self.pod(spec.get_mut("template"));
        }
        if cron && let Some(job) = spec.get_mut("jobTemplate").filter(|j| j.is_object()) {
            self.meta(job)?;
            if let Some(job_spec) = job.get_mut("spec").filter(|s| s.is_object()) {
                self.update(job_spec, &["selector", "matchLabels"], false)?;
                self.pod(job_spec.get_mut("template"))?;
            }
        }
        if volumes
            && let Some(list) = spec
                .get_mut("volumeClaimTemplates")
                .and_then(Value::as_array_mut)
        {
            for v in list.iter_mut().filter(|v| v.is_object()) {
                self.meta(v)?;
                self.update(v, &["selector", "matchLabels"], false)?;
            }
        }
        if network_policy {
            for (list, peers) in [("ingress", "from"), ("egress", "to")] {
                if let Some(rules) = spec.get_mut(list).and_then(Value::as_array_mut) {
                    for rule in rules.iter_mut() {
                        if let Some(peers) = rule.get_mut(peers).and_then(Value::as_array_mut) {
                            for p in peers.iter_mut().filter(|p| p.is_object()) {
                                self.update(p, &["podSelector", "matchLabels"], false)?;
                            }
                        }
                    }
                }
            }
        }
        Ok(())
    }
}

/// Runs set-labels on `rl` in place; `false` means the function fails (exit 1).
pub fn run(rl: &mut ResourceList) -> bool {
    let labels = match parse_config(rl.function_config.as_ref()) {
        Ok(Some(l)) => Some(l),
        Ok(None) => {
            rl.results
                .push(result("`FunctionConfig` is not given", Severity::Info));
            None
        }
        Err(e) => {
            rl.results.push(result(e, Severity::Error));
            return false;
        }
    };
    let targets: Vec<usize> = (0..rl.items.len())
        .filter(|&i| !ann::is_local_config(&rl.items[i]))
        .collect();
    if targets.is_empty() {
        rl.results
            .push(result("no input resources", Severity::Info));
        return true;
    }
    let no_config = match &rl.function_config {
        None => true,
        Some(fc) => {
            (str_at(fc, &["kind"]) == "ConfigMap"
                && str_at(fc, &["metadata", "name"]) == "function-input"
                && empty_data(fc))
                || (str_at(fc, &["kind"]).is_empty()
                    && str_at(fc, &["metadata", "name"]).is_empty())
        }
    };
    if no_config {
        return false;
    }
    let labels = labels.unwrap_or_default();
    if labels.is_empty() {
        rl.results.push(result(
            "no `labels` arguments are given in FunctionConfig",
            Severity::Warning,
        ));
        return true;
    }
    let mut labeler = Labeler {
        labels: &labels,
        count: 0,
    };
    let mut errors = Vec::new();
    for &i in &targets {
        if let Err(e) = labeler.object(&mut rl.items[i]) {
            errors.push(result(e, Severity::Error));
        }
    }
    let failed = !errors.is_empty();
    rl.results.extend(errors);
    rl.results.push(result(
        format!("set {} labels in total", labeler.count),
        Severity::Info,
    ));
    !failed
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn rl(items: Vec<Value>, fc: Option<Value>) -> ResourceList {
        let mut rl = ResourceList::new(items);
        rl.function_config = fc;
        rl
    }

    #[test]
    fn labels_metadata_and_selectors() {
        let mut r = rl(
            vec![
                json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"}, "spec": {"template": {"metadata": {"labels": {"app": "x"}}}}}),
                json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j"}, "spec": {"selector": {"matchLabels": {"a": "b"}}}}),
            ],
            Some(
                json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "function-input"}, "data": {"tier": "db"}}),
            ),
        );
        assert!(run(&mut r));
        let d = &r.items[0];
        assert_eq!(d["metadata"]["labels"]["tier"], "db");
        assert_eq!(d["spec"]["selector"]["matchLabels"]["tier"], "db");
        assert_eq!(
            d["spec"]["template"]["metadata"]["labels"],
            json!({"app": "x", "tier": "db"})
        );
        let j = &r.items[1];
        assert!(j["spec"]["selector"]["matchLabels"].get("tier").is_none());
        // d: meta, selector, template = 3; j: meta, selector = 2.
        assert_eq!(r.results.last().unwrap().message, "set 5 labels in total");
    }

    #[test]
    fn config_problems() {
        let mut r = rl(
            vec![json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}})],
            None,
        );
        assert!(!run(&mut r));
        assert_eq!(r.results[0].message, "`FunctionConfig` is not given");
        let bad = json!({"apiVersion": "fn.kpt.dev/v1alpha1", "kind": "SetLabels", "metadata": {"name": "c"}, "labels": [{"a": "b"}]});
        let mut r = rl(vec![], Some(bad));
        assert!(!run(&mut r));
        assert_eq!(
            r.results[0].message,
            "unable to convert object to *setlabels.SetLabels with error: json: cannot unmarshal array into Go struct field SetLabels.labels of type map[string]string"
        );
        let other = json!({"apiVersion": "fn.kpt.dev/v1alpha1", "kind": "BadKind", "metadata": {"name": "c"}});
        let mut r = rl(vec![], Some(other));
        assert!(!run(&mut r));
        assert_eq!(
            r.results[0].message,
            "unknown FunctionConfig `BadKind.fn.kpt.dev`, expect `SetLabels.fn.kpt.dev` or `ConfigMap.v1`"
        );
        let empty = json!({"apiVersion": "fn.kpt.dev/v1alpha1", "kind": "SetLabels", "metadata": {"name": "c"}, "labels": {}});
        let mut r = rl(
            vec![json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}})],
            Some(empty),
        );
        assert!(run(&mut r));
        assert_eq!(r.results[0].severity, Some(Severity::Warning));
        let mut r = rl(
            vec![],
            Some(
                json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}, "data": {"a": "b"}}),
            ),
        );
        assert!(run(&mut r));
        assert_eq!(r.results[0].message, "no input resources");
    }
}
