//! Clocks: where the device gets the time.
//!
//! The protocol's timers (rekey after 120 s, reject after 180 s, zero keys after 540 s) must count
//! time the machine spends asleep, or keys outlive their limits across a suspend. The device
//! takes its clock from the embedder: the Linux binaries pass a CLOCK_BOOTTIME clock. The
//! default ([`default_clock`]) is [`ContinuousClock`] (`mach_continuous_time`) on Apple targets,
//! where std's `Instant` stops while the machine sleeps, and [`MonotonicClock`] (std's `Instant`)
//! elsewhere. Tests use [`FakeClock`] and drive every timer in microseconds.

use parking_lot::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
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
    /// interpolates ([`CycleClock`]) takes a fresh reading of its source here.
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

/// A clock read from a CPU cycle counter between readings of a real clock.
///
/// On a tunnel idle between packets, every read of the kernel's clock is a cache and TLB miss
/// on the kernel's timekeeping page (about 3 µs on the benchmark VM, against about 10 ns for
/// the cycle counter), and a lone packet needs the time on each hop: keypair age, timers.
/// `CycleClock` answers from `counter` when it can vouch for the answer and reads `inner`
/// otherwise:
///
/// - the counter's rate is measured against `inner` over intervals of at least a second, and
///   interpolation starts only once two intervals in a row agree within 0.1 %;
/// - an answer is interpolated from a reading of `inner` at most [`CycleClock::MAX_SPAN`] old
///   by the counter (the timer thread refreshes the reading every second); older, or a counter
///   that went backwards, reads `inner`;
/// - every reading of `inner` checks the interpolation: off by more than 1 ms (a suspend that
///   the counter did not count, a rate change) and interpolation stops until the rate is
///   measured again;
/// - [`CycleClock::invalidate`] stops it at once: the embedder calls it when the system says
///   time jumped (the Linux daemon on resume from suspend, through a timerfd);
/// - every ten seconds a refresh asks the counter whether it is still fit ([`Counter::fit`]:
///   the kernel still keeps time with it); once it is not, every answer reads `inner`.
///
/// An interpolated answer may differ from `inner` by the rate's error over at most two seconds
/// (well under the 1 ms check) and is not guaranteed monotonic against `inner`'s; the
/// protocol's timers count seconds.
pub struct CycleClock<C, K> {
    /// First, in a cache line of its own: all an interpolated read touches besides the counter.
    mapping: Mapping,
    inner: C,
    counter: K,
    cal: Mutex<Calibration>,
    /// Set for good when the counter stops being fit.
    retired: AtomicBool,
    /// When (`inner`'s nanoseconds) the counter's fitness was last asked.
    fit_checked: AtomicU64,
}

/// A cycle counter for [`CycleClock`]: constant rate, never stopping, agreeing across CPUs.
pub trait Counter: Send + Sync + 'static {
    /// The current count.
    fn cycles(&self) -> u64;

    /// Whether the counter still has the properties above. Asked by [`Clock::refresh`] every
    /// ten seconds (off the packet path); once false, the clock stops using the counter for
    /// good.
    fn fit(&self) -> bool {
        true
    }
}

/// The published mapping from cycles to nanoseconds, under a seqlock.
#[repr(align(64))]
struct Mapping {
    /// Odd while the fields below change.
    seq: AtomicU64,
    base_cycles: AtomicU64,
    base_nanos: AtomicU64,
    /// Nanoseconds per cycle in 32.32 fixed point; 0 while not calibrated.
    mult: AtomicU64,
    /// Counter span an interpolation may cover (`MAX_SPAN` in cycles).
    max_cycles: AtomicU64,
}

/// The writer's side of the calibration.
#[derive(Default)]
struct Calibration {
    /// Start of the interval the rate is being measured over: (cycles, nanos).
    anchor: Option<(u64, u64)>,
    /// The rate the previous interval measured (32.32), 0 if none.
    last_mult: u64,
}

