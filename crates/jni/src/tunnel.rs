//! One tunnel of the Android backend, and the rules Android sets for it.
//!
//! - The host protects the bind's two sockets once, right after `wgTurnOn`
//!   (`VpnService.protect(wgGetSocketV4(h))`, the same for v6). A socket opened later would
//!   route its datagrams into the tunnel itself, so nothing here opens one behind the host's
//!   back: the bind has no connected sockets, nothing rebinds on a network change (there is
//!   no route listener; the app restarts the tunnel). The one rebind left is wireguard-go's:
//!   a `listen_port` change through the UAPI socket opens new sockets, and an app that does
//!   that must protect them again.
//! - The TUN is unmonitored (no rtnetlink socket: an app may not bind one), and is brought up
//!   here, once.
//! - Peers with an endpoint do not roam (`DisableSomeRoamingForBrokenMobileSemantics`): the
//!   host decides the endpoint on a phone.
//! - Timers count time asleep (`CLOCK_BOOTTIME`), or keys would outlive their limits across a
//!   suspend and keepalives would stop.
//! - Packet memory is capped at [`crate::settings::PHONE_MEMORY_BUDGET`] by default.

use crate::settings::Settings;
use parking_lot::Mutex;
use std::fmt;
use std::io;
use std::os::fd::{FromRawFd, OwnedFd, RawFd};
use std::sync::Arc;
use vpn_device::{Device, IpcError, Logger, Options};
use vpn_uapi::UapiListener;

/// A running tunnel.
pub struct Tunnel {
    device: Arc<Device>,
    /// The bind, kept typed for its socket fds.
    #[cfg(any(target_os = "linux", target_os = "android"))]
    bind: Arc<vpn_conn::StdNetBind>,
    /// The UAPI socket's server, if the socket could be opened.
    uapi: Mutex<Option<vpn_uapi::UapiServer>>,
}

/// Why a tunnel did not start.
#[derive(Debug)]
pub enum TurnOnError {
    /// The fd is not a TUN this system can use.
    Tun(io::Error),
    /// The settings were refused.
    Config(IpcError),
    /// The device did not come up (its sockets could not be opened).
    Up(io::Error),
}

impl fmt::Display for TurnOnError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TurnOnError::Tun(e) => write!(f, "unable to use the TUN fd: {e}"),
            TurnOnError::Config(e) => write!(f, "unable to set the configuration: {e}"),
            TurnOnError::Up(e) => write!(f, "unable to bring the device up: {e}"),
        }
    }
}

/// Takes ownership of the fd the host passed. One that is not open is refused here rather than
/// wrapped: closing a descriptor nobody owns would be a bug of ours (and Rust's debug builds
/// abort on it).
pub fn take_fd(fd: RawFd) -> io::Result<OwnedFd> {
    if fd < 0 {
        return Err(io::Error::from_raw_os_error(libc::EBADF));
    }
    // SAFETY: F_GETFD only reads the descriptor's flags; a number that is not open fails with
    // EBADF and touches no memory.
    if unsafe { libc::fcntl(fd, libc::F_GETFD) } < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the fd is open and the caller (wgTurnOn's contract) hands its ownership to us;
    // nothing else in this process closes it from now on.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// The TUN over the host's fd, without an rtnetlink listener, its MTU as the host set it.
#[cfg(any(target_os = "linux", target_os = "android"))]
fn tun_from_fd(fd: OwnedFd) -> io::Result<Arc<dyn vpn_tun::Device>> {
    Ok(Arc::new(vpn_tun::LinuxTun::from_fd_unmonitored(fd)?))
}

#[cfg(not(any(target_os = "linux", target_os = "android")))]
fn tun_from_fd(fd: OwnedFd) -> io::Result<Arc<dyn vpn_tun::Device>> {
    drop(fd);
    Err(io::Error::new(
        io::ErrorKind::Unsupported,
        "the Android backend runs on Linux kernels only",
    ))
}

impl Tunnel {
    /// `wgTurnOn` once the arguments are read: the device on `fd` with the default bind,
    /// configured with `settings` (UAPI `set` text), its peers kept from roaming, its UAPI
    /// socket opened in `cfg.socket_dir` (a failure there is logged, as the Go library does),
    /// and brought up. On failure everything is released again, the fd included.
    pub fn turn_on(
        name: &str,
        fd: OwnedFd,
        settings: &str,
        cfg: &Settings,
    ) -> Result<Tunnel, TurnOnError> {
        let tun = tun_from_fd(fd).map_err(TurnOnError::Tun)?;
        let bind = Arc::new(vpn_conn::StdNetBind::new());
        let opts = Options::default()
            .with_clock(device_clock())
            .with_memory_budget(cfg.memory_budget);
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
        device.disable_some_roaming_for_broken_mobile_semantics();
        let uapi = serve_uapi(name, cfg, &device);
        let t = Tunnel {
            device,
            #[cfg(any(target_os = "linux", target_os = "android"))]
            bind,
            uapi: Mutex::new(uapi),
        };
        if let Err(e) = t.device.up() {
            t.turn_off();
            return Err(TurnOnError::Up(e));
        }
        Ok(t)
    }

    /// Stops the UAPI socket and the device; every thread has ended when this returns.
    pub fn turn_off(&self) {
        if let Some(mut s) = self.uapi.lock().take() {
            s.close();
        }
        self.device.close();
    }

    /// The UAPI `get` text.
    pub fn get_config(&self) -> Result<String, IpcError> {
        self.device.ipc_get()
    }

    /// The fd of the bind's IPv4 (`v6` false) or IPv6 socket, while it is open. The bind
    /// keeps ownership.
    #[cfg(any(target_os = "linux", target_os = "android"))]
    pub fn socket_fd(&self, v6: bool) -> Option<RawFd> {
        self.bind.socket_fds()[usize::from(v6)]
    }

    /// There is no Android bind here.
    #[cfg(not(any(target_os = "linux", target_os = "android")))]
    pub fn socket_fd(&self, _v6: bool) -> Option<RawFd> {
        None
    }
}

/// The UAPI socket `<dir>/<name>.sock` served for `device`, or `None` (logged, as the Go
/// library logs it) when there is no directory or the socket cannot be opened.
fn serve_uapi(name: &str, cfg: &Settings, device: &Arc<Device>) -> Option<vpn_uapi::UapiServer> {
    let Some(dir) = cfg.socket_dir.as_deref() else {
        tracing::warn!(device = %name, "no UAPI socket: no directory for it ({})", crate::settings::SOCKET_DIR_VAR);
        return None;
    };
    match UapiListener::bind(dir, name) {
        Ok(l) => Some(l.serve(device.clone())),
        Err(e) => {
            tracing::error!(device = %name, "UAPI socket in {}: {e}", dir.display());
            None
        }
    }
}

/// A clock that counts time asleep.
#[cfg(any(target_os = "linux", target_os = "android"))]
fn device_clock() -> Arc<dyn vpn_device::clock::Clock> {
    Arc::new(vpn_device::clock::BootTimeClock)
}

#[cfg(not(any(target_os = "linux", target_os = "android")))]
fn device_clock() -> Arc<dyn vpn_device::clock::Clock> {
    vpn_device::clock::default_clock()
}
