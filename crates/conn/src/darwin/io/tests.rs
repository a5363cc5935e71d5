//! The darwin rules against `vpn_darwinbatch::sim::SimKernel` (a model of the documented darwin
//! behaviour: partial and zero accepts, EAGAIN on an empty queue, injected EINTR, sticky
//! MSG_TRUNC, reported sources).

use super::*;
use crate::err_closed;
use socket2::{Domain, Protocol, Type};
use vpn_darwinbatch::sim::{Fault, SimKernel};

const A: &str = "198.18.0.1:51820";
const B: &str = "198.18.0.2:51820";
const C: &str = "198.18.0.3:51820";

fn addr(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

/// A kernel with sockets bound to `addrs`, in order.
fn kernel(addrs: &[&str]) -> (SimKernel, Vec<RawFd>) {
    let k = SimKernel::new();
    let fds = addrs.iter().map(|a| k.udp_socket(addr(a))).collect();
    (k, fds)
}

fn datagrams(n: usize, len: usize) -> Vec<Vec<u8>> {
    (0..n).map(|i| vec![i as u8; len]).collect()
}

/// Sends `data` from `fd` to `dst`, batched or not, counting parks.
fn send_counting(
    k: &SimKernel,
    fd: RawFd,
    batched: bool,
    data: &[Vec<u8>],
    dst: Option<SocketAddr>,
) -> (io::Result<()>, Sent, usize) {
    let bufs: Vec<&[u8]> = data.iter().map(|d| &d[..]).collect();
    let mut state = SendState::new();
    let mut parks = 0;
    let mut sent = Sent::default();
    let r = send(
        Fd { k, fd },
        batched.then_some(&mut state),
        &bufs,
        dst,
        &mut || {
            parks += 1;
            Ok(())
        },
        &mut sent,
    );
    (r, sent, parks)
}

/// Everything queued on `fd`, in order, as (payload, source).
fn drain(k: &SimKernel, fd: RawFd) -> Vec<(Vec<u8>, SocketAddr)> {
    let mut out = Vec::new();
    let mut buf = vec![0u8; 65_535];
    while let Ok((n, src)) = k.recv_from(fd, &mut buf) {
        out.push((buf[..n].to_vec(), src.unwrap()));
    }
    out
}

/// Device-style buffers for a read.
struct Bufs {
    storage: Vec<Vec<u8>>,
    sizes: Vec<usize>,
    eps: Vec<Endpoint>,
}

impl Bufs {
    fn new(n: usize, len: usize) -> Self {
        Bufs {
            storage: vec![vec![0; len]; n],
            sizes: vec![0; n],
            eps: vec![Endpoint::default(); n],
        }
    }

    fn read_shared(&mut self, k: &SimKernel, fd: RawFd, rx: &mut Receiver) -> io::Result<Read> {
        let mut bufs: Vec<&mut [u8]> = self.storage.iter_mut().map(|b| &mut b[..]).collect();
        rx.recv(
            Fd { k, fd },
            &mut bufs,
            &mut self.sizes,
            &mut self.eps,
            MAX_DATAGRAM,
            shared_endpoint,
        )
    }

    fn read_pair(&mut self, k: &SimKernel, fd: RawFd, rx: &mut PairRx) -> io::Result<Read> {
        let mut bufs: Vec<&mut [u8]> = self.storage.iter_mut().map(|b| &mut b[..]).collect();
        let local = addr(A).ip();
        rx.read(
            Fd { k, fd },
            &mut bufs,
            &mut self.sizes,
            &mut self.eps,
            addr(B),
            local,
        )
    }

    /// Entry `i` as (payload, endpoint destination).
    fn entry(&self, i: usize) -> (Vec<u8>, SocketAddr) {
        (self.storage[i][..self.sizes[i]].to_vec(), self.eps[i].dst)
    }
}

// ---- sending ---------------------------------------------------------------------------

#[test]
fn batched_send_continues_from_the_accepted_count_after_partial_accepts() {
    let (k, fds) = kernel(&[A, B]);
    k.limit_accepts(fds[0], &[2, 3]);
    let data = datagrams(8, 100);
    let (r, sent, parks) = send_counting(&k, fds[0], true, &data, Some(addr(B)));
    r.unwrap();
    assert_eq!(
        sent,
        Sent {
            datagrams: 8,
            dropped: 0
        }
    );
    assert_eq!(parks, 0);
    // 2, then 3, then the remaining 3: each call starts where the last one stopped.
    assert_eq!(k.stats(fds[0]).sendmsg_x, 3);
    let got: Vec<Vec<u8>> = drain(&k, fds[1]).into_iter().map(|(d, _)| d).collect();
    assert_eq!(got, data);
}

#[test]
fn zero_accepted_drops_the_rest_instead_of_spinning() {
    let (k, fds) = kernel(&[A, B]);
    k.limit_accepts(fds[0], &[3, 0]);
    let data = datagrams(8, 100);
    let (r, sent, _) = send_counting(&k, fds[0], true, &data, Some(addr(B)));
    r.unwrap();
    assert_eq!(
        sent,
        Sent {
            datagrams: 3,
            dropped: 5
        }
    );
    assert_eq!(k.stats(fds[0]).sendmsg_x, 2);
    assert_eq!(drain(&k, fds[1]).len(), 3);
}

#[test]
fn batched_send_stages_the_destination_of_every_datagram() {
    let (k, fds) = kernel(&[A, B]);
    // More than one batch: the destinations must be staged for the second call too.
    let data = datagrams(MAX_BATCH + 5, 20);
    let (r, sent, _) = send_counting(&k, fds[0], true, &data, Some(addr(B)));
    r.unwrap();
    assert_eq!(sent.datagrams, MAX_BATCH + 5);
    assert_eq!(k.stats(fds[0]).sendmsg_x, 2);
    let got = drain(&k, fds[1]);
    assert_eq!(got.len(), MAX_BATCH + 5);
    assert!(got.iter().all(|(_, src)| *src == addr(A)));
}

#[test]
fn batched_send_on_a_connected_socket_stages_no_destination() {
    let (k, fds) = kernel(&[A, B]);
    k.connect(fds[0], addr(B));
    let data = datagrams(4, 50);
    let (r, sent, _) = send_counting(&k, fds[0], true, &data, None);
    r.unwrap();
    assert_eq!(sent.datagrams, 4);
    assert_eq!(drain(&k, fds[1]).len(), 4);
}

#[test]
fn eagain_on_send_parks_and_then_sends_the_rest() {
    for batched in [true, false] {
        let (k, fds) = kernel(&[A, B]);
        k.fail_next(fds[0], &[libc::EAGAIN, libc::EAGAIN]);
        let data = datagrams(3, 10);
        let (r, sent, parks) = send_counting(&k, fds[0], batched, &data, Some(addr(B)));
        r.unwrap();
        assert_eq!(parks, 2, "batched {batched}");
        assert_eq!(sent.datagrams, 3);
        assert_eq!(drain(&k, fds[1]).len(), 3);
    }
}

#[test]
fn eintr_on_send_is_retried_without_parking() {
    for batched in [true, false] {
        let (k, fds) = kernel(&[A, B]);
        k.fail_next(fds[0], &[libc::EINTR]);
        let data = datagrams(3, 10);
        let (r, sent, parks) = send_counting(&k, fds[0], batched, &data, Some(addr(B)));
        r.unwrap();
        assert_eq!((parks, sent.datagrams), (0, 3), "batched {batched}");
    }
}

#[test]
fn a_park_that_fails_because_the_socket_closed_ends_the_send() {
    let (k, fds) = kernel(&[A, B]);
    k.fail_next(fds[0], &[libc::EAGAIN]);
    let data = datagrams(2, 10);
    let bufs: Vec<&[u8]> = data.iter().map(|d| &d[..]).collect();
    let mut sent = Sent::default();
    let mut st = SendState::new();
    let r = send(
        Fd { k: &k, fd: fds[0] },
        Some(&mut st),
        &bufs,
        Some(addr(B)),
        &mut || Err(err_closed()),
        &mut sent,
    );
    assert!(crate::is_err_closed(&r.unwrap_err()));
    assert_eq!(sent.datagrams, 0);
}

#[test]
fn other_send_errors_are_returned() {
    for batched in [true, false] {
        let (k, fds) = kernel(&[A, B]);
        k.fail_next(fds[0], &[libc::ENOBUFS]);
        let data = datagrams(2, 10);
        let (r, sent, _) = send_counting(&k, fds[0], batched, &data, Some(addr(B)));
        assert_eq!(r.unwrap_err().raw_os_error(), Some(libc::ENOBUFS));
        assert_eq!(sent.datagrams, 0);
    }
}

#[test]
fn single_sends_move_one_datagram_per_call() {
    let (k, fds) = kernel(&[A, B]);
    let data = datagrams(5, 10);
    let (r, sent, _) = send_counting(&k, fds[0], false, &data, Some(addr(B)));
    r.unwrap();
    assert_eq!(sent.datagrams, 5);
    let st = k.stats(fds[0]);
    assert_eq!((st.writes, st.sendmsg_x), (5, 0));
}

// ---- receiving -------------------------------------------------------------------------

#[test]
fn batched_receive_reports_each_datagram_with_its_source() {
    let (k, fds) = kernel(&[A, B, C]);
    k.send_to(fds[1], b"from b", &addr(A)).unwrap();
    k.send_to(fds[2], b"from c!", &addr(A)).unwrap();
    k.send_to(fds[1], b"b again", &addr(A)).unwrap();
    let mut rx = Receiver::new(true);
    let mut b = Bufs::new(8, 2048);
    let read = b.read_shared(&k, fds[0], &mut rx).unwrap();
    assert_eq!(
        read,
        Read {
            got: 3,
            datagrams: 3,
            oversize: 0
        }
    );
    assert_eq!(k.stats(fds[0]).recvmsg_x, 1);
    assert_eq!(b.entry(0), (b"from b".to_vec(), addr(B)));
    assert_eq!(b.entry(1), (b"from c!".to_vec(), addr(C)));
    assert_eq!(b.entry(2), (b"b again".to_vec(), addr(B)));
    assert!(b.eps[..3].iter().all(|e| e.src.is_none()));
}

#[test]
fn single_receive_moves_one_datagram_per_call() {
    let (k, fds) = kernel(&[A, B]);
    for i in 0..3u8 {
        k.send_to(fds[1], &[i; 9], &addr(A)).unwrap();
    }
    let mut rx = Receiver::new(false);
    let mut b = Bufs::new(8, 2048);
    for i in 0..3u8 {
        let read = b.read_shared(&k, fds[0], &mut rx).unwrap();
        assert_eq!((read.got, read.datagrams), (1, 1));
        assert_eq!(b.entry(0), (vec![i; 9], addr(B)));
    }
    let st = k.stats(fds[0]);
    assert_eq!((st.reads, st.recvmsg_x), (3, 0));
}

#[test]
fn an_empty_queue_is_reported_as_would_block_for_parking() {
    for batched in [true, false] {
        let (k, fds) = kernel(&[A]);
        let mut rx = Receiver::new(batched);
        let r = Bufs::new(4, 2048).read_shared(&k, fds[0], &mut rx);
        assert!(matches!(after_read(r, false, |_| false), Next::Park));
    }
}

#[test]
fn eintr_on_receive_is_retried() {
    for batched in [true, false] {
        let (k, fds) = kernel(&[A, B]);
        k.send_to(fds[1], b"x", &addr(A)).unwrap();
        k.fail_next(fds[0], &[libc::EINTR]);
        let mut rx = Receiver::new(batched);
        let read = Bufs::new(4, 2048).read_shared(&k, fds[0], &mut rx).unwrap();
        assert_eq!(read.datagrams, 1, "batched {batched}");
    }
}

#[test]
fn a_datagram_that_fills_its_slot_is_dropped_and_the_next_read_is_clean() {
    for batched in [true, false] {
        let (k, fds) = kernel(&[A, B]);
        k.send_to(fds[1], &[7; 3000], &addr(A)).unwrap();
        k.send_to(fds[1], &[8; 100], &addr(A)).unwrap();
        let mut rx = Receiver::new(batched);
        // Buffers of 2048 bytes: the 3000-byte datagram is cut to 2048 and must not pass.
        let mut b = Bufs::new(4, 2048);
        let mut seen = Vec::new();
        let mut oversize = 0;
        while seen.is_empty() {
            let read = b.read_shared(&k, fds[0], &mut rx).unwrap();
            oversize += read.oversize;
            seen.extend(
                (0..read.got)
                    .filter(|&i| b.sizes[i] > 0)
                    .map(|i| b.entry(i)),
            );
        }
        assert_eq!(oversize, 1, "batched {batched}");
        assert_eq!(seen, [(vec![8; 100], addr(B))]);
        // The cut datagram left MSG_TRUNC behind: the batch layer clears it, no EINVAL.
        k.send_to(fds[1], &[9; 10], &addr(A)).unwrap();
        let read = b.read_shared(&k, fds[0], &mut rx).unwrap();
        assert_eq!(b.entry(0), (vec![9; 10], addr(B)));
        assert_eq!(read.datagrams, 1);
        assert_eq!(k.stats(fds[0]).sticky_trunc_einval, 0);
    }
}

#[test]
fn a_datagram_without_a_reported_source_is_skipped_on_the_shared_socket() {
    let (k, fds) = kernel(&[A, B]);
    k.set_fault(Some(Fault::NoSources));
    k.send_to(fds[1], b"anon", &addr(A)).unwrap();
    let mut rx = Receiver::new(true);
    let mut b = Bufs::new(4, 2048);
    let read = b.read_shared(&k, fds[0], &mut rx).unwrap();
    assert_eq!((read.got, read.datagrams), (1, 0));
    assert_eq!(b.sizes[0], 0);
    assert!(matches!(
        after_read(Ok(read), false, |_| false),
        Next::Again
    ));
}

#[test]
fn truncation_is_judged_by_the_slot_offered() {
    assert!(maybe_truncated(2048, 2048));
    assert!(!maybe_truncated(2047, 2048));
    // No UDP datagram overflows a slot this large.
    assert!(!maybe_truncated(65_535, 65_535));
    assert!(maybe_truncated(MAX_UDP_PAYLOAD, MAX_UDP_PAYLOAD));
}

#[test]
fn shared_endpoints_have_no_sticky_source_and_ipv4_mapped_sources_become_ipv4() {
    assert_eq!(shared_endpoint(None), None);
    let ep = shared_endpoint(Some(addr("[::ffff:198.18.0.1]:7"))).unwrap();
    assert_eq!(ep.dst, addr("198.18.0.1:7"));
    assert_eq!(ep.src, None);
}

// ---- the reader loop -------------------------------------------------------------------

#[test]
fn reader_loop_rules() {
    let read = |datagrams| {
        Ok(Read {
            got: 3,
            datagrams,
            oversize: 0,
        })
    };
    let none = |_: &io::Error| false;
    assert!(matches!(after_read(read(2), false, none), Next::Return(3)));
    assert!(matches!(after_read(read(0), false, none), Next::Again));
    // Closed wins over data: the reader must stop using the socket.
    assert!(matches!(after_read(read(2), true, none), Next::Closed));
    let err = |e: i32| Err(io::Error::from_raw_os_error(e));
    assert!(matches!(
        after_read(err(libc::EAGAIN), false, none),
        Next::Park
    ));
    assert!(matches!(
        after_read(err(libc::EINTR), false, none),
        Next::Again
    ));
    let refused = |e: &io::Error| e.raw_os_error() == Some(libc::ECONNREFUSED);
    assert!(matches!(
        after_read(err(libc::ECONNREFUSED), false, refused),
        Next::Again
    ));
    match after_read(err(libc::EBADF), false, refused) {
        Next::Fail(e) => assert_eq!(e.raw_os_error(), Some(libc::EBADF)),
        other => panic!("{other:?}"),
    }
}

// ---- pair sockets ----------------------------------------------------------------------

#[test]
fn pair_reader_grows_its_slot_after_one_oversized_datagram() {
    let (k, fds) = kernel(&[A, B]);
    k.connect(fds[0], addr(B));
    let mut rx = PairRx::new(true, 0);
    assert_eq!(rx.slot(), SLOT_TIERS[0]);
    let mut b = Bufs::new(8, 65_535);
    k.send_to(fds[1], &[1; 3000], &addr(A)).unwrap();
    let read = b.read_pair(&k, fds[0], &mut rx).unwrap();
    assert_eq!((read.datagrams, read.oversize), (0, 1));
    assert_eq!(rx.slot(), SLOT_TIERS[1]);
    // The same size now fits: one loss per socket per step.
    k.send_to(fds[1], &[2; 3000], &addr(A)).unwrap();
    let read = b.read_pair(&k, fds[0], &mut rx).unwrap();
    assert_eq!(read.datagrams, 1);
    assert_eq!(b.entry(0), (vec![2; 3000], addr(B)));
    assert_eq!(rx.slot(), SLOT_TIERS[1]);
}

/// With the device's slab (a 64 KiB head per run of 64, 2 KiB slots after it), large datagrams
/// queued together all arrive whole once the slot outgrew 2 KiB: one per run head.
#[test]
fn pair_reader_puts_large_datagrams_in_run_heads_of_a_slab_of_mtu_slots() {
    let (k, fds) = kernel(&[A, B]);
    k.connect(fds[0], addr(B));
    let mut rx = PairRx::new(true, 3000);
    let mut b = Bufs::new(128, 2048);
    b.storage[0].resize(65_536, 0);
    b.storage[64].resize(65_536, 0);
    for i in 0..3u8 {
        k.send_to(fds[1], &[i; 3000], &addr(A)).unwrap();
    }
    let read = b.read_pair(&k, fds[0], &mut rx).unwrap();
    assert_eq!((read.got, read.datagrams, read.oversize), (65, 2, 0));
    assert_eq!(b.entry(0), (vec![0; 3000], addr(B)));
    assert!(b.sizes[1..64].iter().all(|&s| s == 0));
    assert_eq!(b.entry(64), (vec![1; 3000], addr(B)));
    let read = b.read_pair(&k, fds[0], &mut rx).unwrap();
    assert_eq!((read.got, read.datagrams), (1, 1));
    assert_eq!(b.entry(0), (vec![2; 3000], addr(B)));
    // Small slots again for a socket still at the first tier: one datagram per buffer.
    let mut small = PairRx::new(true, 0);
    k.send_to(fds[1], b"a", &addr(A)).unwrap();
    k.send_to(fds[1], b"b", &addr(A)).unwrap();
    let read = b.read_pair(&k, fds[0], &mut small).unwrap();
    assert_eq!((read.got, read.datagrams), (2, 2));
    assert_eq!(b.entry(1), (b"b".to_vec(), addr(B)));
}

#[test]
fn pair_reader_with_a_size_hint_loses_nothing() {
    let (k, fds) = kernel(&[A, B]);
    k.connect(fds[0], addr(B));
    let mut rx = PairRx::new(false, 9000);
    k.send_to(fds[1], &[3; 9000], &addr(A)).unwrap();
    let mut b = Bufs::new(8, 65_535);
    let read = b.read_pair(&k, fds[0], &mut rx).unwrap();
    assert_eq!((read.datagrams, read.oversize), (1, 0));
}

#[test]
fn pair_reader_keeps_reported_sources_and_falls_back_to_the_remote() {
    let (k, fds) = kernel(&[A, B, C]);
    // Queued before connect: a stranger's datagram keeps its true source.
    k.send_to(fds[2], b"early", &addr(A)).unwrap();
    k.connect(fds[0], addr(B));
    k.send_to(fds[1], b"late", &addr(A)).unwrap();
    let mut rx = PairRx::new(true, 0);
    let mut b = Bufs::new(8, 65_535);
    let read = b.read_pair(&k, fds[0], &mut rx).unwrap();
    assert_eq!(read.datagrams, 2);
    assert_eq!(b.entry(0), (b"early".to_vec(), addr(C)));
    assert_eq!(b.entry(1), (b"late".to_vec(), addr(B)));
    let local = Some(StickySource {
        ip: addr(A).ip(),
        ifindex: 0,
    });
    assert!(b.eps[..2].iter().all(|e| e.src == local));
    // A kernel that names no source: the connected remote.
    k.set_fault(Some(Fault::NoSources));
    k.send_to(fds[1], b"anon", &addr(A)).unwrap();
    b.read_pair(&k, fds[0], &mut rx).unwrap();
    assert_eq!(b.entry(0), (b"anon".to_vec(), addr(B)));
}

#[test]
fn pair_reader_pauses_only_after_a_partial_batch_of_four_or_more() {
    let (k, fds) = kernel(&[A, B]);
    k.connect(fds[0], addr(B));
    let mut rx = PairRx::new(true, 0);
    let mut b = Bufs::new(8, 65_535);
    let mut burst = |n: usize, rx: &mut PairRx| {
        for _ in 0..n {
            k.send_to(fds[1], b"d", &addr(A)).unwrap();
        }
        b.read_pair(&k, fds[0], rx).unwrap();
        rx.take_pause()
    };
    assert!(!burst(3, &mut rx));
    assert!(burst(5, &mut rx));
    assert!(!rx.take_pause(), "taking the pause clears it");
    assert!(!burst(8, &mut rx), "a full batch does not pause");
    // One datagram per call never pauses.
    let mut single = PairRx::new(false, 0);
    assert!(!burst(5, &mut single));
}

// ---- choices ---------------------------------------------------------------------------

#[test]
fn shared_sockets_batch_only_when_asked_and_the_self_test_passed() {
    assert!(!shared_batching(false, || panic!(
        "self-test run without a request"
    )));
    assert!(shared_batching(true, || Ok(())));
    assert!(!shared_batching(true, || Err(io::Error::other(
        "sources not reported"
    ))));
}

#[test]
fn dont_fragment_is_ip_dontfrag_28_and_ipv6_dontfrag_62() {
    assert_eq!(dont_fragment_option(false), (0, 28));
    assert_eq!(dont_fragment_option(true), (41, 62));
    let (k, fds) = kernel(&[A, "[fd00::1]:51820"]);
    set_dont_fragment(&k, fds[0], false).unwrap();
    set_dont_fragment(&k, fds[1], true).unwrap();
    assert_eq!(k.option(fds[0], libc::IPPROTO_IP, 28), Some(1));
    assert_eq!(k.option(fds[1], libc::IPPROTO_IPV6, 62), Some(1));
    assert_eq!(k.option(fds[0], libc::IPPROTO_IPV6, 62), None);
}

#[test]
fn a_refused_dont_fragment_option_is_an_error() {
    let (k, fds) = kernel(&[A]);
    k.refuse_options(fds[0]);
    assert!(set_dont_fragment(&k, fds[0], false).is_err());
}

#[test]
fn darwin_shares_the_port_with_reuseaddr_only_and_linux_with_reuseport_only() {
    assert_eq!(port_sharing(false), PortSharing::ReuseAddr);
    assert_eq!(port_sharing(true), PortSharing::ReusePort);
    let s = Socket::new(Domain::IPV4, Type::DGRAM, Some(Protocol::UDP)).unwrap();
    share_port(&s, port_sharing(false)).unwrap();
    assert!(s.reuse_address().unwrap());
    assert!(!s.reuse_port().unwrap());
    let s = Socket::new(Domain::IPV4, Type::DGRAM, Some(Protocol::UDP)).unwrap();
    share_port(&s, port_sharing(true)).unwrap();
    assert!(!s.reuse_address().unwrap());
    assert!(s.reuse_port().unwrap());
}

#[test]
fn a_control_hook_tells_the_socket_family_from_v6only() {
    let v4 = Socket::new(Domain::IPV4, Type::DGRAM, Some(Protocol::UDP)).unwrap();
    let v6 = Socket::new(Domain::IPV6, Type::DGRAM, Some(Protocol::UDP)).unwrap();
    assert!(!socket_is_v6(&v4));
    assert!(socket_is_v6(&v6));
}
