//! The timer state machine on a fake clock: rekey without loss, expiry, key zeroing, and
//! handshakes under a cookie flood. Time moves only when a test advances the clock, and then
//! the test waits until every device's timer thread has acted on it (`timers_caught_up`) or for
//! the packet it expects: no test sleeps to let threads settle. The rules themselves are pinned
//! exhaustively, without threads, by the session's unit tests in `vpn-device`.

#![forbid(unsafe_code)]

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use vpn_conn::memory::MemoryNetwork;
use vpn_device::clock::{Clock, FakeClock};
use vpn_proto::consts::{KEEPALIVE_TIMEOUT, REKEY_TIMEOUT};
use vpn_tests::*;

fn fake_pair(batch: usize) -> (MemoryNetwork, Arc<FakeClock>, Node, Node) {
    let net = MemoryNetwork::new();
    let clock = FakeClock::new();
    let c: Arc<dyn Clock> = clock.clone();
    let (a, b) = pair(&net, batch, Some(c));
    (net, clock, a, b)
}

/// Moves the fake clock forward and waits until the timer threads of `nodes` have fired
/// everything due and, for a pair, every datagram either sent has been handled by the other
/// (handed over, and its handshake or batch done: both devices idle): time does not move on
/// while the packets its timers sent are still on the wire or in a queue.
fn advance(clock: &FakeClock, d: Duration, nodes: &[&Node]) {
    clock.advance(d);
    let settled = || match nodes {
        [a, b] => {
            a.bind.sent().0 == b.dev.datagrams_handled()
                && b.bind.sent().0 == a.dev.datagrams_handled()
                && a.dev.idle()
                && b.dev.idle()
        }
        _ => true,
    };
    assert!(
        wait_for(Duration::from_secs(10), || nodes
            .iter()
            .all(|n| n.dev.timers_caught_up())
            && settled()),
        "timer threads caught up with the clock, the pair settled"
    );
}

fn exchange(a: &Node, b: &Node, tag: &str) {
    for i in 0..10 {
        let m = format!("{tag} a->b {i}");
        a.send_udp(b, false, m.as_bytes());
        let p = b
            .recv(Duration::from_secs(5))
            .unwrap_or_else(|| panic!("lost {m}"));
        assert_eq!(udp_payload(&p), m.as_bytes());
        let m = format!("{tag} b->a {i}");
        b.send_udp(a, false, m.as_bytes());
        let p = a
            .recv(Duration::from_secs(5))
            .unwrap_or_else(|| panic!("lost {m}"));
        assert_eq!(udp_payload(&p), m.as_bytes());
    }
}

/// The clock's step between two rounds of `sessions_rotate_without_losing_packets`: past the
/// passive keepalive a owes after each round, short of the 15 s after which b, having sent
/// data and heard nothing back, starts a handshake of its own. A step of 15 s would fire both
/// at one instant whenever b's jitter draw is 0 ms, an order real time cannot produce (the
/// keepalive, due 5 s earlier, would have cancelled b's timer), and if that instant is also
/// a's rekey the two initiations cross and both are refused, as in WireGuard; every later step
/// would then fire both retransmissions (5 s plus at most 334 ms of jitter) at once again.
const ROUND: Duration = Duration::from_secs(12);
const _: () = assert!(
    ROUND.as_secs() >= KEEPALIVE_TIMEOUT.as_secs()
        && ROUND.as_secs() < KEEPALIVE_TIMEOUT.as_secs() + REKEY_TIMEOUT.as_secs()
);

#[test]
fn sessions_rotate_without_losing_packets() {
    let (_net, clock, a, b) = fake_pair(1);
    assert!(ping(&a, &b, false, Duration::from_secs(5)));
    let pa = a.dev.peer(&b.key.public_key()).unwrap();
    let pb = b.dev.peer(&a.key.public_key()).unwrap();
    let first = pa.last_handshake().unwrap();
    let handshake_messages = || a.dev.stats().handshakes_sent + b.dev.stats().handshakes_sent;
    let mut rotations = 0;
    let mut last = first;
    for round in 0..25 {
        let sent = handshake_messages();
        advance(&clock, ROUND, &[&a, &b]);
        // The step fires a's owed keepalive, which starts the rekey once the keys are old
        // enough; the ping and the exchange go through it, and no packet may be lost.
        assert!(
            ping(&a, &b, false, Duration::from_secs(5)),
            "round {round}: tunnel answers after the step"
        );
        exchange(&a, &b, &format!("round {round}"));
        // A handshake started in a round completes in it, on both sides, before time moves
        // on: a step with one on the wire would fire its retransmission.
        if handshake_messages() != sent {
            let now = clock.wall();
            assert!(
                wait_for(Duration::from_secs(10), || pa.last_handshake() == Some(now)
                    && pb.last_handshake() == Some(now)),
                "round {round}: the handshake completed on both sides; a {:?} b {:?}",
                a.dev.stats(),
                b.dev.stats()
            );
        }
        let now = pa.last_handshake().unwrap();
        if now != last {
            rotations += 1;
            last = now;
        }
    }
    // 300 s of traffic: the initiator rekeys once its keys are older than 120 s, at 132 s and
    // at 264 s, and nobody else starts a handshake.
    assert_eq!(rotations, 2);
    assert_eq!(
        (a.dev.stats().handshakes_sent, b.dev.stats().handshakes_sent),
        (3, 3),
        "one initiation and one response per handshake: no retry, no crossing"
    );
    assert!(pa.keypair_count() <= 3);
}

