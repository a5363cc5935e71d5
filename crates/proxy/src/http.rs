//! HTTP/1.x proxy requests (RFC 9110, 9112), without I/O.
//!
//! [`parse_head`] reads a request head (the request line and the headers up to the empty
//! line, lines ending in CRLF or LF) from the start of a byte slice, saying
//! [`HttpError::Incomplete`] while the bytes may still become a valid head and failing as
//! soon as a complete line (or the start of the request line) cannot be. [`ProxyRequest`]
//! tells what a proxy does with the head: `CONNECT host:port` opens a tunnel, an absolute
//! `http://` URI is forwarded in origin-form by [`origin_request`]. The rest builds the
//! proxy's own responses. Nothing here panics, whatever the bytes.

use base64::alphabet;
use base64::engine::{DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig};
use base64::Engine;
use std::fmt;
use std::io;
use std::net::Ipv6Addr;

/// The longest head read; a longer one is answered 431.
pub const MAX_HEAD: usize = 64 * 1024;

/// The reply to a `CONNECT` that reached its target: after it, bytes go both ways as they are.
pub const CONNECT_ESTABLISHED: &[u8] = b"HTTP/1.1 200 Connection established\r\n\r\n";

/// The realm in `Proxy-Authenticate` (curl and browsers show it when asking for a password).
pub const REALM: &str = "vpn";

/// Why bytes are not (yet) a request the proxy can serve.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HttpError {
    /// A valid prefix of a head: more bytes are needed.
    Incomplete,
    /// No end of the head in the first [`MAX_HEAD`] bytes.
    TooLarge,
    /// The request line is not `METHOD SP TARGET SP HTTP/1.x`.
    BadRequestLine,
    /// The version is not HTTP/1.0 or HTTP/1.1.
    BadVersion,
    /// A header line is not `name: value` (or is an obsolete folded line).
    BadHeader,
    /// The request-target is not what the method needs (`host:port` for CONNECT, an
    /// absolute `http://` URI otherwise), or its host or port is invalid.
    BadTarget,
    /// An `https://` URI: a client must use CONNECT for TLS.
    Https,
}

impl HttpError {
    /// The status the proxy answers with: 431 for an oversized head, else 400.
    pub fn status(&self) -> u16 {
        match self {
            HttpError::TooLarge => 431,
            _ => 400,
        }
    }
}

impl fmt::Display for HttpError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            HttpError::Incomplete => "incomplete request head",
            HttpError::TooLarge => "request head over 64 KiB",
            HttpError::BadRequestLine => "malformed request line",
            HttpError::BadVersion => "not HTTP/1.0 or HTTP/1.1",
            HttpError::BadHeader => "malformed header line",
            HttpError::BadTarget => {
                "the request-target must be host:port (CONNECT) or an absolute http:// URI"
            }
            HttpError::Https => "https:// URIs need CONNECT",
        })
    }
}

impl std::error::Error for HttpError {}

/// One header field (the value's bytes as sent, without surrounding whitespace).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Header {
    /// The field name, as sent (compare it case-insensitively).
    pub name: String,
    /// The field value.
    pub value: Vec<u8>,
}

/// A parsed request head.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestHead {
    /// The method (a token, case-sensitive: `CONNECT`, `GET`, ...).
    pub method: String,
    /// The request-target, as sent.
    pub target: String,
    /// `HTTP/1.0` or `HTTP/1.1`.
    pub version: String,
    /// The header fields, in order.
    pub headers: Vec<Header>,
}

impl RequestHead {
    /// The first value of the header `name` (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&[u8]> {
        self.headers
            .iter()
            .find(|h| h.name.eq_ignore_ascii_case(name))
            .map(|h| h.value.as_slice())
    }
}

/// What the proxy does with a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProxyRequest {
    /// `CONNECT host:port`: a tunnel to the target.
    Connect {
        /// A name or an IP address (IPv6 without brackets).
        host: String,
        /// The port.
        port: u16,
    },
    /// An absolute `http://` URI: the request goes to the target in origin-form.
    Forward {
        /// A name or an IP address (IPv6 without brackets).
        host: String,
        /// The port (80 when the URI has none).
        port: u16,
        /// The origin-form target: the path and query, `/` at least.
        path: String,
        /// The `Host` value for the origin: the URI's authority without user info.
        host_header: String,
    },
}

