//! Binds: the UDP side of the tunnel (wireguard-go's `conn` package).
//!
//! Everything in `vpn_conn` is re-exported here: the [`Bind`] trait, [`Endpoint`]s, receive
//! functions, the platform bind ([`StdNetBind`]) and an in-memory network of binds for tests
//! ([`memory`]). [`new_default_bind`] is wireguard-go's `conn.NewDefaultBind`.
//!
//! An in-memory network moves datagrams between binds by address, without sockets, so tests
//! can also move a bind (roaming) or drop and inject datagrams:
//!
//! ```
//! use vpn_wireguard::conn::{memory::MemoryNetwork, Bind};
//!
//! let net = MemoryNetwork::new();
//! let bind = net.bind("198.18.0.1".parse().unwrap(), 1);
//! let (_receive_fns, port) = bind.open(0).unwrap();
//! assert_eq!(bind.local_addr().unwrap().port(), port);
//! bind.close().unwrap();
//! ```

pub use vpn_conn::*;

#[cfg(any(target_os = "linux", target_os = "android", target_vendor = "apple"))]
use std::sync::Arc;

/// The platform's default bind (`conn.NewDefaultBind`): a closed [`StdNetBind`] with its
/// defaults (on Linux: batched `recvmmsg`/`sendmmsg`, UDP GSO/GRO where the kernel has them,
/// sticky source addresses; connected sockets off). The device opens it on `up` with the
/// configured `listen_port`.
///
/// For other settings build the bind yourself, e.g.
/// `Arc::new(StdNetBind::new().with_connected_sockets(true))`.
///
/// ```
/// use vpn_wireguard::conn::{self, Bind};
///
/// let bind = conn::new_default_bind();
/// // Port 0: the system picks one. Needs no privileges.
/// let (receive_fns, port) = bind.open(0).unwrap();
/// assert!(!receive_fns.is_empty() && port != 0);
/// bind.close().unwrap();
/// ```
#[cfg(any(target_os = "linux", target_os = "android", target_vendor = "apple"))]
pub fn new_default_bind() -> Arc<StdNetBind> {
    Arc::new(StdNetBind::new())
}
