//! The exec path at the machine's limit, side by side with Porch's Go
//! function runner v1.5.3: both serve the same catalog `set-namespace`
//! binary with the same `config.yaml`, and the same load tool (ghz, built by
//! `scripts/build-ghz.sh`) drives them, A/B interleaved round by round
//! (which runner goes first alternates), so both see the same machine load.
//!
//! Measured, per runner:
//! - **large inputs** (1, 5 and 6 MiB ResourceLists of Deployments, one
//!   caller): the server's own CPU per call (its `utime + stime` from
//!   `/proc/<pid>/stat`, plus its resident function supervisor's) against
//!   the function's (the reaped children's `cutime + cstime` in the same
//!   run, the resident supervisor's reaped children and its live per-call
//!   supervisors' own and reaped children's included), and the
//!   median call time;
//! - **one caller** (the small ResourceList of `benches/evaluate.rs`): p50
//!   and p99, beside the bare-spawn floor (the binary run directly, no
//!   server);
//! - **16 callers**: calls/s, p50, p99, the server's and the function's CPU
//!   per call, and the CPU ceiling (cores ÷ the function's CPU seconds per
//!   call) with the fraction of it reached;
//! - **memory**: RSS when idle and the peak (`VmHWM`) after the 16-caller
//!   rounds, krm-fn-runner's with the proportional set size (`Pss`) of its
//!   resident function supervisor and that one's live per-call supervisors
//!   added (they start with the server; after the 16-caller rounds the
//!   pool is at its largest).
//!
//! A third server, krm-fn-runner with every sandbox layer turned off
//! (`--sandbox-allow new-privileges,filesystem,syscalls,network`), runs in
//! the same rounds, so the sandbox's cost per call is read beside Porch's
//! runner under the same load (the last two columns).
//!
//! Prints a Markdown table and writes a JSON summary (machine cores, load
//! average before and after, every figure) to `throughput.json` in the
//! target directory in use (`CARGO_TARGET_DIR` or `build.target-dir` when
//! set, else `target/`), or to `KRM_FN_BENCH_JSON`. Needs the catalog functions, Porch's runner
//! (`scripts/build-porch.sh`, or `KRM_FN_PORCH_RUNNER`) and ghz (or
//! `KRM_FN_GHZ_BIN`). Run: `cargo bench --bench throughput`.
//! `KRM_FN_BENCH_ROUNDS` sets the number of A/B rounds (default 4).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use krm_fn_testbed::common;

/// The runner-side message limit for every runner in this bench: room for
/// a 6 MiB ResourceList and the function's larger output.
const MAX_MESSAGE: usize = 16 << 20;

/// Calls per runner and round at 16 callers.
const CONCURRENT_CALLS: usize = 320;

/// Calls per runner and round with one caller and the small input.
const SEQUENTIAL_CALLS: usize = 60;

/// Calls per runner, round and size with large inputs.
const LARGE_CALLS: usize = 2;

const SMALL_INPUT: &str = "apiVersion: config.kubernetes.io/v1\nkind: ResourceList\nitems:\n- apiVersion: apps/v1\n  kind: Deployment\n  metadata:\n    name: web\n  spec:\n    replicas: 3\n    template:\n      spec:\n        containers:\n        - name: nginx\n          image: nginx:1.14\n- apiVersion: v1\n  kind: ConfigMap\n  metadata:\n    name: cm\n  data:\n    k: v\nfunctionConfig:\n  apiVersion: v1\n  kind: ConfigMap\n  metadata:\n    name: fn\n  data:\n    namespace: bench\n";

/// A ResourceList of Deployments (as kyaml writes them) of at least `bytes`.
fn large_input(bytes: usize) -> Vec<u8> {
    let mut s = String::from("apiVersion: config.kubernetes.io/v1\nkind: ResourceList\nitems:\n");
    let mut i = 0;
    while s.len() < bytes {
        s.push_str(&format!(
            "- apiVersion: apps/v1\n  kind: Deployment\n  metadata:\n    name: app-{i}\n    \
             labels:\n      app: app-{i}\n      tier: backend\n  spec:\n    replicas: 3\n    \
             selector:\n      matchLabels:\n        app: app-{i}\n    template:\n      \
             metadata:\n        labels:\n          app: app-{i}\n      spec:\n        \
             containers:\n        - name: main\n          image: \"registry.example.com/app:{i}\"\n          \
             args: [\"--port\", \"8080\", '--verbose']\n          ports:\n          - containerPort: 8080\n"
        ));
        i += 1;
    }
    s.push_str(
        "functionConfig:\n  apiVersion: v1\n  kind: ConfigMap\n  metadata:\n    name: fn\n  \
         data:\n    namespace: bench\n",
    );
    s.into_bytes()
}

