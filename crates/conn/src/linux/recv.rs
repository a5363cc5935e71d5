//! The receive side: one [`Reader`] per socket, behind the `ReceiveFunc` that `open` returns.
//!
//! Without UDP GRO the kernel writes datagrams straight into the caller's buffers. With GRO a
//! single read may return a super-datagram of up to 64 KiB made of equal-size segments (the
//! last may be shorter). When the caller's buffers allow it (the device's do: a run of 64
//! buffers per message, the first able to take 64 KiB) a read goes straight into them too, one
//! message per run, and only the second and later segments of a super-datagram are copied
//! ([`super::segments`]); a lone datagram on a quiet tunnel is not copied at all. Otherwise
//! reads go into a private scratch area of [`GRO_MSGS`] × 64 KiB and the segments are copied
//! out, in order, one per caller buffer. wireguard-go copies the same way (out of the last caller
//! slots); the scratch area additionally works with caller buffers of any size, and segments
//! that do not fit the remaining caller buffers stay queued for the next call instead of being
//! dropped. Only a datagram (or segment) larger than the caller's buffer is dropped and
//! counted.
//!
//! With connected sockets on, each call also counts the bytes of the datagrams the device
//! names busy ([`ReceiveFuncStarter::counts_toward_pair`](crate::ReceiveFuncStarter)) per
//! (source, local destination) run and asks the set to dial that pair
//! ([`ConnectedSockets::dial`]): a peer may send to a local address other than the one our
//! route picks, and a connected socket only receives its exact pair.

use std::io;
use std::os::fd::AsFd;
use std::sync::Arc;

use vpn_sys::mmsg::{RecvBatch, RecvMeta};

use super::segments::{split, Layout, GRO_SEGMENTS};
use super::Family;
use crate::connected::ConnectedSockets;
use crate::stats::Stats;
use crate::{err_closed, Endpoint, StickySource, IDEAL_BATCH_SIZE};

/// The largest UDP datagram (and GRO super-datagram) the kernel hands up.
const MAX_DATAGRAM: usize = 65_535;
/// Socket reads per call with GRO on through the scratch area: as wireguard-go, one per 64 caller
/// buffers, at least one.
const GRO_MSGS: usize = 2;

fn endpoint(m: &RecvMeta) -> Option<Endpoint> {
    Some(Endpoint {
        dst: m.addr?,
        src: m.pktinfo.map(|p| StickySource {
            ip: p.addr,
            ifindex: p.ifindex,
        }),
    })
}

/// Received datagrams not yet handed to the caller: `scratch[off..end]` in segments of `seg`.
#[derive(Clone, Copy, Default)]
struct Pending {
    off: usize,
    end: usize,
    seg: usize,
    ep: Endpoint,
}

/// Scratch area and queue for GRO reads.
struct Gro {
    scratch: Vec<u8>,
    pending: [Pending; GRO_MSGS],
    head: usize,
    tail: usize,
}

/// What one pass over freshly read or queued datagrams produced.
#[derive(Default)]
struct Split {
    filled: usize,
    gro: usize,
    dropped: usize,
}

impl Gro {
    fn new() -> Self {
        Gro {
            scratch: vec![0; GRO_MSGS * MAX_DATAGRAM],
            pending: [Pending::default(); GRO_MSGS],
            head: 0,
            tail: 0,
        }
    }

    fn has_pending(&self) -> bool {
        self.head < self.tail
    }

    /// Reads up to `msgs` datagrams into the scratch regions. Must not be called with
    /// datagrams still pending (they live in those regions).
    fn read(
        &mut self,
        batch: &mut RecvBatch,
        fd: std::os::fd::BorrowedFd<'_>,
        msgs: usize,
        meta: &mut [RecvMeta],
    ) -> io::Result<usize> {
        let (a, b) = self.scratch.split_at_mut(MAX_DATAGRAM);
        let mut regions: [&mut [u8]; GRO_MSGS] = [a, b];
        let msgs = msgs.clamp(1, GRO_MSGS);
        batch.recv(fd, &mut regions[..msgs], meta)
    }

