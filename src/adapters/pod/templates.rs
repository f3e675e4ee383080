//! Where the pod runtime gets its pod and service templates: the one seam
//! between the driver and the template sources.
//!
//! The driver asks a [`TemplateFeed`] for the current [`Templates`] and is
//! told when they change; it never knows where they come from:
//! - Porch's inline templates (config.yaml generation without
//!   `--function-pod-template`): [`TemplateFeed::fixed`];
//! - a ConfigMap (`--function-pod-template`), re-read every scan interval:
//!   [`TemplateFeed::config_map`];
//! - Porch's `PodTemplate` and `ServiceTemplate` objects (FunctionConfig
//!   generation), watched: built by
//!   [`crate::adapters::kube::templates::watch_template_objects`] on a
//!   [`TemplatePublisher`].
//!
//! A feed only ever carries templates that passed the contract checks; a
//! source that turns invalid keeps the last good templates (and says why in
//! the log).

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use crate::domain::pod_cache::template::{Templates, templates_from_config_map};
use crate::ports::PodPlatform;

/// The current templates and their changes.
#[derive(Clone)]
pub struct TemplateFeed {
    rx: watch::Receiver<Arc<Templates>>,
    /// For templates that never change: the sender, kept so that
    /// [`changed`](Self::changed) stays pending.
    keep: Option<Arc<TemplatePublisher>>,
}

impl std::fmt::Debug for TemplateFeed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TemplateFeed")
            .field("version", &self.rx.borrow().version)
            .finish()
    }
}

/// The sending side of a [`TemplateFeed`], for sources that change.
#[derive(Debug)]
pub struct TemplatePublisher {
    tx: watch::Sender<Arc<Templates>>,
}

impl TemplatePublisher {
    /// Publishes `templates` if their version differs from the current one;
    /// returns whether it did.
    pub fn publish(&self, templates: Templates) -> bool {
        self.tx.send_if_modified(|current| {
            if current.version == templates.version {
                false
            } else {
                *current = Arc::new(templates);
                true
            }
        })
    }

    /// The templates published last.
    pub fn current(&self) -> Arc<Templates> {
        self.tx.borrow().clone()
    }

    /// Resolves when every [`TemplateFeed`] of this publisher is gone (the
    /// pod runtime stopped), so a source task can end.
    pub async fn closed(&self) {
        self.tx.closed().await;
    }

    /// True once every [`TemplateFeed`] of this publisher is gone.
    pub fn is_closed(&self) -> bool {
        self.tx.is_closed()
    }
}

impl TemplateFeed {
    /// A feed that starts with `initial`, and its publisher.
    pub fn new(initial: Templates) -> (TemplatePublisher, Self) {
        let (tx, rx) = watch::channel(Arc::new(initial));
        (TemplatePublisher { tx }, Self { rx, keep: None })
    }

    /// Templates that never change (Porch's inline ones).
    pub fn fixed(templates: Templates) -> Self {
        let (publisher, mut feed) = Self::new(templates);
        feed.keep = Some(Arc::new(publisher));
        feed
    }

    /// The templates of ConfigMap `namespace/name` (keys `template` and
    /// `serviceTemplate`, version = its `resourceVersion`; Porch Gen B
    /// `--function-pod-template`), re-read every `period` (the scan
    /// interval; zero: read once). One read at a time, each given up after
    /// `period`. Needs a Tokio runtime.
    ///
    /// Errors: the first read fails or its templates are unusable (Porch's
    /// messages). Later failures keep the last good templates and are logged.
    pub async fn config_map(
        platform: Arc<dyn PodPlatform>,
        namespace: &str,
        name: &str,
        period: Duration,
    ) -> Result<Self, String> {
        let initial = read_config_map(&*platform, namespace, name).await?;
        if period.is_zero() {
            return Ok(Self::fixed(initial));
        }
        let (publisher, feed) = Self::new(initial);
        let (namespace, name) = (namespace.to_string(), name.to_string());
        tokio::spawn(async move {
            let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + period, period);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    _ = tick.tick() => {}
                    () = publisher.closed() => return,
                }
                // One read at a time, each bounded by the period: a read
                // that hangs (the API server stopped) is given up when the
                // next is due, so reads never pile up.
                let read = tokio::time::timeout(
                    period,
                    read_config_map(&*platform, &namespace, &name),
                )
                .await
                .unwrap_or_else(|_| {
                    Err(format!(
                        "no answer from the API server within the scan interval ({period:?})"
                    ))
                });
                match read {
                    Ok(t) => {
                        let version = t.version.clone();
                        if publisher.publish(t) {
                            tracing::info!(%version, "the function pod template changed");
                        }
                    }
                    Err(e) => tracing::warn!(
                        "cannot re-read the function pod template (keeping the previous one): {e}"
                    ),
                }
            }
        });
        Ok(feed)
    }

    /// The current templates.
    pub fn current(&self) -> Arc<Templates> {
        self.rx.borrow().clone()
    }

    /// Waits for the next change and returns the new templates; pending
    /// forever once the source has stopped.
    pub async fn changed(&mut self) -> Arc<Templates> {
        if self.rx.changed().await.is_err() {
            return std::future::pending().await;
        }
        self.rx.borrow_and_update().clone()
    }
}

/// Reads and checks the templates of ConfigMap `namespace/name`.
async fn read_config_map(
    platform: &dyn PodPlatform,
    namespace: &str,
    name: &str,
) -> Result<Templates, String> {
    let data = platform
        .read_config_map(namespace, name)
        .await
        .map_err(|e| {
            format!(
                "could not get the ConfigMap {namespace}/{name} holding the function pod template: {e}"
            )
        })?;
    templates_from_config_map(name, &data.data, &data.resource_version).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::pod_cache::template::inline_templates;

    #[tokio::test]
    async fn only_new_versions_are_published() {
        let (publisher, mut feed) = TemplateFeed::new(inline_templates("w"));
        assert!(
            !publisher.publish(inline_templates("other")),
            "same version"
        );
        let mut next = inline_templates("w2");
        next.version = "7/8".into();
        assert!(publisher.publish(next));
        assert_eq!(feed.changed().await.version, "7/8");
        assert_eq!(feed.current().version, "7/8");
        assert_eq!(publisher.current().version, "7/8");
        let fixed = TemplateFeed::fixed(inline_templates("w"));
        let mut f2 = fixed.clone();
        let waited =
            tokio::time::timeout(Duration::from_millis(50), async move { f2.changed().await })
                .await;
        assert!(waited.is_err(), "fixed templates never change");
    }
}
