//! The runner's side of the function sandbox: what the kernel offers
//! (probed once, one warning per missing layer), which paths a function may
//! read, its per-call scratch directory, and the [`LayerSpec`] each call
//! sends to its supervisor, which applies the layers in the function
//! process before `exec` (`crate::supervisor::layers`).

use std::io;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use crate::domain::sandbox::{READ_RULES_EXEC, READ_RULES_RENDER, credential_stores};
pub use crate::domain::sandbox::{SandboxAllow, SandboxGrant};
use crate::supervisor::layers::{
    self, DEVICE, LANDLOCK, NO_NETWORK, NO_NEW_PRIVS, READ, SYSCALLS, WRITE,
};

/// One call's sandbox as its supervisor reads it (layer bits and Landlock
/// rules); the default is no layer at all.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LayerSpec(pub(crate) Vec<u8>);

impl LayerSpec {
    /// The spec's bytes (`crate::supervisor::layers::Spec`).
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

/// Which read rules a [`Sandbox`] gives its functions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ReadRules {
    /// [`SYSTEM_READ`] and the program's directory (`serve`, `eval`).
    Exec,
    /// Everything but the credential stores (`render`, as kpt runs exec
    /// functions unconfined).
    Render,
    /// The image but [`WRAPPER_HIDDEN`] (the wrapper server).
    Wrapper,
}

/// How functions are sandboxed: what every function is granted
/// (`--sandbox-allow`, `--sandbox-read`, `--sandbox-write`), the paths
/// they may read, and where their scratch directories are made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sandbox {
    /// Granted to every function; a function's own `sandbox:` adds to it.
    grant: SandboxGrant,
    /// Which rules these are.
    rules: ReadRules,
    /// Paths a function may read and execute beneath (besides its binary's
    /// directory).
    read: Vec<PathBuf>,
    /// Paths, links resolved, that no rule for the files a command line
    /// names may open up again (`render`'s credential stores).
    refused: Vec<PathBuf>,
    /// The spec's rules for [`Sandbox::read`], [`DEVICES`] and the granted
    /// writes, the same for every call: encoded once.
    static_rules: Vec<u8>,
    /// Where each call's scratch directory is made; `None` when no
    /// writable place was found (the function then writes nowhere).
    scratch_base: Option<PathBuf>,
}

impl Sandbox {
    /// The exec runtime's sandbox (`serve`, `eval`): [`SYSTEM_READ`] plus
    /// `grant`'s reads, `grant`'s writes, and scratch directories in the
    /// system temporary directory.
    pub fn exec(grant: &SandboxGrant) -> Self {
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
        read.extend(grant.read.iter().cloned());
        Self::new(
            grant,
            ReadRules::Exec,
            without_nested(read),
            Vec::new(),
            std::env::temp_dir(),
        )
    }

    /// `render`'s sandbox, for the exec functions a kpt user runs (which
    /// kpt runs unconfined): everything this process could read but the
    /// credential stores — [`credential_stores`] of `$HOME` and the passwd
    /// entry's home, `$KUBECONFIG` and `$DOCKER_CONFIG` — the `/proc` of
    /// other processes and the devices but [`DEVICES`]; `grant`'s reads
    /// and writes on top. Scratch directories go in the system temporary
    /// directory, which is opened up into the entries it has now, so that
    /// scratch directories made later (other calls') are not readable.
    /// Functions keep the user's `HOME` ([`Sandbox::keeps_home`]).
    ///
    /// Landlock is an allow-list: the rules are the siblings of what is
    /// refused, on the way down from `/`; what is created
    /// later beside a refused path is not readable.
    pub fn render(grant: &SandboxGrant) -> Self {
        let mut homes: Vec<PathBuf> = std::env::var_os("HOME")
            .map(PathBuf::from)
            .into_iter()
            .collect();
        if let Ok(Some(user)) = nix::unistd::User::from_uid(nix::unistd::getuid())
            && !homes.contains(&user.dir)
        {
            homes.push(user.dir);
        }
        let stores = credential_stores(
            &homes,
            std::env::var_os("KUBECONFIG").as_deref(),
            std::env::var_os("DOCKER_CONFIG").as_deref(),
        );
        let refused: Vec<PathBuf> = stores.iter().map(|p| resolved(p)).collect();
        let tmp = std::env::temp_dir();
        let mut hidden = refused.clone();
        hidden.push(PathBuf::from("/dev"));
        // Other processes' /proc entries (the function's own has no fixed
        // name when the rules are made).
        if let Ok(entries) = std::fs::read_dir("/proc") {
            hidden.extend(
                entries
                    .flatten()
                    .filter(|e| {
                        e.file_name()
                            .to_string_lossy()
                            .bytes()
                            .all(|b| b.is_ascii_digit())
                    })
                    .map(|e| e.path()),
            );
        }
        hidden.push(PathBuf::from("/proc/kcore"));
        // A path that is not there opens the temporary directory up into
        // its present entries; scratch directories of other calls left
        // there by another runner are hidden too.
        let tmp_real = resolved(&tmp);
        hidden.push(tmp_real.join("krm-fn-"));
        if let Ok(entries) = std::fs::read_dir(&tmp_real) {
            hidden.extend(
                entries
                    .flatten()
                    .filter(|e| e.file_name().to_string_lossy().starts_with("krm-fn-"))
                    .map(|e| e.path()),
            );
        }
        let mut read = all_but(Path::new("/"), &hidden);
        read.extend(grant.read.iter().cloned());
        Self::new(grant, ReadRules::Render, read, refused, tmp)
    }

