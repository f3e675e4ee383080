//! The KRM `ResourceList` and its structured results.
//!
//! Shapes follow the KRM Functions Specification (`config.kubernetes.io/v1`):
//! `items` (KRM objects), optional `functionConfig`, optional `results`. Reading
//! is as lenient as kyaml's reader: any `apiVersion`, `kind: ResourceList` or
//! `List`, and `results` either as a list or as the legacy `{items: [...]}`
//! wrapper. Items are kept as ordered JSON values so key order survives.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use foldhash::{HashMap, HashSet, HashSetExt};

use rayon::prelude::*;
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::Value;

use super::codec::tree::YamlDoc;
use super::codec::{self, CodecError, preserve};

/// The `apiVersion` kyaml and kpt write on every ResourceList.
pub const RESOURCE_LIST_API_VERSION: &str = "config.kubernetes.io/v1";
/// The `kind` of a ResourceList.
pub const RESOURCE_LIST_KIND: &str = "ResourceList";

/// A parsed ResourceList.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ResourceList {
    /// `apiVersion`; not checked on read (kyaml does not check it either).
    #[serde(default)]
    pub api_version: String,
    /// `kind`: `ResourceList` (or `List`, accepted on read).
    pub kind: String,
    /// The KRM objects, in order.
    #[serde(default, deserialize_with = "null_as_default")]
    pub items: Vec<Value>,
    /// The functionConfig given to the function, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub function_config: Option<Value>,
    /// Structured results written by the function.
    #[serde(
        default,
        deserialize_with = "results_list_or_wrapper",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub results: Vec<ResultItem>,
}

/// Why bytes could not be read as a ResourceList.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ResourceListError {
    /// Nothing but whitespace or comments.
    #[error("the ResourceList is empty: expected exactly one YAML object with kind ResourceList")]
    Empty,
    /// Not YAML, or not a single mapping.
    #[error("the ResourceList is not valid YAML: {0}")]
    Syntax(#[source] CodecError),
    /// A YAML object whose kind is something else.
    #[error("expected kind ResourceList, got kind {0:?}")]
    WrongKind(String),
    /// A function's output without an `items` field
    /// ([`ResourceList::check_output_items`]).
    #[error(
        "the ResourceList has no `items` field: a function's output lists the objects it keeps there (`items: []` removes them all)"
    )]
    NoItems,
    /// A function's output whose `items` is null
    /// ([`ResourceList::check_output_items`]).
    #[error(
        "the ResourceList's `items` is null, not a list of objects (write `items: []` to remove every object)"
    )]
    NullItems,
}

impl ResourceList {
    /// An empty `config.kubernetes.io/v1` ResourceList.
    pub fn new(items: Vec<Value>) -> Self {
        Self {
            api_version: RESOURCE_LIST_API_VERSION.into(),
            kind: RESOURCE_LIST_KIND.into(),
            items,
            function_config: None,
            results: Vec::new(),
        }
    }

    /// Parses a whole ResourceList from YAML or JSON bytes.
    ///
    /// Errors: [`ResourceListError`] when the bytes are empty, not one YAML
    /// mapping, or of another kind.
    pub fn parse(bytes: &[u8]) -> Result<Self, ResourceListError> {
        check_not_empty(bytes)?;
        let list: ResourceList =
            codec::from_yaml_slice(bytes).map_err(ResourceListError::Syntax)?;
        check_kind(&list.kind)?;
        Ok(list)
    }

    /// Parses a function's output, with the text of each item, reusing
    /// the values of items the function wrote back byte for byte as it got
    /// them.
    ///
    /// `sent` holds the document text of each input item as the function
    /// received it (see [`ResourceList::to_yaml_with`]) and `sent_values`
    /// their values. When the output is a block-style ResourceList (what the
    /// functions SDKs write), its `items` are cut into one document per item
    /// at their dashes; an item whose text equals an input item's is that
    /// item (no parse), any other is parsed on its own, keeping its text
    /// ([`OutputItem::Text`]). Anything else (flow style, `---` in the
    /// output, an item that does not parse alone) is parsed whole, without
    /// item texts.
    ///
    /// Errors: as [`ResourceList::parse`].
    pub fn parse_output(
        bytes: &[u8],
        sent: &[Arc<str>],
        sent_values: &[serde_json::Value],
    ) -> Result<(Self, Option<Vec<OutputItem>>), ResourceListError> {
        Self::parse_output_taking(bytes, sent, &mut |j| sent_values.get(j).cloned())
    }

