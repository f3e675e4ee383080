//! The README and the book (`docs/`) are executable: their marked shell
//! blocks are run, their expected output compared, the flags they document
//! checked against the binaries' own command lines, and the book built with
//! every link checked, so neither can drift from the behaviour.
//!
//! The documents: `README.md` and each page of the book, in the order of
//! `docs/src/SUMMARY.md` (every Markdown file under `docs/src` must be
//! listed there). Marking is the same in all of them (HTML comments,
//! invisible on GitHub and in the book), on the line before a fence:
//!
//! - `<!-- readme-test: NAME -->` before a ```` ```sh ```` block: run it
//!   with bash (`-e -o pipefail`); it must exit 0.
//! - `<!-- readme-test: NAME background -->`: start it and keep it running
//!   (a server); the next blocks run once it prints `listening on`; it is
//!   stopped (SIGTERM to its process group) at the end.
//! - `<!-- readme-test: NAME expect-stdout -->` before any block: the stdout
//!   of the last block run must be this text (trailing blanks aside).
//! - `<!-- flags: COMMAND -->` inside a section (heading to next heading):
//!   the section documents COMMAND's flags (see `every_flag_is_documented`:
//!   each flag of COMMAND's `--help` must appear there, and every flag in a
//!   `krm-fn-runner`/`wrapper-server` command line of any code block, and in
//!   the prose of the flag sections, must exist).
//!
//! Only marked blocks run; unmarked blocks (the release build, scripts that
//! build or test the whole project) are not. Each document's blocks run in
//! its order, sharing one scratch directory of their own that stands for the
//! checkout: a copy of `examples/` and a link to `scripts/` (a page's
//! commands never rely on another page's; background blocks end with their
//! page). `krm-fn-runner` and `wrapper-server`
//! come from cargo's target directory, first on `PATH` (what the Quick
//! start's build provides). The catalog functions come from
//! `scripts/install-catalog-functions.sh`, as the README says. One
//! substitution is made: Porch's port 9445 becomes a free port, so the
//! test never collides with a runner already on this machine.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use common::free_port;

use krm_fn_testbed::common;

const README: &str = include_str!("../../README.md");

/// A document whose marked blocks run and whose flag sections count.
struct Doc {
    /// Its path from the repository root (`README.md`, `docs/src/…`).
    path: String,
    text: String,
}

/// The book's pages, in `SUMMARY.md` order, as paths from the repository
/// root; panics if a Markdown file under `docs/src` is not listed (mdBook
/// would leave it out of the book, and so this test out of its runs).
fn book_pages() -> Vec<String> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let summary = std::fs::read_to_string(root.join("docs/src/SUMMARY.md"))
        .expect("docs/src/SUMMARY.md (the book's table of contents)");
    let pages: Vec<String> = summary_links(&summary)
        .into_iter()
        .map(|p| format!("docs/src/{p}"))
        .collect();
    let mut files = Vec::new();
    let mut dirs = vec![root.join("docs/src")];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap().map(Result::unwrap) {
            let path = entry.path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "md") {
                let rel = path.strip_prefix(root).unwrap().display().to_string();
                if rel != "docs/src/SUMMARY.md" {
                    files.push(rel);
                }
            }
        }
    }
    let unlisted: Vec<&String> = files.iter().filter(|f| !pages.contains(f)).collect();
    assert!(
        unlisted.is_empty(),
        "pages under docs/src that docs/src/SUMMARY.md does not list (the book would leave them out): {unlisted:?}"
    );
    pages
}

/// The page paths `SUMMARY.md` links to (`[Title](path.md)`), in order;
/// draft chapters (`[Title]()`) have none.
fn summary_links(summary: &str) -> Vec<String> {
    let mut out = Vec::new();
    for line in summary.lines() {
        let Some(start) = line.find("](") else {
            continue;
        };
        let rest = &line[start + 2..];
        let Some(end) = rest.find(')') else { continue };
        let target = rest[..end].trim();
        if !target.is_empty() {
            out.push(target.to_string());
        }
    }
    out
}

/// The README and the book's pages.
fn documents() -> Vec<Doc> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut docs = vec![Doc {
        path: "README.md".into(),
        text: README.to_string(),
    }];
    for page in book_pages() {
        let text = std::fs::read_to_string(root.join(&page))
            .unwrap_or_else(|e| panic!("{page} (listed in docs/src/SUMMARY.md): {e}"));
        docs.push(Doc { path: page, text });
    }
    docs
}

