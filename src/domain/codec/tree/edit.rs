//! Changing a parsed document in place ([`YamlDoc::replace_scalar`],
//! [`YamlDoc::insert_entries`]): the new bytes are read alone and every
//! later position moves by the change in length, so the document is what
//! reading its new text would give; what these are not sure of, they
//! decline, and the caller reads the text again.

use std::ops::Range;

use serde_json::Value;

use super::{Comment, Entry, Kind, Node, YamlDoc, column, line_end, spliced};

impl YamlDoc {
    /// Replaces, in place, the scalar value node that starts at byte
    /// `node`: the bytes `region` (the node and what surrounds it on its
    /// line — blanks before it, blanks and a comment after it) become
    /// `text` (a one-line scalar token, optionally followed by a blank and
    /// a comment). The document is then what [`YamlDoc::parse`] would read
    /// from the new text — the same nodes, byte ranges, comments and value
    /// — without reading it again: the token is read alone and every
    /// position after the region moves by the change in length.
    ///
    /// Returns false, changing nothing, when it cannot be sure of that: the
    /// document uses anchors, aliases or tags; `node` is not the start of a
    /// scalar value (a mapping's key, a collection, an empty value, a node
    /// with properties, inside a flow collection); `region` or `text` spans
    /// lines, holds anything but the node, blanks and whole comments, or
    /// `text` does not read alone as one scalar from its first byte. The
    /// caller then splices the text and parses it.
    pub fn replace_scalar(&mut self, node: usize, region: Range<usize>, text: &str) -> bool {
        if self.opaque || region.start > region.end || region.end > self.text.len() {
            return false;
        }
        let old = &self.text[region.clone()];
        if old.contains(['\n', '\r']) || text.contains(['\n', '\r']) {
            return false;
        }
        let Some((target, path)) = self.block_node_at(node, plain_scalar) else {
            return false;
        };
        let (old_start, old_end) = (target.start, target.end);
        if old_start < region.start || old_end > region.end || old_start == old_end {
            return false;
        }
        let t = &self.text;
        if !t[region.start..old_start].bytes().all(|b| b == b' ') {
            return false;
        }
        // After the node: blanks, then nothing or one comment that ends
        // the region.
        if !self.blanks_and_a_comment(region.start, old_end, region.end) {
            return false;
        }
        // The new token and comments, read alone.
        let Ok(piece) = YamlDoc::parse(text) else {
            return false;
        };
        let Some(new) = &piece.root else {
            return false;
        };
        if piece.opaque
            || new.props
            || new.start != 0
            || !matches!(new.kind, Kind::Scalar { empty: false, .. })
        {
            return false;
        }
        // A comment written ends the line: nothing may follow the region.
        if !piece.comments.is_empty() && line_end(t, region.end) != region.end {
            return false;
        }
        let delta = text.len() as isize - region.len() as isize;
        let new_end = region.start + new.end;
        let shift = |p: usize| -> usize {
            if p == old_end {
                new_end
            } else if p >= region.end {
                (p as isize + delta) as usize
            } else {
                p
            }
        };
        let replacement = Node {
            start: region.start,
            end: new_end,
            kind: new.kind.clone(),
            props: false,
        };
        let new_text = spliced(&self.text, region.clone(), text);
        let root = self.root.as_mut().expect("checked above");
        rebase(root, old_start, &replacement, &shift);
        self.comments = self.comments_moved(region.clone(), shift, &piece.comments, region.start);
        let value = value_at_mut(&mut self.value, &path);
        *value = piece.value;
        self.text = new_text.into();
        true
    }
}

