//! Block-style YAML output the way kpt writes it (kyaml over Go's
//! `yaml.v3`): two-space indentation, sequences compact (`- ` flush with
//! their key) or wide (indented by two) as the file uses, and each string
//! in the style `yaml.v3` picks for it — plain when it reads back as the
//! same string, `"double-quoted"` when it would read as another type
//! (`"true"`, `"3"`, `"0123"`, `"2001-12-14"`, `"yes"`), `'single-quoted'`
//! when plain text cannot hold it (`': '`, a leading `*`), a `|` block for
//! multi-line text, escapes only where nothing else can.
//!
//! Used for everything a render writes that no function wrote as text: new
//! fields set in process (builtins, the Kptfile render status), objects a
//! builtin generates, `results.yaml`. Text a function wrote is kept as it
//! wrote it (see [`super::preserve`]).

use serde_json::{Map, Value};

use super::tree::plain_is_string;

/// How block sequences under a mapping key are indented.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SeqIndent {
    /// `key:\n- a` (kyaml's default).
    #[default]
    Compact,
    /// `key:\n  - a`.
    Wide,
}

impl SeqIndent {
    /// The style of a document's own lists, which what this runner writes
    /// into it takes ([`super::seq_style::own_sequence_indent`]: kyaml's
    /// rule, block scalars' lines passed over).
    pub fn of(text: &str) -> Self {
        if super::seq_style::own_sequence_indent(text) == "wide" {
            SeqIndent::Wide
        } else {
            SeqIndent::Compact
        }
    }
}

/// A whole document (ends with a line break; `{}` for an empty mapping).
pub fn document(value: &Value, seq: SeqIndent) -> String {
    let mut out = String::new();
    match value {
        Value::Object(m) if !m.is_empty() => map_lines(&mut out, m, 0, seq),
        Value::Array(a) if !a.is_empty() => seq_lines(&mut out, a, 0, seq),
        other => {
            out.push_str(&inline(other, 0).unwrap_or_else(|| block_scalar(other, 0)));
            out.push('\n');
        }
    }
    out
}

/// The lines of a non-empty block collection whose entries or items start
/// at column `indent` (each line ends with a line break). Scalars and empty
/// collections give their inline text followed by a line break.
pub fn block(value: &Value, indent: usize, seq: SeqIndent) -> String {
    let mut out = String::new();
    match value {
        Value::Object(m) if !m.is_empty() => map_lines(&mut out, m, indent, seq),
        Value::Array(a) if !a.is_empty() => seq_lines(&mut out, a, indent, seq),
        other => {
            out.push_str(&scalar_text(other, indent));
            out.push('\n');
        }
    }
    out
}

/// One `key: value` entry of a block mapping whose keys sit at column
/// `indent`, as [`block`] writes a one-entry mapping (lines end with a line
/// break), without building that mapping.
pub fn entry_block(k: &str, v: &Value, indent: usize, seq: SeqIndent) -> String {
    let mut out = " ".repeat(indent);
    entry(&mut out, k, v, indent, seq);
    out
}

/// True when `value` is written on the line of its key (scalars, `{}`, `[]`,
/// block scalars start there too), false for block collections.
pub fn is_inline(value: &Value) -> bool {
    match value {
        Value::Object(m) => m.is_empty(),
        Value::Array(a) => a.is_empty(),
        _ => true,
    }
}

/// A scalar (or empty collection) as written after `key: ` whose key sits
/// at column `indent`: one token, or a `|` block whose content lines are
/// indented by `indent + 2` (no final line break).
pub fn scalar_text(value: &Value, indent: usize) -> String {
    inline(value, indent).unwrap_or_else(|| block_scalar(value, indent))
}

/// A value in flow style on one line (`[a, b]`, `{k: v}`), for a node the
/// document already writes in flow style.
pub fn flow(value: &Value) -> String {
    match value {
        Value::Object(m) => {
            let parts: Vec<String> = m
                .iter()
                .map(|(k, v)| format!("{}: {}", flow_string(k), flow(v)))
                .collect();
            format!("{{{}}}", parts.join(", "))
        }
        Value::Array(a) => {
            let parts: Vec<String> = a.iter().map(flow).collect();
            format!("[{}]", parts.join(", "))
        }
        Value::String(s) => flow_string(s),
        other => inline(other, 0).unwrap_or_default(),
    }
}

