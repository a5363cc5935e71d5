//! Scheduling hints for the data-path threads while the device carries bulk traffic.
//!
//! Why: with a TCP stream through the tunnel, the thread moving the data (the TUN reader on the
//! sending side, a socket reader on the receiving side) shares its CPU with the thread carrying
//! the ACKs the other way, and the kernel lets a thread that wakes up preempt the one running.
//! Every few ACK datagrams wake the ACK thread, which preempts the data thread in the middle
//! of its batch: about 5 000 preemptions per second per side on the benchmark VM, each costing
//! both threads their caches. Marked as batch threads (Linux `SCHED_BATCH`: they do not preempt
//! on wake-up, the scheduler tick still shares the CPU), the ACK thread waits for the data
//! thread to block and then takes a whole batch of ACKs at once: 12 % more TCP throughput
//! with 12 % less CPU per byte (`docs/design-notes.md`).
//!
//! Only while the device is busy: on a quiet tunnel a thread that does not preempt would make a
//! lone packet wait behind whatever else runs on its CPU, so the hint is withdrawn again once
//! no large read has been seen for [`BULK_HOLD`].

use std::io;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;
use vpn_proto::time::Instant;

/// How a data-path thread is marked busy or not. Called on the thread itself.
pub trait Scheduling: Send + Sync + 'static {
    /// `true`: the device carries bulk traffic, so the calling thread may stop preempting others
    /// when it wakes (e.g. `SCHED_BATCH`); `false`: back to the default policy.
    fn set_bulk(&self, bulk: bool) -> io::Result<()>;
}

/// Packets in one read that mark the device busy (a TSO frame's segments, a GRO run).
pub(crate) const BULK_READ: usize = 16;
/// How long the device stays busy after the last such read.
pub(crate) const BULK_HOLD: Duration = Duration::from_millis(100);

/// The device-wide state: busy until a time, and how threads are marked.
pub(crate) struct Bulk {
    sched: Option<Arc<dyn Scheduling>>,
    /// Device clock nanoseconds until which the device counts as busy; 0: quiet.
    until: AtomicU64,
}

/// One thread's side: whether it is marked busy now; `None` until first set, since a thread
/// inherits its policy from whichever thread started it (perhaps a busy data-path thread).
#[derive(Default)]
pub(crate) struct ThreadBulk {
    on: Option<bool>,
    /// Marking failed once (no permission, not supported): not tried again on this thread.
    failed: bool,
}

impl ThreadBulk {
    /// Whether the thread is marked busy now.
    pub(crate) fn is_marked(&self) -> bool {
        self.on == Some(true)
    }
}

impl Bulk {
    pub(crate) fn new(sched: Option<Arc<dyn Scheduling>>) -> Self {
        Self {
            sched,
            until: AtomicU64::new(0),
        }
    }

    /// Whether a reader that read `packets` must call [`observe`](Self::observe) (with the
    /// time): false on a quiet device for a thread that is not marked, the common quiet case,
    /// which then costs one relaxed load and no clock read.
    #[inline]
    pub(crate) fn needs_observe(&self, t: &ThreadBulk, packets: usize) -> bool {
        self.sched.is_some()
            && !t.failed
            && (packets >= BULK_READ || t.on != Some(false) || self.until.load(Relaxed) != 0)
    }

    /// A reader read `packets` at `now`: a large read keeps the device busy; the first reader
    /// to find the busy time past ends it; the thread's mark follows the device's state.
    pub(crate) fn observe(&self, t: &mut ThreadBulk, packets: usize, now: Instant) {
        if !self.needs_observe(t, packets) {
            return;
        }
        let now = now.as_nanos().max(1);
        let hold = BULK_HOLD.as_nanos() as u64;
        let until = self.until.load(Relaxed);
        let busy = if packets >= BULK_READ {
            // Refresh only when half the hold has passed: one store per 50 ms, not per read.
            if until < now + hold / 2 {
                self.until.fetch_max(now + hold, Relaxed);
            }
            true
        } else if until != 0 && now >= until {
            // Quiet again; a racing large read may have refreshed it: keep that.
            let _ = self.until.compare_exchange(until, 0, Relaxed, Relaxed);
            false
        } else {
            until != 0
        };
        self.follow(t, busy);
    }

    /// A thread that does not read (a crypto worker): follows the device's state at `now`
    /// without changing it (ending a busy period is the readers' part).
    pub(crate) fn follow_device(&self, t: &mut ThreadBulk, now: Instant) {
        if self.sched.is_some() && !t.failed {
            let until = self.until.load(Relaxed);
            self.follow(t, until != 0 && now.as_nanos() < until);
        }
    }

