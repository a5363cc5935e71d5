//! `vpn up` / `vpn down` on macOS: wg-quick(8)'s darwin script for the userspace daemon.
//!
//! The steps and the commands printed follow wg-quick's `darwin.bash`: start `vpn utun` with
//! `WG_TUN_NAME_FILE=/var/run/wireguard/<name>.name` (the kernel picks the utun; the file says
//! which), PreUp, the configuration through UAPI, `ifconfig` for the addresses, the MTU and
//! up, `networksetup` for DNS on every network service, `route` for each allowed IP (a default
//! route as the two halves `0/1` and `128/1`, so the real default route stays), host routes
//! for the endpoints through the old default gateway while a default route points into the
//! tunnel, PostUp. `down` restores each service's DNS and deletes the endpoint routes, then
//! removes the UAPI socket (the daemon stops when it disappears, and the utun with its routes
//! goes with it) and the name file.
//!
//! The command plan is pure: [`address_plan`] and [`route_plan`] take the config and what was
//! read from the system ([`Facts`]) and return the commands, and the parsers of `netstat`,
//! `route get`, `ifconfig` and `networksetup` output are plain functions; all of them are
//! tested on Linux. Only [`up`] and [`down`] run anything, and only a Mac can run them.
//!
//! Where wg-quick keeps a background monitor (re-adding endpoint routes and DNS when the
//! network changes, restoring DNS when the daemon dies), `vpn up` writes what `down` must undo
//! to `/var/run/wireguard/<name>.vpn-undo` instead and does not follow network changes.

use std::cell::RefCell;
use std::collections::BTreeSet;
use std::ffi::OsString;
use std::fs;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use vpn_config::{Config, IpPrefix, Table};
use vpn_uapi::client;

use super::{
    choose_mtu, daemon_cmdline, link_mtu, load, query, route_list, run, run_hooks, show, uapi_set,
    Args, Tunnel,
};
use crate::Error;

/// Where the daemon's socket, the name file and the undo file live.
const RUN_DIR: &str = "/var/run/wireguard";

/// One command of a plan.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Step {
    pub(crate) args: Vec<String>,
    /// wg-quick aborts `up` when this command fails; otherwise a failure is only reported.
    pub(crate) must_succeed: bool,
}

impl Step {
    fn must(args: &[&str]) -> Step {
        Step {
            args: args.iter().map(|s| (*s).to_owned()).collect(),
            must_succeed: true,
        }
    }

    fn may(args: &[&str]) -> Step {
        Step {
            must_succeed: false,
            ..Step::must(args)
        }
    }
}

/// One network service's DNS settings, as `networksetup` reports them (empty: "Empty").
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct ServiceDns {
    pub(crate) service: String,
    pub(crate) servers: Vec<String>,
    pub(crate) search: Vec<String>,
}

/// What the plan needs to know about the system.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Facts {
    /// The utun the daemon got (`utun7`).
    pub(crate) real_ifname: String,
    /// The MTUs of the interfaces on the routes to the endpoints.
    pub(crate) endpoint_mtus: Vec<u32>,
    /// The MTU of the default route's interface.
    pub(crate) default_mtu: Option<u32>,
    /// The utun's MTU now.
    pub(crate) current_mtu: Option<u32>,
    /// The network services and their DNS settings before `up`.
    pub(crate) services: Vec<ServiceDns>,
    /// The first IPv4 and IPv6 default gateways that are not `link#N`.
    pub(crate) gateway4: Option<String>,
    pub(crate) gateway6: Option<String>,
    /// Allowed IPs that a route already sends through the utun (created with an address).
    pub(crate) routed_here: Vec<IpPrefix>,
    /// The peers' endpoint addresses, as the daemon has them.
    pub(crate) endpoints: Vec<IpAddr>,
}

