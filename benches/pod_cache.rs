//! Decisions per second of the pod-cache state machine (target
//! ≥ 500,000/s on one core, cost independent of the pods of other images).
//!
//! - `hit/<images>`: a request served by a ready pod, then its call
//!   finished — two decisions — spread over 10 or 2,000 images with two
//!   pods each; equal figures for both sizes show the O(1) claim.
//! - `cold`: request → create pod → created → pod ready (watch) → call
//!   finished → pod gone, a cold start with its eviction — five decisions.
//!
//! - `simulate/day-1m-200fn`: the policy simulator replaying a generated
//!   24-hour trace of 1,000,000 requests over 200 functions (target: under
//!   5 s), with Porch's default policy.
//! - `simulate/day-300k-2000fn`: the same over 2,000 functions (300,000
//!   requests): thousands of pods alive, so the simulated cluster's cost per
//!   GC listing and per pod change shows (target ≥ 200,000 requests/s).
//!
//! Run: `cargo bench --bench pod_cache`. Criterion reports elements/s, where
//! an element is one decision (one `handle` plus draining its commands).

use std::hint::black_box;
use std::time::Duration;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use krm_fn_runner::domain::pod_cache::{
    Command, FunctionSettings, Input, ObservedPhase, ObservedPod, PodCache, PodCachePolicy,
    RequestId, SlotId, UnixTime,
};

fn policy() -> PodCachePolicy {
    let settings = FunctionSettings {
        ttl: Duration::from_secs(1800),
        max_waitlist: 1,
        max_parallel_pods: 2,
        max_load_per_pod: 64,
        resources: None,
        ..FunctionSettings::default()
    };
    PodCachePolicy::new(settings, "bench").expect("valid token")
}

/// Drains the commands; returns the slot and pod name of a creation, if any.
fn drain(cache: &mut PodCache) -> Option<(SlotId, String)> {
    let mut created = None;
    while let Some(cmd) = cache.poll_command() {
        if let Command::CreatePod(c) = &cmd {
            created = Some((c.slot, c.pod_name.clone()));
        }
        black_box(cmd);
    }
    created
}

/// The creation of `slot` succeeded and the watch reports pod `name` ready
/// at `endpoint`: two decisions.
fn make_ready(cache: &mut PodCache, now: UnixTime, slot: SlotId, name: &str, endpoint: &str) {
    cache.handle(
        now,
        Input::Created {
            slot,
            result: Ok(()),
        },
    );
    drain(cache);
    let pod = ObservedPod {
        name: name.to_string(),
        labelled: true,
        phase: ObservedPhase::Ready {
            endpoint: endpoint.to_string(),
        },
        ..ObservedPod::default()
    };
    cache.handle(now, Input::PodObserved { pod });
}

/// A cache with two ready pods for each of `n` images.
fn warm_cache(n: usize) -> (PodCache, Vec<String>, UnixTime) {
    let mut cache = PodCache::new(policy(), "v1");
    let images: Vec<String> = (0..n)
        .map(|i| format!("ghcr.io/kptdev/krm-functions-catalog/fn-{i}:v1.0.{i}"))
        .collect();
    let now = UnixTime::from_secs(1_700_000_000);
    let mut id = 0;
    for image in &images {
        for _ in 0..2 {
            id += 1;
            let request = RequestId(id);
            cache.handle(
                now,
                Input::Request {
                    request,
                    image: image.clone(),
                },
            );
            if let Some((slot, name)) = drain(&mut cache) {
                let endpoint = format!("{}.ns.svc.cluster.local:9446", slot.0);
                make_ready(&mut cache, now, slot, &name, &endpoint);
                drain(&mut cache);
            }
        }
        for r in id - 1..=id {
            cache.handle(
                now,
                Input::CallFinished {
                    request: RequestId(r),
                },
            );
            drain(&mut cache);
        }
    }
    (cache, images, now)
}

fn hits(c: &mut Criterion) {
    let mut group = c.benchmark_group("hit");
    group.throughput(Throughput::Elements(2));
    for n in [10usize, 2_000] {
        let (mut cache, images, start) = warm_cache(n);
        let mut i = 0u64;
        group.bench_with_input(BenchmarkId::from_parameter(n), &n, |b, _| {
            b.iter(|| {
                i += 1;
                let now = start + Duration::from_micros(i);
                let request = RequestId(1_000_000 + i);
                let image = images[(i as usize * 7919) % images.len()].clone();
                cache.handle(now, Input::Request { request, image });
                drain(&mut cache);
                cache.handle(now, Input::CallFinished { request });
                drain(&mut cache);
            })
        });
    }
    group.finish();
}

fn cold(c: &mut Criterion) {
    let mut group = c.benchmark_group("cold");
    group.throughput(Throughput::Elements(5));
    let (mut cache, _, start) = warm_cache(200);
    let mut i = 0u64;
    group.bench_function("start-serve-evict", |b| {
        b.iter(|| {
            i += 1;
            let now = start + Duration::from_micros(i);
            let request = RequestId(1_000_000 + i);
            let image = format!("example.com/cold/fn-{}:v1", i % 1000);
            cache.handle(now, Input::Request { request, image });
            let (slot, pod_name) = drain(&mut cache).expect("a cold start creates a pod");
            make_ready(&mut cache, now, slot, &pod_name, "ep:9446");
            drain(&mut cache);
            cache.handle(now, Input::CallFinished { request });
            drain(&mut cache);
            cache.handle(now, Input::PodDeleted { pod_name });
            drain(&mut cache);
        })
    });
    group.finish();
}

fn simulate_day(c: &mut Criterion) {
    use krm_fn_runner::adapters::sim::{ReplayOptions, replay};
    use krm_fn_runner::domain::simulation::{SimPolicy, TraceSpec, generate};
    let trace = generate(&TraceSpec {
        requests: 1_000_000,
        functions: 200,
        ..TraceSpec::default()
    })
    .expect("valid spec");
    let policy = SimPolicy::parse(
        b"podTTL: 30m\nmaxWaitlistLength: 2\nmaxParallelPodsPerFunction: 1\n",
        "porch-defaults.yaml",
    )
    .expect("valid policy");
    let mut group = c.benchmark_group("simulate");
    group
        .sample_size(10)
        .throughput(Throughput::Elements(trace.len() as u64));
    group.bench_function("day-1m-200fn", |b| {
        b.iter(|| black_box(replay(&trace, &policy, &ReplayOptions::default()).expect("replays")))
    });
    let wide = generate(&TraceSpec {
        requests: 300_000,
        functions: 2_000,
        ..TraceSpec::default()
    })
    .expect("valid spec");
    group.throughput(Throughput::Elements(wide.len() as u64));
    group.bench_function("day-300k-2000fn", |b| {
        b.iter(|| black_box(replay(&wide, &policy, &ReplayOptions::default()).expect("replays")))
    });
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().measurement_time(Duration::from_secs(3)).warm_up_time(Duration::from_secs(1));
    targets = hits, cold
}
criterion_group! {
    name = simulation;
    config = Criterion::default().measurement_time(Duration::from_secs(10)).warm_up_time(Duration::from_secs(1));
    targets = simulate_day
}
criterion_main!(benches, simulation);
