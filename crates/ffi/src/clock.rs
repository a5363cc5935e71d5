//! The device clock for embedded tunnels: it must count time the phone or laptop spends
//! asleep, or keys outlive their 120/180 s limits across a suspend (WireGuardKit patches Go's
//! runtime for the same reason). Linux: `CLOCK_BOOTTIME`; Apple: `mach_continuous_time` (the
//! device's default clock there).

use std::sync::Arc;
use vpn_device::clock::Clock;

/// The clock a new tunnel's device uses.
pub(crate) fn device_clock() -> Arc<dyn Clock> {
    #[cfg(any(target_os = "linux", target_os = "android"))]
    return Arc::new(vpn_device::clock::BootTimeClock);
    #[cfg(not(any(target_os = "linux", target_os = "android")))]
    vpn_device::clock::default_clock()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tunnel_clock_never_goes_backwards() {
        let c = device_clock();
        let a = c.now();
        let b = c.now();
        assert!(b >= a);
        assert!(a.as_nanos() >= 86_400 * 1_000_000_000);
    }
}
