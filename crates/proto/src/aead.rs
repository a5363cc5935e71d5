//! The one seam for the data-path ChaCha20-Poly1305.
//!
//! Every transport message is sealed and opened through [`TransportKey`]; nothing else in the
//! crate names an AEAD backend for data packets. The backend is ring on every target, Apple
//! included (measured, see `docs/design-notes.md`, "Data-path AEAD": on x86-64 with AVX-512
//! neither OpenSSL 3's AVX-512/IFMA code nor RustCrypto's AVX-512 `chacha20` beats it per
//! packet, and on Apple Silicon its assembly is several times faster than the portable code
//! RustCrypto runs). It must agree byte for byte with RustCrypto's `chacha20poly1305`, which
//! the tests below check for every length 0..=2048: nonce = 4 zero bytes ‖ counter
//! (little-endian), empty associated data, 16-byte tag.
//!
//! What the seam guarantees whatever the backend: the tag is compared in constant time (ring
//! compares with `CRYPTO_memcmp`); a message that fails authentication leaves no plaintext in
//! the buffer (it is wiped); the key material a [`TransportKey`] holds is overwritten when it
//! is dropped.

use core::fmt;

/// Length of the Poly1305 tag appended to every transport message.
pub const TAG_LEN: usize = 16;

/// Authentication failed: wrong key, wrong counter or modified ciphertext/tag.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AeadError;

impl fmt::Display for AeadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("transport message failed authentication")
    }
}

impl std::error::Error for AeadError {}

/// Name of the compiled-in backend, for logs and `vpn show`.
pub fn backend_name() -> &'static str {
    backend::NAME
}

/// A prepared ChaCha20-Poly1305 key for one direction of one keypair.
///
/// Built once per keypair so that per-packet work is only the cipher itself.
pub struct TransportKey {
    inner: backend::Key,
}

impl TransportKey {
    /// Prepares `key` for sealing and opening. The caller should zeroize its copy.
    pub fn new(key: &[u8; 32]) -> Self {
        TransportKey {
            inner: backend::Key::new(key),
        }
    }

    /// Encrypts `in_out` in place under `counter` and returns the tag.
    ///
    /// The backends refuse only inputs beyond ChaCha20's 256 GiB block-counter range, which no
    /// datagram can reach; should that ever happen the buffer is wiped and an all-zero tag
    /// returned, so the result fails closed (no plaintext leaves, the receiver rejects it).
    pub fn seal_in_place(&self, counter: u64, in_out: &mut [u8]) -> [u8; TAG_LEN] {
        match self.inner.seal(nonce(counter), &[], in_out) {
            Some(tag) => tag,
            None => {
                in_out.fill(0);
                [0u8; TAG_LEN]
            }
        }
    }

    /// Decrypts `in_out` in place under `counter` if `tag` authenticates it.
    ///
    /// On failure `in_out` is zeroed: no unauthenticated plaintext is left behind (the caller
    /// discards the packet anyway).
    pub fn open_in_place(
        &self,
        counter: u64,
        in_out: &mut [u8],
        tag: &[u8; TAG_LEN],
    ) -> Result<(), AeadError> {
        let result = self.inner.open(nonce(counter), &[], in_out, tag);
        if result.is_err() {
            in_out.fill(0);
        }
        result
    }
}

impl fmt::Debug for TransportKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TransportKey")
            .field("backend", &backend::NAME)
            .finish_non_exhaustive()
    }
}

/// WireGuard's transport nonce: 32 zero bits followed by the 64-bit counter, little-endian.
fn nonce(counter: u64) -> [u8; 12] {
    let mut n = [0u8; 12];
    n[4..].copy_from_slice(&counter.to_le_bytes());
    n
}

mod backend {
    use super::{AeadError, TAG_LEN};
    use ring::aead::{Aad, LessSafeKey, Nonce, Tag, UnboundKey, CHACHA20_POLY1305};

