//! The render engine: runs the Kptfile pipelines of a package tree through a
//! [`FunctionRuntime`], the way `kpt fn render` does (`krm-functions.md` §3).
//!
//! - **Order.** Default: depth-first post-order — a package's subpackages
//!   (sorted by path) are rendered first, then its pipeline runs on the
//!   subpackages' outputs followed by its own objects (as `kpt fn render`
//!   hands them to functions). With
//!   `kpt.dev/bfs-rendering: "true"` on the root Kptfile: packages run
//!   top-down in breadth-first order, each on itself plus all its
//!   descendants, and the output is handed back to the packages by their
//!   package-path annotation.
//! - **Pipeline.** Mutators in order, each on the previous output; then
//!   validators, each on a copy, output checked and discarded. The first
//!   failure stops the whole render.
//! - **functionConfig.** `configMap` → ConfigMap `function-input`;
//!   `configPath` → the object of that file, re-read from the current
//!   in-memory objects before every step (an earlier mutator may edit it).
//! - **Selectors.** See [`super::selector`].
//! - **Per call** (kyaml's FunctionFilter and kpt's runner): input must be
//!   KRM; objects get the id and migration annotations; after the call ids
//!   are matched to restore field order, generated objects get a default
//!   path, legacy/internal annotations are reconciled, objects without
//!   package-path get the current package's, and the output is checked
//!   (KRM, no path outside the package, no duplicate path+index).
//! - **Result.** On success every object carries its path relative to the
//!   root package (subpackage prefix added) and no package-path.
//!
//! Deliberate differences from kpt (quirks not copied): selectors are an OR
//! without duplicates ([`super::selector`]); in breadth-first mode a package
//! whose objects were all deleted by an ancestor stays empty (kpt restores
//! them) and objects claiming a package outside the current scope stay with
//! the current package (kpt drops them or overwrites that package); with
//! `kpt.dev/save-on-render-failure` the partial result always includes every
//! package (kpt loses ancestors' objects when the failure is two levels deep).

mod image_tag;
mod order;
mod reconcile;
mod run;
mod step;

use foldhash::HashMap;
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;

use super::annotations::{self as ann, clean_path, join_path};
use super::error::{RenderError, RenderErrorKind};
use super::kptfile::{Pipeline, PipelineInvalid};
use super::package::Package;
use super::results::{
    self, Condition, FunctionResultList, KptRenderStatus, RenderStatus, StepKind, StepRecord,
};
use super::source::{SourceMap, TextMap};
use crate::domain::image::DEFAULT_IMAGE_PREFIX;
use crate::ports::{FunctionRuntime, FunctionTarget, TagLister};

pub use crate::domain::image::image_repository;
pub use image_tag::{GEN_PKG_CONTEXT_IMAGE, is_tag_constraint, pick_tag, resolve_function_image};
use order::{bfs_order, collect_partial, distribute};
use reconcile::strip_transient;
pub use reconcile::sync_order;

/// kpt's per-function timeout (5 minutes).
pub const DEFAULT_STEP_TIMEOUT: Duration = Duration::from_secs(5 * 60);

/// How a render runs: kpt's `fn render` flags. Build one with
/// [`RenderOptions::builder`] (or take [`RenderOptions::default`]: kpt's
/// defaults); fields are public to read, and new ones may be added.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct RenderOptions {
    /// Prefix for short image names (`--image-prefix`); empty disables prefixing.
    pub image_prefix: String,
    /// Allow `exec` functions (`--allow-exec`).
    pub allow_exec: bool,
    /// Limit for each function call of a step without its own `timeout:`
    /// (render's `--step-timeout`); default 5 minutes as in kpt. A step's
    /// `timeout:` (our Kptfile extension) replaces it for that step.
    pub step_timeout: Duration,
    /// Value of the package-path annotation of the root package (kpt: the
    /// absolute directory); subpackages get `<root>/<path>`. Default `.`.
    pub package_root: String,
    /// Record kpt's attribution on Config Connector objects after a
    /// successful render ([`super::attribution`]); default on, as in kpt,
    /// whose opt-out is `KPT_DISABLE_ATTRIBUTION` (the CLI reads it).
    pub attribution: bool,
}

