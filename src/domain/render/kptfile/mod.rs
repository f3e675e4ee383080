//! The kpt v1 Kptfile (`apiVersion: kpt.dev/v1`, `kind: Kptfile`): model,
//! strict parsing and kpt's validation rules and messages.
//!
//! Facts: `krm-functions.md` §2.1–2.3. Parsing is strict like kpt's (Go
//! yaml.v3 with `KnownFields`): an unknown field anywhere in the typed part of
//! the Kptfile is an error naming the field and the Go type kpt reports
//! (`field targetResources not found in type v1.Function`). The old schema
//! versions `kpt.dev/v1alpha1` and `kpt.dev/v1alpha2` are refused with a
//! message naming the version. `status` is kept as an untyped value: kpt
//! writes it itself (§2.4) and its shape changed across kpt releases.

mod config_text;
mod unknown_fields;
mod validate;

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::de::{self, Deserializer};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::annotations as ann;
use crate::domain::codec;
pub use crate::domain::image::valid_image_name;
use unknown_fields::unknown_field;
use validate::validate_function;
pub use validate::{PipelineInvalid, ValidateError, check_all_krm, check_krm};

/// `apiVersion` of a current Kptfile.
pub const KPTFILE_API_VERSION: &str = "kpt.dev/v1";
/// `kind` of a Kptfile.
pub const KPTFILE_KIND: &str = "Kptfile";
/// The file name of a Kptfile (also its path annotation at a package root).
pub const KPTFILE_NAME: &str = "Kptfile";

/// A parsed `kpt.dev/v1` Kptfile.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Kptfile {
    /// `apiVersion` (always `kpt.dev/v1` after a successful parse).
    #[serde(default)]
    pub api_version: String,
    /// `kind` (always `Kptfile`).
    #[serde(default)]
    pub kind: String,
    /// Object metadata; `name` is the package name.
    #[serde(default)]
    pub metadata: ObjectMeta,
    /// Where the package came from (`kpt pkg get`); not used by render.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upstream: Option<Upstream>,
    /// The resolved upstream of the last fetch; not used by render.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upstream_lock: Option<UpstreamLock>,
    /// Package information (description, license…); not used by render.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub info: Option<PackageInfo>,
    /// The function pipeline.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pipeline: Option<Pipeline>,
    /// Inventory for `kpt live`; not used by render.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inventory: Option<Inventory>,
    /// Status written by kpt ≥ 2026-03 (render conditions); kept untyped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<Value>,
}

/// The metadata kyaml's `ObjectMeta` accepts in a Kptfile.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ObjectMeta {
    /// The package name.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
    /// Namespace (unused by kpt for Kptfiles).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub namespace: String,
    /// Labels.
    #[serde(
        default,
        deserialize_with = "string_map",
        skip_serializing_if = "BTreeMap::is_empty"
    )]
    pub labels: BTreeMap<String, String>,
    /// Annotations, e.g. [`ann::BFS_RENDERING`], [`ann::SAVE_ON_RENDER_FAILURE`].
    #[serde(
        default,
        deserialize_with = "string_map",
        skip_serializing_if = "BTreeMap::is_empty"
    )]
    pub annotations: BTreeMap<String, String>,
}

/// `upstream`: the package's origin.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Upstream {
    /// `git` (or `generic`).
    #[serde(default, rename = "type", skip_serializing_if = "String::is_empty")]
    pub kind: String,
    /// Git locator.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub git: Option<GitLock>,
    /// `resource-merge`, `fast-forward`, `force-delete-replace` or `copy-merge`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub update_strategy: String,
}

/// `upstreamLock`: the resolved origin of the last fetch.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UpstreamLock {
    /// `git` or `generic`.
    #[serde(default, rename = "type", skip_serializing_if = "String::is_empty")]
    pub kind: String,
    /// Git lock.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub git: Option<GitLock>,
    /// Generic lock (kpt 2026-03: `storeID`, `resourceID`, `resourceVersion`), untyped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub generic: Option<Value>,
}

/// A git locator (`repo`, `directory`, `ref`, and `commit` in locks).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GitLock {
    /// Repository URL.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub repo: String,
    /// Directory in the repository.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub directory: String,
    /// Branch, tag or commit.
    #[serde(default, rename = "ref", skip_serializing_if = "String::is_empty")]
    pub git_ref: String,
    /// Commit SHA (locks only).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub commit: String,
}

