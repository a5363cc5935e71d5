//! `vpn [--foreground] <ifname>`: the userspace WireGuard daemon, started the way `wg-quick`
//! starts wireguard-go.
//!
//! The daemon creates the TUN (or adopts `WG_TUN_FD`), a [`StdNetBind`], a device on a clock
//! that counts suspend (key lifetimes keep running while the machine sleeps) and the UAPI
//! socket `/var/run/wireguard/<ifname>.sock` (or adopts `WG_UAPI_FD`). It stops, closing the
//! device and removing its socket, on SIGINT/SIGTERM, when the socket file is deleted, and when
//! the TUN goes away (the device closes itself on a TUN read error).
//!
//! What differs per system is in `linux.rs` (a TUN named `<ifname>`, offloads, a
//! CLOCK_BOOTTIME, scheduling) and `macos.rs` (a utun, `vpn utun` letting the
//! kernel pick the unit and writing its name to `WG_TUN_NAME_FILE`, the default options).
//!
//! The daemon's switches are [`DaemonOptions`] (flags, or their environment variables).
//!
//! On Linux it gives up root once the TUN, the UAPI socket and its watch exist, before it
//! starts any thread, and seals itself with a seccomp filter once every setup thread runs
//! (`sandbox/`; `--no-drop-privileges`, `--no-sandbox`).
//!
//! Without `--foreground` (or `WG_PROCESS_FOREGROUND=1`) it detaches: the parent re-executes
//! itself with its own arguments and `--foreground` in a new session, stdio on /dev/null
//! (stderr to `--log-file` if set), and passes one end of a socket pair in `VPN_DAEMON_READY_FD`. The child writes one
//! zero byte there once the TUN and the UAPI socket exist, or its error message if it fails;
//! the parent exits 0 only after the zero byte, so when `vpn wg0` returns 0, `wg` can
//! configure `wg0` at once.

use std::io::{Read, Write};
use std::os::fd::{AsFd, AsRawFd, RawFd};
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::{mpsc, Arc};
use vpn_conn::{BindStats, StdNetBind};
use vpn_device::{Device, Logger, Options};
use vpn_ipc::Statistics;
use vpn_sys::daemon as sys;
use vpn_uapi::{PreparedWatch, ServeOptions, StatsFn, UapiListener};

mod options;
pub use options::{command_line_flags, forget_empty_variables, DaemonOptions};

#[cfg(target_os = "linux")]
mod linux;
#[cfg(target_os = "linux")]
pub(crate) mod sandbox;
#[cfg(target_os = "linux")]
use linux as platform;
#[cfg(target_os = "linux")]
pub(crate) use linux::data_path_options;
#[cfg(target_os = "macos")]
mod macos;
#[cfg(target_os = "macos")]
use macos as platform;

/// The TUN MTU wireguard-go uses (`device.DefaultMTU`); wg-quick sets its own afterwards.
const DEFAULT_MTU: u32 = 1420;
/// The environment variable naming the child's readiness fd.
const READY_FD_ENV: &str = "VPN_DAEMON_READY_FD";

/// What the per-system code opens before the device exists.
struct Parts {
    tun: Arc<dyn vpn_tun::Device>,
    /// The interface's real name (`utun7` for `vpn utun`): the UAPI socket is named after it.
    name: String,
    bind: Arc<StdNetBind>,
    opts: Options,
    /// The `tun.*` lines of `stats=1`, where the TUN keeps counters.
    tun_stats: Option<StatsFn>,
}

/// Why the daemon stops.
#[derive(Debug)]
enum Stop {
    Signal(i32),
    SocketRemoved,
    DeviceClosed,
}

