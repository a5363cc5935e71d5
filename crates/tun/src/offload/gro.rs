//! GRO on the write path: merge a batch's TCP segments (and, with USO, UDP datagrams) of one
//! flow into super-packets the kernel splits again, so a batch of 128 decrypted packets becomes
//! a handful of TUN writes (`handleGRO` in wireguard-go's `tun/offload_linux.go`).
//!
//! One pass over the batch; the tables live in [`GroTable`] and are cleared, not freed, per
//! call, so nothing is allocated once the table has seen a full batch. Flows are found by a
//! newest-first scan of the items, which is also the order wireguard-go visits a flow's items.
//! Packets are not moved: a group is a chain of the batch's buffers, its first packet whole
//! and the payloads of the rest, which the writer hands to the kernel in one `writev`
//! ([`segments`](GroTable::segments)). Copying the payloads behind the first packet instead
//! (as wireguard-go does) wrote into cold lines of that buffer, which the kernel then read
//! back.

use std::io;

use super::checksum::{checksum, pseudo_header_no_fold};
use super::{
    be16, be32, put16, VirtioHdr, IPPROTO_TCP, IPPROTO_UDP, MAX_PACKET, TCP_FLAGS_OFFSET,
    TCP_FLAG_ACK, TCP_FLAG_PSH, UDP_HEADER_LEN, VIRTIO_NET_HDR_F_NEEDS_CSUM,
    VIRTIO_NET_HDR_GSO_TCPV4, VIRTIO_NET_HDR_GSO_TCPV6, VIRTIO_NET_HDR_GSO_UDP_L4,
    VIRTIO_NET_HDR_LEN,
};

const IPV4_SRC_AT: usize = 12;
const IPV6_SRC_AT: usize = 8;
const IPV4_MORE_FRAGMENTS: u8 = 0x20;

/// What kind of GRO candidate a packet is (`packetIsGROCandidate`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Candidate {
    /// Written as-is with a zero virtio header.
    None,
    /// TCP over IPv4 without options.
    Tcp4,
    /// TCP over IPv6.
    Tcp6,
    /// UDP over IPv4 without options (only with UDP GRO).
    Udp4,
    /// UDP over IPv6 (only with UDP GRO).
    Udp6,
}

/// Classifies `pkt` (the IP packet) for GRO; `udp_gro` is whether the kernel took USO.
pub fn candidate(pkt: &[u8], udp_gro: bool) -> Candidate {
    if pkt.len() < 28 {
        return Candidate::None;
    }
    match pkt[0] >> 4 {
        4 => {
            if pkt[0] & 0x0f != 5 {
                // IPv4 options never coalesce.
                return Candidate::None;
            }
            match pkt[9] {
                IPPROTO_TCP if pkt.len() >= 40 => Candidate::Tcp4,
                IPPROTO_UDP if udp_gro => Candidate::Udp4,
                _ => Candidate::None,
            }
        }
        6 => match pkt[6] {
            IPPROTO_TCP if pkt.len() >= 60 => Candidate::Tcp6,
            IPPROTO_UDP if pkt.len() >= 48 && udp_gro => Candidate::Udp6,
            _ => Candidate::None,
        },
        _ => Candidate::None,
    }
}

/// Addresses, ports and (TCP only) the ACK number: segments with different ACKs never merge.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct FlowKey {
    src: [u8; 16],
    dst: [u8; 16],
    ports: u32,
    ack: u32,
    v6: bool,
}

impl FlowKey {
    fn new(pkt: &[u8], v6: bool, th_at: usize, ack: u32) -> Self {
        let (at, n) = if v6 {
            (IPV6_SRC_AT, 16)
        } else {
            (IPV4_SRC_AT, 4)
        };
        let mut src = [0u8; 16];
        let mut dst = [0u8; 16];
        src[..n].copy_from_slice(&pkt[at..at + n]);
        dst[..n].copy_from_slice(&pkt[at + n..at + 2 * n]);
        Self {
            src,
            dst,
            ports: be32(pkt, th_at),
            ack,
            v6,
        }
    }
}