    fn new(
        grant: &SandboxGrant,
        rules: ReadRules,
        read: Vec<PathBuf>,
        refused: Vec<PathBuf>,
        tmp: PathBuf,
    ) -> Self {
        use std::os::unix::ffi::OsStrExt;
        let encoded: Vec<(u8, &[u8])> = read
            .iter()
            .map(|p| (READ, p.as_os_str().as_bytes()))
            .chain(DEVICES.iter().map(|d| (DEVICE, d.as_bytes())))
            .chain(
                grant
                    .write
                    .iter()
                    .map(|p| (WRITE, p.as_os_str().as_bytes())),
            )
            .collect();
        // Paths with a NUL byte cannot be named: left out.
        let static_rules = encoded
            .iter()
            .filter_map(|r| layers::Spec::encode(0, &[*r]))
            .flat_map(|bytes| bytes.into_iter().skip(1))
            .collect();
        Self {
            grant: grant.clone(),
            rules,
            read,
            refused,
            static_rules,
            scratch_base: scratch_base(&tmp),
        }
    }

    /// The wrapper server's sandbox (inside a function pod, whose image is
    /// the function's own): every path readable but [`WRAPPER_HIDDEN`] and
    /// the temporary directory (other calls' scratch directories), plus
    /// `grant`'s writes; scratch directories in the system temporary
    /// directory when it is writable (a `FROM scratch` image has none: the
    /// function then writes nowhere, with a warning).
    pub fn wrapper(grant: &SandboxGrant) -> Self {
        let tmp = std::env::temp_dir();
        let hidden: Vec<PathBuf> = WRAPPER_HIDDEN
            .iter()
            .map(PathBuf::from)
            .chain([tmp.clone()])
            .map(|p| std::fs::canonicalize(&p).unwrap_or(p))
            .collect();
        let mut read = all_but(Path::new("/"), &hidden);
        read.extend(grant.read.iter().cloned());
        Self::new(grant, ReadRules::Wrapper, read, Vec::new(), tmp)
    }

    /// What every function of this sandbox is granted.
    pub fn grant(&self) -> &SandboxGrant {
        &self.grant
    }

    /// Whether functions keep the caller's `HOME` with Landlock on
    /// (`render`, whose functions read their user's files as under kpt);
    /// otherwise their `HOME` is the call's scratch directory.
    pub fn keeps_home(&self) -> bool {
        self.rules == ReadRules::Render
    }

    /// The line a failed call adds to its error when any layer was on
    /// ([`SandboxGrant::refusal_hint`] for this sandbox's grant and the
    /// function's own, `per_function`); `None` with every layer off.
    pub fn refusal_hint(&self, per_function: &SandboxGrant) -> Option<String> {
        let reads = match self.rules {
            ReadRules::Exec => READ_RULES_EXEC,
            ReadRules::Render => READ_RULES_RENDER,
            ReadRules::Wrapper => {
                "every file of the image but /proc, /sys, /dev, the temporary directory and the secrets' mounts"
            }
        };
        let mut grant = self.grant.union(per_function);
        // A layer the kernel lacks was not on.
        let support = support();
        if support.landlock_abi.is_none() {
            grant.allow.filesystem = true;
        }
        if !support.seccomp {
            grant.allow.syscalls = true;
            grant.allow.network = true;
        }
        grant.refusal_hint(reads)
    }

    /// The layers of one call of `program` (whose directory it may read and
    /// execute beneath, as it may the directories of the files its command
    /// line names, `named`, except where they would open a refused path up)
    /// with `per_function`'s grant besides [`Sandbox::grant`]; with
    /// Landlock on, a new scratch directory the function may write, removed
    /// when the returned value is dropped.
    ///
    /// Errors: the scratch directory cannot be made.
    pub(crate) fn call(
        &self,
        program: &Path,
        path_env: Option<&std::ffi::OsStr>,
        per_function: &SandboxGrant,
        named: &[PathBuf],
    ) -> io::Result<CallSandbox> {
        use std::os::unix::ffi::OsStrExt;
        let allow = self.grant.allow.union(per_function.allow);
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
        let opens_refused = |p: &&PathBuf| {
            let real = resolved(p);
            self.refused
                .iter()
                .any(|r| real.starts_with(r) || r.starts_with(&real))
        };
        let mut rules: Vec<(u8, &[u8])> = dirs
            .iter()
            .chain(named.iter())
            .filter(|p| !opens_refused(p))
            .chain(per_function.read.iter())
            .map(|p| (READ, p.as_os_str().as_bytes()))
            .collect();
        rules.extend(
            per_function
                .write
                .iter()
                .map(|p| (WRITE, p.as_os_str().as_bytes())),
        );
        if let Some(s) = &scratch {
            rules.push((WRITE, s.0.as_os_str().as_bytes()));
        }
        let mut spec = spec(bits, &rules)?;
        // The rules of every call after the layer bits.
        spec.0.splice(1..1, self.static_rules.iter().copied());
        Ok(CallSandbox { spec, scratch })
    }
}

/// `path` with links resolved: as far as it exists, with the rest
/// appended (`/var/run/secrets` is `/run/secrets` where `/var/run` links
/// to `/run`, whether or not `secrets` exists).
fn resolved(path: &Path) -> PathBuf {
    let mut rest = Vec::new();
    let mut at = path;
    loop {
        if let Ok(real) = std::fs::canonicalize(at) {
            return rest.iter().rev().fold(real, |p, c| p.join(c));
        }
        match (at.parent(), at.file_name()) {
            (Some(parent), Some(name)) => {
                rest.push(name.to_os_string());
                at = parent;
            }
            _ => return path.to_path_buf(),
        }
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
