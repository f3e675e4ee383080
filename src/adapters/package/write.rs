//! Writing a package's files all or nothing, never through a symbolic link.
//!
//! A render changes several files of a package; kpt writes them one after
//! the other, follows symbolic links (a function could write outside the
//! package through one) and leaves half the files rewritten when a write
//! fails. [`commit`] instead:
//!
//! 1. resolves every target's directory from the package root one
//!    component at a time with `openat(O_NOFOLLOW | O_DIRECTORY)`: a
//!    component that is a symbolic link (wherever it points) fails the
//!    commit, so nothing is ever written or removed through a link; missing
//!    directories are created the same way;
//! 2. refuses targets that are symbolic links or directories, and paths with
//!    empty, `.` or `..` components;
//! 3. writes every new text to a temporary file (`O_CREAT | O_EXCL |
//!    O_NOFOLLOW`) next to its target, keeping the target's permissions;
//! 4. keeps each file it will replace or remove as a hard link (or, where
//!    the file system has none, by renaming it aside), renames the
//!    temporary files over their targets, removes pruned files;
//! 5. on any failure, restores every file it replaced or removed, removes
//!    the files and directories it created, and reports the failure; on
//!    success, drops the kept copies.
//!
//! So either every change is in place or the package is as it was.

use std::io::Write;
use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;

use nix::errno::Errno;
use nix::fcntl::{AtFlags, OFlag, openat, renameat};
use nix::sys::stat::{FileStat, Mode, SFlag, fchmod, fstatat, mkdirat};
use nix::unistd::{UnlinkatFlags, linkat, unlinkat};

/// One change to a package directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// Create or replace the file at the package-relative path.
    Write {
        /// Slash-separated path relative to the package root.
        path: String,
        /// The new content.
        text: String,
    },
    /// Remove the file at the package-relative path (a missing file is fine).
    Remove {
        /// Slash-separated path relative to the package root.
        path: String,
    },
}

impl Change {
    fn path(&self) -> &str {
        match self {
            Change::Write { path, .. } | Change::Remove { path } => path,
        }
    }
}

/// Why a commit changed nothing.
#[derive(Debug, thiserror::Error)]
pub enum CommitError {
    /// A path component or target is a symbolic link.
    #[error(
        "{path}: {link} is a symbolic link; render never writes through symbolic links (replace the link with the file itself, or list it in .krmignore)"
    )]
    Symlink {
        /// The file being written.
        path: String,
        /// The component that is a link.
        link: String,
    },
    /// A path that is not a plain relative path inside the package.
    #[error("{0:?} is not a path inside the package")]
    BadPath(String),
    /// A target is a directory, or a component is not one.
    #[error("{path}: {what}")]
    WrongKind {
        /// The file being written.
        path: String,
        /// What is wrong (`… is a directory`).
        what: String,
    },
    /// A file system call failed.
    #[error("{action} {path}: {source}")]
    Io {
        /// What was being done.
        action: &'static str,
        /// The package-relative path.
        path: String,
        /// The cause.
        source: std::io::Error,
    },
}

fn io(action: &'static str, path: &str, e: impl Into<std::io::Error>) -> CommitError {
    CommitError::Io {
        action,
        path: path.to_string(),
        source: e.into(),
    }
}

#[cfg(test)]
thread_local! {
    /// Test hook: make the commit fail after this many renames.
    pub(super) static FAIL_AFTER_RENAMES: std::cell::Cell<Option<usize>> = const { std::cell::Cell::new(None) };
}

/// Applies `changes` to the package directory `root`, all or nothing (see
/// the module docs). `root` itself may be reached through a link (the user
/// named it); nothing below it is.
///
/// Errors: [`CommitError`]; the directory is then as it was (bar a
/// temporary file that could not even be removed, which is reported).
pub fn commit(root: &Path, changes: &[Change]) -> Result<(), CommitError> {
    let root_fd = open_dir_path(root)?;
    let mut dirs = Dirs {
        root: root_fd,
        open: Vec::new(),
        created: Vec::new(),
    };
    let mut plan = Vec::with_capacity(changes.len());
    let result = prepare(&mut dirs, changes, &mut plan).and_then(|()| apply(&dirs, &mut plan));
    if let Err(e) = result {
        rollback(&dirs, &mut plan);
        for dir in dirs.created.iter().rev() {
            let (parent, name) = split(dir);
            if let Ok(fd) = dirs.fd(parent) {
                let _ = unlinkat(fd, name, UnlinkatFlags::RemoveDir);
            }
        }
        return Err(e);
    }
    for step in &plan {
        if let Some(bak) = &step.backup
            && let Ok(fd) = dirs.fd(step.dir.as_str())
        {
            let _ = unlinkat(fd, bak.as_str(), UnlinkatFlags::NoRemoveDir);
        }
    }
    Ok(())
}

