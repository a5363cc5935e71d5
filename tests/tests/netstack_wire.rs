//! Two userspace stacks back to back, their TUNs joined by a wire the test controls packet by
//! packet: it holds what each side sends, delivers it, and then drops everything for a while,
//! so that both ends time out together with their data delivered and no acknowledgment back.

use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};
use vpn_netstack::{create_net_tun, Net, NetTun};
use vpn_tun::Device as _;

/// What the wire does with what a stack sends.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    Pass,
    Hold,
    Drop,
}

/// One direction of the wire and what it holds.
#[derive(Default)]
struct Lane {
    held: Vec<Vec<u8>>,
    dropped: usize,
}

struct Wire {
    mode: Mutex<Mode>,
    lanes: [Mutex<Lane>; 2],
}

/// A stack with tunnel addresses 100.64.0.`n` and fd00::`n`.
fn stack(n: u8) -> (Arc<NetTun>, Net, Ipv4Addr) {
    let v4 = Ipv4Addr::new(100, 64, 0, n);
    let v6 = Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, u16::from(n));
    let (tun, net) = create_net_tun(&[v4.into(), v6.into()], &[], 1420).unwrap();
    (Arc::new(tun), net, v4)
}

/// Moves what `from` sends to `to` through `lane` of the wire until `from` closes.
fn ferry(wire: Arc<Wire>, lane: usize, from: Arc<NetTun>, to: Arc<NetTun>) {
    thread::spawn(move || {
        let mut storage = vec![vec![0u8; 1500]; 16];
        let mut sizes = vec![0usize; 16];
        loop {
            let mut bufs: Vec<&mut [u8]> = storage.iter_mut().map(|b| &mut b[..]).collect();
            let Ok(n) = from.read(&mut bufs, &mut sizes, 0) else {
                return;
            };
            let mode = *wire.mode.lock().unwrap();
            match mode {
                Mode::Pass => {
                    if to.write(&mut bufs[..n], &sizes[..n], 0).is_err() {
                        return;
                    }
                }
                Mode::Hold => {
                    let mut l = wire.lanes[lane].lock().unwrap();
                    for (b, &len) in bufs[..n].iter().zip(&sizes[..n]) {
                        l.held.push(b[..len].to_vec());
                    }
                }
                Mode::Drop => wire.lanes[lane].lock().unwrap().dropped += n,
            }
        }
    });
}

/// Delivers what `lane` held to `to`.
fn deliver(wire: &Wire, lane: usize, to: &NetTun) {
    let mut held = std::mem::take(&mut wire.lanes[lane].lock().unwrap().held);
    let sizes: Vec<usize> = held.iter().map(Vec::len).collect();
    let mut bufs: Vec<&mut [u8]> = held.iter_mut().map(|p| &mut p[..]).collect();
    to.write(&mut bufs, &sizes, 0).unwrap();
}

#[test]
fn a_transfer_each_way_recovers_when_both_ends_time_out_with_their_data_delivered() {
    let (tun_a, net_a, _) = stack(1);
    let (tun_b, net_b, b_v4) = stack(2);
    let wire = Arc::new(Wire {
        mode: Mutex::new(Mode::Pass),
        lanes: Default::default(),
    });
    ferry(wire.clone(), 0, tun_a.clone(), tun_b.clone());
    ferry(wire.clone(), 1, tun_b.clone(), tun_a.clone());

    let listener = net_b
        .listen_tcp(SocketAddr::new(IpAddr::V4(b_v4), 80))
        .unwrap();
    let a = net_a
        .dial_tcp_timeout(SocketAddr::new(b_v4.into(), 80), Duration::from_secs(5))
        .unwrap();
    let (b, _) = listener.accept().unwrap();
    for s in [&a, &b] {
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    }

    // A warm-up each way opens both congestion windows, so that what follows goes out at once.
    let warm = vec![1u8; 256 << 10];
    let echo = {
        let b = b.clone();
        thread::spawn(move || {
            let mut got = vec![0u8; 256 << 10];
            (&b).read_exact(&mut got).unwrap();
            (&b).write_all(&got).unwrap();
        })
    };
    (&a).write_all(&warm).unwrap();
    let mut back = vec![0u8; warm.len()];
    (&a).read_exact(&mut back).unwrap();
    echo.join().unwrap();

    // Two full segments each way (the MSS is 1380 at MTU 1420; a third, partial one would wait
    // for an ACK under Nagle), sent before either end has seen the other's: no segment held
    // acknowledges the other side's data.
    const LEN: usize = 2 * 1380;
    let from_a: Vec<u8> = (0..LEN).map(|i| i as u8).collect();
    let from_b: Vec<u8> = (0..LEN).map(|i| (i * 7) as u8).collect();
    *wire.mode.lock().unwrap() = Mode::Hold;
    (&a).write_all(&from_a).unwrap();
    (&b).write_all(&from_b).unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    while wire.lanes.iter().any(|l| l.lock().unwrap().held.len() < 2) {
        assert!(Instant::now() < deadline, "both sides' data on the wire");
        thread::sleep(Duration::from_millis(5));
    }

    // Both ends get the other's data; every acknowledgment of it is lost, and so are the
    // retransmissions of both ends' first timeout (smoltcp's is at least a second).
    *wire.mode.lock().unwrap() = Mode::Drop;
    deliver(&wire, 0, &tun_b);
    deliver(&wire, 1, &tun_a);
    thread::sleep(Duration::from_millis(2500));
    let dropped: Vec<usize> = wire
        .lanes
        .iter()
        .map(|l| l.lock().unwrap().dropped)
        .collect();
    assert!(
        dropped.iter().all(|&d| d > 0),
        "both ends retransmitted into the drop: {dropped:?}"
    );

    // The wire heals. Each end's next retransmission reaches a receiver that already has it;
    // the acknowledgments that answer it must be taken, or the two ends drop each other's
    // forever.
    *wire.mode.lock().unwrap() = Mode::Pass;
    let healed = Instant::now();
    let reader = thread::spawn(move || {
        let mut got = vec![0u8; LEN];
        (&b).read_exact(&mut got).map(|()| (got, b))
    });
    let mut got_a = vec![0u8; LEN];
    (&a).read_exact(&mut got_a).expect("A reads B's data");
    let (got_b, b) = reader.join().unwrap().expect("B reads A's data");
    assert_eq!(got_a, from_b);
    assert_eq!(got_b, from_a);
    // And the connection keeps moving.
    (&a).write_all(b"after").unwrap();
    let mut after = [0u8; 5];
    (&b).read_exact(&mut after).unwrap();
    assert_eq!(&after, b"after");
    eprintln!(
        "recovered {:?} after the wire healed (dropped A->B {}, B->A {})",
        healed.elapsed(),
        dropped[0],
        dropped[1]
    );
    tun_a.close().unwrap();
    tun_b.close().unwrap();
}
