//! Per-function pod-cache settings, the global defaults, and Porch's
//! `pod-cache-config.yaml` list format (Gen B, `--pod-cache-config`).
//!
//! ```yaml
//! - name: ghcr.io/kptdev/krm-functions-catalog/set-namespace:v0.4.5
//!   timeToLive: 30m                 # Go duration string
//!   maxWaitlistLength: 2
//!   maxParallelPodsPerFunction: 2
//!   resources: {requests: {cpu: 100m}}   # core/v1 ResourceRequirements
//!   maxLoadPerPod: 32               # extension: bound on queueing (spec §10 item 33)
//!   minReady: 2                     # extension: warm pool, pods kept whatever the TTL
//!   maxPods: 4                      # extension: pods of the function across all replicas
//! ```
//! Entries are keyed by the exact image string (Porch Gen B). As in Porch, an
//! unparsable or zero `timeToLive` and zero integers fall back to the global
//! defaults; unlike Porch, negative integers also fall back (with a warning)
//! instead of being used as is. The same list is the warm-up list.
//!
//! Unknown keys in an entry are warnings naming the line and the valid keys,
//! not errors: Porch reads the file with `sigs.k8s.io/yaml`, which ignores
//! them (and matches keys without regard to letter case, so `TimeToLive`
//! works there; here it is reported as unknown, with the right spelling).

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::ResourceRequirements;
use serde::Deserialize;

use super::template::TemplateOverrides;
use crate::domain::codec;
use crate::domain::codec::keys::{Shape, ignored_key_warnings};

/// The keys of one pod-cache config entry (Porch's `podCacheConfigEntry`
/// plus `maxLoadPerPod`).
pub const ENTRY_FORMAT: Shape = Shape::Map(&[
    ("name", Shape::Any),
    ("timeToLive", Shape::Any),
    ("maxWaitlistLength", Shape::Any),
    ("maxParallelPodsPerFunction", Shape::Any),
    ("resources", Shape::Any),
    ("maxLoadPerPod", Shape::Any),
    ("minReady", Shape::Any),
    ("maxPods", Shape::Any),
]);

/// The keys of an entry that hold whole numbers, for [`check_whole_numbers`].
const ENTRY_COUNTS: [(&str, &str); 5] = [
    ("maxWaitlistLength", "maxWaitlistLength"),
    ("maxParallelPodsPerFunction", "maxParallelPodsPerFunction"),
    ("maxLoadPerPod", "maxLoadPerPod"),
    ("minReady", "minReady"),
    ("maxPods", "maxPods"),
];

/// The pod-cache parameters of one function image.
#[derive(Debug, Clone, PartialEq)]
pub struct FunctionSettings {
    /// How long a pod may stay idle before it is reclaimed (Porch `--pod-ttl`,
    /// `timeToLive`; default 30 min). It is persisted as the pod's
    /// reclaim-after annotation.
    pub ttl: Duration,
    /// Load (requests assigned and not finished, queued or running) a pod may
    /// carry before another pod is started (Porch `--max-waitlist-length`,
    /// `maxWaitlistLength`; default 2, 0 is read as 1).
    pub max_waitlist: u32,
    /// Maximum number of pods for the image (Porch
    /// `--max-parallel-pods-per-function`, `maxParallelPodsPerFunction`;
    /// default 1, 0 is read as 1).
    pub max_parallel_pods: u32,
    /// Load beyond which a pod takes no more requests once the image has all
    /// the pods it may have; further requests are rejected with
    /// [`PodCacheError::Exhausted`](super::PodCacheError::Exhausted)
    /// (RESOURCE_EXHAUSTED). Porch queues without bound (spec §10 item 33).
    /// Default 64; never less than `max_waitlist`.
    pub max_load_per_pod: u32,
    /// Resource requests/limits for the `function` container, if configured.
    pub resources: Option<ResourceRequirements>,
    /// Pod-template overrides (FunctionConfig `podExecutor.templateOverrides`).
    pub overrides: Option<Arc<TemplateOverrides>>,
    /// What configured these settings, e.g. `FunctionConfig set-namespace`;
    /// `None` for the global defaults.
    pub source: Option<String>,
    /// Warm pool minimum (`minReady`, extension; kptdev/porch#956): this
    /// many pods of the function are kept ready whatever their TTL, and
    /// restored after failures and deletions. `None` (the default) keeps
    /// Porch's behaviour: no minimum, one pod at warm-up.
    pub min_ready: Option<u32>,
    /// Warm pool maximum (`maxPods`, extension): pods of the function across
    /// all runner replicas. Setting it (or [`min_ready`](Self::min_ready))
    /// makes the function's pods a pool ([`pool`](Self::pool)); it then
    /// replaces [`max_parallel_pods`](Self::max_parallel_pods), which
    /// otherwise bounds the pods of one replica.
    pub max_pods: Option<u32>,
}

