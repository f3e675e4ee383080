//! Format-preserving YAML edits: turn a document's text into the text of
//! another value, changing only what differs — and, when a function wrote
//! the new value as text, taking the changed parts from that text.
//!
//! kpt keeps a package's look through a render because kyaml carries
//! comments, key order and scalar styles on its nodes (`krm-functions.md`
//! §1.7, §3.7). Here the render works on plain values, so the look is
//! restored at the edges: [`merge`] walks the document's node tree
//! ([`super::tree`]) against the target value and records byte splices:
//!
//! - everything whose value did not change stays byte for byte (comments,
//!   blank lines, key order, quoting, block scalars, sequence indentation);
//! - a changed or new node is taken from the *source* — the text a function
//!   wrote — when the source has that node with the target's value: its
//!   scalars keep the function's spelling and style (`0123`, `0x1F`, `.inf`,
//!   `'007'`), its new fields and objects keep the comments it wrote on them;
//! - a comment the source has on a node (line comment or the comment lines
//!   above it) replaces the document's comment there, and a comment the
//!   source dropped stays — kyaml's rule for comments around a function call;
//! - what neither has as text is written by [`super::emit`] in kyaml's style.
//!
//! New keys go after a mapping's existing keys (kyaml's field order), new
//! sequence items where the value has them. Every edit is checked by
//! parsing the result; when the check fails, the whole document is taken
//! from the source (or emitted), so its content is never wrong.

use serde_json::{Map, Value};

use super::CodecError;
use super::emit::{self, SeqIndent};
pub use super::seq_style::{own_sequence_indent, sequence_indent};
use super::tree::{Entry, Item, Kind, Node, Style, YamlDoc, column, line_end, line_start};
use super::value::{get, has, same, same_in_order, same_opt};

/// Splits a multi-document YAML stream into its documents and the text
/// between them.
///
/// A line that is `---` (optionally followed by a blank and a comment, or by
/// content: `--- a: 1` starts a document on the marker line) starts a
/// document; a line `...` ends one. Returned: the documents' texts (each
/// ending with a line break when the input had one; markers excluded) and,
/// for each, the separator text before it (marker lines, and for `...`
/// everything up to the next document), plus the text after the last
/// document. Empty and comment-only documents are returned too — the caller
/// decides what they mean (kpt skips them when indexing).
pub fn split_stream(text: &str) -> Stream {
    let mut stream = Stream::default();
    let mut current = String::new();
    let mut sep = String::new();
    let mut ended = false;
    for line in text.split_inclusive('\n') {
        let bare = line.trim_end_matches(['\n', '\r']);
        if let Some(rest) = bare.strip_prefix("---")
            && (rest.is_empty() || rest.starts_with([' ', '\t']))
        {
            if !ended {
                stream
                    .docs
                    .push((std::mem::take(&mut sep), std::mem::take(&mut current)));
            }
            ended = false;
            let content = rest.trim_start();
            if content.is_empty() || content.starts_with('#') {
                sep.push_str(line);
            } else {
                // `--- key: v`: the marker goes to the separator, the rest
                // of the line starts the document.
                let cut = line.len() - rest.len() + (rest.len() - rest.trim_start().len());
                sep.push_str(&line[..cut]);
                current.push_str(&line[cut..]);
            }
            continue;
        }
        if bare == "..." || bare.starts_with("... ") || bare.starts_with("...\t") {
            if !ended {
                stream
                    .docs
                    .push((std::mem::take(&mut sep), std::mem::take(&mut current)));
            }
            ended = true;
            sep.push_str(line);
            continue;
        }
        if ended {
            // Between `...` and the next `---`: only comments and blank
            // lines belong to the separator; content starts a bare document.
            let t = bare.trim();
            if t.is_empty() || t.starts_with('#') {
                sep.push_str(line);
                continue;
            }
            ended = false;
        }
        current.push_str(line);
    }
    if ended {
        stream.trailer = sep;
    } else {
        stream.docs.push((sep, current));
    }
    stream
}

/// A YAML stream split by [`split_stream`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Stream {
    /// (separator text before the document, document text).
    pub docs: Vec<(String, String)>,
    /// Text after the last document (after a final `...`).
    pub trailer: String,
}

