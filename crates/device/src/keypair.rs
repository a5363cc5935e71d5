//! A peer's transport keypairs: previous, current and next (`docs/protocol.md`, "Keypairs").

use crate::Peer;
use parking_lot::Mutex;
use std::sync::{Arc, Weak};
use vpn_proto::replay::ReplayFilter;
use vpn_proto::time::Instant;
use vpn_proto::transport::Keypair;

/// A transport keypair as the device holds it: the protocol keypair, its replay window, and
/// its peer.
pub(crate) struct DevKeypair {
    pub kp: Keypair,
    pub replay: Mutex<ReplayFilter>,
    pub peer: Weak<Peer>,
}

impl DevKeypair {
    pub fn new(kp: Keypair, peer: &Arc<Peer>) -> Arc<DevKeypair> {
        Arc::new(DevKeypair {
            kp,
            replay: Mutex::new(ReplayFilter::new()),
            peer: Arc::downgrade(peer),
        })
    }

    /// Young enough to receive with.
    pub fn can_receive(&self, now: Instant) -> bool {
        crate::session::may_receive(self.kp.created, now)
    }

    /// Young and unexhausted enough to send with.
    pub fn can_send(&self, now: Instant) -> bool {
        crate::session::may_send(self.kp.created, self.kp.send_nonce(), now)
    }
}

/// The three slots.
#[derive(Default)]
pub(crate) struct Keypairs {
    pub previous: Option<Arc<DevKeypair>>,
    pub current: Option<Arc<DevKeypair>>,
    pub next: Option<Arc<DevKeypair>>,
}

impl Keypairs {
    /// Installs a freshly derived keypair and returns the ones it pushed out (whose indices the
    /// caller deletes).
    pub fn install(&mut self, kp: Arc<DevKeypair>) -> Vec<Arc<DevKeypair>> {
        let mut gone = Vec::new();
        if kp.kp.is_initiator {
            // We consumed a response: we may send at once.
            if let Some(next) = self.next.take() {
                gone.extend(self.previous.replace(next));
                gone.extend(self.current.take());
            } else {
                gone.extend(self.previous.take());
                self.previous = self.current.take();
            }
            self.current = Some(kp);
        } else {
            // Responder: wait for the initiator's first data packet to confirm it.
            gone.extend(self.next.replace(kp));
            gone.extend(self.previous.take());
        }
        gone
    }

    /// The first authenticated packet under `kp` arrived: promote `next` to `current`.
    /// Returns `Some(gone)` if a rotation happened.
    pub fn received_with(&mut self, kp: &Arc<DevKeypair>) -> Option<Vec<Arc<DevKeypair>>> {
        if !self.next.as_ref().is_some_and(|n| Arc::ptr_eq(n, kp)) {
            return None;
        }
        let gone: Vec<_> = self.previous.take().into_iter().collect();
        self.previous = self.current.take();
        self.current = self.next.take();
        Some(gone)
    }

    /// Empties every slot, returning the keypairs removed.
    pub fn clear(&mut self) -> Vec<Arc<DevKeypair>> {
        [self.previous.take(), self.current.take(), self.next.take()]
            .into_iter()
            .flatten()
            .collect()
    }
}
