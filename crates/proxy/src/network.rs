//! The networks a server listens on and dials through: the host ([`HostNetwork`], std::net)
//! and the tunnel ([`vpn_netstack::Net`]), behind one set of traits.

use std::io::{self, Read, Write};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, Shutdown, SocketAddr, ToSocketAddrs};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A network the proxy dials or listens on: the tunnel (vpn_netstack::Net) or the host (std::net).
pub trait Network: Send + Sync + 'static {
    /// A TCP connection to `addr`, waiting at most `timeout`.
    fn connect(&self, addr: SocketAddr, timeout: Duration) -> io::Result<Box<dyn Stream>>;
    /// The addresses of `host` (IP literals, bracketed or not, are returned as they are).
    fn lookup(&self, host: &str) -> io::Result<Vec<IpAddr>>;
    /// A TCP listener on `addr` (port 0 picks a free port).
    fn listen(&self, addr: SocketAddr) -> io::Result<Box<dyn Listener>>;
    /// A UDP socket bound to `addr` (port 0 picks a free port). An unspecified IPv6 address
    /// gives a socket that sends to and receives from both families where the network can.
    fn bind_udp(&self, addr: SocketAddr) -> io::Result<Box<dyn Datagram>>;
    /// A handle to this same network that a server can keep, for networks a server is only
    /// lent (the SOCKS5 server binds each UDP ASSOCIATE relay on its listening network).
    /// `None`, the default, makes such a server use [`HostNetwork`] instead.
    fn shared(&self) -> Option<Arc<dyn Network>> {
        None
    }
}

/// A TCP connection on a [`Network`].
pub trait Stream: Read + Write + Send + Sync {
    /// Another handle to the same connection (for the relay's second direction).
    fn try_clone_stream(&self) -> io::Result<Box<dyn Stream>>;
    /// Sends FIN: the peer reads EOF; reading goes on.
    fn shutdown_write(&self) -> io::Result<()>;
    /// How long a read waits before failing with `TimedOut` (or `WouldBlock`); `None` waits
    /// forever.
    fn set_read_timeout(&self, t: Option<Duration>) -> io::Result<()>;
    /// The far end's address.
    fn peer_addr(&self) -> io::Result<SocketAddr>;
    /// This end's address.
    fn local_addr(&self) -> io::Result<SocketAddr>;
    /// Shuts both directions, so a read blocked on another handle returns; the relay calls it
    /// when one direction fails. The default only shuts the write side.
    fn shutdown_both(&self) -> io::Result<()> {
        self.shutdown_write()
    }
}

/// A TCP listener on a [`Network`].
pub trait Listener: Send + Sync {
    /// The next connection and its peer, waiting at most `t` (`None`: forever); fails with
    /// `TimedOut` when the time passes.
    fn accept_timeout(&self, t: Option<Duration>) -> io::Result<(Box<dyn Stream>, SocketAddr)>;
    /// The address it listens on.
    fn local_addr(&self) -> io::Result<SocketAddr>;
}

/// A UDP socket on a [`Network`].
pub trait Datagram: Send + Sync {
    /// Sends one datagram.
    fn send_to(&self, data: &[u8], to: SocketAddr) -> io::Result<usize>;
    /// Receives one datagram (cut to `buf`) and its sender.
    fn recv_from(&self, buf: &mut [u8]) -> io::Result<(usize, SocketAddr)>;
    /// How long a receive waits before failing with `TimedOut` (or `WouldBlock`).
    fn set_read_timeout(&self, t: Option<Duration>) -> io::Result<()>;
    /// The address it is bound to.
    fn local_addr(&self) -> io::Result<SocketAddr>;
}

/// A timeout both std and the netstack accept: they refuse a zero one, which here means the
/// shortest wait instead.
pub(crate) fn nonzero(t: Option<Duration>) -> Option<Duration> {
    t.map(|d| d.max(Duration::from_millis(1)))
}

/// `host` without the brackets of an IPv6 literal, parsed if it is an IP literal.
fn ip_literal(host: &str) -> Option<IpAddr> {
    let bare = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    bare.parse().ok()
}

