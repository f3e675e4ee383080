//! The text each object of a package was read from, so that what a render
//! writes — and what it hands to functions — keeps the package's comments,
//! key order and sequence style.
//!
//! kpt gets this for free from kyaml nodes; here objects are JSON values, so
//! the package reader records every document's text under its root-relative
//! path and index, and [`SourceMap::format`] turns a (possibly changed)
//! object back into YAML by editing that text
//! ([`crate::domain::codec::preserve::patch_document`]). Functions that read
//! comments (`apply-setters` and `list-setters` read `# kpt-set:`) therefore
//! see them, and files a render did not change are written back byte for
//! byte.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use serde_json::Value;

use super::annotations as ann;
use crate::domain::codec::{self, preserve};

/// One document as read: its text (without `---` separators) and its parsed
/// value (no reader annotations added).
#[derive(Debug, Clone, PartialEq)]
pub struct SourceDoc {
    /// The document's YAML text, comments included.
    pub text: String,
    /// The parsed document.
    pub value: Value,
}

/// Document texts of a package by root-relative path and index (kpt's
/// `internal.config.kubernetes.io/path` / `index` values).
#[derive(Debug, Default)]
pub struct SourceMap {
    docs: HashMap<(String, usize), SourceDoc>,
    /// Documents by `kind` and `metadata.name`, to find an object a
    /// function moved to another file.
    identities: HashMap<(String, String), Vec<DocKey>>,
    /// Last value formatted per document and its text: objects a step did not
    /// change are formatted once per render, not once per step.
    cache: Mutex<HashMap<DocKey, (Value, Arc<str>)>>,
}

/// Root-relative path and index of a document.
type DocKey = (String, usize);

impl Clone for SourceMap {
    fn clone(&self) -> Self {
        Self {
            docs: self.docs.clone(),
            identities: self.identities.clone(),
            cache: Mutex::default(),
        }
    }
}

impl PartialEq for SourceMap {
    /// Same documents (the format cache is not compared).
    fn eq(&self, other: &Self) -> bool {
        self.docs == other.docs
    }
}

impl SourceMap {
    /// An empty map.
    pub fn new() -> Self {
        Self::default()
    }

    /// Records the document at `path` (root-relative, slash-separated) and
    /// `index` (0-based among the file's non-empty documents).
    pub fn insert(&mut self, path: impl Into<String>, index: usize, doc: SourceDoc) {
        let key = (path.into(), index);
        let identity = identity(&doc.value);
        self.identities
            .entry(identity)
            .or_default()
            .push(key.clone());
        self.docs.insert(key, doc);
    }

