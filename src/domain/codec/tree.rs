//! A lossless view of one YAML document: every node with its byte range in
//! the text, every comment with its range, and the document's value.
//!
//! The format-preserving editor ([`super::preserve`]) needs to know where
//! each key, value, sequence dash and comment sits in a document so that it
//! can replace exactly those bytes. [`YamlDoc::parse`] reads a document once
//! with `granit-parser` (the YAML 1.2 event parser `serde-saphyr` is built
//! on, which reports byte spans and comments) and builds both the node tree
//! and the parsed value in the same pass.
//!
//! Values follow the codec's rules (`serde-saphyr`'s untyped reading with
//! YAML 1.2 booleans): plain `~`/`null`/empty are null, `true`/`false` are
//! booleans, integers in decimal, `0x`, `0o` and `0b` (with `_`
//! separators) are integers, YAML 1.2 floats are floats, non-finite floats
//! are the strings `.inf`, `-.inf` and `.nan`, and every other scalar is a
//! string. A document using anchors, aliases, tags or merge keys gets its
//! value from the codec instead (its tree is still built; the editor leaves
//! such nodes alone).
//!
//! Two edits change a parsed document in place instead of reading its new
//! text again — a one-line scalar replaced ([`YamlDoc::replace_scalar`])
//! and entries added at the end of a block mapping
//! ([`YamlDoc::insert_entries`]): the new bytes are read alone and every
//! later position moves by the change in length, so the document is what
//! reading the changed text would give (property tests in `props.rs` hold
//! them to that); anything they are not sure of, they decline.

use std::ops::Range;
use std::sync::Arc;

use granit_parser::{Event, Parser, Placement, ScalarStyle};
use serde_json::{Map, Number, Value};

use super::{CodecError, MAX_DEPTH};

mod edit;
mod fast;

/// One parsed YAML document.
#[derive(Debug, Clone, PartialEq)]
pub struct YamlDoc {
    text: Arc<str>,
    root: Option<Node>,
    comments: Vec<Comment>,
    value: Value,
    opaque: bool,
}

/// A node and its byte range in the document text.
#[derive(Debug, Clone, PartialEq)]
pub struct Node {
    /// First byte of the node: a scalar's first character (a block scalar's
    /// `|`/`>` indicator, a quoted scalar's quote), a flow collection's
    /// bracket, a block mapping's first key, a block sequence's first dash.
    pub start: usize,
    /// One past the node's last character (a block scalar ends after its
    /// last content character — with keep chomping, `|+`, at the end of its
    /// last blank line, whose line breaks are content; the line break after
    /// a node is not part of it).
    pub end: usize,
    /// What the node is.
    pub kind: Kind,
    /// The node carries an anchor or a tag.
    pub props: bool,
}

/// The kinds of nodes.
#[derive(Debug, Clone, PartialEq)]
pub enum Kind {
    /// A scalar in the given style; `empty` for a missing value (`key:`).
    Scalar {
        /// The source style.
        style: Style,
        /// A value that is not written at all (`key:` / `-`).
        empty: bool,
    },
    /// A mapping.
    Map {
        /// Written in flow style (`{a: b}`).
        flow: bool,
        /// Its entries in order.
        entries: Vec<Entry>,
    },
    /// A sequence.
    Seq {
        /// Written in flow style (`[a, b]`).
        flow: bool,
        /// Its items in order.
        items: Vec<Item>,
    },
    /// An alias (`*name`).
    Alias,
}

/// Scalar styles as written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Style {
    /// Unquoted.
    Plain,
    /// `'…'`.
    SingleQuoted,
    /// `"…"`.
    DoubleQuoted,
    /// `|` block.
    Literal,
    /// `>` block.
    Folded,
}

/// A mapping entry.
#[derive(Debug, Clone, PartialEq)]
pub struct Entry {
    /// The key node.
    pub key: Node,
    /// The key as text (the map key of the parsed value).
    pub name: String,
    /// Position of the `:` after the key, if written.
    pub colon: Option<usize>,
    /// The value node.
    pub value: Node,
}

