//! wg-quick's firewall rules for a default route through the tunnel (Linux).
//!
//! With every route pointing into the tunnel, a host would otherwise accept a packet addressed
//! to its tunnel address from any interface: someone on the local network could reach
//! services bound to the tunnel address, or probe which tunnel address the host has. wg-quick
//! adds, per address family with a default route:
//! - in the raw table (prerouting, before conntrack), a drop of packets to each tunnel address
//!   that arrive on another interface from a source that is not local;
//! - two mangle rules copying the tunnel's fwmark into conntrack and back, so replies to the
//!   daemon's UDP flows keep the mark (with `src_valid_mark`, reverse-path checks then use the
//!   main table).
//!
//! nftables where `nft` is installed (one table `wg-quick-<ifname>` per family, created in one
//! atomic `nft -f`), else `iptables-restore`/`ip6tables-restore -n` with the rules tagged by a
//! comment. The tool is chosen before `vpn up` changes anything: without either, `vpn up`
//! refuses at once. The names and comments are wg-quick's, so either tool removes the other's
//! rules. Text in and out is built and parsed by the pure functions below (tested here); the
//! addresses put into a rule are parsed as IP addresses first, never copied as text.

use std::net::IpAddr;

use super::{in_path, query, run};
use crate::Error;

/// The program that installs the rules.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Tool {
    Nft,
    Iptables,
}

/// The tool for default routes of the given families: nft if installed, else the
/// iptables-restore of each family needed. An error (nothing changed yet) without either.
pub(super) fn choose(v4: bool, v6: bool) -> Result<Tool, Error> {
    choose_from(v4, v6, |p| in_path(p).is_some())
}

fn choose_from(v4: bool, v6: bool, installed: impl Fn(&str) -> bool) -> Result<Tool, Error> {
    if installed("nft") {
        return Ok(Tool::Nft);
    }
    let missing: Vec<&str> = [(v4, "iptables-restore"), (v6, "ip6tables-restore")]
        .into_iter()
        .filter(|&(needed, prog)| needed && !installed(prog))
        .map(|(_, prog)| prog)
        .collect();
    if missing.is_empty() {
        return Ok(Tool::Iptables);
    }
    Err(format!(
        "a default route through the tunnel needs wg-quick's anti-spoofing firewall rules, \
         but neither nft (package nftables) nor {} (package iptables) is installed; \
         install one of them, or route narrower AllowedIPs (or Table = off); nothing was changed",
        missing.join(" and ")
    )
    .into())
}

/// The addresses in `ip -o -4|-6 address show dev <ifname>` (wg-quick's
/// `inet6? ([0-9a-f:.]+)/[0-9]+` match), each parsed as an address.
pub(super) fn interface_addresses(ip_output: &str) -> Vec<IpAddr> {
    ip_output
        .lines()
        .filter_map(|line| {
            let mut words = line.split_whitespace();
            words.find(|w| *w == "inet" || *w == "inet6")?;
            let (addr, len) = words.next()?.split_once('/')?;
            len.parse::<u8>().ok()?;
            addr.parse().ok()
        })
        .collect()
}

/// nft's family word and the table name: `ip wg-quick-wg0`.
fn nft_table(ifname: &str, v6: bool) -> String {
    format!("{} wg-quick-{ifname}", if v6 { "ip6" } else { "ip" })
}

/// wg-quick's `nft -f` input for one family's default route.
pub(super) fn nft_script(ifname: &str, v6: bool, addrs: &[IpAddr], table: u32) -> String {
    let t = nft_table(ifname, v6);
    let pf = if v6 { "ip6" } else { "ip" };
    let mut s = format!("add table {t}\n");
    s += &format!("add chain {t} preraw {{ type filter hook prerouting priority -300; }}\n");
    s += &format!("add chain {t} premangle {{ type filter hook prerouting priority -150; }}\n");
    s += &format!("add chain {t} postmangle {{ type filter hook postrouting priority -150; }}\n");
    for a in addrs.iter().filter(|a| a.is_ipv6() == v6) {
        s += &format!(
            "add rule {t} preraw iifname != \"{ifname}\" {pf} daddr {a} fib saddr type != local drop\n"
        );
    }
    s += &format!("add rule {t} postmangle meta l4proto udp mark {table} ct mark set mark \n");
    s += &format!("add rule {t} premangle meta l4proto udp meta mark set ct mark \n");
    s
}

/// The comment that tags wg-quick's iptables rules for `ifname`.
fn marker(ifname: &str) -> String {
    format!("-m comment --comment \"wg-quick(8) rule for {ifname}\"")
}

