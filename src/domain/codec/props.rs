//! Property tests of the lossless reader, the editor and the item-by-item
//! ResourceList reader: on random documents they must agree with the
//! codec's general parser, and every edit must read back as its target.

use proptest::prelude::*;
use serde_json::{Map, Value, json};

use super::emit::{self, SeqIndent};
use super::preserve::{merge, patch_document};
use super::tree::{YamlDoc, parse_value};
use crate::domain::resource_list::{OutputItem, ResourceList};

/// Strings that stress quoting and typing.
fn tricky_string() -> impl Strategy<Value = String> {
    prop_oneof![
        Just(String::new()),
        Just("true".to_string()),
        Just("0123".to_string()),
        Just("007".to_string()),
        Just("1e3".to_string()),
        Just("0x1F".to_string()),
        Just(".inf".to_string()),
        Just("a: b".to_string()),
        Just("#x".to_string()),
        Just("- x".to_string()),
        Just("multi\nline\n".to_string()),
        Just("no final break\nx".to_string()),
        Just("  lead".to_string()),
        Just("tab\there".to_string()),
        Just("null".to_string()),
        Just("yes".to_string()),
        Just("${replicas}".to_string()),
        Just("q'uote\"".to_string()),
        Just("é😀".to_string()),
        "[a-z]{1,8}",
        "[a-z0-9 .:/-]{0,12}",
    ]
}

fn scalar() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|i| json!(i)),
        (-1.0e6f64..1.0e6).prop_map(|f| json!(f)),
        tricky_string().prop_map(Value::String),
    ]
}

fn key() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("a".to_string()),
        Just("b".to_string()),
        Just("spec".to_string()),
        Just("name".to_string()),
        Just("k: x".to_string()),
        "[a-z]{1,5}",
    ]
}

fn value() -> impl Strategy<Value = Value> {
    scalar().prop_recursive(4, 40, 5, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::vec((key(), inner), 0..5)
                .prop_map(|kv| Value::Object(kv.into_iter().collect::<Map<_, _>>())),
        ]
    })
}

fn object() -> impl Strategy<Value = Value> {
    prop::collection::vec((key(), value()), 1..6)
        .prop_map(|kv| Value::Object(kv.into_iter().collect::<Map<_, _>>()))
}

/// `v` changed at random places (kept, replaced, removed, added).
fn mutate(v: &Value, seed: &mut u64, extra: &Value) -> Value {
    fn next(seed: &mut u64) -> u64 {
        *seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (*seed >> 33) % 6
    }
    match v {
        Value::Object(m) => {
            let mut out = Map::new();
            for (k, x) in m {
                match next(seed) {
                    0 => {}
                    1 => {
                        out.insert(k.clone(), extra.clone());
                    }
                    _ => {
                        out.insert(k.clone(), mutate(x, seed, extra));
                    }
                }
            }
            if next(seed) == 0 {
                out.insert("added".into(), extra.clone());
            }
            Value::Object(out)
        }
        Value::Array(a) => {
            let mut out = Vec::with_capacity(a.len() + 1);
            for x in a {
                out.push(mutate(x, seed, extra));
            }
            match next(seed) {
                0 => out.push(extra.clone()),
                1 if !out.is_empty() => {
                    out.remove(0);
                }
                2 => out.insert(0, extra.clone()),
                _ => {}
            }
            Value::Array(out)
        }
        other => {
            if next(seed) == 0 {
                extra.clone()
            } else {
                other.clone()
            }
        }
    }
}

/// `v` with some of its scalars replaced by `extra`, its shape kept.
fn replace_scalars(v: &Value, seed: &mut u64, extra: &Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(
            m.iter()
                .map(|(k, x)| (k.clone(), replace_scalars(x, seed, extra)))
                .collect(),
        ),
        Value::Array(a) => {
            Value::Array(a.iter().map(|x| replace_scalars(x, seed, extra)).collect())
        }
        other => {
            *seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            if (*seed >> 33).is_multiple_of(3) {
                extra.clone()
            } else {
                other.clone()
            }
        }
    }
}

