//! The delivery self-check (`docs/bind.md`, "Port sharing and the delivery self-check"):
//! connected sockets only work if the kernel hands a peer's datagrams to the socket connected
//! to it rather than to the wildcard socket on the same port (Linux prefers the connected one
//! since 5.4, backported to 4.19.75).
//! Checked once per process on loopback; a failure keeps every pair socket closed.

use std::io;
use std::net::{Ipv4Addr, SocketAddr, UdpSocket};
use std::sync::OnceLock;
use std::time::Duration;

use socket2::{Domain, Protocol, Socket, Type};

use super::os::reuse_port_control;

/// How long each half of the check waits for its datagram.
const CHECK_DEADLINE: Duration = Duration::from_secs(2);

static DELIVERY: OnceLock<bool> = OnceLock::new();

/// Whether this kernel delivers a connected peer's datagrams to its connected socket and a
/// stranger's to the shared one. Runs the check the first time, then answers from the cache.
pub fn connected_delivery_check() -> bool {
    *DELIVERY.get_or_init(|| match run(reuse_port_control) {
        Ok(()) => true,
        Err(e) => {
            tracing::warn!("connected sockets disabled: delivery self-check failed: {e}");
            false
        }
    })
}

/// How a socket is made to share the port (the platform's [`reuse_port_control`]).
type Share = fn(&Socket) -> io::Result<()>;

fn shareable(addr: SocketAddr, share: Share) -> io::Result<UdpSocket> {
    let s = Socket::new(Domain::IPV4, Type::DGRAM, Some(Protocol::UDP))?;
    share(&s)?;
    s.bind(&addr.into())?;
    let s: UdpSocket = s.into();
    s.set_read_timeout(Some(CHECK_DEADLINE))?;
    Ok(s)
}

fn expect(sock: &UdpSocket, want: &[u8], what: &str) -> io::Result<()> {
    let mut buf = [0u8; 16];
    let (n, _) = sock
        .recv_from(&mut buf)
        .map_err(|e| io::Error::new(e.kind(), format!("{what}: {e}")))?;
    if buf.get(..n) == Some(want) {
        Ok(())
    } else {
        Err(io::Error::other(format!("{what}: got the wrong datagram")))
    }
}

fn run(share: Share) -> io::Result<()> {
    let lo = Ipv4Addr::LOCALHOST;
    let shared = shareable(SocketAddr::from((Ipv4Addr::UNSPECIFIED, 0)), share)?;
    let port = shared.local_addr()?.port();
    let peer = UdpSocket::bind((lo, 0))?;
    let other = UdpSocket::bind((lo, 0))?;
    let conn = shareable(SocketAddr::from((lo, port)), share)?;
    conn.connect(peer.local_addr()?)?;
    let to = SocketAddr::from((lo, port));
    peer.send_to(b"peer", to)?;
    other.send_to(b"other", to)?;
    expect(&conn, b"peer", "connected socket")?;
    expect(&shared, b"other", "shared socket")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_delivers_to_the_connected_socket() {
        // Every kernel this project supports (≥ 5.4) passes; the check itself is what runs.
        run(reuse_port_control).unwrap();
        assert!(connected_delivery_check());
    }

    #[test]
    fn the_check_runs_with_reuseaddr_sharing_as_on_darwin() {
        // darwin shares the port with SO_REUSEADDR alone; the check's own logic (bind beside
        // the wildcard, connect, compare) must work with it. Linux delivers the same way.
        use crate::darwin::io::{port_sharing, share_port};
        fn reuse_addr(s: &Socket) -> io::Result<()> {
            share_port(s, port_sharing(false))
        }
        run(reuse_addr).unwrap();
    }
}
