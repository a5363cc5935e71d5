//! Packet builders for the offload tests: valid IPv4/IPv6 TCP/UDP packets with correct
//! checksums, plus the mutations wireguard-go's `handleGRO` table cases use.

use vpn_packet::ip::{IpPacket, IpPacketMut, PROTOCOL_TCP, PROTOCOL_UDP};
use vpn_packet::tcp::{TcpHeader, TcpHeaderMut};
use vpn_packet::udp::UdpHeaderMut;

use super::checksum::{checksum, checksum_no_fold, pseudo_header_no_fold};

pub(crate) use vpn_packet::tcp::{ACK, PSH};

/// An address and port; 4- or 16-byte address.
#[derive(Clone, Copy)]
pub(crate) struct Ep {
    pub addr: [u8; 16],
    pub v6: bool,
    pub port: u16,
}

pub(crate) const fn ep4(a: [u8; 4], port: u16) -> Ep {
    Ep {
        addr: [a[0], a[1], a[2], a[3], 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0],
        v6: false,
        port,
    }
}

pub(crate) const fn ep6(last: u8, port: u16) -> Ep {
    let mut addr = [0u8; 16];
    addr[0] = 0xfd;
    addr[15] = last;
    Ep {
        addr,
        v6: true,
        port,
    }
}

pub(crate) const A4: Ep = ep4([192, 0, 2, 1], 1);
pub(crate) const B4: Ep = ep4([192, 0, 2, 2], 1);
pub(crate) const C4: Ep = ep4([192, 0, 2, 3], 1);
pub(crate) const A6: Ep = ep6(1, 1);
pub(crate) const B6: Ep = ep6(2, 1);
pub(crate) const C6: Ep = ep6(3, 1);

fn ip_header(src: Ep, dst: Ep, proto: u8, transport_len: usize, out: &mut Vec<u8>) {
    if src.v6 {
        out.extend_from_slice(&[0x60, 0, 0, 0]);
        out.extend_from_slice(&(transport_len as u16).to_be_bytes());
        out.push(proto);
        out.push(64);
        out.extend_from_slice(&src.addr);
        out.extend_from_slice(&dst.addr);
    } else {
        out.extend_from_slice(&[0x45, 0]);
        out.extend_from_slice(&((20 + transport_len) as u16).to_be_bytes());
        out.extend_from_slice(&[0, 0, 0, 0, 64, proto, 0, 0]);
        out.extend_from_slice(&src.addr[..4]);
        out.extend_from_slice(&dst.addr[..4]);
    }
}

/// Payload byte `i` of a stream: depends on the position so reordering is visible.
pub(crate) fn stream_byte(i: u32) -> u8 {
    (i.wrapping_mul(31) >> 3) as u8 ^ (i as u8)
}

/// A TCP packet (ACK number 1, 20-byte header) carrying stream bytes `seq..seq+len`.
pub(crate) fn tcp(src: Ep, dst: Ep, flags: u8, len: usize, seq: u32) -> Vec<u8> {
    let mut p = Vec::with_capacity(60 + len);
    ip_header(src, dst, PROTOCOL_TCP, 20 + len, &mut p);
    p.extend_from_slice(&src.port.to_be_bytes());
    p.extend_from_slice(&dst.port.to_be_bytes());
    p.extend_from_slice(&seq.to_be_bytes());
    p.extend_from_slice(&1u32.to_be_bytes());
    p.extend_from_slice(&[5 << 4, flags, 0xff, 0xff, 0, 0, 0, 0]);
    p.extend((0..len as u32).map(|i| stream_byte(seq.wrapping_add(i))));
    fix_checksums(&mut p);
    p
}

/// A UDP datagram with `len` payload bytes.
pub(crate) fn udp(src: Ep, dst: Ep, len: usize) -> Vec<u8> {
    let mut p = Vec::with_capacity(48 + len);
    ip_header(src, dst, PROTOCOL_UDP, 8 + len, &mut p);
    p.extend_from_slice(&src.port.to_be_bytes());
    p.extend_from_slice(&dst.port.to_be_bytes());
    p.extend_from_slice(&((8 + len) as u16).to_be_bytes());
    p.extend_from_slice(&[0, 0]);
    p.extend((0..len as u32).map(stream_byte));
    fix_checksums(&mut p);
    p
}

