//! The SOCKS5 server end to end, with the host as both sides.

mod common;

use common::*;
use std::io::{self, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream, UdpSocket};
use std::sync::Arc;
use std::time::{Duration, Instant};
use vpn_proxy::{serve_socks5, Credentials, HostNetwork, Limits, Server};

fn server(auth: Option<Credentials>, limits: Limits) -> Server {
    serve_socks5(&HostNetwork, loopback(), host(), auth, limits).unwrap()
}

fn creds() -> Credentials {
    Credentials {
        username: "alice".into(),
        password: "s3cret".into(),
    }
}

/// The greeting offering `methods`; returns the method the server chose.
fn greet(s: &mut TcpStream, methods: &[u8]) -> u8 {
    let mut msg = vec![5, methods.len() as u8];
    msg.extend_from_slice(methods);
    s.write_all(&msg).unwrap();
    let mut reply = [0u8; 2];
    s.read_exact(&mut reply).unwrap();
    assert_eq!(reply[0], 5);
    reply[1]
}

fn login(s: &mut TcpStream, user: &str, pass: &str) -> u8 {
    let mut msg = vec![1, user.len() as u8];
    msg.extend_from_slice(user.as_bytes());
    msg.push(pass.len() as u8);
    msg.extend_from_slice(pass.as_bytes());
    s.write_all(&msg).unwrap();
    let mut reply = [0u8; 2];
    s.read_exact(&mut reply).unwrap();
    assert_eq!(reply[0], 1);
    reply[1]
}

fn ip_request(cmd: u8, to: SocketAddr) -> Vec<u8> {
    let SocketAddr::V4(v4) = to else {
        panic!("IPv4 only here")
    };
    let mut msg = vec![5, cmd, 0, 1];
    msg.extend_from_slice(&v4.ip().octets());
    msg.extend_from_slice(&v4.port().to_be_bytes());
    msg
}

fn name_request(cmd: u8, host: &str, port: u16) -> Vec<u8> {
    let mut msg = vec![5, cmd, 0, 3, host.len() as u8];
    msg.extend_from_slice(host.as_bytes());
    msg.extend_from_slice(&port.to_be_bytes());
    msg
}

/// Sends a request; returns REP and BND.
fn request(s: &mut TcpStream, msg: &[u8]) -> (u8, SocketAddr) {
    s.write_all(msg).unwrap();
    let mut head = [0u8; 4];
    s.read_exact(&mut head).unwrap();
    assert_eq!(head[0], 5);
    assert_eq!(head[3], 1, "BND is IPv4 here");
    let mut rest = [0u8; 6];
    s.read_exact(&mut rest).unwrap();
    let ip = Ipv4Addr::new(rest[0], rest[1], rest[2], rest[3]);
    let port = u16::from_be_bytes([rest[4], rest[5]]);
    (head[1], SocketAddr::new(ip.into(), port))
}

#[test]
fn connect_by_ip_without_auth() {
    let echo = tcp_echo();
    let srv = server(None, limits());
    let mut s = connect(srv.local_addr());
    assert_eq!(greet(&mut s, &[0]), 0);
    let (rep, bound) = request(&mut s, &ip_request(1, echo));
    assert_eq!(rep, 0);
    assert_eq!(
        bound.ip(),
        echo.ip(),
        "BND is the proxy's end towards the target"
    );
    assert_echo(&mut s, b"hello through socks");
    assert_echo(&mut s, &vec![7u8; 300_000]);
    // A half-close is passed on: the echo server sees EOF and closes, so do we.
    s.shutdown(std::net::Shutdown::Write).unwrap();
    assert_eq!(read_to_end(&mut s), b"");
    eventually("the relay to end", || srv.connections() == 0);
}

#[test]
fn connect_by_name_resolves_through_the_tunnel() {
    let echo = tcp_echo();
    let srv = server(None, limits());
    let mut s = connect(srv.local_addr());
    assert_eq!(greet(&mut s, &[0]), 0);
    let (rep, _) = request(&mut s, &name_request(1, "localhost", echo.port()));
    assert_eq!(rep, 0);
    assert_echo(&mut s, b"by name");
}

