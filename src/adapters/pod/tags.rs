//! The pod runtime's reading of a step's `tag` (`EvaluateFunctionRequest.Tag`):
//! a constraint is resolved against the registry's tag list before the pod
//! cache sees the image, as Porch's pod evaluator does, but each list is
//! kept for a bounded time (`--tag-list-ttl`) instead of asking the
//! registry on every call.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use crate::adapters::telemetry::metrics::count_tag_list;
use crate::domain::evaluation::EvalError;
use crate::domain::image::{image_repository, split_reference};
use crate::domain::render::pipeline::is_tag_constraint;
use crate::domain::tag_selection::TagRequest;
use crate::ports::ImageInspector;

/// How long a registry's tag list answers constraints by default, in
/// seconds-scale [`Duration`] (`--tag-list-ttl`): five minutes.
pub const DEFAULT_TAG_LIST_TTL: Duration = Duration::from_secs(300);

/// One repository's last tag list and when it was read.
type Slot = Arc<tokio::sync::Mutex<Option<(Instant, Arc<Vec<String>>)>>>;

/// Tag lists by repository, each kept for `ttl`; the callers that find a
/// list missing or stale share one registry request (the first lists, the
/// others wait for its answer).
pub(crate) struct TagLists {
    inspector: Arc<dyn ImageInspector>,
    ttl: Duration,
    slots: Mutex<HashMap<String, Slot>>,
}

impl TagLists {
    /// Lists through `inspector`, keeping each list for `ttl` (zero: every
    /// call lists, as Porch does).
    pub(crate) fn new(inspector: Arc<dyn ImageInspector>, ttl: Duration) -> Self {
        Self {
            inspector,
            ttl,
            slots: Mutex::new(HashMap::new()),
        }
    }

    /// The tags of `repository`, from a list younger than the TTL or from
    /// the registry (counted in `krm_fn_runner_tag_lists_total`).
    ///
    /// Errors: the registry's failure, naming the repository.
    async fn tags(&self, repository: &str) -> Result<Arc<Vec<String>>, String> {
        let slot = self
            .slots
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(repository.to_string())
            .or_default()
            .clone();
        let mut held = slot.lock().await;
        if let Some((at, tags)) = held.as_ref()
            && at.elapsed() < self.ttl
        {
            count_tag_list("cached");
            return Ok(tags.clone());
        }
        match self.inspector.repository_tags(repository).await {
            Ok(tags) => {
                count_tag_list("listed");
                let tags = Arc::new(tags);
                *held = Some((Instant::now(), tags.clone()));
                Ok(tags)
            }
            Err(e) => {
                count_tag_list("failed");
                Err(e)
            }
        }
    }

    /// The concrete image the pod cache runs for `image` at the step's
    /// `tag`: `image`'s repository (short names get `prefix`; its own tag or
    /// digest dropped) with the tag when it is a literal (`v0.4.5`,
    /// `latest`: no registry request) or a digest (`sha256:…`), else with
    /// the highest registry tag that satisfies the constraint (Porch's
    /// `FindBestSemverMatch`).
    ///
    /// Errors: [`EvalError::NotFound`] when the constraint does not parse
    /// or no registry tag satisfies it (naming the tag and the tags seen),
    /// so a chain behind goes on as Porch's does; [`EvalError::Unavailable`]
    /// when the registry cannot be listed.
    pub(crate) async fn resolve(
        &self,
        image: &str,
        tag: &str,
        prefix: &str,
    ) -> Result<String, EvalError> {
        let repository = image_repository(image, prefix);
        if tag.starts_with("sha256:") {
            return Ok(format!("{repository}@{tag}"));
        }
        if !is_tag_constraint(tag) {
            return Ok(format!("{repository}:{tag}"));
        }
        let request = TagRequest::parse(tag);
        if let TagRequest::Literal { reason, .. } = &request {
            return Err(EvalError::NotFound {
                image: image.to_string(),
                detail: Some(format!(
                    "the tag {tag:?} is not a valid semver constraint ({reason}); write a \
                     version (v0.4.5) or a constraint (~0.4)"
                )),
            });
        }
        let tags = self.tags(&repository).await.map_err(|e| {
            EvalError::Unavailable(format!(
                "cannot resolve the tag constraint {tag:?} of {image:?}: listing the tags of \
                 {repository} failed: {e}; check the registry and the runner's registry credentials"
            ))
        })?;
        match request.select(&tags) {
            Ok(chosen) => Ok(format!("{repository}:{chosen}")),
            Err(miss) => Err(EvalError::NotFound {
                image: image.to_string(),
                detail: Some(format!("{repository} in its registry: {miss}")),
            }),
        }
    }
}

