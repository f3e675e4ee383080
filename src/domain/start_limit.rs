//! The start limiter's policy: how many function processes may compete for
//! the CPU at once, and in what order waiting calls start.
//!
//! Many short, CPU-bound function processes time-sharing a few cores all
//! finish late: each gets a slice of a core, so every call takes about
//! (running processes ÷ cores) times its own CPU time, and the spread of
//! the kernel scheduler's slices becomes the calls' tail latency. Letting
//! only about as many functions run as there are cores, and the rest wait
//! in arrival order, runs each call at full speed after a fair wait (the
//! classic admission-control bound of a CPU-bound service).
//!
//! A function that sleeps or waits for I/O must not hold the queue back, so
//! a started call counts against the limit only for a **grace period**:
//! once it has run that long it stops counting, and the next waiting call
//! starts even though it is still running. A slow or sleeping function
//! therefore delays the waitlist by at most the grace period.
//!
//! Rules (each has a test that fails without it):
//! - **bound**: at most `limit` started calls within their grace period
//!   count at once; a call that arrives when that many count waits;
//! - **grace**: a call stops counting once `grace` has passed since it
//!   started, so waiting calls then start;
//! - **FIFO**: waiting calls start in arrival order, and a new arrival never
//!   starts ahead of a waiting one;
//! - **off**: a limit of 0 starts every call at once.
//!
//! Pure: time is passed in as `now`, an offset from any origin the caller
//! keeps fixed (a monotonic clock's reading); the caller wakes the calls
//! this returns and calls [`StartLimit::tick`] at [`StartLimit::next_expiry`].

use std::collections::VecDeque;
use std::time::Duration;

/// One call known to a [`StartLimit`], from its arrival to its end.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CallId(u64);

/// What a call that arrives may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arrival {
    /// Start now.
    Start(CallId),
    /// Wait until a later [`StartLimit::end`] or [`StartLimit::tick`]
    /// returns this id.
    Wait(CallId),
}

impl Arrival {
    /// The call's id, whichever the answer.
    pub fn id(self) -> CallId {
        match self {
            Arrival::Start(id) | Arrival::Wait(id) => id,
        }
    }
}

/// The start limiter's state: counted calls (started, within their grace
/// period, oldest first) and the waitlist (arrival order).
#[derive(Debug, Clone)]
pub struct StartLimit {
    limit: usize,
    grace: Duration,
    /// Started calls still counting, with their start times, oldest first
    /// (start times never decrease, so they leave their grace period in
    /// this order).
    counted: VecDeque<(CallId, Duration)>,
    waitlist: VecDeque<CallId>,
    next_id: u64,
}

impl StartLimit {
    /// At most `limit` started calls count at once (0: no limit, every call
    /// starts at once), each for at most `grace` after it started.
    pub fn new(limit: usize, grace: Duration) -> Self {
        Self {
            limit,
            grace,
            counted: VecDeque::new(),
            waitlist: VecDeque::new(),
            next_id: 0,
        }
    }

    /// Whether the limiter is off (a limit of 0).
    pub fn is_off(&self) -> bool {
        self.limit == 0
    }

    /// A call arrives at `now`: it joins the end of the waitlist, and the
    /// calls at its front start while fewer than the limit count (calls
    /// whose grace period has passed stop counting first). Returns the new
    /// call's answer and the waiting calls ahead of it that start now, in
    /// arrival order (a [`StartLimit::tick`] the caller had not made yet).
    pub fn arrive(&mut self, now: Duration) -> (Arrival, Vec<CallId>) {
        let id = CallId(self.next_id);
        self.next_id += 1;
        if self.is_off() {
            return (Arrival::Start(id), Vec::new());
        }
        self.waitlist.push_back(id);
        let mut started = self.admit(now);
        if started.last() == Some(&id) {
            started.pop();
            (Arrival::Start(id), started)
        } else {
            (Arrival::Wait(id), started)
        }
    }