    /// The document at `path`/`index`, if one was read there.
    pub fn get(&self, path: &str, index: usize) -> Option<&SourceDoc> {
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

    /// YAML text for `item`, which claims to come from the document at `key`
    /// (root-relative path, index).
    ///
    /// When a document was read there and has the same `kind` — or else
    /// when exactly one document has the same `kind` and name (an object a
    /// function moved to another file, which keeps its comments as in kpt) —
    /// its text is edited into `item` (comments and layout kept); otherwise
    /// — a new object, or an edit the editor cannot make faithfully — `item`
    /// is emitted by the codec. Never fails for a JSON value: an
    /// emit failure (impossible for values read from YAML) yields the JSON
    /// text, which is valid YAML too. Output ends with a newline.
    pub fn format(&self, key: Option<(&str, usize)>, item: &Value) -> Arc<str> {
        let at_path = key
            .map(|(path, index)| (path.to_string(), index))
            .filter(|k| {
                self.docs
                    .get(k)
                    .is_some_and(|d| ann::kind(&d.value) == ann::kind(item))
            });
        let key = match at_path {
            Some(k) => k,
            None => match self.identities.get(&identity(item)).map(Vec::as_slice) {
                Some([only]) => only.clone(),
                _ => return emit(item),
            },
        };
        let Some(doc) = self.docs.get(&key) else {
            return emit(item);
        };
        if let Ok(cache) = self.cache.lock()
            && let Some((value, text)) = cache.get(&key)
            && value == item
        {
            return text.clone();
        }
        let text: Arc<str> = match preserve::patch_document(&doc.text, &doc.value, item) {
            Ok(t) => with_newline(t).into(),
            Err(_) => return emit(item),
        };
        if let Ok(mut cache) = self.cache.lock() {
            cache.insert(key, (item.clone(), text.clone()));
        }
        text
    }
}

/// A map shared by a render and the runtimes it calls, with how to find an
/// object's root-relative path.
#[derive(Debug, Clone, PartialEq)]
pub struct CallSources {
    /// The package's documents.
    pub map: Arc<SourceMap>,
    /// Root-relative key (path, index) of each input item of the call, in
    /// item order; `None` for objects not read from the package.
    pub keys: Vec<Option<(String, usize)>>,
}

impl CallSources {
    /// YAML text of input item `i` (see [`SourceMap::format`]).
    pub fn format(&self, i: usize, item: &Value) -> Arc<str> {
        let key = self.keys.get(i).and_then(|k| k.as_ref());
        self.map.format(key.map(|(p, i)| (p.as_str(), *i)), item)
    }
}

/// The root-relative key of an object whose path annotation is relative to
/// the package directory `dir` ("" for the root).
pub fn root_key(dir: &str, item: &Value) -> Option<(String, usize)> {
    let path = ann::path(item)?;
    let index = ann::index(item)?.parse().ok()?;
    let path = ann::clean_path(&path);
    Some((ann::join_path(&[dir, path.trim_start_matches('/')]), index))
}

/// `kind` and `metadata.name` of an object.
fn identity(item: &Value) -> (String, String) {
    (ann::kind(item).to_string(), ann::name(item).to_string())
}

fn emit(item: &Value) -> Arc<str> {
    let text = codec::to_yaml_string(item).unwrap_or_else(|_| item.to_string());
    with_newline(text).into()
}

fn with_newline(mut text: String) -> String {
    if !text.ends_with('\n') {
        text.push('\n');
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const CM: &str = "# settings\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cm # keep\ndata:\n  a: '1'\n";

    fn map() -> SourceMap {
        let mut m = SourceMap::new();
        m.insert(
            "app/cm.yaml",
            0,
            SourceDoc {
                text: CM.into(),
                value: codec::from_yaml_str(CM).unwrap(),
            },
        );
        m
    }

    #[test]
    fn changed_objects_keep_their_comments_and_unknown_ones_are_emitted() {
        let m = map();
        let mut v: Value = codec::from_yaml_str(CM).unwrap();
        assert_eq!(&*m.format(Some(("app/cm.yaml", 0)), &v), CM);
        v["metadata"]["namespace"] = "prod".into();
        let text = m.format(Some(("app/cm.yaml", 0)), &v);
        assert!(text.starts_with("# settings\n"));
        assert!(text.contains("name: cm # keep\n  namespace: prod\n"));
        // Same value again: served from the cache, same text.
        assert_eq!(m.format(Some(("app/cm.yaml", 0)), &v), text);
        // Moved to another file: found by kind and name, comments kept.
        assert!(m.format(Some(("elsewhere.yaml", 3)), &v).contains("# keep"));
        let other = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"}});
        assert!(!m.format(Some(("app/cm.yaml", 0)), &other).contains('#'));
        let unknown = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "new"}});
        assert!(!m.format(None, &unknown).contains('#'));
    }

    #[test]
    fn keys_join_the_package_directory() {
        let item = json!({"metadata": {"annotations": {
            "internal.config.kubernetes.io/path": "./cm.yaml",
            "internal.config.kubernetes.io/index": "0"}}});
        assert_eq!(root_key("app", &item), Some(("app/cm.yaml".into(), 0)));
        assert_eq!(root_key("", &item), Some(("cm.yaml".into(), 0)));
    }
}
