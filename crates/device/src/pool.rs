//! Packet memory: slabs under one cap.
//!
//! A reader takes one **slab** per read and lays the batch into it at a stride (a [`Layout`]):
//! slots sized for the MTU, and on a batch of 64 or more the first slot of every run of 64
//! large enough for a whole UDP datagram (a GRO super-datagram is read there and its segments
//! split into the run's other slots; a TUN super-packet is split through the TUN's own
//! scratch). The packets it hands on are carved out of the slab as [`PacketBuf`]s: each owns
//! its slot, is opened or sealed in place on any worker, and the slab goes back to the pool
//! when the last of them is dropped (the slab's reference count; see [`Carver`]). Nothing is
//! copied to hand a packet on, and a 64-byte datagram costs a 2 KiB slot, not 64 KiB.
//!
//! One [`Pool`] serves the whole device, both directions and every reader, under one cap in
//! bytes. A taker that would pass the cap waits (it never allocates around it) until slabs
//! come back; it holds no slab while it waits, and nobody waits while holding a slab, so an
//! exhausted pool only slows the readers down. Free slabs are reused newest first (still in
//! cache); a slab of a size nobody asks for any more (the MTU changed) is freed to make room.
//!
//! Packets that must outlive their batch by long (staged for a handshake) are copied out of
//! their slab into a buffer of their own size, charged against the same cap
//! ([`Pool::try_charge`]), so one waiting peer cannot pin whole slabs.

use crate::batch::Elem;
use bytes::BytesMut;
use parking_lot::{Condvar, Mutex};
use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Headroom in front of every packet: room for the 16-byte transport header on the way out and
/// the 10-byte virtio header on the way in.
pub const HEADROOM: usize = 16;

/// Default cap on the device's packet memory, in bytes (both directions, every reader).
pub const DEFAULT_MEMORY_BUDGET: usize = 32 << 20;

/// The least budget an embedder may ask for (the daemon's `--memory-budget` and the C ABI's
/// `wgSetMemoryBudget` refuse less; 0, no cap, aside): 1 MiB, about what the TUN reader and two
/// socket readers need to hold a slab each at MTU 1420 with batches of 128. [`Options`]
/// takes any value; the device raises a budget to what its readers need at its MTU and batch
/// size ([`MemoryUse::budget`] is the cap in force).
///
/// [`Options`]: crate::Options
pub const MIN_MEMORY_BUDGET: usize = 1 << 20;

/// The smallest slot: a whole datagram of any tunnel MTU up to about 2000 (a peer may use a
/// larger MTU than ours).
pub const MIN_SLOT: usize = 2048;

/// The slot at the head of each run: the largest UDP datagram (a GRO super-datagram), rounded.
pub const RUN_HEAD_SLOT: usize = 65_536;

/// Slots per run (a GRO read's most segments, `UDP_GRO_CNT_MAX`).
pub const RUN: usize = 64;

/// Spare slabs an unbounded pool keeps.
const UNBOUNDED_FREE: usize = 64;

/// Spare packet lists (`Elems` vectors) a pool keeps for reuse.
const SPARE_ELEM_LISTS: usize = 64;

/// The backstop of a wait for a returned slab.
const WAIT_BACKSTOP: Duration = Duration::from_millis(50);

/// The slot size for `mtu`: headroom, the packet, the padding and the tag, rounded up to a
/// cache line, at least [`MIN_SLOT`].
pub fn slot_size(mtu: usize) -> usize {
    (HEADROOM + mtu + 32).next_multiple_of(64).max(MIN_SLOT)
}

/// Where the slots of a slab lie: `slots` slots of `slot` bytes, except that with `runs` the
/// first slot of every run of [`RUN`] has [`RUN_HEAD_SLOT`] bytes (when that is larger).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    /// Slots in the slab (the batch).
    pub slots: usize,
    /// Bytes of an ordinary slot.
    pub slot: usize,
    /// Run heads are large.
    pub runs: bool,
}

impl Layout {
    /// The layout for a batch of `batch` at `mtu`: runs with large heads when the batch has
    /// room for a GRO read's run (64 slots or more).
    pub fn for_batch(batch: usize, mtu: usize) -> Layout {
        Layout {
            slots: batch.max(1),
            slot: slot_size(mtu),
            runs: batch >= RUN,
        }
    }

