//! `StdNetBind` for Linux: one UDP socket per address family on one port, batched with
//! `recvmmsg`/`sendmmsg`, UDP GSO on send and GRO on receive when the kernel offers them,
//! and sticky source addresses through packet-info control messages (`docs/bind.md`). The raw
//! system calls live in `vpn-sys`; this module holds the policy.
//!
//! Closing wakes blocked readers with `shutdown(2)` (see `docs/design-notes.md`, "Waking
//! blocked socket readers"): a reader holds a read lock on its socket while in `recvmmsg`,
//! `close` marks the family closed, shuts the socket down (which ends a blocked or later
//! `recvmmsg` at once) and then takes the write lock to drop the socket, so the descriptor is
//! closed, and the port free, when `close` returns, and no reader can ever use a reused
//! descriptor number.
//!
//! With connected sockets on ([`StdNetBind::with_connected_sockets`]) the shared sockets are
//! created port-shareable, and a [`ConnectedSockets`] set created at `open` carries busy pairs
//! (see [`connected`]); its readers are handed to the device through the
//! [`ReceiveFuncStarter`](crate::ReceiveFuncStarter) installed before `open`.

mod listen;
mod recv;
pub(crate) mod segments;
pub(crate) mod send;
mod sources;
#[cfg(test)]
mod tests;

use std::io;
use std::net::{Shutdown, SocketAddr};
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;

use parking_lot::{Mutex, RwLock};
use socket2::Socket;
use vpn_sys::cmsg::PktInfo;
use vpn_sys::mmsg::{self, MsgPlan, SendBatch};

use crate::bind_core::{Core, Shared};
use crate::connected::ConnectedSockets;
use crate::{
    err_closed, is_err_closed, Bind, Endpoint, ErrUdpGsoDisabled, ReceiveFunc, ReceiveFuncStarter,
    IDEAL_BATCH_SIZE,
};
use recv::Reader;
use send::{send_all, Sent, MAX_V4_PAYLOAD, MAX_V6_PAYLOAD};
use sources::SourceCheck;

/// One address family's socket, shared by the bind and that family's reader (and the socket
/// of a connected pair).
pub(crate) struct Family {
    /// `None` once closed. Readers and senders hold the read lock during their syscall.
    pub(crate) sock: RwLock<Option<Socket>>,
    pub(crate) closed: AtomicBool,
    pub(crate) v6: bool,
    /// UDP GSO usable; cleared for good on EIO.
    pub(crate) gso: AtomicBool,
    /// UDP GRO confirmed on the socket.
    pub(crate) gro: bool,
}

impl Family {
    pub(crate) fn is_closed(&self) -> bool {
        self.closed.load(Ordering::SeqCst)
    }

    /// `f` on the socket, under its read lock (a close waits for it); [`err_closed`] once the
    /// socket is gone.
    pub(crate) fn with_sock<R>(&self, f: impl FnOnce(&Socket) -> io::Result<R>) -> io::Result<R> {
        let guard = self.sock.read();
        f(guard.as_ref().ok_or_else(err_closed)?)
    }

    /// One datagram (a lone packet: no batch scratch, see `mmsg::send_one`). A sticky source
    /// the kernel refuses is dropped for a retry, as `send::send_all` does for batches.
    fn send_one(&self, buf: &[u8], dst: &SocketAddr, src: Option<PktInfo>) -> io::Result<()> {
        self.with_sock(
            |sock| match mmsg::send_one(sock.as_fd(), dst, src.as_ref(), buf) {
                Err(e) if src.is_some() && send::is_bad_source(&e) => {
                    mmsg::send_one(sock.as_fd(), dst, None, buf).map(drop)
                }
                r => r.map(drop),
            },
        )
    }

    /// Sends `bufs` on this family's socket in chunks of at most a batch, through
    /// [`send_all`] (GSO plans, EIO fallback) with pooled scratch arrays; `sys` is the actual
    /// `sendmmsg` (to an address, or on a connected socket). A GSO fallback whose resend
    /// worked is reported after the remaining chunks went out; any other error stops. Closing
    /// the socket meanwhile turns the error into [`err_closed`].
    pub(crate) fn send_batch<F>(
        &self,
        pool: &Mutex<Vec<SendScratch>>,
        bufs: &[&[u8]],
        src: Option<PktInfo>,
        sent: &mut Sent,
        mut sys: F,
    ) -> io::Result<()>
    where
        F: FnMut(
            &mut SendBatch,
            &Socket,
            Option<&PktInfo>,
            &[&[u8]],
            &[MsgPlan],
        ) -> io::Result<usize>,
    {
        let max_total = if self.v6 {
            MAX_V6_PAYLOAD
        } else {
            MAX_V4_PAYLOAD
        };
        let mut scratch = pool.lock().pop().unwrap_or_else(SendScratch::new);
        let result = match self.sock.read().as_ref() {
            None => Err(err_closed()),
            Some(sock) => {
                let SendScratch { batch, plans } = &mut scratch;
                let mut result = Ok(());
                for chunk in bufs.chunks(IDEAL_BATCH_SIZE) {
                    let r = send_all(chunk, src, max_total, &self.gso, plans, sent, |s, b, p| {
                        sys(batch, sock, s, b, p)
                    });
                    match r {
                        Ok(()) => {}
                        // GSO went away but the resend worked: report it after the rest.
                        Err(e) if matches!(ErrUdpGsoDisabled::retry_outcome(&e), Some(None)) => {
                            result = Err(e)
                        }
                        Err(e) => {
                            result = Err(e);
                            break;
                        }
                    }
                }
                result
            }
        };
        pool.lock().push(scratch);
        if self.is_closed() && result.is_err() {
            return Err(err_closed());
        }
        result
    }

