//! A peer: its handshake, keypairs, endpoint, staged packets, ordered queues and counters.

use crate::batch::{Elem, Elems, Ordered};
use crate::keypair::{DevKeypair, Keypairs};
use crate::pool::{PacketBuf, HEADROOM};
use crate::session::{Actions, Initiation, KeyState, Session};
use crate::timers::SessionCell;
use crate::DeviceInner;
use parking_lot::Mutex;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;
use vpn_conn::Endpoint;

/// Bytes of a keepalive's buffer: headroom, no payload, the header and the tag.
const KEEPALIVE_BUF: usize = 64;
use vpn_proto::consts::{QUEUE_STAGED_SIZE, REJECT_AFTER_MESSAGES};
use vpn_proto::cookie::CookieGenerator;
use vpn_proto::keys::PublicKey;
use vpn_proto::noise::Handshake;
use vpn_proto::time::Instant;

/// Handshake state guarded together: the Noise state and the cookie generator (MACs).
pub(crate) struct HandshakeState {
    pub hs: Handshake,
    pub cookie: CookieGenerator,
}

pub(crate) struct EndpointState {
    pub ep: Option<Endpoint>,
    pub clear_src_on_tx: bool,
    pub disable_roaming: bool,
}

/// A WireGuard peer.
pub struct Peer {
    pub(crate) device: Weak<DeviceInner>,
    pub(crate) public_key: PublicKey,
    pub(crate) handshake: Mutex<HandshakeState>,
    pub(crate) keypairs: Mutex<Keypairs>,
    pub(crate) endpoint: Mutex<EndpointState>,
    pub(crate) staged: Mutex<VecDeque<Elems>>,
    pub(crate) outbound: Ordered<Arc<DevKeypair>>,
    pub(crate) inbound: Ordered<Arc<DevKeypair>>,
    /// Containers of this peer alive, either direction: made and not yet dropped, so in the
    /// crypto workers or waiting in `inbound`/`outbound` to be delivered (`Device::idle`).
    pub(crate) batches_in_flight: AtomicUsize,
    pub(crate) running: AtomicBool,
    /// The session rules (timers, rekeying, keepalives) and the peer's entry in the device's
    /// timer wheel. A leaf lock, taken once per batch.
    pub(crate) session: Mutex<SessionCell>,
    pub(crate) rx_bytes: AtomicU64,
    pub(crate) tx_bytes: AtomicU64,
    /// Wall-clock nanoseconds since the epoch of the last completed handshake (0: never).
    pub(crate) last_handshake_nanos: AtomicU64,
}

impl Peer {
    pub(crate) fn new(dev: &Arc<DeviceInner>, public_key: PublicKey, hs: Handshake) -> Arc<Peer> {
        Arc::new(Peer {
            device: Arc::downgrade(dev),
            public_key,
            handshake: Mutex::new(HandshakeState {
                hs,
                cookie: CookieGenerator::new(public_key.as_bytes()),
            }),
            keypairs: Mutex::new(Keypairs::default()),
            endpoint: Mutex::new(EndpointState {
                ep: None,
                clear_src_on_tx: false,
                disable_roaming: false,
            }),
            staged: Mutex::new(VecDeque::new()),
            outbound: Ordered::default(),
            inbound: Ordered::default(),
            batches_in_flight: AtomicUsize::new(0),
            running: AtomicBool::new(false),
            session: Mutex::new(SessionCell::new(rand::random())),
            rx_bytes: AtomicU64::new(0),
            tx_bytes: AtomicU64::new(0),
            last_handshake_nanos: AtomicU64::new(0),
        })
    }

    /// Containers of this peer made and not yet dropped (see [`crate::Device::idle`]).
    pub(crate) fn batches_in_flight(&self) -> usize {
        self.batches_in_flight.load(Ordering::Acquire)
    }

    /// The peer's public key.
    pub fn public_key(&self) -> &PublicKey {
        &self.public_key
    }

