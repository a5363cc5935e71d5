//! The system side of connected sockets that is the same on every platform: dialling a pair,
//! asking the kernel which local address a route picks, and whether an address still exists.
//! Port sharing and per-socket options are per OS (`os::reuse_port_control`, `os::prepare`).

use std::io;
use std::net::{IpAddr, SocketAddr, SocketAddrV6, UdpSocket};

use socket2::{Domain, Protocol, Socket, Type};

use super::{os, Control, Key};
#[cfg(all(test, any(target_os = "linux", target_os = "android")))]
pub(super) use os::PAIR_RECV_BUFFER;

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

/// A dialled pair socket and the offloads the kernel confirmed on it (none on darwin).
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

/// Binds a new socket to `(key.local, port)`, sharing the port, with the caller's control
/// applied last. Not yet connected: see [`connect`].
pub(super) fn bind_pair(
    key: &Key,
    port: u16,
    offload: bool,
    control: Option<&Control>,
) -> io::Result<Socket> {
    let s = udp_socket(key.local)?;
    os::prepare(&s, offload)?;
    if let Some(c) = control {
        c(&s)?;
    }
    s.bind(&bind_addr(key, port).into())?;
    Ok(s)
}

/// Connects a bound pair socket to its remote and reads back the offloads.
pub(super) fn connect(sock: Socket, key: &Key, offload: bool) -> io::Result<Dialled> {
    sock.connect(&key.remote.into())?;
    let (gso, gro) = os::offloads(&sock, offload);
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
