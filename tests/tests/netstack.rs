//! The userspace network stack as a device's TUN: the `Net` API between two devices on the
//! in-memory network (TCP both ways, UDP, ping, DNS against a responder on the far side,
//! refusals, timeouts, closes), through the fault injector, and under a SYN flood.

use std::io::{self, Read, Write};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, Shutdown, SocketAddr};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};
use vpn_conn::memory::faults::FaultConfig;
use vpn_conn::memory::MemoryNetwork;
use vpn_device::{Device, Logger, Options as DeviceOptions};
use vpn_netstack::{create_net_tun_with, Net, Options, TcpStream};
use vpn_proto::keys::PrivateKey;
use vpn_tests::{checksum, private_key, wait_for, Node};

const PATIENCE: Duration = Duration::from_secs(60);

/// A device whose TUN is the stack, tunnel addresses 100.64.0.`n` and fd00::`n`.
struct NetNode {
    dev: Device,
    net: Net,
    key: PrivateKey,
    v4: Ipv4Addr,
    v6: Ipv6Addr,
    addr: SocketAddr,
}

impl NetNode {
    fn new(mem: &MemoryNetwork, n: u8, dns: &[IpAddr], opts: Options) -> NetNode {
        let v4 = Ipv4Addr::new(100, 64, 0, n);
        let v6 = Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, u16::from(n));
        let (tun, net) = create_net_tun_with(&[v4.into(), v6.into()], dns, 1420, opts).unwrap();
        let bind = Arc::new(mem.bind(IpAddr::from([198, 18, 0, n]), 128));
        let dev = Device::with_options(
            Arc::new(tun),
            bind.clone(),
            Logger::new(format!("net{n}")),
            DeviceOptions::default(),
        );
        let key = private_key();
        dev.ipc_set(&format!("private_key={}\nlisten_port=0\n", key.to_hex()))
            .unwrap();
        dev.up().unwrap();
        let addr = bind.local_addr().unwrap();
        NetNode {
            dev,
            net,
            key,
            v4,
            v6,
            addr,
        }
    }

    fn peer_with(&self, key: &PrivateKey, addr: SocketAddr, v4: Ipv4Addr, v6: Ipv6Addr) {
        self.dev
            .ipc_set(&format!(
                "public_key={}\nendpoint={addr}\nallowed_ip={v4}/32\nallowed_ip={v6}/128\n",
                key.public_key().to_hex()
            ))
            .unwrap();
    }

    fn know(&self, other: &NetNode) {
        self.peer_with(&other.key, other.addr, other.v4, other.v6);
    }
}

/// Two stacks whose devices know each other: .1 asks .2 for names.
fn pair(mem: &MemoryNetwork, opts: Options) -> (NetNode, NetNode) {
    let a = NetNode::new(mem, 1, &[Ipv4Addr::new(100, 64, 0, 2).into()], opts.clone());
    let b = NetNode::new(mem, 2, &[], opts);
    a.know(&b);
    b.know(&a);
    (a, b)
}

/// Byte `i` of a checked stream: a pattern a lost, doubled or reordered segment breaks.
fn pattern(i: u64) -> u8 {
    (i.wrapping_mul(31).wrapping_add(7) & 0xff) as u8
}

fn send_pattern(mut s: &TcpStream, len: u64) -> io::Result<()> {
    let mut buf = vec![0u8; 64 << 10];
    let mut at = 0u64;
    while at < len {
        let n = ((len - at) as usize).min(buf.len());
        for (j, b) in buf[..n].iter_mut().enumerate() {
            *b = pattern(at + j as u64);
        }
        s.write_all(&buf[..n])?;
        at += n as u64;
    }
    Ok(())
}

/// Reads to EOF and checks every byte; returns how many came.
fn check_pattern(mut s: &TcpStream) -> io::Result<u64> {
    let mut buf = vec![0u8; 64 << 10];
    let mut at = 0u64;
    loop {
        let n = s.read(&mut buf)?;
        if n == 0 {
            return Ok(at);
        }
        for (j, &b) in buf[..n].iter().enumerate() {
            assert_eq!(
                b,
                pattern(at + j as u64),
                "byte {} of the stream",
                at + j as u64
            );
        }
        at += n as u64;
    }
}

