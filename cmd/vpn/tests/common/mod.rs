//! Helpers shared by the root tests in this directory (each test binary uses a subset).

#![allow(dead_code)]

use std::path::Path;
use std::process::{Command, Output, Stdio};

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