impl YamlDoc {
    /// Adds, in place, entries at the end of the block mapping that starts
    /// at byte `map`: `text` — a line break, then the new entries at the
    /// column of the mapping's keys, each on its own lines — is inserted at
    /// `at`, the end of the line the mapping ends on (after a comment
    /// there, if any). The document is then what [`YamlDoc::parse`] would
    /// read from the new text, without reading it again: the new entries
    /// are read alone, with their indentation, and every later position
    /// moves by the length inserted.
    ///
    /// Returns false, changing nothing, when it cannot be sure of that: the
    /// document uses anchors, aliases or tags; no block mapping with entries
    /// starts at `map` (or it is inside a flow collection); anything but
    /// blanks and a comment lies between the mapping's end and `at`, or `at`
    /// does not end a line; `text` does not read alone as a block mapping at
    /// the mapping's key column, uses anchors, aliases or tags, or repeats a
    /// key of the mapping. The caller then splices the text and parses it.
    pub fn insert_entries(&mut self, map: usize, at: usize, text: &str) -> bool {
        if self.opaque || at > self.text.len() || !text.starts_with('\n') || text.contains('\r') {
            return false;
        }
        let t = &self.text;
        if line_end(t, at) != at {
            return false;
        }
        let Some((target, path)) = self.block_node_at(map, block_map) else {
            return false;
        };
        let Kind::Map { entries, .. } = &target.kind else {
            return false;
        };
        let old_end = target.end;
        if old_end > at {
            return false;
        }
        // Only blanks and one comment to the end of the line.
        if !self.blanks_and_a_comment(old_end, old_end, at) {
            return false;
        }
        let column = column(t, entries[0].key.start);
        let Ok(piece) = YamlDoc::parse(&text[1..]) else {
            return false;
        };
        let Some(new) = &piece.root else {
            return false;
        };
        let Kind::Map {
            flow: false,
            entries: added,
        } = &new.kind
        else {
            return false;
        };
        if piece.opaque || new.props || added.is_empty() || new.start != column {
            return false;
        }
        if added
            .iter()
            .any(|a| entries.iter().any(|e| e.name == a.name))
        {
            return false;
        }
        let base = at + 1;
        let delta = text.len();
        let new_end = base + new.end;
        // Nothing starts at `at` (a line break or the end), and what ends
        // there stays before the insertion.
        let shift = |p: usize| -> usize { if p > at { p + delta } else { p } };
        let moved = |n: &Node| -> Node {
            let mut n = n.clone();
            rebase(&mut n, usize::MAX, &Node::placeholder(), &|p| p + base);
            n
        };
        let added: Vec<Entry> = added
            .iter()
            .map(|e| Entry {
                key: moved(&e.key),
                name: e.name.clone(),
                colon: e.colon.map(|c| c + base),
                value: moved(&e.value),
            })
            .collect();
        let Value::Object(added_values) = &piece.value else {
            return false;
        };
        let new_text = spliced(&self.text, at..at, text);
        let root = self.root.as_mut().expect("checked above");
        grow(root, map, old_end, new_end, &shift);
        let target = node_at_mut(root, &path).expect("found above");
        if let Kind::Map { entries, .. } = &mut target.kind {
            entries.extend(added);
        }
        self.comments = self.comments_moved(at..at, shift, &piece.comments, base);
        let value = value_at_mut(&mut self.value, &path);
        let Value::Object(m) = value else {
            unreachable!("the tree and the value agree")
        };
        for (k, v) in added_values {
            m.insert(k.clone(), v.clone());
        }
        self.text = new_text.into();
        true
    }
}

impl YamlDoc {
    /// The node starting at `at` that `wanted` accepts, outside any flow
    /// collection, with the steps from the root to it.
    fn block_node_at(
        &self,
        at: usize,
        wanted: impl Fn(&Node) -> bool,
    ) -> Option<(&Node, Vec<Step>)> {
        let mut path = Vec::new();
        match node_at(self.root.as_ref()?, at, wanted, &mut path)? {
            (node, false) => Some((node, path)),
            (_, true) => None,
        }
    }

    /// True when the comments within `from..to` are at most one, and
    /// after `after` there are only blanks and then nothing or that one
    /// comment, ending at `to`.
    fn blanks_and_a_comment(&self, from: usize, after: usize, to: usize) -> bool {
        let rest = self.text[after..to].trim_start_matches(' ');
        let mut within = self
            .comments
            .iter()
            .filter(|c| c.end > from && c.start < to);
        match (within.next(), within.next()) {
            (None, _) => rest.is_empty(),
            (Some(c), None) => c.start == to - rest.len() && c.end == to,
            _ => false,
        }
    }

    /// The comments once `dropped` is rewritten: those within it gone, the
    /// others moved with `shift`, and `added` (read from the new text,
    /// which starts at `base`) in their place, in text order.
    fn comments_moved(
        &self,
        dropped: Range<usize>,
        shift: impl Fn(usize) -> usize,
        added: &[Comment],
        base: usize,
    ) -> Vec<Comment> {
        let mut comments: Vec<Comment> = self
            .comments
            .iter()
            .filter(|c| !(c.end > dropped.start && c.start < dropped.end))
            .map(|c| Comment {
                start: shift(c.start),
                end: shift(c.end),
                trailing: c.trailing,
            })
            .collect();
        comments.extend(added.iter().map(|c| Comment {
            start: c.start + base,
            end: c.end + base,
            trailing: c.trailing,
        }));
        comments.sort_by_key(|c| c.start);
        comments
    }
}

impl Node {
    /// A node that matches no position ([`rebase`] without a replacement).
    fn placeholder() -> Node {
        Node {
            start: usize::MAX,
            end: usize::MAX,
            kind: Kind::Alias,
            props: false,
        }
    }
}

