//! What a render reports: per-step records, kpt's `FunctionResultList`
//! (`--results-dir`), Porch's `RenderStatus`, and kpt's Kptfile render status.
//!
//! Facts: `krm-functions.md` §2.4–2.6, §3.8; `porch-function-runner.md` §8.2.
//! All types serialise through [`crate::domain::codec`] (YAML) or serde_json
//! (Porch's API is JSON) with the field names and omission rules of their Go
//! originals.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::domain::codec::{self, CodecError};
use crate::domain::resource_list::{ResourceRef, ResultItem, Severity, write_result_line};
use crate::ports::FunctionTarget;

/// `apiVersion` of a FunctionResultList.
pub const RESULT_LIST_API_VERSION: &str = "kpt.dev/v1";
/// `kind` of a FunctionResultList.
pub const RESULT_LIST_KIND: &str = "FunctionResultList";
/// `metadata.name` of the FunctionResultList kpt writes.
pub const RESULT_LIST_NAME: &str = "fnresults";
/// File name of the results file inside `--results-dir`.
pub const RESULTS_FILE: &str = "results.yaml";

/// One structured result as kpt stores it (`fnresult/v1` / Porch
/// `ResultItem`): field values narrowed to strings, `file.path` omitted
/// when empty and `file.index` when 0. Not a second model of a result: it
/// is only ever made from the function's [`ResultItem`] (`From`) or read
/// back from a stored results file, and prints as that item does.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StructuredResult {
    /// Human-readable message.
    #[serde(default)]
    pub message: String,
    /// `error`, `warning` or `info`; absent (`None`) reads as `info` and
    /// stays absent when stored, as in kpt's results.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub severity: Option<Severity>,
    /// The object the result is about (kept as `{}` when the function sent an empty one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource_ref: Option<ResourceRef>,
    /// The field the result is about.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub field: Option<ResultField>,
    /// The file the result is about.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file: Option<ResultFile>,
    /// Free-form tags.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub tags: BTreeMap<String, String>,
}

/// `field` of a stored result.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ResultField {
    /// Dotted field path.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub path: String,
    /// Current value as text (non-scalars as trimmed YAML).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current_value: Option<String>,
    /// Proposed value as text (non-scalars as trimmed YAML).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub proposed_value: Option<String>,
}

/// `file` of a stored result.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResultFile {
    /// Slash-separated path; omitted when empty.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub path: String,
    /// Document index; omitted when 0.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub index: i64,
}

fn is_zero(i: &i64) -> bool {
    *i == 0
}

fn value_text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        Value::Bool(_) | Value::Number(_) => v.to_string(),
        other => codec::to_yaml_string(other)
            .map(|s| s.trim().to_string())
            .unwrap_or_default(),
    }
}

impl From<&ResultItem> for StructuredResult {
    /// kpt's narrowing of a function's result for storage.
    fn from(r: &ResultItem) -> Self {
        StructuredResult {
            message: r.message.clone(),
            severity: r.severity,
            resource_ref: r.resource_ref.clone(),
            field: r.field.as_ref().map(|f| ResultField {
                path: f.path.clone(),
                current_value: f.current_value.as_ref().map(value_text),
                proposed_value: f.proposed_value.as_ref().map(value_text),
            }),
            file: r.file.as_ref().map(|f| ResultFile {
                path: f.path.clone(),
                index: f.index.unwrap_or(0),
            }),
            tags: r.tags.clone(),
        }
    }
}

impl std::fmt::Display for StructuredResult {
    /// kpt's one-line rendering, the same as the [`ResultItem`] it was
    /// narrowed from ([`write_result_line`]).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write_result_line(
            f,
            self.severity,
            self.resource_ref.as_ref(),
            self.field.as_ref().map(|x| x.path.as_str()),
            &self.message,
        )
    }
}

/// One function execution in a FunctionResultList (kpt `fnresult/v1.Result`,
/// Porch `Result`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FunctionResult {
    /// Resolved image (exclusive with `exec`).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub image: String,
    /// Exec command line as written (exclusive with `image`).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub exec: String,
    /// The function's stderr; omitted when empty.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub stderr: String,
    /// Exit code (always present; 1 for failures that are not a process exit).
    #[serde(default)]
    pub exit_code: i32,
    /// Structured results.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub results: Vec<StructuredResult>,
}

