//! The catalog's `apply-setters` (v0.2.2, built on kyaml v0.10.21), in
//! Rust, working on each item's YAML text so that comments and quoting
//! come out as the Go function writes them.
//!
//! Setters are the functionConfig's `data` map (any kind; each value's
//! scalar text, "" for a non-scalar — kyaml's `GetDataMap`). A field is
//! tagged by a line comment starting exactly `# kpt-set: ` followed by a
//! pattern such as `${image}:${tag}`; it is set when the pattern names at
//! least one given setter:
//! - a **scalar** gets the pattern with every given setter replaced, the
//!   other `${name}`s recovered from the current value by matching it
//!   against the pattern (all of them, or none); any left over fail the
//!   function with `values for setters [${a} ${b}] must be provided`. The
//!   scalar keeps its quoting style (an empty value is double-quoted, a
//!   multi-line plain one becomes a `|` block) and loses its tag.
//! - a **sequence** (the comment on its key line, or after a flow
//!   sequence's `]`) needs a pattern that is one `${name}`; the setter's
//!   value must be a YAML sequence (else `input to array setter must be an
//!   array of values, but found "…"`), written as a block sequence with the
//!   comment on the key line; an empty value writes `key: [] # comment`.
//!
//! Objects are walked depth first (a mapping's sequence setters before its
//! fields), paths are kyaml's (`spec.template.spec.containers[0].image`).
//! Results: `set field value to "…"` (Go's `%q`) with the field path and
//! the file (`config.kubernetes.io/path`), or one `no matches for input
//! setter(s)`; on error one result `failed to apply setters: <error>` of
//! severity error, exit code 1, the error twice on stderr (the command
//! prints it, then `main` does with a line break), and the items as far as
//! they were set.
//!
//! Deliberate differences (see [`Refusal`] for what is handed back to the
//! next runtime instead): setters are applied in name order (Go ranges
//! over a map, so with a setter value containing `${other}` its output
//! varies from run to run; name order is one of its outputs); an array
//! setter whose value is an empty sequence (`[]`) is written as the empty
//! value is (`key: [] # comment`), where the Go function writes an
//! unindented `[]` line that is not YAML; a flow sequence set by an array
//! setter keeps its comment only on the key line (the Go function also
//! leaves it on the sequence, and its YAML writer puts it on the next line
//! that has no comment of its own).

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::Value;

use super::go_quote;
use crate::domain::codec::emit::{self, SeqIndent};
use crate::domain::codec::tree::{Item, Kind, Node, Style, YamlDoc, skip_blank};
use crate::domain::render::annotations as ann;
use crate::domain::resource_list::{FieldRef, FileRef, ResultItem, Severity};

/// The comment prefix that tags a field.
pub const SETTER_COMMENT: &str = "# kpt-set: ";

/// One setter: a name and the value given for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Setter {
    /// The name in `${name}`.
    pub name: String,
    /// The value: a scalar's text; for an array setter, a YAML sequence.
    pub value: String,
}

/// The setters of a functionConfig: its `data` entries in name order
/// (kyaml's `GetDataMap`: a scalar's text, "" for null and non-scalars).
pub fn setters(function_config: Option<&Value>) -> Vec<Setter> {
    let Some(Value::Object(data)) = function_config.and_then(|fc| fc.get("data")) else {
        return Vec::new();
    };
    let sorted: BTreeMap<&String, &Value> = data.iter().collect();
    sorted
        .into_iter()
        .map(|(name, v)| Setter {
            name: name.clone(),
            value: ann::scalar_text(v).unwrap_or_default(),
        })
        .collect()
}

/// Why the builtin hands a call to the next runtime: a construct it does
/// not edit byte for byte (an anchor on a tagged field; anchors, tags or
/// comments in an array setter's value; a document with anchors, aliases
/// or tags that has setter comments).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal(pub String);

/// What applying the setters to a call's items did.
#[derive(Debug, Clone, PartialEq)]
pub struct Applied {
    /// Per item, its new text when a setter changed it (`None`: unchanged).
    pub texts: Vec<Option<YamlDoc>>,
    /// The results, as the Go function writes them.
    pub results: Vec<ResultItem>,
    /// The error the Go function fails with, if any (the items are then
    /// set as far as the walk got).
    pub error: Option<String>,
}