    /// [`ResourceList::parse_output`] with the value of an item sent back
    /// unchanged got from `take` (called with the input item's position;
    /// `None`: read the item's text instead) — so a caller that owns the
    /// input items can move them into the output instead of copying them.
    pub(crate) fn parse_output_taking(
        bytes: &[u8],
        sent: &[Arc<str>],
        take: &mut dyn FnMut(usize) -> Option<serde_json::Value>,
    ) -> Result<(Self, Option<Vec<OutputItem>>), ResourceListError> {
        if let Ok(text) = std::str::from_utf8(bytes)
            && let Some(parsed) = parse_by_item(text, sent, take, ItemRead::Texts)
        {
            return Ok((parsed.0, Some(parsed.1)));
        }
        Ok((Self::parse(bytes)?, None))
    }

    /// [`ResourceList::parse_output`] without the item texts: the same
    /// values, each changed item read as a value only (no node tree, no
    /// comments) — for output whose layout nobody keeps.
    ///
    /// Errors: as [`ResourceList::parse`].
    pub fn parse_output_values(
        bytes: &[u8],
        sent: &[Arc<str>],
        sent_values: &[serde_json::Value],
    ) -> Result<Self, ResourceListError> {
        let mut take = |j: usize| sent_values.get(j).cloned();
        Self::parse_output_read(bytes, sent, &mut take, ItemRead::Values)
    }

    /// [`ResourceList::parse_output_values`] for output that is only
    /// checked (a render's validator: kpt checks its output objects' ids,
    /// annotations, paths and KRM shape, then discards them): each changed
    /// item is read whole for its syntax, but its value keeps only
    /// `apiVersion`, `kind` and `metadata`, its other top-level entries
    /// null ([`codec::tree::parse_identity`]). The values of items sent
    /// back unchanged come from `take`, as in
    /// [`ResourceList::parse_output_taking`].
    ///
    /// Errors: as [`ResourceList::parse`].
    pub(crate) fn parse_output_checked_taking(
        bytes: &[u8],
        sent: &[Arc<str>],
        take: &mut dyn FnMut(usize) -> Option<serde_json::Value>,
    ) -> Result<Self, ResourceListError> {
        Self::parse_output_read(bytes, sent, take, ItemRead::Identity)
    }

    /// The output read item by item as `read` says (without item texts),
    /// else parsed whole.
    fn parse_output_read(
        bytes: &[u8],
        sent: &[Arc<str>],
        take: &mut dyn FnMut(usize) -> Option<serde_json::Value>,
        read: ItemRead,
    ) -> Result<Self, ResourceListError> {
        if let Ok(text) = std::str::from_utf8(bytes)
            && let Some(parsed) = parse_by_item(text, sent, take, read)
        {
            return Ok(parsed.0);
        }
        Self::parse(bytes)
    }

    /// Checks that a function's output, `bytes` (a ResourceList that
    /// [`ResourceList::parse`] reads), has an `items` field holding a list
    /// (`items: []` included): the output replaces every object the
    /// function got, so an output that does not say which objects it keeps
    /// must not be read as one that keeps none (that would delete every
    /// file of a package, its Kptfile included).
    ///
    /// kpt fails an output without `items` too (kyaml reads the whole list
    /// as one object, which has no `metadata.name`); it reads `items: null`
    /// as an empty list and deletes every file, which we refuse.
    ///
    /// Errors: [`ResourceListError::NoItems`], [`ResourceListError::NullItems`],
    /// or as [`ResourceList::parse`] for bytes that are no ResourceList.
    pub fn check_output_items(bytes: &[u8]) -> Result<(), ResourceListError> {
        let top: serde_json::Map<String, Value> =
            codec::from_yaml_slice(bytes).map_err(ResourceListError::Syntax)?;
        match top.get("items") {
            None => Err(ResourceListError::NoItems),
            Some(Value::Null) => Err(ResourceListError::NullItems),
            Some(_) => Ok(()),
        }
    }

    /// Checks that `bytes` are a single YAML object of kind `ResourceList`
    /// (or `List`) without building the items.
    ///
    /// This is the runner's input validation: a request that fails it is
    /// rejected before any function runs. A ResourceList as kyaml writes it
    /// is read in one pass over its lines without parsing it
    /// ([`codec::top_level`]); anything that scan is not sure of (flow or
    /// JSON roots, aliases, multi-line quoted scalars, ...) and every input
    /// that fails is parsed with the codec's bounds, which words the error.
    /// The syntax inside the items of a list whose top level is right is
    /// left to the function, as Porch's runner leaves all of it.
    pub fn validate(bytes: &[u8]) -> Result<(), ResourceListError> {
        #[derive(Deserialize)]
        struct Header {
            #[serde(default)]
            kind: Option<String>,
        }
        if Self::is_plainly_valid(bytes) {
            return Ok(());
        }
        check_not_empty(bytes)?;
        let header: Header = codec::from_yaml_slice(bytes).map_err(ResourceListError::Syntax)?;
        check_kind(header.kind.as_deref().unwrap_or(""))
    }

