//! Helpers shared by the root tests in this directory (each test binary uses a subset).

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// Why a root test cannot run here (not root, no TUN, a tool missing), or `None`. With
/// `VPN_REQUIRE_ROOT_TESTS=1` (CI sets it) a reason is a failure, not a skip: a skipped test
/// must not count as passed where the machine is meant to run it.
pub fn skip_reason(tools: &[&str]) -> Option<String> {
    let why = why_skip(tools)?;
    if std::env::var_os("VPN_REQUIRE_ROOT_TESTS").is_some_and(|v| v == "1") {
        panic!("root test cannot run ({why}) but VPN_REQUIRE_ROOT_TESTS=1");
    }
    Some(why)
}

fn why_skip(tools: &[&str]) -> Option<String> {
    // `id -u` rather than geteuid(): keeps the tests free of unsafe code.
    let uid = Command::new("id").arg("-u").output().ok()?;
    if String::from_utf8_lossy(&uid.stdout).trim() != "0" {
        return Some("not root".into());
    }
    if !Path::new("/dev/net/tun").exists() {
        return Some("no /dev/net/tun".into());
    }
    for tool in tools {
        let found = Command::new("sh")
            .args(["-c", &format!("command -v {tool}")])
            .stdout(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if !found {
            return Some(format!("`{tool}` not installed"));
        }
    }
    None
}

/// Runs a command and returns its output, whatever its status.
pub fn run(args: &[&str]) -> Output {
    Command::new(args[0])
        .args(&args[1..])
        .output()
        .unwrap_or_else(|e| panic!("{args:?}: {e}"))
}

/// Runs a command; panics with its output unless it succeeds; returns stdout.
pub fn sh(args: &[&str]) -> String {
    let out = run(args);
    assert!(
        out.status.success(),
        "{args:?} failed ({}): {}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The directory of the daemons' UAPI sockets.
pub const SOCK_DIR: &str = "/var/run/wireguard";

/// Network namespaces, a temp dir and child processes of one root test, all removed on drop
/// (every process left in a namespace is killed first, so detached daemons die too, and the
/// UAPI sockets of daemons that had to be killed are deleted).
pub struct Lab {
    /// Unique to this lab: the caller's tag and the test process's PID.
    pub tag: String,
    ns_prefix: String,
    if_prefix: String,
    /// The namespaces, in creation order.
    pub ns: Vec<String>,
    /// A scratch directory.
    pub dir: PathBuf,
    /// Processes killed and reaped on drop.
    pub children: Vec<Child>,
}

impl Lab {
    /// Namespaces will be named `<ns_prefix><tag><pid><suffix>`, interfaces
    /// `<if_prefix><tag><pid><suffix>`.
    pub fn new(tag: &str, ns_prefix: &str, if_prefix: &str) -> Lab {
        let tag = format!("{tag}{}", std::process::id());
        let dir = std::env::temp_dir().join(format!("vpn-lab-{if_prefix}{tag}"));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Lab {
            tag,
            ns_prefix: ns_prefix.to_owned(),
            if_prefix: if_prefix.to_owned(),
            ns: Vec::new(),
            dir,
            children: Vec::new(),
        }
    }

    /// Adds a namespace with loopback up; returns its name.
    pub fn netns(&mut self, suffix: &str) -> String {
        let name = format!("{}{}{suffix}", self.ns_prefix, self.tag);
        let _ = run(&["ip", "netns", "del", &name]);
        sh(&["ip", "netns", "add", &name]);
        self.ns.push(name.clone());
        sh(&["ip", "-n", &name, "link", "set", "lo", "up"]);
        name
    }

    /// A unique interface name (≤ 15 bytes) for this lab.
    pub fn ifname(&self, suffix: &str) -> String {
        let n = format!("{}{}{suffix}", self.if_prefix, self.tag);
        assert!(n.len() <= 15, "{n}");
        n
    }

    /// Writes a file into the scratch directory; returns its path.
    pub fn file(&self, name: &str, content: &str) -> String {
        let p = self.dir.join(name);
        std::fs::write(&p, content).unwrap();
        p.to_string_lossy().into_owned()
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        for c in &mut self.children {
            let _ = c.kill();
            let _ = c.wait();
        }
        // SIGTERM first so daemons clean up after themselves, SIGKILL for whatever is left.
        let pids = |ns: &str| -> Vec<String> {
            Command::new("ip")
                .args(["netns", "pids", ns])
                .output()
                .map(|o| {
                    String::from_utf8_lossy(&o.stdout)
                        .split_whitespace()
                        .map(str::to_owned)
                        .collect()
                })
                .unwrap_or_default()
        };
        for signal in ["-TERM", "-KILL"] {
            for ns in &self.ns {
                for pid in pids(ns) {
                    let _ = Command::new("kill").args([signal, &pid]).status();
                }
            }
            let deadline = Instant::now() + Duration::from_secs(2);
            while Instant::now() < deadline && self.ns.iter().any(|ns| !pids(ns).is_empty()) {
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        for ns in &self.ns {
            let _ = Command::new("ip").args(["netns", "del", ns]).status();
        }
        // Sockets of daemons that had to be killed.
        let prefix = format!("{}{}", self.if_prefix, self.tag);
        if let Ok(entries) = std::fs::read_dir(SOCK_DIR) {
            for e in entries.flatten() {
                let name = e.file_name().to_string_lossy().into_owned();
                if name.starts_with(&prefix) && name.ends_with(".sock") {
                    let _ = std::fs::remove_file(e.path());
                }
            }
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Calls `f` every 50 ms until it holds; panics after `timeout`.
pub fn wait_for(what: &str, timeout: Duration, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !f() {
        assert!(
            Instant::now() < deadline,
            "timed out after {timeout:?} waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Pings until a reply comes (the first packet waits for a handshake, which is retried only
/// every 5 s if its first initiation was lost), then requires three replies in a row.
pub fn ping(ns: &str, addr: &str) {
    let deadline = Instant::now() + Duration::from_secs(15);
    while !run(&[
        "ip", "netns", "exec", ns, "ping", "-c", "1", "-W", "1", addr,
    ])
    .status
    .success()
    {
        assert!(Instant::now() < deadline, "no reply from {addr} in {ns}");
    }
    sh(&[
        "ip", "netns", "exec", ns, "ping", "-c", "3", "-i", "0.2", "-W", "3", addr,
    ]);
}
