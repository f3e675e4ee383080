//! Package helpers for render tests: read a package directory into a flat
//! list of objects with kpt's path/index annotations, write rendered objects
//! back (grouped by file, ordered by index, emptied files pruned), and
//! compare a directory with a fixture's expectation (`.expected/diff.patch`
//! applied with `git apply` to a copy), as parsed YAML.
//!
//! Reading goes through the package I/O adapter; the writer here is the
//! plain one the `fn eval`-style harnesses use (no comments kept), so
//! comparisons are on parsed YAML.

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

use krm_fn_runner::adapters::package::PackageDir;
use krm_fn_runner::domain::codec;
use krm_fn_runner::domain::render::annotations as ann;
use serde_json::Value;

/// Files under `dir`, sorted, skipping `.expected` and hidden entries.
pub fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let p = e.path();
            if e.file_name().to_string_lossy().starts_with('.') {
                continue;
            }
            if p.is_dir() {
                stack.push(p);
            } else {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

/// kpt's `MatchAllKRM` (the package I/O adapter's rule) on a file path.
pub fn is_krm_file(p: &Path) -> bool {
    p.file_name()
        .is_some_and(|n| krm_fn_runner::adapters::package::is_krm_file(&n.to_string_lossy()))
}

/// Package-relative path → parsed documents, for every KRM file.
pub fn read_tree(dir: &Path) -> BTreeMap<String, Vec<Value>> {
    walk(dir)
        .into_iter()
        .filter(|p| is_krm_file(p))
        .map(|p| {
            let rel = p.strip_prefix(dir).unwrap().display().to_string();
            let docs = codec::from_yaml_documents::<Value>(&std::fs::read(&p).unwrap())
                .unwrap_or_default();
            (rel, docs.into_iter().filter(|d| !d.is_null()).collect())
        })
        .collect()
}

/// Files that are not valid YAML (package-relative paths).
pub fn unreadable_files(dir: &Path) -> Vec<String> {
    walk(dir)
        .into_iter()
        .filter(|p| is_krm_file(p))
        .filter(|p| codec::from_yaml_documents::<Value>(&std::fs::read(p).unwrap()).is_err())
        .map(|p| p.strip_prefix(dir).unwrap().display().to_string())
        .collect()
}

/// Every object under `dir` (subpackages included), annotated with its
/// root-relative path and index in both annotation forms, read by the
/// package I/O adapter (`.krmignore`, hidden files and symlinks honoured);
/// the directory need not be a package.
pub fn read_items(dir: &Path) -> Vec<Value> {
    PackageDir::read_objects(dir)
        .unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()))
        .items()
        .to_vec()
}

/// Writes rendered `items` (root-relative paths) into `dir`: one file per
/// path, documents ordered by index, reader annotations removed; files that
/// held input objects (`before`) and hold none now are deleted.
pub fn write_items(dir: &Path, before: &[Value], items: &[Value]) {
    let mut files: BTreeMap<String, Vec<(i64, Value)>> = BTreeMap::new();
    for item in items {
        let path = ann::path(item)
            .expect("rendered objects have a path")
            .into_owned();
        assert!(
            !path.starts_with('/') && !path.split('/').any(|s| s == ".."),
            "rendered path {path:?} escapes the package"
        );
        let index = ann::index(item).and_then(|i| i.parse().ok()).unwrap_or(-1);
        let mut clean = item.clone();
        ann::remove_all(
            &mut clean,
            &krm_fn_runner::adapters::package::READER_ANNOTATIONS,
        );
        files.entry(path).or_default().push((index, clean));
    }
    let inputs: BTreeSet<String> = before
        .iter()
        .filter_map(|i| ann::path(i).map(Cow::into_owned))
        .collect();
    write_files(dir, &inputs, files);
}

