//! kpt's Config Connector attribution: after a successful render, every
//! Config Connector object (an `apiVersion` holding `.cnrm.`, e.g.
//! `storage.cnrm.cloud.google.com/v1beta1`) gets the annotation
//! `cnrm.cloud.google.com/blueprint`, recording that `kpt fn` rendered it.
//!
//! The rule mirrors kpt v1.0.0-beta.54 (`internal/util/attribution`, called
//! by `internal/util/render/executor.go` once the pipelines passed, on
//! every object of the package tree, before it writes them in place or to
//! `-o`): objects without `metadata`, or with an empty one, are left alone;
//! the value is `kpt-fn` when there is none, `<value>,kpt-fn` when the value
//! holds no `kpt-`, and otherwise the value with each of its
//! comma-separated parts holding `kpt` rewritten to name the groups it
//! named plus `fn` (`kpt-pkg` → `kpt-pkg-fn`). A new annotation is written
//! single-quoted (kyaml's `SetAnnotation`), an existing one in the style it
//! had (kyaml's `FieldSetter`; kyaml also drops a comment on that line,
//! which we keep: the book's differences page lists it). kpt's opt-out is the
//! environment variable `KPT_DISABLE_ATTRIBUTION` set to anything
//! non-empty; the CLI reads it ([`RenderOptions::attribution`]).
//!
//! [`RenderOptions::attribution`]: super::RenderOptions::attribution

use std::sync::Arc;

use serde_json::{Map, Value};

use super::source::{ObjectText, TextMap, root_keys};
use crate::domain::codec::preserve::{restyled_at, scalar_style_at};
use crate::domain::codec::tree::{Style, YamlDoc};

/// The annotation kpt records its use in (kpt's `CNRMMetricsAnnotation`).
pub const ATTRIBUTION_ANNOTATION: &str = "cnrm.cloud.google.com/blueprint";

/// The environment variable that turns the attribution off when set to a
/// non-empty value (kpt's `DisableKptAttributionEnvVariable`).
pub const DISABLE_ATTRIBUTION_ENV: &str = "KPT_DISABLE_ATTRIBUTION";

/// The command group `render` records (kpt's `CmdGroup` of `fn render`).
const GROUP: &str = "fn";

/// The annotation's new value: `current` with `kpt-<group>` recorded, by
/// kpt's `recordAction` rule (see the module docs). `group` is one of
/// `pkg`, `fn`, `live`.
///
/// ```
/// use krm_fn_runner::domain::render::attribution::record_action;
/// assert_eq!(record_action("", "fn"), "kpt-fn");
/// assert_eq!(record_action("cnrm/acm/v0.1.1", "fn"), "cnrm/acm/v0.1.1,kpt-fn");
/// assert_eq!(record_action("cnrm/x,kpt-pkg,other", "fn"), "cnrm/x,kpt-pkg-fn,other");
/// ```
pub fn record_action(current: &str, group: &str) -> String {
    if current.is_empty() {
        return format!("kpt-{group}");
    }
    if !current.contains("kpt-") {
        return format!("{current},kpt-{group}");
    }
    // kpt builds the new part in one list for the whole value: a second
    // part naming kpt gets the first one's groups before its own.
    let mut groups = vec!["kpt"];
    current
        .split(',')
        .map(|part| {
            if !part.contains("kpt") {
                return part.to_string();
            }
            for g in ["pkg", "fn", "live"] {
                if part.contains(g) || group == g {
                    groups.push(g);
                }
            }
            groups.join("-")
        })
        .collect::<Vec<_>>()
        .join(",")
}

/// True for a Config Connector object with a non-empty `metadata` mapping:
/// the objects kpt attributes.
fn attributed(item: &Value) -> bool {
    item.get("apiVersion")
        .and_then(Value::as_str)
        .is_some_and(|v| v.contains(".cnrm."))
        && item
            .get("metadata")
            .and_then(Value::as_object)
            .is_some_and(|m| !m.is_empty())
}

/// An annotation's value as kyaml's `GetAnnotations` reads it (a scalar's
/// text; empty when absent or null).
fn scalar_text(value: Option<&Value>) -> String {
    match value {
        None | Some(Value::Null) => String::new(),
        Some(Value::String(s)) => s.clone(),
        Some(other) => other.to_string(),
    }
}

