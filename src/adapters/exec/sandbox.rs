//! The runner's side of the function sandbox: what the kernel offers
//! (probed once, one warning per missing layer), which paths a function may
//! read, its per-call scratch directory, and the [`LayerSpec`] each call
//! sends to its supervisor, which applies the layers in the function
//! process before `exec` (`super::layers`).

use std::io;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use super::layers::{self, DEVICE, LANDLOCK, NO_NETWORK, NO_NEW_PRIVS, READ, SYSCALLS, WRITE};
pub use crate::domain::sandbox::SandboxAllow;

/// One call's sandbox as its supervisor reads it (layer bits and Landlock
/// rules); the default is no layer at all.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LayerSpec(pub(crate) Vec<u8>);

impl LayerSpec {
    /// The spec's bytes (`super::layers::Spec`).
    pub(crate) fn bytes(&self) -> &[u8] {
        &self.0
    }
}

/// What the running kernel offers the sandbox.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Support {
    /// The Landlock ABI version, `None` without Landlock.
    pub landlock_abi: Option<u32>,
    /// Whether seccomp filters can be installed.
    pub seccomp: bool,
}

/// The Landlock ABI that scopes signals and abstract Unix sockets (Linux 6.12).
const SCOPED_ABI: u32 = 6;

/// What the kernel offers, probed on first use; each missing layer is
/// logged then as one warning saying what functions can do without it
/// (see [`support_warnings`]).
pub fn support() -> Support {
    static SUPPORT: OnceLock<Support> = OnceLock::new();
    *SUPPORT.get_or_init(|| {
        let support = probe();
        for warning in support_warnings(support) {
            tracing::warn!("{warning}");
        }
        support
    })
}

fn probe() -> Support {
    // SAFETY: system calls that only report (a null attribute with the
    // version flag; a read of an action's availability).
    unsafe {
        let abi = libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<u8>(),
            0usize,
            1u32, // LANDLOCK_CREATE_RULESET_VERSION
        );
        let errno_action: u32 = libc::SECCOMP_RET_ERRNO;
        let seccomp = libc::syscall(
            libc::SYS_seccomp,
            libc::SECCOMP_GET_ACTION_AVAIL,
            0u32,
            &errno_action as *const u32,
        ) == 0;
        Support {
            landlock_abi: (abi > 0).then_some(abi as u32),
            seccomp,
        }
    }
}

/// The warnings for what `support` lacks: one per missing layer.
pub fn support_warnings(support: Support) -> Vec<String> {
    let mut warnings = Vec::new();
    match support.landlock_abi {
        None => warnings.push(
            "function sandbox: this kernel has no Landlock (Linux 5.13 or later with landlock \
             in its lsm= list); functions may read and write every file this runner can, its \
             service-account token and registry credentials included, and signal it"
                .to_string(),
        ),
        Some(abi) if abi < SCOPED_ABI => warnings.push(format!(
            "function sandbox: this kernel's Landlock is ABI {abi}; files are confined, but \
             functions may still signal this runner and reach abstract Unix sockets outside \
             their call (ABI {SCOPED_ABI}, Linux 6.12, scopes both)"
        )),
        Some(_) => {}
    }
    if !support.seccomp {
        warnings.push(
            "function sandbox: this kernel has no seccomp filters (CONFIG_SECCOMP_FILTER); \
             functions may ptrace, renice, prlimit or chrt other processes of this user, \
             this runner included, and open network sockets"
                .to_string(),
        );
    }
    warnings
}

/// The system paths an exec function may read and execute beneath: the
/// programs and libraries a dynamic binary or a script interpreter needs,
/// and the few files of `/etc` the C library reads (name service, time
/// zone, CA certificates for a function allowed the network). Missing ones
/// are left out.
pub const SYSTEM_READ: &[&str] = &[
    "/usr",
    "/lib",
    "/lib32",
    "/lib64",
    "/libx32",
    "/bin",
    "/sbin",
    "/etc/ld.so.cache",
    "/etc/ld.so.conf",
    "/etc/ld.so.conf.d",
    "/etc/localtime",
    "/etc/passwd",
    "/etc/group",
    "/etc/nsswitch.conf",
    "/etc/host.conf",
    "/etc/hosts",
    "/etc/resolv.conf",
    "/etc/gai.conf",
    "/etc/ssl",
    "/etc/ca-certificates",
    "/etc/pki",
    "/etc/mime.types",
];

