//! Connected sockets against real sockets on loopback (Linux): the rules of `docs/bind.md`,
//! "Connected sockets".

use super::reader::{self, SLOT_TIERS};
use super::*;
use crate::linux::segments::{split, Layout};
use crate::{is_err_closed, Endpoint};
use parking_lot::RwLock;
use socket2::{Domain, Protocol, Type};
use std::net::UdpSocket;
use std::os::fd::AsFd;
use std::sync::atomic::AtomicUsize;
use std::sync::mpsc;
use std::time::Duration;
use vpn_sys::mmsg::RecvMeta;

const WAIT: Duration = Duration::from_secs(5);

type Got = (Vec<u8>, Endpoint);

/// A set on a shareable wildcard socket whose readers run in threads and report what they read.
struct Harness {
    shared: UdpSocket,
    port: u16,
    set: ConnectedSockets,
    rx: Mutex<mpsc::Receiver<Got>>,
    started: Arc<AtomicUsize>,
    ended: Arc<AtomicUsize>,
}

fn shared_socket(v6: bool) -> UdpSocket {
    let (d, a): (Domain, SocketAddr) = if v6 {
        (Domain::IPV6, "[::]:0".parse().unwrap())
    } else {
        (Domain::IPV4, "0.0.0.0:0".parse().unwrap())
    };
    let s = Socket::new(d, Type::DGRAM, Some(Protocol::UDP)).unwrap();
    if v6 {
        s.set_only_v6(true).unwrap();
    }
    reuse_port_control(&s).unwrap();
    s.bind(&a.into()).unwrap();
    let s: UdpSocket = s.into();
    s.set_read_timeout(Some(Duration::from_millis(300)))
        .unwrap();
    s
}

fn harness_with(v6: bool, accept: bool, tweak: impl FnOnce(&mut ConnectedConfig)) -> Harness {
    let shared = shared_socket(v6);
    let port = shared.local_addr().unwrap().port();
    let (tx, rx) = mpsc::channel();
    let started = Arc::new(AtomicUsize::new(0));
    let ended = Arc::new(AtomicUsize::new(0));
    let (s2, e2) = (started.clone(), ended.clone());
    let tx = Mutex::new(tx);
    let reader: ReaderHook = Arc::new(move |mut f: ReceiveFunc, _buf, batch| {
        if !accept {
            return false;
        }
        s2.fetch_add(1, Relaxed);
        let tx = tx.lock().clone();
        let e2 = e2.clone();
        std::thread::spawn(move || {
            let mut storage = vec![vec![0u8; 65_536]; batch];
            let mut sizes = vec![0usize; batch];
            let mut eps = vec![Endpoint::default(); batch];
            loop {
                let mut bufs: Vec<&mut [u8]> = storage.iter_mut().map(|b| &mut b[..]).collect();
                match f(&mut bufs, &mut sizes, &mut eps) {
                    Ok(n) => {
                        assert!(n >= 1 && n <= batch, "n = {n}");
                        for i in 0..n {
                            if sizes[i] > 0 {
                                let _ = tx.send((bufs[i][..sizes[i]].to_vec(), eps[i]));
                            }
                        }
                    }
                    Err(e) => {
                        assert!(is_err_closed(&e), "reader ended with {e}");
                        e2.fetch_add(1, Relaxed);
                        return;
                    }
                }
            }
        });
        true
    });
    let mut cfg = ConnectedConfig::new(port, reader);
    cfg.open_after = 1;
    cfg.idle_interval = Duration::ZERO;
    tweak(&mut cfg);
    Harness {
        shared,
        port,
        set: ConnectedSockets::new(cfg),
        rx: Mutex::new(rx),
        started,
        ended,
    }
}

/// A pair socket of the set (the tests that use it have exactly one).
fn first_pair(set: &ConnectedSockets) -> Arc<Pair> {
    set.inner
        .state
        .lock()
        .socks
        .values()
        .next()
        .unwrap()
        .clone()
}

fn harness(v6: bool) -> Harness {
    harness_with(v6, true, |_| {})
}

fn peer(v6: bool) -> UdpSocket {
    let s = UdpSocket::bind(if v6 { "[::1]:0" } else { "127.0.0.1:0" }).unwrap();
    s.set_read_timeout(Some(WAIT)).unwrap();
    s
}

fn lo(v6: bool, port: u16) -> SocketAddr {
    let ip: IpAddr = if v6 {
        "::1".parse().unwrap()
    } else {
        "127.0.0.1".parse().unwrap()
    };
    SocketAddr::new(ip, port)
}

fn recv(s: &UdpSocket) -> (Vec<u8>, SocketAddr) {
    let mut b = [0u8; 65_536];
    let (n, from) = s.recv_from(&mut b).unwrap();
    (b[..n].to_vec(), from)
}