/// The host's own network, through std::net (the system resolver for names).
#[derive(Clone, Copy, Debug, Default)]
pub struct HostNetwork;

impl Network for HostNetwork {
    fn connect(&self, addr: SocketAddr, timeout: Duration) -> io::Result<Box<dyn Stream>> {
        let timeout = timeout.max(Duration::from_millis(1));
        let s = std::net::TcpStream::connect_timeout(&addr, timeout)?;
        // Proxied traffic is often interactive; the client's own stack already coalesces.
        s.set_nodelay(true)?;
        Ok(Box::new(s))
    }

    fn lookup(&self, host: &str) -> io::Result<Vec<IpAddr>> {
        if let Some(ip) = ip_literal(host) {
            return Ok(vec![ip]);
        }
        let mut ips: Vec<IpAddr> = Vec::new();
        for a in (host, 0).to_socket_addrs()? {
            if !ips.contains(&a.ip()) {
                ips.push(a.ip());
            }
        }
        if ips.is_empty() {
            return Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!("{host} has no address"),
            ));
        }
        Ok(ips)
    }

    fn listen(&self, addr: SocketAddr) -> io::Result<Box<dyn Listener>> {
        Ok(Box::new(HostListener::bind(addr)?))
    }

    fn bind_udp(&self, addr: SocketAddr) -> io::Result<Box<dyn Datagram>> {
        Ok(Box::new(HostDatagram::bind(addr)?))
    }

    fn shared(&self) -> Option<Arc<dyn Network>> {
        Some(Arc::new(HostNetwork))
    }
}

impl Stream for std::net::TcpStream {
    fn try_clone_stream(&self) -> io::Result<Box<dyn Stream>> {
        Ok(Box::new(self.try_clone()?))
    }
    fn shutdown_write(&self) -> io::Result<()> {
        ignore_not_connected(self.shutdown(Shutdown::Write))
    }
    fn set_read_timeout(&self, t: Option<Duration>) -> io::Result<()> {
        std::net::TcpStream::set_read_timeout(self, nonzero(t))
    }
    fn peer_addr(&self) -> io::Result<SocketAddr> {
        std::net::TcpStream::peer_addr(self)
    }
    fn local_addr(&self) -> io::Result<SocketAddr> {
        std::net::TcpStream::local_addr(self)
    }
    fn shutdown_both(&self) -> io::Result<()> {
        ignore_not_connected(self.shutdown(Shutdown::Both))
    }
}

/// A shutdown of a connection the peer already reset has nothing left to do.
fn ignore_not_connected(r: io::Result<()>) -> io::Result<()> {
    match r {
        Err(e) if e.kind() == io::ErrorKind::NotConnected => Ok(()),
        r => r,
    }
}

/// A std listener whose accept can time out.
///
/// On Linux accept(2) honours SO_RCVTIMEO, so the accept blocks in the kernel and returns as
/// soon as a connection comes; elsewhere the listener is non-blocking and polled with short
/// sleeps.
struct HostListener {
    inner: std::net::TcpListener,
    kernel_timeout: bool,
}

impl HostListener {
    fn bind(addr: SocketAddr) -> io::Result<HostListener> {
        let inner = std::net::TcpListener::bind(addr)?;
        let kernel_timeout = cfg!(any(target_os = "linux", target_os = "android"));
        if !kernel_timeout {
            inner.set_nonblocking(true)?;
        }
        Ok(HostListener {
            inner,
            kernel_timeout,
        })
    }

    fn accept_blocking(&self, t: Option<Duration>) -> io::Result<std::net::TcpStream> {
        socket2::SockRef::from(&self.inner).set_read_timeout(nonzero(t))?;
        match self.inner.accept() {
            Ok((s, _)) => Ok(s),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Err(timed_out()),
            Err(e) => Err(e),
        }
    }

