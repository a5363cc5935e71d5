//! The per-keypair replay window (RFC 6479 sliding bitmap; `docs/protocol.md`, "Replay window").
//!
//! A ring of 128 × 64-bit blocks; the window is the 8128 counters behind the highest seen (one
//! block is kept as the slot being cleared when the window advances). Peers shipped a 1024-bit
//! window, which drops legitimate packets reordered by parallel crypto and multi-path links;
//! this one matches wireguard-go and the kernel exactly.

use crate::consts::{
    REJECT_AFTER_MESSAGES, REPLAY_BLOCK_BITS, REPLAY_RING_BLOCKS, REPLAY_WINDOW_SIZE,
};

const BLOCK_BIT_LOG: u32 = REPLAY_BLOCK_BITS.trailing_zeros();
const BLOCK_MASK: u64 = REPLAY_RING_BLOCKS as u64 - 1;
const BIT_MASK: u64 = REPLAY_BLOCK_BITS - 1;

/// Remembers which receive counters of one keypair were already accepted.
#[derive(Clone)]
pub struct ReplayFilter {
    last: u64,
    ring: [u64; REPLAY_RING_BLOCKS],
}

impl Default for ReplayFilter {
    fn default() -> Self {
        Self::new()
    }
}

impl core::fmt::Debug for ReplayFilter {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("ReplayFilter")
            .field("last", &self.last)
            .finish_non_exhaustive()
    }
}

impl ReplayFilter {
    /// An empty window (nothing seen).
    pub fn new() -> Self {
        ReplayFilter {
            last: 0,
            ring: [0; REPLAY_RING_BLOCKS],
        }
    }

    /// Forgets everything (a new keypair starts with a fresh window).
    pub fn reset(&mut self) {
        self.last = 0;
        self.ring = [0; REPLAY_RING_BLOCKS];
    }

    /// Returns true if `counter` is fresh and records it; false if it is a replay, more than
    /// 8128 behind the highest counter seen, or `>= REJECT_AFTER_MESSAGES`.
    ///
    /// Call only after the message authenticated, or an attacker could advance the window.
    pub fn check(&mut self, counter: u64) -> bool {
        if counter >= REJECT_AFTER_MESSAGES {
            return false;
        }
        let index_block = counter >> BLOCK_BIT_LOG;
        if counter > self.last {
            // Advance: clear every block between the old and the new highest, at most the ring.
            let current = self.last >> BLOCK_BIT_LOG;
            let diff = (index_block - current).min(REPLAY_RING_BLOCKS as u64);
            for i in current + 1..=current + diff {
                self.ring[(i & BLOCK_MASK) as usize] = 0;
            }
            self.last = counter;
        } else if self.last - counter > REPLAY_WINDOW_SIZE {
            return false;
        }
        let slot = &mut self.ring[(index_block & BLOCK_MASK) as usize];
        let bit = 1u64 << (counter & BIT_MASK);
        let fresh = *slot & bit == 0;
        *slot |= bit;
        fresh
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};
    use std::collections::HashSet;

    #[test]
    fn in_order_and_duplicates() {
        let mut f = ReplayFilter::new();
        for c in 0..20_000u64 {
            assert!(f.check(c), "{c}");
            assert!(!f.check(c), "duplicate {c}");
        }
    }

    #[test]
    fn out_of_order_inside_the_window() {
        let mut f = ReplayFilter::new();
        assert!(f.check(100));
        assert!(f.check(50));
        assert!(f.check(99));
        assert!(f.check(0));
        assert!(!f.check(50));
        assert!(f.check(101));
        assert!(f.check(98));
        assert!(!f.check(98));
    }

    #[test]
    fn exact_window_edge() {
        // last − counter == 8128 is accepted, 8129 is "too old" (rejected when the
        // difference is greater than the window size).
        for last in [8129u64, 10_000, 1 << 40, REJECT_AFTER_MESSAGES - 1] {
            let mut f = ReplayFilter::new();
            assert!(f.check(last));
            assert!(
                !f.check(last - REPLAY_WINDOW_SIZE - 1),
                "8129 behind {last}"
            );
            assert!(f.check(last - REPLAY_WINDOW_SIZE), "8128 behind {last}");
            assert!(!f.check(last - REPLAY_WINDOW_SIZE), "duplicate at the edge");
            assert!(f.check(last - 1));
        }
        // A 1024-bit window (a peer's bug) would reject this legitimate reordering.
        let mut f = ReplayFilter::new();
        assert!(f.check(5000));
        assert!(f.check(5000 - 2000));
    }

    #[test]
    fn far_jump_clears_the_ring() {
        let mut f = ReplayFilter::new();
        for c in 0..REPLAY_WINDOW_SIZE {
            assert!(f.check(c));
        }
        let jump = 1_000_000u64;
        assert!(f.check(jump));
        // Everything in the new window is fresh, including counters whose ring slots held old bits.
        for c in (jump - REPLAY_WINDOW_SIZE)..jump {
            assert!(f.check(c), "{c}");
        }
        assert!(!f.check(REPLAY_WINDOW_SIZE - 1), "too old after the jump");
        // A jump of exactly one ring's worth of blocks.
        let mut g = ReplayFilter::new();
        assert!(g.check(64));
        assert!(g.check(64 + 128 * 64));
        assert!(g.check(64 + 128 * 64 - 1));
        assert!(!g.check(64), "8192 behind: too old");
    }

    #[test]
    fn reject_limit() {
        let mut f = ReplayFilter::new();
        assert!(f.check(REJECT_AFTER_MESSAGES - 1));
        assert!(!f.check(REJECT_AFTER_MESSAGES - 1));
        assert!(!f.check(REJECT_AFTER_MESSAGES));
        assert!(!f.check(u64::MAX));
        f.reset();
        assert!(f.check(0));
        assert!(!f.check(REJECT_AFTER_MESSAGES));
    }

    #[test]
    fn reset_forgets() {
        let mut f = ReplayFilter::new();
        assert!(f.check(7));
        assert!(f.check(100_000));
        f.reset();
        assert!(f.check(7));
        assert!(f.check(0));
    }

    /// A naive model: a set of accepted counters plus the highest seen.
    pub(crate) struct Model {
        seen: HashSet<u64>,
        last: u64,
    }

    impl Model {
        pub(crate) fn new() -> Self {
            Model {
                seen: HashSet::new(),
                last: 0,
            }
        }
        pub(crate) fn check(&mut self, c: u64) -> bool {
            if c >= REJECT_AFTER_MESSAGES || (c < self.last && self.last - c > REPLAY_WINDOW_SIZE) {
                return false;
            }
            self.last = self.last.max(c);
            self.seen.insert(c)
        }
    }

    #[test]
    fn randomized_against_a_model() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(0x5eed_6479);
        for round in 0..50 {
            let mut f = ReplayFilter::new();
            let mut m = Model::new();
            let mut base = if round % 5 == 0 {
                REJECT_AFTER_MESSAGES - 20_000
            } else {
                0
            };
            for step in 0..5_000 {
                let c = match rng.gen_range(0..10) {
                    0 => base.saturating_add(rng.gen_range(0..40_000)),
                    1..=6 => base.saturating_add(rng.gen_range(0..200)),
                    _ => base.saturating_sub(rng.gen_range(0..9_000)),
                };
                if rng.gen_ratio(1, 50) {
                    base = base.saturating_add(rng.gen_range(0..3_000));
                }
                assert_eq!(
                    f.check(c),
                    m.check(c),
                    "round {round} step {step} counter {c}"
                );
            }
        }
    }
}