impl<C: Clock, K: Counter> CycleClock<C, K> {
    /// The longest counter span an interpolated answer covers.
    pub const MAX_SPAN: Duration = Duration::from_secs(2);
    /// Shortest interval a rate is measured over.
    const CALIBRATION: u64 = 1_000_000_000;
    /// Largest disagreement with `inner` that keeps interpolation on.
    const TOLERANCE: u64 = 1_000_000;
    /// Most counter ticks a reading of `inner` may take to be used: an uninterrupted
    /// `clock_gettime` takes under 10 000 cycles even cold; 65 536 (about 20 µs at 3 GHz)
    /// bounds a reading's timing error to 0.002 % of a one-second interval.
    const READ_LIMIT: u64 = 1 << 16;
    /// Readings a refresh takes at most to get one that was not interrupted.
    const REFRESH_TRIES: u32 = 4;
    /// How often (nanoseconds of `inner`) a refresh asks whether the counter is still fit.
    const FIT_CHECK: u64 = 10_000_000_000;

    /// Interpolates `inner` with `counter`.
    pub fn new(inner: C, counter: K) -> Self {
        let c = CycleClock {
            mapping: Mapping {
                seq: AtomicU64::new(0),
                base_cycles: AtomicU64::new(0),
                base_nanos: AtomicU64::new(0),
                mult: AtomicU64::new(0),
                max_cycles: AtomicU64::new(0),
            },
            inner,
            counter,
            cal: Mutex::new(Calibration::default()),
            retired: AtomicBool::new(false),
            fit_checked: AtomicU64::new(0),
        };
        c.refresh();
        c
    }

    /// Whether reads are currently interpolated (the rate is calibrated).
    pub fn is_interpolating(&self) -> bool {
        self.mapping.mult.load(Ordering::Relaxed) != 0
    }

    /// Stops interpolating at once and measures the rate again from the next reading: for
    /// when the system says time jumped (a resume from suspend, the wall clock set), which a
    /// counter that stood still would otherwise hide until the next real reading.
    pub fn invalidate(&self) {
        let mut cal = self.cal.lock();
        *cal = Calibration::default();
        self.publish(0, 0, 0);
        tracing::debug!("clock: cycle counter interpolation reset");
    }

    /// Stops using the counter for good: every answer reads `inner` from now on.
    pub fn retire(&self) {
        let _cal = self.cal.lock();
        self.retired.store(true, Ordering::Relaxed);
        self.publish(0, 0, 0);
    }

    /// The interpolated time at counter value `c`, if the published mapping vouches for it.
    fn interpolate(&self, c: u64) -> Option<u64> {
        let s1 = self.mapping.seq.load(Ordering::Acquire);
        if s1 & 1 != 0 {
            return None;
        }
        let base_c = self.mapping.base_cycles.load(Ordering::Relaxed);
        let base_n = self.mapping.base_nanos.load(Ordering::Relaxed);
        let mult = self.mapping.mult.load(Ordering::Relaxed);
        let max = self.mapping.max_cycles.load(Ordering::Relaxed);
        std::sync::atomic::fence(Ordering::Acquire);
        if self.mapping.seq.load(Ordering::Relaxed) != s1 || mult == 0 || c < base_c {
            return None;
        }
        let span = c - base_c;
        if span > max {
            return None;
        }
        base_n.checked_add(scale(span, mult)?)
    }

    /// Reads `inner` with the counter around it, checks and updates the mapping. Returns the
    /// reading. Only one thread updates at a time; the others just read `inner`.
    ///
    /// A reading interrupted for long (more than [`Self::READ_LIMIT`] ticks) is not used; up
    /// to `tries` readings are taken until one is not. The packet path takes one. The timer
    /// thread's refresh takes several: on a busy machine a thread that just woke from its
    /// sleep is often preempted within its first microseconds, and that is exactly where the
    /// first reading falls (seen on the two-CPU VM with three busy loops: 13 of 20 first
    /// readings took 330 000 to 860 000 cycles, every second reading under 600), so with one
    /// try the rate was never measured under CI load.
    fn observe(&self, tries: u32) -> u64 {
        if self.retired.load(Ordering::Relaxed) {
            return self.inner.now().as_nanos();
        }
        let mut n = 0;
        for _ in 0..tries.max(1) {
            let c1 = self.counter.cycles();
            n = self.inner.now().as_nanos();
            let c2 = self.counter.cycles();
            if Self::uninterrupted(c1, c2) {
                if let Some(mut cal) = self.cal.try_lock() {
                    self.record(&mut cal, c1, n, c2);
                }
                break;
            }
        }
        n
    }