/// `info`: package metadata.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PackageInfo {
    /// Web page.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub site: String,
    /// Author e-mails.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub emails: Vec<String>,
    /// SPDX license id.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub license: String,
    /// License file path.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub license_file: String,
    /// Description.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub description: String,
    /// Keywords.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub keywords: Vec<String>,
    /// Documentation path.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub man: String,
    /// Readiness gates (`conditionType` each), untyped.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub readiness_gates: Vec<Value>,
}

/// `inventory`: parameters of the inventory object for `kpt live`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Inventory {
    /// Namespace of the inventory object.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub namespace: String,
    /// Name of the inventory object.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
    /// Inventory id label.
    #[serde(
        default,
        rename = "inventoryID",
        skip_serializing_if = "String::is_empty"
    )]
    pub inventory_id: String,
    /// Labels.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    /// Annotations.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
}

/// `pipeline`: mutators, then validators.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Pipeline {
    /// Functions that transform the resources, in order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mutators: Vec<Function>,
    /// Functions that check the resources (their output is discarded), in order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub validators: Vec<Function>,
}

impl Pipeline {
    /// True when there is no mutator and no validator (kpt `IsEmpty`).
    pub fn is_empty(&self) -> bool {
        self.mutators.is_empty() && self.validators.is_empty()
    }
}

/// One pipeline step (kpt `Function`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Function {
    /// Container image; short names get the image prefix (§3.10).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub image: String,
    /// Command line of a local executable (needs `allow_exec`).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub exec: String,
    /// Tag override or semver constraint for `image` (kpt 2026).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub tag: String,
    /// Package-relative path of a file holding the functionConfig object.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub config_path: String,
    /// Data of a `v1/ConfigMap` named `function-input` used as
    /// functionConfig, in the Kptfile's key order. Values are the text the
    /// Kptfile has ([`Pipeline::take_config_map_texts`]: `1.50`, `0x1F`,
    /// `007` as written, as kpt's yaml.v3 decodes a scalar into a string)
    /// when the render has the Kptfile's text; else numbers and booleans
    /// as their text.
    #[serde(
        default,
        deserialize_with = "ordered_string_map",
        serialize_with = "serialize_pairs",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub config_map: Vec<(String, String)>,
    /// Identifier used in status output and by `kpt pkg update`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
    /// Objects to give the function (OR across entries, AND within one).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub selectors: Vec<Selector>,
    /// Objects to withhold, applied after `selectors`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub exclude: Vec<Selector>,
    /// The step's time limit, a Go duration (`30s`, `1m30s`); overrides
    /// render's `--step-timeout`. Our extension, not kpt's: kpt refuses a
    /// Kptfile with this field (`field timeout not found in type v1.Function`).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub timeout: String,
}

impl Function {
    /// True when the step has `selectors` or `exclude` (kpt then logs
    /// `on N resource(s)` and merges the output back by kpt-resource-id).
    pub fn is_filtered(&self) -> bool {
        !self.selectors.is_empty() || !self.exclude.is_empty()
    }

    /// The step's `timeout:`, when it has one.
    ///
    /// Errors: the text is not a Go duration greater than zero (the
    /// validation of the pipeline reports it as a Kptfile error first).
    pub fn timeout(&self) -> Result<Option<std::time::Duration>, String> {
        if self.timeout.is_empty() {
            return Ok(None);
        }
        match go_parse_duration::parse_duration(self.timeout.trim()) {
            Ok(n) if n > 0 => Ok(Some(std::time::Duration::from_nanos(n as u64))),
            _ => Err(format!(
                "timeout {:?} is not a duration greater than zero: write a Go duration such as 30s, 2m or 1m30s",
                self.timeout
            )),
        }
    }

    /// kpt's `PipelineStepNameOrImage`: the `name`, else the last path
    /// segment of the image repository (no registry, tag or digest).
    pub fn name_or_image(&self) -> String {
        if !self.name.is_empty() {
            return self.name.clone();
        }
        let without_digest = self.image.split('@').next().unwrap_or("");
        let last = without_digest.rsplit('/').next().unwrap_or("");
        last.split(':').next().unwrap_or("").to_string()
    }
}