/// What a marked block asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Mode {
    Run,
    Background,
    ExpectStdout,
}

#[derive(Debug, Clone)]
struct Block {
    name: String,
    mode: Mode,
    /// 1-based line of the marker.
    line: usize,
    lang: String,
    text: String,
}

/// The marked blocks of `readme`, in order.
fn marked_blocks(readme: &str) -> Vec<Block> {
    let lines: Vec<&str> = readme.lines().collect();
    let mut blocks = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i].trim();
        if let Some(marker) = line
            .strip_prefix("<!-- readme-test:")
            .and_then(|m| m.strip_suffix("-->"))
        {
            let mut words = marker.split_whitespace();
            let name = words.next().expect("readme-test marker without a name");
            let mode = match words.next() {
                None => Mode::Run,
                Some("background") => Mode::Background,
                Some("expect-stdout") => Mode::ExpectStdout,
                Some(other) => panic!("line {}: unknown readme-test mode {other:?}", i + 1),
            };
            let fence = lines.get(i + 1).map(|l| l.trim_start()).unwrap_or("");
            assert!(
                fence.starts_with("```"),
                "line {}: a readme-test marker must be followed by a fenced block",
                i + 1
            );
            let lang = fence.trim_start_matches('`').trim().to_string();
            let mut text = String::new();
            let mut j = i + 2;
            while j < lines.len() && !lines[j].trim_start().starts_with("```") {
                text.push_str(lines[j]);
                text.push('\n');
                j += 1;
            }
            assert!(j < lines.len(), "line {}: unclosed block", i + 1);
            if mode != Mode::ExpectStdout {
                assert!(
                    lang == "sh" || lang == "bash",
                    "line {}: only sh blocks can be run, not {lang:?}",
                    i + 1
                );
            }
            blocks.push(Block {
                name: name.to_string(),
                mode,
                line: i + 1,
                lang,
                text,
            });
            i = j + 1;
        } else {
            i += 1;
        }
    }
    blocks
}

/// A document's sections (heading line to the next heading, outside code
/// blocks) as (heading, text).
fn sections(readme: &str) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = vec![(String::new(), String::new())];
    let mut in_code = false;
    for line in readme.lines() {
        if line.trim_start().starts_with("```") {
            in_code = !in_code;
        }
        if !in_code && line.starts_with('#') {
            out.push((line.to_string(), String::new()));
        }
        let last = out.last_mut().unwrap();
        last.1.push_str(line);
        last.1.push('\n');
    }
    out
}

/// A background block's process group, stopped on drop.
struct Background {
    name: String,
    child: Child,
}

