//! A peer: its handshake, keypairs, endpoint, staged packets, ordered queues and counters.

use crate::batch::{Elem, Elems, Ordered};
use crate::keypair::{DevKeypair, Keypairs};
use crate::pool::{PacketBuf, HEADROOM};
use crate::timers::{PeerTimers, TimerKind};
use crate::DeviceInner;
use parking_lot::Mutex;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;
use vpn_conn::Endpoint;

/// Bytes of a keepalive's buffer: headroom, no payload, the header and the tag.
const KEEPALIVE_BUF: usize = 64;
use vpn_proto::consts::{
    KEEPALIVE_TIMEOUT, QUEUE_STAGED_SIZE, REJECT_AFTER_MESSAGES, REJECT_AFTER_TIME,
    REKEY_AFTER_MESSAGES, REKEY_AFTER_TIME, REKEY_TIMEOUT, REKEY_TIMEOUT_JITTER_MAX,
};
use vpn_proto::cookie::CookieGenerator;
use vpn_proto::keys::PublicKey;
use vpn_proto::noise::Handshake;
use vpn_proto::time::Instant;

/// Handshake state guarded together: the Noise state, the cookie generator (MACs), and when we
/// last sent a handshake message.
pub(crate) struct HandshakeState {
    pub hs: Handshake,
    pub cookie: CookieGenerator,
    pub last_sent: Option<Instant>,
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
    pub(crate) running: AtomicBool,
    pub(crate) timers: PeerTimers,
    pub(crate) rx_bytes: AtomicU64,
    pub(crate) tx_bytes: AtomicU64,
    /// Wall-clock nanoseconds since the epoch of the last completed handshake (0: never).
    pub(crate) last_handshake_nanos: AtomicU64,
    pub(crate) persistent_keepalive: AtomicU32,
}

