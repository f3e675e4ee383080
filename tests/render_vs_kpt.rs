//! `krm-fn-runner render` against the real `kpt fn render`, on the same
//! packages and the same function binaries.
//!
//! Every package is copied twice; `kpt fn render --allow-exec` (the binary
//! from `scripts/build-kpt.sh`, found through `KRM_FN_KPT_BIN`, which
//! `scripts/test.sh` exports) renders one copy and `krm-fn-runner render
//! --allow-exec` the other. The Kptfiles run the catalog function binaries
//! installed by `scripts/install-catalog-functions.sh` through `exec:`, so both
//! tools run exactly the same functions. Compared:
//!
//! - the exit status (and that it is the one the package is written for);
//! - the set of files in the package afterwards;
//! - every KRM file as parsed YAML, every other file byte for byte;
//! - comments: each comment of an input file that kpt keeps in its output
//!   file must be in ours too, and package-wide (objects a function moved
//!   to another file keep their comments);
//! - `results.yaml` (`--results-dir`): exit code, and per item the
//!   `image`/`exec`, `exitCode`, and each result's `severity` and `message`;
//! - on failure, that no resource file was written (by either tool).
//!
//! The packages:
//! - `tests/render_packages/*` (Kptfiles say `exec: ${CATALOG}/<function>`;
//!   the copy gets the absolute path of the installed binary), in place,
//!   some also with `-o stdout` / `-o unwrap`, and again with our builtin
//!   `set-namespace` in place of the binary (kpt still runs the binary);
//! - kpt's own `fn render` end-to-end cases whose functions are installed
//!   (from the kpt module, `KRM_FN_KPT_MODULE`; `image:` rewritten to
//!   `exec:` in the copy);
//! - when `KRM_FN_CATALOG_FIXTURES` points at the catalog's fixtures, the
//!   catalog's example and test packages of the installed functions.
//!
//! The root Kptfile's `status` (render outcome, kpt ≥ 2026-03) is not
//! compared: kpt v1.0.0-beta.54 predates it. Ours must record a `Rendered`
//! condition matching the outcome; the rest of the Kptfile is compared.
//!
//! Differences from kpt are listed in [`KNOWN_DIFFERENCES`], each with its
//! class (a kpt quirk we deliberately do not copy, or a bug of ours with a
//! reproduction) and reason; any other difference fails the test, and so
//! does a listed difference that no longer shows up, so the list stays
//! accurate.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use krm_fn_runner::domain::codec;
use serde_json::{Value, json};

// ---------------------------------------------------------------------------
// Known differences
// ---------------------------------------------------------------------------

/// What part of a render a difference is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Aspect {
    /// The exit status.
    Exit,
    /// A file exists after one tool's render and not after the other's.
    Files,
    /// A file's content (parsed YAML for KRM files, bytes otherwise).
    Content,
    /// A comment kpt keeps is missing from our output.
    Comments,
    /// `results.yaml`.
    Results,
    /// The stdout of an out-of-place render (`-o stdout`, `-o unwrap`).
    Stdout,
    /// A KRM file that reads the same as kpt's but is not byte-identical
    /// (the byte-level conformance mode: layout, quoting, comments, markers).
    Bytes,
}

/// Why a difference is accepted for now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Class {
    /// kpt behaviour we deliberately do not copy (a quirk in the spec); the
    /// test asserts our behaviour instead.
    Quirk,
    /// Our bug, with a minimal reproduction in the reason; remove the entry
    /// when it is fixed (the test then insists). None is known at present.
    #[allow(dead_code)]
    Bug,
}

/// One reviewed, expected difference between kpt's and our render.
struct Known {
    /// Package (directory name; catalog cases as `examples/<case>` or
    /// `tests/<fn>/<case>`; out-of-place runs get a `@stdout`/`@unwrap` suffix).
    package: &'static str,
    /// What differs.
    aspect: Aspect,
    /// Package-relative file (empty when not about one file).
    file: &'static str,
    /// When non-empty, every line of the difference must contain this text
    /// (so an unrelated difference in the same place is not hidden).
    marker: &'static str,
    /// Quirk or bug.
    class: Class,
    /// Why.
    reason: &'static str,
}

const OVERLAP: &str = "kpt quirk (spec §3.5): an object matching two selectors is passed to the \
    function twice, so kpt fails with `resource at path \"web.yaml\" and index \"0\" already \
    exists` (and writes an empty results list); we pass it once and the render succeeds \
    (asserted in `selectors_overlap`)";

const HEAD_COMMENT_GAP: &str = "kpt quirk (kyaml): a blank line between a document's head \
    comment and its first key is dropped when kpt rewrites the file; we keep the file's text \
    wherever the functions did not change it";

const FOOT_COMMENT: &str = "kpt quirk (kyaml): a comment below a document's last sequence item is \
    written twice (once indented into the item, once where it was) and the blank line after the \
    document's head comment is dropped; we keep both as they were";

const JSON_KEY_ORDER: &str = "kpt quirk (kyaml): a JSON file a function changed is re-encoded with \
    its keys sorted; we keep the file's key order and layout and edit only the changed values";

const UNCHANGED_SCALAR_STYLE: &str = "kpt writes every scalar as the function re-encoded it: \
    starlark outputs the unchanged `env: |-` block scalar as `'[dev, staging]'`; we keep the \
    file's text for values a function did not change (changed values take the function's text)";

const DOCUMENT_END: &str = "kpt drops `...` document-end markers when it rewrites a file; we \
    keep them (the document between the markers is edited in place)";

const SEPARATOR_COMMENTS: &str = "kpt quirk (kyaml): a comment on a `---` line is moved below it \
    for the first document and lost for the others; we keep the separator lines as written";

const LINE_ENDINGS: &str = "kpt writes LF line endings to a CRLF file it rewrites; we keep the \
    file's CRLF on every line, inserted lines and `---` included";

const BYTE_ORDER_MARK: &str = "kpt drops a UTF-8 byte-order mark at the start of a file it \
    rewrites; we keep it (functions get the text without it, as kpt's)";

const SUGGESTED_VALUE: &str = "kpt v1.0.0-beta.54 bug: a result's legacy `field.suggestedValue` \
    is migrated to `proposedValue: {match: []}`, losing the value; we migrate it to \
    `proposedValue: safe` (the value the function suggested)";

const MERGE_TAG: &str = "kpt quirk (yaml.v3): a merge key in a file a function changed is \
    written with an explicit tag, `!!merge <<: *base`; we keep the file's `<<: *base`";

const DUPLICATE_KEY: &str = "kpt quirk (kyaml reads a function's output as yaml.v3 nodes, which \
    keep both entries of a duplicated mapping key): a validator whose output repeats a key deep \
    in an object passes; YAML mapping keys are unique, so we refuse the output as not YAML (the \
    error names the key and its line) and the render fails, writing only the Kptfile status, \
    as for any failed step (asserted in `validator_output_duplicate_key`)";

const NULL_ITEMS: &str = "kpt quirk (kyaml decodes `items: null` as an empty list): a function \
    output with `items: null` removes every object, so kpt deletes every file of the package, \
    its Kptfile included, and exits 0; `items` must list the objects the function keeps, so we \
    fail the step and write nothing, as for an output without `items` (`items: []` still \
    removes every object; asserted in `output_null_items`)";

