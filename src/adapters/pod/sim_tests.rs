//! The real driver on the simulated platform under paused tokio time: the
//! pod runtime exactly as it runs against Kubernetes (its driver task,
//! timers, background API calls and pod watch), on a [`SimPlatform`] shared
//! by replicas, with API outages and watch gaps, checked against the
//! simulated cluster's audit (no pod deleted with a call in it, no call to
//! a pod that is gone).

use std::sync::Arc;
use std::time::Duration;

use super::connections::DirectResolver;
use super::*;
use crate::adapters::sim::{Outage, SimCluster, SimPlatform, StartLatency, TokioClock};
use crate::domain::pod_cache::template::inline_templates;
use crate::domain::pod_cache::{FunctionSettings, PodCachePolicy, UnixTime};
use crate::ports::{ImageMetadata, MockImageInspector};

const NS: &str = "porch-fn-system";
const IMG: &str = "ghcr.io/kptdev/krm-functions-catalog/set-namespace:v0.4.5";
const TTL: Duration = Duration::from_secs(20);
const ORIGIN: UnixTime = UnixTime::from_secs(1_700_000_000);
/// The GC period of a replica unless a test says otherwise.
const GC: Duration = Duration::from_secs(2);

fn inspector() -> Arc<dyn ImageInspector> {
    let mut m = MockImageInspector::new();
    m.expect_inspect().returning(|image| {
        Ok(ImageMetadata {
            image: image.to_string(),
            registry: "ghcr.io".into(),
            digest: "sha256:0123".into(),
            platform_digest: "sha256:0123".into(),
            entrypoint: vec!["/usr/local/bin/function".into()],
        })
    });
    Arc::new(m)
}

/// A simulated cluster whose pods start within 0.2–1 s, on tokio's paused
/// clock, with API calls taking 100 ms.
fn platform() -> (SimPlatform, TokioClock) {
    let cluster = SimCluster::new(NS, ORIGIN, 7).with_latency(StartLatency::Uniform {
        min: Duration::from_millis(200),
        max: Duration::from_secs(1),
    });
    let clock = TokioClock::new(ORIGIN);
    let platform = SimPlatform::with_clock(cluster, clock.clone(), Duration::from_millis(100));
    platform.spawn_kubelet();
    (platform, clock)
}

/// Runner replica `client` (token `token`) on `platform`: one pod per
/// function, TTL 20 s, GC every `scan`, pod-IP address mode.
async fn replica(
    platform: &SimPlatform,
    client: usize,
    clock: &TokioClock,
    token: &str,
    scan: Duration,
) -> PodEvaluator {
    replica_via(
        platform,
        client,
        clock,
        token,
        scan,
        Box::new(DirectResolver),
    )
    .await
}

/// As [`replica`], dialling the wrapper servers through `resolver`.
async fn replica_via(
    platform: &SimPlatform,
    client: usize,
    clock: &TokioClock,
    token: &str,
    scan: Duration,
    resolver: Box<dyn Resolver>,
) -> PodEvaluator {
    let defaults = FunctionSettings {
        ttl: TTL,
        max_waitlist: 4,
        max_parallel_pods: 1,
        max_load_per_pod: 8,
        resources: None,
        ..FunctionSettings::default()
    };
    let mut policy = PodCachePolicy::new(defaults, token).unwrap();
    policy.pod_ready_timeout = Duration::from_secs(10);
    policy.retry_backoff = Duration::from_millis(500);
    policy.retry_backoff_max = Duration::from_secs(2);
    let config = PodRuntimeConfig {
        namespace: NS.into(),
        policy,
        templates: TemplateFeed::fixed(inline_templates("example.com/wrapper:test")),
        wrapper_image: "example.com/wrapper:test".into(),
        warm_up: Vec::new(),
        scan_interval: scan,
        address_mode: AddressMode::PodIp,
        max_message_bytes: 6 << 20,
        connect_timeout: Duration::from_secs(1),
        api_timeout: Duration::from_secs(2),
        default_image_prefix: "ghcr.io/kptdev/krm-functions-catalog".into(),
        tag_list_ttl: Duration::from_secs(300),
        clock: Arc::new(clock.clone()),
    };
    let evaluator = PodEvaluator::start(
        config,
        Arc::new(platform.for_client(client)),
        inspector(),
        None,
        resolver,
    )
    .await
    .unwrap();
    evaluator.ready().await;
    evaluator
}