    pub(super) const NAME: &str = "ring";

    /// ring keeps the ChaCha20 key inline in `LessSafeKey` (no heap copy) and offers no way to
    /// zeroize it; [`Key::wipe`] overwrites it in place with the all-zero key instead, on drop.
    pub(super) struct Key(LessSafeKey);

    fn ring_key(key: &[u8; 32]) -> LessSafeKey {
        // CHACHA20_POLY1305 takes exactly 32 bytes, which the type guarantees.
        match UnboundKey::new(&CHACHA20_POLY1305, key) {
            Ok(k) => LessSafeKey::new(k),
            Err(_) => unreachable!("ChaCha20-Poly1305 accepts every 32-byte key"),
        }
    }

    impl Key {
        pub(super) fn new(key: &[u8; 32]) -> Self {
            Key(ring_key(key))
        }

        /// RFC 8439 AEAD encryption in place with any nonce and associated data (the seam
        /// passes its transport nonce and no associated data; the tests pass RFC vectors).
        pub(super) fn seal(
            &self,
            nonce: [u8; 12],
            aad: &[u8],
            in_out: &mut [u8],
        ) -> Option<[u8; TAG_LEN]> {
            let tag = self
                .0
                .seal_in_place_separate_tag(
                    Nonce::assume_unique_for_key(nonce),
                    Aad::from(aad),
                    in_out,
                )
                .ok()?;
            let mut out = [0u8; TAG_LEN];
            out.copy_from_slice(tag.as_ref());
            Some(out)
        }

        /// RFC 8439 AEAD decryption in place; ring compares the tag in constant time
        /// (`CRYPTO_memcmp`) and zeroes `in_out` when it does not match.
        pub(super) fn open(
            &self,
            nonce: [u8; 12],
            aad: &[u8],
            in_out: &mut [u8],
            tag: &[u8; TAG_LEN],
        ) -> Result<(), AeadError> {
            self.0
                .open_in_place_separate_tag(
                    Nonce::assume_unique_for_key(nonce),
                    Aad::from(aad),
                    Tag::from(*tag),
                    in_out,
                    0..,
                )
                .map(|_| ())
                .map_err(|_| AeadError)
        }

        /// Overwrites the key in place with the all-zero key. The assignment writes the same
        /// bytes the old key occupied (same type, same variant); `black_box` keeps the store
        /// from being dropped as dead before the memory is freed.
        pub(super) fn wipe(&mut self) {
            self.0 = ring_key(&[0u8; 32]);
            core::hint::black_box(&mut self.0);
        }
    }