/// The device files a function may read and write.
pub const DEVICES: &[&str] = &[
    "/dev/null",
    "/dev/zero",
    "/dev/full",
    "/dev/random",
    "/dev/urandom",
];

/// The paths kept from a wrapper-server function, whose image is otherwise
/// readable whole: the kernel's views of processes and devices, and where
/// Kubernetes and Porch mount secrets.
pub const WRAPPER_HIDDEN: &[&str] = &[
    "/proc",
    "/sys",
    "/dev",
    "/var/run/secrets",
    "/run/secrets",
    "/var/tmp/config-secret",
    "/var/tmp/tls-secret",
];

/// How functions are sandboxed: the layers turned off for every function
/// (`--sandbox-allow`), the paths they may read, and where their scratch
/// directories are made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sandbox {
    /// Layers turned off for every function; a function's own
    /// `sandbox.allow` adds to these.
    pub allow: SandboxAllow,
    /// Paths a function may read and execute beneath (besides its binary's
    /// directory).
    read: Vec<PathBuf>,
    /// The spec's rules for [`Sandbox::read`] and [`DEVICES`], the same for
    /// every call: encoded once.
    static_rules: Vec<u8>,
    /// Where each call's scratch directory is made; `None` when no
    /// writable place was found (the function then writes nowhere).
    scratch_base: Option<PathBuf>,
}

impl Sandbox {
    /// The exec runtime's sandbox: [`SYSTEM_READ`] plus `extra_read`, and
    /// scratch directories in the system temporary directory.
    pub fn exec(allow: SandboxAllow, extra_read: &[PathBuf]) -> Self {
        let mut read: Vec<PathBuf> = SYSTEM_READ.iter().map(PathBuf::from).collect();
        // Debian's Python reads its sitecustomize.py from /etc/python3.X.
        if let Ok(entries) = std::fs::read_dir("/etc") {
            let mut python: Vec<PathBuf> = entries
                .flatten()
                .filter(|e| e.file_name().to_string_lossy().starts_with("python"))
                .map(|e| e.path())
                .collect();
            python.sort();
            read.extend(python);
        }
        read.extend(extra_read.iter().cloned());
        Self::new(allow, without_nested(read), std::env::temp_dir())
    }

    fn new(allow: SandboxAllow, read: Vec<PathBuf>, tmp: PathBuf) -> Self {
        use std::os::unix::ffi::OsStrExt;
        let rules: Vec<(u8, &[u8])> = read
            .iter()
            .map(|p| (READ, p.as_os_str().as_bytes()))
            .chain(DEVICES.iter().map(|d| (DEVICE, d.as_bytes())))
            .collect();
        // Paths with a NUL byte cannot be named: left out.
        let static_rules = rules
            .iter()
            .filter_map(|r| layers::Spec::encode(0, &[*r]))
            .flat_map(|bytes| bytes.into_iter().skip(1))
            .collect();
        Self {
            allow,
            read,
            static_rules,
            scratch_base: scratch_base(&tmp),
        }
    }

    /// The wrapper server's sandbox (inside a function pod, whose image is
    /// the function's own): every path readable but [`WRAPPER_HIDDEN`] and
    /// the temporary directory (other calls' scratch directories);
    /// scratch directories in the system temporary directory when it is
    /// writable (a `FROM scratch` image has none: the function then writes
    /// nowhere, with a warning).
    pub fn wrapper(allow: SandboxAllow) -> Self {
        let tmp = std::env::temp_dir();
        let hidden: Vec<PathBuf> = WRAPPER_HIDDEN
            .iter()
            .map(PathBuf::from)
            .chain([tmp.clone()])
            .map(|p| std::fs::canonicalize(&p).unwrap_or(p))
            .collect();
        Self::new(allow, all_but(Path::new("/"), &hidden), tmp)
    }

