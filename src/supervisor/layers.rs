//! The sandbox layers a function process enters between its `fork` (or
//! `vfork`-style clone) and its `exec`, in the one place every way of
//! starting a function goes through ([`super::confine::enter_function`]).
//!
//! - **no new privileges** (`PR_SET_NO_NEW_PRIVS`): a set-user-ID or
//!   file-capability program the function runs gains nothing;
//! - **Landlock** (the `landlock` crate builds the ruleset): the function may
//!   read and execute only beneath the paths the runner lists (its binary's
//!   directory, the system libraries), read and write only its call's
//!   scratch directory (device nodes excepted) and a few device files; every
//!   other file — the runner's own, the service-account token, registry
//!   credentials, `/proc` — is refused. From ABI 6 on it also may not signal,
//!   nor connect to the abstract Unix sockets of, processes outside its own
//!   tree; and Landlock always refuses `ptrace` and `/proc/<pid>/mem` of
//!   processes outside it;
//! - **a seccomp filter** (the `seccompiler` crate compiles it): `EPERM` for
//!   system calls a KRM function never needs ([`REFUSED`]: `ptrace`,
//!   `process_vm_*`, keyrings, `mount`, `bpf`, `perf_event_open`, …) and for
//!   scheduling, priority and limit changes of any process but the caller
//!   ([`REFUSED_ON_OTHERS`]);
//! - **no network**: the same kind of filter refusing `socket` for every
//!   family but `AF_UNIX` ([`NO_NETWORK`]).
//!
//! The runner describes the layers of one call as a [`Spec`] (bytes it
//! sends to the supervisor); the supervisor turns it into a [`Prepared`]
//! ([`prepare`]: opens the paths and builds the ruleset, picks the compiled
//! filter; it allocates, so it runs before the clone) and the function
//! process applies that with [`enter`], which makes system calls only.
//!
//! What a call costs is kept small for the supervisors that serve call
//! after call (the resident supervisor's spares): a spare takes the
//! [`INHERITABLE`] layers — no new privileges and the filter, the same for
//! every call of the same kind — on itself once ([`take_on`]), and every
//! function it starts inherits them, so the kernel checks and compiles the
//! filter once per spare rather than once per call (about 0.2 ms of CPU
//! for this filter); and the paths of the Landlock rules stay open from
//! call to call ([`prepare`] reuses a path's descriptor while the path
//! still names the same file), so a call's ruleset costs one `stat` and one
//! rule per path. Only the ruleset itself, which names the call's scratch
//! directory, is made per call.
//!
//! This file is also compiled into the `krm-fn-supervisor` program.

use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::OnceLock;

/// Layer bit: set `PR_SET_NO_NEW_PRIVS`.
pub(crate) const NO_NEW_PRIVS: u8 = 1;
/// Layer bit: apply the Landlock ruleset of the spec's rules.
pub(crate) const LANDLOCK: u8 = 2;
/// Layer bit: install the syscall filter ([`REFUSED`], [`REFUSED_ON_OTHERS`]).
pub(crate) const SYSCALLS: u8 = 4;
/// Layer bit: refuse `socket` for every address family but `AF_UNIX`.
pub(crate) const NO_NETWORK: u8 = 8;

/// The layers a supervisor may take on itself for every function it then
/// starts ([`take_on`]): they hold nothing of one call.
#[allow(dead_code)] // used by the supervisor program
pub(crate) const INHERITABLE: u8 = NO_NEW_PRIVS | SYSCALLS | NO_NETWORK;

/// The layer bits of the spec `bytes` (0 for an empty spec: no layer).
#[allow(dead_code)] // used by the supervisor program
pub(crate) fn layer_bits(bytes: &[u8]) -> u8 {
    bytes.first().copied().unwrap_or(0)
}

/// Rule kind: read and execute beneath the path.
pub(crate) const READ: u8 = b'r';
/// Rule kind: read, write, create and remove beneath the path (no device
/// nodes).
pub(crate) const WRITE: u8 = b'w';
/// Rule kind: read and write the (device) file.
pub(crate) const DEVICE: u8 = b'd';

/// The Landlock ABI the ruleset is written for: 6 adds the scopes (signals,
/// abstract Unix sockets); the crate leaves out what the running kernel
/// lacks (best effort), and the runner warns at start about what that is.
const ABI: landlock::ABI = landlock::ABI::V6;

