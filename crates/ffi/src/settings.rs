//! A wg-quick configuration as a network extension needs it: the UAPI `set` text for
//! `wgTurnOn`, and the interface's network settings (addresses, routes, DNS, MTU) in the shape
//! of `NEPacketTunnelNetworkSettings`.
//!
//! The file is parsed by `vpn-config` (the one wg-quick parser) and endpoints are resolved
//! once, so the UAPI text and the routes that keep endpoints out of the tunnel name the same
//! addresses. Routes follow WireGuardKit: each interface address's own network, then every
//! peer's allowed IPs.

use serde_json::{json, Value};
use std::io;
use std::net::{IpAddr, SocketAddr, ToSocketAddrs};
use vpn_config::IpPrefix;

/// Bytes WireGuard adds to every packet over IPv6 (40 IPv6 + 8 UDP + 32 WireGuard): the
/// extension sets it as `tunnelOverheadBytes` when the file gives no MTU, so the system derives
/// the MTU from the path instead.
pub const TUNNEL_OVERHEAD_BYTES: u32 = 80;

/// What the extension applies before `wgTurnOn`, and the settings text it passes to it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NetworkSettings {
    /// The UAPI `set` body for `wgTurnOn` (endpoints resolved).
    pub uapi: String,
    /// The interface's addresses (`Address`), host bits kept.
    pub addresses: Vec<IpPrefix>,
    /// Routes into the tunnel, masked, without duplicates.
    pub included_routes: Vec<IpPrefix>,
    /// Routes kept out of the tunnel: every resolved endpoint as a host route, so the
    /// encrypted packets never loop back into the tunnel when an allowed IP covers them.
    pub excluded_routes: Vec<IpPrefix>,
    /// Name servers (`DNS` addresses).
    pub dns_servers: Vec<IpAddr>,
    /// Search domains (`DNS` names).
    pub search_domains: Vec<String>,
    /// `MTU`, if the file gives one.
    pub mtu: Option<u32>,
}

/// Resolves an endpoint host with the system resolver (first answer), as `wg` does once at
/// configuration time.
pub fn system_resolve(host: &str, port: u16) -> io::Result<SocketAddr> {
    (host, port)
        .to_socket_addrs()?
        .next()
        .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, format!("`{host}` has no address")))
}

/// Parses `config` and derives everything the extension needs; `resolve` turns endpoint hosts
/// into addresses. The error is for a person (it names the line).
pub fn network_settings(
    config: &str,
    resolve: impl Fn(&str, u16) -> io::Result<SocketAddr>,
) -> Result<NetworkSettings, String> {
    let cfg = vpn_config::parse(config).map_err(|e| e.to_string())?;
    let resolved = std::cell::RefCell::new(Vec::new());
    let uapi = cfg
        .to_uapi(|host, port| {
            let a = resolve(host, port)?;
            resolved.borrow_mut().push(a);
            Ok(a)
        })
        .map_err(|e| e.to_string())?;
    let i = &cfg.interface;
    let mut included = Vec::new();
    let routes = i
        .addresses
        .iter()
        .chain(cfg.peers.iter().flat_map(|p| &p.allowed_ips));
    for r in routes.map(IpPrefix::masked) {
        if !included.contains(&r) {
            included.push(r);
        }
    }
    let mut excluded = Vec::new();
    for host in resolved
        .into_inner()
        .iter()
        .filter_map(|a| host_prefix(a.ip()))
    {
        if !excluded.contains(&host) {
            excluded.push(host);
        }
    }
    Ok(NetworkSettings {
        uapi,
        addresses: i.addresses.clone(),
        included_routes: included,
        excluded_routes: excluded,
        dns_servers: i.dns.clone(),
        search_domains: i.dns_search.clone(),
        mtu: i.mtu,
    })
}

/// The host route of `ip` (/32 or /128; never `None`).
fn host_prefix(ip: IpAddr) -> Option<IpPrefix> {
    IpPrefix::new(ip, if ip.is_ipv4() { 32 } else { 128 })
}

