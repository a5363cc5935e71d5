//! Scheduling hints for the data-path threads while the device carries bulk traffic.
//!
//! Why: with a TCP stream through the tunnel, the thread moving the data (the TUN reader on the
//! sending side, a socket reader on the receiving side) shares its CPU with the thread carrying
//! the ACKs the other way, and the kernel lets a thread that wakes up preempt the one running.
//! Every few ACK datagrams wake the ACK thread, which preempts the data thread in the middle
//! of its batch: about 5 000 preemptions per second per side on the benchmark VM, each costing
//! both threads their caches. While the device is busy, a reader whose own reads are small
//! (the light direction) is marked (Linux `SCHED_BATCH`: it does not preempt on wake-up, the
//! scheduler tick still shares the CPU) and takes a whole batch of ACKs once the data thread
//! blocks (`docs/design-notes.md`).
//!
//! The thread with the large reads is not marked: it must keep preempting the application
//! that feeds it (marking it too let an unthrottled UDP sender fill the TUN queue and halved
//! 64-byte UDP delivery). Nor is anything marked on a quiet tunnel, where a thread that does
//! not preempt would make a lone packet wait behind whatever else runs on its CPU: the mark
//! goes once no large read has been seen for `BULK_HOLD`.
//!
//! The other hint runs the other way: a thread that has just written a burst of inbound
//! datagrams to the TUN yields its CPU (`DATAGRAM_BURST`), so that an application reading
//! them on the same CPU drains its socket before the next burst overflows it.
//!
//! These two are the data path's only scheduling heuristics, and each is here because a
//! same-run A/B on `make bench` shows it gaining on a figure users see (`docs/design-notes.md`,
//! "Tuning artifacts, each measured"). Each has its own switch: [`crate::Options::scheduling`]
//! (the daemon's `VPN_SCHED_BATCH=0`) and [`crate::Options::datagram_yield`]
//! (`VPN_DATAGRAM_YIELD=0`). A new heuristic goes here too, with a switch and its A/B.

use std::io;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;
use vpn_proto::time::Instant;

/// How a data-path thread is marked. Called on the thread itself.
pub trait Scheduling: Send + Sync + 'static {
    /// `true`: the calling thread carries the light direction of bulk traffic and should not
    /// preempt others when it wakes (e.g. `SCHED_BATCH`); `false`: back to the default policy.
    fn set_light(&self, light: bool) -> io::Result<()>;
}

/// Packets in one read that mark the device busy (a TSO frame's segments, a GRO run).
pub(crate) const BULK_READ: usize = 16;
/// How long the device stays busy after the last such read.
pub(crate) const BULK_HOLD: Duration = Duration::from_millis(100);

/// Inbound datagrams (UDP) in one TUN write after which the writing thread yields its CPU.
///
/// Why: a reader that always finds more datagrams waiting keeps its CPU through the scheduler's
/// slice, and the application it feeds on that CPU, woken by the first write, waits meanwhile.
/// TCP applications lose nothing by waiting (their window closes), datagram receivers lose
/// whatever overflows their socket buffer: with 64-byte datagrams and default buffers, iperf3
/// behind our receiver got 103 000–107 000 per second out of 166 000 delivered to its socket,
/// 143 000–150 000 with a yield after such writes (`docs/design-notes.md`). A yield with
/// nothing else runnable is one cheap system call, so the bar is low; TCP-only writes never
/// pay it (yielding after them cost a TCP stream 13 % in context switches).
pub(crate) const DATAGRAM_BURST: usize = 16;

/// The device-wide state: busy until a time, and how threads are marked.
pub(crate) struct Bulk {
    sched: Option<Arc<dyn Scheduling>>,
    /// Yield after a TUN write of at least [`DATAGRAM_BURST`] datagrams.
    datagram_yield: bool,
    /// Device clock nanoseconds until which the device counts as busy; 0: quiet.
    until: AtomicU64,
}

/// One thread's side: whether it is marked now, `None` until first set (a thread inherits its
/// policy from whichever thread started it, perhaps a marked one), and until when its own
/// reads count as large.
#[derive(Default)]
pub(crate) struct ThreadBulk {
    on: Option<bool>,
    heavy_until: u64,
    /// Marking failed once (no permission, not supported): not tried again on this thread.
    failed: bool,
}

impl Bulk {
    pub(crate) fn new(sched: Option<Arc<dyn Scheduling>>, datagram_yield: bool) -> Self {
        Self {
            sched,
            datagram_yield,
            until: AtomicU64::new(0),
        }
    }

    /// Whether a read of `packets` has anything to do with the clock and the marks: false on a
    /// quiet device for a thread that is not marked, the common quiet case, which then costs
    /// one relaxed load and no clock read.
    #[inline]
    fn needs_observe(&self, t: &ThreadBulk, packets: usize) -> bool {
        self.sched.is_some()
            && !t.failed
            && (packets >= BULK_READ || t.on != Some(false) || self.until.load(Relaxed) != 0)
    }

    /// A reader read `packets`; `now` is asked only when needed (see `needs_observe`). A large
    /// read keeps the device busy and makes this thread a heavy one for the hold; the first
    /// reader to find the busy time past ends it. The thread is marked while the device is busy
    /// and it is not heavy.
    #[inline]
    pub(crate) fn observe(
        &self,
        t: &mut ThreadBulk,
        packets: usize,
        now: impl FnOnce() -> Instant,
    ) {
        if self.needs_observe(t, packets) {
            self.observe_at(t, packets, now());
        }
    }

    fn observe_at(&self, t: &mut ThreadBulk, packets: usize, now: Instant) {
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
        if packets >= BULK_READ {
            t.heavy_until = now + hold;
        }
        self.follow(t, busy && now >= t.heavy_until);
    }

