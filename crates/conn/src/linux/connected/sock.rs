//! The system side of connected sockets: making a socket share the port, dialling a pair,
//! asking the kernel which local address a route picks, and whether an address still exists.

use std::io;
use std::net::{IpAddr, SocketAddr, SocketAddrV6, UdpSocket};
use std::os::fd::AsFd;

use socket2::{Domain, Protocol, Socket, Type};
use vpn_sys::sockopt::{self, SO_RCVBUFFORCE, UDP_GRO, UDP_SEGMENT};

use super::{Control, Key};

/// `SO_SNDBUF` of each pair socket (`connectedBufSize`).
pub(super) const PAIR_SEND_BUFFER: usize = 1 << 20;
/// `SO_RCVBUF` a pair socket is raised to (`connectedRecvBufSize` on Linux); never lowered.
pub(super) const PAIR_RECV_BUFFER: usize = 4 << 20;

/// Makes `sock` share its port with the bind's other sockets: `SO_REUSEPORT` alone.
///
/// Linux only lets sockets of the same effective UID join a reuse-port group, so another user
/// cannot bind the port and steal traffic. `SO_REUSEADDR` is deliberately not set: UDP sockets
/// that all set it share a port without that user check (reference-behaviour §4.6).
pub fn reuse_port_control(sock: &Socket) -> io::Result<()> {
    sock.set_reuse_port(true)
}

fn domain_of(ip: IpAddr) -> Domain {
    if ip.is_ipv6() {
        Domain::IPV6
    } else {
        Domain::IPV4
    }
}

fn udp_socket(ip: IpAddr) -> io::Result<Socket> {
    let s = Socket::new(domain_of(ip), Type::DGRAM, Some(Protocol::UDP))?;
    if ip.is_ipv6() {
        s.set_only_v6(true)?;
    }
    Ok(s)
}

/// The local address the kernel's routing picks for `dst`, found by connecting a throw-away
/// UDP socket (no packet is sent) with the caller's `control` applied, so fwmark routing and
/// interface pinning count.
pub(super) fn route_local(dst: SocketAddr, control: Option<&Control>) -> io::Result<IpAddr> {
    let s = udp_socket(dst.ip())?;
    if let Some(c) = control {
        c(&s)?;
    }
    s.connect(&dst.into())?;
    s.local_addr()?
        .as_socket()
        .map(|a| a.ip())
        .ok_or_else(|| io::Error::other("route lookup: no IP local address"))
}

/// Whether `ip` is still assigned to an interface here: binding a throw-away socket to it fails
/// with `EADDRNOTAVAIL` once it is gone.
pub(super) fn local_addr_present(ip: IpAddr, scope: u32) -> bool {
    let addr = match ip {
        IpAddr::V6(v6) => SocketAddr::V6(SocketAddrV6::new(v6, 0, 0, scope)),
        v4 => SocketAddr::new(v4, 0),
    };
    match UdpSocket::bind(addr) {
        Ok(_) => true,
        Err(e) => e.raw_os_error() != Some(libc::EADDRNOTAVAIL),
    }
}

/// A dialled pair socket and the offloads the kernel confirmed on it.
pub(super) struct Dialled {
    pub sock: Socket,
    pub gso: bool,
    pub gro: bool,
}

/// The local address to bind for `key`, with the remote's zone for link-local IPv6.
fn bind_addr(key: &Key, port: u16) -> SocketAddr {
    match (key.local, key.remote) {
        (IpAddr::V6(l), SocketAddr::V6(r)) => SocketAddr::V6(SocketAddrV6::new(
            l,
            port,
            0,
            if l.is_unicast_link_local() {
                r.scope_id()
            } else {
                0
            },
        )),
        (l, _) => SocketAddr::new(l, port),
    }
}

/// Options every pair socket gets before `bind`: port sharing, UDP GRO (kernels ≥ 5.12 only,
/// peers.md), a 1 MiB send buffer and a receive buffer raised (never lowered) to 4 MiB.
fn prepare(sock: &Socket, offload: bool) -> io::Result<()> {
    reuse_port_control(sock)?;
    let fd = sock.as_fd();
    if offload && sockopt::kernel_at_least(5, 12) {
        let _ = sockopt::set_int(fd, libc::SOL_UDP, UDP_GRO, 1);
    }
    let _ = sock.set_send_buffer_size(PAIR_SEND_BUFFER);
    // The kernel reports twice the size set; compare with that in mind.
    if sock.recv_buffer_size().unwrap_or(0) < 2 * PAIR_RECV_BUFFER {
        let _ = sock.set_recv_buffer_size(PAIR_RECV_BUFFER);
        let _ = sockopt::set_int(
            fd,
            libc::SOL_SOCKET,
            SO_RCVBUFFORCE,
            PAIR_RECV_BUFFER as libc::c_int,
        );
    }
    Ok(())
}

/// Binds a new socket to `(key.local, port)`, sharing the port, with the caller's control
/// applied last. Not yet connected: see [`connect`].
pub(super) fn bind_pair(
    key: &Key,
    port: u16,
    offload: bool,
    control: Option<&Control>,
) -> io::Result<Socket> {
    let s = udp_socket(key.local)?;
    prepare(&s, offload)?;
    if let Some(c) = control {
        c(&s)?;
    }
    s.bind(&bind_addr(key, port).into())?;
    Ok(s)
}

/// Connects a bound pair socket to its remote and reads back the offloads.
pub(super) fn connect(sock: Socket, key: &Key, offload: bool) -> io::Result<Dialled> {
    sock.connect(&key.remote.into())?;
    let fd = sock.as_fd();
    let gso = offload && sockopt::get_int(fd, libc::SOL_UDP, UDP_SEGMENT).is_ok();
    let gro = offload && sockopt::get_int(fd, libc::SOL_UDP, UDP_GRO).is_ok_and(|v| v == 1);
    Ok(Dialled { sock, gso, gro })
}

/// Binds and connects the socket for `key` on the shared `port`.
pub(super) fn dial(
    key: &Key,
    port: u16,
    offload: bool,
    control: Option<&Control>,
) -> io::Result<Dialled> {
    let s = bind_pair(key, port, offload, control)?;
    connect(s, key, offload)
}
