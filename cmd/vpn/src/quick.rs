//! `vpn up` / `vpn down`: wg-quick(8) for the userspace daemon.
//!
//! The steps, their order and the commands printed (`[#] …` on stderr) follow wg-quick's
//! `linux.bash`: start the daemon in place of `ip link add … type wireguard`, PreUp, set the
//! configuration through UAPI (what `wg setconf` does), addresses, MTU and link up, DNS via
//! resolvconf, one route per allowed IP (default routes through a fwmark-selected table and
//! policy rules, so the tunnel's own UDP packets still use the main table), PostUp. `down`
//! undoes it: PreDown, SaveConfig, rules and link removal, DNS, PostDown.
//!
//! Decisions that need no system (paths, names, MTU, route order, rule detection, hook
//! text) are plain functions tested below; the rest is thin `ip`/`sysctl`/`resolvconf`
//! invocations whose failures name the command that failed.
//!
//! A default route also gets wg-quick's firewall rules (`quick/firewall.rs`: packets to the
//! tunnel address arriving on another interface are dropped, the fwmark is copied to
//! conntrack), with nftables or else iptables; `vpn up` refuses before changing anything when
//! neither is installed, and `down` removes them.

use std::cell::RefCell;
use std::ffi::OsString;
use std::fs;
use std::io::{self, Write as _};
use std::net::{SocketAddr, ToSocketAddrs};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use vpn_config::{Config, IpPrefix, Table};
use vpn_uapi::client;

use crate::daemon::DaemonOptions;
use crate::Error;

mod darwin;
mod firewall;

/// Arguments of `vpn up` and `vpn down`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// A config file `<ifname>.conf`, or a bare interface name meaning
    /// `/etc/wireguard/<ifname>.conf`.
    pub config: String,
}

/// Arguments of `vpn up`: the tunnel, and options for the daemon it starts.
#[derive(clap::Args, Debug)]
pub struct UpArgs {
    #[command(flatten)]
    pub tunnel: Args,
    /// The daemon's options as `vpn up` parsed them (flags and variables): a bad value stops
    /// `vpn up` before anything changes, with an error naming the flag.
    #[command(flatten)]
    pub daemon: DaemonOptions,
    /// The daemon options given on `vpn up`'s command line, as `--flag=value`, for the daemon
    /// it starts (which reads the variables itself, as it inherits them). Filled from the
    /// matches by [`crate::daemon::command_line_flags`]; clap leaves it empty.
    #[arg(skip)]
    pub daemon_flags: Vec<OsString>,
}

/// Where bare names are looked up.
const CONFIG_DIR: &str = "/etc/wireguard";
/// wg-quick's first table for default routes (also the fwmark it sets).
const FIRST_DEFAULT_TABLE: u32 = 51820;
/// Link MTU assumed when no route says otherwise.
const FALLBACK_LINK_MTU: u32 = 1500;
/// WireGuard's worst-case overhead: IPv6 header 40 + UDP 8 + WireGuard header 16 + tag 16.
const OVERHEAD: u32 = 80;
/// How long to wait for the daemon's socket to accept connections.
const DAEMON_READY_TIMEOUT: Duration = Duration::from_secs(5);
/// How long `down` waits for the daemon to remove its socket after the link is deleted.
const DAEMON_EXIT_TIMEOUT: Duration = Duration::from_secs(3);

// ---------------------------------------------------------------------------------------
// Pure logic
// ---------------------------------------------------------------------------------------

/// wg-quick's interface name rule: 1–15 characters of `[a-zA-Z0-9_=+.-]`.
fn valid_ifname(name: &str) -> bool {
    (1..=15).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"_=+.-".contains(&b))
}

/// The config file and interface name for the command-line argument: a bare valid name means
/// `<dir>/<name>.conf`; otherwise the argument is a path whose file name must be
/// `<ifname>.conf`.
fn config_location(arg: &str, dir: &Path) -> Result<(PathBuf, String), String> {
    let path = if valid_ifname(arg) {
        dir.join(format!("{arg}.conf"))
    } else {
        PathBuf::from(arg)
    };
    let ifname = path
        .file_name()
        .and_then(|n| n.to_str())
        .and_then(|n| n.strip_suffix(".conf"))
        .filter(|n| valid_ifname(n))
        .ok_or_else(|| {
            format!(
                "`{}': the config file must be a valid interface name, followed by .conf",
                path.display()
            )
        })?
        .to_owned();
    Ok((path, ifname))
}

/// A hook as the shell gets it: `%i` replaced by the interface name.
fn hook_text(hook: &str, ifname: &str) -> String {
    hook.replace("%i", ifname)
}

/// What `ip route get` (or `ip route show default`) says about the path's MTU: an explicit
/// `mtu N`, else the device to ask.
#[derive(Debug, PartialEq, Eq)]
enum RouteHint {
    Mtu(u32),
    Dev(String),
    Nothing,
}