/// Reviewed differences from kpt v1.0.0-beta.54. Each must still occur.
const KNOWN_DIFFERENCES: &[Known] = &[
    Known::quirk("output-items-null", Aspect::Exit, "", "", NULL_ITEMS),
    Known::quirk(
        "output-items-null",
        Aspect::Files,
        "Kptfile",
        "only we have this file",
        NULL_ITEMS,
    ),
    Known::quirk(
        "output-items-null",
        Aspect::Files,
        "app.yaml",
        "only we have this file",
        NULL_ITEMS,
    ),
    Known::quirk(
        "output-items-null",
        Aspect::Results,
        "results.yaml",
        "[0].items: kpt [{",
        NULL_ITEMS,
    ),
    Known {
        package: "legacy-results",
        aspect: Aspect::Bytes,
        file: "results.yaml",
        marker: "",
        class: Class::Quirk,
        reason: SUGGESTED_VALUE,
    },
    Known {
        package: "anchors-tags",
        aspect: Aspect::Bytes,
        file: "anchors.yaml",
        marker: "<<: *base",
        class: Class::Quirk,
        reason: MERGE_TAG,
    },
    Known::quirk(
        "anchors-edited",
        Aspect::Bytes,
        "anchors.yaml",
        "<<: *base",
        MERGE_TAG,
    ),
    Known::quirk(
        "anchors-edited",
        Aspect::Bytes,
        "merges.yaml",
        "<<: [*defaults, *more]",
        MERGE_TAG,
    ),
    Known {
        package: "doc-markers",
        aspect: Aspect::Bytes,
        file: "ended.yaml",
        marker: "",
        class: Class::Quirk,
        reason: DOCUMENT_END,
    },
    Known {
        package: "doc-markers",
        aspect: Aspect::Bytes,
        file: "separators.yaml",
        marker: "",
        class: Class::Quirk,
        reason: SEPARATOR_COMMENTS,
    },
    Known {
        package: "doc-markers",
        aspect: Aspect::Bytes,
        file: "unchanged.yaml",
        marker: "ours: \"...\\n\"",
        class: Class::Quirk,
        reason: DOCUMENT_END,
    },
    Known {
        package: "doc-markers@dir",
        aspect: Aspect::Bytes,
        file: "ended.yaml",
        marker: "",
        class: Class::Quirk,
        reason: DOCUMENT_END,
    },
    Known {
        package: "doc-markers@dir",
        aspect: Aspect::Bytes,
        file: "separators.yaml",
        marker: "",
        class: Class::Quirk,
        reason: SEPARATOR_COMMENTS,
    },
    Known {
        package: "doc-markers@dir",
        aspect: Aspect::Bytes,
        file: "unchanged.yaml",
        marker: "ours: \"...\\n\"",
        class: Class::Quirk,
        reason: DOCUMENT_END,
    },
    Known {
        package: "crlf",
        aspect: Aspect::Bytes,
        file: "bom.yaml",
        marker: "# a file saved with a byte-order mark",
        class: Class::Quirk,
        reason: BYTE_ORDER_MARK,
    },
    Known {
        package: "crlf",
        aspect: Aspect::Bytes,
        file: "windows.yaml",
        marker: "",
        class: Class::Quirk,
        reason: LINE_ENDINGS,
    },
    Known {
        package: "crlf@dir",
        aspect: Aspect::Bytes,
        file: "bom.yaml",
        marker: "# a file saved with a byte-order mark",
        class: Class::Quirk,
        reason: BYTE_ORDER_MARK,
    },
    Known {
        package: "crlf@dir",
        aspect: Aspect::Bytes,
        file: "windows.yaml",
        marker: "",
        class: Class::Quirk,
        reason: LINE_ENDINGS,
    },
    Known {
        package: "multi-doc-comments",
        aspect: Aspect::Bytes,
        file: "all.yaml",
        marker: "",
        class: Class::Quirk,
        reason: FOOT_COMMENT,
    },
    Known {
        package: "multi-doc-comments",
        aspect: Aspect::Bytes,
        file: "obj.json",
        marker: "",
        class: Class::Quirk,
        reason: JSON_KEY_ORDER,
    },
    Known {
        package: "multi-doc-comments@builtin",
        aspect: Aspect::Bytes,
        file: "all.yaml",
        marker: "",
        class: Class::Quirk,
        reason: FOOT_COMMENT,
    },
    Known {
        package: "multi-doc-comments@builtin",
        aspect: Aspect::Bytes,
        file: "obj.json",
        marker: "",
        class: Class::Quirk,
        reason: JSON_KEY_ORDER,
    },
    Known {
        package: "multi-doc-comments@dir",
        aspect: Aspect::Bytes,
        file: "all.yaml",
        marker: "",
        class: Class::Quirk,
        reason: FOOT_COMMENT,
    },
    Known {
        package: "multi-doc-comments@dir",
        aspect: Aspect::Bytes,
        file: "obj.json",
        marker: "",
        class: Class::Quirk,
        reason: JSON_KEY_ORDER,
    },
    Known {
        package: "configpath",
        aspect: Aspect::Bytes,
        file: "setters.yaml",
        marker: "",
        class: Class::Quirk,
        reason: UNCHANGED_SCALAR_STYLE,
    },
    Known {
        package: "kpt-e2e/modify-path-annotation",
        aspect: Aspect::Bytes,
        file: "starlark-fn.yaml",
        marker: "ours: \"\\n\"",
        class: Class::Quirk,
        reason: HEAD_COMMENT_GAP,
    },
    Known {
        package: "kpt-e2e/out-of-place-dir",
        aspect: Aspect::Bytes,
        file: "resources.yaml",
        marker: "ours: \"\\n\"",
        class: Class::Quirk,
        reason: HEAD_COMMENT_GAP,
    },
    Known {
        package: "kpt-e2e/out-of-place-dir-exists-error",
        aspect: Aspect::Bytes,
        file: "resources.yaml",
        marker: "ours: \"\\n\"",
        class: Class::Quirk,
        reason: HEAD_COMMENT_GAP,
    },
    Known {
        package: "kpt-e2e/out-of-place-fnchain-stdout",
        aspect: Aspect::Bytes,
        file: "resources.yaml",
        marker: "ours: \"\\n\"",
        class: Class::Quirk,
        reason: HEAD_COMMENT_GAP,
    },
    Known {
        package: "kpt-e2e/out-of-place-fnchain-stdout-results",
        aspect: Aspect::Bytes,
        file: "resources.yaml",
        marker: "ours: \"\\n\"",
        class: Class::Quirk,
        reason: HEAD_COMMENT_GAP,
    },
    Known {
        package: "kpt-e2e/out-of-place-fnchain-unwrap",
        aspect: Aspect::Bytes,
        file: "resources.yaml",
        marker: "ours: \"\\n\"",
        class: Class::Quirk,
        reason: HEAD_COMMENT_GAP,
    },
    Known {
        package: "kpt-e2e/out-of-place-stdout",
        aspect: Aspect::Bytes,
        file: "resources.yaml",
        marker: "ours: \"\\n\"",
        class: Class::Quirk,
        reason: HEAD_COMMENT_GAP,
    },
    Known {
        package: "kpt-e2e/out-of-place-unwrap",
        aspect: Aspect::Bytes,
        file: "resources.yaml",
        marker: "ours: \"\\n\"",
        class: Class::Quirk,
        reason: HEAD_COMMENT_GAP,
    },
    // selectors-overlap: the kpt quirk.
    Known {
        package: "validator-output-duplicate-key",
        aspect: Aspect::Exit,
        file: "",
        marker: "",
        class: Class::Quirk,
        reason: DUPLICATE_KEY,
    },
    Known {
        package: "validator-output-duplicate-key",
        aspect: Aspect::Content,
        file: "app.yaml",
        marker: ".metadata.namespace: kpt \"checked\" / ours (absent)",
        class: Class::Quirk,
        reason: DUPLICATE_KEY,
    },
    Known {
        package: "validator-output-duplicate-key",
        aspect: Aspect::Results,
        file: "results.yaml",
        marker: "exitCode: kpt 0 / ours 1",
        class: Class::Quirk,
        reason: DUPLICATE_KEY,
    },
    Known {
        package: "selectors-overlap",
        aspect: Aspect::Exit,
        file: "",
        marker: "",
        class: Class::Quirk,
        reason: OVERLAP,
    },
    Known {
        package: "selectors-overlap",
        aspect: Aspect::Content,
        file: "web.yaml",
        marker: ".metadata.namespace: kpt (absent) / ours \"web\"",
        class: Class::Quirk,
        reason: OVERLAP,
    },
    Known {
        package: "selectors-overlap",
        aspect: Aspect::Results,
        file: "results.yaml",
        marker: "[0].items: kpt [] / ours [{",
        class: Class::Quirk,
        reason: OVERLAP,
    },
];

impl Known {
    /// A kpt quirk we deliberately do not copy, as one table line.
    const fn quirk(
        package: &'static str,
        aspect: Aspect,
        file: &'static str,
        marker: &'static str,
        reason: &'static str,
    ) -> Self {
        Known {
            package,
            aspect,
            file,
            marker,
            class: Class::Quirk,
            reason,
        }
    }

    /// True when `d` is this difference.
    fn matches(&self, d: &Difference) -> bool {
        self.package == d.package
            && self.aspect == d.aspect
            && self.file == d.file
            && (self.marker.is_empty() || d.detail.lines().all(|l| l.contains(self.marker)))
    }
}

// ---------------------------------------------------------------------------
// Environment
// ---------------------------------------------------------------------------

/// The kpt binary built by `scripts/build-kpt.sh`.
fn kpt_bin() -> PathBuf {
    let path = std::env::var_os("KRM_FN_KPT_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            panic!(
                "KRM_FN_KPT_BIN is not set: these tests compare against the real kpt CLI. \
             Run them through scripts/test.sh, or export KRM_FN_KPT_BIN=\"$(scripts/build-kpt.sh)\""
            )
        });
    assert!(
        path.is_file(),
        "KRM_FN_KPT_BIN={} does not exist: run scripts/build-kpt.sh",
        path.display()
    );
    path
}

/// The directory of the installed catalog function binaries.
fn catalog_bin() -> PathBuf {
    common::catalog_dir().join("bin")
}

/// The catalog functions installed as binaries.
const INSTALLED: &[&str] = &[
    "apply-replacements",
    "apply-setters",
    "list-setters",
    "set-namespace",
    "starlark",
];

// ---------------------------------------------------------------------------
// Staging packages
// ---------------------------------------------------------------------------

/// Copies `src` to `dest` recursively (without `.expected`), rewriting every
/// `Kptfile` with `rewrite`.
fn stage(src: &Path, dest: &Path, rewrite: &dyn Fn(&str) -> String) {
    std::fs::create_dir_all(dest).unwrap();
    for entry in std::fs::read_dir(src).unwrap().flatten() {
        let name = entry.file_name();
        if name == ".expected" {
            continue;
        }
        let from = entry.path();
        let to = dest.join(&name);
        let kind = entry.file_type().unwrap();
        if kind.is_dir() {
            stage(&from, &to, rewrite);
        } else if kind.is_symlink() {
            let target = std::fs::read_link(&from).unwrap();
            std::os::unix::fs::symlink(target, &to).unwrap();
        } else if kind.is_file() {
            if name == "Kptfile" {
                let text = std::fs::read_to_string(&from).unwrap();
                std::fs::write(&to, rewrite(&text)).unwrap();
            } else {
                std::fs::copy(&from, &to).unwrap();
            }
        }
    }
}

/// `${CATALOG}` → the directory of the installed binaries; `${FUNCTIONS}`
/// → `tests/render_functions` (small exec functions written for these
/// packages).
fn substitute_catalog(text: &str) -> String {
    let functions = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/render_functions");
    text.replace("${CATALOG}", &catalog_bin().display().to_string())
        .replace("${FUNCTIONS}", &functions.display().to_string())
}

