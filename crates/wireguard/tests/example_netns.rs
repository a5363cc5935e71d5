//! `examples/embedded_tunnel.rs` in one network namespace against the `vpn` daemon (`vpn up`)
//! in another, joined by a veth pair: configured from the command line it handshakes, carries
//! pings both ways and a checked TCP echo, and stops on SIGTERM with its counters; configured
//! from a file it carries a ping and stops by itself after `--duration`.
//!
//! Needs root, `/dev/net/tun`, `ip` and `ping`, and the `vpn` binary and the example built next
//! to this test (`cargo test --workspace` builds both; `cargo test -p vpn-wireguard` builds the
//! example, `cargo build -p vpn-cli` the daemon; `--test example_netns` alone builds neither);
//! otherwise it prints why and returns, or fails under `VPN_REQUIRE_ROOT_TESTS=1`. Namespaces (and every process left in
//! them) and files are removed by a guard, also on panic. Names start with `eml`; underlay
//! 198.18.40.0/24, tunnel 100.64.40.0/24 and fd00:40::/64.
//!
//! The TCP endpoints are this test binary itself, re-run inside a namespace with
//! `EML_TEST_HELPER` set (see [`helper`]).

#[path = "../../../cmd/vpn/tests/common/mod.rs"]
mod common;
use common::{run, sh, skip_reason};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{self, Receiver};
use std::time::{Duration, Instant};
use vpn_wireguard::keys;

const HELPER_ENV: &str = "EML_TEST_HELPER";
const TEST_NAME: &str = "embedded_example_tunnels_to_the_vpn_daemon";
/// Bytes echoed through the tunnel: many full-size segments, several batches.
const TRANSFER: usize = 2 << 20;

/// A program cargo built beside this test (`target/<profile>/<rel>`).
fn built(rel: &str) -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    // target/<profile>/deps/<this test>
    exe.parent().unwrap().parent().unwrap().join(rel)
}

/// Why the programs the test runs are missing, as a skip (or a failure where root tests must
/// run).
fn missing_programs() -> Option<String> {
    let missing: Vec<String> = [built("vpn"), built("examples/embedded_tunnel")]
        .iter()
        .filter(|p| !p.exists())
        .map(|p| p.display().to_string())
        .collect();
    if missing.is_empty() {
        return None;
    }
    let why = format!("{} not built (cargo build -p vpn-cli)", missing.join(", "));
    if std::env::var_os("VPN_REQUIRE_ROOT_TESTS").is_some_and(|v| v == "1") {
        panic!("root test cannot run ({why}) but VPN_REQUIRE_ROOT_TESTS=1");
    }
    Some(why)
}

/// Two namespaces joined by a veth pair, a temp dir and the example's process; all removed on
/// drop (every process left in the namespaces is killed first, the daemon included).
struct Lab {
    id: u32,
    ns: [String; 2],
    dir: PathBuf,
    example: Option<Child>,
}

impl Lab {
    fn new() -> Lab {
        let id = std::process::id() % 100_000;
        let lab = Lab {
            id,
            ns: [format!("eml{id}a"), format!("eml{id}b")],
            dir: std::env::temp_dir().join(format!("eml-example-netns-{id}")),
            example: None,
        };
        let _ = std::fs::remove_dir_all(&lab.dir);
        std::fs::create_dir_all(&lab.dir).unwrap();
        for ns in &lab.ns {
            let _ = run(&["ip", "netns", "del", ns]);
            sh(&["ip", "netns", "add", ns]);
            sh(&["ip", "-n", ns, "link", "set", "lo", "up"]);
        }
        let (va, vb) = (format!("eml{id}va"), format!("eml{id}vb"));
        let [a, b] = &lab.ns;
        sh(&[
            "ip", "-n", a, "link", "add", &va, "type", "veth", "peer", "name", &vb, "netns", b,
        ]);
        sh(&["ip", "-n", a, "addr", "add", "198.18.40.1/24", "dev", &va]);
        sh(&["ip", "-n", b, "addr", "add", "198.18.40.2/24", "dev", &vb]);
        sh(&["ip", "-n", a, "link", "set", &va, "up"]);
        sh(&["ip", "-n", b, "link", "set", &vb, "up"]);
        lab
    }