#[derive(Clone, Copy, Debug)]
struct TcpItem {
    key: FlowKey,
    /// Sequence number of the first byte in the (possibly merged) packet.
    seq: u32,
    /// The group's slot (in `to_write`).
    index: usize,
    /// The buffer of the group's last segment.
    tail: usize,
    merged: u16,
    gso_size: u16,
    iph_len: u8,
    tcph_len: u8,
    psh: bool,
}

#[derive(Clone, Copy, Debug)]
struct UdpItem {
    key: FlowKey,
    /// The group's slot (in `to_write`).
    index: usize,
    /// The buffer of the group's last segment.
    tail: usize,
    merged: u16,
    gso_size: u16,
    iph_len: u8,
    /// The item's checksum is known bad (a `false` means unknown, not valid).
    csum_invalid: bool,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Fit {
    Append,
    Prepend,
    No,
}

enum Merge {
    Done,
    TooLong,
    PshEnding,
    ItemBadChecksum,
    PacketBadChecksum,
}

enum Outcome {
    /// Not a candidate: write as-is.
    Noop,
    /// Became (or stays) the head of a group: write it.
    Inserted,
    /// Merged into an earlier buffer: do not write.
    Coalesced,
}

/// Reusable GRO state for one writer (`tcpGROTable` + `udpGROTable` + the write list).
///
/// [`coalesce`](Self::coalesce) rewrites headers in place; afterwards
/// [`to_write`](Self::to_write) lists the slots to hand to the kernel, [`len`](Self::len) their
/// packet lengths and [`segments`](Self::segments) the pieces of each (the first with the
/// virtio header in the 10 bytes before `offset`).
#[derive(Debug)]
pub struct GroTable {
    tcp: Vec<TcpItem>,
    udp: Vec<UdpItem>,
    to_write: Vec<usize>,
    /// Per slot: the packet length after coalescing.
    lens: Vec<usize>,
    /// Per buffer: the length of its own packet.
    own: Vec<usize>,
    /// Per slot: the buffer holding its first packet (the slot's own, unless a packet was
    /// prepended to its group).
    first: Vec<usize>,
    /// Per buffer: the buffer of the group's next segment, or [`END`].
    next: Vec<usize>,
    /// Per slot: the header bytes each later segment's payload starts after.
    skip: Vec<usize>,
    /// The `offset` of the last [`coalesce`](Self::coalesce).
    offset: usize,
    /// Whether a packet's transport checksum is verified before it is merged (see
    /// [`set_verify_checksums`](Self::set_verify_checksums)).
    verify: bool,
}

impl Default for GroTable {
    fn default() -> Self {
        Self::new()
    }
}

impl GroTable {
    /// A table sized for batches of 128 (it grows once if given more, then stays).
    pub fn new() -> Self {
        const BATCH: usize = 128;
        Self {
            tcp: Vec::with_capacity(BATCH),
            udp: Vec::with_capacity(BATCH),
            to_write: Vec::with_capacity(BATCH),
            lens: Vec::with_capacity(BATCH),
            own: Vec::with_capacity(BATCH),
            first: Vec::with_capacity(BATCH),
            next: Vec::with_capacity(BATCH),
            skip: Vec::with_capacity(BATCH),
            offset: VIRTIO_NET_HDR_LEN,
            verify: true,
        }
    }

    /// Whether packets' transport checksums are verified before they are merged (the default,
    /// as wireguard-go does). A merged packet goes to the kernel as `CHECKSUM_PARTIAL`, which the
    /// local stack takes as verified, so a packet with a bad checksum merged without this check
    /// is delivered where alone it would have been dropped.
    ///
    /// A WireGuard device turns it off: every packet it writes was authenticated by Poly1305 a
    /// moment before, which is what the kernel's own WireGuard relies on to mark every packet it
    /// receives `CHECKSUM_UNNECESSARY` ("all checksums of every layer of encapsulation have
    /// already been checked"). Verifying costs a pass over every payload byte.
    pub fn set_verify_checksums(&mut self, verify: bool) {
        self.verify = verify;
    }