#[test]
fn data_sent_with_the_request_is_not_lost() {
    let echo = tcp_echo();
    let srv = server(None, limits());
    let mut s = connect(srv.local_addr());
    // Greeting, request and data in one write, before any reply.
    let mut all = vec![5, 1, 0];
    all.extend_from_slice(&ip_request(1, echo));
    all.extend_from_slice(b"early");
    s.write_all(&all).unwrap();
    let mut replies = [0u8; 2 + 10 + 5];
    s.read_exact(&mut replies).unwrap();
    assert_eq!(&replies[..2], &[5, 0]);
    assert_eq!(replies[3], 0);
    assert_eq!(&replies[12..], b"early");
}

#[test]
fn username_and_password() {
    let echo = tcp_echo();
    let srv = server(Some(creds()), limits());

    let mut s = connect(srv.local_addr());
    assert_eq!(greet(&mut s, &[0, 2]), 2);
    assert_eq!(login(&mut s, "alice", "s3cret"), 0);
    let (rep, _) = request(&mut s, &ip_request(1, echo));
    assert_eq!(rep, 0);
    assert_echo(&mut s, b"logged in");

    let mut bad = connect(srv.local_addr());
    assert_eq!(greet(&mut bad, &[2]), 2);
    assert_eq!(login(&mut bad, "alice", "wrong"), 1);
    assert!(is_closed(&mut bad));

    // A client that cannot authenticate is told no method is acceptable.
    let mut none = connect(srv.local_addr());
    assert_eq!(greet(&mut none, &[0]), 0xFF);
    assert!(is_closed(&mut none));
}

#[test]
fn without_credentials_configured_user_pass_alone_is_refused() {
    let srv = server(None, limits());
    let mut s = connect(srv.local_addr());
    assert_eq!(greet(&mut s, &[2]), 0xFF);
    assert!(is_closed(&mut s));
}

#[test]
fn bind_is_not_supported() {
    let srv = server(None, limits());
    let mut s = connect(srv.local_addr());
    assert_eq!(greet(&mut s, &[0]), 0);
    let (rep, _) = request(&mut s, &ip_request(2, "127.0.0.1:80".parse().unwrap()));
    assert_eq!(rep, 0x07);
    assert!(is_closed(&mut s));
}

#[test]
fn unknown_command_and_address_type() {
    let srv = server(None, limits());
    let mut s = connect(srv.local_addr());
    assert_eq!(greet(&mut s, &[0]), 0);
    let (rep, _) = request(&mut s, &[5, 9, 0, 1, 127, 0, 0, 1, 0, 80]);
    assert_eq!(rep, 0x07);

    let mut s = connect(srv.local_addr());
    assert_eq!(greet(&mut s, &[0]), 0);
    let (rep, _) = request(&mut s, &[5, 1, 0, 0x09]);
    assert_eq!(rep, 0x08);
    assert!(is_closed(&mut s));
}

#[test]
fn connect_failures_map_to_reply_codes() {
    let srv = server(None, limits());
    let mut s = connect(srv.local_addr());
    assert_eq!(greet(&mut s, &[0]), 0);
    let refused = SocketAddr::new(Ipv4Addr::LOCALHOST.into(), refused_port());
    let (rep, _) = request(&mut s, &ip_request(1, refused));
    assert_eq!(rep, 0x05);

    let mut s = connect(srv.local_addr());
    assert_eq!(greet(&mut s, &[0]), 0);
    let (rep, _) = request(&mut s, &name_request(1, "no-such-host.invalid", 80));
    assert_eq!(rep, 0x04);

    for (kind, code) in [
        (io::ErrorKind::TimedOut, 0x06),
        (io::ErrorKind::HostUnreachable, 0x04),
        (io::ErrorKind::PermissionDenied, 0x01),
    ] {
        let tunnel = Arc::new(FailingConnects(kind));
        let srv = serve_socks5(&HostNetwork, loopback(), tunnel, None, limits()).unwrap();
        let mut s = connect(srv.local_addr());
        assert_eq!(greet(&mut s, &[0]), 0);
        let (rep, _) = request(&mut s, &ip_request(1, "10.9.8.7:80".parse().unwrap()));
        assert_eq!(rep, code, "{kind:?}");
    }
}