    fn head(&self) -> usize {
        if self.runs {
            RUN_HEAD_SLOT.max(self.slot)
        } else {
            self.slot
        }
    }

    /// Run heads before slot `i`.
    fn heads_before(&self, i: usize) -> usize {
        if self.runs {
            i.div_ceil(RUN)
        } else {
            0
        }
    }

    /// Where slot `i` starts.
    pub fn offset(&self, i: usize) -> usize {
        i * self.slot + self.heads_before(i) * (self.head() - self.slot)
    }

    /// Bytes of slot `i`.
    pub fn slot_len(&self, i: usize) -> usize {
        if self.runs && i % RUN == 0 {
            self.head()
        } else {
            self.slot
        }
    }

    /// The `len` bytes at `headroom` into slot `i` of `slab`, if they fit the slot.
    pub fn packet<'a>(
        &self,
        slab: &'a [u8],
        i: usize,
        headroom: usize,
        len: usize,
    ) -> Option<&'a [u8]> {
        if i >= self.slots || headroom + len > self.slot_len(i) {
            return None;
        }
        let at = self.offset(i) + headroom;
        slab.get(at..at + len)
    }

    /// Bytes of the whole slab.
    pub fn len(&self) -> usize {
        self.offset(self.slots)
    }

    /// Whether the slab has no bytes (never: a layout has at least one slot).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Cuts `slab` into its slots, appended to `out` (the view a reader passes to a read).
    pub fn slices<'a>(&self, slab: &'a mut [u8], out: &mut Vec<&'a mut [u8]>) {
        let mut rest = slab;
        for i in 0..self.slots {
            let (slot, tail) = std::mem::take(&mut rest).split_at_mut(self.slot_len(i));
            out.push(slot);
            rest = tail;
        }
    }
}

struct Free {
    /// Free slabs (whole, full length), most recently returned last.
    slabs: Vec<BytesMut>,
    /// Bytes in existence: free and handed-out slabs plus charged buffers.
    allocated: usize,
    /// The most `allocated` has been.
    peak: usize,
}

/// How much packet memory a pool holds (see `Device::memory`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MemoryUse {
    /// The cap in bytes (0: none); at least the floor the device needs to make progress.
    pub budget: usize,
    /// Bytes allocated now (free and handed-out slabs, copies of staged packets).
    pub allocated: usize,
    /// Of those, bytes handed out now (not free slabs kept for reuse).
    pub in_use: usize,
    /// The most bytes allocated at once so far.
    pub peak: usize,
    /// Times a reader waited for memory (the cap was reached).
    pub waits: u64,
}

/// The device's packet memory: slabs under a cap in bytes (see the module docs).
pub struct Pool {
    free: Mutex<Free>,
    /// Cap on `allocated` (0: none).
    max: usize,
    /// The least the cap may be: the device's readers must fit together (see `set_floor`).
    floor: AtomicUsize,
    /// Times a taker waited.
    waits: AtomicU64,
    /// Takers waiting for memory: a return only touches the condvar when non-zero.
    waiters: AtomicUsize,
    cond: Condvar,
    /// Emptied packet lists of this pool's batches, for the next batches.
    elem_lists: Mutex<Vec<Vec<Elem>>>,
}

impl Pool {
    /// A pool of at most `max` bytes (0: unbounded).
    pub fn new(max: usize) -> Arc<Pool> {
        Arc::new(Pool {
            free: Mutex::new(Free {
                slabs: Vec::new(),
                allocated: 0,
                peak: 0,
            }),
            max,
            floor: AtomicUsize::new(0),
            waits: AtomicU64::new(0),
            waiters: AtomicUsize::new(0),
            cond: Condvar::new(),
            elem_lists: Mutex::new(Vec::with_capacity(SPARE_ELEM_LISTS)),
        })
    }

    /// The cap in bytes (0: unbounded), raised to the floor.
    pub fn max(&self) -> usize {
        match self.max {
            0 => 0,
            max => max.max(self.floor.load(Ordering::Relaxed)),
        }
    }

