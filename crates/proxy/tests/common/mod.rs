//! Targets for the proxies to reach (std servers on 127.0.0.1) and small clients.
//!
//! Every test uses [`HostNetwork`] as both the listening network and the "tunnel", so the
//! servers run with no tunnel at all; a test [`Network`] that fails connects stands in for
//! an unreachable or silent target.
#![allow(dead_code)]

use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};
use vpn_proxy::{Datagram, HostNetwork, Limits, Listener, Network, Stream};

pub const WAIT: Duration = Duration::from_secs(10);

pub fn host() -> Arc<dyn Network> {
    Arc::new(HostNetwork)
}

pub fn loopback() -> SocketAddr {
    "127.0.0.1:0".parse().unwrap()
}

/// Limits that keep tests fast.
pub fn limits() -> Limits {
    Limits {
        max_connections: 64,
        handshake_timeout: Duration::from_secs(5),
        connect_timeout: Duration::from_secs(5),
        udp_idle: Duration::from_secs(5),
    }
}

/// A TCP echo server: echoes each connection until EOF, then closes its write side.
pub fn tcp_echo() -> SocketAddr {
    let l = TcpListener::bind(loopback()).unwrap();
    let addr = l.local_addr().unwrap();
    std::thread::spawn(move || {
        for s in l.incoming().flatten() {
            std::thread::spawn(move || {
                let mut r = s.try_clone().unwrap();
                let mut w = s;
                let _ = io::copy(&mut r, &mut w);
                let _ = w.shutdown(std::net::Shutdown::Write);
            });
        }
    });
    addr
}

/// A UDP echo server.
pub fn udp_echo() -> SocketAddr {
    let s = UdpSocket::bind(loopback()).unwrap();
    let addr = s.local_addr().unwrap();
    std::thread::spawn(move || {
        let mut buf = [0u8; 65536];
        while let Ok((n, from)) = s.recv_from(&mut buf) {
            let _ = s.send_to(&buf[..n], from);
        }
    });
    addr
}

/// A tiny HTTP server: answers each connection's one request with `hello from origin` and
/// the request's body (by its `Content-Length`), and closes; the heads it got come out of
/// the receiver.
pub fn http_origin() -> (SocketAddr, mpsc::Receiver<String>) {
    let l = TcpListener::bind(loopback()).unwrap();
    let addr = l.local_addr().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for s in l.incoming().flatten() {
            let tx = tx.clone();
            std::thread::spawn(move || {
                let mut r = BufReader::new(s.try_clone().unwrap());
                let mut head = String::new();
                loop {
                    let mut line = String::new();
                    if r.read_line(&mut line).unwrap_or(0) == 0 {
                        return;
                    }
                    head.push_str(&line);
                    if line == "\r\n" || line == "\n" {
                        break;
                    }
                }
                let length = head
                    .lines()
                    .find_map(|l| l.strip_prefix("Content-Length: "))
                    .and_then(|n| n.trim().parse::<usize>().ok())
                    .unwrap_or(0);
                let _ = tx.send(head);
                let mut body = b"hello from origin\n".to_vec();
                let mut upload = vec![0u8; length];
                if r.read_exact(&mut upload).is_err() {
                    return;
                }
                body.extend_from_slice(&upload);
                let mut w = s;
                let _ = write!(
                    w,
                    "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                    body.len()
                );
                let _ = w.write_all(&body);
            });
        }
    });
    (addr, rx)
}

/// A port nothing listens on.
pub fn refused_port() -> u16 {
    TcpListener::bind(loopback())
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

pub fn connect(addr: SocketAddr) -> TcpStream {
    let s = TcpStream::connect_timeout(&addr, WAIT).unwrap();
    s.set_read_timeout(Some(WAIT)).unwrap();
    s
}

/// Reads until EOF (or a reset, which also ends the connection).
pub fn read_to_end(s: &mut TcpStream) -> Vec<u8> {
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match s.read(&mut buf) {
            Ok(0) => return out,
            Ok(n) => out.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == io::ErrorKind::ConnectionReset => return out,
            Err(e) => panic!("read: {e}"),
        }
    }
}

/// Whether the peer closed the connection (EOF or reset) without sending anything more.
pub fn is_closed(s: &mut TcpStream) -> bool {
    let mut b = [0u8; 1];
    match s.read(&mut b) {
        Ok(0) => true,
        Ok(_) => false,
        Err(e) => e.kind() == io::ErrorKind::ConnectionReset,
    }
}

/// Sends `data` and reads the echo back.
pub fn assert_echo(s: &mut TcpStream, data: &[u8]) {
    s.write_all(data).unwrap();
    let mut back = vec![0u8; data.len()];
    s.read_exact(&mut back).unwrap();
    assert_eq!(back, data);
}

/// Waits until `f` holds (panics after [`WAIT`]).
pub fn eventually(what: &str, f: impl Fn() -> bool) {
    let deadline = Instant::now() + WAIT;
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A network whose connects fail with one error kind (a silent or unreachable target);
/// everything else is the host's.
pub struct FailingConnects(pub io::ErrorKind);

impl Network for FailingConnects {
    fn connect(&self, addr: SocketAddr, _: Duration) -> io::Result<Box<dyn Stream>> {
        Err(io::Error::new(self.0, format!("cannot reach {addr}")))
    }
    fn lookup(&self, host: &str) -> io::Result<Vec<IpAddr>> {
        HostNetwork.lookup(host)
    }
    fn listen(&self, addr: SocketAddr) -> io::Result<Box<dyn Listener>> {
        HostNetwork.listen(addr)
    }
    fn bind_udp(&self, addr: SocketAddr) -> io::Result<Box<dyn Datagram>> {
        HostNetwork.bind_udp(addr)
    }
}

/// A network whose connects panic: a bug in one connection's code.
pub struct PanickingConnects;

impl Network for PanickingConnects {
    fn connect(&self, _: SocketAddr, _: Duration) -> io::Result<Box<dyn Stream>> {
        panic!("a bug in one connection (this panic is expected by the test)");
    }
    fn lookup(&self, host: &str) -> io::Result<Vec<IpAddr>> {
        HostNetwork.lookup(host)
    }
    fn listen(&self, addr: SocketAddr) -> io::Result<Box<dyn Listener>> {
        HostNetwork.listen(addr)
    }
    fn bind_udp(&self, addr: SocketAddr) -> io::Result<Box<dyn Datagram>> {
        HostNetwork.bind_udp(addr)
    }
}
