//! The package I/O adapter: a kpt package directory in, rendered files out.
//!
//! Reading mirrors kpt's local package reader (`krm-functions.md` §1.6,
//! §3.2): every `Kptfile`, `*.yaml`, `*.yml` and `*.json` file under the
//! root, subpackages included, walked as Go's `filepath.Walk` walks (each
//! directory's entries in name order), hidden files and directories
//! included (`.git` excepted), files matched by the owning package's
//! `.krmignore` left out. A symbolic link to a file inside the package is
//! read as kpt reads it (under the link's name); one that leads outside the
//! package, or nowhere, is an error; links to directories are not followed
//! (kpt does not either). Each non-empty document becomes one object
//! annotated with its root-relative path and index in both the internal and
//! the legacy form, and its sequence style; its text, tree and value are
//! kept in a [`SourceMap`]. Documents end at `---` and at `...`; files with
//! Windows line ends (CRLF) are read as LF and written back with CRLF.
//!
//! Writing mirrors kpt's package writer: objects grouped by path and ordered
//! by index, reader annotations removed; a document a render changed is
//! edited in its original text with what the functions wrote (comments, key
//! order, quoting and sequence indentation of everything else survive); a
//! file whose content is the same is not touched; a file that held objects
//! and holds none any more is deleted (pruning); files that are not KRM are
//! never touched. Every change of one render is committed all or nothing,
//! never through a symbolic link ([`write::commit`]).

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use ignore::gitignore::{Gitignore, GitignoreBuilder};
use rayon::prelude::*;
use serde_json::Value;

use crate::domain::codec::tree::YamlDoc;
use crate::domain::codec::{self, CodecError, preserve};
use crate::domain::render::annotations as ann;
use crate::domain::render::source::{TextMap, root_keys};
use crate::domain::render::{
    Kptfile, KptfileError, Package, PackageError, RenderOutcome, SourceMap, kptfile::KPTFILE_NAME,
};
use crate::domain::resource_list::ResourceList;

mod render;
pub mod write;
pub use render::{PackageRender, RenderedPackage, WriteOutcome, render_dir};
pub use write::{Change, CommitError};

/// Annotations the reader adds and the writer removes.
pub use crate::domain::render::annotations::READER_ANNOTATIONS;

