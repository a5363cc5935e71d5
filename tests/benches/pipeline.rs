//! Throughput of two in-process devices, and of boringtun's `Tunn` over the same traffic.
//!
//! `cargo bench -p vpn-tests --bench pipeline` (release). Side A reads packets from a generator
//! TUN (a template packet copied into each buffer: no allocation), side B writes them to a sink
//! TUN that only counts. Between them: the in-memory network or real UDP sockets on 127.0.0.1.
//! Reports packets/s and payload Gbit/s delivered to B's TUN over a fixed interval.
//!
//! Environment: `BENCH_SECONDS` (default 3), `BENCH_FILTER` (substring of the case name).

#![forbid(unsafe_code)]

use std::io;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use vpn_conn::memory::MemoryNetwork;
use vpn_conn::Bind;
use vpn_device::{Device, Logger};
use vpn_tests::{private_key, udp_packet};
use vpn_tun::Event;

/// A TUN that produces copies of `templates` (round-robin) as fast as it is read, and counts
/// what is written to it.
struct BenchTun {
    templates: Vec<Vec<u8>>,
    next: AtomicU64,
    batch: usize,
    generate: AtomicBool,
    written_packets: AtomicU64,
    written_bytes: AtomicU64,
    closed: AtomicBool,
    events: crossbeam_channel::Receiver<Event>,
}

impl BenchTun {
    fn new(templates: Vec<Vec<u8>>, batch: usize) -> Arc<BenchTun> {
        Arc::new(BenchTun {
            templates,
            next: AtomicU64::new(0),
            batch,
            generate: AtomicBool::new(false),
            written_packets: AtomicU64::new(0),
            written_bytes: AtomicU64::new(0),
            closed: AtomicBool::new(false),
            // The sender is dropped at once: no events, and a disconnected channel.
            events: crossbeam_channel::bounded(4).1,
        })
    }
}

