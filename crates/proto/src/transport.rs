//! Transport keypairs: sealing and opening data messages (type 4) in place.
//!
//! A [`Keypair`] is what a completed handshake yields: one key per direction, the two session
//! indices and an atomic send counter. Sealing works on a buffer that already has 16 bytes of
//! headroom in front of the plaintext, so the header is written in front and the tag behind
//! without copying the packet (`docs/protocol.md`, "Sending", step 3). The replay window lives
//! beside the keypair in the device ([`crate::replay::ReplayFilter`]), because it needs a lock
//! while the keypair itself is shared read-only between crypto workers.

use core::fmt;
use core::sync::atomic::{AtomicU64, Ordering};

use crate::aead::{TransportKey, TAG_LEN};
use crate::consts::{IDEAL_BATCH_SIZE, PADDING_MULTIPLE, REJECT_AFTER_MESSAGES};
use crate::time::Instant;

/// Message type of a transport message (first little-endian u32).
pub const TRANSPORT_TYPE: u32 = 4;
/// Bytes in front of the ciphertext: type, receiver index, counter.
pub const TRANSPORT_HEADER_LEN: usize = 16;
/// Header plus tag: the size of a keepalive and the minimum transport message.
pub const TRANSPORT_OVERHEAD: usize = TRANSPORT_HEADER_LEN + TAG_LEN;

/// Largest `n` accepted by [`Keypair::reserve_nonces`].
///
/// The counter may overshoot [`REJECT_AFTER_MESSAGES`] by every reservation in flight at the
/// moment it crosses the limit; the limit leaves 2^13 values of headroom below `u64::MAX`.
/// Capping one reservation at a batch keeps a wrap to zero (nonce reuse) out of reach for
/// fewer than 64 threads reserving on the same keypair at once.
pub const MAX_NONCE_RESERVATION: u64 = IDEAL_BATCH_SIZE as u64;

/// Why a transport message could not be sealed or opened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TransportError {
    /// The buffer cannot hold header, padded plaintext and tag (or is shorter than 32 bytes).
    BufferTooShort {
        /// Bytes the operation needs.
        needed: usize,
        /// Bytes the buffer has.
        got: usize,
    },
    /// `padded_len` was smaller than the plaintext.
    BadPadding,
    /// The counter is at or beyond [`REJECT_AFTER_MESSAGES`].
    CounterExhausted,
    /// The message failed authentication (wrong key or counter, or modified).
    Authentication,
}

impl fmt::Display for TransportError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TransportError::BufferTooShort { needed, got } => {
                write!(
                    f,
                    "transport buffer too short: need {needed} bytes, have {got}"
                )
            }
            TransportError::BadPadding => f.write_str("padded length smaller than plaintext"),
            TransportError::CounterExhausted => {
                f.write_str("message counter at or beyond the reject limit")
            }
            TransportError::Authentication => {
                f.write_str("transport message failed authentication")
            }
        }
    }
}

impl std::error::Error for TransportError {}

/// The session keys and counters produced by one handshake.
pub struct Keypair {
    /// Our index for this session: peers put it in the receiver field of messages to us.
    pub local_index: u32,
    /// The peer's index: we put it in the receiver field of messages we send.
    pub remote_index: u32,
    /// Whether we initiated the handshake (only the initiator rekeys on age).
    pub is_initiator: bool,
    /// When the keypair was derived (for REKEY/REJECT_AFTER_TIME).
    pub created: Instant,
    send: TransportKey,
    recv: TransportKey,
    send_nonce: AtomicU64,
}

impl fmt::Debug for Keypair {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Keypair")
            .field("local_index", &self.local_index)
            .field("remote_index", &self.remote_index)
            .field("is_initiator", &self.is_initiator)
            .field("created", &self.created)
            .field("send_nonce", &self.send_nonce())
            .finish_non_exhaustive()
    }
}

impl Keypair {
    /// Builds a keypair from the two derived transport keys; the send counter starts at 0.
    pub fn new(
        send_key: &[u8; 32],
        recv_key: &[u8; 32],
        local_index: u32,
        remote_index: u32,
        is_initiator: bool,
        created: Instant,
    ) -> Self {
        Keypair {
            local_index,
            remote_index,
            is_initiator,
            created,
            send: TransportKey::new(send_key),
            recv: TransportKey::new(recv_key),
            send_nonce: AtomicU64::new(0),
        }
    }

