//! The Linux TUN device with TSO/USO on read and GRO on write (`tun/tun_linux.go`).
//!
//! [`LinuxTun::create`] opens the interface (`/dev/net/tun`, `TUNSETIFF` with `IFF_VNET_HDR`,
//! falling back to a plain TUN when the TCP offloads are refused); from there on both it and
//! [`LinuxTun::from_fd`] run the same fd-based code: read the flags back, require TCP offloads
//! when the fd has a virtio header, try USO, set non-blocking, and start the netlink listener.
//! The system calls themselves live in `vpn_sys::tun` (this crate forbids `unsafe`).
//!
//! Close wakes blocked readers with an eventfd: readers and writers first try the non-blocking
//! syscall and only on `EAGAIN` wait in `poll` on the TUN fd plus the eventfd. Under load that
//! costs nothing (the read succeeds without a poll); idle it costs no wake-ups (no timeout);
//! and, unlike closing the fd, it cannot race with fd-number reuse. The fd itself is closed on
//! drop.
//!
//! Batching on read: a read that had to wait returns the packet at once (the idle path is the
//! latency path); a read that found packets queued reads ahead, non-blocking, until the batch is
//! full or the queue is empty, so a flood of small packets costs one pipeline pass (and one
//! `sendmmsg`) per batch instead of per packet. A frame read ahead that does not fit the batch
//! stays in the scratch for the next call.

mod events;
#[cfg(test)]
mod tests;

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

use crossbeam_channel::Receiver;
use parking_lot::Mutex;
use vpn_sys::poll::EventFd;
use vpn_sys::tun::{self as sys, ControlSocket};

use crate::offload::split::{finish_single_in_place, frame_packets, split_frame, Split};
use crate::offload::{GroTable, MAX_PACKET, VIRTIO_NET_HDR_LEN};
use crate::shutdown::{closed, Shutdown};
use crate::{too_many_segments, Device, Event};

/// Packets per read/write (wireguard-go's `idealBatchSize`).
const OFFLOAD_BATCH: usize = 128;
/// wireguard-go's event channel capacity.
const EVENT_CAPACITY: usize = 5;
/// Whether the kernel may hand reads TSO/USO super-packets. Not on Android: their split is
/// tun-rs's, which has none for Android; a TUN with virtio headers keeps its offload flags
/// clear there (the kernel segments and checksums before the read), as a plain TUN does.
/// Writes coalesce (GRO) on either.
const READ_OFFLOADS: bool = cfg!(target_os = "linux");
/// The offloads a TUN with virtio headers must take (wireguard-go's `tunTCPOffloads`).
const TCP_OFFLOADS: libc::c_uint = sys::TUN_F_CSUM | sys::TUN_F_TSO4 | sys::TUN_F_TSO6;

/// Opens `name` with virtio headers and checks that the kernel takes the TCP offloads (which
/// [`LinuxTun::from_fd`] requires of such an fd): an error means "use a plain TUN".
fn open_with_offloads(name: &str) -> io::Result<OwnedFd> {
    let fd = sys::open(name, true)?;
    sys::set_offload(fd.as_fd(), TCP_OFFLOADS)?;
    Ok(fd)
}

/// Counters of a [`LinuxTun`], for statistics. Incremented per frame (`read(2)`/`write(2)` of
/// one packet or super-packet) or per call, never per segment.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TunStats {
    /// Frames read (`read(2)` calls that returned one packet or super-packet).
    pub reads: u64,
    /// Packets those frames gave.
    pub packets_read: u64,
    /// Frames that were GSO super-packets (split).
    pub gso_splits: u64,
    /// Super-packets with more segments than buffers (segments dropped).
    pub too_many_segments: u64,
    /// `write` calls.
    pub writes: u64,
    /// Packets handed to those writes.
    pub packets_written: u64,
    /// Of those, packets GRO merged into another one (not written on their own).
    pub gro_coalesced: u64,
}

