//! Reclaim-after: what this replica writes on the pods it uses so that no
//! replica's GC deletes a pod while a call is in it.
//!
//! Pods are shared by the runner replicas through their reclaim-after
//! annotation. The rules kept here:
//! - **persist before extend**: a slot counts on a new reclaim-after only
//!   once the patch that wrote it succeeded ([`Input::Persisted`]); a
//!   failed patch is retried with backoff while the pod is in use; the
//!   patch carries the UID of the pod the slot uses, so it never lands on
//!   another pod of the same name, and a refusal (the pod gone or its name
//!   taken by another pod) ends the slot instead of being retried;
//! - **reuse margin**: a ready pod takes a new call only while the
//!   reclaim-after it counts on is at least [`reuse_margin`] ahead, which
//!   covers a call started just before another replica's GC may act, the
//!   API latency and the clock skew between replicas;
//! - a pod in use has its reclaim-after extended to `now + 1.5 × ttl`
//!   ([`extended`]), always later than the value on the pod, with at most
//!   one write per half-TTL, so that once the write succeeded
//!   `reclaim-after >= last use + ttl`; a warm pool pod's is extended while
//!   idle too ([`Slot::warm`]).

use std::time::Duration;

use super::PodCache;
use super::state::{Persist, Phase, Slot, Step, Timer, gone};
#[cfg(doc)]
use crate::domain::pod_cache::io::Input;
use crate::domain::pod_cache::io::{Command, PersistFailure, SlotId};
use crate::domain::pod_cache::time::UnixTime;

/// How far ahead a ready pod's reclaim-after must be for the pod to take a
/// new request: a quarter of its TTL, at most 30 s. Another replica's GC
/// reads the annotation; the margin covers a call started just before the
/// annotation passes, the latency of the patch that extends it and the
/// clock skew between replicas, so a pod is never picked just before
/// another replica may delete it.
pub fn reuse_margin(ttl: Duration) -> Duration {
    (ttl / 4).min(Duration::from_secs(30))
}

/// The reclaim-after written when a pod is used at `now`: `now + 1.5 × ttl`,
/// rounded up to a whole second. Writing half a TTL ahead lets the next write
/// wait half a TTL while still guaranteeing `reclaim-after >= last use + ttl`.
pub(super) fn extended(now: UnixTime, ttl: Duration) -> UnixTime {
    (now + ttl + ttl / 2).ceil_secs()
}

impl Slot {
    /// The pod exists at `now` carrying `reclaim_after` (its annotation):
    /// another replica's extension may be on it, so count on it.
    pub(super) fn seen_with(&mut self, now: UnixTime, reclaim_after: Option<&str>) {
        self.known_since.get_or_insert(now);
        if let Some(r) = reclaim_after.and_then(UnixTime::parse_annotation) {
            self.confirmed = self.confirmed.max(r);
        }
    }

    /// A ready slot may take new requests only while the reclaim-after it
    /// counts on is at least [`reuse_margin`] ahead: once it has passed,
    /// another replica's GC may delete the pod.
    pub(super) fn usable(&self, now: UnixTime) -> bool {
        !self.draining
            && match self.phase {
                Phase::Pending(_) => true,
                Phase::Ready { .. } => self.confirmed > now + reuse_margin(self.ttl),
            }
    }

    /// Whether the reclaim-after should be extended now: the pod is in use,
    /// or was used less than a TTL before the reclaim-after it counts on…
    /// and that reclaim-after is less than a TTL ahead.
    pub(super) fn wants_extension(&self, now: UnixTime) -> bool {
        self.is_ready()
            && !self.draining
            && (self.load > 0 || self.warm || self.last_used + self.ttl > self.confirmed)
            && self.confirmed <= now.max(self.last_used) + self.ttl
    }
}