impl Drop for Background {
    fn drop(&mut self) {
        let group = nix::unistd::Pid::from_raw(-(self.child.id() as i32));
        let _ = nix::sys::signal::kill(group, nix::sys::signal::Signal::SIGTERM);
        for _ in 0..100 {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = nix::sys::signal::kill(group, nix::sys::signal::Signal::SIGKILL);
        let _ = self.child.wait();
        eprintln!("{} needed SIGKILL", self.name);
    }
}

/// The scratch directory standing for the checkout.
fn checkout_copy() -> tempfile::TempDir {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir = tempfile::tempdir().unwrap();
    let status = Command::new("cp")
        .arg("-a")
        .arg(repo.join("examples"))
        .arg(dir.path())
        .status()
        .unwrap();
    assert!(status.success());
    std::os::unix::fs::symlink(repo.join("scripts"), dir.path().join("scripts")).unwrap();
    dir
}

fn shell(text: &str, cwd: &Path, path: &str) -> Command {
    let mut cmd = Command::new("bash");
    cmd.args(["-e", "-o", "pipefail", "-c", text])
        .current_dir(cwd)
        .env("PATH", path)
        // The README's paths are the defaults; a custom cache is not one.
        .env_remove("KRM_FN_CACHE")
        .env_remove("RUST_LOG")
        .stdin(Stdio::null());
    cmd
}

/// Blocks that must stay marked for testing, by document: the commands
/// each kind of user starts with.
const REQUIRED_BLOCKS: &[(&str, &str)] = &[
    ("README.md", "quick-start"),
    ("README.md", "using-it-functions"),
    ("README.md", "using-it-serve"),
    ("README.md", "using-it-eval"),
    ("README.md", "rendering"),
    ("README.md", "simulator"),
    ("docs/src/getting-started.md", "quick-start"),
    ("docs/src/getting-started.md", "using-it-functions"),
    ("docs/src/getting-started.md", "using-it-serve"),
    ("docs/src/getting-started.md", "using-it-eval"),
    ("docs/src/operators/flags.md", "completions-and-man"),
    ("docs/src/rendering/index.md", "rendering"),
    ("docs/src/operators/admission.md", "admission-eval"),
    ("docs/src/operators/warm-pools.md", "warm-pool-simulator"),
    ("docs/src/operators/wrapper-server.md", "wrapper-serve"),
    ("docs/src/operators/wrapper-server.md", "wrapper-eval"),
    ("docs/src/simulator.md", "simulator"),
    ("docs/src/simulator.md", "simulator-faults"),
    ("docs/src/operators/replicas.md", "replica-model"),
];

#[test]
fn readme_commands_run() {
    let docs = documents();
    run_document(&docs[0]);
}

/// Every page of the book runs its marked blocks as the README does, each
/// page in a scratch checkout of its own.
#[test]
fn book_commands_run() {
    for doc in documents().iter().skip(1) {
        run_document(doc);
    }
}

/// Every block of `REQUIRED_BLOCKS` is marked in its document.
#[test]
fn required_blocks_are_marked() {
    let docs = documents();
    for (path, name) in REQUIRED_BLOCKS {
        let doc = docs
            .iter()
            .find(|d| d.path == *path)
            .unwrap_or_else(|| panic!("{path} is not among the documents (README, book pages)"));
        assert!(
            marked_blocks(&doc.text).iter().any(|b| b.name == *name),
            "the {path} block {name:?} is no longer marked for testing"
        );
    }
}

/// The book builds without warnings and every relative link and `#anchor`
/// in it, the README and the changelog resolves (`scripts/check-book.sh`:
/// mdBook, then lychee offline).
#[test]
fn book_builds_and_every_link_resolves() {
    let out = tempfile::tempdir().unwrap();
    let status = Command::new("bash")
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/check-book.sh"))
        .arg(out.path())
        .stdin(Stdio::null())
        .status()
        .expect("run scripts/check-book.sh");
    assert!(
        status.success(),
        "scripts/check-book.sh failed ({status}): the book does not build cleanly or a link is broken (output above)"
    );
    assert!(out.path().join("index.html").is_file());
}

/// The plot the simulator page shows is the one its first block draws:
/// that block, run again, writes the same SVG byte for byte (`simulate` is
/// seeded). When the plot changes on purpose, copy the new `day.svg` over
/// `docs/src/images/simulator-day.svg`.
#[test]
fn the_simulator_page_shows_the_plot_simulate_draws() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let page = std::fs::read_to_string(root.join("docs/src/simulator.md")).unwrap();
    assert!(
        page.contains("](images/simulator-day.svg)"),
        "docs/src/simulator.md no longer shows images/simulator-day.svg"
    );
    let block = marked_blocks(&page)
        .into_iter()
        .find(|b| b.name == "simulator" && b.mode == Mode::Run)
        .expect("the simulator page's `simulator` block");
    assert!(block.text.contains("--plot day.svg"), "{}", block.text);
    let work = tempfile::tempdir().unwrap();
    let out = shell(&block.text, work.path(), &binaries_path())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let drawn = std::fs::read(work.path().join("day.svg")).unwrap();
    let shown = std::fs::read(root.join("docs/src/images/simulator-day.svg")).unwrap();
    assert!(
        drawn == shown,
        "simulate draws another plot than docs/src/images/simulator-day.svg shows ({} against {} bytes): \
         copy the new one over it if the change is meant",
        drawn.len(),
        shown.len()
    );
}

