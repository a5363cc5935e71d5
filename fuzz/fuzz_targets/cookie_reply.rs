//! `CookieGenerator::consume_reply` on arbitrary bytes, and on genuine replies with
//! fuzzer-chosen bit flips: must never panic, must accept an unmodified reply and must reject
//! any change to the type, nonce or sealed cookie.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rand_core::{CryptoRng, RngCore};
use vpn_proto::cookie::{CookieChecker, CookieGenerator};
use vpn_proto::time::Instant;

const RESPONDER: [u8; 32] = [0x42; 32];

/// Deterministic "randomness" taken from the input, so crashes reproduce.
struct InputRng(u64);
impl RngCore for InputRng {
    fn next_u32(&mut self) -> u32 {
        self.next_u64() as u32
    }
    fn next_u64(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        self.0
    }
    fn fill_bytes(&mut self, dest: &mut [u8]) {
        for b in dest {
            *b = self.next_u64() as u8;
        }
    }
    fn try_fill_bytes(&mut self, dest: &mut [u8]) -> Result<(), rand_core::Error> {
        self.fill_bytes(dest);
        Ok(())
    }
}
impl CryptoRng for InputRng {}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let now = Instant::from_nanos(1 << 40);
    let mut gen = CookieGenerator::new(&RESPONDER);
    if mode & 1 == 0 {
        // Raw bytes, with or without a pending mac1.
        if mode & 2 != 0 {
            let mut init = [0u8; 148];
            init[0] = 1;
            gen.add_macs(&mut init, now);
        }
        let _ = gen.consume_reply(rest, now);
        return;
    }
    // A genuine reply to our own initiation, then XOR the input over it.
    let mut init = [mode; 148];
    init[..4].copy_from_slice(&1u32.to_le_bytes());
    gen.add_macs(&mut init, now);
    let mut checker = CookieChecker::new(&RESPONDER);
    let seed = rest
        .iter()
        .fold(0u64, |h, &b| h.rotate_left(5) ^ u64::from(b));
    let src = [198, 18, 0, 1, 0xca, 0x6c];
    let Ok(mut reply) = checker.create_reply(&init, 7, &src, now, &mut InputRng(seed)) else {
        panic!("create_reply failed on a 148-byte initiation");
    };
    for (r, d) in reply.iter_mut().zip(rest) {
        *r ^= d;
    }
    let modified = reply[..4] != [3, 0, 0, 0] || rest.iter().skip(8).take(56).any(|&d| d != 0);
    let res = gen.consume_reply(&reply, now);
    assert_eq!(res.is_ok(), !modified, "modified={modified} res={res:?}");
    if res.is_ok() {
        let mut retry = [9u8; 148];
        retry[..4].copy_from_slice(&1u32.to_le_bytes());
        gen.add_macs(&mut retry, now);
        assert!(checker.check_mac2(&retry, &src, now));
    }
});
