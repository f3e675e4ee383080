//! GC: the listings it asks for, how it judges them, the deletions it
//! makes, and resync (Seeds / Gen A GC over the shared annotation, with
//! Porch Gen B/C's "never while in use" on top).
//!
//! - **listing age**: GC judges a listing by the time it asked for it, so a
//!   listing that arrives late never deletes a pod another replica extended
//!   after the listing was taken; and it deletes with a precondition on the
//!   listed `resourceVersion`, so a write in between makes the delete fail;
//! - a pod this replica uses is deleted by TTL only while idle here with no
//!   patch out, once both the reclaim-after it counts on and the listed one
//!   had passed; a missing or invalid annotation gets a grace period (a
//!   reclaim-after is written), not a deletion;
//! - **reclaim only above the minimum**: GC deletes an expired pool pod only
//!   while its listing shows more than `minReady` live pods of the pool,
//!   highest index first, so replicas reading the same listing pick the same
//!   pods; it never deletes a warm pod by TTL. Replicas acting on different
//!   listings can take the pool below its minimum only while a warm pod is
//!   already missing, until the next GC creates it. A pod that never got
//!   ready and whose reclaim-after passed serves nobody and is deleted
//!   whatever the count;
//! - a failed pod listed under a slot's name with another UID (a late
//!   listing may show the previous pod) is deleted by its own UID only,
//!   never by the slot's, and the slot ends; GC claims a warm pod back only
//!   from a listing asked for after the replica stopped using it, so a stale
//!   listing cannot bring back a pod that failed a call;
//! - function services whose pod is gone are deleted;
//! - **resync**: a pod missing from a listing taken after this replica knew
//!   it was deleted (a watch may miss deletions during an outage): its slot
//!   is dropped and its waiters move on.

use std::sync::Arc;

use foldhash::{HashMap, HashMapExt, HashSet};

use super::PodCache;
use super::leases::extended;
use super::state::{Persist, Phase, gone};
use crate::domain::pod_cache::config::Pool;
use crate::domain::pod_cache::io::{
    Command, DeletePrecondition, DeleteReason, Listing, ListingId, ObservedPhase, ObservedPod,
    SlotId,
};
use crate::domain::pod_cache::time::UnixTime;

/// Each name of every pool GC looks after, as built now: name -> (image,
/// index, the pool's minimum).
type PoolNames = HashMap<String, (String, u32, u32)>;

/// An expired pool pod: (index, name, precondition, local slot).
type Expired = (u32, String, DeletePrecondition, Option<SlotId>);

/// What judging a listing's pods leaves for after the scan.
#[derive(Default)]
struct Verdicts {
    /// Expired pool pods, deleted only above their pool's minimum.
    expired: Vec<Expired>,
    /// Warm pool pods this replica does not hold, to claim.
    claims: Vec<Arc<ObservedPod>>,
    /// Warm pool pods this replica holds, whose reclaim-after is kept ahead.
    keep_warm: Vec<SlotId>,
}

impl PodCache {
    pub(super) fn on_listed(
        &mut self,
        now: UnixTime,
        listing: ListingId,
        result: Result<Listing, String>,
    ) {
        let Some((out, started)) = self.listing else {
            return;
        };
        if out != listing {
            return;
        }
        self.listing = None;
        if let Ok(l) = result {
            let present: HashSet<&str> = l.pods.iter().map(|o| o.name.as_str()).collect();
            self.names_freed_by_listing(started, &present);
            self.gc(now, started, &l);
        }
    }

    // Seeds / Gen A GC over the shared annotation, with Porch Gen B/C's
    // "never while in use" on top, judged at the time the listing was
    // asked for (`started`), with deletions conditional on the pod being
    // as listed. Warm pools: pods are reclaimed only while their function
    // keeps more than its minimum, warm pods are claimed and the missing
    // ones created.
    fn gc(&mut self, now: UnixTime, started: UnixTime, listing: &Listing) {
        let (pooled, pool_of) = self.gc_pools();
        let mut live = live_per_pool(listing, &pool_of);
        let mut verdicts = Verdicts::default();
        for o in &listing.pods {
            self.judge_pod(now, started, o, &pool_of, &mut live, &mut verdicts);
        }
        self.given_up.retain(|_, t| *t >= started);
        self.reclaim_above_minimum(verdicts.expired, &pool_of, &mut live);
        for id in verdicts.keep_warm {
            self.touch(now, id);
        }
        self.on_adopt(now, &verdicts.claims);
        let present: HashSet<&str> = listing.pods.iter().map(|o| o.name.as_str()).collect();
        self.drop_vanished(now, started, &present);
        self.delete_orphaned_services(listing, &present);
        self.restore_minimum(now, &pooled, &present);
        self.functions
            .retain(|_, f| !f.slots.is_empty() || f.settings.pool().is_some_and(|p| p.min > 0));
    }

