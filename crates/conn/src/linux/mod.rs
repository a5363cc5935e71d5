//! `StdNetBind` for Linux: one UDP socket per address family on one port, batched with
//! `recvmmsg`/`sendmmsg`, UDP GSO on send and GRO on receive when the kernel offers them,
//! and sticky source addresses through packet-info control messages (reference-behaviour
//! §3.2). The raw system calls live in `vpn-sys`; this module holds the policy.
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

pub mod connected;
mod listen;
mod recv;
mod segments;
mod send;
mod stats;
#[cfg(test)]
mod tests;

pub use connected::{ConnectedConfig, ConnectedSockets, ConnectedStats};
pub use stats::BindStats;

use std::io;
use std::net::{Shutdown, SocketAddr};
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::{Mutex, RwLock};
use socket2::Socket;
use vpn_sys::cmsg::PktInfo;
use vpn_sys::mmsg::{self, MsgPlan, SendBatch};

use crate::{
    err_closed, Bind, Endpoint, ErrUdpGsoDisabled, ReceiveFunc, ReceiveFuncStarter,
    IDEAL_BATCH_SIZE,
};
use recv::Reader;
use send::{send_all, Sent, MAX_V4_PAYLOAD, MAX_V6_PAYLOAD};
use stats::Stats;

/// One address family's socket, shared by the bind and that family's reader.
struct Family {
    /// `None` once closed. Readers and senders hold the read lock during their syscall.
    sock: RwLock<Option<Socket>>,
    closed: AtomicBool,
    v6: bool,
    /// UDP GSO usable; cleared for good on EIO.
    gso: AtomicBool,
    /// UDP GRO confirmed on the socket.
    gro: bool,
}

impl Family {
    fn is_closed(&self) -> bool {
        self.closed.load(Ordering::SeqCst)
    }

    /// Sends `bufs` on this family's socket in chunks of at most a batch, through
    /// [`send_all`] (GSO plans, EIO fallback) with pooled scratch arrays; `sys` is the actual
    /// `sendmmsg` (to an address, or on a connected socket). A GSO fallback whose resend
    /// worked is reported after the remaining chunks went out; any other error stops. Closing
    /// the socket meanwhile turns the error into [`err_closed`].
    /// One datagram (a lone packet: no batch scratch, see `mmsg::send_one`). A sticky source
    /// the kernel refuses is dropped for a retry, as `send::send_all` does for batches.
    fn send_one(&self, buf: &[u8], dst: &SocketAddr, src: Option<PktInfo>) -> io::Result<()> {
        let sock = self.sock.read();
        let sock = sock.as_ref().ok_or_else(err_closed)?;
        match mmsg::send_one(sock.as_fd(), dst, src.as_ref(), buf) {
            Err(e) if src.is_some() && send::is_bad_source(&e) => {
                mmsg::send_one(sock.as_fd(), dst, None, buf).map(drop)
            }
            r => r.map(drop),
        }
    }

    fn send_batch<F>(
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
    fn wait_readable(&self) -> io::Result<()> {
        loop {
            if self.is_closed() {
                return Err(err_closed());
            }
            let res = {
                let guard = self.sock.read();
                let Some(sock) = guard.as_ref() else {
                    return Err(err_closed());
                };
                sock.peek(&mut [std::mem::MaybeUninit::uninit(); 1])
            };
            match res {
                _ if self.is_closed() => return Err(err_closed()),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                _ => return Ok(()),
            }
        }
    }

    /// Wakes and stops the reader, then closes the descriptor.
    fn close(&self) {
        self.closed.store(true, Ordering::SeqCst);
        if let Some(s) = self.sock.read().as_ref() {
            // ENOTCONN on an unconnected UDP socket is expected: the kernel still marks it
            // shut down and wakes every waiter.
            let _ = s.shutdown(Shutdown::Both);
        }
        drop(self.sock.write().take());
    }
}

#[derive(Default)]
struct State {
    open: bool,
    v4: Option<Arc<Family>>,
    v6: Option<Arc<Family>>,
    /// The connected sockets of this open (with connected sockets on and a starter installed).
    connected: Option<Arc<ConnectedSockets>>,
}

/// Per-send arrays, pooled so concurrent senders neither allocate nor serialise.
struct SendScratch {
    batch: SendBatch,
    plans: Vec<MsgPlan>,
}

impl SendScratch {
    fn new() -> Self {
        SendScratch {
            batch: SendBatch::new(IDEAL_BATCH_SIZE),
            plans: Vec::with_capacity(IDEAL_BATCH_SIZE),
        }
    }
}

/// Whether and how a [`StdNetBind`] uses connected sockets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConnectedOptions {
    /// Connected sockets on.
    pub enabled: bool,
    /// Bytes (sent + received within one idle interval) before a pair gets a socket.
    pub open_after: u64,
    /// Most pair sockets at once.
    pub max_sockets: usize,
    /// Largest datagram expected (sizes the first receive slots; 0: smallest).
    pub max_datagram: usize,
    /// Idle-check period.
    pub idle_interval: Duration,
}

