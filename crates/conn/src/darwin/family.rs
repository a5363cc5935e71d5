//! One darwin socket as a bind's family (or a connected pair) shares it between its reader and
//! its senders: non-blocking, with reads and sends that park in `poll` on EAGAIN, and a close
//! that wakes whoever is parked.
//!
//! `shutdown(2)` wakes a parked reader of a *connected* socket (it becomes readable), but on
//! darwin an unconnected socket answers ENOTCONN and wakes nobody; the shared sockets therefore
//! also park on a wake-up socket pair that `close` writes to. As on Linux, a reader or sender
//! holds the read lock on the socket during its call and `close` takes the write lock to drop
//! it, so the descriptor is closed (and the port free) when `close` returns and nobody can use
//! a reused descriptor number.

use std::io::{self, Write};
use std::net::{Shutdown, SocketAddr};
use std::os::fd::{AsFd, AsRawFd};
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, Ordering};

use parking_lot::{Mutex, RwLock};
use socket2::Socket;
use vpn_darwinbatch::Kernel;
use vpn_sys::poll;

use super::io::{self as dio, Fd, Next, Read, SendState, Sent};
use crate::err_closed;

/// Batched send states, pooled so concurrent senders neither allocate nor serialise.
pub(crate) type SendPool = Mutex<Vec<SendState>>;

/// A socket, its closed flag and how it moves datagrams.
pub(crate) struct Family {
    /// `None` once closed. Readers and senders hold the read lock during their call.
    pub(crate) sock: RwLock<Option<Socket>>,
    closed: AtomicBool,
    /// `sendmsg_x`/`recvmsg_x` on this socket (else one datagram per call).
    pub(crate) batched: bool,
    /// Written by `close` to wake a parked reader or sender (unconnected sockets only).
    wake: Option<(UnixStream, UnixStream)>,
    kernel: &'static dyn Kernel,
}

impl Family {
    /// A shared (unconnected) socket: made non-blocking, with a wake-up pair for `close`.
    pub(crate) fn shared(sock: Socket, batched: bool) -> io::Result<Self> {
        sock.set_nonblocking(true)?;
        Ok(Self::with_wake(sock, batched, Some(UnixStream::pair()?)))
    }

    /// A connected pair socket, already non-blocking: `shutdown` wakes its parked reader.
    pub(crate) fn connected(sock: Socket, batched: bool) -> Self {
        Self::with_wake(sock, batched, None)
    }

    fn with_wake(sock: Socket, batched: bool, wake: Option<(UnixStream, UnixStream)>) -> Self {
        Family {
            sock: RwLock::new(Some(sock)),
            closed: AtomicBool::new(false),
            batched,
            wake,
            kernel: super::kernel(),
        }
    }

    pub(crate) fn is_closed(&self) -> bool {
        self.closed.load(Ordering::SeqCst)
    }

    /// Parks until `sock` is ready, or fails with [`err_closed`] once the family closes.
    fn park(&self, sock: &Socket, writable: bool) -> io::Result<()> {
        let events = if writable {
            libc::POLLOUT
        } else {
            libc::POLLIN
        };
        let woken = match &self.wake {
            Some((_, r)) => poll::poll_or_wake(sock.as_raw_fd(), events, r.as_fd())?,
            None => poll::poll_ready(sock.as_raw_fd(), events).map(|()| false)?,
        };
        if woken || self.is_closed() {
            return Err(err_closed());
        }
        Ok(())
    }

