//! The WireGuard device (wireguard-go's `device` package).
//!
//! Everything in `vpn_device` is re-exported here. The entry point is [`Device`]:
//!
//! | wireguard-go | here |
//! |---|---|
//! | `device.NewDevice(tun, bind, logger)` | [`Device::new`] (and [`Device::with_options`]) |
//! | `IpcSet(text)` / `IpcGet()` | [`Device::ipc_set`] / [`Device::ipc_get`] (text), [`Device::configure`] / [`Device::state`] (typed, [`crate::ipc`]) |
//! | `IpcHandle(conn)` | [`Device::ipc_handle`] (one UAPI connection) |
//! | `Up()` / `Down()` / `Close()` / `Wait()` | [`Device::up`] / [`Device::down`] / [`Device::close`] / [`Device::wait`] |
//! | `BindUpdate()` | [`Device::bind_update`] |
//! | `SendKeepalivesToPeersWithCurrentKeypair()` | [`Device::send_keepalives_to_peers_with_current_keypair`] |
//! | `DisableSomeRoamingForBrokenMobileSemantics()` | [`Device::disable_some_roaming_for_broken_mobile_semantics`] |
//! | `NewLogger(level, prepend)` | [`Logger::new`] (lines go to the `tracing` facade) |
//!
//! A configuration is applied in order up to the first error, which is returned with
//! wireguard-go's negative errno ([`IpcError`]); what came before it stays applied. Options
//! that wireguard-go takes from the environment or build tags are [`Options`], built with its
//! `with_*` methods:
//!
//! ```
//! use std::sync::Arc;
//! use vpn_wireguard::conn::memory::MemoryNetwork;
//! use vpn_wireguard::device::{Device, Logger, Options};
//! use vpn_wireguard::tun::memory::MemoryTun;
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let net = MemoryNetwork::new();
//! let (tun, _os) = MemoryTun::new("m0", 1420, 1);
//! let bind = Arc::new(net.bind("198.18.0.1".parse()?, 1));
//! // One crypto thread and a small buffer budget, for a memory-constrained host.
//! let opts = Options::default().with_workers(1).with_memory_budget(2 << 20);
//! let dev = Device::with_options(Arc::new(tun), bind.clone(), Logger::new("m0"), opts);
//!
//! // Bad input is an error with wireguard-go's errno, never a panic.
//! let err = dev.ipc_set("listen_port=not-a-port\n").unwrap_err();
//! assert_eq!(err.code(), vpn_wireguard::ipc::IPC_ERROR_INVALID);
//! dev.ipc_set("listen_port=0\n")?;
//! dev.up()?;
//! assert!(dev.is_up());
//! assert_eq!(Some(dev.listen_port()), bind.local_addr().map(|a| a.port()));
//!
//! // A mobile host keeps control of the endpoints it configured.
//! dev.disable_some_roaming_for_broken_mobile_semantics();
//! // After the network changed (its path monitor said so): new sockets, then keepalives so
//! // that NAT mappings are refreshed at once (what the C ABI's wgBumpSockets does).
//! dev.bind_update()?;
//! dev.send_keepalives_to_peers_with_current_keypair();
//! dev.down()?;
//! assert!(!dev.is_up());
//! dev.close();
//! dev.wait(); // returns at once: closed
//! assert!(dev.is_closed());
//! # Ok(())
//! # }
//! ```

pub use vpn_device::*;
