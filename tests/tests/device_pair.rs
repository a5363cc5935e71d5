//! Two devices over the in-memory network: ping, bulk transfer with order checks, roaming,
//! crypto-key routing, replay.

#![forbid(unsafe_code)]

use std::collections::HashMap;
use std::net::IpAddr;
use std::time::{Duration, Instant};
use vpn_conn::memory::MemoryNetwork;
use vpn_tests::*;

#[test]
fn ping_both_ways_ipv4_and_ipv6() {
    let net = MemoryNetwork::new();
    let (a, b) = pair(&net, 1, None);
    assert!(ping(&a, &b, false, Duration::from_secs(5)), "a->b v4");
    assert!(ping(&b, &a, false, Duration::from_secs(5)), "b->a v4");
    assert!(ping(&a, &b, true, Duration::from_secs(5)), "a->b v6");
    assert!(ping(&b, &a, true, Duration::from_secs(5)), "b->a v6");
    let pa = a.dev.peer(&b.key.public_key()).unwrap();
    assert!(pa.last_handshake().is_some());
    let (rx, tx) = pa.rx_tx_bytes();
    assert!(rx > 0 && tx > 0);
}

#[test]
fn bulk_transfer_keeps_every_byte_and_per_flow_order() {
    bulk_transfer(0);
}

/// One crypto worker: batches are sealed and opened on the thread that produced them.
#[test]
fn bulk_transfer_with_inline_crypto() {
    bulk_transfer(1);
}

#[test]
fn ping_with_inline_crypto() {
    let net = MemoryNetwork::new();
    let (a, b) = pair_with_workers(&net, 1, None, 1);
    assert!(ping(&a, &b, false, Duration::from_secs(5)));
    assert!(ping(&b, &a, true, Duration::from_secs(5)));
}

fn bulk_transfer(workers: usize) {
    const FLOWS: u16 = 8;
    const PACKETS: u32 = 100_000;
    let net = MemoryNetwork::new();
    let (a, b) = pair_with_workers(&net, 128, None, workers);
    assert!(ping(&a, &b, false, Duration::from_secs(5)));
    let tun = a.tun.clone();
    let (s, d) = (IpAddr::V4(a.v4), IpAddr::V4(b.v4));
    let sender = std::thread::spawn(move || {
        for i in 0..PACKETS {
            let flow = (i % u32::from(FLOWS)) as u16;
            let seq = i / u32::from(FLOWS);
            let len = 16 + (i as usize * 7919) % 1300;
            let mut payload = vec![0u8; len];
            payload[..2].copy_from_slice(&flow.to_be_bytes());
            payload[2..6].copy_from_slice(&seq.to_be_bytes());
            for (j, x) in payload[6..].iter_mut().enumerate() {
                *x = (i as usize + j) as u8;
            }
            assert!(tun.inject(udp_packet(s, d, 1000 + flow, 2000, &payload)));
        }
    });
    let mut next: HashMap<u16, u32> = HashMap::new();
    let mut got = 0u32;
    let deadline = Instant::now() + Duration::from_secs(120);
    while got < PACKETS && Instant::now() < deadline {
        let Some(p) = b.recv(Duration::from_secs(5)) else {
            break;
        };
        let pl = udp_payload(&p);
        let flow = u16::from_be_bytes([pl[0], pl[1]]);
        let seq = u32::from_be_bytes([pl[2], pl[3], pl[4], pl[5]]);
        let i = seq * u32::from(FLOWS) + u32::from(flow);
        assert_eq!(
            pl.len(),
            16 + (i as usize * 7919) % 1300,
            "length of packet {i}"
        );
        for (j, x) in pl[6..].iter().enumerate() {
            assert_eq!(*x, (i as usize + j) as u8, "byte {j} of packet {i}");
        }
        let want = next.entry(flow).or_insert(0);
        assert_eq!(seq, *want, "flow {flow} out of order");
        *want += 1;
        got += 1;
    }
    sender.join().unwrap();
    assert_eq!(got, PACKETS, "packets delivered");
    let st = a.dev.stats();
    assert!(
        st.packets_per_tun_read() > 1.0,
        "TUN reads were batched: {st:?}"
    );
    assert!(st.datagrams_per_send() > 1.0, "sends were batched: {st:?}");
}

