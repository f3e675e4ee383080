//! The annotations kpt and kyaml use to track objects through a render, and
//! small helpers to read and write annotations on JSON objects.
//!
//! Keys and meanings: `krm-functions.md` §1.6. Values are strings; a function
//! that writes a number (`internal.config.kubernetes.io/index: 0`, as YAML
//! allows) is read as its decimal text, as kyaml reads scalar nodes.

use std::borrow::Cow;

use serde_json::{Map, Value};

use crate::domain::codec::value;

/// File path of an object, relative to the package that owns it (kyaml).
pub const PATH: &str = "internal.config.kubernetes.io/path";
/// Legacy twin of [`PATH`]; still read and written.
pub const LEGACY_PATH: &str = "config.kubernetes.io/path";
/// 0-based position of the object in its file.
pub const INDEX: &str = "internal.config.kubernetes.io/index";
/// Legacy twin of [`INDEX`].
pub const LEGACY_INDEX: &str = "config.kubernetes.io/index";
/// 1-based id stamped on every input object of one call to match outputs to inputs.
pub const ID: &str = "internal.config.kubernetes.io/id";
/// Legacy twin of [`ID`].
pub const LEGACY_ID: &str = "config.k8s.io/id";
/// Sequence indentation style recorded by the package reader (`compact` / `wide`).
pub const SEQ_INDENT: &str = "internal.config.kubernetes.io/seqindent";
/// Per-call id kyaml uses to reconcile legacy and internal annotations.
pub const MIGRATION_ID: &str = "internal.config.kubernetes.io/annotations-migration-resource-id";
/// Package that owns the object (kpt only); stripped before writing.
pub const PACKAGE_PATH: &str = "internal.config.kubernetes.io/package-path";
/// 0-based ids kpt stamps before a step with selectors, to merge the
/// filtered output back; removed after the step.
pub const RESOURCE_ID: &str = "internal.config.kubernetes.io/kpt-resource-id";
/// Marks client-side-only objects (`"true"`).
pub const LOCAL_CONFIG: &str = "config.kubernetes.io/local-config";
/// Root Kptfile annotation selecting breadth-first (top-down) rendering.
pub const BFS_RENDERING: &str = "kpt.dev/bfs-rendering";
/// Root Kptfile annotation asking to keep partially rendered resources on failure.
pub const SAVE_ON_RENDER_FAILURE: &str = "kpt.dev/save-on-render-failure";

/// The value at `key` in `map` (small maps searched key by key).
fn field<'a>(map: &'a Map<String, Value>, key: &str) -> Option<&'a Value> {
    value::get(map, key)
}

/// The annotation map of `item`, if it has one.
pub fn annotations(item: &Value) -> Option<&Map<String, Value>> {
    let meta = field(item.as_object()?, "metadata")?.as_object()?;
    field(meta, "annotations")?.as_object()
}

/// The value of annotation `key` on `item`, scalars rendered as text.
pub fn get(item: &Value, key: &str) -> Option<String> {
    scalar_text(field(annotations(item)?, key)?)
}

/// The value of annotation `key` on `item` as [`get`] reads it, borrowed
/// when it is a string (no copy: the render reads a few annotations of
/// every object at every step).
pub fn get_text<'a>(item: &'a Value, key: &str) -> Option<Cow<'a, str>> {
    text_in(annotations(item)?, key)
}

/// The value of annotation `key` in the annotation map `annos`, as
/// [`get_text`] reads it.
pub fn text_in<'a>(annos: &'a Map<String, Value>, key: &str) -> Option<Cow<'a, str>> {
    match field(annos, key)? {
        Value::String(s) => Some(Cow::Borrowed(s)),
        v => scalar_text(v).map(Cow::Owned),
    }
}