/// Splits a multi-document YAML stream into the texts of its documents
/// (separators, `---` and `...` lines, left out); see [`split_stream`].
pub fn split_documents(text: &str) -> Vec<String> {
    split_stream(text)
        .docs
        .into_iter()
        .map(|(_, d)| d)
        .collect()
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
/// Mapping entries are removed, replaced or appended (new keys go after
/// the existing ones, as kyaml's `SetField` does); sequences keep the items
/// of their common prefix and suffix and edit the rest position by position.
/// Nested mappings and sequences are edited in place, so a comment next to
/// an unchanged field survives a change next to it. New nodes are written
/// in kyaml's style ([`super::emit`]).
///
/// Errors: the text is not a single YAML document, or the edited text does
/// not parse to `to` (never returned for documents this module can edit;
/// the caller then emits `to`).
pub fn patch_document(text: &str, from: &Value, to: &Value) -> Result<String, CodecError> {
    if from == to {
        return Ok(text.to_string());
    }
    let base = YamlDoc::parse(text)?;
    merge(&base, None, to)
}

/// The text of `target` made from `base`'s text: unchanged nodes stay as
/// written in `base`; changed and new nodes come from `source` (a function's
/// text of the same object) where it has them with the target's value, else
/// from [`super::emit`]; comments `source` has on a node win over `base`'s.
///
/// Output ends with a line break when `base` does (or when emitted).
///
/// Errors: the result does not parse back to `target` and no fallback
/// (the source's text, or the emitted document) does either — which means
/// `target` cannot be written as YAML (not produced by any reader).
pub fn merge(
    base: &YamlDoc,
    source: Option<&YamlDoc>,
    target: &Value,
) -> Result<String, CodecError> {
    let source = source.filter(|s| s.root().is_some());
    let comments = source.is_some_and(|s| has_new_comments(base, s));
    if same(base.value(), target) && !comments {
        return Ok(base.text().to_string());
    }
    if source.is_none()
        && let Some(text) = edit_scalars(base, target)
    {
        return Ok(text);
    }
    let seq = SeqIndent::of(base.text());
    // A document with anchors, aliases, tags or merge keys is edited too,
    // first keeping them (the edit goes inside anchored nodes; aliases and
    // merge keys stay, reading what the edited anchors hold), then, when
    // that does not read as the target, with the changed nodes written out
    // whole. Nodes whose value did not change keep their text either way,
    // and the result is read back whole (`edits_read_as` leaves such
    // documents to `reads_as`), so an edit that would change what an alias
    // or merge key reads is never taken.
    if let Some(root) = base.root() {
        let src_root = source.and_then(|s| {
            s.root().map(|r| Src {
                doc: s,
                node: r,
                value: s.value(),
                parent_col: 0,
                comment: None,
                body: None,
            })
        });
        let tries: &[bool] = if base.is_opaque() {
            &[true, false]
        } else {
            &[false]
        };
        for &keep_aliases in tries {
            let mut ed = Editor {
                b: base,
                seq,
                comments,
                keep_aliases,
                out: Vec::new(),
                commented: Vec::new(),
            };
            let ok = ed
                .value_at(Slot::Root, root, base.value(), target, src_root)
                .is_ok();
            if ok
                && let Some(text) = apply(base.text(), &mut ed.out)
                && (edits_read_as(base, root, &ed.out, target) || reads_as(&text, target))
            {
                return Ok(text);
            }
        }
    }
    #[cfg(test)]
    FALLBACKS.with(|f| f.set(f.get() + 1));
    // Fallbacks: the source's own text, else the emitted document.
    if let Some(s) = source
        && same_in_order(s.value(), target)
    {
        return Ok(with_newline(s.text().to_string()));
    }
    let text = emit::document(target, seq);
    if reads_as(&text, target) {
        Ok(text)
    } else {
        Err(CodecError::new(
            "the value cannot be written as YAML that reads back the same",
        ))
    }
}

/// The text of `target` made from `base`'s when the two differ only in
/// scalars that `base` writes on one line as values of block mapping
/// entries: each changed value is rewritten in place as [`merge`] writes it
/// without a source (kyaml's style, [`emit::scalar_text`]; the line's
/// comment stays), and nothing is parsed again. The common case is a
/// function's text handed to the next function with kpt's per-call ids
/// renumbered.
///
/// `None` when the shapes differ — keys added, removed or in another
/// order, sequences of other lengths, a changed value that is a collection,
/// null, written over several lines, in flow style, with properties, or a
/// sequence item — and the caller merges instead.
pub fn edit_scalars(base: &YamlDoc, target: &Value) -> Option<String> {
    if base.is_opaque() {
        return None;
    }
    let root = base.root()?;
    let mut splices = Vec::new();
    scalar_edits(base.text(), root, base.value(), target, &mut splices)?;
    apply(base.text(), &mut splices)
}

/// The splices that turn `node` (holding `old`) into `new`, per
/// [`edit_scalars`]; `None` when that cannot be done in place.
fn scalar_edits(
    t: &str,
    node: &Node,
    old: &Value,
    new: &Value,
    out: &mut Vec<Splice>,
) -> Option<()> {
    if node.props {
        return same(old, new).then_some(());
    }
    match (&node.kind, old, new) {
        (
            Kind::Map {
                flow: false,
                entries,
            },
            Value::Object(o),
            Value::Object(n),
        ) => {
            if entries.len() != o.len() || o.len() != n.len() {
                return None;
            }
            for ((e, (ko, vo)), (kn, vn)) in entries.iter().zip(o).zip(n) {
                if e.name != *ko || ko != kn || e.key.props {
                    return None;
                }
                match (&e.value.kind, vn) {
                    (
                        Kind::Scalar {
                            empty: false,
                            style,
                        },
                        Value::String(_) | Value::Number(_) | Value::Bool(_),
                    ) if !same(vo, vn) => {
                        let v = &e.value;
                        if v.props
                            || matches!(style, Style::Literal | Style::Folded)
                            || t[v.start..v.end].contains('\n')
                        {
                            return None;
                        }
                        let text = emit::scalar_text(vn, column(t, e.key.start));
                        if text.is_empty() || text.contains('\n') {
                            return None;
                        }
                        out.push(Splice {
                            start: v.start,
                            end: v.end,
                            text,
                        });
                    }
                    _ => scalar_edits(t, &e.value, vo, vn, out)?,
                }
            }
            Some(())
        }
        (Kind::Seq { flow: false, items }, Value::Array(o), Value::Array(n)) => {
            if items.len() != o.len() || o.len() != n.len() {
                return None;
            }
            for ((item, vo), vn) in items.iter().zip(o).zip(n) {
                if !same(vo, vn) {
                    // Items are edited by merge (dash lines, item comments).
                    if !is_block_collection(&item.node) {
                        return None;
                    }
                    scalar_edits(t, &item.node, vo, vn, out)?;
                }
            }
            Some(())
        }
        _ => same(old, new).then_some(()),
    }
}

/// The text [`merge`] makes of `base` edited to `target` without a source
/// by walking the tree, without the in-place path of [`edit_scalars`]
/// (`None` where that walk gives up): what that path must agree with.
#[cfg(test)]
pub(crate) fn merge_by_walk(base: &YamlDoc, target: &Value) -> Option<String> {
    let root = base.root()?;
    let mut ed = Editor {
        b: base,
        seq: SeqIndent::of(base.text()),
        comments: false,
        keep_aliases: false,
        out: Vec::new(),
        commented: Vec::new(),
    };
    ed.value_at(Slot::Root, root, base.value(), target, None)
        .ok()?;
    apply(base.text(), &mut ed.out)
}

#[cfg(test)]
thread_local! {
    /// Test hook: merges that fell back to whole-document text.
    pub(crate) static FALLBACKS: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

fn with_newline(s: String) -> String {
    super::terminate::with_final_newline(s)
}

/// True when `text` parses to `target`.
fn reads_as(text: &str, target: &Value) -> bool {
    super::tree::parse_value(text).is_ok_and(|v| same(&v, target))
}

/// The check of an edit that re-reads only what it touched: true when the
/// splices of `base`'s text leave every top-level entry they do not touch as
/// it was and the touched entries' new text, read on its own, holds exactly
/// `target`'s other entries. Such a document reads as `target` without
/// parsing it whole: a root block mapping whose keys all start lines at
/// column 0 is read entry by entry, each entry running from its key's line
/// to the next key's line (the comment lines before a key go with the entry
/// above it — comments hold no value).
///
/// False (the caller parses the whole result) when that shape does not hold:
/// another root, a splice across two entries, a touched entry whose new text
/// would not start a line at column 0 or end one, or a read that differs;
/// and for a document with anchors, aliases, tags or merge keys, where an
/// untouched entry's alias may read what a touched entry's anchor holds.
fn edits_read_as(base: &YamlDoc, root: &Node, splices: &[Splice], target: &Value) -> bool {
    if base.is_opaque() {
        return false;
    }
    let (
        Kind::Map {
            flow: false,
            entries,
        },
        Value::Object(old),
        Value::Object(new),
    ) = (&root.kind, base.value(), target)
    else {
        return false;
    };
    let t = base.text();
    if entries.is_empty()
        || entries
            .iter()
            .any(|e| e.key.props || column(t, e.key.start) != 0 || !old.contains_key(&e.name))
    {
        return false;
    }
    // Entry i runs from bounds[i] to bounds[i + 1].
    let mut bounds: Vec<usize> = Vec::with_capacity(entries.len() + 1);
    bounds.push(0);
    bounds.extend(entries[1..].iter().map(|e| line_start(t, e.key.start)));
    bounds.push(t.len());
    if bounds.windows(2).any(|w| w[0] > w[1]) {
        return false;
    }
    // Which entry each splice edits: an insertion at an entry's first byte
    // belongs to the entry above (text appended after its last line).
    let mut touched: Vec<Vec<&Splice>> = vec![Vec::new(); entries.len()];
    for s in splices {
        let i = match bounds[1..].iter().position(|&b| s.start < b) {
            Some(i) if i > 0 && s.start == s.end && s.start == bounds[i] => i - 1,
            Some(i) => i,
            None if s.start == t.len() => entries.len() - 1,
            None => return false,
        };
        if s.end > bounds[i + 1] {
            return false;
        }
        touched[i].push(s);
    }
    let mut check = String::new();
    for (i, splices) in touched.iter_mut().enumerate() {
        if splices.is_empty() {
            let e = &entries[i];
            if !same_opt(get(new, &e.name), get(old, &e.name)) {
                return false;
            }
            continue;
        }
        splices.sort_by_key(|s| (s.start, s.end));
        let (from, to) = (bounds[i], bounds[i + 1]);
        let mut part = String::with_capacity(to - from + 64);
        let mut at = from;
        for s in splices.iter() {
            if s.start < at {
                return false;
            }
            part.push_str(&t[at..s.start]);
            part.push_str(&s.text);
            at = s.end;
        }
        part.push_str(&t[at..to]);
        let first_content = part.lines().find(|l| {
            let l = l.trim();
            !l.is_empty() && !l.starts_with('#')
        });
        if first_content.is_some_and(|l| l.starts_with([' ', '\t']))
            || (to < t.len() && !part.is_empty() && !part.ends_with('\n'))
        {
            return false;
        }
        check.push_str(&part);
    }
    let read = match super::tree::parse_value(&check) {
        Ok(Value::Object(m)) => m,
        Ok(Value::Null) => Map::new(),
        _ => return false,
    };
    let kept = entries
        .iter()
        .zip(&touched)
        .filter(|(_, s)| s.is_empty())
        .count();
    kept + read.len() == new.len()
        && read.iter().all(|(k, v)| {
            get(new, k).is_some_and(|n| same(n, v))
                && !entries
                    .iter()
                    .zip(&touched)
                    .any(|(e, s)| s.is_empty() && &e.name == k)
        })
}

/// True when the source has a comment text the base does not have (as many
/// times): only then can a function have written a comment to carry over.
fn has_new_comments(base: &YamlDoc, source: &YamlDoc) -> bool {
    let mut have: std::collections::HashMap<&str, usize> = std::collections::HashMap::new();
    for c in base.comment_texts() {
        *have.entry(c).or_default() += 1;
    }
    for c in source.comment_texts() {
        match have.get_mut(c) {
            Some(n) if *n > 0 => *n -= 1,
            _ => return true,
        }
    }
    false
}

/// A byte-range replacement of the base text.
struct Splice {
    start: usize,
    end: usize,
    text: String,
}

/// Applies `splices` (non-overlapping; insertions at one position in
/// recording order); `None` when two overlap.
fn apply(text: &str, splices: &mut [Splice]) -> Option<String> {
    let mut order: Vec<usize> = (0..splices.len()).collect();
    order.sort_by_key(|&i| (splices[i].start, splices[i].end, i));
    let mut out = String::with_capacity(text.len() + 64);
    let mut at = 0;
    for i in order {
        let s = &splices[i];
        if s.start < at || s.end > text.len() || s.start > s.end {
            return None;
        }
        out.push_str(&text[at..s.start]);
        out.push_str(&s.text);
        at = s.end;
    }
    out.push_str(&text[at..]);
    Some(out)
}

/// Where a value sits.
#[derive(Clone, Copy)]
enum Slot<'n> {
    /// The document root.
    Root,
    /// The value of a mapping entry.
    Entry(&'n Entry),
    /// A sequence item.
    Item(&'n Item),
}

/// A node of the source (the function's text) that corresponds to a node
/// of the base.
#[derive(Clone, Copy)]
struct Src<'a> {
    doc: &'a YamlDoc,
    node: &'a Node,
    value: &'a Value,
    /// Column of the key (entry value) or dash (item) that holds the node.
    parent_col: usize,
    /// The trailing comment on the source's key or dash line.
    comment: Option<&'a str>,
    /// For an entry value: where the lines after the key line start (a
    /// block value's comment lines before its first child start there).
    body: Option<usize>,
}

/// A source mapping entry with its value.
type SrcEntry<'a> = (&'a YamlDoc, &'a Entry, &'a Value);

impl<'a> Src<'a> {
    fn of_entry((doc, e, value): SrcEntry<'a>) -> Self {
        let t = doc.text();
        Src {
            doc,
            node: &e.value,
            value,
            parent_col: column(t, e.key.start),
            comment: line_comment_of_entry(doc, e),
            body: Some(after_line(t, e.key.start)),
        }
    }

    fn of_item(doc: &'a YamlDoc, item: &'a Item, value: &'a Value) -> Self {
        Src {
            doc,
            node: &item.node,
            value,
            parent_col: column(doc.text(), item.dash),
            comment: line_comment_of_item(doc, item),
            body: None,
        }
    }
}

/// The trailing comment on an entry's key line, when the line holds the
/// whole value (or the value is a block, whose line comment sits there).
fn line_comment_of_entry<'a>(d: &'a YamlDoc, e: &Entry) -> Option<&'a str> {
    if !one_line_entry(d, e) {
        return None;
    }
    let t = d.text();
    trailing_comment(d, e.colon.unwrap_or(e.key.end), line_end(t, e.key.start))
}