fn route_hint(output: &str) -> RouteHint {
    let words: Vec<&str> = output.split_whitespace().collect();
    let after = |key: &str| {
        words
            .windows(2)
            .find(|w| w.first() == Some(&key))
            .and_then(|w| w.get(1).copied())
    };
    if let Some(mtu) = after("mtu").and_then(|m| m.parse().ok()) {
        return RouteHint::Mtu(mtu);
    }
    match after("dev") {
        Some(dev) => RouteHint::Dev(dev.to_owned()),
        None => RouteHint::Nothing,
    }
}

/// The `mtu N` of `ip link show` output (or of macOS `ifconfig <if>`).
fn link_mtu(output: &str) -> Option<u32> {
    let words: Vec<&str> = output.split_whitespace().collect();
    words
        .windows(2)
        .find(|w| w.first() == Some(&"mtu"))
        .and_then(|w| w.get(1))
        .and_then(|m| m.parse().ok())
}

/// wg-quick's `set_mtu_up`: an explicit MTU as is; otherwise the smallest MTU of the paths to
/// the endpoints, else of the default route, else 1500 — minus 80.
fn choose_mtu(explicit: Option<u32>, endpoint_mtus: &[u32], default_route_mtu: Option<u32>) -> u32 {
    if let Some(m) = explicit {
        return m;
    }
    let base = endpoint_mtus
        .iter()
        .copied()
        .filter(|&m| m > 0)
        .min()
        .or(default_route_mtu.filter(|&m| m > 0))
        .unwrap_or(FALLBACK_LINK_MTU);
    base.saturating_sub(OVERHEAD)
}

/// The routes wg-quick adds: every allowed IP of every peer, masked, without duplicates,
/// most specific first (`sort -nr -k 2 -t /`).
fn route_list(config: &Config) -> Vec<IpPrefix> {
    let mut v: Vec<IpPrefix> = Vec::new();
    for p in config.peers.iter().flat_map(|p| &p.allowed_ips) {
        let m = p.masked();
        if !v.contains(&m) {
            v.push(m);
        }
    }
    v.sort_by_key(|p| std::cmp::Reverse(p.prefix_len()));
    v
}

fn family(p: &IpPrefix) -> &'static str {
    if p.is_ipv6() {
        "-6"
    } else {
        "-4"
    }
}

/// How one allowed IP is routed (wg-quick's `add_route`).
#[derive(Debug, PartialEq, Eq)]
enum RouteStep {
    /// `Table = off`.
    Skip,
    /// `Table = <n|name>`: `ip route add P dev IF table T`.
    InTable(String),
    /// A /0 with `Table = auto`: the fwmark and policy-rule setup.
    Default,
    /// Anything else: the main table, unless a route for it on this device already exists.
    Main,
}

fn route_step(table: &Table, p: &IpPrefix) -> RouteStep {
    match table {
        Table::Off => RouteStep::Skip,
        Table::Id(n) => RouteStep::InTable(n.to_string()),
        Table::Name(n) => RouteStep::InTable(n.clone()),
        Table::Auto if p.is_default() => RouteStep::Default,
        Table::Auto => RouteStep::Main,
    }
}

/// The commands of wg-quick's `add_default` once the table number is known.
fn default_route_commands(ifname: &str, p: &IpPrefix, table: u32) -> Vec<Vec<String>> {
    let f = family(p);
    let t = table.to_string();
    let v = |a: &[&str]| a.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
    vec![
        v(&["ip", f, "rule", "add", "not", "fwmark", &t, "table", &t]),
        v(&[
            "ip",
            f,
            "rule",
            "add",
            "table",
            "main",
            "suppress_prefixlength",
            "0",
        ]),
        v(&[
            "ip",
            f,
            "route",
            "add",
            &p.to_string(),
            "dev",
            ifname,
            "table",
            &t,
        ]),
    ]
}

/// Does `ip rule show` still list a rule looking up `table`? (Whole-word match, so table
/// 51820 is not confused with 518201.)
fn rule_for_table_present(rules: &str, table: u32) -> bool {
    let t = table.to_string();
    rules.lines().any(|l| {
        let w: Vec<&str> = l.split_whitespace().collect();
        w.windows(2)
            .any(|p| p.first() == Some(&"lookup") && p.get(1) == Some(&t.as_str()))
    })
}

/// Does `ip rule show` still list the `suppress_prefixlength 0` rule for main?
fn suppress_rule_present(rules: &str) -> bool {
    rules.contains("from all lookup main suppress_prefixlength 0")
}

