//! The hub benchmark (`make bench-hub`): one device with 100 000 peers and 1 000 000 allowed IPs,
//! and 10 000 of those peers handshaking with it.
//!
//! Reports, for `docs/performance.md`:
//! - the machine's X25519 speed (variable-base and fixed-base, one core and every core), the
//!   bound it puts on handshakes: a responder does three variable-base operations and one
//!   fixed-base one per handshake (the static-static one is precomputed per peer);
//! - configure time: the whole configuration in one UAPI `set` (`wg setconf` sends the same);
//! - memory per idle peer: resident set growth over the configure, divided by the peers;
//! - `wg show` time: one UAPI `get` of the whole device (what `wg show` reads);
//! - one packet's allowed-IPs lookup at that size: a table with the same prefixes, random
//!   addresses from it;
//! - handshakes per second: pre-built initiations from 10 000 distinct sources, at most
//!   `WINDOW` outstanding (the hub stays below "under load"), over the in-memory network and
//!   over real UDP sockets on loopback; then all 10 000 at once over the memory network (what
//!   one wave gets through: responses, cookie replies, drops). Every response is checked by
//!   the client's handshake state afterwards.
//!
//! Environment: `HUB_PEERS` (100000), `HUB_IPS` (allowed IPs per peer, 10), `HUB_CLIENTS`
//! (10000), `HUB_WINDOW` (64).

#![forbid(unsafe_code)]

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, UdpSocket};
use std::sync::Arc;
use std::time::{Duration, Instant};
use vpn_conn::memory::MemoryNetwork;
use vpn_device::allowedips::AllowedIps;
use vpn_device::{Device, Logger, Options};
use vpn_proto::cookie::CookieGenerator;
use vpn_proto::keys::{PresharedKey, PrivateKey, PublicKey};
use vpn_proto::messages::{classify, MessageType, Response};
use vpn_proto::noise::{Handshake, StaticIdentity};
use vpn_proto::tai64n::Tai64N;
use vpn_tun::memory::MemoryTun;

fn env(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// This process's resident set in KiB (Linux).
fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0)
}

/// CPU time run so far by this process's threads other than the calling one (which drives the
/// clients): the hub's share, from the scheduler's per-thread accounting
/// (`/proc/self/task/*/schedstat`, nanoseconds). Threads that exit take their time with them;
/// the hub's threads live through the measurements.
fn hub_cpu() -> Duration {
    let all: u64 = std::fs::read_dir("/proc/self/task")
        .map(|d| {
            d.flatten()
                .map(|t| run_ns(&t.path().join("schedstat")))
                .sum()
        })
        .unwrap_or(0);
    Duration::from_nanos(all).saturating_sub(thread_cpu())
}

/// CPU time the calling thread has run (its `schedstat`): timings that a loaded machine's
/// preemptions do not stretch.
fn thread_cpu() -> Duration {
    Duration::from_nanos(run_ns(std::path::Path::new("/proc/thread-self/schedstat")))
}