impl PodCache {
    /// Keeps a ready slot's reclaim-after ahead: if it wants an extension
    /// and no patch is out or waiting for its retry, write `now + 1.5 TTL`.
    /// Hence at most one write per half-TTL per pod, and, once the write
    /// succeeded, `reclaim-after >= last use + ttl`. A busy slot that needs
    /// nothing yet gets a renewal timer instead.
    pub(super) fn touch(&mut self, now: UnixTime, id: SlotId) {
        let Some(slot) = self.slots.get_mut(&id) else {
            return;
        };
        if slot.persist == Persist::Idle && slot.wants_extension(now) {
            self.issue_persist(now, id, 0);
        } else {
            self.schedule_renew(now, id);
        }
    }

    pub(super) fn issue_persist(&mut self, now: UnixTime, id: SlotId, attempt: u32) {
        let slot = self.slots.get_mut(&id).expect("persist a live slot");
        // Always a later value than the one on the pod: a claim must change
        // the annotation, or the deletion of a creation given up could not
        // tell it from the creation's own value.
        let value = extended(now, slot.ttl).max(slot.confirmed + Duration::from_secs(1));
        slot.persist = Persist::InFlight { value, attempt };
        self.commands.push_back(Command::PersistReclaimAfter {
            pod_name: slot.pod_name.clone(),
            uid: slot.uid.clone(),
            reclaim_after: value,
        });
    }

    /// A renewal timer at the time a busy slot's reclaim-after becomes less
    /// than a TTL ahead, unless an earlier one is set.
    fn schedule_renew(&mut self, now: UnixTime, id: SlotId) {
        let Some(slot) = self.slots.get_mut(&id) else {
            return;
        };
        if !slot.is_ready()
            || slot.draining
            || (slot.load == 0 && !slot.warm)
            || slot.persist != Persist::Idle
        {
            return;
        }
        let at = slot.confirmed.saturating_sub(slot.ttl);
        if at <= now || slot.renew_at.is_some_and(|r| r <= at) {
            // Due already: the next use or tick extends it.
            return;
        }
        slot.renew_at = Some(at);
        self.schedule(at, Timer::Renew(id));
    }

    pub(super) fn on_persisted(
        &mut self,
        now: UnixTime,
        pod_name: &str,
        value: UnixTime,
        result: Result<(), PersistFailure>,
    ) {
        let Some(&id) = self.by_name.get(pod_name) else {
            return;
        };
        let slot = self.slots.get_mut(&id).expect("indexed slot");
        let ours = match slot.persist {
            Persist::InFlight { value: v, attempt } if v == value => Some(attempt),
            _ => None,
        };
        if ours.is_some() && matches!(result, Err(PersistFailure::NotThePod(_))) {
            // The API server refused the write: the pod is gone or its name
            // holds another pod (the patch carried the slot's UID). Nothing
            // here may count on that name any more; retrying cannot help.
            let err = gone(slot, false);
            return self.evict(now, id, err, None);
        }
        if let Phase::Pending(c) = &mut slot.phase
            && let Step::Claiming { endpoint } = &mut c.step
        {
            match (result, ours) {
                (Ok(()), Some(_)) => {
                    slot.confirmed = slot.confirmed.max(value);
                    slot.persist = Persist::Idle;
                    let endpoint = std::mem::take(endpoint);
                    self.publish_then_ready(now, id, endpoint, None);
                }
                (Err(_), Some(attempt)) => {
                    let attempt = attempt + 1;
                    slot.persist = Persist::Failed { attempt };
                    let at = now + self.policy.backoff(attempt);
                    self.schedule(at, Timer::PersistRetry(id));
                }
                _ => {}
            }
            return;
        }
        match (result, ours) {
            (Ok(()), ours) => {
                // Persisted: only now does the slot count on it.
                slot.confirmed = slot.confirmed.max(value);
                if ours.is_some() {
                    slot.persist = Persist::Idle;
                    self.touch(now, id);
                }
            }
            (Err(_), Some(attempt)) => {
                let attempt = attempt + 1;
                slot.persist = Persist::Failed { attempt };
                let at = now + self.policy.backoff(attempt);
                self.schedule(at, Timer::PersistRetry(id));
            }
            (Err(_), None) => {}
        }
    }
}
