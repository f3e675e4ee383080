//! The exec evaluator's configuration: Porch's `config.yaml`.
//!
//! Format (Porch Gen B, `--config`):
//! ```yaml
//! functions:
//! - function: set-namespace          # binary file name inside --functions
//!   images:
//!   - ghcr.io/kptdev/krm-functions-catalog/set-namespace:v0.4.5
//!   - ghcr.io/kptdev/krm-functions-catalog/set-namespace:latest
//!   sandbox: {allow: [network]}        # ours: layers this function may do without
//!                                      # (and read: [PATH], write: [PATH]: paths it may also read, write)
//! ```
//! Lookup is by exact image string, as in Porch; in addition, an image that
//! matches no entry exactly is tried once more after kpt's short-name
//! resolution (default prefix, `:latest`), so `set-namespace:v0.4.5` finds
//! the entry of its fully qualified form. When an image appears twice, the
//! first entry wins and a warning says so (Porch: `Ignoring duplicate image`).
//!
//! Unknown keys (`funtions:`, `image:`) are warnings naming the line and the
//! valid keys, not errors: Porch reads the file with `gopkg.in/yaml.v2`'s
//! non-strict `Unmarshal`, which ignores them, so a file Porch accepts must
//! start here too.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::codec;
use super::codec::keys::{Shape, ignored_key_warnings};
use super::image::{resolve_image, split_reference};
use super::sandbox::{SandboxGrant, SandboxSpec};
use super::tag_selection::TagRequest;

/// The keys of `config.yaml` (Porch's `configuration` and `function` types).
const FORMAT: Shape = Shape::Map(&[(
    "functions",
    Shape::Seq(&Shape::Map(&[
        ("function", Shape::Any),
        ("images", Shape::Any),
        (
            "sandbox",
            Shape::Map(&[
                ("allow", Shape::Any),
                ("read", Shape::Any),
                ("write", Shape::Any),
            ]),
        ),
    ])),
)]);

/// One `functions[]` entry.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct ExecFunction {
    /// Binary file name, relative to the functions directory (absolute paths are kept).
    pub function: String,
    /// Image strings served by this binary.
    #[serde(default)]
    pub images: Vec<String>,
    /// Sandbox layers this function may do without (an extension of ours;
    /// Porch has no sandbox).
    #[serde(default)]
    pub sandbox: Option<SandboxSpec>,
}

/// The parsed `config.yaml`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub struct ExecConfig {
    /// The function entries, in file order.
    #[serde(default)]
    pub functions: Vec<ExecFunction>,
    /// One line per unknown key, naming the file, line and valid keys (the
    /// keys are ignored, as Porch ignores them).
    #[serde(skip)]
    pub warnings: Vec<String>,
}

/// Why a `config.yaml` could not be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("failed to parse configuration file {path:?}: {message}")]
pub struct ExecConfigError {
    /// The file, as named on the command line.
    pub path: String,
    /// What is wrong.
    pub message: String,
}

impl ExecConfig {
    /// Parses the YAML text of a `config.yaml`; `path` is only used in errors.
    ///
    /// Errors: not YAML, wrong shape, or an entry with an empty `function`.
    /// Unknown keys are [`warnings`](Self::warnings).
    pub fn parse(text: &[u8], path: &str) -> Result<Self, ExecConfigError> {
        let err = |message: String| ExecConfigError {
            path: path.to_string(),
            message,
        };
        let mut cfg: ExecConfig = if text.iter().all(u8::is_ascii_whitespace) {
            ExecConfig::default()
        } else {
            codec::from_yaml_slice(text).map_err(|e| err(e.to_string()))?
        };
        cfg.warnings = ignored_key_warnings(text, &FORMAT, path).map_err(|e| err(e.to_string()))?;
        if let Some(i) = cfg
            .functions
            .iter()
            .position(|f| f.function.trim().is_empty())
        {
            return Err(err(format!(
                "functions[{i}].function is empty: name the binary file inside --functions"
            )));
        }
        for (i, f) in cfg.functions.iter().enumerate() {
            if let Some(Err(e)) = f.sandbox.as_ref().map(SandboxSpec::to_grant) {
                return Err(err(format!("functions[{i}].{e}")));
            }
        }
        Ok(cfg)
    }

