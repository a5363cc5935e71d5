//! The Linux side of connected sockets: port sharing with `SO_REUSEPORT`, UDP GRO and forced
//! buffer sizes on pair sockets, and pair I/O through the bind's own [`Family`] (`sendmmsg`
//! with UDP GSO, `recvmmsg` with GRO; the reader is in `reader.rs`).

use std::io;
use std::os::fd::AsFd;

use parking_lot::{Mutex, RwLock};
use socket2::Socket;
use std::sync::atomic::AtomicBool;
use vpn_sys::sockopt::{self, SO_RCVBUFFORCE, UDP_GRO, UDP_SEGMENT};

pub(super) use super::reader::receive_func;
use super::sock::Dialled;
use crate::linux::send::Sent;
pub(crate) use crate::linux::Family;
use crate::linux::SendScratch;

/// `SO_SNDBUF` of each pair socket (`connectedBufSize`).
pub(super) const PAIR_SEND_BUFFER: usize = 1 << 20;
/// `SO_RCVBUF` a pair socket is raised to (`connectedRecvBufSize` on Linux); never lowered.
pub(super) const PAIR_RECV_BUFFER: usize = 4 << 20;

/// Scratch arrays of concurrent pair senders.
pub(super) type SendPool = Mutex<Vec<SendScratch>>;

/// Makes `sock` share its port with the bind's other sockets: `SO_REUSEPORT` alone.
///
/// Linux only lets sockets of the same effective UID join a reuse-port group, so another user
/// cannot bind the port and steal traffic. `SO_REUSEADDR` is deliberately not set: UDP sockets
/// that all set it share a port without that user check.
pub fn reuse_port_control(sock: &Socket) -> io::Result<()> {
    sock.set_reuse_port(true)
}

/// Options every pair socket gets before `bind`: port sharing, UDP GRO (kernels ≥ 5.12 only:
/// older ones cannot report the segment size reliably), a 1 MiB send buffer and a receive
/// buffer raised (never lowered) to 4 MiB (`docs/bind.md`).
pub(super) fn prepare(sock: &Socket, offload: bool) -> io::Result<()> {
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

/// The offloads the kernel confirmed on a connected pair socket: `(gso, gro)`.
pub(super) fn offloads(sock: &Socket, offload: bool) -> (bool, bool) {
    let fd = sock.as_fd();
    let gso = offload && sockopt::get_int(fd, libc::SOL_UDP, UDP_SEGMENT).is_ok();
    let gro = offload && sockopt::get_int(fd, libc::SOL_UDP, UDP_GRO).is_ok_and(|v| v == 1);
    (gso, gro)
}

/// The pair socket's I/O state (the offloads were read back at connect).
pub(super) fn family(d: Dialled, v6: bool, _offload: bool) -> Family {
    Family {
        sock: RwLock::new(Some(d.sock)),
        closed: AtomicBool::new(false),
        v6,
        gso: AtomicBool::new(d.gso),
        gro: d.gro,
    }
}

/// Sends `bufs` on the pair socket with `sendmmsg` and UDP GSO; the result, how many datagrams
/// the kernel accepted, and how many were dropped (none: a zero accept is an error here).
pub(super) fn send(
    fam: &Family,
    pool: &SendPool,
    bufs: &[&[u8]],
) -> (io::Result<()>, usize, usize) {
    let mut sent = Sent::default();
    let result = fam.send_batch(pool, bufs, None, &mut sent, |batch, sock, _, b, p| {
        batch.send_connected(sock.as_fd(), b, p)
    });
    (result, sent.datagrams, 0)
}