/// Text of a scalar value: strings as-is, numbers and booleans in decimal /
/// `true`/`false`; `None` for null, sequences and maps.
pub fn scalar_text(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

/// The annotation map of `item`, to change, if it has one.
pub fn annotations_mut(item: &mut Value) -> Option<&mut Map<String, Value>> {
    value::get_mut(metadata_mut(item)?, "annotations")?.as_object_mut()
}

/// Sets annotation `key` to `value` on `item`, creating `metadata` and
/// `metadata.annotations` when missing. Does nothing when `item` or its
/// `metadata` is not a map (such an object is not KRM and fails the checks).
pub fn set(item: &mut Value, key: &str, value: impl Into<String>) {
    let text = Value::String(value.into());
    if let Some(annos) = annotations_mut(item) {
        set_in(annos, key, text);
        return;
    }
    let Some(obj) = item.as_object_mut() else {
        return;
    };
    let meta = obj
        .entry("metadata")
        .or_insert_with(|| Value::Object(Map::new()));
    let Some(meta) = meta.as_object_mut() else {
        return;
    };
    let annos = meta
        .entry("annotations")
        .or_insert_with(|| Value::Object(Map::new()));
    if annos.is_null() {
        *annos = Value::Object(Map::new());
    }
    if let Some(annos) = annos.as_object_mut() {
        annos.insert(key.to_string(), text);
    }
}

/// Sets `key` to `value` in the annotation map `annos`, found by the same
/// small-map search as [`get_text`] (no key copy when it is already there).
pub fn set_in(annos: &mut Map<String, Value>, key: &str, value: Value) {
    match value::get_mut(annos, key) {
        Some(slot) => *slot = value,
        None => {
            annos.insert(key.to_string(), value);
        }
    }
}

/// Removes annotation `key` from `item`; an annotation map left empty is
/// removed too (kyaml clears empty annotation maps).
pub fn remove(item: &mut Value, key: &str) {
    remove_all(item, &[key]);
}

/// Annotations the package reader adds to every object and the writer
/// removes (kpt's path, index, id and sequence-indent annotations, current
/// and legacy names).
pub const READER_ANNOTATIONS: [&str; 7] = [
    PATH,
    LEGACY_PATH,
    INDEX,
    LEGACY_INDEX,
    SEQ_INDENT,
    ID,
    LEGACY_ID,
];

/// Removes every annotation in `keys` from `item`, then an empty annotation map.
pub fn remove_all(item: &mut Value, keys: &[&str]) {
    if let Some(meta) = metadata_mut(item) {
        remove_in(meta, |k| keys.contains(&k));
    }
}

/// The `metadata` map of `item`, to change, if it has one.
pub fn metadata_mut(item: &mut Value) -> Option<&mut Map<String, Value>> {
    value::get_mut(item.as_object_mut()?, "metadata")?.as_object_mut()
}

/// Removes the annotations whose key `drop` picks from the `metadata` map
/// `meta`; an annotation map this leaves empty is removed too (kyaml clears
/// empty annotation maps; one that was empty already stays).
pub fn remove_in(meta: &mut Map<String, Value>, drop: impl Fn(&str) -> bool) {
    let Some(annos) = value::get_mut(meta, "annotations").and_then(Value::as_object_mut) else {
        return;
    };
    let before = annos.len();
    annos.retain(|k, _| !drop(k));
    if annos.len() != before && annos.is_empty() {
        meta.shift_remove("annotations");
    }
}

/// The object's file path: the internal annotation, else the legacy one
/// (borrowed when it is a string).
pub fn path(item: &Value) -> Option<Cow<'_, str>> {
    either(item, PATH, LEGACY_PATH)
}

/// The object's index in its file as text: internal annotation, else legacy
/// (borrowed when it is a string).
pub fn index(item: &Value) -> Option<Cow<'_, str>> {
    either(item, INDEX, LEGACY_INDEX)
}

/// Annotation `key` of `item`, else `legacy`, as [`get_text`] reads it.
fn either<'a>(item: &'a Value, key: &str, legacy: &str) -> Option<Cow<'a, str>> {
    let annos = annotations(item)?;
    let text = |v: &'a Value| match v {
        Value::String(s) => Some(Cow::Borrowed(s.as_str())),
        v => scalar_text(v).map(Cow::Owned),
    };
    match field(annos, key).and_then(text) {
        Some(t) => Some(t),
        None => field(annos, legacy).and_then(text),
    }
}

