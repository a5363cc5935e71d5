//! Two userspace stacks on two devices over the in-memory network, one TCP stream: the rate of
//! the stack and device together with no kernel in the path, for profiling where the stack's
//! time goes (`perf record` on this binary; docs/design-notes.md, "The userspace stack").
//!
//! `cargo bench -p vpn-tests --bench netstack` (NETSTACK_MB=512 bytes moved, NETSTACK_STREAMS=1).

use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Instant;
use vpn_conn::memory::MemoryNetwork;
use vpn_device::{Device, Logger};
use vpn_netstack::{create_net_tun, Net};
use vpn_proto::keys::PrivateKey;
use vpn_tests::private_key;

fn node(mem: &MemoryNetwork, n: u8) -> (Device, Net, PrivateKey, SocketAddr) {
    let ip = IpAddr::V4(Ipv4Addr::new(100, 64, 0, n));
    let (tun, net) = create_net_tun(&[ip], &[], 1420).unwrap();
    let bind = Arc::new(mem.bind(IpAddr::from([198, 18, 0, n]), 128));
    let dev = Device::new(Arc::new(tun), bind.clone(), Logger::new(format!("n{n}")));
    let key = private_key();
    dev.ipc_set(&format!("private_key={}\nlisten_port=0\n", key.to_hex()))
        .unwrap();
    dev.up().unwrap();
    let addr = bind.local_addr().unwrap();
    (dev, net, key, addr)
}

fn main() {
    let mb: u64 = std::env::var("NETSTACK_MB")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(512);
    let streams: usize = std::env::var("NETSTACK_STREAMS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1);
    let mem = MemoryNetwork::new();
    let (da, na, ka, aa) = node(&mem, 1);
    let (db, nb, kb, ab) = node(&mem, 2);
    for (dev, key, addr, ip) in [(&da, &kb, ab, 2), (&db, &ka, aa, 1)] {
        dev.ipc_set(&format!(
            "public_key={}\nendpoint={addr}\nallowed_ip=100.64.0.{ip}/32\n",
            key.public_key().to_hex()
        ))
        .unwrap();
    }
    let listener = nb.listen_tcp("100.64.0.2:5001".parse().unwrap()).unwrap();
    let per_stream = (mb << 20) / streams as u64;
    let sink = std::thread::spawn(move || {
        let mut handles = Vec::new();
        for _ in 0..streams {
            let (mut s, _) = listener.accept().unwrap();
            handles.push(std::thread::spawn(move || {
                let mut buf = vec![0u8; 256 << 10];
                let mut got = 0u64;
                loop {
                    let n = s.read(&mut buf).unwrap();
                    if n == 0 {
                        return got;
                    }
                    got += n as u64;
                }
            }));
        }
        handles.into_iter().map(|h| h.join().unwrap()).sum::<u64>()
    });
    // The time includes the handshake and slow start: NETSTACK_MB large makes them small.
    let started = Instant::now();
    let senders: Vec<_> = (0..streams)
        .map(|_| {
            let na = na.clone();
            std::thread::spawn(move || {
                let mut s = na.dial_tcp("100.64.0.2:5001".parse().unwrap()).unwrap();
                let buf = vec![0x5au8; 256 << 10];
                let mut sent = 0u64;
                while sent < per_stream {
                    let n = (per_stream - sent).min(buf.len() as u64) as usize;
                    s.write_all(&buf[..n]).unwrap();
                    sent += n as u64;
                }
            })
        })
        .collect();
    for s in senders {
        s.join().unwrap();
    }
    let got = sink.join().unwrap();
    let secs = started.elapsed().as_secs_f64();
    println!(
        "netstack: {streams} stream(s), {} MiB in {secs:.2} s: {:.2} Gbit/s",
        got >> 20,
        got as f64 * 8.0 / secs / 1e9
    );
    da.close();
    db.close();
}
