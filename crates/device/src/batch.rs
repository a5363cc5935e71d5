//! Batches and the order-preserving two-queue scheme.
//!
//! A batch of packets for one peer (a *container*) is placed in two queues at once: the shared
//! crypto queue, where any worker seals or opens every packet of it, and the peer's [`Ordered`]
//! queue. The worker marks the container done and then *drains* the peer's queue: it sends (or
//! writes) every container at the head that is done, in queue order. At most one thread drains a
//! peer at a time, so per-peer order is queue order whichever worker finished first — without a
//! thread per peer and without a wake-up hop between the worker and a sequential sender.

use crate::keypair::DevKeypair;
use crate::pool::{PacketBuf, Pool};
use crate::Peer;
use parking_lot::Mutex;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use vpn_conn::Endpoint;

/// One packet in its slot of a pooled slab (or a buffer of its own).
pub(crate) struct Elem {
    pub buf: PacketBuf,
    /// Outbound: plaintext length (at `HEADROOM`), then the message length (at 0) once sealed.
    /// Inbound: message length (at 0), then the plaintext length (at `HEADROOM`) once opened.
    pub len: usize,
    /// Transport counter (nonce).
    pub counter: u64,
    /// Inbound: where it came from.
    pub ep: Endpoint,
    /// Inbound: which of the container's keypairs it was sealed with.
    pub kp: u8,
    /// Crypto succeeded.
    pub ok: bool,
}

impl Elem {
    pub fn new(buf: PacketBuf, len: usize) -> Elem {
        Elem {
            buf,
            len,
            counter: 0,
            ep: Endpoint::default(),
            kp: 0,
            ok: false,
        }
    }
}

/// A list of packets whose memory goes back to the pool when it is dropped, whatever path
/// dropped it (sent, staged and evicted, peer stopped, device closed): each packet gives its
/// slot back to its slab, and a slab returns with its last packet.
pub(crate) struct Elems {
    pool: Arc<Pool>,
    pub v: Vec<Elem>,
}

impl Elems {
    /// An empty list with room for `cap` packets, reusing a list an earlier batch returned (a
    /// batch per packet on a quiet tunnel would otherwise allocate and free one each time).
    pub fn new(pool: &Arc<Pool>, cap: usize) -> Elems {
        let mut v = pool.spare_elems();
        v.reserve(cap);
        Elems {
            pool: pool.clone(),
            v,
        }
    }

    pub fn len(&self) -> usize {
        self.v.len()
    }

    pub fn is_empty(&self) -> bool {
        self.v.is_empty()
    }
}

impl Drop for Elems {
    fn drop(&mut self) {
        self.v.clear();
        self.pool.keep_elems(std::mem::take(&mut self.v));
    }
}

/// One peer's packets of a batch, on their way to a [`Container`]: the group stage of both
/// directions collects them here. Inbound a group also lists the keypairs its packets were
/// sealed with (`Elem::kp` indexes it); outbound the keypair is picked when the batch is
/// staged, and the list stays empty.
pub(crate) struct Group {
    pub peer: Arc<Peer>,
    pub keypairs: Vec<Arc<DevKeypair>>,
    pub elems: Elems,
}

impl Group {
    /// An empty group for `peer` with room for `cap` packets.
    pub fn new(peer: Arc<Peer>, pool: &Arc<Pool>, cap: usize) -> Group {
        Group {
            peer,
            keypairs: Vec::new(),
            elems: Elems::new(pool, cap),
        }
    }

    /// The number `kp` has in this group, added if new (at most a handful per batch: the
    /// current, previous and next keypair).
    #[inline]
    pub fn keypair_slot(&mut self, kp: &Arc<DevKeypair>) -> u8 {
        let k = match self.keypairs.iter().position(|k| Arc::ptr_eq(k, kp)) {
            Some(k) => k,
            None => {
                self.keypairs.push(kp.clone());
                self.keypairs.len() - 1
            }
        };
        u8::try_from(k).unwrap_or(u8::MAX)
    }

    /// Hands the packets collected so far over in a group of their own and leaves this one
    /// empty, for the same peer and keypairs (a reader batch larger than the device batch).
    pub fn split_off(&mut self, pool: &Arc<Pool>, cap: usize) -> Group {
        let fresh = Group {
            peer: self.peer.clone(),
            keypairs: self.keypairs.clone(),
            elems: Elems::new(pool, cap),
        };
        std::mem::replace(self, fresh)
    }
}

/// The groups of one batch, by peer.
pub(crate) struct Groups {
    pool: Arc<Pool>,
    /// Room each new group starts with.
    cap: usize,
    pub v: Vec<Group>,
}

impl Groups {
    pub fn new(pool: &Arc<Pool>, cap: usize) -> Groups {
        Groups {
            pool: pool.clone(),
            cap,
            v: Vec::new(),
        }
    }

    /// The index of `peer`'s group, opened if this batch had none yet. A batch carries a
    /// handful of peers: a linear scan beats hashing.
    #[inline]
    pub fn of(&mut self, peer: &Arc<Peer>) -> usize {
        match self.v.iter().position(|g| Arc::ptr_eq(&g.peer, peer)) {
            Some(g) => g,
            None => {
                self.v.push(Group::new(peer.clone(), &self.pool, self.cap));
                self.v.len() - 1
            }
        }
    }
}