#[test]
fn garbage_closes_the_connection_and_the_server_goes_on() {
    let echo = tcp_echo();
    let srv = server(None, limits());
    let mut s = connect(srv.local_addr());
    s.write_all(b"GET / HTTP/1.1\r\n\r\n").unwrap();
    assert!(is_closed(&mut s));
    for prefix in [&[5u8][..], &[5, 1], &[5, 1, 0, 5, 1, 0, 3, 200]] {
        let mut s = connect(srv.local_addr());
        s.write_all(prefix).unwrap();
        s.shutdown(std::net::Shutdown::Write).unwrap();
        let _ = read_to_end(&mut s);
    }
    let mut s = connect(srv.local_addr());
    assert_eq!(greet(&mut s, &[0]), 0);
    assert_eq!(request(&mut s, &ip_request(1, echo)).0, 0);
    assert_echo(&mut s, b"still serving");
}

#[test]
fn a_panic_in_one_connection_leaves_the_server_serving() {
    let srv = serve_socks5(
        &HostNetwork,
        loopback(),
        Arc::new(PanickingConnects),
        None,
        limits(),
    )
    .unwrap();
    for _ in 0..3 {
        let mut s = connect(srv.local_addr());
        assert_eq!(greet(&mut s, &[0]), 0);
        s.write_all(&ip_request(1, "10.9.8.7:80".parse().unwrap()))
            .unwrap();
        assert!(is_closed(&mut s));
    }
    eventually("the slots to be given back", || srv.connections() == 0);
}

#[test]
fn a_silent_client_is_closed_after_the_handshake_timeout() {
    let srv = server(
        None,
        Limits {
            handshake_timeout: Duration::from_millis(300),
            ..limits()
        },
    );
    let mut s = connect(srv.local_addr());
    let t = Instant::now();
    s.write_all(&[5]).unwrap();
    assert!(is_closed(&mut s));
    assert!(t.elapsed() < Duration::from_secs(3), "{:?}", t.elapsed());
}

#[test]
fn the_connection_cap_refuses_the_one_over() {
    let echo = tcp_echo();
    let srv = server(
        None,
        Limits {
            max_connections: 1,
            ..limits()
        },
    );
    let mut first = connect(srv.local_addr());
    assert_eq!(greet(&mut first, &[0]), 0);
    assert_eq!(request(&mut first, &ip_request(1, echo)).0, 0);
    assert_eq!(srv.connections(), 1);

    let mut second = connect(srv.local_addr());
    let got = read_to_end(&mut second);
    assert_eq!(got, vec![5, 1, 0, 1, 0, 0, 0, 0, 0, 0], "a general failure");

    assert_echo(&mut first, b"the first one still works");
    drop(first);
    eventually("the first connection to end", || srv.connections() == 0);
    let mut third = connect(srv.local_addr());
    assert_eq!(greet(&mut third, &[0]), 0);
}

#[test]
fn stop_closes_the_listener() {
    let srv = server(None, limits());
    let addr = srv.local_addr();
    let t = Instant::now();
    srv.stop();
    assert!(t.elapsed() < Duration::from_secs(1));
    assert!(TcpStream::connect_timeout(&addr, WAIT).is_err());
}

