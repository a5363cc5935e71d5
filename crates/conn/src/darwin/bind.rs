//! `StdNetBind` on darwin: one UDP socket per address family on one port, one datagram per
//! call by default, batched through `recvmsg_x`/`sendmsg_x` with
//! [`with_batched_io`](StdNetBind::with_batched_io) once the unconnected self-test passed,
//! don't-fragment with [`with_dont_fragment`](StdNetBind::with_dont_fragment), and connected
//! sockets (batched through `vpn-darwinbatch` where supported) with
//! [`with_connected_sockets`](StdNetBind::with_connected_sockets). The rules are in
//! [`super::io`]; this is the glue.

use std::io;
use std::os::fd::AsRawFd;
use std::sync::Arc;

use socket2::{Domain, Protocol, Socket, Type};

use super::family::{Family, SendPool};
use super::io::{
    self as dio, port_sharing, set_dont_fragment, share_port, shared_endpoint, socket_is_v6,
    Receiver, Sent, MAX_DATAGRAM,
};
use crate::bind_core::{Core, Shared};
use crate::connected::ConnectedSockets;
use crate::ports::{wildcard, SOCKET_BUFFER_SIZE};
use crate::{Bind, Endpoint, ReceiveFunc, ReceiveFuncStarter, IDEAL_BATCH_SIZE};

/// The darwin UDP bind (`conn.StdNetBind` with Tailscale's darwin options).
///
/// `open` returns the IPv4 receive function first, then the IPv6 one (either may be missing
/// when the system lacks that family). darwin reports no local address with a datagram, so
/// endpoints carry no sticky source (as in wireguard-go on darwin).
pub struct StdNetBind {
    pub(super) core: Core<Family>,
    offload: bool,
    batched_io: bool,
    dont_fragment: bool,
    send_pool: SendPool,
}

impl Default for StdNetBind {
    fn default() -> Self {
        Self::new()
    }
}

impl StdNetBind {
    /// A closed bind: one datagram per call on the shared sockets, no don't-fragment,
    /// connected sockets off; pair sockets (once on) batch where the self-test passed.
    pub fn new() -> Self {
        Self::with_offload(true)
    }

    /// A closed bind; `offload` false keeps connected pair sockets at one datagram per call
    /// (the darwin counterpart of Linux's UDP GSO/GRO switch).
    pub fn with_offload(offload: bool) -> Self {
        StdNetBind {
            core: Core::new(),
            offload,
            batched_io: false,
            dont_fragment: false,
            send_pool: SendPool::default(),
        }
    }

    /// Batches the shared sockets' I/O (default off) for later `open`s: `recvmsg_x` with
    /// source names and `sendmsg_x` with a destination per datagram. Falls back to one datagram
    /// per call, with the reason logged, when the unconnected self-test fails.
    pub fn with_batched_io(mut self, on: bool) -> Self {
        self.batched_io = on;
        self
    }

    /// Sets `IP_DONTFRAG`/`IPV6_DONTFRAG` (default off) on the shared sockets and on every
    /// connected socket of later `open`s: datagrams above the path MTU are dropped instead of
    /// fragmented, and IPv4 datagrams leave without darwin's random IP ID.
    pub fn with_dont_fragment(mut self, on: bool) -> Self {
        self.dont_fragment = on;
        self
    }

    crate::bind_core::common_methods!();

    /// UDP GSO and GRO per family, as on Linux: darwin has neither, so `(false, false)` for
    /// an open family and `None` for one that is not open.
    pub fn offloads(&self) -> [Option<(bool, bool)>; 2] {
        self.core.state.read().per_family(|_| (false, false))
    }

    /// Whether the shared sockets of the current open batch their I/O, as `[v4, v6]`.
    pub fn batched(&self) -> [Option<bool>; 2] {
        self.core.state.read().per_family(|f| f.batched)
    }

    /// The set for a fresh open on `port`, when connected sockets are on and a starter is
    /// installed. Don't-fragment, when on, is applied to every pair socket by its control.
    fn new_connected(&self, port: u16) -> Option<Arc<ConnectedSockets>> {
        let df = self.dont_fragment;
        let control = Arc::new(move |s: &Socket| {
            if df {
                set_dont_fragment(super::kernel(), s.as_raw_fd(), socket_is_v6(s))
            } else {
                Ok(())
            }
        });
        self.core.new_connected(port, control, self.offload)
    }

