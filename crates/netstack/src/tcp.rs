//! TCP through the stack, shaped like `std::net`: [`TcpStream`] and [`TcpListener`].

use crate::signal::Signal;
use crate::stack::{Proto, Stack, State};
use parking_lot::Mutex;
use smoltcp::iface::SocketHandle;
use smoltcp::socket::tcp;
use smoltcp::wire::{IpAddress, IpEndpoint, IpListenEndpoint};
use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

/// What every clone of a stream shares; dropping the last one closes the connection.
struct Inner {
    stack: Arc<Stack>,
    handle: SocketHandle,
    rx: Arc<Signal>,
    tx: Arc<Signal>,
    read_timeout: Mutex<Option<Duration>>,
    write_timeout: Mutex<Option<Duration>>,
    /// The peer's FIN was read: later reads return 0 even once the socket is closed.
    eof: AtomicBool,
    read_shut: AtomicBool,
    local: SocketAddr,
    peer: SocketAddr,
}

impl Drop for Inner {
    fn drop(&mut self) {
        let mut st = self.stack.lock();
        if !self.stack.is_closed() {
            st.sockets.get_mut::<tcp::Socket>(self.handle).close();
        }
        st.orphan(self.handle);
        drop(st);
        self.stack.kick();
    }
}

/// A TCP connection through the tunnel, like [`std::net::TcpStream`].
///
/// Reads and writes block (with optional timeouts); `&TcpStream` implements [`Read`] and
/// [`Write`] too, so one thread can read while another writes. Dropping the last clone closes
/// the connection gracefully: what was written is still delivered, then the FIN.
#[derive(Clone)]
pub struct TcpStream {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for TcpStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TcpStream")
            .field("local", &self.inner.local)
            .field("peer", &self.inner.peer)
            .finish()
    }
}

pub(crate) fn to_socket_addr(e: IpEndpoint) -> SocketAddr {
    SocketAddr::new(e.addr.into(), e.port)
}

impl TcpStream {
    fn wrap(stack: Arc<Stack>, handle: SocketHandle, local: SocketAddr, peer: SocketAddr) -> Self {
        TcpStream {
            inner: Arc::new(Inner {
                stack,
                handle,
                rx: Signal::new(),
                tx: Signal::new(),
                read_timeout: Mutex::new(None),
                write_timeout: Mutex::new(None),
                eof: AtomicBool::new(false),
                read_shut: AtomicBool::new(false),
                local,
                peer,
            }),
        }
    }