    /// Call `id` ended at `now` (its function finished, or it gave up
    /// waiting: a timeout or a cancelled call). Returns the waiting calls
    /// that start now, in arrival order. An unknown or already ended id is
    /// ignored.
    pub fn end(&mut self, id: CallId, now: Duration) -> Vec<CallId> {
        if let Some(i) = self.counted.iter().position(|(c, _)| *c == id) {
            self.counted.remove(i);
        } else if let Some(i) = self.waitlist.iter().position(|c| *c == id) {
            self.waitlist.remove(i);
        }
        self.admit(now)
    }

    /// Time passes: calls whose grace period has passed by `now` stop
    /// counting. Returns the waiting calls that start now, in arrival order.
    pub fn tick(&mut self, now: Duration) -> Vec<CallId> {
        self.admit(now)
    }

    /// When the oldest counted call leaves its grace period (the next time
    /// [`StartLimit::tick`] may start someone), if a call counts.
    pub fn next_expiry(&self) -> Option<Duration> {
        self.counted
            .front()
            .map(|(_, t)| t.saturating_add(self.grace))
    }

    /// Started calls counting against the limit (as of the last operation).
    pub fn counted(&self) -> usize {
        self.counted.len()
    }

    /// Calls on the waitlist.
    pub fn waiting(&self) -> usize {
        self.waitlist.len()
    }

    fn expire(&mut self, now: Duration) {
        while let Some(&(_, started)) = self.counted.front() {
            if now.saturating_sub(started) < self.grace {
                break;
            }
            self.counted.pop_front();
        }
    }

    fn admit(&mut self, now: Duration) -> Vec<CallId> {
        self.expire(now);
        let mut started = Vec::new();
        while self.counted.len() < self.limit
            && let Some(id) = self.waitlist.pop_front()
        {
            self.counted.push_back((id, now));
            started.push(id);
        }
        started
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const GRACE: Duration = Duration::from_millis(50);

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    /// An arrival that starts no call ahead of it.
    fn arrive(l: &mut StartLimit, now: Duration) -> Arrival {
        let (a, others) = l.arrive(now);
        assert_eq!(others, vec![]);
        a
    }

    #[test]
    fn bound_makes_the_third_call_wait_until_one_ends() {
        let mut l = StartLimit::new(2, GRACE);
        let a = arrive(&mut l, ms(0));
        let b = arrive(&mut l, ms(1));
        let c = arrive(&mut l, ms(2));
        assert!(matches!(a, Arrival::Start(_)));
        assert!(matches!(b, Arrival::Start(_)));
        assert!(matches!(c, Arrival::Wait(_)), "{c:?}");
        assert_eq!(l.end(a.id(), ms(3)), vec![c.id()]);
        assert_eq!(l.counted(), 2);
        assert_eq!(l.waiting(), 0);
    }

    #[test]
    fn grace_lets_a_waiting_call_past_a_sleeping_function() {
        let mut l = StartLimit::new(1, GRACE);
        let sleeper = arrive(&mut l, ms(0));
        let next = arrive(&mut l, ms(10));
        assert!(matches!(next, Arrival::Wait(_)));
        assert_eq!(l.next_expiry(), Some(GRACE));
        assert_eq!(l.tick(ms(49)), vec![]);
        assert_eq!(l.tick(ms(50)), vec![next.id()]);
        // The sleeper still runs but no longer counts; its end starts nobody.
        assert_eq!(l.counted(), 1);
        assert_eq!(l.end(sleeper.id(), ms(500)), vec![]);
        // A call arriving after the grace period of every counted call starts.
        assert!(matches!(arrive(&mut l, ms(1000)), Arrival::Start(_)));
    }

    #[test]
    fn waiting_calls_start_in_arrival_order_and_newcomers_queue_behind() {
        let mut l = StartLimit::new(1, GRACE);
        let first = arrive(&mut l, ms(0));
        let waiting: Vec<CallId> = (1..=3).map(|t| arrive(&mut l, ms(t)).id()).collect();
        let mut order = Vec::new();
        let mut running = first.id();
        for t in 10..13 {
            let started = l.end(running, ms(t));
            assert_eq!(started.len(), 1);
            running = started[0];
            order.push(running);
            // One that arrives while others wait does not jump the queue.
            if t == 10 {
                let late = arrive(&mut l, ms(t));
                assert!(matches!(late, Arrival::Wait(_)));
                l.end(late.id(), ms(t));
            }
        }
        assert_eq!(order, waiting);
    }

    #[test]
    fn a_call_that_gives_up_waiting_leaves_the_waitlist() {
        let mut l = StartLimit::new(1, GRACE);
        let a = arrive(&mut l, ms(0));
        let b = arrive(&mut l, ms(1));
        let c = arrive(&mut l, ms(2));
        assert_eq!(l.end(b.id(), ms(3)), vec![]);
        assert_eq!(l.waiting(), 1);
        assert_eq!(l.end(a.id(), ms(4)), vec![c.id()]);
    }

    #[test]
    fn zero_is_off() {
        let mut l = StartLimit::new(0, GRACE);
        for t in 0..100 {
            assert!(matches!(arrive(&mut l, ms(t)), Arrival::Start(_)));
        }
        assert_eq!(l.counted(), 0);
        assert_eq!(l.next_expiry(), None);
    }

    #[derive(Debug, Clone)]
    enum Op {
        Arrive,
        End(usize),
        Tick,
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            3 => Just(Op::Arrive),
            3 => any::<usize>().prop_map(Op::End),
            1 => Just(Op::Tick),
        ]
    }

