//! `StdNetBind` against real sockets on 127.0.0.1 and ::1.

use super::*;
use std::net::UdpSocket;
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use crate::is_err_closed;

const WAIT: Duration = Duration::from_secs(5);

type Got = Vec<(Vec<u8>, Endpoint)>;

/// Runs `f` in a thread until `want` datagrams arrived (with `batch` buffers of `buf_len`
/// bytes per call). Returns the datagrams, the number of calls and `f` back, or fails the test
/// [`WAIT`] (closing `bind` so the thread ends).
fn collect(
    bind: &StdNetBind,
    mut f: ReceiveFunc,
    want: usize,
    buf_len: usize,
    batch: usize,
) -> (Got, usize, ReceiveFunc) {
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        let mut storage = vec![vec![0u8; buf_len]; batch];
        let mut sizes = vec![0usize; batch];
        let mut eps = vec![Endpoint::default(); batch];
        let mut got = Vec::new();
        let mut calls = 0;
        while got.len() < want {
            let mut bufs: Vec<&mut [u8]> = storage.iter_mut().map(|b| &mut b[..]).collect();
            let n = match f(&mut bufs, &mut sizes, &mut eps) {
                Ok(n) => n,
                Err(e) => {
                    let _ = tx.send(Err(e));
                    return;
                }
            };
            calls += 1;
            assert!(n >= 1 && n <= batch);
            for i in 0..n {
                if sizes[i] > 0 {
                    got.push((bufs[i][..sizes[i]].to_vec(), eps[i]));
                }
            }
        }
        let _ = tx.send(Ok((got, calls, f)));
    });
    match rx.recv_timeout(WAIT) {
        Ok(r) => r.expect("receive failed"),
        Err(_) => {
            bind.close().unwrap();
            panic!("timed out waiting for {want} datagrams");
        }
    }
}

fn open(bind: &StdNetBind) -> (ReceiveFunc, ReceiveFunc, u16) {
    let (mut fns, port) = bind.open(0).unwrap();
    assert_eq!(fns.len(), 2, "both families on loopback");
    let v6 = fns.pop().unwrap();
    let v4 = fns.pop().unwrap();
    (v4, v6, port)
}

fn lo(v6: bool, port: u16) -> SocketAddr {
    if v6 {
        SocketAddr::from((std::net::Ipv6Addr::LOCALHOST, port))
    } else {
        SocketAddr::from(([127, 0, 0, 1], port))
    }
}

fn gro_expected() -> bool {
    if vpn_sys::sockopt::kernel_at_least(5, 12) {
        true
    } else {
        println!("kernel older than 5.12: UDP GRO stays off, GRO assertions skipped");
        false
    }
}

#[test]
fn socket_fds_name_the_open_sockets_and_nothing_when_closed() {
    use std::os::fd::AsRawFd;
    let bind = StdNetBind::new();
    assert_eq!(bind.socket_fds(), [None, None]);
    let (_v4, _v6, _port) = open(&bind);
    let fds = bind.socket_fds();
    for v6 in [false, true] {
        let fd = bind.with_socket(v6, |s| s.as_raw_fd());
        assert!(fd.is_some());
        assert_eq!(fds[usize::from(v6)], fd);
    }
    assert_ne!(fds[0], fds[1]);
    bind.close().unwrap();
    assert_eq!(bind.socket_fds(), [None, None]);
}

#[test]
fn open_close_reopen_on_port_zero_and_fixed_port() {
    let bind = StdNetBind::new();
    let (fns, port) = bind.open(0).unwrap();
    assert_eq!(fns.len(), 2);
    assert_ne!(port, 0);
    // Both families hold the port.
    assert!(UdpSocket::bind(("127.0.0.1", port)).is_err());
    assert!(UdpSocket::bind(("::1", port)).is_err());
    assert_eq!(
        bind.open(0).err().map(|e| e.kind()),
        Some(io::ErrorKind::AlreadyExists)
    );
    bind.close().unwrap();
    bind.close().unwrap();
    drop(fns);
    // The same fixed port again, and the port is really released between opens.
    let (fns, again) = bind.open(port).unwrap();
    assert_eq!((fns.len(), again), (2, port));
    bind.close().unwrap();
    // Receive functions outliving the bind keep nothing bound.
    let probe4 = UdpSocket::bind(("127.0.0.1", port)).unwrap();
    let probe6 = UdpSocket::bind(("::1", port)).unwrap();
    drop((probe4, probe6));
    let (_fns, other) = bind.open(0).unwrap();
    assert_ne!(other, 0);
    // Opening a port someone else holds fails.
    let taken = UdpSocket::bind("0.0.0.0:0").unwrap();
    let b2 = StdNetBind::new();
    assert!(b2.open(taken.local_addr().unwrap().port()).is_err());
    bind.close().unwrap();
}

