//! `wg-quick` drives our daemon as its userspace implementation, and a bulk TCP transfer shows
//! every offload path active: TSO split on TUN read, UDP GSO on send, UDP GRO on receive, TCP GRO
//! on TUN write (root; skipped with a reason otherwise).

#![forbid(unsafe_code)]
#![cfg(target_os = "linux")]

mod common;
use common::skip_reason;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

const VPN: &str = env!("CARGO_BIN_EXE_vpn");

fn run(args: &[&str]) -> Output {
    let out = Command::new(args[0])
        .args(&args[1..])
        .output()
        .unwrap_or_else(|e| panic!("{args:?}: {e}"));
    assert!(
        out.status.success(),
        "{args:?} failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// Namespaces, configs and daemons of this test; all removed on drop, even after a panic.
struct Setup {
    ns: [String; 2],
    ifs: [String; 2],
    dir: PathBuf,
}

impl Drop for Setup {
    fn drop(&mut self) {
        for (ns, ifname) in self.ns.iter().zip(&self.ifs) {
            let _ = Command::new("ip")
                .args(["-n", ns, "link", "del", ifname])
                .output();
            for pid in ns_pids(ns).split_whitespace() {
                let _ = Command::new("kill").arg(pid).output();
            }
        }
        // The daemons exit once their links are gone; what is left after 2 s is killed.
        let deadline = Instant::now() + Duration::from_secs(2);
        while Instant::now() < deadline && self.ns.iter().any(|ns| !ns_pids(ns).is_empty()) {
            std::thread::sleep(Duration::from_millis(10));
        }
        for (ns, ifname) in self.ns.iter().zip(&self.ifs) {
            for pid in ns_pids(ns).split_whitespace() {
                let _ = Command::new("kill").args(["-9", pid]).output();
            }
            let _ = Command::new("ip").args(["netns", "del", ns]).output();
            let _ = std::fs::remove_file(format!("/var/run/wireguard/{ifname}.sock"));
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The processes in namespace `ns` (none if it is gone).
fn ns_pids(ns: &str) -> String {
    Command::new("ip")
        .args(["netns", "pids", ns])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .unwrap_or_default()
}

fn genkey() -> (String, String) {
    let k = run(&["wg", "genkey"]);
    let key = String::from_utf8(k.stdout).unwrap().trim().to_owned();
    let mut p = Command::new("wg")
        .arg("pubkey")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    p.stdin.take().unwrap().write_all(key.as_bytes()).unwrap();
    let out = p.wait_with_output().unwrap();
    (
        key,
        String::from_utf8(out.stdout).unwrap().trim().to_owned(),
    )
}

/// The number before `what` on the `vpn show` batching line that starts with `line`.
fn stat(show: &str, line: &str, what: &str) -> f64 {
    let l = show
        .lines()
        .find(|l| l.trim_start().starts_with(line))
        .unwrap_or_else(|| panic!("no {line:?} line in:\n{show}"));
    let idx = l
        .find(what)
        .unwrap_or_else(|| panic!("no {what:?} in {l:?}"));
    l[..idx]
        .split([' ', ','])
        .rfind(|w| !w.is_empty())
        .and_then(|w| w.trim_end_matches('%').parse().ok())
        .unwrap_or_else(|| panic!("no number before {what:?} in {l:?}"))
}

#[test]
fn wg_quick_runs_our_daemon_and_offloads_are_active() {
    if let Some(why) = skip_reason(&["ip", "wg", "wg-quick", "iperf3"]) {
        eprintln!("skipped: {why}");
        return;
    }
    let id = std::process::id() % 100_000;
    let s = Setup {
        ns: [format!("vwq{id}a"), format!("vwq{id}b")],
        ifs: [format!("wq{id}a"), format!("wq{id}b")],
        dir: std::env::temp_dir().join(format!("vpn-wg-quick-{id}")),
    };
    std::fs::create_dir_all(&s.dir).unwrap();
    let [na, nb] = [&s.ns[0], &s.ns[1]];
    run(&["ip", "netns", "add", na]);
    run(&["ip", "netns", "add", nb]);
    let (va, vb) = (format!("vq{id}a"), format!("vq{id}b"));
    run(&[
        "ip", "link", "add", &va, "netns", na, "type", "veth", "peer", "name", &vb, "netns", nb,
    ]);
    for (ns, dev, addr) in [(na, &va, "198.18.9.1/24"), (nb, &vb, "198.18.9.2/24")] {
        run(&["ip", "-n", ns, "addr", "add", addr, "dev", dev]);
        run(&["ip", "-n", ns, "link", "set", dev, "up"]);
        run(&["ip", "-n", ns, "link", "set", "lo", "up"]);
    }
    let (ka, pa) = genkey();
    let (kb, pb) = genkey();
    let conf = |key: &str, addr: &str, peer: &str, ep: &str, allowed: &str| {
        format!(
            "[Interface]\nPrivateKey = {key}\nListenPort = 51820\nAddress = {addr}\n\n\
             [Peer]\nPublicKey = {peer}\nEndpoint = {ep}:51820\nAllowedIPs = {allowed}\n"
        )
    };
    let fa = s.dir.join(format!("{}.conf", s.ifs[0]));
    let fb = s.dir.join(format!("{}.conf", s.ifs[1]));
    std::fs::write(
        &fa,
        conf(&ka, "100.64.9.1/24", &pb, "198.18.9.2", "100.64.9.2/32"),
    )
    .unwrap();
    std::fs::write(
        &fb,
        conf(&kb, "100.64.9.2/24", &pa, "198.18.9.1", "100.64.9.1/32"),
    )
    .unwrap();
    for (ns, f) in [(na, &fa), (nb, &fb)] {
        let out = Command::new("ip")
            .args(["netns", "exec", ns, "wg-quick", "up"])
            .arg(f)
            .env("WG_QUICK_USERSPACE_IMPLEMENTATION", VPN)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "wg-quick up: {err}");
        assert!(err.contains(VPN), "wg-quick ran our daemon:\n{err}");
    }
    // The handshake, then bulk TCP A -> B.
    let deadline = Instant::now() + Duration::from_secs(20);
    while !Command::new("ip")
        .args([
            "netns",
            "exec",
            na,
            "ping",
            "-c",
            "1",
            "-W",
            "1",
            "100.64.9.2",
        ])
        .output()
        .unwrap()
        .status
        .success()
    {
        assert!(Instant::now() < deadline, "no ping through the tunnel");
    }
    let mut server = Command::new("ip")
        .args([
            "netns",
            "exec",
            nb,
            "iperf3",
            "-s",
            "-1",
            "-B",
            "100.64.9.2",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // The server listens before the client connects (a fixed sleep can be too short on a
    // loaded machine).
    let deadline = Instant::now() + Duration::from_secs(10);
    while !String::from_utf8_lossy(
        &Command::new("ip")
            .args(["netns", "exec", nb, "ss", "-Hltn", "sport = :5201"])
            .output()
            .unwrap()
            .stdout,
    )
    .contains("5201")
    {
        assert!(Instant::now() < deadline, "iperf3 server never listened");
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = run(&[
        "ip",
        "netns",
        "exec",
        na,
        "timeout",
        "60",
        "iperf3",
        "-c",
        "100.64.9.2",
        "-n",
        "256M",
    ]);
    let _ = server.wait();
    assert!(String::from_utf8_lossy(&out.stdout).contains("receiver"));
    let show = |ns: &str, ifname: &str| {
        String::from_utf8(run(&["ip", "netns", "exec", ns, VPN, "show", ifname]).stdout).unwrap()
    };
    let (sa, sb) = (show(na, &s.ifs[0]), show(nb, &s.ifs[1]));
    // Sender: TUN reads split TSO super-packets and UDP sends carry many datagrams via GSO.
    assert!(stat(&sa, "tun read:", "packets per read") > 4.0, "A:\n{sa}");
    assert!(stat(&sa, "tun read:", "split from GSO") > 50.0, "A:\n{sa}");
    assert!(stat(&sa, "udp send:", "GSO messages") > 0.0, "A:\n{sa}");
    // Receiver: UDP GRO super-datagrams in, TCP GRO merges on the TUN write.
    assert!(
        stat(&sb, "udp receive:", "GRO super-datagrams") > 0.0,
        "B:\n{sb}"
    );
    assert!(stat(&sb, "tun write:", "merged by GRO") > 50.0, "B:\n{sb}");
    // `wg` sees what `wg-quick` configured.
    let wg = String::from_utf8(
        run(&[
            "ip",
            "netns",
            "exec",
            na,
            "wg",
            "show",
            &s.ifs[0],
            "latest-handshakes",
        ])
        .stdout,
    )
    .unwrap();
    assert!(!wg.trim().ends_with("\t0"), "latest handshake set: {wg}");
    for (ns, f, ifname) in [(na, &fa, &s.ifs[0]), (nb, &fb, &s.ifs[1])] {
        let out = Command::new("ip")
            .args(["netns", "exec", ns, "wg-quick", "down"])
            .arg(f)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "wg-quick down: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let deadline = Instant::now() + Duration::from_secs(5);
        while Path::new(&format!("/var/run/wireguard/{ifname}.sock")).exists() {
            assert!(
                Instant::now() < deadline,
                "daemon left its socket after wg-quick down"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}
