//! The daemon's Linux parts: a TUN named `<ifname>` (virtio-net offloads unless
//! `--tun-offload=off`), the bind with UDP GSO/GRO, CLOCK_BOOTTIME (the key timers count
//! suspend) and `SCHED_BATCH` for the light direction of bulk traffic.

use super::{DaemonOptions, Parts, DEFAULT_MTU};
use std::os::fd::{AsFd, AsRawFd, OwnedFd, RawFd};
use std::sync::Arc;
use vpn_conn::StdNetBind;
use vpn_device::clock::BootTimeClock;
use vpn_device::sched::Scheduling;
use vpn_device::Options;
use vpn_ipc::Statistics;
use vpn_sys::tun as tun_sys;
use vpn_tun::{Device as _, LinuxTun, NamespaceWatch, TunStats};
use vpn_uapi::StatsFn;

/// A data-path thread carrying the light direction of bulk traffic becomes a `SCHED_BATCH`
/// thread (see `vpn_device::sched`).
struct SchedBatch;

impl Scheduling for SchedBatch {
    fn set_light(&self, light: bool) -> std::io::Result<()> {
        vpn_sys::sched::set_batch(light)
    }
}

/// What the Linux daemon opens as root, before any thread exists and before it gives up root:
/// the TUN's descriptor (created, or inherited through `WG_TUN_FD`) and the interface's name.
/// The TUN is wrapped (its threads started, its MTU set) by [`open`], afterwards.
pub(super) struct Early {
    fd: OwnedFd,
    name: String,
    /// The `WG_TUN_FD` number, for error messages.
    inherited: Option<RawFd>,
}

impl Early {
    /// The interface's name (the UAPI socket is named after it).
    pub(super) fn name(&self) -> &str {
        &self.name
    }
}

/// Opens the TUN's descriptor: the inherited one, or `<ifname>` created with the virtio-net
/// header (when `offload` and the kernel takes the TCP offloads; else a plain TUN).
pub(super) fn open_early(ifname: &str, daemon: &DaemonOptions) -> Result<Early, crate::Error> {
    if let Some(fd) = super::inherited_fd("WG_TUN_FD")? {
        let raw = fd.as_raw_fd();
        let (name, _) = tun_sys::get_iff(fd.as_fd())
            .map_err(|e| format!("WG_TUN_FD={raw}: not a usable TUN device: {e}"))?;
        return Ok(Early {
            fd,
            name,
            inherited: Some(raw),
        });
    }
    let created = |e: std::io::Error| format!("failed to create TUN device {ifname}: {e}");
    let mut fd = None;
    if daemon.tun_offload {
        let vnet = tun_sys::open(ifname, true).map_err(created)?;
        let tcp = tun_sys::TUN_F_CSUM | tun_sys::TUN_F_TSO4 | tun_sys::TUN_F_TSO6;
        match tun_sys::set_offload(vnet.as_fd(), tcp) {
            Ok(()) => fd = Some(vnet),
            Err(e) => tracing::info!("TUN offloads unavailable ({e}); one packet per read(2)"),
        }
    }
    let fd = match fd {
        Some(fd) => fd,
        None => tun_sys::open(ifname, false).map_err(created)?,
    };
    let (name, _) = tun_sys::get_iff(fd.as_fd()).map_err(created)?;
    Ok(Early {
        fd,
        name,
        inherited: None,
    })
}

/// Wraps the TUN [`open_early`] opened: offloads negotiated, MTU set, link events followed.
fn open_tun(early: Early) -> Result<LinuxTun, crate::Error> {
    let Early {
        fd,
        name,
        inherited,
    } = early;
    LinuxTun::from_fd(fd, DEFAULT_MTU).map_err(|e| {
        match inherited {
            Some(raw) => format!("WG_TUN_FD={raw}: not a usable TUN device: {e}"),
            None => format!("failed to create TUN device {name}: {e}"),
        }
        .into()
    })
}

/// The device options every Linux data path uses (the daemon's and `vpn proxy`/`vpn forward`'s):
/// threads marked SCHED_BATCH under bulk load and readers yielding after a burst of datagrams.
pub(crate) fn data_path_options() -> Options {
    Options::default()
        // `VPN_SCHED_BATCH=0` leaves the data-path threads' policy alone under bulk load.
        .with_scheduling(
            std::env::var("VPN_SCHED_BATCH")
                .map_or(true, |v| v != "0")
                .then(|| Arc::new(SchedBatch) as Arc<dyn Scheduling>),
        )
        // `VPN_DATAGRAM_YIELD=0`: readers do not yield after writing a burst of datagrams.
        .with_datagram_yield(std::env::var("VPN_DATAGRAM_YIELD").map_or(true, |v| v != "0"))
        // `VPN_CRYPTO_WORKERS=N`: N crypto threads instead of one per CPU the daemon may run on
        // (N = 1 is the inline path); for the one-core A/B of `make bench`.
        .with_workers(crypto_workers(
            std::env::var("VPN_CRYPTO_WORKERS").ok().as_deref(),
        ))
}

