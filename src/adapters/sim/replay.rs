//! The policy simulator's replay: a request trace driven through the real
//! pod-cache state machine ([`PodCache`]) against the simulated cluster
//! ([`SimCluster`]) on virtual time.
//!
//! Every request of the trace becomes an [`Input::Request`] at its arrival
//! time; a successful reply schedules [`Input::CallFinished`] after the
//! request's run time; the machine's commands are carried out on the
//! simulated cluster (pods become ready after the configured start latency),
//! and GC runs every scan interval over the cluster's pod list, exactly as the
//! Kubernetes driver will do it.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, HashMap};
use std::time::Duration;

use super::cluster::{FailureRates, SimCluster, StartLatency};
use crate::domain::pod_cache::template::{
    PodBuild, TemplateOverrides, build_pod, build_service, default_pod_template,
    default_service_template, observe_pod,
};
use crate::domain::pod_cache::{
    Command, IMAGE_LABEL, INLINE_TEMPLATE_VERSION, Input, ObservedPhase, PodCache,
    RECLAIM_AFTER_ANNOTATION, RequestId, SlotId, UnixTime,
};
use crate::domain::simulation::report::{PolicyReport, Sample, percentile};
use crate::domain::simulation::{SimPolicy, TraceEntry};
use crate::ports::PodEvent;

/// Namespace of the simulated pods.
const NAMESPACE: &str = "porch-fn-system";
/// Virtual start time (any fixed instant; reclaim-after values are Unix seconds).
const START: UnixTime = UnixTime::from_secs(1_800_000_000);

/// How the simulated cluster behaves.
#[derive(Debug, Clone, PartialEq)]
pub struct ReplayOptions {
    /// Pod start latency.
    pub start_latency: StartLatency,
    /// Random pod failures.
    pub failures: FailureRates,
    /// Seed of every random draw.
    pub seed: u64,
    /// Number of timeline samples kept for plots.
    pub samples: usize,
}

