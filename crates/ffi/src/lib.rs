//! The C ABI for app hosts: a network extension on macOS/iOS links the static library, an
//! Android `VpnService` loads the dynamic one.
//!
//! The functions are WireGuardKit's (`wgTurnOn`, `wgSetConfig`, …) with its names and
//! semantics, plus libwg-go's `wgGetSocketV4`/`wgGetSocketV6`, [`wgSetMemoryBudget`] (the cap
//! on packet memory, for an extension under a per-process memory limit) and three helpers that
//! keep the network extension's logic in Rust: [`wgNetworkSettings`], [`wgUapiFromConfig`] and
//! [`wgFindUtunFd`]. `include/wireguard.h` is generated from this file by cbindgen (the test
//! `header_is_current` fails when it is stale). `docs/embedding.md` is the app author's guide.
//!
//! Rules at the boundary: a tunnel is named by a small non-negative handle (the first free one
//! is reused); no panic crosses into C (every entry point catches it and returns its error
//! value); a NULL or invalid argument (unknown handle, negative fd, text that is not UTF-8)
//! gets `-1`, an error code or NULL, never a crash; strings this library returns to be freed
//! come from `malloc`, so the caller releases them with `free()`.

#![deny(unsafe_op_in_unsafe_fn)]
#![warn(missing_docs)]
// The exported names are WireGuardKit's.
#![allow(non_snake_case)]

mod boundary;
mod bump;
mod clock;
mod handles;
mod logger;
pub mod settings;
mod tunnel;
pub mod utun;

