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

use vpn_packet::ip::{IpPacket, IpPacketMut, Ipv4Packet, Ipv6Packet, PROTOCOL_TCP, PROTOCOL_UDP};
use vpn_packet::tcp::{TcpHeader, TcpHeaderMut, ACK as TCP_FLAG_ACK, PSH as TCP_FLAG_PSH};
use vpn_packet::udp::{UdpHeader, UdpHeaderMut, UDP_HEADER_LEN};

use super::checksum::{checksum, checksum_no_fold, pseudo_header_no_fold};
use super::{
    VirtioHdr, MAX_PACKET, VIRTIO_NET_HDR_F_NEEDS_CSUM, VIRTIO_NET_HDR_GSO_TCPV4,
    VIRTIO_NET_HDR_GSO_TCPV6, VIRTIO_NET_HDR_GSO_UDP_L4, VIRTIO_NET_HDR_LEN,
};

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
    match IpPacket::parse(pkt) {
        Ok(IpPacket::V4(ip)) => {
            if ip.header_len() != 20 {
                // IPv4 options never coalesce.
                return Candidate::None;
            }
            match ip.protocol() {
                PROTOCOL_TCP if pkt.len() >= 40 => Candidate::Tcp4,
                PROTOCOL_UDP if udp_gro => Candidate::Udp4,
                _ => Candidate::None,
            }
        }
        Ok(IpPacket::V6(ip)) => match ip.next_header() {
            PROTOCOL_TCP if pkt.len() >= 60 => Candidate::Tcp6,
            PROTOCOL_UDP if pkt.len() >= 48 && udp_gro => Candidate::Udp6,
            _ => Candidate::None,
        },
        Err(_) => Candidate::None,
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
    /// The key of a packet: its addresses, the transport ports (`source << 16 | destination`)
    /// and `ack`.
    #[inline]
    fn new(ip: &IpPacket<'_>, ports: u32, ack: u32) -> Self {
        let mut src = [0u8; 16];
        let mut dst = [0u8; 16];
        let v6 = match ip {
            IpPacket::V4(p) => {
                src[..4].copy_from_slice(p.source_bytes());
                dst[..4].copy_from_slice(p.destination_bytes());
                false
            }
            IpPacket::V6(p) => {
                src = *p.source_bytes();
                dst = *p.destination_bytes();
                true
            }
        };
        Self {
            src,
            dst,
            ports,
            ack,
            v6,
        }
    }
}

/// The IP header fields two packets must share to merge (`ipHeadersCanCoalesce`): IPv4 ToS,
/// the three flag bits and TTL; IPv6 traffic class and hop limit (the version is in the
/// [`FlowKey`]). Read from a group's first packet when it is made; a packet that leads the group
/// later (prepended) had equal fields, and GRO rewrites none of them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct IpFields {
    tos: u8,
    flags: u8,
    ttl: u8,
}

impl IpFields {
    #[inline]
    fn of(ip: &IpPacket<'_>) -> Self {
        match ip {
            IpPacket::V4(p) => Self {
                tos: p.dscp_ecn(),
                flags: p.flags(),
                ttl: p.ttl(),
            },
            IpPacket::V6(p) => Self {
                tos: p.traffic_class(),
                flags: 0,
                ttl: p.hop_limit(),
            },
        }
    }
}