    /// The pools GC looks after: the functions whose settings keep a
    /// minimum are entered first (unless shutting down); then every valid
    /// function's pool, and each name of those pools as built now.
    fn gc_pools(&mut self) -> (Vec<(String, Pool)>, PoolNames) {
        if !self.shutting_down {
            for image in self.policy.min_ready_images() {
                self.function_entry(&image);
            }
        }
        // The names of every pool as built now: name -> (image, index).
        let pooled: Vec<(String, Pool)> = self
            .functions
            .iter()
            .filter(|(_, f)| f.invalid.is_none())
            .filter_map(|(image, f)| f.settings.pool().map(|p| (image.clone(), p)))
            .collect();
        let mut pool_of: HashMap<String, (String, u32, u32)> = HashMap::new();
        for (image, p) in &pooled {
            for i in 0..p.max {
                pool_of.insert(self.pool_name(image, i), (image.clone(), i, p.min));
            }
        }
        (pooled, pool_of)
    }

    /// Judges one listed pod at the time the listing was asked for
    /// (`started`): failed pods are deleted, unannotated ones get a grace
    /// period, and expired ones are deleted now or, for a pool, left in
    /// `verdicts` for [`reclaim_above_minimum`](Self::reclaim_above_minimum),
    /// with warm pods to claim or keep extended.
    fn judge_pod(
        &mut self,
        now: UnixTime,
        started: UnixTime,
        o: &Arc<ObservedPod>,
        pool_of: &PoolNames,
        live: &mut HashMap<String, u32>,
        verdicts: &mut Verdicts,
    ) {
        let local = self.by_name.get(&o.name).copied();
        // A local pod's name is known already (created here, or noted
        // when adopted); only strangers need noting.
        if local.is_none() {
            self.note_name(&o.name);
        }
        if !o.labelled || o.phase == ObservedPhase::Terminating {
            return;
        }
        if let ObservedPhase::Failed { .. } = o.phase {
            return self.reclaim_failed(now, o, local);
        }
        if let Some(id) = local
            && matches!(self.slots[&id].phase, Phase::Pending(_))
        {
            return;
        }
        let in_pool = pool_of.get(&o.name).map(|(_, i, min)| (*i, *i < *min));
        let ready = matches!(o.phase, ObservedPhase::Ready { .. });
        let Some(annotated) = o
            .reclaim_after
            .as_deref()
            .and_then(UnixTime::parse_annotation)
        else {
            // Missing or invalid annotation: grace, not deletion.
            return self.grace_unannotated(now, o, local);
        };
        // Built only for a deletion: the scan visits every pod.
        let precondition = || DeletePrecondition {
            uid: o.uid.clone(),
            resource_version: o.resource_version.clone(),
            ..DeletePrecondition::default()
        };
        if let Some(id) = local
            && self.slots[&id].is_other_pod(&o.uid)
        {
            // Another pod under the slot's name: the slot's is gone.
            let err = gone(&self.slots[&id], false);
            self.evict(now, id, err, None);
            return;
        }
        match local {
            Some(id) => {
                let slot = self.slots.get_mut(&id).expect("indexed slot");
                slot.confirmed = slot.confirmed.max(annotated);
                let idle = slot.load == 0 && slot.persist == Persist::Idle;
                if slot.warm {
                    verdicts.keep_warm.push(id);
                } else if idle && slot.confirmed <= started && annotated <= started {
                    match in_pool {
                        Some((i, _)) => {
                            verdicts
                                .expired
                                .push((i, o.name.clone(), precondition(), Some(id)))
                        }
                        None => {
                            self.retire(id);
                            self.delete_with(o.name.clone(), precondition(), DeleteReason::Expired);
                        }
                    }
                }
            }
            None => match in_pool {
                Some(_) if !ready && annotated <= started => {
                    // Never became ready and nobody extends it: it
                    // serves nobody, so the minimum does not keep it.
                    if let Some(n) = live.get_mut(&o.image) {
                        *n = n.saturating_sub(1);
                    }
                    self.delete_with(o.name.clone(), precondition(), DeleteReason::Expired);
                }
                // Not from a listing older than this replica's news
                // that the pod failed a call or is gone.
                Some((_, true))
                    if ready && self.given_up.get(&o.name).is_none_or(|t| *t < started) =>
                {
                    verdicts.claims.push(o.clone())
                }
                Some((i, false)) if annotated <= started => {
                    verdicts
                        .expired
                        .push((i, o.name.clone(), precondition(), None));
                }
                None if annotated <= started => {
                    self.delete_with(o.name.clone(), precondition(), DeleteReason::Expired);
                }
                _ => {}
            },
        }
    }

