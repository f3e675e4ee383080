//! One function call with kyaml's and kpt's bookkeeping around it: input
//! checks, ids and annotations before the call; field order, default paths,
//! annotation reconciliation, path checks and document texts after it.

use foldhash::{HashMap, HashMapExt};
use std::sync::Arc;

use serde_json::Value;

use super::reconcile::{check_paths, fill_twins, prepare_annotations, reconcile_item, sync_order};
use super::{Ctx, Node, Renderer, StepStart};
use crate::domain::codec::preserve;
use crate::domain::codec::tree::YamlDoc;
use crate::domain::evaluation::EvalError;
use crate::domain::render::annotations::{self as ann, clean_path, join_path};
use crate::domain::render::error::StepError;
use crate::domain::render::kptfile::{Function, check_all_krm};
use crate::domain::render::results::{StepKind, StepRecord, StructuredResult};
use crate::domain::render::source::{CallSources, DocKey, ObjectText, root_keys};
use crate::domain::resource_list::{OutputItem, ResourceList, ResourceListError};
use crate::ports::{FunctionCall, FunctionTarget};

/// One step of a package's pipeline, ready to call: where it sits and what
/// it runs.
pub(super) struct Step<'s> {
    /// The package whose pipeline the step belongs to.
    pub node: &'s Node,
    /// Mutator or validator.
    pub kind: StepKind,
    /// Position in its list (`pipeline.mutators[index]`).
    pub index: usize,
    /// The step as the Kptfile declares it.
    pub function: &'s Function,
    /// The resolved image or exec command.
    pub target: &'s FunctionTarget,
    /// The functionConfig to hand the function, if any.
    pub config: Option<Value>,
    /// Every object of the package's items passed kpt's KRM check since
    /// they last changed (the check of an earlier step's input or output),
    /// so this step's input, some or all of them, passes it too and is not
    /// checked again.
    pub checked: bool,
}

