//! Inner IP packets: the checked, zero-copy views of the IPv4 and IPv6 headers the tunnel
//! routes by. They live in `vpn-packet` ([`vpn_packet::ip`]), where the TUN's offload code
//! reads its headers through them too; this module re-exports them so that the protocol crate's
//! users keep one path to them.
//!
//! The device reads a few fields of the packet a transport message carries: the destination
//! (which peer a packet read from the TUN goes to), the source and the declared length (whether
//! a decrypted packet may come from the peer that sent it, and where its padding starts), and the
//! UDP ports of a whole datagram (the device's own datagrams coming back through the TUN).

pub use vpn_packet::ip::*;
