//! SOCKS5 messages (RFC 1928) and username/password authentication (RFC 1929), without I/O.
//!
//! Each `parse_*` function reads one message from the start of a byte slice and returns it
//! with the number of bytes it took, [`Socks5Error::Incomplete`] when the slice is a prefix
//! of a message that may still become valid (read more and call again), or another
//! [`Socks5Error`] when no more bytes can make it valid. The encoders build the server's
//! replies. Nothing here panics, whatever the bytes.

use std::fmt;
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// The protocol version byte of every SOCKS5 message but the RFC 1929 ones.
pub const VERSION: u8 = 0x05;
/// The version byte of the RFC 1929 username/password subnegotiation.
pub const AUTH_VERSION: u8 = 0x01;

/// Method: no authentication.
pub const METHOD_NO_AUTH: u8 = 0x00;
/// Method: username/password (RFC 1929).
pub const METHOD_USER_PASS: u8 = 0x02;
/// Method selection reply: none of the client's methods is acceptable.
pub const METHOD_NONE_ACCEPTABLE: u8 = 0xFF;

/// ATYP: an IPv4 address, 4 bytes.
pub const ATYP_V4: u8 = 0x01;
/// ATYP: a domain name, a length byte and that many bytes.
pub const ATYP_DOMAIN: u8 = 0x03;
/// ATYP: an IPv6 address, 16 bytes.
pub const ATYP_V6: u8 = 0x04;

/// REP: succeeded.
pub const REP_SUCCEEDED: u8 = 0x00;
/// REP: general SOCKS server failure.
pub const REP_GENERAL_FAILURE: u8 = 0x01;
/// REP: network unreachable.
pub const REP_NETWORK_UNREACHABLE: u8 = 0x03;
/// REP: host unreachable (also: the name did not resolve).
pub const REP_HOST_UNREACHABLE: u8 = 0x04;
/// REP: connection refused.
pub const REP_CONNECTION_REFUSED: u8 = 0x05;
/// REP: TTL expired (what a connect timeout is reported as).
pub const REP_TTL_EXPIRED: u8 = 0x06;
/// REP: command not supported.
pub const REP_COMMAND_NOT_SUPPORTED: u8 = 0x07;
/// REP: address type not supported.
pub const REP_ADDRESS_TYPE_NOT_SUPPORTED: u8 = 0x08;

/// Why bytes are not (yet) a valid message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Socks5Error {
    /// The bytes are a valid prefix: more are needed.
    Incomplete,
    /// The version byte is not 5 (or not 1 in the RFC 1929 subnegotiation).
    BadVersion(u8),
    /// The request's command is none of CONNECT, BIND, UDP ASSOCIATE.
    UnsupportedCommand(u8),
    /// The address type is none of IPv4, domain name, IPv6.
    BadAddressType(u8),
    /// The domain name is empty or not UTF-8.
    BadDomain,
    /// A UDP datagram is a fragment (FRAG is not 0); fragments are not reassembled.
    Fragmented(u8),
}

impl Socks5Error {
    /// The REP code a server answers a request that failed to parse with this error.
    pub fn reply_code(&self) -> u8 {
        match self {
            Socks5Error::UnsupportedCommand(_) => REP_COMMAND_NOT_SUPPORTED,
            Socks5Error::BadAddressType(_) => REP_ADDRESS_TYPE_NOT_SUPPORTED,
            _ => REP_GENERAL_FAILURE,
        }
    }
}

impl fmt::Display for Socks5Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Socks5Error::Incomplete => f.write_str("incomplete SOCKS5 message"),
            Socks5Error::BadVersion(v) => write!(f, "unknown SOCKS version {v}"),
            Socks5Error::UnsupportedCommand(c) => write!(f, "unknown SOCKS5 command {c:#04x}"),
            Socks5Error::BadAddressType(t) => write!(f, "unknown SOCKS5 address type {t:#04x}"),
            Socks5Error::BadDomain => f.write_str("empty or non-UTF-8 domain name"),
            Socks5Error::Fragmented(n) => write!(f, "fragmented SOCKS5 datagram (FRAG {n})"),
        }
    }
}

impl std::error::Error for Socks5Error {}

/// A parsed message and how many bytes of the input it took.
pub type Parsed<T> = Result<(T, usize), Socks5Error>;

/// The client's greeting: the authentication methods it offers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Greeting {
    /// The METHODS bytes, in the client's order.
    pub methods: Vec<u8>,
}

