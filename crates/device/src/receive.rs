//! The inbound path, in stages: read (the shared [`BatchReader`]) → classify each datagram
//! (`vpn_proto::messages::Received`) → group transport messages per peer and keypair → hand
//! handshakes to the handshake queue and each group to the crypto workers and its peer's
//! ordered queue → open (workers) → in order: replay check and key confirmation, roaming and
//! timers, inner-source check, TUN write. See `docs/pipeline.md`, "Stages".

use crate::batch::{Container, Elem, Group, Groups};
use crate::device::HandshakeJob;
use crate::index::{IndexEntry, LastIndex};
use crate::keypair::DevKeypair;
use crate::peer::Peer;
use crate::pool::{Layout, PacketBuf, HEADROOM};
use crate::reader::BatchReader;
use crate::route::{inner_packet, BatchMemo, LastRoute};
use crate::DeviceInner;
use bytes::BytesMut;
use smallvec::SmallVec;
use std::collections::HashMap;
use std::io;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;
use vpn_conn::{is_err_closed, Endpoint, ReceiveFunc};
use vpn_proto::messages::{Received, TransportHeader, TRANSPORT_MIN_SIZE};
use vpn_proto::time::Instant;

/// What the classify and group stages decided for one datagram of a batch.
#[derive(Clone, Copy)]
enum Act {
    Skip,
    /// To `groups[group]`, sealed with the group's keypair number `kp`, nonce `counter`.
    Transport {
        group: usize,
        kp: u8,
        counter: u64,
    },
    Handshake,
}

/// What a socket reader keeps from batch to batch.
struct Inbound {
    reader: BatchReader,
    /// Per datagram of the batch: where it came from, and what to do with it.
    eps: Vec<Endpoint>,
    acts: Vec<Act>,
    groups: Groups,
    /// The last lone datagram's keypair lookup and inner-source check (see `LastIndex`,
    /// `LastRoute`).
    last_index: LastIndex,
    last_src: LastRoute,
    bulk: crate::sched::ThreadBulk,
}

/// How a reader waits for its socket: holding no memory (the receive function waits when
/// given no buffers, see `vpn_conn::ReceiveFunc`), or, for a function that cannot, reading with
/// a slab in hand that is counted in `idle_slabs` while it waits.
struct IdleWait {
    waits: bool,
    held: usize,
}

/// What a reader does after a failed read.
enum Failed {
    Retry,
    Stop,
}

impl DeviceInner {
    /// One receive routine per receive function (`RoutineReceiveIncoming`): wait for data
    /// holding no memory, read a batch into a slab, run it through the stages, give back what
    /// was not carved out of the slab.
    pub(crate) fn receive_routine(self: &Arc<Self>, mut recv: ReceiveFunc, batch: usize) {
        let batch = batch.max(1);
        let mut st = Inbound {
            reader: BatchReader::new(&self.pool, batch),
            eps: vec![Endpoint::default(); batch],
            acts: Vec::with_capacity(batch),
            groups: Groups::new(&self.pool, self.batch_size.min(batch)),
            last_index: LastIndex::default(),
            last_src: LastRoute::default(),
            bulk: crate::sched::ThreadBulk::default(),
        };
        let mut idle = IdleWait {
            waits: true,
            held: 0,
        };
        let mut errors = 0;
        while self.wait_for_datagrams(&mut recv, &mut idle, batch) {
            let layout = Layout::for_batch(batch, self.mtu());
            let eps = &mut st.eps;
            match st.reader.read(layout, |bufs, sizes| recv(bufs, sizes, eps)) {
                Ok(n) => {
                    errors = 0;
                    self.receive_batch(&mut st, n);
                }
                Err(e) => match self.receive_failed(e, &mut errors) {
                    Failed::Retry => {}
                    Failed::Stop => break,
                },
            }
            st.reader.release();
        }
        self.idle_slabs.fetch_sub(idle.held, Ordering::AcqRel);
    }

    /// Waits until the socket has data (see [`IdleWait`]). False once the bind is closed.
    fn wait_for_datagrams(
        &self,
        recv: &mut ReceiveFunc,
        idle: &mut IdleWait,
        batch: usize,
    ) -> bool {
        if !idle.waits {
            return true;
        }
        match recv(&mut [], &mut [], &mut []) {
            Ok(_) => true,
            Err(e) if is_err_closed(&e) => false,
            Err(e) => {
                tracing::debug!(device = %self.name, "receive function cannot wait for data, reading with a slab in hand: {e}");
                idle.waits = false;
                idle.held = Layout::for_batch(batch, self.mtu()).len();
                self.idle_slabs.fetch_add(idle.held, Ordering::AcqRel);
                true
            }
        }
    }

