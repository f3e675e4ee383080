//! How many runner replicas a trace needs: a model of client connections,
//! a per-connection balancer (a Kubernetes Service), and replicas with a
//! fixed number of function slots, on virtual time, with and without
//! connection ageing.
//!
//! The model (the exec runtime's view: functions run in the runner's own
//! container, so a replica's capacity is its function slots,
//! `--max-concurrent-functions`):
//!
//! - `clients` callers (porch-server replicas) each hold one connection at
//!   a time, as grpc-go's pick_first does; each call of the trace comes
//!   from one of them, drawn at random.
//! - A connection goes to the replica the balancer picks when it is opened:
//!   at random (kube-proxy's iptables and nftables modes) or in turn
//!   (IPVS's `rr`). A call goes to its client's replica of the moment.
//! - With ageing, each connection is replaced at its jittered age
//!   ([`ConnectionAge::jittered`]); the calls already on the old replica
//!   stay there (the grace is taken to outlast them). Without, every
//!   connection stays where it first went.
//! - A replica runs at most `slots` calls at once; others wait in arrival
//!   order, at most `max_queued` of them (`--max-queued-functions`), and
//!   beyond that a call is rejected (`RESOURCE_EXHAUSTED`).
//!
//! What follows from it, and what the sizing shows: at any moment at most
//! `clients` replicas carry calls. More replicas than client connections
//! spread the calls over time, not at once; a trace whose concurrent calls
//! from one client exceed one replica's slots waits whatever the replica
//! count.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use serde::Serialize;

use super::report::{aligned, percentile};
use super::trace::TraceEntry;
use crate::domain::connection_age::ConnectionAge;

/// How the Service picks a replica for a new connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Balance {
    /// Uniformly at random (kube-proxy in iptables or nftables mode).
    Random,
    /// In turn (kube-proxy in IPVS mode with the `rr` scheduler).
    RoundRobin,
}

/// The model's settings (see the module documentation).
#[derive(Debug, Clone, PartialEq)]
pub struct ReplicaModel {
    /// Function slots per replica (`--max-concurrent-functions`).
    pub slots: usize,
    /// Calls that may wait for a slot per replica (`--max-queued-functions`).
    pub max_queued: usize,
    /// Client connections at once (porch-server replicas).
    pub clients: usize,
    /// The Service's choice of replica for a new connection.
    pub balance: Balance,
    /// Connection ageing of the "on" rows.
    pub age: ConnectionAge,
    /// Seed of the draws (clients, balancer picks, jitter).
    pub seed: u64,
}

impl Default for ReplicaModel {
    /// 8 slots (the `--max-concurrent-functions` floor), 1024 queued, one
    /// client, random balancing, the runner's default ageing, seed 1.
    fn default() -> Self {
        Self {
            slots: 8,
            max_queued: 1024,
            clients: 1,
            balance: Balance::Random,
            age: ConnectionAge::default(),
            seed: 1,
        }
    }
}

/// What `replicas` replicas did with a trace, with or without ageing.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct ReplicaRun {
    /// Replicas behind the Service.
    pub replicas: usize,
    /// Whether connections were aged.
    pub ageing: bool,
    /// Calls in the trace.
    pub calls: u64,
    /// Calls refused: their replica's queue was full.
    pub rejected: u64,
    /// Time a call waited for a function slot, 50th percentile, seconds.
    pub wait_p50_s: f64,
    /// 95th percentile wait, seconds.
    pub wait_p95_s: f64,
    /// 99th percentile wait, seconds.
    pub wait_p99_s: f64,
    /// Largest share of the calls one replica served (0–1).
    pub busiest_share: f64,
    /// Smallest share of the calls one replica served (0–1).
    pub least_share: f64,
    /// Replicas that served no call at all.
    pub idle_replicas: usize,
    /// Most calls on one replica at once (running and waiting).
    pub peak_on_one: usize,
    /// Connections opened (the first ones and every reconnection).
    pub connections: u64,
}

/// The answer for a trace: a run per replica count, with and without
/// ageing, and the smallest counts that meet the target.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Sizing {
    /// The target: the 99th percentile wait for a function slot, seconds,
    /// with no call rejected.
    pub target_wait_p99_s: f64,
    /// Client connections modelled.
    pub clients: usize,
    /// Function slots per replica.
    pub slots: usize,
    /// The age of the "on" runs, seconds.
    pub max_connection_age_s: f64,
    /// The runs, by replica count, ageing on then off.
    pub runs: Vec<ReplicaRun>,
    /// The fewest replicas meeting the target with ageing on, if any.
    pub with_ageing: Option<usize>,
    /// The fewest replicas meeting the target with ageing off, if any.
    pub without_ageing: Option<usize>,
    /// The most calls at once from one client (all on its replica of the
    /// moment, whatever the replica count); with several clients, of one
    /// client's share of the trace as drawn.
    pub peak_per_client: usize,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Event {
    /// A call on replica `.0` ends.
    Finish(usize),
    /// Client `.0`'s connection reaches its age.
    Age(usize),
    /// Trace entry `.0` arrives.
    Arrive(usize),
}