/// One call of `caller` through `runner`: a lease, `length` in the pod
/// (counted by the simulated wrapper), release. The pod's name, or why
/// there was none.
async fn one_call(
    platform: &SimPlatform,
    runner: &PodEvaluator,
    caller: usize,
    length: Duration,
) -> Result<String, String> {
    let lease = runner.lease(IMG).await.map_err(|e| e.to_string())?;
    let pod = lease.assignment.pod_name.clone();
    platform
        .with_cluster(|c| c.begin_call(&pod, caller))
        .map_err(|e| format!("{pod}: {e:?}"))?;
    tokio::time::sleep(length).await;
    platform.with_cluster(|c| c.end_call(&pod));
    drop(lease);
    Ok(pod)
}

// The audited failure sequence on the real driver: two replicas share a pod;
// replica A's API server connection fails for longer than the pod's whole
// reclaim-after while A keeps calling it; replica B's GC reclaims the pod
// once the annotation has passed. A never counts on an extension the API
// server did not take (persist before extend), and stops handing the pod
// out a reuse margin before the annotation it could not move passes, so
// B's deletion finds no call in it.
#[tokio::test(start_paused = true)]
async fn a_replica_that_cannot_extend_stops_using_the_pod_before_another_reclaims_it() {
    let (platform, clock) = platform();
    let a = replica(&platform, 0, &clock, "ra", GC).await;
    let first = one_call(&platform, &a, 0, Duration::from_millis(200))
        .await
        .unwrap();
    // B's GC lists every 200 ms: it acts as soon as the annotation passes.
    let b = replica(&platform, 1, &clock, "rb", Duration::from_millis(200)).await;
    let shared = one_call(&platform, &b, 1, Duration::from_millis(200))
        .await
        .unwrap();
    assert_eq!(shared, first, "B adopted A's pod");

    // A loses the API server (connection refused) for 90 s while two of
    // its callers call the pod back to back, 1 s per call, half a second
    // apart: at any moment a call that started less than 0.5 s before is
    // in the pod.
    let until = clock.now() + Duration::from_secs(90);
    platform.set_outage(Some(0), until, Outage::Failing);
    let caller = |offset: Duration| {
        let (platform, a, clock, first) = (&platform, &a, &clock, &first);
        async move {
            tokio::time::sleep(offset).await;
            let (mut served, mut refused, mut last) = (0, 0, None);
            while clock.now() < until {
                match one_call(platform, a, 0, Duration::from_secs(1)).await {
                    Ok(pod) if pod == *first => {
                        served += 1;
                        last = Some(clock.now());
                    }
                    Ok(pod) => panic!("A made {pod} without the API server"),
                    Err(_) => {
                        refused += 1;
                        tokio::time::sleep(Duration::from_millis(300)).await;
                    }
                }
            }
            (served, refused, last)
        }
    };
    let (one, two) = tokio::join!(caller(Duration::ZERO), caller(Duration::from_millis(500)));
    let served_on_first = one.0 + two.0;
    let refused = one.1 + two.1;
    let last_on_first = one.2.max(two.2);
    let audit = platform.with_cluster(|c| c.audit().clone());
    assert!(audit.deleted_in_use.is_empty(), "{audit:?}");
    assert!(audit.calls_to_missing.is_empty(), "{audit:?}");
    let gone = platform.with_cluster(|c| c.observed_pod(&first).is_none());
    assert!(gone, "B reclaimed the pod A could not extend");
    assert!(served_on_first > 0 && refused > 0);
    let reclaim = platform.with_cluster(|c| c.stats().pods_deleted);
    assert!(reclaim >= 1);
    eprintln!(
        "A: {served_on_first} calls on the shared pod (the last at {:?}), {refused} refused during the outage",
        last_on_first
    );
    // Once the API server is back, A gets a pod again.
    one_call(&platform, &a, 0, Duration::from_millis(100))
        .await
        .unwrap();
    let audit = platform.with_cluster(|c| c.audit().clone());
    assert!(audit.deleted_in_use.is_empty(), "{audit:?}");
}