/// The README's library example is the book's five-line example, which the
/// doc tests compile (`src/lib.rs` includes `docs/src/library.md` under
/// `cfg(doctest)`): each line of the README's Rust block is a line of that
/// block.
#[test]
fn the_readme_library_example_is_the_compiled_one() {
    let rust_blocks = |text: &str| -> Vec<Vec<String>> {
        let mut blocks = Vec::new();
        let mut current: Option<Vec<String>> = None;
        for line in text.lines() {
            let fence = line.trim_start();
            match &mut current {
                None if fence.starts_with("```rust") => current = Some(Vec::new()),
                Some(_) if fence.starts_with("```") => blocks.push(current.take().unwrap()),
                Some(lines) => lines.push(line.to_string()),
                None => {}
            }
        }
        blocks
    };
    let readme = rust_blocks(README);
    assert_eq!(readme.len(), 1, "the README has one Rust example");
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let book = rust_blocks(&std::fs::read_to_string(root.join("docs/src/library.md")).unwrap());
    let compiled = book
        .iter()
        .find(|b| b.iter().any(|l| l.contains("fn five_lines")))
        .expect("docs/src/library.md: the five-line example (`fn five_lines`)");
    let shown: Vec<&String> = compiled.iter().filter(|l| !l.starts_with("# ")).collect();
    let wanted: Vec<&String> = readme[0].iter().collect();
    assert_eq!(
        wanted, shown,
        "the README's library example differs from the compiled one in docs/src/library.md"
    );
}

/// `PATH` with this build's binaries first.
fn binaries_path() -> String {
    let bin_dir = Path::new(env!("CARGO_BIN_EXE_krm-fn-runner"))
        .parent()
        .unwrap()
        .to_path_buf();
    format!(
        "{}:{}",
        bin_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    )
}

/// Runs `doc`'s marked blocks in order in a scratch checkout of its own.
fn run_document(doc: &Doc) {
    let blocks = marked_blocks(&doc.text);
    if blocks.is_empty() {
        return;
    }
    let work = checkout_copy();
    let path = binaries_path();
    let port = free_port().to_string();
    let mut background: Vec<Background> = Vec::new();
    let mut last_stdout: Option<(String, String)> = None;
    for block in &blocks {
        let text = block.text.replace("9445", &port);
        let what = format!(
            "{} block {:?} (line {}, {})",
            doc.path, block.name, block.line, block.lang
        );
        match block.mode {
            Mode::ExpectStdout => {
                let (from, stdout) = last_stdout
                    .as_ref()
                    .unwrap_or_else(|| panic!("{what}: no block ran before it"));
                let trim = |s: &str| {
                    s.lines()
                        .map(str::trim_end)
                        .collect::<Vec<_>>()
                        .join("\n")
                        .trim_end()
                        .to_string()
                };
                assert_eq!(
                    trim(stdout),
                    trim(&block.text),
                    "{what}: the document shows other output than {from:?} prints"
                );
            }
            Mode::Run => {
                eprintln!("running {what}");
                let out = shell(&text, work.path(), &path)
                    .output()
                    .unwrap_or_else(|e| panic!("{what}: cannot run bash: {e}"));
                let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
                let stderr = String::from_utf8_lossy(&out.stderr);
                assert!(
                    out.status.success(),
                    "{what} failed ({}):\n--- block\n{text}--- stdout\n{stdout}\n--- stderr\n{stderr}",
                    out.status
                );
                last_stdout = Some((block.name.clone(), stdout));
            }
            Mode::Background => {
                eprintln!("starting {what}");
                let mut child = shell(&text, work.path(), &path)
                    .stdout(Stdio::null())
                    .stderr(Stdio::piped())
                    .process_group(0)
                    .spawn()
                    .unwrap_or_else(|e| panic!("{what}: cannot run bash: {e}"));
                let stderr = child.stderr.take().unwrap();
                let (tx, rx) = mpsc::channel();
                std::thread::spawn(move || {
                    for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                        let _ = tx.send(line);
                    }
                });
                background.push(Background {
                    name: block.name.clone(),
                    child,
                });
                let mut log = Vec::new();
                loop {
                    match rx.recv_timeout(Duration::from_secs(60)) {
                        Ok(line) if line.contains("listening on") => break,
                        Ok(line) => log.push(line),
                        Err(_) => panic!("{what} did not start listening:\n{}", log.join("\n")),
                    }
                }
            }
        }
    }
    drop(background);
}

