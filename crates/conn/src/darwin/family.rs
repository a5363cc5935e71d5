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
use std::net::{IpAddr, Shutdown, SocketAddr};
use std::os::fd::{AsFd, AsRawFd};
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, Ordering};

use parking_lot::{Mutex, RwLock};
use socket2::Socket;
use vpn_darwinbatch::Kernel;
use vpn_sys::poll;

use super::io::{self as dio, Fd, Next, PairRx, Read, SendState, Sent};
use crate::connected::slots::{is_transient, COALESCE_DELAY};
use crate::{err_closed, Endpoint};

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

    /// Blocks until a datagram is ready to read, without reading it: what a receive function
    /// called with no buffers does (see [`crate::ReceiveFunc`]), so that an idle reader holds
    /// no slab. Closing wakes it with [`err_closed`].
    pub(crate) fn wait_readable(&self) -> io::Result<()> {
        if self.is_closed() {
            return Err(err_closed());
        }
        let guard = self.sock.read();
        let Some(sock) = guard.as_ref() else {
            return Err(err_closed());
        };
        self.park(sock, false)
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

/// The reader of one connected pair socket: the coalescing pause after a partial batch, then
/// reads into the device's buffers until something arrives (see [`PairRx`]).
pub(crate) struct PairReader {
    rx: PairRx,
    remote: SocketAddr,
    local: IpAddr,
}

impl PairReader {
    /// For a socket bound to `local` and connected to `remote`; batched when `batched`.
    pub(crate) fn new(
        batched: bool,
        max_datagram: usize,
        remote: SocketAddr,
        local: IpAddr,
    ) -> Self {
        PairReader {
            rx: PairRx::new(batched, max_datagram),
            remote,
            local,
        }
    }

    /// One receive function call on `fam`; `on_read` sees every socket read's outcome (for the
    /// set's counters and the idle check's "used" mark). ICMP-reported errors are ridden out;
    /// [`err_closed`] once the socket closes.
    pub(crate) fn read(
        &mut self,
        fam: &Family,
        bufs: &mut [&mut [u8]],
        sizes: &mut [usize],
        eps: &mut [Endpoint],
        mut on_read: impl FnMut(Read),
    ) -> io::Result<usize> {
        if self.rx.take_pause() {
            std::thread::sleep(COALESCE_DELAY);
        }
        let (remote, local) = (self.remote, self.local);
        fam.read_loop(is_transient, |fd| {
            let r = self.rx.read(fd, bufs, sizes, eps, remote, local);
            if let Ok(read) = &r {
                on_read(*read);
            }
            r
        })
    }
}

#[cfg(all(test, any(target_os = "linux", target_os = "android")))]
mod tests {
    use super::*;
    use crate::darwin::io::{shared_endpoint, Receiver, MAX_DATAGRAM};
    use crate::is_err_closed;
    use std::net::UdpSocket;
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

    fn connected_pair() -> (Arc<Family>, UdpSocket) {
        let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
        let peer = UdpSocket::bind("127.0.0.1:0").unwrap();
        sock.connect(peer.local_addr().unwrap()).unwrap();
        peer.connect(sock.local_addr().unwrap()).unwrap();
        let sock = Socket::from(sock);
        sock.set_nonblocking(true).unwrap();
        (Arc::new(Family::connected(sock, false)), peer)
    }

    fn pair_reader(fam: &Family, peer: &UdpSocket) -> PairReader {
        let local = fam.sock.read().as_ref().unwrap().local_addr().unwrap();
        let local = local.as_socket().unwrap().ip();
        PairReader::new(false, 0, peer.local_addr().unwrap(), local)
    }

    /// One read of 8 buffers of 64 KiB: the datagrams kept (size > 0) and every read's outcome.
    fn read_pair(fam: &Family, r: &mut PairReader) -> (Vec<(Vec<u8>, Endpoint)>, Vec<Read>) {
        let mut storage = vec![vec![0u8; 65_535]; 8];
        let mut bufs: Vec<&mut [u8]> = storage.iter_mut().map(|b| &mut b[..]).collect();
        let (mut sizes, mut eps) = (vec![0; 8], vec![Endpoint::default(); 8]);
        let mut reads = Vec::new();
        let n = r
            .read(fam, &mut bufs, &mut sizes, &mut eps, |read| {
                reads.push(read)
            })
            .unwrap();
        let got = (0..n)
            .filter(|&i| sizes[i] > 0)
            .map(|i| (bufs[i][..sizes[i]].to_vec(), eps[i]))
            .collect();
        (got, reads)
    }

    #[test]
    fn a_pair_reader_reads_its_socket_with_the_pair_as_endpoint_and_grows_after_a_cut_datagram() {
        let (fam, peer) = connected_pair();
        let mut r = pair_reader(&fam, &peer);
        let local = r.local;
        peer.send(&[1; 3000]).unwrap(); // cut to the first slot (2048): dropped, slot grows
        peer.send(&[2; 3000]).unwrap();
        let mut got = Vec::new();
        let mut oversize = 0;
        while got.is_empty() {
            let (g, reads) = read_pair(&fam, &mut r);
            oversize += reads.iter().map(|r| r.oversize).sum::<usize>();
            got = g;
        }
        assert_eq!(oversize, 1);
        let (data, ep) = &got[0];
        assert_eq!(data, &vec![2; 3000]);
        assert_eq!(ep.dst, peer.local_addr().unwrap());
        assert_eq!(ep.src.map(|s| s.ip), Some(local));
        // And back through the same socket, without a destination (write on a connected socket).
        let pool = SendPool::default();
        let mut sent = Sent::default();
        fam.send(&pool, &[b"reply"], None, &mut sent).unwrap();
        assert_eq!(sent.datagrams, 1);
        let mut buf = [0u8; 16];
        peer.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        assert_eq!(peer.recv(&mut buf).unwrap(), 5);
    }

    #[test]
    fn closing_a_pair_socket_wakes_its_parked_reader_through_shutdown() {
        let (fam, peer) = connected_pair();
        let mut r = pair_reader(&fam, &peer);
        let (tx, rx) = mpsc::channel();
        let reader = fam.clone();
        std::thread::spawn(move || {
            let mut storage = [0u8; 2048];
            let mut bufs: Vec<&mut [u8]> = vec![&mut storage[..]];
            let (mut sizes, mut eps) = ([0usize], [Endpoint::default()]);
            let _ = tx.send(r.read(&reader, &mut bufs, &mut sizes, &mut eps, |_| {}));
        });
        std::thread::sleep(Duration::from_millis(50));
        fam.close();
        let r = rx
            .recv_timeout(Duration::from_secs(5))
            .expect("parked pair reader not woken");
        assert!(is_err_closed(&r.unwrap_err()));
    }
}
