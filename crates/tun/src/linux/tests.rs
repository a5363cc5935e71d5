//! Real-kernel tests, each in a network namespace of its own (removed on drop, even after a
//! panic). They need root and /dev/net/tun and skip with a printed reason without them.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddrV4, TcpListener, TcpStream, UdpSocket};
use std::process::Command;
use std::sync::atomic::AtomicUsize;
use std::time::{Duration, Instant};

use super::*;
use crate::offload::testpkt::{fix_checksums, stream_byte, transport_mut};
use vpn_packet::ip::{IpPacket, Ipv4Packet, Ipv4PacketMut, PROTOCOL_TCP, PROTOCOL_UDP};
use vpn_packet::udp::{UdpHeader, UdpHeaderMut};

const OFF: usize = 16;

/// The UDP payload of an IPv4 datagram read from the TUN.
fn udp_payload(pkt: &[u8]) -> &[u8] {
    let ip = Ipv4Packet::parse(pkt).unwrap();
    UdpHeader::parse(ip.payload().unwrap()).unwrap().payload()
}

fn skip_reason() -> Option<&'static str> {
    if !vpn_sys::daemon::is_root() {
        Some("not root")
    } else if !std::path::Path::new("/dev/net/tun").exists() {
        Some("no /dev/net/tun")
    } else {
        None
    }
}

macro_rules! require_root {
    () => {
        if let Some(why) = skip_reason() {
            eprintln!("skipped: {why}");
            return;
        }
    };
}

fn ip(args: &[&str]) {
    let st = Command::new("ip").args(args).status().expect("run ip");
    assert!(st.success(), "ip {args:?} failed");
}

/// A network namespace named after the pid and a counter, deleted on drop.
struct Netns(String);

impl Netns {
    fn new() -> Self {
        static N: AtomicUsize = AtomicUsize::new(0);
        let name = format!("vpntun-{}-{}", std::process::id(), N.fetch_add(1, Relaxed));
        ip(&["netns", "add", &name]);
        Self(name)
    }

    /// Runs `f` on a thread inside the namespace (threads it spawns stay there too).
    fn run<T: Send>(&self, f: impl FnOnce() -> T + Send) -> T {
        let path = format!("/run/netns/{}", self.0);
        std::thread::scope(|s| {
            let h = s.spawn(|| {
                sys::enter_netns(&path).expect("setns");
                f()
            });
            match h.join() {
                Ok(v) => v,
                Err(p) => std::panic::resume_unwind(p),
            }
        })
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.0]).status();
    }
}

fn next_event(rx: &Receiver<Event>, want: Event) {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(e) if e == want => return,
            Ok(_) => {}
            Err(e) => panic!("waiting for {want:?}: {e}"),
        }
    }
}

#[test]
fn create_mtu_and_offload_flags() {
    require_root!();
    Netns::new().run(|| {
        let tun = LinuxTun::create("vt0", 1420).expect("create");
        assert_eq!(tun.name().unwrap(), "vt0");
        assert_eq!(tun.mtu().unwrap(), 1420);
        tun.set_mtu(1380).unwrap();
        assert_eq!(tun.mtu().unwrap(), 1380);
        let out = Command::new("ip")
            .args(["link", "show", "vt0"])
            .output()
            .unwrap();
        assert!(String::from_utf8_lossy(&out.stdout).contains("mtu 1380"));
        assert!(
            tun.offload_enabled(),
            "this kernel supports IFF_VNET_HDR with TSO"
        );
        assert_eq!(tun.batch_size(), 128);
        eprintln!("USO: {}", tun.uso_enabled());
        assert!(tun.set_mtu(70_000).is_err());
        drop(tun);
        // Asked for no offloads: a plain TUN, one packet per read(2), that still carries traffic.
        let plain = LinuxTun::create_with_offload("vt3", 1420, false).expect("create plain");
        assert!(!plain.offload_enabled() && !plain.uso_enabled());
        assert_eq!(plain.batch_size(), 128);
        udp_both_ways(&plain, "vt3", 3);
    });
}

