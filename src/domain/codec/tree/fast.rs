//! A one-pass reader for the plain block YAML that functions and packages
//! write (block mappings and sequences, one-line plain and quoted scalars,
//! comments), building exactly what the event-parser path of
//! [`super::Builder`] builds from the same text: the same nodes, byte
//! ranges, comments and values.
//!
//! The general YAML parser spends most of a render's reading time on
//! scanning tokens that such documents do not need. Whatever this reader is
//! not sure of — flow collections, block scalars, anchors, aliases, tags,
//! multi-line or escaped scalars, tabs, carriage returns, non-ASCII text,
//! document markers, duplicate or merge keys, a scalar root — makes it give
//! up (`None`), and the caller reads the text with the event parser, which
//! also words any error.

use std::borrow::Cow;

use serde_json::{Map, Value};

use super::{Built, Comment, Entry, Item, Kind, Node, Style, colon_after, resolve_plain};
use crate::domain::codec::MAX_DEPTH;

/// Reads `text` when it is plain block YAML; `None` when it is not sure.
pub(super) fn run(text: &str, tree: bool) -> Option<Built> {
    read(text, tree, false)
}

/// The value of `text`, plain block YAML whose root is a mapping, with
/// only the entries that name an object kept whole — `apiVersion`, `kind`
/// and `metadata` — and every other root entry's value read for its syntax
/// (the same text is accepted and refused as by [`run`]) but left null.
/// `None` when this reader is not sure of the text or its root is not a
/// mapping.
pub(super) fn identity(text: &str) -> Option<Value> {
    read(text, false, true).and_then(|(root, _, value, _)| root.map(|_| value))
}

fn read(text: &str, tree: bool, identity: bool) -> Option<Built> {
    let bytes = text.as_bytes();
    if bytes.iter().any(|&b| b >= 0x80 || (b < 0x20 && b != b'\n')) {
        return None;
    }
    let mut r = Reader {
        t: text,
        b: bytes,
        pos: 0,
        line: std::cell::Cell::new((usize::MAX, 0)),
        comments: Vec::new(),
        tree,
        identity,
        skip: false,
        pairs: Vec::new(),
        entries: Vec::new(),
        values: Vec::new(),
        items: Vec::new(),
        names: Vec::new(),
    };
    let Some(first) = r.next_content() else {
        // Blank or comments only: a null document.
        return Some((None, r.comments, Value::Null, false));
    };
    let line = r.line_at(first);
    if r.is_doc_marker(line.start) {
        return None;
    }
    let col = first - line.start;
    // The root is a mapping: its first line starts with a key.
    r.key_at(first)?;
    let (node, value) = r.map(col, first, 0)?;
    // Nothing but blank lines and comments may follow the root mapping.
    if r.next_content().is_some() {
        return None;
    }
    Some((Some(node), r.comments, value, false))
}

struct Line {
    start: usize,
    end: usize,
}

/// A key found at a position: its node's range, its text value and the
/// position of its `:`.
struct Key<'a> {
    start: usize,
    end: usize,
    name: Cow<'a, str>,
    style: Style,
    colon: usize,
}

struct Reader<'a> {
    t: &'a str,
    b: &'a [u8],
    /// Start of the next line not yet read.
    pos: usize,
    /// The last line [`Reader::line_at`] found: its start and end.
    line: std::cell::Cell<(usize, usize)>,
    comments: Vec<Comment>,
    tree: bool,
    /// Keep only the root entries that name an object ([`identity`]).
    identity: bool,
    /// Reading a value [`identity`] leaves out: syntax only, no values.
    skip: bool,
    /// The keys and values of the mappings being read, innermost last:
    /// each mapping is built at its end with exactly its size (most hold
    /// one or two entries, which growing one entry at a time would give
    /// room for four).
    pairs: Vec<(String, Value)>,
    /// The nodes of the entries of the mappings being read, as `pairs`.
    entries: Vec<Entry>,
    /// The values of the sequences being read, as `pairs`.
    values: Vec<Value>,
    /// The nodes of the items of the sequences being read, as `pairs`.
    items: Vec<Item>,
    /// The keys of the mappings being read while skipping, as `pairs`
    /// (for the duplicate-key check, which skipping keeps).
    names: Vec<Cow<'a, str>>,
}