/// `EvaluateFunctionRequest` in protobuf wire format, for ghz's `-B`.
fn request_message(resource_list: &[u8], image: &str) -> Vec<u8> {
    fn field(out: &mut Vec<u8>, number: u8, bytes: &[u8]) {
        out.push(number << 3 | 2);
        let mut n = bytes.len();
        while n >= 0x80 {
            out.push((n as u8) | 0x80);
            n >>= 7;
        }
        out.push(n as u8);
        out.extend_from_slice(bytes);
    }
    let mut out = Vec::with_capacity(resource_list.len() + image.len() + 16);
    field(&mut out, 1, resource_list);
    field(&mut out, 2, image.as_bytes());
    out
}

/// A runner under test.
struct Peer {
    name: &'static str,
    port: u16,
    process: Process,
}

enum Process {
    Ours(common::Runner),
    Porch(Child),
}

impl Drop for Peer {
    fn drop(&mut self) {
        if let Process::Porch(child) = &mut self.process {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Peer {
    fn pid(&self) -> u32 {
        match &self.process {
            Process::Ours(r) => r.pid(),
            Process::Porch(c) => c.id(),
        }
    }
}

fn exec_flags() -> Vec<String> {
    let catalog = common::catalog_dir();
    vec![
        format!("--config={}", catalog.join("config.yaml").display()),
        format!("--functions={}", catalog.join("bin").display()),
        "--disable-runtimes=pod".into(),
        format!("--max-request-body-size={MAX_MESSAGE}"),
        "--log-level=0".into(),
    ]
}

/// Every sandbox layer, for `--sandbox-allow`.
const NO_SANDBOX: &str = "--sandbox-allow=new-privileges,filesystem,syscalls,network";

/// krm-fn-runner with `extra` flags, named `name`.
fn start_ours(name: &'static str, extra: &[&str]) -> Peer {
    let port = common::free_port();
    let listen = format!("--listen=127.0.0.1:{port}");
    let mut args = vec![listen];
    args.extend(exec_flags());
    args.extend(extra.iter().map(|f| f.to_string()));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    Peer {
        name,
        port,
        process: Process::Ours(common::Runner::start(&args)),
    }
}

fn start_porch(binary: &Path) -> Peer {
    let port = common::free_port();
    let child = Command::new(binary)
        .arg(format!("--port={port}"))
        .args(exec_flags())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start porch-function-runner");
    let deadline = Instant::now() + Duration::from_secs(20);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "Porch's runner did not listen");
        std::thread::sleep(Duration::from_millis(20));
    }
    Peer {
        name: "porch-function-runner v1.5.3",
        port,
        process: Process::Porch(child),
    }
}

/// CPU seconds of a process: its own (all threads) and its reaped children's.
#[derive(Debug, Clone, Copy, Default)]
struct Cpu {
    own: f64,
    children: f64,
}

impl std::ops::Sub for Cpu {
    type Output = Cpu;
    fn sub(self, o: Cpu) -> Cpu {
        Cpu {
            own: self.own - o.own,
            children: self.children - o.children,
        }
    }
}

fn cpu(pid: u32) -> Cpu {
    try_cpu(pid).unwrap()
}

/// [`cpu`], or `None` when the process is gone.
fn try_cpu(pid: u32) -> Option<Cpu> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let fields: Vec<f64> = stat[stat.rfind(')')? + 2..]
        .split(' ')
        .map(|f| f.parse().unwrap_or(0.0))
        .collect();
    // SAFETY: sysconf has no preconditions.
    let tick = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    // Fields 14-17 of stat(5), counted from `state` (field 3) here.
    Some(Cpu {
        own: (fields[11] + fields[12]) / tick,
        children: (fields[13] + fields[14]) / tick,
    })
}

