//! The device clock for embedded tunnels: it must count time the phone or laptop spends
//! asleep, or keys outlive their 120/180 s limits across a suspend (WireGuardKit patches Go's
//! runtime for the same reason). Linux: `CLOCK_BOOTTIME`; Apple: `CLOCK_MONOTONIC`, which on
//! Darwin keeps counting during sleep (unlike std's `Instant`, `CLOCK_UPTIME_RAW`).

use std::sync::Arc;
use std::time::Duration;
use vpn_device::clock::Clock;
use vpn_proto::time::Instant;

/// A clock that counts suspended time.
pub(crate) struct SuspendAwareClock;

impl Clock for SuspendAwareClock {
    fn now(&self) -> Instant {
        // A day ahead, as the device's default clock does, so that "long ago" (zero) is long
        // ago even right after boot.
        let d = since_boot() + Duration::from_secs(86_400);
        Instant::from_nanos(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
    }
}

/// The clock a new tunnel's device uses.
pub(crate) fn device_clock() -> Arc<dyn Clock> {
    Arc::new(SuspendAwareClock)
}

#[cfg(target_os = "linux")]
fn since_boot() -> Duration {
    vpn_sys::daemon::boottime()
}

#[cfg(not(target_os = "linux"))]
fn since_boot() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec that lives across the call.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    if rc != 0 {
        return Duration::ZERO;
    }
    Duration::new(
        u64::try_from(ts.tv_sec).unwrap_or(0),
        u32::try_from(ts.tv_nsec).unwrap_or(0),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_clock_never_goes_backwards() {
        let c = SuspendAwareClock;
        let a = c.now();
        let b = c.now();
        assert!(b >= a);
        assert!(a.as_nanos() >= 86_400 * 1_000_000_000);
    }
}
