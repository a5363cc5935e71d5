//! wireguard-go's `handleGRO` table cases plus classification, header and randomized checks.

use super::*;
use crate::offload::testpkt::*;
use crate::offload::VIRTIO_NET_HDR_GSO_NONE;
use vpn_packet::ip::{Ipv4PacketMut, Ipv6PacketMut, IPV4_FLAG_DF, IPV4_FLAG_MF};

const OFF: usize = VIRTIO_NET_HDR_LEN;

struct Run {
    /// The batch's buffers after coalescing, each slot to write replaced by its gathered frame
    /// (virtio header, then the packet): what the kernel receives.
    bufs: Vec<Vec<u8>>,
    to_write: Vec<usize>,
    lens: Vec<usize>,
    coalesced: usize,
}

fn run(pkts: &[Vec<u8>], udp_gro: bool) -> Run {
    run_verifying(pkts, udp_gro, true)
}

fn run_verifying(pkts: &[Vec<u8>], udp_gro: bool, verify: bool) -> Run {
    let (mut bufs, sizes) = batch(pkts, OFF, 65_535 + OFF);
    let mut t = GroTable::new();
    t.set_verify_checksums(verify);
    t.coalesce(&mut bufs, &sizes, OFF, udp_gro)
        .expect("well-formed call");
    let to_write = t.to_write().to_vec();
    let lens = to_write.iter().map(|&i| t.len(i)).collect();
    let frames: Vec<_> = to_write.iter().map(|&i| t.frame(&bufs, i)).collect();
    for (&i, f) in to_write.iter().zip(frames) {
        bufs[i] = f;
    }
    Run {
        bufs,
        to_write,
        lens,
        coalesced: t.coalesced(),
    }
}

fn check(name: &str, pkts: Vec<Vec<u8>>, udp_gro: bool, want_write: &[usize], want_lens: &[usize]) {
    let r = run(&pkts, udp_gro);
    assert_eq!(r.to_write, want_write, "{name}: buffers to write");
    assert_eq!(r.lens, want_lens, "{name}: lengths");
    assert_eq!(
        r.coalesced,
        pkts.len() - want_write.len(),
        "{name}: coalesced count"
    );
}

/// Transport payload bytes of a test packet.
fn payload_len(p: &[u8]) -> usize {
    let ip = IpPacket::parse(p).unwrap();
    let l4 = ip.payload().unwrap();
    if ip.protocol() == PROTOCOL_UDP {
        UdpHeader::parse(l4).unwrap().payload().len()
    } else {
        TcpHeader::parse(l4).unwrap().payload().len()
    }
}

/// The IPv4 header of a test packet, to rewrite.
fn v4(p: &mut [u8]) -> Ipv4PacketMut<'_> {
    Ipv4PacketMut::parse(p).unwrap()
}

/// The IPv6 header of a test packet, to rewrite.
fn v6(p: &mut [u8]) -> Ipv6PacketMut<'_> {
    Ipv6PacketMut::parse(p).unwrap()
}

fn ttl_plus_one(p: &mut [u8]) {
    let mut ip = v4(p);
    ip.set_ttl(ip.ttl() + 1);
}

#[test]
fn multiple_protocols_and_flows() {
    let pkts = vec![
        tcp(A4, B4, ACK, 100, 1),   // tcp4 flow 1
        udp(A4, B4, 100),           // udp4 flow 1
        udp(A4, C4, 100),           // udp4 flow 2
        tcp(A4, B4, ACK, 100, 101), // tcp4 flow 1
        tcp(A4, C4, ACK, 100, 201), // tcp4 flow 2
        tcp(A6, B6, ACK, 100, 1),   // tcp6 flow 1
        tcp(A6, B6, ACK, 100, 101), // tcp6 flow 1
        tcp(A6, C6, ACK, 100, 201), // tcp6 flow 2
        udp(A4, B4, 100),           // udp4 flow 1
        udp(A6, B6, 100),           // udp6 flow 1
        udp(A6, B6, 100),           // udp6 flow 1
    ];
    check(
        "udp gro",
        pkts.clone(),
        true,
        &[0, 1, 2, 4, 5, 7, 9],
        &[240, 228, 128, 140, 260, 160, 248],
    );
    check(
        "no udp gro",
        pkts,
        false,
        &[0, 1, 2, 4, 5, 7, 8, 9, 10],
        &[240, 128, 128, 140, 260, 160, 128, 148, 148],
    );
}