impl TagLists {
    /// The warm-up images with every tag constraint resolved to the highest
    /// registry tag that satisfies it (a FunctionConfig's
    /// `podExecutor.tags` are constraints, as in Porch's default objects:
    /// `~0.4`). Porch's warm-up gives such an entry to the pod cache as it
    /// is, where it names no image; here it starts a pod of the version a
    /// call with that tag would run. Images with a literal tag or a digest
    /// are kept as they are. An entry whose constraint cannot be resolved
    /// within `within` (registry unreachable, no match) is left out with a
    /// warning naming it and why; the lists are asked concurrently.
    pub(crate) async fn resolve_warm_up(
        &self,
        images: &[String],
        prefix: &str,
        within: Duration,
    ) -> Vec<String> {
        let resolved = images.iter().map(|image| async move {
            let (name, tag, digest) = split_reference(image);
            let Some(tag) = tag.filter(|t| digest.is_none() && is_tag_constraint(t)) else {
                return Some(image.clone());
            };
            match tokio::time::timeout(within, self.resolve(name, tag, prefix)).await {
                Ok(Ok(concrete)) => Some(concrete),
                Ok(Err(e)) => {
                    tracing::warn!(image = %image, "warm-up skips this image: {e}");
                    None
                }
                Err(_) => {
                    tracing::warn!(
                        image = %image,
                        "warm-up skips this image: its registry's tag list did not come within {within:?}"
                    );
                    None
                }
            }
        });
        futures_util::future::join_all(resolved)
            .await
            .into_iter()
            .flatten()
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use async_trait::async_trait;

    use super::*;
    use crate::ports::{ImageInspectError, ImageMetadata};

    struct Registry {
        tags: Vec<String>,
        lists: AtomicUsize,
    }

    #[async_trait]
    impl ImageInspector for Registry {
        async fn inspect(&self, image: &str) -> Result<ImageMetadata, ImageInspectError> {
            unreachable!("not inspected: {image}")
        }
        async fn repository_tags(&self, repository: &str) -> Result<Vec<String>, String> {
            self.lists.fetch_add(1, Ordering::SeqCst);
            if repository.contains("down") {
                return Err("connection refused".into());
            }
            Ok(self.tags.clone())
        }
    }

    fn lists(ttl: Duration) -> (TagLists, Arc<Registry>) {
        let registry = Arc::new(Registry {
            tags: ["v0.4.1", "v0.4.5", "v0.5.2", "latest", "sha256-abc.sig"]
                .map(String::from)
                .to_vec(),
            lists: AtomicUsize::new(0),
        });
        (TagLists::new(registry.clone(), ttl), registry)
    }

    const PREFIX: &str = "ghcr.io/kptdev/krm-functions-catalog/";

    #[tokio::test]
    async fn a_constraint_becomes_the_highest_registry_tag_and_literals_ask_nothing() {
        let (lists, registry) = lists(DEFAULT_TAG_LIST_TTL);
        let full = "ghcr.io/kptdev/krm-functions-catalog/set-namespace";
        for (image, tag, want) in [
            ("set-namespace", "~0.4", "v0.4.5"),
            ("set-namespace:v0.4.1", "~0.5", "v0.5.2"),
            (full, ">=0.4, <0.4.3", "v0.4.1"),
            (full, "~0.4 || ~0.5", "v0.5.2"),
        ] {
            assert_eq!(
                lists.resolve(image, tag, PREFIX).await.unwrap(),
                format!("{full}:{want}"),
                "{image} {tag}"
            );
        }
        assert_eq!(registry.lists.load(Ordering::SeqCst), 1, "one list, cached");
        assert_eq!(
            lists.resolve(full, "v0.4.9", PREFIX).await.unwrap(),
            format!("{full}:v0.4.9")
        );
        assert_eq!(
            lists.resolve(full, "sha256:0123", PREFIX).await.unwrap(),
            format!("{full}@sha256:0123")
        );
        assert_eq!(registry.lists.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn no_match_is_not_found_and_a_registry_failure_unavailable() {
        let (lists, _) = lists(DEFAULT_TAG_LIST_TTL);
        let e = lists
            .resolve("set-namespace", ">=1.0", PREFIX)
            .await
            .unwrap_err();
        assert!(e.is_not_found(), "{e}");
        assert!(e.to_string().contains("\">=1.0\""), "{e}");
        let e = lists
            .resolve("set-namespace", ">= x y", PREFIX)
            .await
            .unwrap_err();
        assert!(e.is_not_found(), "{e}");
        assert!(
            e.to_string().contains("is not a valid semver constraint"),
            "{e}"
        );
        let e = lists
            .resolve("example.com/down/fn", "~0.4", PREFIX)
            .await
            .unwrap_err();
        assert!(matches!(e, EvalError::Unavailable(_)), "{e}");
        assert!(e.to_string().contains("connection refused"), "{e}");
    }

    #[tokio::test(start_paused = true)]
    async fn a_list_older_than_the_ttl_is_listed_again() {
        let (lists, registry) = lists(Duration::from_secs(60));
        lists
            .resolve("set-namespace", "~0.4", PREFIX)
            .await
            .unwrap();
        tokio::time::advance(Duration::from_secs(59)).await;
        lists
            .resolve("set-namespace", "~0.4", PREFIX)
            .await
            .unwrap();
        assert_eq!(registry.lists.load(Ordering::SeqCst), 1);
        tokio::time::advance(Duration::from_secs(2)).await;
        lists
            .resolve("set-namespace", "~0.4", PREFIX)
            .await
            .unwrap();
        assert_eq!(registry.lists.load(Ordering::SeqCst), 2);
    }

    #[tokio::test]
    async fn warm_up_resolves_constraints_and_skips_what_it_cannot() {
        let (lists, registry) = lists(DEFAULT_TAG_LIST_TTL);
        let full = "ghcr.io/kptdev/krm-functions-catalog/set-namespace";
        let images = [
            format!("{full}:~0.4"),
            format!("{full}:v0.4.1"),
            format!("{full}@sha256:0123"),
            format!("{full}:>=1.0"),
            "example.com/down/fn:~0.4".to_string(),
        ];
        let out = lists
            .resolve_warm_up(&images, PREFIX, Duration::from_secs(5))
            .await;
        assert_eq!(
            out,
            [
                format!("{full}:v0.4.5"),
                format!("{full}:v0.4.1"),
                format!("{full}@sha256:0123"),
            ]
        );
        assert_eq!(
            registry.lists.load(Ordering::SeqCst),
            2,
            "set-namespace once, the down one once"
        );
    }
}
