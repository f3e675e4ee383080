//! A quick read of a YAML document's top level, without parsing it.
//!
//! The runner checks every ResourceList it is given before a function runs
//! (one YAML mapping whose `kind` is `ResourceList` or `List`). A full parse
//! costs about 60 ms of CPU per MiB, ten times what Porch's runner spends on
//! a call, and the function parses the whole document again anyway. The
//! scan here reads the bytes once, line by line, keeps no tree and
//! allocates only a set of the top-level keys: it follows quoted scalars,
//! flow collections and block scalars just far enough to know which lines
//! start a top-level key, and answers the value of `kind`.
//!
//! It answers only when it is sure, and `None` otherwise, so the caller
//! falls back to the bounded full parse ([`super::from_yaml_slice`]), which
//! also words the error: anything but UTF-8 without a byte order mark and
//! `\n` line breaks; a root that is not a block mapping starting at column
//! 0; directives, several documents, complex keys, tabs before content,
//! duplicate top-level keys; a quoted scalar or flow collection that spans
//! lines; nesting that may reach [`super::MAX_DEPTH`]; and any alias, so
//! the codec's alias budget still applies to every document that has one.
//! What it does not check is the syntax inside the values: a ResourceList
//! whose top level is right but whose items are broken YAML reaches the
//! function, which reports the error, as it does with Porch's runner.

use std::collections::HashSet;

use super::MAX_DEPTH;

/// How a scanned line ends.
enum LineEnd {
    /// In the block context with nothing open.
    Plain,
    /// With a block scalar header (`|`, `>`): the more indented lines that
    /// follow are its text.
    BlockScalar,
}

/// The value of the top-level `kind` key of the YAML document in `bytes`,
/// when the scan is sure the document is a single block mapping (starting
/// at column 0) that has `kind` as a key with a scalar written on the same
/// line, and the document is within the codec's depth and alias bounds;
/// `None` when it is not sure (see the module documentation), in which case
/// the caller parses the document.
///
/// Linear in the length of `bytes`, with no recursion.
pub fn block_mapping_kind(bytes: &[u8]) -> Option<&str> {
    let text = std::str::from_utf8(bytes).ok()?;
    if text.contains('\r') || text.starts_with('\u{feff}') {
        return None;
    }
    let mut keys: HashSet<&str> = HashSet::new();
    let mut kind = None;
    // A top-level key has been seen.
    let mut started = false;
    // The last top-level key's value may be a block sequence at column 0.
    let mut sequence_allowed = false;
    // The indentation of the line that opened a block scalar.
    let mut block_scalar: Option<usize> = None;
    // The last content line was `kind: ...`, whose plain value an indented
    // line would continue.
    let mut after_kind = false;
    for line in text.split('\n') {
        let indent = line.bytes().take_while(|&b| b == b' ').count();
        let rest = &line[indent..];
        if rest.is_empty() {
            continue;
        }
        if let Some(open) = block_scalar {
            if indent > open {
                continue;
            }
            block_scalar = None;
        }
        if rest.starts_with('\t') {
            return None;
        }
        if indent > 0 {
            if !started || (after_kind && !rest.starts_with('#')) {
                return None;
            }
            if let LineEnd::BlockScalar = scan_nodes(rest, indent, true)? {
                block_scalar = Some(indent);
            }
            continue;
        }
        after_kind = false;
        let first = rest.as_bytes()[0];
        let end = match first {
            b'#' => continue,
            b'-' if rest == "---" && !started => continue,
            b'-' if indicator_at(rest.as_bytes(), 0) => {
                if !sequence_allowed {
                    return None;
                }
                scan_nodes(&rest[1..], 1, true)?
            }
            _ => {
                let (key, value) = top_level_key(rest)?;
                if !keys.insert(key) {
                    return None;
                }
                started = true;
                let trimmed = value.trim_start_matches(' ');
                sequence_allowed = trimmed.is_empty() || trimmed.starts_with('#');
                if key == "kind" {
                    kind = Some(scalar(trimmed)?);
                    after_kind = true;
                }
                scan_nodes(value, 1, false)?
            }
        };
        if let LineEnd::BlockScalar = end {
            block_scalar = Some(0);
        }
    }
    kind
}

/// True when `b[i]` is an indicator (`-`, `?`, `:`) followed by a space
/// or the end of the line.
fn indicator_at(b: &[u8], i: usize) -> bool {
    b.get(i + 1).is_none_or(|&c| c == b' ')
}

