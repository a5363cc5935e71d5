//! GRO on the write path: merge a batch's TCP segments (and, with USO, UDP datagrams) of one
//! flow into super-packets the kernel splits again, so a batch of 128 decrypted packets becomes
//! a handful of TUN writes (`handleGRO` in wireguard-go's `tun/offload_linux.go`).
//!
//! One pass over the batch; the tables live in [`GroTable`] and are cleared, not freed, per
//! call, so nothing is allocated once the table has seen a full batch. Flows are found by a
//! newest-first scan of the items, which is also the order the reference visits a flow's items.
//! Packets are merged into the spare room after the first packet of a group (the caller's
//! buffers are ~64 KiB); a prepend swaps buffer slots so the group keeps the earlier slot.

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
    index: usize,
    merged: u16,
    gso_size: u16,
    iph_len: u8,
    tcph_len: u8,
    psh: bool,
}

#[derive(Clone, Copy, Debug)]
struct UdpItem {
    key: FlowKey,
    index: usize,
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
    NoRoom,
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
/// [`coalesce`](Self::coalesce) rewrites the batch in place; afterwards
/// [`to_write`](Self::to_write) lists the buffers to hand to the kernel (each with its virtio
/// header in the 10 bytes before `offset`) and [`len`](Self::len) their new packet lengths.
#[derive(Debug)]
pub struct GroTable {
    tcp: Vec<TcpItem>,
    udp: Vec<UdpItem>,
    to_write: Vec<usize>,
    lens: Vec<usize>,
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

    /// Indices (into the `bufs` given to [`coalesce`](Self::coalesce)) of the buffers to write,
    /// in batch order.
    pub fn to_write(&self) -> &[usize] {
        &self.to_write
    }

    /// The packet length (after `offset`) of buffer `i` after coalescing.
    pub fn len(&self, i: usize) -> usize {
        self.lens.get(i).copied().unwrap_or(0)
    }

    /// Whether the last batch was empty.
    pub fn is_empty(&self) -> bool {
        self.lens.is_empty()
    }

    /// How many packets of the last batch were merged into another packet.
    pub fn coalesced(&self) -> usize {
        self.lens.len() - self.to_write.len()
    }

    /// Runs GRO over the batch: packet `i` is `bufs[i][offset..offset + sizes[i]]`, the bytes
    /// after it up to `bufs[i].len()` are room to merge into and the 10 bytes before `offset`
    /// receive the virtio header. `udp_gro` enables UDP coalescing (the kernel took USO).
    ///
    /// Merged buffers may trade places in `bufs` (a prepend keeps the group in the earlier
    /// slot). Errors only on a malformed call (offset below 10, a size past its buffer, more
    /// than 65 535 buffers), before anything is modified.
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
        self.lens.extend_from_slice(sizes);
        if bufs.len() == 1 {
            // Nothing to merge with (a quiet tunnel writes packet by packet): no flow lookup.
            self.to_write.push(0);
            self.finish(bufs, offset);
            return Ok(());
        }

        for i in 0..bufs.len() {
            let pkt = &bufs[i].as_ref()[offset..offset + self.lens[i]];
            let outcome = match candidate(pkt, udp_gro) {
                Candidate::None => Outcome::Noop,
                Candidate::Tcp4 => self.tcp_gro(bufs, offset, i, false),
                Candidate::Tcp6 => self.tcp_gro(bufs, offset, i, true),
                Candidate::Udp4 => self.udp_gro(bufs, offset, i, false),
                Candidate::Udp6 => self.udp_gro(bufs, offset, i, true),
            };
            match outcome {
                Outcome::Noop | Outcome::Inserted => self.to_write.push(i),
                Outcome::Coalesced => {}
            }
        }
        self.finish(bufs, offset);
        Ok(())
    }