/// Records the attribution on `item` when kpt would (see the module
/// docs); returns whether it did. Objects whose `metadata.annotations` is
/// there but not a mapping are left alone (kyaml fails to set it there, and
/// kpt ignores the failure).
pub fn attribute(item: &mut Value) -> bool {
    if !attributed(item) {
        return false;
    }
    let Some(meta) = item.get_mut("metadata").and_then(Value::as_object_mut) else {
        return false;
    };
    let annotations = meta
        .entry("annotations")
        .or_insert_with(|| Value::Object(Map::new()));
    if annotations.is_null() {
        *annotations = Value::Object(Map::new());
    }
    let Some(annotations) = annotations.as_object_mut() else {
        return false;
    };
    let value = record_action(&scalar_text(annotations.get(ATTRIBUTION_ANNOTATION)), GROUP);
    annotations.insert(ATTRIBUTION_ANNOTATION.to_string(), Value::String(value));
    true
}

/// Attributes every object of a rendered package tree (`items`, paths
/// relative to the root) and, when the render keeps texts, gives each
/// attributed object a text holding the annotation as kpt writes it
/// (single-quoted when new, else in its own style): the package writer
/// takes the annotation's text from it, and the rest of the object keeps
/// its text.
pub(crate) fn attribute_all(items: &mut [Value], texts: Option<&mut TextMap>) {
    let Some(texts) = texts else {
        for item in items.iter_mut() {
            attribute(item);
        }
        return;
    };
    // Most packages hold no Config Connector object: then nothing is keyed
    // or copied.
    if !items.iter().any(attributed) {
        return;
    }
    let keys = root_keys(items.iter(), |_| String::new());
    let mut added = Vec::new();
    for (item, key) in items.iter_mut().zip(keys) {
        if !attributed(item) {
            continue;
        }
        let before = item.clone();
        if !attribute(item) {
            continue;
        }
        let Some(key) = key else {
            continue;
        };
        let known = texts.get(&key).cloned().unwrap_or_default();
        // kyaml writes a new annotation single-quoted and an existing one
        // in the style it had.
        let style = scalar_style_at(&known.text_for(&cleaned(before)), &ANNOTATION_PATH)
            .unwrap_or(Style::SingleQuoted);
        let text = known.text_for(&cleaned(item.clone()));
        let text = restyled_at(&text, &ANNOTATION_PATH, style).unwrap_or(text);
        if let Ok(doc) = YamlDoc::parse(text) {
            added.push((
                key,
                ObjectText {
                    origin: known.origin,
                    wire: Some(Arc::new(doc)),
                },
            ));
        }
    }
    texts.update(&[], added);
}

/// Where the annotation sits in an object.
const ANNOTATION_PATH: [&str; 3] = ["metadata", "annotations", ATTRIBUTION_ANNOTATION];

