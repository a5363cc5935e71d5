//! The HTTP proxy end to end, with the host as both sides.

mod common;

use common::*;
use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::sync::Arc;
use std::time::Duration;
use vpn_proxy::{serve_http, Credentials, HostNetwork, Limits, Server};

fn server(auth: Option<Credentials>, limits: Limits) -> Server {
    serve_http(&HostNetwork, loopback(), host(), auth, limits).unwrap()
}

/// Sends `request` and reads the whole response (the proxy closes after it).
fn exchange(srv: &Server, request: &str) -> String {
    let mut s = connect(srv.local_addr());
    s.write_all(request.as_bytes()).unwrap();
    String::from_utf8_lossy(&read_to_end(&mut s)).into_owned()
}

fn status_line(response: &str) -> &str {
    response.lines().next().unwrap_or("")
}

/// Reads a response head (up to the empty line).
fn read_head(s: &mut TcpStream) -> String {
    let mut head = Vec::new();
    let mut b = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        s.read_exact(&mut b).unwrap();
        head.push(b[0]);
    }
    String::from_utf8(head).unwrap()
}

#[test]
fn connect_opens_a_tunnel() {
    let echo = tcp_echo();
    let srv = server(None, limits());
    let mut s = connect(srv.local_addr());
    write!(s, "CONNECT {echo} HTTP/1.1\r\nHost: {echo}\r\n\r\n").unwrap();
    assert_eq!(
        read_head(&mut s),
        "HTTP/1.1 200 Connection established\r\n\r\n"
    );
    assert_echo(&mut s, b"\x16\x03\x01 pretend TLS");
    assert_echo(&mut s, &vec![1u8; 200_000]);
    s.shutdown(std::net::Shutdown::Write).unwrap();
    assert_eq!(read_to_end(&mut s), b"");
    eventually("the relay to end", || srv.connections() == 0);
}

#[test]
fn connect_by_name() {
    let echo = tcp_echo();
    let srv = server(None, limits());
    let mut s = connect(srv.local_addr());
    write!(s, "CONNECT localhost:{} HTTP/1.1\r\n\r\n", echo.port()).unwrap();
    assert!(read_head(&mut s).starts_with("HTTP/1.1 200 "));
    assert_echo(&mut s, b"by name");
}

#[test]
fn bytes_after_the_connect_head_are_relayed() {
    let echo = tcp_echo();
    let srv = server(None, limits());
    let mut s = connect(srv.local_addr());
    write!(s, "CONNECT {echo} HTTP/1.1\r\n\r\nearly bytes").unwrap();
    read_head(&mut s);
    let mut back = [0u8; 11];
    s.read_exact(&mut back).unwrap();
    assert_eq!(&back, b"early bytes");
}

#[test]
fn a_plain_request_goes_to_the_origin_in_origin_form() {
    let (origin, heads) = http_origin();
    let srv = server(None, limits());
    let response = exchange(
        &srv,
        &format!(
            "GET http://{origin}/some/path?q=1 HTTP/1.1\r\nHost: {origin}\r\n\
             Proxy-Connection: keep-alive\r\nUser-Agent: test\r\n\r\n"
        ),
    );
    assert_eq!(status_line(&response), "HTTP/1.1 200 OK");
    assert!(response.ends_with("hello from origin\n"), "{response}");
    let head = heads.recv_timeout(WAIT).unwrap();
    assert!(
        head.starts_with("GET /some/path?q=1 HTTP/1.1\r\n"),
        "{head}"
    );
    assert!(head.contains(&format!("\r\nHost: {origin}\r\n")), "{head}");
    assert!(head.contains("\r\nUser-Agent: test\r\n"), "{head}");
    assert!(head.contains("\r\nConnection: close\r\n"), "{head}");
    assert!(!head.to_ascii_lowercase().contains("proxy-"), "{head}");
}

