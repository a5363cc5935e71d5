//! `libwg-go.so` for Android: the six native methods of wireguard-android's
//! `com.wireguard.android.backend.GoBackend`, answered by the userspace device.
//!
//! The official tunnel library (`com.wireguard.android:tunnel`) loads a library named `wg-go`
//! and declares, as static methods of `GoBackend`:
//!
//! ```java
//! private static native int wgTurnOn(String ifName, int tunFd, String settings);
//! private static native void wgTurnOff(int handle);
//! private static native int wgGetSocketV4(int handle);
//! private static native int wgGetSocketV6(int handle);
//! @Nullable private static native String wgGetConfig(int handle);
//! private static native String wgVersion();
//! ```
//!
//! This crate exports exactly those, as `Java_com_wireguard_android_backend_GoBackend_<name>`
//! with a `jclass` second argument, so an app swaps the Go library for this one without a line
//! of Java changed (`docs/android.md`). What happens behind each call is in [`tunnel`]: the
//! rules Android sets for a data plane (sockets the host protects once, time asleep counted,
//! a phone's memory budget) are kept there.
//!
//! At the boundary: no panic unwinds into the JVM (each method catches it and returns its
//! failure value), no Java exception is left pending, and a null string, an unknown handle or
//! an fd that is not open gets -1 or null, never a crash.

#![deny(unsafe_op_in_unsafe_fn)]
#![warn(missing_docs)]
// The exported names are the JNI names of GoBackend's methods.
#![allow(non_snake_case)]

mod handles;
mod java;
mod log;
pub mod settings;
pub mod tunnel;

use handles::Handles;
use jni::objects::{JClass, JString};
use jni::sys::{jint, jstring};
use jni::JNIEnv;
use parking_lot::Mutex;
use std::sync::Arc;
use tunnel::Tunnel;

/// The live tunnels by handle.
static TUNNELS: Mutex<Handles<Arc<Tunnel>>> = Mutex::new(Handles::new());

/// What `wgVersion` reports: this library's name and version (the Go library reports its
/// module version; the app only displays it).
const VERSION: &str = concat!("vpn-jni ", env!("CARGO_PKG_VERSION"));

fn tunnel(handle: jint) -> Option<Arc<Tunnel>> {
    let t = TUNNELS.lock().get(handle);
    if t.is_none() {
        tracing::error!("no tunnel with handle {handle}");
    }
    t
}

/// `int wgTurnOn(String ifName, int tunFd, String settings)`: starts a tunnel on the TUN fd
/// `VpnService.establish()` gave (ownership passes in: the fd is closed when the tunnel ends,
/// or at once if it does not start), configured with the UAPI `set` text `settings`. Returns
/// the lowest free handle (≥ 0), or -1 with the reason in the log.
#[no_mangle]
pub extern "system" fn Java_com_wireguard_android_backend_GoBackend_wgTurnOn<'l>(
    mut env: JNIEnv<'l>,
    _class: JClass<'l>,
    if_name: JString<'l>,
    tun_fd: jint,
    settings: JString<'l>,
) -> jint {
    java::guard(&mut env, "wgTurnOn", -1, |env| {
        log::init();
        // Taken first, so that every way out below closes it.
        let fd = match tunnel::take_fd(tun_fd) {
            Ok(fd) => fd,
            Err(e) => {
                tracing::error!("wgTurnOn: TUN fd {tun_fd}: {e}");
                return -1;
            }
        };
        let (name, settings) = match (java::string(env, &if_name), java::string(env, &settings)) {
            (Ok(n), Ok(s)) => (n, s),
            (Err(e), _) => {
                tracing::error!("wgTurnOn: interface name: {e}");
                return -1;
            }
            (_, Err(e)) => {
                tracing::error!("wgTurnOn: settings: {e}");
                return -1;
            }
        };
        let t = match Tunnel::turn_on(&name, fd, &settings, &settings::Settings::from_env()) {
            Ok(t) => Arc::new(t),
            Err(e) => {
                tracing::error!(device = %name, "wgTurnOn: {e}");
                return -1;
            }
        };
        let handle = TUNNELS.lock().insert(t.clone());
        match handle {
            Some(h) => {
                tracing::info!(device = %name, "device started (handle {h})");
                h
            }
            None => {
                tracing::error!(device = %name, "wgTurnOn: no free handle");
                t.turn_off();
                -1
            }
        }
    })
}

/// `void wgTurnOff(int handle)`: stops the tunnel; its threads have ended and its sockets,
/// UAPI socket and TUN fd are closed when this returns. An unknown handle is logged.
#[no_mangle]
pub extern "system" fn Java_com_wireguard_android_backend_GoBackend_wgTurnOff<'l>(
    mut env: JNIEnv<'l>,
    _class: JClass<'l>,
    handle: jint,
) {
    java::guard(&mut env, "wgTurnOff", (), |_| {
        let t = TUNNELS.lock().remove(handle);
        match t {
            Some(t) => t.turn_off(),
            None => tracing::error!("wgTurnOff: no tunnel with handle {handle}"),
        }
    })
}

/// `int wgGetSocketV4(int handle)`: the fd of the IPv4 UDP socket that carries the tunnel's
/// datagrams, for `VpnService.protect()`; -1 for an unknown handle or when there is none.
#[no_mangle]
pub extern "system" fn Java_com_wireguard_android_backend_GoBackend_wgGetSocketV4<'l>(
    mut env: JNIEnv<'l>,
    _class: JClass<'l>,
    handle: jint,
) -> jint {
    java::guard(&mut env, "wgGetSocketV4", -1, |_| socket_fd(handle, false))
}

/// `int wgGetSocketV6(int handle)`: as `wgGetSocketV4`, for the IPv6 socket.
#[no_mangle]
pub extern "system" fn Java_com_wireguard_android_backend_GoBackend_wgGetSocketV6<'l>(
    mut env: JNIEnv<'l>,
    _class: JClass<'l>,
    handle: jint,
) -> jint {
    java::guard(&mut env, "wgGetSocketV6", -1, |_| socket_fd(handle, true))
}

fn socket_fd(handle: jint, v6: bool) -> jint {
    tunnel(handle).and_then(|t| t.socket_fd(v6)).unwrap_or(-1)
}

/// `String wgGetConfig(int handle)`: the UAPI `get` text (the backend reads `public_key`,
/// `rx_bytes`, `tx_bytes` and `last_handshake_time_*` from it), or null for an unknown handle.
#[no_mangle]
pub extern "system" fn Java_com_wireguard_android_backend_GoBackend_wgGetConfig<'l>(
    mut env: JNIEnv<'l>,
    _class: JClass<'l>,
    handle: jint,
) -> jstring {
    java::guard(&mut env, "wgGetConfig", std::ptr::null_mut(), |env| {
        let Some(t) = tunnel(handle) else {
            return std::ptr::null_mut();
        };
        match t.get_config() {
            Ok(text) => java::new_string(env, &text),
            Err(e) => {
                tracing::error!("wgGetConfig: {e}");
                std::ptr::null_mut()
            }
        }
    })
}

/// `String wgVersion()`: this library's version.
#[no_mangle]
pub extern "system" fn Java_com_wireguard_android_backend_GoBackend_wgVersion<'l>(
    mut env: JNIEnv<'l>,
    _class: JClass<'l>,
) -> jstring {
    java::guard(&mut env, "wgVersion", std::ptr::null_mut(), |env| {
        java::new_string(env, VERSION)
    })
}