/// Empties `v` and hands back its allocation for slices of any lifetime. A reader passes the
/// TUN or bind a fresh `&mut [&mut [u8]]` view of its buffers on every call (the buffers it
/// consumed are replaced in between, so the view cannot outlive a call); recycling the vector
/// keeps that view from costing an allocation per batch. The closure never runs: `v` is empty,
/// and collecting a `vec::IntoIter` into a vector of a same-sized type reuses the allocation.
pub(crate) fn recycle_slices<'b>(mut v: Vec<&mut [u8]>) -> Vec<&'b mut [u8]> {
    v.clear();
    v.into_iter().map(|_| unreachable!()).collect()
}

/// A batch for one peer in flight through the crypto workers.
pub(crate) struct Container<K> {
    pub peer: Arc<Peer>,
    /// Outbound: the one keypair the batch is sealed with. Inbound: every keypair an element
    /// refers to (`Elem::kp` indexes this).
    pub keypairs: Vec<K>,
    pub elems: Mutex<Elems>,
    done: AtomicBool,
}

impl<K> Container<K> {
    pub fn new(peer: Arc<Peer>, keypairs: Vec<K>, elems: Elems) -> Container<K> {
        peer.batches_in_flight.fetch_add(1, Ordering::Relaxed);
        Container {
            peer,
            keypairs,
            elems: Mutex::new(elems),
            done: AtomicBool::new(false),
        }
    }

    pub fn set_done(&self) {
        self.done.store(true, Ordering::SeqCst);
    }

    fn is_done(&self) -> bool {
        self.done.load(Ordering::SeqCst)
    }
}

impl<K> Drop for Container<K> {
    fn drop(&mut self) {
        // Release: what the batch did (its TUN write or send) is seen by whoever sees it gone.
        self.peer.batches_in_flight.fetch_sub(1, Ordering::Release);
    }
}

/// A peer's ordered queue of containers (see the module docs).
pub(crate) struct Ordered<K> {
    q: Mutex<VecDeque<Arc<Container<K>>>>,
    draining: AtomicBool,
}

impl<K> Default for Ordered<K> {
    fn default() -> Self {
        Ordered {
            q: Mutex::new(VecDeque::new()),
            draining: AtomicBool::new(false),
        }
    }
}

impl<K> Ordered<K> {
    pub fn push(&self, c: Arc<Container<K>>) {
        self.q.lock().push_back(c);
    }

    /// Hands every done container at the head to `f`, in order, unless another thread is
    /// already draining (it will pick ours up: see the re-check below).
    pub fn drain(&self, mut f: impl FnMut(Arc<Container<K>>)) {
        loop {
            if self.draining.swap(true, Ordering::SeqCst) {
                return;
            }
            while let Some(c) = self.pop_done() {
                f(c);
            }
            self.draining.store(false, Ordering::SeqCst);
            // A worker may have finished the head after our last look but seen us draining and
            // left; if so the work is ours again. (Both sides use SeqCst: one of them sees the
            // other.)
            if !self.head_done() {
                return;
            }
        }
    }

    fn pop_done(&self) -> Option<Arc<Container<K>>> {
        let mut q = self.q.lock();
        if q.front().is_some_and(|c| c.is_done()) {
            q.pop_front()
        } else {
            None
        }
    }

    /// Runs `f` as this queue's drainer if nothing is queued and nobody drains: a packet handled
    /// by `f` outside the queue can neither overtake one queued before it nor run beside the
    /// sequential stage of another. Containers queued while `f` runs wait for it and are
    /// drained afterwards with `then`, in order. `None` (and `f` not run) when the queue is busy.
    pub fn run_alone<R>(
        &self,
        f: impl FnOnce() -> R,
        then: impl FnMut(Arc<Container<K>>),
    ) -> Option<R> {
        if self
            .draining
            .compare_exchange(false, true, Ordering::SeqCst, Ordering::SeqCst)
            .is_err()
        {
            return None;
        }
        // Queue checked after claiming: nothing can be popped now but by us. (Not under the
        // queue's lock: `f` may queue containers.)
        let empty = self.q.lock().is_empty();
        let r = empty.then(f);
        self.draining.store(false, Ordering::SeqCst);
        // A worker that finished a container while we held the claim left it to us.
        if self.head_done() {
            self.drain(then);
        }
        r
    }

    fn head_done(&self) -> bool {
        self.q.lock().front().is_some_and(|c| c.is_done())
    }

    /// Drops everything queued (the peer stopped). Containers still inside a worker are dropped
    /// by it.
    pub fn clear(&self) {
        let old: Vec<_> = self.q.lock().drain(..).collect();
        drop(old);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recycled_slice_vectors_keep_their_allocation() {
        let mut bufs = vec![vec![0u8; 8]; 4];
        let mut v: Vec<&mut [u8]> = bufs.iter_mut().map(|b| &mut b[..]).collect();
        let (ptr, cap) = (v.as_ptr() as usize, v.capacity());
        v[0][0] = 1;
        let w = recycle_slices(v);
        assert!(w.is_empty());
        assert_eq!((w.as_ptr() as usize, w.capacity()), (ptr, cap));
        assert_eq!(bufs[0][0], 1);
    }
}