    /// The layers of one call of `program` (whose directory it may read and
    /// execute beneath, as it may `extra_read`) with `per_function` turned
    /// off besides [`Sandbox::allow`]; with Landlock on, a new scratch
    /// directory the function may write, removed when the returned value is
    /// dropped.
    ///
    /// Errors: the scratch directory cannot be made.
    pub(crate) fn call(
        &self,
        program: &Path,
        path_env: Option<&std::ffi::OsStr>,
        per_function: SandboxAllow,
        extra_read: &[PathBuf],
    ) -> io::Result<CallSandbox> {
        use std::os::unix::ffi::OsStrExt;
        let allow = self.allow.union(per_function);
        let support = support();
        let mut bits = 0;
        if !allow.new_privileges {
            bits |= NO_NEW_PRIVS;
        }
        if !allow.filesystem && support.landlock_abi.is_some() {
            bits |= LANDLOCK;
        }
        if !allow.syscalls && support.seccomp {
            bits |= SYSCALLS;
        }
        if !allow.network && support.seccomp {
            bits |= NO_NETWORK;
        }
        if bits & LANDLOCK == 0 {
            return Ok(CallSandbox {
                spec: spec(bits, &[])?,
                scratch: None,
            });
        }
        let scratch = match &self.scratch_base {
            Some(base) => Some(Scratch::new(base)?),
            None => None,
        };
        let dirs = program_dirs(program, path_env);
        let mut rules: Vec<(u8, &[u8])> = dirs
            .iter()
            .chain(extra_read)
            .map(|p| (READ, p.as_os_str().as_bytes()))
            .collect();
        if let Some(s) = &scratch {
            rules.push((WRITE, s.0.as_os_str().as_bytes()));
        }
        let mut spec = spec(bits, &rules)?;
        // The rules of every call after the layer bits.
        spec.0.splice(1..1, self.static_rules.iter().copied());
        Ok(CallSandbox { spec, scratch })
    }
}

fn spec(bits: u8, rules: &[(u8, &[u8])]) -> io::Result<LayerSpec> {
    layers::Spec::encode(bits, rules)
        .map(LayerSpec)
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "nul byte in a path"))
}

/// `paths` without those missing and those beneath another one's target
/// (links resolved: `/lib` is `/usr/lib` on a merged-`/usr` system), each
/// as named; a shorter list of rules that gives the same access.
fn without_nested(paths: Vec<PathBuf>) -> Vec<PathBuf> {
    let mut kept: Vec<(PathBuf, PathBuf)> = Vec::new();
    for path in paths {
        let Ok(real) = std::fs::canonicalize(&path) else {
            continue;
        };
        if kept.iter().any(|(_, k)| real.starts_with(k)) {
            continue;
        }
        kept.push((path, real));
    }
    kept.into_iter().map(|(named, _)| named).collect()
}

/// The directories of `program` (found on `path_env` when it has no `/`),
/// as named and with links resolved.
fn program_dirs(program: &Path, path_env: Option<&std::ffi::OsStr>) -> Vec<PathBuf> {
    let found = if program.components().count() > 1 || program.is_absolute() {
        Some(program.to_path_buf())
    } else {
        path_env.and_then(|path| {
            std::env::split_paths(path)
                .map(|d| d.join(program))
                .find(|c| c.is_file())
        })
    };
    let Some(found) = found else {
        return Vec::new();
    };
    let mut dirs: Vec<PathBuf> = found.parent().map(Path::to_path_buf).into_iter().collect();
    if let Some(real) = std::fs::canonicalize(&found)
        .ok()
        .and_then(|r| r.parent().map(Path::to_path_buf))
        && !dirs.contains(&real)
    {
        dirs.push(real);
    }
    dirs
}

