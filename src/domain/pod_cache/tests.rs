//! Porch's pod-cache behaviours (spec §9.1–9.3) that still apply, and the
//! defect fixes of spec §10, as plain unit tests of the state machine.

use std::time::Duration;

use super::*;

const IMG: &str = "gcr.io/kpt-fn/apply-replacements:latest";
const TTL: Duration = Duration::from_secs(600);

fn t(secs: u64) -> UnixTime {
    UnixTime::from_secs(1_000_000 + secs)
}

fn cache(max_waitlist: u32, max_pods: u32) -> PodCache {
    let settings = FunctionSettings {
        ttl: TTL,
        max_waitlist,
        max_parallel_pods: max_pods,
        max_load_per_pod: 4,
        resources: None,
        ..FunctionSettings::default()
    };
    PodCache::new(PodCachePolicy::new(settings, "r1").unwrap(), "v1")
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
            Command::DeletePod { pod_name } => Some(pod_name.clone()),
            _ => None,
        })
        .collect()
}

fn ready(pc: &mut PodCache, now: UnixTime, slot: SlotId) -> Vec<Command> {
    pc.handle(
        now,
        Input::PodReady {
            slot,
            endpoint: format!("ep-{}", slot.0),
        },
    );
    drain(pc)
}

fn loads(pc: &PodCache, image: &str) -> Vec<u32> {
    pc.slots_for(image).map(|s| s.load).collect()
}

/// A ready pod for IMG with one request served and finished.
fn warm(pc: &mut PodCache) -> PodCreation {
    let c = created(&request(pc, t(0), 1, IMG)).remove(0);
    ready(pc, t(1), c.slot);
    pc.handle(
        t(2),
        Input::CallFinished {
            request: RequestId(1),
        },
    );
    drain(pc);
    c
}

fn observed(name: &str, reclaim_after: Option<&str>, phase: ObservedPhase) -> ObservedPod {
    ObservedPod {
        name: name.to_string(),
        image: IMG.to_string(),
        labelled: true,
        template_version: Some("v1".to_string()),
        settings_version: None,
        reclaim_after: reclaim_after.map(str::to_string),
        phase,
    }
}

// §9.1 TestEventLoop_PodReadyUnknownFunction / _PodReadyNoPendingPod: stray
// outcomes are ignored and the machine keeps serving.
#[test]
fn stray_outcomes_are_ignored() {
    let mut pc = cache(2, 1);
    assert!(ready(&mut pc, t(0), SlotId(77)).is_empty());
    pc.handle(
        t(0),
        Input::PodFailed {
            slot: SlotId(78),
            reason: "x".into(),
        },
    );
    assert!(drain(&mut pc).is_empty());
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
    pc.handle(
        t(1),
        Input::PodFailed {
            slot: c.slot,
            reason: "pods is forbidden: quota exceeded".into(),
        },
    );
    let cmds = drain(&mut pc);
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
    pc.handle(
        t(3),
        Input::PodFailed {
            slot: b.slot,
            reason: "boom".into(),
        },
    );
    let r = replies(&drain(&mut pc));
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
    pc.handle(
        t(3),
        Input::PodGone {
            pod_name: c.pod_name.clone(),
            failed: true,
        },
    );
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
    let mut pc = cache(2, 1);
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
    assert_eq!(deleted(&ready(&mut pc, t(61), c.slot)), [c.pod_name]);
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
    pc.handle(
        t(2) + TTL,
        Input::Gc {
            observed: obs.clone(),
        },
    );
    assert!(deleted(&drain(&mut pc)).is_empty(), "fresh pod survives");
    pc.handle(reclaim, Input::Gc { observed: obs });
    assert_eq!(deleted(&drain(&mut pc)), [c.pod_name]);
    assert_eq!(pc.slots().count(), 0);
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
    pc.handle(t(10_000), Input::Gc { observed: obs });
    let cmds = drain(&mut pc);
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
    pc.handle(t(0), Input::Gc { observed: obs });
    let cmds = drain(&mut pc);
    assert_eq!(deleted(&cmds), ["c"]);
    let persisted: Vec<_> = cmds
        .iter()
        .filter_map(|c| match c {
            Command::PersistReclaimAfter {
                pod_name,
                reclaim_after,
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
    pc.handle(t(4) + TTL * 2, Input::Gc { observed: obs });
    assert_eq!(
        deleted(&drain(&mut pc)),
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
        pc.handle(
            t(secs),
            Input::CallFinished {
                request: RequestId(id),
            },
        );
        persisted.extend(
            cmds.into_iter()
                .chain(drain(&mut pc))
                .filter_map(|c| match c {
                    Command::PersistReclaimAfter { reclaim_after, .. } => {
                        Some((secs, reclaim_after))
                    }
                    _ => None,
                }),
        );
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
    pc.handle(t(0), Input::Adopt { observed: obs });
    assert!(drain(&mut pc).is_empty(), "adoption deletes nothing");
    let names: Vec<_> = pc.slots().map(|s| s.pod_name.to_string()).collect();
    assert_eq!(names, ["good"]);
    let r = replies(&request(&mut pc, t(1), 1, IMG));
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
    let mut p = pc.policy().clone();
    p.functions = entry.into_iter().map(|e| (e.name.clone(), e)).collect();
    p
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
    pc.handle(late, Input::Gc { observed: obs });
    let mut gone = deleted(&drain(&mut pc));
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
            observed: vec![pod("global", None), pod("current", version.clone())],
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
