//! Curve25519 keys and the pre-shared key, with the text forms the `wg` tools use.
//!
//! Private keys are stored clamped, as the `wg` tools report them back clamped after a set;
//! the all-zero private key is kept as is and means "no key" (wireguard-go's
//! `FromMaybeZeroHex`). Secrets are wiped on drop and never printed by `Debug`.

use core::fmt;

use rand_core::{CryptoRng, RngCore};
use subtle::ConstantTimeEq;
use zeroize::{Zeroize, ZeroizeOnDrop};

/// Length of every key in bytes.
pub const KEY_LEN: usize = 32;
/// Length of the base64 form of a key (with one `=` of padding).
pub const BASE64_LEN: usize = 44;
/// Length of the hex form of a key.
pub const HEX_LEN: usize = 64;

/// Why a key's text form was refused.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum KeyError {
    /// Hex form not exactly 64 characters.
    HexLength(usize),
    /// A character outside `0-9a-fA-F`.
    HexDigit,
    /// Base64 form not exactly 44 characters.
    Base64Length(usize),
    /// A character outside the standard base64 alphabet, or missing/misplaced `=`.
    Base64Character,
    /// The last data character carries bits beyond the 256 of the key (non-canonical form,
    /// refused by `wg` too).
    Base64NonCanonical,
}

impl fmt::Display for KeyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KeyError::HexLength(n) => write!(f, "hex key must be 64 characters, got {n}"),
            KeyError::HexDigit => f.write_str("hex key contains a non-hex character"),
            KeyError::Base64Length(n) => write!(f, "base64 key must be 44 characters, got {n}"),
            KeyError::Base64Character => f.write_str("base64 key contains an invalid character"),
            KeyError::Base64NonCanonical => f.write_str("base64 key is not in canonical form"),
        }
    }
}

impl std::error::Error for KeyError {}

fn clamp(mut k: [u8; KEY_LEN]) -> [u8; KEY_LEN] {
    k[0] &= 248;
    k[31] = (k[31] & 127) | 64;
    k
}

/// An X25519 private key (clamped unless all zero).
#[derive(Clone, Zeroize, ZeroizeOnDrop)]
pub struct PrivateKey([u8; KEY_LEN]);

impl PrivateKey {
    /// Wraps raw bytes, clamping them; an all-zero input stays zero ("no key").
    pub fn from_bytes(bytes: [u8; KEY_LEN]) -> Self {
        let mut bytes = bytes;
        let key = if crate::crypto::is_zero(&bytes) {
            PrivateKey([0; KEY_LEN])
        } else {
            PrivateKey(clamp(bytes))
        };
        bytes.zeroize();
        key
    }

    /// A fresh random key (clamped).
    pub fn generate<R: RngCore + CryptoRng>(rng: &mut R) -> Self {
        let mut bytes = [0u8; KEY_LEN];
        rng.fill_bytes(&mut bytes);
        let key = PrivateKey(clamp(bytes));
        bytes.zeroize();
        key
    }

    /// The (clamped) key bytes.
    pub fn as_bytes(&self) -> &[u8; KEY_LEN] {
        &self.0
    }

    /// True for the all-zero "no key" value.
    pub fn is_zero(&self) -> bool {
        crate::crypto::is_zero(&self.0)
    }

    /// The matching public key, `X25519(self, 9)`.
    pub fn public_key(&self) -> PublicKey {
        let secret = x25519_dalek::StaticSecret::from(self.0);
        PublicKey(x25519_dalek::PublicKey::from(&secret).to_bytes())
    }

    /// Parses 64 hex characters (either case); the result is clamped.
    pub fn from_hex(s: &str) -> Result<Self, KeyError> {
        let mut b = decode_hex(s)?;
        let k = Self::from_bytes(b);
        b.zeroize();
        Ok(k)
    }

    /// Lower-case hex, as the UAPI prints keys.
    pub fn to_hex(&self) -> String {
        encode_hex(&self.0)
    }

    /// Parses the `wg genkey` base64 form; the result is clamped.
    pub fn from_base64(s: &str) -> Result<Self, KeyError> {
        let mut b = decode_base64(s)?;
        let k = Self::from_bytes(b);
        b.zeroize();
        Ok(k)
    }

    /// The `wg` base64 form (44 characters).
    pub fn to_base64(&self) -> String {
        encode_base64(&self.0)
    }
}

