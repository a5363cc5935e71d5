//! The `vpn` daemon driven by the real `wg` tool, in network namespaces: detach semantics
//! (`vpn wg0` returns once the interface and socket exist), configuration with `wg set` and
//! `wg setconf`, pings and checked TCP transfers both ways over IPv4 and IPv6, `wg show`
//! fields, a `wg showconf` round trip, `vpn show`, and the three ways the daemon stops
//! (socket file removed, interface deleted, SIGTERM).
//!
//! Needs root, `/dev/net/tun`, `ip`, `ping` and `wg` (wireguard-tools); otherwise it prints
//! why and returns. Namespaces (and with them every process started in them) and temporary
//! files are removed by guards, also on panic. Underlay 198.18.0.0/15, tunnel 100.64.0.0/10
//! and fd00::/8.
//!
//! The TCP endpoints are this test binary itself, re-run inside a namespace with
//! `VPN_TEST_HELPER` set (see [`helper`]), so the test needs no netcat or python.

#![forbid(unsafe_code)]

mod common;
use common::{ping, run, sh, skip_reason, wait_for, Lab, SOCK_DIR};
use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const VPN: &str = env!("CARGO_BIN_EXE_vpn");
const HELPER_ENV: &str = "VPN_TEST_HELPER";
/// Bytes per TCP transfer: enough for many full-size segments and several batches.
const TRANSFER: usize = 4 << 20;

/// Whether `pid` has exited (gone, or a zombie nobody reaped yet).
fn exited(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with(['Z', 'X'])),
    }
}

fn sock(ifname: &str) -> PathBuf {
    Path::new(SOCK_DIR).join(format!("{ifname}.sock"))
}