impl Default for ConnectedOptions {
    fn default() -> Self {
        ConnectedOptions {
            enabled: false,
            open_after: connected::DEFAULT_OPEN_AFTER,
            max_sockets: connected::DEFAULT_MAX_SOCKETS,
            max_datagram: 0,
            idle_interval: connected::DEFAULT_IDLE_INTERVAL,
        }
    }
}

impl ConnectedOptions {
    /// From the environment, for daemons: `VPN_CONNECTED_SOCKETS=1` turns them on;
    /// `VPN_CONNECTED_OPEN_AFTER` (bytes), `VPN_CONNECTED_MAX_SOCKETS` and
    /// `VPN_CONNECTED_IDLE_MS` override the defaults (tests use a short idle interval).
    pub fn from_env() -> Self {
        Self::from_vars(|k| std::env::var(k).ok())
    }

    fn from_vars(get: impl Fn(&str) -> Option<String>) -> Self {
        let num = |k: &str| get(k).and_then(|v| v.trim().parse::<u64>().ok());
        let d = Self::default();
        ConnectedOptions {
            enabled: get("VPN_CONNECTED_SOCKETS").is_some_and(|v| v.trim() == "1"),
            open_after: num("VPN_CONNECTED_OPEN_AFTER").unwrap_or(d.open_after),
            max_sockets: num("VPN_CONNECTED_MAX_SOCKETS")
                .and_then(|v| usize::try_from(v).ok())
                .unwrap_or(d.max_sockets),
            max_datagram: d.max_datagram,
            idle_interval: num("VPN_CONNECTED_IDLE_MS")
                .filter(|&ms| ms > 0)
                .map_or(d.idle_interval, Duration::from_millis),
        }
    }
}

/// The Linux batched UDP bind (`conn.StdNetBind`).
///
/// `open` returns the IPv4 receive function first, then the IPv6 one (either may be missing
/// when the system lacks that family). Receive functions accept buffers of any size: with UDP
/// GRO they copy segments out of a private 128 KiB scratch area per reader.
pub struct StdNetBind {
    state: RwLock<State>,
    /// Shared with the connected sockets' control, which applies it to every dial.
    mark: Arc<AtomicU32>,
    offload: bool,
    stats: Arc<Stats>,
    send_pool: Mutex<Vec<SendScratch>>,
    connected_opts: ConnectedOptions,
    starter: Mutex<Option<Arc<dyn ReceiveFuncStarter>>>,
    connected_counters: Arc<connected::Counters>,
}

impl Default for StdNetBind {
    fn default() -> Self {
        Self::new()
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
            state: RwLock::new(State::default()),
            mark: Arc::new(AtomicU32::new(0)),
            offload,
            stats: Arc::default(),
            send_pool: Mutex::new(Vec::new()),
            connected_opts: ConnectedOptions::default(),
            starter: Mutex::new(None),
            connected_counters: Arc::default(),
        }
    }

    /// Turns connected sockets on or off (default off) for later `open`s. They take effect
    /// only once the device installs a receive-function starter.
    pub fn with_connected_sockets(self, on: bool) -> Self {
        let opts = ConnectedOptions {
            enabled: on,
            ..self.connected_opts
        };
        self.with_connected_options(opts)
    }

    /// Sets every connected-socket option at once.
    pub fn with_connected_options(mut self, opts: ConnectedOptions) -> Self {
        self.connected_opts = opts;
        self
    }

    /// The connected sockets of the current open, if any.
    pub fn connected_sockets(&self) -> Option<Arc<ConnectedSockets>> {
        self.state.read().connected.clone()
    }

    /// The set for a fresh open on `port`, when connected sockets are on and a starter is
    /// installed.
    fn new_connected(&self, port: u16) -> Option<Arc<ConnectedSockets>> {
        if !self.connected_opts.enabled {
            return None;
        }
        let starter = self.starter.lock().clone()?;
        let mark = self.mark.clone();
        let o = self.connected_opts;
        let mut cfg = ConnectedConfig::new(
            port,
            Arc::new(move |f, buf, batch| starter.start(f, buf, batch)),
        );
        cfg.control = Some(Arc::new(move |s: &Socket| {
            match mark.load(Ordering::Relaxed) {
                0 => Ok(()),
                m => s.set_mark(m),
            }
        }));
        cfg.max_sockets = o.max_sockets;
        cfg.max_datagram = o.max_datagram;
        cfg.open_after = o.open_after;
        cfg.idle_interval = o.idle_interval;
        cfg.offload = self.offload;
        Some(Arc::new(ConnectedSockets::with_counters(
            cfg,
            self.connected_counters.clone(),
        )))
    }

    /// The counters since creation.
    pub fn stats(&self) -> BindStats {
        let c = self.connected_counters.snapshot();
        BindStats {
            connected_open: c.open,
            connected_dials: c.dials,
            connected_datagrams_sent: c.datagrams_sent,
            connected_datagrams_received: c.datagrams_received,
            ..self.stats.snapshot()
        }
    }

    /// Whether UDP GSO (send) and GRO (receive) are in use on the IPv4 and IPv6 sockets, as
    /// `[(gso, gro) for v4, for v6]`; `None` for a family that is not open.
    pub fn offloads(&self) -> [Option<(bool, bool)>; 2] {
        let st = self.state.read();
        let f = |fam: &Option<Arc<Family>>| {
            fam.as_ref().map(|f| (f.gso.load(Ordering::Relaxed), f.gro))
        };
        [f(&st.v4), f(&st.v6)]
    }

    #[cfg(test)]
    fn with_socket<R>(&self, v6: bool, f: impl FnOnce(&Socket) -> R) -> Option<R> {
        let st = self.state.read();
        let fam = if v6 { st.v6.as_ref() } else { st.v4.as_ref() }?;
        let guard = fam.sock.read();
        guard.as_ref().map(f)
    }
}