/// A request head at the start of `buf`, and the length of the head (what follows is the
/// body or the first bytes of the tunnel).
pub fn parse_head(buf: &[u8]) -> Result<(RequestHead, usize), HttpError> {
    let mut at = skip_leading_empty_lines(buf);
    let mut request_line = None;
    let mut headers = Vec::new();
    loop {
        let Some(nl) = find_newline(&buf[at..]) else {
            if request_line.is_none() {
                check_partial_request_line(&buf[at..])?;
            }
            return Err(if buf.len() >= MAX_HEAD {
                HttpError::TooLarge
            } else {
                HttpError::Incomplete
            });
        };
        let line = strip_cr(&buf[at..at + nl]);
        at += nl + 1;
        if at > MAX_HEAD {
            return Err(HttpError::TooLarge);
        }
        match request_line {
            None => request_line = Some(parse_request_line(line)?),
            Some(_) if line.is_empty() => break,
            Some(_) => headers.push(parse_header(line)?),
        }
    }
    let (method, target, version) = request_line.ok_or(HttpError::BadRequestLine)?;
    Ok((
        RequestHead {
            method,
            target,
            version,
            headers,
        },
        at,
    ))
}

/// RFC 9112 2.2: a server should ignore empty lines before the request line.
fn skip_leading_empty_lines(buf: &[u8]) -> usize {
    let mut at = 0;
    loop {
        match buf.get(at..) {
            Some([b'\r', b'\n', ..]) => at += 2,
            Some([b'\n', ..]) => at += 1,
            _ => return at,
        }
    }
}

fn find_newline(buf: &[u8]) -> Option<usize> {
    buf.iter().position(|&b| b == b'\n')
}

fn strip_cr(line: &[u8]) -> &[u8] {
    line.strip_suffix(b"\r").unwrap_or(line)
}

/// Fails early on a first line that cannot become a request line (a TLS hello or SOCKS
/// greeting sent to the HTTP port), instead of waiting for a newline that may never come.
fn check_partial_request_line(partial: &[u8]) -> Result<(), HttpError> {
    if partial == b"\r" {
        // The first half of an empty line's CRLF.
        return Ok(());
    }
    let method_end = partial
        .iter()
        .position(|&b| b == b' ')
        .unwrap_or(partial.len());
    let method = &partial[..method_end];
    let starts_with_space = method_end == 0 && !partial.is_empty();
    if starts_with_space || !method.iter().all(|&b| is_tchar(b)) {
        return Err(HttpError::BadRequestLine);
    }
    Ok(())
}

