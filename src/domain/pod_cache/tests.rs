//! Porch's pod-cache behaviours (spec §9.1–9.3) that still apply, and the
//! defect fixes of spec §10, as plain unit tests of the state machine.

use std::sync::Arc;
use std::time::Duration;

use super::*;

const IMG: &str = "gcr.io/kpt-fn/apply-replacements:latest";
const TTL: Duration = Duration::from_secs(600);

fn t(secs: u64) -> UnixTime {
    UnixTime::from_secs(1_000_000 + secs)
}

fn settings(max_waitlist: u32, max_pods: u32) -> FunctionSettings {
    FunctionSettings {
        ttl: TTL,
        max_waitlist,
        max_parallel_pods: max_pods,
        max_load_per_pod: 4,
        resources: None,
        ..FunctionSettings::default()
    }
}

fn test_policy(max_waitlist: u32, max_pods: u32) -> PodCachePolicy {
    let mut p = PodCachePolicy::new(settings(max_waitlist, max_pods), "r1").unwrap();
    p.scan_interval = Duration::from_secs(1);
    p
}

fn cache(max_waitlist: u32, max_pods: u32) -> PodCache {
    PodCache::new(test_policy(max_waitlist, max_pods), "v1")
}

fn drain(pc: &mut PodCache) -> Vec<Command> {
    std::iter::from_fn(|| pc.poll_command()).collect()
}

fn request(pc: &mut PodCache, now: UnixTime, id: u64, image: &str) -> Vec<Command> {
    pc.handle(
        now,
        Input::Request {
            request: RequestId(id),
            image: image.to_string(),
        },
    );
    drain(pc)
}

fn finish(pc: &mut PodCache, now: UnixTime, id: u64) -> Vec<Command> {
    pc.handle(
        now,
        Input::CallFinished {
            request: RequestId(id),
        },
    );
    drain(pc)
}

fn created(cmds: &[Command]) -> Vec<PodCreation> {
    cmds.iter()
        .filter_map(|c| match c {
            Command::CreatePod(p) => Some(p.clone()),
            _ => None,
        })
        .collect()
}

fn replies(cmds: &[Command]) -> Vec<(u64, Result<Assignment, PodCacheError>)> {
    cmds.iter()
        .filter_map(|c| match c {
            Command::Reply { request, result } => Some((request.0, result.clone())),
            _ => None,
        })
        .collect()
}

fn deleted(cmds: &[Command]) -> Vec<String> {
    cmds.iter()
        .filter_map(|c| match c {
            Command::DeletePod { pod_name, .. } => Some(pod_name.clone()),
            _ => None,
        })
        .collect()
}

fn persisted(cmds: &[Command]) -> Vec<(String, UnixTime)> {
    cmds.iter()
        .filter_map(|c| match c {
            Command::PersistReclaimAfter {
                pod_name,
                reclaim_after,
                ..
            } => Some((pod_name.clone(), *reclaim_after)),
            _ => None,
        })
        .collect()
}

fn pod_name(pc: &PodCache, slot: SlotId) -> Option<String> {
    pc.slots()
        .find(|s| s.id == slot)
        .map(|s| s.pod_name.to_string())
}

/// The pod of `slot` as the watch reports it in `phase`.
fn seen(name: &str, phase: ObservedPhase) -> ObservedPod {
    ObservedPod {
        name: name.to_string(),
        image: IMG.to_string(),
        labelled: true,
        template_version: Some("v1".to_string()),
        uid: Some(format!("uid-{name}")),
        phase,
        ..ObservedPod::default()
    }
}

/// The creation of `slot` succeeded and the watch reports its pod ready at
/// `ep-<slot>`.
fn ready(pc: &mut PodCache, now: UnixTime, slot: SlotId) -> Vec<Command> {
    pc.handle(
        now,
        Input::Created {
            slot,
            result: Ok(()),
        },
    );
    let mut cmds = drain(pc);
    if let Some(name) = pod_name(pc, slot) {
        let endpoint = format!("ep-{}", slot.0);
        let pod = seen(&name, ObservedPhase::Ready { endpoint });
        pc.handle(now, Input::PodObserved { pod });
        cmds.extend(drain(pc));
    }
    cmds
}

/// The persist in `cmds` succeeded.
fn ack(pc: &mut PodCache, now: UnixTime, cmds: &[Command]) -> Vec<Command> {
    let mut out = Vec::new();
    for (pod_name, reclaim_after) in persisted(cmds) {
        pc.handle(
            now,
            Input::Persisted {
                pod_name,
                reclaim_after,
                result: Ok(()),
            },
        );
        out.extend(drain(pc));
    }
    out
}

fn failed(pc: &mut PodCache, now: UnixTime, slot: SlotId, reason: &str) -> Vec<Command> {
    pc.handle(
        now,
        Input::Created {
            slot,
            result: Err(CreateFailure::Failed {
                reason: reason.to_string(),
            }),
        },
    );
    drain(pc)
}

/// A GC listing asked for at `started` and answered at `handled` with
/// `observed` (and `services`).
fn gc_listing(
    pc: &mut PodCache,
    started: UnixTime,
    handled: UnixTime,
    observed: Vec<ObservedPod>,
    services: Vec<ObservedService>,
) -> Vec<Command> {
    pc.handle(started, Input::Tick);
    let mut cmds = drain(pc);
    let listing = cmds
        .iter()
        .find_map(|c| match c {
            Command::ListPods { listing } => Some(*listing),
            _ => None,
        })
        .or(pc.listing_out())
        .expect("a GC listing is due");
    cmds.retain(|c| !matches!(c, Command::ListPods { .. }));
    let listing_result = Listing {
        pods: observed.into_iter().map(Arc::new).collect(),
        services,
    };
    pc.handle(
        handled,
        Input::Listed {
            listing,
            result: Ok(listing_result),
        },
    );
    cmds.extend(drain(pc));
    cmds
}

fn gc(pc: &mut PodCache, now: UnixTime, observed: Vec<ObservedPod>) -> Vec<Command> {
    gc_listing(pc, now, now, observed, Vec::new())
}

fn loads(pc: &PodCache, image: &str) -> Vec<u32> {
    pc.slots_for(image).map(|s| s.load).collect()
}

/// A ready pod for IMG with one request served and finished, its
/// reclaim-after persisted.
fn warm(pc: &mut PodCache) -> PodCreation {
    let c = created(&request(pc, t(0), 1, IMG)).remove(0);
    let cmds = ready(pc, t(1), c.slot);
    ack(pc, t(1), &cmds);
    let cmds = finish(pc, t(2), 1);
    ack(pc, t(2), &cmds);
    c
}

fn observed(name: &str, reclaim_after: Option<&str>, phase: ObservedPhase) -> ObservedPod {
    ObservedPod {
        reclaim_after: reclaim_after.map(str::to_string),
        resource_version: Some("7".to_string()),
        ..seen(name, phase)
    }
}

// §9.1 TestEventLoop_PodReadyUnknownFunction / _PodReadyNoPendingPod: stray
// outcomes are ignored and the machine keeps serving.
#[test]
fn stray_outcomes_are_ignored() {
    let mut pc = cache(2, 1);
    assert!(ready(&mut pc, t(0), SlotId(77)).is_empty());
    assert!(failed(&mut pc, t(0), SlotId(78), "x").is_empty());
    let c = warm(&mut pc);
    assert!(
        ready(&mut pc, t(3), c.slot).is_empty(),
        "second ready for a ready slot"
    );
    let r = replies(&request(&mut pc, t(4), 2, IMG));
    assert_eq!(r[0].1.as_ref().unwrap().pod_name, c.pod_name);
}

// §9.1 TestEventLoop_QueueOnPendingPod.
#[test]
fn requests_queue_on_a_pending_pod() {
    let mut pc = cache(5, 1);
    let c = created(&request(&mut pc, t(0), 1, IMG));
    assert_eq!(c.len(), 1);
    let second = request(&mut pc, t(0), 2, IMG);
    assert!(second.is_empty(), "queued, no new pod: {second:?}");
    assert_eq!(loads(&pc, IMG), [2]);
    let r = replies(&ready(&mut pc, t(1), c[0].slot));
    assert_eq!(r.iter().map(|(id, _)| *id).collect::<Vec<_>>(), [1, 2]);
    assert!(
        r.iter()
            .all(|(_, res)| res.as_ref().unwrap().endpoint == format!("ep-{}", c[0].slot.0))
    );
}

// §9.1 TestEventLoop_PodFailedNoRedistribution.
#[test]
fn failed_creation_without_other_pods_fails_the_waiters() {
    let mut pc = cache(5, 1);
    let c = created(&request(&mut pc, t(0), 1, IMG)).remove(0);
    request(&mut pc, t(0), 2, IMG);
    let cmds = failed(&mut pc, t(1), c.slot, "pods is forbidden: quota exceeded");
    let r = replies(&cmds);
    assert_eq!(r.len(), 2);
    for (_, res) in r {
        let e = res.unwrap_err();
        assert!(e.to_string().contains("quota exceeded"), "{e}");
        assert_eq!(e.class(), ErrorClass::Unavailable);
    }
    assert_eq!(deleted(&cmds), [c.pod_name]);
    assert_eq!(pc.slots().count(), 0);
}

