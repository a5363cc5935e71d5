//! Interoperability of our handshake with boringtun 0.7 (`boringtun::noise::Tunn`), an
//! independent WireGuard implementation, in process.
//!
//! Only the handshake is ours here: the transport messages are sealed and opened inside this
//! file with the chacha20poly1305 crate from the [`SessionKeys`] we derive (the crate's transport
//! module is tested on its own), and mac1 is computed here too, so that boringtun's acceptance
//! checks our key schedule, indices and message layout byte for byte.
#![cfg(target_os = "linux")]

use std::time::{SystemTime, UNIX_EPOCH};

use boringtun::noise::errors::WireGuardError;
use boringtun::noise::{Tunn, TunnResult};
use chacha20poly1305::aead::AeadInPlace;
use chacha20poly1305::{ChaCha20Poly1305, KeyInit};
use rand::rngs::StdRng;
use rand::SeedableRng;
use vpn_proto::crypto::{hash, mac};
use vpn_proto::keys::{PresharedKey, PrivateKey, PublicKey};
use vpn_proto::messages::{
    TransportHeader, INITIATION_MAC1_OFFSET, RESPONSE_MAC1_OFFSET, TRANSPORT_HEADER_SIZE,
};
use vpn_proto::noise::{decrypt_initiation, Handshake, SessionKeys, StaticIdentity};
use vpn_proto::tai64n::Tai64N;
use vpn_proto::time::Instant;

const SIZES: [usize; 4] = [0, 1, 100, 1420];

fn now_tai64n() -> Tai64N {
    let d = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock after 1970");
    Tai64N::from_unix_duration(d)
}

/// mac1 = MAC(HASH("mac1----" || receiver's public key), msg[..mac1 offset]).
fn add_mac1(msg: &mut [u8], receiver: &PublicKey, mac1_offset: usize) {
    let key = hash(&[b"mac1----", receiver.as_bytes()]);
    let m = mac(&key, &[&msg[..mac1_offset]]);
    msg[mac1_offset..mac1_offset + 16].copy_from_slice(&m);
}

fn expected_mac1(msg: &[u8], receiver: &PublicKey, mac1_offset: usize) -> [u8; 16] {
    let key = hash(&[b"mac1----", receiver.as_bytes()]);
    mac(&key, &[&msg[..mac1_offset]])
}

fn nonce(counter: u64) -> [u8; 12] {
    let mut n = [0u8; 12];
    n[4..].copy_from_slice(&counter.to_le_bytes());
    n
}

/// A minimal transport sender/receiver over our derived keys.
struct TestSession {
    keys: SessionKeys,
    next_counter: u64,
}

impl TestSession {
    /// Header (type 4, receiver, counter), then the plaintext padded with zeros to a multiple
    /// of 16, sealed, then the tag.
    fn seal(&mut self, payload: &[u8]) -> Vec<u8> {
        let counter = self.next_counter;
        self.next_counter += 1;
        let mut hdr = [0u8; TRANSPORT_HEADER_SIZE];
        TransportHeader {
            receiver_index: self.keys.remote_index,
            counter,
        }
        .write(&mut hdr);
        let padded = payload.len().div_ceil(16) * 16;
        let mut body = payload.to_vec();
        body.resize(padded, 0);
        let tag = ChaCha20Poly1305::new(&self.keys.send.into())
            .encrypt_in_place_detached(&nonce(counter).into(), &[], &mut body)
            .expect("seal");
        let mut out = hdr.to_vec();
        out.extend_from_slice(&body);
        out.extend_from_slice(&tag);
        out
    }

    fn open(&self, packet: &[u8]) -> Option<Vec<u8>> {
        let hdr = TransportHeader::parse(packet).ok()?;
        if hdr.receiver_index != self.keys.local_index {
            return None;
        }
        let (body, tag) = packet[TRANSPORT_HEADER_SIZE..].split_at(packet.len() - 32);
        let mut body = body.to_vec();
        ChaCha20Poly1305::new(&self.keys.recv.into())
            .decrypt_in_place_detached(&nonce(hdr.counter).into(), &[], &mut body, tag.into())
            .ok()?;
        Some(body)
    }
}

