//! What a simulated policy did: the numbers an operator compares.

use std::time::Duration;

use serde::Serialize;

/// The report of one policy on one trace.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct PolicyReport {
    /// The policy's name (its file name).
    pub policy: String,
    /// Requests in the trace.
    pub requests: u64,
    /// Runner replicas the requests were spread over.
    pub replicas: usize,
    /// Requests that waited for a pod to be created.
    pub cold_starts: u64,
    /// Requests refused (queue limit, creation failure, timeout), their
    /// caller's deadline aside.
    pub rejected: u64,
    /// Requests whose caller's deadline passed first.
    pub cancelled: u64,
    /// Calls that found their pod unavailable or lost it.
    pub call_failures: u64,
    /// Requests a replica was serving when it restarted (a rolling restart).
    pub lost_in_restarts: u64,
    /// Wait for a pod (arrival to assignment), 50th percentile, seconds.
    pub wait_p50_s: f64,
    /// 95th percentile wait, seconds.
    pub wait_p95_s: f64,
    /// 99th percentile wait, seconds.
    pub wait_p99_s: f64,
    /// Pods created.
    pub pods_created: u64,
    /// Pods deleted.
    pub pods_deleted: u64,
    /// Most pods alive at once.
    pub peak_pods: usize,
    /// Sum of pod lifetimes, seconds (the cost).
    pub pod_seconds: f64,
    /// API calls the replicas made.
    pub api_calls: u64,
    /// API calls that failed (injected faults).
    pub api_errors: u64,
    /// What must never happen and did (a pod deleted with a call in it, a
    /// pod name created twice, a call sent to a pod known to be gone…).
    pub violations: Vec<String>,
    /// Inputs the replicas' pod caches handled.
    pub decisions: u64,
    /// Wall-clock time the replay took, seconds.
    pub wall_s: f64,
    /// Decisions per second of wall-clock time.
    pub decisions_per_s: f64,
    /// Requests replayed per second of wall-clock time.
    pub requests_per_s: f64,
    /// Length of one timeline bucket, seconds.
    pub bucket_s: f64,
    /// Per bucket, the most pods alive, pods in use, requests waiting and
    /// calls running, and the cold starts, rejections and cancellations:
    /// what the plot draws.
    pub timeline: Vec<Sample>,
}

/// One bucket of the timeline ([`PolicyReport::bucket_s`] long): the
/// highest gauges reached in it, and the requests answered in it by
/// outcome. Summed over the timeline, the counts are the report's.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Sample {
    /// Start of the bucket, seconds from the start of the trace.
    pub at_s: f64,
    /// Most pods alive.
    pub pods: usize,
    /// Most pods with a call in them.
    pub in_use: usize,
    /// Most requests waiting for a pod.
    pub waiting: usize,
    /// Most calls running.
    pub calls: usize,
    /// Requests that got a pod after waiting for one to start.
    pub cold_starts: u64,
    /// Requests refused.
    pub rejected: u64,
    /// Requests whose caller's deadline passed.
    pub cancelled: u64,
}

/// Nearest-rank percentile (`p` in 0–100) of `sorted` (ascending); 0 when empty.
pub fn percentile(sorted: &[Duration], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1].as_secs_f64()
}

/// Renders reports as an aligned text table, one row per policy. Only
/// what follows from the trace and the policy: the machine's speed
/// (decisions per second) is in the JSON report.
pub fn table(reports: &[PolicyReport]) -> String {
    let header = [
        "policy",
        "requests",
        "cold",
        "rejected",
        "cancelled",
        "call fails",
        "wait p50",
        "wait p95",
        "wait p99",
        "created",
        "deleted",
        "peak pods",
        "pod-hours",
        "violations",
    ];
    let rows: Vec<Vec<String>> = reports
        .iter()
        .map(|r| {
            vec![
                r.policy.clone(),
                r.requests.to_string(),
                r.cold_starts.to_string(),
                r.rejected.to_string(),
                r.cancelled.to_string(),
                r.call_failures.to_string(),
                format!("{:.3}s", r.wait_p50_s),
                format!("{:.3}s", r.wait_p95_s),
                format!("{:.3}s", r.wait_p99_s),
                r.pods_created.to_string(),
                r.pods_deleted.to_string(),
                r.peak_pods.to_string(),
                format!("{:.1}", r.pod_seconds / 3600.0),
                r.violations.len().to_string(),
            ]
        })
        .collect();
    aligned(&header, rows)
}

/// Renders `rows` under `header` as text columns two spaces apart: the
/// first column left-aligned, the others right-aligned (numbers).
pub fn aligned(header: &[&str], rows: Vec<Vec<String>>) -> String {
    let widths: Vec<usize> = (0..header.len())
        .map(|i| {
            rows.iter()
                .map(|r| r[i].len())
                .chain([header[i].len()])
                .max()
                .unwrap_or(0)
        })
        .collect();
    let line = |cells: Vec<String>| {
        cells
            .iter()
            .enumerate()
            .map(|(i, c)| {
                if i == 0 {
                    format!("{c:<w$}", w = widths[i])
                } else {
                    format!("{c:>w$}", w = widths[i])
                }
            })
            .collect::<Vec<_>>()
            .join("  ")
    };
    let mut out = line(header.iter().map(|s| s.to_string()).collect());
    out.push('\n');
    for r in rows {
        out.push_str(&line(r));
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles() {
        let v: Vec<Duration> = (1..=100).map(Duration::from_secs).collect();
        assert_eq!(percentile(&v, 50.0), 50.0);
        assert_eq!(percentile(&v, 99.0), 99.0);
        assert_eq!(percentile(&v, 100.0), 100.0);
        assert_eq!(percentile(&[], 50.0), 0.0);
    }

    #[test]
    fn table_has_a_row_per_policy() {
        let r = PolicyReport {
            policy: "a.yaml".into(),
            requests: 10,
            ..Default::default()
        };
        let t = table(&[
            r.clone(),
            PolicyReport {
                policy: "b".into(),
                ..r
            },
        ]);
        assert_eq!(t.lines().count(), 3);
        assert!(t.starts_with("policy"));
    }
}
