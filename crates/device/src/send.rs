//! The outbound path: TUN reader → route → stage → seal (workers) → send in order (§2.4).

use crate::batch::{recycle_slices, Container, Elem, Elems};
use crate::keypair::DevKeypair;
use crate::peer::PeerRef;
use crate::pool::{slot_size, Carver, PacketBuf, HEADROOM};
use crate::route::{destination, udp_source_port_and_destination, BatchMemo, LastRoute};
use crate::DeviceInner;
use bytes::BytesMut;
use smallvec::SmallVec;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use vpn_proto::transport::padded_len;

impl DeviceInner {
    /// The one TUN reader: reads a batch into a slab, groups packets per peer by destination,
    /// carves them out of the slab, stages them and kicks each peer's sending. It keeps its slab
    /// across reads until packets are carved out of it (a slab returns to the pool with the last
    /// of its packets), then takes the next one before reading again.
    pub(crate) fn tun_reader(self: &Arc<Self>) {
        let batch = self.batch_size;
        let mut layout = self.tun_layout();
        let mut slab: Option<BytesMut> = None;
        // The per-call view of the slab, its allocation reused (see `recycle_slices`).
        let mut spare: Vec<&mut [u8]> = Vec::with_capacity(batch);
        let mut sizes = vec![0usize; batch];
        // Per-batch grouping: (peer, its packets). A handful of peers per batch: a linear scan
        // beats hashing.
        let mut groups: Vec<(PeerRef, Elems)> = Vec::new();
        // Per packet of the batch: the group it goes to.
        let mut route: Vec<Option<usize>> = Vec::with_capacity(batch);
        let mut last_route = LastRoute::default();
        let mut bulk = crate::sched::ThreadBulk::default();
        loop {
            // A slab kept from the last read (nothing was carved out of it) is laid out for the
            // MTU of its time: after an MTU change it goes back for one with slots that fit.
            let want = self.tun_layout();
            if want != layout {
                if let Some(old) = slab.take() {
                    self.pool.put(old);
                }
            }
            let mem = match &mut slab {
                Some(s) => s,
                None => {
                    layout = want;
                    slab.insert(self.pool.take(layout.len()))
                }
            };
            let mut slices = recycle_slices(std::mem::take(&mut spare));
            layout.slices(mem, &mut slices);
            let res = self.tun.read(&mut slices, &mut sizes, HEADROOM);
            spare = recycle_slices(slices);
            let n = match res {
                Ok(n) => n.min(batch),
                // A packet lost, not the TUN: keep reading (after an MTU rise with slots laid
                // out for the new MTU).
                Err(e) if vpn_tun::is_too_many_segments(&e) => {
                    tracing::debug!(device = %self.name, "{e}");
                    continue;
                }
                Err(e) if vpn_tun::is_packet_too_big(&e) => {
                    tracing::debug!(device = %self.name, "{e}: reading the MTU again");
                    self.refresh_mtu();
                    continue;
                }
                Err(e) => {
                    if !self.is_closed() {
                        tracing::error!(device = %self.name, "failed to read packet from TUN: {e}");
                        let d = self.clone();
                        // Close from another thread: close joins this one.
                        crate::device::spawn("closer", move || d.close());
                    }
                    break;
                }
            };
            self.stats.tun_reads.fetch_add(1, Ordering::Relaxed);
            self.stats
                .tun_packets_read
                .fetch_add(n as u64, Ordering::Relaxed);
            self.bulk.observe(&mut bulk, n, || self.now());
            // Route under the table's read lock, then carve the packets out with no lock held.
            if n == 1 {
                let peer = layout
                    .packet(mem, 0, HEADROOM, sizes[0])
                    .and_then(|pkt| last_route.lookup_dst(&self.allowed_ips.read(), pkt));
                if let Some(peer) = peer {
                    let own = layout
                        .packet(mem, 0, HEADROOM, sizes[0])
                        .is_some_and(|pkt| self.is_own_datagram(pkt, &peer.0, &mut None));
                    if own {
                        self.stats.drop_loop.fetch_add(1, Ordering::Relaxed);
                        continue; // the slab is read into again
                    }
                    if self.send_lone(&peer.0, mem, sizes[0]) {
                        continue;
                    }
                }
            }
            route.clear();
            {
                let table = self.allowed_ips.read();
                let mut memo = BatchMemo::new();
                for (i, &size) in sizes[..n].iter().enumerate() {
                    let g = layout
                        .packet(mem, i, HEADROOM, size)
                        .and_then(destination)
                        .and_then(|dst| {
                            memo.get(dst, || {
                                let peer = table.lookup(dst)?;
                                let g = groups.iter().position(|(p, _)| p == peer);
                                Some(g.unwrap_or_else(|| {
                                    groups.push((peer.clone(), Elems::new(&self.pool, batch)));
                                    groups.len() - 1
                                }))
                            })
                        });
                    if g.is_none() {
                        self.stats.drop_no_route.fetch_add(1, Ordering::Relaxed);
                    }
                    route.push(g);
                }
            }
            // Outside the table's lock: the check may take the bind's and a peer's.
            let mut port = None;
            for (i, r) in route.iter_mut().enumerate() {
                let Some(g) = *r else { continue };
                let own = layout
                    .packet(mem, i, HEADROOM, sizes[i])
                    .is_some_and(|pkt| self.is_own_datagram(pkt, &groups[g].0 .0, &mut port));
                if own {
                    self.stats.drop_loop.fetch_add(1, Ordering::Relaxed);
                    *r = None;
                }
            }
            if route.iter().all(Option::is_none) {
                groups.clear();
                continue; // nothing carved: the slab is read into again
            }
            if let Some(mem) = slab.take() {
                let mut carver = Carver::new(&self.pool, mem, layout);
                for (i, r) in route.iter().enumerate() {
                    if let Some(g) = *r {
                        groups[g].1.v.push(Elem::new(carver.slot(i), sizes[i]));
                    }
                }
            }
            let max_staged = self.max_staged_packets();
            for (peer, elems) in groups.drain(..) {
                let peer = peer.0;
                if !peer.is_running() {
                    continue; // elems dropped: their slots go back to the slab
                }
                peer.stage(elems, max_staged);
                peer.send_staged();
            }
        }
        if let Some(mem) = slab {
            self.pool.put(mem);
        }
    }