/// A v4-mapped IPv6 destination goes out of the IPv4 socket (the v6 one is v6-only).
fn canonical(dst: SocketAddr) -> SocketAddr {
    match dst {
        SocketAddr::V6(v6) => match v6.ip().to_ipv4_mapped() {
            Some(v4) => SocketAddr::from((v4, v6.port())),
            None => dst,
        },
        v4 => v4,
    }
}

impl Bind for StdNetBind {
    fn open(&self, port: u16) -> io::Result<(Vec<ReceiveFunc>, u16)> {
        let mut st = self.state.write();
        if st.open {
            return Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                "bind already open",
            ));
        }
        let (v4, v6, port) = listen::listen_pair(
            port,
            self.mark.load(Ordering::Relaxed),
            self.offload,
            self.connected_opts.enabled,
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
        let mut fns: Vec<ReceiveFunc> = Vec::with_capacity(2);
        for fam in [&st.v4, &st.v6].into_iter().flatten() {
            let mut reader = Reader::new(fam.clone(), self.stats.clone(), st.connected.clone());
            fns.push(Box::new(move |bufs, sizes, eps| {
                reader.read(bufs, sizes, eps)
            }));
        }
        Ok((fns, port))
    }

    fn close(&self) -> io::Result<()> {
        // Held throughout so a following `open` finds the port free.
        let mut st = self.state.write();
        st.open = false;
        // First, so that the started readers end and a following open can dial again.
        if let Some(c) = st.connected.take() {
            c.close();
        }
        for fam in [st.v4.take(), st.v6.take()].into_iter().flatten() {
            fam.close();
        }
        Ok(())
    }

    fn set_mark(&self, mark: u32) -> io::Result<()> {
        let st = self.state.read();
        for fam in [&st.v4, &st.v6].into_iter().flatten() {
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
        let dst = canonical(ep.dst);
        let (fam, connected) = {
            let st = self.state.read();
            if !st.open {
                return Err(err_closed());
            }
            let connected = st.connected.clone();
            let fam = if dst.is_ipv6() { &st.v6 } else { &st.v4 };
            let fam = fam
                .clone()
                .ok_or_else(|| io::Error::from_raw_os_error(libc::EAFNOSUPPORT))?;
            (fam, connected)
        };
        // A sticky source picks the pair directly (replies leave through the socket the peer
        // reached); otherwise the route's choice. Not handled: the shared socket sends.
        if let Some(c) = connected {
            let local = ep.src.map(|s| s.ip);
            if let Some(r) = c.send_from(dst, local, bufs) {
                return r;
            }
        }
        let src = ep
            .src
            .filter(|s| s.ip.is_ipv6() == dst.is_ipv6())
            .map(|s| PktInfo {
                addr: s.ip,
                ifindex: s.ifindex,
            });
        if let [one] = bufs {
            let result = fam.send_one(one, &dst, src);
            if result.is_ok() {
                self.stats.send(1, 0);
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
        self.stats.send(sent.datagrams, sent.gso_messages);
        result
    }

    fn batch_size(&self) -> usize {
        IDEAL_BATCH_SIZE
    }

    fn set_receive_func_starter(&self, starter: Arc<dyn ReceiveFuncStarter>) {
        *self.starter.lock() = Some(starter);
    }
}
