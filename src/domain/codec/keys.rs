//! Keys a configuration file has that its format does not: found with
//! their line and column, for errors and warnings that point at the typo.
//!
//! serde ignores unknown keys unless told to deny them, and when told it
//! stops at the first with the library's wording. Configuration readers
//! here instead describe their format as a [`Shape`] and ask for every key
//! outside it, then decide what an unknown key means for that file (an
//! error, or a warning where the upstream format tolerates unknown keys).

use std::fmt;

use serde::Deserialize;
use serde::de::{self, MapAccess, SeqAccess, Visitor};
use serde_saphyr::Spanned;

use super::CodecError;

/// The keys a format allows, as a tree.
#[derive(Debug, Clone, Copy)]
pub enum Shape {
    /// Anything (a value whose keys are not checked here).
    Any,
    /// A mapping with these keys and the shape of each value.
    Map(&'static [(&'static str, Shape)]),
    /// A sequence whose items have this shape.
    Seq(&'static Shape),
    /// Either a sequence of items of the first shape or a mapping of the
    /// second (a file that accepts two forms).
    SeqOrMap(&'static Shape, &'static Shape),
}

/// A key the format does not have.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownKey {
    /// The key as written.
    pub key: String,
    /// Where its mapping sits, e.g. `functions[0]`; empty at the top level.
    pub within: String,
    /// 1-based line of the key.
    pub line: u64,
    /// 1-based column of the key.
    pub column: u64,
    /// The keys allowed there, in the format's order.
    pub valid: Vec<&'static str>,
}

impl UnknownKey {
    /// The allowed key closest to the one written, when it is close enough
    /// to be a typo (a different letter case, or at most two edits away).
    pub fn suggestion(&self) -> Option<&'static str> {
        let key = self.key.to_ascii_lowercase();
        self.valid
            .iter()
            .map(|v| (strsim::levenshtein(&key, &v.to_ascii_lowercase()), *v))
            .filter(|(d, _)| *d <= 2.max(key.len() / 4))
            .min_by_key(|(d, _)| *d)
            .map(|(_, v)| v)
    }
}

impl fmt::Display for UnknownKey {
    /// `line 3 column 1: unknown key "funtions" (did you mean "functions"?); valid keys: functions`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "line {} column {}: unknown key {:?}",
            self.line, self.column, self.key
        )?;
        if !self.within.is_empty() {
            write!(f, " in {}", self.within)?;
        }
        if let Some(s) = self.suggestion() {
            write!(f, " (did you mean {s:?}?)")?;
        }
        write!(f, "; valid keys: {}", self.valid.join(", "))
    }
}

/// Warnings for the unknown keys of a file whose upstream reader ignores
/// them (Porch's): one line each, naming `path`, the place, the valid keys,
/// and that the key is ignored.
///
/// Errors: as [`unknown_keys`].
pub fn ignored_key_warnings(
    bytes: &[u8],
    shape: &Shape,
    path: &str,
) -> Result<Vec<String>, CodecError> {
    Ok(unknown_keys(bytes, shape)?
        .iter()
        .map(|k| format!("{path}: {k}; the key is ignored (Porch ignores unknown keys too)"))
        .collect())
}

/// Every key of the YAML document in `bytes` that `shape` does not allow,
/// in document order. Values of the wrong kind (a scalar where a mapping is
/// expected) are not reported here; the file's own reader reports those.
///
/// Errors: the bytes are not one YAML document (see [`super::from_yaml_slice`]).
pub fn unknown_keys(bytes: &[u8], shape: &Shape) -> Result<Vec<UnknownKey>, CodecError> {
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Ok(Vec::new());
    }
    let node: Node = super::from_yaml_slice(bytes)?;
    let mut out = Vec::new();
    check(&node, shape, "", &mut out);
    Ok(out)
}

fn check(node: &Node, shape: &Shape, within: &str, out: &mut Vec<UnknownKey>) {
    match (node, shape) {
        (_, Shape::Any) | (Node::Scalar, _) => {}
        (Node::Map(entries), Shape::Map(keys)) => {
            for (key, value) in entries {
                match keys.iter().find(|(k, _)| *k == key.value.0) {
                    Some((k, inner)) => {
                        let path = if within.is_empty() {
                            (*k).to_string()
                        } else {
                            format!("{within}.{k}")
                        };
                        check(value, inner, &path, out);
                    }
                    None => out.push(UnknownKey {
                        key: key.value.0.clone(),
                        within: within.to_string(),
                        line: key.referenced.line(),
                        column: key.referenced.column(),
                        valid: keys.iter().map(|(k, _)| *k).collect(),
                    }),
                }
            }
        }
        (Node::Seq(items), Shape::Seq(inner) | Shape::SeqOrMap(inner, _)) => {
            for (i, item) in items.iter().enumerate() {
                check(item, inner, &format!("{within}[{i}]"), out);
            }
        }
        (Node::Map(_), Shape::SeqOrMap(_, map)) => check(node, map, within, out),
        // A mapping where a sequence belongs, or the reverse: the reader's
        // type error says so.
        (Node::Map(_), Shape::Seq(_)) | (Node::Seq(_), Shape::Map(_)) => {}
    }
}

/// A YAML node reduced to what key checking needs: mapping keys with their
/// positions, sequence items, and nothing of scalars.
enum Node {
    Scalar,
    Seq(Vec<Node>),
    Map(Vec<(Spanned<KeyText>, Node)>),
}