/// Replays `trace` on `replicas` replicas (at least 1), aged with
/// `model.age` when `ageing`, else not.
pub fn run(
    trace: &[TraceEntry],
    replicas: usize,
    ageing: bool,
    model: &ReplicaModel,
) -> ReplicaRun {
    let replicas = replicas.max(1);
    let clients = model.clients.max(1);
    let slots = model.slots.max(1);
    let mut rng = StdRng::seed_from_u64(model.seed);
    let mut turn = 0usize;
    let mut pick = |rng: &mut StdRng| match model.balance {
        Balance::Random => rng.random_range(0..replicas),
        Balance::RoundRobin => {
            let r = turn % replicas;
            turn += 1;
            r
        }
    };
    // Events in time order; ties: finishes, then ages, then arrivals.
    let mut events: BinaryHeap<Reverse<(Duration, Event)>> = BinaryHeap::new();
    let mut on: Vec<usize> = Vec::with_capacity(clients);
    let mut connections = 0u64;
    for c in 0..clients {
        on.push(pick(&mut rng));
        connections += 1;
        if ageing {
            let age = model.age.jittered(rng.random::<f64>());
            events.push(Reverse((age, Event::Age(c))));
        }
    }
    if let Some(first) = trace.first() {
        events.push(Reverse((first.at, Event::Arrive(0))));
    }
    let mut running = vec![0usize; replicas];
    let mut waiting: Vec<VecDeque<(Duration, Duration)>> = vec![VecDeque::new(); replicas];
    let mut served = vec![0u64; replicas];
    let mut waits: Vec<Duration> = Vec::with_capacity(trace.len());
    let mut out = ReplicaRun {
        replicas,
        ageing,
        calls: trace.len() as u64,
        ..ReplicaRun::default()
    };
    while let Some(Reverse((now, event))) = events.pop() {
        match event {
            Event::Arrive(i) => {
                if let Some(next) = trace.get(i + 1) {
                    events.push(Reverse((next.at, Event::Arrive(i + 1))));
                }
                let client = rng.random_range(0..clients);
                let r = on[client];
                if running[r] < slots {
                    running[r] += 1;
                    served[r] += 1;
                    waits.push(Duration::ZERO);
                    events.push(Reverse((now + trace[i].run, Event::Finish(r))));
                } else if waiting[r].len() < model.max_queued {
                    waiting[r].push_back((now, trace[i].run));
                } else {
                    out.rejected += 1;
                }
                out.peak_on_one = out.peak_on_one.max(running[r] + waiting[r].len());
            }
            Event::Finish(r) => {
                running[r] -= 1;
                if let Some((arrived, run)) = waiting[r].pop_front() {
                    running[r] += 1;
                    served[r] += 1;
                    waits.push(now.saturating_sub(arrived));
                    events.push(Reverse((now + run, Event::Finish(r))));
                }
            }
            Event::Age(c) => {
                // No more calls: the connections need not be followed.
                if events
                    .iter()
                    .all(|Reverse((_, e))| matches!(e, Event::Age(_)))
                {
                    continue;
                }
                on[c] = pick(&mut rng);
                connections += 1;
                let age = model.age.jittered(rng.random::<f64>());
                events.push(Reverse((now + age, Event::Age(c))));
            }
        }
    }
    waits.sort_unstable();
    out.wait_p50_s = percentile(&waits, 50.0);
    out.wait_p95_s = percentile(&waits, 95.0);
    out.wait_p99_s = percentile(&waits, 99.0);
    let total = served.iter().sum::<u64>().max(1) as f64;
    out.busiest_share = served.iter().copied().max().unwrap_or(0) as f64 / total;
    out.least_share = served.iter().copied().min().unwrap_or(0) as f64 / total;
    out.idle_replicas = served.iter().filter(|n| **n == 0).count();
    out.connections = connections;
    out
}