#[test]
fn psh_interleaved() {
    let pkts = vec![
        tcp(A4, B4, ACK, 100, 1),
        tcp(A4, B4, ACK | PSH, 100, 101),
        tcp(A4, B4, ACK, 100, 201),
        tcp(A4, B4, ACK, 100, 301),
        tcp(A6, B6, ACK, 100, 1),
        tcp(A6, B6, ACK | PSH, 100, 101),
        tcp(A6, B6, ACK, 100, 201),
        tcp(A6, B6, ACK, 100, 301),
    ];
    let r = run(&pkts, true);
    assert_eq!(r.to_write, [0, 2, 4, 6]);
    assert_eq!(r.lens, [240, 240, 260, 260]);
    // PSH ends the first group and is kept on it.
    assert_ne!(tcp_flags(&r.bufs[0][OFF..]) & PSH, 0);
    assert_eq!(tcp_flags(&r.bufs[2][OFF..]) & PSH, 0);
}

/// A TCP flow and a UDP flow of three packets each whose first packet's checksum is bad.
fn bad_first_items() -> Vec<Vec<u8>> {
    let mut bad_tcp = tcp(A4, B4, ACK, 100, 1);
    flip_transport_checksum(&mut bad_tcp);
    let mut bad_udp = udp(A4, B4, 100);
    flip_transport_checksum(&mut bad_udp);
    vec![
        bad_tcp,
        tcp(A4, B4, ACK, 100, 101),
        tcp(A4, B4, ACK, 100, 201),
        bad_udp,
        udp(A4, B4, 100),
        udp(A4, B4, 100),
    ]
}

#[test]
fn invalid_item_checksum() {
    let pkts = bad_first_items();
    let r = run(&pkts, true);
    assert_eq!(r.to_write, [0, 1, 3, 4]);
    assert_eq!(r.lens, [140, 240, 128, 228]);
    // The dropped bad item is still written, with a zero virtio header (not headroom garbage).
    assert_eq!(&r.bufs[0][..OFF], &[0u8; OFF]);
    assert_eq!(&r.bufs[3][..OFF], &[0u8; OFF]);
}

#[test]
fn unverified_checksums_merge_like_good_ones() {
    // Verification off (a WireGuard device's writes, authenticated just before): the batch of
    // `invalid_item_checksum` merges as if every checksum were good, and the merged packets
    // carry the partial checksum the kernel completes, so they come out consistent.
    let pkts = bad_first_items();
    let r = run_verifying(&pkts, true, false);
    assert_eq!(r.to_write, [0, 3]);
    assert_eq!(r.lens, [340, 328]);
    assert_eq!(r.coalesced, 4);
    for (&i, &len) in r.to_write.iter().zip(&r.lens) {
        let h = VirtioHdr::decode(&r.bufs[i]).unwrap();
        assert_eq!(h.flags, VIRTIO_NET_HDR_F_NEEDS_CSUM);
        let mut p = r.bufs[i][OFF..OFF + len].to_vec();
        kernel_complete(&h, &mut p);
        assert!(
            checksums_ok(&p),
            "buffer {i}: merged checksum once the kernel completes it"
        );
    }
    // The same batch with verification on is `invalid_item_checksum`: nothing bad merged.
    assert_eq!(run(&pkts, true).to_write, [0, 1, 3, 4]);
}

#[test]
fn invalid_packet_checksum_is_written_alone() {
    let mut bad = tcp(A4, B4, ACK, 100, 101);
    flip_transport_checksum(&mut bad);
    check(
        "bad packet",
        vec![tcp(A4, B4, ACK, 100, 1), bad, tcp(A4, B4, ACK, 100, 101)],
        true,
        &[0, 1],
        &[240, 140],
    );
}

#[test]
fn out_of_order() {
    let pkts = vec![
        tcp(A4, B4, ACK, 100, 101),
        tcp(A4, B4, ACK, 100, 1),
        tcp(A4, B4, ACK, 100, 201),
    ];
    let r = run(&pkts, true);
    assert_eq!(r.to_write, [0]);
    assert_eq!(r.lens, [340]);
    // The prepended packet leads: slot 0 now starts at seq 1 and carries the stream in order.
    let p = tcp_header(&r.bufs[0][OFF..OFF + 340]);
    assert_eq!(p.seq(), 1);
    assert!(p
        .payload()
        .iter()
        .enumerate()
        .all(|(i, b)| *b == stream_byte(1 + i as u32)));
}

