//! The wg-quick configuration format.
//!
//! One file holds three kinds of settings: the keys `wg setconf` understands (keys, port,
//! fwmark, peers), the ones only wg-quick acts on (addresses, DNS, MTU, routing table, hooks,
//! SaveConfig), and wireproxy's sections for the userspace proxy and forwarder (`vpn proxy`,
//! `vpn forward`), which wg-quick never reads. [`parse`] reads all three, refusing bad input
//! with the line it is on, so `vpn up` can fail before it touches the system;
//! [`Config::to_change`] turns the `wg` half into a typed UAPI change (`vpn-ipc`, which
//! renders the `set` body); [`Config::from_state`], [`Config::with_device_state`] and
//! [`Config::render`] write a running interface back as a file for SaveConfig.
//!
//! # Proxy and forwarding sections
//!
//! Section names and keys are case-insensitive, as everywhere in the file. Bringing the
//! configuration up as an interface ([`Config::to_change`], wg-quick's `up`) ignores them.
//!
//! | Section | Keys | Parsed into |
//! |---|---|---|
//! | `[Socks5]`, at most once | `BindAddress = ADDR:PORT` (required), `Username`, `Password` | [`Config::socks5`] |
//! | `[http]`, at most once | the same keys | [`Config::http`] |
//! | `[TCPClientTunnel]`, `[UDPClientTunnel]`, any number | `BindAddress = [ADDR:]PORT`, `Target = HOST:PORT` (both required) | [`Config::local_forwards`] |
//! | `[TCPServerTunnel]`, `[UDPServerTunnel]`, any number | `ListenPort = PORT`, `Target = HOST:PORT` (both required) | [`Config::remote_forwards`] |
//!
//! - `BindAddress` is a local address: an IP address and a port (`127.0.0.1:1080`,
//!   `[::1]:1080`); in the client tunnels a bare port means `127.0.0.1`. Port 0 lets the
//!   system choose.
//! - `Username` and `Password` come together or not at all; each is 1 to 255 bytes (the
//!   SOCKS5 limit), cannot contain `#` (it starts a comment), and an `[http]` username
//!   cannot contain `:` (Basic authentication splits on it).
//! - A client tunnel listens on `BindAddress` and forwards each connection (TCP) or datagram
//!   flow (UDP) to `Target`, an address behind the tunnel, reached through it.
//! - A server tunnel listens on `ListenPort` of the tunnel's own address and forwards to
//!   `Target`, a local service.
//! - `Target` is a host name, an IPv4 address or a bracketed IPv6 address (`[fd00::1]:80`),
//!   and a port other than 0; names are resolved when the forward is used.
//! - Two listeners on the same protocol and address (the SOCKS5 and HTTP proxies are TCP),
//!   or two server tunnels on the same protocol and port, are refused.
//!
//! ```text
//! [Socks5]
//! BindAddress = 127.0.0.1:1080
//! Username = alice
//! Password = secret
//!
//! [TCPClientTunnel]
//! BindAddress = 25565
//! Target = play.example.net:25565
//!
//! [UDPServerTunnel]
//! ListenPort = 53
//! Target = 127.0.0.1:5353
//! ```
#![forbid(unsafe_code)]

use std::net::SocketAddr;

mod error;
mod parse;
mod render;
mod types;
mod uapi;

pub use error::ConfigError;
pub use parse::parse;
pub use types::{Endpoint, IpPrefix, Table};
pub use vpn_proto::keys::{PresharedKey, PrivateKey, PublicKey};

/// A whole configuration file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Config {
    /// The `[Interface]` section(s), merged.
    pub interface: Interface,
    /// The `[Peer]` sections, in file order.
    pub peers: Vec<Peer>,
    /// The `[Socks5]` section: a SOCKS5 proxy into the tunnel (`vpn proxy`).
    pub socks5: Option<ProxySettings>,
    /// The `[http]` section: an HTTP proxy (CONNECT and plain requests) into the tunnel.
    pub http: Option<ProxySettings>,
    /// The `[TCPClientTunnel]` and `[UDPClientTunnel]` sections, in file order: local ports
    /// forwarded to addresses behind the tunnel (`vpn forward`).
    pub local_forwards: Vec<LocalForward>,
    /// The `[TCPServerTunnel]` and `[UDPServerTunnel]` sections, in file order: ports on the
    /// tunnel address forwarded to local services.
    pub remote_forwards: Vec<RemoteForward>,
}

