//! A bound on how many function processes run at once, with a bounded
//! queue in front of it.
//!
//! Porch starts a process for every call, however many arrive; here at most
//! `running` functions run at once, at most `queued` more calls wait for a
//! slot (in arrival order, each within its own deadline), and a call beyond
//! that is refused at once with `RESOURCE_EXHAUSTED`, so memory and process
//! count stay bounded and the caller learns which flag to raise.
//!
//! Within those slots a start limiter ([`StartGate`], the policy of
//! [`crate::domain::start_limit`]) lets only about as many functions compete
//! for the CPU as there are cores, each for at most a grace period, and the
//! others wait in arrival order.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::{OwnedSemaphorePermit, Semaphore, oneshot};

use crate::domain::evaluation::EvalError;
use crate::domain::start_limit::{Arrival, CallId, StartLimit};

/// Default of `--max-concurrent-functions`: four per core, at least 8.
pub fn default_max_running() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get() * 4)
        .unwrap_or(8)
        .max(8)
}

/// Default of `--max-queued-functions`.
pub const DEFAULT_MAX_QUEUED: usize = 1024;

/// Default of `--function-start-limit`: 0, off. On a 2-core machine shared
/// with other work, one function per CPU lost throughput and tail latency
/// to the other processes (see the book's measurement log,
/// `docs/src/benchmarks/history.md`), so the
/// limiter is opt-in.
pub const DEFAULT_START_LIMIT: usize = 0;

/// Default of `--function-start-grace`: a few times a small catalog
/// function's run (a few milliseconds), well under a call's timeout.
pub const DEFAULT_START_GRACE: Duration = Duration::from_millis(25);

/// Shared slots for function processes; clones share the same bound.
#[derive(Debug, Clone)]
pub struct FunctionSlots {
    running: Arc<Semaphore>,
    waiting: Arc<AtomicUsize>,
    max_running: usize,
    max_queued: usize,
    gate: Option<Arc<StartGate>>,
}

/// A running function's slot and its place in the start limiter; freed
/// when dropped.
#[derive(Debug)]
pub struct Slot {
    _permit: OwnedSemaphorePermit,
    pass: Option<Pass>,
}

impl Slot {
    /// How long after its start this call counts against the start limit,
    /// or `None` when the limiter is off.
    pub fn grace(&self) -> Option<Duration> {
        self.pass.as_ref().map(|p| p.gate.grace)
    }

    /// The grace period has passed: this call stops counting against the
    /// start limit (it keeps its slot until dropped), and the waiting calls
    /// the limit now has room for start.
    pub fn outgrown(&self) {
        if let Some(p) = &self.pass {
            p.gate.tick();
        }
    }
}

impl PartialEq for FunctionSlots {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.running, &other.running)
    }
}

impl Eq for FunctionSlots {}

impl FunctionSlots {
    /// At most `max_running` functions at once (at least 1) and at most
    /// `max_queued` calls waiting for a slot; no start limiter.
    pub fn new(max_running: usize, max_queued: usize) -> Self {
        let max_running = max_running.max(1);
        Self {
            running: Arc::new(Semaphore::new(max_running)),
            waiting: Arc::new(AtomicUsize::new(0)),
            max_running,
            max_queued,
            gate: None,
        }
    }

    /// These slots with a start limiter: of the calls holding a slot, at
    /// most `limit` count as starting at once, each for `grace` after its
    /// function started; the others wait for them in arrival order. A
    /// `limit` of 0 turns the limiter off.
    pub fn with_start_limit(mut self, limit: usize, grace: Duration) -> Self {
        self.gate = (limit > 0).then(|| {
            Arc::new(StartGate {
                state: Mutex::new(GateState {
                    limit: StartLimit::new(limit, grace),
                    wakers: HashMap::new(),
                }),
                origin: Instant::now(),
                grace,
            })
        });
        self
    }