/// A Landlock rule of a spec: its kind ([`READ`], [`WRITE`], [`DEVICE`])
/// and its path's bytes.
pub(crate) type Rule<'a> = (u8, &'a [u8]);

/// One call's layers: a byte of layer bits, then each rule as its kind
/// byte and its path, NUL-terminated. Empty: no layer.
pub(crate) struct Spec;

impl Spec {
    /// The bytes of a spec with `layers` and `rules` (kind, path).
    /// Returns `None` when a path holds a NUL byte.
    pub(crate) fn encode(layers: u8, rules: &[(u8, &[u8])]) -> Option<Vec<u8>> {
        let mut out = Vec::with_capacity(1 + rules.iter().map(|r| r.1.len() + 2).sum::<usize>());
        out.push(layers);
        for (kind, path) in rules {
            if path.contains(&0) {
                return None;
            }
            out.push(*kind);
            out.extend_from_slice(path);
            out.push(0);
        }
        Some(out)
    }

    /// The layer bits and rules of `bytes`, each path without its NUL;
    /// `None` when `bytes` is not a spec (an empty one is no layer).
    pub(crate) fn decode(bytes: &[u8]) -> Option<(u8, Vec<Rule<'_>>)> {
        let Some((&layers, mut rest)) = bytes.split_first() else {
            return Some((0, Vec::new()));
        };
        let mut rules = Vec::new();
        while let Some((&kind, tail)) = rest.split_first() {
            if ![READ, WRITE, DEVICE].contains(&kind) {
                return None;
            }
            let end = tail.iter().position(|&b| b == 0)?;
            rules.push((kind, &tail[..end]));
            rest = &tail[end + 1..];
        }
        Some((layers, rules))
    }
}

/// A call's layers made ready in the supervisor, for [`enter`].
#[derive(Default)]
pub(crate) struct Prepared {
    layers: u8,
    ruleset: Option<OwnedFd>,
    filter: Option<&'static [seccompiler::sock_filter]>,
}

impl Prepared {
    /// The same layers but `in_force`, which the process that starts the
    /// function has taken on already ([`take_on`]) and the function
    /// inherits.
    #[allow(dead_code)] // used by the supervisor program
    pub(crate) fn without(mut self, in_force: u8) -> Self {
        self.layers &= !in_force;
        if in_force & (SYSCALLS | NO_NETWORK) != 0 {
            self.filter = None;
        }
        self
    }
}

/// Makes the layers of the spec `bytes` ready: builds the Landlock ruleset
/// (a path that does not exist is left out) and picks the compiled filter.
/// Allocates: call it before the function's clone.
///
/// Errors: `EINVAL` for bytes that are not a spec; the error of a Landlock
/// call that failed (the runner asks for Landlock only where its probe
/// found it).
pub(crate) fn prepare(bytes: &[u8]) -> io::Result<Prepared> {
    let (layers, rules) =
        Spec::decode(bytes).ok_or_else(|| io::Error::from_raw_os_error(libc::EINVAL))?;
    let mut prepared = Prepared {
        layers,
        ..Prepared::default()
    };
    if layers & LANDLOCK != 0 {
        prepared.ruleset = Some(ruleset(&rules).map_err(|e| {
            io::Error::new(io::ErrorKind::PermissionDenied, format!("Landlock: {e}"))
        })?);
    }
    if layers & (SYSCALLS | NO_NETWORK) != 0 {
        prepared.filter = Some(
            filter(layers & SYSCALLS != 0, layers & NO_NETWORK != 0)
                .ok_or_else(|| io::Error::from_raw_os_error(libc::EINVAL))?,
        );
    }
    Ok(prepared)
}

/// The Landlock ruleset of `rules`.
fn ruleset(rules: &[(u8, &[u8])]) -> Result<OwnedFd, String> {
    build_ruleset(rules).map_err(|e| e.to_string())?
}

/// A path of a rule kept open from call to call: the file it named when
/// opened (device and inode), and whether that is a directory.
struct Opened {
    kind: u8,
    path: Vec<u8>,
    fd: landlock::PathFd,
    file: (u64, u64),
    is_dir: bool,
}

/// The most paths kept open ([`Opened`]): more than the exec runtime's and
/// the wrapper server's rules (which differ only by the function's
/// directory and the scratch directory, never kept).
const MAX_OPENED: usize = 256;

