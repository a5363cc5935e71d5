//! A tunnel without a TUN (wireguard-go's `tun/netstack`): everything in `vpn_netstack`.
//!
//! [`create_net_tun`] returns a [`NetTun`] for [`Device::new`](crate::device::Device::new) and
//! a [`Net`]: the app's sockets, shaped like `std::net`, whose packets go through the tunnel.
//! No interface is created and nothing needs privileges, so an app, a test or a container
//! without `/dev/net/tun` can use a WireGuard peer.
//!
//! # Two devices in one process, one serving, one dialing
//!
//! Both devices' TUNs are stacks; they talk over the platform's UDP bind on loopback. B
//! serves a line over TCP on its tunnel address; A dials it by address and reads it.
//!
//! ```
//! use std::io::{Read, Write};
//! use std::net::{IpAddr, SocketAddr};
//! use std::sync::Arc;
//! use vpn_wireguard::ipc::{Change, PeerChange};
//! use vpn_wireguard::{conn, device::{Device, Logger}, keys, netstack};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let (ip_a, ip_b): (IpAddr, IpAddr) = ("100.64.0.1".parse()?, "100.64.0.2".parse()?);
//! let (tun_a, net_a) = netstack::create_net_tun(&[ip_a], &[], 1420)?;
//! let (tun_b, net_b) = netstack::create_net_tun(&[ip_b], &[], 1420)?;
//! let a = Device::new(Arc::new(tun_a), conn::new_default_bind(), Logger::new("a"));
//! let b = Device::new(Arc::new(tun_b), conn::new_default_bind(), Logger::new("b"));
//! let (key_a, key_b) = (keys::generate_private_key(), keys::generate_private_key());
//! for (dev, key) in [(&a, &key_a), (&b, &key_b)] {
//!     dev.configure(&Change::new().private_key(key.clone()).listen_port(0))?;
//!     dev.up()?;
//! }
//! let b_at = SocketAddr::from(([127, 0, 0, 1], b.listen_port()));
//! a.configure(&Change::new().peer(
//!     PeerChange::new(key_b.public_key()).endpoint(b_at).allowed_ip("100.64.0.2/32".parse()?),
//! ))?;
//! b.configure(&Change::new().peer(
//!     PeerChange::new(key_a.public_key()).allowed_ip("100.64.0.1/32".parse()?),
//! ))?;
//!
//! // B serves on its tunnel address, port 80.
//! let listener = net_b.listen_tcp(SocketAddr::new(ip_b, 80))?;
//! let server = std::thread::spawn(move || -> std::io::Result<()> {
//!     let (mut conn, _from) = listener.accept()?;
//!     conn.write_all(b"hello from behind the tunnel\n")
//! });
//!
//! // A dials it: the handshake happens on the first packet.
//! let mut conn = net_a.dial_tcp(SocketAddr::new(ip_b, 80))?;
//! let mut line = String::new();
//! conn.read_to_string(&mut line)?;
//! assert_eq!(line, "hello from behind the tunnel\n");
//! server.join().unwrap()?;
//! a.close();
//! b.close();
//! # Ok(())
//! # }
//! ```
//!
//! `examples/netstack_http.rs` is a complete program: an HTTP GET through a peer from a
//! wg-quick config, as an unprivileged user.

pub use vpn_netstack::*;
