//! The utun data path, generic over the [`Kernel`] seam so every rule runs against the
//! simulated kernel on any host:
//!
//! - **Batched read** (batch > 1): one `recvmsg_x` straight into the caller's buffers (the
//!   device lays them out in one slab), slot `i` being `bufs[i][offset - 4..]` capped at MTU +
//!   64, so the 4-byte header lands in the headroom and the packet at `offset` with no copy
//!   (packets are moved down only to close the hole a dropped one left). A packet
//!   that fills its slot while its IP header claims more was cut by an MTU that grew under us:
//!   it is dropped and the MTU cache cleared, so the next read uses the new stride.
//! - **Batched write**: the header is written into the 4 bytes before `offset` of each
//!   caller's buffer and the frames go out straight from there with `sendmsg_x`, resuming after
//!   a short send; a send that accepts nothing drops the rest (no spinning). When any packet +
//!   4 exceeds the page size every packet goes out with its own `write` (batched utun writes
//!   larger than a page collapse on Intel). Writing stops at the first packet that is neither
//!   IPv4 nor IPv6 (EAFNOSUPPORT). Each concurrent writer takes a send state from a pool.
//! - **Unbatched** (batch 1: batching unsupported): one `read`/`write` per packet, header in the
//!   4 bytes before `offset`.
//!
//! Waiting is the caller's: on EAGAIN the path calls `wait`, which on macOS polls the fd and
//! the device's wake pipe and fails once the device is closed.

use std::io;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

use parking_lot::Mutex;
use vpn_darwinbatch::UTUN_OPT_MAX_PENDING_PACKETS;
use vpn_darwinbatch::{Kernel, RecvBatch, SendBatch, MAX_BATCH, SYSPROTO_CONTROL};

use super::frame::{claimed_len, header_for, not_ip, HEADER_LEN};

/// Slot size beyond the MTU: room for the header and for noticing a packet larger than the
/// MTU we knew.
pub(crate) const SLOT_SLACK: usize = 64;
/// The utun pending-packet queue we ask for: a few batches (deeper measured slower in
/// wireguard-go's fork; the kernel default is 1).
pub(crate) const PENDING_PACKETS: i32 = 512;

/// What a wait is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Ready {
    Read,
    Write,
}

/// Waits for the descriptor to be ready; an error (closed) ends the read or write.
pub(crate) type Wait<'a> = &'a dyn Fn(Ready) -> io::Result<()>;

/// The MTU the read path sizes its slots by, queried on first use and after every clear.
pub(crate) struct MtuCache {
    mtu: AtomicU32,
    source: Box<dyn Fn() -> io::Result<u32> + Send + Sync>,
}

impl MtuCache {
    pub(crate) fn new(source: Box<dyn Fn() -> io::Result<u32> + Send + Sync>) -> MtuCache {
        MtuCache {
            mtu: AtomicU32::new(0),
            source,
        }
    }

    /// The cached MTU, or a fresh one (0 from the source is treated as unknown: 1500).
    pub(crate) fn get(&self) -> io::Result<u32> {
        match self.mtu.load(Relaxed) {
            0 => {
                let m = (self.source)()?;
                let m = if m == 0 { 1500 } else { m };
                self.mtu.store(m, Relaxed);
                Ok(m)
            }
            m => Ok(m),
        }
    }

    /// Forgets the cached MTU (it changed, or a packet showed it is stale).
    pub(crate) fn clear(&self) {
        self.mtu.store(0, Relaxed);
    }
}

/// Asks the kernel to queue [`PENDING_PACKETS`] for the reader; a failure is logged and
/// ignored (the utun works with the default, one packet per receive).
pub(crate) fn raise_pending_queue(k: &dyn Kernel, fd: RawFd, name: &str) {
    if let Err(e) = k.set_option(
        fd,
        SYSPROTO_CONTROL,
        UTUN_OPT_MAX_PENDING_PACKETS,
        PENDING_PACKETS,
    ) {
        tracing::info!("utun {name}: pending-packet queue not raised to {PENDING_PACKETS}: {e}");
    }
}

/// The batch size for a utun: [`MAX_BATCH`] when batched I/O is supported, else 1.
pub(crate) fn batch_size(batching: bool) -> usize {
    if batching {
        MAX_BATCH
    } else {
        1
    }
}

/// Counters of packets the read path dropped.
#[derive(Default)]
pub(crate) struct Drops {
    /// Frames shorter than the header.
    pub(crate) runts: AtomicU64,
    /// Packets cut by a stale MTU (slot full, IP header claims more).
    pub(crate) mtu_races: AtomicU64,
    /// Packets larger than the caller's buffer.
    pub(crate) oversized: AtomicU64,
}

