//! SOCKS5 UDP ASSOCIATE: a UDP relay between the client and the tunnel for as long as the
//! TCP control connection stays open (and datagrams keep coming, within `udp_idle`).
//!
//! The client-facing socket is bound on the control connection's local IP (port 0) and its
//! address is the reply's BND. Only datagrams from the control connection's peer IP are
//! taken (and from the port the request named, if it named one); the first such sender is
//! the client from then on. Each datagram's SOCKS header says where its data goes; a name is
//! resolved through the tunnel. Everything goes out of one tunnel socket, and what comes back
//! to it goes to the client behind a header naming the sender. Fragments are dropped.

use super::{is_timeout, POLL};
use crate::network::{bind_any_family, resolve, Datagram, Network, Stream};
use crate::socks5::{self as proto, Address, Request};
use crate::Limits;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The largest datagram relayed, header included.
const DATAGRAM: usize = 65536;
/// How long a resolved name is reused; names the client sends are looked up at most this often.
const NAME_TTL: Duration = Duration::from_secs(60);
/// The most names remembered per association.
const NAME_CACHE: usize = 256;

/// What the association's threads share.
struct Association {
    /// The control connection's peer IP: the only IP datagrams are taken from.
    client_ip: IpAddr,
    /// The port the request named, if any.
    client_port: Option<u16>,
    /// The client's UDP address, once its first datagram came.
    client: Mutex<Option<SocketAddr>>,
    /// The last datagram either way.
    last: Mutex<Instant>,
    done: AtomicBool,
}

impl Association {
    /// Whether a datagram from `from` is the client's (the first acceptable sender becomes
    /// the client).
    fn is_client(&self, from: SocketAddr) -> bool {
        let from = SocketAddr::new(from.ip().to_canonical(), from.port());
        let mut client = self.client.lock();
        match *client {
            Some(c) => c == from,
            None if from.ip() != self.client_ip => false,
            None if self.client_port.is_some_and(|p| p != from.port()) => false,
            None => {
                *client = Some(from);
                true
            }
        }
    }

    fn touch(&self) {
        *self.last.lock() = Instant::now();
    }

    fn idle_for(&self) -> Duration {
        self.last.lock().elapsed()
    }

    fn is_done(&self) -> bool {
        self.done.load(Ordering::Acquire)
    }
}

/// Sets up the association, replies, and relays until the control connection closes or the
/// association is idle for `limits.udp_idle`.
pub(crate) fn run(
    mut control: Box<dyn Stream>,
    request: &Request,
    listen: &dyn Network,
    tunnel: &Arc<dyn Network>,
    limits: &Limits,
) {
    let (client_socket, tunnel_socket, assoc) = match open(&*control, request, listen, &**tunnel) {
        Ok(opened) => opened,
        Err(e) => {
            tracing::debug!("socks5 UDP ASSOCIATE: {e}");
            let _ = control.write_all(&proto::failure_reply(proto::REP_GENERAL_FAILURE));
            return;
        }
    };
    let bound = match client_socket.local_addr() {
        Ok(a) => a,
        Err(_) => return,
    };
    if control
        .write_all(&proto::reply(proto::REP_SUCCEEDED, bound))
        .is_err()
    {
        return;
    }
    tracing::debug!(%bound, client = %assoc.client_ip, "socks5 UDP association");
    let up = {
        let (c, t, a, net) = (
            client_socket.clone(),
            tunnel_socket.clone(),
            assoc.clone(),
            tunnel.clone(),
        );
        std::thread::Builder::new()
            .name("socks5-udp-up".into())
            .spawn(move || client_to_tunnel(&*c, &*t, &a, &*net))
    };
    let down = {
        let (c, t, a) = (client_socket, tunnel_socket, assoc.clone());
        std::thread::Builder::new()
            .name("socks5-udp-down".into())
            .spawn(move || tunnel_to_client(&*c, &*t, &a))
    };
    if up.is_ok() && down.is_ok() {
        watch_control(&mut *control, &assoc, limits.udp_idle);
    } else {
        tracing::warn!("socks5 UDP ASSOCIATE: cannot start the relay threads");
    }
    assoc.done.store(true, Ordering::Release);
    for t in [up, down].into_iter().flatten() {
        let _ = t.join();
    }
    tracing::debug!(%bound, "socks5 UDP association ended");
}

type Opened = (Arc<dyn Datagram>, Arc<dyn Datagram>, Arc<Association>);

/// The two sockets: the client's on the control connection's local IP, and the tunnel's.
fn open(
    control: &dyn Stream,
    request: &Request,
    listen: &dyn Network,
    tunnel: &dyn Network,
) -> io::Result<Opened> {
    let local = control.local_addr()?.ip().to_canonical();
    let peer = control.peer_addr()?.ip().to_canonical();
    let client_socket = listen.bind_udp(SocketAddr::new(local, 0))?;
    let tunnel_socket = bind_any_family(tunnel)?;
    client_socket.set_read_timeout(Some(POLL))?;
    tunnel_socket.set_read_timeout(Some(POLL))?;
    let client_port = match request.destination.port() {
        0 => None,
        p => Some(p),
    };
    let assoc = Association {
        client_ip: peer,
        client_port,
        client: Mutex::new(None),
        last: Mutex::new(Instant::now()),
        done: AtomicBool::new(false),
    };
    Ok((
        Arc::from(client_socket),
        Arc::from(tunnel_socket),
        Arc::new(assoc),
    ))
}

