//! kyaml's annotation bookkeeping around a call: legacy/internal twins,
//! migration ids and their reconciliation after the call, kpt's path
//! invariants, and kyaml's field-order sync.

use std::borrow::Cow;

use foldhash::{HashSet, HashSetExt};
use serde_json::{Map, Value};

use crate::domain::codec::value;
use crate::domain::render::annotations as ann;
use crate::domain::render::error::StepError;

/// Annotations kyaml records before a call, per input object.
#[derive(Default)]
pub(super) struct Snapshot {
    path: Option<String>,
    index: Option<String>,
    legacy_path: Option<String>,
    legacy_index: Option<String>,
}

const TWINS: [(&str, &str, &str); 3] = [
    (ann::PATH, ann::LEGACY_PATH, "path"),
    (ann::INDEX, ann::LEGACY_INDEX, "index"),
    (ann::ID, ann::LEGACY_ID, "id"),
];

/// kyaml's pre-call step: record each object's path/index/id annotations,
/// give it a migration id, fill missing legacy/internal twins, and refuse
/// disagreeing twins. Returns the snapshots and which annotation forms the
/// input uses.
pub(super) fn prepare_annotations(
    input: &mut [Value],
) -> Result<(Vec<Snapshot>, bool, bool), String> {
    let mut snapshots = Vec::with_capacity(input.len());
    let mut internal: Option<bool> = None;
    let mut legacy: Option<bool> = None;
    let mut inconsistent = false;
    for (i, item) in input.iter_mut().enumerate() {
        ann::set(item, ann::MIGRATION_ID, i.to_string());
        // Not KRM (no metadata map): nothing recorded; the checks say so.
        let Some(annos) = ann::annotations_mut(item) else {
            snapshots.push(Snapshot::default());
            continue;
        };
        let has = |k: &str| value::has(annos, k);
        let get = |k: &str| ann::text_in(annos, k).map(Cow::into_owned);
        let snap = Snapshot {
            path: get(ann::PATH),
            index: get(ann::INDEX),
            legacy_path: get(ann::LEGACY_PATH),
            legacy_index: get(ann::LEGACY_INDEX),
        };
        let found_internal = has(ann::PATH) || has(ann::INDEX) || has(ann::ID);
        let found_legacy = has(ann::LEGACY_PATH) || has(ann::LEGACY_INDEX) || has(ann::LEGACY_ID);
        if (found_internal || found_legacy)
            && (*internal.get_or_insert(found_internal) != found_internal
                || *legacy.get_or_insert(found_legacy) != found_legacy)
        {
            inconsistent = true;
        }
        snapshots.push(snap);
        fill_twins_in(annos);
        check_twins_in(annos)?;
    }
    if inconsistent {
        return Err("the annotation formatting in the input resources is not consistent".into());
    }
    let any = internal.is_some() || legacy.is_some();
    Ok((snapshots, internal.unwrap_or(!any), legacy.unwrap_or(!any)))
}

/// Sets the missing one of each legacy/internal pair from the other.
pub(super) fn fill_twins(item: &mut Value) {
    if let Some(annos) = ann::annotations_mut(item) {
        fill_twins_in(annos);
    }
}

/// [`fill_twins`] on an annotation map.
fn fill_twins_in(annos: &mut Map<String, Value>) {
    for (new, old, _) in TWINS {
        let text = |k: &str| ann::text_in(annos, k).filter(|v| !v.is_empty());
        let fill = match (text(new), text(old)) {
            (Some(v), None) => Some((old, v.into_owned())),
            (None, Some(v)) => Some((new, v.into_owned())),
            _ => None,
        };
        if let Some((key, v)) = fill {
            ann::set_in(annos, key, Value::String(v));
        }
    }
}

/// Refuses an annotation map whose legacy and internal forms of path,
/// index or id are both set and differ (kyaml's check before and after a
/// call).
fn check_twins_in(annos: &Map<String, Value>) -> Result<(), String> {
    for (new, old, what) in TWINS {
        let text = |k: &str| ann::text_in(annos, k);
        if let (Some(n), Some(o)) = (text(new), text(old))
            && !n.is_empty()
            && !o.is_empty()
            && n != o
        {
            return Err(mismatched(what));
        }
    }
    Ok(())
}