    /// Takes a slot, waiting in the queue if all are taken, then waits for
    /// the start limiter (when on) to let the call start.
    ///
    /// Errors: [`EvalError::Exhausted`] naming the flags when the queue is
    /// full. Waiting is cancelled with the caller's future (its deadline),
    /// which gives up its place in either queue.
    pub async fn acquire(&self) -> Result<Slot, EvalError> {
        let permit = self.permit().await?;
        let pass = match &self.gate {
            Some(gate) => Some(gate.enter().await),
            None => None,
        };
        Ok(Slot {
            _permit: permit,
            pass,
        })
    }

    async fn permit(&self) -> Result<OwnedSemaphorePermit, EvalError> {
        if let Ok(p) = self.running.clone().try_acquire_owned() {
            return Ok(p);
        }
        let before = self.waiting.fetch_add(1, Ordering::AcqRel);
        let _leave = Leave(&self.waiting);
        if before >= self.max_queued {
            return Err(EvalError::Exhausted(format!(
                "{} functions are running and {} calls are waiting for one to finish; \
                 retry later, or raise --max-concurrent-functions / --max-queued-functions",
                self.max_running, self.max_queued
            )));
        }
        let permit = self
            .running
            .clone()
            .acquire_owned()
            .await
            .map_err(|_| EvalError::Unavailable("the runner is shutting down".into()))?;
        Ok(permit)
    }
}

impl Default for FunctionSlots {
    fn default() -> Self {
        Self::new(default_max_running(), DEFAULT_MAX_QUEUED)
            .with_start_limit(DEFAULT_START_LIMIT, DEFAULT_START_GRACE)
    }
}

/// The start limiter's mechanism: the [`StartLimit`] policy under a lock,
/// with a wake-up for each waiting call.
#[derive(Debug)]
pub struct StartGate {
    state: Mutex<GateState>,
    origin: Instant,
    grace: Duration,
}

#[derive(Debug)]
struct GateState {
    limit: StartLimit,
    wakers: HashMap<CallId, oneshot::Sender<()>>,
}

impl GateState {
    fn wake(&mut self, started: Vec<CallId>) {
        for id in started {
            if let Some(tx) = self.wakers.remove(&id) {
                // A receiver gone with its cancelled call: that call's
                // `Pass` ends it, which starts the next one.
                let _ = tx.send(());
            }
        }
    }
}

/// A call's place in the start limiter, from its arrival; ends it there
/// when dropped (a finished call, or one cancelled while waiting).
#[derive(Debug)]
struct Pass {
    gate: Arc<StartGate>,
    id: CallId,
}

impl Drop for Pass {
    fn drop(&mut self) {
        let now = self.gate.now();
        let mut state = self.gate.lock();
        state.wakers.remove(&self.id);
        let started = state.limit.end(self.id, now);
        state.wake(started);
    }
}

impl StartGate {
    fn now(&self) -> Duration {
        self.origin.elapsed()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, GateState> {
        // The state is consistent after every operation, so a panic
        // elsewhere while it was held leaves it usable.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Arrives, and waits for the policy to start this call.
    async fn enter(self: &Arc<Self>) -> Pass {
        let waiting = {
            let now = self.now();
            let mut state = self.lock();
            let (arrival, started) = state.limit.arrive(now);
            state.wake(started);
            match arrival {
                Arrival::Start(id) => {
                    return Pass {
                        gate: self.clone(),
                        id,
                    };
                }
                Arrival::Wait(id) => {
                    let (tx, rx) = oneshot::channel();
                    state.wakers.insert(id, tx);
                    (
                        Pass {
                            gate: self.clone(),
                            id,
                        },
                        rx,
                    )
                }
            }
        };
        let (pass, rx) = waiting;
        // The sender lives in the gate until it is used; an error cannot
        // happen while `pass` holds the gate.
        let _ = rx.await;
        pass
    }

    fn tick(&self) {
        let now = self.now();
        let mut state = self.lock();
        let started = state.limit.tick(now);
        state.wake(started);
    }
}

struct Leave<'a>(&'a AtomicUsize);

impl Drop for Leave<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use std::future::Future;

    use super::*;

