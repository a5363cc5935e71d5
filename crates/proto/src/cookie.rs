//! Handshake MACs and cookies: the DoS defence described in `docs/protocol.md` ("Handshakes,
//! cookies and load").
//!
//! mac1 proves the sender knows our public key (checked on every handshake message). mac2
//! proves the sender can receive at its source address: under load the responder answers an
//! initiation without a valid mac2 with an encrypted cookie bound to that address, and the
//! initiator's retry carries mac2 keyed with that cookie.
//!
//! The address bytes are the IP followed by the big-endian port (6 or 18 bytes, as
//! `vpn_conn::Endpoint::dst_to_bytes` produces). A peer shipped a cookie over the IP alone,
//! which lets every host behind one NAT reuse one cookie; ours covers the port too.

use core::fmt;

use blake2::digest::consts::U16;
use blake2::digest::{FixedOutput, KeyInit, Update};
use blake2::{Blake2s256, Blake2sMac, Digest};
use chacha20poly1305::aead::AeadInPlace;
use chacha20poly1305::{XChaCha20Poly1305, XNonce};
use rand_core::{CryptoRng, RngCore};
use subtle::ConstantTimeEq;
use zeroize::Zeroize;

use crate::consts::COOKIE_REFRESH_TIME;
use crate::time::Instant;

const LABEL_MAC1: &[u8; 8] = b"mac1----";
const LABEL_COOKIE: &[u8; 8] = b"cookie--";
/// Message type of a cookie reply.
pub const COOKIE_REPLY_TYPE: u32 = 3;
/// Size of a cookie reply: type, receiver, 24-byte nonce, 16-byte cookie + 16-byte tag.
pub const COOKIE_REPLY_LEN: usize = 64;
const MAC_LEN: usize = 16;
/// mac1 and mac2 trail every handshake message.
const MACS_LEN: usize = 2 * MAC_LEN;

/// Why a cookie operation failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CookieError {
    /// The message is too short to carry mac1 and mac2, or a reply is not exactly 64 bytes.
    BadLength,
    /// The reply's type field is not 3.
    WrongType,
    /// We have sent no handshake message whose mac1 the reply could answer.
    NoPendingMac1,
    /// The encrypted cookie did not authenticate (wrong peer key or unrelated mac1).
    Decrypt,
}

impl fmt::Display for CookieError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            CookieError::BadLength => "cookie: message has the wrong length",
            CookieError::WrongType => "cookie: not a cookie reply",
            CookieError::NoPendingMac1 => "cookie: reply without a handshake message sent",
            CookieError::Decrypt => "cookie: reply failed authentication",
        })
    }
}

impl std::error::Error for CookieError {}

/// BLAKE2s-256(label ‖ public key): the mac1 key and the cookie-encryption key.
fn labelled_hash(label: &[u8; 8], public: &[u8; 32]) -> [u8; 32] {
    Blake2s256::new()
        .chain_update(label)
        .chain_update(public)
        .finalize()
        .into()
}

/// Keyed BLAKE2s with a 16-byte output (not HMAC), as WireGuard's MAC(key, data).
fn mac16<const N: usize>(key: &[u8; N], data: &[u8]) -> [u8; MAC_LEN] {
    const { assert!(N >= 1 && N <= 32, "BLAKE2s keys are 1..=32 bytes") };
    match Blake2sMac::<U16>::new_from_slice(key) {
        Ok(mut m) => {
            m.update(data);
            m.finalize_fixed().into()
        }
        Err(_) => unreachable!("key length checked at compile time"),
    }
}

fn ct_eq(a: &[u8], b: &[u8]) -> bool {
    a.ct_eq(b).into()
}

/// Offsets of mac1 and mac2 in a handshake message, `None` if it cannot hold both.
fn mac_offsets(msg: &[u8]) -> Option<(usize, usize)> {
    let mac2 = msg.len().checked_sub(MAC_LEN)?;
    let mac1 = msg.len().checked_sub(MACS_LEN)?;
    // A handshake message has at least its 4-byte type in front of the MACs.
    (mac1 >= 4).then_some((mac1, mac2))
}

