//! Clocks: where the device gets the time.
//!
//! The protocol's timers (rekey after 120 s, reject after 180 s, zero keys after 540 s) must count
//! time the machine spends asleep, or keys outlive their limits across a suspend. The device
//! takes its clock from the embedder: the Linux binaries pass a CLOCK_BOOTTIME clock, darwin
//! `mach_continuous_time`; [`MonotonicClock`] (std's `Instant`) is the portable default. Tests use
//! [`FakeClock`] and drive every timer in microseconds.

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
        // Offset by a day so "long ago" (Instant::ZERO) really is long ago at start-up.
        let d = self.origin.elapsed() + Duration::from_secs(86_400);
        Instant::from_nanos(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
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