/// [`cpu`] of the server `pid` with its resident function supervisor's
/// (`krm-fn-supervisor --resident`, a live child of the server) added: the
/// resident process's own CPU to the server's, and to the functions' its
/// reaped children's and its live children's own and reaped children's
/// (the per-call supervisors, which stay in its pool from call to call,
/// with their functions). A per-call supervisor program, reaped by the
/// server itself, is in the server's children's CPU already.
fn cpu_with_resident(pid: u32) -> Cpu {
    let mut total = cpu(pid);
    if let Some(resident) = resident_of(pid) {
        let r = cpu(resident);
        total.own += r.own;
        total.children += r.children;
        for child in live_children(resident) {
            if let Some(c) = try_cpu(child) {
                total.children += c.own + c.children;
            }
        }
    }
    total
}

/// The live children of the single-threaded process `pid`.
fn live_children(pid: u32) -> Vec<u32> {
    std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))
        .unwrap_or_default()
        .split_whitespace()
        .filter_map(|c| c.parse().ok())
        .collect()
}

/// The resident function supervisor of the server `pid`, when one runs.
fn resident_of(pid: u32) -> Option<u32> {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).ok()?;
    tasks.flatten().find_map(|task| {
        let children = std::fs::read_to_string(task.path().join("children")).unwrap_or_default();
        children.split_whitespace().find_map(|child| {
            let cmdline = std::fs::read(format!("/proc/{child}/cmdline")).ok()?;
            let arg = cmdline.split(|&b| b == 0).nth(1)?;
            (arg == b"--resident").then(|| child.parse().ok())?
        })
    })
}

/// [`status_kib`] of the server `pid` plus the proportional set size
/// (`Pss` of `/proc/<pid>/smaps_rollup`: each shared page divided among the
/// processes that map it) of its resident function supervisor and that
/// one's live children (idle spares and per-call supervisors, which share
/// all but about 64 KiB of their pages with it), when one runs.
fn status_kib_with_resident(pid: u32, key: &str) -> u64 {
    status_kib(pid, key)
        + resident_of(pid).map_or(0, |r| {
            pss_kib(r) + live_children(r).into_iter().map(pss_kib).sum::<u64>()
        })
}

/// The `Pss` of `/proc/<pid>/smaps_rollup` in KiB, or 0 when the process is
/// gone.
fn pss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup"))
        .map_or(0, |s| status_field(&s, "Pss"))
}

/// A `/proc/<pid>/status` figure in KiB (`VmRSS`, `VmHWM`).
fn status_kib(pid: u32, key: &str) -> u64 {
    status_field(
        &std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap(),
        key,
    )
}

/// The figure `key` in the text of a `/proc/<pid>/status` file, 0 without it.
fn status_field(status: &str, key: &str) -> u64 {
    status
        .lines()
        .find_map(|l| {
            l.strip_prefix(key)?
                .trim_start_matches(':')
                .split_whitespace()
                .next()?
                .parse()
                .ok()
        })
        .unwrap_or(0)
}

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .unwrap_or_default()
        .split_whitespace()
        .take(3)
        .collect::<Vec<_>>()
        .join(" ")
}

/// One ghz run's figures.
#[derive(Debug, Clone, Copy)]
struct Run {
    calls: usize,
    rps: f64,
    p50: f64,
    p99: f64,
    cpu: Cpu,
}