fn wait_ended(h: &Harness, n: usize) {
    let t = Instant::now();
    while h.ended.load(Relaxed) < n {
        assert!(t.elapsed() < WAIT, "readers did not end");
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn port_sharing_and_reply_stealing(v6: bool) {
    let h = harness(v6);
    let p = peer(v6);
    let to = p.local_addr().unwrap();
    assert!(h.set.send(to, &[b"hello"]).unwrap().is_ok());
    assert_eq!(h.set.len(), 1);
    let (data, from) = recv(&p);
    assert_eq!((data.as_slice(), from.port()), (&b"hello"[..], h.port));
    // The reply reaches the connected socket's reader, not the shared socket.
    p.send_to(b"reply", lo(v6, h.port)).unwrap();
    let (data, ep) = h.rx.lock().recv_timeout(WAIT).unwrap();
    assert_eq!(data, b"reply");
    assert_eq!(ep.dst, to);
    assert_eq!(ep.src.map(|s| s.ip), Some(lo(v6, 0).ip()));
    let mut b = [0u8; 16];
    assert!(h.shared.recv_from(&mut b).is_err(), "shared socket got it");
    let st = h.set.stats();
    assert_eq!((st.open, st.dials, st.datagrams_sent), (1, 1, 1));
    assert_eq!(st.datagrams_received, 1);
}

#[test]
fn port_sharing_and_reply_stealing_v4() {
    port_sharing_and_reply_stealing(false);
}

#[test]
fn port_sharing_and_reply_stealing_v6() {
    port_sharing_and_reply_stealing(true);
}

#[test]
fn batches_in_order_both_ways() {
    let h = harness(false);
    let p = peer(false);
    let to = p.local_addr().unwrap();
    let data: Vec<Vec<u8>> = (0..64u8).map(|i| vec![i; 1200]).collect();
    let refs: Vec<&[u8]> = data.iter().map(|d| d.as_slice()).collect();
    h.set.send(to, &refs).unwrap().unwrap();
    for want in &data {
        assert_eq!(&recv(&p).0, want);
    }
    for d in &data {
        p.send_to(d, lo(false, h.port)).unwrap();
    }
    for want in &data {
        let (got, ep) = h.rx.lock().recv_timeout(WAIT).unwrap();
        assert_eq!((&got, ep.dst), (want, to));
    }
}

#[test]
fn threshold_counts_sent_and_received_and_resets_each_interval() {
    let h = harness_with(false, true, |c| c.open_after = 1000);
    let p = peer(false);
    let to = p.local_addr().unwrap();
    assert!(h.set.send(to, &[&[0u8; 400]]).is_none());
    assert!(!h.set.dial(to, lo(false, 0).ip(), 400));
    // 800 of 1000: an idle check forgets them ("only recent traffic counts").
    h.set.idle_check();
    assert!(h.set.send(to, &[&[0u8; 400]]).is_none());
    assert!(!h.set.dial(to, lo(false, 0).ip(), 400));
    assert!(h.set.send(to, &[&[0u8; 400]]).is_some());
    assert_eq!(h.set.len(), 1);
}

#[test]
fn idle_socket_closes_after_a_silent_interval_and_trickle_keeps_it() {
    let h = harness(false);
    let p = peer(false);
    let to = p.local_addr().unwrap();
    h.set.send(to, &[b"x"]).unwrap().unwrap();
    h.set.idle_check(); // used since dialled: kept
    assert_eq!(h.set.len(), 1);
    p.send_to(b"trickle", lo(false, h.port)).unwrap();
    h.rx.lock().recv_timeout(WAIT).unwrap();
    h.set.idle_check(); // received in the interval: kept
    assert_eq!(h.set.len(), 1);
    h.set.idle_check(); // silent interval: closed, reader ends
    assert_eq!(h.set.len(), 0);
    wait_ended(&h, 1);
    // Its traffic is back on the shared socket.
    p.send_to(b"again", lo(false, h.port)).unwrap();
    assert_eq!(recv(&h.shared).0, b"again");
}

#[test]
fn limit_declines_without_dialling() {
    let h = harness_with(false, true, |c| c.max_sockets = 1);
    let (a, b) = (peer(false), peer(false));
    h.set
        .send(a.local_addr().unwrap(), &[b"a"])
        .unwrap()
        .unwrap();
    assert!(h.set.send(b.local_addr().unwrap(), &[b"b"]).is_none());
    assert_eq!(h.set.stats().dials, 1);
    assert_eq!(h.started.load(Relaxed), 1);
    // b's reply was not swallowed by a dialled-and-discarded socket.
    b.send_to(b"from b", lo(false, h.port)).unwrap();
    assert_eq!(recv(&h.shared).0, b"from b");
}

#[test]
fn connection_refused_is_not_an_error_and_keeps_the_reader() {
    let h = harness(false);
    let p = peer(false);
    let to = p.local_addr().unwrap();
    h.set.send(to, &[b"1"]).unwrap().unwrap();
    drop(p);
    for _ in 0..3 {
        // ICMP port unreachable comes back as ECONNREFUSED on the connected socket.
        assert!(h.set.send(to, &[b"2"]).unwrap().is_ok());
        std::thread::sleep(Duration::from_millis(20));
    }
    // The peer restarts on the same port: its traffic still reaches the same reader.
    let p = UdpSocket::bind(to).unwrap();
    p.send_to(b"back", lo(false, h.port)).unwrap();
    assert_eq!(h.rx.lock().recv_timeout(WAIT).unwrap().0, b"back");
    assert_eq!(h.ended.load(Relaxed), 0);
    assert_eq!(h.set.stats().dials, 1);
}

#[test]
fn control_runs_on_every_dial_and_its_failure_falls_back() {
    let calls = Arc::new(AtomicUsize::new(0));
    let fail = Arc::new(AtomicBool::new(false));
    let (c2, f2) = (calls.clone(), fail.clone());
    let h = harness_with(false, true, move |c| {
        c.control = Some(Arc::new(move |_s: &Socket| {
            c2.fetch_add(1, Relaxed);
            if f2.load(Relaxed) {
                Err(io::Error::other("control says no"))
            } else {
                Ok(())
            }
        }))
    });
    let (a, b) = (peer(false), peer(false));
    h.set
        .send(a.local_addr().unwrap(), &[b"a"])
        .unwrap()
        .unwrap();
    // Route lookup and dial each ran it.
    assert_eq!(calls.load(Relaxed), 2);
    fail.store(true, Relaxed);
    assert!(h.set.send(b.local_addr().unwrap(), &[b"b"]).is_none());
    assert_eq!(h.set.len(), 1);
}

#[test]
fn close_unblocks_readers_and_nothing_dials_after() {
    let h = harness(false);
    let p = peer(false);
    let to = p.local_addr().unwrap();
    h.set.send(to, &[b"x"]).unwrap().unwrap();
    h.set.close();
    wait_ended(&h, 1);
    assert!(h.set.send(to, &[b"y"]).is_none());
    assert!(!h.set.dial(to, lo(false, 0).ip(), 1 << 30));
    assert_eq!(h.started.load(Relaxed), 1);
}

#[test]
fn rebind_moves_to_the_new_port_and_port_zero_takes_nothing() {
    let h = harness(false);
    let p = peer(false);
    let to = p.local_addr().unwrap();
    h.set.send(to, &[b"x"]).unwrap().unwrap();
    h.set.rebind(0);
    wait_ended(&h, 1);
    assert!(h.set.send(to, &[b"y"]).is_none());
    let other = shared_socket(false);
    let port = other.local_addr().unwrap().port();
    h.set.rebind(port);
    h.set.send(to, &[b"z"]).unwrap().unwrap();
    recv(&p);
    assert_eq!(recv(&p).1.port(), port);
}

#[test]
fn refused_reader_closes_the_socket_and_traffic_stays_shared() {
    let h = harness_with(false, false, |_| {});
    let p = peer(false);
    let to = p.local_addr().unwrap();
    assert!(h.set.send(to, &[b"x"]).is_none());
    assert_eq!(h.set.len(), 0);
    p.send_to(b"reply", lo(false, h.port)).unwrap();
    assert_eq!(recv(&h.shared).0, b"reply");
    // The refusal backs off: no new dial at once.
    assert!(h.set.send(to, &[b"x"]).is_none());
    assert_eq!(h.set.stats().dial_failures, 1);
}

#[test]
fn failed_dial_backs_off_and_rebind_clears_it() {
    let h = harness(false);
    let p = peer(false);
    let to = p.local_addr().unwrap();
    // Someone else (another user, or not shareable) holds 127.0.0.1:port: the dial fails.
    let blocker_port = {
        let b = UdpSocket::bind("127.0.0.1:0").unwrap();
        let port = b.local_addr().unwrap().port();
        h.set.rebind(port);
        assert!(h.set.send(to, &[b"x"]).is_none());
        assert_eq!(h.set.stats().dial_failures, 1);
        port
    };
    // Blocker gone, but the failure is remembered for the retry interval.
    assert!(h.set.send(to, &[b"x"]).is_none());
    h.set.rebind(blocker_port);
    assert!(h.set.send(to, &[b"x"]).is_some());
}

#[test]
fn concurrent_first_callers_dial_once() {
    let h = harness(false);
    let p = peer(false);
    let to = p.local_addr().unwrap();
    let barrier = std::sync::Barrier::new(8);
    std::thread::scope(|s| {
        for _ in 0..8 {
            s.spawn(|| {
                barrier.wait();
                h.set.send(to, &[b"x"]).is_some()
            });
        }
    });
    assert_eq!(h.set.stats().dials, 1);
    assert_eq!(h.set.len(), 1);
}

#[test]
fn dial_takes_inbound_traffic_for_a_pair_never_sent_to() {
    let h = harness(false);
    let p = peer(false);
    let from = p.local_addr().unwrap();
    assert!(h.set.dial(from, lo(false, 0).ip(), 100));
    p.send_to(b"in", lo(false, h.port)).unwrap();
    assert_eq!(h.rx.lock().recv_timeout(WAIT).unwrap().0, b"in");
    // Receive-only but used: survives the idle check.
    h.set.idle_check();
    assert_eq!(h.set.len(), 1);
}

/// A pair on `s` (bound, not yet connected) for `key`, connected now, without GRO, outside
/// any set.
fn plain_pair(key: Key, s: Socket) -> Arc<Pair> {
    let d = sock::connect(s, &key, false).unwrap();
    Arc::new(Pair {
        key,
        fam: Family {
            sock: RwLock::new(Some(d.sock)),
            closed: AtomicBool::new(false),
            v6: false,
            gso: AtomicBool::new(false),
            gro: false,
        },
        used: AtomicBool::new(false),
    })
}

/// Buffers laid out as the device lays a pair reader's slab: the first of each run of 64 holds
/// any datagram, the others one packet of the MTU (2 KiB).
fn slab_like(batch: usize) -> Vec<Vec<u8>> {
    (0..batch)
        .map(|i| vec![0u8; if i % 64 == 0 { 65_536 } else { 2048 }])
        .collect()
}

/// Once the slot outgrew the MTU's 2 KiB, several large datagrams queued at once all arrive
/// whole: each goes to the head of a run, never into a small slot where it would be cut.
#[test]
fn large_datagrams_in_one_read_arrive_whole_through_a_slab_of_mtu_slots() {
    let h = harness(false);
    let p = peer(false);
    let key = Key {
        local: lo(false, 0).ip(),
        remote: p.local_addr().unwrap(),
    };
    let s = sock::bind_pair(&key, h.port, false, None).unwrap();
    let pair = plain_pair(key, s);
    // The hint starts the socket at the 9 KiB tier, as one lost datagram would.
    let (mut f, _, batch) = reader::receive_func(pair.clone(), Weak::new(), 3000);
    for i in 0..4u8 {
        p.send_to(&[i; 3000], lo(false, h.port)).unwrap();
    }
    p.send_to(b"end", lo(false, h.port)).unwrap();
    let mut storage = slab_like(batch);
    let mut sizes = vec![0; batch];
    let mut eps = vec![Endpoint::default(); batch];
    let mut got: Vec<Vec<u8>> = Vec::new();
    while got.last().map(Vec::as_slice) != Some(b"end") {
        let mut bufs: Vec<&mut [u8]> = storage.iter_mut().map(|b| &mut b[..]).collect();
        let n = f(&mut bufs, &mut sizes, &mut eps).unwrap();
        for i in (0..n).filter(|&i| sizes[i] > 0) {
            got.push(bufs[i][..sizes[i]].to_vec());
        }
    }
    assert_eq!(got.len(), 5, "a large datagram was lost");
    for (i, d) in got[..4].iter().enumerate() {
        assert_eq!(d, &vec![i as u8; 3000]);
    }
    pair.fam.close();
}

#[test]
fn a_read_strides_over_runs_only_when_its_slot_outgrows_a_buffer() {
    let mut storage = slab_like(128);
    let bufs: Vec<&mut [u8]> = storage.iter_mut().map(|b| &mut b[..]).collect();
    assert_eq!(slots::SLAB_RUN, crate::linux::segments::GRO_SEGMENTS);
    assert_eq!(slots::stride_for(&bufs, SLOT_TIERS[0], false), 1);
    assert_eq!(slots::stride_for(&bufs, SLOT_TIERS[1], false), 64);
    assert_eq!(slots::stride_for(&bufs, SLOT_TIERS[0], true), 64);
    let mut big = vec![vec![0u8; 65_535]; 8];
    let bufs: Vec<&mut [u8]> = big.iter_mut().map(|b| &mut b[..]).collect();
    assert_eq!(slots::stride_for(&bufs, SLOT_TIERS[2], false), 1);
    assert_eq!(slots::stride_for(&bufs, SLOT_TIERS[2], true), 8);
}

#[test]
fn datagrams_queued_before_connect_keep_their_source() {
    let h = harness(false);
    let p = peer(false);
    let stranger = peer(false);
    let key = Key {
        local: lo(false, 0).ip(),
        remote: p.local_addr().unwrap(),
    };
    let s = sock::bind_pair(&key, h.port, false, None).unwrap();
    stranger.send_to(b"early", lo(false, h.port)).unwrap();
    std::thread::sleep(Duration::from_millis(20));
    let pair = plain_pair(key, s);
    p.send_to(b"late", lo(false, h.port)).unwrap();
    let (mut f, _, batch) = reader::receive_func(pair.clone(), Weak::new(), 0);
    let mut storage = vec![vec![0u8; 2048]; batch];
    let mut sizes = vec![0; batch];
    let mut eps = vec![Endpoint::default(); batch];
    let mut got = Vec::new();
    while got.len() < 2 {
        let mut bufs: Vec<&mut [u8]> = storage.iter_mut().map(|b| &mut b[..]).collect();
        let n = f(&mut bufs, &mut sizes, &mut eps).unwrap();
        for i in 0..n {
            got.push((bufs[i][..sizes[i]].to_vec(), eps[i].dst));
        }
    }
    assert_eq!(got[0], (b"early".to_vec(), stranger.local_addr().unwrap()));
    assert_eq!(got[1], (b"late".to_vec(), p.local_addr().unwrap()));
    pair.fam.close();
    let mut bufs: Vec<&mut [u8]> = storage.iter_mut().map(|b| &mut b[..]).collect();
    assert!(is_err_closed(
        &f(&mut bufs, &mut sizes, &mut eps).unwrap_err()
    ));
}

#[test]
fn slots_grow_after_one_oversized_loss_and_the_hint_loses_nothing() {
    for (hint, lost) in [(0, 1), (3000, 0)] {
        let h = harness_with(false, true, |c| {
            c.offload = false;
            c.max_datagram = hint;
        });
        let p = peer(false);
        let to = p.local_addr().unwrap();
        h.set.send(to, &[b"open"]).unwrap().unwrap();
        let mut got = Vec::new();
        for i in 0..3u8 {
            // One at a time, so that each is its own read (a batch read shares one slot size):
            // the next goes once this one is delivered or counted lost.
            let drops = h.set.stats().oversize_drops;
            p.send_to(&[i; 3000], lo(false, h.port)).unwrap();
            let deadline = std::time::Instant::now() + WAIT;
            loop {
                if let Ok((d, _)) = h.rx.lock().recv_timeout(Duration::from_millis(5)) {
                    got.push(d);
                    break;
                }
                if h.set.stats().oversize_drops > drops {
                    break;
                }
                assert!(
                    std::time::Instant::now() < deadline,
                    "datagram {i} vanished"
                );
            }
        }
        assert!(h
            .rx
            .lock()
            .recv_timeout(Duration::from_millis(100))
            .is_err());
        assert_eq!(got.len(), 3 - lost, "hint {hint}");
        assert!(got.iter().all(|d| d.len() == 3000));
        assert_eq!(h.set.stats().oversize_drops, lost as u64);
        assert_eq!(h.set.len(), 1, "still connected");
    }
}

#[test]
fn gro_segments_split_into_following_buffers() {
    // 8 segments of 1200 and a 500-byte tail in one read, as the kernel reports it.
    let mut storage: Vec<Vec<u8>> = vec![vec![0u8; 65_535]; 12];
    let mut wire = Vec::new();
    for i in 0..8u8 {
        wire.extend(std::iter::repeat_n(i, 1200));
    }
    wire.extend(std::iter::repeat_n(0xee, 500));
    storage[0][..wire.len()].copy_from_slice(&wire);
    let from: SocketAddr = "198.18.0.2:51820".parse().unwrap();
    let meta = [RecvMeta {
        len: wire.len(),
        truncated: false,
        addr: Some(from),
        pktinfo: None,
        gro_size: 1200,
    }];
    let mut sizes = [7usize; 12];
    let mut eps = [Endpoint::default(); 12];
    let mut bufs: Vec<&mut [u8]> = storage.iter_mut().map(|b| &mut b[..]).collect();
    let f = split(
        &mut bufs,
        &mut sizes,
        &mut eps,
        &meta,
        Layout {
            stride: 12,
            slot: SLOT_TIERS[2],
            gro: true,
            scatter: 0,
        },
        |m| m.addr.unwrap().into(),
    );
    assert_eq!((f.entries, f.datagrams, f.gro, f.oversize), (9, 9, 1, 0));
    for i in 0..8 {
        assert_eq!(sizes[i], 1200);
        assert!(bufs[i][..1200].iter().all(|&b| b == i as u8));
        assert_eq!(eps[i].dst, from);
    }
    assert_eq!(sizes[8], 500);
    assert!(bufs[8][..500].iter().all(|&b| b == 0xee));
    assert_eq!(&sizes[9..], &[0, 0, 0]);
    // Fewer buffers than segments: the rest are counted, never written out of bounds.
    let mut bufs: Vec<&mut [u8]> = storage.iter_mut().take(4).map(|b| &mut b[..]).collect();
    let f = split(
        &mut bufs,
        &mut sizes[..4],
        &mut eps[..4],
        &meta,
        Layout {
            stride: 4,
            slot: SLOT_TIERS[2],
            gro: true,
            scatter: 0,
        },
        |m| m.addr.unwrap().into(),
    );
    assert_eq!((f.entries, f.oversize), (4, 5));
}

#[test]
fn gro_split_over_real_sockets() {
    if !vpn_sys::sockopt::kernel_at_least(5, 12) {
        println!("skipped: UDP GRO needs kernel 5.12");
        return;
    }
    let h = harness(false);
    let p = peer(false);
    let to = p.local_addr().unwrap();
    h.set.send(to, &[b"open"]).unwrap().unwrap();
    // The peer sends one GSO message: 8 × 1200 + 500.
    let mut segs: Vec<Vec<u8>> = (0..8u8).map(|i| vec![i; 1200]).collect();
    segs.push(vec![0xee; 500]);
    let refs: Vec<&[u8]> = segs.iter().map(|s| s.as_slice()).collect();
    p.connect(lo(false, h.port)).unwrap();
    let mut sb = vpn_sys::mmsg::SendBatch::new(16);
    let plan = [vpn_sys::mmsg::MsgPlan {
        start: 0,
        count: 9,
        gso_size: 1200,
    }];
    assert_eq!(sb.send_connected(p.as_fd(), &refs, &plan).unwrap(), 1);
    for want in &segs {
        assert_eq!(&h.rx.lock().recv_timeout(WAIT).unwrap().0, want);
    }
}

#[test]
fn lost_source_errors_recycle_the_socket() {
    let h = harness(false);
    let p = peer(false);
    let to = p.local_addr().unwrap();
    h.set.send(to, &[b"x"]).unwrap().unwrap();
    for errno in [libc::EINVAL, libc::EADDRNOTAVAIL, libc::ENETUNREACH] {
        let pair = first_pair(&h.set);
        let e = h
            .set
            .inner
            .classify(&pair, Err(io::Error::from_raw_os_error(errno)));
        assert_eq!(e.unwrap_err().raw_os_error(), Some(errno));
        assert_eq!(h.set.len(), 0);
        // The next send redials at once.
        h.set.send(to, &[b"y"]).unwrap().unwrap();
        assert_eq!(h.set.len(), 1);
    }
    let pair = first_pair(&h.set);
    let r = h
        .set
        .inner
        .classify(&pair, Err(io::Error::from_raw_os_error(libc::ECONNREFUSED)));
    assert!(r.is_ok());
    assert_eq!(h.set.stats().dials, 4);
}

#[test]
fn socket_closed_underneath_is_redialled() {
    let h = harness(false);
    let p = peer(false);
    let to = p.local_addr().unwrap();
    h.set.send(to, &[b"x"]).unwrap().unwrap();
    let pair = first_pair(&h.set);
    pair.fam.close(); // as if an idle check raced the send
    h.set.send(to, &[b"y"]).unwrap().unwrap();
    assert_eq!(h.set.stats().dials, 2);
    recv(&p);
    assert_eq!(recv(&p).0, b"y");
}

#[test]
fn eight_peers_on_one_local_address_all_get_sockets() {
    let h = harness(false);
    let peers: Vec<_> = (0..8).map(|_| peer(false)).collect();
    for p in &peers {
        h.set
            .send(p.local_addr().unwrap(), &[b"x"])
            .unwrap()
            .unwrap();
    }
    assert_eq!(h.set.len(), 8);
    for (i, p) in peers.iter().enumerate() {
        p.send_to(&[i as u8; 10], lo(false, h.port)).unwrap();
    }
    let mut got: Vec<Got> = (0..8)
        .map(|_| h.rx.lock().recv_timeout(WAIT).unwrap())
        .collect();
    got.sort_by_key(|g| g.0[0]);
    for (i, (d, ep)) in got.iter().enumerate() {
        assert_eq!((d[0], ep.dst), (i as u8, peers[i].local_addr().unwrap()));
    }
}

#[test]
fn receive_buffer_is_raised() {
    let h = harness(false);
    let p = peer(false);
    h.set
        .send(p.local_addr().unwrap(), &[b"x"])
        .unwrap()
        .unwrap();
    let pair = first_pair(&h.set);
    let guard = pair.fam.sock.read();
    let s = guard.as_ref().unwrap();
    // Without CAP_NET_ADMIN the kernel caps it at rmem_max; never below the default.
    let got = s.recv_buffer_size().unwrap();
    let rmem_max: usize = std::fs::read_to_string("/proc/sys/net/core/rmem_max")
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0);
    let want = if unsafe_free_is_root() {
        2 * sock::PAIR_RECV_BUFFER
    } else {
        (2 * rmem_max).min(2 * sock::PAIR_RECV_BUFFER)
    };
    assert!(got >= want, "SO_RCVBUF {got} < {want}");
    assert!(s.reuse_port().unwrap());
    assert!(!s.reuse_address().unwrap(), "SO_REUSEADDR must stay off");
}

fn unsafe_free_is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .map(|l| l.split_whitespace().nth(2) == Some("0"))
        })
        .unwrap_or(false)
}