/// An IPv4 packet of `size` bytes (boringtun hands only valid IP packets to its tunnel), or
/// `size` raw bytes when that is too short for an IPv4 header.
fn ip_packet(size: usize, seed: u8) -> Vec<u8> {
    let mut p: Vec<u8> = (0..size)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect();
    if size >= 20 {
        p[0] = 0x45;
        p[2..4].copy_from_slice(&(size as u16).to_be_bytes());
        p[12..16].copy_from_slice(&[100, 64, 0, 1]);
        p[16..20].copy_from_slice(&[100, 64, 0, 2]);
    } else if let Some(b) = p.first_mut() {
        *b = 0; // neither IPv4 nor IPv6
    }
    p
}

struct Setup {
    rng: StdRng,
    ours: StaticIdentity,
    theirs_sk: [u8; 32],
    theirs_pub: PublicKey,
}

fn setup(seed: u64) -> Setup {
    let mut rng = StdRng::seed_from_u64(seed);
    let ours = StaticIdentity::new(PrivateKey::generate(&mut rng));
    let theirs = PrivateKey::generate(&mut rng);
    Setup {
        rng,
        ours,
        theirs_sk: *theirs.as_bytes(),
        theirs_pub: theirs.public_key(),
    }
}

fn boringtun_peer(s: &Setup, psk: Option<[u8; 32]>) -> Tunn {
    Tunn::new(
        boringtun::x25519::StaticSecret::from(s.theirs_sk),
        boringtun::x25519::PublicKey::from(*s.ours.public_key().as_bytes()),
        psk,
        None,
        7,
        None,
    )
}

/// Sends each size both ways over an established session.
fn exchange_data(bt: &mut Tunn, session: &mut TestSession) {
    let mut dst = vec![0u8; 2048];
    for (n, &size) in SIZES.iter().enumerate() {
        let payload = ip_packet(size, n as u8);
        // Ours -> boringtun.
        let pkt = session.seal(&payload);
        match (size, bt.decapsulate(None, &pkt, &mut dst)) {
            (0, TunnResult::Done) => {}
            // Decrypted fine (else InvalidAeadTag), then refused as not an IP packet.
            (1, TunnResult::Err(WireGuardError::InvalidPacket)) => {}
            (_, TunnResult::WriteToTunnelV4(got, src)) => {
                assert_eq!(got, &payload[..], "size {size}");
                assert_eq!(src.octets(), [100, 64, 0, 1]);
            }
            (_, other) => panic!("size {size}: boringtun returned {other:?}"),
        }
        // A replay of the same packet is refused by boringtun's counter window.
        match bt.decapsulate(None, &pkt, &mut dst) {
            TunnResult::Err(WireGuardError::DuplicateCounter | WireGuardError::InvalidCounter) => {}
            other => panic!("replayed size {size}: boringtun returned {other:?}"),
        }

        // Boringtun -> ours.
        let payload = ip_packet(size, 0x80 | n as u8);
        let pkt = match bt.encapsulate(&payload, &mut dst) {
            TunnResult::WriteToNetwork(p) => p.to_vec(),
            other => panic!("size {size}: encapsulate returned {other:?}"),
        };
        let plain = session
            .open(&pkt)
            .expect("boringtun transport packet decrypts");
        // boringtun does not pad; accept zero padding should it start to.
        assert_eq!(&plain[..size], &payload[..], "size {size}");
        assert!(plain[size..].iter().all(|&b| b == 0));
        let mut tampered = pkt.clone();
        let last = tampered.len() - 1;
        tampered[last] ^= 1;
        assert!(session.open(&tampered).is_none());
    }
}