#[test]
fn old_keypair_refused_after_reject_time_and_zeroed_after_540s() {
    let (net, clock, a, b) = fake_pair(1);
    assert!(ping(&a, &b, false, Duration::from_secs(5)));
    let (tx, rx) = crossbeam_channel::unbounded();
    net.set_tap(Some(tx));
    a.send_udp(&b, false, b"captured");
    assert!(b.recv(Duration::from_secs(5)).is_some());
    net.set_tap(None);
    let (from, to, data) = rx
        .try_iter()
        .find(|(_, to, d)| *to == b.addr() && d[0] == 4 && d.len() > 32)
        .unwrap();
    // b's passive keepalive goes out at 10 s (with valid keys), then the link is silent.
    let pa = a.dev.peer(&b.key.public_key()).unwrap();
    let rx0 = pa.rx_tx_bytes().0;
    // Settled, not merely received: a's byte count moves before its session hears of the
    // keepalive, and a step taken in between would fire the handshake the keepalive cancels.
    advance(&clock, Duration::from_secs(11), &[&a, &b]);
    assert!(pa.rx_tx_bytes().0 > rx0, "b's passive keepalive reached a");
    // Walk the silent period in 10 s steps, as real time would pass: b's second keepalive (it
    // received two data packets, so it owes one more) goes out at 21 s with valid keys.
    for _ in 0..17 {
        advance(&clock, Duration::from_secs(10), &[&a, &b]);
    }
    let before = b.dev.stats().drop_expired_keypair;
    net.inject(from, to, data);
    assert!(
        wait_for(Duration::from_secs(10), || b
            .dev
            .stats()
            .drop_expired_keypair
            > before),
        "{:?}",
        b.dev.stats()
    );
    // Dropped (and counted) once, never delivered.
    assert_eq!(b.dev.stats().drop_expired_keypair, before + 1);
    assert!(b.tun.try_recv().is_none());
    // 540 s after the handshake all key material is erased.
    clock.advance(Duration::from_secs(360));
    let pb = b.dev.peer(&a.key.public_key()).unwrap();
    assert!(
        wait_for(Duration::from_secs(10), || pa.keypair_count() == 0
            && pb.keypair_count() == 0),
        "keypairs left: a {} b {}",
        pa.keypair_count(),
        pb.keypair_count()
    );
    // And a new handshake brings the tunnel back.
    assert!(ping(&a, &b, false, Duration::from_secs(5)));
}

#[test]
fn handshake_retransmits_then_gives_up() {
    let net = MemoryNetwork::new();
    let clock = FakeClock::new();
    let c: Arc<dyn Clock> = clock.clone();
    let a = Node::new(&net, 1, 1, Some(c));
    // A peer that never answers.
    let ghost = private_key();
    a.dev
        .ipc_set(&format!(
            "public_key={}\nendpoint=198.18.0.99:1\nallowed_ip=100.64.0.99/32\n",
            ghost.public_key().to_hex()
        ))
        .unwrap();
    a.tun.inject(udp_packet(
        "100.64.0.1".parse().unwrap(),
        "100.64.0.99".parse().unwrap(),
        1,
        2,
        b"x",
    ));
    assert!(wait_for(Duration::from_secs(10), || a
        .dev
        .stats()
        .handshakes_sent
        == 1));
    // Each step of 5.4 s (more than 5 s + the largest jitter) fires exactly one retransmission,
    // which the timer thread sends before it reports having caught up.
    let per_step: Vec<u64> = (0..25)
        .map(|_| {
            let before = a.dev.stats().handshakes_sent;
            advance(&clock, Duration::from_millis(5400), &[&a]);
            a.dev.stats().handshakes_sent - before
        })
        .collect();
    // The first initiation, then 19 retransmissions, then nothing: given up.
    let mut want = vec![1; 19];
    want.resize(25, 0);
    assert_eq!(per_step, want, "initiations per 5.4 s step");
    advance(&clock, Duration::from_secs(60), &[&a]);
    assert_eq!(a.dev.stats().handshakes_sent, 20, "gave up");
}

