//! Creating pods: a new pending slot, the sub-states its creation goes
//! through, and the outcomes of each (Porch §5.4 step 5, §5.6).
//!
//! - outcomes name the slot they belong to ([`SlotId`]), never "the first
//!   pending slot" (item 6); an outcome for a slot given up deletes what
//!   it created;
//! - a creation goes through sub-states: creating (the objects are being
//!   made), starting (they exist; the watch reports readiness), publishing
//!   (service mode: the service must publish the pod); each ends at the
//!   slot's deadline at the latest (items 15, 28);
//! - pod names never repeat a live pod's name (items 7–8, [`naming`]),
//!   and an AlreadyExists answer is taken as this creation's own pod only
//!   when the pod carries this creation's
//!   [`CREATION_ANNOTATION`](crate::domain::pod_cache::CREATION_ANNOTATION)
//!   (item 29); a pool creation answered AlreadyExists by a pod it did not
//!   make goes on in [`pools`](super::pools);
//! - a pool creation whose name a terminating pod holds
//!   ([`Step::NameHeld`]) creates its pod under that name once that pod is
//!   gone: its deletion reported, or a listing asked for later without it.

use foldhash::HashSet;

use super::PodCache;
use super::leases::extended;
use super::state::{Abandoned, Creation, Persist, Phase, Request, Slot, Step, Timer};
use crate::domain::pod_cache::io::{
    Assignment, Command, CreateFailure, DeletePrecondition, DeleteReason, ObservedPhase,
    PodCacheError, PodCreation, RequestId, SlotId,
};
use crate::domain::pod_cache::naming;
use crate::domain::pod_cache::time::UnixTime;

/// How often a creation may pick another name after an AlreadyExists for a
/// pod that is not its own, before it fails.
const MAX_RENAMES: u32 = 3;

impl PodCache {
    fn fresh_name(&mut self, image: &str) -> String {
        loop {
            let seq = self.next_seq;
            self.next_seq += 1;
            let name = naming::pod_name(image, &self.policy.replica_token, seq);
            if !self.by_name.contains_key(&name) && !self.observed_names.contains(&name) {
                return name;
            }
        }
    }

    /// Remembers `name` if this replica's naming could produce it, so that
    /// it is never chosen for a new pod.
    pub(super) fn note_name(&mut self, name: &str) {
        let ours = name
            .rsplit_once('-')
            .is_some_and(|(prefix, _)| prefix.ends_with(&self.token_suffix));
        if ours && !self.observed_names.contains(name) {
            self.observed_names.insert(name.to_string());
        }
    }

    pub(super) fn creation_command(&self, id: SlotId) -> Command {
        let slot = &self.slots[&id];
        let Phase::Pending(c) = &slot.phase else {
            unreachable!("creation of a pending slot")
        };
        let f = &self.functions[&slot.image];
        Command::CreatePod(PodCreation {
            slot: id,
            pod_name: slot.pod_name.clone(),
            image: slot.image.clone(),
            template_version: slot.template_version.clone(),
            settings_version: f.pod_version.clone(),
            creation: c.nonce.clone(),
            settings: f.settings.clone(),
            reclaim_after: c.reclaim_after,
            deadline: c.deadline,
        })
    }