/// `metadata` of a FunctionResultList.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResultListMeta {
    /// Always [`RESULT_LIST_NAME`] when written by a render.
    #[serde(default)]
    pub name: String,
}

/// kpt's `FunctionResultList` (`kpt.dev/v1`), also Porch's `ResultList`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FunctionResultList {
    /// [`RESULT_LIST_API_VERSION`].
    pub api_version: String,
    /// [`RESULT_LIST_KIND`].
    pub kind: String,
    /// `name: fnresults`.
    pub metadata: ResultListMeta,
    /// 0, or 1 when a function failed.
    #[serde(default)]
    pub exit_code: i32,
    /// One entry per function execution, in execution order; omitted when empty.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub items: Vec<FunctionResult>,
}

impl Default for FunctionResultList {
    fn default() -> Self {
        Self {
            api_version: RESULT_LIST_API_VERSION.into(),
            kind: RESULT_LIST_KIND.into(),
            metadata: ResultListMeta {
                name: RESULT_LIST_NAME.into(),
            },
            exit_code: 0,
            items: Vec::new(),
        }
    }
}

impl FunctionResultList {
    /// The YAML text of `results.yaml`, as kpt writes it (kyaml's style,
    /// sequences indented under their key: `items:` then `  - image: …`).
    ///
    /// Errors: only if a value cannot be represented in YAML.
    pub fn to_yaml(&self) -> Result<String, CodecError> {
        let value = serde_json::to_value(self).map_err(CodecError::new)?;
        Ok(codec::emit::document(&value, codec::emit::SeqIndent::Wide))
    }
}

/// Porch's `RenderStatus` (`api/porch/v1alpha1`): the result list and the
/// render error text (JSON keys `result`, omitted when absent, and `error`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RenderStatus {
    /// The functions' results.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<FunctionResultList>,
    /// The render error (`err.Error()`), empty on success.
    #[serde(default)]
    pub error: String,
}

/// Whether a step is a mutator or a validator.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum StepKind {
    /// Entry of `pipeline.mutators`.
    Mutator,
    /// Entry of `pipeline.validators`.
    Validator,
}

impl StepKind {
    /// `mutator` / `validator` (kpt's wording in messages).
    pub fn word(self) -> &'static str {
        match self {
            StepKind::Mutator => "mutator",
            StepKind::Validator => "validator",
        }
    }
}

/// Everything known about one attempted pipeline step.
#[derive(Debug, Clone, PartialEq)]
pub struct StepRecord {
    /// Package path relative to the root package ("" for the root).
    pub package: String,
    /// Mutator or validator.
    pub kind: StepKind,
    /// Position in its list.
    pub index: usize,
    /// The function's `name` in the Kptfile ("" if none).
    pub name: String,
    /// The resolved image or the exec command line.
    pub target: FunctionTarget,
    /// Number of objects the step received, when it had selectors/exclusions.
    pub resource_count: Option<usize>,
    /// The function ran and kpt records it in the FunctionResultList.
    pub ran: bool,
    /// Exit code (0 success; 1 for failures other than a process exit).
    pub exit_code: i32,
    /// The function's stderr.
    pub stderr: String,
    /// The function's structured results.
    pub results: Vec<StructuredResult>,
    /// Why the step failed when it was not (only) the function's exit code:
    /// missing `--allow-exec`, output checks, runtime errors.
    pub execution_error: Option<String>,
    /// The sandbox's line for a step whose function failed with any layer
    /// on ([`crate::domain::evaluation::FunctionFailure::sandbox_hint`]);
    /// printed under the step, not written to `results.yaml` (which stays
    /// kpt's).
    pub sandbox_hint: Option<String>,
}

impl StepRecord {
    /// True when the step failed.
    pub fn failed(&self) -> bool {
        self.exit_code != 0 || self.execution_error.is_some()
    }

    /// The entry kpt appends to the FunctionResultList for this step.
    pub fn function_result(&self) -> FunctionResult {
        let (image, exec) = match &self.target {
            FunctionTarget::Image(i) => (i.clone(), String::new()),
            FunctionTarget::Exec(e) => (String::new(), e.clone()),
        };
        FunctionResult {
            image,
            exec,
            stderr: self.stderr.clone(),
            exit_code: self.exit_code,
            results: self.results.clone(),
        }
    }