#[test]
fn roaming_follows_the_last_authenticated_packet() {
    let net = MemoryNetwork::new();
    let (a, b) = pair(&net, 1, None);
    assert!(ping(&a, &b, false, Duration::from_secs(5)));
    // b moves to another underlay address and port.
    b.bind.set_ip("198.18.9.9".parse().unwrap());
    b.dev.ipc_set("listen_port=0\n").unwrap();
    let new_addr = b.addr();
    assert_ne!(new_addr.ip(), b.underlay);
    assert!(
        ping(&b, &a, false, Duration::from_secs(5)),
        "b->a after move"
    );
    let ep = a.dev.peer(&b.key.public_key()).unwrap().endpoint().unwrap();
    assert_eq!(ep.dst, new_addr, "a learned b's new endpoint");
    assert!(
        ping(&a, &b, false, Duration::from_secs(5)),
        "a->b reaches the new address"
    );
    assert!(a
        .dev
        .ipc_get()
        .unwrap()
        .contains(&format!("endpoint={new_addr}")));
}

#[test]
fn inner_source_must_belong_to_the_sending_peer() {
    let net = MemoryNetwork::new();
    let (a, b) = pair(&net, 1, None);
    assert!(ping(&a, &b, false, Duration::from_secs(5)));
    // a sends a packet with a source address b routes to nobody (or to another peer).
    let spoofed = udp_packet(
        "100.64.0.77".parse().unwrap(),
        IpAddr::V4(b.v4),
        1,
        2,
        b"spoof",
    );
    assert!(a.tun.inject(spoofed));
    assert!(
        ping(&a, &b, false, Duration::from_secs(5)),
        "genuine traffic still flows"
    );
    while let Some(p) = b.tun.try_recv() {
        assert_ne!(udp_payload(&p), b"spoof");
    }
    assert!(b.dev.stats().drop_source_not_allowed >= 1);
    // Crypto-key routing: give a's address to a third key on b; a's packets are then dropped.
    let c = private_key();
    b.dev
        .ipc_set(&format!(
            "public_key={}\nallowed_ip={}/32\n",
            c.public_key().to_hex(),
            a.v4
        ))
        .unwrap();
    let before = b.dev.stats().drop_source_not_allowed;
    a.send_udp(&b, false, b"after move");
    assert!(wait_for(Duration::from_secs(10), || b
        .dev
        .stats()
        .drop_source_not_allowed
        > before));
    assert!(b.tun.try_recv().is_none());
}

#[test]
fn interleaved_sources_in_batches_are_each_checked() {
    // Readers remember the previous packet's route within a batch (same source or destination,
    // same answer); a spoofed source between genuine ones must still be judged on its own, in
    // whatever batches the packets arrive.
    let net = MemoryNetwork::new();
    let (a, b) = pair(&net, 16, None);
    assert!(ping(&a, &b, false, Duration::from_secs(5)));
    while b.tun.try_recv().is_some() {}
    let before = b.dev.stats().drop_source_not_allowed;
    let spoof_src: IpAddr = "100.64.0.77".parse().unwrap();
    let rounds = 200u32;
    for i in 0..rounds {
        let genuine = format!("genuine {i}");
        a.send_udp(&b, false, genuine.as_bytes());
        let spoofed = udp_packet(spoof_src, IpAddr::V4(b.v4), 1, 2, b"spoof");
        assert!(a.tun.inject(spoofed));
    }
    let mut got = Vec::new();
    while got.len() < rounds as usize {
        let Some(p) = b.recv(Duration::from_secs(10)) else {
            break;
        };
        assert_ne!(udp_payload(&p), b"spoof", "a spoofed source was delivered");
        got.push(String::from_utf8_lossy(udp_payload(&p)).into_owned());
    }
    let want: Vec<String> = (0..rounds).map(|i| format!("genuine {i}")).collect();
    assert_eq!(got, want, "every genuine packet, in order");
    assert!(wait_for(Duration::from_secs(5), || b
        .dev
        .stats()
        .drop_source_not_allowed
        - before
        == u64::from(rounds)));
}

