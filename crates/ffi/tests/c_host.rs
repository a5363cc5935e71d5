//! The C ABI from C, the way an Android `VpnService` hands over a TUN: `tests/c/host.c`,
//! compiled here with `cc` against the dynamic and the static library, opens `/dev/net/tun`
//! itself and calls `wgTurnOn` with the fd, in a network namespace. Its peer, in a second
//! namespace behind a veth pair, is a `vpn` daemon (`target/debug/vpn`) or wireguard-go.
//!
//! Checked: ping and checked TCP transfers both ways over IPv4 and IPv6 with both peers; the
//! `wgGetConfig` round trip; `wgSetConfig` with bad input returning the error while the tunnel
//! keeps working; the bind's socket fds; `wgBumpSockets` restoring traffic after the host's
//! underlay address changed; 200 turn-on/turn-off cycles leaving no fds, threads or memory
//! behind (measured from /proc and malloc's statistics, and printed).
//!
//! Needs root, `/dev/net/tun`, `ip`, `ping`, `cc`, a built `vpn` (`cargo build -p vpn-cli`;
//! `cargo test --workspace` builds it) and `wireguard-go`; otherwise each test prints why and
//! returns, or fails with `VPN_REQUIRE_ROOT_TESTS=1` (CI). Namespaces are named
//! `ffi<test><pid>…`; a guard removes them, and every process in them, also on panic. Underlay
//! 198.18.<test>.0/24, tunnel 100.64.<test>.0/24 and fd00:<test>::/64.

#[path = "../../../cmd/vpn/tests/common/mod.rs"]
mod common;

use common::{ping, run, sh, skip_reason, wait_for, SOCK_DIR};
use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{self, Receiver};
use std::sync::OnceLock;
use std::time::Duration;
use vpn_proto::keys::PrivateKey;

/// Bytes per TCP transfer: many full-size segments and several batches.
const TRANSFER: usize = 4 << 20;
/// How long any one answer of a helper process may take.
const ANSWER: Duration = Duration::from_secs(30);
const PEER_PORT: u16 = 51820;

/// `target/debug` (or the profile directory this test was built in).
fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable");
    exe.parent()
        .and_then(Path::parent)
        .expect("target/<profile>/deps/<test>")
        .to_path_buf()
}

fn vpn_binary() -> String {
    profile_dir().join("vpn").to_string_lossy().into_owned()
}

/// Compiles `tests/c/host.c` once per linkage; panics with cc's output if it fails.
fn host_binary(static_link: bool) -> &'static str {
    static DYNAMIC: OnceLock<String> = OnceLock::new();
    static STATIC: OnceLock<String> = OnceLock::new();
    let cell = if static_link { &STATIC } else { &DYNAMIC };
    cell.get_or_init(|| {
        let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
        // `cargo test` leaves the static and dynamic library in deps/ (only `cargo build`
        // copies them up a level).
        let lib = profile_dir().join("deps");
        let out = Path::new(env!("CARGO_TARGET_TMPDIR")).join(if static_link {
            "c-host-static"
        } else {
            "c-host-dynamic"
        });
        let mut cc = Command::new("cc");
        cc.args(["-std=c11", "-Wall", "-Wextra", "-Werror", "-O1", "-I"])
            .arg(manifest.join("include"))
            .arg(manifest.join("tests/c/host.c"))
            .arg("-o")
            .arg(&out);
        if static_link {
            // Rust's std needs these from the system when linked statically.
            cc.arg(lib.join("libvpn_ffi.a"))
                .args(["-lpthread", "-ldl", "-lm", "-lrt", "-lgcc_s"]);
        } else {
            cc.arg("-L")
                .arg(&lib)
                .arg("-lvpn_ffi")
                .arg(format!("-Wl,-rpath,{}", lib.display()));
        }
        let o = cc.output().expect("run cc");
        assert!(
            o.status.success(),
            "cc failed: {}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
        out.to_string_lossy().into_owned()
    })
}

