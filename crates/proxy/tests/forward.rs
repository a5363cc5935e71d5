//! -L and -R forwards end to end, with the host as both the host and the "tunnel".

mod common;

use common::*;
use std::net::{SocketAddr, UdpSocket};
use std::time::Duration;
use vpn_proxy::{serve_forward, Forward, Limits, Server};

fn start(fwd: &Forward, limits: Limits) -> Server {
    serve_forward(fwd, host(), host(), limits).unwrap()
}

fn local(target: String, udp: bool) -> Forward {
    Forward::Local {
        bind: loopback(),
        target,
        udp,
    }
}

fn remote(target: String, udp: bool) -> Forward {
    Forward::Remote {
        port: 0,
        target,
        udp,
    }
}

/// The server's port on 127.0.0.1 (a -R forward listens on every address).
fn on_loopback(srv: &Server) -> SocketAddr {
    SocketAddr::new([127, 0, 0, 1].into(), srv.local_addr().port())
}

fn udp_client() -> UdpSocket {
    let c = UdpSocket::bind(loopback()).unwrap();
    c.set_read_timeout(Some(WAIT)).unwrap();
    c
}

fn assert_udp_echo(c: &UdpSocket, to: SocketAddr, data: &[u8]) {
    c.send_to(data, to).unwrap();
    let mut buf = [0u8; 2048];
    let (n, from) = c.recv_from(&mut buf).unwrap();
    assert_eq!(from, to, "the reply comes from the forward's socket");
    assert_eq!(&buf[..n], data);
}

#[test]
fn local_tcp_forward() {
    let echo = tcp_echo();
    let srv = start(&local(echo.to_string(), false), limits());
    let mut a = connect(srv.local_addr());
    let mut b = connect(srv.local_addr());
    assert_echo(&mut a, b"first");
    assert_echo(&mut b, b"second");
    assert_echo(&mut a, &vec![9u8; 500_000]);
    assert_eq!(srv.connections(), 2);
    drop((a, b));
    eventually("both relays to end", || srv.connections() == 0);
}

#[test]
fn local_tcp_forward_to_a_name() {
    let echo = tcp_echo();
    let srv = start(
        &local(format!("localhost:{}", echo.port()), false),
        limits(),
    );
    let mut s = connect(srv.local_addr());
    assert_echo(&mut s, b"resolved through the tunnel");
}

#[test]
fn a_forward_to_a_closed_port_closes_the_client() {
    let srv = start(
        &local(format!("127.0.0.1:{}", refused_port()), false),
        limits(),
    );
    let mut s = connect(srv.local_addr());
    assert!(is_closed(&mut s));
}

#[test]
fn local_udp_forward() {
    let echo = udp_echo();
    let srv = start(
        &local(echo.to_string(), true),
        Limits {
            udp_idle: Duration::from_millis(500),
            ..limits()
        },
    );
    let (a, b) = (udp_client(), udp_client());
    assert_udp_echo(&a, srv.local_addr(), b"from a");
    assert_udp_echo(&b, srv.local_addr(), b"from b");
    assert_udp_echo(&a, srv.local_addr(), b"a again");
    assert_eq!(srv.connections(), 2, "one flow per client address");
    eventually("idle flows to expire", || srv.connections() == 0);
    assert_udp_echo(&a, srv.local_addr(), b"a after expiry");
}

#[test]
fn udp_flows_are_capped() {
    let echo = udp_echo();
    let srv = start(
        &local(echo.to_string(), true),
        Limits {
            max_connections: 1,
            ..limits()
        },
    );
    let (a, b) = (udp_client(), udp_client());
    assert_udp_echo(&a, srv.local_addr(), b"a");
    b.send_to(b"b", srv.local_addr()).unwrap();
    b.set_read_timeout(Some(Duration::from_millis(300)))
        .unwrap();
    assert!(
        b.recv_from(&mut [0u8; 16]).is_err(),
        "over the cap: dropped"
    );
    assert_udp_echo(&a, srv.local_addr(), b"a still");
}

#[test]
fn remote_tcp_forward() {
    let echo = tcp_echo();
    let srv = start(&remote(echo.to_string(), false), limits());
    assert!(srv.local_addr().ip().is_unspecified());
    let mut s = connect(on_loopback(&srv));
    assert_echo(&mut s, b"from the tunnel side");
}

#[test]
fn remote_udp_forward() {
    let echo = udp_echo();
    let srv = start(&remote(echo.to_string(), true), limits());
    let c = udp_client();
    assert_udp_echo(&c, on_loopback(&srv), b"from the tunnel side");
}

#[test]
fn the_tcp_forward_cap_closes_the_one_over() {
    let echo = tcp_echo();
    let srv = start(
        &local(echo.to_string(), false),
        Limits {
            max_connections: 1,
            ..limits()
        },
    );
    let mut first = connect(srv.local_addr());
    assert_echo(&mut first, b"one");
    let mut second = connect(srv.local_addr());
    assert!(is_closed(&mut second));
    assert_echo(&mut first, b"still one");
}

#[test]
fn specs_parse_into_forwards_that_run() {
    let echo = tcp_echo();
    let fwd = Forward::parse_local(&format!("0:127.0.0.1:{}", echo.port())).unwrap();
    let srv = start(&fwd, limits());
    assert_eq!(srv.local_addr().ip(), std::net::Ipv4Addr::LOCALHOST);
    let mut s = connect(srv.local_addr());
    assert_echo(&mut s, b"parsed");
}

#[test]
fn a_bad_target_is_refused_at_start() {
    let e = serve_forward(&local("no-port".into(), false), host(), host(), limits()).unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::InvalidInput);
}

#[test]
fn stop_closes_a_udp_forward() {
    let echo = udp_echo();
    let srv = start(&local(echo.to_string(), true), limits());
    let addr = srv.local_addr();
    let c = udp_client();
    assert_udp_echo(&c, addr, b"x");
    srv.stop();
    // The port is free again.
    UdpSocket::bind(addr).unwrap();
}