fn round_trip_128(v6: bool, offload: bool) {
    let a = StdNetBind::with_offload(offload);
    let b = StdNetBind::with_offload(offload);
    let (a4, a6, pa) = open(&a);
    let (b4, b6, pb) = open(&b);
    let (fa, fb) = if v6 { (a6, b6) } else { (a4, b4) };

    // Mixed sizes (little coalescing) one way, equal sizes (GSO runs) the other way.
    let mixed: Vec<Vec<u8>> = (0..128u32)
        .map(|i| {
            let len = 60 + (i as usize * 37) % 1300;
            (0..len).map(|j| (i as usize * 7 + j) as u8).collect()
        })
        .collect();
    let refs: Vec<&[u8]> = mixed.iter().map(|d| d.as_slice()).collect();
    a.send(&refs, &Endpoint::from(lo(v6, pb))).unwrap();
    let (got, _, _) = collect(&b, fb, 128, 2048, 128);
    let data: Vec<Vec<u8>> = got.iter().map(|g| g.0.clone()).collect();
    assert_eq!(data, mixed);
    for (_, ep) in &got {
        assert_eq!(ep.dst, lo(v6, pa));
        assert_eq!(ep.src.map(|s| s.ip), Some(lo(v6, 0).ip()));
        assert_ne!(ep.src.map(|s| s.ifindex), Some(0));
    }

    // Reply to the received endpoint.
    let equal: Vec<Vec<u8>> = (0..128u32).map(|i| vec![i as u8; 1000]).collect();
    let refs: Vec<&[u8]> = equal.iter().map(|d| d.as_slice()).collect();
    let reply_to = got[127].1;
    b.send(&refs, &reply_to).unwrap();
    let (got, _, _) = collect(&a, fa, 128, 2048, 128);
    let data: Vec<Vec<u8>> = got.iter().map(|g| g.0.clone()).collect();
    assert_eq!(data, equal);
    assert!(got.iter().all(|(_, ep)| ep.dst == lo(v6, pb)));

    let (sa, sb) = (a.stats(), b.stats());
    assert_eq!((sa.datagrams_sent, sb.datagrams_received), (128, 128));
    assert_eq!((sb.datagrams_sent, sa.datagrams_received), (128, 128));
    assert_eq!(sa.truncated_drops + sb.truncated_drops, 0);
    if !offload {
        assert_eq!(
            sa.gso_messages + sb.gso_messages + sa.gro_super_datagrams + sb.gro_super_datagrams,
            0
        );
        assert!(
            sb.recv_calls < 128,
            "batched reads: {} calls for 128 datagrams",
            sb.recv_calls
        );
    }
    a.close().unwrap();
    b.close().unwrap();
}

#[test]
fn batch_of_128_each_way_v4() {
    round_trip_128(false, true);
}

#[test]
fn batch_of_128_each_way_v6() {
    round_trip_128(true, true);
}

#[test]
fn batch_of_128_each_way_without_offload() {
    round_trip_128(false, false);
    round_trip_128(true, false);
}

