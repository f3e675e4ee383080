//! Format-preserving YAML edits: apply the difference between two parsed
//! documents to the original text.
//!
//! kpt keeps a package's look through a render because kyaml carries
//! comments, key order and sequence style on its nodes (`krm-functions.md`
//! §3.7, "Formatting"). Here the render works on plain JSON values, so the
//! look is restored at the edges instead: [`patch_document`] takes the text a
//! value was read from and edits only the mapping entries and sequence items
//! whose value changed, on a lossless syntax tree (`yaml-edit`). Everything
//! else — comments (including `# kpt-set:` setter comments), blank lines,
//! key order, quoting, `|` blocks, sequence indentation — stays byte for
//! byte. Every edit is checked by parsing the result again; when the check
//! fails the caller falls back to emitting the value (comments of that one
//! document are lost, its content never is).

use std::str::FromStr;

use serde_json::{Map, Value};
use yaml_edit::{Document, Mapping, Sequence, YamlFile, YamlNode};

use super::{CodecError, from_yaml_str, to_yaml_string};

/// Splits a multi-document YAML stream into the texts of its documents.
///
/// A line that is `---` (optionally followed by a space/tab and a comment or
/// nothing else) separates documents; the separator lines are not part of
/// any document. Input: the whole file. Output: one string per document,
/// each ending with a newline when it had one; a stream without separators
/// is one document. Empty or comment-only documents are returned too — the
/// caller decides what they mean (kpt skips them when indexing).
pub fn split_documents(text: &str) -> Vec<String> {
    let mut docs = Vec::new();
    let mut current = String::new();
    for line in text.split_inclusive('\n') {
        if is_separator(line) {
            docs.push(std::mem::take(&mut current));
        } else {
            current.push_str(line);
        }
    }
    docs.push(current);
    docs
}

/// True for a document separator line (`---`, `--- # comment`).
fn is_separator(line: &str) -> bool {
    let line = line.trim_end_matches(['\n', '\r']);
    match line.strip_prefix("---") {
        Some(rest) => rest.is_empty() || rest.starts_with([' ', '\t']) && !has_content(rest),
        None => false,
    }
}

/// True when `rest` (after `---`) holds more than blanks and a comment.
fn has_content(rest: &str) -> bool {
    let t = rest.trim_start();
    !t.is_empty() && !t.starts_with('#')
}

/// True when a document text holds no YAML node: only blanks and comments.
pub fn is_blank_document(text: &str) -> bool {
    text.lines().all(|l| {
        let t = l.trim();
        t.is_empty() || t.starts_with('#')
    })
}

/// Rewrites `text` — one YAML document whose parsed value is `from` — so
/// that it parses to `to`, changing only what differs.
///
/// Mapping entries are removed, replaced or appended (new keys go after the
/// existing ones, as kyaml's `SetField` does); sequences keep the items of
/// their common prefix and suffix and edit the rest position by position.
/// Nested mappings and sequences are edited in place, so a comment next to
/// an unchanged field survives a change next to it.
///
/// Errors: the text is not a single document with a mapping root, or the
/// edited text does not parse to `to` (a construct the editor cannot change
/// faithfully). The caller then emits `to` instead.
pub fn patch_document(text: &str, from: &Value, to: &Value) -> Result<String, CodecError> {
    if from == to {
        return Ok(text.to_string());
    }
    let (Value::Object(from_map), Value::Object(to_map)) = (from, to) else {
        return Err(CodecError::new(
            "only mapping documents are edited in place",
        ));
    };
    // Fast path: the common render edits (changed scalars, appended keys)
    // spliced into the text at positions read off the syntax tree, checked
    // like every edit. Editing the tree itself costs tens of microseconds
    // per change; a thousand objects times a few steps add up.
    let spliced = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        splice_text(text, from_map, to_map)
    }))
    .ok()
    .flatten();
    if let Some(edited) = spliced
        && from_yaml_str::<Value>(&edited).is_ok_and(|check| &check == to)
    {
        return Ok(edited);
    }
    let edited = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        edit_text(text, from_map, to_map)
    }))
    .map_err(|_| CodecError::new("the YAML editor failed on this document"))??;
    let check: Value = from_yaml_str(&edited)?;
    if &check != to {
        return Err(CodecError::new(
            "an in-place edit did not give the expected document",
        ));
    }
    Ok(edited)
}

