//! Every protocol timing and size constant in one place.
//!
//! Values follow wireguard-go's `device/constants.go` and `queueconstants_default.go`
//! (listed with their meaning in `docs/protocol.md`, "Messages and constants") so that timers,
//! limits and queue depths behave identically to the implementations we interoperate with.

use core::time::Duration;

/// After this many messages under one keypair the initiator starts a new handshake.
pub const REKEY_AFTER_MESSAGES: u64 = 1 << 60;

/// No message may be sent or accepted with a counter at or above this value: 2^64 − 2^13 − 1.
///
/// The 2^13 gap below `u64::MAX` leaves headroom so that a batched `fetch_add` of send
/// counters can overshoot the limit without wrapping to zero (which would reuse nonces).
pub const REJECT_AFTER_MESSAGES: u64 = u64::MAX - (1 << 13);

/// A keypair older than this triggers a new handshake when we send.
pub const REKEY_AFTER_TIME: Duration = Duration::from_secs(120);

/// How long we keep retrying handshakes before giving up on a peer.
pub const REKEY_ATTEMPT_TIME: Duration = Duration::from_secs(90);

/// Retransmit interval for a handshake initiation that got no response.
pub const REKEY_TIMEOUT: Duration = Duration::from_secs(5);

/// Retransmissions that fit into [`REKEY_ATTEMPT_TIME`]: 90 s / 5 s.
pub const MAX_TIMER_HANDSHAKES: u32 = 18;

/// Upper bound (exclusive) of the random jitter added to each handshake retransmission, so
/// that two peers that lost packets at the same moment do not retry in lockstep.
pub const REKEY_TIMEOUT_JITTER_MAX: Duration = Duration::from_millis(334);

/// A keypair older than this may neither send nor receive.
pub const REJECT_AFTER_TIME: Duration = Duration::from_secs(180);

/// Send an empty (keepalive) message if we received data but sent nothing for this long.
pub const KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(10);

/// Lifetime of the responder's cookie secret and of a cookie held by the initiator.
pub const COOKIE_REFRESH_TIME: Duration = Duration::from_secs(120);

/// Minimum spacing between two accepted initiations from one peer (flood protection): 1 s / 50.
pub const HANDSHAKE_INITIATION_RATE: Duration = Duration::from_millis(20);

/// Transport plaintext is zero-padded to a multiple of this (hides exact packet lengths).
pub const PADDING_MULTIPLE: usize = 16;

/// The device stays "under load" (demanding cookies) this long after the handshake queue was
/// last seen at least 1/8 full.
pub const UNDER_LOAD_AFTER_TIME: Duration = Duration::from_secs(1);

/// Maximum number of peers on one device: the Linux kernel's limit (2^20), not wireguard-go's
/// 2^16, so a hub of 100 000 peers configures. Every peer costs memory only, and a UAPI `set`
/// past the limit is refused with `EINVAL`; the UAPI parsers read the limit from here.
pub const MAX_PEERS: usize = 1 << 20;

/// Default TUN MTU: 1500 minus the worst-case IPv6 + UDP + WireGuard overhead (80 bytes).
pub const DEFAULT_MTU: usize = 1420;

/// Largest datagram or TUN segment we handle; also the size of one message buffer.
pub const MAX_SEGMENT_SIZE: usize = (1 << 16) - 1;

/// Largest WireGuard message (equal to the segment size on the default platforms).
pub const MAX_MESSAGE_SIZE: usize = MAX_SEGMENT_SIZE;

/// Largest transport plaintext: the message minus header (16) and tag (16).
pub const MAX_CONTENT_SIZE: usize = MAX_MESSAGE_SIZE - 32;

/// Capacity of a peer's staged queue (packets waiting for a usable keypair), in containers.
pub const QUEUE_STAGED_SIZE: usize = 128;

/// Capacity of the device encryption queue and each peer's outbound queue, in containers.
pub const QUEUE_OUTBOUND_SIZE: usize = 1024;

/// Capacity of the device decryption queue and each peer's inbound queue, in containers.
pub const QUEUE_INBOUND_SIZE: usize = 1024;

/// Capacity of the handshake queue; pushes beyond it are dropped, never blocked.
pub const QUEUE_HANDSHAKE_SIZE: usize = 1024;

/// Most packets moved by one TUN or socket read/write call.
pub const IDEAL_BATCH_SIZE: usize = 128;

/// Bits in one replay-window block (one `u64`).
pub const REPLAY_BLOCK_BITS: u64 = 64;

/// Blocks in the replay-window ring (RFC 6479).
pub const REPLAY_RING_BLOCKS: usize = 128;

/// Counters behind the highest seen that the replay window still accepts:
/// (128 − 1) × 64 = 8128. One block is sacrificed so that advancing never clears bits
/// still inside the window.
pub const REPLAY_WINDOW_SIZE: u64 = (REPLAY_RING_BLOCKS as u64 - 1) * REPLAY_BLOCK_BITS;

/// Handshake packets per second allowed from one source IP once under load.
pub const RATELIMIT_PACKETS_PER_SECOND: u64 = 20;

/// Handshake packets one source IP may send back to back.
pub const RATELIMIT_PACKETS_BURSTABLE: u64 = 5;

/// Rate-limiter entries idle longer than this are dropped (and the GC interval).
pub const RATELIMIT_GC_TIME: Duration = Duration::from_secs(1);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn derived_values_match_wireguard_go() {
        assert_eq!(REJECT_AFTER_MESSAGES, u64::MAX - 8192);
        assert_eq!(REJECT_AFTER_MESSAGES as u128, (1u128 << 64) - (1 << 13) - 1);
        assert_eq!(
            u64::from(MAX_TIMER_HANDSHAKES),
            REKEY_ATTEMPT_TIME.as_secs() / REKEY_TIMEOUT.as_secs()
        );
        assert_eq!(REPLAY_WINDOW_SIZE, 8128);
        assert_eq!(MAX_CONTENT_SIZE, 65_503);
        assert_eq!(MAX_PEERS, 1_048_576);
        assert_eq!(HANDSHAKE_INITIATION_RATE * 50, Duration::from_secs(1));
    }
}
