//! `krm-fn-runner simulate`: replay a request trace against pod-cache
//! policies on virtual time, size the runner's replicas for it
//! (`--replica-model`), or generate a synthetic trace.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use clap::Args;

use crate::adapters::sim::{FailureRates, ReplayOptions, StartLatency, replay};
use crate::domain::connection_age::{self, ConnectionAge};
use crate::domain::simulation::replicas::{Balance, ReplicaModel, size, sizing_table};
use crate::domain::simulation::report::table;
use crate::domain::simulation::trace::{TraceSpec, generate, parse_trace, to_csv};
use crate::domain::simulation::{PolicyReport, Sample, SimPolicy, TraceEntry};

/// Flags of `simulate`.
#[derive(Debug, Args)]
pub struct SimulateArgs {
    /// The request trace (CSV `at_seconds,image,run_seconds` or JSON lines);
    /// with --generate, where to write the generated trace.
    #[arg(long)]
    pub trace: PathBuf,
    /// A policy file (the runner's pod-cache-config list, or flags + list). Repeatable.
    #[arg(long = "policy", required_unless_present_any = ["generate", "replica_model"])]
    pub policies: Vec<PathBuf>,
    /// Instead of replaying the pod cache: how many runner replicas the
    /// trace needs (function slots per replica, client connections through
    /// a per-connection Service), for 1 to --max-replicas, with connection
    /// ageing and without.
    #[arg(long, conflicts_with_all = ["policies", "generate"])]
    pub replica_model: bool,
    /// Replica model: client connections at once (porch-server replicas;
    /// each keeps one connection).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=1000))]
    pub clients: u64,
    /// Replica model: function slots per replica (--max-concurrent-functions).
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u64).range(1..=100_000))]
    pub slots: u64,
    /// Replica model: calls that may wait for a slot per replica
    /// (--max-queued-functions); beyond, calls are rejected.
    #[arg(long, default_value_t = 1024)]
    pub max_queued: usize,
    /// Replica model: the runners' --max-connection-age (the age of the
    /// "on" rows; each connection's jittered ±10%).
    #[arg(long, value_parser = super::serve::max_connection_age, default_value = "2m")]
    pub max_connection_age: Duration,
    /// Replica model: how the Service picks a replica for a new connection:
    /// random (kube-proxy's iptables and nftables modes) or round-robin
    /// (IPVS, rr).
    #[arg(long, value_enum, default_value = "random")]
    pub balance: BalanceArg,
    /// Replica model: the most replicas tried.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..=256))]
    pub max_replicas: u64,
    /// Replica model: the target, a 99th percentile wait for a function
    /// slot no longer than this (and no call rejected).
    #[arg(long, value_parser = humantime::parse_duration, default_value = "1s")]
    pub target_wait: Duration,
    /// Print the reports as JSON instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Draw pods and queued requests over time, per policy, into this SVG file.
    #[arg(long)]
    pub plot: Option<PathBuf>,
    /// Median pod start latency (log-normal, sigma 0.5): until the pod's
    /// wrapper server answers.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "3s")]
    pub start_latency: Duration,
    /// How much later than its wrapper answers the kubelet reports a pod
    /// ready (the readiness probe's lag; Porch's template probes every
    /// 10 s). A policy with `wrapperHealthCheck: true` does not wait for it.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "0s")]
    pub readiness_delay: Duration,
    /// Seed for pod start latencies, faults (and the generator).
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Runner replicas sharing the namespace; requests go to them in turn.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=64))]
    pub replicas: u64,
    /// Each API call (create, patch, list, delete) takes a latency drawn
    /// uniformly from zero to this.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "0s")]
    pub api_latency: Duration,
    /// Callers give up after this long (their gRPC deadline): a request
    /// still waiting for a pod is cancelled and leaves the waitlist.
    #[arg(long, value_parser = humantime::parse_duration)]
    pub deadline: Option<Duration>,
    /// Probability that a pod creation fails.
    #[arg(long, value_parser = probability, default_value_t = 0.0)]
    pub create_failures: f64,
    /// Probability that a reclaim-after patch fails.
    #[arg(long, value_parser = probability, default_value_t = 0.0)]
    pub patch_failures: f64,
    /// Probability that a GC listing fails.
    #[arg(long, value_parser = probability, default_value_t = 0.0)]
    pub list_failures: f64,
    /// Probability that a pod deletion fails.
    #[arg(long, value_parser = probability, default_value_t = 0.0)]
    pub delete_failures: f64,
    /// Probability that a created pod crashes (phase Failed) instead of
    /// becoming ready.
    #[arg(long, value_parser = probability, default_value_t = 0.0)]
    pub pod_crashes: f64,
    /// Probability that a wrapper already carrying --unavailable-load calls
    /// refuses another as UNAVAILABLE.
    #[arg(long, value_parser = probability, default_value_t = 0.0)]
    pub unavailable: f64,
    /// The load from which --unavailable applies.
    #[arg(long, default_value_t = 1)]
    pub unavailable_load: u32,
    /// Probability, per pod change and replica, that the replica's pod
    /// watch breaks for --watch-gap-length (changes missed, then a re-list).
    #[arg(long, value_parser = probability, default_value_t = 0.0)]
    pub watch_gaps: f64,
    /// How long a watch gap lasts.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "30s")]
    pub watch_gap_length: Duration,
    /// Probability that a GC listing arrives --slow-list-latency late
    /// (taken when asked for, handled when it arrives).
    #[arg(long, value_parser = probability, default_value_t = 0.0)]
    pub slow_lists: f64,
    /// How late a slow listing arrives.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "40s")]
    pub slow_list_latency: Duration,
    /// Rolling restart: every this long the next replica (in turn) restarts
    /// and adopts the pods it may; what it was serving fails.
    #[arg(long, value_parser = humantime::parse_duration)]
    pub restart_every: Option<Duration>,
    /// Largest clock offset between replicas and true time; the replicas'
    /// offsets are spread evenly over ±this.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "0s")]
    pub clock_skew: Duration,
    /// Write a synthetic trace to --trace instead of simulating.
    #[arg(long)]
    pub generate: bool,
    /// Generated trace: length.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "24h")]
    pub duration: Duration,
    /// Generated trace: number of requests (Poisson arrivals).
    #[arg(long, default_value_t = 100_000)]
    pub requests: u64,
    /// Generated trace: number of distinct functions.
    #[arg(long, default_value_t = 50)]
    pub functions: u64,
    /// Generated trace: Zipf exponent of function popularity.
    #[arg(long, default_value_t = 1.1)]
    pub zipf: f64,
    /// Generated trace: median function run time.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "500ms")]
    pub median_run: Duration,
    /// Generated trace: number of 10-minute bursts at 8x the base rate.
    #[arg(long, default_value_t = 6)]
    pub bursts: u32,
    /// Generated trace: day/night curve, the arrival rate at the busiest
    /// hour over the rate at the quietest (1 = flat).
    #[arg(long, default_value_t = 1.0)]
    pub diurnal: f64,
    /// Generated trace: hour of the day (from the trace's start) when the
    /// rate peaks.
    #[arg(long, default_value_t = 14.0)]
    pub peak_hour: f64,
}