/// A top-level key line: the key (plain, or quoted without escapes) and
/// the text after its `:`.
fn top_level_key(line: &str) -> Option<(&str, &str)> {
    let b = line.as_bytes();
    let (key, colon) = match b[0] {
        b'"' | b'\'' => {
            let end = line[1..].find(b[0] as char)? + 1;
            let key = &line[1..end];
            if key.contains(['\\', '\'']) {
                return None;
            }
            (key, end + 1)
        }
        c if starts_special(c) => return None,
        _ => {
            let colon = (0..b.len()).find(|&i| b[i] == b':' && indicator_at(b, i))?;
            let key = line[..colon].trim_end_matches(' ');
            if key.contains(" #") || key.contains('\t') {
                return None;
            }
            (key, colon)
        }
    };
    if b.get(colon) != Some(&b':') || !indicator_at(b, colon) {
        return None;
    }
    Some((key, &line[colon + 1..]))
}

/// Characters a plain scalar may not start with (YAML's indicators).
fn starts_special(c: u8) -> bool {
    matches!(
        c,
        b'-' | b'?'
            | b':'
            | b','
            | b'['
            | b']'
            | b'{'
            | b'}'
            | b'#'
            | b'&'
            | b'*'
            | b'!'
            | b'|'
            | b'>'
            | b'\''
            | b'"'
            | b'%'
            | b'@'
            | b'`'
    )
}

/// A one-line scalar value (plain, or quoted without escapes) with an
/// optional comment after it.
fn scalar(value: &str) -> Option<&str> {
    let b = value.as_bytes();
    let (text, rest) = match *b.first()? {
        q @ (b'"' | b'\'') => {
            let end = value[1..].find(q as char)? + 1;
            let text = &value[1..end];
            if text.contains('\\') || b.get(end + 1) == Some(&q) {
                return None;
            }
            (text, &value[end + 1..])
        }
        c if starts_special(c) => return None,
        _ => {
            let end = value.find(" #").unwrap_or(value.len());
            let text = value[..end].trim_end_matches(' ');
            if text.contains(": ") || text.ends_with(':') || text.contains('\t') {
                return None;
            }
            (text, &value[end..])
        }
    };
    let rest = rest.trim_start_matches(' ');
    (rest.is_empty() || rest.starts_with('#')).then_some(text)
}

/// Scans the nodes of one line from a node's start (`depth` levels of
/// nesting implied before it): how the line ends, or `None` when the scan
/// is unsure. `sequence_ok` says whether a block sequence entry (`- `) may
/// start here (not right after a key's `:`).
fn scan_nodes(line: &str, depth: usize, mut sequence_ok: bool) -> Option<LineEnd> {
    let b = line.as_bytes();
    let mut i = 0;
    let mut depth = depth;
    // A key's `:` has been seen on this line (`a: b: c` is not YAML).
    let mut keyed = !sequence_ok;
    loop {
        while b.get(i) == Some(&b' ') {
            i += 1;
        }
        let Some(&c) = b.get(i) else {
            return Some(LineEnd::Plain);
        };
        depth += 1;
        if depth + 2 >= MAX_DEPTH {
            return None;
        }
        match c {
            b'#' => return Some(LineEnd::Plain),
            b'-' if indicator_at(b, i) => {
                if !sequence_ok {
                    return None;
                }
                i += 1;
                continue;
            }
            b'?' | b':' if indicator_at(b, i) => return None,
            // An alias: the full parse applies the alias budget.
            b'*' => return None,
            b'&' | b'!' => {
                i += b[i..].iter().position(|&c| c == b' ')?;
                depth -= 1;
                continue;
            }
            b'|' | b'>' => {
                let header = &line[i + 1..];
                let body =
                    header.trim_start_matches(|c: char| c.is_ascii_digit() || c == '+' || c == '-');
                let tail = body.trim_start_matches(' ');
                return (tail.is_empty() || (tail.starts_with('#') && body.len() > tail.len()))
                    .then_some(LineEnd::BlockScalar);
            }
            b'"' => i = end_of_double_quoted(b, i)?,
            b'\'' => i = end_of_single_quoted(b, i)?,
            b'[' | b'{' => i = end_of_flow(b, i, depth)?,
            b'%' | b'@' | b'`' | b',' | b']' | b'}' | b'\t' => return None,
            _ => {
                // A plain scalar: up to a key's `:`, a comment, or the end.
                let mut j = i + 1;
                loop {
                    match b.get(j) {
                        None => return Some(LineEnd::Plain),
                        Some(b':') if indicator_at(b, j) => break,
                        Some(b'#') if matches!(b[j - 1], b' ' | b'\t') => {
                            return Some(LineEnd::Plain);
                        }
                        _ => j += 1,
                    }
                }
                if keyed {
                    return None;
                }
                (i, sequence_ok, keyed) = (j + 1, false, true);
                continue;
            }
        }
        // After a quoted scalar or a flow collection: the end of the line,
        // a comment, or the `:` of a key.
        while b.get(i) == Some(&b' ') {
            i += 1;
        }
        match b.get(i) {
            None | Some(b'#') => return Some(LineEnd::Plain),
            Some(b':') if indicator_at(b, i) && !keyed => {
                (i, sequence_ok, keyed) = (i + 1, false, true);
            }
            _ => return None,
        }
    }
}