/// Applies `setters` to the items whose YAML texts are `texts` (each with
/// the item's file path annotation, `""` when absent).
///
/// Errors: [`Refusal`] for a construct the builtin leaves to the Go
/// function (nothing is changed then).
pub fn apply(texts: &[(Arc<str>, String)], setters: &[Setter]) -> Result<Applied, Refusal> {
    let mut out = Applied {
        texts: vec![None; texts.len()],
        results: Vec::new(),
        error: None,
    };
    let mut found = Vec::new();
    for (i, (text, file)) in texts.iter().enumerate() {
        if !text.contains("kpt-set") || setters.is_empty() {
            continue;
        }
        let doc = YamlDoc::parse(text.clone())
            .map_err(|e| Refusal(format!("an item does not parse as YAML: {e}")))?;
        if doc.is_opaque() {
            return Err(Refusal(
                "an item with setter comments uses anchors, aliases or tags".into(),
            ));
        }
        let mut walk = Walk {
            doc: &doc,
            t: doc.text(),
            setters,
            file,
            edits: Vec::new(),
            found: &mut found,
        };
        let stopped = match doc.root() {
            Some(root) => walk.node(root, doc.value(), "", Place::Root),
            None => Ok(()),
        };
        let edits = std::mem::take(&mut walk.edits);
        if !edits.is_empty() {
            out.texts[i] = Some(splice(&doc, edits)?);
        }
        match stopped {
            Ok(()) => {}
            Err(Stop::Refuse(why)) => return Err(Refusal(why)),
            Err(Stop::Fail(e)) => {
                out.error = Some(e.clone());
                out.results = vec![ResultItem {
                    message: format!("failed to apply setters: {e}"),
                    severity: Some(Severity::Error),
                    ..Default::default()
                }];
                return Ok(out);
            }
        }
    }
    out.results = if found.is_empty() {
        vec![ResultItem {
            message: "no matches for input setter(s)".into(),
            ..Default::default()
        }]
    } else {
        found
            .into_iter()
            .map(|(file, path, value)| ResultItem {
                message: format!("set field value to {}", go_quote(&value)),
                field: Some(FieldRef {
                    path,
                    ..Default::default()
                }),
                file: (!file.is_empty()).then_some(FileRef {
                    path: file,
                    index: None,
                }),
                ..Default::default()
            })
            .collect()
    };
    Ok(out)
}

/// The texts with `edits` made, read back.
fn splice(doc: &YamlDoc, mut edits: Vec<(usize, usize, String)>) -> Result<YamlDoc, Refusal> {
    edits.sort_by_key(|e| e.0);
    let t = doc.text();
    let mut s = String::with_capacity(t.len() + 64);
    let mut at = 0;
    for (start, end, text) in edits {
        s.push_str(&t[at..start]);
        s.push_str(&text);
        at = end;
    }
    s.push_str(&t[at..]);
    YamlDoc::parse(s).map_err(|e| Refusal(format!("the set item does not read back: {e}")))
}

/// Where a node sits.
#[derive(Clone, Copy)]
pub(super) enum Place {
    /// The document's root.
    Root,
    /// A block mapping entry's value: the key's column, the colon.
    Value { column: usize, colon: usize },
    /// A block sequence item: the dash.
    Item { dash: usize },
    /// Inside a flow collection (no line comments are looked at there).
    Flow,
}

enum Stop {
    /// The Go function fails with this error.
    Fail(String),
    /// Handed to the next runtime.
    Refuse(String),
}

struct Walk<'a> {
    doc: &'a YamlDoc,
    t: &'a str,
    setters: &'a [Setter],
    file: &'a str,
    edits: Vec<(usize, usize, String)>,
    /// (file, field path, value) per field set, in order.
    found: &'a mut Vec<(String, String, String)>,
}

pub(super) use crate::domain::codec::tree::{column, line_end, line_start};