    /// The transport checksum check of merging, unless verification is off.
    fn verified(&self, pkt: &[u8], iph_len: u8, proto: u8, v6: bool) -> bool {
        !self.verify || checksum_valid(pkt, iph_len, proto, v6)
    }

    /// Slots (indices into the `bufs` given to [`coalesce`](Self::coalesce)) to write, in
    /// batch order.
    pub fn to_write(&self) -> &[usize] {
        &self.to_write
    }

    /// The packet length of slot `i` after coalescing (the virtio header not counted).
    pub fn len(&self, i: usize) -> usize {
        self.lens.get(i).copied().unwrap_or(0)
    }

    /// The pieces of the frame of slot `i` (one of [`to_write`](Self::to_write)) in order, as
    /// (buffer index, byte range in that buffer) for the `bufs` given to
    /// [`coalesce`](Self::coalesce): the first packet with its virtio header, then each merged
    /// packet's payload. Empty for an index out of range or after a failed call.
    pub fn segments(&self, i: usize) -> Segments<'_> {
        let (at, skip) = match self.first.get(i) {
            Some(&f) => (f, self.skip[i]),
            None => (END, 0),
        };
        Segments {
            table: self,
            at,
            offset: self.offset,
            skip,
            head: true,
        }
    }

    /// Slot `i`'s frame (virtio header and packet) gathered into one vector: what the kernel
    /// receives. Allocates: for tests, tools, and a writer's rare frame of more pieces than it
    /// gathers at once; the writer's path is [`segments`](Self::segments).
    pub fn frame<B: AsRef<[u8]>>(&self, bufs: &[B], i: usize) -> Vec<u8> {
        let mut out = Vec::with_capacity(VIRTIO_NET_HDR_LEN + self.len(i));
        for (b, r) in self.segments(i) {
            out.extend_from_slice(&bufs[b].as_ref()[r]);
        }
        out
    }

    /// Whether the last batch was empty.
    pub fn is_empty(&self) -> bool {
        self.lens.is_empty()
    }

    /// How many packets of the last batch were merged into another packet.
    pub fn coalesced(&self) -> usize {
        self.lens.len() - self.to_write.len()
    }

