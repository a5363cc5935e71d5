//! `handleVirtioRead` cases: TCP/UDP over IPv4/IPv6 split, partial checksums, too many
//! segments, malformed frames, and a GRO -> split round trip.

use super::*;
use crate::offload::gro::GroTable;
use crate::offload::testpkt::*;
use vpn_packet::ip::{IpPacket, Ipv4Packet, Ipv4PacketMut, Ipv6Packet, PROTOCOL_TCP};
use vpn_packet::udp::UdpHeader;

const OFF: usize = 16;

fn gso_frame(pkt: &[u8], gso_type: u8, gso_size: u16) -> Vec<u8> {
    let ip = IpPacket::parse(pkt).unwrap();
    let (iph, proto) = (ip.header_len(), ip.protocol());
    let hdr = VirtioHdr {
        flags: VIRTIO_NET_HDR_F_NEEDS_CSUM,
        gso_type,
        // Deliberately wrong, as on forwarded traffic: the whole packet.
        hdr_len: pkt.len() as u16,
        gso_size,
        csum_start: iph as u16,
        csum_offset: if proto == PROTOCOL_TCP { 16 } else { 6 },
    };
    let mut f = vec![0u8; VIRTIO_NET_HDR_LEN];
    assert!(hdr.encode(&mut f));
    f.extend_from_slice(pkt);
    f
}

fn out_bufs(n: usize) -> (Vec<Vec<u8>>, Vec<usize>) {
    (vec![vec![0u8; OFF + 1500]; n], vec![0; n])
}

fn split_ok(frame: &mut [u8], n: usize) -> (Split, Vec<Vec<u8>>) {
    let (mut bufs, mut sizes) = out_bufs(n);
    let s = split_frame(frame, &mut bufs, &mut sizes, OFF).expect("valid frame");
    let pkts = (0..s.packets)
        .map(|i| bufs[i][OFF..OFF + sizes[i]].to_vec())
        .collect();
    (s, pkts)
}

#[test]
fn tcp4_super_packet_splits_with_fixed_headers() {
    let big = tcp(A4, B4, ACK | PSH, 2500, 7);
    let (s, pkts) = split_ok(&mut gso_frame(&big, VIRTIO_NET_HDR_GSO_TCPV4, 1000), 8);
    assert_eq!(
        s,
        Split {
            packets: 3,
            segmented: true,
            truncated: false
        }
    );
    for (i, p) in pkts.iter().enumerate() {
        let want_len = if i < 2 { 1000 } else { 500 };
        assert_eq!(p.len(), 40 + want_len);
        assert!(checksums_ok(p), "segment {i} checksums");
        let ip = Ipv4Packet::parse(p).unwrap();
        assert_eq!(usize::from(ip.total_len()), p.len());
        assert_eq!(
            ip.identification(),
            i as u16,
            "IPv4 ID advances per segment"
        );
        let th = tcp_header(p);
        let seq = th.seq();
        assert_eq!(seq, 7 + 1000 * i as u32);
        assert!(th
            .payload()
            .iter()
            .enumerate()
            .all(|(k, b)| *b == stream_byte(seq + k as u32)));
        assert_eq!(tcp_flags(p) & PSH != 0, i == 2, "PSH only on the last");
    }
}

#[test]
fn tcp6_udp4_udp6_split() {
    let big = tcp(A6, B6, ACK, 3000, 1);
    let (s, pkts) = split_ok(&mut gso_frame(&big, VIRTIO_NET_HDR_GSO_TCPV6, 1440), 8);
    assert_eq!(s.packets, 3);
    assert!(pkts.iter().all(|p| checksums_ok(p)
        && usize::from(Ipv6Packet::parse(p).unwrap().payload_len()) == p.len() - 40));

    for (src, dst, iph) in [(A4, B4, 20usize), (A6, B6, 40)] {
        let big = udp(src, dst, 3000);
        let (s, pkts) = split_ok(&mut gso_frame(&big, VIRTIO_NET_HDR_GSO_UDP_L4, 1200), 8);
        assert_eq!(s.packets, 3);
        for (i, p) in pkts.iter().enumerate() {
            let want = if i < 2 { 1200 } else { 600 };
            assert_eq!(p.len(), iph + 8 + want);
            let l4 = IpPacket::parse(p).unwrap().payload().unwrap();
            let udp = UdpHeader::parse(l4).unwrap();
            assert_eq!(usize::from(udp.length()), 8 + want, "UDP length");
            assert!(checksums_ok(p));
        }
    }
}