    /// Packets a peer may keep staged while it waits for a handshake: a quarter of the
    /// device's memory in slots, at least a batch.
    pub(crate) fn max_staged_packets(&self) -> usize {
        match self.pool.max() {
            0 => usize::MAX,
            max => (max / 4 / slot_size(self.mtu())).max(self.batch_size),
        }
    }

    /// Whether `pkt`, routed to `peer`, is one of our own datagrams to that peer that came back
    /// through the TUN: a UDP datagram from our listen port to the peer's endpoint. That happens
    /// when the endpoint is routed through the tunnel itself (an endpoint inside the peer's
    /// allowed IPs without policy routing, a tunnel nested in itself); sealing it again would
    /// send it round the loop, a little larger each time, until it no longer fits the MTU. The
    /// kernel's WireGuard refuses such a route when it sends; a TUN reader sees the datagram one
    /// turn later and drops it here. `port` caches the listen port for the batch; the bind's
    /// lock is taken only for a UDP packet.
    fn is_own_datagram(&self, pkt: &[u8], peer: &crate::Peer, port: &mut Option<u16>) -> bool {
        let Some((sport, dst)) = udp_source_port_and_destination(pkt) else {
            return false;
        };
        let listen_port = *port.get_or_insert_with(|| self.net.lock().port);
        sport == listen_port
            && listen_port != 0
            && peer.endpoint.lock().ep.is_some_and(|ep| ep.dst == dst)
    }

    /// A packet read alone (a quiet tunnel: a ping, a keystroke) is sealed and sent on this
    /// thread, in the buffer it was read into, when that keeps the peer's order: nothing staged,
    /// nothing queued, nobody sending (`Ordered::run_alone`, `Peer::lone_send_slot`). It skips
    /// the packet list, the container, the queue and the buffer exchange with the pool; on a
    /// tunnel idle between packets every one of those is cold memory the packet would wait for.
    /// Returns false, leaving `buf` as it was, if the packet must take the batch path.
    fn send_lone(&self, peer: &Arc<crate::Peer>, buf: &mut BytesMut, len: usize) -> bool {
        let sent = peer.outbound.run_alone(
            || {
                let (kp, counter) = peer.lone_send_slot(self)?;
                let mut e = [Elem::new(PacketBuf::lend(std::mem::take(buf)), len)];
                e[0].counter = counter;
                self.seal(&kp, &mut e);
                self.send_sealed(peer, &e);
                let [e] = e;
                *buf = e.buf.into_slab();
                Some(())
            },
            |c| self.send_container(c),
        );
        sent.flatten().is_some()
    }

    /// Seals `elems` in place with `kp` (their counters already reserved).
    fn seal(&self, kp: &DevKeypair, elems: &mut [Elem]) {
        let mtu = self.mtu();
        for e in elems {
            let padded = padded_len(e.len, mtu);
            match kp.kp.seal(e.counter, &mut e.buf, e.len, padded) {
                Ok(n) => {
                    e.len = n;
                    e.ok = true;
                }
                Err(_) => e.ok = false,
            }
        }
    }

    /// Worker: seals every packet of an outbound batch, then drains the peer's ordered queue.
    pub(crate) fn encrypt_and_send(&self, c: Arc<Container<Arc<DevKeypair>>>) {
        self.seal(&c.keypairs[0], &mut c.elems.lock().v);
        c.set_done();
        let peer = c.peer.clone();
        drop(c);
        peer.outbound.drain(|c| self.send_container(c));
    }

    /// The sequential stage of the outbound path: runs for each batch of a peer in order.
    fn send_container(&self, c: Arc<Container<Arc<DevKeypair>>>) {
        if c.peer.is_running() {
            self.send_sealed(&c.peer, &c.elems.lock().v);
        }
    }

    /// Sends the sealed packets of `elems` to `peer` and runs the send-side timers.
    fn send_sealed(&self, peer: &Arc<crate::Peer>, elems: &[Elem]) {
        let bufs: SmallVec<[&[u8]; 4]> = elems
            .iter()
            .filter(|e| e.ok)
            .map(|e| &e.buf[..e.len])
            .collect();
        if bufs.is_empty() {
            return;
        }
        let data = bufs
            .iter()
            .any(|b| b.len() != vpn_proto::transport::TRANSPORT_OVERHEAD);
        peer.timers_any_authenticated_packet_traversal(self);
        peer.timers_any_authenticated_packet_sent();
        let res = peer.send_buffers(self, &bufs);
        drop(bufs);
        match res {
            Ok(()) => {
                if data {
                    peer.timers_data_sent(self);
                }
                peer.keep_key_fresh_sending(self);
            }
            Err(e) => {
                self.stats.send_errors.fetch_add(1, Ordering::Relaxed);
                tracing::debug!(device = %self.name, peer = %peer.public_key, "failed to send data packets: {e}");
            }
        }
    }
}
