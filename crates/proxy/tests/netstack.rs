//! The servers with the userspace stack as the tunnel: two stacks wired back to back, the
//! proxy on one (100.64.0.1) and the targets on the other (100.64.0.2), stand in for a
//! tunnel and the network behind it.

mod common;

use common::*;
use std::io::{Read, Write};
use std::net::{SocketAddr, UdpSocket};
use std::sync::Arc;
use std::thread;
use vpn_netstack::{create_net_tun, Net, NetTun};
use vpn_proxy::{serve_forward, serve_http, serve_socks5, Forward, HostNetwork, Network};
use vpn_tun::Device;

/// Two stacks whose TUNs feed each other; closed (their pumps ending) on drop.
struct Wire {
    near: Net,
    far: Net,
    tuns: [Arc<NetTun>; 2],
}

impl Drop for Wire {
    fn drop(&mut self) {
        for t in &self.tuns {
            let _ = t.close();
        }
    }
}

fn wire() -> Wire {
    let (tun_a, near) = create_net_tun(&["100.64.0.1".parse().unwrap()], &[], 1420).unwrap();
    let (tun_b, far) = create_net_tun(&["100.64.0.2".parse().unwrap()], &[], 1420).unwrap();
    let (a, b) = (Arc::new(tun_a), Arc::new(tun_b));
    pump(a.clone(), b.clone());
    pump(b.clone(), a.clone());
    Wire {
        near,
        far,
        tuns: [a, b],
    }
}

/// Moves every packet `from` sends into `to`, until either is closed.
fn pump(from: Arc<NetTun>, to: Arc<NetTun>) {
    thread::spawn(move || {
        let batch = from.batch_size();
        let mut storage = vec![vec![0u8; 4096]; batch];
        let mut sizes = vec![0usize; batch];
        loop {
            let mut bufs: Vec<&mut [u8]> = storage.iter_mut().map(|b| b.as_mut_slice()).collect();
            let n = match from.read(&mut bufs, &mut sizes, 0) {
                Ok(n) => n,
                Err(_) => return,
            };
            if to.write(&mut bufs[..n], &sizes[..n], 0).is_err() {
                return;
            }
        }
    });
}

/// A TCP echo server on the far stack.
fn far_tcp_echo(far: &Net) -> SocketAddr {
    let l = far.listen_tcp("100.64.0.2:0".parse().unwrap()).unwrap();
    let addr = l.local_addr().unwrap();
    thread::spawn(move || {
        while let Ok((s, _)) = l.accept() {
            thread::spawn(move || {
                let mut buf = [0u8; 16384];
                let mut r = &s;
                loop {
                    match r.read(&mut buf) {
                        Ok(0) | Err(_) => break,
                        Ok(n) => {
                            if (&s).write_all(&buf[..n]).is_err() {
                                break;
                            }
                        }
                    }
                }
                let _ = s.shutdown(std::net::Shutdown::Write);
            });
        }
    });
    addr
}

/// A UDP echo server on the far stack.
fn far_udp_echo(far: &Net) -> SocketAddr {
    let s = far.bind_udp("100.64.0.2:0".parse().unwrap()).unwrap();
    let addr = s.local_addr().unwrap();
    thread::spawn(move || {
        let mut buf = [0u8; 65536];
        while let Ok((n, from)) = s.recv_from(&mut buf) {
            let _ = s.send_to(&buf[..n], from);
        }
    });
    addr
}

fn tunnel(net: &Net) -> Arc<dyn Network> {
    Arc::new(net.clone())
}

#[test]
fn socks5_connect_through_the_stack() {
    let w = wire();
    let echo = far_tcp_echo(&w.far);
    let srv = serve_socks5(&HostNetwork, loopback(), tunnel(&w.near), None, limits()).unwrap();
    let mut s = connect(srv.local_addr());
    let mut msg = vec![5, 1, 0, 5, 1, 0, 1, 100, 64, 0, 2];
    msg.extend_from_slice(&echo.port().to_be_bytes());
    s.write_all(&msg).unwrap();
    let mut reply = [0u8; 12];
    s.read_exact(&mut reply).unwrap();
    assert_eq!(&reply[..4], &[5, 0, 5, 0]);
    assert_eq!(
        &reply[6..10],
        &[100, 64, 0, 1],
        "BND is the stack's own address"
    );
    assert_echo(&mut s, b"through the stack");
    assert_echo(&mut s, &vec![3u8; 1 << 20]);
    s.shutdown(std::net::Shutdown::Write).unwrap();
    assert_eq!(read_to_end(&mut s), b"");
}

