//! The daemon's options as the `vpn` binary takes them: `vpn --help` lists every flag with its
//! environment variable, a bad value stops the daemon with an error naming the flag while the
//! subcommands that start no daemon ignore the variables, and (as root, in a namespace) a flag
//! and its variable reach a detached daemon alike, and `vpn up` checks the options and hands
//! those on its command line to its daemon.

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
    use std::process::{Command, Output};

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

    /// A namespace and a wg-quick file with only a private key, for `vpn up` in it.
    struct UpLab {
        ns: String,
        ifname: String,
        conf: String,
        _lab: Lab,
    }

    impl UpLab {
        fn new(tag: &str, prefix: &str, short: &str) -> UpLab {
            let mut lab = Lab::new(tag, prefix, short);
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
            UpLab {
                ns,
                ifname,
                conf,
                _lab: lab,
            }
        }

        /// `vpn <cmd> [flags] <conf>` in the namespace, with the variable `env` if given.
        fn vpn(&self, cmd: &str, flags: &[&str], env: Option<(&str, &str)>) -> Output {
            let mut c = Command::new("ip");
            c.args(["netns", "exec", &self.ns, VPN, cmd]).args(flags);
            if let Some((k, v)) = env {
                c.env(k, v);
            }
            c.arg(&self.conf).output().unwrap()
        }

        /// `out` is `vpn up` refusing a bad memory budget, naming the flag, with no link made.
        fn assert_refused_budget(&self, out: &Output) {
            let err = String::from_utf8_lossy(&out.stderr);
            assert!(!out.status.success(), "{err}");
            assert!(err.contains("--memory-budget"), "{err}");
            let link = run(&["ip", "-n", &self.ns, "link", "show", "dev", &self.ifname]);
            assert!(!link.status.success(), "{} exists", self.ifname);
        }
    }

    /// `vpn up` hands the daemon options on its command line to the daemon it starts
    /// (`--tun-offload=off`: a plain TUN), and refuses a bad one, naming the flag, before
    /// anything exists.
    #[test]
    fn vpn_up_passes_its_daemon_options_to_the_daemon() {
        if let Some(why) = skip_reason(&["ip"]) {
            eprintln!("skipped: {why}");
            return;
        }
        let t = UpLab::new("w", "ow-", "ow");
        t.assert_refused_budget(&t.vpn("up", &["--memory-budget=lots"], None));

        let out = t.vpn("up", &["--tun-offload=off", "--memory-budget", "16M"], None);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{err}");
        let started = err
            .lines()
            .find(|l| l.starts_with("[#] ") && l.ends_with(&format!(" {}", t.ifname)))
            .unwrap_or_else(|| panic!("no daemon command line: {err}"));
        for flag in [" --tun-offload=off ", " --memory-budget=16M "] {
            assert!(started.contains(flag), "{flag} missing: {started}");
        }
        assert!(stats(&t.ifname).contains("tun.offload=0\n"));
        let out = t.vpn("down", &[], None);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// `vpn up` reads the daemon's variables as its daemon would: a bad one stops it, naming
    /// the flag, before the interface exists.
    #[test]
    fn a_bad_variable_stops_vpn_up() {
        if let Some(why) = skip_reason(&["ip"]) {
            eprintln!("skipped: {why}");
            return;
        }
        let t = UpLab::new("u", "op-", "op");
        t.assert_refused_budget(&t.vpn("up", &[], Some(("VPN_MEMORY_BUDGET", "lots"))));
    }
}
