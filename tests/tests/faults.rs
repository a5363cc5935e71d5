//! Tunnels over a misbehaving network: the in-memory network's seeded fault injector loses,
//! duplicates, corrupts, reorders and delays datagrams, and these scenarios pin what the device
//! promises through it (`docs/testing.md`, "What the tunnel promises through it").
//!
//! Every scenario runs on a fake clock that only the test advances: no timer fires behind the
//! test's back (no keepalive, no rekey), so the datagrams on a link are exactly the ones the
//! test caused and the injector's numbering of a link's transport messages follows their nonce
//! counters. Set `VPN_FAULT_SEED` to rerun with other fault decisions; every failure prints
//! its seed.

use std::collections::HashSet;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;
use vpn_conn::memory::faults::{FaultConfig, FaultConfigBuilder, FaultStats};
use vpn_conn::memory::MemoryNetwork;
use vpn_device::clock::{Clock, FakeClock};
use vpn_device::Stats;
use vpn_proto::consts::REPLAY_WINDOW_SIZE;
use vpn_proto::messages::{classify, Initiation, MessageType, Response, TransportHeader};
use vpn_tests::*;

/// Flows per numbered stream (UDP source ports 1000..1000 + FLOWS).
const FLOWS: u32 = 4;

/// Generous bound for anything the test waits for.
const PATIENCE: Duration = Duration::from_secs(120);

/// The seed of this run: `VPN_FAULT_SEED` if set, else the scenario's own.
fn seed(default: u64) -> u64 {
    std::env::var("VPN_FAULT_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

/// Prints the seed when the test fails, whatever assertion failed (a drop guard: keep it alive
/// for the whole test).
struct NameSeedOnFailure(u64);

impl Drop for NameSeedOnFailure {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("failed with VPN_FAULT_SEED={}", self.0);
        }
    }
}

/// Two nodes on a fake clock that know each other, no handshake yet.
fn fake_nodes(net: &MemoryNetwork, batch: usize) -> (Arc<FakeClock>, Node, Node) {
    let clock = FakeClock::new();
    let c: Arc<dyn Clock> = clock.clone();
    let (a, b) = pair(net, batch, Some(c));
    (clock, a, b)
}

/// [`fake_nodes`] with a tunnel up between them.
fn fake_pair(net: &MemoryNetwork) -> (Arc<FakeClock>, Node, Node) {
    let (clock, a, b) = fake_nodes(net, 64);
    assert!(ping(&a, &b, false, Duration::from_secs(10)), "tunnel up");
    (clock, a, b)
}

fn is_transport(data: &[u8]) -> bool {
    classify(data) == Ok(MessageType::Transport)
}

fn is_handshake(data: &[u8]) -> bool {
    matches!(
        classify(data),
        Ok(MessageType::Initiation | MessageType::Response | MessageType::CookieReply)
    )
}

/// Faults on handshake messages, both ways, and nothing else.
fn on_handshakes(faults: FaultConfigBuilder) -> FaultConfig {
    faults
        .matching(|_, _, d| is_handshake(d))
        .build()
        .expect("valid faults")
}

/// Faults on `from`'s transport messages to `to`, and nothing else.
fn on_transport(from: &Node, to: &Node, faults: FaultConfigBuilder) -> FaultConfig {
    let (f, t) = (from.addr(), to.addr());
    faults
        .matching(move |src, dst, d| src == f && dst == t && is_transport(d))
        .build()
        .expect("valid faults")
}

/// The payload of packet `i` of a numbered stream: its number, then bytes derived from it (so
/// any damage shows), 40 to 1000 bytes long (never a 64-byte transport message).
fn numbered_payload(i: u32) -> Vec<u8> {
    let len = 40 + (i as usize * 7919) % 960;
    let mut p = i.to_be_bytes().to_vec();
    p.extend((4..len).map(|j| (i as usize * 31 + j) as u8));
    p
}

/// Injects packets `0..n` of a numbered stream into `from`'s TUN, addressed to `to`, from a
/// thread of its own (the TUN queue pushes back while the test drains the other end).
fn send_numbered(from: &Node, to: &Node, n: u32) -> std::thread::JoinHandle<()> {
    let tun = from.tun.clone();
    let (s, d) = (IpAddr::V4(from.v4), IpAddr::V4(to.v4));
    std::thread::spawn(move || {
        for i in 0..n {
            let sport = 1000 + (i % FLOWS) as u16;
            assert!(tun.inject(udp_packet(s, d, sport, 2000, &numbered_payload(i))));
        }
    })
}

