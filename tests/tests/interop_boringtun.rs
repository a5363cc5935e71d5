//! Our device against an independent implementation: boringtun's `Tunn` driven over the
//! in-memory network. Each side initiates once; data both ways; keepalives; rekey.

#![forbid(unsafe_code)]
#![cfg(target_os = "linux")]

use boringtun::noise::{Tunn, TunnResult};
use crossbeam_channel::{unbounded, Receiver, Sender};
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use vpn_conn::memory::{MemoryBind, MemoryNetwork};
use vpn_conn::{Bind, Endpoint};
use vpn_tests::*;

/// A boringtun peer on the memory network.
struct Boring {
    tunn: Arc<Mutex<Tunn>>,
    bind: Arc<MemoryBind>,
    peer_addr: SocketAddr,
    delivered: Receiver<Vec<u8>>,
    key_public: [u8; 32],
}

impl Boring {
    fn new(net: &MemoryNetwork, ours_public: [u8; 32], our_addr: SocketAddr) -> Boring {
        let secret = x25519_dalek::StaticSecret::random_from_rng(rand::rngs::OsRng);
        let public = x25519_dalek::PublicKey::from(&secret);
        let tunn = Tunn::new(
            secret,
            x25519_dalek::PublicKey::from(ours_public),
            None,
            None,
            7,
            None,
        );
        let tunn = Arc::new(Mutex::new(tunn));
        let bind = Arc::new(net.bind("198.18.0.200".parse().unwrap(), 1));
        let (mut fns, _port) = bind.open(0).unwrap();
        let (tx, rx) = unbounded();
        let (t, b) = (tunn.clone(), bind.clone());
        let mut recv = fns.remove(0);
        std::thread::spawn(move || receive_loop(&mut recv, t, b, tx));
        Boring {
            tunn,
            bind,
            peer_addr: our_addr,
            delivered: rx,
            key_public: public.to_bytes(),
        }
    }

    fn send_ip(&self, packet: &[u8]) {
        let mut out = vec![0u8; 65536];
        let mut t = self.tunn.lock().unwrap();
        if let TunnResult::WriteToNetwork(d) = t.encapsulate(packet, &mut out) {
            self.bind
                .send(&[d], &Endpoint::from(self.peer_addr))
                .unwrap();
        }
    }

    fn force_handshake(&self) {
        let mut out = vec![0u8; 2048];
        let mut t = self.tunn.lock().unwrap();
        if let TunnResult::WriteToNetwork(d) = t.format_handshake_initiation(&mut out, true) {
            self.bind
                .send(&[d], &Endpoint::from(self.peer_addr))
                .unwrap();
        }
    }
}

fn receive_loop(
    recv: &mut vpn_conn::ReceiveFunc,
    tunn: Arc<Mutex<Tunn>>,
    bind: Arc<MemoryBind>,
    tx: Sender<Vec<u8>>,
) {
    let mut buf = vec![0u8; 65536];
    let mut out = vec![0u8; 65536];
    loop {
        let mut size = [0usize];
        let mut ep = [Endpoint::default()];
        let n = {
            let mut bufs: Vec<&mut [u8]> = vec![&mut buf[..]];
            match recv(&mut bufs, &mut size, &mut ep) {
                Ok(n) => n,
                Err(_) => return,
            }
        };
        if n == 0 {
            continue;
        }
        let mut t = tunn.lock().unwrap();
        let mut res = t.decapsulate(Some(ep[0].dst.ip()), &buf[..size[0]], &mut out);
        loop {
            match res {
                TunnResult::WriteToNetwork(d) => {
                    let _ = bind.send(&[d], &ep[0]);
                    res = t.decapsulate(None, &[], &mut out);
                }
                TunnResult::WriteToTunnelV4(p, _) | TunnResult::WriteToTunnelV6(p, _) => {
                    let _ = tx.send(p.to_vec());
                    break;
                }
                TunnResult::Done | TunnResult::Err(_) => break,
            }
        }
    }
}

fn setup() -> (MemoryNetwork, Node, Boring) {
    let net = MemoryNetwork::new();
    let a = Node::new(&net, 1, 8, None);
    let b = Boring::new(&net, a.key.public_key().as_bytes().to_owned(), a.addr());
    let b_hex: String = b.key_public.iter().map(|x| format!("{x:02x}")).collect();
    a.dev
        .ipc_set(&format!(
            "public_key={b_hex}\nendpoint={}\nallowed_ip=100.64.0.2/32\nallowed_ip=fd00::2/128\n",
            b.bind.local_addr().unwrap()
        ))
        .unwrap();
    (net, a, b)
}

