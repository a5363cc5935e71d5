//! The daemon's options as the `vpn` binary takes them: `vpn --help` lists every flag with its
//! environment variable, a bad value stops the daemon with an error naming the flag while the
//! subcommands that start no daemon ignore the variables, and (as root, in a namespace) a flag
//! and its variable reach a detached daemon alike, and `vpn up`'s daemon gets the variables.

mod common;
use std::process::Command;

const VPN: &str = env!("CARGO_BIN_EXE_vpn");

/// The daemon's flags on every system and the variables that set them too.
const FLAGS: &[(&str, &str)] = &[
    ("--connected-sockets", "VPN_CONNECTED_SOCKETS"),
    ("--connected-open-after", "VPN_CONNECTED_OPEN_AFTER"),
    ("--connected-max-sockets", "VPN_CONNECTED_MAX_SOCKETS"),
    ("--connected-idle-ms", "VPN_CONNECTED_IDLE_MS"),
    ("--memory-budget", "VPN_MEMORY_BUDGET"),
    ("--log-file", "VPN_LOG_FILE"),
];

/// The flags of this system only.
#[cfg(target_os = "linux")]
const OS_FLAGS: &[(&str, &str)] = &[
    ("--udp-offload", "VPN_UDP_OFFLOAD"),
    ("--tun-offload", "VPN_TUN_OFFLOAD"),
];
#[cfg(target_os = "macos")]
const OS_FLAGS: &[(&str, &str)] = &[
    ("--batched-io", "VPN_BATCHED_IO"),
    ("--dont-fragment", "VPN_DONT_FRAGMENT"),
];

#[test]
fn help_lists_every_daemon_option_with_its_variable() {
    let out = Command::new(VPN).arg("--help").output().unwrap();
    assert!(out.status.success());
    let help = String::from_utf8_lossy(&out.stdout);
    for (flag, var) in FLAGS.iter().chain(OS_FLAGS) {
        let line = help
            .lines()
            .find(|l| l.trim_start().starts_with(flag))
            .unwrap_or_else(|| panic!("{flag} missing from --help:\n{help}"));
        assert!(line.contains(&format!("[env: {var}")), "{line}");
    }
}

#[test]
fn a_bad_value_stops_the_daemon_naming_the_flag() {
    for (env, arg, flag) in [
        (Some(("VPN_MEMORY_BUDGET", "lots")), None, "--memory-budget"),
        (None, Some("--memory-budget=16MB"), "--memory-budget"),
        (
            Some(("VPN_CONNECTED_SOCKETS", "maybe")),
            None,
            "--connected-sockets",
        ),
        (
            None,
            Some("--connected-sockets=sometimes"),
            "--connected-sockets",
        ),
    ] {
        let mut cmd = Command::new(VPN);
        cmd.arg("--foreground");
        if let Some((k, v)) = env {
            cmd.env(k, v);
        }
        cmd.args(arg);
        // An interface name no test creates: the parse fails before anything is opened.
        let out = cmd.arg("s7never0").output().unwrap();
        assert!(!out.status.success(), "{env:?} {arg:?} accepted");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(flag), "{env:?} {arg:?}: {err}");
    }
}

/// `vpn` with every daemon variable set to `value`.
fn vpn_with_every_variable(value: &str) -> Command {
    let mut cmd = Command::new(VPN);
    for (_, var) in FLAGS.iter().chain(OS_FLAGS) {
        cmd.env(var, value);
    }
    cmd
}

