//! Handshake rate limiter: a token bucket per exact source IP (`docs/protocol.md`, "Handshakes,
//! cookies and load").
//!
//! Used only while the device is under load and only for handshakes whose mac2 proved the
//! source address, so the table holds verified addresses. It is per source, never global: a
//! peer shipped one global bucket, which let one attacker throttle every other peer.
//!
//! Tokens are nanoseconds of credit: each packet costs 1 s / 20, the bucket holds 5 packets'
//! worth, and a new source starts with `burst − 1` packets of credit after its first packet.

use std::collections::HashMap;
use std::net::IpAddr;

use crate::consts::{RATELIMIT_GC_TIME, RATELIMIT_PACKETS_BURSTABLE, RATELIMIT_PACKETS_PER_SECOND};
use crate::time::Instant;

const NANOS_PER_SECOND: u64 = 1_000_000_000;
const PACKET_COST: u64 = NANOS_PER_SECOND / RATELIMIT_PACKETS_PER_SECOND;
const MAX_TOKENS: u64 = PACKET_COST * RATELIMIT_PACKETS_BURSTABLE;

#[derive(Debug, Clone, Copy)]
struct Entry {
    last_time: Instant,
    tokens: u64,
}

/// Per-source-IP token buckets. The caller wraps it in a mutex and calls [`RateLimiter::gc`]
/// every [`RATELIMIT_GC_TIME`] while it is non-empty.
#[derive(Debug, Default)]
pub struct RateLimiter {
    table: HashMap<IpAddr, Entry>,
}

impl RateLimiter {
    /// An empty table.
    pub fn new() -> Self {
        RateLimiter {
            table: HashMap::new(),
        }
    }

    /// Whether one more handshake from `ip` may be processed at `now`; consumes a token if so.
    ///
    /// wireguard-go tests `tokens > cost`, which with a frozen clock allows only four packets
    /// and reaches five only because its real clock advances between calls; we test `>=` so
    /// the documented burst of 5 holds exactly, whatever the clock resolution.
    pub fn allow(&mut self, ip: IpAddr, now: Instant) -> bool {
        let entry = self.table.entry(ip).or_insert_with(|| Entry {
            last_time: now,
            // A full bucket; admitting this first packet leaves `burst − 1` packets' worth,
            // the state wireguard-go creates new entries in.
            tokens: MAX_TOKENS,
        });
        let elapsed = u64::try_from((now - entry.last_time).as_nanos()).unwrap_or(u64::MAX);
        entry.tokens = entry.tokens.saturating_add(elapsed).min(MAX_TOKENS);
        entry.last_time = entry.last_time.max(now);
        if entry.tokens >= PACKET_COST {
            entry.tokens -= PACKET_COST;
            true
        } else {
            false
        }
    }

    /// Drops entries idle for longer than [`RATELIMIT_GC_TIME`] (their buckets are full again,
    /// so forgetting them changes no decision).
    pub fn gc(&mut self, now: Instant) {
        self.table
            .retain(|_, e| now - e.last_time <= RATELIMIT_GC_TIME);
    }

    /// Number of tracked sources.
    pub fn len(&self) -> usize {
        self.table.len()
    }

    /// Whether no source is tracked (the caller may stop its GC ticker).
    pub fn is_empty(&self) -> bool {
        self.table.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::time::Duration;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn at(ms: u64) -> Instant {
        Instant::from_nanos(1_000_000_000_000 + ms * 1_000_000)
    }

    #[test]
    fn burst_of_five_then_twenty_per_second() {
        let mut rl = RateLimiter::new();
        let a = ip("198.18.0.1");
        let t0 = at(0);
        for i in 0..5 {
            assert!(rl.allow(a, t0), "burst packet {i}");
        }
        assert!(!rl.allow(a, t0), "sixth packet in the same instant");
        // One token refills after 50 ms, not before.
        assert!(!rl.allow(a, t0 + Duration::from_millis(49)));
        assert!(rl.allow(a, t0 + Duration::from_millis(50)));
        assert!(!rl.allow(a, t0 + Duration::from_millis(50)));
        // Over a long steady run the rate is 20/s.
        let mut allowed = 0;
        let start = t0 + Duration::from_millis(50);
        for ms in 1..=10_000u64 {
            if rl.allow(a, start + Duration::from_millis(ms)) {
                allowed += 1;
            }
        }
        assert_eq!(allowed, 200);
        // Idle for a long time refills only up to the burst.
        let later = start + Duration::from_secs(3600);
        assert_eq!((0..10).filter(|_| rl.allow(a, later)).count(), 5);
    }

    #[test]
    fn sources_are_independent() {
        let mut rl = RateLimiter::new();
        let attacker = ip("198.18.0.66");
        let t = at(0);
        for _ in 0..1000 {
            rl.allow(attacker, t);
        }
        assert!(!rl.allow(attacker, t));
        // Another IPv4 address, an IPv6 address and the v4-mapped form are all separate buckets.
        for other in ["198.18.0.67", "fd00::1", "fd00::2", "::ffff:198.18.0.66"] {
            assert!(
                rl.allow(ip(other), t),
                "{other} throttled by another source"
            );
        }
        assert_eq!(rl.len(), 5);
    }

    #[test]
    fn gc_drops_idle_entries() {
        let mut rl = RateLimiter::new();
        assert!(rl.is_empty());
        rl.allow(ip("198.18.0.1"), at(0));
        rl.allow(ip("198.18.0.2"), at(600));
        rl.gc(at(1000));
        assert_eq!(rl.len(), 2, "exactly 1 s idle is kept");
        rl.gc(at(1001));
        assert_eq!(rl.len(), 1);
        rl.gc(at(1601));
        assert!(rl.is_empty());
        // A time that goes backwards (caller bug) neither panics nor mints tokens.
        let mut rl = RateLimiter::new();
        let a = ip("198.18.0.3");
        for _ in 0..5 {
            assert!(rl.allow(a, at(500)));
        }
        assert!(!rl.allow(a, at(100)));
        assert!(!rl.allow(a, at(500)));
    }
}