    proptest! {
        /// Any sequence of arrivals, ends and time: the bound holds, calls
        /// start in arrival order, nobody waits while the limit has room,
        /// and no call waits longer than the grace period after every call
        /// ahead of it has started.
        #[test]
        fn invariants(limit in 0usize..4, ops in proptest::collection::vec((op(), 0u64..30), 1..200)) {
            let mut l = StartLimit::new(limit, GRACE);
            let mut now = Duration::ZERO;
            let mut started: Vec<(CallId, Duration)> = Vec::new();
            let mut live: Vec<CallId> = Vec::new();
            for (op, step) in ops {
                now += ms(step);
                let newly = match op {
                    Op::Arrive => {
                        let (a, mut others) = l.arrive(now);
                        live.push(a.id());
                        if let Arrival::Start(id) = a {
                            others.push(id);
                        }
                        others
                    }
                    Op::End(i) if !live.is_empty() => {
                        let id = live.remove(i % live.len());
                        l.end(id, now)
                    }
                    Op::End(_) => vec![],
                    Op::Tick => l.tick(now),
                };
                for id in newly {
                    prop_assert!(started.iter().all(|(s, _)| *s != id), "started twice");
                    started.push((id, now));
                }
                // FIFO: the started calls are a prefix-ordered subsequence of
                // the arrivals (ids grow with arrival).
                let ids: Vec<CallId> = started.iter().map(|(id, _)| *id).collect();
                let mut sorted = ids.clone();
                sorted.sort();
                prop_assert_eq!(&ids, &sorted);
                // The bound: live calls started within the grace period.
                let counting = started.iter()
                    .filter(|(id, t)| live.contains(id) && now.saturating_sub(*t) < GRACE)
                    .count();
                if limit > 0 {
                    prop_assert!(counting <= limit, "{} counting over {}", counting, limit);
                    // Work-conserving: a live waiting call means the limit is full.
                    let waiting = live.iter().filter(|id| !ids.contains(id)).count();
                    prop_assert_eq!(waiting, l.waiting());
                    if waiting > 0 {
                        prop_assert_eq!(counting, limit);
                    }
                } else {
                    prop_assert_eq!(l.waiting(), 0);
                }
            }
        }
    }
}