    /// True when the one-pass scan of [`codec::top_level`] is sure that
    /// `bytes` are a ResourceList (or `List`) that [`ResourceList::validate`]
    /// accepts; false when it is not sure (then `validate` parses them).
    /// Linear in the length, about 1 ms per MiB.
    pub fn is_plainly_valid(bytes: &[u8]) -> bool {
        codec::top_level::block_mapping_kind(bytes).is_some_and(|k| check_kind(k).is_ok())
    }

    /// Serializes as YAML.
    ///
    /// Errors: only for values YAML cannot represent.
    pub fn to_yaml(&self) -> Result<String, CodecError> {
        codec::to_yaml_string(self)
    }

    /// Serializes as YAML with each item's text supplied by `item_text`
    /// (called with the item's position and value; it returns one YAML
    /// document). Used to pass items with their comments, as kpt does.
    ///
    /// The items are formatted in parallel on all cores (rayon's global
    /// pool): editing a thousand objects' texts is most of what a render
    /// spends outside its functions. `item_text` may therefore be called
    /// from several threads and in any order; the output keeps item order.
    ///
    /// Errors: only for values YAML cannot represent.
    pub fn to_yaml_with<T: AsRef<str> + Send>(
        &self,
        item_text: impl Fn(usize, &Value) -> T + Sync,
    ) -> Result<String, CodecError> {
        let api_version = if self.api_version.is_empty() {
            RESOURCE_LIST_API_VERSION
        } else {
            &self.api_version
        };
        let header = serde_json::json!({"apiVersion": api_version, "kind": self.kind});
        let mut out = codec::to_yaml_string(&header)?;
        if self.items.is_empty() {
            out.push_str("items: []\n");
        } else {
            out.push_str("items:\n");
            let texts: Vec<String> = self
                .items
                .par_iter()
                .enumerate()
                .map(|(i, item)| preserve::nest(item_text(i, item).as_ref(), "- ", "  "))
                .collect();
            for text in texts {
                out.push_str(&text);
            }
        }
        if let Some(config) = &self.function_config {
            out.push_str("functionConfig:\n");
            out.push_str(&preserve::nest(&codec::to_yaml_string(config)?, "  ", "  "));
        }
        if !self.results.is_empty() {
            out.push_str("results:\n");
            out.push_str(&preserve::nest(
                &codec::to_yaml_string(&self.results)?,
                "  ",
                "  ",
            ));
        }
        Ok(out)
    }

    /// True when any result has severity `error`.
    pub fn has_error_results(&self) -> bool {
        self.results
            .iter()
            .any(|r| r.severity == Some(Severity::Error))
    }
}

/// An output item's text, from [`ResourceList::parse_output`].
#[derive(Debug, Clone, PartialEq)]
pub enum OutputItem {
    /// Byte for byte the text of input item `n`.
    Same(usize),
    /// Text the function wrote, parsed.
    Text(Arc<YamlDoc>),
}

/// How [`parse_by_item`] reads each changed output item.
#[derive(Clone, Copy, PartialEq)]
enum ItemRead {
    /// Its text and value ([`OutputItem::Text`]).
    Texts,
    /// Its value only.
    Values,
    /// What names it only ([`codec::tree::parse_identity`]).
    Identity,
}