    fn tcp_gro<B: AsRef<[u8]> + AsMut<[u8]>>(
        &mut self,
        bufs: &mut [B],
        offset: usize,
        pi: usize,
        v6: bool,
    ) -> Outcome {
        let len = self.lens[pi];
        let pkt = &bufs[pi].as_ref()[offset..offset + len];
        let Some(iph_len) = ip_layout(pkt, v6, len) else {
            return Outcome::Noop;
        };
        if len < iph_len + TCP_FLAGS_OFFSET + 1 {
            return Outcome::Noop;
        }
        let tcph_len = usize::from(pkt[iph_len + 12] >> 4) * 4;
        if !(20..=60).contains(&tcph_len) || len < iph_len + tcph_len {
            return Outcome::Noop;
        }
        let flags = pkt[iph_len + TCP_FLAGS_OFFSET];
        if flags != TCP_FLAG_ACK && flags != TCP_FLAG_ACK | TCP_FLAG_PSH {
            return Outcome::Noop;
        }
        let psh = flags & TCP_FLAG_PSH != 0;
        let payload = len - iph_len - tcph_len;
        if payload == 0 {
            return Outcome::Noop;
        }
        // len <= 65535 (checked in ip_layout), so the payload fits.
        let gso_size = payload as u16;
        let seq = be32(pkt, iph_len + 4);
        let key = FlowKey::new(pkt, v6, iph_len, be32(pkt, iph_len + 8));

        let mut j = self.tcp.len();
        while j > 0 {
            j -= 1;
            let mut item = self.tcp[j];
            if item.key != key {
                continue;
            }
            let fit = tcp_fit(
                bufs, offset, pi, &self.lens, iph_len, tcph_len, seq, psh, gso_size, &item,
            );
            if fit == Fit::No {
                continue;
            }
            match self.merge_tcp(bufs, offset, fit, pi, gso_size, seq, psh, &mut item, v6) {
                Merge::Done => {
                    self.tcp[j] = item;
                    return Outcome::Coalesced;
                }
                Merge::ItemBadChecksum => {
                    // Its buffer is still written (it is in to_write) with a zero header.
                    self.tcp.remove(j);
                }
                Merge::PacketBadChecksum => return Outcome::Noop,
                Merge::NoRoom | Merge::PshEnding => {}
            }
        }
        self.tcp.push(TcpItem {
            key,
            seq,
            index: pi,
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
        offset: usize,
        fit: Fit,
        pi: usize,
        gso_size: u16,
        seq: u32,
        psh: bool,
        item: &mut TcpItem,
        v6: bool,
    ) -> Merge {
        let headers = usize::from(item.iph_len) + usize::from(item.tcph_len);
        let item_len = self.lens[item.index];
        let pkt_len = self.lens[pi];
        let merged_len = item_len + pkt_len - headers;
        if merged_len > MAX_PACKET {
            return Merge::NoRoom;
        }
        let iph = item.iph_len;
        if fit == Fit::Prepend {
            if offset + merged_len > bufs[pi].as_ref().len() {
                return Merge::NoRoom;
            }
            if psh {
                return Merge::PshEnding;
            }
            let target = &bufs[item.index].as_ref()[offset..offset + item_len];
            if item.merged == 0 && !self.verified(target, iph, IPPROTO_TCP, v6) {
                return Merge::ItemBadChecksum;
            }
            let pkt = &bufs[pi].as_ref()[offset..offset + pkt_len];
            if !self.verified(pkt, iph, IPPROTO_TCP, v6) {
                return Merge::PacketBadChecksum;
            }
            item.seq = seq;
            // Items always precede the packet being evaluated.
            let (lo, hi) = bufs.split_at_mut(pi);
            let src = &lo[item.index].as_ref()[offset + headers..offset + item_len];
            hi[0].as_mut()[offset + pkt_len..offset + merged_len].copy_from_slice(src);
            self.lens[pi] = merged_len;
            bufs.swap(item.index, pi);
            self.lens.swap(item.index, pi);
        } else {
            if offset + merged_len > bufs[item.index].as_ref().len() {
                return Merge::NoRoom;
            }
            let target = &bufs[item.index].as_ref()[offset..offset + item_len];
            if item.merged == 0 && !self.verified(target, iph, IPPROTO_TCP, v6) {
                return Merge::ItemBadChecksum;
            }
            let pkt = &bufs[pi].as_ref()[offset..offset + pkt_len];
            if !self.verified(pkt, iph, IPPROTO_TCP, v6) {
                return Merge::PacketBadChecksum;
            }
            let (lo, hi) = bufs.split_at_mut(pi);
            let dst = lo[item.index].as_mut();
            if psh {
                item.psh = true;
                dst[offset + usize::from(iph) + TCP_FLAGS_OFFSET] |= TCP_FLAG_PSH;
            }
            let src = &hi[0].as_ref()[offset + headers..offset + pkt_len];
            dst[offset + item_len..offset + merged_len].copy_from_slice(src);
            self.lens[item.index] = merged_len;
        }
        if gso_size > item.gso_size {
            item.gso_size = gso_size;
        }
        item.merged += 1;
        Merge::Done
    }

    fn udp_gro<B: AsRef<[u8]> + AsMut<[u8]>>(
        &mut self,
        bufs: &mut [B],
        offset: usize,
        pi: usize,
        v6: bool,
    ) -> Outcome {
        let len = self.lens[pi];
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
            let target = &bufs[item.index].as_ref()[offset..offset + self.lens[item.index]];
            let tail_ok = (target.len() - usize::from(item.iph_len) - UDP_HEADER_LEN)
                % usize::from(item.gso_size)
                == 0;
            if ip_headers_can_coalesce(pkt, target) && tail_ok && gso_size <= item.gso_size {
                match self.merge_udp(bufs, offset, pi, j, v6) {
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
        offset: usize,
        pi: usize,
        j: usize,
        v6: bool,
    ) -> Merge {
        let item = self.udp[j];
        let headers = usize::from(item.iph_len) + UDP_HEADER_LEN;
        let item_len = self.lens[item.index];
        let pkt_len = self.lens[pi];
        let merged_len = item_len + pkt_len - headers;
        if merged_len > MAX_PACKET || offset + merged_len > bufs[item.index].as_ref().len() {
            return Merge::NoRoom;
        }
        let target = &bufs[item.index].as_ref()[offset..offset + item_len];
        if item.merged == 0
            && (item.csum_invalid || !self.verified(target, item.iph_len, IPPROTO_UDP, v6))
        {
            return Merge::ItemBadChecksum;
        }
        let pkt = &bufs[pi].as_ref()[offset..offset + pkt_len];
        if !self.verified(pkt, item.iph_len, IPPROTO_UDP, v6) {
            return Merge::PacketBadChecksum;
        }
        let (lo, hi) = bufs.split_at_mut(pi);
        let src = &hi[0].as_ref()[offset + headers..offset + pkt_len];
        lo[item.index].as_mut()[offset + item_len..offset + merged_len].copy_from_slice(src);
        self.lens[item.index] = merged_len;
        self.udp[j].merged += 1;
        Merge::Done
    }

    /// Writes every virtio header: zero for single packets, a GSO header plus fixed-up IP
    /// lengths and the pseudo-header checksum for merged groups
    /// (`applyTCPCoalesceAccounting`, `applyUDPCoalesceAccounting`).
    fn finish<B: AsRef<[u8]> + AsMut<[u8]>>(&mut self, bufs: &mut [B], offset: usize) {
        let hdr_at = offset - VIRTIO_NET_HDR_LEN;
        for &i in &self.to_write {
            // Also covers items dropped for a bad checksum, which the reference leaves with
            // whatever bytes were in the headroom.
            bufs[i].as_mut()[hdr_at..offset].fill(0);
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
            let buf = bufs[item.index].as_mut();
            let ok = hdr.encode(&mut buf[hdr_at..offset]);
            debug_assert!(ok);
            let pkt = &mut buf[offset..offset + self.lens[item.index]];
            finish_ip_and_pseudo(pkt, iph, item.key.v6, IPPROTO_TCP, 16);
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
            let buf = bufs[item.index].as_mut();
            let ok = hdr.encode(&mut buf[hdr_at..offset]);
            debug_assert!(ok);
            let pkt = &mut buf[offset..offset + self.lens[item.index]];
            let udp_len = (pkt.len() - iph) as u16;
            put16(pkt, iph + 4, udp_len);
            finish_ip_and_pseudo(pkt, iph, item.key.v6, IPPROTO_UDP, 6);
        }
    }
}

/// Sets the IP length fields of a merged packet (and the IPv4 header checksum), then stores the
/// folded, non-inverted pseudo-header sum in the transport checksum field for the kernel to
/// complete.
fn finish_ip_and_pseudo(pkt: &mut [u8], iph: usize, v6: bool, proto: u8, csum_offset: usize) {
    let len = pkt.len();
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

/// `tcpPacketsCanCoalesce`: whether packet `pi` follows (append) or precedes (prepend) `item`.
#[allow(clippy::too_many_arguments)]
fn tcp_fit<B: AsRef<[u8]>>(
    bufs: &[B],
    offset: usize,
    pi: usize,
    lens: &[usize],
    iph_len: usize,
    tcph_len: usize,
    seq: u32,
    psh: bool,
    gso_size: u16,
    item: &TcpItem,
) -> Fit {
    let pkt = &bufs[pi].as_ref()[offset..offset + lens[pi]];
    let target = &bufs[item.index].as_ref()[offset..offset + lens[item.index]];
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
        let target_payload = target.len() - iph_len - tcph_len;
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