/// The lossless syntax tree of `text` and its root mapping.
///
/// Errors: `text` does not parse, holds no or several documents, or its
/// root is not a mapping.
fn single_mapping(text: &str) -> Result<(YamlFile, Mapping), CodecError> {
    let file = YamlFile::from_str(text).map_err(CodecError::new)?;
    let mut docs = file.documents();
    let doc = docs
        .next()
        .ok_or_else(|| CodecError::new("no document to edit"))?;
    if docs.next().is_some() {
        return Err(CodecError::new("more than one document"));
    }
    let root = doc
        .as_mapping()
        .ok_or_else(|| CodecError::new("the document root is not a mapping"))?;
    Ok((file, root))
}

/// Parses, edits and prints one document.
fn edit_text(
    text: &str,
    from: &Map<String, Value>,
    to: &Map<String, Value>,
) -> Result<String, CodecError> {
    let (file, root) = single_mapping(text)?;
    patch_mapping(&root, from, to)?;
    Ok(file.to_string())
}

/// A text replacement: byte range of the original text and its new text.
struct Splice {
    start: usize,
    end: usize,
    text: String,
}

/// The fast path of [`patch_document`]: `text` with `from` → `to` applied as
/// text splices, or `None` when the change needs more than replacing
/// single-line scalars and appending keys to block mappings (removed keys,
/// sequences of another length, block scalars, flow collections, type
/// changes, new sequences in a file that indents them wide) — the tree
/// editor handles those.
fn splice_text(text: &str, from: &Map<String, Value>, to: &Map<String, Value>) -> Option<String> {
    let (_file, root) = single_mapping(text).ok()?;
    let mut splicer = Splicer {
        text,
        wide: sequence_indent(text) == "wide",
        splices: Vec::new(),
    };
    splicer.mapping(&root, from, to)?;
    let splices = splicer.splices;
    // Apply back to front; of two insertions at one offset the one recorded
    // later (an enclosing mapping's new keys) goes after the earlier one
    // (its last entry's new keys), so it is applied first.
    let mut order: Vec<usize> = (0..splices.len()).collect();
    order.sort_by(|&a, &b| splices[b].start.cmp(&splices[a].start).then(b.cmp(&a)));
    let mut out = text.to_string();
    for i in order {
        let s = &splices[i];
        out.replace_range(s.start..s.end, &s.text);
    }
    Some(out)
}

/// Collects the splices of one document.
struct Splicer<'a> {
    /// The document's text (byte ranges of the tree point into it).
    text: &'a str,
    /// The document indents block sequences deeper than their key; the
    /// codec emits them compact, so new sequences are left to the editor.
    wide: bool,
    splices: Vec<Splice>,
}

impl Splicer<'_> {
    /// Records the splices that turn mapping `node` from `from` into `to`.
    fn mapping(
        &mut self,
        node: &Mapping,
        from: &Map<String, Value>,
        to: &Map<String, Value>,
    ) -> Option<()> {
        if node.is_flow_style() || from.keys().any(|k| !to.contains_key(k)) {
            return None;
        }
        let mut appended = Map::new();
        for (key, new) in to {
            match from.get(key) {
                Some(old) if old == new => {}
                Some(old) => {
                    let value = node.find_entry_by_key(key.as_str())?.value_node()?;
                    self.value(&value, old, new)?;
                }
                None => {
                    appended.insert(key.clone(), new.clone());
                }
            }
        }
        if appended.is_empty() {
            return Some(());
        }
        let body = to_yaml_string(&Value::Object(appended)).ok()?;
        if self.wide && body.lines().any(|l| l.trim_start().starts_with('-')) {
            return None;
        }
        // New keys go after the last entry, at the entries' indentation. The
        // entry's range may or may not take its line's end (and a trailing
        // comment) with it; insert at the start of the next line either way.
        let text = self.text;
        let last = node.entries().last()?;
        let end = usize::try_from(last.byte_range().end).ok()?;
        let at = if text.get(..end)?.ends_with('\n') {
            end
        } else {
            match text.get(end..)?.find('\n') {
                Some(nl) => end + nl + 1,
                None => text.len(),
            }
        };
        let indent = " ".repeat(node.detect_indentation_level());
        let mut new_text = if at == text.len() && !text.ends_with('\n') {
            "\n".to_string()
        } else {
            String::new()
        };
        new_text.push_str(&nest(&body, &indent, &indent));
        self.splices.push(Splice {
            start: at,
            end: at,
            text: new_text,
        });
        Some(())
    }

    /// Records the splices that turn the value node `node` from `old` into
    /// `new`: nested collections are walked, single-line scalars replaced.
    fn value(&mut self, node: &YamlNode, old: &Value, new: &Value) -> Option<()> {
        match (old, new, node) {
            (Value::Object(o), Value::Object(n), YamlNode::Mapping(m)) => self.mapping(m, o, n),
            (Value::Array(o), Value::Array(n), YamlNode::Sequence(s))
                if o.len() == n.len() && !s.is_flow_style() =>
            {
                for (i, (a, b)) in o.iter().zip(n).enumerate() {
                    if a != b {
                        self.value(&s.get(i)?, a, b)?;
                    }
                }
                Some(())
            }
            (old, new, YamlNode::Scalar(_)) if is_scalar(old) && is_scalar(new) => {
                let range = node.byte_range();
                let (start, end) = (
                    usize::try_from(range.start).ok()?,
                    usize::try_from(range.end).ok()?,
                );
                let current = self.text.get(start..end)?;
                if current.contains('\n') || current.starts_with(['|', '>', '&', '!', '*']) {
                    return None;
                }
                let emitted = to_yaml_string(new).ok()?;
                let replacement = emitted.strip_suffix('\n').unwrap_or(&emitted);
                if replacement.contains('\n') {
                    return None;
                }
                self.splices.push(Splice {
                    start,
                    end,
                    text: replacement.to_string(),
                });
                Some(())
            }
            _ => None,
        }
    }
}