/// A subcommand that starts no daemon never reads the daemon's variables: a bad one in the
/// environment (a shell that exported it for the daemon) does not stop it.
#[test]
fn a_bad_variable_does_not_stop_a_subcommand() {
    let out = vpn_with_every_variable("garbage")
        .arg("genkey")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let key = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    assert_eq!(key.len(), 44, "{key:?}");
    // `show` of an interface no test creates fails, for the interface's sake alone.
    let out = vpn_with_every_variable("garbage")
        .args(["show", "s7never0"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("s7never0") && !err.contains("--"), "{err}");
    // The daemon form with the same environment still refuses, naming a flag (and, were the
    // options accepted, would stop at the bad `WG_TUN_FD` rather than create a TUN).
    let out = vpn_with_every_variable("garbage")
        .env("WG_TUN_FD", "none")
        .args(["--foreground", "s7never0"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("invalid value 'garbage' for '--"),
        "{err}"
    );
}

/// An empty variable is the default, as `VAR= vpn wg0` meant before the flags: the daemon gets
/// past its options and fails only at the TUN a bad `WG_TUN_FD` names (nothing is opened).
#[test]
fn an_empty_variable_is_not_a_value() {
    let out = vpn_with_every_variable("")
        .env("WG_TUN_FD", "none")
        .args(["--foreground", "s7never0"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(err.contains("WG_TUN_FD=\"none\""), "{err}");
}

/// As root, in a namespace: a detached daemon started with a flag or its variable.
#[cfg(target_os = "linux")]
mod detached {
    use super::common::{run, skip_reason, Lab, SOCK_DIR};
    use super::VPN;
    use std::io::{Read, Write};
    use std::os::unix::net::UnixStream;
    use std::process::Command;

    /// The `stats=1` reply of the daemon serving `ifname`.
    fn stats(ifname: &str) -> String {
        let mut s = UnixStream::connect(format!("{SOCK_DIR}/{ifname}.sock")).unwrap();
        s.write_all(b"stats=1\n\n").unwrap();
        let mut reply = Vec::new();
        let mut buf = [0u8; 4096];
        while !String::from_utf8_lossy(&reply).contains("errno=") {
            let n = s.read(&mut buf).unwrap();
            assert!(n > 0, "connection closed");
            reply.extend_from_slice(&buf[..n]);
        }
        String::from_utf8_lossy(&reply).into_owned()
    }

    /// `--tun-offload=off` and `VPN_TUN_OFFLOAD=0` both give a detached daemon a plain TUN (the
    /// flag travels through the re-executed child); without either the TUN has the header.
    #[test]
    fn flag_and_variable_reach_the_detached_daemon() {
        if let Some(why) = skip_reason(&["ip"]) {
            eprintln!("skipped: {why}");
            return;
        }
        let mut lab = Lab::new("o", "s7-", "s7");
        let ns = lab.netns("n");
        let (by_flag, by_env, default) = (lab.ifname("f"), lab.ifname("e"), lab.ifname("d"));
        let start = |ifname: &str, flag: Option<&str>, env: Option<(&str, &str)>| {
            let mut cmd = Command::new("ip");
            cmd.args(["netns", "exec", &ns, VPN]);
            cmd.args(flag);
            if let Some((k, v)) = env {
                cmd.env(k, v);
            }
            let out = cmd.arg(ifname).output().unwrap();
            assert!(
                out.status.success(),
                "{ifname}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        };
        start(&by_flag, Some("--tun-offload=off"), None);
        start(&by_env, None, Some(("VPN_TUN_OFFLOAD", "0")));
        start(&default, None, None);
        assert!(stats(&by_flag).contains("tun.offload=0\n"));
        assert!(stats(&by_env).contains("tun.offload=0\n"));
        assert!(stats(&default).contains("tun.offload=1\n"));
        for i in [&by_flag, &by_env, &default] {
            let _ = run(&["ip", "-n", &ns, "link", "del", i]);
        }
    }

    /// `vpn up` starts its daemon as `vpn <ifname>`, which inherits the variables: a bad one
    /// stops the daemon, naming the flag, before the interface exists, and `vpn up` fails.
    #[test]
    fn a_bad_variable_stops_the_daemon_vpn_up_starts() {
        if let Some(why) = skip_reason(&["ip"]) {
            eprintln!("skipped: {why}");
            return;
        }
        let mut lab = Lab::new("u", "op-", "op");
        let ns = lab.netns("n");
        let ifname = lab.ifname("u");
        let key = Command::new(VPN).arg("genkey").output().unwrap().stdout;
        let conf = lab.file(
            &format!("{ifname}.conf"),
            &format!(
                "[Interface]\nPrivateKey = {}\n",
                String::from_utf8_lossy(&key).trim()
            ),
        );
        let out = Command::new("ip")
            .args(["netns", "exec", &ns, VPN, "up", &conf])
            .env("VPN_MEMORY_BUDGET", "lots")
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{err}");
        assert!(err.contains("--memory-budget"), "{err}");
        let link = run(&["ip", "-n", &ns, "link", "show", "dev", &ifname]);
        assert!(!link.status.success(), "{ifname} exists");
    }
}