/// Why these tests cannot run here, if they cannot.
fn unfit(extra_tools: &[&str]) -> Option<String> {
    let vpn = vpn_binary();
    let mut tools = vec!["ip", "ping", "cc", vpn.as_str()];
    tools.extend_from_slice(extra_tools);
    skip_reason(&tools)
}

/// One test's namespaces, files and processes (removed on drop), and its addresses.
struct Lab {
    lab: common::Lab,
    k: u8,
}

impl Lab {
    /// `k` numbers the test: its namespaces (`ffi<k><pid>…`) and addresses.
    fn new(k: u8) -> Lab {
        Lab {
            lab: common::Lab::new(&k.to_string(), "ffi", "ffi"),
            k,
        }
    }

    fn netns(&mut self, suffix: &str) -> String {
        self.lab.netns(suffix)
    }

    fn ifname(&self, suffix: &str) -> String {
        self.lab.ifname(suffix)
    }

    fn file(&self, name: &str, content: &str) -> String {
        self.lab.file(name, content)
    }

    fn underlay(&self, host: u8) -> String {
        format!("198.18.{}.{host}", self.k)
    }

    fn tunnel_v4(&self, host: u8) -> String {
        format!("100.64.{}.{host}", self.k)
    }

    fn tunnel_v6(&self, host: u8) -> String {
        format!("fd00:{}::{host}", self.k)
    }

    /// Host and peer namespaces joined by a veth pair; the host is .1, the peer .2.
    fn pair(&mut self) -> (String, String, String) {
        let (h, p) = (self.netns("h"), self.netns("p"));
        let (vh, vp) = (self.ifname("vh"), self.ifname("vp"));
        sh(&[
            "ip", "link", "add", &vh, "netns", &h, "type", "veth", "peer", "name", &vp, "netns", &p,
        ]);
        for (ns, dev, i) in [(&h, &vh, 1), (&p, &vp, 2)] {
            sh(&[
                "ip",
                "-n",
                ns,
                "addr",
                "add",
                &format!("{}/24", self.underlay(i)),
                "dev",
                dev,
            ]);
            sh(&["ip", "-n", ns, "link", "set", dev, "up"]);
        }
        (h, p, vh)
    }

    /// Gives a tunnel interface its addresses (.i), MTU 1420, and brings it up, as a
    /// VpnService builder or wg-quick would.
    fn tunnel_addrs(&self, ns: &str, dev: &str, i: u8) {
        let v4 = format!("{}/24", self.tunnel_v4(i));
        let v6 = format!("{}/64", self.tunnel_v6(i));
        sh(&["ip", "-n", ns, "addr", "add", &v4, "dev", dev]);
        sh(&["ip", "-n", ns, "addr", "add", &v6, "dev", dev, "nodad"]);
        sh(&["ip", "-n", ns, "link", "set", dev, "mtu", "1420", "up"]);
    }

    /// Starts a userspace WireGuard daemon (`vpn` or `wireguard-go`) for `ifname` in `ns`
    /// and waits for its UAPI socket.
    fn daemon(&mut self, kind: Peer, ns: &str, ifname: &str) {
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", ns]);
        match kind {
            Peer::Vpn => cmd.args([vpn_binary().as_str(), "--foreground", ifname]),
            Peer::WireguardGo => cmd.args(["env", "LOG_LEVEL=error", "wireguard-go", "-f", ifname]),
        };
        let child = cmd
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        self.lab.children.push(child);
        let sock = uapi_socket(ifname);
        wait_for(
            &format!("{ifname}'s UAPI socket"),
            Duration::from_secs(10),
            || sock.exists(),
        );
    }
}

#[derive(Clone, Copy, Debug)]
enum Peer {
    Vpn,
    WireguardGo,
}

fn uapi_socket(ifname: &str) -> PathBuf {
    Path::new(SOCK_DIR).join(format!("{ifname}.sock"))
}

