//! Clocks: where the device gets the time.
//!
//! The protocol's timers (rekey after 120 s, reject after 180 s, zero keys after 540 s) must count
//! time the machine spends asleep, or keys outlive their limits across a suspend. The device
//! takes its clock from the embedder: the Linux binaries pass a CLOCK_BOOTTIME clock. The
//! default ([`default_clock`]) is [`ContinuousClock`] (`mach_continuous_time`) on Apple targets,
//! where std's `Instant` stops while the machine sleeps, and [`MonotonicClock`] (std's `Instant`)
//! elsewhere. Tests use [`FakeClock`] and drive every timer in microseconds.

use parking_lot::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use vpn_proto::time::Instant;

/// A source of monotonic and wall-clock time.
pub trait Clock: Send + Sync + 'static {
    /// Monotonic now. Must keep counting while the machine sleeps where the platform allows.
    fn now(&self) -> Instant;

    /// Wall-clock time since the Unix epoch: TAI64N timestamps and `last_handshake_time`.
    fn wall(&self) -> Duration {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
    }

    /// Registers a function to call whenever time jumps forward by other means than passing
    /// (a fake clock advancing). Real clocks never call it.
    fn on_advance(&self, waker: Arc<dyn Fn() + Send + Sync>) {
        let _ = waker;
    }

    /// Called by the timer thread every time it wakes, at least once a second: a clock that
    /// reads a counter between readings of a real clock ([`CycleClock`]) takes a fresh
    /// reading here.
    fn refresh(&self) {}
}

/// The clock `Options::default()` gives a device: [`ContinuousClock`] on Apple targets (it
/// counts sleep), [`MonotonicClock`] elsewhere (embedders on Linux pass CLOCK_BOOTTIME).
pub fn default_clock() -> Arc<dyn Clock> {
    #[cfg(target_vendor = "apple")]
    {
        Arc::new(ContinuousClock)
    }
    #[cfg(not(target_vendor = "apple"))]
    {
        Arc::new(MonotonicClock::default())
    }
}

/// `nanos` of a clock's own count as an [`Instant`] a day later, so that "long ago"
/// (`Instant::ZERO`) really is long ago even on a machine that booted a minute ago.
fn a_day_after(nanos: u128) -> Instant {
    let d = nanos.saturating_add(86_400_000_000_000);
    Instant::from_nanos(u64::try_from(d).unwrap_or(u64::MAX))
}

/// darwin's clock that keeps counting while the machine sleeps (`mach_continuous_time`), so the
/// 120/180/540 s key timers expire on time after a Mac wakes; std's `Instant`
/// (`mach_absolute_time`) would stretch them by the time asleep. WireGuardKit patches Go's
/// runtime for the same reason.
#[cfg(target_vendor = "apple")]
pub struct ContinuousClock;

#[cfg(target_vendor = "apple")]
impl Clock for ContinuousClock {
    fn now(&self) -> Instant {
        a_day_after(u128::from(vpn_sys::darwin::clock::continuous_time_nanos()))
    }
}

/// std's monotonic clock (CLOCK_MONOTONIC on Linux: does not count suspend).
pub struct MonotonicClock {
    origin: std::time::Instant,
}

impl Default for MonotonicClock {
    fn default() -> Self {
        MonotonicClock {
            origin: std::time::Instant::now(),
        }
    }
}

impl Clock for MonotonicClock {
    fn now(&self) -> Instant {
        a_day_after(self.origin.elapsed().as_nanos())
    }
}

/// A clock that moves only when told to. Wall time moves with it.
pub struct FakeClock {
    nanos: AtomicU64,
    wall_base: Duration,
    wakers: Mutex<Vec<Arc<dyn Fn() + Send + Sync>>>,
}

impl FakeClock {
    /// A fake clock starting a day after its origin.
    pub fn new() -> Arc<FakeClock> {
        Arc::new(FakeClock {
            nanos: AtomicU64::new(86_400_000_000_000),
            wall_base: Duration::from_secs(1_700_000_000),
            wakers: Mutex::new(Vec::new()),
        })
    }

    /// Moves time forward by `d` and wakes whoever waits on deadlines.
    pub fn advance(&self, d: Duration) {
        self.nanos.fetch_add(
            u64::try_from(d.as_nanos()).unwrap_or(u64::MAX),
            Ordering::SeqCst,
        );
        let wakers = self.wakers.lock().clone();
        for w in wakers {
            w();
        }
    }
}

impl Clock for FakeClock {
    fn now(&self) -> Instant {
        Instant::from_nanos(self.nanos.load(Ordering::SeqCst))
    }

    fn wall(&self) -> Duration {
        self.wall_base + Duration::from_nanos(self.nanos.load(Ordering::SeqCst))
    }

    fn on_advance(&self, waker: Arc<dyn Fn() + Send + Sync>) {
        self.wakers.lock().push(waker);
    }
}

