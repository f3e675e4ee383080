//! Telemetry test helpers, none of which parses telemetry itself:
//! - [`Scrape`]: a process's `/metrics`, fetched and parsed by Python's
//!   `prometheus_client` text parser (`tests/python/scrape_metrics.py`);
//! - [`Collector`]: a real OpenTelemetry Collector (built by
//!   `scripts/build-otel-collector.sh`) receiving OTLP over gRPC and HTTP on
//!   loopback and writing what it gets with its file exporter, read back
//!   here as OTLP JSON;
//! - a W3C `traceparent` for a test client to send.
//!
//! Include it with `mod otel_support;` next to `mod common;`.

use std::collections::BTreeMap;
use std::io::Read as _;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::common::{Runner, built_tool, free_port, python};

/// The collector binary, from `KRM_FN_OTELCOL_BIN` or
/// `scripts/build-otel-collector.sh`.
pub fn collector_binary() -> PathBuf {
    built_tool("KRM_FN_OTELCOL_BIN", "build-otel-collector.sh")
}

/// The `/metrics` URL announced in a runner's or wrapper server's `log`.
pub fn metrics_url_in(log: &str) -> Option<String> {
    log.lines()
        .find_map(|l| l.strip_prefix("metrics served on "))
        .map(|u| u.trim().to_string())
}