/// Writes `files` (package-relative path → documents with their index) into
/// `dir`, documents ordered by index, and deletes every path of `inputs` that
/// no longer holds a document (files that were not input stay untouched).
pub fn write_files(
    dir: &Path,
    inputs: &BTreeSet<String>,
    files: BTreeMap<String, Vec<(i64, Value)>>,
) {
    for rel in inputs {
        if !files.contains_key(rel) {
            std::fs::remove_file(dir.join(rel)).unwrap();
        }
    }
    for (rel, mut docs) in files {
        docs.sort_by_key(|(i, _)| *i);
        let text: Vec<String> = docs
            .iter()
            .map(|(_, d)| codec::to_yaml_string(d).unwrap())
            .collect();
        let path = dir.join(&rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text.join("---\n")).unwrap();
    }
}

/// Copies a fixture case into `to` (without `.expected`).
pub fn copy_case(from: &Path, to: &Path) {
    let status = Command::new("cp")
        .arg("-a")
        .arg(format!("{}/.", from.display()))
        .arg(to)
        .status()
        .unwrap();
    assert!(status.success());
    let _ = std::fs::remove_dir_all(to.join(".expected"));
}

/// The package as the case expects it: a copy with `.expected/diff.patch` applied.
///
/// Errors: the patch does not apply.
pub fn expected_tree(case: &Path) -> Result<BTreeMap<String, Vec<Value>>, String> {
    Ok(read_tree(patched_copy(case)?.path()))
}

/// A copy of the case's package with `.expected/diff.patch` applied.
fn patched_copy(case: &Path) -> Result<tempfile::TempDir, String> {
    let dir = tempfile::tempdir().unwrap();
    copy_case(case, dir.path());
    let patch = case.join(".expected/diff.patch");
    if patch.exists() && std::fs::metadata(&patch).unwrap().len() > 0 {
        let out = Command::new("git")
            .args(["apply", "--whitespace=nowarn"])
            .arg(&patch)
            .current_dir(dir.path())
            .output()
            .unwrap();
        if !out.status.success() {
            return Err(format!(
                "diff.patch does not apply: {}",
                String::from_utf8_lossy(&out.stderr)
            ));
        }
    }
    Ok(dir)
}

/// Every KRM file under `dir` (package-relative path → bytes).
pub fn read_bytes(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    walk(dir)
        .into_iter()
        .filter(|p| is_krm_file(p))
        .map(|p| {
            let rel = p.strip_prefix(dir).unwrap().display().to_string();
            (rel, std::fs::read(&p).unwrap())
        })
        .collect()
}

/// The KRM files of the package as the case expects them, byte for byte:
/// a copy with `.expected/diff.patch` applied.
pub fn expected_bytes(case: &Path) -> Result<BTreeMap<String, Vec<u8>>, String> {
    Ok(read_bytes(patched_copy(case)?.path()))
}

/// Compares two trees of parsed files; `Err` describes the first difference.
pub fn compare_trees(
    want: &BTreeMap<String, Vec<Value>>,
    got: &BTreeMap<String, Vec<Value>>,
) -> Result<(), String> {
    if want.keys().ne(got.keys()) {
        return Err(format!(
            "files differ: want {:?}, got {:?}",
            want.keys().collect::<Vec<_>>(),
            got.keys().collect::<Vec<_>>()
        ));
    }
    for (file, docs) in want {
        if &got[file] != docs {
            return Err(format!(
                "{file} differs:\n--- want\n{}\n--- got\n{}",
                codec::to_yaml_string(docs).unwrap(),
                codec::to_yaml_string(&got[file]).unwrap()
            ));
        }
    }
    Ok(())
}

/// Directories under `root` that are fixture cases (hold `.expected/`), sorted.
pub fn case_dirs(root: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        if d.join(".expected").is_dir() {
            out.push(d);
            continue;
        }
        if let Ok(rd) = std::fs::read_dir(&d) {
            stack.extend(rd.flatten().map(|e| e.path()).filter(|p| p.is_dir()));
        }
    }
    out.sort();
    out
}

/// `.expected/config.yaml` of a case, or null.
pub fn case_config(case: &Path) -> Value {
    let p = case.join(".expected/config.yaml");
    if p.exists() {
        codec::from_yaml_slice(&std::fs::read(p).unwrap()).unwrap_or(Value::Null)
    } else {
        Value::Null
    }
}
