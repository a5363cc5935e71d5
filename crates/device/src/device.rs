//! The device: lifecycle, configuration state and the threads that run the pipeline.
//!
//! Lock order (a thread holding one may only take those after it): `state_lock` → `ipc_lock` →
//! `bind_lock` → a container's elements and replay windows → `identity` → `peers` →
//! `allowed_ips` → `peer.handshake` → `peer.keypairs` → `index` → `peer.staged` →
//! ordered-queue and endpoint locks (leaves). The inbound sequential stage holds a container
//! while key confirmation may start a handshake, hence containers before `identity`.

use crate::allowedips::AllowedIps;
use crate::batch::Container;
use crate::clock::Clock;
use crate::index::IndexTable;
use crate::keypair::DevKeypair;
use crate::peer::{Peer, PeerRef};
use crate::pool::{Layout, Pool};
use crate::stats::{DeviceStats, Stats};
use crate::timers::TimerWheel;
use crossbeam_channel::{bounded, unbounded, Receiver, Sender};
use parking_lot::{Condvar, Mutex, RwLock};
use std::collections::HashMap;
use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Weak};
use std::thread::JoinHandle;
use vpn_conn::{Bind, Endpoint, ReceiveFunc, ReceiveFuncStarter};
use vpn_proto::consts::{DEFAULT_MTU, MAX_CONTENT_SIZE, QUEUE_HANDSHAKE_SIZE};
use vpn_proto::cookie::CookieChecker;
use vpn_proto::keys::{PrivateKey, PublicKey};
use vpn_proto::noise::StaticIdentity;
use vpn_proto::ratelimiter::RateLimiter;
use vpn_proto::time::Instant;
use vpn_tun::Device as Tun;

pub use crate::pool::{DEFAULT_MEMORY_BUDGET, MIN_MEMORY_BUDGET};

/// Construction options. `Options::default()` is what `Device::new` uses.
///
/// Built with the `with_*` methods (new fields may be added, so the struct cannot be written as
/// a literal outside this crate):
///
/// ```
/// let opts = vpn_device::Options::default()
///     .with_workers(2)
///     .with_memory_budget(16 << 20);
/// assert_eq!(opts.workers, 2);
/// ```
#[derive(Clone)]
#[non_exhaustive]
pub struct Options {
    /// The clock; pass a suspend-aware one (CLOCK_BOOTTIME) in production on Linux. The
    /// default ([`crate::clock::default_clock`]) counts sleep on Apple targets.
    pub clock: Arc<dyn Clock>,
    /// Crypto worker threads (0: one per available core).
    pub workers: usize,
    /// Cap in bytes on the device's packet memory: the slabs of every reader (the TUN's, the
    /// shared sockets', every connected socket's) and the packets in flight or staged, both
    /// directions. Readers wait while it is reached. Embedders with a memory ceiling (an iOS
    /// network extension) lower it; 0 is unbounded. Default [`DEFAULT_MEMORY_BUDGET`].
    pub memory_budget: usize,
    /// How the data-path threads are marked while the device carries bulk traffic (the daemon
    /// passes `SCHED_BATCH` on Linux; see [`crate::sched`]). `None`: left alone.
    pub scheduling: Option<Arc<dyn crate::sched::Scheduling>>,
    /// Whether a thread that has just written a burst of inbound datagrams (UDP) to the TUN
    /// yields its CPU before it reads again, so that local receivers without flow control get
    /// to drain their sockets (see [`crate::sched`]). On by default.
    pub datagram_yield: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            clock: crate::clock::default_clock(),
            workers: 0,
            memory_budget: DEFAULT_MEMORY_BUDGET,
            scheduling: None,
            datagram_yield: true,
        }
    }
}

impl Options {
    /// The clock; pass a suspend-aware one (CLOCK_BOOTTIME) in production.
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// Crypto worker threads (0: one per available core; 1: crypto inline on the thread that
    /// read the batch).
    pub fn with_workers(mut self, workers: usize) -> Self {
        self.workers = workers;
        self
    }

    /// Cap in bytes on the device's packet memory, both directions and every reader (0:
    /// unbounded; never below what the TUN reader and two socket readers need at once). See
    /// [`Options::memory_budget`].
    pub fn with_memory_budget(mut self, bytes: usize) -> Self {
        self.memory_budget = bytes;
        self
    }