impl vpn_tun::Device for BenchTun {
    fn read(
        &self,
        bufs: &mut [&mut [u8]],
        sizes: &mut [usize],
        offset: usize,
    ) -> io::Result<usize> {
        loop {
            if self.closed.load(Ordering::Relaxed) {
                return Err(io::Error::new(io::ErrorKind::BrokenPipe, "closed"));
            }
            if self.generate.load(Ordering::Relaxed) {
                break;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        let n = bufs.len().min(self.batch);
        for i in 0..n {
            let k = self.next.fetch_add(1, Ordering::Relaxed) as usize % self.templates.len();
            let t = &self.templates[k];
            bufs[i][offset..offset + t.len()].copy_from_slice(t);
            sizes[i] = t.len();
        }
        Ok(n)
    }
    fn write(&self, bufs: &mut [&mut [u8]], sizes: &[usize], _offset: usize) -> io::Result<usize> {
        self.written_packets
            .fetch_add(bufs.len() as u64, Ordering::Relaxed);
        self.written_bytes
            .fetch_add(sizes.iter().sum::<usize>() as u64, Ordering::Relaxed);
        Ok(bufs.len())
    }
    fn mtu(&self) -> io::Result<u32> {
        Ok(1420)
    }
    fn name(&self) -> io::Result<String> {
        Ok("bench".into())
    }
    fn events(&self) -> crossbeam_channel::Receiver<Event> {
        self.events.clone()
    }
    fn close(&self) -> io::Result<()> {
        self.closed.store(true, Ordering::Relaxed);
        Ok(())
    }
    fn batch_size(&self) -> usize {
        self.batch
    }
}

struct Case {
    name: String,
    payload: usize,
    peers: u8,
    udp: bool,
}

fn peer_ip(i: u8) -> Ipv4Addr {
    Ipv4Addr::new(100, 64, 1, i + 1)
}

/// Runs one case: returns delivered packets/s and inner bytes/s.
fn run_device_case(c: &Case, seconds: f64) -> (f64, f64) {
    let net = MemoryNetwork::new();
    let make_bind = |ip: IpAddr| -> Arc<dyn Bind> {
        if c.udp {
            #[cfg(target_os = "linux")]
            return Arc::new(vpn_conn::StdNetBind::new());
        }
        Arc::new(net.bind(ip, 128))
    };
    // Side A sends to `peers` receivers, round-robin by destination.
    let templates: Vec<Vec<u8>> = (0..c.peers)
        .map(|i| {
            udp_packet(
                IpAddr::V4(Ipv4Addr::new(100, 64, 0, 1)),
                IpAddr::V4(peer_ip(i)),
                1000,
                2000,
                &vec![0xa5; c.payload],
            )
        })
        .collect();
    let tun_a = BenchTun::new(templates, 128);
    let a = Device::new(
        tun_a.clone(),
        make_bind(IpAddr::from([198, 18, 0, 1])),
        Logger::new("bench-a"),
    );
    let ka = private_key();
    a.ipc_set(&format!("private_key={}\nlisten_port=0\n", ka.to_hex()))
        .unwrap();
    a.up().unwrap();
    let mut sinks = Vec::new();
    let mut receivers = Vec::new();
    for i in 0..c.peers {
        let tun_b = BenchTun::new(vec![vec![0]], 128);
        let b = Device::new(
            tun_b.clone(),
            make_bind(IpAddr::from([198, 18, 1, i + 1])),
            Logger::new("bench-b"),
        );
        let kb = private_key();
        b.ipc_set(&format!(
            "private_key={}\nlisten_port=0\npublic_key={}\nallowed_ip=100.64.0.1/32\nendpoint=127.0.0.1:{}\n",
            kb.to_hex(),
            ka.public_key().to_hex(),
            a.listen_port()
        ))
        .unwrap();
        b.up().unwrap();
        let host = if c.udp {
            "127.0.0.1".to_string()
        } else {
            format!("198.18.1.{}", i + 1)
        };
        a.ipc_set(&format!(
            "public_key={}\nallowed_ip={}/32\nendpoint={host}:{}\n",
            kb.public_key().to_hex(),
            peer_ip(i),
            b.listen_port()
        ))
        .unwrap();
        sinks.push(tun_b);
        receivers.push(b);
    }
    // Warm up (handshakes), then measure.
    tun_a.generate.store(true, Ordering::Relaxed);
    std::thread::sleep(Duration::from_millis(500));
    let count = |s: &[Arc<BenchTun>]| {
        s.iter().fold((0u64, 0u64), |(p, b), t| {
            (
                p + t.written_packets.load(Ordering::Relaxed),
                b + t.written_bytes.load(Ordering::Relaxed),
            )
        })
    };
    let (p0, b0) = count(&sinks);
    let start = Instant::now();
    std::thread::sleep(Duration::from_secs_f64(seconds));
    let (p1, b1) = count(&sinks);
    let dt = start.elapsed().as_secs_f64();
    tun_a.generate.store(false, Ordering::Relaxed);
    a.close();
    for r in receivers {
        r.close();
    }
    ((p1 - p0) as f64 / dt, (b1 - b0) as f64 / dt)
}

/// boringtun's `Tunn` pair driven by one loop: encapsulate on A, decapsulate on B.
#[cfg(target_os = "linux")]
fn run_boringtun_case(payload: usize, seconds: f64) -> (f64, f64) {
    use boringtun::noise::{Tunn, TunnResult};
    let sa = x25519_dalek::StaticSecret::random_from_rng(rand::rngs::OsRng);
    let sb = x25519_dalek::StaticSecret::random_from_rng(rand::rngs::OsRng);
    let (pa, pb) = (
        x25519_dalek::PublicKey::from(&sa),
        x25519_dalek::PublicKey::from(&sb),
    );
    let mut a = Tunn::new(sa, pb, None, None, 1, None);
    let mut b = Tunn::new(sb, pa, None, None, 2, None);
    let mut out = vec![0u8; 65536];
    let mut out2 = vec![0u8; 65536];
    // Handshake.
    let TunnResult::WriteToNetwork(init) = a.format_handshake_initiation(&mut out, false) else {
        panic!()
    };
    let init = init.to_vec();
    let TunnResult::WriteToNetwork(resp) = b.decapsulate(None, &init, &mut out2) else {
        panic!()
    };
    let resp = resp.to_vec();
    if let TunnResult::WriteToNetwork(ka) = a.decapsulate(None, &resp, &mut out) {
        let ka = ka.to_vec();
        let _ = b.decapsulate(None, &ka, &mut out2);
    }
    let pkt = udp_packet(
        IpAddr::V4(Ipv4Addr::new(100, 64, 0, 1)),
        IpAddr::V4(Ipv4Addr::new(100, 64, 1, 1)),
        1,
        2,
        &vec![0xa5; payload],
    );
    let start = Instant::now();
    let mut n = 0u64;
    let mut bytes = 0u64;
    while start.elapsed().as_secs_f64() < seconds {
        for _ in 0..1024 {
            let TunnResult::WriteToNetwork(d) = a.encapsulate(&pkt, &mut out) else {
                panic!()
            };
            if let TunnResult::WriteToTunnelV4(p, _) = b.decapsulate(None, d, &mut out2) {
                n += 1;
                bytes += p.len() as u64;
            }
        }
    }
    let dt = start.elapsed().as_secs_f64();
    (n as f64 / dt, bytes as f64 / dt)
}

fn main() {
    let seconds: f64 = std::env::var("BENCH_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3.0);
    let filter = std::env::var("BENCH_FILTER").unwrap_or_default();
    // `cargo bench` passes `--bench`; `cargo test --benches` passes nothing: run briefly then.
    let quick = !std::env::args().any(|a| a == "--bench");
    let seconds = if quick { 0.2 } else { seconds };
    println!("{:<34} {:>14} {:>12}", "case", "packets/s", "Gbit/s");
    let mut cases = Vec::new();
    for udp in [false, true] {
        for payload in [64usize - 28, 1420 - 28] {
            for peers in [1u8, 8] {
                let bind = if udp { "udp-loopback" } else { "memory" };
                cases.push(Case {
                    name: format!("vpn {bind} {}B {peers}peer", payload + 28),
                    payload,
                    peers,
                    udp,
                });
            }
        }
    }
    for c in &cases {
        if !c.name.contains(&filter) {
            continue;
        }
        let (pps, bps) = run_device_case(c, seconds);
        println!("{:<34} {:>14.0} {:>12.3}", c.name, pps, bps * 8.0 / 1e9);
    }
    #[cfg(target_os = "linux")]
    for payload in [64usize - 28, 1420 - 28] {
        let name = format!("boringtun Tunn loop {}B", payload + 28);
        if !name.contains(&filter) {
            continue;
        }
        let (pps, bps) = run_boringtun_case(payload, seconds);
        println!("{:<34} {:>14.0} {:>12.3}", name, pps, bps * 8.0 / 1e9);
    }
}
