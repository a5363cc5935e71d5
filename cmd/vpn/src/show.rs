//! `vpn show [ifname|all|interfaces]`: what `wg show` prints, read from the UAPI sockets,
//! plus a "batching:" section from the private `stats=1` request.
//!
//! A peer that never completed a handshake shows no "latest handshake" line (never a date
//! 55 years ago), as `wg` does for `last_handshake_time_sec=0`.

use std::fmt::Write as _;
use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};
use vpn_ipc::{DeviceState, Statistics};
use vpn_uapi::client;

/// Arguments of `vpn show`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// An interface name, `all` (the default) or `interfaces` (list the names only).
    pub target: Option<String>,
}

/// Runs `vpn show`.
pub fn run(args: &Args) -> Result<(), crate::Error> {
    let dir = Path::new(vpn_uapi::DEFAULT_DIR);
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let mut out = String::new();
    match args.target.as_deref() {
        Some("interfaces") => {
            let names = interfaces(dir)?;
            if !names.is_empty() {
                out.push_str(&names.join(" "));
                out.push('\n');
            }
        }
        None | Some("all") => {
            for (i, name) in interfaces(dir)?.iter().enumerate() {
                if i > 0 {
                    out.push('\n');
                }
                match show_one(dir, name, now) {
                    Ok(s) => out.push_str(&s),
                    // One dead socket must not hide the other interfaces.
                    Err(e) => eprintln!("vpn: unable to access interface {name}: {e}"),
                }
            }
        }
        Some(name) => {
            let s = show_one(dir, name, now)
                .map_err(|e| format!("unable to access interface {name}: {e}"))?;
            out.push_str(&s);
        }
    }
    print!("{out}");
    Ok(())
}

/// Names of the interfaces with a socket in `dir`, sorted.
fn interfaces(dir: &Path) -> Result<Vec<String>, crate::Error> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(format!("{}: {e}", dir.display()).into()),
    };
    let mut names: Vec<String> = entries
        .filter_map(Result::ok)
        .filter_map(|e| {
            e.file_name()
                .to_str()?
                .strip_suffix(".sock")
                .map(str::to_owned)
        })
        .filter(|n| !n.is_empty())
        .collect();
    names.sort();
    Ok(names)
}

fn show_one(dir: &Path, name: &str, now: u64) -> Result<String, crate::Error> {
    let dump = client::get(dir, name)?;
    let iface = parse_dump(name, &dump)?;
    // Other implementations (wireguard-go) close the connection on `stats=1`: no section then.
    let stats = client::request(dir, name, "stats")
        .ok()
        .filter(|r| r.errno == 0)
        .and_then(|r| r.body.parse::<Statistics>().ok());
    let mut out = format_interface(&iface, now);
    if let Some(s) = stats {
        out.push('\n');
        out.push_str(&format_batching(&s));
        out.push_str(&format_sandbox(&s));
    }
    Ok(out)
}

/// An interface as a `get=1` dump describes it.
#[derive(Debug, Default, PartialEq)]
struct Interface {
    name: String,
    public_key: Option<String>,
    listen_port: u16,
    fwmark: u32,
    peers: Vec<Peer>,
}

#[derive(Debug, Default, PartialEq)]
struct Peer {
    public_key: String,
    preshared_key: bool,
    endpoint: Option<String>,
    allowed_ips: Vec<String>,
    /// Seconds since the epoch of the latest handshake; 0 for never.
    last_handshake: u64,
    rx: u64,
    tx: u64,
    keepalive: u16,
}

/// Parses a `get=1` dump (without the errno trailer) through the typed model.
fn parse_dump(name: &str, dump: &str) -> Result<Interface, crate::Error> {
    let state: DeviceState = dump
        .parse()
        .map_err(|e: vpn_ipc::IpcError| format!("bad UAPI dump: {}", e.message()))?;
    let mut peers: Vec<Peer> = state
        .peers
        .iter()
        .map(|p| Peer {
            public_key: p.public_key.to_base64(),
            preshared_key: !p.preshared_key.is_zero(),
            endpoint: p.endpoint.as_ref().map(|e| e.to_text()),
            allowed_ips: p.allowed_ips.iter().map(|a| a.to_string()).collect(),
            last_handshake: p.last_handshake_time.map_or(0, |t| t.as_secs()),
            rx: p.rx_bytes,
            tx: p.tx_bytes,
            keepalive: p.persistent_keepalive_interval,
        })
        .collect();
    // `wg show` lists the most recently active peers first.
    peers.sort_by_key(|p| std::cmp::Reverse(p.last_handshake));
    Ok(Interface {
        name: name.to_owned(),
        public_key: state.private_key.map(|k| k.public_key().to_base64()),
        listen_port: state.listen_port,
        fwmark: state.fwmark,
        peers,
    })
}

