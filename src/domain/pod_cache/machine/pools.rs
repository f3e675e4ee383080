//! Warm pools (`minReady`, `maxPods`), adoption of pods another replica
//! made (Porch §5.9), warm-up (Porch §5.12), and template or settings
//! changes.
//!
//! A function with a pool ([`FunctionSettings::pool`]) names its pods from a
//! set every replica computes alike: pod `i` (`0 <= i < maxPods`) of the
//! pods built from template version `T` with settings version `S` is
//! [`naming::pool_pod_name`]`(image, pool_key(T, S), i)`. No other shared
//! state is needed; the API server's name uniqueness is the lock.
//! - **Bound.** The API server never holds two pods of one name, so no more
//!   than `maxPods` pods of one pool exist at any moment, whatever the
//!   replicas know, however late their listings and watches are, whatever
//!   fails: a replica creating a name another replica's pod holds is
//!   answered AlreadyExists. Pods being deleted keep their name, so they
//!   count too. The transient beyond `maxPods` is zero within a pool; across
//!   pools it is the old pool's pods after a template or settings change
//!   (they take no new call, are never kept warm, and are reclaimed by TTL
//!   once idle), so at most `maxPods` per version the replicas run at once,
//!   for at most 1.5 TTL after their last call plus a GC period.
//! - **Joining, not duplicating.** A creation answered AlreadyExists by a
//!   pod it did not make (its
//!   [`CREATION_ANNOTATION`](crate::domain::pod_cache::CREATION_ANNOTATION)
//!   differs) that is live joins it: waits for it to be ready, then claims
//!   it (writes a later reclaim-after, before any call) like an adopted pod;
//!   it never deletes it. Two replicas restoring the same missing pod hence
//!   end with one pod both use. A creation with waiters whose name holds a
//!   dead pod tries the pool's next free name; a warm restore stops there
//!   and GC tries again.
//! - **Minimum.** Pods `0..minReady` are warm: each replica holding one
//!   extends its reclaim-after while idle (persist before extend, as for any
//!   pod), and GC claims the warm pods it does not hold, however close their
//!   reclaim-after is (the claim is written before any call, and a deletion
//!   judged on an older listing fails its `resourceVersion` precondition).
//!   GC creates the warm pods its listing lacks, and a watch deletion of a
//!   warm pod creates it again at once; both are idempotent across replicas
//!   by the bound above. GC reclaims pool pods only above the minimum
//!   ([`gc`](super::gc)).
//! - **Names come back.** A pool name is reused once its pod is gone, so a
//!   slot ends as soon as its name is seen (watch or listing) with another
//!   UID ([`watch`](super::watch), [`gc`](super::gc)).
//! - **Adoption.** Only ready pods of the current template and settings
//!   whose reclaim-after is far enough ahead (a warm pod however close) are
//!   adopted, within the per-function limit (item 26), and each takes no
//!   call before its claim is written; the rest is left to GC instead of
//!   being deleted or orphaned (item 11).

use std::collections::VecDeque;
use std::sync::Arc;

use super::PodCache;
use super::leases::reuse_margin;
use super::state::{Creation, Persist, Phase, Slot, Step, Timer, slot_name};
#[cfg(doc)]
use crate::domain::pod_cache::config::FunctionSettings;
use crate::domain::pod_cache::config::PodCachePolicy;
use crate::domain::pod_cache::io::{Command, ObservedPhase, ObservedPod, PodCacheError, SlotId};
use crate::domain::pod_cache::naming;
use crate::domain::pod_cache::time::UnixTime;

impl PodCache {
    // New per-function settings: see [`Input::PolicyChanged`].
    pub(super) fn on_policy(&mut self, now: UnixTime, policy: PodCachePolicy) {
        self.policy.set_settings_from(policy);
        let images: Vec<String> = self.functions.keys().cloned().collect();
        for image in images {
            let settings = self.policy.settings_for(&image);
            let Some(f) = self.functions.get_mut(&image) else {
                continue;
            };
            if f.settings == settings {
                continue;
            }
            if !f.settings.same_pod(&settings) {
                f.shape = self.next_shape;
                self.next_shape += 1;
                f.pod_version = settings.pod_version();
            }
            for id in &f.slots {
                if let Some(slot) = self.slots.get_mut(id) {
                    slot.ttl = settings.ttl;
                }
            }
            f.settings = settings;
            self.refresh_pool(now, &image);
        }
    }

    /// After a template or settings change: only pods of the current pool
    /// stay warm (older ones are reclaimed by TTL once idle), idle pods that
    /// may take no new call are let go, and the pool's minimum is created.
    pub(super) fn refresh_pool(&mut self, now: UnixTime, image: &str) {
        let Some(f) = self.functions.get(image) else {
            return;
        };
        let min = f.settings.pool().map_or(0, |p| p.min);
        for id in &f.slots {
            if let Some(slot) = self.slots.get_mut(id) {
                let current = f.fresh(slot, &self.template_version);
                slot.warm = current && slot.pool.is_some_and(|i| i < min);
            }
        }
        self.retire_unusable(now, image);
        self.restore_pool(now, image);
    }