/// Sends packets `0..n` a → b, draining b meanwhile, until the injector numbered all of them;
/// then releases what it still holds back.
fn send_through(net: &MemoryNetwork, (a, b): (&Node, &Node), n: u32, inbox: &mut Inbox) {
    let sender = send_numbered(a, b, n);
    let sent = wait_for(PATIENCE, || {
        inbox.drain(b);
        net.fault_stats().matched >= u64::from(n)
    });
    assert!(sent, "sent {:?}", net.fault_stats());
    sender.join().unwrap();
    net.flush_faults();
}

/// The numbered packets a node's TUN received, in arrival order.
#[derive(Default)]
struct Inbox {
    got: Vec<u32>,
}

impl Inbox {
    /// Takes what the node's TUN has now; every packet must be an intact numbered packet.
    fn drain(&mut self, node: &Node) -> usize {
        while let Some(p) = node.tun.try_recv() {
            let pl = udp_payload(&p);
            let i = u32::from_be_bytes(pl[..4].try_into().expect("numbered"));
            assert_eq!(pl, numbered_payload(i), "packet {i} arrived damaged");
            self.got.push(i);
        }
        self.got.len()
    }

    /// Drains until `cond(self)` holds, waiting at most [`PATIENCE`].
    fn wait(&mut self, node: &Node, mut cond: impl FnMut(&Inbox) -> bool) -> bool {
        wait_for(PATIENCE, || {
            self.drain(node);
            cond(self)
        })
    }

    fn assert_no_duplicates(&self, seed: u64) {
        let distinct: HashSet<u32> = self.got.iter().copied().collect();
        assert_eq!(
            distinct.len(),
            self.got.len(),
            "seed {seed}: a packet arrived twice"
        );
    }

    /// Within each flow, numbers strictly increase: order kept, nothing twice.
    fn assert_per_flow_order(&self, seed: u64) {
        for f in 0..FLOWS {
            let flow: Vec<u32> = self
                .got
                .iter()
                .copied()
                .filter(|i| i % FLOWS == f)
                .collect();
            assert!(
                flow.windows(2).all(|w| w[0] < w[1]),
                "seed {seed}: flow {f} out of order"
            );
        }
    }
}

/// Drops of transport messages that failed somewhere before the replay window: the counters a
/// damaged datagram ends in.
fn damage_drops(s: &Stats) -> u64 {
    s.drop_unknown_index + s.drop_expired_keypair + s.drop_malformed + s.drop_decrypt
}

#[test]
fn loss_duplication_and_corruption_keep_per_flow_order_and_every_drop_is_counted() {
    const N: u32 = 6000;
    let seed = seed(1);
    let _on_failure = NameSeedOnFailure(seed);
    let net = MemoryNetwork::new();
    let (_clock, a, b) = fake_pair(&net);
    let faults = FaultConfig::builder(seed)
        .loss(0.05)
        .duplication(0.05)
        .corruption(0.05);
    net.set_faults(Some(on_transport(&a, &b, faults)));
    let before = b.dev.stats();
    let sender = send_numbered(&a, &b, N);
    // A datagram is lost, or corrupted (its duplicate too: the damage came first), or arrives
    // intact once or twice. So the TUN gets every packet neither lost nor corrupted, and every
    // other copy that arrived ends in a counter: damaged ones before the window, second intact
    // copies in it.
    let mut inbox = Inbox::default();
    let done = inbox.wait(&b, |inbox| {
        let f = net.fault_stats();
        let s = b.dev.stats();
        f.matched == u64::from(N)
            && inbox.got.len() as u64 == f.matched - f.lost - f.corrupted
            && damage_drops(&s) - damage_drops(&before) + s.drop_replay - before.drop_replay
                == f.corrupted + f.duplicated
    });
    sender.join().unwrap();
    let (f, s) = (net.fault_stats(), b.dev.stats());
    assert!(
        done,
        "seed {seed}: {f:?}\n{s:?}\ndelivered {}",
        inbox.got.len()
    );
    assert!(
        f.lost > 0 && f.duplicated > 0 && f.corrupted > 0,
        "seed {seed}: {f:?}"
    );
    inbox.assert_no_duplicates(seed);
    inbox.assert_per_flow_order(seed);
    // No network reordering: the device keeps the sending order across flows too.
    assert!(inbox.got.windows(2).all(|w| w[0] < w[1]), "seed {seed}");
}