#[test]
fn unequal_ip_header_fields_do_not_merge() {
    type Mut = fn(&mut [u8]);
    let cases: [(&str, Mut); 4] = [
        ("ttl", ttl_plus_one),
        ("tos", |p| {
            let mut ip = v4(p);
            ip.set_dscp_ecn(ip.dscp_ecn() + 1);
        }),
        ("more fragments", |p| {
            let mut ip = v4(p);
            ip.set_flags(ip.flags() | IPV4_FLAG_MF);
        }),
        ("dont fragment", |p| {
            let mut ip = v4(p);
            ip.set_flags(ip.flags() | IPV4_FLAG_DF);
        }),
    ];
    for (name, f) in cases {
        let pkts = vec![
            tcp(A4, B4, ACK, 100, 1),
            with(tcp(A4, B4, ACK, 100, 101), f),
            udp(A4, B4, 100),
            with(udp(A4, B4, 100), f),
        ];
        check(name, pkts, true, &[0, 1, 2, 3], &[140, 140, 128, 128]);
    }
    type Mut6 = fn(&mut [u8]);
    let cases6: [(&str, Mut6); 2] = [
        ("hop limit", |p| {
            let mut ip = v6(p);
            ip.set_hop_limit(ip.hop_limit() + 1);
        }),
        ("traffic class", |p| {
            let mut ip = v6(p);
            ip.set_traffic_class(ip.traffic_class() | 1);
        }),
    ];
    for (name, f) in cases6 {
        let pkts = vec![
            tcp(A6, B6, ACK, 100, 1),
            with(tcp(A6, B6, ACK, 100, 101), f),
            udp(A6, B6, 100),
            with(udp(A6, B6, 100), f),
        ];
        check(name, pkts, true, &[0, 1, 2, 3], &[160, 160, 148, 148]);
    }
}

#[test]
fn fragment_offset_and_ip_options_are_not_candidates() {
    let offset_one = |p: &mut [u8]| v4(p).set_fragment_offset(1);
    let frag = with(tcp(A4, B4, ACK, 100, 1), offset_one);
    let r = run(
        &[frag.clone(), with(tcp(A4, B4, ACK, 100, 101), offset_one)],
        true,
    );
    assert_eq!(r.to_write, [0, 1]);
    // A header of 24 bytes (IHL 6: one word of options), built by hand.
    let mut opts = vec![0u8; 44];
    opts[0] = 0x46;
    assert_eq!(candidate(&opts, true), Candidate::None);
}

#[test]
fn different_ack_numbers_and_flags() {
    let other_ack = with(tcp(A4, B4, ACK, 100, 101), |p| tcp_mut(p).set_ack(9));
    check(
        "ack",
        vec![tcp(A4, B4, ACK, 100, 1), other_ack],
        true,
        &[0, 1],
        &[140, 140],
    );
    let syn = with(tcp(A4, B4, ACK, 100, 101), |p| tcp_mut(p).set_flags(0x12));
    check(
        "syn",
        vec![tcp(A4, B4, ACK, 100, 1), syn],
        true,
        &[0, 1],
        &[140, 140],
    );
    let fin = tcp(A4, B4, ACK | 0x01, 100, 101);
    check(
        "fin",
        vec![tcp(A4, B4, ACK, 100, 1), fin],
        true,
        &[0, 1],
        &[140, 140],
    );
}

#[test]
fn size_rules() {
    // A short segment ends the group; a larger one cannot follow a smaller one.
    check(
        "short then more",
        vec![
            tcp(A4, B4, ACK, 100, 1),
            tcp(A4, B4, ACK, 50, 101),
            tcp(A4, B4, ACK, 100, 151),
        ],
        true,
        &[0, 2],
        &[190, 140],
    );
    check(
        "larger after smaller",
        vec![tcp(A4, B4, ACK, 50, 1), tcp(A4, B4, ACK, 100, 51)],
        true,
        &[0, 1],
        &[90, 140],
    );
    check(
        "udp larger after smaller",
        vec![udp(A4, B4, 50), udp(A4, B4, 100)],
        true,
        &[0, 1],
        &[78, 128],
    );
    check(
        "udp short ends",
        vec![udp(A4, B4, 100), udp(A4, B4, 50), udp(A4, B4, 100)],
        true,
        &[0, 2],
        &[178, 128],
    );
}