impl Entry {
    /// One past the entry's last character (its value, or its `:`).
    pub fn end(&self) -> usize {
        self.value
            .end
            .max(self.colon.map_or(self.key.end, |c| c + 1))
    }
}

/// A sequence item.
#[derive(Debug, Clone, PartialEq)]
pub struct Item {
    /// Position of the item's `-` (block) or of its node (flow).
    pub dash: usize,
    /// The item's node.
    pub node: Node,
}

impl Item {
    /// One past the item's last character.
    pub fn end(&self) -> usize {
        self.node.end.max(self.dash + 1)
    }
}

/// A comment: `#` to the end of its line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Comment {
    /// Position of the `#`.
    pub start: usize,
    /// End of the comment (before the line break).
    pub end: usize,
    /// The comment follows content on its line (`key: v # c`).
    pub trailing: bool,
}

impl YamlDoc {
    /// Parses one document (no `---`/`...` markers expected; an empty or
    /// comment-only text is a document whose value is null).
    ///
    /// Errors: the text is not YAML, holds more than one document, nests
    /// deeper than [`MAX_DEPTH`], repeats a mapping key, or (for documents
    /// with anchors, aliases or tags) is refused by the codec.
    pub fn parse(text: impl Into<Arc<str>>) -> Result<Self, CodecError> {
        let text: Arc<str> = text.into();
        let (root, comments, value, opaque) = Builder::run(&text, true)?;
        let value = match (opaque, value) {
            (false, v) => v,
            (true, _) => super::from_yaml_str(&text)?,
        };
        Ok(Self {
            text,
            root,
            comments,
            value,
            opaque,
        })
    }

    /// The document text.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// The document text, shared.
    pub fn shared_text(&self) -> Arc<str> {
        self.text.clone()
    }

    /// The root node (`None` for an empty document).
    pub fn root(&self) -> Option<&Node> {
        self.root.as_ref()
    }

    /// The comments, in text order.
    pub fn comments(&self) -> &[Comment] {
        &self.comments
    }

    /// The parsed value.
    pub fn value(&self) -> &Value {
        &self.value
    }

    /// Takes the parsed value out.
    pub fn into_value(self) -> Value {
        self.value
    }

    /// True when the document uses anchors, aliases, tags or merge keys.
    pub fn is_opaque(&self) -> bool {
        self.opaque
    }

    /// The text of `range`.
    pub fn slice(&self, range: Range<usize>) -> &str {
        &self.text[range]
    }

    /// The comment texts (from `#`, trimmed), in order.
    pub fn comment_texts(&self) -> impl Iterator<Item = &str> {
        self.comments
            .iter()
            .map(|c| self.text[c.start..c.end].trim_end())
    }
}

/// Start of the line holding byte `pos` of `text`.
pub fn line_start(text: &str, pos: usize) -> usize {
    text[..pos].rfind('\n').map_or(0, |i| i + 1)
}

/// End of the line holding byte `pos` of `text`: its line break, or the
/// end of the text.
pub fn line_end(text: &str, pos: usize) -> usize {
    text[pos..].find('\n').map_or(text.len(), |i| pos + i)
}

/// The column (bytes from its line's start) of byte `pos` of `text`.
pub fn column(text: &str, pos: usize) -> usize {
    pos - line_start(text, pos)
}

/// `text` with the bytes `range` replaced by `with`.
pub fn spliced(text: &str, range: Range<usize>, with: &str) -> String {
    let mut out = String::with_capacity(text.len() - range.len() + with.len());
    out.push_str(&text[..range.start]);
    out.push_str(with);
    out.push_str(&text[range.end..]);
    out
}

/// Parses the value of one YAML document with the tree builder (faster than
/// the codec's general path; same values).
///
/// Errors: as [`YamlDoc::parse`].
pub fn parse_value(text: &str) -> Result<Value, CodecError> {
    let (_, _, value, opaque) = Builder::run(text, false)?;
    if opaque {
        return super::from_yaml_str(text);
    }
    Ok(value)
}