/// wg-quick's `add_addr` for every address, `set_mtu_up`, and `set_dns` when the config has
/// DNS servers.
pub(crate) fn address_plan(config: &Config, facts: &Facts) -> Vec<Step> {
    let ifname = facts.real_ifname.as_str();
    let mut plan = Vec::new();
    for a in &config.interface.addresses {
        let a_str = a.to_string();
        if a.is_ipv6() {
            plan.push(Step::must(&["ifconfig", ifname, "inet6", &a_str, "alias"]));
        } else {
            let ip = a.addr().to_string();
            plan.push(Step::must(&[
                "ifconfig", ifname, "inet", &a_str, &ip, "alias",
            ]));
        }
    }
    let mtu = choose_mtu(
        config.interface.mtu,
        &facts.endpoint_mtus,
        facts.default_mtu,
    );
    if config.interface.mtu.is_some() || facts.current_mtu != Some(mtu) {
        plan.push(Step::must(&["ifconfig", ifname, "mtu", &mtu.to_string()]));
    }
    plan.push(Step::must(&["ifconfig", ifname, "up"]));
    if !config.interface.dns.is_empty() {
        let servers: Vec<String> = config.interface.dns.iter().map(|d| d.to_string()).collect();
        for s in &facts.services {
            plan.push(dns_step("-setdnsservers", &s.service, &servers));
            plan.push(dns_step(
                "-setsearchdomains",
                &s.service,
                &config.interface.dns_search,
            ));
        }
    }
    plan
}

/// `networksetup <verb> <service> <values…>`, "Empty" for no values.
fn dns_step(verb: &str, service: &str, values: &[String]) -> Step {
    let mut args = vec!["networksetup", verb, service];
    if values.is_empty() {
        args.push("Empty");
    } else {
        args.extend(values.iter().map(String::as_str));
    }
    Step::may(&args)
}

/// The undo of [`address_plan`]'s DNS steps: each service's settings from before.
pub(crate) fn dns_restore_plan(config: &Config, facts: &Facts) -> Vec<Step> {
    if config.interface.dns.is_empty() {
        return Vec::new();
    }
    facts
        .services
        .iter()
        .flat_map(|s| {
            [
                dns_step("-setdnsservers", &s.service, &s.servers),
                dns_step("-setsearchdomains", &s.service, &s.search),
            ]
        })
        .collect()
}

/// Why a config cannot be brought up on macOS.
pub(crate) fn check_table(table: &Table) -> Result<(), String> {
    match table {
        Table::Auto | Table::Off => Ok(()),
        Table::Name(n) if n == "main" => Ok(()),
        other => Err(format!(
            "Table = {other}: macOS has one routing table; use auto, main or off"
        )),
    }
}

/// The `-inet`/`-inet6` argument of `route` for an address family.
fn route_family(v6: bool) -> &'static str {
    if v6 {
        "-inet6"
    } else {
        "-inet"
    }
}

/// wg-quick's `add_route` for every allowed IP (most specific first), then
/// `set_endpoint_direct_route`. Returns the plan and the endpoint routes it adds (for `down`).
pub(crate) fn route_plan(config: &Config, facts: &Facts) -> (Vec<Step>, Vec<IpAddr>) {
    let ifname = facts.real_ifname.as_str();
    let table = &config.interface.table;
    let mut plan = Vec::new();
    let (mut auto4, mut auto6) = (false, false);
    for p in route_list(config) {
        let fam = route_family(p.is_ipv6());
        if *table == Table::Off {
            continue;
        }
        if *table == Table::Auto && p.is_default() {
            let halves: [&str; 2] = if p.is_ipv6() {
                auto6 = true;
                ["::/1", "8000::/1"]
            } else {
                auto4 = true;
                ["0.0.0.0/1", "128.0.0.0/1"]
            };
            for h in halves {
                plan.push(Step::must(&[
                    "route",
                    "-q",
                    "-n",
                    "add",
                    fam,
                    h,
                    "-interface",
                    ifname,
                ]));
            }
        } else if !facts.routed_here.contains(&p) {
            plan.push(Step::must(&[
                "route",
                "-q",
                "-n",
                "add",
                fam,
                &p.to_string(),
                "-interface",
                ifname,
            ]));
        }
    }
    let mut added = Vec::new();
    let unique: BTreeSet<IpAddr> = facts.endpoints.iter().copied().collect();
    for ep in unique {
        let (auto, gateway, blackhole) = if ep.is_ipv6() {
            (auto6, &facts.gateway6, "::1")
        } else {
            (auto4, &facts.gateway4, "127.0.0.1")
        };
        if !auto {
            continue;
        }
        let fam = route_family(ep.is_ipv6());
        let ep_str = ep.to_string();
        plan.push(match gateway {
            Some(gw) => Step::may(&["route", "-q", "-n", "add", fam, &ep_str, "-gateway", gw]),
            // No way out but the tunnel: a blackhole keeps the tunnel's own packets from
            // looping into it.
            None => Step::may(&[
                "route",
                "-q",
                "-n",
                "add",
                fam,
                &ep_str,
                blackhole,
                "-blackhole",
            ]),
        });
        added.push(ep);
    }
    (plan, added)
}