/// The paths of [`READ`] and [`DEVICE`] rules opened so far in this
/// process. A supervisor that serves call after call opens each once.
static OPENED: std::sync::Mutex<Vec<Opened>> = std::sync::Mutex::new(Vec::new());

fn build_ruleset(rules: &[(u8, &[u8])]) -> Result<Result<OwnedFd, String>, landlock::RulesetError> {
    use landlock::{
        Access, AccessFs, PathBeneath, PathFd, Ruleset, RulesetAttr, RulesetCreatedAttr, Scope,
    };
    use std::os::unix::ffi::OsStrExt;
    use std::os::unix::fs::MetadataExt;
    let mut created = Ruleset::default()
        .handle_access(AccessFs::from_all(ABI))?
        .scope(Scope::from_all(ABI))?
        .create()?
        // Set (or not) by `enter`, as the spec says.
        .no_new_privs(false);
    let mut opened = OPENED.lock().unwrap_or_else(|e| e.into_inner());
    for &(kind, path_bytes) in rules {
        let path = std::ffi::OsStr::from_bytes(path_bytes);
        // What the path names now (it may have been replaced since it was
        // opened: a ConfigMap volume swaps its directory).
        let Ok(now) = std::fs::metadata(path) else {
            continue;
        };
        let file = (now.dev(), now.ino());
        let at = opened
            .iter()
            .position(|o| o.kind == kind && o.path == path_bytes);
        let entry = match at {
            Some(i) if opened[i].file == file => i,
            _ => {
                let Ok(fd) = PathFd::new(path) else { continue };
                let entry = Opened {
                    kind,
                    path: path_bytes.to_vec(),
                    fd,
                    file,
                    is_dir: now.is_dir(),
                };
                match at {
                    Some(i) => {
                        opened[i] = entry;
                        i
                    }
                    // The scratch directory changes every call: not kept.
                    None if kind != WRITE && opened.len() < MAX_OPENED => {
                        opened.push(entry);
                        opened.len() - 1
                    }
                    None => {
                        let access = access_of(kind, entry.is_dir);
                        created = created.add_rule(PathBeneath::new(entry.fd, access))?;
                        continue;
                    }
                }
            }
        };
        let access = access_of(kind, opened[entry].is_dir);
        created = created.add_rule(PathBeneath::new(&opened[entry].fd, access))?;
    }
    let fd: Option<OwnedFd> = created.into();
    // No descriptor: the kernel has no Landlock at all.
    Ok(fd.ok_or_else(|| "this kernel has no Landlock".to_string()))
}

/// The access a rule of `kind` gives beneath a directory, or to a file.
fn access_of(kind: u8, is_dir: bool) -> landlock::BitFlags<landlock::AccessFs> {
    use landlock::{Access, AccessFs};
    let access = match kind {
        READ => AccessFs::from_read(ABI),
        WRITE => AccessFs::from_all(ABI) & !(AccessFs::MakeChar | AccessFs::MakeBlock),
        _ => AccessFs::ReadFile | AccessFs::WriteFile | AccessFs::IoctlDev,
    };
    if is_dir {
        access
    } else {
        access & AccessFs::from_file(ABI)
    }
}

/// System calls refused outright: a KRM function never needs them, and
/// each reaches beyond the function (other processes' memory, the kernel's
/// keyrings, mounts, BPF, performance counters, modules, the clock, other
/// namespaces; `io_uring` would open sockets without `socket`).
pub(crate) const REFUSED: &[libc::c_long] = &[
    libc::SYS_ptrace,
    libc::SYS_process_vm_readv,
    libc::SYS_process_vm_writev,
    libc::SYS_process_madvise,
    libc::SYS_kcmp,
    libc::SYS_pidfd_getfd,
    libc::SYS_keyctl,
    libc::SYS_add_key,
    libc::SYS_request_key,
    libc::SYS_mount,
    libc::SYS_umount2,
    libc::SYS_pivot_root,
    libc::SYS_chroot,
    libc::SYS_open_tree,
    libc::SYS_move_mount,
    libc::SYS_fsopen,
    libc::SYS_fsconfig,
    libc::SYS_fsmount,
    libc::SYS_fspick,
    libc::SYS_mount_setattr,
    libc::SYS_bpf,
    libc::SYS_perf_event_open,
    libc::SYS_userfaultfd,
    libc::SYS_open_by_handle_at,
    libc::SYS_init_module,
    libc::SYS_finit_module,
    libc::SYS_delete_module,
    libc::SYS_kexec_load,
    libc::SYS_kexec_file_load,
    libc::SYS_reboot,
    libc::SYS_swapon,
    libc::SYS_swapoff,
    libc::SYS_acct,
    libc::SYS_quotactl,
    libc::SYS_syslog,
    libc::SYS_settimeofday,
    libc::SYS_clock_settime,
    libc::SYS_clock_adjtime,
    libc::SYS_adjtimex,
    libc::SYS_sethostname,
    libc::SYS_setdomainname,
    libc::SYS_setns,
    libc::SYS_unshare,
    libc::SYS_io_uring_setup,
    libc::SYS_io_uring_enter,
    libc::SYS_io_uring_register,
    #[cfg(target_arch = "x86_64")]
    libc::SYS_iopl,
    #[cfg(target_arch = "x86_64")]
    libc::SYS_ioperm,
];

