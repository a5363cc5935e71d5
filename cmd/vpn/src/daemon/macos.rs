//! The daemon's macOS parts: `vpn utun` (the kernel picks the unit) or `vpn utunN` on a
//! [`DarwinTun`], or the utun fd a parent passes in `WG_TUN_FD`; the unit's name written to
//! `WG_TUN_NAME_FILE` (wg-quick's darwin script reads it to learn which utun it got); the
//! darwin [`StdNetBind`]; the device's default options (the default clock on Apple targets is
//! `mach_continuous_time`, which counts sleep).
//!
//! Options besides Linux's ([`DaemonOptions`]): `--batched-io` (batch the shared sockets' I/O
//! with `recvmsg_x`/`sendmsg_x`; off by default, and a no-op without the `darwin-spi`
//! feature), `--dont-fragment` (`IP_DONTFRAG` on the bind's sockets).

use super::{write_name_file, DaemonOptions, Parts, DEFAULT_MTU};
use std::os::fd::AsRawFd;
use std::path::Path;
use std::sync::Arc;
use vpn_conn::StdNetBind;
use vpn_device::Options;
use vpn_tun::{DarwinTun, Device as _};

/// The environment variable naming the file that receives the chosen utun's name.
const NAME_FILE_ENV: &str = "WG_TUN_NAME_FILE";

fn open_tun(ifname: &str) -> Result<DarwinTun, crate::Error> {
    match super::inherited_fd("WG_TUN_FD")? {
        Some(fd) => {
            let raw = fd.as_raw_fd();
            Ok(DarwinTun::from_fd(fd, DEFAULT_MTU)
                .map_err(|e| format!("WG_TUN_FD={raw}: not a usable TUN device: {e}"))?)
        }
        None => Ok(DarwinTun::create(ifname, DEFAULT_MTU).map_err(|e| {
            format!("failed to create TUN device {ifname} (the name must be utun or utunN): {e}")
        })?),
    }
}

/// Everything the macOS daemon opens, all at once: it keeps its user (the privilege and
/// sandbox options do nothing on macOS), so there is no later step.
pub(super) struct Early(Parts);

impl Early {
    /// The interface's name (the UAPI socket is named after it).
    pub(super) fn name(&self) -> &str {
        &self.0.name
    }
}

/// The utun, the bind and the device options on macOS.
pub(super) fn open_early(ifname: &str, daemon: &DaemonOptions) -> Result<Early, crate::Error> {
    if daemon.no_drop_privileges
        || daemon.no_sandbox
        || daemon.user != "nobody"
        || !daemon.low_ports
    {
        tracing::debug!(
            "--user, --no-drop-privileges, --low-ports and --no-sandbox do nothing on macOS"
        );
    }
    open_parts(ifname, daemon).map(Early)
}

/// What [`open_early`] opened.
pub(super) fn open(early: Early, _: &DaemonOptions) -> Result<Parts, crate::Error> {
    Ok(early.0)
}

fn open_parts(ifname: &str, daemon: &DaemonOptions) -> Result<Parts, crate::Error> {
    let tun = Arc::new(open_tun(ifname)?);
    let name = tun.name().unwrap_or_else(|_| ifname.to_owned());
    // As wireguard-go: only when the kernel chose the unit is there a name to report.
    if ifname == "utun" {
        if let Some(file) = std::env::var_os(NAME_FILE_ENV) {
            let file = Path::new(&file);
            write_name_file(file, &name)
                .map_err(|e| format!("{NAME_FILE_ENV}={}: {e}", file.display()))?;
        }
    }
    let bind = Arc::new(
        StdNetBind::new()
            .with_batched_io(daemon.batched_io)
            .with_dont_fragment(daemon.dont_fragment)
            .with_connected_options(daemon.connected()),
    );
    let opts = Options::default().with_memory_budget(daemon.memory_budget);
    Ok(Parts {
        tun,
        name,
        bind,
        opts,
        tun_stats: None,
    })
}