/// kyaml's post-call reconciliation of one output object, after
/// [`fill_twins`]: a function may edit either form of the path/index
/// annotations; the edit is copied to the other form, forms the input did
/// not use are dropped, and the migration id is removed (an annotation map
/// left empty goes too, as kyaml clears it). Done on the object's
/// annotation map, found once.
///
/// Errors: the two forms of an annotation disagree with each other and
/// with what the input had (kyaml's words).
pub(super) fn reconcile_item(
    item: &mut Value,
    snapshots: &[Snapshot],
    use_internal: bool,
    use_legacy: bool,
) -> Result<(), String> {
    let Some(meta) = ann::metadata_mut(item) else {
        // Not KRM (the checks after the call say so): nothing to reconcile.
        return Ok(());
    };
    let Some(annos) = value::get_mut(meta, "annotations").and_then(Value::as_object_mut) else {
        // No annotations: no migration id, none to drop or check.
        return Ok(());
    };
    let snap = ann::text_in(annos, ann::MIGRATION_ID)
        .and_then(|id| id.parse::<usize>().ok())
        .and_then(|i| snapshots.get(i));
    if let Some(snap) = snap {
        for (new, old, what, original) in snapshot_twins(snap) {
            let Some(original) = original.filter(|o| !o.is_empty()) else {
                continue;
            };
            let fill = {
                let n = ann::text_in(annos, new).unwrap_or_default();
                let o = ann::text_in(annos, old).unwrap_or_default();
                if original != n && original != o && n != o {
                    return Err(mismatched(what));
                } else if original != n {
                    Some((old, n.into_owned()))
                } else if original != o {
                    Some((new, o.into_owned()))
                } else {
                    None
                }
            };
            if let Some((key, v)) = fill {
                ann::set_in(annos, key, Value::String(v));
            }
        }
    }
    // The migration id and the forms the input did not use go in one pass;
    // the twins are checked on what is left.
    ann::remove_in(meta, |k| {
        k == ann::MIGRATION_ID
            || (!use_internal && [ann::ID, ann::PATH, ann::INDEX].contains(&k))
            || (!use_legacy && [ann::LEGACY_ID, ann::LEGACY_PATH, ann::LEGACY_INDEX].contains(&k))
    });
    match value::get(meta, "annotations").and_then(Value::as_object) {
        Some(annos) => check_twins_in(annos),
        None => Ok(()),
    }
}