#[test]
fn duplicates_are_dropped_by_the_replay_window_and_counted() {
    const N: u32 = 4000;
    let seed = seed(2);
    let _on_failure = NameSeedOnFailure(seed);
    let net = MemoryNetwork::new();
    let (_clock, a, b) = fake_pair(&net);
    let faults = FaultConfig::builder(seed).duplication(0.2);
    net.set_faults(Some(on_transport(&a, &b, faults)));
    let before = b.dev.stats().drop_replay;
    let sender = send_numbered(&a, &b, N);
    let mut inbox = Inbox::default();
    let done = inbox.wait(&b, |inbox| {
        let f = net.fault_stats();
        inbox.got.len() == N as usize && b.dev.stats().drop_replay - before == f.duplicated
    });
    sender.join().unwrap();
    let f = net.fault_stats();
    assert!(done, "seed {seed}: {f:?} {:?}", b.dev.stats());
    assert!(f.duplicated > N as u64 / 10, "seed {seed}: {f:?}");
    assert_eq!(inbox.got, (0..N).collect::<Vec<_>>(), "seed {seed}");
}

/// Sends `n` numbered packets a → b while the network holds some of a's transport messages
/// back by `depth` later ones; returns what b's TUN got, the injector's record and how many
/// packets b's replay window refused.
fn reorder_run(
    seed: u64,
    rate: f64,
    depth: std::ops::RangeInclusive<u64>,
    n: u32,
) -> (Inbox, FaultStats, u64) {
    let net = MemoryNetwork::new();
    let (_clock, a, b) = fake_pair(&net);
    let faults = FaultConfig::builder(seed).reordering(rate, depth);
    net.set_faults(Some(on_transport(&a, &b, faults)));
    let before = b.dev.stats().drop_replay;
    let mut inbox = Inbox::default();
    send_through(&net, (&a, &b), n, &mut inbox);
    // The receiver refuses exactly the datagrams that arrived more than the window behind the
    // highest counter it had seen, and takes all the others.
    let done = inbox.wait(&b, |inbox| {
        let f = net.fault_stats();
        let beyond = f.late_beyond(REPLAY_WINDOW_SIZE);
        f.late.len() as u64 == f.reordered
            && inbox.got.len() as u64 == u64::from(n) - beyond
            && b.dev.stats().drop_replay - before == beyond
    });
    let f = net.fault_stats();
    let refused = b.dev.stats().drop_replay - before;
    assert!(
        done,
        "seed {seed}: got {} refused {refused} {f:?}",
        inbox.got.len()
    );
    inbox.assert_no_duplicates(seed);
    // The refused packets are the ones the injector delivered too late, by number (with the
    // fake clock a's link carries only this stream, so its numbering is the stream's).
    let got: HashSet<u32> = inbox.got.iter().copied().collect();
    for l in &f.late {
        let i = u32::try_from(l.seq).unwrap();
        assert_eq!(
            got.contains(&i),
            l.behind <= REPLAY_WINDOW_SIZE,
            "seed {seed}: packet {i} arrived {} behind",
            l.behind
        );
    }
    (inbox, f, refused)
}