/// Responder side: verifies mac1/mac2 and issues cookie replies. One per device, rebuilt when
/// the private key changes.
pub struct CookieChecker {
    mac1_key: [u8; 32],
    cookie_key: [u8; 32],
    secret: [u8; 32],
    /// When the current secret was drawn; `None` until the first reply, so mac2 never
    /// verifies against the initial all-zero secret.
    secret_set: Option<Instant>,
}

impl fmt::Debug for CookieChecker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CookieChecker")
            .field("secret_set", &self.secret_set)
            .finish_non_exhaustive()
    }
}

impl Drop for CookieChecker {
    fn drop(&mut self) {
        self.mac1_key.zeroize();
        self.cookie_key.zeroize();
        self.secret.zeroize();
    }
}

impl CookieChecker {
    /// A checker for messages addressed to `local_public`.
    pub fn new(local_public: &[u8; 32]) -> Self {
        CookieChecker {
            mac1_key: labelled_hash(LABEL_MAC1, local_public),
            cookie_key: labelled_hash(LABEL_COOKIE, local_public),
            secret: [0; 32],
            secret_set: None,
        }
    }

    /// Whether `msg` (a whole initiation or response) carries a valid mac1 for our key.
    pub fn check_mac1(&self, msg: &[u8]) -> bool {
        let Some((smac1, smac2)) = mac_offsets(msg) else {
            return false;
        };
        let want = mac16(&self.mac1_key, &msg[..smac1]);
        ct_eq(&want, &msg[smac1..smac2])
    }

    /// Whether `msg` carries a valid mac2 for source address `src` (IP bytes ‖ BE port).
    /// False when no secret was drawn yet or the current one is older than 120 s.
    pub fn check_mac2(&self, msg: &[u8], src: &[u8], now: Instant) -> bool {
        let Some((_, smac2)) = mac_offsets(msg) else {
            return false;
        };
        if !self.secret_fresh(now) {
            return false;
        }
        let mut cookie = mac16(&self.secret, src);
        let want = mac16(&cookie, &msg[..smac2]);
        cookie.zeroize();
        ct_eq(&want, &msg[smac2..])
    }

    /// Builds the cookie reply to `msg` (whose mac1 becomes the reply's associated data),
    /// addressed to `receiver_index` (the message's sender index) for source `src`.
    /// Draws a new secret first when none exists or it is older than 120 s.
    pub fn create_reply<R: RngCore + CryptoRng>(
        &mut self,
        msg: &[u8],
        receiver_index: u32,
        src: &[u8],
        now: Instant,
        rng: &mut R,
    ) -> Result<[u8; COOKIE_REPLY_LEN], CookieError> {
        let (smac1, smac2) = mac_offsets(msg).ok_or(CookieError::BadLength)?;
        if !self.secret_fresh(now) {
            rng.fill_bytes(&mut self.secret);
            self.secret_set = Some(now);
        }
        let mut reply = [0u8; COOKIE_REPLY_LEN];
        reply[..4].copy_from_slice(&COOKIE_REPLY_TYPE.to_le_bytes());
        reply[4..8].copy_from_slice(&receiver_index.to_le_bytes());
        let (nonce, sealed) = reply[8..].split_at_mut(24);
        rng.fill_bytes(nonce);
        let (cookie, tag_out) = sealed.split_at_mut(MAC_LEN);
        cookie.copy_from_slice(&mac16(&self.secret, src));
        let aead = XChaCha20Poly1305::new((&self.cookie_key).into());
        let tag = aead
            .encrypt_in_place_detached(XNonce::from_slice(nonce), &msg[smac1..smac2], cookie)
            .map_err(|_| CookieError::Decrypt)?;
        tag_out.copy_from_slice(&tag);
        Ok(reply)
    }

    fn secret_fresh(&self, now: Instant) -> bool {
        self.secret_set
            .is_some_and(|set| now - set <= COOKIE_REFRESH_TIME)
    }
}

