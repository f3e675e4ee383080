//! What the watch reports about the pods of this replica's slots
//! (Porch §5.7).
//!
//! - a slot ends as soon as its name is seen with another UID: a warm
//!   pool's names come back, so the slot's own pod is gone, and calls never
//!   reach a pod the replica did not create, join or claim;
//! - a pending slot whose pod the kubelet will not run (failed, or reported
//!   unable to start for the slot's own UID) fails its waiters at once, not
//!   at the pod-ready deadline, and its pod is deleted; the next request
//!   tries a new pod;
//! - a pod reported failed is deleted (it serves nobody), and a pod
//!   reported terminating or deleted ends its slot; a pending slot's
//!   waiters move on. While a creation is still making its pod, a pod of
//!   its name reported terminating or deleted is not taken as the slot's,
//!   nor, for a pool, one without the creation's annotation;
//! - a deleted warm pool pod is created again at once.

use super::PodCache;
use super::state::{Phase, Step, gone};
use crate::domain::pod_cache::io::{DeleteReason, ObservedPhase, ObservedPod, PodCacheError};
use crate::domain::pod_cache::naming;
use crate::domain::pod_cache::template::pod_ip_endpoint;
use crate::domain::pod_cache::time::UnixTime;

impl PodCache {
    /// The kubelet says it cannot start the pod of a pending slot: fail its
    /// waiters now (not at the pod-ready deadline) and delete the pod; the
    /// next request tries a new one. Only for the slot's own pod (same UID).
    pub(super) fn on_cannot_start(
        &mut self,
        now: UnixTime,
        pod_name: &str,
        uid: Option<String>,
        reason: String,
    ) {
        let Some(&id) = self.by_name.get(pod_name) else {
            return;
        };
        let slot = &self.slots[&id];
        let Phase::Pending(c) = &slot.phase else {
            return;
        };
        if uid.is_none() || slot.uid != uid || matches!(c.step, Step::NameHeld { .. }) {
            return;
        }
        let err = PodCacheError::CannotStart {
            image: slot.image.clone(),
            pod: slot.pod_name.clone(),
            reason,
        };
        self.evict(now, id, err, Some(DeleteReason::Failed));
    }

    // Porch §5.7: what the watch reports about a pod.
    pub(super) fn on_observed(&mut self, now: UnixTime, pod: &ObservedPod) {
        let Some(&id) = self.by_name.get(&pod.name) else {
            return;
        };
        let slot = self.slots.get_mut(&id).expect("indexed slot");
        if slot.is_other_pod(&pod.uid) {
            // Another pod under the slot's name (a warm pool's names come
            // back): the slot's own pod is gone.
            let err = gone(slot, false);
            return self.evict(now, id, err, None);
        }
        if let Phase::Pending(c) = &slot.phase
            && matches!(c.step, Step::NameHeld { .. })
        {
            // The terminating pod holding the name: its deletion (or a
            // listing without it) lets the creation go on.
            return;
        }
        if let Phase::Pending(c) = &slot.phase
            && matches!(c.step, Step::Creating { .. })
            && slot.pool.is_some()
            && pod.creation.as_deref() != Some(c.nonce.as_str())
        {
            // Not (yet) the pod this creation makes.
            return;
        }
        if pod.uid.is_some() {
            slot.uid.clone_from(&pod.uid);
        }
        match (&mut slot.phase, &pod.phase) {
            (Phase::Pending(c), ObservedPhase::Ready { endpoint }) => match &mut c.step {
                Step::Creating { seen } => *seen = Some((endpoint.clone(), pod.ip.clone())),
                Step::Starting => {
                    let (endpoint, ip) = (endpoint.clone(), pod.ip.clone());
                    self.on_pod_ready(now, id, endpoint, ip);
                }
                Step::Publishing | Step::Claiming { .. } | Step::NameHeld { .. } => {}
            },
            (Phase::Pending(_), ObservedPhase::Failed { reason }) => {
                // The kubelet says it will not run (an image it cannot
                // pull, a crash loop…): fail the waiters now, not at the
                // pod-ready deadline; the next request tries a new pod.
                let err = PodCacheError::CannotStart {
                    image: slot.image.clone(),
                    pod: slot.pod_name.clone(),
                    reason: reason.clone(),
                };
                self.evict(now, id, err, Some(DeleteReason::Failed));
            }
            (Phase::Pending(c), ObservedPhase::Terminating) => {
                if !matches!(c.step, Step::Creating { .. }) {
                    let err = PodCacheError::PodGone {
                        image: slot.image.clone(),
                        pod: slot.pod_name.clone(),
                        failed: false,
                    };
                    self.evict(now, id, err, None);
                }
            }
            (Phase::Pending(c), ObservedPhase::Pending) => {
                if let Some(ip) = &pod.ip {
                    c.address = Some(pod_ip_endpoint(ip));
                }
                if !matches!(c.step, Step::Creating { .. }) {
                    slot.known_since.get_or_insert(now);
                    self.probe_if_addressed(id);
                }
            }
            (Phase::Ready { .. }, ObservedPhase::Failed { .. }) => {
                let err = gone(slot, true);
                self.evict(now, id, err, Some(DeleteReason::Failed));
            }
            (Phase::Ready { .. }, ObservedPhase::Terminating) => {
                let err = gone(slot, false);
                self.evict(now, id, err, None);
            }
            (Phase::Ready { .. }, _) => slot.seen_with(now, pod.reclaim_after.as_deref()),
        }
    }

    // Porch §5.7: a deleted pod is evicted at once; a warm pool pod is
    // created anew.
    pub(super) fn on_pod_deleted(&mut self, now: UnixTime, pod_name: &str) {
        self.evict_deleted(now, pod_name);
        if naming::is_pool_name(pod_name) {
            let images: Vec<String> = self
                .functions
                .iter()
                .filter(|(_, f)| f.settings.pool().is_some_and(|p| p.min > 0))
                .map(|(image, _)| image.clone())
                .collect();
            for image in images {
                self.restore_pool_where(now, &image, |name| name == pod_name);
            }
        }
    }

    fn evict_deleted(&mut self, now: UnixTime, pod_name: &str) {
        let Some(&id) = self.by_name.get(pod_name) else {
            return;
        };
        let slot = &self.slots[&id];
        if let Phase::Pending(c) = &slot.phase
            && matches!(c.step, Step::NameHeld { .. })
        {
            return self.name_freed(id);
        }
        if let Phase::Pending(c) = &slot.phase
            && matches!(c.step, Step::Creating { .. })
            && slot.known_since.is_none()
        {
            // A pod of this name went away before this creation made its
            // own: not this slot's pod.
            return;
        }
        let err = gone(slot, false);
        self.evict(now, id, err, None);
    }
}