#[test]
fn packets_reordered_within_the_replay_window_are_accepted_in_arrival_order() {
    let seed = seed(3);
    let _on_failure = NameSeedOnFailure(seed);
    let net = MemoryNetwork::new();
    let (_clock, a, b) = fake_pair(&net);
    let faults = FaultConfig::builder(seed).reordering(0.05, 1..=300);
    net.set_faults(Some(on_transport(&a, &b, faults)));
    let (tap, wire) = crossbeam_channel::unbounded();
    net.set_tap(Some(tap));
    const N: u32 = 4000;
    let mut inbox = Inbox::default();
    send_through(&net, (&a, &b), N, &mut inbox);
    assert!(
        inbox.wait(&b, |inbox| inbox.got.len() == N as usize),
        "seed {seed}: got {} of {N}, {:?}",
        inbox.got.len(),
        b.dev.stats()
    );
    let f = net.fault_stats();
    assert!(f.reordered > u64::from(N) / 40, "seed {seed}: {f:?}");
    assert_eq!(f.late_beyond(REPLAY_WINDOW_SIZE), 0);
    // The device delivers in the order the datagrams arrived: its nonce counters as the tap
    // saw them on a → b, less the first one's, are the packet numbers b's TUN got.
    net.set_tap(None);
    let (ta, tb) = (a.addr(), b.addr());
    let counters: Vec<u64> = wire
        .try_iter()
        .filter(|(from, to, _)| (*from, *to) == (ta, tb))
        .filter_map(|(_, _, d)| TransportHeader::parse(&d).ok().map(|h| h.counter))
        .collect();
    let first = *counters.iter().min().expect("captured");
    let wire_order: Vec<u32> = counters.iter().map(|c| (c - first) as u32).collect();
    assert_eq!(inbox.got, wire_order, "seed {seed}: arrival order");
    inbox.assert_no_duplicates(seed);
}

#[test]
fn a_packet_held_back_by_exactly_the_window_is_accepted() {
    let seed = seed(4);
    let _on_failure = NameSeedOnFailure(seed);
    let (inbox, f, refused) =
        reorder_run(seed, 0.002, REPLAY_WINDOW_SIZE..=REPLAY_WINDOW_SIZE, 14_000);
    assert_eq!(refused, 0, "seed {seed}: {f:?}");
    assert!(
        f.late.iter().any(|l| l.behind == REPLAY_WINDOW_SIZE),
        "seed {seed}: no packet sat exactly at the edge: {f:?}"
    );
    assert_eq!(inbox.got.len(), 14_000);
}

#[test]
fn a_packet_held_back_one_beyond_the_window_is_dropped_and_counted() {
    let seed = seed(5);
    let _on_failure = NameSeedOnFailure(seed);
    let (inbox, f, refused) = reorder_run(
        seed,
        0.002,
        REPLAY_WINDOW_SIZE + 1..=REPLAY_WINDOW_SIZE + 1,
        14_000,
    );
    let edge = f
        .late
        .iter()
        .filter(|l| l.behind == REPLAY_WINDOW_SIZE + 1)
        .count();
    assert!(
        edge > 0,
        "seed {seed}: no packet sat one beyond the edge: {f:?}"
    );
    assert!(refused >= edge as u64, "seed {seed}");
    assert_eq!(inbox.got.len() as u64, 14_000 - refused);
}

#[test]
fn reordering_across_the_window_edge_drops_exactly_the_packets_beyond_it() {
    let seed = seed(6);
    let _on_failure = NameSeedOnFailure(seed);
    let w = REPLAY_WINDOW_SIZE;
    let (_, f, refused) = reorder_run(seed, 0.002, w - 200..=w + 200, 16_000);
    assert!(refused > 0, "seed {seed}: {f:?}");
    assert!(
        f.late.iter().any(|l| l.behind <= w && l.behind > w - 200),
        "seed {seed}: nothing accepted near the edge: {f:?}"
    );
}

/// Sends packets a → b and drives the fake clock in steps of one handshake retry until `done`
/// holds. Each step waits for the attempt's outcome: a message lost or damaged by the
/// injector, or `done`; or, for outcomes nobody counts (a handshake message refused as a
/// replay or out of turn), for `quiet` to pass: then the retry decides.
fn drive_until(
    net: &MemoryNetwork,
    clock: &FakeClock,
    (a, b): (&Node, &Node),
    quiet: Duration,
    mut done: impl FnMut() -> bool,
) -> bool {
    let harmed = || {
        let f = net.fault_stats();
        f.lost + f.corrupted
    };
    for attempt in 0..200 {
        // Counted before the clock moves: the retry it fires may be harmed at once.
        let before = harmed();
        // Past the retransmit time and its jitter: the next attempt.
        clock.advance(Duration::from_millis(5400));
        // A fresh packet each step: the last one may have been lost or damaged.
        a.send_udp(b, false, format!("attempt {attempt}").as_bytes());
        if wait_for(quiet, || done() || harmed() > before) && done() {
            return true;
        }
    }
    false
}