/// wg-quick's `iptables-restore -n` input for one family's default route.
pub(super) fn iptables_input(ifname: &str, v6: bool, addrs: &[IpAddr], table: u32) -> String {
    let m = marker(ifname);
    let mut s = String::from("*raw\n");
    for a in addrs.iter().filter(|a| a.is_ipv6() == v6) {
        s += &format!(
            "-I PREROUTING ! -i {ifname} -d {a} -m addrtype ! --src-type LOCAL -j DROP {m}\n"
        );
    }
    s += "COMMIT\n*mangle\n";
    s += &format!("-I POSTROUTING -m mark --mark {table} -p udp -j CONNMARK --save-mark {m}\n");
    s += &format!("-I PREROUTING -p udp -j CONNMARK --restore-mark {m}\n");
    s += "COMMIT\n";
    s
}

/// `nft -f` input deleting every `wg-quick-<ifname>` table `nft list tables` shows, if any.
pub(super) fn nft_delete_script(list_tables: &str, ifname: &str) -> Option<String> {
    let suffix = format!(" wg-quick-{ifname}");
    let s: String = list_tables
        .lines()
        .map(str::trim)
        .filter(|l| l.starts_with("table ") && l.ends_with(&suffix))
        .map(|l| format!("delete {l}\n"))
        .collect();
    (!s.is_empty()).then_some(s)
}

/// `iptables-restore -n` input deleting the tagged rules `iptables-save` shows, if any
/// (wg-quick's `remove_firewall`: table headers and COMMITs kept, `-A` turned into `-D`).
pub(super) fn iptables_delete_input(save: &str, ifname: &str) -> Option<String> {
    let m = marker(ifname);
    let mut found = false;
    let mut s = String::new();
    for line in save.lines() {
        if line.starts_with('*') || line == "COMMIT" {
            s += line;
        } else if let Some(rest) = line.strip_prefix("-A ").filter(|r| r.contains(&m)) {
            found = true;
            s += "-D ";
            s += rest;
        } else {
            continue;
        }
        s.push('\n');
    }
    found.then_some(s)
}

/// Installs the rules for one family's default route on `ifname` (its addresses as the link
/// has them now).
pub(super) fn add(tool: Tool, ifname: &str, v6: bool, table: u32) -> Result<(), Error> {
    let f = if v6 { "-6" } else { "-4" };
    let addrs = interface_addresses(
        &query(&["ip", "-o", f, "address", "show", "dev", ifname]).unwrap_or_default(),
    );
    match tool {
        Tool::Nft => run(
            &owned(&["nft", "-f", "-"]),
            Some(&nft_script(ifname, v6, &addrs, table)),
        ),
        Tool::Iptables => run(
            &owned(&[restore_prog(v6), "-n"]),
            Some(&iptables_input(ifname, v6, &addrs, table)),
        ),
    }
}

fn restore_prog(v6: bool) -> &'static str {
    if v6 {
        "ip6tables-restore"
    } else {
        "iptables-restore"
    }
}

fn owned(a: &[&str]) -> Vec<String> {
    a.iter().map(|s| (*s).to_owned()).collect()
}

