//! `vpn up` / `vpn down` end to end: two network namespaces joined by a veth pair, one
//! tunnel each side, a ping through it, then teardown.
//!
//! Needs root, `/dev/net/tun`, `ip` and `ping`; otherwise it prints why and passes without
//! checking anything. Set `VPN_DAEMON` to test against another daemon (e.g. wireguard-go).
//! Namespaces, leftover processes and files are removed by a guard, also on panic.

#![forbid(unsafe_code)]

mod common;
use common::{sh, skip_reason};
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use vpn_config::PrivateKey;

const VPN: &str = env!("CARGO_BIN_EXE_vpn");

/// Everything the test creates, torn down in `drop`.
struct Lab {
    ns: [String; 2],
    ifname: [String; 2],
    dir: PathBuf,
}

impl Lab {
    fn new() -> Lab {
        let id = std::process::id() % 10_000_000;
        let lab = Lab {
            ns: [format!("vq{id}a"), format!("vq{id}b")],
            ifname: [format!("vq{id}a"), format!("vq{id}b")],
            dir: std::env::temp_dir().join(format!("vpn-quick-netns-{id}")),
        };
        fs::create_dir_all(&lab.dir).unwrap();
        for ns in &lab.ns {
            sh(&["ip", "netns", "add", ns]);
            sh(&["ip", "-n", ns, "link", "set", "lo", "up"]);
        }
        let (a, b) = (&lab.ns[0], &lab.ns[1]);
        sh(&[
            "ip", "-n", a, "link", "add", "veth0", "type", "veth", "peer", "name", "veth1",
            "netns", b,
        ]);
        sh(&[
            "ip",
            "-n",
            a,
            "address",
            "add",
            "198.18.7.1/24",
            "dev",
            "veth0",
        ]);
        sh(&[
            "ip",
            "-n",
            b,
            "address",
            "add",
            "198.18.7.2/24",
            "dev",
            "veth1",
        ]);
        sh(&["ip", "-n", a, "link", "set", "veth0", "up"]);
        sh(&["ip", "-n", b, "link", "set", "veth1", "up"]);
        lab
    }

    /// `ip netns exec NS vpn <args>`, stdout/stderr to files so a daemon that keeps them open
    /// cannot block us.
    fn vpn(&self, side: usize, args: &[&str]) -> (Output, String) {
        let log = self
            .dir
            .join(format!("log-{side}-{}", args.join("-").replace('/', "_")));
        let out_file = fs::File::create(&log).unwrap();
        let status = Command::new("ip")
            .args(["netns", "exec", &self.ns[side], VPN])
            .args(args)
            .stdin(Stdio::null())
            .stdout(out_file.try_clone().unwrap())
            .stderr(out_file)
            .status()
            .unwrap();
        let text = fs::read_to_string(&log).unwrap_or_default();
        (
            Output {
                status,
                stdout: Vec::new(),
                stderr: Vec::new(),
            },
            text,
        )
    }

    fn socket(&self, side: usize) -> PathBuf {
        PathBuf::from(format!("/var/run/wireguard/{}.sock", self.ifname[side]))
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        for ns in &self.ns {
            // Only processes inside our own namespaces: the daemons this test started.
            if let Ok(out) = Command::new("ip").args(["netns", "pids", ns]).output() {
                for pid in String::from_utf8_lossy(&out.stdout).split_whitespace() {
                    let _ = Command::new("kill").args(["-9", pid]).status();
                }
            }
            let _ = Command::new("ip").args(["netns", "del", ns]).status();
        }
        for side in 0..2 {
            let _ = fs::remove_file(self.socket(side));
        }
        let _ = fs::remove_dir_all(&self.dir);
    }
}

