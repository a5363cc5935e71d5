//! A userspace TCP/IP stack that is the device's TUN, so an app tunnels its own connections
//! with no TUN device, no root and no change to the host's routes.
//!
//! [`create_net_tun`] returns a [`NetTun`], which `vpn_device::Device::new` takes like any
//! TUN, and a [`Net`], the app's side: [`Net::dial_tcp`], [`Net::listen_tcp`],
//! [`Net::bind_udp`], [`Net::ping`], [`Net::lookup_host`] and [`Net::dial`], with types shaped
//! like `std::net`'s. It is wireguard-go's `tun/netstack` on smoltcp.
//!
//! The stack trusts what comes through the tunnel to be intact (the tunnel's AEAD
//! authenticated it) and does not verify its checksums; it computes them on everything it
//! sends. Packets go between the device's buffers and the sockets with one copy each way.
//! Its sockets' buffers are charged to a memory budget and their number is capped
//! ([`Options`]), so neither side can grow it without bound.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod dns;
mod icmp;
mod net;
mod options;
mod phy;
mod send_edge;
mod signal;
mod stack;
mod tcp;
mod tun;
mod udp;

pub use net::{split_host_port, Conn, Net};
pub use options::{CongestionControl, Options};
pub use tcp::{TcpListener, TcpStream};
pub use tun::NetTun;
pub use udp::UdpSocket;

use std::io;
use std::net::IpAddr;

/// What a stack holds at one moment ([`Net::stats`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StackStats {
    /// Open sockets, including connections being set up or closed and not yet swept.
    pub sockets: usize,
    /// The cap on `sockets`.
    pub max_sockets: usize,
    /// Bytes of socket buffers allocated.
    pub memory_used: usize,
    /// The cap on `memory_used`.
    pub memory_budget: usize,
    /// Packets taken in from the tunnel since the stack was made.
    pub packets_in: u64,
    /// Packets sent into the tunnel since the stack was made.
    pub packets_out: u64,
    /// TUN reads that returned packets (a read carries up to a batch).
    pub reads: u64,
    /// TUN writes (a write carries up to a batch).
    pub writes: u64,
}

/// A stack with `addresses` (its own, one per family at least, at most 8), asking
/// `dns_servers` for names, sending packets of at most `mtu` bytes; default [`Options`].
///
/// The MTU is the tunnel's (the wg-quick `MTU`, 1420 by default).
pub fn create_net_tun(
    addresses: &[IpAddr],
    dns_servers: &[IpAddr],
    mtu: usize,
) -> io::Result<(NetTun, Net)> {
    create_net_tun_with(addresses, dns_servers, mtu, Options::default())
}

/// [`create_net_tun`] with the given [`Options`].
pub fn create_net_tun_with(
    addresses: &[IpAddr],
    dns_servers: &[IpAddr],
    mtu: usize,
    options: Options,
) -> io::Result<(NetTun, Net)> {
    let stack = stack::Stack::new(addresses, dns_servers, mtu, options)?;
    Ok((NetTun::new(stack.clone()), Net::new(stack)))
}
