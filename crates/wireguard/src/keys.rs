//! Curve25519 keys and the pre-shared key, with the text forms the `wg` tools use.
//!
//! The UAPI text ([`crate::device::Device::ipc_set`]) takes keys in lower-case hex
//! ([`PrivateKey::to_hex`]); configuration files and `wg genkey` use base64
//! ([`PrivateKey::from_base64`]). Secrets are wiped on drop and never printed by `Debug`.
//!
//! ```
//! use vpn_wireguard::keys::{self, PublicKey};
//!
//! let private = keys::generate_private_key();
//! let public = private.public_key();
//! // `wg pubkey`'s form, and back.
//! assert_eq!(PublicKey::from_base64(&public.to_base64()).unwrap(), public);
//! ```

pub use vpn_proto::keys::{
    KeyError, PresharedKey, PrivateKey, PublicKey, BASE64_LEN, HEX_LEN, KEY_LEN,
};

/// A fresh private key from the operating system's random source (`wg genkey`).
pub fn generate_private_key() -> PrivateKey {
    PrivateKey::generate(&mut rand_core::OsRng)
}

/// A fresh pre-shared key from the operating system's random source (`wg genpsk`).
pub fn generate_preshared_key() -> PresharedKey {
    let mut bytes = [0u8; KEY_LEN];
    rand_core::RngCore::fill_bytes(&mut rand_core::OsRng, &mut bytes);
    let key = PresharedKey::from_bytes(bytes);
    zeroize::Zeroize::zeroize(&mut bytes);
    key
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_keys_differ_and_are_not_zero() {
        let (a, b) = (generate_private_key(), generate_private_key());
        assert!(!a.is_zero() && !b.is_zero());
        assert!(a != b);
        let (p, q) = (generate_preshared_key(), generate_preshared_key());
        assert!(!p.is_zero() && p.as_bytes() != q.as_bytes());
    }
}
