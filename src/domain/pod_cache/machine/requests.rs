//! Taking a call, choosing its slot, queueing it on the slot's waitlist,
//! and finishing or cancelling it (Porch §5.4, §5.5).
//!
//! - the machine counts each slot's load itself and every exit path (reply
//!   with an error, call finished, cancelled) gives the unit back (items 4–5);
//! - once an image has all its pods and each carries `max_load_per_pod`
//!   requests, further requests are rejected with a RESOURCE_EXHAUSTED-class
//!   error (item 33) — the driver never blocks on the machine (item 27);
//! - pods built from an older template are replaced on their next use and
//!   reclaimed by GC like any other pod, never orphaned (items 11, 29): an
//!   idle slot that may take no new call is forgotten, not deleted;
//! - **drain before delete**: a call that finds its pod unavailable never
//!   deletes the pod (other calls, of this or another replica, may be in
//!   it); the pod takes no new call here and is forgotten once idle here,
//!   and GC reclaims it by its annotation.

use super::PodCache;
#[cfg(doc)]
use super::state::Slot;
use super::state::{Phase, Request, fresh};
use crate::domain::pod_cache::io::{Assignment, Command, PodCacheError, RequestId, SlotId};
use crate::domain::pod_cache::time::UnixTime;

impl PodCache {
    // Porch §5.4: pick the least-loaded slot, scale out past the waitlist
    // length while under the pod limit, else queue — bounded (item 33).
    pub(super) fn on_request(&mut self, now: UnixTime, request: RequestId, image: &str) {
        if self.shutting_down {
            return self.reply(request, Err(PodCacheError::ShuttingDown));
        }
        if self.requests.contains_key(&request) {
            return self.reply(request, Err(PodCacheError::DuplicateRequest { request }));
        }
        let f = self.function_entry(image);
        if let Some(reason) = f.invalid.clone() {
            let image = image.to_string();
            return self.reply(request, Err(PodCacheError::InvalidImage { image, reason }));
        }
        let (max_waitlist, max_pods) = (f.settings.max_waitlist, f.settings.max_parallel_pods);
        self.retire_unusable(now, image);
        let fresh = self.best_slot(now, image, true);
        let pods = self.functions[image].slots.len() as u32;
        if pods < max_pods && fresh.is_none_or(|(_, load)| load >= max_waitlist) {
            // A pool scales out only to a name of its pool not known to be
            // taken; with every name taken the request waits like one at
            // the pod limit.
            match self.functions[image].settings.pool() {
                None => return self.scale_out(now, image, Some(request), None),
                Some(_) => {
                    if let Some(i) = self.free_pool_index(image, &[]) {
                        return self.scale_out(now, image, Some(request), Some(i));
                    }
                }
            }
        }
        self.queue(now, request, image, fresh);
    }

    /// Queues `request` on `choice` (or the best slot of any template
    /// version), or rejects it when that slot is at its load limit.
    fn queue(
        &mut self,
        now: UnixTime,
        request: RequestId,
        image: &str,
        choice: Option<(SlotId, u32)>,
    ) {
        let choice = choice.or_else(|| self.best_slot(now, image, false));
        let f = &self.functions[image];
        let max_load = f.settings.max_load_per_pod;
        match choice {
            Some((slot, load)) if load < max_load => self.assign(now, request, slot),
            _ => {
                let err = PodCacheError::Exhausted {
                    image: image.to_string(),
                    pods: f.slots.len() as u32,
                    max_load_per_pod: max_load,
                };
                self.reply(request, Err(err));
            }
        }
    }

    /// Porch §5.5: least loaded, ties broken round-robin from the entry's
    /// index. Only usable slots count; with `fresh_only`, only slots of the
    /// current template version and settings.
    pub(super) fn best_slot(
        &mut self,
        now: UnixTime,
        image: &str,
        fresh_only: bool,
    ) -> Option<(SlotId, u32)> {
        let f = self.functions.get_mut(image)?;
        let slots = &self.slots;
        let version = &self.template_version;
        let (pool, shape) = (f.settings.pool(), f.shape);
        let eligible = |id: &SlotId| {
            slots
                .get(id)
                .filter(|s| s.usable(now) && (!fresh_only || fresh(pool, shape, s, version)))
        };
        let min = f.slots.iter().filter_map(eligible).map(|s| s.load).min()?;
        let n = f.slots.len();
        (0..n)
            .map(|i| (f.round_robin + i) % n)
            .find(|&i| eligible(&f.slots[i]).is_some_and(|s| s.load == min))
            .map(|i| {
                f.round_robin = (i + 1) % n;
                (f.slots[i], min)
            })
    }