impl Peer {
    pub(crate) fn new(dev: &Arc<DeviceInner>, public_key: PublicKey, hs: Handshake) -> Arc<Peer> {
        Arc::new(Peer {
            device: Arc::downgrade(dev),
            public_key,
            handshake: Mutex::new(HandshakeState {
                hs,
                cookie: CookieGenerator::new(public_key.as_bytes()),
                last_sent: None,
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
            running: AtomicBool::new(false),
            timers: PeerTimers::default(),
            rx_bytes: AtomicU64::new(0),
            tx_bytes: AtomicU64::new(0),
            last_handshake_nanos: AtomicU64::new(0),
            persistent_keepalive: AtomicU32::new(0),
        })
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
        self.handshake.lock().last_sent = None; // a handshake may start at once
        self.timers.del_all();
        self.timers.handshake_attempts.store(0, Ordering::Relaxed);
        self.timers
            .need_another_keepalive
            .store(false, Ordering::Relaxed);
        self.timers
            .sent_last_minute_handshake
            .store(false, Ordering::Relaxed);
        self.timers.active.store(true, Ordering::Release);
        self.outbound.clear();
        self.inbound.clear();
    }

    pub(crate) fn stop(self: &Arc<Self>) {
        if !self.running.swap(false, Ordering::AcqRel) {
            return;
        }
        self.timers.active.store(false, Ordering::Release);
        self.timers.del_all();
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
            hs.last_sent = None;
        }
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
    /// the packets staged (§2.4 step 4).
    pub(crate) fn send_staged(self: &Arc<Self>) {
        let Some(dev) = self.dev() else { return };
        if !dev.is_up() || !self.is_running() {
            return;
        }
        let Some(kp) = self.sending_keypair(&dev) else {
            if self.compact_staged(&dev) {
                dev.send_handshake_initiation(self, false);
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
            dev.send_handshake_initiation(self, false);
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

    /// After a successful send batch: rekey when the keypair is worn out or old (initiator).
    pub(crate) fn keep_key_fresh_sending(self: &Arc<Self>, dev: &DeviceInner) {
        let kp = self.keypairs.lock().current.clone();
        let Some(kp) = kp else { return };
        let now = dev.now();
        if kp.kp.send_nonce() > REKEY_AFTER_MESSAGES
            || (kp.kp.is_initiator
                && now.saturating_duration_since(kp.kp.created) > REKEY_AFTER_TIME)
        {
            dev.send_handshake_initiation(self, false);
        }
    }

    /// After receiving data: the initiator rekeys once shortly before the keypair expires.
    pub(crate) fn keep_key_fresh_receiving(self: &Arc<Self>, dev: &DeviceInner) {
        if self
            .timers
            .sent_last_minute_handshake
            .load(Ordering::Relaxed)
        {
            return;
        }
        let kp = self.keypairs.lock().current.clone();
        let Some(kp) = kp else { return };
        let limit = REJECT_AFTER_TIME - KEEPALIVE_TIMEOUT - REKEY_TIMEOUT;
        if kp.kp.is_initiator && dev.now().saturating_duration_since(kp.kp.created) > limit {
            self.timers
                .sent_last_minute_handshake
                .store(true, Ordering::Relaxed);
            dev.send_handshake_initiation(self, false);
        }
    }

    // ---- timer hooks (§2.11) -------------------------------------------------------------------

    pub(crate) fn timers_handshake_initiated(self: &Arc<Self>, dev: &DeviceInner) {
        dev.timers.arm(
            self,
            TimerKind::RetransmitHandshake,
            REKEY_TIMEOUT + jitter(),
        );
    }

    pub(crate) fn timers_data_sent(self: &Arc<Self>, dev: &DeviceInner) {
        if !self.timers.is_pending(TimerKind::NewHandshake) {
            dev.timers.arm(
                self,
                TimerKind::NewHandshake,
                KEEPALIVE_TIMEOUT + REKEY_TIMEOUT + jitter(),
            );
        }
    }

    pub(crate) fn timers_data_received(self: &Arc<Self>, dev: &DeviceInner) {
        if !self.timers.is_pending(TimerKind::SendKeepalive) {
            dev.timers
                .arm(self, TimerKind::SendKeepalive, KEEPALIVE_TIMEOUT);
        } else {
            self.timers
                .need_another_keepalive
                .store(true, Ordering::Relaxed);
        }
    }

    pub(crate) fn timers_any_authenticated_packet_sent(&self) {
        self.timers.del(TimerKind::SendKeepalive);
    }

    pub(crate) fn timers_any_authenticated_packet_received(&self) {
        self.timers.del(TimerKind::NewHandshake);
    }

    pub(crate) fn timers_handshake_complete(&self, dev: &DeviceInner) {
        self.timers.del(TimerKind::RetransmitHandshake);
        self.timers.handshake_attempts.store(0, Ordering::Relaxed);
        self.timers
            .sent_last_minute_handshake
            .store(false, Ordering::Relaxed);
        let wall = u64::try_from(dev.clock.wall().as_nanos()).unwrap_or(u64::MAX);
        self.last_handshake_nanos
            .store(wall.max(1), Ordering::Relaxed);
    }

    pub(crate) fn timers_session_derived(self: &Arc<Self>, dev: &DeviceInner) {
        dev.timers
            .arm(self, TimerKind::ZeroKeyMaterial, REJECT_AFTER_TIME * 3);
    }

    pub(crate) fn timers_any_authenticated_packet_traversal(self: &Arc<Self>, dev: &DeviceInner) {
        let pka = self.persistent_keepalive.load(Ordering::Relaxed);
        if pka > 0 {
            dev.timers.arm(
                self,
                TimerKind::PersistentKeepalive,
                Duration::from_secs(pka.into()),
            );
        }
    }

    /// A timer came due.
    pub(crate) fn on_timer(self: &Arc<Self>, dev: &DeviceInner, k: TimerKind) {
        match k {
            TimerKind::RetransmitHandshake => {
                let attempts = self.timers.handshake_attempts.load(Ordering::Relaxed);
                if attempts > u64::from(vpn_proto::consts::MAX_TIMER_HANDSHAKES) {
                    tracing::debug!(device = %dev.name, peer = %self.public_key, "handshake did not complete after {} attempts, giving up", attempts + 2);
                    self.timers.del(TimerKind::SendKeepalive);
                    self.staged.lock().clear();
                    if !self.timers.is_pending(TimerKind::ZeroKeyMaterial) {
                        dev.timers
                            .arm(self, TimerKind::ZeroKeyMaterial, REJECT_AFTER_TIME * 3);
                    }
                } else {
                    self.timers
                        .handshake_attempts
                        .fetch_add(1, Ordering::Relaxed);
                    self.mark_endpoint_src_for_clearing();
                    dev.send_handshake_initiation(self, true);
                }
            }
            TimerKind::SendKeepalive => {
                self.send_keepalive();
                if self
                    .timers
                    .need_another_keepalive
                    .swap(false, Ordering::Relaxed)
                {
                    dev.timers
                        .arm(self, TimerKind::SendKeepalive, KEEPALIVE_TIMEOUT);
                }
            }
            TimerKind::NewHandshake => {
                self.mark_endpoint_src_for_clearing();
                dev.send_handshake_initiation(self, false);
            }
            TimerKind::ZeroKeyMaterial => self.zero_and_flush_all(),
            TimerKind::PersistentKeepalive => {
                if self.persistent_keepalive.load(Ordering::Relaxed) > 0 {
                    self.send_keepalive();
                }
            }
        }
    }
}

fn jitter() -> Duration {
    use rand::Rng;
    let max = REKEY_TIMEOUT_JITTER_MAX.as_millis() as u64;
    Duration::from_millis(rand::thread_rng().gen_range(0..max))
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
