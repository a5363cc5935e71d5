//! `vpn genkey` and `vpn pubkey`: the same base64 keys as `wg genkey` / `wg pubkey`.

use std::io::{Read, Write};
use vpn_proto::keys::PrivateKey;

/// Longest stdin accepted by `pubkey` (a key is 44 characters; allow surrounding whitespace).
const MAX_INPUT: u64 = 4096;

/// Prints a new random private key, base64, from the OS random source.
pub fn genkey() -> Result<(), crate::Error> {
    let key = PrivateKey::generate(&mut rand::rngs::OsRng);
    writeln!(std::io::stdout().lock(), "{}", key.to_base64())?;
    Ok(())
}

/// Reads a base64 private key on stdin and prints its public key.
pub fn pubkey() -> Result<(), crate::Error> {
    let mut input = String::new();
    std::io::stdin()
        .take(MAX_INPUT)
        .read_to_string(&mut input)
        .map_err(|e| format!("reading stdin: {e}"))?;
    let public = public_from_base64(&input)?;
    writeln!(std::io::stdout().lock(), "{public}")?;
    Ok(())
}

/// The base64 public key of the base64 private key in `input` (surrounding whitespace ignored).
fn public_from_base64(input: &str) -> Result<String, crate::Error> {
    let key = PrivateKey::from_base64(input.trim())
        .map_err(|_| "key is not the correct length or format (expected 44 base64 characters)")?;
    Ok(key.public_key().to_base64())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc7748_vector_and_whitespace() {
        // RFC 7748 §6.1: Alice's private and public keys.
        let private = "dwdtCnMYpX08FsFyUbJmRd9ML4frwJkqsXf7pR25LCo=";
        let public = "hSDwCYkwp1R0i33ctD73Wg2/Og0mOBr066SpjqqbTmo=";
        assert_eq!(public_from_base64(private).unwrap(), public);
        assert_eq!(
            public_from_base64(&format!("  {private}\n")).unwrap(),
            public
        );
    }

    #[test]
    fn bad_input_is_an_error() {
        for bad in [
            "",
            "abc",
            "dwdtCnMYpX08FsFyUbJmRd9ML4frwJkqsXf7pR25LC",
            "!!!!CnMYpX08FsFyUbJmRd9ML4frwJkqsXf7pR25LCo=",
        ] {
            assert!(public_from_base64(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn generated_keys_differ_and_round_trip() {
        let a = PrivateKey::generate(&mut rand::rngs::OsRng);
        let b = PrivateKey::generate(&mut rand::rngs::OsRng);
        assert_ne!(a.to_base64(), b.to_base64());
        assert_eq!(
            PrivateKey::from_base64(&a.to_base64()).unwrap().to_base64(),
            a.to_base64()
        );
    }
}