/// As a child run by the next test (as `nobody`): try to bind the shared port, and exit
/// with 0 only if the kernel refused with EADDRINUSE.
fn steal_port_as_child(port: &str) -> ! {
    let port: u16 = port.parse().unwrap();
    let s = Socket::new(Domain::IPV4, Type::DGRAM, Some(Protocol::UDP)).unwrap();
    reuse_port_control(&s).unwrap();
    // Try hardest: with SO_REUSEADDR as well.
    let _ = s.set_reuse_address(true);
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    match s.bind(&addr.into()) {
        Ok(()) => std::process::exit(3),
        Err(e) if e.raw_os_error() == Some(libc::EADDRINUSE) => std::process::exit(0),
        Err(_) => std::process::exit(4),
    }
}

#[test]
fn another_user_cannot_bind_the_shared_port() {
    if let Ok(port) = std::env::var("VPN_TEST_STEAL_PORT") {
        steal_port_as_child(&port);
    }
    if !unsafe_free_is_root() {
        println!("skipped: needs root to run a child as nobody");
        return;
    }
    if std::process::Command::new("setpriv")
        .arg("--version")
        .output()
        .is_err()
    {
        println!("skipped: setpriv not installed");
        return;
    }
    let h = harness(false);
    let p = peer(false);
    h.set
        .send(p.local_addr().unwrap(), &[b"x"])
        .unwrap()
        .unwrap();
    let exe = std::env::current_exe().unwrap();
    let st = std::process::Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(&exe)
        .args(["--exact", "--nocapture", "--test-threads=1"])
        .arg("linux::connected::tests::another_user_cannot_bind_the_shared_port")
        .env("VPN_TEST_STEAL_PORT", h.port.to_string())
        .status()
        .unwrap();
    assert_eq!(st.code(), Some(0), "nobody could bind the shared port");
    // The same user can (that is what connected sockets rely on).
    let s = Socket::new(Domain::IPV4, Type::DGRAM, Some(Protocol::UDP)).unwrap();
    reuse_port_control(&s).unwrap();
    s.bind(&lo(false, h.port).into()).unwrap();
}