/// Object selector (kpt `Selector`): every non-empty field must match.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Selector {
    /// `apiVersion` to match.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub api_version: String,
    /// `kind` to match.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub kind: String,
    /// `metadata.name` to match.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
    /// `metadata.namespace` to match.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub namespace: String,
    /// Labels that must all be present with these values.
    #[serde(
        default,
        deserialize_with = "string_map",
        skip_serializing_if = "BTreeMap::is_empty"
    )]
    pub labels: BTreeMap<String, String>,
    /// Annotations that must all be present with these values.
    #[serde(
        default,
        deserialize_with = "string_map",
        skip_serializing_if = "BTreeMap::is_empty"
    )]
    pub annotations: BTreeMap<String, String>,
}

impl Selector {
    /// True when no field is set (an empty `exclude` entry is ignored).
    pub fn is_empty(&self) -> bool {
        self.api_version.is_empty()
            && self.kind.is_empty()
            && self.name.is_empty()
            && self.namespace.is_empty()
            && self.labels.is_empty()
            && self.annotations.is_empty()
    }
}

/// A map whose values must be scalars; numbers and booleans become their
/// text (Go's yaml.v3 decodes `3` into a string field as `"3"`), sequences
/// and maps are refused with yaml.v3's wording.
fn string_map<'de, D: Deserializer<'de>>(d: D) -> Result<BTreeMap<String, String>, D::Error> {
    Ok(ordered_string_map(d)?.into_iter().collect())
}

/// [`string_map`] keeping the keys in the order they are written.
fn ordered_string_map<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<(String, String)>, D::Error> {
    let raw: Option<serde_json::Map<String, Value>> = Option::deserialize(d)?;
    let mut out = Vec::new();
    for (k, v) in raw.unwrap_or_default() {
        let s = match &v {
            Value::Null => String::new(),
            Value::Array(_) => return Err(de::Error::custom("cannot unmarshal !!seq into string")),
            Value::Object(_) => {
                return Err(de::Error::custom("cannot unmarshal !!map into string"));
            }
            other => ann::scalar_text(other).unwrap_or_default(),
        };
        out.push((k, s));
    }
    Ok(out)
}

/// Key/value pairs written as a mapping, in their order.
fn serialize_pairs<S: serde::Serializer>(
    pairs: &[(String, String)],
    s: S,
) -> Result<S::Ok, S::Error> {
    use serde::ser::SerializeMap;
    let mut map = s.serialize_map(Some(pairs.len()))?;
    for (k, v) in pairs {
        map.serialize_entry(k, v)?;
    }
    map.end()
}