    /// Builds the image → binary table with paths resolved against
    /// `functions_dir`. Returns the table and one warning per ignored duplicate.
    pub fn table(&self, functions_dir: &Path, default_prefix: &str) -> (ExecTable, Vec<String>) {
        let mut exact = HashMap::new();
        let mut versions: HashMap<String, Vec<String>> = HashMap::new();
        let mut warnings = Vec::new();
        for f in &self.functions {
            let binary = ExecBinary {
                path: functions_dir.join(&f.function),
                // Checked by `parse`.
                sandbox: f
                    .sandbox
                    .as_ref()
                    .and_then(|s| s.to_grant().ok())
                    .unwrap_or_default(),
            };
            for image in &f.images {
                if exact.contains_key(image) {
                    warnings.push(format!(
                        "Ignoring duplicate image {image:?} (binary {:?}): the first entry wins",
                        f.function
                    ));
                    continue;
                }
                exact.insert(image.clone(), binary.clone());
                if let (name, Some(tag), None) = split_reference(image) {
                    versions
                        .entry(name.to_string())
                        .or_default()
                        .push(tag.to_string());
                }
            }
        }
        (
            ExecTable {
                exact,
                versions,
                default_prefix: default_prefix.to_string(),
            },
            warnings,
        )
    }
}

/// Where the exec runtime looks up the binary that serves an image: the
/// `config.yaml` table ([`ExecTable`]), or the FunctionConfig objects
/// (the FunctionConfig generation's store implements it in its own module,
/// read live by the adapter that watches them).
pub trait BinaryCatalog: Send + Sync + std::fmt::Debug {
    /// The binary for `image` and the sandbox layers it may do without, or
    /// `None` when the exec runtime does not serve it (the evaluator then
    /// answers NotFound).
    fn binary_for(&self, image: &str) -> Option<ExecBinary>;
    /// The binary for `image` at the version a step's `tag` picks (a literal
    /// or a semver constraint, [`tag_selection`](super::tag_selection)); the
    /// tag wins over any tag or digest in `image`.
    ///
    /// Errors: why nothing serves it — no such function, or no configured
    /// version matches (naming the tag and the versions) — the detail of
    /// the evaluator's NotFound.
    fn binary_for_tag(&self, image: &str, tag: &str) -> Result<ExecBinary, String>;
    /// Every distinct binary path, sorted (for start-up checks).
    fn binaries(&self) -> Vec<PathBuf>;
    /// Number of configured entries (images for `config.yaml`, objects for
    /// FunctionConfigs), for the start-up log.
    fn len(&self) -> usize;
    /// True when nothing is configured.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Where the configuration comes from, for error messages, e.g. `--config`.
    fn origin(&self) -> &'static str;
}

impl BinaryCatalog for ExecTable {
    fn binary_for(&self, image: &str) -> Option<ExecBinary> {
        self.entry(image).cloned()
    }
    fn binary_for_tag(&self, image: &str, tag: &str) -> Result<ExecBinary, String> {
        self.entry_for_tag(image, tag).cloned()
    }
    fn binaries(&self) -> Vec<PathBuf> {
        ExecTable::binaries(self)
            .into_iter()
            .map(Path::to_path_buf)
            .collect()
    }
    fn len(&self) -> usize {
        ExecTable::len(self)
    }
    fn origin(&self) -> &'static str {
        "--config"
    }
}

/// A binary that serves an image, and what its sandbox grants it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecBinary {
    /// The binary's path.
    pub path: PathBuf,
    /// The layers its entry turns off and the paths it adds
    /// (`sandbox: {allow, read, write}`).
    pub sandbox: SandboxGrant,
}

/// The exec evaluator's lookup table: image string → binary.
#[derive(Debug, Clone, Default)]
pub struct ExecTable {
    exact: HashMap<String, ExecBinary>,
    /// Image name (no tag) → the tags its keys give it, in file order.
    versions: HashMap<String, Vec<String>>,
    default_prefix: String,
}

impl ExecTable {
    /// The binary's path for `image`: exact match first, then the
    /// kpt-resolved form.
    pub fn lookup(&self, image: &str) -> Option<&Path> {
        self.entry(image).map(|b| b.path.as_path())
    }

    /// The binary for `image`, with its sandbox settings ([`ExecTable::lookup`]).
    pub fn entry(&self, image: &str) -> Option<&ExecBinary> {
        self.exact
            .get(image)
            .or_else(|| self.exact.get(&resolve_image(image, &self.default_prefix)))
    }

