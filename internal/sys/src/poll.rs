//! Waiting for a descriptor without blocking a close: `poll` on the descriptor plus a wake
//! descriptor (an eventfd on Linux, a pipe or socket pair on darwin) that the closing side
//! makes readable. A connected socket needs none: `shutdown(2)` wakes its waiter (it becomes
//! readable), on darwin as on Linux; an unconnected one on darwin is not woken by `shutdown`.

//!
//! [`poll_or_wake`] is the one "readable or woken" wait of the project: the Linux and darwin
//! TUN readers and writers, the TUN's netlink listener, the darwin bind and the daemon's
//! inotify watch all wait in it.

use std::io;
#[cfg(any(target_os = "linux", target_os = "android"))]
use std::os::fd::{AsFd, FromRawFd, OwnedFd};
use std::os::fd::{AsRawFd, BorrowedFd, RawFd};

/// A non-blocking eventfd, the Linux wake descriptor for [`poll_or_wake`]. Once signalled it
/// stays readable (every waiter wakes) until [`reset`](Self::reset).
#[cfg(any(target_os = "linux", target_os = "android"))]
#[derive(Debug)]
pub struct EventFd(OwnedFd);

#[cfg(any(target_os = "linux", target_os = "android"))]
impl EventFd {
    /// A new eventfd, not signalled, non-blocking and close-on-exec.
    pub fn new() -> io::Result<Self> {
        // SAFETY: eventfd(2) with constant arguments passes no memory.
        let raw = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
        if raw < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `raw` is a fresh descriptor nobody else owns.
        Ok(Self(unsafe { OwnedFd::from_raw_fd(raw) }))
    }

    /// Makes the eventfd readable (a no-op when it already is).
    pub fn signal(&self) -> io::Result<()> {
        let one: u64 = 1;
        // SAFETY: writes the 8 bytes of `one`, which outlives the call.
        let r = unsafe { libc::write(self.0.as_raw_fd(), (&one as *const u64).cast(), 8) };
        if r < 0 {
            let e = io::Error::last_os_error();
            // The counter is saturated: it is readable already.
            if e.kind() != io::ErrorKind::WouldBlock {
                return Err(e);
            }
        }
        Ok(())
    }

    /// Consumes the signals so far: the eventfd is not readable until the next
    /// [`signal`](Self::signal).
    pub fn reset(&self) {
        let mut count = 0u64;
        // SAFETY: reads at most 8 bytes into `count`, which outlives the call. Not signalled
        // (EAGAIN) is the state wanted, so the result does not matter.
        unsafe { libc::read(self.0.as_raw_fd(), (&mut count as *mut u64).cast(), 8) };
    }
}

#[cfg(any(target_os = "linux", target_os = "android"))]
impl AsFd for EventFd {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.0.as_fd()
    }
}

/// Waits until `fd` has `events` (`POLLIN` or `POLLOUT`) or `wake` is readable, without a
/// timeout (an idle waiter costs no wake-ups). Returns whether `wake` fired. EINTR is retried.
pub fn poll_or_wake(fd: RawFd, events: libc::c_short, wake: BorrowedFd<'_>) -> io::Result<bool> {
    poll_until(fd, events, Some(wake))
}

/// Waits until `fd` has `events`, with no wake descriptor: for a connected socket, which
/// `shutdown` wakes. EINTR is retried.
pub fn poll_ready(fd: RawFd, events: libc::c_short) -> io::Result<()> {
    poll_until(fd, events, None).map(drop)
}

fn poll_until(fd: RawFd, events: libc::c_short, wake: Option<BorrowedFd<'_>>) -> io::Result<bool> {
    loop {
        let mut fds = [
            libc::pollfd {
                fd,
                events,
                revents: 0,
            },
            libc::pollfd {
                // A negative descriptor is ignored by `poll` (revents stays 0).
                fd: wake.map_or(-1, |w| w.as_raw_fd()),
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        // SAFETY: `fds` is a valid array of 2 pollfd for the duration of the call.
        let r = unsafe { libc::poll(fds.as_mut_ptr(), 2, -1) };
        if r < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        if fds[1].revents != 0 {
            return Ok(true);
        }
        if fds[0].revents != 0 {
            // Ready, or an error the next read/write will report.
            return Ok(false);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::net::{Shutdown, UdpSocket};
    use std::os::fd::AsFd;
    use std::os::unix::net::UnixStream;
    use std::sync::{mpsc, Arc};
    use std::time::Duration;

    #[test]
    fn poll_reports_readiness_of_the_fd_and_of_the_wake() {
        let (mut a, b) = UnixStream::pair().unwrap();
        let (mut wa, wb) = UnixStream::pair().unwrap();
        a.write_all(b"x").unwrap();
        assert!(!poll_or_wake(b.as_raw_fd(), libc::POLLIN, wb.as_fd()).unwrap());
        wa.write_all(b"x").unwrap();
        assert!(poll_or_wake(b.as_raw_fd(), libc::POLLIN, wb.as_fd()).unwrap());
        poll_ready(b.as_raw_fd(), libc::POLLIN).unwrap();
    }

    #[cfg(any(target_os = "linux", target_os = "android"))]
    #[test]
    fn an_eventfd_wakes_every_wait_until_reset() {
        let (_a, b) = UnixStream::pair().unwrap();
        let wake = EventFd::new().unwrap();
        wake.signal().unwrap();
        wake.signal().unwrap();
        assert!(poll_or_wake(b.as_raw_fd(), libc::POLLIN, wake.as_fd()).unwrap());
        assert!(poll_or_wake(b.as_raw_fd(), libc::POLLIN, wake.as_fd()).unwrap());
        wake.reset();
        let mut a = _a;
        a.write_all(b"x").unwrap();
        assert!(!poll_or_wake(b.as_raw_fd(), libc::POLLIN, wake.as_fd()).unwrap());
    }

    #[test]
    fn shutdown_ends_a_blocked_wait_on_a_connected_socket() {
        let s = UdpSocket::bind("127.0.0.1:0").unwrap();
        let peer = UdpSocket::bind("127.0.0.1:0").unwrap();
        s.connect(peer.local_addr().unwrap()).unwrap();
        let s = Arc::new(s);
        let (tx, rx) = mpsc::channel();
        let waiter = s.clone();
        let t = std::thread::spawn(move || {
            let _ = tx.send(poll_ready(waiter.as_raw_fd(), libc::POLLIN).is_ok());
        });
        socket2::SockRef::from(&*s)
            .shutdown(Shutdown::Both)
            .unwrap();
        // A failure bound, not a measurement.
        assert!(rx.recv_timeout(Duration::from_secs(5)).unwrap());
        t.join().unwrap();
    }
}