/// One planned change with its state.
struct Step {
    /// Package-relative directory and file name.
    dir: String,
    name: String,
    path: String,
    /// New content (None: remove).
    text: Option<String>,
    /// The target exists (and its mode).
    existing: Option<u32>,
    /// Temporary file holding the new content.
    temp: Option<String>,
    /// Where the old file is kept during the commit.
    backup: Option<String>,
    /// The old file was renamed aside (not linked): it must be put back.
    renamed_aside: bool,
    /// The change is in place.
    done: bool,
}

struct Dirs {
    root: OwnedFd,
    /// Opened directories by package-relative path.
    open: Vec<(String, OwnedFd)>,
    /// Directories created, in creation order.
    created: Vec<String>,
}

impl Dirs {
    fn fd(&self, dir: &str) -> Result<std::os::fd::BorrowedFd<'_>, CommitError> {
        if dir.is_empty() {
            return Ok(self.root.as_fd());
        }
        self.open
            .iter()
            .find(|(d, _)| d == dir)
            .map(|(_, fd)| fd.as_fd())
            .ok_or_else(|| CommitError::BadPath(dir.to_string()))
    }

    /// Opens (creating when `create`) the package-relative directory `dir`,
    /// refusing symbolic links on the way.
    fn ensure(&mut self, dir: &str, path: &str, create: bool) -> Result<bool, CommitError> {
        if dir.is_empty() || self.open.iter().any(|(d, _)| d == dir) {
            return Ok(true);
        }
        let (parent, name) = split(dir);
        if !self.ensure(parent, path, create)? {
            return Ok(false);
        }
        let parent_fd = self.fd(parent)?;
        let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
        let fd = match openat(parent_fd, name, flags, Mode::empty()) {
            Ok(fd) => fd,
            Err(Errno::ENOENT) if create => {
                mkdirat(parent_fd, name, Mode::from_bits_truncate(0o755))
                    .map_err(|e| io("creating directory", dir, e))?;
                self.created.push(dir.to_string());
                openat(self.fd(parent)?, name, flags, Mode::empty())
                    .map_err(|e| io("opening directory", dir, e))?
            }
            Err(Errno::ENOENT) => return Ok(false),
            Err(e) => {
                return Err(match stat_nofollow(parent_fd, name) {
                    Some(st) if kind(&st) == SFlag::S_IFLNK => CommitError::Symlink {
                        path: path.to_string(),
                        link: dir.to_string(),
                    },
                    Some(_) => CommitError::WrongKind {
                        path: path.to_string(),
                        what: format!("{dir} is not a directory"),
                    },
                    None => io("opening directory", dir, e),
                });
            }
        };
        self.open.push((dir.to_string(), fd));
        Ok(true)
    }
}

/// `dir/name` → (`dir`, `name`); a bare name → (`""`, name).
fn split(path: &str) -> (&str, &str) {
    path.rsplit_once('/').unwrap_or(("", path))
}

fn kind(st: &FileStat) -> SFlag {
    SFlag::from_bits_truncate(st.st_mode & SFlag::S_IFMT.bits())
}

fn stat_nofollow(dir: std::os::fd::BorrowedFd<'_>, name: &str) -> Option<FileStat> {
    fstatat(dir, name, AtFlags::AT_SYMLINK_NOFOLLOW).ok()
}

fn open_dir_path(root: &Path) -> Result<OwnedFd, CommitError> {
    openat(
        nix::fcntl::AT_FDCWD,
        root,
        OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| io("opening directory", &root.display().to_string(), e))
}

