//! The inbound path: socket readers → classify → open (workers) → in order: replay check, key
//! confirmation, roaming, inner-source check, TUN write (§2.4).

use crate::batch::{recycle_slices, Container, Elem, Elems};
use crate::device::HandshakeJob;
use crate::index::LastIndex;
use crate::keypair::DevKeypair;
use crate::peer::Peer;
use crate::pool::{Carver, Layout, PacketBuf, Pool, HEADROOM};
use crate::route::{BatchMemo, LastRoute};
use crate::DeviceInner;
use bytes::BytesMut;
use smallvec::SmallVec;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;
use vpn_conn::{is_err_closed, Endpoint, ReceiveFunc};
use vpn_proto::messages::{
    TransportHeader, COOKIE_REPLY_SIZE, INITIATION_SIZE, MESSAGE_COOKIE_REPLY, MESSAGE_INITIATION,
    MESSAGE_RESPONSE, MESSAGE_TRANSPORT, RESPONSE_SIZE, TRANSPORT_MIN_SIZE,
};

/// What the reader does with one datagram of a batch.
#[derive(Clone, Copy)]
enum Act {
    Skip,
    /// To `groups[group]`, sealed with its keypair number `kp`.
    Transport {
        group: usize,
        kp: u8,
    },
    Handshake,
}

/// Per-batch grouping of inbound packets by peer.
struct Group {
    peer: Arc<Peer>,
    keypairs: Vec<Arc<DevKeypair>>,
    elems: Elems,
}

impl Group {
    fn new(peer: Arc<Peer>, keypairs: Vec<Arc<DevKeypair>>, pool: &Arc<Pool>, cap: usize) -> Self {
        Group {
            peer,
            keypairs,
            elems: Elems::new(pool, cap),
        }
    }
}

