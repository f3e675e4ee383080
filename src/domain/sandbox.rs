//! Which sandbox layers an exec function may do without: the vocabulary of
//! the `--sandbox-allow` flag, of a `config.yaml` entry's `sandbox.allow`
//! and of a FunctionConfig's `spec.binaryExecutor.sandbox.allow`.
//!
//! Every exec function (and every function the wrapper server runs) starts
//! inside four layers; each name below turns one of them off:
//!
//! | name | the layer it turns off |
//! |---|---|
//! | `new-privileges` | `PR_SET_NO_NEW_PRIVS` (set-user-ID programs gain nothing) |
//! | `filesystem` | Landlock: reads and executes only beneath the function's binary directory and the system libraries, writes only its call's scratch directory |
//! | `syscalls` | the seccomp filter refusing `ptrace`, `process_vm_*`, keyrings, `mount`, `bpf`, …, and scheduling, priority and limit changes of other processes |
//! | `network` | the rule refusing `socket` for every family but `AF_UNIX` |
//!
//! Neither Porch's runner nor kpt confines exec functions; these layers are
//! this runner's own.

use std::ffi::OsStr;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// The layer names, in the order above.
pub const LAYER_NAMES: [&str; 4] = ["new-privileges", "filesystem", "syscalls", "network"];

/// The layers a function may do without (all `false`: every layer on).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct SandboxAllow {
    /// No `PR_SET_NO_NEW_PRIVS`. Without `CAP_SYS_ADMIN` the kernel requires
    /// it for Landlock and seccomp, so a non-root runner then also needs
    /// `filesystem`, `syscalls` and `network` for the function to start.
    pub new_privileges: bool,
    /// No Landlock ruleset: the function sees the file system as the runner does.
    pub filesystem: bool,
    /// No syscall filter.
    pub syscalls: bool,
    /// Network sockets allowed.
    pub network: bool,
}

impl SandboxAllow {
    /// Every layer turned off.
    pub const ALL: SandboxAllow = SandboxAllow {
        new_privileges: true,
        filesystem: true,
        syscalls: true,
        network: true,
    };

    /// The layers named in `names` turned off (names are trimmed; empty
    /// ones are skipped).
    ///
    /// Errors: a name that is not one of [`LAYER_NAMES`], quoted, with the
    /// valid names.
    pub fn parse<'a>(names: impl IntoIterator<Item = &'a str>) -> Result<Self, String> {
        let mut allow = SandboxAllow::default();
        for name in names.into_iter().map(str::trim).filter(|n| !n.is_empty()) {
            match name {
                "new-privileges" => allow.new_privileges = true,
                "filesystem" => allow.filesystem = true,
                "syscalls" => allow.syscalls = true,
                "network" => allow.network = true,
                other => {
                    return Err(format!(
                        "unknown sandbox layer {other:?}: use {}",
                        LAYER_NAMES.join(", ")
                    ));
                }
            }
        }
        Ok(allow)
    }

    /// The layers either `self` or `other` turns off.
    pub fn union(self, other: SandboxAllow) -> SandboxAllow {
        SandboxAllow {
            new_privileges: self.new_privileges || other.new_privileges,
            filesystem: self.filesystem || other.filesystem,
            syscalls: self.syscalls || other.syscalls,
            network: self.network || other.network,
        }
    }

    /// The names of the layers turned off, in [`LAYER_NAMES`] order.
    pub fn names(&self) -> Vec<&'static str> {
        let on = [
            self.new_privileges,
            self.filesystem,
            self.syscalls,
            self.network,
        ];
        LAYER_NAMES
            .iter()
            .zip(on)
            .filter(|(_, off)| *off)
            .map(|(n, _)| *n)
            .collect()
    }
}

/// What a function is granted beyond the sandbox's own rules, without
/// turning a layer off or with some turned off: from `--sandbox-allow`,
/// `--sandbox-read` and `--sandbox-write` for every function, or from one
/// function's `sandbox:` mapping ([`SandboxSpec`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SandboxGrant {
    /// The layers turned off.
    pub allow: SandboxAllow,
    /// Absolute paths the function may also read and execute beneath.
    pub read: Vec<PathBuf>,
    /// Absolute paths the function may also write (create, change, remove)
    /// and read beneath.
    pub write: Vec<PathBuf>,
}

impl SandboxGrant {
    /// What either `self` or `other` grants.
    pub fn union(&self, other: &SandboxGrant) -> SandboxGrant {
        let mut read = self.read.clone();
        read.extend(
            other
                .read
                .iter()
                .filter(|p| !self.read.contains(p))
                .cloned(),
        );
        let mut write = self.write.clone();
        write.extend(
            other
                .write
                .iter()
                .filter(|p| !self.write.contains(p))
                .cloned(),
        );
        SandboxGrant {
            allow: self.allow.union(other.allow),
            read,
            write,
        }
    }