/// Checks every path and writes the temporary files.
fn prepare(dirs: &mut Dirs, changes: &[Change], plan: &mut Vec<Step>) -> Result<(), CommitError> {
    for (n, change) in changes.iter().enumerate() {
        let path = change.path();
        if path.is_empty()
            || path.starts_with('/')
            || path
                .split('/')
                .any(|c| c.is_empty() || c == "." || c == "..")
        {
            return Err(CommitError::BadPath(path.to_string()));
        }
        let (dir, name) = split(path);
        let write = matches!(change, Change::Write { .. });
        if !dirs.ensure(dir, path, write)? {
            continue; // removing a file whose directory is gone: nothing to do
        }
        let fd = dirs.fd(dir)?;
        let existing = match stat_nofollow(fd, name) {
            None => None,
            Some(st) => match kind(&st) {
                SFlag::S_IFREG => Some(st.st_mode & 0o7777),
                SFlag::S_IFLNK if write => {
                    return Err(CommitError::Symlink {
                        path: path.to_string(),
                        link: path.to_string(),
                    });
                }
                SFlag::S_IFLNK => Some(0),
                SFlag::S_IFDIR => {
                    return Err(CommitError::WrongKind {
                        path: path.to_string(),
                        what: format!("{path} is a directory"),
                    });
                }
                _ => {
                    return Err(CommitError::WrongKind {
                        path: path.to_string(),
                        what: format!("{path} is not a regular file"),
                    });
                }
            },
        };
        let mut step = Step {
            dir: dir.to_string(),
            name: name.to_string(),
            path: path.to_string(),
            text: None,
            existing,
            temp: None,
            backup: None,
            renamed_aside: false,
            done: false,
        };
        if let Change::Write { text, .. } = change {
            let temp = aside_name(name, n, "tmp");
            let file = openat(
                fd,
                temp.as_str(),
                OFlag::O_WRONLY
                    | OFlag::O_CREAT
                    | OFlag::O_EXCL
                    | OFlag::O_NOFOLLOW
                    | OFlag::O_CLOEXEC,
                Mode::from_bits_truncate(0o644),
            )
            .map_err(|e| io("creating a temporary file for", path, e))?;
            step.temp = Some(temp);
            step.text = Some(text.clone());
            plan.push(step);
            if let Some(mode) = existing.filter(|m| *m != 0) {
                fchmod(&file, Mode::from_bits_truncate(mode))
                    .map_err(|e| io("setting the permissions of", path, e))?;
            }
            let mut file = std::fs::File::from(file);
            file.write_all(text.as_bytes())
                .and_then(|()| file.flush())
                .map_err(|e| io("writing", path, e))?;
        } else if existing.is_some() {
            plan.push(step);
        }
    }
    Ok(())
}

/// A name next to `name` for a temporary or kept file.
fn aside_name(name: &str, n: usize, what: &str) -> String {
    format!(".{name}.krm-fn-runner-{}-{n}.{what}", std::process::id())
}

/// Keeps the old files, puts the new ones in place, removes pruned files.
fn apply(dirs: &Dirs, plan: &mut [Step]) -> Result<(), CommitError> {
    for (n, step) in plan.iter_mut().enumerate() {
        let fd = dirs.fd(&step.dir)?;
        if step.existing.is_some() {
            let bak = aside_name(&step.name, n, "bak");
            match linkat(fd, step.name.as_str(), fd, bak.as_str(), AtFlags::empty()) {
                Ok(()) => {}
                Err(_) => {
                    renameat(fd, step.name.as_str(), fd, bak.as_str())
                        .map_err(|e| io("keeping the old", &step.path, e))?;
                    step.renamed_aside = true;
                }
            }
            step.backup = Some(bak);
        }
        // `n` steps are done by now.
        #[cfg(test)]
        if FAIL_AFTER_RENAMES.with(|f| f.get()) == Some(n) {
            return Err(io(
                "writing",
                &step.path,
                std::io::Error::other("injected failure"),
            ));
        }
        match &step.temp {
            Some(temp) => {
                renameat(fd, temp.as_str(), fd, step.name.as_str())
                    .map_err(|e| io("replacing", &step.path, e))?;
                step.temp = None;
            }
            None if !step.renamed_aside => {
                unlinkat(fd, step.name.as_str(), UnlinkatFlags::NoRemoveDir)
                    .map_err(|e| io("deleting", &step.path, e))?;
            }
            None => {}
        }
        step.done = true;
    }
    Ok(())
}

