//! The daemon's options: `vpn --help` lists them, and each can also be given by its environment
//! variable (`VPN_CONNECTED_SOCKETS=1` as `--connected-sockets`), since `wg-quick` starts the
//! daemon as `vpn <ifname>` and passes nothing else. A flag on the command line wins over the
//! variable. Parsed once, by clap, into [`DaemonOptions`]; a bad value stops the daemon with an
//! error that names the flag. Only the daemon form and `vpn up` (which starts one) read them
//! (`main.rs`): the subcommands that start no daemon ignore them.

use clap::parser::ValueSource;
use std::ffi::OsString;
use std::time::Duration;
use vpn_conn::ConnectedOptions;

/// What the daemon's switches choose, before any of it is opened.
#[derive(clap::Args, Clone, Debug, PartialEq, Eq)]
#[command(next_help_heading = "Daemon options (each also read from its environment variable)")]
pub struct DaemonOptions {
    /// Per-peer connected UDP sockets, for peers that carry bulk traffic (`--connected-sockets`
    /// alone turns them on).
    #[arg(
        long,
        env = "VPN_CONNECTED_SOCKETS",
        value_name = "on|off",
        value_parser = parse_switch,
        num_args = 0..=1,
        require_equals = true,
        default_value = "off",
        default_missing_value = "on",
    )]
    pub connected_sockets: bool,

    /// Bytes a peer sends and receives within one idle interval before it gets a connected
    /// socket.
    #[arg(
        long,
        env = "VPN_CONNECTED_OPEN_AFTER",
        value_name = "BYTES",
        value_parser = parse_size::<u64>,
        default_value_t = vpn_conn::connected::DEFAULT_OPEN_AFTER
    )]
    pub connected_open_after: u64,

    /// Most connected sockets at once.
    #[arg(
        long,
        env = "VPN_CONNECTED_MAX_SOCKETS",
        value_name = "N",
        default_value_t = vpn_conn::connected::DEFAULT_MAX_SOCKETS
    )]
    pub connected_max_sockets: usize,

    /// Milliseconds between checks that close the connected sockets of idle peers.
    #[arg(
        long,
        env = "VPN_CONNECTED_IDLE_MS",
        value_name = "MS",
        value_parser = clap::value_parser!(u64).range(1..),
        default_value_t = millis(vpn_conn::connected::DEFAULT_IDLE_INTERVAL)
    )]
    pub connected_idle_ms: u64,

    /// Cap on packet memory (every reader's slabs and the packets in flight, both directions):
    /// bytes with an optional K, M or G suffix, at least 1M; 0 is unbounded.
    #[arg(
        long,
        env = "VPN_MEMORY_BUDGET",
        value_name = "SIZE",
        value_parser = parse_budget,
        default_value = "32M"
    )]
    pub memory_budget: usize,

    /// UDP segmentation and receive offload (GSO/GRO) on the shared sockets; off for paths or
    /// kernels that mishandle them, and for comparisons.
    #[cfg(target_os = "linux")]
    #[arg(
        long,
        env = "VPN_UDP_OFFLOAD",
        value_name = "on|off",
        value_parser = parse_switch,
        num_args = 0..=1,
        require_equals = true,
        default_value = "on",
        default_missing_value = "on"
    )]
    pub udp_offload: bool,

    /// The TUN's virtio-net header (TSO/USO segments in, coalesced segments out); off: a plain
    /// TUN, one packet per read and write.
    #[cfg(target_os = "linux")]
    #[arg(
        long,
        env = "VPN_TUN_OFFLOAD",
        value_name = "on|off",
        value_parser = parse_switch,
        num_args = 0..=1,
        require_equals = true,
        default_value = "on",
        default_missing_value = "on"
    )]
    pub tun_offload: bool,

    /// Batch the shared sockets' I/O with `recvmsg_x`/`sendmsg_x` (a no-op in a build without
    /// the `darwin-spi` feature).
    #[cfg(target_os = "macos")]
    #[arg(
        long,
        env = "VPN_BATCHED_IO",
        value_name = "on|off",
        value_parser = parse_switch,
        num_args = 0..=1,
        require_equals = true,
        default_value = "off",
        default_missing_value = "on"
    )]
    pub batched_io: bool,

    /// `IP_DONTFRAG` on the bind's sockets.
    #[cfg(target_os = "macos")]
    #[arg(
        long,
        env = "VPN_DONT_FRAGMENT",
        value_name = "on|off",
        value_parser = parse_switch,
        num_args = 0..=1,
        require_equals = true,
        default_value = "off",
        default_missing_value = "on"
    )]
    pub dont_fragment: bool,

    /// Where the detached daemon writes its log (stderr); nowhere by default.
    #[arg(long, env = "VPN_LOG_FILE", value_name = "PATH")]
    pub log_file: Option<std::path::PathBuf>,

    /// Linux: the user (name or uid, optionally `:group`; default group: the user's own) the
    /// daemon switches to once its TUN, sockets and UAPI socket exist. Nothing on macOS.
    #[arg(
        long,
        env = "VPN_USER",
        value_name = "USER[:GROUP]",
        default_value = "nobody"
    )]
    pub user: String,

    /// Linux: keep root and every capability after setup, as wireguard-go does (the daemon
    /// otherwise runs as --user with CAP_NET_ADMIN, and CAP_NET_BIND_SERVICE unless
    /// --low-ports=off). Nothing on macOS.
    #[arg(
        long,
        env = "VPN_NO_DROP_PRIVILEGES",
        value_name = "on|off",
        value_parser = parse_switch,
        num_args = 0..=1,
        require_equals = true,
        default_value = "off",
        default_missing_value = "on"
    )]
    pub no_drop_privileges: bool,

    /// Linux: keep CAP_NET_BIND_SERVICE after setup, so `wg set` may move the listen port
    /// below net.ipv4.ip_unprivileged_port_start; off: such a port is refused once the daemon
    /// has given up root. Nothing on macOS.
    #[arg(
        long,
        env = "VPN_LOW_PORTS",
        value_name = "on|off",
        value_parser = parse_switch,
        num_args = 0..=1,
        require_equals = true,
        default_value = "on",
        default_missing_value = "on"
    )]
    pub low_ports: bool,

    /// Linux: no seccomp allowlist and no Landlock ruleset after setup (both are on by
    /// default on x86_64 and aarch64). Nothing on macOS.
    #[arg(
        long,
        env = "VPN_NO_SANDBOX",
        value_name = "on|off",
        value_parser = parse_switch,
        num_args = 0..=1,
        require_equals = true,
        default_value = "off",
        default_missing_value = "on"
    )]
    pub no_sandbox: bool,
}