    /// Whether a reading between counter values `c1` and `c2` was quick enough to be used.
    fn uninterrupted(c1: u64, c2: u64) -> bool {
        c2 >= c1 && c2 - c1 <= Self::READ_LIMIT
    }

    /// Takes a reading `n` of `inner` made between counter values `c1` and `c2` into the
    /// calibration and the published mapping.
    fn record(&self, cal: &mut Calibration, c1: u64, n: u64, c2: u64) {
        // A reading interrupted for long says little about when `n` was taken.
        if !Self::uninterrupted(c1, c2) || self.retired.load(Ordering::Relaxed) {
            return;
        }
        let c = c1 + (c2 - c1) / 2;
        let mut mult = self.mapping.mult.load(Ordering::Relaxed);
        let base_c = self.mapping.base_cycles.load(Ordering::Relaxed);
        let base_n = self.mapping.base_nanos.load(Ordering::Relaxed);
        if c <= base_c && n <= base_n {
            // Taken before the reading another thread published meanwhile: older news, not
            // a counter going backwards.
            return;
        }
        if mult != 0 {
            let predicted = c
                .checked_sub(base_c)
                .map(|span| base_n.saturating_add(scale(span, mult).unwrap_or(u64::MAX)));
            if predicted.is_none_or(|p| p.abs_diff(n) > Self::TOLERANCE) {
                mult = 0;
                *cal = Calibration::default();
            }
        }
        match cal.anchor {
            Some((ac, an)) if c > ac && n >= an.saturating_add(Self::CALIBRATION) => {
                let measured =
                    u64::try_from((u128::from(n - an) << 32) / u128::from(c - ac)).unwrap_or(0);
                let prev = cal.last_mult;
                if prev != 0 && measured != 0 && measured.abs_diff(prev) <= prev / 1000 {
                    mult = measured;
                } else {
                    mult = 0;
                }
                cal.last_mult = measured;
                cal.anchor = Some((c, n));
            }
            Some((ac, an)) if c >= ac && n >= an => {}
            _ => {
                // First reading, or the counter or the clock went backwards: start over.
                mult = 0;
                *cal = Calibration {
                    anchor: Some((c, n)),
                    last_mult: 0,
                };
            }
        }
        let was = self.mapping.mult.load(Ordering::Relaxed);
        if (was == 0) != (mult == 0) {
            tracing::debug!(
                interpolating = mult != 0,
                "clock: cycle counter interpolation"
            );
        }
        self.publish(c, n, mult);
    }

    /// Publishes a new mapping under the seqlock. Callers hold `cal`.
    fn publish(&self, c: u64, n: u64, mult: u64) {
        let max = if mult == 0 {
            0
        } else {
            let span = u128::from(u64::try_from(Self::MAX_SPAN.as_nanos()).unwrap_or(u64::MAX));
            u64::try_from((span << 32) / u128::from(mult)).unwrap_or(u64::MAX)
        };
        let s = self.mapping.seq.load(Ordering::Relaxed);
        self.mapping.seq.store(s.wrapping_add(1), Ordering::Relaxed);
        std::sync::atomic::fence(Ordering::Release);
        self.mapping.base_cycles.store(c, Ordering::Relaxed);
        self.mapping.base_nanos.store(n, Ordering::Relaxed);
        self.mapping.mult.store(mult, Ordering::Relaxed);
        self.mapping.max_cycles.store(max, Ordering::Relaxed);
        self.mapping.seq.store(s.wrapping_add(2), Ordering::Release);
    }
}

/// `span` cycles in nanoseconds at `mult` (32.32 nanoseconds per cycle).
fn scale(span: u64, mult: u64) -> Option<u64> {
    u64::try_from((u128::from(span) * u128::from(mult)) >> 32).ok()
}