#[test]
fn from_fd_with_and_without_virtio_header() {
    require_root!();
    Netns::new().run(|| {
        let plain = sys::open("vt1", false).unwrap();
        let tun = LinuxTun::from_fd(plain, 1300).unwrap();
        assert!(!tun.offload_enabled() && !tun.uso_enabled());
        assert_eq!((tun.batch_size(), tun.mtu().unwrap()), (128, 1300));
        udp_both_ways(&tun, "vt1", 1);

        let vnet = sys::open("vt2", true).unwrap();
        let tun = LinuxTun::from_fd(vnet, 0).unwrap();
        assert!(tun.offload_enabled());
        assert_eq!(tun.batch_size(), 128);
        udp_both_ways(&tun, "vt2", 2);
    });
}

#[test]
fn an_unmonitored_tun_carries_traffic_and_reports_no_events() {
    require_root!();
    Netns::new().run(|| {
        let fd = sys::open("vt4", false).unwrap();
        let tun = LinuxTun::from_fd_unmonitored(fd).unwrap();
        assert!(!tun.offload_enabled());
        let events = tun.events();
        udp_both_ways(&tun, "vt4", 4);
        ip(&["link", "set", "vt4", "down"]);
        ip(&["link", "set", "vt4", "up"]);
        // No listener ever sends: the channel is disconnected, not merely empty.
        assert_eq!(
            events.recv_timeout(std::time::Duration::from_millis(200)),
            Err(crossbeam_channel::RecvTimeoutError::Disconnected)
        );
        tun.close().unwrap();
    });
}

/// Reads a datagram a local socket sends into the TUN, and writes one the socket receives.
fn udp_both_ways(tun: &LinuxTun, name: &str, net: u8) {
    let local = Ipv4Addr::new(100, 64, net, 1);
    ip(&["addr", "add", &format!("{local}/24"), "dev", name]);
    ip(&["link", "set", name, "up"]);
    let sock = UdpSocket::bind(SocketAddrV4::new(local, 0)).unwrap();
    let port = sock.local_addr().unwrap().port();
    sock.send_to(b"to the tun", (Ipv4Addr::new(100, 64, net, 2), 4000))
        .unwrap();

    let mut storage = vec![vec![0u8; OFF + 2000]; tun.batch_size()];
    let mut sizes = vec![0usize; storage.len()];
    let before = tun.stats();
    let pkt = loop {
        let mut bufs: Vec<&mut [u8]> = storage.iter_mut().map(|b| &mut b[..]).collect();
        let n = tun.read(&mut bufs, &mut sizes, OFF).unwrap();
        // Skip IPv6 router solicitations and the like.
        let udp4 = |i: usize| {
            let pkt = &bufs[i][OFF..OFF + sizes[i]];
            matches!(IpPacket::parse(pkt), Ok(IpPacket::V4(p)) if p.protocol() == PROTOCOL_UDP)
        };
        if let Some(i) = (0..n).find(|&i| udp4(i)) {
            break bufs[i][OFF..OFF + sizes[i]].to_vec();
        }
    };
    assert_eq!(&pkt[pkt.len() - 10..], b"to the tun");
    assert!(tun.stats().reads > before.reads);

    // Answer: swap addresses and ports.
    let got = Ipv4Packet::parse(&pkt).unwrap();
    let got_udp = UdpHeader::parse(got.payload().unwrap()).unwrap();
    let mut reply = pkt.clone();
    let mut ip = Ipv4PacketMut::parse(&mut reply).unwrap();
    ip.set_source(got.destination());
    ip.set_destination(got.source());
    let mut udp = UdpHeaderMut::parse(ip.into_payload().unwrap()).unwrap();
    udp.set_source_port(got_udp.destination_port());
    udp.set_destination_port(got_udp.source_port());
    udp.payload_mut().copy_from_slice(b"from a tun");
    fix_checksums(&mut reply);
    let mut buf = vec![0u8; OFF + 2000];
    buf[OFF..OFF + reply.len()].copy_from_slice(&reply);
    let mut bufs: Vec<&mut [u8]> = vec![&mut buf[..]];
    assert_eq!(tun.write(&mut bufs, &[reply.len()], OFF).unwrap(), 1);
    sock.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut got = [0u8; 64];
    let (n, from) = sock.recv_from(&mut got).unwrap();
    assert_eq!(&got[..n], b"from a tun");
    assert_eq!(from.port(), 4000);
    let l4 = Ipv4Packet::parse(&reply).unwrap().payload().unwrap();
    assert_eq!(UdpHeader::parse(l4).unwrap().destination_port(), port);
}

