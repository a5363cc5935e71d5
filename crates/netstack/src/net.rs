//! [`Net`]: dialing, listening, pinging and resolving through the stack.

use crate::dns;
use crate::stack::Stack;
use crate::tcp::{TcpListener, TcpStream};
use crate::udp::UdpSocket;
use std::io::{self, Read, Write};
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long one round of DNS queries waits for its answers; there are two rounds.
const DNS_TIMEOUT: Duration = Duration::from_secs(2);

/// The app's side of the stack: what `std::net` offers, through the tunnel.
///
/// Cheap to clone; every clone uses the same stack. Calls block the calling thread (with the
/// timeouts given) and fail with `NotConnected` once the TUN is closed.
#[derive(Clone)]
pub struct Net {
    stack: Arc<Stack>,
}

impl std::fmt::Debug for Net {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Net")
            .field("addresses", &self.stack.addrs)
            .field("dns", &self.stack.dns)
            .finish()
    }
}

/// A connection from [`Net::dial`]: a TCP stream, or a connected UDP socket where `read`
/// receives one datagram and `write` sends one.
#[derive(Debug)]
pub enum Conn {
    /// `"tcp"`, `"tcp4"`, `"tcp6"`.
    Tcp(TcpStream),
    /// `"udp"`, `"udp4"`, `"udp6"`.
    Udp(UdpSocket),
}

impl Read for Conn {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Conn::Tcp(s) => s.read(buf),
            Conn::Udp(s) => s.recv(buf),
        }
    }
}