#[derive(Default)]
struct Counters {
    reads: AtomicU64,
    packets_read: AtomicU64,
    gso_splits: AtomicU64,
    too_many_segments: AtomicU64,
    writes: AtomicU64,
    packets_written: AtomicU64,
    gro_coalesced: AtomicU64,
}

/// The reader's scratch: one frame (virtio header + up to 64 KiB).
struct ReadState {
    frame: Vec<u8>,
    /// Length of a frame read ahead into `frame` that the last batch had no room for (0: none);
    /// the next read starts with it.
    pending: usize,
    /// The last frame was a super-packet: read the next one into `frame` rather than straight
    /// into a packet buffer (it would only be copied to `frame` to be split).
    last_gso: bool,
    /// The pending frame already failed once for want of room: the caller has had its chance
    /// to lay its buffers out for the new MTU, so failing again drops it.
    retried: bool,
}

/// What [`LinuxTun::next_frame`] read.
enum FrameRead {
    /// A plain packet, finished in place in the caller's buffer: its length.
    InPlace(usize),
    /// A frame of this length in the scratch, to be split.
    Scratch(usize),
    /// Nothing there to read without waiting.
    Empty,
}

impl ReadState {
    /// Splits the frame of `n` bytes in the scratch into `bufs`. With packets already in hand
    /// (`in_hand`), a frame that does not fit whole or is malformed stays pending for the next
    /// call, which splits or reports it first (`None`); with none, its error is returned, and
    /// a packet too big for its buffer is kept for one more try.
    fn split_scratch(
        &mut self,
        n: usize,
        bufs: &mut [&mut [u8]],
        sizes: &mut [usize],
        offset: usize,
        in_hand: bool,
    ) -> io::Result<Option<Split>> {
        if in_hand {
            match frame_packets(&self.frame[..n]) {
                Ok(0) => return Ok(Some(Split::default())),
                Ok(k) if k <= bufs.len() => {}
                _ => {
                    self.pending = n;
                    return Ok(None);
                }
            }
        }
        let split = match split_frame(&mut self.frame[..n], bufs, sizes, offset) {
            Ok(split) => split,
            Err(_) if in_hand => {
                self.pending = n;
                return Ok(None);
            }
            Err(e) => {
                if crate::is_packet_too_big(&e) {
                    self.keep_too_big(n);
                }
                return Err(e);
            }
        };
        self.retried = false;
        self.last_gso = split.segmented;
        Ok(Some(split))
    }

    /// A frame of `n` bytes in the scratch failed for want of room: kept for one more try,
    /// dropped if it was that try.
    fn keep_too_big(&mut self, n: usize) {
        self.retried = !self.retried;
        if self.retried {
            self.pending = n;
        }
    }

    /// A plain packet of `n` bytes read into `head` (all it held) and the scratch (the rest):
    /// moved whole into the scratch, pending, its one failure counted.
    fn keep_split_plain(&mut self, head: &[u8], n: usize) {
        let n = n.min(self.frame.len());
        let h = head.len().min(n);
        self.frame.copy_within(..n - h, h);
        self.frame[..h].copy_from_slice(&head[..h]);
        self.pending = n;
        self.retried = true;
    }

    /// The pending plain packet into `out` if it fits now; if not, its second failure drops it.
    fn hand_over_plain(&mut self, out: &mut [u8], size: &mut usize) -> io::Result<usize> {
        let n = std::mem::take(&mut self.pending);
        self.retried = false;
        let dst = out.get_mut(..n).ok_or_else(crate::packet_too_big)?;
        dst.copy_from_slice(&self.frame[..n]);
        *size = n;
        Ok(1)
    }
}