// §9.2 TestRedistributeLoad, done right (§10 item 5): waiters move to the
// other slot, counted there.
#[test]
fn failed_creation_moves_waiters_to_another_slot() {
    let mut pc = cache(1, 2);
    let a = created(&request(&mut pc, t(0), 1, IMG)).remove(0);
    ready(&mut pc, t(1), a.slot);
    let b = created(&request(&mut pc, t(2), 2, IMG)).remove(0);
    assert_ne!(a.pod_name, b.pod_name);
    request(&mut pc, t(2), 3, IMG); // equal loads: round robin picks a, then b
    request(&mut pc, t(2), 4, IMG);
    assert_eq!(pc.request_slot(RequestId(3)), Some((a.slot, false)));
    assert_eq!(pc.request_slot(RequestId(4)), Some((b.slot, true)));
    let r = replies(&failed(&mut pc, t(3), b.slot, "boom"));
    assert_eq!(r.iter().map(|(id, _)| *id).collect::<Vec<_>>(), [2, 4]);
    assert!(
        r.iter()
            .all(|(_, res)| res.as_ref().unwrap().slot == a.slot)
    );
    assert_eq!(loads(&pc, IMG), [4]);
    for id in 1..=4 {
        pc.handle(
            t(4),
            Input::CallFinished {
                request: RequestId(id),
            },
        );
    }
    assert_eq!(loads(&pc, IMG), [0]);
}

// §10 item 6: an outcome reaches the slot that asked for it.
#[test]
fn outcomes_are_matched_by_slot_id() {
    let mut pc = cache(1, 2);
    let a = created(&request(&mut pc, t(0), 1, IMG)).remove(0);
    let b = created(&request(&mut pc, t(0), 2, IMG)).remove(0);
    let r = replies(&ready(&mut pc, t(1), b.slot));
    assert_eq!(r.len(), 1);
    assert_eq!(r[0].0, 2, "only b's waiter is served by b's pod");
    assert_eq!(pc.request_slot(RequestId(1)), Some((a.slot, true)));
}

// §9.2 TestFindBestPod: least loaded; equal loads pick index 0 on a fresh
// entry, then round robin; the last pod can win.
#[test]
fn least_loaded_then_round_robin() {
    let mut pc = cache(1, 3);
    let slots: Vec<_> = (1..=3)
        .map(|id| created(&request(&mut pc, t(0), id, IMG)).remove(0).slot)
        .collect();
    for s in &slots {
        ready(&mut pc, t(1), *s);
    }
    assert_eq!(loads(&pc, IMG), [1, 1, 1]);
    pc.handle(
        t(2),
        Input::CallFinished {
            request: RequestId(3),
        },
    );
    let r = replies(&request(&mut pc, t(3), 4, IMG));
    assert_eq!(
        r[0].1.as_ref().unwrap().slot,
        slots[2],
        "the last pod is least loaded"
    );
    for id in [1, 2, 4] {
        pc.handle(
            t(4),
            Input::CallFinished {
                request: RequestId(id),
            },
        );
    }
    drain(&mut pc);
    let picks: Vec<_> = (10..13)
        .map(|id| {
            let r = replies(&request(&mut pc, t(5), id, IMG));
            pc.handle(
                t(5),
                Input::CallFinished {
                    request: RequestId(id),
                },
            );
            r[0].1.as_ref().unwrap().slot
        })
        .collect();
    assert_eq!(picks, [slots[0], slots[1], slots[2]]);
}

// §9.2 TestNewPodInfo: a warm-up slot is pending with load 0; a request slot has load 1.
#[test]
fn warm_up_creates_idle_pending_slots_once() {
    let mut pc = cache(2, 1);
    pc.handle(
        t(0),
        Input::WarmUp {
            images: vec![IMG.into(), IMG.into(), "bad image".into()],
        },
    );
    let c = created(&drain(&mut pc));
    assert_eq!(c.len(), 1);
    let v: Vec<_> = pc.slots_for(IMG).collect();
    assert_eq!(
        (v[0].state, v[0].load, v[0].waiting),
        (SlotState::Pending, 0, 0)
    );
    let r = request(&mut pc, t(0), 1, IMG);
    assert!(r.is_empty());
    assert_eq!(pc.slots_for(IMG).next().unwrap().load, 1);
}

// §9.3 "Pod Exists and in Cache": at the pod limit, requests queue on the pod.
#[test]
fn at_the_pod_limit_requests_queue() {
    let mut pc = cache(1, 1);
    let c = created(&request(&mut pc, t(0), 1, IMG)).remove(0);
    ready(&mut pc, t(1), c.slot);
    let r = replies(&request(&mut pc, t(2), 2, IMG));
    assert_eq!(r[0].1.as_ref().unwrap().slot, c.slot);
    assert_eq!(loads(&pc, IMG), [2]);
}

// §10 item 33: queueing is bounded, and the rejection is RESOURCE_EXHAUSTED.
#[test]
fn queueing_beyond_the_limit_is_rejected() {
    let mut pc = cache(1, 1);
    for id in 1..=4 {
        request(&mut pc, t(0), id, IMG);
    }
    let r = replies(&request(&mut pc, t(0), 5, IMG));
    let e = r[0].1.clone().unwrap_err();
    assert_eq!(e.class(), ErrorClass::ResourceExhausted);
    assert!(e.to_string().contains("maxLoadPerPod"), "{e}");
    assert_eq!(loads(&pc, IMG), [4]);
}

// §9.3 "Pod does not Exists but in Cache" / §9.2 TestRemoveUnhealthyPods: a
// deleted or failed pod is evicted and never handed out again.
#[test]
fn gone_pods_are_evicted_and_replaced() {
    let mut pc = cache(2, 1);
    let c = warm(&mut pc);
    let pod = seen(
        &c.pod_name,
        ObservedPhase::Failed {
            reason: "pod phase Failed".into(),
        },
    );
    pc.handle(t(3), Input::PodObserved { pod });
    assert_eq!(deleted(&drain(&mut pc)), std::slice::from_ref(&c.pod_name));
    let cmds = request(&mut pc, t(4), 2, IMG);
    let next = created(&cmds);
    assert_eq!(next.len(), 1);
    assert_ne!(next[0].pod_name, c.pod_name);
}

// §10 item 4: load returns to zero on every exit path.
#[test]
fn load_returns_to_zero_on_finish_cancel_and_error() {
    let mut pc = cache(5, 1);
    let c = created(&request(&mut pc, t(0), 1, IMG)).remove(0);
    request(&mut pc, t(0), 2, IMG);
    pc.handle(
        t(0),
        Input::Cancelled {
            request: RequestId(2),
        },
    );
    let r = replies(&drain(&mut pc));
    assert_eq!(r[0].1.clone().unwrap_err().class(), ErrorClass::Cancelled);
    assert_eq!(loads(&pc, IMG), [1]);
    ready(&mut pc, t(1), c.slot);
    request(&mut pc, t(1), 3, IMG);
    pc.handle(
        t(2),
        Input::Cancelled {
            request: RequestId(3),
        },
    );
    pc.handle(
        t(2),
        Input::CallFinished {
            request: RequestId(1),
        },
    );
    pc.handle(
        t(2),
        Input::CallFinished {
            request: RequestId(1),
        },
    );
    assert!(
        replies(&drain(&mut pc)).is_empty(),
        "answered requests get no second reply"
    );
    assert_eq!(loads(&pc, IMG), [0]);
}

// §10 items 15, 28: a pending slot has a deadline; a late pod is deleted.
#[test]
fn pending_slots_time_out() {
    let mut policy = test_policy(2, 1);
    policy.scan_interval = Duration::ZERO;
    let mut pc = PodCache::new(policy, "v1");
    let c = created(&request(&mut pc, t(0), 1, IMG)).remove(0);
    assert_eq!(pc.poll_timeout(), Some(t(60)));
    pc.handle(t(59), Input::Tick);
    assert!(drain(&mut pc).is_empty());
    pc.handle(t(60), Input::Tick);
    let cmds = drain(&mut pc);
    let e = replies(&cmds)[0].1.clone().unwrap_err();
    assert_eq!(e.class(), ErrorClass::DeadlineExceeded);
    assert_eq!(deleted(&cmds), std::slice::from_ref(&c.pod_name));
    assert_eq!(pc.poll_timeout(), None);
    // The creation's answer arrives late: what it made is deleted.
    pc.handle(
        t(60),
        Input::Deleted {
            pod_name: c.pod_name.clone(),
            result: Ok(()),
        },
    );
    pc.handle(
        t(61),
        Input::Created {
            slot: c.slot,
            result: Ok(()),
        },
    );
    assert_eq!(deleted(&drain(&mut pc)), [c.pod_name]);
}

// §9.3 GC "Expired Pod Exists and cleaned up" / §9.2 TestGarbageCollectorUnit.
#[test]
fn gc_deletes_idle_expired_pods() {
    let mut pc = cache(2, 1);
    let c = warm(&mut pc);
    let reclaim = pc.slots_for(IMG).next().unwrap().reclaim_after;
    assert!(
        reclaim >= t(2) + TTL,
        "reclaim-after is at least a TTL after the last use"
    );
    let ready_phase = ObservedPhase::Ready {
        endpoint: "ep".into(),
    };
    let annotation = reclaim.to_annotation();
    let obs = vec![observed(
        &c.pod_name,
        Some(&annotation),
        ready_phase.clone(),
    )];
    assert!(
        deleted(&gc(&mut pc, t(2) + TTL, obs.clone())).is_empty(),
        "fresh pod survives"
    );
    let cmds = gc(&mut pc, reclaim, obs);
    assert_eq!(deleted(&cmds), std::slice::from_ref(&c.pod_name));
    assert_eq!(pc.slots().count(), 0);
    // The deletion holds only if the pod is still as listed.
    let precondition = cmds.iter().find_map(|c| match c {
        Command::DeletePod { precondition, .. } => Some(precondition.clone()),
        _ => None,
    });
    assert_eq!(
        precondition,
        Some(DeletePrecondition {
            uid: Some(format!("uid-{}", c.pod_name)),
            resource_version: Some("7".into()),
            ..DeletePrecondition::default()
        })
    );
}