/// Beneath `root`, the entries that hold none of `hidden` (absolute,
/// links resolved): each directory on the way to a hidden path is opened
/// up into its other entries, so that the list covers everything but them.
fn all_but(root: &Path, hidden: &[PathBuf]) -> Vec<PathBuf> {
    if hidden.iter().any(|h| h == root) {
        return Vec::new();
    }
    if !hidden.iter().any(|h| h.starts_with(root)) {
        return vec![root.to_path_buf()];
    }
    let Ok(entries) = std::fs::read_dir(root) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    let mut entries: Vec<PathBuf> = entries.flatten().map(|e| e.path()).collect();
    entries.sort();
    for entry in entries {
        // Landlock follows a link to what it names: a link to a hidden
        // path, or to a directory holding one, is left out (the target has
        // its own entry where it really is).
        let is_link = std::fs::symlink_metadata(&entry).is_ok_and(|m| m.file_type().is_symlink());
        if is_link {
            let target = std::fs::canonicalize(&entry).unwrap_or_else(|_| entry.clone());
            if hidden
                .iter()
                .any(|h| h.starts_with(&target) || target.starts_with(h))
            {
                continue;
            }
        }
        out.extend(all_but(&entry, hidden));
    }
    out
}

/// A writable directory for scratch directories: `base` when one can be
/// made there (warned about once when not).
fn scratch_base(base: &Path) -> Option<PathBuf> {
    match Scratch::new(base) {
        Ok(_) => Some(base.to_path_buf()),
        Err(e) => {
            static WARNED: OnceLock<()> = OnceLock::new();
            WARNED.get_or_init(|| {
                tracing::warn!(
                    dir = %base.display(),
                    error = %e,
                    "function sandbox: no scratch directory can be made here; functions will \
                     write nowhere (set TMPDIR to a writable directory)"
                );
            });
            None
        }
    }
}

/// One call's sandbox: its spec and its scratch directory.
#[derive(Debug)]
pub(crate) struct CallSandbox {
    /// What the supervisor applies.
    pub(crate) spec: LayerSpec,
    /// The call's scratch directory, when it has one.
    pub(crate) scratch: Option<Scratch>,
}

/// A call's private scratch directory (mode 0700, a random name), removed
/// with everything in it when dropped (after the call's whole process tree
/// is gone).
#[derive(Debug)]
pub(crate) struct Scratch(PathBuf);

impl Scratch {
    fn new(base: &Path) -> io::Result<Self> {
        use std::os::unix::fs::DirBuilderExt;
        let path = base.join(format!("krm-fn-{:016x}", rand::random::<u64>()));
        std::fs::DirBuilder::new().mode(0o700).create(&path)?;
        Ok(Self(path))
    }

    /// The directory.
    pub(crate) fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn all_but_covers_everything_except_the_hidden_paths() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        for d in ["a/b/c", "a/d", "e"] {
            std::fs::create_dir_all(root.join(d)).unwrap();
        }
        std::fs::write(root.join("a/f"), "").unwrap();
        // Links to a hidden path or to a directory holding one.
        std::os::unix::fs::symlink(root.join("a"), root.join("a/d/up")).unwrap();
        std::os::unix::fs::symlink(root.join("e"), root.join("a/to-e")).unwrap();
        let mut got = all_but(root, &[root.join("a/b"), root.join("e")]);
        got.sort();
        assert_eq!(got, [root.join("a/d"), root.join("a/f")]);
        assert_eq!(all_but(root, &[]), [root.to_path_buf()]);
        assert!(all_but(root, &[root.to_path_buf()]).is_empty());
    }

    #[test]
    fn every_missing_layer_is_one_warning() {
        let full = Support {
            landlock_abi: Some(7),
            seccomp: true,
        };
        assert!(support_warnings(full).is_empty());
        let none = support_warnings(Support {
            landlock_abi: None,
            seccomp: false,
        });
        assert_eq!(none.len(), 2, "{none:?}");
        assert!(none[0].contains("no Landlock") && none[1].contains("no seccomp"));
        let old = support_warnings(Support {
            landlock_abi: Some(4),
            seccomp: true,
        });
        assert_eq!(old.len(), 1);
        assert!(old[0].contains("ABI 4"), "{old:?}");
    }

    #[test]
    fn a_scratch_directory_goes_with_its_call() {
        let dir = tempfile::tempdir().unwrap();
        let s = Scratch::new(dir.path()).unwrap();
        let path = s.path().to_path_buf();
        std::fs::write(path.join("x"), "y").unwrap();
        drop(s);
        assert!(!path.exists());
    }
}