    /// The name of pod `index` of `image`'s pool, for pods built now.
    pub(super) fn pool_name(&self, image: &str, index: u32) -> String {
        let pod_version = self
            .functions
            .get(image)
            .and_then(|f| f.pod_version.as_deref());
        let key = naming::pool_key(&self.template_version, pod_version);
        naming::pool_pod_name(image, &key, index)
    }

    /// The lowest index of `image`'s pool whose name this replica does not
    /// hold, is not deleting or abandoning, and is not in `skip`.
    pub(super) fn free_pool_index(&self, image: &str, skip: &[String]) -> Option<u32> {
        let pool = self.functions.get(image)?.settings.pool()?;
        (0..pool.max).find(|&i| {
            let name = self.pool_name(image, i);
            !self.by_name.contains_key(&name)
                && !self.deleting.contains_key(&name)
                && !self.abandoned.values().any(|a| a.pod_name == name)
                && !skip.contains(&name)
        })
    }

    /// Creates the warm pods of `image`'s pool (indices below `minReady`)
    /// that this replica neither holds nor is deleting and that `absent`
    /// does not rule out (a listing holding the name). A name another
    /// replica's pod has already taken is answered AlreadyExists; the
    /// creation then joins that pod, so the pool never grows past its
    /// names (see the bound at the top of this module).
    pub(super) fn restore_pool_where(
        &mut self,
        now: UnixTime,
        image: &str,
        absent: impl Fn(&str) -> bool,
    ) {
        if self.shutting_down {
            return;
        }
        let Some(f) = self.functions.get(image) else {
            return;
        };
        let Some(pool) = f.settings.pool() else {
            return;
        };
        if f.invalid.is_some() {
            return;
        }
        for i in 0..pool.min {
            let name = self.pool_name(image, i);
            // Pods of an older template or settings still at work count
            // against the limit until they are idle.
            let room = self.functions[image].slots.len() < pool.max as usize;
            if room
                && !self.by_name.contains_key(&name)
                && !self.deleting.contains_key(&name)
                && !self.abandoned.values().any(|a| a.pod_name == name)
                && absent(&name)
            {
                self.scale_out(now, image, None, Some(i));
            }
        }
    }

    fn restore_pool(&mut self, now: UnixTime, image: &str) {
        self.restore_pool_where(now, image, |_| true);
    }

    /// A pool creation found its name taken by `existing`, a pod this
    /// creation did not make. A live pod of the same pool (same name, so
    /// same image, template and settings) is joined: the slot waits for it
    /// to be ready and claims it like an adopted pod, and never deletes it.
    /// A terminating pod is waited for ([`Step::NameHeld`]): it keeps the
    /// name until its grace period ends, never serves again, and the name
    /// is the pool's. Otherwise (failed, unreadable) a creation with waiters
    /// tries the next free name of the pool and, with none left, hands its
    /// waiters to the function's other pods; a warm-pool restore just stops
    /// (the next GC tries again).
    pub(super) fn pool_name_taken(
        &mut self,
        now: UnixTime,
        id: SlotId,
        existing: Option<Box<ObservedPod>>,
    ) {
        let pod_version = self
            .slots
            .get(&id)
            .and_then(|s| self.functions.get(&s.image))
            .map(|f| f.pod_version.clone());
        let slot = self.slots.get_mut(&id).expect("live slot");
        let Phase::Pending(c) = &mut slot.phase else {
            return;
        };
        if existing
            .as_ref()
            .is_some_and(|e| e.phase == ObservedPhase::Terminating)
            && !self.shutting_down
        {
            // Its name comes free once it is gone: wait for that rather
            // than give up or spill to another name.
            c.step = Step::NameHeld { since: now };
            return;
        }
        let live = existing.filter(|e| {
            e.labelled
                && Some(&e.settings_version) == pod_version.as_ref()
                && e.template_version.as_deref() == Some(slot.template_version.as_str())
                && !matches!(
                    e.phase,
                    ObservedPhase::Failed { .. } | ObservedPhase::Terminating
                )
        });
        if let Some(e) = live {
            c.joined = true;
            c.step = Step::Starting;
            slot.uid.clone_from(&e.uid);
            slot.seen_with(now, e.reclaim_after.as_deref());
            if let ObservedPhase::Ready { endpoint } = &e.phase {
                let (endpoint, ip) = (endpoint.clone(), e.ip.clone());
                self.on_pod_ready(now, id, endpoint, ip);
            }
            return;
        }
        let name = slot.pod_name.clone();
        c.tried.push(name.clone());
        let (image, tried, waiting) = (slot.image.clone(), c.tried.clone(), !c.waitlist.is_empty());
        let next = if waiting && !self.shutting_down {
            self.free_pool_index(&image, &tried)
        } else {
            None
        };
        match next {
            Some(i) => {
                let name = self.pool_name(&image, i);
                let min = self.functions[&image].settings.pool().map_or(0, |p| p.min);
                self.by_name.remove(&slot_name(&self.slots, id));
                self.by_name.insert(name.clone(), id);
                let slot = self.slots.get_mut(&id).expect("live slot");
                slot.pod_name = name;
                slot.pool = Some(i);
                slot.warm = i < min;
                let cmd = self.creation_command(id);
                self.commands.push_back(cmd);
            }
            None => {
                let err = PodCacheError::CreationFailed {
                    image,
                    pod: name.clone(),
                    reason: format!(
                        "pod {name} of the function's pool exists and is not ready to share; every name of the pool is taken"
                    ),
                };
                self.evict(now, id, err, None);
            }
        }
    }