/// Adds a comment after every third line that ends with a scalar, and a
/// comment line above every fourth line (outside block scalars).
fn with_comments(text: &str, tag: &str) -> String {
    let mut out = String::new();
    let mut block_indent: Option<usize> = None;
    for (i, line) in text.lines().enumerate() {
        let indent = line.len() - line.trim_start().len();
        if let Some(b) = block_indent {
            if line.trim().is_empty() || indent > b {
                out.push_str(line);
                out.push('\n');
                continue;
            }
            block_indent = None;
        }
        let t = line.trim_end();
        let header = t.ends_with('|')
            || t.ends_with("|-")
            || t.ends_with("|+")
            || t.contains(": |2")
            || t.contains("- |2");
        if i % 4 == 1 && !t.trim().is_empty() {
            out.push_str(&format!("{}# h{tag}{i}\n", " ".repeat(indent)));
        }
        out.push_str(line);
        let scalar_end = !(t.ends_with(':') || header);
        if i % 3 == 0 && (scalar_end && !t.trim().is_empty() || t.ends_with(':')) {
            out.push_str(&format!(" # {tag}{i}"));
        }
        if header {
            block_indent = Some(indent);
        }
        out.push('\n');
    }
    out
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn the_tree_reads_what_the_codec_reads(v in object(), wide in any::<bool>()) {
        let seq = if wide { SeqIndent::Wide } else { SeqIndent::Compact };
        let text = emit::document(&v, seq);
        let codec: Value = super::from_yaml_str(&text).unwrap();
        prop_assert_eq!(&codec, &v, "{}", text);
        prop_assert_eq!(parse_value(&text).unwrap(), v, "{}", text);
        let commented = with_comments(&text, "c");
        if let Ok(codec) = super::from_yaml_str::<Value>(&commented) {
            let doc = YamlDoc::parse(commented.as_str()).unwrap();
            prop_assert_eq!(doc.value(), &codec, "{}", commented);
        }
    }

    #[test]
    fn every_patch_reads_back_as_its_target(v in object(), extra in value(), seed in any::<u64>(), wide in any::<bool>()) {
        let seq = if wide { SeqIndent::Wide } else { SeqIndent::Compact };
        let text = with_comments(&emit::document(&v, seq), "c");
        let Ok(from) = super::from_yaml_str::<Value>(&text) else { return Ok(()) };
        let mut s = seed;
        let to = mutate(&from, &mut s, &extra);
        let before = super::preserve::FALLBACKS.with(|f| f.get());
        let out = patch_document(&text, &from, &to).unwrap();
        prop_assert_eq!(parse_value(&out).unwrap(), to.clone(), "{}\n---\n{}", text, out);
        prop_assert!(super::preserve::FALLBACKS.with(|f| f.get()) == before, "fell back:\n{}\n---\n{}", text, out);
        if from == to {
            prop_assert_eq!(out, text);
        }
    }

    /// Where the in-place path edits changed scalars, it writes what the
    /// tree walk writes, byte for byte.
    #[test]
    fn scalar_edits_in_place_equal_the_walk(v in object(), extra in scalar(), seed in any::<u64>(), wide in any::<bool>()) {
        let seq = if wide { SeqIndent::Wide } else { SeqIndent::Compact };
        let text = with_comments(&emit::document(&v, seq), "c");
        let Ok(base) = YamlDoc::parse(text.as_str()) else { return Ok(()) };
        let mut s = seed;
        let to = if seed.is_multiple_of(2) {
            mutate(base.value(), &mut s, &extra)
        } else {
            replace_scalars(base.value(), &mut s, &extra)
        };
        if let Some(edited) = super::preserve::edit_scalars(&base, &to) {
            prop_assert_eq!(parse_value(&edited).unwrap(), to.clone(), "{}\n---\n{}", text, edited);
            if let Some(walked) = super::preserve::merge_by_walk(&base, &to) {
                prop_assert_eq!(edited, walked, "{}", text);
            }
        }
    }

    #[test]
    fn a_merge_reads_back_as_its_target_and_keeps_the_source_s_comments(
        v in object(), extra in value(), seed in any::<u64>(),
    ) {
        let base_text = with_comments(&emit::document(&v, SeqIndent::Compact), "base");
        let Ok(base) = YamlDoc::parse(base_text.as_str()) else { return Ok(()) };
        let mut s = seed;
        let target = mutate(base.value(), &mut s, &extra);
        let source_text = with_comments(&emit::document(&target, SeqIndent::Compact), "fn");
        let Ok(source) = YamlDoc::parse(source_text.as_str()) else { return Ok(()) };
        prop_assume!(source.value() == &target);
        let before = super::preserve::FALLBACKS.with(|f| f.get());
        let out = merge(&base, Some(&source), &target).unwrap();
        prop_assert_eq!(parse_value(&out).unwrap(), target.clone(), "{}\n---\n{}\n---\n{}", base_text, source_text, out);
        prop_assert!(super::preserve::FALLBACKS.with(|f| f.get()) == before, "fell back:\n{}\n---\n{}\n---\n{}", base_text, source_text, out);
        let got = YamlDoc::parse(out.as_str()).unwrap();
        let mut have: Vec<&str> = got.comment_texts().collect();
        // Line comments land wherever the function wrote them; comment
        // lines above a key can only follow the key when the function kept
        // the keys' order (here they may be shuffled), so they are not
        // asserted.
        for c in source.comment_texts().filter(|c| !c.starts_with("# h")) {
            let at = have.iter().position(|h| *h == c);
            prop_assert!(at.is_some(), "comment {:?} lost:\n{}\n---\n{}\n---\n{}", c, base_text, source_text, out);
            have.remove(at.unwrap());
        }
    }

    #[test]
    fn output_read_item_by_item_equals_the_whole_parse(
        items in prop::collection::vec(object(), 0..6),
        same in prop::collection::vec(any::<bool>(), 6),
        wide in any::<bool>(),
    ) {
        let texts: Vec<String> = items.iter().map(|v| with_comments(&emit::document(v, SeqIndent::Compact), "i")).collect();
        let values: Vec<Value> = texts.iter().map(|t| parse_value(t).unwrap()).collect();
        let (dash, indent) = if wide { ("  - ", "    ") } else { ("- ", "  ") };
        let mut out = String::from("apiVersion: config.kubernetes.io/v1\nkind: ResourceList\nitems:\n");
        if items.is_empty() {
            out = String::from("apiVersion: config.kubernetes.io/v1\nkind: ResourceList\nitems: []\n");
        }
        for t in &texts {
            out.push_str(&super::preserve::nest(t, dash, indent));
        }
        out.push_str("results:\n- message: done\n");
        let sent: Vec<std::sync::Arc<str>> = texts
            .iter()
            .zip(&same)
            .map(|(t, s)| if *s { t.as_str().into() } else { "other: 1\n".into() })
            .collect();
        let (list, item_texts) = ResourceList::parse_output(out.as_bytes(), &sent, &values).unwrap();
        let whole = ResourceList::parse(out.as_bytes()).unwrap();
        prop_assert_eq!(&list, &whole, "{}", out);
        if let Some(item_texts) = item_texts {
            prop_assert_eq!(item_texts.len(), list.items.len());
            for (i, t) in item_texts.iter().enumerate() {
                match t {
                    OutputItem::Same(j) => prop_assert_eq!(&values[*j], &list.items[i]),
                    OutputItem::Text(doc) => prop_assert_eq!(doc.value(), &list.items[i]),
                }
            }
        }
    }
}

