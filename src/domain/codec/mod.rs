//! The YAML codec: the one module that names the YAML library.
//!
//! ResourceLists travel through the runner as opaque bytes; they are parsed
//! only where a decision needs their content (validating input, collecting a
//! failed function's structured results, reading configuration files). Every
//! such parse goes through this module, so the YAML library can be swapped in
//! one place. The library is `serde-saphyr` (pure Rust, panic-free by design,
//! the same one kube-rs uses); `serde_yaml` is archived upstream.
//!
//! Parsing follows YAML 1.2 booleans (`yes`/`on` stay strings, as Go's
//! `sigs.k8s.io/yaml` and kyaml read them) and is bounded whatever the
//! input: the node and event budget lets ResourceLists up to the runner's
//! message-size limit (6 MiB by default) parse; nesting is limited to
//! [`MAX_DEPTH`] levels; and aliases may expand to at most as many events
//! as the input has bytes (at least [`MIN_ALIAS_EXPANSION`]), so the work
//! and memory a parse costs grow linearly with the input — a few hundred
//! bytes of nested aliases (an "alias bomb", 9 levels of 9 references are
//! 387 million nodes) are refused after a few thousand events. Error
//! messages name the line and column and what to change, in the runner's
//! words rather than the library's.
//!
//! Non-finite floats (`.inf`, `-.inf`, `.nan`) read as those strings:
//! JSON values cannot hold them, and the text a function wrote is what is
//! written back anyway.
//!
//! Package files are edited, not re-emitted: [`tree`] reads a document with
//! the byte range of every node and comment, [`preserve`] turns it into the
//! text of a changed value by splicing only what differs (taking changed
//! parts from the text a function wrote), and [`emit`] writes what has no
//! text in kpt's style — so comments, key order, quoting and sequence
//! indentation survive a render, as they do with kpt's kyaml.

pub mod emit;
pub mod keys;
pub mod preserve;
pub mod seq_style;
pub mod terminate;
pub mod top_level;
pub mod tree;
pub mod value;

use serde::Serialize;
use serde::de::DeserializeOwned;

/// A YAML parse or emit failure; the message names the line and column when
/// the library knows them.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct CodecError {
    message: String,
}

impl CodecError {
    pub(crate) fn new(message: impl std::fmt::Display) -> Self {
        Self {
            message: message.to_string(),
        }
    }
}

/// Deepest nesting of sequences and mappings accepted.
pub const MAX_DEPTH: usize = 256;

/// Alias expansion (events copied or replayed for `*alias` references)
/// allowed for any input, however short.
pub const MIN_ALIAS_EXPANSION: usize = 16 * 1024;

fn options(input_bytes: usize) -> serde_saphyr::Options {
    let mut budget = serde_saphyr::Budget::default();
    // A 6 MiB ResourceList of small objects has a few million nodes/events.
    budget.max_events = 50_000_000;
    budget.max_nodes = 20_000_000;
    budget.max_depth = MAX_DEPTH;
    let expansion = input_bytes.max(MIN_ALIAS_EXPANSION);
    budget.max_recorded_anchor_events = expansion;
    budget.max_recorded_anchor_bytes = expansion.saturating_mul(16);
    let mut alias_limits = serde_saphyr::options::AliasLimits::default();
    alias_limits.max_total_replayed_events = expansion;
    serde_saphyr::options! {
        budget: Some(budget),
        alias_limits: alias_limits,
        strict_booleans: true,
        with_snippet: false,
        non_finite_float_policy: serde_saphyr::options::NonFiniteFloatPolicy::AsString,
    }
}

/// The library's error in the runner's words: its first line (line and
/// column first), budget breaches named for what the user can change, and
/// no advice about the library's own options.
fn user_message(error: &serde_saphyr::Error) -> String {
    let text = error.to_string();
    let first = text.lines().next().unwrap_or_default();
    let first = first.strip_prefix("error: ").unwrap_or(first);
    // The place is the last one named (`… at line 1, column 35 (defined at
    // line 4, column 9) (used at line 5, column 10)`: where the alias is
    // used), the message what comes before the first.
    let (place, what) = match (first.find(" at line "), first.rfind(" at line ")) {
        (Some(f), Some(l)) => (
            format!(
                "{}: ",
                first[l + 4..].trim_end_matches(')').replace(',', "")
            ),
            &first[..f],
        ),
        _ => (String::new(), first),
    };
    let what = if let Some(breach) = what.strip_prefix("budget breached: ") {
        let name = breach.split([' ', '{', '(']).next().unwrap_or(breach);
        match name {
            "RecordedAnchorEvents" | "RecordedAnchorBytes" | "Aliases" | "AliasAnchorRatio" => {
                alias_message()
            }
            "Depth" => depth_message(),
            "Events" | "Nodes" | "ScalarBytes" | "Documents" | "Anchors" | "MergeKeys" => {
                format!("the YAML is too large to parse ({name} over the runner's limit)")
            }
            _ => format!("the YAML exceeds the runner's parse limits ({name})"),
        }
    } else if what.starts_with("alias replay") {
        alias_message()
    } else if what.starts_with("recursion limit exceeded") {
        depth_message()
    } else if let Some(key) = what.strip_suffix(", set DuplicateKeyPolicy in Options if acceptable")
    {
        format!("{key}; a key may appear only once in a mapping")
    } else {
        what.to_string()
    };
    format!("{place}{what}")
}