    /// A failed read: the end when the bind closed or after ten failures in a row, else a
    /// pause and another try.
    fn receive_failed(&self, e: io::Error, errors: &mut u32) -> Failed {
        if is_err_closed(&e) {
            return Failed::Stop;
        }
        *errors += 1;
        if *errors > 10 || self.is_closed() {
            tracing::error!(device = %self.name, "receive routine giving up: {e}");
            return Failed::Stop;
        }
        tracing::debug!(device = %self.name, "failed to receive packet: {e}");
        std::thread::sleep(Duration::from_millis(333));
        Failed::Retry
    }

    /// The stages after the read, for the `n` entries one read returned.
    fn receive_batch(&self, st: &mut Inbound, n: usize) {
        let sizes = &st.reader.sizes()[..n];
        // Entries of size 0 are holes a reader left (see `vpn_conn::ReceiveFunc`).
        let datagrams = sizes.iter().filter(|&&s| s != 0).count();
        self.stats.recv_calls.fetch_add(1, Ordering::Relaxed);
        let now = self.now();
        self.bulk.observe(&mut st.bulk, datagrams, || now);
        if !(n == 1 && self.receive_one(st, now)) {
            self.classify_batch(st, n, now);
            self.hand_over_handshakes(st);
            self.hand_over_transport(st);
        }
        // Counted once the batch's work is queued or done (`Device::datagrams_handled`).
        self.stats
            .datagrams_received
            .fetch_add(datagrams as u64, Ordering::Release);
    }

    /// A lone datagram through [`receive_lone`](Self::receive_lone), when it can take that path.
    fn receive_one(&self, st: &mut Inbound, now: Instant) -> bool {
        let Some((slab, size)) = st.reader.lone() else {
            return false;
        };
        let ep = st.eps[0];
        self.receive_lone(slab, size, ep, now, (&mut st.last_index, &mut st.last_src))
    }

    /// The classify and group stages: sorts each datagram (`Received`) and puts each transport
    /// message in its peer's group, under one read lock of the index for the batch. Handshake
    /// messages are marked for the handshake queue, the rest dropped and counted.
    fn classify_batch(&self, st: &mut Inbound, n: usize, now: Instant) {
        st.acts.clear();
        let index = self.index.read();
        // The previous transport message's receiver index and where it went: a bulk batch is
        // one keypair's run, and under the read lock at one `now` the lookup would give the same
        // answer.
        let mut last: Option<(u32, usize, u8)> = None;
        for i in 0..n {
            let act = match st
                .reader
                .packet(i, 0)
                .filter(|m| !m.is_empty())
                .map(Received::parse)
            {
                None => Act::Skip, // a hole, or larger than its slot
                Some(Ok(Received::Transport(h))) => {
                    let to = match last {
                        Some((r, g, k)) if r == h.receiver_index => Some((g, k)),
                        _ => self.group_of(&index, h.receiver_index, now, &mut st.groups),
                    };
                    match to {
                        Some((group, kp)) => {
                            last = Some((h.receiver_index, group, kp));
                            Act::Transport {
                                group,
                                kp,
                                counter: h.counter,
                            }
                        }
                        None => Act::Skip,
                    }
                }
                Some(Ok(Received::Handshake(_))) => Act::Handshake,
                Some(Err(_)) => {
                    self.stats.drop_malformed.fetch_add(1, Ordering::Relaxed);
                    Act::Skip
                }
            };
            st.acts.push(act);
        }
    }

    /// The group stage for one transport message: the keypair `receiver` names, if it may
    /// receive now, as (its peer's group, its number in that group). Unknown and expired
    /// indices are counted and dropped.
    #[inline]
    fn group_of(
        &self,
        index: &HashMap<u32, IndexEntry>,
        receiver: u32,
        now: Instant,
        groups: &mut Groups,
    ) -> Option<(usize, u8)> {
        match index.get(&receiver) {
            Some(IndexEntry::Keypair(kp)) if kp.can_receive(now) => {
                let peer = kp.peer.upgrade()?;
                let g = groups.of(&peer);
                Some((g, groups.v[g].keypair_slot(kp)))
            }
            Some(IndexEntry::Keypair(_)) => {
                self.stats
                    .drop_expired_keypair
                    .fetch_add(1, Ordering::Relaxed);
                None
            }
            _ => {
                self.stats
                    .drop_unknown_index
                    .fetch_add(1, Ordering::Relaxed);
                None
            }
        }
    }

