//! One tunnel behind a handle: the device on the host's TUN fd with the default bind, and its
//! background bumps.

use crate::bump::{self, Bumper};
use std::io;
use std::os::fd::{OwnedFd, RawFd};
use std::sync::Arc;
use vpn_device::{Device, IpcError, Logger, Options};

/// A running tunnel.
pub(crate) struct Tunnel {
    device: Arc<Device>,
    /// The bind the device uses, kept typed for its socket fds.
    #[cfg(any(target_os = "linux", target_os = "android"))]
    bind: Arc<vpn_conn::StdNetBind>,
    bumps: Bumper,
}

/// A TUN over the host's fd, its MTU left as the host set it. On Android without the
/// rtnetlink listener: an app may not bind a `NETLINK_ROUTE` socket, and `wgTurnOn` brings the
/// device up itself.
#[cfg(any(target_os = "linux", target_os = "android"))]
fn tun_from_fd(fd: OwnedFd) -> io::Result<Arc<dyn vpn_tun::Device>> {
    #[cfg(target_os = "linux")]
    let tun = vpn_tun::LinuxTun::from_fd(fd, 0)?;
    #[cfg(target_os = "android")]
    let tun = vpn_tun::LinuxTun::from_fd_unmonitored(fd)?;
    Ok(Arc::new(tun))
}

/// A TUN over the host's fd, its MTU left as the host set it.
#[cfg(target_vendor = "apple")]
fn tun_from_fd(fd: OwnedFd) -> io::Result<Arc<dyn vpn_tun::Device>> {
    Ok(Arc::new(vpn_tun::DarwinTun::from_fd(fd, 0)?))
}

#[cfg(not(any(target_os = "linux", target_os = "android", target_vendor = "apple")))]
fn tun_from_fd(fd: OwnedFd) -> io::Result<Arc<dyn vpn_tun::Device>> {
    drop(fd);
    Err(io::Error::new(
        io::ErrorKind::Unsupported,
        "no TUN from an fd on this system",
    ))
}

/// Why a tunnel did not start.
#[derive(Debug)]
pub(crate) enum TurnOnError {
    /// The fd is not a TUN this system can use.
    Tun(io::Error),
    /// The settings were refused.
    Config(IpcError),
    /// The device did not come up (the bind could not open).
    Up(io::Error),
}

impl std::fmt::Display for TurnOnError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TurnOnError::Tun(e) => write!(f, "unable to use the TUN fd: {e}"),
            TurnOnError::Config(e) => write!(f, "unable to set the configuration: {e}"),
            TurnOnError::Up(e) => write!(f, "unable to bring the device up: {e}"),
        }
    }
}

impl Tunnel {
    /// WireGuardKit's `wgTurnOn` after the fd was duplicated: a device on `fd` with the default
    /// bind and a cap of `memory_budget` bytes on its packet memory (0: none), configured with
    /// `settings` (a UAPI `set` body) and brought up. On failure every resource is released
    /// again.
    pub(crate) fn turn_on(
        settings: &str,
        fd: OwnedFd,
        memory_budget: usize,
    ) -> Result<Tunnel, TurnOnError> {
        let tun = tun_from_fd(fd).map_err(TurnOnError::Tun)?;
        let name = tun.name().unwrap_or_else(|_| "tun".to_owned());
        let bind = Arc::new(vpn_conn::StdNetBind::new());
        // Set field by field: Options may gain fields (non-exhaustive for other crates).
        #[allow(clippy::field_reassign_with_default)]
        let opts = {
            let mut o = Options::default();
            o.clock = crate::clock::device_clock();
            o.memory_budget = memory_budget;
            o
        };
        let device = Arc::new(Device::with_options(
            tun,
            bind.clone(),
            Logger::new(name),
            opts,
        ));
        if let Err(e) = device.ipc_set(settings) {
            device.close();
            return Err(TurnOnError::Config(e));
        }
        if let Err(e) = device.up() {
            device.close();
            return Err(TurnOnError::Up(e));
        }
        Ok(Tunnel {
            device,
            #[cfg(any(target_os = "linux", target_os = "android"))]
            bind,
            bumps: Bumper::new(bump::ATTEMPTS, bump::INTERVAL),
        })
    }

    /// Closes the device and ends the bumps; every thread is joined before this returns.
    pub(crate) fn turn_off(&self) {
        self.bumps.stop();
        self.device.close();
    }

    /// The cap on the device's packet memory in force (0: none).
    pub(crate) fn memory_budget(&self) -> usize {
        self.device.memory().budget
    }

    /// Applies a UAPI `set` body.
    pub(crate) fn set_config(&self, settings: &str) -> Result<(), IpcError> {
        self.device.ipc_set(settings)
    }

    /// The UAPI `get` dump.
    pub(crate) fn get_config(&self) -> Result<String, IpcError> {
        self.device.ipc_get()
    }

    /// Starts a background rebind (see [`crate::bump`]).
    pub(crate) fn bump_sockets(&self) -> io::Result<()> {
        self.bumps.bump(self.device.clone())
    }

    pub(crate) fn disable_some_roaming(&self) {
        self.device
            .disable_some_roaming_for_broken_mobile_semantics();
    }

    /// The bind's IPv4 (`v6` false) or IPv6 socket fd while the device is up. The bind keeps
    /// ownership; the fd changes at every rebind.
    #[cfg(any(target_os = "linux", target_os = "android"))]
    pub(crate) fn socket_fd(&self, v6: bool) -> Option<RawFd> {
        self.bind.socket_fds()[usize::from(v6)]
    }

    /// Not offered here: the socket accessor exists for the Linux bind (Android's `protect`).
    #[cfg(not(any(target_os = "linux", target_os = "android")))]
    pub(crate) fn socket_fd(&self, _v6: bool) -> Option<RawFd> {
        None
    }
}