/// The trailing comment on an item's dash line, when it holds the whole item.
fn line_comment_of_item<'a>(d: &'a YamlDoc, i: &Item) -> Option<&'a str> {
    let t = d.text();
    let inline = !is_block_collection(&i.node) && line_start(t, i.end()) == line_start(t, i.dash);
    if !inline {
        return None;
    }
    trailing_comment(d, i.dash, line_end(t, i.dash))
}

struct Editor<'a> {
    b: &'a YamlDoc,
    seq: SeqIndent,
    /// The source has comments the base lacks: carry them over.
    comments: bool,
    /// Keep anchors, aliases and merge keys (a document that has them):
    /// edit inside anchored collections, leave aliases and merge keys as
    /// they are, and leave keys a merge key brings in to it; the caller
    /// reads the result back whole to see that they read the target.
    keep_aliases: bool,
    out: Vec<Splice>,
    /// Starts of lines whose comment an edit already set.
    commented: Vec<usize>,
}

/// An edit the editor does not make in place: the caller replaces the
/// enclosing node instead.
struct Unsupported;

type Edit = Result<(), Unsupported>;

/// The entries of a block mapping node with its value, if it is one.
fn map_parts<'a>(n: &'a Node, v: &'a Value) -> Option<(&'a [Entry], &'a Map<String, Value>)> {
    match (&n.kind, v) {
        (
            Kind::Map {
                entries,
                flow: false,
            },
            Value::Object(m),
        ) => Some((entries, m)),
        _ => None,
    }
}

/// The items of a block sequence node with its values, if it is one.
fn seq_parts<'a>(n: &'a Node, v: &'a Value) -> Option<(&'a [Item], &'a [Value])> {
    match (&n.kind, v) {
        (Kind::Seq { items, flow: false }, Value::Array(a)) if items.len() == a.len() => {
            Some((items, a))
        }
        _ => None,
    }
}

