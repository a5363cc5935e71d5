//! The data-path AEAD seam (`vpn_proto::aead::TransportKey`, ring) against RustCrypto's
//! independent `chacha20poly1305` on arbitrary keys, counters and messages: same ciphertext and
//! tag, the seal opens, and a flipped ciphertext or tag bit or another counter is refused with
//! the buffer wiped. Input: 32 key bytes, 8 counter bytes (LE), 1 tamper byte, the message.
#![no_main]

use chacha20poly1305::aead::{AeadInPlace, KeyInit};
use chacha20poly1305::ChaCha20Poly1305;
use libfuzzer_sys::fuzz_target;
use vpn_proto::aead::{AeadError, TransportKey};

fuzz_target!(|data: &[u8]| {
    let Some((key, rest)) = data.split_first_chunk::<32>() else {
        return;
    };
    let Some((counter, rest)) = rest.split_first_chunk::<8>() else {
        return;
    };
    let Some((&tamper, msg)) = rest.split_first() else {
        return;
    };
    let counter = u64::from_le_bytes(*counter);
    let mut nonce = [0u8; 12];
    nonce[4..].copy_from_slice(&counter.to_le_bytes());

    let ours = TransportKey::new(key);
    let reference = ChaCha20Poly1305::new(key.into());

    let mut a = msg.to_vec();
    let tag = ours.seal_in_place(counter, &mut a);
    let mut b = msg.to_vec();
    let their = reference
        .encrypt_in_place_detached((&nonce).into(), &[], &mut b)
        .expect("RustCrypto seals any datagram length");
    assert_eq!(a, b, "ciphertext differs");
    assert_eq!(&tag[..], &their[..], "tag differs");

    let mut opened = a.clone();
    assert_eq!(ours.open_in_place(counter, &mut opened, &tag), Ok(()));
    assert_eq!(opened, msg);

    // One bit flipped, chosen by the tamper byte: in the ciphertext when there is one (and the
    // byte's top bit is clear), else in the tag.
    let bit = 1u8 << (tamper & 7);
    let mut c = a.clone();
    let mut t = tag;
    if !c.is_empty() && tamper & 0x80 == 0 {
        let i = usize::from(tamper >> 3) % c.len();
        c[i] ^= bit;
    } else {
        t[usize::from(tamper >> 3) % 16] ^= bit;
    }
    assert_eq!(ours.open_in_place(counter, &mut c, &t), Err(AeadError));
    assert!(c.iter().all(|&x| x == 0), "a failed open left plaintext");

    let mut c = a.clone();
    let other = counter ^ (1u64 << (tamper & 63));
    assert_eq!(ours.open_in_place(other, &mut c, &tag), Err(AeadError));
});
