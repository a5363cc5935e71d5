//! Connected sockets (`docs/bind.md`, "Connected sockets"): next to the bind's wildcard
//! socket, one UDP socket per busy (local address, remote address) pair, bound to the same port
//! and `connect`ed to the remote. The route is resolved once instead of per send, and each remote
//! gets its own kernel receive queue, read by a device receive routine of its own.
//!
//! Once a pair socket exists the kernel delivers that remote's datagrams to it and no longer to
//! the shared socket, so every pair socket is handed to a reader the moment it is dialled; one
//! the reader hook refuses is closed at once.
//!
//! Policy, in short: a pair gets a socket when it carried `open_after` bytes (sent plus
//! received) within one idle interval and the delivery self-check passed; one dial at a time
//! (a concurrent caller uses the shared socket instead of waiting); the socket limit is checked
//! before dialling; a generation counter discards dials that raced a rebind or close; a failed
//! dial backs off; each idle interval closes unused sockets, resets the byte counts, forgets
//! stale routes and re-checks the rest.
//!
//! The policy here is the same on every platform. What differs lives in one file per OS
//! (`linux.rs`, `darwin.rs`): how a socket shares the port, the options a pair socket gets,
//! and how a pair socket sends and reads (Linux: `sendmmsg`/`recvmmsg` with UDP GSO/GRO;
//! darwin: `sendmsg_x`/`recvmsg_x` when the batch self-test passed, else one datagram per
//! call).

mod check;
mod options;
#[cfg(target_vendor = "apple")]
#[path = "darwin.rs"]
mod os;
#[cfg(any(target_os = "linux", target_os = "android"))]
#[path = "linux.rs"]
mod os;
#[cfg(any(target_os = "linux", target_os = "android"))]
mod reader;
pub(crate) mod slots;
mod sock;
#[cfg(all(test, any(target_os = "linux", target_os = "android")))]
mod tests;

pub use check::connected_delivery_check;
pub use options::ConnectedOptions;
pub use os::reuse_port_control;

use std::collections::{HashMap, HashSet};
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};
use socket2::Socket;

use crate::stats::add;
use crate::{is_err_closed, Endpoint, ReceiveFunc};
use os::{Family, SendPool};

/// Bytes a pair carries (sent + received) within one idle interval before it gets a socket.
pub const DEFAULT_OPEN_AFTER: u64 = 1 << 20;
/// Most pair sockets at once.
pub const DEFAULT_MAX_SOCKETS: usize = 256;
/// The idle-check period: a socket unused for a whole period is closed.
pub const DEFAULT_IDLE_INTERVAL: Duration = Duration::from_secs(30);
/// Back-off after a failed dial or route lookup for a pair.
pub const DEFAULT_RETRY_AFTER: Duration = Duration::from_secs(5);

/// Applied to every pair socket (and route-lookup socket) before `bind`/`connect`: fwmark,
/// interface pinning, don't-fragment. An error abandons that dial.
pub type Control = Arc<dyn Fn(&Socket) -> io::Result<()> + Send + Sync>;

/// Whether a datagram the shared socket received counts toward its pair's threshold (see
/// [`ConnectedConfig::counts`]).
pub type Counts = Arc<dyn Fn(&[u8]) -> bool + Send + Sync>;

/// Hands a new pair socket's receive function to its reader (the device's starter):
/// `(f, buf_size, batch_size)`; `false` means nobody will read it.
pub type ReaderHook = Arc<dyn Fn(ReceiveFunc, usize, usize) -> bool + Send + Sync>;