    /// Porch §5.4 step 5 (and warm-up): a new pending slot, with `waiter` on
    /// its waitlist if given, and a creation command.
    pub(super) fn scale_out(
        &mut self,
        now: UnixTime,
        image: &str,
        waiter: Option<RequestId>,
        pool: Option<u32>,
    ) {
        let id = SlotId(self.next_slot);
        self.next_slot += 1;
        let pod_name = match pool {
            Some(i) => self.pool_name(image, i),
            None => self.fresh_name(image),
        };
        let min = self.functions[image].settings.pool().map_or(0, |p| p.min);
        let ttl = self.functions[image].settings.ttl;
        let deadline = now + self.policy.pod_ready_timeout;
        let creation = Creation {
            deadline,
            waitlist: waiter.into_iter().collect(),
            step: Step::Creating { seen: None },
            nonce: format!("{}-{}", self.policy.instance, id.0),
            renames: 0,
            reclaim_after: extended(now, ttl),
            joined: false,
            tried: Vec::new(),
            address: None,
            probing: false,
        };
        let slot = Slot {
            image: image.to_string(),
            pod_name: pod_name.clone(),
            template_version: self.template_version.clone(),
            shape: self.functions[image].shape,
            ttl,
            phase: Phase::Pending(Box::new(creation)),
            load: u32::from(waiter.is_some()),
            last_used: now,
            confirmed: UnixTime::EPOCH,
            persist: Persist::Idle,
            known_since: None,
            draining: false,
            uid: None,
            renew_at: None,
            pool,
            warm: pool.is_some_and(|i| i < min),
        };
        if let Some(request) = waiter {
            self.requests.insert(
                request,
                Request {
                    slot: id,
                    waiting: true,
                },
            );
        }
        self.slots.insert(id, slot);
        self.by_name.insert(pod_name, id);
        self.schedule(deadline, Timer::Deadline(id));
        self.function_entry(image).slots.push(id);
        let cmd = self.creation_command(id);
        self.commands.push_back(cmd);
    }

    pub(super) fn on_created(
        &mut self,
        now: UnixTime,
        id: SlotId,
        result: Result<(), CreateFailure>,
    ) {
        let Some(slot) = self.slots.get_mut(&id) else {
            // Given up while the creation was out: whatever it made exists
            // now, so delete it rather than leave it behind.
            if let Some(a) = self.abandoned.remove(&id)
                && !matches!(result, Err(CreateFailure::Failed { .. }))
            {
                let precondition = DeletePrecondition {
                    creation: Some(a.nonce),
                    reclaim_after: Some(a.reclaim_after),
                    ..DeletePrecondition::default()
                };
                self.delete_with(a.pod_name, precondition, DeleteReason::CreationFailed);
            }
            return;
        };
        let Phase::Pending(c) = &mut slot.phase else {
            return;
        };
        let Step::Creating { seen } = &mut c.step else {
            return;
        };
        match result {
            Ok(()) => {
                let seen = seen.take();
                self.on_objects_exist(now, id, seen);
            }
            Err(CreateFailure::AlreadyExists { existing }) => {
                let ours = existing.as_ref().filter(|e| {
                    e.labelled
                        && e.creation.as_deref() == Some(c.nonce.as_str())
                        && !matches!(
                            e.phase,
                            ObservedPhase::Failed { .. } | ObservedPhase::Terminating
                        )
                });
                if let Some(e) = ours {
                    // An earlier attempt of this same creation made it; its
                    // service may be missing.
                    slot.uid.clone_from(&e.uid);
                    let seen = match &e.phase {
                        ObservedPhase::Ready { endpoint } => Some((endpoint.clone(), e.ip.clone())),
                        _ => seen.take(),
                    };
                    self.commands.push_back(Command::EnsureService {
                        pod_name: slot.pod_name.clone(),
                    });
                    self.on_objects_exist(now, id, seen);
                } else if slot.pool.is_some() {
                    self.pool_name_taken(now, id, existing);
                } else if c.renames < MAX_RENAMES && !self.shutting_down {
                    c.renames += 1;
                    let old = std::mem::take(&mut slot.pod_name);
                    let image = slot.image.clone();
                    self.by_name.remove(&old);
                    self.observed_names.insert(old);
                    let name = self.fresh_name(&image);
                    self.by_name.insert(name.clone(), id);
                    self.slots.get_mut(&id).expect("live slot").pod_name = name;
                    let cmd = self.creation_command(id);
                    self.commands.push_back(cmd);
                } else {
                    let err = PodCacheError::CreationFailed {
                        image: slot.image.clone(),
                        pod: slot.pod_name.clone(),
                        reason: format!(
                            "a pod named {} already exists and was not created by this runner (is --replica-token shared by two replicas?)",
                            slot.pod_name
                        ),
                    };
                    self.observed_names.insert(slot.pod_name.clone());
                    // Not ours: never delete it.
                    self.evict(now, id, err, None);
                }
            }
            Err(CreateFailure::Failed { reason }) => {
                let err = PodCacheError::CreationFailed {
                    image: slot.image.clone(),
                    pod: slot.pod_name.clone(),
                    reason,
                };
                // The pod may exist (its service failed): delete it.
                self.evict(now, id, err, Some(DeleteReason::CreationFailed));
            }
        }
    }