impl DeviceInner {
    /// One receive routine per receive function (`RoutineReceiveIncoming`).
    ///
    /// Per read: wait until the socket has data, holding no memory (an idle reader costs the
    /// pool nothing); take a slab and read the batch into its slots; carve the transport
    /// messages handed on out of it (the slab returns with the last of them) and give the rest
    /// back.
    pub(crate) fn receive_routine(self: &Arc<Self>, mut recv: ReceiveFunc, batch: usize) {
        let batch = batch.max(1);
        // The per-call view of the slab, its allocation reused (see `recycle_slices`).
        let mut spare: Vec<&mut [u8]> = Vec::with_capacity(batch);
        let mut sizes = vec![0usize; batch];
        let mut eps = vec![Endpoint::default(); batch];
        let mut groups: Vec<Group> = Vec::new();
        // Per datagram of the batch: what to do with it.
        let mut acts: Vec<Act> = Vec::with_capacity(batch);
        let mut errors = 0;
        // The last lone datagram's keypair lookup and inner-source check (see `LastIndex`,
        // `LastRoute`).
        let mut last_index = LastIndex::default();
        let mut last_src = LastRoute::default();
        let mut bulk = crate::sched::ThreadBulk::default();
        // Whether the receive function waits for data when given no buffers (see
        // `vpn_conn::ReceiveFunc`); one that cannot is read with a slab in hand.
        let mut waits = true;
        // Bytes this reader holds while it waits (a slab, if it cannot wait without one).
        let mut held_idle = 0;

        loop {
            if waits {
                match recv(&mut [], &mut [], &mut []) {
                    Ok(_) => {}
                    Err(e) if is_err_closed(&e) => break,
                    Err(e) => {
                        tracing::debug!(device = %self.name, "receive function cannot wait for data, reading with a slab in hand: {e}");
                        waits = false;
                        held_idle = Layout::for_batch(batch, self.mtu()).len();
                        self.idle_slabs.fetch_add(held_idle, Ordering::AcqRel);
                    }
                }
            }
            let layout = Layout::for_batch(batch, self.mtu());
            let mut slab = self.pool.take(layout.len());
            let mut slices = recycle_slices(std::mem::take(&mut spare));
            layout.slices(&mut slab, &mut slices);
            let res = recv(&mut slices, &mut sizes, &mut eps);
            spare = recycle_slices(slices);
            let n = match res {
                Ok(n) => {
                    errors = 0;
                    n.min(batch)
                }
                Err(e) => {
                    self.pool.put(slab);
                    if is_err_closed(&e) {
                        break;
                    }
                    errors += 1;
                    if errors > 10 || self.is_closed() {
                        tracing::error!(device = %self.name, "receive routine giving up: {e}");
                        break;
                    }
                    tracing::debug!(device = %self.name, "failed to receive packet: {e}");
                    std::thread::sleep(Duration::from_millis(333));
                    continue;
                }
            };
            self.stats.recv_calls.fetch_add(1, Ordering::Relaxed);
            // Entries of size 0 are holes a reader left (see `vpn_conn::ReceiveFunc`).
            let datagrams = sizes[..n].iter().filter(|&&s| s != 0).count();
            self.stats
                .datagrams_received
                .fetch_add(datagrams as u64, Ordering::Relaxed);
            let now = self.now();
            self.bulk.observe(&mut bulk, datagrams, || now);
            if n == 1
                && self.receive_lone(
                    &mut slab,
                    sizes[0],
                    eps[0],
                    now,
                    (&mut last_index, &mut last_src),
                )
            {
                self.pool.put(slab);
                continue;
            }
            // Classify under the index's read lock; carve packets out of the slab only after
            // it is released.
            acts.clear();
            {
                let index = self.index.read();
                // The previous transport message's receiver index and what it was given: a
                // bulk batch is one keypair's run, and under the read lock at one `now` the
                // lookup would give the same answer.
                let mut last: Option<(u32, Act)> = None;
                for (i, &size) in sizes[..n].iter().enumerate() {
                    let msg = match layout.packet(&slab, i, 0, size) {
                        Some(m) if size >= TRANSPORT_MIN_SIZE => m,
                        _ => {
                            acts.push(Act::Skip);
                            continue;
                        }
                    };
                    let ty = u32::from_le_bytes([msg[0], msg[1], msg[2], msg[3]]);
                    let act = match ty {
                        MESSAGE_TRANSPORT => {
                            let receiver = u32::from_le_bytes([msg[4], msg[5], msg[6], msg[7]]);
                            if let Some((r, act @ Act::Transport { .. })) = last {
                                if r == receiver {
                                    acts.push(act);
                                    continue;
                                }
                            }
                            let act = match index.get(&receiver) {
                                Some(crate::index::IndexEntry::Keypair(kp))
                                    if kp.can_receive(now) =>
                                {
                                    match kp.peer.upgrade() {
                                        Some(peer) => {
                                            let g = match groups
                                                .iter()
                                                .position(|g| Arc::ptr_eq(&g.peer, &peer))
                                            {
                                                Some(g) => g,
                                                None => {
                                                    groups.push(Group::new(
                                                        peer,
                                                        Vec::with_capacity(2),
                                                        &self.pool,
                                                        self.batch_size.min(batch),
                                                    ));
                                                    groups.len() - 1
                                                }
                                            };
                                            let kps = &mut groups[g].keypairs;
                                            let k =
                                                match kps.iter().position(|k| Arc::ptr_eq(k, kp)) {
                                                    Some(k) => k,
                                                    None => {
                                                        kps.push(kp.clone());
                                                        kps.len() - 1
                                                    }
                                                };
                                            Act::Transport {
                                                group: g,
                                                kp: u8::try_from(k).unwrap_or(u8::MAX),
                                            }
                                        }
                                        None => Act::Skip,
                                    }
                                }
                                Some(crate::index::IndexEntry::Keypair(_)) => {
                                    self.stats
                                        .drop_expired_keypair
                                        .fetch_add(1, Ordering::Relaxed);
                                    Act::Skip
                                }
                                _ => {
                                    self.stats
                                        .drop_unknown_index
                                        .fetch_add(1, Ordering::Relaxed);
                                    Act::Skip
                                }
                            };
                            last = Some((receiver, act));
                            act
                        }
                        MESSAGE_INITIATION | MESSAGE_RESPONSE | MESSAGE_COOKIE_REPLY => {
                            let exact = match ty {
                                MESSAGE_INITIATION => INITIATION_SIZE,
                                MESSAGE_RESPONSE => RESPONSE_SIZE,
                                _ => COOKIE_REPLY_SIZE,
                            };
                            if size == exact {
                                Act::Handshake
                            } else {
                                self.stats.drop_malformed.fetch_add(1, Ordering::Relaxed);
                                Act::Skip
                            }
                        }
                        _ => {
                            self.stats.drop_malformed.fetch_add(1, Ordering::Relaxed);
                            Act::Skip
                        }
                    };
                    acts.push(act);
                }
            }
            // Handshakes are copied out: they are rare, and the slab must not wait for them.
            for (i, act) in acts.iter().enumerate() {
                if matches!(act, Act::Handshake) {
                    let msg = layout.packet(&slab, i, 0, sizes[i]).unwrap_or_default();
                    let job = HandshakeJob {
                        buf: msg.to_vec().into_boxed_slice(),
                        ep: eps[i],
                    };
                    if self.handshake_tx.try_send(Some(job)).is_err() {
                        self.stats
                            .drop_handshake_queue_full
                            .fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
            if !acts.iter().any(|a| matches!(a, Act::Transport { .. })) {
                self.pool.put(slab);
                continue;
            }
            let mut carver = Carver::new(&self.pool, slab, layout);
            for (i, act) in acts.iter().enumerate() {
                let Act::Transport { group, kp } = *act else {
                    continue;
                };
                let buf = carver.slot(i);
                let counter = u64::from_le_bytes([
                    buf[8], buf[9], buf[10], buf[11], buf[12], buf[13], buf[14], buf[15],
                ]);
                let mut e = Elem::new(buf, sizes[i]);
                e.counter = counter;
                e.ep = eps[i];
                e.kp = kp;
                let g = &mut groups[group];
                g.elems.v.push(e);
                // A started reader may return more than the device batch: hand over full
                // containers as they fill, so order is kept and no container exceeds the
                // batch the TUN writes at once.
                if g.elems.len() >= self.batch_size {
                    let full = std::mem::replace(
                        g,
                        Group::new(
                            g.peer.clone(),
                            g.keypairs.clone(),
                            &self.pool,
                            self.batch_size,
                        ),
                    );
                    self.submit_group(full);
                }
            }
            drop(carver);
            for g in groups.drain(..) {
                self.submit_group(g);
            }
        }
        self.idle_slabs.fetch_sub(held_idle, Ordering::AcqRel);
    }

    /// Queues one peer's packets for decryption and in-order delivery.
    fn submit_group(&self, g: Group) {
        if !g.peer.is_running() || g.elems.is_empty() {
            return;
        }
        let c = Arc::new(Container::new(g.peer.clone(), g.keypairs, g.elems));
        g.peer.inbound.push(c.clone());
        self.stats
            .inbound_containers
            .fetch_add(1, Ordering::Relaxed);
        self.submit(crate::Job::Decrypt(c));
    }

    /// A transport message read alone is opened and delivered on this thread, in the buffer it
    /// was read into, as the peer's inbound drainer when it has no batch queued or being written
    /// (`Ordered::run_alone`): the inbound counterpart of `send_lone`. Returns false, leaving `buf` as it was, if
    /// the datagram must take the batch path (any other message, an unknown or expired index).
    fn receive_lone(
        &self,
        buf: &mut BytesMut,
        size: usize,
        ep: Endpoint,
        now: vpn_proto::time::Instant,
        (last_index, last_src): (&mut LastIndex, &mut LastRoute),
    ) -> bool {
        let Some(Ok(hdr)) = buf.get(..size).map(TransportHeader::parse) else {
            return false;
        };
        let Some(kp) = last_index
            .keypair(&self.index, hdr.receiver_index)
            .filter(|kp| kp.can_receive(now))
        else {
            return false;
        };
        let Some(peer) = kp.peer.upgrade() else {
            return false;
        };
        if !peer.is_running() {
            return false;
        }
        let delivered = peer.inbound.run_alone(
            || {
                self.stats
                    .inbound_containers
                    .fetch_add(1, Ordering::Relaxed);
                let kps = [kp];
                let mut e = Elem::new(PacketBuf::lend(std::mem::take(buf)), size);
                e.counter = hdr.counter;
                e.ep = ep;
                let mut e = [e];
                self.open(&kps, &mut e);
                self.deliver(&peer, &kps, &mut e, Some(last_src));
                let [e] = e;
                *buf = e.buf.into_slab();
            },
            |c| self.deliver_container(c),
        );
        delivered.is_some()
    }

    /// Opens `elems` in place, each with its keypair in `keypairs`.
    fn open(&self, keypairs: &[Arc<DevKeypair>], elems: &mut [Elem]) {
        for e in elems {
            let Some(kp) = keypairs.get(usize::from(e.kp)) else {
                continue;
            };
            let len = e.len;
            match kp.kp.open(e.counter, &mut e.buf[..len]) {
                Ok(n) => {
                    e.len = n;
                    e.ok = true;
                }
                Err(_) => {
                    e.ok = false;
                }
            }
        }
    }

    /// Worker: opens every packet of an inbound batch, then drains the peer's ordered queue.
    pub(crate) fn decrypt_and_deliver(&self, c: Arc<Container<Arc<DevKeypair>>>) {
        self.open(&c.keypairs, &mut c.elems.lock().v);
        c.set_done();
        let peer = c.peer.clone();
        drop(c);
        peer.inbound.drain(|c| self.deliver_container(c));
    }

    /// The sequential stage of the inbound path for one batch of a peer, in order.
    fn deliver_container(&self, c: Arc<Container<Arc<DevKeypair>>>) {
        if c.peer.is_running() {
            self.deliver(&c.peer, &c.keypairs, &mut c.elems.lock().v, None);
        }
    }

    /// Replay check, key confirmation, roaming, the inner-source check and the TUN write for
    /// opened packets of `peer` (`elems[i].kp` indexes `keypairs`); the source check through
    /// `last_src` when a reader thread keeps one.
    fn deliver(
        &self,
        peer: &Arc<Peer>,
        keypairs: &[Arc<DevKeypair>],
        elems: &mut [Elem],
        mut last_src: Option<&mut LastRoute>,
    ) {
        let mut rx_bytes = 0u64;
        let mut last_valid = None;
        let mut write: SmallVec<[usize; 8]> = SmallVec::with_capacity(elems.len());
        {
            let mut filters: SmallVec<[_; 2]> = keypairs.iter().map(|k| k.replay.lock()).collect();
            // Key confirmation needs the first packet under each keypair only: one bit per
            // keypair of the container instead of a lock of the peer's keypairs per packet.
            let mut seen = 0u64;
            for (i, e) in elems.iter_mut().enumerate() {
                if !e.ok {
                    self.stats.drop_decrypt.fetch_add(1, Ordering::Relaxed);
                    continue;
                }
                let k = usize::from(e.kp);
                let Some(filter) = filters.get_mut(k) else {
                    continue;
                };
                if !filter.check(e.counter) {
                    self.stats.drop_replay.fetch_add(1, Ordering::Relaxed);
                    continue;
                }
                if k >= 64 || seen & (1 << k) == 0 {
                    seen |= 1u64.checked_shl(k as u32).unwrap_or(0);
                    if let Some(kp) = keypairs.get(k) {
                        self.received_with_keypair(peer, kp);
                    }
                }
                rx_bytes += e.len as u64 + TRANSPORT_MIN_SIZE as u64;
                last_valid = Some(i);
                if e.len != 0 {
                    write.push(i); // candidates; keepalives are counted, never written
                }
            }
        }
        // Crypto-key routing, reverse direction: the inner source must route back to this peer.
        // One read lock for the batch.
        let mut datagrams = 0;
        {
            let table = self.allowed_ips.read();
            let mut memo = BatchMemo::new();
            let mut routes_back = |src| {
                memo.get(src, || match last_src.as_deref_mut() {
                    Some(c) => c
                        .lookup(&table, src)
                        .is_some_and(|p| Arc::ptr_eq(&p.0, peer)),
                    None => table.lookup(src).is_some_and(|p| Arc::ptr_eq(&p.0, peer)),
                })
            };
            write.retain(|i| {
                let e = &mut elems[*i];
                let p = &e.buf[HEADROOM..HEADROOM + e.len];
                match inner_packet_len(p) {
                    Some((len, src)) if routes_back(src) => {
                        e.len = len;
                        datagrams += usize::from(is_udp(p));
                        true
                    }
                    Some(_) => {
                        self.stats
                            .drop_source_not_allowed
                            .fetch_add(1, Ordering::Relaxed);
                        false
                    }
                    None => {
                        self.stats.drop_malformed.fetch_add(1, Ordering::Relaxed);
                        false
                    }
                }
            });
        }
        let data = !write.is_empty();
        peer.rx_bytes.fetch_add(rx_bytes, Ordering::Relaxed);
        let Some(last) = last_valid else { return };
        let ep = elems[last].ep;
        peer.set_endpoint_from_packet(&ep);
        peer.keep_key_fresh_receiving(self);
        peer.timers_any_authenticated_packet_traversal(self);
        peer.timers_any_authenticated_packet_received();
        if data {
            peer.timers_data_received(self);
        }
        if write.is_empty() {
            return;
        }
        let mut sizes: SmallVec<[usize; 8]> = SmallVec::with_capacity(write.len());
        let mut slices: SmallVec<[&mut [u8]; 8]> = SmallVec::with_capacity(write.len());
        let mut wi = write.iter().peekable();
        for (i, e) in elems.iter_mut().enumerate() {
            if wi.peek() == Some(&&i) {
                wi.next();
                sizes.push(e.len);
                slices.push(&mut e.buf[..]);
            }
        }
        self.stats.tun_writes.fetch_add(1, Ordering::Relaxed);
        self.stats
            .tun_packets_written
            .fetch_add(slices.len() as u64, Ordering::Relaxed);
        if let Err(e) = self.tun.write(&mut slices, &sizes, HEADROOM) {
            if !self.is_closed() {
                tracing::error!(device = %self.name, "failed to write packets to TUN: {e}");
            }
        }
        if self.bulk.wrote_datagrams(datagrams) {
            self.stats.datagram_yields.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Key confirmation: the first packet under the responder's `next` keypair promotes it.
    fn received_with_keypair(&self, peer: &Arc<Peer>, kp: &Arc<DevKeypair>) {
        let rotated = peer.keypairs.lock().received_with(kp);
        if let Some(gone) = rotated {
            for g in gone {
                self.index.delete(g.kp.local_index);
            }
            peer.timers_handshake_complete(self);
            peer.send_staged();
        }
    }
}

/// Validates the inner IP header and returns the packet's declared length and source address.
fn inner_packet_len(p: &[u8]) -> Option<(usize, std::net::IpAddr)> {
    match p.first()? >> 4 {
        4 if p.len() >= 20 => {
            let len = usize::from(u16::from_be_bytes([p[2], p[3]]));
            if len < 20 || len > p.len() {
                return None;
            }
            Some((len, std::net::IpAddr::from([p[12], p[13], p[14], p[15]])))
        }
        6 if p.len() >= 40 => {
            let len = usize::from(u16::from_be_bytes([p[4], p[5]])) + 40;
            if len > p.len() {
                return None;
            }
            let mut src = [0u8; 16];
            src.copy_from_slice(&p[8..24]);
            Some((len, std::net::IpAddr::from(src)))
        }
        _ => None,
    }
}

/// Whether a packet `inner_packet_len` accepted carries UDP (IPv6: as its first next header;
/// extension headers are rare enough on this path not to look past them).
fn is_udp(p: &[u8]) -> bool {
    const UDP: u8 = 17;
    match p.first().map(|b| b >> 4) {
        Some(4) => p.get(9) == Some(&UDP),
        Some(6) => p.get(6) == Some(&UDP),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::{inner_packet_len, is_udp};

    #[test]
    fn inner_header_checks() {
        let mut v4 = vec![0u8; 40];
        v4[0] = 0x45;
        v4[2..4].copy_from_slice(&28u16.to_be_bytes());
        v4[12..16].copy_from_slice(&[100, 64, 0, 1]);
        assert_eq!(inner_packet_len(&v4).unwrap().0, 28);
        v4[2..4].copy_from_slice(&41u16.to_be_bytes());
        assert!(inner_packet_len(&v4).is_none());
        v4[2..4].copy_from_slice(&19u16.to_be_bytes());
        assert!(inner_packet_len(&v4).is_none());
        let mut v6 = vec![0u8; 48];
        v6[0] = 0x60;
        v6[4..6].copy_from_slice(&8u16.to_be_bytes());
        assert_eq!(inner_packet_len(&v6).unwrap().0, 48);
        v6[4..6].copy_from_slice(&9u16.to_be_bytes());
        assert!(inner_packet_len(&v6).is_none());
        assert!(inner_packet_len(&[0x50; 60]).is_none());
        assert!(inner_packet_len(&[]).is_none());
    }

    #[test]
    fn udp_is_told_from_other_protocols() {
        let mut v4 = vec![0u8; 28];
        v4[0] = 0x45;
        v4[9] = 17;
        assert!(is_udp(&v4));
        v4[9] = 6;
        assert!(!is_udp(&v4));
        let mut v6 = vec![0u8; 48];
        v6[0] = 0x60;
        v6[6] = 17;
        assert!(is_udp(&v6));
        v6[6] = 58;
        assert!(!is_udp(&v6));
        assert!(!is_udp(&[]));
        assert!(!is_udp(&[0x45; 5]));
    }
}