    /// Marks the calling thread (`light`) or not, if it is not already.
    fn follow(&self, t: &mut ThreadBulk, light: bool) {
        if t.on == Some(light) {
            return;
        }
        let Some(sched) = &self.sched else { return };
        match sched.set_light(light) {
            Ok(()) => t.on = Some(light),
            Err(e) => {
                tracing::debug!("scheduling hint not applied ({e}); not trying again");
                t.failed = true;
            }
        }
    }

    /// A thread wrote `datagrams` inbound UDP packets to the TUN in one write: after a burst,
    /// give the CPU to whatever that woke (see [`DATAGRAM_BURST`]). Returns whether it yielded.
    #[inline]
    pub(crate) fn wrote_datagrams(&self, datagrams: usize) -> bool {
        let burst = self.datagram_yield && datagrams >= DATAGRAM_BURST;
        if burst {
            std::thread::yield_now();
        }
        burst
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

    #[test]
    fn yields_after_datagram_bursts_only_when_enabled() {
        let on = Bulk::new(None, true);
        assert!(!on.wrote_datagrams(0));
        assert!(!on.wrote_datagrams(DATAGRAM_BURST - 1));
        assert!(on.wrote_datagrams(DATAGRAM_BURST));
        assert!(on.wrote_datagrams(128));
        let off = Bulk::new(None, false);
        assert!(!off.wrote_datagrams(128));
    }

    /// Records what the calling thread was told.
    #[derive(Default)]
    struct Record(Mutex<Vec<bool>>);

    impl Scheduling for Record {
        fn set_light(&self, light: bool) -> io::Result<()> {
            self.0.lock().push(light);
            Ok(())
        }
    }

    fn at(ms: u64) -> Instant {
        Instant::from_nanos(1_000_000_000 + ms * 1_000_000)
    }

    #[test]
    fn while_busy_only_the_light_reader_is_marked() {
        let rec = Arc::new(Record::default());
        let bulk = Bulk::new(Some(rec.clone()), true);
        let (mut data, mut acks) = (ThreadBulk::default(), ThreadBulk::default());
        // A thread's first read sets its policy once (it may have inherited a marked one)...
        assert!(bulk.needs_observe(&acks, 1));
        bulk.observe(&mut acks, 1, || at(0));
        assert_eq!(*rec.0.lock(), [false]);
        // ...then, quiet, small reads cost nothing and change nothing.
        assert!(!bulk.needs_observe(&acks, 1));
        bulk.observe(&mut acks, 1, || at(0));
        assert_eq!(rec.0.lock().len(), 1);
        // A large read makes the device busy; its reader is heavy and stays unmarked...
        bulk.observe(&mut data, 40, || at(1));
        assert!(bulk.busy());
        assert_eq!(data.on, Some(false));
        // ...and the ACK thread, reading little, is marked.
        bulk.observe(&mut acks, 2, || at(2));
        assert_eq!(acks.on, Some(true));
        // Within the hold nothing changes, even if the data thread reads little for a while.
        bulk.observe(&mut acks, 1, || at(90));
        bulk.observe(&mut data, 1, || at(95));
        assert_eq!((data.on, acks.on), (Some(false), Some(true)));
        // Past the hold: the first reader ends the busy period and unmarks itself.
        bulk.observe(&mut acks, 1, || at(1 + 101));
        assert!(!bulk.busy());
        assert_eq!(acks.on, Some(false));
        assert_eq!(*rec.0.lock(), [false, false, true, false]);
        // And a quiet device costs nothing again.
        assert!(!bulk.needs_observe(&acks, 1) && !bulk.needs_observe(&data, 1));
    }

    #[test]
    fn a_reader_whose_reads_shrink_becomes_light() {
        let rec = Arc::new(Record::default());
        let bulk = Bulk::new(Some(rec.clone()), true);
        let (mut a, mut b) = (ThreadBulk::default(), ThreadBulk::default());
        bulk.observe(&mut a, 64, || at(0));
        // The direction turns round (iperf3 -R): b reads large, a small.
        for ms in (10..400).step_by(10) {
            bulk.observe(&mut b, 64, || at(ms));
            bulk.observe(&mut a, 2, || at(ms + 5));
        }
        assert_eq!((a.on, b.on), (Some(true), Some(false)));
    }

    #[test]
    fn steady_bulk_keeps_the_light_reader_marked() {
        let rec = Arc::new(Record::default());
        let bulk = Bulk::new(Some(rec.clone()), true);
        let (mut data, mut acks) = (ThreadBulk::default(), ThreadBulk::default());
        for ms in (0..2_000).step_by(10) {
            bulk.observe(&mut data, 64, || at(ms));
            bulk.observe(&mut acks, 1, || at(ms + 5));
        }
        assert_eq!(
            *rec.0.lock(),
            [false, true],
            "each set once, never dropped while busy"
        );
    }

    struct Refuse;
    impl Scheduling for Refuse {
        fn set_light(&self, _: bool) -> io::Result<()> {
            Err(io::Error::from(io::ErrorKind::PermissionDenied))
        }
    }

    #[test]
    fn a_refused_hint_is_not_tried_again() {
        let bulk = Bulk::new(Some(Arc::new(Refuse)), true);
        let mut t = ThreadBulk::default();
        bulk.observe(&mut t, 32, || at(0));
        assert!(t.failed && t.on.is_none());
        assert!(!bulk.needs_observe(&t, 32));
    }

    #[test]
    fn without_a_hint_nothing_is_tracked() {
        let bulk = Bulk::new(None, true);
        let mut t = ThreadBulk::default();
        assert!(!bulk.needs_observe(&t, 128));
        bulk.observe(&mut t, 128, || at(0));
        assert!(!bulk.busy());
    }
}