/// The deterministic byte at position `i` of a transfer (not periodic at any small stride,
/// so a dropped, duplicated or reordered segment shows).
fn pattern(i: usize) -> u8 {
    let x = (i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    (x >> 56) as u8 ^ (i >> 12) as u8
}

/// Runs inside a namespace when `VPN_TEST_HELPER` is set: `serve <addr>` accepts one
/// connection, checks [`TRANSFER`] pattern bytes and answers `OK <n>`; `send <addr>` sends
/// them and prints the answer.
fn helper(mode: &str) {
    let (op, addr) = mode.split_once(' ').expect("helper mode");
    let addr: SocketAddr = addr.parse().expect("helper address");
    match op {
        "serve" => {
            let l = TcpListener::bind(addr).expect("bind");
            println!("HELPER listening");
            let (mut s, _) = l.accept().expect("accept");
            let mut buf = vec![0u8; 64 * 1024];
            let mut n = 0usize;
            loop {
                let got = s.read(&mut buf).expect("read");
                if got == 0 {
                    break;
                }
                for (k, &b) in buf[..got].iter().enumerate() {
                    assert_eq!(b, pattern(n + k), "byte {} differs", n + k);
                }
                n += got;
            }
            assert_eq!(n, TRANSFER, "received byte count");
            s.write_all(format!("OK {n}\n").as_bytes()).expect("reply");
        }
        "send" => {
            let deadline = Instant::now() + Duration::from_secs(10);
            let mut s = loop {
                match TcpStream::connect_timeout(&addr, Duration::from_secs(2)) {
                    Ok(s) => break s,
                    Err(e) if Instant::now() < deadline => {
                        eprintln!("connect {addr}: {e}; retrying");
                        std::thread::sleep(Duration::from_millis(100));
                    }
                    Err(e) => panic!("connect {addr}: {e}"),
                }
            };
            s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
            let data: Vec<u8> = (0..TRANSFER).map(pattern).collect();
            s.write_all(&data).expect("send");
            s.shutdown(Shutdown::Write).expect("shutdown");
            let mut reply = String::new();
            s.read_to_string(&mut reply).expect("reply");
            println!("HELPER reply {}", reply.trim());
        }
        other => panic!("unknown helper op {other}"),
    }
}

/// A checked TCP transfer from namespace `from` to `to_addr` served in namespace `to`.
fn tcp_transfer(from: &str, to: &str, to_addr: SocketAddr) {
    let exe = std::env::current_exe().unwrap();
    let exe = exe.to_str().unwrap();
    let test = "daemons_configured_by_wg_carry_traffic_and_stop_cleanly";
    let mut server = Command::new("ip")
        .args([
            "netns",
            "exec",
            to,
            exe,
            "--exact",
            test,
            "--nocapture",
            "--test-threads=1",
        ])
        .env(HELPER_ENV, format!("serve {to_addr}"))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Wait for "listening" so the client's first connect does not race the bind.
    let mut out = server.stdout.take().unwrap();
    let mut seen = Vec::new();
    let mut byte = [0u8; 1];
    while !String::from_utf8_lossy(&seen).contains("HELPER listening") {
        assert_eq!(out.read(&mut byte).unwrap(), 1, "server helper ended early");
        seen.push(byte[0]);
    }
    let client = Command::new("ip")
        .args([
            "netns",
            "exec",
            from,
            exe,
            "--exact",
            test,
            "--nocapture",
            "--test-threads=1",
        ])
        .env(HELPER_ENV, format!("send {to_addr}"))
        .output()
        .unwrap();
    let client_out = String::from_utf8_lossy(&client.stdout);
    let mut rest = String::new();
    let _ = out.read_to_string(&mut rest);
    let status = server.wait().unwrap();
    let mut err = String::new();
    let _ = server.stderr.take().unwrap().read_to_string(&mut err);
    assert!(
        client.status.success() && client_out.contains(&format!("HELPER reply OK {TRANSFER}")),
        "client {from}->{to_addr}: {client_out}{}",
        String::from_utf8_lossy(&client.stderr)
    );
    assert!(status.success(), "server {to_addr}: {rest}{err}");
}

/// Whether a UDP socket in `ns` is bound to `port` (the device is up and its bind open).
fn udp_bound(ns: &str, port: u16) -> bool {
    let needle = format!(":{port:04X}");
    ["/proc/net/udp", "/proc/net/udp6"].iter().any(|f| {
        let out = run(&["ip", "netns", "exec", ns, "cat", f]);
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .skip(1)
            .any(|l| {
                l.split_whitespace()
                    .nth(1)
                    .is_some_and(|local| local.ends_with(&needle))
            })
    })
}

/// A tab-separated `wg show <if> <field>` value for the only peer.
fn wg_field(ns: &str, ifname: &str, field: &str) -> Vec<String> {
    let out = sh(&["ip", "netns", "exec", ns, "wg", "show", ifname, field]);
    let line = out
        .lines()
        .next()
        .unwrap_or_else(|| panic!("no peer in wg show {field}"));
    line.split('\t').skip(1).map(str::to_owned).collect()
}

/// The pid of the only `vpn` daemon in `ns` (its UAPI socket cleaner, `vpn-sock-clean`, is
/// the namespace's other process).
fn daemon_pid(ns: &str) -> u32 {
    let pids = sh(&["ip", "netns", "pids", ns]);
    let pids: Vec<u32> = pids
        .split_whitespace()
        .filter_map(|p| p.parse().ok())
        .filter(|p| {
            std::fs::read_to_string(format!("/proc/{p}/comm")).is_ok_and(|c| c.trim() == "vpn")
        })
        .collect();
    assert_eq!(pids.len(), 1, "one daemon in {ns}: {pids:?}");
    pids[0]
}

fn link_exists(ns: &str, ifname: &str) -> bool {
    run(&["ip", "-n", ns, "link", "show", ifname])
        .status
        .success()
}

#[test]
fn daemons_configured_by_wg_carry_traffic_and_stop_cleanly() {
    if let Ok(mode) = std::env::var(HELPER_ENV) {
        helper(&mode);
        return;
    }
    if let Some(why) = skip_reason(&["ip", "ping", "wg"]) {
        println!("skipping: {why}");
        return;
    }
    let mut lab = Lab::new("p", "vpnd", "wt");
    let (na, nb) = (lab.netns("a"), lab.netns("b"));
    let (ia, ib) = (lab.ifname("a"), lab.ifname("b"));
    let (va, vb) = (format!("v{}a", lab.tag), format!("v{}b", lab.tag));
    sh(&[
        "ip", "-n", &na, "link", "add", &va, "type", "veth", "peer", "name", &vb, "netns", &nb,
    ]);
    sh(&["ip", "-n", &na, "addr", "add", "198.18.0.1/24", "dev", &va]);
    sh(&["ip", "-n", &nb, "addr", "add", "198.18.0.2/24", "dev", &vb]);
    sh(&["ip", "-n", &na, "link", "set", &va, "up"]);
    sh(&["ip", "-n", &nb, "link", "set", &vb, "up"]);

    // Detached start: when `vpn <if>` returns 0, the interface and the socket exist.
    for (ns, ifname) in [(&na, &ia), (&nb, &ib)] {
        let out = run(&["ip", "netns", "exec", ns, VPN, ifname]);
        assert!(
            out.status.success(),
            "vpn {ifname}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(sock(ifname).exists(), "socket of {ifname} exists on return");
        assert!(link_exists(ns, ifname), "{ifname} exists on return");
    }
    let pid_a = daemon_pid(&na);
    let pid_b = daemon_pid(&nb);
    // A second daemon for a running interface fails with one clear line.
    let dup = run(&["ip", "netns", "exec", &na, VPN, &ia]);
    assert!(!dup.status.success());
    let err = String::from_utf8_lossy(&dup.stderr);
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(!exited(pid_a), "the first daemon survives a second start");

    let key_a = sh(&["wg", "genkey"]);
    let key_b = sh(&["wg", "genkey"]);
    let pub_of = |k: &str| {
        let mut c = Command::new("wg")
            .arg("pubkey")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        c.stdin.take().unwrap().write_all(k.as_bytes()).unwrap();
        let out = c.wait_with_output().unwrap();
        String::from_utf8(out.stdout).unwrap().trim().to_owned()
    };
    let (pub_a, pub_b) = (pub_of(&key_a), pub_of(&key_b));
    // `vpn pubkey` agrees with `wg pubkey`.
    let mut c = Command::new(VPN)
        .arg("pubkey")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    c.stdin.take().unwrap().write_all(key_a.as_bytes()).unwrap();
    assert_eq!(
        String::from_utf8(c.wait_with_output().unwrap().stdout)
            .unwrap()
            .trim(),
        pub_a
    );

    // A with `wg set`, B with `wg setconf`.
    let key_file = lab.file("a.key", &key_a);
    sh(&[
        "ip",
        "netns",
        "exec",
        &na,
        "wg",
        "set",
        &ia,
        "private-key",
        &key_file,
        "listen-port",
        "51820",
        "peer",
        &pub_b,
        "allowed-ips",
        "100.64.0.2/32,fd00::2/128",
        "endpoint",
        "198.18.0.2:51820",
    ]);
    let conf_b = lab.file(
        "b.conf",
        &format!(
            "[Interface]\nPrivateKey = {}\nListenPort = 51820\n\n[Peer]\nPublicKey = {pub_a}\n\
             AllowedIPs = 100.64.0.1/32, fd00::1/128\nEndpoint = 198.18.0.1:51820\nPersistentKeepalive = 25\n",
            key_b.trim()
        ),
    );
    sh(&["ip", "netns", "exec", &nb, "wg", "setconf", &ib, &conf_b]);
    for (ns, ifname, v4, v6) in [
        (&na, &ia, "100.64.0.1/24", "fd00::1/64"),
        (&nb, &ib, "100.64.0.2/24", "fd00::2/64"),
    ] {
        sh(&["ip", "-n", ns, "addr", "add", v4, "dev", ifname]);
        sh(&["ip", "-n", ns, "addr", "add", v6, "dev", ifname, "nodad"]);
        sh(&["ip", "-n", ns, "link", "set", ifname, "up"]);
    }

    for ns in [&na, &nb] {
        wait_for(
            "the device to come up with the link",
            Duration::from_secs(10),
            || udp_bound(ns, 51820),
        );
    }
    ping(&na, "100.64.0.2");
    ping(&nb, "100.64.0.1");
    ping(&na, "fd00::2");
    ping(&nb, "fd00::1");
    tcp_transfer(&na, &nb, "100.64.0.2:7001".parse().unwrap());
    tcp_transfer(&nb, &na, "[fd00::1]:7002".parse().unwrap());

    // What `wg show` reads back.
    let hs = wg_field(&na, &ia, "latest-handshakes");
    let hs: u64 = hs[0].parse().unwrap();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    assert!(
        hs > 0 && hs <= now && now - hs < 120,
        "latest handshake {hs}, now {now}"
    );
    let transfer = wg_field(&na, &ia, "transfer");
    let (rx, tx): (u64, u64) = (transfer[0].parse().unwrap(), transfer[1].parse().unwrap());
    assert!(
        rx > TRANSFER as u64 && tx > TRANSFER as u64,
        "rx {rx} tx {tx}"
    );
    assert_eq!(wg_field(&na, &ia, "endpoints"), ["198.18.0.2:51820"]);
    assert_eq!(wg_field(&nb, &ib, "persistent-keepalive"), ["25"]);
    assert_eq!(
        sh(&["ip", "netns", "exec", &na, "wg", "show", &ia, "listen-port"]).trim(),
        "51820"
    );
    let text = sh(&["ip", "netns", "exec", &na, "wg", "show", &ia]);
    assert!(
        text.contains(&format!("public key: {}", pub_of(&key_a))),
        "{text}"
    );
    assert!(text.contains("latest handshake:"), "{text}");

    // `wg showconf` round trip: feeding it back changes nothing.
    let conf = sh(&["ip", "netns", "exec", &na, "wg", "showconf", &ia]);
    for want in [
        format!("PrivateKey = {}", key_a.trim()),
        "ListenPort = 51820".to_owned(),
        format!("PublicKey = {pub_b}"),
        "Endpoint = 198.18.0.2:51820".to_owned(),
        "AllowedIPs = 100.64.0.2/32, fd00::2/128".to_owned(),
    ] {
        assert!(conf.contains(&want), "{want} missing in showconf:\n{conf}");
    }
    let conf_file = lab.file("a-showconf.conf", &conf);
    sh(&["ip", "netns", "exec", &na, "wg", "setconf", &ia, &conf_file]);
    assert_eq!(
        sh(&["ip", "netns", "exec", &na, "wg", "showconf", &ia]),
        conf
    );
    ping(&na, "100.64.0.2");

    // `vpn show`: wg's fields plus batching.
    let show = sh(&[VPN, "show", &ia]);
    for want in [
        format!("interface: {ia}"),
        format!("peer: {pub_b}"),
        "listening port: 51820".to_owned(),
        "endpoint: 198.18.0.2:51820".to_owned(),
        "allowed ips: 100.64.0.2/32, fd00::2/128".to_owned(),
        "latest handshake: ".to_owned(),
        " received, ".to_owned(),
        "batching:".to_owned(),
        "packets per read".to_owned(),
    ] {
        assert!(show.contains(&want), "{want} missing in vpn show:\n{show}");
    }
    assert!(!show.contains("year"), "{show}");
    let ifaces = sh(&[VPN, "show", "interfaces"]);
    let names: Vec<&str> = ifaces.split_whitespace().collect();
    assert!(
        names.contains(&ia.as_str()) && names.contains(&ib.as_str()),
        "{ifaces}"
    );

    // Removing the socket stops A (its interface goes with it).
    std::fs::remove_file(sock(&ia)).unwrap();
    wait_for(
        "daemon A to exit after its socket was removed",
        Duration::from_secs(10),
        || exited(pid_a),
    );
    wait_for("interface A to disappear", Duration::from_secs(5), || {
        !link_exists(&na, &ia)
    });

    // Deleting the interface stops B, and B removes its socket.
    sh(&["ip", "-n", &nb, "link", "del", &ib]);
    wait_for(
        "daemon B to exit after its interface was deleted",
        Duration::from_secs(10),
        || exited(pid_b),
    );
    assert!(!sock(&ib).exists(), "B removed its socket");
}

#[test]
fn foreground_daemon_stops_on_sigterm() {
    if let Some(why) = skip_reason(&["ip", "ping", "wg"]) {
        println!("skipping: {why}");
        return;
    }
    let mut lab = Lab::new("f", "vpnd", "wt");
    let ns = lab.netns("c");
    let ifname = lab.ifname("c");
    let child = Command::new("ip")
        .args(["netns", "exec", &ns, VPN, "--foreground", &ifname])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // `ip netns exec` execs the command: the child's pid is the daemon's.
    let pid = child.id();
    lab.children.push(child);
    wait_for("the socket", Duration::from_secs(10), || {
        sock(&ifname).exists()
    });
    assert!(link_exists(&ns, &ifname));
    let t = Instant::now();
    sh(&["kill", "-TERM", &pid.to_string()]);
    let child = lab.children.last_mut().unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        assert!(Instant::now() < deadline, "daemon ignored SIGTERM");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(status.success(), "exit status {status}");
    assert!(
        t.elapsed() < Duration::from_secs(5),
        "stopping took {:?}",
        t.elapsed()
    );
    assert!(!sock(&ifname).exists(), "socket removed on SIGTERM");
    assert!(!link_exists(&ns, &ifname), "interface gone with the daemon");
    let mut log = String::new();
    let _ = lab
        .children
        .last_mut()
        .unwrap()
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut log);
    assert!(log.contains("signal 15"), "{log}");
}