impl<'a> Reader<'a> {
    /// The line holding `at` (a line's end is its `\n`, or the end of the
    /// text). The reader asks about the same line several times in a row,
    /// so the last line found is kept.
    fn line_at(&self, at: usize) -> Line {
        let (start, end) = self.line.get();
        if start <= at && at <= end {
            return Line { start, end };
        }
        // Mostly asked at a line's start (the reader moves line by line).
        let start = if at == 0 || self.b[at - 1] == b'\n' {
            at
        } else {
            memchr::memrchr(b'\n', &self.b[..at]).map_or(0, |i| i + 1)
        };
        let end = memchr::memchr(b'\n', &self.b[at..]).map_or(self.b.len(), |i| at + i);
        self.line.set((start, end));
        Line { start, end }
    }

    /// The end of the line holding `at`: its `\n`, or the end of the text.
    fn eol(&self, at: usize) -> usize {
        self.line_at(at).end
    }

    fn is_doc_marker(&self, line_start: usize) -> bool {
        let l = &self.b[line_start..];
        l.starts_with(b"---") || l.starts_with(b"...")
    }

    /// Records a comment from `#` at `at` to the end of its line.
    fn comment(&mut self, at: usize, end: usize, trailing: bool) {
        if self.tree {
            self.comments.push(Comment {
                start: at,
                end,
                trailing,
            });
        }
    }

    /// Skips blank and comment lines from `self.pos` (recording the
    /// comments); the position of the next line's first content character,
    /// with `self.pos` left at that line's start. `None` at the end.
    fn next_content(&mut self) -> Option<usize> {
        loop {
            if self.pos >= self.b.len() {
                return None;
            }
            let start = self.pos;
            let end = self.eol(start);
            let mut i = start;
            while i < end && self.b[i] == b' ' {
                i += 1;
            }
            if i == end {
                self.pos = if end >= self.b.len() {
                    self.b.len()
                } else {
                    end + 1
                };
                continue;
            }
            if self.b[i] == b'#' {
                self.comment(i, end, false);
                self.pos = if end >= self.b.len() {
                    self.b.len()
                } else {
                    end + 1
                };
                continue;
            }
            return Some(i);
        }
    }

    /// Moves past the line holding `at`.
    fn finish_line(&mut self, at: usize) {
        let end = self.eol(at);
        self.pos = if end >= self.b.len() {
            self.b.len()
        } else {
            end + 1
        };
    }

    /// After content ending at `at`: blanks then a comment or the line's
    /// end; records the comment. False when anything else follows.
    fn rest_of_line(&mut self, at: usize) -> bool {
        let end = self.eol(at);
        let mut i = at;
        while i < end && self.b[i] == b' ' {
            i += 1;
        }
        if i == end {
            return true;
        }
        if self.b[i] == b'#' && i > at {
            self.comment(i, end, true);
            return true;
        }
        false
    }