    /// One line naming the layers left on by this grant and what relaxes
    /// each, for the error of a function that failed with any of them on
    /// (`None` when every layer is off); `reads` says what the filesystem
    /// layer let the function read (the exec runtime's rules or `render`'s,
    /// see [`READ_RULES_EXEC`] and [`READ_RULES_RENDER`]). Which layers
    /// refused what the function tried is not known to the runner (the
    /// kernel answers the function, not the runner): the line names every
    /// layer that was on.
    pub fn refusal_hint(&self, reads: &str) -> Option<String> {
        let mut on = Vec::new();
        if !self.allow.filesystem {
            on.push(format!(
                "filesystem (Landlock: read {reads}; write only the call's scratch directory, its TMPDIR; \
                 relax with --sandbox-read PATH, --sandbox-write PATH or sandbox: {{read: [PATH], write: [PATH]}}, \
                 or turn it off with --sandbox-allow filesystem)"
            ));
        }
        if !self.allow.network {
            on.push("network (no sockets but Unix ones; --sandbox-allow network)".to_string());
        }
        if !self.allow.syscalls {
            on.push(
                "syscalls (the seccomp filter: no ptrace, mount, bpf, keyrings, nor changes to other processes; --sandbox-allow syscalls)"
                    .to_string(),
            );
        }
        if !self.allow.new_privileges {
            on.push(
                "new-privileges (set-user-ID programs gain nothing; --sandbox-allow new-privileges)"
                    .to_string(),
            );
        }
        (!on.is_empty()).then(|| {
            format!(
                "the function ran in the sandbox, with these layers on: {}; if it failed for a refusal, relax that layer (one function's own: sandbox: {{allow: [LAYER]}} in its config entry or FunctionConfig binaryExecutor)",
                on.join("; ")
            )
        })
    }
}

/// What the exec runtime's filesystem layer lets a function read, as the
/// refusal hint says it ([`SandboxGrant::refusal_hint`]).
pub const READ_RULES_EXEC: &str = "the system libraries and its program's directory only";

/// What `render`'s filesystem layer lets a function read, as the refusal
/// hint says it.
pub const READ_RULES_RENDER: &str = "every file but the credential stores (~/.ssh, ~/.kube, ~/.docker, $KUBECONFIG, /var/run/secrets, …) and other processes' /proc";

/// The credential stores in a user's home that `render`'s functions may
/// not read (relative to the home): SSH and GnuPG keys, the Kubernetes,
/// Docker, AWS, Azure, gcloud and GitHub CLI configurations, `pass`'s
/// store, `.netrc` and git's credential store.
pub const HOME_CREDENTIAL_STORES: &[&str] = &[
    ".ssh",
    ".gnupg",
    ".kube",
    ".docker",
    ".aws",
    ".azure",
    ".config/gcloud",
    ".config/gh",
    ".password-store",
    ".netrc",
    ".git-credentials",
];

/// The system credential stores `render`'s functions may not read: where
/// Kubernetes mounts secrets and service-account tokens, where Porch
/// mounts its registry and TLS secrets, and the shadow password files.
pub const SYSTEM_CREDENTIAL_STORES: &[&str] = &[
    "/var/run/secrets",
    "/run/secrets",
    "/var/tmp/config-secret",
    "/var/tmp/tls-secret",
    "/etc/shadow",
    "/etc/gshadow",
    "/etc/shadow-",
    "/etc/gshadow-",
];

/// The credential stores `render` keeps from its functions, as absolute
/// paths (not resolved): [`HOME_CREDENTIAL_STORES`] beneath each of
/// `homes` (`$HOME` and the passwd entry's home), the files `kubeconfig`
/// names (`$KUBECONFIG`, a `:`-separated list), the directory
/// `docker_config` names (`$DOCKER_CONFIG`), and
/// [`SYSTEM_CREDENTIAL_STORES`]. Relative entries of the variables are
/// left out.
pub fn credential_stores(
    homes: &[PathBuf],
    kubeconfig: Option<&OsStr>,
    docker_config: Option<&OsStr>,
) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = Vec::new();
    let mut add = |p: PathBuf| {
        if p.is_absolute() && !out.contains(&p) {
            out.push(p);
        }
    };
    for home in homes {
        for store in HOME_CREDENTIAL_STORES {
            add(home.join(store));
        }
    }
    if let Some(list) = kubeconfig {
        for file in std::env::split_paths(list) {
            add(file);
        }
    }
    if let Some(dir) = docker_config {
        add(PathBuf::from(dir));
    }
    for store in SYSTEM_CREDENTIAL_STORES {
        add(PathBuf::from(store));
    }
    out
}

/// The `sandbox:` mapping of a `config.yaml` entry and of a FunctionConfig's
/// `spec.binaryExecutor`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SandboxSpec {
    /// Layer names ([`LAYER_NAMES`]) the function may do without.
    #[serde(default)]
    pub allow: Vec<String>,
    /// Absolute paths the function may also read beneath.
    #[serde(default)]
    pub read: Vec<String>,
    /// Absolute paths the function may also write beneath.
    #[serde(default)]
    pub write: Vec<String>,
}