    /// The pod and service of a pending slot exist: wait for readiness, or
    /// go on at once if the watch already reported it.
    fn on_objects_exist(
        &mut self,
        now: UnixTime,
        id: SlotId,
        seen: Option<(String, Option<String>)>,
    ) {
        let slot = self.slots.get_mut(&id).expect("live slot");
        let Phase::Pending(c) = &mut slot.phase else {
            return;
        };
        c.step = Step::Starting;
        slot.confirmed = slot.confirmed.max(c.reclaim_after);
        slot.known_since.get_or_insert(now);
        if let Some((endpoint, ip)) = seen {
            self.on_pod_ready(now, id, endpoint, ip);
        } else {
            self.probe_if_addressed(id);
        }
    }

    /// Emits [`Command::ProbeWrapper`] for a starting pod of this replica's
    /// own creation once it has an IP, once, when the policy asks for it
    /// (pod-IP address mode): the wrapper may answer well before the
    /// kubelet's next readiness probe, and before the kubelet's status
    /// even says its container runs (the kubelet learns that at its next
    /// relist of the containers, up to a second later). The probe retries
    /// until the wrapper answers.
    pub(super) fn probe_if_addressed(&mut self, id: SlotId) {
        if !self.policy.probe_wrapper || self.policy.await_endpoints {
            return;
        }
        let Some(slot) = self.slots.get_mut(&id) else {
            return;
        };
        let Phase::Pending(c) = &mut slot.phase else {
            return;
        };
        if c.probing || c.joined || !matches!(c.step, Step::Starting) {
            return;
        }
        let Some(endpoint) = c.address.clone() else {
            return;
        };
        c.probing = true;
        self.commands.push_back(Command::ProbeWrapper {
            slot: id,
            pod_name: slot.pod_name.clone(),
            endpoint,
            deadline: c.deadline,
        });
    }

    /// The wrapper of a starting pod answered its health check: it takes
    /// calls now (pod-IP address mode), as if the kubelet had reported it
    /// ready.
    pub(super) fn on_wrapper_serving(&mut self, now: UnixTime, id: SlotId, endpoint: String) {
        let Some(slot) = self.slots.get(&id) else {
            return;
        };
        let Phase::Pending(c) = &slot.phase else {
            return;
        };
        if matches!(c.step, Step::Starting) && !c.joined && !self.policy.await_endpoints {
            self.make_ready(now, id, endpoint);
        }
    }

    /// The pending slot's pod is ready: wait for its service to publish it
    /// (service mode), or take calls now.
    pub(super) fn on_pod_ready(
        &mut self,
        now: UnixTime,
        id: SlotId,
        endpoint: String,
        ip: Option<String>,
    ) {
        let slot = self.slots.get_mut(&id).expect("live slot");
        let Phase::Pending(c) = &mut slot.phase else {
            return;
        };
        if c.joined {
            // Another replica's pod: claim it before any call.
            c.step = Step::Claiming { endpoint };
            return self.issue_persist(now, id, 0);
        }
        self.publish_then_ready(now, id, endpoint, ip);
    }

    /// A pending slot's pod is ready and, if adopted or joined, claimed:
    /// in service mode its service must publish it (and the driver see the
    /// wrapper answer through it) first — a pod the kubelet reports ready is
    /// not yet routable through its ClusterIP until kube-proxy has written
    /// the service's rules; otherwise it takes calls now.
    pub(super) fn publish_then_ready(
        &mut self,
        now: UnixTime,
        id: SlotId,
        endpoint: String,
        ip: Option<String>,
    ) {
        let await_endpoints = self.policy.await_endpoints;
        let slot = self.slots.get_mut(&id).expect("live slot");
        let Phase::Pending(c) = &mut slot.phase else {
            return;
        };
        if await_endpoints {
            c.step = Step::Publishing;
            let cmd = Command::AwaitEndpoint {
                slot: id,
                pod_name: slot.pod_name.clone(),
                pod_ip: ip,
                deadline: c.deadline,
            };
            self.commands.push_back(cmd);
        } else {
            self.make_ready(now, id, endpoint);
        }
    }

