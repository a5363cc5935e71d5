//! Fuzzes every `vpn-packet` view on arbitrary bytes: no input may panic; a read view and its
//! writable twin accept exactly the same bytes and read the same fields; every setter reads back
//! what it stored and leaves every other byte alone; payloads, options and declared lengths stay
//! within the bytes. The input is parsed as an IP packet, as a TCP and a UDP header (from its
//! start and from the IP payload), and as a virtio-net header with the partial checksum it
//! points at.
#![no_main]

use libfuzzer_sys::fuzz_target;
use vpn_packet::ip::{
    declared_len, version, IpPacket, IpPacketMut, Ipv4Packet, Ipv4PacketMut, Ipv6Packet,
    Ipv6PacketMut, IPV4_HEADER_LEN, IPV6_HEADER_LEN,
};
use vpn_packet::tcp::{TcpHeader, TcpHeaderMut, TCP_HEADER_LEN};
use vpn_packet::udp::{UdpHeader, UdpHeaderMut, UDP_HEADER_LEN};
use vpn_packet::virtio::{PartialChecksum, VirtioHdr, VIRTIO_NET_HDR_LEN};

/// A 16-bit value taken from the input, for the setters.
fn word(data: &[u8], at: usize) -> u16 {
    let b = |i: usize| data.get(i % data.len().max(1)).copied().unwrap_or(0x5a);
    u16::from_be_bytes([b(at), b(at + 1)])
}

fn get4(b: &[u8]) -> Ipv4Packet<'_> {
    Ipv4Packet::parse(b).expect("still IPv4")
}

fn get6(b: &[u8]) -> Ipv6Packet<'_> {
    Ipv6Packet::parse(b).expect("still IPv6")
}

fn get_tcp(b: &[u8]) -> TcpHeader<'_> {
    TcpHeader::parse(b).expect("still a TCP header")
}

/// Runs `set` on a copy of `data` through a view made by `view`, then checks with `check` on
/// the copy, and that only `field` (a byte range) changed.
fn setter(
    data: &[u8],
    field: std::ops::Range<usize>,
    set: impl FnOnce(&mut [u8]),
    check: impl FnOnce(&[u8]),
) {
    let mut copy = data.to_vec();
    set(&mut copy);
    check(&copy);
    for (i, (a, b)) in data.iter().zip(&copy).enumerate() {
        if !field.contains(&i) {
            assert_eq!(a, b, "byte {i} changed outside {field:?}");
        }
    }
}