/// What a render's output checks read of an object written as `text`
/// (one YAML document): its value with only `apiVersion`, `kind` and
/// `metadata` kept whole and every other top-level entry null. The rest of
/// the text is still read, so text [`parse_value`] refuses is refused here
/// too. Text the one-pass reader is not sure of (or a root that is not a
/// mapping) gets its whole value, as [`parse_value`] reads it.
///
/// Errors: as [`parse_value`].
pub fn parse_identity(text: &str) -> Result<Value, CodecError> {
    match fast::identity(text) {
        Some(value) => Ok(value),
        None => parse_value(text),
    }
}

type Built = (Option<Node>, Vec<Comment>, Value, bool);

struct Builder<'a> {
    text: &'a str,
    parser: Parser<'a, granit_parser::StrInput<'a>>,
    peeked: Option<(Event<'a>, Range<usize>)>,
    comments: Vec<Comment>,
    opaque: bool,
    /// Build the node tree and record comments; `false` reads the value
    /// only (the returned nodes then hold no entries or items).
    tree: bool,
}

fn err(message: impl std::fmt::Display) -> CodecError {
    CodecError::new(message)
}

impl<'a> Builder<'a> {
    fn run(text: &'a str, tree: bool) -> Result<Built, CodecError> {
        if let Some(built) = fast::run(text, tree) {
            return Ok(built);
        }
        Self::run_events(text, tree)
    }

    /// [`Builder::run`] with the event parser only.
    fn run_events(text: &'a str, tree: bool) -> Result<Built, CodecError> {
        let mut b = Builder {
            text,
            parser: Parser::new_from_str(text),
            peeked: None,
            comments: Vec::new(),
            opaque: false,
            tree,
        };
        let (root, value) = b.document()?;
        Ok((root, b.comments, value, b.opaque))
    }

    /// The next non-comment event (comments are recorded).
    fn next(&mut self) -> Result<(Event<'a>, Range<usize>), CodecError> {
        if let Some(e) = self.peeked.take() {
            return Ok(e);
        }
        loop {
            let (event, span) = match self.parser.next() {
                Some(Ok(x)) => x,
                Some(Err(e)) => return Err(err(e)),
                None => return Err(err("unexpected end of the YAML stream")),
            };
            let range = span
                .byte_range()
                .ok_or_else(|| err("the YAML parser gave no byte offsets"))?;
            if let Event::Comment(_, placement) = &event {
                if !self.tree {
                    continue;
                }
                self.comments.push(Comment {
                    start: range.start,
                    end: range.end,
                    trailing: *placement == Placement::Right,
                });
                continue;
            }
            return Ok((event, range));
        }
    }

    fn peek(&mut self) -> Result<&(Event<'a>, Range<usize>), CodecError> {
        if self.peeked.is_none() {
            let e = self.next()?;
            self.peeked = Some(e);
        }
        Ok(self.peeked.as_ref().expect("just set"))
    }

    fn document(&mut self) -> Result<(Option<Node>, Value), CodecError> {
        match self.next()?.0 {
            Event::StreamStart => {}
            other => return Err(err(format!("unexpected YAML event {other:?}"))),
        }
        let (root, value) = match self.next()?.0 {
            Event::StreamEnd => return Ok((None, Value::Null)),
            Event::DocumentStart(..) => {
                if matches!(self.peek()?.0, Event::DocumentEnd) {
                    (None, Value::Null)
                } else {
                    let (n, v) = self.node(0, 0)?;
                    (Some(n), v)
                }
            }
            other => return Err(err(format!("unexpected YAML event {other:?}"))),
        };
        match self.next()?.0 {
            Event::DocumentEnd => {}
            other => return Err(err(format!("unexpected YAML event {other:?}"))),
        }
        match self.next()?.0 {
            Event::StreamEnd => Ok((root, value)),
            Event::DocumentStart(..) => Err(err("more than one YAML document")),
            other => Err(err(format!("unexpected YAML event {other:?}"))),
        }
    }