    /// A failed pod in the listing: deleted, and a slot using it (or its
    /// name) ends.
    fn reclaim_failed(&mut self, now: UnixTime, o: &ObservedPod, local: Option<SlotId>) {
        match local {
            Some(id) if self.slots[&id].is_other_pod(&o.uid) => {
                // Another pod under the slot's name failed (a warm
                // pool's names come back, and a late listing may
                // show the previous one): the slot's own pod is not
                // known to have failed and may carry calls of other
                // replicas, so only the listed pod is deleted, by
                // its own UID; the slot ends as for any other pod
                // under its name.
                let err = gone(&self.slots[&id], false);
                self.evict(now, id, err, None);
                self.delete_failed(o.name.clone(), o.uid.clone());
            }
            Some(id) => {
                let slot = self.slots.get_mut(&id).expect("indexed slot");
                if slot.uid.is_none() {
                    slot.uid.clone_from(&o.uid);
                }
                let err = gone(slot, true);
                self.evict(now, id, err, Some(DeleteReason::Failed));
            }
            None => self.delete_failed(o.name.clone(), o.uid.clone()),
        }
    }

    /// A listed pod without a valid reclaim-after: one is written (for a
    /// slot of this replica, unless its patch is out), and the pod is not
    /// deleted.
    fn grace_unannotated(&mut self, now: UnixTime, o: &ObservedPod, local: Option<SlotId>) {
        match local {
            Some(id) => {
                if self.slots[&id].persist == Persist::Idle {
                    self.issue_persist(now, id, 0);
                }
            }
            None => {
                let ttl = self.policy.settings_for(&o.image).ttl;
                self.commands.push_back(Command::PersistReclaimAfter {
                    pod_name: o.name.clone(),
                    uid: o.uid.clone(),
                    reclaim_after: extended(now, ttl),
                });
            }
        }
    }

    /// Deletes the `expired` pool pods while their pool keeps more than its
    /// minimum of `live` pods.
    fn reclaim_above_minimum(
        &mut self,
        mut expired: Vec<Expired>,
        pool_of: &PoolNames,
        live: &mut HashMap<String, u32>,
    ) {
        // Reclaim only above the minimum, highest index first, so that
        // replicas reading the same listing pick the same pods.
        expired.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
        for (_, name, precondition, local) in expired {
            let Some((image, _, min)) = pool_of.get(&name) else {
                continue;
            };
            let n = live.entry(image.clone()).or_default();
            if *n <= *min {
                continue;
            }
            *n -= 1;
            if let Some(id) = local {
                self.retire(id);
            }
            self.delete_with(name, precondition, DeleteReason::Expired);
        }
    }

    /// Deletes the function services of `listing` whose pod is neither
    /// listed (`present`) nor used here.
    fn delete_orphaned_services(&mut self, listing: &Listing, present: &HashSet<&str>) {
        // Function services whose pod is gone (a runner stopped between the
        // two deletions, or the pod was deleted by hand). Porch never
        // deletes these.
        for s in &listing.services {
            if s.selects_own_pod
                && !present.contains(s.name.as_str())
                && !self.by_name.contains_key(&s.name)
            {
                self.commands.push_back(Command::DeleteService {
                    name: s.name.clone(),
                });
            }
        }
    }

    /// For each pool of `pooled` with a minimum: lets idle pods of an older
    /// pool go, then creates the warm pods the listing does not hold
    /// (`present`).
    fn restore_minimum(
        &mut self,
        now: UnixTime,
        pooled: &[(String, Pool)],
        present: &HashSet<&str>,
    ) {
        // The minimum after failures and deletions: warm pods no listing
        // holds are created anew.
        for (image, p) in pooled {
            if p.min > 0 {
                // Idle pods of an older pool make room first.
                self.retire_unusable(now, image);
                self.restore_pool_where(now, image, |name| !present.contains(name));
            }
        }
    }

    pub(super) fn on_resync(
        &mut self,
        now: UnixTime,
        observed: &[Arc<ObservedPod>],
        since: UnixTime,
    ) {
        for o in observed {
            self.on_observed(now, o);
        }
        let present: HashSet<&str> = observed.iter().map(|o| o.name.as_str()).collect();
        self.drop_vanished(now, since, &present);
        self.names_freed_by_listing(since, &present);
    }

    /// Slots whose pod this replica knew of before `since` and that a
    /// listing taken after `since` does not hold: the pod was deleted.
    fn drop_vanished(&mut self, now: UnixTime, since: UnixTime, present: &HashSet<&str>) {
        let vanished: Vec<String> = self
            .slots
            .values()
            .filter(|s| s.known_since.is_some_and(|k| k <= since))
            .filter(|s| !present.contains(s.pod_name.as_str()))
            .map(|s| s.pod_name.clone())
            .collect();
        for name in vanished {
            self.on_pod_deleted(now, &name);
        }
    }
}

/// Live pods of each pool in `listing` (labelled, neither failed nor
/// terminating), by image.
fn live_per_pool(listing: &Listing, pool_of: &PoolNames) -> HashMap<String, u32> {
    // Live pods of each pool in the listing: what a reclaim may not
    // take below the minimum.
    let mut live: HashMap<String, u32> = HashMap::new();
    for o in &listing.pods {
        let dying = matches!(
            o.phase,
            ObservedPhase::Failed { .. } | ObservedPhase::Terminating
        );
        if let Some((image, _, _)) = pool_of.get(&o.name)
            && o.labelled
            && !dying
        {
            *live.entry(image.clone()).or_default() += 1;
        }
    }
    live
}