/// Hand-written documents in layouts the emitter never writes.
const LAYOUTS: &[&str] = &[
    "# head\n\napiVersion: v1 # api\nkind: X\nmetadata:\n    name: four-space   # n\n    labels: {a: b, c: d}\nspec:\n    list:\n        -   name: a\n            v: 1\n        -   name: b\n",
    "a:\n  - - x\n    - y\n  - - z\nb: [1, [2, 3], {k: v}]\nc: {}\nd: []\n",
    "text: |+\n  kept\n\nfolded: >-\n  one\n  two\nplain: a multi\n  line plain\nquoted: \"a\n  b\"\nsingle: 'it''s'\n",
    "empty:\nafter: 1\nseq:\n-\n- x\n- # c\n  y: 1\n",
    "- just\n- a: list\n  b: 2\n",
    "key: value\n# trailing comment at the end\n",
    "m:\n  # head of x\n  x: 1 # line of x\n\n  # head of y\n  y:\n    - 1 # one\n    # between\n    - 2\n  z: |\n    block # not a comment\n",
    "\"quoted key\": 1\n'single': 2\n? complex\n: 3\n",
    "a: &anchor 1\nb: *anchor\n",
    "deep:\n  deeper:\n    deepest: [a, b]\n  other: !!str 3\n",
    "base: &b\n  k: v\n  n: 1\nmerged:\n  <<: *b\n  j: w\ncopy: *b\nlist: &l [x, y]\nagain: *l\nbin: !!binary aGVsbG8=\noct: 0o17\n",
];

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    #[test]
    fn edits_of_any_layout_read_back(i in 0..LAYOUTS.len(), extra in value(), seed in any::<u64>()) {
        let text = LAYOUTS[i];
        let from: Value = super::from_yaml_str(text).unwrap();
        prop_assert_eq!(&parse_value(text).unwrap(), &from);
        let mut s = seed;
        let to = mutate(&from, &mut s, &extra);
        let before = super::preserve::FALLBACKS.with(|f| f.get());
        let out = patch_document(text, &from, &to).unwrap();
        prop_assert_eq!(parse_value(&out).unwrap(), to.clone(), "{}\n---\n{}", text, out);
        let fell_back = super::preserve::FALLBACKS.with(|f| f.get()) > before;
        // Only anchors/aliases and complex keys are left to the fallback.
        prop_assert!(
            !fell_back || text.contains('&') || text.contains('?') || text.contains("!!"),
            "fell back:\n{}\n---\n{}", text, out
        );
        // And as a function's text: merged into the layout.
        let source_text = with_comments(&emit::document(&to, SeqIndent::Wide), "fn");
        if let (Ok(base), Ok(source)) = (YamlDoc::parse(text), YamlDoc::parse(source_text.as_str())) {
            let out = merge(&base, Some(&source), &to).unwrap();
            prop_assert_eq!(parse_value(&out).unwrap(), to, "{}\n---\n{}\n---\n{}", text, source_text, out);
        }
    }
}