/// wg-quick's `resolvconf_iface_prefix` given `/etc/resolvconf/interface-order`: the first
/// `name*` pattern, as `name.` (Debian's resolvconf orders `tun.wg0` by it).
fn resolvconf_prefix(interface_order: &str) -> String {
    interface_order
        .lines()
        .filter_map(|l| l.trim().strip_suffix('*'))
        .find(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-'))
        .map(|n| format!("{n}."))
        .unwrap_or_default()
}

/// What `resolvconf -a` reads on stdin.
fn resolvconf_input(config: &Config) -> String {
    let mut s = String::new();
    for d in &config.interface.dns {
        s.push_str(&format!("nameserver {d}\n"));
    }
    if !config.interface.dns_search.is_empty() {
        s.push_str(&format!(
            "search {}\n",
            config.interface.dns_search.join(" ")
        ));
    }
    s
}

/// The addresses of `ip -brief address show dev IF`: `IF STATE addr/len addr/len …`.
fn brief_addresses(output: &str, ifname: &str) -> Vec<IpPrefix> {
    output
        .lines()
        .filter_map(|l| {
            let mut w = l.split_whitespace();
            (w.next() == Some(ifname)).then_some(w)
        })
        .flat_map(|mut w| {
            w.next(); // state
            w.filter_map(|a| a.parse().ok()).collect::<Vec<_>>()
        })
        .collect()
}

/// A command line as printed and reported.
fn show(args: &[String]) -> String {
    args.join(" ")
}

// ---------------------------------------------------------------------------------------
// Running things
// ---------------------------------------------------------------------------------------

fn owned(args: &[&str]) -> Vec<String> {
    args.iter().map(|s| (*s).to_owned()).collect()
}

/// Runs a command, printing it first as wg-quick does. Its stderr is passed through; a
/// failure names the command and quotes what it said.
fn run(args: &[String], stdin: Option<&str>) -> Result<(), Error> {
    eprintln!("[#] {}", show(args));
    let (prog, rest) = args.split_first().ok_or("empty command")?;
    let mut c = Command::new(prog);
    c.args(rest)
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::inherit())
        .stderr(Stdio::piped());
    let mut child = c
        .spawn()
        .map_err(|e| format!("{} failed: cannot run {prog}: {e}", show(args)))?;
    if let (Some(text), Some(mut pipe)) = (stdin, child.stdin.take()) {
        pipe.write_all(text.as_bytes())
            .map_err(|e| format!("{} failed: writing its input: {e}", show(args)))?;
    }
    let out = child
        .wait_with_output()
        .map_err(|e| format!("{} failed: {e}", show(args)))?;
    let said = String::from_utf8_lossy(&out.stderr);
    if out.status.success() {
        eprint!("{said}");
        Ok(())
    } else {
        let said = said.trim();
        Err(if said.is_empty() {
            format!("{} failed: {}", show(args), out.status).into()
        } else {
            format!("{} failed: {said}", show(args)).into()
        })
    }
}

fn run_str(args: &[&str]) -> Result<(), Error> {
    run(&owned(args), None)
}

/// A quiet query: stdout if the command succeeded.
fn query(args: &[&str]) -> Option<String> {
    let (prog, rest) = args.split_first()?;
    let out = Command::new(prog)
        .args(rest)
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

fn in_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(name))
        .find(|p| {
            p.metadata()
                .is_ok_and(|m| m.is_file() && m.mode() & 0o111 != 0)
        })
}

fn run_hooks(hooks: &[String], ifname: &str) -> Result<(), Error> {
    for h in hooks {
        let text = hook_text(h, ifname);
        eprintln!("[#] {text}");
        let status = Command::new("sh")
            .arg("-c")
            .arg(&text)
            .stdin(Stdio::null())
            .status()
            .map_err(|e| format!("hook `{text}`: cannot run sh: {e}"))?;
        if !status.success() {
            return Err(format!("hook `{text}` failed: {status}").into());
        }
    }
    Ok(())
}

fn link_exists(ifname: &str) -> bool {
    query(&["ip", "link", "show", "dev", ifname]).is_some_and(|s| !s.trim().is_empty())
}

fn uapi_dir() -> PathBuf {
    PathBuf::from(client::DEFAULT_DIR)
}

/// Applies a UAPI set, turning both failure layers into one error.
fn uapi_set(ifname: &str, body: &str, what: &str) -> Result<(), Error> {
    match client::set(&uapi_dir(), ifname, body) {
        Ok(Ok(())) => Ok(()),
        Ok(Err(errno)) => Err(format!("{what} failed: the daemon answered errno={errno}").into()),
        Err(e) => Err(format!("{what} failed: {e}").into()),
    }
}

/// The loaded config file.
struct Tunnel {
    path: PathBuf,
    ifname: String,
    config: Config,
}

fn load(arg: &str) -> Result<Tunnel, Error> {
    let (path, ifname) = config_location(arg, Path::new(CONFIG_DIR))?;
    let config = read_config(&path)?;
    Ok(Tunnel {
        path,
        ifname,
        config,
    })
}

