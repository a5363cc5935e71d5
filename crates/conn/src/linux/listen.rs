//! Creating the sockets: one per address family on one port, with the options wireguard-go
//! applies before `bind` (`docs/bind.md`, "Opening the shared sockets").

use std::io;
use std::os::fd::AsFd;

use socket2::{Domain, Protocol, Socket, Type};
use vpn_sys::sockopt::{self, SO_RCVBUFFORCE, SO_SNDBUFFORCE, UDP_GRO, UDP_SEGMENT};

use crate::ports::{wildcard, SOCKET_BUFFER_SIZE};

/// Whether the sockets ask for each datagram's local address and interface (`IP_PKTINFO`,
/// `IPV6_RECVPKTINFO`).
pub(super) const STICKY_SOURCE: bool = !cfg!(target_os = "android");

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
    // Sticky source: the local address and interface of every datagram. Not on Android, where
    // wireguard-go does not ask for it either: the phone moves between networks under the app,
    // and the kernel's routing picks the source for each send. Received datagrams then carry
    // no packet info, so endpoints have no source and sends name none.
    if STICKY_SOURCE && v6 {
        sockopt::set_int(fd, libc::IPPROTO_IPV6, libc::IPV6_RECVPKTINFO, 1)?;
    } else if STICKY_SOURCE {
        sockopt::set_int(fd, libc::IPPROTO_IP, libc::IP_PKTINFO, 1)?;
    }
    // GRO before 5.12 cannot report segment sizes reliably: leave it off there (`docs/bind.md`).
    if offload && sockopt::kernel_at_least(5, 12) {
        let _ = sockopt::set_int(fd, libc::SOL_UDP, UDP_GRO, 1);
    }
    if mark != 0 {
        sock.set_mark(mark)?;
    }
    if share {
        crate::connected::reuse_port_control(&sock)?;
    }
    sock.bind(&wildcard(v6, port).into())?;
    let fd = sock.as_fd();
    let gso = offload && sockopt::get_int(fd, libc::SOL_UDP, UDP_SEGMENT).is_ok();
    let gro = offload && sockopt::get_int(fd, libc::SOL_UDP, UDP_GRO).is_ok_and(|v| v == 1);
    Ok(Listener { sock, gso, gro })
}

/// Opens IPv4 then IPv6 on the same port (see [`crate::ports::listen_pair`]).
pub(super) fn listen_pair(
    port: u16,
    mark: u32,
    offload: bool,
    share: bool,
) -> io::Result<(Option<Listener>, Option<Listener>, u16)> {
    crate::ports::listen_pair(
        port,
        |v6, port| listen(v6, port, mark, offload, share),
        |l| &l.sock,
    )
}