/// The block-style fast path of [`ResourceList::parse_output`]; `None` when
/// the text is not laid out that way or a piece does not parse alone.
fn parse_by_item(
    text: &str,
    sent: &[Arc<str>],
    take: &mut dyn FnMut(usize) -> Option<serde_json::Value>,
    read: ItemRead,
) -> Option<(ResourceList, Vec<OutputItem>)> {
    let texts = read == ItemRead::Texts;
    if text.contains('\r') || text.starts_with('%') {
        return None;
    }
    let mut lines: Vec<&str> = Vec::with_capacity(text.bytes().filter(|&b| b == b'\n').count() + 1);
    lines.extend(text.split_inclusive('\n'));
    let is_top_key = |l: &str| {
        let b = l.as_bytes();
        !b.is_empty() && !matches!(b[0], b' ' | b'\t' | b'#' | b'-' | b'\n' | b'.')
    };
    let start = lines.iter().position(|l| {
        l.strip_prefix("items:").is_some_and(|rest| {
            let rest = rest.trim();
            rest.is_empty() || rest.starts_with('#')
        })
    })?;
    let end = lines[start + 1..]
        .iter()
        .position(|l| is_top_key(l) || l.starts_with("---") || l.starts_with("..."))
        .map_or(lines.len(), |p| start + 1 + p);
    if lines[..start]
        .iter()
        .chain(&lines[end..])
        .any(|l| l.starts_with("---") || l.starts_with("..."))
    {
        return None;
    }
    // Items start with `-` at one column; everything else is deeper.
    let region = &lines[start + 1..end];
    let content = |l: &str| {
        let t = l.trim_start_matches(' ');
        !(t.trim().is_empty() || t.starts_with('#'))
    };
    let first = region.iter().find(|l| content(l))?;
    let col = first.len() - first.trim_start_matches(' ').len();
    let is_dash = |l: &str| {
        let t = &l[col.min(l.len())..];
        l[..col.min(l.len())].bytes().all(|b| b == b' ')
            && (t.starts_with("- ") || t.trim_end() == "-" || t.starts_with("-\t"))
    };
    if !is_dash(first) {
        return None;
    }
    // Item `i` is the lines `region[bounds[i]..bounds[i + 1]]`; the blank
    // and comment lines before the first dash go with the first item.
    let mut bounds: Vec<usize> = Vec::with_capacity(sent.len() + 2);
    bounds.push(0);
    let mut seen_dash = false;
    for (k, l) in region.iter().enumerate() {
        if content(l) {
            if is_dash(l) {
                if seen_dash {
                    bounds.push(k);
                }
                seen_dash = true;
                continue;
            }
            let indent = l.len() - l.trim_start_matches(' ').len();
            if indent <= col {
                return None;
            }
        }
    }
    bounds.push(region.len());
    // Input texts by text, for items the function moved; built at the
    // first item not at its input's place (most functions keep the order).
    let mut by_text: Option<HashMap<&str, usize>> = None;
    let mut moved = |doc: &str| {
        by_text
            .get_or_insert_with(|| {
                sent.iter()
                    .enumerate()
                    .map(|(i, t)| (t.as_ref(), i))
                    .collect()
            })
            .get(doc)
            .copied()
    };
    if texts {
        move_head_comments(region, &mut bounds, sent);
    }
    let count = bounds.len() - 1;
    let mut items = Vec::with_capacity(count);
    let mut values = Vec::with_capacity(count);
    for (i, pair) in bounds.windows(2).enumerate() {
        let doc = dedent_item(&region[pair[0]..pair[1]], col)?;
        if !texts {
            // Values only: an item sent back unchanged is the input's value.
            let same = sent
                .get(i)
                .filter(|s| s.as_ref() == doc)
                .map(|_| i)
                .or_else(|| moved(&doc));
            values.push(match same.and_then(&mut *take) {
                Some(v) => v,
                None if read == ItemRead::Identity => codec::tree::parse_identity(&doc).ok()?,
                None => codec::tree::parse_value(&doc).ok()?,
            });
            continue;
        }
        let doc = indent_comments_like_their_node(doc);
        let same = sent
            .get(i)
            .filter(|s| s.as_ref() == doc)
            .map(|_| i)
            .or_else(|| moved(&doc));
        match same.and_then(|j| take(j).map(|v| (j, v))) {
            Some((j, v)) => {
                values.push(v);
                items.push(OutputItem::Same(j));
            }
            None => {
                let parsed = YamlDoc::parse(doc).ok()?;
                values.push(parsed.value().clone());
                items.push(OutputItem::Text(Arc::new(parsed)));
            }
        }
    }
    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Rest {
        #[serde(default)]
        api_version: String,
        #[serde(default)]
        kind: String,
        #[serde(default)]
        items: Option<serde_json::Value>,
        #[serde(default)]
        function_config: Option<serde_json::Value>,
        #[serde(default, deserialize_with = "results_list_or_wrapper")]
        results: Vec<ResultItem>,
    }
    let rest: String = lines[..start].concat() + &lines[end..].concat();
    // Read like the items (the tree builder: the same values as the codec's
    // general path, faster), then typed.
    let rest: Rest = serde_json::from_value(codec::tree::parse_value(&rest).ok()?).ok()?;
    if rest.items.is_some() || check_kind(&rest.kind).is_err() {
        return None;
    }
    Some((
        ResourceList {
            api_version: rest.api_version,
            kind: rest.kind,
            items: values,
            function_config: rest.function_config,
            results: rest.results,
        },
        items,
    ))
}