/// Reads and parses a wg-quick file, warning (as wg-quick does) when the world may read it.
pub(crate) fn read_config(path: &Path) -> Result<Config, Error> {
    let text = fs::read_to_string(path).map_err(|e| format!("`{}': {e}", path.display()))?;
    warn_if_world_accessible(path);
    Ok(vpn_config::parse(&text).map_err(|e| format!("{}: {e}", path.display()))?)
}

/// A peer's `Endpoint` host and port, resolved by the system (the first address).
pub(crate) fn resolve_endpoint(host: &str, port: u16) -> io::Result<SocketAddr> {
    (host, port)
        .to_socket_addrs()?
        .next()
        .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, "no address"))
}

/// wg-quick warns when both the file and its directory grant the world some access.
fn warn_if_world_accessible(path: &Path) {
    let file = path.metadata().map(|m| m.mode()).unwrap_or(0);
    let dir = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."))
        .metadata()
        .map(|m| m.mode())
        .unwrap_or(0);
    if file & dir & 0o007 != 0 {
        eprintln!("Warning: `{}' is world accessible", path.display());
    }
}

// ---------------------------------------------------------------------------------------
// up
// ---------------------------------------------------------------------------------------

/// What `up` changed that `del_if` must undo beyond deleting the link.
#[derive(Default)]
struct Done {
    dns: bool,
    /// The table of the default-route rules, if any were added.
    default_table: Option<u32>,
    /// Whether firewall rules may have been added (removed again on failure).
    firewall: bool,
}

/// `vpn up <config|name>`: the Linux steps, or on macOS those of wg-quick's darwin script
/// (`quick/darwin.rs`; both are compiled everywhere, so each is type-checked on both systems).
pub fn up(args: &UpArgs) -> Result<(), Error> {
    tracing::debug!(options = ?args.daemon, flags = ?args.daemon_flags, "the daemon's options");
    if cfg!(target_os = "macos") {
        return darwin::up(&args.tunnel, &args.daemon_flags);
    }
    let t = load(&args.tunnel.config)?;
    if link_exists(&t.ifname) {
        return Err(format!("`{}' already exists", t.ifname).into());
    }
    let mut done = Done::default();
    match up_steps(&t, &args.daemon_flags, &mut done) {
        Ok(()) => Ok(()),
        Err(e) => {
            if link_exists(&t.ifname) || client::socket_path(&uapi_dir(), &t.ifname).exists() {
                del_if(&t, &done);
            }
            Err(e)
        }
    }
}

fn up_steps(t: &Tunnel, daemon_flags: &[OsString], done: &mut Done) -> Result<(), Error> {
    let ifname = t.ifname.as_str();
    // The firewall tool a default route needs is checked before anything changes.
    let routes = route_list(&t.config);
    let default_v = |v6: bool| {
        routes.iter().any(|p| {
            p.is_ipv6() == v6 && route_step(&t.config.interface.table, p) == RouteStep::Default
        })
    };
    let firewall_tool = if default_v(false) || default_v(true) {
        Some(firewall::choose(default_v(false), default_v(true))?)
    } else {
        None
    };
    start_daemon(ifname, daemon_flags)?;
    run_hooks(&t.config.interface.pre_up, ifname)?;

    let resolved = RefCell::new(Vec::new());
    let body = t.config.to_uapi(|host, port| {
        let addr = resolve_endpoint(host, port)?;
        resolved.borrow_mut().push(addr);
        Ok(addr)
    })?;
    eprintln!(
        "[#] (uapi set) {ifname}: the configuration of {}",
        t.path.display()
    );
    uapi_set(ifname, &body, "setting the configuration")?;

    for a in &t.config.interface.addresses {
        run_str(&[
            "ip",
            family(a),
            "address",
            "add",
            &a.to_string(),
            "dev",
            ifname,
        ])?;
    }

    let mtu = match t.config.interface.mtu {
        Some(m) => m,
        None => auto_mtu(&resolved.borrow()),
    };
    run_str(&[
        "ip",
        "link",
        "set",
        "mtu",
        &mtu.to_string(),
        "up",
        "dev",
        ifname,
    ])?;

    set_dns(t, done)?;

    let mut fwmark = t.config.interface.fwmark.filter(|&m| m != 0);
    for p in routes {
        match route_step(&t.config.interface.table, &p) {
            RouteStep::Skip => {}
            RouteStep::InTable(table) => run_str(&[
                "ip",
                family(&p),
                "route",
                "add",
                &p.to_string(),
                "dev",
                ifname,
                "table",
                &table,
            ])?,
            RouteStep::Main => {
                let exists = query(&[
                    "ip",
                    family(&p),
                    "route",
                    "show",
                    "dev",
                    ifname,
                    "match",
                    &p.to_string(),
                ])
                .is_some_and(|s| !s.trim().is_empty());
                if !exists {
                    run_str(&[
                        "ip",
                        family(&p),
                        "route",
                        "add",
                        &p.to_string(),
                        "dev",
                        ifname,
                    ])?;
                }
            }
            RouteStep::Default => {
                let table = match fwmark {
                    Some(m) => m,
                    None => {
                        let table = free_table();
                        eprintln!("[#] (uapi set) {ifname}: fwmark={table}");
                        uapi_set(ifname, &format!("fwmark={table}\n"), "setting the fwmark")?;
                        fwmark = Some(table);
                        table
                    }
                };
                done.default_table = Some(table);
                for c in default_route_commands(ifname, &p, table) {
                    run(&c, None)?;
                }
                if !p.is_ipv6() {
                    let cur = fs::read_to_string("/proc/sys/net/ipv4/conf/all/src_valid_mark")
                        .unwrap_or_default();
                    if cur.trim() != "1" {
                        run_str(&["sysctl", "-q", "net.ipv4.conf.all.src_valid_mark=1"])?;
                    }
                }
                if let Some(tool) = firewall_tool {
                    done.firewall = true;
                    firewall::add(tool, ifname, p.is_ipv6(), table)?;
                }
            }
        }
    }

    run_hooks(&t.config.interface.post_up, ifname)
}