    /// A key starting at `at` (plain or quoted, then `:` and a blank or the
    /// line's end).
    fn key_at(&self, at: usize) -> Option<Key<'a>> {
        let t: &'a str = self.t;
        let end = self.eol(at);
        let first = self.b[at];
        let (start, key_end, name, style) = if first == b'\'' || first == b'"' {
            let (close, value) = self.quoted(at, end)?;
            let style = if first == b'"' {
                Style::DoubleQuoted
            } else {
                Style::SingleQuoted
            };
            (at, close, Cow::Owned(value), style)
        } else {
            if !plain_start(self.b, at, end) {
                return None;
            }
            // The key runs to the first `:` followed by a blank or the end.
            let mut i = at;
            let colon = loop {
                if i >= end {
                    return None;
                }
                match self.b[i] {
                    b':' if i + 1 == end || self.b[i + 1] == b' ' => break i,
                    b'#' if self.b[i - 1] == b' ' => return None,
                    _ => i += 1,
                }
            };
            let key_end = at + self.t[at..colon].trim_end_matches(' ').len();
            (at, key_end, Cow::Borrowed(&t[at..key_end]), Style::Plain)
        };
        if name == "<<" {
            return None;
        }
        let colon = colon_after(self.t, key_end)?;
        if colon + 1 < end && self.b[colon + 1] != b' ' {
            return None;
        }
        Some(Key {
            start,
            end: key_end,
            name,
            style,
            colon,
        })
    }

    /// A one-line quoted scalar at `at` (before `end`, the line's end):
    /// one past its closing quote and its value.
    fn quoted(&self, at: usize, end: usize) -> Option<(usize, String)> {
        let q = self.b[at];
        let mut i = at + 1;
        let mut value = String::new();
        loop {
            if i >= end {
                return None;
            }
            let c = self.b[i];
            if q == b'"' && c == b'\\' {
                return None;
            }
            if c == q {
                if q == b'\'' && i + 1 < end && self.b[i + 1] == b'\'' {
                    value.push('\'');
                    i += 2;
                    continue;
                }
                return Some((i + 1, value));
            }
            value.push(c as char);
            i += 1;
        }
    }

    /// A scalar at `at` that ends its line: its node and value, the line
    /// finished. `None` for anything but a one-line plain or quoted scalar.
    fn scalar(&mut self, at: usize) -> Option<(Node, Value)> {
        let end = self.eol(at);
        let first = self.b[at];
        let (node_end, value, style) = if first == b'\'' || first == b'"' {
            let (close, value) = self.quoted(at, end)?;
            let style = if first == b'"' {
                Style::DoubleQuoted
            } else {
                Style::SingleQuoted
            };
            let value = if self.skip {
                Value::Null
            } else {
                Value::String(value)
            };
            (close, value, style)
        } else {
            if !plain_start(self.b, at, end) {
                return None;
            }
            let mut i = at;
            while i < end && !(self.b[i] == b'#' && self.b[i - 1] == b' ') {
                if self.b[i] == b':' && (i + 1 == end || self.b[i + 1] == b' ') {
                    return None;
                }
                i += 1;
            }
            let s = self.t[at..i].trim_end_matches(' ');
            let value = if self.skip {
                Value::Null
            } else {
                resolve_plain(s)
            };
            (at + s.len(), value, Style::Plain)
        };
        if !self.rest_of_line(node_end) {
            return None;
        }
        self.finish_line(at);
        Some((
            Node {
                start: at,
                end: node_end,
                kind: Kind::Scalar {
                    style,
                    empty: false,
                },
                props: false,
            },
            value,
        ))
    }

    /// The value after a key's `:` or an item's `-` at `after`, whose
    /// parent (key or dash) is at column `parent`; `item` for a sequence
    /// item (a mapping may then start on the dash's line).
    fn value(
        &mut self,
        after: usize,
        parent: usize,
        item: bool,
        depth: usize,
    ) -> Option<(Node, Value)> {
        if depth > MAX_DEPTH {
            return None;
        }
        let end = self.eol(after);
        let mut i = after;
        while i < end && self.b[i] == b' ' {
            i += 1;
        }
        if i < end && self.b[i] != b'#' {
            // Inline content.
            if item {
                let line_start = self.line_at(after).start;
                if self.is_dash(i, end) {
                    return None;
                }
                if self.key_at(i).is_some() {
                    return self.map(i - line_start, i, depth);
                }
            }
            let (node, value) = self.scalar(i)?;
            // A more indented line after a scalar would continue it.
            let save = (self.pos, self.comments.len());
            if let Some(next) = self.next_content()
                && next - self.line_at(next).start > parent
            {
                return None;
            }
            (self.pos, _) = save;
            self.comments.truncate(save.1);
            return Some((node, value));
        }
        if i < end {
            if i == after {
                return None;
            }
            self.comment(i, end, true);
        }
        self.finish_line(after);
        let save = (self.pos, self.comments.len());
        let empty = Some((
            Node {
                start: after,
                end: after,
                kind: Kind::Scalar {
                    style: Style::Plain,
                    empty: true,
                },
                props: false,
            },
            Value::Null,
        ));
        let Some(next) = self.next_content() else {
            self.pos = save.0;
            self.comments.truncate(save.1);
            return empty;
        };
        let line = self.line_at(next);
        if self.is_doc_marker(line.start) {
            return None;
        }
        let col = next - line.start;
        let dash = self.is_dash(next, line.end);
        if dash && (col > parent || (col == parent && !item)) {
            // Comments between go with what follows, as read in order.
            return self.seq(col, next, depth);
        }
        if col > parent {
            if self.key_at(next).is_some() {
                return self.map(col, next, depth);
            }
            return None;
        }
        self.pos = save.0;
        self.comments.truncate(save.1);
        empty
    }

    /// After an entry (`dash` false) or item (`dash` true) of a collection
    /// at column `col`: the next one's first character (`Some(Some)`), or
    /// the end of the collection (`Some(None)`, with what follows left to
    /// the parent); `None` when the next line is more indented than the
    /// collection or a document marker.
    fn next_at(&mut self, col: usize, dash: bool) -> Option<Option<usize>> {
        let save = (self.pos, self.comments.len());
        let Some(next) = self.next_content() else {
            return Some(None);
        };
        let line = self.line_at(next);
        let c = next - line.start;
        if self.is_doc_marker(line.start) || c > col {
            return None;
        }
        if c == col && self.is_dash(next, line.end) == dash {
            return Some(Some(next));
        }
        self.pos = save.0;
        self.comments.truncate(save.1);
        Some(None)
    }

    /// True when a sequence item's `-` is at `at` (before the line's `end`).
    fn is_dash(&self, at: usize, end: usize) -> bool {
        self.b[at] == b'-' && (at + 1 == end || self.b[at + 1] == b' ')
    }

    /// A block mapping whose keys are at column `col`, the first at `first`.
    /// Inside a value [`identity`] leaves out, only its syntax and the
    /// duplicate-key check: no value (null) and no entries.
    fn map(&mut self, col: usize, first: usize, depth: usize) -> Option<(Node, Value)> {
        let skipping = self.skip;
        let identity_root = self.identity && depth == 0;
        let (pairs_from, entries_from, names_from) =
            (self.pairs.len(), self.entries.len(), self.names.len());
        let mut at = first;
        let mut end;
        loop {
            let key = self.key_at(at)?;
            self.skip = skipping
                || (identity_root && !matches!(&*key.name, "apiVersion" | "kind" | "metadata"));
            let read = self.value(key.colon + 1, col, false, depth + 1);
            self.skip = skipping;
            let (value, v) = read?;
            end = value.end.max(key.colon + 1);
            if skipping {
                self.names.push(key.name);
            } else {
                let mut name = key.name.into_owned();
                let map_key = if self.tree {
                    name.clone()
                } else {
                    std::mem::take(&mut name)
                };
                self.pairs.push((map_key, v));
                if self.tree {
                    self.entries.push(Entry {
                        key: Node {
                            start: key.start,
                            end: key.end,
                            kind: Kind::Scalar {
                                style: key.style,
                                empty: false,
                            },
                            props: false,
                        },
                        name,
                        colon: Some(key.colon),
                        value,
                    });
                }
            }
            match self.next_at(col, false)? {
                Some(next) => at = next,
                None => break,
            }
        }
        // A duplicate key: the event parser words the error.
        let value = if skipping {
            let names = &mut self.names[names_from..];
            names.sort_unstable();
            let duplicate = names.windows(2).any(|w| w[0] == w[1]);
            self.names.truncate(names_from);
            if duplicate {
                return None;
            }
            Value::Null
        } else {
            let mut map = Map::with_capacity(self.pairs.len() - pairs_from);
            for (k, v) in self.pairs.drain(pairs_from..) {
                if map.insert(k, v).is_some() {
                    return None;
                }
            }
            Value::Object(map)
        };
        let entries: Vec<Entry> = self.entries.drain(entries_from..).collect();
        Some((
            Node {
                start: first,
                end,
                kind: Kind::Map {
                    flow: false,
                    entries,
                },
                props: false,
            },
            value,
        ))
    }

    /// A block sequence whose dashes are at column `col`, the first at `first`.
    fn seq(&mut self, col: usize, first: usize, depth: usize) -> Option<(Node, Value)> {
        let (values_from, items_from) = (self.values.len(), self.items.len());
        let mut dash = first;
        let mut end;
        loop {
            let (node, v) = self.value(dash + 1, col, true, depth + 1)?;
            end = node.end.max(dash + 1);
            if !self.skip {
                self.values.push(v);
            }
            if self.tree {
                self.items.push(Item { dash, node });
            }
            match self.next_at(col, true)? {
                Some(next) => dash = next,
                None => break,
            }
        }
        let value = if self.skip {
            Value::Null
        } else {
            Value::Array(self.values.drain(values_from..).collect())
        };
        let items: Vec<Item> = self.items.drain(items_from..).collect();
        Some((
            Node {
                start: first,
                end,
                kind: Kind::Seq { flow: false, items },
                props: false,
            },
            value,
        ))
    }
}