    // Porch §5.9, safely: only ready pods of the current template and
    // settings whose reclaim-after is far enough ahead, within the
    // per-function limit (item 26); the rest is left to GC instead of being
    // deleted or orphaned (item 11).
    pub(super) fn on_adopt(&mut self, now: UnixTime, observed: &[Arc<ObservedPod>]) {
        for o in observed {
            self.observed_names.insert(o.name.clone());
        }
        for o in observed {
            let ObservedPhase::Ready { endpoint } = &o.phase else {
                continue;
            };
            let Some(reclaim_after) = o
                .reclaim_after
                .as_deref()
                .and_then(UnixTime::parse_annotation)
            else {
                continue;
            };
            let current = o.template_version.as_deref() == Some(self.template_version.as_str());
            let given_up = self.deleting.contains_key(&o.name)
                || self.abandoned.values().any(|a| a.pod_name == o.name);
            if !o.labelled || !current || given_up || self.by_name.contains_key(&o.name) {
                continue;
            }
            let id = SlotId(self.next_slot);
            self.function_entry(&o.image);
            let index = self.pool_index_of(&o.image, &o.name);
            let f = &self.functions[&o.image];
            let pool = f.settings.pool();
            // A pool adopts only its own names; without a pool, no pool
            // names.
            let named = match pool {
                Some(_) => index.is_some(),
                None => !naming::is_pool_name(&o.name),
            };
            let warm = pool.zip(index).is_some_and(|(p, i)| i < p.min);
            // A warm pod is claimed however close its reclaim-after is: the
            // claim writes a later value before any call, and a deletion
            // judged on the old value carries a precondition the claim
            // breaks.
            if f.invalid.is_some()
                || !named
                || f.slots.len() as u32 >= f.settings.max_parallel_pods
                || o.settings_version != f.pod_version
                || (!warm && reclaim_after <= now + reuse_margin(f.settings.ttl))
            {
                continue;
            }
            let (ttl, shape) = (f.settings.ttl, f.shape);
            let f = self.functions.get_mut(&o.image).expect("entered above");
            f.slots.push(id);
            self.next_slot += 1;
            self.by_name.insert(o.name.clone(), id);
            let deadline = now + self.policy.pod_ready_timeout;
            let claim = Creation {
                deadline,
                waitlist: VecDeque::new(),
                step: Step::Claiming {
                    endpoint: endpoint.clone(),
                },
                nonce: String::new(),
                renames: 0,
                reclaim_after,
                joined: false,
                tried: Vec::new(),
                address: None,
                probing: false,
            };
            self.slots.insert(
                id,
                Slot {
                    image: o.image.clone(),
                    pod_name: o.name.clone(),
                    template_version: self.template_version.clone(),
                    shape,
                    ttl,
                    phase: Phase::Pending(Box::new(claim)),
                    load: 0,
                    last_used: now,
                    confirmed: reclaim_after,
                    persist: Persist::Idle,
                    known_since: Some(now),
                    draining: false,
                    uid: o.uid.clone(),
                    renew_at: None,
                    pool: index,
                    warm,
                },
            );
            self.schedule(deadline, Timer::Deadline(id));
            self.commands.push_back(Command::EnsureService {
                pod_name: o.name.clone(),
            });
            // The claim: no call before this write has succeeded.
            self.issue_persist(now, id, 0);
        }
    }

    /// The index of `name` in `image`'s pool of pods built now, if it is one.
    fn pool_index_of(&self, image: &str, name: &str) -> Option<u32> {
        if !naming::is_pool_name(name) {
            return None;
        }
        let pool = self.functions.get(image)?.settings.pool()?;
        (0..pool.max).find(|&i| self.pool_name(image, i) == name)
    }

    // Porch §5.12: one pod for each listed image that has none; with a
    // warm pool, its minimum.
    pub(super) fn on_warm_up(&mut self, now: UnixTime, image: &str) {
        if self.shutting_down {
            return;
        }
        let f = self.function_entry(image);
        if f.invalid.is_some() {
            return;
        }
        let pool = f.settings.pool();
        match pool {
            // A minimum replaces Porch's one pod.
            Some(p) if f.settings.min_ready.is_some() => {
                if p.min > 0 {
                    self.restore_pool(now, image);
                }
            }
            _ if !f.slots.is_empty() => {}
            None => self.scale_out(now, image, None, None),
            Some(_) => {
                if let Some(i) = self.free_pool_index(image, &[]) {
                    self.scale_out(now, image, None, Some(i));
                }
            }
        }
    }
}
