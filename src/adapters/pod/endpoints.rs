//! Waiting for a new pod's service to publish it: the endpoint watch's
//! signal and the wait itself (service address mode).

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

use crate::domain::pod_cache::template::service_endpoint;
use crate::ports::{EndpointEvent, PlatformError, PodPlatform};

/// What the endpoint watch has reported, for the tasks that wait for a
/// new pod's service: a change counter, and whether the watch is up to date
/// (only then may a waiter rely on it instead of polling).
#[derive(Debug)]
pub(super) struct EndpointSignal {
    changes: watch::Sender<u64>,
    live: AtomicBool,
}

impl EndpointSignal {
    /// No watch yet: waiters poll.
    pub(super) fn new() -> Self {
        Self {
            changes: watch::Sender::new(0),
            live: AtomicBool::new(false),
        }
    }

    /// Takes in one event of the watch.
    pub(super) fn on_event(&self, event: EndpointEvent) {
        match event {
            EndpointEvent::Synced => {
                self.live.store(true, Ordering::Release);
                self.changes.send_modify(|n| *n += 1);
            }
            EndpointEvent::Changed(_) => self.changes.send_modify(|n| *n += 1),
            EndpointEvent::Lost => self.live.store(false, Ordering::Release),
        }
    }

    pub(super) fn is_live(&self) -> bool {
        self.live.load(Ordering::Acquire)
    }
}

/// The pod whose service a creation waits for.
pub(super) struct EndpointTarget<'a> {
    /// Pod and service name.
    pub(super) name: &'a str,
    pub(super) namespace: &'a str,
    /// The pod's IP, to match endpoints without a `targetRef`.
    pub(super) pod_ip: Option<String>,
}

/// Waits until the service of `target` publishes a ready endpoint for its
/// pod (matched by `targetRef`, or by the pod IP), until `deadline`; returns
/// the service endpoint.
///
/// The endpoints are read once, then again whenever the endpoint watch
/// reports a change; while the watch is not up to date (not synced yet,
/// failing, or a platform without one) they are polled with a backoff from
/// 20 ms to 500 ms instead. A live watch is still re-checked every second,
/// in case an event was missed.
pub(super) async fn wait_for_endpoint(
    platform: &dyn PodPlatform,
    signal: &EndpointSignal,
    target: &EndpointTarget<'_>,
    deadline: Instant,
) -> Result<String, String> {
    let (name, namespace) = (target.name, target.namespace);
    let mut changes = signal.changes.subscribe();
    let mut delay = Duration::from_millis(20);
    loop {
        changes.borrow_and_update();
        let last = match platform.service_endpoints(name).await {
            Ok(eps) => {
                let found = eps.iter().any(|e| {
                    e.ready
                        && (e.pod_name.as_deref() == Some(name)
                            || target.pod_ip.as_deref() == Some(e.address.as_str()))
                });
                if found {
                    return Ok(service_endpoint(name, namespace));
                }
                format!("{} endpoint(s), none ready for pod {name}", eps.len())
            }
            Err(e @ PlatformError::Forbidden(_)) => {
                return Err(format!("cannot read the endpoints of service {name}: {e}"));
            }
            Err(e) => e.to_string(),
        };
        let now = Instant::now();
        if now >= deadline {
            return Err(format!(
                "error occurred when waiting the pod and service to be ready. If the error is caused by timeout, you may want to examine the pod/service in namespace {namespace:?}. Error: service {name} has no ready endpoint for its pod ({last})"
            ));
        }
        let wait = if signal.is_live() {
            Duration::from_secs(1)
        } else {
            delay
        };
        tokio::select! {
            changed = changes.changed(), if signal.is_live() => {
                // The sender lives as long as the runtime; if it is gone,
                // fall back to the timer.
                if changed.is_err() {
                    tokio::time::sleep_until((now + delay).min(deadline)).await;
                }
            }
            () = tokio::time::sleep_until((now + wait).min(deadline)) => {}
        }
        delay = (delay * 2).min(Duration::from_millis(500));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ports::{MockPodPlatform, ServiceEndpoint};
    use std::sync::Arc;
    use std::sync::atomic::AtomicUsize;

    /// A platform whose service publishes pod `p` from the `ready_from`-th
    /// read of its endpoints on; counts the reads.
    fn platform(ready_from: usize, reads: Arc<AtomicUsize>) -> MockPodPlatform {
        let mut platform = MockPodPlatform::new();
        platform.expect_service_endpoints().returning(move |_| {
            let n = reads.fetch_add(1, Ordering::SeqCst) + 1;
            Ok(if n >= ready_from {
                vec![ServiceEndpoint {
                    address: "10.0.0.7".into(),
                    ready: true,
                    pod_name: Some("p".into()),
                }]
            } else {
                Vec::new()
            })
        });
        platform
    }

    const TARGET: EndpointTarget<'static> = EndpointTarget {
        name: "p",
        namespace: "ns",
        pod_ip: None,
    };

    #[tokio::test(start_paused = true)]
    async fn a_live_endpoint_watch_replaces_polling() {
        let reads = Arc::new(AtomicUsize::new(0));
        let platform = platform(2, reads.clone());
        let signal = Arc::new(EndpointSignal::new());
        signal.on_event(EndpointEvent::Synced);
        let publisher = signal.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(700)).await;
            publisher.on_event(EndpointEvent::Changed("p".into()));
        });
        let started = Instant::now();
        let deadline = started + Duration::from_secs(30);
        let endpoint = wait_for_endpoint(&platform, &signal, &TARGET, deadline).await;
        assert_eq!(endpoint.as_deref(), Ok("p.ns.svc.cluster.local:9446"));
        // One read at the start, one on the event: no polling in between.
        assert_eq!(reads.load(Ordering::SeqCst), 2);
        assert_eq!(started.elapsed(), Duration::from_millis(700));
    }

    #[tokio::test(start_paused = true)]
    async fn without_a_synced_watch_endpoints_are_polled_until_the_deadline() {
        let reads = Arc::new(AtomicUsize::new(0));
        let platform = platform(usize::MAX, reads.clone());
        let signal = EndpointSignal::new();
        let started = Instant::now();
        let deadline = started + Duration::from_secs(2);
        let err = wait_for_endpoint(&platform, &signal, &TARGET, deadline)
            .await
            .unwrap_err();
        assert!(err.contains("service p has no ready endpoint"), "{err}");
        assert_eq!(started.elapsed(), Duration::from_secs(2));
        // 20, 40, 80, 160, 320, then every 500 ms, and a last read at the deadline.
        assert_eq!(reads.load(Ordering::SeqCst), 9);
        // A watch that was lost falls back to polling as well.
        signal.on_event(EndpointEvent::Synced);
        signal.on_event(EndpointEvent::Lost);
        assert!(!signal.is_live());
    }
}