/// The function name of a catalog image (`gcr.io/kpt-fn/starlark:v0.4` → `starlark`).
fn function_name(image: &str) -> &str {
    let last = image.rsplit('/').next().unwrap_or(image);
    last.split([':', '@']).next().unwrap_or(last)
}

/// Catalog images used by a Kptfile (`image:` lines).
fn kptfile_images(text: &str) -> Vec<String> {
    text.lines()
        .filter_map(|l| {
            let t = l.trim_start().trim_start_matches("- ").trim_start();
            t.strip_prefix("image:")
                .map(|v| v.trim().trim_matches(|c| c == '"' || c == '\'').to_string())
        })
        .collect()
}

/// `image: <catalog image>` → `exec: <installed binary>`.
fn image_to_exec(text: &str) -> String {
    let bin = catalog_bin();
    let mut out = String::new();
    for line in text.split_inclusive('\n') {
        let body = line.trim_end_matches('\n');
        let indent = body.len() - body.trim_start().len();
        let rest = &body[indent..];
        let (dash, field) = match rest.strip_prefix("- ") {
            Some(f) => ("- ", f.trim_start()),
            None => ("", rest),
        };
        match field.strip_prefix("image:") {
            Some(image) => {
                let image = image.trim().trim_matches(|c| c == '"' || c == '\'');
                let pad = rest.len() - dash.len() - field.len();
                out.push_str(&body[..indent]);
                out.push_str(dash);
                out.push_str(&" ".repeat(pad));
                out.push_str(&format!(
                    "exec: {}",
                    bin.join(function_name(image)).display()
                ));
                out.push_str(&line[body.len()..]);
            }
            None => out.push_str(line),
        }
    }
    out
}

// ---------------------------------------------------------------------------
// Running
// ---------------------------------------------------------------------------

/// Which renderer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Tool {
    Kpt,
    Ours,
}

/// The outcome of one render.
struct Run {
    code: i32,
    stdout: Vec<u8>,
    stderr: String,
    results: Option<Value>,
    /// `results.yaml` as written.
    results_bytes: Option<Vec<u8>>,
}

/// Renders `pkg` with `tool` (`--allow-exec`, results into `results_dir`),
/// from `cwd`, with `extra` arguments.
fn render(tool: Tool, pkg: &Path, cwd: &Path, results_dir: &Path, extra: &[&str]) -> Run {
    let mut cmd = match tool {
        Tool::Kpt => {
            let mut c = Command::new(kpt_bin());
            c.args(["fn", "render"]);
            c
        }
        Tool::Ours => {
            let mut c = Command::new(env!("CARGO_BIN_EXE_krm-fn-runner"));
            c.arg("render");
            c
        }
    };
    cmd.arg(pkg)
        .arg("--allow-exec")
        .arg("--results-dir")
        .arg(results_dir)
        .args(extra)
        .current_dir(cwd)
        .stdin(Stdio::null());
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("cannot run {tool:?}: {e}"));
    let results_bytes = std::fs::read(results_dir.join("results.yaml")).ok();
    let results = results_bytes.as_ref().map(|b| {
        codec::from_yaml_slice::<Value>(b)
            .unwrap_or_else(|e| panic!("{tool:?} wrote an unreadable results.yaml: {e}"))
    });
    Run {
        code: out.status.code().unwrap_or(-1),
        stdout: out.stdout,
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        results,
        results_bytes,
    }
}

// ---------------------------------------------------------------------------
// Comparing
// ---------------------------------------------------------------------------

/// One observed difference.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Difference {
    package: String,
    aspect: Aspect,
    file: String,
    detail: String,
}

/// Every file under `dir` (package-relative path → bytes), hidden ones
/// included; directories are entries ending in `/` with no content.
fn files(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let p = e.path();
            let rel = p.strip_prefix(dir).unwrap().display().to_string();
            if p.is_dir() {
                out.insert(format!("{rel}/"), Vec::new());
                stack.push(p);
            } else {
                out.insert(rel, std::fs::read(&p).unwrap());
            }
        }
    }
    out
}

/// kpt's `MatchAllKRM` on a slash-separated relative path.
fn is_krm_file(rel: &str) -> bool {
    krm_fn_runner::adapters::package::is_krm_file(rel.rsplit('/').next().unwrap_or(rel))
}

/// The non-empty documents of a YAML file.
fn parse(bytes: &[u8]) -> Result<Vec<Value>, String> {
    codec::from_yaml_documents::<Value>(bytes)
        .map(|docs| docs.into_iter().filter(|d| !d.is_null()).collect())
        .map_err(|e| e.to_string())
}

/// The column where an inline comment starts on `line`, if any.
fn inline_comment(line: &str) -> Option<usize> {
    let (mut single, mut double) = (false, false);
    let mut prev = ' ';
    for (i, c) in line.char_indices() {
        match c {
            '\'' if !double => single = !single,
            '"' if !single && prev != '\\' => double = !double,
            '#' if !single && !double && prev.is_whitespace() => return Some(i),
            _ => {}
        }
        prev = c;
    }
    None
}

/// Comment texts of a YAML file with their multiplicity (full-line comments
/// and inline comments, trimmed).
fn comments(text: &str) -> BTreeMap<String, usize> {
    let mut out = BTreeMap::new();
    for line in text.lines() {
        let t = line.trim();
        let comment = if t.starts_with('#') {
            Some(t.to_string())
        } else {
            inline_comment(line).map(|i| line[i..].trim().to_string())
        };
        if let Some(c) = comment.filter(|c| c.len() > 1) {
            *out.entry(c).or_default() += 1;
        }
    }
    out
}

/// The parts of `results.yaml` compared: exit code; per item the function,
/// exit code, and each result's severity and message.
/// Both exit codes and stderrs when the two renders exited differently.
fn exit_difference(kpt: &Run, ours: &Run) -> Option<String> {
    (kpt.code != ours.code).then(|| {
        format!(
            "kpt exited {} and we exited {}\n--- kpt stderr\n{}\n--- our stderr\n{}",
            kpt.code, ours.code, kpt.stderr, ours.stderr
        )
    })
}

/// Comment counts over every KRM file of a tree (path → bytes).
fn tree_comments(tree: &BTreeMap<String, Vec<u8>>) -> BTreeMap<String, usize> {
    let mut all: BTreeMap<String, usize> = BTreeMap::new();
    for (_, bytes) in tree.iter().filter(|(rel, _)| is_krm_file(rel)) {
        for (c, n) in comments(&String::from_utf8_lossy(bytes)) {
            *all.entry(c).or_default() += n;
        }
    }
    all
}

/// Input comments kpt kept (as often as it kept them) that we have fewer of.
fn dropped_comments<'a>(
    source: &'a BTreeMap<String, usize>,
    kept: &BTreeMap<String, usize>,
    ours: &BTreeMap<String, usize>,
) -> Vec<&'a String> {
    source
        .iter()
        .filter(|(c, n)| {
            let need = (**n).min(kept.get(*c).copied().unwrap_or(0));
            ours.get(*c).copied().unwrap_or(0) < need
        })
        .map(|(c, _)| c)
        .collect()
}

fn results_summary(results: &Value) -> Value {
    let items = results["items"].as_array().cloned().unwrap_or_default();
    let items: Vec<Value> = items
        .iter()
        .map(|item| {
            let results: Vec<Value> = item["results"]
                .as_array()
                .cloned()
                .unwrap_or_default()
                .iter()
                .map(|r| json!({"severity": r["severity"], "message": r["message"]}))
                .collect();
            json!({
                "image": item["image"],
                "exec": item["exec"],
                "exitCode": item["exitCode"],
                "results": results,
            })
        })
        .collect();
    json!({"exitCode": results["exitCode"], "items": items})
}

/// Where two parsed document lists differ, as JSON paths and values.
fn describe_mismatch(kpt: &[Value], ours: &[Value]) -> String {
    fn walk(path: String, k: &Value, o: &Value, out: &mut Vec<String>) {
        match (k, o) {
            (Value::Object(km), Value::Object(om)) => {
                let keys = km.keys().chain(om.keys().filter(|x| !km.contains_key(*x)));
                for key in keys {
                    match (km.get(key), om.get(key)) {
                        (Some(kv), Some(ov)) if kv == ov => {}
                        (Some(kv), Some(ov)) => walk(format!("{path}.{key}"), kv, ov, out),
                        (kv, ov) => out.push(format!(
                            "{path}.{key}: kpt {} / ours {}",
                            kv.map_or("(absent)".into(), Value::to_string),
                            ov.map_or("(absent)".into(), Value::to_string)
                        )),
                    }
                }
            }
            (Value::Array(ka), Value::Array(oa)) if ka.len() == oa.len() => {
                for (i, (kv, ov)) in ka.iter().zip(oa).enumerate() {
                    if kv != ov {
                        walk(format!("{path}[{i}]"), kv, ov, out);
                    }
                }
            }
            _ => out.push(format!("{path}: kpt {k} / ours {o}")),
        }
    }
    let mut out = Vec::new();
    walk(
        String::new(),
        &Value::Array(kpt.to_vec()),
        &Value::Array(ours.to_vec()),
        &mut out,
    );
    out.join("\n")
}