impl PartialEq for PrivateKey {
    fn eq(&self, other: &Self) -> bool {
        self.0.ct_eq(&other.0).into()
    }
}

impl Eq for PrivateKey {}

impl fmt::Debug for PrivateKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("PrivateKey(<redacted>)")
    }
}

/// An X25519 public key. Not secret: compared and hashed in the ordinary way.
#[derive(Copy, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct PublicKey([u8; KEY_LEN]);

impl PublicKey {
    /// Wraps raw bytes (no validation: low-order points are caught by the zero-DH check).
    pub const fn from_bytes(bytes: [u8; KEY_LEN]) -> Self {
        PublicKey(bytes)
    }

    /// The key bytes.
    pub fn as_bytes(&self) -> &[u8; KEY_LEN] {
        &self.0
    }

    /// True for the all-zero value.
    pub fn is_zero(&self) -> bool {
        self.0 == [0; KEY_LEN]
    }

    /// Parses 64 hex characters (either case).
    pub fn from_hex(s: &str) -> Result<Self, KeyError> {
        decode_hex(s).map(PublicKey)
    }

    /// Lower-case hex.
    pub fn to_hex(&self) -> String {
        encode_hex(&self.0)
    }

    /// Parses the `wg pubkey` base64 form.
    pub fn from_base64(s: &str) -> Result<Self, KeyError> {
        decode_base64(s).map(PublicKey)
    }

    /// The `wg` base64 form (44 characters).
    pub fn to_base64(&self) -> String {
        encode_base64(&self.0)
    }
}

impl fmt::Debug for PublicKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "PublicKey({})", self.to_base64())
    }
}

impl fmt::Display for PublicKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_base64())
    }
}

/// The optional symmetric key mixed into the handshake (psk2); all zero when unset.
#[derive(Clone, Zeroize, ZeroizeOnDrop)]
pub struct PresharedKey([u8; KEY_LEN]);

impl PresharedKey {
    /// Wraps raw bytes.
    pub fn from_bytes(bytes: [u8; KEY_LEN]) -> Self {
        PresharedKey(bytes)
    }

    /// The all-zero key, used when none is configured.
    pub fn zero() -> Self {
        PresharedKey([0; KEY_LEN])
    }

    /// The key bytes.
    pub fn as_bytes(&self) -> &[u8; KEY_LEN] {
        &self.0
    }

    /// True when unset (all zero).
    pub fn is_zero(&self) -> bool {
        crate::crypto::is_zero(&self.0)
    }

    /// Parses 64 hex characters (either case).
    pub fn from_hex(s: &str) -> Result<Self, KeyError> {
        decode_hex(s).map(PresharedKey)
    }

    /// Lower-case hex.
    pub fn to_hex(&self) -> String {
        encode_hex(&self.0)
    }

    /// Parses the `wg genpsk` base64 form.
    pub fn from_base64(s: &str) -> Result<Self, KeyError> {
        decode_base64(s).map(PresharedKey)
    }

    /// The `wg` base64 form (44 characters).
    pub fn to_base64(&self) -> String {
        encode_base64(&self.0)
    }
}

impl Default for PresharedKey {
    fn default() -> Self {
        Self::zero()
    }
}

impl PartialEq for PresharedKey {
    fn eq(&self, other: &Self) -> bool {
        self.0.ct_eq(&other.0).into()
    }
}

impl Eq for PresharedKey {}

impl fmt::Debug for PresharedKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("PresharedKey(<redacted>)")
    }
}

const HEX_DIGITS: &[u8; 16] = b"0123456789abcdef";
const B64_ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

fn encode_hex(k: &[u8; KEY_LEN]) -> String {
    let mut s = String::with_capacity(HEX_LEN);
    for b in k {
        s.push(char::from(HEX_DIGITS[usize::from(b >> 4)]));
        s.push(char::from(HEX_DIGITS[usize::from(b & 0x0f)]));
    }
    s
}

fn hex_value(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        b'A'..=b'F' => Some(c - b'A' + 10),
        _ => None,
    }
}