// §9.3 "New Pod Exists and not cleaned up": GC never deletes a busy pod.
#[test]
fn gc_keeps_busy_pods() {
    let mut pc = cache(2, 1);
    let c = created(&request(&mut pc, t(0), 1, IMG)).remove(0);
    ready(&mut pc, t(1), c.slot);
    let obs = vec![observed(
        &c.pod_name,
        Some("1"),
        ObservedPhase::Ready {
            endpoint: "ep".into(),
        },
    )];
    let cmds = gc(&mut pc, t(10_000), obs);
    assert!(deleted(&cmds).is_empty());
    assert!(
        cmds.iter()
            .any(|c| matches!(c, Command::PersistReclaimAfter { .. })),
        "a busy pod's reclaim-after is kept ahead"
    );
}

// §9.3 "Non Annotated Pod" / "invalid timestamp": grace, not deletion; only labelled pods.
#[test]
fn gc_grants_grace_to_unannotated_pods_and_ignores_unlabelled_ones() {
    let mut pc = cache(2, 1);
    let phase = ObservedPhase::Ready {
        endpoint: "ep".into(),
    };
    let mut unlabelled = observed("other", Some("1"), phase.clone());
    unlabelled.labelled = false;
    let obs = vec![
        observed("a", None, phase.clone()),
        observed("b", Some("soon"), phase.clone()),
        observed("c", Some("1"), phase.clone()),
        observed("d", Some("1"), ObservedPhase::Terminating),
        unlabelled,
    ];
    pc.handle(t(0), Input::Tick);
    let cmds = gc(&mut pc, t(1), obs);
    assert_eq!(deleted(&cmds), ["c"]);
    let persisted: Vec<_> = cmds
        .iter()
        .filter_map(|c| match c {
            Command::PersistReclaimAfter {
                pod_name,
                reclaim_after,
                ..
            } => Some((pod_name.as_str(), *reclaim_after)),
            _ => None,
        })
        .collect();
    assert_eq!(persisted.len(), 2);
    assert!(persisted.iter().all(|(_, r)| *r > t(0) + TTL));
}

// §10 item 11: stale-template pods are replaced on next use, left for GC, never orphaned.
#[test]
fn stale_template_pods_are_replaced_on_next_use() {
    let mut pc = cache(2, 1);
    let old = warm(&mut pc);
    pc.handle(
        t(3),
        Input::TemplateChanged {
            version: "v2".into(),
        },
    );
    let cmds = request(&mut pc, t(4), 2, IMG);
    let new = created(&cmds);
    assert_eq!(new.len(), 1);
    assert_eq!(new[0].template_version, "v2");
    ready(&mut pc, t(5), new[0].slot);
    pc.handle(
        t(5),
        Input::CallFinished {
            request: RequestId(2),
        },
    );
    assert!(
        deleted(&cmds).is_empty(),
        "another replica may still use the old pod"
    );
    assert_eq!(pc.slots().count(), 1);
    let annotation = (t(4) + TTL * 2).to_annotation();
    let obs = vec![observed(
        &old.pod_name,
        Some(&annotation),
        ObservedPhase::Ready {
            endpoint: "ep".into(),
        },
    )];
    assert_eq!(
        deleted(&gc(&mut pc, t(4) + TTL * 2, obs)),
        [old.pod_name],
        "GC reclaims it once expired"
    );
}

// Seeds: reclaim-after is persisted at most once per half-TTL, never before the reply.
#[test]
fn reclaim_after_is_persisted_at_most_once_per_half_ttl() {
    let mut pc = cache(5, 1);
    let c = created(&request(&mut pc, t(0), 1, IMG)).remove(0);
    assert!(c.reclaim_after >= t(0) + TTL);
    ready(&mut pc, t(1), c.slot);
    let mut persisted = Vec::new();
    for (i, secs) in (2..2_000).step_by(7).enumerate() {
        let id = 100 + i as u64;
        let cmds = request(&mut pc, t(secs), id, IMG);
        assert!(
            matches!(cmds[0], Command::Reply { .. }),
            "the reply comes first"
        );
        ack(&mut pc, t(secs), &cmds);
        let fin = finish(&mut pc, t(secs), id);
        ack(&mut pc, t(secs), &fin);
        persisted.extend(cmds.iter().chain(&fin).filter_map(|c| match c {
            Command::PersistReclaimAfter { reclaim_after, .. } => Some((secs, *reclaim_after)),
            _ => None,
        }));
    }
    assert!(persisted.len() >= 2);
    for w in persisted.windows(2) {
        assert!(w[1].0 - w[0].0 >= TTL.as_secs() / 2, "{persisted:?}");
    }
}

// §9.3 "Pod Exists but not in Cache": adoption of ready current-version pods, within the per-function limit.
#[test]
fn adoption_respects_version_expiry_and_limit() {
    let mut pc = cache(2, 1);
    let ready_phase = ObservedPhase::Ready {
        endpoint: "adopted-ep".into(),
    };
    let future = t(500).to_annotation();
    let mut stale = observed("stale", Some(&future), ready_phase.clone());
    stale.template_version = Some("v0".into());
    let obs = vec![
        stale,
        observed("expired", Some("1"), ready_phase.clone()),
        observed("pending", Some(&future), ObservedPhase::Pending),
        observed("good", Some(&future), ready_phase.clone()),
        observed("over-limit", Some(&future), ready_phase),
    ];
    let observed = obs.into_iter().map(Arc::new).collect();
    pc.handle(t(0), Input::Adopt { observed });
    let cmds = drain(&mut pc);
    assert!(deleted(&cmds).is_empty(), "adoption deletes nothing");
    assert_eq!(
        cmds[0],
        Command::EnsureService {
            pod_name: "good".into()
        },
        "an adopted pod gets its service back if it lost it"
    );
    let claim = persisted(&cmds);
    assert_eq!(claim, [("good".to_string(), t(0) + TTL + TTL / 2)]);
    let names: Vec<_> = pc.slots().map(|s| s.pod_name.to_string()).collect();
    assert_eq!(names, ["good"]);
    // A call waits for the claim, then gets the adopted pod.
    assert!(replies(&request(&mut pc, t(1), 1, IMG)).is_empty());
    let r = replies(&ack(&mut pc, t(1), &cmds));
    assert_eq!(r[0].1.as_ref().unwrap().endpoint, "adopted-ep");
}

#[test]
fn shutdown_fails_waiters_and_refuses_new_requests() {
    let mut pc = cache(2, 1);
    request(&mut pc, t(0), 1, IMG);
    pc.handle(t(1), Input::Shutdown);
    let r = replies(&drain(&mut pc));
    assert_eq!(r[0].1, Err(PodCacheError::ShuttingDown));
    assert_eq!(
        replies(&request(&mut pc, t(2), 2, IMG))[0].1,
        Err(PodCacheError::ShuttingDown)
    );
    assert_eq!(loads(&pc, IMG), [0]);
}

#[test]
fn invalid_images_and_duplicate_ids_get_clear_errors() {
    let mut pc = cache(2, 1);
    let e = replies(&request(&mut pc, t(0), 1, ""))[0]
        .1
        .clone()
        .unwrap_err();
    assert_eq!(e.class(), ErrorClass::InvalidArgument);
    request(&mut pc, t(0), 2, IMG);
    let e = replies(&request(&mut pc, t(0), 2, IMG))[0]
        .1
        .clone()
        .unwrap_err();
    assert_eq!(
        e,
        PodCacheError::DuplicateRequest {
            request: RequestId(2)
        }
    );
}

#[test]
fn expired_idle_pods_are_not_handed_out() {
    let mut pc = cache(2, 1);
    let c = warm(&mut pc);
    let reclaim = pc.slots_for(IMG).next().unwrap().reclaim_after;
    let cmds = request(&mut pc, reclaim, 2, IMG);
    let new = created(&cmds);
    assert_eq!(
        new.len(),
        1,
        "another replica's GC may be deleting the old pod"
    );
    assert_ne!(new[0].pod_name, c.pod_name);
}

/// The policy of `pc` with `entry` as the only per-function entry.
fn policy_with(pc: &PodCache, entry: Option<PodCacheConfigEntry>) -> PodCachePolicy {
    let config = PodCacheConfig {
        entries: entry.into_iter().collect(),
        ..PodCacheConfig::default()
    };
    pc.policy().clone().with_config(&config)
}

fn entry(ttl: Duration, max_pods: u32, source: &str) -> PodCacheConfigEntry {
    PodCacheConfigEntry {
        name: IMG.to_string(),
        ttl: Some(ttl),
        max_parallel_pods: Some(max_pods),
        source: Some(source.to_string()),
        ..PodCacheConfigEntry::default()
    }
}

// FunctionConfig generation: new TTL and limits apply to the running pods,
// which keep serving.
#[test]
fn new_limits_apply_to_existing_pods() {
    let mut pc = cache(2, 1);
    let source = "FunctionConfig f";
    pc.handle(
        t(0),
        Input::PolicyChanged {
            policy: Box::new(policy_with(&pc, Some(entry(TTL, 1, source)))),
        },
    );
    let first = warm(&mut pc);
    assert_eq!(first.settings.source.as_deref(), Some(source));
    pc.handle(
        t(3),
        Input::PolicyChanged {
            policy: Box::new(policy_with(&pc, Some(entry(TTL * 2, 3, source)))),
        },
    );
    let cmds = drain(&mut pc);
    assert!(deleted(&cmds).is_empty(), "{cmds:?}");
    // The pod keeps serving; the third request scales out to the new limit.
    for id in 10..12 {
        let cmds = request(&mut pc, t(4), id, IMG);
        assert!(created(&cmds).is_empty());
        assert_eq!(
            replies(&cmds)[0].1.as_ref().unwrap().pod_name,
            first.pod_name
        );
    }
    let cmds = request(&mut pc, t(4), 12, IMG);
    let more = created(&cmds);
    assert_eq!(more.len(), 1, "{cmds:?}");
    assert_eq!(more[0].settings.ttl, TTL * 2);
    assert_eq!(more[0].settings.max_parallel_pods, 3);
}

