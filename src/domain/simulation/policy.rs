//! A pod-cache policy as an operator writes it, for the simulator.
//!
//! Two forms are read, so an operator can test the exact file they deploy:
//!
//! 1. the runner's `--pod-cache-config` file itself (a YAML list of
//!    `{name, timeToLive, maxWaitlistLength, maxParallelPodsPerFunction, …}`),
//!    with the runner's flag defaults for everything else;
//! 2. a mapping holding the runner's flags and that list:
//!
//! ```yaml
//! podTTL: 30m                     # --pod-ttl
//! maxWaitlistLength: 2            # --max-waitlist-length
//! maxParallelPodsPerFunction: 1   # --max-parallel-pods-per-function
//! maxLoadPerPod: 64               # bound on queueing per pod
//! scanInterval: 1m                # --scan-interval
//! warmUpPodCache: true            # --warm-up-pod-cache (warms the listed images)
//! wrapperHealthCheck: false       # --wrapper-health-check (pod-ip mode's fast path)
//! podCacheConfig:                 # the --pod-cache-config list
//! - name: ghcr.io/kptdev/krm-functions-catalog/set-namespace:v0.4.5
//!   timeToLive: 1h
//!   maxParallelPodsPerFunction: 4
//! ```

use std::time::Duration;

use serde::Deserialize;
use serde_json::Value;

use crate::domain::codec;
use crate::domain::codec::keys::{Shape, unknown_keys};
use crate::domain::pod_cache::config::{ENTRY_FORMAT, parse_go_duration};
use crate::domain::pod_cache::{FunctionSettings, PodCacheConfig, PodCachePolicy, PolicyError};

/// A policy to simulate.
#[derive(Debug, Clone, PartialEq)]
pub struct SimPolicy {
    /// Display name (the file name).
    pub name: String,
    /// Global defaults (the runner's flags).
    pub defaults: FunctionSettings,
    /// GC period (`--scan-interval`).
    pub scan_interval: Duration,
    /// Whether the listed images are warmed at start.
    pub warm_up: bool,
    /// Whether a starting pod takes calls as soon as its wrapper server
    /// answers a health check, before the kubelet reports it ready
    /// (`serve --wrapper-health-check`, the pod-IP fast path). False by
    /// default here, as Porch: it waits for the kubelet. It only makes a
    /// difference when the replay's kubelet reports pods ready later than
    /// their wrappers answer (`simulate --readiness-delay`).
    pub wrapper_health_check: bool,
    /// Per-function overrides and the warm-up list.
    pub config: PodCacheConfig,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct PolicyFile {
    #[serde(rename = "podTTL")]
    pod_ttl: Option<String>,
    max_waitlist_length: Option<i64>,
    max_parallel_pods_per_function: Option<i64>,
    max_load_per_pod: Option<u32>,
    scan_interval: Option<String>,
    warm_up_pod_cache: Option<bool>,
    wrapper_health_check: Option<bool>,
    pod_cache_config: Option<Value>,
}

/// The keys of a policy file: a bare pod-cache-config list, or the mapping
/// of flags and that list.
const FORMAT: Shape = Shape::SeqOrMap(
    &ENTRY_FORMAT,
    &Shape::Map(&[
        ("podTTL", Shape::Any),
        ("maxWaitlistLength", Shape::Any),
        ("maxParallelPodsPerFunction", Shape::Any),
        ("maxLoadPerPod", Shape::Any),
        ("scanInterval", Shape::Any),
        ("warmUpPodCache", Shape::Any),
        ("wrapperHealthCheck", Shape::Any),
        ("podCacheConfig", Shape::Seq(&ENTRY_FORMAT)),
    ]),
);

/// Why a policy file cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("policy {path}: {message}")]
pub struct SimPolicyError {
    /// The file.
    pub path: String,
    /// What is wrong.
    pub message: String,
}

fn duration(
    path: &str,
    key: &str,
    v: Option<String>,
    default: Duration,
) -> Result<Duration, SimPolicyError> {
    match v {
        None => Ok(default),
        Some(s) => parse_go_duration(&s)
            .filter(|d| !d.is_zero())
            .ok_or_else(|| SimPolicyError {
                path: path.to_string(),
                message: format!("{key} {s:?} is not a positive duration such as 30m or 1h30m"),
            }),
    }
}

impl SimPolicy {
    /// Parses a policy file (either form); `path` names it in errors and is
    /// the policy's display name.
    ///
    /// Errors: not YAML, unknown keys (anywhere, `podCacheConfig` entries
    /// included: the simulator's own format, where a typo would silently
    /// simulate another policy — each named with its line and the valid
    /// keys), bad durations, a bad pod-cache-config list.
    pub fn parse(text: &[u8], path: &str) -> Result<Self, SimPolicyError> {
        let err = |message: String| SimPolicyError {
            path: path.to_string(),
            message,
        };
        let name = std::path::Path::new(path)
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| path.to_string());
        let value: Value = if text.iter().all(u8::is_ascii_whitespace) {
            Value::Null
        } else {
            codec::from_yaml_slice(text).map_err(|e| err(e.to_string()))?
        };
        let unknown = unknown_keys(text, &FORMAT).map_err(|e| err(e.to_string()))?;
        if !unknown.is_empty() {
            let list: Vec<String> = unknown.iter().map(ToString::to_string).collect();
            return Err(err(list.join("\n")));
        }
        let defaults = FunctionSettings::default();
        let config_from = |v: &Value| -> Result<PodCacheConfig, SimPolicyError> {
            let yaml = codec::to_yaml_string(v).map_err(|e| err(e.to_string()))?;
            PodCacheConfig::parse(yaml.as_bytes(), path)
                .map_err(|e: PolicyError| err(e.to_string()))
        };
        if value.is_array() || value.is_null() {
            return Ok(Self {
                name,
                defaults,
                scan_interval: Duration::from_secs(60),
                warm_up: true,
                wrapper_health_check: false,
                config: config_from(&value)?,
            });
        }
        let file: PolicyFile = serde_json::from_value(value).map_err(|e| {
            err(format!(
                "{e}; expected a pod-cache-config list or a mapping with podTTL, maxWaitlistLength, \
                 maxParallelPodsPerFunction, maxLoadPerPod, scanInterval, warmUpPodCache, wrapperHealthCheck, podCacheConfig"
            ))
        })?;
        // The runner's reading of its flags, so that 0 means what it means
        // to `serve --max-waitlist-length=0`.
        let settings = FunctionSettings::from_flags(
            duration(path, "podTTL", file.pod_ttl, defaults.ttl)?,
            file.max_waitlist_length.unwrap_or(0),
            file.max_parallel_pods_per_function.unwrap_or(0),
            file.max_load_per_pod.unwrap_or(defaults.max_load_per_pod),
        );
        Ok(Self {
            name,
            defaults: settings,
            scan_interval: duration(
                path,
                "scanInterval",
                file.scan_interval,
                Duration::from_secs(60),
            )?,
            warm_up: file.warm_up_pod_cache.unwrap_or(true),
            wrapper_health_check: file.wrapper_health_check.unwrap_or(false),
            config: config_from(&file.pod_cache_config.unwrap_or(Value::Null))?,
        })
    }