#[test]
fn persistent_keepalive_fires_on_schedule_and_idle_peers_stay_quiet() {
    let (_net, clock, a, b) = fake_pair(1);
    assert!(ping(&a, &b, false, Duration::from_secs(5)));
    // One exchange, then silence: at most one passive keepalive each, no ping-pong.
    exchange(&a, &b, "x");
    let (s0, _) = a.bind.sent();
    let (t0, _) = b.bind.sent();
    for _ in 0..12 {
        advance(&clock, Duration::from_secs(10), &[&a, &b]);
    }
    let (s1, _) = a.bind.sent();
    let (t1, _) = b.bind.sent();
    assert!(
        s1 - s0 <= 2 && t1 - t0 <= 2,
        "idle traffic a:{} b:{}",
        s1 - s0,
        t1 - t0
    );
    // Persistent keepalive every 5 s; turning it on sends one at once.
    a.dev
        .ipc_set(&format!(
            "public_key={}\npersistent_keepalive_interval=5\n",
            b.public_hex()
        ))
        .unwrap();
    assert!(wait_for(Duration::from_secs(10), || a.bind.sent().0 > s1));
    let (s2, _) = a.bind.sent();
    let mut last = s2;
    for _ in 0..6 {
        clock.advance(Duration::from_millis(5100));
        wait_for(Duration::from_secs(3), || a.bind.sent().0 > last);
        last = a.bind.sent().0;
    }
    let (s3, _) = a.bind.sent();
    assert!(s3 - s2 >= 5, "persistent keepalives sent: {}", s3 - s2);
}

#[test]
fn cookie_flood_gets_cookie_replies_and_a_real_peer_still_connects() {
    let (net, clock, a, b) = fake_pair(128);
    let b_pub = *b.key.public_key().as_bytes();
    let mut gen = vpn_proto::cookie::CookieGenerator::new(&b_pub);
    let now = vpn_proto::time::Instant::from_nanos(1);
    // Initiations with a valid MAC1 (so they cost the responder real work) from many sources.
    let flood: Vec<(SocketAddr, Vec<u8>)> = (0..1500u32)
        .map(|i| {
            let mut m = vec![0u8; 148];
            m[0] = 1;
            for x in &mut m[4..116] {
                *x = rand::random();
            }
            gen.add_macs(&mut m, now);
            let src =
                SocketAddr::from(([198, 18, 100 + (i / 250) as u8, (i % 250) as u8 + 1], 40000));
            (src, m)
        })
        .collect();
    for (src, m) in &flood[..800] {
        net.inject(*src, b.addr(), m.clone());
    }
    // a's first initiation arrives behind the flood: b answers with a cookie.
    a.send_udp(&b, false, b"through the flood");
    assert!(
        wait_for(Duration::from_secs(20), || b
            .dev
            .stats()
            .cookie_replies_sent
            > 0),
        "under load, b sends cookie replies"
    );
    assert!(
        wait_for(Duration::from_secs(20), || a
            .dev
            .stats()
            .cookie_replies_consumed
            > 0),
        "a takes the cookie"
    );
    // More flood, then a's retransmission (now carrying MAC2) after 5 s.
    for (src, m) in &flood[800..] {
        net.inject(*src, b.addr(), m.clone());
    }
    // Each step fires one retransmission; the next step waits until this one had its chance
    // to complete, so no retry crosses a response still on its way.
    let pa = a.dev.peer(&b.key.public_key()).unwrap();
    for _ in 0..20 {
        if pa.last_handshake().is_some() {
            break;
        }
        advance(&clock, Duration::from_millis(5400), &[&a]);
        wait_for(Duration::from_secs(2), || pa.last_handshake().is_some());
    }
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let mut delivered = false;
    while !delivered && std::time::Instant::now() < deadline {
        if let Some(p) = b.recv(Duration::from_millis(200)) {
            delivered = udp_payload(&p) == b"through the flood";
        }
    }
    assert!(delivered, "stats b: {:?}", b.dev.stats());
    assert!(a
        .dev
        .peer(&b.key.public_key())
        .unwrap()
        .last_handshake()
        .is_some());
}
