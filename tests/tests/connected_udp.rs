//! Devices over real loopback sockets with connected sockets on (`StdNetBind` +
//! `ConnectedSockets` + the device's `ReceiveFuncStarter`): pairs open mid-stream without
//! losing traffic, and under a memory budget smaller than all the readers' slabs together every
//! pair reader is still admitted (an idle reader holds no memory) and every reader keeps going
//! as slabs return.

#![forbid(unsafe_code)]
#![cfg(target_os = "linux")]

use std::collections::HashSet;
use std::time::{Duration, Instant};
use vpn_conn::{ConnectedOptions, StdNetBind};
use vpn_device::Options;
use vpn_tests::*;

fn side(n: u8, budget: Option<usize>) -> UdpNode {
    let bind = StdNetBind::new().with_connected_options(ConnectedOptions {
        enabled: true,
        open_after: 256 << 10,
        idle_interval: Duration::ZERO,
        ..ConnectedOptions::default()
    });
    let mut opts = Options::default();
    if let Some(b) = budget {
        opts.memory_budget = b;
    }
    UdpNode::new(n, bind, opts)
}

/// Sends `n` numbered 1200-byte packets from each sender to `to`, paced, and checks that all
/// of them arrive exactly once (order may change where a pair socket takes over from the
/// shared one).
fn bulk(senders: &[&UdpNode], to: &UdpNode, n: u32) {
    std::thread::scope(|s| {
        for (k, a) in senders.iter().enumerate() {
            let (src, dst, tun) = (a.ip, to.ip, a.tun.clone());
            s.spawn(move || {
                for i in 0..n {
                    let mut payload = vec![k as u8; 1200];
                    payload[..4].copy_from_slice(&i.to_be_bytes());
                    tun.inject(udp_packet(src, dst, 100 + k as u16, 2, &payload));
                    if i % 256 == 255 {
                        std::thread::sleep(Duration::from_millis(2));
                    }
                }
            });
        }
        let mut seen = HashSet::new();
        let want = n as usize * senders.len();
        let deadline = Instant::now() + Duration::from_secs(60);
        while seen.len() < want && Instant::now() < deadline {
            let Some(p) = to.tun.recv(Duration::from_secs(3)) else {
                break;
            };
            let pl = udp_payload(&p);
            let i = u32::from_be_bytes([pl[0], pl[1], pl[2], pl[3]]);
            assert!(seen.insert((pl[4], i)), "duplicate {i} from {}", pl[4]);
        }
        // Loopback UDP may drop under pressure; the tunnel must not lose more than that.
        assert!(
            seen.len() >= want * 99 / 100,
            "delivered {} of {want}; {:?}",
            seen.len(),
            to.bind.stats()
        );
    });
}

fn handshake(a: &UdpNode, b: &UdpNode) {
    a.tun.inject(udp_packet(a.ip, b.ip, 1, 2, b"ping"));
    let p = b.tun.recv(Duration::from_secs(5)).expect("handshake");
    assert_eq!(udp_payload(&p), b"ping");
}

#[test]
fn pairs_open_mid_stream_both_sides_without_loss() {
    // Default options: pair readers are admitted on a dual-stack bind.
    let a = side(1, None);
    let b = side(2, None);
    a.connect(&b);
    b.connect(&a);
    handshake(&a, &b);
    let before = b.dev.started_readers();
    bulk(&[&a], &b, 4000);
    bulk(&[&b], &a, 4000);
    let (sa, sb) = (a.bind.stats(), b.bind.stats());
    assert!(
        sa.connected_dials >= 1 && sb.connected_dials >= 1,
        "{sa:?} {sb:?}"
    );
    assert!(sa.connected_datagrams_sent > 0 && sb.connected_datagrams_received > 0);
    assert!(b.dev.started_readers() > before);
    // After a rebind (port change) traffic flows again and pairs redial.
    b.dev.ipc_set("listen_port=0\n").unwrap();
    a.connect(&b);
    bulk(&[&a], &b, 4000);
    assert!(b.bind.stats().connected_dials > sb.connected_dials);
}

#[test]
fn a_small_budget_admits_every_pair_reader_and_traffic_keeps_flowing() {
    // 1.5 MiB: the TUN's and the two shared readers' slabs (256 + 2 × 384 KiB) and four pair
    // readers' (190 KiB each) do not fit together, so readers wait for each other's slabs.
    let b = side(10, Some(1536 << 10));
    let senders: Vec<UdpNode> = (11..15).map(|n| side(n, None)).collect();
    for a in &senders {
        a.connect(&b);
        b.connect(a);
        handshake(a, &b);
    }
    let refs: Vec<&UdpNode> = senders.iter().collect();
    bulk(&refs, &b, 3000);
    let st = b.bind.stats();
    assert_eq!(
        st.connected_open, 4,
        "every pair reader admitted under the budget: {st:?}"
    );
    // And again, with the pool warm: nothing got stuck.
    bulk(&refs, &b, 1000);
}
