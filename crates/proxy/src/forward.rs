//! ssh-shaped port forward specs (`-L [ADDR:]PORT:HOST:PORT[/udp]`, `-R PORT:HOST:PORT[/udp]`),
//! without I/O.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// A port forward.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Forward {
    /// `-L [ADDR:]PORT:HOST:PORT[/udp]`: listen on the host at `bind`, connect through the
    /// tunnel to `target`.
    Local {
        /// Where to listen on the host (127.0.0.1 when the spec gives no address).
        bind: SocketAddr,
        /// `host:port` (`[v6]:port`); the host may be a name, resolved through the tunnel.
        target: String,
        /// UDP instead of TCP.
        udp: bool,
    },
    /// `-R PORT:HOST:PORT[/udp]`: listen on the tunnel's addresses at `port`, connect on the
    /// host to `target`.
    Remote {
        /// The port on the tunnel side (0 picks one).
        port: u16,
        /// `host:port` (`[v6]:port`); the host may be a name, resolved by the host.
        target: String,
        /// UDP instead of TCP.
        udp: bool,
    },
}

const LOCAL_SHAPE: &str = "[ADDR:]PORT:HOST:PORT[/udp]";
const REMOTE_SHAPE: &str = "PORT:HOST:PORT[/udp]";

/// Why a forward spec is invalid.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SpecError {
    /// The spec does not have the fields of `expected`.
    Shape {
        /// The shape the spec should have.
        expected: &'static str,
    },
    /// A bracket is not closed, or text follows a closing bracket inside a field.
    Brackets,
    /// A port is not a number in range (the target's 1-65535, the listening one 0-65535).
    Port(String),
    /// The bind address is not an IP address, `[IPv6]`, `*` or `localhost`.
    BindAddress(String),
    /// The target host is not a name or an IP address.
    Host(String),
    /// The suffix after `/` is not `tcp` or `udp`.
    Protocol(String),
}

impl fmt::Display for SpecError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SpecError::Shape { expected } => {
                write!(f, "expected {expected} (IPv6 addresses go in brackets)")
            }
            SpecError::Brackets => f.write_str("unbalanced [ ] around an IPv6 address"),
            SpecError::Port(p) => write!(f, "{p:?} is not a port number"),
            SpecError::BindAddress(a) => write!(
                f,
                "{a:?} is not a bind address (an IP address, [IPv6], * or localhost)"
            ),
            SpecError::Host(h) => write!(f, "{h:?} is not a host name or IP address"),
            SpecError::Protocol(p) => write!(f, "unknown protocol {p:?} (tcp or udp)"),
        }
    }
}

impl std::error::Error for SpecError {}

impl Forward {
    /// `[ADDR:]PORT:HOST:PORT[/udp]`; ADDR defaults to 127.0.0.1 (`*` or empty: all
    /// addresses); ADDR and HOST may be `[IPv6]`.
    pub fn parse_local(spec: &str) -> Result<Forward, SpecError> {
        let (body, udp) = split_protocol(spec)?;
        let fields = split_fields(body)?;
        let (ip, port, host, target_port) = match fields[..] {
            [port, host, target_port] => (Ipv4Addr::LOCALHOST.into(), port, host, target_port),
            [addr, port, host, target_port] => (bind_address(addr)?, port, host, target_port),
            _ => {
                return Err(SpecError::Shape {
                    expected: LOCAL_SHAPE,
                })
            }
        };
        Ok(Forward::Local {
            bind: SocketAddr::new(ip, listen_port(port)?),
            target: target(host, target_port)?,
            udp,
        })
    }

    /// `PORT:HOST:PORT[/udp]`; HOST may be `[IPv6]`.
    pub fn parse_remote(spec: &str) -> Result<Forward, SpecError> {
        let (body, udp) = split_protocol(spec)?;
        let fields = split_fields(body)?;
        let [port, host, target_port] = fields[..] else {
            return Err(SpecError::Shape {
                expected: REMOTE_SHAPE,
            });
        };
        Ok(Forward::Remote {
            port: listen_port(port)?,
            target: target(host, target_port)?,
            udp,
        })
    }

    /// The target, `host:port`.
    pub fn target(&self) -> &str {
        match self {
            Forward::Local { target, .. } | Forward::Remote { target, .. } => target,
        }
    }

    /// Whether it forwards UDP.
    pub fn is_udp(&self) -> bool {
        match self {
            Forward::Local { udp, .. } | Forward::Remote { udp, .. } => *udp,
        }
    }
}

