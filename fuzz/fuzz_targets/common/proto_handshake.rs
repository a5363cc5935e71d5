//! Shared by the handshake fuzz targets: fixed keys, a deterministic RNG and genuine messages
//! that the fuzzer's bytes are XORed into, so that mutations reach past the first decryption.

// Each target uses a different subset of these helpers.
#![allow(dead_code)]

use rand_core::{CryptoRng, Error, RngCore};
use vpn_proto::keys::{PresharedKey, PrivateKey};
use vpn_proto::noise::{decrypt_initiation, Handshake, StaticIdentity};
use vpn_proto::tai64n::Tai64N;
use vpn_proto::time::Instant;

/// A deterministic generator (splitmix64): fuzzing needs reproducible runs, not secrecy.
pub struct DetRng(pub u64);

impl RngCore for DetRng {
    fn next_u32(&mut self) -> u32 {
        self.next_u64() as u32
    }
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn fill_bytes(&mut self, dest: &mut [u8]) {
        for chunk in dest.chunks_mut(8) {
            let v = self.next_u64().to_le_bytes();
            chunk.copy_from_slice(&v[..chunk.len()]);
        }
    }
    fn try_fill_bytes(&mut self, dest: &mut [u8]) -> Result<(), Error> {
        self.fill_bytes(dest);
        Ok(())
    }
}

impl CryptoRng for DetRng {}

pub const PSK: [u8; 32] = [0x42; 32];
pub const INITIATOR_INDEX: u32 = 0x1234_5678;

pub fn initiator() -> StaticIdentity {
    StaticIdentity::new(PrivateKey::from_bytes([1; 32]))
}

pub fn responder() -> StaticIdentity {
    StaticIdentity::new(PrivateKey::from_bytes([2; 32]))
}

/// The initiator's handshake right after sending its (deterministic) initiation.
pub fn initiator_in_flight(i: &StaticIdentity, r: &StaticIdentity) -> (Handshake, [u8; 148]) {
    let mut hs = Handshake::new(i, *r.public_key(), PresharedKey::from_bytes(PSK));
    let msg = hs
        .create_initiation(
            i,
            INITIATOR_INDEX,
            Tai64N::from_unix(1_700_000_000, 0),
            &mut DetRng(1),
        )
        .expect("fixed keys handshake");
    (hs, msg)
}

/// The genuine response to [`initiator_in_flight`]'s initiation.
pub fn genuine_response(i: &StaticIdentity, r: &StaticIdentity, init: &[u8]) -> [u8; 92] {
    let mut peer = Handshake::new(r, *i.public_key(), PresharedKey::from_bytes(PSK));
    decrypt_initiation(r, init)
        .and_then(|c| c.accept(&mut peer, Instant::from_nanos(1)))
        .expect("genuine initiation");
    peer.create_response(0x9abc_def0, &mut DetRng(2))
        .expect("genuine response")
}

/// `base` XOR `data` (data shorter than base is zero-extended; longer data is appended, so
/// length errors are reached too). The first input byte chooses raw or XOR mode.
pub fn mutate(base: &[u8], data: &[u8]) -> Vec<u8> {
    match data.split_first() {
        Some((&mode, rest)) if mode & 1 == 1 => {
            let mut out = base.to_vec();
            for (o, d) in out.iter_mut().zip(rest) {
                *o ^= d;
            }
            if rest.len() > base.len() {
                out.extend_from_slice(&rest[base.len()..]);
            }
            if mode & 2 == 2 {
                out.truncate(usize::from(mode >> 2));
            }
            out
        }
        Some((_, rest)) => rest.to_vec(),
        None => Vec::new(),
    }
}
