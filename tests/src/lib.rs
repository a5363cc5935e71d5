//! Shared harness for the scenario tests: packet builders and ready-made device pairs.

#![forbid(unsafe_code)]

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};
use vpn_conn::memory::{MemoryBind, MemoryNetwork};
use vpn_device::clock::Clock;
use vpn_device::{Device, Logger, Options};
use vpn_proto::keys::PrivateKey;
use vpn_tun::memory::{MemoryTun, MemoryTunHandle};

/// Internet checksum of `data` (one's complement of the one's-complement sum).
pub fn checksum(data: &[u8], initial: u32) -> u16 {
    let mut sum = initial;
    let mut chunks = data.chunks_exact(2);
    for c in &mut chunks {
        sum += u32::from(u16::from_be_bytes([c[0], c[1]]));
    }
    if let [b] = chunks.remainder() {
        sum += u32::from(*b) << 8;
    }
    while sum >> 16 != 0 {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// An IPv4 or IPv6 UDP packet with valid checksums.
pub fn udp_packet(src: IpAddr, dst: IpAddr, sport: u16, dport: u16, payload: &[u8]) -> Vec<u8> {
    let ulen = 8 + payload.len();
    let mut udp = Vec::with_capacity(ulen);
    udp.extend_from_slice(&sport.to_be_bytes());
    udp.extend_from_slice(&dport.to_be_bytes());
    udp.extend_from_slice(&(ulen as u16).to_be_bytes());
    udp.extend_from_slice(&[0, 0]);
    udp.extend_from_slice(payload);
    let mut pseudo = 0u32;
    let mut add = |b: &[u8]| {
        for c in b.chunks(2) {
            pseudo += u32::from(u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)]));
        }
    };
    match (src, dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            add(&s.octets());
            add(&d.octets());
            add(&[0, 17]);
            add(&(ulen as u16).to_be_bytes());
            let c = checksum(&udp, pseudo);
            udp[6..8].copy_from_slice(&(if c == 0 { 0xffff } else { c }).to_be_bytes());
            let mut ip = vec![0x45, 0, 0, 0, 0, 0, 0x40, 0, 64, 17, 0, 0];
            ip[2..4].copy_from_slice(&((20 + ulen) as u16).to_be_bytes());
            ip.extend_from_slice(&s.octets());
            ip.extend_from_slice(&d.octets());
            let hc = checksum(&ip, 0);
            ip[10..12].copy_from_slice(&hc.to_be_bytes());
            ip.extend_from_slice(&udp);
            ip
        }
        (IpAddr::V6(s), IpAddr::V6(d)) => {
            add(&s.octets());
            add(&d.octets());
            add(&(ulen as u32).to_be_bytes());
            add(&[0, 0, 0, 17]);
            let c = checksum(&udp, pseudo);
            udp[6..8].copy_from_slice(&(if c == 0 { 0xffff } else { c }).to_be_bytes());
            let mut ip = vec![0x60, 0, 0, 0];
            ip.extend_from_slice(&(ulen as u16).to_be_bytes());
            ip.extend_from_slice(&[17, 64]);
            ip.extend_from_slice(&s.octets());
            ip.extend_from_slice(&d.octets());
            ip.extend_from_slice(&udp);
            ip
        }
        _ => panic!("mixed address families"),
    }
}

/// The UDP payload of a packet built by [`udp_packet`].
pub fn udp_payload(p: &[u8]) -> &[u8] {
    match p[0] >> 4 {
        4 => &p[28..],
        _ => &p[48..],
    }
}

/// A fresh random private key.
pub fn private_key() -> PrivateKey {
    PrivateKey::generate(&mut rand::rngs::OsRng)
}

/// One device on in-memory TUN and bind.
pub struct Node {
    pub dev: Device,
    pub tun: MemoryTunHandle,
    pub bind: Arc<MemoryBind>,
    pub key: PrivateKey,
    pub v4: Ipv4Addr,
    pub v6: Ipv6Addr,
    pub underlay: IpAddr,
}

impl Node {
    /// A node with tunnel addresses 100.64.0.`n` / fd00::`n` and underlay 198.18.0.`n`.
    pub fn new(net: &MemoryNetwork, n: u8, batch: usize, clock: Option<Arc<dyn Clock>>) -> Node {
        Self::with_workers(net, n, batch, clock, 0)
    }

    /// [`Node::new`] with a given number of crypto workers (0: one per core; 1: inline crypto).
    pub fn with_workers(
        net: &MemoryNetwork,
        n: u8,
        batch: usize,
        clock: Option<Arc<dyn Clock>>,
        workers: usize,
    ) -> Node {
        let mut opts = Options::default().with_workers(workers);
        if let Some(c) = clock {
            opts = opts.with_clock(c);
        }
        Self::with_options(net, n, batch, opts)
    }