impl Write for Conn {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Conn::Tcp(s) => s.write(buf),
            Conn::Udp(s) => s.send(buf),
        }
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Net {
    pub(crate) fn new(stack: Arc<Stack>) -> Net {
        Net { stack }
    }

    /// The stack's own addresses.
    pub fn addresses(&self) -> &[IpAddr] {
        &self.stack.addrs
    }

    /// The sockets and buffer memory the stack holds now, and their caps.
    pub fn stats(&self) -> crate::StackStats {
        self.stack.lock().stats(&self.stack.opts)
    }

    /// The DNS servers [`lookup_host`](Self::lookup_host) asks.
    pub fn dns_servers(&self) -> &[IpAddr] {
        &self.stack.dns
    }

    /// Opens a TCP connection, waiting at most the stack's handshake timeout.
    pub fn dial_tcp(&self, addr: SocketAddr) -> io::Result<TcpStream> {
        self.dial_tcp_timeout(addr, self.stack.opts.handshake_timeout)
    }

    /// Opens a TCP connection, waiting at most `timeout`.
    pub fn dial_tcp_timeout(&self, addr: SocketAddr, timeout: Duration) -> io::Result<TcpStream> {
        TcpStream::connect(&self.stack, addr, timeout)
    }

    /// Listens for TCP connections on `addr` (port 0 picks a free port; an unspecified IP
    /// listens on all the stack's addresses).
    pub fn listen_tcp(&self, addr: SocketAddr) -> io::Result<TcpListener> {
        TcpListener::bind(&self.stack, addr)
    }

    /// A UDP socket bound to `addr` (port 0 picks a free port).
    pub fn bind_udp(&self, addr: SocketAddr) -> io::Result<UdpSocket> {
        UdpSocket::bind(&self.stack, addr)
    }

    /// A UDP socket on a free port, connected to `addr`.
    pub fn dial_udp(&self, addr: SocketAddr) -> io::Result<UdpSocket> {
        let any: IpAddr = if addr.is_ipv4() {
            [0, 0, 0, 0].into()
        } else {
            [0u16; 8].into()
        };
        let s = self.bind_udp(SocketAddr::new(any, 0))?;
        s.connect(addr)?;
        Ok(s)
    }

    /// Sends an ICMP echo request to `addr` and waits at most `timeout` for the reply;
    /// returns the round-trip time.
    pub fn ping(&self, addr: IpAddr, timeout: Duration) -> io::Result<Duration> {
        crate::icmp::ping(&self.stack, addr, timeout)
    }

    /// The addresses of `host`, asked of the stack's DNS servers through the tunnel (A and
    /// AAAA, the family of the stack's first address first). An IP literal is returned as it
    /// is.
    pub fn lookup_host(&self, host: &str) -> io::Result<Vec<IpAddr>> {
        let host = host.trim_start_matches('[').trim_end_matches(']');
        if let Ok(ip) = host.parse::<IpAddr>() {
            return Ok(vec![ip]);
        }
        if self.stack.dns.is_empty() {
            return Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!("cannot resolve {host}: the tunnel has no DNS server"),
            ));
        }
        let mut types = [dns::TYPE_A, dns::TYPE_AAAA];
        if self.stack.addrs[0].is_ipv6() {
            types.reverse();
        }
        let mut last = None;
        for &server in &self.stack.dns {
            match self.ask(server, host, &types) {
                Ok(addrs) if !addrs.is_empty() => return Ok(addrs),
                Ok(_) => {
                    last = Some(io::Error::new(
                        io::ErrorKind::NotFound,
                        format!("{host} has no address"),
                    ))
                }
                Err(e) => last = Some(e),
            }
        }
        Err(last.expect("at least one server was asked"))
    }

    /// Asks one server for `host`'s records of each type (UDP, two rounds; TCP for a type
    /// whose answer came back truncated).
    fn ask(&self, server: IpAddr, host: &str, types: &[u16]) -> io::Result<Vec<IpAddr>> {
        let server = SocketAddr::new(server, 53);
        let sock = self.dial_udp(server)?;
        let ids: Vec<u16> = types.iter().map(|_| rand::random()).collect();
        let queries = types
            .iter()
            .zip(&ids)
            .map(|(&t, &id)| dns::query(id, host, t))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, format!("{host}: {e}")))?;
        let mut answers: Vec<Option<dns::Answer>> = vec![None; types.len()];
        let mut error = None;
        let mut buf = vec![0u8; 4096];
        for _round in 0..2 {
            for (q, a) in queries.iter().zip(&answers) {
                if a.is_none() {
                    sock.send(q)?;
                }
            }
            let deadline = Instant::now() + DNS_TIMEOUT;
            while answers.iter().any(Option::is_none) {
                let left = deadline.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    break;
                }
                sock.set_read_timeout(Some(left))?;
                let n = match sock.recv(&mut buf) {
                    Ok(n) => n,
                    Err(e) if e.kind() == io::ErrorKind::TimedOut => break,
                    Err(e) => return Err(e),
                };
                for i in 0..types.len() {
                    match dns::parse_response(&buf[..n], ids[i], types[i]) {
                        Ok(a) => answers[i] = Some(a),
                        Err(dns::DnsError::NotOurs) => continue,
                        Err(e) => {
                            error = Some(e);
                            answers[i] = Some(dns::Answer {
                                addrs: vec![],
                                truncated: false,
                            });
                        }
                    }
                }
            }
            if answers.iter().all(Option::is_some) {
                break;
            }
        }
        let mut addrs = Vec::new();
        for i in 0..types.len() {
            match &answers[i] {
                Some(a) if a.truncated => {
                    addrs.extend(self.ask_tcp(server, &queries[i], ids[i], types[i])?)
                }
                Some(a) => addrs.extend_from_slice(&a.addrs),
                None => {}
            }
        }
        if addrs.is_empty() {
            if let Some(e) = error {
                let kind = match e {
                    dns::DnsError::Rcode(3) => io::ErrorKind::NotFound,
                    _ => io::ErrorKind::InvalidData,
                };
                return Err(io::Error::new(kind, format!("{host}: {e}")));
            }
            if answers.iter().all(Option::is_none) {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("{host}: DNS server {} did not answer", server.ip()),
                ));
            }
        }
        Ok(addrs)
    }

    /// One query over TCP (RFC 1035 4.2.2: each message behind its two-byte length).
    fn ask_tcp(
        &self,
        server: SocketAddr,
        query: &[u8],
        id: u16,
        qtype: u16,
    ) -> io::Result<Vec<IpAddr>> {
        let mut s = self.dial_tcp_timeout(server, DNS_TIMEOUT)?;
        s.set_read_timeout(Some(DNS_TIMEOUT))?;
        s.set_write_timeout(Some(DNS_TIMEOUT))?;
        let mut msg = (query.len() as u16).to_be_bytes().to_vec();
        msg.extend_from_slice(query);
        s.write_all(&msg)?;
        let mut len = [0u8; 2];
        s.read_exact(&mut len)?;
        let mut answer = vec![0u8; u16::from_be_bytes(len) as usize];
        s.read_exact(&mut answer)?;
        dns::parse_response(&answer, id, qtype)
            .map(|a| a.addrs)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e.to_string()))
    }

    /// `host:port` (or `[v6]:port`) resolved through the tunnel.
    pub fn resolve(&self, address: &str) -> io::Result<Vec<SocketAddr>> {
        let (host, port) = split_host_port(address)?;
        Ok(self
            .lookup_host(host)?
            .into_iter()
            .map(|ip| SocketAddr::new(ip, port))
            .collect())
    }

    /// Connects to `address` (`host:port`) over `network` (`"tcp"`, `"tcp4"`, `"tcp6"`,
    /// `"udp"`, `"udp4"`, `"udp6"`), trying each resolved address in turn.
    pub fn dial(&self, network: &str, address: &str) -> io::Result<Conn> {
        let (tcp, family) = match network {
            "tcp" => (true, None),
            "tcp4" => (true, Some(4)),
            "tcp6" => (true, Some(6)),
            "udp" => (false, None),
            "udp4" => (false, Some(4)),
            "udp6" => (false, Some(6)),
            other => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("unknown network {other:?}"),
                ))
            }
        };
        let addrs: Vec<SocketAddr> = self
            .resolve(address)?
            .into_iter()
            .filter(|a| match family {
                Some(4) => a.is_ipv4(),
                Some(_) => a.is_ipv6(),
                None => true,
            })
            .collect();
        let mut last = io::Error::new(
            io::ErrorKind::NotFound,
            format!("{address} has no address for {network}"),
        );
        for a in addrs {
            let r = if tcp {
                self.dial_tcp(a).map(Conn::Tcp)
            } else {
                self.dial_udp(a).map(Conn::Udp)
            };
            match r {
                Ok(c) => return Ok(c),
                Err(e) => last = e,
            }
        }
        Err(last)
    }
}

/// Splits `host:port` or `[v6]:port`.
pub fn split_host_port(address: &str) -> io::Result<(&str, u16)> {
    let bad = || {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{address:?} is not host:port"),
        )
    };
    let (host, port) = if let Some(rest) = address.strip_prefix('[') {
        let (h, p) = rest.split_once("]:").ok_or_else(bad)?;
        (h, p)
    } else {
        let (h, p) = address.rsplit_once(':').ok_or_else(bad)?;
        if h.contains(':') {
            return Err(bad());
        }
        (h, p)
    };
    if host.is_empty() {
        return Err(bad());
    }
    Ok((host, port.parse().map_err(|_| bad())?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_and_port_are_split_as_go_does() {
        assert_eq!(split_host_port("peer.test:80").unwrap(), ("peer.test", 80));
        assert_eq!(split_host_port("[fd00::2]:443").unwrap(), ("fd00::2", 443));
        assert_eq!(
            split_host_port("100.64.0.2:53").unwrap(),
            ("100.64.0.2", 53)
        );
        for bad in [
            "fd00::2:80",
            "peer.test",
            ":80",
            "[fd00::2]",
            "h:99999",
            "h:x",
        ] {
            assert!(split_host_port(bad).is_err(), "{bad}");
        }
    }
}
