//! Porch's `FunctionConfig` objects (CRD `config.porch.kpt.dev/v1alpha1`,
//! the generation Porch ships today) and the store that answers, for a
//! function image, which binary serves it in the exec runtime and which
//! settings its function pods get.
//!
//! ```yaml
//! apiVersion: config.porch.kpt.dev/v1alpha1
//! kind: FunctionConfig
//! metadata: {name: set-namespace, namespace: porch-fn-system}
//! spec:
//!   image: set-namespace                 # the function's name
//!   prefixes: ["", ghcr.io/kptdev/krm-functions-catalog]   # "" = --default-image-prefix
//!   binaryExecutor: {tags: [v0.4.2], path: set-namespace}  # relative to --functions
//!   #   sandbox: {allow: [network], read: [/opt/venv], write: [/srv/out]}  # ours: sandbox layers the binary may do without, paths it may also read, write
//!   podExecutor:
//!     tags: [v0.4.1]                     # empty: every tag
//!     timeToLive: 30m
//!     maxParallelExecutions: 2           # pods of the image
//!     preferredMaxQueueLength: 1         # load on a pod before another starts
//!     templateOverrides: {container: {env: [...]}, initContainer: {...}, serviceAccountName: ..., securityContext: ...}
//!   goExecutor: {...}                    # porch-server's builtin runtime; ignored here
//! ```
//!
//! An image `<repository>/<name>:<tag>` (short names first get
//! `--default-image-prefix`, and `:latest` when they have no tag) is
//! configured by the object whose `spec.image` is `<name>` and one of whose
//! prefixes is exactly `<repository>`. The executors' `tags` are semver
//! constraints, as in Porch today (`~0.4`, `~0.1 != v0.1.4`, `*` for every
//! version; a literal version is the constraint `=` it): its exec binary is
//! `binaryExecutor.path` when the tag — the step's `tag` when the request
//! carries one, else the image's own tag, or the digest of a pinned
//! reference — satisfies one of `binaryExecutor.tags`
//! ([`matches_config_tags`], Porch's `MatchesConfigTags`, which also lets a
//! constraint tag select a list that names a satisfying version); its pod
//! settings are `podExecutor` when the tag satisfies one of
//! `podExecutor.tags`, or for every tag when that list is empty (the CRD's
//! documented meaning).
//!
//! Differences from Porch's store (spec §3.2, §10 item 22), all deliberate:
//! - prefixes match the whole repository: `ghcr.io/foo` matches
//!   `ghcr.io/foo/x` but neither `ghcr.io/foobar/x` nor `ghcr.io/foo/bar/x`
//!   (Porch's regular expression is anchored at the start only);
//! - two objects that configure the same name under a common prefix are a
//!   conflict decided the same way on every runner and every restart: the
//!   older object (by creation time, then name) wins and the other reports
//!   the conflict in its status until it no longer conflicts (Porch compares
//!   `spec.image` with object names, which only works when they are equal);
//! - removing an object removes everything it configured (Porch keeps its
//!   binaries);
//! - `podExecutor.tags` is honoured (Porch uses it only for warm-up);
//! - `spec.image` may be a full repository path (`ghcr.io/foo/set-image`):
//!   the repository then counts as one more prefix;
//! - a malformed `timeToLive` or a negative count is an error in the
//!   object's status instead of a silently used value.
//!
//! Short names are resolved before matching, so `set-namespace:v0.4.2` finds
//! the `""` prefix (Porch's exec store never matches an image without `/`).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{EnvFromSource, EnvVar, PodSecurityContext, ResourceRequirements};
use serde::{Deserialize, Serialize};

use super::exec_config::{BinaryCatalog, ExecBinary};
use super::image::{resolve_image, split_reference};
use super::pod_cache::PodCacheConfigEntry;
use super::pod_cache::config::PodSettingsSource;
use super::pod_cache::config::{check_pool, check_whole_numbers, parse_go_duration};
use super::pod_cache::template::{ContainerOverrides, TemplateOverrides};
use super::sandbox::{SandboxGrant, SandboxSpec};
use super::tag_selection::matches_config_tags;