/// The first field of a `schedstat` file: nanoseconds run on a CPU.
fn run_ns(path: &std::path::Path) -> u64 {
    std::fs::read_to_string(path)
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

/// "…% of the X25519 bound" for `ok` handshakes in `elapsed`, counted two ways: against the
/// bound of the handshake workers' cores, and per core the hub really got (`cpu` of its threads'
/// time: on a machine it shares with the clients and anything else, the second is the one
/// that says what the device makes of its CPU).
fn against_bound(
    ok: usize,
    elapsed: Duration,
    cpu: Duration,
    bound: f64,
    workers: usize,
) -> String {
    let rate = ok as f64 / elapsed.as_secs_f64();
    let cores = cpu.as_secs_f64() / elapsed.as_secs_f64();
    let per_core = ok as f64 / cpu.as_secs_f64().max(1e-9);
    let per_core_bound = bound / workers as f64;
    format!(
        "{rate:.0}/s ({:.0} % of the X25519 bound {bound:.0}/s); the hub's threads ran {cores:.2} cores: {per_core:.0}/s per core used, {:.0} % of the bound per core ({per_core_bound:.0}/s)",
        100.0 * rate / bound,
        100.0 * per_core / per_core_bound
    )
}

/// The protocol's clock for the clients' cookie state: nanoseconds since the process started.
fn proto_now() -> vpn_proto::time::Instant {
    static START: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    let start = *START.get_or_init(Instant::now);
    vpn_proto::time::Instant::from_nanos(start.elapsed().as_nanos() as u64 + 1)
}

fn secs(d: Duration) -> String {
    format!("{:.3} s", d.as_secs_f64())
}

/// X25519 figures: (variable-base µs, fixed-base µs, variable-base ops/s on `cores` threads).
/// The one-core figures are CPU time of the calling thread, so a busy machine does not make
/// the bound look lower than it is.
fn x25519_speed(cores: usize) -> (f64, f64, f64) {
    const N: u32 = 2000;
    let private = PrivateKey::generate(&mut rand::rngs::OsRng);
    let public = PrivateKey::generate(&mut rand::rngs::OsRng).public_key();
    let t = thread_cpu();
    for _ in 0..N {
        std::hint::black_box(vpn_proto::crypto::dh(&private, std::hint::black_box(&public)).ok());
    }
    let var = (thread_cpu() - t).as_secs_f64() * 1e6 / f64::from(N);
    let t = thread_cpu();
    for _ in 0..N {
        std::hint::black_box(std::hint::black_box(&private).public_key());
    }
    let base = (thread_cpu() - t).as_secs_f64() * 1e6 / f64::from(N);
    let t = Instant::now();
    std::thread::scope(|s| {
        for _ in 0..cores {
            s.spawn(|| {
                for _ in 0..N {
                    std::hint::black_box(vpn_proto::crypto::dh(&private, &public).ok());
                }
            });
        }
    });
    let all = f64::from(N) * cores as f64 / t.elapsed().as_secs_f64();
    (var, base, all)
}

/// The allowed IPs of peer `i`: half IPv4 /32s in 10.0.0.0/8, half IPv6 /128s in fd00:1::/64.
fn allowed_ips(i: usize, per_peer: usize) -> impl Iterator<Item = (IpAddr, u8)> {
    (0..per_peer).map(move |j| {
        let n = (i * per_peer + j) as u32;
        if j % 2 == 0 {
            (IpAddr::V4(Ipv4Addr::from((10 << 24) + n)), 32)
        } else {
            let a = (0xfd00_0001_u128 << 96) | u128::from(n);
            (IpAddr::V6(Ipv6Addr::from(a)), 128)
        }
    })
}

/// The UAPI `set` for the hub: `clients` first (their real keys), then random keys.
fn hub_config(peers: usize, per_peer: usize, clients: &[PublicKey]) -> String {
    use std::fmt::Write as _;
    let mut s = String::with_capacity(peers * (80 + per_peer * 36));
    for i in 0..peers {
        let key = match clients.get(i) {
            Some(k) => k.to_hex(),
            None => PublicKey::from_bytes(rand::random()).to_hex(),
        };
        let _ = writeln!(s, "public_key={key}");
        for (ip, cidr) in allowed_ips(i, per_peer) {
            let _ = writeln!(s, "allowed_ip={ip}/{cidr}");
        }
    }
    s
}

/// A hub device on an in-memory TUN and the given bind, keyed and up; `workers` as
/// [`Options::workers`] (0: one per core, so two handshake workers here; 1: one).
fn hub_device(bind: Arc<dyn vpn_conn::Bind>, key: &PrivateKey, workers: usize) -> Device {
    let (tun, handle) = MemoryTun::new("hub", 1420, 128);
    std::mem::forget(handle); // the TUN stays open for the whole run
    let opts = Options::default().with_workers(workers);
    let dev = Device::with_options(Arc::new(tun), bind, Logger::new("hub"), opts);
    dev.ipc_set(&format!("private_key={}\nlisten_port=0\n", key.to_hex()))
        .unwrap();
    dev.up().unwrap();
    dev
}

/// The initiator side of one handshaking peer.
struct Client {
    id: StaticIdentity,
    hs: Handshake,
    cookie: CookieGenerator,
    src: SocketAddr,
    msg: Vec<u8>,
    response: Option<Vec<u8>>,
}

impl Client {
    fn new(i: usize, key: PrivateKey, hub: &PublicKey) -> Client {
        let id = StaticIdentity::new(key);
        let hs = Handshake::new(&id, *hub, PresharedKey::zero());
        let src = SocketAddr::from(([198, 19, (i >> 8) as u8, i as u8], 51820));
        Client {
            id,
            hs,
            cookie: CookieGenerator::new(hub.as_bytes()),
            src,
            msg: Vec::new(),
            response: None,
        }
    }

    /// A fresh initiation (timestamp `ts`, sender index i + 1) with its MACs.
    fn initiate(&mut self, i: usize, ts: Tai64N) {
        let mut msg = self
            .hs
            .create_initiation(&self.id, i as u32 + 1, ts, &mut rand::thread_rng())
            .expect("initiation");
        self.cookie.add_macs(&mut msg, proto_now());
        self.msg = msg.to_vec();
        self.response = None;
    }
}

/// What came back for the clients' initiations.
#[derive(Default)]
struct Outcome {
    responses: usize,
    cookie_replies: usize,
    elapsed: Duration,
}

/// Sorts a datagram from the hub: a response is stored with its client, a cookie reply is
/// consumed (the client's next initiation carries mac2). Returns the client it answered.
fn take_reply(clients: &mut [Client], data: &[u8], out: &mut Outcome) -> Option<usize> {
    let receiver = match classify(data).ok()? {
        MessageType::Response => Response::parse(data).ok()?.receiver_index(),
        MessageType::CookieReply => vpn_proto::messages::CookieReply::parse(data)
            .ok()?
            .receiver_index(),
        _ => return None,
    };
    let i = (receiver as usize).checked_sub(1)?;
    let c = clients.get_mut(i)?;
    if classify(data).ok()? == MessageType::Response {
        if c.response.is_none() {
            out.responses += 1;
        }
        c.response = Some(data.to_vec());
    } else {
        out.cookie_replies += 1;
        let _ = c.cookie.consume_reply(data, proto_now());
    }
    Some(i)
}

/// Handshakes with at most `window` initiations outstanding; `send(i)` sends client i's
/// initiation, `recv` waits briefly for one datagram from the hub.
fn windowed(
    clients: &mut [Client],
    window: usize,
    mut send: impl FnMut(&Client),
    mut recv: impl FnMut(&mut Vec<u8>) -> bool,
) -> Outcome {
    let mut out = Outcome::default();
    let start = Instant::now();
    let mut next = 0;
    let mut outstanding: HashMap<usize, Instant> = HashMap::new();
    let mut buf = Vec::new();
    let deadline = start + Duration::from_secs(60);
    while out.responses < clients.len() && Instant::now() < deadline {
        while outstanding.len() < window && next < clients.len() {
            send(&clients[next]);
            outstanding.insert(next, Instant::now());
            next += 1;
        }
        if recv(&mut buf) {
            if let Some(i) = take_reply(clients, &buf, &mut out) {
                if clients[i].response.is_some() {
                    outstanding.remove(&i);
                }
            }
        }
        // A lost initiation (or one answered by a cookie) is sent again after a second.
        let now = Instant::now();
        for (&i, at) in outstanding.iter_mut() {
            if now - *at > Duration::from_secs(1) {
                let c = &mut clients[i];
                c.cookie.add_macs(&mut c.msg, proto_now());
                send(c);
                *at = now;
            }
        }
    }
    out.elapsed = start.elapsed();
    out
}

/// The responder's protocol work alone, without a device: microseconds per handshake on one
/// thread (decrypt the initiation, accept it, create the response, derive the keys), over up to
/// 1000 of the clients' initiations, each peer's static-static DH computed beforehand; and,
/// interleaved with it (so both see the same share of a loaded machine), the X25519 operations
/// such a handshake needs (three variable-base, one fixed-base): (work, X25519 part) in µs of
/// the thread's CPU time.
fn responder_work(hub: &StaticIdentity, clients: &[Client]) -> (f64, f64) {
    let sample = &clients[..clients.len().min(1000)];
    let mut states: Vec<Handshake> = sample
        .iter()
        .map(|c| {
            let mut h = Handshake::new(hub, *c.id.public_key(), PresharedKey::zero());
            assert!(h.can_handshake(hub));
            h
        })
        .collect();
    let mut rng = rand::thread_rng();
    let (mut work, mut dh) = (Duration::ZERO, Duration::ZERO);
    let other = *sample[0].id.public_key();
    for (i, (c, h)) in sample.iter().zip(&mut states).enumerate() {
        let t = thread_cpu();
        let cand = vpn_proto::noise::decrypt_initiation(hub, &c.msg).expect("initiation");
        cand.accept(h, proto_now()).expect("accept");
        std::hint::black_box(h.create_response(i as u32 + 1, &mut rng).expect("response"));
        std::hint::black_box(h.derive_keys().expect("keys"));
        work += thread_cpu() - t;
        let t = thread_cpu();
        for _ in 0..3 {
            std::hint::black_box(vpn_proto::crypto::dh(hub.private_key(), &other).ok());
        }
        std::hint::black_box(PrivateKey::generate(&mut rng).public_key());
        dh += thread_cpu() - t;
    }
    let per = |d: Duration| d.as_secs_f64() * 1e6 / sample.len() as f64;
    (per(work), per(dh))
}

/// Every client consumes its response: how many complete handshakes the hub really made.
fn verify(clients: &mut [Client]) -> usize {
    clients
        .iter_mut()
        .filter_map(|c| {
            let r = c.response.take()?;
            (c.hs.consume_response(&c.id, &r).is_ok() && c.hs.derive_keys().is_ok()).then_some(())
        })
        .count()
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return; // `cargo bench -- --list`: nothing to list
    }
    let peers = env("HUB_PEERS", 100_000);
    let per_peer = env("HUB_IPS", 10);
    let n_clients = env("HUB_CLIENTS", 10_000).min(peers);
    let window = env("HUB_WINDOW", 64);
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!("hub benchmark: {peers} peers x {per_peer} allowed IPs, {n_clients} handshaking; {cores} cores, load average {}", load.split_whitespace().take(3).collect::<Vec<_>>().join(" "));

    // X25519.
    let (var, base, all) = x25519_speed(cores);
    let hs_workers = cores.min(2);
    let per_hs = 3.0 * var + base;
    let bound = hs_workers as f64 * 1e6 / per_hs;
    // A peer's first handshake also computes its static-static DH.
    let first_bound = hs_workers as f64 * 1e6 / (per_hs + var);
    println!(
        "x25519: {var:.1} µs variable-base, {base:.1} µs fixed-base (one core); {all:.0} variable-base ops/s on {cores} threads"
    );
    println!(
        "  handshake bound: 3 variable + 1 fixed = {per_hs:.1} µs per responder handshake; {hs_workers} handshake workers -> {bound:.0} handshakes/s"
    );

    // Configure.
    let hub_key = PrivateKey::generate(&mut rand::rngs::OsRng);
    let hub_pub = hub_key.public_key();
    let client_keys: Vec<PrivateKey> = (0..n_clients)
        .map(|_| PrivateKey::generate(&mut rand::rngs::OsRng))
        .collect();
    let client_pubs: Vec<PublicKey> = client_keys.iter().map(PrivateKey::public_key).collect();
    let config = hub_config(peers, per_peer, &client_pubs);
    let net = MemoryNetwork::new();
    let bind = Arc::new(net.bind(IpAddr::from([198, 18, 0, 1]), 128));
    let hub = hub_device(bind.clone(), &hub_key, 0);
    let hub_addr = bind.local_addr().unwrap();
    let rss0 = rss_kib();
    let t = Instant::now();
    hub.ipc_set(&config).expect("hub configuration");
    let configure = t.elapsed();
    let rss1 = rss_kib();
    println!(
        "configure: {} for {peers} peers and {} allowed IPs in one UAPI set ({} MB of text)",
        secs(configure),
        peers * per_peer,
        config.len() / 1_000_000
    );
    drop(config);
    println!(
        "memory: resident set +{} MiB, {:.2} KiB per idle peer (with its {per_peer} allowed IPs)",
        (rss1 - rss0) / 1024,
        (rss1 - rss0) as f64 / peers as f64
    );
    let t = Instant::now();
    let dump = hub.ipc_get().expect("get");
    let show = t.elapsed();
    println!(
        "wg show (UAPI get of the whole device): {} ({} MB)",
        secs(show),
        dump.len() / 1_000_000
    );
    drop(dump);

    // One packet's allowed-IPs lookup in a table of the same size.
    let mut table = AllowedIps::new();
    for i in 0..peers {
        for (ip, cidr) in allowed_ips(i, per_peer) {
            table.insert(ip, cidr, i as u32).unwrap();
        }
    }
    let probes: Vec<IpAddr> = (0..1_000_000)
        .map(|_| {
            let i = rand::random::<usize>() % peers;
            allowed_ips(i, per_peer)
                .nth(rand::random::<usize>() % per_peer)
                .unwrap()
                .0
        })
        .collect();
    let t = Instant::now();
    let mut hits = 0usize;
    for a in &probes {
        hits += usize::from(table.lookup(std::hint::black_box(*a)).is_some());
    }
    let lookup = t.elapsed().as_nanos() as f64 / probes.len() as f64;
    assert_eq!(hits, probes.len());
    println!(
        "allowed-IPs lookup: {lookup:.0} ns per packet (random destinations among {} prefixes)",
        peers * per_peer
    );
    drop((table, probes));

    // Handshakes over the memory network, windowed.
    let mut clients: Vec<Client> = client_keys
        .into_iter()
        .enumerate()
        .map(|(i, k)| Client::new(i, k, &hub_pub))
        .collect();
    let wall = || {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
    };
    let (tap_tx, tap_rx) = crossbeam_channel::unbounded();
    net.set_tap(Some(tap_tx));
    let from_hub = |buf: &mut Vec<u8>| -> bool {
        match tap_rx.recv_timeout(Duration::from_millis(50)) {
            Ok((from, _, data)) if from == hub_addr => {
                *buf = data;
                true
            }
            _ => false,
        }
    };
    let ts = Tai64N::from_unix_duration(wall());
    for (i, c) in clients.iter_mut().enumerate() {
        c.initiate(i, ts);
    }
    let (work, work_dh) = responder_work(&StaticIdentity::new(hub_key.clone()), &clients);
    let work_bound = hs_workers as f64 * 1e6 / work;
    println!(
        "responder protocol work alone: {work:.1} µs per handshake on one core, of which its X25519 operations (timed interleaved) {work_dh:.1} µs ({:.0} %) -> {work_bound:.0}/s on {hs_workers} (static-static precomputed)",
        100.0 * work_dh / work
    );
    for (round, (label, bound)) in [("first", first_bound), ("again", bound)]
        .into_iter()
        .enumerate()
    {
        let ts = Tai64N::from_unix_duration(wall() + Duration::from_secs(round as u64 + 1));
        for (i, c) in clients.iter_mut().enumerate() {
            c.initiate(i, ts);
        }
        let cpu = hub_cpu();
        let out = windowed(
            &mut clients,
            window,
            |c| {
                net.inject(c.src, hub_addr, c.msg.clone());
            },
            &from_hub,
        );
        let cpu = hub_cpu().saturating_sub(cpu);
        let ok = verify(&mut clients);
        let rate = ok as f64 / out.elapsed.as_secs_f64();
        println!(
            "handshakes, memory network, {window} outstanding, {label}: {ok} of {n_clients} complete in {} -> {} ({:.0} % of the protocol work's); {} cookie replies",
            secs(out.elapsed),
            against_bound(ok, out.elapsed, cpu, bound, hs_workers),
            100.0 * rate / work_bound,
            out.cookie_replies
        );
    }

    // All at once over the memory network: one wave.
    let ts = Tai64N::from_unix_duration(wall() + Duration::from_secs(3));
    for (i, c) in clients.iter_mut().enumerate() {
        c.initiate(i, ts);
    }
    std::thread::sleep(Duration::from_millis(1100)); // "under load" from before has expired
    let before = hub.stats();
    let start = Instant::now();
    let mut wave = Outcome::default();
    std::thread::scope(|s| {
        let clients_ref = &clients;
        let net = &net;
        s.spawn(move || {
            for c in clients_ref {
                net.inject(c.src, hub_addr, c.msg.clone());
            }
        });
        let mut last = Instant::now();
        let mut seen = vec![false; clients_ref.len()];
        while last.elapsed() < Duration::from_secs(1) {
            if let Ok((from, _, data)) = tap_rx.recv_timeout(Duration::from_millis(100)) {
                if from != hub_addr {
                    continue;
                }
                last = Instant::now();
                wave.elapsed = start.elapsed();
                match classify(&data) {
                    Ok(MessageType::Response) => {
                        if let Ok(r) = Response::parse(&data) {
                            let i = (r.receiver_index() as usize).wrapping_sub(1);
                            if let Some(false) = seen.get(i) {
                                seen[i] = true;
                                wave.responses += 1;
                            }
                        }
                    }
                    Ok(MessageType::CookieReply) => wave.cookie_replies += 1,
                    _ => {}
                }
            }
        }
    });
    let after = hub.stats();
    println!(
        "handshakes, memory network, all {n_clients} at once: one wave answered {} with responses in {} ({:.0}/s) and {} with cookie replies (hub under load); {} dropped by the full handshake queue, {} by the rate limiter",
        wave.responses,
        secs(wave.elapsed),
        wave.responses as f64 / wave.elapsed.as_secs_f64().max(1e-9),
        wave.cookie_replies,
        after.drop_handshake_queue_full - before.drop_handshake_queue_full,
        after.drop_rate_limited - before.drop_rate_limited,
    );
    net.set_tap(None);
    drop(hub);

    // One handshake worker, so the clients' thread has the other core to itself: the device's
    // rate against one core's protocol work. A hub with only the handshaking peers.
    let net1 = MemoryNetwork::new();
    let bind1 = Arc::new(net1.bind(IpAddr::from([198, 18, 0, 1]), 128));
    let hub1 = hub_device(bind1.clone(), &hub_key, 1);
    hub1.ipc_set(&hub_config(n_clients, 1, &client_pubs))
        .expect("one-worker hub configuration");
    let hub1_addr = bind1.local_addr().unwrap();
    let (tap1_tx, tap1_rx) = crossbeam_channel::unbounded();
    net1.set_tap(Some(tap1_tx));
    for round in 0..2 {
        let ts = Tai64N::from_unix_duration(wall() + Duration::from_secs(10 + round));
        for (i, c) in clients.iter_mut().enumerate() {
            c.hs = Handshake::new(&c.id, hub_pub, PresharedKey::zero());
            c.initiate(i, ts);
        }
        let out = windowed(
            &mut clients,
            window,
            |c| {
                net1.inject(c.src, hub1_addr, c.msg.clone());
            },
            |buf| match tap1_rx.recv_timeout(Duration::from_millis(50)) {
                Ok((from, _, data)) if from == hub1_addr => {
                    *buf = data;
                    true
                }
                _ => false,
            },
        );
        let ok = verify(&mut clients);
        let rate = ok as f64 / out.elapsed.as_secs_f64();
        let label = if round == 0 { "first" } else { "again" };
        println!(
            "handshakes, memory network, one handshake worker, {label}: {ok} of {n_clients} in {} -> {rate:.0}/s ({:.0} % of one core's protocol work, {:.0}/s)",
            secs(out.elapsed),
            100.0 * rate * work / 1e6,
            1e6 / work
        );
    }
    net1.set_tap(None);
    drop(hub1);

    // Real UDP sockets on loopback: a hub with only the handshaking peers (the handshake cost
    // does not depend on how many other peers there are), every client on one socket.
    let udp_hub = hub_device(Arc::new(vpn_conn::StdNetBind::new()), &hub_key, 0);
    let mut text = hub_config(n_clients, 1, &client_pubs);
    text.insert_str(0, "replace_peers=true\n");
    udp_hub.ipc_set(&text).expect("udp hub configuration");
    let hub_udp = SocketAddr::from(([127, 0, 0, 1], udp_hub.listen_port()));
    let sock = UdpSocket::bind("127.0.0.1:0").expect("client socket");
    sock.set_read_timeout(Some(Duration::from_millis(50)))
        .unwrap();
    let ts = Tai64N::from_unix_duration(wall() + Duration::from_secs(4));
    for (i, c) in clients.iter_mut().enumerate() {
        c.hs = Handshake::new(&c.id, hub_pub, PresharedKey::zero());
        c.initiate(i, ts);
    }
    let mut rbuf = [0u8; 256];
    let cpu = hub_cpu();
    let out = windowed(
        &mut clients,
        window,
        |c| {
            let _ = sock.send_to(&c.msg, hub_udp);
        },
        |buf| match sock.recv_from(&mut rbuf) {
            Ok((n, _)) => {
                *buf = rbuf[..n].to_vec();
                true
            }
            Err(_) => false,
        },
    );
    let cpu = hub_cpu().saturating_sub(cpu);
    let ok = verify(&mut clients);
    println!(
        "handshakes, UDP on loopback, {window} outstanding, first: {ok} of {n_clients} complete in {} -> {}",
        secs(out.elapsed),
        against_bound(ok, out.elapsed, cpu, first_bound, hs_workers)
    );
}
