//! Time jumps under the process: a resume from suspend or the wall clock set. A clock that
//! reads a cycle counter between readings of CLOCK_BOOTTIME (`vpn_device::clock::CycleClock`)
//! cannot see a suspend the counter stood still through; this watch tells it at once.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::time::Duration;

/// Tells when time jumped under the process: the machine resumed from suspend or the wall clock
/// was set. A cycle counter that stood still through a suspend cannot see the first; the kernel
/// says so through a `CLOCK_REALTIME` timerfd armed with `TFD_TIMER_CANCEL_ON_SET`, whose read
/// fails with `ECANCELED` on either (the kernel treats a resume as a clock set).
pub struct TimeJumps {
    fd: OwnedFd,
    period: Duration,
}

impl TimeJumps {
    /// A watch whose [`wait`](Self::wait) also returns every `period`, so that its thread can
    /// notice it is no longer needed.
    pub fn new(period: Duration) -> io::Result<TimeJumps> {
        // SAFETY: no pointers; returns a new fd or -1.
        let raw = unsafe { libc::timerfd_create(libc::CLOCK_REALTIME, libc::TFD_CLOEXEC) };
        if raw < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `raw` is a fresh fd nobody else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        let watch = TimeJumps { fd, period };
        watch.arm()?;
        Ok(watch)
    }

    /// Arms the timer: absolute, cancelled on a clock set, first due a period from now.
    fn arm(&self) -> io::Result<()> {
        let mut now = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: `now` is a valid, writable timespec that lives across the call.
        if unsafe { libc::clock_gettime(libc::CLOCK_REALTIME, &mut now) } != 0 {
            return Err(io::Error::last_os_error());
        }
        let period = libc::timespec {
            tv_sec: libc::time_t::try_from(self.period.as_secs()).unwrap_or(libc::time_t::MAX),
            // Below 10^9: fits a c_long of any width.
            tv_nsec: self.period.subsec_nanos() as libc::c_long,
        };
        let mut first = libc::timespec {
            tv_sec: now.tv_sec.saturating_add(period.tv_sec),
            tv_nsec: now.tv_nsec + period.tv_nsec,
        };
        if first.tv_nsec >= 1_000_000_000 {
            first.tv_sec = first.tv_sec.saturating_add(1);
            first.tv_nsec -= 1_000_000_000;
        }
        let spec = libc::itimerspec {
            it_interval: period,
            it_value: first,
        };
        let flags = libc::TFD_TIMER_ABSTIME | libc::TFD_TIMER_CANCEL_ON_SET;
        // SAFETY: `spec` is a valid itimerspec for the duration of the call; the old value
        // pointer may be null.
        let rc = unsafe {
            libc::timerfd_settime(self.fd.as_raw_fd(), flags, &spec, std::ptr::null_mut())
        };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// Blocks until time jumps (`Ok(true)`, and the watch is armed again) or a period passes
    /// (`Ok(false)`).
    pub fn wait(&self) -> io::Result<bool> {
        let mut ticks = [0u8; 8];
        loop {
            // SAFETY: `ticks` is a valid, writable 8-byte buffer for the duration of the call.
            let n =
                unsafe { libc::read(self.fd.as_raw_fd(), ticks.as_mut_ptr().cast(), ticks.len()) };
            if n >= 0 {
                return Ok(false);
            }
            let e = io::Error::last_os_error();
            match e.raw_os_error() {
                Some(libc::EINTR) => continue,
                Some(libc::ECANCELED) => {
                    self.arm()?;
                    return Ok(true);
                }
                _ => return Err(e),
            }
        }
    }
}

/// Steps the wall clock 1 ns forward and 1 ns back (`clock_adjtime`, `ADJ_SETOFFSET`): two
/// clock sets as far as [`TimeJumps`] is concerned, no lasting change to the time. The kernel
/// tells watches only when the wall clock's offset from the monotonic clock changes, so a step
/// of zero would not do. For tests; needs CAP_SYS_TIME.
pub fn nudge_wall_clock() -> io::Result<()> {
    for (sec, nsec) in [(0, 1), (-1, 999_999_999)] {
        // SAFETY: an all-zero timex is a valid value; the fields used are set below.
        let mut tx: libc::timex = unsafe { std::mem::zeroed() };
        tx.modes = libc::ADJ_SETOFFSET | libc::ADJ_NANO;
        tx.time.tv_sec = sec;
        // Nanoseconds, under ADJ_NANO.
        tx.time.tv_usec = nsec;
        // SAFETY: `tx` is a valid, writable timex for the duration of the call.
        if unsafe { libc::clock_adjtime(libc::CLOCK_REALTIME, &mut tx) } < 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// CLOCK_MONOTONIC_COARSE: the time of the last timer tick, read from the kernel's page.
pub fn monotonic_coarse() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec that lives across the call.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC_COARSE, &mut ts) };
    Duration::new(
        u64::try_from(ts.tv_sec).unwrap_or(0),
        u32::try_from(ts.tv_nsec).unwrap_or(0),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A wall-clock step is a clock set to the kernel: the watch must say time jumped. Root
    /// only (CAP_SYS_TIME).
    #[test]
    fn a_clock_set_wakes_the_watch() {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            return;
        }
        let watch = TimeJumps::new(Duration::from_secs(30)).unwrap();
        let setter = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            nudge_wall_clock().unwrap();
        });
        let started = std::time::Instant::now();
        assert!(
            watch.wait().unwrap(),
            "a period passed without the set being seen"
        );
        assert!(started.elapsed() < Duration::from_secs(10));
        setter.join().unwrap();
    }
}