    /// Marks the calling thread busy or not if it is not already.
    fn follow(&self, t: &mut ThreadBulk, busy: bool) {
        if t.on == Some(busy) {
            return;
        }
        let Some(sched) = &self.sched else { return };
        match sched.set_bulk(busy) {
            Ok(()) => t.on = Some(busy),
            Err(e) => {
                tracing::debug!("scheduling hint not applied ({e}); not trying again");
                t.failed = true;
            }
        }
    }

    /// Whether the device counts as busy (tests).
    #[cfg(test)]
    fn busy(&self) -> bool {
        self.until.load(Relaxed) != 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use parking_lot::Mutex;

    /// Records what the calling thread was told.
    #[derive(Default)]
    struct Record(Mutex<Vec<bool>>);

    impl Scheduling for Record {
        fn set_bulk(&self, bulk: bool) -> io::Result<()> {
            self.0.lock().push(bulk);
            Ok(())
        }
    }

    fn at(ms: u64) -> Instant {
        Instant::from_nanos(1_000_000_000 + ms * 1_000_000)
    }

    #[test]
    fn large_reads_mark_every_reader_until_the_hold_passes() {
        let rec = Arc::new(Record::default());
        let bulk = Bulk::new(Some(rec.clone()));
        let (mut data, mut acks) = (ThreadBulk::default(), ThreadBulk::default());
        // A thread's first read sets its policy once (it may have inherited a busy one)...
        assert!(bulk.needs_observe(&acks, 1));
        bulk.observe(&mut acks, 1, at(0));
        assert_eq!(*rec.0.lock(), [false]);
        // ...then, quiet, small reads cost nothing and change nothing.
        assert!(!bulk.needs_observe(&acks, 1));
        bulk.observe(&mut acks, 1, at(0));
        assert_eq!(rec.0.lock().len(), 1);
        // A large read marks its thread; the ACK thread's small reads follow the device.
        bulk.observe(&mut data, 40, at(1));
        assert!(bulk.busy());
        bulk.observe(&mut acks, 2, at(2));
        assert_eq!(*rec.0.lock(), [false, true, true]);
        // Still within the hold: nothing changes, however small the reads.
        bulk.observe(&mut acks, 1, at(90));
        bulk.observe(&mut data, 1, at(95));
        assert_eq!(rec.0.lock().len(), 3);
        // Past the hold: the first reader ends it and unmarks itself, the other follows.
        bulk.observe(&mut acks, 1, at(1 + 101));
        assert!(!bulk.busy());
        bulk.observe(&mut data, 1, at(1 + 102));
        assert_eq!(*rec.0.lock(), [false, true, true, false, false]);
        // And a quiet device is free again.
        assert!(!bulk.needs_observe(&acks, 1) && !bulk.needs_observe(&data, 1));
    }

    #[test]
    fn steady_bulk_keeps_the_device_busy() {
        let rec = Arc::new(Record::default());
        let bulk = Bulk::new(Some(rec.clone()));
        let mut t = ThreadBulk::default();
        for ms in (0..2_000).step_by(10) {
            bulk.observe(&mut t, 64, at(ms));
            bulk.observe(&mut t, 1, at(ms + 5));
        }
        assert_eq!(
            *rec.0.lock(),
            [true],
            "marked once, never dropped while busy"
        );
    }

    #[test]
    fn workers_follow_the_readers_and_the_time() {
        let rec = Arc::new(Record::default());
        let bulk = Bulk::new(Some(rec.clone()));
        let (mut reader, mut worker) = (ThreadBulk::default(), ThreadBulk::default());
        bulk.follow_device(&mut worker, at(0));
        bulk.observe(&mut reader, 20, at(0));
        bulk.follow_device(&mut worker, at(10));
        assert!(worker.is_marked());
        // No reader has read since: the worker still sees the busy period end on its own.
        bulk.follow_device(&mut worker, at(300));
        assert!(!worker.is_marked());
        assert!(bulk.busy(), "ending it is left to the readers");
        bulk.observe(&mut reader, 1, at(500));
        // worker: quiet at start; reader busy; worker busy; worker quiet; reader quiet.
        assert_eq!(*rec.0.lock(), [false, true, true, false, false]);
    }

    struct Refuse;
    impl Scheduling for Refuse {
        fn set_bulk(&self, _: bool) -> io::Result<()> {
            Err(io::Error::from(io::ErrorKind::PermissionDenied))
        }
    }

    #[test]
    fn a_refused_hint_is_not_tried_again() {
        let bulk = Bulk::new(Some(Arc::new(Refuse)));
        let mut t = ThreadBulk::default();
        bulk.observe(&mut t, 32, at(0));
        assert!(t.failed && t.on.is_none());
        assert!(!bulk.needs_observe(&t, 32));
    }

    #[test]
    fn without_a_hint_nothing_is_tracked() {
        let bulk = Bulk::new(None);
        let mut t = ThreadBulk::default();
        assert!(!bulk.needs_observe(&t, 128));
        bulk.observe(&mut t, 128, at(0));
        assert!(!bulk.busy());
    }
}
