//! The wg-quick configuration format.
//!
//! One file holds two kinds of keys: the ones `wg setconf` understands (keys, port, fwmark,
//! peers) and the ones only wg-quick acts on (addresses, DNS, MTU, routing table, hooks,
//! SaveConfig). [`parse`] reads both, refusing bad input with the line it is on, so `vpn up`
//! can fail before it touches the system; [`Config::to_change`] turns the `wg` half into a typed
//! UAPI change (`vpn-ipc`, which renders the `set` body); [`Config::from_state`] and
//! [`Config::render`] write a running interface back as a file for SaveConfig.
#![forbid(unsafe_code)]

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