/// How a [`ConnectedSockets`] set behaves.
#[derive(Clone)]
pub struct ConnectedConfig {
    /// The shared port (0: dial nothing until [`ConnectedSockets::rebind`] names one).
    pub port: u16,
    /// Applied to every socket before connect (fwmark on Linux, don't-fragment on darwin:
    /// [`StdNetBind`](crate::StdNetBind) puts its own settings here).
    pub control: Option<Control>,
    /// Most sockets at once (0: [`DEFAULT_MAX_SOCKETS`]).
    pub max_sockets: usize,
    /// Largest datagram expected: receive slots start large enough (0: smallest slots).
    pub max_datagram: usize,
    /// Bytes before a pair opens (0: [`DEFAULT_OPEN_AFTER`]; 1: on the first datagram).
    pub open_after: u64,
    /// Idle-check period (zero: no timer; the owner calls [`ConnectedSockets::idle_check`]).
    pub idle_interval: Duration,
    /// Back-off after a failed dial.
    pub retry_after: Duration,
    /// Use UDP GSO/GRO on pair sockets where the kernel offers them (Linux), or batched
    /// `sendmsg_x`/`recvmsg_x` where the self-test passed (darwin).
    pub offload: bool,
    /// Receives every new socket's receive function.
    pub reader: ReaderHook,
    /// Which received datagrams make a pair busy. The set carries datagrams and knows no
    /// protocol: the owner names the ones worth a socket (the device: its data messages, so
    /// handshakes and strangers' junk open none). Default: every datagram counts.
    pub counts: Counts,
}

impl ConnectedConfig {
    /// Defaults for everything but the port and the reader hook.
    pub fn new(port: u16, reader: ReaderHook) -> Self {
        ConnectedConfig {
            port,
            control: None,
            max_sockets: DEFAULT_MAX_SOCKETS,
            max_datagram: 0,
            open_after: DEFAULT_OPEN_AFTER,
            idle_interval: DEFAULT_IDLE_INTERVAL,
            retry_after: DEFAULT_RETRY_AFTER,
            offload: true,
            reader,
            counts: Arc::new(|_| true),
        }
    }
}

/// Counters of a set (they survive rebinds).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ConnectedStats {
    /// Pair sockets open now.
    pub open: u64,
    /// Sockets dialled and handed to a reader.
    pub dials: u64,
    /// Dials that failed (or whose reader was refused).
    pub dial_failures: u64,
    /// Datagrams sent on pair sockets.
    pub datagrams_sent: u64,
    /// Datagrams received on pair sockets (GRO segments one by one).
    pub datagrams_received: u64,
    /// GRO super-datagrams received on pair sockets.
    pub gro_super_datagrams: u64,
    /// Datagrams lost because they overflowed a receive slot.
    pub oversize_drops: u64,
    /// Datagrams dropped because a batched send on a pair socket accepted none of them.
    pub send_drops: u64,
}

/// Cumulative counters, shared with the owner so they outlive one set.
#[derive(Default)]
pub(crate) struct Counters {
    dials: AtomicU64,
    dial_failures: AtomicU64,
    sent: AtomicU64,
    received: AtomicU64,
    gro: AtomicU64,
    oversize: AtomicU64,
    send_drops: AtomicU64,
    open: AtomicU64,
}

impl Counters {
    fn received(&self, datagrams: usize, gro: usize, oversize: usize) {
        add(&self.received, datagrams);
        add(&self.gro, gro);
        add(&self.oversize, oversize);
    }

    pub(crate) fn snapshot(&self) -> ConnectedStats {
        ConnectedStats {
            open: self.open.load(Relaxed),
            dials: self.dials.load(Relaxed),
            dial_failures: self.dial_failures.load(Relaxed),
            datagrams_sent: self.sent.load(Relaxed),
            datagrams_received: self.received.load(Relaxed),
            gro_super_datagrams: self.gro.load(Relaxed),
            oversize_drops: self.oversize.load(Relaxed),
            send_drops: self.send_drops.load(Relaxed),
        }
    }
}

/// A (local address, remote address) pair.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub(crate) struct Key {
    local: IpAddr,
    remote: SocketAddr,
}

/// One pair socket. `fam` carries the socket, its closed flag and offloads (closing wakes a
/// blocked reader with `shutdown`, as for the bind's own sockets).
pub(crate) struct Pair {
    key: Key,
    fam: Family,
    /// Sent or received since the last idle check.
    used: AtomicBool,
}

enum Route {
    Local(IpAddr),
    Failed(Instant),
}

struct State {
    closed: bool,
    port: u16,
    generation: u64,
    socks: HashMap<Key, Arc<Pair>>,
    routes: HashMap<SocketAddr, Route>,
    pending: HashMap<Key, u64>,
    /// Pairs not to dial before the given time (failed dial, refused reader).
    failures: HashMap<Key, Instant>,
}