impl Config {
    /// A configuration with the given interface, no peers and none of the proxy or
    /// forwarding sections.
    pub fn new(interface: Interface) -> Self {
        Config {
            interface,
            peers: Vec::new(),
            socks5: None,
            http: None,
            local_forwards: Vec::new(),
            remote_forwards: Vec::new(),
        }
    }
}

/// A `[Socks5]` or `[http]` section: a proxy listening on a local address whose outgoing
/// connections go through the tunnel.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProxySettings {
    /// `BindAddress`: where the proxy listens.
    pub bind: SocketAddr,
    /// `Username` and `Password`, which come together; `None` means no authentication.
    pub auth: Option<(String, String)>,
}

/// A `[TCPClientTunnel]` or `[UDPClientTunnel]` section: a local port forwarded to an address
/// behind the tunnel.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LocalForward {
    /// `BindAddress`: the local listening address (a bare port in the file is `127.0.0.1`).
    pub bind: SocketAddr,
    /// `Target`: the host (name or IP, unresolved) and port reached through the tunnel.
    pub target: Endpoint,
    /// True for `[UDPClientTunnel]`, false for `[TCPClientTunnel]`.
    pub udp: bool,
}

/// A `[TCPServerTunnel]` or `[UDPServerTunnel]` section: a port on the tunnel address
/// forwarded to a local service.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RemoteForward {
    /// `ListenPort`: the port on the tunnel's own address (never 0).
    pub port: u16,
    /// `Target`: the local service's host (name or IP, unresolved) and port.
    pub target: Endpoint,
    /// True for `[UDPServerTunnel]`, false for `[TCPServerTunnel]`.
    pub udp: bool,
}

/// The `[Interface]` section: the device keys `wg` applies and the extras wg-quick applies.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Interface {
    /// `PrivateKey` (required by [`parse`]).
    pub private_key: PrivateKey,
    /// `ListenPort`; `None` leaves the port to the daemon (random).
    pub listen_port: Option<u16>,
    /// `FwMark`; `Some(0)` is an explicit `off`, `None` means the key was absent.
    pub fwmark: Option<u32>,
    /// `Address`, host bits kept (they are the interface's own address).
    pub addresses: Vec<IpPrefix>,
    /// `DNS` entries that are IP addresses: name servers.
    pub dns: Vec<std::net::IpAddr>,
    /// `DNS` entries that are not IP addresses: search domains.
    pub dns_search: Vec<String>,
    /// `MTU`; `None` means "compute it as wg-quick does".
    pub mtu: Option<u32>,
    /// `Table`.
    pub table: Table,
    /// `PreUp` hooks, in file order, raw (`%i` not yet substituted).
    pub pre_up: Vec<String>,
    /// `PostUp` hooks.
    pub post_up: Vec<String>,
    /// `PreDown` hooks.
    pub pre_down: Vec<String>,
    /// `PostDown` hooks.
    pub post_down: Vec<String>,
    /// `SaveConfig`.
    pub save_config: bool,
}

impl Interface {
    /// An interface with the given key and every other setting at its default.
    pub fn new(private_key: PrivateKey) -> Self {
        Interface {
            private_key,
            listen_port: None,
            fwmark: None,
            addresses: Vec::new(),
            dns: Vec::new(),
            dns_search: Vec::new(),
            mtu: None,
            table: Table::Auto,
            pre_up: Vec::new(),
            post_up: Vec::new(),
            pre_down: Vec::new(),
            post_down: Vec::new(),
            save_config: false,
        }
    }
}

/// One `[Peer]` section.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Peer {
    /// `PublicKey` (required).
    pub public_key: PublicKey,
    /// `PresharedKey`; `None` when absent (the device then uses all zeros).
    pub preshared_key: Option<PresharedKey>,
    /// `AllowedIPs`, in file order, as written (the daemon masks host bits).
    pub allowed_ips: Vec<IpPrefix>,
    /// `Endpoint`, unresolved (hostnames allowed).
    pub endpoint: Option<Endpoint>,
    /// `PersistentKeepalive` in seconds; `None` for absent, `off` or 0 (all mean "off").
    pub persistent_keepalive: Option<u16>,
}

impl Peer {
    /// A peer with only its public key set.
    pub fn new(public_key: PublicKey) -> Self {
        Peer {
            public_key,
            preshared_key: None,
            allowed_ips: Vec::new(),
            endpoint: None,
            persistent_keepalive: None,
        }
    }
}
