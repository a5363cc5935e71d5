//! The darwin bind's glue against real sockets on 127.0.0.1 and ::1, through `vpn-sys`'s
//! `PosixKernel` (single-datagram calls; the batch calls are unsupported here, as off Apple
//! targets, so batched I/O falls back exactly as it does when the darwin self-test fails).
//! What this cannot show is in `docs/darwin-bind.md`.

use std::net::{SocketAddr, UdpSocket};
use std::sync::mpsc;
use std::thread;
use std::time::Duration;

use super::StdNetBind;
use crate::{is_err_closed, Bind, Endpoint, ReceiveFunc};

/// Upper bound for what a test waits for (a failure bound, not a measurement).
const WAIT: Duration = Duration::from_secs(5);

fn peer(v6: bool) -> UdpSocket {
    let s = UdpSocket::bind(if v6 { "[::1]:0" } else { "127.0.0.1:0" }).unwrap();
    s.set_read_timeout(Some(WAIT)).unwrap();
    s
}

fn to_bind(v6: bool, port: u16) -> SocketAddr {
    if v6 {
        SocketAddr::from((std::net::Ipv6Addr::LOCALHOST, port))
    } else {
        SocketAddr::from((std::net::Ipv4Addr::LOCALHOST, port))
    }
}

/// One call of `f` with `batch` buffers of `len` bytes: the datagrams it returned (size > 0)
/// with their endpoints, and the entry count. Fails the test after [`WAIT`].
fn read_once(
    f: ReceiveFunc,
    batch: usize,
    len: usize,
) -> (Vec<(Vec<u8>, Endpoint)>, usize, ReceiveFunc) {
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        let mut f = f;
        let mut storage = vec![vec![0u8; len]; batch];
        let mut sizes = vec![0usize; batch];
        let mut eps = vec![Endpoint::default(); batch];
        let mut bufs: Vec<&mut [u8]> = storage.iter_mut().map(|b| &mut b[..]).collect();
        let r = f(&mut bufs, &mut sizes, &mut eps).map(|n| {
            let got: Vec<_> = (0..n)
                .filter(|&i| sizes[i] > 0)
                .map(|i| (bufs[i][..sizes[i]].to_vec(), eps[i]))
                .collect();
            (got, n)
        });
        let _ = tx.send((r, f));
    });
    let (r, f) = rx
        .recv_timeout(WAIT)
        .expect("receive function did not return");
    let (got, n) = r.unwrap();
    (got, n, f)
}

#[test]
fn moves_datagrams_one_per_call_on_both_families() {
    let bind = StdNetBind::new();
    assert_eq!(bind.batch_size(), 1);
    let (fns, port) = bind.open(0).unwrap();
    assert_eq!(fns.len(), 2);
    assert_eq!(bind.batched(), [Some(false), Some(false)]);
    for (f, v6) in fns.into_iter().zip([false, true]) {
        let p = peer(v6);
        p.send_to(b"one", to_bind(v6, port)).unwrap();
        p.send_to(b"two", to_bind(v6, port)).unwrap();
        let (got, n, f) = read_once(f, 1, 2048);
        assert_eq!(n, 1);
        assert_eq!(
            got,
            [(b"one".to_vec(), Endpoint::from(p.local_addr().unwrap()))]
        );
        let (got, _, _) = read_once(f, 1, 2048);
        assert_eq!(got[0].0, b"two");
        // And back, a batch of three to one endpoint, in order.
        let ep = Endpoint::from(p.local_addr().unwrap());
        bind.send(&[b"a", b"bb", b"ccc"], &ep).unwrap();
        let mut buf = [0u8; 16];
        for want in [&b"a"[..], b"bb", b"ccc"] {
            let (n, from) = p.recv_from(&mut buf).unwrap();
            assert_eq!((&buf[..n], from.port()), (want, port));
        }
    }
    let s = bind.stats();
    assert_eq!((s.datagrams_received, s.datagrams_sent), (4, 6));
    bind.close().unwrap();
}

#[test]
fn close_wakes_a_parked_reader_and_frees_the_port() {
    let bind = StdNetBind::new();
    let (mut fns, port) = bind.open(0).unwrap();
    let f = fns.remove(0);
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        let mut f = f;
        let mut storage = [0u8; 2048];
        let mut bufs: Vec<&mut [u8]> = vec![&mut storage[..]];
        let _ = tx.send(f(&mut bufs, &mut [0], &mut [Endpoint::default()]));
    });
    // Let the reader reach its park (the test passes either way; this makes it the usual case).
    thread::sleep(Duration::from_millis(50));
    bind.close().unwrap();
    let r = rx.recv_timeout(WAIT).expect("reader not woken by close");
    assert!(is_err_closed(&r.unwrap_err()));
    // The descriptors are closed when `close` returns: the same port opens again at once.
    let (_fns, again) = bind.open(port).unwrap();
    assert_eq!(again, port);
    bind.close().unwrap();
    // Closed: sends and a second close behave.
    let e = bind
        .send(&[b"x"], &Endpoint::from(to_bind(false, port)))
        .unwrap_err();
    assert!(is_err_closed(&e));
    bind.close().unwrap();
}

