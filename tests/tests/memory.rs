//! The device's one memory cap: with the smallest budget the pool is exhausted all the time under
//! a flood both ways, readers wait for slabs, and a rekey, a rebind and closing still complete.

#![forbid(unsafe_code)]

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use vpn_conn::memory::MemoryNetwork;
use vpn_device::clock::{Clock, FakeClock};
use vpn_device::Options;
use vpn_tests::*;

/// Most packets a flood keeps queued in the sender's TUN (injected, not yet read by its device)
/// and in the network (sent, neither received nor dropped): flow control that keeps the
/// in-memory queues bounded, and the network's short of full so that handshake messages are
/// not lost, and that survives lost packets.
const IN_FLIGHT: u64 = 4096;

/// Floods `from` → `to` with small UDP packets until `stop`, counting deliveries in `got`.
fn flood<'s>(
    s: &'s std::thread::Scope<'s, '_>,
    net: &'s MemoryNetwork,
    from: &'s Node,
    to: &'s Node,
    stop: &'s AtomicBool,
    got: &'s AtomicU64,
) {
    let (src, dst) = (from.v4.into(), to.v4.into());
    let (tun_in, tun_out) = (from.tun.clone(), to.tun.clone());
    s.spawn(move || {
        let mut sent = 0;
        while !stop.load(Ordering::Relaxed) {
            let (out, into) = (from.dev.stats(), to.dev.stats());
            if sent > out.tun_packets_read + IN_FLIGHT
                || out.datagrams_sent > into.datagrams_received + net.dropped() + IN_FLIGHT
            {
                std::thread::yield_now();
                continue;
            }
            tun_in.inject(udp_packet(src, dst, 7, 9, b"flood"));
            sent += 1;
        }
    });
    // Drains until stopped and idle: a device blocked writing to a full TUN could not close.
    s.spawn(move || loop {
        match tun_out.recv(Duration::from_millis(20)) {
            Some(_) => {
                got.fetch_add(1, Ordering::Relaxed);
            }
            None if stop.load(Ordering::Relaxed) => break,
            None => {}
        }
    });
}

struct StopOnDrop<'a>(&'a AtomicBool);

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

#[test]
fn exhausted_memory_makes_readers_wait_and_rekey_rebind_and_close_complete() {
    let net = MemoryNetwork::new();
    let clock = FakeClock::new();
    let c: Arc<dyn Clock> = clock.clone();
    // A budget of one byte: raised to the floor (the TUN reader's slab and two socket
    // readers'), the least the device can run in.
    let opts = Options::default().with_memory_budget(1).with_clock(c);
    let a = Node::with_options(&net, 1, 128, opts.clone());
    let b = Node::with_options(&net, 2, 128, opts);
    a.add_peer(&b, "");
    b.add_peer(&a, "");
    assert!(ping(&a, &b, false, Duration::from_secs(10)));
    let floor = a.dev.memory().budget;
    assert!(floor > 1 && floor < 2 << 20, "floor {floor}");
    let pa = a.dev.peer(&b.key.public_key()).unwrap();
    let stop = AtomicBool::new(false);
    let counters: [AtomicU64; 2] = Default::default();
    let [ab_got, ba_got] = &counters;
    let delivered = || ab_got.load(Ordering::Relaxed) + ba_got.load(Ordering::Relaxed);
    std::thread::scope(|s| {
        // Stops the floods however the scope ends (a failed assertion would otherwise leave
        // the scope waiting for them).
        let _stop = StopOnDrop(&stop);
        flood(s, &net, &a, &b, &stop, ab_got);
        flood(s, &net, &b, &a, &stop, ba_got);
        let waits = |n: &Node| n.dev.memory().waits;
        assert!(
            wait_for(Duration::from_secs(30), || waits(&a) > 0 && waits(&b) > 0),
            "the floods never exhausted the pools: {:?} {:?}",
            a.dev.memory(),
            b.dev.memory()
        );
        // A rekey under the flood: past RekeyAfterTime the initiator starts a handshake while
        // readers keep waiting for memory. Time then passes in steps of a second, as it would
        // (crossing initiations settle on the retransmit timer).
        let pb = b.dev.peer(&a.key.public_key()).unwrap();
        let handshakes = || (pa.last_handshake(), pb.last_handshake());
        let before = handshakes();
        clock.advance(Duration::from_secs(121));
        let mut rekeyed = false;
        for _ in 0..30 {
            if wait_for(Duration::from_secs(1), || handshakes() != before) {
                rekeyed = true;
                break;
            }
            clock.advance(Duration::from_secs(1));
        }
        assert!(rekeyed, "no new handshake under exhausted memory");
        let (w, d) = (waits(&b), delivered());
        assert!(
            wait_for(Duration::from_secs(30), || waits(&b) > w
                && delivered() > d + 1000),
            "traffic stopped after the rekey"
        );
        // A rebind under the flood: b moves to a new port; a follows it (roaming) from b's
        // packets.
        let old = b.addr();
        b.dev.ipc_set("listen_port=0\n").unwrap();
        assert_ne!(b.addr(), old);
        let (w, d) = (waits(&b), delivered());
        assert!(
            wait_for(Duration::from_secs(30), || waits(&b) > w
                && ab_got.load(Ordering::Relaxed) > d),
            "traffic stopped after the rebind: {} {} {:?} {:?} {:?} {:?}",
            ab_got.load(Ordering::Relaxed),
            ba_got.load(Ordering::Relaxed),
            a.dev.stats(),
            b.dev.stats(),
            a.dev.memory(),
            b.dev.memory()
        );
    });
    for n in [&a, &b] {
        let m = n.dev.memory();
        assert!(m.peak <= m.budget, "{m:?}");
    }
    // Closing joins every thread: a reader stuck waiting for memory would hang here.
    a.dev.close();
    b.dev.close();
}
