//! The line parser.
//!
//! Follows `wg`'s config.c and wg-quick's `parse_options`: section names and keys are
//! case-insensitive, `#` starts a comment (except that hooks keep their whole text, as
//! wg-quick passes the unstripped value to the shell), whitespace around keys, values and
//! list items is ignored. Unlike `wg`, which silently lets a later line override an earlier
//! one, a second occurrence of a single-valued key is an error: it is almost always a
//! copy-paste mistake and the user should see which line wins.
//!
//! The proxy and forwarding sections (see the crate docs) follow the same rules; `[Socks5]`
//! and `[http]` may appear once each, the tunnel sections any number of times, and every
//! key of theirs is single-valued.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use vpn_proto::keys::{PresharedKey, PrivateKey, PublicKey};

use crate::error::ConfigError;
use crate::types::{Endpoint, IpPrefix};
use crate::{Config, Interface, LocalForward, Peer, ProxySettings, RemoteForward};

/// Smallest MTU Linux accepts for an IPv4 interface.
const MIN_MTU: u32 = 68;
/// Largest MTU of a TUN device (the IP total-length field).
const MAX_MTU: u32 = 65535;

/// Parses a wg-quick configuration file.
///
/// Every refusal names the line (see [`ConfigError`]); the function never panics on any input.
pub fn parse(text: &str) -> Result<Config, ConfigError> {
    let mut p = Parser::default();
    for (idx, raw) in text.lines().enumerate() {
        p.line(idx + 1, raw)?;
    }
    p.finish()
}

#[derive(Clone, Copy, PartialEq, Eq, Default)]
enum Section {
    #[default]
    None,
    Interface,
    Peer,
    Proxy(ProxyKind),
    Forward,
}

/// Which proxy section: each may appear once.
#[derive(Clone, Copy, PartialEq, Eq)]
enum ProxyKind {
    Socks5,
    Http,
}

impl ProxyKind {
    fn name(self) -> &'static str {
        match self {
            ProxyKind::Socks5 => "[Socks5]",
            ProxyKind::Http => "[http]",
        }
    }
}

/// The canonical header of a tunnel section.
fn forward_name(remote: bool, udp: bool) -> &'static str {
    match (remote, udp) {
        (false, false) => "[TCPClientTunnel]",
        (false, true) => "[UDPClientTunnel]",
        (true, false) => "[TCPServerTunnel]",
        (true, true) => "[UDPServerTunnel]",
    }
}

/// A value and the line it was set on.
type At<T> = Option<(T, usize)>;

/// A `[Socks5]` or `[http]` section being read.
struct ProxyDraft {
    header_line: usize,
    bind: At<SocketAddr>,
    username: At<String>,
    password: At<String>,
    seen: HashMap<&'static str, usize>,
}

/// A tunnel section being read.
struct ForwardDraft {
    header_line: usize,
    /// A server tunnel (`ListenPort`) rather than a client tunnel (`BindAddress`).
    remote: bool,
    udp: bool,
    bind: At<SocketAddr>,
    port: At<u16>,
    target: Option<Endpoint>,
    seen: HashMap<&'static str, usize>,
}

/// A `[Peer]` section being read: the public key may come last.
struct PeerDraft {
    header_line: usize,
    public_key: Option<PublicKey>,
    peer: Peer,
    seen: HashMap<&'static str, usize>,
}

#[derive(Default)]
struct Parser {
    section: Section,
    interface_line: Option<usize>,
    private_key: Option<PrivateKey>,
    iface: Option<Interface>,
    iface_seen: HashMap<&'static str, usize>,
    peers: Vec<PeerDraft>,
    socks5: Option<ProxyDraft>,
    http: Option<ProxyDraft>,
    forwards: Vec<ForwardDraft>,
}

/// Canonical spellings, used in messages and as duplicate-tracking keys.
const INTERFACE_KEYS: &[&str] = &[
    "PrivateKey",
    "ListenPort",
    "FwMark",
    "Address",
    "DNS",
    "MTU",
    "Table",
    "PreUp",
    "PostUp",
    "PreDown",
    "PostDown",
    "SaveConfig",
];
const PEER_KEYS: &[&str] = &[
    "PublicKey",
    "PresharedKey",
    "AllowedIPs",
    "Endpoint",
    "PersistentKeepalive",
];
const PROXY_KEYS: &[&str] = &["BindAddress", "Username", "Password"];
const CLIENT_TUNNEL_KEYS: &[&str] = &["BindAddress", "Target"];
const SERVER_TUNNEL_KEYS: &[&str] = &["ListenPort", "Target"];

