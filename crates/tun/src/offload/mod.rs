//! Segmentation offload for TUN devices: the virtio-net header, GRO coalescing on write and
//! GSO splitting on read (`tun/offload_linux.go` in wireguard-go).
//!
//! These are pure functions over byte buffers (no I/O), so they are unit-tested against
//! wireguard-go's table cases and fuzzed. GRO is our own allocation-free port: tun-rs's
//! `handle_gro` copies every candidate packet into a fresh `Vec` and hides its list of buffers
//! to write, which breaks the data path's no-per-packet-allocation rule and our statistics.
//! GSO splitting is tun-rs's `gso_split`, wrapped in [`split`] with the validation wireguard-go
//! does before it and the "fill what fits" behaviour on too many segments.
//!
//! Every header this code reads or writes goes through `vpn-packet`'s checked views (IPv4,
//! IPv6, TCP, UDP, the virtio-net header); [`checksum`] sums the bytes the views hand out. The
//! one header code that is not ours is tun-rs's `gso_split`, which writes each segment's
//! headers itself.

pub mod checksum;
pub mod gro;
#[cfg(any(target_os = "linux", target_os = "android"))]
pub mod split;
#[cfg(test)]
pub(crate) mod testpkt;

pub use gro::{GroTable, Segments};
// The virtio-net header and its constants are `vpn-packet`'s, with every other header view.
pub use vpn_packet::virtio::{
    VirtioHdr, VIRTIO_NET_HDR_F_NEEDS_CSUM, VIRTIO_NET_HDR_GSO_ECN, VIRTIO_NET_HDR_GSO_NONE,
    VIRTIO_NET_HDR_GSO_TCPV4, VIRTIO_NET_HDR_GSO_TCPV6, VIRTIO_NET_HDR_GSO_UDP_L4,
    VIRTIO_NET_HDR_LEN,
};

/// The largest IP packet (and so the largest coalesced or unsplit super-packet).
pub const MAX_PACKET: usize = 65_535;