    /// Blocks until a datagram is ready to read, without reading it (`MSG_PEEK` of one byte),
    /// for a receive function called with no buffers (see [`ReceiveFunc`]). Closing wakes it as
    /// it wakes a read (`shutdown`). Errors the socket reports are left for the read that
    /// follows: only a closed socket is an error here.
    pub(crate) fn wait_readable(&self) -> io::Result<()> {
        loop {
            if self.is_closed() {
                return Err(err_closed());
            }
            let res = self.with_sock(|sock| sock.peek(&mut [std::mem::MaybeUninit::uninit(); 1]));
            match res {
                _ if self.is_closed() => return Err(err_closed()),
                Err(e) if is_err_closed(&e) => return Err(e),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                _ => return Ok(()),
            }
        }
    }

    /// Wakes and stops the reader, then closes the descriptor.
    pub(crate) fn close(&self) {
        self.closed.store(true, Ordering::SeqCst);
        if let Some(s) = self.sock.read().as_ref() {
            // ENOTCONN on an unconnected UDP socket is expected: the kernel still marks it
            // shut down and wakes every waiter.
            let _ = s.shutdown(Shutdown::Both);
        }
        drop(self.sock.write().take());
    }
}

/// Per-send arrays, pooled so concurrent senders neither allocate nor serialise.
pub(crate) struct SendScratch {
    batch: SendBatch,
    plans: Vec<MsgPlan>,
}

impl SendScratch {
    pub(crate) fn new() -> Self {
        SendScratch {
            batch: SendBatch::new(IDEAL_BATCH_SIZE),
            plans: Vec::with_capacity(IDEAL_BATCH_SIZE),
        }
    }
}

/// The Linux batched UDP bind (`conn.StdNetBind`).
///
/// `open` returns the IPv4 receive function first, then the IPv6 one (either may be missing
/// when the system lacks that family). Receive functions accept buffers of any size: with UDP
/// GRO they copy segments out of a private 128 KiB scratch area per reader.
pub struct StdNetBind {
    core: Core<Family>,
    /// Shared with the connected sockets' control, which applies it to every dial.
    mark: Arc<AtomicU32>,
    offload: bool,
    send_pool: Mutex<Vec<SendScratch>>,
    /// Sticky sources re-checked after route and address changes; its listener starts at
    /// the first open (in the namespace the sockets live in).
    sources: std::sync::OnceLock<Arc<SourceCheck>>,
}

impl Default for StdNetBind {
    fn default() -> Self {
        Self::new()
    }
}

impl Shared for Family {
    fn close(&self) {
        Family::close(self)
    }
}

impl StdNetBind {
    /// A closed bind that uses UDP GSO/GRO where the kernel supports them.
    pub fn new() -> Self {
        Self::with_offload(true)
    }

    /// A closed bind; `offload` false keeps UDP GSO and GRO off (for comparison and for
    /// paths known to mishandle them).
    pub fn with_offload(offload: bool) -> Self {
        StdNetBind {
            core: Core::new(),
            mark: Arc::new(AtomicU32::new(0)),
            offload,
            send_pool: Mutex::new(Vec::new()),
            sources: std::sync::OnceLock::new(),
        }
    }

    crate::bind_core::common_methods!();

    /// The set for a fresh open on `port`, when connected sockets are on and a starter is
    /// installed; every pair socket gets the bind's fwmark.
    fn new_connected(&self, port: u16) -> Option<Arc<ConnectedSockets>> {
        let mark = self.mark.clone();
        let control = Arc::new(move |s: &Socket| match mark.load(Ordering::Relaxed) {
            0 => Ok(()),
            m => s.set_mark(m),
        });
        self.core.new_connected(port, control, self.offload)
    }

    /// Whether UDP GSO (send) and GRO (receive) are in use on the IPv4 and IPv6 sockets, as
    /// `[(gso, gro) for v4, for v6]`; `None` for a family that is not open.
    pub fn offloads(&self) -> [Option<(bool, bool)>; 2] {
        self.core
            .state
            .read()
            .per_family(|f| (f.gso.load(Ordering::Relaxed), f.gro))
    }