/// Sets both forms of the path annotation.
pub fn set_path(item: &mut Value, path: &str) {
    set(item, PATH, path);
    set(item, LEGACY_PATH, path);
}

/// A string field at `pointer` (JSON pointer, e.g. `/metadata/name`), or "".
pub fn str_at<'a>(item: &'a Value, pointer: &str) -> &'a str {
    item.pointer(pointer).and_then(Value::as_str).unwrap_or("")
}

/// The string at `path` (map keys from the top level), or "": a
/// [`str_at`] without parsing a pointer (which copies each of its parts).
fn str_in<'a>(item: &'a Value, path: &[&str]) -> &'a str {
    let mut at = item;
    for key in path {
        match at.as_object().and_then(|m| field(m, key)) {
            Some(v) => at = v,
            None => return "",
        }
    }
    at.as_str().unwrap_or("")
}

/// `apiVersion` of an object, or "".
pub fn api_version(item: &Value) -> &str {
    str_in(item, &["apiVersion"])
}

/// `kind` of an object, or "".
pub fn kind(item: &Value) -> &str {
    str_in(item, &["kind"])
}

/// `metadata.name` of an object, or "".
pub fn name(item: &Value) -> &str {
    str_in(item, &["metadata", "name"])
}

/// `metadata.namespace` of an object, or "".
pub fn namespace(item: &Value) -> &str {
    str_in(item, &["metadata", "namespace"])
}

/// True when the object carries `config.kubernetes.io/local-config` with a
/// value other than empty or `"false"` (the functions SDK's rule).
pub fn is_local_config(item: &Value) -> bool {
    get(item, LOCAL_CONFIG).is_some_and(|v| !v.is_empty() && v != "false")
}

/// kpt's `ToCondition(value) == True`: the value is `true` in any letter case.
pub fn is_true(value: Option<&str>) -> bool {
    value.is_some_and(|v| v.eq_ignore_ascii_case("true"))
}

/// Cleans a slash-separated path like Go's `path.Clean`: removes `.`
/// segments, resolves `..` against earlier segments, collapses `//`; `""`
/// becomes `"."`. Leading `..` segments of a relative path are kept.
pub fn clean_path(p: &str) -> String {
    cleaned(p).into_owned()
}

/// [`clean_path`], borrowing `p` when it is clean already (the common case:
/// the paths a reader writes are).
pub fn cleaned(p: &str) -> Cow<'_, str> {
    if is_clean(p) {
        Cow::Borrowed(p)
    } else {
        Cow::Owned(clean_slow(p))
    }
}

/// [`cleaned`] for a path annotation's text ([`path`]): borrowed from the
/// object when the text is borrowed and clean.
pub fn cleaned_text<'a>(p: &Cow<'a, str>) -> Cow<'a, str> {
    match p {
        Cow::Borrowed(s) => cleaned(s),
        Cow::Owned(s) => Cow::Owned(clean_path(s)),
    }
}

/// True when [`clean_path`] would return `p` unchanged: `"/"`, or
/// non-empty segments other than `.` and `..`, joined by single slashes,
/// with no trailing slash (a leading slash allowed).
fn is_clean(p: &str) -> bool {
    if p == "/" {
        return true;
    }
    let relative = p.strip_prefix('/').unwrap_or(p);
    !relative.is_empty()
        && relative
            .split('/')
            .all(|seg| !seg.is_empty() && seg != "." && seg != "..")
}

fn clean_slow(p: &str) -> String {
    let rooted = p.starts_with('/');
    let mut out: Vec<&str> = Vec::new();
    for seg in p.split('/') {
        match seg {
            "" | "." => {}
            ".." => {
                if out.last().is_some_and(|s| *s != "..") {
                    out.pop();
                } else if !rooted {
                    out.push("..");
                }
            }
            s => out.push(s),
        }
    }
    let joined = out.join("/");
    match (rooted, joined.is_empty()) {
        (true, _) => format!("/{joined}"),
        (false, true) => ".".to_string(),
        (false, false) => joined,
    }
}