/// True for null, booleans, numbers and strings.
fn is_scalar(value: &Value) -> bool {
    !matches!(value, Value::Object(_) | Value::Array(_))
}

/// Applies `from` → `to` to the mapping node `node`.
fn patch_mapping(
    node: &Mapping,
    from: &Map<String, Value>,
    to: &Map<String, Value>,
) -> Result<(), CodecError> {
    for key in from.keys() {
        if !to.contains_key(key) {
            node.remove(key.as_str());
        }
    }
    for (key, new) in to {
        match from.get(key) {
            Some(old) if old == new => {}
            Some(old) => match (old, new, node.get(key.as_str())) {
                (Value::Object(o), Value::Object(n), Some(YamlNode::Mapping(m))) => {
                    patch_mapping(&m, o, n)?
                }
                (Value::Array(o), Value::Array(n), Some(YamlNode::Sequence(s))) => {
                    patch_sequence(&s, o, n)?
                }
                _ => set_entry(node, key, new)?,
            },
            None => set_entry(node, key, new)?,
        }
    }
    Ok(())
}

/// Applies `from` → `to` to the sequence node `node`.
fn patch_sequence(node: &Sequence, from: &[Value], to: &[Value]) -> Result<(), CodecError> {
    let prefix = from.iter().zip(to).take_while(|(a, b)| a == b).count();
    let max_suffix = from.len().min(to.len()) - prefix;
    let suffix = from
        .iter()
        .rev()
        .zip(to.iter().rev())
        .take(max_suffix)
        .take_while(|(a, b)| a == b)
        .count();
    let old_mid = &from[prefix..from.len() - suffix];
    let new_mid = &to[prefix..to.len() - suffix];
    let paired = old_mid.len().min(new_mid.len());
    for i in 0..paired {
        let at = prefix + i;
        let (old, new) = (&old_mid[i], &new_mid[i]);
        if old == new {
            continue;
        }
        match (old, new, node.get(at)) {
            (Value::Object(o), Value::Object(n), Some(YamlNode::Mapping(m))) => {
                patch_mapping(&m, o, n)?
            }
            (Value::Array(o), Value::Array(n), Some(YamlNode::Sequence(s))) => {
                patch_sequence(&s, o, n)?
            }
            _ => {
                let value = new_node(new)?;
                if !node.set(at, value) {
                    return Err(CodecError::new("cannot replace a sequence item"));
                }
            }
        }
    }
    // Surplus old items go; surplus new ones are inserted where they belong.
    for _ in paired..old_mid.len() {
        node.remove(prefix + paired)
            .ok_or_else(|| CodecError::new("cannot remove a sequence item"))?;
    }
    for (i, new) in new_mid.iter().enumerate().skip(paired) {
        node.insert(prefix + i, new_node(new)?);
    }
    Ok(())
}

/// Sets `key` of `node` to `value` (replacing or appending the entry).
fn set_entry(node: &Mapping, key: &str, value: &Value) -> Result<(), CodecError> {
    node.set(key, new_node(value)?);
    Ok(())
}

/// A syntax node for `value`, printed by the codec (so strings that would
/// read as another type are quoted, and key order is kept).
fn new_node(value: &Value) -> Result<YamlNode, CodecError> {
    let text = to_yaml_string(value)?;
    let doc = Document::from_str(&text).map_err(CodecError::new)?;
    if let Some(m) = doc.as_mapping() {
        return Ok(YamlNode::Mapping(m));
    }
    if let Some(s) = doc.as_sequence() {
        return Ok(YamlNode::Sequence(s));
    }
    if let Some(s) = doc.as_scalar() {
        return Ok(YamlNode::Scalar(s));
    }
    Err(CodecError::new(format!("cannot build a node for {value}")))
}