    /// Raises the cap to at least `bytes` (0 leaves an unbounded pool unbounded). The device
    /// sets it to what its readers need at once to make progress: the TUN reader keeps its
    /// slab while it waits, and a socket reader needs one of its own next to it.
    pub fn set_floor(&self, bytes: usize) {
        self.floor.store(bytes, Ordering::Relaxed);
        self.wake();
    }

    /// What the pool holds now, its peak and how often takers waited.
    pub fn memory_use(&self) -> MemoryUse {
        let f = self.free.lock();
        MemoryUse {
            budget: self.max(),
            allocated: f.allocated,
            in_use: f.allocated - f.slabs.iter().map(|s| s.len()).sum::<usize>(),
            peak: f.peak,
            waits: self.waits.load(Ordering::Relaxed),
        }
    }

    /// Bytes in existence (free and handed-out slabs, charged buffers).
    pub fn allocated(&self) -> usize {
        self.free.lock().allocated
    }

    /// Bytes handed out (not free).
    pub fn outstanding(&self) -> usize {
        let f = self.free.lock();
        f.allocated - f.slabs.iter().map(|s| s.len()).sum::<usize>()
    }

    /// Takers waiting for memory now.
    pub fn waiting(&self) -> usize {
        self.waiters.load(Ordering::Acquire)
    }

    /// Whether `len` more bytes fit under the cap, freeing spare slabs (oldest first) to make
    /// room; counts them as allocated if so.
    fn admit(&self, f: &mut Free, len: usize) -> bool {
        let max = self.max();
        loop {
            if max == 0 || f.allocated + len <= max {
                f.allocated += len;
                f.peak = f.peak.max(f.allocated);
                return true;
            }
            if f.slabs.is_empty() {
                return false;
            }
            let old = f.slabs.remove(0);
            f.allocated -= old.len();
        }
    }

    /// Takes a slab of at least `len` bytes (a spare larger one is reused rather than freed and
    /// allocated again: churning the allocator at the cap grew the process far past the cap),
    /// waiting while the cap leaves no room. A slab larger than the whole cap is served once
    /// nothing else is allocated, so no taker waits forever.
    pub fn take(&self, len: usize) -> BytesMut {
        let mut f = self.free.lock();
        loop {
            if let Some(i) = fitting(&f.slabs, len) {
                return f.slabs.remove(i);
            }
            // Past the cap only when nothing else is allocated (`admit` freed the spares).
            if self.admit(&mut f, len) || f.allocated == 0 {
                if f.allocated == 0 {
                    f.allocated = len;
                    f.peak = f.peak.max(len);
                }
                drop(f);
                return BytesMut::zeroed(len);
            }
            self.waits.fetch_add(1, Ordering::Relaxed);
            self.waiters.fetch_add(1, Ordering::AcqRel);
            self.cond.wait_for(&mut f, WAIT_BACKSTOP);
            self.waiters.fetch_sub(1, Ordering::AcqRel);
        }
    }

    /// Returns a whole slab, as taken.
    pub fn put(&self, slab: BytesMut) {
        let len = slab.len();
        self.put_joined(slab, len);
    }

    /// Returns a slab of `len` bytes put back together; one that came back shorter (a packet
    /// was leaked) is freed instead.
    fn put_joined(&self, slab: BytesMut, len: usize) {
        let mut f = self.free.lock();
        if slab.len() == len && (self.max != 0 || f.slabs.len() < UNBOUNDED_FREE) {
            f.slabs.push(slab);
        } else {
            f.allocated -= len;
            drop(slab);
        }
        drop(f);
        self.wake();
    }

    /// Counts `len` bytes of a buffer outside any slab against the cap, without waiting:
    /// false if they do not fit.
    pub fn try_charge(&self, len: usize) -> bool {
        self.admit(&mut self.free.lock(), len)
    }

    /// Gives back what [`try_charge`](Self::try_charge) counted.
    pub fn uncharge(&self, len: usize) {
        self.free.lock().allocated -= len;
        self.wake();
    }

    fn wake(&self) {
        if self.waiters.load(Ordering::Acquire) > 0 {
            self.cond.notify_all();
        }
    }

    /// An empty packet list, reused if one is spare.
    pub(crate) fn spare_elems(&self) -> Vec<Elem> {
        self.elem_lists.lock().pop().unwrap_or_default()
    }