fn v4(a: &str, b: &str, payload: &[u8]) -> Vec<u8> {
    udp_packet(a.parse().unwrap(), b.parse().unwrap(), 1, 2, payload)
}

fn expect_at_boring(b: &Boring, payload: &[u8]) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        if let Ok(p) = b.delivered.recv_timeout(Duration::from_millis(100)) {
            if udp_payload(&p) == payload {
                return;
            }
        }
    }
    panic!(
        "boringtun never received {:?}",
        String::from_utf8_lossy(payload)
    );
}

fn expect_at_node(a: &Node, payload: &[u8]) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        if let Some(p) = a.recv(Duration::from_millis(100)) {
            if udp_payload(&p) == payload {
                return;
            }
        }
    }
    panic!(
        "our device never received {:?}",
        String::from_utf8_lossy(payload)
    );
}

#[test]
fn we_initiate_and_data_flows_both_ways_at_several_sizes() {
    let (_net, a, b) = setup();
    for size in [1usize, 15, 16, 17, 100, 1000, 1392] {
        let payload: Vec<u8> = (0..size).map(|i| (i * 31 + size) as u8).collect();
        a.tun.inject(v4("100.64.0.1", "100.64.0.2", &payload));
        expect_at_boring(&b, &payload);
        b.send_ip(&v4("100.64.0.2", "100.64.0.1", &payload));
        expect_at_node(&a, &payload);
    }
    // IPv6 inner packets too.
    let p6 = udp_packet(
        IpAddr::V6("fd00::1".parse().unwrap()),
        IpAddr::V6("fd00::2".parse().unwrap()),
        1,
        2,
        b"six",
    );
    a.tun.inject(p6);
    expect_at_boring(&b, b"six");
    let peer = a
        .dev
        .peer(&vpn_proto::keys::PublicKey::from_bytes(b.key_public))
        .unwrap();
    assert!(peer.last_handshake().is_some());
}

#[test]
fn boringtun_initiates_and_rekeys() {
    let (_net, a, b) = setup();
    b.send_ip(&v4("100.64.0.2", "100.64.0.1", b"from boringtun"));
    expect_at_node(&a, b"from boringtun");
    a.tun.inject(v4("100.64.0.1", "100.64.0.2", b"reply"));
    expect_at_boring(&b, b"reply");
    let peer = a
        .dev
        .peer(&vpn_proto::keys::PublicKey::from_bytes(b.key_public))
        .unwrap();
    let first = peer.last_handshake().unwrap();
    // A second handshake started by boringtun: traffic keeps flowing under the new keys. Our
    // device refuses (and counts) an initiation that comes within 20 ms of the last one it
    // accepted from the peer, as this one may: boringtun initiates again after each refusal
    // until ours answers, every attempt waiting for the handshake or the refusal.
    let deadline = Instant::now() + Duration::from_secs(10);
    let renewed = || peer.last_handshake() != Some(first);
    while !renewed() && Instant::now() < deadline {
        let refused = a.dev.stats().drop_handshake_refused;
        b.force_handshake();
        wait_for(deadline.saturating_duration_since(Instant::now()), || {
            renewed() || a.dev.stats().drop_handshake_refused > refused
        });
    }
    // The responder's new keypair is confirmed by boringtun's next data packet.
    b.send_ip(&v4("100.64.0.2", "100.64.0.1", b"after rekey"));
    expect_at_node(&a, b"after rekey");
    a.tun
        .inject(v4("100.64.0.1", "100.64.0.2", b"after rekey back"));
    expect_at_boring(&b, b"after rekey back");
    assert!(
        peer.last_handshake().unwrap() > first,
        "a second handshake completed"
    );
}

#[test]
fn keepalive_from_boringtun_is_counted_not_written() {
    let (_net, a, b) = setup();
    a.tun.inject(v4("100.64.0.1", "100.64.0.2", b"hello"));
    expect_at_boring(&b, b"hello");
    let peer = a
        .dev
        .peer(&vpn_proto::keys::PublicKey::from_bytes(b.key_public))
        .unwrap();
    let (rx0, _) = peer.rx_tx_bytes();
    b.send_ip(&[]); // boringtun encapsulates an empty packet as a keepalive
    wait_for(Duration::from_secs(5), || peer.rx_tx_bytes().0 != rx0);
    assert_eq!(
        peer.rx_tx_bytes().0,
        rx0 + 32,
        "a keepalive is 32 bytes on the wire"
    );
    assert!(a.tun.try_recv().is_none(), "nothing written to the TUN");
}