/// `METHOD SP TARGET SP HTTP/1.x`.
fn parse_request_line(line: &[u8]) -> Result<(String, String, String), HttpError> {
    let mut parts = line.split(|&b| b == b' ');
    let (Some(method), Some(target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(HttpError::BadRequestLine);
    };
    if method.is_empty() || !method.iter().all(|&b| is_tchar(b)) {
        return Err(HttpError::BadRequestLine);
    }
    if target.is_empty() || !target.iter().all(|&b| b.is_ascii_graphic()) {
        return Err(HttpError::BadRequestLine);
    }
    if version != b"HTTP/1.1" && version != b"HTTP/1.0" {
        return Err(HttpError::BadVersion);
    }
    Ok((ascii(method), ascii(target), ascii(version)))
}

/// `name: value`, with no whitespace before the colon (RFC 9112 5.1) and no folding.
fn parse_header(line: &[u8]) -> Result<Header, HttpError> {
    let colon = line
        .iter()
        .position(|&b| b == b':')
        .ok_or(HttpError::BadHeader)?;
    let name = &line[..colon];
    if name.is_empty() || !name.iter().all(|&b| is_tchar(b)) {
        return Err(HttpError::BadHeader);
    }
    let value = trim_ows(&line[colon + 1..]);
    if value.iter().any(|&b| b == b'\r' || b == 0) {
        return Err(HttpError::BadHeader);
    }
    Ok(Header {
        name: ascii(name),
        value: value.to_vec(),
    })
}

fn trim_ows(mut v: &[u8]) -> &[u8] {
    while let [b' ' | b'\t', rest @ ..] = v {
        v = rest;
    }
    while let [rest @ .., b' ' | b'\t'] = v {
        v = rest;
    }
    v
}

/// Bytes already checked to be ASCII.
fn ascii(b: &[u8]) -> String {
    b.iter().map(|&c| char::from(c)).collect()
}

/// RFC 9110 5.6.2 token characters.
fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

impl ProxyRequest {
    /// What `head` asks of a proxy: CONNECT to `host:port`, or an absolute `http://` URI.
    pub fn from_head(head: &RequestHead) -> Result<ProxyRequest, HttpError> {
        if head.method == "CONNECT" {
            let (host, port) = parse_authority(&head.target)?;
            let port = port.ok_or(HttpError::BadTarget)?;
            return Ok(ProxyRequest::Connect { host, port });
        }
        let (authority, path) = split_absolute_uri(&head.target)?;
        let authority = authority.rsplit_once('@').map_or(authority, |(_, a)| a);
        let (host, port) = parse_authority(authority)?;
        Ok(ProxyRequest::Forward {
            host,
            port: port.unwrap_or(80),
            path,
            host_header: authority.to_string(),
        })
    }
}

/// An absolute `http://` URI's authority and its path and query in origin-form (the
/// fragment dropped: it is never sent).
fn split_absolute_uri(target: &str) -> Result<(&str, String), HttpError> {
    let scheme_end = target.find("://").ok_or(HttpError::BadTarget)?;
    let scheme = &target[..scheme_end];
    if scheme.eq_ignore_ascii_case("https") {
        return Err(HttpError::Https);
    }
    if !scheme.eq_ignore_ascii_case("http") {
        return Err(HttpError::BadTarget);
    }
    let rest = &target[scheme_end + 3..];
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, path) = rest.split_at(end);
    let path = path.split('#').next().unwrap_or("");
    let path = match path.as_bytes().first() {
        None => "/".to_string(),
        Some(b'?') => format!("/{path}"),
        Some(_) => path.to_string(),
    };
    Ok((authority, path))
}

/// `host[:port]` or `[v6][:port]`: the host (brackets removed) and the port if given (an
/// empty port counts as none, as RFC 3986 allows).
pub fn parse_authority(authority: &str) -> Result<(String, Option<u16>), HttpError> {
    let (host, port) = if let Some(rest) = authority.strip_prefix('[') {
        let (v6, after) = rest.split_once(']').ok_or(HttpError::BadTarget)?;
        v6.parse::<Ipv6Addr>().map_err(|_| HttpError::BadTarget)?;
        let port = match after {
            "" => None,
            p => Some(p.strip_prefix(':').ok_or(HttpError::BadTarget)?),
        };
        (v6, port)
    } else {
        match authority.rsplit_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (authority, None),
        }
    };
    let name_ok = |h: &str| {
        !h.is_empty()
            && h.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-._".contains(&b))
    };
    if !authority.starts_with('[') && !name_ok(host) {
        return Err(HttpError::BadTarget);
    }
    let port = match port {
        None | Some("") => None,
        Some(p) => Some(parse_port(p)?),
    };
    Ok((host.to_string(), port))
}

fn parse_port(p: &str) -> Result<u16, HttpError> {
    if p.is_empty() || p.len() > 5 || !p.bytes().all(|b| b.is_ascii_digit()) {
        return Err(HttpError::BadTarget);
    }
    match p.parse::<u16>() {
        Ok(0) | Err(_) => Err(HttpError::BadTarget),
        Ok(port) => Ok(port),
    }
}

/// The user and password of a `Basic` credential (`Proxy-Authorization`'s value): base64 of
/// `user:password` (RFC 7617), padding optional.
pub fn basic_credentials(value: &[u8]) -> Option<(Vec<u8>, Vec<u8>)> {
    let value = trim_ows(value);
    let space = value.iter().position(|&b| b == b' ')?;
    let (scheme, token) = value.split_at(space);
    if !scheme.eq_ignore_ascii_case(b"basic") {
        return None;
    }
    let engine = GeneralPurpose::new(
        &alphabet::STANDARD,
        GeneralPurposeConfig::new().with_decode_padding_mode(DecodePaddingMode::Indifferent),
    );
    let decoded = engine.decode(trim_ows(token)).ok()?;
    let colon = decoded.iter().position(|&b| b == b':')?;
    Some((decoded[..colon].to_vec(), decoded[colon + 1..].to_vec()))
}