/// GSO send, GRO receive into `batch` buffers; `buf_len` 1500 reads through the scratch
/// area, 65 535 (the device's buffers) straight into the caller's buffers.
fn gso_to_gro(v6: bool, buf_len: usize, batch: usize) {
    let a = StdNetBind::new();
    let b = StdNetBind::new();
    let (_a4, _a6, _) = open(&a);
    let (b4, b6, pb) = open(&b);
    let fb = if v6 { b6 } else { b4 };
    let gro = gro_expected();
    assert_eq!(b.offloads()[usize::from(v6)].map(|o| o.1), Some(gro));
    // 100 equal datagrams and a shorter tail: two GSO messages (64 + 37).
    let mut data: Vec<Vec<u8>> = (0..100u32)
        .map(|i| (0..1200).map(|j| (i + j) as u8).collect())
        .collect();
    data.push(vec![0xab; 333]);
    let refs: Vec<&[u8]> = data.iter().map(|d| d.as_slice()).collect();
    a.send(&refs, &Endpoint::from(lo(v6, pb))).unwrap();
    assert!(a.stats().gso_messages >= 2, "{:?}", a.stats());
    let (got, _, _) = collect(&b, fb, data.len(), buf_len, batch);
    let got: Vec<Vec<u8>> = got.into_iter().map(|g| g.0).collect();
    assert_eq!(got, data);
    let s = b.stats();
    if gro {
        assert!(s.gro_super_datagrams >= 1, "{s:?}");
        assert!(s.recv_calls < 101 / 2, "{s:?}");
    }
    assert_eq!(s.truncated_drops, 0);
}

#[test]
fn gso_send_and_gro_receive_v4() {
    gso_to_gro(false, 1500, 128);
}

#[test]
fn gso_send_and_gro_receive_v6() {
    gso_to_gro(true, 1500, 128);
}

#[test]
fn gso_send_and_gro_receive_straight_into_device_sized_buffers() {
    gso_to_gro(false, 65_535, 128);
    gso_to_gro(true, 65_535, 128);
    // A batch that is not a whole number of 64-buffer runs: no segment may be lost in the
    // shorter last run (the 64 + 37 segments of the two GSO messages arrive over two calls).
    gso_to_gro(false, 65_535, 100);
}

#[test]
fn gro_reads_scatter_by_the_last_segment_size_and_recover_when_it_changes() {
    // Device-sized buffers: after the first coalesced read, the reader scatters each read in
    // pieces of the segment size it saw last. The same size again lands in place; another
    // size, a tail and a lone datagram longer than a piece are gathered and split.
    let a = StdNetBind::new();
    let b = StdNetBind::new();
    let _fa = open(&a);
    let (mut f, _b6, pb) = open(&b);
    let bursts = [
        (64, 1200, 0),   // plain read; the guess becomes 1200
        (64, 1200, 0),   // in place
        (20, 1200, 500), // in place, shorter tail
        (40, 700, 100),  // gathered; the guess becomes 700
        (30, 700, 0),    // in place
        (64, 64, 0),     // gathered; too small to guess by: plain reads again
        (10, 1400, 0),   // plain read; the guess becomes 1400
        (1, 3000, 0),    // a lone datagram longer than a piece: gathered
        (10, 1400, 0),   // plain read
    ];
    for (i, (n, size, tail)) in bursts.into_iter().enumerate() {
        let mut data: Vec<Vec<u8>> = (0..n)
            .map(|j| (0..size).map(|x| (x + j * 7 + i * 31) as u8).collect())
            .collect();
        if tail > 0 {
            data.push(vec![i as u8; tail]);
        }
        let refs: Vec<&[u8]> = data.iter().map(|d| d.as_slice()).collect();
        a.send(&refs, &Endpoint::from(lo(false, pb))).unwrap();
        let (got, _, back) = collect(&b, f, data.len(), 65_535, 128);
        f = back;
        let got: Vec<Vec<u8>> = got.into_iter().map(|g| g.0).collect();
        assert_eq!(got, data, "burst {i}: {n} × {size} + {tail}");
    }
    let s = b.stats();
    assert_eq!(s.truncated_drops, 0);
    if gro_expected() {
        assert!(s.gro_super_datagrams >= 7, "{s:?}");
        assert!(s.gro_in_place >= 3, "{s:?}");
    }
}