/// `len` bytes each way at once over a connection `client` opens to `server`.
fn transfer_both_ways(client: &Net, server: &Net, to: IpAddr, len: u64) {
    let listener = server.listen_tcp(SocketAddr::new(to, 0)).unwrap();
    let port = listener.local_addr().unwrap().port();
    let srv = thread::spawn(move || {
        let (s, _) = listener.accept_timeout(Some(PATIENCE)).unwrap();
        let w = {
            let s = s.clone();
            thread::spawn(move || {
                send_pattern(&s, len).unwrap();
                s.shutdown(Shutdown::Write).unwrap();
            })
        };
        let got = check_pattern(&s).unwrap();
        w.join().unwrap();
        got
    });
    let c = client
        .dial_tcp_timeout(SocketAddr::new(to, port), PATIENCE)
        .unwrap();
    c.set_read_timeout(Some(PATIENCE)).unwrap();
    let w = {
        let c = c.clone();
        thread::spawn(move || {
            send_pattern(&c, len).unwrap();
            c.shutdown(Shutdown::Write).unwrap();
        })
    };
    assert_eq!(check_pattern(&c).unwrap(), len, "client received");
    w.join().unwrap();
    assert_eq!(srv.join().unwrap(), len, "server received");
}

#[test]
fn tcp_carries_data_both_ways_over_ipv4_and_ipv6_whoever_dials() {
    let mem = MemoryNetwork::new();
    let (a, b) = pair(&mem, Options::new());
    transfer_both_ways(&a.net, &b.net, b.v4.into(), 8 << 20);
    transfer_both_ways(&b.net, &a.net, a.v6.into(), 8 << 20);
}

#[test]
fn udp_datagrams_go_both_ways_and_connect_filters_the_sender() {
    let mem = MemoryNetwork::new();
    let (a, b) = pair(&mem, Options::new());
    for ip in [IpAddr::from(b.v4), IpAddr::from(b.v6)] {
        let server = b.net.bind_udp(SocketAddr::new(ip, 0)).unwrap();
        let to = SocketAddr::new(ip, server.local_addr().unwrap().port());
        let client = a.net.dial_udp(to).unwrap();
        client
            .set_read_timeout(Some(Duration::from_millis(300)))
            .unwrap();
        server
            .set_read_timeout(Some(Duration::from_millis(300)))
            .unwrap();
        let mut buf = [0u8; 2048];
        // The first datagrams may wait for the handshake; send until one comes through.
        let (n, from) = (0..100)
            .find_map(|i| {
                client.send(format!("hello {i}").as_bytes()).unwrap();
                server.recv_from(&mut buf).ok()
            })
            .expect("a datagram through the tunnel");
        assert!(buf[..n].starts_with(b"hello "));
        server.send_to(b"echo", from).unwrap();
        let n = client.recv(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"echo");
        // A stranger on the same stack is not the connected peer: its datagram is dropped.
        let stranger = b.net.bind_udp(SocketAddr::new(ip, 0)).unwrap();
        stranger.send_to(b"not you", from).unwrap();
        server.send_to(b"you", from).unwrap();
        let n = client.recv(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"you");
    }
}

#[test]
fn ping_gets_the_far_stacks_echo_reply() {
    let mem = MemoryNetwork::new();
    let (a, b) = pair(&mem, Options::new());
    for ip in [IpAddr::from(b.v4), IpAddr::from(b.v6)] {
        let ok = (0..20).any(|_| a.net.ping(ip, Duration::from_millis(500)).is_ok());
        assert!(ok, "ping {ip}");
    }
    let e = a
        .net
        .ping("100.64.0.99".parse().unwrap(), Duration::from_millis(300));
    assert_eq!(e.unwrap_err().kind(), io::ErrorKind::TimedOut);
}