/// Comment lines between one item's last line and the next item's dash
/// belong to the next item (they are the comments a function wrote above
/// it, as YAML libraries write an item's head comment before its dash) —
/// except those a text sent to the function ends with (a comment below an
/// object, passed through; the function may have reordered the objects).
/// Item `i` is `region[bounds[i]..bounds[i + 1]]`: moving an item's last
/// lines to the next item moves the boundary between them.
fn move_head_comments(region: &[&str], bounds: &mut [usize], sent: &[Arc<str>]) {
    let is_content = |l: &str| {
        let t = l.trim();
        !(t.is_empty() || t.starts_with('#'))
    };
    // Every run of final comment lines of a sent text (trimmed, joined).
    let mut sent_tails: HashSet<String> = HashSet::new();
    for text in sent {
        let tail: Vec<&str> = text
            .lines()
            .rev()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .take_while(|l| l.starts_with('#'))
            .collect();
        for k in 1..=tail.len() {
            let run: Vec<&str> = tail[..k].iter().rev().copied().collect();
            sent_tails.insert(run.join("\n"));
        }
    }
    for i in 0..bounds.len().saturating_sub(2) {
        let chunk = &region[bounds[i]..bounds[i + 1]];
        let Some(last) = chunk.iter().rposition(|l| is_content(l)) else {
            continue;
        };
        // The comment lines after the content (blank lines between them).
        let tail: Vec<usize> = (last + 1..chunk.len())
            .filter(|&k| chunk[k].trim().starts_with('#'))
            .collect();
        if tail.is_empty() {
            continue;
        }
        // Keep the longest leading run of them that a sent text ends with.
        let keep = (1..=tail.len())
            .rev()
            .find(|&k| {
                let run: Vec<&str> = tail[..k].iter().map(|&x| chunk[x].trim()).collect();
                sent_tails.contains(&run.join("\n"))
            })
            .unwrap_or(0);
        if keep == tail.len() {
            continue;
        }
        // The lines from `tail[keep]` on start the next item.
        bounds[i + 1] = bounds[i] + tail[keep];
    }
}

/// `doc` with each comment line that is less indented than the line it
/// stands above (a key or item) indented like that line: the function put
/// the comment on that node, whatever column its YAML library wrote it at.
/// Unchanged when that would change what `doc` reads as (a `#` line inside
/// a block scalar is not a comment).
fn indent_comments_like_their_node(doc: String) -> String {
    // Only whole-line comments move; most documents have none (a `#` after
    // content on its line, as in `replicas: 1 # kpt-set: …`, stays).
    let comment_line = |(at, _): (usize, &str)| {
        let line_start = doc[..at].rfind('\n').map_or(0, |n| n + 1);
        doc[line_start..at].trim_start().is_empty()
    };
    if !doc.match_indices('#').any(comment_line) {
        return doc;
    }
    let lines: Vec<&str> = doc.split_inclusive('\n').collect();
    let indent = |l: &str| l.len() - l.trim_start_matches(' ').len();
    // Most documents have none to move: find the first before copying.
    let moves = |i: usize, l: &str| {
        l.trim_start().starts_with('#')
            && lines[i + 1..]
                .iter()
                .find(|n| !n.trim().is_empty() && !n.trim_start().starts_with('#'))
                .is_some_and(|n| indent(n) > indent(l))
    };
    if !lines.iter().enumerate().any(|(i, l)| moves(i, l)) {
        return doc;
    }
    let mut out = String::with_capacity(doc.len());
    let mut changed = false;
    for (i, l) in lines.iter().enumerate() {
        if l.trim_start().starts_with('#') {
            let next = lines[i + 1..]
                .iter()
                .find(|n| !n.trim().is_empty() && !n.trim_start().starts_with('#'));
            if let Some(n) = next
                && indent(n) > indent(l)
            {
                out.push_str(&" ".repeat(indent(n)));
                out.push_str(l.trim_start_matches(' '));
                changed = true;
                continue;
            }
        }
        out.push_str(l);
    }
    if !changed {
        return doc;
    }
    match (YamlDoc::parse(doc.as_str()), YamlDoc::parse(out.as_str())) {
        (Ok(a), Ok(b)) if a.value() == b.value() => out,
        _ => doc,
    }
}

/// The document text of one item of a block sequence whose dashes are at
/// column `col`: the dash and the indentation of its content removed.
fn dedent_item(lines: &[&str], col: usize) -> Option<String> {
    let dash_at = lines.iter().position(|l| {
        let t = l.trim_start_matches(' ');
        t.starts_with('-') && l.len() - t.len() == col
    })?;
    let dash_line = lines[dash_at];
    let after = &dash_line[col + 1..];
    let spaces = after.len() - after.trim_start_matches(' ').len();
    let inline = after.trim();
    let content_col = if inline.is_empty() || inline.starts_with('#') {
        lines[dash_at + 1..]
            .iter()
            .find(|l| {
                let t = l.trim_start_matches(' ');
                !t.trim().is_empty() && !t.starts_with('#')
            })
            .map_or(col + 2, |l| l.len() - l.trim_start_matches(' ').len())
    } else {
        col + 1 + spaces
    };
    let mut out = String::with_capacity(lines.iter().map(|l| l.len()).sum());
    for (i, l) in lines.iter().enumerate() {
        if i == dash_at {
            let first = after.trim_start_matches(' ');
            if !first.trim().is_empty() {
                out.push_str(first);
            }
            continue;
        }
        let lead = l.len() - l.trim_start_matches(' ').len();
        out.push_str(&l[lead.min(content_col)..]);
    }
    Some(out)
}

