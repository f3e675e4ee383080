//! EvaluateFunction through a running `krm-fn-runner serve` versus a bare
//! spawn of the same catalog binary with the same input, at 1 and 16
//! concurrent callers, in one run. Prints the server/bare ratio of medians,
//! and the cost of metrics: the same server with Porch's
//! `OTEL_METRICS_EXPORTER=prometheus` against one with telemetry off, and
//! the cost of a step's tag constraint: the same call with the image's
//! repository and `Tag` `~0.4` (the exec runtime picks the configured
//! version) against the call naming the full image, in criterion's groups
//! and again as interleaved pairs on one connection (the per-pair
//! difference's median).
//!
//! Needs the catalog functions (`scripts/install-catalog-functions.sh`).
//! Run: `cargo bench --bench evaluate`.

use std::io::Write;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group};

use krm_fn_runner::adapters::grpc::pb::EvaluateFunctionRequest;
use krm_fn_runner::adapters::grpc::pb::function_evaluator_client::FunctionEvaluatorClient;
use krm_fn_testbed::common;
use tonic::transport::Channel;

const INPUT: &str = "apiVersion: config.kubernetes.io/v1\nkind: ResourceList\nitems:\n- apiVersion: apps/v1\n  kind: Deployment\n  metadata:\n    name: web\n  spec:\n    replicas: 3\n    template:\n      spec:\n        containers:\n        - name: nginx\n          image: nginx:1.14\n- apiVersion: v1\n  kind: ConfigMap\n  metadata:\n    name: cm\n  data:\n    k: v\nfunctionConfig:\n  apiVersion: v1\n  kind: ConfigMap\n  metadata:\n    name: fn\n  data:\n    namespace: bench\n";

fn catalog() -> PathBuf {
    common::catalog_dir()
}

fn image() -> String {
    common::catalog_image("set-namespace")
}

/// `serve` with the exec runtime only, on the catalog's `config.yaml` and
/// binaries, logging nothing, with the environment variables `env`.
fn exec_server(env: &[(&str, &str)]) -> common::Runner {
    let config = format!("--config={}", catalog().join("config.yaml").display());
    let functions = format!("--functions={}", catalog().join("bin").display());
    common::Runner::start_with_env(
        &[
            &config,
            &functions,
            "--disable-runtimes=pod",
            "--log-level=0",
        ],
        env,
    )
}

/// One bare run of the binary: spawn, write stdin, read stdout and stderr.
async fn bare(binary: &PathBuf) {
    let mut child = tokio::process::Command::new(binary)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let write = async move {
        tokio::io::AsyncWriteExt::write_all(&mut stdin, INPUT.as_bytes())
            .await
            .unwrap();
    };
    let (_, out) = tokio::join!(write, child.wait_with_output());
    assert!(out.unwrap().status.success());
}

/// One call through the server: `image` as is, or its repository with
/// `tag` when given.
async fn through_server(
    client: &mut FunctionEvaluatorClient<Channel>,
    image: &str,
    tag: Option<&str>,
) {
    let (image, tag) = match tag {
        Some(t) => (
            image.rsplit_once(':').map_or(image, |(repo, _)| repo),
            t.to_string(),
        ),
        None => (image, String::new()),
    };
    let r = client
        .evaluate_function(EvaluateFunctionRequest {
            tag,
            resource_list: INPUT.as_bytes().to_vec().into(),
            image: image.to_string(),
        })
        .await
        .unwrap();
    assert!(!r.into_inner().resource_list.is_empty());
}

fn bench(c: &mut Criterion) {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let binary = catalog().join("bin/set-namespace");
    let image = image();
    let server = exec_server(&[]);
    let client = rt.block_on(server.client());
    let metered = exec_server(&[
        ("OTEL_METRICS_EXPORTER", "prometheus"),
        ("OTEL_EXPORTER_PROMETHEUS_HOST", "127.0.0.1"),
        ("OTEL_EXPORTER_PROMETHEUS_PORT", "0"),
    ]);
    let metered_client = rt.block_on(metered.client());
    for concurrency in [1usize, 16] {
        let mut group = c.benchmark_group(format!("evaluate/c{concurrency}"));
        group
            .sample_size(30)
            .measurement_time(Duration::from_secs(8));
        group.bench_function("bare-spawn", |b| {
            b.to_async(&rt).iter_custom(|iters| {
                let binary = binary.clone();
                async move {
                    let start = Instant::now();
                    for _ in 0..iters {
                        let mut set = tokio::task::JoinSet::new();
                        for _ in 0..concurrency {
                            let binary = binary.clone();
                            set.spawn(async move { bare(&binary).await });
                        }
                        set.join_all().await;
                    }
                    start.elapsed()
                }
            })
        });
        for (name, client, tag) in [
            ("server", &client, None),
            ("server-metrics", &metered_client, None),
            ("server-tag", &client, Some("~0.4")),
        ] {
            group.bench_function(name, |b| {
                b.to_async(&rt).iter_custom(|iters| {
                    let client = client.clone();
                    let image = image.clone();
                    async move {
                        let start = Instant::now();
                        for _ in 0..iters {
                            let mut set = tokio::task::JoinSet::new();
                            for _ in 0..concurrency {
                                let mut client = client.clone();
                                let image = image.clone();
                                set.spawn(
                                    async move { through_server(&mut client, &image, tag).await },
                                );
                            }
                            set.join_all().await;
                        }
                        start.elapsed()
                    }
                })
            });
        }
        group.finish();
    }
}

