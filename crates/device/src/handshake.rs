//! Handshake workers and the messages we send: initiation, response, cookie reply
//! (`docs/protocol.md`, "Handshakes, cookies and load").

use crate::device::HandshakeJob;
use crate::index::IndexEntry;
use crate::keypair::DevKeypair;
use crate::peer::Peer;
use crate::DeviceInner;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use vpn_proto::messages::MessageType;
use vpn_proto::noise::{decrypt_initiation, SessionKeys};
use vpn_proto::tai64n::Tai64N;
use vpn_proto::transport::Keypair;

impl DeviceInner {
    pub(crate) fn handshake_worker(self: &Arc<Self>) {
        while let Ok(Some(job)) = self.handshake_rx.recv() {
            self.handle_handshake(job);
            self.handshakes_queued.fetch_sub(1, Ordering::Release);
        }
    }

    fn handle_handshake(self: &Arc<Self>, job: HandshakeJob) {
        let msg = &job.buf[..];
        let Ok(ty) = vpn_proto::messages::classify(msg) else {
            self.stats.drop_malformed.fetch_add(1, Ordering::Relaxed);
            return;
        };
        let now = self.now();
        if ty == MessageType::CookieReply {
            let Ok(reply) = vpn_proto::messages::CookieReply::parse(msg) else {
                return;
            };
            let Some(peer) = self
                .index
                .get(reply.receiver_index())
                .and_then(|e| e.peer())
            else {
                return;
            };
            if !peer.is_running() {
                return;
            }
            match peer.handshake.lock().cookie.consume_reply(msg, now) {
                Ok(()) => {
                    self.stats
                        .cookie_replies_consumed
                        .fetch_add(1, Ordering::Relaxed);
                }
                Err(e) => {
                    self.refused();
                    tracing::debug!(device = %self.name, "could not decrypt cookie reply: {e}");
                }
            }
            return;
        }
        if !matches!(ty, MessageType::Initiation | MessageType::Response) {
            return;
        }
        // MAC1 always; under load MAC2 (or a cookie reply) and the per-source rate limit.
        {
            let id = self.identity.read();
            let Some(checker) = id.cookie_checker.as_ref() else {
                return;
            };
            if !checker.check_mac1(msg) {
                self.stats.drop_bad_mac.fetch_add(1, Ordering::Relaxed);
                return;
            }
        }
        if self.is_under_load() {
            let (src, n) = job.ep.dst_to_bytes();
            let src = &src[..n];
            let ok = self
                .identity
                .read()
                .cookie_checker
                .as_ref()
                .is_some_and(|c| c.check_mac2(msg, src, now));
            if !ok {
                self.send_cookie_reply(msg, &job, src);
                return;
            }
            if !self.rate_limiter.lock().allow(job.ep.dst_ip(), now) {
                self.stats.drop_rate_limited.fetch_add(1, Ordering::Relaxed);
                return;
            }
        }
        match ty {
            MessageType::Initiation => self.handle_initiation(msg, &job),
            MessageType::Response => self.handle_response(msg, &job),
            _ => {}
        }
    }

    /// Counts a handshake message that passed MAC1 and was refused after.
    fn refused(&self) {
        self.stats
            .drop_handshake_refused
            .fetch_add(1, Ordering::Relaxed);
    }

    fn send_cookie_reply(&self, msg: &[u8], job: &HandshakeJob, src: &[u8]) {
        let Ok(sender) = vpn_proto::messages::sender_index(msg) else {
            return;
        };
        let now = self.now();
        let reply = {
            let mut id = self.identity.write();
            let Some(c) = id.cookie_checker.as_mut() else {
                return;
            };
            c.create_reply(msg, sender, src, now, &mut rand::thread_rng())
        };
        match reply {
            Ok(reply) => {
                self.stats
                    .cookie_replies_sent
                    .fetch_add(1, Ordering::Relaxed);
                if let Err(e) = self.bind.send(&[&reply], &job.ep) {
                    tracing::debug!(device = %self.name, "failed to send cookie reply: {e}");
                }
            }
            Err(e) => tracing::debug!(device = %self.name, "failed to create cookie reply: {e}"),
        }
    }

    fn handle_initiation(self: &Arc<Self>, msg: &[u8], job: &HandshakeJob) {
        let now = self.now();
        let peer = {
            let id = self.identity.read();
            let Some(identity) = id.identity.as_ref() else {
                return;
            };
            let cand = match decrypt_initiation(identity, msg) {
                Ok(c) => c,
                Err(e) => {
                    self.refused();
                    tracing::debug!(device = %self.name, "invalid handshake initiation from {}: {e}", job.ep);
                    return;
                }
            };
            let Some(peer) = self.peers.read().by_key.get(cand.remote_static()).cloned() else {
                self.refused();
                return;
            };
            if !peer.is_running() {
                return;
            }
            if let Err(e) = cand.accept(&mut peer.handshake.lock().hs, now) {
                self.refused();
                tracing::debug!(device = %self.name, peer = %peer.public_key, "rejected handshake initiation: {e}");
                return;
            }
            peer
        };
        peer.set_endpoint_from_packet(&job.ep);
        peer.rx_bytes.fetch_add(msg.len() as u64, Ordering::Relaxed);
        peer.session_event(self, |s| s.initiation_received(now));
        self.send_handshake_response(&peer);
    }