fn check_not_empty(bytes: &[u8]) -> Result<(), ResourceListError> {
    let meaningful = String::from_utf8_lossy(bytes)
        .lines()
        .map(str::trim)
        .any(|l| !l.is_empty() && !l.starts_with('#') && l != "---" && l != "...");
    if meaningful {
        Ok(())
    } else {
        Err(ResourceListError::Empty)
    }
}

fn check_kind(kind: &str) -> Result<(), ResourceListError> {
    if kind == RESOURCE_LIST_KIND || kind == "List" {
        Ok(())
    } else {
        Err(ResourceListError::WrongKind(kind.to_string()))
    }
}

fn null_as_default<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Default + Deserialize<'de>,
{
    Ok(Option::<T>::deserialize(d)?.unwrap_or_default())
}

fn results_list_or_wrapper<'de, D>(d: D) -> Result<Vec<ResultItem>, D::Error>
where
    D: Deserializer<'de>,
{
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Results {
        List(Vec<ResultItem>),
        Wrapper {
            #[serde(default)]
            items: Vec<ResultItem>,
        },
    }
    Ok(match Option::<Results>::deserialize(d)? {
        None => Vec::new(),
        Some(Results::List(v)) | Some(Results::Wrapper { items: v }) => v,
    })
}

/// Severity of a result (KRM spec: `error`, `warning`, `info`).
///
/// A missing severity reads as `info`, as kpt prints it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    /// The function found a problem that fails the invocation.
    Error,
    /// A problem that does not fail the invocation.
    Warning,
    /// Informational.
    #[default]
    Info,
}

impl fmt::Display for Severity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Severity::Error => "error",
            Severity::Warning => "warning",
            Severity::Info => "info",
        })
    }
}

/// One structured result (KRM spec `Result`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ResultItem {
    /// Human-readable message (required by the spec; empty when absent).
    #[serde(default)]
    pub message: String,
    /// Severity; `None` when the function gave none (printed and counted
    /// as `info`, kept absent when results are stored, as kpt does).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub severity: Option<Severity>,
    /// The object the result is about.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource_ref: Option<ResourceRef>,
    /// The field the result is about.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub field: Option<FieldRef>,
    /// The file the result is about.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file: Option<FileRef>,
    /// Free-form tags.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub tags: BTreeMap<String, String>,
}

/// Identifies a KRM object (`resourceRef`).
///
/// Read also in the legacy spelling of older SDKs, `resourceRef.metadata.{name,
/// namespace}`, which kpt migrates the same way (an empty or `''` namespace
/// is no namespace).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", from = "ResourceRefWire")]
pub struct ResourceRef {
    /// `apiVersion` of the object.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub api_version: String,
    /// `kind` of the object.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub kind: String,
    /// `metadata.name`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
    /// `metadata.namespace`, empty for cluster-scoped objects.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub namespace: String,
}

/// A field of an object (`field`): dotted `path` plus optional values.
///
/// Read also in the legacy spelling `field.suggestedValue`, which kpt takes
/// as the proposed value.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", from = "FieldRefWire")]
pub struct FieldRef {
    /// Dotted path such as `spec.template.spec.containers[3].image`.
    #[serde(default)]
    pub path: String,
    /// The current value, any YAML value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current_value: Option<Value>,
    /// The proposed value, any YAML value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub proposed_value: Option<Value>,
}

/// `resourceRef` as functions write it, legacy spelling included.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ResourceRefWire {
    #[serde(default)]
    api_version: String,
    #[serde(default)]
    kind: String,
    #[serde(default)]
    name: String,
    #[serde(default)]
    namespace: String,
    #[serde(default)]
    metadata: Option<LegacyMeta>,
}

/// `resourceRef.metadata` of older SDKs.
#[derive(Deserialize)]
struct LegacyMeta {
    #[serde(default)]
    name: Option<serde_json::Value>,
    #[serde(default)]
    namespace: Option<serde_json::Value>,
}

fn scalar_string(v: &serde_json::Value) -> String {
    match v {
        serde_json::Value::String(s) => s.trim().to_string(),
        serde_json::Value::Null => String::new(),
        other => other.to_string(),
    }
}