#[test]
fn our_initiator_with_boringtun_responder() {
    let mut s = setup(1);
    let mut bt = boringtun_peer(&s, None);
    let mut hs = Handshake::new(&s.ours, s.theirs_pub, PresharedKey::zero());
    let mut dst = vec![0u8; 2048];

    let mut init = hs
        .create_initiation(&s.ours, 0x0102_0304, now_tai64n(), &mut s.rng)
        .unwrap();
    // Without mac1 boringtun drops it.
    match bt.decapsulate(None, &init, &mut dst) {
        TunnResult::Err(WireGuardError::InvalidMac) => {}
        other => panic!("initiation without mac1: {other:?}"),
    }
    add_mac1(&mut init, &s.theirs_pub, INITIATION_MAC1_OFFSET);
    let resp = match bt.decapsulate(None, &init, &mut dst) {
        TunnResult::WriteToNetwork(r) => r.to_vec(),
        other => panic!("boringtun did not answer the initiation: {other:?}"),
    };
    assert_eq!(resp.len(), 92);
    assert_eq!(
        &resp[8..12],
        &0x0102_0304u32.to_le_bytes(),
        "response addressed to our index"
    );
    assert_eq!(
        resp[RESPONSE_MAC1_OFFSET..RESPONSE_MAC1_OFFSET + 16],
        expected_mac1(&resp, s.ours.public_key(), RESPONSE_MAC1_OFFSET),
        "boringtun's mac1 matches ours"
    );
    hs.consume_response(&s.ours, &resp).unwrap();
    let keys = hs.derive_keys().unwrap();
    assert!(keys.is_initiator);
    assert_eq!(keys.local_index, 0x0102_0304);
    let mut session = TestSession {
        keys,
        next_counter: 0,
    };
    exchange_data(&mut bt, &mut session);
}

#[test]
fn boringtun_initiator_with_our_responder() {
    let mut s = setup(2);
    let psk = [0x5c; 32];
    let mut bt = boringtun_peer(&s, Some(psk));
    let mut hs = Handshake::new(&s.ours, s.theirs_pub, PresharedKey::from_bytes(psk));
    let mut dst = vec![0u8; 2048];

    let init = match bt.format_handshake_initiation(&mut dst, false) {
        TunnResult::WriteToNetwork(p) => p.to_vec(),
        other => panic!("no initiation from boringtun: {other:?}"),
    };
    assert_eq!(
        init[INITIATION_MAC1_OFFSET..INITIATION_MAC1_OFFSET + 16],
        expected_mac1(&init, s.ours.public_key(), INITIATION_MAC1_OFFSET),
        "boringtun's mac1 matches ours"
    );
    let cand = decrypt_initiation(&s.ours, &init).unwrap();
    assert_eq!(cand.remote_static(), &s.theirs_pub);
    let bt_index = cand.sender_index();
    cand.accept(&mut hs, Instant::from_nanos(1)).unwrap();
    let mut resp = hs.create_response(0xabcd_ef01, &mut s.rng).unwrap();
    add_mac1(&mut resp, &s.theirs_pub, RESPONSE_MAC1_OFFSET);
    let keys = hs.derive_keys().unwrap();
    assert!(!keys.is_initiator);
    assert_eq!(
        (keys.local_index, keys.remote_index),
        (0xabcd_ef01, bt_index)
    );
    let mut session = TestSession {
        keys,
        next_counter: 0,
    };

    // Boringtun answers our response with a keepalive: the key confirmation.
    let keepalive = match bt.decapsulate(None, &resp, &mut dst) {
        TunnResult::WriteToNetwork(p) => p.to_vec(),
        other => panic!("boringtun rejected our response: {other:?}"),
    };
    assert_eq!(keepalive.len(), 32);
    assert_eq!(session.open(&keepalive), Some(Vec::new()));

    // Replaying boringtun's initiation to us is refused (same timestamp).
    let replay = decrypt_initiation(&s.ours, &init).unwrap();
    assert!(replay
        .accept(&mut hs, Instant::from_nanos(1_000_000_000))
        .is_err());

    exchange_data(&mut bt, &mut session);
}

#[test]
fn psk_mismatch_with_boringtun_fails() {
    let mut s = setup(3);
    let mut bt = boringtun_peer(&s, Some([1; 32]));
    let mut hs = Handshake::new(&s.ours, s.theirs_pub, PresharedKey::from_bytes([2; 32]));
    let mut dst = vec![0u8; 2048];
    let mut init = hs
        .create_initiation(&s.ours, 9, now_tai64n(), &mut s.rng)
        .unwrap();
    add_mac1(&mut init, &s.theirs_pub, INITIATION_MAC1_OFFSET);
    let resp = match bt.decapsulate(None, &init, &mut dst) {
        TunnResult::WriteToNetwork(r) => r.to_vec(),
        other => panic!("boringtun did not answer: {other:?}"),
    };
    assert!(hs.consume_response(&s.ours, &resp).is_err());
}