/// Whether the head carries `Proxy-Authorization: Basic` with exactly these credentials.
pub fn is_authorized(head: &RequestHead, username: &str, password: &str) -> bool {
    let Some((user, pass)) = head
        .header("proxy-authorization")
        .and_then(basic_credentials)
    else {
        return false;
    };
    let user_ok = crate::socks5::constant_time_eq(&user, username.as_bytes());
    let pass_ok = crate::socks5::constant_time_eq(&pass, password.as_bytes());
    user_ok & pass_ok
}

/// Headers a proxy never forwards (RFC 9110 7.6.1), lower case; besides these, those the
/// `Connection` header names. `Transfer-Encoding`, `TE` and `Trailer` are forwarded: the
/// relay passes the body through as it is, framing and trailers included.
const HOP_BY_HOP: &[&str] = &[
    "connection",
    "proxy-connection",
    "keep-alive",
    "proxy-authorization",
    "proxy-authenticate",
    "upgrade",
];

/// The head sent to the origin: the request line with `path` as target, a `Host` of
/// `host_header`, the client's end-to-end headers, and `Connection: close` (one request per
/// connection: the proxy relays bytes and does not frame responses). A protocol upgrade
/// (`Connection: upgrade` with `Upgrade`, as WebSocket uses) is kept, since the relay
/// carries whatever follows.
pub fn origin_request(head: &RequestHead, path: &str, host_header: &str) -> Vec<u8> {
    let listed: Vec<String> = head
        .headers
        .iter()
        .filter(|h| h.name.eq_ignore_ascii_case("connection"))
        .flat_map(|h| h.value.split(|&b| b == b','))
        .map(|t| ascii_lower(trim_ows(t)))
        .collect();
    let upgrade = listed.iter().any(|t| t == "upgrade") && head.header("upgrade").is_some();
    let mut out = Vec::with_capacity(256);
    out.extend_from_slice(format!("{} {path} {}\r\n", head.method, head.version).as_bytes());
    out.extend_from_slice(format!("Host: {host_header}\r\n").as_bytes());
    let forwarded = |name: &str| {
        let hop_by_hop = HOP_BY_HOP.contains(&name) || listed.iter().any(|t| t == name);
        name != "host" && (!hop_by_hop || upgrade && name == "upgrade")
    };
    for h in &head.headers {
        if !forwarded(&h.name.to_ascii_lowercase()) {
            continue;
        }
        out.extend_from_slice(h.name.as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(&h.value);
        out.extend_from_slice(b"\r\n");
    }
    let connection = if upgrade { "upgrade" } else { "close" };
    out.extend_from_slice(format!("Connection: {connection}\r\n\r\n").as_bytes());
    out
}

fn ascii_lower(b: &[u8]) -> String {
    String::from_utf8_lossy(b).to_ascii_lowercase()
}

/// The status for a failed connect to the target: 504 when it timed out, 502 otherwise.
pub fn status_for(error: &io::Error) -> u16 {
    match error.kind() {
        io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock => 504,
        _ => 502,
    }
}

fn reason(status: u16) -> &'static str {
    match status {
        400 => "Bad Request",
        407 => "Proxy Authentication Required",
        408 => "Request Timeout",
        431 => "Request Header Fields Too Large",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        _ => "Error",
    }
}