    /// Reads one node; `after` is where its text may start (after a key's
    /// `:` or an item's `-`).
    fn node(&mut self, after: usize, depth: usize) -> Result<(Node, Value), CodecError> {
        if depth > MAX_DEPTH {
            return Err(err(format!(
                "the YAML document nests deeper than {MAX_DEPTH} levels"
            )));
        }
        let (event, range) = self.next()?;
        match event {
            Event::Scalar(value, style, anchor, tag) => {
                let props = anchor != 0 || tag.is_some();
                self.opaque |= props;
                let style = match style {
                    ScalarStyle::Plain => Style::Plain,
                    ScalarStyle::SingleQuoted => Style::SingleQuoted,
                    ScalarStyle::DoubleQuoted => Style::DoubleQuoted,
                    ScalarStyle::Literal => Style::Literal,
                    ScalarStyle::Folded => Style::Folded,
                };
                let empty = style == Style::Plain && range.is_empty();
                let (start, end) = if empty {
                    (after, after)
                } else if matches!(style, Style::Literal | Style::Folded) {
                    self.block_scalar_range(after, range.clone())
                } else {
                    (range.start, range.end)
                };
                let v = if style == Style::Plain {
                    resolve_plain(&value)
                } else {
                    Value::String(value.into_owned())
                };
                Ok((
                    Node {
                        start,
                        end,
                        kind: Kind::Scalar { style, empty },
                        props,
                    },
                    v,
                ))
            }
            Event::Alias(_) => {
                self.opaque = true;
                Ok((
                    Node {
                        start: range.start,
                        end: range.end,
                        kind: Kind::Alias,
                        props: false,
                    },
                    Value::Null,
                ))
            }
            Event::SequenceStart(style, anchor, tag) => {
                let props = anchor != 0 || tag.is_some();
                self.opaque |= props;
                let flow = style == granit_parser::StructureStyle::Flow;
                let mut items = Vec::new();
                let mut values = Vec::new();
                // First item's dash and last item's end (kept without the tree too).
                let mut span: Option<(usize, usize)> = None;
                // A block sequence's first dash comes after its anchor and
                // tag, which may stand on the line before (`key: &a` then `- x`).
                let mut cursor = match (flow, props) {
                    (true, _) => range.end,
                    (false, true) => skip_properties(self.text, after),
                    (false, false) => after,
                };
                loop {
                    if matches!(self.peek()?.0, Event::SequenceEnd) {
                        let (_, end_range) = self.next()?;
                        let (start, end) = if flow {
                            (range.start, end_range.end)
                        } else {
                            span.unwrap_or((after, after))
                        };
                        return Ok((
                            Node {
                                start,
                                end,
                                kind: Kind::Seq { flow, items },
                                props,
                            },
                            Value::Array(values),
                        ));
                    }
                    let dash = if flow {
                        None
                    } else {
                        let d = skip_blank(self.text, cursor);
                        if self.text.as_bytes().get(d) != Some(&b'-') {
                            return Err(err("a block sequence item without its `-`"));
                        }
                        Some(d)
                    };
                    let item_after = dash.map_or(cursor, |d| d + 1);
                    let (node, v) = self.node(item_after, depth + 1)?;
                    let dash = dash.unwrap_or(node.start);
                    cursor = node.end.max(dash + 1);
                    let item = Item { dash, node };
                    span = Some((span.map_or(dash, |s| s.0), item.end()));
                    if self.tree {
                        items.push(item);
                    }
                    values.push(v);
                }
            }
            Event::MappingStart(style, anchor, tag) => {
                let props = anchor != 0 || tag.is_some();
                self.opaque |= props;
                let flow = style == granit_parser::StructureStyle::Flow;
                let mut entries: Vec<Entry> = Vec::new();
                let mut map = Map::new();
                // First key's start and last entry's end (kept without the tree too).
                let mut span: Option<(usize, usize)> = None;
                loop {
                    if matches!(self.peek()?.0, Event::MappingEnd) {
                        let (_, end_range) = self.next()?;
                        let (start, end) = if flow {
                            (range.start, end_range.end)
                        } else {
                            span.unwrap_or((after, after))
                        };
                        return Ok((
                            Node {
                                start,
                                end,
                                kind: Kind::Map { flow, entries },
                                props,
                            },
                            Value::Object(map),
                        ));
                    }
                    let key_after = span.map_or(if flow { range.end } else { after }, |s| s.1);
                    let (key, key_value) = self.node(key_after, depth + 1)?;
                    let mut name = match (&key.kind, key_value) {
                        (Kind::Scalar { .. }, Value::String(s)) => s,
                        (Kind::Scalar { .. }, Value::Null) => {
                            // `~: x` or `null: x`: the key's text, as the codec reads it.
                            self.text[key.start..key.end].to_string()
                        }
                        (Kind::Scalar { .. }, _) => self.text[key.start..key.end].to_string(),
                        _ => {
                            self.opaque = true;
                            self.text[key.start..key.end].to_string()
                        }
                    };
                    if name == "<<" {
                        self.opaque = true;
                    }
                    let colon = colon_after(self.text, key.end);
                    let value_after = colon.map_or(key.end, |c| c + 1);
                    let (value, v) = self.node(value_after, depth + 1)?;
                    let entry_end = value.end.max(colon.map_or(key.end, |c| c + 1));
                    span = Some((span.map_or(key.start, |s| s.0), entry_end));
                    let key_name = if self.tree {
                        name.clone()
                    } else {
                        std::mem::take(&mut name)
                    };
                    match map.entry(key_name) {
                        serde_json::map::Entry::Occupied(mut o) => {
                            if !self.opaque {
                                return Err(err(format!("duplicate mapping key {:?}", o.key())));
                            }
                            o.insert(v);
                        }
                        serde_json::map::Entry::Vacant(e) => {
                            e.insert(v);
                        }
                    }
                    if self.tree {
                        entries.push(Entry {
                            key,
                            name,
                            colon,
                            value,
                        });
                    }
                }
            }
            other => Err(err(format!("unexpected YAML event {other:?}"))),
        }
    }