impl<'a> Editor<'a> {
    fn text(&self) -> &'a str {
        self.b.text()
    }

    fn splice(&mut self, start: usize, end: usize, text: impl Into<String>) {
        self.out.push(Splice {
            start,
            end,
            text: text.into(),
        });
    }

    /// True when a splice recorded since `mark` touches the line comment
    /// position of the line `line_from..line_end` (so the caller must not
    /// edit that comment separately).
    fn touched_line(&self, mark: usize, line_from: usize, line_end: usize) -> bool {
        let comment = trailing_comment_span(self.b, line_from, line_end);
        self.out[mark..].iter().any(|s| {
            s.start >= line_from
                && s.start <= line_end
                && (s.end > line_end
                    || s.text.contains('\n')
                    || comment.is_some_and(|(a, _)| s.start <= a && s.end > a))
        })
    }

    /// Edits the value `node` (currently `old`) into `new`.
    fn value_at(
        &mut self,
        slot: Slot<'a>,
        node: &'a Node,
        old: &'a Value,
        new: &Value,
        src: Option<Src<'a>>,
    ) -> Edit {
        // A source node with properties lends its text (which starts after
        // them) only where the base node has properties that stay.
        let src = src.filter(|s| !s.node.props || (self.keep_aliases && node.props));
        if same(old, new) {
            if self.comments
                && let Some(src) = src
            {
                self.comments_within(node, old, src);
            }
            return Ok(());
        }
        if self.keep_aliases && node.kind == Kind::Alias {
            // It reads what its anchor holds once that is edited.
            return Ok(());
        }
        if node.props && !(self.keep_aliases && is_block_collection(node)) {
            return self.replace(slot, node, new, src);
        }
        let mark = self.out.len();
        let done = match (&node.kind, old, new) {
            (
                Kind::Map {
                    flow: false,
                    entries,
                },
                Value::Object(o),
                Value::Object(n),
            ) if !n.is_empty() => {
                let s = src.and_then(|s| map_parts(s.node, s.value).map(|(e, m)| (s.doc, e, m)));
                self.map(entries, o, n, s)
            }
            (Kind::Seq { flow: false, items }, Value::Array(o), Value::Array(n))
                if !n.is_empty() =>
            {
                let s = src.and_then(|s| seq_parts(s.node, s.value).map(|(i, a)| (s.doc, i, a)));
                self.seq(items, o, n, s)
            }
            _ => Err(Unsupported),
        };
        if done.is_ok() {
            return Ok(());
        }
        self.out.truncate(mark);
        self.replace(slot, node, new, src)
    }

    /// Edits a block mapping's entries.
    fn map(
        &mut self,
        entries: &'a [Entry],
        old: &'a Map<String, Value>,
        new: &Map<String, Value>,
        src: Option<(&'a YamlDoc, &'a [Entry], &'a Map<String, Value>)>,
    ) -> Edit {
        let t = self.text();
        let first = entries.first().ok_or(Unsupported)?;
        let col = column(t, first.key.start);
        let src_entry = |name: &str| -> Option<SrcEntry<'a>> {
            let (d, es, m) = src?;
            let e = es.iter().find(|e| e.name == name)?;
            Some((d, e, get(m, name)?))
        };
        // With aliases kept, a merge key (`<<: *base`) stays as written.
        let keep_aliases = self.keep_aliases;
        let merge_key = |e: &Entry| keep_aliases && e.name == "<<";
        if entries.iter().all(|e| merge_key(e) || !has(new, &e.name)) {
            // Nothing of the old mapping stays: replace it whole.
            return Err(Unsupported);
        }
        let mut removed_until = 0;
        for (i, e) in entries.iter().enumerate() {
            if merge_key(e) {
                continue;
            }
            if e.key.props || !matches!(e.key.kind, Kind::Scalar { .. }) {
                return Err(Unsupported);
            }
            let Some(n) = get(new, &e.name) else {
                if e.key.start >= removed_until {
                    removed_until = self.remove_entry(entries, i, new)?;
                }
                continue;
            };
            let o = get(old, &e.name).ok_or(Unsupported)?;
            let se = src_entry(&e.name);
            let mark = self.out.len();
            self.value_at(Slot::Entry(e), &e.value, o, n, se.map(Src::of_entry))?;
            if self.comments
                && let Some((sd, x, _)) = se
            {
                let from = e.colon.unwrap_or(e.key.end);
                let touched = self.touched_line(mark, from, line_end(t, e.key.start));
                // A key moved up onto a dash line takes no comment lines.
                let moved = line_start(t, e.key.start) < removed_until;
                self.carry_comments(e, sd, x, !touched, !moved);
            }
        }
        if entries.iter().any(merge_key) {
            // A key a merge key brought in goes only with it (the whole
            // mapping is then written out).
            let written = |k: &String| entries.iter().any(|e| &e.name == k);
            if old.keys().any(|k| !written(k) && !has(new, k)) {
                return Err(Unsupported);
            }
        }
        let added: Vec<(&String, &Value)> = new.iter().filter(|(k, _)| !has(old, k)).collect();
        if added.is_empty() {
            return Ok(());
        }
        let last = entries.last().ok_or(Unsupported)?;
        let at = after_line(t, last.end());
        let mut text = String::new();
        if at == t.len() && !t.ends_with('\n') {
            text.push('\n');
        }
        for (k, v) in added {
            text.push_str(&self.entry_text(k, v, src_entry(k), col));
        }
        self.splice(at, at, text);
        Ok(())
    }

    /// Removes entry `i` of a block mapping (with the comment lines above
    /// it); returns the end of the removed text.
    fn remove_entry(
        &mut self,
        entries: &'a [Entry],
        i: usize,
        new: &Map<String, Value>,
    ) -> Result<usize, Unsupported> {
        let t = self.text();
        let e = &entries[i];
        if first_on_line(t, e.key.start) {
            let line = line_start(t, e.key.start);
            let start = head_comments(self.b, e.key.start).map_or(line, |(s, _)| s);
            // The document's leading comments stay with the document.
            let start = if start < line && is_document_head(t, start) {
                line
            } else {
                start
            };
            let end = after_line(t, e.end());
            self.splice(start, end, "");
            return Ok(end);
        }
        // `- key: v` (the first entry of an item): the next kept key moves up.
        let next = entries[i + 1..]
            .iter()
            .find(|x| has(new, &x.name))
            .ok_or(Unsupported)?;
        self.splice(e.key.start, next.key.start, "");
        Ok(next.key.start)
    }

    /// Edits a block sequence's items.
    fn seq(
        &mut self,
        items: &'a [Item],
        old: &'a [Value],
        new: &[Value],
        src: Option<(&'a YamlDoc, &'a [Item], &'a [Value])>,
    ) -> Edit {
        let t = self.text();
        let first = items.first().ok_or(Unsupported)?;
        if items.len() != old.len() {
            return Err(Unsupported);
        }
        let dash_col = column(t, first.dash);
        // Source items line up with the new items when they have as many.
        let src_item = |j: usize| -> Option<(&'a YamlDoc, &'a Item, &'a Value)> {
            let (d, is, vs) = src?;
            (is.len() == new.len()).then(|| (d, &is[j], &vs[j]))
        };
        let prefix = old.iter().zip(new).take_while(|(a, b)| same(a, b)).count();
        let max_suffix = old.len().min(new.len()) - prefix;
        let suffix = old
            .iter()
            .rev()
            .zip(new.iter().rev())
            .take(max_suffix)
            .take_while(|(a, b)| same(a, b))
            .count();
        if self.comments {
            for i in (0..prefix).chain(old.len() - suffix..old.len()) {
                let j = if i < prefix {
                    i
                } else {
                    i + new.len() - old.len()
                };
                if let Some((sd, si, sv)) = src_item(j) {
                    self.comments_within(&items[i].node, &old[i], Src::of_item(sd, si, sv));
                    self.carry_item_comments(&items[i], sd, si, true);
                }
            }
        }
        let old_mid = old.len() - prefix - suffix;
        let new_mid = new.len() - prefix - suffix;
        let paired = old_mid.min(new_mid);
        for k in 0..paired {
            let i = prefix + k;
            let item = &items[i];
            let s = src_item(i);
            let mark = self.out.len();
            self.value_at(
                Slot::Item(item),
                &item.node,
                &old[i],
                &new[i],
                s.map(|(d, si, v)| Src::of_item(d, si, v)),
            )?;
            if self.comments
                && let Some((sd, si, _)) = s
            {
                let touched = self.touched_line(mark, item.dash, line_end(t, item.dash));
                self.carry_item_comments(item, sd, si, !touched);
            }
        }
        for k in paired..old_mid {
            let item = &items[prefix + k];
            if !first_on_line(t, item.dash) {
                return Err(Unsupported);
            }
            let start =
                head_comments(self.b, item.dash).map_or(line_start(t, item.dash), |(s, _)| s);
            self.splice(start, after_line(t, item.end()), "");
        }
        if new_mid > paired {
            // Before the first item after the edited middle, or after the last.
            let (at, lead) = match items.get(prefix + old_mid) {
                Some(next) if first_on_line(t, next.dash) => (
                    head_comments(self.b, next.dash).map_or(line_start(t, next.dash), |(s, _)| s),
                    "",
                ),
                Some(_) => return Err(Unsupported),
                None => {
                    let at = after_line(t, items.last().ok_or(Unsupported)?.end());
                    let nl = if at == t.len() && !t.ends_with('\n') {
                        "\n"
                    } else {
                        ""
                    };
                    (at, nl)
                }
            };
            let mut text = lead.to_string();
            for k in paired..new_mid {
                let j = prefix + k;
                text.push_str(&self.item_text(&new[j], src_item(j), dash_col));
            }
            self.splice(at, at, text);
        }
        Ok(())
    }

    /// Replaces the whole value `node` with the text of `new`.
    fn replace(
        &mut self,
        slot: Slot<'a>,
        node: &'a Node,
        new: &Value,
        src: Option<Src<'a>>,
    ) -> Edit {
        let t = self.text();
        // The source's line comment on the key line is kept when the source
        // has the value, even in another key order (its text is then not
        // taken).
        let src_comment = src.filter(|s| same(s.value, new)).and_then(|s| s.comment);
        let src = src.filter(|s| same_in_order(s.value, new));
        let empty = matches!(node.kind, Kind::Scalar { empty: true, .. });
        let old_block = is_block_collection(node);
        match slot {
            Slot::Root => {
                match src {
                    // The whole document as the function wrote it.
                    Some(s) => self.splice(0, t.len(), with_newline(s.doc.text().to_string())),
                    None => {
                        let text = emit::document(new, self.seq);
                        let tail = trailing_comment_span(self.b, node.end, line_end(t, node.end))
                            .map_or(node.end, |(_, b)| b);
                        self.splice(line_start(t, node.start), tail, text.trim_end_matches('\n'));
                    }
                }
                Ok(())
            }
            Slot::Entry(e) => {
                let key_col = column(t, e.key.start);
                let colon = e.colon.ok_or(Unsupported)?;
                let key_line_end = line_end(t, e.key.start);
                let next_line = !empty && node.start > key_line_end;
                let new_text = self.entry_value_text(new, src, key_col, is_flow(node));
                // The source's line comment wins; else the base's stays.
                let comment = src_comment.or_else(|| trailing_comment(self.b, colon, key_line_end));
                // A comment after the old value's last line goes with it.
                let tail = trailing_comment_span(self.b, node.end, line_end(t, node.end))
                    .map_or(node.end, |(_, b)| b);
                match new_text {
                    NewText::Inline(s) if !(old_block || empty || next_line) => {
                        self.inline_over_inline(node, s, colon, comment);
                    }
                    NewText::Inline(s) => {
                        let end = if empty { key_line_end } else { tail };
                        // An empty value (a null written as nothing) leaves
                        // no space after the colon.
                        let text = match (s.is_empty(), comment) {
                            (true, None) => String::new(),
                            (true, Some(c)) => format!(" {c}"),
                            (false, _) => format!(" {}", with_line_comment(&s, comment)),
                        };
                        self.splice(colon + 1, end.max(colon + 1), text);
                    }
                    NewText::Block(text) if old_block => {
                        // With the source's lines, the comment lines before
                        // the first child are the source's too.
                        let start = if src.is_some() {
                            after_line(t, e.key.start).min(line_start(t, node.start))
                        } else {
                            line_start(t, node.start)
                        };
                        self.splice(start, tail, text);
                    }
                    NewText::Block(s) => {
                        let mut text = String::new();
                        if let Some(c) = comment {
                            text.push(' ');
                            text.push_str(c);
                        }
                        text.push('\n');
                        text.push_str(&s);
                        let end = if next_line {
                            tail
                        } else {
                            tail.max(key_line_end)
                        };
                        self.splice(colon + 1, end, text);
                    }
                }
                Ok(())
            }
            Slot::Item(item) => {
                let dash_col = column(t, item.dash);
                let same_line = !empty && line_start(t, node.start) == line_start(t, item.dash);
                // Where the value's first line starts.
                let first_col = if same_line {
                    column(t, node.start)
                } else {
                    dash_col + 2
                };
                let (text, with_comment) =
                    self.item_value_text(new, src, dash_col, first_col, is_flow(node));
                if empty {
                    if !text.is_empty() {
                        self.splice(item.dash + 1, item.dash + 1, format!(" {text}"));
                    }
                } else if same_line && with_comment {
                    // The source's text brings its own line comment.
                    let tail = trailing_comment_span(self.b, node.end, line_end(t, node.end))
                        .map_or(node.end, |(_, b)| b);
                    self.splice(node.start, tail, text);
                    self.commented.push(line_start(t, node.start));
                } else if same_line {
                    let comment = src
                        .and_then(|s| s.comment)
                        .or_else(|| trailing_comment(self.b, item.dash, line_end(t, item.dash)));
                    self.inline_over_inline(node, text, item.dash, comment);
                } else {
                    let pad = " ".repeat(first_col);
                    self.splice(line_start(t, node.start), node.end, format!("{pad}{text}"));
                }
                Ok(())
            }
        }
    }

    /// Replaces a value written on its key's (or dash's) line with `text`;
    /// a `|`/`>` block takes the line's comment onto its header line.
    fn inline_over_inline(
        &mut self,
        node: &Node,
        text: String,
        from: usize,
        comment: Option<&str>,
    ) {
        let t = self.text();
        let old_comment = trailing_comment_span(self.b, from, line_end(t, node.start));
        if text.contains('\n') {
            // The line's comment cannot follow a multi-line value: it goes
            // onto a block's header line, or is dropped.
            let end = old_comment.map_or(node.end, |(_, b)| b.max(node.end));
            let tail = trailing_comment_span(self.b, node.end, line_end(t, node.end))
                .map_or(end, |(_, b)| b.max(end));
            let text = if text.starts_with(['|', '>']) {
                with_line_comment(&text, comment)
            } else {
                text
            };
            self.splice(node.start, tail, text);
        } else {
            let base_comment = old_comment.map(|(a, b)| t[a..b].trim_end());
            // An old value over several lines takes the comment on its last
            // line with it.
            let end = if line_start(t, node.end) != line_start(t, node.start) {
                trailing_comment_span(self.b, node.end, line_end(t, node.end))
                    .map_or(node.end, |(_, b)| b)
            } else {
                node.end
            };
            // An empty value (a null written as nothing) takes the space
            // before it away.
            let start = if text.is_empty() {
                t[..node.start].trim_end_matches([' ', '\t']).len()
            } else {
                node.start
            };
            match comment {
                Some(c) if base_comment != Some(c) => {
                    let end = old_comment.map_or(end, |(_, b)| b.max(end));
                    self.splice(start, end, format!("{text} {c}"));
                    self.commented.push(line_start(t, node.start));
                }
                Some(_) if text.is_empty() => {
                    // The line's comment stays: keep one space before it.
                    let gap = if t[node.end..].starts_with([' ', '\t']) {
                        ""
                    } else {
                        " "
                    };
                    self.splice(start, node.end, gap);
                }
                _ => self.splice(start, end, text),
            }
        }
    }

    /// The text of a new entry value whose key is at column `col`: inline
    /// (after `key: `) or block lines.
    fn entry_value_text(
        &self,
        new: &Value,
        src: Option<Src<'a>>,
        col: usize,
        flow: bool,
    ) -> NewText {
        if let Some(s) = src {
            let dt = s.doc.text();
            let delta = col as isize - s.parent_col as isize;
            if is_block_collection(s.node) {
                let end = block_end(s.doc, s.node);
                let start = s
                    .body
                    .filter(|b| *b <= line_start(dt, s.node.start))
                    .unwrap_or_else(|| line_start(dt, s.node.start));
                let shifts = seq_shifts(s.doc, s.node, Some(s.parent_col), self.seq);
                return NewText::Block(shift_lines(dt, start, end, delta, true, &shifts));
            }
            return NewText::Inline(shift_text(dt, s.node.start, s.node.end, delta, false));
        }
        if emit::is_inline(new) {
            return NewText::Inline(emit::scalar_text(new, col));
        }
        if flow {
            return NewText::Inline(emit::flow(new));
        }
        let child = match (new, self.seq) {
            (Value::Array(_), SeqIndent::Compact) => col,
            _ => col + 2,
        };
        let block = emit::block(new, child, self.seq);
        NewText::Block(block.strip_suffix('\n').unwrap_or(&block).to_string())
    }

    /// The text of a new item value whose dash is at `dash_col` and whose
    /// first line starts at column `first_col` (continuation lines are
    /// indented to match), and whether it ends with the source's comment.
    fn item_value_text(
        &self,
        new: &Value,
        src: Option<Src<'a>>,
        dash_col: usize,
        first_col: usize,
        flow: bool,
    ) -> (String, bool) {
        if let Some(s) = src {
            let dt = s.doc.text();
            if is_block_collection(s.node) {
                let delta = first_col as isize - column(dt, s.node.start) as isize;
                let end = block_end(s.doc, s.node);
                let shifts = seq_shifts(s.doc, s.node, None, self.seq);
                return (
                    shift_lines(dt, s.node.start, end, delta, false, &shifts),
                    end > s.node.end,
                );
            }
            let delta = dash_col as isize - s.parent_col as isize;
            return (
                shift_text(dt, s.node.start, s.node.end, delta, false),
                false,
            );
        }
        if emit::is_inline(new) {
            return (emit::scalar_text(new, dash_col), false);
        }
        if flow {
            return (emit::flow(new), false);
        }
        let block = emit::block(new, first_col, self.seq);
        (block.trim_end_matches('\n').trim_start().to_string(), false)
    }

    /// `key: value` lines (ending with a line break) for a new entry at
    /// column `col`, from the source's entry where it has the same value.
    fn entry_text(&self, k: &str, v: &Value, src: Option<SrcEntry<'a>>, col: usize) -> String {
        let pad = " ".repeat(col);
        if let Some((d, e, sv)) = src
            && !e.value.props
            && !e.key.props
        {
            let dt = d.text();
            if same_in_order(sv, v) {
                let delta = col as isize - column(dt, e.key.start) as isize;
                let end = line_end(dt, e.end());
                let shifts = seq_shifts(d, &e.value, Some(column(dt, e.key.start)), self.seq);
                let body = if first_on_line(dt, e.key.start) {
                    let start = head_comments(d, e.key.start)
                        .map_or(line_start(dt, e.key.start), |(s, _)| s);
                    shift_lines(dt, start, end, delta, true, &shifts)
                } else {
                    format!(
                        "{pad}{}",
                        shift_lines(dt, e.key.start, end, delta, false, &shifts)
                    )
                };
                return format!("{body}\n");
            }
            if let (Value::Object(m), Some((entries, sm))) = (v, map_parts(&e.value, sv))
                && !m.is_empty()
            {
                let mut out = format!("{pad}{}:", emit::key(k));
                if let Some(c) = line_comment_of_entry(d, e) {
                    out.push(' ');
                    out.push_str(c);
                }
                out.push('\n');
                for (k2, v2) in m {
                    let se = entries
                        .iter()
                        .find(|x| &x.name == k2)
                        .and_then(|x| Some((d, x, sm.get(k2)?)));
                    out.push_str(&self.entry_text(k2, v2, se, col + 2));
                }
                return out;
            }
        }
        emit::entry_block(k, v, col, self.seq)
    }

    /// `- value` lines (ending with a line break) for a new item whose dash
    /// is at column `col`.
    fn item_text(
        &self,
        v: &Value,
        src: Option<(&'a YamlDoc, &'a Item, &'a Value)>,
        col: usize,
    ) -> String {
        if let Some((d, it, sv)) = src
            && same_in_order(sv, v)
            && !it.node.props
        {
            let dt = d.text();
            let delta = col as isize - column(dt, it.dash) as isize;
            let end = line_end(dt, it.end());
            let shifts = seq_shifts(d, &it.node, None, self.seq);
            let body = if first_on_line(dt, it.dash) {
                let start = head_comments(d, it.dash).map_or(line_start(dt, it.dash), |(s, _)| s);
                shift_lines(dt, start, end, delta, true, &shifts)
            } else {
                format!(
                    "{}{}",
                    " ".repeat(col),
                    shift_lines(dt, it.dash, end, delta, false, &shifts)
                )
            };
            return format!("{body}\n");
        }
        emit::block(&Value::Array(vec![v.clone()]), col, self.seq)
    }

    /// Carries the source's comments into an unchanged subtree.
    fn comments_within(&mut self, node: &'a Node, value: &'a Value, src: Src<'a>) {
        let sd = src.doc;
        if let (Some((entries, m)), Some((se, sm))) =
            (map_parts(node, value), map_parts(src.node, src.value))
        {
            for e in entries {
                let (Some(s), Some(v), Some(svv)) = (
                    se.iter().find(|s| s.name == e.name),
                    get(m, &e.name),
                    get(sm, &e.name),
                ) else {
                    continue;
                };
                self.comments_within(&e.value, v, Src::of_entry((sd, s, svv)));
                self.carry_comments(e, sd, s, true, true);
            }
        } else if let (Some((items, a)), Some((si, sa))) =
            (seq_parts(node, value), seq_parts(src.node, src.value))
            && items.len() == si.len()
        {
            for k in 0..items.len() {
                self.comments_within(&items[k].node, &a[k], Src::of_item(sd, &si[k], &sa[k]));
                self.carry_item_comments(&items[k], sd, &si[k], true);
            }
        }
    }

    /// The source's line comment (when `line`) and comment lines above an
    /// entry win over the base's when the source has them.
    fn carry_comments(
        &mut self,
        e: &'a Entry,
        sd: &'a YamlDoc,
        se: &'a Entry,
        line: bool,
        head: bool,
    ) {
        if line && one_line_entry(self.b, e) && one_line_entry(sd, se) {
            let from = e.colon.unwrap_or(e.key.end);
            let s_from = se.colon.unwrap_or(se.key.end);
            self.carry_line_comment(e.key.start, from, sd, se.key.start, s_from);
        }
        if head {
            self.carry_head_comments(e.key.start, sd, se.key.start);
        }
    }

    fn carry_item_comments(&mut self, item: &'a Item, sd: &'a YamlDoc, si: &'a Item, line: bool) {
        let inline = |d: &YamlDoc, i: &Item| {
            !is_block_collection(&i.node)
                && line_start(d.text(), i.end()) == line_start(d.text(), i.dash)
        };
        if line && inline(self.b, item) && inline(sd, si) {
            self.carry_line_comment(item.dash, item.dash, sd, si.dash, si.dash);
        }
        self.carry_head_comments(item.dash, sd, si.dash);
    }

    /// Sets the trailing comment of the line of `at` (looking after
    /// `from`) to the source's, when the source has one that differs.
    fn carry_line_comment(
        &mut self,
        at: usize,
        from: usize,
        sd: &'a YamlDoc,
        s_at: usize,
        s_from: usize,
    ) {
        let t = self.text();
        if self.commented.contains(&line_start(t, at)) {
            return;
        }
        let end = line_end(t, at);
        let s_end = line_end(sd.text(), s_at);
        let Some((sa, sb)) = trailing_comment_span(sd, s_from, s_end) else {
            return;
        };
        let st = sd.text();
        let s_text = st[sa..sb].trim_end();
        // The space before the comment as the source wrote it.
        let s_gap = &st[st[..sa].trim_end().len()..sa];
        let s_gap = if s_gap.is_empty() { " " } else { s_gap };
        match trailing_comment_span(self.b, from, end) {
            Some((a, b)) if t[a..b].trim_end() == s_text => {}
            Some((a, b)) => {
                let code_end = t[..a].trim_end().len();
                self.splice(code_end, b, format!("{s_gap}{s_text}"));
            }
            None => {
                let code_end = t[..end].trim_end().len();
                self.splice(code_end, code_end, format!("{s_gap}{s_text}"));
            }
        }
    }

    /// Replaces the comment lines above `at` with the source's (above
    /// `s_at`) when the source has comment lines there that differ.
    fn carry_head_comments(&mut self, at: usize, sd: &'a YamlDoc, s_at: usize) {
        let t = self.text();
        if !first_on_line(t, at) || !first_on_line(sd.text(), s_at) {
            return;
        }
        let Some((_, s_lines)) = head_comments(sd, s_at) else {
            return;
        };
        let mine = head_comments(self.b, at);
        if mine.as_ref().is_some_and(|(_, l)| l == &s_lines) {
            return;
        }
        let pad = " ".repeat(column(t, at));
        let text: String = s_lines.iter().map(|l| format!("{pad}{l}\n")).collect();
        match mine {
            Some((start, _)) => self.splice(start, line_start(t, at), text),
            None => {
                let at = line_start(t, at);
                self.splice(at, at, text);
            }
        }
    }
}

/// End of a block collection with the comment on its last line.
fn block_end(doc: &YamlDoc, node: &Node) -> usize {
    let t = doc.text();
    trailing_comment_span(doc, node.end, line_end(t, node.end)).map_or(node.end, |(_, b)| b)
}

/// `text` (a value written after `key: ` or `- `) with `comment` on its
/// first line: after a `|`/`>` block's header (unless the header, taken
/// from a function's text, has its own comment), else at the end.
fn with_line_comment(text: &str, comment: Option<&str>) -> String {
    let Some(c) = comment else {
        return text.to_string();
    };
    match text.split_once('\n') {
        Some((header, _)) if text.starts_with(['|', '>']) && header_has_comment(header) => {
            text.to_string()
        }
        Some((header, rest)) if text.starts_with(['|', '>']) => format!("{header} {c}\n{rest}"),
        _ => format!("{text} {c}"),
    }
}

/// True when a block scalar's header line (`|2- # note`) ends with a comment.
fn header_has_comment(header: &str) -> bool {
    header[1..]
        .trim_start_matches(|c: char| c.is_ascii_digit() || c == '+' || c == '-')
        .trim_start()
        .starts_with('#')
}

/// New text for a value.
enum NewText {
    /// Written after `key: ` / `- `; continuation lines already indented.
    Inline(String),
    /// Whole lines (no final line break).
    Block(String),
}

/// A non-empty flow collection: kept in flow style when it changes.
fn is_flow(node: &Node) -> bool {
    match &node.kind {
        Kind::Map {
            flow: true,
            entries,
        } => !entries.is_empty(),
        Kind::Seq { flow: true, items } => !items.is_empty(),
        _ => false,
    }
}

fn is_block_collection(node: &Node) -> bool {
    matches!(
        node.kind,
        Kind::Map { flow: false, .. } | Kind::Seq { flow: false, .. }
    )
}

/// The entry's key line holds its whole value (or the value is a block,
/// whose line comment sits on the key line).
fn one_line_entry(d: &YamlDoc, e: &Entry) -> bool {
    let t = d.text();
    is_block_collection(&e.value)
        || matches!(
            e.value.kind,
            Kind::Scalar {
                style: Style::Literal | Style::Folded,
                ..
            }
        )
        || line_start(t, e.value.end) == line_start(t, e.key.start)
}

/// Start of the line after the one holding `pos` (or the end of the text).
fn after_line(t: &str, pos: usize) -> usize {
    match t[pos..].find('\n') {
        Some(i) => pos + i + 1,
        None => t.len(),
    }
}

/// Only blanks before `pos` on its line.
fn first_on_line(t: &str, pos: usize) -> bool {
    t[line_start(t, pos)..pos]
        .bytes()
        .all(|b| b == b' ' || b == b'\t')
}

/// `pos` starts the document's leading comment block.
fn is_document_head(t: &str, pos: usize) -> bool {
    t[..pos].trim().is_empty()
}

/// The trailing comment text on the line between `from` and `end`.
fn trailing_comment(doc: &YamlDoc, from: usize, end: usize) -> Option<&str> {
    trailing_comment_span(doc, from, end).map(|(a, b)| doc.text()[a..b].trim_end())
}

fn trailing_comment_span(doc: &YamlDoc, from: usize, end: usize) -> Option<(usize, usize)> {
    doc.comments()
        .iter()
        .find(|c| c.trailing && c.start >= from && c.start < end)
        .map(|c| (c.start, c.end))
}

/// The own-line comments directly above the line of `pos` (no blank line
/// in between): start of the first one's line and their texts.
fn head_comments(doc: &YamlDoc, pos: usize) -> Option<(usize, Vec<String>)> {
    let t = doc.text();
    let mut start = line_start(t, pos);
    let mut lines = Vec::new();
    while start > 0 {
        let prev = line_start(t, start - 1);
        let line = t[prev..start - 1].trim();
        if !line.starts_with('#') {
            break;
        }
        // Only real comments (not `#` inside a block scalar).
        if !doc
            .comments()
            .iter()
            .any(|c| c.start >= prev && c.start < start && !c.trailing)
        {
            break;
        }
        lines.push(line.to_string());
        start = prev;
    }
    if lines.is_empty() {
        return None;
    }
    lines.reverse();
    Some((start, lines))
}

/// `t[start..end]` with every line after the first (or every line, with
/// `all`) shifted right by `delta` columns (left when negative; only
/// leading blanks are removed).
fn shift_text(t: &str, start: usize, end: usize, delta: isize, all: bool) -> String {
    shift_lines(t, start, end, delta, all, &[])
}

/// Byte ranges of a source text whose lines move by a further number of
/// columns (see [`seq_shifts`]).
type Shifts = Vec<(usize, usize, isize)>;

/// The moves that give the block sequences under mapping keys within
/// `node` (itself one when `key_col` is its key's column) the indentation
/// `want`: a function's text goes into a file in that file's sequence style,
/// as kpt writes it.
fn seq_shifts(doc: &YamlDoc, node: &Node, key_col: Option<usize>, want: SeqIndent) -> Shifts {
    let mut out = Vec::new();
    collect_seq_shifts(doc, node, key_col, want, &mut out);
    out
}

fn collect_seq_shifts(
    doc: &YamlDoc,
    node: &Node,
    key_col: Option<usize>,
    want: SeqIndent,
    out: &mut Shifts,
) {
    let t = doc.text();
    match &node.kind {
        Kind::Map {
            flow: false,
            entries,
        } => {
            for e in entries {
                collect_seq_shifts(doc, &e.value, Some(column(t, e.key.start)), want, out);
            }
        }
        Kind::Seq { flow: false, items } => {
            if let (Some(kc), Some(first)) = (key_col, items.first())
                && first_on_line(t, first.dash)
            {
                let dash_col = column(t, first.dash);
                let shift = match want {
                    SeqIndent::Wide if dash_col == kc => 2,
                    SeqIndent::Compact if dash_col == kc + 2 => -2,
                    _ => 0,
                };
                if shift != 0 {
                    out.push((line_start(t, first.dash), block_end(doc, node), shift));
                }
            }
            for i in items {
                collect_seq_shifts(doc, &i.node, None, want, out);
            }
        }
        _ => {}
    }
}

/// [`shift_text`] with further moves for the lines starting in `shifts`.
fn shift_lines(
    t: &str,
    start: usize,
    end: usize,
    delta: isize,
    all: bool,
    shifts: &[(usize, usize, isize)],
) -> String {
    let mut out = String::with_capacity(end - start + 16);
    let mut pos = start;
    for (i, line) in t[start..end].split_inclusive('\n').enumerate() {
        let at = pos;
        pos += line.len();
        if i == 0 && !all {
            out.push_str(line);
            continue;
        }
        let delta = delta
            + shifts
                .iter()
                .filter(|(a, b, _)| *a <= at && at < *b)
                .map(|(_, _, d)| d)
                .sum::<isize>();
        let body = line.trim_end_matches('\n');
        if body.trim().is_empty() {
            out.push_str(&line[body.len()..]);
            continue;
        }
        if delta >= 0 {
            out.push_str(&" ".repeat(delta as usize));
            out.push_str(line);
        } else {
            let lead = body.len() - body.trim_start_matches(' ').len();
            let cut = lead.min(delta.unsigned_abs());
            out.push_str(&line[cut..]);
        }
    }
    out
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

/// The string scalar at the mapping path `path` of `doc` (e.g.
/// `["metadata", "annotations", "x"]`): its node and value. `None` when a
/// key is missing, a node on the way is not a mapping, or the node is not
/// a written string scalar without an anchor or tag.
fn string_scalar_at<'d>(doc: &'d YamlDoc, path: &[&str]) -> Option<(&'d Node, &'d str)> {
    let mut node = doc.root()?;
    let mut value = doc.value();
    for key in path {
        let Kind::Map { entries, .. } = &node.kind else {
            return None;
        };
        let entry = entries.iter().find(|e| e.name == *key)?;
        node = &entry.value;
        value = get(value.as_object()?, key)?;
    }
    let s = value.as_str()?;
    (!node.props && matches!(node.kind, Kind::Scalar { empty: false, .. })).then_some((node, s))
}

/// The style the string scalar at the mapping path `path` of `text` (one
/// YAML document) is written in; `None` when there is none (see
/// [`restyled_at`]) or the text does not parse.
pub fn scalar_style_at(text: &str, path: &[&str]) -> Option<Style> {
    let doc = YamlDoc::parse(text).ok()?;
    match string_scalar_at(&doc, path)?.0.kind {
        Kind::Scalar { style, .. } => Some(style),
        _ => None,
    }
}

/// `text` (one YAML document) with the string scalar at the mapping path
/// `path` rewritten in `style` — single-quoted (`'it''s'`, as yaml.v3
/// writes a node kyaml styled `SingleQuotedStyle`: kyaml's `SetAnnotation`
/// writes a new annotation that way) or double-quoted — and the rest of
/// the text unchanged.
///
/// `None` when there is no such scalar (a key missing, a collection, an
/// alias, a node with an anchor or tag, a value that is not a string), when
/// `style` is neither quoted style, when the value holds a line break or a
/// control character (not written on one line), or when the text does not
/// parse.
pub fn restyled_at(text: &str, path: &[&str], style: Style) -> Option<String> {
    let doc = YamlDoc::parse(text).ok()?;
    let (node, s) = string_scalar_at(&doc, path)?;
    if s.chars().any(char::is_control) {
        return None;
    }
    let quoted = match style {
        Style::SingleQuoted => format!("'{}'", s.replace('\'', "''")),
        Style::DoubleQuoted => emit::double_quoted(s),
        _ => return None,
    };
    let mut out = String::with_capacity(text.len() + 2);
    out.push_str(&text[..node.start]);
    out.push_str(&quoted);
    out.push_str(&text[node.end..]);
    let check = YamlDoc::parse(out.as_str()).ok()?;
    same(check.value(), doc.value()).then_some(out)
}

#[cfg(test)]
mod tests;
