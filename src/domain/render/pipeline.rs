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

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Map, Value, json};

use super::annotations::{self as ann, clean_path, join_path};
use super::error::{EXEC_NOT_ALLOWED, RenderError, RenderErrorKind, StepError};
use super::kptfile::{Function, Pipeline, PipelineInvalid, ValidateError, check_all_krm};
use super::package::Package;
use super::results::{
    self, Condition, FunctionResultList, KptRenderStatus, RenderStatus, StepKind, StepRecord,
    StructuredResult,
};
use super::source::{CallSources, DocKey, ObjectText, SourceMap, TextMap, root_keys};
use crate::domain::codec::preserve;
use crate::domain::codec::tree::YamlDoc;
use crate::domain::evaluation::EvalError;
use crate::domain::image::DEFAULT_IMAGE_PREFIX;
use crate::domain::resource_list::{OutputItem, ResourceList};
use crate::ports::{FunctionCall, FunctionRuntime, FunctionTarget, TagLister};

/// kpt's per-function timeout (5 minutes).
pub const DEFAULT_STEP_TIMEOUT: Duration = Duration::from_secs(5 * 60);
/// The image name of kpt's builtin package-context generator (never prefixed or tagged).
pub const GEN_PKG_CONTEXT_IMAGE: &str = "builtins/gen-pkg-context";

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
}