/// A namespace thread's setup for the batching tests: no IPv6 (no router solicitations in the
/// TUN queue), the TUN up at 100.64.`net`.1/24 and a socket sending datagrams into it.
fn quiet_tun_and_sender(name: &str, net: u8, offload: bool) -> (LinuxTun, UdpSocket) {
    let st = Command::new("sysctl")
        .args(["-qw", "net.ipv6.conf.all.disable_ipv6=1"])
        .args(["net.ipv6.conf.default.disable_ipv6=1"])
        .status()
        .unwrap();
    assert!(st.success());
    let tun = LinuxTun::create_with_offload(name, 1420, offload).unwrap();
    let local = Ipv4Addr::new(100, 64, net, 1);
    ip(&["addr", "add", &format!("{local}/24"), "dev", name]);
    ip(&["link", "set", name, "up"]);
    let sock = UdpSocket::bind(SocketAddrV4::new(local, 0)).unwrap();
    sock.connect((Ipv4Addr::new(100, 64, net, 2), 4000))
        .unwrap();
    (tun, sock)
}

/// The UDP payloads of what one `read` returned (IPv4, 20-byte header), checksums checked.
fn read_payloads(tun: &LinuxTun) -> Vec<Vec<u8>> {
    let mut storage = vec![vec![0u8; OFF + 65_536]; tun.batch_size()];
    let mut sizes = vec![0usize; storage.len()];
    let mut bufs: Vec<&mut [u8]> = storage.iter_mut().map(|b| &mut b[..]).collect();
    let n = tun.read(&mut bufs, &mut sizes, OFF).unwrap();
    (0..n)
        .map(|i| {
            let pkt = &bufs[i][OFF..OFF + sizes[i]];
            // Checksums complete (a partial one was finished on the way out of the TUN).
            let mut fixed = pkt.to_vec();
            fix_checksums(&mut fixed);
            assert_eq!(fixed, pkt, "packet {i} of {n} has a wrong checksum");
            udp_payload(pkt).to_vec()
        })
        .collect()
}

#[test]
fn queued_packets_come_in_one_batch_and_an_idle_packet_at_once() {
    require_root!();
    for (net, offload) in [(5u8, true), (6, false)] {
        Netns::new().run(|| {
            let (tun, sock) = quiet_tun_and_sender("vt0", net, offload);
            // Queued while nobody reads: one read hands all of them over, in order.
            for i in 0..40u8 {
                sock.send(&[i; 20]).unwrap();
            }
            let before = tun.stats();
            let got = read_payloads(&tun);
            let want: Vec<Vec<u8>> = (0..40u8).map(|i| vec![i; 20]).collect();
            assert_eq!(got, want, "offload {offload}");
            let st = tun.stats();
            assert_eq!(st.packets_read - before.packets_read, 40);

            // Idle: the reader waits; the packet that wakes it is returned alone, at once.
            std::thread::scope(|s| {
                let reader = s.spawn(|| read_payloads(&tun));
                std::thread::sleep(Duration::from_millis(100));
                sock.send(b"wake").unwrap();
                assert_eq!(reader.join().unwrap(), vec![b"wake".to_vec()]);
            });
        });
    }
}