/// Removes `status` from the root Kptfile in `tree` after checking that ours
/// records the render outcome there (kpt ≥ 2026-03 does; beta.54 predates it).
fn take_root_status(
    package: &str,
    tree: &mut BTreeMap<String, Vec<u8>>,
    tool: Tool,
    succeeded: bool,
    ran_functions: bool,
) {
    let Some(bytes) = tree.get_mut("Kptfile") else {
        return;
    };
    // An unreadable root Kptfile fails the render before any status exists.
    let Ok(mut docs) = parse(bytes) else {
        return;
    };
    let Some(Value::Object(kptfile)) = docs.first_mut() else {
        return;
    };
    let status = kptfile.remove("status");
    // A render that fails before any function runs may fail on the Kptfile
    // itself (e.g. a configMap value that is not a string): no status then.
    if tool == Tool::Ours && (succeeded || ran_functions || status.is_some()) {
        let status = status.unwrap_or_else(|| {
            panic!("{package}: our render did not record its outcome in the root Kptfile status")
        });
        let rendered = status["conditions"]
            .as_array()
            .and_then(|cs| cs.iter().find(|c| c["type"] == "Rendered"))
            .unwrap_or_else(|| panic!("no Rendered condition in the Kptfile status: {status}"));
        let want = if succeeded { "True" } else { "False" };
        assert_eq!(
            rendered["status"],
            want,
            "Rendered condition after a {} render: {rendered}",
            if succeeded { "successful" } else { "failed" }
        );
    }
    *bytes = without_top_level_key(bytes, "status");
}

/// `bytes` without the top-level mapping entry `key` (its line and every
/// more indented, blank or comment line after it): the rest of the file
/// byte for byte.
fn without_top_level_key(bytes: &[u8], key: &str) -> Vec<u8> {
    let text = String::from_utf8_lossy(bytes);
    let mut out = String::with_capacity(text.len());
    let mut skipping = false;
    for line in text.split_inclusive('\n') {
        let top = !line.starts_with([' ', '\t', '#', '\n', '\r']);
        if top {
            skipping = line.starts_with(&format!("{key}:"));
        }
        if !skipping {
            out.push_str(line);
        }
    }
    out.into_bytes()
}

/// The lines where two texts differ (common leading and trailing lines
/// left out), as `kpt: …` and `ours: …` lines.
fn byte_difference(kpt: &[u8], ours: &[u8]) -> String {
    let (k, o) = (String::from_utf8_lossy(kpt), String::from_utf8_lossy(ours));
    let k: Vec<&str> = k.split_inclusive('\n').collect();
    let o: Vec<&str> = o.split_inclusive('\n').collect();
    let head = k.iter().zip(&o).take_while(|(a, b)| a == b).count();
    let tail = k[head..]
        .iter()
        .rev()
        .zip(o[head..].iter().rev())
        .take_while(|(a, b)| a == b)
        .count();
    let mut out: Vec<String> = Vec::new();
    out.extend(
        k[head..k.len() - tail]
            .iter()
            .map(|l| format!("kpt: {l:?}")),
    );
    out.extend(
        o[head..o.len() - tail]
            .iter()
            .map(|l| format!("ours: {l:?}")),
    );
    out.join("\n")
}

/// Compares the package trees, results and exit status of the two renders.
#[allow(clippy::too_many_arguments)]
fn compare_renders(
    package: &str,
    input: &BTreeMap<String, Vec<u8>>,
    kpt_dir: &Path,
    kpt: &Run,
    ours_dir: &Path,
    ours: &Run,
    in_place: bool,
    diffs: &mut Vec<Difference>,
) {
    let mut diff = |aspect, file: &str, detail: String| {
        diffs.push(Difference {
            package: package.to_string(),
            aspect,
            file: file.to_string(),
            detail,
        })
    };
    if let Some(detail) = exit_difference(kpt, ours) {
        diff(Aspect::Exit, "", detail);
    }

    let mut kpt_tree = files(kpt_dir);
    let mut our_tree = files(ours_dir);
    let ran = |run: &Run| {
        run.results
            .as_ref()
            .and_then(|r| r["items"].as_array())
            .is_some_and(|items| !items.is_empty())
    };
    if in_place {
        take_root_status(package, &mut kpt_tree, Tool::Kpt, kpt.code == 0, ran(kpt));
        take_root_status(
            package,
            &mut our_tree,
            Tool::Ours,
            ours.code == 0,
            ran(ours),
        );
    }

    // Failure: nothing written (the root Kptfile may change only in status).
    for (tool, run, tree) in [(Tool::Kpt, kpt, &kpt_tree), (Tool::Ours, ours, &our_tree)] {
        if run.code == 0 {
            continue;
        }
        let before: BTreeSet<&String> = input.keys().collect();
        let after: BTreeSet<&String> = tree.keys().collect();
        assert_eq!(
            before, after,
            "{package}: {tool:?} failed but created or deleted files"
        );
        for (rel, bytes) in tree {
            if rel == "Kptfile" && parse(&input[rel]).is_ok() {
                assert_eq!(
                    parse(bytes).unwrap(),
                    parse(&input[rel]).unwrap(),
                    "{package}: {tool:?} failed but changed the root Kptfile beyond its status"
                );
            } else {
                assert!(
                    bytes == &input[rel],
                    "{package}: {tool:?} failed but wrote {rel}:\n{}",
                    String::from_utf8_lossy(bytes)
                );
            }
        }
    }

    let names: BTreeSet<&String> = kpt_tree.keys().chain(our_tree.keys()).collect();
    for rel in names {
        let (k, o) = match (kpt_tree.get(rel), our_tree.get(rel)) {
            (Some(k), Some(o)) => (k, o),
            (Some(_), None) => {
                diff(Aspect::Files, rel, "only kpt has this file".into());
                continue;
            }
            (None, Some(_)) => {
                diff(Aspect::Files, rel, "only we have this file".into());
                continue;
            }
            (None, None) => unreachable!(),
        };
        if is_krm_file(rel) {
            match (parse(k), parse(o)) {
                (Ok(kd), Ok(od)) if kd == od => {
                    if k != o {
                        diff(Aspect::Bytes, rel, byte_difference(k, o));
                    }
                }
                (Ok(kd), Ok(od)) => diff(Aspect::Content, rel, describe_mismatch(&kd, &od)),
                (Err(_), _) if k == o => {}
                (kr, or) => diff(
                    Aspect::Content,
                    rel,
                    format!("kpt: {:?}\nours: {:?}", kr.err(), or.err()),
                ),
            }
        } else if k != o {
            diff(
                Aspect::Content,
                rel,
                format!(
                    "--- kpt\n{}\n--- ours\n{}",
                    String::from_utf8_lossy(k),
                    String::from_utf8_lossy(o)
                ),
            );
        }
        if let Some(source) = input.get(rel).filter(|_| is_krm_file(rel)) {
            let source = comments(&String::from_utf8_lossy(source));
            let kept = comments(&String::from_utf8_lossy(k));
            let ours = comments(&String::from_utf8_lossy(o));
            let missing: Vec<&String> = source
                .iter()
                .filter(|(c, n)| {
                    let need = (**n).min(kept.get(*c).copied().unwrap_or(0));
                    ours.get(*c).copied().unwrap_or(0) < need
                })
                .map(|(c, _)| c)
                .collect();
            if !missing.is_empty() {
                diff(
                    Aspect::Comments,
                    rel,
                    format!(
                        "comments kpt keeps but we drop: {missing:?}\n--- ours\n{}",
                        String::from_utf8_lossy(o)
                    ),
                );
            }
        }
    }

    // Package-wide, so comments of objects a function moved to another
    // file count too.
    let (source, kept, ours_all) = (
        tree_comments(input),
        tree_comments(&kpt_tree),
        tree_comments(&our_tree),
    );
    let missing = dropped_comments(&source, &kept, &ours_all);
    if !missing.is_empty() {
        diff(
            Aspect::Comments,
            "*",
            format!("comments kpt keeps in the package but we drop: {missing:?}"),
        );
    }

    match (&kpt.results, &ours.results) {
        (Some(k), Some(o)) => {
            let (k, o) = (results_summary(k), results_summary(o));
            if k != o {
                diff(
                    Aspect::Results,
                    "results.yaml",
                    describe_mismatch(&[k], &[o]),
                );
            } else if let (Some(kb), Some(ob)) = (&kpt.results_bytes, &ours.results_bytes)
                && kb != ob
            {
                diff(Aspect::Bytes, "results.yaml", byte_difference(kb, ob));
            }
        }
        (None, None) => {}
        (k, o) => diff(
            Aspect::Results,
            "results.yaml",
            format!(
                "kpt wrote results.yaml: {}, we did: {}",
                k.is_some(),
                o.is_some()
            ),
        ),
    }
}

/// Fails on any difference not in [`KNOWN_DIFFERENCES`] and on any listed
/// difference for `packages` that did not occur.
fn check_against_known(packages: &[String], diffs: &[Difference]) {
    let known = |d: &Difference| KNOWN_DIFFERENCES.iter().find(|k| k.matches(d));
    let unexpected: Vec<String> = diffs
        .iter()
        .filter(|d| known(d).is_none())
        .map(|d| format!("[{}] {:?} {}:\n{}", d.package, d.aspect, d.file, d.detail))
        .collect();
    let vanished: Vec<String> = KNOWN_DIFFERENCES
        .iter()
        .filter(|k| packages.iter().any(|p| p == k.package))
        .filter(|k| !diffs.iter().any(|d| k.matches(d)))
        .map(|k| {
            format!(
                "[{}] {:?} {} ({:?}: {})",
                k.package, k.aspect, k.file, k.class, k.reason
            )
        })
        .collect();
    for d in diffs {
        if let Some(k) = known(d) {
            println!(
                "known difference [{}] {:?} {} ({:?}): {}",
                d.package, d.aspect, d.file, k.class, k.reason
            );
        }
    }
    assert!(
        unexpected.is_empty() && vanished.is_empty(),
        "differences from kpt not in KNOWN_DIFFERENCES:\n\n{}\n\n\
         listed in KNOWN_DIFFERENCES but no longer observed (remove them):\n{}",
        unexpected.join("\n\n"),
        vanished.join("\n")
    );
}

