//! Unix socket paths the server listens on: claimed only when nothing of
//! value is there, and removed on exit only while they are still ours.
//!
//! A listening Unix socket is a file. Binding fails when the path exists, so
//! a server that stopped without cleaning up (killed, crashed) leaves a dead
//! socket behind that the next start must replace. Replacing blindly would
//! delete whatever a mistyped `--listen unix:PATH` names (a config file, a
//! database) or take over the socket of a server that is still running,
//! leaving it unreachable. So: a path that is not a socket is never touched,
//! a socket something still accepts on is never touched, and only a socket
//! nobody accepts on (connecting is refused) is replaced. TCP needs none of
//! this; the kernel refuses a second listener with "address in use".

use std::io;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};

/// The socket file a server bound: its path and identity (device, inode and
/// change time, since a file system may hand a freed inode number to the
/// next file at once), so that it is removed on exit only if it was not
/// replaced meanwhile.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SocketFile {
    path: PathBuf,
    identity: Identity,
}

/// Device, inode and change time (seconds, nanoseconds) of a file.
type Identity = (u64, u64, i64, i64);

fn identity(meta: &std::fs::Metadata) -> Identity {
    (meta.dev(), meta.ino(), meta.ctime(), meta.ctime_nsec())
}

/// Makes `path` free for a new listener: nothing there, or a dead socket
/// (removed here).
///
/// Errors, each saying what to do:
/// - [`io::ErrorKind::AlreadyExists`]: the path exists and is not a socket
///   (left untouched);
/// - [`io::ErrorKind::AddrInUse`]: a process accepts connections on the
///   socket (left untouched);
/// - other kinds: the path cannot be inspected, probed or removed.
pub fn claim(path: &Path) -> io::Result<()> {
    let meta = match std::fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    };
    if !meta.file_type().is_socket() {
        return Err(io::Error::new(
            io::ErrorKind::AlreadyExists,
            format!(
                "{} exists and is not a socket; it was left untouched: \
                 remove it yourself or choose another socket path",
                path.display()
            ),
        ));
    }
    match std::os::unix::net::UnixStream::connect(path) {
        Ok(_) => Err(io::Error::new(
            io::ErrorKind::AddrInUse,
            format!(
                "another process is listening on {}; stop it or choose another socket path",
                path.display()
            ),
        )),
        // Nobody accepts: a socket left by a server that is gone.
        Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => {
            tracing::info!(path = %path.display(), "replacing a dead socket left by a previous run");
            std::fs::remove_file(path)
        }
        Err(e) => Err(io::Error::new(
            e.kind(),
            format!(
                "cannot tell whether a process is listening on {}: {e}; \
                 remove the socket if it is stale, or choose another socket path",
                path.display()
            ),
        )),
    }
}

impl SocketFile {
    /// Records the identity of the socket just bound at `path`.
    ///
    /// Errors: the path cannot be inspected.
    pub fn bound(path: &Path) -> io::Result<Self> {
        let meta = std::fs::symlink_metadata(path)?;
        Ok(Self {
            path: path.to_path_buf(),
            identity: identity(&meta),
        })
    }

    /// The socket's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Removes the socket file if the path still holds the socket this
    /// server bound (not one another server put there since).
    pub fn remove_if_ours(&self) {
        let ours = std::fs::symlink_metadata(&self.path)
            .is_ok_and(|m| m.file_type().is_socket() && identity(&m) == self.identity);
        if ours {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_path_is_free() {
        let dir = tempfile::tempdir().unwrap();
        claim(&dir.path().join("s.sock")).unwrap();
    }

    #[test]
    fn a_regular_file_is_never_removed() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("notes.txt");
        std::fs::write(&path, "keep me").unwrap();
        let e = claim(&path).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::AlreadyExists);
        assert!(e.to_string().contains("is not a socket"), "{e}");
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "keep me");
        // A directory neither.
        let e = claim(dir.path()).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::AlreadyExists);
    }

    #[test]
    fn a_live_socket_is_refused_and_a_dead_one_replaced() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.sock");
        let live = std::os::unix::net::UnixListener::bind(&path).unwrap();
        let e = claim(&path).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::AddrInUse);
        assert!(e.to_string().contains(&path.display().to_string()), "{e}");
        assert!(path.exists());
        drop(live); // the file stays, nobody accepts any more
        assert!(path.exists());
        claim(&path).unwrap();
        assert!(!path.exists());
    }

    #[test]
    fn only_our_own_socket_is_removed_on_exit() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.sock");
        let first = std::os::unix::net::UnixListener::bind(&path).unwrap();
        let ours = SocketFile::bound(&path).unwrap();
        drop(first);
        std::fs::remove_file(&path).unwrap();
        // Another server's socket, at the same path (perhaps the same inode).
        std::thread::sleep(std::time::Duration::from_millis(10));
        let _other = std::os::unix::net::UnixListener::bind(&path).unwrap();
        ours.remove_if_ours();
        assert!(path.exists(), "another server's socket was removed");
        let theirs = SocketFile::bound(&path).unwrap();
        theirs.remove_if_ours();
        assert!(!path.exists());
    }
}