impl fmt::Display for Forward {
    /// The spec again (`-L 127.0.0.1:8080:host:80`, `-R 2222:127.0.0.1:22/udp`).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let udp = if self.is_udp() { "/udp" } else { "" };
        match self {
            Forward::Local { bind, target, .. } => write!(f, "-L {bind}:{target}{udp}"),
            Forward::Remote { port, target, .. } => write!(f, "-R {port}:{target}{udp}"),
        }
    }
}

/// The spec without its `/tcp` or `/udp` suffix, and whether it was `/udp`.
fn split_protocol(spec: &str) -> Result<(&str, bool), SpecError> {
    match spec.rsplit_once('/') {
        None => Ok((spec, false)),
        Some((body, p)) if p.eq_ignore_ascii_case("udp") => Ok((body, true)),
        Some((body, p)) if p.eq_ignore_ascii_case("tcp") => Ok((body, false)),
        Some((_, p)) => Err(SpecError::Protocol(p.to_string())),
    }
}

/// The `:`-separated fields, a `[...]` field kept whole (brackets included).
fn split_fields(body: &str) -> Result<Vec<&str>, SpecError> {
    let mut fields = Vec::new();
    let mut start = 0;
    let mut in_brackets = false;
    for (i, c) in body.char_indices() {
        match c {
            '[' if !in_brackets && i == start => in_brackets = true,
            ']' if in_brackets => {
                in_brackets = false;
                if !matches!(body[i + 1..].chars().next(), None | Some(':')) {
                    return Err(SpecError::Brackets);
                }
            }
            '[' | ']' => return Err(SpecError::Brackets),
            ':' if !in_brackets => {
                fields.push(&body[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    if in_brackets {
        return Err(SpecError::Brackets);
    }
    fields.push(&body[start..]);
    Ok(fields)
}

/// A bind address field: an IP, `[IPv6]`, `localhost`, or `*`/empty for every address.
fn bind_address(s: &str) -> Result<IpAddr, SpecError> {
    match s {
        "" | "*" => return Ok(Ipv4Addr::UNSPECIFIED.into()),
        "localhost" => return Ok(Ipv4Addr::LOCALHOST.into()),
        _ => {}
    }
    if let Some(v6) = s.strip_prefix('[').and_then(|r| r.strip_suffix(']')) {
        return v6
            .parse::<Ipv6Addr>()
            .map(IpAddr::V6)
            .map_err(|_| SpecError::BindAddress(s.to_string()));
    }
    s.parse::<Ipv4Addr>()
        .map(IpAddr::V4)
        .map_err(|_| SpecError::BindAddress(s.to_string()))
}

/// The listening port: 0 picks a free one.
fn listen_port(s: &str) -> Result<u16, SpecError> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return Err(SpecError::Port(s.to_string()));
    }
    s.parse().map_err(|_| SpecError::Port(s.to_string()))
}

/// `host:port` from a host field (a name, an IPv4 address or `[IPv6]`) and a port 1-65535.
fn target(host: &str, port: &str) -> Result<String, SpecError> {
    let bad_host = || SpecError::Host(host.to_string());
    if let Some(v6) = host.strip_prefix('[').and_then(|r| r.strip_suffix(']')) {
        v6.parse::<Ipv6Addr>().map_err(|_| bad_host())?;
    } else {
        let name_ok = !host.is_empty()
            && host.len() <= 253
            && host
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-._".contains(&b));
        if !name_ok {
            return Err(bad_host());
        }
    }
    match listen_port(port) {
        Ok(0) | Err(_) => Err(SpecError::Port(port.to_string())),
        Ok(p) => Ok(format!("{host}:{p}")),
    }
}

/// `host:port` or `[v6]:port` split into the host (brackets removed) and the port.
pub(crate) fn split_target(target: &str) -> Option<(&str, u16)> {
    let (host, port) = if let Some(rest) = target.strip_prefix('[') {
        rest.split_once("]:")?
    } else {
        let (h, p) = target.rsplit_once(':')?;
        if h.contains(':') {
            return None;
        }
        (h, p)
    };
    if host.is_empty() {
        return None;
    }
    Some((host, port.parse().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn local(bind: &str, target: &str, udp: bool) -> Forward {
        Forward::Local {
            bind: bind.parse().unwrap(),
            target: target.into(),
            udp,
        }
    }

    #[test]
    fn local_specs() {
        let ok = |s: &str| Forward::parse_local(s).unwrap();
        assert_eq!(ok("8080:web:80"), local("127.0.0.1:8080", "web:80", false));
        assert_eq!(
            ok("0.0.0.0:8080:10.0.0.2:80"),
            local("0.0.0.0:8080", "10.0.0.2:80", false)
        );
        assert_eq!(ok("*:53:dns:53/udp"), local("0.0.0.0:53", "dns:53", true));
        assert_eq!(ok(":53:dns:53/UDP"), local("0.0.0.0:53", "dns:53", true));
        assert_eq!(
            ok("localhost:1:h:2/tcp"),
            local("127.0.0.1:1", "h:2", false)
        );
        assert_eq!(
            ok("[::1]:8080:[fd00::2]:80"),
            local("[::1]:8080", "[fd00::2]:80", false)
        );
        assert_eq!(ok("0:h:1"), local("127.0.0.1:0", "h:1", false));
    }

    #[test]
    fn remote_specs() {
        assert_eq!(
            Forward::parse_remote("2222:127.0.0.1:22").unwrap(),
            Forward::Remote {
                port: 2222,
                target: "127.0.0.1:22".into(),
                udp: false
            }
        );
        assert_eq!(
            Forward::parse_remote("53:[::1]:5353/udp").unwrap(),
            Forward::Remote {
                port: 53,
                target: "[::1]:5353".into(),
                udp: true
            }
        );
    }

    #[test]
    fn bad_specs_say_why() {
        let local_err = |s: &str| Forward::parse_local(s).unwrap_err();
        let shape = SpecError::Shape {
            expected: LOCAL_SHAPE,
        };
        assert_eq!(local_err(""), shape);
        assert_eq!(local_err("8080"), shape);
        assert_eq!(local_err("8080:web"), shape);
        assert_eq!(local_err("a:b:c:d:e"), shape);
        assert_eq!(local_err("8080:fd00::2:80"), shape);
        assert_eq!(local_err("99999:web:80"), SpecError::Port("99999".into()));
        assert_eq!(local_err("x:web:80"), SpecError::Port("x".into()));
        assert_eq!(local_err("80:web:0"), SpecError::Port("0".into()));
        assert_eq!(local_err("80:web:"), SpecError::Port("".into()));
        assert_eq!(local_err("80:web:+1"), SpecError::Port("+1".into()));
        assert_eq!(local_err("80::80"), SpecError::Host("".into()));
        assert_eq!(local_err("80:we b:80"), SpecError::Host("we b".into()));
        assert_eq!(local_err("80:[nope]:80"), SpecError::Host("[nope]".into()));
        assert_eq!(
            local_err("host.example:80:web:80"),
            SpecError::BindAddress("host.example".into())
        );
        assert_eq!(local_err("[::1:80:web:80"), SpecError::Brackets);
        assert_eq!(local_err("[::1]x:80:web:80"), SpecError::Brackets);
        assert_eq!(local_err("80:w]eb:80"), SpecError::Brackets);
        assert_eq!(
            local_err("80:web:80/sctp"),
            SpecError::Protocol("sctp".into())
        );
        let remote_err = |s: &str| Forward::parse_remote(s).unwrap_err();
        assert_eq!(
            remote_err("127.0.0.1:80:web:80"),
            SpecError::Shape {
                expected: REMOTE_SHAPE
            }
        );
        assert_eq!(remote_err("80:web:80x"), SpecError::Port("80x".into()));
        for e in [shape, SpecError::Brackets, SpecError::Port("x".into())] {
            assert!(!e.to_string().is_empty());
        }
    }

    #[test]
    fn display_gives_the_spec_back() {
        for spec in ["-L 127.0.0.1:8080:web:80", "-L [::1]:53:[fd00::2]:53/udp"] {
            let f = Forward::parse_local(&spec[3..]).unwrap();
            assert_eq!(f.to_string(), spec);
        }
        let r = Forward::parse_remote("2222:h:22/udp").unwrap();
        assert_eq!(r.to_string(), "-R 2222:h:22/udp");
        assert_eq!(r.target(), "h:22");
        assert!(r.is_udp());
    }

    #[test]
    fn targets_split_back() {
        assert_eq!(split_target("web:80"), Some(("web", 80)));
        assert_eq!(split_target("[fd00::2]:53"), Some(("fd00::2", 53)));
        assert_eq!(split_target("1.2.3.4:1"), Some(("1.2.3.4", 1)));
        assert_eq!(split_target("fd00::2:53"), None);
        assert_eq!(split_target(":53"), None);
        assert_eq!(split_target("web"), None);
    }

    #[test]
    fn no_spec_panics() {
        let alphabet = [
            "", ":", "[", "]", "1", "::1", "/", "udp", "*", "h", "\u{e9}",
        ];
        for a in alphabet {
            for b in alphabet {
                for c in alphabet {
                    for d in alphabet {
                        let s = format!("{a}{b}{c}{d}");
                        let _ = Forward::parse_local(&s);
                        let _ = Forward::parse_remote(&s);
                        let _ = split_target(&s);
                    }
                }
            }
        }
    }
}
