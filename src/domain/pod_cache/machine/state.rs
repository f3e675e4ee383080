//! What the machine keeps: slots (one pod each, pending or ready), the
//! creation of a pending slot and how far it has come, the reclaim-after
//! patch of a slot, the functions (images) with their settings, requests,
//! deletions, creations given up, and timers.
//!
//! - a slot counts on the reclaim-after known to be on its pod
//!   ([`Slot::confirmed`]): written by a patch that succeeded, or observed,
//!   never raised by a patch still in flight;
//! - a slot takes new requests only under its function's current template
//!   version and settings: same template, same pod shape, and named the way
//!   the function names its pods now ([`Function::fresh`]);
//! - a pod seen under a slot's name with another UID is another
//!   incarnation of the name, not the slot's pod; unknown UIDs on either
//!   side prove nothing ([`Slot::is_other_pod`]).

use std::collections::VecDeque;
use std::time::Duration;

use foldhash::HashMap;

use crate::domain::pod_cache::config::{FunctionSettings, Pool};
#[cfg(doc)]
use crate::domain::pod_cache::io::Command;
use crate::domain::pod_cache::io::{
    DeletePrecondition, DeleteReason, PodCacheError, RequestId, SlotId, SlotState, SlotView,
};
#[cfg(doc)]
use crate::domain::pod_cache::naming;
use crate::domain::pod_cache::time::UnixTime;

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Timer {
    /// A pending slot's creation deadline.
    Deadline(SlotId),
    /// A busy slot's reclaim-after is due for extension.
    Renew(SlotId),
    /// Retry a failed reclaim-after patch.
    PersistRetry(SlotId),
    /// Retry a failed deletion.
    DeleteRetry(String),
    /// Ask for a GC listing.
    Gc,
}

/// How far a pending slot's creation has come.
#[derive(Debug)]
pub(super) enum Step {
    /// [`Command::CreatePod`] is out; `seen` holds the pod's endpoint and IP
    /// if the watch reported it ready before the answer.
    Creating {
        seen: Option<(String, Option<String>)>,
    },
    /// The objects exist; waiting for the watch to report the pod ready.
    Starting,
    /// [`Command::AwaitEndpoint`] is out.
    Publishing,
    /// An adopted pod: its claim ([`Command::PersistReclaimAfter`]) is out
    /// or waits for its retry; it serves at `endpoint` once the claim
    /// succeeded.
    Claiming { endpoint: String },
    /// A pool creation found its name held by a terminating pod (a real
    /// kubelet keeps a deleted pod, and so its name, for up to its grace
    /// period): the creation waits until that pod is gone — its deletion
    /// reported, or a listing asked for after `since` without it — then
    /// creates the pod again under the same name, within its deadline.
    NameHeld { since: UnixTime },
}

#[derive(Debug)]
pub(super) struct Creation {
    pub(super) deadline: UnixTime,
    pub(super) waitlist: VecDeque<RequestId>,
    pub(super) step: Step,
    /// The [`CREATION_ANNOTATION`](crate::domain::pod_cache::CREATION_ANNOTATION) value.
    pub(super) nonce: String,
    /// Names tried before this one.
    pub(super) renames: u32,
    /// The reclaim-after the pod is created with.
    pub(super) reclaim_after: UnixTime,
    /// A pool creation answered AlreadyExists by another replica's pod of
    /// the same pool name: the slot waits for that pod instead and claims
    /// it (never deletes it) once it is ready.
    pub(super) joined: bool,
    /// Pool names this creation found taken.
    pub(super) tried: Vec<String>,
    /// The wrapper's pod-IP endpoint once the watch showed the pod with an
    /// IP (its containers may still be starting).
    pub(super) address: Option<String>,
    /// Whether [`Command::ProbeWrapper`] is out for it.
    pub(super) probing: bool,
}

#[derive(Debug)]
pub(super) enum Phase {
    Pending(Box<Creation>),
    Ready { endpoint: String },
}

/// Where the slot's reclaim-after patch is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Persist {
    Idle,
    InFlight {
        value: UnixTime,
        attempt: u32,
    },
    /// The last patch failed; a [`Timer::PersistRetry`] is set.
    Failed {
        attempt: u32,
    },
}