/// Why a package directory could not be read or written.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
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
        /// The parser's error, when a parser failed (not for text that is
        /// not UTF-8 or a document that is not a mapping).
        #[source]
        source: Option<CodecError>,
    },
    /// A KRM file is a symbolic link render does not read through.
    #[error(
        "{path:?} is a symbolic link {problem}; render reads only files inside the package (remove the link, or list it in .krmignore)"
    )]
    Link {
        /// The link, relative to the package root.
        path: String,
        /// What is wrong with its target.
        problem: String,
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
    /// The files could not be written; none was changed.
    #[error("failed to save resources: {0}; no file was changed")]
    NotSaved(#[from] CommitError),
}

fn io(action: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> PackageIoError {
    let path = path.to_path_buf();
    move |source| PackageIoError::Io {
        action,
        path,
        source,
    }
}

/// Layout of one KRM file as read: the text around its object documents,
/// so that a rewritten file keeps its header comments and markers.
#[derive(Debug, Clone, Default)]
struct FileLayout {
    /// The whole original text (line ends normalised to LF).
    text: String,
    /// For object document `i`: the text before it (markers, comment-only
    /// documents, text after a `...`).
    seps: Vec<String>,
    /// Text after the last object.
    trailer: String,
    /// A `.json` file (re-emitted as JSON when it changes).
    json: bool,
    /// The file uses Windows line ends (written back with them).
    crlf: bool,
    /// The file starts with a UTF-8 byte-order mark (left out of the text
    /// functions get, put back when the file is written).
    bom: bool,
    /// The original bytes (what an unchanged file is compared with).
    bytes: Vec<u8>,
    /// The file is a symbolic link to this package-relative file.
    link: Option<String>,
}

impl FileLayout {
    /// True when the file held at least one object.
    fn held_objects(&self) -> bool {
        !self.seps.is_empty()
    }
}

/// A file as read: its path, its layout and its documents (by index).
type ReadFile = (String, FileLayout, Vec<(usize, YamlDoc)>);

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

/// A file found by the walk.
struct Found {
    /// Root-relative, slash-separated path.
    rel: String,
    /// What to read: the file itself, or a link's target inside the package.
    read: PathBuf,
    /// For a link: its target, relative to the root.
    link: Option<String>,
}

impl PackageDir {
    /// Reads the package rooted at `dir` (which must hold a `Kptfile`).
    ///
    /// Errors: [`PackageIoError::NoKptfile`], unreadable files or
    /// directories ([`PackageIoError::Io`]), invalid YAML in a KRM file
    /// ([`PackageIoError::Parse`], naming the file), a KRM file that is a
    /// link out of the package ([`PackageIoError::Link`]).
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
        let root = std::fs::canonicalize(dir).map_err(io("reading directory", dir))?;
        let mut entries = Vec::new();
        walk(&root, "", &mut entries)?;
        // The root's `.krmignore` applies without a root Kptfile too.
        let mut packages: Vec<String> = entries
            .iter()
            .filter(|(rel, _)| rel.rsplit('/').next() == Some(KPTFILE_NAME))
            .map(|(rel, _)| rel.rsplit_once('/').map_or("", |(d, _)| d).to_string())
            .collect();
        if !packages.iter().any(String::is_empty) {
            packages.push(String::new());
        }
        let mut ignores: BTreeMap<String, Gitignore> = BTreeMap::new();
        for pkg in &packages {
            let path = root.join(pkg).join(".krmignore");
            if let Ok(text) = std::fs::read_to_string(&path) {
                ignores.insert(pkg.clone(), krmignore(&text));
            }
        }
        let mut found = Vec::new();
        for (rel, link) in entries {
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
            if ignores
                .get(&owner)
                .is_some_and(|m| m.matched_path_or_any_parents(in_pkg, false).is_ignore())
            {
                continue;
            }
            let (read, link) = match link {
                None => (root.join(&rel), None),
                Some(()) => {
                    let target = link_target(&root, &rel)?;
                    let within = target.strip_prefix(&root).ok().map(|p| {
                        p.components()
                            .map(|c| c.as_os_str().to_string_lossy())
                            .collect::<Vec<_>>()
                            .join("/")
                    });
                    (target, within)
                }
            };
            found.push(Found { rel, read, link });
        }
        // Files are independent: read and parse them in parallel.
        let read: Vec<Result<ReadFile, PackageIoError>> = found
            .into_par_iter()
            .map(|f| {
                let bytes = std::fs::read(&f.read).map_err(io("reading", &f.read))?;
                let (mut layout, docs) = read_file(&f.rel, bytes)?;
                layout.link = f.link;
                Ok((f.rel, layout, docs))
            })
            .collect();
        let mut sources = SourceMap::new();
        let mut items = Vec::new();
        let mut layouts = BTreeMap::new();
        for r in read {
            let (rel, layout, docs) = r?;
            for (index, doc) in docs {
                // kyaml derives the sequence style of each document.
                let seq = preserve::sequence_indent(doc.text());
                let mut item = doc.value().clone();
                for (k, v) in [
                    (ann::PATH, rel.clone()),
                    (ann::LEGACY_PATH, rel.clone()),
                    (ann::INDEX, index.to_string()),
                    (ann::LEGACY_INDEX, index.to_string()),
                    (ann::SEQ_INDENT, seq.to_string()),
                ] {
                    ann::set(&mut item, k, v);
                }
                items.push(item);
                sources.insert(rel.clone(), index, doc);
            }
            layouts.insert(rel, layout);
        }
        Ok(Self {
            root,
            items,
            sources: Arc::new(sources),
            files: layouts,
        })
    }

    /// The package root directory (symbolic links resolved).
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Every object read, with root-relative path/index annotations (both
    /// forms) and the sequence style of its file.
    pub fn items(&self) -> &[Value] {
        &self.items
    }

    /// The documents as read, for [`crate::domain::render::Renderer::with_sources`].
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
    /// by path, ordered by index, reader annotations removed, each written
    /// from its texts in `texts` (the render's; else the documents as read).
    ///
    /// Errors: an object without a path, or with one escaping the package.
    pub fn render_files(
        &self,
        items: &[Value],
        texts: Option<&TextMap>,
    ) -> Result<BTreeMap<String, String>, PackageIoError> {
        self.render_objects(items.iter().map(Cow::Borrowed), texts)
    }

    /// [`PackageDir::render_files`] of objects given one by one: borrowed
    /// ones are copied to drop the reader annotations, owned ones lose
    /// them in place.
    fn render_objects<'a>(
        &self,
        items: impl IntoIterator<Item = Cow<'a, Value>>,
        texts: Option<&TextMap>,
    ) -> Result<BTreeMap<String, String>, PackageIoError> {
        let texts = self.texts_or_read(texts);
        let texts = texts.as_ref();
        let mut grouped: BTreeMap<String, Vec<(i64, Cow<'a, Value>)>> = BTreeMap::new();
        for item in items {
            let object = || format!("{}/{}", ann::kind(&item), ann::name(&item));
            let raw = ann::path(&item).ok_or_else(|| PackageIoError::Escapes {
                object: object(),
                path: String::new(),
            })?;
            let path = ann::cleaned_text(&raw);
            if path.starts_with('/') || path == ".." || path.starts_with("../") || path == "." {
                return Err(PackageIoError::Escapes {
                    object: object(),
                    path: raw.into_owned(),
                });
            }
            let index = ann::index(&item).and_then(|i| i.parse().ok()).unwrap_or(-1);
            // The path is copied once per file, not per object.
            let docs = match grouped.get_mut(path.as_ref()) {
                Some(docs) => docs,
                None => grouped.entry(path.into_owned()).or_default(),
            };
            docs.push((index, item));
        }
        // Files are independent: format them in parallel (rayon's pool).
        Ok(grouped
            .into_par_iter()
            .map(|(path, docs)| {
                let text = self.file_text(&path, docs, texts);
                (path, text)
            })
            .collect())
    }

    /// The text of the file at `path` holding `docs` (index, object).
    fn file_text(
        &self,
        path: &str,
        mut docs: Vec<(i64, Cow<'_, Value>)>,
        texts: &TextMap,
    ) -> String {
        docs.sort_by_key(|(i, _)| *i);
        let layout = self.files.get(path);
        let mut text = String::new();
        if layout.is_some_and(|l| l.json) {
            // kpt writes JSON files back as JSON.
            let values: Vec<Value> = docs.into_iter().map(|(_, v)| clean(v)).collect();
            let original: Option<Vec<Value>> = (0..values.len())
                .map(|i| self.sources.get(path, i).map(|d| d.value().clone()))
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
            return restore_encoding(text, layout);
        }
        let keys = root_keys(docs.iter().map(|(_, item)| item.as_ref()), |_| {
            String::new()
        });
        for (n, ((index, item), key)) in docs.into_iter().zip(&keys).enumerate() {
            let sep = usize::try_from(index)
                .ok()
                .and_then(|i| layout.and_then(|l| l.seps.get(i)))
                .map_or("", String::as_str);
            if n == 0 && index > 0 {
                // The documents before it are gone: it opens the file, so
                // the markers between it and them go too (kpt starts such a
                // file with the document).
                text.push_str(&without_markers(sep));
            } else {
                text.push_str(sep);
            }
            if n > 0 && !starts_a_document(sep) {
                text.push_str("---\n");
            }
            text.push_str(&texts.text_for(key.as_ref(), &clean(item)));
        }
        if let Some(l) = layout {
            text.push_str(&l.trailer);
        }
        restore_encoding(text, layout)
    }

    /// The changes that make the package hold `files` (root-relative path →
    /// text): changed and new files written, files that held objects and
    /// hold none removed.
    fn changes(&self, files: BTreeMap<String, String>) -> (Vec<Change>, WriteSummary) {
        let mut summary = WriteSummary::default();
        let mut changes = Vec::new();
        for (rel, layout) in &self.files {
            if !files.contains_key(rel) && layout.held_objects() {
                changes.push(Change::Remove { path: rel.clone() });
                summary.pruned.push(rel.clone());
            }
        }
        for (rel, text) in &files {
            let layout = self.files.get(rel);
            if layout.is_some_and(|l| l.bytes == text.as_bytes()) {
                summary.unchanged.push(rel.clone());
                continue;
            }
            // A link inside the package whose target file gets the same
            // text: writing the target is writing it (links are never
            // written through).
            if let Some(target) = layout.and_then(|l| l.link.as_ref())
                && files.get(target) == Some(text)
            {
                summary.unchanged.push(rel.clone());
                continue;
            }
            summary.written.push(rel.clone());
            changes.push(Change::Write {
                path: rel.clone(),
                text: text.clone(),
            });
        }
        (changes, summary)
    }

    /// Writes a render's output back into the package directory (kpt's
    /// in-place mode): changed and new files written, unchanged files left
    /// alone, files whose objects were all removed deleted — all or nothing,
    /// never through a symbolic link. `texts` are the render's object texts
    /// (see [`RenderOutcome::texts`]); without them objects are written
    /// from the documents as read.
    ///
    /// Errors: as [`PackageDir::render_files`]; [`PackageIoError::NotSaved`]
    /// when the commit failed (no file changed).
    pub fn write_in_place_with(
        &self,
        items: &[Value],
        texts: Option<&TextMap>,
    ) -> Result<WriteSummary, PackageIoError> {
        self.write_objects_in_place(items.iter().map(Cow::Borrowed), texts)
    }

    /// [`PackageDir::write_in_place_with`] of objects given one by one (a
    /// caller that changes one object passes the others unchanged, without
    /// copying them; objects given owned are not copied at all).
    pub(crate) fn write_objects_in_place<'a>(
        &self,
        items: impl IntoIterator<Item = Cow<'a, Value>>,
        texts: Option<&TextMap>,
    ) -> Result<WriteSummary, PackageIoError> {
        let files = self.render_objects(items, texts)?;
        let (changes, summary) = self.changes(files);
        if !changes.is_empty() {
            write::commit(&self.root, &changes)?;
        }
        Ok(summary)
    }

    /// [`PackageDir::write_in_place_with`] without a render's texts.
    ///
    /// Errors: as [`PackageDir::write_in_place_with`].
    pub fn write_in_place(&self, items: &[Value]) -> Result<WriteSummary, PackageIoError> {
        self.write_in_place_with(items, None)
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
        let files = self.render_files(std::slice::from_ref(&updated), None)?;
        if let Some(text) = files.get(KPTFILE_NAME)
            && self
                .files
                .get(KPTFILE_NAME)
                .is_none_or(|l| l.bytes != text.as_bytes())
        {
            write::commit(
                &self.root,
                &[Change::Write {
                    path: KPTFILE_NAME.into(),
                    text: text.clone(),
                }],
            )?;
        }
        Ok(())
    }

    /// Writes `items` as a new package under `out` (kpt's `-o DIR`), which
    /// must not exist; on failure nothing is left behind.
    ///
    /// Errors: [`PackageIoError::OutputExists`], path and file system errors.
    pub fn write_to_dir(
        &self,
        out: &Path,
        items: &[Value],
        texts: Option<&TextMap>,
    ) -> Result<WriteSummary, PackageIoError> {
        if out.exists() || out.is_symlink() {
            return Err(PackageIoError::OutputExists(out.to_path_buf()));
        }
        let files = self.render_files(items, texts)?;
        let mut summary = WriteSummary::default();
        std::fs::create_dir_all(out).map_err(io("creating", out))?;
        let changes: Vec<Change> = files
            .into_iter()
            .map(|(path, text)| {
                summary.written.push(path.clone());
                Change::Write { path, text }
            })
            .collect();
        if let Err(e) = write::commit(out, &changes) {
            let _ = std::fs::remove_dir(out);
            return Err(e.into());
        }
        Ok(summary)
    }

    /// `items` as a `config.kubernetes.io/v1` ResourceList with the reader
    /// annotations kept and comments preserved (kpt's `-o stdout`).
    ///
    /// Errors: none in practice (values read from YAML always emit).
    pub fn wrapped(
        &self,
        items: &[Value],
        texts: Option<&TextMap>,
    ) -> Result<String, codec::CodecError> {
        let texts = self.texts_or_read(texts);
        let texts = texts.as_ref();
        let keys = root_keys(items, |_| String::new());
        let list = ResourceList::new(items.to_vec());
        list.to_yaml_with(|i, item| {
            let text = texts.text_for(keys[i].as_ref(), item);
            self.with_separator_comments(keys[i].as_ref(), text)
        })
    }

    /// `texts`, or the texts as read when the caller has none.
    fn texts_or_read<'a>(&self, texts: Option<&'a TextMap>) -> std::borrow::Cow<'a, TextMap> {
        match texts {
            Some(t) => std::borrow::Cow::Borrowed(t),
            None => std::borrow::Cow::Owned(TextMap::from_sources(&self.sources)),
        }
    }

    /// `text` (the document at `key`) after the comments that stood
    /// between it and the document before it in its file (`--- # note`,
    /// comment lines after a `...`): written out of place, the document
    /// takes them along, as kpt's does.
    fn with_separator_comments(&self, key: Option<&(String, usize)>, text: String) -> String {
        let Some(sep) = key.and_then(|(path, index)| self.files.get(path)?.seps.get(*index)) else {
            return text;
        };
        let comments: String = without_markers(sep)
            .split_inclusive('\n')
            .filter(|l| l.trim_start().starts_with('#'))
            .map(|l| format!("{}\n", l.trim()))
            .collect();
        if comments.is_empty() {
            text
        } else {
            comments + &text
        }
    }

    /// `items` as a multi-document YAML stream (kpt's `-o unwrap`): every
    /// reader annotation (path, index, id, sequence indent) removed.
    pub fn unwrapped(&self, items: &[Value], texts: Option<&TextMap>) -> String {
        let texts = self.texts_or_read(texts);
        let texts = texts.as_ref();
        let keys = root_keys(items, |_| String::new());
        let docs: Vec<String> = items
            .par_iter()
            .zip(&keys)
            .map(|(item, key)| {
                let text = texts.text_for(key.as_ref(), &clean(Cow::Borrowed(item)));
                self.with_separator_comments(key.as_ref(), text)
            })
            .collect();
        docs.join("---\n")
    }
}