    /// How data-path threads are marked under bulk load (see [`crate::sched`]); `None` leaves
    /// them alone.
    pub fn with_scheduling(
        mut self,
        scheduling: Option<Arc<dyn crate::sched::Scheduling>>,
    ) -> Self {
        self.scheduling = scheduling;
        self
    }

    /// Whether a thread yields its CPU after writing a burst of inbound datagrams to the TUN.
    pub fn with_datagram_yield(mut self, on: bool) -> Self {
        self.datagram_yield = on;
        self
    }
}

/// Where log lines go: the `tracing` facade, tagged with a name (wireguard-go's `Logger`).
#[derive(Clone, Debug)]
pub struct Logger {
    /// Prefix of every log line (usually the interface name).
    pub name: String,
}

impl Logger {
    /// A logger tagging lines with `name`.
    pub fn new(name: impl Into<String>) -> Logger {
        Logger { name: name.into() }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum State {
    Down = 0,
    Up = 1,
    Closed = 2,
}

pub(crate) enum Job {
    Encrypt(Arc<Container<Arc<DevKeypair>>>),
    Decrypt(Arc<Container<Arc<DevKeypair>>>),
    Stop,
}

pub(crate) struct HandshakeJob {
    /// The message, exactly (copied out of the receive buffer).
    pub buf: Box<[u8]>,
    pub ep: Endpoint,
}

pub(crate) struct NetState {
    pub port: u16,
    pub fwmark: u32,
    pub open: bool,
}

/// Identity-dependent state, replaced together when the private key changes.
pub(crate) struct IdentityState {
    pub identity: Option<StaticIdentity>,
    pub cookie_checker: Option<CookieChecker>,
}

pub(crate) struct Peers {
    pub by_key: HashMap<PublicKey, Arc<Peer>>,
    /// Creation order, for stable UAPI output.
    pub order: Vec<PublicKey>,
}

/// Everything the device's threads share.
pub(crate) struct DeviceInner {
    pub(crate) name: String,
    pub(crate) tun: Arc<dyn Tun>,
    pub(crate) bind: Arc<dyn Bind>,
    pub(crate) clock: Arc<dyn Clock>,
    state: AtomicU8,
    state_lock: Mutex<()>,
    pub(crate) ipc_lock: Mutex<()>,
    pub(crate) net: Mutex<NetState>,
    /// Serialises closing and opening the bind (wireguard-go's `net` lock).
    bind_lock: Mutex<()>,
    pub(crate) identity: RwLock<IdentityState>,
    pub(crate) peers: RwLock<Peers>,
    pub(crate) allowed_ips: RwLock<AllowedIps<PeerRef>>,
    pub(crate) index: IndexTable,
    crypto_tx: Sender<Job>,
    crypto_rx: Receiver<Job>,
    pub(crate) handshake_tx: Sender<Option<HandshakeJob>>,
    pub(crate) handshake_rx: Receiver<Option<HandshakeJob>>,
    /// Handshake messages queued for a handshake worker or in one (see [`Device::idle`]).
    pub(crate) handshakes_queued: AtomicUsize,
    /// Every packet's memory, both directions, under the one cap.
    pub(crate) pool: Arc<Pool>,
    pub(crate) mtu: AtomicUsize,
    pub(crate) batch_size: usize,
    pub(crate) rate_limiter: Mutex<RateLimiter>,
    pub(crate) under_load_until: AtomicU64,
    /// Whether the device carries bulk traffic, for the data-path threads' scheduling hint.
    pub(crate) bulk: crate::sched::Bulk,
    pub(crate) timers: Arc<TimerWheel>,
    pub(crate) stats: DeviceStats,
    pub(crate) broken_roaming: AtomicBool,
    workers: usize,
    threads: Mutex<Vec<JoinHandle<()>>>,
    /// Receive threads of the current bind generation.
    readers: Mutex<Vec<JoinHandle<()>>>,
    /// Whether the starter accepts new receive functions (false while the bind closes).
    accepting_readers: AtomicBool,
    pub(crate) readers_started: AtomicUsize,
    /// Bytes readers hold while they wait for data: a slab each for receive functions that
    /// cannot wait without one (see `receive_routine`); 0 with the binds of this repository.
    pub(crate) idle_slabs: AtomicUsize,
    closed: (Mutex<bool>, Condvar),
    /// Dropped by `close`: wakes threads that wait on something the device does not own (the
    /// TUN's event channel), so a TUN that never disconnects it cannot hang `close`.
    shutdown_tx: Mutex<Option<Sender<()>>>,
    shutdown_rx: Receiver<()>,
}

/// A WireGuard device (`device.Device`): a TUN, a bind, and the peers between them.
pub struct Device {
    inner: Arc<DeviceInner>,
}

impl Device {
    /// A device on `tun` and `bind`, down, with no configuration. Starts the worker threads.
    pub fn new(tun: Arc<dyn Tun>, bind: Arc<dyn Bind>, logger: Logger) -> Device {
        Self::with_options(tun, bind, logger, Options::default())
    }

    /// [`new`](Self::new) with options.
    pub fn with_options(
        tun: Arc<dyn Tun>,
        bind: Arc<dyn Bind>,
        logger: Logger,
        opts: Options,
    ) -> Device {
        let workers = if opts.workers == 0 {
            std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(1)
        } else {
            opts.workers
        };
        let batch_size = tun.batch_size().max(bind.batch_size()).max(1);
        let (crypto_tx, crypto_rx) = unbounded();
        let (handshake_tx, handshake_rx) = bounded(QUEUE_HANDSHAKE_SIZE);
        let mtu = tun
            .mtu()
            .map(|m| m as usize)
            .unwrap_or(DEFAULT_MTU)
            .min(MAX_CONTENT_SIZE);
        let clock = opts.clock.clone();
        let (shutdown_tx, shutdown_rx) = bounded(0);
        let inner = Arc::new(DeviceInner {
            name: logger.name.clone(),
            tun,
            bind,
            timers: TimerWheel::new(clock.clone()),
            clock,
            state: AtomicU8::new(State::Down as u8),
            state_lock: Mutex::new(()),
            ipc_lock: Mutex::new(()),
            bind_lock: Mutex::new(()),
            net: Mutex::new(NetState {
                port: 0,
                fwmark: 0,
                open: false,
            }),
            identity: RwLock::new(IdentityState {
                identity: None,
                cookie_checker: None,
            }),
            peers: RwLock::new(Peers {
                by_key: HashMap::new(),
                order: Vec::new(),
            }),
            allowed_ips: RwLock::new(AllowedIps::new()),
            index: IndexTable::default(),
            crypto_tx,
            crypto_rx,
            handshake_tx,
            handshake_rx,
            handshakes_queued: AtomicUsize::new(0),
            pool: Pool::new(opts.memory_budget),
            mtu: AtomicUsize::new(mtu),
            batch_size,
            rate_limiter: Mutex::new(RateLimiter::new()),
            under_load_until: AtomicU64::new(0),
            bulk: crate::sched::Bulk::new(opts.scheduling.clone(), opts.datagram_yield),
            stats: DeviceStats::default(),
            broken_roaming: AtomicBool::new(false),
            workers,
            threads: Mutex::new(Vec::new()),
            readers: Mutex::new(Vec::new()),
            accepting_readers: AtomicBool::new(false),
            readers_started: AtomicUsize::new(0),
            idle_slabs: AtomicUsize::new(0),
            closed: (Mutex::new(false), Condvar::new()),
            shutdown_tx: Mutex::new(Some(shutdown_tx)),
            shutdown_rx,
        });
        inner.set_memory_floor();
        inner.start_threads();
        Device { inner }
    }

    /// Brings the device up: opens the bind, starts the peers, sends keepalives to peers with
    /// persistent keepalive. On failure the device stays down.
    pub fn up(&self) -> io::Result<()> {
        self.inner.up()
    }

    /// Takes the device down: closes the bind and stops the peers. Configuration is kept.
    pub fn down(&self) -> io::Result<()> {
        self.inner.down()
    }

    /// Closes the device for good: every thread is joined before this returns.
    pub fn close(&self) {
        self.inner.close()
    }

    /// Blocks until the device is closed.
    pub fn wait(&self) {
        let (m, c) = &self.inner.closed;
        let mut closed = m.lock();
        while !*closed {
            c.wait(&mut closed);
        }
    }

    /// Whether [`close`](Self::close) has run (or the TUN failed and closed the device).
    pub fn is_closed(&self) -> bool {
        self.inner.is_closed()
    }

    /// Whether the device is up.
    pub fn is_up(&self) -> bool {
        self.inner.is_up()
    }

    /// Re-opens the bind (after a port or network change).
    pub fn bind_update(&self) -> io::Result<()> {
        self.inner.bind_update()
    }

    /// Applies a typed configuration change in order, stopping at the first error, which is
    /// returned with its errno ([`IpcError::code`](crate::IpcError::code)); what was applied
    /// before it stays applied (wireguard-go's `IpcSetOperation`).
    pub fn configure(&self, change: &vpn_ipc::Change) -> Result<(), crate::IpcError> {
        crate::uapi::configure(&self.inner, change)
    }

    /// The configuration and per-peer statistics, typed (what `get` dumps).
    pub fn state(&self) -> vpn_ipc::DeviceState {
        crate::uapi::state(&self.inner)
    }

    /// The pipeline counters as the `device` group of the `stats=1` reply.
    pub fn statistics(&self) -> vpn_ipc::Statistics {
        crate::uapi::statistics(&self.inner)
    }

    /// Applies a UAPI `set` body (the lines after `set=1`, up to the blank line): parsed into a
    /// [`vpn_ipc::Change`] first, then [`configure`](Self::configure)d; a bad line is reported
    /// after the lines before it were applied.
    pub fn ipc_set(&self, config: &str) -> Result<(), crate::IpcError> {
        crate::uapi::ipc_set(&self.inner, config)
    }

    /// The UAPI `get` dump (without the `errno=0` trailer): [`state`](Self::state) rendered.
    pub fn ipc_get(&self) -> Result<String, crate::IpcError> {
        Ok(self.state().to_string())
    }

    /// Serves one UAPI connection: `set=1` / `get=1` requests until EOF.
    pub fn ipc_handle<R: io::BufRead, W: io::Write>(&self, r: R, w: W) -> io::Result<()> {
        crate::uapi::handle(&self.inner, r, w)
    }

    /// The device's batch size: the larger of the TUN's and the bind's.
    pub fn batch_size(&self) -> usize {
        self.inner.batch_size
    }

    /// Pipeline statistics.
    pub fn stats(&self) -> Stats {
        self.inner.stats.snapshot()
    }

    /// Whether the timer thread has fired every timer due at the clock's current time (and run
    /// what the peers' sessions decided). Meant for tests on a fake clock: after advancing it,
    /// they wait for this rather than sleep.
    pub fn timers_caught_up(&self) -> bool {
        self.inner.timers.done_through() >= self.inner.now()
    }

    /// Datagrams the socket readers have handled: read, classified and handed over (to a
    /// handshake worker's queue, to decryption, or delivered), not merely read. This is the
    /// `datagrams_received` counter, which a reader adds to once a batch's work is queued, so a
    /// test that sees every datagram sent to this device here and then [`idle`](Self::idle)
    /// knows their effects are done.
    pub fn datagrams_handled(&self) -> u64 {
        self.inner.stats.datagrams_received.load(Ordering::Acquire)
    }

    /// Whether no work is queued or in flight inside the device: no handshake message waits
    /// for a handshake worker or is in one, and no peer has a batch in the crypto workers or
    /// waiting to be delivered in order. Meant for tests, with
    /// [`datagrams_handled`](Self::datagrams_handled) and
    /// [`timers_caught_up`](Self::timers_caught_up): a pair whose counts match and which are
    /// both idle has settled.
    pub fn idle(&self) -> bool {
        self.inner.handshakes_queued.load(Ordering::Acquire) == 0
            && self
                .inner
                .peers
                .read()
                .by_key
                .values()
                .all(|p| p.batches_in_flight() == 0)
    }

    /// Sends a keepalive to every peer whose current keypair is still usable (after a rebind on
    /// mobile, so NAT mappings are refreshed at once).
    pub fn send_keepalives_to_peers_with_current_keypair(&self) {
        self.inner.send_keepalives_to_peers_with_current_keypair()
    }

    /// Stops roaming for peers with a configured endpoint (mobile hosts manage endpoints).
    pub fn disable_some_roaming_for_broken_mobile_semantics(&self) {
        self.inner.broken_roaming.store(true, Ordering::Release);
        for p in self.inner.peers.read().by_key.values() {
            let mut e = p.endpoint.lock();
            if e.ep.is_some() {
                e.disable_roaming = true;
            }
        }
    }

    /// A peer by public key.
    pub fn peer(&self, key: &PublicKey) -> Option<Arc<Peer>> {
        self.inner.peers.read().by_key.get(key).cloned()
    }

    /// The device's packet memory: its cap, what is allocated, the peak, and how often readers
    /// waited for it.
    pub fn memory(&self) -> crate::pool::MemoryUse {
        self.inner.pool.memory_use()
    }

    /// Receive threads started through the [`ReceiveFuncStarter`] (connected sockets) so far.
    pub fn started_readers(&self) -> usize {
        self.inner.readers_started.load(Ordering::Relaxed)
    }

    /// The port the bind listens on (0 while down).
    pub fn listen_port(&self) -> u16 {
        self.inner.net.lock().port
    }
}

impl Drop for Device {
    fn drop(&mut self) {
        self.inner.close();
    }
}

impl DeviceInner {
    pub(crate) fn now(&self) -> Instant {
        self.clock.now()
    }

    fn state(&self) -> State {
        match self.state.load(Ordering::Acquire) {
            0 => State::Down,
            1 => State::Up,
            _ => State::Closed,
        }
    }

    pub(crate) fn is_up(&self) -> bool {
        self.state() == State::Up
    }

    pub(crate) fn is_closed(&self) -> bool {
        self.state() == State::Closed
    }

    /// One worker: crypto runs on the thread that produced the batch (see `submit`).
    fn inline_crypto(&self) -> bool {
        self.workers == 1
    }

    /// Hands a batch to the crypto stage: to the worker threads, or — with a single worker —
    /// runs it on this thread. On one core a hand-off only adds two context switches per batch
    /// (the reader wakes the worker, the worker the next reader), and the ordered queues keep
    /// per-peer order either way.
    pub(crate) fn submit(&self, job: Job) {
        if self.inline_crypto() {
            match job {
                Job::Encrypt(c) => self.encrypt_and_send(c),
                Job::Decrypt(c) => self.decrypt_and_deliver(c),
                Job::Stop => {}
            }
        } else {
            let _ = self.crypto_tx.send(job);
        }
    }

    /// Crypto worker threads: none when batches are processed inline (one worker).
    fn crypto_threads(&self) -> usize {
        if self.inline_crypto() {
            0
        } else {
            self.workers
        }
    }

    pub(crate) fn mtu(&self) -> usize {
        self.mtu.load(Ordering::Relaxed)
    }

    /// Keeps the memory cap at least what the readers need at once to make progress: the TUN
    /// reader's slab (kept while it waits) and two socket readers' (an embedder's budget below
    /// that would stall a direction for good). Set again when the MTU changes.
    fn set_memory_floor(&self) {
        let socket = Layout::for_batch(self.bind.batch_size().max(1), self.mtu());
        self.pool
            .set_floor(self.tun_layout().len() + 2 * socket.len());
    }

    /// The TUN reader's slab at the current MTU: plain slots (the TUN splits super-packets
    /// through its own scratch), no run heads.
    /// Reads the TUN's MTU again (an MTU event, or a packet too big for the slots laid out
    /// for the MTU the device knew: the event may still be on its way).
    pub(crate) fn refresh_mtu(&self) {
        if let Ok(m) = self.tun.mtu() {
            let m = (m as usize).min(MAX_CONTENT_SIZE);
            self.mtu.store(m, Ordering::Relaxed);
            self.set_memory_floor();
        }
    }

    pub(crate) fn tun_layout(&self) -> Layout {
        Layout {
            slots: self.batch_size,
            slot: crate::pool::slot_size(self.mtu()),
            runs: false,
        }
    }

    pub(crate) fn peer_list(&self) -> Vec<Arc<Peer>> {
        self.peers.read().by_key.values().cloned().collect()
    }

    fn start_threads(self: &Arc<Self>) {
        let mut threads = self.threads.lock();
        for i in 0..self.crypto_threads() {
            let d = self.clone();
            threads.push(spawn(&format!("crypto-{i}"), move || d.crypto_worker()));
        }
        for i in 0..self.workers.clamp(1, 2) {
            let d = self.clone();
            threads.push(spawn(&format!("handshake-{i}"), move || {
                d.handshake_worker()
            }));
        }
        let d = self.clone();
        threads.push(spawn("timers", move || {
            let weak = Arc::downgrade(&d);
            let wheel = d.timers.clone();
            drop(d);
            wheel.run(
                |peer, at, now| {
                    if let Some(dev) = weak.upgrade() {
                        peer.on_timer(&dev, at, now);
                    }
                },
                || {
                    if let Some(dev) = weak.upgrade() {
                        let now = dev.now();
                        dev.rate_limiter.lock().gc(now);
                    }
                },
            );
        }));
        let d = self.clone();
        threads.push(spawn("tun-reader", move || d.tun_reader()));
        let d = Arc::downgrade(self);
        let events = self.tun.events();
        let shutdown = self.shutdown_rx.clone();
        threads.push(spawn("tun-events", move || {
            tun_event_reader(d, events, shutdown)
        }));
    }

    fn crypto_worker(&self) {
        while let Ok(job) = self.crypto_rx.recv() {
            match job {
                Job::Encrypt(c) => self.encrypt_and_send(c),
                Job::Decrypt(c) => self.decrypt_and_deliver(c),
                Job::Stop => return,
            }
        }
    }

    // ---- lifecycle ---------------------------------------------------------------------------

    fn up(self: &Arc<Self>) -> io::Result<()> {
        let _g = self.state_lock.lock();
        match self.state() {
            State::Closed => {
                return Err(io::Error::new(io::ErrorKind::NotConnected, "device closed"))
            }
            State::Up => return Ok(()),
            State::Down => {}
        }
        self.state.store(State::Up as u8, Ordering::Release);
        if let Err(e) = self.bind_update() {
            self.state.store(State::Down as u8, Ordering::Release);
            let _ = self.bind_close();
            tracing::error!(device = %self.name, "unable to bring device up: {e}");
            return Err(e);
        }
        let _ipc = self.ipc_lock.lock();
        for p in self.peer_list() {
            p.start();
            if p.persistent_keepalive() > 0 {
                p.send_keepalive();
            }
        }
        tracing::info!(device = %self.name, "interface up");
        Ok(())
    }

    fn down(self: &Arc<Self>) -> io::Result<()> {
        let _g = self.state_lock.lock();
        if self.state() != State::Up {
            return Ok(());
        }
        self.state.store(State::Down as u8, Ordering::Release);
        let res = self.bind_close();
        let _ipc = self.ipc_lock.lock();
        for p in self.peer_list() {
            p.stop();
        }
        tracing::info!(device = %self.name, "interface down");
        res
    }

    pub(crate) fn close(self: &Arc<Self>) {
        {
            let _g = self.state_lock.lock();
            if self.state() == State::Closed {
                return;
            }
            let _ipc = self.ipc_lock.lock();
            self.state.store(State::Closed as u8, Ordering::Release);
            let _ = self.tun.close();
            let _ = self.bind_close();
            let peers: Vec<_> = {
                let mut p = self.peers.write();
                p.order.clear();
                p.by_key.drain().map(|(_, v)| v).collect()
            };
            for p in &peers {
                p.stop();
            }
            self.allowed_ips.write().clear();
        }
        self.timers.stop();
        self.shutdown_tx.lock().take();
        for _ in 0..self.crypto_threads() {
            let _ = self.crypto_tx.send(Job::Stop);
        }
        for _ in 0..self.workers.clamp(1, 2) {
            let _ = self.handshake_tx.send(None);
        }
        let me = std::thread::current().id();
        let threads: Vec<_> = self.threads.lock().drain(..).collect();
        for t in threads {
            if t.thread().id() != me {
                let _ = t.join();
            }
        }
        // Anything still queued holds buffers and peers: drop it.
        while self.crypto_rx.try_recv().is_ok() {}
        while let Ok(job) = self.handshake_rx.try_recv() {
            if job.is_some() {
                self.handshakes_queued.fetch_sub(1, Ordering::Release);
            }
        }
        let (m, c) = &self.closed;
        *m.lock() = true;
        c.notify_all();
        tracing::info!(device = %self.name, "device closed");
    }

    /// Closes the bind and waits for its readers.
    fn bind_close(&self) -> io::Result<()> {
        let _b = self.bind_lock.lock();
        self.bind_close_locked()
    }

    fn bind_close_locked(&self) -> io::Result<()> {
        self.accepting_readers.store(false, Ordering::Release);
        let res = self.bind.close();
        let readers: Vec<_> = self.readers.lock().drain(..).collect();
        for r in readers {
            let _ = r.join();
        }
        self.net.lock().open = false;
        res
    }

    /// Closes and (if up) re-opens the bind on the configured port.
    pub(crate) fn bind_update(self: &Arc<Self>) -> io::Result<()> {
        let _b = self.bind_lock.lock();
        self.bind_close_locked()?;
        if !self.is_up() {
            return Ok(());
        }
        let (port, fwmark) = {
            let n = self.net.lock();
            (n.port, n.fwmark)
        };
        self.accepting_readers.store(true, Ordering::Release);
        self.bind.set_receive_func_starter(Arc::new(Starter {
            dev: Arc::downgrade(self),
        }));
        let (fns, actual) = match self.bind.open(port) {
            Ok(r) => r,
            Err(e) => {
                self.accepting_readers.store(false, Ordering::Release);
                self.net.lock().port = 0;
                return Err(e);
            }
        };
        {
            let mut n = self.net.lock();
            n.port = actual;
            n.open = true;
        }
        if fwmark != 0 {
            if let Err(e) = self.bind.set_mark(fwmark) {
                tracing::error!(device = %self.name, "unable to set fwmark: {e}");
            }
        }
        for p in self.peer_list() {
            p.mark_endpoint_src_for_clearing();
        }
        let batch = self.bind.batch_size();
        for f in fns {
            self.spawn_reader(f, batch);
        }
        tracing::debug!(device = %self.name, port = actual, "bind opened");
        Ok(())
    }

    pub(crate) fn set_fwmark(&self, mark: u32) -> io::Result<()> {
        let mut n = self.net.lock();
        if n.fwmark == mark {
            return Ok(());
        }
        n.fwmark = mark;
        let open = n.open;
        drop(n);
        if open {
            self.bind.set_mark(mark)?;
        }
        for p in self.peer_list() {
            p.mark_endpoint_src_for_clearing();
        }
        Ok(())
    }

    fn spawn_reader(self: &Arc<Self>, f: ReceiveFunc, batch: usize) {
        let d = self.clone();
        let t = spawn("receive", move || d.receive_routine(f, batch));
        let mut readers = self.readers.lock();
        // Connected sockets come and go: forget readers that already ended.
        readers.retain(|r| !r.is_finished());
        readers.push(t);
    }

    fn send_keepalives_to_peers_with_current_keypair(&self) {
        if !self.is_up() {
            return;
        }
        let now = self.now();
        for p in self.peer_list() {
            let ok = p
                .keypairs
                .lock()
                .current
                .as_ref()
                .is_some_and(|k| k.can_receive(now));
            if ok {
                p.send_keepalive();
            }
        }
    }

    // ---- configuration helpers used by UAPI ---------------------------------------------------

    pub(crate) fn set_private_key(self: &Arc<Self>, key: Option<PrivateKey>) {
        let new_identity = key.filter(|k| !k.is_zero()).map(StaticIdentity::new);
        {
            let id = self.identity.read();
            let same = match (&id.identity, &new_identity) {
                (None, None) => true,
                (Some(a), Some(b)) => a.public_key() == b.public_key(),
                _ => false,
            };
            if same {
                return;
            }
        }
        // A peer whose key equals our new public key would be ourselves: remove it.
        if let Some(id) = &new_identity {
            let own = id.public_key();
            if self.peers.read().by_key.contains_key(own) {
                self.remove_peer(own);
            }
        }
        {
            let mut st = self.identity.write();
            st.cookie_checker = new_identity
                .as_ref()
                .map(|id| CookieChecker::new(id.public_key().as_bytes()));
            st.identity = new_identity;
            let peers = self.peer_list();
            for p in peers {
                if let Some(id) = &st.identity {
                    p.handshake.lock().hs.recompute_static_static(id);
                }
                p.expire_current_keypairs();
            }
        }
    }

    pub(crate) fn remove_peer(&self, key: &PublicKey) {
        let peer = {
            let mut peers = self.peers.write();
            let p = peers.by_key.remove(key);
            peers.order.retain(|k| k != key);
            p
        };
        if let Some(p) = peer {
            self.allowed_ips
                .write()
                .remove_by_value(&PeerRef(p.clone()));
            p.stop();
            p.zero_and_flush_all();
        }
    }

    pub(crate) fn remove_all_peers(&self) {
        let peers: Vec<_> = {
            let mut p = self.peers.write();
            p.order.clear();
            p.by_key.drain().map(|(_, v)| v).collect()
        };
        self.allowed_ips.write().clear();
        for p in peers {
            p.stop();
            p.zero_and_flush_all();
        }
    }

    pub(crate) fn is_under_load(&self) -> bool {
        let now = self.now().as_nanos();
        if self.handshake_tx.len() >= QUEUE_HANDSHAKE_SIZE / 8 {
            let until = now + vpn_proto::consts::UNDER_LOAD_AFTER_TIME.as_nanos() as u64;
            self.under_load_until.store(until, Ordering::Relaxed);
            return true;
        }
        self.under_load_until.load(Ordering::Relaxed) > now
    }
}

struct Starter {
    dev: Weak<DeviceInner>,
}

impl ReceiveFuncStarter for Starter {
    fn start(&self, f: ReceiveFunc, buf_size: usize, batch_size: usize) -> bool {
        let Some(dev) = self.dev.upgrade() else {
            return false;
        };
        if !dev.accepting_readers.load(Ordering::Acquire) || dev.is_closed() {
            return false;
        }
        // A reader holds no memory while it waits for data and waits for the pool holding
        // none, so readers cannot starve each other for good: any number is admitted as long
        // as the readers that must wait with a slab in hand (receive functions that cannot
        // wait without one) leave half the cap to the others. `buf_size` is the largest
        // datagram the reader may return: run heads hold it (`pool::Layout`).
        let _ = buf_size;
        let cap = dev.pool.max();
        let idle = dev.idle_slabs.load(Ordering::Acquire);
        let slab = Layout::for_batch(batch_size, dev.mtu()).len();
        if cap != 0 && 2 * (idle + slab) > cap {
            tracing::debug!(device = %dev.name, idle, cap, "packet memory held by idle readers: reader refused");
            return false;
        }
        dev.readers_started.fetch_add(1, Ordering::Relaxed);
        dev.spawn_reader(f, batch_size.max(1));
        true
    }

    /// Transport messages make a pair busy; handshakes and junk do not, so a stranger must
    /// send transport-shaped datagrams to cost us a socket.
    fn counts_toward_pair(&self, datagram: &[u8]) -> bool {
        vpn_proto::messages::classify(datagram) == Ok(vpn_proto::messages::MessageType::Transport)
    }
}

fn tun_event_reader(
    dev: Weak<DeviceInner>,
    events: Receiver<vpn_tun::Event>,
    shutdown: Receiver<()>,
) {
    loop {
        let ev = crossbeam_channel::select! {
            recv(events) -> ev => match ev {
                Ok(ev) => ev,
                Err(_) => return,
            },
            recv(shutdown) -> _ => return,
        };
        let Some(d) = dev.upgrade() else { return };
        if d.is_closed() {
            return;
        }
        match ev {
            vpn_tun::Event::MtuUpdate => d.refresh_mtu(),
            vpn_tun::Event::Up => {
                if let Err(e) = d.up() {
                    tracing::error!(device = %d.name, "up on TUN event failed: {e}");
                }
            }
            vpn_tun::Event::Down => {
                let _ = d.down();
            }
        }
    }
}

pub(crate) fn spawn(name: &str, f: impl FnOnce() + Send + 'static) -> JoinHandle<()> {
    std::thread::Builder::new()
        .name(name.to_string())
        .spawn(f)
        .expect("spawning a device thread")
}

#[cfg(test)]
mod tests {
    use super::Starter;
    use std::sync::Weak;
    use vpn_conn::ReceiveFuncStarter;
    use vpn_proto::messages::{TransportHeader, INITIATION_SIZE, TRANSPORT_MIN_SIZE};

    #[test]
    fn only_transport_messages_count_toward_a_connected_pair() {
        let starter = Starter { dev: Weak::new() };
        let mut transport = vec![0u8; TRANSPORT_MIN_SIZE + 100];
        let hdr = TransportHeader {
            receiver_index: 7,
            counter: 1,
        };
        hdr.write(transport.first_chunk_mut().unwrap());
        assert!(starter.counts_toward_pair(&transport));
        assert!(!starter.counts_toward_pair(&transport[..TRANSPORT_MIN_SIZE - 1]));
        let mut initiation = vec![0u8; INITIATION_SIZE];
        initiation[0] = 1;
        assert!(!starter.counts_toward_pair(&initiation));
        assert!(!starter.counts_toward_pair(&[0xff; 200]));
        assert!(!starter.counts_toward_pair(&[]));
    }
}
