//! Porch's render time through us versus through Porch's own Go function
//! runner v1.5.3, on the Porch test bed (`testbed/src/porch_support.rs`):
//! porch-server v1.5.3 on a real kube-apiserver + etcd with a `file://` git
//! repository updates the resources of one draft package revision of 50
//! Deployments whose Kptfile runs apply-setters and a starlark mutator (both
//! catalog v0.x binaries that porch-server does not run in-process), so each
//! update is one render of two function calls through the runner behind
//! `--function-runner`.
//!
//! Two identical beds (each its own etcd, kube-apiserver, git repository
//! and porch-server) run side by side, one rendering through our runner and
//! one through Porch's, with the same catalog binaries and config.yaml (exec
//! runtime). Updates alternate between the beds one by one (which goes first
//! alternates too), so both see the same machine load; halfway the runners
//! swap beds, so neither bed's own quirks favour one runner. After a few
//! untimed updates per bed and phase, each timed sample is the whole `PUT
//! packagerevisionresources/<name>` as a Porch user waits for it. Prints the
//! median, p90 and spread of each and the ratio of medians.
//!
//! Needs `scripts/build-porch.sh`, the catalog functions and the
//! kube-apiserver build (`KUBEBUILDER_ASSETS`), as `scripts/test.sh` sets up.
//! Run: `cargo bench --bench porch_render`.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use krm_fn_testbed::porch_support;

use porch_support::{Peer, PorchBed, deployments, setters_and_starlark_pipeline};

/// Deployments in the package.
const RESOURCES: usize = 50;
/// Timed updates per runner in each of the two phases.
const UPDATES_PER_PHASE: usize = 40;
/// Untimed updates per bed at the start of each phase.
const WARM_UP: usize = 3;

fn quantile(sorted: &[Duration], q: f64) -> Duration {
    let i = ((sorted.len() - 1) as f64 * q).round() as usize;
    sorted[i]
}

fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1e3)
}

/// One draft package revision on its own bed, and the files it is updated with.
struct Contender {
    bed: PorchBed,
    name: String,
    files: BTreeMap<String, String>,
}

impl Contender {
    async fn start() -> Contender {
        let bed = PorchBed::start(None, &[]).await;
        let name = bed.init("bench", "v1").await;
        let mut files: BTreeMap<String, String> = setters_and_starlark_pipeline("bench");
        let (path, text) = deployments(RESOURCES);
        files.insert(path, text);
        Contender { bed, name, files }
    }

    fn peer(&self) -> &'static str {
        match &self.bed.runner {
            Some(porch_support::FunctionRunner::Ours(_)) => Peer::Ours.name(),
            Some(porch_support::FunctionRunner::Porch(_)) => Peer::Porch.name(),
            None => "no runner",
        }
    }

    /// One update (one render); its wall time.
    async fn update(&self) -> Duration {
        let started = Instant::now();
        let answer = self.bed.update_resources(&self.name, &self.files).await;
        let took = started.elapsed();
        let prr = answer.unwrap_or_else(|e| {
            panic!(
                "render through {} failed: {e}\n{}",
                self.peer(),
                self.bed.porch.log_tail(20)
            )
        });
        let status = &prr.data["status"]["renderStatus"];
        assert_eq!(status["error"].as_str().unwrap_or(""), "", "{status}");
        took
    }
}

async fn run() {
    let mut beds = [Contender::start().await, Contender::start().await];
    let mut times: BTreeMap<Peer, Vec<Duration>> = BTreeMap::new();
    let mut phases = Vec::new();
    for phase in 0..2 {
        let peers = if phase == 0 {
            [Peer::Ours, Peer::Porch]
        } else {
            [Peer::Porch, Peer::Ours]
        };
        for (bed, peer) in beds.iter_mut().zip(peers) {
            bed.bed.switch_runner(peer, &["--log-level=0"]);
        }
        for _ in 0..WARM_UP {
            for bed in &beds {
                bed.update().await;
            }
        }
        let mut phase_times = [Vec::new(), Vec::new()];
        for round in 0..UPDATES_PER_PHASE {
            let order = if round % 2 == 0 { [0, 1] } else { [1, 0] };
            for i in order {
                let took = beds[i].update().await;
                times.entry(peers[i]).or_default().push(took);
                phase_times[i].push(took);
            }
        }
        phases.push((peers, phase_times));
    }
    for bed in &mut beds {
        bed.bed.stop_runner();
    }

    println!(
        "porch render: porch-server {} updating a package revision of {RESOURCES} Deployments \
         (apply-setters + starlark through the function runner); {} timed updates per runner, \
         interleaved one by one on two identical beds, runners swapping beds halfway",
        porch_support::PORCH_VERSION,
        2 * UPDATES_PER_PHASE
    );
    // Updates of one round ran back to back: their difference is the
    // paired estimate, least touched by load that changes over the run.
    let mut paired: Vec<f64> = times[&Peer::Ours]
        .iter()
        .zip(&times[&Peer::Porch])
        .map(|(o, p)| (o.as_secs_f64() - p.as_secs_f64()) * 1e3)
        .collect();
    paired.sort_by(f64::total_cmp);
    let mut medians = BTreeMap::new();
    for (peer, mut t) in times {
        t.sort();
        let p50 = quantile(&t, 0.5);
        println!(
            "  {:<32} p50 {:>9}  p90 {:>9}  min {:>9}  max {:>9}  (n={})",
            peer.name(),
            ms(p50),
            ms(quantile(&t, 0.9)),
            ms(t[0]),
            ms(t[t.len() - 1]),
            t.len()
        );
        medians.insert(peer, p50);
    }
    let (ours, porch) = (medians[&Peer::Ours], medians[&Peer::Porch]);
    println!(
        "  ours / porch at p50: {:.3}x ({}; target: not slower)",
        ours.as_secs_f64() / porch.as_secs_f64(),
        if ours <= porch { "met" } else { "NOT met" }
    );
    println!(
        "  median paired difference (ours - porch, same round): {:+.1} ms",
        paired[paired.len() / 2]
    );
    for (phase, (peers, mut t)) in phases.into_iter().enumerate() {
        for v in &mut t {
            v.sort();
        }
        println!(
            "  phase {}: bed 1 {} p50 {}, bed 2 {} p50 {}",
            phase + 1,
            peers[0].name(),
            ms(quantile(&t[0], 0.5)),
            peers[1].name(),
            ms(quantile(&t[1], 0.5))
        );
    }
}

fn main() {
    // `cargo bench` passes `--bench`; nothing to parse.
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(run());
}