    /// Runs GRO over the batch: packet `i` is `bufs[i][offset..offset + sizes[i]]` and the 10
    /// bytes before `offset` receive the virtio header. `udp_gro` enables UDP coalescing (the
    /// kernel took USO).
    ///
    /// Only the headers of a group's first packet and the virtio headers are written; no
    /// payload moves, so a buffer needs no room beyond its packet. Errors only on a malformed
    /// call (offset below 10, a size past its buffer, more than 65 535 buffers), before anything
    /// is modified.
    pub fn coalesce<B: AsRef<[u8]> + AsMut<[u8]>>(
        &mut self,
        bufs: &mut [B],
        sizes: &[usize],
        offset: usize,
        udp_gro: bool,
    ) -> io::Result<()> {
        self.tcp.clear();
        self.udp.clear();
        self.to_write.clear();
        self.lens.clear();
        self.own.clear();
        self.first.clear();
        self.next.clear();
        self.skip.clear();
        if bufs.len() != sizes.len() || bufs.len() > usize::from(u16::MAX) {
            return Err(invalid("bufs and sizes differ in length or exceed 65535"));
        }
        if offset < VIRTIO_NET_HDR_LEN {
            return Err(invalid("offset leaves no room for the virtio header"));
        }
        for (b, &n) in bufs.iter().zip(sizes) {
            if offset
                .checked_add(n)
                .is_none_or(|end| end > b.as_ref().len())
            {
                return Err(invalid("packet size runs past its buffer"));
            }
        }
        self.offset = offset;
        self.lens.extend_from_slice(sizes);
        self.own.extend_from_slice(sizes);
        self.first.extend(0..bufs.len());
        self.next.resize(bufs.len(), END);
        self.skip.resize(bufs.len(), 0);
        if bufs.len() == 1 {
            // Nothing to merge with (a quiet tunnel writes packet by packet): no flow lookup.
            self.to_write.push(0);
            self.finish(bufs);
            return Ok(());
        }

        for i in 0..bufs.len() {
            let pkt = &bufs[i].as_ref()[offset..offset + self.lens[i]];
            let outcome = match candidate(pkt, udp_gro) {
                Candidate::None => Outcome::Noop,
                Candidate::Tcp4 => self.tcp_gro(bufs, i, false),
                Candidate::Tcp6 => self.tcp_gro(bufs, i, true),
                Candidate::Udp4 => self.udp_gro(bufs, i, false),
                Candidate::Udp6 => self.udp_gro(bufs, i, true),
            };
            match outcome {
                Outcome::Noop | Outcome::Inserted => self.to_write.push(i),
                Outcome::Coalesced => {}
            }
        }
        self.finish(bufs);
        Ok(())
    }

    fn tcp_gro<B: AsRef<[u8]> + AsMut<[u8]>>(
        &mut self,
        bufs: &mut [B],
        pi: usize,
        v6: bool,
    ) -> Outcome {
        let offset = self.offset;
        let len = self.own[pi];
        let pkt = &bufs[pi].as_ref()[offset..offset + len];
        let Some(TcpSegment {
            iph_len,
            tcph_len,
            psh,
            gso_size,
            seq,
            key,
        }) = TcpSegment::parse(pkt, v6, len)
        else {
            return Outcome::Noop;
        };

        let mut j = self.tcp.len();
        while j > 0 {
            j -= 1;
            let mut item = self.tcp[j];
            if item.key != key {
                continue;
            }
            let head = self.first[item.index];
            let pkt = &bufs[pi].as_ref()[offset..offset + len];
            let target = &bufs[head].as_ref()[offset..offset + self.own[head]];
            let fit = tcp_fit(
                pkt,
                target,
                self.lens[item.index],
                iph_len,
                tcph_len,
                seq,
                psh,
                gso_size,
                &item,
            );
            if fit == Fit::No {
                continue;
            }
            match self.merge_tcp(bufs, fit, pi, gso_size, seq, psh, &mut item, v6) {
                Merge::Done => {
                    self.tcp[j] = item;
                    return Outcome::Coalesced;
                }
                Merge::ItemBadChecksum => {
                    // Its buffer is still written (it is in to_write) with a zero header.
                    self.tcp.remove(j);
                }
                Merge::PacketBadChecksum => return Outcome::Noop,
                Merge::TooLong | Merge::PshEnding => {}
            }
        }
        self.tcp.push(TcpItem {
            key,
            seq,
            index: pi,
            tail: pi,
            merged: 0,
            gso_size,
            iph_len: iph_len as u8,
            tcph_len: tcph_len as u8,
            psh,
        });
        Outcome::Inserted
    }

