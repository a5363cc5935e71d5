//! Two devices over real UDP sockets on 127.0.0.1 (`StdNetBind`: recvmmsg/sendmmsg, GSO/GRO).

#![forbid(unsafe_code)]
#![cfg(target_os = "linux")]

use std::collections::HashMap;
use std::net::IpAddr;
use std::time::{Duration, Instant};
use vpn_conn::StdNetBind;
use vpn_device::Options;
use vpn_tests::*;

#[test]
fn ping_and_ordered_bulk_over_loopback_udp() {
    let a = UdpNode::new(1, StdNetBind::new(), Options::default());
    let b = UdpNode::new(2, StdNetBind::new(), Options::default());
    a.connect(&b);
    b.connect(&a);
    let (s, d) = (
        "100.64.0.1".parse::<IpAddr>().unwrap(),
        "100.64.0.2".parse::<IpAddr>().unwrap(),
    );
    // Ping both ways (the first packet waits for the handshake).
    a.tun.inject(udp_packet(s, d, 1, 2, b"ping"));
    let p = b.tun.recv(Duration::from_secs(5)).expect("a->b");
    assert_eq!(udp_payload(&p), b"ping");
    b.tun.inject(udp_packet(d, s, 2, 1, b"pong"));
    let p = a.tun.recv(Duration::from_secs(5)).expect("b->a");
    assert_eq!(udp_payload(&p), b"pong");
    // Lone datagrams never make a reader yield its CPU; bursts below do.
    assert_eq!(b.dev.stats().datagram_yields, 0);
    // Bulk: 4 flows, paced in bursts so loopback socket buffers never overflow.
    const N: u32 = 20_000;
    let tun = a.tun.clone();
    let sender = std::thread::spawn(move || {
        for i in 0..N {
            let flow = (i % 4) as u16;
            let mut payload = vec![(i % 251) as u8; 1200];
            payload[..4].copy_from_slice(&i.to_be_bytes());
            tun.inject(udp_packet(s, d, 100 + flow, 2, &payload));
            if i % 512 == 511 {
                std::thread::sleep(Duration::from_millis(2));
            }
        }
    });
    let mut last: HashMap<u16, u32> = HashMap::new();
    let mut got = 0;
    let deadline = Instant::now() + Duration::from_secs(60);
    while got < N && Instant::now() < deadline {
        let Some(p) = b.tun.recv(Duration::from_secs(3)) else {
            break;
        };
        let pl = udp_payload(&p);
        let i = u32::from_be_bytes([pl[0], pl[1], pl[2], pl[3]]);
        assert!(
            pl[4..].iter().all(|&x| x == (i % 251) as u8),
            "content of {i}"
        );
        let flow = u16::from_be_bytes([p[20], p[21]]) - 100;
        if let Some(prev) = last.insert(flow, i) {
            assert!(i > prev, "flow {flow}: {i} after {prev}");
        }
        got += 1;
    }
    sender.join().unwrap();
    let st = b.bind.stats();
    // Loopback UDP may drop under pressure; the tunnel must not lose more than the socket does.
    assert!(
        got >= N * 99 / 100,
        "delivered {got} of {N}; bind stats {st:?}"
    );
    assert!(
        b.dev.stats().datagram_yields > 0,
        "no yield after bursts of datagrams: {:?}",
        b.dev.stats()
    );
    assert!(
        a.dev.stats().datagrams_per_send() > 1.0,
        "batched sends: {:?}",
        a.dev.stats()
    );
}