/// System calls refused when they name a process other than the caller:
/// the call and the argument holding the target, refused when not 0 —
/// scheduling policy and priority, nice value, I/O priority, CPU affinity,
/// memory placement. A function may still change its own. Besides these,
/// `prlimit64` is refused when it names another process and sets a limit,
/// and `setpriority` for every process of a user (`PRIO_USER`) whatever its
/// target.
pub(crate) const REFUSED_ON_OTHERS: &[(libc::c_long, u8)] = &[
    (libc::SYS_sched_setscheduler, 0),
    (libc::SYS_sched_setparam, 0),
    (libc::SYS_sched_setattr, 0),
    (libc::SYS_sched_setaffinity, 0),
    (libc::SYS_setpriority, 1),
    (libc::SYS_ioprio_set, 1),
    (libc::SYS_migrate_pages, 0),
    (libc::SYS_move_pages, 0),
];

/// The compiled filter: [`REFUSED`] and [`REFUSED_ON_OTHERS`] when
/// `syscalls`, the socket rule when `no_network`; compiled once per
/// process for each choice. `None` when neither is asked for or the filter
/// does not compile for this architecture.
pub(crate) fn filter(
    syscalls: bool,
    no_network: bool,
) -> Option<&'static [seccompiler::sock_filter]> {
    let at = filter_index(syscalls, no_network);
    if at == 0 {
        return None;
    }
    FILTERS[at]
        .get_or_init(|| compile(syscalls, no_network))
        .as_deref()
}

/// The compiled filters, by [`filter_index`].
static FILTERS: [OnceLock<Option<seccompiler::BpfProgram>>; 4] = [
    OnceLock::new(),
    OnceLock::new(),
    OnceLock::new(),
    OnceLock::new(),
];

fn filter_index(syscalls: bool, no_network: bool) -> usize {
    usize::from(syscalls) | usize::from(no_network) << 1
}

fn compile(syscalls: bool, no_network: bool) -> Option<seccompiler::BpfProgram> {
    use seccompiler::{
        SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter, SeccompRule,
    };
    use std::collections::BTreeMap;
    let mut rules: BTreeMap<i64, Vec<SeccompRule>> = BTreeMap::new();
    let condition = |arg: u8, len: SeccompCmpArgLen, op: SeccompCmpOp, value: u64| {
        SeccompCondition::new(arg, len, op, value).ok()
    };
    let rule = |conditions: Vec<Option<SeccompCondition>>| {
        SeccompRule::new(conditions.into_iter().collect::<Option<Vec<_>>>()?).ok()
    };
    let (dword, qword) = (|| SeccompCmpArgLen::Dword, || SeccompCmpArgLen::Qword);
    if syscalls {
        for &nr in REFUSED {
            rules.insert(nr, Vec::new());
        }
        for &(nr, arg) in REFUSED_ON_OTHERS {
            let mut list = vec![rule(vec![condition(arg, dword(), SeccompCmpOp::Ne, 0)])?];
            if nr == libc::SYS_setpriority {
                let user = libc::PRIO_USER as u64;
                list.push(rule(vec![condition(0, dword(), SeccompCmpOp::Eq, user)])?);
            }
            rules.insert(nr, list);
        }
        // Another process, and a new limit given.
        rules.insert(
            libc::SYS_prlimit64,
            vec![rule(vec![
                condition(0, dword(), SeccompCmpOp::Ne, 0),
                condition(2, qword(), SeccompCmpOp::Ne, 0),
            ])?],
        );
    }
    if no_network {
        rules.insert(
            libc::SYS_socket,
            vec![rule(vec![condition(
                0,
                dword(),
                SeccompCmpOp::Ne,
                libc::AF_UNIX as u64,
            )])?],
        );
    }
    let arch = std::env::consts::ARCH.try_into().ok()?;
    let filter = SeccompFilter::new(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::EPERM as u32),
        arch,
    )
    .ok()?;
    filter.try_into().ok()
}