    /// Reserves `n` consecutive send counters with ONE atomic `fetch_add` and returns the first
    /// (a batch takes its nonces at once).
    ///
    /// Counters `>= REJECT_AFTER_MESSAGES` must never be used: the caller checks each. The
    /// stored counter never wraps: once a reservation crosses the limit it is clamped back to
    /// the limit, and an exhausted keypair returns the limit without adding. `n` above
    /// [`MAX_NONCE_RESERVATION`] is refused (returns the limit: nothing usable).
    pub fn reserve_nonces(&self, n: u64) -> u64 {
        let current = self.send_nonce.load(Ordering::Relaxed);
        if n == 0 || current >= REJECT_AFTER_MESSAGES {
            return current.min(REJECT_AFTER_MESSAGES);
        }
        if n > MAX_NONCE_RESERVATION {
            debug_assert!(
                n <= MAX_NONCE_RESERVATION,
                "nonce reservation of {n} exceeds a batch"
            );
            return REJECT_AFTER_MESSAGES;
        }
        let first = self.send_nonce.fetch_add(n, Ordering::Relaxed);
        if first.saturating_add(n) > REJECT_AFTER_MESSAGES {
            // The counter is already past the limit (it only grows between our add and this
            // store), so lowering it to the limit re-enables nothing.
            self.send_nonce
                .store(REJECT_AFTER_MESSAGES, Ordering::Relaxed);
        }
        first
    }

    /// The next send counter that would be handed out.
    pub fn send_nonce(&self) -> u64 {
        self.send_nonce.load(Ordering::Relaxed)
    }

    /// Forbids further sending under this keypair (used when our private key changes).
    pub fn expire_sending(&self) {
        self.send_nonce
            .store(REJECT_AFTER_MESSAGES, Ordering::Relaxed);
    }

    /// Seals one transport message in place.
    ///
    /// On entry `buf[16..16 + plaintext_len]` holds the plaintext. It is zero-padded to
    /// `padded_len`, the 16-byte header (type 4, our `remote_index` as receiver, counter LE) is
    /// written in front, the padded plaintext is encrypted and the tag appended. Returns the
    /// message length `16 + padded_len + 16`.
    pub fn seal(
        &self,
        counter: u64,
        buf: &mut [u8],
        plaintext_len: usize,
        padded_len: usize,
    ) -> Result<usize, TransportError> {
        if counter >= REJECT_AFTER_MESSAGES {
            return Err(TransportError::CounterExhausted);
        }
        if padded_len < plaintext_len {
            return Err(TransportError::BadPadding);
        }
        let needed = padded_len
            .checked_add(TRANSPORT_OVERHEAD)
            .ok_or(TransportError::BadPadding)?;
        let got = buf.len();
        let msg = buf
            .get_mut(..needed)
            .ok_or(TransportError::BufferTooShort { needed, got })?;
        let (header, rest) = msg.split_at_mut(TRANSPORT_HEADER_LEN);
        let (body, tag_out) = rest.split_at_mut(padded_len);
        header[..4].copy_from_slice(&TRANSPORT_TYPE.to_le_bytes());
        header[4..8].copy_from_slice(&self.remote_index.to_le_bytes());
        header[8..].copy_from_slice(&counter.to_le_bytes());
        body[plaintext_len..].fill(0);
        let tag = self.send.seal_in_place(counter, body);
        tag_out.copy_from_slice(&tag);
        Ok(needed)
    }

