//! Request traces for the policy simulator: the format, its parser, and a
//! synthetic generator.
//!
//! A trace is a list of requests, each with an arrival time (seconds from
//! the start of the trace), the image asked for, and how long the function
//! runs once it has a pod (seconds). Two file formats are read:
//!
//! - CSV with the header `at_seconds,image,run_seconds` (blank lines and
//!   lines starting with `#` are ignored);
//! - JSON lines: `{"at": 12.5, "image": "…", "run": 0.8}` per line.

use std::time::Duration;

use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use rand_distr::{Distribution, Exp, LogNormal, Zipf};
use serde::{Deserialize, Serialize};

/// One request of a trace.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TraceEntry {
    /// Arrival, from the start of the trace.
    #[serde(rename = "at", with = "secs")]
    pub at: Duration,
    /// The function image asked for.
    pub image: String,
    /// How long the function runs once it has a pod.
    #[serde(rename = "run", with = "secs")]
    pub run: Duration,
}

mod secs {
    use serde::{Deserialize, Deserializer, Serializer};
    use std::time::Duration;

    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_f64(d.as_secs_f64())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        let v = f64::deserialize(d)?;
        Duration::try_from_secs_f64(v).map_err(serde::de::Error::custom)
    }
}

/// Why a trace file could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("trace line {line}: {message}")]
pub struct TraceError {
    /// 1-based line number.
    pub line: usize,
    /// What is wrong, and the expected format.
    pub message: String,
}

/// The CSV header line.
pub const CSV_HEADER: &str = "at_seconds,image,run_seconds";

fn seconds(field: &str, what: &str, line: usize) -> Result<Duration, TraceError> {
    field
        .trim()
        .parse::<f64>()
        .ok()
        .and_then(|v| Duration::try_from_secs_f64(v).ok())
        .ok_or_else(|| TraceError {
            line,
            message: format!("{what} {field:?} is not a number of seconds ≥ 0"),
        })
}

/// Parses a trace (CSV or JSON lines, detected from the first data line) and
/// sorts it by arrival.
///
/// Errors: the first malformed line, with its number.
pub fn parse_trace(text: &str) -> Result<Vec<TraceEntry>, TraceError> {
    let mut out = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let line = i + 1;
        let l = raw.trim();
        if l.is_empty() || l.starts_with('#') || l == CSV_HEADER {
            continue;
        }
        if l.starts_with('{') {
            let e: TraceEntry = serde_json::from_str(l).map_err(|e| TraceError {
                line,
                message: format!(
                    "expected {{\"at\": seconds, \"image\": \"…\", \"run\": seconds}}: {e}"
                ),
            })?;
            out.push(e);
            continue;
        }
        let fields: Vec<&str> = l.split(',').collect();
        let [at, image, run] = fields[..] else {
            return Err(TraceError {
                line,
                message: format!("expected 3 CSV fields ({CSV_HEADER}), got {}", fields.len()),
            });
        };
        if image.trim().is_empty() {
            return Err(TraceError {
                line,
                message: "the image is empty".into(),
            });
        }
        out.push(TraceEntry {
            at: seconds(at, "arrival", line)?,
            image: image.trim().to_string(),
            run: seconds(run, "run time", line)?,
        });
    }
    out.sort_by_key(|e| e.at);
    Ok(out)
}

/// Writes a trace as CSV (with the header).
pub fn to_csv(trace: &[TraceEntry]) -> String {
    let mut s = String::with_capacity(trace.len() * 64);
    s.push_str(CSV_HEADER);
    s.push('\n');
    for e in trace {
        s.push_str(&format!(
            "{:.3},{},{:.3}\n",
            e.at.as_secs_f64(),
            e.image,
            e.run.as_secs_f64()
        ));
    }
    s
}