/// Runs the daemon with `flags` (it detaches once the TUN and its socket exist) and waits
/// until the socket answers.
fn start_daemon(ifname: &str, flags: &[OsString]) -> Result<(), Error> {
    let prog = match std::env::var_os("VPN_DAEMON") {
        Some(p) => PathBuf::from(p),
        None => std::env::current_exe().map_err(|e| format!("cannot find the vpn binary: {e}"))?,
    };
    let cmdline = daemon_cmdline(&prog, flags, ifname);
    eprintln!("[#] {}", show(&cmdline));
    let status = Command::new(&prog)
        .args(flags)
        .arg(ifname)
        .stdin(Stdio::null())
        .status()
        .map_err(|e| format!("{} failed: {e}", show(&cmdline)))?;
    if !status.success() {
        return Err(format!("{} failed: {status}", show(&cmdline)).into());
    }
    let sock = client::socket_path(&uapi_dir(), ifname);
    let deadline = Instant::now() + DAEMON_READY_TIMEOUT;
    loop {
        if std::os::unix::net::UnixStream::connect(&sock).is_ok() && link_exists(ifname) {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(format!(
                "{} exited but {} did not appear within {:?}",
                show(&cmdline),
                sock.display(),
                DAEMON_READY_TIMEOUT
            )
            .into());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The daemon's command line as `[#]` prints it: the program, `flags`, then `last`.
fn daemon_cmdline(prog: &Path, flags: &[OsString], last: &str) -> Vec<String> {
    std::iter::once(prog.as_os_str())
        .chain(flags.iter().map(OsString::as_os_str))
        .map(|a| a.to_string_lossy().into_owned())
        .chain([last.to_owned()])
        .collect()
}

/// The MTU of the path to each endpoint, else of the default route (wg-quick's
/// `set_mtu_up` without an explicit MTU).
fn auto_mtu(endpoints: &[SocketAddr]) -> u32 {
    let mtu_of = |route_output: Option<String>| -> Option<u32> {
        match route_hint(&route_output?) {
            RouteHint::Mtu(m) => Some(m),
            RouteHint::Dev(dev) => link_mtu(&query(&["ip", "link", "show", "dev", &dev])?),
            RouteHint::Nothing => None,
        }
    };
    let endpoint_mtus: Vec<u32> = endpoints
        .iter()
        .filter_map(|e| mtu_of(query(&["ip", "route", "get", &e.ip().to_string()])))
        .collect();
    let default_mtu = if endpoint_mtus.is_empty() {
        mtu_of(
            query(&["ip", "route", "show", "default"])
                .and_then(|s| s.lines().next().map(str::to_owned)),
        )
    } else {
        None
    };
    choose_mtu(None, &endpoint_mtus, default_mtu)
}

/// The first table number from 51820 with no IPv4 or IPv6 routes.
fn free_table() -> u32 {
    let mut t = FIRST_DEFAULT_TABLE;
    let used = |t: u32, f: &str| {
        query(&["ip", f, "route", "show", "table", &t.to_string()])
            .is_some_and(|s| !s.trim().is_empty())
    };
    while t < u32::MAX && (used(t, "-4") || used(t, "-6")) {
        t += 1;
    }
    t
}

fn resolvconf_iface(ifname: &str) -> Option<(PathBuf, String)> {
    let rc = in_path("resolvconf")?;
    let is_link = fs::symlink_metadata(&rc).is_ok_and(|m| m.file_type().is_symlink());
    let prefix = match fs::read_to_string("/etc/resolvconf/interface-order") {
        Ok(order) if !is_link => resolvconf_prefix(&order),
        _ => String::new(),
    };
    Some((rc, format!("{prefix}{ifname}")))
}

fn set_dns(t: &Tunnel, done: &mut Done) -> Result<(), Error> {
    if t.config.interface.dns.is_empty() {
        return Ok(());
    }
    let Some((rc, name)) = resolvconf_iface(&t.ifname) else {
        eprintln!("[!] Warning: resolvconf not found; DNS settings not applied");
        return Ok(());
    };
    let c = vec![
        rc.to_string_lossy().into_owned(),
        "-a".into(),
        name,
        "-m".into(),
        "0".into(),
        "-x".into(),
    ];
    run(&c, Some(&resolvconf_input(&t.config)))?;
    done.dns = true;
    Ok(())
}

fn unset_dns(t: &Tunnel) {
    if t.config.interface.dns.is_empty() {
        return;
    }
    if let Some((rc, name)) = resolvconf_iface(&t.ifname) {
        let c = vec![
            rc.to_string_lossy().into_owned(),
            "-d".into(),
            name,
            "-f".into(),
        ];
        if let Err(e) = run(&c, None) {
            eprintln!("[!] {e}");
        }
    }
}

/// wg-quick's `del_if`: DNS (if `up` set it), the default-route rules, the link. Best effort:
/// each failure is reported and the rest still runs.
fn del_if(t: &Tunnel, done: &Done) {
    if done.dns {
        unset_dns(t);
    }
    if done.firewall {
        firewall::remove(&t.ifname);
    }
    if let Some(table) = done.default_table {
        remove_default_rules(table);
    }
    if let Err(e) = run_str(&["ip", "link", "delete", "dev", &t.ifname]) {
        eprintln!("[!] {e}");
    }
}

fn remove_default_rules(table: u32) {
    let t = table.to_string();
    for f in ["-4", "-6"] {
        // Bounded: a rule that cannot be deleted must not loop forever.
        for _ in 0..64 {
            let rules = query(&["ip", f, "rule", "show"]).unwrap_or_default();
            if !rule_for_table_present(&rules, table) {
                break;
            }
            if let Err(e) = run_str(&["ip", f, "rule", "delete", "table", &t]) {
                eprintln!("[!] {e}");
                break;
            }
        }
        for _ in 0..64 {
            let rules = query(&["ip", f, "rule", "show"]).unwrap_or_default();
            if !suppress_rule_present(&rules) {
                break;
            }
            if let Err(e) = run_str(&[
                "ip",
                f,
                "rule",
                "delete",
                "table",
                "main",
                "suppress_prefixlength",
                "0",
            ]) {
                eprintln!("[!] {e}");
                break;
            }
        }
    }
}

// ---------------------------------------------------------------------------------------
// down
// ---------------------------------------------------------------------------------------

/// `vpn down <config|name>` (on macOS: `quick/darwin.rs`).
pub fn down(args: &Args) -> Result<(), Error> {
    if cfg!(target_os = "macos") {
        return darwin::down(args);
    }
    let t = load(&args.config)?;
    let ifname = t.ifname.as_str();
    let sock = client::socket_path(&uapi_dir(), ifname);
    if !sock.exists() {
        return Err(format!("`{ifname}' is not a WireGuard interface").into());
    }
    run_hooks(&t.config.interface.pre_down, ifname)?;

    // The device's view decides which rules exist, as wg-quick asks `wg show`.
    let running = client::get(&uapi_dir(), ifname)
        .and_then(|dump| {
            dump.parse::<vpn_ipc::DeviceState>()
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
        })
        .map(|state| t.config.with_device_state(&state));
    if t.config.interface.save_config {
        let running = running
            .as_ref()
            .map_err(|e| format!("SaveConfig: reading the running configuration: {e}"))?;
        save_config(&t, running)?;
    }
    let live = running.as_ref().unwrap_or(&t.config);
    let has_default = live
        .peers
        .iter()
        .flat_map(|p| &p.allowed_ips)
        .any(IpPrefix::is_default);
    let done = Done {
        dns: false,
        // As wg-quick's `down`: whatever rules carry this interface's names.
        firewall: true,
        default_table: match (&t.config.interface.table, live.interface.fwmark) {
            (Table::Auto, Some(m)) if m != 0 && has_default => Some(m),
            _ => None,
        },
    };
    del_if(&t, &done);
    unset_dns(&t);
    wait_gone(&sock);
    run_hooks(&t.config.interface.post_down, ifname)
}

fn wait_gone(sock: &Path) {
    let deadline = Instant::now() + DAEMON_EXIT_TIMEOUT;
    while sock.exists() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Writes the running configuration over the file (wg-quick's `save_config`): addresses and
/// MTU as the link has them now, the rest of the wg-quick settings from the file, keys and
/// peers from the daemon. Written to `<file>.tmp` (mode 0600), synced, then renamed.
fn save_config(t: &Tunnel, running: &Config) -> Result<(), Error> {
    let ifname = t.ifname.as_str();
    let mut c = running.clone();
    if let Some(out) = query(&["ip", "-all", "-brief", "address", "show", "dev", ifname]) {
        c.interface.addresses = brief_addresses(&out, ifname);
    }
    if t.config.interface.mtu.is_some() {
        if let Some(m) = query(&["ip", "link", "show", "dev", ifname]).and_then(|o| link_mtu(&o)) {
            c.interface.mtu = Some(m);
        }
    }
    write_config(&t.path, &c)
}

/// Writes `c` over the file at `path`: to `<file>.tmp` (mode 0600), synced, then renamed.
fn write_config(path: &Path, c: &Config) -> Result<(), Error> {
    eprintln!("[#] (save) {}", path.display());
    let mut tmp = path.to_path_buf().into_os_string();
    tmp.push(".tmp");
    let tmp = PathBuf::from(tmp);
    let write = || -> io::Result<()> {
        let mut f = fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&tmp)?;
        f.write_all(c.render().as_bytes())?;
        f.sync_all()?;
        fs::rename(&tmp, path)
    };
    write().map_err(|e| -> Error {
        let _ = fs::remove_file(&tmp);
        format!("could not write configuration file {}: {e}", path.display()).into()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interface_names() {
        for ok in ["wg0", "a", "tun.x-1_=+", "abcdefghijklmno"] {
            assert!(valid_ifname(ok), "{ok}");
        }
        for bad in ["", "abcdefghijklmnop", "wg 0", "wg/0", "wg0\n", "é"] {
            assert!(!valid_ifname(bad), "{bad}");
        }
    }

    #[test]
    fn config_locations() {
        let etc = Path::new("/etc/wireguard");
        assert_eq!(
            config_location("wg0", etc).unwrap(),
            (PathBuf::from("/etc/wireguard/wg0.conf"), "wg0".to_owned())
        );
        assert_eq!(
            config_location("/tmp/x/office.conf", etc).unwrap(),
            (PathBuf::from("/tmp/x/office.conf"), "office".to_owned())
        );
        assert_eq!(
            config_location("./home.conf", etc).unwrap().1,
            "home".to_owned()
        );
        // "wg0.conf" is itself a valid interface name, so it is looked up as one (as wg-quick).
        assert_eq!(
            config_location("wg0.conf", etc).unwrap().0,
            PathBuf::from("/etc/wireguard/wg0.conf.conf")
        );
        for bad in [
            "/tmp/x/wg0",
            "/tmp/averyveryverylongname.conf",
            "/tmp/x/.conf",
            "/tmp/x/a b.conf",
        ] {
            let e = config_location(bad, etc).unwrap_err();
            assert!(e.contains("must be a valid interface name"), "{bad}: {e}");
        }
    }

    #[test]
    fn hooks_substitute_every_i() {
        assert_eq!(
            hook_text("ip rule add iif %i; echo %i%i %", "wg7"),
            "ip rule add iif wg7; echo wg7wg7 %"
        );
        assert_eq!(hook_text("echo 100%", "x"), "echo 100%");
    }

    #[test]
    fn mtu_choice() {
        assert_eq!(choose_mtu(Some(1280), &[9000], Some(1500)), 1280);
        assert_eq!(choose_mtu(None, &[1500, 9000, 1492], Some(65536)), 1412);
        assert_eq!(choose_mtu(None, &[], Some(9000)), 8920);
        assert_eq!(choose_mtu(None, &[], None), 1420);
        assert_eq!(choose_mtu(None, &[0], Some(0)), 1420);
        assert_eq!(choose_mtu(None, &[50], None), 0);
    }

    #[test]
    fn route_and_link_output() {
        assert_eq!(
            route_hint("198.18.0.2 dev veth0 src 198.18.0.1 uid 0 \n    cache \n"),
            RouteHint::Dev("veth0".into())
        );
        assert_eq!(
            route_hint(
                "198.18.0.2 via 198.18.0.254 dev eth0 src 198.18.0.1 uid 0\n    cache mtu 1400\n"
            ),
            RouteHint::Mtu(1400)
        );
        assert_eq!(
            route_hint("default via 10.0.0.1 dev eth0 proto dhcp mtu 9000"),
            RouteHint::Mtu(9000)
        );
        assert_eq!(route_hint(""), RouteHint::Nothing);
        assert_eq!(route_hint("dev"), RouteHint::Nothing);
        assert_eq!(
            link_mtu(
                "5: veth0@if4: <BROADCAST,MULTICAST,UP,LOWER_UP> mtu 1500 qdisc noqueue state UP"
            ),
            Some(1500)
        );
        assert_eq!(link_mtu("mtu"), None);
    }

    fn config_with(allowed: &[&str], table: &str) -> Config {
        let mut text = format!(
            "[Interface]\nPrivateKey = {}\nTable = {table}\n",
            vpn_config::PrivateKey::from_bytes([1; 32]).to_base64()
        );
        for (i, a) in allowed.iter().enumerate() {
            text.push_str(&format!(
                "[Peer]\nPublicKey = {}\nAllowedIPs = {a}\n",
                vpn_config::PublicKey::from_bytes([i as u8 + 2; 32]).to_base64()
            ));
        }
        vpn_config::parse(&text).unwrap()
    }

    #[test]
    fn routes_most_specific_first_masked_and_unique() {
        let c = config_with(
            &[
                "100.64.0.2/24, 0.0.0.0/0",
                "100.64.0.0/24, fd00::5/64, 10.1.2.3/32",
            ],
            "auto",
        );
        let got: Vec<String> = route_list(&c).iter().map(|p| p.to_string()).collect();
        assert_eq!(
            got,
            ["fd00::/64", "10.1.2.3/32", "100.64.0.0/24", "0.0.0.0/0"]
        );
    }

    #[test]
    fn route_steps_per_table() {
        let d: IpPrefix = "::/0".parse().unwrap();
        let n: IpPrefix = "10.0.0.0/8".parse().unwrap();
        assert_eq!(route_step(&Table::Auto, &d), RouteStep::Default);
        assert_eq!(route_step(&Table::Auto, &n), RouteStep::Main);
        assert_eq!(route_step(&Table::Off, &d), RouteStep::Skip);
        assert_eq!(
            route_step(&Table::Id(7), &d),
            RouteStep::InTable("7".into())
        );
        assert_eq!(
            route_step(&Table::Name("vpn".into()), &n),
            RouteStep::InTable("vpn".into())
        );
        let c = config_with(&["0.0.0.0/0"], "off");
        assert!(route_list(&c)
            .iter()
            .all(|p| route_step(&c.interface.table, p) == RouteStep::Skip));
    }

    #[test]
    fn default_route_is_policy_routed() {
        let v4: IpPrefix = "0.0.0.0/0".parse().unwrap();
        let cmds: Vec<String> = default_route_commands("wg0", &v4, 51820)
            .iter()
            .map(|c| show(c))
            .collect();
        assert_eq!(
            cmds,
            [
                "ip -4 rule add not fwmark 51820 table 51820",
                "ip -4 rule add table main suppress_prefixlength 0",
                "ip -4 route add 0.0.0.0/0 dev wg0 table 51820",
            ]
        );
        let v6: IpPrefix = "::/0".parse().unwrap();
        let cmds = default_route_commands("wg1", &v6, 7);
        assert_eq!(show(&cmds[0]), "ip -6 rule add not fwmark 7 table 7");
        assert_eq!(show(&cmds[2]), "ip -6 route add ::/0 dev wg1 table 7");
    }

    #[test]
    fn rule_detection() {
        let rules = "0:\tfrom all lookup local\n32764:\tfrom all lookup main suppress_prefixlength 0\n32765:\tnot from all fwmark 0xca6c lookup 51820\n32766:\tfrom all lookup main\n";
        assert!(rule_for_table_present(rules, 51820));
        assert!(!rule_for_table_present(rules, 5182));
        assert!(!rule_for_table_present(
            "1: from all lookup 518201\n",
            51820
        ));
        assert!(suppress_rule_present(rules));
        assert!(!suppress_rule_present("0:\tfrom all lookup local\n"));
    }

    #[test]
    fn resolvconf_bits() {
        assert_eq!(
            resolvconf_prefix("# comment\nlo.inet6\nlo.inet*\ntun*\nwg*\n*\n"),
            "tun."
        );
        assert_eq!(resolvconf_prefix("lo\neth0\n"), "");
        let mut c = config_with(&[], "auto");
        c.interface.dns = vec!["100.64.0.53".parse().unwrap(), "fd00::53".parse().unwrap()];
        c.interface.dns_search = vec!["corp".into(), "lan".into()];
        assert_eq!(
            resolvconf_input(&c),
            "nameserver 100.64.0.53\nnameserver fd00::53\nsearch corp lan\n"
        );
    }

    #[test]
    fn brief_address_listing() {
        let out = "wg0              UNKNOWN        100.64.0.1/24 fd00::1/64 \n";
        let got: Vec<String> = brief_addresses(out, "wg0")
            .iter()
            .map(|p| p.to_string())
            .collect();
        assert_eq!(got, ["100.64.0.1/24", "fd00::1/64"]);
        assert!(brief_addresses(out, "wg1").is_empty());
        assert!(brief_addresses("", "wg0").is_empty());
    }
}
