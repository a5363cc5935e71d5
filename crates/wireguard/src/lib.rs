//! A userspace WireGuard device to embed in an application, shaped like wireguard-go.
//!
//! An app needs three things, one module each, named as in wireguard-go:
//!
//! - [`tun`]: the IP side. [`tun::create_tun`] creates an interface by name,
//!   [`tun::create_tun_from_file`] wraps a descriptor the host opened (a network extension,
//!   Android's `VpnService`, `WG_TUN_FD`).
//! - [`conn`]: the UDP side. [`conn::new_default_bind`] is the batched socket bind of the
//!   platform (`StdNetBind`).
//! - [`device`]: the WireGuard device between them. [`device::Device::new`] takes a TUN, a bind
//!   and a [`device::Logger`]; it is configured with a typed [`ipc::Change`]
//!   ([`configure`](device::Device::configure)) or the UAPI text `wg` sends
//!   ([`ipc_set`](device::Device::ipc_set)), read back typed ([`state`](device::Device::state))
//!   or as text ([`ipc_get`](device::Device::ipc_get)), and driven with
//!   [`up`](device::Device::up), [`down`](device::Device::down),
//!   [`close`](device::Device::close), [`wait`](device::Device::wait),
//!   [`bind_update`](device::Device::bind_update) and
//!   [`disable_some_roaming_for_broken_mobile_semantics`](device::Device::disable_some_roaming_for_broken_mobile_semantics).
//!
//! Without a TUN, [`netstack`] is the IP side: a userspace TCP/IP stack that the device takes
//! as its TUN and the app dials and listens through ([`netstack::create_net_tun`], wireguard-go's
//! `netstack.CreateNetTUN`), with no interface, no root and no change to the host's routes.
//!
//! [`ipc`] is the typed configuration model and its text form; [`keys`] makes and parses the
//! Curve25519 keys. Linux and macOS are supported; everything in this crate is safe code, the
//! system calls live in the crates it re-exports.
//!
//! # A tunnel on a real interface
//!
//! What an app does on Linux (`"utun"` instead of `"wg0"` on macOS). It needs the right to
//! create interfaces (root or `CAP_NET_ADMIN`), so this example is compiled but not run by the
//! doc tests; `examples/embedded_tunnel.rs` is the complete program and a network-namespace test
//! runs it against the `vpn` daemon.
//!
//! ```no_run
//! use vpn_wireguard::ipc::{Change, PeerChange};
//! use vpn_wireguard::{conn, device, keys, tun};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let tun = tun::create_tun("wg0", 1420)?;
//! let bind = conn::new_default_bind();
//! let dev = device::Device::new(tun, bind, device::Logger::new("wg0"));
//! let peer = keys::PublicKey::from_base64("JRI8Xc0zKP9kXk8qP84NdUQA04h6DLfFbwJn4g+/PFs=")?;
//! dev.configure(
//!     &Change::new()
//!         .private_key(keys::generate_private_key())
//!         .listen_port(51820)
//!         .peer(
//!             PeerChange::new(peer)
//!                 .endpoint("198.18.0.2:51820".parse::<std::net::SocketAddr>()?)
//!                 .allowed_ip("100.64.0.2/32".parse()?),
//!         ),
//! )?;
//! dev.up()?;
//! dev.wait(); // until another thread calls dev.close()
//! # Ok(())
//! # }
//! ```
//!
//! # Two devices in one process
//!
//! This one runs (no privileges needed): two devices with in-memory TUNs
//! ([`tun::memory`]) talk over the platform's real UDP bind on loopback. The test plays the
//! operating system: it hands an IP packet to A's TUN and finds it, decrypted, on B's.
//!
//! ```
//! use std::sync::Arc;
//! use std::time::Duration;
//! use vpn_wireguard::ipc::{Change, PeerChange};
//! use vpn_wireguard::{conn, device::{Device, Logger}, keys, tun::memory::MemoryTun};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let (key_a, key_b) = (keys::generate_private_key(), keys::generate_private_key());
//! let (tun_a, os_a) = MemoryTun::new("a", 1420, 1);
//! let (tun_b, os_b) = MemoryTun::new("b", 1420, 1);
//! let a = Device::new(Arc::new(tun_a), conn::new_default_bind(), Logger::new("a"));
//! let b = Device::new(Arc::new(tun_b), conn::new_default_bind(), Logger::new("b"));
//!
//! // Keys and a port the system picks (0); `up` opens the sockets.
//! for (dev, key) in [(&a, &key_a), (&b, &key_b)] {
//!     dev.configure(&Change::new().private_key(key.clone()).listen_port(0))?;
//!     dev.up()?;
//! }
//! // Each side knows the other's public key, tunnel address and (for A) where B listens.
//! let b_addr = std::net::SocketAddr::from(([127, 0, 0, 1], b.listen_port()));
//! a.configure(&Change::new().peer(
//!     PeerChange::new(key_b.public_key())
//!         .endpoint(b_addr)
//!         .allowed_ip("100.64.0.2/32".parse()?),
//! ))?;
//! // The same in the UAPI text `wg` speaks (keys in hex there).
//! b.ipc_set(&format!(
//!     "public_key={}\nallowed_ip=100.64.0.1/32\n",
//!     key_a.public_key().to_hex()
//! ))?;
//!
//! // A packet from 100.64.0.1 to 100.64.0.2 written "by the OS" to A's TUN: A does the
//! // handshake, encrypts, sends; B decrypts and writes it to its TUN.
//! let packet = ipv4_udp([100, 64, 0, 1], [100, 64, 0, 2], b"hello through the tunnel");
//! assert!(os_a.inject(packet.clone()));
//! assert_eq!(os_b.recv(Duration::from_secs(10)), Some(packet));
//!
//! // B learnt A's endpoint from the handshake, so it can answer.
//! let reply = ipv4_udp([100, 64, 0, 2], [100, 64, 0, 1], b"hello back");
//! assert!(os_b.inject(reply.clone()));
//! assert_eq!(os_a.recv(Duration::from_secs(10)), Some(reply));
//!
//! // The state, typed (`ipc_get` gives the same as the text `wg show` reads).
//! let state = a.state();
//! assert!(state.peers[0].last_handshake_time.is_some() && state.peers[0].rx_bytes > 0);
//! assert!(a.ipc_get()?.contains("last_handshake_time_sec="));
//! a.close();
//! b.close();
//! # Ok(())
//! # }
//! # /// A minimal IPv4/UDP packet with a valid header checksum (UDP checksum 0: none).
//! # fn ipv4_udp(src: [u8; 4], dst: [u8; 4], payload: &[u8]) -> Vec<u8> {
//! #     let len = 28 + payload.len();
//! #     let mut p = vec![0u8; len];
//! #     p[0] = 0x45;
//! #     p[2..4].copy_from_slice(&(len as u16).to_be_bytes());
//! #     p[8] = 64;
//! #     p[9] = 17;
//! #     p[12..16].copy_from_slice(&src);
//! #     p[16..20].copy_from_slice(&dst);
//! #     let sum: u32 = p[..20].chunks(2).map(|w| u32::from(u16::from_be_bytes([w[0], w[1]]))).sum();
//! #     let sum = (sum & 0xffff) + (sum >> 16);
//! #     p[10..12].copy_from_slice(&(!(sum + (sum >> 16)) as u16).to_be_bytes());
//! #     p[20..22].copy_from_slice(&4000u16.to_be_bytes());
//! #     p[22..24].copy_from_slice(&5000u16.to_be_bytes());
//! #     p[24..26].copy_from_slice(&((8 + payload.len()) as u16).to_be_bytes());
//! #     p[28..].copy_from_slice(payload);
//! #     p
//! # }
//! ```
//!
//! # Threads and lifetime
//!
//! [`device::Device::new`] starts the device's threads; the device is down until
//! [`up`](device::Device::up) (or, on a real interface, until the interface comes up).
//! [`close`](device::Device::close) (also run on drop) stops and joins every thread and closes
//! the TUN and the bind; [`wait`](device::Device::wait) blocks until then. Every method takes
//! `&self`: share the device with an [`Arc`](std::sync::Arc).

#![deny(missing_docs)]
#![forbid(unsafe_code)]

pub mod conn;
pub mod device;
pub mod ipc;
pub mod keys;
pub mod netstack;
pub mod tun;

/// The README's Rust snippet, compiled by the doc tests so that it cannot go stale.
#[cfg(doctest)]
#[doc = include_str!("../../../README.md")]
mod readme {}