impl DaemonOptions {
    /// The bind's connected-socket options.
    pub fn connected(&self) -> ConnectedOptions {
        ConnectedOptions {
            enabled: self.connected_sockets,
            open_after: self.connected_open_after,
            max_sockets: self.connected_max_sockets,
            idle_interval: Duration::from_millis(self.connected_idle_ms),
            ..ConnectedOptions::default()
        }
    }
}

/// The daemon options `matches` (of a command that flattens [`DaemonOptions`], as `vpn up`)
/// took from the command line, as `--flag=value` arguments that give a daemon the same
/// options; those that came from a variable or a default are left out (the daemon reads the
/// same variables and has the same defaults). A switch given bare (`--connected-sockets`)
/// passes on as its implied value (`=on`).
pub fn command_line_flags(matches: &clap::ArgMatches) -> Vec<OsString> {
    use clap::Args as _;
    let options = DaemonOptions::augment_args(clap::Command::new("daemon"));
    options
        .get_arguments()
        .filter_map(|arg| {
            let id = arg.get_id().as_str();
            if matches.value_source(id) != Some(ValueSource::CommandLine) {
                return None;
            }
            let value = matches.get_raw(id)?.next_back()?;
            let mut flag = OsString::from(format!("--{}=", arg.get_long()?));
            flag.push(value);
            Some(flag)
        })
        .collect()
}