    /// Queues what a read returned: region `i` holds `meta[i]`.
    fn load(&mut self, meta: &[RecvMeta], split: &mut Split) {
        self.head = 0;
        self.tail = 0;
        for (i, m) in meta.iter().take(GRO_MSGS).enumerate() {
            if m.truncated {
                split.dropped += 1;
                continue;
            }
            let Some(ep) = endpoint(m) else { continue };
            if m.len == 0 {
                continue;
            }
            let gro = usize::from(m.gro_size);
            if gro > 0 && m.len > gro {
                split.gro += 1;
            }
            let off = i * MAX_DATAGRAM;
            self.pending[self.tail] = Pending {
                off,
                end: off + m.len,
                seg: if gro > 0 { gro } else { m.len },
                ep,
            };
            self.tail += 1;
        }
    }

    /// Copies queued segments into the caller's buffers, in order, until either runs out.
    fn drain(
        &mut self,
        bufs: &mut [&mut [u8]],
        sizes: &mut [usize],
        eps: &mut [Endpoint],
        split: &mut Split,
    ) {
        let Gro {
            scratch,
            pending,
            head,
            tail,
        } = self;
        let mut out = 0usize;
        while *head < *tail {
            let p = &mut pending[*head];
            while p.off < p.end {
                let (Some(dst), Some(size), Some(ep)) =
                    (bufs.get_mut(out), sizes.get_mut(out), eps.get_mut(out))
                else {
                    split.filled += out;
                    return; // out of caller buffers: the rest stays queued
                };
                let seg_end = p.off.saturating_add(p.seg).min(p.end);
                let src = scratch.get(p.off..seg_end).unwrap_or_default();
                p.off = seg_end;
                match dst.get_mut(..src.len()) {
                    Some(d) if !src.is_empty() => {
                        d.copy_from_slice(src);
                        *size = src.len();
                        *ep = p.ep;
                        out += 1;
                    }
                    _ => split.dropped += 1,
                }
            }
            *head += 1;
        }
        *head = 0;
        *tail = 0;
        split.filled += out;
    }
}

/// The state behind one socket's receive function.
pub(super) struct Reader {
    fam: Arc<Family>,
    stats: Arc<Stats>,
    batch: RecvBatch,
    meta: Vec<RecvMeta>,
    gro: Option<Gro>,
    /// The segment size the previous direct read was mostly coalesced by, which the next one
    /// scatters by (0: that read had no large coalesced message; read each message into its
    /// run's first buffer).
    seg_guess: usize,
    connected: Option<Arc<ConnectedSockets>>,
}

impl Reader {
    pub(super) fn new(
        fam: Arc<Family>,
        stats: Arc<Stats>,
        connected: Option<Arc<ConnectedSockets>>,
    ) -> Self {
        let gro = fam.gro.then(Gro::new);
        Reader {
            fam,
            stats,
            batch: RecvBatch::new(IDEAL_BATCH_SIZE),
            meta: vec![RecvMeta::default(); IDEAL_BATCH_SIZE],
            gro,
            seg_guess: 0,
            connected,
        }
    }

    /// The `ReceiveFunc` body: a read, then the connected-socket accounting of what it got.
    pub(super) fn read(
        &mut self,
        bufs: &mut [&mut [u8]],
        sizes: &mut [usize],
        eps: &mut [Endpoint],
    ) -> io::Result<usize> {
        let n = self.read_batch(bufs, sizes, eps)?;
        if let Some(c) = &self.connected {
            c.count_received(bufs, sizes, eps, n, false);
        }
        Ok(n)
    }