/// The deletes of the endpoint routes [`route_plan`] added.
pub(crate) fn endpoint_route_deletes(endpoints: &[IpAddr]) -> Vec<Step> {
    endpoints
        .iter()
        .map(|ep| {
            Step::may(&[
                "route",
                "-q",
                "-n",
                "delete",
                route_family(ep.is_ipv6()),
                &ep.to_string(),
            ])
        })
        .collect()
}

// ---------------------------------------------------------------------------------------
// Reading the system's answers
// ---------------------------------------------------------------------------------------

/// The first default route's gateway in `netstat -nr -f inet|inet6` output, unless it is an
/// interface route (`link#N`).
pub(crate) fn default_gateway(netstat: &str) -> Option<String> {
    netstat.lines().find_map(|l| {
        let mut w = l.split_whitespace();
        let (dest, gw) = (w.next()?, w.next()?);
        (dest == "default" && !gw.starts_with("link#")).then(|| gw.to_owned())
    })
}

/// The `interface:` of `route -n get` output.
pub(crate) fn route_interface(route_get: &str) -> Option<&str> {
    route_get
        .lines()
        .find_map(|l| l.trim().strip_prefix("interface:"))
        .map(str::trim)
        .filter(|s| !s.is_empty())
}

/// The services of `networksetup -listallnetworkservices`: every line after the first (a
/// note about the asterisk), a leading `*` (disabled) removed.
pub(crate) fn network_services(list: &str) -> Vec<String> {
    list.lines()
        .skip(1)
        .map(|l| l.strip_prefix('*').unwrap_or(l).trim())
        .filter(|l| !l.is_empty())
        .map(str::to_owned)
        .collect()
}

/// The values of `networksetup -getdnsservers|-getsearchdomains`: one per line, or none when
/// it answers with a sentence ("There aren't any DNS Servers set on Wi-Fi.").
pub(crate) fn dns_values(output: &str) -> Vec<String> {
    let lines: Vec<&str> = output
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    if lines.iter().any(|l| l.contains(' ')) {
        return Vec::new();
    }
    lines.into_iter().map(str::to_owned).collect()
}

/// The undo file: one command per line, arguments separated by tabs. Only what `up` wrote is
/// read back, but a damaged file must not crash `down`: empty lines are skipped.
pub(crate) fn render_undo(steps: &[Step]) -> String {
    steps.iter().map(|s| s.args.join("\t") + "\n").collect()
}

pub(crate) fn parse_undo(text: &str) -> Vec<Step> {
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| Step {
            args: l.split('\t').map(str::to_owned).collect(),
            must_succeed: false,
        })
        .collect()
}

/// The utun named in `<name>.name`, if its UAPI socket exists and is as recent (wg-quick's
/// `get_real_interface`: within 2 s, so a stale name file from an earlier boot is ignored).
pub(crate) fn real_interface(
    name_file: &str,
    sock_mtime: impl Fn(&str) -> Option<i64>,
    name_mtime: i64,
) -> Option<String> {
    let real = name_file.trim();
    if real.is_empty() || real.contains('/') {
        return None;
    }
    let diff = sock_mtime(real)? - name_mtime;
    (-2 < diff && diff < 2).then(|| real.to_owned())
}

// ---------------------------------------------------------------------------------------
// Running it (macOS)
// ---------------------------------------------------------------------------------------

fn run_dir() -> PathBuf {
    PathBuf::from(RUN_DIR)
}

fn name_file(ifname: &str) -> PathBuf {
    run_dir().join(format!("{ifname}.name"))
}

fn undo_file(ifname: &str) -> PathBuf {
    run_dir().join(format!("{ifname}.vpn-undo"))
}

fn mtime(p: &Path) -> Option<i64> {
    use std::os::unix::fs::MetadataExt;
    fs::metadata(p).ok().map(|m| m.mtime())
}

