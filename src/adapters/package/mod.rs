//! The package I/O adapter: a kpt package directory in, rendered files out.
//!
//! Reading mirrors kpt's local package reader (`krm-functions.md` §1.6,
//! §3.2): every `Kptfile`, `*.yaml`, `*.yml` and `*.json` file under the
//! root, subpackages included, hidden entries and symlinks skipped, files
//! matched by the owning package's `.krmignore` left out; each non-empty
//! document becomes one object annotated with its root-relative path and
//! index in both the internal and the legacy form. The text of every
//! document is kept in a [`SourceMap`].
//!
//! Writing mirrors kpt's package writer: objects grouped by path and ordered
//! by index, reader annotations removed; a document a render changed is
//! edited in its original text (comments, key order, quoting and sequence
//! indentation of everything else survive); a file whose content is the
//! same is not touched; a file that held objects and holds none any more is
//! deleted (pruning); files that are not KRM are never touched.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rayon::prelude::*;
use serde_json::Value;

use crate::domain::codec::{self, preserve};
use crate::domain::render::annotations as ann;
use crate::domain::render::{
    Kptfile, KptfileError, Package, PackageError, RenderOutcome, SourceDoc, SourceMap,
    kptfile::KPTFILE_NAME,
};
use crate::domain::resource_list::ResourceList;

mod render;
pub use render::{RenderedPackage, render_dir, render_dir_with_tags};

/// Annotations the reader adds and the writer removes.
pub const READER_ANNOTATIONS: [&str; 7] = [
    ann::PATH,
    ann::LEGACY_PATH,
    ann::INDEX,
    ann::LEGACY_INDEX,
    ann::SEQ_INDENT,
    ann::ID,
    ann::LEGACY_ID,
];