/// The API group of `FunctionConfig` and `ServiceTemplate`.
pub const GROUP: &str = "config.porch.kpt.dev";
/// Their API version.
pub const VERSION: &str = "v1alpha1";
/// The kind.
pub const KIND: &str = "FunctionConfig";
/// The resource (plural) name.
pub const PLURAL: &str = "functionconfigs";
/// The finalizer the function runner puts on every `FunctionConfig` it has
/// applied and removes when the object is being deleted (Porch's name; the
/// Porch server and controller have their own).
pub const RUNNER_FINALIZER: &str = "config.porch.kpt.dev/functionconfig-function-runner";

/// `spec` of a `FunctionConfig` (the fields the runner reads; unknown
/// fields are ignored).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FunctionConfigSpec {
    /// The function's name (`set-namespace`), or a repository path ending in it.
    #[serde(default)]
    pub image: String,
    /// Repositories the function is served from; `""` means `--default-image-prefix`.
    #[serde(default)]
    pub prefixes: Vec<String>,
    /// Settings for the function's pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_executor: Option<PodExecutor>,
    /// The binary that serves some tags in the exec runtime.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub binary_executor: Option<BinaryExecutor>,
    /// Porch's builtin (in-process Go) runtime; not the runner's concern.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub go_executor: Option<serde_json::Value>,
}

impl FunctionConfigSpec {
    /// Decodes an object's `spec` as the API server returns it.
    ///
    /// Errors: a count of `spec.podExecutor` (`minReady`, `maxPods`,
    /// `maxParallelExecutions`, `preferredMaxQueueLength`) that is not a
    /// whole number is named with its value
    /// (`spec.podExecutor.minReady is "two", a string: write a whole number (such as 2)`);
    /// any other mismatch is `spec does not decode: <decoder's message>`.
    pub fn from_value(spec: serde_json::Value) -> Result<Self, String> {
        if let Some(pod) = spec.get("podExecutor") {
            check_whole_numbers(
                pod,
                &[
                    ("minReady", "spec.podExecutor.minReady"),
                    ("maxPods", "spec.podExecutor.maxPods"),
                    (
                        "maxParallelExecutions",
                        "spec.podExecutor.maxParallelExecutions",
                    ),
                    (
                        "preferredMaxQueueLength",
                        "spec.podExecutor.preferredMaxQueueLength",
                    ),
                ],
            )?;
        }
        serde_json::from_value(spec).map_err(|e| format!("spec does not decode: {e}"))
    }
}

/// `spec.podExecutor`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PodExecutor {
    /// Tags the settings apply to; empty means every tag.
    #[serde(default)]
    pub tags: Vec<String>,
    /// Idle time before a pod is reclaimed, a Go duration (`30m`, `1h0m0s`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_to_live: Option<String>,
    /// Most pods for the image (0: `--max-parallel-pods-per-function`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_parallel_executions: Option<i64>,
    /// Load on a pod before another is started (0: `--max-waitlist-length`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preferred_max_queue_length: Option<i64>,
    /// Warm pool minimum, an extension of ours: pods kept ready whatever
    /// their TTL ([`FunctionSettings::min_ready`](crate::domain::pod_cache::FunctionSettings::min_ready)).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_ready: Option<i64>,
    /// Warm pool maximum, an extension of ours: pods of the function across
    /// all runner replicas; replaces `maxParallelExecutions`
    /// ([`FunctionSettings::max_pods`](crate::domain::pod_cache::FunctionSettings::max_pods)).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_pods: Option<i64>,
    /// Changes to the pods built from the pod template.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub template_overrides: Option<TemplateOverridesSpec>,
}