    fn handle_response(self: &Arc<Self>, msg: &[u8], job: &HandshakeJob) {
        let Ok(resp) = vpn_proto::messages::Response::parse(msg) else {
            return;
        };
        let Some(IndexEntry::Handshake(peer)) = self.index.get(resp.receiver_index()) else {
            self.refused();
            return;
        };
        if !peer.is_running() {
            return;
        }
        let keys = {
            let id = self.identity.read();
            let Some(identity) = id.identity.as_ref() else {
                return;
            };
            let mut hs = peer.handshake.lock();
            if let Err(e) = hs.hs.consume_response(identity, msg) {
                self.refused();
                tracing::debug!(device = %self.name, peer = %peer.public_key, "invalid handshake response: {e}");
                return;
            }
            match hs.hs.derive_keys() {
                Ok(k) => k,
                Err(e) => {
                    tracing::debug!(device = %self.name, "failed to derive keypair: {e}");
                    return;
                }
            }
        };
        peer.set_endpoint_from_packet(&job.ep);
        peer.rx_bytes.fetch_add(msg.len() as u64, Ordering::Relaxed);
        self.install_keypair(&peer, &keys);
        let now = self.now();
        // Key confirmation for the responder: a keepalive (which flushes staged packets).
        let actions = peer.session_event(self, |s| s.response_received(now));
        peer.record_handshake_time(self);
        peer.execute(self, actions);
    }

    fn install_keypair(&self, peer: &Arc<Peer>, keys: &SessionKeys) -> Arc<DevKeypair> {
        let kp = DevKeypair::new(
            Keypair::new(
                &keys.send,
                &keys.recv,
                keys.local_index,
                keys.remote_index,
                keys.is_initiator,
                self.now(),
            ),
            peer,
        );
        self.index.swap_for_keypair(keys.local_index, kp.clone());
        let gone = peer.keypairs.lock().install(kp.clone());
        for g in gone {
            self.index.delete(g.kp.local_index);
        }
        kp
    }

    /// Creates and sends a handshake initiation. Only the peer's session decides when (through
    /// `Peer::execute`); it has applied the rate limit already.
    pub(crate) fn send_handshake_initiation(&self, peer: &Arc<Peer>) {
        let now = self.now();
        let msg = {
            // Lock order: identity before the peer's handshake (see device.rs).
            let id = self.identity.read();
            let Some(identity) = id.identity.as_ref() else {
                return;
            };
            let mut hs = peer.handshake.lock();
            if !hs.hs.can_handshake(identity) {
                return;
            }
            if let Some(old) = hs.hs.local_index() {
                self.index.delete(old);
            }
            let idx = self.index.new_index(peer);
            let ts = Tai64N::from_unix_duration(self.clock.wall());
            let mut msg = match hs
                .hs
                .create_initiation(identity, idx, ts, &mut rand::thread_rng())
            {
                Ok(m) => m,
                Err(e) => {
                    self.index.delete(idx);
                    tracing::debug!(device = %self.name, "failed to create initiation: {e}");
                    return;
                }
            };
            hs.cookie.add_macs(&mut msg, now);
            msg
        };
        tracing::debug!(device = %self.name, peer = %peer.public_key, "sending handshake initiation");
        self.stats.handshakes_sent.fetch_add(1, Ordering::Relaxed);
        // Before the send: the response may come back (and complete the handshake) before this
        // thread runs again, and a retry armed after that would fire on a finished handshake.
        // A failed send is retried like a lost one.
        peer.session_event(self, |s| s.initiation_sent(now));
        if let Err(e) = peer.send_buffers(self, &[&msg]) {
            tracing::debug!(device = %self.name, peer = %peer.public_key, "failed to send handshake initiation: {e}");
        }
    }

    fn send_handshake_response(&self, peer: &Arc<Peer>) {
        let now = self.now();
        let (msg, keys) = {
            let mut hs = peer.handshake.lock();
            let idx = self.index.new_index(peer);
            let mut msg = match hs.hs.create_response(idx, &mut rand::thread_rng()) {
                Ok(m) => m,
                Err(e) => {
                    self.index.delete(idx);
                    tracing::debug!(device = %self.name, "failed to create response: {e}");
                    return;
                }
            };
            hs.cookie.add_macs(&mut msg, now);
            let keys = match hs.hs.derive_keys() {
                Ok(k) => k,
                Err(e) => {
                    self.index.delete(idx);
                    tracing::debug!(device = %self.name, "failed to derive keypair: {e}");
                    return;
                }
            };
            (msg, keys)
        };
        self.install_keypair(peer, &keys);
        peer.session_event(self, |s| s.response_sent(now));
        self.stats.handshakes_sent.fetch_add(1, Ordering::Relaxed);
        if let Err(e) = peer.send_buffers(self, &[&msg]) {
            tracing::debug!(device = %self.name, peer = %peer.public_key, "failed to send handshake response: {e}");
        }
    }
}