/// Initiator side: adds mac1/mac2 to our handshake messages and stores cookies the peer sends.
/// One per peer, keyed by the peer's public key.
pub struct CookieGenerator {
    mac1_key: [u8; 32],
    cookie_key: [u8; 32],
    last_mac1: Option<[u8; MAC_LEN]>,
    cookie: [u8; MAC_LEN],
    cookie_set: Option<Instant>,
}

impl fmt::Debug for CookieGenerator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CookieGenerator")
            .field("has_last_mac1", &self.last_mac1.is_some())
            .field("cookie_set", &self.cookie_set)
            .finish_non_exhaustive()
    }
}

impl Drop for CookieGenerator {
    fn drop(&mut self) {
        self.mac1_key.zeroize();
        self.cookie_key.zeroize();
        self.cookie.zeroize();
    }
}

impl CookieGenerator {
    /// A generator for messages to the peer with `remote_public`.
    pub fn new(remote_public: &[u8; 32]) -> Self {
        CookieGenerator {
            mac1_key: labelled_hash(LABEL_MAC1, remote_public),
            cookie_key: labelled_hash(LABEL_COOKIE, remote_public),
            last_mac1: None,
            cookie: [0; MAC_LEN],
            cookie_set: None,
        }
    }

    /// Fills the trailing mac1 and mac2 of a finished handshake message `msg`.
    ///
    /// mac1 is always computed and remembered (a cookie reply must quote it); mac2 is keyed
    /// with the stored cookie if it is at most 120 s old, and zero otherwise. A buffer too
    /// short to hold the MACs is left untouched (handshake messages are 148 or 92 bytes).
    pub fn add_macs(&mut self, msg: &mut [u8], now: Instant) {
        let Some((smac1, smac2)) = mac_offsets(msg) else {
            return;
        };
        let mac1 = mac16(&self.mac1_key, &msg[..smac1]);
        msg[smac1..smac2].copy_from_slice(&mac1);
        self.last_mac1 = Some(mac1);
        let fresh = self
            .cookie_set
            .is_some_and(|set| now - set <= COOKIE_REFRESH_TIME);
        let mac2 = if fresh {
            mac16(&self.cookie, &msg[..smac2])
        } else {
            [0; MAC_LEN]
        };
        msg[smac2..].copy_from_slice(&mac2);
    }