/// Runs the daemon for `ifname`; detaches first unless asked to stay in the foreground.
pub fn run(ifname: &str, foreground: bool, opts: &DaemonOptions) -> Result<(), crate::Error> {
    let foreground = foreground || std::env::var("WG_PROCESS_FOREGROUND").is_ok_and(|v| v == "1");
    if !foreground {
        return detach(opts);
    }
    let mut ready = match std::env::var(READY_FD_ENV) {
        Ok(v) => Some(UnixStream::from(sys::take_inherited_fd(parse_fd(
            READY_FD_ENV,
            &v,
        )?)?)),
        Err(_) => None,
    };
    if ready.is_some() {
        // Leave the session of whoever started us: their terminal's signals are not ours.
        if let Err(e) = sys::setsid() {
            tracing::debug!("setsid: {e}");
        }
    }
    match serve(ifname, opts, &mut ready) {
        Ok(()) => Ok(()),
        Err(e) => {
            if let Some(mut r) = ready {
                let msg = e.to_string();
                let _ = r.write_all(if msg.is_empty() {
                    b"failed"
                } else {
                    msg.as_bytes()
                });
            }
            Err(e)
        }
    }
}

fn parse_fd(var: &str, v: &str) -> Result<RawFd, crate::Error> {
    v.trim()
        .parse::<RawFd>()
        .ok()
        .filter(|&fd| fd >= 0)
        .ok_or_else(|| format!("{var}={v:?} is not a file descriptor number").into())
}

/// The fd an environment variable names (`WG_TUN_FD`, `WG_UAPI_FD`), if it is set. A value
/// that is not a number, names stdio or names no open fd is an error that says which variable
/// and fd it was (a supervisor that closed the fd before exec-ing us is the usual cause).
fn inherited_fd(var: &str) -> Result<Option<std::os::fd::OwnedFd>, crate::Error> {
    match std::env::var(var) {
        Ok(v) => {
            let raw = parse_fd(var, &v)?;
            let fd = sys::take_inherited_fd(raw).map_err(|e| {
                if raw <= 2 {
                    format!("{var}={raw}: fd {raw} is standard input, output or error, not an inherited descriptor")
                } else {
                    format!("{var}={raw}: fd {raw} is not open in this process ({e})")
                }
            })?;
            Ok(Some(fd))
        }
        Err(std::env::VarError::NotUnicode(v)) => {
            Err(format!("{var}={v:?} is not a file descriptor number").into())
        }
        Err(std::env::VarError::NotPresent) => Ok(None),
    }
}

/// Starts the foreground daemon in a new session and waits until it is ready or has failed.
/// The child gets this process's arguments (the interface and every flag) after
/// `--foreground`.
fn detach(opts: &DaemonOptions) -> Result<(), crate::Error> {
    let exe = std::env::current_exe().map_err(|e| format!("cannot find own executable: {e}"))?;
    let (mut parent_end, child_end) = UnixStream::pair()?;
    sys::set_inheritable(child_end.as_fd(), true)?;
    let stderr = match &opts.log_file {
        Some(p) => Stdio::from(
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(p)
                .map_err(|e| format!("{}: {e}", p.display()))?,
        ),
        None => Stdio::null(),
    };
    let mut child = Command::new(exe)
        .arg("--foreground")
        .args(std::env::args_os().skip(1))
        .env(READY_FD_ENV, child_end.as_raw_fd().to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(stderr)
        .spawn()
        .map_err(|e| format!("starting the daemon: {e}"))?;
    drop(child_end);
    let mut first = [0u8; 1];
    let n = loop {
        match parent_end.read(&mut first) {
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            other => break other.unwrap_or(0),
        }
    };
    if n == 1 && first[0] == 0 {
        return Ok(());
    }
    let mut rest = Vec::new();
    let _ = parent_end.take(4096).read_to_end(&mut rest);
    let status = child.wait()?;
    let mut msg = String::from_utf8_lossy(&first[..n]).into_owned();
    msg.push_str(&String::from_utf8_lossy(&rest));
    if msg.trim().is_empty() {
        msg = format!("the daemon exited ({status}) before it was ready");
    }
    Err(msg.into())
}

fn open_uapi(name: &str) -> Result<UapiListener, crate::Error> {
    match inherited_fd("WG_UAPI_FD")? {
        Some(fd) => {
            let raw = fd.as_raw_fd();
            Ok(UapiListener::from_listener(UnixListener::from(fd))
                .map_err(|e| format!("WG_UAPI_FD={raw}: {e}"))?)
        }
        None => Ok(UapiListener::bind(Path::new(vpn_uapi::DEFAULT_DIR), name)
            .map_err(|e| format!("failed to listen on UAPI socket for {name}: {e}"))?),
    }
}

/// `vpn utun` on macOS: writes the unit the kernel chose to the file `WG_TUN_NAME_FILE` names,
/// as wireguard-go does, for wg-quick's darwin script to find the interface: the name and a
/// newline, mode 0400, replacing an earlier file.
#[cfg_attr(not(target_os = "macos"), allow(dead_code))]
fn write_name_file(path: &Path, name: &str) -> std::io::Result<()> {
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o400)
        .open(path)?;
    f.write_all(format!("{name}\n").as_bytes())
}