impl Walk<'_> {
    /// The trailing comment starting in `from..line end`: (start, end, text).
    fn comment_after(&self, from: usize) -> Option<(usize, usize, &str)> {
        let end = line_end(self.t, from);
        self.doc
            .comments()
            .iter()
            .find(|c| c.trailing && c.start >= from && c.start < end)
            .map(|c| (c.start, c.end, self.t[c.start..c.end].trim_end()))
    }

    fn should_set(&self, pattern: &str) -> bool {
        self.setters
            .iter()
            .any(|s| pattern.contains(&format!("${{{}}}", s.name)))
    }

    fn node(&mut self, n: &Node, v: &Value, path: &str, place: Place) -> Result<(), Stop> {
        match &n.kind {
            Kind::Map { flow, entries } => {
                let Value::Object(m) = v else { return Ok(()) };
                if !flow {
                    for e in entries {
                        if let Kind::Seq { flow, .. } = &e.value.kind {
                            self.array_setter(e, *flow, path)?;
                        }
                    }
                }
                for e in entries {
                    let child = m.get(&e.name).unwrap_or(&Value::Null);
                    let place = match (flow, e.colon) {
                        (false, Some(colon)) => Place::Value {
                            column: column(self.t, e.key.start),
                            colon,
                        },
                        _ => Place::Flow,
                    };
                    if self.replaced(&e.value) {
                        continue;
                    }
                    self.node(&e.value, child, &format!("{path}.{}", e.name), place)?;
                }
                Ok(())
            }
            Kind::Seq { flow, items } => {
                let Value::Array(a) = v else { return Ok(()) };
                for (i, Item { dash, node }) in items.iter().enumerate() {
                    let place = if *flow {
                        Place::Flow
                    } else {
                        Place::Item { dash: *dash }
                    };
                    let child = a.get(i).unwrap_or(&Value::Null);
                    self.node(node, child, &format!("{path}[{i}]"), place)?;
                }
                Ok(())
            }
            Kind::Scalar { style, empty } => {
                if *empty || matches!(place, Place::Flow) {
                    return Ok(());
                }
                self.scalar(n, *style, v, path, place)
            }
            Kind::Alias => Ok(()),
        }
    }

    /// True when an edit already replaced `n` (an array setter's sequence).
    fn replaced(&self, n: &Node) -> bool {
        self.edits
            .iter()
            .any(|(s, e, _)| *s <= n.start && n.start < *e)
    }

    /// kyaml's `visitMapping` for one entry whose value is a sequence.
    fn array_setter(
        &mut self,
        e: &crate::domain::codec::tree::Entry,
        flow: bool,
        path: &str,
    ) -> Result<(), Stop> {
        let Some(colon) = e.colon else { return Ok(()) };
        let comment = if flow {
            self.comment_after(e.value.end)
        } else if line_start(self.t, e.value.start) > colon {
            self.comment_after(colon + 1)
        } else {
            None
        };
        let Some((_, comment_end, comment)) = comment else {
            return Ok(());
        };
        let Some(pattern) = comment.strip_prefix(SETTER_COMMENT).map(str::trim) else {
            return Ok(());
        };
        if pattern.is_empty() || !self.should_set(pattern) {
            return Ok(());
        }
        if !(unresolved(pattern).len() == 1 && pattern.starts_with("${") && pattern.ends_with('}'))
        {
            return Err(Stop::Fail(format!(
                "invalid setter pattern for array node: {}",
                go_quote(pattern)
            )));
        }
        let name = clean(pattern);
        let sv = self
            .setters
            .iter()
            .find(|s| s.name == name)
            .map(|s| s.value.clone())
            .unwrap_or_default();
        let field = format!("{path}.{}", e.name);
        let field = field.strip_prefix('.').unwrap_or(&field).to_string();
        // The region replaced: after the colon to the end of the sequence
        // (and of a comment on its last line).
        let mut end = e.value.end.max(comment_end);
        if let Some((_, c_end, _)) = self.comment_after(e.value.end) {
            end = end.max(c_end);
        }
        let comment = comment.to_string();
        let text = if sv.is_empty() {
            format!(" [] {comment}")
        } else {
            let parsed = YamlDoc::parse(sv.as_str()).ok();
            let items = match parsed.as_ref().and_then(|d| d.root().map(|r| (d, r))) {
                Some((
                    d,
                    Node {
                        kind: Kind::Seq { items, .. },
                        ..
                    },
                )) => {
                    if d.is_opaque() || !d.comments().is_empty() {
                        return Err(Stop::Refuse(format!(
                            "the value of array setter {name:?} has anchors, tags or comments"
                        )));
                    }
                    items.iter().map(|it| item_text(d, it)).collect::<Vec<_>>()
                }
                _ => {
                    return Err(Stop::Fail(format!(
                        "input to array setter must be an array of values, but found {}",
                        go_quote(&sv)
                    )));
                }
            };
            if items.is_empty() {
                format!(" [] {comment}")
            } else {
                let key_col = column(self.t, e.key.start);
                let pad = key_col
                    + match SeqIndent::of(self.t) {
                        SeqIndent::Wide => 2,
                        SeqIndent::Compact => 0,
                    };
                let mut s = format!(" {comment}");
                for (text, col) in items {
                    s.push('\n');
                    s.push_str(&" ".repeat(pad));
                    s.push_str("- ");
                    s.push_str(&reindent(&text, col, pad + 2));
                }
                s
            }
        };
        self.edits.push((colon + 1, end, text));
        self.found.push((self.file.to_string(), field, sv));
        Ok(())
    }

    /// kyaml's `visitScalar`.
    fn scalar(
        &mut self,
        n: &Node,
        style: Style,
        v: &Value,
        path: &str,
        place: Place,
    ) -> Result<(), Stop> {
        let comment = match style {
            Style::Literal | Style::Folded => self.comment_after(n.start),
            _ => self.comment_after(n.end),
        };
        let Some((c_start, c_end, comment)) = comment else {
            return Ok(());
        };
        if matches!(style, Style::Literal | Style::Folded) && c_start > n.end {
            return Ok(());
        }
        let Some(pattern) = comment.strip_prefix(SETTER_COMMENT).map(str::trim) else {
            return Ok(());
        };
        if pattern.is_empty() || !self.should_set(pattern) {
            return Ok(());
        }
        // The scalar's value as yaml.v3 holds it (`Node.Value`).
        let current = match (style, v) {
            (_, Value::String(s)) => s.clone(),
            (Style::Plain, _) => self.t[n.start..n.end].to_string(),
            _ => ann::scalar_text(v).unwrap_or_default(),
        };
        let mut value = pattern.to_string();
        for s in self.setters {
            value = value.replace(&format!("${{{}}}", s.name), &s.value);
        }
        // Reading the current values compiles a regular expression: only
        // when something is left to replace (otherwise replacing is a no-op).
        if value.contains("${") {
            for (name, v) in current_values(pattern, &current) {
                value = value.replace(&format!("${{{name}}}"), &v);
            }
        }
        let left = unresolved(&value);
        if !left.is_empty() {
            return Err(Stop::Fail(format!(
                "values for setters [{}] must be provided",
                left.join(" ")
            )));
        }
        // The region: the scalar with its tag, and its comment (rewritten).
        let (start, indent) = match place {
            Place::Root => (n.start, 0),
            Place::Value { column, colon } => (skip_blank(self.t, colon + 1), column),
            Place::Item { dash } => (skip_blank(self.t, dash + 1), column(self.t, dash)),
            Place::Flow => return Ok(()),
        };
        let start = start.min(n.start);
        if self.t[start..n.start].contains('&') {
            return Err(Stop::Refuse(format!(
                "the field {:?} has an anchor",
                path.trim_start_matches('.')
            )));
        }
        let token = token(&value, style, indent);
        let text = match token.split_once('\n') {
            Some((header, body)) if token.starts_with(['|', '>']) => {
                format!("{header} {comment}\n{body}")
            }
            _ => format!("{token} {comment}"),
        };
        self.edits.push((start, n.end.max(c_end), text));
        let field = path.strip_prefix('.').unwrap_or(path).to_string();
        self.found.push((self.file.to_string(), field, value));
        Ok(())
    }
}