/// The `wg show` text of one interface.
fn format_interface(iface: &Interface, now: u64) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "interface: {}", iface.name);
    if let Some(k) = &iface.public_key {
        let _ = writeln!(s, "  public key: {k}");
        s.push_str("  private key: (hidden)\n");
    }
    if iface.listen_port != 0 {
        let _ = writeln!(s, "  listening port: {}", iface.listen_port);
    }
    if iface.fwmark != 0 {
        let _ = writeln!(s, "  fwmark: {:#x}", iface.fwmark);
    }
    for p in &iface.peers {
        let _ = writeln!(s, "\npeer: {}", p.public_key);
        if p.preshared_key {
            s.push_str("  preshared key: (hidden)\n");
        }
        if let Some(e) = &p.endpoint {
            let _ = writeln!(s, "  endpoint: {e}");
        }
        let ips = if p.allowed_ips.is_empty() {
            "(none)".to_owned()
        } else {
            p.allowed_ips.join(", ")
        };
        let _ = writeln!(s, "  allowed ips: {ips}");
        if p.last_handshake != 0 {
            let _ = writeln!(s, "  latest handshake: {}", ago(now, p.last_handshake));
        }
        if p.rx != 0 || p.tx != 0 {
            let _ = writeln!(
                s,
                "  transfer: {} received, {} sent",
                bytes(p.rx),
                bytes(p.tx)
            );
        }
        if p.keepalive != 0 {
            let _ = writeln!(
                s,
                "  persistent keepalive: every {}",
                duration(u64::from(p.keepalive))
            );
        }
    }
    s
}

/// "1 minute, 3 seconds" (zero components left out), as `wg` spells durations.
fn duration(secs: u64) -> String {
    const UNITS: [(&str, u64); 5] = [
        ("year", 365 * 24 * 3600),
        ("day", 24 * 3600),
        ("hour", 3600),
        ("minute", 60),
        ("second", 1),
    ];
    let mut left = secs;
    let mut parts = Vec::new();
    for (name, size) in UNITS {
        let n = left / size;
        left %= size;
        if n != 0 {
            parts.push(format!("{n} {name}{}", if n == 1 { "" } else { "s" }));
        }
    }
    if parts.is_empty() {
        return "0 seconds".to_owned();
    }
    parts.join(", ")
}

/// How long ago `then` was, or "Now" / "(FUTURE)" as `wg` prints them.
fn ago(now: u64, then: u64) -> String {
    match now.checked_sub(then) {
        Some(0) => "Now".to_owned(),
        Some(d) => format!("{} ago", duration(d)),
        None => "(FUTURE)".to_owned(),
    }
}

/// "92 B", "1.23 KiB", "4.56 MiB", … as `wg` prints byte counts.
fn bytes(n: u64) -> String {
    const UNITS: [&str; 4] = ["KiB", "MiB", "GiB", "TiB"];
    if n < 1024 {
        return format!("{n} B");
    }
    let mut v = n as f64 / 1024.0;
    let mut unit = 0;
    while v >= 1024.0 && unit + 1 < UNITS.len() {
        v /= 1024.0;
        unit += 1;
    }
    format!("{v:.2} {}", UNITS[unit])
}

fn per(a: u64, b: u64) -> f64 {
    if b == 0 {
        0.0
    } else {
        a as f64 / b as f64
    }
}

fn percent(a: u64, b: u64) -> f64 {
    per(a, b) * 100.0
}