/// `spec.podExecutor.templateOverrides`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TemplateOverridesSpec {
    /// Replaces the pod's service account when non-empty.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_account_name: Option<String>,
    /// Replaces the pod's security context.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub security_context: Option<PodSecurityContext>,
    /// For the `function` container.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container: Option<ContainerOverridesSpec>,
    /// For the init container that provides the wrapper server.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub init_container: Option<ContainerOverridesSpec>,
}

/// One container's overrides.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ContainerOverridesSpec {
    /// Requests and limits (each replaces the template's when set).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<ResourceRequirements>,
    /// Replaces the template's `envFrom`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub env_from: Option<Vec<EnvFromSource>>,
    /// Merged into the template's variables by name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub env: Option<Vec<EnvVar>>,
}

/// `spec.binaryExecutor`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BinaryExecutor {
    /// Tags (or `sha256:…` digests) the binary serves.
    #[serde(default)]
    pub tags: Vec<String>,
    /// Absolute, or relative to `--functions`.
    #[serde(default)]
    pub path: String,
    /// Sandbox layers the binary may do without and paths it may also
    /// read or write (an extension of ours).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<SandboxSpec>,
}

/// One `FunctionConfig` object as the store takes it.
#[derive(Debug, Clone, PartialEq)]
pub struct FunctionConfigObject {
    /// `metadata.name` (unique in the pod namespace).
    pub name: String,
    /// `metadata.generation`.
    pub generation: i64,
    /// `metadata.creationTimestamp` (RFC 3339, UTC); orders conflicting objects.
    pub created: String,
    /// The decoded `spec`, or why it could not be decoded.
    pub spec: Result<FunctionConfigSpec, String>,
}

/// What an object's `spec` configures, after validation.
#[derive(Debug, Clone, PartialEq)]
struct Rule {
    /// The function's name.
    function: String,
    /// Repositories, in the order given (the first one names warm-up images).
    repositories: Vec<String>,
    /// `binaryExecutor`: its tags (constraints, as written, duplicates
    /// dropped), its binary and the sandbox layers it may do without.
    binary: Option<(Vec<String>, PathBuf, SandboxGrant)>,
    pod: Option<PodRule>,
}

#[derive(Debug, Clone, PartialEq)]
struct PodRule {
    /// Empty: every tag.
    tags: Vec<String>,
    entry: PodCacheConfigEntry,
}

#[derive(Debug, Clone, PartialEq)]
struct Stored {
    object: FunctionConfigObject,
    rule: Result<Rule, String>,
    outcome: Result<(), String>,
}

/// The `FunctionConfig` objects of the pod namespace, and what they configure.
///
/// Pure and cheap to clone behind an `Arc`: the adapter that watches the
/// objects applies each change to a copy and publishes it; the exec
/// evaluator and the pod cache read the published snapshot.
#[derive(Debug, Clone, PartialEq)]
pub struct FunctionConfigStore {
    functions_dir: PathBuf,
    default_prefix: String,
    objects: BTreeMap<String, Stored>,
    /// `(repository, function)` → name of the object that configures it.
    owners: HashMap<(String, String), String>,
}

/// A function image split for matching.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Reference {
    repository: String,
    function: String,
    tag: Option<String>,
    digest: Option<String>,
}

impl Reference {
    /// Resolves `image` with kpt's short-name rule, then splits it; `None`
    /// when nothing is left to match (empty input or name).
    fn parse(image: &str, default_prefix: &str) -> Option<Self> {
        let resolved = resolve_image(image, default_prefix);
        let (name, tag, digest) = split_reference(&resolved);
        let (repository, function) = name.rsplit_once('/')?;
        (!function.is_empty() && !repository.is_empty()).then(|| Reference {
            repository: repository.to_string(),
            function: function.to_string(),
            tag: tag.map(str::to_string),
            digest: digest.map(str::to_string),
        })
    }