/// A Linux TUN interface (layer 3, no packet info), with virtio-net offloads when available.
pub struct LinuxTun {
    fd: OwnedFd,
    name: String,
    /// Interface ioctls go through this socket, created in the device's network namespace.
    ctl: ControlSocket,
    vnet: bool,
    uso: bool,
    batch: usize,
    /// Signalled once by `close`; stays readable so every poller wakes.
    wake: Arc<EventFd>,
    /// The frame scratch and a frame read ahead that did not fit; also serializes readers.
    read_frame: Mutex<ReadState>,
    /// GRO tables, reused across writes; also serializes writers (as wireguard-go's writeOpMu).
    gro: Mutex<GroTable>,
    events: Receiver<Event>,
    shutdown: Shutdown,
    stats: Counters,
}

impl LinuxTun {
    /// Creates (or attaches to) the TUN interface `name` (empty: the kernel picks `tunN`) with
    /// offloads if the kernel allows them, and sets its MTU (0 leaves it). The interface is
    /// left down, as wireguard-go leaves it.
    pub fn create(name: &str, mtu: u32) -> io::Result<Self> {
        Self::create_with_offload(name, mtu, true)
    }

    /// [`create`](Self::create), with `offload` false asking for a plain TUN (one packet per
    /// `read(2)`, no virtio-net header): for kernels or paths that mishandle the offloads, and for
    /// comparisons.
    pub fn create_with_offload(name: &str, mtu: u32, offload: bool) -> io::Result<Self> {
        if mtu > 65535 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "MTU above 65535",
            ));
        }
        let fd = if offload && READ_OFFLOADS {
            match open_with_offloads(name) {
                Ok(fd) => fd,
                Err(e) => {
                    tracing::info!("TUN offloads unavailable ({e}); one packet per read(2)");
                    sys::open(name, false)?
                }
            }
        } else {
            sys::open(name, false)?
        };
        Self::from_fd(fd, mtu)
    }

    /// Whether the write path verifies each packet's transport checksum before merging it into a
    /// super-packet ([`GroTable::set_verify_checksums`]). Off by default: what a WireGuard device
    /// writes was authenticated by Poly1305 just before, and the kernel's WireGuard trusts its
    /// decrypted packets the same way. Turn it on when something else writes to this TUN.
    pub fn set_verify_checksums(&self, verify: bool) {
        self.gro.lock().set_verify_checksums(verify);
    }

    /// Wraps an open TUN fd (an embedder's, e.g. Android's VpnService). With `IFF_VNET_HDR`
    /// the TCP offloads are required and USO is tried; without it there is no offload (one
    /// packet per `read(2)`, batched by reading ahead). Sets the MTU unless `mtu` is 0.
    pub fn from_fd(fd: OwnedFd, mtu: u32) -> io::Result<Self> {
        Self::wrap_fd(fd, mtu, true)
    }

    /// [`LinuxTun::from_fd`] without the netlink listener (wireguard-go's
    /// `CreateUnmonitoredTUNFromFD`): no rtnetlink socket is opened and [`Device::events`]
    /// never reports anything, so the owner brings the device up and down itself. An Android
    /// app may not bind a `NETLINK_ROUTE` socket, and its `VpnService` owns the interface's
    /// state anyway. The MTU is left as the fd's owner set it.
    pub fn from_fd_unmonitored(fd: OwnedFd) -> io::Result<Self> {
        Self::wrap_fd(fd, 0, false)
    }

    fn wrap_fd(fd: OwnedFd, mtu: u32, monitored: bool) -> io::Result<Self> {
        let (name, flags) = sys::get_iff(fd.as_fd())?;
        if flags & libc::IFF_TUN == 0 || flags & libc::IFF_TAP != 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "not a layer-3 TUN fd",
            ));
        }
        let vnet = flags & libc::IFF_VNET_HDR != 0;
        let uso = if vnet && READ_OFFLOADS {
            sys::set_offload(fd.as_fd(), TCP_OFFLOADS)?;
            sys::set_offload(fd.as_fd(), TCP_OFFLOADS | sys::TUN_F_USO4 | sys::TUN_F_USO6).is_ok()
        } else {
            // Offload flags are per device: clear any a previous owner left, or the kernel
            // would hand us super-packets we cannot tell apart.
            if let Err(e) = sys::set_offload(fd.as_fd(), 0) {
                tracing::warn!("TUN {name}: clearing offload flags failed: {e}");
            }
            false
        };
        sys::set_nonblocking(fd.as_fd())?;
        let ctl = ControlSocket::new()?;
        if mtu > 0 {
            ctl.set_mtu(&name, mtu)?;
        }
        let ifindex = ctl.index(&name)?;
        let running = ctl.flags(&name)? & sys::IFF_RUNNING != 0;
        let wake = Arc::new(EventFd::new()?);
        let (tx, events) = crossbeam_channel::bounded(EVENT_CAPACITY);
        let (stop_tx, stop_rx) = crossbeam_channel::bounded(0);
        // Unmonitored, the sender is dropped here: the channel reports nothing, ever.
        let listener = if monitored {
            let nl = sys::netlink_link_socket()?;
            Some(events::spawn(
                nl,
                wake.clone(),
                ifindex,
                running,
                tx,
                stop_rx,
            )?)
        } else {
            None
        };
        tracing::debug!("TUN {name}: index {ifindex}, vnet {vnet}, uso {uso}");
        Ok(Self {
            fd,
            name,
            ctl,
            vnet,
            uso,
            batch: OFFLOAD_BATCH,
            wake,
            read_frame: Mutex::new(ReadState {
                frame: vec![0u8; VIRTIO_NET_HDR_LEN + MAX_PACKET],
                pending: 0,
                last_gso: false,
                retried: false,
            }),
            gro: Mutex::new({
                let mut gro = GroTable::new();
                gro.set_verify_checksums(false);
                gro
            }),
            events,
            shutdown: Shutdown::new(stop_tx, listener),
            stats: Counters::default(),
        })
    }

    /// Sets the interface MTU.
    pub fn set_mtu(&self, mtu: u32) -> io::Result<()> {
        self.ctl.set_mtu(&self.name, mtu)
    }

    /// Whether the fd carries virtio headers (TSO on read, TCP GRO on write).
    pub fn offload_enabled(&self) -> bool {
        self.vnet
    }

    /// Whether the kernel took USO (UDP segmentation on read, UDP GRO on write; Linux 6.2+).
    pub fn uso_enabled(&self) -> bool {
        self.uso
    }

    /// A snapshot of the counters.
    pub fn stats(&self) -> TunStats {
        let s = &self.stats;
        TunStats {
            reads: s.reads.load(Relaxed),
            packets_read: s.packets_read.load(Relaxed),
            gso_splits: s.gso_splits.load(Relaxed),
            too_many_segments: s.too_many_segments.load(Relaxed),
            writes: s.writes.load(Relaxed),
            packets_written: s.packets_written.load(Relaxed),
            gro_coalesced: s.gro_coalesced.load(Relaxed),
        }
    }

    fn is_closed(&self) -> bool {
        self.shutdown.is_closed()
    }

    /// Waits for the fd to be ready for `events`; an error once the device is closed.
    fn wait(&self, events: libc::c_short) -> io::Result<()> {
        if vpn_sys::poll::poll_or_wake(self.fd.as_raw_fd(), events, self.wake.as_fd())? {
            return Err(closed());
        }
        Ok(())
    }

    /// One `read(2)` that waits for data without blocking close. Also says whether it had to
    /// wait: a packet that found the reader idle is handed on at once (latency), while a reader
    /// that finds packets already queued is busy and reads ahead to fill its batch (throughput).
    fn read_once(&self, buf: &mut [u8]) -> io::Result<(usize, bool)> {
        self.read_waiting(|fd| sys::read(fd, buf))
    }

    /// [`Self::read_once`] with the read system call given.
    fn read_waiting(
        &self,
        mut read: impl FnMut(BorrowedFd<'_>) -> io::Result<usize>,
    ) -> io::Result<(usize, bool)> {
        let mut waited = false;
        loop {
            if self.is_closed() {
                return Err(closed());
            }
            match read(self.fd.as_fd()) {
                Ok(n) => return Ok((n, waited)),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    self.wait(libc::POLLIN)?;
                    waited = true;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(map_closed(e)),
            }
        }
    }

    /// One non-blocking `read(2)` for reading ahead: `None` when nothing is queued or on any
    /// error (a lasting error shows again on the next blocking read).
    fn try_read(&self, buf: &mut [u8]) -> Option<usize> {
        self.try_read_with(|fd| sys::read(fd, buf))
    }

    /// [`Self::try_read`] with the read system call given.
    fn try_read_with(
        &self,
        mut read: impl FnMut(BorrowedFd<'_>) -> io::Result<usize>,
    ) -> Option<usize> {
        loop {
            match read(self.fd.as_fd()) {
                Ok(n) => return Some(n),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => return None,
            }
        }
    }

    /// Writes one frame (virtio header included when enabled).
    fn write_once(&self, frame: &[u8]) -> io::Result<()> {
        self.write_pieces(&[io::IoSlice::new(frame)])
    }

    /// Writes one frame given in pieces (one piece: a plain `write`).
    fn write_pieces(&self, pieces: &[io::IoSlice<'_>]) -> io::Result<()> {
        loop {
            let r = match pieces {
                [one] => sys::write(self.fd.as_fd(), one),
                _ => sys::writev(self.fd.as_fd(), pieces),
            };
            match r {
                Ok(_) => return Ok(()),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => self.wait(libc::POLLOUT)?,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(map_closed(e)),
            }
        }
    }

    /// Reads frames with virtio headers into `bufs` at `offset`: plain packets straight into
    /// their buffers where they fit any frame, super-packets split out of the scratch; reads
    /// ahead without waiting while the first read did not have to wait.
    fn read_offload(
        &self,
        bufs: &mut [&mut [u8]],
        sizes: &mut [usize],
        offset: usize,
    ) -> io::Result<usize> {
        if self.is_closed() {
            return Err(closed());
        }
        let mut st = self.read_frame.lock();
        let st = &mut *st;
        // Counted once per call: frames read, super-packets among them.
        let (mut frames, mut splits) = (0u64, 0u64);
        let mut total = 0;
        // Whether to read ahead: not after a read that had to wait (see the module docs).
        let mut busy = true;
        while total < bufs.len() {
            let n = match std::mem::take(&mut st.pending) {
                0 => {
                    let (frame, waited) = self.next_frame(st, bufs[total], offset, total == 0)?;
                    busy &= !waited;
                    match frame {
                        FrameRead::Empty => break,
                        FrameRead::InPlace(len) => {
                            st.last_gso = false;
                            sizes[total] = len;
                            total += 1;
                            frames += 1;
                            if !busy {
                                break;
                            }
                            continue;
                        }
                        FrameRead::Scratch(n) => n,
                    }
                }
                n => n,
            };
            let (rest, rest_sizes) = (&mut bufs[total..], &mut sizes[total..]);
            let Some(split) = st.split_scratch(n, rest, rest_sizes, offset, total > 0)? else {
                break;
            };
            if split.packets == 0 {
                continue; // a super-packet without payload: nothing to hand out
            }
            frames += 1;
            splits += u64::from(split.segmented);
            if split.truncated {
                self.count_reads(frames, total + split.packets, splits);
                self.stats.too_many_segments.fetch_add(1, Relaxed);
                return Err(too_many_segments());
            }
            total += split.packets;
            if !busy {
                break;
            }
        }
        self.count_reads(frames, total, splits);
        Ok(total)
    }

    /// Reads the next frame (`first`: the call's first read, which may wait; later ones only
    /// take what is there). Straight into `buf` when it can take any frame, where a plain
    /// packet is finished in place; into the scratch after a super-packet (bulk TCP: the next
    /// is likely one too, and super-packets are split out of the scratch). A super-packet or
    /// malformed frame read into `buf` is copied to the scratch. Also says whether it waited.
    fn next_frame(
        &self,
        st: &mut ReadState,
        buf: &mut [u8],
        offset: usize,
        first: bool,
    ) -> io::Result<(FrameRead, bool)> {
        let direct = offset
            .checked_sub(VIRTIO_NET_HDR_LEN)
            .filter(|_| !st.last_gso)
            .filter(|_| buf.len().saturating_sub(offset) >= MAX_PACKET);
        // At most the scratch's size: a super-packet is copied there to be split.
        let max = st.frame.len();
        let target = match direct {
            Some(start) => &mut buf[start..start + max],
            None => &mut st.frame[..],
        };
        let room = target.len();
        let (n, waited) = if first {
            self.read_once(target)?
        } else {
            match self.try_read(target) {
                Some(n) => (n, false),
                None => return Ok((FrameRead::Empty, false)),
            }
        };
        let n = n.min(room);
        let Some(start) = direct else {
            return Ok((FrameRead::Scratch(n), waited));
        };
        let frame = &mut buf[start..start + n];
        match finish_single_in_place(frame) {
            Ok(Some(len)) => Ok((FrameRead::InPlace(len), waited)),
            // A super-packet (split next) or a malformed frame (split_frame reports it).
            Ok(None) | Err(_) => {
                st.frame[..n].copy_from_slice(frame);
                Ok((FrameRead::Scratch(n), waited))
            }
        }
    }

    /// Reads without virtio headers: one packet per `read(2)`, straight into its buffer, with
    /// the scratch behind it. A packet longer than its buffer (the MTU went up before the
    /// caller heard of it) lands partly in the scratch, is kept whole there, and the call says
    /// [`crate::packet_too_big`]; the next call hands it over if its buffers now take it.
    fn read_plain(
        &self,
        bufs: &mut [&mut [u8]],
        sizes: &mut [usize],
        offset: usize,
    ) -> io::Result<usize> {
        let mut st = self.read_frame.lock();
        let st = &mut *st;
        if bufs[0].len() < offset {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "offset past buffer",
            ));
        }
        if st.pending > 0 {
            let n = st.hand_over_plain(&mut bufs[0][offset..], &mut sizes[0])?;
            self.count_reads(1, n, 0);
            return Ok(n);
        }
        let mut total = 0;
        while let Some(buf) = bufs.get_mut(total).and_then(|b| b.get_mut(offset..)) {
            let room = buf.len();
            let mut pieces = [io::IoSliceMut::new(buf), io::IoSliceMut::new(&mut st.frame)];
            let read = |fd: BorrowedFd<'_>| sys::readv(fd, &mut pieces);
            let (n, waited) = if total == 0 {
                self.read_waiting(read)?
            } else {
                match self.try_read_with(read) {
                    Some(n) => (n, false),
                    None => break,
                }
            };
            if n > room {
                st.keep_split_plain(&bufs[total][offset..], n);
                if total == 0 {
                    return Err(crate::packet_too_big());
                }
                break;
            }
            sizes[total] = n;
            total += 1;
            // Idle (the first read waited): the packet goes at once. Busy: read ahead,
            // non-blocking, into the next buffers.
            if waited {
                break;
            }
        }
        self.count_reads(total as u64, total, 0);
        Ok(total)
    }

    fn count_reads(&self, frames: u64, packets: usize, splits: u64) {
        let s = &self.stats;
        s.reads.fetch_add(frames, Relaxed);
        s.packets_read.fetch_add(packets as u64, Relaxed);
        if splits > 0 {
            s.gso_splits.fetch_add(splits, Relaxed);
        }
    }

    fn write_offload(
        &self,
        bufs: &mut [&mut [u8]],
        sizes: &[usize],
        offset: usize,
    ) -> io::Result<()> {
        let mut gro = self.gro.lock();
        gro.coalesce(bufs, sizes, offset, self.uso)?;
        let mut first_err = None;
        // A merged packet goes out as its pieces (first packet, then the others' payloads):
        // the kernel gathers them while they are still in cache. A frame of a device batch has
        // at most OFFLOAD_BATCH pieces, gathered on the stack; a larger one (a caller writing
        // bigger batches) is copied into one buffer instead.
        let mut pieces = [io::IoSlice::new(&[]); OFFLOAD_BATCH];
        for &i in gro.to_write() {
            let mut n = 0;
            for (b, r) in gro.segments(i) {
                if let Some(p) = pieces.get_mut(n) {
                    *p = io::IoSlice::new(&bufs[b][r]);
                }
                n += 1;
            }
            let written = if n <= OFFLOAD_BATCH {
                self.write_pieces(&pieces[..n])
            } else {
                self.write_once(&gro.frame(bufs, i))
            };
            match written {
                Ok(()) => {}
                Err(e) if is_closed_err(&e) => return Err(e),
                // Like wireguard-go: keep writing the rest, report an error afterwards.
                Err(e) => {
                    first_err.get_or_insert(e);
                }
            }
        }
        self.stats
            .gro_coalesced
            .fetch_add(gro.coalesced() as u64, Relaxed);
        first_err.map_or(Ok(()), Err)
    }
}