/// Waits for the control connection to close (what the client sends on it is ignored), or
/// for the association to go idle.
fn watch_control(control: &mut dyn Stream, assoc: &Association, idle: Duration) {
    if control.set_read_timeout(Some(POLL)).is_err() {
        return;
    }
    let mut buf = [0u8; 512];
    while !assoc.is_done() {
        match control.read(&mut buf) {
            Ok(0) => return,
            Ok(_) => {}
            Err(e) if is_timeout(&e) => {
                if assoc.idle_for() >= idle {
                    tracing::debug!("socks5 UDP association idle for {idle:?}");
                    return;
                }
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => return,
        }
    }
}

/// The client's datagrams, unwrapped and sent through the tunnel.
fn client_to_tunnel(
    client_socket: &dyn Datagram,
    tunnel_socket: &dyn Datagram,
    assoc: &Association,
    tunnel: &dyn Network,
) {
    let mut buf = vec![0u8; DATAGRAM];
    let mut names = NameCache::default();
    while !assoc.is_done() {
        let (n, from) = match client_socket.recv_from(&mut buf) {
            Ok(r) => r,
            Err(e) if is_transient(&e) => continue,
            Err(e) => {
                tracing::debug!("socks5 UDP: client socket: {e}");
                assoc.done.store(true, Ordering::Release);
                return;
            }
        };
        if !assoc.is_client(from) {
            tracing::trace!(%from, "socks5 UDP: datagram from a stranger dropped");
            continue;
        }
        let (header, at) = match proto::parse_udp_header(&buf[..n]) {
            Ok(h) => h,
            Err(e) => {
                tracing::debug!(%from, "socks5 UDP: datagram dropped: {e}");
                continue;
            }
        };
        let to = match &header.address {
            Address::Ip(a) => *a,
            Address::Domain(host, port) => match names.resolve(tunnel, host) {
                Ok(ip) => SocketAddr::new(ip, *port),
                Err(e) => {
                    tracing::debug!("socks5 UDP: {e}");
                    continue;
                }
            },
        };
        assoc.touch();
        if let Err(e) = tunnel_socket.send_to(&buf[at..n], to) {
            tracing::debug!(%to, "socks5 UDP: send through the tunnel: {e}");
        }
    }
}

/// Datagrams from the tunnel, wrapped in a header naming their sender, to the client.
fn tunnel_to_client(
    client_socket: &dyn Datagram,
    tunnel_socket: &dyn Datagram,
    assoc: &Association,
) {
    let mut buf = vec![0u8; DATAGRAM];
    while !assoc.is_done() {
        let (n, from) = match tunnel_socket.recv_from(&mut buf) {
            Ok(r) => r,
            Err(e) if is_transient(&e) => continue,
            Err(e) => {
                tracing::debug!("socks5 UDP: tunnel socket: {e}");
                assoc.done.store(true, Ordering::Release);
                return;
            }
        };
        let Some(client) = *assoc.client.lock() else {
            continue;
        };
        assoc.touch();
        let datagram = proto::udp_datagram(from, &buf[..n]);
        if let Err(e) = client_socket.send_to(&datagram, client) {
            tracing::debug!(%client, "socks5 UDP: send to the client: {e}");
        }
    }
}

/// A receive error that leaves the socket usable: a timeout, a signal, or (on some systems)
/// an ICMP error reported for an earlier send.
fn is_transient(e: &io::Error) -> bool {
    is_timeout(e)
        || matches!(
            e.kind(),
            io::ErrorKind::Interrupted
                | io::ErrorKind::ConnectionReset
                | io::ErrorKind::ConnectionRefused
        )
}

/// Names the client sent, resolved through the tunnel, each kept for [`NAME_TTL`].
#[derive(Default)]
struct NameCache {
    names: HashMap<String, (IpAddr, Instant)>,
}

impl NameCache {
    fn resolve(&mut self, tunnel: &dyn Network, host: &str) -> io::Result<IpAddr> {
        if let Some((ip, at)) = self.names.get(host) {
            if at.elapsed() < NAME_TTL {
                return Ok(*ip);
            }
        }
        let ip = resolve(tunnel, host)?[0];
        if self.names.len() >= NAME_CACHE {
            self.names.clear();
        }
        self.names.insert(host.to_string(), (ip, Instant::now()));
        Ok(ip)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn assoc(port: Option<u16>) -> Association {
        Association {
            client_ip: "127.0.0.1".parse().unwrap(),
            client_port: port,
            client: Mutex::new(None),
            last: Mutex::new(Instant::now()),
            done: AtomicBool::new(false),
        }
    }

    #[test]
    fn the_first_sender_from_the_client_ip_is_the_client() {
        let a = assoc(None);
        assert!(!a.is_client("10.0.0.1:5000".parse().unwrap()));
        assert!(a.is_client("[::ffff:127.0.0.1]:5000".parse().unwrap()));
        assert!(a.is_client("127.0.0.1:5000".parse().unwrap()));
        assert!(!a.is_client("127.0.0.1:5001".parse().unwrap()));
    }

    #[test]
    fn a_port_in_the_request_is_required() {
        let a = assoc(Some(7000));
        assert!(!a.is_client("127.0.0.1:5000".parse().unwrap()));
        assert!(a.is_client("127.0.0.1:7000".parse().unwrap()));
    }
}
