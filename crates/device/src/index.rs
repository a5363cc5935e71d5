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
use std::sync::Arc;

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
    pub map: RwLock<HashMap<u32, IndexEntry>>,
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
                return idx;
            }
        }
    }

    /// Points `idx` at its derived keypair.
    pub fn swap_for_keypair(&self, idx: u32, kp: Arc<DevKeypair>) {
        let mut map = self.map.write();
        if let Some(e) = map.get_mut(&idx) {
            *e = IndexEntry::Keypair(kp);
        }
    }

    pub fn delete(&self, idx: u32) {
        self.map.write().remove(&idx);
    }

    pub fn get(&self, idx: u32) -> Option<IndexEntry> {
        self.map.read().get(&idx).cloned()
    }
}