/// In the function process, just before its `exec`: applies `prepared`'s
/// layers in order — no new privileges, the Landlock ruleset, the filter
/// (last: it would refuse nothing the others need, but it is the one that
/// could). System calls only.
///
/// # Safety
/// Between `fork` (or a `vfork`-style clone) and `exec`.
pub(crate) unsafe fn enter(prepared: &Prepared) -> io::Result<()> {
    // SAFETY: system calls on values of this function and `prepared`.
    unsafe {
        if prepared.layers & NO_NEW_PRIVS != 0 {
            no_new_privs()?;
        }
        if let Some(ruleset) = &prepared.ruleset
            && libc::syscall(libc::SYS_landlock_restrict_self, ruleset.as_raw_fd(), 0u32) != 0
        {
            return Err(io::Error::last_os_error());
        }
        if let Some(filter) = prepared.filter {
            install(filter)?;
        }
    }
    Ok(())
}

/// Takes the [`INHERITABLE`] layers of `layers` on this process itself
/// (no new privileges, then the filter, compiled beforehand by [`filter`]),
/// for every function it starts afterwards to inherit; they cannot be
/// taken off again. System calls only.
///
/// Errors: the kernel refused a layer, or the filter was not compiled.
///
/// # Safety
/// In a process that starts functions and whose own system calls the
/// filter does not refuse (a spare of the resident supervisor).
#[allow(dead_code)] // used by the supervisor program
pub(crate) unsafe fn take_on(layers: u8) -> io::Result<()> {
    // SAFETY: system calls on values of this function.
    unsafe {
        if layers & NO_NEW_PRIVS != 0 {
            no_new_privs()?;
        }
        let (syscalls, network) = (layers & SYSCALLS != 0, layers & NO_NETWORK != 0);
        if syscalls || network {
            let filter = FILTERS[filter_index(syscalls, network)]
                .get()
                .and_then(|f| f.as_deref())
                .ok_or_else(|| io::Error::from_raw_os_error(libc::EINVAL))?;
            install(filter)?;
        }
    }
    Ok(())
}

/// `PR_SET_NO_NEW_PRIVS`.
unsafe fn no_new_privs() -> io::Result<()> {
    // SAFETY: prctl on values.
    if unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Installs the seccomp filter `filter` on this process.
unsafe fn install(filter: &[seccompiler::sock_filter]) -> io::Result<()> {
    #[repr(C)]
    struct Program {
        len: libc::c_ushort,
        filter: *const seccompiler::sock_filter,
    }
    let program = Program {
        len: filter.len() as libc::c_ushort,
        filter: filter.as_ptr(),
    };
    // SAFETY: the kernel reads `program` and the filter it points to.
    if unsafe {
        libc::syscall(
            libc::SYS_seccomp,
            libc::SECCOMP_SET_MODE_FILTER,
            0u32,
            &program as *const Program,
        )
    } != 0
    {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs_read_back() {
        let bytes = Spec::encode(
            LANDLOCK | NO_NETWORK,
            &[(READ, b"/usr"), (WRITE, b"/tmp/x")],
        )
        .unwrap();
        let (layers, rules) = Spec::decode(&bytes).unwrap();
        assert_eq!(layers, LANDLOCK | NO_NETWORK);
        assert_eq!(rules, [(READ, &b"/usr"[..]), (WRITE, &b"/tmp/x"[..])]);
        assert_eq!(Spec::decode(&[]).unwrap().0, 0);
        assert!(Spec::decode(b"\x02r/usr").is_none(), "no NUL");
        assert!(Spec::decode(b"\x02x/usr\0").is_none(), "unknown kind");
        assert!(Spec::encode(0, &[(READ, b"a\0b")]).is_none());
    }

    #[test]
    fn every_filter_compiles() {
        for (syscalls, network) in [(true, true), (true, false), (false, true)] {
            assert!(filter(syscalls, network).is_some_and(|f| !f.is_empty()));
        }
        assert!(filter(false, false).is_none());
    }
}