pub(crate) struct Inner {
    cfg: ConnectedConfig,
    state: Mutex<State>,
    /// Held while dialling: one dial at a time, others fall back instead of waiting.
    dialing: Mutex<()>,
    counters: Arc<Counters>,
    send_pool: SendPool,
    /// Wakes the idle timer on close.
    tick: (Mutex<bool>, Condvar),
}

/// The set of connected sockets of one bind (one port, both address families).
pub struct ConnectedSockets {
    inner: Arc<Inner>,
    timer: Mutex<Option<JoinHandle<()>>>,
}

impl ConnectedSockets {
    /// A set with its own counters; starts the idle timer unless the interval is zero.
    pub fn new(cfg: ConnectedConfig) -> Self {
        Self::with_counters(cfg, Arc::default())
    }

    pub(crate) fn with_counters(mut cfg: ConnectedConfig, counters: Arc<Counters>) -> Self {
        if cfg.max_sockets == 0 {
            cfg.max_sockets = DEFAULT_MAX_SOCKETS;
        }
        if cfg.open_after == 0 {
            cfg.open_after = DEFAULT_OPEN_AFTER;
        }
        counters.open.store(0, Relaxed);
        let inner = Arc::new(Inner {
            state: Mutex::new(State {
                closed: false,
                port: cfg.port,
                generation: 0,
                socks: HashMap::new(),
                routes: HashMap::new(),
                pending: HashMap::new(),
                failures: HashMap::new(),
            }),
            cfg,
            dialing: Mutex::new(()),
            counters,
            send_pool: SendPool::default(),
            tick: (Mutex::new(false), Condvar::new()),
        });
        let timer = (!inner.cfg.idle_interval.is_zero()).then(|| {
            let weak = Arc::downgrade(&inner);
            let every = inner.cfg.idle_interval;
            std::thread::Builder::new()
                .name("connected-idle".into())
                .spawn(move || idle_timer(weak, every))
                .expect("spawning the idle timer")
        });
        ConnectedSockets {
            inner,
            timer: Mutex::new(timer),
        }
    }

    /// Sends `bufs` to `dst` on the pair socket the route picks. `None`: not handled, send on
    /// the shared socket.
    pub fn send(&self, dst: SocketAddr, bufs: &[&[u8]]) -> Option<io::Result<()>> {
        self.send_from(dst, None, bufs)
    }

    /// Sends on the pair `(local, dst)` when `local` is given (a sticky source), else as
    /// [`send`](Self::send). `None`: not handled.
    pub fn send_from(
        &self,
        dst: SocketAddr,
        local: Option<IpAddr>,
        bufs: &[&[u8]],
    ) -> Option<io::Result<()>> {
        if bufs.is_empty() {
            return None;
        }
        let n: u64 = bufs.iter().map(|b| b.len() as u64).sum();
        let dst = canonical(dst);
        let mut bypass = false;
        for _ in 0..2 {
            let pair = self.inner.open(dst, local, n, bypass)?;
            match pair.send(&self.inner, bufs) {
                Err(e) if is_err_closed(&e) => {
                    // Closed underneath (idle check, reset): redial once, past the threshold.
                    self.inner.remove(&pair);
                    bypass = true;
                }
                r => return Some(self.inner.classify(&pair, r)),
            }
        }
        None
    }

    /// Counts `size` bytes received on the shared socket from `src` to local address `local`
    /// and dials that pair once it reaches the threshold. True when it has a socket.
    pub fn dial(&self, src: SocketAddr, local: IpAddr, size: u64) -> bool {
        self.inner
            .open(canonical(src), Some(local), size, false)
            .is_some()
    }

    /// Counts what a shared socket's read returned (its first `n` entries) toward the pairs'
    /// thresholds: one [`dial`](Self::dial) per run of counted datagrams
    /// ([`ConnectedConfig::counts`]) from one source to one local address. Where the platform does not report the local address
    /// (`unknown_local`: darwin) the pair is the one the route to the source picks.
    pub(crate) fn count_received(
        &self,
        bufs: &[&mut [u8]],
        sizes: &[usize],
        eps: &[Endpoint],
        n: usize,
        unknown_local: bool,
    ) {
        let counts = &*self.inner.cfg.counts;
        count_runs(
            bufs,
            sizes,
            eps,
            n,
            unknown_local,
            counts,
            |src, local, bytes| {
                self.inner.open(canonical(src), local, bytes, false);
            },
        );
    }