fn serve(
    ifname: &str,
    opts: &DaemonOptions,
    ready: &mut Option<UnixStream>,
) -> Result<(), crate::Error> {
    let signals = [libc::SIGINT, libc::SIGTERM];
    #[cfg(target_os = "linux")]
    let plan = sandbox::Plan::new(opts)?;
    // Before any thread exists, so that every thread inherits the mask and only `sigwait`
    // below takes these signals.
    sys::block_signals(&signals)?;
    // As root and on this thread alone: the TUN's descriptor, the UAPI socket and its watch.
    let early = platform::open_early(ifname, opts)?;
    let name = early.name().to_owned();
    let listener = open_uapi(&name)?;
    let watch = PreparedWatch::open(&listener);
    // Linux: give up root and restrict this thread, before it starts any other.
    #[cfg(target_os = "linux")]
    let mut confined = plan.confine(Some(listener.path()))?;
    let parts = platform::open(early, opts)?;
    let dev = Arc::new(Device::with_options(
        parts.tun.clone(),
        parts.bind.clone(),
        Logger::new(parts.name.clone()),
        parts.opts,
    ));
    #[cfg(target_os = "linux")]
    let (sandbox_stats, keep_socket_file): (Option<StatsFn>, bool) = (
        Some(Box::new(confined.stats_fn())),
        confined.cleaner_removes_socket(),
    );
    #[cfg(not(target_os = "linux"))]
    let (sandbox_stats, keep_socket_file): (Option<StatsFn>, bool) = (None, false);
    let (tx, rx) = mpsc::channel();
    let removed = tx.clone();
    let mut server = listener.serve_with(
        dev.clone(),
        ServeOptions {
            extra_stats: Some(stats_fn(
                parts.tun_stats,
                parts.bind.clone(),
                dev.clone(),
                sandbox_stats,
            )),
            on_removed: Some(Box::new(move || {
                let _ = removed.send(Stop::SocketRemoved);
            })),
            watch: Some(watch),
            keep_socket_file,
        },
    );
    let closed = tx.clone();
    let waiter = dev.clone();
    std::thread::Builder::new()
        .name("wait-device".into())
        .spawn(move || {
            waiter.wait();
            let _ = closed.send(Stop::DeviceClosed);
        })?;
    std::thread::Builder::new()
        .name("signals".into())
        .spawn(move || match sys::wait_signal(&signals) {
            Ok(s) => {
                let _ = tx.send(Stop::Signal(s));
            }
            Err(e) => tracing::error!("waiting for signals: {e}"),
        })?;
    // Every thread of the setup exists: the seccomp filter goes on all of them at once.
    #[cfg(target_os = "linux")]
    confined.seal()?;
    tracing::info!(device = %name, "device started; UAPI socket {}", server.path().display());
    if let Some(mut r) = ready.take() {
        // The parent may have died meanwhile: nothing to tell then.
        let _ = r.write_all(&[0]);
    }
    let reason = rx.recv().unwrap_or(Stop::DeviceClosed);
    match reason {
        Stop::Signal(s) => tracing::info!(device = %name, "signal {s}: shutting down"),
        Stop::SocketRemoved => tracing::info!(device = %name, "UAPI socket removed: shutting down"),
        Stop::DeviceClosed => {
            tracing::info!(device = %name, "device closed (TUN gone?): shutting down")
        }
    }
    server.close();
    #[cfg(target_os = "linux")]
    confined.finish();
    dev.close();
    tracing::info!(device = %name, "shut down");
    Ok(())
}