/// Every value node below (and being) `node`, in document order: mapping
/// values and sequence items, not keys.
fn value_nodes<'n>(node: &'n super::tree::Node, out: &mut Vec<&'n super::tree::Node>) {
    use super::tree::Kind;
    out.push(node);
    match &node.kind {
        Kind::Map { entries, .. } => entries.iter().for_each(|e| value_nodes(&e.value, out)),
        Kind::Seq { items, .. } => items.iter().for_each(|it| value_nodes(&it.node, out)),
        _ => {}
    }
}

/// The text of `v` as the codec writes it (with comments when
/// `commented`), and its tree; `None` when it does not read back.
fn sample(v: &Value, wide: bool, commented: bool) -> Option<(String, YamlDoc)> {
    let seq = if wide {
        SeqIndent::Wide
    } else {
        SeqIndent::Compact
    };
    let mut text = emit::document(v, seq);
    if commented {
        text = with_comments(&text, "c");
    }
    let doc = YamlDoc::parse(text.as_str()).ok()?;
    Some((text, doc))
}

/// An in-place change of `doc` (`edited`, `took` when it was made) is
/// what reading `changed` gives; a declined one changed nothing.
fn in_place_reads_as(
    text: &str,
    doc: &YamlDoc,
    edited: &YamlDoc,
    took: bool,
    changed: &str,
) -> Result<(), TestCaseError> {
    if took {
        let read = YamlDoc::parse(changed);
        prop_assert!(read.is_ok(), "{}\n---\n{}", text, changed);
        prop_assert_eq!(edited, &read.unwrap(), "{}\n---\n{}", text, changed);
    } else {
        prop_assert_eq!(edited, doc);
    }
    Ok(())
}

/// One-line tokens a replacement writes, some with a comment.
const TOKENS: &[&str] = &[
    "x",
    "nginx:1.27",
    "42",
    "true",
    "~",
    "\"quoted # not a comment\"",
    "'single'",
    "''",
    "-1.5",
    "a b c",
    "x # a new comment",
    "\"é\"",
    "- not a scalar",
    "k: v",
    "[flow]",
    "&anchor x",
    "!tag x",
    "*alias",
    "---",
    "",
];