    /// kpt's `PipelineStepResult` for the Kptfile status.
    pub fn step_result(&self) -> PipelineStepResult {
        let r = self.function_result();
        PipelineStepResult {
            name: self.name.clone(),
            image: r.image,
            exec: r.exec,
            execution_error: self.execution_error.clone().unwrap_or_default(),
            stderr: r.stderr,
            exit_code: r.exit_code,
            error_results: self
                .results
                .iter()
                .filter(|x| x.severity == Some(Severity::Error))
                .cloned()
                .collect(),
            results: r.results,
        }
    }

    /// `<name|image|exec>`: how kpt names a step in the error summary.
    pub fn display_name(&self) -> &str {
        if self.name.is_empty() {
            self.target.name()
        } else {
            &self.name
        }
    }
}

/// Builds a FunctionResultList from step records: one item per step that
/// ran, `exitCode` 1 when any of them failed.
pub fn result_list(steps: &[StepRecord]) -> FunctionResultList {
    let items: Vec<FunctionResult> = steps
        .iter()
        .filter(|s| s.ran)
        .map(StepRecord::function_result)
        .collect();
    FunctionResultList {
        exit_code: i32::from(items.iter().any(|i| i.exit_code != 0)),
        items,
        ..Default::default()
    }
}

/// kpt's `PipelineStepResult` (Kptfile `status.renderStatus.*Steps[]`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PipelineStepResult {
    /// The function's `name`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
    /// The image as written in the Kptfile after resolution.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub image: String,
    /// The exec command line.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub exec: String,
    /// Failure other than a function exit.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub execution_error: String,
    /// The function's stderr.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub stderr: String,
    /// Exit code (always present).
    #[serde(default)]
    pub exit_code: i32,
    /// All results.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub results: Vec<StructuredResult>,
    /// The severity-`error` subset of `results`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub error_results: Vec<StructuredResult>,
}

/// kpt's Kptfile `status.renderStatus`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct KptRenderStatus {
    /// Mutator steps in execution order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mutation_steps: Vec<PipelineStepResult>,
    /// Validator steps in execution order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub validation_steps: Vec<PipelineStepResult>,
    /// On failure: one line per failed step, `<step>: <executionError>` or `<step>: exit code N`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub error_summary: String,
}

/// kpt's render status block, or `None` when no step was attempted.
pub fn kpt_render_status(steps: &[StepRecord], failed: bool) -> Option<KptRenderStatus> {
    if steps.is_empty() {
        return None;
    }
    let mut status = KptRenderStatus::default();
    for s in steps {
        match s.kind {
            StepKind::Mutator => status.mutation_steps.push(s.step_result()),
            StepKind::Validator => status.validation_steps.push(s.step_result()),
        }
    }
    if failed {
        let ordered = steps
            .iter()
            .filter(|s| s.kind == StepKind::Mutator)
            .chain(steps.iter().filter(|s| s.kind == StepKind::Validator));
        let lines: Vec<String> = ordered
            .filter_map(|s| match &s.execution_error {
                Some(e) => Some(format!("{}: {e}", s.display_name())),
                None if s.exit_code != 0 => {
                    Some(format!("{}: exit code {}", s.display_name(), s.exit_code))
                }
                None => None,
            })
            .collect();
        status.error_summary = lines.join("\n");
    }
    Some(status)
}

/// A Kptfile status condition.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Condition {
    /// `Rendered`.
    #[serde(rename = "type")]
    pub kind: String,
    /// `True` or `False`.
    pub status: String,
    /// `RenderSuccess` or `RenderFailed`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reason: String,
    /// The render error text (root path shown as `.`).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
}