/// The `tun.*` (where the system's TUN counts), `bind.*`, `memory.*` (the packet memory) and
/// `sandbox.*` (Linux: what the daemon kept after setup) lines of the `stats=1` reply.
fn stats_fn(
    tun: Option<StatsFn>,
    bind: Arc<StdNetBind>,
    dev: Arc<Device>,
    sandbox: Option<StatsFn>,
) -> StatsFn {
    // Weak: the server holding this closure must not keep the device alive.
    let dev = Arc::downgrade(&dev);
    Box::new(move |out: &mut Statistics| {
        if let Some(t) = &tun {
            t(out);
        }
        write_bind_stats(&bind.stats(), bind.offloads(), out);
        if let Some(d) = dev.upgrade() {
            let m = d.memory();
            out.push_group(
                "memory",
                [
                    ("budget", m.budget as u64),
                    ("allocated", m.allocated as u64),
                    ("in_use", m.in_use as u64),
                    ("peak", m.peak as u64),
                    ("waits", m.waits),
                ],
            );
        }
        if let Some(s) = &sandbox {
            s(out);
        }
    })
}

fn write_bind_stats(s: &BindStats, offloads: [Option<(bool, bool)>; 2], out: &mut Statistics) {
    let lines: [(&str, u64); 12] = [
        ("recv_calls", s.recv_calls),
        ("datagrams_received", s.datagrams_received),
        ("gro_super_datagrams", s.gro_super_datagrams),
        ("gro_in_place", s.gro_in_place),
        ("send_calls", s.send_calls),
        ("datagrams_sent", s.datagrams_sent),
        ("gso_messages", s.gso_messages),
        ("truncated_drops", s.truncated_drops),
        ("connected_open", s.connected_open),
        ("connected_dials", s.connected_dials),
        ("connected_datagrams_sent", s.connected_datagrams_sent),
        (
            "connected_datagrams_received",
            s.connected_datagrams_received,
        ),
    ];
    out.push_group("bind", lines);
    for (fam, o) in ["v4", "v6"].iter().zip(offloads) {
        if let Some((gso, gro)) = o {
            out.push("bind", &format!("{fam}_gso"), u64::from(gso));
            out.push("bind", &format!("{fam}_gro"), u64::from(gro));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn fd_numbers() {
        assert_eq!(parse_fd("X", " 5\n").unwrap(), 5);
        for bad in ["five", "-3", "", "3.0", "99999999999"] {
            assert!(parse_fd("X", bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn name_file_holds_the_name_and_a_newline_read_only_replacing_an_old_one() {
        let dir = std::env::temp_dir().join(format!("vpn-name-file-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("wg0.name");
        std::fs::write(&f, "utun12345678\n").unwrap();
        write_name_file(&f, "utun3").unwrap();
        assert_eq!(std::fs::read_to_string(&f).unwrap(), "utun3\n");
        // A file this call creates is read-only for its owner (wireguard-go's 0400).
        std::fs::remove_file(&f).unwrap();
        write_name_file(&f, "utun4").unwrap();
        let mode = std::fs::metadata(&f).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o400);
        assert_eq!(std::fs::read_to_string(&f).unwrap(), "utun4\n");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