/// `--balance` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum BalanceArg {
    /// A random replica per new connection.
    Random,
    /// Replicas in turn.
    RoundRobin,
}

/// Parses a probability in `[0, 1]`.
fn probability(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(p) if (0.0..=1.0).contains(&p) => Ok(p),
        _ => Err(format!(
            "{s:?} is not a probability: give a number from 0 to 1 (0.05 is 5%)"
        )),
    }
}

/// Runs `simulate`.
pub async fn run(args: SimulateArgs) -> anyhow::Result<ExitCode> {
    super::init_logging(1);
    if args.generate {
        let spec = TraceSpec {
            duration: args.duration,
            requests: args.requests,
            functions: args.functions,
            zipf_exponent: args.zipf,
            median_run: args.median_run,
            bursts: args.bursts,
            diurnal_ratio: args.diurnal,
            peak_hour: args.peak_hour,
            seed: args.seed,
            ..TraceSpec::default()
        };
        let trace = generate(&spec)?;
        std::fs::write(&args.trace, to_csv(&trace))
            .with_context(|| format!("cannot write {}", args.trace.display()))?;
        eprintln!(
            "wrote {} requests over {} functions to {}",
            trace.len(),
            args.functions,
            args.trace.display()
        );
        return Ok(ExitCode::SUCCESS);
    }
    let text = std::fs::read_to_string(&args.trace)
        .with_context(|| format!("cannot read trace {}", args.trace.display()))?;
    let trace = std::sync::Arc::new(
        parse_trace(&text).with_context(|| format!("in {}", args.trace.display()))?,
    );
    if args.replica_model {
        return size_replicas(&args, &trace).await;
    }
    let options = ReplayOptions {
        start_latency: StartLatency::LogNormal {
            median: args.start_latency,
            sigma: 0.5,
        },
        readiness_delay: args.readiness_delay,
        seed: args.seed,
        replicas: args.replicas as usize,
        api_latency: args.api_latency,
        deadline: args.deadline,
        failures: FailureRates {
            create_error: args.create_failures,
            patch_error: args.patch_failures,
            list_error: args.list_failures,
            delete_error: args.delete_failures,
            crash: args.pod_crashes,
            unavailable: args.unavailable,
            unavailable_load: args.unavailable_load,
            ..FailureRates::default()
        },
        watch_gap: args.watch_gaps,
        watch_gap_length: args.watch_gap_length,
        slow_list: args.slow_lists,
        slow_list_latency: args.slow_list_latency,
        skew: args.clock_skew,
        restart_every: args.restart_every,
        ..ReplayOptions::default()
    };
    let mut reports = Vec::new();
    for path in &args.policies {
        let bytes = std::fs::read(path)
            .with_context(|| format!("cannot read policy {}", path.display()))?;
        let policy = SimPolicy::parse(&bytes, &path.display().to_string())?;
        for w in &policy.config.warnings {
            tracing::warn!("{}: {w}", path.display());
        }
        // The replay is CPU-bound; keep it off the async workers.
        let trace = trace.clone();
        let options = options.clone();
        reports
            .push(tokio::task::spawn_blocking(move || replay(&trace, &policy, &options)).await??);
    }
    print(args.json, &reports, || table(&reports))?;
    if let Some(path) = &args.plot {
        plot(&reports, path)?;
        eprintln!("plot written to {}", path.display());
    }
    Ok(ExitCode::SUCCESS)
}