/// Why a package directory could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum PackageIoError {
    /// The directory has no `Kptfile` (kpt's message).
    #[error("No Kptfile found at {0:?}")]
    NoKptfile(PathBuf),
    /// A file could not be read, written or deleted.
    #[error("{action} {path:?}: {source}")]
    Io {
        /// What was being done (`reading`, `writing`, `deleting`, …).
        action: &'static str,
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// A KRM file is not valid YAML (or JSON). The message suggests
    /// `.krmignore` for resource files; a Kptfile cannot be ignored.
    #[error("failed to parse {path:?}: {message}; {}", if path.rsplit('/').next() == Some(KPTFILE_NAME) { "fix the Kptfile" } else { "fix the file or list it in .krmignore" })]
    Parse {
        /// The file, relative to the package root.
        path: String,
        /// The parser's message (line and column when known).
        message: String,
    },
    /// The objects do not form a package tree (e.g. a bad Kptfile).
    #[error(transparent)]
    Package(#[from] PackageError),
    /// A Kptfile of the package does not match the schema: the file and,
    /// for a field the schema does not have, its line.
    #[error("{}: {source}", path.display())]
    Kptfile {
        /// The Kptfile.
        path: PathBuf,
        /// What is wrong.
        source: KptfileError,
    },
    /// A rendered object names a path outside the package.
    #[error("rendered object {object} has path {path:?} outside the package")]
    Escapes {
        /// `kind/name` of the object.
        object: String,
        /// Its path annotation.
        path: String,
    },
    /// The output directory of `-o DIR` exists already (kpt refuses too).
    #[error("output directory {0:?} already exists; choose a new directory")]
    OutputExists(PathBuf),
}

fn io(action: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> PackageIoError {
    let path = path.to_path_buf();
    move |source| PackageIoError::Io {
        action,
        path,
        source,
    }
}

/// Layout of one KRM file as read: blank (comment-only) documents around the
/// object documents, so that a rewritten file keeps its header comments.
#[derive(Debug, Clone, Default)]
struct FileLayout {
    /// The whole original text.
    text: String,
    /// For object document `i`: the blank documents (each followed by `---`)
    /// that preceded it.
    preambles: Vec<String>,
    /// Blank documents after the last object (each preceded by `---`).
    trailer: String,
    /// A `.json` file (re-emitted as JSON when it changes).
    json: bool,
}

impl FileLayout {
    /// True when the file held at least one object (one preamble per object).
    fn held_objects(&self) -> bool {
        !self.preambles.is_empty()
    }
}

/// A package directory read into memory.
#[derive(Debug, Clone)]
pub struct PackageDir {
    root: PathBuf,
    items: Vec<Value>,
    sources: Arc<SourceMap>,
    files: BTreeMap<String, FileLayout>,
}

/// What a write did, for reporting (root-relative paths).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WriteSummary {
    /// Files created or rewritten.
    pub written: Vec<String>,
    /// Files deleted because all their objects were removed.
    pub pruned: Vec<String>,
    /// Files whose content did not change (left untouched).
    pub unchanged: Vec<String>,
}

/// kpt's `MatchAllKRM`: `Kptfile`, `*.yaml`, `*.yml`, `*.json`.
pub fn is_krm_file(name: &str) -> bool {
    name == KPTFILE_NAME
        || name.ends_with(".yaml")
        || name.ends_with(".yml")
        || name.ends_with(".json")
}

impl PackageDir {
    /// Reads the package rooted at `dir` (which must hold a `Kptfile`).
    ///
    /// Errors: [`PackageIoError::NoKptfile`], unreadable files or
    /// directories ([`PackageIoError::Io`]), invalid YAML in a KRM file
    /// ([`PackageIoError::Parse`], naming the file).
    pub fn read(dir: &Path) -> Result<Self, PackageIoError> {
        if !dir.join(KPTFILE_NAME).is_file() {
            return Err(PackageIoError::NoKptfile(dir.to_path_buf()));
        }
        Self::read_objects(dir)
    }

    /// Reads the objects under `dir` as [`PackageDir::read`] does, without
    /// requiring a root `Kptfile` (kpt's `fn eval` reads directories that are
    /// not packages this way); [`PackageDir::package`] then fails.
    ///
    /// Errors: as [`PackageDir::read`], except the missing Kptfile.
    pub fn read_objects(dir: &Path) -> Result<Self, PackageIoError> {
        let files = walk(dir)?;
        let packages: Vec<String> = files
            .iter()
            .filter(|rel| rel.rsplit('/').next() == Some(KPTFILE_NAME))
            .map(|rel| rel.rsplit_once('/').map_or("", |(d, _)| d).to_string())
            .collect();
        let mut ignores: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for pkg in &packages {
            let path = dir.join(pkg).join(".krmignore");
            if let Ok(text) = std::fs::read_to_string(&path) {
                ignores.insert(pkg.clone(), krmignore_patterns(&text));
            }
        }
        let mut sources = SourceMap::new();
        let mut items = Vec::new();
        let mut layouts = BTreeMap::new();
        for rel in files {
            let name = rel.rsplit('/').next().unwrap_or(&rel);
            if !is_krm_file(name) {
                continue;
            }
            let owner = packages
                .iter()
                .filter(|p| p.is_empty() || rel.starts_with(&format!("{p}/")))
                .max_by_key(|p| p.len())
                .cloned()
                .unwrap_or_default();
            let in_pkg = if owner.is_empty() {
                rel.as_str()
            } else {
                &rel[owner.len() + 1..]
            };
            if ignores.get(&owner).is_some_and(|p| ignored(p, in_pkg)) {
                continue;
            }
            let path = dir.join(&rel);
            let bytes = std::fs::read(&path).map_err(io("reading", &path))?;
            let text = String::from_utf8(bytes).map_err(|_| PackageIoError::Parse {
                path: rel.clone(),
                message: "the file is not UTF-8 text".into(),
            })?;
            let layout = read_file(&rel, text, &mut items, &mut sources)?;
            layouts.insert(rel, layout);
        }
        Ok(Self {
            root: dir.to_path_buf(),
            items,
            sources: Arc::new(sources),
            files: layouts,
        })
    }

    /// The package root directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Every object read, with root-relative path/index annotations (both forms).
    pub fn items(&self) -> &[Value] {
        &self.items
    }

    /// The document texts, for [`crate::domain::render::Renderer::with_sources`].
    pub fn sources(&self) -> Arc<SourceMap> {
        self.sources.clone()
    }

    /// The package tree the renderer works on.
    ///
    /// Errors: a Kptfile that does not match the schema
    /// ([`PackageIoError::Kptfile`], naming the file and the line),
    /// other tree errors ([`PackageIoError::Package`]).
    pub fn package(&self) -> Result<Package, PackageIoError> {
        Package::from_flat(self.items.clone()).map_err(|e| self.kptfile_error(e))
    }

    /// A Kptfile error of the tree, re-read from the file's text so that it
    /// names the file and the line (the tree only has the parsed objects).
    fn kptfile_error(&self, e: PackageError) -> PackageIoError {
        let PackageError::Kptfile { package, source } = &e else {
            return e.into();
        };
        let rel = match package.strip_prefix("./") {
            Some(sub) => format!("{sub}/{KPTFILE_NAME}"),
            None => KPTFILE_NAME.to_string(),
        };
        let path = self.root.join(&rel);
        let source = std::fs::read(&path)
            .ok()
            .and_then(|text| Kptfile::parse(&text).err())
            .unwrap_or_else(|| source.clone());
        PackageIoError::Kptfile { path, source }
    }

    /// The files `items` make (root-relative path → text): documents grouped
    /// by path, ordered by index, reader annotations removed, each edited in
    /// its original text when it was read from the package.
    ///
    /// Errors: an object without a path, or with one escaping the package.
    pub fn render_files(
        &self,
        items: &[Value],
    ) -> Result<BTreeMap<String, String>, PackageIoError> {
        let mut grouped: BTreeMap<String, Vec<(i64, &Value)>> = BTreeMap::new();
        for item in items {
            let object = format!("{}/{}", ann::kind(item), ann::name(item));
            let raw = ann::path(item).ok_or_else(|| PackageIoError::Escapes {
                object: object.clone(),
                path: String::new(),
            })?;
            let path = ann::clean_path(&raw);
            if path.starts_with('/') || path == ".." || path.starts_with("../") {
                return Err(PackageIoError::Escapes { object, path: raw });
            }
            let index = ann::index(item).and_then(|i| i.parse().ok()).unwrap_or(-1);
            grouped.entry(path).or_default().push((index, item));
        }
        // Files are independent: format them in parallel (rayon's pool).
        Ok(grouped
            .into_par_iter()
            .map(|(path, docs)| {
                let text = self.file_text(&path, docs);
                (path, text)
            })
            .collect())
    }

    /// The text of the file at `path` holding `docs` (index, object).
    fn file_text(&self, path: &str, mut docs: Vec<(i64, &Value)>) -> String {
        docs.sort_by_key(|(i, _)| *i);
        let layout = self.files.get(path);
        let mut text = String::new();
        if layout.is_some_and(|l| l.json) {
            // kpt writes JSON files back as JSON.
            let values: Vec<Value> = docs.iter().map(|(_, v)| clean(v)).collect();
            let original: Option<Vec<Value>> = (0..values.len())
                .map(|i| self.sources.get(path, i).map(|d| d.value.clone()))
                .collect();
            match (layout, original) {
                (Some(l), Some(orig)) if orig == values => text.push_str(&l.text),
                _ => {
                    for v in &values {
                        let json = serde_json::to_string_pretty(v).unwrap_or_default();
                        text.push_str(&json);
                        text.push('\n');
                    }
                }
            }
            return text;
        }
        for (n, (index, item)) in docs.iter().enumerate() {
            if n > 0 {
                text.push_str("---\n");
            }
            let key = usize::try_from(*index).ok();
            if let (Some(l), Some(i)) = (layout, key)
                && let Some(pre) = l.preambles.get(i)
            {
                text.push_str(pre);
            }
            let value = clean(item);
            text.push_str(&self.sources.format(key.map(|i| (path, i)), &value));
        }
        if let Some(l) = layout {
            text.push_str(&l.trailer);
        }
        text
    }

    /// Writes a render's output back into the package directory (kpt's
    /// in-place mode): changed and new files written, unchanged files left
    /// alone, files whose objects were all removed deleted.
    ///
    /// Errors: as [`PackageDir::render_files`], and file system failures.
    pub fn write_in_place(&self, items: &[Value]) -> Result<WriteSummary, PackageIoError> {
        let files = self.render_files(items)?;
        let mut summary = WriteSummary::default();
        for (rel, layout) in &self.files {
            if !files.contains_key(rel) && layout.held_objects() {
                let path = self.root.join(rel);
                std::fs::remove_file(&path).map_err(io("deleting", &path))?;
                summary.pruned.push(rel.clone());
            }
        }
        for (rel, text) in files {
            if self.files.get(&rel).is_some_and(|l| l.text == text) {
                summary.unchanged.push(rel);
                continue;
            }
            write_file(&self.root.join(&rel), &text)?;
            summary.written.push(rel);
        }
        Ok(summary)
    }

    /// Writes only the root Kptfile with `status` set (kpt records a failed
    /// render's status this way while leaving every resource file alone).
    ///
    /// Errors: file system failures; a missing root Kptfile object.
    pub fn write_kptfile_status(&self, status: &Value) -> Result<(), PackageIoError> {
        let kptfile = self
            .items
            .iter()
            .find(|i| ann::path(i).as_deref() == Some(KPTFILE_NAME))
            .ok_or_else(|| PackageIoError::NoKptfile(self.root.clone()))?;
        let mut updated = kptfile.clone();
        set_status(&mut updated, status);
        let files = self.render_files(std::slice::from_ref(&updated))?;
        if let Some(text) = files.get(KPTFILE_NAME)
            && self.files.get(KPTFILE_NAME).is_none_or(|l| &l.text != text)
        {
            write_file(&self.root.join(KPTFILE_NAME), text)?;
        }
        Ok(())
    }

    /// Writes `items` as a new package under `out` (kpt's `-o DIR`), which
    /// must not exist.
    ///
    /// Errors: [`PackageIoError::OutputExists`], path and file system errors.
    pub fn write_to_dir(
        &self,
        out: &Path,
        items: &[Value],
    ) -> Result<WriteSummary, PackageIoError> {
        if out.exists() {
            return Err(PackageIoError::OutputExists(out.to_path_buf()));
        }
        let files = self.render_files(items)?;
        let mut summary = WriteSummary::default();
        std::fs::create_dir_all(out).map_err(io("creating", out))?;
        for (rel, text) in files {
            write_file(&out.join(&rel), &text)?;
            summary.written.push(rel);
        }
        Ok(summary)
    }

    /// `items` as a `config.kubernetes.io/v1` ResourceList with the reader
    /// annotations kept and comments preserved (kpt's `-o stdout`).
    ///
    /// Errors: none in practice (values read from YAML always emit).
    pub fn wrapped(&self, items: &[Value]) -> Result<String, codec::CodecError> {
        let mut items = items.to_vec();
        for item in &mut items {
            // kpt annotates the objects it read, not generated ones.
            if let Some(doc) = key_of(item).and_then(|(p, i)| self.sources.get(&p, i)) {
                ann::set(item, ann::SEQ_INDENT, preserve::sequence_indent(&doc.text));
            }
        }
        let list = ResourceList::new(items);
        list.to_yaml_with(|_, item| {
            self.sources
                .format(key_of(item).as_ref().map(|(p, i)| (p.as_str(), *i)), item)
        })
    }

    /// `items` as a multi-document YAML stream (kpt's `-o unwrap`): every
    /// reader annotation (path, index, id, sequence indent) removed.
    pub fn unwrapped(&self, items: &[Value]) -> String {
        let mut out = String::new();
        for (n, item) in items.iter().enumerate() {
            if n > 0 {
                out.push_str("---\n");
            }
            let key = key_of(item);
            let value = clean(item);
            out.push_str(
                &self
                    .sources
                    .format(key.as_ref().map(|(p, i)| (p.as_str(), *i)), &value),
            );
        }
        out
    }
}

/// Sets the root Kptfile's `status` in rendered `items` to what kpt
/// records after a render (`conditions: [Rendered]` and `renderStatus`).
pub fn record_status(items: &mut [Value], outcome: &RenderOutcome) {
    let status = status_of(outcome);
    if let Some(kptfile) = items.iter_mut().find(|i| {
        ann::path(i).map(|p| ann::clean_path(&p)).as_deref() == Some(KPTFILE_NAME)
            && ann::kind(i) == "Kptfile"
    }) {
        set_status(kptfile, &status);
    }
}

/// The Kptfile `status` kpt writes for `outcome`.
pub fn status_of(outcome: &RenderOutcome) -> Value {
    let mut status = serde_json::json!({"conditions": [outcome.rendered_condition()]});
    if let Some(rs) = outcome.kpt_render_status()
        && let Ok(v) = serde_json::to_value(rs)
    {
        status["renderStatus"] = v;
    }
    status
}

fn set_status(kptfile: &mut Value, status: &Value) {
    if let Some(map) = kptfile.as_object_mut() {
        map.insert("status".into(), status.clone());
    }
}

/// Root-relative (path, index) of a root-relative object.
fn key_of(item: &Value) -> Option<(String, usize)> {
    crate::domain::render::source::root_key("", item)
}

/// A copy of `item` without reader annotations.
fn clean(item: &Value) -> Value {
    let mut v = item.clone();
    ann::remove_all(&mut v, &READER_ANNOTATIONS);
    v
}

fn write_file(path: &Path, text: &str) -> Result<(), PackageIoError> {
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).map_err(io("creating", parent))?;
    }
    std::fs::write(path, text).map_err(io("writing", path))
}

