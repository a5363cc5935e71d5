//! The WireGuard device: peers, the parallel order-preserving crypto pipeline, timers,
//! allowed-IPs routing and applying configuration changes.
//!
//! The API follows wireguard-go's `device` package: [`Device::new`] on a TUN and a bind,
//! [`Device::configure`] with a typed `vpn_ipc::Change` (or its text through
//! [`Device::ipc_set`]) and [`Device::ipc_get`], [`Device::up`] / [`Device::down`] /
//! [`Device::close`], [`Device::bind_update`]. See `docs/pipeline.md` for how packets move.

#![forbid(unsafe_code)]

pub mod allowedips;
mod batch;
pub mod clock;
mod device;
mod handshake;
mod index;
mod keypair;
mod peer;
pub mod pool;
mod reader;
mod receive;
mod route;
pub mod sched;
mod send;
mod session;
mod stats;
mod timers;
pub mod uapi;

pub(crate) use device::DeviceInner;
pub(crate) use device::Job;
pub use device::{Device, Logger, Options, DEFAULT_MEMORY_BUDGET, MIN_MEMORY_BUDGET};
pub use peer::Peer;
pub use pool::MemoryUse;
pub use stats::Stats;
pub use uapi::IpcError;
