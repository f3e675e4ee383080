//! One package's pipeline: mutators in order, then validators, each step's
//! target and functionConfig, and the records of steps that never ran.

use serde_json::{Map, Value, json};

use super::reconcile::strip_transient;
use super::step::Step;
use super::{
    Ctx, Failure, Node, Renderer, image_repository, is_tag_constraint, pick_tag,
    resolve_function_image,
};
use crate::domain::render::annotations::{self as ann, clean_path};
use crate::domain::render::error::{EXEC_NOT_ALLOWED, RenderErrorKind, StepError};
use crate::domain::render::kptfile::{Function, ValidateError, check_all_krm};
use crate::domain::render::results::{StepKind, StepRecord};
use crate::domain::render::selector;
use crate::ports::FunctionTarget;

impl Renderer<'_> {
    pub(super) async fn run_pipeline(
        &self,
        ctx: &mut Ctx,
        node: &Node,
        input: Vec<Value>,
    ) -> Result<Vec<Value>, Failure> {
        let pipeline = &node.pipeline;
        // kpt names every package it reaches, pipeline or not.
        self.events.package_started(&node.path, &node.name);
        if pipeline.is_empty() {
            if let Err(e) = check_all_krm(&input) {
                return Err(Failure {
                    kind: RenderErrorKind::NonKrm(e),
                    partial: input,
                });
            }
            return Ok(input);
        }
        for (kind, fns) in [
            (StepKind::Mutator, &pipeline.mutators),
            (StepKind::Validator, &pipeline.validators),
        ] {
            for (i, f) in fns.iter().enumerate() {
                if !f.config_path.is_empty()
                    && !node.own_files.contains(&clean_path(&f.config_path))
                {
                    let word = kind.word();
                    return Err(Failure {
                        kind: RenderErrorKind::MissingConfig(ValidateError {
                            field: format!("pipeline.{word}s[{i}].configPath"),
                            value: f.config_path.clone(),
                            reason: format!(
                                "functionConfig resource for {word} {:?} is missing from path {:?}, this also occurs if {:?} is part of a subpackage",
                                f.name_or_image(),
                                f.config_path,
                                f.config_path
                            ),
                        }),
                        partial: input,
                    });
                }
            }
        }
        // kpt builds every mutator's runner before running any of them.
        let mut targets = Vec::with_capacity(pipeline.mutators.len());
        for (i, f) in pipeline.mutators.iter().enumerate() {
            match self.target_of(f).await {
                Ok(t) => targets.push(t),
                Err(e) => {
                    self.pre_exec_failure(ctx, node, StepKind::Mutator, i, f, &e);
                    return Err(Failure {
                        kind: RenderErrorKind::Step(e),
                        partial: input,
                    });
                }
            }
        }
        let mut items = input;
        // All items passed the KRM check: an unfiltered step that succeeded
        // checked its input (and a mutator its output), so the items are
        // checked until they change.
        let mut checked = false;
        for (i, (f, target)) in pipeline.mutators.iter().zip(&targets).enumerate() {
            let config = self.function_config(node, f, &items);
            let filtered = f.is_filtered();
            let step = Step {
                node,
                kind: StepKind::Mutator,
                index: i,
                function: f,
                target,
                config,
                checked,
            };
            let result = if filtered {
                selector::stamp_resource_ids(&mut items);
                let selected = selector::select(&items, &f.selectors, &f.exclude);
                let mut input: Vec<Value> = selected.iter().map(|&j| items[j].clone()).collect();
                let res = self.run_step(ctx, step, &mut input).await;
                res.map(|out| selector::merge(std::mem::take(&mut items), &selected, out))
            } else {
                self.run_step(ctx, step, &mut items).await
            };
            match result {
                Ok(out) => {
                    items = out;
                    checked |= !filtered;
                }
                Err(e) => {
                    return Err(Failure {
                        kind: RenderErrorKind::Step(e),
                        partial: items.into_iter().map(strip_transient).collect(),
                    });
                }
            }
        }
        for (i, f) in pipeline.validators.iter().enumerate() {
            let target = match self.target_of(f).await {
                Ok(t) => t,
                Err(e) => {
                    self.pre_exec_failure(ctx, node, StepKind::Validator, i, f, &e);
                    return Err(Failure {
                        kind: RenderErrorKind::Step(e),
                        partial: items,
                    });
                }
            };
            let config = self.function_config(node, f, &items);
            let selected = selector::select(&items, &f.selectors, &f.exclude);
            let mut input: Vec<Value> = selected.iter().map(|&j| items[j].clone()).collect();
            if let Err(e) = self
                .run_step(
                    ctx,
                    Step {
                        node,
                        kind: StepKind::Validator,
                        index: i,
                        function: f,
                        target: &target,
                        config,
                        checked,
                    },
                    &mut input,
                )
                .await
            {
                return Err(Failure {
                    kind: RenderErrorKind::Step(e),
                    partial: items,
                });
            }
            checked |= !f.is_filtered();
        }
        self.events.package_finished(&node.path);
        Ok(items)
    }

    async fn target_of(&self, f: &Function) -> Result<FunctionTarget, StepError> {
        if !f.exec.is_empty() {
            if !self.options.allow_exec {
                return Err(StepError::ExecNotAllowed);
            }
            return Ok(FunctionTarget::Exec(f.exec.clone()));
        }
        let prefix = &self.options.image_prefix;
        let tag = match &self.tag_lister {
            Some(lister) if is_tag_constraint(&f.tag) => {
                let repository = image_repository(&f.image, prefix);
                let tags = lister.list_tags(&repository).await.map_err(|e| {
                    StepError::Image(format!(
                        "cannot list the tags of {repository} to resolve tag {:?}: {e}",
                        f.tag
                    ))
                })?;
                pick_tag(&f.tag, &tags)
                    .map_err(|e| StepError::Image(format!("image {repository}: {e}")))?
            }
            _ => f.tag.clone(),
        };
        resolve_function_image(&f.image, &tag, prefix)
            .map(FunctionTarget::Image)
            .map_err(StepError::Image)
    }

    /// The step's functionConfig: the ConfigMap for `configMap`, the current
    /// object of the `configPath` file (else the file as read), or none.
    fn function_config(&self, node: &Node, f: &Function, items: &[Value]) -> Option<Value> {
        if !f.config_map.is_empty() {
            let data: Map<String, Value> = f
                .config_map
                .iter()
                .map(|(k, v)| (k.clone(), Value::String(v.clone())))
                .collect();
            return Some(json!({
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": "function-input"},
                "data": data,
            }));
        }
        if f.config_path.is_empty() {
            return None;
        }
        let want = clean_path(&f.config_path);
        items
            .iter()
            .find(|r| {
                ann::get(r, ann::PACKAGE_PATH).as_deref() == Some(node.package_path.as_str())
                    && ann::path(r).is_some_and(|p| clean_path(&p) == want)
            })
            .cloned()
            .or_else(|| node.config_files.get(&want).cloned())
    }

    pub(super) fn base_record(
        &self,
        node: &Node,
        kind: StepKind,
        index: usize,
        f: &Function,
        target: FunctionTarget,
        resource_count: Option<usize>,
    ) -> StepRecord {
        StepRecord {
            package: node.path.clone(),
            kind,
            index,
            name: f.name.clone(),
            target,
            resource_count,
            ran: false,
            exit_code: 0,
            stderr: String::new(),
            results: Vec::new(),
            execution_error: None,
            sandbox_hint: None,
        }
    }

    pub(super) fn push(&self, ctx: &mut Ctx, record: StepRecord) {
        self.events.step_finished(&record);
        ctx.steps.push(record);
    }

    fn pre_exec_failure(
        &self,
        ctx: &mut Ctx,
        node: &Node,
        kind: StepKind,
        index: usize,
        f: &Function,
        error: &StepError,
    ) {
        let target = if f.exec.is_empty() {
            FunctionTarget::Image(f.image.clone())
        } else {
            FunctionTarget::Exec(f.exec.clone())
        };
        let mut record = self.base_record(node, kind, index, f, target, None);
        record.exit_code = 1;
        record.execution_error = Some(match error {
            StepError::ExecNotAllowed => EXEC_NOT_ALLOWED.to_string(),
            other => other.to_string(),
        });
        self.push(ctx, record);
    }
}