// FunctionConfig generation: a changed pod shape (or a deleted object)
// gives the function new pods; the old ones take no new call (idle ones at
// once, busy ones when their calls end) and are left to GC, since another
// replica may still use them; GC reclaims them once their reclaim-after
// passes, which nothing extends any more.
#[test]
fn pods_of_outdated_settings_take_no_new_calls_and_go_to_gc() {
    let mut pc = cache(2, 2);
    let configured = PodCacheConfigEntry {
        max_waitlist: Some(1),
        ..entry(TTL, 2, "FunctionConfig f")
    };
    pc.handle(
        t(0),
        Input::PolicyChanged {
            policy: Box::new(policy_with(&pc, Some(configured))),
        },
    );
    let idle = warm(&mut pc);
    // A second pod, busy with request 5.
    let cmds = request(&mut pc, t(3), 4, IMG);
    assert!(created(&cmds).is_empty());
    let busy = created(&request(&mut pc, t(3), 5, IMG));
    assert_eq!(busy.len(), 1, "load 1 on the first pod scales out");
    ready(&mut pc, t(4), busy[0].slot);
    pc.handle(
        t(4),
        Input::CallFinished {
            request: RequestId(4),
        },
    );
    drain(&mut pc);
    // The FunctionConfig is deleted.
    pc.handle(
        t(5),
        Input::PolicyChanged {
            policy: Box::new(policy_with(&pc, None)),
        },
    );
    let cmds = drain(&mut pc);
    assert!(deleted(&cmds).is_empty(), "{cmds:?}");
    let names = |pc: &PodCache| {
        let mut v: Vec<String> = pc.slots().map(|s| s.pod_name.to_string()).collect();
        v.sort();
        v
    };
    assert_eq!(
        names(&pc),
        [busy[0].pod_name.clone()],
        "the idle pod is retired"
    );
    // A new call does not go to the busy outdated pod.
    let cmds = request(&mut pc, t(6), 6, IMG);
    let fresh = created(&cmds);
    assert_eq!(fresh.len(), 1, "{cmds:?}");
    assert_eq!(fresh[0].settings.source, None);
    // The busy one is retired when its call ends.
    pc.handle(
        t(7),
        Input::CallFinished {
            request: RequestId(5),
        },
    );
    assert!(deleted(&drain(&mut pc)).is_empty());
    assert_eq!(names(&pc), [fresh[0].pod_name.clone()]);
    ready(&mut pc, t(8), fresh[0].slot);
    // GC reclaims both once their reclaim-after has passed.
    let late = t(7) + TTL * 2;
    let obs: Vec<ObservedPod> = [&idle.pod_name, &busy[0].pod_name]
        .into_iter()
        .map(|n| {
            observed(
                n,
                Some(&(t(7) + TTL + TTL / 2).to_annotation()),
                ObservedPhase::Ready {
                    endpoint: "ep".into(),
                },
            )
        })
        .collect();
    let mut gone = deleted(&gc(&mut pc, late, obs));
    gone.sort();
    let mut want = vec![idle.pod_name.clone(), busy[0].pod_name.clone()];
    want.sort();
    assert_eq!(gone, want);
}

// A lowered pod limit retires idle pods beyond it; calls keep being served.
#[test]
fn a_lowered_limit_retires_surplus_pods() {
    let mut pc = cache(1, 2);
    let first = created(&request(&mut pc, t(0), 1, IMG));
    let second = created(&request(&mut pc, t(0), 2, IMG));
    assert_eq!((first.len(), second.len()), (1, 1));
    ready(&mut pc, t(1), first[0].slot);
    ready(&mut pc, t(1), second[0].slot);
    pc.handle(
        t(2),
        Input::CallFinished {
            request: RequestId(1),
        },
    );
    drain(&mut pc);
    let mut lowered = entry(TTL, 1, "FunctionConfig f");
    lowered.source = None;
    pc.handle(
        t(3),
        Input::PolicyChanged {
            policy: Box::new(policy_with(&pc, Some(lowered))),
        },
    );
    assert!(deleted(&drain(&mut pc)).is_empty());
    assert_eq!(
        pc.slots_for(IMG).count(),
        1,
        "the idle surplus pod is retired"
    );
    let cmds = request(&mut pc, t(4), 3, IMG);
    assert!(created(&cmds).is_empty());
    assert_eq!(
        replies(&cmds)[0].1.as_ref().unwrap().pod_name,
        second[0].pod_name
    );
}

// Pods record the settings version they were built with; adoption takes
// only pods built with the function's current settings (a restarted runner
// never adopts a pod whose FunctionConfig overrides have changed since).
#[test]
fn adoption_requires_the_current_settings_version() {
    let mut pc = cache(2, 2);
    let configured = entry(TTL, 2, "FunctionConfig f");
    pc.handle(
        t(0),
        Input::PolicyChanged {
            policy: Box::new(policy_with(&pc, Some(configured))),
        },
    );
    let version = pc.policy().settings_for(IMG).pod_version();
    assert!(
        version.as_deref().is_some_and(|v| v.len() == 16),
        "{version:?}"
    );
    let annotation = (t(0) + TTL).to_annotation();
    let pod = |name: &str, settings_version: Option<String>| ObservedPod {
        settings_version,
        ..observed(
            name,
            Some(&annotation),
            ObservedPhase::Ready {
                endpoint: "ep".into(),
            },
        )
    };
    pc.handle(
        t(1),
        Input::Adopt {
            observed: vec![
                Arc::new(pod("global", None)),
                Arc::new(pod("current", version.clone())),
            ],
        },
    );
    let names: Vec<&str> = pc.slots().map(|s| s.pod_name).collect();
    assert_eq!(names, ["current"]);
    let c = created(&request(&mut pc, t(2), 1, IMG));
    assert!(c.is_empty(), "the adopted pod serves");
    // New pods carry the version.
    let mut pc = cache(1, 2);
    pc.handle(
        t(0),
        Input::PolicyChanged {
            policy: Box::new(policy_with(&pc, Some(entry(TTL, 2, "FunctionConfig f")))),
        },
    );
    let c = created(&request(&mut pc, t(0), 1, IMG)).remove(0);
    assert_eq!(c.settings_version, version);
    assert_eq!(FunctionSettings::default().pod_version(), None);
}

/// Replica A's view of a pod created at t(0) (TTL 600 s: reclaim-after
/// t(900)), in use from t(1) with its creation persisted.
fn busy(pc: &mut PodCache) -> PodCreation {
    let c = created(&request(pc, t(0), 1, IMG)).remove(0);
    ready(pc, t(1), c.slot);
    c
}

// Persist before extend (failure mode: reclaim-after lost on a failed patch): a
// use that needs an extension counts on it only once the patch succeeded.
// While the patch fails the pod takes new calls only until its old
// reclaim-after is within the reuse margin; the patch is retried with
// backoff while the pod is in use.
#[test]
fn a_failed_patch_extends_nothing_and_is_retried() {
    let mut policy = test_policy(5, 1);
    policy.scan_interval = Duration::ZERO;
    let mut pc = PodCache::new(policy, "v1");
    let c = busy(&mut pc);
    assert_eq!(pc.slots().next().unwrap().reclaim_after, t(900));
    // A use at t(400): less than a TTL ahead, so it is extended.
    let cmds = request(&mut pc, t(400), 2, IMG);
    let want = persisted(&cmds);
    assert_eq!(want, [(c.pod_name.clone(), t(400) + TTL + TTL / 2)]);
    pc.handle(
        t(401),
        Input::Persisted {
            pod_name: c.pod_name.clone(),
            reclaim_after: want[0].1,
            result: Err(PersistFailure::Platform("connection refused".into())),
        },
    );
    assert!(drain(&mut pc).is_empty());
    assert_eq!(
        pc.slots().next().unwrap().reclaim_after,
        t(900),
        "nothing on the pod says t(1300)"
    );
    // Retried after the backoff (1 s), while the pod is in use.
    pc.handle(t(401), Input::Tick);
    assert!(persisted(&drain(&mut pc)).is_empty());
    assert_eq!(pc.poll_timeout(), Some(t(402)));
    pc.handle(t(402), Input::Tick);
    let retry = persisted(&drain(&mut pc));
    assert_eq!(retry.len(), 1, "{retry:?}");
    // It fails again: the next retry waits twice as long.
    pc.handle(
        t(403),
        Input::Persisted {
            pod_name: c.pod_name.clone(),
            reclaim_after: retry[0].1,
            result: Err(PersistFailure::Platform("connection refused".into())),
        },
    );
    drain(&mut pc);
    // Meanwhile the pod takes calls until t(900) - 30 s, not after.
    let r = replies(&request(&mut pc, t(869), 3, IMG));
    assert_eq!(r[0].1.as_ref().unwrap().pod_name, c.pod_name);
    let cmds = request(&mut pc, t(870), 4, IMG);
    let refused = replies(&cmds);
    assert_eq!(
        refused[0].1.clone().unwrap_err().class(),
        ErrorClass::ResourceExhausted,
        "at the pod limit, no call goes to a pod that may be reclaimed: {cmds:?}"
    );
    assert!(created(&cmds).is_empty());
    // Once a retry succeeds the slot counts on it.
    pc.handle(t(880), Input::Tick);
    let retry = persisted(&drain(&mut pc));
    assert_eq!(retry.len(), 1);
    pc.handle(
        t(880),
        Input::Persisted {
            pod_name: c.pod_name.clone(),
            reclaim_after: retry[0].1,
            result: Ok(()),
        },
    );
    drain(&mut pc);
    assert!(pc.slots().next().unwrap().reclaim_after >= t(880) + TTL);
}