#[test]
fn gro_batch_larger_than_the_callers_buffers_is_delivered_over_several_calls() {
    let a = StdNetBind::new();
    let b = StdNetBind::new();
    let _fa = open(&a);
    let (b4, _b6, pb) = open(&b);
    let data: Vec<Vec<u8>> = (0..10u8).map(|i| vec![i; 500]).collect();
    let refs: Vec<&[u8]> = data.iter().map(|d| d.as_slice()).collect();
    a.send(&refs, &Endpoint::from(lo(false, pb))).unwrap();
    let (got, calls, _) = collect(&b, b4, 10, 600, 3);
    let got: Vec<Vec<u8>> = got.into_iter().map(|g| g.0).collect();
    assert_eq!(got, data);
    assert!(calls >= 4);
    let s = b.stats();
    assert_eq!(s.truncated_drops, 0);
    if gro_expected() {
        assert_eq!((s.gro_super_datagrams, s.recv_calls), (1, 1), "{s:?}");
    }
}

fn oversize_is_dropped(offload: bool) {
    let b = StdNetBind::with_offload(offload);
    let (b4, _b6, pb) = open(&b);
    let plain = UdpSocket::bind("127.0.0.1:0").unwrap();
    plain.send_to(&[1u8; 3000], ("127.0.0.1", pb)).unwrap();
    plain.send_to(&[2u8; 100], ("127.0.0.1", pb)).unwrap();
    let (got, _, b4) = collect(&b, b4, 1, 1500, 4);
    assert_eq!(got[0].0, vec![2u8; 100]);
    assert_eq!(b.stats().truncated_drops, 1);
    // A GSO message whose segments exceed the buffers (one super-datagram with GRO, four
    // datagrams without): dropped and counted, and the reader goes on.
    let a = StdNetBind::with_offload(offload);
    let _fa = open(&a);
    let big: Vec<Vec<u8>> = (0..4u8).map(|i| vec![i; 2000]).collect();
    let refs: Vec<&[u8]> = big.iter().map(|d| d.as_slice()).collect();
    a.send(&refs, &Endpoint::from(lo(false, pb))).unwrap();
    plain.send_to(&[3u8; 10], ("127.0.0.1", pb)).unwrap();
    let (got, _, _) = collect(&b, b4, 1, 1500, 4);
    assert_eq!(got[0].0, vec![3u8; 10]);
    assert_eq!(b.stats().truncated_drops, 5);
    b.close().unwrap();
}

#[test]
fn datagram_larger_than_the_buffer_is_dropped_and_counted() {
    oversize_is_dropped(true);
    oversize_is_dropped(false);
}

#[test]
fn sticky_source_replies_from_the_address_the_peer_used() {
    let b = StdNetBind::new();
    let (b4, _b6, pb) = open(&b);
    let plain = UdpSocket::bind("127.0.0.1:0").unwrap();
    plain.set_read_timeout(Some(WAIT)).unwrap();
    plain.send_to(b"hello", ("127.0.0.2", pb)).unwrap();
    let (got, _, _) = collect(&b, b4, 1, 1500, 8);
    let mut ep = got[0].1;
    assert_eq!(ep.dst, plain.local_addr().unwrap());
    assert_eq!(ep.src_ip(), Some("127.0.0.2".parse().unwrap()));
    // One datagram (sendmsg) and two (the batch path) from each source.
    let check = |ep: &Endpoint, want: SocketAddr| {
        for msgs in [&[&b"one"[..]][..], &[&b"two"[..], &b"three"[..]][..]] {
            b.send(msgs, ep).unwrap();
            for m in msgs {
                let mut buf = [0u8; 64];
                let (n, from) = plain.recv_from(&mut buf).unwrap();
                assert_eq!((&buf[..n], from), (*m, want));
            }
        }
    };
    check(&ep, SocketAddr::from(([127, 0, 0, 2], pb)));
    ep.clear_src();
    check(&ep, SocketAddr::from(([127, 0, 0, 1], pb)));
    // A source that is no longer local is dropped for the send, which still goes out.
    ep.src = Some(crate::StickySource {
        ip: "198.18.0.99".parse().unwrap(),
        ifindex: 0,
    });
    check(&ep, SocketAddr::from(([127, 0, 0, 1], pb)));
    b.close().unwrap();
}