/// `--replica-model`: sizes the replicas for `trace` and prints the runs
/// and the answer (a table, or JSON with `--json`).
async fn size_replicas(args: &SimulateArgs, trace: &[TraceEntry]) -> anyhow::Result<ExitCode> {
    if args.max_connection_age.is_zero() {
        anyhow::bail!(
            "--replica-model compares runs with and without connection ageing: give \
             --max-connection-age a duration of 1s or more"
        );
    }
    let age = ConnectionAge::new(args.max_connection_age, connection_age::DEFAULT_GRACE)?
        .context("connection ageing is on")?;
    let model = ReplicaModel {
        slots: args.slots as usize,
        max_queued: args.max_queued,
        clients: args.clients as usize,
        balance: match args.balance {
            BalanceArg::Random => Balance::Random,
            BalanceArg::RoundRobin => Balance::RoundRobin,
        },
        age,
        seed: args.seed,
    };
    let trace = trace.to_vec();
    let (max, target) = (args.max_replicas as usize, args.target_wait);
    // CPU-bound; off the async workers.
    let sizing = tokio::task::spawn_blocking(move || size(&trace, &model, max, target)).await?;
    print(args.json, &sizing, || sizing_table(&sizing))?;
    Ok(ExitCode::SUCCESS)
}

/// Prints `value` as pretty JSON when `json`, else the text `table` makes.
///
/// Errors: stdout cannot be written.
fn print<T: serde::Serialize>(
    json: bool,
    value: &T,
    table: impl FnOnce() -> String,
) -> anyhow::Result<()> {
    let mut text = if json {
        serde_json::to_string_pretty(value)?
    } else {
        table()
    };
    if json {
        text.push('\n');
    }
    super::write_stdout(text.as_bytes())?;
    Ok(())
}

/// One panel of the plot: its title, y-axis label, and the quantity of a
/// timeline sample it draws.
struct Panel {
    title: &'static str,
    unit: &'static str,
    value: fn(&Sample) -> u64,
}

/// Colour of the `i`th policy: six that stay apart on white (and for
/// most colour-blind readers, with the line styles).
fn colour(i: usize) -> plotters::style::RGBColor {
    const COLOURS: [(u8, u8, u8); 6] = [
        (31, 119, 180),
        (214, 39, 40),
        (44, 160, 44),
        (148, 103, 189),
        (255, 127, 14),
        (23, 190, 207),
    ];
    let (r, g, b) = COLOURS[i % COLOURS.len()];
    plotters::style::RGBColor(r, g, b)
}