    /// Keeps an emptied packet list for reuse (or frees it if enough are spare).
    pub(crate) fn keep_elems(&self, v: Vec<Elem>) {
        debug_assert!(v.is_empty());
        if v.capacity() == 0 {
            return;
        }
        let mut lists = self.elem_lists.lock();
        if lists.len() < SPARE_ELEM_LISTS {
            lists.push(v);
        }
    }
}

/// The spare slab to reuse for `len` bytes: the smallest that holds them, the newest of those.
fn fitting(slabs: &[BytesMut], len: usize) -> Option<usize> {
    let mut best: Option<usize> = None;
    for (i, s) in slabs.iter().enumerate() {
        if s.len() >= len && best.is_none_or(|b| s.len() <= slabs[b].len()) {
            best = Some(i);
        }
    }
    best
}

/// Where a packet buffer goes when it is dropped.
enum Home {
    /// Nowhere: freed (a reader's whole slab lent for a moment, a keepalive).
    Own,
    /// Back into its slab (the slab returns to the pool with its last packet).
    Slab(Arc<SlabHome>),
    /// Freed, and its bytes uncharged from the pool.
    Charged(Arc<Pool>),
}

/// One packet's memory: a slot carved out of a slab, or a buffer of its own.
pub struct PacketBuf {
    data: BytesMut,
    home: Home,
}

impl PacketBuf {
    /// A buffer of `len` zeroed bytes outside any slab and cap (small, rare packets).
    pub fn owned(len: usize) -> PacketBuf {
        PacketBuf {
            data: BytesMut::zeroed(len),
            home: Home::Own,
        }
    }

    /// Lends a reader's whole slab as one packet buffer; [`into_slab`](Self::into_slab) gives
    /// it back.
    pub(crate) fn lend(slab: BytesMut) -> PacketBuf {
        PacketBuf {
            data: slab,
            home: Home::Own,
        }
    }

    /// The memory of a lent slab, back.
    pub(crate) fn into_slab(mut self) -> BytesMut {
        std::mem::take(&mut self.data)
    }

    /// A copy of `self[..used]` in a buffer of its own of `room` bytes (at least `used`),
    /// charged to `pool`; `None` if the cap has no room.
    pub(crate) fn compact(&self, used: usize, room: usize, pool: &Arc<Pool>) -> Option<PacketBuf> {
        let src = self.data.get(..used)?;
        let room = room.max(used);
        if !pool.try_charge(room) {
            return None;
        }
        let mut data = BytesMut::zeroed(room);
        data[..used].copy_from_slice(src);
        Some(PacketBuf {
            data,
            home: Home::Charged(pool.clone()),
        })
    }

    /// Whether this buffer lives in a slab (and keeps the slab from going back).
    pub(crate) fn in_slab(&self) -> bool {
        matches!(self.home, Home::Slab(_))
    }
}

impl Default for PacketBuf {
    fn default() -> Self {
        PacketBuf {
            data: BytesMut::new(),
            home: Home::Own,
        }
    }
}

impl Deref for PacketBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.data
    }
}

impl DerefMut for PacketBuf {
    fn deref_mut(&mut self) -> &mut [u8] {
        &mut self.data
    }
}

impl Drop for PacketBuf {
    fn drop(&mut self) {
        match &self.home {
            Home::Own => {}
            Home::Slab(h) => h.give_back(std::mem::take(&mut self.data)),
            Home::Charged(p) => p.uncharge(self.data.len()),
        }
    }
}

/// A slab out of the pool, shared by the packets carved from it: dropped with the last of them
/// (`Arc` is the reference count), it puts the pieces back together and returns the slab.
struct SlabHome {
    pool: Arc<Pool>,
    /// Bytes of the whole slab.
    len: usize,
    /// Pieces given back so far (every piece is back once the last holder is gone).
    pieces: Mutex<Vec<BytesMut>>,
}

impl SlabHome {
    fn give_back(&self, piece: BytesMut) {
        if !piece.is_empty() {
            self.pieces.lock().push(piece);
        }
    }
}

