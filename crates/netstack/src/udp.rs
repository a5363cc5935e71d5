//! UDP through the stack, shaped like [`std::net::UdpSocket`].

use crate::signal::Signal;
use crate::stack::{Proto, Stack};
use crate::tcp::to_socket_addr;
use parking_lot::Mutex;
use smoltcp::iface::SocketHandle;
use smoltcp::socket::udp;
use smoltcp::wire::{IpAddress, IpEndpoint, IpListenEndpoint};
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

/// How many datagrams each direction's buffer holds at most (besides its byte size).
const DATAGRAMS: usize = 256;

/// A UDP socket on one of the stack's ports.
///
/// Like `std`'s: [`send_to`]/[`recv_from`], or [`connect`] then [`send`]/[`recv`] (a
/// connected socket drops datagrams from other addresses). A datagram longer than the
/// buffer given to a receive is cut to it. Dropping the socket frees its port.
///
/// [`send_to`]: UdpSocket::send_to
/// [`recv_from`]: UdpSocket::recv_from
/// [`connect`]: UdpSocket::connect
/// [`send`]: UdpSocket::send
/// [`recv`]: UdpSocket::recv
pub struct UdpSocket {
    stack: Arc<Stack>,
    handle: SocketHandle,
    rx: Arc<Signal>,
    tx: Arc<Signal>,
    local: SocketAddr,
    peer: Mutex<Option<SocketAddr>>,
    read_timeout: Mutex<Option<Duration>>,
    write_timeout: Mutex<Option<Duration>>,
}

impl std::fmt::Debug for UdpSocket {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UdpSocket")
            .field("local", &self.local)
            .field("peer", &*self.peer.lock())
            .finish()
    }
}

impl UdpSocket {
    pub(crate) fn bind(stack: &Arc<Stack>, addr: SocketAddr) -> io::Result<UdpSocket> {
        let ip = (!addr.ip().is_unspecified()).then(|| IpAddress::from(addr.ip()));
        if ip.is_some_and(|a| !stack.addrs.contains(&a.into())) {
            return Err(io::Error::new(
                io::ErrorKind::AddrNotAvailable,
                format!("{} is not an address of the stack", addr.ip()),
            ));
        }
        let size = stack.opts.udp_buffer;
        let buffer =
            || udp::PacketBuffer::new(vec![udp::PacketMetadata::EMPTY; DATAGRAMS], vec![0; size]);
        let mut socket = udp::Socket::new(buffer(), buffer());
        let mut st = stack.lock();
        let port = st.claim_port(Proto::Udp, addr.port())?;
        socket
            .bind(IpListenEndpoint { addr: ip, port })
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e.to_string()))?;
        let handle = st.add(
            &stack.opts,
            Proto::Udp,
            socket,
            2 * size,
            Some((Proto::Udp, port)),
        )?;
        Ok(UdpSocket {
            stack: stack.clone(),
            handle,
            rx: Signal::new(),
            tx: Signal::new(),
            local: SocketAddr::new(addr.ip(), port),
            peer: Mutex::new(None),
            read_timeout: Mutex::new(None),
            write_timeout: Mutex::new(None),
        })
    }

    /// The address it is bound to.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        Ok(self.local)
    }

    /// The address it is connected to.
    pub fn peer_addr(&self) -> io::Result<SocketAddr> {
        self.peer
            .lock()
            .ok_or_else(|| io::Error::new(io::ErrorKind::NotConnected, "not connected"))
    }

    /// Sets the default destination and accepts datagrams only from it.
    pub fn connect(&self, peer: SocketAddr) -> io::Result<()> {
        if peer.port() == 0 || peer.ip().is_unspecified() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "cannot connect to an unspecified address or port 0",
            ));
        }
        *self.peer.lock() = Some(peer);
        Ok(())
    }

    /// How long a receive waits; `None` waits forever.
    pub fn set_read_timeout(&self, t: Option<Duration>) -> io::Result<()> {
        if t == Some(Duration::ZERO) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "a zero timeout is not allowed",
            ));
        }
        *self.read_timeout.lock() = t;
        Ok(())
    }

    /// How long a send waits for buffer space; `None` waits forever.
    pub fn set_write_timeout(&self, t: Option<Duration>) -> io::Result<()> {
        if t == Some(Duration::ZERO) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "a zero timeout is not allowed",
            ));
        }
        *self.write_timeout.lock() = t;
        Ok(())
    }

    /// Sends one datagram to `to`.
    pub fn send_to(&self, data: &[u8], to: SocketAddr) -> io::Result<usize> {
        if to.port() == 0 || to.ip().is_unspecified() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "no destination",
            ));
        }
        if data.len() > self.stack.opts.udp_buffer {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "datagram larger than the socket's buffer",
            ));
        }
        let h = self.handle;
        let signal = self.tx.clone();
        let endpoint = IpEndpoint::new(IpAddress::from(to.ip()), to.port());
        let timeout = *self.write_timeout.lock();
        self.stack.block(&signal, timeout, |st| {
            let s = st.sockets.get_mut::<udp::Socket>(h);
            match s.send_slice(data, endpoint) {
                Ok(()) => Poll::Ready(Ok(data.len())),
                Err(udp::SendError::BufferFull) => {
                    s.register_send_waker(&signal.waker());
                    Poll::Pending
                }
                Err(udp::SendError::Unaddressable) => Poll::Ready(Err(io::Error::new(
                    io::ErrorKind::AddrNotAvailable,
                    format!("cannot send to {to}"),
                ))),
            }
        })?;
        self.stack.kick();
        Ok(data.len())
    }

    /// Sends one datagram to the connected address.
    pub fn send(&self, data: &[u8]) -> io::Result<usize> {
        self.send_to(data, self.peer_addr()?)
    }

    /// Receives one datagram and who sent it.
    pub fn recv_from(&self, buf: &mut [u8]) -> io::Result<(usize, SocketAddr)> {
        let h = self.handle;
        let signal = self.rx.clone();
        let peer = *self.peer.lock();
        let timeout = *self.read_timeout.lock();
        self.stack.block(&signal, timeout, |st| loop {
            let s = st.sockets.get_mut::<udp::Socket>(h);
            match s.recv() {
                Ok((data, meta)) => {
                    let from = to_socket_addr(meta.endpoint);
                    if peer.is_some_and(|p| !same_peer(p, from)) {
                        continue;
                    }
                    let n = data.len().min(buf.len());
                    buf[..n].copy_from_slice(&data[..n]);
                    return Poll::Ready(Ok((n, from)));
                }
                Err(_) => {
                    s.register_recv_waker(&signal.waker());
                    return Poll::Pending;
                }
            }
        })
    }

    /// Receives one datagram from the connected address.
    pub fn recv(&self, buf: &mut [u8]) -> io::Result<usize> {
        self.peer_addr()?;
        self.recv_from(buf).map(|(n, _)| n)
    }
}

/// Whether a datagram from `from` comes from the connected `peer` (an IPv4-mapped IPv6 peer
/// matches its IPv4 address).
fn same_peer(peer: SocketAddr, from: SocketAddr) -> bool {
    peer.port() == from.port() && peer.ip().to_canonical() == from.ip().to_canonical()
}

impl Drop for UdpSocket {
    fn drop(&mut self) {
        // Orphaned rather than removed, so what is queued still goes out before the sweep.
        self.stack.lock().orphan(self.handle);
        self.stack.kick();
    }
}
