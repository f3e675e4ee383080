//! `krm-fn-runner simulate`: replay a request trace against pod-cache
//! policies on virtual time, or generate a synthetic trace.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use clap::Args;

use crate::adapters::sim::{ReplayOptions, StartLatency, replay};
use crate::domain::simulation::report::table;
use crate::domain::simulation::trace::{TraceSpec, generate, parse_trace, to_csv};
use crate::domain::simulation::{PolicyReport, SimPolicy};

/// Flags of `simulate`.
#[derive(Debug, Args)]
pub struct SimulateArgs {
    /// The request trace (CSV `at_seconds,image,run_seconds` or JSON lines);
    /// with --generate, where to write the generated trace.
    #[arg(long)]
    pub trace: PathBuf,
    /// A policy file (the runner's pod-cache-config list, or flags + list). Repeatable.
    #[arg(long = "policy", required_unless_present = "generate")]
    pub policies: Vec<PathBuf>,
    /// Print the reports as JSON instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Draw pods and queued requests over time, per policy, into this SVG file.
    #[arg(long)]
    pub plot: Option<PathBuf>,
    /// Median pod start latency (log-normal, sigma 0.5).
    #[arg(long, value_parser = humantime::parse_duration, default_value = "3s")]
    pub start_latency: Duration,
    /// Seed for pod start latencies (and the generator).
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
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
    let options = ReplayOptions {
        start_latency: StartLatency::LogNormal {
            median: args.start_latency,
            sigma: 0.5,
        },
        seed: args.seed,
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
    if args.json {
        println!("{}", serde_json::to_string_pretty(&reports)?);
    } else {
        print!("{}", table(&reports));
    }
    if let Some(path) = &args.plot {
        plot(&reports, path)?;
        eprintln!("plot written to {}", path.display());
    }
    Ok(ExitCode::SUCCESS)
}

/// Reads one quantity of a timeline sample.
type SampleValue = fn(&crate::domain::simulation::Sample) -> usize;

/// Two panels: pods alive, and requests waiting for a pod, over hours of the trace.
fn plot(reports: &[PolicyReport], path: &Path) -> anyhow::Result<()> {
    use plotters::prelude::*;
    let root = SVGBackend::new(path, (1100, 700)).into_drawing_area();
    root.fill(&WHITE)?;
    let panels = root.split_evenly((2, 1));
    let hours = reports
        .iter()
        .flat_map(|r| r.timeline.last())
        .map(|s| s.at_s / 3600.0)
        .fold(0.0_f64, f64::max)
        .max(1.0 / 60.0);
    let series: [(&str, SampleValue); 2] = [
        ("pods alive", |s| s.pods),
        ("requests waiting for a pod", |s| s.waiting),
    ];
    for (panel, (title, value)) in panels.iter().zip(series) {
        let top = reports
            .iter()
            .flat_map(|r| r.timeline.iter().map(value))
            .max()
            .unwrap_or(0)
            .max(1) as f64;
        let mut chart = ChartBuilder::on(panel)
            .caption(title, ("sans-serif", 20))
            .margin(12)
            .x_label_area_size(35)
            .y_label_area_size(50)
            .build_cartesian_2d(0.0..hours, 0.0..top * 1.05)?;
        chart.configure_mesh().x_desc("hours").draw()?;
        for (i, r) in reports.iter().enumerate() {
            let color = Palette99::pick(i).to_rgba();
            chart
                .draw_series(LineSeries::new(
                    r.timeline
                        .iter()
                        .map(|s| (s.at_s / 3600.0, value(s) as f64)),
                    color.stroke_width(2),
                ))?
                .label(r.policy.clone())
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
                });
        }
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .draw()?;
    }
    root.present()?;
    Ok(())
}