/// Why a Kptfile could not be read.
///
/// Not comparable: [`KptfileError::Decode`] keeps the decoder's own error.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum KptfileError {
    /// Not a single mapping.
    #[error("{0}")]
    Syntax(String),
    /// `kpt.dev/v1alpha1` or `kpt.dev/v1alpha2`.
    #[error(
        "Kptfile has an old version ({version:?}) of the Kptfile schema; update the package to kpt.dev/v1 (see https://kpt.dev/installation/migration)"
    )]
    OldVersion {
        /// `v1alpha1` or `v1alpha2`.
        version: String,
    },
    /// Another apiVersion/kind.
    #[error("unknown resource type \"{api_version}, Kind={kind}\" found in Kptfile")]
    UnknownType {
        /// The apiVersion found.
        api_version: String,
        /// The kind found.
        kind: String,
    },
    /// A field the schema does not have (kpt: yaml.v3 `KnownFields`).
    #[error(
        "yaml: unmarshal errors:\n  {}field {field} not found in type {type_name}",
        line.map(|l| format!("line {l}: ")).unwrap_or_default()
    )]
    UnknownField {
        /// The unknown key.
        field: String,
        /// The Go type kpt names, e.g. `v1.Function`.
        type_name: &'static str,
        /// 1-based line, when parsed from text.
        line: Option<usize>,
    },
    /// A field of the wrong type (e.g. a list inside `configMap`) in
    /// Kptfile text ([`Kptfile::parse`]): the YAML decoder's error, with
    /// line and column, is the source.
    #[error("{0}")]
    Decode(#[source] codec::CodecError),
    /// A field of the wrong type in an already parsed Kptfile object
    /// ([`Kptfile::from_value`]): the JSON decoder's error is the source.
    #[error("{0}")]
    DecodeValue(#[source] Arc<serde_json::Error>),
    /// Not YAML: the parser's error (line and column when known).
    #[error(transparent)]
    Yaml(#[from] codec::CodecError),
}

impl Kptfile {
    /// Parses Kptfile text strictly.
    ///
    /// Errors: [`KptfileError`] — syntax, old or unknown version, unknown
    /// field (with its line), or a value of the wrong type.
    pub fn parse(bytes: &[u8]) -> Result<Self, KptfileError> {
        let value: Value = codec::from_yaml_slice(bytes)?;
        check_version(&value)?;
        codec::from_yaml_slice::<Kptfile>(bytes)
            .map_err(|e| decode_error(&value, e, KptfileError::Decode))
    }

    /// Reads a Kptfile from an already parsed object (e.g. a ResourceList
    /// item). Reader annotations (path, index, package-path…) are allowed.
    ///
    /// Errors: as [`Kptfile::parse`], without line numbers.
    pub fn from_value(value: &Value) -> Result<Self, KptfileError> {
        check_version(value)?;
        serde_json::from_value::<Kptfile>(value.clone())
            .map_err(|e| decode_error(value, e, |e| KptfileError::DecodeValue(Arc::new(e))))
    }

    /// The pipeline, or an empty one.
    pub fn pipeline(&self) -> Pipeline {
        self.pipeline.clone().unwrap_or_default()
    }

    /// The value of a `metadata.annotations` entry.
    pub fn annotation(&self, key: &str) -> Option<&str> {
        self.metadata.annotations.get(key).map(String::as_str)
    }

    /// `kpt.dev/bfs-rendering: "true"` (any letter case).
    pub fn bfs_rendering(&self) -> bool {
        ann::is_true(self.annotation(ann::BFS_RENDERING))
    }

    /// `kpt.dev/save-on-render-failure: "true"` (any letter case).
    pub fn save_on_render_failure(&self) -> bool {
        ann::is_true(self.annotation(ann::SAVE_ON_RENDER_FAILURE))
    }

    /// kpt's load-time validation of the pipeline (`Kptfile.Validate`):
    /// every function names exactly one of `image`/`exec`, images are valid
    /// references, `configMap` and `configPath` are not both set, and a
    /// `configPath` is relative, inside the package, and names a file that
    /// holds exactly one KRM object. `config_file` returns the objects read
    /// from a package-relative file path (files of subpackages included, as
    /// on disk); `None` when there is no such file.
    ///
    /// Errors: `invalid pipeline: function "<image>": Kptfile is invalid: …`.
    pub fn validate<'a>(
        &self,
        config_file: impl Fn(&str) -> Option<Vec<&'a Value>>,
    ) -> Result<(), PipelineInvalid> {
        let Some(pipeline) = &self.pipeline else {
            return Ok(());
        };
        for (list, fns) in [
            ("mutators", &pipeline.mutators),
            ("validators", &pipeline.validators),
        ] {
            for (i, f) in fns.iter().enumerate() {
                validate_function(f, list, i, &config_file).map_err(|error| PipelineInvalid {
                    image: f.image.clone(),
                    error,
                })?;
            }
        }
        Ok(())
    }
}

/// kpt's unknown-field error when `value` has a field the schema lacks,
/// else `wrap(error)`.
fn decode_error<E: std::fmt::Display>(
    value: &Value,
    error: E,
    wrap: impl FnOnce(E) -> KptfileError,
) -> KptfileError {
    match unknown_field(value) {
        Some((field, type_name)) => KptfileError::UnknownField {
            field,
            type_name,
            line: line_of(&error.to_string()),
        },
        None => wrap(error),
    }
}

/// `line N` from a parser message, if it names one.
fn line_of(message: &str) -> Option<usize> {
    let i = message.find("line ")?;
    let digits: String = message[i + 5..]
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    digits.parse().ok()
}

fn check_version(value: &Value) -> Result<(), KptfileError> {
    if !value.is_object() {
        return Err(KptfileError::Syntax(
            "a Kptfile must be a YAML mapping".to_string(),
        ));
    }
    let api_version = ann::api_version(value);
    let kind = ann::kind(value);
    if api_version == KPTFILE_API_VERSION && kind == KPTFILE_KIND {
        return Ok(());
    }
    if kind == KPTFILE_KIND
        && let Some(version @ ("v1alpha1" | "v1alpha2")) = api_version.strip_prefix("kpt.dev/")
    {
        return Err(KptfileError::OldVersion {
            version: version.to_string(),
        });
    }
    Err(KptfileError::UnknownType {
        api_version: api_version.to_string(),
        kind: kind.to_string(),
    })
}

/// Removes what a render itself recorded in a Kptfile's `status` — the
/// `Rendered` condition and `renderStatus` (kpt ≥ 2026, `krm-functions.md`
/// §2.4) — and `status` itself when nothing else is left in it. Other
/// conditions (Porch's readiness gates) stay.
pub fn strip_render_status(kptfile: &mut Value) {
    let Some(obj) = kptfile.as_object_mut() else {
        return;
    };
    let Some(status) = obj.get_mut("status").and_then(Value::as_object_mut) else {
        return;
    };
    status.shift_remove("renderStatus");
    if let Some(conditions) = status.get_mut("conditions").and_then(Value::as_array_mut) {
        conditions.retain(|c| c.get("type").and_then(Value::as_str) != Some("Rendered"));
        if conditions.is_empty() {
            status.shift_remove("conditions");
        }
    }
    if status.is_empty() {
        obj.shift_remove("status");
    }
}
#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const BASIC: &str = "apiVersion: kpt.dev/v1\nkind: Kptfile\nmetadata:\n  name: app\n  annotations:\n    kpt.dev/bfs-rendering: \"True\"\npipeline:\n  mutators:\n    - image: set-namespace:v0.4.5\n      configMap:\n        namespace: staging\n        replicas: 3\n  validators:\n    - exec: ./check --strict\n      selectors:\n        - kind: Deployment\n          labels: {app: web}\n";

    #[test]
    fn parses_a_pipeline() {
        let k = Kptfile::parse(BASIC.as_bytes()).unwrap();
        assert_eq!(k.metadata.name, "app");
        assert!(k.bfs_rendering());
        assert!(!k.save_on_render_failure());
        let p = k.pipeline();
        assert_eq!(
            p.mutators[0].config_map,
            [
                ("namespace".to_string(), "staging".to_string()),
                ("replicas".to_string(), "3".to_string())
            ]
        );
        assert_eq!(p.validators[0].exec, "./check --strict");
        assert_eq!(p.validators[0].selectors[0].labels["app"], "web");
        assert!(p.validators[0].is_filtered());
        let from_value = Kptfile::from_value(&codec::from_yaml_str(BASIC).unwrap()).unwrap();
        assert_eq!(from_value, k);
    }

    #[test]
    fn unknown_fields_are_named_with_kpts_go_type_and_line() {
        let text = "apiVersion: kpt.dev/v1\nkind: Kptfile\nmetadata:\n  name: app\npipeline:\n  mutators:\n    - image: x\n      targetResources:\n        - kind: Deployment\n";
        let err = Kptfile::parse(text.as_bytes()).unwrap_err();
        assert_eq!(
            err.to_string(),
            "yaml: unmarshal errors:\n  line 8: field targetResources not found in type v1.Function"
        );
        let v: Value = codec::from_yaml_str(text).unwrap();
        assert!(matches!(
            Kptfile::from_value(&v).unwrap_err(),
            KptfileError::UnknownField {
                line: None,
                type_name: "v1.Function",
                ..
            }
        ));
        let meta = json!({"apiVersion": "kpt.dev/v1", "kind": "Kptfile", "metadata": {"name": "a", "uid": "u"}});
        assert!(
            Kptfile::from_value(&meta)
                .unwrap_err()
                .to_string()
                .contains("field uid not found in type yaml.ObjectMeta")
        );
    }

    #[test]
    fn a_value_of_the_wrong_type_keeps_the_decoders_error() {
        let text = "apiVersion: kpt.dev/v1\nkind: Kptfile\nmetadata:\n  name: app\npipeline:\n  mutators:\n    - image: x\n      configMap: [a]\n";
        let err = Kptfile::parse(text.as_bytes()).unwrap_err();
        let source = std::error::Error::source(&err).expect("the decoder's error is kept");
        assert!(source.is::<codec::CodecError>(), "{err:?}");
        assert_eq!(err.to_string(), source.to_string());
        let v: Value = codec::from_yaml_str(text).unwrap();
        let err = Kptfile::from_value(&v).unwrap_err();
        let source = std::error::Error::source(&err).expect("the decoder's error is kept");
        assert!(source.is::<Arc<serde_json::Error>>(), "{err:?}");
        assert_eq!(err.to_string(), source.to_string());
    }

    #[test]
    fn old_and_unknown_versions_are_refused() {
        for v in ["v1alpha1", "v1alpha2"] {
            let text = format!("apiVersion: kpt.dev/{v}\nkind: Kptfile\nmetadata:\n  name: a\n");
            let e = Kptfile::parse(text.as_bytes()).unwrap_err();
            assert!(
                e.to_string().contains(&format!(
                    "has an old version (\"{v}\") of the Kptfile schema"
                )),
                "{e}"
            );
        }
        let e = Kptfile::parse(b"apiVersion: v1\nkind: ConfigMap\n").unwrap_err();
        assert_eq!(
            e.to_string(),
            "unknown resource type \"v1, Kind=ConfigMap\" found in Kptfile"
        );
    }

    #[test]
    fn config_map_values_must_be_scalars() {
        let text = "apiVersion: kpt.dev/v1\nkind: Kptfile\nmetadata:\n  name: a\npipeline:\n  mutators:\n    - image: x\n      configMap:\n        envs:\n          - dev\n";
        let e = Kptfile::parse(text.as_bytes()).unwrap_err();
        assert!(
            e.to_string().contains("cannot unmarshal !!seq into string"),
            "{e}"
        );
    }

    fn validate(text: &str, files: &[(&str, Vec<Value>)]) -> Result<(), String> {
        let k = Kptfile::parse(text.as_bytes()).map_err(|e| e.to_string())?;
        k.validate(|p| {
            files
                .iter()
                .find(|(f, _)| *f == p)
                .map(|(_, docs)| docs.iter().collect())
        })
        .map_err(|e| e.to_string())
    }

    fn with_fn(body: &str) -> String {
        format!(
            "apiVersion: kpt.dev/v1\nkind: Kptfile\nmetadata:\n  name: a\npipeline:\n  mutators:\n    - image: set-labels:latest\n    - {body}\n"
        )
    }

    #[test]
    fn validation_messages_are_kpts() {
        let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}});
        let e = validate(&with_fn("name: x"), &[]).unwrap_err();
        assert_eq!(
            e,
            "invalid pipeline: function \"\": Kptfile is invalid:\nField: `pipeline.mutators[1]`\nReason: must specify a functon (`image` or `exec`) to execute\n"
        );
        let e = validate(&with_fn("{image: a, exec: b}"), &[]).unwrap_err();
        assert!(e.contains("must not specify both `image` and `exec` at the same time"));
        let e = validate(&with_fn("image: Bad/Image"), &[]).unwrap_err();
        assert!(e.contains("Field: `pipeline.mutators[1].image`\nValue: \"Bad/Image\"\nReason: function name \"Bad/Image\" is invalid"), "{e}");
        let e = validate(
            &with_fn("{image: a, configPath: c.yaml, configMap: {a: b}}"),
            &[],
        )
        .unwrap_err();
        assert!(e.contains(
            "functionConfig must not specify both `configMap` and `configPath` at the same time"
        ));
        let e = validate(&with_fn("{image: a, configPath: /etc/c.yaml}"), &[]).unwrap_err();
        assert!(e.contains("Field: `pipeline.mutators[1].configPath`\nValue: \"/etc/c.yaml\"\nReason: path must be relative\n"), "{e}");
        let e = validate(&with_fn("{image: a, configPath: some/../../c.yaml}"), &[]).unwrap_err();
        assert!(e.contains("Reason: path must not be outside the package"));
        let e = validate(&with_fn("{image: a, configPath: c.yaml}"), &[]).unwrap_err();
        assert!(e.contains("failed to open functionConfig from path \"c.yaml\""));
        let e = validate(
            &with_fn("{image: a, configPath: c.yaml}"),
            &[("c.yaml", vec![cm.clone(), cm.clone()])],
        )
        .unwrap_err();
        assert!(
            e.contains("functionConfig \"c.yaml\" must not contain more than one config, got 2")
        );
        let e = validate(
            &with_fn("{image: a, configPath: c.yaml}"),
            &[(
                "c.yaml",
                vec![json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {}})],
            )],
        )
        .unwrap_err();
        assert!(e.contains("functionConfig \"c.yaml\": resource must have `metadata.name`"));
        assert!(
            validate(
                &with_fn("{image: a, configPath: ./c.yaml}"),
                &[("c.yaml", vec![cm])]
            )
            .is_ok()
        );
    }
}