/// [`drive_until`] a packet arrives at b, when every failed attempt shows as a message lost or
/// damaged.
fn drive_until_delivered(net: &MemoryNetwork, clock: &FakeClock, a: &Node, b: &Node) -> bool {
    let mut arrived = false;
    drive_until(net, clock, (a, b), Duration::from_secs(20), || {
        arrived |= b.tun.try_recv().is_some();
        arrived
    })
}

#[test]
fn handshakes_retry_through_heavy_loss_until_the_tunnel_comes_up() {
    let base = seed(7);
    let mut retried = 0;
    for seed in base..base + 3 {
        let _on_failure = NameSeedOnFailure(seed);
        let net = MemoryNetwork::new();
        let (clock, a, b) = fake_nodes(&net, 1);
        net.set_faults(Some(on_handshakes(FaultConfig::builder(seed).loss(0.6))));
        assert!(
            drive_until_delivered(&net, &clock, &a, &b),
            "seed {seed}: {:?} {:?}",
            net.fault_stats(),
            a.dev.stats()
        );
        // Every failed attempt lost exactly one message (the initiation, or the response to
        // it); the last attempt lost none.
        let f = net.fault_stats();
        let (initiations, responses) =
            (a.dev.stats().handshakes_sent, b.dev.stats().handshakes_sent);
        assert_eq!(f.lost, initiations - 1, "seed {seed}: {f:?}");
        assert_eq!(f.matched, initiations + responses, "seed {seed}: {f:?}");
        let refused = a.dev.stats().drop_handshake_refused + b.dev.stats().drop_handshake_refused;
        assert_eq!(
            refused, 0,
            "seed {seed}: a message that arrived was refused"
        );
        retried += initiations - 1;
    }
    assert!(
        retried > 0,
        "seeds {base}..{}: no handshake needed a retry",
        base + 3
    );
}

/// What a node refused of the damaged handshake messages it got: a bad MAC1, or damage to
/// the type word or header that made it something else.
fn handshake_refusals(n: &Node) -> u64 {
    let s = n.dev.stats();
    s.drop_bad_mac + damage_drops(&s)
}

/// Handshake messages on the wire with a nonzero MAC2. Nobody here holds a cookie, so every
/// one was sent with zeros there: these were damaged in MAC2, the one field nobody checks when
/// not under load.
fn damaged_in_mac2(wire: &crossbeam_channel::Receiver<vpn_conn::memory::Captured>) -> u64 {
    wire.try_iter()
        .filter(|(_, _, d)| {
            let mac2 = match classify(d) {
                Ok(MessageType::Initiation) => Initiation::parse(d).map(|m| *m.mac2()),
                Ok(MessageType::Response) => Response::parse(d).map(|m| *m.mac2()),
                _ => return false,
            };
            mac2.is_ok_and(|m| m != [0; 16])
        })
        .count() as u64
}

#[test]
fn damaged_handshake_messages_are_refused_and_retries_bring_the_tunnel_up() {
    let seed = seed(8);
    let _on_failure = NameSeedOnFailure(seed);
    let net = MemoryNetwork::new();
    let (clock, a, b) = fake_nodes(&net, 1);
    let (tap, wire) = crossbeam_channel::unbounded();
    net.set_tap(Some(tap));
    // The first attempt damaged for sure: wait for its end (a refusal, or, if only MAC2 was
    // hit both ways, a handshake).
    net.set_faults(Some(on_handshakes(
        FaultConfig::builder(seed).corruption(1.0),
    )));
    a.send_udp(&b, false, b"first");
    let peer = a.dev.peer(&b.key.public_key()).unwrap();
    assert!(wait_for(PATIENCE, || handshake_refusals(&a)
        + handshake_refusals(&b)
        > 0
        || peer.last_handshake().is_some()));
    let first = net.fault_stats().corrupted;
    // Then one handshake message in three damaged, both ways, until a packet gets through.
    let faults = FaultConfig::builder(seed).corruption(0.3);
    net.set_faults(Some(on_handshakes(faults)));
    assert!(
        drive_until_delivered(&net, &clock, &a, &b),
        "seed {seed}: {:?}",
        net.fault_stats()
    );
    // Every damaged message was refused, except those damaged only in MAC2.
    let damaged = first + net.fault_stats().corrupted;
    let mut mac2 = 0;
    let settled = wait_for(PATIENCE, || {
        mac2 += damaged_in_mac2(&wire);
        handshake_refusals(&a) + handshake_refusals(&b) + mac2 == damaged
    });
    assert!(
        settled,
        "seed {seed}: damaged {damaged}, MAC2 only {mac2}, refused a {} b {}",
        handshake_refusals(&a),
        handshake_refusals(&b)
    );
    assert!(damaged > 0);
}