/// Node 1 with nodes 2 and 3 as its peers (each with node 1 as theirs).
fn hub_and_two_peers(net: &MemoryNetwork) -> (Node, Node, Node) {
    let a = Node::new(net, 1, 16, None);
    let b = Node::new(net, 2, 16, None);
    let c = Node::new(net, 3, 16, None);
    for other in [&b, &c] {
        a.add_peer(other, "");
        other.add_peer(&a, "");
    }
    (a, b, c)
}

#[test]
fn interleaved_destinations_in_batches_reach_their_own_peers() {
    // The TUN reader reuses the previous packet's route for the same destination within a
    // batch; packets alternating between two peers must each still go to their own.
    let net = MemoryNetwork::new();
    let (a, b, c) = hub_and_two_peers(&net);
    assert!(ping(&a, &b, false, Duration::from_secs(5)));
    assert!(ping(&a, &c, false, Duration::from_secs(5)));
    while b.tun.try_recv().is_some() {}
    while c.tun.try_recv().is_some() {}
    let rounds = 200u32;
    for i in 0..rounds {
        a.send_udp(&b, false, format!("to b {i}").as_bytes());
        a.send_udp(&c, false, format!("to c {i}").as_bytes());
    }
    for (node, name) in [(&b, "b"), (&c, "c")] {
        let mut got = Vec::new();
        while got.len() < rounds as usize {
            let Some(p) = node.recv(Duration::from_secs(10)) else {
                break;
            };
            got.push(String::from_utf8_lossy(udp_payload(&p)).into_owned());
        }
        let want: Vec<String> = (0..rounds).map(|i| format!("to {name} {i}")).collect();
        assert_eq!(got, want, "{name} gets its own packets, all, in order");
    }
}

#[test]
fn interleaved_senders_in_batches_are_each_opened_with_their_own_keypair() {
    // The socket reader reuses the previous datagram's keypair lookup for the same receiver
    // index within a batch; datagrams alternating between two peers, with junk indexes between
    // them, must each still be opened under their own peer's keypair.
    let net = MemoryNetwork::new();
    let (a, b, c) = hub_and_two_peers(&net);
    assert!(ping(&b, &a, false, Duration::from_secs(5)));
    assert!(ping(&c, &a, false, Duration::from_secs(5)));
    while a.tun.try_recv().is_some() {}
    let before = a.dev.stats().drop_unknown_index;
    let rounds = 200u32;
    for i in 0..rounds {
        b.send_udp(&a, false, format!("from b {i}").as_bytes());
        // A transport message under an index nobody holds, between the two peers' packets.
        let mut junk = vec![0u8; 32];
        junk[0] = 4;
        junk[4..8].copy_from_slice(&(0xdead_0000u32 + i).to_le_bytes());
        net.inject(b.addr(), a.addr(), junk);
        c.send_udp(&a, false, format!("from c {i}").as_bytes());
    }
    let (mut from_b, mut from_c) = (Vec::new(), Vec::new());
    while from_b.len() + from_c.len() < 2 * rounds as usize {
        let Some(p) = a.recv(Duration::from_secs(10)) else {
            break;
        };
        let text = String::from_utf8_lossy(udp_payload(&p)).into_owned();
        if text.starts_with("from b") {
            from_b.push(text);
        } else {
            from_c.push(text);
        }
    }
    for (got, name) in [(from_b, "b"), (from_c, "c")] {
        let want: Vec<String> = (0..rounds).map(|i| format!("from {name} {i}")).collect();
        assert_eq!(got, want, "every packet from {name}, in order");
    }
    assert_eq!(a.dev.stats().drop_unknown_index - before, u64::from(rounds));
}

#[test]
fn replayed_transport_packets_are_dropped() {
    let net = MemoryNetwork::new();
    let (a, b) = pair(&net, 1, None);
    assert!(ping(&a, &b, false, Duration::from_secs(5)));
    let (tx, rx) = crossbeam_channel::unbounded();
    net.set_tap(Some(tx));
    a.send_udp(&b, false, b"once");
    let p = b.recv(Duration::from_secs(5)).unwrap();
    assert_eq!(udp_payload(&p), b"once");
    net.set_tap(None);
    let (from, to, data) = rx
        .try_iter()
        .find(|(_, to, d)| *to == b.addr() && d[0] == 4 && d.len() > 32)
        .expect("captured the transport packet");
    let before = b.dev.stats().drop_replay;
    assert!(net.inject(from, to, data));
    assert!(wait_for(Duration::from_secs(10), || b
        .dev
        .stats()
        .drop_replay
        > before));
    assert!(b.tun.try_recv().is_none(), "replay was delivered");
    assert_eq!(b.dev.stats().drop_replay, before + 1);
}