/// True when a separator holds a `---` line (a following document starts).
fn starts_a_document(sep: &str) -> bool {
    sep.lines()
        .any(|l| l == "---" || l.starts_with("--- ") || l.starts_with("---\t"))
}

/// `sep` (the text between two documents) without its `---` and `...`
/// marker lines; a comment on a marker line stays, on a line of its own.
fn without_markers(sep: &str) -> String {
    let mut out = String::with_capacity(sep.len());
    for line in sep.split_inclusive('\n') {
        let body = line.trim_end_matches(['\n', '\r']);
        let rest = ["---", "..."].iter().find_map(|m| {
            body.strip_prefix(m)
                .filter(|r| r.is_empty() || r.starts_with([' ', '\t']))
        });
        match rest.map(str::trim) {
            None => out.push_str(line),
            Some("") => {}
            Some(comment) => {
                out.push_str(comment);
                out.push('\n');
            }
        }
    }
    out
}

/// `text` with the file's Windows line ends and byte-order mark put back.
fn restore_encoding(text: String, layout: Option<&FileLayout>) -> String {
    let text = if layout.is_some_and(|l| l.crlf) {
        text.replace('\n', "\r\n")
    } else {
        text
    };
    if layout.is_some_and(|l| l.bom) {
        format!("\u{feff}{text}")
    } else {
        text
    }
}