    fn accept_polling(&self, t: Option<Duration>) -> io::Result<std::net::TcpStream> {
        let deadline = t.map(|t| Instant::now() + t);
        let mut nap = Duration::from_millis(1);
        loop {
            match self.inner.accept() {
                Ok((s, _)) => return Ok(s),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => return Err(e),
            }
            let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
            if left == Some(Duration::ZERO) {
                return Err(timed_out());
            }
            std::thread::sleep(left.map_or(nap, |l| l.min(nap)));
            nap = (nap * 2).min(Duration::from_millis(20));
        }
    }
}

fn timed_out() -> io::Error {
    io::Error::new(io::ErrorKind::TimedOut, "accept timed out")
}

impl Listener for HostListener {
    fn accept_timeout(&self, t: Option<Duration>) -> io::Result<(Box<dyn Stream>, SocketAddr)> {
        let s = if self.kernel_timeout {
            self.accept_blocking(t)?
        } else {
            self.accept_polling(t)?
        };
        // What the listener had set must not stick to the connection: an accepted socket
        // inherits SO_RCVTIMEO on Linux and O_NONBLOCK on the BSDs.
        s.set_nonblocking(false)?;
        s.set_read_timeout(None)?;
        s.set_nodelay(true)?;
        let peer = s.peer_addr()?;
        Ok((Box::new(s), peer))
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        self.inner.local_addr()
    }
}

/// A std UDP socket; one bound to `[::]` is dual-stack, IPv4 peers written and reported as
/// plain IPv4 addresses.
struct HostDatagram {
    inner: std::net::UdpSocket,
    dual_stack: bool,
}

impl HostDatagram {
    fn bind(addr: SocketAddr) -> io::Result<HostDatagram> {
        if addr.ip() != IpAddr::V6(Ipv6Addr::UNSPECIFIED) {
            let inner = std::net::UdpSocket::bind(addr)?;
            return Ok(HostDatagram {
                inner,
                dual_stack: false,
            });
        }
        let s = socket2::Socket::new(
            socket2::Domain::IPV6,
            socket2::Type::DGRAM,
            Some(socket2::Protocol::UDP),
        )?;
        s.set_only_v6(false)?;
        s.bind(&addr.into())?;
        Ok(HostDatagram {
            inner: s.into(),
            dual_stack: true,
        })
    }
}

impl Datagram for HostDatagram {
    fn send_to(&self, data: &[u8], to: SocketAddr) -> io::Result<usize> {
        let to = match to.ip() {
            IpAddr::V4(v4) if self.dual_stack => {
                SocketAddr::new(IpAddr::V6(v4.to_ipv6_mapped()), to.port())
            }
            _ => to,
        };
        self.inner.send_to(data, to)
    }
    fn recv_from(&self, buf: &mut [u8]) -> io::Result<(usize, SocketAddr)> {
        let (n, from) = self.inner.recv_from(buf)?;
        Ok((n, SocketAddr::new(from.ip().to_canonical(), from.port())))
    }
    fn set_read_timeout(&self, t: Option<Duration>) -> io::Result<()> {
        self.inner.set_read_timeout(nonzero(t))
    }
    fn local_addr(&self) -> io::Result<SocketAddr> {
        self.inner.local_addr()
    }
}

/// The tunnel: dials, listens and resolves through the userspace stack.
impl Network for vpn_netstack::Net {
    fn connect(&self, addr: SocketAddr, timeout: Duration) -> io::Result<Box<dyn Stream>> {
        let s = self.dial_tcp_timeout(addr, timeout.max(Duration::from_millis(1)))?;
        s.set_nodelay(true)?;
        Ok(Box::new(s))
    }

    fn lookup(&self, host: &str) -> io::Result<Vec<IpAddr>> {
        self.lookup_host(host)
    }

    fn listen(&self, addr: SocketAddr) -> io::Result<Box<dyn Listener>> {
        Ok(Box::new(self.listen_tcp(addr)?))
    }

    fn bind_udp(&self, addr: SocketAddr) -> io::Result<Box<dyn Datagram>> {
        Ok(Box::new(vpn_netstack::Net::bind_udp(self, addr)?))
    }

    fn shared(&self) -> Option<Arc<dyn Network>> {
        Some(Arc::new(self.clone()))
    }
}

