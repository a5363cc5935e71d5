//! One timer thread for the whole device: it calls each peer's session when its next deadline
//! passes.
//!
//! A peer's [`Session`] keeps its five timers as deadlines and decides what happens when they
//! pass; this wheel only remembers when to look. Each peer has at most one live entry in the
//! heap, at the deadline recorded in its [`SessionCell::queued`]. After every event the device
//! hands the session's next deadline to [`TimerWheel::schedule`]: a deadline that moved later
//! (persistent keepalive does it after every batch) changes nothing, the queued entry fires
//! early, finds nothing due and queues the real deadline. So the hot path touches the heap only
//! when a deadline moves earlier.

use crate::clock::Clock;
use crate::session::Session;
use crate::Peer;
use parking_lot::{Condvar, Mutex};
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;
use vpn_proto::time::Instant;

/// A peer's session and the deadline of its entry in the wheel, under one lock.
pub(crate) struct SessionCell {
    pub session: Session,
    /// The deadline of the peer's live heap entry, if any. An entry whose deadline differs is
    /// stale (superseded by an earlier one) and is skipped when it comes out.
    pub queued: Option<Instant>,
}

impl SessionCell {
    pub fn new(seed: u64) -> SessionCell {
        SessionCell {
            session: Session::new(seed),
            queued: None,
        }
    }
}

struct Entry {
    at: Instant,
    peer: Weak<Peer>,
}

impl PartialEq for Entry {
    fn eq(&self, o: &Self) -> bool {
        self.at == o.at
    }
}
impl Eq for Entry {}
impl PartialOrd for Entry {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Entry {
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        self.at.cmp(&o.at)
    }
}

/// The device's timer heap and its thread's wake-up.
pub(crate) struct TimerWheel {
    heap: Mutex<BinaryHeap<Reverse<Entry>>>,
    cond: Condvar,
    /// When the timer thread will wake next by itself (clock nanoseconds; at most 1 s ahead).
    /// Scheduling a deadline due later needs no wake-up: the thread recomputes when it wakes.
    /// Most deadlines are 5 s or more away, so the data path almost never wakes the thread — a
    /// wake-up per received packet would be a context switch per packet on a busy core.
    wake_at: AtomicU64,
    /// The clock instant up to which every due entry has been fired (clock nanoseconds).
    done_through: AtomicU64,
    /// How many times the clock jumped forward (a fake clock advancing), counted under the heap
    /// lock: the thread does not go to sleep on a deadline computed before a jump.
    jumps: AtomicU64,
    stop: AtomicBool,
    clock: Arc<dyn Clock>,
}

impl TimerWheel {
    pub fn new(clock: Arc<dyn Clock>) -> Arc<TimerWheel> {
        let w = Arc::new(TimerWheel {
            heap: Mutex::new(BinaryHeap::new()),
            cond: Condvar::new(),
            wake_at: AtomicU64::new(0),
            done_through: AtomicU64::new(0),
            jumps: AtomicU64::new(0),
            stop: AtomicBool::new(false),
            clock: clock.clone(),
        });
        let weak = Arc::downgrade(&w);
        clock.on_advance(Arc::new(move || {
            if let Some(w) = weak.upgrade() {
                let _g = w.heap.lock();
                w.jumps.fetch_add(1, Ordering::AcqRel);
                w.cond.notify_all();
            }
        }));
        w
    }

    /// Makes sure `peer` is looked at by `next` (its session's next deadline). Called with the
    /// peer's session lock held, `queued` being its cell's field, so that deadlines published
    /// by two threads cannot cross.
    pub fn schedule(&self, peer: &Arc<Peer>, queued: &mut Option<Instant>, next: Option<Instant>) {
        let Some(at) = next else { return };
        if queued.is_some_and(|q| q <= at) {
            return; // the queued entry comes first and will queue `at` when it fires
        }
        *queued = Some(at);
        let mut heap = self.heap.lock();
        let wake = at.as_nanos() < self.wake_at.load(Ordering::Acquire);
        heap.push(Reverse(Entry {
            at,
            peer: Arc::downgrade(peer),
        }));
        if wake {
            self.cond.notify_all();
        }
    }

    /// The clock instant up to which the timer thread has fired every due deadline. With a
    /// fake clock, tests wait until it reaches the clock's `now` after advancing it.
    pub fn done_through(&self) -> Instant {
        Instant::from_nanos(self.done_through.load(Ordering::Acquire))
    }

    pub fn stop(&self) {
        self.stop.store(true, Ordering::Release);
        let _g = self.heap.lock();
        self.cond.notify_all();
    }

    /// The timer thread: hands each due entry to `fire` (peer, the entry's deadline, now) until
    /// stopped. `tick` runs about once a second (rate-limiter garbage collection).
    pub fn run(&self, fire: impl Fn(&Arc<Peer>, Instant, Instant), tick: impl Fn()) {
        let mut last_tick = self.clock.now();
        loop {
            if self.stop.load(Ordering::Acquire) {
                return;
            }
            let jumps = self.jumps.load(Ordering::Acquire);
            let now = self.clock.now();
            let due = self.take_due(now);
            if now.saturating_duration_since(last_tick) >= Duration::from_secs(1) {
                last_tick = now;
                tick();
            }
            if due.is_empty() {
                self.wait(now, last_tick, jumps);
                continue;
            }
            for e in due {
                if let Some(peer) = e.peer.upgrade() {
                    fire(&peer, e.at, now);
                }
            }
        }
    }

    fn take_due(&self, now: Instant) -> Vec<Entry> {
        let mut heap = self.heap.lock();
        let mut due = Vec::new();
        while heap.peek().is_some_and(|Reverse(e)| e.at <= now) {
            if let Some(Reverse(e)) = heap.pop() {
                due.push(e);
            }
        }
        due
    }

    /// Sleeps until the earliest entry, a clock advance, an earlier entry, or the next tick.
    fn wait(&self, now: Instant, last_tick: Instant, jumps: u64) {
        let mut heap = self.heap.lock();
        if heap
            .peek()
            .is_some_and(|Reverse(e)| e.at <= self.clock.now())
        {
            return; // scheduled meanwhile
        }
        self.done_through.store(now.as_nanos(), Ordering::Release);
        let to_tick =
            Duration::from_secs(1).saturating_sub(now.saturating_duration_since(last_tick));
        let wait = heap
            .peek()
            .map(|Reverse(e)| e.at.saturating_duration_since(now))
            .unwrap_or(to_tick)
            .min(to_tick)
            .max(Duration::from_millis(1));
        if self.stop.load(Ordering::Acquire) || self.jumps.load(Ordering::Acquire) != jumps {
            return;
        }
        // Published under the heap lock, which `schedule` holds when it compares.
        let until = now
            .as_nanos()
            .saturating_add(u64::try_from(wait.as_nanos()).unwrap_or(u64::MAX));
        self.wake_at.store(until, Ordering::Release);
        self.cond.wait_for(&mut heap, wait);
        self.wake_at.store(0, Ordering::Release);
    }
}