/// A UAPI `set` on a daemon's socket; panics unless it answers `errno=0`.
fn uapi_set(ifname: &str, body: &str) {
    let mut s = UnixStream::connect(uapi_socket(ifname)).expect("connect to the UAPI socket");
    s.set_read_timeout(Some(ANSWER)).unwrap();
    write!(s, "set=1\n{body}\n").unwrap();
    let mut answer = String::new();
    let mut buf = [0u8; 256];
    while !answer.ends_with("\n\n") {
        let n = s.read(&mut buf).expect("UAPI answer");
        assert!(n > 0, "UAPI socket closed after {answer:?}");
        answer.push_str(&String::from_utf8_lossy(&buf[..n]));
    }
    assert_eq!(answer, "errno=0\n\n", "set {body}");
}

/// A deterministic key per (test, role).
fn key(k: u8, role: u8) -> PrivateKey {
    let mut b = [0u8; 32];
    b[0] = k;
    b[1] = role;
    b[31] = 0x40;
    PrivateKey::from_bytes(b)
}

/// The C host running a tunnel: commands on its stdin, answers line by line (bounded in time).
struct Host {
    child: Child,
    stdin: ChildStdin,
    lines: Receiver<String>,
    /// The library's log lines.
    log: Receiver<String>,
    tun: String,
    /// The `BUDGET <bytes> <result>` line of a host started with a memory budget.
    budget: Option<String>,
}

impl Host {
    /// Starts `host tunnel` in `ns` (with `wgSetMemoryBudget(budget)` first, if given); returns
    /// once it reported its handle.
    fn start(bin: &str, ns: &str, tun: &str, settings: &str, budget: Option<&str>) -> Host {
        let mut child = Command::new("ip")
            .args(["netns", "exec", ns, bin, "tunnel", tun, settings])
            .args(budget)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start the C host");
        let stdin = child.stdin.take().unwrap();
        let (tx, lines) = mpsc::channel();
        let out = child.stdout.take().unwrap();
        std::thread::spawn(move || {
            for l in BufReader::new(out).lines().map_while(Result::ok) {
                if tx.send(l).is_err() {
                    break;
                }
            }
        });
        // The library's log lines, shown with the test's output.
        let err = child.stderr.take().unwrap();
        let (log_tx, log) = mpsc::channel();
        std::thread::spawn(move || {
            for l in BufReader::new(err).lines().map_while(Result::ok) {
                eprintln!("c-host: {l}");
                let _ = log_tx.send(l);
            }
        });
        let mut h = Host {
            child,
            stdin,
            lines,
            log,
            tun: tun.to_owned(),
            budget: None,
        };
        if budget.is_some() {
            h.budget = Some(h.line());
        }
        assert_eq!(h.line(), format!("TUN {tun}"));
        let handle = h.line();
        assert!(handle.starts_with("HANDLE "), "wgTurnOn failed: {handle}");
        h
    }

    fn line(&mut self) -> String {
        self.lines
            .recv_timeout(ANSWER)
            .unwrap_or_else(|e| panic!("the C host did not answer: {e}"))
    }

    fn command(&mut self, cmd: &str) -> String {
        writeln!(self.stdin, "{cmd}").expect("write to the C host");
        self.line()
    }

    /// `wgGetConfig`'s text.
    fn get(&mut self) -> String {
        writeln!(self.stdin, "get").expect("write to the C host");
        let mut text = String::new();
        loop {
            let l = self.line();
            if l == "END" {
                return text;
            }
            text.push_str(&l);
            text.push('\n');
        }
    }

    /// `wgSetConfig`'s result.
    fn set(&mut self, file: &str) -> i64 {
        let r = self.command(&format!("set {file}"));
        r.strip_prefix("RESULT ")
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("bad answer {r}"))
    }

    /// `wgTurnOff`, and the process's exit.
    fn off(mut self) {
        assert_eq!(self.command("off"), "OFF");
        let status = self.child.wait().unwrap();
        assert!(status.success(), "the C host exited with {status}");
    }
}

