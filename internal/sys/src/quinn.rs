//! `recvmmsg` through `quinn-udp` instead of [`crate::mmsg`]'s own code: the other arm of a
//! same-run A/B of the Linux bind's receive path (`VPN_UDP_RECV=quinn` in the environment).
//!
//! quinn-udp wants a non-blocking socket (it passes no `MSG_WAITFORONE`: a blocking socket
//! would wait for a full batch), so a read that finds nothing waits in
//! [`crate::poll::poll_ready`] (a `shutdown` on close ends that wait) and tries again.
//! `UdpSocketState::new` also turns on socket options WireGuard does not want (no
//! fragmentation, receive timestamps, TOS/traffic class); they are turned back off so that
//! both arms do the same work.

use std::io::{self, IoSliceMut};
use std::os::fd::{AsRawFd, BorrowedFd};

use quinn_udp::{UdpSockRef, UdpSocketState};

use crate::cmsg::PktInfo;
use crate::mmsg::RecvMeta;
use crate::sockopt;

/// Messages per `recvmmsg` quinn-udp reads at most on Linux (its `BATCH_SIZE`).
pub const QUINN_BATCH: usize = 32;

/// Whether the environment asks for the quinn-udp receive path (read once).
pub fn enabled() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var("VPN_UDP_RECV").is_ok_and(|v| v == "quinn"))
}

/// quinn-udp's receive state for one socket.
pub struct QuinnRecv {
    state: UdpSocketState,
}

impl std::fmt::Debug for QuinnRecv {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("QuinnRecv")
    }
}

impl QuinnRecv {
    /// Sets `fd` up the way quinn-udp needs (non-blocking, packet info, GRO), then turns the
    /// options back off that the bind does not set itself.
    pub fn new(fd: BorrowedFd<'_>, v6: bool) -> io::Result<Self> {
        let (ip, ip6) = (libc::IPPROTO_IP, libc::IPPROTO_IPV6);
        let pmtu = sockopt::get_int(fd, ip, libc::IP_MTU_DISCOVER)?;
        let pmtu6 = v6
            .then(|| sockopt::get_int(fd, ip6, libc::IPV6_MTU_DISCOVER))
            .transpose()?;
        let state = UdpSocketState::new(UdpSockRef::from(&fd))?;
        let _ = sockopt::set_int(fd, ip, libc::IP_MTU_DISCOVER, pmtu);
        let _ = sockopt::set_int(fd, libc::SOL_SOCKET, libc::SO_TIMESTAMPNS, 0);
        let _ = sockopt::set_int(fd, ip, libc::IP_RECVTOS, 0);
        if let Some(p) = pmtu6 {
            let _ = sockopt::set_int(fd, ip6, libc::IPV6_MTU_DISCOVER, p);
            let _ = sockopt::set_int(fd, ip6, libc::IPV6_DONTFRAG, 0);
            let _ = sockopt::set_int(fd, ip6, libc::IPV6_RECVTCLASS, 0);
        }
        Ok(Self { state })
    }

    /// [`RecvBatch::recv_strided`](crate::mmsg::RecvBatch::recv_strided) on quinn-udp: waits
    /// for at least one datagram, then reads what is queued, datagram `i` into
    /// `bufs[i * stride]` (at most `max_len` bytes), up to [`QUINN_BATCH`] datagrams.
    /// quinn-udp does not report truncation: `truncated` is always false.
    pub fn recv_strided(
        &self,
        fd: BorrowedFd<'_>,
        bufs: &mut [&mut [u8]],
        stride: usize,
        max_len: usize,
        meta: &mut [RecvMeta],
    ) -> io::Result<usize> {
        let mut qmeta = [quinn_udp::RecvMeta::default(); QUINN_BATCH];
        let got = {
            let mut iovs: [IoSliceMut<'_>; QUINN_BATCH] =
                std::array::from_fn(|_| IoSliceMut::new(&mut []));
            let mut n = 0;
            for (iov, b) in iovs
                .iter_mut()
                .zip(bufs.iter_mut().step_by(stride.max(1)))
                .take(meta.len())
            {
                let len = b.len().min(max_len);
                *iov = IoSliceMut::new(&mut b[..len]);
                n += 1;
            }
            if n == 0 {
                return Ok(0);
            }
            loop {
                match self
                    .state
                    .recv(UdpSockRef::from(&fd), &mut iovs[..n], &mut qmeta[..n])
                {
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                        crate::poll::poll_ready(fd.as_raw_fd(), libc::POLLIN)?
                    }
                    r => break r?,
                }
            }
        };
        for (m, q) in meta.iter_mut().zip(&qmeta[..got]) {
            *m = RecvMeta {
                len: q.len,
                truncated: false,
                addr: Some(q.addr),
                pktinfo: q.dst_ip.map(|addr| PktInfo {
                    addr,
                    ifindex: q.interface_index.unwrap_or(0),
                }),
                gro_size: u16::try_from(q.stride).unwrap_or(0),
            };
        }
        Ok(got)
    }
}