impl<'de> Deserialize<'de> for Node {
    fn deserialize<D: de::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(NodeVisitor)
    }
}

struct NodeVisitor;

impl<'de> Visitor<'de> for NodeVisitor {
    type Value = Node;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any YAML value")
    }

    fn visit_bool<E>(self, _: bool) -> Result<Node, E> {
        Ok(Node::Scalar)
    }
    fn visit_i64<E>(self, _: i64) -> Result<Node, E> {
        Ok(Node::Scalar)
    }
    fn visit_u64<E>(self, _: u64) -> Result<Node, E> {
        Ok(Node::Scalar)
    }
    fn visit_i128<E>(self, _: i128) -> Result<Node, E> {
        Ok(Node::Scalar)
    }
    fn visit_u128<E>(self, _: u128) -> Result<Node, E> {
        Ok(Node::Scalar)
    }
    fn visit_f64<E>(self, _: f64) -> Result<Node, E> {
        Ok(Node::Scalar)
    }
    fn visit_str<E>(self, _: &str) -> Result<Node, E> {
        Ok(Node::Scalar)
    }
    fn visit_bytes<E>(self, _: &[u8]) -> Result<Node, E> {
        Ok(Node::Scalar)
    }
    fn visit_none<E>(self) -> Result<Node, E> {
        Ok(Node::Scalar)
    }
    fn visit_unit<E>(self) -> Result<Node, E> {
        Ok(Node::Scalar)
    }
    fn visit_some<D: de::Deserializer<'de>>(self, d: D) -> Result<Node, D::Error> {
        Node::deserialize(d)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Node, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element::<Node>()? {
            items.push(item);
        }
        Ok(Node::Seq(items))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Node, A::Error> {
        let mut entries = Vec::new();
        while let Some(key) = map.next_key::<Spanned<KeyText>>()? {
            let value = map.next_value::<Node>()?;
            entries.push((key, value));
        }
        Ok(Node::Map(entries))
    }
}

/// A mapping key as text, whatever scalar it is (`name`, `1`, `true`).
struct KeyText(String);

impl<'de> Deserialize<'de> for KeyText {
    fn deserialize<D: de::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = KeyText;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a scalar mapping key")
            }
            fn visit_str<E>(self, v: &str) -> Result<KeyText, E> {
                Ok(KeyText(v.to_string()))
            }
            fn visit_bool<E>(self, v: bool) -> Result<KeyText, E> {
                Ok(KeyText(v.to_string()))
            }
            fn visit_i64<E>(self, v: i64) -> Result<KeyText, E> {
                Ok(KeyText(v.to_string()))
            }
            fn visit_u64<E>(self, v: u64) -> Result<KeyText, E> {
                Ok(KeyText(v.to_string()))
            }
            fn visit_f64<E>(self, v: f64) -> Result<KeyText, E> {
                Ok(KeyText(v.to_string()))
            }
            fn visit_unit<E>(self) -> Result<KeyText, E> {
                Ok(KeyText("null".into()))
            }
        }
        d.deserialize_any(V)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ENTRY: Shape = Shape::Map(&[("function", Shape::Any), ("images", Shape::Any)]);
    const CONFIG: Shape = Shape::Map(&[("functions", Shape::Seq(&ENTRY))]);

    #[test]
    fn typos_are_found_with_their_place_and_a_suggestion() {
        let text = "# header\nfuntions:\n- function: a\n  image:\n  - x\n";
        let keys = unknown_keys(text.as_bytes(), &CONFIG).unwrap();
        assert_eq!(keys.len(), 1);
        assert_eq!(
            keys[0].to_string(),
            "line 2 column 1: unknown key \"funtions\" (did you mean \"functions\"?); valid keys: functions"
        );
        let text = "functions:\n- function: a\n  image:\n  - x\n- function: b\n  colour: red\n";
        let keys = unknown_keys(text.as_bytes(), &CONFIG).unwrap();
        assert_eq!(keys.len(), 2);
        assert_eq!(
            keys[0].to_string(),
            "line 3 column 3: unknown key \"image\" in functions[0] (did you mean \"images\"?); valid keys: function, images"
        );
        assert_eq!((keys[1].line, keys[1].suggestion()), (6, None));
    }

    #[test]
    fn known_keys_any_values_and_empty_files_pass() {
        let text = "functions:\n- function: a\n  images: {odd: [shape]}\n";
        assert!(unknown_keys(text.as_bytes(), &CONFIG).unwrap().is_empty());
        assert!(unknown_keys(b"", &CONFIG).unwrap().is_empty());
        assert!(unknown_keys(b"functions: 3\n", &CONFIG).unwrap().is_empty());
        assert!(
            unknown_keys(b"{1: a, true: b}", &Shape::Any)
                .unwrap()
                .is_empty()
        );
        assert!(unknown_keys(b"a: [1", &CONFIG).is_err());
    }

    #[test]
    fn either_form_of_a_two_form_file_is_checked() {
        const BOTH: Shape = Shape::SeqOrMap(&ENTRY, &CONFIG);
        let list = unknown_keys(b"- function: a\n  imgs: []\n", &BOTH).unwrap();
        assert_eq!(
            (list[0].key.as_str(), list[0].within.as_str()),
            ("imgs", "[0]")
        );
        let map = unknown_keys(b"functions: []\nextra: 1\n", &BOTH).unwrap();
        assert_eq!(map[0].key, "extra");
    }
}