#[test]
fn damaged_transport_messages_are_dropped_and_counted_and_the_tunnel_survives() {
    const N: u32 = 4000;
    let seed = seed(9);
    let _on_failure = NameSeedOnFailure(seed);
    let net = MemoryNetwork::new();
    let (_clock, a, b) = fake_pair(&net);
    // One transport message in three damaged: each is refused before the TUN, and counted.
    let faults = FaultConfig::builder(seed).corruption(0.3);
    net.set_faults(Some(on_transport(&a, &b, faults)));
    let before = b.dev.stats();
    let sender = send_numbered(&a, &b, N);
    let mut inbox = Inbox::default();
    let done = inbox.wait(&b, |inbox| {
        let f = net.fault_stats();
        f.matched == u64::from(N)
            && inbox.got.len() as u64 == f.matched - f.corrupted
            && damage_drops(&b.dev.stats()) - damage_drops(&before) == f.corrupted
    });
    sender.join().unwrap();
    assert!(
        done,
        "seed {seed}: {:?} {:?}",
        net.fault_stats(),
        b.dev.stats()
    );
    inbox.assert_per_flow_order(seed);
    // Still a working tunnel, both ways.
    net.set_faults(None);
    assert!(ping(&a, &b, false, Duration::from_secs(10)), "seed {seed}");
    assert!(ping(&b, &a, true, Duration::from_secs(10)), "seed {seed}");
}

#[test]
fn delayed_datagrams_arrive_late_and_the_window_decides_which_are_taken() {
    const N: u32 = 4000;
    let seed = seed(10);
    let _on_failure = NameSeedOnFailure(seed);
    let net = MemoryNetwork::new();
    let (_clock, a, b) = fake_pair(&net);
    let ms = Duration::from_millis;
    let faults = FaultConfig::builder(seed).delay(0.05, ms(1)..=ms(30));
    net.set_faults(Some(on_transport(&a, &b, faults)));
    let before = b.dev.stats().drop_replay;
    let sender = send_numbered(&a, &b, N);
    let mut inbox = Inbox::default();
    // The delay line delivers on its own: wait until every delayed datagram was handed over
    // and the receiver took or refused each.
    let done = inbox.wait(&b, |inbox| {
        let f = net.fault_stats();
        let beyond = f.late_beyond(REPLAY_WINDOW_SIZE);
        f.matched == u64::from(N)
            && f.late.len() as u64 == f.delayed
            && inbox.got.len() as u64 == u64::from(N) - beyond
            && b.dev.stats().drop_replay - before == beyond
    });
    sender.join().unwrap();
    let f = net.fault_stats();
    assert!(done, "seed {seed}: got {} {f:?}", inbox.got.len());
    assert!(f.delayed > 0, "seed {seed}");
    inbox.assert_no_duplicates(seed);
}