    /// Drops idle ready slots that must not take new requests: their pod is
    /// from an older template or was built with settings the function no
    /// longer has (replaced on next use), their reclaim-after is too close,
    /// or the function has more pods than its (lowered) limit. The pods are
    /// not deleted here — another replica may use them; GC deletes them
    /// once their reclaim-after has passed, which no use extends any more.
    /// A warm pool pod whose reclaim-after is too close is kept: it is
    /// extended while idle (see [`Slot::warm`]).
    pub(super) fn retire_unusable(&mut self, now: UnixTime, image: &str) {
        let Some(limit) = self
            .functions
            .get(image)
            .map(|f| f.settings.max_parallel_pods as usize)
        else {
            return;
        };
        while let Some(id) = self.functions.get(image).and_then(|f| {
            let surplus = f.slots.len() > limit;
            f.slots.iter().copied().find(|id| {
                self.slots.get(id).is_some_and(|s| {
                    s.is_ready()
                        && s.load == 0
                        && (surplus
                            || !f.fresh(s, &self.template_version)
                            || (!s.usable(now) && !s.warm))
                })
            })
        }) {
            self.retire(id);
        }
    }

    /// Forgets a slot without deleting its pod (left to GC).
    pub(super) fn retire(&mut self, id: SlotId) {
        let (slot, _) = self.detach(id);
        self.commands.push_back(Command::Forget {
            pod_name: slot.pod_name,
        });
    }

    /// Counts `request` on `slot` and replies at once if the pod is ready,
    /// else puts it on the waitlist (Porch §5.4 step 6).
    pub(super) fn assign(&mut self, now: UnixTime, request: RequestId, id: SlotId) {
        let slot = self.slots.get_mut(&id).expect("assign to a live slot");
        slot.load += 1;
        slot.last_used = now;
        match &mut slot.phase {
            Phase::Pending(c) => {
                c.waitlist.push_back(request);
                self.requests.insert(
                    request,
                    Request {
                        slot: id,
                        waiting: true,
                    },
                );
            }
            Phase::Ready { endpoint } => {
                let a = Assignment {
                    slot: id,
                    pod_name: slot.pod_name.clone(),
                    endpoint: endpoint.clone(),
                };
                self.requests.insert(
                    request,
                    Request {
                        slot: id,
                        waiting: false,
                    },
                );
                self.reply(request, Ok(a));
                self.touch(now, id);
            }
        }
    }

    pub(super) fn on_release(&mut self, now: UnixTime, request: RequestId, unavailable: bool) {
        let Some(req) = self.requests.remove(&request) else {
            return;
        };
        let Some(slot) = self.slots.get_mut(&req.slot) else {
            return;
        };
        debug_assert!(slot.load > 0, "load of {} would go negative", req.slot);
        slot.load = slot.load.saturating_sub(1);
        if req.waiting {
            if let Phase::Pending(c) = &mut slot.phase {
                c.waitlist.retain(|r| *r != request);
            }
            let image = slot.image.clone();
            self.reply(request, Err(PodCacheError::Cancelled { image }));
            return;
        }
        slot.last_used = now;
        if unavailable && !slot.draining {
            self.drain(now, req.slot);
        }
        let slot = &self.slots[&req.slot];
        if slot.draining {
            if slot.load == 0 {
                self.retire(req.slot);
            }
            return;
        }
        let idle = slot.load == 0;
        self.touch(now, req.slot);
        // A pod of outdated settings, or beyond a lowered limit, takes no
        // new call once its last one has ended.
        let stale = idle
            .then(|| self.slots.get(&req.slot))
            .flatten()
            .filter(|s| {
                self.functions.get(&s.image).is_some_and(|f| {
                    f.shape != s.shape || f.slots.len() > f.settings.max_parallel_pods as usize
                })
            })
            .map(|s| s.image.clone());
        if let Some(image) = stale {
            self.retire_unusable(now, &image);
        }
    }

    /// Takes a slot out of its function's slots: it gets no new call.
    fn drain(&mut self, now: UnixTime, id: SlotId) {
        let Some(slot) = self.slots.get_mut(&id) else {
            return;
        };
        slot.draining = true;
        if slot.pool.is_some() {
            self.given_up.insert(slot.pod_name.clone(), now);
        }
        if let Some(f) = self.functions.get_mut(&slot.image) {
            f.slots.retain(|s| *s != id);
            if f.round_robin >= f.slots.len() {
                f.round_robin = 0;
            }
        }
    }

    pub(super) fn on_shutdown(&mut self) {
        self.shutting_down = true;
        let mut failed = Vec::new();
        for slot in self.slots.values_mut() {
            if let Phase::Pending(c) = &mut slot.phase {
                slot.load -= c.waitlist.len() as u32;
                failed.extend(c.waitlist.drain(..));
            }
        }
        for request in failed {
            self.requests.remove(&request);
            self.reply(request, Err(PodCacheError::ShuttingDown));
        }
    }
}