/// Joins slash-separated path parts like Go's `path.Join` (empty parts skipped, result cleaned).
pub fn join_path(parts: &[&str]) -> String {
    if let [only] = parts {
        return if only.is_empty() {
            String::new()
        } else {
            clean_path(only)
        };
    }
    let nonempty: Vec<&str> = parts.iter().copied().filter(|p| !p.is_empty()).collect();
    if nonempty.is_empty() {
        return String::new();
    }
    clean_path(&nonempty.join("/"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn set_get_remove_round_trip() {
        let mut o = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}});
        set(&mut o, PATH, "a.yaml");
        assert_eq!(get(&o, PATH).as_deref(), Some("a.yaml"));
        assert_eq!(path(&o).as_deref(), Some("a.yaml"));
        remove(&mut o, PATH);
        assert!(o["metadata"].get("annotations").is_none());
    }

    #[test]
    fn numbers_read_as_text_and_legacy_is_a_fallback() {
        let o = json!({"metadata": {"annotations": {LEGACY_INDEX: 2, LEGACY_PATH: "p.yaml"}}});
        assert_eq!(index(&o).as_deref(), Some("2"));
        assert_eq!(path(&o).as_deref(), Some("p.yaml"));
    }

    #[test]
    fn go_path_clean() {
        assert_eq!(clean_path("./a//b/../c"), "a/c");
        assert_eq!(clean_path("../x"), "../x");
        assert_eq!(clean_path("a/../../x"), "../x");
        assert_eq!(clean_path(""), ".");
        assert_eq!(clean_path("/a/../.."), "/");
        assert_eq!(join_path(&["db", "./x.yaml"]), "db/x.yaml");
        assert_eq!(join_path(&["", "x.yaml"]), "x.yaml");
        assert_eq!(join_path(&["./x.yaml"]), "x.yaml");
        assert_eq!(join_path(&[""]), "");
        for p in [
            "a", "a/b", "/", "/a", "a/", "a//b", "./a", "a/.", "..", "../a", "a/..", "", "/..",
            ".a", "a..", "a/.b/c",
        ] {
            assert_eq!(cleaned(p), clean_slow(p), "{p:?}");
        }
        // Paths as a reader writes them are borrowed, not copied.
        for p in [
            "a.yaml",
            "sub/a.yaml",
            ".hidden.yaml",
            "/abs/a.yaml",
            "a..b/c",
        ] {
            assert!(matches!(cleaned(p), Cow::Borrowed(_)), "{p:?}");
        }
    }

    #[test]
    fn fields_of_small_and_large_maps() {
        let mut o = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "x", "namespace": "ns", "annotations": {PATH: "a.yaml"}}});
        assert_eq!(
            (api_version(&o), kind(&o), name(&o), namespace(&o)),
            ("v1", "ConfigMap", "x", "ns")
        );
        for i in 0..2 * crate::domain::codec::value::SCAN_UP_TO {
            set(&mut o, &format!("example.com/a{i}"), i.to_string());
            o[format!("field{i}")] = json!(i);
        }
        assert_eq!(get_text(&o, "example.com/a20").as_deref(), Some("20"));
        assert_eq!(path(&o).as_deref(), Some("a.yaml"));
        assert_eq!((kind(&o), name(&o)), ("ConfigMap", "x"));
        assert_eq!(str_in(&json!({"kind": 1}), &["kind"]), "");
        assert_eq!(name(&json!({"metadata": "x"})), "");
    }

    #[test]
    fn local_config_rule() {
        let mut o = json!({"metadata": {}});
        assert!(!is_local_config(&o));
        set(&mut o, LOCAL_CONFIG, "false");
        assert!(!is_local_config(&o));
        set(&mut o, LOCAL_CONFIG, "true");
        assert!(is_local_config(&o));
        assert!(is_true(Some("TRUE")));
        assert!(!is_true(Some("yes")));
    }
}