    pub(super) fn on_endpoint(
        &mut self,
        now: UnixTime,
        id: SlotId,
        result: Result<String, String>,
    ) {
        let Some(slot) = self.slots.get(&id) else {
            return;
        };
        let Phase::Pending(c) = &slot.phase else {
            return;
        };
        if !matches!(c.step, Step::Publishing) {
            return;
        }
        match result {
            Ok(endpoint) => self.make_ready(now, id, endpoint),
            Err(reason) => {
                let err = PodCacheError::CreationFailed {
                    image: slot.image.clone(),
                    pod: slot.pod_name.clone(),
                    reason,
                };
                // An adopted or joined pod is not this replica's to delete.
                let ours = !c.joined && !c.nonce.is_empty();
                let delete = ours.then_some(DeleteReason::CreationFailed);
                self.evict(now, id, err, delete);
            }
        }
    }

    // Porch §5.6 success path, matched by slot id (item 6).
    fn make_ready(&mut self, now: UnixTime, id: SlotId, endpoint: String) {
        let slot = self.slots.get_mut(&id).expect("live slot");
        let Phase::Pending(c) = &mut slot.phase else {
            return;
        };
        let waiters = std::mem::take(&mut c.waitlist);
        slot.phase = Phase::Ready {
            endpoint: endpoint.clone(),
        };
        slot.last_used = now;
        let pod_name = slot.pod_name.clone();
        let served = !waiters.is_empty();
        for request in waiters {
            if let Some(r) = self.requests.get_mut(&request) {
                r.waiting = false;
            }
            let a = Assignment {
                slot: id,
                pod_name: pod_name.clone(),
                endpoint: endpoint.clone(),
            };
            self.reply(request, Ok(a));
        }
        if served || self.slots[&id].warm {
            self.touch(now, id);
        }
    }

    pub(super) fn on_deadline(&mut self, now: UnixTime, id: SlotId) {
        let Some(slot) = self.slots.get(&id) else {
            return;
        };
        let Phase::Pending(c) = &slot.phase else {
            return;
        };
        if c.deadline > now {
            return;
        }
        let err = PodCacheError::CreationTimedOut {
            image: slot.image.clone(),
            pod: slot.pod_name.clone(),
            after: self.policy.pod_ready_timeout,
        };
        if matches!(c.step, Step::Claiming { .. } | Step::NameHeld { .. }) || c.joined {
            // Not ours to delete: left to GC.
            return self.evict(now, id, err, None);
        }
        if matches!(c.step, Step::Creating { .. }) {
            let a = Abandoned {
                pod_name: slot.pod_name.clone(),
                nonce: c.nonce.clone(),
                reclaim_after: c.reclaim_after,
            };
            self.abandoned.insert(id, a);
        }
        self.evict(now, id, err, Some(DeleteReason::CreationFailed));
    }

    /// The terminating pod that held the name of `id`'s creation is gone:
    /// create the pod under that name now.
    pub(super) fn name_freed(&mut self, id: SlotId) {
        let Some(slot) = self.slots.get_mut(&id) else {
            return;
        };
        let Phase::Pending(c) = &mut slot.phase else {
            return;
        };
        c.step = Step::Creating { seen: None };
        let cmd = self.creation_command(id);
        self.commands.push_back(cmd);
    }

    /// Creations waiting for a name ([`Step::NameHeld`]) since before
    /// `asked` whose name a listing asked for at `asked` does not hold: the
    /// name is free.
    pub(super) fn names_freed_by_listing(&mut self, asked: UnixTime, present: &HashSet<&str>) {
        let freed: Vec<SlotId> = self
            .slots
            .iter()
            .filter(|(_, s)| {
                matches!(&s.phase, Phase::Pending(c)
                    if matches!(c.step, Step::NameHeld { since } if since <= asked))
                    && !present.contains(s.pod_name.as_str())
            })
            .map(|(id, _)| *id)
            .collect();
        for id in freed {
            self.name_freed(id);
        }
    }
}
