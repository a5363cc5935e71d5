//! `Keypair::open` on arbitrary bytes (first 8 bytes: the counter the caller parsed) must never
//! panic and must reject forgeries; sealing the same bytes as plaintext must round-trip.
#![no_main]

use libfuzzer_sys::fuzz_target;
use vpn_proto::time::Instant;
use vpn_proto::transport::{padded_len, Keypair};

fuzz_target!(|data: &[u8]| {
    let a = Keypair::new(&[1; 32], &[2; 32], 1, 2, true, Instant::ZERO);
    let b = Keypair::new(&[2; 32], &[1; 32], 2, 1, false, Instant::ZERO);
    let Some((counter, msg)) = data.split_first_chunk::<8>() else {
        return;
    };
    let counter = u64::from_le_bytes(*counter);

    let mut forged = msg.to_vec();
    // A random message authenticating is a 2^-128 event: treat it as a bug.
    assert!(b.open(counter, &mut forged).is_err());

    let mtu = usize::from(msg.first().copied().unwrap_or(0)) * 8;
    let padded = padded_len(msg.len(), mtu);
    let mut buf = vec![0u8; 16 + padded + 16];
    buf[16..16 + msg.len()].copy_from_slice(msg);
    match a.seal(counter, &mut buf, msg.len(), padded) {
        Ok(n) => {
            assert_eq!(n, buf.len());
            let got = b.open(counter, &mut buf).expect("own seal must open");
            assert_eq!(got, padded);
            assert_eq!(&buf[16..16 + msg.len()], msg);
            assert!(buf[16 + msg.len()..16 + padded].iter().all(|&x| x == 0));
            if n > 16 {
                buf[n - 1] ^= 1;
                assert!(b.open(counter, &mut buf).is_err());
            }
        }
        Err(_) => assert!(counter >= vpn_proto::consts::REJECT_AFTER_MESSAGES),
    }
});