impl Greeting {
    /// The method the server picks: username/password when credentials are required, no
    /// authentication otherwise; [`METHOD_NONE_ACCEPTABLE`] when the client offers neither.
    pub fn choose_method(&self, auth_required: bool) -> u8 {
        let wanted = if auth_required {
            METHOD_USER_PASS
        } else {
            METHOD_NO_AUTH
        };
        if self.methods.contains(&wanted) {
            wanted
        } else {
            METHOD_NONE_ACCEPTABLE
        }
    }
}

/// The RFC 1929 username/password request (bytes: RFC 1929 does not say they are UTF-8).
#[derive(Clone, PartialEq, Eq)]
pub struct UserPass {
    /// UNAME.
    pub username: Vec<u8>,
    /// PASSWD.
    pub password: Vec<u8>,
}

impl fmt::Debug for UserPass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("UserPass")
            .field("username", &String::from_utf8_lossy(&self.username))
            .field("password", &"<hidden>")
            .finish()
    }
}

impl UserPass {
    /// Whether these are `username` and `password`, compared in time independent of where
    /// they differ, so the reply time does not leak the password.
    pub fn matches(&self, username: &str, password: &str) -> bool {
        let user = constant_time_eq(&self.username, username.as_bytes());
        let pass = constant_time_eq(&self.password, password.as_bytes());
        user & pass
    }
}

/// Whether `a == b`, looking at every byte whatever the first difference.
pub(crate) fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    let mut diff = u8::from(a.len() != b.len());
    for (x, y) in a.iter().zip(b) {
        diff |= x ^ y;
    }
    diff == 0
}

/// A request's command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Command {
    /// CONNECT (0x01): a TCP connection to the address.
    Connect,
    /// BIND (0x02): parsed so it can be refused with "command not supported".
    Bind,
    /// UDP ASSOCIATE (0x03): a UDP relay; the address is where the client will send from.
    UdpAssociate,
}

/// An address in a request or a UDP header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Address {
    /// ATYP 0x01 or 0x04.
    Ip(SocketAddr),
    /// ATYP 0x03: a name and a port; the proxy resolves the name.
    Domain(String, u16),
}

impl Address {
    /// The port.
    pub fn port(&self) -> u16 {
        match self {
            Address::Ip(a) => a.port(),
            Address::Domain(_, p) => *p,
        }
    }
}

impl fmt::Display for Address {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Address::Ip(a) => write!(f, "{a}"),
            Address::Domain(h, p) => write!(f, "{h}:{p}"),
        }
    }
}

/// A client's request: VER CMD RSV ATYP DST.ADDR DST.PORT.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// CMD.
    pub command: Command,
    /// DST.ADDR and DST.PORT.
    pub destination: Address,
}

/// The header in front of every datagram of a UDP association: RSV RSV FRAG ATYP ADDR PORT.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UdpHeader {
    /// Where the datagram goes (client to proxy) or came from (proxy to client).
    pub address: Address,
}

/// The greeting: VER NMETHODS METHODS.
pub fn parse_greeting(buf: &[u8]) -> Parsed<Greeting> {
    let version = *buf.first().ok_or(Socks5Error::Incomplete)?;
    if version != VERSION {
        return Err(Socks5Error::BadVersion(version));
    }
    let n = usize::from(*buf.get(1).ok_or(Socks5Error::Incomplete)?);
    let methods = buf.get(2..2 + n).ok_or(Socks5Error::Incomplete)?;
    Ok((
        Greeting {
            methods: methods.to_vec(),
        },
        2 + n,
    ))
}

/// The RFC 1929 request: VER ULEN UNAME PLEN PASSWD.
pub fn parse_user_pass(buf: &[u8]) -> Parsed<UserPass> {
    let version = *buf.first().ok_or(Socks5Error::Incomplete)?;
    if version != AUTH_VERSION {
        return Err(Socks5Error::BadVersion(version));
    }
    let (username, at) = length_prefixed(buf, 1)?;
    let (password, end) = length_prefixed(buf, at)?;
    Ok((
        UserPass {
            username: username.to_vec(),
            password: password.to_vec(),
        },
        end,
    ))
}

