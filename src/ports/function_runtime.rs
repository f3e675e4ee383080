//! The `FunctionRuntime` port: how the render pipeline runs one function.
//!
//! kpt's renderer asks a *function runtime* for every pipeline step (kpt
//! `fn.FunctionRuntime`; Porch plugs in its builtin → gRPC chain there). This
//! port is the same seam for the Rust render pipeline
//! ([`crate::domain::render`]): a step names either an `image` or an `exec`
//! command line, and the runtime turns the input ResourceList into an output
//! ResourceList.
//!
//! Unlike [`crate::ports::FunctionEvaluator`] (opaque bytes, the gRPC wire
//! shape), calls here carry a parsed [`ResourceList`]: in-process runtimes
//! (the builtins) then cost no YAML round trip, and process/gRPC runtimes
//! serialise at their edge. Errors reuse [`EvalError`], so the meaning of
//! NotFound ("not mine, try the next runtime"), function failure (exit code,
//! stderr, structured results), timeout and cancellation is the same as in
//! the service.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use serde_json::Value;

use crate::domain::codec::CodecError;
use crate::domain::evaluation::EvalError;
use crate::domain::render::source::CallSources;
use crate::domain::resource_list::{OutputItem, ResourceList};

/// The function a pipeline step runs (kpt `Function.image` / `Function.exec`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum FunctionTarget {
    /// A container image, already resolved by kpt's short-name rule
    /// (`set-namespace:v0.4.5` →
    /// `ghcr.io/kptdev/krm-functions-catalog/set-namespace:v0.4.5`).
    Image(String),
    /// An `exec:` command line exactly as written in the Kptfile; the first
    /// shell word is the program, the rest are its arguments.
    Exec(String),
}

impl FunctionTarget {
    /// The image or the command line: what kpt prints and records in results.
    pub fn name(&self) -> &str {
        match self {
            FunctionTarget::Image(s) | FunctionTarget::Exec(s) => s,
        }
    }

    /// True for [`FunctionTarget::Exec`].
    pub fn is_exec(&self) -> bool {
        matches!(self, FunctionTarget::Exec(_))
    }
}

impl fmt::Display for FunctionTarget {
    /// The image or the command line, unquoted.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A call's input ResourceList as YAML, and the document text of each item
/// in it when the call carries the items' texts.
pub type InputTexts = (String, Option<Vec<Arc<str>>>);

/// One function invocation.
#[derive(Debug, Clone, PartialEq)]
pub struct FunctionCall {
    /// What to run.
    pub target: FunctionTarget,
    /// The input: `items` (with kpt's path/index/id annotations) and the
    /// `functionConfig`, if the step has one.
    pub resource_list: ResourceList,
    /// Wall-clock limit for this call (kpt: 5 minutes per function). The
    /// runtime stops the function when it runs out and answers
    /// [`EvalError::Timeout`]; `None` means no limit.
    pub timeout: Option<Duration>,
    /// The texts of the items, when the caller has them (a render of a
    /// package directory): runtimes that serialise use
    /// [`FunctionCall::input_texts`] so functions see the package's comments
    /// (`# kpt-set:` setters live there), as with kpt, and read the output
    /// with [`ResourceList::parse_output`] so the render learns what text
    /// the function wrote for each item.
    pub sources: Option<CallSources>,
}

impl FunctionCall {
    /// A call of `target` on `resource_list` with an optional time limit and
    /// no source texts.
    pub fn new(
        target: FunctionTarget,
        resource_list: ResourceList,
        timeout: Option<Duration>,
    ) -> Self {
        Self {
            target,
            resource_list,
            timeout,
            sources: None,
        }
    }

    /// The input ResourceList as YAML: items from their source texts when
    /// [`FunctionCall::sources`] is set (comments and layout kept), emitted
    /// otherwise.
    ///
    /// Errors: a value YAML cannot represent (not produced by any reader).
    pub fn input_yaml(&self) -> Result<String, CodecError> {
        self.input_texts().map(|(text, _)| text)
    }