/// A function's warm pool: its pods are named `0..max` from a name set all
/// replicas share ([`naming::pool_pod_name`](super::naming::pool_pod_name)),
/// and the first `min` of them are kept ready.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pool {
    /// Pods kept ready (`minReady`), at most `max`.
    pub min: u32,
    /// Pods at most, across all replicas (`maxPods`), at least 1.
    pub max: u32,
}

impl Default for FunctionSettings {
    /// Porch's flag defaults: TTL 30 min, max waitlist 2, one pod per
    /// function; at most 64 requests per pod; no resources.
    fn default() -> Self {
        Self {
            ttl: Duration::from_secs(30 * 60),
            max_waitlist: 2,
            max_parallel_pods: 1,
            max_load_per_pod: 64,
            resources: None,
            overrides: None,
            source: None,
            min_ready: None,
            max_pods: None,
        }
    }
}

impl FunctionSettings {
    /// The function's warm pool, if `minReady` or `maxPods` is set: `max`
    /// is `maxPods`, or without it the larger of `minReady` and the
    /// per-replica pod limit; `min` is `minReady` (0 without it), at most
    /// `max`.
    pub fn pool(&self) -> Option<Pool> {
        if self.min_ready.is_none() && self.max_pods.is_none() {
            return None;
        }
        let min = self.min_ready.unwrap_or(0);
        let max = self
            .max_pods
            .unwrap_or_else(|| self.max_parallel_pods.max(min))
            .max(1);
        Some(Pool {
            min: min.min(max),
            max,
        })
    }

    /// The global settings from the runner's flags, read the way Porch
    /// reads them: `--pod-ttl` (zero means the default 30 min),
    /// `--max-waitlist-length` and `--max-parallel-pods-per-function`
    /// (zero or negative mean the defaults 2 and 1), and
    /// `--max-load-per-pod`. The one reading of these flags, shared by
    /// `serve` and the policy simulator, so that `maxWaitlistLength: 0`
    /// means the same in both.
    pub fn from_flags(
        ttl: Duration,
        max_waitlist_length: i64,
        max_parallel_pods: i64,
        max_load_per_pod: u32,
    ) -> Self {
        let d = Self::default();
        let positive = |v: i64, default: u32| {
            if v <= 0 {
                default
            } else {
                u32::try_from(v).unwrap_or(u32::MAX)
            }
        };
        Self {
            ttl: if ttl.is_zero() { d.ttl } else { ttl },
            max_waitlist: positive(max_waitlist_length, d.max_waitlist),
            max_parallel_pods: positive(max_parallel_pods, d.max_parallel_pods),
            max_load_per_pod,
            ..d
        }
        .normalised()
    }

    /// Clamps the values to what the state machine needs: TTL at least one
    /// second, every limit at least 1, and `max_load_per_pod >= max_waitlist`.
    pub fn normalised(mut self) -> Self {
        self.ttl = self.ttl.max(Duration::from_secs(1));
        self.max_waitlist = self.max_waitlist.max(1);
        self.max_parallel_pods = self.max_parallel_pods.max(1);
        self.max_load_per_pod = self.max_load_per_pod.max(self.max_waitlist);
        if let Some(pool) = self.pool() {
            // A pool's bound is the function's pod limit on every replica.
            self.max_parallel_pods = pool.max;
            self.max_pods = Some(pool.max);
            self.min_ready = self.min_ready.map(|_| pool.min);
        }
        self
    }

    /// Whether pods built with `self` and with `other` are the same: same
    /// resources, overrides and source. TTL and limits do not shape a pod;
    /// a change of these applies to existing pods, a change of the others
    /// replaces them.
    pub fn same_pod(&self, other: &Self) -> bool {
        self.resources == other.resources
            && self.overrides == other.overrides
            && self.source == other.source
    }

    /// A short stable digest of what shapes the pod (resources, overrides,
    /// source), recorded on pods as
    /// [`SETTINGS_VERSION_ANNOTATION`](super::SETTINGS_VERSION_ANNOTATION):
    /// 16 hex digits of a 64-bit FNV-1a hash of their JSON form; `None` when
    /// none of them is set (the global settings).
    pub fn pod_version(&self) -> Option<String> {
        if self.resources.is_none() && self.overrides.is_none() && self.source.is_none() {
            return None;
        }
        let container = |c: &super::template::ContainerOverrides| serde_json::json!({"resources": c.resources, "env": c.env, "envFrom": c.env_from});
        let overrides = self.overrides.as_ref().map(|o| {
            serde_json::json!({
                "serviceAccountName": o.service_account_name,
                "securityContext": o.security_context,
                "container": container(&o.container),
                "initContainer": container(&o.init_container),
            })
        });
        let text = serde_json::json!({
            "source": self.source,
            "resources": self.resources,
            "overrides": overrides,
        })
        .to_string();
        let hash = text.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
        });
        Some(format!("{hash:016x}"))
    }
}