/// An array setter value's item: its text and the column it starts at.
fn item_text(d: &YamlDoc, it: &Item) -> (String, usize) {
    let t = d.text();
    let start = it.node.start;
    (t[start..it.node.end].to_string(), column(t, start))
}

/// `text` (its first line at the item's place) with its other lines moved
/// from column `from` to column `to`.
pub(super) fn reindent(text: &str, from: usize, to: usize) -> String {
    let mut lines = text.split('\n');
    let mut out = lines.next().unwrap_or_default().to_string();
    for line in lines {
        out.push('\n');
        if line.trim().is_empty() {
            continue;
        }
        let blanks = line.len() - line.trim_start_matches(' ').len();
        out.push_str(&" ".repeat((blanks + to).saturating_sub(from)));
        out.push_str(&line[blanks..]);
    }
    out
}

/// The scalar token yaml.v3 writes for `value` given the node's style
/// (tag cleared), content lines at `indent + 2`.
pub(super) fn token(value: &str, style: Style, indent: usize) -> String {
    if value.is_empty() {
        return "\"\"".into();
    }
    let multi = value.contains('\n');
    let double = || emit::double_quoted(value);
    let literal = || {
        if emit::block_allowed(value) {
            emit::block_scalar(&Value::String(value.to_string()), indent)
        } else {
            double()
        }
    };
    match style {
        Style::DoubleQuoted => double(),
        Style::Plain if multi => literal(),
        Style::Plain => {
            let a = emit::analyze(value);
            if a.block_plain {
                value.to_string()
            } else if a.single_quoted {
                format!("'{}'", value.replace('\'', "''"))
            } else {
                double()
            }
        }
        Style::SingleQuoted if multi => {
            if !emit::analyze(&value.replace('\n', " ")).single_quoted
                || value.contains(" \n")
                || value.contains("\n ")
            {
                double()
            } else {
                single_multiline(value, indent + 2)
            }
        }
        Style::SingleQuoted => {
            if emit::analyze(value).single_quoted {
                format!("'{}'", value.replace('\'', "''"))
            } else {
                double()
            }
        }
        Style::Literal => literal(),
        Style::Folded => {
            if emit::block_allowed(value) {
                folded(value, indent)
            } else {
                double()
            }
        }
    }
}

