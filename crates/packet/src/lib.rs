//! Checked, zero-copy views of packet headers: the one place the data plane reads and writes
//! the bytes of IPv4, IPv6, TCP and UDP headers and of the virtio-net header in front of a
//! Linux TUN's frames.
//!
//! Every view is made by a `parse` that checks, once, that the bytes hold the header it reads
//! (and for IP the version nibble), and returns an error otherwise: no input panics. The view
//! keeps the header as a fixed-size array reference, so each accessor after that is a plain
//! load or store at a constant offset. What depends on more than the fixed header (a declared
//! length, the options, the payload) is checked where it is asked for and returns an error too.
//!
//! The read views ([`ip::Ipv4Packet`], [`ip::Ipv6Packet`], [`ip::IpPacket`],
//! [`tcp::TcpHeader`], [`udp::UdpHeader`]) are `Copy` and borrow shared bytes; the `…Mut`
//! views borrow the bytes mutably and add setters for the fields the offload code rewrites.
//! Checksums are not computed here: a view hands out the bytes and fields a ones'-complement
//! sum is taken over and takes the result back.
//!
//! Users: `vpn-proto` re-exports [`ip`] (the device routes by it), `vpn-tun` reads and writes
//! every header of its GRO, GSO split and utun framing through these views.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod ip;
pub mod tcp;
pub mod udp;
pub mod virtio;

/// The big-endian `u16` at `AT` of a fixed-size header (a constant offset, checked when it
/// compiles).
#[inline(always)]
pub(crate) fn get16<const AT: usize, const N: usize>(b: &[u8; N]) -> u16 {
    const { assert!(AT + 2 <= N, "field past the header") };
    u16::from_be_bytes([b[AT], b[AT + 1]])
}

/// Stores `v` big-endian at `AT` of a fixed-size header.
#[inline(always)]
pub(crate) fn set16<const AT: usize, const N: usize>(b: &mut [u8; N], v: u16) {
    const { assert!(AT + 2 <= N, "field past the header") };
    let [hi, lo] = v.to_be_bytes();
    b[AT] = hi;
    b[AT + 1] = lo;
}

/// The big-endian `u32` at `AT` of a fixed-size header.
#[inline(always)]
pub(crate) fn get32<const AT: usize, const N: usize>(b: &[u8; N]) -> u32 {
    const { assert!(AT + 4 <= N, "field past the header") };
    u32::from_be_bytes([b[AT], b[AT + 1], b[AT + 2], b[AT + 3]])
}

/// Stores `v` big-endian at `AT` of a fixed-size header.
#[inline(always)]
pub(crate) fn set32<const AT: usize, const N: usize>(b: &mut [u8; N], v: u32) {
    const { assert!(AT + 4 <= N, "field past the header") };
    let [b0, b1, b2, b3] = v.to_be_bytes();
    b[AT] = b0;
    b[AT + 1] = b1;
    b[AT + 2] = b2;
    b[AT + 3] = b3;
}
