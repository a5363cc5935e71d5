//! A WireGuard tunnel embedded in a program: a TUN by name, the default bind, one device,
//! configured from the command line or a `wg` configuration file, up until Ctrl-C, SIGTERM or
//! `--duration` seconds. Addresses and routes are the host's job (`ip addr add … dev <ifname>`).
//!
//! ```text
//! embedded_tunnel <ifname> --config <wg.conf> [--duration <s>]
//! embedded_tunnel <ifname> --private-key <base64> [--listen-port <n>] [--peer <base64>
//!     [--endpoint <ip:port>] [--allowed-ip <cidr>]... [--keepalive <s>]] [--duration <s>]
//! ```
//!
//! Prints `ready <ifname> <public key>` once the device is up, and each peer's counters when it
//! stops. Needs root (or `CAP_NET_ADMIN`) to create the interface; `RUST_LOG=debug` shows the
//! device's log.

use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::Arc;
use std::time::Duration;
use vpn_wireguard::ipc::{Change, PeerChange};
use vpn_wireguard::{conn, device, keys, tun};

fn main() {
    if let Err(e) = run(std::env::args().skip(1).collect()) {
        eprintln!("embedded_tunnel: {e}");
        std::process::exit(1);
    }
}

fn run(args: Vec<String>) -> Result<(), Box<dyn std::error::Error>> {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .init();
    let ifname = args
        .first()
        .ok_or("usage: embedded_tunnel <ifname> [options]")?;
    let (change, private_key, peers, duration) = configuration(&args[1..])?;

    let tun = tun::create_tun(ifname, 1420)?;
    let dev = Arc::new(device::Device::new(
        tun,
        conn::new_default_bind(),
        device::Logger::new(ifname.as_str()),
    ));
    dev.configure(&change)?;
    dev.up()?;

    // Ctrl-C and SIGTERM close the device, and so does the timer; `wait` returns then.
    let on_signal = dev.clone();
    ctrlc::set_handler(move || on_signal.close())?;
    if let Some(d) = duration {
        let on_timer = dev.clone();
        std::thread::spawn(move || {
            std::thread::sleep(d);
            on_timer.close();
        });
    }
    // Closing removes the peers from the device: keep them to read their counters at the end.
    let peers: Vec<_> = peers.iter().filter_map(|k| dev.peer(k)).collect();
    println!("ready {ifname} {}", private_key.public_key());
    dev.wait();

    for peer in peers {
        let (rx, tx) = peer.rx_tx_bytes();
        let hs = peer.last_handshake().is_some();
        println!(
            "peer {}: handshake {hs}, rx {rx} B, tx {tx} B",
            peer.public_key()
        );
    }
    Ok(())
}

type Setup = (
    Change,
    keys::PrivateKey,
    Vec<keys::PublicKey>,
    Option<Duration>,
);

/// The configuration change, our key, the peers' keys and the run time, from the arguments.
fn configuration(args: &[String]) -> Result<Setup, Box<dyn std::error::Error>> {
    let mut it = args.iter();
    let (mut change, mut key, mut duration) = (Change::new(), None, None);
    // The peer the flags after `--peer` configure, until the next `--peer`.
    let mut peer: Option<PeerChange> = None;
    let mut peers = Vec::new();
    while let Some(flag) = it.next() {
        let value = it.next().ok_or_else(|| format!("{flag} needs a value"))?;
        let mut apply = || -> Result<(), Box<dyn std::error::Error>> {
            let in_peer = |p: Option<PeerChange>| p.ok_or("belongs after --peer");
            match flag.as_str() {
                "--config" => {
                    let file = vpn_config::parse(&std::fs::read_to_string(value)?)?;
                    change = file.to_change(|host, port| {
                        (host, port).to_socket_addrs()?.next().ok_or_else(|| {
                            std::io::Error::new(std::io::ErrorKind::NotFound, "no address")
                        })
                    })?;
                    peers.extend(file.peers.iter().map(|p| p.public_key));
                    key = Some(file.interface.private_key);
                }
                "--private-key" => {
                    let k = keys::PrivateKey::from_base64(value.trim())?;
                    change = std::mem::take(&mut change).private_key(k.clone());
                    key = Some(k);
                }
                "--listen-port" => {
                    change = std::mem::take(&mut change).listen_port(value.parse()?);
                }
                "--peer" => {
                    if let Some(p) = peer.take() {
                        change.push_peer(p);
                    }
                    let k = keys::PublicKey::from_base64(value)?;
                    peers.push(k);
                    peer = Some(PeerChange::new(k));
                }
                "--endpoint" => {
                    let ep = value.parse::<SocketAddr>()?;
                    peer = Some(in_peer(peer.take())?.endpoint(ep));
                }
                "--allowed-ip" => {
                    let ip = value.parse()?;
                    peer = Some(in_peer(peer.take())?.allowed_ip(ip));
                }
                "--keepalive" => {
                    let secs = value.parse()?;
                    peer = Some(in_peer(peer.take())?.persistent_keepalive_interval(secs));
                }
                "--duration" => duration = Some(Duration::from_secs(value.parse()?)),
                _ => return Err("unknown option".into()),
            }
            Ok(())
        };
        apply().map_err(|e| format!("{flag} {value}: {e}"))?;
    }
    if let Some(p) = peer {
        change.push_peer(p);
    }
    let key = key.ok_or("--config or --private-key is required")?;
    Ok((change, key, peers, duration))
}
