//! The text of each object through a render, so that what a render writes —
//! and what it hands to functions — keeps the package's look and what the
//! functions wrote.
//!
//! kpt gets this from kyaml nodes; here objects are JSON values, so the
//! render keeps, for each object, two parsed documents
//! ([`crate::domain::codec::tree::YamlDoc`]):
//!
//! - its **origin**: the document as read from the package (recorded by the
//!   package reader in a [`SourceMap`] under its root-relative path and
//!   index);
//! - its **wire** text: the text the last function that changed it wrote
//!   for it (comments it added, scalars as it spelled them).
//!
//! A function's input is the wire text (else the origin) edited to the
//! object's current value, so functions that read comments
//! (`apply-setters` and `list-setters` read `# kpt-set:`) see them, and a
//! function that writes what it read gets back byte for byte what it sent —
//! the runtime then skips parsing it. What is written to the package is
//! the origin edited to the final value, changed parts taken from the wire
//! text ([`crate::domain::codec::preserve::merge`]); files a render did not
//! change are written back byte for byte.

use foldhash::{HashMap, HashMapExt};
use std::borrow::Cow;
use std::sync::Arc;

use rayon::prelude::*;
use serde_json::Value;

use super::annotations as ann;
use crate::domain::codec::tree::YamlDoc;
use crate::domain::codec::value::same;
use crate::domain::codec::{self, emit, preserve};

/// Root-relative path and index of a document.
pub type DocKey = (String, usize);

/// Documents of a package as read, by root-relative path and index (kpt's
/// `internal.config.kubernetes.io/path` / `index` values).
#[derive(Debug, Default, Clone, PartialEq)]
pub struct SourceMap {
    docs: HashMap<DocKey, Arc<YamlDoc>>,
}

impl SourceMap {
    /// An empty map.
    pub fn new() -> Self {
        Self::default()
    }

    /// Records the document at `path` (root-relative, slash-separated) and
    /// `index` (0-based among the file's non-empty documents).
    pub fn insert(&mut self, path: impl Into<String>, index: usize, doc: YamlDoc) {
        self.docs.insert((path.into(), index), Arc::new(doc));
    }

    /// The document at `path`/`index`, if one was read there.
    pub fn get(&self, path: &str, index: usize) -> Option<&Arc<YamlDoc>> {
        self.docs.get(&(path.to_string(), index))
    }

    /// Number of documents recorded.
    pub fn len(&self) -> usize {
        self.docs.len()
    }

    /// True when no document is recorded.
    pub fn is_empty(&self) -> bool {
        self.docs.is_empty()
    }
}

/// What a render knows about one object's text.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ObjectText {
    /// The document as read from the package, when the object was read.
    pub origin: Option<Arc<YamlDoc>>,
    /// The text a function last wrote for the object (its value includes
    /// the annotations the function saw), when one did.
    pub wire: Option<Arc<YamlDoc>>,
}

impl ObjectText {
    /// The text a function gets: the wire text, else the origin.
    pub fn base(&self) -> Option<&Arc<YamlDoc>> {
        self.wire.as_ref().or(self.origin.as_ref())
    }

    /// YAML text for `target` (one document, ending with a line break):
    /// the origin edited to `target`, changed parts and the comments a
    /// function wrote taken from the wire text; the wire text alone for an
    /// object a function generated; emitted in kpt's style when there is
    /// no text at all. Never fails for values read from YAML.
    pub fn text_for(&self, target: &Value) -> String {
        let out = match (&self.origin, &self.wire) {
            (Some(o), w) => preserve::merge(o, w.as_deref(), target),
            (None, Some(w)) => preserve::merge(w, None, target),
            (None, None) => return emit_document(target),
        };
        out.map(with_newline)
            .unwrap_or_else(|_| emit_document(target))
    }

    /// The text a function gets for an object whose current value is
    /// `item`: the base text when it already reads as `item`, else the base
    /// edited to `item`.
    pub fn input_text(&self, item: &Value) -> Arc<str> {
        match self.base() {
            Some(b) if same(b.value(), item) => b.shared_text(),
            Some(b) => preserve::merge(b, None, item)
                .map(|t| Arc::from(with_newline(t)))
                .unwrap_or_else(|_| emit_document(item).into()),
            None => emit_document(item).into(),
        }
    }
}