/// A length byte at `at` and that many bytes; returns them and the offset after them.
fn length_prefixed(buf: &[u8], at: usize) -> Result<(&[u8], usize), Socks5Error> {
    let len = usize::from(*buf.get(at).ok_or(Socks5Error::Incomplete)?);
    let bytes = buf
        .get(at + 1..at + 1 + len)
        .ok_or(Socks5Error::Incomplete)?;
    Ok((bytes, at + 1 + len))
}

/// The request: VER CMD RSV ATYP DST.ADDR DST.PORT. An unknown command or address type is
/// reported as soon as its byte is seen, so the server can refuse it without waiting.
pub fn parse_request(buf: &[u8]) -> Parsed<Request> {
    let version = *buf.first().ok_or(Socks5Error::Incomplete)?;
    if version != VERSION {
        return Err(Socks5Error::BadVersion(version));
    }
    let command = match *buf.get(1).ok_or(Socks5Error::Incomplete)? {
        0x01 => Command::Connect,
        0x02 => Command::Bind,
        0x03 => Command::UdpAssociate,
        other => return Err(Socks5Error::UnsupportedCommand(other)),
    };
    // RSV (buf[2]) should be 0; like most servers, any value is taken.
    if buf.len() < 3 {
        return Err(Socks5Error::Incomplete);
    }
    let (destination, n) = parse_address(&buf[3..])?;
    Ok((
        Request {
            command,
            destination,
        },
        3 + n,
    ))
}

/// ATYP ADDR PORT.
pub fn parse_address(buf: &[u8]) -> Parsed<Address> {
    match *buf.first().ok_or(Socks5Error::Incomplete)? {
        ATYP_V4 => {
            let ip: [u8; 4] = fixed(buf, 1)?;
            let port = u16::from_be_bytes(fixed(buf, 5)?);
            Ok((
                Address::Ip(SocketAddr::new(Ipv4Addr::from(ip).into(), port)),
                7,
            ))
        }
        ATYP_V6 => {
            let ip: [u8; 16] = fixed(buf, 1)?;
            let port = u16::from_be_bytes(fixed(buf, 17)?);
            Ok((
                Address::Ip(SocketAddr::new(Ipv6Addr::from(ip).into(), port)),
                19,
            ))
        }
        ATYP_DOMAIN => {
            let (name, at) = length_prefixed(buf, 1)?;
            let name = domain(name)?;
            let port = u16::from_be_bytes(fixed(buf, at)?);
            Ok((Address::Domain(name, port), at + 2))
        }
        other => Err(Socks5Error::BadAddressType(other)),
    }
}

/// A domain name's bytes as text. A name that is an IP literal stays a name: resolving it
/// through the tunnel's lookup returns the literal as it is.
fn domain(name: &[u8]) -> Result<String, Socks5Error> {
    if name.is_empty() {
        return Err(Socks5Error::BadDomain);
    }
    String::from_utf8(name.to_vec()).map_err(|_| Socks5Error::BadDomain)
}

/// `N` bytes at `at`.
fn fixed<const N: usize>(buf: &[u8], at: usize) -> Result<[u8; N], Socks5Error> {
    buf.get(at..at + N)
        .and_then(|b| b.try_into().ok())
        .ok_or(Socks5Error::Incomplete)
}

/// The UDP header of a datagram from the client; returns it and where the data starts.
/// A datagram is whole, so here [`Socks5Error::Incomplete`] means truncated.
pub fn parse_udp_header(datagram: &[u8]) -> Parsed<UdpHeader> {
    if datagram.len() < 3 {
        return Err(Socks5Error::Incomplete);
    }
    // RSV RSV are not checked, as in the request.
    let frag = datagram[2];
    if frag != 0 {
        return Err(Socks5Error::Fragmented(frag));
    }
    let (address, n) = parse_address(&datagram[3..])?;
    Ok((UdpHeader { address }, 3 + n))
}

/// The method selection reply: VER METHOD.
pub fn method_reply(method: u8) -> [u8; 2] {
    [VERSION, method]
}

/// The RFC 1929 status reply: 0x00 success, 0x01 failure (the server then closes).
pub fn user_pass_reply(ok: bool) -> [u8; 2] {
    [AUTH_VERSION, if ok { 0x00 } else { 0x01 }]
}

/// A reply: VER REP RSV ATYP BND.ADDR BND.PORT.
pub fn reply(rep: u8, bound: SocketAddr) -> Vec<u8> {
    let mut out = vec![VERSION, rep, 0x00];
    push_address(&mut out, bound);
    out
}