#[test]
fn hostile_datagrams_do_not_disturb_the_tunnel() {
    let net = MemoryNetwork::new();
    let (a, b) = pair(&net, 16, None);
    assert!(ping(&a, &b, false, Duration::from_secs(5)));
    let from: std::net::SocketAddr = "198.18.66.66:6666".parse().unwrap();
    let mut rng = rand::thread_rng();
    use rand::Rng;
    for i in 0..5000u32 {
        let len = match i % 5 {
            0 => rng.gen_range(0..40),
            1 => 148,
            2 => 92,
            3 => 64,
            _ => rng.gen_range(32..2000),
        };
        let mut d: Vec<u8> = (0..len).map(|_| rng.gen()).collect();
        if len >= 4 {
            d[..4].copy_from_slice(&(i % 6).to_le_bytes());
        }
        net.inject(from, b.addr(), d);
    }
    assert!(ping(&a, &b, false, Duration::from_secs(5)));
    assert!(ping(&b, &a, false, Duration::from_secs(5)));
}

/// The classify stage sorts every datagram once: what is no message is counted malformed, a
/// handshake of the wrong size never reaches the handshake workers, one of the right size does
/// (and fails its MAC there), and a transport message for an unknown index is counted as such.
#[test]
fn each_datagram_is_classified_and_dropped_where_it_belongs() {
    let net = MemoryNetwork::new();
    let (a, b) = pair(&net, 16, None);
    assert!(ping(&a, &b, false, Duration::from_secs(5)));
    let from: std::net::SocketAddr = "198.18.66.66:6666".parse().unwrap();
    let msg = |ty: u32, len: usize| {
        let mut d = vec![0x5a_u8; len];
        d[..4].copy_from_slice(&ty.to_le_bytes());
        d
    };
    let before = b.dev.stats();
    for d in [
        msg(4, 20),  // shorter than a transport message
        msg(9, 100), // no such type
        msg(1, 147), // an initiation one byte short
        msg(2, 93),  // a response one byte long
    ] {
        net.inject(from, b.addr(), d);
    }
    net.inject(from, b.addr(), msg(1, 148)); // the right size: on to the MAC check
    net.inject(from, b.addr(), msg(4, 64)); // index 0x5a5a5a5a: nobody's
    let settled = wait_for(Duration::from_secs(10), || {
        let st = b.dev.stats();
        st.drop_bad_mac > before.drop_bad_mac && st.drop_unknown_index > before.drop_unknown_index
    });
    let st = b.dev.stats();
    assert!(settled, "{st:?}");
    assert_eq!(st.drop_malformed - before.drop_malformed, 4, "{st:?}");
    assert_eq!(st.drop_bad_mac - before.drop_bad_mac, 1, "{st:?}");
    assert_eq!(
        st.drop_unknown_index - before.drop_unknown_index,
        1,
        "{st:?}"
    );
    assert!(ping(&a, &b, false, Duration::from_secs(5)));
}

/// A lone packet's route is cached by the TUN reader; a change of allowed IPs must show at once.
#[test]
fn allowed_ips_change_reroutes_the_next_lone_packet() {
    let net = MemoryNetwork::new();
    let (a, b) = pair(&net, 1, None);
    assert!(ping(&a, &b, false, Duration::from_secs(5)));
    a.send_udp(&b, false, b"cached");
    assert_eq!(
        udp_payload(&b.recv(Duration::from_secs(5)).unwrap()),
        b"cached"
    );
    // b keeps its key but no longer owns its address on a.
    let before = a.dev.stats().drop_no_route;
    a.dev
        .ipc_set(&format!(
            "public_key={}\nreplace_allowed_ips=true\nallowed_ip=198.51.100.0/24\n",
            b.key.public_key().to_hex()
        ))
        .unwrap();
    a.send_udp(&b, false, b"no route");
    assert!(wait_for(Duration::from_secs(10), || a
        .dev
        .stats()
        .drop_no_route
        > before));
    assert!(
        b.recv(Duration::from_millis(300)).is_none(),
        "sent on a stale route"
    );
}