impl Default for ReplayOptions {
    /// Log-normal start latency around 3 s (image pull and readiness), no
    /// failures, seed 1, 600 samples.
    fn default() -> Self {
        Self {
            start_latency: StartLatency::LogNormal {
                median: Duration::from_secs(3),
                sigma: 0.5,
            },
            failures: FailureRates::default(),
            seed: 1,
            samples: 600,
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

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Timer {
    CallDone(RequestId),
}

struct Pending {
    arrival: UnixTime,
    run: Duration,
}

/// Turns the cluster's pod events into pod-cache inputs: a pod being
/// created that became ready or failed, or a running pod that failed.
fn pod_events(
    cluster: &mut SimCluster,
    creating: &mut HashMap<String, SlotId>,
    inputs: &mut Vec<Input>,
) {
    for event in cluster.drain_events() {
        let PodEvent::Applied(pod) = event else {
            continue;
        };
        let Some(seen) = observe_pod(&pod) else {
            continue;
        };
        match seen.phase {
            ObservedPhase::Ready { endpoint } => {
                if let Some(slot) = creating.remove(&seen.name) {
                    inputs.push(Input::PodReady { slot, endpoint });
                }
            }
            ObservedPhase::Failed => match creating.remove(&seen.name) {
                Some(slot) => inputs.push(Input::PodFailed {
                    slot,
                    reason: "pod failed to start".into(),
                }),
                None => inputs.push(Input::PodGone {
                    pod_name: seen.name,
                    failed: true,
                }),
            },
            _ => {}
        }
    }
}

/// Replays `trace` (sorted by arrival) under `policy` and reports what happened.
///
/// Errors: the policy cannot be turned into a pod-cache policy, or the
/// default pod template cannot be built (neither happens with valid input).
pub fn replay(
    trace: &[TraceEntry],
    policy: &SimPolicy,
    options: &ReplayOptions,
) -> Result<PolicyReport, ReplayError> {
    let fail = |message: String| ReplayError {
        policy: policy.name.clone(),
        message,
    };
    let mut cache = PodCache::new(
        policy.pod_cache_policy().map_err(|e| fail(e.to_string()))?,
        INLINE_TEMPLATE_VERSION,
    );
    let mut cluster = SimCluster::new(NAMESPACE, START, options.seed)
        .with_latency(options.start_latency.clone())
        .with_failures(options.failures.clone());
    let pod_template = default_pod_template("wrapper-server:sim");
    let service_template = default_service_template();
    let entrypoint = vec!["/usr/local/bin/function".to_string()];

    let mut report = PolicyReport {
        policy: policy.name.clone(),
        requests: trace.len() as u64,
        ..PolicyReport::default()
    };
    let mut waits = Vec::with_capacity(trace.len());
    let mut pending: HashMap<RequestId, Pending> = HashMap::new();
    let mut timers: BinaryHeap<Reverse<(UnixTime, Timer)>> = BinaryHeap::new();
    let mut creating: HashMap<String, SlotId> = HashMap::new();
    let mut cluster_change: Option<UnixTime> = None;
    let span = trace.last().map(|e| e.at).unwrap_or_default();
    let sample_every = (span / options.samples.max(1) as u32).max(Duration::from_secs(1));
    let mut next_sample = START;
    let mut next_gc = START + policy.scan_interval;
    let mut next_arrival = 0usize;
    let mut now = START;
    let mut inputs: Vec<Input> = Vec::new();
    if policy.warm_up {
        inputs.push(Input::WarmUp {
            images: policy.config.warm_up_images(),
        });
    }

    loop {
        // Feed the inputs due now and carry out the commands they cause.
        while let Some(input) = inputs.pop() {
            cache.handle(now, input);
            while let Some(cmd) = cache.poll_command() {
                match cmd {
                    Command::CreatePod(c) => {
                        cluster.advance_to(now);
                        let overrides = TemplateOverrides::from_settings(&c.settings);
                        let pod = build_pod(
                            &pod_template,
                            &PodBuild::for_creation(
                                &c,
                                NAMESPACE,
                                &entrypoint,
                                &overrides,
                                6 << 20,
                            ),
                        )
                        .map_err(|e| fail(e.to_string()))?;
                        match cluster.create_pod(pod) {
                            Ok(_) => {
                                let _ = cluster.create_service(build_service(
                                    &service_template,
                                    &c.pod_name,
                                    NAMESPACE,
                                ));
                                creating.insert(c.pod_name.clone(), c.slot);
                                cluster_change = cluster.next_change();
                            }
                            Err(e) => inputs.push(Input::PodFailed {
                                slot: c.slot,
                                reason: e.to_string(),
                            }),
                        }
                    }
                    Command::Reply { request, result } => {
                        let Some(p) = pending.remove(&request) else {
                            continue;
                        };
                        match result {
                            Ok(_) => {
                                let wait = now.saturating_since(p.arrival);
                                if !wait.is_zero() {
                                    report.cold_starts += 1;
                                }
                                waits.push(wait);
                                timers.push(Reverse((now + p.run, Timer::CallDone(request))));
                            }
                            Err(_) => report.rejected += 1,
                        }
                    }
                    Command::DeletePod { pod_name } => {
                        creating.remove(&pod_name);
                        cluster.advance_to(now);
                        let _ = cluster.delete_pod(&pod_name);
                        let _ = cluster.delete_service(&pod_name);
                        cluster_change = cluster.next_change();
                    }
                    Command::PersistReclaimAfter {
                        pod_name,
                        reclaim_after,
                    } => {
                        let annotation = BTreeMap::from([(
                            RECLAIM_AFTER_ANNOTATION.to_string(),
                            reclaim_after.to_annotation(),
                        )]);
                        let _ = cluster.patch_pod_annotations(&pod_name, annotation);
                    }
                }
            }
            // Pod state changes caused by the commands become inputs.
            pod_events(&mut cluster, &mut creating, &mut inputs);
        }

        // Sample the timeline.
        while next_sample <= now {
            report.timeline.push(Sample {
                at_s: next_sample.saturating_since(START).as_secs_f64(),
                pods: cluster.pods().count(),
                queued: pending.len(),
            });
            next_sample = next_sample + sample_every;
        }

        // The next thing that happens.
        let arrival = trace.get(next_arrival).map(|e| START + e.at);
        let timer = timers.peek().map(|Reverse((t, _))| *t);
        let busy = arrival.is_some() || timer.is_some() || !pending.is_empty();
        let candidates = [
            arrival,
            timer,
            cluster_change,
            cache.poll_timeout(),
            busy.then_some(next_gc),
        ];
        let Some(next) = candidates.into_iter().flatten().min() else {
            break;
        };
        now = now.max(next);

        if cluster_change.is_some_and(|t| t <= now) {
            cluster.advance_to(now);
            cluster_change = cluster.next_change();
            pod_events(&mut cluster, &mut creating, &mut inputs);
        }
        while let Some(Reverse((t, Timer::CallDone(request)))) = timers.peek().copied() {
            if t > now {
                break;
            }
            timers.pop();
            inputs.push(Input::CallFinished { request });
        }
        while let Some(e) = trace.get(next_arrival).filter(|e| START + e.at <= now) {
            let request = RequestId(next_arrival as u64);
            pending.insert(
                request,
                Pending {
                    arrival: START + e.at,
                    run: e.run,
                },
            );
            inputs.push(Input::Request {
                request,
                image: e.image.clone(),
            });
            next_arrival += 1;
        }
        if cache.poll_timeout().is_some_and(|t| t <= now) {
            inputs.push(Input::Tick);
        }
        if next_gc <= now {
            // What a label-selected list returns, read in place.
            let observed = cluster
                .pods()
                .filter(|p| {
                    p.metadata
                        .labels
                        .as_ref()
                        .is_some_and(|l| l.contains_key(IMAGE_LABEL))
                })
                .filter_map(observe_pod)
                .collect();
            inputs.push(Input::Gc { observed });
            next_gc = now + policy.scan_interval;
        }
        // Inputs are handled last-in first-out; keep arrivals in order.
        inputs.reverse();
    }

    cluster.advance_to(now);
    let stats = cluster.stats();
    waits.sort_unstable();
    report.wait_p50_s = percentile(&waits, 50.0);
    report.wait_p95_s = percentile(&waits, 95.0);
    report.wait_p99_s = percentile(&waits, 99.0);
    report.pods_created = stats.pods_created;
    report.pods_deleted = stats.pods_deleted;
    report.peak_pods = stats.peak_pods;
    report.pod_seconds = stats.pod_seconds;
    Ok(report)
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
    }
}
