//! The daemon's Linux parts: a TUN named `<ifname>` (virtio-net offloads unless
//! `VPN_TUN_OFFLOAD=0`), the bind with UDP GSO/GRO, a TSC-interpolated CLOCK_BOOTTIME and
//! `SCHED_BATCH` for the light direction of bulk traffic.

use super::{memory_budget, Parts, DEFAULT_MTU};
use std::sync::Arc;
use std::time::Duration;
use vpn_conn::{ConnectedOptions, StdNetBind};
use vpn_device::clock::{BootTimeClock, Clock, Counter, CycleClock};
use vpn_device::sched::Scheduling;
use vpn_device::Options;
use vpn_ipc::Statistics;
use vpn_sys::cycles::{TimeJumps, Tsc};
use vpn_tun::{Device as _, LinuxTun, TunStats};
use vpn_uapi::StatsFn;

/// The daemon's clock: CLOCK_BOOTTIME, interpolated with the TSC where the kernel keeps time
/// with it (a lone packet then reads no kernel page for the time; `vpn_device::clock::CycleClock`).
/// `VPN_CYCLE_CLOCK=0` reads CLOCK_BOOTTIME every time.
///
/// A thread watches for time jumps (a resume from suspend, the wall clock set) and resets the
/// interpolation at once: a TSC that stood still through a suspend would otherwise hide the
/// sleep until the next real reading. Without that watch (no timerfd) the counter is not used.
fn daemon_clock() -> Arc<dyn Clock> {
    let choice = std::env::var("VPN_CYCLE_CLOCK").unwrap_or_default();
    match choice.as_str() {
        "quanta" => {
            return Arc::new(vpn_device::clock::AnchoredClock::new(
                BootTimeClock,
                vpn_device::clock::quanta_nanos(),
            ))
        }
        "coarse" => {
            return Arc::new(vpn_device::clock::AnchoredClock::new(BootTimeClock, || {
                u64::try_from(vpn_sys::cycles::monotonic_coarse().as_nanos()).unwrap_or(0)
            }))
        }
        _ => {}
    }
    let wanted = choice != "0";
    let Some(tsc) = Tsc::detect().filter(|_| wanted) else {
        return Arc::new(BootTimeClock);
    };
    let jumps = match TimeJumps::new(Duration::from_secs(60)) {
        Ok(j) => j,
        Err(e) => {
            tracing::info!("clock: no time-jump watch ({e}); reading CLOCK_BOOTTIME every time");
            return Arc::new(BootTimeClock);
        }
    };
    let clock = Arc::new(CycleClock::new(BootTimeClock, TscCounter(tsc)));
    let weak = Arc::downgrade(&clock);
    let spawned = std::thread::Builder::new()
        .name("clock-jumps".into())
        .spawn(move || watch_time_jumps(&jumps, &weak));
    if let Err(e) = spawned {
        tracing::info!("clock: no time-jump watch ({e}); reading CLOCK_BOOTTIME every time");
        return Arc::new(BootTimeClock);
    }
    clock
}

/// A data-path thread carrying the light direction of bulk traffic becomes a `SCHED_BATCH`
/// thread (see `vpn_device::sched`).
struct SchedBatch;

impl Scheduling for SchedBatch {
    fn set_light(&self, light: bool) -> std::io::Result<()> {
        vpn_sys::sched::set_batch(light)
    }
}

/// Resets `clock`'s interpolation whenever `jumps` says time jumped; returns once the clock
/// is gone (checked every period) or the watch fails (the clock then stops interpolating).
fn watch_time_jumps(
    jumps: &TimeJumps,
    clock: &std::sync::Weak<CycleClock<BootTimeClock, TscCounter>>,
) {
    loop {
        let jumped = jumps.wait();
        let Some(clock) = clock.upgrade() else {
            return;
        };
        match jumped {
            Ok(true) => clock.invalidate(),
            Ok(false) => {}
            Err(e) => {
                tracing::warn!("clock: time-jump watch failed ({e}); reading CLOCK_BOOTTIME only");
                clock.retire();
                return;
            }
        }
    }
}

/// The TSC as the device's cycle counter.
struct TscCounter(Tsc);

impl Counter for TscCounter {
    #[inline]
    fn cycles(&self) -> u64 {
        self.0.read()
    }
    fn fit(&self) -> bool {
        self.0.still_fit()
    }
}