// ---- through StdNetBind ------------------------------------------------------------------

use super::super::{ConnectedOptions, StdNetBind};
use crate::{Bind, ReceiveFuncStarter};

/// A device stand-in: runs every started function in a thread, reporting what it reads.
struct TestStarter {
    tx: Mutex<mpsc::Sender<Got>>,
    started: AtomicUsize,
    ended: Arc<AtomicUsize>,
    batches: Mutex<Vec<usize>>,
}

fn run_reader(mut f: ReceiveFunc, batch: usize, tx: mpsc::Sender<Got>, ended: Arc<AtomicUsize>) {
    std::thread::spawn(move || {
        let mut storage = vec![vec![0u8; 65_536]; batch];
        let mut sizes = vec![0usize; batch];
        let mut eps = vec![Endpoint::default(); batch];
        loop {
            let mut bufs: Vec<&mut [u8]> = storage.iter_mut().map(|b| &mut b[..]).collect();
            match f(&mut bufs, &mut sizes, &mut eps) {
                Ok(n) => {
                    for i in 0..n.min(batch) {
                        if sizes[i] > 0 {
                            let _ = tx.send((bufs[i][..sizes[i]].to_vec(), eps[i]));
                        }
                    }
                }
                Err(_) => {
                    ended.fetch_add(1, Relaxed);
                    return;
                }
            }
        }
    });
}

