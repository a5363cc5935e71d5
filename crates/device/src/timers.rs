//! One timer thread for the whole device.
//!
//! Each peer has five timer slots (§2.11). A slot holds its deadline in an atomic; the device
//! keeps a heap of (deadline, slot) entries and one thread sleeps until the earliest. Re-arming a
//! slot to a later deadline (persistent keepalive does it after every batch) only stores the new
//! deadline: the slot keeps at most one heap entry, and when that entry comes due the thread
//! either fires the slot or re-queues it at its current deadline. So the hot path never touches
//! the heap unless a deadline moves earlier.

use crate::clock::Clock;
use crate::Peer;
use parking_lot::{Condvar, Mutex};
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

/// The five per-peer timers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum TimerKind {
    RetransmitHandshake = 0,
    SendKeepalive = 1,
    NewHandshake = 2,
    ZeroKeyMaterial = 3,
    PersistentKeepalive = 4,
}

pub(crate) const TIMER_KINDS: [TimerKind; 5] = [
    TimerKind::RetransmitHandshake,
    TimerKind::SendKeepalive,
    TimerKind::NewHandshake,
    TimerKind::ZeroKeyMaterial,
    TimerKind::PersistentKeepalive,
];

/// One peer's timer slots.
#[derive(Default)]
pub(crate) struct PeerTimers {
    /// Deadline per slot in clock nanoseconds; 0 = not pending.
    deadline: [AtomicU64; 5],
    /// Deadline of the slot's entry in the heap; 0 = none queued.
    queued: [AtomicU64; 5],
    /// Timers act only while the peer runs and the device is up.
    pub active: AtomicBool,
    pub handshake_attempts: AtomicU64,
    pub need_another_keepalive: AtomicBool,
    pub sent_last_minute_handshake: AtomicBool,
}

impl PeerTimers {
    pub fn is_pending(&self, k: TimerKind) -> bool {
        self.deadline[k as usize].load(Ordering::Acquire) != 0
    }

    pub fn del(&self, k: TimerKind) {
        self.deadline[k as usize].store(0, Ordering::Release);
    }

    pub fn del_all(&self) {
        for k in TIMER_KINDS {
            self.del(k);
        }
    }
}

struct Entry {
    at: u64,
    kind: TimerKind,
    peer: Weak<Peer>,
}

impl PartialEq for Entry {
    fn eq(&self, o: &Self) -> bool {
        self.at == o.at && self.kind == o.kind
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
        (self.at, self.kind).cmp(&(o.at, o.kind))
    }
}

/// The device's timer heap and its thread's wake-up.
pub(crate) struct TimerWheel {
    heap: Mutex<BinaryHeap<Reverse<Entry>>>,
    cond: Condvar,
    /// When the timer thread will wake next by itself (clock nanoseconds; at most 1 s ahead).
    /// Arming a timer due later needs no wake-up: the thread recomputes when it wakes. Most
    /// timers are 5 s or more away, so the data path almost never wakes the thread — a
    /// wake-up per received packet would be a context switch per packet on a busy core.
    wake_at: AtomicU64,
    stop: AtomicBool,
    clock: Arc<dyn Clock>,
}

impl TimerWheel {
    pub fn new(clock: Arc<dyn Clock>) -> Arc<TimerWheel> {
        let w = Arc::new(TimerWheel {
            heap: Mutex::new(BinaryHeap::new()),
            cond: Condvar::new(),
            wake_at: AtomicU64::new(0),
            stop: AtomicBool::new(false),
            clock: clock.clone(),
        });
        let weak = Arc::downgrade(&w);
        clock.on_advance(Arc::new(move || {
            if let Some(w) = weak.upgrade() {
                let _g = w.heap.lock();
                w.cond.notify_all();
            }
        }));
        w
    }

    /// Arms `peer`'s slot `k` to fire `after` from now.
    pub fn arm(&self, peer: &Arc<Peer>, k: TimerKind, after: Duration) {
        let t = &peer.timers;
        if !t.active.load(Ordering::Acquire) {
            return;
        }
        let at = (self.clock.now() + after).as_nanos().max(1);
        t.deadline[k as usize].store(at, Ordering::Release);
        let queued = t.queued[k as usize].load(Ordering::Acquire);
        if queued != 0 && queued <= at {
            return; // the queued entry comes first and will re-queue at `at`
        }
        let mut heap = self.heap.lock();
        t.queued[k as usize].store(at, Ordering::Release);
        let wake = at < self.wake_at.load(Ordering::Acquire);
        heap.push(Reverse(Entry {
            at,
            kind: k,
            peer: Arc::downgrade(peer),
        }));
        if wake {
            self.cond.notify_all();
        }
    }

    pub fn stop(&self) {
        self.stop.store(true, Ordering::Release);
        let _g = self.heap.lock();
        self.cond.notify_all();
    }

    /// The timer thread: fires due slots through `fire` until stopped. `tick` runs about once a
    /// second (rate-limiter garbage collection).
    pub fn run(&self, fire: impl Fn(&Arc<Peer>, TimerKind), tick: impl Fn()) {
        let mut last_tick = self.clock.now();
        loop {
            if self.stop.load(Ordering::Acquire) {
                return;
            }
            self.clock.refresh();
            let now = self.clock.now();
            let mut due = Vec::new();
            {
                let mut heap = self.heap.lock();
                while let Some(Reverse(e)) = heap.peek() {
                    if e.at > now.as_nanos() {
                        break;
                    }
                    let Some(Reverse(e)) = heap.pop() else { break };
                    due.push(e);
                }
                if due.is_empty()
                    && now.saturating_duration_since(last_tick) < Duration::from_secs(1)
                {
                    let wait = heap
                        .peek()
                        .map(|Reverse(e)| Duration::from_nanos(e.at - now.as_nanos()))
                        .unwrap_or(Duration::from_secs(1))
                        .min(Duration::from_secs(1));
                    if !self.stop.load(Ordering::Acquire) {
                        // Published under the heap lock, which `arm` holds when it compares.
                        let until = now
                            .as_nanos()
                            .saturating_add(u64::try_from(wait.as_nanos()).unwrap_or(u64::MAX));
                        self.wake_at.store(until, Ordering::Release);
                        self.cond.wait_for(&mut heap, wait);
                        self.wake_at.store(0, Ordering::Release);
                    }
                    continue;
                }
            }
            if now.saturating_duration_since(last_tick) >= Duration::from_secs(1) {
                last_tick = now;
                tick();
            }
            for e in due {
                let Some(peer) = e.peer.upgrade() else {
                    continue;
                };
                let t = &peer.timers;
                let i = e.kind as usize;
                if t.queued[i].load(Ordering::Acquire) != e.at {
                    continue; // superseded by an earlier entry
                }
                t.queued[i].store(0, Ordering::Release);
                let dl = t.deadline[i].load(Ordering::Acquire);
                if dl == 0 {
                    continue;
                }
                if dl > now.as_nanos() {
                    // Re-armed later meanwhile: queue the real deadline.
                    let mut heap = self.heap.lock();
                    t.queued[i].store(dl, Ordering::Release);
                    heap.push(Reverse(Entry {
                        at: dl,
                        kind: e.kind,
                        peer: e.peer.clone(),
                    }));
                    continue;
                }
                if t.deadline[i]
                    .compare_exchange(dl, 0, Ordering::AcqRel, Ordering::Acquire)
                    .is_ok()
                    && t.active.load(Ordering::Acquire)
                {
                    fire(&peer, e.kind);
                }
            }
        }
    }
}