impl<C: Clock> Clock for Arc<C> {
    fn now(&self) -> Instant {
        (**self).now()
    }
    fn wall(&self) -> Duration {
        (**self).wall()
    }
    fn on_advance(&self, waker: Arc<dyn Fn() + Send + Sync>) {
        (**self).on_advance(waker)
    }
    fn refresh(&self) {
        (**self).refresh()
    }
}

/// CLOCK_BOOTTIME read through a cycle counter: `quanta`'s clock (the TSC where the CPU says
/// it runs at a constant rate, else CLOCK_MONOTONIC) plus an offset to `inner`, measured
/// again on every [`Clock::refresh`] (the timer thread, at least once a second) and at once on
/// [`CycleClock::invalidate`] (the daemon calls it when the kernel says time jumped: a resume
/// from suspend, which a counter that stood still through it cannot see).
///
/// Why: on a tunnel idle between packets, every read of the kernel's clock is a cache and TLB
/// miss on the kernel's timekeeping page, and a lone packet needs the time on each hop; the
/// counter is a register. Kept because a same-run A/B measured the round trip through it
/// lower (`docs/design-notes.md`, "Tuning artifacts, each measured"); `quanta` measured the
/// same as the project's own interpolating clock that it replaced.
///
/// An answer may differ from `inner` by the counter's rate error over the time since the last
/// refresh (microseconds) and is not guaranteed monotonic across refreshes; the protocol's
/// timers count seconds. A refresh that finds the counter off by more than a millisecond
/// three times in a row (a counter the kernel no longer trusts) retires it: every answer then
/// reads `inner`.
#[cfg(target_os = "linux")]
pub struct CycleClock<C> {
    inner: C,
    counter: Box<dyn Fn() -> u64 + Send + Sync>,
    /// `inner`'s nanoseconds minus the counter's, wrapping.
    offset: AtomicU64,
    /// Refreshes in a row that found the counter off by more than [`Self::TOLERANCE`].
    misses: std::sync::atomic::AtomicU32,
    retired: std::sync::atomic::AtomicBool,
}

#[cfg(target_os = "linux")]
impl<C: Clock> CycleClock<C> {
    /// Largest disagreement with `inner` a refresh takes as the counter's drift.
    const TOLERANCE: u64 = 1_000_000;
    /// Refreshes in a row off by more than that before the counter is retired.
    const MISSES: u32 = 3;

    /// `inner` read through `quanta`'s clock.
    pub fn new(inner: C) -> Self {
        let clock = quanta::Clock::new();
        let origin = clock.now();
        Self::with_counter(inner, move || {
            u64::try_from(clock.now().duration_since(origin).as_nanos()).unwrap_or(u64::MAX)
        })
    }

    /// `inner` read through `counter` (nanoseconds from any origin).
    pub fn with_counter(inner: C, counter: impl Fn() -> u64 + Send + Sync + 'static) -> Self {
        let c = CycleClock {
            inner,
            counter: Box::new(counter),
            offset: AtomicU64::new(0),
            misses: Default::default(),
            retired: Default::default(),
        };
        c.invalidate();
        c
    }

    /// Measures the offset again now: for when the system says time jumped.
    pub fn invalidate(&self) {
        self.anchor();
    }

    /// Stops using the counter for good: every answer reads `inner` from now on.
    pub fn retire(&self) {
        self.retired.store(true, Ordering::Relaxed);
    }

    /// Whether answers come from the counter (not retired).
    pub fn is_interpolating(&self) -> bool {
        !self.retired.load(Ordering::Relaxed)
    }

    /// Reads `inner` between two counter readings and stores the offset; returns how far the
    /// old offset was off.
    fn anchor(&self) -> u64 {
        let c1 = (self.counter)();
        let n = self.inner.now().as_nanos();
        let c2 = (self.counter)();
        let c = c1 + c2.saturating_sub(c1) / 2;
        let predicted = c.wrapping_add(self.offset.load(Ordering::Relaxed));
        self.offset.store(n.wrapping_sub(c), Ordering::Relaxed);
        predicted.abs_diff(n)
    }
}

#[cfg(target_os = "linux")]
impl<C: Clock> Clock for CycleClock<C> {
    fn now(&self) -> Instant {
        if self.retired.load(Ordering::Relaxed) {
            return self.inner.now();
        }
        Instant::from_nanos((self.counter)().wrapping_add(self.offset.load(Ordering::Relaxed)))
    }
    fn wall(&self) -> Duration {
        self.inner.wall()
    }
    fn on_advance(&self, waker: Arc<dyn Fn() + Send + Sync>) {
        self.inner.on_advance(waker)
    }
    fn refresh(&self) {
        if self.retired.load(Ordering::Relaxed) {
            return;
        }
        if self.anchor() <= Self::TOLERANCE {
            self.misses.store(0, Ordering::Relaxed);
        } else if self.misses.fetch_add(1, Ordering::Relaxed) + 1 >= Self::MISSES {
            tracing::warn!("clock: the cycle counter keeps drifting; reading the clock only");
            self.retire();
        }
    }
}

