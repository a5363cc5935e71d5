//! Time as the protocol sees it: a monotonic instant passed in by the caller.
//!
//! The protocol core never reads a clock. The device supplies [`Instant`]s from a clock that
//! keeps counting while the machine sleeps (CLOCK_BOOTTIME on Linux, `mach_continuous_time` on
//! darwin) so that key lifetimes (120 s, 180 s, 540 s) hold across suspend; tests supply a fake
//! clock and run timer scenarios in microseconds.

use core::ops::{Add, AddAssign, Sub};
use core::time::Duration;

/// A point on a monotonic clock, in nanoseconds since an arbitrary origin chosen by the clock.
///
/// Only differences between two instants of the same clock are meaningful.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Instant(u64);

impl Instant {
    /// The clock's origin. Useful for fake clocks and as "never" for last-seen fields.
    pub const ZERO: Instant = Instant(0);

    /// An instant `nanos` nanoseconds after the clock's origin.
    pub const fn from_nanos(nanos: u64) -> Self {
        Instant(nanos)
    }

    /// Nanoseconds since the clock's origin.
    pub const fn as_nanos(self) -> u64 {
        self.0
    }

    /// Time elapsed from `earlier` to `self`, zero if `earlier` is later.
    pub fn saturating_duration_since(self, earlier: Instant) -> Duration {
        Duration::from_nanos(self.0.saturating_sub(earlier.0))
    }

    /// `self - d`, or `None` when that would precede the clock's origin.
    pub fn checked_sub(self, d: Duration) -> Option<Instant> {
        self.0.checked_sub(duration_nanos(d)).map(Instant)
    }
}

fn duration_nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

impl Add<Duration> for Instant {
    type Output = Instant;
    fn add(self, d: Duration) -> Instant {
        Instant(self.0.saturating_add(duration_nanos(d)))
    }
}

impl AddAssign<Duration> for Instant {
    fn add_assign(&mut self, d: Duration) {
        *self = *self + d;
    }
}

impl Sub<Instant> for Instant {
    type Output = Duration;
    fn sub(self, earlier: Instant) -> Duration {
        self.saturating_duration_since(earlier)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arithmetic_saturates() {
        let a = Instant::from_nanos(5);
        assert_eq!(a - Instant::from_nanos(9), Duration::ZERO);
        assert_eq!((a + Duration::from_nanos(3)).as_nanos(), 8);
        assert_eq!(a.checked_sub(Duration::from_nanos(6)), None);
        assert_eq!(
            Instant::from_nanos(u64::MAX) + Duration::from_secs(1),
            Instant::from_nanos(u64::MAX)
        );
    }
}