#[test]
fn a_frame_read_ahead_that_does_not_fit_opens_the_next_batch() {
    require_root!();
    Netns::new().run(|| {
        let (tun, sock) = quiet_tun_and_sender("vt0", 7, true);
        if !tun.uso_enabled() {
            eprintln!(
                "skipped: no USO on this kernel (UDP super-packets are split before the TUN)"
            );
            return;
        }
        // Three UDP super-packets of 50 segments each: two fit a batch of 128, the third waits.
        use std::os::fd::AsFd;
        vpn_sys::sockopt::set_int(
            sock.as_fd(),
            libc::SOL_UDP,
            vpn_sys::sockopt::UDP_SEGMENT,
            100,
        )
        .unwrap();
        for i in 0..3u8 {
            sock.send(&[i; 5000]).unwrap();
        }
        let first = read_payloads(&tun);
        assert_eq!(first.len(), 100);
        assert!(first[..50].iter().all(|p| p == &[0u8; 100]));
        assert!(first[50..].iter().all(|p| p == &[1u8; 100]));
        let second = read_payloads(&tun);
        assert_eq!(second.len(), 50);
        assert!(second.iter().all(|p| p == &[2u8; 100]));
        assert_eq!(tun.stats().gso_splits, 3);
    });
}

/// What one `read` into buffers of `room` bytes (after `OFF`) gave: the UDP payloads, or the
/// error. A read still waiting after 5 s (the packet was lost) closes the TUN and fails.
fn read_into(tun: &LinuxTun, room: usize) -> io::Result<Vec<Vec<u8>>> {
    let (done, waiting) = crossbeam_channel::bounded::<()>(1);
    std::thread::scope(|s| {
        s.spawn(move || {
            if waiting.recv_timeout(Duration::from_secs(5)).is_err() {
                let _ = tun.close();
            }
        });
        let mut storage = vec![vec![0u8; OFF + room]; tun.batch_size()];
        let mut sizes = vec![0usize; storage.len()];
        let mut bufs: Vec<&mut [u8]> = storage.iter_mut().map(|b| &mut b[..]).collect();
        let n = tun.read(&mut bufs, &mut sizes, OFF);
        let _ = done.send(());
        let n = n?;
        Ok((0..n)
            .map(|i| udp_payload(&bufs[i][OFF..OFF + sizes[i]]).to_vec())
            .collect())
    })
}

/// The MTU went up before the reader heard of it: the first packet larger than its buffers is
/// not lost but waits for buffers that take it; one that fails twice is dropped, and reading
/// goes on with the next packet.
#[test]
fn a_packet_larger_than_its_buffer_waits_for_a_larger_one() {
    require_root!();
    for (net, offload) in [(12u8, true), (13, false)] {
        Netns::new().run(|| {
            let (tun, sock) = quiet_tun_and_sender("vt0", net, offload);
            ip(&["link", "set", "vt0", "mtu", "9000"]);
            let small = 1500;
            let big = 9000;

            sock.send(&[7u8; 5000]).unwrap();
            let e = read_into(&tun, small).unwrap_err();
            assert!(crate::is_packet_too_big(&e), "offload {offload}: {e}");
            assert_eq!(read_into(&tun, big).unwrap(), vec![vec![7u8; 5000]]);

            sock.send(&[8u8; 5000]).unwrap();
            sock.send(&[9u8; 20]).unwrap();
            for _ in 0..2 {
                let e = read_into(&tun, small).unwrap_err();
                assert!(crate::is_packet_too_big(&e), "offload {offload}: {e}");
            }
            assert_eq!(read_into(&tun, big).unwrap(), vec![vec![9u8; 20]]);
        });
    }
}

#[test]
fn up_down_and_mtu_events() {
    require_root!();
    Netns::new().run(|| {
        let tun = LinuxTun::create("vt0", 1400).unwrap();
        let rx = tun.events();
        ip(&["link", "set", "vt0", "up"]);
        next_event(&rx, Event::Up);
        ip(&["link", "set", "vt0", "mtu", "1300"]);
        next_event(&rx, Event::MtuUpdate);
        assert_eq!(tun.mtu().unwrap(), 1300);
        ip(&["link", "set", "vt0", "down"]);
        next_event(&rx, Event::Down);
        tun.close().unwrap();
        // Disconnected once drained.
        let deadline = Instant::now() + Duration::from_secs(2);
        while rx.recv_deadline(deadline).is_ok() {}
        assert!(matches!(
            rx.try_recv(),
            Err(crossbeam_channel::TryRecvError::Disconnected)
        ));
    });
}

