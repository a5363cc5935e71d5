//! SOCKS5 and HTTP proxies and ssh-style port forwards between the host and a tunnel.
//!
//! `vpn proxy` and `vpn forward` are built from these. A server listens on one [`Network`]
//! and dials through another: [`HostNetwork`] is the host's own (std::net), and
//! [`vpn_netstack::Net`] is the tunnel's userspace stack. Each server is a listener thread
//! ([`Server`]) and, per connection, a thread for the handshake that then relays one
//! direction while a second thread relays the other; relays copy through 64 KiB buffers and
//! pass an EOF on as a half-close. Stopping a server closes its listener within 200 ms;
//! connections already relaying go on until either side closes.
//!
//! # Servers
//!
//! - [`serve_socks5`]: SOCKS5 (RFC 1928) with no authentication, or username/password
//!   (RFC 1929) when [`Credentials`] are given. CONNECT dials through the tunnel; a domain
//!   name (ATYP 3, what `curl --socks5-hostname` sends) is resolved by the tunnel's DNS.
//!   UDP ASSOCIATE relays datagrams between a socket on the listening side and the tunnel
//!   until the control connection closes or `udp_idle` passes without a datagram. BIND is
//!   refused.
//! - [`serve_http`]: an HTTP/1.x proxy. `CONNECT host:port` answers
//!   `200 Connection established` and relays; a request with an absolute `http://` URI is
//!   sent to its origin in origin-form, without the proxy's own headers and with
//!   `Connection: close` (one request per connection), and the relay carries the response
//!   and anything after. With credentials, `Proxy-Authorization: Basic` is required.
//! - [`serve_forward`]: `-L` listens on the host and dials through the tunnel, `-R` listens
//!   on the tunnel's addresses and dials on the host; TCP connections are relayed, UDP
//!   datagrams get one far-side socket per client address that expires after `udp_idle`.
//!
//! Each server caps its live connections (UDP forwards: flows) at
//! [`Limits::max_connections`]; one over the cap is accepted and closed at once (SOCKS5
//! first writes a general-failure reply, HTTP a 503). The handshake (SOCKS5 greeting,
//! authentication and request; the HTTP request head) must complete within
//! [`Limits::handshake_timeout`]; the read timeout is then cleared for the relay.
//!
//! # Errors on the wire
//!
//! | failure | SOCKS5 | HTTP |
//! | --- | --- | --- |
//! | no acceptable auth method | method `0xFF`, close | — |
//! | wrong credentials | RFC 1929 status `0x01`, close | `407` with `Proxy-Authenticate: Basic realm="vpn"` |
//! | malformed request | REP `0x01` (greeting: close) | `400` (`431` for a head over 64 KiB) |
//! | unknown command, BIND | REP `0x07` | — |
//! | unknown address type | REP `0x08` | — |
//! | `https://` URI without CONNECT | — | `400` |
//! | connection refused | REP `0x05` | `502` |
//! | host or network unreachable, name not resolved | REP `0x04` / `0x03` | `502` |
//! | connect timed out | REP `0x06` (TTL expired) | `504` |
//! | any other connect error | REP `0x01` | `502` |
//! | handshake timed out | close | `408` |
//!
//! The wire formats are parsed by the sans-IO modules [`socks5`], [`http`] and [`forward`]
//! (the `-L`/`-R` specs): pure functions over byte slices that never panic, also driven by
//! the fuzz targets.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod forward;
pub mod http;
mod network;
mod server;
pub mod socks5;

pub use forward::{Forward, SpecError};
pub use network::{Datagram, HostNetwork, Listener, Network, Stream};
pub use server::Server;

use server::{spawn_tcp, TcpService};
use std::fmt;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

/// A username and password: SOCKS5's RFC 1929 method, HTTP's `Proxy-Authorization: Basic`.
#[derive(Clone)]
pub struct Credentials {
    /// The user name.
    pub username: String,
    /// The password.
    pub password: String,
}

impl fmt::Debug for Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Credentials")
            .field("username", &self.username)
            .field("password", &"<hidden>")
            .finish()
    }
}

/// Bounds on what clients can hold.
#[derive(Clone, Debug)]
pub struct Limits {
    /// The most connections (UDP forwards: flows) live at once; 1024 by default.
    pub max_connections: usize,
    /// How long a client has for its handshake (SOCKS5 negotiation and request, the HTTP
    /// request head); 10 s by default.
    pub handshake_timeout: Duration,
    /// How long a connect to a target may take, all its addresses together; 10 s by default.
    pub connect_timeout: Duration,
    /// How long a UDP association or flow lives without a datagram; 60 s by default.
    pub udp_idle: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_connections: 1024,
            handshake_timeout: Duration::from_secs(10),
            connect_timeout: Duration::from_secs(10),
            udp_idle: Duration::from_secs(60),
        }
    }
}

/// Serves SOCKS5 on `addr` of `listen`, connecting (and resolving names) through `tunnel`;
/// with `auth`, clients must log in with it (RFC 1929). UDP ASSOCIATE binds its relay
/// sockets on `listen` too (on [`HostNetwork`] if `listen` cannot be [shared](Network::shared)).
pub fn serve_socks5(
    listen: &dyn Network,
    addr: SocketAddr,
    tunnel: Arc<dyn Network>,
    auth: Option<Credentials>,
    limits: Limits,
) -> io::Result<Server> {
    let listener = listen.listen(addr)?;
    let max_connections = limits.max_connections;
    let socks = server::socks5::Socks5 {
        tunnel,
        listen: listen.shared().unwrap_or_else(|| Arc::new(HostNetwork)),
        auth,
        limits,
    };
    spawn_tcp(
        listener,
        TcpService {
            name: "socks5",
            max_connections,
            refuse: server::socks5::refuse,
            handle: Arc::new(move |client, peer| socks.serve(client, peer)),
        },
    )
}

/// Serves an HTTP proxy on `addr` of `listen`, connecting (and resolving names) through
/// `tunnel`; with `auth`, requests must carry it as `Proxy-Authorization: Basic`.
pub fn serve_http(
    listen: &dyn Network,
    addr: SocketAddr,
    tunnel: Arc<dyn Network>,
    auth: Option<Credentials>,
    limits: Limits,
) -> io::Result<Server> {
    let listener = listen.listen(addr)?;
    let max_connections = limits.max_connections;
    let proxy = server::http::HttpProxy {
        tunnel,
        auth,
        limits,
    };
    spawn_tcp(
        listener,
        TcpService {
            name: "http",
            max_connections,
            refuse: server::http::refuse,
            handle: Arc::new(move |client, peer| proxy.serve(client, peer)),
        },
    )
}

/// Starts a port forward: [`Forward::Local`] listens on `host` and connects through
/// `tunnel`, [`Forward::Remote`] listens on the tunnel's addresses and connects on `host`.
pub fn serve_forward(
    fwd: &Forward,
    tunnel: Arc<dyn Network>,
    host: Arc<dyn Network>,
    limits: Limits,
) -> io::Result<Server> {
    server::forward::serve(fwd, tunnel, host, limits)
}