impl Device for LinuxTun {
    fn read(
        &self,
        bufs: &mut [&mut [u8]],
        sizes: &mut [usize],
        offset: usize,
    ) -> io::Result<usize> {
        if bufs.is_empty() || sizes.len() < bufs.len() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "no buffers or too few sizes",
            ));
        }
        if self.vnet {
            return self.read_offload(bufs, sizes, offset);
        }
        self.read_plain(bufs, sizes, offset)
    }

    fn write(&self, bufs: &mut [&mut [u8]], sizes: &[usize], offset: usize) -> io::Result<usize> {
        if self.is_closed() {
            return Err(closed());
        }
        if bufs.len() != sizes.len() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "bufs and sizes differ in length",
            ));
        }
        self.stats.writes.fetch_add(1, Relaxed);
        self.stats
            .packets_written
            .fetch_add(bufs.len() as u64, Relaxed);
        if self.vnet {
            self.write_offload(bufs, sizes, offset)?;
        } else {
            let _one_writer = self.gro.lock();
            for (b, &n) in bufs.iter().zip(sizes) {
                let pkt = offset
                    .checked_add(n)
                    .and_then(|end| b.get(offset..end))
                    .ok_or_else(|| {
                        io::Error::new(io::ErrorKind::InvalidInput, "packet outside buffer")
                    })?;
                self.write_once(pkt)?;
            }
        }
        Ok(bufs.len())
    }

    fn mtu(&self) -> io::Result<u32> {
        self.ctl.mtu(&self.name)
    }

    fn name(&self) -> io::Result<String> {
        Ok(self.name.clone())
    }

    fn events(&self) -> Receiver<Event> {
        self.events.clone()
    }

    fn close(&self) -> io::Result<()> {
        self.shutdown.close(&self.name, || self.wake.signal())
    }

    fn batch_size(&self) -> usize {
        self.batch
    }
}

/// The TUN descriptor, for probes that need their own handle on it (`NamespaceWatch`).
impl AsFd for LinuxTun {
    fn as_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

impl Drop for LinuxTun {
    fn drop(&mut self) {
        if let Err(e) = self.close() {
            tracing::warn!("TUN {}: close failed: {e}", self.name);
        }
    }
}

fn is_closed_err(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::BrokenPipe
}

/// EBADFD from the TUN driver means the interface is gone (wireguard-go maps it to ErrClosed).
fn map_closed(e: io::Error) -> io::Error {
    if e.raw_os_error() == Some(libc::EBADFD) {
        closed()
    } else {
        e
    }
}