/// kpt's `Rendered` condition for a render that ended with `error` (or succeeded).
pub fn rendered_condition(error: Option<&str>) -> Condition {
    match error {
        None => Condition {
            kind: "Rendered".into(),
            status: "True".into(),
            reason: "RenderSuccess".into(),
            message: String::new(),
        },
        Some(e) => Condition {
            kind: "Rendered".into(),
            status: "False".into(),
            reason: "RenderFailed".into(),
            message: e.to_string(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::resource_list::{FieldRef, FileRef};
    use serde_json::json;

    fn step(kind: StepKind, exit: i32, err: Option<&str>) -> StepRecord {
        StepRecord {
            package: String::new(),
            kind,
            index: 0,
            name: String::new(),
            target: FunctionTarget::Image("ghcr.io/x/fn:v1".into()),
            resource_count: None,
            ran: err.is_none(),
            exit_code: exit,
            stderr: if exit != 0 {
                "boom".into()
            } else {
                String::new()
            },
            results: vec![StructuredResult {
                message: "m".into(),
                severity: Some(if exit != 0 {
                    Severity::Error
                } else {
                    Severity::Info
                }),
                ..Default::default()
            }],
            execution_error: err.map(str::to_string),
            sandbox_hint: None,
        }
    }

    #[test]
    fn result_list_yaml_has_kpts_shape() {
        let steps = [
            step(StepKind::Mutator, 0, None),
            step(StepKind::Validator, 1, None),
        ];
        let list = result_list(&steps);
        let v: Value = codec::from_yaml_str(&list.to_yaml().unwrap()).unwrap();
        assert_eq!(
            v,
            json!({
                "apiVersion": "kpt.dev/v1",
                "kind": "FunctionResultList",
                "metadata": {"name": "fnresults"},
                "exitCode": 1,
                "items": [
                    {"image": "ghcr.io/x/fn:v1", "exitCode": 0, "results": [{"message": "m", "severity": "info"}]},
                    {"image": "ghcr.io/x/fn:v1", "stderr": "boom", "exitCode": 1, "results": [{"message": "m", "severity": "error"}]}
                ]
            })
        );
    }

    #[test]
    fn porch_render_status_json() {
        let status = RenderStatus {
            result: Some(result_list(&[step(StepKind::Mutator, 0, None)])),
            error: String::new(),
        };
        let v = serde_json::to_value(&status).unwrap();
        assert_eq!(v["error"], "");
        assert_eq!(v["result"]["items"][0]["exitCode"], 0);
        assert_eq!(v["result"]["metadata"]["name"], "fnresults");
        let empty = serde_json::to_value(RenderStatus::default()).unwrap();
        assert_eq!(empty, json!({"error": ""}));
    }

    #[test]
    fn kpt_status_summary_and_error_results() {
        let steps = [
            step(StepKind::Validator, 1, None),
            step(
                StepKind::Mutator,
                0,
                Some("resource at path \"a\" and index \"0\" already exists"),
            ),
        ];
        let s = kpt_render_status(&steps, true).unwrap();
        assert_eq!(s.mutation_steps.len(), 1);
        assert_eq!(s.validation_steps[0].error_results.len(), 1);
        assert_eq!(
            s.error_summary,
            "ghcr.io/x/fn:v1: resource at path \"a\" and index \"0\" already exists\nghcr.io/x/fn:v1: exit code 1"
        );
        assert!(kpt_render_status(&[], true).is_none());
        assert_eq!(rendered_condition(None).status, "True");
        assert_eq!(rendered_condition(Some("x")).reason, "RenderFailed");
    }

    #[test]
    fn stored_results_are_narrowed() {
        let item = ResultItem {
            message: "m".into(),
            severity: Some(Severity::Warning),
            resource_ref: Some(ResourceRef::default()),
            field: Some(FieldRef {
                path: "spec.replicas".into(),
                current_value: Some(json!(3)),
                proposed_value: Some(json!({"a": [1]})),
            }),
            file: Some(FileRef {
                path: String::new(),
                index: Some(-1),
            }),
            tags: BTreeMap::new(),
        };
        let stored = StructuredResult::from(&item);
        let v: Value = codec::from_yaml_str(&codec::to_yaml_string(&stored).unwrap()).unwrap();
        assert_eq!(
            v,
            json!({"message": "m", "severity": "warning", "resourceRef": {}, "field": {"path": "spec.replicas", "currentValue": "3", "proposedValue": "a:\n- 1"}, "file": {"index": -1}})
        );
        assert_eq!(stored.to_string(), "[warning] spec.replicas: m");
    }
}
