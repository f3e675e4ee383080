//! Selecting the objects a step sees (`selectors`, `exclude`) and merging the
//! step's output back (kpt `SelectInput`, `MergeWithInput`; `krm-functions.md` §3.5).
//!
//! Before a filtered step every current object gets a 0-based
//! `kpt-resource-id`; the step receives the matching objects only; then:
//! unselected objects keep their position, selected objects still present in
//! the output (same id) are replaced by their output version, selected
//! objects missing from the output are deleted, and output objects without an
//! id (generated) are appended; finally the ids are removed.
//!
//! Deliberate difference: kpt appends an object once per matching selector
//! (an object matching two selectors reaches the function twice and then
//! trips the duplicate path/index check). Here selectors are an OR: each
//! object is selected at most once, in input order.

use std::collections::HashMap;

use serde_json::Value;

use super::annotations::{self as ann, RESOURCE_ID};
use super::kptfile::Selector;

/// True when `item` matches every non-empty field of `selector`
/// (maps: every selector entry present with the same value).
pub fn matches(item: &Value, selector: &Selector) -> bool {
    let eq = |want: &str, got: &str| want.is_empty() || want == got;
    let subset = |want: &std::collections::BTreeMap<String, String>, pointer: &str| {
        want.iter().all(|(k, v)| {
            item.pointer(pointer)
                .and_then(|m| m.get(k))
                .and_then(ann::scalar_text)
                .is_some_and(|got| &got == v)
        })
    };
    eq(&selector.name, ann::name(item))
        && eq(&selector.namespace, ann::namespace(item))
        && eq(&selector.kind, ann::kind(item))
        && eq(&selector.api_version, ann::api_version(item))
        && subset(&selector.labels, "/metadata/labels")
        && subset(&selector.annotations, "/metadata/annotations")
}

/// Positions (into `items`) of the objects a step with `selectors` and
/// `exclude` receives: all objects when `selectors` is empty, else those
/// matching any selector; then those matching a non-empty exclusion are
/// dropped.
pub fn select(items: &[Value], selectors: &[Selector], exclude: &[Selector]) -> Vec<usize> {
    (0..items.len())
        .filter(|&i| selectors.is_empty() || selectors.iter().any(|s| matches(&items[i], s)))
        .filter(|&i| {
            !exclude
                .iter()
                .any(|s| !s.is_empty() && matches(&items[i], s))
        })
        .collect()
}

/// Stamps `kpt-resource-id` `0, 1, 2…` on `items` in order.
pub fn stamp_resource_ids(items: &mut [Value]) {
    for (i, item) in items.iter_mut().enumerate() {
        ann::set(item, RESOURCE_ID, i.to_string());
    }
}

/// Merges a filtered step's `output` into `input` (both carrying
/// `kpt-resource-id`s from [`stamp_resource_ids`]); `selected` are the
/// positions the step received. Ids are removed from the result.
pub fn merge(input: Vec<Value>, selected: &[usize], output: Vec<Value>) -> Vec<Value> {
    let selected_ids: std::collections::HashSet<String> = selected
        .iter()
        .filter_map(|&i| ann::get(&input[i], RESOURCE_ID))
        .collect();
    let mut by_id: HashMap<String, Value> = HashMap::new();
    let mut generated = Vec::new();
    for item in output {
        match ann::get(&item, RESOURCE_ID).filter(|id| !id.is_empty()) {
            // kpt takes the first output object with a given id.
            Some(id) => {
                by_id.entry(id).or_insert(item);
            }
            None => generated.push(item),
        }
    }
    let mut result = Vec::with_capacity(input.len() + generated.len());
    for item in input {
        let id = ann::get(&item, RESOURCE_ID).unwrap_or_default();
        if !selected_ids.contains(&id) {
            result.push(item);
        } else if let Some(out) = by_id.remove(&id) {
            result.push(out);
        }
    }
    result.extend(generated);
    for item in &mut result {
        ann::remove(item, RESOURCE_ID);
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn obj(kind: &str, name: &str) -> Value {
        json!({"apiVersion": "v1", "kind": kind, "metadata": {"name": name, "labels": {"app": name}}})
    }

    fn sel(kind: &str) -> Selector {
        Selector {
            kind: kind.into(),
            ..Default::default()
        }
    }

    #[test]
    fn selectors_are_or_exclusions_drop_and_empty_exclusion_is_ignored() {
        let items = vec![obj("A", "a"), obj("B", "b"), obj("C", "c")];
        assert_eq!(select(&items, &[], &[]), vec![0, 1, 2]);
        assert_eq!(
            select(&items, &[sel("A"), sel("C"), sel("A")], &[]),
            vec![0, 2]
        );
        assert_eq!(
            select(&items, &[], &[sel("B"), Selector::default()]),
            vec![0, 2]
        );
        let by_label = Selector {
            labels: [("app".to_string(), "c".to_string())].into(),
            ..Default::default()
        };
        assert_eq!(select(&items, &[by_label], &[]), vec![2]);
        let wrong_ns = Selector {
            namespace: "x".into(),
            ..Default::default()
        };
        assert!(select(&items, &[wrong_ns], &[]).is_empty());
    }

    #[test]
    fn merge_replaces_deletes_keeps_and_appends() {
        let mut input = vec![obj("A", "a"), obj("B", "b"), obj("C", "c"), obj("D", "d")];
        stamp_resource_ids(&mut input);
        let selected = vec![0, 1];
        let mut a2 = input[0].clone();
        a2["data"] = json!({"changed": "yes"});
        let e = obj("E", "e");
        let merged = merge(input, &selected, vec![a2, e]);
        let names: Vec<&str> = merged.iter().map(ann::name).collect();
        assert_eq!(names, ["a", "c", "d", "e"]);
        assert_eq!(merged[0]["data"]["changed"], "yes");
        assert!(merged.iter().all(|i| ann::get(i, RESOURCE_ID).is_none()));
    }
}