/// Recomputes the IPv4 header checksum and the full TCP/UDP checksum.
pub(crate) fn fix_checksums(p: &mut [u8]) {
    let mut ip = IpPacketMut::parse(p).expect("an IP test packet");
    if let IpPacketMut::V4(ip) = &mut ip {
        ip.set_header_checksum(0);
        let sum = checksum_no_fold(ip.header(), 0);
        let c = !checksum(ip.options().expect("options in the packet"), sum);
        ip.set_header_checksum(c);
    }
    let proto = ip.protocol();
    let (src, dst) = (ip.source_bytes().to_vec(), ip.destination_bytes().to_vec());
    let l4 = ip.into_payload().expect("the declared length");
    set_transport_checksum(proto, l4, 0);
    let psum = pseudo_header_no_fold(proto, &src, &dst, l4.len() as u16);
    let mut c = !checksum(l4, psum);
    if proto == PROTOCOL_UDP && c == 0 {
        c = 0xffff;
    }
    set_transport_checksum(proto, l4, c);
}

/// Stores `c` in the TCP or UDP checksum field of `l4`.
fn set_transport_checksum(proto: u8, l4: &mut [u8], c: u16) {
    match proto {
        PROTOCOL_TCP => TcpHeaderMut::parse(l4)
            .expect("a TCP header")
            .set_checksum(c),
        _ => UdpHeaderMut::parse(l4)
            .expect("a UDP header")
            .set_checksum(c),
    }
}

/// The transport segment of a test packet, to rewrite.
pub(crate) fn transport_mut(p: &mut [u8]) -> &mut [u8] {
    IpPacketMut::parse(p)
        .and_then(IpPacketMut::into_payload)
        .expect("an IP test packet")
}

/// The TCP header of a test packet, to rewrite.
pub(crate) fn tcp_mut(p: &mut [u8]) -> TcpHeaderMut<'_> {
    TcpHeaderMut::parse(transport_mut(p)).expect("a TCP test packet")
}

/// The TCP header of a test packet.
pub(crate) fn tcp_header(p: &[u8]) -> TcpHeader<'_> {
    let ip = IpPacket::parse(p).expect("an IP test packet");
    TcpHeader::parse(ip.payload().expect("the declared length")).expect("a TCP test packet")
}

/// Corrupts the transport checksum.
pub(crate) fn flip_transport_checksum(p: &mut [u8]) {
    let proto = IpPacket::parse(p).expect("an IP test packet").protocol();
    let l4 = transport_mut(p);
    match proto {
        PROTOCOL_TCP => {
            let mut t = TcpHeaderMut::parse(l4).expect("a TCP header");
            t.set_checksum(t.checksum() ^ 0xff00);
        }
        _ => {
            let mut u = UdpHeaderMut::parse(l4).expect("a UDP header");
            u.set_checksum(u.checksum() ^ 0xff00);
        }
    }
}

/// Applies `f` to the packet and then repairs its checksums.
pub(crate) fn with(mut p: Vec<u8>, f: impl FnOnce(&mut [u8])) -> Vec<u8> {
    f(&mut p);
    fix_checksums(&mut p);
    p
}

/// The TCP flags byte of a packet.
pub(crate) fn tcp_flags(p: &[u8]) -> u8 {
    tcp_header(p).flags()
}

/// Whether the packet's IPv4 header checksum (if any) and transport checksum verify.
pub(crate) fn checksums_ok(p: &[u8]) -> bool {
    if let Ok(IpPacket::V4(ip)) = IpPacket::parse(p) {
        match ip.header_bytes() {
            Ok(h) if checksum(h, 0) == 0xffff => {}
            _ => return false,
        }
    }
    super::gro::checksum_valid(p)
}

/// Buffers of `room` bytes holding `pkts` at `offset`, with their sizes.
pub(crate) fn batch(pkts: &[Vec<u8>], offset: usize, room: usize) -> (Vec<Vec<u8>>, Vec<usize>) {
    let bufs = pkts
        .iter()
        .map(|p| {
            let mut b = vec![0xa5u8; room.max(offset + p.len())];
            b[offset..offset + p.len()].copy_from_slice(p);
            b
        })
        .collect();
    (bufs, pkts.iter().map(Vec::len).collect())
}