/// Visits every node of `node`'s subtree (keys too) with `visit`, which
/// moves the node's own range and answers whether to go into it, and
/// moves the colons and dashes in between with `shift`.
fn walk(node: &mut Node, shift: &impl Fn(usize) -> usize, visit: &impl Fn(&mut Node) -> bool) {
    if !visit(node) {
        return;
    }
    match &mut node.kind {
        Kind::Map { entries, .. } => {
            for e in entries {
                walk(&mut e.key, shift, visit);
                e.colon = e.colon.map(shift);
                walk(&mut e.value, shift, visit);
            }
        }
        Kind::Seq { items, .. } => {
            for it in items {
                it.dash = shift(it.dash);
                walk(&mut it.node, shift, visit);
            }
        }
        _ => {}
    }
}

/// Moves every position of `node`'s subtree with `shift`, and puts
/// `replacement` in place of the scalar that starts at `target`.
fn rebase(node: &mut Node, target: usize, replacement: &Node, shift: &impl Fn(usize) -> usize) {
    walk(node, shift, &|n: &mut Node| {
        if n.start == target && matches!(n.kind, Kind::Scalar { .. }) {
            *n = replacement.clone();
            return false;
        }
        n.start = shift(n.start);
        n.end = shift(n.end);
        true
    });
}

/// Moves every position of `node`'s subtree with `shift`, except that the
/// mapping starting at `map` and the nodes holding it (those starting at
/// or before it and ending where it ends, `old_end`) end at `new_end`.
fn grow(
    node: &mut Node,
    map: usize,
    old_end: usize,
    new_end: usize,
    shift: &impl Fn(usize) -> usize,
) {
    walk(node, shift, &|n: &mut Node| {
        n.end = if n.end == old_end && n.start <= map {
            new_end
        } else {
            shift(n.end)
        };
        n.start = shift(n.start);
        true
    });
}

/// A step from a collection to one of its values.
enum Step {
    Key(String),
    Index(usize),
}

/// The child of `node` (a mapping entry's value or a sequence item) whose
/// range holds `at`, with the step to it; `None` for a scalar or when no
/// child holds it.
fn child_at(node: &Node, at: usize) -> Option<(Step, &Node)> {
    let holds = |n: &Node| n.start <= at && at < n.end.max(n.start + 1);
    match &node.kind {
        Kind::Map { entries, .. } => entries
            .iter()
            .find(|e| holds(&e.value))
            .map(|e| (Step::Key(e.name.clone()), &e.value)),
        Kind::Seq { items, .. } => items
            .iter()
            .enumerate()
            .find(|(_, it)| holds(&it.node))
            .map(|(i, it)| (Step::Index(i), &it.node)),
        _ => None,
    }
}

/// The node starting at `at` below (or being) `node` that `wanted`
/// accepts, found by descending through the children holding `at`; the
/// steps to it in `path`; and whether a flow collection lies on the way
/// (or is the node).
fn node_at<'n>(
    node: &'n Node,
    at: usize,
    wanted: impl Fn(&Node) -> bool,
    path: &mut Vec<Step>,
) -> Option<(&'n Node, bool)> {
    let mut node = node;
    let mut flow = false;
    loop {
        flow |= matches!(
            node.kind,
            Kind::Map { flow: true, .. } | Kind::Seq { flow: true, .. }
        );
        if node.start == at && wanted(node) {
            return Some((node, flow));
        }
        let (step, child) = child_at(node, at)?;
        path.push(step);
        node = child;
    }
}

/// The node `path` leads to from `node`, to change it.
fn node_at_mut<'n>(mut node: &'n mut Node, path: &[Step]) -> Option<&'n mut Node> {
    for step in path {
        node = match (step, &mut node.kind) {
            (Step::Key(k), Kind::Map { entries, .. }) => {
                &mut entries.iter_mut().find(|e| &e.name == k)?.value
            }
            (Step::Index(i), Kind::Seq { items, .. }) => &mut items.get_mut(*i)?.node,
            _ => return None,
        };
    }
    Some(node)
}

/// The value `path` leads to in `value` (the parsed value of the tree the
/// path was found in).
fn value_at_mut<'v>(mut value: &'v mut Value, path: &[Step]) -> &'v mut Value {
    for step in path {
        value = match (step, value) {
            (Step::Key(k), Value::Object(m)) => match m.get_mut(k.as_str()) {
                Some(v) => v,
                None => unreachable!("the tree and the value agree"),
            },
            (Step::Index(i), Value::Array(a)) => &mut a[*i],
            _ => unreachable!("the tree and the value agree"),
        };
    }
    value
}

/// A non-empty scalar without properties (what [`YamlDoc::replace_scalar`]
/// replaces).
fn plain_scalar(n: &Node) -> bool {
    matches!(n.kind, Kind::Scalar { empty: false, .. }) && !n.props
}

/// A block mapping with entries, without properties (what
/// [`YamlDoc::insert_entries`] adds to).
fn block_map(n: &Node) -> bool {
    !n.props && matches!(&n.kind, Kind::Map { flow: false, entries } if !entries.is_empty())
}