    /// [`Node::new`] with device options.
    pub fn with_options(net: &MemoryNetwork, n: u8, batch: usize, opts: Options) -> Node {
        let underlay = IpAddr::from([198, 18, 0, n]);
        let bind = Arc::new(net.bind(underlay, batch));
        let (tun, handle) = MemoryTun::new(&format!("mem{n}"), 1420, batch);
        let dev = Device::with_options(
            Arc::new(tun),
            bind.clone(),
            Logger::new(format!("node{n}")),
            opts,
        );
        let key = private_key();
        dev.ipc_set(&format!("private_key={}\nlisten_port=0\n", key.to_hex()))
            .unwrap();
        dev.up().unwrap();
        Node {
            dev,
            tun: handle,
            bind,
            key,
            v4: Ipv4Addr::new(100, 64, 0, n),
            v6: Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, u16::from(n)),
            underlay,
        }
    }

    pub fn addr(&self) -> SocketAddr {
        self.bind.local_addr().expect("bind open")
    }

    pub fn public_hex(&self) -> String {
        self.key.public_key().to_hex()
    }

    /// Adds `other` as a peer that owns its tunnel addresses and sits at its bind address.
    pub fn add_peer(&self, other: &Node, extra: &str) {
        self.dev
            .ipc_set(&format!(
                "public_key={}\nendpoint={}\nallowed_ip={}/32\nallowed_ip={}/128\n{extra}",
                other.public_hex(),
                other.addr(),
                other.v4,
                other.v6
            ))
            .unwrap();
    }

    /// Injects a UDP packet from this node's tunnel address to `to`'s.
    pub fn send_udp(&self, to: &Node, v6: bool, payload: &[u8]) {
        let (s, d) = if v6 {
            (IpAddr::V6(self.v6), IpAddr::V6(to.v6))
        } else {
            (IpAddr::V4(self.v4), IpAddr::V4(to.v4))
        };
        assert!(self.tun.inject(udp_packet(s, d, 1000, 2000, payload)));
    }

    /// Waits for a packet written to this node's TUN.
    pub fn recv(&self, timeout: Duration) -> Option<Vec<u8>> {
        self.tun.recv(timeout)
    }
}

/// Two nodes that know each other, tunnel addresses .1 and .2.
pub fn pair(net: &MemoryNetwork, batch: usize, clock: Option<Arc<dyn Clock>>) -> (Node, Node) {
    pair_with_workers(net, batch, clock, 0)
}

/// [`pair`] with a given number of crypto workers on both nodes.
pub fn pair_with_workers(
    net: &MemoryNetwork,
    batch: usize,
    clock: Option<Arc<dyn Clock>>,
    workers: usize,
) -> (Node, Node) {
    let a = Node::with_workers(net, 1, batch, clock.clone(), workers);
    let b = Node::with_workers(net, 2, batch, clock, workers);
    a.add_peer(&b, "");
    b.add_peer(&a, "");
    (a, b)
}

/// Sends `payload` from `a` to `b` until it arrives (the first packets wait for a handshake).
/// Waits (real time, bounded) until `cond` holds; returns whether it did. Tests wait for what
/// they expect rather than sleeping a fixed time: a loaded CI machine can take longer.
pub fn wait_for(timeout: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = std::time::Instant::now() + timeout;
    while std::time::Instant::now() < deadline {
        if cond() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    cond()
}

pub fn ping(a: &Node, b: &Node, v6: bool, timeout: Duration) -> bool {
    let deadline = Instant::now() + timeout;
    let payload = format!("ping {}->{} {}", a.v4, b.v4, rand::random::<u64>());
    a.send_udp(b, v6, payload.as_bytes());
    while Instant::now() < deadline {
        if let Some(p) = b.recv(Duration::from_millis(200)) {
            if udp_payload(&p) == payload.as_bytes() {
                return true;
            }
        }
    }
    false
}

/// Threads of this process (Linux: /proc/self/task), for leak checks.
pub fn thread_count() -> Option<usize> {
    std::fs::read_dir("/proc/self/task").ok().map(|d| d.count())
}

/// A device on an in-memory TUN and real UDP sockets on loopback (`StdNetBind`), keyed and up
/// on a random port, with tunnel address 100.64.0.`n`.
#[cfg(target_os = "linux")]
pub struct UdpNode {
    pub dev: Device,
    pub tun: MemoryTunHandle,
    pub bind: Arc<vpn_conn::StdNetBind>,
    pub key: PrivateKey,
    pub ip: IpAddr,
}

#[cfg(target_os = "linux")]
impl UdpNode {
    pub fn new(n: u8, bind: vpn_conn::StdNetBind, opts: Options) -> UdpNode {
        let (tun, h) = MemoryTun::new(&format!("udp{n}"), 1420, 128);
        let bind = Arc::new(bind);
        let dev = Device::with_options(
            Arc::new(tun),
            bind.clone(),
            Logger::new(format!("udp{n}")),
            opts,
        );
        let key = private_key();
        dev.ipc_set(&format!("private_key={}\nlisten_port=0\n", key.to_hex()))
            .unwrap();
        dev.up().unwrap();
        UdpNode {
            dev,
            tun: h,
            bind,
            key,
            ip: IpAddr::from([100, 64, 0, n]),
        }
    }

    /// Adds `other` as a peer at 127.0.0.1:<its port> owning its tunnel address.
    pub fn connect(&self, other: &UdpNode) {
        self.dev
            .ipc_set(&format!(
                "public_key={}\nendpoint=127.0.0.1:{}\nallowed_ip={}/32\n",
                other.key.public_key().to_hex(),
                other.dev.listen_port(),
                other.ip
            ))
            .unwrap();
    }
}