    /// Moves the set to `port` (0: accept nothing) and closes every socket: call after the
    /// shared socket was rebound or the network changed.
    pub fn rebind(&self, port: u16) {
        let closing = {
            let mut st = self.inner.state.lock();
            st.port = port;
            reset(&mut st)
        };
        self.inner.close_all(closing);
    }

    /// Closes every socket and forgets routes, counts and failures (e.g. a new fwmark).
    pub fn reset(&self) {
        let closing = reset(&mut self.inner.state.lock());
        self.inner.close_all(closing);
    }

    /// Closes the set: every reader returns [`err_closed`](crate::err_closed), nothing is
    /// dialled afterwards.
    pub fn close(&self) {
        let closing = {
            let mut st = self.inner.state.lock();
            st.closed = true;
            reset(&mut st)
        };
        self.inner.close_all(closing);
        {
            let (m, c) = &self.inner.tick;
            *m.lock() = true;
            c.notify_all();
        }
        if let Some(t) = self.timer.lock().take() {
            let _ = t.join();
        }
    }

    /// One idle check (the timer runs it every interval).
    pub fn idle_check(&self) {
        self.inner.idle_check();
    }

    /// Pair sockets open now.
    pub fn len(&self) -> usize {
        self.inner.state.lock().socks.len()
    }

    /// Whether no pair socket is open.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The counters.
    pub fn stats(&self) -> ConnectedStats {
        self.inner.counters.snapshot()
    }

    /// The open pairs as (local address, remote address).
    pub fn pairs(&self) -> Vec<(IpAddr, SocketAddr)> {
        let st = self.inner.state.lock();
        st.socks.keys().map(|k| (k.local, k.remote)).collect()
    }
}

impl Drop for ConnectedSockets {
    fn drop(&mut self) {
        self.close();
    }
}

/// A v4-mapped IPv6 destination goes out of the IPv4 socket (the v6 one is v6-only).
pub(crate) fn canonical(dst: SocketAddr) -> SocketAddr {
    match dst {
        SocketAddr::V6(v6) => match v6.ip().to_ipv4_mapped() {
            Some(v4) => SocketAddr::from((v4, v6.port())),
            None => dst,
        },
        v4 => v4,
    }
}

/// Closes everything and bumps the generation; returns the sockets to close outside the lock.
fn reset(st: &mut State) -> Vec<Arc<Pair>> {
    st.generation += 1;
    st.routes.clear();
    st.pending.clear();
    st.failures.clear();
    st.socks.drain().map(|(_, p)| p).collect()
}

fn idle_timer(set: Weak<Inner>, every: Duration) {
    loop {
        {
            let Some(inner) = set.upgrade() else { return };
            let (m, c) = &inner.tick;
            let mut closed = m.lock();
            if !*closed {
                c.wait_for(&mut closed, every);
            }
            if *closed {
                return;
            }
        }
        match set.upgrade() {
            Some(inner) => inner.idle_check(),
            None => return,
        }
    }
}