fn decode_hex(s: &str) -> Result<[u8; KEY_LEN], KeyError> {
    let s = s.as_bytes();
    if s.len() != HEX_LEN {
        return Err(KeyError::HexLength(s.len()));
    }
    let mut out = [0u8; KEY_LEN];
    for (o, pair) in out.iter_mut().zip(s.chunks_exact(2)) {
        let (hi, lo) = match pair {
            [hi, lo] => (hex_value(*hi), hex_value(*lo)),
            _ => (None, None),
        };
        match (hi, lo) {
            (Some(hi), Some(lo)) => *o = (hi << 4) | lo,
            _ => {
                out.zeroize();
                return Err(KeyError::HexDigit);
            }
        }
    }
    Ok(out)
}

fn b64_value(c: u8) -> Option<u32> {
    let v = match c {
        b'A'..=b'Z' => c - b'A',
        b'a'..=b'z' => c - b'a' + 26,
        b'0'..=b'9' => c - b'0' + 52,
        b'+' => 62,
        b'/' => 63,
        _ => return None,
    };
    Some(u32::from(v))
}

/// Standard base64 with padding of exactly 32 bytes: ten 3-byte groups (40 characters), then
/// the last 2 bytes as three characters and one `=`.
fn encode_base64(k: &[u8; KEY_LEN]) -> String {
    let mut s = String::with_capacity(BASE64_LEN);
    let sym = |v: u32| char::from(B64_ALPHABET[(v & 63) as usize]);
    let mut chunks = k.chunks_exact(3);
    for c in &mut chunks {
        let v = c.iter().fold(0u32, |acc, b| (acc << 8) | u32::from(*b));
        for shift in [18, 12, 6, 0] {
            s.push(sym(v >> shift));
        }
    }
    // 32 = 10 * 3 + 2: the remainder is two bytes, 16 bits, padded to 18 with zeros.
    let v = chunks
        .remainder()
        .iter()
        .fold(0u32, |acc, b| (acc << 8) | u32::from(*b))
        << 2;
    for shift in [12, 6, 0] {
        s.push(sym(v >> shift));
    }
    s.push('=');
    s
}