/// Removes every rule wg-quick's names tag for `ifname`, with whichever tools are installed
/// (wg-quick's `remove_firewall`). Best effort: failures are reported, not fatal.
pub(super) fn remove(ifname: &str) {
    if in_path("nft").is_some() {
        let tables = query(&["nft", "list", "tables"]).unwrap_or_default();
        if let Some(script) = nft_delete_script(&tables, ifname) {
            if let Err(e) = run(&owned(&["nft", "-f", "-"]), Some(&script)) {
                eprintln!("[!] {e}");
            }
        }
    }
    for v6 in [false, true] {
        let save = if v6 {
            "ip6tables-save"
        } else {
            "iptables-save"
        };
        if in_path(save).is_none() || in_path(restore_prog(v6)).is_none() {
            continue;
        }
        let dump = query(&[save]).unwrap_or_default();
        if let Some(input) = iptables_delete_input(&dump, ifname) {
            if let Err(e) = run(&owned(&[restore_prog(v6), "-n"]), Some(&input)) {
                eprintln!("[!] {e}");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addrs() -> Vec<IpAddr> {
        interface_addresses(
            "7: wg0    inet 100.64.0.1/24 scope global wg0\\       valid_lft forever preferred_lft forever\n\
             7: wg0    inet6 fd00::1/64 scope global \\       valid_lft forever preferred_lft forever\n\
             7: wg0    inet6 fe80::1/64 scope link \\       valid_lft forever preferred_lft forever\n\
             7: wg0    inet 1.2.3.4;drop/24 scope global wg0\n",
        )
    }

    #[test]
    fn addresses_are_parsed_not_copied() {
        let a: Vec<String> = addrs().iter().map(ToString::to_string).collect();
        assert_eq!(a, ["100.64.0.1", "fd00::1", "fe80::1"]);
        assert!(interface_addresses("").is_empty());
    }

    #[test]
    fn nft_rules_are_wg_quicks() {
        assert_eq!(
            nft_script("wg0", false, &addrs(), 51820),
            "add table ip wg-quick-wg0\n\
             add chain ip wg-quick-wg0 preraw { type filter hook prerouting priority -300; }\n\
             add chain ip wg-quick-wg0 premangle { type filter hook prerouting priority -150; }\n\
             add chain ip wg-quick-wg0 postmangle { type filter hook postrouting priority -150; }\n\
             add rule ip wg-quick-wg0 preraw iifname != \"wg0\" ip daddr 100.64.0.1 fib saddr type != local drop\n\
             add rule ip wg-quick-wg0 postmangle meta l4proto udp mark 51820 ct mark set mark \n\
             add rule ip wg-quick-wg0 premangle meta l4proto udp meta mark set ct mark \n"
        );
        let v6 = nft_script("wg0", true, &addrs(), 7);
        assert!(v6.starts_with("add table ip6 wg-quick-wg0\n"));
        assert!(v6.contains(
            "preraw iifname != \"wg0\" ip6 daddr fd00::1 fib saddr type != local drop\n"
        ));
        assert!(v6.contains("preraw iifname != \"wg0\" ip6 daddr fe80::1 fib"));
        assert!(!v6.contains("100.64.0.1"));
        assert!(v6.contains("mark 7 ct mark set mark"));
    }

    #[test]
    fn iptables_rules_are_wg_quicks() {
        assert_eq!(
            iptables_input("wg0", false, &addrs(), 51820),
            "*raw\n\
             -I PREROUTING ! -i wg0 -d 100.64.0.1 -m addrtype ! --src-type LOCAL -j DROP -m comment --comment \"wg-quick(8) rule for wg0\"\n\
             COMMIT\n*mangle\n\
             -I POSTROUTING -m mark --mark 51820 -p udp -j CONNMARK --save-mark -m comment --comment \"wg-quick(8) rule for wg0\"\n\
             -I PREROUTING -p udp -j CONNMARK --restore-mark -m comment --comment \"wg-quick(8) rule for wg0\"\n\
             COMMIT\n"
        );
    }

    #[test]
    fn removal_finds_only_this_interfaces_rules() {
        let tables = "table inet filter\ntable ip wg-quick-wg0\ntable ip6 wg-quick-wg0\ntable ip wg-quick-wg01\n";
        assert_eq!(
            nft_delete_script(tables, "wg0").as_deref(),
            Some("delete table ip wg-quick-wg0\ndelete table ip6 wg-quick-wg0\n")
        );
        assert_eq!(nft_delete_script("table inet filter\n", "wg0"), None);

        let save = "# Generated by iptables-save\n*raw\n:PREROUTING ACCEPT [0:0]\n\
            -A PREROUTING -d 100.64.0.1/32 ! -i wg0 -m addrtype ! --src-type LOCAL -m comment --comment \"wg-quick(8) rule for wg0\" -j DROP\n\
            -A PREROUTING -d 10.0.0.1/32 -m comment --comment \"wg-quick(8) rule for wg1\" -j DROP\n\
            COMMIT\n*filter\n-A INPUT -j ACCEPT\nCOMMIT\n";
        assert_eq!(
            iptables_delete_input(save, "wg0").as_deref(),
            Some("*raw\n-D PREROUTING -d 100.64.0.1/32 ! -i wg0 -m addrtype ! --src-type LOCAL -m comment --comment \"wg-quick(8) rule for wg0\" -j DROP\nCOMMIT\n*filter\nCOMMIT\n")
        );
        assert_eq!(iptables_delete_input(save, "wg2"), None);
    }

    #[test]
    fn tool_choice_prefers_nft_and_refuses_without_any() {
        assert_eq!(choose_from(true, true, |_| true).unwrap(), Tool::Nft);
        assert_eq!(
            choose_from(true, false, |p| p == "iptables-restore").unwrap(),
            Tool::Iptables
        );
        let e = choose_from(true, true, |p| p == "iptables-restore")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("neither nft (package nftables) nor ip6tables-restore"),
            "{e}"
        );
        let e = choose_from(true, false, |_| false).unwrap_err().to_string();
        assert!(
            e.contains("nor iptables-restore (package iptables)")
                && e.contains("nothing was changed"),
            "{e}"
        );
    }
}