/// Line style of the `i`th policy: solid, dashed, dotted, then again in
/// other colours, so overlapping lines stay apart.
fn dashes(i: usize) -> Option<(u32, u32)> {
    match i % 3 {
        0 => None,
        1 => Some((10, 5)),
        _ => Some((2, 4)),
    }
}

/// Three panels over hours of the trace, one line per policy, each
/// bucket's value drawn flat across the bucket: the most pods alive, the
/// most requests waiting for a pod, and the cold starts. Counts on integer
/// axes; the legend sits in its own column, right of the panels.
fn plot(reports: &[PolicyReport], path: &Path) -> anyhow::Result<()> {
    use plotters::prelude::*;
    let root = SVGBackend::new(path, (1200, 900)).into_drawing_area();
    root.fill(&WHITE)?;
    let (charts, legend) = root.split_horizontally(1000);
    let bucket_s = reports.iter().map(|r| r.bucket_s).fold(0.0_f64, f64::max);
    let minutes = (bucket_s / 60.0).max(1.0 / 60.0);
    let bucket = if bucket_s >= 60.0 {
        format!("{minutes:.0}-minute buckets")
    } else {
        format!("{bucket_s:.0}-second buckets")
    };
    let hours = reports
        .iter()
        .flat_map(|r| r.timeline.last().map(|s| (s.at_s + r.bucket_s) / 3600.0))
        .fold(0.0_f64, f64::max)
        .max(1.0 / 60.0);
    let panels = [
        Panel {
            title: "pods alive (most in each bucket)",
            unit: "pods",
            value: |s| s.pods as u64,
        },
        Panel {
            title: "requests waiting for a pod (most in each bucket)",
            unit: "requests",
            value: |s| s.waiting as u64,
        },
        Panel {
            title: "cold starts (requests that waited for a new pod, per bucket)",
            unit: "requests",
            value: |s| s.cold_starts,
        },
    ];
    let areas = charts.split_evenly((panels.len(), 1));
    for (area, panel) in areas.iter().zip(&panels) {
        let top = reports
            .iter()
            .flat_map(|r| r.timeline.iter().map(panel.value))
            .max()
            .unwrap_or(0)
            .max(1);
        // Headroom, and at most ~8 integer ticks.
        let top = i64::try_from(top + top / 20 + 1).unwrap_or(i64::MAX);
        let mut chart = ChartBuilder::on(area)
            .caption(panel.title, ("sans-serif", 18))
            .margin(10)
            .x_label_area_size(38)
            .y_label_area_size(70)
            .build_cartesian_2d(0.0..hours, 0i64..top)?;
        chart
            .configure_mesh()
            .x_desc(format!("hours since the start of the trace ({bucket})"))
            .y_desc(panel.unit)
            .y_labels(8.min(top as usize + 1))
            .y_label_formatter(&|v| v.to_string())
            .x_label_formatter(&|v| format!("{v:.0}"))
            .draw()?;
        for (i, r) in reports.iter().enumerate() {
            let style = colour(i).stroke_width(2);
            let width = r.bucket_s / 3600.0;
            // A step line: each bucket's value from its start to its end.
            let points: Vec<(f64, i64)> = r
                .timeline
                .iter()
                .flat_map(|s| {
                    let v = (panel.value)(s) as i64;
                    let x = s.at_s / 3600.0;
                    [(x, v), (x + width, v)]
                })
                .collect();
            match dashes(i) {
                None => {
                    chart.draw_series(LineSeries::new(points, style))?;
                }
                Some((dash, gap)) => {
                    chart.draw_series(DashedLineSeries::new(points, dash, gap, style))?;
                }
            }
        }
    }
    // The legend: one sample line and name per policy.
    legend.draw(&Text::new(
        "policy",
        (10, 30),
        ("sans-serif", 16).into_font(),
    ))?;
    for (i, r) in reports.iter().enumerate() {
        let y = 60 + 26 * i as i32;
        let style = colour(i).stroke_width(2);
        let line = vec![(10, y), (50, y)];
        match dashes(i) {
            None => legend.draw(&PathElement::new(line, style))?,
            Some((dash, gap)) => legend.draw(&plotters::element::DashedPathElement::new(
                line, dash, gap, style,
            ))?,
        }
        legend.draw(&Text::new(
            r.policy.clone(),
            (58, y - 7),
            ("sans-serif", 14).into_font(),
        ))?;
    }
    root.present()?;
    Ok(())
}