/// Renders `src` (staged with `rewrite`) with both tools in place and
/// compares; returns both runs (kpt's, then ours) and the directory
/// holding our result (`<tempdir>/ours/pkg`; the tempdir lives as long as
/// the returned guard).
fn compare_in_place(
    package: &str,
    src: &Path,
    rewrite: &dyn Fn(&str) -> String,
    diffs: &mut Vec<Difference>,
) -> (Run, Run, tempfile::TempDir) {
    let work = tempfile::tempdir().unwrap();
    let (kpt_dir, ours_dir) = (work.path().join("kpt/pkg"), work.path().join("ours/pkg"));
    stage(src, &kpt_dir, rewrite);
    stage(src, &ours_dir, rewrite);
    let input = files(&kpt_dir);
    let kpt = render(
        Tool::Kpt,
        &kpt_dir,
        work.path(),
        &work.path().join("kpt/results"),
        &[],
    );
    let ours = render(
        Tool::Ours,
        &ours_dir,
        work.path(),
        &work.path().join("ours/results"),
        &[],
    );
    compare_renders(
        package, &input, &kpt_dir, &kpt, &ours_dir, &ours, true, diffs,
    );
    (kpt, ours, work)
}

/// The builtin image our renders use in place of the set-namespace binary.
const BUILTIN_SET_NAMESPACE: &str = "set-namespace:v0.4.5";

/// Every `Kptfile` under `dir`, rewritten with `rewrite`.
fn rewrite_kptfiles(dir: &Path, rewrite: &dyn Fn(&str) -> String) {
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() {
            rewrite_kptfiles(&p, rewrite);
        } else if e.file_name() == "Kptfile" {
            let text = std::fs::read_to_string(&p).unwrap();
            std::fs::write(&p, rewrite(&text)).unwrap();
        }
    }
}

/// Like [`compare_in_place`], but our copy runs `set-namespace` as the
/// builtin (`image: set-namespace:v0.4.5`, in-process) where kpt runs the
/// catalog binary through `exec:`. Our Kptfiles and results are mapped back
/// to the `exec:` form before comparing, so everything else must agree.
fn compare_builtin_in_place(package: &str, src: &Path, diffs: &mut Vec<Difference>) -> (i32, i32) {
    let exec_line = format!("exec: {}", catalog_bin().join("set-namespace").display());
    let image_line = format!("image: {BUILTIN_SET_NAMESPACE}");
    let work = tempfile::tempdir().unwrap();
    let (kpt_dir, ours_dir) = (work.path().join("kpt/pkg"), work.path().join("ours/pkg"));
    stage(src, &kpt_dir, &substitute_catalog);
    let input = files(&kpt_dir);
    stage(src, &ours_dir, &|t| {
        substitute_catalog(t).replace(&exec_line, &image_line)
    });
    let kpt = render(
        Tool::Kpt,
        &kpt_dir,
        work.path(),
        &work.path().join("kpt/results"),
        &[],
    );
    let mut ours = render(
        Tool::Ours,
        &ours_dir,
        work.path(),
        &work.path().join("ours/results"),
        &[],
    );
    rewrite_kptfiles(&ours_dir, &|t| t.replace(&image_line, &exec_line));
    let builtin_image =
        format!("image: ghcr.io/kptdev/krm-functions-catalog/{BUILTIN_SET_NAMESPACE}");
    if let Some(bytes) = ours.results_bytes.as_mut() {
        *bytes = String::from_utf8_lossy(bytes)
            .replace(&builtin_image, &exec_line)
            .into_bytes();
    }
    if let Some(items) = ours
        .results
        .as_mut()
        .and_then(|r| r["items"].as_array_mut())
    {
        for item in items {
            let builtin = item["image"]
                .as_str()
                .is_some_and(|i| i.ends_with(&format!("/{BUILTIN_SET_NAMESPACE}")));
            if builtin {
                let map = item.as_object_mut().unwrap();
                map.remove("image");
                map.insert("exec".into(), json!(exec_line["exec: ".len()..]));
            }
        }
    }
    let name = format!("{package}@builtin");
    compare_renders(&name, &input, &kpt_dir, &kpt, &ours_dir, &ours, true, diffs);
    (kpt.code, ours.code)
}

/// Renders `src` with both tools with `-o <mode>` (`stdout` or `unwrap`) and
/// compares exit status, stdout (parsed; plus comments), results, and that
/// neither tool touched the package.
fn compare_out_of_place(
    package: &str,
    src: &Path,
    mode: &str,
    rewrite: &dyn Fn(&str) -> String,
    diffs: &mut Vec<Difference>,
) -> (i32, i32) {
    let name = format!("{package}@{mode}");
    let work = tempfile::tempdir().unwrap();
    let (kpt_dir, ours_dir) = (work.path().join("kpt/pkg"), work.path().join("ours/pkg"));
    stage(src, &kpt_dir, rewrite);
    stage(src, &ours_dir, rewrite);
    let input = files(&kpt_dir);
    let args = ["--output", mode];
    let kpt = render(
        Tool::Kpt,
        &kpt_dir,
        work.path(),
        &work.path().join("kpt/results"),
        &args,
    );
    let ours = render(
        Tool::Ours,
        &ours_dir,
        work.path(),
        &work.path().join("ours/results"),
        &args,
    );
    for (tool, dir) in [(Tool::Kpt, &kpt_dir), (Tool::Ours, &ours_dir)] {
        assert!(
            files(dir) == input,
            "{name}: {tool:?} changed the package although the output went to {mode}"
        );
    }
    let mut diff = |aspect, file: &str, detail: String| {
        diffs.push(Difference {
            package: name.clone(),
            aspect,
            file: file.to_string(),
            detail,
        })
    };
    if let Some(detail) = exit_difference(&kpt, &ours) {
        diff(Aspect::Exit, "", detail);
    }
    match (parse(&kpt.stdout), parse(&ours.stdout)) {
        (Ok(k), Ok(o)) if k == o => {}
        (Ok(k), Ok(o)) => diff(Aspect::Stdout, "", describe_mismatch(&k, &o)),
        (k, o) => diff(
            Aspect::Stdout,
            "",
            format!("kpt: {:?}\nours: {:?}", k.err(), o.err()),
        ),
    }
    let (kept, ours_comments) = (
        comments(&String::from_utf8_lossy(&kpt.stdout)),
        comments(&String::from_utf8_lossy(&ours.stdout)),
    );
    let source = tree_comments(&input);
    let missing = dropped_comments(&source, &kept, &ours_comments);
    if !missing.is_empty() {
        diff(
            Aspect::Comments,
            "",
            format!("comments kpt keeps on {mode} but we drop: {missing:?}"),
        );
    }
    match (&kpt.results, &ours.results) {
        (Some(k), Some(o)) if results_summary(k) == results_summary(o) => {}
        (None, None) => {}
        (k, o) => diff(
            Aspect::Results,
            "results.yaml",
            describe_mismatch(
                &k.iter().map(results_summary).collect::<Vec<_>>(),
                &o.iter().map(results_summary).collect::<Vec<_>>(),
            ),
        ),
    }
    (kpt.code, ours.code)
}

/// Renders `src` with both tools with `-o <new directory>` and compares
/// exit status, the output directories (as for in-place renders; no Kptfile
/// status out of place), results, and that neither tool touched the package
/// or, on failure, created the output directory.
fn compare_output_dir(package: &str, src: &Path, diffs: &mut Vec<Difference>) -> (i32, i32) {
    let name = format!("{package}@dir");
    let work = tempfile::tempdir().unwrap();
    let (kpt_dir, ours_dir) = (work.path().join("kpt/pkg"), work.path().join("ours/pkg"));
    let (kpt_out, ours_out) = (work.path().join("kpt/out"), work.path().join("ours/out"));
    stage(src, &kpt_dir, &substitute_catalog);
    stage(src, &ours_dir, &substitute_catalog);
    let input = files(&kpt_dir);
    let kpt_out_arg = kpt_out.display().to_string();
    let ours_out_arg = ours_out.display().to_string();
    let kpt = render(
        Tool::Kpt,
        &kpt_dir,
        work.path(),
        &work.path().join("kpt/results"),
        &["--output", &kpt_out_arg],
    );
    let ours = render(
        Tool::Ours,
        &ours_dir,
        work.path(),
        &work.path().join("ours/results"),
        &["--output", &ours_out_arg],
    );
    for (tool, dir) in [(Tool::Kpt, &kpt_dir), (Tool::Ours, &ours_dir)] {
        assert!(
            files(dir) == input,
            "{name}: {tool:?} changed the package although the output went to a directory"
        );
    }
    if kpt.code == 0 && ours.code == 0 {
        if let Some(status) = std::fs::read(ours_out.join("Kptfile"))
            .ok()
            .and_then(|b| parse(&b).ok())
            .and_then(|d| d.first().map(|k| k["status"].clone()))
        {
            assert!(
                status.is_null(),
                "{name}: an out-of-place render wrote Kptfile status"
            );
        }
        compare_renders(
            &name, &input, &kpt_out, &kpt, &ours_out, &ours, false, diffs,
        );
    } else {
        for (tool, run, out) in [(Tool::Kpt, &kpt, &kpt_out), (Tool::Ours, &ours, &ours_out)] {
            if run.code != 0 {
                assert!(
                    !out.exists() || files(out).is_empty(),
                    "{name}: {tool:?} failed but wrote into the output directory"
                );
            }
        }
        if kpt.code != ours.code {
            diffs.push(Difference {
                package: name,
                aspect: Aspect::Exit,
                file: String::new(),
                detail: format!(
                    "kpt exited {} and we exited {}\n--- kpt stderr\n{}\n--- our stderr\n{}",
                    kpt.code, ours.code, kpt.stderr, ours.stderr
                ),
            });
        }
    }
    (kpt.code, ours.code)
}

