//! TAI64N timestamps as WireGuard sends them in the handshake initiation.
//!
//! The responder only needs them to grow: it rejects an initiation whose timestamp is not
//! strictly newer than the last one it accepted from that peer (replay protection). The
//! nanoseconds are rounded down to a multiple of 2^24 ns (about 16.8 ms), as wireguard-go and
//! the kernel do, so that the timestamp does not leak a fine-grained clock reading.

/// Size of an encoded timestamp.
pub const TIMESTAMP_SIZE: usize = 12;

/// TAI64 label of the Unix epoch: 2^62 + 10 (the 10 leap seconds TAI was ahead in 1970).
const TAI64_BASE: u64 = 0x4000_0000_0000_000a;
/// Low bits of the nanosecond field that are cleared ("whitening").
const WHITENER_MASK: u32 = 0x00ff_ffff;
const NANOS_PER_SEC: u32 = 1_000_000_000;

/// A 12-byte TAI64N label: 8 bytes of big-endian seconds, 4 of big-endian nanoseconds.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Tai64N([u8; TIMESTAMP_SIZE]);

impl Tai64N {
    /// The all-zero timestamp, older than any real one: the "never" of a fresh peer.
    pub const ZERO: Tai64N = Tai64N([0; TIMESTAMP_SIZE]);

    /// Encodes a wall-clock time given as seconds and nanoseconds since the Unix epoch.
    /// Nanoseconds of a second or more carry into the seconds.
    pub fn from_unix(secs: u64, nanos: u32) -> Self {
        let secs = secs.saturating_add(u64::from(nanos / NANOS_PER_SEC));
        let nanos = (nanos % NANOS_PER_SEC) & !WHITENER_MASK;
        let mut b = [0u8; TIMESTAMP_SIZE];
        b[..8].copy_from_slice(&TAI64_BASE.saturating_add(secs).to_be_bytes());
        b[8..].copy_from_slice(&nanos.to_be_bytes());
        Tai64N(b)
    }

    /// Encodes a duration since the Unix epoch (e.g. `SystemTime::duration_since(UNIX_EPOCH)`
    /// read by the caller).
    pub fn from_unix_duration(since_epoch: core::time::Duration) -> Self {
        Self::from_unix(since_epoch.as_secs(), since_epoch.subsec_nanos())
    }

    /// Wraps received bytes as they are (no validation: only the ordering matters).
    pub const fn from_bytes(bytes: [u8; TIMESTAMP_SIZE]) -> Self {
        Tai64N(bytes)
    }

    /// The encoded bytes.
    pub fn as_bytes(&self) -> &[u8; TIMESTAMP_SIZE] {
        &self.0
    }

    /// True when `self` is strictly newer than `other` (lexicographic byte order, which for
    /// this big-endian encoding is time order).
    pub fn is_after(&self, other: &Tai64N) -> bool {
        self.0 > other.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encoding_matches_wireguard_go() {
        // secs = 2^62 + 10 + unix; nanos whitened to a multiple of 2^24.
        let t = Tai64N::from_unix(1_700_000_000, 123_456_789);
        let secs = u64::from_be_bytes(t.as_bytes()[..8].try_into().unwrap());
        let nanos = u32::from_be_bytes(t.as_bytes()[8..].try_into().unwrap());
        assert_eq!(secs, (1u64 << 62) + 10 + 1_700_000_000);
        assert_eq!(nanos, 123_456_789 / (1 << 24) * (1 << 24));
        assert_eq!(nanos % (1 << 24), 0);
        assert_eq!(
            Tai64N::from_unix(0, 0).as_bytes(),
            &[0x40, 0, 0, 0, 0, 0, 0, 0x0a, 0, 0, 0, 0]
        );
    }

    #[test]
    fn whitening_granularity() {
        // Within one 2^24 ns bucket the timestamps are equal, hence not "after".
        let a = Tai64N::from_unix(5, 1 << 24);
        let b = Tai64N::from_unix(5, (1 << 25) - 1);
        assert_eq!(a, b);
        assert!(!b.is_after(&a));
        let c = Tai64N::from_unix(5, 1 << 25);
        assert!(c.is_after(&b));
        assert!(!b.is_after(&c));
    }

    #[test]
    fn ordering_and_carry() {
        let a = Tai64N::from_unix(10, 999_999_999);
        let b = Tai64N::from_unix(11, 0);
        assert!(b.is_after(&a));
        assert_eq!(
            Tai64N::from_unix(10, 1_500_000_000),
            Tai64N::from_unix(11, 500_000_000)
        );
        assert!(a.is_after(&Tai64N::ZERO));
        assert!(!Tai64N::ZERO.is_after(&Tai64N::ZERO));
        assert_eq!(Tai64N::from_bytes(*a.as_bytes()), a);
        // Saturates instead of overflowing.
        let max = Tai64N::from_unix(u64::MAX, u32::MAX);
        assert!(max.is_after(&b));
        assert_eq!(
            Tai64N::from_unix_duration(core::time::Duration::new(11, 0)),
            b
        );
    }
}
