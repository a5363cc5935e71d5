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
}

/// Linux's clock that keeps counting while the machine sleeps (`CLOCK_BOOTTIME`), so the
/// 120/180/540 s key timers expire on time after a resume; std's `Instant` (`CLOCK_MONOTONIC`)
/// stops during suspend. The daemon uses it; an app embedding a device on a machine that sleeps
/// passes it with `Options::with_clock`.
#[cfg(any(target_os = "linux", target_os = "android"))]
#[derive(Clone, Copy, Debug, Default)]
pub struct BootTimeClock;

#[cfg(any(target_os = "linux", target_os = "android"))]
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

    #[cfg(any(target_os = "linux", target_os = "android"))]
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
}