#[derive(Clone, Copy, Debug)]
struct TcpItem {
    key: FlowKey,
    ip: IpFields,
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
    ip: IpFields,
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
    fn verified(&self, pkt: &[u8]) -> bool {
        !self.verify || checksum_valid(pkt)
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
        let Some(seg) = TcpSegment::parse(pkt, v6) else {
            return Outcome::Noop;
        };

        let mut j = self.tcp.len();
        while j > 0 {
            j -= 1;
            let mut item = self.tcp[j];
            if item.key != seg.key {
                continue;
            }
            let head = self.first[item.index];
            let target = &bufs[head].as_ref()[offset..offset + self.own[head]];
            let fit = tcp_fit(&seg, target, self.lens[item.index], &item, v6);
            if fit == Fit::No {
                continue;
            }
            match self.merge_tcp(bufs, fit, pi, &seg, &mut item) {
                Merge::Done => {
                    self.tcp[j] = item;
                    if fit == Fit::Append && seg.psh {
                        // PSH ends the group: its first packet carries it.
                        let head_pkt = &mut bufs[head].as_mut()[offset..offset + self.own[head]];
                        if let Some(mut tcp) = tcp_header_mut(head_pkt) {
                            tcp.set_flags(tcp.flags() | TCP_FLAG_PSH);
                        }
                    }
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
            key: seg.key,
            ip: seg.ip,
            seq: seg.seq,
            index: pi,
            tail: pi,
            merged: 0,
            gso_size: seg.gso_size,
            iph_len: seg.iph_len as u8,
            tcph_len: seg.tcph_len as u8,
            psh: seg.psh,
        });
        Outcome::Inserted
    }

    /// Merges packet `pi` (`seg`) into `item` where `fit` says, unless a rule or a checksum
    /// forbids it; on [`Merge::Done`] only the bookkeeping is updated: setting PSH on the
    /// group's first packet is the caller's write.
    fn merge_tcp<B: AsRef<[u8]>>(
        &mut self,
        bufs: &[B],
        fit: Fit,
        pi: usize,
        seg: &TcpSegment<'_>,
        item: &mut TcpItem,
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
        if fit == Fit::Prepend && seg.psh {
            return Merge::PshEnding;
        }
        let target = &bufs[head].as_ref()[offset..offset + self.own[head]];
        if item.merged == 0 && !self.verified(target) {
            return Merge::ItemBadChecksum;
        }
        let pkt = &bufs[pi].as_ref()[offset..offset + pkt_len];
        if !self.verified(pkt) {
            return Merge::PacketBadChecksum;
        }
        if fit == Fit::Prepend {
            // The packet leads the group now; its headers are the group's.
            item.seq = seg.seq;
            self.next[pi] = head;
            self.first[slot] = pi;
        } else {
            if seg.psh {
                item.psh = true;
            }
            self.next[item.tail] = pi;
            item.tail = pi;
        }
        self.lens[slot] = merged_len;
        self.skip[slot] = headers;
        if seg.gso_size > item.gso_size {
            item.gso_size = seg.gso_size;
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
        let Some((ip, l4)) = ip_layout(pkt, v6) else {
            return Outcome::Noop;
        };
        let Ok(udp) = UdpHeader::parse(l4) else {
            return Outcome::Noop;
        };
        let payload = udp.payload().len();
        if payload == 0 {
            return Outcome::Noop;
        }
        let iph_len = len - l4.len();
        // len <= 65535 (checked in ip_layout), so the payload fits.
        let gso_size = payload as u16;
        let ports = u32::from(udp.source_port()) << 16 | u32::from(udp.destination_port());
        let key = FlowKey::new(&ip, ports, 0);
        let fields = IpFields::of(&ip);

        // Only the flow's newest item is considered, so datagrams are never reordered.
        let mut csum_invalid = false;
        if let Some(j) = self.udp.iter().rposition(|it| it.key == key) {
            let item = self.udp[j];
            let tail_ok = (self.lens[item.index] - usize::from(item.iph_len) - UDP_HEADER_LEN)
                % usize::from(item.gso_size)
                == 0;
            if fields == item.ip && tail_ok && gso_size <= item.gso_size {
                match self.merge_udp(bufs, pi, j) {
                    Merge::Done => return Outcome::Coalesced,
                    Merge::PacketBadChecksum => csum_invalid = true,
                    // A bad item is left alone: the new datagram starts a fresh item.
                    _ => {}
                }
            }
        }
        self.udp.push(UdpItem {
            key,
            ip: fields,
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
        if item.merged == 0 && (item.csum_invalid || !self.verified(target)) {
            return Merge::ItemBadChecksum;
        }
        let pkt = &bufs[pi].as_ref()[offset..offset + pkt_len];
        if !self.verified(pkt) {
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
            let done = finish_merged(pkt, self.lens[item.index]);
            debug_assert!(done.is_some(), "a merged TCP group's first packet parses");
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
            let done = finish_merged(pkt, len);
            debug_assert!(done.is_some(), "a merged UDP group's first packet parses");
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

/// Sets the headers of a merged packet of `len` bytes whose first packet is `pkt` (its headers
/// are the merged packet's): the IP length fields and the IPv4 header checksum, the UDP length,
/// and the folded, non-inverted pseudo-header sum in the transport checksum field for the
/// kernel to complete. `None` (nothing or part written) only for a packet GRO never merges.
fn finish_merged(pkt: &mut [u8], len: usize) -> Option<()> {
    let mut ip = IpPacketMut::parse(pkt).ok()?;
    let proto = ip.protocol();
    // The transport header first, while the IP length still describes `pkt`.
    let transport_len = u16::try_from(len.checked_sub(ip.header_len())?).ok()?;
    let psum = pseudo_header_no_fold(
        proto,
        ip.source_bytes(),
        ip.destination_bytes(),
        transport_len,
    );
    let partial = checksum(&[], psum);
    let l4 = ip.payload_mut().ok()?;
    if proto == PROTOCOL_TCP {
        TcpHeaderMut::parse(l4).ok()?.set_checksum(partial);
    } else {
        let mut udp = UdpHeaderMut::parse(l4).ok()?;
        udp.set_length(transport_len);
        udp.set_checksum(partial);
    }
    match ip {
        IpPacketMut::V4(mut ip) => {
            ip.set_total_len(u16::try_from(len).ok()?);
            ip.set_header_checksum(0);
            let sum = checksum_no_fold(ip.header(), 0);
            let c = !checksum(ip.options().ok()?, sum);
            ip.set_header_checksum(c);
        }
        IpPacketMut::V6(mut ip) => ip.set_payload_len(transport_len),
    }
    Some(())
}

/// The TCP header of a packet to rewrite (its first IP header's payload).
fn tcp_header_mut(pkt: &mut [u8]) -> Option<TcpHeaderMut<'_>> {
    let l4 = IpPacketMut::parse(pkt).ok()?.into_payload().ok()?;
    TcpHeaderMut::parse(l4).ok()
}

/// A GRO candidate's IP header and its payload (the transport segment), if its length fields
/// match the buffer, it is not an IPv4 fragment and it is at most 65 535 bytes.
#[inline]
fn ip_layout(pkt: &[u8], v6: bool) -> Option<(IpPacket<'_>, &[u8])> {
    if !(20..=MAX_PACKET).contains(&pkt.len()) {
        return None;
    }
    if v6 {
        let ip = Ipv6Packet::parse(pkt).ok()?;
        if usize::from(ip.payload_len()) + 40 != pkt.len() {
            return None;
        }
        Some((IpPacket::V6(ip), ip.payload().ok()?))
    } else {
        let ip = Ipv4Packet::parse(pkt).ok()?;
        if usize::from(ip.total_len()) != pkt.len() || ip.is_fragment() {
            // No GRO for fragments.
            return None;
        }
        Some((IpPacket::V4(ip), ip.payload().ok()?))
    }
}

/// What coalescing needs of a TCP packet: one that carries payload with ACK set and no flag
/// but PSH besides.
struct TcpSegment<'a> {
    iph_len: usize,
    tcph_len: usize,
    psh: bool,
    /// The payload's length, the segment size of a super-packet it heads.
    gso_size: u16,
    seq: u32,
    key: FlowKey,
    ip: IpFields,
    /// The TCP options, which must equal those of the group it joins.
    options: &'a [u8],
}

impl<'a> TcpSegment<'a> {
    /// The packet's TCP fields (IPv6 if `v6`), or `None` if it is not a candidate: a bad
    /// header, a flag other than ACK and PSH, or no payload.
    #[inline]
    fn parse(pkt: &'a [u8], v6: bool) -> Option<Self> {
        let (ip, l4) = ip_layout(pkt, v6)?;
        let tcp = TcpHeader::parse(l4).ok()?;
        let flags = tcp.flags();
        if flags != TCP_FLAG_ACK && flags != TCP_FLAG_ACK | TCP_FLAG_PSH {
            return None;
        }
        let payload = tcp.payload().len();
        if payload == 0 {
            return None;
        }
        let ports = u32::from(tcp.source_port()) << 16 | u32::from(tcp.destination_port());
        Some(TcpSegment {
            iph_len: pkt.len() - l4.len(),
            tcph_len: tcp.header_len(),
            psh: flags & TCP_FLAG_PSH != 0,
            // The packet is at most 65535 bytes (checked in ip_layout), so the payload fits.
            gso_size: payload as u16,
            seq: tcp.seq(),
            key: FlowKey::new(&ip, ports, tcp.ack()),
            ip: IpFields::of(&ip),
            options: tcp.options(),
        })
    }
}

/// The TCP options of a group's first packet (a candidate, so its layout holds).
#[inline]
fn tcp_options(pkt: &[u8], v6: bool) -> Option<&[u8]> {
    let (_, l4) = ip_layout(pkt, v6)?;
    Some(TcpHeader::parse(l4).ok()?.options())
}

/// `tcpPacketsCanCoalesce`: whether segment `seg` follows (append) or precedes (prepend)
/// `item`, whose first packet is `target` and whose merged length is `target_len`.
fn tcp_fit(
    seg: &TcpSegment<'_>,
    target: &[u8],
    target_len: usize,
    item: &TcpItem,
    v6: bool,
) -> Fit {
    if seg.tcph_len != usize::from(item.tcph_len) {
        return Fit::No;
    }
    if seg.tcph_len > 20 && tcp_options(target, v6) != Some(seg.options) {
        // Options differ.
        return Fit::No;
    }
    if seg.ip != item.ip {
        return Fit::No;
    }
    let item_bytes = u32::from(item.gso_size) * (u32::from(item.merged) + 1);
    if seg.seq == item.seq.wrapping_add(item_bytes) {
        // After the item: not past a PSH, not after a short segment, not larger.
        let target_payload = target_len - seg.iph_len - seg.tcph_len;
        if item.psh
            || target_payload % usize::from(item.gso_size) != 0
            || seg.gso_size > item.gso_size
        {
            return Fit::No;
        }
        Fit::Append
    } else if seg.seq.wrapping_add(u32::from(seg.gso_size)) == item.seq {
        // Before the item: not with PSH, not smaller, not larger once others merged.
        if seg.psh
            || seg.gso_size < item.gso_size
            || (seg.gso_size > item.gso_size && item.merged > 0)
        {
            return Fit::No;
        }
        Fit::Prepend
    } else {
        Fit::No
    }
}

/// Whether the transport checksum of `pkt` (with its pseudo-header) verifies: the payload of
/// its IP header, up to the declared length, summed with the addresses, the protocol and that
/// length.
pub(crate) fn checksum_valid(pkt: &[u8]) -> bool {
    let Ok(ip) = IpPacket::parse(pkt) else {
        return false;
    };
    let Ok(l4) = ip.payload() else {
        return false;
    };
    let Ok(transport_len) = u16::try_from(l4.len()) else {
        return false;
    };
    let psum = pseudo_header_no_fold(
        ip.protocol(),
        ip.source_bytes(),
        ip.destination_bytes(),
        transport_len,
    );
    !checksum(l4, psum) == 0
}

fn invalid(msg: &'static str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, msg)
}

#[cfg(test)]
mod tests;
