//! The one seam for the data-path ChaCha20-Poly1305.
//!
//! Every transport message is sealed and opened through [`TransportKey`]; nothing else in the
//! crate names an AEAD backend for data packets. The backend is ring on every target, Apple
//! included (measured, see `docs/design-notes.md`, "Data-path AEAD": its assembly is several
//! times faster than the portable code RustCrypto runs on Apple Silicon). It must agree byte
//! for byte with RustCrypto's `chacha20poly1305`, which the tests below check: nonce = 4 zero
//! bytes ‖ counter (little-endian), empty associated data, 16-byte tag.

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
        match self.inner.seal(nonce(counter), in_out) {
            Some(tag) => tag,
            None => {
                in_out.fill(0);
                [0u8; TAG_LEN]
            }
        }
    }

    /// Decrypts `in_out` in place under `counter` if `tag` authenticates it.
    ///
    /// On failure the contents of `in_out` are unspecified (the caller discards the packet).
    pub fn open_in_place(
        &self,
        counter: u64,
        in_out: &mut [u8],
        tag: &[u8; TAG_LEN],
    ) -> Result<(), AeadError> {
        self.inner.open(nonce(counter), in_out, tag)
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

    /// ring keeps the expanded key inside `LessSafeKey`; it does not expose it for zeroizing,
    /// but it holds no heap allocation and is dropped with the keypair.
    pub(super) struct Key(LessSafeKey);

    impl Key {
        pub(super) fn new(key: &[u8; 32]) -> Self {
            // CHACHA20_POLY1305 takes exactly 32 bytes, which the type guarantees.
            match UnboundKey::new(&CHACHA20_POLY1305, key) {
                Ok(k) => Key(LessSafeKey::new(k)),
                Err(_) => unreachable!("ChaCha20-Poly1305 accepts every 32-byte key"),
            }
        }

        pub(super) fn seal(&self, nonce: [u8; 12], in_out: &mut [u8]) -> Option<[u8; TAG_LEN]> {
            let tag = self
                .0
                .seal_in_place_separate_tag(
                    Nonce::assume_unique_for_key(nonce),
                    Aad::empty(),
                    in_out,
                )
                .ok()?;
            let mut out = [0u8; TAG_LEN];
            out.copy_from_slice(tag.as_ref());
            Some(out)
        }

        pub(super) fn open(
            &self,
            nonce: [u8; 12],
            in_out: &mut [u8],
            tag: &[u8; TAG_LEN],
        ) -> Result<(), AeadError> {
            self.0
                .open_in_place_separate_tag(
                    Nonce::assume_unique_for_key(nonce),
                    Aad::empty(),
                    Tag::from(*tag),
                    in_out,
                    0..,
                )
                .map(|_| ())
                .map_err(|_| AeadError)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chacha20poly1305::aead::{AeadInPlace, KeyInit};
    use chacha20poly1305::ChaCha20Poly1305;

    /// RFC 8439 §2.8.2 key, our nonce layout, no AAD: the compiled backend must agree byte for
    /// byte with the independent RustCrypto implementation.
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
}
