//! Value types of the format: address prefixes, endpoints and the routing-table setting.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::str::FromStr;

/// An IP address with a prefix length, e.g. `100.64.0.1/24`.
///
/// Host bits are kept: for `Address` they are the interface's own address; [`IpPrefix::masked`]
/// gives the network for routes and allowed IPs.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct IpPrefix {
    addr: IpAddr,
    len: u8,
}

impl IpPrefix {
    /// `None` if `len` exceeds the family's bit width.
    pub fn new(addr: IpAddr, len: u8) -> Option<Self> {
        (len <= max_len(addr)).then_some(IpPrefix { addr, len })
    }

    /// The address as written.
    pub fn addr(&self) -> IpAddr {
        self.addr
    }

    /// The prefix length.
    pub fn prefix_len(&self) -> u8 {
        self.len
    }

    /// True for `0.0.0.0/0`-style prefixes (length 0), which wg-quick routes specially.
    pub fn is_default(&self) -> bool {
        self.len == 0
    }

    /// True for IPv6.
    pub fn is_ipv6(&self) -> bool {
        self.addr.is_ipv6()
    }

    /// The same prefix with the host bits cleared.
    pub fn masked(&self) -> Self {
        let addr = match self.addr {
            IpAddr::V4(a) => {
                let mask = u32::MAX.checked_shl(32 - u32::from(self.len)).unwrap_or(0);
                IpAddr::V4(Ipv4Addr::from(u32::from(a) & mask))
            }
            IpAddr::V6(a) => {
                let mask = u128::MAX
                    .checked_shl(128 - u32::from(self.len))
                    .unwrap_or(0);
                IpAddr::V6(Ipv6Addr::from(u128::from(a) & mask))
            }
        };
        IpPrefix {
            addr,
            len: self.len,
        }
    }
}

fn max_len(addr: IpAddr) -> u8 {
    if addr.is_ipv4() {
        32
    } else {
        128
    }
}

impl FromStr for IpPrefix {
    type Err = String;

    /// `addr/len`, or a bare address meaning /32 or /128.
    fn from_str(s: &str) -> Result<Self, String> {
        let (addr_text, len_text) = match s.split_once('/') {
            Some((a, l)) => (a, Some(l)),
            None => (s, None),
        };
        let addr: IpAddr = addr_text
            .parse()
            .map_err(|_| format!("bad prefix `{s}`: `{addr_text}` is not an IP address"))?;
        let len = match len_text {
            None => max_len(addr),
            Some(l) => {
                // u8::from_str accepts a leading `+`; `ip` does not.
                if l.is_empty() || !l.bytes().all(|b| b.is_ascii_digit()) {
                    return Err(format!("bad prefix `{s}`: bad length `{l}`"));
                }
                l.parse::<u8>()
                    .map_err(|_| format!("bad prefix `{s}`: bad length `{l}`"))?
            }
        };
        IpPrefix::new(addr, len)
            .ok_or_else(|| format!("bad prefix `{s}`: length {len} exceeds {}", max_len(addr)))
    }
}

impl fmt::Display for IpPrefix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.len)
    }
}

/// A peer's `Endpoint`: a host (IP literal or name, resolved at `up`) and a port.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Endpoint {
    host: String,
    port: u16,
}

/// Longest DNS name.
const MAX_HOST_LEN: usize = 253;

impl Endpoint {
    /// The host without brackets: an IPv4/IPv6 literal (IPv6 may carry a `%zone`) or a name.
    pub fn host(&self) -> &str {
        &self.host
    }

    /// The UDP port.
    pub fn port(&self) -> u16 {
        self.port
    }
}

fn valid_zone(z: &str) -> bool {
    !z.is_empty()
        && z.len() <= 15
        && z.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"_=+.-".contains(&b))
}

fn valid_hostname(h: &str) -> bool {
    !h.is_empty()
        && h.len() <= MAX_HOST_LEN
        && h.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
}

impl FromStr for Endpoint {
    type Err = String;

    /// `host:port`, `1.2.3.4:port` or `[v6]:port`. An IPv6 literal must be bracketed: without
    /// brackets the port boundary is ambiguous.
    fn from_str(s: &str) -> Result<Self, String> {
        let bad = |why: &str| format!("bad endpoint `{s}`: {why}");
        let (host, port_text) = if let Some(rest) = s.strip_prefix('[') {
            let (inside, after) = rest.split_once(']').ok_or_else(|| bad("missing `]`"))?;
            let port = after
                .strip_prefix(':')
                .ok_or_else(|| bad("missing `:port` after `]`"))?;
            let (addr, zone) = match inside.split_once('%') {
                Some((a, z)) => (a, Some(z)),
                None => (inside, None),
            };
            if addr.parse::<Ipv6Addr>().is_err() {
                return Err(bad("not an IPv6 address inside brackets"));
            }
            if zone.is_some_and(|z| !valid_zone(z)) {
                return Err(bad("bad IPv6 zone"));
            }
            (inside, port)
        } else {
            let (host, port) = s.rsplit_once(':').ok_or_else(|| bad("missing `:port`"))?;
            if host.contains(':') {
                return Err(bad("IPv6 addresses must be written as [address]:port"));
            }
            if !valid_hostname(host) {
                return Err(bad("bad host name"));
            }
            (host, port)
        };
        if port_text.is_empty() || !port_text.bytes().all(|b| b.is_ascii_digit()) {
            return Err(bad("bad port"));
        }
        let port: u16 = port_text.parse().map_err(|_| bad("port out of range"))?;
        Ok(Endpoint {
            host: host.to_owned(),
            port,
        })
    }
}

