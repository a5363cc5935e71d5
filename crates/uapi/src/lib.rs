//! The UAPI socket: `/var/run/wireguard/<ifname>.sock`, served to `wg` and `wg-quick`
//! (the protocol's text and its typed model: `docs/ipc.md`).
//!
//! [`UapiListener::bind`] creates the socket the way wireguard-go does (directory 0755, socket
//! 0600, a stale file from a dead daemon replaced, a live one left alone) and
//! [`UapiListener::serve`] answers `set=1` / `get=1` requests on it, one thread per
//! connection. The request framing and the text are `vpn-ipc`'s. One private request is added for
//! `vpn show`: `stats=1` (followed by an empty line) dumps the batching counters
//! ([`vpn_ipc::Statistics`]); `wg` never sends it.
//!
//! The server watches its socket path (inotify on Linux, a kqueue watch of its directory on
//! macOS, a once-a-second look where neither works) and reports when the file disappears: an
//! administrator stops a userspace WireGuard daemon by deleting its socket.
//!
//! Everything but the client is Unix-only; Linux and macOS are built and tested.

#![forbid(unsafe_code)]

pub mod client;
#[cfg(unix)]
mod listener;
#[cfg(unix)]
mod server;
#[cfg(all(test, unix))]
mod tests;
#[cfg(unix)]
mod watch;

#[cfg(unix)]
pub use listener::UapiListener;
#[cfg(unix)]
pub use server::{PreparedWatch, ServeOptions, StatsFn, UapiServer};

use std::path::{Path, PathBuf};

/// Where the sockets live (wireguard-go's `socketDirectory`).
pub const DEFAULT_DIR: &str = "/var/run/wireguard";

/// The socket of interface `ifname` in `dir`: `<dir>/<ifname>.sock`.
pub fn socket_path(dir: &Path, ifname: &str) -> PathBuf {
    dir.join(format!("{ifname}.sock"))
}