    /// The receive function of one shared socket.
    fn receive_func(
        &self,
        fam: Arc<Family>,
        connected: Option<Arc<ConnectedSockets>>,
    ) -> ReceiveFunc {
        let stats = self.core.stats.clone();
        let mut rx = Receiver::new(fam.batched);
        Box::new(move |bufs, sizes, eps| {
            if bufs.is_empty() {
                // A wait for data (see `ReceiveFunc`): the device takes a slab only after it.
                return fam.wait_readable().map(|()| 0);
            }
            let n = fam.read_loop(
                |_| false,
                |fd| {
                    let r = rx.recv(fd, bufs, sizes, eps, MAX_DATAGRAM, shared_endpoint);
                    if let Ok(read) = &r {
                        stats.recv(read.datagrams, 0, read.oversize);
                    }
                    r
                },
            )?;
            if let Some(c) = &connected {
                c.count_received(bufs, sizes, eps, n, true);
            }
            Ok(n)
        })
    }
}

/// Opens one family's socket on `port`: 7 MiB buffers (best effort), v6-only for IPv6, the
/// port shared with connected sockets (`SO_REUSEADDR` alone) when `share`, don't-fragment
/// when `dont_fragment`.
fn listen(v6: bool, port: u16, share: bool, dont_fragment: bool) -> io::Result<Socket> {
    let domain = if v6 { Domain::IPV6 } else { Domain::IPV4 };
    let sock = Socket::new(domain, Type::DGRAM, Some(Protocol::UDP))?;
    if v6 {
        sock.set_only_v6(true)?;
    }
    // Capped by kern.ipc.maxsockbuf; a smaller buffer is no reason not to run.
    let _ = sock.set_recv_buffer_size(SOCKET_BUFFER_SIZE);
    let _ = sock.set_send_buffer_size(SOCKET_BUFFER_SIZE);
    if share {
        share_port(&sock, port_sharing(false))?;
    }
    if dont_fragment {
        set_dont_fragment(super::kernel(), sock.as_raw_fd(), v6)?;
    }
    sock.bind(&wildcard(v6, port).into())?;
    Ok(sock)
}

impl Shared for Family {
    fn close(&self) {
        Family::close(self)
    }
}

impl Bind for StdNetBind {
    fn open(&self, port: u16) -> io::Result<(Vec<ReceiveFunc>, u16)> {
        let mut st = self.core.state.write();
        Core::check_closed(&st)?;
        let share = self.core.connected_opts.enabled;
        let df = self.dont_fragment;
        let (v4, v6, port) =
            crate::ports::listen_pair(port, |v6, port| listen(v6, port, share, df), |s| s)?;
        let batched = dio::shared_batching(self.batched_io, vpn_darwinbatch::unconnected_supported);
        let family = |s: Socket| Family::shared(s, batched).map(Arc::new);
        // Both or neither: a failure here leaves nothing bound.
        let (v4, v6) = (v4.map(family).transpose()?, v6.map(family).transpose()?);
        (st.v4, st.v6, st.open) = (v4, v6, true);
        st.connected = self.new_connected(port);
        let fns = st
            .families()
            .map(|fam| self.receive_func(fam.clone(), st.connected.clone()))
            .collect();
        Ok((fns, port))
    }

    fn close(&self) -> io::Result<()> {
        self.core.close();
        Ok(())
    }

    /// darwin has no fwmark: accepted and ignored, as wireguard-go does off Linux and the BSDs.
    fn set_mark(&self, _mark: u32) -> io::Result<()> {
        Ok(())
    }

    fn send(&self, bufs: &[&[u8]], ep: &Endpoint) -> io::Result<()> {
        if bufs.is_empty() {
            return Ok(());
        }
        let route = self.core.route(ep)?;
        if let Some(r) = route.send_connected(bufs, ep.src.map(|s| s.ip)) {
            return r;
        }
        let mut sent = Sent::default();
        let result = route
            .fam
            .send(&self.send_pool, bufs, Some(route.dst), &mut sent);
        self.core.stats.send(sent.datagrams, 0);
        self.core.stats.send_dropped(sent.dropped);
        result
    }

    /// 128 when the shared sockets may batch or connected sockets are on, else 1: a
    /// one-datagram-per-call bind gains nothing from larger batches.
    fn batch_size(&self) -> usize {
        if self.batched_io || self.core.connected_opts.enabled {
            IDEAL_BATCH_SIZE
        } else {
            1
        }
    }

    fn set_receive_func_starter(&self, starter: Arc<dyn ReceiveFuncStarter>) {
        self.core.set_starter(starter);
    }
}