/// The `/metrics` URL a runner or wrapper server announced on stderr.
pub fn metrics_url(process: &Runner) -> String {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let log = process.log();
        if let Some(url) = metrics_url_in(&log) {
            return url;
        }
        assert!(
            Instant::now() < deadline,
            "no `metrics served on` line:\n{log}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// One sample: its name (with `_total`, `_bucket`… suffixes), labels, value.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    /// Sample name.
    pub name: String,
    /// Labels.
    pub labels: BTreeMap<String, String>,
    /// Value (`f64::INFINITY` for `+Inf`).
    pub value: f64,
}

/// A scrape parsed by prometheus_client.
#[derive(Debug, Clone)]
pub struct Scrape {
    /// The response's Content-Type.
    pub content_type: String,
    /// Family name → (type, samples).
    pub families: BTreeMap<String, (String, Vec<Sample>)>,
}

impl Scrape {
    /// Fetches and parses `url`.
    pub fn take(url: &str) -> Scrape {
        let script = crate::common::repo_root().join("tests/python/scrape_metrics.py");
        let out = Command::new(python())
            .arg(script)
            .arg(url)
            .output()
            .expect("run scrape_metrics.py");
        assert!(
            out.status.success(),
            "scraping {url} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
        let mut families = BTreeMap::new();
        for (name, f) in v["families"].as_object().unwrap() {
            let samples = f["samples"]
                .as_array()
                .unwrap()
                .iter()
                .map(|s| Sample {
                    name: s["name"].as_str().unwrap().to_string(),
                    labels: s["labels"]
                        .as_object()
                        .unwrap()
                        .iter()
                        .map(|(k, v)| (k.clone(), v.as_str().unwrap().to_string()))
                        .collect(),
                    value: match &s["value"] {
                        Value::String(s) if s == "+Inf" => f64::INFINITY,
                        v => v.as_f64().unwrap(),
                    },
                })
                .collect();
            families.insert(
                name.clone(),
                (f["type"].as_str().unwrap().to_string(), samples),
            );
        }
        Scrape {
            content_type: v["content_type"].as_str().unwrap_or_default().to_string(),
            families,
        }
    }

    /// The type prometheus_client read for family `name`.
    pub fn kind(&self, family: &str) -> &str {
        self.families
            .get(family)
            .map(|(t, _)| t.as_str())
            .unwrap_or_else(|| panic!("no family {family}; have {:?}", self.families.keys()))
    }

    /// Every sample named `name` whose labels include all of `labels`.
    pub fn samples(&self, name: &str, labels: &[(&str, &str)]) -> Vec<&Sample> {
        self.families
            .values()
            .flat_map(|(_, s)| s)
            .filter(|s| s.name == name)
            .filter(|s| {
                labels
                    .iter()
                    .all(|(k, v)| s.labels.get(*k).map(String::as_str) == Some(*v))
            })
            .collect()
    }

    /// The value of the one sample named `name` with exactly `labels`
    /// (0 when there is none).
    pub fn value(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        let found: Vec<&Sample> = self
            .samples(name, labels)
            .into_iter()
            .filter(|s| s.labels.len() == labels.len())
            .collect();
        assert!(found.len() <= 1, "{name}{labels:?} matches {found:?}");
        found.first().map_or(0.0, |s| s.value)
    }

    /// Cumulative bucket counts `(le, count)` of histogram `family` for
    /// exactly `labels` (plus `le`), in order, after checking that `_count`
    /// equals the `+Inf` bucket and that counts never decrease.
    pub fn buckets(&self, family: &str, labels: &[(&str, &str)]) -> Vec<(f64, f64)> {
        let mut out: Vec<(f64, f64)> = self
            .samples(&format!("{family}_bucket"), labels)
            .into_iter()
            .filter(|s| s.labels.len() == labels.len() + 1)
            .map(|s| {
                let le = match s.labels["le"].as_str() {
                    "+Inf" => f64::INFINITY,
                    v => v.parse().unwrap(),
                };
                (le, s.value)
            })
            .collect();
        out.sort_by(|a, b| a.0.total_cmp(&b.0));
        for w in out.windows(2) {
            assert!(
                w[1].1 >= w[0].1,
                "{family}{labels:?}: buckets decrease: {out:?}"
            );
        }
        if let Some((_, all)) = out.last() {
            assert_eq!(
                *all,
                self.value(&format!("{family}_count"), labels),
                "{family}{labels:?}: _count is the +Inf bucket"
            );
        }
        out
    }

    /// The cumulative count of bucket `le` (observations ≤ `le` seconds)
    /// of histogram `family` with exactly `labels`.
    pub fn bucket(&self, family: &str, labels: &[(&str, &str)], le: f64) -> f64 {
        self.buckets(family, labels)
            .into_iter()
            .find(|(b, _)| *b == le)
            .unwrap_or_else(|| panic!("{family}{labels:?} has no bucket le={le}"))
            .1
    }

    /// Number of observations of histogram `family` with exactly `labels`.
    pub fn count(&self, family: &str, labels: &[(&str, &str)]) -> f64 {
        self.value(&format!("{family}_count"), labels)
    }
}

/// A random W3C trace id (32 hex digits) and span id (16 hex digits).
pub fn trace_ids() -> (String, String) {
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    let mix = |n: u128| {
        let mut x = n ^ 0x9e37_79b9_7f4a_7c15_f39c_c060_5ced_c834;
        x = x.wrapping_mul(0xbf58_476d_1ce4_e5b9_94d0_49bb_1331_11eb);
        x ^ (x >> 61) ^ u128::from(std::process::id())
    };
    let trace = format!("{:032x}", mix(seed));
    let span = format!("{:016x}", mix(seed.rotate_left(17)) as u64 | 1);
    (trace, span)
}

/// A span as the collector wrote it.
#[derive(Debug, Clone)]
pub struct Span {
    /// `service.name` of its resource.
    pub service: String,
    /// Lower-case hex.
    pub trace_id: String,
    /// Lower-case hex.
    pub span_id: String,
    /// Lower-case hex; empty for a root span.
    pub parent_span_id: String,
    /// The span name.
    pub name: String,
    /// OTLP span kind (2 = server, 3 = client).
    pub kind: i64,
    /// Attributes, values as strings.
    pub attributes: BTreeMap<String, String>,
    /// Status code (0 unset, 1 ok, 2 error).
    pub status: i64,
}

/// A real OpenTelemetry Collector on loopback; killed on drop.
pub struct Collector {
    child: Child,
    dir: tempfile::TempDir,
    /// `host:port` of its OTLP/gRPC receiver.
    pub grpc: String,
    /// `host:port` of its OTLP/HTTP receiver.
    pub http: String,
}

fn attribute_value(v: &Value) -> String {
    for key in ["stringValue", "intValue", "boolValue", "doubleValue"] {
        if let Some(x) = v.get(key) {
            return match x {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            };
        }
    }
    v.to_string()
}

fn attributes(list: &Value) -> BTreeMap<String, String> {
    list.as_array()
        .map(|a| {
            a.iter()
                .map(|kv| {
                    (
                        kv["key"].as_str().unwrap_or_default().to_string(),
                        attribute_value(&kv["value"]),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

impl Collector {
    /// Starts the collector with the OTLP receiver (gRPC and HTTP) and the
    /// file exporter for traces and metrics, and waits until it accepts
    /// connections.
    pub fn start() -> Collector {
        let dir = tempfile::tempdir().unwrap();
        let (grpc, http) = (
            format!("127.0.0.1:{}", free_port()),
            format!("127.0.0.1:{}", free_port()),
        );
        let config = dir.path().join("config.yaml");
        std::fs::write(
            &config,
            format!(
                "receivers:\n  otlp:\n    protocols:\n      grpc:\n        endpoint: {grpc}\n      http:\n        endpoint: {http}\n\
                 exporters:\n  file:\n    path: {}\n    flush_interval: 100ms\n\
                 service:\n  telemetry:\n    metrics:\n      level: none\n  pipelines:\n    traces:\n      receivers: [otlp]\n      exporters: [file]\n    metrics:\n      receivers: [otlp]\n      exporters: [file]\n",
                dir.path().join("received.json").display()
            ),
        )
        .unwrap();
        let child = Command::new(collector_binary())
            .arg(format!("--config=file:{}", config.display()))
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.path().join("collector.log")).unwrap())
            .spawn()
            .expect("start the collector");
        let mut c = Collector {
            child,
            dir,
            grpc,
            http,
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        while std::net::TcpStream::connect(&c.grpc).is_err()
            || std::net::TcpStream::connect(&c.http).is_err()
        {
            if let Ok(Some(status)) = c.child.try_wait() {
                panic!("the collector exited with {status}:\n{}", c.log());
            }
            assert!(
                Instant::now() < deadline,
                "the collector did not start:\n{}",
                c.log()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        c
    }

    /// The collector's own log.
    pub fn log(&self) -> String {
        let mut s = String::new();
        if let Ok(mut f) = std::fs::File::open(self.dir.path().join("collector.log")) {
            let _ = f.read_to_string(&mut s);
        }
        s
    }

    fn received(&self) -> Vec<Value> {
        std::fs::read_to_string(self.dir.path().join("received.json"))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }

    /// Every span received so far.
    pub fn spans(&self) -> Vec<Span> {
        let mut out = Vec::new();
        for batch in self.received() {
            for rs in batch["resourceSpans"].as_array().into_iter().flatten() {
                let service = attributes(&rs["resource"]["attributes"])
                    .get("service.name")
                    .cloned()
                    .unwrap_or_default();
                for ss in rs["scopeSpans"].as_array().into_iter().flatten() {
                    for s in ss["spans"].as_array().into_iter().flatten() {
                        out.push(Span {
                            service: service.clone(),
                            trace_id: s["traceId"].as_str().unwrap_or_default().to_lowercase(),
                            span_id: s["spanId"].as_str().unwrap_or_default().to_lowercase(),
                            parent_span_id: s["parentSpanId"]
                                .as_str()
                                .unwrap_or_default()
                                .to_lowercase(),
                            name: s["name"].as_str().unwrap_or_default().to_string(),
                            kind: s["kind"].as_i64().unwrap_or_default(),
                            attributes: attributes(&s["attributes"]),
                            status: s["status"]["code"].as_i64().unwrap_or_default(),
                        });
                    }
                }
            }
        }
        out
    }

    /// Names of the metrics received over OTLP, with their resource's
    /// `service.name`.
    pub fn metric_names(&self) -> Vec<(String, String)> {
        let mut out = Vec::new();
        for batch in self.received() {
            for rm in batch["resourceMetrics"].as_array().into_iter().flatten() {
                let service = attributes(&rm["resource"]["attributes"])
                    .get("service.name")
                    .cloned()
                    .unwrap_or_default();
                for sm in rm["scopeMetrics"].as_array().into_iter().flatten() {
                    for m in sm["metrics"].as_array().into_iter().flatten() {
                        out.push((
                            service.clone(),
                            m["name"].as_str().unwrap_or_default().to_string(),
                        ));
                    }
                }
            }
        }
        out
    }

    /// Waits until the spans of trace `trace_id` satisfy `done`, and returns
    /// them; panics with what arrived after `within`.
    pub fn wait_for_trace(
        &self,
        trace_id: &str,
        within: Duration,
        done: impl Fn(&[Span]) -> bool,
    ) -> Vec<Span> {
        let deadline = Instant::now() + within;
        loop {
            let spans: Vec<Span> = self
                .spans()
                .into_iter()
                .filter(|s| s.trace_id == trace_id)
                .collect();
            if done(&spans) {
                return spans;
            }
            assert!(
                Instant::now() < deadline,
                "trace {trace_id} incomplete after {within:?}: {spans:#?}\ncollector log:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// The directory the collector writes to.
    pub fn dir(&self) -> PathBuf {
        self.dir.path().to_path_buf()
    }
}

impl Drop for Collector {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The spans of `spans` named `name`.
pub fn named<'a>(spans: &'a [Span], name: &str) -> Vec<&'a Span> {
    spans.iter().filter(|s| s.name == name).collect()
}

/// The one span of `spans` named `name`.
pub fn one<'a>(spans: &'a [Span], name: &str) -> &'a Span {
    let found = named(spans, name);
    assert_eq!(found.len(), 1, "one {name} span expected in {spans:#?}");
    found[0]
}