/// One entry of the pod-cache config list, after validation: `None` means
/// "use the global default".
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PodCacheConfigEntry {
    /// The full image string the entry applies to (exact match).
    pub name: String,
    /// `timeToLive`.
    pub ttl: Option<Duration>,
    /// `maxWaitlistLength`.
    pub max_waitlist: Option<u32>,
    /// `maxParallelPodsPerFunction`.
    pub max_parallel_pods: Option<u32>,
    /// `maxLoadPerPod` (extension).
    pub max_load_per_pod: Option<u32>,
    /// `resources`.
    pub resources: Option<ResourceRequirements>,
    /// Pod-template overrides (FunctionConfig generation).
    pub overrides: Option<Arc<TemplateOverrides>>,
    /// What configured the entry (FunctionConfig generation), e.g.
    /// `FunctionConfig set-namespace`.
    pub source: Option<String>,
    /// `minReady` (extension): see [`FunctionSettings::min_ready`].
    pub min_ready: Option<u32>,
    /// `maxPods` (extension): see [`FunctionSettings::max_pods`].
    pub max_pods: Option<u32>,
}

/// Checks a warm pool's `minReady` and `maxPods` as written (`names` are
/// the two keys and the per-replica limit's key, as the format spells
/// them); returns them as counts or says what is wrong and what to write.
/// Rules: both are whole numbers, `minReady >= 0`, `maxPods >= 1`,
/// `minReady <= maxPods`, and `maxPods` replaces the per-replica limit, so
/// the two are not set together.
pub fn check_pool(
    min_ready: Option<i64>,
    max_pods: Option<i64>,
    per_replica_limit_set: bool,
    names: [&str; 3],
) -> Result<(Option<u32>, Option<u32>), String> {
    let [min_key, max_key, limit_key] = names;
    // A count of at least `least`, or what to write instead.
    let count = |v: Option<i64>, least: i64, key: &str, what: &str| match v {
        Some(n) if n < least => Err(format!("{key} is {n}: use {least} or more {what}")),
        v => Ok(v.map(|n| u32::try_from(n).unwrap_or(u32::MAX))),
    };
    let min = count(min_ready, 0, min_key, "(pods to keep ready)")?;
    let max = count(
        max_pods,
        1,
        max_key,
        "(the most pods of the function across all replicas)",
    )?;
    if max.is_some() && per_replica_limit_set {
        return Err(format!(
            "{max_key} and {limit_key} are both set: {max_key} replaces {limit_key} for a warm pool; keep one"
        ));
    }
    if let (Some(min), Some(max)) = (min, max)
        && min > max
    {
        return Err(format!(
            "{min_key} {min} is more than {max_key} {max}: raise {max_key} or lower {min_key}"
        ));
    }
    Ok((min, max))
}

/// Checks that each of `keys` present in `object` is a whole number, so a
/// count written as text, a fraction or a list is refused with its key
/// rather than with the decoder's "invalid type" at a line and column.
/// `keys` pairs the key in `object` with the name to show (e.g.
/// `("minReady", "spec.podExecutor.minReady")`); absent and `null` keys
/// pass.
///
/// Errors: `<name> is <value>, <what it is>: write a whole number (such as 2)`.
pub fn check_whole_numbers(
    object: &serde_json::Value,
    keys: &[(&str, &str)],
) -> Result<(), String> {
    use serde_json::Value;
    for (key, name) in keys {
        let what = match object.get(key) {
            None | Some(Value::Null) => continue,
            Some(Value::Number(n)) if n.is_i64() => continue,
            Some(Value::Number(n)) if n.is_u64() => "too large",
            Some(Value::Number(_)) => "not a whole number",
            Some(Value::String(_)) => "a string",
            Some(Value::Bool(_)) => "a boolean",
            Some(Value::Array(_)) => "a list",
            Some(Value::Object(_)) => "a mapping",
        };
        return Err(format!(
            "{name} is {}, {what}: write a whole number (such as 2)",
            object[key]
        ));
    }
    Ok(())
}

/// The parsed pod-cache config file: entries in file order plus warnings
/// about values that were ignored.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PodCacheConfig {
    /// The entries; when a name appears twice the later entry wins (as Porch's
    /// map assignment does) and a warning says so.
    pub entries: Vec<PodCacheConfigEntry>,
    /// One line per ignored value, for the log.
    pub warnings: Vec<String>,
}