/// A DNS server on `net` port 53: `peer.test` has the far node's addresses over UDP;
/// `big.test` answers UDP truncated and the full answer over TCP; other names do not exist.
fn serve_dns(net: &Net, v4: Ipv4Addr, v6: Ipv6Addr) {
    fn answer(q: &[u8], tcp: bool, v4: Ipv4Addr, v6: Ipv6Addr) -> Option<Vec<u8>> {
        let qend = 12 + q.get(12..)?.iter().position(|&b| b == 0)? + 5;
        let name = q.get(12..qend - 5)?;
        let qtype = u16::from_be_bytes([*q.get(qend - 4)?, *q.get(qend - 3)?]);
        let mut r = q.get(..qend)?.to_vec();
        let (big, known) = (name == b"\x03big\x04test", name == b"\x04peer\x04test");
        let mut flags = 0x8180u16;
        if !big && !known {
            flags |= 3;
        }
        if big && !tcp {
            flags |= 0x0200;
        }
        r[2..4].copy_from_slice(&flags.to_be_bytes());
        let data: Vec<u8> = match qtype {
            1 => v4.octets().to_vec(),
            _ => v6.octets().to_vec(),
        };
        let count = if known || (big && tcp) { 1 } else { 0 };
        r[6..8].copy_from_slice(&(count as u16).to_be_bytes());
        for _ in 0..count {
            r.extend_from_slice(&[0xc0, 12]);
            r.extend_from_slice(&qtype.to_be_bytes());
            r.extend_from_slice(&[0, 1, 0, 0, 0, 60]);
            r.extend_from_slice(&(data.len() as u16).to_be_bytes());
            r.extend_from_slice(&data);
        }
        Some(r)
    }
    let udp = net.bind_udp("0.0.0.0:53".parse().unwrap()).unwrap();
    thread::spawn(move || {
        let mut buf = [0u8; 1500];
        while let Ok((n, from)) = udp.recv_from(&mut buf) {
            if let Some(r) = answer(&buf[..n], false, v4, v6) {
                let _ = udp.send_to(&r, from);
            }
        }
    });
    let tcp = net.listen_tcp("0.0.0.0:53".parse().unwrap()).unwrap();
    thread::spawn(move || {
        while let Ok((mut s, _)) = tcp.accept() {
            let mut len = [0u8; 2];
            if s.read_exact(&mut len).is_ok() {
                let mut q = vec![0; u16::from_be_bytes(len) as usize];
                if s.read_exact(&mut q).is_ok() {
                    if let Some(r) = answer(&q, true, v4, v6) {
                        let mut m = (r.len() as u16).to_be_bytes().to_vec();
                        m.extend_from_slice(&r);
                        let _ = s.write_all(&m);
                    }
                }
            }
        }
    });
}

#[test]
fn names_resolve_through_the_tunnel_over_udp_and_over_tcp_when_truncated() {
    let mem = MemoryNetwork::new();
    let (a, b) = pair(&mem, Options::new());
    serve_dns(&b.net, b.v4, b.v6);
    // Bring the tunnel up first, so the resolver's own timeouts are not spent on a handshake.
    assert!((0..20).any(|_| a.net.ping(b.v4.into(), Duration::from_millis(500)).is_ok()));
    let addrs = a.net.lookup_host("peer.test").unwrap();
    assert_eq!(addrs, vec![IpAddr::from(b.v4), IpAddr::from(b.v6)]);
    let addrs = a.net.lookup_host("big.test").unwrap();
    assert_eq!(addrs, vec![IpAddr::from(b.v4), IpAddr::from(b.v6)]);
    let e = a.net.lookup_host("nowhere.test").unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::NotFound, "{e}");
    assert_eq!(
        a.net.lookup_host("[fd00::2]").unwrap(),
        vec![IpAddr::from(b.v6)]
    );
    // dial by name, both transports.
    let l = b.net.listen_tcp("0.0.0.0:8080".parse().unwrap()).unwrap();
    let t = thread::spawn(move || {
        let (mut s, _) = l.accept().unwrap();
        s.write_all(b"by name").unwrap();
    });
    let mut c = a.net.dial("tcp", "peer.test:8080").unwrap();
    let mut got = String::new();
    c.read_to_string(&mut got).unwrap();
    assert_eq!(got, "by name");
    t.join().unwrap();
    assert!(
        a.net.dial("tcp6", "peer.test:8080").is_err(),
        "nobody listens any more"
    );
    assert!(a.net.dial("sctp", "peer.test:1").is_err());
}

#[test]
fn a_port_nobody_listens_on_refuses_and_silent_peers_time_out() {
    let mem = MemoryNetwork::new();
    let (a, b) = pair(&mem, Options::new());
    assert!((0..20).any(|_| a.net.ping(b.v4.into(), Duration::from_millis(500)).is_ok()));
    let e = a
        .net
        .dial_tcp_timeout(SocketAddr::new(b.v4.into(), 9), PATIENCE)
        .unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::ConnectionRefused, "{e}");
    let started = Instant::now();
    let e = a
        .net
        .dial_tcp_timeout(
            "100.64.0.99:80".parse().unwrap(),
            Duration::from_millis(400),
        )
        .unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::TimedOut, "{e}");
    assert!(started.elapsed() < Duration::from_secs(10));
    // An idle connection's read and a listener's accept time out too.
    let l = b.net.listen_tcp(SocketAddr::new(b.v4.into(), 0)).unwrap();
    let c = a.net.dial_tcp(l.local_addr().unwrap()).unwrap();
    c.set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    assert_eq!(
        (&c).read(&mut [0u8; 8]).unwrap_err().kind(),
        io::ErrorKind::TimedOut
    );
    let (_s, _) = l.accept().unwrap();
    assert_eq!(
        l.accept_timeout(Some(Duration::from_millis(200)))
            .unwrap_err()
            .kind(),
        io::ErrorKind::TimedOut
    );
    // The port of a dropped listener refuses again.
    let port = l.local_addr().unwrap().port();
    drop(l);
    let e = a
        .net
        .dial_tcp(SocketAddr::new(b.v4.into(), port))
        .unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::ConnectionRefused);
}

