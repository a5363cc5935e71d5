//! Binds: how the device sends and receives WireGuard datagrams.
//!
//! A [`Bind`] owns the UDP side. [`Bind::open`] returns one [`ReceiveFunc`] per socket; the
//! device runs each in a reader thread of its own. Binds that create sockets later (connected
//! sockets) hand their new receive functions to the device through a [`ReceiveFuncStarter`].
//!
//! Everything moves in batches: a receive function fills up to `bufs.len()` datagrams per call,
//! and [`Bind::send`] takes a whole batch for one endpoint so an implementation can use
//! `sendmmsg` and UDP GSO.
//!
//! `StdNetBind` exists on Linux (`recvmmsg`/`sendmmsg`, UDP GSO/GRO, sticky sources) and on
//! Apple targets (one datagram per call, or `recvmsg_x`/`sendmsg_x` with
//! `with_batched_io`; `with_dont_fragment`; see `docs/darwin-bind.md`), both with the same
//! [`connected`] sockets. [`memory`] is an in-process network for tests, on every platform.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

#[cfg(any(target_os = "linux", target_os = "android", target_vendor = "apple"))]
mod bind_core;
#[cfg(any(target_os = "linux", target_os = "android", target_vendor = "apple"))]
pub mod connected;
#[cfg(any(
    target_vendor = "apple",
    all(test, any(target_os = "linux", target_os = "android"))
))]
#[cfg_attr(not(target_vendor = "apple"), allow(dead_code))]
mod darwin;
mod endpoint;
mod error;
#[cfg(any(target_os = "linux", target_os = "android"))]
mod linux;
pub mod memory;
#[cfg(any(target_os = "linux", target_os = "android", target_vendor = "apple"))]
mod ports;
#[cfg(any(target_os = "linux", target_os = "android", target_vendor = "apple"))]
mod stats;

#[cfg(any(target_os = "linux", target_os = "android", target_vendor = "apple"))]
pub use connected::{ConnectedConfig, ConnectedOptions, ConnectedSockets, ConnectedStats};
#[cfg(target_vendor = "apple")]
pub use darwin::StdNetBind;
pub use endpoint::{Endpoint, StickySource};
pub use error::{err_closed, is_err_closed, ErrUdpGsoDisabled};
#[cfg(any(target_os = "linux", target_os = "android"))]
pub use linux::StdNetBind;
#[cfg(any(target_os = "linux", target_os = "android", target_vendor = "apple"))]
pub use stats::BindStats;

use std::io;
use std::sync::Arc;

/// The ideal number of datagrams per receive or send call (`conn.IdealBatchSize`).
pub const IDEAL_BATCH_SIZE: usize = 128;

/// Reads a batch of datagrams.
///
/// Datagram `i` is written to the start of `bufs[i]`, its length to `sizes[i]` and its source
/// to `eps[i]`. Returns how many entries were filled (at least one; a size of 0 means "skip this
/// entry"). Blocks until something arrives. After the bind is closed it returns an error for
/// which [`is_err_closed`] holds, and that ends the reader.
///
/// `bufs`, `sizes` and `eps` have the same length, at most the bind's [`Bind::batch_size`] for
/// functions returned by `open`, or the batch size named to the [`ReceiveFuncStarter`].
///
/// Called with no buffers (all three empty), a receive function waits until a datagram is
/// ready to read, reads nothing and returns `Ok(0)` (or [`err_closed`] once closed). The
/// device waits this way before it takes memory for a read, so an idle socket costs it none.
/// A function that returns any other error to such a call is read with buffers in hand.
pub type ReceiveFunc =
    Box<dyn FnMut(&mut [&mut [u8]], &mut [usize], &mut [Endpoint]) -> io::Result<usize> + Send>;

/// Runs receive functions that a bind creates after [`Bind::open`] (connected sockets).
///
/// The device installs one before every `open`. The bind calls [`start`](Self::start) for each
/// new receive function; the device runs it in a reader thread of its own with `batch_size`
/// buffers. `buf_size` is the largest datagram the function may read: the device's buffers of
/// a batch of 64 or more hold that much in the first of every 64 (where a GRO read puts its
/// super-datagram), the others a datagram of the tunnel MTU (at least 2048 bytes). `start` returns `false` once the device is closing the
/// bind: the function is then never called and the bind must close the socket behind it (an
/// unread socket would swallow the peer's traffic). A started function that returns
/// [`err_closed`] ends only its own reader.
///
/// `start` may be called synchronously from inside `open` or from a send path while the bind
/// holds its own locks: implementations must not block.
pub trait ReceiveFuncStarter: Send + Sync {
    /// Starts a reader for `f`; `false` if the device no longer accepts readers.
    fn start(&self, f: ReceiveFunc, buf_size: usize, batch_size: usize) -> bool;

    /// Whether `datagram`, read on a shared socket, counts toward its (local, remote) pair's
    /// connected-socket threshold. The bind carries datagrams without knowing the protocol in
    /// them; the device names the messages that mean a busy pair (its data messages:
    /// handshakes and strangers' junk open no socket). Called once per datagram on the read
    /// path, with connected sockets on: keep it cheap. Default: every datagram counts.
    fn counts_toward_pair(&self, datagram: &[u8]) -> bool {
        let _ = datagram;
        true
    }
}

/// The UDP side of a device (`conn.Bind`).
///
/// All methods take `&self`: a bind is shared between the device's sender threads and its
/// control path, so implementations use interior mutability.
pub trait Bind: Send + Sync {
    /// Opens the sockets on `port` (0 picks one) and returns one receive function per socket and
    /// the port actually bound. Fails if already open.
    fn open(&self, port: u16) -> io::Result<(Vec<ReceiveFunc>, u16)>;

    /// Closes the sockets. Every receive function, including started ones, returns
    /// [`err_closed`] promptly afterwards. Closing a closed bind is not an error.
    fn close(&self) -> io::Result<()>;

    /// Sets the fwmark (`SO_MARK`) on the sockets now and on every later (re)bind; 0 clears it.
    fn set_mark(&self, mark: u32) -> io::Result<()>;

    /// Sends a batch of datagrams, in order, to one endpoint. `bufs.len()` is at most
    /// [`batch_size`](Self::batch_size). May return [`ErrUdpGsoDisabled`] wrapping the result of
    /// a retry without segmentation offload.
    fn send(&self, bufs: &[&[u8]], ep: &Endpoint) -> io::Result<()>;

    /// Parses an endpoint as written in UAPI (`1.2.3.4:51820`, `[fd00::1]:51820`).
    fn parse_endpoint(&self, s: &str) -> io::Result<Endpoint> {
        Endpoint::parse(s)
    }

    /// The largest batch [`send`](Self::send) takes and receive functions fill.
    fn batch_size(&self) -> usize;

    /// Installs the device's starter for receive functions created after `open`. Binds that
    /// never create such functions ignore it.
    fn set_receive_func_starter(&self, starter: Arc<dyn ReceiveFuncStarter>) {
        let _ = starter;
    }
}