impl<C: Clock, K: Counter> Clock for CycleClock<C, K> {
    fn now(&self) -> Instant {
        match self.interpolate(self.counter.cycles()) {
            Some(n) => Instant::from_nanos(n),
            None => Instant::from_nanos(self.observe(1)),
        }
    }
    fn wall(&self) -> Duration {
        self.inner.wall()
    }
    fn on_advance(&self, waker: Arc<dyn Fn() + Send + Sync>) {
        self.inner.on_advance(waker)
    }
    fn refresh(&self) {
        let n = self.observe(Self::REFRESH_TRIES);
        // The fitness check may be a file read: every ten seconds is often enough.
        let last = self.fit_checked.load(Ordering::Relaxed);
        if !self.retired.load(Ordering::Relaxed)
            && n.saturating_sub(last) >= Self::FIT_CHECK
            && self
                .fit_checked
                .compare_exchange(last, n, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
            && !self.counter.fit()
        {
            tracing::warn!("clock: the cycle counter is no longer fit; reading the clock only");
            self.retire();
        }
    }
}

/// Linux's clock that keeps counting while the machine sleeps (`CLOCK_BOOTTIME`), so the
/// 120/180/540 s key timers expire on time after a resume; std's `Instant` (`CLOCK_MONOTONIC`)
/// stops during suspend. The daemon interpolates it with the TSC ([`CycleClock`]); an app
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

/// A fast clock anchored to a real one: answers are `fast`'s nanoseconds plus an offset to
/// `inner`, measured again on every [`Clock::refresh`] (the timer thread, every second) and on
/// [`AnchoredClock::invalidate`] (a time jump).
#[cfg(target_os = "linux")]
pub struct AnchoredClock<C, F> {
    inner: C,
    fast: F,
    offset: AtomicU64,
}

#[cfg(target_os = "linux")]
impl<C: Clock, F: Fn() -> u64 + Send + Sync + 'static> AnchoredClock<C, F> {
    /// `fast` in nanoseconds, anchored to `inner`.
    pub fn new(inner: C, fast: F) -> Self {
        let c = AnchoredClock {
            inner,
            fast,
            offset: AtomicU64::new(0),
        };
        c.invalidate();
        c
    }

    /// Measures the offset again.
    pub fn invalidate(&self) {
        let f1 = (self.fast)();
        let n = self.inner.now().as_nanos();
        let f2 = (self.fast)();
        let f = f1 + (f2.saturating_sub(f1)) / 2;
        self.offset.store(n.wrapping_sub(f), Ordering::Relaxed);
    }
}

#[cfg(target_os = "linux")]
impl<C: Clock, F: Fn() -> u64 + Send + Sync + 'static> Clock for AnchoredClock<C, F> {
    fn now(&self) -> Instant {
        Instant::from_nanos((self.fast)().wrapping_add(self.offset.load(Ordering::Relaxed)))
    }
    fn wall(&self) -> Duration {
        self.inner.wall()
    }
    fn on_advance(&self, waker: Arc<dyn Fn() + Send + Sync>) {
        self.inner.on_advance(waker)
    }
    fn refresh(&self) {
        self.invalidate()
    }
}

