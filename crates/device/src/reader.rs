//! The batch-reader scaffold both directions share: a pooled slab laid out for a batch, the
//! per-call view of its slots, the sizes a read returns, and the ways the slab leaves the
//! reader (carved into packets, lent to a lone packet, kept for the next read, or returned).
//!
//! The TUN reader (`send.rs`) and every socket reader (`receive.rs`) run the same read stage
//! on it; what differs is the read call, what an error means, and whether an unused slab is
//! kept across reads (the TUN reader keeps it; a socket reader gives it back so that an idle
//! reader holds no memory). See `docs/pipeline.md`, "Stages".

use crate::batch::recycle_slices;
use crate::pool::{Carver, Layout, Pool};
use bytes::BytesMut;
use std::io;
use std::sync::Arc;

/// One reader thread's slab and the per-read bookkeeping around it.
pub(crate) struct BatchReader {
    pool: Arc<Pool>,
    /// How the current slab (or the next one) is cut into slots.
    layout: Layout,
    slab: Option<BytesMut>,
    /// The allocation of the per-call slot view, reused (see `recycle_slices`).
    spare: Vec<&'static mut [u8]>,
    /// Per slot of the last read: the bytes read (0: a hole to skip).
    sizes: Vec<usize>,
}

impl BatchReader {
    /// A reader of batches of up to `batch` packets; it holds no slab until the first read.
    pub fn new(pool: &Arc<Pool>, batch: usize) -> Self {
        let batch = batch.max(1);
        BatchReader {
            pool: pool.clone(),
            layout: Layout::for_batch(batch, 0),
            slab: None,
            spare: Vec::with_capacity(batch),
            sizes: vec![0; batch],
        }
    }

    /// The read stage: reads one batch with `read` into a slab laid out as `layout` and returns
    /// how many slots it filled. The slab is the one kept from the last read if that has the
    /// same layout; one laid out otherwise (an MTU change) goes back for a fresh one, taken
    /// from the pool (which may wait for memory). On error the slab stays held, unread.
    #[inline]
    pub fn read(
        &mut self,
        layout: Layout,
        read: impl FnOnce(&mut [&mut [u8]], &mut [usize]) -> io::Result<usize>,
    ) -> io::Result<usize> {
        if layout != self.layout {
            self.release();
            self.layout = layout;
            self.sizes.resize(layout.slots, 0);
        }
        let pool = &self.pool;
        let slab = self.slab.get_or_insert_with(|| pool.take(layout.len()));
        let mut slices = recycle_slices(std::mem::take(&mut self.spare));
        layout.slices(slab, &mut slices);
        let res = read(&mut slices, &mut self.sizes);
        self.spare = recycle_slices(slices);
        res.map(|n| n.min(self.sizes.len()))
    }

    /// Per slot of the last read: the bytes read.
    #[inline]
    pub fn sizes(&self) -> &[usize] {
        &self.sizes
    }

    /// The packet read into slot `i`, starting `headroom` bytes into it (`None`: no slab, or a
    /// size that does not fit the slot).
    #[inline]
    pub fn packet(&self, i: usize, headroom: usize) -> Option<&[u8]> {
        let size = *self.sizes.get(i)?;
        self.layout.packet(self.slab.as_deref()?, i, headroom, size)
    }

    /// The slab itself and the first slot's size, for a packet read alone that is handled in
    /// place (it lends the slab out and puts it back).
    #[inline]
    pub fn lone(&mut self) -> Option<(&mut BytesMut, usize)> {
        Some((self.slab.as_mut()?, *self.sizes.first()?))
    }

    /// The hand-over stage's start: the slab, to carve the packets handed on out of (it
    /// returns to the pool with the last of them). The next read takes a fresh one.
    #[inline]
    pub fn carve(&mut self) -> Option<Carver> {
        let slab = self.slab.take()?;
        Some(Carver::new(&self.pool, slab, self.layout))
    }

    /// Gives a slab nothing was carved out of back to the pool.
    pub fn release(&mut self) {
        if let Some(slab) = self.slab.take() {
            self.pool.put(slab);
        }
    }
}

impl Drop for BatchReader {
    fn drop(&mut self) {
        self.release();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fill(bufs: &mut [&mut [u8]], sizes: &mut [usize], n: usize) -> io::Result<usize> {
        for (i, (b, s)) in bufs.iter_mut().zip(sizes.iter_mut()).take(n).enumerate() {
            b[..4].copy_from_slice(&(i as u32).to_le_bytes());
            *s = 4;
        }
        Ok(n)
    }

    #[test]
    fn a_read_fills_slots_that_the_carver_hands_on_in_order() {
        let pool = Pool::new(0);
        let mut r = BatchReader::new(&pool, 4);
        let layout = Layout::for_batch(4, 1420);
        assert_eq!(r.read(layout, |b, s| fill(b, s, 3)).unwrap(), 3);
        assert_eq!(r.packet(2, 0), Some(&2u32.to_le_bytes()[..]));
        assert_eq!(r.packet(3, 0), Some(&[][..]), "a slot not filled this read");
        let mut carver = r.carve().unwrap();
        let p = carver.slot(1);
        assert_eq!(&p[..4], &1u32.to_le_bytes());
        assert!(r.packet(0, 0).is_none(), "the slab left with the carver");
        drop((carver, p));
        assert_eq!(
            pool.outstanding(),
            0,
            "the slab came back with its last packet"
        );
    }

    #[test]
    fn an_unused_slab_is_kept_for_the_same_layout_and_replaced_for_another() {
        let pool = Pool::new(0);
        let mut r = BatchReader::new(&pool, 2);
        let small = Layout::for_batch(2, 1280);
        r.read(small, |b, s| fill(b, s, 1)).unwrap();
        let first = r.lone().unwrap().0.as_ptr();
        r.read(small, |b, s| fill(b, s, 1)).unwrap();
        assert_eq!(r.lone().unwrap().0.as_ptr(), first, "kept across reads");
        let large = Layout::for_batch(2, 9000);
        r.read(large, |b, s| fill(b, s, 2)).unwrap();
        assert!(r.lone().unwrap().0.len() >= large.len());
        assert_eq!(r.sizes(), &[4, 4]);
        r.release();
        assert_eq!(pool.outstanding(), 0);
    }

    #[test]
    fn a_failed_read_keeps_the_slab_and_reports_the_error() {
        let pool = Pool::new(0);
        let mut r = BatchReader::new(&pool, 2);
        let layout = Layout::for_batch(2, 1420);
        let e = r.read(layout, |_, _| Err(io::Error::other("boom")));
        assert!(e.is_err());
        assert!(r.lone().is_some());
        drop(r);
        assert_eq!(
            pool.outstanding(),
            0,
            "dropping the reader returns its slab"
        );
    }
}