/// Runs 1..=`max_replicas` replicas with and without ageing and answers
/// the fewest that keep the 99th percentile wait for a slot within
/// `target_wait_p99` with no call rejected.
pub fn size(
    trace: &[TraceEntry],
    model: &ReplicaModel,
    max_replicas: usize,
    target_wait_p99: Duration,
) -> Sizing {
    let target = target_wait_p99.as_secs_f64();
    let meets = |r: &ReplicaRun| r.rejected == 0 && r.wait_p99_s <= target;
    let mut runs = Vec::new();
    let (mut with_ageing, mut without_ageing) = (None, None);
    for n in 1..=max_replicas.max(1) {
        for ageing in [true, false] {
            let r = run(trace, n, ageing, model);
            let answer = if ageing {
                &mut with_ageing
            } else {
                &mut without_ageing
            };
            if answer.is_none() && meets(&r) {
                *answer = Some(n);
            }
            runs.push(r);
        }
    }
    // One client alone on a replica with slots to spare: its calls at once
    // (one client's share of the calls, drawn as the runs draw them).
    let alone = ReplicaModel {
        clients: 1,
        slots: usize::MAX,
        ..model.clone()
    };
    let clients = model.clients.max(1);
    let mut rng = StdRng::seed_from_u64(model.seed);
    let mine: Vec<TraceEntry> = trace
        .iter()
        .filter(|_| clients == 1 || rng.random_range(0..clients) == 0)
        .cloned()
        .collect();
    let peak_per_client = run(&mine, 1, false, &alone).peak_on_one;
    Sizing {
        target_wait_p99_s: target,
        clients: model.clients.max(1),
        slots: model.slots.max(1),
        max_connection_age_s: model.age.max_age().as_secs_f64(),
        runs,
        with_ageing,
        without_ageing,
        peak_per_client,
    }
}