/// The position after the double-quoted scalar starting at `b[i]`, or
/// `None` when it does not end on this line.
fn end_of_double_quoted(b: &[u8], i: usize) -> Option<usize> {
    let mut j = i + 1;
    loop {
        match *b.get(j)? {
            b'\\' => j += 2,
            b'"' => return Some(j + 1),
            _ => j += 1,
        }
    }
}

/// The position after the single-quoted scalar starting at `b[i]`, or
/// `None` when it does not end on this line.
fn end_of_single_quoted(b: &[u8], i: usize) -> Option<usize> {
    let mut j = i + 1;
    loop {
        match *b.get(j)? {
            b'\'' if b.get(j + 1) == Some(&b'\'') => j += 2,
            b'\'' => return Some(j + 1),
            _ => j += 1,
        }
    }
}

/// The position after the flow collection starting at `b[i]` (nested
/// `depth` levels deep), or `None` when it does not end on this line,
/// holds an alias, or nests too deep.
fn end_of_flow(b: &[u8], i: usize, depth: usize) -> Option<usize> {
    let mut open = 0usize;
    // At the start of a node, where a quote, an alias or an anchor may be.
    let mut node_start = true;
    let mut j = i;
    while let Some(&c) = b.get(j) {
        match c {
            b'[' | b'{' => {
                open += 1;
                if depth + open + 2 >= MAX_DEPTH {
                    return None;
                }
                node_start = true;
            }
            b']' | b'}' => {
                open -= 1;
                if open == 0 {
                    return Some(j + 1);
                }
                node_start = false;
            }
            b',' => node_start = true,
            b' ' => {}
            b':' if matches!(
                b.get(j + 1),
                None | Some(b' ' | b',' | b']' | b'}' | b'"' | b'\'')
            ) =>
            {
                node_start = true;
            }
            b'"' if node_start => {
                j = end_of_double_quoted(b, j)?;
                node_start = false;
                continue;
            }
            b'\'' if node_start => {
                j = end_of_single_quoted(b, j)?;
                node_start = false;
                continue;
            }
            b'*' | b'@' | b'`' | b'|' | b'>' | b'%' if node_start => return None,
            b'#' if matches!(b[j - 1], b' ' | b'\t') => return None,
            _ => node_start = false,
        }
        j += 1;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    /// What the full parse says: the top-level kind, or the syntax error.
    fn parsed_kind(text: &str) -> Result<Option<String>, String> {
        #[derive(Deserialize)]
        struct Header {
            kind: Option<String>,
        }
        super::super::from_yaml_str::<Header>(text)
            .map(|h| h.kind)
            .map_err(|e| e.to_string())
    }

    /// Every answer the scan gives for a document that parses is the full
    /// parse's answer. (A document whose syntax is broken below its top
    /// level may get an answer: the function reports that error.)
    fn agrees(text: &str) -> Option<&str> {
        let quick = block_mapping_kind(text.as_bytes());
        if let Some(kind) = quick {
            match parsed_kind(text) {
                Ok(parsed) => assert_eq!(
                    parsed.as_deref(),
                    Some(kind),
                    "the scan read kind {kind:?} from:\n{text}"
                ),
                Err(e) => {
                    if std::env::var_os("SHOW_SCAN").is_some() {
                        eprintln!("=== {e}\n{text}");
                    }
                }
            }
        }
        quick
    }

    #[test]
    fn reads_kind_of_block_mappings() {
        let rl = "apiVersion: config.kubernetes.io/v1\nkind: ResourceList\nitems:\n\
                  - apiVersion: v1\n  kind: ConfigMap # a comment\n  metadata: {name: a, labels: {x: 'y'}}\n  \
                  data:\n    script: |\n      kind: NotThis\n      \"unclosed\n    note: >-\n      [open\n\
                  - {\"apiVersion\": \"v1\", \"kind\": \"Secret\"}\n\
                  - 'quoted': \"va\\\"lue\" # c\n  other: don't [stop] #here\n\
                  functionConfig:\n  kind: ConfigMap\n";
        assert_eq!(agrees(rl), Some("ResourceList"));
        assert_eq!(
            agrees("---\n# header\nkind: 'List' # c\nitems: []\n"),
            Some("List")
        );
        assert_eq!(agrees("\"kind\": \"ResourceList\"\n"), Some("ResourceList"));
        assert_eq!(agrees("kind: Deployment\n"), Some("Deployment"));
        assert_eq!(
            agrees("items:\n- a: |\n    text\n\n  b: c\nkind: ResourceList\n"),
            Some("ResourceList")
        );
        assert_eq!(
            agrees("items:\n- url: http://x/y#z\n  path: /a/*\nkind: ResourceList\n"),
            Some("ResourceList")
        );
    }

    #[test]
    fn unsure_of_what_it_does_not_follow() {
        for text in [
            "",
            "# only a comment\n",
            "{\"kind\": \"ResourceList\"}",
            "  kind: ResourceList\n",
            "kind: ResourceList\r\n",
            "\u{feff}kind: ResourceList\n",
            "kind: ResourceList\n---\nkind: ResourceList\n",
            "%YAML 1.2\n---\nkind: ResourceList\n",
            "kind: ResourceList\nkind: List\n",
            "kind: Resource\n  List\n",
            "kind:\n  ResourceList\n",
            "kind: &k ResourceList\n",
            "a: &k ResourceList\nkind: *k\n",
            "kind: ResourceList\nitems: [*a]\n",
            "kind: ResourceList\nitems:\n- <<: *base\n",
            "kind: ResourceList\nitems: [a,\nkind: List]\n",
            "kind: ResourceList\nnote: \"open\nkind: List\"\n",
            "kind: ResourceList\nnote: 'open\nkind: List'\n",
            "kind: \"Resource\\u004cist\"\n",
            "? kind\n: ResourceList\n",
            "- kind: ResourceList\n",
            "kind: ResourceList\nitems: - a\n",
            "kind: ResourceList\n\titems: []\n",
            "kind: !!str ResourceList\n",
            "kind: |\n  ResourceList\n",
        ] {
            assert_eq!(agrees(text), None, "{text:?}");
        }
    }

    #[test]
    fn unsure_near_the_depth_limit() {
        let deep = format!(
            "kind: ResourceList\nitems: {}{}\n",
            "[".repeat(300),
            "]".repeat(300)
        );
        assert_eq!(agrees(&deep), None);
        let mut nested = String::from("kind: ResourceList\nitems:\n");
        for level in 0..300 {
            nested.push_str(&format!("{}a{level}:\n", " ".repeat(level)));
        }
        assert_eq!(agrees(&nested), None);
        assert_eq!(
            agrees(&format!(
                "kind: ResourceList\nitems: {}a\n",
                "- ".repeat(300)
            )),
            None
        );
        let shallow = format!(
            "kind: ResourceList\nitems: {}{}\n",
            "[".repeat(100),
            "]".repeat(100)
        );
        assert_eq!(agrees(&shallow), Some("ResourceList"));
    }

    #[test]
    fn large_lists_are_read_in_one_pass() {
        let mut rl =
            String::from("apiVersion: config.kubernetes.io/v1\nkind: ResourceList\nitems:\n");
        for i in 0..2000 {
            rl.push_str(&format!(
                "- apiVersion: apps/v1\n  kind: Deployment\n  metadata:\n    name: app-{i}\n  \
                 spec:\n    template:\n      spec:\n        containers:\n        - name: main\n          \
                 args: [\"--flag\", 'v a l', x]\n          command: |\n            echo \"{i}\n"
            ));
        }
        assert_eq!(agrees(&rl), Some("ResourceList"));
    }

    /// Single-byte edits of a tricky list, with YAML's indicator characters:
    /// whenever the scan answers, the full parse agrees.
    #[test]
    fn mutations_never_fool_it() {
        let base = "apiVersion: v1\nkind: ResourceList\nitems:\n- a: 'x' # c\n  b: [\"y\", {z: 1}]\n  \
                    c: |\n    kind: List\n  d: \"e\"\nnote: plain text\nkind2: List\n";
        let alphabet = b"-?:,[]{}#&*!|>'\"%@` \n\tak\\";
        let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed as usize
        };
        let mut answered = 0;
        for _ in 0..20_000 {
            let mut text = base.as_bytes().to_vec();
            for _ in 0..1 + next() % 3 {
                let at = next() % text.len();
                let c = alphabet[next() % alphabet.len()];
                match next() % 3 {
                    0 => text[at] = c,
                    1 => text.insert(at, c),
                    _ => {
                        text.remove(at);
                    }
                }
            }
            let text = String::from_utf8(text).unwrap();
            answered += usize::from(agrees(&text).is_some());
        }
        assert!(answered > 1000, "{answered}");
    }
}