/// Reads one KRM file's documents into `items` and `sources`.
fn read_file(
    rel: &str,
    text: String,
    items: &mut Vec<Value>,
    sources: &mut SourceMap,
) -> Result<FileLayout, PackageIoError> {
    let parse_error = |message: String| PackageIoError::Parse {
        path: rel.to_string(),
        message,
    };
    let json = rel.ends_with(".json");
    let docs = if json {
        vec![text.clone()]
    } else {
        preserve::split_documents(&text)
    };
    let mut layout = FileLayout {
        json,
        ..FileLayout::default()
    };
    let mut parsed = Vec::with_capacity(docs.len());
    for (n, doc) in docs.into_iter().enumerate() {
        let value: Value = if preserve::is_blank_document(&doc) {
            Value::Null
        } else {
            codec::from_yaml_str(&doc).map_err(|e| parse_error(e.to_string()))?
        };
        if !value.is_null() && !value.is_object() {
            return Err(parse_error(format!(
                "document {} is not a mapping (a KRM object)",
                n + 1
            )));
        }
        parsed.push((doc, value));
    }
    let last_object = parsed.iter().rposition(|(_, v)| !v.is_null());
    let mut pending = String::new();
    let mut index = 0usize;
    for (n, (doc, value)) in parsed.into_iter().enumerate() {
        if value.is_null() {
            // Blank documents stay with the next object, or at the end.
            if last_object.is_some_and(|l| n < l) {
                pending.push_str(&doc);
                pending.push_str("---\n");
            } else {
                layout.trailer.push_str("---\n");
                layout.trailer.push_str(&doc);
            }
            continue;
        }
        layout.preambles.push(std::mem::take(&mut pending));
        let mut item = value.clone();
        for (k, v) in [
            (ann::PATH, rel.to_string()),
            (ann::LEGACY_PATH, rel.to_string()),
            (ann::INDEX, index.to_string()),
            (ann::LEGACY_INDEX, index.to_string()),
        ] {
            ann::set(&mut item, k, v);
        }
        items.push(item);
        sources.insert(rel, index, SourceDoc { text: doc, value });
        index += 1;
    }
    layout.text = text;
    Ok(layout)
}