/// The local address in the form pairs are keyed by (v4-mapped IPv6 as IPv4).
fn normalise(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

impl Inner {
    fn update_open(&self, st: &State) {
        self.counters.open.store(st.socks.len() as u64, Relaxed);
    }

    fn close_all(&self, pairs: Vec<Arc<Pair>>) {
        self.counters
            .open
            .store(self.state.lock().socks.len() as u64, Relaxed);
        for p in pairs {
            p.fam.close();
        }
    }

    /// Removes `pair` (if still the one in the set) and closes it.
    fn remove(&self, pair: &Arc<Pair>) {
        {
            let mut st = self.state.lock();
            if st
                .socks
                .get(&pair.key)
                .is_some_and(|p| Arc::ptr_eq(p, pair))
            {
                st.socks.remove(&pair.key);
            }
            self.update_open(&st);
        }
        pair.fam.close();
    }

    /// The pair the route picks for `dst`, looked up (and cached) when unknown.
    fn route_key(&self, dst: SocketAddr) -> Option<Key> {
        {
            let st = self.state.lock();
            match st.routes.get(&dst) {
                Some(Route::Local(l)) => {
                    return Some(Key {
                        local: *l,
                        remote: dst,
                    })
                }
                Some(Route::Failed(t)) if t.elapsed() < self.cfg.retry_after => return None,
                _ => {}
            }
            if st.closed || st.port == 0 {
                return None;
            }
        }
        let found = sock::route_local(dst, self.cfg.control.as_ref());
        let mut st = self.state.lock();
        match found {
            Ok(l) => {
                let l = normalise(l);
                st.routes.insert(dst, Route::Local(l));
                Some(Key {
                    local: l,
                    remote: dst,
                })
            }
            Err(e) => {
                tracing::debug!(%dst, "route lookup failed: {e}");
                st.routes.insert(dst, Route::Failed(Instant::now()));
                None
            }
        }
    }

    /// Whether a new socket for `key` may be dialled now (not counting the self-check).
    fn may_dial(&self, st: &State, key: &Key) -> bool {
        !st.closed
            && st.port != 0
            && st.socks.len() < self.cfg.max_sockets
            && st.failures.get(key).is_none_or(|&t| Instant::now() >= t)
    }

    /// The socket for the pair, after counting `n` bytes toward its threshold and dialling if
    /// it was reached. `None`: use the shared socket.
    fn open(
        self: &Arc<Self>,
        dst: SocketAddr,
        local: Option<IpAddr>,
        n: u64,
        bypass: bool,
    ) -> Option<Arc<Pair>> {
        let key = match local {
            Some(l) => Key {
                local: normalise(l),
                remote: dst,
            },
            None => self.route_key(dst)?,
        };
        if key.local.is_ipv6() != key.remote.is_ipv6() || key.local.is_unspecified() {
            return None;
        }
        {
            let mut st = self.state.lock();
            if let Some(p) = st.socks.get(&key) {
                return Some(p.clone());
            }
            if !self.may_dial(&st, &key) {
                return None;
            }
            let pending = st.pending.entry(key).or_insert(0);
            *pending = pending.saturating_add(n);
            if !bypass && *pending < self.cfg.open_after {
                return None;
            }
        }
        if !connected_delivery_check() {
            return None;
        }
        self.dial(key)
    }

    fn dial(self: &Arc<Self>, key: Key) -> Option<Arc<Pair>> {
        let _dialing = self.dialing.try_lock()?;
        let (generation, port) = {
            let st = self.state.lock();
            if let Some(p) = st.socks.get(&key) {
                return Some(p.clone());
            }
            if !self.may_dial(&st, &key) {
                return None;
            }
            (st.generation, st.port)
        };
        let dialled = match sock::dial(&key, port, self.cfg.offload, self.cfg.control.as_ref()) {
            Ok(d) => d,
            Err(e) => {
                tracing::debug!(?key, "dialling a connected socket failed: {e}");
                self.failed(key, generation, self.cfg.retry_after);
                return None;
            }
        };
        let (gso, gro) = (dialled.gso, dialled.gro);
        let pair = Arc::new(Pair {
            key,
            fam: os::family(dialled, key.remote.is_ipv6(), self.cfg.offload),
            used: AtomicBool::new(true),
        });
        {
            let mut st = self.state.lock();
            if st.generation != generation || st.closed {
                drop(st);
                pair.fam.close();
                return None;
            }
            st.socks.insert(key, pair.clone());
            st.pending.remove(&key);
            self.update_open(&st);
        }
        let (f, buf_size, batch) =
            os::receive_func(pair.clone(), Arc::downgrade(self), self.cfg.max_datagram);
        if !(self.cfg.reader)(f, buf_size, batch) {
            // An unread socket would swallow the peer's traffic: close it at once, and leave
            // the pair alone for an idle interval (asking again at once would only repeat the
            // refusal, and each dial may swallow a datagram or two).
            self.remove(&pair);
            let hold = self.cfg.idle_interval.max(self.cfg.retry_after);
            self.failed(key, generation, hold);
            return None;
        }
        self.counters.dials.fetch_add(1, Relaxed);
        tracing::debug!(?key, gso, gro, "connected socket open");
        Some(pair)
    }

    fn failed(&self, key: Key, generation: u64, hold: Duration) {
        self.counters.dial_failures.fetch_add(1, Relaxed);
        let mut st = self.state.lock();
        if st.generation == generation {
            st.failures.insert(key, Instant::now() + hold);
        }
    }

    /// What a send error means for the pair (`docs/bind.md`, "Sending on a pair socket").
    fn classify(&self, pair: &Arc<Pair>, r: io::Result<()>) -> io::Result<()> {
        let Err(e) = r else { return Ok(()) };
        match e.raw_os_error() {
            // ICMP port unreachable from a restarting peer: not our problem.
            Some(libc::ECONNREFUSED) => Ok(()),
            // The source address (or its route) went away: drop the socket so the next send
            // redials, past the threshold it had already crossed.
            Some(errno)
                if is_lost_source(errno, cfg!(any(target_os = "linux", target_os = "android"))) =>
            {
                self.remove(pair);
                let mut st = self.state.lock();
                st.pending.insert(pair.key, self.cfg.open_after);
                Err(e)
            }
            _ => Err(e),
        }
    }

    fn idle_check(&self) {
        let (closing, remotes, pairs, generation) = {
            let mut st = self.state.lock();
            if st.closed {
                return;
            }
            let mut closing = Vec::new();
            st.socks.retain(|_, p| {
                let keep = p.used.swap(false, Relaxed);
                if !keep {
                    closing.push(p.clone());
                }
                keep
            });
            let open: HashSet<SocketAddr> = st.socks.keys().map(|k| k.remote).collect();
            st.routes.retain(|r, _| open.contains(r));
            st.pending.clear();
            let now = Instant::now();
            st.failures.retain(|_, &mut t| now < t);
            self.update_open(&st);
            let remotes: Vec<SocketAddr> = st.routes.keys().copied().collect();
            let pairs: Vec<Arc<Pair>> = st.socks.values().cloned().collect();
            (closing, remotes, pairs, st.generation)
        };
        for p in closing {
            tracing::debug!(key = ?p.key, "connected socket idle: closed");
            p.fam.close();
        }
        // A socket whose local address vanished receives nothing more: close it.
        for p in pairs {
            let scope = match p.key.remote {
                SocketAddr::V6(r) => r.scope_id(),
                SocketAddr::V4(_) => 0,
            };
            if !sock::local_addr_present(p.key.local, scope) {
                tracing::debug!(key = ?p.key, "local address gone: connected socket closed");
                self.remove(&p);
            }
        }
        // Follow route changes nobody reported: the old pair's socket idles out by itself.
        for r in remotes {
            let found = sock::route_local(r, self.cfg.control.as_ref());
            let mut st = self.state.lock();
            if st.generation != generation {
                return;
            }
            let route = match found {
                Ok(l) => Route::Local(normalise(l)),
                Err(_) => Route::Failed(Instant::now()),
            };
            st.routes.insert(r, route);
        }
    }
}

/// Calls `dial(source, local, bytes)` once per run of consecutive counted datagrams (`counts`)
/// with the same source and local destination among the first `n` entries; datagrams not
/// counted neither count nor end a run. Entries without a local address are skipped, unless
/// `unknown_local` (a platform that does not report it) lets them run by source alone with
/// local `None`.
pub(crate) fn count_runs(
    bufs: &[&mut [u8]],
    sizes: &[usize],
    eps: &[Endpoint],
    n: usize,
    unknown_local: bool,
    counts: &dyn Fn(&[u8]) -> bool,
    mut dial: impl FnMut(SocketAddr, Option<IpAddr>, u64),
) {
    let mut run: Option<(SocketAddr, Option<IpAddr>, u64)> = None;
    for i in 0..n {
        let (Some(buf), Some(&size), Some(ep)) = (bufs.get(i), sizes.get(i), eps.get(i)) else {
            break;
        };
        let local = ep.src.map(|s| s.ip);
        if local.is_none() && !unknown_local {
            continue;
        }
        if !buf.get(..size).is_some_and(|d| !d.is_empty() && counts(d)) {
            continue;
        }
        match &mut run {
            Some((src, l, bytes)) if *src == ep.dst && *l == local => *bytes += size as u64,
            _ => {
                if let Some((src, l, bytes)) = run.take() {
                    dial(src, l, bytes);
                }
                run = Some((ep.dst, local, size as u64));
            }
        }
    }
    if let Some((src, l, bytes)) = run {
        dial(src, l, bytes);
    }
}

/// Whether a send error means the pair's source address (or its route) went away, so the
/// socket is dropped and the next send redials: `EADDRNOTAVAIL`, `ENETUNREACH`, and on Linux
/// also `EINVAL` (what it returns once the bound address vanished; on darwin `EINVAL` means a
/// malformed call and recycling would not help).
fn is_lost_source(errno: i32, linux: bool) -> bool {
    errno == libc::EADDRNOTAVAIL || errno == libc::ENETUNREACH || (linux && errno == libc::EINVAL)
}

impl Pair {
    /// Sends `bufs` on this socket, batched where the platform can (see [`os::send`]).
    fn send(&self, set: &Inner, bufs: &[&[u8]]) -> io::Result<()> {
        let (result, sent, dropped) = os::send(&self.fam, &set.send_pool, bufs);
        self.used.store(true, Relaxed);
        add(&set.counters.sent, sent);
        add(&set.counters.send_drops, dropped);
        result
    }
}

#[cfg(test)]
mod portable_tests {
    use super::*;

    #[test]
    fn einval_recycles_the_pair_socket_only_on_linux() {
        for errno in [libc::EADDRNOTAVAIL, libc::ENETUNREACH] {
            assert!(is_lost_source(errno, true) && is_lost_source(errno, false));
        }
        assert!(is_lost_source(libc::EINVAL, true));
        assert!(!is_lost_source(libc::EINVAL, false));
        assert!(!is_lost_source(libc::ENOBUFS, true));
    }

    /// Runs reported by [`count_runs`] over datagrams `(first byte, size, source, local)`, with
    /// the datagrams that start with `D` counted (a stand-in for the owner's data messages).
    fn runs(
        dgrams: &[(u8, usize, &str, Option<&str>)],
        unknown_local: bool,
    ) -> Vec<(SocketAddr, Option<IpAddr>, u64)> {
        let mut storage: Vec<Vec<u8>> = dgrams.iter().map(|d| vec![d.0; d.1]).collect();
        let bufs: Vec<&mut [u8]> = storage.iter_mut().map(|b| &mut b[..]).collect();
        let sizes: Vec<usize> = dgrams.iter().map(|d| d.1).collect();
        let eps: Vec<Endpoint> = dgrams
            .iter()
            .map(|d| Endpoint {
                dst: d.2.parse().unwrap(),
                src: d.3.map(|l| crate::StickySource {
                    ip: l.parse().unwrap(),
                    ifindex: 0,
                }),
            })
            .collect();
        let mut out = Vec::new();
        count_runs(
            &bufs,
            &sizes,
            &eps,
            dgrams.len(),
            unknown_local,
            &|d| d.first() == Some(&b'D'),
            |s, l, b| out.push((s, l, b)),
        );
        out
    }

    #[test]
    fn counted_bytes_add_up_once_per_run_of_source_and_local() {
        let (a, b) = ("198.18.0.1:1", "198.18.0.2:1");
        let l = Some("198.18.0.9");
        let got = runs(
            &[
                (b'D', 100, a, l),
                (b'D', 50, a, l),
                (b'H', 148, a, l), // not counted: does not end the run either
                (b'D', 0, a, l),   // a hole the reader left
                (b'D', 40, b, l),
                (b'D', 60, a, l),
                (b'D', 70, a, None), // no local address: skipped here
            ],
            false,
        );
        let ip = l.map(|l| l.parse().unwrap());
        assert_eq!(
            got,
            [
                (a.parse().unwrap(), ip, 150),
                (b.parse().unwrap(), ip, 40),
                (a.parse().unwrap(), ip, 60)
            ]
        );
    }

    #[test]
    fn without_local_addresses_runs_go_by_source_alone() {
        let a = "198.18.0.1:1";
        let got = runs(&[(b'D', 100, a, None), (b'D', 50, a, None)], true);
        assert_eq!(got, [(a.parse().unwrap(), None, 150)]);
        assert!(runs(&[(b'D', 100, a, None)], false).is_empty());
    }

    #[test]
    fn v4_mapped_destinations_are_sent_as_ipv4() {
        let mapped: SocketAddr = "[::ffff:198.18.0.1]:51820".parse().unwrap();
        assert_eq!(canonical(mapped), "198.18.0.1:51820".parse().unwrap());
        let v6: SocketAddr = "[fd00::1]:51820".parse().unwrap();
        assert_eq!(canonical(v6), v6);
    }
}