    /// Range of a block scalar: from its indicator to its last content
    /// character (or the end of its header line when it has no content).
    fn block_scalar_range(&self, after: usize, span: Range<usize>) -> (usize, usize) {
        let bytes = self.text.as_bytes();
        let mut i = after;
        while i < span.start && matches!(bytes[i], b' ' | b'\t' | b':') {
            i += 1;
        }
        let start = if i < bytes.len() && matches!(bytes[i], b'|' | b'>') {
            i
        } else {
            // Not found where expected (properties in between): search back.
            self.text[..span.start]
                .rfind(['|', '>'])
                .unwrap_or(span.start)
        };
        let header_end = self.text[start..]
            .find('\n')
            .map_or(self.text.len(), |n| start + n);
        let code_end = header_end_without_comment(self.text, start, header_end);
        let mut end = span.end.min(bytes.len());
        while end > header_end && matches!(bytes[end - 1], b' ' | b'\t' | b'\n' | b'\r') {
            end -= 1;
        }
        let end = end.max(code_end);
        if !self.text[start..code_end].contains('+') {
            return (start, end);
        }
        // Keep chomping (`|+`): the blank lines after the last content line
        // are content too; the node ends on the last of them.
        let mut last = end;
        let mut at = self.text[end..].find('\n').map(|n| end + n);
        while let Some(line_break) = at {
            let next = self.text[line_break + 1..]
                .find('\n')
                .map(|n| line_break + 1 + n);
            match next {
                Some(n) if self.text[line_break + 1..n].trim().is_empty() => {
                    last = n;
                    at = Some(n);
                }
                _ => break,
            }
        }
        (start, last)
    }
}

/// End of a block scalar header (`|-2`), before any comment on its line.
fn header_end_without_comment(text: &str, start: usize, line_end: usize) -> usize {
    let line = &text[start..line_end];
    let code = match line.find(" #").or_else(|| line.find("\t#")) {
        Some(i) => &line[..i],
        None => line,
    };
    start + code.trim_end().len()
}

/// The position of the `:` after a mapping key ending at `key_end`.
fn colon_after(text: &str, key_end: usize) -> Option<usize> {
    let bytes = text.as_bytes();
    let mut i = key_end;
    while i < bytes.len() && matches!(bytes[i], b' ' | b'\t') {
        i += 1;
    }
    (bytes.get(i) == Some(&b':')).then_some(i)
}