    /// Opens a connection to `remote`, waiting at most `timeout`.
    pub(crate) fn connect(
        stack: &Arc<Stack>,
        remote: SocketAddr,
        timeout: Duration,
    ) -> io::Result<TcpStream> {
        if remote.port() == 0 || remote.ip().is_unspecified() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "cannot connect to an unspecified address or port 0",
            ));
        }
        let (handle, local) = {
            let mut st = stack.lock();
            let st = &mut *st;
            let port = st.claim_port(Proto::Tcp, 0)?;
            let sizes = st.tcp_buffers(&stack.opts);
            let socket = State::tcp_socket(&stack.opts, sizes);
            let h = st.add(
                &stack.opts,
                Proto::Tcp,
                socket,
                sizes.0 + sizes.1,
                Some((Proto::Tcp, port)),
            )?;
            let remote_ep = IpEndpoint::new(IpAddress::from(remote.ip()), remote.port());
            let s = st.sockets.get_mut::<tcp::Socket>(h);
            if let Err(e) = s.connect(st.iface.context(), remote_ep, IpListenEndpoint::from(port)) {
                st.remove(h);
                return Err(io::Error::new(
                    io::ErrorKind::AddrNotAvailable,
                    format!("cannot connect to {remote}: {e}"),
                ));
            }
            let local = s.local_endpoint().map(to_socket_addr);
            (
                h,
                local.unwrap_or_else(|| SocketAddr::new(stack.addrs[0], port)),
            )
        };
        stack.kick();
        let stream = TcpStream::wrap(stack.clone(), handle, local, remote);
        let signal = stream.inner.tx.clone();
        let r = stack.block(&signal, Some(timeout), |st| {
            let s = st.sockets.get_mut::<tcp::Socket>(handle);
            match s.state() {
                tcp::State::SynSent | tcp::State::SynReceived => {
                    s.register_send_waker(&signal.waker());
                    Poll::Pending
                }
                tcp::State::Closed => Poll::Ready(Err(io::Error::new(
                    io::ErrorKind::ConnectionRefused,
                    format!("{remote} refused the connection"),
                ))),
                _ => Poll::Ready(Ok(())),
            }
        });
        match r {
            Ok(()) => Ok(stream),
            Err(e) => {
                stack.lock().sockets.get_mut::<tcp::Socket>(handle).abort();
                Err(e)
            }
        }
    }

    /// The address of the far end.
    pub fn peer_addr(&self) -> io::Result<SocketAddr> {
        Ok(self.inner.peer)
    }

    /// Our end's address (one of the stack's addresses).
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        Ok(self.inner.local)
    }

    /// Another handle to the same connection (the connection closes when the last is dropped).
    pub fn try_clone(&self) -> io::Result<TcpStream> {
        Ok(self.clone())
    }

    /// How long a read waits for data before it fails with `TimedOut`; `None` waits forever.
    pub fn set_read_timeout(&self, t: Option<Duration>) -> io::Result<()> {
        check_timeout(t)?;
        *self.inner.read_timeout.lock() = t;
        Ok(())
    }

    /// How long a write waits for buffer space before it fails with `TimedOut`.
    pub fn set_write_timeout(&self, t: Option<Duration>) -> io::Result<()> {
        check_timeout(t)?;
        *self.inner.write_timeout.lock() = t;
        Ok(())
    }

    /// The read timeout.
    pub fn read_timeout(&self) -> io::Result<Option<Duration>> {
        Ok(*self.inner.read_timeout.lock())
    }

    /// The write timeout.
    pub fn write_timeout(&self) -> io::Result<Option<Duration>> {
        Ok(*self.inner.write_timeout.lock())
    }

    /// Whether small writes go out at once (`true`) or are coalesced (Nagle's algorithm).
    pub fn set_nodelay(&self, nodelay: bool) -> io::Result<()> {
        self.with_socket(|s| s.set_nagle_enabled(!nodelay));
        Ok(())
    }

    /// Whether Nagle's algorithm is off.
    pub fn nodelay(&self) -> io::Result<bool> {
        Ok(self.with_socket(|s| !s.nagle_enabled()))
    }

    /// Shuts down the write side (sends FIN), the read side (later reads return 0), or both.
    pub fn shutdown(&self, how: Shutdown) -> io::Result<()> {
        if matches!(how, Shutdown::Read | Shutdown::Both) {
            self.inner.read_shut.store(true, Ordering::Release);
            self.inner.rx.notify();
        }
        if matches!(how, Shutdown::Write | Shutdown::Both) {
            self.with_socket(|s| s.close());
            self.inner.stack.kick();
        }
        Ok(())
    }

    /// Waits until everything written has been acknowledged by the peer.
    pub fn flush_acked(&self) -> io::Result<()> {
        let (h, signal) = (self.inner.handle, self.inner.tx.clone());
        let timeout = *self.inner.write_timeout.lock();
        self.inner.stack.block(&signal, timeout, |st| {
            let s = st.sockets.get_mut::<tcp::Socket>(h);
            if s.send_queue() == 0 || !s.is_active() {
                return Poll::Ready(Ok(()));
            }
            s.register_send_waker(&signal.waker());
            Poll::Pending
        })
    }

    fn with_socket<R>(&self, f: impl FnOnce(&mut tcp::Socket<'static>) -> R) -> R {
        let mut st = self.inner.stack.lock();
        f(st.sockets.get_mut::<tcp::Socket>(self.inner.handle))
    }

    fn read_some(&self, buf: &mut [u8]) -> io::Result<usize> {
        if buf.is_empty() || self.inner.read_shut.load(Ordering::Acquire) {
            return Ok(0);
        }
        let inner = &self.inner;
        let (h, signal) = (inner.handle, inner.rx.clone());
        let timeout = *inner.read_timeout.lock();
        let mut window_was_low = false;
        let n = inner.stack.block(&signal, timeout, |st| {
            if inner.read_shut.load(Ordering::Acquire) {
                return Poll::Ready(Ok(0));
            }
            let s = st.sockets.get_mut::<tcp::Socket>(h);
            window_was_low = window_is_low(s);
            match s.recv_slice(buf) {
                Ok(0) => {
                    s.register_recv_waker(&signal.waker());
                    Poll::Pending
                }
                Ok(n) => Poll::Ready(Ok(n)),
                Err(tcp::RecvError::Finished) => {
                    inner.eof.store(true, Ordering::Release);
                    Poll::Ready(Ok(0))
                }
                Err(tcp::RecvError::InvalidState) => {
                    if inner.eof.load(Ordering::Acquire) {
                        Poll::Ready(Ok(0))
                    } else {
                        Poll::Ready(Err(io::Error::new(
                            io::ErrorKind::ConnectionReset,
                            "the connection was reset",
                        )))
                    }
                }
            }
        })?;
        if n > 0 && window_was_low {
            // The window was nearly closed and this read opened it: the stack owes the peer a
            // window update. Otherwise the next ACK carries the larger window anyway, and
            // waking the TUN read after every read would cost a context switch for nothing.
            inner.stack.kick();
        }
        Ok(n)
    }

    fn write_some(&self, buf: &[u8]) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        let inner = &self.inner;
        let (h, signal) = (inner.handle, inner.tx.clone());
        let timeout = *inner.write_timeout.lock();
        let n = inner.stack.block(&signal, timeout, |st| {
            let s = st.sockets.get_mut::<tcp::Socket>(h);
            if !s.may_send() {
                let kind = if s.state() == tcp::State::Closed {
                    io::ErrorKind::ConnectionReset
                } else {
                    io::ErrorKind::BrokenPipe
                };
                return Poll::Ready(Err(io::Error::new(
                    kind,
                    "the connection is closed for writing",
                )));
            }
            match s.send_slice(buf) {
                Ok(0) => {
                    s.register_send_waker(&signal.waker());
                    Poll::Pending
                }
                Ok(n) => Poll::Ready(Ok(n)),
                Err(_) => Poll::Ready(Err(io::Error::new(
                    io::ErrorKind::BrokenPipe,
                    "the connection is closed for writing",
                ))),
            }
        })?;
        inner.stack.kick();
        Ok(n)
    }
}