/// The packet memory and what the daemon kept after setup (its `memory.*` and `sandbox.*`
/// counters; nothing from a daemon that reports neither).
fn format_sandbox(st: &Statistics) -> String {
    let g = |k: &str| st.get(k).unwrap_or(0);
    let mut s = String::new();
    if st.get("memory.budget").is_some() {
        let cap = match g("memory.budget") {
            0 => "no cap".to_owned(),
            b => format!("cap {}", bytes(b)),
        };
        let _ = writeln!(
            s,
            "  packet memory: {} in use, {} allocated, peak {}, {cap}, {} waits",
            bytes(g("memory.in_use")),
            bytes(g("memory.allocated")),
            bytes(g("memory.peak")),
            g("memory.waits")
        );
    }
    if st.get("sandbox.uid").is_some() {
        let caps = g("sandbox.capabilities");
        let caps = if caps == 0 {
            "no capabilities".to_owned()
        } else {
            (0..64)
                .filter(|c| caps & (1 << c) != 0)
                .map(capability_name)
                .collect::<Vec<_>>()
                .join(", ")
        };
        let seccomp = match g("sandbox.seccomp_calls") {
            0 => "off".to_owned(),
            n => format!("{n} system calls allowed"),
        };
        let landlock = match g("sandbox.landlock") {
            0 => "off",
            1 => "not supported by this kernel",
            2 => "partially enforced (older kernel)",
            3 => "enforced",
            _ => "unknown",
        };
        let _ = writeln!(
            s,
            "sandbox:\n  user: uid {} gid {}{}\n  capabilities: {caps}\n  seccomp: {seccomp}\n  landlock: {landlock}",
            g("sandbox.uid"),
            g("sandbox.gid"),
            if g("sandbox.no_new_privs") == 1 {
                ", no_new_privs"
            } else {
                ""
            },
        );
    }
    s
}

/// `capabilities(7)`'s name for the capabilities `vpn show` may meet.
fn capability_name(cap: u32) -> String {
    match cap {
        10 => "CAP_NET_BIND_SERVICE".into(),
        12 => "CAP_NET_ADMIN".into(),
        13 => "CAP_NET_RAW".into(),
        21 => "CAP_SYS_ADMIN".into(),
        n => format!("capability {n}"),
    }
}