    #[allow(clippy::too_many_arguments)]
    fn merge_tcp<B: AsRef<[u8]> + AsMut<[u8]>>(
        &mut self,
        bufs: &mut [B],
        fit: Fit,
        pi: usize,
        gso_size: u16,
        seq: u32,
        psh: bool,
        item: &mut TcpItem,
        v6: bool,
    ) -> Merge {
        let offset = self.offset;
        let slot = item.index;
        let head = self.first[slot];
        let headers = usize::from(item.iph_len) + usize::from(item.tcph_len);
        let pkt_len = self.own[pi];
        let merged_len = self.lens[slot] + pkt_len - headers;
        if merged_len > MAX_PACKET || usize::from(item.merged) + 2 > MAX_SEGMENTS {
            return Merge::TooLong;
        }
        let iph = item.iph_len;
        if fit == Fit::Prepend && psh {
            return Merge::PshEnding;
        }
        let target = &bufs[head].as_ref()[offset..offset + self.own[head]];
        if item.merged == 0 && !self.verified(target, iph, IPPROTO_TCP, v6) {
            return Merge::ItemBadChecksum;
        }
        let pkt = &bufs[pi].as_ref()[offset..offset + pkt_len];
        if !self.verified(pkt, iph, IPPROTO_TCP, v6) {
            return Merge::PacketBadChecksum;
        }
        if fit == Fit::Prepend {
            // The packet leads the group now; its headers are the group's.
            item.seq = seq;
            self.next[pi] = head;
            self.first[slot] = pi;
        } else {
            if psh {
                item.psh = true;
                bufs[head].as_mut()[offset + usize::from(iph) + TCP_FLAGS_OFFSET] |= TCP_FLAG_PSH;
            }
            self.next[item.tail] = pi;
            item.tail = pi;
        }
        self.lens[slot] = merged_len;
        self.skip[slot] = headers;
        if gso_size > item.gso_size {
            item.gso_size = gso_size;
        }
        item.merged += 1;
        Merge::Done
    }

    fn udp_gro<B: AsRef<[u8]> + AsMut<[u8]>>(
        &mut self,
        bufs: &mut [B],
        pi: usize,
        v6: bool,
    ) -> Outcome {
        let offset = self.offset;
        let len = self.own[pi];
        let pkt = &bufs[pi].as_ref()[offset..offset + len];
        let Some(iph_len) = ip_layout(pkt, v6, len) else {
            return Outcome::Noop;
        };
        if len < iph_len + UDP_HEADER_LEN {
            return Outcome::Noop;
        }
        let payload = len - iph_len - UDP_HEADER_LEN;
        if payload == 0 {
            return Outcome::Noop;
        }
        let gso_size = payload as u16;
        let key = FlowKey::new(pkt, v6, iph_len, 0);

        // Only the flow's newest item is considered, so datagrams are never reordered.
        let mut csum_invalid = false;
        if let Some(j) = self.udp.iter().rposition(|it| it.key == key) {
            let item = self.udp[j];
            let head = self.first[item.index];
            let target = &bufs[head].as_ref()[offset..offset + self.own[head]];
            let tail_ok = (self.lens[item.index] - usize::from(item.iph_len) - UDP_HEADER_LEN)
                % usize::from(item.gso_size)
                == 0;
            if ip_headers_can_coalesce(pkt, target) && tail_ok && gso_size <= item.gso_size {
                match self.merge_udp(bufs, pi, j, v6) {
                    Merge::Done => return Outcome::Coalesced,
                    Merge::PacketBadChecksum => csum_invalid = true,
                    // A bad item is left alone: the new datagram starts a fresh item.
                    _ => {}
                }
            }
        }
        self.udp.push(UdpItem {
            key,
            index: pi,
            tail: pi,
            merged: 0,
            gso_size,
            iph_len: iph_len as u8,
            csum_invalid,
        });
        Outcome::Inserted
    }