/// A `>` block as libyaml writes it (content at `indent + 2`, the header's
/// hints as for `|`): a line break between two lines that do not start
/// with a blank is written twice (it would fold into a space otherwise) —
/// unless the value itself starts with a blank, which libyaml checks in
/// place of the next line.
fn folded(value: &str, indent: usize) -> String {
    let literal = emit::block_scalar(&Value::String(value.to_string()), indent);
    let header = literal.split('\n').next().unwrap_or("|");
    let mut out = format!(">{}\n", &header[1..]);
    let pad = " ".repeat(indent + 2);
    let first_blank = value.starts_with([' ', '\t']);
    let (mut breaks, mut leading_spaces) = (true, true);
    for c in value.chars() {
        if c == '\n' {
            if !breaks && !leading_spaces && !first_blank {
                out.push('\n');
            }
            out.push('\n');
            breaks = true;
            continue;
        }
        if breaks {
            out.push_str(&pad);
            leading_spaces = c == ' ' || c == '\t';
            breaks = false;
        }
        out.push(c);
    }
    // The line break after the node ends its last line.
    if out.ends_with('\n') {
        out.pop();
    }
    out
}

/// A multi-line single-quoted scalar as libyaml writes it: each run of
/// line breaks one longer, the next line at `indent`.
fn single_multiline(value: &str, indent: usize) -> String {
    let mut out = String::from("'");
    let mut breaks = false;
    for c in value.chars() {
        if c == '\n' {
            if !breaks {
                out.push('\n');
            }
            out.push('\n');
            breaks = true;
            continue;
        }
        if breaks {
            out.push_str(&" ".repeat(indent));
            breaks = false;
        }
        if c == '\'' {
            out.push_str("''");
        } else {
            out.push(c);
        }
    }
    out.push('\'');
    out
}

/// The `${…}` references in `pattern`, in order (`\$\{([^}]*)\}`).
fn unresolved(pattern: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut rest = 0;
    while let Some(i) = pattern[rest..].find("${") {
        let open = rest + i;
        match pattern[open + 2..].find('}') {
            Some(j) => {
                out.push(&pattern[open..open + 2 + j + 1]);
                rest = open + 2 + j + 1;
            }
            None => break,
        }
    }
    out
}

/// The name inside `${…}`.
fn clean(reference: &str) -> &str {
    let r = reference.trim();
    let r = r.strip_prefix("${").unwrap_or(r);
    r.strip_suffix('}').unwrap_or(r)
}