impl Default for RenderOptions {
    fn default() -> Self {
        Self {
            image_prefix: DEFAULT_IMAGE_PREFIX.to_string(),
            allow_exec: false,
            step_timeout: DEFAULT_STEP_TIMEOUT,
            package_root: ".".to_string(),
            attribution: true,
        }
    }
}

impl RenderOptions {
    /// A builder starting from kpt's defaults ([`RenderOptions::default`]).
    ///
    /// ```
    /// # use krm_fn_runner::RenderOptions;
    /// let options = RenderOptions::builder().allow_exec(true).image_prefix("").build();
    /// assert!(options.allow_exec);
    /// ```
    pub fn builder() -> RenderOptionsBuilder {
        RenderOptionsBuilder(Self::default())
    }
}

/// Builds [`RenderOptions`]; every setter replaces one default.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[must_use]
pub struct RenderOptionsBuilder(RenderOptions);

impl RenderOptionsBuilder {
    /// Prefix for short image names (`--image-prefix`, default
    /// `ghcr.io/kptdev/krm-functions-catalog/`); empty disables prefixing.
    pub fn image_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.0.image_prefix = prefix.into();
        self
    }

    /// Allows `exec:` functions (`--allow-exec`, default off as in kpt).
    pub fn allow_exec(mut self, allow: bool) -> Self {
        self.0.allow_exec = allow;
        self
    }

    /// Limit for each function call of a step without its own `timeout:`
    /// (`--step-timeout`, default [`DEFAULT_STEP_TIMEOUT`]).
    pub fn step_timeout(mut self, timeout: Duration) -> Self {
        self.0.step_timeout = timeout;
        self
    }

    /// Value of the root package's package-path annotation (kpt: the
    /// absolute directory; default `.`).
    pub fn package_root(mut self, root: impl Into<String>) -> Self {
        self.0.package_root = root.into();
        self
    }

    /// Records kpt's attribution annotation on Config Connector objects
    /// after a successful render (default on, as in kpt; see
    /// [`super::attribution`]).
    pub fn attribution(mut self, attribute: bool) -> Self {
        self.0.attribution = attribute;
        self
    }

    /// The options.
    pub fn build(self) -> RenderOptions {
        self.0
    }
}

/// A step about to run (for progress output: kpt's `[RUNNING] "<fn>"[ on N resource(s)]`).
#[derive(Debug, Clone, PartialEq)]
pub struct StepStart<'a> {
    /// Package path relative to the root ("" = root).
    pub package: &'a str,
    /// Mutator or validator.
    pub kind: StepKind,
    /// What runs.
    pub target: &'a FunctionTarget,
    /// Number of objects the step receives, when it has selectors/exclusions.
    pub resource_count: Option<usize>,
}

/// Observer of a render's progress; every method defaults to doing nothing.
/// The CLI measures step durations between `step_started` and `step_finished`.
pub trait RenderEvents: Send + Sync {
    /// A package with a non-empty pipeline starts (`path` relative to the root, Kptfile name).
    fn package_started(&self, _path: &str, _name: &str) {}
    /// A function is about to be called.
    fn step_started(&self, _step: &StepStart<'_>) {}
    /// A step ended (successfully or not), including steps that failed before running.
    fn step_finished(&self, _record: &StepRecord) {}
    /// A package's pipeline passed (kpt prints a blank line then).
    fn package_finished(&self, _path: &str) {}
}

/// A [`RenderEvents`] that ignores everything.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoEvents;

impl RenderEvents for NoEvents {}

/// The outcome of a render (not comparable: its error keeps the
/// runtime's error as a source).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct RenderOutcome {
    /// The rendered objects with paths relative to the root package: all
    /// of them on success; on failure only when the root Kptfile asks for
    /// `kpt.dev/save-on-render-failure` (then the partially rendered
    /// objects), else `None` (nothing must be written).
    pub resources: Option<Vec<Value>>,
    /// Every attempted step, in execution order.
    pub steps: Vec<StepRecord>,
    /// The failure, if any.
    pub error: Option<RenderError>,
    /// Functions that ran successfully (kpt's "executed N function(s)").
    pub executed: usize,
    /// Packages visited (kpt's "in M package(s)").
    pub packages: usize,
    /// The text of every object as the render left it (origin as read,
    /// text the functions wrote), by root-relative path and index, when the
    /// renderer was given the package's documents
    /// ([`Renderer::with_sources`]): what the writer formats
    /// [`RenderOutcome::resources`] with.
    pub texts: Option<Arc<TextMap>>,
}

