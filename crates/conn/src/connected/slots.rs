//! Reading rules every pair reader shares: the batch it asks the device for, the slot tiers a
//! socket grows through after an oversized datagram, the coalescing pause after a partial
//! batch, and which errors a reader rides out.

use std::io;
use std::time::Duration;

/// Buffers a pair reader asks the device for: one GRO super-datagram's worth of segments
/// (`groMaxSegments`), or as many plain datagrams.
pub(crate) const READ_BATCH: usize = 64;
/// Slot sizes: any tunnel MTU up to about 2000, a 9000-byte MTU plus overhead, the largest
/// UDP datagram. A datagram that fills its slot moves the socket to the next one for good.
pub(crate) const SLOT_TIERS: [usize; 3] = [2048, 9217, 65_535];
/// The device lays a batch of 64 or more into runs of this many buffers whose first holds any
/// UDP datagram and the others one packet of the MTU (a GRO read's most segments, so that one
/// super-datagram fills one run).
pub(crate) const SLAB_RUN: usize = 64;
/// A read that returned at least this many datagrams, but fewer than it could have, makes the
/// next read wait [`COALESCE_DELAY`] so that a fuller batch can build up.
const COALESCE_MIN: usize = 4;
/// The pause after a partial batch: 200 µs on Linux, 500 µs on darwin, whose reads come back
/// shallow (more would hurt round-trip times).
pub(crate) const COALESCE_DELAY: Duration = coalesce_delay(cfg!(target_vendor = "apple"));

const fn coalesce_delay(apple: bool) -> Duration {
    Duration::from_micros(if apple { 500 } else { 200 })
}

/// Whether a read that returned `got` datagrams of a possible `capacity` makes the next one
/// pause: a partial batch of some depth. Idle traffic (a few datagrams) and full batches never
/// pause.
pub(crate) fn should_pause(got: usize, capacity: usize) -> bool {
    got >= COALESCE_MIN && got < capacity
}

/// Where a read puts its datagrams: with GRO, or when the slot is larger than some of the
/// buffers (past the MTU's slots of the device's slab), one datagram per run of [`SLAB_RUN`],
/// in its first buffer; otherwise one per buffer. So once a socket's slot grew past the MTU's,
/// large datagrams are read one per run instead of being cut in the small slots.
pub(crate) fn stride_for(bufs: &[&mut [u8]], slot: usize, gro: bool) -> usize {
    if gro || bufs.iter().any(|b| b.len() < slot) {
        SLAB_RUN.min(bufs.len()).max(1)
    } else {
        1
    }
}

/// The smallest tier whose slot holds `max_datagram` without filling it.
pub(crate) fn initial_tier(max_datagram: usize) -> usize {
    SLOT_TIERS
        .iter()
        .position(|&s| s > max_datagram)
        .unwrap_or(SLOT_TIERS.len() - 1)
}

/// Transient errors a connected socket reports from ICMP messages: the reader keeps going.
pub(crate) fn is_transient(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::Interrupted
        || matches!(
            e.raw_os_error(),
            Some(
                libc::EAGAIN
                    | libc::ECONNREFUSED
                    | libc::EHOSTUNREACH
                    | libc::ENETUNREACH
                    | libc::EHOSTDOWN
                    | libc::EMSGSIZE
            )
        )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn coalesce_pause_is_500us_on_darwin_and_200us_elsewhere() {
        assert_eq!(coalesce_delay(true), Duration::from_micros(500));
        assert_eq!(coalesce_delay(false), Duration::from_micros(200));
        assert_eq!(
            COALESCE_DELAY,
            coalesce_delay(cfg!(target_vendor = "apple"))
        );
    }

    #[test]
    fn only_a_partial_batch_of_four_or_more_pauses() {
        assert!(!should_pause(1, 64));
        assert!(!should_pause(3, 64));
        assert!(should_pause(4, 64));
        assert!(should_pause(63, 64));
        assert!(!should_pause(64, 64));
    }

    #[test]
    fn first_slot_tier_holds_the_hinted_datagram_without_filling_it() {
        assert_eq!(initial_tier(0), 0);
        assert_eq!(initial_tier(2047), 0);
        assert_eq!(initial_tier(2048), 1);
        assert_eq!(initial_tier(9000), 1);
        assert_eq!(initial_tier(9217), 2);
        assert_eq!(initial_tier(70_000), 2);
    }
}