/// The texts of every object of a render, by the object's current
/// root-relative key; updated after each function call.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TextMap {
    objects: HashMap<DocKey, ObjectText>,
}

impl TextMap {
    /// The map at the start of a render: every document read is its own origin.
    pub fn from_sources(sources: &SourceMap) -> Self {
        Self {
            objects: sources
                .docs
                .iter()
                .map(|(k, d)| {
                    (
                        k.clone(),
                        ObjectText {
                            origin: Some(d.clone()),
                            wire: None,
                        },
                    )
                })
                .collect(),
        }
    }

    /// The texts of the object at `key`.
    pub fn get(&self, key: &DocKey) -> Option<&ObjectText> {
        self.objects.get(key)
    }

    /// Replaces the entries at `removed` with `added` (a function call moved,
    /// changed, created or deleted objects).
    pub fn update(&mut self, removed: &[DocKey], added: Vec<(DocKey, ObjectText)>) {
        for k in removed {
            self.objects.remove(k);
        }
        self.objects.extend(added);
    }

    /// The text for the object at `key` (see [`root_keys`]) as `target`
    /// (the text of an unknown object is emitted); see [`ObjectText::text_for`].
    pub fn text_for(&self, key: Option<&DocKey>, target: &Value) -> String {
        match key.and_then(|k| self.objects.get(k)) {
            Some(t) => t.text_for(target),
            None => emit_document(target),
        }
    }
}

/// The texts a runtime serialises a call's items with, one per item
/// (`None`: no text known, the item is emitted).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CallSources {
    /// Per input item, its texts.
    pub texts: Vec<Option<ObjectText>>,
    /// The function's output is only checked, never written: a validator's
    /// (kpt checks its objects' ids, annotations, paths and KRM shape, then
    /// discards them). Each changed output item is then read without its
    /// text and with only what those checks look at — `apiVersion`, `kind`
    /// and `metadata` — in its value; the rest of it is read for its syntax
    /// only ([`crate::domain::codec::tree::parse_identity`]).
    pub checked_only_output: bool,
}

impl CallSources {
    /// As [`Self::input_texts`], each text read as a document (a base that
    /// already reads as the item is shared, not read again); `None` when an
    /// edited text does not read back.
    pub fn input_docs(&self, items: &[Value]) -> Option<Vec<Arc<YamlDoc>>> {
        items
            .par_iter()
            .enumerate()
            .map(|(i, item)| {
                let text = match self.texts.get(i).and_then(Option::as_ref) {
                    Some(t) => match t.base() {
                        Some(b) if same(b.value(), item) => return Some(b.clone()),
                        _ => t.input_text(item),
                    },
                    None => Arc::from(emit_document(item)),
                };
                YamlDoc::parse(text).ok().map(Arc::new)
            })
            .collect()
    }

    /// The document text of every item of `items` as a function gets it
    /// (formatted in parallel on rayon's pool).
    pub fn input_texts(&self, items: &[Value]) -> Vec<Arc<str>> {
        items
            .par_iter()
            .enumerate()
            .map(
                |(i, item)| match self.texts.get(i).and_then(Option::as_ref) {
                    Some(t) => t.input_text(item),
                    None => Arc::from(emit_document(item)),
                },
            )
            .collect()
    }
}

/// The root-relative key of an object whose path annotation is relative to
/// the package directory `dir` ("" for the root).
pub fn root_key(dir: &str, item: &Value) -> Option<DocKey> {
    let path = ann::path(item)?;
    let index = ann::index(item)?.parse().ok()?;
    Some((root_path(dir, &path), index))
}

/// The root-relative form of `path`, relative to the package directory
/// `dir` ("" for the root).
fn root_path(dir: &str, path: &str) -> String {
    let path = ann::cleaned(path);
    let path = path.trim_start_matches('/');
    if dir.is_empty() && matches!(ann::cleaned(path), Cow::Borrowed(_)) {
        // Clean already: the common case, one copy.
        path.to_string()
    } else {
        ann::join_path(&[dir, path])
    }
}

