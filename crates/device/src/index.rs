//! The index table: receiver index → handshake or keypair.
//!
//! Every handshake gets a fresh random 32-bit index when we create a message; when its keypair is
//! derived the same index points at the keypair. Transport packets find their keypair here by the
//! receiver index they carry; handshake responses and cookie replies find their peer.

use crate::keypair::DevKeypair;
use crate::Peer;
use parking_lot::RwLock;
use rand::RngCore;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};

#[derive(Clone)]
pub(crate) enum IndexEntry {
    Handshake(Arc<Peer>),
    Keypair(Arc<DevKeypair>),
}

impl IndexEntry {
    pub fn peer(&self) -> Option<Arc<Peer>> {
        match self {
            IndexEntry::Handshake(p) => Some(p.clone()),
            IndexEntry::Keypair(k) => k.peer.upgrade(),
        }
    }
}

#[derive(Default)]
pub(crate) struct IndexTable {
    /// Changed only through the methods, which count `generation`.
    map: RwLock<HashMap<u32, IndexEntry>>,
    /// Bumped under the write lock after every change (see [`LastIndex`]).
    generation: AtomicU64,
}

impl IndexTable {
    /// A fresh, unused, uniformly random index for `peer`'s new handshake.
    pub fn new_index(&self, peer: &Arc<Peer>) -> u32 {
        let mut rng = rand::thread_rng();
        loop {
            let idx = rng.next_u32();
            let mut map = self.map.write();
            if let std::collections::hash_map::Entry::Vacant(v) = map.entry(idx) {
                v.insert(IndexEntry::Handshake(peer.clone()));
                self.generation.fetch_add(1, Ordering::Release);
                return idx;
            }
        }
    }

    /// Points `idx` at its derived keypair.
    pub fn swap_for_keypair(&self, idx: u32, kp: Arc<DevKeypair>) {
        let mut map = self.map.write();
        if let Some(e) = map.get_mut(&idx) {
            *e = IndexEntry::Keypair(kp);
            self.generation.fetch_add(1, Ordering::Release);
        }
    }

    pub fn delete(&self, idx: u32) {
        let mut map = self.map.write();
        if map.remove(&idx).is_some() {
            self.generation.fetch_add(1, Ordering::Release);
        }
    }

    pub fn get(&self, idx: u32) -> Option<IndexEntry> {
        self.map.read().get(&idx).cloned()
    }

    /// The table, read-locked: for looking up a whole batch under one lock.
    pub fn read(&self) -> parking_lot::RwLockReadGuard<'_, HashMap<u32, IndexEntry>> {
        self.map.read()
    }
}

/// A socket reader's last transport lookup: on a quiet tunnel the datagrams mostly carry one
/// receiver index, and the table (lock, hasher keys, buckets) is cold memory on every one. The
/// table's generation says when the answer may have changed; the keypair is held weakly, so
/// the cache never keeps key material alive.
#[derive(Default)]
pub(crate) struct LastIndex(Option<(u64, u32, Weak<DevKeypair>)>);

impl LastIndex {
    /// The keypair `idx` points at, if it points at one.
    pub(crate) fn keypair(&mut self, table: &IndexTable, idx: u32) -> Option<Arc<DevKeypair>> {
        // Read before the map: a change after this load bumps it past what is cached.
        let generation = table.generation.load(Ordering::Acquire);
        if let Some((g, i, kp)) = &self.0 {
            if (*g, *i) == (generation, idx) {
                if let Some(kp) = kp.upgrade() {
                    return Some(kp);
                }
            }
        }
        let kp = match table.map.read().get(&idx) {
            Some(IndexEntry::Keypair(kp)) => kp.clone(),
            _ => return None,
        };
        self.0 = Some((generation, idx, Arc::downgrade(&kp)));
        Some(kp)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use parking_lot::Mutex;
    use vpn_proto::replay::ReplayFilter;
    use vpn_proto::time::Instant;
    use vpn_proto::transport::Keypair;

    fn keypair(local: u32) -> Arc<DevKeypair> {
        Arc::new(DevKeypair {
            kp: Keypair::new(&[1; 32], &[2; 32], local, 9, true, Instant::from_nanos(1)),
            replay: Mutex::new(ReplayFilter::new()),
            peer: Weak::new(),
        })
    }

    #[test]
    fn last_index_follows_every_change_of_the_table() {
        let t = IndexTable::default();
        let (a, b) = (keypair(7), keypair(7));
        t.map.write().insert(7, IndexEntry::Keypair(a.clone()));
        t.generation.fetch_add(1, Ordering::Release);
        let mut last = LastIndex::default();
        assert!(Arc::ptr_eq(&last.keypair(&t, 7).unwrap(), &a));
        assert!(Arc::ptr_eq(&last.keypair(&t, 7).unwrap(), &a), "cached");
        assert!(last.keypair(&t, 8).is_none());
        // `a` stays alive (held here): only the generation tells the cache it was replaced.
        t.swap_for_keypair(7, b.clone());
        assert!(Arc::ptr_eq(&last.keypair(&t, 7).unwrap(), &b));
        t.delete(7);
        assert!(
            last.keypair(&t, 7).is_none(),
            "deleted while still alive elsewhere"
        );
    }
}