#[test]
fn close_wakes_a_blocked_read_promptly() {
    require_root!();
    Netns::new().run(|| {
        let tun = LinuxTun::create("vt0", 1400).unwrap();
        let rx = tun.events();
        // A full event channel must not hold close up either.
        for _ in 0..10 {
            ip(&["link", "set", "vt0", "mtu", "1300"]);
            ip(&["link", "set", "vt0", "mtu", "1301"]);
        }
        std::thread::scope(|s| {
            let reader = s.spawn(|| {
                let mut b = vec![0u8; 2000];
                let mut bufs: Vec<&mut [u8]> = vec![&mut b[..]];
                let r = tun.read(&mut bufs, &mut [0], OFF);
                (r.map_err(|e| e.kind()), Instant::now())
            });
            std::thread::sleep(Duration::from_millis(200));
            let closed_at = Instant::now();
            tun.close().unwrap();
            let (r, woke_at) = reader.join().unwrap();
            assert_eq!(r, Err(io::ErrorKind::BrokenPipe));
            let took = woke_at.saturating_duration_since(closed_at);
            // The read polls with no timeout, so only close can have woken it; the bound is
            // generous for a loaded machine.
            assert!(took < Duration::from_secs(3), "read woke after {took:?}");
        });
        let mut b = [0u8; 100];
        assert!(tun.read(&mut [&mut b[..]], &mut [0], OFF).is_err());
        assert!(tun.write(&mut [&mut b[..]], &[20], OFF).is_err());
        drop(rx);
    });
}

/// Rewrites a packet for the relay: `.1 -> .2` becomes `.3 -> .1`, `.1 -> .3` becomes
/// `.2 -> .1`, so a client and a server in the same namespace talk through the TUN both ways.
/// Returns false for packets the relay drops.
fn relay_rewrite(p: &mut [u8]) -> bool {
    if p.len() < 40 {
        return false;
    }
    let Ok(mut ip) = Ipv4PacketMut::parse(p) else {
        return false;
    };
    if ip.header_len() != 20 || (ip.protocol() != PROTOCOL_TCP && ip.protocol() != PROTOCOL_UDP) {
        return false;
    }
    let new_src = match ip.destination().octets()[3] {
        2 => 3,
        3 => 2,
        _ => return false,
    };
    ip.set_source(Ipv4Addr::new(100, 64, 0, new_src));
    ip.set_destination(Ipv4Addr::new(100, 64, 0, 1));
    fix_checksums(p);
    true
}