#[test]
fn a_request_body_follows_the_head() {
    let (origin, _heads) = http_origin();
    let srv = server(None, limits());
    let body = "x".repeat(100_000);
    let response = exchange(
        &srv,
        &format!(
            "POST http://{origin}/upload HTTP/1.1\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        ),
    );
    assert_eq!(status_line(&response), "HTTP/1.1 200 OK");
    assert!(response.ends_with(&format!("hello from origin\n{body}")));
}

#[test]
fn credentials_are_required_when_configured() {
    let (origin, heads) = http_origin();
    let creds = Credentials {
        username: "bob".into(),
        password: "pw".into(),
    };
    let srv = server(Some(creds), limits());
    let request = |extra: &str| format!("GET http://{origin}/ HTTP/1.1\r\n{extra}\r\n");

    let response = exchange(&srv, &request(""));
    assert_eq!(
        status_line(&response),
        "HTTP/1.1 407 Proxy Authentication Required"
    );
    assert!(response.contains("\r\nProxy-Authenticate: Basic realm=\"vpn\"\r\n"));

    // "bob:wrong"
    let response = exchange(
        &srv,
        &request("Proxy-Authorization: Basic Ym9iOndyb25n\r\n"),
    );
    assert!(status_line(&response).starts_with("HTTP/1.1 407 "));

    // "bob:pw"
    let response = exchange(&srv, &request("Proxy-Authorization: Basic Ym9iOnB3\r\n"));
    assert_eq!(status_line(&response), "HTTP/1.1 200 OK");
    let head = heads.recv_timeout(WAIT).unwrap();
    assert!(!head.contains("Proxy-Authorization"), "{head}");
}

#[test]
fn garbage_is_400() {
    let srv = server(None, limits());
    for garbage in [
        "garbage\r\n\r\n",
        "\x16\x03\x01\x02\x00",
        "GET http://h/ HTTP/1.1\r\nBad Header\r\n\r\n",
        "GET /origin/form HTTP/1.1\r\n\r\n",
        "GET https://example.com/ HTTP/1.1\r\n\r\n",
        "CONNECT example.com HTTP/1.1\r\n\r\n",
    ] {
        let response = exchange(&srv, garbage);
        assert_eq!(
            status_line(&response),
            "HTTP/1.1 400 Bad Request",
            "{garbage:?}"
        );
    }
}

#[test]
fn an_oversized_head_is_431() {
    let srv = server(None, limits());
    let mut s = connect(srv.local_addr());
    let mut big = String::from("GET http://h/ HTTP/1.1\r\n");
    while big.len() < 70_000 {
        big.push_str("X-Filler: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n");
    }
    // The proxy may answer before reading everything; a failed write is fine.
    let _ = s.write_all(big.as_bytes());
    let response = String::from_utf8_lossy(&read_to_end(&mut s)).into_owned();
    assert!(response.starts_with("HTTP/1.1 431 "), "{response}");
}

#[test]
fn unreachable_targets_are_502_and_timeouts_504() {
    let srv = server(None, limits());
    let port = refused_port();
    let response = exchange(&srv, &format!("CONNECT 127.0.0.1:{port} HTTP/1.1\r\n\r\n"));
    assert_eq!(status_line(&response), "HTTP/1.1 502 Bad Gateway");
    let response = exchange(
        &srv,
        &format!("GET http://127.0.0.1:{port}/ HTTP/1.1\r\n\r\n"),
    );
    assert_eq!(status_line(&response), "HTTP/1.1 502 Bad Gateway");
    let response = exchange(&srv, "GET http://no-such-host.invalid/ HTTP/1.1\r\n\r\n");
    assert_eq!(status_line(&response), "HTTP/1.1 502 Bad Gateway");

    let silent = Arc::new(FailingConnects(io::ErrorKind::TimedOut));
    let srv = serve_http(&HostNetwork, loopback(), silent, None, limits()).unwrap();
    let response = exchange(&srv, "CONNECT 10.9.8.7:443 HTTP/1.1\r\n\r\n");
    assert_eq!(status_line(&response), "HTTP/1.1 504 Gateway Timeout");
}

#[test]
fn a_silent_client_gets_408() {
    let srv = server(
        None,
        Limits {
            handshake_timeout: Duration::from_millis(300),
            ..limits()
        },
    );
    let response = exchange(&srv, "GET http://h/ HTTP/1.1\r\n");
    assert_eq!(status_line(&response), "HTTP/1.1 408 Request Timeout");
}

#[test]
fn the_connection_cap_answers_503() {
    let echo = tcp_echo();
    let srv = server(
        None,
        Limits {
            max_connections: 1,
            ..limits()
        },
    );
    let mut first = connect(srv.local_addr());
    write!(first, "CONNECT {echo} HTTP/1.1\r\n\r\n").unwrap();
    read_head(&mut first);
    let mut second = connect(srv.local_addr());
    let response = String::from_utf8_lossy(&read_to_end(&mut second)).into_owned();
    assert_eq!(status_line(&response), "HTTP/1.1 503 Service Unavailable");
    assert_echo(&mut first, b"unaffected");
}