/// The sizing as a table (one row per replica count and ageing) and the
/// answer in words.
pub fn sizing_table(s: &Sizing) -> String {
    let header = [
        "replicas",
        "ageing",
        "calls",
        "rejected",
        "wait p50",
        "wait p95",
        "wait p99",
        "busiest",
        "least",
        "idle replicas",
        "peak on one",
        "connections",
    ];
    let rows = s
        .runs
        .iter()
        .map(|r| {
            vec![
                r.replicas.to_string(),
                if r.ageing { "on" } else { "off" }.to_string(),
                r.calls.to_string(),
                r.rejected.to_string(),
                format!("{:.3}s", r.wait_p50_s),
                format!("{:.3}s", r.wait_p95_s),
                format!("{:.3}s", r.wait_p99_s),
                format!("{:.0}%", 100.0 * r.busiest_share),
                format!("{:.0}%", 100.0 * r.least_share),
                r.idle_replicas.to_string(),
                r.peak_on_one.to_string(),
                r.connections.to_string(),
            ]
        })
        .collect();
    let mut out = aligned(&header, rows);
    let most = s.runs.iter().map(|r| r.replicas).max().unwrap_or(0);
    let answer = |n: Option<usize>| match n {
        Some(n) => format!("{n} replica{}", if n == 1 { "" } else { "s" }),
        None => format!("none up to {most}"),
    };
    out.push_str(&format!(
        "replicas for a p99 wait within {:.3}s and nothing rejected: {} with connection ageing \
         ({:.0}s), {} without\n",
        s.target_wait_p99_s,
        answer(s.with_ageing),
        s.max_connection_age_s,
        answer(s.without_ageing),
    ));
    if s.with_ageing.is_none() && s.peak_per_client > s.slots {
        out.push_str(&format!(
            "why: at any moment at most {} replica{} carr{} calls (one per client connection), \
             and one client's calls reach {} at once against {} slots per replica: raise \
             --max-concurrent-functions, or add client connections (porch-server replicas)\n",
            s.clients,
            if s.clients == 1 { "" } else { "s" },
            if s.clients == 1 { "ies" } else { "y" },
            s.peak_per_client,
            s.slots,
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: f64) -> Duration {
        Duration::from_secs_f64(v)
    }

    /// `n` calls, one every `gap` seconds, each running `run` seconds.
    fn steady(n: usize, gap: f64, run: f64) -> Vec<TraceEntry> {
        (0..n)
            .map(|i| TraceEntry {
                at: s(i as f64 * gap),
                image: "f".into(),
                run: s(run),
            })
            .collect()
    }

    fn model(clients: usize, slots: usize, age_s: u64) -> ReplicaModel {
        ReplicaModel {
            slots,
            clients,
            age: ConnectionAge::new(Duration::from_secs(age_s), Duration::from_secs(600))
                .unwrap()
                .unwrap(),
            ..ReplicaModel::default()
        }
    }

    #[test]
    fn without_ageing_one_connection_keeps_one_replica_busy() {
        // 1 call a second for an hour, 3 replicas, one client.
        let trace = steady(3600, 1.0, 0.5);
        let off = run(&trace, 3, false, &model(1, 8, 60));
        assert_eq!(off.busiest_share, 1.0);
        assert_eq!(off.idle_replicas, 2);
        assert_eq!(off.connections, 1);
        let on = run(&trace, 3, true, &model(1, 8, 60));
        assert_eq!(on.idle_replicas, 0);
        // About 60 connections over the hour, each to a random replica.
        assert!((50..=70).contains(&on.connections), "{on:?}");
        assert!(on.least_share > 0.15 && on.busiest_share < 0.6, "{on:?}");
    }

    #[test]
    fn in_turn_the_shares_even_out_within_a_few_ages() {
        let trace = steady(600, 1.0, 0.1);
        let mut m = model(1, 8, 60);
        m.balance = Balance::RoundRobin;
        let r = run(&trace, 3, true, &m);
        assert!(r.least_share > 0.25 && r.busiest_share < 0.42, "{r:?}");
    }

    #[test]
    fn one_client_needs_slots_not_replicas() {
        // 20 calls at once every 10 s, each 2 s: 20 concurrent calls from one
        // client, 8 slots per replica.
        let trace: Vec<TraceEntry> = (0..60)
            .flat_map(|burst| {
                (0..20).map(move |_| TraceEntry {
                    at: s(burst as f64 * 10.0),
                    image: "f".into(),
                    run: s(2.0),
                })
            })
            .collect();
        let sizing = size(&trace, &model(1, 8, 60), 4, Duration::from_secs(1));
        assert_eq!(sizing.with_ageing, None, "{sizing:?}");
        assert_eq!(sizing.without_ageing, None);
        assert_eq!(sizing.peak_per_client, 20);
        for r in &sizing.runs {
            assert!(r.wait_p99_s >= 3.9, "queued behind two rounds: {r:?}");
        }
        let text = sizing_table(&sizing);
        assert!(
            text.contains("none up to 4 with connection ageing"),
            "{text}"
        );
        assert!(
            text.contains("one client's calls reach 20 at once against 8 slots"),
            "{text}"
        );
        // With 24 slots one replica does it.
        let sizing = size(&trace, &model(1, 24, 60), 4, Duration::from_secs(1));
        assert_eq!(
            (sizing.with_ageing, sizing.without_ageing),
            (Some(1), Some(1))
        );
    }

    #[test]
    fn several_clients_spread_over_replicas_with_ageing_and_stay_put_without() {
        // 4 clients, 5 calls at once in all, 4 slots per replica: one
        // replica is not enough, and without ageing the 4 connections stay
        // on the replicas they first drew.
        let trace = steady(36_000, 0.1, 0.5);
        let m = model(4, 4, 60);
        let sizing = size(&trace, &m, 8, Duration::from_secs(1));
        let n = sizing.with_ageing.expect("a count works with ageing");
        assert!((2..=4).contains(&n), "{}", sizing_table(&sizing));
        for r in &sizing.runs {
            if r.ageing {
                assert_eq!(r.idle_replicas, 0, "every replica gets turns: {r:?}");
                assert!(r.connections > 200, "{r:?}");
            } else {
                assert_eq!(r.connections, 4, "{r:?}");
                assert!(r.idle_replicas >= r.replicas.saturating_sub(4), "{r:?}");
            }
        }
        let eight_off = sizing
            .runs
            .iter()
            .find(|r| r.replicas == 8 && !r.ageing)
            .unwrap();
        assert!(eight_off.idle_replicas >= 4, "{eight_off:?}");
        // Deterministic: the same seed, the same answer.
        assert_eq!(size(&trace, &m, 8, Duration::from_secs(1)), sizing);
    }

    #[test]
    fn queues_are_bounded_and_refusals_counted() {
        let trace: Vec<TraceEntry> = (0..10)
            .map(|_| TraceEntry {
                at: s(0.0),
                image: "f".into(),
                run: s(1.0),
            })
            .collect();
        let m = ReplicaModel {
            slots: 2,
            max_queued: 3,
            ..model(1, 2, 60)
        };
        let r = run(&trace, 1, false, &m);
        assert_eq!(r.rejected, 5);
        assert_eq!(r.peak_on_one, 5);
        assert_eq!(r.wait_p99_s, 2.0);
    }
}