impl Drop for SlabHome {
    fn drop(&mut self) {
        let mut pieces = std::mem::take(self.pieces.get_mut());
        // The pieces were split off one slab in address order; put back in that order they
        // join without a copy.
        pieces.sort_unstable_by_key(|p| p.as_ptr() as usize);
        let mut it = pieces.into_iter();
        let Some(mut slab) = it.next() else {
            self.pool.put_joined(BytesMut::new(), self.len);
            return;
        };
        for p in it {
            if slab.try_unsplit(p).is_err() {
                // Not contiguous: a piece went missing. Free the slab.
                self.pool.put_joined(BytesMut::new(), self.len);
                return;
            }
        }
        self.pool.put_joined(slab, self.len);
    }
}

/// Carves the packets a reader hands on out of its slab, slot by slot in increasing order;
/// the rest of the slab goes back into it when the carver is dropped.
pub(crate) struct Carver {
    home: Arc<SlabHome>,
    rest: BytesMut,
    layout: Layout,
    /// Offset of `rest` in the slab.
    at: usize,
}

impl Carver {
    /// Starts carving `slab` (taken from `pool` for `layout`; it may be larger).
    pub fn new(pool: &Arc<Pool>, slab: BytesMut, layout: Layout) -> Carver {
        Carver {
            home: Arc::new(SlabHome {
                pool: pool.clone(),
                len: slab.len(),
                // A piece per slot at most (a slot or a gap before it) and the tail.
                pieces: Mutex::new(Vec::with_capacity(layout.slots + 1)),
            }),
            rest: slab,
            layout,
            at: 0,
        }
    }

    /// Slot `i` as a packet buffer. Slots must be taken in increasing order.
    pub fn slot(&mut self, i: usize) -> PacketBuf {
        let off = self.layout.offset(i);
        debug_assert!(off >= self.at, "slots carved out of order");
        let gap = off.saturating_sub(self.at).min(self.rest.len());
        if gap > 0 {
            let skipped = self.rest.split_to(gap);
            self.home.give_back(skipped);
        }
        let len = self.layout.slot_len(i).min(self.rest.len());
        self.at = off + len;
        PacketBuf {
            data: self.rest.split_to(len),
            home: Home::Slab(self.home.clone()),
        }
    }
}