impl Default for RenderOptions {
    fn default() -> Self {
        Self {
            image_prefix: DEFAULT_IMAGE_PREFIX.to_string(),
            allow_exec: false,
            step_timeout: DEFAULT_STEP_TIMEOUT,
            package_root: ".".to_string(),
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

/// The outcome of a render.
#[derive(Debug, Clone, PartialEq)]
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

/// Applies kpt's image resolution (§3.10) to a step's `image` and a literal
/// `tag`: short names get `prefix`, the `tag` replaces the image's tag or
/// digest, and an image with neither gets `:latest`;
/// [`GEN_PKG_CONTEXT_IMAGE`] is kept as is.
///
/// Errors: `tag` is a semver constraint (`~0.2`, `>=0.4, <1`…): resolve it
/// first with [`pick_tag`] over the registry's tags (the [`Renderer`] does,
/// given a [`TagLister`]).
pub fn resolve_function_image(image: &str, tag: &str, prefix: &str) -> Result<String, String> {
    if image == GEN_PKG_CONTEXT_IMAGE {
        return Ok(image.to_string());
    }
    let mut out = prefixed(image, prefix);
    if !tag.is_empty() {
        if is_tag_constraint(tag) {
            return Err(format!(
                "tag {tag:?} of image {image:?} is a version constraint; resolving it needs the registry's tag list (a TagLister), which this render was not given: write a literal tag"
            ));
        }
        out = format!("{}:{tag}", image_repository(image, prefix));
    }
    let last = out.rsplit('/').next().unwrap_or("");
    if !last.contains(':') && !last.contains('@') {
        out.push_str(":latest");
    }
    Ok(out)
}

/// `image` with kpt's short-name `prefix` applied (names without `/`).
fn prefixed(image: &str, prefix: &str) -> String {
    let prefix = prefix.trim_end_matches('/');
    if image.contains('/') || prefix.is_empty() {
        image.to_string()
    } else {
        format!("{prefix}/{image}")
    }
}

/// The repository of a step's `image` after the prefix rule, without tag or
/// digest: what a [`TagLister`] lists (e.g. `set-namespace:v0.4` →
/// `ghcr.io/kptdev/krm-functions-catalog/set-namespace`).
pub fn image_repository(image: &str, prefix: &str) -> String {
    let out = prefixed(image, prefix);
    let without_digest = out.split('@').next().unwrap_or("");
    let slash = without_digest.rfind('/').map(|i| i + 1).unwrap_or(0);
    match without_digest[slash..].find(':') {
        Some(i) => without_digest[..slash + i].to_string(),
        None => without_digest.to_string(),
    }
}

/// True when a step's `tag` is a semver constraint (operators, ranges,
/// `x` wildcards) rather than a literal tag, by kpt's rule (§3.10).
pub fn is_tag_constraint(tag: &str) -> bool {
    tag.chars().any(|c| "<>=~^*,| ".contains(c))
        || tag.split('.').any(|p| p.eq_ignore_ascii_case("x"))
}

/// Picks the highest of `tags` (a registry's tag list) that satisfies the
/// semver `constraint`, as kpt resolves a step's `tag` (§3.10): `sha256-*`
/// and `*-git-*` tags are ignored, a leading `v` and missing minor/patch
/// numbers are accepted (`v0.4` = 0.4.0), constraints use Masterminds'
/// syntax (`~0.4`, `^1.2`, `>=0.4, <1`, `>=0.4 <1`, `1.x`, `a || b`; a
/// version without an operator is an exact match, `=`, as in Masterminds).
/// Returns the tag as the registry spells it (`v0.4.5`).
///
/// Errors: a constraint that does not parse, or no tag satisfies it (kpt's
/// "no tag could be found matching the version constraint").
pub fn pick_tag(constraint: &str, tags: &[String]) -> Result<String, String> {
    let alternatives = constraint
        .split("||")
        .map(|alt| semver::VersionReq::parse(&cargo_requirement(alt)))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("tag {constraint:?} is not a valid version constraint: {e}"))?;
    tags.iter()
        .filter(|t| !t.starts_with("sha256-") && !t.contains("-git-"))
        .filter_map(|t| lenient_version(t).map(|v| (v, t)))
        .filter(|(v, _)| alternatives.iter().any(|req| req.matches(v)))
        .max_by(|a, b| a.0.cmp(&b.0))
        .map(|(_, t)| t.clone())
        .ok_or_else(|| {
            format!(
                "no tag could be found matching the version constraint {constraint:?} (among {} tags)",
                tags.len()
            )
        })
}

/// A Masterminds-style AND group (`>= 0.4 <1`, `~v0.4`) in Cargo's
/// comma-separated requirement syntax (`>=0.4, <1`, `~0.4`).
fn cargo_requirement(group: &str) -> String {
    let mut joined = String::new();
    let mut chars = group.trim().chars().peekable();
    while let Some(c) = chars.next() {
        joined.push(c);
        // Glue an operator to its version: `>= 0.4` → `>=0.4`.
        if "<>=~^".contains(c) {
            while chars.peek().is_some_and(|n| n.is_whitespace()) {
                chars.next();
            }
        }
    }
    joined
        .split(|c: char| c == ',' || c.is_whitespace())
        .filter(|p| !p.is_empty())
        .map(|p| {
            // `v` before a version number goes: `~v0.4` → `~0.4`.
            let op_end = p.find(|c: char| !"<>=~^".contains(c)).unwrap_or(p.len());
            let (op, version) = p.split_at(op_end);
            let version = version
                .strip_prefix(['v', 'V'])
                .filter(|v| v.starts_with(|c: char| c.is_ascii_digit()))
                .unwrap_or(version);
            // A bare version means `=` in Masterminds' syntax (where Cargo
            // reads `^`): `1.2.3` is exactly 1.2.3, and a partial `1.2` is
            // 1.2.x as with Cargo's `=1.2`. Wildcards (`1.2.x`) keep their
            // own meaning, the same in both.
            let wildcard = version.split('.').any(|p| matches!(p, "x" | "X" | "*"));
            let op = if op.is_empty() && !wildcard { "=" } else { op };
            format!("{op}{version}")
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// A tag read as a version the way Masterminds' `NewVersion` does: optional
/// `v`, and `1` or `1.2` padded to `1.0.0` / `1.2.0`; `None` otherwise.
fn lenient_version(tag: &str) -> Option<semver::Version> {
    let t = tag.strip_prefix(['v', 'V']).unwrap_or(tag);
    let (core, rest) = match t.find(['-', '+']) {
        Some(i) => t.split_at(i),
        None => (t, ""),
    };
    let parts = core.split('.').count();
    if core.is_empty() || parts > 3 {
        return None;
    }
    let padded = format!("{core}{}{rest}", ".0".repeat(3 - parts));
    semver::Version::parse(&padded).ok()
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
}

/// Annotations kyaml records before a call, per input object.
#[derive(Default)]
struct Snapshot {
    path: Option<String>,
    index: Option<String>,
    legacy_path: Option<String>,
    legacy_index: Option<String>,
}

const TWINS: [(&str, &str, &str); 3] = [
    (ann::PATH, ann::LEGACY_PATH, "path"),
    (ann::INDEX, ann::LEGACY_INDEX, "index"),
    (ann::ID, ann::LEGACY_ID, "id"),
];

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
        self.flatten(&root, root.path.clone(), &mut nodes);
        drop(root);
        let mut ctx = Ctx {
            steps: Vec::new(),
            executed: 0,
            dirs: nodes
                .iter()
                .map(|n| (n.package_path.clone(), n.path.clone()))
                .collect(),
            texts: self.sources.as_deref().map(TextMap::from_sources),
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
                Ok(items) => (Some(items), None),
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

    fn flatten(&self, pkg: &Package, path: String, nodes: &mut Vec<Node>) -> usize {
        let package_path = if path.is_empty() {
            self.options.package_root.clone()
        } else {
            format!("{}/{path}", self.options.package_root.trim_end_matches('/'))
        };
        let pipeline = pkg.kptfile.pipeline();
        let invalid = pkg.kptfile.validate(|p| pkg.file_objects(p)).err();
        let mut own = pkg.resources.clone();
        for r in &mut own {
            ann::set(r, ann::PACKAGE_PATH, package_path.clone());
        }
        let own_files = pkg
            .resources
            .iter()
            .filter_map(ann::path)
            .map(|p| clean_path(&p))
            .collect();
        let config_files = pipeline
            .mutators
            .iter()
            .chain(&pipeline.validators)
            .filter(|f| !f.config_path.is_empty())
            .filter_map(|f| {
                let objects = pkg.file_objects(&f.config_path)?;
                let mut v = (*objects.first()?).clone();
                ann::remove_all(
                    &mut v,
                    &[
                        ann::PATH,
                        ann::LEGACY_PATH,
                        ann::INDEX,
                        ann::LEGACY_INDEX,
                        ann::SEQ_INDENT,
                        ann::PACKAGE_PATH,
                    ],
                );
                Some((clean_path(&f.config_path), v))
            })
            .collect();
        let idx = nodes.len();
        nodes.push(Node {
            path: path.clone(),
            package_path,
            name: pkg.kptfile.metadata.name.clone(),
            pipeline,
            invalid,
            own_files,
            config_files,
            own,
            children: Vec::new(),
            output: None,
        });
        let mut subs: Vec<&Package> = pkg.subpackages.iter().collect();
        subs.sort_by(|a, b| a.path.cmp(&b.path));
        for sub in subs {
            let child_path = if path.is_empty() || sub.path.starts_with(&format!("{path}/")) {
                sub.path.clone()
            } else {
                format!("{path}/{}", sub.path)
            };
            let child = self.flatten(sub, child_path, nodes);
            nodes[idx].children.push(child);
        }
        idx
    }

    async fn render_dfs(
        &self,
        ctx: &mut Ctx,
        nodes: &mut [Node],
    ) -> (Result<Vec<Value>, (usize, Failure)>, usize) {
        enum Ev {
            Enter(usize),
            Exit(usize),
        }
        fn walk(i: usize, nodes: &[Node], out: &mut Vec<Ev>) {
            out.push(Ev::Enter(i));
            for &c in &nodes[i].children {
                walk(c, nodes, out);
            }
            out.push(Ev::Exit(i));
        }
        let mut events = Vec::new();
        walk(0, nodes, &mut events);
        let mut packages = 0;
        for ev in events {
            match ev {
                Ev::Enter(i) => {
                    packages += 1;
                    if let Some(e) = nodes[i].invalid.clone() {
                        let partial = std::mem::take(&mut nodes[i].own);
                        return (
                            Err((
                                i,
                                Failure {
                                    kind: RenderErrorKind::InvalidKptfile(e),
                                    partial,
                                },
                            )),
                            packages,
                        );
                    }
                }
                Ev::Exit(i) => {
                    // kpt's order: the subpackages' outputs (sorted by
                    // path), then the package's own objects.
                    let mut input = Vec::new();
                    for c in nodes[i].children.clone() {
                        input.extend(nodes[c].output.take().unwrap_or_default());
                    }
                    input.append(&mut nodes[i].own);
                    match self.run_pipeline(ctx, &nodes[i], input).await {
                        Ok(out) => nodes[i].output = Some(out),
                        Err(f) => return (Err((i, f)), packages),
                    }
                }
            }
        }
        (Ok(nodes[0].output.take().unwrap_or_default()), packages)
    }

    async fn render_bfs(
        &self,
        ctx: &mut Ctx,
        nodes: &mut [Node],
    ) -> (Result<Vec<Value>, (usize, Failure)>, usize) {
        let order = bfs_order(nodes);
        for &i in &order {
            nodes[i].output = Some(std::mem::take(&mut nodes[i].own));
        }
        for &i in &order {
            if let Some(e) = nodes[i].invalid.clone() {
                return (
                    Err((
                        i,
                        Failure {
                            kind: RenderErrorKind::InvalidKptfile(e),
                            partial: nodes[i].output.take().unwrap_or_default(),
                        },
                    )),
                    order.len(),
                );
            }
        }
        for &i in &order {
            let mut input = nodes[i].output.take().unwrap_or_default();
            for d in descendants(nodes, i) {
                input.extend(nodes[d].output.take().unwrap_or_default());
            }
            match self.run_pipeline(ctx, &nodes[i], input).await {
                Ok(out) => distribute(nodes, i, out),
                Err(f) => return (Err((i, f)), order.len()),
            }
        }
        let all = order
            .iter()
            .flat_map(|&i| nodes[i].output.take().unwrap_or_default())
            .collect();
        (Ok(all), order.len())
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

    async fn run_pipeline(
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
        for (i, (f, target)) in pipeline.mutators.iter().zip(&targets).enumerate() {
            let config = self.function_config(node, f, &items);
            let filtered = f.is_filtered();
            let result = if filtered {
                super::selector::stamp_resource_ids(&mut items);
                let selected = super::selector::select(&items, &f.selectors, &f.exclude);
                let mut input: Vec<Value> = selected.iter().map(|&j| items[j].clone()).collect();
                let res = self
                    .run_step(
                        ctx,
                        node,
                        StepKind::Mutator,
                        i,
                        f,
                        target,
                        config,
                        &mut input,
                    )
                    .await;
                res.map(|out| super::selector::merge(std::mem::take(&mut items), &selected, out))
            } else {
                self.run_step(
                    ctx,
                    node,
                    StepKind::Mutator,
                    i,
                    f,
                    target,
                    config,
                    &mut items,
                )
                .await
            };
            match result {
                Ok(out) => items = out,
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
            let selected = super::selector::select(&items, &f.selectors, &f.exclude);
            let mut input: Vec<Value> = selected.iter().map(|&j| items[j].clone()).collect();
            if let Err(e) = self
                .run_step(
                    ctx,
                    node,
                    StepKind::Validator,
                    i,
                    f,
                    &target,
                    config,
                    &mut input,
                )
                .await
            {
                return Err(Failure {
                    kind: RenderErrorKind::Step(e),
                    partial: items,
                });
            }
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
                    StepError::Runtime(format!(
                        "cannot list the tags of {repository} to resolve tag {:?}: {e}",
                        f.tag
                    ))
                })?;
                pick_tag(&f.tag, &tags)
                    .map_err(|e| StepError::Runtime(format!("image {repository}: {e}")))?
            }
            _ => f.tag.clone(),
        };
        resolve_function_image(&f.image, &tag, prefix)
            .map(FunctionTarget::Image)
            .map_err(StepError::Runtime)
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

    fn base_record(
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
        }
    }

    fn push(&self, ctx: &mut Ctx, record: StepRecord) {
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

    /// One function call with kyaml's and kpt's bookkeeping around it.
    #[allow(clippy::too_many_arguments)]
    async fn run_step(
        &self,
        ctx: &mut Ctx,
        node: &Node,
        kind: StepKind,
        index: usize,
        f: &Function,
        target: &FunctionTarget,
        config: Option<Value>,
        input: &mut [Value],
    ) -> Result<Vec<Value>, StepError> {
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
        if let Err(e) = check_all_krm(input) {
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
        let input_keys: Vec<Option<DocKey>> =
            root_keys(input.iter(), |item| package_dir(&ctx.dirs, item));
        let sources = ctx.texts.as_ref().map(|texts| CallSources {
            texts: input_keys
                .iter()
                .map(|k| k.as_ref().and_then(|k| texts.get(k)).cloned())
                .collect(),
        });
        let input_texts = sources.as_ref().map(|s| s.texts.clone());
        let mut rl = ResourceList::new(input.to_vec());
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
                self.push(ctx, record);
                return Err(StepError::FunctionFailed { exit_code });
            }
            Err(e @ (EvalError::Denied { .. } | EvalError::Timeout { .. })) => {
                // A denial (nothing ran) or a step stopped at its time
                // limit: recorded in the results with an error result that
                // says which, so results.yaml and the Kptfile status tell.
                record.ran = true;
                record.results = vec![refusal_result(&e)];
                return fail(self, ctx, record, StepError::Runtime(e.to_string()));
            }
            Err(e) if e.is_not_found() => {
                let text = format!(
                    "function runtime failed to evaluate function {:?}: {e}",
                    target.name()
                );
                return fail(self, ctx, record, StepError::Runtime(text));
            }
            Err(e) => {
                record.ran = true;
                return fail(self, ctx, record, StepError::Runtime(e.to_string()));
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
        let mut out = output.resource_list.items;
        let mut matched: Vec<Option<usize>> = vec![None; out.len()];
        for (k, item) in out.iter_mut().enumerate() {
            let id = ann::get(item, ann::ID).or_else(|| ann::get(item, ann::LEGACY_ID));
            if let Some(&j) = id.as_ref().and_then(|id| ids.get(id)) {
                sync_order(&input[j], item);
                ann::remove_all(item, &[ann::ID, ann::LEGACY_ID]);
                matched[k] = Some(j);
            }
        }
        let dir = function_dir.unwrap_or_default();
        for item in &mut out {
            fill_twins(item);
            if ann::get(item, ann::PATH).is_none() && item.is_object() {
                let file = format!(
                    "{}_{}.yaml",
                    ann::kind(item).to_lowercase(),
                    ann::name(item)
                );
                let p = join_path(&[&dir, ann::namespace(item), &file]);
                ann::set_path(item, &p);
            }
        }
        if let Err(e) = reconcile_annotations(&mut out, &snapshots, use_internal, use_legacy) {
            return fail(self, ctx, record, StepError::Annotations(e));
        }
        for item in &mut out {
            if ann::get(item, ann::PACKAGE_PATH).is_none_or(|p| p.is_empty()) {
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
            let out_keys = root_keys(&out, |item| package_dir(&ctx.dirs, item));
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
/// package-path annotation looked up in `dirs`; "" when unknown).
fn package_dir(dirs: &HashMap<String, String>, item: &Value) -> String {
    ann::get(item, ann::PACKAGE_PATH)
        .and_then(|pp| dirs.get(&pp).cloned())
        .unwrap_or_default()
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

/// kyaml's pre-call step: record each object's path/index/id annotations,
/// give it a migration id, fill missing legacy/internal twins, and refuse
/// disagreeing twins. Returns the snapshots and which annotation forms the
/// input uses.
fn prepare_annotations(input: &mut [Value]) -> Result<(Vec<Snapshot>, bool, bool), String> {
    let mut snapshots = Vec::with_capacity(input.len());
    let mut internal: Option<bool> = None;
    let mut legacy: Option<bool> = None;
    let mut inconsistent = false;
    for (i, item) in input.iter_mut().enumerate() {
        ann::set(item, ann::MIGRATION_ID, i.to_string());
        let annos = ann::annotations(item);
        let has = |k: &str| annos.is_some_and(|a| a.contains_key(k));
        let get = |k: &str| ann::get(item, k);
        let snap = Snapshot {
            path: get(ann::PATH),
            index: get(ann::INDEX),
            legacy_path: get(ann::LEGACY_PATH),
            legacy_index: get(ann::LEGACY_INDEX),
        };
        let found_internal = has(ann::PATH) || has(ann::INDEX) || has(ann::ID);
        let found_legacy = has(ann::LEGACY_PATH) || has(ann::LEGACY_INDEX) || has(ann::LEGACY_ID);
        if (found_internal || found_legacy)
            && (*internal.get_or_insert(found_internal) != found_internal
                || *legacy.get_or_insert(found_legacy) != found_legacy)
        {
            inconsistent = true;
        }
        snapshots.push(snap);
        fill_twins(item);
        check_twins(item)?;
    }
    if inconsistent {
        return Err("the annotation formatting in the input resources is not consistent".into());
    }
    let any = internal.is_some() || legacy.is_some();
    Ok((snapshots, internal.unwrap_or(!any), legacy.unwrap_or(!any)))
}

/// Sets the missing one of each legacy/internal pair from the other.
fn fill_twins(item: &mut Value) {
    for (new, old, _) in TWINS {
        let n = ann::get(item, new).filter(|v| !v.is_empty());
        let o = ann::get(item, old).filter(|v| !v.is_empty());
        match (n, o) {
            (Some(v), None) => ann::set(item, old, v),
            (None, Some(v)) => ann::set(item, new, v),
            _ => {}
        }
    }
}

fn check_twins(item: &Value) -> Result<(), String> {
    for (new, old, what) in TWINS {
        if let (Some(n), Some(o)) = (ann::get(item, new), ann::get(item, old))
            && !n.is_empty()
            && !o.is_empty()
            && n != o
        {
            return Err(format!(
                "resource input to function has mismatched legacy and internal {what} annotations"
            ));
        }
    }
    Ok(())
}

/// kyaml's post-call reconciliation: a function may edit either form of the
/// path/index annotations; the edit is copied to the other form, forms the
/// input did not use are dropped, and the migration id is removed.
fn reconcile_annotations(
    out: &mut [Value],
    snapshots: &[Snapshot],
    use_internal: bool,
    use_legacy: bool,
) -> Result<(), String> {
    for item in out.iter_mut() {
        fill_twins(item);
        let snap = ann::get(item, ann::MIGRATION_ID)
            .and_then(|id| id.parse::<usize>().ok())
            .and_then(|i| snapshots.get(i));
        if let Some(snap) = snap {
            for (new, old, what, original) in [
                (
                    ann::PATH,
                    ann::LEGACY_PATH,
                    "path",
                    snap.path.clone().or_else(|| snap.legacy_path.clone()),
                ),
                (
                    ann::INDEX,
                    ann::LEGACY_INDEX,
                    "index",
                    snap.index.clone().or_else(|| snap.legacy_index.clone()),
                ),
            ] {
                let Some(original) = original.filter(|o| !o.is_empty()) else {
                    continue;
                };
                let n = ann::get(item, new).unwrap_or_default();
                let o = ann::get(item, old).unwrap_or_default();
                if original != n && original != o && n != o {
                    return Err(format!(
                        "resource input to function has mismatched legacy and internal {what} annotations"
                    ));
                } else if original != n {
                    ann::set(item, old, n);
                } else if original != o {
                    ann::set(item, new, o);
                }
            }
        }
        if !use_internal {
            ann::remove_all(item, &[ann::ID, ann::PATH, ann::INDEX]);
        }
        if !use_legacy {
            ann::remove_all(item, &[ann::LEGACY_ID, ann::LEGACY_PATH, ann::LEGACY_INDEX]);
        }
        check_twins(item)?;
        ann::remove(item, ann::MIGRATION_ID);
    }
    Ok(())
}

/// kpt's `enforcePathInvariants`: no path escaping the package, no two
/// objects of one package with the same file and index.
fn check_paths(out: &[Value]) -> Result<(), StepError> {
    let mut seen: std::collections::HashSet<(String, String, String)> =
        std::collections::HashSet::with_capacity(out.len());
    for item in out {
        let pkg = ann::get(item, ann::PACKAGE_PATH).unwrap_or_default();
        let raw = ann::path(item).unwrap_or_default();
        let path = clean_path(&raw);
        if path.starts_with("../") {
            return Err(StepError::OutsidePackage(raw));
        }
        let index = ann::index(item).unwrap_or_default();
        if !seen.insert((pkg, path.clone(), index.clone())) {
            return Err(StepError::Duplicate { path, index });
        }
    }
    Ok(())
}

/// kyaml's `SyncOrder`: map keys of `to` follow their order in `from`
/// (keys only in `to` keep their relative order after them), recursively;
/// sequences are matched by position.
pub fn sync_order(from: &Value, to: &mut Value) {
    match (from, to) {
        (Value::Object(f), Value::Object(t)) => {
            let in_order = {
                let mut fi = f.keys().filter(|k| t.contains_key(*k));
                t.keys()
                    .filter(|k| f.contains_key(*k))
                    .all(|k| fi.next() == Some(k))
            };
            if !in_order {
                let mut old = std::mem::take(t);
                for k in f.keys() {
                    if let Some(v) = old.shift_remove(k) {
                        t.insert(k.clone(), v);
                    }
                }
                for (k, v) in old {
                    t.insert(k, v);
                }
            }
            for (k, fv) in f {
                if let Some(tv) = t.get_mut(k) {
                    sync_order(fv, tv);
                }
            }
        }
        (Value::Array(f), Value::Array(t)) => {
            for (fv, tv) in f.iter().zip(t.iter_mut()) {
                sync_order(fv, tv);
            }
        }
        _ => {}
    }
}

/// Removes the per-call annotations a failed step may leave behind.
fn strip_transient(mut item: Value) -> Value {
    ann::remove_all(
        &mut item,
        &[ann::ID, ann::LEGACY_ID, ann::MIGRATION_ID, ann::RESOURCE_ID],
    );
    item
}

fn bfs_order(nodes: &[Node]) -> Vec<usize> {
    let mut order = vec![0];
    let mut i = 0;
    while i < order.len() {
        order.extend(nodes[order[i]].children.iter().copied());
        i += 1;
    }
    order
}

/// Descendants of `i` in pre-order (children in sorted order, each followed by its own descendants).
fn descendants(nodes: &[Node], i: usize) -> Vec<usize> {
    let mut out = Vec::new();
    for &c in &nodes[i].children {
        out.push(c);
        out.extend(descendants(nodes, c));
    }
    out
}

/// Breadth-first hand-back: objects go to the package named by their
/// package-path among `i` and its descendants; others stay with `i`.
fn distribute(nodes: &mut [Node], i: usize, items: Vec<Value>) {
    let scope: Vec<usize> = std::iter::once(i).chain(descendants(nodes, i)).collect();
    let by_path: HashMap<String, usize> = scope
        .iter()
        .map(|&n| (nodes[n].package_path.clone(), n))
        .collect();
    let mut buckets: HashMap<usize, Vec<Value>> = scope.iter().map(|&n| (n, Vec::new())).collect();
    for item in items {
        let owner = ann::get(&item, ann::PACKAGE_PATH)
            .and_then(|p| by_path.get(&p).copied())
            .unwrap_or(i);
        buckets.entry(owner).or_default().push(item);
    }
    for (n, items) in buckets {
        nodes[n].output = Some(items);
    }
}

/// Depth-first partial result after a failure in `failed`: the failing
/// package's partial objects, finished subtrees' outputs, and the original
/// objects of packages that did not run.
fn collect_partial(
    nodes: &mut [Node],
    i: usize,
    failed: usize,
    partial: &mut Option<Vec<Value>>,
) -> Vec<Value> {
    if i == failed
        && let Some(p) = partial.take()
    {
        return p;
    }
    if let Some(out) = nodes[i].output.take() {
        return out;
    }
    let mut items = Vec::new();
    for c in nodes[i].children.clone() {
        items.extend(collect_partial(nodes, c, failed, partial));
    }
    items.append(&mut nodes[i].own);
    items
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn image_resolution() {
        let p = DEFAULT_IMAGE_PREFIX;
        assert_eq!(
            resolve_function_image("set-labels", "", p).unwrap(),
            "ghcr.io/kptdev/krm-functions-catalog/set-labels:latest"
        );
        assert_eq!(
            resolve_function_image("ghcr.io/x/set-namespace", "v0.4.5", p).unwrap(),
            "ghcr.io/x/set-namespace:v0.4.5"
        );
        assert_eq!(
            resolve_function_image("localhost:5000/x:v1@sha256:abc", "v2", p).unwrap(),
            "localhost:5000/x:v2"
        );
        assert_eq!(resolve_function_image("x", "", "").unwrap(), "x:latest");
        assert_eq!(
            resolve_function_image(GEN_PKG_CONTEXT_IMAGE, "", p).unwrap(),
            GEN_PKG_CONTEXT_IMAGE
        );
        assert!(resolve_function_image("x", "~0.2", p).is_err());
        assert!(resolve_function_image("x", "0.4.1 - 0.4.3", p).is_err());
    }

    #[test]
    fn sync_order_restores_input_key_order() {
        let from = json!({"a": 1, "b": {"x": 1, "y": 2}, "c": [{"p": 1, "q": 2}]});
        let mut to = json!({"c": [{"q": 2, "p": 1}], "new": 0, "b": {"y": 2, "x": 1}, "a": 1});
        sync_order(&from, &mut to);
        assert_eq!(
            serde_json::to_string(&to).unwrap(),
            r#"{"a":1,"b":{"x":1,"y":2},"c":[{"p":1,"q":2}],"new":0}"#
        );
    }

    #[test]
    fn function_dir_rule() {
        assert_eq!(function_dir("fn.yaml"), "");
        assert_eq!(function_dir("./configs/fn.yaml"), "configs");
        assert_eq!(function_dir("a/functions/fn.yaml"), "a");
        assert_eq!(function_dir("functions/fn.yaml"), "");
    }
}