#[test]
fn too_many_segments_fills_every_buffer_and_reports_it() {
    let big = tcp(A4, B4, ACK | PSH | 0x01, 5000, 1);
    let (s, pkts) = split_ok(&mut gso_frame(&big, VIRTIO_NET_HDR_GSO_TCPV4, 1000), 3);
    assert_eq!(
        s,
        Split {
            packets: 3,
            segmented: true,
            truncated: true
        }
    );
    for p in &pkts {
        assert!(checksums_ok(p));
        assert_eq!(tcp_flags(p), ACK, "no FIN or PSH before the dropped tail");
    }
}

#[test]
fn partial_checksum_is_completed_for_plain_packets() {
    let mut p = tcp(A4, B4, ACK, 300, 1);
    // What the kernel hands over for CHECKSUM_PARTIAL: the folded pseudo-header sum.
    let ip = Ipv4Packet::parse(&p).unwrap();
    let (src, dst) = (*ip.source_bytes(), *ip.destination_bytes());
    let psum = crate::offload::checksum::pseudo_header_no_fold(PROTOCOL_TCP, &src, &dst, 320);
    tcp_mut(&mut p).set_checksum(checksum(&[], psum));
    let hdr = VirtioHdr {
        flags: VIRTIO_NET_HDR_F_NEEDS_CSUM,
        csum_start: 20,
        csum_offset: 16,
        ..Default::default()
    };
    let mut frame = vec![0u8; 10];
    assert!(hdr.encode(&mut frame));
    frame.extend_from_slice(&p);
    let (s, pkts) = split_ok(&mut frame, 1);
    assert_eq!(
        s,
        Split {
            packets: 1,
            segmented: false,
            truncated: false
        }
    );
    assert!(checksums_ok(&pkts[0]));
}

#[test]
fn malformed_frames_are_errors() {
    let good = gso_frame(&tcp(A4, B4, ACK, 2000, 1), VIRTIO_NET_HDR_GSO_TCPV4, 1000);
    type Mutation = Box<dyn Fn(&mut Vec<u8>)>;
    // A change to the frame's virtio header.
    fn virtio(change: impl Fn(&mut VirtioHdr) + 'static) -> Mutation {
        Box::new(move |f| {
            let mut h = VirtioHdr::decode(f).unwrap();
            change(&mut h);
            assert!(h.encode(f));
        })
    }
    let mutations: Vec<(&str, Mutation)> = vec![
        ("short", Box::new(|f| f.truncate(5))),
        ("empty packet", Box::new(|f| f.truncate(10))),
        ("gso size 0", virtio(|h| h.gso_size = 0)),
        (
            "v6 type on v4",
            virtio(|h| h.gso_type = VIRTIO_NET_HDR_GSO_TCPV6),
        ),
        ("unknown type", virtio(|h| h.gso_type = 3)),
        (
            "udp with ecn",
            virtio(|h| h.gso_type = VIRTIO_NET_HDR_GSO_UDP_L4 | VIRTIO_NET_HDR_GSO_ECN),
        ),
        // Headers no view writes (a version that is not IP, a data offset below 5 words): the
        // bytes, by hand.
        ("bad version", Box::new(|f| f[10] = 0x55)),
        ("bad data offset", Box::new(|f| f[10 + 32] = 0x10)),
        ("csum start past end", virtio(|h| h.csum_start = 5000)),
        ("csum offset wrong", virtio(|h| h.csum_offset = 6)),
        (
            "plain csum outside",
            virtio(|h| {
                h.gso_type = VIRTIO_NET_HDR_GSO_NONE;
                h.csum_offset = u16::MAX;
            }),
        ),
    ];
    for (name, m) in mutations {
        let mut f = good.clone();
        m(&mut f);
        let (mut bufs, mut sizes) = out_bufs(4);
        assert!(
            split_frame(&mut f, &mut bufs, &mut sizes, OFF).is_err(),
            "{name}"
        );
    }
    // Output buffers too small, or no buffers at all.
    let mut f = good.clone();
    let mut small = vec![vec![0u8; OFF + 100]; 4];
    assert!(split_frame(&mut f, &mut small, &mut [0; 4], OFF).is_err());
    let mut none: [Vec<u8>; 0] = [];
    assert!(split_frame(&mut f, &mut none, &mut [], OFF).is_err());
}