// Listing age (failure mode: GC acts on a stale listing): a listing is judged by
// the time it was asked for. Replica B lists at t(895), before A's
// extension lands; the listing arrives at t(940), after the old
// reclaim-after t(900) has passed: B deletes nothing.
// Names come back (failure mode: a pool pod deleted and created again under
// its name between this replica's reads and its patch, so the extension
// lands on the other pod): the patch carries the UID of the pod the slot
// uses, and the API server's refusal ends the slot instead of being retried
// or counted on.
#[test]
fn a_patch_refused_for_another_pod_of_the_name_ends_the_slot() {
    let mut policy = test_policy(5, 1);
    policy.scan_interval = Duration::ZERO;
    let mut pc = PodCache::new(policy, "v1");
    let c = busy(&mut pc);
    let cmds = request(&mut pc, t(400), 2, IMG);
    let (pod_name, uid, reclaim_after) = cmds
        .iter()
        .find_map(|c| match c {
            Command::PersistReclaimAfter {
                pod_name,
                uid,
                reclaim_after,
            } => Some((pod_name.clone(), uid.clone(), *reclaim_after)),
            _ => None,
        })
        .expect("a use less than a TTL ahead extends");
    assert_eq!(pod_name, c.pod_name);
    assert_eq!(
        uid.as_deref(),
        Some(format!("uid-{}", c.pod_name).as_str()),
        "the patch names the incarnation the slot uses"
    );
    pc.handle(
        t(401),
        Input::Persisted {
            pod_name,
            reclaim_after,
            result: Err(PersistFailure::NotThePod("UID differs".into())),
        },
    );
    let cmds = drain(&mut pc);
    assert!(
        pc.slots().all(|s| s.pod_name != c.pod_name),
        "no slot counts on the name any more: {:?}",
        pc.slots().collect::<Vec<_>>()
    );
    assert!(
        persisted(&cmds).is_empty() && deleted(&cmds).is_empty(),
        "{cmds:?}"
    );
    // Never retried, and the next request gets a pod of its own.
    pc.handle(t(402), Input::Tick);
    assert!(persisted(&drain(&mut pc)).is_empty());
    let cmds = request(&mut pc, t(403), 3, IMG);
    assert_eq!(created(&cmds).len(), 1, "{cmds:?}");
}