    /// One batch into `bufs`: segments still queued first, else a socket read (straight into
    /// the buffers where they are laid out for it, see [`Self::direct_runs`]) handed up as
    /// datagrams; reads again when one yields nothing to hand up.
    fn read_batch(
        &mut self,
        bufs: &mut [&mut [u8]],
        sizes: &mut [usize],
        eps: &mut [Endpoint],
    ) -> io::Result<usize> {
        if bufs.is_empty() {
            // A wait for data (see `ReceiveFunc`): segments still queued count as data.
            if !self.gro.as_ref().is_some_and(Gro::has_pending) {
                self.fam.wait_readable()?;
            }
            return Ok(0);
        }
        let n = bufs
            .len()
            .min(sizes.len())
            .min(eps.len())
            .min(self.batch.capacity());
        if n == 0 {
            return Ok(0);
        }
        let (bufs, sizes, eps) = (&mut bufs[..n], &mut sizes[..n], &mut eps[..n]);
        let runs = self.direct_runs(bufs);
        loop {
            if self.fam.is_closed() {
                return Err(err_closed());
            }
            if let Some(filled) = self.drain_pending(bufs, sizes, eps) {
                if filled > 0 {
                    return Ok(filled);
                }
                continue;
            }
            let scatter =
                runs > 0 && self.seg_guess > 0 && scatter_fits(&bufs[..runs], self.seg_guess);
            let got = match self.recv_once(bufs, runs, scatter) {
                _ if self.fam.is_closed() => return Err(err_closed()),
                Ok(got) => got,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            if got == 0 {
                continue;
            }
            let entries = if runs > 0 {
                let (b, sz, ep) = (&mut bufs[..runs], &mut sizes[..runs], &mut eps[..runs]);
                self.hand_over_direct(b, sz, ep, got, scatter)
            } else {
                self.hand_over_copied(bufs, sizes, eps, got)
            };
            if entries > 0 {
                return Ok(entries);
            }
        }
    }

    /// With GRO, reads go straight into the caller's buffers when they are laid out for it: a
    /// run of [`GRO_SEGMENTS`] buffers per message, the first able to take a whole
    /// super-datagram. Returns the buffers those whole runs cover, or 0 to read through the
    /// scratch area (small or few buffers, or GRO off). Only whole runs: a message placed in a
    /// shorter last run could lose segments.
    fn direct_runs(&self, bufs: &[&mut [u8]]) -> usize {
        let runs = bufs.len() / GRO_SEGMENTS * GRO_SEGMENTS;
        let laid_out = runs > 0
            && bufs[..runs]
                .iter()
                .step_by(GRO_SEGMENTS)
                .all(|b| b.len() >= MAX_DATAGRAM);
        if self.gro.is_some() && laid_out {
            runs
        } else {
            0
        }
    }

    /// Segments an earlier super-datagram left queued, handed out before the socket is read
    /// again: `Some(filled)` if there were any.
    fn drain_pending(
        &mut self,
        bufs: &mut [&mut [u8]],
        sizes: &mut [usize],
        eps: &mut [Endpoint],
    ) -> Option<usize> {
        let gro = self.gro.as_mut().filter(|g| g.has_pending())?;
        let mut split = Split::default();
        gro.drain(bufs, sizes, eps, &mut split);
        self.stats.delivered(split.filled, split.dropped);
        Some(split.filled)
    }

    /// One receive call into `self.meta`: straight into the first `runs` buffers (scattered by
    /// the guessed segment size when `scatter`), else into the GRO scratch area, else (GRO
    /// off) into the buffers one datagram each. Returns the messages read.
    fn recv_once(
        &mut self,
        bufs: &mut [&mut [u8]],
        runs: usize,
        scatter: bool,
    ) -> io::Result<usize> {
        let reads = bufs.len() / 64;
        self.fam.with_sock(|sock| match self.gro.as_mut() {
            Some(_) if runs > 0 && scatter => self.batch.recv_scattered(
                sock.as_fd(),
                &mut bufs[..runs],
                GRO_SEGMENTS,
                self.seg_guess,
                MAX_DATAGRAM,
                &mut self.meta,
            ),
            Some(_) if runs > 0 => self.batch.recv_strided(
                sock.as_fd(),
                &mut bufs[..runs],
                GRO_SEGMENTS,
                MAX_DATAGRAM,
                &mut self.meta,
            ),
            Some(gro) => gro.read(&mut self.batch, sock.as_fd(), reads, &mut self.meta),
            None => self.batch.recv(sock.as_fd(), bufs, &mut self.meta),
        })
    }

    /// After a direct read of `got` messages: splits each super-datagram into the buffers of
    /// its run, in place, and learns the segment size to scatter the next read by. Returns the
    /// entries to hand up (0: read again).
    fn hand_over_direct(
        &mut self,
        bufs: &mut [&mut [u8]],
        sizes: &mut [usize],
        eps: &mut [Endpoint],
        got: usize,
        scatter: bool,
    ) -> usize {
        let got = got.min(self.meta.len());
        let meta = &mut self.meta[..got];
        for m in meta.iter_mut().filter(|m| m.addr.is_none()) {
            m.len = 0; // no sender address: skipped, as on the other paths
        }
        let layout = Layout {
            stride: GRO_SEGMENTS,
            slot: MAX_DATAGRAM,
            gro: true,
            scatter: if scatter { self.seg_guess } else { 0 },
        };
        let f = split(bufs, sizes, eps, meta, layout, |m| {
            endpoint(m).unwrap_or_default()
        });
        self.stats.in_place(f.in_place);
        self.seg_guess = scatter_guess(meta);
        self.stats.recv(f.datagrams, f.gro, f.oversize);
        f.entries
    }

    /// After a read of `got` messages into the GRO scratch area (its segments copied out into
    /// `bufs`, the rest queued) or, GRO off, into `bufs` themselves. Returns the entries to
    /// hand up (0: read again).
    fn hand_over_copied(
        &mut self,
        bufs: &mut [&mut [u8]],
        sizes: &mut [usize],
        eps: &mut [Endpoint],
        got: usize,
    ) -> usize {
        let meta = &self.meta[..got.min(self.meta.len())];
        match self.gro.as_mut() {
            Some(gro) => {
                let mut split = Split::default();
                gro.load(meta, &mut split);
                gro.drain(bufs, sizes, eps, &mut split);
                self.stats.recv(split.filled, split.gro, split.dropped);
                split.filled
            }
            None => {
                let (filled, dropped) = take_plain(meta, sizes, eps);
                self.stats.recv(filled, 0, dropped);
                meta.len()
            }
        }
    }
}

/// Sizes and endpoints of datagrams read with GRO off, one per buffer; a truncated or
/// (impossibly, without GRO) coalesced datagram gets size 0 and counts as dropped. Returns
/// (filled, dropped).
fn take_plain(meta: &[RecvMeta], sizes: &mut [usize], eps: &mut [Endpoint]) -> (usize, usize) {
    let (mut filled, mut dropped) = (0, 0);
    for (i, m) in meta.iter().enumerate() {
        let coalesced = m.gro_size > 0 && m.len > usize::from(m.gro_size);
        match endpoint(m) {
            Some(ep) if !m.truncated && !coalesced => {
                sizes[i] = m.len;
                eps[i] = ep;
                filled += 1;
            }
            _ => {
                sizes[i] = 0;
                dropped += usize::from(m.truncated || coalesced);
            }
        }
    }
    (filled, dropped)
}

/// Whether reads scattered in pieces of `seg` fit `bufs` (runs of [`GRO_SEGMENTS`], the first of
/// each able to take a whole datagram, checked by the caller): every other buffer takes a
/// piece, and a run offers the kernel a whole datagram's worth, so that nothing is truncated.
/// The device's slabs have MTU-sized slots behind each run's head, which hold any segment size
/// a tunnel coalesces by.
fn scatter_fits(bufs: &[&mut [u8]], seg: usize) -> bool {
    bufs.chunks(GRO_SEGMENTS).all(|run| {
        let Some((last, middle)) = run[1..].split_last() else {
            return false;
        };
        middle.iter().all(|b| b.len() >= seg)
            && seg * (run.len() - 1) + last.len().min(MAX_DATAGRAM) >= MAX_DATAGRAM
    })
}

/// Smallest segment size worth scattering by: smaller segments are cheap to move, and a
/// stranger's two tiny coalesced datagrams must not make every read a gather.
const MIN_SCATTER_SEGMENT: usize = 512;

/// The segment size a read was mostly coalesced by (most bytes, at least
/// [`MIN_SCATTER_SEGMENT`]), for the next read to scatter by; 0 if none: bulk traffic keeps
/// the guess, a quiet or mixed socket falls back to plain reads at once.
fn scatter_guess(meta: &[RecvMeta]) -> usize {
    meta.iter()
        .filter(|m| {
            let g = usize::from(m.gro_size);
            !m.truncated && g >= MIN_SCATTER_SEGMENT && m.len > g
        })
        .max_by_key(|m| m.len)
        .map_or(0, |m| usize::from(m.gro_size))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::SocketAddr;

    fn meta(len: usize, gro: u16, from: &str) -> RecvMeta {
        RecvMeta {
            len,
            truncated: false,
            addr: Some(from.parse::<SocketAddr>().unwrap()),
            pktinfo: None,
            gro_size: gro,
        }
    }

    /// Loads two reads into a Gro and drains them through caller buffers of `buf_len`,
    /// `per_call` at a time.
    fn split_all(
        msgs: &[(Vec<u8>, u16)],
        buf_len: usize,
        per_call: usize,
    ) -> (Vec<Vec<u8>>, Split) {
        let mut g = Gro::new();
        let mut metas = Vec::new();
        for (i, (data, gro)) in msgs.iter().enumerate() {
            g.scratch[i * MAX_DATAGRAM..i * MAX_DATAGRAM + data.len()].copy_from_slice(data);
            metas.push(meta(data.len(), *gro, "10.0.0.1:5"));
        }
        let mut total = Split::default();
        g.load(&metas, &mut total);
        let mut out = Vec::new();
        let mut storage = vec![vec![0u8; buf_len]; per_call];
        while g.has_pending() {
            let mut bufs: Vec<&mut [u8]> = storage.iter_mut().map(|b| &mut b[..]).collect();
            let mut sizes = vec![0; per_call];
            let mut eps = vec![Endpoint::default(); per_call];
            let mut s = Split::default();
            g.drain(&mut bufs, &mut sizes, &mut eps, &mut s);
            for i in 0..s.filled {
                out.push(bufs[i][..sizes[i]].to_vec());
                assert_eq!(eps[i].dst.port(), 5);
            }
            total.filled += s.filled;
            total.dropped += s.dropped;
        }
        (out, total)
    }

    fn segments(n: usize, size: usize, tail: usize, tag: u8) -> (Vec<Vec<u8>>, Vec<u8>) {
        let mut segs: Vec<Vec<u8>> = (0..n)
            .map(|i| vec![tag.wrapping_add(i as u8); size])
            .collect();
        if tail > 0 {
            segs.push(vec![0xee; tail]);
        }
        let joined = segs.concat();
        (segs, joined)
    }

    #[test]
    fn splits_super_datagrams_in_order_with_short_tail() {
        let (a, ja) = segments(5, 100, 37, 1);
        let (b, jb) = segments(3, 200, 0, 50);
        let (out, s) = split_all(&[(ja, 100), (jb, 200)], 1500, 128);
        assert_eq!(out, [a, b].concat());
        assert_eq!((s.gro, s.dropped), (2, 0));
    }

    #[test]
    fn segments_beyond_the_caller_buffers_wait_for_the_next_call() {
        let (a, ja) = segments(10, 100, 1, 7);
        let (out, s) = split_all(&[(ja, 100)], 1500, 3);
        assert_eq!(out, a);
        assert_eq!(s.dropped, 0);
    }

    #[test]
    fn oversize_segments_are_dropped_not_fatal() {
        let (_, ja) = segments(3, 1000, 0, 1);
        let plain = vec![9u8; 50];
        let (out, s) = split_all(&[(ja, 1000), (plain.clone(), 0)], 500, 4);
        assert_eq!(out, [plain]);
        assert_eq!(s.dropped, 3);
        // A segment size larger than the datagram is one datagram.
        let (out, _) = split_all(&[(vec![1; 10], 400)], 500, 4);
        assert_eq!(out, [vec![1; 10]]);
    }

    #[test]
    fn truncated_and_empty_reads_are_skipped() {
        let mut g = Gro::new();
        let mut m0 = meta(100, 0, "10.0.0.1:5");
        m0.truncated = true;
        let m1 = meta(0, 0, "10.0.0.1:5");
        let mut s = Split::default();
        g.load(&[m0, m1], &mut s);
        assert_eq!(s.dropped, 1);
        assert!(!g.has_pending());
    }

    #[test]
    fn scattering_needs_a_piece_per_buffer_and_a_whole_datagram_per_run() {
        let mut store: Vec<Vec<u8>> = (0..128)
            .map(|i| vec![0; if i % 64 == 0 { 65_536 } else { 2048 }])
            .collect();
        let bufs: Vec<&mut [u8]> = store.iter_mut().map(|b| &mut b[..]).collect();
        assert!(
            scatter_fits(&bufs, 1448),
            "MTU-sized slots behind a 64 KiB head"
        );
        assert!(!scatter_fits(&bufs, 4000), "a piece larger than a slot");
        assert!(
            !scatter_fits(&bufs, 600),
            "63 pieces and the last slot short of 64 KiB"
        );
        let mut big = vec![vec![0u8; 65_536]; 64];
        let bufs: Vec<&mut [u8]> = big.iter_mut().map(|b| &mut b[..]).collect();
        assert!(scatter_fits(&bufs, 600), "the last buffer takes the rest");
    }
}