/// A failure reply, with the unspecified IPv4 address as BND (RFC 1928 leaves it undefined).
pub fn failure_reply(rep: u8) -> Vec<u8> {
    reply(rep, SocketAddr::new(Ipv4Addr::UNSPECIFIED.into(), 0))
}

/// A datagram to the client: the UDP header with `from` (the sender on the far side), then
/// `data`.
pub fn udp_datagram(from: SocketAddr, data: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(22 + data.len());
    out.extend_from_slice(&[0, 0, 0]);
    push_address(&mut out, from);
    out.extend_from_slice(data);
    out
}

/// ATYP ADDR PORT for an IP address (an IPv4-mapped IPv6 address goes as IPv4).
fn push_address(out: &mut Vec<u8>, addr: SocketAddr) {
    match addr.ip().to_canonical() {
        IpAddr::V4(v4) => {
            out.push(ATYP_V4);
            out.extend_from_slice(&v4.octets());
        }
        IpAddr::V6(v6) => {
            out.push(ATYP_V6);
            out.extend_from_slice(&v6.octets());
        }
    }
    out.extend_from_slice(&addr.port().to_be_bytes());
}

/// The REP code for a failed connect: refused 0x05; unreachable (including a name that did
/// not resolve) 0x04, or 0x03 for a network; a timeout 0x06; anything else 0x01.
pub fn reply_code_for(error: &io::Error) -> u8 {
    match error.kind() {
        io::ErrorKind::ConnectionRefused => REP_CONNECTION_REFUSED,
        io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock => REP_TTL_EXPIRED,
        io::ErrorKind::HostUnreachable
        | io::ErrorKind::NotFound
        | io::ErrorKind::AddrNotAvailable => REP_HOST_UNREACHABLE,
        io::ErrorKind::NetworkUnreachable => REP_NETWORK_UNREACHABLE,
        _ => REP_GENERAL_FAILURE,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every proper prefix of `msg` must be Incomplete and the whole must parse to `len`.
    fn check_prefixes<T: fmt::Debug>(msg: &[u8], parse: fn(&[u8]) -> Parsed<T>) -> T {
        for n in 0..msg.len() {
            assert_eq!(
                parse(&msg[..n]).err(),
                Some(Socks5Error::Incomplete),
                "prefix of {n} bytes of {msg:?}"
            );
        }
        let (v, used) = parse(msg).expect("the whole message parses");
        assert_eq!(used, msg.len());
        v
    }

    #[test]
    fn greeting_offers_methods() {
        let g = check_prefixes(&[5, 2, 0, 2], parse_greeting);
        assert_eq!(g.methods, vec![0, 2]);
        assert_eq!(g.choose_method(false), METHOD_NO_AUTH);
        assert_eq!(g.choose_method(true), METHOD_USER_PASS);
        let only_none = check_prefixes(&[5, 1, 0], parse_greeting);
        assert_eq!(only_none.choose_method(true), METHOD_NONE_ACCEPTABLE);
        let only_gssapi = check_prefixes(&[5, 1, 1], parse_greeting);
        assert_eq!(only_gssapi.choose_method(false), METHOD_NONE_ACCEPTABLE);
        let empty = check_prefixes(&[5, 0], parse_greeting);
        assert_eq!(empty.choose_method(false), METHOD_NONE_ACCEPTABLE);
    }

    #[test]
    fn greeting_keeps_bytes_after_it() {
        let (_, used) = parse_greeting(&[5, 1, 0, 5, 1, 0]).unwrap();
        assert_eq!(used, 3);
    }

    #[test]
    fn greeting_of_another_version_is_refused() {
        assert_eq!(parse_greeting(&[4, 1, 0]), Err(Socks5Error::BadVersion(4)));
        // An HTTP request sent to the SOCKS port.
        assert_eq!(
            parse_greeting(b"GET / HTTP/1.1\r\n"),
            Err(Socks5Error::BadVersion(b'G'))
        );
    }

    #[test]
    fn user_pass_is_read_and_compared() {
        let msg = [1, 3, b'b', b'o', b'b', 2, b'p', b'w'];
        let up = check_prefixes(&msg, parse_user_pass);
        assert_eq!(up.username, b"bob");
        assert_eq!(up.password, b"pw");
        assert!(up.matches("bob", "pw"));
        assert!(!up.matches("bob", "pw2"));
        assert!(!up.matches("bob", "p"));
        assert!(!up.matches("alice", "pw"));
        assert!(
            !format!("{up:?}").contains("pw"),
            "Debug hides the password"
        );
        let empty = check_prefixes(&[1, 0, 0], parse_user_pass);
        assert!(empty.matches("", ""));
        assert_eq!(
            parse_user_pass(&[5, 1, b'a', 1, b'b']),
            Err(Socks5Error::BadVersion(5))
        );
    }

    #[test]
    fn connect_requests_of_each_address_type() {
        let v4 = check_prefixes(&[5, 1, 0, 1, 10, 0, 0, 1, 0x1f, 0x90], parse_request);
        assert_eq!(v4.command, Command::Connect);
        assert_eq!(
            v4.destination,
            Address::Ip("10.0.0.1:8080".parse().unwrap())
        );

        let mut msg = vec![5, 1, 0, 4];
        msg.extend_from_slice(&"fd00::2".parse::<Ipv6Addr>().unwrap().octets());
        msg.extend_from_slice(&443u16.to_be_bytes());
        let v6 = check_prefixes(&msg, parse_request);
        assert_eq!(
            v6.destination,
            Address::Ip("[fd00::2]:443".parse().unwrap())
        );

        let mut msg = vec![5, 1, 0, 3, 9];
        msg.extend_from_slice(b"localhost");
        msg.extend_from_slice(&80u16.to_be_bytes());
        let name = check_prefixes(&msg, parse_request);
        assert_eq!(name.destination, Address::Domain("localhost".into(), 80));
        assert_eq!(name.destination.to_string(), "localhost:80");
        assert_eq!(name.destination.port(), 80);
    }

    #[test]
    fn bind_and_udp_associate_parse() {
        let bind = check_prefixes(&[5, 2, 0, 1, 0, 0, 0, 0, 0, 0], parse_request);
        assert_eq!(bind.command, Command::Bind);
        let udp = check_prefixes(&[5, 3, 0, 1, 0, 0, 0, 0, 0, 0], parse_request);
        assert_eq!(udp.command, Command::UdpAssociate);
    }

    #[test]
    fn request_errors_map_to_reply_codes() {
        let cmd = parse_request(&[5, 9]).unwrap_err();
        assert_eq!(cmd, Socks5Error::UnsupportedCommand(9));
        assert_eq!(cmd.reply_code(), REP_COMMAND_NOT_SUPPORTED);

        let atyp = parse_request(&[5, 1, 0, 7]).unwrap_err();
        assert_eq!(atyp, Socks5Error::BadAddressType(7));
        assert_eq!(atyp.reply_code(), REP_ADDRESS_TYPE_NOT_SUPPORTED);

        let version = parse_request(&[4, 1, 0, 1, 1, 2, 3, 4, 0, 80]).unwrap_err();
        assert_eq!(version, Socks5Error::BadVersion(4));
        assert_eq!(version.reply_code(), REP_GENERAL_FAILURE);

        let empty_name = parse_request(&[5, 1, 0, 3, 0, 0, 80]).unwrap_err();
        assert_eq!(empty_name, Socks5Error::BadDomain);
        assert_eq!(empty_name.reply_code(), REP_GENERAL_FAILURE);

        let not_utf8 = parse_request(&[5, 1, 0, 3, 2, 0xff, 0xfe, 0, 80]).unwrap_err();
        assert_eq!(not_utf8, Socks5Error::BadDomain);
    }

    #[test]
    fn replies_are_encoded() {
        assert_eq!(method_reply(METHOD_NO_AUTH), [5, 0]);
        assert_eq!(user_pass_reply(true), [1, 0]);
        assert_eq!(user_pass_reply(false), [1, 1]);
        assert_eq!(
            reply(REP_SUCCEEDED, "1.2.3.4:258".parse().unwrap()),
            vec![5, 0, 0, 1, 1, 2, 3, 4, 1, 2]
        );
        let v6 = reply(REP_SUCCEEDED, "[::1]:1".parse().unwrap());
        assert_eq!(v6.len(), 4 + 16 + 2);
        assert_eq!(v6[3], ATYP_V6);
        let mapped = reply(REP_SUCCEEDED, "[::ffff:1.2.3.4]:1".parse().unwrap());
        assert_eq!(mapped, vec![5, 0, 0, 1, 1, 2, 3, 4, 0, 1]);
        assert_eq!(
            failure_reply(REP_COMMAND_NOT_SUPPORTED),
            vec![5, 7, 0, 1, 0, 0, 0, 0, 0, 0]
        );
    }

    #[test]
    fn a_reply_parses_back_as_its_address() {
        for addr in ["9.8.7.6:65535", "[fe80::1]:22"] {
            let addr: SocketAddr = addr.parse().unwrap();
            let r = reply(REP_SUCCEEDED, addr);
            assert_eq!(
                parse_address(&r[3..]).unwrap(),
                (Address::Ip(addr), r.len() - 3)
            );
        }
    }

    #[test]
    fn io_errors_map_to_reply_codes() {
        let code = |k| reply_code_for(&io::Error::from(k));
        assert_eq!(
            code(io::ErrorKind::ConnectionRefused),
            REP_CONNECTION_REFUSED
        );
        assert_eq!(code(io::ErrorKind::TimedOut), REP_TTL_EXPIRED);
        assert_eq!(code(io::ErrorKind::HostUnreachable), REP_HOST_UNREACHABLE);
        assert_eq!(code(io::ErrorKind::NotFound), REP_HOST_UNREACHABLE);
        assert_eq!(
            code(io::ErrorKind::NetworkUnreachable),
            REP_NETWORK_UNREACHABLE
        );
        assert_eq!(code(io::ErrorKind::PermissionDenied), REP_GENERAL_FAILURE);
    }

    #[test]
    fn udp_header_round_trips() {
        let from: SocketAddr = "10.1.2.3:53".parse().unwrap();
        let d = udp_datagram(from, b"hello");
        let (h, at) = parse_udp_header(&d).unwrap();
        assert_eq!(h.address, Address::Ip(from));
        assert_eq!(&d[at..], b"hello");

        let mut named = vec![0, 0, 0, 3, 4];
        named.extend_from_slice(b"host");
        named.extend_from_slice(&[0, 53]);
        let header_len = named.len();
        named.extend_from_slice(b"q");
        let (h, at) = parse_udp_header(&named).unwrap();
        assert_eq!(h.address, Address::Domain("host".into(), 53));
        assert_eq!(at, header_len);
        for n in 0..header_len {
            assert_eq!(
                parse_udp_header(&named[..n]),
                Err(Socks5Error::Incomplete),
                "{n}"
            );
        }
    }

    #[test]
    fn udp_fragments_and_bad_types_are_refused() {
        assert_eq!(
            parse_udp_header(&[0, 0, 1, 1, 1, 2, 3, 4, 0, 1]),
            Err(Socks5Error::Fragmented(1))
        );
        assert_eq!(
            parse_udp_header(&[0, 0, 0, 9, 1]),
            Err(Socks5Error::BadAddressType(9))
        );
    }

    #[test]
    fn no_input_panics() {
        // Every byte string up to 3 bytes, and every prefix of some longer ones.
        let mut inputs: Vec<Vec<u8>> = vec![vec![]];
        for a in 0..=255u8 {
            inputs.push(vec![a]);
            for b in [0u8, 1, 2, 3, 4, 5, 9, 255] {
                inputs.push(vec![a, b]);
                for c in [0u8, 1, 3, 4, 255] {
                    inputs.push(vec![a, b, c]);
                    inputs.push(vec![5, a, b, c, 3, 1, 2]);
                    inputs.push(vec![0, 0, 0, a, b, c]);
                }
            }
        }
        for input in &inputs {
            check_consumed(input, parse_greeting);
            check_consumed(input, parse_user_pass);
            check_consumed(input, parse_request);
            check_consumed(input, parse_address);
            check_consumed(input, parse_udp_header);
        }
    }

    /// A parse of `input` takes at most `input`, and a parse of any prefix is undecided
    /// (`Incomplete`) or the same: what the server reads piece by piece relies on it.
    fn check_consumed<T: PartialEq + fmt::Debug>(input: &[u8], parse: fn(&[u8]) -> Parsed<T>) {
        let whole = parse(input);
        if let Ok((_, used)) = &whole {
            assert!(*used <= input.len());
        }
        for n in 0..input.len() {
            let part = parse(&input[..n]);
            assert!(
                part == Err(Socks5Error::Incomplete) || part == whole,
                "{:?}: {part:?} then {whole:?}",
                &input[..n]
            );
        }
    }
}