    fn merge_udp<B: AsRef<[u8]> + AsMut<[u8]>>(
        &mut self,
        bufs: &mut [B],
        pi: usize,
        j: usize,
        v6: bool,
    ) -> Merge {
        let offset = self.offset;
        let item = self.udp[j];
        let slot = item.index;
        let head = self.first[slot];
        let headers = usize::from(item.iph_len) + UDP_HEADER_LEN;
        let pkt_len = self.own[pi];
        let merged_len = self.lens[slot] + pkt_len - headers;
        if merged_len > MAX_PACKET || usize::from(item.merged) + 2 > MAX_UDP_SEGMENTS {
            return Merge::TooLong;
        }
        let target = &bufs[head].as_ref()[offset..offset + self.own[head]];
        if item.merged == 0
            && (item.csum_invalid || !self.verified(target, item.iph_len, IPPROTO_UDP, v6))
        {
            return Merge::ItemBadChecksum;
        }
        let pkt = &bufs[pi].as_ref()[offset..offset + pkt_len];
        if !self.verified(pkt, item.iph_len, IPPROTO_UDP, v6) {
            return Merge::PacketBadChecksum;
        }
        self.next[item.tail] = pi;
        self.lens[slot] = merged_len;
        self.skip[slot] = headers;
        let item = &mut self.udp[j];
        item.tail = pi;
        item.merged += 1;
        Merge::Done
    }

    /// Writes every virtio header: zero for single packets, a GSO header plus fixed-up IP
    /// lengths and the pseudo-header checksum for merged groups
    /// (`applyTCPCoalesceAccounting`, `applyUDPCoalesceAccounting`).
    fn finish<B: AsRef<[u8]> + AsMut<[u8]>>(&mut self, bufs: &mut [B]) {
        let offset = self.offset;
        let hdr_at = offset - VIRTIO_NET_HDR_LEN;
        for &i in &self.to_write {
            // Also covers items dropped for a bad checksum, which wireguard-go leaves with
            // whatever bytes were in the headroom.
            bufs[self.first[i]].as_mut()[hdr_at..offset].fill(0);
        }
        for item in self.tcp.iter().filter(|it| it.merged > 0) {
            let iph = usize::from(item.iph_len);
            let hdr = VirtioHdr {
                flags: VIRTIO_NET_HDR_F_NEEDS_CSUM,
                gso_type: if item.key.v6 {
                    VIRTIO_NET_HDR_GSO_TCPV6
                } else {
                    VIRTIO_NET_HDR_GSO_TCPV4
                },
                hdr_len: (iph + usize::from(item.tcph_len)) as u16,
                gso_size: item.gso_size,
                csum_start: iph as u16,
                csum_offset: 16,
            };
            let head = self.first[item.index];
            let buf = bufs[head].as_mut();
            let ok = hdr.encode(&mut buf[hdr_at..offset]);
            debug_assert!(ok);
            let pkt = &mut buf[offset..offset + self.own[head]];
            finish_ip_and_pseudo(
                pkt,
                self.lens[item.index],
                iph,
                item.key.v6,
                IPPROTO_TCP,
                16,
            );
        }
        for item in self.udp.iter().filter(|it| it.merged > 0) {
            let iph = usize::from(item.iph_len);
            let hdr = VirtioHdr {
                flags: VIRTIO_NET_HDR_F_NEEDS_CSUM,
                gso_type: VIRTIO_NET_HDR_GSO_UDP_L4,
                hdr_len: (iph + UDP_HEADER_LEN) as u16,
                gso_size: item.gso_size,
                csum_start: iph as u16,
                csum_offset: 6,
            };
            let head = self.first[item.index];
            let len = self.lens[item.index];
            let buf = bufs[head].as_mut();
            let ok = hdr.encode(&mut buf[hdr_at..offset]);
            debug_assert!(ok);
            let pkt = &mut buf[offset..offset + self.own[head]];
            put16(pkt, iph + 4, (len - iph) as u16);
            finish_ip_and_pseudo(pkt, len, iph, item.key.v6, IPPROTO_UDP, 6);
        }
    }
}

/// Most packets in one group: the pieces of one `writev` (`IOV_MAX`).
pub const MAX_SEGMENTS: usize = 1024;

/// Most datagrams in one UDP group: the kernel refuses a UDP GSO packet of more segments
/// (`UDP_MAX_SEGMENTS`: 64 on older kernels, 128 on newer ones) with `EINVAL`.
pub const MAX_UDP_SEGMENTS: usize = 64;

