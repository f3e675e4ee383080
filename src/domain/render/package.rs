//! The in-memory package tree a render works on.
//!
//! A package is a directory with a Kptfile: its own objects (the Kptfile
//! object included) as ordered JSON values carrying path/index annotations
//! relative to the package directory, and its direct subpackages. The
//! package I/O adapter builds this from a directory; [`Package::from_flat`]
//! builds it from a flat list of objects with root-relative paths (Porch's
//! view of a package revision, or an in-memory ResourceList).

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

use super::annotations::{self as ann, clean_path};
use super::kptfile::{KPTFILE_KIND, KPTFILE_NAME, Kptfile, KptfileError};

/// One package of the tree.
#[derive(Debug, Clone, PartialEq)]
pub struct Package {
    /// Slash-separated path of the package directory relative to the root
    /// package ("" for the root).
    pub path: String,
    /// The package's Kptfile, parsed.
    pub kptfile: Kptfile,
    /// The package's own objects, in reading order (files in lexical order,
    /// documents in file order), the Kptfile object included, each with
    /// path/index annotations relative to this package's directory.
    pub resources: Vec<Value>,
    /// Direct subpackages; render sorts them by path.
    pub subpackages: Vec<Package>,
}

/// Why a package tree could not be built.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum PackageError {
    /// No object with path `Kptfile` in the package directory.
    #[error("No Kptfile found at {0:?}")]
    NoKptfile(String),
    /// The Kptfile could not be read.
    #[error("error reading Kptfile at {package:?}: {source}")]
    Kptfile {
        /// The package (`.` or `./<path>`).
        package: String,
        /// The cause.
        source: KptfileError,
    },
    /// An object of a flat list has no path annotation.
    #[error("object {0} has no path annotation (internal.config.kubernetes.io/path)")]
    NoPath(String),
}

impl Package {
    /// A package from its parts.
    pub fn new(
        path: impl Into<String>,
        kptfile: Kptfile,
        resources: Vec<Value>,
        subpackages: Vec<Package>,
    ) -> Self {
        Self {
            path: path.into(),
            kptfile,
            resources,
            subpackages,
        }
    }

    /// A package whose Kptfile is read from the object with path `Kptfile`
    /// among `resources`.
    ///
    /// Errors: [`PackageError::NoKptfile`] or [`PackageError::Kptfile`].
    pub fn from_resources(
        path: impl Into<String>,
        resources: Vec<Value>,
        subpackages: Vec<Package>,
    ) -> Result<Self, PackageError> {
        let path = path.into();
        let display = super::error::display_package(&path);
        let kptfile_value = resources
            .iter()
            .find(|r| {
                ann::path(r).is_some_and(|p| clean_path(&p) == KPTFILE_NAME)
                    && ann::kind(r) == KPTFILE_KIND
            })
            .ok_or_else(|| PackageError::NoKptfile(display.clone()))?;
        let kptfile =
            Kptfile::from_value(kptfile_value).map_err(|source| PackageError::Kptfile {
                package: display,
                source,
            })?;
        Ok(Self::new(path, kptfile, resources, subpackages))
    }

    /// Splits a flat list of objects whose path annotations are relative to
    /// the root package into a tree: every directory holding a `Kptfile`
    /// object is a package, and each object belongs to the deepest package
    /// directory containing its file (its path is rewritten relative to that
    /// package). Object order within a package is kept.
    ///
    /// Errors: an object without path annotation, no root Kptfile, or an
    /// unreadable Kptfile.
    pub fn from_flat(resources: Vec<Value>) -> Result<Self, PackageError> {
        let mut dirs: BTreeSet<String> = BTreeSet::new();
        for r in &resources {
            let Some(p) = ann::path(r) else {
                return Err(PackageError::NoPath(format!(
                    "{}/{} {}",
                    ann::api_version(r),
                    ann::kind(r),
                    ann::name(r)
                )));
            };
            let p = clean_path(&p);
            let (dir, base) = p.rsplit_once('/').unwrap_or(("", p.as_str()));
            if base == KPTFILE_NAME && ann::kind(r) == KPTFILE_KIND {
                dirs.insert(dir.to_string());
            }
        }
        let mut grouped: BTreeMap<String, Vec<Value>> =
            dirs.iter().map(|d| (d.clone(), Vec::new())).collect();
        grouped.entry(String::new()).or_default();
        for mut r in resources {
            let p = clean_path(&ann::path(&r).unwrap_or_default());
            let owner = dirs
                .iter()
                .filter(|d| d.is_empty() || p.starts_with(&format!("{d}/")))
                .max_by_key(|d| d.len())
                .cloned()
                .unwrap_or_default();
            if !owner.is_empty() {
                let rel = p[owner.len() + 1..].to_string();
                ann::set_path(&mut r, &rel);
            }
            grouped.entry(owner).or_default().push(r);
        }
        build(String::new(), &mut grouped)
    }