#[test]
fn a_close_from_either_side_reaches_the_other() {
    let mem = MemoryNetwork::new();
    let (a, b) = pair(&mem, Options::new());
    let l = b.net.listen_tcp(SocketAddr::new(b.v4.into(), 0)).unwrap();
    let to = l.local_addr().unwrap();
    // The dialer closes: the listener side reads what was written, then EOF.
    let mut c = a.net.dial_tcp(to).unwrap();
    let (s, _) = l.accept().unwrap();
    c.write_all(b"last words").unwrap();
    drop(c);
    let mut got = Vec::new();
    (&s).read_to_end(&mut got).unwrap();
    assert_eq!(got, b"last words");
    // Half-close: the side that shut down writing still reads.
    let c = a.net.dial_tcp(to).unwrap();
    let (s2, _) = l.accept().unwrap();
    c.shutdown(Shutdown::Write).unwrap();
    let mut got = Vec::new();
    (&s2).read_to_end(&mut got).unwrap();
    assert!(got.is_empty());
    (&s2).write_all(b"still here").unwrap();
    drop(s2);
    let mut got = Vec::new();
    (&c).read_to_end(&mut got).unwrap();
    assert_eq!(got, b"still here");
    // The stack closes: a blocked read returns an error, not a hang.
    let c = a.net.dial_tcp(to).unwrap();
    let _s3 = l.accept().unwrap();
    let reader = thread::spawn(move || (&c).read(&mut [0u8; 8]));
    thread::sleep(Duration::from_millis(100));
    a.dev.close();
    assert!(reader.join().unwrap().is_err());
    assert!(a.net.dial_tcp(to).is_err());
}