    /// The input ResourceList as YAML and, when [`FunctionCall::sources`]
    /// is set, the document text of each item in it (what
    /// [`ResourceList::parse_output`] compares the output with).
    ///
    /// Errors: a value YAML cannot represent (not produced by any reader).
    pub fn input_texts(&self) -> Result<InputTexts, CodecError> {
        match &self.sources {
            None => Ok((self.resource_list.to_yaml()?, None)),
            Some(sources) => {
                let texts = sources.input_texts(&self.resource_list.items);
                let text = self.resource_list.to_yaml_with(|i, _| texts[i].clone())?;
                Ok((text, Some(texts)))
            }
        }
    }

    /// Reads a function's stdout as its output ResourceList; with item texts
    /// when the call was serialised with them (`sent`, from
    /// [`FunctionCall::input_texts`]). Consumes the call: the values of
    /// items the function wrote back unchanged move from its input into
    /// the output instead of being copied, and the input items left over
    /// come back in [`FunctionOutput::input_items`]. When the call's
    /// sources say its output is only checked
    /// ([`CallSources::checked_only_output`]), each changed item's value
    /// keeps only `apiVersion`, `kind` and `metadata` (the rest is read for
    /// its syntax and left null). The output's `stderr` is empty (the
    /// runtime sets it).
    ///
    /// Errors: the output is not a ResourceList, or has no `items` list
    /// ([`ResourceList::check_output_items`]: `items` missing or null).
    pub fn read_output(
        self,
        stdout: &[u8],
        sent: Option<&[Arc<str>]>,
    ) -> Result<FunctionOutput, crate::domain::resource_list::ResourceListError> {
        let checked_only = self.sources.as_ref().is_some_and(|s| s.checked_only_output);
        let mut items = self.resource_list.items;
        // An item sent back twice moves once; the second is read from its text.
        let mut moved = vec![false; items.len()];
        let mut take = |j: usize| {
            let first = !std::mem::replace(moved.get_mut(j)?, true);
            first.then(|| std::mem::take(&mut items[j]))
        };
        let (resource_list, item_texts) = match sent {
            Some(sent) if checked_only => (
                ResourceList::parse_output_checked_taking(stdout, sent, &mut take)?,
                None,
            ),
            Some(sent) => ResourceList::parse_output_taking(stdout, sent, &mut take)?,
            None => (ResourceList::parse(stdout)?, None),
        };
        // An output that names no objects keeps none only when it says so.
        if resource_list.items.is_empty() {
            ResourceList::check_output_items(stdout)?;
        }
        Ok(FunctionOutput {
            resource_list,
            stderr: String::new(),
            item_texts,
            input_items: items,
        })
    }
}

/// What a function returned when it succeeded (exit code 0).
#[derive(Debug, Clone, PartialEq)]
pub struct FunctionOutput {
    /// The output ResourceList: items, and the function's structured results.
    pub resource_list: ResourceList,
    /// What the function wrote to stderr (UTF-8, lossily decoded); empty if nothing.
    pub stderr: String,
    /// The text of each output item (same order as `resource_list.items`),
    /// when the runtime read the output as text item by item (see
    /// [`FunctionCall::read_output`]); `None` from in-process runtimes.
    pub item_texts: Option<Vec<OutputItem>>,
    /// The call's input items, by position, that were not moved into the
    /// output (a moved item is left null in its place), when the runtime
    /// hands them back ([`FunctionRuntime::returns_input`]); empty from
    /// runtimes that change the items in place.
    pub input_items: Vec<Value>,
}

impl FunctionOutput {
    /// An output without item texts (in-process runtimes).
    pub fn new(resource_list: ResourceList, stderr: impl Into<String>) -> Self {
        Self {
            resource_list,
            stderr: stderr.into(),
            item_texts: None,
            input_items: Vec::new(),
        }
    }
}

/// Runs KRM functions for the render pipeline.
///
/// Contract (mirrors kpt's `FunctionRuntime` as Porch uses it):
/// - `Ok` = the function exited 0; its output replaces (mutator) or is
///   checked and discarded (validator) by the pipeline;
/// - [`EvalError::NotFound`] = this runtime does not serve the target; a
///   chain tries the next runtime, the pipeline fails the step;
/// - [`EvalError::FunctionFailed`] = the function ran and failed, with its
///   exit code, stderr and structured results (read from its output);
/// - any other error fails the step with its message (exit code 1 in results);
/// - `call.timeout` is enforced by the runtime; dropping the future cancels
///   the call.
#[cfg_attr(test, mockall::automock)]
#[async_trait]
pub trait FunctionRuntime: Send + Sync {
    /// Runs `call.target` on `call.resource_list`.
    async fn run(&self, call: FunctionCall) -> Result<FunctionOutput, EvalError>;