    /// `.` for the root, `./<path>` for a subpackage.
    pub fn display(&self) -> String {
        super::error::display_package(&self.path)
    }

    /// The objects of the file at package-relative path `file` (cleaned),
    /// looking into subpackages too, as a file read from disk would; `None`
    /// when no object has that path.
    pub fn file_objects(&self, file: &str) -> Option<Vec<&Value>> {
        let file = clean_path(file);
        let own: Vec<&Value> = self
            .resources
            .iter()
            .filter(|r| ann::path(r).is_some_and(|p| clean_path(&p) == file))
            .collect();
        if !own.is_empty() {
            return Some(own);
        }
        for sub in &self.subpackages {
            let rel = relative_to(&sub.path, &self.path);
            if let Some(rest) = file.strip_prefix(&format!("{rel}/")) {
                return sub.file_objects(rest);
            }
        }
        None
    }
}

/// `child` relative to its ancestor `parent` (both root-relative).
pub(crate) fn relative_to(child: &str, parent: &str) -> String {
    if parent.is_empty() {
        child.to_string()
    } else {
        child
            .strip_prefix(&format!("{parent}/"))
            .unwrap_or(child)
            .to_string()
    }
}

fn build(dir: String, grouped: &mut BTreeMap<String, Vec<Value>>) -> Result<Package, PackageError> {
    let resources = grouped.remove(&dir).unwrap_or_default();
    // Direct subpackages: remaining package dirs under `dir` with no other package dir in between.
    let candidates: Vec<String> = grouped
        .keys()
        .filter(|d| dir.is_empty() || d.starts_with(&format!("{dir}/")))
        .cloned()
        .collect();
    let direct: Vec<String> = candidates
        .iter()
        .filter(|d| {
            !candidates
                .iter()
                .any(|other| other != *d && d.starts_with(&format!("{other}/")))
        })
        .cloned()
        .collect();
    let mut subpackages = Vec::new();
    for d in direct {
        subpackages.push(build(d, grouped)?);
    }
    Package::from_resources(dir, resources, subpackages)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn obj(kind: &str, name: &str, path: &str) -> Value {
        let api = if kind == "Kptfile" {
            "kpt.dev/v1"
        } else {
            "v1"
        };
        let mut v = json!({"apiVersion": api, "kind": kind, "metadata": {"name": name}});
        ann::set_path(&mut v, path);
        v
    }

    #[test]
    fn flat_lists_split_at_kptfiles() {
        let items = vec![
            obj("Kptfile", "root", "Kptfile"),
            obj("ConfigMap", "a", "a.yaml"),
            obj("Kptfile", "db", "db/Kptfile"),
            obj("ConfigMap", "b", "db/b.yaml"),
            obj("ConfigMap", "c", "db/sub/c.yaml"),
            obj("Kptfile", "deep", "db/deep/Kptfile"),
            obj("ConfigMap", "d", "db/deep/x/d.yaml"),
            obj("ConfigMap", "e", "other/e.yaml"),
        ];
        let root = Package::from_flat(items).unwrap();
        assert_eq!(root.kptfile.metadata.name, "root");
        assert_eq!(root.resources.len(), 3);
        let db = &root.subpackages[0];
        assert_eq!(db.path, "db");
        assert_eq!(
            db.resources
                .iter()
                .map(|r| ann::path(r).unwrap())
                .collect::<Vec<_>>(),
            ["Kptfile", "b.yaml", "sub/c.yaml"]
        );
        assert_eq!(db.subpackages[0].path, "db/deep");
        assert_eq!(
            ann::path(&db.subpackages[0].resources[1]).unwrap(),
            "x/d.yaml"
        );
        assert_eq!(root.file_objects("db/deep/x/d.yaml").unwrap().len(), 1);
        assert!(root.file_objects("db/missing.yaml").is_none());
    }

    #[test]
    fn a_root_kptfile_is_required() {
        let err = Package::from_flat(vec![obj("ConfigMap", "a", "a.yaml")]).unwrap_err();
        assert!(matches!(err, PackageError::NoKptfile(ref p) if p == "."));
    }
}