    /// Bytes received from and sent to this peer (the UAPI `rx_bytes` / `tx_bytes`).
    pub fn rx_tx_bytes(&self) -> (u64, u64) {
        (
            self.rx_bytes.load(Ordering::Relaxed),
            self.tx_bytes.load(Ordering::Relaxed),
        )
    }

    /// The peer's current endpoint.
    pub fn endpoint(&self) -> Option<Endpoint> {
        self.endpoint.lock().ep
    }

    /// How many transport keypairs (previous, current, next) the peer holds.
    pub fn keypair_count(&self) -> usize {
        let k = self.keypairs.lock();
        [&k.previous, &k.current, &k.next]
            .iter()
            .filter(|x| x.is_some())
            .count()
    }

    /// Wall-clock time since the epoch of the last completed handshake.
    pub fn last_handshake(&self) -> Option<Duration> {
        match self.last_handshake_nanos.load(Ordering::Relaxed) {
            0 => None,
            n => Some(Duration::from_nanos(n)),
        }
    }

    pub(crate) fn is_running(&self) -> bool {
        self.running.load(Ordering::Acquire)
    }

    fn dev(&self) -> Option<Arc<DeviceInner>> {
        self.device.upgrade()
    }

    // ---- lifecycle -------------------------------------------------------------------------

    pub(crate) fn start(self: &Arc<Self>) {
        let Some(dev) = self.dev() else { return };
        if dev.is_closed() || self.running.swap(true, Ordering::AcqRel) {
            return;
        }
        self.session.lock().session.start();
        self.outbound.clear();
        self.inbound.clear();
    }

    pub(crate) fn stop(self: &Arc<Self>) {
        if !self.running.swap(false, Ordering::AcqRel) {
            return;
        }
        self.session.lock().session.stop();
        self.outbound.clear();
        self.inbound.clear();
        self.zero_and_flush_all();
    }

    /// Deletes every keypair and the handshake, and drops staged packets.
    pub(crate) fn zero_and_flush_all(&self) {
        let gone = self.keypairs.lock().clear();
        if let Some(dev) = self.dev() {
            for kp in &gone {
                dev.index.delete(kp.kp.local_index);
            }
            let mut hs = self.handshake.lock();
            if let Some(i) = hs.hs.local_index() {
                dev.index.delete(i);
            }
            hs.hs.clear();
        }
        self.staged.lock().clear();
    }

    /// Makes the current and next keypairs unusable for sending (private key changed).
    pub(crate) fn expire_current_keypairs(&self) {
        {
            let mut hs = self.handshake.lock();
            if let Some(dev) = self.dev() {
                if let Some(i) = hs.hs.local_index() {
                    dev.index.delete(i);
                }
            }
            hs.hs.clear();
        }
        self.session.lock().session.allow_initiation_now();
        let kps = self.keypairs.lock();
        for kp in [&kps.current, &kps.next].into_iter().flatten() {
            kp.kp.expire_sending();
        }
    }

    // ---- endpoint ----------------------------------------------------------------------------

    /// Roaming: the peer is where its last authenticated packet came from.
    pub(crate) fn set_endpoint_from_packet(&self, ep: &Endpoint) {
        let mut e = self.endpoint.lock();
        if e.disable_roaming {
            return;
        }
        e.clear_src_on_tx = false;
        e.ep = Some(*ep);
    }

    pub(crate) fn mark_endpoint_src_for_clearing(&self) {
        let mut e = self.endpoint.lock();
        if e.ep.is_some() {
            e.clear_src_on_tx = true;
        }
    }