#[test]
fn tcp_data_arrives_intact_through_loss_reordering_and_duplication() {
    let mem = MemoryNetwork::new();
    let (a, b) = pair(&mem, Options::new());
    assert!((0..20).any(|_| a.net.ping(b.v4.into(), Duration::from_millis(500)).is_ok()));
    let seed = std::env::var("VPN_FAULT_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(24);
    // smoltcp's retransmission timeout is at least 1 s (RFC 6298's floor): a loss that fast
    // retransmit does not repair costs a second, so the rates stay modest.
    mem.set_faults(Some(
        FaultConfig::builder(seed)
            .loss(0.01)
            .duplication(0.02)
            .reordering(0.05, 1..=8)
            .build()
            .unwrap(),
    ));
    transfer_both_ways(&a.net, &b.net, b.v4.into(), 1 << 20);
    let stats = mem.fault_stats();
    mem.set_faults(None);
    assert!(
        stats.lost > 0 && stats.duplicated > 0 && stats.reordered > 0,
        "{stats:?} (seed {seed})"
    );
}

/// A TCP SYN from `src`:`sport` to `dst`:`dport`, checksums filled.
fn syn(src: Ipv4Addr, dst: Ipv4Addr, sport: u16, dport: u16) -> Vec<u8> {
    let mut p = vec![0u8; 40];
    p[0] = 0x45;
    p[2..4].copy_from_slice(&40u16.to_be_bytes());
    p[8] = 64;
    p[9] = 6;
    p[12..16].copy_from_slice(&src.octets());
    p[16..20].copy_from_slice(&dst.octets());
    let c = checksum(&p[..20], 0);
    p[10..12].copy_from_slice(&c.to_be_bytes());
    p[20..22].copy_from_slice(&sport.to_be_bytes());
    p[22..24].copy_from_slice(&dport.to_be_bytes());
    p[24..28].copy_from_slice(&rand::random::<u32>().to_be_bytes());
    p[32] = 5 << 4;
    p[33] = 0x02;
    p[34..36].copy_from_slice(&65535u16.to_be_bytes());
    let mut pseudo = Vec::with_capacity(32);
    pseudo.extend_from_slice(&src.octets());
    pseudo.extend_from_slice(&dst.octets());
    pseudo.extend_from_slice(&[0, 6, 0, 20]);
    pseudo.extend_from_slice(&p[20..]);
    let c = checksum(&pseudo, 0);
    p[36..38].copy_from_slice(&c.to_be_bytes());
    p
}

#[test]
fn a_syn_flood_stays_under_the_caps_and_other_connections_keep_moving() {
    let mem = MemoryNetwork::new();
    let opts = Options::new()
        .backlog(64)
        .memory_budget(64 << 20)
        .tcp_buffer(256 << 10);
    let server = NetNode::new(&mem, 1, &[], opts.clone());
    let client = NetNode::new(&mem, 2, &[], opts);
    let flooder = Node::new(&mem, 3, 128, None);
    server.know(&client);
    client.know(&server);
    server.peer_with(&flooder.key, flooder.addr(), flooder.v4, flooder.v6);
    flooder
        .dev
        .ipc_set(&format!(
            "public_key={}\nendpoint={}\nallowed_ip={}/32\n",
            server.key.public_key().to_hex(),
            server.addr,
            server.v4
        ))
        .unwrap();
    let listener = server
        .net
        .listen_tcp("0.0.0.0:80".parse().unwrap())
        .unwrap();
    let to = SocketAddr::new(server.v4.into(), 80);
    // An established connection, accepted and echoing, before the flood starts.
    let early = client.net.dial_tcp(to).unwrap();
    let (echo, _) = listener.accept().unwrap();
    thread::spawn(move || {
        let mut buf = [0u8; 4096];
        while let Ok(n) = (&echo).read(&mut buf) {
            if n == 0 || (&echo).write_all(&buf[..n]).is_err() {
                break;
            }
        }
    });
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flood = {
        let stop = stop.clone();
        let (src, dst) = (flooder.v4, server.v4);
        let tun = flooder.tun.clone();
        thread::spawn(move || {
            let mut sent = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                for _ in 0..8 {
                    tun.inject(syn(src, dst, rand::random::<u16>() | 1024, 80));
                    sent += 1;
                }
                thread::sleep(Duration::from_millis(1));
            }
            sent
        })
    };
    // Drain what the flooder's TUN receives (the SYN-ACKs), so its queue never fills.
    let drain = {
        let stop = stop.clone();
        let tun = flooder.tun.clone();
        thread::spawn(move || {
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                tun.recv(Duration::from_millis(50));
            }
        })
    };
    // At least 3 s of flood, and until the early connection has echoed more than 10 times and
    // a fresh one got in: each echo must come back within PATIENCE, but how many fit in 3 s
    // depends on the machine's load (a dial whose SYN lost its slot retries a second later), so
    // the counts end the loop rather than the clock; the deadline only bounds a failing run.
    let started = Instant::now();
    let deadline = started + Duration::from_secs(30);
    let mut peak = server.net.stats();
    let mut echoed = 0;
    let mut fresh = 0;
    while (started.elapsed() < Duration::from_secs(3) || echoed <= 10 || fresh == 0)
        && Instant::now() < deadline
    {
        let msg = format!("still moving {echoed}");
        (&early).write_all(msg.as_bytes()).unwrap();
        let mut buf = vec![0u8; msg.len()];
        early.set_read_timeout(Some(PATIENCE)).unwrap();
        (&early).read_exact(&mut buf).unwrap();
        assert_eq!(buf, msg.as_bytes());
        echoed += 1;
        // A new connection gets in during the flood, too (its SYN takes the slot of the
        // oldest half-open one; its handshake ends well before that slot comes round again).
        // Dial until one got in, then now and then (a dial can take a SYN retry).
        if fresh == 0 || echoed % 8 == 0 {
            if let Ok(c) = client.net.dial_tcp_timeout(to, Duration::from_secs(3)) {
                if listener
                    .accept_timeout(Some(Duration::from_secs(3)))
                    .is_ok()
                {
                    fresh += 1;
                }
                drop(c);
            }
        }
        thread::sleep(Duration::from_millis(50));
        let s = server.net.stats();
        peak.sockets = peak.sockets.max(s.sockets);
        peak.memory_used = peak.memory_used.max(s.memory_used);
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let sent = flood.join().unwrap();
    drain.join().unwrap();
    assert!(sent > 1000, "the flood sent {sent} SYNs");
    assert!(
        echoed > 10 && fresh > 0,
        "echoed {echoed}, fresh connections {fresh}, {sent} SYNs"
    );
    assert!(peak.memory_used <= peak.memory_budget, "{peak:?}");
    assert!(
        peak.sockets <= 64 + 8,
        "backlog 64, a few real connections: {peak:?}"
    );
    assert!(wait_for(PATIENCE, || server.net.stats().sockets < 72));
}