    /// Whether an executor's `tags` (constraints) admit this reference:
    /// its tag by [`matches_config_tags`], or its digest spelled in the list.
    fn admitted_by(&self, tags: &[String]) -> bool {
        self.tag
            .as_deref()
            .is_some_and(|t| matches_config_tags(t, tags))
            || self
                .digest
                .as_ref()
                .is_some_and(|d| tags.iter().any(|t| t == d))
    }

    /// This reference with the step's `tag` in place of its own tag and digest.
    fn with_tag(mut self, tag: &str) -> Self {
        self.tag = Some(tag.to_string());
        self.digest = None;
        self
    }
}

/// `prefix` as a repository: trailing `/` trimmed, `""` the default prefix.
fn repository_of(prefix: &str, default_prefix: &str) -> String {
    let p = prefix.trim_end_matches('/');
    if p.is_empty() {
        default_prefix.trim_end_matches('/').to_string()
    } else {
        p.to_string()
    }
}

fn push_unique(v: &mut Vec<String>, s: String) {
    if !v.contains(&s) {
        v.push(s);
    }
}

/// A count field: `None` and 0 mean "the global default"; negative is an error.
fn count(field: &str, v: Option<i64>, problems: &mut Vec<String>) -> Option<u32> {
    match v {
        None | Some(0) => None,
        Some(n) if n < 0 => {
            problems.push(format!(
                "spec.podExecutor.{field} is {n}: use a positive number, or 0 for the runner's default"
            ));
            None
        }
        Some(n) => Some(u32::try_from(n).unwrap_or(u32::MAX)),
    }
}

fn container_overrides(spec: Option<&ContainerOverridesSpec>) -> ContainerOverrides {
    spec.map(|c| ContainerOverrides {
        resources: c.resources.clone(),
        env: c.env.clone(),
        env_from: c.env_from.clone(),
    })
    .unwrap_or_default()
}

impl TemplateOverridesSpec {
    /// The pod-template overrides this spec describes (applied to the
    /// `function` container and the wrapper's init container by name).
    pub fn to_overrides(&self) -> TemplateOverrides {
        TemplateOverrides {
            service_account_name: self.service_account_name.clone().filter(|s| !s.is_empty()),
            security_context: self.security_context.clone(),
            container: container_overrides(self.container.as_ref()),
            init_container: container_overrides(self.init_container.as_ref()),
        }
    }
}