/// The first position at or after `from` that is not a blank, a line break
/// or part of a comment.
pub fn skip_blank(text: &str, from: usize) -> usize {
    let bytes = text.as_bytes();
    let mut i = from;
    let mut line_start = i == 0 || bytes.get(i.wrapping_sub(1)) == Some(&b'\n');
    while i < bytes.len() {
        match bytes[i] {
            b' ' | b'\t' | b'\r' => i += 1,
            b'\n' => {
                i += 1;
                line_start = true;
                continue;
            }
            b'#' if line_start || matches!(bytes[i - 1], b' ' | b'\t') => {
                while i < bytes.len() && bytes[i] != b'\n' {
                    i += 1;
                }
                continue;
            }
            _ => return i,
        }
        line_start = false;
    }
    i
}

/// The first position at or after `from` past the blanks, comments, anchor
/// (`&name`) and tag (`!!seq`, `!local`, `!<uri>`) that come before a node;
/// only blanks and comments are skipped when there are no properties.
fn skip_properties(text: &str, from: usize) -> usize {
    let bytes = text.as_bytes();
    let mut i = skip_blank(text, from);
    while matches!(bytes.get(i), Some(b'&' | b'!')) {
        while i < bytes.len() && !matches!(bytes[i], b' ' | b'\t' | b'\r' | b'\n') {
            i += 1;
        }
        i = skip_blank(text, i);
    }
    i
}

/// The value of a plain scalar, typed as the codec types it.
pub fn resolve_plain(s: &str) -> Value {
    if s.is_empty() || s == "~" || s.eq_ignore_ascii_case("null") {
        return Value::Null;
    }
    if s.eq_ignore_ascii_case("true") {
        return Value::Bool(true);
    }
    if s.eq_ignore_ascii_case("false") {
        return Value::Bool(false);
    }
    let first = s.as_bytes()[0];
    if !(first.is_ascii_digit() || matches!(first, b'-' | b'+' | b'.')) {
        return Value::String(s.to_string());
    }
    if let Some(v) = parse_int(s) {
        return v;
    }
    if let Some(f) = parse_float(s) {
        return float_value(f);
    }
    Value::String(s.to_string())
}

/// Whether [`resolve_plain`] reads `s` as a string, without building the
/// value (no copy of `s`): false for the null, boolean, integer and finite
/// float forms, true for everything else (non-finite floats are strings
/// in the codec's values). The emitter asks this of every scalar it writes.
pub fn plain_is_string(s: &str) -> bool {
    if s.is_empty() || s == "~" || s.eq_ignore_ascii_case("null") {
        return false;
    }
    if s.eq_ignore_ascii_case("true") || s.eq_ignore_ascii_case("false") {
        return false;
    }
    let first = s.as_bytes()[0];
    if !(first.is_ascii_digit() || matches!(first, b'-' | b'+' | b'.')) {
        return true;
    }
    if parse_int(s).is_some() {
        return false;
    }
    parse_float(s).is_none_or(|f| !f.is_finite())
}

/// A float as the codec stores it: finite as a number, non-finite as the
/// canonical YAML text.
fn float_value(f: f64) -> Value {
    match Number::from_f64(f) {
        Some(n) => Value::Number(n),
        None if f.is_nan() => Value::String(".nan".into()),
        None if f.is_sign_negative() => Value::String("-.inf".into()),
        None => Value::String(".inf".into()),
    }
}

/// Digits with `_` separators between them, in `radix`.
fn digits(d: &str, radix: u32) -> Option<u128> {
    let bytes = d.as_bytes();
    let mut val: u128 = 0;
    let mut saw = false;
    for (i, &b) in bytes.iter().enumerate() {
        if b == b'_' {
            if i == 0 || bytes[i - 1] == b'_' || i + 1 == bytes.len() || bytes[i + 1] == b'_' {
                return None;
            }
            continue;
        }
        let v = (b as char).to_digit(16)?;
        if v >= radix {
            return None;
        }
        val = val
            .checked_mul(u128::from(radix))?
            .checked_add(u128::from(v))?;
        saw = true;
    }
    saw.then_some(val)
}