#[test]
fn random_bytes_never_panic() {
    let mut x: u32 = 0xdead_beef;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        x
    };
    let seed = gso_frame(&tcp(A4, B4, ACK, 1500, 1), VIRTIO_NET_HDR_GSO_TCPV4, 500);
    for _ in 0..20_000 {
        let mut f = seed.clone();
        for _ in 0..1 + next() % 4 {
            let i = next() as usize % f.len();
            f[i] = next() as u8;
        }
        f.truncate(next() as usize % (seed.len() + 1));
        let (mut bufs, mut sizes) = out_bufs(1 + next() as usize % 4);
        let _ = split_frame(&mut f, &mut bufs, &mut sizes, OFF);
    }
}

#[test]
fn gro_then_split_round_trips() {
    let mut x: u32 = 12345;
    let mut next = move |n: u32| {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        x % n
    };
    for round in 0..100 {
        let (src, dst, v6) = if round % 2 == 0 {
            (A4, B4, false)
        } else {
            (A6, B6, true)
        };
        let mss = 500 + next(900) as usize;
        let n = 2 + next(20) as usize;
        let mut seq = next(u32::MAX);
        let mut pkts = Vec::new();
        for i in 0..n {
            let len = if i == n - 1 {
                1 + next(mss as u32) as usize
            } else {
                mss
            };
            let flags = if i == n - 1 { ACK | PSH } else { ACK };
            pkts.push(with(tcp(src, dst, flags, len, seq), |p| {
                if !v6 {
                    Ipv4PacketMut::parse(p)
                        .unwrap()
                        .set_identification(i as u16);
                }
            }));
            seq = seq.wrapping_add(len as u32);
        }
        let (mut bufs, sizes) = batch(&pkts, OFF, 65_535 + OFF);
        let mut gro = GroTable::new();
        gro.coalesce(&mut bufs, &sizes, OFF, true).unwrap();
        assert_eq!(gro.to_write(), [0], "one group");
        let mut frame = gro.frame(&bufs, 0);
        let (s, out) = split_ok(&mut frame, 64);
        assert_eq!(s.packets, n);
        assert_eq!(out, pkts, "round {round}: split(GRO(x)) == x");
    }
}

/// A plain packet larger than its buffer (laid out for a smaller MTU than the interface has
/// since taken) is dropped with `packet_too_big`, the error the device reads on after, not a
/// malformed-frame error.
#[test]
fn a_single_packet_larger_than_its_buffer_is_packet_too_big() {
    let big = tcp(A4, B4, ACK, 3000, 7);
    let mut frame = gso_frame(&big, VIRTIO_NET_HDR_GSO_NONE, 0);
    let (mut bufs, mut sizes) = out_bufs(4);
    let e = split_frame(&mut frame, &mut bufs, &mut sizes, OFF).unwrap_err();
    assert!(crate::is_packet_too_big(&e), "{e}");
    assert!(!crate::is_too_many_segments(&e));
}