#[test]
fn merging_needs_no_room_but_stays_within_limits() {
    // Buffers just large enough for their own packets still merge: nothing is copied...
    let pkts = [tcp(A4, B4, ACK, 100, 1), tcp(A4, B4, ACK, 100, 101)];
    let (mut bufs, sizes) = batch(&pkts, OFF, OFF + 140);
    let before = bufs.clone();
    let mut t = GroTable::new();
    t.coalesce(&mut bufs, &sizes, OFF, true).unwrap();
    assert_eq!(t.to_write(), [0]);
    assert_eq!(t.len(0), 240);
    assert_eq!(
        t.segments(0).collect::<Vec<_>>(),
        [(0, 0..OFF + 140), (1, OFF + 40..OFF + 140)]
    );
    // ...the second buffer is untouched and the first only had its headers rewritten.
    assert_eq!(bufs[1], before[1]);
    assert_eq!(bufs[0][OFF + 40..], before[0][OFF + 40..]);
    // Never beyond 65535 bytes.
    let pkts: Vec<_> = (0..3)
        .map(|i| tcp(A4, B4, ACK, 30_000, 1 + i * 30_000))
        .collect();
    let r = run(&pkts, true);
    assert_eq!(r.to_write, [0, 2]);
    assert_eq!(r.lens, [60_040, 30_040]);
}

#[test]
fn candidate_classification() {
    assert_eq!(
        candidate(&tcp(A4, B4, ACK, 0, 1)[..27], true),
        Candidate::None
    );
    assert_eq!(candidate(&tcp(A4, B4, ACK, 0, 1), true), Candidate::Tcp4);
    assert_eq!(candidate(&tcp(A6, B6, ACK, 0, 1), true), Candidate::Tcp6);
    assert_eq!(candidate(&udp(A4, B4, 1), true), Candidate::Udp4);
    assert_eq!(candidate(&udp(A4, B4, 1), false), Candidate::None);
    assert_eq!(candidate(&udp(A6, B6, 0), true), Candidate::Udp6);
    assert_eq!(candidate(&udp(A6, B6, 0), false), Candidate::None);
    // Version 5: no view makes one, so the byte is written by hand.
    let mut bad_version = tcp(A4, B4, ACK, 10, 1);
    bad_version[0] = 0x55;
    assert_eq!(candidate(&bad_version, true), Candidate::None);
    let icmp = with(udp(A4, B4, 20), |p| v4(p).set_protocol(1));
    assert_eq!(candidate(&icmp, true), Candidate::None);
}

#[test]
fn malformed_calls_are_errors_not_panics() {
    let pkts = [tcp(A4, B4, ACK, 100, 1)];
    let (mut bufs, mut sizes) = batch(&pkts, OFF, 200);
    let mut t = GroTable::new();
    assert!(t.coalesce(&mut bufs, &sizes, 9, true).is_err());
    sizes[0] = 500;
    assert!(t.coalesce(&mut bufs, &sizes, OFF, true).is_err());
    assert!(t.coalesce(&mut bufs, &[], OFF, true).is_err());
    // Garbage packets are written as-is.
    let junk = vec![vec![0x45u8; 60], vec![0x60u8; 80], vec![0u8; 3], vec![]];
    let r = run(&junk, true);
    assert_eq!(r.to_write, [0, 1, 2, 3]);
}

/// What the kernel does with a GSO write: complete the partial checksum.
fn kernel_complete(hdr: &VirtioHdr, pkt: &mut [u8]) {
    let mut field = hdr.partial_checksum(pkt).unwrap();
    let seed = u64::from(field.get());
    field.set(0);
    let c = !checksum(field.covered(), seed);
    field.set(c);
}

#[test]
fn merged_headers_and_checksums() {
    let pkts = vec![
        tcp(A4, B4, ACK, 100, 1),
        tcp(A4, B4, ACK | PSH, 100, 101),
        udp(A6, B6, 100),
        udp(A6, B6, 100),
        tcp(A6, B6, ACK, 10, 1),
    ];
    let r = run(&pkts, true);
    assert_eq!(r.to_write, [0, 2, 4]);
    let h = VirtioHdr::decode(&r.bufs[0]).unwrap();
    assert_eq!(
        h,
        VirtioHdr {
            flags: VIRTIO_NET_HDR_F_NEEDS_CSUM,
            gso_type: VIRTIO_NET_HDR_GSO_TCPV4,
            hdr_len: 40,
            gso_size: 100,
            csum_start: 20,
            csum_offset: 16
        }
    );
    let mut p = r.bufs[0][OFF..OFF + 240].to_vec();
    let ip = Ipv4Packet::parse(&p).unwrap();
    assert_eq!(ip.total_len(), 240);
    assert_eq!(
        checksum(ip.header_bytes().unwrap(), 0),
        0xffff,
        "IPv4 header checksum"
    );
    kernel_complete(&h, &mut p);
    assert!(checksums_ok(&p));

    let h = VirtioHdr::decode(&r.bufs[2]).unwrap();
    assert_eq!(
        (
            h.gso_type,
            h.hdr_len,
            h.gso_size,
            h.csum_start,
            h.csum_offset
        ),
        (VIRTIO_NET_HDR_GSO_UDP_L4, 48, 100, 40, 6)
    );
    let mut p = r.bufs[2][OFF..OFF + 248].to_vec();
    let ip = Ipv6Packet::parse(&p).unwrap();
    let udp = UdpHeader::parse(ip.payload().unwrap()).unwrap();
    assert_eq!((ip.payload_len(), udp.length()), (208, 208));
    kernel_complete(&h, &mut p);
    assert!(checksums_ok(&p));

    let h = VirtioHdr::decode(&r.bufs[4]).unwrap();
    assert_eq!(
        h,
        VirtioHdr {
            gso_type: VIRTIO_NET_HDR_GSO_NONE,
            ..VirtioHdr::default()
        }
    );
    assert_eq!(&r.bufs[4][OFF..OFF + 70], &pkts[4][..]);
}