#[test]
fn http_connect_through_the_stack() {
    let w = wire();
    let echo = far_tcp_echo(&w.far);
    let srv = serve_http(&HostNetwork, loopback(), tunnel(&w.near), None, limits()).unwrap();
    let mut s = connect(srv.local_addr());
    write!(s, "CONNECT {echo} HTTP/1.1\r\n\r\n").unwrap();
    let mut head = [0u8; 39];
    s.read_exact(&mut head).unwrap();
    assert_eq!(&head[..], b"HTTP/1.1 200 Connection established\r\n\r\n");
    assert_echo(&mut s, b"tls would go here");
}

#[test]
fn socks5_udp_through_the_stack() {
    let w = wire();
    let echo = far_udp_echo(&w.far);
    let srv = serve_socks5(&HostNetwork, loopback(), tunnel(&w.near), None, limits()).unwrap();
    let mut control = connect(srv.local_addr());
    control
        .write_all(&[5, 1, 0, 5, 3, 0, 1, 0, 0, 0, 0, 0, 0])
        .unwrap();
    let mut reply = [0u8; 12];
    control.read_exact(&mut reply).unwrap();
    assert_eq!(&reply[..4], &[5, 0, 5, 0]);
    let relay = SocketAddr::new(
        [reply[6], reply[7], reply[8], reply[9]].into(),
        u16::from_be_bytes([reply[10], reply[11]]),
    );
    let client = UdpSocket::bind(loopback()).unwrap();
    client.set_read_timeout(Some(WAIT)).unwrap();
    let mut header = vec![0, 0, 0, 1, 100, 64, 0, 2];
    header.extend_from_slice(&echo.port().to_be_bytes());
    client
        .send_to(&[header.clone(), b"dgram".to_vec()].concat(), relay)
        .unwrap();
    let mut buf = [0u8; 2048];
    let (n, _) = client.recv_from(&mut buf).unwrap();
    assert_eq!(&buf[..n], [header, b"dgram".to_vec()].concat());
}

#[test]
fn local_forwards_through_the_stack() {
    let w = wire();
    let tcp = far_tcp_echo(&w.far);
    let udp = far_udp_echo(&w.far);
    let host: Arc<dyn Network> = Arc::new(HostNetwork);
    let fwd = Forward::parse_local(&format!("0:{tcp}")).unwrap();
    let srv = serve_forward(&fwd, tunnel(&w.near), host.clone(), limits()).unwrap();
    let mut s = connect(srv.local_addr());
    assert_echo(&mut s, b"-L tcp");

    let fwd = Forward::parse_local(&format!("0:{udp}/udp")).unwrap();
    let srv = serve_forward(&fwd, tunnel(&w.near), host, limits()).unwrap();
    let c = UdpSocket::bind(loopback()).unwrap();
    c.set_read_timeout(Some(WAIT)).unwrap();
    c.send_to(b"-L udp", srv.local_addr()).unwrap();
    let mut buf = [0u8; 64];
    let (n, _) = c.recv_from(&mut buf).unwrap();
    assert_eq!(&buf[..n], b"-L udp");
}

#[test]
fn remote_forwards_listen_on_the_stack() {
    let w = wire();
    let host: Arc<dyn Network> = Arc::new(HostNetwork);
    let tcp = tcp_echo();
    let fwd = Forward::parse_remote(&format!("0:{tcp}")).unwrap();
    let srv = serve_forward(&fwd, tunnel(&w.far), host.clone(), limits()).unwrap();
    let at = SocketAddr::new("100.64.0.2".parse().unwrap(), srv.local_addr().port());
    let s = w.near.dial_tcp(at).unwrap();
    s.set_read_timeout(Some(WAIT)).unwrap();
    (&s).write_all(b"-R tcp").unwrap();
    let mut back = [0u8; 6];
    (&s).read_exact(&mut back).unwrap();
    assert_eq!(&back, b"-R tcp");

    let udp = udp_echo();
    let fwd = Forward::parse_remote(&format!("0:{udp}/udp")).unwrap();
    let srv = serve_forward(&fwd, tunnel(&w.far), host, limits()).unwrap();
    let at = SocketAddr::new("100.64.0.2".parse().unwrap(), srv.local_addr().port());
    let c = w.near.bind_udp("0.0.0.0:0".parse().unwrap()).unwrap();
    c.set_read_timeout(Some(WAIT)).unwrap();
    c.send_to(b"-R udp", at).unwrap();
    let mut buf = [0u8; 64];
    let (n, from) = c.recv_from(&mut buf).unwrap();
    assert_eq!((&buf[..n], from), (&b"-R udp"[..], at));
}

#[test]
fn a_stopped_stack_ends_the_listener_thread() {
    let w = wire();
    let fwd = Forward::Remote {
        port: 0,
        target: tcp_echo().to_string(),
        udp: false,
    };
    let srv = serve_forward(&fwd, tunnel(&w.far), Arc::new(HostNetwork), limits()).unwrap();
    drop(w);
    // stop() returns promptly whether the listener thread already ended or not.
    let t = std::time::Instant::now();
    srv.stop();
    assert!(t.elapsed() < std::time::Duration::from_secs(1));
}