fn alias_message() -> String {
    "YAML aliases expand to more data than the document holds (an alias bomb?); \
     write the values out instead of referring to anchors"
        .into()
}

fn depth_message() -> String {
    format!("the YAML is nested more than {MAX_DEPTH} levels deep")
}

/// Parses one YAML (or JSON) document from `bytes` into `T`.
///
/// Errors: the bytes are not UTF-8, not YAML, hold more than one document,
/// exceed the parse budget, or do not have the shape of `T`.
pub fn from_yaml_slice<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, CodecError> {
    serde_saphyr::from_slice_with_options(bytes, options(bytes.len()))
        .map_err(|e| CodecError::new(user_message(&e)))
}

/// Parses one YAML (or JSON) document from `text` into `T`; see [`from_yaml_slice`].
pub fn from_yaml_str<T: DeserializeOwned>(text: &str) -> Result<T, CodecError> {
    from_yaml_slice(text.as_bytes())
}

/// Parses every document of a multi-document YAML stream (`---`-separated)
/// into `T`; empty documents are skipped.
///
/// Errors: as [`from_yaml_slice`], for the first document that fails.
pub fn from_yaml_documents<T: DeserializeOwned>(bytes: &[u8]) -> Result<Vec<T>, CodecError> {
    let docs: Vec<Option<T>> =
        serde_saphyr::from_slice_multiple_with_options(bytes, options(bytes.len()))
            .map_err(|e| CodecError::new(user_message(&e)))?;
    Ok(docs.into_iter().flatten().collect())
}

/// Serializes `value` as a YAML document (block style, ambiguous strings quoted).
///
/// Errors: the value cannot be represented in YAML (e.g. a non-string map key).
pub fn to_yaml_string<T: Serialize>(value: &T) -> Result<String, CodecError> {
    serde_saphyr::to_string(value).map_err(CodecError::new)
}

#[cfg(test)]
mod props;

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    #[test]
    fn yaml_1_2_booleans_stay_strings() {
        let v: Value = from_yaml_str("a: yes\nb: on\nc: true\n").unwrap();
        assert_eq!(v["a"], Value::String("yes".into()));
        assert_eq!(v["b"], Value::String("on".into()));
        assert_eq!(v["c"], Value::Bool(true));
    }

    #[test]
    fn key_order_survives_a_round_trip() {
        let v: Value = from_yaml_str("z: 1\na: 2\nm: 3\n").unwrap();
        let out = to_yaml_string(&v).unwrap();
        assert_eq!(out, "z: 1\na: 2\nm: 3\n");
    }

    #[test]
    fn multi_document_streams() {
        let docs: Vec<Value> = from_yaml_documents(b"a: 1\n---\n---\nb: 2\n").unwrap();
        assert_eq!(docs.len(), 2);
        assert_eq!(docs[1]["b"], 2);
    }

    #[test]
    fn alias_bombs_are_refused_quickly_in_plain_words() {
        let mut bomb = String::from("a0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n");
        for i in 1..9 {
            let refs = vec![format!("*a{}", i - 1); 9].join(", ");
            bomb.push_str(&format!("a{i}: &a{i} [{refs}]\n"));
        }
        bomb.push_str("kind: *a8\n");
        let e = from_yaml_slice::<Value>(bomb.as_bytes()).unwrap_err();
        assert!(e.to_string().starts_with("line "), "{e}");
        assert!(e.to_string().contains("alias bomb"), "{e}");
        assert!(!e.to_string().contains("):"), "{e}");
        // Legitimate aliases still work.
        let v: Value = from_yaml_str("a: &x {b: 1}\nc: *x\n").unwrap();
        assert_eq!(v["c"]["b"], 1);
    }

    #[test]
    fn errors_speak_of_the_document_not_the_library() {
        let e = from_yaml_slice::<Value>(b"a: 1\na: 2\n")
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            "line 2 column 1: duplicate mapping key: a; a key may appear only once in a mapping"
        );
        let deep = "[".repeat(300) + &"]".repeat(300);
        let e = from_yaml_slice::<Value>(deep.as_bytes())
            .unwrap_err()
            .to_string();
        assert!(e.contains("nested more than 256 levels"), "{e}");
        assert!(!e.contains('\n'));
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        assert!(from_yaml_slice::<Value>(b"a: [1, 2\n").is_err());
        assert!(from_yaml_slice::<Value>(&[0xff, 0xfe, 0x00]).is_err());
    }
}