/// The values of `key` in a UAPI dump.
fn values<'a>(dump: &'a str, key: &str) -> Vec<&'a str> {
    dump.lines()
        .filter_map(|l| l.split_once('='))
        .filter(|(k, _)| *k == key)
        .map(|(_, v)| v)
        .collect()
}

fn number(dump: &str, key: &str) -> u64 {
    values(dump, key)
        .first()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// A checked TCP transfer of [`TRANSFER`] bytes from `from` to `addr`, served in `to`, both
/// ends being the C host program's TCP modes.
fn tcp_transfer(bin: &str, from: &str, to: &str, addr: &str) {
    let size = TRANSFER.to_string();
    let mut server = Command::new("timeout")
        .args([
            "60",
            "ip",
            "netns",
            "exec",
            to,
            bin,
            "tcp-serve",
            addr,
            "5201",
            &size,
        ])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(server.stdout.take().unwrap());
    let mut first = String::new();
    out.read_line(&mut first).unwrap();
    assert_eq!(first.trim(), "LISTENING", "TCP server in {to}");
    let client = Command::new("timeout")
        .args([
            "60", "ip", "netns", "exec", from, bin, "tcp-send", addr, "5201", &size,
        ])
        .output()
        .unwrap();
    let reply = String::from_utf8_lossy(&client.stdout);
    let status = server.wait().unwrap();
    assert!(
        client.status.success() && reply.trim() == format!("REPLY OK {TRANSFER}"),
        "TCP {from} -> {addr}: {reply}{}",
        String::from_utf8_lossy(&client.stderr)
    );
    assert!(status.success(), "TCP server {addr} failed");
}

/// A tunnel between the C host (in `h`, TUN `tun`) and a peer daemon (in `p`): the peer's
/// settings over its UAPI socket, the host's in a settings file for `wgTurnOn`.
struct Tunnel {
    h: String,
    p: String,
    host_veth: String,
    host_key: PrivateKey,
    peer_key: PrivateKey,
    host: Host,
}

fn tunnel(lab: &mut Lab, kind: Peer, static_link: bool) -> Tunnel {
    tunnel_with_budget(lab, kind, static_link, None)
}

/// [`tunnel`], the C host setting a memory budget before `wgTurnOn`.
fn tunnel_with_budget(
    lab: &mut Lab,
    kind: Peer,
    static_link: bool,
    budget: Option<&str>,
) -> Tunnel {
    let (h, p, host_veth) = lab.pair();
    let (host_key, peer_key) = (key(lab.k, 1), key(lab.k, 2));
    let wg = lab.ifname("w");
    lab.daemon(kind, &p, &wg);
    uapi_set(
        &wg,
        &format!(
            "private_key={}\nlisten_port={PEER_PORT}\npublic_key={}\nallowed_ip={}/32\nallowed_ip={}/128\n",
            peer_key.to_hex(),
            host_key.public_key().to_hex(),
            lab.tunnel_v4(1),
            lab.tunnel_v6(1),
        ),
    );
    lab.tunnel_addrs(&p, &wg, 2);
    let settings = lab.file(
        "host.conf",
        &format!(
            "private_key={}\nreplace_peers=true\npublic_key={}\nendpoint={}:{PEER_PORT}\n\
             replace_allowed_ips=true\nallowed_ip={}/32\nallowed_ip={}/128\n",
            host_key.to_hex(),
            peer_key.public_key().to_hex(),
            lab.underlay(2),
            lab.tunnel_v4(2),
            lab.tunnel_v6(2),
        ),
    );
    let tun = lab.ifname("t");
    let host = Host::start(host_binary(static_link), &h, &tun, &settings, budget);
    lab.tunnel_addrs(&h, &tun, 1);
    Tunnel {
        h,
        p,
        host_veth,
        host_key,
        peer_key,
        host,
    }
}

/// Pings and TCP transfers both ways, over IPv4 and IPv6 inside the tunnel.
fn exchange(lab: &Lab, t: &Tunnel, bin: &str) {
    ping(&t.h, &lab.tunnel_v4(2));
    ping(&t.h, &lab.tunnel_v6(2));
    ping(&t.p, &lab.tunnel_v4(1));
    ping(&t.p, &lab.tunnel_v6(1));
    tcp_transfer(bin, &t.h, &t.p, &lab.tunnel_v4(2));
    tcp_transfer(bin, &t.p, &t.h, &lab.tunnel_v6(1));
}

/// The dump without the lines a `set` does not take (statistics).
fn settable(dump: &str) -> String {
    const STATS: [&str; 4] = [
        "last_handshake_time_sec",
        "last_handshake_time_nsec",
        "tx_bytes",
        "rx_bytes",
    ];
    dump.lines()
        .filter(|l| !STATS.iter().any(|s| l.starts_with(&format!("{s}="))))
        .map(|l| format!("{l}\n"))
        .collect()
}

#[test]
fn c_host_carries_ping_and_tcp_with_a_vpn_daemon_and_its_config_round_trips() {
    if let Some(why) = unfit(&[]) {
        println!("skipping: {why}");
        return;
    }
    let mut lab = Lab::new(1);
    let bin = host_binary(false);
    let mut t = tunnel(&mut lab, Peer::Vpn, false);
    exchange(&lab, &t, bin);

    // wgGetConfig: what was set, plus live statistics.
    let dump = t.host.get();
    assert_eq!(values(&dump, "private_key"), [t.host_key.to_hex()]);
    assert_eq!(
        values(&dump, "public_key"),
        [t.peer_key.public_key().to_hex()]
    );
    assert_eq!(
        values(&dump, "endpoint"),
        [format!("{}:{PEER_PORT}", lab.underlay(2))]
    );
    assert_eq!(
        values(&dump, "allowed_ip"),
        [
            format!("{}/32", lab.tunnel_v4(2)),
            format!("{}/128", lab.tunnel_v6(2))
        ]
    );
    assert!(number(&dump, "tx_bytes") > TRANSFER as u64, "{dump}");
    assert!(number(&dump, "rx_bytes") > TRANSFER as u64, "{dump}");
    assert!(number(&dump, "last_handshake_time_sec") > 0, "{dump}");

    // The bind's sockets, as an Android host would protect() them: on the listen port.
    let port = number(&dump, "listen_port");
    assert!(port > 0);
    assert_eq!(t.host.command("sockets"), format!("SOCKETS {port} {port}"));

    // The dump, statistics removed, recreates the same device.
    let again = lab.file(
        "again.conf",
        &format!("replace_peers=true\n{}", settable(&dump)),
    );
    assert_eq!(t.host.set(&again), 0);
    assert_eq!(settable(&t.host.get()), settable(&dump));

    // Bad input: the IPC error code comes back and the tunnel keeps working.
    let bad_value = lab.file(
        "bad-value.conf",
        &format!(
            "public_key={}\nallowed_ip=100.64.1.300/32\n",
            t.peer_key.public_key().to_hex()
        ),
    );
    assert_eq!(t.host.set(&bad_value), -22, "EINVAL");
    let bad_line = lab.file("bad-line.conf", "this line has no equals sign\n");
    assert_eq!(t.host.set(&bad_line), -71, "EPROTO");
    let bad_key = lab.file("bad-key.conf", "no_such_key=1\n");
    assert_eq!(t.host.set(&bad_key), -22, "EINVAL");
    ping(&t.h, &lab.tunnel_v4(2));
    ping(&t.p, &lab.tunnel_v6(1));
    assert_eq!(settable(&t.host.get()), settable(&dump));

    let (h, tun) = (t.h.clone(), t.host.tun.clone());
    t.host.off();
    // Both fds (the host's and the library's duplicate) are closed: the interface is gone.
    assert!(!run(&["ip", "-n", &h, "link", "show", &tun])
        .status
        .success());
}

/// `wgSetMemoryBudget` from C: 0 (no cap) and 1 MiB or more are taken, a negative value or
/// one below 1 MiB gets -22 (EINVAL); the header's `WG_DEFAULT_MEMORY_BUDGET` (what a host
/// passes to put the default back) and `WG_MIN_MEMORY_BUDGET` are the library's. Needs only
/// `cc`, no root.
#[test]
fn memory_budget_from_c_takes_sizes_and_refuses_bad_values() {
    if Command::new("cc").arg("--version").output().is_err() {
        println!("skipping: no `cc`");
        return;
    }
    let out = Command::new(host_binary(false))
        .args([
            "budget",
            "-1",
            "0",
            "1048575",
            "1048576",
            "16777216",
            "-9223372036854775808",
            "default",
            "min",
        ])
        .output()
        .expect("run the C host");
    assert!(out.status.success(), "{out:?}");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "BUDGET -1 -22\nBUDGET 0 0\nBUDGET 1048575 -22\nBUDGET 1048576 0\n\
         BUDGET 16777216 0\nBUDGET -9223372036854775808 -22\nBUDGET 33554432 0\n\
         BUDGET 1048576 0\n"
    );
}