impl From<ResourceRefWire> for ResourceRef {
    fn from(w: ResourceRefWire) -> Self {
        let mut r = ResourceRef {
            api_version: w.api_version,
            kind: w.kind,
            name: w.name,
            namespace: w.namespace,
        };
        if let Some(meta) = w.metadata {
            if let Some(name) = meta.name {
                r.name = scalar_string(&name);
            }
            if let Some(ns) = meta.namespace.map(|n| scalar_string(&n))
                && !ns.is_empty()
                && ns != "''"
            {
                r.namespace = ns;
            }
        }
        r
    }
}

/// `field` as functions write it, legacy spelling included.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct FieldRefWire {
    #[serde(default)]
    path: String,
    #[serde(default)]
    current_value: Option<serde_json::Value>,
    #[serde(default)]
    proposed_value: Option<serde_json::Value>,
    #[serde(default)]
    suggested_value: Option<serde_json::Value>,
}

impl From<FieldRefWire> for FieldRef {
    fn from(w: FieldRefWire) -> Self {
        FieldRef {
            path: w.path,
            current_value: w.current_value,
            proposed_value: w.suggested_value.or(w.proposed_value),
        }
    }
}

/// A file position (`file`): slash-separated relative `path` and document `index`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileRef {
    /// Relative, slash-separated path.
    #[serde(default)]
    pub path: String,
    /// 0-based index of the document in a multi-document file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub index: Option<i64>,
}

impl fmt::Display for ResultItem {
    /// Renders a result as Porch's wrapper server does (and kpt prints a
    /// stored one): [`write_result_line`].
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write_result_line(
            f,
            self.severity,
            self.resource_ref.as_ref(),
            self.field.as_ref().map(|x| x.path.as_str()),
            &self.message,
        )
    }
}

/// Writes one result on one line, as Porch's wrapper server reports it and
/// kpt prints it:
/// `[<severity>] <apiVersion/kind/namespace/name> <field path>: <message>`,
/// with the empty parts of the object's id, the id itself when all are
/// empty, and an empty or absent field path omitted; no severity reads as
/// `info`. The one rendering of [`ResultItem`] and of its stored form
/// ([`StructuredResult`](crate::domain::render::results::StructuredResult)).
///
/// Errors: only the formatter's.
pub fn write_result_line(
    f: &mut fmt::Formatter<'_>,
    severity: Option<Severity>,
    resource_ref: Option<&ResourceRef>,
    field_path: Option<&str>,
    message: &str,
) -> fmt::Result {
    write!(f, "[{}]", severity.unwrap_or_default())?;
    if let Some(r) = resource_ref {
        let id: Vec<&str> = [&r.api_version, &r.kind, &r.namespace, &r.name]
            .into_iter()
            .map(String::as_str)
            .filter(|s| !s.is_empty())
            .collect();
        if !id.is_empty() {
            write!(f, " {}", id.join("/"))?;
        }
    }
    if let Some(path) = field_path.filter(|p| !p.is_empty()) {
        write!(f, " {path}")?;
    }
    write!(f, ": {message}")
}