    /// Sends datagrams to the peer's endpoint and counts the bytes on success.
    pub(crate) fn send_buffers(&self, dev: &DeviceInner, bufs: &[&[u8]]) -> std::io::Result<()> {
        let ep = {
            let mut e = self.endpoint.lock();
            if e.clear_src_on_tx {
                if let Some(ep) = e.ep.as_mut() {
                    ep.clear_src();
                }
                e.clear_src_on_tx = false;
            }
            e.ep
        };
        let Some(ep) = ep else {
            return Err(std::io::Error::new(
                std::io::ErrorKind::NotConnected,
                "peer has no endpoint",
            ));
        };
        let res = dev.bind.send(bufs, &ep);
        let res = match res {
            Err(e) => match vpn_conn::ErrUdpGsoDisabled::retry_outcome(&e) {
                Some(None) => {
                    tracing::debug!(device = %dev.name, "{e}");
                    Ok(())
                }
                Some(Some(_)) | None => Err(e),
            },
            ok => ok,
        };
        if res.is_ok() {
            let n: usize = bufs.iter().map(|b| b.len()).sum();
            self.tx_bytes.fetch_add(n as u64, Ordering::Relaxed);
            dev.stats.send_calls.fetch_add(1, Ordering::Relaxed);
            dev.stats
                .datagrams_sent
                .fetch_add(bufs.len() as u64, Ordering::Relaxed);
        }
        res
    }

    // ---- staging and sending -------------------------------------------------------------------

    /// Queues a batch behind any already waiting for a keypair, evicting the oldest batch when
    /// the staged queue is full.
    pub(crate) fn stage(&self, elems: Elems, max_packets: usize) {
        let mut staged = self.staged.lock();
        staged.push_back(elems);
        let mut total: usize = staged.iter().map(Elems::len).sum();
        while staged.len() > QUEUE_STAGED_SIZE || (total > max_packets && staged.len() > 1) {
            if let Some(old) = staged.pop_front() {
                total -= old.len();
            }
        }
    }

    /// The current keypair if the device is up, this peer runs and the keypair may still send.
    fn sending_keypair(&self, dev: &DeviceInner) -> Option<Arc<DevKeypair>> {
        if !dev.is_up() || !self.is_running() {
            return None;
        }
        let now = dev.now();
        self.keypairs
            .lock()
            .current
            .clone()
            .filter(|k| k.can_send(now))
    }

    /// The keypair and counter for one packet sent outside the staged queue (see
    /// `DeviceInner::send_lone`, which holds the ordered queue's drainer claim): the device is
    /// up, nothing is staged and the current keypair may send. The counter is reserved under
    /// the staged lock, so every batch queued later gets higher ones.
    pub(crate) fn lone_send_slot(&self, dev: &DeviceInner) -> Option<(Arc<DevKeypair>, u64)> {
        let kp = self.sending_keypair(dev)?;
        let staged = self.staged.lock();
        if !staged.is_empty() {
            return None;
        }
        let counter = kp.kp.reserve_nonces(1);
        drop(staged);
        // At the limit: the batch path re-stages the packet and starts a handshake.
        (counter < REJECT_AFTER_MESSAGES).then_some((kp, counter))
    }

    /// Sends what is staged if a usable keypair exists; otherwise starts a handshake and leaves
    /// the packets staged (`docs/protocol.md`, "Sending").
    pub(crate) fn send_staged(self: &Arc<Self>) {
        let Some(dev) = self.dev() else { return };
        if !dev.is_up() || !self.is_running() {
            return;
        }
        let Some(kp) = self.sending_keypair(&dev) else {
            if self.compact_staged(&dev) {
                self.want_keys(&dev);
            }
            return;
        };
        let mut need_handshake = false;
        // Queue order (= nonce order) is fixed under the staged lock; the crypto work is handed
        // over after it is released, since it may run inline on this thread (one worker).
        let mut ready = Vec::new();
        let mut staged = self.staged.lock();
        while let Some(mut batch) = staged.pop_front() {
            let n = batch.len() as u64;
            let first = kp.kp.reserve_nonces(n);
            let mut overflow = None;
            for (i, e) in batch.v.iter_mut().enumerate() {
                e.counter = first.saturating_add(i as u64);
            }
            if first.saturating_add(n) > REJECT_AFTER_MESSAGES {
                // Counters past the limit may never be used: re-stage those packets.
                let keep = REJECT_AFTER_MESSAGES.saturating_sub(first).min(n) as usize;
                let mut rest = Elems::new(&dev.pool, batch.len() - keep);
                rest.v.extend(batch.v.drain(keep..));
                overflow = Some(rest);
                need_handshake = true;
            }
            if !batch.is_empty() {
                let c = Arc::new(crate::batch::Container::new(
                    self.clone(),
                    vec![kp.clone()],
                    batch,
                ));
                self.outbound.push(c.clone());
                ready.push(c);
            }
            if let Some(rest) = overflow {
                staged.push_front(rest);
                break;
            }
        }
        drop(staged);
        for c in ready {
            dev.submit(crate::Job::Encrypt(c));
        }
        if need_handshake {
            self.want_keys(&dev);
        }
    }