fn wait_until(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn up_ping_down_between_namespaces() {
    if let Some(why) = skip_reason(&["ip", "ping"]) {
        eprintln!("skipping quick_netns: {why}");
        return;
    }
    let lab = Lab::new();
    let keys = [
        PrivateKey::from_bytes([0x11; 32]),
        PrivateKey::from_bytes([0x22; 32]),
    ];
    let marker = lab.dir.join("hooks");
    // Side A: a plain /32 route, hooks, SaveConfig. Side B: a default route, which goes
    // through the fwmark table and policy rules.
    let conf_a = format!(
        "[Interface]\nPrivateKey = {}\nListenPort = 51820\nAddress = 100.64.7.1/24\nSaveConfig = true\n\
         PostUp = echo up %i >> {m}\nPreDown = echo down %i >> {m}\n\n\
         [Peer]\nPublicKey = {}\nAllowedIPs = 100.64.7.2/32\nEndpoint = 198.18.7.2:51821\n",
        keys[0].to_base64(),
        keys[1].public_key().to_base64(),
        m = marker.display(),
    );
    let conf_b = format!(
        "[Interface]\nPrivateKey = {}\nListenPort = 51821\nAddress = 100.64.7.2/24\nMTU = 1380\n\n\
         [Peer]\nPublicKey = {}\nAllowedIPs = 0.0.0.0/0\nEndpoint = 198.18.7.1:51820\n",
        keys[1].to_base64(),
        keys[0].public_key().to_base64(),
    );
    let path_a = lab.dir.join(format!("{}.conf", lab.ifname[0]));
    let path_b = lab.dir.join(format!("{}.conf", lab.ifname[1]));
    fs::write(&path_a, &conf_a).unwrap();
    fs::write(&path_b, &conf_b).unwrap();
    for p in [&path_a, &path_b] {
        fs::set_permissions(p, fs::Permissions::from_mode(0o600)).unwrap();
    }

    for (side, path) in [(0, &path_a), (1, &path_b)] {
        let (out, log) = lab.vpn(side, &["up", path.to_str().unwrap()]);
        assert!(out.status.success(), "vpn up failed:\n{log}");
        eprintln!("vpn up {}:\n{log}", path.display());
        assert!(
            log.contains(&format!(
                "[#] ip -4 address add 100.64.7.{}/24 dev {}",
                side + 1,
                lab.ifname[side]
            )),
            "{log}"
        );
    }
    // Refuses to bring up an interface that exists.
    let (out, log) = lab.vpn(0, &["up", path_a.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1), "{log}");
    assert!(log.contains("already exists"), "{log}");

    // MTU: auto on A (veth 1500 - 80), explicit on B.
    let link_a = sh(&[
        "ip",
        "-n",
        &lab.ns[0],
        "link",
        "show",
        "dev",
        &lab.ifname[0],
    ]);
    assert!(link_a.contains("mtu 1420"), "{link_a}");
    let link_b = sh(&[
        "ip",
        "-n",
        &lab.ns[1],
        "link",
        "show",
        "dev",
        &lab.ifname[1],
    ]);
    assert!(link_b.contains("mtu 1380"), "{link_b}");
    // B's default route: policy rules and the table.
    let rules_b = sh(&["ip", "-n", &lab.ns[1], "-4", "rule", "show"]);
    assert!(
        rules_b.contains("lookup 51820") && rules_b.contains("suppress_prefixlength 0"),
        "{rules_b}"
    );
    let table_b = sh(&[
        "ip", "-n", &lab.ns[1], "-4", "route", "show", "table", "51820",
    ]);
    assert!(
        table_b.contains(&format!("default dev {}", lab.ifname[1])),
        "{table_b}"
    );

    let ping = Command::new("ip")
        .args([
            "netns",
            "exec",
            &lab.ns[0],
            "ping",
            "-c",
            "3",
            "-i",
            "0.2",
            // A deadline, not a per-reply wait: the first packet waits for the handshake.
            "-w",
            "15",
            "100.64.7.2",
        ])
        .output()
        .unwrap();
    assert!(
        ping.status.success(),
        "ping failed: {}",
        String::from_utf8_lossy(&ping.stdout)
    );
    let ping = Command::new("ip")
        .args([
            "netns",
            "exec",
            &lab.ns[1],
            "ping",
            "-c",
            "2",
            "-i",
            "0.2",
            // A deadline, not a per-reply wait: the first packet waits for the handshake.
            "-w",
            "15",
            "100.64.7.1",
        ])
        .output()
        .unwrap();
    assert!(
        ping.status.success(),
        "ping back failed: {}",
        String::from_utf8_lossy(&ping.stdout)
    );

    for (side, path) in [(0, &path_a), (1, &path_b)] {
        let (out, log) = lab.vpn(side, &["down", path.to_str().unwrap()]);
        assert!(out.status.success(), "vpn down failed:\n{log}");
        eprintln!("vpn down {}:\n{log}", path.display());
        let gone = Command::new("ip")
            .args([
                "-n",
                &lab.ns[side],
                "link",
                "show",
                "dev",
                &lab.ifname[side],
            ])
            .stderr(Stdio::null())
            .output()
            .unwrap();
        assert!(!gone.status.success(), "interface still there after down");
        wait_until("the daemon's socket to go", || !lab.socket(side).exists());
    }
    let rules_b = sh(&["ip", "-n", &lab.ns[1], "-4", "rule", "show"]);
    assert!(
        !rules_b.contains("lookup 51820") && !rules_b.contains("suppress_prefixlength"),
        "{rules_b}"
    );

    let hooks = fs::read_to_string(&marker).unwrap();
    assert_eq!(hooks, format!("up {0}\ndown {0}\n", lab.ifname[0]));
    // SaveConfig rewrote A's file from the running state: same keys and peer, and it parses.
    let saved = fs::read_to_string(&path_a).unwrap();
    let c = vpn_config::parse(&saved).unwrap();
    assert_eq!(c.interface.private_key, keys[0]);
    assert_eq!(c.interface.listen_port, Some(51820));
    assert!(c.interface.save_config);
    assert_eq!(c.interface.addresses[0].to_string(), "100.64.7.1/24");
    assert_eq!(c.peers.len(), 1);
    assert_eq!(c.peers[0].public_key, keys[1].public_key());
    assert_eq!(
        c.peers[0].endpoint.as_ref().unwrap().to_string(),
        "198.18.7.2:51821"
    );

    // A bad config is refused with its line number, before anything is created.
    let bad = lab.dir.join("vqbad.conf");
    fs::write(
        &bad,
        format!(
            "[Interface]\nPrivateKey = {}\nListenPort = nope\n",
            keys[0].to_base64()
        ),
    )
    .unwrap();
    let (out, log) = lab.vpn(0, &["up", bad.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1), "{log}");
    assert!(log.contains("line 3:"), "{log}");
    assert!(!lab.socket(0).exists());
}