/// `item` without the package reader's annotations (as the writer writes it).
fn cleaned(mut item: Value) -> Value {
    super::annotations::remove_all(&mut item, &super::annotations::READER_ANNOTATIONS);
    item
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn record_action_follows_kpts_rule() {
        for (current, group, expected) in [
            ("", "fn", "kpt-fn"),
            ("cnrm/acm/v0.1.1", "fn", "cnrm/acm/v0.1.1,kpt-fn"),
            ("kpt-fn", "fn", "kpt-fn"),
            ("cnrm/x,kpt-fn", "fn", "cnrm/x,kpt-fn"),
            ("cnrm/x,kpt-pkg", "fn", "cnrm/x,kpt-pkg-fn"),
            ("kpt-live,cnrm/x", "fn", "kpt-fn-live,cnrm/x"),
            (
                "cnrm/landing-zone:networking/v0.4.0,kpt-pkg,blueprints_controller",
                "fn",
                "cnrm/landing-zone:networking/v0.4.0,kpt-pkg-fn,blueprints_controller",
            ),
            // A part naming kpt without a dash is rewritten too once the
            // value holds `kpt-` somewhere, and a second such part starts
            // from the first one's groups (kpt's rule, one list for all).
            ("kpt,kpt-pkg", "fn", "kpt-fn,kpt-fn-pkg-fn"),
            ("kpt", "fn", "kpt,kpt-fn"),
        ] {
            assert_eq!(record_action(current, group), expected, "{current:?}");
        }
    }

    #[test]
    fn only_config_connector_objects_with_metadata_are_attributed() {
        let mut bucket = json!({"apiVersion": "storage.cnrm.cloud.google.com/v1beta1",
            "kind": "StorageBucket", "metadata": {"name": "b"}});
        assert!(attribute(&mut bucket));
        assert_eq!(
            bucket["metadata"]["annotations"][ATTRIBUTION_ANNOTATION],
            "kpt-fn"
        );
        let mut existing = json!({"apiVersion": "iam.cnrm.cloud.google.com/v1beta1",
            "kind": "IAMPolicyMember",
            "metadata": {"name": "m", "annotations": {ATTRIBUTION_ANNOTATION: "cnrm/acm/v0.1.1"}}});
        assert!(attribute(&mut existing));
        assert_eq!(
            existing["metadata"]["annotations"][ATTRIBUTION_ANNOTATION],
            "cnrm/acm/v0.1.1,kpt-fn"
        );
        for mut other in [
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}}),
            json!({"apiVersion": "storage.cnrm.cloud.google.com/v1beta1", "kind": "StorageBucket"}),
            json!({"apiVersion": "storage.cnrm.cloud.google.com/v1beta1", "kind": "StorageBucket", "metadata": {}}),
            json!({"apiVersion": "cnrm.cloud.google.com/v1", "kind": "X", "metadata": {"name": "x"}}),
            json!({"apiVersion": "storage.cnrm.cloud.google.com/v1beta1", "kind": "StorageBucket",
                "metadata": {"name": "b", "annotations": ["not", "a", "mapping"]}}),
        ] {
            let before = other.clone();
            assert!(!attribute(&mut other), "{before}");
            assert_eq!(other, before);
        }
    }

    /// Renders `text` (one document at `b.yaml`) through [`attribute_all`]
    /// and returns what the writer writes for it.
    fn written(text: &str) -> String {
        use crate::domain::render::source::SourceMap;
        let mut sources = SourceMap::new();
        sources.insert("b.yaml", 0, YamlDoc::parse(text).unwrap());
        let mut texts = TextMap::from_sources(&sources);
        let mut items = vec![YamlDoc::parse(text).unwrap().into_value()];
        items[0]["metadata"]["annotations"]["config.kubernetes.io/path"] = json!("b.yaml");
        items[0]["metadata"]["annotations"]["config.kubernetes.io/index"] = json!("0");
        attribute_all(&mut items, Some(&mut texts));
        let key = ("b.yaml".to_string(), 0);
        texts.text_for(Some(&key), &cleaned(items[0].clone()))
    }

    #[test]
    fn a_new_annotation_is_written_single_quoted_and_the_rest_kept() {
        let text = "# head\napiVersion: storage.cnrm.cloud.google.com/v1beta1\nkind: StorageBucket\nmetadata:\n  name: b # kept\nspec:\n  location: US\n";
        assert_eq!(
            written(text),
            text.replace(
                "  name: b # kept\n",
                "  name: b # kept\n  annotations:\n    cnrm.cloud.google.com/blueprint: 'kpt-fn'\n"
            )
        );
    }

    #[test]
    fn an_existing_annotation_keeps_its_style_and_its_comment() {
        for (before, after) in [
            (
                "cnrm/x # the blueprint's",
                "cnrm/x,kpt-fn # the blueprint's",
            ),
            ("\"cnrm/x\"", "\"cnrm/x,kpt-fn\""),
            ("'cnrm/x'", "'cnrm/x,kpt-fn'"),
        ] {
            let text = format!(
                "apiVersion: storage.cnrm.cloud.google.com/v1beta1\nkind: StorageBucket\nmetadata:\n  name: b\n  annotations:\n    cnrm.cloud.google.com/blueprint: {before}\nspec:\n  location: US\n"
            );
            assert_eq!(written(&text), text.replace(before, after), "{before}");
        }
    }
}