impl Stream for vpn_netstack::TcpStream {
    fn try_clone_stream(&self) -> io::Result<Box<dyn Stream>> {
        Ok(Box::new(self.clone()))
    }
    fn shutdown_write(&self) -> io::Result<()> {
        self.shutdown(Shutdown::Write)
    }
    fn set_read_timeout(&self, t: Option<Duration>) -> io::Result<()> {
        vpn_netstack::TcpStream::set_read_timeout(self, nonzero(t))
    }
    fn peer_addr(&self) -> io::Result<SocketAddr> {
        vpn_netstack::TcpStream::peer_addr(self)
    }
    fn local_addr(&self) -> io::Result<SocketAddr> {
        vpn_netstack::TcpStream::local_addr(self)
    }
    fn shutdown_both(&self) -> io::Result<()> {
        self.shutdown(Shutdown::Both)
    }
}

impl Listener for vpn_netstack::TcpListener {
    fn accept_timeout(&self, t: Option<Duration>) -> io::Result<(Box<dyn Stream>, SocketAddr)> {
        let (s, peer) = vpn_netstack::TcpListener::accept_timeout(self, nonzero(t))?;
        s.set_nodelay(true)?;
        Ok((Box::new(s), peer))
    }
    fn local_addr(&self) -> io::Result<SocketAddr> {
        vpn_netstack::TcpListener::local_addr(self)
    }
}

impl Datagram for vpn_netstack::UdpSocket {
    fn send_to(&self, data: &[u8], to: SocketAddr) -> io::Result<usize> {
        vpn_netstack::UdpSocket::send_to(self, data, to)
    }
    fn recv_from(&self, buf: &mut [u8]) -> io::Result<(usize, SocketAddr)> {
        vpn_netstack::UdpSocket::recv_from(self, buf)
    }
    fn set_read_timeout(&self, t: Option<Duration>) -> io::Result<()> {
        vpn_netstack::UdpSocket::set_read_timeout(self, nonzero(t))
    }
    fn local_addr(&self) -> io::Result<SocketAddr> {
        vpn_netstack::UdpSocket::local_addr(self)
    }
}

/// The unspecified address of `ip`'s family, port 0: where to bind a socket that talks to
/// `ip`.
pub(crate) fn any_for(ip: IpAddr) -> SocketAddr {
    let any: IpAddr = match ip {
        IpAddr::V4(_) => Ipv4Addr::UNSPECIFIED.into(),
        IpAddr::V6(_) => Ipv6Addr::UNSPECIFIED.into(),
    };
    SocketAddr::new(any, 0)
}

/// A UDP socket for any destination: dual-stack `[::]:0` where the network has IPv6,
/// `0.0.0.0:0` otherwise.
pub(crate) fn bind_any_family(net: &dyn Network) -> io::Result<Box<dyn Datagram>> {
    net.bind_udp(SocketAddr::new(Ipv6Addr::UNSPECIFIED.into(), 0))
        .or_else(|_| net.bind_udp(SocketAddr::new(Ipv4Addr::UNSPECIFIED.into(), 0)))
}

/// A connection to `host:port` through `net`: the name resolved by `net`, each address tried
/// in turn, the addresses left sharing what remains of `timeout`. A name that does not
/// resolve fails with `HostUnreachable`.
pub(crate) fn connect_host(
    net: &dyn Network,
    host: &str,
    port: u16,
    timeout: Duration,
) -> io::Result<Box<dyn Stream>> {
    let deadline = Instant::now() + timeout;
    let ips = resolve(net, host)?;
    let mut last = None;
    for (i, ip) in ips.iter().enumerate() {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            break;
        }
        let share = left / (ips.len() - i) as u32;
        match net.connect(SocketAddr::new(*ip, port), share) {
            Ok(s) => return Ok(s),
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or_else(|| io::Error::new(io::ErrorKind::TimedOut, "connect timed out")))
}

