//! kpt's load-time pipeline validation (`Kptfile.Validate`) and KRM checks
//! (`IsKRM`, `AreKRM`), with kpt's field paths and messages.

use std::fmt;

use serde_json::Value;

#[cfg(doc)]
use super::Kptfile;
use super::{Function, valid_image_name};
use crate::domain::render::annotations::{self as ann, clean_path};

/// kpt's `ValidateError`: which field is wrong and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ValidateError {
    /// Field path, e.g. `pipeline.mutators[0].configPath`.
    pub field: String,
    /// The offending value, when there is one.
    pub value: String,
    /// Why it is wrong.
    pub reason: String,
}

impl fmt::Display for ValidateError {
    /// ``Kptfile is invalid:\nField: `<field>`\n[Value: "<value>"\n]Reason: <reason>\n``.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Kptfile is invalid:\nField: `{}`\n", self.field)?;
        if !self.value.is_empty() {
            writeln!(f, "Value: {:?}", self.value)?;
        }
        writeln!(f, "Reason: {}", self.reason)
    }
}

impl std::error::Error for ValidateError {}

/// A pipeline that failed [`Kptfile::validate`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid pipeline: function {image:?}: {error}")]
pub struct PipelineInvalid {
    /// The function's `image` ("" for exec functions), as kpt names it.
    pub image: String,
    /// The field error.
    pub error: ValidateError,
}

pub(super) fn validate_function<'a>(
    f: &Function,
    list: &str,
    i: usize,
    config_file: &impl Fn(&str) -> Option<Vec<&'a Value>>,
) -> Result<(), ValidateError> {
    let at = |suffix: &str, value: &str, reason: String| ValidateError {
        field: format!("pipeline.{list}[{i}]{suffix}"),
        value: value.to_string(),
        reason,
    };
    if f.image.is_empty() && f.exec.is_empty() {
        return Err(at(
            "",
            "",
            "must specify a functon (`image` or `exec`) to execute".into(),
        ));
    }
    if !f.image.is_empty() && !f.exec.is_empty() {
        return Err(at(
            "",
            "",
            "must not specify both `image` and `exec` at the same time".into(),
        ));
    }
    if !f.image.is_empty() && !valid_image_name(&f.image) {
        return Err(at(
            ".image",
            &f.image,
            format!("function name {:?} is invalid", f.image),
        ));
    }
    if let Err(reason) = f.timeout() {
        return Err(at(".timeout", &f.timeout, reason));
    }
    if !f.config_map.is_empty() && !f.config_path.is_empty() {
        return Err(at(
            "",
            "",
            "functionConfig must not specify both `configMap` and `configPath` at the same time"
                .into(),
        ));
    }
    if !f.config_path.is_empty() {
        let p = &f.config_path;
        let bad = |reason: String| at(".configPath", p, reason);
        if p.trim().is_empty() {
            return Err(bad("path must not be empty".into()));
        }
        let cleaned = clean_path(p);
        if cleaned.starts_with('/') {
            return Err(bad("path must be relative".into()));
        }
        if cleaned.contains("..") {
            return Err(bad("path must not be outside the package".into()));
        }
        let Some(objects) = config_file(&cleaned) else {
            return Err(bad(format!(
                "failed to open functionConfig from path {p:?}: open {cleaned}: no such file or directory"
            )));
        };
        if objects.len() > 1 {
            return Err(bad(format!(
                "functionConfig {p:?} must not contain more than one config, got {}",
                objects.len()
            )));
        }
        if let Some(first) = objects.first()
            && let Err(reason) = check_krm(first)
        {
            return Err(bad(format!("functionConfig {p:?}: {reason}")));
        }
    }
    Ok(())
}
/// kpt's `IsKRM`: an object has `apiVersion`, `kind` and `metadata.name`.
/// Kustomization files (`kustomization.yaml|yml`, `Kustomization`, an
/// apiVersion in `kustomize.config.k8s.io`, or kind `Kustomization` without
/// apiVersion) are exempt.
///
/// Errors: kpt's reason text, e.g. ``resource must have `apiVersion` ``.
pub fn check_krm(item: &Value) -> Result<(), &'static str> {
    let base = ann::path(item)
        .map(|p| p.rsplit('/').next().unwrap_or("").to_string())
        .unwrap_or_default();
    if matches!(
        base.as_str(),
        "kustomization.yaml" | "kustomization.yml" | "Kustomization"
    ) {
        return Ok(());
    }
    let api_version = ann::api_version(item);
    let kind = ann::kind(item);
    if api_version.starts_with("kustomize.config.k8s.io")
        || (api_version.is_empty() && kind == "Kustomization")
    {
        return Ok(());
    }
    let meta_ok = item.is_object()
        && item
            .get("metadata")
            .is_none_or(|m| m.is_object() || m.is_null());
    if !meta_ok {
        return Err("resource must have `apiVersion`, `kind`, and `name`");
    }
    if api_version.is_empty() {
        return Err("resource must have `apiVersion`");
    }
    if kind.is_empty() {
        return Err("resource must have `kind`");
    }
    if ann::name(item).is_empty() {
        return Err("resource must have `metadata.name`");
    }
    Ok(())
}

/// kpt's `AreKRM`: the first non-KRM object as `<path>: <reason>`.
///
/// Errors: the path annotation of the offending object ("" if none) and the reason.
pub fn check_all_krm(items: &[Value]) -> Result<(), String> {
    for item in items {
        if let Err(reason) = check_krm(item) {
            return Err(format!("{}: {reason}", ann::path(item).unwrap_or_default()));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn krm_check_and_kustomization_exemption() {
        assert_eq!(
            check_krm(&json!({"kind": "X", "metadata": {"name": "a"}})),
            Err("resource must have `apiVersion`")
        );
        assert_eq!(
            check_krm(&json!({"apiVersion": "v1", "metadata": {"name": "a"}})),
            Err("resource must have `kind`")
        );
        assert_eq!(
            check_krm(&json!({"apiVersion": "v1", "kind": "X"})),
            Err("resource must have `metadata.name`")
        );
        assert!(check_krm(&json!({"resources": ["a.yaml"], "metadata": {"annotations": {ann::PATH: "sub/kustomization.yaml"}}})).is_ok());
        assert!(
            check_krm(
                &json!({"apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization"})
            )
            .is_ok()
        );
        let items = vec![json!({"a": 1, "metadata": {"annotations": {ann::PATH: "non-krm.yaml"}}})];
        assert_eq!(
            check_all_krm(&items).unwrap_err(),
            "non-krm.yaml: resource must have `apiVersion`"
        );
        assert_eq!(
            Function {
                image: "ghcr.io/a/set-labels:v1".into(),
                ..Default::default()
            }
            .name_or_image(),
            "set-labels"
        );
    }
}