use boundary::{guard, malloc_string, str_arg};
use handles::Handles;
use parking_lot::Mutex;
use std::ffi::{c_char, c_int, c_void};
use std::os::fd::{FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use tunnel::Tunnel;

/// The live tunnels by handle.
static TUNNELS: Mutex<Handles<Arc<Tunnel>>> = Mutex::new(Handles::new());

/// The packet-memory cap of the tunnels [`wgTurnOn`] starts (see [`wgSetMemoryBudget`]).
static MEMORY_BUDGET: AtomicUsize = AtomicUsize::new(vpn_device::DEFAULT_MEMORY_BUDGET);

/// `EINVAL`, negated as the IPC error codes are.
const ERR_INVALID: c_int = -22;

/// The version `wgVersion` reports.
static VERSION: &std::ffi::CStr = {
    match std::ffi::CStr::from_bytes_with_nul(concat!(env!("CARGO_PKG_VERSION"), "\0").as_bytes()) {
        Ok(v) => v,
        Err(_) => panic!("the package version holds a NUL byte"),
    }
};

fn tunnel(handle: c_int) -> Option<Arc<Tunnel>> {
    let t = TUNNELS.lock().get(handle);
    if t.is_none() {
        tracing::error!("no tunnel with handle {handle}");
    }
    t
}

/// A log callback: `context` is what was given to [`wgSetLogger`], `level` is 0 for verbose
/// lines and 1 for errors (and warnings), `msg` a NUL-terminated line valid during the call.
#[allow(non_camel_case_types)]
pub type logger_fn_t =
    Option<unsafe extern "C" fn(context: *mut c_void, level: c_int, msg: *const c_char)>;

/// Sends every log line of every tunnel to `logger_fn` with `context`. A later call replaces
/// the callback; NULL stops logging. The callback may be called from any thread.
///
/// # Safety
/// `logger_fn`, if not NULL, must be safe to call with `context` from any thread until it is
/// replaced.
#[no_mangle]
pub unsafe extern "C" fn wgSetLogger(context: *mut c_void, logger_fn: logger_fn_t) {
    guard("wgSetLogger", (), || logger::set(context, logger_fn))
}

/// The packet-memory cap, in bytes, of a process that never called [`wgSetMemoryBudget`]:
/// 32 MiB. A host whose configuration no longer names a cap passes it to put the default back
/// (the setting is the process's, and a network extension's process may outlive a start).
pub const WG_DEFAULT_MEMORY_BUDGET: i64 = 33554432;
/// The least cap [`wgSetMemoryBudget`] takes other than 0 (no cap): 1 MiB.
pub const WG_MIN_MEMORY_BUDGET: i64 = 1048576;
const _: () = assert!(
    WG_DEFAULT_MEMORY_BUDGET as usize == vpn_device::DEFAULT_MEMORY_BUDGET
        && WG_MIN_MEMORY_BUDGET as usize == vpn_device::MIN_MEMORY_BUDGET
);

/// Sets the cap on packet memory, in bytes, of every tunnel [`wgTurnOn`] starts after this call
/// (each tunnel has a cap of its own; a running tunnel keeps the one it started with). The cap
/// covers every reader's buffers and the packets in flight, both directions; a network
/// extension under a per-process memory limit lowers it from the default,
/// [`WG_DEFAULT_MEMORY_BUDGET`] (`docs/performance.md`, "Memory", measures a process at
/// 16 MiB). 0 means no cap. Returns 0, or -22 (`EINVAL`, the setting unchanged) for a
/// negative value or one below [`WG_MIN_MEMORY_BUDGET`] (the least the readers need; a tunnel
/// may still raise its cap to what its MTU and batches need).
#[no_mangle]
pub extern "C" fn wgSetMemoryBudget(bytes: i64) -> c_int {
    guard("wgSetMemoryBudget", ERR_INVALID, || {
        match memory_budget(bytes) {
            Ok(b) => {
                MEMORY_BUDGET.store(b, Ordering::Relaxed);
                0
            }
            Err(e) => {
                tracing::error!("wgSetMemoryBudget: {e}");
                ERR_INVALID
            }
        }
    })
}

/// `bytes` as a memory budget, or why it is not one.
fn memory_budget(bytes: i64) -> Result<usize, String> {
    let min = vpn_device::MIN_MEMORY_BUDGET;
    match usize::try_from(bytes) {
        Ok(0) => Ok(0),
        Ok(b) if b >= min => Ok(b),
        _ => Err(format!(
            "{bytes} bytes is not a budget (0 for none, else at least {min})"
        )),
    }
}

/// Starts a tunnel on the TUN `tun_fd` (a utun fd on Apple systems, a `/dev/net/tun` fd set to
/// `IFF_TUN|IFF_NO_PI` on Linux) with `settings`, a UAPI `set` body (`private_key=…` lines).
///
/// The fd is duplicated (the caller keeps and eventually closes its own), made non-blocking,
/// and its MTU is left as the caller set it. A new device with the default bind and the memory
/// budget of [`wgSetMemoryBudget`] is configured with `settings` and brought up. Returns the
/// tunnel's handle (≥ 0), or -1 if `settings` is NULL or not UTF-8, `tun_fd` is not a usable
/// TUN, the settings are refused or the device cannot come up (the reason is logged).
///
/// # Safety
/// `settings` is NULL or a NUL-terminated string valid for the duration of the call.
#[no_mangle]
pub unsafe extern "C" fn wgTurnOn(settings: *const c_char, tun_fd: i32) -> c_int {
    guard("wgTurnOn", -1, || {
        // SAFETY: the caller passes NULL or a NUL-terminated string valid during the call.
        let settings = match unsafe { str_arg(settings) } {
            Ok(s) => s,
            Err(e) => {
                tracing::error!("wgTurnOn: settings: {e}");
                return -1;
            }
        };
        if tun_fd < 0 {
            tracing::error!("wgTurnOn: invalid TUN fd {tun_fd}");
            return -1;
        }
        // SAFETY: fcntl(F_DUPFD_CLOEXEC) only reads the fd number; an fd that is not open fails
        // with EBADF, it touches no memory of ours.
        let dup = unsafe { libc::fcntl(tun_fd, libc::F_DUPFD_CLOEXEC, 0) };
        if dup < 0 {
            let e = std::io::Error::last_os_error();
            tracing::error!("wgTurnOn: unable to dup TUN fd {tun_fd}: {e}");
            return -1;
        }
        // SAFETY: `dup` is a fresh descriptor that nothing else owns; the OwnedFd closes it.
        let fd = unsafe { OwnedFd::from_raw_fd(dup) };
        let t = match Tunnel::turn_on(settings, fd, MEMORY_BUDGET.load(Ordering::Relaxed)) {
            Ok(t) => Arc::new(t),
            Err(e) => {
                tracing::error!("wgTurnOn: {e}");
                return -1;
            }
        };
        let handle = TUNNELS.lock().insert(t.clone());
        match handle {
            Some(h) => {
                tracing::info!(
                    "device started (handle {h}, packet memory cap {} bytes)",
                    t.memory_budget()
                );
                h
            }
            None => {
                tracing::error!("wgTurnOn: unable to find an empty handle");
                t.turn_off();
                -1
            }
        }
    })
}

/// Stops the tunnel `tun_handle` and frees its handle. Every thread of the tunnel has ended
/// and its sockets and TUN fd are closed when this returns. An unknown handle is ignored.
#[no_mangle]
pub extern "C" fn wgTurnOff(tun_handle: c_int) {
    guard("wgTurnOff", (), || {
        let t = TUNNELS.lock().remove(tun_handle);
        match t {
            Some(t) => t.turn_off(),
            None => tracing::error!("wgTurnOff: no tunnel with handle {tun_handle}"),
        }
    })
}

/// Applies a UAPI `set` body to the tunnel. Returns 0, the IPC error code (a negative errno:
/// -22 invalid key or value, -71 malformed line, -98 port in use, …) of the first failing line
/// (the lines before it stay applied), or -1 for an unknown handle or NULL / non-UTF-8
/// settings.
///
/// # Safety
/// `settings` is NULL or a NUL-terminated string valid for the duration of the call.
#[no_mangle]
pub unsafe extern "C" fn wgSetConfig(tun_handle: c_int, settings: *const c_char) -> i64 {
    guard("wgSetConfig", -1, || {
        let Some(t) = tunnel(tun_handle) else {
            return -1;
        };
        // SAFETY: the caller passes NULL or a NUL-terminated string valid during the call.
        let settings = match unsafe { str_arg(settings) } {
            Ok(s) => s,
            Err(e) => {
                tracing::error!("wgSetConfig: settings: {e}");
                return -1;
            }
        };
        match t.set_config(settings) {
            Ok(()) => 0,
            Err(e) => {
                tracing::error!("wgSetConfig: {e}");
                e.code()
            }
        }
    })
}

/// The tunnel's UAPI `get` dump (`private_key=…`, peers, statistics), in a string from
/// `malloc` that the caller frees with `free()`; NULL for an unknown handle or on failure.
#[no_mangle]
pub extern "C" fn wgGetConfig(tun_handle: c_int) -> *mut c_char {
    guard("wgGetConfig", std::ptr::null_mut(), || {
        let Some(t) = tunnel(tun_handle) else {
            return std::ptr::null_mut();
        };
        match t.get_config() {
            Ok(s) => malloc_string(&s),
            Err(e) => {
                tracing::error!("wgGetConfig: {e}");
                std::ptr::null_mut()
            }
        }
    })
}

/// After the host's network changed: re-opens the tunnel's sockets in the background (up to
/// 10 attempts, 0.5 s apart), then sends a keepalive to every peer with a current session so
/// it learns the new address at once. Returns immediately. An unknown handle is ignored.
#[no_mangle]
pub extern "C" fn wgBumpSockets(tun_handle: c_int) {
    guard("wgBumpSockets", (), || {
        if let Some(t) = tunnel(tun_handle) {
            if let Err(e) = t.bump_sockets() {
                tracing::error!("wgBumpSockets: unable to start: {e}");
            }
        }
    })
}

/// Stops peers with a configured endpoint from roaming to the address their packets come
/// from: on a phone the host decides the endpoint. An unknown handle is ignored.
#[no_mangle]
pub extern "C" fn wgDisableSomeRoamingForBrokenMobileSemantics(tun_handle: c_int) {
    guard("wgDisableSomeRoamingForBrokenMobileSemantics", (), || {
        if let Some(t) = tunnel(tun_handle) {
            t.disable_some_roaming();
        }
    })
}

/// The library's version, a static string (never freed).
#[no_mangle]
pub extern "C" fn wgVersion() -> *const c_char {
    guard("wgVersion", VERSION.as_ptr(), || VERSION.as_ptr())
}

fn socket_fd(name: &str, tun_handle: c_int, v6: bool) -> c_int {
    guard(name, -1, || {
        let Some(t) = tunnel(tun_handle) else {
            return -1;
        };
        t.socket_fd(v6).unwrap_or(-1)
    })
}

/// The fd of the tunnel's IPv4 UDP socket, so an Android host can `VpnService.protect()` it;
/// -1 for an unknown handle, when the socket is not open, or where the bind does not offer it
/// (Apple systems). The tunnel keeps ownership; the fd changes when the sockets are re-opened.
#[no_mangle]
pub extern "C" fn wgGetSocketV4(tun_handle: c_int) -> c_int {
    socket_fd("wgGetSocketV4", tun_handle, false)
}

/// The fd of the tunnel's IPv6 UDP socket; as [`wgGetSocketV4`].
#[no_mangle]
pub extern "C" fn wgGetSocketV6(tun_handle: c_int) -> c_int {
    socket_fd("wgGetSocketV6", tun_handle, true)
}

/// The network settings for a wg-quick configuration file, as a JSON object in a string from
/// `malloc` (the caller frees it): `ipv4` and `ipv6` (`addresses`, `included_routes`,
/// `excluded_routes`), `dns`, `mtu` or `tunnel_overhead_bytes`, `tunnel_remote_address`, and
/// `uapi`, the settings text for [`wgTurnOn`] with every endpoint resolved (once, with the
/// system resolver). A file that does not parse or an endpoint that does not resolve gives
/// `{"error": "<why, with the line>"}`; text that is not UTF-8 gives an error object too.
/// NULL only for a NULL argument or when memory runs out.
///
/// # Safety
/// `config` is NULL or a NUL-terminated string valid for the duration of the call.
#[no_mangle]
pub unsafe extern "C" fn wgNetworkSettings(config: *const c_char) -> *mut c_char {
    guard("wgNetworkSettings", std::ptr::null_mut(), || {
        // SAFETY: the caller passes NULL or a NUL-terminated string valid during the call.
        let v = match unsafe { str_arg(config) } {
            Err(boundary::StrError::Null) => return std::ptr::null_mut(),
            Err(e) => serde_json::json!({ "error": e.to_string() }),
            Ok(text) => match settings::network_settings(text, settings::system_resolve) {
                Ok(s) => s.to_json(),
                Err(e) => serde_json::json!({ "error": e }),
            },
        };
        malloc_string(&v.to_string())
    })
}

/// The UAPI `set` body for a wg-quick configuration file (endpoints resolved with the system
/// resolver), in a string from `malloc` the caller frees; NULL if `config` is NULL, not UTF-8,
/// does not parse or names an endpoint that does not resolve (the reason is logged).
///
/// # Safety
/// `config` is NULL or a NUL-terminated string valid for the duration of the call.
#[no_mangle]
pub unsafe extern "C" fn wgUapiFromConfig(config: *const c_char) -> *mut c_char {
    guard("wgUapiFromConfig", std::ptr::null_mut(), || {
        // SAFETY: the caller passes NULL or a NUL-terminated string valid during the call.
        let text = match unsafe { str_arg(config) } {
            Ok(t) => t,
            Err(e) => {
                tracing::error!("wgUapiFromConfig: {e}");
                return std::ptr::null_mut();
            }
        };
        match settings::network_settings(text, settings::system_resolve) {
            Ok(s) => malloc_string(&s.uapi),
            Err(e) => {
                tracing::error!("wgUapiFromConfig: {e}");
                std::ptr::null_mut()
            }
        }
    })
}

/// Inside a macOS/iOS network extension: the fd of the extension's utun socket (found by
/// scanning fds 0–1024 for the socket connected to `com.apple.net.utun_control`, as
/// WireGuardKit does), to pass to [`wgTurnOn`]; -1 if there is none or off Apple systems.
#[no_mangle]
pub extern "C" fn wgFindUtunFd() -> i32 {
    guard("wgFindUtunFd", -1, || this_process_utun().unwrap_or(-1))
}

/// The utun fd among this process's descriptors; there is none off Apple systems.
fn this_process_utun() -> Option<i32> {
    #[cfg(target_vendor = "apple")]
    return utun::find_utun_fd(&utun::SystemFds);
    #[cfg(not(target_vendor = "apple"))]
    None
}

#[cfg(test)]
mod tests;
