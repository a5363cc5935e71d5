//! `vpn-peers <keys file> <daemon addr:port> <daemon public key hex> <seconds>`: one in-process
//! WireGuard peer per line of the keys file (a private key in hex), peer `j` (from 0) on UDP
//! port 51821 + j with tunnel address 100.64.j.2, all with the daemon as their one peer
//! (100.64.j.1). Each floods the daemon with 64-byte UDP datagrams (to port 9) for `seconds`, as
//! fast as its device takes them: the load for `netns-tests/memory.sh`, which measures the
//! daemon's memory under N busy peers without N processes. Prints the datagrams sent.

use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};
use vpn_conn::StdNetBind;
use vpn_device::{Device, Logger, Options};
use vpn_tests::udp_packet;
use vpn_tun::memory::MemoryTun;

/// Packets a peer keeps queued in its in-memory TUN: enough to keep its device busy.
const QUEUED: u64 = 512;

fn main() -> Result<(), String> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [keys, daemon, daemon_key, secs] = args.as_slice() else {
        return Err(
            "usage: vpn-peers <keys file> <daemon addr:port> <daemon key hex> <seconds>".into(),
        );
    };
    let secs: u64 = secs.parse().map_err(|_| format!("bad seconds {secs:?}"))?;
    if secs == 0 || secs > 600 {
        return Err("seconds: 1..=600".into());
    }
    let keys = std::fs::read_to_string(keys).map_err(|e| format!("{keys}: {e}"))?;
    let mut peers = Vec::new();
    for (i, key) in keys.lines().filter(|l| !l.trim().is_empty()).enumerate() {
        let k = u8::try_from(i).map_err(|_| "at most 256 peers".to_string())?;
        let (tun, handle) = MemoryTun::new(&format!("peer{k}"), 1420, 128);
        // The floor for memory: the peers are not what is measured.
        let opts = Options::default().with_workers(1).with_memory_budget(1);
        let dev = Device::with_options(
            Arc::new(tun),
            Arc::new(StdNetBind::new()),
            Logger::new(format!("peer{k}")),
            opts,
        );
        dev.ipc_set(&format!(
            "private_key={}\nlisten_port={}\npublic_key={daemon_key}\nendpoint={daemon}\nallowed_ip=100.64.{k}.1/32\n",
            key.trim(),
            51821 + u16::from(k)
        ))
        .map_err(|e| format!("peer {k}: {e}"))?;
        dev.up().map_err(|e| format!("peer {k}: {e}"))?;
        let src = IpAddr::from([100, 64, k, 2]);
        let dst = IpAddr::from([100, 64, k, 1]);
        peers.push((dev, handle, udp_packet(src, dst, 4000, 9, &[0u8; 64])));
    }
    let end = Instant::now() + Duration::from_secs(secs);
    let mut sent = vec![0u64; peers.len()];
    while Instant::now() < end {
        let mut idle = true;
        for (i, (dev, tun, pkt)) in peers.iter().enumerate() {
            while sent[i] < dev.stats().tun_packets_read + QUEUED {
                tun.inject(pkt.clone());
                sent[i] += 1;
                idle = false;
            }
        }
        if idle {
            std::thread::sleep(Duration::from_micros(200));
        }
    }
    println!("sent {}", sent.iter().sum::<u64>());
    Ok(())
}
