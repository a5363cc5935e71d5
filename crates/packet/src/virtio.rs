//! The virtio-net header a Linux TUN opened with `IFF_VNET_HDR` puts in front of every frame
//! ([`VirtioHdr`], 10 bytes, native byte order), and the partial transport checksum it points
//! at ([`PartialChecksum`]).

/// Length of `struct virtio_net_hdr` as the TUN driver uses it with `IFF_VNET_HDR`.
pub const VIRTIO_NET_HDR_LEN: usize = 10;

/// `VIRTIO_NET_HDR_F_NEEDS_CSUM`: the transport checksum is partial (CHECKSUM_PARTIAL).
pub const VIRTIO_NET_HDR_F_NEEDS_CSUM: u8 = 1;
/// `VIRTIO_NET_HDR_GSO_NONE`.
pub const VIRTIO_NET_HDR_GSO_NONE: u8 = 0;
/// `VIRTIO_NET_HDR_GSO_TCPV4`.
pub const VIRTIO_NET_HDR_GSO_TCPV4: u8 = 1;
/// `VIRTIO_NET_HDR_GSO_UDP_L4` (USO, Linux 6.2+).
pub const VIRTIO_NET_HDR_GSO_UDP_L4: u8 = 5;
/// `VIRTIO_NET_HDR_GSO_TCPV6`.
pub const VIRTIO_NET_HDR_GSO_TCPV6: u8 = 4;
/// `VIRTIO_NET_HDR_GSO_ECN`, or-ed into a TCP gso type.
pub const VIRTIO_NET_HDR_GSO_ECN: u8 = 0x80;

/// `struct virtio_net_hdr` (10 bytes, native byte order), the metadata in front of every frame
/// on a TUN fd opened with `IFF_VNET_HDR`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct VirtioHdr {
    /// `VIRTIO_NET_HDR_F_*`.
    pub flags: u8,
    /// `VIRTIO_NET_HDR_GSO_*`.
    pub gso_type: u8,
    /// Length of the IP + transport headers (not to be trusted on read: on forwarded traffic it
    /// can cover the whole first packet).
    pub hdr_len: u16,
    /// Payload bytes per segment.
    pub gso_size: u16,
    /// Where checksumming starts (the IP header length).
    pub csum_start: u16,
    /// Where, from `csum_start`, the checksum is stored (16 TCP, 6 UDP).
    pub csum_offset: u16,
}

impl VirtioHdr {
    /// Reads a header from the first 10 bytes of `b`; `None` if `b` is shorter.
    #[inline]
    pub fn decode(b: &[u8]) -> Option<Self> {
        let [flags, gso_type, h0, h1, s0, s1, c0, c1, o0, o1] =
            *b.first_chunk::<VIRTIO_NET_HDR_LEN>()?;
        Some(Self {
            flags,
            gso_type,
            hdr_len: u16::from_ne_bytes([h0, h1]),
            gso_size: u16::from_ne_bytes([s0, s1]),
            csum_start: u16::from_ne_bytes([c0, c1]),
            csum_offset: u16::from_ne_bytes([o0, o1]),
        })
    }

    /// Writes the header into the first 10 bytes of `b`; `false` (nothing written) if `b` is
    /// shorter.
    #[inline]
    #[must_use]
    pub fn encode(&self, b: &mut [u8]) -> bool {
        let Some(b) = b.first_chunk_mut::<VIRTIO_NET_HDR_LEN>() else {
            return false;
        };
        let [h0, h1] = self.hdr_len.to_ne_bytes();
        let [s0, s1] = self.gso_size.to_ne_bytes();
        let [c0, c1] = self.csum_start.to_ne_bytes();
        let [o0, o1] = self.csum_offset.to_ne_bytes();
        *b = [self.flags, self.gso_type, h0, h1, s0, s1, c0, c1, o0, o1];
        true
    }

