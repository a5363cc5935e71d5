//! Batched datagram I/O on darwin: `recvmsg_x` and `sendmsg_x`, private libSystem calls that
//! move a batch of datagrams per system call on UDP sockets and utun descriptors.
//!
//! - [`RecvBatch`] / [`SendBatch`] own the reusable header, iovec and address arrays and stage
//!   them afresh for every call (see [`batch`](RecvBatch) for why that matters on darwin).
//! - [`supported`] says whether batching may be used: the symbols are compiled in (cargo feature
//!   `spi`, on by default; off for App Store builds) **and** a once-per-process loopback
//!   self-test passed. `msghdr_x` is not in a public header, so a kernel whose layout or
//!   behaviour differs from what this crate pins degrades to one datagram per call instead of
//!   corrupting I/O. [`unconnected_supported`] runs a second self-test for unconnected sockets
//!   (per-datagram destinations and reported sources).
//! - [`Kernel`] is the narrow seam between the batching rules and the operating system:
//!   [`system`] on Apple targets, [`sim::SimKernel`] (feature `sim`) everywhere, a model of
//!   the documented darwin behaviour that the unit tests of this crate, `vpn-tun` and
//!   `vpn-conn` run against on Linux.
//!
//! The crate compiles on every target; off Apple targets [`supported`] is false and the
//! system-facing calls fail with [`io::ErrorKind::Unsupported`].

#![warn(missing_docs)]
#![deny(unsafe_op_in_unsafe_fn)]

mod batch;
mod msghdr;
mod selftest;
pub mod sockaddr;

#[cfg(any(test, feature = "sim"))]
pub mod sim;
#[cfg(all(feature = "spi", target_vendor = "apple"))]
mod spi;
#[cfg(target_vendor = "apple")]
mod system;

pub use batch::{RecvBatch, SendBatch};
pub use msghdr::{IoVec, MsgHdrX};
pub use selftest::{check_connected, check_unconnected};

use std::ffi::c_int;
use std::io;
use std::net::SocketAddr;
use std::os::fd::RawFd;

/// The largest batch the data plane moves per call (wireguard-go's `idealBatchSize`).
pub const MAX_BATCH: usize = 128;

/// darwin's `MSG_TRUNC` (`msg_flags` of a datagram that did not fit; Linux's value differs).
pub const MSG_TRUNC: c_int = 0x10;
/// The socket level of kernel-control options (utun's).
pub const SYSPROTO_CONTROL: c_int = 2;
/// `UTUN_OPT_MAX_PENDING_PACKETS`: how many packets the utun queues for its reader
/// (kernel default 1).
pub const UTUN_OPT_MAX_PENDING_PACKETS: c_int = 16;

/// The calls the darwin data plane makes on a socket or utun descriptor. [`system`] calls
/// libSystem; [`sim::SimKernel`] models the documented kernel behaviour.
///
/// Errors are `io::Error`s built from the host's errno values, so
/// [`io::ErrorKind::WouldBlock`] and [`io::ErrorKind::Interrupted`] mean the same on every host.
pub trait Kernel: Send + Sync {
    /// `recvmsg_x(fd, msgs, msgs.len(), flags)`: how many datagrams arrived.
    ///
    /// # Safety
    /// Every header's name pointer (when `namelen > 0`), iovec array and each iovec's buffer
    /// must be valid for writes of the lengths they state for the whole call.
    unsafe fn recvmsg_x(&self, fd: RawFd, msgs: &mut [MsgHdrX], flags: c_int) -> io::Result<usize>;

    /// `sendmsg_x(fd, msgs, msgs.len(), flags)`: how many datagrams the kernel accepted.
    ///
    /// # Safety
    /// Every header's name pointer (when `namelen > 0`), iovec array and each iovec's buffer
    /// must be valid for reads of the lengths they state for the whole call.
    unsafe fn sendmsg_x(&self, fd: RawFd, msgs: &[MsgHdrX], flags: c_int) -> io::Result<usize>;

