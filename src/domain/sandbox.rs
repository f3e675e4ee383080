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

/// The `sandbox:` mapping of a `config.yaml` entry and of a FunctionConfig's
/// `spec.binaryExecutor`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SandboxSpec {
    /// Layer names ([`LAYER_NAMES`]) the function may do without.
    #[serde(default)]
    pub allow: Vec<String>,
}

impl SandboxSpec {
    /// The layers this spec turns off.
    ///
    /// Errors: as [`SandboxAllow::parse`].
    pub fn to_allow(&self) -> Result<SandboxAllow, String> {
        SandboxAllow::parse(self.allow.iter().map(String::as_str))
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
}