/// The "batching:" section: how many packets each system call moved, how much of the
/// traffic used the kernel's segmentation offloads, and why packets were dropped.
fn format_batching(st: &Statistics) -> String {
    let g = |k: &str| st.get(k).unwrap_or(0);
    let mut s = String::from("batching:\n");
    let (reads, pkts) = (g("device.tun_reads"), g("device.tun_packets_read"));
    let _ = write!(
        s,
        "  tun read: {reads} calls, {:.2} packets per read",
        per(pkts, reads)
    );
    if st.get("tun.gso_splits").is_some() {
        let _ = write!(
            s,
            ", {:.1}% split from GSO super-packets",
            percent(g("tun.gso_splits"), g("tun.reads"))
        );
    }
    s.push('\n');
    let (writes, wpkts) = (g("device.tun_writes"), g("device.tun_packets_written"));
    let _ = write!(
        s,
        "  tun write: {writes} calls, {:.2} packets per write",
        per(wpkts, writes)
    );
    if st.get("tun.gro_coalesced").is_some() {
        let _ = write!(
            s,
            ", {:.1}% merged by GRO",
            percent(g("tun.gro_coalesced"), g("tun.packets_written"))
        );
    }
    s.push('\n');
    let (recvs, dgrams) = (g("device.recv_calls"), g("device.datagrams_received"));
    let _ = write!(
        s,
        "  udp receive: {recvs} calls, {:.2} datagrams per call",
        per(dgrams, recvs)
    );
    if st.get("bind.gro_super_datagrams").is_some() {
        let _ = write!(s, ", {} GRO super-datagrams", g("bind.gro_super_datagrams"));
    }
    s.push('\n');
    let (sends, sent) = (g("device.send_calls"), g("device.datagrams_sent"));
    let _ = write!(
        s,
        "  udp send: {sends} calls, {:.2} datagrams per call",
        per(sent, sends)
    );
    if st.get("bind.gso_messages").is_some() {
        let _ = write!(s, ", {} GSO messages", g("bind.gso_messages"));
    }
    s.push('\n');
    // Connected sockets: only once the bind has dialled any (the feature is off by default).
    if g("bind.connected_dials") > 0 {
        let _ = writeln!(
            s,
            "  connected sockets: {} open, {} dialled, {} datagrams sent and {} received on them",
            g("bind.connected_open"),
            g("bind.connected_dials"),
            g("bind.connected_datagrams_sent"),
            g("bind.connected_datagrams_received")
        );
    }
    let _ = writeln!(
        s,
        "  handshakes sent: {}, cookie replies sent: {}",
        g("device.handshakes_sent"),
        g("device.cookie_replies_sent")
    );
    let mut drops: Vec<(String, u64)> = st
        .iter()
        .filter_map(|(k, v)| {
            let name = k
                .strip_prefix("device.drop_")
                .map(str::to_owned)
                .or_else(|| match k {
                    "device.send_errors" => Some("send error".to_owned()),
                    "tun.too_many_segments" => Some("too many segments".to_owned()),
                    "bind.truncated_drops" => Some("truncated".to_owned()),
                    _ => None,
                })?;
            (v != 0).then(|| (name.replace('_', " "), v))
        })
        .collect();
    drops.sort();
    if drops.is_empty() {
        s.push_str("  drops: none\n");
    } else {
        let list: Vec<String> = drops.iter().map(|(k, v)| format!("{k} {v}")).collect();
        let _ = writeln!(s, "  drops: {}", list.join(", "));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_as_wg_spells_them() {
        assert_eq!(duration(63), "1 minute, 3 seconds");
        assert_eq!(duration(25), "25 seconds");
        assert_eq!(duration(1), "1 second");
        assert_eq!(duration(3600), "1 hour");
        assert_eq!(duration(2 * 86_400 + 1), "2 days, 1 second");
        assert_eq!(duration(365 * 86_400 + 120), "1 year, 2 minutes");
        assert_eq!(ago(1000, 937), "1 minute, 3 seconds ago");
        assert_eq!(ago(1000, 1000), "Now");
        assert_eq!(ago(1000, 1001), "(FUTURE)");
    }

    #[test]
    fn byte_counts_as_wg_prints_them() {
        assert_eq!(bytes(0), "0 B");
        assert_eq!(bytes(1023), "1023 B");
        assert_eq!(bytes(1024), "1.00 KiB");
        assert_eq!(bytes(1_289_748), "1.23 MiB");
        assert_eq!(bytes(4_781_506), "4.56 MiB");
        assert_eq!(bytes(3 << 30), "3.00 GiB");
        assert_eq!(bytes(5 << 40), "5.00 TiB");
        assert_eq!(bytes(u64::MAX), "16777216.00 TiB");
    }

    const PRIV: &str = "77076d0a7318a57d3c16c17251b26645df4c2f87ebc0992ab177fba51db92c2a";
    const PUB_B64: &str = "hSDwCYkwp1R0i33ctD73Wg2/Og0mOBr066SpjqqbTmo=";
    const PEER_HEX: &str = "de9edb7d7b7dc1b4d35b61c2ece435373f8343c85b78674dadfc7e146f882b4f";
    const PEER_B64: &str = "3p7bfXt9wbTTW2HC7OQ1Nz+DQ8hbeGdNrfx+FG+IK08=";

    #[test]
    fn dump_to_wg_show_text() {
        let dump = format!(
            "private_key={PRIV}\nlisten_port=51820\nfwmark=51\n\
             public_key={PEER_HEX}\npreshared_key={}\nprotocol_version=1\nendpoint=198.18.0.2:51820\n\
             last_handshake_time_sec=937\nlast_handshake_time_nsec=5\ntx_bytes=4781506\nrx_bytes=1289748\n\
             persistent_keepalive_interval=25\nallowed_ip=100.64.0.2/32\nallowed_ip=fd00::2/128\n",
            "11".repeat(32)
        );
        let iface = parse_dump("wg0", &dump).unwrap();
        let text = format_interface(&iface, 1000);
        let want = format!(
            "interface: wg0\n  public key: {PUB_B64}\n  private key: (hidden)\n  listening port: 51820\n  fwmark: 0x33\n\
             \npeer: {PEER_B64}\n  preshared key: (hidden)\n  endpoint: 198.18.0.2:51820\n\
             \x20 allowed ips: 100.64.0.2/32, fd00::2/128\n  latest handshake: 1 minute, 3 seconds ago\n\
             \x20 transfer: 1.23 MiB received, 4.56 MiB sent\n  persistent keepalive: every 25 seconds\n"
        );
        assert_eq!(text, want);
    }

    #[test]
    fn never_handshaken_peer_shows_no_date() {
        let dump = format!(
            "listen_port=0\npublic_key={PEER_HEX}\npreshared_key={}\nprotocol_version=1\n\
             last_handshake_time_sec=0\nlast_handshake_time_nsec=0\ntx_bytes=0\nrx_bytes=0\npersistent_keepalive_interval=0\n",
            "0".repeat(64)
        );
        let text = format_interface(&parse_dump("wg1", &dump).unwrap(), 1_700_000_000);
        assert_eq!(
            text,
            format!("interface: wg1\n\npeer: {PEER_B64}\n  allowed ips: (none)\n")
        );
        assert!(!text.contains("ago") && !text.contains("year"));
    }

    #[test]
    fn peers_most_recent_first_and_bad_dumps_rejected() {
        let other = "11".repeat(32);
        let dump = format!(
            "public_key={other}\nlast_handshake_time_sec=5\npublic_key={PEER_HEX}\nlast_handshake_time_sec=9\n"
        );
        let iface = parse_dump("wg2", &dump).unwrap();
        assert_eq!(iface.peers[0].public_key, PEER_B64);
        assert_eq!(iface.peers[1].last_handshake, 5);
        assert!(parse_dump("x", "no equals sign\n").is_err());
        assert!(parse_dump("x", "private_key=zz\n").is_err());
        assert!(parse_dump("x", &format!("public_key={PEER_HEX}\nrx_bytes=-1\n")).is_err());
        assert!(parse_dump("x", "listen_port=70000\n").is_err());
    }

    #[test]
    fn batching_section() {
        let body = "device.tun_reads=10\ndevice.tun_packets_read=250\ndevice.tun_writes=4\n\
                    device.tun_packets_written=100\ndevice.recv_calls=8\ndevice.datagrams_received=100\n\
                    device.send_calls=5\ndevice.datagrams_sent=250\ndevice.handshakes_sent=2\n\
                    device.drop_replay=3\ndevice.drop_no_route=0\ntun.reads=10\ntun.gso_splits=5\n\
                    tun.packets_written=100\ntun.gro_coalesced=90\nbind.gso_messages=4\nbind.gro_super_datagrams=6\n\
                    bind.truncated_drops=1\n";
        let text = format_batching(&body.parse().unwrap());
        assert_eq!(
            text,
            "batching:\n  tun read: 10 calls, 25.00 packets per read, 50.0% split from GSO super-packets\n\
             \x20 tun write: 4 calls, 25.00 packets per write, 90.0% merged by GRO\n\
             \x20 udp receive: 8 calls, 12.50 datagrams per call, 6 GRO super-datagrams\n\
             \x20 udp send: 5 calls, 50.00 datagrams per call, 4 GSO messages\n\
             \x20 handshakes sent: 2, cookie replies sent: 0\n  drops: replay 3, truncated 1\n"
        );
        let with_connected = format!(
            "{body}bind.connected_open=3\nbind.connected_dials=4\nbind.connected_datagrams_sent=70\n\
             bind.connected_datagrams_received=80\n"
        );
        assert!(format_batching(&with_connected.parse().unwrap()).contains(
            "\n  connected sockets: 3 open, 4 dialled, 70 datagrams sent and 80 received on them\n"
        ));
        let empty = format_batching(&Statistics::new());
        assert!(
            empty.contains("0 calls, 0.00 packets per read\n") && empty.ends_with("drops: none\n"),
            "{empty}"
        );
    }

    #[test]
    fn memory_and_sandbox_lines() {
        let body = "memory.budget=33554432\nmemory.allocated=1048576\nmemory.in_use=65536\nmemory.peak=2097152\n\
                    memory.waits=0\nsandbox.uid=65534\nsandbox.gid=65534\nsandbox.capabilities=5120\n\
                    sandbox.no_new_privs=1\nsandbox.seccomp_calls=70\nsandbox.landlock=3\n";
        assert_eq!(
            format_sandbox(&body.parse().unwrap()),
            "  packet memory: 64.00 KiB in use, 1.00 MiB allocated, peak 2.00 MiB, cap 32.00 MiB, 0 waits\n\
             sandbox:\n  user: uid 65534 gid 65534, no_new_privs\n\
             \x20 capabilities: CAP_NET_BIND_SERVICE, CAP_NET_ADMIN\n\
             \x20 seccomp: 70 system calls allowed\n  landlock: enforced\n"
        );
        assert_eq!(format_sandbox(&Statistics::new()), "");
    }
}