/// The keys of `items` (in order) under their package directories
/// (`dir_of`; "" for objects with root-relative paths). An object a
/// function generated without an index (kpt numbers those when it writes
/// the file) is keyed by its path and its rank among such objects with that
/// path, counted down from `usize::MAX`, so its text follows it from call
/// to call and into the file.
pub fn root_keys<'v>(
    items: impl IntoIterator<Item = &'v Value>,
    dir_of: impl Fn(&Value) -> String,
) -> Vec<Option<DocKey>> {
    let mut unindexed: HashMap<String, usize> = HashMap::new();
    items
        .into_iter()
        .map(|item| {
            let dir = dir_of(item);
            let dir = dir.as_str();
            if let Some(key) = root_key(dir, item) {
                return Some(key);
            }
            if ann::index(item).is_some() {
                return None;
            }
            let path = root_path(dir, &ann::path(item)?);
            let rank = unindexed.entry(path.clone()).or_default();
            *rank += 1;
            Some((path, usize::MAX - (*rank - 1)))
        })
        .collect()
}

/// A value as a new document in kpt's style (compact sequences).
pub fn emit_document(item: &Value) -> String {
    let text = emit::document(item, emit::SeqIndent::Compact);
    if codec::tree::parse_value(&text).is_ok_and(|v| &v == item) {
        text
    } else {
        with_newline(codec::to_yaml_string(item).unwrap_or_else(|_| item.to_string()))
    }
}

fn with_newline(text: String) -> String {
    codec::terminate::with_final_newline(text)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const CM: &str = "# settings\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cm # keep\ndata:\n  a: '1'\n";

    fn origin() -> ObjectText {
        ObjectText {
            origin: Some(Arc::new(YamlDoc::parse(CM).unwrap())),
            wire: None,
        }
    }

    #[test]
    fn changed_objects_keep_their_comments_and_unknown_ones_are_emitted() {
        let t = origin();
        let mut v = t.origin.as_ref().unwrap().value().clone();
        assert_eq!(t.text_for(&v), CM);
        v["metadata"]["namespace"] = "prod".into();
        let text = t.text_for(&v);
        assert!(text.starts_with("# settings\n"));
        assert!(text.contains("name: cm # keep\n  namespace: prod\n"));
        let unknown = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "new"}});
        assert_eq!(
            ObjectText::default().text_for(&unknown),
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: new\n"
        );
    }

    #[test]
    fn the_wire_text_brings_what_a_function_wrote() {
        let mut t = origin();
        let wire =
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cm\ndata:\n  a: '2' # set by fn\n";
        t.wire = Some(Arc::new(YamlDoc::parse(wire).unwrap()));
        let target = t.wire.as_ref().unwrap().value().clone();
        assert_eq!(
            t.text_for(&target),
            CM.replace("a: '1'", "a: '2' # set by fn")
        );
        assert_eq!(&*t.input_text(&target), wire);
    }

    #[test]
    fn keys_join_the_package_directory() {
        let item = json!({"metadata": {"annotations": {
            "internal.config.kubernetes.io/path": "./cm.yaml",
            "internal.config.kubernetes.io/index": "0"}}});
        assert_eq!(root_key("app", &item), Some(("app/cm.yaml".into(), 0)));
        assert_eq!(root_key("", &item), Some(("cm.yaml".into(), 0)));
    }

    #[test]
    fn objects_without_an_index_are_keyed_by_rank() {
        let at = |path: &str| {
            json!({"metadata": {"annotations": {
            "internal.config.kubernetes.io/path": path}}})
        };
        let items = [at("a.yaml"), at("b.yaml"), at("a.yaml")];
        assert_eq!(
            root_keys(&items, |_| "sub".into()),
            [
                Some(("sub/a.yaml".into(), usize::MAX)),
                Some(("sub/b.yaml".into(), usize::MAX)),
                Some(("sub/a.yaml".into(), usize::MAX - 1)),
            ]
        );
    }
}