/// The flags of a command as `--help` lists them (hidden ones excluded):
/// long names and visible aliases, the environment variables they read,
/// and the positional value names.
fn documented_surface(cmd: &clap::Command) -> Vec<String> {
    let mut out = Vec::new();
    for arg in cmd.get_arguments() {
        if arg.is_hide_set() {
            continue;
        }
        if let Some(long) = arg.get_long() {
            if long == "help" || long == "version" {
                continue;
            }
            out.push(format!("--{long}"));
            for alias in arg.get_visible_aliases().unwrap_or_default() {
                out.push(format!("--{alias}"));
            }
        } else if arg.is_positional() {
            for name in arg.get_value_names().unwrap_or_default() {
                out.push(name.to_string());
            }
        }
        if let Some(env) = arg.get_env() {
            out.push(env.to_string_lossy().into_owned());
        }
    }
    out
}

/// `--name` as a whole token of `text`.
fn mentions(text: &str, token: &str) -> bool {
    text.match_indices(token).any(|(i, _)| {
        let next = text[i + token.len()..].chars().next();
        let prev = text[..i].chars().next_back();
        !next.is_some_and(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
            && !prev.is_some_and(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
    })
}

/// Flags of other tools that the flag sections mention in prose.
const FOREIGN_FLAGS: &[(&str, &str)] = &[("--flag", "Go's flag syntax, as an example")];

/// The `--name` tokens of `text` (`--x=1` gives `--x`; a bare `--` none).
fn flag_tokens(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for (i, _) in text.match_indices("--") {
        let token: String = text[i + 2..]
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '-')
            .collect();
        let prev = text[..i].chars().next_back();
        if token.starts_with(|c: char| c.is_ascii_lowercase())
            && !prev.is_some_and(|c| c.is_ascii_alphanumeric() || c == '-')
        {
            out.push(format!("--{token}"));
        }
    }
    out
}

/// The lines of a document's code blocks that run one of our binaries,
/// as (command, flags): `krm-fn-runner SUB …` gives `SUB`,
/// `wrapper-server …` gives `wrapper-server`. Continuation lines are
/// joined; pipelines and lists are split; leading `NAME=value`
/// assignments skipped; a bare `--` ends the flags.
fn command_lines(readme: &str) -> Vec<(String, Vec<String>, String)> {
    let mut out = Vec::new();
    let mut in_code = false;
    // Blocks in a data or program language (a Cargo.toml dependency line,
    // YAML, Rust) hold no command lines.
    let mut data = false;
    let mut logical = String::new();
    for line in readme.lines() {
        if let Some(fence) = line.trim_start().strip_prefix("```") {
            in_code = !in_code;
            let lang = fence.trim().split(',').next().unwrap_or_default();
            data = in_code && ["toml", "yaml", "yml", "json", "rust"].contains(&lang);
            continue;
        }
        if !in_code || data {
            continue;
        }
        logical.push_str(line.trim_end().trim_end_matches('\\'));
        logical.push(' ');
        if line.trim_end().ends_with('\\') {
            continue;
        }
        let text = std::mem::take(&mut logical);
        let text = text.split(" #").next().unwrap_or_default();
        for segment in text
            .split(" | ")
            .flat_map(|s| s.split("&&"))
            .flat_map(|s| s.split(';'))
        {
            let words: Vec<&str> = segment
                .split_whitespace()
                .skip_while(|w| w.contains('=') && !w.starts_with('-'))
                .collect();
            let (command, rest) = match words.as_slice() {
                ["krm-fn-runner", sub, rest @ ..] => (sub.to_string(), rest),
                ["wrapper-server", rest @ ..] => ("wrapper-server".to_string(), rest),
                _ => continue,
            };
            let flags = rest
                .iter()
                .take_while(|w| **w != "--")
                .flat_map(|w| flag_tokens(w))
                .collect();
            out.push((command, flags, segment.trim().to_string()));
        }
    }
    out
}

/// Each command's `--help` flags appear in the sections of the README and
/// the book marked `<!-- flags: COMMAND -->`; every flag in their command lines of
/// our binaries is a flag of that command; every `--flag` in the prose of
/// the marked sections is a flag of one of the commands (or listed in
/// `FOREIGN_FLAGS`). Flags of other tools elsewhere (cargo, kubectl) are
/// not ours to check.
#[test]
fn every_flag_is_documented() {
    let [cli, wrapper] = krm_fn_runner::bin::commands();
    let mut commands: BTreeMap<String, clap::Command> = cli
        .get_subcommands()
        .map(|c| (c.get_name().to_string(), c.clone()))
        .collect();
    commands.insert("wrapper-server".into(), wrapper);
    // Every command has these two; they need no documentation.
    let builtin = ["--help".to_string(), "--version".to_string()];
    let surface: BTreeMap<&str, Vec<String>> = commands
        .iter()
        .map(|(name, cmd)| (name.as_str(), documented_surface(cmd)))
        .collect();
    let docs = documents();
    let sections: Vec<(String, String)> = docs.iter().flat_map(|d| sections(&d.text)).collect();
    let mut missing = Vec::new();
    let mut marked_prose = String::new();
    for (name, items) in &surface {
        let marker = format!("<!-- flags: {name} -->");
        let text: String = sections
            .iter()
            .filter(|(_, body)| body.contains(&marker))
            .map(|(_, body)| body.as_str())
            .collect();
        assert!(
            !text.is_empty(),
            "no section of the README or the book is marked {marker}: add the marker to the section documenting `{name}`"
        );
        for item in items {
            if !mentions(&text, item) {
                missing.push(format!("{name} {item}"));
            }
        }
        let mut in_code = false;
        for line in text.lines() {
            if line.trim_start().starts_with("```") {
                in_code = !in_code;
            } else if !in_code {
                marked_prose.push_str(line);
                marked_prose.push('\n');
            }
        }
    }
    assert!(
        missing.is_empty(),
        "flags missing from the sections marked <!-- flags: COMMAND --> (README and book): {missing:?}"
    );
    let mut wrong = Vec::new();
    for (command, flags, line) in docs.iter().flat_map(|d| command_lines(&d.text)) {
        let Some(known) = surface.get(command.as_str()) else {
            wrong.push(format!("{line:?}: no command {command:?}"));
            continue;
        };
        for flag in flags {
            if !known.contains(&flag) && !builtin.contains(&flag) {
                wrong.push(format!("{line:?}: {command} has no {flag}"));
            }
        }
    }
    let all: BTreeSet<&String> = surface.values().flatten().chain(&builtin).collect();
    for flag in flag_tokens(&marked_prose) {
        if !all.contains(&flag) && !FOREIGN_FLAGS.iter().any(|(f, _)| *f == flag) {
            wrong.push(format!("{flag} in a flag section is no flag of ours"));
        }
    }
    wrong.sort();
    wrong.dedup();
    assert!(
        wrong.is_empty(),
        "the README or the book names flags that do not exist: {wrong:#?}"
    );
}

/// The harness's own parsing, on a small document.
#[test]
fn markers_are_read_as_documented() {
    let doc = "# A\n<!-- flags: serve -->\n<!-- readme-test: one -->\n```sh\necho hi\n```\n\n```sh\n# not a heading\nnot run\n```\n<!-- readme-test: one expect-stdout -->\n```text\nhi\n```\n## B\ntext --port\n";
    let blocks = marked_blocks(doc);
    assert_eq!(blocks.len(), 2);
    assert_eq!(
        (blocks[0].mode.clone(), blocks[0].text.as_str()),
        (Mode::Run, "echo hi\n")
    );
    assert_eq!(blocks[1].mode, Mode::ExpectStdout);
    let s = sections(doc);
    assert_eq!(s.len(), 3, "{s:?}");
    assert!(s[1].1.contains("<!-- flags: serve -->") && s[1].1.contains("# not a heading"));
    assert!(mentions(&s[2].1, "--port"));
    let lines = command_lines(
        "```sh\nPATH=x krm-fn-runner render p --allow-exec \\\n    -o d | cat && wrapper-server --port=1 -- f --x\nkubectl apply --dry-run\n```\n",
    );
    assert_eq!(lines.len(), 2, "{lines:?}");
    assert!(command_lines("```toml\nkrm-fn-runner = { version = \"0.1\" }\n```\n").is_empty());
    assert_eq!(
        (lines[0].0.as_str(), lines[0].1.clone()),
        ("render", vec!["--allow-exec".to_string()])
    );
    assert_eq!(
        (lines[1].0.as_str(), lines[1].1.clone()),
        ("wrapper-server", vec!["--port".to_string()])
    );
    assert!(!mentions("--portal", "--port") && !mentions("x--port", "--port"));
    assert_eq!(
        summary_links(
            "# Summary\n\n[Intro](introduction.md)\n\n- [Ops](operators/index.md)\n  - [Flags](operators/flags.md)\n- [Later]()\n"
        ),
        [
            "introduction.md",
            "operators/index.md",
            "operators/flags.md"
        ]
    );
}