    /// False when [`run`](Self::run) would answer [`EvalError::NotFound`]
    /// for `target` whatever the call holds (an image runtime given an
    /// `exec:` target, a builtin runtime given an image it does not serve),
    /// so a chain skips this runtime without copying the call for it. True
    /// by default (the runtime is asked).
    fn may_serve(&self, target: &FunctionTarget) -> bool {
        let _ = target;
        true
    }

    /// True when every successful [`run`](Self::run) of `target` hands back
    /// the input items it did not move into the output in
    /// [`FunctionOutput::input_items`] (runtimes that serialise the call and
    /// read the output with [`FunctionCall::read_output`]). A caller that
    /// needs the input items after the call — a render restores kyaml's key
    /// order from them — may then give the call its items instead of a
    /// copy. False by default (the runtime may change the items in place).
    fn returns_input(&self, target: &FunctionTarget) -> bool {
        let _ = target;
        false
    }
}

/// The two capability answers of a [`FunctionRuntime`] that decorates
/// another — [`may_serve`](FunctionRuntime::may_serve) and
/// [`returns_input`](FunctionRuntime::returns_input) — forwarded to the
/// runtime in field `$inner`, inside the decorator's `impl FunctionRuntime`
/// block: a decorator that checks, times or rewords a call serves what its
/// runtime serves and hands back what it hands back, and forgetting to
/// forward them would silently turn the defaults on (a chain would copy
/// calls it need not copy, a render would copy items it could lend).
macro_rules! forward_capabilities {
    ($inner:ident) => {
        /// As the runtime it wraps.
        fn may_serve(&self, target: &$crate::ports::FunctionTarget) -> bool {
            self.$inner.may_serve(target)
        }

        /// As the runtime it wraps.
        fn returns_input(&self, target: &$crate::ports::FunctionTarget) -> bool {
            self.$inner.returns_input(target)
        }
    };
}
pub(crate) use forward_capabilities;

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Items a function writes back unchanged keep their values when they
    /// move out of the consumed call; one written back twice is read the
    /// second time from its text, to the same value.
    #[test]
    fn read_output_moves_unchanged_items_once() {
        let items = vec![
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}}),
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "b"}}),
        ];
        let mut call = FunctionCall::new(
            FunctionTarget::Exec("fn".into()),
            ResourceList::new(items.clone()),
            None,
        );
        call.sources = Some(CallSources {
            texts: vec![None, None],
            checked_only_output: false,
        });
        let (_, sent) = call.input_texts().unwrap();
        let sent = sent.unwrap();
        // Item `a` twice, item `b` changed.
        let a = crate::domain::codec::preserve::nest(&sent[0], "- ", "  ");
        let out = format!(
            "apiVersion: config.kubernetes.io/v1\nkind: ResourceList\nitems:\n{a}{a}\
             - apiVersion: v1\n  kind: ConfigMap\n  metadata:\n    name: b\n  data: {{x: y}}\n"
        );
        let output = call.read_output(out.as_bytes(), Some(&sent)).unwrap();
        let (list, texts) = (output.resource_list, output.item_texts);
        // Item `b` was not moved: it comes back; `a` did.
        assert_eq!(output.input_items, vec![json!(null), items[1].clone()]);
        let texts = texts.unwrap();
        assert_eq!(list.items[0], items[0]);
        assert_eq!(list.items[1], items[0]);
        assert_eq!(list.items[2]["data"], json!({"x": "y"}));
        assert_eq!(texts[0], OutputItem::Same(0));
        assert!(matches!(texts[1], OutputItem::Text(_)));
    }
}