#[test]
fn close_wakes_blocked_readers() {
    for offload in [true, false] {
        let bind = Arc::new(StdNetBind::with_offload(offload));
        let (fns, _) = bind.open(0).unwrap();
        let (tx, rx) = mpsc::channel();
        for mut f in fns {
            let tx = tx.clone();
            thread::spawn(move || {
                let mut storage = vec![vec![0u8; 1500]; 128];
                let mut bufs: Vec<&mut [u8]> = storage.iter_mut().map(|b| &mut b[..]).collect();
                let mut sizes = vec![0; 128];
                let mut eps = vec![Endpoint::default(); 128];
                let r = f(&mut bufs, &mut sizes, &mut eps);
                let _ = tx.send((r.map_err(|e| is_err_closed(&e)), Instant::now()));
                // Later calls keep reporting closed.
                let r2 = f(&mut bufs, &mut sizes, &mut eps);
                let _ = tx.send((r2.map_err(|e| is_err_closed(&e)), Instant::now()));
            });
        }
        thread::sleep(Duration::from_millis(200));
        let closed_at = Instant::now();
        bind.close().unwrap();
        // A reader close did not wake would block for good; the bound only has to be finite
        // (generous for a loaded machine: the println below shows the real figure).
        for _ in 0..4 {
            let (r, _) = rx
                .recv_timeout(Duration::from_secs(10))
                .expect("reader not woken within 10 s");
            assert_eq!(r, Err(true));
        }
        assert!(is_err_closed(
            &bind
                .send(&[b"x"], &Endpoint::from(lo(false, 9)))
                .unwrap_err()
        ));
        println!(
            "offload {offload}: readers woke {:?} after close",
            closed_at.elapsed()
        );
    }
}

/// The effective user id from /proc (no unsafe `geteuid` in this crate).
fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status").is_ok_and(|s| {
        s.lines()
            .find_map(|l| l.strip_prefix("Uid:"))
            .and_then(|ids| ids.split_whitespace().nth(1).map(|e| e == "0"))
            .unwrap_or(false)
    })
}

