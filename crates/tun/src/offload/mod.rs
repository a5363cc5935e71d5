//! Segmentation offload for TUN devices: the virtio-net header, GRO coalescing on write and
//! GSO splitting on read (`tun/offload_linux.go` in wireguard-go).
//!
//! These are pure functions over byte buffers (no I/O), so they are unit-tested against
//! wireguard-go's table cases and fuzzed. GRO is our own allocation-free port: tun-rs's
//! `handle_gro` copies every candidate packet into a fresh `Vec` and hides its list of buffers
//! to write, which breaks the data path's no-per-packet-allocation rule and our statistics.
//! GSO splitting is tun-rs's `gso_split`, wrapped in [`split`] with the validation wireguard-go
//! does before it and the "fill what fits" behaviour on too many segments.

pub mod checksum;
pub mod gro;
#[cfg(any(target_os = "linux", target_os = "android"))]
pub mod split;
#[cfg(test)]
pub(crate) mod testpkt;

pub use gro::{GroTable, Segments};

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

/// The largest IP packet (and so the largest coalesced or unsplit super-packet).
pub const MAX_PACKET: usize = 65_535;

pub(crate) const IPPROTO_TCP: u8 = 6;
pub(crate) const IPPROTO_UDP: u8 = 17;
pub(crate) const TCP_FLAGS_OFFSET: usize = 13;
/// Only the split (Linux) clears FIN; GRO never merges a FIN segment by its flag rules.
#[cfg(any(target_os = "linux", target_os = "android"))]
pub(crate) const TCP_FLAG_FIN: u8 = 0x01;
pub(crate) const TCP_FLAG_PSH: u8 = 0x08;
pub(crate) const TCP_FLAG_ACK: u8 = 0x10;
pub(crate) const UDP_HEADER_LEN: usize = 8;

/// `struct virtio_net_hdr` (10 bytes, native byte order), the metadata in front of every frame
/// on a TUN fd opened with `IFF_VNET_HDR`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct VirtioHdr {
    /// `VIRTIO_NET_HDR_F_*`.
    pub flags: u8,
    /// `VIRTIO_NET_HDR_GSO_*`.
    pub gso_type: u8,
    /// Length of the IP + transport headers (not trusted on read, see [`split`]).
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
    pub fn decode(b: &[u8]) -> Option<Self> {
        let b: &[u8; VIRTIO_NET_HDR_LEN] = b.get(..VIRTIO_NET_HDR_LEN)?.try_into().ok()?;
        let u = |i: usize| u16::from_ne_bytes([b[i], b[i + 1]]);
        Some(Self {
            flags: b[0],
            gso_type: b[1],
            hdr_len: u(2),
            gso_size: u(4),
            csum_start: u(6),
            csum_offset: u(8),
        })
    }

    /// Writes the header into the first 10 bytes of `b`; `false` (nothing written) if `b` is
    /// shorter.
    #[must_use]
    pub fn encode(&self, b: &mut [u8]) -> bool {
        let Some(b) = b.get_mut(..VIRTIO_NET_HDR_LEN) else {
            return false;
        };
        b[0] = self.flags;
        b[1] = self.gso_type;
        b[2..4].copy_from_slice(&self.hdr_len.to_ne_bytes());
        b[4..6].copy_from_slice(&self.gso_size.to_ne_bytes());
        b[6..8].copy_from_slice(&self.csum_start.to_ne_bytes());
        b[8..10].copy_from_slice(&self.csum_offset.to_ne_bytes());
        true
    }
}

#[inline]
pub(crate) fn be16(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}

#[inline]
pub(crate) fn be32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

#[inline]
pub(crate) fn put16(b: &mut [u8], at: usize, v: u16) {
    b[at..at + 2].copy_from_slice(&v.to_be_bytes());
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
}