#[test]
fn randomized_streams_reassemble_in_order() {
    // Several interleaved TCP and UDP flows with random sizes, some reordering and corrupted
    // checksums: whatever is merged must be exactly the flow's bytes in order, nothing lost.
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut rnd = move |n: u64| {
        x ^= x << 7;
        x ^= x >> 9;
        x % n
    };
    for _round in 0..200 {
        let mut pkts = Vec::new();
        let mut seqs = [1u32, 1, 1];
        let flows = [(A4, B4), (A6, B6), (A4, C4)];
        let n = 1 + rnd(128) as usize;
        for _ in 0..n {
            let f = rnd(4) as usize;
            if f == 3 {
                pkts.push(udp(A4, B4, 1 + rnd(200) as usize));
                continue;
            }
            let len = if rnd(4) == 0 {
                1 + rnd(100) as usize
            } else {
                100
            };
            let flags = if rnd(8) == 0 { ACK | PSH } else { ACK };
            let mut p = tcp(flows[f].0, flows[f].1, flags, len, seqs[f]);
            seqs[f] = seqs[f].wrapping_add(len as u32);
            if rnd(20) == 0 {
                flip_transport_checksum(&mut p);
            }
            pkts.push(p);
            if pkts.len() >= 2 && rnd(10) == 0 {
                let k = pkts.len();
                pkts.swap(k - 1, k - 2);
            }
        }
        let r = run(&pkts, true);
        let mut total_payload = 0;
        for (&i, &l) in r.to_write.iter().zip(&r.lens) {
            let p = &r.bufs[i][OFF..OFF + l];
            let h = VirtioHdr::decode(&r.bufs[i]).unwrap();
            if h.gso_type == VIRTIO_NET_HDR_GSO_NONE {
                total_payload += payload_len(p);
                continue;
            }
            let mut q = p.to_vec();
            kernel_complete(&h, &mut q);
            assert!(checksums_ok(&q), "merged packet checksum");
            if h.gso_type != VIRTIO_NET_HDR_GSO_UDP_L4 {
                let th = tcp_header(&q);
                assert_eq!(
                    th.header_len() + usize::from(h.csum_start),
                    usize::from(h.hdr_len)
                );
                let seq = th.seq();
                let in_order = th
                    .payload()
                    .iter()
                    .enumerate()
                    .all(|(k, b)| *b == stream_byte(seq.wrapping_add(k as u32)));
                assert!(in_order, "stream bytes in order");
            }
            total_payload += l - usize::from(h.hdr_len);
        }
        let want: usize = pkts.iter().map(|p| payload_len(p)).sum();
        assert_eq!(total_payload, want, "no payload lost or duplicated");
    }
}

#[test]
fn groups_stop_at_what_writev_and_the_kernel_take() {
    // 1-byte TCP segments: 1 100 fit in 65 535 bytes, but a group stops at MAX_SEGMENTS
    // pieces (one writev) and the rest start a new one.
    let pkts: Vec<_> = (0..1100).map(|i| tcp(A4, B4, ACK, 1, 1 + i)).collect();
    let r = run(&pkts, true);
    assert_eq!(r.to_write, [0, MAX_SEGMENTS]);
    assert_eq!(r.lens, [40 + MAX_SEGMENTS, 40 + (1100 - MAX_SEGMENTS)]);
    // UDP groups stop at what the kernel splits (UDP_MAX_SEGMENTS).
    let pkts: Vec<_> = (0..150).map(|_| udp(A4, B4, 1)).collect();
    let r = run(&pkts, true);
    let m = MAX_UDP_SEGMENTS;
    assert_eq!(r.to_write, [0, m, 2 * m]);
    assert_eq!(r.lens, [28 + m, 28 + m, 28 + (150 - 2 * m)]);
}