/// Unsets every option variable of `cmd` that is set but empty, so that `VPN_X= vpn wg0` means
/// the default, as it did when the daemon read the variables itself (clap would hand the empty
/// string to the value parser). Call it before any thread exists.
pub fn forget_empty_variables(cmd: &clap::Command) {
    for var in cmd.get_arguments().filter_map(clap::Arg::get_env) {
        if std::env::var_os(var).is_some_and(|v| v.is_empty()) {
            std::env::remove_var(var);
        }
    }
}

/// An on/off switch: `on`/`off`, `1`/`0`, `true`/`false`, `yes`/`no` (any case).
fn parse_switch(s: &str) -> Result<bool, String> {
    match s.trim().to_ascii_lowercase().as_str() {
        "on" | "1" | "true" | "yes" => Ok(true),
        "off" | "0" | "false" | "no" => Ok(false),
        _ => Err(format!(
            "{s:?} is not on or off (also 1/0, true/false, yes/no)"
        )),
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// A memory budget: a size of at least [`vpn_device::MIN_MEMORY_BUDGET`], or 0 (no cap).
fn parse_budget(s: &str) -> Result<usize, String> {
    match parse_size::<usize>(s)? {
        b if b != 0 && b < vpn_device::MIN_MEMORY_BUDGET => Err(format!(
            "{s:?} is below the least budget, {} KiB (0: no cap)",
            vpn_device::MIN_MEMORY_BUDGET >> 10
        )),
        b => Ok(b),
    }
}

/// A byte count with an optional binary suffix: `16777216`, `16384K`, `16M`, `1G`.
fn parse_size<T: TryFrom<u64>>(s: &str) -> Result<T, String> {
    let bad = || format!("{s:?} is not a size (bytes, or a number with K, M or G: 16M)");
    let t = s.trim();
    let (num, shift) = match t.char_indices().last() {
        Some((i, 'k' | 'K')) => (&t[..i], 10),
        Some((i, 'm' | 'M')) => (&t[..i], 20),
        Some((i, 'g' | 'G')) => (&t[..i], 30),
        _ => (t, 0),
    };
    if num.is_empty() || !num.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad());
    }
    num.parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(1 << shift))
        .and_then(|n| T::try_from(n).ok())
        .ok_or_else(|| format!("{s:?} is too large"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser, Debug)]
    struct Cmd {
        #[command(flatten)]
        opts: DaemonOptions,
        ifname: Option<String>,
    }

    /// The tests here change the process environment one at a time.
    fn env_lock() -> std::sync::MutexGuard<'static, ()> {
        static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
        LOCK.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Parses `args` with only the variables `env` sets (clap reads the process
    /// environment, so this clears every daemon variable first; the tests here parse
    /// one at a time under the lock).
    fn parse(args: &[&str], env: &[(&str, &str)]) -> Result<DaemonOptions, clap::Error> {
        let _held = env_lock();
        let vars = daemon_vars();
        for v in &vars {
            std::env::remove_var(v);
        }
        for (k, v) in env {
            std::env::set_var(k, v);
        }
        let r = Cmd::try_parse_from(std::iter::once("vpn").chain(args.iter().copied()));
        for (k, _) in env {
            std::env::remove_var(k);
        }
        r.map(|c| c.opts)
    }

    /// Every environment variable the options read, from clap's own description of them.
    fn daemon_vars() -> Vec<String> {
        use clap::CommandFactory;
        Cmd::command()
            .get_arguments()
            .filter_map(|a| a.get_env().map(|e| e.to_string_lossy().into_owned()))
            .collect()
    }

    #[test]
    fn defaults_are_the_libraries_defaults() {
        let o = parse(&["wg0"], &[]).unwrap();
        let c = o.connected();
        assert_eq!(
            c,
            ConnectedOptions {
                enabled: false,
                ..ConnectedOptions::default()
            }
        );
        assert_eq!(o.memory_budget, vpn_device::DEFAULT_MEMORY_BUDGET);
        assert_eq!(o.log_file, None);
        assert_eq!(o.user, "nobody");
        assert!(!o.no_drop_privileges && !o.no_sandbox && o.low_ports);
        #[cfg(target_os = "linux")]
        assert!(o.udp_offload && o.tun_offload);
    }

    #[test]
    fn every_variable_is_honoured() {
        let o = parse(
            &["wg0"],
            &[
                ("VPN_CONNECTED_SOCKETS", "1"),
                ("VPN_CONNECTED_OPEN_AFTER", "64K"),
                ("VPN_CONNECTED_MAX_SOCKETS", "8"),
                ("VPN_CONNECTED_IDLE_MS", "1500"),
                ("VPN_MEMORY_BUDGET", "16M"),
                ("VPN_UDP_OFFLOAD", "0"),
                ("VPN_TUN_OFFLOAD", "0"),
                ("VPN_BATCHED_IO", "1"),
                ("VPN_DONT_FRAGMENT", "1"),
                ("VPN_LOG_FILE", "/tmp/vpn.log"),
                ("VPN_USER", "vpn:vpn"),
                ("VPN_NO_DROP_PRIVILEGES", "1"),
                ("VPN_LOW_PORTS", "0"),
                ("VPN_NO_SANDBOX", "1"),
            ],
        )
        .unwrap();
        let c = o.connected();
        assert!(c.enabled);
        assert_eq!(c.open_after, 64 << 10);
        assert_eq!(c.max_sockets, 8);
        assert_eq!(c.idle_interval, Duration::from_millis(1500));
        assert_eq!(o.memory_budget, 16 << 20);
        assert_eq!(o.log_file.as_deref(), Some("/tmp/vpn.log".as_ref()));
        assert_eq!(o.user, "vpn:vpn");
        assert!(o.no_drop_privileges && o.no_sandbox && !o.low_ports);
        #[cfg(target_os = "linux")]
        assert!(!o.udp_offload && !o.tun_offload);
        #[cfg(target_os = "macos")]
        assert!(o.batched_io && o.dont_fragment);
    }

    #[test]
    fn flags_set_the_same_and_win_over_the_environment() {
        let o = parse(
            &[
                "--connected-sockets",
                "--connected-open-after=1M",
                "--connected-max-sockets",
                "4",
                "--connected-idle-ms",
                "250",
                "--memory-budget",
                "8M",
                "wg0",
            ],
            &[("VPN_CONNECTED_SOCKETS", "0"), ("VPN_MEMORY_BUDGET", "64M")],
        )
        .unwrap();
        assert!(o.connected_sockets);
        assert_eq!(o.connected_open_after, 1 << 20);
        assert_eq!(o.connected_max_sockets, 4);
        assert_eq!(o.connected_idle_ms, 250);
        assert_eq!(o.memory_budget, 8 << 20);
        let off = parse(&["--connected-sockets=off", "wg0"], &[]).unwrap();
        assert!(!off.connected_sockets);
    }

    /// `--connected-sockets wg0` is the switch and the interface, never a value `wg0`.
    #[test]
    fn a_bare_switch_does_not_swallow_the_interface_name() {
        let c = parse(&["--connected-sockets", "wg0"], &[]).unwrap();
        assert!(c.connected_sockets);
        #[cfg(target_os = "linux")]
        {
            let c = parse(&["--udp-offload=no", "--tun-offload", "wg0"], &[]).unwrap();
            assert!(!c.udp_offload && c.tun_offload);
        }
    }

    #[test]
    fn bad_values_name_the_flag() {
        for (args, env, flag) in [
            (vec!["--memory-budget=16MB"], vec![], "--memory-budget"),
            (vec!["--memory-budget=512K"], vec![], "--memory-budget"),
            (
                vec![],
                vec![("VPN_MEMORY_BUDGET", "lots")],
                "--memory-budget",
            ),
            (
                vec![],
                vec![("VPN_MEMORY_BUDGET", "99999999999999999999G")],
                "--memory-budget",
            ),
            (
                vec![],
                vec![("VPN_CONNECTED_SOCKETS", "maybe")],
                "--connected-sockets",
            ),
            (
                vec!["--connected-max-sockets=-1"],
                vec![],
                "--connected-max-sockets",
            ),
            (
                vec![],
                vec![("VPN_CONNECTED_IDLE_MS", "0")],
                "--connected-idle-ms",
            ),
            (
                vec![],
                vec![("VPN_CONNECTED_OPEN_AFTER", "1.5M")],
                "--connected-open-after",
            ),
        ] {
            let mut a = args.clone();
            a.push("wg0");
            let e = parse(&a, &env).expect_err(&format!("{args:?} {env:?} accepted"));
            let msg = e.to_string();
            assert!(msg.contains(flag), "{args:?} {env:?}: {msg}");
        }
    }

    #[test]
    fn an_empty_variable_is_the_default() {
        use clap::CommandFactory;
        let _held = env_lock();
        std::env::set_var("VPN_TUN_OFFLOAD", "");
        forget_empty_variables(&Cmd::command());
        assert!(std::env::var_os("VPN_TUN_OFFLOAD").is_none());
    }

    #[test]
    fn switches_take_the_usual_spellings() {
        for on in ["on", "1", "true", "YES", " On "] {
            assert_eq!(parse_switch(on), Ok(true), "{on:?}");
        }
        for off in ["off", "0", "false", "no", "OFF"] {
            assert_eq!(parse_switch(off), Ok(false), "{off:?}");
        }
        for bad in ["", "2", "enabled", "o n"] {
            assert!(parse_switch(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn sizes_take_binary_suffixes_and_budgets_start_at_one_mebibyte() {
        assert_eq!(parse_size::<usize>("16777216"), Ok(16 << 20));
        assert_eq!(parse_size::<usize>("16384K"), Ok(16 << 20));
        assert_eq!(parse_size::<usize>(" 16M "), Ok(16 << 20));
        assert_eq!(parse_size::<u64>("1g"), Ok(1 << 30));
        assert_eq!(parse_size::<usize>("0"), Ok(0));
        assert_eq!(parse_budget("0"), Ok(0));
        assert_eq!(parse_budget("1M"), Ok(vpn_device::MIN_MEMORY_BUDGET));
        assert!(parse_budget("1023K").is_err());
        for bad in [
            "",
            "M",
            "-1M",
            "+1M",
            "1.5M",
            "16MB",
            "1 M",
            "99999999999999999999G",
            "17179869184G",
        ] {
            assert!(parse_size::<u64>(bad).is_err(), "{bad:?}");
        }
    }

    /// What `vpn up` forwards: the options its command line set, each as `--flag=value`, and
    /// nothing a variable or a default set; the daemon form parses them into the same options.
    #[test]
    fn command_line_flags_give_a_daemon_the_same_options() {
        use clap::CommandFactory;
        let _held = env_lock();
        for v in daemon_vars() {
            std::env::remove_var(v);
        }
        std::env::set_var("VPN_CONNECTED_MAX_SOCKETS", "8");
        let args = [
            "vpn",
            "--memory-budget",
            "16M",
            "--connected-sockets",
            "--log-file=/tmp/d.log",
            "--connected-idle-ms=1500",
            "--no-sandbox",
            "--user=daemon",
            "wg0",
        ];
        let matches = Cmd::command().try_get_matches_from(args).unwrap();
        std::env::remove_var("VPN_CONNECTED_MAX_SOCKETS");
        let flags = command_line_flags(&matches);
        let mut sorted: Vec<_> = flags.iter().map(|f| f.to_str().unwrap()).collect();
        sorted.sort_unstable();
        assert_eq!(
            sorted,
            [
                "--connected-idle-ms=1500",
                "--connected-sockets=on",
                "--log-file=/tmp/d.log",
                "--memory-budget=16M",
                "--no-sandbox=on",
                "--user=daemon",
            ]
        );
        let given = <Cmd as clap::FromArgMatches>::from_arg_matches(&matches).unwrap();
        assert_eq!(given.opts.connected_max_sockets, 8);
        let forwarded = Cmd::try_parse_from(
            std::iter::once("vpn".into())
                .chain(flags)
                .chain(["wg0".into()]),
        )
        .unwrap();
        // The variable is the daemon's to read (it inherits it); everything else matches.
        assert_eq!(
            DaemonOptions {
                connected_max_sockets: 8,
                ..forwarded.opts
            },
            given.opts
        );
        let none = Cmd::command().try_get_matches_from(["vpn", "wg0"]).unwrap();
        assert!(command_line_flags(&none).is_empty());
    }
}