/// Undoes whatever [`apply`] did and removes temporary files.
fn rollback(dirs: &Dirs, plan: &mut [Step]) {
    for step in plan.iter_mut().rev() {
        let Ok(fd) = dirs.fd(&step.dir) else {
            continue;
        };
        if let Some(temp) = step.temp.take() {
            let _ = unlinkat(fd, temp.as_str(), UnlinkatFlags::NoRemoveDir);
        }
        match (&step.backup, step.done || step.renamed_aside) {
            (Some(bak), true) => {
                let _ = renameat(fd, bak.as_str(), fd, step.name.as_str());
            }
            (Some(bak), false) => {
                let _ = unlinkat(fd, bak.as_str(), UnlinkatFlags::NoRemoveDir);
            }
            (None, true) => {
                // A new file: remove it.
                let _ = unlinkat(fd, step.name.as_str(), UnlinkatFlags::NoRemoveDir);
            }
            (None, false) => {}
        }
        step.backup = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tree() -> tempfile::TempDir {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("a.yaml"), "a\n").unwrap();
        std::fs::write(d.path().join("b.yaml"), "b\n").unwrap();
        std::fs::create_dir(d.path().join("sub")).unwrap();
        std::fs::write(d.path().join("sub/c.yaml"), "c\n").unwrap();
        d
    }

    fn listing(dir: &Path) -> Vec<(String, String)> {
        let mut out = Vec::new();
        for e in walkdir(dir) {
            let rel = e.strip_prefix(dir).unwrap().display().to_string();
            let content = std::fs::read_to_string(&e).unwrap_or_else(|_| "<dir>".into());
            out.push((rel, content));
        }
        out.sort();
        out
    }

    fn walkdir(dir: &Path) -> Vec<std::path::PathBuf> {
        let mut out = Vec::new();
        for e in std::fs::read_dir(dir).unwrap().flatten() {
            let p = e.path();
            out.push(p.clone());
            if e.file_type().unwrap().is_dir() {
                out.extend(walkdir(&p));
            }
        }
        out
    }

    fn changes() -> Vec<Change> {
        vec![
            Change::Write {
                path: "a.yaml".into(),
                text: "A\n".into(),
            },
            Change::Remove {
                path: "b.yaml".into(),
            },
            Change::Write {
                path: "new/dir/d.yaml".into(),
                text: "D\n".into(),
            },
            Change::Write {
                path: "sub/c.yaml".into(),
                text: "C\n".into(),
            },
        ]
    }

    #[test]
    fn every_change_lands() {
        let d = tree();
        commit(d.path(), &changes()).unwrap();
        assert_eq!(
            listing(d.path()),
            [
                ("a.yaml".into(), "A\n".into()),
                ("new".into(), "<dir>".into()),
                ("new/dir".into(), "<dir>".into()),
                ("new/dir/d.yaml".into(), "D\n".into()),
                ("sub".into(), "<dir>".into()),
                ("sub/c.yaml".into(), "C\n".into()),
            ]
        );
    }

    #[test]
    fn a_failure_midway_leaves_the_directory_as_it_was() {
        for after in 0..4 {
            let d = tree();
            let before = listing(d.path());
            FAIL_AFTER_RENAMES.with(|f| f.set(Some(after)));
            let err = commit(d.path(), &changes()).unwrap_err();
            FAIL_AFTER_RENAMES.with(|f| f.set(None));
            assert!(err.to_string().contains("injected failure"), "{err}");
            assert_eq!(listing(d.path()), before, "failure after {after} renames");
        }
    }

    #[test]
    fn symbolic_links_are_never_written_through() {
        let d = tree();
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("x.yaml"), "outside\n").unwrap();
        std::os::unix::fs::symlink(outside.path(), d.path().join("linkdir")).unwrap();
        std::os::unix::fs::symlink(outside.path().join("x.yaml"), d.path().join("link.yaml"))
            .unwrap();
        let before = listing(d.path());
        for path in ["linkdir/new.yaml", "link.yaml", "linkdir/x.yaml"] {
            let err = commit(
                d.path(),
                &[
                    Change::Write {
                        path: "a.yaml".into(),
                        text: "changed\n".into(),
                    },
                    Change::Write {
                        path: path.into(),
                        text: "evil\n".into(),
                    },
                ],
            )
            .unwrap_err();
            assert!(matches!(err, CommitError::Symlink { .. }), "{path}: {err}");
            assert!(err.to_string().contains("symbolic link"), "{err}");
        }
        assert_eq!(listing(d.path()), before);
        assert_eq!(
            listing(outside.path()),
            [("x.yaml".into(), "outside\n".into())]
        );
        for bad in ["../x.yaml", "/etc/x", "a//b", "./a.yaml"] {
            assert!(matches!(
                commit(
                    d.path(),
                    &[Change::Write {
                        path: bad.into(),
                        text: String::new()
                    }]
                ),
                Err(CommitError::BadPath(_))
            ));
        }
    }

    #[test]
    fn a_directory_where_a_file_should_be_fails_before_anything_changes() {
        let d = tree();
        std::fs::remove_file(d.path().join("b.yaml")).unwrap();
        std::fs::create_dir(d.path().join("b.yaml")).unwrap();
        let before = listing(d.path());
        let err = commit(
            d.path(),
            &[
                Change::Write {
                    path: "a.yaml".into(),
                    text: "A\n".into(),
                },
                Change::Write {
                    path: "b.yaml".into(),
                    text: "B\n".into(),
                },
            ],
        )
        .unwrap_err();
        assert!(err.to_string().contains("b.yaml is a directory"), "{err}");
        assert_eq!(listing(d.path()), before);
    }

    #[test]
    fn permissions_are_kept() {
        use std::os::unix::fs::PermissionsExt;
        let d = tree();
        std::fs::set_permissions(
            d.path().join("a.yaml"),
            std::fs::Permissions::from_mode(0o600),
        )
        .unwrap();
        commit(
            d.path(),
            &[Change::Write {
                path: "a.yaml".into(),
                text: "A\n".into(),
            }],
        )
        .unwrap();
        let mode = std::fs::metadata(d.path().join("a.yaml"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
    }
}