#[test]
fn a_faulty_peer_does_not_cost_the_other_peers_a_packet() {
    const N: u32 = 3000;
    let seed = seed(11);
    let _on_failure = NameSeedOnFailure(seed);
    let net = MemoryNetwork::new();
    let clock = FakeClock::new();
    let node = |n| {
        let c: Arc<dyn Clock> = clock.clone();
        Node::new(&net, n, 64, Some(c))
    };
    let (hub, good, bad) = (node(1), node(2), node(3));
    for other in [&good, &bad] {
        hub.add_peer(other, "");
        other.add_peer(&hub, "");
        assert!(ping(other, &hub, false, Duration::from_secs(10)));
        assert!(ping(&hub, other, false, Duration::from_secs(10)));
    }
    // Everything to and from the bad peer's address suffers; its handshakes are done.
    let bad_addr: SocketAddr = bad.addr();
    let faults = FaultConfig::builder(seed)
        .loss(0.1)
        .duplication(0.1)
        .corruption(0.1)
        .reordering(0.05, 1..=100)
        .matching(move |from, to, d| (from == bad_addr || to == bad_addr) && is_transport(d))
        .build()
        .unwrap();
    net.set_faults(Some(faults));
    let senders = [
        send_numbered(&good, &hub, N),
        send_numbered(&bad, &hub, N),
        send_numbered(&hub, &good, N),
        send_numbered(&hub, &bad, N),
    ];
    // The hub's TUN gets both peers' streams: tell them apart by source address.
    let (mut at_hub_good, mut at_hub_bad) = (Inbox::default(), Inbox::default());
    let mut at_good = Inbox::default();
    let mut at_bad = Inbox::default();
    let drain_hub = |good_in: &mut Inbox, bad_in: &mut Inbox| {
        while let Some(p) = hub.tun.try_recv() {
            let pl = udp_payload(&p);
            let i = u32::from_be_bytes(pl[..4].try_into().unwrap());
            assert_eq!(pl, numbered_payload(i), "seed {seed}: damaged packet {i}");
            if p[12..16] == good.v4.octets() {
                good_in.got.push(i);
            } else {
                bad_in.got.push(i);
            }
        }
    };
    let good_done = wait_for(PATIENCE, || {
        drain_hub(&mut at_hub_good, &mut at_hub_bad);
        at_good.drain(&good);
        at_bad.drain(&bad);
        at_hub_good.got.len() == N as usize && at_good.got.len() == N as usize
    });
    for s in senders {
        s.join().unwrap();
    }
    assert!(
        good_done,
        "seed {seed}: the good peer got {} of {N}, the hub {} of {N}",
        at_good.got.len(),
        at_hub_good.got.len()
    );
    // Every packet of the good peer, in order, both ways.
    assert_eq!(at_hub_good.got, (0..N).collect::<Vec<_>>(), "seed {seed}");
    assert_eq!(at_good.got, (0..N).collect::<Vec<_>>(), "seed {seed}");
    // The bad peer's streams lose some, but never deliver one twice or damaged.
    net.flush_faults();
    assert!(wait_for(PATIENCE, || {
        drain_hub(&mut at_hub_good, &mut at_hub_bad);
        at_bad.drain(&bad);
        at_hub_bad.got.len() > N as usize / 2 && at_bad.got.len() > N as usize / 2
    }));
    at_hub_bad.assert_no_duplicates(seed);
    at_bad.assert_no_duplicates(seed);
    let f = net.fault_stats();
    assert!(
        f.lost > 0 && f.corrupted > 0 && f.duplicated > 0 && f.reordered > 0,
        "{f:?}"
    );
}

#[test]
fn duplicated_and_delayed_handshake_messages_still_make_one_working_session() {
    const ROUNDS: usize = 6;
    let seed = seed(12);
    let _on_failure = NameSeedOnFailure(seed);
    let net = MemoryNetwork::new();
    let (clock, a, b) = fake_pair(&net);
    let peer = a.dev.peer(&b.key.public_key()).unwrap();
    // Handshake messages lost, sent twice, or overtaken by later ones.
    let ms = Duration::from_millis;
    let faults = FaultConfig::builder(seed)
        .loss(0.2)
        .duplication(0.5)
        .delay(0.5, ms(1)..=ms(40));
    net.set_faults(Some(on_handshakes(faults)));
    // Rekey after rekey: past the rekey time, a's next packet starts a handshake. Late and
    // second copies are refused without a trace (a replayed initiation, a response to an
    // initiation since replaced), and b initiates too (its keypair expires before a's packet
    // under the new one reaches it), so initiations cross: a step whose outcome shows nowhere
    // moves the clock on after a second.
    for round in 0..ROUNDS {
        let last = peer.last_handshake();
        clock.advance(Duration::from_secs(120));
        let quiet = Duration::from_secs(1);
        let rekeyed = drive_until(&net, &clock, (&a, &b), quiet, || {
            peer.last_handshake() != last
        });
        assert!(
            rekeyed,
            "seed {seed} round {round}: {:?}",
            net.fault_stats()
        );
    }
    let f = net.fault_stats();
    assert!(f.duplicated > 0 && f.delayed > 0, "seed {seed}: {f:?}");
    // Every second copy was refused, and counted: a replayed initiation, a response to an
    // initiation already answered.
    net.flush_faults();
    let refused = || a.dev.stats().drop_handshake_refused + b.dev.stats().drop_handshake_refused;
    assert!(
        wait_for(PATIENCE, || refused() >= f.duplicated),
        "seed {seed}: refused {} of {} second copies",
        refused(),
        f.duplicated
    );
    // Whatever arrived late or twice (the delay line's stragglers included), both ends agree
    // on a session: packets pass both ways without another handshake.
    while b.tun.try_recv().is_some() {}
    let handshakes = (a.dev.stats().handshakes_sent, b.dev.stats().handshakes_sent);
    assert!(ping(&a, &b, false, Duration::from_secs(10)), "seed {seed}");
    assert!(ping(&b, &a, false, Duration::from_secs(10)), "seed {seed}");
    assert_eq!(
        (a.dev.stats().handshakes_sent, b.dev.stats().handshakes_sent),
        handshakes,
        "seed {seed}: the session needed another handshake"
    );
}

