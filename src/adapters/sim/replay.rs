//! The policy simulator's replay: a request trace driven through the real
//! pod-cache state machine ([`PodCache`](crate::domain::pod_cache::PodCache))
//! of N runner replicas against the simulated cluster on virtual time, on
//! the [`Harness`] the property tests use too.
//!
//! Requests of the trace go to the replicas in turn, at their arrival
//! time; a successful reply starts the call, which ends after the request's
//! run time (or when the caller's deadline passes); the machine's commands
//! are carried out on the simulated cluster with the configured API
//! latency and faults, and the replicas' GC lists the pods every scan
//! interval, as the Kubernetes driver does.

use std::time::Duration;

use super::cluster::{FailureRates, SimCluster, StartLatency};
use super::harness::{Harness, HarnessConfig};
use crate::domain::pod_cache::{Input, UnixTime};
use crate::domain::simulation::report::{PolicyReport, Sample, percentile};
use crate::domain::simulation::{SimPolicy, TraceEntry};

/// Namespace of the simulated pods.
const NAMESPACE: &str = "porch-fn-system";
/// Virtual start time (any fixed instant; reclaim-after values are Unix seconds).
const START: UnixTime = UnixTime::from_secs(1_800_000_000);

/// How the simulated cluster and runner replicas behave.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct ReplayOptions {
    /// Pod start latency: until the function pod's wrapper server answers.
    pub start_latency: StartLatency,
    /// How much later than its wrapper answers the kubelet reports a pod
    /// ready (its readiness probe's lag: Porch's template probes every
    /// 10 s). Zero (the default): ready the moment the wrapper answers.
    /// A policy with `wrapperHealthCheck: true` takes calls at the wrapper's
    /// answer instead of waiting for this.
    pub readiness_delay: Duration,
    /// Random pod and API failures.
    pub failures: FailureRates,
    /// Seed of every random draw.
    pub seed: u64,
    /// Number of timeline buckets kept for plots (at least 1 s each).
    pub samples: usize,
    /// Runner replicas sharing the namespace; requests go to them in turn.
    pub replicas: usize,
    /// Each API call takes a latency drawn from zero to this.
    pub api_latency: Duration,
    /// Probability that a GC listing arrives [`slow_list_latency`](Self::slow_list_latency) late.
    pub slow_list: f64,
    /// How late a slow listing arrives.
    pub slow_list_latency: Duration,
    /// Probability per pod change and replica that its watch breaks for
    /// [`watch_gap_length`](Self::watch_gap_length).
    pub watch_gap: f64,
    /// How long a watch gap lasts.
    pub watch_gap_length: Duration,
    /// Largest clock offset between a replica and true time; the replicas'
    /// offsets are spread evenly over `[-skew, +skew]`.
    pub skew: Duration,
    /// Callers give up after this long (the request's gRPC deadline):
    /// a request still waiting is cancelled, a running call is cut.
    pub deadline: Option<Duration>,
    /// A rolling restart: every this long, the next replica (in turn)
    /// restarts as a new process and adopts the pods it may, so replicas
    /// share pods mid-run. What it was serving fails.
    pub restart_every: Option<Duration>,
}

impl Default for ReplayOptions {
    /// Log-normal start latency around 3 s (image pull and readiness), no
    /// failures, seed 1, 600 samples, one replica, instant API, no deadline,
    /// no restarts.
    fn default() -> Self {
        Self {
            start_latency: StartLatency::LogNormal {
                median: Duration::from_secs(3),
                sigma: 0.5,
            },
            readiness_delay: Duration::ZERO,
            failures: FailureRates::default(),
            seed: 1,
            samples: 600,
            replicas: 1,
            api_latency: Duration::ZERO,
            slow_list: 0.0,
            slow_list_latency: Duration::ZERO,
            watch_gap: 0.0,
            watch_gap_length: Duration::from_secs(30),
            skew: Duration::ZERO,
            deadline: None,
            restart_every: None,
        }
    }
}

