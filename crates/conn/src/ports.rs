//! Opening a bind's pair of sockets, IPv4 and IPv6, on one port (the same on every platform;
//! the per-OS `listen` makes each socket).

use std::io;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};

use socket2::Socket;

/// Send and receive buffer size of the shared sockets: 7 MiB (wireguard-go's `socketBufferSize`).
pub(crate) const SOCKET_BUFFER_SIZE: usize = 7 << 20;
/// How often a port-0 open retries when the v6 half finds the v4 half's port taken.
const PORT_RETRIES: usize = 100;

/// The wildcard address of the family, on `port`.
pub(crate) fn wildcard(v6: bool, port: u16) -> SocketAddr {
    if v6 {
        SocketAddr::from((Ipv6Addr::UNSPECIFIED, port))
    } else {
        SocketAddr::from((Ipv4Addr::UNSPECIFIED, port))
    }
}

/// The port a socket is bound to.
fn local_port(sock: &Socket) -> io::Result<u16> {
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
pub(crate) fn listen_pair<L>(
    port: u16,
    mut listen: impl FnMut(bool, u16) -> io::Result<L>,
    sock: impl Fn(&L) -> &Socket,
) -> io::Result<(Option<L>, Option<L>, u16)> {
    for _ in 0..PORT_RETRIES {
        let v4 = match listen(false, port) {
            Ok(l) => Some(l),
            Err(e) if is_errno(&e, libc::EAFNOSUPPORT) => None,
            Err(e) => return Err(e),
        };
        let actual = match &v4 {
            Some(l) => local_port(sock(l))?,
            None => port,
        };
        let v6 = match listen(true, actual) {
            Ok(l) => Some(l),
            Err(e) if is_errno(&e, libc::EAFNOSUPPORT) => None,
            Err(e) if is_errno(&e, libc::EADDRINUSE) && port == 0 && v4.is_some() => continue,
            Err(e) => return Err(e),
        };
        let actual = match (&v4, &v6) {
            (None, None) => return Err(io::Error::from_raw_os_error(libc::EAFNOSUPPORT)),
            (None, Some(l)) => local_port(sock(l))?,
            (Some(_), _) => actual,
        };
        return Ok((v4, v6, actual));
    }
    Err(io::Error::from_raw_os_error(libc::EADDRINUSE))
}