/// The dotted mask of an IPv4 prefix length (`24` → `255.255.255.0`).
fn ipv4_mask(len: u8) -> String {
    let m = u32::MAX.checked_shl(32 - u32::from(len)).unwrap_or(0);
    std::net::Ipv4Addr::from(m).to_string()
}

fn v4_route(p: &IpPrefix) -> Value {
    json!({ "destination": p.addr().to_string(), "subnet_mask": ipv4_mask(p.prefix_len()) })
}

fn v6_route(p: &IpPrefix) -> Value {
    json!({ "destination": p.addr().to_string(), "prefix_length": p.prefix_len() })
}

impl NetworkSettings {
    /// The settings as the JSON object `wgNetworkSettings` returns (documented in
    /// `docs/embedding.md`): per family `addresses`, `included_routes` and `excluded_routes`;
    /// `dns` (absent without name servers or search domains); `mtu` or
    /// `tunnel_overhead_bytes`; and `uapi`.
    pub fn to_json(&self) -> Value {
        let fam = |v6: bool| {
            let pick = |ps: &[IpPrefix]| -> Vec<Value> {
                ps.iter()
                    .filter(|p| p.is_ipv6() == v6)
                    .map(|p| if v6 { v6_route(p) } else { v4_route(p) })
                    .collect()
            };
            let addresses: Vec<Value> = self
                .addresses
                .iter()
                .filter(|p| p.is_ipv6() == v6)
                .map(|p| {
                    if v6 {
                        json!({ "address": p.addr().to_string(), "prefix_length": p.prefix_len() })
                    } else {
                        json!({ "address": p.addr().to_string(), "subnet_mask": ipv4_mask(p.prefix_len()) })
                    }
                })
                .collect();
            json!({
                "addresses": addresses,
                "included_routes": pick(&self.included_routes),
                "excluded_routes": pick(&self.excluded_routes),
            })
        };
        let mut v = json!({
            // The extension's tunnel has no single remote; WireGuardKit names loopback.
            "tunnel_remote_address": "127.0.0.1",
            "ipv4": fam(false),
            "ipv6": fam(true),
            "uapi": self.uapi,
        });
        if !self.dns_servers.is_empty() || !self.search_domains.is_empty() {
            let servers: Vec<String> = self.dns_servers.iter().map(IpAddr::to_string).collect();
            // With name servers, every query goes to them (an empty match domain matches all).
            let match_domains: Vec<&str> = if servers.is_empty() { vec![] } else { vec![""] };
            v["dns"] = json!({
                "servers": servers,
                "search_domains": self.search_domains,
                "match_domains": match_domains,
            });
        }
        match self.mtu {
            Some(m) => v["mtu"] = json!(m),
            None => v["tunnel_overhead_bytes"] = json!(TUNNEL_OVERHEAD_BYTES),
        }
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY_A: &str = "yAnz5TF+lXXJte14tji3zlMNq+hd2rYUIgJBgB3fBmk=";
    const KEY_B: &str = "xTIBA5rboUvnH4htodjb6e697QjLERt1NAB4mZqp8Dg=";

    fn no_dns(host: &str, port: u16) -> io::Result<SocketAddr> {
        match host.parse::<IpAddr>() {
            Ok(ip) => Ok(SocketAddr::new(ip, port)),
            Err(_) => Err(io::Error::new(
                io::ErrorKind::NotFound,
                "no resolver in tests",
            )),
        }
    }

    fn config(extra_iface: &str, peers: &str) -> String {
        format!("[Interface]\nPrivateKey = {KEY_A}\n{extra_iface}\n{peers}")
    }

    #[test]
    fn addresses_routes_and_endpoint_exclusions_follow_the_file() {
        let text = config(
            "Address = 100.64.0.2/24, fd00::2/64\nDNS = 100.64.0.1, fd00::1, corp.example\nMTU = 1380",
            &format!(
                "[Peer]\nPublicKey = {KEY_B}\nEndpoint = 198.18.0.1:51820\n\
                 AllowedIPs = 0.0.0.0/0, ::/0, 100.64.0.0/24\n"
            ),
        );
        let s = network_settings(&text, no_dns).unwrap();
        let p = |s: &str| s.parse::<IpPrefix>().unwrap();
        assert_eq!(s.addresses, vec![p("100.64.0.2/24"), p("fd00::2/64")]);
        // The address networks first, then allowed IPs; 100.64.0.0/24 only once.
        assert_eq!(
            s.included_routes,
            vec![
                p("100.64.0.0/24"),
                p("fd00::/64"),
                p("0.0.0.0/0"),
                p("::/0")
            ]
        );
        assert_eq!(s.excluded_routes, vec![p("198.18.0.1/32")]);
        assert_eq!(s.mtu, Some(1380));
        assert!(s.uapi.contains("endpoint=198.18.0.1:51820\n"), "{}", s.uapi);
        assert!(s.uapi.contains("replace_peers=true\n"));

        let j = s.to_json();
        assert_eq!(j["ipv4"]["addresses"][0]["subnet_mask"], "255.255.255.0");
        assert_eq!(j["ipv4"]["included_routes"][1]["subnet_mask"], "0.0.0.0");
        assert_eq!(j["ipv4"]["excluded_routes"][0]["destination"], "198.18.0.1");
        assert_eq!(j["ipv6"]["addresses"][0]["prefix_length"], 64);
        assert_eq!(j["ipv6"]["included_routes"][0]["destination"], "fd00::");
        assert_eq!(j["dns"]["servers"], json!(["100.64.0.1", "fd00::1"]));
        assert_eq!(j["dns"]["search_domains"], json!(["corp.example"]));
        assert_eq!(j["dns"]["match_domains"], json!([""]));
        assert_eq!(j["mtu"], 1380);
        assert!(j.get("tunnel_overhead_bytes").is_none());
        assert_eq!(j["uapi"], s.uapi);
    }

    #[test]
    fn without_an_mtu_the_extension_gets_the_tunnel_overhead() {
        let s = network_settings(&config("Address = 100.64.0.2/32", ""), no_dns).unwrap();
        let j = s.to_json();
        assert!(j.get("mtu").is_none());
        assert_eq!(j["tunnel_overhead_bytes"], 80);
        assert!(j.get("dns").is_none(), "no DNS settings without DNS lines");
        assert_eq!(j["ipv6"]["addresses"], json!([]));
    }

    #[test]
    fn hostname_endpoints_are_resolved_once_for_uapi_and_routes() {
        let calls = std::cell::Cell::new(0);
        let text = config(
            "",
            &format!(
                "[Peer]\nPublicKey = {KEY_B}\nEndpoint = vpn.example:51820\nAllowedIPs = ::/0\n"
            ),
        );
        let s = network_settings(&text, |host, port| {
            calls.set(calls.get() + 1);
            assert_eq!(host, "vpn.example");
            Ok(SocketAddr::new("fd00:18::1".parse().unwrap(), port))
        })
        .unwrap();
        assert_eq!(calls.get(), 1);
        assert!(s.uapi.contains("endpoint=[fd00:18::1]:51820\n"));
        assert_eq!(s.excluded_routes, vec!["fd00:18::1/128".parse().unwrap()]);
    }

    #[test]
    fn a_bad_file_or_an_unresolvable_endpoint_is_an_error_naming_the_cause() {
        let e = network_settings("[Interface]\nPrivateKey = nope\n", no_dns).unwrap_err();
        assert!(e.starts_with("line 2:"), "{e}");
        let text = config(
            "",
            &format!("[Peer]\nPublicKey = {KEY_B}\nEndpoint = gone.example:1\n"),
        );
        let e = network_settings(&text, no_dns).unwrap_err();
        assert!(e.contains("gone.example"), "{e}");
    }

    #[test]
    fn ipv4_masks_cover_every_length() {
        assert_eq!(ipv4_mask(0), "0.0.0.0");
        assert_eq!(ipv4_mask(1), "128.0.0.0");
        assert_eq!(ipv4_mask(24), "255.255.255.0");
        assert_eq!(ipv4_mask(32), "255.255.255.255");
    }
}