impl SandboxSpec {
    /// What this spec grants.
    ///
    /// Errors: the field and why, for a message prefixed by where the
    /// mapping is: `sandbox.allow: unknown sandbox layer "net": use …`
    /// ([`SandboxAllow::parse`]), or `sandbox.read[0]: "data" is not an
    /// absolute path: name the directory from /`.
    pub fn to_grant(&self) -> Result<SandboxGrant, String> {
        let allow = SandboxAllow::parse(self.allow.iter().map(String::as_str))
            .map_err(|e| format!("sandbox.allow: {e}"))?;
        let paths = |field: &str, list: &[String]| -> Result<Vec<PathBuf>, String> {
            list.iter()
                .enumerate()
                .map(|(i, p)| {
                    let path = PathBuf::from(p);
                    if path.is_absolute() {
                        Ok(path)
                    } else {
                        Err(format!(
                            "sandbox.{field}[{i}]: {p:?} is not an absolute path: name the directory from /"
                        ))
                    }
                })
                .collect()
        };
        Ok(SandboxGrant {
            allow,
            read: paths("read", &self.read)?,
            write: paths("write", &self.write)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_parse_and_print_back() {
        let allow = SandboxAllow::parse(["network", " filesystem ", ""]).unwrap();
        assert!(allow.network && allow.filesystem && !allow.syscalls && !allow.new_privileges);
        assert_eq!(allow.names(), ["filesystem", "network"]);
        assert_eq!(SandboxAllow::ALL.names(), LAYER_NAMES);
        let e = SandboxAllow::parse(["net"]).unwrap_err();
        assert_eq!(
            e,
            "unknown sandbox layer \"net\": use new-privileges, filesystem, syscalls, network"
        );
        let both = SandboxAllow::parse(["syscalls"])
            .unwrap()
            .union(SandboxAllow::parse(["network"]).unwrap());
        assert_eq!(both.names(), ["syscalls", "network"]);
    }

    #[test]
    fn specs_grant_layers_and_absolute_paths_only() {
        let spec = SandboxSpec {
            allow: vec!["network".into()],
            read: vec!["/opt/venv".into()],
            write: vec!["/srv/out".into()],
        };
        let grant = spec.to_grant().unwrap();
        assert!(grant.allow.network && !grant.allow.filesystem);
        assert_eq!(grant.read, [PathBuf::from("/opt/venv")]);
        assert_eq!(grant.write, [PathBuf::from("/srv/out")]);
        let relative = SandboxSpec {
            read: vec!["/ok".into(), "data".into()],
            ..SandboxSpec::default()
        };
        assert_eq!(
            relative.to_grant().unwrap_err(),
            "sandbox.read[1]: \"data\" is not an absolute path: name the directory from /"
        );
        let layer = SandboxSpec {
            allow: vec!["net".into()],
            ..SandboxSpec::default()
        };
        assert!(
            layer
                .to_grant()
                .unwrap_err()
                .starts_with("sandbox.allow: unknown sandbox layer \"net\"")
        );
        let both = grant.union(&SandboxGrant {
            read: vec!["/opt/venv".into(), "/data".into()],
            ..SandboxGrant::default()
        });
        assert_eq!(
            both.read,
            [PathBuf::from("/opt/venv"), PathBuf::from("/data")]
        );
    }

    #[test]
    fn the_credential_stores_are_the_homes_the_variables_and_the_systems() {
        let stores = credential_stores(
            &[PathBuf::from("/home/u"), PathBuf::from("/root")],
            Some(OsStr::new(
                "/home/u/kc.yaml:relative.yaml:/etc/kube/admin.conf",
            )),
            Some(OsStr::new("/srv/docker")),
        );
        for want in [
            "/home/u/.ssh",
            "/home/u/.config/gcloud",
            "/home/u/.git-credentials",
            "/root/.kube",
            "/home/u/kc.yaml",
            "/etc/kube/admin.conf",
            "/srv/docker",
            "/var/run/secrets",
            "/etc/shadow",
        ] {
            assert!(stores.contains(&PathBuf::from(want)), "{want}: {stores:?}");
        }
        assert!(!stores.iter().any(|p| p.ends_with("relative.yaml")));
    }

    #[test]
    fn the_hint_names_each_layer_on_and_its_flag() {
        let every = SandboxGrant::default()
            .refusal_hint(READ_RULES_RENDER)
            .unwrap();
        for flag in [
            "--sandbox-read PATH",
            "--sandbox-write PATH",
            "--sandbox-allow filesystem",
            "--sandbox-allow network",
            "--sandbox-allow syscalls",
            "--sandbox-allow new-privileges",
            "every file but the credential stores",
        ] {
            assert!(every.contains(flag), "{flag}: {every}");
        }
        let network_only = SandboxGrant {
            allow: SandboxAllow::parse(["filesystem", "syscalls", "new-privileges"]).unwrap(),
            ..SandboxGrant::default()
        };
        let hint = network_only.refusal_hint(READ_RULES_EXEC).unwrap();
        assert!(
            hint.contains("network (") && !hint.contains("filesystem ("),
            "{hint}"
        );
        assert_eq!(
            SandboxGrant {
                allow: SandboxAllow::ALL,
                ..SandboxGrant::default()
            }
            .refusal_hint(READ_RULES_EXEC),
            None
        );
    }
}