    /// The binary for `image` at the version a step's `tag` picks, by
    /// Porch's rule for `config.yaml` keys: among the keys of the same image
    /// name (the image's own tag or digest dropped; a short name also as
    /// kpt resolves it), the highest whose tag satisfies the constraint
    /// ([`select_tag`](super::tag_selection::select_tag)); a tag that is no
    /// constraint (`latest`) only the key spelled with it. Digest keys are
    /// never picked by a tag.
    ///
    /// Errors: the NotFound detail — no key has this image name, or none
    /// of its versions matches (the tag, why, and the versions).
    pub fn entry_for_tag(&self, image: &str, tag: &str) -> Result<&ExecBinary, String> {
        let (name, _, _) = split_reference(image);
        let resolved = resolve_image(name, &self.default_prefix);
        let (resolved_name, _, _) = split_reference(&resolved);
        let Some((name, versions)) = [name, resolved_name]
            .into_iter()
            .find_map(|n| self.versions.get(n).map(|v| (n, v)))
        else {
            return Err(format!(
                "no image named {name:?} is configured in --config (at any version)"
            ));
        };
        let chosen = TagRequest::parse(tag)
            .select(versions)
            .map_err(|miss| format!("{name}: {miss}"))?;
        self.exact
            .get(&format!("{name}:{chosen}"))
            .ok_or_else(|| format!("{name}:{chosen} is listed but has no entry"))
    }

    /// Every distinct binary path, sorted (for start-up checks).
    pub fn binaries(&self) -> Vec<&Path> {
        let mut v: Vec<&Path> = self.exact.values().map(|b| b.path.as_path()).collect();
        v.sort();
        v.dedup();
        v
    }

    /// Number of image strings served.
    pub fn len(&self) -> usize {
        self.exact.len()
    }