fn decode_base64(s: &str) -> Result<[u8; KEY_LEN], KeyError> {
    let s = s.as_bytes();
    if s.len() != BASE64_LEN {
        return Err(KeyError::Base64Length(s.len()));
    }
    let (data, pad) = s.split_at(BASE64_LEN - 1);
    if pad != b"=" {
        return Err(KeyError::Base64Character);
    }
    let mut out = [0u8; KEY_LEN];
    let mut acc: u32 = 0;
    let mut bits = 0u32;
    let mut pos = 0usize;
    for &c in data {
        let Some(v) = b64_value(c) else {
            out.zeroize();
            return Err(KeyError::Base64Character);
        };
        acc = (acc << 6) | v;
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            if let Some(o) = out.get_mut(pos) {
                *o = (acc >> bits) as u8;
            }
            pos += 1;
            acc &= (1 << bits) - 1;
        }
    }
    // 43 characters carry 258 bits: 256 of key and 2 that must be zero.
    if acc != 0 || pos != KEY_LEN {
        out.zeroize();
        return Err(KeyError::Base64NonCanonical);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};

    #[test]
    fn clamping_and_zero_key() {
        let k = PrivateKey::from_bytes([0xff; 32]);
        assert_eq!(k.as_bytes()[0], 0xf8);
        assert_eq!(k.as_bytes()[31], 0x7f);
        let z = PrivateKey::from_bytes([0; 32]);
        assert!(z.is_zero());
        assert!(!k.is_zero());
        let mut rng = StdRng::seed_from_u64(1);
        let g = PrivateKey::generate(&mut rng);
        assert_eq!(g.as_bytes()[0] & 7, 0);
        assert_eq!(g.as_bytes()[31] & 0xc0, 0x40);
    }

    #[test]
    fn public_key_matches_rfc7748() {
        // RFC 7748 §6.1: Alice's private and public keys.
        let sk = PrivateKey::from_hex(
            "77076d0a7318a57d3c16c17251b26645df4c2f87ebc0992ab177fba51db92c2a",
        )
        .unwrap();
        assert_eq!(
            sk.public_key().to_hex(),
            "8520f0098930a754748b7ddcb43ef75a0dbf3a0d26381af4eba4a98eaa9b4e6a"
        );
    }

    #[test]
    fn wg_tool_base64_vectors() {
        // `wg pubkey` of the RFC 7748 key above, cross-checked with an independent encoder
        // (the alphabet walk below), and the all-zero key's well-known form.
        assert_eq!(
            PublicKey::from_bytes([0; 32]).to_base64(),
            "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA="
        );
        let pk = PublicKey::from_bytes([0xff; 32]);
        assert_eq!(
            pk.to_base64(),
            "//////////////////////////////////////////8="
        );
        assert_eq!(PublicKey::from_base64(&pk.to_base64()), Ok(pk));
    }

    #[test]
    fn text_round_trips_random_keys() {
        let mut rng = StdRng::seed_from_u64(7);
        for _ in 0..500 {
            let bytes: [u8; 32] = rng.gen();
            let pk = PublicKey::from_bytes(bytes);
            assert_eq!(PublicKey::from_base64(&pk.to_base64()), Ok(pk));
            assert_eq!(PublicKey::from_hex(&pk.to_hex()), Ok(pk));
            assert_eq!(PublicKey::from_hex(&pk.to_hex().to_uppercase()), Ok(pk));
            assert_eq!(pk.to_base64().len(), BASE64_LEN);
            let psk = PresharedKey::from_bytes(bytes);
            assert_eq!(PresharedKey::from_base64(&psk.to_base64()).unwrap(), psk);
            let sk = PrivateKey::from_bytes(bytes);
            assert_eq!(PrivateKey::from_base64(&sk.to_base64()).unwrap(), sk);
            assert_eq!(PrivateKey::from_hex(&sk.to_hex()).unwrap(), sk);
            // Independent bit-by-bit decode of our encoding.
            let text = pk.to_base64();
            let mut bits = Vec::new();
            for c in text.trim_end_matches('=').bytes() {
                let v = B64_ALPHABET.iter().position(|&a| a == c).unwrap();
                for i in (0..6).rev() {
                    bits.push((v >> i) & 1);
                }
            }
            let decoded: Vec<u8> = bits[..256]
                .chunks(8)
                .map(|c| c.iter().fold(0u8, |a, b| (a << 1) | *b as u8))
                .collect();
            assert_eq!(decoded, bytes.to_vec());
        }
    }

    #[test]
    fn bad_text_is_refused() {
        let good = PublicKey::from_bytes([0x11; 32]).to_base64();
        assert_eq!(PublicKey::from_base64(""), Err(KeyError::Base64Length(0)));
        assert!(matches!(
            PublicKey::from_base64(&good[..43]),
            Err(KeyError::Base64Length(43))
        ));
        assert!(PublicKey::from_base64(&format!("{good}=")).is_err());
        let mut no_pad = good.clone();
        no_pad.replace_range(43.., "A");
        assert_eq!(
            PublicKey::from_base64(&no_pad),
            Err(KeyError::Base64Character)
        );
        let mut bad_char = good.clone();
        bad_char.replace_range(5..6, "*");
        assert_eq!(
            PublicKey::from_base64(&bad_char),
            Err(KeyError::Base64Character)
        );
        // Last data character with non-zero low bits: non-canonical.
        let mut noncanon = PublicKey::from_bytes([0; 32]).to_base64();
        noncanon.replace_range(42..43, "B");
        assert_eq!(
            PublicKey::from_base64(&noncanon),
            Err(KeyError::Base64NonCanonical)
        );
        // Multi-byte UTF-8 must not panic.
        assert!(PublicKey::from_base64(&"é".repeat(22)).is_err());
        assert!(PublicKey::from_hex(&"é".repeat(32)).is_err());
        assert_eq!(PublicKey::from_hex("00"), Err(KeyError::HexLength(2)));
        assert_eq!(
            PublicKey::from_hex(&"g".repeat(64)),
            Err(KeyError::HexDigit)
        );
        assert!(PresharedKey::from_hex(&"0".repeat(65)).is_err());
    }

    #[test]
    fn secrets_are_not_printed() {
        let sk = PrivateKey::from_bytes([0x5a; 32]);
        let dbg = format!("{sk:?}");
        assert!(!dbg.contains(&sk.to_hex()) && !dbg.contains(&sk.to_base64()));
        assert!(!dbg.contains("58") && !dbg.contains("5a"));
        let psk = PresharedKey::from_bytes([0x5a; 32]);
        assert!(!format!("{psk:?}").contains(&psk.to_base64()));
        assert!(PresharedKey::zero().is_zero());
        assert!(!psk.is_zero());
    }
}