/// Why a pod-cache configuration or policy cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PolicyError {
    /// The config file is not the expected YAML list.
    #[error("failed to parse pod cache config {path:?}: {message}")]
    Parse {
        /// The file, as named on the command line.
        path: String,
        /// What is wrong.
        message: String,
    },
    /// The replica token cannot be part of a pod name.
    #[error(
        "invalid replica token {token:?}: use 1 to 8 lower-case letters or digits, unique among the runner replicas"
    )]
    InvalidReplicaToken {
        /// The token given.
        token: String,
    },
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawEntry {
    name: String,
    #[serde(default)]
    time_to_live: Option<String>,
    #[serde(default)]
    max_waitlist_length: Option<i64>,
    #[serde(default)]
    max_parallel_pods_per_function: Option<i64>,
    #[serde(default)]
    max_load_per_pod: Option<i64>,
    #[serde(default)]
    resources: Option<ResourceRequirements>,
    #[serde(default)]
    min_ready: Option<i64>,
    #[serde(default)]
    max_pods: Option<i64>,
}

impl PodCacheConfig {
    /// Parses the YAML text of a pod-cache config list; `path` is used in errors.
    ///
    /// Errors: not YAML, not a list of entries, an entry without `name`, or
    /// a warm pool that cannot be kept (`minReady`/`maxPods`, see
    /// [`check_pool`]). An empty file or `[]` is an empty config. Bad
    /// values of Porch's keys inside an entry are warnings, not errors
    /// (Porch falls back to the globals for them).
    pub fn parse(text: &[u8], path: &str) -> Result<Self, PolicyError> {
        let err = |message: String| PolicyError::Parse {
            path: path.to_string(),
            message,
        };
        let raw: Vec<RawEntry> = if text.iter().all(u8::is_ascii_whitespace) {
            Vec::new()
        } else {
            let value: serde_json::Value =
                codec::from_yaml_slice(text).map_err(|e| err(e.to_string()))?;
            for (i, entry) in value.as_array().into_iter().flatten().enumerate() {
                check_whole_numbers(entry, &ENTRY_COUNTS).map_err(|m| {
                    let name = entry.get("name").and_then(|n| n.as_str()).unwrap_or("");
                    err(format!("entry {i} ({name}): {m}"))
                })?;
            }
            codec::from_yaml_slice::<Option<Vec<RawEntry>>>(text)
                .map_err(|e| err(e.to_string()))?
                .unwrap_or_default()
        };
        let mut cfg = PodCacheConfig {
            warnings: ignored_key_warnings(text, &Shape::Seq(&ENTRY_FORMAT), path)
                .map_err(|e| err(e.to_string()))?,
            ..PodCacheConfig::default()
        };
        for (i, r) in raw.into_iter().enumerate() {
            if r.name.trim().is_empty() {
                return Err(err(format!(
                    "entry {i} has an empty name: set it to the full image string"
                )));
            }
            let mut warn = |w: String| cfg.warnings.push(format!("{}: {w}", r.name));
            let ttl = match r.time_to_live.as_deref() {
                None => None,
                Some(s) => match parse_go_duration(s) {
                    Some(d) if !d.is_zero() => Some(d),
                    Some(_) => None,
                    None => {
                        warn(format!(
                            "timeToLive {s:?} is not a duration such as 30m or 1h30m; using the default"
                        ));
                        None
                    }
                },
            };
            let mut int = |field: &str, v: Option<i64>| match v {
                None | Some(0) => None,
                Some(n) if n < 0 => {
                    warn(format!("{field} {n} is negative; using the default"));
                    None
                }
                Some(n) => Some(u32::try_from(n).unwrap_or(u32::MAX)),
            };
            let (min_ready, max_pods) = check_pool(
                r.min_ready,
                r.max_pods,
                r.max_parallel_pods_per_function.is_some_and(|n| n > 0),
                ["minReady", "maxPods", "maxParallelPodsPerFunction"],
            )
            .map_err(|m| err(format!("entry {i} ({}): {m}", r.name)))?;
            let entry = PodCacheConfigEntry {
                min_ready,
                max_pods,
                ttl,
                max_waitlist: int("maxWaitlistLength", r.max_waitlist_length),
                max_parallel_pods: int(
                    "maxParallelPodsPerFunction",
                    r.max_parallel_pods_per_function,
                ),
                max_load_per_pod: int("maxLoadPerPod", r.max_load_per_pod),
                resources: r.resources,
                overrides: None,
                source: None,
                name: r.name,
            };
            if let Some(prev) = cfg.entries.iter().position(|e| e.name == entry.name) {
                cfg.warnings.push(format!(
                    "{}: listed twice; the later entry wins",
                    entry.name
                ));
                cfg.entries.remove(prev);
            }
            cfg.entries.push(entry);
        }
        Ok(cfg)
    }

    /// The warm-up list: every entry's image, in file order (Porch Gen B
    /// warms every listed function).
    pub fn warm_up_images(&self) -> Vec<String> {
        self.entries.iter().map(|e| e.name.clone()).collect()
    }
}