    /// True when no image is configured.
    pub fn is_empty(&self) -> bool {
        self.exact.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::image::DEFAULT_IMAGE_PREFIX;

    const CFG: &str = "functions:\n- function: set-namespace\n  images:\n  - ghcr.io/kptdev/krm-functions-catalog/set-namespace:v0.4.5\n  - ghcr.io/kptdev/krm-functions-catalog/set-namespace:latest\n- function: other\n  images:\n  - ghcr.io/kptdev/krm-functions-catalog/set-namespace:latest\n";

    #[test]
    fn exact_then_resolved_lookup() {
        let cfg = ExecConfig::parse(CFG.as_bytes(), "config.yaml").unwrap();
        let (table, warnings) = cfg.table(Path::new("/fns"), DEFAULT_IMAGE_PREFIX);
        assert_eq!(warnings.len(), 1);
        assert!(warnings[0].contains("Ignoring duplicate image"));
        let want = Some(Path::new("/fns/set-namespace"));
        assert_eq!(
            table.lookup("ghcr.io/kptdev/krm-functions-catalog/set-namespace:v0.4.5"),
            want
        );
        assert_eq!(table.lookup("set-namespace:v0.4.5"), want);
        assert_eq!(table.lookup("set-namespace"), want);
        assert_eq!(table.lookup("set-labels"), None);
        assert_eq!(table.binaries(), vec![Path::new("/fns/set-namespace")]);
    }

    #[test]
    fn a_step_tag_picks_the_highest_configured_version_it_allows() {
        let cfg = ExecConfig::parse(
            b"functions:\n- function: sn-v041\n  images: [ghcr.io/kptdev/krm-functions-catalog/set-namespace:v0.4.1]\n- function: sn-v045\n  images: [ghcr.io/kptdev/krm-functions-catalog/set-namespace:v0.4.5, ghcr.io/kptdev/krm-functions-catalog/set-namespace:latest]\n- function: sn-v052\n  images: [ghcr.io/kptdev/krm-functions-catalog/set-namespace:v0.5.2]\n- function: pinned\n  images: ['ghcr.io/kptdev/krm-functions-catalog/set-namespace@sha256:0123']\n",
            "c",
        )
        .unwrap();
        let (table, _) = cfg.table(Path::new("/fns"), DEFAULT_IMAGE_PREFIX);
        let ran = |image: &str, tag: &str| {
            table
                .entry_for_tag(image, tag)
                .map(|b| b.path.file_name().unwrap().to_str().unwrap().to_string())
        };
        let full = "ghcr.io/kptdev/krm-functions-catalog/set-namespace";
        assert_eq!(ran(full, "~0.4").as_deref(), Ok("sn-v045"));
        assert_eq!(ran(full, ">=0.5").as_deref(), Ok("sn-v052"));
        assert_eq!(ran(full, "<0.4.2").as_deref(), Ok("sn-v041"));
        assert_eq!(ran(full, "v0.4.5").as_deref(), Ok("sn-v045"));
        assert_eq!(ran(full, "~0.4 || ~0.5").as_deref(), Ok("sn-v052"));
        assert_eq!(ran(full, "latest").as_deref(), Ok("sn-v045"));
        // The tag wins over the image's own; short names resolve.
        assert_eq!(
            ran(&format!("{full}:v0.4.1"), "~0.5").as_deref(),
            Ok("sn-v052")
        );
        assert_eq!(ran("set-namespace", "~0.4").as_deref(), Ok("sn-v045"));
        let e = ran(full, ">=1.0").unwrap_err();
        assert!(
            e.contains(full)
                && e.contains("\">=1.0\"")
                && e.contains("v0.4.1, v0.4.5, latest, v0.5.2"),
            "{e}"
        );
        assert!(
            ran(full, "sha256:0123").is_err(),
            "digest keys are never picked"
        );
        let e = ran(full, "~0.4 |").unwrap_err();
        assert!(e.contains("is not a valid semver constraint"), "{e}");
        let e = ran("example.com/other", "~0.4").unwrap_err();
        assert!(e.contains("no image named \"example.com/other\""), "{e}");
    }

    #[test]
    fn an_entry_names_the_sandbox_layers_it_may_do_without() {
        let cfg = ExecConfig::parse(
            b"functions:\n- function: a\n  images: [x]\n  sandbox: {allow: [network]}\n- function: b\n  images: [y]\n",
            "c",
        )
        .unwrap();
        assert!(cfg.warnings.is_empty(), "{:?}", cfg.warnings);
        let (table, _) = cfg.table(Path::new("/fns"), DEFAULT_IMAGE_PREFIX);
        assert!(table.entry("x").unwrap().sandbox.allow.network);
        assert_eq!(table.entry("y").unwrap().sandbox, SandboxGrant::default());
        let e = ExecConfig::parse(
            b"functions:\n- function: a\n  images: [x]\n  sandbox: {allow: [net]}\n",
            "c",
        )
        .unwrap_err();
        assert!(
            e.to_string()
                .contains("functions[0].sandbox.allow: unknown sandbox layer \"net\""),
            "{e}"
        );
        let cfg = ExecConfig::parse(
            b"functions:\n- function: a\n  images: [x]\n  sandbox: {read: [/opt/venv], write: [/srv/out]}\n",
            "c",
        )
        .unwrap();
        assert!(cfg.warnings.is_empty(), "{:?}", cfg.warnings);
        let (table, _) = cfg.table(Path::new("/fns"), DEFAULT_IMAGE_PREFIX);
        let grant = &table.entry("x").unwrap().sandbox;
        assert_eq!(grant.read, [Path::new("/opt/venv")]);
        assert_eq!(grant.write, [Path::new("/srv/out")]);
        let e = ExecConfig::parse(
            b"functions:\n- function: a\n  images: [x]\n  sandbox: {write: [out]}\n",
            "c",
        )
        .unwrap_err();
        assert!(
            e.to_string()
                .contains("functions[0].sandbox.write[0]: \"out\" is not an absolute path"),
            "{e}"
        );
    }

    #[test]
    fn bad_files_are_named() {
        let e = ExecConfig::parse(b"functions: {oops", "/etc/c.yaml").unwrap_err();
        assert!(
            e.to_string()
                .starts_with("failed to parse configuration file \"/etc/c.yaml\"")
        );
        let e = ExecConfig::parse(b"functions:\n- images: [a]\n  function: ''\n", "c").unwrap_err();
        assert!(e.to_string().contains("functions[0].function is empty"));
        assert_eq!(ExecConfig::parse(b"", "c").unwrap(), ExecConfig::default());
    }

    #[test]
    fn unknown_keys_are_warnings_naming_file_line_and_valid_keys() {
        let cfg =
            ExecConfig::parse(b"funtions:\n- function: a\n  images: [x]\n", "c.yaml").unwrap();
        assert!(cfg.functions.is_empty());
        assert_eq!(
            cfg.warnings,
            [
                "c.yaml: line 1 column 1: unknown key \"funtions\" (did you mean \"functions\"?); \
              valid keys: functions; the key is ignored (Porch ignores unknown keys too)"
            ]
        );
        let cfg =
            ExecConfig::parse(b"functions:\n- function: a\n  image: [x]\n", "c.yaml").unwrap();
        assert_eq!(cfg.functions[0].images, Vec::<String>::new());
        assert!(cfg.warnings[0].contains("line 3 column 3: unknown key \"image\" in functions[0] (did you mean \"images\"?); valid keys: function, images, sandbox"), "{:?}", cfg.warnings);
        assert!(
            ExecConfig::parse(CFG.as_bytes(), "c")
                .unwrap()
                .warnings
                .is_empty()
        );
    }
}