/// The source directory of one of `tests/render_packages`.
fn own_source(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/render_packages")
        .join(name)
}

/// Compares one package of `tests/render_packages`, which must render with
/// `expected_exit` under kpt; `check_ours` then inspects our rendered copy.
fn own_package_with(name: &str, expected_exit: i32, check_ours: &dyn Fn(&Path, i32)) {
    let mut diffs = Vec::new();
    let (kpt, ours, work) =
        compare_in_place(name, &own_source(name), &substitute_catalog, &mut diffs);
    assert_eq!(
        kpt.code, expected_exit,
        "kpt's exit status for {name} is not the one the package is written for"
    );
    check_ours(&work.path().join("ours/pkg"), ours.code);
    check_against_known(&[name.to_string()], &diffs);
}

/// Asserts that the file at `path` holds each of `parts` (naming the
/// missing one, with the file).
fn file_holds(path: &Path, parts: &[&str]) {
    let text = std::fs::read_to_string(path).unwrap();
    for part in parts {
        assert!(text.contains(part), "{part:?} missing from\n{text}");
    }
}

/// Compares one package of `tests/render_packages` that renders under both
/// tools (see [`own_package_with`]); each of our rendered `files` must hold
/// its parts.
fn own_package_holding(name: &str, files: &[(&str, &[&str])]) {
    own_package_with(name, 0, &|pkg, code| {
        assert_eq!(code, 0, "our render of {name} failed");
        for (file, parts) in files {
            file_holds(&pkg.join(file), parts);
        }
    });
}

/// Compares one package of `tests/render_packages` (see [`own_package_with`]).
fn own_package(name: &str, expected_exit: i32) {
    own_package_with(name, expected_exit, &|_, _| {});
}

#[test]
fn subpackages() {
    own_package("subpackages", 0);
}

#[test]
fn selectors() {
    own_package("selectors", 0);
}

/// kpt quirk (spec §3.5): an object matching two selectors is handed to the
/// function twice, and the render fails with a duplicate path/index. We pass
/// it once; the render succeeds.
#[test]
fn selectors_overlap() {
    own_package_with("selectors-overlap", 1, &|pkg, code| {
        assert_eq!(
            code, 0,
            "an object matching two selectors must not fail the render"
        );
        let docs = parse(&std::fs::read(pkg.join("web.yaml")).unwrap()).unwrap();
        let namespaces: Vec<(&str, &Value)> = docs
            .iter()
            .map(|d| (d["kind"].as_str().unwrap(), &d["metadata"]["namespace"]))
            .collect();
        assert_eq!(
            namespaces,
            [
                ("Deployment", &json!("web")),
                ("Service", &json!("web")),
                ("ConfigMap", &Value::Null)
            ],
            "the selected objects (the Deployment by both selectors) get the namespace"
        );
    });
}

#[test]
fn configpath() {
    own_package("configpath", 0);
}

#[test]
fn validators_pass() {
    own_package("validators-pass", 0);
}

#[test]
fn validator_fail() {
    own_package("validator-fail", 1);
}

/// A validator's output objects are checked, then discarded: changed ones
/// pass (the files keep the mutators' output), a syntax error deep in an
/// object's `spec` and an object without `kind` fail the render, as kpt's.
#[test]
fn validator_output_changed() {
    own_package("validator-output-value", 0);
}

#[test]
fn validator_output_duplicate_key() {
    own_package_with("validator-output-duplicate-key", 0, &|_, code| {
        assert_eq!(code, 1, "output with a duplicate key must fail the render");
    });
}

#[test]
fn validator_output_without_kind() {
    own_package("validator-output-no-kind", 1);
}

#[test]
fn mutator_fail() {
    own_package("mutator-fail", 1);
}

#[test]
fn exec_exit_code() {
    own_package("exec-exit-code", 1);
}

#[test]
fn generator() {
    own_package("generator", 0);
}

#[test]
fn deletion() {
    own_package("deletion", 0);
}

#[test]
fn multi_doc_comments() {
    own_package("multi-doc-comments", 0);
}

#[test]
fn seqindent() {
    own_package("seqindent", 0);
}

#[test]
fn non_krm() {
    own_package("non-krm", 0);
}

/// D1: documents closed with `...` and separators carrying comments. Both
/// tools render; ours keeps the markers and the separators' comments (kpt
/// drops them: listed).
#[test]
fn doc_markers() {
    own_package_with("doc-markers", 0, &|pkg, code| {
        assert_eq!(code, 0);
        let ended = std::fs::read_to_string(pkg.join("ended.yaml")).unwrap();
        assert!(
            ended.contains("s3cret\n...\n---\n")
                && ended.ends_with("robot\n  namespace: markers\n...\n"),
            "{ended}"
        );
        let seps = std::fs::read_to_string(pkg.join("separators.yaml")).unwrap();
        assert!(seps.starts_with("--- # the first document\n"), "{seps}");
        assert!(seps.contains("--- # the second document\n"), "{seps}");
    });
}

/// D1 without a pipeline: `-o stdout` and `-o unwrap` of a package whose
/// files end documents with `...` print YAML that reads as kpt's.
#[test]
fn doc_markers_without_a_pipeline_out_of_place() {
    let mut diffs = Vec::new();
    let mut names = Vec::new();
    let no_pipeline = |t: &str| t.split("pipeline:").next().unwrap().to_string();
    for mode in ["stdout", "unwrap"] {
        let (kpt_code, our_code) = compare_out_of_place(
            "doc-markers",
            &own_source("doc-markers"),
            mode,
            &no_pipeline,
            &mut diffs,
        );
        assert_eq!((kpt_code, our_code), (0, 0), "-o {mode}");
        names.push(format!("doc-markers@{mode}"));
    }
    check_against_known(&names, &diffs);
}

/// D3: comments an exec function writes — on a field it changes, on a
/// field it adds, on an object it adds — reach the files as kpt writes them.
#[test]
fn function_comments() {
    own_package_with("function-comments", 0, &|pkg, _| {
        let app = std::fs::read_to_string(pkg.join("app.yaml")).unwrap();
        assert!(
            app.contains("  replicas: 3 # kpt-set: ${replicas}\n"),
            "{app}"
        );
        assert!(
            app.contains("  # added by the function\n  added: \"yes\" # a new field\n"),
            "{app}"
        );
        let generated = std::fs::read_to_string(pkg.join("generated.yaml")).unwrap();
        assert!(
            generated.starts_with("# a ConfigMap the function generated\n"),
            "{generated}"
        );
    });
}

/// D6, D7: every YAML 1.2 scalar form a setter writes keeps the text the
/// function wrote (`0123`, `007`, `0x1F`, `1e3`, `0o17`, `1_000`, `.inf`,
/// `.NaN`, `~`, `yes`, dates, quoted versions); `.inf` from a function is
/// written, not refused.
#[test]
fn scalar_forms() {
    own_package_with("scalar-forms", 0, &|pkg, _| {
        file_holds(
            &pkg.join("values.yaml"),
            &[
                "  a: 0123 #",
                "  b: 007 #",
                "  c: 0x1F #",
                "  d: 1e3 #",
                "  e: 0o17 #",
                "  f: 1_000 #",
                "  g: 2.50 #",
                "  m: ~ #",
                "  n: .inf #",
                "  o: .NaN #",
                "  p: \"1.10\" #",
                "  limit: .inf\n",
                "  floor: -.inf\n",
            ],
        );
    });
}

/// Anchors, aliases, merge keys, tags and every scalar form in objects a
/// function changed: only the change is made, the rest of the text stays
/// as written (kpt's yaml.v3 tags the merge key: listed).
#[test]
fn anchors_tags() {
    own_package_with("anchors-tags", 0, &|pkg, _| {
        file_holds(
            &pkg.join("anchors.yaml"),
            &[
                "  name: anchors # set-namespace adds a namespace below\n  namespace: tagged\n",
                "data: &data\n",
                "other: *data\nref: *two\n",
                "  <<: *base\n",
            ],
        );
        file_holds(
            &pkg.join("tags.yaml"),
            &[
                "  namespace: tagged\n",
                "  str: !!str 123\n",
                "  binary: !!binary aGVsbG8=\n",
                "  zero: -0\n",
                "  octal: 0o777\n",
                "  hex: -0x1A\n",
            ],
        );
    });
}