/// `VPN_CRYPTO_WORKERS`: a thread count from 1 to 64; unset, empty or anything else is 0 (one per
/// available CPU), with a warning for a value that is not a count.
fn crypto_workers(v: Option<&str>) -> usize {
    match v.map(str::trim) {
        None | Some("") => 0,
        Some(v) => match v.parse::<usize>() {
            Ok(n @ 1..=64) => n,
            _ => {
                tracing::warn!("VPN_CRYPTO_WORKERS={v:?} is not a count from 1 to 64; ignored");
                0
            }
        },
    }
}

/// The TUN, the bind and the device options on Linux, from what [`open_early`] opened.
pub(super) fn open(early: Early, daemon: &DaemonOptions) -> Result<Parts, crate::Error> {
    let fallback = early.name.clone();
    let tun = Arc::new(open_tun(early)?);
    let name = tun.name().unwrap_or(fallback);
    // Connected-socket readers share the device's one memory cap and hold none of it while
    // idle.
    let bind = Arc::new(
        StdNetBind::with_offload(daemon.udp_offload).with_connected_options(daemon.connected()),
    );
    let opts = data_path_options()
        .with_clock(Arc::new(BootTimeClock))
        .with_memory_budget(daemon.memory_budget);
    // Up and down also followed while the interface lives in another network namespace.
    let watched = NamespaceWatch::new(tun.clone())
        .map_err(|e| format!("TUN {name}: starting its namespace watch: {e}"))?;
    Ok(Parts {
        tun_stats: Some(tun_stats_fn(tun.clone())),
        tun: Arc::new(watched),
        name,
        bind,
        opts,
    })
}

/// The `tun.*` lines of the `stats=1` reply.
fn tun_stats_fn(tun: Arc<LinuxTun>) -> StatsFn {
    Box::new(move |out: &mut Statistics| {
        write_tun_stats(&tun.stats(), tun.offload_enabled(), tun.uso_enabled(), out);
    })
}

fn write_tun_stats(s: &TunStats, offload: bool, uso: bool, out: &mut Statistics) {
    let lines: [(&str, u64); 9] = [
        ("offload", u64::from(offload)),
        ("uso", u64::from(uso)),
        ("reads", s.reads),
        ("packets_read", s.packets_read),
        ("gso_splits", s.gso_splits),
        ("too_many_segments", s.too_many_segments),
        ("writes", s.writes),
        ("packets_written", s.packets_written),
        ("gro_coalesced", s.gro_coalesced),
    ];
    out.push_group("tun", lines);
}

#[cfg(test)]
mod tests {
    use super::super::write_bind_stats;
    use super::*;
    use vpn_conn::BindStats;

    #[test]
    fn crypto_workers_from_the_environment() {
        assert_eq!(crypto_workers(None), 0);
        assert_eq!(crypto_workers(Some("")), 0);
        assert_eq!(crypto_workers(Some("1")), 1);
        assert_eq!(crypto_workers(Some(" 2 ")), 2);
        for bad in ["0", "65", "-1", "two", "1.5", "99999999999999999999"] {
            assert_eq!(crypto_workers(Some(bad)), 0, "{bad}");
        }
    }

    #[test]
    fn tun_and_bind_lines() {
        let mut st = Statistics::new();
        let t = TunStats {
            reads: 3,
            gro_coalesced: 9,
            ..TunStats::default()
        };
        write_tun_stats(&t, true, false, &mut st);
        let b = BindStats {
            gso_messages: 4,
            ..BindStats::default()
        };
        write_bind_stats(&b, [Some((true, false)), None], &mut st);
        let out = st.to_string();
        for want in [
            "tun.offload=1\n",
            "tun.uso=0\n",
            "tun.reads=3\n",
            "tun.gro_coalesced=9\n",
            "bind.gso_messages=4\n",
            "bind.connected_dials=0\n",
            "bind.v4_gso=1\n",
            "bind.v4_gro=0\n",
        ] {
            assert!(out.contains(want), "{want} missing in {out}");
        }
        assert!(!out.contains("v6"));
        assert_eq!(out.parse::<Statistics>().unwrap(), st, "reads back");
    }
}
