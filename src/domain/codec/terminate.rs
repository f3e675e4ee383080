//! Ending a YAML document's text with a line break without changing what it
//! reads as.
//!
//! Every document the runner writes or hands to a function ends with a line
//! break. Appending one is harmless except after a block scalar that ends
//! the text without one: `script: |` followed by `echo there` at the end of
//! the file reads as `"echo there"` (clip chomping keeps a final line break
//! only if there is one), and with a line break appended it would read as
//! `"echo there\n"`. kpt (kyaml) writes such a value with strip chomping
//! (`|-`), and so does [`with_final_newline`].

use super::tree::{Kind, Node, Style, YamlDoc};

/// `text` ending with a line break and reading as it did. When `text` has
/// no final line break and its last node is a block scalar (`|`, `>`,
/// `|+`, `>+`, with or without an indentation indicator) that is not
/// already stripped, that scalar's header gets strip chomping (`|-`, `>-`)
/// first, as kpt writes it: its value has no final line break (YAML 1.2's
/// chomping at the end of the text) and keeps none. Text that does not
/// parse only gets the line break.
pub fn with_final_newline(mut text: String) -> String {
    if text.is_empty() || text.ends_with('\n') {
        return text;
    }
    let header = YamlDoc::parse(text.as_str()).ok().and_then(|doc| {
        doc.root()
            .and_then(|root| last_block_scalar(root, text.len()))
    });
    if let Some(at) = header {
        let rest = &text[at + 1..];
        let len = rest
            .find(|c: char| !matches!(c, '+' | '-' | '0'..='9'))
            .unwrap_or(rest.len());
        let indicators = &rest[..len];
        if !indicators.contains('-') {
            let digits: String = indicators.chars().filter(char::is_ascii_digit).collect();
            text.replace_range(at + 1..at + 1 + len, &format!("-{digits}"));
        }
    }
    text.push('\n');
    text
}

/// The start (its `|` or `>`) of the block scalar that ends at byte `end`
/// of the text, if the node ending there is one.
fn last_block_scalar(node: &Node, end: usize) -> Option<usize> {
    match &node.kind {
        Kind::Scalar {
            style: Style::Literal | Style::Folded,
            ..
        } if node.end == end => Some(node.start),
        Kind::Map {
            flow: false,
            entries,
        } => last_block_scalar(&entries.last()?.value, end),
        Kind::Seq { flow: false, items } => last_block_scalar(&items.last()?.node, end),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_block_scalar_ending_the_text_keeps_its_value() {
        for (text, want) in [
            (
                "data:\n  script: |\n    echo hi\n    echo there",
                "data:\n  script: |-\n    echo hi\n    echo there\n",
            ),
            ("a: >\n  folded\n  text", "a: >-\n  folded\n  text\n"),
            ("a: |+\n  kept", "a: |-\n  kept\n"),
            ("a: |2\n   two", "a: |-2\n   two\n"),
            ("a: | # note\n  x", "a: |- # note\n  x\n"),
            ("- |\n  item", "- |-\n  item\n"),
        ] {
            let out = with_final_newline(text.to_string());
            assert_eq!(out, want, "{text:?}");
        }
    }

    #[test]
    fn other_texts_only_get_the_line_break() {
        for text in [
            "a: b",
            "a: |-\n  x",
            "a: |\n  x\n",
            "a: 'x'",
            "not: [yaml",
            "",
        ] {
            let out = with_final_newline(text.to_string());
            if text.is_empty() || text.ends_with('\n') {
                assert_eq!(out, text);
            } else {
                assert_eq!(out, format!("{text}\n"), "{text:?}");
            }
        }
    }
}