impl RenderOutcome {
    /// True when the render succeeded.
    pub fn is_ok(&self) -> bool {
        self.error.is_none()
    }

    /// kpt's `FunctionResultList` (write it to `<results-dir>/results.yaml`).
    pub fn result_list(&self) -> FunctionResultList {
        results::result_list(&self.steps)
    }

    /// Porch's `RenderStatus`: the result list and the error text.
    pub fn render_status(&self) -> RenderStatus {
        RenderStatus {
            result: Some(self.result_list()),
            error: self
                .error
                .as_ref()
                .map(ToString::to_string)
                .unwrap_or_default(),
        }
    }

    /// kpt's Kptfile `status.renderStatus`, `None` when no step was attempted.
    pub fn kpt_render_status(&self) -> Option<KptRenderStatus> {
        results::kpt_render_status(&self.steps, self.error.is_some())
    }

    /// kpt's `Rendered` condition for the root Kptfile.
    pub fn rendered_condition(&self) -> Condition {
        results::rendered_condition(self.error.as_ref().map(ToString::to_string).as_deref())
    }
}

/// Renders package trees through a [`FunctionRuntime`].
pub struct Renderer<'a> {
    runtime: &'a dyn FunctionRuntime,
    options: RenderOptions,
    events: &'a dyn RenderEvents,
    sources: Option<Arc<SourceMap>>,
    tag_lister: Option<Arc<dyn TagLister>>,
}

/// A package of the flattened tree.
struct Node {
    path: String,
    package_path: String,
    name: String,
    pipeline: Pipeline,
    invalid: Option<PipelineInvalid>,
    /// Cleaned paths of the package's own files as read.
    own_files: Vec<String>,
    /// `configPath` → the object read from that file (reader annotations removed).
    config_files: HashMap<String, Value>,
    /// Own objects until the package runs.
    own: Vec<Value>,
    children: Vec<usize>,
    /// Depth-first: the subtree's output once rendered. Breadth-first: the
    /// package's current objects.
    output: Option<Vec<Value>>,
}

struct Failure {
    kind: RenderErrorKind,
    partial: Vec<Value>,
}

struct Ctx {
    steps: Vec<StepRecord>,
    executed: usize,
    /// Package-path annotation value → package directory relative to the root.
    dirs: HashMap<String, String>,
    /// Objects' texts, when the renderer has the package's documents.
    texts: Option<TextMap>,
    /// A failed render keeps its partial result
    /// (`kpt.dev/save-on-render-failure`): a step's input must outlive the
    /// call.
    keep_partial: bool,
}
impl<'a> Renderer<'a> {
    /// A renderer using `runtime` with `options` and no progress events.
    pub fn new(runtime: &'a dyn FunctionRuntime, options: RenderOptions) -> Self {
        Self {
            runtime,
            options,
            events: &NoEvents,
            sources: None,
            tag_lister: None,
        }
    }

    /// Hands functions the package's document texts (comments included, as
    /// kpt does), read by the package I/O adapter; without it functions get
    /// objects emitted without comments.
    pub fn with_sources(mut self, sources: Arc<SourceMap>) -> Self {
        self.sources = Some(sources);
        self
    }

    /// Resolves steps whose `tag` is a semver constraint by listing the
    /// image's tags through `lister` (kpt lists the registry's tags, §3.10);
    /// without one such steps fail with an error that says so.
    pub fn with_tag_lister(mut self, lister: Arc<dyn TagLister>) -> Self {
        self.tag_lister = Some(lister);
        self
    }

    /// Reports progress to `events`.
    pub fn with_events(mut self, events: &'a dyn RenderEvents) -> Self {
        self.events = events;
        self
    }

    /// The options in use.
    pub fn options(&self) -> &RenderOptions {
        &self.options
    }