    /// Copies staged packets still in their slabs into buffers of their own (charged to the
    /// pool; dropped if it is full), so that packets waiting for a handshake pin no slab and
    /// the readers' slabs keep coming back. Returns whether anything is staged.
    fn compact_staged(&self, dev: &DeviceInner) -> bool {
        let mut staged = self.staged.lock();
        for batch in staged.iter_mut() {
            batch.v.retain_mut(|e| {
                if !e.buf.in_slab() {
                    return true;
                }
                // Room to seal in place: headroom, the packet, padding and the tag.
                let room = (HEADROOM + e.len + 32).next_multiple_of(16);
                match e.buf.compact(HEADROOM + e.len, room, &dev.pool) {
                    Some(b) => {
                        e.buf = b;
                        true
                    }
                    None => false,
                }
            });
        }
        staged.retain(|b| !b.is_empty());
        !staged.is_empty()
    }

    /// Sends a keepalive (an empty transport message), which also flushes staged packets.
    pub(crate) fn send_keepalive(self: &Arc<Self>) {
        let Some(dev) = self.dev() else { return };
        if !self.is_running() {
            return;
        }
        {
            // A small buffer of its own: a keepalive never waits for the pool.
            let mut e = Elems::new(&dev.pool, 1);
            e.v.push(Elem::new(PacketBuf::owned(KEEPALIVE_BUF), 0));
            let mut staged = self.staged.lock();
            if staged.is_empty() {
                staged.push_back(e);
            }
        }
        self.send_staged();
    }

    // ---- the session -------------------------------------------------------------------------

    /// Runs `event` on the session, then makes sure the timer wheel looks at the session by its
    /// next deadline.
    pub(crate) fn session_event<R>(
        self: &Arc<Self>,
        dev: &DeviceInner,
        event: impl FnOnce(&mut Session) -> R,
    ) -> R {
        let mut cell = self.session.lock();
        let r = event(&mut cell.session);
        let next = cell.session.next_deadline();
        dev.timers.schedule(self, &mut cell.queued, next);
        r
    }

    /// Carries out what the session decided, in the order of the fields of [`Actions`].
    pub(crate) fn execute(self: &Arc<Self>, dev: &DeviceInner, a: Actions) {
        if a.is_empty() {
            return;
        }
        if a.clear_endpoint_src {
            self.mark_endpoint_src_for_clearing();
        }
        if a.drop_staged {
            tracing::debug!(device = %dev.name, peer = %self.public_key, "handshake did not complete after 20 attempts, giving up");
            self.staged.lock().clear();
        }
        if a.zero_keys {
            self.zero_and_flush_all();
        }
        if let Some(kind) = a.initiate {
            if kind == Initiation::Retry {
                tracing::debug!(device = %dev.name, peer = %self.public_key, "retrying handshake");
            }
            dev.send_handshake_initiation(self);
        }
        if a.send_keepalive {
            self.send_keepalive();
        }
    }