impl ReceiveFuncStarter for TestStarter {
    fn start(&self, f: ReceiveFunc, _buf_size: usize, batch: usize) -> bool {
        self.started.fetch_add(1, Relaxed);
        self.batches.lock().push(batch);
        run_reader(f, batch, self.tx.lock().clone(), self.ended.clone());
        true
    }
}

fn starter() -> (Arc<TestStarter>, mpsc::Receiver<Got>) {
    let (tx, rx) = mpsc::channel();
    (
        Arc::new(TestStarter {
            tx: Mutex::new(tx),
            started: AtomicUsize::new(0),
            ended: Arc::new(AtomicUsize::new(0)),
            batches: Mutex::new(Vec::new()),
        }),
        rx,
    )
}

fn opts(open_after: u64) -> ConnectedOptions {
    ConnectedOptions {
        enabled: true,
        open_after,
        idle_interval: Duration::ZERO,
        ..ConnectedOptions::default()
    }
}

#[test]
fn bind_option_is_honoured_only_with_a_starter() {
    let off = StdNetBind::new();
    let (st, _rx) = starter();
    off.set_receive_func_starter(st.clone());
    off.open(0).unwrap();
    assert!(off.connected_sockets().is_none());
    let no_starter = StdNetBind::new().with_connected_sockets(true);
    no_starter.open(0).unwrap();
    assert!(no_starter.connected_sockets().is_none());
    assert_eq!(no_starter.batch_size(), 128);
    let on = StdNetBind::new().with_connected_sockets(true);
    on.set_receive_func_starter(st);
    on.open(0).unwrap();
    assert!(on.connected_sockets().is_some());
    on.close().unwrap();
    assert!(on.connected_sockets().is_none());
}