/// A comment after a block scalar's header (`k: | # note`) stays once when
/// a function changes the scalar's text — also after another render (it
/// was written once more by each render).
#[test]
fn block_scalar_comments() {
    own_package_with("block-scalar-comments", 0, &|pkg, code| {
        assert_eq!(code, 0);
        let first = std::fs::read_to_string(pkg.join("notes.yaml")).unwrap();
        file_holds(
            &pkg.join("notes.yaml"),
            &[
                "  literal: | # on a literal\n    changed\n",
                "- | # on an item\n  changed\n",
            ],
        );
        let again = render(Tool::Ours, pkg, pkg, &pkg.join("../again"), &[]);
        assert_eq!(again.code, 0, "{}", again.stderr);
        let second = std::fs::read_to_string(pkg.join("notes.yaml")).unwrap();
        assert_eq!(first, second, "a second render changed the file");
    });
}

/// A function turning a keep (`|+`) block scalar into a strip (`|-`) one
/// drops the trailing blank lines that were its content.
#[test]
fn block_scalar_chomping() {
    own_package_holding(
        "block-scalar-chomping",
        &[(
            "chomping.yaml",
            &[
                "  literal: |-\n    body\n  next: value\n",
                "- |-\n  body\n- value\n",
            ],
        )],
    );
}

/// A function changing values under an anchor, in a merging map and of an
/// anchored scalar: anchors, aliases and merge keys stay as written, in
/// their place (they were expanded into copies, and merge keys flattened
/// with the key moved to the end); kpt's yaml.v3 tags the merge keys
/// (listed). Changed values in a document with anchors keep the function's
/// text (`'quoted-uno'` stays quoted, `~` stays `~`; they were written in
/// our style).
#[test]
fn anchors_edited() {
    own_package_holding(
        "anchors-edited",
        &[
            (
                "anchors.yaml",
                &[
                    "  base: &base\n    a: uno\n    b: two\n  ref: *base\n",
                    "  merged:\n    <<: *base\n    c: tres\n",
                    "  name: &name new\n  same: *name\n",
                    "    quoted: 'quoted-uno' # kept quoted\n",
                    "    flow: !!map {q: 'quoted-uno', n: ~}\n",
                ],
            ),
            (
                "merges.yaml",
                &[
                    "list: &list\n- uno\n- two\ncopy: *list\n",
                    "nested:\n  <<: [*defaults, *more]\n  w: four\n",
                ],
            ),
        ],
    );
}

/// A step's `configMap` values reach the function as the Kptfile writes
/// them (`1.50`, `0o17`, `0x1F`, `007`, `1e3`, `yes`; `~` as ""), in the
/// root package and in a subpackage: the function copies them into a
/// ConfigMap (they were re-typed: `1.5`, `15`, `31`, `7.0`, `1000.0`).
#[test]
fn config_map_text() {
    own_package_holding(
        "config-map-text",
        &[
            (
                "received.yaml",
                &[
                    "  alpha: \"0o17\"\n",
                    "  exponent: \"1e3\"\n",
                    "  hex: \"0x1F\"\n",
                    "  octal: \"007\"\n",
                    "  zeta: \"1.50\"\n",
                ],
            ),
            ("sub/received.yaml", &["  version: \"1.10\"\n"]),
        ],
    );
}

/// The lines of each `  Stderr:` block of a render's progress output, in
/// order. kpt v1.0.0-beta.54 writes each line Go-quoted (`"text"`), and an
/// empty last line for a final line break; newer kpt and we write the lines
/// as they are: `quoted` reads kpt's form back.
fn stderr_blocks(progress: &str, quoted: bool) -> Vec<Vec<String>> {
    let mut blocks: Vec<Vec<String>> = Vec::new();
    let mut inside = false;
    for line in progress.lines() {
        if line == "  Stderr:" {
            blocks.push(Vec::new());
            inside = true;
            continue;
        }
        match (inside, line.strip_prefix("    ")) {
            (true, Some(text)) => {
                let text = if quoted {
                    serde_json::from_str::<String>(text)
                        .unwrap_or_else(|e| panic!("not a quoted line {text:?}: {e}"))
                } else {
                    text.to_string()
                };
                blocks.last_mut().unwrap().push(text);
            }
            _ => inside = false,
        }
    }
    for block in &mut blocks {
        if quoted && block.last().is_some_and(String::is_empty) {
            block.pop();
        }
    }
    blocks
}

/// What passing functions write to stderr is printed under their steps,
/// line for line as kpt prints it (kpt's Go quoting aside: see
/// [`stderr_blocks`]).
#[test]
fn function_stderr() {
    let name = "function-stderr";
    let mut diffs = Vec::new();
    let (kpt, ours, _work) =
        compare_in_place(name, &own_source(name), &substitute_catalog, &mut diffs);
    assert_eq!(
        (kpt.code, ours.code),
        (0, 0),
        "{}\n{}",
        kpt.stderr,
        ours.stderr
    );
    let kpt_blocks = stderr_blocks(&kpt.stderr, true);
    assert_eq!(
        kpt_blocks,
        [
            vec!["reading the package", "  two objects", "done"],
            vec!["checked"]
        ],
        "kpt's Stderr blocks:\n{}",
        kpt.stderr
    );
    assert_eq!(
        stderr_blocks(&ours.stderr, false),
        kpt_blocks,
        "our Stderr blocks differ from kpt's\n--- kpt\n{}\n--- ours\n{}",
        kpt.stderr,
        ours.stderr
    );
    check_against_known(&[name.to_string()], &diffs);
}

/// The sequence style kpt's reader records for each object (the
/// `internal.config.kubernetes.io/seqindent` annotation functions get) is
/// derived per document, as kyaml derives it: a function reporting it
/// reports what it reports under kpt (it was the file's first document's
/// style for every document).
#[test]
fn seqindent_per_document() {
    own_package("seqindent-per-document", 0);
}

/// An anchor or a tag on a key whose value is a block sequence on the
/// next lines (`env: &env` then `- a`, at the key's indentation or deeper;
/// `tagged: !!seq`) reads, and the objects are rendered as kpt renders
/// them, anchors and tags kept.
#[test]
fn anchored_sequences() {
    own_package_holding(
        "anchored-sequences",
        &[
            (
                "compact.yaml",
                &[
                    "  namespace: anchored\n",
                    "  env: &env\n  - a\n",
                    "  tagged: !!seq\n  - c\n",
                ],
            ),
            (
                "wide.yaml",
                &[
                    "  env: &env\n    - a\n",
                    "  tagged: !!seq\n    - c\n",
                    "  again: *env\n",
                ],
            ),
        ],
    );
}

/// D8: a CRLF file keeps CRLF on every line, inserted lines and `---`
/// included (kpt writes LF: listed).
#[test]
fn crlf() {
    own_package_with("crlf", 0, &|pkg, _| {
        let text = std::fs::read_to_string(pkg.join("windows.yaml")).unwrap();
        assert!(text.contains("  namespace: windows\r\n"), "{text:?}");
        assert!(text.contains("\r\n---\r\n"), "{text:?}");
        assert!(
            text.split_inclusive('\n').all(|l| l.ends_with("\r\n")),
            "a line without CR: {text:?}"
        );
        let marked = std::fs::read_to_string(pkg.join("bom.yaml")).unwrap();
        assert!(
            marked.starts_with("\u{feff}# a file saved with a byte-order mark\n"),
            "{marked:?}"
        );
        assert!(
            marked.contains("  name: marked\n  namespace: windows\n"),
            "{marked:?}"
        );
        let unix = std::fs::read_to_string(pkg.join("unix.yaml")).unwrap();
        assert!(!unix.contains('\r'), "{unix:?}");
    });
}

/// D5: a hidden file and a symbolic link to a file inside the package are
/// rendered, as kpt renders them; the link stays a link.
#[test]
fn hidden_links() {
    own_package_with("hidden-links", 0, &|pkg, _| {
        let hidden = std::fs::read_to_string(pkg.join(".hidden.yaml")).unwrap();
        assert!(hidden.contains("namespace: hidden"), "{hidden}");
        let link = pkg.join("link.yaml");
        assert!(
            std::fs::symlink_metadata(&link)
                .unwrap()
                .file_type()
                .is_symlink()
        );
        let target = std::fs::read_to_string(pkg.join("sub/target.yaml")).unwrap();
        assert!(target.contains("namespace: hidden"), "{target}");
    });
}

/// D2: functions get a package's subpackages' objects (depth first, sorted
/// by path) before its own; `report-order` lists what it received as
/// results, and results.yaml is compared item by item with kpt's.
#[test]
fn subpackage_order() {
    own_package_with("subpackage-order", 0, &|_, code| assert_eq!(code, 0));
}

/// Asserts that `pkg` still holds its Kptfile, and `app.yaml` as staged.
fn package_untouched(pkg: &Path, name: &str) {
    assert_eq!(
        std::fs::read(pkg.join("app.yaml")).ok(),
        std::fs::read(own_source(name).join("app.yaml")).ok(),
        "{name}: app.yaml was changed or removed"
    );
    assert!(
        pkg.join("Kptfile").is_file(),
        "{name}: the Kptfile was removed"
    );
}

/// A function whose output ResourceList has no `items` key fails its step
/// and nothing is written, as with kpt (which reads the whole list as one
/// object without `metadata.name`).
#[test]
fn output_without_items() {
    own_package_with("output-items-absent", 1, &|pkg, code| {
        assert_eq!(code, 1, "an output without items must fail the render");
        package_untouched(pkg, "output-items-absent");
    });
}

/// `items: null` is refused too (kpt takes it as an empty list and deletes
/// every file of the package, Kptfile included: listed).
#[test]
fn output_null_items() {
    own_package_with("output-items-null", 0, &|pkg, code| {
        assert_eq!(code, 1, "an output with items: null must fail the render");
        package_untouched(pkg, "output-items-null");
    });
}