fn ip(data: &[u8]) {
    let read = IpPacket::parse(data);
    let mut copy = data.to_vec();
    let write = IpPacketMut::parse(&mut copy);
    assert_eq!(read.err(), write.as_ref().err().copied());
    assert_eq!(version(data).ok(), data.first().map(|b| b >> 4));
    let Ok(read) = read else {
        assert!(Ipv4Packet::parse(data).is_err() && Ipv6Packet::parse(data).is_err());
        return;
    };
    let mut write = write.expect("both parse");
    assert_eq!(read.protocol(), write.protocol());
    assert_eq!(read.header_len(), write.header_len());
    assert_eq!(read.source_bytes(), write.source_bytes());
    assert_eq!(read.destination_bytes(), write.destination_bytes());
    let payload = read.payload();
    assert_eq!(
        payload.map(<[u8]>::len),
        write.payload_mut().map(|p| p.len())
    );
    assert_eq!(payload.is_ok(), read.packet_len().is_ok());
    if let (Ok(p), Ok(len)) = (payload, read.packet_len()) {
        assert!(read.header_len() + p.len() == len && len <= data.len());
        transport(p);
    }
    let (w0, w1) = (word(data, 3), word(data, 7));
    match read {
        IpPacket::V4(p) => {
            assert!(data.len() >= IPV4_HEADER_LEN);
            assert_eq!(declared_len(data), Some(usize::from(p.total_len())));
            assert_eq!(
                p.is_fragment(),
                p.flags() & 1 != 0 || p.fragment_offset() != 0
            );
            if let Ok(h) = p.header_bytes() {
                assert_eq!(h.len(), p.header_len());
                assert_eq!(p.options(), Ok(&h[IPV4_HEADER_LEN..]));
            }
            let mut m = data.to_vec();
            let m = Ipv4PacketMut::parse(&mut m).expect("the writable view parses too");
            assert_eq!(m.options().ok(), p.options().ok());
            assert_eq!(m.header()[..], data[..IPV4_HEADER_LEN]);
            let get = get4;
            setter(
                data,
                2..4,
                |b| Ipv4PacketMut::parse(b).unwrap().set_total_len(w0),
                |b| assert_eq!(get(b).total_len(), w0),
            );
            setter(
                data,
                4..6,
                |b| Ipv4PacketMut::parse(b).unwrap().set_identification(w0),
                |b| assert_eq!(get(b).identification(), w0),
            );
            setter(
                data,
                6..8,
                |b| {
                    let mut v = Ipv4PacketMut::parse(b).unwrap();
                    v.set_flags(w0 as u8);
                    v.set_fragment_offset(w1);
                },
                |b| {
                    assert_eq!(get(b).flags(), w0 as u8 & 7);
                    assert_eq!(get(b).fragment_offset(), w1 & 0x1fff);
                },
            );
            setter(
                data,
                1..2,
                |b| Ipv4PacketMut::parse(b).unwrap().set_dscp_ecn(w1 as u8),
                |b| assert_eq!(get(b).dscp_ecn(), w1 as u8),
            );
            setter(
                data,
                8..12,
                |b| {
                    let mut v = Ipv4PacketMut::parse(b).unwrap();
                    v.set_ttl(w0 as u8);
                    v.set_protocol(w1 as u8);
                    v.set_header_checksum(w1 ^ w0);
                },
                |b| {
                    let p = get(b);
                    assert_eq!((p.ttl(), p.protocol()), (w0 as u8, w1 as u8));
                    assert_eq!(p.header_checksum(), w1 ^ w0);
                },
            );
            let addr = std::net::Ipv4Addr::from(u32::from(w0) << 16 | u32::from(w1));
            setter(
                data,
                12..20,
                |b| {
                    let mut v = Ipv4PacketMut::parse(b).unwrap();
                    v.set_source(addr);
                    v.set_destination(std::net::Ipv4Addr::from(!addr.to_bits()));
                },
                |b| {
                    assert_eq!(get(b).source(), addr);
                    assert_eq!(get(b).destination_bytes(), &(!addr.to_bits()).to_be_bytes());
                },
            );
        }
        IpPacket::V6(p) => {
            assert!(data.len() >= IPV6_HEADER_LEN);
            assert_eq!(
                declared_len(data),
                Some(IPV6_HEADER_LEN + usize::from(p.payload_len()))
            );
            assert!(p.flow_label() < 1 << 20);
            let get = get6;
            setter(
                data,
                0..2,
                |b| Ipv6PacketMut::parse(b).unwrap().set_traffic_class(w0 as u8),
                |b| {
                    assert_eq!(get(b).traffic_class(), w0 as u8);
                    assert_eq!(get(b).flow_label(), p.flow_label());
                },
            );
            setter(
                data,
                4..8,
                |b| {
                    let mut v = Ipv6PacketMut::parse(b).unwrap();
                    v.set_payload_len(w0);
                    v.set_next_header(w1 as u8);
                    v.set_hop_limit((w1 >> 8) as u8);
                },
                |b| {
                    let p = get(b);
                    assert_eq!(p.payload_len(), w0);
                    assert_eq!(
                        (p.next_header(), p.hop_limit()),
                        (w1 as u8, (w1 >> 8) as u8)
                    );
                },
            );
            let addr = std::net::Ipv6Addr::from(u128::from(w0) << 64 | u128::from(w1));
            setter(
                data,
                8..40,
                |b| {
                    let mut v = Ipv6PacketMut::parse(b).unwrap();
                    v.set_source(addr);
                    v.set_destination(addr);
                },
                |b| {
                    assert_eq!(get(b).source(), addr);
                    assert_eq!(get(b).destination(), addr);
                },
            );
        }
    }
}