/// `quanta`'s clock (the TSC where it is invariant, else CLOCK_MONOTONIC) in nanoseconds since
/// the first call.
#[cfg(target_os = "linux")]
pub fn quanta_nanos() -> impl Fn() -> u64 + Send + Sync + 'static {
    let clock = quanta::Clock::new();
    let origin = clock.now();
    move || u64::try_from(clock.now().duration_since(origin).as_nanos()).unwrap_or(u64::MAX)
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
    use std::sync::atomic::AtomicU32;

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

    /// A fake clock and a counter at 2 cycles per nanosecond moving together.
    struct Rig {
        inner: Arc<FakeClock>,
        cycles: Arc<AtomicU64>,
        fit: Arc<AtomicBool>,
        stalls: Arc<AtomicU32>,
        clock: CycleClock<Arc<FakeClock>, FakeCounter>,
    }

    /// Cycles, fitness, and how many of the next reads are each followed by a stall of 2^17
    /// cycles (65 µs at the rig's rate) that the fake clock does not see: a reading with such a
    /// read first in it was interrupted for long.
    struct FakeCounter(Arc<AtomicU64>, Arc<AtomicBool>, Arc<AtomicU32>);

    impl Counter for FakeCounter {
        fn cycles(&self) -> u64 {
            let stall = self
                .2
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                .is_ok();
            if stall {
                self.0.fetch_add(1 << 17, Ordering::SeqCst)
            } else {
                self.0.load(Ordering::SeqCst)
            }
        }
        fn fit(&self) -> bool {
            self.1.load(Ordering::SeqCst)
        }
    }

    impl Rig {
        fn new() -> Rig {
            let inner = FakeClock::new();
            let cycles = Arc::new(AtomicU64::new(1 << 40));
            let fit = Arc::new(AtomicBool::new(true));
            let stalls = Arc::new(AtomicU32::new(0));
            let clock = CycleClock::new(
                inner.clone(),
                FakeCounter(cycles.clone(), fit.clone(), stalls.clone()),
            );
            Rig {
                inner,
                cycles,
                fit,
                stalls,
                clock,
            }
        }
        /// Time passes: both move.
        fn pass(&self, d: Duration) {
            self.inner.advance(d);
            self.count(d);
        }
        /// Only the counter moves (its reading is what `now` interpolates from).
        fn count(&self, d: Duration) {
            self.cycles
                .fetch_add(2 * d.as_nanos() as u64, Ordering::SeqCst);
        }
        fn calibrate(&self) {
            for _ in 0..2 {
                self.pass(Duration::from_secs(1));
                self.clock.refresh();
            }
            assert!(self.clock.is_interpolating());
        }
    }

    #[test]
    fn interpolates_only_once_two_intervals_agree() {
        let r = Rig::new();
        assert!(!r.clock.is_interpolating());
        r.pass(Duration::from_secs(1));
        r.clock.refresh();
        assert!(!r.clock.is_interpolating(), "one interval is not enough");
        r.pass(Duration::from_secs(1));
        r.clock.refresh();
        assert!(r.clock.is_interpolating());
        let at = r.inner.now();
        // The counter says 500 ms passed; the fake clock, not read, still says `at`.
        r.count(Duration::from_millis(500));
        assert_eq!(
            r.clock.now(),
            Instant::from_nanos(at.as_nanos() + 500_000_000)
        );
        assert_eq!(r.inner.now(), at);
    }

    /// Under load the first reading after the timer thread wakes is often interrupted: a
    /// refresh reads again rather than losing the interval.
    #[test]
    fn a_refresh_reads_again_after_an_interrupted_reading() {
        let r = Rig::new();
        for _ in 0..2 {
            r.pass(Duration::from_secs(1));
            r.stalls.store(1, Ordering::SeqCst);
            r.clock.refresh();
            assert_eq!(r.stalls.load(Ordering::SeqCst), 0);
        }
        assert!(r.clock.is_interpolating());
        // The packet path reads once: an interrupted reading is not used, and not retried.
        // (`now` reads the counter once to try interpolating, then around its reading.)
        let r = Rig::new();
        for _ in 0..3 {
            r.pass(Duration::from_secs(1));
            r.stalls.store(2, Ordering::SeqCst);
            assert_eq!(r.clock.now(), r.inner.now());
            assert_eq!(r.stalls.load(Ordering::SeqCst), 0);
        }
        assert!(!r.clock.is_interpolating());
        // A refresh that is interrupted every time gives up, still answering the clock's time.
        let r = Rig::new();
        for _ in 0..3 {
            r.pass(Duration::from_secs(1));
            r.stalls.store(100, Ordering::SeqCst);
            r.clock.refresh();
            assert!(
                r.stalls.load(Ordering::SeqCst) >= 90,
                "a few tries, not a hundred"
            );
        }
        assert!(!r.clock.is_interpolating());
    }

    #[test]
    fn before_calibration_every_read_is_the_inner_clock() {
        let r = Rig::new();
        r.pass(Duration::from_millis(300));
        assert_eq!(r.clock.now(), r.inner.now());
        r.count(Duration::from_millis(300));
        assert_eq!(
            r.clock.now(),
            r.inner.now(),
            "counter alone must not move it"
        );
    }

    #[test]
    fn a_reading_older_than_the_span_reads_the_inner_clock() {
        let r = Rig::new();
        r.calibrate();
        r.pass(CycleClock::<Arc<FakeClock>, FakeCounter>::MAX_SPAN + Duration::from_millis(1));
        // Interpolating would give the same answer here; make them differ (within the
        // tolerance) to see who answers.
        r.inner.advance(Duration::from_micros(500));
        assert_eq!(r.clock.now(), r.inner.now());
        assert!(
            r.clock.is_interpolating(),
            "a consistent late reading keeps the rate"
        );
        // 7 ms off is more than the tolerance: the next reading stops interpolation.
        r.pass(CycleClock::<Arc<FakeClock>, FakeCounter>::MAX_SPAN + Duration::from_millis(1));
        r.inner.advance(Duration::from_millis(7));
        assert_eq!(r.clock.now(), r.inner.now());
        assert!(!r.clock.is_interpolating());
    }

    #[test]
    fn a_counter_going_backwards_reads_the_inner_clock() {
        let r = Rig::new();
        r.calibrate();
        r.inner.advance(Duration::from_millis(1));
        r.cycles.fetch_sub(1000, Ordering::SeqCst);
        assert_eq!(r.clock.now(), r.inner.now());
        assert!(!r.clock.is_interpolating(), "calibration starts over");
    }

    #[test]
    fn a_jump_the_counter_missed_stops_interpolation_at_the_next_refresh() {
        let r = Rig::new();
        r.calibrate();
        // A suspend: boot time moved a minute, the counter (say) not at all.
        r.inner.advance(Duration::from_secs(60));
        r.clock.refresh();
        assert!(!r.clock.is_interpolating());
        assert_eq!(r.clock.now(), r.inner.now());
        r.count(Duration::from_millis(100));
        assert_eq!(
            r.clock.now(),
            r.inner.now(),
            "no interpolation until recalibrated"
        );
        // The interval with the counter-only 100 ms measures a wrong rate; two clean ones after
        // it agree again.
        for _ in 0..3 {
            r.pass(Duration::from_secs(1));
            r.clock.refresh();
        }
        assert!(r.clock.is_interpolating());
    }

    #[test]
    fn a_rate_change_stops_interpolation() {
        let r = Rig::new();
        r.calibrate();
        // The counter now runs 1 % faster than it was measured at.
        let d = Duration::from_millis(900);
        r.inner.advance(d);
        r.cycles
            .fetch_add(2 * d.as_nanos() as u64 * 101 / 100, Ordering::SeqCst);
        r.clock.refresh();
        assert!(!r.clock.is_interpolating());
        assert_eq!(r.clock.now(), r.inner.now());
    }

    #[test]
    fn intervals_that_disagree_do_not_calibrate() {
        let r = Rig::new();
        r.pass(Duration::from_secs(1));
        r.clock.refresh();
        // Second interval at a 1 % different rate.
        r.inner.advance(Duration::from_secs(1));
        r.cycles
            .fetch_add(2_000_000_000 * 101 / 100, Ordering::SeqCst);
        r.clock.refresh();
        assert!(!r.clock.is_interpolating());
    }

    #[test]
    fn a_reading_older_than_the_published_one_changes_nothing() {
        let r = Rig::new();
        r.calibrate();
        // Another thread read (c, n) and published a later reading before this one got the
        // lock: both its counter and its time are behind the published ones.
        let c = r.cycles.load(Ordering::SeqCst) - 10;
        let n = r.inner.now().as_nanos() - 5;
        r.count(Duration::from_millis(1));
        r.clock.record(&mut r.clock.cal.lock(), c, n, c + 20);
        assert!(
            r.clock.is_interpolating(),
            "older news is not a counter going back"
        );
        let at = r.inner.now();
        assert_eq!(
            r.clock.now(),
            Instant::from_nanos(at.as_nanos() + 1_000_000)
        );
    }

    #[test]
    fn invalidate_covers_a_suspend_the_counter_stood_still_through() {
        let r = Rig::new();
        r.calibrate();
        // Boot time ran a minute; the counter kept its value (stopped, not reset).
        r.inner.advance(Duration::from_secs(60));
        r.count(Duration::from_millis(1));
        assert!(
            r.clock.now() < r.inner.now(),
            "the case `invalidate` exists for: the counter cannot see it"
        );
        r.clock.invalidate();
        assert!(!r.clock.is_interpolating());
        assert_eq!(r.clock.now(), r.inner.now());
        r.calibrate();
    }

    #[test]
    fn a_counter_no_longer_fit_is_never_used_again() {
        let r = Rig::new();
        r.calibrate();
        r.fit.store(false, Ordering::SeqCst);
        r.pass(Duration::from_secs(10));
        r.clock.refresh();
        assert!(!r.clock.is_interpolating());
        r.fit.store(true, Ordering::SeqCst);
        for _ in 0..4 {
            r.pass(Duration::from_secs(1));
            r.clock.refresh();
        }
        assert!(!r.clock.is_interpolating(), "retired for good");
        r.count(Duration::from_millis(300));
        assert_eq!(r.clock.now(), r.inner.now());
    }
}