/// The end of a group's chain of segments.
const END: usize = usize::MAX;

/// The pieces of one frame to write ([`GroTable::segments`]).
#[derive(Debug)]
pub struct Segments<'a> {
    table: &'a GroTable,
    /// The buffer of the next piece, or [`END`].
    at: usize,
    offset: usize,
    skip: usize,
    head: bool,
}

impl Iterator for Segments<'_> {
    type Item = (usize, std::ops::Range<usize>);

    fn next(&mut self) -> Option<Self::Item> {
        let b = self.at;
        let own = *self.table.own.get(b)?;
        let start = if self.head {
            self.offset - VIRTIO_NET_HDR_LEN
        } else {
            self.offset + self.skip
        };
        self.head = false;
        self.at = self.table.next[b];
        Some((b, start..self.offset + own))
    }
}

/// Sets the IP length fields of a merged packet of `len` bytes (and the IPv4 header checksum),
/// then stores the folded, non-inverted pseudo-header sum in the transport checksum field for
/// the kernel to complete. `pkt` is its first packet, whose headers are the merged packet's.
fn finish_ip_and_pseudo(
    pkt: &mut [u8],
    len: usize,
    iph: usize,
    v6: bool,
    proto: u8,
    csum_offset: usize,
) {
    let transport_len = (len - iph) as u16;
    let (at, n) = if v6 {
        put16(pkt, 4, transport_len);
        (IPV6_SRC_AT, 16)
    } else {
        put16(pkt, 2, len as u16);
        put16(pkt, 10, 0);
        let c = !checksum(&pkt[..iph], 0);
        put16(pkt, 10, c);
        (IPV4_SRC_AT, 4)
    };
    let psum = pseudo_header_no_fold(
        proto,
        &pkt[at..at + n],
        &pkt[at + n..at + 2 * n],
        transport_len,
    );
    put16(pkt, iph + csum_offset, checksum(&[], psum));
}

/// The IP header length of a GRO candidate if its length fields match the buffer, it is not
/// an IPv4 fragment and it is at most 65 535 bytes.
fn ip_layout(pkt: &[u8], v6: bool, len: usize) -> Option<usize> {
    if !(20..=MAX_PACKET).contains(&len) {
        return None;
    }
    if v6 {
        (len >= 40 && usize::from(be16(pkt, 4)) == len - 40).then_some(40)
    } else {
        let iph_len = usize::from(pkt[0] & 0x0f) * 4;
        if usize::from(be16(pkt, 2)) != len || len < iph_len {
            return None;
        }
        if pkt[6] & IPV4_MORE_FRAGMENTS != 0 || pkt[6] & 0x1f != 0 || pkt[7] != 0 {
            // No GRO for fragments.
            return None;
        }
        Some(iph_len)
    }
}

/// Whether two packets' IP headers allow merging: same version; IPv4 same ToS, DF/reserved
/// bits and TTL; IPv6 same traffic class and hop limit.
fn ip_headers_can_coalesce(a: &[u8], b: &[u8]) -> bool {
    if a.len() < 9 || b.len() < 9 {
        return false;
    }
    if a[0] >> 4 == 6 {
        // Version + the traffic class's high nibble, then its low nibble.
        a[0] == b[0] && a[1] >> 4 == b[1] >> 4 && a[7] == b[7]
    } else {
        a[1] == b[1] && a[6] >> 5 == b[6] >> 5 && a[8] == b[8]
    }
}

/// What coalescing needs of a TCP packet: one that carries payload with ACK set and no flag
/// but PSH besides.
struct TcpSegment {
    iph_len: usize,
    tcph_len: usize,
    psh: bool,
    /// The payload's length, the segment size of a super-packet it heads.
    gso_size: u16,
    seq: u32,
    key: FlowKey,
}