/// Parameters of a synthetic trace.
#[derive(Debug, Clone, PartialEq)]
pub struct TraceSpec {
    /// Length of the trace.
    pub duration: Duration,
    /// Number of requests (on average; arrivals are a Poisson process).
    pub requests: u64,
    /// Number of distinct function images.
    pub functions: u64,
    /// Zipf exponent of image popularity (1.0–1.5 is typical: a few hot functions).
    pub zipf_exponent: f64,
    /// Median function run time; each function's median is drawn around it,
    /// each call's around its function's (log-normal).
    pub median_run: Duration,
    /// Number of bursts (windows of heavier load).
    pub bursts: u32,
    /// Length of each burst.
    pub burst_length: Duration,
    /// Arrival-rate multiplier during a burst.
    pub burst_factor: f64,
    /// Day/night curve: the arrival rate at the busiest hour of the day
    /// divided by the rate at the quietest (1 = flat, 4 = a day four times
    /// as busy as the night). The rate follows a 24-hour cosine between the
    /// two ([`diurnal_rate`]).
    pub diurnal_ratio: f64,
    /// Hour of the day (0–24, from the start of the trace) when the rate
    /// peaks; the trough is 12 hours later.
    pub peak_hour: f64,
    /// Seed: the same spec and seed give the same trace.
    pub seed: u64,
}

impl Default for TraceSpec {
    /// 24 hours, 100,000 requests over 50 functions, Zipf 1.1, 0.5 s median
    /// run time, 6 bursts of 10 minutes at 8x the base rate, a flat day
    /// (diurnal ratio 1, peak at 14:00).
    fn default() -> Self {
        Self {
            duration: Duration::from_secs(24 * 3600),
            requests: 100_000,
            functions: 50,
            zipf_exponent: 1.1,
            median_run: Duration::from_millis(500),
            bursts: 6,
            burst_length: Duration::from_secs(600),
            burst_factor: 8.0,
            diurnal_ratio: 1.0,
            peak_hour: 14.0,
            seed: 1,
        }
    }
}

/// Why a trace spec cannot be generated.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid trace parameters: {0}")]
pub struct TraceSpecError(String);

/// The relative arrival rate of the day/night curve at `t_s` seconds from
/// the start of a trace: a 24-hour cosine peaking at `peak_hour` with value
/// 1, and `1 / ratio` twelve hours later (`ratio` ≥ 1; 1 is flat).
pub fn diurnal_rate(t_s: f64, ratio: f64, peak_hour: f64) -> f64 {
    if ratio == 1.0 {
        return 1.0;
    }
    let trough = 1.0 / ratio;
    let phase = std::f64::consts::TAU * (t_s / 3600.0 - peak_hour) / 24.0;
    trough + (1.0 - trough) * (1.0 + phase.cos()) / 2.0
}