/// Where criterion keeps its estimates for this bench: `CRITERION_HOME`
/// (criterion's own override) or `criterion/` in the target directory in
/// use, so the ratios below read what this run wrote whatever
/// `CARGO_TARGET_DIR` or `build.target-dir` says.
fn criterion_dir() -> PathBuf {
    std::env::var_os("CRITERION_HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| common::target_dir().join("criterion"))
}

/// The bench's criterion settings: the defaults, writing to `criterion_dir`.
fn criterion() -> Criterion {
    Criterion::default().output_directory(&criterion_dir())
}

/// Reads criterion's median estimate (nanoseconds) for `group/name`.
fn median_ns(group: &str, name: &str) -> Option<f64> {
    let path = criterion_dir()
        .join(group.replace('/', "_"))
        .join(name)
        .join("new/estimates.json");
    let text = std::fs::read_to_string(path).ok()?;
    let v: serde_json::Value = serde_json::from_str(&text).ok()?;
    v["median"]["point_estimate"].as_f64()
}

/// The tag's added cost measured interleaved, one caller: `pairs` pairs
/// of calls on one server and one connection, each pair a call naming the
/// full image and a call with the repository and `Tag` `~0.4`, their order
/// alternating from pair to pair so that drift and warm-up fall on both.
/// Returns the medians (ms) of the full calls, of the tagged calls, and of
/// the per-pair differences (tagged − full).
fn paired_tag_cost(pairs: usize) -> (f64, f64, f64) {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let server = exec_server(&[]);
    let image = image();
    rt.block_on(async {
        let mut client = server.client().await;
        for _ in 0..20 {
            through_server(&mut client, &image, None).await;
            through_server(&mut client, &image, Some("~0.4")).await;
        }
        let (mut full, mut tagged, mut diff) = (Vec::new(), Vec::new(), Vec::new());
        for i in 0..pairs {
            let timed = |tag: Option<&'static str>| {
                let mut client = client.clone();
                let image = image.clone();
                async move {
                    let start = Instant::now();
                    through_server(&mut client, &image, tag).await;
                    start.elapsed().as_secs_f64() * 1e3
                }
            };
            let (f, t) = if i % 2 == 0 {
                let f = timed(None).await;
                (f, timed(Some("~0.4")).await)
            } else {
                let t = timed(Some("~0.4")).await;
                (timed(None).await, t)
            };
            full.push(f);
            tagged.push(t);
            diff.push(t - f);
        }
        let median = |v: &mut Vec<f64>| {
            v.sort_by(f64::total_cmp);
            v[v.len() / 2]
        };
        (median(&mut full), median(&mut tagged), median(&mut diff))
    })
}

criterion_group! {
    name = benches;
    config = criterion();
    targets = bench
}

fn main() {
    benches();
    criterion().configure_from_args().final_summary();
    let mut report = std::io::stdout();
    let pairs = 600;
    let (full, tagged, diff) = paired_tag_cost(pairs);
    let _ = writeln!(
        report,
        "evaluate/paired c1: full image {full:.3} ms, repository + Tag ~0.4 {tagged:.3} ms, per-pair added {diff:+.3} ms (p50 of {pairs} interleaved pairs)"
    );
    for c in [1, 16] {
        let group = format!("evaluate/c{c}");
        if let (Some(bare), Some(server)) =
            (median_ns(&group, "bare-spawn"), median_ns(&group, "server"))
        {
            let _ = writeln!(
                report,
                "{group}: bare spawn {:.2} ms, through server {:.2} ms, ratio {:.3}x (p50, per batch of {c})",
                bare / 1e6,
                server / 1e6,
                server / bare
            );
        }
        if let (Some(full), Some(tagged)) =
            (median_ns(&group, "server"), median_ns(&group, "server-tag"))
        {
            let _ = writeln!(
                report,
                "{group}: full image {:.3} ms, repository + Tag ~0.4 {:.3} ms, added {:+.3} ms (p50)",
                full / 1e6,
                tagged / 1e6,
                (tagged - full) / 1e6
            );
        }
        if let (Some(off), Some(on)) = (
            median_ns(&group, "server"),
            median_ns(&group, "server-metrics"),
        ) {
            let _ = writeln!(
                report,
                "{group}: telemetry off {:.2} ms, metrics on {:.2} ms, ratio {:.3}x (p50)",
                off / 1e6,
                on / 1e6,
                on / off
            );
        }
    }
}