    /// `read(2)`: one datagram (on a utun, one frame with its 4-byte header).
    fn read(&self, fd: RawFd, buf: &mut [u8]) -> io::Result<usize>;

    /// `write(2)`: one datagram.
    fn write(&self, fd: RawFd, buf: &[u8]) -> io::Result<usize>;

    /// `recvfrom(2)`: one datagram and its source.
    fn recv_from(&self, fd: RawFd, buf: &mut [u8]) -> io::Result<(usize, Option<SocketAddr>)>;

    /// `sendto(2)`: one datagram to `dst`.
    fn send_to(&self, fd: RawFd, buf: &[u8], dst: &SocketAddr) -> io::Result<usize>;

    /// `setsockopt(2)` with an `int` value.
    fn set_option(&self, fd: RawFd, level: c_int, name: c_int, value: c_int) -> io::Result<()>;
}

/// The operating system's kernel (libSystem).
#[cfg(target_vendor = "apple")]
pub fn system() -> &'static dyn Kernel {
    &system::System
}

/// Whether batched I/O may be used: compiled in (cargo feature `spi`, on by default), on an
/// Apple target, and the once-per-process connected loopback self-test passed (4 datagrams in
/// one `sendmsg_x`, read back with `recvmsg_x`, compared). Always false off Apple targets.
pub fn supported() -> bool {
    #[cfg(all(feature = "spi", target_vendor = "apple"))]
    {
        static SUPPORTED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
        *SUPPORTED.get_or_init(|| match system::self_test_connected() {
            Ok(()) => {
                tracing::debug!("darwin batched I/O: connected self-test passed");
                true
            }
            Err(e) => {
                tracing::warn!("darwin batched I/O disabled, self-test failed: {e}");
                false
            }
        })
    }
    #[cfg(not(all(feature = "spi", target_vendor = "apple")))]
    {
        false
    }
}

/// Once per process: whether batched I/O on unconnected sockets works (per-datagram
/// destinations honoured, sources reported), after [`supported`]. The error says why not.
pub fn unconnected_supported() -> io::Result<()> {
    #[cfg(all(feature = "spi", target_vendor = "apple"))]
    {
        static UNCONNECTED: std::sync::OnceLock<Result<(), String>> = std::sync::OnceLock::new();
        let r = UNCONNECTED.get_or_init(|| {
            if !supported() {
                return Err("connected self-test failed".into());
            }
            let r = system::self_test_unconnected();
            if let Err(e) = &r {
                tracing::warn!("darwin batched I/O on unconnected sockets disabled: {e}");
            }
            r
        });
        r.clone().map_err(io::Error::other)
    }
    #[cfg(not(all(feature = "spi", target_vendor = "apple")))]
    {
        Err(unsupported())
    }
}

/// The error of a batch call where batching is not compiled in.
#[cfg(not(all(feature = "spi", target_vendor = "apple")))]
pub(crate) fn unsupported() -> io::Error {
    io::Error::new(
        io::ErrorKind::Unsupported,
        if cfg!(target_vendor = "apple") {
            "batched I/O not compiled in (vpn-darwinbatch feature `spi` off)"
        } else {
            "recvmsg_x/sendmsg_x exist only on Apple targets"
        },
    )
}

#[cfg(all(test, not(target_vendor = "apple")))]
mod tests {
    use super::*;

    #[test]
    fn batching_is_unsupported_off_apple_targets() {
        assert!(!supported());
        assert_eq!(
            unconnected_supported().unwrap_err().kind(),
            io::ErrorKind::Unsupported
        );
        let sock = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        use std::os::fd::AsFd;
        let mut buf = [0u8; 16];
        let err = RecvBatch::new(4, false)
            .recv(sock.as_fd(), &mut [&mut buf[..]], &mut [0], None)
            .unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::Unsupported);
        let err = SendBatch::new(4)
            .send(sock.as_fd(), &[&buf[..]], None)
            .unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::Unsupported);
    }
}
