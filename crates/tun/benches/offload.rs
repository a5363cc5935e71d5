//! The TUN's offload code on the hot path: GRO coalescing of a batch written to the TUN
//! (`offload::GroTable`) and the GSO split of a super-packet read from it
//! (`offload::split::split_frame`), on the batch shapes a bulk transfer makes.
//!
//! GRO: 64 segments of 1400 payload bytes of one TCP flow (IPv4, IPv6; checksums trusted, as
//! `LinuxTun` runs it, and verified, `GroTable`'s default; IPv4 with the timestamp option Linux
//! sends, whose options GRO compares), 64 UDP datagrams of one flow, and 64
//! TCP segments of 64 different flows (nothing merges: the flow scan's worst case). Each
//! iteration coalesces a fresh copy of the batch (GRO rewrites the heads' headers); the copy is
//! made outside the timed part. Split: one 64 KiB TSO/USO super-packet into 1400-byte segments,
//! and one plain packet whose partial checksum is completed.
//!
//! The packets are built by hand here, not with `vpn-packet`'s views, so that the same file
//! measures the offload code from before and after it read headers through the views.
//!
//! Run: `cargo bench -p vpn-tun --bench offload -- --warm-up-time 1 --measurement-time 3`

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, BatchSize, Criterion};
use vpn_tun::offload::GroTable;

/// Headroom in front of every packet, as the device reads and writes.
const OFF: usize = 16;
const BATCH: usize = 64;
const MSS: usize = 1400;
const TCP: u8 = 6;
const UDP: u8 = 17;
const ACK: u8 = 0x10;

/// The folded ones'-complement sum of `data` plus `seed`.
fn sum(data: &[u8], seed: u32) -> u16 {
    let mut s = seed;
    for w in data.chunks(2) {
        s += u32::from(u16::from_be_bytes([w[0], *w.get(1).unwrap_or(&0)]));
        s = (s & 0xffff) + (s >> 16);
    }
    s as u16
}

/// An IPv4 or IPv6 packet of `proto` carrying a TCP header (ACK, sequence `seq`, ports `sport`
/// -> 5201, options `opts`) or a UDP header, then `len` payload bytes, with valid checksums.
fn packet_with(v6: bool, proto: u8, sport: u16, seq: u32, len: usize, opts: &[u8]) -> Vec<u8> {
    let l4 = if proto == TCP { 20 + opts.len() } else { 8 } + len;
    let mut p = Vec::with_capacity(60 + len);
    let (src, dst): (Vec<u8>, Vec<u8>) = if v6 {
        let a = [0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];
        let mut b = a;
        b[15] = 2;
        (a.to_vec(), b.to_vec())
    } else {
        (vec![100, 64, 0, 1], vec![100, 64, 0, 2])
    };
    if v6 {
        p.extend_from_slice(&[0x60, 0, 0, 0]);
        p.extend_from_slice(&(l4 as u16).to_be_bytes());
        p.extend_from_slice(&[proto, 64]);
        p.extend_from_slice(&src);
        p.extend_from_slice(&dst);
    } else {
        p.extend_from_slice(&[0x45, 0]);
        p.extend_from_slice(&((20 + l4) as u16).to_be_bytes());
        p.extend_from_slice(&[0, 0, 0x40, 0, 64, proto, 0, 0]);
        p.extend_from_slice(&src);
        p.extend_from_slice(&dst);
        let c = !sum(&p, 0);
        p[10..12].copy_from_slice(&c.to_be_bytes());
    }
    let iph = p.len();
    p.extend_from_slice(&sport.to_be_bytes());
    p.extend_from_slice(&5201u16.to_be_bytes());
    if proto == TCP {
        p.extend_from_slice(&seq.to_be_bytes());
        p.extend_from_slice(&1u32.to_be_bytes());
        let doff = (5 + opts.len() / 4) as u8;
        p.extend_from_slice(&[doff << 4, ACK, 0xff, 0xff, 0, 0, 0, 0]);
        p.extend_from_slice(opts);
    } else {
        p.extend_from_slice(&(l4 as u16).to_be_bytes());
        p.extend_from_slice(&[0, 0]);
    }
    p.extend((0..len).map(|i| (i as u32).wrapping_add(seq) as u8));
    let mut pseudo = Vec::new();
    pseudo.extend_from_slice(&src);
    pseudo.extend_from_slice(&dst);
    pseudo.extend_from_slice(&[0, proto]);
    pseudo.extend_from_slice(&(l4 as u16).to_be_bytes());
    let c = !sum(&p[iph..], u32::from(sum(&pseudo, 0)));
    let at = iph + if proto == TCP { 16 } else { 6 };
    p[at..at + 2].copy_from_slice(&c.to_be_bytes());
    p
}

fn packet(v6: bool, proto: u8, sport: u16, seq: u32, len: usize) -> Vec<u8> {
    packet_with(v6, proto, sport, seq, len, &[])
}

/// TCP timestamps (NOP, NOP, kind 8): what Linux puts on every segment by default.
const TIMESTAMPS: [u8; 12] = [1, 1, 8, 10, 0, 0, 0x12, 0x34, 0, 0, 0x56, 0x78];

/// Buffers holding `pkts` at `OFF`, each with room for its own packet only.
fn batch(pkts: &[Vec<u8>]) -> (Vec<Vec<u8>>, Vec<usize>) {
    let bufs = pkts
        .iter()
        .map(|p| {
            let mut b = vec![0u8; OFF + p.len()];
            b[OFF..].copy_from_slice(p);
            b
        })
        .collect();
    (bufs, pkts.iter().map(Vec::len).collect())
}