/// An integer (64-bit) in the codec's forms, or `None`.
fn parse_int(s: &str) -> Option<Value> {
    let (neg, rest) = match s.as_bytes()[0] {
        b'-' => (true, &s[1..]),
        b'+' => (false, &s[1..]),
        _ => (false, s),
    };
    let (radix, d) = if let Some(r) = rest.strip_prefix("0x").or_else(|| rest.strip_prefix("0X")) {
        (16, r)
    } else if let Some(r) = rest.strip_prefix("0o").or_else(|| rest.strip_prefix("0O")) {
        (8, r)
    } else if let Some(r) = rest.strip_prefix("0b").or_else(|| rest.strip_prefix("0B")) {
        (2, r)
    } else {
        if rest.starts_with('0') && rest != "0" {
            return None;
        }
        (10, rest)
    };
    let mag = digits(d, radix)?;
    if neg {
        let v: i64 = if mag == u128::from(i64::MAX as u64) + 1 {
            i64::MIN
        } else {
            -(i64::try_from(mag).ok()?)
        };
        Some(Value::Number(v.into()))
    } else {
        Some(Value::Number(u64::try_from(mag).ok()?.into()))
    }
}

/// A YAML 1.2 float (special values included; overflow is infinity), or `None`.
fn parse_float(s: &str) -> Option<f64> {
    match s.to_ascii_lowercase().as_str() {
        ".nan" | "+.nan" | "-.nan" => return Some(f64::NAN),
        ".inf" | "+.inf" => return Some(f64::INFINITY),
        "-.inf" => return Some(f64::NEG_INFINITY),
        _ => {}
    }
    let unsigned = s.strip_prefix(['+', '-']).unwrap_or(s);
    let first = unsigned.as_bytes().first()?;
    if !(first.is_ascii_digit() || *first == b'.') {
        return None;
    }
    if unsigned
        .bytes()
        .any(|b| b.is_ascii_alphabetic() && !matches!(b, b'e' | b'E'))
    {
        return None;
    }
    let v: f64 = s.parse().ok()?;
    if v.is_finite() || first.is_ascii_digit() {
        Some(v)
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    proptest::proptest! {
        /// The check the emitter uses answers as the value read does, for
        /// text shaped like every plain scalar form (signs, radix prefixes,
        /// separators, dots, exponents, the null/boolean words) and for
        /// arbitrary text.
        #[test]
        fn plain_is_string_answers_as_resolve_plain(
            s in proptest::prop_oneof![
                "[-+]?(0[xXoObB])?[0-9a-fA-F_.eE+-]{0,8}",
                "[.]?(inf|Inf|INF|nan|NaN|NAN|null|Null|NULL|true|True|false|False|~)",
                "\\PC{0,12}",
            ]
        ) {
            proptest::prop_assert_eq!(
                plain_is_string(&s),
                matches!(resolve_plain(&s), Value::String(_)),
                "{:?}", s
            );
        }
    }

    const DOC: &str = "\
# head
apiVersion: v1   # api
kind: ConfigMap
metadata:
  name: a # the name
  labels: # the labels
    app: x
data:
  a: 0123
  b: '007'
  c: |
    line
  d: [1, {x: y}]
  e:
  - one
  - two # t
  f: .inf
  g:
";

    #[test]
    fn nodes_know_their_bytes() {
        let doc = YamlDoc::parse(DOC).unwrap();
        let Some(Node {
            kind: Kind::Map { entries, .. },
            ..
        }) = doc.root()
        else {
            panic!()
        };
        let data = &entries[3];
        assert_eq!(data.name, "data");
        let Kind::Map { entries: d, .. } = &data.value.kind else {
            panic!()
        };
        let text = |n: &Node| doc.slice(n.start..n.end).to_string();
        assert_eq!(text(&d[0].value), "0123");
        assert_eq!(text(&d[1].value), "'007'");
        assert_eq!(text(&d[2].value), "|\n    line");
        assert_eq!(text(&d[3].value), "[1, {x: y}]");
        assert_eq!(text(&d[4].value), "- one\n  - two");
        let Kind::Seq { items, .. } = &d[4].value.kind else {
            panic!()
        };
        assert_eq!(doc.slice(items[1].dash..items[1].end()), "- two");
        assert_eq!(text(&d[5].value), ".inf");
        assert!(matches!(d[6].value.kind, Kind::Scalar { empty: true, .. }));
        assert_eq!(
            doc.comment_texts().collect::<Vec<_>>(),
            ["# head", "# api", "# the name", "# the labels", "# t"]
        );
        assert_eq!(doc.value()["data"]["a"], json!(123.0));
        assert_eq!(doc.value()["data"]["f"], json!(".inf"));
        assert_eq!(doc.value()["data"]["g"], Value::Null);
    }

    #[test]
    fn values_agree_with_the_codec() {
        for s in [
            "0123",
            "007",
            "0x1F",
            "1e3",
            "0o17",
            "1_000",
            "+12",
            "-0",
            "1.0",
            ".5",
            "12e03",
            "~",
            "null",
            "Null",
            "TRUE",
            "yes",
            "0b101",
            "1:20",
            "2001-12-14",
            "9223372036854775808",
            "-9223372036854775808",
            "-9223372036854775809",
            "18446744073709551616",
            "-.INF",
            ".NaN",
            "0.",
            "+.inf",
            "1e999",
            "00",
            "-0123",
            "1__0",
            "_1",
            "0x",
            "inf",
            "nan",
            "Infinity",
            "1e",
            "+",
            ".",
            "1.5e+3",
            "0x_1F",
            "1_0.5",
            "0o8",
            "-0x10",
            "+0b1",
        ] {
            let text = format!("k: {s}\n");
            let ours = parse_value(&text).unwrap();
            let codec: Value = super::super::from_yaml_str(&text).unwrap();
            assert_eq!(ours, codec, "{s}");
        }
    }

    #[test]
    fn duplicate_keys_and_depth_are_refused() {
        assert!(YamlDoc::parse("a: 1\na: 2\n").is_err());
        let deep = format!("{}1{}", "[".repeat(300), "]".repeat(300));
        assert!(YamlDoc::parse(deep).is_err());
        assert!(YamlDoc::parse("a: 1\n---\nb: 2\n").is_err());
        assert_eq!(YamlDoc::parse("# only\n").unwrap().value(), &Value::Null);
    }

    /// A block sequence after an anchor or a tag on its key's line (at
    /// the key's indentation or deeper, with a comment between) is read,
    /// its items' dashes where they are.
    #[test]
    fn block_sequences_after_properties() {
        for text in [
            "env: &env\n- a\n- b\nref: *env\n",
            "env: &env\n  - a\n  - b\nref: *env\n",
            "env: !!seq\n- a\n- b\n",
            "env: &env !!seq # note\n  # before the first item\n  - a\n  - b\n",
            "- &s\n  - a\n  - b\n- *s\n",
        ] {
            let doc = YamlDoc::parse(text).unwrap_or_else(|e| panic!("{text:?}: {e}"));
            let codec: Value = super::super::from_yaml_str(text).unwrap();
            assert_eq!(doc.value(), &codec, "{text:?}");
            let seq = match &doc.root().unwrap().kind {
                Kind::Map { entries, .. } => &entries[0].value,
                Kind::Seq { items, .. } => &items[0].node,
                _ => panic!("{text:?}"),
            };
            let Kind::Seq { items, .. } = &seq.kind else {
                panic!("{text:?}: {seq:?}")
            };
            let dashes: Vec<&str> = items.iter().map(|i| doc.slice(i.dash..i.end())).collect();
            assert_eq!(dashes, ["- a", "- b"], "{text:?}");
            assert!(seq.props, "{text:?}");
        }
    }

    #[test]
    fn anchors_make_a_document_opaque() {
        let doc = YamlDoc::parse("a: &x 1\nb: *x\n").unwrap();
        assert!(doc.is_opaque());
        assert_eq!(doc.value(), &json!({"a": 1, "b": 1}));
    }
}