/// True when a plain scalar may start at `at` (before the line's `end`)
/// and this reader reads it: not an indicator YAML gives a meaning to.
fn plain_start(b: &[u8], at: usize, end: usize) -> bool {
    match b[at] {
        b'[' | b']' | b'{' | b'}' | b',' | b'#' | b'&' | b'*' | b'!' | b'|' | b'>' | b'%'
        | b'@' | b'`' | b'\'' | b'"' => false,
        b'-' | b'?' | b':' => at + 1 < end && !matches!(b[at + 1], b' '),
        _ => true,
    }
}

#[cfg(test)]
mod tests {
    use super::super::Builder;
    use super::*;
    use proptest::prelude::*;

    /// Where this reader reads `text`, it builds what the event parser
    /// builds (with and without the tree); returns whether it read it.
    pub(crate) fn agrees(text: &str) -> bool {
        let mut read = false;
        for tree in [true, false] {
            if let Some(fast) = run(text, tree) {
                read = true;
                let events = Builder::run_events(text, tree)
                    .unwrap_or_else(|e| panic!("accepted what the parser refuses ({e}):\n{text}"));
                assert_eq!(fast, events, "tree: {tree}, text:\n{text}");
            }
        }
        // The identity read accepts what the value read accepts, and keeps
        // of it the entries that name an object, the others null.
        let expected = run(text, false).and_then(|(root, _, value, _)| {
            root.map(|_| {
                let mut value = value;
                for (k, v) in value.as_object_mut().expect("a root mapping") {
                    if !matches!(k.as_str(), "apiVersion" | "kind" | "metadata") {
                        *v = Value::Null;
                    }
                }
                value
            })
        });
        assert_eq!(identity(text), expected, "identity, text:\n{text}");
        read
    }

