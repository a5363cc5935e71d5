//! A small xorshift generator: hostile input needs variety, not cryptographic quality, and the
//! tool stays free of dependencies. The seed is printed so a failing run can be repeated.

use std::time::{SystemTime, UNIX_EPOCH};

/// xorshift64* state.
pub struct Rng(u64);

impl Rng {
    /// Seeded from `VPN_HOSTILE_SEED` when set, otherwise from the clock and the pid.
    pub fn from_env() -> Rng {
        let seed = std::env::var("VPN_HOSTILE_SEED")
            .ok()
            .and_then(|s| s.parse::<u64>().ok())
            .unwrap_or_else(|| {
                let t = SystemTime::now()
                    .duration_since(UNIX_EPOCH)
                    .map(|d| d.as_nanos() as u64)
                    .unwrap_or(0);
                t ^ (u64::from(std::process::id()) << 32)
            });
        Rng::new(seed)
    }

    pub fn new(seed: u64) -> Rng {
        // Zero is the one state xorshift never leaves.
        Rng(if seed == 0 {
            0x9e37_79b9_7f4a_7c15
        } else {
            seed
        })
    }

    pub fn seed(&self) -> u64 {
        self.0
    }

    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// A value in `0..n` (`n > 0`); the modulo bias is irrelevant here.
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n.max(1) as u64) as usize
    }

    pub fn fill(&mut self, buf: &mut [u8]) {
        for chunk in buf.chunks_mut(8) {
            let v = self.next_u64().to_le_bytes();
            chunk.copy_from_slice(&v[..chunk.len()]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_same_sequence_and_zero_seed_moves() {
        let (mut a, mut b) = (Rng::new(7), Rng::new(7));
        let xs: Vec<u64> = (0..8).map(|_| a.next_u64()).collect();
        let ys: Vec<u64> = (0..8).map(|_| b.next_u64()).collect();
        assert_eq!(xs, ys);
        let mut z = Rng::new(0);
        assert_ne!(z.next_u64(), z.next_u64());
    }

    #[test]
    fn below_stays_in_range_and_fill_covers_odd_lengths() {
        let mut r = Rng::new(42);
        assert!((0..1000).all(|_| r.below(7) < 7));
        let mut buf = [0u8; 13];
        r.fill(&mut buf);
        assert!(buf.iter().any(|&b| b != 0));
    }
}