fn gro_case(c: &mut Criterion, name: &str, pkts: &[Vec<u8>], udp_gro: bool, verify: bool) {
    let (bufs, sizes) = batch(pkts);
    let mut gro = GroTable::new();
    gro.set_verify_checksums(verify);
    // The shape is what it claims: check once, outside the measurement.
    gro.coalesce(&mut bufs.clone(), &sizes, OFF, udp_gro)
        .unwrap();
    eprintln!(
        "{name}: {} packets -> {} writes",
        pkts.len(),
        gro.to_write().len()
    );
    c.bench_function(name, |b| {
        b.iter_batched_ref(
            || bufs.clone(),
            |bufs| {
                gro.coalesce(bufs, black_box(&sizes), OFF, udp_gro).unwrap();
                black_box(gro.to_write().len())
            },
            BatchSize::SmallInput,
        )
    });
}

fn gro(c: &mut Criterion) {
    let stream = |v6: bool| -> Vec<Vec<u8>> {
        (0..BATCH)
            .map(|i| packet(v6, TCP, 40000, 1 + (i * MSS) as u32, MSS))
            .collect()
    };
    gro_case(c, "gro/tcp4_64x1400", &stream(false), false, false);
    gro_case(c, "gro/tcp6_64x1400", &stream(true), false, false);
    gro_case(c, "gro/tcp4_64x1400_verify", &stream(false), false, true);
    let ts: Vec<_> = (0..BATCH)
        .map(|i| packet_with(false, TCP, 40000, 1 + (i * MSS) as u32, MSS, &TIMESTAMPS))
        .collect();
    gro_case(c, "gro/tcp4_64x1400_timestamps", &ts, false, false);
    let udp: Vec<_> = (0..BATCH)
        .map(|_| packet(false, UDP, 40000, 0, MSS))
        .collect();
    gro_case(c, "gro/udp4_64x1400", &udp, true, false);
    let flows: Vec<_> = (0..BATCH)
        .map(|i| packet(false, TCP, 40000 + i as u16, 1, MSS))
        .collect();
    gro_case(c, "gro/tcp4_64_flows", &flows, false, false);
}

/// The split exists on Linux only (tun-rs's `gso_split`; Android refuses super-packets).
#[cfg(target_os = "linux")]
fn split(c: &mut Criterion) {
    use vpn_tun::offload::split::split_frame;
    use vpn_tun::offload::{
        VirtioHdr, VIRTIO_NET_HDR_F_NEEDS_CSUM, VIRTIO_NET_HDR_GSO_NONE, VIRTIO_NET_HDR_GSO_TCPV4,
        VIRTIO_NET_HDR_GSO_TCPV6, VIRTIO_NET_HDR_GSO_UDP_L4, VIRTIO_NET_HDR_LEN,
    };

    /// A frame as the TUN reads it: virtio header, then `pkt`.
    fn frame(
        pkt: &[u8],
        gso_type: u8,
        gso_size: u16,
        csum_start: u16,
        csum_offset: u16,
    ) -> Vec<u8> {
        let hdr = VirtioHdr {
            flags: VIRTIO_NET_HDR_F_NEEDS_CSUM,
            gso_type,
            hdr_len: pkt.len().min(usize::from(u16::MAX)) as u16,
            gso_size,
            csum_start,
            csum_offset,
        };
        let mut f = vec![0u8; VIRTIO_NET_HDR_LEN];
        assert!(hdr.encode(&mut f));
        f.extend_from_slice(pkt);
        f
    }

    let cases = [
        (
            "split/tcp4_64k",
            packet(false, TCP, 40000, 1, 65_535 - 40),
            VIRTIO_NET_HDR_GSO_TCPV4,
            20,
            16,
        ),
        (
            "split/tcp6_64k",
            packet(true, TCP, 40000, 1, 65_535 - 60),
            VIRTIO_NET_HDR_GSO_TCPV6,
            40,
            16,
        ),
        (
            "split/udp4_64k",
            packet(false, UDP, 40000, 0, 65_535 - 28),
            VIRTIO_NET_HDR_GSO_UDP_L4,
            20,
            6,
        ),
        (
            "split/single_1400",
            packet(false, TCP, 40000, 1, MSS),
            VIRTIO_NET_HDR_GSO_NONE,
            20,
            16,
        ),
    ];
    for (name, pkt, gso_type, csum_start, csum_offset) in cases {
        let gso_size = if gso_type == VIRTIO_NET_HDR_GSO_NONE {
            0
        } else {
            MSS as u16
        };
        let mut f = frame(&pkt, gso_type, gso_size, csum_start, csum_offset);
        let mut bufs = vec![vec![0u8; OFF + 1500]; BATCH];
        let mut sizes = vec![0usize; BATCH];
        let s = split_frame(&mut f, &mut bufs, &mut sizes, OFF).unwrap();
        eprintln!("{name}: {} packets", s.packets);
        // The split reads the frame and writes the buffers. A plain packet's checksum is
        // completed in the frame: the field changes each time, the work does not.
        c.bench_function(name, |b| {
            b.iter(|| {
                let s = split_frame(black_box(&mut f), &mut bufs, &mut sizes, OFF).unwrap();
                black_box(s.packets)
            })
        });
    }
}

#[cfg(not(target_os = "linux"))]
fn split(_c: &mut Criterion) {}

criterion_group!(benches, gro, split);
criterion_main!(benches);