/// Sets the root Kptfile's `status` in rendered `items` to what kpt
/// records after a render (`conditions: [Rendered]` and `renderStatus`).
pub fn record_status(items: &mut [Value], outcome: &RenderOutcome) {
    if let Some((i, kptfile)) = kptfile_with_status(items.iter(), outcome) {
        items[i] = kptfile;
    }
}

/// What [`record_status`] changes, without changing `items`: the position
/// of the root Kptfile among them and a copy of it with `outcome`'s status
/// set; `None` when there is no root Kptfile.
pub fn kptfile_with_status<'a>(
    items: impl IntoIterator<Item = &'a Value>,
    outcome: &RenderOutcome,
) -> Option<(usize, Value)> {
    let (i, kptfile) = items.into_iter().enumerate().find(|(_, i)| {
        ann::path(i).map(|p| ann::clean_path(&p)).as_deref() == Some(KPTFILE_NAME)
            && ann::kind(i) == "Kptfile"
    })?;
    let mut kptfile = kptfile.clone();
    set_status(&mut kptfile, &status_of(outcome));
    Some((i, kptfile))
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

/// Sets `status` on a Kptfile object: the `Rendered` condition replaces a
/// previous one (other conditions stay), `renderStatus` is replaced.
fn set_status(kptfile: &mut Value, status: &Value) {
    let Some(map) = kptfile.as_object_mut() else {
        return;
    };
    let mut merged = map
        .get("status")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    let mut conditions: Vec<Value> = merged
        .get("conditions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    conditions.retain(|c| c.get("type").and_then(Value::as_str) != Some("Rendered"));
    conditions.extend(status["conditions"].as_array().cloned().unwrap_or_default());
    merged.insert("conditions".into(), Value::Array(conditions));
    merged.shift_remove("renderStatus");
    if let Some(rs) = status.get("renderStatus") {
        merged.insert("renderStatus".into(), rs.clone());
    }
    map.insert("status".into(), Value::Object(merged));
}

/// `item` without reader annotations (a borrowed one copied).
fn clean(item: Cow<'_, Value>) -> Value {
    let mut v = item.into_owned();
    ann::remove_all(&mut v, &READER_ANNOTATIONS);
    v
}

/// Reads one KRM file: its layout and its object documents by index.
fn read_file(
    rel: &str,
    bytes: Vec<u8>,
) -> Result<(FileLayout, Vec<(usize, YamlDoc)>), PackageIoError> {
    let parse_error = |message: String| PackageIoError::Parse {
        path: rel.to_string(),
        message,
        source: None,
    };
    let mut raw = String::from_utf8(bytes.clone())
        .map_err(|_| parse_error("the file is not UTF-8 text".into()))?;
    // A byte-order mark is not part of the first document (kyaml's reader
    // drops it too); it is written back with the file.
    let bom = raw.starts_with('\u{feff}');
    if bom {
        raw.drain(..'\u{feff}'.len_utf8());
    }
    // Windows line ends (every line break a CRLF): read as LF, written back as CRLF.
    let crlf = raw.contains("\r\n") && !raw.replace("\r\n", "").contains('\n');
    let text = if crlf { raw.replace("\r\n", "\n") } else { raw };
    let json = rel.ends_with(".json");
    let stream = if json {
        preserve::Stream {
            docs: vec![(String::new(), text.clone())],
            trailer: String::new(),
        }
    } else {
        preserve::split_stream(&text)
    };
    let mut layout = FileLayout {
        json,
        crlf,
        bom,
        bytes,
        ..FileLayout::default()
    };
    let mut parsed = Vec::with_capacity(stream.docs.len());
    for (n, (sep, doc)) in stream.docs.into_iter().enumerate() {
        let blank = preserve::is_blank_document(&doc);
        let value = if blank {
            None
        } else {
            let d = YamlDoc::parse(doc.as_str()).map_err(|e| PackageIoError::Parse {
                path: rel.to_string(),
                message: e.to_string(),
                source: Some(e),
            })?;
            if !d.value().is_null() && !d.value().is_object() {
                return Err(parse_error(format!(
                    "document {} is not a mapping (a KRM object)",
                    n + 1
                )));
            }
            (!d.value().is_null()).then_some(d)
        };
        parsed.push((sep, doc, value));
    }
    let mut pending = String::new();
    let mut docs = Vec::new();
    for (sep, doc, value) in parsed {
        pending.push_str(&sep);
        match value {
            None => pending.push_str(&doc),
            Some(d) => {
                layout.seps.push(std::mem::take(&mut pending));
                docs.push((docs.len(), d));
            }
        }
    }
    pending.push_str(&stream.trailer);
    layout.trailer = pending;
    layout.text = text;
    Ok((layout, docs))
}

/// The files under `root`/`dir` as Go's `filepath.Walk` visits them (each
/// directory's entries in name order, directories entered where they sort):
/// root-relative paths, `Some(())` for symbolic links. `.git` is skipped;
/// links are not entered.
fn walk(root: &Path, dir: &str, out: &mut Vec<(String, Option<()>)>) -> Result<(), PackageIoError> {
    let path = if dir.is_empty() {
        root.to_path_buf()
    } else {
        root.join(dir)
    };
    let mut entries: Vec<(String, std::fs::FileType)> = Vec::new();
    for entry in std::fs::read_dir(&path).map_err(io("reading directory", &path))? {
        let entry = entry.map_err(io("reading directory", &path))?;
        let kind = entry.file_type().map_err(io("reading", &entry.path()))?;
        let Ok(name) = entry.file_name().into_string() else {
            continue;
        };
        entries.push((name, kind));
    }
    entries.sort_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
    for (name, kind) in entries {
        let rel = if dir.is_empty() {
            name.clone()
        } else {
            format!("{dir}/{name}")
        };
        if kind.is_dir() {
            if name != ".git" {
                walk(root, &rel, out)?;
            }
        } else if kind.is_symlink() {
            out.push((rel, Some(())));
        } else if kind.is_file() {
            out.push((rel, None));
        }
    }
    Ok(())
}

/// Where the link `rel` leads, when that is a file inside `root`.
///
/// Errors: [`PackageIoError::Link`] for a link out of the package, to
/// nothing, or to something that is not a file.
fn link_target(root: &Path, rel: &str) -> Result<PathBuf, PackageIoError> {
    let link = root.join(rel);
    let problem = |p: String| PackageIoError::Link {
        path: rel.to_string(),
        problem: p,
    };
    let target = std::fs::canonicalize(&link).map_err(|e| {
        let to = std::fs::read_link(&link)
            .map(|t| t.display().to_string())
            .unwrap_or_default();
        problem(format!("to {to:?}, which cannot be read ({e})"))
    })?;
    if !target.starts_with(root) {
        return Err(problem(format!(
            "to {:?}, outside the package",
            target.display().to_string()
        )));
    }
    if !target.is_file() {
        return Err(problem(format!(
            "to {:?}, which is not a file",
            target.display().to_string()
        )));
    }
    Ok(target)
}

/// A `.krmignore` file as a matcher of package-relative paths, with
/// gitignore's rules as kpt applies them (kyaml reads the file with a
/// gitignore parser): `#` comments, `!` negation, `*`, `?` and `[…]`
/// wildcards, a pattern with a `/` anchored to the package directory, a
/// trailing `/` matching directories only, and a matched directory hiding
/// everything under it. Lines that are not valid patterns are skipped, as
/// gitignore skips them.
fn krmignore(text: &str) -> Gitignore {
    let mut builder = GitignoreBuilder::new("");
    for line in text.lines() {
        // An invalid glob is ignored, as git ignores it.
        let _ = builder.add_line(None, line);
    }
    builder.build().unwrap_or_else(|_| Gitignore::empty())
}

#[cfg(test)]
mod tests;