struct ReadState {
    recv: RecvBatch,
    sizes: Vec<usize>,
}

/// A utun descriptor's data path.
pub(crate) struct UtunIo {
    k: &'static dyn Kernel,
    fd: RawFd,
    batch: usize,
    page: usize,
    pub(crate) mtu: Arc<MtuCache>,
    read: Mutex<ReadState>,
    send_pool: Mutex<Vec<SendBatch>>,
    pub(crate) drops: Drops,
}

fn invalid(msg: &'static str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, msg)
}

impl UtunIo {
    /// The data path of `fd` (non-blocking) through `k`, moving up to `batch` packets per
    /// call, with batched writes falling back to single ones above `page` bytes.
    pub(crate) fn new(
        k: &'static dyn Kernel,
        fd: RawFd,
        batch: usize,
        page: usize,
        mtu: Arc<MtuCache>,
    ) -> UtunIo {
        let batch = batch.clamp(1, MAX_BATCH);
        UtunIo {
            k,
            fd,
            batch,
            page,
            mtu,
            read: Mutex::new(ReadState {
                recv: RecvBatch::new(batch, false),
                sizes: vec![0; batch],
            }),
            send_pool: Mutex::new(Vec::new()),
            drops: Drops::default(),
        }
    }

    pub(crate) fn batch_size(&self) -> usize {
        self.batch
    }

    /// Reads at least one packet (waiting as needed): packet `i` to `bufs[i][offset..]`, its
    /// length to `sizes[i]`. `offset` must leave room for the header (≥ 4).
    pub(crate) fn read(
        &self,
        bufs: &mut [&mut [u8]],
        sizes: &mut [usize],
        offset: usize,
        wait: Wait<'_>,
    ) -> io::Result<usize> {
        if bufs.is_empty() || sizes.len() < bufs.len() {
            return Err(invalid("no buffers or too few sizes"));
        }
        if offset < HEADER_LEN || bufs[0].len() < offset {
            return Err(invalid("offset must be at least 4 and inside the buffer"));
        }
        if self.batch == 1 {
            return self.read_one(&mut bufs[0][offset - HEADER_LEN..], &mut sizes[0], wait);
        }
        let mut st = self.read.lock();
        loop {
            let got = self.read_batch(&mut st, bufs, sizes, offset);
            match got {
                Ok(0) => {} // everything dropped: read again
                Ok(n) => return Ok(n),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => wait(Ready::Read)?,
                Err(e) => return Err(e),
            }
        }
    }