    const READ: &[&str] = &[
        "",
        "\n\n",
        "# only\n",
        "# head\n\n# more\n",
        "a: 1\n",
        "a: 1",
        "a:\n",
        "a:",
        "a: # c\n",
        "a:\nb: 2\n",
        "# Deployment 0\napiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: app-0\n  labels:\n    app: app-0\nspec:\n  replicas: 1 # kpt-set: ${replicas}\n  selector:\n    matchLabels:\n      app: app-0\n  template:\n    spec:\n      containers:\n      - name: app\n        image: nginx:1.25 # kpt-set: nginx:${tag}\n        ports:\n        - containerPort: 8080\n",
        "metadata:\n  name: config-1 # config of app 1\n  annotations:\n    config.kubernetes.io/index: \"1\"\n    x: 'it''s'\n    y: ''\n    z: \"\"\ndata:\n  LOG_LEVEL: info\n  FEATURE: \"on\"\n",
        "spec:\n  ports:\n    - port: 80\n      targetPort: 8080\n    -   name: x\n  list:\n  -\n  - # c\n    a: 1\n  - x\n",
        "a:   spaced   \nb: x#y\nc: 'q' # c\nd: \"q\"   \ne: -1\nf: -x\ng: :x\nh: ?y\ni: a,b[0]\n",
        "a:\n  # inside\n  b: 1\n  # after b\n# top\nc:\n- 1\n  # between\n- 2\n# tail\n",
        "key : v\n'quoted key': 1\n\"dq\": 2\n1: one\ntrue: t\n~: n\nnull: m\n",
        "x: 0123\ny: 007\nz: 0x1F\nw: 1e3\nv: .inf\nu: -.inf\nt: .nan\ns: 1_000\nr: 0o17\n",
        "  indented: 1\n  root: 2\n",
        "a:\n  - x\n  - y\nb:\n    deep: 1\n",
        "a: 1 #c\nb: 2  # c  \nc:     # c\n  d: 1\n",
    ];