/// Linux's clock that keeps counting while the machine sleeps (`CLOCK_BOOTTIME`), so the
/// 120/180/540 s key timers expire on time after a resume; std's `Instant` (`CLOCK_MONOTONIC`)
/// stops during suspend. The daemon reads it through a cycle counter ([`CycleClock`]); an app
/// embedding a device on a machine that sleeps passes it with `Options::with_clock`.
#[cfg(target_os = "linux")]
#[derive(Clone, Copy, Debug, Default)]
pub struct BootTimeClock;

#[cfg(target_os = "linux")]
impl Clock for BootTimeClock {
    fn now(&self) -> Instant {
        // A day ahead, as the other clocks here, so that "long ago" (zero) is long ago even on
        // a machine that booted a minute ago.
        let d = vpn_sys::daemon::boottime() + Duration::from_secs(86_400);
        Instant::from_nanos(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(target_os = "linux")]
    #[test]
    fn boottime_clock_is_monotonic_and_far_from_zero() {
        let a = BootTimeClock.now();
        std::thread::sleep(Duration::from_millis(2));
        let b = BootTimeClock.now();
        assert!(b.as_nanos() >= a.as_nanos() + 2_000_000);
        assert!(
            a.as_nanos() >= 86_400 * 1_000_000_000,
            "zero is a day in the past"
        );
    }

    #[test]
    fn clocks_start_a_day_after_their_origin_and_saturate() {
        assert_eq!(a_day_after(5), Instant::from_nanos(86_400_000_000_005));
        assert_eq!(a_day_after(u128::MAX), Instant::from_nanos(u64::MAX));
    }

    #[test]
    fn the_default_clock_is_long_after_zero_and_does_not_go_back() {
        let c = default_clock();
        let (a, b) = (c.now(), c.now());
        assert!(a >= Instant::from_nanos(86_400_000_000_000) && b >= a);
    }

    #[cfg(target_os = "linux")]
    mod cycle {
        use super::*;

        /// A counter that runs with a fake clock, `skew` nanoseconds behind it.
        fn rig() -> (Arc<FakeClock>, Arc<AtomicU64>, CycleClock<Arc<FakeClock>>) {
            let inner = FakeClock::new();
            let skew = Arc::new(AtomicU64::new(0));
            let (i, k) = (inner.clone(), skew.clone());
            let clock = CycleClock::with_counter(inner.clone(), move || {
                i.now().as_nanos() - k.load(Ordering::SeqCst)
            });
            (inner, skew, clock)
        }

        #[test]
        fn answers_follow_the_inner_clock() {
            let (inner, _, clock) = rig();
            assert_eq!(clock.now(), inner.now());
            inner.advance(Duration::from_secs(3));
            assert_eq!(clock.now(), inner.now());
        }

        #[test]
        fn a_jump_the_counter_missed_lasts_until_invalidate() {
            let (inner, skew, clock) = rig();
            // A suspend the counter stood still through: it falls behind by 10 s.
            skew.store(10_000_000_000, Ordering::SeqCst);
            inner.advance(Duration::from_secs(10));
            assert!(clock.now() < inner.now());
            clock.invalidate();
            assert_eq!(clock.now(), inner.now());
            assert!(clock.is_interpolating());
        }

        #[test]
        fn a_refresh_corrects_drift_and_a_counter_that_keeps_drifting_is_retired() {
            let (inner, skew, clock) = rig();
            skew.store(500_000, Ordering::SeqCst); // within tolerance: corrected
            clock.refresh();
            assert_eq!(clock.now(), inner.now());
            assert!(clock.is_interpolating());
            for n in 1..=3u64 {
                skew.store(500_000 + n * 2_000_000, Ordering::SeqCst);
                assert!(clock.is_interpolating(), "retired after {n} misses");
                clock.refresh();
            }
            assert!(!clock.is_interpolating());
            skew.store(123_456_789, Ordering::SeqCst);
            assert_eq!(clock.now(), inner.now(), "a retired counter is not read");
        }

        #[test]
        fn quanta_tracks_boot_time() {
            let clock = CycleClock::new(BootTimeClock);
            for _ in 0..20 {
                let before = BootTimeClock.now();
                let t = clock.now();
                let after = BootTimeClock.now();
                assert!(
                    t.as_nanos() + 1_000_000 >= before.as_nanos()
                        && t.as_nanos() <= after.as_nanos() + 1_000_000,
                    "{before:?} {t:?} {after:?}"
                );
                std::thread::sleep(Duration::from_millis(5));
            }
        }
    }
}