    /// Decrypts and stores the cookie from a cookie reply (the whole 64-byte message). Needs
    /// the mac1 of our last handshake message as associated data. The caller has already
    /// matched the reply's receiver index to this peer.
    pub fn consume_reply(&mut self, reply: &[u8], now: Instant) -> Result<(), CookieError> {
        let reply: &[u8; COOKIE_REPLY_LEN] =
            reply.try_into().map_err(|_| CookieError::BadLength)?;
        if reply[..4] != COOKIE_REPLY_TYPE.to_le_bytes() {
            return Err(CookieError::WrongType);
        }
        let last_mac1 = self.last_mac1.ok_or(CookieError::NoPendingMac1)?;
        let nonce = XNonce::from_slice(&reply[8..32]);
        let mut cookie = [0u8; MAC_LEN];
        cookie.copy_from_slice(&reply[32..48]);
        let tag = chacha20poly1305::Tag::from_slice(&reply[48..64]);
        let aead = XChaCha20Poly1305::new((&self.cookie_key).into());
        let opened = aead.decrypt_in_place_detached(nonce, &last_mac1, &mut cookie, tag);
        if opened.is_err() {
            cookie.zeroize();
            return Err(CookieError::Decrypt);
        }
        self.cookie.copy_from_slice(&cookie);
        cookie.zeroize();
        self.cookie_set = Some(now);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::time::Duration;
    use rand::rngs::StdRng;
    use rand::SeedableRng;

    const RESPONDER_PUB: [u8; 32] = [0x42; 32];

    fn initiation(seed: u8) -> [u8; 148] {
        let mut m = [seed; 148];
        m[..4].copy_from_slice(&1u32.to_le_bytes());
        m
    }

    fn src(ip: [u8; 4], port: u16) -> [u8; 6] {
        let mut s = [0u8; 6];
        s[..4].copy_from_slice(&ip);
        s[4..].copy_from_slice(&port.to_be_bytes());
        s
    }

    fn t(secs: u64) -> Instant {
        Instant::from_nanos(7_000_000_000 + secs * 1_000_000_000)
    }

    #[test]
    fn mac1_round_trip_and_rejection() {
        let checker = CookieChecker::new(&RESPONDER_PUB);
        let mut gen = CookieGenerator::new(&RESPONDER_PUB);
        let mut msg = initiation(9);
        gen.add_macs(&mut msg, t(0));
        assert!(checker.check_mac1(&msg));
        let mut response = [5u8; 92];
        gen.add_macs(&mut response, t(0));
        assert!(checker.check_mac1(&response));
        for i in [0usize, 50, 115, 116, 131] {
            let mut bad = msg;
            bad[i] ^= 1;
            assert!(!checker.check_mac1(&bad), "flipped byte {i}");
        }
        // mac2 is not covered by mac1.
        let mut m2 = msg;
        m2[140] ^= 1;
        assert!(checker.check_mac1(&m2));
        assert!(
            !CookieChecker::new(&[0x43; 32]).check_mac1(&msg),
            "other responder key"
        );
        for len in 0..36 {
            assert!(!checker.check_mac1(&msg[..len]));
            assert!(!checker.check_mac2(&msg[..len], &src([1, 2, 3, 4], 5), t(0)));
        }
        // Without a cookie mac2 is zero.
        assert_eq!(&msg[132..], &[0u8; 16]);
    }

    /// The full cookie dance: reply, consume, mac2 accepted for the same address and port only.
    fn cookie_dance(
        checker: &mut CookieChecker,
        gen: &mut CookieGenerator,
        addr: &[u8],
        now: Instant,
    ) -> [u8; 148] {
        let mut rng = StdRng::seed_from_u64(now.as_nanos());
        let mut msg = initiation(1);
        gen.add_macs(&mut msg, now);
        assert!(!checker.check_mac2(&msg, addr, now));
        let reply = checker
            .create_reply(&msg, 0xdead_beef, addr, now, &mut rng)
            .unwrap();
        assert_eq!(&reply[..8], &[3, 0, 0, 0, 0xef, 0xbe, 0xad, 0xde]);
        gen.consume_reply(&reply, now).unwrap();
        let mut retry = initiation(2);
        gen.add_macs(&mut retry, now);
        assert!(checker.check_mac1(&retry));
        retry
    }

    #[test]
    fn mac2_binds_address_and_port_and_expires() {
        let mut checker = CookieChecker::new(&RESPONDER_PUB);
        let mut gen = CookieGenerator::new(&RESPONDER_PUB);
        let addr = src([198, 18, 0, 1], 51820);
        let retry = cookie_dance(&mut checker, &mut gen, &addr, t(0));
        assert!(checker.check_mac2(&retry, &addr, t(0)));
        assert!(
            !checker.check_mac2(&retry, &src([198, 18, 0, 1], 51821), t(0)),
            "same IP, other port"
        );
        assert!(
            !checker.check_mac2(&retry, &src([198, 18, 0, 2], 51820), t(0)),
            "other IP"
        );
        assert!(
            !checker.check_mac2(&retry, &addr[..4], t(0)),
            "IP without port"
        );
        let mut v6 = [0u8; 18];
        v6[0] = 0xfd;
        v6[16..].copy_from_slice(&51820u16.to_be_bytes());
        assert!(!checker.check_mac2(&retry, &v6, t(0)));
        // Valid up to and including 120 s after the secret was drawn, invalid after.
        assert!(checker.check_mac2(&retry, &addr, t(120)));
        assert!(!checker.check_mac2(&retry, &addr, t(120) + Duration::from_nanos(1)));
        // A modified message fails mac2.
        let mut bad = retry;
        bad[10] ^= 1;
        assert!(!checker.check_mac2(&bad, &addr, t(0)));
    }

    #[test]
    fn secret_rotates_lazily_after_120_s() {
        let mut checker = CookieChecker::new(&RESPONDER_PUB);
        let mut gen = CookieGenerator::new(&RESPONDER_PUB);
        let addr = src([198, 18, 0, 1], 4000);
        let first = cookie_dance(&mut checker, &mut gen, &addr, t(0));
        let secret0 = checker.secret;
        // Another reply within 120 s keeps the secret (the cookie stays valid for everyone).
        let mut rng = StdRng::seed_from_u64(99);
        checker
            .create_reply(&first, 1, &addr, t(119), &mut rng)
            .unwrap();
        assert_eq!(checker.secret, secret0);
        assert!(checker.check_mac2(&first, &addr, t(119)));
        // After 120 s the next reply draws a new secret; the old mac2 no longer verifies.
        let second = cookie_dance(&mut checker, &mut gen, &addr, t(121));
        assert_ne!(checker.secret, secret0);
        assert_eq!(checker.secret_set, Some(t(121)));
        assert!(!checker.check_mac2(&first, &addr, t(121)));
        assert!(checker.check_mac2(&second, &addr, t(121)));
    }

    #[test]
    fn generator_cookie_expires_after_120_s() {
        let mut checker = CookieChecker::new(&RESPONDER_PUB);
        let mut gen = CookieGenerator::new(&RESPONDER_PUB);
        let addr = src([198, 18, 0, 9], 1);
        cookie_dance(&mut checker, &mut gen, &addr, t(10));
        let mut m = initiation(3);
        gen.add_macs(&mut m, t(130));
        assert_ne!(
            &m[132..],
            &[0u8; 16],
            "cookie exactly 120 s old is still used"
        );
        gen.add_macs(&mut m, t(130) + Duration::from_nanos(1));
        assert_eq!(&m[132..], &[0u8; 16], "expired cookie: mac2 zero");
    }

    #[test]
    fn consume_reply_rejects_bad_replies() {
        let mut checker = CookieChecker::new(&RESPONDER_PUB);
        let mut gen = CookieGenerator::new(&RESPONDER_PUB);
        let mut rng = StdRng::seed_from_u64(1);
        let addr = src([198, 18, 0, 1], 9);
        let mut msg = initiation(1);
        let mut other = CookieGenerator::new(&RESPONDER_PUB);
        other.add_macs(&mut msg, t(0));
        let reply = checker
            .create_reply(&msg, 7, &addr, t(0), &mut rng)
            .unwrap();
        assert_eq!(
            gen.consume_reply(&reply, t(0)),
            Err(CookieError::NoPendingMac1)
        );
        // Our own, different message: the reply's AD (the other mac1) does not match ours.
        let mut mine = initiation(2);
        gen.add_macs(&mut mine, t(0));
        assert_eq!(gen.consume_reply(&reply, t(0)), Err(CookieError::Decrypt));
        assert_eq!(
            gen.consume_reply(&reply[..63], t(0)),
            Err(CookieError::BadLength)
        );
        let mut wrong_type = reply;
        wrong_type[0] = 2;
        assert_eq!(
            other.consume_reply(&wrong_type, t(0)),
            Err(CookieError::WrongType)
        );
        for i in 8..64 {
            let mut bad = reply;
            bad[i] ^= 0x20;
            assert_eq!(
                other.consume_reply(&bad, t(0)),
                Err(CookieError::Decrypt),
                "byte {i}"
            );
        }
        assert_eq!(other.consume_reply(&reply, t(0)), Ok(()));
        // A reply keyed for another responder does not decrypt.
        let mut stranger = CookieGenerator::new(&[1; 32]);
        stranger.add_macs(&mut msg, t(0));
        assert_eq!(
            stranger.consume_reply(&reply, t(0)),
            Err(CookieError::Decrypt)
        );
        assert_eq!(
            checker.create_reply(&msg[..35], 1, &addr, t(0), &mut rng),
            Err(CookieError::BadLength)
        );
    }
}