/// The values of `pattern`'s references read from `value` (kyaml's
/// `currentSetterValues`: the pattern as a regular expression with `(.*)`
/// per reference, unanchored; every reference must match something, or
/// none is read), in name order.
fn current_values(pattern: &str, value: &str) -> Vec<(String, String)> {
    let refs = unresolved(pattern);
    let mut re = regex::escape(pattern);
    for r in &refs {
        re = re.replace(&regex::escape(r), "(.*)");
    }
    let Ok(re) = regex::Regex::new(&re) else {
        return Vec::new();
    };
    let Some(caps) = re.captures(value) else {
        return Vec::new();
    };
    let got: Vec<&str> = caps
        .iter()
        .skip(1)
        .map(|m| m.map_or("", |m| m.as_str()))
        .collect();
    if got.len() != refs.len() || got.iter().any(|g| g.is_empty()) {
        return Vec::new();
    }
    let map: BTreeMap<String, String> = refs
        .iter()
        .zip(got)
        .map(|(r, g)| (clean(r).to_string(), g.to_string()))
        .collect();
    map.into_iter().collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn run(text: &str, data: Value) -> Applied {
        let s = setters(Some(&json!({ "data": data })));
        apply(&[(Arc::from(text), "f.yaml".to_string())], &s).unwrap()
    }

    fn out(a: &Applied) -> &str {
        a.texts[0].as_ref().map(|d| d.text()).unwrap_or("")
    }

    #[test]
    fn scalars_keep_their_style_and_comment() {
        let a = run(
            "a: nginx  # kpt-set: ${image}:${tag}\nb: \"4\" # kpt-set: ${n}\nc: 4 # kpt-set: ${e}\nd: x # kpt-set: ${m}\n",
            json!({"image": "ubuntu", "tag": "1.8", "n": "true", "e": "", "m": "x\ny"}),
        );
        assert_eq!(
            out(&a),
            "a: ubuntu:1.8 # kpt-set: ${image}:${tag}\nb: \"true\" # kpt-set: ${n}\nc: \"\" # kpt-set: ${e}\nd: |- # kpt-set: ${m}\n  x\n  y\n"
        );
        assert_eq!(a.results[0].message, "set field value to \"ubuntu:1.8\"");
        assert_eq!(a.results[0].field.as_ref().unwrap().path, "a");
        assert_eq!(a.results[0].file.as_ref().unwrap().path, "f.yaml");
        assert_eq!(a.results[3].message, "set field value to \"x\\ny\"");
    }

    #[test]
    fn missing_values_are_recovered_from_the_field_or_fail() {
        let a = run("p: foo-bar # kpt-set: ${x}-${z}\n", json!({"x": "1"}));
        assert_eq!(out(&a), "p: 1-bar # kpt-set: ${x}-${z}\n");
        let a = run("n: 5 # kpt-set: ${x}-${y}\n", json!({"x": "1"}));
        assert_eq!(
            a.error.as_deref(),
            Some("values for setters [${y}] must be provided")
        );
        assert_eq!(
            a.results[0].message,
            "failed to apply setters: values for setters [${y}] must be provided"
        );
    }

    #[test]
    fn array_setters_write_block_sequences() {
        let a = run(
            "spec:\n  list: # kpt-set: ${l}\n  - a\n  flow: [a] # kpt-set: ${l}\n  e: [x] # kpt-set: ${e}\n",
            json!({"l": "[c, 'd e']", "e": ""}),
        );
        assert_eq!(
            out(&a),
            "spec:\n  list: # kpt-set: ${l}\n  - c\n  - 'd e'\n  flow: # kpt-set: ${l}\n  - c\n  - 'd e'\n  e: [] # kpt-set: ${e}\n"
        );
        let paths: Vec<_> = a
            .results
            .iter()
            .map(|r| r.field.as_ref().unwrap().path.as_str())
            .collect();
        assert_eq!(paths, ["spec.list", "spec.flow", "spec.e"]);
        let a = run("l: # kpt-set: ${l}\n- a\n", json!({"l": "a"}));
        assert_eq!(
            a.error.as_deref(),
            Some("input to array setter must be an array of values, but found \"a\"")
        );
        let a = run("l: # kpt-set: ${l}-x\n- a\n", json!({"l": "a"}));
        assert_eq!(
            a.error.as_deref(),
            Some("invalid setter pattern for array node: \"${l}-x\"")
        );
    }

    #[test]
    fn untagged_or_unnamed_fields_are_left_alone() {
        let a = run(
            "a: 1 #kpt-set: ${x}\nb: # kpt-set: ${x}\nc: 2 # kpt-set: ${other}\n",
            json!({"x": "9"}),
        );
        assert!(a.texts[0].is_none());
        assert_eq!(a.results[0].message, "no matches for input setter(s)");
    }

    #[test]
    fn setters_are_the_data_map() {
        let s = setters(Some(&json!({"data": {"b": 1, "a": true, "c": {"x": 1}}})));
        let got: Vec<_> = s
            .iter()
            .map(|s| (s.name.as_str(), s.value.as_str()))
            .collect();
        assert_eq!(got, [("a", "true"), ("b", "1"), ("c", "")]);
        assert!(setters(None).is_empty());
    }

    #[test]
    fn references_and_current_values() {
        assert_eq!(unresolved("a${b}c${d}${"), ["${b}", "${d}"]);
        assert_eq!(clean(" ${x} "), "x");
        assert_eq!(
            current_values("my.${a}.${b}", "my.dev.example.com"),
            [
                ("a".into(), "dev.example".into()),
                ("b".into(), "com".into())
            ]
        );
        assert!(current_values("${a}-${b}", "ab").is_empty());
    }
}
