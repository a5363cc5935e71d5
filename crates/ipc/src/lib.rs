//! The typed configuration model of the UAPI protocol, and the one place its text is parsed
//! and rendered.
//!
//! * [`Change`] is a configuration change (the body of a `set`): device settings, then peer
//!   sections, each a list of settings in the order they apply. Build one with its builder
//!   methods, or parse the text with [`Change::parse_partial`] (what came before the first
//!   bad line, and the error) or [`str::parse`] (all or nothing); [`Change::parse_each`] hands
//!   the same parts over one at a time ([`Part`]), so a device applies a large body without
//!   holding it parsed. `Display` renders it.
//! * [`DeviceState`] is what a `get` returns: the configuration and the per-peer statistics
//!   (handshake time, byte counters). `Display` renders the dump; [`str::parse`] reads one.
//! * [`Statistics`] holds the counters of the private `stats=1` request.
//! * [`IpcError`] carries the negative errno the protocol reports (`code()`).
//! * [`serve`] answers `set=1` / `get=1` (and extra) requests on a byte stream.
//!
//! The model holds no device: `vpn_device::Device::configure` applies a [`Change`] and builds
//! a [`DeviceState`]. See `docs/ipc.md`.

#![forbid(unsafe_code)]
#![deny(missing_docs)]

mod change;
mod error;
pub mod serve;
mod state;
mod stats;
#[cfg(test)]
mod tests;
mod text;

pub use change::{AllowedIp, Change, DeviceSetting, Endpoint, PeerChange, PeerSetting};
pub use error::{
    IpcError, IpcErrorKind, IPC_ERROR_INVALID, IPC_ERROR_IO, IPC_ERROR_PORT_IN_USE,
    IPC_ERROR_PROTOCOL, IPC_ERROR_UNKNOWN,
};
pub use state::{DeviceState, PeerState};
pub use stats::Statistics;
pub use text::Part;