// A pod deleted while the replica's pod watch is down (the deletion is
// never reported): when the watch lists the pods again the replica drops
// the pod, and no call goes to it.
#[tokio::test(start_paused = true)]
async fn a_pod_deleted_during_a_watch_gap_gets_no_call() {
    let (platform, clock) = platform();
    let a = replica(&platform, 0, &clock, "ra", GC).await;
    let first = one_call(&platform, &a, 0, Duration::from_millis(100))
        .await
        .unwrap();
    platform.break_watches(clock.now() + Duration::from_secs(3));
    platform.with_cluster(|c| c.remove_pod(&first));
    tokio::time::sleep(Duration::from_secs(4)).await;
    let second = one_call(&platform, &a, 0, Duration::from_millis(100))
        .await
        .unwrap();
    assert_ne!(second, first);
    let audit = platform.with_cluster(|c| c.audit().clone());
    assert!(audit.calls_to_missing.is_empty(), "{audit:?}");
}

// One call finding its pod unavailable drains the pod on this replica but
// never deletes it: the other call in it goes on; new calls get a new pod.
#[tokio::test(start_paused = true)]
async fn an_unavailable_call_does_not_delete_a_pod_carrying_other_calls() {
    let (platform, clock) = platform();
    let a = replica(&platform, 0, &clock, "ra", GC).await;
    let held = a.lease(IMG).await.unwrap();
    let pod = held.assignment.pod_name.clone();
    platform.with_cluster(|c| c.begin_call(&pod, 0)).unwrap();
    let failing = a.lease(IMG).await.unwrap();
    assert_eq!(failing.assignment.pod_name, pod);
    failing.unavailable();
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert!(platform.with_cluster(|c| c.observed_pod(&pod).is_some()));
    assert_eq!(platform.with_cluster(|c| c.calls_in(&pod)), 1);
    platform.with_cluster(|c| c.end_call(&pod));
    drop(held);
    let audit = platform.with_cluster(|c| c.audit().clone());
    assert!(audit.deleted_in_use.is_empty(), "{audit:?}");
    let _ = clock;
}

// Health follows the pod runtime after start: NOT_SERVING once the pod
// watch has been down for longer than the pod-ready timeout (the runtime
// cannot see its pods start or go), SERVING again once the watch has
// listed the pods again.
#[tokio::test(start_paused = true)]
async fn health_follows_the_pod_watch() {
    let (platform, clock) = platform();
    let a = replica(&platform, 0, &clock, "ra", GC).await;
    assert!(*a.health().borrow());
    platform.break_watches(clock.now() + Duration::from_secs(30));
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert!(*a.health().borrow(), "a short outage changes nothing");
    tokio::time::sleep(Duration::from_secs(6)).await;
    assert!(
        !*a.health().borrow(),
        "down for longer than the pod-ready timeout (10 s)"
    );
    tokio::time::sleep(Duration::from_secs(20)).await;
    assert!(*a.health().borrow(), "listed again");
}

/// Dials every pod at one address.
struct OneAddress(String);

impl Resolver for OneAddress {
    fn resolve(&self, _endpoint: &str) -> Result<String, String> {
        Ok(self.0.clone())
    }
}

// A pod whose wrapper server stops answering (it takes the connection and
// never replies, as a frozen process does) costs the caller its own
// timeout, not more: the connection's keep-alive would only notice after
// 30 s of silence plus 20 s for the ping's answer.
#[tokio::test(start_paused = true)]
async fn a_silent_pod_costs_the_caller_only_its_timeout() {
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let address = silent.local_addr().unwrap().to_string();
    let (platform, clock) = platform();
    let runner = replica_via(
        &platform,
        0,
        &clock,
        "ra",
        GC,
        Box::new(OneAddress(address)),
    )
    .await;
    let mut request =
        EvaluationRequest::new(IMG, "apiVersion: v1\nkind: ResourceList\nitems: []\n");
    request.timeout = Some(Duration::from_secs(5));
    let started = tokio::time::Instant::now();
    let outcome = tokio::time::timeout(Duration::from_secs(600), runner.evaluate(request))
        .await
        .expect("the call ended");
    assert!(
        matches!(outcome, Err(EvalError::Timeout { .. })),
        "{outcome:?}"
    );
    assert!(
        started.elapsed() <= Duration::from_secs(6),
        "{:?}",
        started.elapsed()
    );
    drop(silent);
}