/// Validates `spec` of object `name` into a rule; the error lists every problem.
fn compile(
    name: &str,
    spec: &FunctionConfigSpec,
    functions_dir: &Path,
    default_prefix: &str,
) -> Result<Rule, String> {
    let mut problems = Vec::new();
    let image = spec.image.trim();
    let (own_repository, function) = match image.rsplit_once('/') {
        Some((repo, f)) => (Some(repo.trim_end_matches('/')), f),
        None => (None, image),
    };
    if function.is_empty() {
        problems.push("spec.image is empty: name the function, e.g. set-namespace".to_string());
    } else if function.contains(':') || function.contains('@') {
        problems.push(format!(
            "spec.image {image:?} has a tag or digest: name the function only and list tags in binaryExecutor.tags or podExecutor.tags"
        ));
    }
    let mut repositories = Vec::new();
    for p in &spec.prefixes {
        push_unique(&mut repositories, repository_of(p, default_prefix));
    }
    if let Some(repo) = own_repository.filter(|r| !r.is_empty()) {
        push_unique(&mut repositories, repo.to_string());
    }
    if repositories.is_empty() {
        repositories.push(repository_of("", default_prefix));
    }
    let binary = spec.binary_executor.as_ref().and_then(|b| {
        if b.path.trim().is_empty() {
            problems.push("spec.binaryExecutor.path is empty: name the binary, relative to --functions or absolute".into());
        }
        if b.tags.is_empty() {
            problems.push("spec.binaryExecutor.tags is empty: list the tags the binary serves".into());
        }
        let allow = match b.sandbox.as_ref().map(SandboxSpec::to_grant) {
            Some(Err(e)) => {
                problems.push(format!("spec.binaryExecutor.{e}"));
                SandboxGrant::default()
            }
            Some(Ok(grant)) => grant,
            None => SandboxGrant::default(),
        };
        (!b.path.trim().is_empty()).then(|| {
            (
                b.tags.iter().fold(Vec::new(), |mut v, t| {
                    push_unique(&mut v, t.clone());
                    v
                }),
                functions_dir.join(b.path.trim()),
                allow,
            )
        })
    });
    let pod = spec.pod_executor.as_ref().map(|p| {
        let ttl = match p.time_to_live.as_deref().map(str::trim) {
            None | Some("") => None,
            Some(s) => match parse_go_duration(s) {
                Some(d) if d.is_zero() => None,
                Some(d) => Some(d),
                None => {
                    problems.push(format!(
                        "spec.podExecutor.timeToLive {s:?} is not a duration such as 30m or 1h30m"
                    ));
                    None
                }
            },
        };
        let max_parallel_pods = count(
            "maxParallelExecutions",
            p.max_parallel_executions,
            &mut problems,
        );
        let max_waitlist = count(
            "preferredMaxQueueLength",
            p.preferred_max_queue_length,
            &mut problems,
        );
        let (min_ready, max_pods) = check_pool(
            p.min_ready,
            p.max_pods,
            max_parallel_pods.is_some(),
            [
                "spec.podExecutor.minReady",
                "spec.podExecutor.maxPods",
                "spec.podExecutor.maxParallelExecutions",
            ],
        )
        .unwrap_or_else(|problem| {
            problems.push(problem);
            (None, None)
        });
        PodRule {
            tags: p.tags.clone(),
            entry: PodCacheConfigEntry {
                min_ready,
                max_pods,
                name: String::new(),
                ttl,
                max_waitlist,
                max_parallel_pods,
                max_load_per_pod: None,
                resources: None,
                overrides: p
                    .template_overrides
                    .as_ref()
                    .map(|o| Arc::new(o.to_overrides())),
                source: Some(format!("FunctionConfig {name}")),
            },
        }
    });
    if problems.is_empty() {
        Ok(Rule {
            function: function.to_string(),
            repositories,
            binary,
            pod,
        })
    } else {
        Err(problems.join("; "))
    }
}

impl FunctionConfigStore {
    /// An empty store; relative binary paths resolve against
    /// `functions_dir` (`--functions`, made absolute by the caller) and
    /// `""` prefixes mean `default_prefix` (`--default-image-prefix`).
    pub fn new(functions_dir: &Path, default_prefix: &str) -> Self {
        Self {
            functions_dir: functions_dir.to_path_buf(),
            default_prefix: default_prefix.to_string(),
            objects: BTreeMap::new(),
            owners: HashMap::new(),
        }
    }

    /// Adds or replaces (by name) `object`; every object's outcome is
    /// recomputed (an object that lost a conflict may win now).
    pub fn apply(&mut self, object: FunctionConfigObject) {
        let rule = match &object.spec {
            Ok(spec) => compile(
                &object.name,
                spec,
                &self.functions_dir,
                &self.default_prefix,
            ),
            Err(e) => Err(e.clone()),
        };
        let outcome = rule.as_ref().map(|_| ()).map_err(Clone::clone);
        self.objects.insert(
            object.name.clone(),
            Stored {
                object,
                rule,
                outcome,
            },
        );
        self.resolve();
    }

    /// Removes object `name` and everything it configured; returns whether
    /// it was there.
    pub fn remove(&mut self, name: &str) -> bool {
        let found = self.objects.remove(name).is_some();
        if found {
            self.resolve();
        }
        found
    }

    /// Replaces every object with `objects` (a fresh listing).
    pub fn replace_all(&mut self, objects: impl IntoIterator<Item = FunctionConfigObject>) {
        self.objects.clear();
        self.owners.clear();
        for o in objects {
            self.apply(o);
        }
        self.resolve();
    }