/// `voluntary_ctxt_switches` of thread `tid` of this process.
fn wakeups(tid: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/self/task/{tid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("voluntary_ctxt_switches:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap()
}

/// Waits until thread `tid` sleeps and its switch count has held for 100 ms: it is blocked
/// in its read, not on its way there.
fn blocked(tid: &str) {
    let deadline = Instant::now() + WAIT;
    let mut last = wakeups(tid);
    loop {
        thread::sleep(Duration::from_millis(100));
        let stat = std::fs::read_to_string(format!("/proc/self/task/{tid}/stat")).unwrap();
        let state = stat.rsplit(')').next().unwrap().split_whitespace().next();
        let now = wakeups(tid);
        if state == Some("S") && now == last {
            return;
        }
        assert!(Instant::now() < deadline, "reader {tid} never blocked");
        last = now;
    }
}

#[test]
fn idle_readers_are_not_woken() {
    let bind = StdNetBind::new();
    let (fns, _) = bind.open(0).unwrap();
    let (tx, rx) = mpsc::channel();
    let mut handles = Vec::new();
    for mut f in fns {
        let tx = tx.clone();
        handles.push(thread::spawn(move || {
            let me = std::fs::read_link("/proc/thread-self").unwrap();
            let tid = me.file_name().unwrap().to_string_lossy().into_owned();
            tx.send(tid).unwrap();
            let mut storage = vec![vec![0u8; 1500]; 128];
            let mut bufs: Vec<&mut [u8]> = storage.iter_mut().map(|b| &mut b[..]).collect();
            let mut sizes = vec![0; 128];
            let mut eps = vec![Endpoint::default(); 128];
            let r = f(&mut bufs, &mut sizes, &mut eps);
            assert!(r.is_err_and(|e| is_err_closed(&e)));
        }));
    }
    let tids: Vec<String> = (0..2).map(|_| rx.recv_timeout(WAIT).unwrap()).collect();
    for t in &tids {
        blocked(t);
    }
    let before: Vec<u64> = tids.iter().map(|t| wakeups(t)).collect();
    thread::sleep(Duration::from_secs(1));
    let after: Vec<u64> = tids.iter().map(|t| wakeups(t)).collect();
    bind.close().unwrap();
    for h in handles {
        h.join().unwrap();
    }
    for (b, a) in before.iter().zip(&after) {
        println!("idle reader woke {} times in 1 s", a - b);
        assert_eq!(a, b, "a blocked reader must not wake while idle");
    }
}

#[test]
fn set_mark_applies_now_and_on_every_open() {
    if !is_root() {
        println!("skipped: not root, and SO_MARK needs CAP_NET_ADMIN");
        return;
    }
    let bind = StdNetBind::new();
    let _fns = bind.open(0).unwrap();
    bind.set_mark(0x1234).unwrap();
    let mark = |b: &StdNetBind, v6: bool| {
        b.with_socket(v6, |s| {
            vpn_sys::sockopt::get_int(s.as_fd(), libc::SOL_SOCKET, vpn_sys::sockopt::SO_MARK)
                .unwrap()
        })
    };
    assert_eq!(
        (mark(&bind, false), mark(&bind, true)),
        (Some(0x1234), Some(0x1234))
    );
    bind.close().unwrap();
    let _fns = bind.open(0).unwrap();
    assert_eq!(
        (mark(&bind, false), mark(&bind, true)),
        (Some(0x1234), Some(0x1234))
    );
    bind.set_mark(0).unwrap();
    assert_eq!(mark(&bind, false), Some(0));
    bind.close().unwrap();
    // Set while closed: applied by the next open.
    bind.set_mark(77).unwrap();
    let _fns = bind.open(0).unwrap();
    assert_eq!(
        (mark(&bind, false), mark(&bind, true)),
        (Some(77), Some(77))
    );
    bind.close().unwrap();
}

#[test]
fn a_call_without_buffers_waits_for_data_and_close_wakes_it() {
    for offload in [true, false] {
        let bind = Arc::new(StdNetBind::with_offload(offload));
        let (fns, port) = bind.open(0).unwrap();
        let (tx, rx) = mpsc::channel();
        for mut f in fns {
            let tx = tx.clone();
            thread::spawn(move || {
                // Waits for data, reads nothing; then waits again until close.
                let first = f(&mut [], &mut [], &mut []).map_err(|e| is_err_closed(&e));
                let _ = tx.send(first);
                let mut storage = vec![vec![0u8; 2048]; 128];
                let mut bufs: Vec<&mut [u8]> = storage.iter_mut().map(|b| &mut b[..]).collect();
                let (mut sizes, mut eps) = (vec![0; 128], vec![Endpoint::default(); 128]);
                if first == Ok(0) {
                    let n = f(&mut bufs, &mut sizes, &mut eps).unwrap();
                    let _ = tx.send(Ok(sizes[..n].iter().filter(|&&s| s == 3).count()));
                    let again = f(&mut [], &mut [], &mut []).map_err(|e| is_err_closed(&e));
                    let _ = tx.send(again);
                }
            });
        }
        // Nothing arrives: no reader returns from its wait.
        assert!(rx.recv_timeout(Duration::from_millis(200)).is_err());
        let sock = std::net::UdpSocket::bind(("127.0.0.1", 0)).unwrap();
        sock.send_to(b"abc", ("127.0.0.1", port)).unwrap();
        let woke = rx
            .recv_timeout(Duration::from_secs(10))
            .expect("the wait never ended");
        assert_eq!(woke, Ok(0), "a wait reads nothing");
        let read = rx.recv_timeout(Duration::from_secs(10)).expect("no read");
        assert_eq!(
            read,
            Ok(1),
            "the datagram waited for is still there to read"
        );
        bind.close().unwrap();
        // The v4 reader's second wait and the v6 reader's first end with closed.
        for _ in 0..2 {
            let r = rx
                .recv_timeout(Duration::from_secs(10))
                .expect("close did not wake a wait");
            assert_eq!(r, Err(true));
        }
    }
}