/// A WireGuard-looking transport message carrying sequence number `i`.
fn transport(i: u32) -> Vec<u8> {
    let mut m = vec![0u8; 100];
    m[0] = 4;
    m[8..12].copy_from_slice(&i.to_le_bytes());
    m
}

#[test]
fn opening_mid_stream_loses_and_misattributes_nothing() {
    const N: u32 = 2000;
    let bind = StdNetBind::new().with_connected_options(opts(50_000));
    let (st, rx) = starter();
    bind.set_receive_func_starter(st.clone());
    let (mut fns, port) = bind.open(0).unwrap();
    for f in fns.drain(..) {
        run_reader(f, 128, st.tx.lock().clone(), st.ended.clone());
    }
    let p = peer(false);
    let stranger = peer(false);
    let to = p.local_addr().unwrap();
    let ep = Endpoint::from(to);
    // The peer socket keeps the default receive buffer (about 200 such datagrams), so the
    // sender waits for the peer to keep up: a loss here must be the bind's, not one a busy CI
    // machine causes by descheduling this thread.
    let peer_got = Arc::new(AtomicUsize::new(0));
    let recv_peer = std::thread::spawn({
        let p = p.try_clone().unwrap();
        let peer_got = peer_got.clone();
        move || {
            let mut seen = vec![false; N as usize];
            let mut b = [0u8; 2048];
            for _ in 0..N {
                let (n, from) = p.recv_from(&mut b).expect("datagram to the peer lost");
                assert_eq!((n, from.port()), (100, port));
                let i = u32::from_le_bytes(b[8..12].try_into().unwrap()) as usize;
                assert!(!seen[i], "duplicate");
                seen[i] = true;
                peer_got.fetch_add(1, Relaxed);
            }
        }
    });
    for chunk in 0..N / 50 {
        let deadline = std::time::Instant::now() + WAIT;
        while peer_got.load(Relaxed) + 50 < (chunk * 50) as usize
            && std::time::Instant::now() < deadline
        {
            std::thread::sleep(Duration::from_micros(200));
        }
        let msgs: Vec<Vec<u8>> = (chunk * 50..chunk * 50 + 50).map(transport).collect();
        let refs: Vec<&[u8]> = msgs.iter().map(|m| m.as_slice()).collect();
        bind.send(&refs, &ep).unwrap();
        for m in &msgs {
            p.send_to(m, lo(false, port)).unwrap();
        }
        stranger
            .send_to(&transport(N + chunk), lo(false, port))
            .unwrap();
        std::thread::sleep(Duration::from_millis(1));
    }
    recv_peer.join().unwrap();
    let mut from_peer = vec![false; N as usize];
    let mut from_stranger = 0;
    while from_peer.iter().any(|s| !s) || from_stranger < N / 50 {
        let (d, e) = rx.recv_timeout(WAIT).expect("datagram lost");
        let i = u32::from_le_bytes(d[8..12].try_into().unwrap());
        if i < N {
            assert_eq!(e.dst, to, "misattributed");
            assert!(!from_peer[i as usize], "duplicate");
            from_peer[i as usize] = true;
        } else {
            assert_eq!(e.dst, stranger.local_addr().unwrap(), "misattributed");
            from_stranger += 1;
        }
    }
    let s = bind.stats();
    assert!(s.connected_dials >= 1 && s.connected_open >= 1, "{s:?}");
    assert!(s.connected_datagrams_received > 0 && s.connected_datagrams_sent > 0);
    assert_eq!(
        *st.batches.lock(),
        vec![reader::READ_BATCH; st.started.load(Relaxed)]
    );
    let started = st.started.load(Relaxed);
    bind.close().unwrap();
    let t = Instant::now();
    // Two shared readers plus every started one end on close.
    while st.ended.load(Relaxed) < started + 2 {
        assert!(t.elapsed() < WAIT, "readers did not end on close");
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn sticky_source_follows_the_pair_and_a_new_mark_redials() {
    let bind = StdNetBind::new().with_connected_options(opts(1));
    let (st, rx) = starter();
    bind.set_receive_func_starter(st.clone());
    let (mut fns, port) = bind.open(0).unwrap();
    for f in fns.drain(..) {
        run_reader(f, 128, st.tx.lock().clone(), st.ended.clone());
    }
    let p = peer(false);
    // Received on the shared socket: the pair opens on the receive side.
    p.send_to(&transport(1), lo(false, port)).unwrap();
    let (_, ep) = rx.recv_timeout(WAIT).unwrap();
    assert_eq!(ep.src.map(|s| s.ip), Some(lo(false, 0).ip()));
    let set = bind.connected_sockets().unwrap();
    let t = Instant::now();
    while set.is_empty() {
        assert!(t.elapsed() < WAIT);
        std::thread::sleep(Duration::from_millis(2));
    }
    // The reply with that sticky source goes out of the pair socket.
    bind.send(&[&transport(2)], &ep).unwrap();
    assert_eq!(set.stats().datagrams_sent, 1);
    assert_eq!(recv(&p).1.port(), port);
    if !unsafe_free_is_root() {
        println!("skipped the fwmark half: SO_MARK needs CAP_NET_ADMIN");
        return;
    }
    bind.set_mark(0x5a).unwrap();
    assert!(set.is_empty(), "a new mark closes the pair sockets");
    bind.send(&[&transport(3)], &ep).unwrap();
    assert_eq!(set.len(), 1);
    let pair = first_pair(&set);
    let mark = pair.fam.sock.read().as_ref().unwrap().mark().unwrap();
    assert_eq!(mark, 0x5a);
    bind.close().unwrap();
}