impl Drop for Carver {
    fn drop(&mut self) {
        self.home.give_back(std::mem::take(&mut self.rest));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    fn layout(slots: usize) -> Layout {
        Layout::for_batch(slots, 1420)
    }

    #[test]
    fn slots_are_sized_for_the_mtu_with_large_run_heads() {
        assert_eq!(slot_size(1420), MIN_SLOT);
        assert_eq!(slot_size(9000), 9088);
        let l = layout(128);
        assert!(l.runs);
        assert_eq!(l.slot_len(0), RUN_HEAD_SLOT);
        assert_eq!(l.slot_len(1), MIN_SLOT);
        assert_eq!(l.slot_len(64), RUN_HEAD_SLOT);
        assert_eq!(l.offset(1), RUN_HEAD_SLOT);
        assert_eq!(l.offset(64), RUN_HEAD_SLOT + 63 * MIN_SLOT);
        assert_eq!(l.len(), 2 * RUN_HEAD_SLOT + 126 * MIN_SLOT);
        let small = layout(8);
        assert!(!small.runs);
        assert_eq!(small.len(), 8 * MIN_SLOT);
        let mut slab = vec![0u8; l.len()];
        let mut v = Vec::new();
        l.slices(&mut slab, &mut v);
        assert_eq!(v.len(), 128);
        assert!((0..128).all(|i| v[i].len() == l.slot_len(i)));
    }

    #[test]
    fn slab_returns_when_its_last_packet_is_dropped() {
        let pool = Pool::new(0);
        let l = layout(8);
        let mut slab = pool.take(l.len());
        slab[l.offset(3)] = 33;
        let mut c = Carver::new(&pool, slab, l);
        let a = c.slot(1);
        let b = c.slot(3);
        drop(c);
        assert_eq!(b[0], 33);
        assert_eq!(a.len(), l.slot);
        assert_eq!(pool.outstanding(), l.len());
        // Dropped on another thread, out of order.
        std::thread::spawn(move || drop(b)).join().unwrap();
        assert_eq!(
            pool.outstanding(),
            l.len(),
            "one packet still holds the slab"
        );
        drop(a);
        assert_eq!(pool.outstanding(), 0);
        // The same memory comes back whole, joined without a copy.
        let again = pool.take(l.len());
        assert_eq!(again.len(), l.len());
        assert_eq!(again[l.offset(3)], 33);
        assert_eq!(pool.allocated(), l.len());
    }

    #[test]
    fn a_slab_with_no_packet_carved_goes_back_at_once() {
        let pool = Pool::new(0);
        let l = layout(4);
        let slab = pool.take(l.len());
        drop(Carver::new(&pool, slab, l));
        assert_eq!(pool.outstanding(), 0);
        assert_eq!(pool.allocated(), l.len());
    }

    #[test]
    fn cap_blocks_until_a_slab_returns() {
        let l = layout(4);
        let pool = Pool::new(2 * l.len());
        let a = pool.take(l.len());
        let _b = pool.take(l.len());
        let p2 = pool.clone();
        let t = std::thread::spawn(move || p2.take(l.len()).len());
        // The taker is seen waiting (not merely late to start).
        let deadline = Instant::now() + Duration::from_secs(10);
        while pool.waiting() == 0 {
            assert!(Instant::now() < deadline, "taker never waited");
            std::thread::sleep(Duration::from_millis(1));
        }
        assert!(!t.is_finished(), "took a slab from an exhausted pool");
        pool.put(a);
        assert_eq!(t.join().unwrap(), l.len());
        assert_eq!(pool.allocated(), 2 * l.len());
    }

    #[test]
    fn spare_slabs_of_another_size_are_freed_to_make_room() {
        let (small, large) = (layout(4), layout(8));
        let pool = Pool::new(large.len());
        let s = pool.take(small.len());
        pool.put(s);
        // No room for the large slab next to the spare small one: the spare goes.
        let l = pool.take(large.len());
        assert_eq!(l.len(), large.len());
        assert_eq!(pool.allocated(), large.len());
    }

    #[test]
    fn a_larger_spare_slab_serves_a_smaller_layout() {
        let (small, large) = (layout(4), layout(8));
        let pool = Pool::new(large.len());
        let l = pool.take(large.len());
        pool.put(l);
        let mut s = pool.take(small.len());
        assert_eq!(s.len(), large.len(), "the spare is reused, not freed");
        let mut v = Vec::new();
        small.slices(&mut s, &mut v);
        assert_eq!(v.len(), 4);
        drop(v);
        let mut c = Carver::new(&pool, s, small);
        let p = c.slot(3);
        drop(c);
        drop(p);
        assert_eq!(pool.outstanding(), 0);
        assert_eq!(pool.allocated(), large.len());
    }

    #[test]
    fn charged_copies_count_against_the_cap_and_never_wait() {
        let l = layout(4);
        let pool = Pool::new(l.len());
        let slab = pool.take(l.len());
        let mut c = Carver::new(&pool, slab, l);
        let p = c.slot(0);
        drop(c);
        assert!(p.compact(100, 100, &pool).is_none(), "the cap is full");
        drop(p);
        assert_eq!(pool.outstanding(), 0);
        // The spare slab is freed to make room for a charged copy.
        let owned = PacketBuf::owned(64);
        let copy = owned.compact(16, 64, &pool).unwrap();
        assert_eq!(pool.allocated(), 64);
        drop(copy);
        assert_eq!(pool.allocated(), 0);
    }

    #[test]
    fn the_floor_raises_the_cap() {
        let l = layout(4);
        let pool = Pool::new(l.len());
        let _a = pool.take(l.len());
        pool.set_floor(2 * l.len());
        let b = pool.take(l.len());
        let m = pool.memory_use();
        assert_eq!(
            (m.budget, m.allocated, m.in_use, m.peak, m.waits),
            (2 * l.len(), 2 * l.len(), 2 * l.len(), 2 * l.len(), 0)
        );
        // A slab given back stays allocated for reuse but is no longer in use.
        pool.put(b);
        let m = pool.memory_use();
        assert_eq!((m.allocated, m.in_use), (2 * l.len(), l.len()));
    }

    #[test]
    fn a_slab_larger_than_the_cap_is_served_alone() {
        let pool = Pool::new(100);
        let s = pool.take(1000);
        assert_eq!(s.len(), 1000);
        pool.put(s);
        assert_eq!(pool.take(1000).len(), 1000);
    }
}