impl Renderer<'_> {
    /// One function call with kyaml's and kpt's bookkeeping around it:
    /// runs `step` on `input` (ids and annotations are added to `input` in
    /// place) and returns the function's output objects. A validator's
    /// `input` is its own copy of the objects, handed to the call (left
    /// empty): its output is checked and discarded, so nothing compares it
    /// with the input afterwards. A mutator's `input` is handed to the call
    /// too (left empty) when the runtime returns the items it did not move
    /// ([`crate::ports::FunctionRuntime::returns_input`]) and the render
    /// keeps no partial result; otherwise the call gets a copy.
    pub(super) async fn run_step(
        &self,
        ctx: &mut Ctx,
        step: Step<'_>,
        input: &mut Vec<Value>,
    ) -> Result<Vec<Value>, StepError> {
        let Step {
            node,
            kind,
            index,
            function: f,
            target,
            config,
            checked,
        } = step;
        let count = f.is_filtered().then_some(input.len());
        let mut record = self.base_record(node, kind, index, f, target.clone(), count);
        self.events.step_started(&StepStart {
            package: &node.path,
            kind,
            target,
            resource_count: count,
        });
        let fail = |this: &Self, ctx: &mut Ctx, mut record: StepRecord, e: StepError| {
            record.exit_code = record.exit_code.max(1);
            record.execution_error = Some(e.to_string());
            this.push(ctx, record);
            Err(e)
        };
        if !checked && let Err(e) = check_all_krm(input) {
            return fail(self, ctx, record, StepError::InvalidInput(e));
        }
        let (snapshots, use_internal, use_legacy) = match prepare_annotations(input) {
            Ok(x) => x,
            Err(e) => return fail(self, ctx, record, StepError::Annotations(e)),
        };
        let mut ids = HashMap::with_capacity(input.len());
        for (i, item) in input.iter_mut().enumerate() {
            let id = (i + 1).to_string();
            ann::set(item, ann::ID, id.clone());
            ann::set(item, ann::LEGACY_ID, id.clone());
            ids.insert(id, i);
        }
        // kpt hands the config object itself to the function, so it carries
        // the same annotations as its twin among the items.
        let config = config.map(|c| {
            let key = (ann::get(&c, ann::PACKAGE_PATH), ann::path(&c));
            if key.0.is_none() {
                return c;
            }
            input
                .iter()
                .find(|r| (ann::get(r, ann::PACKAGE_PATH), ann::path(r)) == key)
                .cloned()
                .unwrap_or(c)
        });
        let function_dir = config
            .as_ref()
            .and_then(ann::path)
            .map(|p| function_dir(&p));
        let input_keys: Vec<Option<DocKey>> = root_keys(input.iter(), package_dir(&ctx.dirs));
        let sources = ctx.texts.as_ref().map(|texts| CallSources {
            texts: input_keys
                .iter()
                .map(|k| k.as_ref().and_then(|k| texts.get(k)).cloned())
                .collect(),
            checked_only_output: kind != StepKind::Mutator,
        });
        // A mutator's output texts are kept; a validator's are not.
        let input_texts = sources
            .as_ref()
            .filter(|_| kind == StepKind::Mutator)
            .map(|s| s.texts.clone());
        // The call gets the items themselves (not a copy) when nothing needs
        // them afterwards: a validator's own copy, and a mutator's when the
        // runtime hands back those it did not move into the output (key
        // order is restored from them) and a failure keeps no partial result.
        let give = kind == StepKind::Validator
            || (!ctx.keep_partial && self.runtime.returns_input(target));
        let items = if give {
            std::mem::take(input)
        } else {
            input.to_vec()
        };
        let mut rl = ResourceList::new(items);
        rl.function_config = config;
        let call = FunctionCall {
            target: target.clone(),
            resource_list: rl,
            timeout: Some(
                f.timeout()
                    .ok()
                    .flatten()
                    .unwrap_or(self.options.step_timeout),
            ),
            sources,
        };
        let output = match self.runtime.run(call).await {
            Ok(o) => o,
            Err(EvalError::FunctionFailed(failure)) => {
                let exit_code = failure.exit.exit_code();
                record.ran = true;
                record.exit_code = if exit_code == 0 { 1 } else { exit_code };
                record.stderr = recorded_stderr(target, &String::from_utf8_lossy(&failure.stderr));
                record.results = failure.results.iter().map(StructuredResult::from).collect();
                record.sandbox_hint = failure.sandbox_hint.clone();
                self.push(ctx, record);
                return Err(StepError::FunctionFailed { exit_code });
            }
            Err(e @ (EvalError::Denied { .. } | EvalError::Timeout { .. })) => {
                // A denial (nothing ran) or a step stopped at its time
                // limit: recorded in the results with an error result that
                // says which, so results.yaml and the Kptfile status tell.
                record.ran = true;
                record.results = vec![refusal_result(&e)];
                return fail(self, ctx, record, StepError::Runtime(e));
            }
            Err(
                e @ EvalError::BadOutput {
                    source: ResourceListError::NoItems | ResourceListError::NullItems,
                    ..
                },
            ) => {
                // An output that does not list the objects it keeps fails
                // kpt's output check, like output that is not KRM: the step
                // is not recorded as run (kpt lists no result for it).
                return fail(self, ctx, record, StepError::Runtime(e));
            }
            Err(e) if e.is_not_found() => {
                let error = StepError::NotFound {
                    function: target.name().to_string(),
                    source: e,
                };
                return fail(self, ctx, record, error);
            }
            Err(e) => {
                record.ran = true;
                return fail(self, ctx, record, StepError::Runtime(e));
            }
        };
        record.stderr = recorded_stderr(target, &output.stderr);
        record.results = output
            .resource_list
            .results
            .iter()
            .map(StructuredResult::from)
            .collect();
        let item_texts = output.item_texts;
        let returned = output.input_items;
        let mut out = output.resource_list.items;
        let mut matched: Vec<Option<usize>> = vec![None; out.len()];
        let dir = function_dir.unwrap_or_default();
        // Each object is taken through every stage before the next one
        // (its maps stay in the cache); the stages are kyaml's, in order,
        // and depend on no other object, so the first error is the one a
        // stage-by-stage pass over all objects finds first.
        for (k, item) in out.iter_mut().enumerate() {
            // Matched to its input by id; the id annotations removed.
            let id = ann::get_text(item, ann::ID).or_else(|| ann::get_text(item, ann::LEGACY_ID));
            let j = id.and_then(|id| ids.get(id.as_ref()).copied());
            if let Some(j) = j {
                // An item returned byte for byte is the input's value, in its order.
                let same = matches!(
                    item_texts.as_ref().and_then(|t| t.get(k)),
                    Some(OutputItem::Same(s)) if *s == j
                );
                if !same
                    && kind == StepKind::Mutator
                    && let Some(sent) = input.get(j).or_else(|| returned.get(j))
                {
                    sync_order(sent, item);
                }
                ann::remove_all(item, &[ann::ID, ann::LEGACY_ID]);
                matched[k] = Some(j);
            }
            // Twins filled; a new object without a path gets kyaml's.
            fill_twins(item);
            if ann::get_text(item, ann::PATH).is_none() && item.is_object() {
                let file = format!(
                    "{}_{}.yaml",
                    ann::kind(item).to_lowercase(),
                    ann::name(item)
                );
                let p = join_path(&[&dir, ann::namespace(item), &file]);
                ann::set_path(item, &p);
            }
            if let Err(e) = reconcile_item(item, &snapshots, use_internal, use_legacy) {
                return fail(self, ctx, record, StepError::Annotations(e));
            }
            if ann::get_text(item, ann::PACKAGE_PATH).is_none_or(|p| p.is_empty()) {
                ann::set(item, ann::PACKAGE_PATH, node.package_path.clone());
            }
        }
        if let Err(e) = check_paths(&out) {
            return fail(self, ctx, record, e);
        }
        if let Err(e) = check_all_krm(&out) {
            return fail(self, ctx, record, StepError::InvalidOutput(e));
        }
        record.ran = true;
        ctx.executed += 1;
        self.push(ctx, record);
        if kind == StepKind::Mutator
            && let (Some(texts), Some(sent)) = (ctx.texts.as_mut(), input_texts)
        {
            let out_keys = root_keys(&out, package_dir(&ctx.dirs));
            let added = out_keys
                .into_iter()
                .enumerate()
                .filter_map(|(k, key)| {
                    let key = key?;
                    let text = item_text(
                        &sent,
                        matched[k],
                        item_texts.as_ref().and_then(|t| t.get(k)),
                    );
                    Some((key, text))
                })
                .collect();
            let removed: Vec<DocKey> = input_keys.into_iter().flatten().collect();
            texts.update(&removed, added);
        }
        Ok(out)
    }
}