    /// Packets wait and no keypair can send them: start a handshake unless one went out less
    /// than `REKEY_TIMEOUT` ago.
    pub(crate) fn want_keys(self: &Arc<Self>, dev: &DeviceInner) {
        let now = dev.now();
        let a = self.session_event(dev, |s| s.want_keys(now));
        self.execute(dev, a);
    }

    /// What the session needs to know of the current keypair.
    fn current_key_state(&self) -> Option<KeyState> {
        let kps = self.keypairs.lock();
        kps.current.as_ref().map(|k| KeyState {
            created: k.kp.created,
            is_initiator: k.kp.is_initiator,
            next_counter: k.kp.send_nonce(),
        })
    }

    /// A batch of sealed transport messages was handed to the network (`ok`: successfully);
    /// `data`: one of them carried a payload. Runs the send-side timers and rekey triggers.
    pub(crate) fn batch_sent(self: &Arc<Self>, dev: &DeviceInner, data: bool, ok: bool) {
        let key = if ok { self.current_key_state() } else { None };
        let now = dev.now();
        let a = self.session_event(dev, |s| s.batch_sent(now, data, ok, key));
        self.execute(dev, a);
    }

    /// Authenticated transport messages of this peer were opened; `data`: one of them carried a
    /// payload. Runs the receive-side timers and the last-minute rekey.
    pub(crate) fn batch_received(self: &Arc<Self>, dev: &DeviceInner, data: bool) {
        let key = self.current_key_state();
        let now = dev.now();
        let a = self.session_event(dev, |s| s.batch_received(now, data, key));
        self.execute(dev, a);
    }

    /// The initiator's first packet under our responder keypair confirmed it.
    pub(crate) fn timers_handshake_complete(self: &Arc<Self>, dev: &DeviceInner) {
        self.session_event(dev, Session::keys_confirmed);
        self.record_handshake_time(dev);
    }

    /// Records the wall-clock time of a completed handshake (the UAPI `last_handshake_time`).
    pub(crate) fn record_handshake_time(&self, dev: &DeviceInner) {
        let wall = u64::try_from(dev.clock.wall().as_nanos()).unwrap_or(u64::MAX);
        self.last_handshake_nanos
            .store(wall.max(1), Ordering::Relaxed);
    }

    /// The persistent keepalive interval in seconds (0: off).
    pub(crate) fn persistent_keepalive(&self) -> u16 {
        self.session.lock().session.persistent_keepalive()
    }

    /// Sets the persistent keepalive interval and returns the previous one.
    pub(crate) fn set_persistent_keepalive(&self, secs: u16) -> u16 {
        let mut cell = self.session.lock();
        let old = cell.session.persistent_keepalive();
        cell.session.set_persistent_keepalive(secs);
        old
    }

    /// The wheel's entry for this peer came due at `at` (`now` on the clock): fires the
    /// session's due timers, unless a newer entry superseded this one.
    pub(crate) fn on_timer(self: &Arc<Self>, dev: &DeviceInner, at: Instant, now: Instant) {
        let a = {
            let mut cell = self.session.lock();
            if cell.queued != Some(at) {
                return;
            }
            cell.queued = None;
            let a = cell.session.on_timeout(now);
            let next = cell.session.next_deadline();
            dev.timers.schedule(self, &mut cell.queued, next);
            a
        };
        self.execute(dev, a);
    }
}

/// Identity for allowed-IPs values: two handles are equal when they are the same peer.
#[derive(Clone)]
pub(crate) struct PeerRef(pub Arc<Peer>);

impl PartialEq for PeerRef {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for PeerRef {}

/// By identity, as `eq`: the allowed-IPs table finds a peer's prefixes by it.
impl std::hash::Hash for PeerRef {
    fn hash<H: std::hash::Hasher>(&self, h: &mut H) {
        Arc::as_ptr(&self.0).hash(h);
    }
}
