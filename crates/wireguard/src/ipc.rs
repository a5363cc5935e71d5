//! The typed configuration (wireguard-go's `ipc` package and the UAPI text it speaks).
//!
//! Everything in `vpn_ipc` is re-exported here. A [`Change`] is what a UAPI `set` carries:
//! device settings, then peer sections ([`PeerChange`]), each in the order they apply.
//! [`crate::device::Device::configure`] applies one with wireguard-go's semantics (in order, up
//! to the first error, which is returned with its errno); [`crate::device::Device::state`]
//! returns a [`DeviceState`], what a `get` dumps, statistics included. The text forms are
//! [`Display`](std::fmt::Display) and [`str::parse`] of the same types, so an app can store a
//! configuration as the text `wg` speaks and still handle it typed.
//!
//! ```
//! use vpn_wireguard::ipc::{AllowedIp, Change, PeerChange};
//! use vpn_wireguard::keys;
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let peer = keys::generate_private_key().public_key();
//! let change = Change::new()
//!     .private_key(keys::generate_private_key())
//!     .listen_port(51820)
//!     .replace_peers()
//!     .peer(
//!         PeerChange::new(peer)
//!             .endpoint("198.18.0.2:51820".parse::<std::net::SocketAddr>()?)
//!             .persistent_keepalive_interval(25)
//!             .replace_allowed_ips()
//!             .allowed_ip("100.64.0.2/32".parse::<AllowedIp>()?),
//!     );
//! // The UAPI text, and back (an endpoint read from text stays text for the bind to parse).
//! let text = change.to_string();
//! assert!(text.contains("persistent_keepalive_interval=25\n"));
//! assert_eq!(text.parse::<Change>()?.to_string(), text);
//!
//! // Bad text is an error with the protocol's errno, never a panic.
//! let err = "listen_port=70000\n".parse::<Change>().unwrap_err();
//! assert_eq!(err.code(), vpn_wireguard::ipc::IPC_ERROR_INVALID);
//! # Ok(())
//! # }
//! ```

pub use vpn_ipc::*;
