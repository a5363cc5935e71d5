//! Bounded, reusable packet buffers.
//!
//! Every packet lives in a buffer of [`BUFFER_SIZE`] bytes from a pool: large enough for the
//! biggest datagram plus headroom, so that decryption and encryption work in place and a TUN
//! super-packet or a UDP GRO run can be read straight into one. A pool may be capped, and a
//! taker then waits (it never allocates around the cap) until buffers come back.
//!
//! The free list is a stack: the buffer taken next is the one returned last, still in cache and
//! in the TLB. A FIFO queue hands out the least recently used buffer instead, so on a quiet
//! tunnel every packet touched cold memory (see `docs/design-notes.md`, "Buffer pool order").

use crate::batch::Elem;
use parking_lot::{Condvar, Mutex};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use vpn_proto::consts::MAX_MESSAGE_SIZE;

/// Headroom in front of every packet: room for the 16-byte transport header on the way out and
/// the 10-byte virtio header on the way in.
pub const HEADROOM: usize = 16;

/// Size of each pooled buffer: headroom, the largest message, and slack for padding and the tag.
pub const BUFFER_SIZE: usize = HEADROOM + MAX_MESSAGE_SIZE + 64;

/// Spare buffers an unbounded pool keeps.
const UNBOUNDED_FREE: usize = 4096;

/// Spare packet lists (`Elems` vectors) a pool keeps for reuse.
const SPARE_ELEM_LISTS: usize = 64;

/// A pool of packet buffers with an optional cap on how many exist at once.
pub struct BufferPool {
    /// Free buffers, most recently returned last. Capacity reserved up front, so taking and
    /// returning never allocates; an unbounded pool keeps at most `UNBOUNDED_FREE` spare buffers
    /// and frees the rest. The lock is held for one push or pop, or one batch's drain.
    free: Mutex<Vec<Box<[u8]>>>,
    /// Emptied packet lists of this pool's batches, for the next batches.
    elem_lists: Mutex<Vec<Vec<Elem>>>,
    /// Buffers handed out and not yet returned.
    outstanding: AtomicUsize,
    /// Cap on `outstanding` (0: none).
    max: usize,
    /// Takers waiting for a return: `put` only touches the lock and condvar when non-zero.
    waiters: AtomicUsize,
    lock: Mutex<()>,
    cond: Condvar,
}

/// A new zeroed buffer, for a pool with no spare one.
fn new_buffer() -> Box<[u8]> {
    vec![0u8; BUFFER_SIZE].into_boxed_slice()
}

impl BufferPool {
    /// A pool holding at most `max` buffers at once (0: unbounded).
    pub fn new(max: usize) -> Arc<BufferPool> {
        Arc::new(BufferPool {
            free: Mutex::new(Vec::with_capacity(Self::keep_for(max))),
            elem_lists: Mutex::new(Vec::with_capacity(SPARE_ELEM_LISTS)),
            outstanding: AtomicUsize::new(0),
            max,
            waiters: AtomicUsize::new(0),
            lock: Mutex::new(()),
            cond: Condvar::new(),
        })
    }

    /// A pool capped at `bytes` worth of buffers (at least one batch).
    pub fn with_byte_cap(bytes: usize, min_buffers: usize) -> Arc<BufferPool> {
        Self::new((bytes / BUFFER_SIZE).max(min_buffers))
    }

    /// The cap (0: unbounded).
    pub fn max(&self) -> usize {
        self.max
    }

    /// Buffers currently handed out.
    pub fn outstanding(&self) -> usize {
        self.outstanding.load(Ordering::Acquire)
    }

    /// Takes a buffer, waiting while the pool is at its cap.
    pub fn get(&self) -> Box<[u8]> {
        self.reserve(1);
        let spare = self.free.lock().pop();
        spare.unwrap_or_else(new_buffer)
    }

    /// Takes `n` buffers into `out`, waiting while the pool is at its cap, as `get` does. A
    /// reader replaces a whole batch's buffers at once: one count update and one lock for all
    /// of them rather than per packet (per packet it was 2.6 % of the sending thread).
    ///
    /// `out.pop()` then hands them out in `get`'s order: the most recently returned spare
    /// first, fresh allocations last. The caller must not already hold so many buffers that
    /// `n` more exceed the cap: it would wait for its own.
    pub fn get_into(&self, n: usize, out: &mut Vec<Box<[u8]>>) {
        let mut left = n;
        while left > 0 {
            let k = self.reserve(left);
            let start = out.len();
            let spares = {
                let mut free = self.free.lock();
                let from = free.len() - free.len().min(k);
                out.extend(free.drain(from..));
                out.len() - start
            };
            // Allocate the shortfall with no lock held, in front of the spares so that they
            // are popped first (the newest spare is on top).
            out.resize_with(start + k, new_buffer);
            out[start..].rotate_right(k - spares);
            left -= k;
        }
    }

    /// Counts between 1 and `want` buffers as handed out, waiting while none may be: returns
    /// how many. Never more than the cap, so a large `want` is served in parts as buffers
    /// come back.
    fn reserve(&self, want: usize) -> usize {
        debug_assert!(want > 0, "reserve(0) would wait at the cap for nothing");
        if self.max == 0 {
            self.outstanding.fetch_add(want, Ordering::AcqRel);
            return want;
        }
        let mut cur = self.outstanding.load(Ordering::Acquire);
        loop {
            if cur >= self.max {
                self.wait_for_return();
                cur = self.outstanding.load(Ordering::Acquire);
                continue;
            }
            let take = want.min(self.max - cur);
            match self.outstanding.compare_exchange_weak(
                cur,
                cur + take,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => return take,
                Err(c) => cur = c,
            }
        }
    }