/// UDP ASSOCIATE: returns the control connection and the relay's address.
fn associate(srv: &Server) -> (TcpStream, SocketAddr) {
    let mut control = connect(srv.local_addr());
    assert_eq!(greet(&mut control, &[0]), 0);
    let (rep, relay) = request(&mut control, &ip_request(3, "0.0.0.0:0".parse().unwrap()));
    assert_eq!(rep, 0);
    assert_eq!(
        relay.ip(),
        Ipv4Addr::LOCALHOST,
        "bound on the control connection's IP"
    );
    (control, relay)
}

fn udp_header(to: SocketAddr) -> Vec<u8> {
    let SocketAddr::V4(v4) = to else { panic!() };
    let mut h = vec![0, 0, 0, 1];
    h.extend_from_slice(&v4.ip().octets());
    h.extend_from_slice(&v4.port().to_be_bytes());
    h
}

#[test]
fn udp_associate_relays_datagrams() {
    let echo = udp_echo();
    let srv = server(None, limits());
    let (control, relay) = associate(&srv);
    let client = UdpSocket::bind(loopback()).unwrap();
    client.set_read_timeout(Some(WAIT)).unwrap();

    let mut msg = udp_header(echo);
    msg.extend_from_slice(b"ping");
    client.send_to(&msg, relay).unwrap();
    let mut buf = [0u8; 2048];
    let (n, from) = client.recv_from(&mut buf).unwrap();
    assert_eq!(from, relay);
    assert_eq!(&buf[..n], [udp_header(echo), b"ping".to_vec()].concat());

    // A name (here an IP literal sent as ATYP 3) is resolved through the tunnel.
    let mut named = vec![0, 0, 0, 3, 9];
    named.extend_from_slice(b"127.0.0.1");
    named.extend_from_slice(&echo.port().to_be_bytes());
    named.extend_from_slice(b"by name");
    client.send_to(&named, relay).unwrap();
    let (n, _) = client.recv_from(&mut buf).unwrap();
    assert_eq!(&buf[..n], [udp_header(echo), b"by name".to_vec()].concat());

    // A fragment is dropped; the next datagram still goes through.
    let mut frag = udp_header(echo);
    frag[2] = 1;
    frag.extend_from_slice(b"fragment");
    client.send_to(&frag, relay).unwrap();
    let mut msg = udp_header(echo);
    msg.extend_from_slice(b"after");
    client.send_to(&msg, relay).unwrap();
    let (n, _) = client.recv_from(&mut buf).unwrap();
    assert_eq!(&buf[n - 5..n], b"after");

    // Closing the control connection ends the association.
    assert_eq!(srv.connections(), 1);
    drop(control);
    eventually("the association to end", || srv.connections() == 0);
    let mut msg = udp_header(echo);
    msg.extend_from_slice(b"too late");
    let _ = client.send_to(&msg, relay);
    client
        .set_read_timeout(Some(Duration::from_millis(300)))
        .unwrap();
    assert!(client.recv_from(&mut buf).is_err());
}

#[test]
fn udp_associate_takes_only_the_first_client() {
    let echo = udp_echo();
    let srv = server(None, limits());
    let (_control, relay) = associate(&srv);
    let client = UdpSocket::bind(loopback()).unwrap();
    let other = UdpSocket::bind(loopback()).unwrap();
    for s in [&client, &other] {
        s.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    }
    let mut msg = udp_header(echo);
    msg.extend_from_slice(b"mine");
    client.send_to(&msg, relay).unwrap();
    let mut buf = [0u8; 2048];
    client.recv_from(&mut buf).unwrap();
    other.send_to(&msg, relay).unwrap();
    other
        .set_read_timeout(Some(Duration::from_millis(300)))
        .unwrap();
    assert!(
        other.recv_from(&mut buf).is_err(),
        "a second sender is ignored"
    );
}

#[test]
fn an_idle_association_ends() {
    let srv = server(
        None,
        Limits {
            udp_idle: Duration::from_millis(300),
            ..limits()
        },
    );
    let (mut control, _relay) = associate(&srv);
    eventually("the idle association to end", || srv.connections() == 0);
    assert!(is_closed(&mut control));
}