/// A budget set before `wgTurnOn` is the tunnel's cap (the library logs the cap in force), and
/// the tunnel under it carries traffic; a bad value after it leaves the next tunnel's cap alone.
#[test]
fn c_host_memory_budget_caps_the_tunnel_it_turns_on() {
    if let Some(why) = unfit(&[]) {
        println!("skipping: {why}");
        return;
    }
    let mut lab = Lab::new(5);
    let bin = host_binary(true);
    let t = tunnel_with_budget(&mut lab, Peer::Vpn, true, Some("16777216"));
    assert_eq!(t.host.budget.as_deref(), Some("BUDGET 16777216 0"));
    let started = loop {
        let l = t
            .host
            .log
            .recv_timeout(ANSWER)
            .expect("no \"device started\" log line");
        if l.contains("device started") {
            break l;
        }
    };
    assert!(
        started.contains("packet memory cap 16777216 bytes"),
        "{started}"
    );
    exchange(&lab, &t, bin);
    t.host.off();
}

#[test]
fn c_host_carries_ping_and_tcp_with_wireguard_go() {
    if let Some(why) = unfit(&["wireguard-go"]) {
        println!("skipping: {why}");
        return;
    }
    let mut lab = Lab::new(2);
    let bin = host_binary(false);
    let t = tunnel(&mut lab, Peer::WireguardGo, false);
    exchange(&lab, &t, bin);
    t.host.off();
}