/// Why a replay could not run.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("cannot simulate policy {policy}: {message}")]
pub struct ReplayError {
    /// The policy.
    pub policy: String,
    /// What went wrong.
    pub message: String,
}

/// The replicas' clock offsets, in milliseconds, spread over `[-skew, +skew]`.
fn skews(replicas: usize, skew: Duration) -> Vec<i64> {
    let max = i64::try_from(skew.as_millis()).unwrap_or(i64::MAX);
    if replicas < 2 {
        return vec![0; replicas];
    }
    (0..replicas)
        .map(|i| -max + 2 * max * i as i64 / (replicas as i64 - 1))
        .collect()
}

/// Replays `trace` (sorted by arrival) under `policy` and reports what happened.
///
/// Errors: the policy cannot be turned into a pod-cache policy (an invalid
/// replica token; never with valid input).
pub fn replay(
    trace: &[TraceEntry],
    policy: &SimPolicy,
    options: &ReplayOptions,
) -> Result<PolicyReport, ReplayError> {
    let wall = std::time::Instant::now();
    let fail = |message: String| ReplayError {
        policy: policy.name.clone(),
        message,
    };
    let mut cache_policy = policy.pod_cache_policy().map_err(|e| fail(e.to_string()))?;
    cache_policy.scan_interval = policy.scan_interval;
    let cluster = SimCluster::new(NAMESPACE, START, options.seed)
        .with_latency(options.start_latency.clone())
        .with_readiness_delay(options.readiness_delay)
        .with_failures(options.failures.clone());
    let replicas = options.replicas.max(1);
    let config = HarnessConfig {
        replicas,
        api_latency: options.api_latency,
        slow_list: options.slow_list,
        slow_list_latency: options.slow_list_latency,
        watch_gap: options.watch_gap,
        watch_gap_length: options.watch_gap_length,
        skew_ms: skews(replicas, options.skew),
        ..HarnessConfig::default()
    };
    let mut h = Harness::new(config, cache_policy, cluster);
    h.forget_done_requests();
    let span = trace.last().map(|e| e.at).unwrap_or_default();
    let bucket = (span / options.samples.max(1) as u32).max(Duration::from_secs(1));
    h.sample(START, bucket);
    // As `serve` does: every listed image with warm-up, else only those
    // with a warm-pool minimum.
    let warm: Vec<String> = policy
        .config
        .entries
        .iter()
        .filter(|e| policy.warm_up || e.min_ready.is_some_and(|m| m > 0))
        .map(|e| e.name.clone())
        .collect();
    if policy.warm_up || !warm.is_empty() {
        for r in 0..replicas {
            let images = warm.clone();
            h.feed(r, Input::WarmUp { images });
        }
    }
    let mut restarts = options
        .restart_every
        .filter(|d| !d.is_zero())
        .map(|every| (START + every, every, 0usize));
    for (i, e) in trace.iter().enumerate() {
        while let Some((at, every, r)) = restarts
            && at <= START + e.at
        {
            h.run_until(at);
            h.restart(r);
            restarts = Some((at + every, every, (r + 1) % replicas));
        }
        h.run_until(START + e.at);
        h.submit(i % replicas, &e.image, e.run, options.deadline);
    }
    // Every call ends; give up a day after the last arrival.
    h.drain(START + span + Duration::from_secs(86_400));

    let stats = h.cluster().stats();
    let outcomes = h.outcomes();
    let mut waits = outcomes.waits.clone();
    waits.sort_unstable();
    let wall_s = wall.elapsed().as_secs_f64().max(1e-9);
    let bucket_s = bucket.as_secs_f64();
    Ok(PolicyReport {
        policy: policy.name.clone(),
        requests: trace.len() as u64,
        replicas,
        cold_starts: outcomes.cold,
        rejected: outcomes.rejected,
        cancelled: outcomes.cancelled,
        call_failures: outcomes.call_failures,
        lost_in_restarts: outcomes.lost_in_restarts,
        wait_p50_s: percentile(&waits, 50.0),
        wait_p95_s: percentile(&waits, 95.0),
        wait_p99_s: percentile(&waits, 99.0),
        pods_created: stats.pods_created,
        pods_deleted: stats.pods_deleted,
        peak_pods: stats.peak_pods,
        pod_seconds: stats.pod_seconds,
        api_calls: stats.api_calls,
        api_errors: stats.api_errors,
        violations: h.violations(),
        decisions: h.decisions(),
        wall_s,
        decisions_per_s: h.decisions() as f64 / wall_s,
        requests_per_s: trace.len() as f64 / wall_s,
        bucket_s,
        timeline: h
            .timeline()
            .iter()
            .enumerate()
            .map(|(i, b)| Sample {
                at_s: i as f64 * bucket_s,
                pods: b.pods,
                in_use: b.in_use,
                waiting: b.waiting,
                calls: b.calls,
                cold_starts: b.cold_starts,
                rejected: b.rejected,
                cancelled: b.cancelled,
            })
            .collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::simulation::trace::{TraceSpec, generate};

    fn policy(text: &str) -> SimPolicy {
        SimPolicy::parse(text.as_bytes(), "p.yaml").unwrap()
    }

    fn fixed(secs: u64) -> ReplayOptions {
        ReplayOptions {
            start_latency: StartLatency::Fixed(Duration::from_secs(secs)),
            ..ReplayOptions::default()
        }
    }

    fn entry(at: u64, image: &str, run_ms: u64) -> TraceEntry {
        TraceEntry {
            at: Duration::from_secs(at),
            image: image.into(),
            run: Duration::from_millis(run_ms),
        }
    }

    #[test]
    fn cold_start_then_reuse() {
        let trace = [entry(0, "a:v1", 100), entry(10, "a:v1", 100)];
        let r = replay(&trace, &policy("podTTL: 30m\n"), &fixed(3)).unwrap();
        assert_eq!((r.requests, r.cold_starts, r.rejected), (2, 1, 0));
        assert_eq!(r.pods_created, 1);
        assert_eq!(r.wait_p99_s, 3.0);
        assert_eq!(r.wait_p50_s, 0.0);
        assert!(r.violations.is_empty(), "{:?}", r.violations);
    }

    /// With a kubelet that reports pods ready 10 s after their wrappers
    /// answer, a cold start waits the start and that lag; a policy with
    /// `wrapperHealthCheck: true` takes the call once the wrapper answers
    /// (the pod-IP fast path, `ProbeWrapper`), as `serve` does.
    #[test]
    fn the_wrapper_health_check_skips_the_kubelets_readiness_lag() {
        let trace = [entry(0, "a:v1", 100)];
        let options = ReplayOptions {
            readiness_delay: Duration::from_secs(10),
            ..fixed(3)
        };
        let porch = replay(&trace, &policy("podTTL: 30m\n"), &options).unwrap();
        let probed = replay(
            &trace,
            &policy("podTTL: 30m\nwrapperHealthCheck: true\n"),
            &options,
        )
        .unwrap();
        assert_eq!((porch.cold_starts, probed.cold_starts), (1, 1));
        assert_eq!(porch.wait_p99_s, 13.0, "the start, then the kubelet's lag");
        assert!(
            probed.wait_p99_s >= 3.0 && probed.wait_p99_s < 3.5,
            "the start and a probe: {}",
            probed.wait_p99_s
        );
        assert!(porch.violations.is_empty() && probed.violations.is_empty());
    }

    #[test]
    fn idle_pods_are_reclaimed_after_their_ttl() {
        let trace = [entry(0, "a:v1", 100), entry(4000, "a:v1", 100)];
        let r = replay(
            &trace,
            &policy("podTTL: 10m\nscanInterval: 1m\n"),
            &fixed(2),
        )
        .unwrap();
        assert_eq!(
            r.pods_created, 2,
            "the first pod expired before the second request"
        );
        assert!(r.pods_deleted >= 1);
        assert_eq!(r.cold_starts, 2);
    }

    #[test]
    fn a_burst_scales_out_to_the_limit() {
        let trace: Vec<TraceEntry> = (0..50).map(|i| entry(i / 10, "a:v1", 20_000)).collect();
        let r = replay(
            &trace,
            &policy("maxWaitlistLength: 1\nmaxParallelPodsPerFunction: 4\n"),
            &fixed(2),
        )
        .unwrap();
        assert_eq!(r.peak_pods, 4);
        assert_eq!(r.rejected, 0);
        assert_eq!(
            r.timeline.iter().map(|s| s.pods).max(),
            Some(4),
            "the timeline keeps the most pods of each bucket"
        );
    }

    #[test]
    fn caller_deadlines_cancel_waiting_requests() {
        // A 10 s start and callers that wait 2 s: both give up.
        let trace = [entry(0, "a:v1", 100), entry(1, "a:v1", 100)];
        let options = ReplayOptions {
            deadline: Some(Duration::from_secs(2)),
            ..fixed(10)
        };
        let r = replay(&trace, &policy("podTTL: 30m\n"), &options).unwrap();
        assert_eq!((r.cancelled, r.rejected, r.cold_starts), (2, 0, 0));
        assert_eq!(
            r.pods_created, 1,
            "the pod still starts, for the next caller"
        );
    }

    /// A caller that gives up leaves the waitlist: with room for one
    /// waiter, two callers in turn wait on a slow start, give up, and
    /// neither is refused; the third, after the start, is served.
    #[test]
    fn deadlines_take_cancelled_requests_off_the_waitlist() {
        let trace = [
            entry(0, "a:v1", 100),
            entry(3, "a:v1", 100),
            entry(12, "a:v1", 100),
        ];
        let options = ReplayOptions {
            deadline: Some(Duration::from_secs(2)),
            ..fixed(10)
        };
        let p = policy("podTTL: 30m\nmaxWaitlistLength: 1\nmaxParallelPodsPerFunction: 1\n");
        let r = replay(&trace, &p, &options).unwrap();
        assert_eq!((r.cancelled, r.rejected), (2, 0), "{r:?}");
        assert_eq!((r.pods_created, r.cold_starts), (1, 0));
        let counted: u64 = r.timeline.iter().map(|s| s.cancelled).sum();
        assert_eq!(counted, 2);
        assert_eq!(r.timeline[0].waiting, 1, "the first caller waited");
    }

    /// Replicas restarting in turn adopt the pods the others created
    /// instead of creating their own, and the invariants hold throughout.
    #[test]
    fn rolling_restarts_share_pods_between_replicas() {
        let trace: Vec<TraceEntry> = (0..1_440)
            .map(|i| entry(5 * i + 2, "a:v1", 14_000))
            .collect();
        let p = policy("podTTL: 30m\nmaxParallelPodsPerFunction: 1\n");
        let run = |restart_every| {
            let options = ReplayOptions {
                replicas: 3,
                restart_every,
                ..fixed(3)
            };
            replay(&trace, &p, &options).unwrap()
        };
        let steady = run(None);
        assert_eq!(steady.pods_created, 3, "one pod per replica");
        let rolling = run(Some(Duration::from_secs(600)));
        assert!(rolling.violations.is_empty(), "{:?}", rolling.violations);
        assert_eq!(rolling.rejected, 0);
        // 11 restarts: a replica that created anew each time would make 14.
        assert!(
            rolling.pods_created <= 4,
            "{} pods created: restarted replicas did not adopt",
            rolling.pods_created
        );
        assert!(rolling.cold_starts <= steady.cold_starts + 1);
        assert!(rolling.lost_in_restarts > 0, "restarts cut calls short");
        assert_eq!(steady.lost_in_restarts, 0);
    }

    /// The timeline adds up to the summary: its counts sum to the report's,
    /// its gauges peak where the report does, and it covers the trace.
    #[test]
    fn the_timeline_adds_up_to_the_summary() {
        let spec = TraceSpec {
            duration: Duration::from_secs(3 * 3600),
            requests: 6_000,
            functions: 30,
            diurnal_ratio: 3.0,
            ..TraceSpec::default()
        };
        let trace = generate(&spec).unwrap();
        let options = ReplayOptions {
            replicas: 2,
            deadline: Some(Duration::from_secs(4)),
            failures: FailureRates {
                create_error: 0.05,
                ..FailureRates::default()
            },
            ..ReplayOptions::default()
        };
        let r = replay(
            &trace,
            &policy("podTTL: 10m\nmaxParallelPodsPerFunction: 1\nmaxWaitlistLength: 2\n"),
            &options,
        )
        .unwrap();
        let sum = |f: fn(&Sample) -> u64| r.timeline.iter().map(f).sum::<u64>();
        assert!(
            r.cold_starts > 0 && r.cancelled > 0 && r.rejected > 0,
            "{r:?}"
        );
        assert_eq!(sum(|s| s.cold_starts), r.cold_starts);
        assert_eq!(sum(|s| s.cancelled), r.cancelled);
        assert_eq!(sum(|s| s.rejected), r.rejected);
        assert_eq!(r.timeline.iter().map(|s| s.pods).max(), Some(r.peak_pods));
        for s in &r.timeline {
            assert!(s.in_use <= s.pods && s.in_use <= s.calls, "{s:?}");
        }
        let last = r.timeline.last().unwrap();
        assert!(last.at_s + r.bucket_s >= trace.last().unwrap().at.as_secs_f64());
        assert!(r.decisions_per_s > 0.0 && r.decisions >= 2 * r.requests);
    }

    #[test]
    fn generated_traces_replay_with_every_request_answered() {
        let spec = TraceSpec {
            duration: Duration::from_secs(3600),
            requests: 3_000,
            functions: 20,
            ..TraceSpec::default()
        };
        let trace = generate(&spec).unwrap();
        let r = replay(
            &trace,
            &policy("maxParallelPodsPerFunction: 2\n"),
            &ReplayOptions::default(),
        )
        .unwrap();
        assert_eq!(r.requests, trace.len() as u64);
        assert!(r.cold_starts + r.rejected <= r.requests);
        assert!(r.pods_created >= 20);
        assert!(!r.timeline.is_empty());
        assert!(r.decisions >= 2 * r.requests, "{} decisions", r.decisions);
    }

    #[test]
    fn replicas_under_faults_keep_the_invariants() {
        let spec = TraceSpec {
            duration: Duration::from_secs(2 * 3600),
            requests: 4_000,
            functions: 10,
            ..TraceSpec::default()
        };
        let trace = generate(&spec).unwrap();
        let options = ReplayOptions {
            replicas: 3,
            api_latency: Duration::from_millis(500),
            slow_list: 0.2,
            slow_list_latency: Duration::from_secs(40),
            watch_gap: 0.01,
            watch_gap_length: Duration::from_secs(20),
            skew: Duration::from_secs(1),
            restart_every: Some(Duration::from_secs(900)),
            failures: FailureRates {
                patch_error: 0.2,
                delete_error: 0.1,
                list_error: 0.1,
                create_lost: 0.05,
                unavailable: 0.5,
                unavailable_load: 1,
                ..FailureRates::default()
            },
            ..ReplayOptions::default()
        };
        let r = replay(
            &trace,
            &policy("podTTL: 2m\nmaxParallelPodsPerFunction: 2\nscanInterval: 10s\n"),
            &options,
        )
        .unwrap();
        assert!(r.violations.is_empty(), "{:?}", r.violations);
        assert!(
            r.api_errors > 0 && r.call_failures > 0,
            "faults happened: {} API errors, {} failed calls",
            r.api_errors,
            r.call_failures
        );
        assert!(r.pods_deleted > 0);
    }
}