/// Parses a Go `time.ParseDuration` string: an optional sign and a sequence
/// of decimal numbers with units `ns`, `us`/`µs`, `ms`, `s`, `m`, `h`
/// (`30m`, `1h30m`, `1.5h`, `300ms`; `0` alone). Negative values are `None`.
pub fn parse_go_duration(s: &str) -> Option<Duration> {
    let s = s.strip_prefix('+').unwrap_or(s);
    if s == "0" {
        return Some(Duration::ZERO);
    }
    if s.is_empty() || s.starts_with('-') {
        return None;
    }
    let mut rest = s;
    let mut total = 0f64;
    while !rest.is_empty() {
        let num_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let number: f64 = rest[..num_len].parse().ok()?;
        rest = &rest[num_len..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let nanos_per_unit = match &rest[..unit_len] {
            "ns" => 1.0,
            "us" | "µs" | "μs" => 1e3,
            "ms" => 1e6,
            "s" => 1e9,
            "m" => 60e9,
            "h" => 3600e9,
            _ => return None,
        };
        rest = &rest[unit_len..];
        total += number * nanos_per_unit;
    }
    (total.is_finite() && total < u64::MAX as f64)
        .then(|| Duration::from_nanos(total.round() as u64))
}

/// Where the pod cache's per-function settings come from, beside the
/// global defaults: in the config.yaml generation the `--pod-cache-config`
/// entries keyed by the exact image string (Porch Gen B; the
/// implementation for `HashMap<String, PodCacheConfigEntry>`), in the
/// FunctionConfig generation the FunctionConfig objects, matched by
/// repository, name and tag (Porch Gen C `getParamsForImage`; the
/// implementation for
/// [`FunctionConfigStore`](crate::domain::function_config::FunctionConfigStore)).
/// [`PodCachePolicy`] asks only this trait, so the pod cache does not
/// depend on either configuration format.
pub trait PodSettingsSource: fmt::Debug + Send + Sync {
    /// The entry configuring `image` (a full image reference, as the pod
    /// cache keys functions): its values replace the defaults where set.
    /// `None`: the image takes the defaults.
    fn entry(&self, image: &str) -> Option<PodCacheConfigEntry>;

    /// The images this source may give a warm pool minimum (`minReady`):
    /// every entry's image in Gen B, the warm-up images in Gen C. GC keeps
    /// the minimum of those whose settings set one.
    fn pool_images(&self) -> Vec<String>;

    /// The shortest `timeToLive` of the entries, if any sets one.
    fn shortest_ttl(&self) -> Option<Duration>;
}

/// Gen B: `--pod-cache-config` entries by the exact image string.
impl PodSettingsSource for HashMap<String, PodCacheConfigEntry> {
    fn entry(&self, image: &str) -> Option<PodCacheConfigEntry> {
        self.get(image).cloned()
    }

    fn pool_images(&self) -> Vec<String> {
        self.keys().cloned().collect()
    }

    fn shortest_ttl(&self) -> Option<Duration> {
        self.values().filter_map(|e| e.ttl).min()
    }
}

/// The pod cache's policy: global defaults, where per-function settings
/// come from, and the knobs Porch hard-codes.
#[derive(Debug, Clone)]
pub struct PodCachePolicy {
    /// Settings for images without an entry (Porch's global flags).
    pub defaults: FunctionSettings,
    /// Where per-function entries come from ([`PodSettingsSource`]): the
    /// `--pod-cache-config` entries ([`with_config`](Self::with_config)),
    /// the FunctionConfig objects
    /// ([`with_settings_source`](Self::with_settings_source)), or none (an
    /// empty map: the defaults for every image).
    pub settings_source: Arc<dyn PodSettingsSource>,
    /// How long a pending slot waits for its pod before the creation counts
    /// as failed (Porch: `podReadyTimeout`, fixed 60 s — spec §10 item 28).
    pub pod_ready_timeout: Duration,
    /// Short token naming this runner replica inside pod names, so that two
    /// replicas never pick the same pod name (1–8 of `[a-z0-9]`). It should
    /// also differ between two starts of the same replica (the default one
    /// does); when it does not, a name already taken is skipped (see
    /// [`instance`](Self::instance)).
    pub replica_token: String,
    /// Identifies this process start (any string, unique per start); every
    /// pod it creates records `<instance>-<slot>` in
    /// [`CREATION_ANNOTATION`](super::CREATION_ANNOTATION), so that an
    /// AlreadyExists answer is taken as this creation's own earlier attempt
    /// only when the existing pod carries exactly that value — never a pod
    /// of another replica or an earlier run.
    pub instance: String,
    /// Garbage-collection period (Porch `--scan-interval`, default 1 min):
    /// the machine asks for a listing of the pods and services this often;
    /// zero disables GC.
    pub scan_interval: Duration,
    /// Whether a ready pod also needs its service to publish it as a ready
    /// endpoint before it takes calls (service address mode): the machine
    /// then emits [`Command::AwaitEndpoint`](super::Command::AwaitEndpoint).
    pub await_endpoints: bool,
    /// Whether, without [`await_endpoints`](Self::await_endpoints), a
    /// starting pod is taken as ready as soon as its wrapper server answers
    /// a gRPC health check at the pod's IP, instead of only when the
    /// kubelet's readiness probe reports it (Porch waits for `Ready`, which
    /// the probe's period, 10 s in Porch's template, can delay by that much
    /// when its first try comes before the server listens). The machine
    /// then emits [`Command::ProbeWrapper`](super::Command::ProbeWrapper)
    /// once the pod has an IP.
    pub probe_wrapper: bool,
    /// First delay before a failed reclaim-after patch or pod deletion is
    /// retried; it doubles per failure up to
    /// [`retry_backoff_max`](Self::retry_backoff_max).
    pub retry_backoff: Duration,
    /// Longest delay between retries.
    pub retry_backoff_max: Duration,
}

/// Two policies are equal when every field is, the settings source being
/// the same one (shared, as a clone shares it): a source is configuration
/// read once and never compared by content.
impl PartialEq for PodCachePolicy {
    fn eq(&self, other: &Self) -> bool {
        let Self {
            defaults,
            settings_source,
            pod_ready_timeout,
            replica_token,
            instance,
            scan_interval,
            await_endpoints,
            probe_wrapper,
            retry_backoff,
            retry_backoff_max,
        } = self;
        *defaults == other.defaults
            && Arc::ptr_eq(settings_source, &other.settings_source)
            && *pod_ready_timeout == other.pod_ready_timeout
            && *replica_token == other.replica_token
            && *instance == other.instance
            && *scan_interval == other.scan_interval
            && *await_endpoints == other.await_endpoints
            && *probe_wrapper == other.probe_wrapper
            && *retry_backoff == other.retry_backoff
            && *retry_backoff_max == other.retry_backoff_max
    }
}

impl PodCachePolicy {
    /// A policy with `defaults` for every image, a 60 s pod-ready timeout and
    /// the given replica token.
    ///
    /// Errors: [`PolicyError::InvalidReplicaToken`] unless the token is 1–8
    /// lower-case ASCII letters or digits.
    pub fn new(defaults: FunctionSettings, replica_token: &str) -> Result<Self, PolicyError> {
        let ok = (1..=8).contains(&replica_token.len())
            && replica_token
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit());
        if !ok {
            return Err(PolicyError::InvalidReplicaToken {
                token: replica_token.to_string(),
            });
        }
        Ok(Self {
            defaults: defaults.normalised(),
            settings_source: Arc::new(HashMap::<String, PodCacheConfigEntry>::new()),
            pod_ready_timeout: Duration::from_secs(60),
            replica_token: replica_token.to_string(),
            instance: replica_token.to_string(),
            scan_interval: Duration::from_secs(60),
            await_endpoints: false,
            probe_wrapper: false,
            retry_backoff: Duration::from_secs(1),
            retry_backoff_max: Duration::from_secs(30),
        })
    }

    /// Takes the per-function part (defaults and the settings source) of
    /// `other`; everything that belongs to the process (replica token,
    /// instance, timeouts, GC period, retries) is kept.
    pub fn set_settings_from(&mut self, other: PodCachePolicy) {
        self.defaults = other.defaults;
        self.settings_source = other.settings_source;
    }

    /// The delay before retry number `attempt` (1-based) of a failed
    /// platform write: [`retry_backoff`](Self::retry_backoff) doubled per
    /// earlier failure, at most [`retry_backoff_max`](Self::retry_backoff_max).
    pub fn backoff(&self, attempt: u32) -> Duration {
        let factor = 1u32 << attempt.saturating_sub(1).min(16);
        (self.retry_backoff * factor).min(self.retry_backoff_max.max(self.retry_backoff))
    }

    /// Takes per-function settings from the entries of `config` (the
    /// config.yaml generation, `--pod-cache-config`: by the exact image
    /// string; a name listed twice is the later entry) from now on.
    pub fn with_config(self, config: &PodCacheConfig) -> Self {
        let entries: HashMap<String, PodCacheConfigEntry> = config
            .entries
            .iter()
            .map(|e| (e.name.clone(), e.clone()))
            .collect();
        self.with_settings_source(Arc::new(entries))
    }

    /// Takes per-function settings from `source` from now on (the
    /// FunctionConfig generation passes its
    /// [`FunctionConfigStore`](crate::domain::function_config::FunctionConfigStore)).
    pub fn with_settings_source(mut self, source: Arc<dyn PodSettingsSource>) -> Self {
        self.settings_source = source;
        self
    }

    /// The settings for `image`: the values of its entry in the
    /// [settings source](Self::settings_source) where set, the globals
    /// elsewhere, normalised.
    pub fn settings_for(&self, image: &str) -> FunctionSettings {
        let d = &self.defaults;
        match self.settings_source.entry(image) {
            None => d.clone(),
            Some(e) => FunctionSettings {
                ttl: e.ttl.unwrap_or(d.ttl),
                max_waitlist: e.max_waitlist.unwrap_or(d.max_waitlist),
                max_parallel_pods: e.max_parallel_pods.unwrap_or(d.max_parallel_pods),
                max_load_per_pod: e.max_load_per_pod.unwrap_or(d.max_load_per_pod),
                resources: e.resources.or_else(|| d.resources.clone()),
                overrides: e.overrides.or_else(|| d.overrides.clone()),
                source: e.source.or_else(|| d.source.clone()),
                min_ready: e.min_ready.or(d.min_ready),
                max_pods: e.max_pods.or(d.max_pods),
            }
            .normalised(),
        }
    }

    /// The images whose settings keep a warm pool minimum (`minReady` above
    /// 0), among the source's [pool images](PodSettingsSource::pool_images):
    /// the `--pod-cache-config` entries, or in the FunctionConfig
    /// generation the images it warms up (an object's first repository,
    /// name and tag). GC keeps their minimum from the first listing on,
    /// whether or not they were warmed up or called.
    pub fn min_ready_images(&self) -> Vec<String> {
        self.settings_source
            .pool_images()
            .into_iter()
            .filter(|image| self.settings_for(image).min_ready.is_some_and(|m| m > 0))
            .collect()
    }

    /// The shortest TTL any function may have: the default's, and every
    /// per-function entry's. The driver ticks at least every half of it.
    pub fn shortest_ttl(&self) -> Duration {
        std::iter::once(self.defaults.ttl)
            .chain(self.settings_source.shortest_ttl())
            .min()
            .unwrap_or(self.defaults.ttl)
            .max(Duration::from_secs(1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy() -> PodCachePolicy {
        PodCachePolicy::new(FunctionSettings::default(), "r1").unwrap()
    }

    #[test]
    fn go_durations() {
        let d = |s| parse_go_duration(s);
        assert_eq!(d("30m"), Some(Duration::from_secs(1800)));
        assert_eq!(d("1h30m"), Some(Duration::from_secs(5400)));
        assert_eq!(d("1.5h"), Some(Duration::from_secs(5400)));
        assert_eq!(d("300ms"), Some(Duration::from_millis(300)));
        assert_eq!(d("0"), Some(Duration::ZERO));
        for bad in ["", "10", "abc", "-5m", "5 m", "5d"] {
            assert_eq!(d(bad), None, "{bad:?}");
        }
    }

    // Porch TestLoadPodCacheConfig: list keyed by name; `[]` is empty; invalid YAML is an error.
    #[test]
    fn parses_the_list_format() {
        let text = b"- name: ghcr.io/kptdev/krm-functions-catalog/set-namespace:v0.4.5\n  timeToLive: 10m\n  maxWaitlistLength: 3\n  maxParallelPodsPerFunction: 4\n  resources:\n    requests:\n      cpu: 100m\n      memory: 64Mi\n    limits:\n      cpu: 1\n- name: b:v1\n";
        let cfg = PodCacheConfig::parse(text, "f.yaml").unwrap();
        assert!(cfg.warnings.is_empty(), "{:?}", cfg.warnings);
        assert_eq!(cfg.entries.len(), 2);
        let e = &cfg.entries[0];
        assert_eq!(e.ttl, Some(Duration::from_secs(600)));
        assert_eq!((e.max_waitlist, e.max_parallel_pods), (Some(3), Some(4)));
        let res = e.resources.as_ref().unwrap();
        assert_eq!(res.requests.as_ref().unwrap()["memory"].0, "64Mi");
        assert_eq!(res.limits.as_ref().unwrap()["cpu"].0, "1");
        assert_eq!(
            cfg.warm_up_images(),
            vec![e.name.clone(), "b:v1".to_string()]
        );
        assert!(
            PodCacheConfig::parse(b"[]", "f")
                .unwrap()
                .entries
                .is_empty()
        );
        assert!(PodCacheConfig::parse(b"", "f").unwrap().entries.is_empty());
        let err = PodCacheConfig::parse(b"- name: [x\n", "f.yaml").unwrap_err();
        assert!(err.to_string().contains("f.yaml"), "{err}");
        assert!(PodCacheConfig::parse(b"name: x\n", "f").is_err());
    }

    // Porch TestGetParamsForImage: full override; zero ints and zero or unparsable TTL fall back; unknown image uses the globals.
    #[test]
    fn settings_fall_back_to_the_globals() {
        let text = b"- name: full\n  timeToLive: 1m\n  maxWaitlistLength: 5\n  maxParallelPodsPerFunction: 3\n- name: zeros\n  timeToLive: 0s\n  maxWaitlistLength: 0\n  maxParallelPodsPerFunction: 0\n- name: bad\n  timeToLive: soon\n  maxWaitlistLength: -2\n";
        let cfg = PodCacheConfig::parse(text, "f").unwrap();
        assert_eq!(cfg.warnings.len(), 2, "{:?}", cfg.warnings);
        let p = policy().with_config(&cfg);
        let full = p.settings_for("full");
        assert_eq!(
            (full.ttl, full.max_waitlist, full.max_parallel_pods),
            (Duration::from_secs(60), 5, 3)
        );
        let d = FunctionSettings::default();
        assert_eq!(p.settings_for("zeros"), d);
        assert_eq!(p.settings_for("bad"), d);
        assert_eq!(p.settings_for("unknown"), d);
    }

    #[test]
    fn later_duplicates_win() {
        let cfg = PodCacheConfig::parse(
            b"- name: a\n  maxWaitlistLength: 1\n- name: a\n  maxWaitlistLength: 7\n",
            "f",
        )
        .unwrap();
        assert_eq!(cfg.entries.len(), 1);
        assert_eq!(cfg.entries[0].max_waitlist, Some(7));
        assert_eq!(cfg.warnings.len(), 1);
    }

    #[test]
    fn unknown_keys_are_warnings_naming_file_line_and_valid_keys() {
        let cfg = PodCacheConfig::parse(
            b"- name: a:v1\n  maxParallelPods: 4\n  timeToLive: 1m\n",
            "pcc.yaml",
        )
        .unwrap();
        assert_eq!(cfg.entries[0].max_parallel_pods, None);
        assert_eq!(cfg.entries[0].ttl, Some(Duration::from_secs(60)));
        assert_eq!(cfg.warnings.len(), 1, "{:?}", cfg.warnings);
        assert!(
            cfg.warnings[0]
                .starts_with("pcc.yaml: line 2 column 3: unknown key \"maxParallelPods\" in [0]"),
            "{}",
            cfg.warnings[0]
        );
        assert!(
            cfg.warnings[0].contains(
                "valid keys: name, timeToLive, maxWaitlistLength, maxParallelPodsPerFunction, resources, maxLoadPerPod, minReady, maxPods"
            ),
            "{}",
            cfg.warnings[0]
        );
    }

    #[test]
    fn warm_pool_keys_are_read_and_checked() {
        let cfg = PodCacheConfig::parse(
            b"- name: a\n  minReady: 2\n  maxPods: 4\n- name: b\n  minReady: 3\n- name: c\n  maxPods: 2\n",
            "f",
        )
        .unwrap();
        assert!(cfg.warnings.is_empty(), "{:?}", cfg.warnings);
        let p = policy().with_config(&cfg);
        let a = p.settings_for("a");
        assert_eq!(a.pool(), Some(Pool { min: 2, max: 4 }));
        assert_eq!(a.max_parallel_pods, 4, "the pool's bound is the pod limit");
        // Without maxPods the pool is as large as the minimum needs.
        assert_eq!(p.settings_for("b").pool(), Some(Pool { min: 3, max: 3 }));
        assert_eq!(p.settings_for("c").pool(), Some(Pool { min: 0, max: 2 }));
        assert_eq!(p.settings_for("other").pool(), None);
        let mut kept = p.min_ready_images();
        kept.sort();
        assert_eq!(kept, ["a", "b"]);
        for (text, wanted) in [
            ("minReady: -1", "minReady is -1: use 0 or more"),
            ("maxPods: 0", "maxPods is 0: use 1 or more"),
            (
                "minReady: 3\n  maxPods: 2",
                "minReady 3 is more than maxPods 2",
            ),
            (
                "maxPods: 2\n  maxParallelPodsPerFunction: 2",
                "maxPods and maxParallelPodsPerFunction are both set",
            ),
            (
                "minReady: two",
                "entry 0 (x:v1): minReady is \"two\", a string: write a whole number (such as 2)",
            ),
            (
                "maxPods: 1.5",
                "entry 0 (x:v1): maxPods is 1.5, not a whole number: write a whole number",
            ),
        ] {
            let yaml = format!("- name: x:v1\n  {text}\n");
            let err = PodCacheConfig::parse(yaml.as_bytes(), "pcc.yaml").unwrap_err();
            let msg = err.to_string();
            assert!(
                msg.contains("pcc.yaml") && msg.contains(wanted),
                "{text}: {msg}"
            );
        }
    }

    #[test]
    fn replica_tokens_are_checked() {
        for bad in ["", "UPPER", "toolongtoken", "a-b"] {
            assert!(
                PodCachePolicy::new(FunctionSettings::default(), bad).is_err(),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn normalising_keeps_limits_usable() {
        let s = FunctionSettings {
            ttl: Duration::ZERO,
            max_waitlist: 0,
            max_parallel_pods: 0,
            max_load_per_pod: 0,
            ..FunctionSettings::default()
        }
        .normalised();
        assert_eq!(
            (s.max_waitlist, s.max_parallel_pods, s.max_load_per_pod),
            (1, 1, 1)
        );
        assert_eq!(s.ttl, Duration::from_secs(1));
    }
}