#[test]
fn a_rekey_under_reordering_loses_no_packet() {
    const N: u32 = 6000;
    let seed = seed(13);
    let _on_failure = NameSeedOnFailure(seed);
    let net = MemoryNetwork::new();
    let (clock, a, b) = fake_pair(&net);
    let peer = a.dev.peer(&b.key.public_key()).unwrap();
    let first = peer.last_handshake().unwrap();
    // a's transport messages held back by up to 300 later ones, across the switch of keypair:
    // those sent under the old one arrive after the new one is in use.
    let faults = FaultConfig::builder(seed).reordering(0.05, 1..=300);
    net.set_faults(Some(on_transport(&a, &b, faults)));
    let sender = send_numbered(&a, &b, N);
    let mut inbox = Inbox::default();
    assert!(inbox.wait(&b, |inbox| inbox.got.len() >= N as usize / 3));
    // Past the rekey time: a's next packet starts a handshake, and it switches keypairs as the
    // stream goes on.
    clock.advance(Duration::from_secs(121));
    let rekeyed = inbox.wait(&b, |_| peer.last_handshake() != Some(first));
    assert!(rekeyed, "seed {seed}: no rekey");
    assert!(
        wait_for(PATIENCE, || {
            inbox.drain(&b);
            net.fault_stats().matched >= u64::from(N)
        }),
        "seed {seed}: sent"
    );
    sender.join().unwrap();
    net.flush_faults();
    let done = inbox.wait(&b, |inbox| inbox.got.len() >= N as usize);
    assert!(
        done,
        "seed {seed}: got {} of {N}; {:?}",
        inbox.got.len(),
        b.dev.stats()
    );
    inbox.assert_no_duplicates(seed);
    assert!(net.fault_stats().reordered > 0);
}

#[test]
fn the_same_seed_reproduces_the_same_faults_and_deliveries_through_a_tunnel() {
    const N: u32 = 2000;
    let seed = seed(14);
    let _on_failure = NameSeedOnFailure(seed);
    let run = || {
        let net = MemoryNetwork::new();
        let (_clock, a, b) = fake_pair(&net);
        let faults = FaultConfig::builder(seed)
            .loss(0.05)
            .duplication(0.05)
            .corruption(0.05)
            .reordering(0.05, 1..=100);
        net.set_faults(Some(on_transport(&a, &b, faults)));
        let mut inbox = Inbox::default();
        send_through(&net, (&a, &b), N, &mut inbox);
        // Every packet neither lost nor damaged arrives (all late ones are within the window).
        let f = net.fault_stats();
        let want = (f.matched - f.lost - f.corrupted) as usize;
        assert!(
            inbox.wait(&b, |inbox| inbox.got.len() >= want),
            "seed {seed}: got {} of {want}",
            inbox.got.len()
        );
        // The ports of a run are whatever order the binds opened in: compare all but them.
        let f = net.fault_stats();
        let late: Vec<(u64, u64)> = f.late.iter().map(|l| (l.seq, l.behind)).collect();
        let counts = (f.matched, f.lost, f.duplicated, f.corrupted, f.reordered);
        ((counts, late), inbox.got)
    };
    let (first, second) = (run(), run());
    assert_eq!(
        first.0, second.0,
        "seed {seed}: the injector decided differently"
    );
    assert_eq!(
        first.1, second.1,
        "seed {seed}: the tunnel delivered differently"
    );
}
