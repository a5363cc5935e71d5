//! Waiting for a socket to become readable or writable, or for a wake-up descriptor to say
//! that its owner is closing it.
//!
//! The darwin bind keeps its sockets non-blocking: a read or send is tried first and only
//! when the kernel answers EAGAIN does the caller park here, in `poll(2)` on the socket and,
//! for unconnected sockets, a wake-up descriptor (`shutdown(2)` wakes nobody on an unconnected
//! socket there; on a connected one it does, and makes the socket readable). Written against
//! POSIX `poll` so it runs, and is tested, on Linux too.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};

/// Why [`wait`] returned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ready {
    /// The socket is ready (or has an error or hang-up the next call will report).
    Socket,
    /// The wake-up descriptor became readable (or hung up): the owner is closing.
    Woken,
}

/// Blocks until `fd` is readable (`writable` false) or writable, or `wake` is readable.
/// EINTR is retried.
pub fn wait(fd: BorrowedFd<'_>, writable: bool, wake: Option<BorrowedFd<'_>>) -> io::Result<Ready> {
    let events = if writable {
        libc::POLLOUT
    } else {
        libc::POLLIN
    };
    let mut fds = [
        libc::pollfd {
            fd: fd.as_raw_fd(),
            events,
            revents: 0,
        },
        libc::pollfd {
            fd: wake.map_or(-1, |w| w.as_raw_fd()),
            events: libc::POLLIN,
            revents: 0,
        },
    ];
    let n = if wake.is_some() { 2 } else { 1 };
    loop {
        // SAFETY: `fds` is a live local array of `n` ≤ 2 initialised `pollfd`s; the kernel
        // writes only their `revents` fields. Both descriptors are borrowed for the call.
        let r = unsafe { libc::poll(fds.as_mut_ptr(), n as libc::nfds_t, -1) };
        if r >= 0 {
            break;
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
    let woken = libc::POLLIN | libc::POLLHUP | libc::POLLERR;
    if n == 2 && fds[1].revents & woken != 0 {
        return Ok(Ready::Woken);
    }
    Ok(Ready::Socket)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::net::{Shutdown, UdpSocket};
    use std::os::fd::AsFd;
    use std::os::unix::net::UnixStream;
    use std::sync::mpsc;
    use std::time::Duration;

    /// Upper bound for a wait the test expects to end (a failure bound, not a measurement).
    const BOUND: Duration = Duration::from_secs(5);

    fn loopback() -> UdpSocket {
        UdpSocket::bind("127.0.0.1:0").unwrap()
    }

    #[test]
    fn a_queued_datagram_makes_the_socket_ready() {
        let s = loopback();
        loopback().send_to(b"x", s.local_addr().unwrap()).unwrap();
        let (_w, r) = UnixStream::pair().unwrap();
        assert_eq!(
            wait(s.as_fd(), false, Some(r.as_fd())).unwrap(),
            Ready::Socket
        );
        assert_eq!(wait(s.as_fd(), true, None).unwrap(), Ready::Socket);
    }

    #[test]
    fn a_write_to_the_wake_descriptor_ends_a_blocked_wait() {
        let s = loopback();
        let (mut w, r) = UnixStream::pair().unwrap();
        let (tx, rx) = mpsc::channel();
        let t = std::thread::spawn(move || {
            let _ = tx.send(wait(s.as_fd(), false, Some(r.as_fd())).unwrap());
        });
        w.write_all(&[1]).unwrap();
        assert_eq!(rx.recv_timeout(BOUND).unwrap(), Ready::Woken);
        t.join().unwrap();
    }

    #[test]
    fn shutdown_ends_a_blocked_wait_on_a_connected_socket() {
        let s = loopback();
        let peer = loopback();
        s.connect(peer.local_addr().unwrap()).unwrap();
        let s = std::sync::Arc::new(s);
        let (tx, rx) = mpsc::channel();
        let waiter = s.clone();
        let t = std::thread::spawn(move || {
            let _ = tx.send(wait(waiter.as_fd(), false, None).unwrap());
        });
        socket2::SockRef::from(&*s)
            .shutdown(Shutdown::Both)
            .unwrap();
        assert_eq!(rx.recv_timeout(BOUND).unwrap(), Ready::Socket);
        t.join().unwrap();
    }
}