    /// Sends `bufs` to `dst` (`None`: the connected peer), batched with a pooled state when
    /// this socket batches. What the kernel accepted (and dropped) is added to `sent`. Closing
    /// the socket meanwhile turns an error into [`err_closed`].
    pub(crate) fn send(
        &self,
        pool: &SendPool,
        bufs: &[&[u8]],
        dst: Option<SocketAddr>,
        sent: &mut Sent,
    ) -> io::Result<()> {
        let guard = self.sock.read();
        let Some(sock) = guard.as_ref() else {
            return Err(err_closed());
        };
        let mut state = self
            .batched
            .then(|| pool.lock().pop().unwrap_or_else(SendState::new));
        let fd = Fd {
            k: self.kernel,
            fd: sock.as_raw_fd(),
        };
        let r = dio::send(
            fd,
            state.as_mut(),
            bufs,
            dst,
            &mut || self.park(sock, true),
            sent,
        );
        if let Some(st) = state {
            pool.lock().push(st);
        }
        match r {
            Err(_) if self.is_closed() => Err(err_closed()),
            r => r,
        }
    }

    /// Reads until `read` (one receive call on the descriptor) hands over entries; parks on
    /// EAGAIN, reads again after EINTR, errors `transient` says to ride out and reads that kept
    /// nothing; [`err_closed`] once the family closes.
    pub(crate) fn read_loop(
        &self,
        transient: fn(&io::Error) -> bool,
        mut read: impl FnMut(Fd<'_>) -> io::Result<Read>,
    ) -> io::Result<usize> {
        loop {
            if self.is_closed() {
                return Err(err_closed());
            }
            let guard = self.sock.read();
            let Some(sock) = guard.as_ref() else {
                return Err(err_closed());
            };
            let r = read(Fd {
                k: self.kernel,
                fd: sock.as_raw_fd(),
            });
            match dio::after_read(r, self.is_closed(), transient) {
                Next::Return(n) => return Ok(n),
                Next::Again => {}
                Next::Park => self.park(sock, false)?,
                Next::Closed => return Err(err_closed()),
                Next::Fail(e) => return Err(e),
            }
        }
    }

    /// Wakes and stops the reader and senders, then closes the descriptor.
    pub(crate) fn close(&self) {
        self.closed.store(true, Ordering::SeqCst);
        if let Some(s) = self.sock.read().as_ref() {
            // Wakes a parked reader of a connected socket. ENOTCONN on an unconnected socket,
            // which on darwin wakes nobody: the wake-up pair covers that case.
            let _ = s.shutdown(Shutdown::Both);
        }
        self.ring();
        drop(self.sock.write().take());
    }

    /// Makes the wake-up pair readable: every reader or sender parked on it returns.
    fn ring(&self) {
        if let Some((w, _)) = &self.wake {
            let _ = (&*w).write_all(&[1]);
        }
    }
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;
    use crate::darwin::io::{shared_endpoint, Receiver, MAX_DATAGRAM};
    use crate::{is_err_closed, Endpoint};
    use std::sync::{mpsc, Arc};
    use std::time::Duration;

    /// darwin's `shutdown` does not wake a reader parked on an unconnected socket (Linux's
    /// does): the wake-up pair alone must.
    #[test]
    fn a_parked_reader_of_a_shared_socket_wakes_on_the_wake_up_pair_alone() {
        let sock = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let fam = Arc::new(Family::shared(Socket::from(sock), false).unwrap());
        let (tx, rx) = mpsc::channel();
        let reader = fam.clone();
        std::thread::spawn(move || {
            let mut rx_state = Receiver::new(false);
            let mut storage = [0u8; 2048];
            let mut bufs: Vec<&mut [u8]> = vec![&mut storage[..]];
            let (mut sizes, mut eps) = ([0usize], [Endpoint::default()]);
            let r = reader.read_loop(
                |_| false,
                |fd| {
                    rx_state.recv(
                        fd,
                        &mut bufs,
                        &mut sizes,
                        &mut eps,
                        MAX_DATAGRAM,
                        shared_endpoint,
                    )
                },
            );
            let _ = tx.send(r);
        });
        std::thread::sleep(Duration::from_millis(50));
        fam.closed.store(true, Ordering::SeqCst);
        fam.ring(); // no shutdown
        let r = rx
            .recv_timeout(Duration::from_secs(5))
            .expect("parked reader not woken by the wake-up pair");
        assert!(is_err_closed(&r.unwrap_err()));
    }
}