#[test]
fn bump_sockets_restores_traffic_after_the_host_underlay_address_changes() {
    if let Some(why) = unfit(&[]) {
        println!("skipping: {why}");
        return;
    }
    let mut lab = Lab::new(3);
    let mut t = tunnel(&mut lab, Peer::Vpn, true);
    ping(&t.h, &lab.tunnel_v4(2));
    // The peer pings last: the host answers (so it owes no keepalive) and the peer's own
    // keepalive, 10 s later, is the last packet. Once it arrived no timer of either side is
    // pending, and only the host sending something can tell the peer a new address.
    ping(&t.p, &lab.tunnel_v4(1));
    let rx = number(&t.host.get(), "rx_bytes");
    wait_for("the peer's keepalive", Duration::from_secs(20), || {
        number(&t.host.get(), "rx_bytes") > rx
    });

    let (old, new) = (
        format!("{}/24", lab.underlay(1)),
        format!("{}/24", lab.underlay(3)),
    );
    sh(&["ip", "-n", &t.h, "addr", "del", &old, "dev", &t.host_veth]);
    sh(&["ip", "-n", &t.h, "addr", "add", &new, "dev", &t.host_veth]);
    let before = run(&[
        "ip",
        "netns",
        "exec",
        &t.p,
        "ping",
        "-c",
        "2",
        "-W",
        "1",
        &lab.tunnel_v4(1),
    ]);
    assert!(
        !before.status.success(),
        "the peer still reaches the host at its old address"
    );

    assert_eq!(t.host.command("bump"), "OK");
    ping(&t.p, &lab.tunnel_v4(1));
    ping(&t.p, &lab.tunnel_v6(1));
    let dump = t.host.get();
    assert!(
        number(&dump, "listen_port") > 0,
        "the bind is open again: {dump}"
    );
    t.host.off();
}

