//! TUN devices: the IP side of the tunnel (wireguard-go's `tun` package).
//!
//! Everything in `vpn_tun` is re-exported here: the [`Device`] trait the WireGuard device reads
//! packets from and writes them to, its [`Event`]s, the platform TUN ([`NativeTun`]) and an
//! in-memory TUN for tests ([`memory`]). The two constructors are wireguard-go's:
//! [`create_tun`] (`tun.CreateTUN`) and [`create_tun_from_file`] (`tun.CreateTUNFromFile`).
//!
//! Both return the TUN in an [`Arc`]: the device and the app share it (the app may read its
//! [`name`](Device::name) or change its MTU while the device runs), and an `Arc<NativeTun>`
//! converts to the `Arc<dyn Device>` that [`crate::device::Device::new`] takes.
//!
//! An in-memory TUN is what tests use: the app side injects the packets "the operating system"
//! sends and receives the ones the device writes.
//!
//! ```
//! use std::time::Duration;
//! use vpn_wireguard::tun::{memory::MemoryTun, Device};
//!
//! let (tun, os) = MemoryTun::new("mem0", 1420, 1);
//! assert_eq!(tun.name().unwrap(), "mem0");
//! assert_eq!(tun.mtu().unwrap(), 1420);
//! // Nothing written by a device yet.
//! assert_eq!(os.recv(Duration::from_millis(10)), None);
//! ```

pub use vpn_tun::*;

#[cfg(any(target_os = "linux", target_os = "android", target_vendor = "apple"))]
use std::{io, os::fd::OwnedFd, sync::Arc};

/// The platform's TUN (wireguard-go's `NativeTun`): [`LinuxTun`] on Linux (virtio-net offloads
/// where the kernel has them), `DarwinTun` (utun) on macOS.
#[cfg(any(target_os = "linux", target_os = "android"))]
pub type NativeTun = vpn_tun::LinuxTun;

/// The platform's TUN (wireguard-go's `NativeTun`): `LinuxTun` on Linux (virtio-net offloads
/// where the kernel has them), [`DarwinTun`] (utun) on macOS.
#[cfg(target_vendor = "apple")]
pub type NativeTun = vpn_tun::DarwinTun;

/// Creates the TUN interface `name` and sets its MTU (`tun.CreateTUN`); 0 leaves the MTU as
/// the system made it.
///
/// On Linux `name` is the interface name (an empty name lets the kernel pick `tunN`); an
/// existing TUN of that name is attached to. On macOS the name is `utun` (the kernel picks the
/// unit) or `utunN`. The interface is created down: the app (or its host) assigns addresses and
/// brings it up, and the device follows the interface's up/down events. Needs the right to
/// create interfaces (root or `CAP_NET_ADMIN` on Linux).
///
/// ```no_run
/// # fn main() -> std::io::Result<()> {
/// use vpn_wireguard::tun::{self, Device};
/// let tun = tun::create_tun("wg0", 1420)?;
/// println!("created {}", tun.name()?);
/// # Ok(())
/// # }
/// ```
#[cfg(any(target_os = "linux", target_os = "android", target_vendor = "apple"))]
pub fn create_tun(name: &str, mtu: u32) -> io::Result<Arc<NativeTun>> {
    NativeTun::create(name, mtu).map(Arc::new)
}

/// Wraps a TUN descriptor the host opened (`tun.CreateTUNFromFile`): a network extension's
/// utun, Android's `VpnService` descriptor, or one inherited as `WG_TUN_FD`.
///
/// The descriptor is made non-blocking and owned from here on (closed with the TUN). The MTU is
/// set only if `mtu` is not 0, so a host that configured the interface itself passes 0. On
/// Linux the flags the descriptor was opened with decide the offloads (`IFF_VNET_HDR`: TSO and,
/// where the kernel has it, USO).
///
/// ```no_run
/// # fn main() -> std::io::Result<()> {
/// use std::os::fd::OwnedFd;
/// use vpn_wireguard::tun;
/// // A descriptor the host process handed over, e.g. opened from /dev/net/tun.
/// let fd: OwnedFd = std::fs::File::open("/dev/net/tun")?.into();
/// let tun = tun::create_tun_from_file(fd, 0)?;
/// # Ok(())
/// # }
/// ```
#[cfg(any(target_os = "linux", target_os = "android", target_vendor = "apple"))]
pub fn create_tun_from_file(fd: OwnedFd, mtu: u32) -> io::Result<Arc<NativeTun>> {
    NativeTun::from_fd(fd, mtu).map(Arc::new)
}

#[cfg(all(test, any(target_os = "linux", target_os = "android")))]
mod tests {
    use super::*;

    #[test]
    fn create_tun_from_file_refuses_a_descriptor_that_is_not_a_tun() {
        let fd: OwnedFd = std::fs::File::open("/dev/null").unwrap().into();
        assert!(create_tun_from_file(fd, 0).is_err());
    }

    #[test]
    fn create_tun_refuses_a_name_longer_than_an_interface_name() {
        // IFNAMSIZ is 16 with the terminating NUL: refused with or without privileges.
        assert!(create_tun("eml-name-too-long-for-linux", 0).is_err());
    }
}
