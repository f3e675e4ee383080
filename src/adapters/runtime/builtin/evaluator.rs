//! `serve`'s builtin tier (`--builtin-functions`, off by default): the
//! builtins that keep their input's text — `apply-setters` and
//! `apply-replacements` — run in process before the exec runtime. Porch's
//! v1.5.3 runner has no such tier (porch-server runs its own builtins before
//! calling the runner), so it is only on when asked for.
//!
//! The request's ResourceList is read item by item with each item's text
//! (comments, quoting, layout); the response is the ResourceList with the
//! items the function changed in their new text and the others as they
//! came. The builtins that work on values only (`set-namespace`,
//! `set-labels`, the package-context generator) are not served here: their
//! output would lose the items' comments, which the Go functions keep.

use async_trait::async_trait;
use bytes::Bytes;
use std::sync::Arc;

use super::{Builtin, BuiltinRuntime};
use crate::domain::codec::tree::YamlDoc;
use crate::domain::evaluation::{EvalError, EvaluationRequest, EvaluationResponse};
use crate::domain::image::split_reference;
use crate::domain::resource_list::{OutputItem, ResourceList};
use crate::domain::tag_selection::select_tag;
use crate::ports::FunctionEvaluator;

/// The builtin tier of `serve`: a [`FunctionEvaluator`] over a
/// [`BuiltinRuntime`], serving the builtins that keep their input's text.
#[derive(Debug, Clone, Default)]
pub struct BuiltinEvaluator {
    runtime: Arc<BuiltinRuntime>,
}

impl BuiltinEvaluator {
    /// The tier over `runtime` (its image table: the catalog names under
    /// the default image prefix and the catalog's prefixes).
    pub fn new(runtime: BuiltinRuntime) -> Self {
        Self {
            runtime: Arc::new(runtime),
        }
    }

    /// The image this tier runs for `image` and the step's `tag` (Porch's
    /// rule, [`select_tag`], over the tags the builtin serves), if any.
    fn image_for(&self, image: &str, tag: Option<&str>) -> Option<String> {
        let Some(tag) = tag else {
            return Some(image.to_string());
        };
        let (name, _, _) = split_reference(image);
        let served = self.runtime.served_tags(name);
        let chosen = select_tag(tag, &served).ok()?;
        Some(format!("{name}:{chosen}"))
    }
}

#[async_trait]
impl FunctionEvaluator for BuiltinEvaluator {
    /// Runs `apply-setters` and `apply-replacements` for their served
    /// images (at the version the step's `tag` picks); anything else is
    /// [`EvalError::NotFound`], and so is a request whose items cannot be
    /// read one by one with their texts (flow style, documents markers
    /// inside `items`) when it has comments the function would keep (setter
    /// comments; for apply-replacements any comment), so the exec runtime
    /// serves it. A failing function is
    /// [`EvalError::FunctionFailed`], as from the exec runtime.
    async fn evaluate(&self, request: EvaluationRequest) -> Result<EvaluationResponse, EvalError> {
        // CPU work: off the server's reactor threads.
        let this = self.clone();
        tokio::task::spawn_blocking(move || this.evaluate_now(request))
            .await
            .map_err(|e| EvalError::Internal(format!("the builtin tier's task failed: {e}")))?
    }
}