    /// The tunnel interface on side `i` (0: the example, 1: the daemon).
    fn ifname(&self, i: usize) -> String {
        format!("eml{}{}", self.id, ["a", "b"][i])
    }

    fn file(&self, name: &str, content: &str) -> String {
        let p = self.dir.join(name);
        std::fs::write(&p, content).unwrap();
        p.to_string_lossy().into_owned()
    }

    /// Starts the example in namespace A with `args` after the interface name; returns its
    /// stdout lines and waits for its `ready` line.
    fn start_example(&mut self, args: &[&str]) -> Receiver<String> {
        let mut child = Command::new("ip")
            .args(["netns", "exec", &self.ns[0]])
            .arg(built("examples/embedded_tunnel"))
            .arg(self.ifname(0))
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let (tx, rx) = mpsc::channel();
        let out = BufReader::new(child.stdout.take().unwrap());
        std::thread::spawn(move || {
            for line in out.lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        self.example = Some(child);
        let ready = rx
            .recv_timeout(Duration::from_secs(20))
            .expect("the example printed nothing (see its stderr above)");
        assert!(
            ready.starts_with(&format!("ready {}", self.ifname(0))),
            "{ready}"
        );
        rx
    }

    /// Gives the example's interface its addresses and brings it up (the host's job).
    fn address_example_interface(&self) {
        let (ns, ifname) = (&self.ns[0], &self.ifname(0));
        // No duplicate address detection: the v6 address is usable at once.
        for (addr, extra) in [("100.64.40.1/24", None), ("fd00:40::1/64", Some("nodad"))] {
            let mut args = vec!["ip", "-n", ns, "addr", "add", addr, "dev", ifname];
            args.extend(extra);
            sh(&args);
        }
        sh(&["ip", "-n", ns, "link", "set", ifname, "up"]);
    }

    /// Waits up to `timeout` for the example to exit; its status.
    fn wait_example(&mut self, timeout: Duration) -> std::process::ExitStatus {
        let child = self.example.as_mut().expect("example running");
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = child.try_wait().unwrap() {
                self.example = None;
                return status;
            }
            assert!(Instant::now() < deadline, "the example did not stop");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        if let Some(c) = &mut self.example {
            let _ = c.kill();
            let _ = c.wait();
        }
        for ns in &self.ns {
            // Only processes inside our own namespaces: the daemon and helpers this test started.
            if let Ok(out) = Command::new("ip").args(["netns", "pids", ns]).output() {
                for pid in String::from_utf8_lossy(&out.stdout).split_whitespace() {
                    let _ = Command::new("kill").args(["-9", pid]).status();
                }
            }
            let _ = Command::new("ip").args(["netns", "del", ns]).status();
        }
        let _ = std::fs::remove_file(format!("/var/run/wireguard/{}.sock", self.ifname(1)));
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The byte at position `i` of the transfer (not periodic at small strides, so a lost,
/// repeated or reordered segment shows).
fn pattern(i: usize) -> u8 {
    ((i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 56) as u8 ^ (i >> 12) as u8
}

/// Runs inside a namespace when `EML_TEST_HELPER` is set: `echo <addr>` accepts one
/// connection and echoes it; `send <addr>` sends [`TRANSFER`] pattern bytes, reads them back,
/// checks them and prints `HELPER echoed <n>`.
fn helper(mode: &str) {
    let (op, addr) = mode.split_once(' ').expect("helper mode");
    let addr: SocketAddr = addr.parse().expect("helper address");
    match op {
        "echo" => {
            let l = TcpListener::bind(addr).expect("bind");
            println!("HELPER listening");
            let (mut s, _) = l.accept().expect("accept");
            s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
            let mut w = s.try_clone().unwrap();
            std::io::copy(&mut s, &mut w).expect("echo");
        }
        "send" => {
            let mut s =
                TcpStream::connect_timeout(&addr, Duration::from_secs(10)).expect("connect");
            s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
            let mut w = s.try_clone().unwrap();
            let writer = std::thread::spawn(move || {
                let data: Vec<u8> = (0..TRANSFER).map(pattern).collect();
                w.write_all(&data).expect("send");
                w.shutdown(Shutdown::Write).expect("shutdown");
            });
            let mut back = Vec::with_capacity(TRANSFER);
            s.read_to_end(&mut back).expect("read the echo");
            writer.join().unwrap();
            assert_eq!(back.len(), TRANSFER, "echoed byte count");
            if let Some(i) = (0..TRANSFER).find(|&i| back[i] != pattern(i)) {
                panic!("echoed byte {i} differs");
            }
            println!("HELPER echoed {}", back.len());
        }
        other => panic!("unknown helper op {other}"),
    }
}

/// This test binary re-run in `ns` as a helper.
fn helper_command(ns: &str, mode: String) -> Command {
    let mut c = Command::new("ip");
    c.args(["netns", "exec", ns])
        .arg(std::env::current_exe().unwrap())
        .args(["--exact", TEST_NAME, "--nocapture", "--test-threads=1"])
        .env(HELPER_ENV, mode);
    c
}

/// A checked TCP echo of [`TRANSFER`] bytes from namespace `from` to `to_addr` in `to`.
fn tcp_echo(from: &str, to: &str, to_addr: SocketAddr) {
    let mut server = helper_command(to, format!("echo {to_addr}"))
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    // Wait for "listening" so the client's connect does not race the bind.
    let mut out = BufReader::new(server.stdout.take().unwrap());
    let mut line = String::new();
    while !line.contains("HELPER listening") {
        line.clear();
        assert!(
            out.read_line(&mut line).unwrap() > 0,
            "echo helper ended early"
        );
    }
    let client = helper_command(from, format!("send {to_addr}"))
        .output()
        .unwrap();
    let client_out = String::from_utf8_lossy(&client.stdout);
    assert!(
        client.status.success() && client_out.contains(&format!("HELPER echoed {TRANSFER}")),
        "client {from} -> {to_addr}: {client_out}{}",
        String::from_utf8_lossy(&client.stderr)
    );
    assert!(server.wait().unwrap().success(), "echo server {to_addr}");
}

/// Pings `addr` from `ns`: `count` replies within a 15 s deadline (the first packet waits for
/// the handshake).
fn ping(ns: &str, addr: &str, count: &str) {
    sh(&[
        "ip", "netns", "exec", ns, "ping", "-c", count, "-i", "0.2", "-w", "15", addr,
    ]);
}

/// The line the example printed for `peer` when it stopped: (handshake, rx, tx).
fn peer_summary(lines: &Receiver<String>, peer: &str) -> (bool, u64, u64) {
    let prefix = format!("peer {peer}: ");
    let line = lines
        .recv_timeout(Duration::from_secs(5))
        .expect("the example printed no peer line");
    let rest = line
        .strip_prefix(&prefix)
        .unwrap_or_else(|| panic!("{line}"));
    // "handshake true, rx N B, tx M B"
    let f: Vec<&str> = rest.split([' ', ',']).filter(|s| !s.is_empty()).collect();
    (f[1] == "true", f[3].parse().unwrap(), f[6].parse().unwrap())
}

#[test]
fn embedded_example_tunnels_to_the_vpn_daemon() {
    if let Ok(mode) = std::env::var(HELPER_ENV) {
        helper(&mode);
        return;
    }
    if let Some(why) = skip_reason(&["ip", "ping"]).or_else(missing_programs) {
        println!("skipping: {why}");
        return;
    }
    let vpn = built("vpn");
    let vpn = vpn.to_str().unwrap();
    let mut lab = Lab::new();
    let (ns_a, ns_b) = (lab.ns[0].clone(), lab.ns[1].clone());
    let (if_a, if_b) = (lab.ifname(0), lab.ifname(1));
    let (key_a, key_b) = (keys::generate_private_key(), keys::generate_private_key());
    let pub_a = key_a.public_key().to_base64();
    let pub_b = key_b.public_key().to_base64();

    // B: the `vpn` daemon from a wg-quick file (it learns A's endpoint from the handshake).
    let conf_b = lab.file(
        &format!("{if_b}.conf"),
        &format!(
            "[Interface]\nPrivateKey = {}\nListenPort = 51820\n\
             Address = 100.64.40.2/24, fd00:40::2/64\n\n\
             [Peer]\nPublicKey = {pub_a}\nAllowedIPs = 100.64.40.1/32, fd00:40::1/128\n",
            key_b.to_base64()
        ),
    );
    sh(&["ip", "netns", "exec", &ns_b, vpn, "up", &conf_b]);

    // A: the example, configured on its command line.
    let lines = lab.start_example(&[
        "--private-key",
        &key_a.to_base64(),
        "--listen-port",
        "51821",
        "--peer",
        &pub_b,
        "--endpoint",
        "198.18.40.2:51820",
        "--allowed-ip",
        "100.64.40.2/32",
        "--allowed-ip",
        "fd00:40::2/128",
    ]);
    lab.address_example_interface();
    ping(&ns_a, "100.64.40.2", "3");
    ping(&ns_a, "fd00:40::2", "3");
    ping(&ns_b, "100.64.40.1", "3");
    tcp_echo(&ns_a, &ns_b, "100.64.40.2:7001".parse().unwrap());

    // The daemon saw the handshake and learnt the example's endpoint.
    let show = sh(&[vpn, "show", &if_b]);
    for want in [
        format!("peer: {pub_a}"),
        "endpoint: 198.18.40.1:51821".to_owned(),
        "latest handshake: ".to_owned(),
    ] {
        assert!(show.contains(&want), "{want} missing in vpn show:\n{show}");
    }

    // SIGTERM stops it cleanly; it reports what went through, and the interface goes with it.
    let pid = lab.example.as_ref().unwrap().id().to_string();
    sh(&["kill", "-TERM", &pid]);
    let status = lab.wait_example(Duration::from_secs(10));
    assert!(status.success(), "example exit status {status}");
    let (handshake, rx, tx) = peer_summary(&lines, &pub_b);
    println!("example stopped by SIGTERM: handshake {handshake}, rx {rx} B, tx {tx} B");
    println!("vpn show {if_b}:\n{show}");
    assert!(handshake, "the example reports a handshake");
    assert!(
        rx > TRANSFER as u64 && tx > TRANSFER as u64,
        "example counters rx {rx} tx {tx}"
    );
    let link = run(&["ip", "-n", &ns_a, "link", "show", &if_a]);
    assert!(!link.status.success(), "{if_a} left behind");

    // Again from a `wg` configuration file, stopping by itself after --duration.
    let conf_a = lab.file(
        "a.conf",
        &format!(
            "[Interface]\nPrivateKey = {}\nListenPort = 51822\n\n\
             [Peer]\nPublicKey = {pub_b}\nEndpoint = 198.18.40.2:51820\n\
             AllowedIPs = 100.64.40.2/32, fd00:40::2/128\n",
            key_a.to_base64()
        ),
    );
    let lines = lab.start_example(&["--config", &conf_a, "--duration", "10"]);
    lab.address_example_interface();
    ping(&ns_a, "100.64.40.2", "2");
    let status = lab.wait_example(Duration::from_secs(30));
    assert!(status.success(), "example exit status {status}");
    let (handshake, rx, tx) = peer_summary(&lines, &pub_b);
    println!("example stopped after --duration: handshake {handshake}, rx {rx} B, tx {tx} B");
    assert!(handshake && rx > 0 && tx > 0, "rx {rx} tx {tx}");
    let show = sh(&[vpn, "show", &if_b]);
    assert!(show.contains("endpoint: 198.18.40.1:51822"), "{show}");

    sh(&["ip", "netns", "exec", &ns_b, vpn, "down", &conf_b]);
    drop(lab);
}

/// Keys in the example's arguments are the `wg` base64 form; a malformed one is refused with
/// the parser's message and exit status 1, before any interface is asked for (runs without
/// root: `cargo test` builds the examples).
#[test]
fn example_refuses_a_malformed_key_with_a_message() {
    if std::env::var_os(HELPER_ENV).is_some() {
        return;
    }
    let out = Command::new(built("examples/embedded_tunnel"))
        .args(["emlbad0", "--private-key", "not-a-key"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("base64 key must be 44 characters"), "{err}");
}