    const FALLBACK: &[&str] = &[
        "a: [1, 2]\n",
        "a: {b: c}\n",
        "a: |\n  x\n",
        "a: >\n  x\n",
        "a: &x 1\nb: *x\n",
        "a: !t 1\n",
        "a: multi\n  line\n",
        "- a\n- b\n",
        "scalar\n",
        "a: 1\n---\nb: 2\n",
        "---\na: 1\n",
        "a: 1\n...\n",
        "a: \"esc\\n\"\n",
        "a: 'two\n  lines'\n",
        "a: é\n",
        "a:\tb\n",
        "a: 1\r\n",
        "a: 1\na: 2\n",
        "<<: {a: 1}\n",
        "a: b: c\n",
        "a:\n  b: 1\n c: 2\n",
        "- - x\n",
        "a:\n- - x\n",
        "? a\n: b\n",
        "a: - x\n",
        "a:\n  just a scalar\n",
    ];

    #[test]
    fn reads_plain_block_yaml_as_the_event_parser_does() {
        for text in READ {
            assert!(agrees(text), "not read by the fast path:\n{text}");
        }
    }

    /// The identity read leaves out the values of the entries that do not
    /// name an object, and still refuses what the value read refuses inside
    /// them (here a duplicate key deep in `spec`).
    #[test]
    fn the_identity_read_keeps_what_names_an_object() {
        let text = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\n  annotations:\n    x: '1'\ndata:\n  k: v\nspec:\n  list:\n  - a: 1\n    b: [\n";
        assert_eq!(identity(text), None, "flow syntax inside a left-out entry");
        let text = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\n  annotations:\n    x: '1'\ndata:\n  k: v\nspec:\n  list:\n  - a: 1\n    b: 2\n";
        assert_eq!(
            identity(text),
            Some(serde_json::json!({
                "apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "a", "annotations": {"x": "1"}},
                "data": null, "spec": null,
            }))
        );
        let duplicate =
            "apiVersion: v1\nkind: X\nmetadata:\n  name: a\nspec:\n  list:\n  - a: 1\n    'a': 2\n";
        assert_eq!(identity(duplicate), None);
        assert!(super::super::parse_identity(duplicate).is_err());
    }

    #[test]
    fn gives_up_on_everything_else() {
        for text in FALLBACK {
            assert!(run(text, true).is_none(), "read by the fast path:\n{text}");
            agrees(text);
        }
    }

    /// Pieces of block YAML lines, tricky ones included: keys and scalars
    /// that look like other types, quotes, comments, indicators.
    const KEYS: &[&str] = &[
        "a", "b", "key", "'q k'", "\"d\"", "1", "true", "~", "a b", "-x", "?x", ":x", "a#b", "a:b",
        "'it''s'", "\"\"", "''", "x'", "<<", "a ",
    ];
    const SCALARS: &[&str] = &[
        "", "1", "0123", "007", "0x1F", "1e3", ".inf", "-.inf", ".nan", "1_000", "0o17", "true",
        "null", "~", "x", "x y", "'it''s'", "\"dq\"", "''", "\"\"", "'a", "\"a", "a'", "x # c",
        "#c", "x#y", "a: b", "[1]", "{a: 1}", "|", ">", "&a x", "*a", "!t x", "- x", "x,y", "-",
        "--- x", "...", ":", "?", "a:", "'a' b", "\"a\" b", "'x' # c",
    ];

    /// A generated block node: a scalar's text, or a mapping or sequence.
    #[derive(Clone, Debug)]
    enum Shape {
        Scalar(&'static str),
        Map(Vec<(&'static str, Shape)>),
        Seq(Vec<Shape>),
    }

    /// Mostly plain scalars the fast path reads, sometimes [`SCALARS`].
    fn scalar() -> impl Strategy<Value = &'static str> {
        prop_oneof![
            4 => proptest::sample::select(&["x", "1", "web", "nginx:1.25", "a-b", "0.5", "true", "'q'", "\"d\"", "x y"][..]),
            1 => proptest::sample::select(SCALARS),
        ]
    }

    fn shape() -> impl Strategy<Value = Shape> {
        scalar().prop_map(Shape::Scalar).prop_recursive(4, 24, 4, |inner| {
            prop_oneof![
                proptest::collection::vec(
                    (prop_oneof![4 => proptest::sample::select(&["a", "b", "name", "spec", "k"][..]), 1 => proptest::sample::select(KEYS)], inner.clone()),
                    1..4
                )
                .prop_map(Shape::Map),
                proptest::collection::vec(inner, 1..4).prop_map(Shape::Seq),
            ]
        })
    }

    /// Writes `shape` as block YAML at column `col` (a mapping's entries or
    /// a sequence's dashes start there), nested levels `step` further in;
    /// `tails` picks each line's ending (nothing, a comment, a space).
    fn write(
        out: &mut String,
        shape: &Shape,
        col: usize,
        step: usize,
        tails: &mut impl Iterator<Item = &'static str>,
    ) {
        let pad = " ".repeat(col);
        match shape {
            Shape::Scalar(s) => {
                out.push_str(&pad);
                out.push_str(s);
                out.push_str(tails.next().unwrap_or(""));
                out.push('\n');
            }
            Shape::Map(entries) => {
                for (i, (key, value)) in entries.iter().enumerate() {
                    if !(i == 0 && out.ends_with("- ")) {
                        out.push_str(&pad);
                    }
                    out.push_str(key);
                    out.push(':');
                    match value {
                        Shape::Scalar(v) => {
                            out.push(' ');
                            out.push_str(v);
                            out.push_str(tails.next().unwrap_or(""));
                            out.push('\n');
                        }
                        Shape::Map(_) => {
                            out.push_str(tails.next().unwrap_or(""));
                            out.push('\n');
                            write(out, value, col + step, step, tails);
                        }
                        Shape::Seq(_) => {
                            out.push('\n');
                            let at = if step.is_multiple_of(2) {
                                col
                            } else {
                                col + step
                            };
                            write(out, value, at, step, tails);
                        }
                    }
                }
            }
            Shape::Seq(items) => {
                for item in items {
                    match item {
                        Shape::Scalar(v) => {
                            out.push_str(&pad);
                            out.push_str("- ");
                            out.push_str(v);
                            out.push_str(tails.next().unwrap_or(""));
                            out.push('\n');
                        }
                        Shape::Map(_) => {
                            out.push_str(&pad);
                            out.push_str("- ");
                            write(out, item, col + 2, step, tails);
                        }
                        Shape::Seq(_) => {
                            out.push_str(&pad);
                            out.push_str("-\n");
                            write(out, item, col + 2, step, tails);
                        }
                    }
                }
            }
        }
    }

    /// A document: a root mapping written by [`write`] with an indentation
    /// step of 1 to 4 and random line endings and comment lines.
    fn block_document() -> impl Strategy<Value = String> {
        (
            proptest::collection::vec((proptest::sample::select(KEYS), shape()), 1..4),
            1usize..5,
            proptest::collection::vec(
                prop_oneof![6 => Just(""), 1 => Just(" # note"), 1 => Just("  #x"), 1 => Just(" ")],
                64,
            ),
            proptest::collection::vec(0usize..40, 0..3),
            any::<bool>(),
        )
            .prop_map(|(root, step, tails, comments, newline)| {
                let mut out = String::new();
                let mut tails = tails.into_iter();
                write(&mut out, &Shape::Map(root), 0, step, &mut tails);
                // Comment lines at some line starts.
                for at in comments {
                    let starts: Vec<usize> = std::iter::once(0)
                        .chain(out.match_indices('\n').map(|(i, _)| i + 1))
                        .filter(|&i| i < out.len())
                        .collect();
                    let i = starts[at % starts.len()];
                    out.insert_str(i, "# c\n");
                }
                if !newline {
                    out.pop();
                }
                out
            })
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(3000))]

        /// Whatever block-shaped text this reader accepts, the event parser
        /// accepts too and reads into the same nodes, ranges, comments and
        /// values.
        #[test]
        fn agrees_with_the_event_parser_on_generated_block_yaml(text in block_document()) {
            agrees(&text);
        }

        /// The same for short texts over YAML's indicator characters.
        #[test]
        fn agrees_with_the_event_parser_on_indicator_soup(text in "[a1 :#'\"\\-\n?|>&*!\\[\\]{},.~]{0,40}") {
            agrees(&text);
        }
    }

    /// Every document of the test packages, and of the kpt and catalog
    /// fixture copies when their variables are set.
    #[test]
    fn agrees_on_every_document_of_the_test_packages() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests");
        let mut stack = vec![root];
        for var in ["KRM_FN_KPT_RENDER_FIXTURES", "KRM_FN_CATALOG_FIXTURES"] {
            stack.extend(std::env::var_os(var).map(std::path::PathBuf::from));
        }
        let (mut docs, mut read) = (0, 0);
        while let Some(dir) = stack.pop() {
            let Ok(entries) = std::fs::read_dir(&dir) else {
                continue;
            };
            for e in entries.flatten() {
                let p = e.path();
                if p.is_dir() {
                    stack.push(p);
                } else if p.extension().is_some_and(|x| x == "yaml" || x == "yml")
                    || p.file_name().is_some_and(|n| n == "Kptfile")
                {
                    let Ok(text) = std::fs::read_to_string(&p) else {
                        continue;
                    };
                    for doc in crate::domain::codec::preserve::split_documents(&text) {
                        docs += 1;
                        read += usize::from(agrees(&doc));
                    }
                }
            }
        }
        eprintln!("{read} of {docs} documents read by the fast path");
        assert!(
            docs > 50 && read > docs / 2,
            "{read} of {docs} documents read"
        );
    }
}