    /// Decides conflicts: valid objects in (creation time, name) order each
    /// take their `(repository, function)` pairs, unless an earlier object
    /// holds one of them.
    fn resolve(&mut self) {
        self.owners.clear();
        let mut order: Vec<(&String, &String)> = self
            .objects
            .values()
            .filter(|s| s.rule.is_ok())
            .map(|s| (&s.object.created, &s.object.name))
            .collect();
        order.sort();
        let order: Vec<String> = order.into_iter().map(|(_, n)| n.clone()).collect();
        for name in order {
            let stored = self.objects.get_mut(&name).expect("listed above");
            let Ok(rule) = &stored.rule else { continue };
            let pairs: Vec<(String, String)> = rule
                .repositories
                .iter()
                .map(|r| (r.clone(), rule.function.clone()))
                .collect();
            let taken = pairs
                .iter()
                .find_map(|p| self.owners.get(p).map(|o| (p, o)));
            stored.outcome = match taken {
                Some(((repo, function), owner)) => Err(format!(
                    "FunctionConfig {owner} already configures {repo}/{function}; this one is ignored until that one is deleted or no longer names that image"
                )),
                None => {
                    for p in pairs {
                        self.owners.insert(p, name.clone());
                    }
                    Ok(())
                }
            };
        }
    }

    /// The rule of the object configuring `image`, with the parsed reference.
    fn rule_for(&self, image: &str) -> Option<(&Rule, Reference)> {
        let r = Reference::parse(image, &self.default_prefix)?;
        let owner = self
            .owners
            .get(&(r.repository.clone(), r.function.clone()))?;
        let rule = self.objects.get(owner)?.rule.as_ref().ok()?;
        Some((rule, r))
    }

    /// The binary that serves `image` in the exec runtime: the configuring
    /// object's `binaryExecutor.path` when its tags list the image's tag or
    /// digest. `None` otherwise (the exec runtime answers NotFound).
    pub fn binary_for(&self, image: &str) -> Option<PathBuf> {
        self.binary_entry(image).map(|b| b.path)
    }

    /// [`FunctionConfigStore::binary_for`] with the sandbox layers the
    /// object's `binaryExecutor.sandbox.allow` turns off.
    pub fn binary_entry(&self, image: &str) -> Option<ExecBinary> {
        let (rule, r) = self.rule_for(image)?;
        let (tags, path, allow) = rule.binary.as_ref()?;
        r.admitted_by(tags).then(|| ExecBinary {
            path: path.clone(),
            sandbox: allow.clone(),
        })
    }

    /// [`FunctionConfigStore::binary_entry`] for a request that carries a
    /// step's `tag`, which wins over the image's own tag or digest.
    ///
    /// Errors: the NotFound detail: no object configures the image, it has
    /// no `binaryExecutor`, or its tags do not admit `tag` (naming both).
    pub fn binary_entry_for_tag(&self, image: &str, tag: &str) -> Result<ExecBinary, String> {
        let Some((rule, r)) = self.rule_for(image) else {
            return Err(format!("no FunctionConfig configures {image:?}"));
        };
        let Some((tags, path, allow)) = rule.binary.as_ref() else {
            return Err(format!(
                "the FunctionConfig of {image:?} has no binaryExecutor"
            ));
        };
        if r.with_tag(tag).admitted_by(tags) {
            Ok(ExecBinary {
                path: path.clone(),
                sandbox: allow.clone(),
            })
        } else {
            Err(format!(
                "the tag {tag:?} satisfies none of the binaryExecutor.tags [{}] of the FunctionConfig of {image:?}",
                tags.join(", ")
            ))
        }
    }

    /// The pod settings for `image`: the configuring object's `podExecutor`
    /// when its tags list the image's tag (or are empty), as a pod-cache
    /// entry named `image`; `None` means the runner's global settings.
    pub fn pod_entry(&self, image: &str) -> Option<PodCacheConfigEntry> {
        let (rule, r) = self.rule_for(image)?;
        let pod = rule.pod.as_ref()?;
        (pod.tags.is_empty() || r.admitted_by(&pod.tags)).then(|| PodCacheConfigEntry {
            name: image.to_string(),
            ..pod.entry.clone()
        })
    }

