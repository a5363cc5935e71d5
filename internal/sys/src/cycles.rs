//! The CPU's cycle counter, for a clock that does not touch memory (see
//! `vpn_device::clock::CycleClock`).
//!
//! Reading the kernel's clock (`clock_gettime` through the vDSO) reads the kernel's timekeeping
//! page, which the timer tick rewrites from whichever CPU keeps time: on a tunnel idle between
//! packets that page is cold every time, about 3 µs per read on the benchmark VM. The time
//! stamp counter is a register: about 10 ns, cold or not.

/// The time stamp counter, where the kernel keeps time with it (clocksource `tsc`): the kernel
/// then has checked that it runs at a constant rate, does not stop in idle states and agrees
/// across CPUs.
#[derive(Clone, Copy, Debug)]
pub struct Tsc(());

impl Tsc {
    /// The counter, or `None` on other CPUs and when the kernel uses another clocksource.
    pub fn detect() -> Option<Tsc> {
        #[cfg(target_arch = "x86_64")]
        {
            let source = std::fs::read_to_string(
                "/sys/devices/system/clocksource/clocksource0/current_clocksource",
            )
            .ok()?;
            (source.trim() == "tsc").then_some(Tsc(()))
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            None
        }
    }

    /// The current count. Inlined: the point is to touch no memory.
    #[inline]
    pub fn read(self) -> u64 {
        #[cfg(target_arch = "x86_64")]
        {
            // SAFETY: RDTSC reads a register; it has no memory operands and no preconditions
            // on a CPU the kernel keeps time with it on (a `Tsc` exists only there).
            unsafe { core::arch::x86_64::_rdtsc() }
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            0 // unreachable: `detect` returns `None` here
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_forward_with_time() {
        let Some(tsc) = Tsc::detect() else {
            return; // no TSC clocksource here: nothing to check
        };
        let a = tsc.read();
        std::thread::sleep(std::time::Duration::from_millis(2));
        let b = tsc.read();
        assert!(b > a, "{a} then {b}");
    }
}