impl fmt::Display for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.host.contains(':') {
            write!(f, "[{}]:{}", self.host, self.port)
        } else {
            write!(f, "{}:{}", self.host, self.port)
        }
    }
}

impl From<std::net::SocketAddr> for Endpoint {
    fn from(sa: std::net::SocketAddr) -> Self {
        let host = match sa {
            std::net::SocketAddr::V4(a) => a.ip().to_string(),
            std::net::SocketAddr::V6(a) if a.scope_id() != 0 => {
                format!("{}%{}", a.ip(), a.scope_id())
            }
            std::net::SocketAddr::V6(a) => a.ip().to_string(),
        };
        Endpoint {
            host,
            port: sa.port(),
        }
    }
}

/// The `Table` setting: where wg-quick puts the routes for the peers' allowed IPs.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Default)]
pub enum Table {
    /// Absent or `auto`: the main table, with the fwmark/policy-rule dance for default routes.
    #[default]
    Auto,
    /// `off`: no routes at all.
    Off,
    /// A table number.
    Id(u32),
    /// A table name from `/etc/iproute2/rt_tables` (e.g. `main`).
    Name(String),
}

impl FromStr for Table {
    type Err = String;

    /// `off` and `auto` are matched case-sensitively, as wg-quick's route code does.
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "auto" => Ok(Table::Auto),
            "off" => Ok(Table::Off),
            _ if !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) => s
                .parse::<u32>()
                .ok()
                .filter(|&n| n != 0)
                .map(Table::Id)
                .ok_or_else(|| format!("bad table number `{s}`")),
            _ if valid_hostname(s) && s.len() <= 64 => Ok(Table::Name(s.to_owned())),
            _ => Err(format!("bad table `{s}`")),
        }
    }
}

impl fmt::Display for Table {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Table::Auto => f.write_str("auto"),
            Table::Off => f.write_str("off"),
            Table::Id(n) => write!(f, "{n}"),
            Table::Name(n) => f.write_str(n),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefixes() {
        let p: IpPrefix = "100.64.0.1/24".parse().unwrap();
        assert_eq!(p.to_string(), "100.64.0.1/24");
        assert_eq!(p.masked().to_string(), "100.64.0.0/24");
        assert_eq!(
            "10.1.2.3".parse::<IpPrefix>().unwrap().to_string(),
            "10.1.2.3/32"
        );
        assert_eq!(
            "fd00::1".parse::<IpPrefix>().unwrap().to_string(),
            "fd00::1/128"
        );
        assert_eq!(
            "fd00::1:2/33"
                .parse::<IpPrefix>()
                .unwrap()
                .masked()
                .to_string(),
            "fd00::/33"
        );
        let d: IpPrefix = "0.0.0.0/0".parse().unwrap();
        assert!(d.is_default());
        assert_eq!(d.masked(), d);
        assert!("::/0".parse::<IpPrefix>().unwrap().is_default());
        for bad in [
            "10.0.0.1/33",
            "fd00::/129",
            "10.0.0.1/",
            "10.0.0.1/+1",
            "x/1",
            "",
            "/8",
            "10.0.0.1/1/2",
            "10.0.0.1/ 8",
        ] {
            assert!(bad.parse::<IpPrefix>().is_err(), "{bad}");
        }
    }

    #[test]
    fn endpoints() {
        let e: Endpoint = "198.18.0.1:51820".parse().unwrap();
        assert_eq!((e.host(), e.port()), ("198.18.0.1", 51820));
        let e: Endpoint = "[fd00::1]:1".parse().unwrap();
        assert_eq!((e.host(), e.port()), ("fd00::1", 1));
        assert_eq!(e.to_string(), "[fd00::1]:1");
        let e: Endpoint = "[fe80::1%eth0]:9".parse().unwrap();
        assert_eq!(e.host(), "fe80::1%eth0");
        let e: Endpoint = "vpn.example.com:443".parse().unwrap();
        assert_eq!(e.to_string(), "vpn.example.com:443");
        for bad in [
            "198.18.0.1",
            "198.18.0.1:",
            "198.18.0.1:65536",
            "198.18.0.1:-1",
            ":80",
            "fd00::1:80",
            "[fd00::1]80",
            "[fd00::1:80",
            "[nothost]:80",
            "a b:80",
            "[fe80::1%]:9",
            "h:+80",
        ] {
            assert!(bad.parse::<Endpoint>().is_err(), "{bad}");
        }
        let sa: std::net::SocketAddr = "[fd00::2]:7".parse().unwrap();
        assert_eq!(Endpoint::from(sa).to_string(), "[fd00::2]:7");
    }

    #[test]
    fn tables() {
        assert_eq!("auto".parse::<Table>(), Ok(Table::Auto));
        assert_eq!("off".parse::<Table>(), Ok(Table::Off));
        assert_eq!("1234".parse::<Table>(), Ok(Table::Id(1234)));
        assert_eq!("main".parse::<Table>(), Ok(Table::Name("main".into())));
        assert!("0".parse::<Table>().is_err());
        assert!("99999999999".parse::<Table>().is_err());
        assert!("a;b".parse::<Table>().is_err());
        assert!("".parse::<Table>().is_err());
        for t in [
            Table::Auto,
            Table::Off,
            Table::Id(7),
            Table::Name("vpn".into()),
        ] {
            assert_eq!(t.to_string().parse::<Table>(), Ok(t));
        }
    }
}