/// The utun behind wg-quick name `ifname`, if it is running.
fn find_real_interface(ifname: &str) -> Option<String> {
    let nf = name_file(ifname);
    let text = fs::read_to_string(&nf).ok()?;
    let real = real_interface(
        &text,
        |real| mtime(&client::socket_path(&run_dir(), real)),
        mtime(&nf)?,
    )?;
    Some(real)
}

fn run_steps(steps: &[Step]) -> Result<(), Error> {
    for s in steps {
        match run(&s.args, None) {
            Ok(()) => {}
            Err(e) if !s.must_succeed => eprintln!("[!] {e}"),
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// `vpn up` on macOS.
pub fn up(args: &Args, daemon_flags: &[OsString]) -> Result<(), Error> {
    let t = load(&args.config)?;
    check_table(&t.config.interface.table)?;
    if find_real_interface(&t.ifname).is_some() {
        return Err(format!("`{}' already exists", t.ifname).into());
    }
    let mut undo = Vec::new();
    let mut real = None;
    let res = up_steps(&t, daemon_flags, &mut real, &mut undo);
    if res.is_err() {
        if let Some(real) = real {
            take_down(&t.ifname, &real, &undo);
        }
    }
    res
}

fn up_steps(
    t: &Tunnel,
    daemon_flags: &[OsString],
    real: &mut Option<String>,
    undo: &mut Vec<Step>,
) -> Result<(), Error> {
    let r = start_daemon(&t.ifname, daemon_flags)?;
    eprintln!("[+] Interface for {} is {r}", t.ifname);
    *real = Some(r.clone());
    run_hooks(&t.config.interface.pre_up, &t.ifname)?;
    let endpoints = RefCell::new(Vec::new());
    let body = t.config.to_uapi(|host, port| {
        let addr: SocketAddr = super::resolve_endpoint(host, port)?;
        endpoints.borrow_mut().push(addr.ip());
        Ok(addr)
    })?;
    let endpoints = endpoints.into_inner();
    eprintln!(
        "[#] (uapi set) {r}: the configuration of {}",
        t.path.display()
    );
    uapi_set(&r, &body, "setting the configuration")?;

    let mut facts = gather_address_facts(&r, &endpoints, !t.config.interface.dns.is_empty());
    facts.endpoints = endpoints;
    *undo = dns_restore_plan(&t.config, &facts);
    save_undo(&t.ifname, undo);
    run_steps(&address_plan(&t.config, &facts))?;

    gather_route_facts(&t.config, &mut facts);
    let (plan, added) = route_plan(&t.config, &facts);
    undo.extend(endpoint_route_deletes(&added));
    save_undo(&t.ifname, undo);
    run_steps(&plan)?;
    run_hooks(&t.config.interface.post_up, &t.ifname)
}

fn save_undo(ifname: &str, undo: &[Step]) {
    if let Err(e) = fs::write(undo_file(ifname), render_undo(undo)) {
        eprintln!("[!] {}: {e}", undo_file(ifname).display());
    }
}

/// Runs `vpn [flags] utun` with the name file set and waits for its socket to answer.
fn start_daemon(ifname: &str, flags: &[OsString]) -> Result<String, Error> {
    fs::create_dir_all(run_dir()).map_err(|e| format!("{RUN_DIR}: {e}"))?;
    let prog = match std::env::var_os("VPN_DAEMON") {
        Some(p) => PathBuf::from(p),
        None => std::env::current_exe().map_err(|e| format!("cannot find the vpn binary: {e}"))?,
    };
    let nf = name_file(ifname);
    let cmdline = daemon_cmdline(&prog, flags, "utun");
    eprintln!("[#] {}", show(&cmdline));
    let status = Command::new(&prog)
        .args(flags)
        .arg("utun")
        .env("WG_TUN_NAME_FILE", &nf)
        .stdin(Stdio::null())
        .status()
        .map_err(|e| format!("{} failed: {e}", show(&cmdline)))?;
    if !status.success() {
        return Err(format!("{} failed: {status}", show(&cmdline)).into());
    }
    let deadline = Instant::now() + super::DAEMON_READY_TIMEOUT;
    loop {
        if let Some(real) = find_real_interface(ifname) {
            if std::os::unix::net::UnixStream::connect(client::socket_path(&run_dir(), &real))
                .is_ok()
            {
                return Ok(real);
            }
        }
        if Instant::now() >= deadline {
            return Err(format!(
                "{} exited but {} named no running utun within {:?}",
                show(&cmdline),
                nf.display(),
                super::DAEMON_READY_TIMEOUT
            )
            .into());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn mtu_of_route(route_args: &[&str]) -> Option<u32> {
    let out = query(route_args)?;
    let dev = route_interface(&out)?;
    link_mtu(&query(&["ifconfig", dev])?)
}

fn gather_address_facts(real: &str, endpoints: &[IpAddr], dns: bool) -> Facts {
    let endpoint_mtus = endpoints
        .iter()
        .filter_map(|e| mtu_of_route(&["route", "-n", "get", &e.to_string()]))
        .collect::<Vec<_>>();
    let default_mtu = if endpoint_mtus.is_empty() {
        mtu_of_route(&["route", "-n", "get", "default"])
    } else {
        None
    };
    let services = if dns {
        network_services(&query(&["networksetup", "-listallnetworkservices"]).unwrap_or_default())
            .into_iter()
            .map(|service| ServiceDns {
                servers: dns_values(
                    &query(&["networksetup", "-getdnsservers", &service]).unwrap_or_default(),
                ),
                search: dns_values(
                    &query(&["networksetup", "-getsearchdomains", &service]).unwrap_or_default(),
                ),
                service,
            })
            .collect()
    } else {
        Vec::new()
    };
    Facts {
        real_ifname: real.to_owned(),
        endpoint_mtus,
        default_mtu,
        current_mtu: query(&["ifconfig", real]).and_then(|o| link_mtu(&o)),
        services,
        ..Facts::default()
    }
}

fn gather_route_facts(config: &Config, facts: &mut Facts) {
    facts.gateway4 = query(&["netstat", "-nr", "-f", "inet"]).and_then(|o| default_gateway(&o));
    facts.gateway6 = query(&["netstat", "-nr", "-f", "inet6"]).and_then(|o| default_gateway(&o));
    facts.routed_here = route_list(config)
        .into_iter()
        .filter(|p| {
            let fam = route_family(p.is_ipv6());
            query(&["route", "-n", "get", fam, &p.to_string()])
                .is_some_and(|o| route_interface(&o) == Some(facts.real_ifname.as_str()))
        })
        .collect();
}

/// Undoes what `up` recorded, then stops the daemon by removing its socket.
fn take_down(ifname: &str, real: &str, undo: &[Step]) {
    if let Err(e) = run_steps(undo) {
        eprintln!("[!] {e}");
    }
    let sock = client::socket_path(&run_dir(), real);
    for f in [sock.clone(), name_file(ifname), undo_file(ifname)] {
        eprintln!("[#] rm -f {}", f.display());
        if let Err(e) = fs::remove_file(&f) {
            if e.kind() != io::ErrorKind::NotFound {
                eprintln!("[!] {}: {e}", f.display());
            }
        }
    }
    super::wait_gone(&sock);
}

/// `vpn down` on macOS.
pub fn down(args: &Args) -> Result<(), Error> {
    let t = load(&args.config)?;
    let real = find_real_interface(&t.ifname)
        .ok_or_else(|| format!("`{}' is not a WireGuard interface", t.ifname))?;
    eprintln!("[+] Interface for {} is {real}", t.ifname);
    run_hooks(&t.config.interface.pre_down, &t.ifname)?;
    if t.config.interface.save_config {
        let dump = client::get(&run_dir(), &real)
            .map_err(|e| format!("SaveConfig: reading the running configuration: {e}"))?;
        let state = dump
            .parse::<vpn_ipc::DeviceState>()
            .map_err(|e| format!("SaveConfig: reading the running configuration: {e}"))?;
        super::write_config(&t.path, &t.config.with_device_state(&state))?;
    }
    let undo = parse_undo(&fs::read_to_string(undo_file(&t.ifname)).unwrap_or_default());
    take_down(&t.ifname, &real, &undo);
    run_hooks(&t.config.interface.post_down, &t.ifname)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(extra_interface: &str, peers: &[(&str, &str)]) -> Config {
        let mut text = format!(
            "[Interface]\nPrivateKey = {}\n{extra_interface}",
            vpn_config::PrivateKey::from_bytes([1; 32]).to_base64()
        );
        for (i, (allowed, endpoint)) in peers.iter().enumerate() {
            text.push_str(&format!(
                "[Peer]\nPublicKey = {}\nAllowedIPs = {allowed}\n{endpoint}",
                vpn_config::PublicKey::from_bytes([i as u8 + 2; 32]).to_base64()
            ));
        }
        vpn_config::parse(&text).unwrap()
    }

    fn lines(plan: &[Step]) -> Vec<String> {
        plan.iter()
            .map(|s| {
                format!(
                    "{}{}",
                    if s.must_succeed { "" } else { "? " },
                    show(&s.args)
                )
            })
            .collect()
    }

    fn facts() -> Facts {
        Facts {
            real_ifname: "utun4".into(),
            current_mtu: Some(1420),
            ..Facts::default()
        }
    }

    #[test]
    fn addresses_mtu_and_up_as_wg_quick_darwin() {
        let c = config(
            "Address = 100.64.0.2/24, fd00::2/64\n",
            &[("100.64.0.0/24", "")],
        );
        let f = Facts {
            endpoint_mtus: vec![1500],
            ..facts()
        };
        assert_eq!(
            lines(&address_plan(&c, &f)),
            [
                "ifconfig utun4 inet 100.64.0.2/24 100.64.0.2 alias",
                "ifconfig utun4 inet6 fd00::2/64 alias",
                "ifconfig utun4 up",
            ],
            "1500 - 80 is the MTU the utun already has: not set again"
        );
    }

    #[test]
    fn mtu_is_set_when_explicit_or_different() {
        let explicit = config("MTU = 1420\n", &[]);
        assert_eq!(
            lines(&address_plan(&explicit, &facts())),
            ["ifconfig utun4 mtu 1420", "ifconfig utun4 up"]
        );
        let auto = config("", &[]);
        let f = Facts {
            default_mtu: Some(9000),
            ..facts()
        };
        assert_eq!(
            lines(&address_plan(&auto, &f)),
            ["ifconfig utun4 mtu 8920", "ifconfig utun4 up"]
        );
        let f = Facts {
            current_mtu: None,
            ..facts()
        };
        assert_eq!(
            lines(&address_plan(&auto, &f))[0],
            "ifconfig utun4 mtu 1420",
            "no route says otherwise: 1500 - 80"
        );
    }

    fn wifi_and_ethernet() -> Vec<ServiceDns> {
        vec![
            ServiceDns {
                service: "Wi-Fi".into(),
                servers: vec!["192.0.2.53".into()],
                search: vec![],
            },
            ServiceDns {
                service: "USB 10/100/1000 LAN".into(),
                servers: vec![],
                search: vec!["corp".into()],
            },
        ]
    }

    #[test]
    fn dns_is_set_on_every_service_and_restored_as_it_was() {
        let c = config("DNS = 100.64.0.53, fd00::53, lan\n", &[]);
        let f = Facts {
            services: wifi_and_ethernet(),
            ..facts()
        };
        let plan = lines(&address_plan(&c, &f));
        assert_eq!(
            plan[1..],
            [
                "? networksetup -setdnsservers Wi-Fi 100.64.0.53 fd00::53",
                "? networksetup -setsearchdomains Wi-Fi lan",
                "? networksetup -setdnsservers USB 10/100/1000 LAN 100.64.0.53 fd00::53",
                "? networksetup -setsearchdomains USB 10/100/1000 LAN lan",
            ]
        );
        // The service name stays one argument despite its spaces.
        let steps = address_plan(&c, &f);
        assert_eq!(steps[3].args[2], "USB 10/100/1000 LAN");
        assert_eq!(
            lines(&dns_restore_plan(&c, &f)),
            [
                "? networksetup -setdnsservers Wi-Fi 192.0.2.53",
                "? networksetup -setsearchdomains Wi-Fi Empty",
                "? networksetup -setdnsservers USB 10/100/1000 LAN Empty",
                "? networksetup -setsearchdomains USB 10/100/1000 LAN corp",
            ]
        );
        let no_dns = config("", &[]);
        assert_eq!(
            lines(&address_plan(&no_dns, &f)),
            ["ifconfig utun4 up"],
            "without DNS = the services are left alone"
        );
        assert!(dns_restore_plan(&no_dns, &f).is_empty());
        let no_search = config("DNS = 100.64.0.53\n", &[]);
        assert_eq!(
            lines(&address_plan(&no_search, &f))[2],
            "? networksetup -setsearchdomains Wi-Fi Empty"
        );
    }

    #[test]
    fn routes_most_specific_first_skipping_those_already_through_the_utun() {
        let c = config(
            "",
            &[
                ("100.64.0.0/24, 10.1.0.0/16", ""),
                ("fd00::/64, 10.1.2.3/32", ""),
            ],
        );
        let f = Facts {
            routed_here: vec!["100.64.0.0/24".parse().unwrap()],
            ..facts()
        };
        let (plan, added) = route_plan(&c, &f);
        assert_eq!(
            lines(&plan),
            [
                "route -q -n add -inet6 fd00::/64 -interface utun4",
                "route -q -n add -inet 10.1.2.3/32 -interface utun4",
                "route -q -n add -inet 10.1.0.0/16 -interface utun4",
            ]
        );
        assert!(added.is_empty());
    }

    #[test]
    fn default_routes_are_split_in_halves_and_endpoints_go_around_the_tunnel() {
        let c = config(
            "",
            &[
                ("0.0.0.0/0, ::/0", "Endpoint = 198.18.0.1:51820\n"),
                ("100.64.1.0/24", "Endpoint = [2001:db8::1]:51820\n"),
            ],
        );
        let f = Facts {
            gateway4: Some("192.0.2.1".into()),
            gateway6: Some("fe80::1%en0".into()),
            endpoints: vec![
                "198.18.0.1".parse().unwrap(),
                "2001:db8::1".parse().unwrap(),
                "198.18.0.1".parse().unwrap(),
            ],
            ..facts()
        };
        let (plan, added) = route_plan(&c, &f);
        assert_eq!(
            lines(&plan),
            [
                "route -q -n add -inet 100.64.1.0/24 -interface utun4",
                "route -q -n add -inet 0.0.0.0/1 -interface utun4",
                "route -q -n add -inet 128.0.0.0/1 -interface utun4",
                "route -q -n add -inet6 ::/1 -interface utun4",
                "route -q -n add -inet6 8000::/1 -interface utun4",
                "? route -q -n add -inet 198.18.0.1 -gateway 192.0.2.1",
                "? route -q -n add -inet6 2001:db8::1 -gateway fe80::1%en0",
            ]
        );
        assert_eq!(
            lines(&endpoint_route_deletes(&added)),
            [
                "? route -q -n delete -inet 198.18.0.1",
                "? route -q -n delete -inet6 2001:db8::1",
            ]
        );
    }

    #[test]
    fn endpoint_routes_only_for_a_family_routed_by_default_and_blackholed_without_gateway() {
        let c = config("", &[("0.0.0.0/0", "")]);
        let f = Facts {
            endpoints: vec![
                "198.18.0.1".parse().unwrap(),
                "2001:db8::1".parse().unwrap(),
            ],
            ..facts()
        };
        let (plan, added) = route_plan(&c, &f);
        assert_eq!(
            lines(&plan)[2..],
            ["? route -q -n add -inet 198.18.0.1 127.0.0.1 -blackhole"]
        );
        assert_eq!(added, ["198.18.0.1".parse::<IpAddr>().unwrap()]);
    }

    #[test]
    fn tables_off_main_and_numbers() {
        let off = config("Table = off\n", &[("0.0.0.0/0, 10.0.0.0/8", "")]);
        assert!(route_plan(&off, &facts()).0.is_empty());
        let main = config("Table = main\n", &[("0.0.0.0/0", "")]);
        assert_eq!(
            lines(&route_plan(&main, &facts()).0),
            ["route -q -n add -inet 0.0.0.0/0 -interface utun4"]
        );
        assert!(check_table(&Table::Auto).is_ok());
        assert!(check_table(&Table::Off).is_ok());
        assert!(check_table(&Table::Name("main".into())).is_ok());
        let e = check_table(&Table::Id(1234)).unwrap_err();
        assert!(e.contains("one routing table"), "{e}");
        assert!(check_table(&Table::Name("vpn".into())).is_err());
    }

    #[test]
    fn netstat_default_gateway() {
        let v4 = "Routing tables\n\nInternet:\nDestination        Gateway            Flags               Netif Expire\ndefault            link#17            UCSIg               utun3\ndefault            192.168.1.1        UGScg                 en0\n127                127.0.0.1          UCS                   lo0\n";
        assert_eq!(default_gateway(v4).as_deref(), Some("192.168.1.1"));
        let v6 = "Internet6:\nDestination                             Gateway                                 Flags               Netif Expire\ndefault                                 fe80::1%en0                             UGcIg                 en0\n";
        assert_eq!(default_gateway(v6).as_deref(), Some("fe80::1%en0"));
        assert_eq!(default_gateway("default link#4 UCS utun0\n"), None);
        assert_eq!(default_gateway(""), None);
        assert_eq!(default_gateway("default"), None);
    }

    #[test]
    fn route_get_and_ifconfig() {
        let get = "   route to: 198.18.0.1\ndestination: default\n       mask: default\n    gateway: 192.168.1.1\n  interface: en0\n      flags: <UP,GATEWAY,DONE,STATIC,PRCLONING>\n";
        assert_eq!(route_interface(get), Some("en0"));
        assert_eq!(route_interface("interface:\n"), None);
        assert_eq!(route_interface(""), None);
        let ifc = "en0: flags=8863<UP,BROADCAST,SMART,RUNNING,SIMPLEX,MULTICAST> mtu 1500\n\toptions=6463<RXCSUM,TXCSUM>\n";
        assert_eq!(link_mtu(ifc), Some(1500));
        assert_eq!(link_mtu("utun4: flags=8051<UP> mtu"), None);
        assert_eq!(link_mtu("mtu lots"), None);
    }

    #[test]
    fn networksetup_output() {
        let list = "An asterisk (*) denotes that a network service is disabled.\nWi-Fi\n*Thunderbolt Bridge\nUSB 10/100/1000 LAN\n\n";
        assert_eq!(
            network_services(list),
            ["Wi-Fi", "Thunderbolt Bridge", "USB 10/100/1000 LAN"]
        );
        assert!(network_services("").is_empty());
        assert_eq!(
            dns_values("192.0.2.53\n2001:db8::53\n"),
            ["192.0.2.53", "2001:db8::53"]
        );
        assert!(dns_values("There aren't any DNS Servers set on Wi-Fi.\n").is_empty());
        assert!(dns_values("").is_empty());
    }

    #[test]
    fn undo_file_round_trips_and_skips_blank_lines() {
        let steps = vec![
            Step::may(&[
                "networksetup",
                "-setdnsservers",
                "USB 10/100/1000 LAN",
                "Empty",
            ]),
            Step::may(&["route", "-q", "-n", "delete", "-inet", "198.18.0.1"]),
        ];
        let text = render_undo(&steps);
        assert_eq!(parse_undo(&text), steps);
        assert_eq!(parse_undo(&format!("\n \n{text}\n")), steps);
        assert!(parse_undo("").is_empty());
    }

    #[test]
    fn real_interface_needs_a_socket_as_new_as_the_name_file() {
        let sock = |t: i64| move |name: &str| (name == "utun7").then_some(t);
        assert_eq!(
            real_interface("utun7\n", sock(100), 101).as_deref(),
            Some("utun7")
        );
        assert_eq!(real_interface("utun7\n", sock(100), 102), None, "stale");
        assert_eq!(real_interface("utun8\n", sock(100), 100), None, "no socket");
        assert_eq!(real_interface("\n", sock(100), 100), None);
        assert_eq!(real_interface("../x\n", sock(100), 100), None);
    }

    /// Whatever a command prints, reading it never panics (these parsers read the output of
    /// local tools, but a changed format must cost a fact, not the process).
    #[test]
    fn parsers_take_arbitrary_output() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::StdRng::seed_from_u64(15);
        let pieces = [
            "default",
            "link#",
            "interface:",
            "mtu",
            " ",
            "\t",
            "\n",
            "*",
            "é",
            "\u{0}",
            "192.0.2.1",
            "fe80::1%en0",
            "99999999999",
            "-",
        ];
        for _ in 0..3000 {
            let n = rng.gen_range(0..24);
            let s: String = (0..n)
                .map(|_| pieces[rng.gen_range(0..pieces.len())])
                .collect();
            let _ = default_gateway(&s);
            let _ = route_interface(&s);
            let _ = link_mtu(&s);
            let _ = network_services(&s);
            let _ = dns_values(&s);
            let _ = parse_undo(&s);
            let _ = real_interface(&s, |_| Some(0), 0);
        }
    }
}
