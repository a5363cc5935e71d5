//! The monotonic clock that keeps counting while the machine sleeps.
//!
//! `mach_absolute_time` (what `std::time::Instant` reads on darwin) stops during sleep, which
//! would stretch the protocol's key timers across a suspend; `mach_continuous_time` does not.

use std::sync::OnceLock;

/// `struct mach_timebase_info` (<mach/mach_time.h>).
#[repr(C)]
struct MachTimebaseInfo {
    numer: u32,
    denom: u32,
}

extern "C" {
    // <mach/mach_time.h>, macOS 10.12+: uint64_t mach_continuous_time(void);
    fn mach_continuous_time() -> u64;
    // kern_return_t mach_timebase_info(mach_timebase_info_t info);
    fn mach_timebase_info(info: *mut MachTimebaseInfo) -> libc::c_int;
}

/// The timebase's numerator and denominator (ticks to nanoseconds), read once.
fn timebase() -> (u64, u64) {
    static TB: OnceLock<(u64, u64)> = OnceLock::new();
    *TB.get_or_init(|| {
        let mut info = MachTimebaseInfo { numer: 0, denom: 0 };
        // SAFETY: `info` is a valid, writable mach_timebase_info for the call.
        let r = unsafe { mach_timebase_info(&mut info) };
        if r != 0 || info.numer == 0 || info.denom == 0 {
            // Never seen in practice; 1:1 is the Intel timebase.
            (1, 1)
        } else {
            (u64::from(info.numer), u64::from(info.denom))
        }
    })
}

/// Nanoseconds since boot, sleep included (`mach_continuous_time` scaled by
/// `mach_timebase_info`).
pub fn continuous_time_nanos() -> u64 {
    // SAFETY: a plain libSystem call with no arguments and no preconditions.
    let ticks = unsafe { mach_continuous_time() };
    let (numer, denom) = timebase();
    ((u128::from(ticks) * u128::from(numer)) / u128::from(denom)) as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn continuous_time_does_not_go_backwards() {
        let a = continuous_time_nanos();
        let b = continuous_time_nanos();
        assert!(b >= a && a > 0);
    }
}
