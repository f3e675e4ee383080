//! How a slot ends, where its waiters go, and how deletions are sent and
//! retried.
//!
//! - waiters of a failed creation are moved to another slot of the image
//!   (counted and really queued) or get the error, never lost (item 5);
//! - a failed pod is deleted whoever uses it (it serves nobody); a creation
//!   given up is deleted only if the pod is still that creation's and
//!   unchanged since it was read (another replica may have adopted and
//!   claimed it meanwhile); any other evicted pod is left to GC;
//! - one deletion per pod name is out at a time; a failed deletion is
//!   retried with backoff until [`MAX_DELETE_ATTEMPTS`] attempts have
//!   failed, then left to the next GC; a deletion whose precondition no
//!   longer holds is not retried.

use std::collections::VecDeque;

use super::PodCache;
use super::state::{Deletion, Phase, Slot, Timer};
use crate::domain::pod_cache::io::{
    Command, DeleteFailure, DeletePrecondition, DeleteReason, PodCacheError, RequestId, SlotId,
};
use crate::domain::pod_cache::time::UnixTime;

/// How often a failed deletion is retried before it is left to the next GC.
const MAX_DELETE_ATTEMPTS: u32 = 5;

impl PodCache {
    /// Removes a slot, deletes its pod if `delete` says why, and moves or
    /// fails its waiters with `err`. A failed pod is deleted whoever uses
    /// it (it serves nobody); a creation given up is deleted only if the
    /// pod is still that creation's and unchanged since it is read (another
    /// replica may have adopted and claimed it meanwhile).
    pub(super) fn evict(
        &mut self,
        now: UnixTime,
        id: SlotId,
        err: PodCacheError,
        delete: Option<DeleteReason>,
    ) {
        let (slot, waiters) = self.detach(id);
        if slot.pool.is_some() {
            self.given_up.insert(slot.pod_name.clone(), now);
        }
        self.commands.push_back(Command::Forget {
            pod_name: slot.pod_name.clone(),
        });
        if let Some(reason) = delete {
            let (creation, reclaim_after) = match (&slot.phase, reason) {
                (Phase::Pending(c), DeleteReason::CreationFailed) => {
                    (Some(c.nonce.clone()), Some(c.reclaim_after))
                }
                _ => (None, None),
            };
            let precondition = DeletePrecondition {
                uid: slot.uid.clone(),
                resource_version: None,
                creation,
                reclaim_after,
            };
            self.delete_with(slot.pod_name.clone(), precondition, reason);
        }
        self.redistribute(now, &slot.image, waiters, err);
    }

    /// Takes a slot out of every index; returns it with its waitlist. Requests
    /// already answered keep pointing at it and are released as no-ops.
    pub(super) fn detach(&mut self, id: SlotId) -> (Slot, VecDeque<RequestId>) {
        let mut slot = self.slots.remove(&id).expect("detach a live slot");
        self.by_name.remove(&slot.pod_name);
        if let Some(f) = self.functions.get_mut(&slot.image) {
            f.slots.retain(|s| *s != id);
            if f.round_robin >= f.slots.len() {
                f.round_robin = 0;
            }
        }
        let waiters = match &mut slot.phase {
            Phase::Pending(c) => std::mem::take(&mut c.waitlist),
            Phase::Ready { .. } => VecDeque::new(),
        };
        (slot, waiters)
    }

    /// Porch §5.6.1, done right: each waiter is counted on and queued in the
    /// best remaining slot of the image, or gets `err`.
    fn redistribute(
        &mut self,
        now: UnixTime,
        image: &str,
        waiters: VecDeque<RequestId>,
        err: PodCacheError,
    ) {
        if waiters.is_empty() {
            return;
        }
        self.retire_unusable(now, image);
        for request in waiters {
            self.requests.remove(&request);
            let max_load = self
                .functions
                .get(image)
                .map_or(0, |f| f.settings.max_load_per_pod);
            let choice = self
                .best_slot(now, image, true)
                .or_else(|| self.best_slot(now, image, false));
            match choice {
                Some((slot, load)) if load < max_load => self.assign(now, request, slot),
                _ => self.reply(request, Err(err.clone())),
            }
        }
    }

    /// Asks for the deletion of failed pod `pod_name` (with a UID
    /// precondition when known), unless one is out already.
    pub(super) fn delete_failed(&mut self, pod_name: String, uid: Option<String>) {
        let precondition = DeletePrecondition {
            uid,
            ..DeletePrecondition::default()
        };
        self.delete_with(pod_name, precondition, DeleteReason::Failed);
    }

    pub(super) fn delete_with(
        &mut self,
        pod_name: String,
        precondition: DeletePrecondition,
        reason: DeleteReason,
    ) {
        if self.deleting.contains_key(&pod_name) {
            return;
        }
        self.deleting.insert(
            pod_name.clone(),
            Deletion {
                precondition: precondition.clone(),
                reason,
                attempt: 0,
                in_flight: true,
            },
        );
        self.commands.push_back(Command::DeletePod {
            pod_name,
            precondition,
            reason,
        });
    }

    pub(super) fn on_deleted(
        &mut self,
        now: UnixTime,
        pod_name: &str,
        result: Result<(), DeleteFailure>,
    ) {
        let Some(d) = self.deleting.get_mut(pod_name) else {
            return;
        };
        match result {
            Ok(()) | Err(DeleteFailure::Conflict) => {
                self.deleting.remove(pod_name);
            }
            Err(DeleteFailure::Failed { .. }) => {
                d.attempt += 1;
                d.in_flight = false;
                if d.attempt >= MAX_DELETE_ATTEMPTS {
                    // The next GC finds it again.
                    self.deleting.remove(pod_name);
                } else {
                    let at = now + self.policy.backoff(d.attempt);
                    self.schedule(at, Timer::DeleteRetry(pod_name.to_string()));
                }
            }
        }
    }
}