    /// Hand-over of handshake messages: copied out (they are rare, and the slab must not wait
    /// for them) into the bounded handshake queue, never blocking: dropped and counted if full.
    fn hand_over_handshakes(&self, st: &Inbound) {
        for (i, act) in st.acts.iter().enumerate() {
            if !matches!(act, Act::Handshake) {
                continue;
            }
            let msg = st.reader.packet(i, 0).unwrap_or_default();
            let job = HandshakeJob {
                buf: msg.to_vec().into_boxed_slice(),
                ep: st.eps[i],
            };
            self.handshakes_queued.fetch_add(1, Ordering::Relaxed);
            if self.handshake_tx.try_send(Some(job)).is_err() {
                self.handshakes_queued.fetch_sub(1, Ordering::Relaxed);
                self.stats
                    .drop_handshake_queue_full
                    .fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// Hand-over of transport messages: carves each out of the slab into its group, in batch
    /// order, and submits every group. A reader batch larger than the device batch (a started
    /// reader's) is handed over in full containers as they fill, so order is kept and no
    /// container exceeds the batch the TUN writes at once.
    fn hand_over_transport(&self, st: &mut Inbound) {
        if !st.acts.iter().any(|a| matches!(a, Act::Transport { .. })) {
            return; // the slab goes back whole
        }
        let Some(mut carver) = st.reader.carve() else {
            return;
        };
        for (i, act) in st.acts.iter().enumerate() {
            let Act::Transport { group, kp, counter } = *act else {
                continue;
            };
            let mut e = Elem::new(carver.slot(i), st.reader.sizes()[i]);
            e.counter = counter;
            e.ep = st.eps[i];
            e.kp = kp;
            let g = &mut st.groups.v[group];
            g.elems.v.push(e);
            if g.elems.len() >= self.batch_size {
                let full = g.split_off(&self.pool, self.batch_size);
                self.submit_group(full);
            }
        }
        drop(carver);
        for g in st.groups.v.drain(..) {
            self.submit_group(g);
        }
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

    /// The sequential stage for opened packets of `peer` (`elems[i].kp` indexes `keypairs`):
    /// replay check and key confirmation, the inner-source check, roaming and timers, the TUN
    /// write; the source check through `last_src` when a reader thread keeps one.
    fn deliver(
        &self,
        peer: &Arc<Peer>,
        keypairs: &[Arc<DevKeypair>],
        elems: &mut [Elem],
        last_src: Option<&mut LastRoute>,
    ) {
        // Indices of the packets to write, narrowed stage by stage.
        let mut write: SmallVec<[usize; 8]> = SmallVec::with_capacity(elems.len());
        let (last_valid, rx_bytes) = self.check_replay(peer, keypairs, elems, &mut write);
        let datagrams = self.check_sources(peer, elems, &mut write, last_src);
        peer.rx_bytes.fetch_add(rx_bytes, Ordering::Relaxed);
        let Some(last) = last_valid else { return };
        self.note_authenticated(peer, &elems[last].ep, !write.is_empty());
        if !write.is_empty() {
            self.write_to_tun(elems, &write, datagrams);
        }
    }

    /// Replay window and key confirmation: keeps in `write` the authentic, fresh packets that
    /// carry data (keepalives are counted, never written). Returns the last authentic packet
    /// and the bytes received.
    fn check_replay(
        &self,
        peer: &Arc<Peer>,
        keypairs: &[Arc<DevKeypair>],
        elems: &[Elem],
        write: &mut SmallVec<[usize; 8]>,
    ) -> (Option<usize>, u64) {
        let mut rx_bytes = 0u64;
        let mut last_valid = None;
        let mut filters: SmallVec<[_; 2]> = keypairs.iter().map(|k| k.replay.lock()).collect();
        // Key confirmation needs the first packet under each keypair only: one bit per keypair
        // of the container instead of a lock of the peer's keypairs per packet.
        let mut seen = 0u64;
        for (i, e) in elems.iter().enumerate() {
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
                write.push(i);
            }
        }
        (last_valid, rx_bytes)
    }

    /// Crypto-key routing, reverse direction: keeps in `write` the packets whose inner source
    /// routes back to `peer` (one read lock of the table for the batch), trimmed to their IP
    /// length. Returns how many of them are UDP.
    fn check_sources(
        &self,
        peer: &Arc<Peer>,
        elems: &mut [Elem],
        write: &mut SmallVec<[usize; 8]>,
        mut last_src: Option<&mut LastRoute>,
    ) -> usize {
        let mut datagrams = 0;
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
            match inner_packet(p) {
                Some(inner) if routes_back(inner.source) => {
                    e.len = inner.len;
                    datagrams += usize::from(inner.udp);
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
        datagrams
    }

    /// Roaming and the session's receive event, once per batch with an authentic packet: the
    /// endpoint is the last authentic packet's source.
    fn note_authenticated(&self, peer: &Arc<Peer>, ep: &Endpoint, data: bool) {
        peer.set_endpoint_from_packet(ep);
        peer.batch_received(self, data);
    }

    /// Writes the packets `write` names to the TUN in one call, then the datagram-burst yield.
    fn write_to_tun(&self, elems: &mut [Elem], write: &[usize], datagrams: usize) {
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