/// Renders results the way Porch's wrapper server reports them in an error,
/// one per paragraph (joined by a blank line).
pub fn format_results(results: &[ResultItem]) -> String {
    results
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("\n\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    const RL: &str = r#"
apiVersion: config.kubernetes.io/v1
kind: ResourceList
items:
- apiVersion: v1
  kind: ConfigMap
  metadata:
    name: cm
functionConfig:
  apiVersion: v1
  kind: ConfigMap
  data: {namespace: ns}
results:
- message: bad replicas
  severity: error
  resourceRef: {apiVersion: apps/v1, kind: Deployment, name: web, namespace: prod}
  field: {path: spec.replicas, currentValue: 0}
  file: {path: deploy.yaml, index: 1}
- message: fyi
"#;

    #[test]
    fn parses_items_config_and_results() {
        let rl = ResourceList::parse(RL.as_bytes()).unwrap();
        assert_eq!(rl.items.len(), 1);
        assert_eq!(
            rl.function_config.as_ref().unwrap()["data"]["namespace"],
            "ns"
        );
        assert_eq!(rl.results.len(), 2);
        assert_eq!(rl.results[0].severity, Some(Severity::Error));
        assert_eq!(rl.results[1].severity.unwrap_or_default(), Severity::Info);
        assert_eq!(rl.results[0].file.as_ref().unwrap().index, Some(1));
        assert!(rl.has_error_results());
    }

    #[test]
    fn comments_written_above_an_item_belong_to_it() {
        let sent: Vec<Arc<str>> = vec![
            Arc::from("kind: A\nmetadata:\n  name: a\n# below a\n"),
            Arc::from("kind: B\nmetadata:\n  name: b\n"),
        ];
        let values: Vec<Value> = sent
            .iter()
            .map(|t| crate::domain::codec::from_yaml_str(t).unwrap())
            .collect();
        // ruamel.yaml's layout: an item's head comment before its dash, a
        // new key's comment at the column of its parent.
        let out = "apiVersion: v1\nkind: ResourceList\nitems:\n\
                   - kind: A\n  metadata:\n    name: a\n  # below a\n\
                   # about b\n- kind: B\n  metadata:\n    name: b\n  # new\n    x: 1\n";
        let (list, texts) = ResourceList::parse_output(out.as_bytes(), &sent, &values).unwrap();
        let texts = texts.unwrap();
        assert_eq!(texts[0], OutputItem::Same(0));
        let OutputItem::Text(b) = &texts[1] else {
            panic!("{texts:?}")
        };
        assert_eq!(
            b.text(),
            "# about b\nkind: B\nmetadata:\n  name: b\n  # new\n  x: 1\n"
        );
        assert_eq!(list.items[1]["metadata"]["x"], 1);
    }

    #[test]
    fn a_hash_line_in_a_block_scalar_is_not_moved() {
        let doc = "data:\n  s: |\n    # not a comment\n      deeper\n".to_string();
        assert_eq!(indent_comments_like_their_node(doc.clone()), doc);
    }

    #[test]
    fn renders_results_like_porch() {
        let rl = ResourceList::parse(RL.as_bytes()).unwrap();
        assert_eq!(
            format_results(&rl.results),
            "[error] apps/v1/Deployment/prod/web spec.replicas: bad replicas\n\n[info]: fyi"
        );
    }

    #[test]
    fn legacy_result_spellings_are_migrated() {
        let rl = ResourceList::parse(
            b"kind: ResourceList\nitems: []\nresults:\n- message: m\n  resourceRef:\n    apiVersion: v1\n    kind: ConfigMap\n    metadata: {name: ' cm ', namespace: \"''\"}\n  field:\n    path: a.b\n    suggestedValue: 3\n",
        )
        .unwrap();
        let r = &rl.results[0];
        let rr = r.resource_ref.as_ref().unwrap();
        assert_eq!((rr.name.as_str(), rr.namespace.as_str()), ("cm", ""));
        assert_eq!(
            r.field.as_ref().unwrap().proposed_value,
            Some(serde_json::json!(3))
        );
    }

    #[test]
    fn legacy_results_wrapper_is_lifted() {
        let rl = ResourceList::parse(
            b"kind: ResourceList\nitems: []\nresults:\n  items:\n  - message: m\n    severity: warning\n",
        )
        .unwrap();
        assert_eq!(rl.results[0].severity, Some(Severity::Warning));
    }

    #[test]
    fn validation_names_the_problem() {
        assert_eq!(ResourceList::validate(b""), Err(ResourceListError::Empty));
        assert_eq!(
            ResourceList::validate(b"# only\n---\n"),
            Err(ResourceListError::Empty)
        );
        assert_eq!(
            ResourceList::validate(b"kind: Deployment\n"),
            Err(ResourceListError::WrongKind("Deployment".into()))
        );
        assert!(matches!(
            ResourceList::validate(b"this is: [not yaml"),
            Err(ResourceListError::Syntax(_))
        ));
        assert!(matches!(
            ResourceList::validate(b"just a string"),
            Err(ResourceListError::Syntax(_))
        ));
        assert!(ResourceList::validate(b"{\"kind\":\"ResourceList\",\"items\":[]}").is_ok());
        assert!(ResourceList::validate(b"kind: List\nitems: []\n").is_ok());
    }

    #[test]
    fn null_items_read_as_empty() {
        let rl = ResourceList::parse(b"kind: ResourceList\nitems:\n").unwrap();
        assert!(rl.items.is_empty());
    }

    #[test]
    fn a_function_output_must_list_its_items() {
        let check = ResourceList::check_output_items;
        assert_eq!(
            check(b"apiVersion: config.kubernetes.io/v1\nkind: ResourceList\n"),
            Err(ResourceListError::NoItems)
        );
        assert_eq!(
            check(b"kind: ResourceList\nitems: null\n"),
            Err(ResourceListError::NullItems)
        );
        assert_eq!(
            check(b"kind: ResourceList\nitems:\n"),
            Err(ResourceListError::NullItems)
        );
        assert_eq!(check(b"kind: ResourceList\nitems: []\n"), Ok(()));
        assert_eq!(
            check(b"{\"kind\": \"ResourceList\", \"items\": []}"),
            Ok(())
        );
        let message = ResourceListError::NoItems.to_string();
        assert!(
            message.contains("no `items`") && message.contains("items: []"),
            "{message}"
        );
    }
}