/// A string inside a flow collection.
fn flow_string(s: &str) -> String {
    if s.contains(['\n', '\r', '\u{85}', '\u{2028}', '\u{2029}']) || !plain_reads_back(s) {
        return double_quoted(s);
    }
    let a = analyze(s);
    let flow_plain =
        a.block_plain && !s.contains([',', '[', ']', '{', '}']) && !s.starts_with(['?', ':']);
    if flow_plain {
        s.to_string()
    } else if a.single_quoted {
        format!("'{}'", s.replace('\'', "''"))
    } else {
        double_quoted(s)
    }
}

/// A mapping key as written before its `:`.
pub fn key(k: &str) -> String {
    if k.contains(['\n', '\r']) {
        return double_quoted(k);
    }
    string_token(k)
}

/// Single-line text of a scalar, or `None` for a multi-line string.
fn inline(value: &Value, _indent: usize) -> Option<String> {
    Some(match value {
        Value::Null => "null".into(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        Value::String(s) if s.contains(['\n', '\r', '\u{85}', '\u{2028}', '\u{2029}']) => {
            if block_allowed(s) {
                return None;
            }
            double_quoted(s)
        }
        Value::String(s) => string_token(s),
        Value::Object(_) => "{}".into(),
        Value::Array(_) => "[]".into(),
    })
}

/// Appends `n` spaces (the indentation of a line) without a temporary string.
fn pad(out: &mut String, n: usize) {
    out.extend(std::iter::repeat_n(' ', n));
}

fn map_lines(out: &mut String, m: &Map<String, Value>, indent: usize, seq: SeqIndent) {
    for (k, v) in m {
        pad(out, indent);
        entry(out, k, v, indent, seq);
    }
}

/// `key: value` at the current position (the caller wrote the indentation).
fn entry(out: &mut String, k: &str, v: &Value, indent: usize, seq: SeqIndent) {
    out.push_str(&key(k));
    out.push(':');
    match v {
        Value::Object(m) if !m.is_empty() => {
            out.push('\n');
            map_lines(out, m, indent + 2, seq);
        }
        Value::Array(a) if !a.is_empty() => {
            out.push('\n');
            let at = match seq {
                SeqIndent::Compact => indent,
                SeqIndent::Wide => indent + 2,
            };
            seq_lines(out, a, at, seq);
        }
        other => {
            out.push(' ');
            out.push_str(&scalar_text(other, indent));
            out.push('\n');
        }
    }
}

fn seq_lines(out: &mut String, a: &[Value], indent: usize, seq: SeqIndent) {
    for v in a {
        pad(out, indent);
        out.push_str("- ");
        item(out, v, indent + 2, seq);
    }
}

/// An item's value after its `- ` (content column `indent`).
fn item(out: &mut String, v: &Value, indent: usize, seq: SeqIndent) {
    match v {
        Value::Object(m) if !m.is_empty() => {
            for (i, (k, v)) in m.iter().enumerate() {
                if i > 0 {
                    pad(out, indent);
                }
                entry(out, k, v, indent, seq);
            }
        }
        Value::Array(a) if !a.is_empty() => {
            for (i, v) in a.iter().enumerate() {
                if i > 0 {
                    pad(out, indent);
                }
                out.push_str("- ");
                item(out, v, indent + 2, seq);
            }
        }
        other => {
            out.push_str(&scalar_text(other, indent.saturating_sub(2)));
            out.push('\n');
        }
    }
}

/// A multi-line string as a `|` block (content at `indent + 2`), as
/// `yaml.v3` writes it: an indentation digit when the text starts with a
/// space or line break, `-` when it has no final line break, `+` when it
/// has more than one.
pub(crate) fn block_scalar(value: &Value, indent: usize) -> String {
    let Value::String(s) = value else {
        return inline(value, indent).unwrap_or_default();
    };
    let mut out = String::from("|");
    if s.starts_with([' ', '\n']) {
        out.push('2');
    }
    let chars: Vec<char> = s.chars().collect();
    match chars.as_slice() {
        [] => out.push('-'),
        [.., last] if !is_break(*last) => out.push('-'),
        [_] => out.push('+'),
        [.., prev, _] if is_break(*prev) => out.push('+'),
        _ => {}
    }
    let pad = " ".repeat(indent + 2);
    let body = s.strip_suffix('\n').unwrap_or(s);
    for line in body.split('\n') {
        out.push('\n');
        if !line.is_empty() {
            out.push_str(&pad);
            out.push_str(line);
        }
    }
    out
}

fn is_break(c: char) -> bool {
    matches!(c, '\n' | '\r' | '\u{85}' | '\u{2028}' | '\u{2029}')
}

/// A single-line string in `yaml.v3`'s style.
fn string_token(s: &str) -> String {
    if !plain_reads_back(s) {
        return double_quoted(s);
    }
    let a = analyze(s);
    if a.block_plain {
        s.to_string()
    } else if a.single_quoted {
        format!("'{}'", s.replace('\'', "''"))
    } else {
        double_quoted(s)
    }
}

/// True when `s` written plain reads back as the same string, both for
/// `yaml.v3` (kpt and Go functions) and for this codec.
fn plain_reads_back(s: &str) -> bool {
    !v3_resolves_to_other_type(s) && plain_is_string(s)
}

/// `yaml.v3`'s `resolve` reads `s` as something other than a string (or
/// it is a YAML 1.1 boolean or base-60 float, which `yaml.v3` also quotes).
fn v3_resolves_to_other_type(s: &str) -> bool {
    const SPECIAL: &[&str] = &[
        "true", "True", "TRUE", "false", "False", "FALSE", "", "~", "null", "Null", "NULL", ".nan",
        ".NaN", ".NAN", ".inf", ".Inf", ".INF", "+.inf", "+.Inf", "+.INF", "-.inf", "-.Inf",
        "-.INF", "<<", "y", "Y", "yes", "Yes", "YES", "on", "On", "ON", "n", "N", "no", "No", "NO",
        "off", "Off", "OFF",
    ];
    if SPECIAL.contains(&s) {
        return true;
    }
    let Some(&first) = s.as_bytes().first() else {
        return true;
    };
    match first {
        b'.' => go_parse_float(s),
        b'+' | b'-' | b'0'..=b'9' => {
            if is_base60_float(s) || looks_like_timestamp(s) {
                return true;
            }
            let plain: String = s.chars().filter(|&c| c != '_').collect();
            go_parse_int(&plain) || is_yaml_style_float(&plain)
        }
        _ => false,
    }
}

/// Go's `strconv.ParseInt(s, 0, 64)` (or `ParseUint`) accepts `s`.
fn go_parse_int(s: &str) -> bool {
    let rest = s.strip_prefix(['+', '-']).unwrap_or(s);
    let (radix, digits) =
        if let Some(r) = rest.strip_prefix("0x").or_else(|| rest.strip_prefix("0X")) {
            (16, r)
        } else if let Some(r) = rest.strip_prefix("0b").or_else(|| rest.strip_prefix("0B")) {
            (2, r)
        } else if let Some(r) = rest.strip_prefix("0o").or_else(|| rest.strip_prefix("0O")) {
            (8, r)
        } else if rest.len() > 1 && rest.starts_with('0') {
            (8, &rest[1..])
        } else {
            (10, rest)
        };
    !digits.is_empty()
        && u128::from_str_radix(digits, radix).is_ok_and(|v| v <= u128::from(u64::MAX))
}

/// `yaml.v3`'s float pattern `^[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?$`.
fn is_yaml_style_float(s: &str) -> bool {
    let b = s.as_bytes();
    let mut i = usize::from(matches!(b.first(), Some(b'+' | b'-')));
    let digits = |i: &mut usize| {
        let start = *i;
        while *i < b.len() && b[*i].is_ascii_digit() {
            *i += 1;
        }
        *i - start
    };
    if b.get(i) == Some(&b'.') {
        i += 1;
        if digits(&mut i) == 0 {
            return false;
        }
    } else {
        if digits(&mut i) == 0 {
            return false;
        }
        if b.get(i) == Some(&b'.') {
            i += 1;
            digits(&mut i);
        }
    }
    if matches!(b.get(i), Some(b'e' | b'E')) {
        i += 1;
        if matches!(b.get(i), Some(b'+' | b'-')) {
            i += 1;
        }
        if digits(&mut i) == 0 {
            return false;
        }
    }
    i == b.len()
}

/// Go's `strconv.ParseFloat` accepts `s` (decimal forms, `inf`, `nan`).
fn go_parse_float(s: &str) -> bool {
    let lower = s.to_ascii_lowercase();
    let u = lower.strip_prefix(['+', '-']).unwrap_or(&lower);
    matches!(u, "inf" | "infinity" | "nan") || is_yaml_style_float(s)
}

/// `yaml.v3`'s base-60 float pattern `^[-+]?[0-9][0-9_]*(?::[0-5]?[0-9])+(?:\.[0-9_]*)?$`.
fn is_base60_float(s: &str) -> bool {
    if !s.contains(':') {
        return false;
    }
    let b = s.as_bytes();
    let mut i = usize::from(matches!(b.first(), Some(b'+' | b'-')));
    if !b.get(i).is_some_and(u8::is_ascii_digit) {
        return false;
    }
    while i < b.len() && (b[i].is_ascii_digit() || b[i] == b'_') {
        i += 1;
    }
    let mut groups = 0;
    while b.get(i) == Some(&b':') {
        i += 1;
        let start = i;
        while i < b.len() && b[i].is_ascii_digit() && i - start < 2 {
            i += 1;
        }
        let n = i - start;
        if n == 0 || (n == 2 && b[start] > b'5') {
            return false;
        }
        groups += 1;
    }
    if groups == 0 {
        return false;
    }
    if b.get(i) == Some(&b'.') {
        i += 1;
        while i < b.len() && (b[i].is_ascii_digit() || b[i] == b'_') {
            i += 1;
        }
    }
    i == b.len()
}

/// `yaml.v3`'s timestamp forms start with a date `YYYY-M-D`.
fn looks_like_timestamp(s: &str) -> bool {
    let mut parts = s.splitn(3, '-');
    let (Some(y), Some(m), Some(rest)) = (parts.next(), parts.next(), parts.next()) else {
        return false;
    };
    let d: String = rest.chars().take_while(char::is_ascii_digit).collect();
    let tail = &rest[d.len()..];
    y.len() == 4
        && y.bytes().all(|c| c.is_ascii_digit())
        && (1..=2).contains(&m.len())
        && m.bytes().all(|c| c.is_ascii_digit())
        && (1..=2).contains(&d.len())
        && (tail.is_empty() || tail.starts_with(['T', 't', ' ']))
}

/// What the emitter may use for a string (`yaml_emitter_analyze_scalar`).
pub(crate) struct Analysis {
    /// May be written plain in block context.
    pub(crate) block_plain: bool,
    /// May be written single-quoted.
    pub(crate) single_quoted: bool,
}

pub(crate) fn analyze(s: &str) -> Analysis {
    if s.is_empty() {
        return Analysis {
            block_plain: true,
            single_quoted: true,
        };
    }
    let mut block_indicators = s.starts_with("---") || s.starts_with("...");
    let mut special = false;
    let mut tabs = false;
    let (mut leading_space, mut trailing_space) = (false, false);
    let mut preceded_by_whitespace = true;
    let mut chars = s.chars().enumerate().peekable();
    while let Some((i, c)) = chars.next() {
        let next = chars.peek().map(|&(_, n)| n);
        let followed_by_whitespace = next.is_none_or(|n| n == ' ' || n == '\t');
        if i == 0 {
            match c {
                '#' | ',' | '[' | ']' | '{' | '}' | '&' | '*' | '!' | '|' | '>' | '\'' | '"'
                | '%' | '@' | '`' => block_indicators = true,
                '?' | ':' | '-' if followed_by_whitespace => block_indicators = true,
                _ => {}
            }
        } else {
            match c {
                ':' if followed_by_whitespace => block_indicators = true,
                '#' if preceded_by_whitespace => block_indicators = true,
                _ => {}
            }
        }
        if c == '\t' {
            tabs = true;
        } else if !printable(c) {
            special = true;
        }
        if c == ' ' {
            if i == 0 {
                leading_space = true;
            }
            if next.is_none() {
                trailing_space = true;
            }
        }
        preceded_by_whitespace = c == ' ' || c == '\t';
    }
    let plain_ok = !(leading_space || trailing_space || tabs || special || block_indicators);
    Analysis {
        block_plain: plain_ok,
        single_quoted: !(tabs || special),
    }
}

/// `yaml.v3`'s printable set (it escapes characters outside the Basic
/// Multilingual Plane too).
fn printable(c: char) -> bool {
    matches!(c as u32, 0x0A | 0x20..=0x7E | 0xA0..=0xD7FF | 0xE000..=0xFFFD) && c != '\u{FEFF}'
}

/// Whether a multi-line string may be a `|` block (`yaml.v3`: no trailing
/// space, no space before a line break, nothing unprintable).
pub(crate) fn block_allowed(s: &str) -> bool {
    !(s.ends_with(' ')
        || s.contains(" \n")
        || s.chars().any(|c| c != '\n' && c != '\t' && !printable(c)))
}

/// A double-quoted scalar with `yaml.v3`'s escapes.
pub fn double_quoted(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\0' => out.push_str("\\0"),
            '\u{7}' => out.push_str("\\a"),
            '\u{8}' => out.push_str("\\b"),
            '\t' => out.push_str("\\t"),
            '\n' => out.push_str("\\n"),
            '\u{b}' => out.push_str("\\v"),
            '\u{c}' => out.push_str("\\f"),
            '\r' => out.push_str("\\r"),
            '\u{1b}' => out.push_str("\\e"),
            '\u{85}' => out.push_str("\\N"),
            '\u{a0}' => out.push_str("\\_"),
            '\u{2028}' => out.push_str("\\L"),
            '\u{2029}' => out.push_str("\\P"),
            c if printable(c) => out.push(c),
            c if (c as u32) <= 0xFF => out.push_str(&format!("\\x{:02X}", c as u32)),
            c if (c as u32) <= 0xFFFF => out.push_str(&format!("\\u{:04X}", c as u32)),
            c => out.push_str(&format!("\\U{:08X}", c as u32)),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn an_entry_block_is_the_block_of_a_one_entry_map() {
        let values = [
            json!("plain"),
            json!("two\nlines\n"),
            json!(3),
            json!(null),
            json!({}),
            json!([]),
            json!({"a": {"b": [1, {"c": "d"}]}, "e": []}),
            json!([["x"], {"y": 1}]),
        ];
        for seq in [SeqIndent::Compact, SeqIndent::Wide] {
            for indent in [0, 4] {
                for (k, v) in [("key", &values[0]), ("a key: odd", &values[1])]
                    .into_iter()
                    .chain(values.iter().map(|v| ("k", v)))
                {
                    let mut m = Map::new();
                    m.insert(k.to_string(), v.clone());
                    assert_eq!(
                        entry_block(k, v, indent, seq),
                        block(&Value::Object(m), indent, seq),
                        "{k}: {v} at {indent}"
                    );
                }
            }
        }
    }

    #[test]
    fn strings_take_yaml_v3_styles() {
        for (s, want) in [
            ("nginx:1.25", "nginx:1.25"),
            ("True", "\"True\""),
            ("true", "\"true\""),
            ("3", "\"3\""),
            ("0123", "\"0123\""),
            ("007", "\"007\""),
            ("1e3", "\"1e3\""),
            ("yes", "\"yes\""),
            ("on", "\"on\""),
            ("2001-12-14", "\"2001-12-14\""),
            ("1:20", "\"1:20\""),
            ("", "\"\""),
            ("a: b", "'a: b'"),
            ("*x", "'*x'"),
            ("it's", "it's"),
            ("- x", "'- x'"),
            ("a #b", "'a #b'"),
            ("a#b", "a#b"),
            (" lead", "' lead'"),
            ("tab\there", "\"tab\\there\""),
            ("${replicas}", "${replicas}"),
            (".inf", "\".inf\""),
            ("tRuE", "\"tRuE\""),
        ] {
            assert_eq!(string_token(s), want, "{s:?}");
        }
    }

    #[test]
    fn documents_are_written_like_kyaml() {
        let v = json!({
            "status": {
                "conditions": [{"type": "Rendered", "status": "True", "reason": "RenderSuccess"}],
                "renderStatus": {"mutationSteps": [{"image": "x", "exitCode": 0, "results": [{"message": "m\nn", "severity": "info"}]}]}
            },
            "empty": {}, "none": [], "nothing": null
        });
        assert_eq!(
            document(&v, SeqIndent::Wide),
            "status:\n  conditions:\n    - type: Rendered\n      status: \"True\"\n      reason: RenderSuccess\n  renderStatus:\n    mutationSteps:\n      - image: x\n        exitCode: 0\n        results:\n          - message: |-\n              m\n              n\n            severity: info\nempty: {}\nnone: []\nnothing: null\n"
        );
        assert_eq!(
            document(&json!({"a": [[1, 2], {"b": "c"}]}), SeqIndent::Compact),
            "a:\n- - 1\n  - 2\n- b: c\n"
        );
    }

    #[test]
    fn block_scalars_carry_chomping_and_indentation_hints() {
        assert_eq!(block_scalar(&json!("a\nb\n"), 0), "|\n  a\n  b");
        assert_eq!(block_scalar(&json!("a\n\n"), 2), "|+\n    a\n");
        assert_eq!(block_scalar(&json!(" a\nb"), 0), "|2-\n   a\n  b");
    }

    #[test]
    fn emitted_text_reads_back() {
        let v = json!({"a": ["x: y", "#c", "3", 3, 1.5, true, null, "", "multi\nline\n", "tab\t"], "k: odd": {"nested": "ok"}});
        for seq in [SeqIndent::Compact, SeqIndent::Wide] {
            let text = document(&v, seq);
            let back: Value = super::super::from_yaml_str(&text).unwrap();
            assert_eq!(back, v, "{text}");
        }
    }
}