#[test]
fn batched_io_falls_back_to_one_datagram_per_call_when_the_self_test_fails() {
    let bind = StdNetBind::new().with_batched_io(true);
    assert_eq!(bind.batch_size(), 128);
    let (mut fns, port) = bind.open(0).unwrap();
    // No recvmsg_x here: the unconnected self-test fails and the shared sockets fall back.
    assert_eq!(bind.batched(), [Some(false), Some(false)]);
    let p = peer(false);
    for i in 0..3u8 {
        p.send_to(&[i; 10], to_bind(false, port)).unwrap();
    }
    let mut f = fns.remove(0);
    for i in 0..3u8 {
        let (got, n, next) = read_once(f, 8, 2048);
        assert_eq!(n, 1, "one datagram per call");
        assert_eq!(got[0].0, vec![i; 10]);
        f = next;
    }
    // Sends go one per call too and all arrive.
    let ep = Endpoint::from(p.local_addr().unwrap());
    let data: Vec<Vec<u8>> = (0..5u8).map(|i| vec![i; 20]).collect();
    let bufs: Vec<&[u8]> = data.iter().map(|d| &d[..]).collect();
    bind.send(&bufs, &ep).unwrap();
    let mut buf = [0u8; 64];
    for d in &data {
        let n = p.recv(&mut buf).unwrap();
        assert_eq!(&buf[..n], &d[..]);
    }
    bind.close().unwrap();
}

#[test]
fn a_datagram_that_fills_its_buffer_is_dropped_and_counted() {
    let bind = StdNetBind::new();
    let (mut fns, port) = bind.open(0).unwrap();
    let p = peer(false);
    p.send_to(&[1; 3000], to_bind(false, port)).unwrap();
    p.send_to(&[2; 100], to_bind(false, port)).unwrap();
    let (got, _, _) = read_once(fns.remove(0), 1, 2048);
    assert_eq!(
        got,
        [(vec![2; 100], Endpoint::from(p.local_addr().unwrap()))]
    );
    assert_eq!(bind.stats().truncated_drops, 1);
    bind.close().unwrap();
}

#[test]
fn with_connected_sockets_the_shared_sockets_share_the_port_with_reuseaddr_only() {
    let bind = StdNetBind::new().with_connected_sockets(true);
    assert_eq!(bind.batch_size(), 128);
    let (_fns, _port) = bind.open(0).unwrap();
    let st = bind.core.state.read();
    for fam in st.families() {
        let sock = fam.sock.read();
        let sock = sock.as_ref().unwrap();
        assert!(sock.reuse_address().unwrap());
        assert!(!sock.reuse_port().unwrap());
    }
    // No starter installed: no connected set.
    assert!(st.connected.is_none());
    drop(st);
    bind.close().unwrap();
}

#[test]
fn opening_twice_fails_and_set_mark_is_accepted() {
    let bind = StdNetBind::new();
    bind.open(0).unwrap();
    let again = bind.open(0).map(|(_, port)| port);
    assert_eq!(again.unwrap_err().kind(), std::io::ErrorKind::AlreadyExists);
    bind.set_mark(7).unwrap();
    bind.close().unwrap();
}

/// A receive function called with no buffers waits for a datagram without reading it (the
/// device then reads it with a slab in hand), and closing the bind wakes such a wait.
#[test]
fn a_call_without_buffers_waits_for_a_datagram_without_reading_it_and_close_wakes_it() {
    let bind = StdNetBind::new();
    let (mut fns, port) = bind.open(0).unwrap();
    let f = fns.remove(0);
    let (tx, rx) = mpsc::channel();
    let waiter = thread::spawn(move || {
        let mut f = f;
        let r = f(&mut [], &mut [], &mut []);
        tx.send(r.map_err(|e| e.kind())).unwrap();
        f
    });
    assert!(
        rx.recv_timeout(Duration::from_millis(200)).is_err(),
        "returned with nothing to read"
    );
    let p = peer(false);
    p.send_to(b"waiting", to_bind(false, port)).unwrap();
    assert_eq!(rx.recv_timeout(WAIT).unwrap(), Ok(0));
    let f = waiter.join().unwrap();
    // The datagram is still there for the read that follows.
    let (got, _, mut f) = read_once(f, 1, 2048);
    assert_eq!(got[0].0, b"waiting");
    // Nothing left: a new wait blocks until the bind closes.
    let (tx, rx) = mpsc::channel();
    let waiter = thread::spawn(move || {
        let r = f(&mut [], &mut [], &mut []);
        tx.send(r.is_err_and(|e| is_err_closed(&e))).unwrap();
    });
    assert!(rx.recv_timeout(Duration::from_millis(200)).is_err());
    bind.close().unwrap();
    assert!(rx.recv_timeout(WAIT).unwrap(), "close did not end the wait");
    waiter.join().unwrap();
}