fn open_tun(ifname: &str) -> Result<LinuxTun, crate::Error> {
    match super::inherited_fd("WG_TUN_FD")? {
        Some(fd) => Ok(LinuxTun::from_fd(fd, DEFAULT_MTU).map_err(|e| format!("WG_TUN_FD: {e}"))?),
        // `VPN_TUN_OFFLOAD=0`: a plain TUN without the virtio-net header (see `VPN_UDP_OFFLOAD`).
        None => {
            let offload = std::env::var("VPN_TUN_OFFLOAD").map_or(true, |v| v != "0");
            Ok(LinuxTun::create_with_offload(ifname, DEFAULT_MTU, offload)
                .map_err(|e| format!("failed to create TUN device {ifname}: {e}"))?)
        }
    }
}

/// The TUN, the bind and the device options on Linux.
pub(super) fn open(ifname: &str) -> Result<Parts, crate::Error> {
    let tun = Arc::new(open_tun(ifname)?);
    let name = tun.name().unwrap_or_else(|_| ifname.to_owned());
    // VPN_CONNECTED_SOCKETS=1: per-peer connected sockets (their readers share the device's
    // one memory cap and hold none of it while idle).
    let connected = ConnectedOptions::from_env();
    // `VPN_UDP_OFFLOAD=0` keeps UDP GSO/GRO off: for paths or kernels that mishandle them,
    // and for comparisons.
    let udp_offload = std::env::var("VPN_UDP_OFFLOAD").map_or(true, |v| v != "0");
    let bind = Arc::new(StdNetBind::with_offload(udp_offload).with_connected_options(connected));
    let opts = Options::default()
        .with_clock(daemon_clock())
        .with_memory_budget(memory_budget()?)
        // `VPN_SCHED_BATCH=0` leaves the data-path threads' policy alone under bulk load.
        .with_scheduling(
            std::env::var("VPN_SCHED_BATCH")
                .map_or(true, |v| v != "0")
                .then(|| Arc::new(SchedBatch) as Arc<dyn Scheduling>),
        )
        // `VPN_DATAGRAM_YIELD=0`: readers do not yield after writing a burst of datagrams.
        .with_datagram_yield(std::env::var("VPN_DATAGRAM_YIELD").map_or(true, |v| v != "0"));
    Ok(Parts {
        tun_stats: Some(tun_stats_fn(tun.clone())),
        tun,
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

    /// The TSC-interpolated boot clock agrees with CLOCK_BOOTTIME on this machine's real
    /// counter, and (as root) a clock set reaches it through the time-jump watch (skipped
    /// where the kernel does not keep time with the TSC).
    #[test]
    fn cycle_clock_tracks_boot_time() {
        let Some(tsc) = Tsc::detect() else {
            return;
        };
        let clock = Arc::new(CycleClock::new(BootTimeClock, TscCounter(tsc)));
        let calibrate = || {
            // Two agreeing one-second intervals, three refreshes: 6.7 s for the whole test,
            // idle or beside three busy loops. Before a refresh read again after an
            // interrupted reading, a loaded machine spoiled most first readings (10.9 s beside
            // three busy loops; a CI run failed after 21 s).
            for _ in 0..20 {
                std::thread::sleep(Duration::from_millis(1050));
                clock.refresh();
                if clock.is_interpolating() {
                    return;
                }
            }
            panic!("TSC rate did not settle within 21 s");
        };
        calibrate();
        for _ in 0..50 {
            let before = BootTimeClock.now();
            let t = clock.now();
            let after = BootTimeClock.now();
            // Within the clock's tolerance of the readings around it.
            assert!(
                t.as_nanos() + 1_000_000 >= before.as_nanos()
                    && t.as_nanos() <= after.as_nanos() + 1_000_000,
                "{before:?} {t:?} {after:?}"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        let jumps = TimeJumps::new(Duration::from_secs(1)).unwrap();
        let weak = Arc::downgrade(&clock);
        let watcher = std::thread::spawn(move || watch_time_jumps(&jumps, &weak));
        std::thread::sleep(Duration::from_millis(50));
        match vpn_sys::cycles::nudge_wall_clock() {
            Ok(()) => {}
            // Setting the clock needs CAP_SYS_TIME: not root, nothing more to check.
            Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => return,
            Err(e) => panic!("clock_adjtime: {e}"),
        }
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while clock.is_interpolating() && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(1));
        }
        assert!(
            !clock.is_interpolating(),
            "the clock set did not reset the interpolation"
        );
        calibrate();
        drop(clock);
        watcher.join().unwrap(); // returns within a period once the clock is gone
    }
}
