//! Waiting for a descriptor without blocking a close: `poll` on the descriptor plus a wake
//! descriptor (an eventfd on Linux, a pipe on darwin) that the closing side makes readable.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, RawFd};

/// Waits until `fd` has `events` (`POLLIN` or `POLLOUT`) or `wake` is readable, without a
/// timeout (an idle waiter costs no wake-ups). Returns whether `wake` fired. EINTR is retried.
pub fn poll_or_wake(fd: RawFd, events: libc::c_short, wake: BorrowedFd<'_>) -> io::Result<bool> {
    loop {
        let mut fds = [
            libc::pollfd {
                fd,
                events,
                revents: 0,
            },
            libc::pollfd {
                fd: wake.as_raw_fd(),
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
    use std::os::fd::AsFd;
    use std::os::unix::net::UnixStream;

    #[test]
    fn poll_reports_readiness_of_the_fd_and_of_the_wake() {
        let (mut a, b) = UnixStream::pair().unwrap();
        let (mut wa, wb) = UnixStream::pair().unwrap();
        a.write_all(b"x").unwrap();
        assert!(!poll_or_wake(b.as_raw_fd(), libc::POLLIN, wb.as_fd()).unwrap());
        wa.write_all(b"x").unwrap();
        assert!(poll_or_wake(b.as_raw_fd(), libc::POLLIN, wb.as_fd()).unwrap());
    }
}