/// Generates a synthetic trace: Poisson arrivals whose rate follows the
/// day/night curve ([`diurnal_rate`]) and is heavier inside bursts, Zipf
/// image popularity, log-normal run times. Images are named
/// `example.com/sim/fn-NNN:v1`, rank 1 the most popular. The expected
/// number of requests is `spec.requests` whatever the curve.
///
/// Errors: zero duration or functions, a Zipf exponent ≤ 0, a burst factor
/// < 1, a diurnal ratio < 1, a peak hour outside 0–24.
pub fn generate(spec: &TraceSpec) -> Result<Vec<TraceEntry>, TraceSpecError> {
    let bad = |m: &str| Err(TraceSpecError(m.to_string()));
    if spec.duration.is_zero() {
        return bad("the duration must be positive");
    }
    if spec.functions == 0 {
        return bad("there must be at least one function");
    }
    if spec.zipf_exponent <= 0.0 || spec.zipf_exponent.is_nan() {
        return bad("the Zipf exponent must be positive");
    }
    if spec.burst_factor < 1.0 || spec.burst_factor.is_nan() {
        return bad("the burst factor must be at least 1");
    }
    if !(spec.diurnal_ratio >= 1.0 && spec.diurnal_ratio.is_finite()) {
        return bad("the diurnal ratio (busiest hour over quietest) must be at least 1");
    }
    if !(0.0..=24.0).contains(&spec.peak_hour) {
        return bad("the peak hour must be between 0 and 24");
    }
    let mut rng = StdRng::seed_from_u64(spec.seed);
    let total = spec.duration.as_secs_f64();
    let burst_len = spec.burst_length.as_secs_f64().min(total);
    let bursts: Vec<f64> = (0..spec.bursts)
        .map(|_| rng.random_range(0.0..(total - burst_len).max(f64::MIN_POSITIVE)))
        .collect();
    let in_burst = |t: f64| bursts.iter().any(|b| t >= *b && t < b + burst_len);
    let (ratio, peak) = (spec.diurnal_ratio, spec.peak_hour);
    // Relative rate at t, at most the burst factor.
    let weight =
        |t: f64| diurnal_rate(t, ratio, peak) * if in_burst(t) { spec.burst_factor } else { 1.0 };
    // Base rate so that the expected count is `requests`: the integral of
    // the weight over the trace, from the curve's antiderivative; bursts
    // may overlap, so they add over the union of their windows.
    let trough = 1.0 / ratio;
    let integral = |t: f64| {
        let phase = std::f64::consts::TAU * (t / 3600.0 - peak) / 24.0;
        trough * t + (1.0 - trough) / 2.0 * (t + 86_400.0 / std::f64::consts::TAU * phase.sin())
    };
    let mut starts = bursts.clone();
    starts.sort_by(f64::total_cmp);
    let (mut burst_mass, mut covered_to) = (0.0_f64, 0.0_f64);
    for b in starts {
        let end = (b + burst_len).min(total);
        let from = b.max(covered_to);
        if end > from {
            burst_mass += integral(end) - integral(from);
        }
        covered_to = covered_to.max(end);
    }
    let weighted = (integral(total) - integral(0.0)) - burst_mass + burst_mass * spec.burst_factor;
    let base_rate = spec.requests as f64 / weighted;
    let max_rate = base_rate * spec.burst_factor;
    let popularity = Zipf::new(spec.functions as f64, spec.zipf_exponent)
        .map_err(|e| TraceSpecError(e.to_string()))?;
    let median = spec.median_run.as_secs_f64().max(1e-3);
    let per_function =
        LogNormal::new(median.ln(), 0.8).map_err(|e| TraceSpecError(e.to_string()))?;
    let medians: Vec<f64> = (0..spec.functions)
        .map(|_| per_function.sample(&mut rng))
        .collect();
    let mut out = Vec::with_capacity(spec.requests as usize + spec.requests as usize / 10);
    if base_rate <= 0.0 {
        return Ok(out);
    }
    // Thinning: draw at the peak rate, keep an arrival with p = weight / factor.
    let gap = Exp::new(max_rate).map_err(|e| TraceSpecError(e.to_string()))?;
    let mut t = 0.0;
    loop {
        t += gap.sample(&mut rng);
        if t >= total {
            break;
        }
        let keep = weight(t) / spec.burst_factor;
        if keep < 1.0 && rng.random::<f64>() >= keep {
            continue;
        }
        let rank = popularity.sample(&mut rng) as u64;
        let m = medians[(rank - 1) as usize];
        let run = LogNormal::new(m.ln(), 0.3)
            .map(|d| d.sample(&mut rng))
            .unwrap_or(m);
        out.push(TraceEntry {
            at: Duration::from_secs_f64(t),
            image: format!("example.com/sim/fn-{rank:03}:v1"),
            run: Duration::from_secs_f64(run.clamp(0.001, 3600.0)),
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_csv_and_json_lines() {
        let t = parse_trace("at_seconds,image,run_seconds\n# c\n2.5,b:v1,0.1\n1,a:v1,0.25\n{\"at\": 3, \"image\": \"c:v1\", \"run\": 1}\n").unwrap();
        assert_eq!(t.len(), 3);
        assert_eq!(t[0].image, "a:v1");
        assert_eq!(t[0].run, Duration::from_millis(250));
        assert_eq!(t[2].at, Duration::from_secs(3));
        let again = parse_trace(&to_csv(&t)).unwrap();
        assert_eq!(again, t);
    }

    #[test]
    fn bad_lines_are_named() {
        assert_eq!(parse_trace("1,a\n").unwrap_err().line, 1);
        assert!(
            parse_trace("x,a,1\n")
                .unwrap_err()
                .message
                .contains("arrival")
        );
        assert!(
            parse_trace("1,a,-1\n")
                .unwrap_err()
                .message
                .contains("run time")
        );
        assert!(parse_trace("{\"at\": 1}\n").is_err());
    }

    #[test]
    fn generator_is_deterministic_and_skewed() {
        let spec = TraceSpec {
            duration: Duration::from_secs(3600),
            requests: 5_000,
            ..TraceSpec::default()
        };
        let a = generate(&spec).unwrap();
        assert_eq!(a, generate(&spec).unwrap());
        assert!((4_000..6_000).contains(&a.len()), "{}", a.len());
        assert!(a.windows(2).all(|w| w[0].at <= w[1].at));
        let hot = a.iter().filter(|e| e.image.contains("fn-001")).count();
        let cold = a.iter().filter(|e| e.image.contains("fn-050")).count();
        assert!(hot > 10 * cold.max(1), "hot {hot} cold {cold}");
    }

    /// A day four times as busy at 14:00 as at 02:00: the hourly counts
    /// follow the cosine within Poisson noise, the total is the one asked
    /// for, and a seed replays the same trace (another seed does not).
    #[test]
    fn diurnal_traces_follow_their_curve() {
        let spec = TraceSpec {
            requests: 96_000,
            bursts: 0,
            diurnal_ratio: 4.0,
            peak_hour: 14.0,
            seed: 7,
            ..TraceSpec::default()
        };
        let a = generate(&spec).unwrap();
        assert_eq!(a, generate(&spec).unwrap());
        assert_ne!(
            a,
            generate(&TraceSpec {
                seed: 8,
                ..spec.clone()
            })
            .unwrap()
        );
        assert!((94_000..98_000).contains(&a.len()), "{}", a.len());
        let mut hours = [0f64; 24];
        for e in &a {
            hours[(e.at.as_secs() / 3600) as usize] += 1.0;
        }
        let mean_rate: f64 = (0..24)
            .map(|h| diurnal_rate((h as f64 + 0.5) * 3600.0, 4.0, 14.0))
            .sum::<f64>()
            / 24.0;
        for (h, n) in hours.iter().enumerate() {
            let expected = a.len() as f64 / 24.0
                * diurnal_rate((h as f64 + 0.5) * 3600.0, 4.0, 14.0)
                / mean_rate;
            // Five standard deviations of a Poisson count.
            assert!(
                (n - expected).abs() < 5.0 * expected.sqrt(),
                "hour {h}: {n} requests, expected about {expected:.0}"
            );
        }
        let ratio = hours[14] / hours[2];
        assert!((3.4..4.6).contains(&ratio), "peak/trough {ratio}");
    }

    #[test]
    fn the_curve_peaks_and_troughs_where_asked() {
        assert_eq!(diurnal_rate(14.0 * 3600.0, 4.0, 14.0), 1.0);
        assert!((diurnal_rate(2.0 * 3600.0, 4.0, 14.0) - 0.25).abs() < 1e-12);
        assert_eq!(diurnal_rate(5.0 * 3600.0, 1.0, 14.0), 1.0);
    }

    #[test]
    fn invalid_specs_are_refused() {
        let spec = TraceSpec {
            functions: 0,
            ..TraceSpec::default()
        };
        assert!(generate(&spec).is_err());
        for (ratio, peak) in [(0.5, 14.0), (f64::NAN, 14.0), (2.0, 25.0)] {
            let spec = TraceSpec {
                diurnal_ratio: ratio,
                peak_hour: peak,
                ..TraceSpec::default()
            };
            assert!(generate(&spec).is_err(), "{ratio} {peak}");
        }
    }
}
