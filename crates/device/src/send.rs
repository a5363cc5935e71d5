//! The outbound path, in stages: read (the shared [`BatchReader`]) → route each packet by
//! destination and group it per peer → drop our own datagrams come back through the TUN →
//! hand over: carve the packets out of the slab, stage them per peer and kick its sending →
//! seal (workers) → send in order. See `docs/pipeline.md`, "Stages".

use crate::batch::{Container, Elem, Groups};
use crate::keypair::DevKeypair;
use crate::pool::{slot_size, PacketBuf, HEADROOM};
use crate::reader::BatchReader;
use crate::route::{destination, udp_source_port_and_destination, BatchMemo, LastRoute};
use crate::DeviceInner;
use bytes::BytesMut;
use smallvec::SmallVec;
use std::io;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use vpn_proto::transport::padded_len;

/// What the TUN reader keeps from batch to batch.
struct Outbound {
    reader: BatchReader,
    groups: Groups,
    /// Per packet of the batch: the group it goes to.
    route: Vec<Option<usize>>,
    last_route: LastRoute,
    bulk: crate::sched::ThreadBulk,
}

impl DeviceInner {
    /// The one TUN reader: reads a batch into a slab and runs it through the stages. It keeps
    /// its slab across reads until packets are carved out of it (a slab returns to the pool
    /// with the last of its packets), then takes the next one before reading again.
    pub(crate) fn tun_reader(self: &Arc<Self>) {
        let batch = self.batch_size;
        let mut st = Outbound {
            reader: BatchReader::new(&self.pool, batch),
            groups: Groups::new(&self.pool, batch),
            route: Vec::with_capacity(batch),
            last_route: LastRoute::default(),
            bulk: crate::sched::ThreadBulk::default(),
        };
        loop {
            // A slab kept from the last read is laid out for the MTU of its time: after an MTU
            // change it goes back for one with slots that fit (`BatchReader::read`).
            let layout = self.tun_layout();
            match st
                .reader
                .read(layout, |bufs, sizes| self.tun.read(bufs, sizes, HEADROOM))
            {
                Ok(n) => self.send_batch(&mut st, n),
                Err(e) => {
                    if !self.tun_read_failed(e) {
                        break;
                    }
                }
            }
        }
    }

    /// A failed TUN read: true to keep reading (a packet lost, not the TUN), false when the TUN
    /// is gone, in which case the device closes.
    fn tun_read_failed(self: &Arc<Self>, e: io::Error) -> bool {
        if vpn_tun::is_too_many_segments(&e) {
            tracing::debug!(device = %self.name, "{e}");
            return true;
        }
        if vpn_tun::is_packet_too_big(&e) {
            // Read again with slots laid out for the new MTU.
            tracing::debug!(device = %self.name, "{e}: reading the MTU again");
            self.refresh_mtu();
            return true;
        }
        if !self.is_closed() {
            tracing::error!(device = %self.name, "failed to read packet from TUN: {e}");
            let d = self.clone();
            // Close from another thread: close joins this one.
            crate::device::spawn("closer", move || d.close());
        }
        false
    }

    /// The stages after the read, for the `n` packets one read returned.
    fn send_batch(&self, st: &mut Outbound, n: usize) {
        self.stats.tun_reads.fetch_add(1, Ordering::Relaxed);
        self.stats
            .tun_packets_read
            .fetch_add(n as u64, Ordering::Relaxed);
        self.bulk.observe(&mut st.bulk, n, || self.now());
        if n == 1 && self.send_one(st) {
            return;
        }
        self.route_batch(st, n);
        self.drop_own_datagrams(st);
        if st.route.iter().all(Option::is_none) {
            st.groups.v.clear();
            return; // nothing carved: the slab is read into again
        }
        self.hand_over_outbound(st);
    }

    /// A packet read alone: routed through the reader's last route, dropped if it is one of
    /// our own datagrams, else sent through [`send_lone`](Self::send_lone) when it can take
    /// that path. True when it was handled.
    fn send_one(&self, st: &mut Outbound) -> bool {
        let peer = st
            .reader
            .packet(0, HEADROOM)
            .and_then(|pkt| st.last_route.lookup_dst(&self.allowed_ips.read(), pkt));
        let Some(peer) = peer else {
            return false;
        };
        let own = st
            .reader
            .packet(0, HEADROOM)
            .is_some_and(|pkt| self.is_own_datagram(pkt, &peer.0, &mut None));
        if own {
            self.stats.drop_loop.fetch_add(1, Ordering::Relaxed);
            return true; // the slab is read into again
        }
        let Some((slab, len)) = st.reader.lone() else {
            return false;
        };
        self.send_lone(&peer.0, slab, len)
    }

    /// The route and group stages: each packet's peer by destination (allowed IPs, one read
    /// lock for the batch, one lookup per distinct destination), as the index of its group.
    fn route_batch(&self, st: &mut Outbound, n: usize) {
        st.route.clear();
        let table = self.allowed_ips.read();
        let mut memo = BatchMemo::new();
        for i in 0..n {
            let g = st
                .reader
                .packet(i, HEADROOM)
                .and_then(destination)
                .and_then(|dst| {
                    memo.get(dst, || {
                        let peer = table.lookup(dst)?;
                        Some(st.groups.of(&peer.0))
                    })
                });
            if g.is_none() {
                self.stats.drop_no_route.fetch_add(1, Ordering::Relaxed);
            }
            st.route.push(g);
        }
    }

    /// Drops the packets that are our own datagrams come back (see
    /// [`is_own_datagram`](Self::is_own_datagram)); outside the table's lock, as the check
    /// may take the bind's and a peer's.
    fn drop_own_datagrams(&self, st: &mut Outbound) {
        let mut port = None;
        for (i, r) in st.route.iter_mut().enumerate() {
            let Some(g) = *r else { continue };
            let own = st
                .reader
                .packet(i, HEADROOM)
                .is_some_and(|pkt| self.is_own_datagram(pkt, &st.groups.v[g].peer, &mut port));
            if own {
                self.stats.drop_loop.fetch_add(1, Ordering::Relaxed);
                *r = None;
            }
        }
    }

    /// The hand-over stage: carves the routed packets out of the slab into their groups, in
    /// batch order, then stages each group on its peer and kicks its sending.
    fn hand_over_outbound(&self, st: &mut Outbound) {
        if let Some(mut carver) = st.reader.carve() {
            for (i, r) in st.route.iter().enumerate() {
                if let Some(g) = *r {
                    let e = Elem::new(carver.slot(i), st.reader.sizes()[i]);
                    st.groups.v[g].elems.v.push(e);
                }
            }
        }
        let max_staged = self.max_staged_packets();
        for g in st.groups.v.drain(..) {
            if !g.peer.is_running() {
                continue; // elems dropped: their slots go back to the slab
            }
            g.peer.stage(g.elems, max_staged);
            g.peer.send_staged();
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
        let res = peer.send_buffers(self, &bufs);
        drop(bufs);
        if let Err(e) = &res {
            self.stats.send_errors.fetch_add(1, Ordering::Relaxed);
            tracing::debug!(device = %self.name, peer = %peer.public_key, "failed to send data packets: {e}");
        }
        peer.batch_sent(self, data, res.is_ok());
    }
}