// Names come back (failure mode: a late listing shows the failed previous
// pod of a name whose current pod serves calls): the failed pod is deleted
// by its own UID, never by the UID of the pod the slot uses.
#[test]
fn a_listed_failure_of_another_pod_of_the_name_deletes_only_that_pod() {
    let mut pc = cache(5, 1);
    let c = busy(&mut pc);
    let previous = ObservedPod {
        uid: Some("uid-previous".into()),
        ..observed(
            &c.pod_name,
            Some("1000900"),
            ObservedPhase::Failed {
                reason: "pod phase Failed".into(),
            },
        )
    };
    let cmds = gc(&mut pc, t(10), vec![previous]);
    let uids: Vec<_> = cmds
        .iter()
        .filter_map(|c| match c {
            Command::DeletePod { precondition, .. } => Some(precondition.uid.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(uids, [Some("uid-previous".to_string())], "{cmds:?}");
}

#[test]
fn gc_judges_a_listing_by_the_time_it_was_asked_for() {
    let mut b = cache(2, 1);
    b.handle(t(0), Input::Tick);
    let pod = observed(
        "a-pod-of-another-replica",
        Some(&t(900).to_annotation()),
        ObservedPhase::Ready {
            endpoint: "ep".into(),
        },
    );
    let late = gc_listing(&mut b, t(895), t(940), vec![pod.clone()], Vec::new());
    assert!(deleted(&late).is_empty(), "{late:?}");
    // A listing asked for after t(900) with the same annotation deletes it.
    let fresh = gc_listing(&mut b, t(941), t(941), vec![pod], Vec::new());
    assert_eq!(deleted(&fresh), ["a-pod-of-another-replica"]);
}

// A listing that is not the one out (an old answer) is ignored, and only
// one listing is out at a time.
#[test]
fn one_listing_at_a_time() {
    let mut pc = cache(2, 1);
    pc.handle(t(0), Input::Tick);
    pc.handle(t(5), Input::Tick);
    let first: Vec<_> = drain(&mut pc)
        .into_iter()
        .filter(|c| matches!(c, Command::ListPods { .. }))
        .collect();
    assert_eq!(first.len(), 1);
    assert!(pc.listing_out().is_some());
    pc.handle(t(10), Input::Tick);
    assert!(
        !drain(&mut pc)
            .iter()
            .any(|c| matches!(c, Command::ListPods { .. })),
        "no second listing while one is out"
    );
    pc.handle(
        t(11),
        Input::Listed {
            listing: ListingId(99),
            result: Ok(Listing::default()),
        },
    );
    assert!(
        pc.listing_out().is_some(),
        "an unknown listing changes nothing"
    );
    pc.handle(
        t(11),
        Input::Listed {
            listing: ListingId(1),
            result: Err("timeout".into()),
        },
    );
    assert_eq!(pc.listing_out(), None);
}

// Drain before delete (failure mode: one failed call deletes a pod carrying other
// calls): a call that finds its pod unavailable deletes nothing; the pod
// takes no new call here, the next request gets another pod, and once the
// last call here has ended the pod is forgotten (left to GC by its
// annotation, since calls of other replicas may be in it).
#[test]
fn an_unavailable_pod_is_drained_not_deleted() {
    let mut pc = cache(5, 2);
    let c = busy(&mut pc);
    request(&mut pc, t(2), 2, IMG);
    assert_eq!(loads(&pc, IMG), [2]);
    pc.handle(
        t(3),
        Input::CallUnavailable {
            request: RequestId(1),
        },
    );
    let cmds = drain(&mut pc);
    assert!(deleted(&cmds).is_empty(), "{cmds:?}");
    assert!(
        pc.slots()
            .any(|s| s.pod_name == c.pod_name && s.state == SlotState::Draining && s.load == 1)
    );
    let next = created(&request(&mut pc, t(4), 3, IMG));
    assert_eq!(next.len(), 1, "a new pod for the next call");
    assert_ne!(next[0].pod_name, c.pod_name);
    let cmds = finish(&mut pc, t(5), 2);
    assert!(deleted(&cmds).is_empty());
    assert_eq!(
        cmds,
        [Command::Forget {
            pod_name: c.pod_name.clone()
        }]
    );
    assert!(pc.slots().all(|s| s.pod_name != c.pod_name));
    // GC reclaims it by its annotation like any idle pod.
    let obs = observed(
        &c.pod_name,
        Some(&t(900).to_annotation()),
        ObservedPhase::Ready {
            endpoint: "ep".into(),
        },
    );
    let gone = deleted(&gc(&mut pc, t(900), vec![obs]));
    assert!(gone.contains(&c.pod_name), "{gone:?}");
}

// Resync (failure mode: deletions missed during a watch outage): a pod known
// before the watch was lost and missing from its re-list was deleted; its
// slot is dropped and its waiters move on. A listing taken before the pod
// was known proves nothing.
#[test]
fn a_relist_without_the_pod_drops_its_slot() {
    let mut pc = cache(5, 1);
    let c = busy(&mut pc);
    pc.handle(
        t(5),
        Input::Resync {
            observed: Vec::new(),
            since: t(0),
        },
    );
    assert!(
        pc.slots().count() == 1,
        "known at t(1), after the listing began"
    );
    pc.handle(
        t(20),
        Input::Resync {
            observed: Vec::new(),
            since: t(10),
        },
    );
    let cmds = drain(&mut pc);
    assert!(deleted(&cmds).is_empty());
    assert_eq!(pc.slots().count(), 0);
    let next = created(&request(&mut pc, t(21), 2, IMG));
    assert_eq!(next.len(), 1);
    assert_ne!(next[0].pod_name, c.pod_name);
}

// The same through GC: a listing asked for after the slot was known.
#[test]
fn gc_drops_slots_whose_pod_is_not_listed() {
    let mut pc = cache(5, 1);
    let waiting = created(&request(&mut pc, t(0), 1, IMG)).remove(0);
    pc.handle(
        t(1),
        Input::Created {
            slot: waiting.slot,
            result: Ok(()),
        },
    );
    request(&mut pc, t(2), 2, IMG);
    let cmds = gc(&mut pc, t(3), Vec::new());
    let r = replies(&cmds);
    assert_eq!(r.len(), 2, "both waiters are told: {cmds:?}");
    assert!(r.iter().all(|(_, res)| res.is_err()));
    assert_eq!(pc.slots().count(), 0);
}

// Naming (failure mode: a failed start-up listing must not make a creation
// silently reuse an existing pod): an existing pod of the chosen name is
// taken as this creation's only if it carries this creation's identity;
// otherwise another name is picked, and the foreign pod is never deleted.
#[test]
fn already_exists_is_ours_only_with_our_creation_identity() {
    let mut pc = cache(2, 1);
    let c = created(&request(&mut pc, t(0), 1, IMG)).remove(0);
    assert_eq!(c.creation, format!("r1-{}", c.slot.0));
    let foreign = ObservedPod {
        creation: Some("someone-else-1".into()),
        ..seen(
            &c.pod_name,
            ObservedPhase::Ready {
                endpoint: "ep".into(),
            },
        )
    };
    pc.handle(
        t(1),
        Input::Created {
            slot: c.slot,
            result: Err(CreateFailure::AlreadyExists {
                existing: Some(Box::new(foreign)),
            }),
        },
    );
    let cmds = drain(&mut pc);
    assert!(deleted(&cmds).is_empty());
    assert!(replies(&cmds).is_empty(), "the waiter keeps waiting");
    let again = created(&cmds);
    assert_eq!(again.len(), 1);
    assert_eq!(again[0].slot, c.slot);
    assert_ne!(again[0].pod_name, c.pod_name);
    // An earlier attempt of this creation whose answer was lost: ours.
    let mine = ObservedPod {
        creation: Some(again[0].creation.clone()),
        ..seen(&again[0].pod_name, ObservedPhase::Pending)
    };
    pc.handle(
        t(2),
        Input::Created {
            slot: c.slot,
            result: Err(CreateFailure::AlreadyExists {
                existing: Some(Box::new(mine)),
            }),
        },
    );
    assert_eq!(
        drain(&mut pc),
        [Command::EnsureService {
            pod_name: again[0].pod_name.clone()
        }]
    );
    let endpoint = "ep-mine".to_string();
    let pod = seen(&again[0].pod_name, ObservedPhase::Ready { endpoint });
    pc.handle(t(3), Input::PodObserved { pod });
    let r = replies(&drain(&mut pc));
    assert_eq!(r[0].1.as_ref().unwrap().endpoint, "ep-mine");
}

// A failed deletion is retried with backoff; a precondition that no
// longer holds is not (the next GC decides on a fresh listing). Pods in
// phase Failed are deleted by GC whoever made them.
#[test]
fn failed_deletions_are_retried() {
    let mut pc = cache(2, 1);
    let c = busy(&mut pc);
    let failed_pod = seen(
        &c.pod_name,
        ObservedPhase::Failed {
            reason: "pod phase Failed".into(),
        },
    );
    pc.handle(t(2), Input::PodObserved { pod: failed_pod });
    let cmds = drain(&mut pc);
    assert_eq!(deleted(&cmds), std::slice::from_ref(&c.pod_name));
    pc.handle(
        t(3),
        Input::Deleted {
            pod_name: c.pod_name.clone(),
            result: Err(DeleteFailure::Failed {
                reason: "timeout".into(),
            }),
        },
    );
    assert!(drain(&mut pc).is_empty());
    pc.handle(t(4), Input::Tick);
    assert_eq!(deleted(&drain(&mut pc)), std::slice::from_ref(&c.pod_name));
    pc.handle(
        t(4),
        Input::Deleted {
            pod_name: c.pod_name.clone(),
            result: Err(DeleteFailure::Conflict),
        },
    );
    assert!(deleted(&gc(&mut pc, t(100), Vec::new())).is_empty());
    // GC deletes Failed pods it finds, local or not.
    let other = observed(
        "failed-elsewhere",
        Some(&t(5000).to_annotation()),
        ObservedPhase::Failed {
            reason: "OOMKilled".into(),
        },
    );
    assert_eq!(
        deleted(&gc(&mut pc, t(101), vec![other])),
        ["failed-elsewhere"]
    );
}

// Orphan services: a function service whose pod is not listed is deleted;
// one whose pod is listed, or is being created here, is not; other
// services never are.
#[test]
fn gc_deletes_function_services_whose_pod_is_gone() {
    let mut pc = cache(2, 1);
    let c = created(&request(&mut pc, t(0), 1, IMG)).remove(0);
    let svc = |name: &str, ours: bool| ObservedService {
        name: name.into(),
        selects_own_pod: ours,
    };
    let listed = observed(
        "alive",
        Some(&t(5000).to_annotation()),
        ObservedPhase::Pending,
    );
    let cmds = gc_listing(
        &mut pc,
        t(2),
        t(2),
        vec![listed],
        vec![
            svc("alive", true),
            svc("orphan", true),
            svc(&c.pod_name, true),
            svc("other-service", false),
        ],
    );
    let gone: Vec<&str> = cmds
        .iter()
        .filter_map(|c| match c {
            Command::DeleteService { name } => Some(name.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(gone, ["orphan"]);
}

// Creation sub-states in service mode: the pod must be created, observed
// ready and published by its service before the waiters get it, in
// whatever order the watch and the answers arrive.
#[test]
fn in_service_mode_a_ready_pod_waits_for_its_endpoint() {
    let mut policy = test_policy(2, 1);
    policy.await_endpoints = true;
    let mut pc = PodCache::new(policy, "v1");
    let c = created(&request(&mut pc, t(0), 1, IMG)).remove(0);
    // The watch reports it ready before the creation's answer.
    let ready_pod = ObservedPod {
        ip: Some("10.0.0.9".into()),
        ..seen(
            &c.pod_name,
            ObservedPhase::Ready {
                endpoint: "ep".into(),
            },
        )
    };
    pc.handle(t(1), Input::PodObserved { pod: ready_pod });
    assert!(drain(&mut pc).is_empty());
    pc.handle(
        t(2),
        Input::Created {
            slot: c.slot,
            result: Ok(()),
        },
    );
    assert_eq!(
        drain(&mut pc),
        [Command::AwaitEndpoint {
            slot: c.slot,
            pod_name: c.pod_name.clone(),
            pod_ip: Some("10.0.0.9".into()),
            deadline: c.deadline,
        }]
    );
    assert_eq!(pc.slots().next().unwrap().state, SlotState::Pending);
    pc.handle(
        t(3),
        Input::EndpointReady {
            slot: c.slot,
            result: Ok("svc-ep".into()),
        },
    );
    let r = replies(&drain(&mut pc));
    assert_eq!(r[0].1.as_ref().unwrap().endpoint, "svc-ep");
}

// A busy pod's reclaim-after is renewed when it becomes less than a TTL
// ahead, on a timer the machine asks for, without the driver ticking
// periodically.
#[test]
fn busy_pods_are_renewed_on_their_own_timer() {
    let mut policy = test_policy(2, 1);
    policy.scan_interval = Duration::ZERO;
    let mut pc = PodCache::new(policy, "v1");
    let c = busy(&mut pc);
    let deadline_tick = pc.poll_timeout();
    assert_eq!(deadline_tick, Some(t(60)), "the stale creation deadline");
    pc.handle(t(60), Input::Tick);
    drain(&mut pc);
    // Created at t(0): reclaim-after t(900); due for renewal at t(300).
    assert_eq!(pc.poll_timeout(), Some(t(300)));
    pc.handle(t(300), Input::Tick);
    let p = persisted(&drain(&mut pc));
    assert_eq!(p, [(c.pod_name.clone(), t(300) + TTL + TTL / 2)]);
    ack(
        &mut pc,
        t(301),
        &[Command::PersistReclaimAfter {
            pod_name: c.pod_name,
            uid: None,
            reclaim_after: p[0].1,
        }],
    );
    assert_eq!(pc.poll_timeout(), Some(p[0].1.saturating_sub(TTL)));
}

// A creation given up (its pod not ready by the deadline) whose pod another
// replica adopted and claimed before the deletion read it: the claim wrote
// a later reclaim-after than the creation's, so the deletion's read sees
// the pod is no longer only this creation's and deletes nothing.
#[test]
fn a_creation_given_up_never_deletes_a_pod_another_replica_claimed() {
    let mut policy = test_policy(2, 1);
    policy.scan_interval = Duration::ZERO;
    let mut a = PodCache::new(policy, "v1");
    let c = created(&request(&mut a, t(0), 1, IMG)).remove(0);
    a.handle(
        t(1),
        Input::Created {
            slot: c.slot,
            result: Ok(()),
        },
    );
    drain(&mut a);
    // Replica B adopts the pod, ready, as soon as it sees it, and claims
    // it: the claim writes a later value than the one on the pod even
    // when the pod's is as far ahead as a fresh extension.
    let mut b = cache(2, 1);
    let mut pod = observed(
        &c.pod_name,
        Some(&c.reclaim_after.to_annotation()),
        ObservedPhase::Ready {
            endpoint: "ep".into(),
        },
    );
    pod.creation = Some(c.creation.clone());
    b.handle(
        t(0),
        Input::Adopt {
            observed: vec![Arc::new(pod.clone())],
        },
    );
    let claim = persisted(&drain(&mut b));
    assert_eq!(claim.len(), 1);
    assert!(claim[0].1 > c.reclaim_after, "{claim:?} vs {c:?}");
    // A gives the creation up: its deletion is conditional on the pod
    // still carrying the creation's own reclaim-after.
    a.handle(t(60), Input::Tick);
    let cmds = drain(&mut a);
    let precondition = cmds
        .iter()
        .find_map(|cmd| match cmd {
            Command::DeletePod { precondition, .. } => Some(precondition.clone()),
            _ => None,
        })
        .expect("the creation's pod is deleted");
    assert_eq!(precondition.reclaim_after, Some(c.reclaim_after));
    assert!(precondition.creation_holds(&c.creation, &pod));
    let claimed = ObservedPod {
        reclaim_after: Some(claim[0].1.to_annotation()),
        ..pod
    };
    assert!(
        !precondition.creation_holds(&c.creation, &claimed),
        "a claimed pod is not deleted"
    );
}

/// A cache of replica `token` whose IMG has a warm pool of `min..=max`.
fn pool_cache(token: &str, min: u32, max: u32) -> PodCache {
    let mut p = PodCachePolicy::new(settings(1, 1), token).unwrap();
    p.scan_interval = Duration::from_secs(1);
    let entry = PodCacheConfigEntry {
        name: IMG.to_string(),
        min_ready: Some(min),
        max_pods: Some(max),
        ..PodCacheConfigEntry::default()
    };
    let config = PodCacheConfig {
        entries: vec![entry],
        ..PodCacheConfig::default()
    };
    PodCache::new(p.with_config(&config), "v1")
}

fn pool_name(index: u32) -> String {
    naming::pool_pod_name(IMG, &naming::pool_key("v1", None), index)
}

// Without minReady or maxPods a function has no pool: Porch's names,
// limits and warm-up of one pod.
#[test]
fn without_a_pool_nothing_changes() {
    let mut pc = cache(1, 2);
    pc.handle(
        t(0),
        Input::WarmUp {
            images: vec![IMG.into()],
        },
    );
    let c = created(&drain(&mut pc));
    assert_eq!(c.len(), 1);
    assert!(!naming::is_pool_name(&c[0].pod_name), "{}", c[0].pod_name);
    assert_eq!(FunctionSettings::default().pool(), None);
}

// Warm-up of a pool creates its minimum under names every replica shares:
// a second replica creating the same names is answered AlreadyExists and
// joins the first's pods instead of making more.
#[test]
fn replicas_share_the_pool_names_and_join_each_others_pods() {
    let (mut a, mut b) = (pool_cache("ra", 2, 3), pool_cache("rb", 2, 3));
    let warm_up = Input::WarmUp {
        images: vec![IMG.into()],
    };
    a.handle(t(0), warm_up.clone());
    b.handle(t(0), warm_up);
    let (ca, cb) = (created(&drain(&mut a)), created(&drain(&mut b)));
    let names = |c: &[PodCreation]| c.iter().map(|p| p.pod_name.clone()).collect::<Vec<_>>();
    assert_eq!(names(&ca), vec![pool_name(0), pool_name(1)]);
    assert_eq!(names(&ca), names(&cb), "same names on both replicas");
    // a's creations succeed and its pods get ready; b's are answered
    // AlreadyExists with a's pods.
    for c in &ca {
        ready(&mut a, t(1), c.slot);
    }
    for (i, c) in cb.iter().enumerate() {
        let existing = ObservedPod {
            creation: Some(ca[i].creation.clone()),
            reclaim_after: Some(ca[i].reclaim_after.to_annotation()),
            ..seen(
                &c.pod_name,
                ObservedPhase::Ready {
                    endpoint: format!("ep-a{i}"),
                },
            )
        };
        b.handle(
            t(1),
            Input::Created {
                slot: c.slot,
                result: Err(CreateFailure::AlreadyExists {
                    existing: Some(Box::new(existing)),
                }),
            },
        );
        let cmds = drain(&mut b);
        assert!(deleted(&cmds).is_empty(), "a joined pod is never deleted");
        assert!(created(&cmds).is_empty(), "no other name is tried");
        // The join is a claim: a later reclaim-after before any call.
        let claim = persisted(&cmds);
        assert_eq!(claim.len(), 1, "{cmds:?}");
        ack(&mut b, t(1), &cmds);
    }
    assert_eq!(
        b.slots_for(IMG)
            .filter(|s| s.state == SlotState::Ready)
            .count(),
        2
    );
    // A request on b runs on a shared pod: no new pod.
    let cmds = request(&mut b, t(2), 1, IMG);
    assert!(created(&cmds).is_empty());
    assert!(matches!(&replies(&cmds)[..], [(1, Ok(_))]));
}

// The pool's maximum bounds its pods: with all three names busy, a fourth
// request waits on a pod, like one at today's per-function limit.
#[test]
fn requests_beyond_max_pods_wait() {
    let mut pc = pool_cache("r1", 0, 3);
    let mut slots = Vec::new();
    for id in 1..=3 {
        let c = created(&request(&mut pc, t(0), id, IMG));
        assert_eq!(c.len(), 1, "request {id}");
        assert_eq!(c[0].pod_name, pool_name(id as u32 - 1));
        slots.push(c[0].slot);
    }
    let cmds = request(&mut pc, t(0), 4, IMG);
    assert!(created(&cmds).is_empty(), "{cmds:?}");
    assert!(replies(&cmds).is_empty(), "waits on a pending pod");
    assert_eq!(pc.slots_for(IMG).count(), 3);
    assert_eq!(loads(&pc, IMG).iter().sum::<u32>(), 4);
}

// GC reclaims idle expired pods of a pool only while the pool keeps more
// than its minimum, highest index first; warm pods (below the minimum) it
// claims instead.
#[test]
fn gc_reclaims_a_pool_only_above_its_minimum() {
    let mut pc = pool_cache("r1", 2, 4);
    pc.handle(t(0), Input::Tick);
    drain(&mut pc);
    let expired = Some("1000000");
    let listed = |n: u32| {
        (0..n)
            .map(|i| {
                observed(
                    &pool_name(i),
                    expired,
                    ObservedPhase::Ready {
                        endpoint: format!("ep{i}"),
                    },
                )
            })
            .collect::<Vec<_>>()
    };
    let cmds = gc(&mut pc, t(5), listed(4));
    let mut gone = deleted(&cmds);
    gone.sort();
    assert_eq!(gone, vec![pool_name(2), pool_name(3)], "{cmds:?}");
    // The warm ones are claimed (a later reclaim-after), not deleted.
    let claimed: Vec<String> = persisted(&cmds).into_iter().map(|(n, _)| n).collect();
    assert_eq!(claimed, vec![pool_name(0), pool_name(1)]);

    let mut pc = pool_cache("r2", 2, 4);
    pc.handle(t(0), Input::Tick);
    drain(&mut pc);
    // Two left, one of them beyond the minimum's names: kept all the same.
    let two = vec![
        observed(
            &pool_name(1),
            expired,
            ObservedPhase::Ready {
                endpoint: "ep1".into(),
            },
        ),
        observed(
            &pool_name(3),
            expired,
            ObservedPhase::Ready {
                endpoint: "ep3".into(),
            },
        ),
    ];
    let cmds = gc(&mut pc, t(5), two);
    assert!(deleted(&cmds).is_empty(), "{cmds:?}");
    // And the missing warm pod is created.
    let made: Vec<String> = created(&cmds).into_iter().map(|c| c.pod_name).collect();
    assert_eq!(made, vec![pool_name(0)]);
}

// A warm pod deleted behind the cache's back is created again at once.
#[test]
fn a_deleted_warm_pod_is_restored() {
    let mut pc = pool_cache("r1", 1, 2);
    pc.handle(
        t(0),
        Input::WarmUp {
            images: vec![IMG.into()],
        },
    );
    let c = created(&drain(&mut pc)).remove(0);
    let cmds = ready(&mut pc, t(1), c.slot);
    ack(&mut pc, t(1), &cmds);
    pc.handle(
        t(2),
        Input::PodDeleted {
            pod_name: c.pod_name.clone(),
        },
    );
    let again = created(&drain(&mut pc));
    assert_eq!(again.len(), 1);
    assert_eq!(again[0].pod_name, c.pod_name);
    assert_ne!(again[0].creation, c.creation);
}

// An idle warm pod keeps its reclaim-after ahead: it is extended once its
// reclaim-after is less than a TTL ahead, with no call in it.
#[test]
fn idle_warm_pods_are_extended() {
    let mut pc = pool_cache("r1", 1, 1);
    pc.handle(
        t(0),
        Input::WarmUp {
            images: vec![IMG.into()],
        },
    );
    let c = created(&drain(&mut pc)).remove(0);
    ready(&mut pc, t(1), c.slot);
    let until = c.reclaim_after.saturating_sub(TTL);
    let renew = pc.poll_timeout().expect("a timer");
    assert!(renew <= until, "{renew} > {until}");
    pc.handle(until, Input::Tick);
    let cmds = drain(&mut pc);
    let p = persisted(&cmds);
    assert_eq!(p.len(), 1, "{cmds:?}");
    assert!(p[0].1 > until + TTL);
}

// ---- What a real kubelet does (graceful deletion, image pull and
// container failures, readiness by probe period) ----

/// Request `id` for IMG at t(0), its pod and service created.
fn requested_and_created(pc: &mut PodCache, id: u64) -> PodCreation {
    let c = created(&request(pc, t(0), id, IMG)).remove(0);
    pc.handle(
        t(0),
        Input::Created {
            slot: c.slot,
            result: Ok(()),
        },
    );
    c
}

// A pod with a deletion timestamp (Terminating, whatever its Ready
// condition) never receives a call: the slot is dropped, the next request
// gets a new pod.
#[test]
fn a_terminating_pod_never_receives_a_call() {
    let mut pc = cache(2, 1);
    let c = warm(&mut pc);
    let pod = seen(&c.pod_name, ObservedPhase::Terminating);
    pc.handle(t(3), Input::PodObserved { pod });
    let cmds = drain(&mut pc);
    assert!(deleted(&cmds).is_empty(), "it is deleted already");
    let cmds = request(&mut pc, t(4), 2, IMG);
    assert!(replies(&cmds).is_empty(), "no call for the terminating pod");
    let next = created(&cmds);
    assert_eq!(next.len(), 1);
    assert_ne!(next[0].pod_name, c.pod_name);
}

// A pool creation whose name a terminating pod holds waits for it to go
// (watch deletion or a later listing without it), then creates the pod
// under the same name; its waiter gets that pod, not an error.
#[test]
fn a_pool_name_held_by_a_terminating_pod_is_waited_for() {
    for freed_by_listing in [false, true] {
        let mut pc = pool_cache("r1", 1, 1);
        let c = created(&request(&mut pc, t(0), 1, IMG)).remove(0);
        assert_eq!(c.pod_name, pool_name(0));
        let holder = ObservedPod {
            uid: Some("old".into()),
            ..seen(&c.pod_name, ObservedPhase::Terminating)
        };
        pc.handle(
            t(1),
            Input::Created {
                slot: c.slot,
                result: Err(CreateFailure::AlreadyExists {
                    existing: Some(Box::new(holder.clone())),
                }),
            },
        );
        let cmds = drain(&mut pc);
        assert!(replies(&cmds).is_empty(), "the waiter waits: {cmds:?}");
        assert!(
            created(&cmds).is_empty() && deleted(&cmds).is_empty(),
            "{cmds:?}"
        );
        // The holder's own changes do not end the wait.
        pc.handle(t(2), Input::PodObserved { pod: holder });
        assert!(drain(&mut pc).is_empty());
        let cmds = if freed_by_listing {
            gc(&mut pc, t(3), Vec::new())
        } else {
            pc.handle(
                t(3),
                Input::PodDeleted {
                    pod_name: c.pod_name.clone(),
                },
            );
            drain(&mut pc)
        };
        let again = created(&cmds);
        assert_eq!(again.len(), 1, "{cmds:?}");
        assert_eq!(again[0].pod_name, c.pod_name, "the same name");
        assert_eq!(again[0].slot, c.slot, "the same waiting slot");
        let cmds = ready(&mut pc, t(4), c.slot);
        let cmds = ack(&mut pc, t(4), &cmds);
        let _ = cmds;
        assert!(
            pc.request_slot(RequestId(1))
                .is_some_and(|(_, waiting)| !waiting),
            "the waiter got the new pod"
        );
    }
}

// The wait for a held name ends at the pod-ready deadline like any
// creation, without deleting the pod that holds the name.
#[test]
fn a_held_name_that_never_comes_free_times_out() {
    let mut pc = pool_cache("r1", 1, 1);
    let c = created(&request(&mut pc, t(0), 1, IMG)).remove(0);
    let holder = seen(&c.pod_name, ObservedPhase::Terminating);
    pc.handle(
        t(1),
        Input::Created {
            slot: c.slot,
            result: Err(CreateFailure::AlreadyExists {
                existing: Some(Box::new(holder)),
            }),
        },
    );
    drain(&mut pc);
    pc.handle(t(61), Input::Tick);
    let cmds = drain(&mut pc);
    assert!(deleted(&cmds).is_empty(), "{cmds:?}");
    let r = replies(&cmds);
    assert!(
        matches!(&r[..], [(1, Err(PodCacheError::CreationTimedOut { .. }))]),
        "{r:?}"
    );
}

// A kubelet failure (its status: ErrImagePull, a crash loop…) fails the
// waiters at once with the reason and deletes the pod; so does its warning,
// but only for the pod of the slot (same UID).
#[test]
fn a_pod_the_kubelet_cannot_start_fails_its_waiters_at_once() {
    for by_warning in [false, true] {
        let mut pc = cache(2, 1);
        let c = requested_and_created(&mut pc, 1);
        let pending = seen(&c.pod_name, ObservedPhase::Pending);
        pc.handle(t(1), Input::PodObserved { pod: pending });
        assert!(drain(&mut pc).is_empty());
        let reason =
            "container function (image x): ErrImagePull: not found; check that the image exists"
                .to_string();
        if by_warning {
            // Another pod of the name: ignored.
            pc.handle(
                t(2),
                Input::PodCannotStart {
                    pod_name: c.pod_name.clone(),
                    uid: Some("uid-other".into()),
                    reason: reason.clone(),
                },
            );
            assert!(drain(&mut pc).is_empty());
            pc.handle(
                t(2),
                Input::PodCannotStart {
                    pod_name: c.pod_name.clone(),
                    uid: Some(format!("uid-{}", c.pod_name)),
                    reason: reason.clone(),
                },
            );
        } else {
            let pod = seen(
                &c.pod_name,
                ObservedPhase::Failed {
                    reason: reason.clone(),
                },
            );
            pc.handle(t(2), Input::PodObserved { pod });
        }
        let cmds = drain(&mut pc);
        assert_eq!(deleted(&cmds), std::slice::from_ref(&c.pod_name));
        let r = replies(&cmds);
        let [(1, Err(e @ PodCacheError::CannotStart { .. }))] = &r[..] else {
            panic!("{r:?}");
        };
        assert_eq!(e.class(), ErrorClass::Unavailable);
        assert!(
            e.to_string()
                .contains("cannot start: container function (image x): ErrImagePull"),
            "{e}"
        );
        // The next request tries a new pod.
        assert_eq!(created(&request(&mut pc, t(3), 2, IMG)).len(), 1);
    }
}

// A warning about a ready pod changes nothing: its status decides.
#[test]
fn a_warning_about_a_ready_pod_is_left_to_its_status() {
    let mut pc = cache(2, 1);
    let c = warm(&mut pc);
    pc.handle(
        t(3),
        Input::PodCannotStart {
            pod_name: c.pod_name.clone(),
            uid: Some(format!("uid-{}", c.pod_name)),
            reason: "x".into(),
        },
    );
    assert!(drain(&mut pc).is_empty());
    assert!(matches!(
        &replies(&request(&mut pc, t(4), 2, IMG))[..],
        [(2, Ok(_))]
    ));
}

// In pod-IP mode, a starting pod is probed, once, as soon as it has an IP
// (its containers may not run yet: the probe retries until the wrapper
// answers); a SERVING answer makes it take calls before the kubelet
// reports it ready. Not in service mode (kube-proxy routes only to ready
// endpoints), and not when the policy does not ask for it.
#[test]
fn a_starting_pod_is_probed_at_its_ip_and_serves_before_the_kubelet_says_ready() {
    for (probe, await_endpoints, expect) in [
        (true, false, true),
        (false, false, false),
        (true, true, false),
    ] {
        let mut policy = test_policy(2, 1);
        policy.probe_wrapper = probe;
        policy.await_endpoints = await_endpoints;
        let mut pc = PodCache::new(policy, "v1");
        let c = requested_and_created(&mut pc, 1);
        let started = ObservedPod {
            ip: Some("10.244.0.7".into()),
            ..seen(&c.pod_name, ObservedPhase::Pending)
        };
        pc.handle(
            t(1),
            Input::PodObserved {
                pod: started.clone(),
            },
        );
        pc.handle(t(1), Input::PodObserved { pod: started });
        let cmds = drain(&mut pc);
        let probes: Vec<&Command> = cmds
            .iter()
            .filter(|c| matches!(c, Command::ProbeWrapper { .. }))
            .collect();
        if !expect {
            assert!(probes.is_empty(), "{cmds:?}");
            continue;
        }
        let [
            Command::ProbeWrapper {
                slot,
                endpoint,
                deadline,
                ..
            },
        ] = probes[..]
        else {
            panic!("one probe: {cmds:?}");
        };
        assert_eq!((slot, endpoint.as_str()), (&c.slot, "10.244.0.7:9446"));
        assert_eq!(*deadline, c.deadline);
        pc.handle(
            t(2),
            Input::WrapperServing {
                slot: c.slot,
                endpoint: endpoint.clone(),
            },
        );
        let r = replies(&drain(&mut pc));
        let [(1, Ok(a))] = &r[..] else {
            panic!("{r:?}");
        };
        assert_eq!(a.endpoint, "10.244.0.7:9446");
    }
}

// In service mode an adopted pod, once claimed, also waits for its service
// to publish it (and the driver to reach the wrapper through it) before
// its first call: a pod the kubelet reports ready is not routable through
// its ClusterIP until kube-proxy has its rules. If that never comes, the
// pod is let go, not deleted: it is not this replica's.
#[test]
fn in_service_mode_a_claimed_pod_waits_for_its_endpoint() {
    for published in [true, false] {
        let mut policy = test_policy(2, 1);
        policy.await_endpoints = true;
        let mut pc = PodCache::new(policy, "v1");
        let future = t(500).to_annotation();
        let good = observed(
            "good",
            Some(&future),
            ObservedPhase::Ready {
                endpoint: "adopted-ep".into(),
            },
        );
        pc.handle(
            t(0),
            Input::Adopt {
                observed: vec![Arc::new(good)],
            },
        );
        let cmds = drain(&mut pc);
        assert!(replies(&request(&mut pc, t(1), 1, IMG)).is_empty());
        let after_claim = ack(&mut pc, t(1), &cmds);
        let Some(Command::AwaitEndpoint { slot, pod_name, .. }) = after_claim
            .iter()
            .find(|c| matches!(c, Command::AwaitEndpoint { .. }))
            .cloned()
        else {
            panic!("the claimed pod waits for its endpoint: {after_claim:?}");
        };
        assert_eq!(pod_name, "good");
        assert!(
            replies(&after_claim).is_empty(),
            "no call before it is published"
        );
        let result = if published {
            Ok("svc-ep".to_string())
        } else {
            Err("not published".to_string())
        };
        pc.handle(t(2), Input::EndpointReady { slot, result });
        let cmds = drain(&mut pc);
        let r = replies(&cmds);
        if published {
            assert_eq!(r[0].1.as_ref().unwrap().endpoint, "svc-ep");
        } else {
            assert!(r[0].1.is_err(), "{r:?}");
            assert!(
                deleted(&cmds).is_empty(),
                "an adopted pod is never deleted for it"
            );
        }
    }
}