impl BuiltinEvaluator {
    /// [`FunctionEvaluator::evaluate`], on the calling thread.
    fn evaluate_now(&self, request: EvaluationRequest) -> Result<EvaluationResponse, EvalError> {
        let not_found = || EvalError::not_found(&request.image);
        let image = self
            .image_for(&request.image, request.tag.as_deref())
            .ok_or_else(not_found)?;
        let builtin = match self.runtime.lookup(&image) {
            Some(b) if b.keeps_texts() => b,
            _ => return Err(not_found()),
        };
        let (rl, texts) = ResourceList::parse_output(&request.resource_list, &[], &[])
            .map_err(|e| EvalError::InvalidInput(format!("the ResourceList is not valid: {e}")))?;
        // Setter comments are all apply-setters looks at; apply-replacements
        // keeps every comment.
        let kept_comments = match builtin {
            Builtin::ApplySetters => b"kpt-set".as_slice(),
            _ => b"#".as_slice(),
        };
        let texts: Vec<Arc<YamlDoc>> = match texts {
            Some(t) => t
                .into_iter()
                .zip(&rl.items)
                .map(|(t, item)| match t {
                    OutputItem::Text(doc) => Ok(doc),
                    OutputItem::Same(_) => super::emitted_doc(item),
                })
                .collect::<Result<_, _>>()?,
            None if memchr::memmem::find(&request.resource_list, kept_comments).is_some() => {
                return Err(EvalError::NotFound {
                    image: request.image.clone(),
                    detail: Some(format!(
                        "the builtin {} reads items one by one with their comments, \
                         and this ResourceList's items are not laid out so (flow style or \
                         document markers)",
                        builtin.name()
                    )),
                });
            }
            None => super::emitted_docs(&rl.items)?,
        };
        // The texts of the items as they came (the builtin owns the parsed
        // items, so it can change them in place).
        let sent: Vec<Arc<str>> = texts.iter().map(|d| d.shared_text()).collect();
        let (rl, item_texts) = self
            .runtime
            .run_with_texts(builtin, &image, rl, Some(texts))?;
        let text = rl
            .to_yaml_with(|i, _| match &item_texts[i] {
                OutputItem::Same(j) => sent[*j].clone(),
                OutputItem::Text(doc) => doc.shared_text(),
            })
            .map_err(|e| EvalError::Internal(format!("writing the output ResourceList: {e}")))?;
        Ok(EvaluationResponse {
            resource_list: Bytes::from(text),
            log: Bytes::new(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(image: &str, tag: Option<&str>) -> EvaluationRequest {
        let mut r = EvaluationRequest::new(
            image,
            "apiVersion: config.kubernetes.io/v1\nkind: ResourceList\nitems:\n- apiVersion: v1\n  kind: ConfigMap\n  metadata:\n    name: old # kpt-set: ${name}\n    annotations:\n      note: kept # a comment\nfunctionConfig:\n  apiVersion: v1\n  kind: ConfigMap\n  metadata:\n    name: setters\n  data:\n    name: new\n",
        );
        r.tag = tag.map(str::to_string);
        r
    }

    #[tokio::test]
    async fn applies_setters_keeping_the_items_text() {
        let e = BuiltinEvaluator::default();
        let out = e
            .evaluate(request(
                "ghcr.io/kptdev/krm-functions-catalog/apply-setters:v0.2.2",
                None,
            ))
            .await
            .unwrap();
        let text = String::from_utf8(out.resource_list.to_vec()).unwrap();
        assert!(text.contains("name: new # kpt-set: ${name}"), "{text}");
        assert!(text.contains("note: kept # a comment"), "{text}");
        assert!(text.contains("set field value to \"new\""), "{text}");
    }

    #[tokio::test]
    async fn the_steps_tag_picks_a_served_version_or_none() {
        let e = BuiltinEvaluator::default();
        let image = "ghcr.io/kptdev/krm-functions-catalog/apply-setters";
        assert!(e.evaluate(request(image, Some("~0.2"))).await.is_ok());
        assert!(e.evaluate(request(image, Some("v0.2.2"))).await.is_ok());
        for tag in ["~0.3", "latest"] {
            assert!(
                e.evaluate(request(image, Some(tag)))
                    .await
                    .unwrap_err()
                    .is_not_found(),
                "{tag}"
            );
        }
        // Value-only builtins are not served by this tier.
        assert!(
            e.evaluate(request(
                "ghcr.io/kptdev/krm-functions-catalog/set-namespace:v0.4.5",
                None
            ))
            .await
            .unwrap_err()
            .is_not_found()
        );
    }
}