    /// The partial checksum this header points at in `pkt` (the packet after the header):
    /// `csum_offset` bytes into `pkt[csum_start..]`; `None` if the field is not in `pkt`.
    #[inline]
    pub fn partial_checksum<'a>(&self, pkt: &'a mut [u8]) -> Option<PartialChecksum<'a>> {
        PartialChecksum::new(
            pkt,
            usize::from(self.csum_start),
            usize::from(self.csum_offset),
        )
    }
}

/// A transport checksum left partial (CHECKSUM_PARTIAL): the bytes it covers, from the
/// checksum start to the end of the packet, and the 16-bit field at an offset in them, which
/// holds the folded pseudo-header sum until the checksum is completed.
#[derive(Debug)]
pub struct PartialChecksum<'a> {
    /// The covered bytes; the field is at `at..at + 2`, checked at construction.
    covered: &'a mut [u8],
    at: usize,
}

impl<'a> PartialChecksum<'a> {
    /// The checksum that covers `pkt[start..]` and is stored `offset` bytes into it; `None`
    /// if the field does not lie within `pkt`.
    #[inline]
    pub fn new(pkt: &'a mut [u8], start: usize, offset: usize) -> Option<Self> {
        let covered = pkt.get_mut(start..)?;
        let end = offset.checked_add(2)?;
        if end > covered.len() {
            return None;
        }
        Some(PartialChecksum {
            covered,
            at: offset,
        })
    }

    /// The field's value (big-endian).
    #[inline]
    pub fn get(&self) -> u16 {
        match self
            .covered
            .get(self.at..)
            .and_then(<[u8]>::first_chunk::<2>)
        {
            Some(&f) => u16::from_be_bytes(f),
            None => 0,
        }
    }

    /// Stores `v` in the field.
    #[inline]
    pub fn set(&mut self, v: u16) {
        if let Some(f) = self
            .covered
            .get_mut(self.at..)
            .and_then(<[u8]>::first_chunk_mut::<2>)
        {
            *f = v.to_be_bytes();
        }
    }

    /// The bytes the checksum covers (the field included).
    #[inline]
    pub fn covered(&self) -> &[u8] {
        self.covered
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn virtio_header_round_trips_in_native_order() {
        let h = VirtioHdr {
            flags: VIRTIO_NET_HDR_F_NEEDS_CSUM,
            gso_type: VIRTIO_NET_HDR_GSO_TCPV6,
            hdr_len: 60,
            gso_size: 1380,
            csum_start: 40,
            csum_offset: 16,
        };
        let mut b = [0u8; 12];
        assert!(h.encode(&mut b));
        assert_eq!(&b[4..6], &1380u16.to_ne_bytes());
        assert_eq!(VirtioHdr::decode(&b), Some(h));
        assert!(!h.encode(&mut [0u8; 9]));
        assert_eq!(VirtioHdr::decode(&b[..9]), None);
    }

    #[test]
    fn the_partial_checksum_is_where_the_header_points() {
        let h = VirtioHdr {
            csum_start: 2,
            csum_offset: 3,
            ..VirtioHdr::default()
        };
        let mut pkt = [0u8, 1, 2, 3, 4, 0xab, 0xcd, 7];
        let mut c = h.partial_checksum(&mut pkt).unwrap();
        assert_eq!(c.get(), 0xabcd);
        assert_eq!(c.covered(), &[2, 3, 4, 0xab, 0xcd, 7]);
        c.set(0x1234);
        assert_eq!(pkt, [0, 1, 2, 3, 4, 0x12, 0x34, 7]);
        // The field must lie in the packet: the last two bytes at most.
        assert!(PartialChecksum::new(&mut pkt, 2, 4).is_some());
        assert!(PartialChecksum::new(&mut pkt, 2, 5).is_none());
        assert!(PartialChecksum::new(&mut pkt, 9, 0).is_none());
        assert!(PartialChecksum::new(&mut pkt, 0, usize::MAX).is_none());
        assert!(PartialChecksum::new(&mut pkt, usize::MAX, 0).is_none());
    }
}