/// `MEASURE <when> k=v …` lines of the cycles run, by `when`.
fn measurements(out: &str) -> HashMap<String, HashMap<String, i64>> {
    out.lines()
        .filter_map(|l| l.strip_prefix("MEASURE "))
        .filter_map(|l| {
            let mut words = l.split_whitespace();
            let when = words.next()?.to_owned();
            let kv = words
                .filter_map(|w| w.split_once('='))
                .filter_map(|(k, v)| Some((k.to_owned(), v.parse().ok()?)))
                .collect();
            Some((when, kv))
        })
        .collect()
}

#[test]
fn two_hundred_turn_on_off_cycles_leave_no_fds_threads_or_memory_behind() {
    const CYCLES: u32 = 200;
    const WARM_UP: u32 = 20;
    /// malloc'ed bytes the run may hold on to after the warm-up: allocator caches (the main
    /// thread's tcache) move by a few KiB; one leaked tunnel holds more than 64 KiB.
    const HEAP_SLACK: i64 = 64 << 10;
    if let Some(why) = unfit(&[]) {
        println!("skipping: {why}");
        return;
    }
    let mut lab = Lab::new(4);
    let ns = lab.netns("c");
    let settings = lab.file(
        "cycle.conf",
        &format!(
            "private_key={}\nreplace_peers=true\npublic_key={}\nendpoint=198.18.4.2:{PEER_PORT}\n\
             allowed_ip=100.64.4.2/32\npersistent_keepalive_interval=1\n",
            key(4, 1).to_hex(),
            key(4, 2).public_key().to_hex(),
        ),
    );
    let tun = lab.ifname("t");
    let out = Command::new("timeout")
        .args([
            "300",
            "ip",
            "netns",
            "exec",
            &ns,
            host_binary(true),
            "cycles",
            &tun,
            &settings,
        ])
        .args([CYCLES.to_string(), WARM_UP.to_string()])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "cycles failed: {stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let m = measurements(&stdout);
    let (before, warm, after) = (&m["before"], &m["warm"], &m["after"]);
    println!(
        "{CYCLES} turn-on/turn-off cycles: fds {} -> {} -> {}, threads {} -> {} -> {}, \
         RSS {} -> {} -> {} KiB, malloc'ed bytes {} -> {} -> {} (before, after {WARM_UP}, \
         after {CYCLES}); {:+} bytes over the last {} cycles",
        before["fds"],
        warm["fds"],
        after["fds"],
        before["threads"],
        warm["threads"],
        after["threads"],
        before["rss_kib"],
        warm["rss_kib"],
        after["rss_kib"],
        before["heap"],
        warm["heap"],
        after["heap"],
        after["heap"] - warm["heap"],
        CYCLES - WARM_UP,
    );
    assert_eq!(after["fds"], before["fds"], "fds left open");
    assert_eq!(after["threads"], before["threads"], "threads left running");
    assert!(
        after["heap"] - warm["heap"] < HEAP_SLACK,
        "memory grows with cycles"
    );
    assert!(stdout.contains("INTERFACE gone"), "{stdout}");
}