    /// One `read` of one frame into `frame` (the header lands in its first 4 bytes).
    fn read_one(&self, frame: &mut [u8], size: &mut usize, wait: Wait<'_>) -> io::Result<usize> {
        loop {
            match self.k.read(self.fd, frame) {
                Ok(n) if n >= HEADER_LEN => {
                    *size = n - HEADER_LEN;
                    return Ok(1);
                }
                Ok(_) => {
                    self.drops.runts.fetch_add(1, Relaxed);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => wait(Ready::Read)?,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    }

    /// One `recvmsg_x` straight into the caller's buffers (which the device lays out in one
    /// slab): frame `i` at `bufs[i][offset - 4..]`, at most MTU + 64 bytes, its header in the
    /// headroom. Dropped frames leave holes that the packets after them are moved into (a copy
    /// only then). Ok(0) when every frame received was dropped.
    fn read_batch(
        &self,
        st: &mut ReadState,
        bufs: &mut [&mut [u8]],
        sizes: &mut [usize],
        offset: usize,
    ) -> io::Result<usize> {
        let stride = self.mtu.get()? as usize + SLOT_SLACK;
        let slots = bufs.len().min(self.batch);
        let start = offset - HEADER_LEN;
        let ReadState {
            recv,
            sizes: got_sizes,
        } = st;
        let mut views: [usize; MAX_BATCH] = [0; MAX_BATCH];
        let n = {
            let mut slot_bufs: [&mut [u8]; MAX_BATCH] = std::array::from_fn(|_| &mut [][..]);
            for ((s, view), b) in slot_bufs
                .iter_mut()
                .zip(views.iter_mut())
                .zip(bufs.iter_mut())
            {
                let b = b.get_mut(start..).unwrap_or_default();
                let len = b.len().min(stride);
                *view = len;
                *s = &mut b[..len];
            }
            recv.recv_with(
                self.k,
                self.fd,
                &mut slot_bufs[..slots],
                &mut got_sizes[..slots],
                None,
            )?
        };
        let mut out = 0;
        for (i, &size) in got_sizes[..n].iter().enumerate() {
            let Some(len) = size.checked_sub(HEADER_LEN) else {
                self.drops.runts.fetch_add(1, Relaxed);
                continue;
            };
            let packet = &bufs[i][offset..offset + len];
            if size == views[i] && claimed_len(packet).is_some_and(|c| c > len) {
                if views[i] == stride {
                    self.drops.mtu_races.fetch_add(1, Relaxed);
                    self.mtu.clear();
                } else {
                    self.drops.oversized.fetch_add(1, Relaxed);
                }
                continue;
            }
            if out != i {
                let (head, tail) = bufs.split_at_mut(i);
                let Some(dst) = head[out].get_mut(offset..offset + len) else {
                    self.drops.oversized.fetch_add(1, Relaxed);
                    continue;
                };
                dst.copy_from_slice(&tail[0][offset..offset + len]);
            }
            sizes[out] = len;
            out += 1;
        }
        Ok(out)
    }

    /// Writes packets `bufs[i][offset..offset + sizes[i]]`, each with its header in the 4
    /// bytes before `offset`. Stops at the first packet that is neither IPv4 nor IPv6 (the ones
    /// before it are written) with EAFNOSUPPORT. Returns how many buffers were consumed.
    pub(crate) fn write(
        &self,
        bufs: &mut [&mut [u8]],
        sizes: &[usize],
        offset: usize,
        wait: Wait<'_>,
    ) -> io::Result<usize> {
        if bufs.len() != sizes.len() {
            return Err(invalid("bufs and sizes differ in length"));
        }
        if offset < HEADER_LEN {
            return Err(invalid("offset must be at least 4"));
        }
        let (framed, stop) = frame_packets(bufs, sizes, offset);
        let frames = &bufs[..framed];
        let frame = |i: usize| &frames[i][offset - HEADER_LEN..offset + sizes[i]];
        let large = sizes[..framed].iter().any(|&n| n + HEADER_LEN > self.page);
        if self.batch == 1 || large {
            for i in 0..framed {
                self.write_one(frame(i), wait)?;
            }
        } else {
            self.write_batched(framed, &frame, wait)?;
        }
        match stop {
            Some(e) => Err(e),
            None => Ok(bufs.len()),
        }
    }

    /// One `write` of one frame, waiting while the descriptor is full.
    fn write_one(&self, frame: &[u8], wait: Wait<'_>) -> io::Result<()> {
        loop {
            match self.k.write(self.fd, frame) {
                Ok(_) => return Ok(()),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => wait(Ready::Write)?,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    }

    /// `sendmsg_x` of frames `0..n`, up to a batch per call, resuming after short sends.
    fn write_batched<'b>(
        &self,
        n: usize,
        frame: &dyn Fn(usize) -> &'b [u8],
        wait: Wait<'_>,
    ) -> io::Result<()> {
        let mut st = self
            .send_pool
            .lock()
            .pop()
            .unwrap_or_else(|| SendBatch::new(self.batch));
        let mut done = 0;
        let result = loop {
            if done == n {
                break Ok(());
            }
            let m = (n - done).min(self.batch);
            let mut staged: [&[u8]; MAX_BATCH] = [&[]; MAX_BATCH];
            for (j, s) in staged[..m].iter_mut().enumerate() {
                *s = frame(done + j);
            }
            match st.send_with(self.k, self.fd, &staged[..m], None) {
                Ok(0) => {
                    break Err(io::Error::new(
                        io::ErrorKind::WriteZero,
                        format!("utun accepted none of {} packets", n - done),
                    ))
                }
                Ok(a) => done += a,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    if let Err(e) = wait(Ready::Write) {
                        break Err(e);
                    }
                }
                Err(e) => break Err(e),
            }
        };
        self.send_pool.lock().push(st);
        result
    }
}

/// Writes each packet's header into the 4 bytes before `offset`, up to the first packet that
/// is not IP (or lies outside its buffer). Returns how many were framed and, if it stopped
/// early, why.
fn frame_packets(
    bufs: &mut [&mut [u8]],
    sizes: &[usize],
    offset: usize,
) -> (usize, Option<io::Error>) {
    for (i, (b, &n)) in bufs.iter_mut().zip(sizes).enumerate() {
        let Some(packet) = offset.checked_add(n).and_then(|end| b.get(offset..end)) else {
            return (i, Some(invalid("packet outside buffer")));
        };
        let Some(h) = header_for(packet) else {
            return (i, Some(not_ip()));
        };
        b[offset - HEADER_LEN..offset].copy_from_slice(&h);
    }
    (bufs.len(), None)
}