    /// The pod-cache policy the state machine runs with (its GC period is
    /// [`scan_interval`](Self::scan_interval)).
    ///
    /// Errors: only for an invalid replica token (the simulator uses a fixed one).
    pub fn pod_cache_policy(&self) -> Result<PodCachePolicy, PolicyError> {
        let mut p = PodCachePolicy::new(self.defaults.clone(), "sim")?.with_config(&self.config);
        p.scan_interval = self.scan_interval;
        p.probe_wrapper = self.wrapper_health_check;
        Ok(p)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_a_bare_pod_cache_config_list() {
        let p = SimPolicy::parse(
            b"- name: a:v1\n  maxParallelPodsPerFunction: 3\n",
            "/x/porch.yaml",
        )
        .unwrap();
        assert_eq!(p.name, "porch.yaml");
        assert_eq!(p.config.entries.len(), 1);
        assert_eq!(p.defaults, FunctionSettings::default());
        assert_eq!(
            p.pod_cache_policy()
                .unwrap()
                .settings_for("a:v1")
                .max_parallel_pods,
            3
        );
    }

    #[test]
    fn reads_flags_and_list() {
        let p = SimPolicy::parse(
            b"podTTL: 5m\nmaxWaitlistLength: 1\nmaxParallelPodsPerFunction: 2\nscanInterval: 30s\nwarmUpPodCache: false\npodCacheConfig:\n- name: a:v1\n  timeToLive: 1h\n",
            "p.yaml",
        )
        .unwrap();
        assert_eq!(p.defaults.ttl, Duration::from_secs(300));
        assert_eq!(p.defaults.max_parallel_pods, 2);
        assert_eq!(p.scan_interval, Duration::from_secs(30));
        assert!(!p.warm_up);
        assert_eq!(
            p.pod_cache_policy().unwrap().settings_for("a:v1").ttl,
            Duration::from_secs(3600)
        );
    }

    // `maxWaitlistLength: 0` means what `serve --max-waitlist-length=0`
    // means: Porch's default of 2.
    #[test]
    fn zero_limits_mean_the_runner_defaults() {
        let p = SimPolicy::parse(
            b"maxWaitlistLength: 0\nmaxParallelPodsPerFunction: 0\n",
            "p.yaml",
        )
        .unwrap();
        let runner = FunctionSettings::from_flags(Duration::from_secs(1800), 0, 0, 64);
        assert_eq!(p.defaults, runner);
        assert_eq!((runner.max_waitlist, runner.max_parallel_pods), (2, 1));
    }

    #[test]
    fn mistakes_are_named() {
        let e = SimPolicy::parse(b"podTtl: 5m\n", "p.yaml").unwrap_err();
        assert!(e.message.contains("podTtl"), "{e}");
        let e = SimPolicy::parse(b"podTTL: soon\n", "p.yaml").unwrap_err();
        assert!(e.message.contains("podTTL"), "{e}");
    }

    #[test]
    fn unknown_keys_are_errors_naming_line_and_valid_keys() {
        let e = SimPolicy::parse(b"podTtl: 5m\n", "p.yaml").unwrap_err();
        assert_eq!(
            e.to_string(),
            "policy p.yaml: line 1 column 1: unknown key \"podTtl\" (did you mean \"podTTL\"?); valid keys: \
             podTTL, maxWaitlistLength, maxParallelPodsPerFunction, maxLoadPerPod, scanInterval, \
             warmUpPodCache, wrapperHealthCheck, podCacheConfig"
        );
        let e = SimPolicy::parse(
            b"podTTL: 5m\npodCacheConfig:\n- name: a:v1\n  maxParallelPodsPerFunction: 2\n  timeTolive: 1h\n",
            "p.yaml",
        )
        .unwrap_err();
        assert!(
            e.message.starts_with(
                "line 5 column 3: unknown key \"timeTolive\" in podCacheConfig[0] (did you mean \"timeToLive\"?)"
            ),
            "{e}"
        );
        let e = SimPolicy::parse(b"- name: a:v1\n  ttl: 1h\n", "p.yaml").unwrap_err();
        assert!(
            e.message
                .starts_with("line 2 column 3: unknown key \"ttl\" in [0]"),
            "{e}"
        );
    }
}