/// `items: []` removes every object, the Kptfile included, as with kpt.
#[test]
fn output_empty_items() {
    own_package_with("output-items-empty", 0, &|pkg, code| {
        assert_eq!(code, 0);
        assert!(!pkg.join("app.yaml").exists());
    });
}

/// Results in older SDKs' spellings (`resourceRef.metadata`,
/// `field.suggestedValue`) reach results.yaml and the Kptfile status
/// migrated, as kpt migrates them.
#[test]
fn legacy_results() {
    own_package_with("legacy-results", 0, &|pkg, _| {
        let kptfile = std::fs::read_to_string(pkg.join("Kptfile")).unwrap();
        assert!(kptfile.contains("proposedValue: safe"), "{kptfile}");
        assert!(!kptfile.contains("suggestedValue"), "{kptfile}");
        assert!(
            !kptfile.contains("metadata:\n            name: settings"),
            "{kptfile}"
        );
    });
}

/// The packages that run the set-namespace binary, again with our builtin
/// `set-namespace` in its place (kpt still runs the binary).
#[test]
fn builtin_set_namespace_matches_the_binary_under_kpt() {
    let mut diffs = Vec::new();
    let mut names = Vec::new();
    for (package, expected_exit) in [
        ("subpackages", 0),
        ("selectors", 0),
        ("validators-pass", 0),
        ("validator-fail", 1),
        ("mutator-fail", 1),
        ("generator", 0),
        ("multi-doc-comments", 0),
        ("non-krm", 0),
    ] {
        let (kpt_code, _) = compare_builtin_in_place(package, &own_source(package), &mut diffs);
        assert_eq!(kpt_code, expected_exit, "kpt's exit status for {package}");
        names.push(format!("{package}@builtin"));
    }
    check_against_known(&names, &diffs);
}

/// `-o stdout`, `-o unwrap` and `-o DIR` on a package with subpackages, one with
/// comments and generated/deleted resources, one with non-KRM files (which
/// `-o DIR` leaves out, as kpt does), and two that fail (a function's
/// failure, a function output without `items`).
#[test]
fn out_of_place_outputs() {
    let mut diffs = Vec::new();
    let mut names = Vec::new();
    for (package, expected_exit) in [
        ("non-krm", 0),
        ("subpackages", 0),
        ("multi-doc-comments", 0),
        ("generator", 0),
        ("mutator-fail", 1),
        ("output-items-absent", 1),
        ("doc-markers", 0),
        ("crlf", 0),
        ("hidden-links", 0),
    ] {
        for mode in ["stdout", "unwrap"] {
            let (kpt_code, _) = compare_out_of_place(
                package,
                &own_source(package),
                mode,
                &substitute_catalog,
                &mut diffs,
            );
            assert_eq!(
                kpt_code, expected_exit,
                "kpt's exit status for {package} -o {mode}"
            );
            names.push(format!("{package}@{mode}"));
        }
        let (kpt_code, _) = compare_output_dir(package, &own_source(package), &mut diffs);
        assert_eq!(
            kpt_code, expected_exit,
            "kpt's exit status for {package} -o DIR"
        );
        names.push(format!("{package}@dir"));
    }
    check_against_known(&names, &diffs);
}

/// The catalog's example and test packages whose Kptfile pipelines use
/// only installed functions (`image:` rewritten to `exec:`).
fn catalog_cases(root: &Path) -> Vec<(String, PathBuf)> {
    let mut dirs = Vec::new();
    for top in ["examples", "tests"] {
        let Ok(entries) = std::fs::read_dir(root.join(top)) else {
            continue;
        };
        for e in entries.flatten() {
            let p = e.path();
            if p.join("Kptfile").is_file() {
                dirs.push(p);
            } else if p.is_dir() {
                for sub in std::fs::read_dir(&p).unwrap().flatten() {
                    if sub.path().join("Kptfile").is_file() {
                        dirs.push(sub.path());
                    }
                }
            }
        }
    }
    let mut cases: Vec<(String, PathBuf)> = dirs
        .into_iter()
        .filter(|d| {
            let images = kptfile_images(&std::fs::read_to_string(d.join("Kptfile")).unwrap());
            !images.is_empty() && images.iter().all(|i| INSTALLED.contains(&function_name(i)))
        })
        .map(|d| (d.strip_prefix(root).unwrap().display().to_string(), d))
        .collect();
    cases.sort();
    cases
}

/// The exit code a catalog case expects (`.expected/config.yaml`, default 0).
fn catalog_expected_exit(case: &Path) -> i32 {
    std::fs::read(case.join(".expected/config.yaml"))
        .ok()
        .and_then(|b| codec::from_yaml_slice::<Value>(&b).ok())
        .and_then(|v| v["exitCode"].as_i64())
        .unwrap_or(0) as i32
}

#[test]
#[ignore = "needs the catalog's examples/ and tests/ (KRM_FN_CATALOG_FIXTURES); scripts/test.sh runs it when set"]
fn catalog_packages() {
    let root = std::env::var_os("KRM_FN_CATALOG_FIXTURES")
        .expect("KRM_FN_CATALOG_FIXTURES is not set: point it at a copy of the catalog's examples/ and tests/");
    let cases = catalog_cases(Path::new(&root));
    assert!(
        cases.len() >= 15,
        "expected the catalog's packages for {INSTALLED:?}, found {cases:?}"
    );
    let mut diffs = Vec::new();
    for (name, dir) in &cases {
        let (kpt, _, _work) = compare_in_place(name, dir, &image_to_exec, &mut diffs);
        let kpt_code = kpt.code;
        assert_eq!(
            kpt_code,
            catalog_expected_exit(dir),
            "kpt's exit status for {name} is not the one the case expects"
        );
    }
    let names: Vec<String> = cases.into_iter().map(|(n, _)| n).collect();
    println!("compared {} catalog packages: {names:?}", names.len());
    check_against_known(&names, &diffs);
}

#[test]
fn comment_extraction() {
    let text = "# head\na: 'x # not a comment' # inline\nb: \"y#z\"\nc: [1, 2] # flow\n  # indented\nd: e#f\n";
    let found: Vec<(String, usize)> = comments(text).into_iter().collect();
    assert_eq!(
        found,
        [
            ("# flow".to_string(), 1),
            ("# head".to_string(), 1),
            ("# indented".to_string(), 1),
            ("# inline".to_string(), 1),
        ]
    );
}

/// kpt's own `fn render` end-to-end cases (from the kpt module that
/// `scripts/fetch-kpt-fixtures.sh` downloads, `KRM_FN_KPT_MODULE`) whose
/// functions are all installed (or that have no functions), rendered in
/// place; cases that need a setup script or run local scripts are left out.
/// Returns (name, directory, expected exit code when the case renders in
/// place with no extra arguments).
fn kpt_e2e_cases(root: &Path) -> Vec<(String, PathBuf, Option<i32>)> {
    let mut cases = Vec::new();
    for e in std::fs::read_dir(root).unwrap().flatten() {
        let dir = e.path();
        let expected = dir.join(".expected");
        if !expected.is_dir() || expected.join("setup.sh").exists() {
            continue;
        }
        let mut kptfiles = Vec::new();
        let mut stack = vec![dir.clone()];
        while let Some(d) = stack.pop() {
            for f in std::fs::read_dir(&d).unwrap().flatten() {
                let p = f.path();
                if f.file_name() == ".expected" {
                    continue;
                }
                if p.is_symlink() {
                    kptfiles.push("symlink".to_string());
                } else if p.is_dir() {
                    stack.push(p);
                } else if f.file_name() == "Kptfile" {
                    kptfiles.push(std::fs::read_to_string(&p).unwrap());
                }
            }
        }
        let runnable = kptfiles.iter().all(|k| {
            k != "symlink"
                && !k
                    .lines()
                    .any(|l| l.trim_start().trim_start_matches("- ").starts_with("exec:"))
                && kptfile_images(k).iter().all(|i| {
                    INSTALLED.contains(&function_name(i.split_whitespace().next().unwrap_or("")))
                })
        });
        if !runnable || kptfiles.is_empty() {
            continue;
        }
        let exit = if expected.join("exec.sh").exists() {
            None
        } else {
            Some(catalog_expected_exit(&dir))
        };
        let name = format!("kpt-e2e/{}", e.file_name().to_string_lossy());
        cases.push((name, dir, exit));
    }
    cases.sort();
    cases
}

#[test]
fn kpt_e2e_packages() {
    let module = std::env::var_os("KRM_FN_KPT_MODULE").unwrap_or_else(|| {
        panic!(
            "KRM_FN_KPT_MODULE is not set: run the tests through scripts/test.sh, or export \
             KRM_FN_KPT_MODULE=\"$(scripts/fetch-kpt-fixtures.sh)\""
        )
    });
    let cases = kpt_e2e_cases(&Path::new(&module).join("e2e/testdata/fn-render"));
    assert!(
        cases.len() >= 20,
        "expected kpt's fn-render cases for {INSTALLED:?}, found {cases:?}"
    );
    let mut diffs = Vec::new();
    for (name, dir, exit) in &cases {
        let (kpt, _, _work) = compare_in_place(name, dir, &image_to_exec, &mut diffs);
        let kpt_code = kpt.code;
        if let Some(exit) = exit {
            assert_eq!(
                kpt_code, *exit,
                "kpt's exit status for {name} is not the one the case expects"
            );
        }
    }
    let names: Vec<String> = cases.into_iter().map(|(n, _, _)| n).collect();
    println!("compared {} kpt e2e packages: {names:?}", names.len());
    check_against_known(&names, &diffs);
}