/// The path and index twins with the value the input had for each.
fn snapshot_twins(
    snap: &Snapshot,
) -> [(&'static str, &'static str, &'static str, Option<&str>); 2] {
    [
        (
            ann::PATH,
            ann::LEGACY_PATH,
            "path",
            snap.path.as_deref().or(snap.legacy_path.as_deref()),
        ),
        (
            ann::INDEX,
            ann::LEGACY_INDEX,
            "index",
            snap.index.as_deref().or(snap.legacy_index.as_deref()),
        ),
    ]
}

/// kyaml's words for twins that disagree.
fn mismatched(what: &str) -> String {
    format!("resource input to function has mismatched legacy and internal {what} annotations")
}

/// kpt's `enforcePathInvariants`: no path escaping the package, no two
/// objects of one package with the same file and index.
pub(super) fn check_paths(out: &[Value]) -> Result<(), StepError> {
    // Texts borrowed from the objects where they can be (no copies).
    let mut seen = HashSet::with_capacity(out.len());
    for item in out {
        let pkg = ann::get_text(item, ann::PACKAGE_PATH).unwrap_or_default();
        let raw = ann::path(item).unwrap_or_default();
        let path = ann::cleaned_text(&raw);
        if path.starts_with("../") {
            return Err(StepError::OutsidePackage(raw.into_owned()));
        }
        let index = ann::index(item).unwrap_or_default();
        if !seen.insert((pkg, path.clone(), index.clone())) {
            return Err(StepError::Duplicate {
                path: path.into_owned(),
                index: index.into_owned(),
            });
        }
    }
    Ok(())
}

/// kyaml's `SyncOrder`: map keys of `to` follow their order in `from`
/// (keys only in `to` keep their relative order after them), recursively;
/// sequences are matched by position.
pub fn sync_order(from: &Value, to: &mut Value) {
    match (from, to) {
        (Value::Object(f), Value::Object(t)) => {
            if f.len() == t.len() && f.keys().zip(t.keys()).all(|(a, b)| a == b) {
                // The same keys in the same order (the common case): pair
                // the values up without looking keys up.
                for (fv, tv) in f.values().zip(t.values_mut()) {
                    sync_order(fv, tv);
                }
                return;
            }
            if !common_keys_in_order(f, t) {
                let mut old = std::mem::take(t);
                for k in f.keys() {
                    if let Some(v) = old.shift_remove(k) {
                        t.insert(k.clone(), v);
                    }
                }
                for (k, v) in old {
                    t.insert(k, v);
                }
            }
            // The keys both have are now in the same order: walk them side
            // by side (a key only `to` has is looked for ahead without
            // moving on).
            let mut fi = f.iter();
            for (k, tv) in t.iter_mut() {
                let mut probe = fi.clone();
                while let Some((fk, fv)) = probe.next() {
                    if fk == k {
                        sync_order(fv, tv);
                        fi = probe;
                        break;
                    }
                }
            }
        }
        (Value::Array(f), Value::Array(t)) => {
            for (fv, tv) in f.iter().zip(t.iter_mut()) {
                sync_order(fv, tv);
            }
        }
        _ => {}
    }
}

/// True when the keys `f` and `t` both have come in the same order in
/// each. Side by side, a key is looked up in the other map only where the
/// two differ (a function's output mostly keeps its input's keys).
fn common_keys_in_order(f: &Map<String, Value>, t: &Map<String, Value>) -> bool {
    let (mut fi, mut ti) = (f.keys().peekable(), t.keys().peekable());
    loop {
        match (fi.peek(), ti.peek()) {
            (Some(a), Some(b)) if a == b => {
                fi.next();
                ti.next();
            }
            (Some(a), _) if !t.contains_key(*a) => {
                fi.next();
            }
            (_, Some(b)) if !f.contains_key(*b) => {
                ti.next();
            }
            (None, _) | (_, None) => return true,
            _ => return false,
        }
    }
}

/// Removes the per-call annotations a failed step may leave behind.
pub(super) fn strip_transient(mut item: Value) -> Value {
    ann::remove_all(
        &mut item,
        &[ann::ID, ann::LEGACY_ID, ann::MIGRATION_ID, ann::RESOURCE_ID],
    );
    item
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// An object as a kyaml function gets it: both forms of path and
    /// index, and the migration id `0`.
    fn prepared() -> (Vec<Value>, Vec<Snapshot>, bool, bool) {
        let mut items = vec![json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "a", "annotations": {
                ann::PATH: "a.yaml", ann::LEGACY_PATH: "a.yaml",
                ann::INDEX: "0", ann::LEGACY_INDEX: "0",
            }},
        })];
        let (snaps, internal, legacy) = prepare_annotations(&mut items).unwrap();
        (items, snaps, internal, legacy)
    }

    #[test]
    fn reconcile_copies_an_edit_of_either_form_to_the_other() {
        let (mut items, snaps, internal, legacy) = prepared();
        ann::set(&mut items[0], ann::LEGACY_PATH, "b.yaml");
        fill_twins(&mut items[0]);
        reconcile_item(&mut items[0], &snaps, internal, legacy).unwrap();
        assert_eq!(ann::get(&items[0], ann::PATH).as_deref(), Some("b.yaml"));
        assert_eq!(
            ann::get(&items[0], ann::LEGACY_PATH).as_deref(),
            Some("b.yaml")
        );
        assert_eq!(ann::get(&items[0], ann::MIGRATION_ID), None);
    }

    #[test]
    fn reconcile_refuses_twins_that_disagree_with_each_other_and_the_input() {
        let (mut items, snaps, internal, legacy) = prepared();
        ann::set(&mut items[0], ann::PATH, "b.yaml");
        ann::set(&mut items[0], ann::LEGACY_PATH, "c.yaml");
        let e = reconcile_item(&mut items[0], &snaps, internal, legacy).unwrap_err();
        assert_eq!(
            e,
            "resource input to function has mismatched legacy and internal path annotations"
        );
    }

    #[test]
    fn reconcile_drops_forms_the_input_did_not_use_and_an_emptied_map() {
        // The input used the legacy forms only.
        let mut items = vec![json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "a", "annotations": {
                ann::LEGACY_PATH: "a.yaml", ann::LEGACY_INDEX: "0",
            }},
        })];
        let (snaps, internal, legacy) = prepare_annotations(&mut items).unwrap();
        assert!(!internal && legacy);
        fill_twins(&mut items[0]);
        reconcile_item(&mut items[0], &snaps, internal, legacy).unwrap();
        assert_eq!(
            ann::annotations(&items[0])
                .unwrap()
                .keys()
                .collect::<Vec<_>>(),
            [ann::LEGACY_PATH, ann::LEGACY_INDEX]
        );
        // Nothing left but forms to drop and the migration id: the map goes too.
        let mut items = vec![json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "a", "annotations": {ann::LEGACY_PATH: "a.yaml"}},
        })];
        let (snaps, internal, legacy) = prepare_annotations(&mut items).unwrap();
        ann::remove_all(&mut items[0], &[ann::LEGACY_PATH]);
        reconcile_item(&mut items[0], &snaps, internal, legacy).unwrap();
        assert_eq!(items[0]["metadata"], json!({"name": "a"}));
        // A map that was empty before is kept.
        let mut item = json!({"metadata": {"name": "a", "annotations": {}}});
        reconcile_item(&mut item, &[], true, true).unwrap();
        assert_eq!(item["metadata"], json!({"name": "a", "annotations": {}}));
    }

    #[test]
    fn sync_order_restores_input_key_order() {
        let from = json!({"a": 1, "b": {"x": 1, "y": 2}, "c": [{"p": 1, "q": 2}]});
        let mut to = json!({"c": [{"q": 2, "p": 1}], "new": 0, "b": {"y": 2, "x": 1}, "a": 1});
        sync_order(&from, &mut to);
        assert_eq!(
            serde_json::to_string(&to).unwrap(),
            r#"{"a":1,"b":{"x":1,"y":2},"c":[{"p":1,"q":2}],"new":0}"#
        );
        // Same keys in the same order at the top, reordered below.
        let mut to = json!({"a": 2, "b": {"y": 2, "x": 1}, "c": [{"q": 2, "p": 1}]});
        sync_order(&from, &mut to);
        assert_eq!(
            serde_json::to_string(&to).unwrap(),
            r#"{"a":2,"b":{"x":1,"y":2},"c":[{"p":1,"q":2}]}"#
        );
    }

    #[test]
    fn sync_order_keeps_new_keys_between_kept_ones_in_order() {
        let from = json!({"a": 1, "b": {"x": 1, "y": 2}, "c": 3});
        let mut to = json!({"n": 0, "a": 1, "m": 0, "b": {"y": 2, "z": 0, "x": 1}, "c": 3});
        sync_order(&from, &mut to);
        assert_eq!(
            serde_json::to_string(&to).unwrap(),
            r#"{"n":0,"a":1,"m":0,"b":{"x":1,"y":2,"z":0},"c":3}"#
        );
        let mut swapped = json!({"c": 3, "n": 0, "a": 1});
        sync_order(&from, &mut swapped);
        assert_eq!(
            serde_json::to_string(&swapped).unwrap(),
            r#"{"a":1,"c":3,"n":0}"#
        );
    }
}