    /// The images to start a pod for at start-up: for each applied object
    /// with `podExecutor.tags`, its first repository, name and first tag
    /// (Porch's choice), in object-name order.
    pub fn warm_up_images(&self) -> Vec<String> {
        self.applied_rules()
            .filter_map(|rule| {
                let tag = rule.pod.as_ref()?.tags.first()?;
                Some(format!("{}/{}:{tag}", rule.repositories[0], rule.function))
            })
            .collect()
    }

    fn applied_rules(&self) -> impl Iterator<Item = &Rule> + '_ {
        self.objects
            .values()
            .filter(|s| s.outcome.is_ok())
            .filter_map(|s| s.rule.as_ref().ok())
    }

    /// Every binary path applied objects name, sorted (for start-up checks).
    pub fn binaries(&self) -> Vec<PathBuf> {
        let set: BTreeSet<PathBuf> = self
            .applied_rules()
            .filter_map(|r| r.binary.as_ref().map(|(_, p, _)| p.clone()))
            .collect();
        set.into_iter().collect()
    }

    /// The shortest `timeToLive` applied objects set, if any.
    pub fn shortest_ttl(&self) -> Option<Duration> {
        self.applied_rules()
            .filter_map(|r| r.pod.as_ref()?.entry.ttl)
            .min()
    }

    /// Whether object `name` was applied (`Ok`) or why not (`Err`, the text
    /// for its `status.error`); `None` for an unknown name.
    pub fn outcome(&self, name: &str) -> Option<Result<(), String>> {
        self.objects.get(name).map(|s| s.outcome.clone())
    }

    /// The generation of object `name` as last applied.
    pub fn generation(&self, name: &str) -> Option<i64> {
        self.objects.get(name).map(|s| s.object.generation)
    }

    /// The names of every object, sorted.
    pub fn names(&self) -> impl Iterator<Item = &str> + '_ {
        self.objects.keys().map(String::as_str)
    }

    /// Number of objects (applied or not).
    pub fn len(&self) -> usize {
        self.objects.len()
    }

    /// True when the store holds no object.
    pub fn is_empty(&self) -> bool {
        self.objects.is_empty()
    }
}

/// Gen C: the exec runtime finds a function's binary in the FunctionConfig
/// objects' `binaryExecutor` ([`binary_entry`](FunctionConfigStore::binary_entry)).
impl BinaryCatalog for FunctionConfigStore {
    fn binary_for(&self, image: &str) -> Option<ExecBinary> {
        self.binary_entry(image)
    }
    fn binary_for_tag(&self, image: &str, tag: &str) -> Result<ExecBinary, String> {
        self.binary_entry_for_tag(image, tag)
    }
    fn binaries(&self) -> Vec<PathBuf> {
        FunctionConfigStore::binaries(self)
    }
    fn len(&self) -> usize {
        FunctionConfigStore::len(self)
    }
    fn origin(&self) -> &'static str {
        "the FunctionConfig's binaryExecutor.path"
    }
}

/// Gen C: the FunctionConfig objects give the pod cache its per-function
/// settings ([`pod_entry`](FunctionConfigStore::pod_entry)), warm pools for
/// their warm-up images, and their shortest `timeToLive`.
impl PodSettingsSource for FunctionConfigStore {
    fn entry(&self, image: &str) -> Option<PodCacheConfigEntry> {
        self.pod_entry(image)
    }

    fn pool_images(&self) -> Vec<String> {
        self.warm_up_images()
    }

    fn shortest_ttl(&self) -> Option<Duration> {
        FunctionConfigStore::shortest_ttl(self)
    }
}

#[cfg(test)]
mod tests;