    /// Renders the tree rooted at `root` (which must be the root package:
    /// its `path` is ignored and treated as "").
    pub async fn render(&self, mut root: Package) -> RenderOutcome {
        root.path = String::new();
        // The root Kptfile's render status describes the previous render:
        // functions get the Kptfile without it (old functions decode the
        // Kptfile strictly and know no `status`); the writer records the new one.
        for r in &mut root.resources {
            if ann::path(r).is_some_and(|p| clean_path(&p) == super::kptfile::KPTFILE_NAME)
                && ann::kind(r) == super::kptfile::KPTFILE_KIND
            {
                super::kptfile::strip_render_status(r);
            }
        }
        let bfs = root.kptfile.bfs_rendering();
        let save = root.kptfile.save_on_render_failure();
        let mut nodes = Vec::new();
        self.flatten(root, String::new(), &mut nodes);
        let mut ctx = Ctx {
            steps: Vec::new(),
            executed: 0,
            dirs: nodes
                .iter()
                .map(|n| (n.package_path.clone(), n.path.clone()))
                .collect(),
            texts: self.sources.as_deref().map(TextMap::from_sources),
            keep_partial: save,
        };
        if let Some(e) = nodes[0].invalid.clone() {
            return RenderOutcome {
                resources: None,
                steps: Vec::new(),
                error: Some(RenderError {
                    package: String::new(),
                    kind: RenderErrorKind::InvalidRootKptfile(e),
                    bfs,
                }),
                executed: 0,
                packages: 0,
                texts: ctx.texts.map(Arc::new),
            };
        }
        let (result, packages) = if bfs {
            self.render_bfs(&mut ctx, &mut nodes).await
        } else {
            self.render_dfs(&mut ctx, &mut nodes).await
        };
        let (resources, error) = match result {
            Ok(items) => match self.finalize(items, &nodes) {
                Ok(mut items) => {
                    if self.options.attribution {
                        super::attribution::attribute_all(&mut items, ctx.texts.as_mut());
                    }
                    (Some(items), None)
                }
                Err(e) => (
                    None,
                    Some(RenderError {
                        package: String::new(),
                        kind: RenderErrorKind::Package(e),
                        bfs,
                    }),
                ),
            },
            Err((package, failure)) => {
                let error = RenderError {
                    package: nodes[package].path.clone(),
                    kind: failure.kind,
                    bfs,
                };
                let resources = if save {
                    let items = if bfs {
                        distribute(&mut nodes, package, failure.partial);
                        bfs_order(&nodes)
                            .into_iter()
                            .flat_map(|i| nodes[i].output.take().unwrap_or_default())
                            .collect()
                    } else {
                        collect_partial(&mut nodes, 0, package, &mut Some(failure.partial))
                    };
                    self.finalize(items.into_iter().map(strip_transient).collect(), &nodes)
                        .ok()
                } else {
                    None
                };
                (resources, Some(error))
            }
        };
        RenderOutcome {
            resources,
            steps: ctx.steps,
            error,
            executed: ctx.executed,
            packages,
            texts: ctx.texts.map(Arc::new),
        }
    }

    /// Rewrites paths relative to the root and removes package-path and ids.
    fn finalize(&self, items: Vec<Value>, nodes: &[Node]) -> Result<Vec<Value>, String> {
        let dirs: HashMap<&str, &str> = nodes
            .iter()
            .map(|n| (n.package_path.as_str(), n.path.as_str()))
            .collect();
        let root = self.options.package_root.trim_end_matches('/');
        let mut out = Vec::with_capacity(items.len());
        for mut item in items {
            let pp = ann::get(&item, ann::PACKAGE_PATH).unwrap_or_default();
            let dir = match dirs.get(pp.as_str()) {
                Some(d) => d.to_string(),
                None if pp.is_empty() => String::new(),
                None => match pp.strip_prefix(&format!("{root}/")) {
                    Some(rest) => clean_path(rest),
                    None => {
                        return Err(format!(
                            "subpackage {pp:?} is not a descendant of {:?}",
                            self.options.package_root
                        ));
                    }
                },
            };
            // Go's filepath.Join(dir, Clean(path)): an absolute path lands
            // inside the package (`/a/b.yaml` → `a/b.yaml`), as in kpt.
            let path = clean_path(&ann::path(&item).unwrap_or_default());
            let new_path = join_path(&[&dir, path.trim_start_matches('/')]);
            ann::set_path(&mut item, &new_path);
            ann::remove_all(&mut item, &[ann::PACKAGE_PATH, ann::ID, ann::LEGACY_ID]);
            out.push(item);
        }
        Ok(out)
    }
}