fn transport(data: &[u8]) {
    let tcp = TcpHeader::parse(data);
    let mut copy = data.to_vec();
    assert_eq!(tcp.err(), TcpHeaderMut::parse(&mut copy).err());
    let doff = data.get(12).map(|b| usize::from(b >> 4) * 4);
    let want = data.len() >= TCP_HEADER_LEN && doff.is_some_and(|h| h >= 20 && h <= data.len());
    assert_eq!(tcp.is_ok(), want);
    if let Ok(t) = tcp {
        assert!((TCP_HEADER_LEN..=60).contains(&t.header_len()));
        assert_eq!(t.header_len() + t.payload().len(), data.len());
        assert_eq!(t.options().len(), t.header_len() - TCP_HEADER_LEN);
        let (w0, w1) = (word(data, 1), word(data, 5));
        let get = get_tcp;
        setter(
            data,
            0..12,
            |b| {
                let mut t = TcpHeaderMut::parse(b).unwrap();
                t.set_source_port(w0);
                t.set_destination_port(w1);
                t.set_seq(u32::from(w0) << 16 | u32::from(w1));
                t.set_ack(u32::from(w1) << 16 | u32::from(w0));
            },
            |b| {
                let t = get(b);
                assert_eq!((t.source_port(), t.destination_port()), (w0, w1));
                assert_eq!(t.seq(), u32::from(w0) << 16 | u32::from(w1));
                assert_eq!(t.ack(), u32::from(w1) << 16 | u32::from(w0));
            },
        );
        setter(
            data,
            13..20,
            |b| {
                let mut t = TcpHeaderMut::parse(b).unwrap();
                t.set_flags(w0 as u8);
                t.set_window(w1);
                t.set_checksum(w0);
                t.set_urgent_pointer(w1 ^ 1);
            },
            |b| {
                let t = get(b);
                assert_eq!((t.flags(), t.window()), (w0 as u8, w1));
                assert_eq!((t.checksum(), t.urgent_pointer()), (w0, w1 ^ 1));
                assert_eq!(t.header_len(), get(data).header_len());
            },
        );
    }
    let udp = UdpHeader::parse(data);
    let mut copy = data.to_vec();
    assert_eq!(udp.err(), UdpHeaderMut::parse(&mut copy).err());
    assert_eq!(udp.is_ok(), data.len() >= UDP_HEADER_LEN);
    if let Ok(u) = udp {
        assert_eq!(u.payload().len() + UDP_HEADER_LEN, data.len());
        let (w0, w1) = (word(data, 2), word(data, 6));
        setter(
            data,
            0..8,
            |b| {
                let mut u = UdpHeaderMut::parse(b).unwrap();
                u.set_source_port(w0);
                u.set_destination_port(w1);
                u.set_length(w1 ^ w0);
                u.set_checksum(!w0);
            },
            |b| {
                let u = UdpHeader::parse(b).unwrap();
                assert_eq!((u.source_port(), u.destination_port()), (w0, w1));
                assert_eq!((u.length(), u.checksum()), (w1 ^ w0, !w0));
            },
        );
    }
}

fn virtio(data: &[u8]) {
    let Some(h) = VirtioHdr::decode(data) else {
        assert!(data.len() < VIRTIO_NET_HDR_LEN);
        return;
    };
    let mut out = [0u8; VIRTIO_NET_HDR_LEN];
    assert!(h.encode(&mut out));
    assert_eq!(out[..], data[..VIRTIO_NET_HDR_LEN]);
    let mut pkt = data[VIRTIO_NET_HDR_LEN..].to_vec();
    let (start, off) = (usize::from(h.csum_start), usize::from(h.csum_offset));
    let fits = start + off + 2 <= pkt.len();
    let field = start + off..start + off + 2;
    match h.partial_checksum(&mut pkt) {
        Some(mut c) => {
            assert!(fits);
            assert_eq!(c.covered().len(), data.len() - VIRTIO_NET_HDR_LEN - start);
            let v = c.get();
            c.set(!v);
            assert_eq!(c.get(), !v);
            let orig = &data[VIRTIO_NET_HDR_LEN..];
            for (i, (a, b)) in orig.iter().zip(&pkt).enumerate() {
                assert_eq!(a == b, !field.contains(&i), "byte {i}");
            }
        }
        None => assert!(!fits),
    }
    assert_eq!(PartialChecksum::new(&mut pkt, start, off).is_some(), fits);
}

fuzz_target!(|data: &[u8]| {
    ip(data);
    transport(data);
    virtio(data);
});