/// `host`'s addresses through `net`; a failure to resolve is `HostUnreachable` (which the
/// SOCKS5 reply and the HTTP status report as such).
pub(crate) fn resolve(net: &dyn Network, host: &str) -> io::Result<Vec<IpAddr>> {
    match net.lookup(host) {
        Ok(ips) if !ips.is_empty() => Ok(ips),
        Ok(_) => Err(io::Error::new(
            io::ErrorKind::HostUnreachable,
            format!("{host} has no address"),
        )),
        Err(e) => Err(io::Error::new(
            io::ErrorKind::HostUnreachable,
            format!("cannot resolve {host}: {e}"),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn literals_are_not_looked_up() {
        assert_eq!(
            HostNetwork.lookup("[::1]").unwrap(),
            vec![IpAddr::V6(Ipv6Addr::LOCALHOST)]
        );
        assert_eq!(
            HostNetwork.lookup("10.1.2.3").unwrap(),
            vec![IpAddr::V4(Ipv4Addr::new(10, 1, 2, 3))]
        );
    }

    #[test]
    fn accept_times_out() {
        let l = HostNetwork.listen("127.0.0.1:0".parse().unwrap()).unwrap();
        let t = Instant::now();
        let e = l
            .accept_timeout(Some(Duration::from_millis(50)))
            .err()
            .unwrap();
        assert_eq!(e.kind(), io::ErrorKind::TimedOut);
        assert!(t.elapsed() >= Duration::from_millis(40));
    }

    #[test]
    fn an_accepted_stream_blocks_without_a_timeout() {
        let l = HostNetwork.listen("127.0.0.1:0".parse().unwrap()).unwrap();
        let addr = l.local_addr().unwrap();
        let mut c = std::net::TcpStream::connect(addr).unwrap();
        let (mut s, peer) = l.accept_timeout(Some(Duration::from_secs(5))).unwrap();
        assert_eq!(peer, c.local_addr().unwrap());
        let reader = std::thread::spawn(move || {
            let mut b = [0u8; 1];
            // Longer than the listener's timeout: the read must not inherit it.
            let t = Instant::now();
            s.read_exact(&mut b).map(|_| (b[0], t.elapsed()))
        });
        std::thread::sleep(Duration::from_millis(300));
        c.write_all(b"x").unwrap();
        let (b, waited) = reader.join().unwrap().unwrap();
        assert_eq!(b, b'x');
        assert!(waited >= Duration::from_millis(250));
    }

    #[test]
    fn polling_accept_works_too() {
        let inner = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        inner.set_nonblocking(true).unwrap();
        let l = HostListener {
            inner,
            kernel_timeout: false,
        };
        let e = l.accept_timeout(Some(Duration::from_millis(30))).err();
        assert_eq!(e.map(|e| e.kind()), Some(io::ErrorKind::TimedOut));
        let addr = l.local_addr().unwrap();
        let _c = std::net::TcpStream::connect(addr).unwrap();
        let (s, _) = l.accept_timeout(Some(Duration::from_secs(5))).unwrap();
        assert!(s.peer_addr().is_ok());
    }

    #[test]
    fn a_dual_stack_socket_talks_to_ipv4() {
        let Ok(d) = HostNetwork.bind_udp("[::]:0".parse().unwrap()) else {
            eprintln!("skipped: no IPv6 on this host");
            return;
        };
        let peer = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let port = d.local_addr().unwrap().port();
        d.send_to(b"hi", peer.local_addr().unwrap()).unwrap();
        let mut buf = [0u8; 8];
        peer.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let (n, from) = peer.recv_from(&mut buf).unwrap();
        assert_eq!((&buf[..n], from.port()), (&b"hi"[..], port));
        peer.send_to(b"back", from).unwrap();
        d.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let (n, from) = d.recv_from(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"back");
        assert_eq!(from, peer.local_addr().unwrap(), "reported as plain IPv4");
    }

    #[test]
    fn zero_timeouts_are_the_shortest_wait() {
        assert_eq!(nonzero(None), None);
        assert_eq!(
            nonzero(Some(Duration::ZERO)),
            Some(Duration::from_millis(1))
        );
        assert_eq!(
            nonzero(Some(Duration::from_secs(3))),
            Some(Duration::from_secs(3))
        );
    }
}