    #[tokio::test]
    async fn queue_then_refuse() {
        let slots = FunctionSlots::new(1, 1);
        let first = slots.acquire().await.unwrap();
        let s2 = slots.clone();
        let waiter = tokio::spawn(async move { s2.acquire().await.map(|_| ()) });
        while slots.waiting.load(Ordering::Acquire) == 0 {
            tokio::task::yield_now().await;
        }
        let refused = slots.acquire().await.unwrap_err();
        assert!(
            refused.to_string().contains("--max-queued-functions"),
            "{refused}"
        );
        drop(first);
        waiter.await.unwrap().unwrap();
        assert_eq!(slots.waiting.load(Ordering::Acquire), 0);
    }

    /// `fut`'s output if it is ready once the runtime has run every other
    /// ready task, else `None` (and `fut` may be awaited later).
    async fn ready_now<F: Future + Unpin>(fut: &mut F) -> Option<F::Output> {
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        match std::pin::Pin::new(fut).poll(&mut cx) {
            std::task::Poll::Ready(out) => Some(out),
            std::task::Poll::Pending => None,
        }
    }

    /// Whether `fut` is still pending (see [`ready_now`]); it must be.
    async fn still_pending<F: Future + Unpin>(fut: &mut F) -> bool {
        ready_now(fut).await.is_none()
    }

    #[tokio::test]
    async fn the_start_limit_holds_calls_back_until_one_ends() {
        let slots = FunctionSlots::new(8, 8).with_start_limit(1, Duration::from_secs(3600));
        let first = slots.acquire().await.unwrap();
        let mut second = Box::pin(slots.acquire());
        assert!(
            still_pending(&mut second).await,
            "the limit of 1 let a second call start"
        );
        drop(first);
        second.await.unwrap();
    }

    #[tokio::test]
    async fn a_call_past_its_grace_period_stops_counting() {
        let slots = FunctionSlots::new(8, 8).with_start_limit(1, Duration::from_millis(30));
        let sleeper = slots.acquire().await.unwrap();
        assert_eq!(sleeper.grace(), Some(Duration::from_millis(30)));
        let mut next = Box::pin(slots.acquire());
        assert!(still_pending(&mut next).await);
        tokio::time::sleep(Duration::from_millis(30)).await;
        sleeper.outgrown();
        // The sleeper still holds its slot, yet the next call starts.
        next.await.unwrap();
        drop(sleeper);
    }

    #[tokio::test]
    async fn waiting_calls_start_in_arrival_order_and_cancelled_ones_leave() {
        let slots = FunctionSlots::new(8, 8).with_start_limit(1, Duration::from_secs(3600));
        let first = slots.acquire().await.unwrap();
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let mut tasks = Vec::new();
        for i in 0..4 {
            let (s, tx) = (slots.clone(), tx.clone());
            tasks.push(tokio::spawn(async move {
                let slot = s.acquire().await.unwrap();
                tx.send(i).unwrap();
                tokio::task::yield_now().await;
                drop(slot);
            }));
            // Each has arrived before the next is spawned.
            while slots.gate.as_ref().unwrap().lock().limit.waiting() <= i {
                tokio::task::yield_now().await;
            }
        }
        // The second waiter gives up (its deadline passed).
        tasks.remove(1).abort();
        drop(first);
        for t in tasks {
            t.await.unwrap();
        }
        drop(tx);
        let mut order = Vec::new();
        while let Some(i) = rx.recv().await {
            order.push(i);
        }
        assert_eq!(order, vec![0, 2, 3]);
    }

    #[tokio::test]
    async fn a_start_limit_of_zero_is_off() {
        let slots = FunctionSlots::new(8, 8).with_start_limit(0, Duration::from_secs(3600));
        let mut held = Vec::new();
        for _ in 0..8 {
            let mut next = Box::pin(slots.acquire());
            let slot = ready_now(&mut next).await;
            held.push(slot.expect("a call waited with the limiter off").unwrap());
        }
        assert!(held.iter().all(|s| s.grace().is_none()));
    }
}