#[test]
fn tcp_stream_is_split_on_read_and_coalesced_on_write() {
    require_root!();
    Netns::new().run(|| {
        let tun = LinuxTun::create("vt0", 1500).unwrap();
        assert!(tun.offload_enabled());
        ip(&["addr", "add", "100.64.0.1/24", "dev", "vt0"]);
        ip(&["link", "set", "vt0", "up"]);
        let listener = TcpListener::bind("100.64.0.1:5201").unwrap();
        const TOTAL: usize = 8 << 20;

        std::thread::scope(|s| {
            s.spawn(|| {
                let batch = tun.batch_size();
                let mut storage = vec![vec![0u8; OFF + 65_535]; batch];
                let mut sizes = vec![0usize; batch];
                let mut out_sizes = Vec::with_capacity(batch);
                loop {
                    let mut bufs: Vec<&mut [u8]> = storage.iter_mut().map(|b| &mut b[..]).collect();
                    let n = match tun.read(&mut bufs, &mut sizes, OFF) {
                        Ok(n) => n,
                        Err(e) if crate::is_too_many_segments(&e) => continue,
                        Err(_) => return, // closed
                    };
                    // Keep the packets to relay at the front of the batch.
                    out_sizes.clear();
                    let mut k = 0;
                    for i in 0..n {
                        if relay_rewrite(&mut bufs[i][OFF..OFF + sizes[i]]) {
                            bufs.swap(k, i);
                            out_sizes.push(sizes[i]);
                            k += 1;
                        }
                    }
                    if k > 0 && tun.write(&mut bufs[..k], &out_sizes, OFF).is_err() {
                        return;
                    }
                }
            });

            let server = s.spawn(|| {
                let (mut conn, _) = listener.accept().unwrap();
                conn.set_read_timeout(Some(Duration::from_secs(20)))
                    .unwrap();
                let mut got = 0usize;
                let mut buf = vec![0u8; 256 * 1024];
                loop {
                    let n = conn.read(&mut buf).unwrap();
                    if n == 0 {
                        break;
                    }
                    for (k, b) in buf[..n].iter().enumerate() {
                        assert_eq!(*b, stream_byte((got + k) as u32), "byte {}", got + k);
                    }
                    got += n;
                }
                got
            });

            let mut client = TcpStream::connect_timeout(
                &"100.64.0.2:5201".parse().unwrap(),
                Duration::from_secs(5),
            )
            .unwrap();
            let data: Vec<u8> = (0..TOTAL as u32).map(stream_byte).collect();
            let started = Instant::now();
            client.write_all(&data).unwrap();
            client.shutdown(std::net::Shutdown::Write).unwrap();
            assert_eq!(server.join().unwrap(), TOTAL, "every byte arrived in order");
            let secs = started.elapsed().as_secs_f64();
            let st = tun.stats();
            eprintln!(
                "relayed {} MiB in {secs:.2}s (debug build); stats {st:?}",
                TOTAL >> 20
            );
            assert!(st.gso_splits > 0, "reads split super-packets: {st:?}");
            assert!(
                st.packets_read > st.reads,
                "more packets than reads: {st:?}"
            );
            assert!(st.gro_coalesced > 0, "writes coalesced segments: {st:?}");
            assert!(st.packets_written > st.writes, "batched writes: {st:?}");
            tun.close().unwrap();
        });
    });
}

/// A write of more small datagrams of one flow than a UDP GSO packet may carry: they go out in
/// groups the kernel accepts (gathered from separate buffers), every datagram delivered, in
/// order.
#[test]
fn many_small_datagrams_are_coalesced_in_groups_the_kernel_takes() {
    require_root!();
    Netns::new().run(|| {
        let tun = LinuxTun::create("vt0", 1500).unwrap();
        if !tun.uso_enabled() {
            eprintln!("kernel without USO on TUN: UDP is not coalesced, nothing to check");
            return;
        }
        ip(&["addr", "add", "100.64.0.1/24", "dev", "vt0"]);
        ip(&["link", "set", "vt0", "up"]);
        let sock = UdpSocket::bind("100.64.0.1:5300").unwrap();
        sock.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        const N: usize = 200;
        let src = crate::offload::testpkt::ep4([100, 64, 0, 2], 4000);
        let dst = crate::offload::testpkt::ep4([100, 64, 0, 1], 5300);
        let mut storage: Vec<Vec<u8>> = (0..N)
            .map(|i| {
                let mut p = crate::offload::testpkt::udp(src, dst, 2);
                let mut udp = UdpHeaderMut::parse(transport_mut(&mut p)).unwrap();
                udp.payload_mut().copy_from_slice(&(i as u16).to_be_bytes());
                fix_checksums(&mut p);
                let mut b = vec![0u8; OFF];
                b.extend_from_slice(&p);
                b
            })
            .collect();
        let sizes = vec![30usize; N];
        let mut bufs: Vec<&mut [u8]> = storage.iter_mut().map(|b| &mut b[..]).collect();
        assert_eq!(tun.write(&mut bufs, &sizes, OFF).unwrap(), N);
        let groups = N.div_ceil(crate::offload::gro::MAX_UDP_SEGMENTS) as u64;
        assert_eq!(tun.stats().gro_coalesced, N as u64 - groups);
        let mut buf = [0u8; 64];
        for i in 0..N {
            let n = sock.recv(&mut buf).unwrap();
            assert_eq!(&buf[..n], &(i as u16).to_be_bytes(), "datagram {i}");
        }
    });
}
