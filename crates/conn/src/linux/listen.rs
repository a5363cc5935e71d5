//! Creating the sockets: one per address family on one port, with the options upstream
//! applies before `bind` (reference-behaviour §3.2).

use std::io;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};
use std::os::fd::AsFd;

use socket2::{Domain, Protocol, Socket, Type};
use vpn_sys::sockopt::{self, SO_RCVBUFFORCE, SO_SNDBUFFORCE, UDP_GRO, UDP_SEGMENT};

/// Send and receive buffer size: 7 MiB (upstream's `socketBufferSize`).
pub(super) const SOCKET_BUFFER_SIZE: usize = 7 << 20;
/// How often a port-0 open retries when the v6 half finds the v4 half's port taken.
const PORT_RETRIES: usize = 100;

/// A bound socket and the offloads the kernel confirmed for it.
pub(super) struct Listener {
    pub sock: Socket,
    pub gso: bool,
    pub gro: bool,
}

/// Opens one family's socket on `port`. `offload` false leaves UDP GSO/GRO off; `share` makes
/// the port shareable with connected sockets (`SO_REUSEPORT` alone, see
/// [`reuse_port_control`](crate::connected::reuse_port_control)).
pub(super) fn listen(
    v6: bool,
    port: u16,
    mark: u32,
    offload: bool,
    share: bool,
) -> io::Result<Listener> {
    let domain = if v6 { Domain::IPV6 } else { Domain::IPV4 };
    let sock = Socket::new(domain, Type::DGRAM, Some(Protocol::UDP))?;
    let fd = sock.as_fd();
    if v6 {
        sock.set_only_v6(true)?;
    }
    // Best effort: the plain sizes are capped by r/wmem_max, the FORCE variants need
    // CAP_NET_ADMIN. Neither failing is a reason not to run.
    let _ = sock.set_recv_buffer_size(SOCKET_BUFFER_SIZE);
    let _ = sock.set_send_buffer_size(SOCKET_BUFFER_SIZE);
    let size = SOCKET_BUFFER_SIZE as libc::c_int;
    let _ = sockopt::set_int(fd, libc::SOL_SOCKET, SO_RCVBUFFORCE, size);
    let _ = sockopt::set_int(fd, libc::SOL_SOCKET, SO_SNDBUFFORCE, size);
    // Sticky source: the local address and interface of every datagram.
    if v6 {
        sockopt::set_int(fd, libc::IPPROTO_IPV6, libc::IPV6_RECVPKTINFO, 1)?;
    } else {
        sockopt::set_int(fd, libc::IPPROTO_IP, libc::IP_PKTINFO, 1)?;
    }
    // GRO before 5.12 cannot report segment sizes reliably (peers.md): leave it off there.
    if offload && sockopt::kernel_at_least(5, 12) {
        let _ = sockopt::set_int(fd, libc::SOL_UDP, UDP_GRO, 1);
    }
    if mark != 0 {
        sock.set_mark(mark)?;
    }
    if share {
        crate::connected::reuse_port_control(&sock)?;
    }
    let addr = if v6 {
        SocketAddr::from((Ipv6Addr::UNSPECIFIED, port))
    } else {
        SocketAddr::from((Ipv4Addr::UNSPECIFIED, port))
    };
    sock.bind(&addr.into())?;
    let fd = sock.as_fd();
    let gso = offload && sockopt::get_int(fd, libc::SOL_UDP, UDP_SEGMENT).is_ok();
    let gro = offload && sockopt::get_int(fd, libc::SOL_UDP, UDP_GRO).is_ok_and(|v| v == 1);
    Ok(Listener { sock, gso, gro })
}

/// The port a socket is bound to.
pub(super) fn local_port(sock: &Socket) -> io::Result<u16> {
    sock.local_addr()?
        .as_socket()
        .map(|a| a.port())
        .ok_or_else(|| io::Error::other("socket has no IP address"))
}

fn is_errno(e: &io::Error, errno: i32) -> bool {
    e.raw_os_error() == Some(errno)
}

/// Opens IPv4 then IPv6 on the same port. A family the system lacks (EAFNOSUPPORT) is left
/// out; both missing is that error. With `port` 0, a v6 clash on the port the kernel picked
/// for v4 closes v4 and tries again with a new port, up to [`PORT_RETRIES`] times.
pub(super) fn listen_pair(
    port: u16,
    mark: u32,
    offload: bool,
    share: bool,
) -> io::Result<(Option<Listener>, Option<Listener>, u16)> {
    for _ in 0..PORT_RETRIES {
        let v4 = match listen(false, port, mark, offload, share) {
            Ok(l) => Some(l),
            Err(e) if is_errno(&e, libc::EAFNOSUPPORT) => None,
            Err(e) => return Err(e),
        };
        let actual = match &v4 {
            Some(l) => local_port(&l.sock)?,
            None => port,
        };
        let v6 = match listen(true, actual, mark, offload, share) {
            Ok(l) => Some(l),
            Err(e) if is_errno(&e, libc::EAFNOSUPPORT) => None,
            Err(e) if is_errno(&e, libc::EADDRINUSE) && port == 0 && v4.is_some() => continue,
            Err(e) => return Err(e),
        };
        let actual = match (&v4, &v6) {
            (None, None) => return Err(io::Error::from_raw_os_error(libc::EAFNOSUPPORT)),
            (None, Some(l)) => local_port(&l.sock)?,
            (Some(_), _) => actual,
        };
        return Ok((v4, v6, actual));
    }
    Err(io::Error::from_raw_os_error(libc::EADDRINUSE))
}
