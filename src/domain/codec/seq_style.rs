//! The block-sequence style of a document's text (`key:\n- a` or
//! `key:\n  - a`), as kyaml derives it and as what this runner writes
//! into a document follows it. Read by the writer ([`super::emit`]) and
//! the format-preserving editor ([`super::preserve`]), which re-exports it.

/// The block-sequence style of a document, as kyaml derives it for the
/// `internal.config.kubernetes.io/seqindent` annotation (kyaml v0.15.0,
/// `yaml/util.go` `DeriveSeqIndentStyle`): line by line, from the top, and
/// blind to what YAML the lines are — block scalars included, so a Markdown
/// list in a description decides when it comes first, as it does for kpt.
/// A line counts when the text before its first `- ` is spaces only; its
/// key line is the nearest line above that is not a comment, cut at its
/// first `#`, which must hold exactly one `:`, at its end (a blank line
/// there makes the item not count). The first item counting decides:
/// indented as its key line, `"compact"`; two spaces deeper, `"wide"`;
/// any other depth is passed over. No item decides: `"compact"`. Lines are
/// read with a final `\r` removed (kyaml reads text whose CRLFs it has
/// turned into LFs).
pub fn sequence_indent(text: &str) -> &'static str {
    let lines: Vec<&str> = text
        .split('\n')
        .map(|l| l.strip_suffix('\r').unwrap_or(l))
        .collect();
    for (i, line) in lines.iter().enumerate() {
        let Some(dash) = line.find("- ") else {
            continue;
        };
        if !line[..dash].bytes().all(|b| b == b' ') {
            continue;
        }
        let Some(key) = lines[..i]
            .iter()
            .rev()
            .find(|l| !l.trim_matches(' ').starts_with('#'))
        else {
            continue;
        };
        let key = key.split('#').next().unwrap_or(key);
        let trimmed = key.trim_matches(' ');
        if trimmed.is_empty() || trimmed.matches(':').count() != 1 || !trimmed.ends_with(':') {
            continue;
        }
        let key_indent = key.len() - key.trim_start_matches(' ').len();
        if dash == key_indent {
            return "compact";
        }
        if dash == key_indent + 2 {
            return "wide";
        }
    }
    "compact"
}

/// The block-sequence style of a document's own lists: [`sequence_indent`]
/// with the lines inside block scalars passed over, so that a Markdown list
/// in a description does not decide. What this runner writes into a
/// document — a Kptfile's `status`, lists a function added — takes this
/// style, so it matches the lists around it. (kpt re-encodes the whole
/// document in [`sequence_indent`]'s style instead, its own lists
/// included.)
pub fn own_sequence_indent(text: &str) -> &'static str {
    sequence_indent(&without_block_scalar_lines(text))
}

/// `text` without the content lines of its block scalars (`key: |`,
/// `- >-`, with any indicators and a comment): the lines after the header
/// that are blank or indented deeper than the line holding it.
fn without_block_scalar_lines(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut inside: Option<usize> = None;
    for line in text.split_inclusive('\n') {
        let body = line.trim_end_matches(['\n', '\r']);
        let indent = body.len() - body.trim_start_matches(' ').len();
        if let Some(header) = inside {
            if body.trim().is_empty() || indent > header {
                continue;
            }
            inside = None;
        }
        out.push_str(line);
        let code = body.split(" #").next().unwrap_or(body).trim_end();
        let opens = code
            .rsplit_once([' ', '\t'])
            .map(|(before, last)| {
                (before.trim_end().ends_with(':') || before.trim_end().ends_with('-'))
                    && last.starts_with(['|', '>'])
                    && last[1..]
                        .chars()
                        .all(|c| c.is_ascii_digit() || c == '+' || c == '-')
            })
            .unwrap_or(false);
        if opens {
            inside = Some(indent);
        }
    }
    out
}