/// Root-relative paths of the files under `dir`, sorted; hidden entries and
/// symlinks are skipped (kpt ignores symlinks).
fn walk(dir: &Path) -> Result<Vec<String>, PackageIoError> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).map_err(io("reading directory", &d))? {
            let entry = entry.map_err(io("reading directory", &d))?;
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.starts_with('.') {
                continue;
            }
            let kind = entry.file_type().map_err(io("reading", &entry.path()))?;
            if kind.is_symlink() {
                continue;
            }
            if kind.is_dir() {
                stack.push(entry.path());
            } else if kind.is_file()
                && let Ok(rel) = entry.path().strip_prefix(dir)
            {
                let rel: Vec<String> = rel
                    .components()
                    .map(|c| c.as_os_str().to_string_lossy().into_owned())
                    .collect();
                out.push(rel.join("/"));
            }
        }
    }
    out.sort();
    Ok(out)
}

/// The patterns of a `.krmignore` file (blank lines and comments dropped).
fn krmignore_patterns(text: &str) -> Vec<String> {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(str::to_string)
        .collect()
}

/// True when a `.krmignore` pattern list hides `rel` (package-relative): a
/// pattern without `/` matches any path segment (`*` wildcards allowed), one
/// with `/` matches the path or a directory prefix of it.
fn ignored(patterns: &[String], rel: &str) -> bool {
    patterns.iter().any(|p| {
        let p = p.trim_end_matches('/');
        if p.contains('/') {
            let p = p.trim_start_matches('/');
            rel == p || rel.starts_with(&format!("{p}/"))
        } else {
            rel.split('/').any(|seg| glob(p, seg))
        }
    })
}

/// `*`-wildcard match of one path segment.
fn glob(pattern: &str, text: &str) -> bool {
    match pattern.split_once('*') {
        None => pattern == text,
        Some((head, tail)) => {
            text.starts_with(head)
                && (head.len()..=text.len())
                    .filter(|&i| text.is_char_boundary(i))
                    .any(|i| glob(tail, &text[i..]))
        }
    }
}

#[cfg(test)]
mod tests;