    impl Drop for Key {
        fn drop(&mut self) {
            self.wipe();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chacha20poly1305::aead::{AeadInPlace, KeyInit};
    use chacha20poly1305::ChaCha20Poly1305;
    use rand::rngs::StdRng;
    use rand::{Rng, RngCore, SeedableRng};

    fn hex(s: &str) -> Vec<u8> {
        let digits: Vec<u8> = s.bytes().filter(u8::is_ascii_hexdigit).collect();
        digits
            .chunks(2)
            .map(|p| u8::from_str_radix(core::str::from_utf8(p).unwrap(), 16).unwrap())
            .collect()
    }

    /// RFC 8439 §2.8.2: the AEAD test vector, through the backend's general function (its
    /// nonce starts with 07 00 00 00, which the transport layout cannot express).
    #[test]
    fn rfc8439_aead_vector() {
        let key: [u8; 32] = core::array::from_fn(|i| 0x80 + i as u8);
        let nonce: [u8; 12] = hex("07000000 4041424344454647").try_into().unwrap();
        let aad = hex("50515253 c0c1c2c3 c4c5c6c7");
        let plain = b"Ladies and Gentlemen of the class of '99: If I could offer you only one tip \
                      for the future, sunscreen would be it.";
        let cipher = hex(
            "d31a8d34648e60db7b86afbc53ef7ec2 a4aded51296e08fea9e2b5a736ee62d6
             3dbea45e8ca9671282fafb69da92728b 1a71de0a9e060b2905d6a5b67ecd3b36
             92ddbd7f2d778b8c9803aee328091b58 fab324e4fad675945585808b4831d7bc
             3ff4def08e4b7a9de576d26586cec64b 6116",
        );
        let tag: [u8; 16] = hex("1ae10b594f09e26a7e902ecbd0600691").try_into().unwrap();

        let k = backend::Key::new(&key);
        let mut buf = plain.to_vec();
        assert_eq!(k.seal(nonce, &aad, &mut buf), Some(tag));
        assert_eq!(buf, cipher);
        assert_eq!(k.open(nonce, &aad, &mut buf, &tag), Ok(()));
        assert_eq!(&buf[..], &plain[..]);

        let mut bad = cipher.clone();
        assert_eq!(k.open(nonce, &aad[1..], &mut bad, &tag), Err(AeadError));
        assert!(bad.iter().all(|&b| b == 0), "failed open leaves plaintext");
    }

    /// The backend against RustCrypto's independent `chacha20poly1305` for every length
    /// 0..=2048, each with a random key, counter and associated data (empty for a third of the
    /// lengths), through the general function and through the seam (transport nonce, no
    /// associated data); then every way of tampering must be refused.
    #[test]
    fn differential_every_length_to_2048() {
        let seed: u64 = rand::thread_rng().gen();
        let mut rng = StdRng::seed_from_u64(seed);
        for len in 0..=2048usize {
            let ctx = format!("len {len}, seed {seed:#x}");
            let mut key = [0u8; 32];
            rng.fill_bytes(&mut key);
            let counter: u64 = rng.gen();
            let mut nonce12 = [0u8; 12];
            rng.fill_bytes(&mut nonce12);
            let aad_len = if len % 3 == 0 {
                0
            } else {
                rng.gen_range(1..=64)
            };
            let mut aad = vec![0u8; aad_len];
            rng.fill_bytes(&mut aad);
            let mut plain = vec![0u8; len];
            rng.fill_bytes(&mut plain);

            let reference = ChaCha20Poly1305::new((&key).into());
            let ours = backend::Key::new(&key);

            // The general function: any nonce, associated data.
            let mut a = plain.clone();
            let tag = ours.seal(nonce12, &aad, &mut a).expect("seal");
            let mut b = plain.clone();
            let their = reference
                .encrypt_in_place_detached((&nonce12).into(), &aad, &mut b)
                .unwrap();
            assert_eq!(a, b, "ciphertext, {ctx}");
            assert_eq!(&tag[..], &their[..], "tag, {ctx}");
            let sealed = a.clone();
            assert_eq!(ours.open(nonce12, &aad, &mut a, &tag), Ok(()), "{ctx}");
            assert_eq!(a, plain, "{ctx}");
            if !aad.is_empty() {
                let mut bad_aad = aad.clone();
                bad_aad[rng.gen_range(0..aad_len)] ^= 1 << rng.gen_range(0..8);
                let mut c = sealed.clone();
                assert_eq!(ours.open(nonce12, &bad_aad, &mut c, &tag), Err(AeadError));
            }

            // The seam: transport nonce, no associated data.
            let seam = TransportKey::new(&key);
            let mut a = plain.clone();
            let tag = seam.seal_in_place(counter, &mut a);
            let mut b = plain.clone();
            let their = reference
                .encrypt_in_place_detached((&nonce(counter)).into(), &[], &mut b)
                .unwrap();
            assert_eq!(a, b, "seam ciphertext, {ctx}");
            assert_eq!(&tag[..], &their[..], "seam tag, {ctx}");
            let sealed = a.clone();
            assert_eq!(seam.open_in_place(counter, &mut a, &tag), Ok(()), "{ctx}");
            assert_eq!(a, plain, "{ctx}");

            // Tampering: a flipped ciphertext bit, a flipped tag bit, the wrong counter.
            if len > 0 {
                let mut c = sealed.clone();
                c[rng.gen_range(0..len)] ^= 1 << rng.gen_range(0..8);
                assert_eq!(seam.open_in_place(counter, &mut c, &tag), Err(AeadError));
                assert!(c.iter().all(|&x| x == 0), "plaintext left, {ctx}");
            }
            let mut bad_tag = tag;
            bad_tag[rng.gen_range(0..TAG_LEN)] ^= 1 << rng.gen_range(0..8);
            let mut c = sealed.clone();
            assert_eq!(
                seam.open_in_place(counter, &mut c, &bad_tag),
                Err(AeadError)
            );
            let mut c = sealed.clone();
            let other = counter ^ (1 << rng.gen_range(0..64));
            assert_eq!(seam.open_in_place(other, &mut c, &tag), Err(AeadError));
        }
    }

    /// RFC 8439 §2.8.2 key, our nonce layout, no AAD: the compiled backend must agree byte for
    /// byte with the independent RustCrypto implementation, up to the last usable counter.
    #[test]
    fn backend_matches_rustcrypto() {
        let key: [u8; 32] = core::array::from_fn(|i| 0x80 + i as u8);
        let k = TransportKey::new(&key);
        let reference = ChaCha20Poly1305::new((&key).into());
        for (counter, len) in [(0u64, 0usize), (1, 1), (7, 64), (u64::MAX - 8193, 1420)] {
            let plain: Vec<u8> = (0..len).map(|i| i as u8).collect();
            let mut ours = plain.clone();
            let tag = k.seal_in_place(counter, &mut ours);
            let mut theirs = plain.clone();
            let their_tag = reference
                .encrypt_in_place_detached((&nonce(counter)).into(), &[], &mut theirs)
                .unwrap();
            assert_eq!(ours, theirs, "ciphertext at len {len}");
            assert_eq!(&tag[..], &their_tag[..], "tag at len {len}");
            k.open_in_place(counter, &mut ours, &tag).unwrap();
            assert_eq!(ours, plain);
        }
    }

    #[test]
    fn open_rejects_wrong_counter_and_tampering() {
        let k = TransportKey::new(&[9u8; 32]);
        let mut buf = [0x55u8; 100];
        let tag = k.seal_in_place(42, &mut buf);
        let sealed = buf;
        assert_eq!(k.open_in_place(43, &mut buf, &tag), Err(AeadError));
        assert_eq!(buf, [0u8; 100], "a failed open wipes the buffer");
        buf = sealed;
        buf[99] ^= 1;
        assert_eq!(k.open_in_place(42, &mut buf, &tag), Err(AeadError));
        buf = sealed;
        let mut bad_tag = tag;
        bad_tag[0] ^= 0x80;
        assert_eq!(k.open_in_place(42, &mut buf, &bad_tag), Err(AeadError));
        buf = sealed;
        assert_eq!(k.open_in_place(42, &mut buf, &tag), Ok(()));
        assert_eq!(buf, [0x55u8; 100]);
        assert!(!backend_name().is_empty());
    }

    /// `wipe` (run on drop) replaces the key in place: afterwards the key is the all-zero key.
    #[test]
    fn wipe_overwrites_the_key() {
        let mut k = backend::Key::new(&[0xc3; 32]);
        let zero = backend::Key::new(&[0u8; 32]);
        let n = nonce(5);
        let (mut a, mut b) = ([1u8; 80], [1u8; 80]);
        let before = k.seal(n, &[], &mut a);
        assert_ne!(before, zero.seal(n, &[], &mut b));
        k.wipe();
        let (mut a, mut b) = ([1u8; 80], [1u8; 80]);
        assert_eq!(k.seal(n, &[], &mut a), zero.seal(n, &[], &mut b));
        assert_eq!(a, b);
    }
}
