//! Allowed-IPs lookups on the packet path.

use crate::allowedips::AllowedIps;
use crate::peer::PeerRef;
use std::net::IpAddr;
use std::sync::{Arc, Weak};

/// The destination address of an IP packet.
pub(crate) fn destination(pkt: &[u8]) -> Option<IpAddr> {
    match pkt.first().map(|b| b >> 4) {
        Some(4) if pkt.len() >= 20 => {
            let dst: [u8; 4] = pkt[16..20].try_into().ok()?;
            Some(IpAddr::from(dst))
        }
        Some(6) if pkt.len() >= 40 => {
            let dst: [u8; 16] = pkt[24..40].try_into().ok()?;
            Some(IpAddr::from(dst))
        }
        _ => None,
    }
}

/// The previous packet's answer within one batch, under one read lock of the table: a batch is
/// mostly one flow (a TSO frame's segments share a destination, a GRO run a source), so the
/// next packet from or to the same address needs no walk of the trie.
pub(crate) struct BatchMemo<V>(Option<(IpAddr, V)>);

impl<V: Copy> BatchMemo<V> {
    pub(crate) fn new() -> Self {
        Self(None)
    }

    /// The answer for `addr`: the previous one if it was for `addr`, else `look()`'s.
    pub(crate) fn get(&mut self, addr: IpAddr, look: impl FnOnce() -> V) -> V {
        match self.0 {
            Some((a, v)) if a == addr => v,
            _ => {
                let v = look();
                self.0 = Some((addr, v));
                v
            }
        }
    }
}

/// The last lone packet's lookup, kept by a reader thread: the TUN reader's destination
/// route, a socket reader's inner-source check. On a quiet tunnel the packets mostly go to and
/// come from one place, and the trie they would be looked up in is cold memory (a few µs per
/// packet on this project's VM); the table's generation says when the answer may have changed.
#[derive(Default)]
pub(crate) struct LastRoute(Option<(u64, IpAddr, Weak<crate::Peer>)>);

impl LastRoute {
    /// The peer for `pkt`'s destination.
    pub(crate) fn lookup_dst(
        &mut self,
        table: &AllowedIps<PeerRef>,
        pkt: &[u8],
    ) -> Option<PeerRef> {
        self.lookup(table, destination(pkt)?)
    }

    /// The peer whose allowed IPs hold `dst`.
    pub(crate) fn lookup(&mut self, table: &AllowedIps<PeerRef>, dst: IpAddr) -> Option<PeerRef> {
        let generation = table.generation();
        if let Some((g, d, peer)) = &self.0 {
            if (*g, *d) == (generation, dst) {
                if let Some(peer) = peer.upgrade() {
                    return Some(PeerRef(peer));
                }
            }
        }
        let peer = table.lookup(dst)?.clone();
        self.0 = Some((generation, dst, Arc::downgrade(&peer.0)));
        Some(peer)
    }
}
