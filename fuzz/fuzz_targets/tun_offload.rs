//! Fuzzes the TUN offload code: GSO splitting of frames read from the kernel and GRO
//! coalescing of batches written to it. Neither may panic on any input, and every group GRO
//! builds must split back into exactly the packets that went in.
#![no_main]

use libfuzzer_sys::fuzz_target;
use vpn_tun::offload::split::split_frame;
use vpn_tun::offload::{GroTable, VirtioHdr, VIRTIO_NET_HDR_GSO_NONE, VIRTIO_NET_HDR_LEN};

const OFF: usize = 16;

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    if mode & 1 == 0 {
        // One frame as read from an IFF_VNET_HDR fd, into 1..=64 buffers.
        let mut frame = rest.to_vec();
        let n = 1 + usize::from(mode >> 2);
        let mut bufs = vec![vec![0u8; OFF + 1500]; n];
        let mut sizes = vec![0usize; n];
        if let Ok(s) = split_frame(&mut frame, &mut bufs, &mut sizes, OFF) {
            assert!(s.packets <= n);
            assert!(sizes[..s.packets].iter().all(|&l| l <= 1500));
        }
        return;
    }
    // A batch: [len: u16 BE][packet] repeated, at most 128 packets. Bit 2 turns checksum
    // verification off (as a WireGuard device's TUN does), so random packets merge too.
    let udp_gro = mode & 2 != 0;
    let verify = mode & 4 == 0;
    let mut pkts = Vec::new();
    let mut r = rest;
    while r.len() >= 2 && pkts.len() < 128 {
        let len = usize::from(u16::from_be_bytes([r[0], r[1]])).min(r.len() - 2);
        pkts.push(&r[2..2 + len]);
        r = &r[2 + len..];
    }
    let mut bufs: Vec<Vec<u8>> = pkts
        .iter()
        .map(|p| {
            let mut b = vec![0u8; OFF + 65_535];
            b[OFF..OFF + p.len()].copy_from_slice(p);
            b
        })
        .collect();
    let sizes: Vec<usize> = pkts.iter().map(|p| p.len()).collect();
    let mut gro = GroTable::new();
    gro.set_verify_checksums(verify);
    gro.coalesce(&mut bufs, &sizes, OFF, udp_gro)
        .expect("well-formed call");
    let mut segments = 0;
    for &i in gro.to_write() {
        // The frame the kernel gets: after a prepend its first piece (with the virtio header)
        // is not slot i's own buffer.
        let mut frame = gro.frame(&bufs, i);
        assert_eq!(frame.len(), VIRTIO_NET_HDR_LEN + gro.len(i));
        let hdr = VirtioHdr::decode(&frame).expect("header");
        if hdr.gso_type == VIRTIO_NET_HDR_GSO_NONE {
            segments += 1;
            continue;
        }
        let mut out = vec![vec![0u8; OFF + 65_535]; 128];
        let mut out_sizes = vec![0usize; 128];
        let s = split_frame(&mut frame, &mut out, &mut out_sizes, OFF).expect("GRO output splits");
        assert!(!s.truncated);
        segments += s.packets;
    }
    assert_eq!(
        segments,
        pkts.len(),
        "every packet is written once, alone or in a group"
    );
});