/// The block-sequence style of a document, as kyaml derives it for the
/// `internal.config.kubernetes.io/seqindent` annotation: `"wide"` when the
/// first block sequence under a mapping key is indented deeper than the key
/// (`key:\n  - a`), `"compact"` when it is not (`key:\n- a`) or when there
/// is no block sequence under a key.
pub fn sequence_indent(text: &str) -> &'static str {
    let mut lines = text
        .lines()
        .filter(|l| !l.trim().is_empty() && !l.trim_start().starts_with('#'));
    let mut previous: Option<&str> = None;
    for line in lines.by_ref() {
        let trimmed = line.trim_start();
        if let Some(key) = previous
            && (trimmed.starts_with("- ") || trimmed == "-")
        {
            let key_indent = key.len() - key.trim_start().len();
            let item_indent = line.len() - trimmed.len();
            return if item_indent > key_indent {
                "wide"
            } else {
                "compact"
            };
        }
        let code = trimmed.split(" #").next().unwrap_or(trimmed).trim_end();
        previous = code.ends_with(':').then_some(line);
    }
    "compact"
}

/// Indents every non-empty line of `text` by `indent`, and starts the first
/// line with `first` instead (e.g. `"- "` to make a block sequence item).
///
/// Input: a YAML document's text. Output: the same document nested one
/// level deeper; block scalars keep their relative indentation.
pub fn nest(text: &str, first: &str, indent: &str) -> String {
    let mut out = String::with_capacity(text.len() + text.len() / 8 + first.len());
    for (i, line) in text.split_inclusive('\n').enumerate() {
        if i == 0 {
            out.push_str(first);
        } else if !line.trim_end_matches(['\n', '\r']).is_empty() {
            out.push_str(indent);
        }
        out.push_str(line);
    }
    if !out.ends_with('\n') {
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    /// The splice fast path alone (no tree-editor fallback).
    fn splice(text: &str, edit: impl FnOnce(&mut Value)) -> Option<String> {
        let from: Value = from_yaml_str(text).unwrap();
        let mut to = from.clone();
        edit(&mut to);
        let out = splice_text(text, from.as_object()?, to.as_object()?)?;
        assert_eq!(from_yaml_str::<Value>(&out).unwrap(), to, "{out}");
        Some(out)
    }

    #[test]
    fn splices_put_new_keys_at_the_end_of_their_own_mapping() {
        let text = "metadata:\n  name: a\n  labels: # the labels\n    app: a\nspec:\n  x: 1 # kpt-set: ${x}\n";
        let out = splice(text, |v| {
            v["metadata"]["labels"]["tier"] = "web".into();
            v["metadata"]["namespace"] = "prod".into();
            v["spec"]["x"] = 2.into();
        })
        .unwrap();
        assert_eq!(
            out,
            "metadata:\n  name: a\n  labels: # the labels\n    app: a\n    tier: web\n  namespace: prod\nspec:\n  x: 2 # kpt-set: ${x}\n"
        );
    }

    #[test]
    fn splices_handle_a_missing_final_newline_and_sequence_items() {
        let text = "spec:\n  containers:\n  - name: a\n    image: x:1 # kpt-set: x:${tag}\n  - name: b\n    image: y";
        let out = splice(text, |v| {
            v["spec"]["containers"][0]["image"] = "x:2".into();
            v["spec"]["containers"][1]["env"] = serde_json::json!([{"name": "A", "value": "1"}]);
        })
        .unwrap();
        assert!(out.contains("image: x:2 # kpt-set: x:${tag}\n"), "{out}");
        assert!(
            out.ends_with("    image: y\n    env:\n    - name: A\n      value: \"1\"\n"),
            "{out}"
        );
    }

    #[test]
    fn splices_leave_new_sequences_in_wide_files_to_the_tree_editor() {
        let text = "spec:\n  ports:\n    - port: 80\n";
        assert!(splice(text, |v| v["spec"]["hosts"] = serde_json::json!(["a"])).is_none());
        assert!(splice(text, |v| v["spec"]["ports"][0]["port"] = 81.into()).is_some());
    }

    #[test]
    fn splices_leave_removals_and_block_scalars_to_the_tree_editor() {
        assert!(
            splice(DEPLOY, |v| {
                v["metadata"].as_object_mut().unwrap().remove("labels");
            })
            .is_none()
        );
        assert!(
            splice(DEPLOY, |v| v["spec"]["template"]["spec"]["notes"] =
                "other".into())
            .is_none()
        );
        assert!(
            splice(DEPLOY, |v| {
                v["spec"]["template"]["spec"]["containers"]
                    .as_array_mut()
                    .unwrap()
                    .pop();
            })
            .is_none()
        );
    }

    fn patch(text: &str, edit: impl FnOnce(&mut Value)) -> String {
        let from: Value = from_yaml_str(text).unwrap();
        let mut to = from.clone();
        edit(&mut to);
        patch_document(text, &from, &to).unwrap()
    }

    const DEPLOY: &str = "\
# A web server.
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web # the name

  labels:
    app: web
spec:
  replicas: 3 # kpt-set: ${replicas}
  template:
    spec:
      containers:
        - name: nginx
          image: nginx:1.25 # kpt-set: ${image}
          args: [\"-g\", \"daemon off;\"]
        - name: sidecar
          image: envoy
      notes: |
        line one
        line two
";

    #[test]
    fn unchanged_documents_are_returned_as_they_are() {
        assert_eq!(patch(DEPLOY, |_| {}), DEPLOY);
    }

    #[test]
    fn a_changed_scalar_keeps_its_comment_and_everything_else() {
        let out = patch(DEPLOY, |v| {
            v["spec"]["template"]["spec"]["containers"][0]["image"] = "nginx:1.27".into();
            v["spec"]["replicas"] = 5.into();
        });
        assert_eq!(
            out,
            DEPLOY
                .replace("nginx:1.25 #", "nginx:1.27 #")
                .replace("replicas: 3", "replicas: 5")
        );
    }

    #[test]
    fn new_keys_are_appended_with_the_mapping_indentation() {
        let out = patch(DEPLOY, |v| {
            v["metadata"]["namespace"] = "prod".into();
            v["metadata"]["labels"]["tier"] = "007".into();
            v["metadata"]["annotations"] = serde_json::json!({"b": "x", "a": "true"});
        });
        let back: Value = from_yaml_str(&out).unwrap();
        assert_eq!(back["metadata"]["labels"]["tier"], "007");
        assert_eq!(back["metadata"]["annotations"]["a"], "true");
        assert!(out.contains("name: web # the name\n"));
        assert!(out.contains("# kpt-set: ${image}"));
        assert!(out.contains("  namespace: prod\n"));
        let keys: Vec<_> = back["metadata"]["annotations"]
            .as_object()
            .unwrap()
            .keys()
            .collect();
        assert_eq!(keys, ["b", "a"]);
    }

    #[test]
    fn removed_keys_and_items_go_and_inserted_items_land_in_place() {
        let out = patch(DEPLOY, |v| {
            v["metadata"]
                .as_object_mut()
                .unwrap()
                .shift_remove("labels");
            let c = v["spec"]["template"]["spec"]["containers"]
                .as_array_mut()
                .unwrap();
            c.insert(1, serde_json::json!({"name": "init", "image": "busybox"}));
        });
        let back: Value = from_yaml_str(&out).unwrap();
        assert!(back["metadata"].get("labels").is_none());
        let names: Vec<_> = back["spec"]["template"]["spec"]["containers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["nginx", "init", "sidecar"]);
        assert!(out.contains("image: nginx:1.25 # kpt-set: ${image}"));
    }

    #[test]
    fn documents_split_on_separator_lines_only() {
        let docs = split_documents("a: 1\n---\nb: |\n  ---x\n--- # two\nc: 3\n");
        assert_eq!(docs, ["a: 1\n", "b: |\n  ---x\n", "c: 3\n"]);
        assert_eq!(split_documents("---\na: 1\n"), ["", "a: 1\n"]);
        assert!(is_blank_document("# only a comment\n\n"));
    }

    #[test]
    fn sequence_style_is_detected_like_kyaml() {
        assert_eq!(sequence_indent("a:\n  - x\n"), "wide");
        assert_eq!(sequence_indent("a:\n- x\n"), "compact");
        assert_eq!(sequence_indent("m:\n  k: # c\n  - x\n"), "compact");
        assert_eq!(sequence_indent("m:\n  k:\n    - x\n"), "wide");
        assert_eq!(sequence_indent("a: 1\n"), "compact");
    }

    #[test]
    fn nesting_makes_a_sequence_item() {
        assert_eq!(
            nest("a: 1\nb: |\n  x\n\n  y\n", "- ", "  "),
            "- a: 1\n  b: |\n    x\n\n    y\n"
        );
    }

    #[test]
    fn non_mapping_roots_are_refused_not_mangled() {
        let from = Value::from("x");
        assert!(patch_document("x\n", &from, &Value::from("y")).is_err());
    }
}
