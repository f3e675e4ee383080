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
//! `sigs.k8s.io/yaml` and kyaml read them) and raises the library's default
//! node budget so that ResourceLists up to the runner's message-size limit
//! (6 MiB by default) parse, while alias bombs are still refused.
//!
//! Package files are edited, not re-emitted: [`preserve`] applies the
//! difference between two parsed values to the original text with a lossless
//! YAML syntax tree (`yaml-edit`), so comments, key order, quoting and
//! sequence indentation of everything a function did not change survive a
//! render, as they do with kpt's kyaml.

pub mod keys;
pub mod preserve;

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

fn options() -> serde_saphyr::Options {
    let mut budget = serde_saphyr::Budget::default();
    // A 6 MiB ResourceList of small objects has a few million nodes/events.
    budget.max_events = 50_000_000;
    budget.max_nodes = 20_000_000;
    budget.max_depth = 256;
    serde_saphyr::options! {
        budget: Some(budget),
        strict_booleans: true,
    }
}

/// Parses one YAML (or JSON) document from `bytes` into `T`.
///
/// Errors: the bytes are not UTF-8, not YAML, hold more than one document,
/// exceed the parse budget, or do not have the shape of `T`.
pub fn from_yaml_slice<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, CodecError> {
    serde_saphyr::from_slice_with_options(bytes, options()).map_err(CodecError::new)
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
    let docs: Vec<Option<T>> = serde_saphyr::from_slice_multiple_with_options(bytes, options())
        .map_err(CodecError::new)?;
    Ok(docs.into_iter().flatten().collect())
}

/// Serializes `value` as a YAML document (block style, ambiguous strings quoted).
///
/// Errors: the value cannot be represented in YAML (e.g. a non-string map key).
pub fn to_yaml_string<T: Serialize>(value: &T) -> Result<String, CodecError> {
    serde_saphyr::to_string(value).map_err(CodecError::new)
}

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
    fn garbage_is_an_error_not_a_panic() {
        assert!(from_yaml_slice::<Value>(b"a: [1, 2\n").is_err());
        assert!(from_yaml_slice::<Value>(&[0xff, 0xfe, 0x00]).is_err());
    }
}