/// Entries a creation inserts, at a column.
fn inserted(column: usize, which: usize) -> String {
    let pad = " ".repeat(column);
    match which {
        0 => format!("\n{pad}team: payments"),
        1 => format!("\n{pad}new:\n{pad}  deeper: \"x y\""),
        2 => format!("\n{pad}a: 1"),
        3 => format!("\n{pad}n: 3 # a comment"),
        4 => format!("\n{pad}list:\n{pad}- one\n{pad}- two"),
        5 => format!("\n{pad} off: by one"),
        6 => format!("\n{pad}x: &a y"),
        _ => format!("\n{pad}b: [flow]"),
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    /// A scalar replaced in place is what reading the changed text gives:
    /// the same nodes, ranges, comments and value — or the replacement
    /// declines and nothing changes.
    #[test]
    fn a_scalar_replaced_in_place_reads_as_the_changed_text(
        v in object(),
        wide in any::<bool>(),
        commented in any::<bool>(),
        pick in any::<prop::sample::Index>(),
        token in 0..TOKENS.len(),
        keep_comment in any::<bool>(),
    ) {
        use super::tree::Kind;
        let Some((text, doc)) = sample(&v, wide, commented) else { return Ok(()) };
        let mut nodes = Vec::new();
        if let Some(root) = doc.root() {
            value_nodes(root, &mut nodes);
        }
        nodes.retain(|n| matches!(n.kind, Kind::Scalar { empty: false, .. }));
        if nodes.is_empty() {
            return Ok(());
        }
        let node = nodes[pick.index(nodes.len())];
        let line_end = super::tree::line_end(&text, node.end);
        let after = text[node.end..line_end].trim();
        let (region, new) = if after.starts_with('#') && keep_comment {
            (node.start..line_end, format!("{} {after}", TOKENS[token]))
        } else {
            (node.start..node.end, TOKENS[token].to_string())
        };
        let changed = format!("{}{}{}", &text[..region.start], new, &text[region.end..]);
        let mut edited = doc.clone();
        let took = edited.replace_scalar(node.start, region, &new);
        in_place_reads_as(&text, &doc, &edited, took, &changed)?;
    }

    /// Entries added in place to a block mapping are what reading the
    /// changed text gives, or the insertion declines and nothing changes.
    #[test]
    fn entries_added_in_place_read_as_the_changed_text(
        v in object(),
        wide in any::<bool>(),
        commented in any::<bool>(),
        pick in any::<prop::sample::Index>(),
        which in 0..8usize,
    ) {
        use super::tree::Kind;
        let Some((text, doc)) = sample(&v, wide, commented) else { return Ok(()) };
        let mut nodes = Vec::new();
        if let Some(root) = doc.root() {
            value_nodes(root, &mut nodes);
        }
        nodes.retain(|n| matches!(&n.kind, Kind::Map { flow: false, entries } if !entries.is_empty()));
        if nodes.is_empty() {
            return Ok(());
        }
        let map = nodes[pick.index(nodes.len())];
        let Kind::Map { entries, .. } = &map.kind else { unreachable!() };
        let key = entries[0].key.start;
        let column = super::tree::column(&text, key);
        let at = super::tree::line_end(&text, map.end);
        let new = inserted(column, which);
        let changed = format!("{}{}{}", &text[..at], new, &text[at..]);
        let mut edited = doc.clone();
        let took = edited.insert_entries(map.start, at, &new);
        in_place_reads_as(&text, &doc, &edited, took, &changed)?;
    }
}

/// The in-place changes take the common cases instead of declining them:
/// a plain or quoted token with or without a comment after it, and a
/// label or a nested field added (what apply-replacements writes).
#[test]
fn common_changes_are_taken_in_place() {
    let text = "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: app # app 1\n  labels:\n    app: app-1\nspec:\n  containers:\n  - name: app\n    image: \"nginx:1.14\" # replaced\n  - name: side\n    image: busybox\n";
    let doc = YamlDoc::parse(text).unwrap();
    let scalars = [
        ("\"nginx:1.14\" # replaced", "\"nginx:1.27\" # replaced"),
        ("\"nginx:1.14\"", "nginx:1.27"),
        ("busybox", "'busybox:1'"),
        ("app # app 1", "3 # app 1"),
    ];
    for (old, new) in scalars {
        let start = text.find(old).unwrap();
        let mut d = doc.clone();
        assert!(
            d.replace_scalar(start, start..start + old.len(), new),
            "{old} -> {new}"
        );
        let changed = text.replacen(old, new, 1);
        assert_eq!(
            d,
            YamlDoc::parse(changed.as_str()).unwrap(),
            "{old} -> {new}"
        );
    }
    let labels = text.find("app: app-1").unwrap();
    let at = labels + "app: app-1".len();
    for new in ["\n    team: payments", "\n    a:\n      b: c"] {
        let mut d = doc.clone();
        assert!(d.insert_entries(labels, at, new), "{new:?}");
        let changed = format!("{}{}{}", &text[..at], new, &text[at..]);
        assert_eq!(d, YamlDoc::parse(changed.as_str()).unwrap(), "{new:?}");
    }
    // `name` is not the mapping's last entry (labels is): declined.
    let metadata = text.find("name: app").unwrap();
    let at = text.find(" # app 1").unwrap() + " # app 1".len();
    assert!(!doc.clone().insert_entries(metadata, at, "\n  x: y"));
}