impl TcpSegment {
    /// The packet's TCP fields (`len` bytes, IPv6 if `v6`), or `None` if it is not a
    /// candidate: a bad header, a flag other than ACK and PSH, or no payload.
    fn parse(pkt: &[u8], v6: bool, len: usize) -> Option<TcpSegment> {
        let iph_len = ip_layout(pkt, v6, len)?;
        if len < iph_len + TCP_FLAGS_OFFSET + 1 {
            return None;
        }
        let tcph_len = usize::from(pkt[iph_len + 12] >> 4) * 4;
        if !(20..=60).contains(&tcph_len) || len < iph_len + tcph_len {
            return None;
        }
        let flags = pkt[iph_len + TCP_FLAGS_OFFSET];
        if flags != TCP_FLAG_ACK && flags != TCP_FLAG_ACK | TCP_FLAG_PSH {
            return None;
        }
        let payload = len - iph_len - tcph_len;
        if payload == 0 {
            return None;
        }
        Some(TcpSegment {
            iph_len,
            tcph_len,
            psh: flags & TCP_FLAG_PSH != 0,
            // len <= 65535 (checked in ip_layout), so the payload fits.
            gso_size: payload as u16,
            seq: be32(pkt, iph_len + 4),
            key: FlowKey::new(pkt, v6, iph_len, be32(pkt, iph_len + 8)),
        })
    }
}

/// `tcpPacketsCanCoalesce`: whether packet `pkt` follows (append) or precedes (prepend)
/// `item`, whose first packet is `target` and whose merged length is `target_len`.
#[allow(clippy::too_many_arguments)]
fn tcp_fit(
    pkt: &[u8],
    target: &[u8],
    target_len: usize,
    iph_len: usize,
    tcph_len: usize,
    seq: u32,
    psh: bool,
    gso_size: u16,
    item: &TcpItem,
) -> Fit {
    if tcph_len != usize::from(item.tcph_len) {
        return Fit::No;
    }
    let item_iph = usize::from(item.iph_len);
    if tcph_len > 20
        && pkt[iph_len + 20..iph_len + tcph_len] != target[item_iph + 20..item_iph + tcph_len]
    {
        // Options differ.
        return Fit::No;
    }
    if !ip_headers_can_coalesce(pkt, target) {
        return Fit::No;
    }
    let item_bytes = u32::from(item.gso_size) * (u32::from(item.merged) + 1);
    if seq == item.seq.wrapping_add(item_bytes) {
        // After the item: not past a PSH, not after a short segment, not larger.
        let target_payload = target_len - iph_len - tcph_len;
        if item.psh || target_payload % usize::from(item.gso_size) != 0 || gso_size > item.gso_size
        {
            return Fit::No;
        }
        Fit::Append
    } else if seq.wrapping_add(u32::from(gso_size)) == item.seq {
        // Before the item: not with PSH, not smaller, not larger once others merged.
        if psh || gso_size < item.gso_size || (gso_size > item.gso_size && item.merged > 0) {
            return Fit::No;
        }
        Fit::Prepend
    } else {
        Fit::No
    }
}

/// Whether the transport checksum of `pkt` (with its pseudo-header) verifies.
pub(crate) fn checksum_valid(pkt: &[u8], iph_len: u8, proto: u8, v6: bool) -> bool {
    let iph = usize::from(iph_len);
    let (at, n) = if v6 {
        (IPV6_SRC_AT, 16)
    } else {
        (IPV4_SRC_AT, 4)
    };
    if pkt.len() < iph.max(at + 2 * n) || pkt.len() > MAX_PACKET {
        return false;
    }
    let psum = pseudo_header_no_fold(
        proto,
        &pkt[at..at + n],
        &pkt[at + n..at + 2 * n],
        (pkt.len() - iph) as u16,
    );
    !checksum(&pkt[iph..], psum) == 0
}

fn invalid(msg: &'static str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, msg)
}

#[cfg(test)]
mod tests;
