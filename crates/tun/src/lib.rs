//! TUN devices: how the device reads IP packets from and writes them to the operating system.
//!
//! Reads and writes move batches. Every buffer carries headroom in front of the packet: the
//! device reads at `offset` 16 so the WireGuard transport header can be written in front of the
//! plaintext, and writes at `offset` 16 so a Linux TUN can place its 10-byte virtio-net header
//! there. Nothing is copied between the kernel call and the crypto.

#![warn(missing_docs)]
#![forbid(unsafe_code)]

pub mod darwin;
#[cfg(any(target_os = "linux", target_os = "android"))]
mod linux;
pub mod memory;
#[cfg(any(target_os = "linux", target_os = "android"))]
mod netns_watch;
pub mod offload;
#[cfg(any(target_os = "linux", target_os = "android", target_vendor = "apple"))]
mod shutdown;

#[cfg(target_vendor = "apple")]
pub use darwin::DarwinTun;
#[cfg(any(target_os = "linux", target_os = "android"))]
pub use linux::{LinuxTun, TunStats};
#[cfg(any(target_os = "linux", target_os = "android"))]
pub use netns_watch::NamespaceWatch;

use std::io;

/// Something happened to the interface (`tun.Event`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Event {
    /// The interface came up.
    Up,
    /// The interface went down.
    Down,
    /// The MTU may have changed; re-read [`Device::mtu`].
    MtuUpdate,
}

/// A TUN device (`tun.Device`). Shared between the reader thread, the per-peer writer threads and
/// the control path, so every method takes `&self`.
pub trait Device: Send + Sync {
    /// Reads one or more packets. Packet `i` goes to `bufs[i][offset..]` and its length to
    /// `sizes[i]`; returns how many were read. Blocks until at least one packet is available.
    /// After [`close`](Self::close) it returns an error.
    ///
    /// A device with segmentation offload may split one super-packet across several buffers. If
    /// they do not all fit it fills what it can and returns [`too_many_segments`] (the caller
    /// logs it and keeps reading).
    fn read(&self, bufs: &mut [&mut [u8]], sizes: &mut [usize], offset: usize)
        -> io::Result<usize>;

    /// Writes a batch of packets. Packet `i` is `bufs[i][offset..offset + sizes[i]]`. The bytes
    /// before `offset` are headroom and the bytes after the packet are spare room; an
    /// implementation may overwrite both (virtio header; Linux GRO rewrites only headers and
    /// headroom) and the packets' headers. Returns how many buffers were consumed.
    fn write(&self, bufs: &mut [&mut [u8]], sizes: &[usize], offset: usize) -> io::Result<usize>;

    /// The interface MTU.
    fn mtu(&self) -> io::Result<u32>;

    /// The interface name.
    fn name(&self) -> io::Result<String>;

    /// Interface events. The channel disconnects when the device closes.
    fn events(&self) -> crossbeam_channel::Receiver<Event>;

    /// Closes the device: blocked and later reads return errors, the event channel disconnects.
    fn close(&self) -> io::Result<()>;

    /// The largest batch `read` fills and `write` takes at once. Constant for the device's life.
    fn batch_size(&self) -> usize;
}

#[derive(Debug)]
struct PacketTooBig;

impl std::fmt::Display for PacketTooBig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("packet larger than the read buffer")
    }
}

impl std::error::Error for PacketTooBig {}

/// The error a read returns when a packet did not fit the buffer it was to go to (the buffers
/// were laid out for a smaller MTU than the interface had when the packet came): read again,
/// with buffers sized for the current [`Device::mtu`]. Where the kernel left the whole packet
/// (Linux) it waits for that read and is dropped only if it fails again; where the kernel cut
/// it (utun) it is already lost.
pub fn packet_too_big() -> io::Error {
    io::Error::other(PacketTooBig)
}

/// Whether `e` is [`packet_too_big`].
pub fn is_packet_too_big(e: &io::Error) -> bool {
    e.get_ref().is_some_and(|i| i.is::<PacketTooBig>())
}

#[derive(Debug)]
struct TooManySegments;

impl std::fmt::Display for TooManySegments {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("too many segments")
    }
}

impl std::error::Error for TooManySegments {}

/// The error a read returns when a super-packet had more segments than buffers
/// (`tun.ErrTooManySegments`): some segments were dropped, keep reading.
pub fn too_many_segments() -> io::Error {
    io::Error::other(TooManySegments)
}

/// Whether `e` is [`too_many_segments`].
pub fn is_too_many_segments(e: &io::Error) -> bool {
    e.get_ref().is_some_and(|i| i.is::<TooManySegments>())
}