    /// Returns a buffer.
    pub fn put(&self, buf: Box<[u8]>) {
        self.put_all(std::iter::once(buf));
    }

    /// Returns buffers (a batch's): one lock and one count update for all of them.
    pub fn put_all(&self, bufs: impl Iterator<Item = Box<[u8]>>) {
        let mut n = 0;
        {
            let mut free = self.free.lock();
            let keep = self.keep();
            for buf in bufs {
                n += 1;
                // Full only for an unbounded pool with more spares than it keeps: free this one.
                if free.len() < keep {
                    free.push(buf);
                }
            }
        }
        if n == 0 {
            return;
        }
        let out = self
            .outstanding
            .fetch_sub(n, Ordering::AcqRel)
            .saturating_sub(n);
        // Wake waiters only once a useful number of buffers is free: a reader refills a whole
        // batch, and waking it per returned buffer costs a context switch per packet.
        if self.waiters.load(Ordering::Acquire) > 0
            && self.max.saturating_sub(out) >= self.wake_batch()
        {
            let _g = self.lock.lock();
            self.cond.notify_all();
        }
    }

    /// Spare buffers kept at most: the cap, or `UNBOUNDED_FREE` for an unbounded pool.
    fn keep(&self) -> usize {
        Self::keep_for(self.max)
    }

    fn keep_for(max: usize) -> usize {
        if max == 0 {
            UNBOUNDED_FREE
        } else {
            max
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

    /// Free buffers that make waking waiters worthwhile.
    fn wake_batch(&self) -> usize {
        (self.max / 16).clamp(1, 64)
    }

    fn wait_for_return(&self) {
        let mut g = self.lock.lock();
        self.waiters.fetch_add(1, Ordering::AcqRel);
        // Re-check after registering: a `put` that ran before saw no waiter and did not notify.
        // A `put` racing with this check notifies under the lock, which we hold until we wait.
        if self.outstanding.load(Ordering::Acquire) >= self.max {
            self.cond
                .wait_for(&mut g, std::time::Duration::from_millis(50));
        }
        self.waiters.fetch_sub(1, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    #[test]
    fn cap_blocks_until_return() {
        let pool = BufferPool::new(2);
        let a = pool.get();
        let _b = pool.get();
        assert_eq!(pool.outstanding(), 2);
        let p2 = pool.clone();
        let t = std::thread::spawn(move || p2.get().len());
        // The taker is seen waiting (not merely late to start), and is still waiting after a
        // while: nothing but the return below can let it go.
        let deadline = Instant::now() + Duration::from_secs(10);
        while pool.waiters.load(Ordering::Acquire) == 0 {
            assert!(Instant::now() < deadline, "taker never waited");
            std::thread::sleep(Duration::from_millis(1));
        }
        std::thread::sleep(Duration::from_millis(30));
        assert!(
            !t.is_finished(),
            "taker got a buffer from an exhausted pool"
        );
        pool.put(a);
        let len = t.join().unwrap();
        assert_eq!(len, BUFFER_SIZE);
        assert_eq!(pool.outstanding(), 2);
    }

    #[test]
    fn buffers_are_reused() {
        let pool = BufferPool::new(0);
        let mut a = pool.get();
        a[0] = 7;
        pool.put(a);
        assert_eq!(pool.get()[0], 7);
    }

    #[test]
    fn get_into_pops_like_get_newest_spare_first_then_fresh() {
        let pool = BufferPool::new(0);
        let mut held: Vec<_> = (0..3).map(|_| pool.get()).collect();
        for (mark, b) in held.iter_mut().enumerate() {
            b[0] = mark as u8 + 1;
        }
        // Returned 1, 2, 3: 3 is the newest spare.
        pool.put_all(held.into_iter());
        let mut out = Vec::new();
        pool.get_into(2, &mut out);
        assert_eq!(pool.outstanding(), 2);
        assert_eq!(out.pop().unwrap()[0], 3, "newest spare first");
        assert_eq!(out.pop().unwrap()[0], 2);
        assert!(out.is_empty());
        // More than the spares: the last spare first, then fresh (zeroed) buffers.
        pool.get_into(3, &mut out);
        let marks: Vec<u8> = std::iter::from_fn(|| out.pop()).map(|b| b[0]).collect();
        assert_eq!(marks, vec![1, 0, 0]);
        assert_eq!(pool.outstanding(), 5);
    }

    #[test]
    fn get_into_past_the_cap_waits_for_returns() {
        let pool = BufferPool::new(4);
        let held: Vec<_> = (0..3).map(|_| pool.get()).collect();
        let p2 = pool.clone();
        let (tx, rx) = std::sync::mpsc::channel();
        // Wants 3 with 1 free: takes that one, then waits for the other two.
        let t = std::thread::spawn(move || {
            let mut out = Vec::new();
            p2.get_into(3, &mut out);
            let _ = tx.send(out.len());
        });
        let deadline = Instant::now() + Duration::from_secs(10);
        while pool.waiters.load(Ordering::Acquire) == 0 {
            assert!(Instant::now() < deadline, "taker never waited");
            std::thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(
            pool.outstanding(),
            4,
            "the free buffer was taken before waiting"
        );
        assert!(!t.is_finished());
        pool.put_all(held.into_iter());
        let got = rx
            .recv_timeout(Duration::from_secs(10))
            .expect("taker not released by the returns");
        assert_eq!(got, 3);
        t.join().unwrap();
        assert_eq!(pool.outstanding(), 3);
    }
}