/// The error result recorded for a step the admission policy denied (tag
/// `admission-rule: <rule>`) or that ran out of time (tag `timeout: <s>`).
fn refusal_result(e: &EvalError) -> StructuredResult {
    let tag = match e {
        EvalError::Denied { rule, .. } => Some(("admission-rule", rule.clone())),
        EvalError::Timeout { after, .. } => {
            Some(("timeout", format!("{:.3}s", after.as_secs_f64())))
        }
        _ => None,
    };
    StructuredResult {
        message: e.to_string(),
        severity: Some(crate::domain::resource_list::Severity::Error),
        tags: tag.into_iter().map(|(k, v)| (k.to_string(), v)).collect(),
        ..Default::default()
    }
}

/// The root-relative directory of the package an object belongs to (its
/// package-path annotation looked up in `dirs`; "" when unknown), as a
/// function of the object. When every package of the render is at the
/// root ("", a package without subpackages) the answer is "" whatever the
/// annotation says, so it is not read (decided once, not per object).
fn package_dir(dirs: &HashMap<String, String>) -> impl Fn(&Value) -> String + '_ {
    let all_at_root = dirs.values().all(String::is_empty);
    move |item| {
        if all_at_root {
            return String::new();
        }
        ann::get_text(item, ann::PACKAGE_PATH)
            .and_then(|pp| dirs.get(pp.as_ref()).cloned())
            .unwrap_or_default()
    }
}

/// The texts of output item `k` of a call: its origin is that of the input
/// item it came from (`matched`, by id); its wire text is what the function
/// wrote (`written`) — with the comments it dropped put back, as kyaml
/// copies an input's comments onto the output (`krm-functions.md` §1.7) —
/// or, for in-process runtimes, the input's.
fn item_text(
    sent: &[Option<ObjectText>],
    matched: Option<usize>,
    written: Option<&OutputItem>,
) -> ObjectText {
    let from = |j: usize| sent.get(j).and_then(Option::as_ref);
    let matched = matched.or(match written {
        Some(OutputItem::Same(j)) => Some(*j),
        _ => None,
    });
    let input = matched.and_then(from);
    let origin = input.and_then(|t| t.origin.clone());
    let wire = match written {
        Some(OutputItem::Same(j)) => from(*j).and_then(|t| t.wire.clone()),
        Some(OutputItem::Text(doc)) => Some(match input.and_then(ObjectText::base) {
            Some(base) if dropped_comments(base, doc) => {
                preserve::merge(base, Some(doc), doc.value())
                    .ok()
                    .and_then(|t| YamlDoc::parse(t).ok())
                    .map(Arc::new)
                    .unwrap_or_else(|| doc.clone())
            }
            _ => doc.clone(),
        }),
        None => input.and_then(|t| t.wire.clone()),
    };
    ObjectText { origin, wire }
}

/// True when `base` has a comment `written` does not.
fn dropped_comments(base: &YamlDoc, written: &YamlDoc) -> bool {
    let mut have: HashMap<&str, usize> = HashMap::new();
    for c in written.comment_texts() {
        *have.entry(c).or_default() += 1;
    }
    base.comment_texts().any(|c| match have.get_mut(c) {
        Some(n) if *n > 0 => {
            *n -= 1;
            false
        }
        _ => true,
    })
}

/// The stderr kpt records: verbatim for `exec` functions; for `image`
/// functions line by line, joined with `\n` (kpt's container runtime reads
/// stderr by lines, so a final newline is not kept).
fn recorded_stderr(target: &FunctionTarget, stderr: &str) -> String {
    match target {
        FunctionTarget::Exec(_) => stderr.to_string(),
        FunctionTarget::Image(_) => stderr.lines().collect::<Vec<_>>().join("\n"),
    }
}

/// Directory generated objects default into: the functionConfig file's
/// directory, one level up when that directory is named `functions` (kyaml).
fn function_dir(config_path: &str) -> String {
    let p = clean_path(config_path);
    let dir = match p.rsplit_once('/') {
        Some((d, _)) => d.to_string(),
        None => String::new(),
    };
    let dir = if dir.rsplit('/').next() == Some("functions") {
        dir.rsplit_once('/')
            .map(|(d, _)| d.to_string())
            .unwrap_or_default()
    } else {
        dir
    };
    if dir == "." { String::new() } else { dir }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn function_dir_rule() {
        assert_eq!(function_dir("fn.yaml"), "");
        assert_eq!(function_dir("./configs/fn.yaml"), "configs");
        assert_eq!(function_dir("a/functions/fn.yaml"), "a");
        assert_eq!(function_dir("functions/fn.yaml"), "");
    }
}