/// Whether less than a quarter of the receive buffer is free: the window the peer sees is
/// small enough that reading opens it by the factor after which smoltcp sends an update.
fn window_is_low(s: &tcp::Socket<'_>) -> bool {
    let cap = s.recv_capacity();
    cap - s.recv_queue() < cap / 4
}

fn check_timeout(t: Option<Duration>) -> io::Result<()> {
    if t == Some(Duration::ZERO) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "a zero timeout is not allowed",
        ));
    }
    Ok(())
}

impl Read for TcpStream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.read_some(buf)
    }
}

impl Read for &TcpStream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.read_some(buf)
    }
}

impl Write for TcpStream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.write_some(buf)
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Write for &TcpStream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.write_some(buf)
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// A TCP listener on one of the stack's ports, like [`std::net::TcpListener`].
///
/// Connections are set up by the stack as SYNs arrive, up to the backlog; [`accept`] hands
/// out those that finished the handshake. Dropping the listener resets the ones nobody took.
///
/// [`accept`]: TcpListener::accept
pub struct TcpListener {
    stack: Arc<Stack>,
    port: u16,
    local: SocketAddr,
    signal: Arc<Signal>,
}

impl std::fmt::Debug for TcpListener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TcpListener")
            .field("local", &self.local)
            .finish()
    }
}

impl TcpListener {
    pub(crate) fn bind(stack: &Arc<Stack>, addr: SocketAddr) -> io::Result<TcpListener> {
        let ip = (!addr.ip().is_unspecified()).then(|| IpAddress::from(addr.ip()));
        if let Some(a) = ip {
            if !stack.addrs.contains(&a.into()) {
                return Err(io::Error::new(
                    io::ErrorKind::AddrNotAvailable,
                    format!("{} is not an address of the stack", addr.ip()),
                ));
            }
        }
        let mut st = stack.lock();
        let (port, signal) = st.add_listener(ip, addr.port())?;
        Ok(TcpListener {
            stack: stack.clone(),
            port,
            local: SocketAddr::new(addr.ip(), port),
            signal,
        })
    }

    /// The address it listens on (its port is the one picked when bound to port 0).
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        Ok(self.local)
    }

    /// Waits for a connection that finished its handshake.
    pub fn accept(&self) -> io::Result<(TcpStream, SocketAddr)> {
        self.accept_timeout(None)
    }

    /// [`accept`](Self::accept) waiting at most `timeout` (`None`: forever).
    pub fn accept_timeout(&self, timeout: Option<Duration>) -> io::Result<(TcpStream, SocketAddr)> {
        let port = self.port;
        let signal = self.signal.clone();
        let (h, local, peer) = self.stack.block(&signal, timeout, |st| loop {
            let st = &mut *st;
            let Some(l) = st.listeners.get_mut(&port) else {
                return Poll::Ready(Err(crate::stack::closed()));
            };
            let ready = l.pending.iter().position(|&h| {
                !matches!(
                    st.sockets.get_mut::<tcp::Socket>(h).state(),
                    tcp::State::Listen | tcp::State::SynReceived
                )
            });
            let Some(i) = ready else {
                for &h in &l.pending {
                    st.sockets
                        .get_mut::<tcp::Socket>(h)
                        .register_recv_waker(&signal.waker());
                }
                return Poll::Pending;
            };
            let h = l.pending.remove(i).expect("index from position");
            let s = st.sockets.get_mut::<tcp::Socket>(h);
            match (s.local_endpoint(), s.remote_endpoint()) {
                (Some(l), Some(p)) => {
                    return Poll::Ready(Ok((h, to_socket_addr(l), to_socket_addr(p))));
                }
                // Reset before it was taken: forget it and look again.
                _ => st.remove(h),
            }
        })?;
        Ok((TcpStream::wrap(self.stack.clone(), h, local, peer), peer))
    }

    /// An iterator over incoming connections, as `std`'s.
    pub fn incoming(&self) -> impl Iterator<Item = io::Result<TcpStream>> + '_ {
        std::iter::from_fn(move || Some(self.accept().map(|(s, _)| s)))
    }
}

impl Drop for TcpListener {
    fn drop(&mut self) {
        self.stack.lock().remove_listener(self.port);
        self.stack.kick();
    }
}