    /// Opens the transport message `buf[..]` in place; the caller already parsed the header and
    /// passes its counter. Returns the plaintext length; the plaintext is at
    /// `buf[16..16 + len]`.
    pub fn open(&self, counter: u64, buf: &mut [u8]) -> Result<usize, TransportError> {
        let got = buf.len();
        if got < TRANSPORT_OVERHEAD {
            return Err(TransportError::BufferTooShort {
                needed: TRANSPORT_OVERHEAD,
                got,
            });
        }
        if counter >= REJECT_AFTER_MESSAGES {
            return Err(TransportError::CounterExhausted);
        }
        let plain_len = got - TRANSPORT_OVERHEAD;
        let (_, rest) = buf.split_at_mut(TRANSPORT_HEADER_LEN);
        let (body, tag_in) = rest.split_at_mut(plain_len);
        let mut tag = [0u8; TAG_LEN];
        tag.copy_from_slice(tag_in);
        self.recv
            .open_in_place(counter, body, &tag)
            .map_err(|_| TransportError::Authentication)?;
        Ok(plain_len)
    }
}

/// Padded plaintext length (`docs/protocol.md`, "Sending", step 4).
///
/// Rounds up to a multiple of 16 but never beyond `mtu`; a packet larger than the MTU (an
/// offload super-packet) pads only its remainder modulo the MTU; `mtu == 0` means plain
/// round-up. A keepalive (0 bytes) stays 0.
pub fn padded_len(plaintext_len: usize, mtu: usize) -> usize {
    let round_up = |n: usize| n.checked_next_multiple_of(PADDING_MULTIPLE);
    if mtu == 0 {
        return round_up(plaintext_len).unwrap_or(plaintext_len);
    }
    let last_unit = if plaintext_len > mtu {
        plaintext_len % mtu
    } else {
        plaintext_len
    };
    let padded_unit = round_up(last_unit)
        .unwrap_or(last_unit)
        .min(mtu)
        .max(last_unit);
    plaintext_len
        .checked_add(padded_unit - last_unit)
        .unwrap_or(plaintext_len)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pair() -> (Keypair, Keypair) {
        let a_to_b = [1u8; 32];
        let b_to_a = [2u8; 32];
        let a = Keypair::new(&a_to_b, &b_to_a, 10, 20, true, Instant::ZERO);
        let b = Keypair::new(&b_to_a, &a_to_b, 20, 10, false, Instant::ZERO);
        (a, b)
    }

    #[test]
    fn round_trip_at_many_sizes() {
        let (a, b) = pair();
        for len in [0usize, 1, 15, 16, 17, 1420] {
            let padded = padded_len(len, 1420);
            let mut buf = vec![0xeeu8; 16 + padded + 16 + 7];
            let plain: Vec<u8> = (0..len).map(|i| (i * 7) as u8).collect();
            buf[16..16 + len].copy_from_slice(&plain);
            let counter = a.reserve_nonces(1);
            let n = a.seal(counter, &mut buf, len, padded).unwrap();
            assert_eq!(n, 32 + padded);
            assert_eq!(&buf[..4], &[4, 0, 0, 0]);
            assert_eq!(&buf[4..8], &20u32.to_le_bytes());
            assert_eq!(&buf[8..16], &counter.to_le_bytes());
            assert_eq!(buf[n], 0xee, "sealing wrote past the message");
            let got = b.open(counter, &mut buf[..n]).unwrap();
            assert_eq!(got, padded);
            assert_eq!(&buf[16..16 + len], &plain[..]);
            assert!(
                buf[16 + len..16 + padded].iter().all(|&x| x == 0),
                "padding is zeros"
            );
        }
        assert_eq!(a.send_nonce(), 6);
    }

    #[test]
    fn tampering_and_wrong_counter_fail() {
        let (a, b) = pair();
        let mut buf = [0u8; 16 + 32 + 16];
        buf[16..16 + 20].fill(0xab);
        let n = a.seal(5, &mut buf, 20, 32).unwrap();
        let sealed = buf;
        for i in 16..n {
            let mut t = sealed;
            t[i] ^= 0x01;
            assert_eq!(
                b.open(5, &mut t),
                Err(TransportError::Authentication),
                "byte {i}"
            );
        }
        let mut t = sealed;
        assert_eq!(b.open(6, &mut t), Err(TransportError::Authentication));
        // The wrong direction's key must not open it either.
        let mut t = sealed;
        assert_eq!(a.open(5, &mut t), Err(TransportError::Authentication));
        let mut t = sealed;
        assert_eq!(b.open(5, &mut t), Ok(32));
    }

    #[test]
    fn short_buffers_are_errors() {
        let (a, b) = pair();
        let mut small = [0u8; 40];
        assert_eq!(
            a.seal(0, &mut small, 10, 16),
            Err(TransportError::BufferTooShort {
                needed: 48,
                got: 40
            })
        );
        assert_eq!(
            a.seal(0, &mut small, 17, 16),
            Err(TransportError::BadPadding)
        );
        assert_eq!(
            a.seal(0, &mut small, 0, usize::MAX),
            Err(TransportError::BadPadding)
        );
        for len in 0..32 {
            let mut m = vec![0u8; len];
            assert_eq!(
                b.open(0, &mut m),
                Err(TransportError::BufferTooShort {
                    needed: 32,
                    got: len
                })
            );
        }
        let mut keepalive = [0u8; 32];
        assert_eq!(
            a.seal(REJECT_AFTER_MESSAGES, &mut keepalive, 0, 0),
            Err(TransportError::CounterExhausted)
        );
        assert_eq!(
            b.open(REJECT_AFTER_MESSAGES, &mut keepalive),
            Err(TransportError::CounterExhausted)
        );
        assert_eq!(
            a.seal(REJECT_AFTER_MESSAGES - 1, &mut keepalive, 0, 0),
            Ok(32)
        );
        assert_eq!(b.open(REJECT_AFTER_MESSAGES - 1, &mut keepalive), Ok(0));
    }

    #[test]
    fn nonce_reservation_is_consecutive_and_clamps_at_the_limit() {
        let (a, _) = pair();
        assert_eq!(a.reserve_nonces(3), 0);
        assert_eq!(a.reserve_nonces(128), 3);
        assert_eq!(a.send_nonce(), 131);
        assert_eq!(a.reserve_nonces(0), 131);

        a.send_nonce
            .store(REJECT_AFTER_MESSAGES - 2, Ordering::Relaxed);
        let first = a.reserve_nonces(5);
        assert_eq!(first, REJECT_AFTER_MESSAGES - 2);
        // Only first and first+1 are usable; the stored counter is clamped, not wrapped.
        assert_eq!(a.send_nonce(), REJECT_AFTER_MESSAGES);
        assert!(a.reserve_nonces(128) >= REJECT_AFTER_MESSAGES);
        assert_eq!(a.send_nonce(), REJECT_AFTER_MESSAGES);

        let (c, _) = pair();
        c.expire_sending();
        assert_eq!(c.reserve_nonces(1), REJECT_AFTER_MESSAGES);
        assert_eq!(c.send_nonce(), REJECT_AFTER_MESSAGES);
    }

    #[test]
    #[cfg(not(debug_assertions))]
    fn oversized_reservation_is_refused() {
        let (a, _) = pair();
        assert_eq!(
            a.reserve_nonces(MAX_NONCE_RESERVATION + 1),
            REJECT_AFTER_MESSAGES
        );
        assert_eq!(a.send_nonce(), 0);
    }

    #[test]
    fn padded_len_table() {
        // (plaintext, mtu, padded), by the padding rule above.
        let table = [
            (0, 1420, 0),
            (1, 1420, 16),
            (15, 1420, 16),
            (16, 1420, 16),
            (17, 1420, 32),
            (1404, 1420, 1408),
            (1410, 1420, 1420), // would round to 1424: capped at the MTU
            (1419, 1420, 1420),
            (1420, 1420, 1420),
            (1421, 1420, 1421 + 15), // over the MTU: remainder 1 pads to 16
            (2840, 1420, 2840),      // remainder 0: no padding
            (2850, 1420, 2850 + 6),  // remainder 10 pads to 16
            (65_000, 1420, 65_000 + 4), // remainder 1100 pads to 1104 (offload super-packet)
            (17, 0, 32),
            (0, 0, 0),
            (1, 1, 1), // MTU smaller than the padding unit
            (5, 10, 10),
        ];
        for (plain, mtu, want) in table {
            assert_eq!(padded_len(plain, mtu), want, "padded_len({plain}, {mtu})");
        }
        assert_eq!(padded_len(usize::MAX, 0), usize::MAX);
        assert!(padded_len(usize::MAX - 3, 1420) >= usize::MAX - 3);
    }
}