/// The SOCKS5 username/password limit (RFC 1929), applied to both proxies.
const MAX_CREDENTIAL_LEN: usize = 255;

fn canonical(keys: &[&'static str], key: &str) -> Option<&'static str> {
    keys.iter().copied().find(|k| k.eq_ignore_ascii_case(key))
}

/// Records a single-valued key, refusing a second occurrence.
fn once(
    seen: &mut HashMap<&'static str, usize>,
    key: &'static str,
    line: usize,
) -> Result<(), ConfigError> {
    match seen.insert(key, line) {
        Some(first) => Err(ConfigError::new(
            line,
            format!("duplicate `{key}` (first set on line {first})"),
        )),
        None => Ok(()),
    }
}

fn err<T>(line: usize, msg: impl Into<String>) -> Result<T, ConfigError> {
    Err(ConfigError::new(line, msg))
}

/// A decimal number in `0..=max`.
fn number(line: usize, key: &str, v: &str, max: u64) -> Result<u64, ConfigError> {
    if v.is_empty() || !v.bytes().all(|b| b.is_ascii_digit()) {
        return err(line, format!("{key}: `{v}` is not a number"));
    }
    match v.parse::<u64>() {
        Ok(n) if n <= max => Ok(n),
        _ => err(line, format!("{key}: `{v}` is out of range (0..={max})")),
    }
}

/// `FwMark`: `off`, or a number read like C's `strtoul(s, 0)` as `wg` does (`0x` hex, a
/// leading `0` octal, else decimal).
fn fwmark(line: usize, v: &str) -> Result<u32, ConfigError> {
    if v.eq_ignore_ascii_case("off") {
        return Ok(0);
    }
    let (digits, radix) = if let Some(h) = v.strip_prefix("0x").or_else(|| v.strip_prefix("0X")) {
        (h, 16)
    } else if let Some(o) = v.strip_prefix('0').filter(|o| !o.is_empty()) {
        (o, 8)
    } else {
        (v, 10)
    };
    if digits.is_empty() || !digits.chars().all(|c| c.is_digit(radix)) {
        return err(line, format!("FwMark: `{v}` is not a number or `off`"));
    }
    u32::from_str_radix(digits, radix)
        .or_else(|_| err(line, format!("FwMark: `{v}` does not fit in 32 bits")))
}

fn key_error(line: usize, key: &str, e: vpn_proto::keys::KeyError) -> ConfigError {
    ConfigError::new(line, format!("{key}: bad base64 key: {e}"))
}

/// Items of a comma-separated list, blanks dropped.
fn items(v: &str) -> impl Iterator<Item = &str> {
    v.split(',').map(str::trim).filter(|s| !s.is_empty())
}

fn prefixes(line: usize, v: &str, out: &mut Vec<IpPrefix>) -> Result<(), ConfigError> {
    for item in items(v) {
        out.push(item.parse().map_err(|m| ConfigError::new(line, m))?);
    }
    Ok(())
}

/// `BindAddress`: `ADDR:PORT` (`[v6]:PORT` for IPv6), or with `bare_port` also `PORT` alone,
/// meaning 127.0.0.1.
fn bind_address(line: usize, v: &str, bare_port: bool) -> Result<SocketAddr, ConfigError> {
    if bare_port && !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()) {
        let port = number(line, "BindAddress", v, u16::MAX.into())? as u16;
        return Ok(SocketAddr::from((Ipv4Addr::LOCALHOST, port)));
    }
    // std's parser takes digits only for the port (no sign, no blanks).
    v.parse().map_err(|_| {
        let form = if bare_port {
            "[ADDR:]PORT"
        } else {
            "ADDR:PORT"
        };
        ConfigError::new(
            line,
            format!(
                "BindAddress: `{v}` is not {form} (an IP address and a port, IPv6 in brackets: \
                 127.0.0.1:1080, [::1]:1080)"
            ),
        )
    })
}

/// `Target`: `HOST:PORT` with a host name, IPv4 address or bracketed IPv6 address, port not 0.
fn target(line: usize, v: &str) -> Result<Endpoint, ConfigError> {
    let t: Endpoint = v
        .parse()
        .map_err(|m| ConfigError::new(line, format!("Target: {m}")))?;
    if t.port() == 0 {
        return err(line, format!("Target: `{v}` has port 0"));
    }
    Ok(t)
}

/// `Username` or `Password`: 1 to 255 bytes; a `:` in an HTTP username is refused.
fn credential(line: usize, key: &str, v: &str, kind: ProxyKind) -> Result<String, ConfigError> {
    if v.is_empty() {
        return err(line, format!("{key}: empty value"));
    }
    if v.len() > MAX_CREDENTIAL_LEN {
        return err(
            line,
            format!("{key}: longer than {MAX_CREDENTIAL_LEN} bytes"),
        );
    }
    if kind == ProxyKind::Http && key == "Username" && v.contains(':') {
        return err(
            line,
            "Username: `:` cannot be used in an [http] username (Basic authentication splits on it)",
        );
    }
    Ok(v.to_owned())
}

fn is_search_domain(s: &str) -> bool {
    s.len() <= 253
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
}

impl Parser {
    fn line(&mut self, line: usize, raw: &str) -> Result<(), ConfigError> {
        let stripped = raw.split('#').next().unwrap_or("").trim();
        if stripped.is_empty() {
            return Ok(());
        }
        if stripped.starts_with('[') {
            return self.header(line, stripped);
        }
        let Some((key, value)) = stripped.split_once('=') else {
            return err(line, format!("missing `=` in `{stripped}`"));
        };
        let key = key.trim();
        let value = value.trim();
        // Hooks take everything after the first `=`, comments included, as wg-quick does.
        let unstripped = raw.split_once('=').map_or("", |(_, v)| v).trim();
        match self.section {
            Section::None => err(line, format!("`{key}` outside a section")),
            Section::Interface => self.interface_key(line, key, value, unstripped),
            Section::Peer => self.peer_key(line, key, value),
            Section::Proxy(kind) => self.proxy_key(line, kind, key, value),
            Section::Forward => self.forward_key(line, key, value),
        }
    }

    fn header(&mut self, line: usize, stripped: &str) -> Result<(), ConfigError> {
        let name: String = stripped.chars().filter(|c| !c.is_whitespace()).collect();
        if name.eq_ignore_ascii_case("[Interface]") {
            self.section = Section::Interface;
            self.interface_line.get_or_insert(line);
            if self.iface.is_none() {
                self.iface = Some(Interface::new(PrivateKey::from_bytes([0; 32])));
            }
        } else if name.eq_ignore_ascii_case("[Peer]") {
            self.section = Section::Peer;
            self.peers.push(PeerDraft {
                header_line: line,
                public_key: None,
                peer: Peer::new(PublicKey::from_bytes([0; 32])),
                seen: HashMap::new(),
            });
        } else if let Some(kind) = [ProxyKind::Socks5, ProxyKind::Http]
            .into_iter()
            .find(|k| name.eq_ignore_ascii_case(k.name()))
        {
            let slot = match kind {
                ProxyKind::Socks5 => &mut self.socks5,
                ProxyKind::Http => &mut self.http,
            };
            if let Some(first) = slot {
                return err(
                    line,
                    format!(
                        "duplicate {} section (first on line {})",
                        kind.name(),
                        first.header_line
                    ),
                );
            }
            *slot = Some(ProxyDraft {
                header_line: line,
                bind: None,
                username: None,
                password: None,
                seen: HashMap::new(),
            });
            self.section = Section::Proxy(kind);
        } else if let Some((remote, udp)) =
            [(false, false), (false, true), (true, false), (true, true)]
                .into_iter()
                .find(|&(r, u)| name.eq_ignore_ascii_case(forward_name(r, u)))
        {
            self.forwards.push(ForwardDraft {
                header_line: line,
                remote,
                udp,
                bind: None,
                port: None,
                target: None,
                seen: HashMap::new(),
            });
            self.section = Section::Forward;
        } else {
            return err(line, format!("unknown section `{stripped}`"));
        }
        Ok(())
    }

    fn interface_key(
        &mut self,
        line: usize,
        key: &str,
        v: &str,
        unstripped: &str,
    ) -> Result<(), ConfigError> {
        let Some(k) = canonical(INTERFACE_KEYS, key) else {
            return err(line, format!("unknown key `{key}` in [Interface]"));
        };
        let Some(iface) = self.iface.as_mut() else {
            return err(line, "internal: interface section without state");
        };
        match k {
            "PrivateKey" => {
                once(&mut self.iface_seen, k, line)?;
                self.private_key =
                    Some(PrivateKey::from_base64(v).map_err(|e| key_error(line, k, e))?);
            }
            "ListenPort" => {
                once(&mut self.iface_seen, k, line)?;
                iface.listen_port = Some(number(line, k, v, u16::MAX.into())? as u16);
            }
            "FwMark" => {
                once(&mut self.iface_seen, k, line)?;
                iface.fwmark = Some(fwmark(line, v)?);
            }
            "Address" => prefixes(line, v, &mut iface.addresses)?,
            "DNS" => {
                for item in v.split([',', ' ', '\t']).filter(|s| !s.is_empty()) {
                    // wg-quick's test: all digits and dots, or any colon, means a server.
                    if item.bytes().all(|b| b.is_ascii_digit() || b == b'.') || item.contains(':') {
                        let ip: IpAddr = item.parse().map_err(|_| {
                            ConfigError::new(line, format!("DNS: `{item}` is not an IP address"))
                        })?;
                        iface.dns.push(ip);
                    } else if is_search_domain(item) {
                        iface.dns_search.push(item.to_owned());
                    } else {
                        return err(
                            line,
                            format!("DNS: `{item}` is neither an IP address nor a domain"),
                        );
                    }
                }
            }
            "MTU" => {
                once(&mut self.iface_seen, k, line)?;
                let n = number(line, k, v, MAX_MTU.into())? as u32;
                if n < MIN_MTU {
                    return err(line, format!("MTU: {n} is below the minimum {MIN_MTU}"));
                }
                iface.mtu = Some(n);
            }
            "Table" => {
                once(&mut self.iface_seen, k, line)?;
                iface.table = v
                    .parse()
                    .map_err(|m: String| ConfigError::new(line, format!("Table: {m}")))?;
            }
            "PreUp" => iface.pre_up.push(unstripped.to_owned()),
            "PostUp" => iface.post_up.push(unstripped.to_owned()),
            "PreDown" => iface.pre_down.push(unstripped.to_owned()),
            "PostDown" => iface.post_down.push(unstripped.to_owned()),
            "SaveConfig" => {
                once(&mut self.iface_seen, k, line)?;
                iface.save_config = if v.eq_ignore_ascii_case("true") {
                    true
                } else if v.eq_ignore_ascii_case("false") {
                    false
                } else {
                    return err(line, format!("SaveConfig: `{v}` is neither true nor false"));
                };
            }
            _ => return err(line, format!("unknown key `{key}` in [Interface]")),
        }
        Ok(())
    }

    fn peer_key(&mut self, line: usize, key: &str, v: &str) -> Result<(), ConfigError> {
        let Some(k) = canonical(PEER_KEYS, key) else {
            return err(line, format!("unknown key `{key}` in [Peer]"));
        };
        let Some(d) = self.peers.last_mut() else {
            return err(line, "internal: peer section without state");
        };
        match k {
            "PublicKey" => {
                once(&mut d.seen, k, line)?;
                d.public_key = Some(PublicKey::from_base64(v).map_err(|e| key_error(line, k, e))?);
            }
            "PresharedKey" => {
                once(&mut d.seen, k, line)?;
                d.peer.preshared_key =
                    Some(PresharedKey::from_base64(v).map_err(|e| key_error(line, k, e))?);
            }
            "AllowedIPs" => prefixes(line, v, &mut d.peer.allowed_ips)?,
            "Endpoint" => {
                once(&mut d.seen, k, line)?;
                d.peer.endpoint = Some(
                    v.parse::<Endpoint>()
                        .map_err(|m| ConfigError::new(line, m))?,
                );
            }
            "PersistentKeepalive" => {
                once(&mut d.seen, k, line)?;
                d.peer.persistent_keepalive = if v.eq_ignore_ascii_case("off") {
                    None
                } else {
                    Some(number(line, k, v, u16::MAX.into())? as u16).filter(|&n| n != 0)
                };
            }
            _ => return err(line, format!("unknown key `{key}` in [Peer]")),
        }
        Ok(())
    }

    fn proxy_key(
        &mut self,
        line: usize,
        kind: ProxyKind,
        key: &str,
        v: &str,
    ) -> Result<(), ConfigError> {
        let Some(k) = canonical(PROXY_KEYS, key) else {
            return err(line, format!("unknown key `{key}` in {}", kind.name()));
        };
        let slot = match kind {
            ProxyKind::Socks5 => &mut self.socks5,
            ProxyKind::Http => &mut self.http,
        };
        let Some(d) = slot.as_mut() else {
            return err(line, "internal: proxy section without state");
        };
        once(&mut d.seen, k, line)?;
        match k {
            "BindAddress" => d.bind = Some((bind_address(line, v, false)?, line)),
            "Username" => d.username = Some((credential(line, k, v, kind)?, line)),
            "Password" => d.password = Some((credential(line, k, v, kind)?, line)),
            _ => return err(line, format!("unknown key `{key}` in {}", kind.name())),
        }
        Ok(())
    }

    fn forward_key(&mut self, line: usize, key: &str, v: &str) -> Result<(), ConfigError> {
        let Some(d) = self.forwards.last_mut() else {
            return err(line, "internal: tunnel section without state");
        };
        let keys = if d.remote {
            SERVER_TUNNEL_KEYS
        } else {
            CLIENT_TUNNEL_KEYS
        };
        let Some(k) = canonical(keys, key) else {
            return err(
                line,
                format!("unknown key `{key}` in {}", forward_name(d.remote, d.udp)),
            );
        };
        once(&mut d.seen, k, line)?;
        match k {
            "BindAddress" => d.bind = Some((bind_address(line, v, true)?, line)),
            "ListenPort" => {
                let port = number(line, k, v, u16::MAX.into())? as u16;
                if port == 0 {
                    return err(line, "ListenPort: 0 is not a port to listen on");
                }
                d.port = Some((port, line));
            }
            "Target" => d.target = Some(target(line, v)?),
            _ => {
                return err(
                    line,
                    format!("unknown key `{key}` in {}", forward_name(d.remote, d.udp)),
                )
            }
        }
        Ok(())
    }

    fn finish(self) -> Result<Config, ConfigError> {
        let at = self.interface_line.unwrap_or(1);
        let (Some(private_key), Some(mut interface)) = (self.private_key, self.iface) else {
            return err(at, "missing PrivateKey in [Interface]");
        };
        interface.private_key = private_key;
        let mut peers = Vec::with_capacity(self.peers.len());
        for d in self.peers {
            let Some(pk) = d.public_key else {
                return err(d.header_line, "[Peer] without PublicKey");
            };
            let mut peer = d.peer;
            peer.public_key = pk;
            peers.push(peer);
        }
        let mut config = Config::new(interface);
        config.peers = peers;
        // Listeners by (udp, address) and server tunnels by (udp, port), each with the line
        // that set it, to refuse two on the same one.
        let mut binds: Vec<(bool, SocketAddr, usize, &'static str)> = Vec::new();
        let mut ports: Vec<(bool, u16, usize, &'static str)> = Vec::new();
        for (kind, draft) in [
            (ProxyKind::Socks5, self.socks5),
            (ProxyKind::Http, self.http),
        ] {
            let Some(d) = draft else { continue };
            let Some((bind, bind_line)) = d.bind else {
                return err(
                    d.header_line,
                    format!("{} without BindAddress", kind.name()),
                );
            };
            let auth = match (d.username, d.password) {
                (None, None) => None,
                (Some((u, _)), Some((p, _))) => Some((u, p)),
                (Some((_, at)), None) => {
                    return err(at, format!("Username without Password in {}", kind.name()))
                }
                (None, Some((_, at))) => {
                    return err(at, format!("Password without Username in {}", kind.name()))
                }
            };
            binds.push((false, bind, bind_line, kind.name()));
            let settings = Some(ProxySettings { bind, auth });
            match kind {
                ProxyKind::Socks5 => config.socks5 = settings,
                ProxyKind::Http => config.http = settings,
            }
        }
        for d in self.forwards {
            let name = forward_name(d.remote, d.udp);
            let Some(target) = d.target else {
                return err(d.header_line, format!("{name} without Target"));
            };
            if d.remote {
                let Some((port, at)) = d.port else {
                    return err(d.header_line, format!("{name} without ListenPort"));
                };
                ports.push((d.udp, port, at, name));
                config.remote_forwards.push(RemoteForward {
                    port,
                    target,
                    udp: d.udp,
                });
            } else {
                let Some((bind, at)) = d.bind else {
                    return err(d.header_line, format!("{name} without BindAddress"));
                };
                binds.push((d.udp, bind, at, name));
                config.local_forwards.push(LocalForward {
                    bind,
                    target,
                    udp: d.udp,
                });
            }
        }
        conflicts(binds, "BindAddress", |a| a.port() == 0)?;
        conflicts(ports, "ListenPort", |_| false)?;
        Ok(config)
    }
}

/// Refuses two entries with the same protocol and value, naming the later line; `free`
/// values (a port-0 bind: the system picks a fresh port each time) never conflict.
fn conflicts<T: Copy + Eq + std::hash::Hash + std::fmt::Display>(
    mut entries: Vec<(bool, T, usize, &'static str)>,
    key: &str,
    free: impl Fn(&T) -> bool,
) -> Result<(), ConfigError> {
    entries.sort_by_key(|e| e.2);
    let mut first: HashMap<(bool, T), (usize, &'static str)> = HashMap::new();
    for (udp, value, line, section) in entries {
        if free(&value) {
            continue;
        }
        if let Some((at, by)) = first.insert((udp, value), (line, section)) {
            let proto = if udp { "UDP" } else { "TCP" };
            return err(
                line,
                format!("{key} {value} ({proto}) is already used by {by} on line {at}"),
            );
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