#[derive(Debug)]
pub(super) struct Slot {
    pub(super) image: String,
    pub(super) pod_name: String,
    pub(super) template_version: String,
    /// The [`Function::shape`] its pod was built with.
    pub(super) shape: u64,
    pub(super) ttl: Duration,
    pub(super) phase: Phase,
    pub(super) load: u32,
    pub(super) last_used: UnixTime,
    /// The reclaim-after known to be on the pod: written by a patch that
    /// succeeded, or observed. Never raised by a patch still in flight.
    pub(super) confirmed: UnixTime,
    pub(super) persist: Persist,
    /// Since when the pod is known to exist (creation answered, adopted or
    /// observed); a listing taken later without it proves it gone.
    pub(super) known_since: Option<UnixTime>,
    /// A call found it unavailable: out of its function's slots, forgotten
    /// once its load here is zero.
    pub(super) draining: bool,
    pub(super) uid: Option<String>,
    pub(super) renew_at: Option<UnixTime>,
    /// The pod's index in its function's warm pool (its name is
    /// [`naming::pool_pod_name`]); `None` for a per-replica name.
    pub(super) pool: Option<u32>,
    /// A pool pod among the function's first `minReady`: kept ready, its
    /// reclaim-after extended even while idle, never reclaimed by TTL.
    pub(super) warm: bool,
}

impl Slot {
    pub(super) fn is_ready(&self) -> bool {
        matches!(self.phase, Phase::Ready { .. })
    }

    /// A pod seen under the slot's name with `uid` is another incarnation
    /// of the name (a warm pool's names come back), not the slot's pod.
    /// Unknown UIDs on either side prove nothing.
    pub(super) fn is_other_pod(&self, uid: &Option<String>) -> bool {
        uid.is_some() && self.uid.is_some() && *uid != self.uid
    }
}

#[derive(Debug)]
pub(super) struct Function {
    pub(super) slots: Vec<SlotId>,
    pub(super) round_robin: usize,
    pub(super) settings: FunctionSettings,
    /// Changes whenever `settings` change in a way that shapes the pod
    /// ([`FunctionSettings::same_pod`]); slots of another shape are stale.
    pub(super) shape: u64,
    /// [`FunctionSettings::pod_version`] of `settings`.
    pub(super) pod_version: Option<String>,
    pub(super) invalid: Option<String>,
}

impl Function {
    /// Whether a slot may take new requests under the function's current
    /// template version and settings: same template, same pod shape, and
    /// named the way the function names its pods now (from its pool, within
    /// the pool's size, or per replica without a pool).
    pub(super) fn fresh(&self, s: &Slot, template_version: &str) -> bool {
        fresh(self.settings.pool(), self.shape, s, template_version)
    }
}

/// [`Function::fresh`] from its parts.
pub(super) fn fresh(pool: Option<Pool>, shape: u64, s: &Slot, template_version: &str) -> bool {
    let named = match (pool, s.pool) {
        (None, None) => true,
        (Some(pool), Some(i)) => i < pool.max,
        _ => false,
    };
    named && s.template_version == template_version && s.shape == shape
}

#[derive(Debug, Clone, Copy)]
pub(super) struct Request {
    pub(super) slot: SlotId,
    pub(super) waiting: bool,
}

/// A creation given up while its [`Command::CreatePod`] was out.
#[derive(Debug)]
pub(super) struct Abandoned {
    pub(super) pod_name: String,
    pub(super) nonce: String,
    /// The reclaim-after the creation wrote.
    pub(super) reclaim_after: UnixTime,
}

#[derive(Debug)]
pub(super) struct Deletion {
    pub(super) precondition: DeletePrecondition,
    pub(super) reason: DeleteReason,
    pub(super) attempt: u32,
    pub(super) in_flight: bool,
}

pub(super) fn slot_name(slots: &HashMap<SlotId, Slot>, id: SlotId) -> String {
    slots[&id].pod_name.clone()
}

/// The error for the waiters of a slot whose pod is gone.
pub(super) fn gone(slot: &Slot, failed: bool) -> PodCacheError {
    PodCacheError::PodGone {
        image: slot.image.clone(),
        pod: slot.pod_name.clone(),
        failed,
    }
}

pub(super) fn view(id: SlotId, s: &Slot) -> SlotView<'_> {
    let (state, waiting) = match &s.phase {
        Phase::Pending(c) => (SlotState::Pending, c.waitlist.len()),
        Phase::Ready { .. } if s.draining => (SlotState::Draining, 0),
        Phase::Ready { .. } => (SlotState::Ready, 0),
    };
    SlotView {
        id,
        image: &s.image,
        pod_name: &s.pod_name,
        state,
        load: s.load,
        waiting,
        template_version: &s.template_version,
        reclaim_after: s.confirmed,
        last_used: s.last_used,
    }
}