/// The proxy's own error response: `status`, a plain-text body of `detail`, and
/// `Connection: close` (the proxy closes after it). A 407 asks for Basic credentials.
pub fn error_response(status: u16, detail: &str) -> Vec<u8> {
    let reason = reason(status);
    let body = format!("{status} {reason}: {detail}\n");
    let authenticate = if status == 407 {
        format!("Proxy-Authenticate: Basic realm=\"{REALM}\"\r\n")
    } else {
        String::new()
    };
    format!(
        "HTTP/1.1 {status} {reason}\r\n{authenticate}Content-Type: text/plain; charset=utf-8\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head(text: &str) -> RequestHead {
        let (h, used) = parse_head(text.as_bytes()).expect("parses");
        assert_eq!(used, text.len());
        h
    }

    #[test]
    fn connect_head_parses() {
        let text = "CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n";
        let h = head(text);
        assert_eq!(h.method, "CONNECT");
        assert_eq!(h.target, "example.com:443");
        assert_eq!(h.version, "HTTP/1.1");
        assert_eq!(h.header("HOST"), Some(&b"example.com:443"[..]));
        assert_eq!(
            ProxyRequest::from_head(&h),
            Ok(ProxyRequest::Connect {
                host: "example.com".into(),
                port: 443
            })
        );
    }

    #[test]
    fn every_prefix_of_a_head_is_incomplete() {
        let text = b"\r\nGET http://h/ HTTP/1.1\r\nA: b\r\n\r\nBODY";
        let end = text.len() - 4;
        for n in 0..end {
            assert_eq!(
                parse_head(&text[..n]).err(),
                Some(HttpError::Incomplete),
                "{n}"
            );
        }
        assert_eq!(
            parse_head(text).unwrap().1,
            end,
            "the body is not part of the head"
        );
    }

    #[test]
    fn lf_line_endings_and_leading_empty_lines() {
        let h = head("\r\n\nGET http://h:8080/x?y HTTP/1.0\nA:  b c \t\n\n");
        assert_eq!(
            h.headers,
            vec![Header {
                name: "A".into(),
                value: b"b c".to_vec()
            }]
        );
        assert_eq!(h.version, "HTTP/1.0");
    }

    #[test]
    fn malformed_heads_are_refused() {
        let bad = |t: &str| parse_head(t.as_bytes()).unwrap_err();
        assert_eq!(bad("GET / HTTP/1.1 x\r\n\r\n"), HttpError::BadRequestLine);
        assert_eq!(bad("GET  / HTTP/1.1\r\n\r\n"), HttpError::BadRequestLine);
        assert_eq!(bad("GET /\r\n\r\n"), HttpError::BadRequestLine);
        assert_eq!(bad("G(T / HTTP/1.1\r\n\r\n"), HttpError::BadRequestLine);
        assert_eq!(bad("GET / HTTP/2.0\r\n\r\n"), HttpError::BadVersion);
        assert_eq!(
            bad("GET / HTTP/1.1\r\nNoColon\r\n\r\n"),
            HttpError::BadHeader
        );
        assert_eq!(bad("GET / HTTP/1.1\r\nA : b\r\n\r\n"), HttpError::BadHeader);
        assert_eq!(bad("GET / HTTP/1.1\r\n: b\r\n\r\n"), HttpError::BadHeader);
        assert_eq!(
            bad("GET / HTTP/1.1\r\nA: b\r\n folded\r\n\r\n"),
            HttpError::BadHeader
        );
        assert_eq!(
            bad("GET / HTTP/1.1\r\nA: b\rc\r\n\r\n"),
            HttpError::BadHeader
        );
        assert_eq!(bad("garbage\r\n\r\n"), HttpError::BadRequestLine);
    }

    #[test]
    fn binary_is_refused_before_a_newline() {
        // A TLS ClientHello and a SOCKS5 greeting sent to the HTTP port.
        assert_eq!(parse_head(&[0x16, 3, 1, 0]), Err(HttpError::BadRequestLine));
        assert_eq!(parse_head(&[5, 1, 0]), Err(HttpError::BadRequestLine));
        assert_eq!(parse_head(b" GET"), Err(HttpError::BadRequestLine));
        assert_eq!(parse_head(b"GET /"), Err(HttpError::Incomplete));
    }

    #[test]
    fn an_oversized_head_is_431() {
        let mut big = b"GET http://h/ HTTP/1.1\r\n".to_vec();
        while big.len() < MAX_HEAD {
            big.extend_from_slice(b"X-Filler: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n");
        }
        let e = parse_head(&big).unwrap_err();
        assert_eq!(e, HttpError::TooLarge);
        assert_eq!(e.status(), 431);
        big.extend_from_slice(b"\r\n");
        assert_eq!(parse_head(&big).unwrap_err(), HttpError::TooLarge);
    }

    #[test]
    fn absolute_uris_become_origin_form() {
        let cases = [
            (
                "http://example.com/a/b?c=d",
                "example.com",
                80,
                "/a/b?c=d",
                "example.com",
            ),
            ("http://example.com", "example.com", 80, "/", "example.com"),
            ("HTTP://h:8080?q", "h", 8080, "/?q", "h:8080"),
            ("http://h:/x#frag", "h", 80, "/x", "h:"),
            ("http://u:p@h/x", "h", 80, "/x", "h"),
            ("http://[::1]:81/", "::1", 81, "/", "[::1]:81"),
            ("http://[fd00::2]/", "fd00::2", 80, "/", "[fd00::2]"),
            ("http://10.0.0.1:1/", "10.0.0.1", 1, "/", "10.0.0.1:1"),
        ];
        for (uri, host, port, path, host_header) in cases {
            let h = head(&format!("GET {uri} HTTP/1.1\r\n\r\n"));
            assert_eq!(
                ProxyRequest::from_head(&h),
                Ok(ProxyRequest::Forward {
                    host: host.into(),
                    port,
                    path: path.into(),
                    host_header: host_header.into(),
                }),
                "{uri}"
            );
        }
    }

    #[test]
    fn bad_targets_are_refused() {
        let cases = [
            ("GET", "https://example.com/", HttpError::Https),
            ("GET", "HTTPS://example.com/", HttpError::Https),
            ("GET", "/just/a/path", HttpError::BadTarget),
            ("GET", "ftp://h/", HttpError::BadTarget),
            ("GET", "http:///", HttpError::BadTarget),
            ("GET", "http://h:99999/", HttpError::BadTarget),
            ("GET", "http://h:0/", HttpError::BadTarget),
            ("GET", "http://h:+1/", HttpError::BadTarget),
            ("GET", "http://[::1/", HttpError::BadTarget),
            ("GET", "http://[nope]/", HttpError::BadTarget),
            ("GET", "http://[::1]x/", HttpError::BadTarget),
            ("GET", "http://a:b:c/", HttpError::BadTarget),
            ("CONNECT", "example.com", HttpError::BadTarget),
            ("CONNECT", "example.com:", HttpError::BadTarget),
            ("CONNECT", "example.com:0", HttpError::BadTarget),
            ("CONNECT", ":443", HttpError::BadTarget),
            ("CONNECT", "http://example.com:443", HttpError::BadTarget),
        ];
        for (method, target, want) in cases {
            let h = head(&format!("{method} {target} HTTP/1.1\r\n\r\n"));
            assert_eq!(ProxyRequest::from_head(&h), Err(want), "{method} {target}");
        }
        let v6 = head("CONNECT [fd00::1]:22 HTTP/1.1\r\n\r\n");
        assert_eq!(
            ProxyRequest::from_head(&v6),
            Ok(ProxyRequest::Connect {
                host: "fd00::1".into(),
                port: 22
            })
        );
    }

    #[test]
    fn basic_credentials_are_decoded() {
        // "alice:s3cr:et" in base64.
        let (u, p) = basic_credentials(b"Basic YWxpY2U6czNjcjpldA==").unwrap();
        assert_eq!(
            (u.as_slice(), p.as_slice()),
            (&b"alice"[..], &b"s3cr:et"[..])
        );
        assert!(basic_credentials(b"basic   YWxpY2U6czNjcjpldA").is_some());
        assert_eq!(basic_credentials(b"Bearer YWxpY2U6czNjcjpldA=="), None);
        assert_eq!(basic_credentials(b"Basic !!!"), None);
        assert_eq!(basic_credentials(b"Basic"), None);
        // "nocolon"
        assert_eq!(basic_credentials(b"Basic bm9jb2xvbg=="), None);
    }

    #[test]
    fn authorization_is_checked() {
        let h = head(
            "GET http://h/ HTTP/1.1\r\nProxy-Authorization: Basic YWxpY2U6czNjcjpldA==\r\n\r\n",
        );
        assert!(is_authorized(&h, "alice", "s3cr:et"));
        assert!(!is_authorized(&h, "alice", "s3cr"));
        assert!(!is_authorized(&h, "bob", "s3cr:et"));
        assert!(!is_authorized(
            &head("GET http://h/ HTTP/1.1\r\n\r\n"),
            "",
            ""
        ));
    }

    #[test]
    fn the_origin_request_drops_proxy_headers() {
        let h = head(
            "GET http://h:8080/p?q HTTP/1.1\r\nHost: wrong\r\nProxy-Authorization: Basic x\r\n\
             Proxy-Connection: keep-alive\r\nConnection: keep-alive, X-Hop\r\nX-Hop: 1\r\n\
             Keep-Alive: 5\r\nAccept: */*\r\nUser-Agent: t\r\n\r\n",
        );
        let out = origin_request(&h, "/p?q", "h:8080");
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "GET /p?q HTTP/1.1\r\nHost: h:8080\r\nAccept: */*\r\nUser-Agent: t\r\n\
             Connection: close\r\n\r\n"
        );
    }

    #[test]
    fn the_origin_request_keeps_an_upgrade() {
        let h =
            head("GET http://h/ws HTTP/1.1\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n");
        let out = String::from_utf8(origin_request(&h, "/ws", "h")).unwrap();
        assert_eq!(
            out,
            "GET /ws HTTP/1.1\r\nHost: h\r\nUpgrade: websocket\r\nConnection: upgrade\r\n\r\n"
        );
        // An Upgrade header the Connection header does not name is dropped.
        let h = head("GET http://h/ HTTP/1.1\r\nUpgrade: websocket\r\n\r\n");
        let out = String::from_utf8(origin_request(&h, "/", "h")).unwrap();
        assert!(!out.contains("Upgrade"));
        assert!(out.ends_with("Connection: close\r\n\r\n"));
    }

    #[test]
    fn error_responses_are_complete() {
        let r = String::from_utf8(error_response(407, "credentials needed")).unwrap();
        assert!(r.starts_with("HTTP/1.1 407 Proxy Authentication Required\r\n"));
        assert!(r.contains("\r\nProxy-Authenticate: Basic realm=\"vpn\"\r\n"));
        let (head, body) = r.split_once("\r\n\r\n").unwrap();
        assert!(head.contains(&format!("Content-Length: {}", body.len())));
        assert!(head.contains("Connection: close"));
        let r = String::from_utf8(error_response(502, "refused")).unwrap();
        assert!(r.starts_with("HTTP/1.1 502 Bad Gateway\r\n"));
        assert!(!r.contains("Proxy-Authenticate"));
    }

    #[test]
    fn connect_errors_map_to_statuses() {
        assert_eq!(status_for(&io::ErrorKind::TimedOut.into()), 504);
        assert_eq!(status_for(&io::ErrorKind::ConnectionRefused.into()), 502);
        assert_eq!(status_for(&io::ErrorKind::HostUnreachable.into()), 502);
    }

    #[test]
    fn no_input_panics() {
        let seeds: [&[u8]; 6] = [
            b"CONNECT [::1]:443 HTTP/1.1\r\nProxy-Authorization: Basic YTpi\r\n\r\n",
            b"GET http://u@[fd00::1]:8/x?y#z HTTP/1.0\nConnection: a, b\nA: \xff\n\n",
            b"\r\n\r\nGET https://x/ HTTP/1.1\r\n\r\n",
            b"GET http://h:65536/ HTTP/1.1\r\n\r\n",
            b"\n\n\n",
            b"\x00\xff\r\n",
        ];
        for seed in seeds {
            for n in 0..=seed.len() {
                drive(&seed[..n]);
                // Each byte replaced by a few interesting ones.
                for i in 0..n {
                    for b in [b'\r', b'\n', b' ', b':', b'[', b']', b'@', 0xff] {
                        let mut v = seed[..n].to_vec();
                        v[i] = b;
                        drive(&v);
                    }
                }
            }
        }
    }

    fn drive(input: &[u8]) {
        let whole = parse_head(input);
        // What the server reads piece by piece: a prefix is undecided or decided for good.
        for n in 0..input.len() {
            let part = parse_head(&input[..n]);
            assert!(
                part == Err(HttpError::Incomplete) || part == whole,
                "{:?} of {input:?}: {part:?} then {whole:?}",
                &input[..n]
            );
        }
        if let Ok((h, used)) = whole {
            assert!(used <= input.len());
            if let Ok(ProxyRequest::Forward {
                path, host_header, ..
            }) = ProxyRequest::from_head(&h)
            {
                let _ = origin_request(&h, &path, &host_header);
            }
            let _ = is_authorized(&h, "a", "b");
        }
    }
}