/// Runs ghz against `peer` with `message` (protobuf wire format), `calls`
/// calls from `callers` callers on one connection.
fn ghz(ghz: &Path, peer: &Peer, message: &Path, callers: usize, calls: usize) -> Run {
    let proto = Path::new(env!("CARGO_MANIFEST_DIR")).join("proto/evaluator.proto");
    let before = cpu_with_resident(peer.pid());
    let out = Command::new(ghz)
        .args([
            "--insecure",
            "--proto",
            proto.to_str().unwrap(),
            "--call",
            "evaluator.FunctionEvaluator.EvaluateFunction",
            "-B",
            message.to_str().unwrap(),
            "-c",
            &callers.to_string(),
            "-n",
            &calls.to_string(),
            "--connections=1",
            "--timeout=120s",
            "--max-recv-message-size=64MiB",
            "--max-send-message-size=64MiB",
            "--format=json",
        ])
        .arg(format!("127.0.0.1:{}", peer.port))
        .stderr(Stdio::inherit())
        .output()
        .expect("run ghz");
    let used = cpu_with_resident(peer.pid()) - before;
    assert!(out.status.success(), "ghz failed");
    let report: Value = serde_json::from_slice(&out.stdout).expect("ghz's JSON report");
    let quantile = |q: f64| {
        report["latencyDistribution"]
            .as_array()
            .and_then(|d| d.iter().find(|x| x["percentage"].as_f64() == Some(q)))
            .and_then(|x| x["latency"].as_f64())
            .unwrap_or(f64::NAN)
            / 1e6
    };
    let ok = report["statusCodeDistribution"]["OK"].as_u64().unwrap_or(0) as usize;
    assert_eq!(
        ok, calls,
        "not every call succeeded: {}",
        report["errorDistribution"]
    );
    Run {
        calls,
        rps: report["rps"].as_f64().unwrap_or(0.0),
        p50: quantile(50.0),
        p99: quantile(99.0),
        cpu: used,
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    if v.is_empty() {
        return f64::NAN;
    }
    v[v.len() / 2]
}

fn range(v: &[f64]) -> (f64, f64) {
    let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    (lo, hi)
}

/// Rounds of one scenario, interleaved: `runs[peer]` per round; each
/// round starts with the next peer (A B C, B C A, C A B, …).
fn interleaved(rounds: usize, peers: &[Peer], mut one: impl FnMut(&Peer) -> Run) -> Vec<Vec<Run>> {
    let n = peers.len();
    let mut runs = vec![Vec::new(); n];
    for round in 0..rounds {
        for i in (0..n).map(|k| (round + k) % n) {
            runs[i].push(one(&peers[i]));
        }
    }
    runs
}

/// One bare run of the binary: spawn, write stdin, read stdout (ms).
fn bare_ms(binary: &Path) -> f64 {
    let started = Instant::now();
    let mut child = Command::new(binary)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let writer = std::thread::spawn(move || stdin.write_all(SMALL_INPUT.as_bytes()));
    let out = child.wait_with_output().unwrap();
    writer.join().unwrap().unwrap();
    assert!(out.status.success());
    started.elapsed().as_secs_f64() * 1e3
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        // `cargo bench -- --list` and test discovery: nothing to list.
        return;
    }
    let rounds: usize = std::env::var("KRM_FN_BENCH_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(4);
    let ghz_bin = common::built_tool("KRM_FN_GHZ_BIN", "build-ghz.sh");
    let porch_bin = match std::env::var_os("KRM_FN_PORCH_RUNNER") {
        Some(p) => PathBuf::from(p),
        None => {
            let out = Command::new("bash")
                .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/build-porch.sh"))
                .arg("porch-function-runner")
                .stderr(Stdio::inherit())
                .output()
                .expect("run scripts/build-porch.sh");
            assert!(out.status.success(), "scripts/build-porch.sh failed");
            PathBuf::from(String::from_utf8(out.stdout).unwrap().trim())
        }
    };
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let load_before = load_average();
    let image = common::catalog_image("set-namespace");
    let work = tempfile::tempdir().unwrap();

    let peers = [
        start_ours("krm-fn-runner", &[]),
        start_porch(&porch_bin),
        start_ours("krm-fn-runner, sandbox off", &[NO_SANDBOX]),
    ];
    std::thread::sleep(Duration::from_secs(1));
    // Before any call (the resident function supervisor and its spares
    // started with the server).
    let idle_rss: Vec<u64> = peers
        .iter()
        .map(|p| status_kib_with_resident(p.pid(), "VmRSS"))
        .collect();

    let small = work.path().join("small.bin");
    std::fs::write(&small, request_message(SMALL_INPUT.as_bytes(), &image)).unwrap();
    // Warm up both (page cache, connection set-up).
    for p in &peers {
        ghz(&ghz_bin, p, &small, 4, 20);
    }

    // One caller, the bare-spawn floor interleaved with it.
    let mut bare = Vec::new();
    let sequential = interleaved(rounds, &peers, |p| {
        for _ in 0..SEQUENTIAL_CALLS / 4 {
            bare.push(bare_ms(&common::catalog_dir().join("bin/set-namespace")));
        }
        ghz(&ghz_bin, p, &small, 1, SEQUENTIAL_CALLS)
    });

    // 16 callers.
    let concurrent = interleaved(rounds, &peers, |p| {
        ghz(&ghz_bin, p, &small, 16, CONCURRENT_CALLS)
    });
    let peak_rss: Vec<u64> = peers
        .iter()
        .map(|p| status_kib_with_resident(p.pid(), "VmHWM"))
        .collect();
    let resident_rss_kib = resident_of(peers[0].pid()).map(|r| status_kib(r, "VmRSS"));

    // Large inputs.
    let mut large = Vec::new();
    for mib in [1usize, 5, 6] {
        let file = work.path().join(format!("large-{mib}.bin"));
        let input = large_input(mib << 20);
        std::fs::write(&file, request_message(&input, &image)).unwrap();
        let runs = interleaved(rounds.div_ceil(2), &peers, |p| {
            ghz(&ghz_bin, p, &file, 1, LARGE_CALLS)
        });
        large.push((mib, input.len(), runs));
    }
    let load_after = load_average();

    // Summaries.
    let ms = |s: f64| s * 1e3;
    let per_call = |runs: &[Run], f: fn(&Cpu) -> f64| {
        let calls: usize = runs.iter().map(|r| r.calls).sum();
        runs.iter().map(|r| f(&r.cpu)).sum::<f64>() / calls as f64
    };
    let mut summary = json!({
        "machine": {
            "cores": cores,
            "load_average_before": load_before,
            "load_average_after": load_after,
            "rounds": rounds,
        },
        "bare_spawn_ms": {"p50": median(bare.clone()), "runs": bare.len()},
        "resident_supervisor_rss_kib": resident_rss_kib,
        "runners": [],
    });
    let mut table = vec![
        format!(
            "| | {} | {} | ratio | {} | sandbox on ÷ off |",
            peers[0].name, peers[1].name, peers[2].name
        ),
        "|---|---|---|---|---|---|".to_string(),
    ];
    // Values of the three servers; ratios ours ÷ Porch's and on ÷ off.
    let row = |label: &str, values: [String; 3], ratios: [f64; 2]| {
        format!(
            "| {label} | {} | {} | {:.2} | {} | {:.2} |",
            values[0], values[1], ratios[0], values[2], ratios[1]
        )
    };
    let span = |v: &[f64], unit: &str| {
        let (lo, hi) = range(v);
        if (hi - lo).abs() < 0.05 {
            format!("{lo:.1} {unit}")
        } else {
            format!("{lo:.1}–{hi:.1} {unit}")
        }
    };
    let seq_p50: Vec<Vec<f64>> = sequential
        .iter()
        .map(|r| r.iter().map(|x| x.p50).collect())
        .collect();
    let seq_p99: Vec<Vec<f64>> = sequential
        .iter()
        .map(|r| r.iter().map(|x| x.p99).collect())
        .collect();
    let rps: Vec<Vec<f64>> = concurrent
        .iter()
        .map(|r| r.iter().map(|x| x.rps).collect())
        .collect();
    let c_p50: Vec<Vec<f64>> = concurrent
        .iter()
        .map(|r| r.iter().map(|x| x.p50).collect())
        .collect();
    let c_p99: Vec<Vec<f64>> = concurrent
        .iter()
        .map(|r| r.iter().map(|x| x.p99).collect())
        .collect();
    let own: Vec<f64> = concurrent
        .iter()
        .map(|r| ms(per_call(r, |c| c.own)))
        .collect();
    let child: Vec<f64> = concurrent
        .iter()
        .map(|r| ms(per_call(r, |c| c.children)))
        .collect();
    let ceiling: Vec<f64> = child.iter().map(|c| cores as f64 / (c / 1e3)).collect();
    let reached: Vec<f64> = (0..peers.len())
        .map(|i| median(rps[i].clone()) / ceiling[i])
        .collect();
    let ratio = |v: &[Vec<f64>]| {
        let m = |i: usize| median(v[i].clone());
        [m(0) / m(1), m(0) / m(2)]
    };
    let pair = |v: &[f64]| [v[0] / v[1], v[0] / v[2]];
    table.push(row(
        "1 caller, p50",
        [0, 1, 2].map(|i| span(&seq_p50[i], "ms")),
        ratio(&seq_p50),
    ));
    table.push(row(
        "1 caller, p99",
        [0, 1, 2].map(|i| span(&seq_p99[i], "ms")),
        ratio(&seq_p99),
    ));
    table.push(row(
        "16 callers, calls/s",
        [0, 1, 2].map(|i| span(&rps[i], "")),
        ratio(&rps),
    ));
    table.push(row(
        "16 callers, share of the CPU ceiling (cores ÷ function CPU per call)",
        [0, 1, 2].map(|i| format!("{:.0}% of {:.0}/s", reached[i] * 100.0, ceiling[i])),
        pair(&reached),
    ));
    table.push(row(
        "16 callers, p50",
        [0, 1, 2].map(|i| span(&c_p50[i], "ms")),
        ratio(&c_p50),
    ));
    table.push(row(
        "16 callers, p99",
        [0, 1, 2].map(|i| span(&c_p99[i], "ms")),
        ratio(&c_p99),
    ));
    table.push(row(
        "16 callers, server CPU per call (function's)",
        [0, 1, 2].map(|i| format!("{:.2} ms ({:.1} ms)", own[i], child[i])),
        pair(&own),
    ));
    table.push(row(
        "16 callers, function CPU per call (with its supervisor)",
        [0, 1, 2].map(|i| format!("{:.2} ms", child[i])),
        pair(&child),
    ));
    let mut large_json = Vec::new();
    for (mib, bytes, runs) in &large {
        let own: Vec<f64> = runs.iter().map(|r| ms(per_call(r, |c| c.own))).collect();
        let child: Vec<f64> = runs
            .iter()
            .map(|r| ms(per_call(r, |c| c.children)))
            .collect();
        let p50: Vec<f64> = runs
            .iter()
            .map(|r| median(r.iter().map(|x| x.p50).collect()))
            .collect();
        table.push(row(
            &format!("{mib} MiB ResourceList, server CPU per call (function's; share)"),
            [0, 1, 2].map(|i| {
                format!(
                    "{:.0} ms ({:.0} ms; {:.1}%)",
                    own[i],
                    child[i],
                    100.0 * own[i] / child[i]
                )
            }),
            pair(&own),
        ));
        table.push(row(
            &format!("{mib} MiB ResourceList, call p50"),
            [0, 1, 2].map(|i| format!("{:.0} ms", p50[i])),
            pair(&p50),
        ));
        large_json.push(json!({
            "mib": mib, "bytes": bytes,
            "server_cpu_ms_per_call": own, "function_cpu_ms_per_call": child, "p50_ms": p50,
        }));
    }
    table.push(row(
        "idle RSS",
        [0, 1, 2].map(|i| format!("{:.1} MB", idle_rss[i] as f64 / 1024.0)),
        pair(&idle_rss.iter().map(|&k| k as f64).collect::<Vec<_>>()),
    ));
    table.push(row(
        "peak RSS after 16 callers",
        [0, 1, 2].map(|i| format!("{:.1} MB", peak_rss[i] as f64 / 1024.0)),
        pair(&peak_rss.iter().map(|&k| k as f64).collect::<Vec<_>>()),
    ));
    for (i, p) in peers.iter().enumerate() {
        summary["runners"].as_array_mut().unwrap().push(json!({
            "name": p.name,
            "one_caller": {"p50_ms": seq_p50[i], "p99_ms": seq_p99[i]},
            "sixteen_callers": {
                "calls_per_s": rps[i], "p50_ms": c_p50[i], "p99_ms": c_p99[i],
                "server_cpu_ms_per_call": own[i], "function_cpu_ms_per_call": child[i],
                "cpu_ceiling_calls_per_s": ceiling[i], "share_of_ceiling": reached[i],
            },
            "large_inputs": large_json.iter().map(|l| json!({
                "mib": l["mib"], "bytes": l["bytes"],
                "server_cpu_ms_per_call": l["server_cpu_ms_per_call"][i],
                "function_cpu_ms_per_call": l["function_cpu_ms_per_call"][i],
                "p50_ms": l["p50_ms"][i],
            })).collect::<Vec<_>>(),
            "idle_rss_kib": idle_rss[i], "peak_rss_kib": peak_rss[i],
        }));
    }
    summary["table_markdown"] = Value::String(table.join("\n"));
    println!(
        "\n{cores} cores, load average {load_before} before, {load_after} after; \
         bare spawn p50 {:.1} ms\n",
        median(bare)
    );
    println!("{}", table.join("\n"));
    let path = std::env::var_os("KRM_FN_BENCH_JSON")
        .map(PathBuf::from)
        .unwrap_or_else(|| common::target_dir().join("throughput.json"));
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)
            .unwrap_or_else(|e| panic!("cannot create {} for the summary: {e}", dir.display()));
    }
    std::fs::write(&path, serde_json::to_string_pretty(&summary).unwrap())
        .unwrap_or_else(|e| panic!("cannot write the summary to {}: {e}", path.display()));
    println!("\nsummary: {}", path.display());
}
