//! Reading a pair socket straight into the device's buffers (`docs/bind.md`, "Reading a pair
//! socket").
//!
//! The device hands a reader `batch` buffers of one packet each. Without UDP GRO, `recvmmsg`
//! writes datagram `i` into buffer `i`, offering the kernel at most the current slot size; when
//! that slot is larger than some buffers (past the MTU's slots of the device's slab), datagram
//! `j` goes to the first buffer of run `j` instead, as with GRO.
//! With GRO one read returns a super-datagram of up to 64 segments; it is read into the first
//! buffer of a run of [`GRO_SEGMENTS`](crate::linux::segments::GRO_SEGMENTS) and its second and later segments are copied into the
//! following buffers of that run (the only copy on this path: device buffers hold one packet
//! each). Entries a read leaves unused have size 0.

use std::io;
use std::os::fd::AsFd;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};

use vpn_sys::mmsg::{RecvBatch, RecvMeta};

use super::slots::{initial_tier, is_transient, should_pause, stride_for, COALESCE_DELAY};
pub(super) use super::slots::{READ_BATCH, SLOT_TIERS};
use super::{canonical, Inner, Pair};
use crate::linux::segments::{split, Layout};
use crate::{err_closed, is_err_closed, Endpoint, ReceiveFunc, StickySource};

/// The state behind one pair socket's receive function.
pub(super) struct PairReader {
    pair: Arc<Pair>,
    set: Weak<Inner>,
    batch: RecvBatch,
    meta: Vec<RecvMeta>,
    tier: usize,
    pause: bool,
}

/// The receive function for `pair`, the buffer size and the batch to ask the device for.
pub(super) fn receive_func(
    pair: Arc<Pair>,
    set: Weak<Inner>,
    max_datagram: usize,
) -> (ReceiveFunc, usize, usize) {
    let tier = if pair.fam.gro {
        SLOT_TIERS.len() - 1
    } else {
        initial_tier(max_datagram)
    };
    let mut r = PairReader {
        pair,
        set,
        batch: RecvBatch::new(READ_BATCH),
        meta: vec![RecvMeta::default(); READ_BATCH],
        tier,
        pause: false,
    };
    let f: ReceiveFunc = Box::new(move |bufs, sizes, eps| r.read(bufs, sizes, eps));
    (f, SLOT_TIERS[SLOT_TIERS.len() - 1], READ_BATCH)
}

impl PairReader {
    fn closed(&self) -> io::Result<usize> {
        Err(err_closed())
    }

    /// One `recvmmsg` on the pair's socket, datagram `i` into `bufs[i * stride]`, at most
    /// `slot` bytes each.
    fn recv_once(
        &mut self,
        bufs: &mut [&mut [u8]],
        stride: usize,
        slot: usize,
    ) -> io::Result<usize> {
        self.pair.fam.with_sock(|sock| {
            self.batch
                .recv_strided(sock.as_fd(), bufs, stride, slot, &mut self.meta)
        })
    }

    /// A read failed for good: the pair leaves the set (its peer falls back to the shared
    /// socket) and this reader ends.
    fn failed(&self, e: io::Error) -> io::Result<usize> {
        tracing::debug!(pair = ?self.pair.key, "connected socket read failed: {e}");
        if let Some(set) = self.set.upgrade() {
            set.remove(&self.pair);
        }
        self.closed()
    }

    /// The receive function's body.
    fn read(
        &mut self,
        bufs: &mut [&mut [u8]],
        sizes: &mut [usize],
        eps: &mut [Endpoint],
    ) -> io::Result<usize> {
        if bufs.is_empty() {
            // A wait for data (see `ReceiveFunc`); a pair socket's errors are for the read.
            return self.pair.fam.wait_readable().map(|()| 0);
        }
        let n = bufs.len().min(sizes.len()).min(eps.len());
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "connected reader: no buffers",
            ));
        }
        let (bufs, sizes, eps) = (&mut bufs[..n], &mut sizes[..n], &mut eps[..n]);
        let gro = self.pair.fam.gro;
        loop {
            if self.pause {
                self.pause = false;
                std::thread::sleep(COALESCE_DELAY);
            }
            if self.pair.fam.is_closed() {
                return self.closed();
            }
            let slot = SLOT_TIERS[self.tier];
            let stride = stride_for(bufs, slot, gro);
            let capacity = n.div_ceil(stride).min(self.batch.capacity());
            let got = match self.recv_once(bufs, stride, slot) {
                _ if self.pair.fam.is_closed() => return self.closed(),
                Ok(got) => got,
                Err(e) if is_transient(&e) => continue,
                Err(e) if is_err_closed(&e) => return Err(e),
                Err(e) => return self.failed(e),
            };
            if got == 0 {
                continue;
            }
            self.pause = should_pause(got, capacity);
            let remote = self.pair.key.remote;
            let src = Some(StickySource {
                ip: self.pair.key.local,
                ifindex: 0,
            });
            let meta = &self.meta[..got.min(self.meta.len())];
            let layout = Layout {
                stride,
                slot,
                gro,
                scatter: 0,
            };
            let f = split(bufs, sizes, eps, meta, layout, |m| Endpoint {
                // Datagrams queued before `connect` may come from anyone: keep their source.
                dst: m.addr.map(canonical).unwrap_or(remote),
                src,
            });
            if f.grow && self.tier + 1 < SLOT_TIERS.len() {
                self.tier += 1;
            }
            self.pair.used.store(true, Ordering::Relaxed);
            if let Some(set) = self.set.upgrade() {
                set.counters.received(f.datagrams, f.gro, f.oversize);
            }
            if f.entries > 0 {
                return Ok(f.entries);
            }
        }
    }
}