    /// The raw fds of the IPv4 and IPv6 listening sockets while open (`None` for a family that
    /// is not), as libwg-go's `PeekLookAtSocketFd`: an Android host passes them to
    /// `VpnService.protect` so the tunnel's own datagrams bypass the tunnel. The bind keeps
    /// ownership; an fd is valid until the next close or rebind.
    pub fn socket_fds(&self) -> [Option<std::os::fd::RawFd>; 2] {
        use std::os::fd::AsRawFd;
        let [v4, v6] = self
            .core
            .state
            .read()
            .per_family(|f| f.sock.read().as_ref().map(AsRawFd::as_raw_fd));
        [v4.flatten(), v6.flatten()]
    }

    /// Is `ep`'s sticky source still the one to send from? Only asks the kernel after route
    /// or address changes (see [`sources`]).
    fn source_still_right(&self, ep: &Endpoint, src: &crate::StickySource) -> bool {
        match self.sources.get() {
            Some(check) => check.keep(ep.dst.ip(), src, self.mark.load(Ordering::Relaxed)),
            None => true,
        }
    }

    #[cfg(test)]
    fn with_socket<R>(&self, v6: bool, f: impl FnOnce(&Socket) -> R) -> Option<R> {
        let st = self.core.state.read();
        let fam = if v6 { st.v6.as_ref() } else { st.v4.as_ref() }?;
        let guard = fam.sock.read();
        guard.as_ref().map(f)
    }
}

impl Bind for StdNetBind {
    fn open(&self, port: u16) -> io::Result<(Vec<ReceiveFunc>, u16)> {
        let mut st = self.core.state.write();
        Core::check_closed(&st)?;
        let (v4, v6, port) = listen::listen_pair(
            port,
            self.mark.load(Ordering::Relaxed),
            self.offload,
            self.core.connected_opts.enabled,
        )?;
        let family = |l: listen::Listener, v6: bool| {
            Arc::new(Family {
                sock: RwLock::new(Some(l.sock)),
                closed: AtomicBool::new(false),
                v6,
                gso: AtomicBool::new(l.gso),
                gro: l.gro,
            })
        };
        st.v4 = v4.map(|l| family(l, false));
        st.v6 = v6.map(|l| family(l, true));
        st.open = true;
        st.connected = self.new_connected(port);
        // Without sticky sources (Android) there is nothing to re-check, and no rtnetlink
        // subscription to open.
        if listen::STICKY_SOURCE {
            self.sources.get_or_init(SourceCheck::start);
        }
        let mut fns: Vec<ReceiveFunc> = Vec::with_capacity(2);
        for fam in st.families() {
            let mut reader =
                Reader::new(fam.clone(), self.core.stats.clone(), st.connected.clone());
            fns.push(Box::new(move |bufs, sizes, eps| {
                reader.read(bufs, sizes, eps)
            }));
        }
        Ok((fns, port))
    }

    fn close(&self) -> io::Result<()> {
        self.core.close();
        Ok(())
    }

    fn set_mark(&self, mark: u32) -> io::Result<()> {
        let st = self.core.state.read();
        for fam in st.families() {
            if let Some(s) = fam.sock.read().as_ref() {
                s.set_mark(mark)?;
            }
        }
        self.mark.store(mark, Ordering::Relaxed);
        // Existing pair sockets carry the old mark (their packets could loop into the
        // tunnel): close them so they redial with the new one.
        if let Some(c) = &st.connected {
            c.reset();
        }
        Ok(())
    }

    fn send(&self, bufs: &[&[u8]], ep: &Endpoint) -> io::Result<()> {
        if bufs.is_empty() {
            return Ok(());
        }
        let route = self.core.route(ep)?;
        let sticky = ep.src.filter(|s| self.source_still_right(ep, s));
        if let Some(r) = route.send_connected(bufs, sticky.map(|s| s.ip)) {
            return r;
        }
        let (fam, dst) = (&route.fam, route.dst);
        let src = sticky
            .filter(|s| s.ip.is_ipv6() == dst.is_ipv6())
            .map(|s| PktInfo {
                addr: s.ip,
                ifindex: s.ifindex,
            });
        if let [one] = bufs {
            let result = fam.send_one(one, &dst, src);
            if result.is_ok() {
                self.core.stats.send(1, 0);
            }
            return result;
        }
        let mut sent = Sent::default();
        let result = fam.send_batch(
            &self.send_pool,
            bufs,
            src,
            &mut sent,
            |batch, sock, s, b, p| batch.send(sock.as_fd(), &dst, s, b, p),
        );
        self.core.stats.send(sent.datagrams, sent.gso_messages);
        result
    }

    fn batch_size(&self) -> usize {
        IDEAL_BATCH_SIZE
    }

    fn set_receive_func_starter(&self, starter: Arc<dyn ReceiveFuncStarter>) {
        self.core.set_starter(starter);
    }
}
