use std::fmt;
use std::io;
use std::net::{IpAddr, SocketAddr};

/// The local side a datagram arrived on, remembered so replies leave from the same address and
/// interface (`IP_PKTINFO` / `IPV6_PKTINFO`: the "sticky source").
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct StickySource {
    /// Local address the peer sent to.
    pub ip: IpAddr,
    /// Interface index it arrived on (0: let routing choose).
    pub ifindex: u32,
}

/// Where a peer is: its address and, optionally, the local source to reply from.
///
/// A small `Copy` value rather than a heap object, so a receive batch records one per datagram
/// without allocating.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Endpoint {
    /// The peer's address and port.
    pub dst: SocketAddr,
    /// The sticky source, if known.
    pub src: Option<StickySource>,
}

impl Default for Endpoint {
    fn default() -> Self {
        Endpoint {
            dst: SocketAddr::from(([0, 0, 0, 0], 0)),
            src: None,
        }
    }
}

impl From<SocketAddr> for Endpoint {
    fn from(dst: SocketAddr) -> Self {
        Endpoint { dst, src: None }
    }
}

impl Endpoint {
    /// Parses `ip:port` or `[ipv6]:port` (a zone after `%` is accepted and dropped).
    pub fn parse(s: &str) -> io::Result<Endpoint> {
        let invalid = || {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("invalid endpoint {s:?}"),
            )
        };
        if let Ok(sa) = s.parse::<SocketAddr>() {
            return Ok(sa.into());
        }
        // `[fe80::1%eth0]:51820`: std rejects zones; strip it.
        let (host, port) = s.rsplit_once(':').ok_or_else(invalid)?;
        let host = host
            .strip_prefix('[')
            .and_then(|h| h.strip_suffix(']'))
            .ok_or_else(invalid)?;
        let host = host.split('%').next().ok_or_else(invalid)?;
        let ip: IpAddr = host.parse().map_err(|_| invalid())?;
        let port: u16 = port.parse().map_err(|_| invalid())?;
        Ok(SocketAddr::new(ip, port).into())
    }

    /// Forgets the sticky source: the next send uses the routing table's choice.
    pub fn clear_src(&mut self) {
        self.src = None;
    }

    /// The sticky source address as text (empty when none).
    pub fn src_to_string(&self) -> String {
        self.src.map(|s| s.ip.to_string()).unwrap_or_default()
    }

    /// The destination as UAPI prints it (`1.2.3.4:51820`, `[fd00::1]:51820`).
    pub fn dst_to_string(&self) -> String {
        self.dst.to_string()
    }

    /// The destination as bytes, the input of the cookie MAC: IP bytes then the port, big-endian
    /// (the binary form of Go's `netip.AddrPort`). Returns the buffer and the used length.
    pub fn dst_to_bytes(&self) -> ([u8; 18], usize) {
        let mut out = [0u8; 18];
        let n = match self.dst.ip() {
            IpAddr::V4(v4) => {
                out[..4].copy_from_slice(&v4.octets());
                4
            }
            IpAddr::V6(v6) => {
                out[..16].copy_from_slice(&v6.octets());
                16
            }
        };
        out[n..n + 2].copy_from_slice(&self.dst.port().to_be_bytes());
        (out, n + 2)
    }

    /// The destination IP.
    pub fn dst_ip(&self) -> IpAddr {
        self.dst.ip()
    }

    /// The sticky source IP, if any.
    pub fn src_ip(&self) -> Option<IpAddr> {
        self.src.map(|s| s.ip)
    }
}

impl fmt::Display for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.dst, f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_forms() {
        assert_eq!(
            Endpoint::parse("1.2.3.4:5").unwrap().dst_to_string(),
            "1.2.3.4:5"
        );
        assert_eq!(
            Endpoint::parse("[fd00::1]:51820").unwrap().dst_to_string(),
            "[fd00::1]:51820"
        );
        assert_eq!(Endpoint::parse("[fe80::1%eth0]:7").unwrap().dst.port(), 7);
        for bad in [
            "",
            "1.2.3.4",
            "1.2.3.4:70000",
            "fd00::1:5",
            "[fd00::1]",
            "x:1",
            "[::1]:x",
        ] {
            assert!(Endpoint::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn dst_bytes_include_port() {
        let (b, n) = Endpoint::parse("1.2.3.4:258").unwrap().dst_to_bytes();
        assert_eq!(&b[..n], &[1, 2, 3, 4, 1, 2]);
        let (_, n) = Endpoint::parse("[::1]:1").unwrap().dst_to_bytes();
        assert_eq!(n, 18);
    }
}
