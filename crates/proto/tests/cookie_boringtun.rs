//! Interoperability with boringtun 0.7, an independent implementation, in process.
//!
//! Cookies: a boringtun initiation passes our `check_mac1`; our cookie reply is consumed by
//! boringtun, whose next initiation then carries a mac2 that our `check_mac2` accepts for the
//! same source address and port (and rejects for another port).
//!
//! Transport: a minimal Noise IKpsk2 responder written here from the specification (the crate's
//! own noise module is not used, so this checks `Keypair` alone) completes a handshake with
//! boringtun; then data flows both ways through `Keypair::seal`/`open`.
#![cfg(target_os = "linux")]

use blake2::{Blake2s256, Digest};
use boringtun::noise::{Tunn, TunnResult};
use boringtun::x25519::{PublicKey, StaticSecret};
use chacha20poly1305::aead::{AeadInPlace, KeyInit};
use chacha20poly1305::ChaCha20Poly1305;
use rand::rngs::StdRng;
use rand::SeedableRng;
use std::net::{IpAddr, Ipv4Addr};
use vpn_proto::cookie::{CookieChecker, CookieGenerator};
use vpn_proto::time::Instant;
use vpn_proto::transport::{padded_len, Keypair};

fn keys(seed: u8) -> (StaticSecret, PublicKey) {
    let s = StaticSecret::from([seed; 32]);
    let p = PublicKey::from(&s);
    (s, p)
}

fn initiation(tunn: &mut Tunn, force: bool) -> Vec<u8> {
    let mut dst = vec![0u8; 2048];
    match tunn.format_handshake_initiation(&mut dst, force) {
        TunnResult::WriteToNetwork(p) => p.to_vec(),
        other => panic!("expected an initiation, got {}", describe(&other)),
    }
}

fn describe(r: &TunnResult<'_>) -> String {
    match r {
        TunnResult::Done => "Done".into(),
        TunnResult::Err(e) => format!("Err({e:?})"),
        TunnResult::WriteToNetwork(p) => format!("WriteToNetwork({} bytes)", p.len()),
        TunnResult::WriteToTunnelV4(p, _) => format!("WriteToTunnelV4({} bytes)", p.len()),
        TunnResult::WriteToTunnelV6(p, _) => format!("WriteToTunnelV6({} bytes)", p.len()),
    }
}

/// IP bytes then big-endian port, as `vpn_conn::Endpoint::dst_to_bytes` produces.
fn src_bytes(ip: [u8; 4], port: u16) -> [u8; 6] {
    let mut s = [0u8; 6];
    s[..4].copy_from_slice(&ip);
    s[4..].copy_from_slice(&port.to_be_bytes());
    s
}

#[test]
fn boringtun_initiation_passes_mac1_and_uses_our_cookie() {
    let (i_priv, _) = keys(1);
    let (_, r_pub) = keys(2);
    let mut tunn = Tunn::new(i_priv, r_pub, None, None, 7, None);
    let mut checker = CookieChecker::new(r_pub.as_bytes());
    let now = Instant::from_nanos(5_000_000_000);
    let src = src_bytes([198, 18, 0, 2], 40_000);

    let init = initiation(&mut tunn, false);
    assert_eq!(init.len(), 148);
    assert!(checker.check_mac1(&init), "boringtun's mac1 must verify");
    assert!(!CookieChecker::new(&[9; 32]).check_mac1(&init));
    assert_eq!(&init[132..], &[0u8; 16], "no cookie yet: mac2 zero");
    assert!(!checker.check_mac2(&init, &src, now));

    // A tampered reply is refused by boringtun and leaves it without a cookie.
    let sender = u32::from_le_bytes(init[4..8].try_into().unwrap());
    let mut rng = StdRng::seed_from_u64(3);
    let reply = checker
        .create_reply(&init, sender, &src, now, &mut rng)
        .unwrap();
    let mut bad = reply;
    bad[40] ^= 1;
    let mut dst = vec![0u8; 2048];
    let r = tunn.decapsulate(
        Some(IpAddr::V4(Ipv4Addr::new(198, 18, 0, 1))),
        &bad,
        &mut dst,
    );
    assert!(
        matches!(r, TunnResult::Err(_)),
        "tampered reply: {}",
        describe(&r)
    );

    let r = tunn.decapsulate(
        Some(IpAddr::V4(Ipv4Addr::new(198, 18, 0, 1))),
        &reply,
        &mut dst,
    );
    assert!(
        matches!(r, TunnResult::Done),
        "cookie reply: {}",
        describe(&r)
    );

    let retry = initiation(&mut tunn, true);
    assert!(checker.check_mac1(&retry));
    assert_ne!(&retry[132..], &[0u8; 16]);
    assert!(
        checker.check_mac2(&retry, &src, now),
        "boringtun's mac2 with our cookie"
    );
    assert!(
        !checker.check_mac2(&retry, &src_bytes([198, 18, 0, 2], 40_001), now),
        "other port"
    );
    assert!(
        !checker.check_mac2(&retry, &src_bytes([198, 18, 0, 3], 40_000), now),
        "other IP"
    );
    assert!(!checker.check_mac2(
        &retry,
        &src,
        now + vpn_proto::consts::COOKIE_REFRESH_TIME * 2
    ));
}

// ---- A minimal Noise_IKpsk2 responder, from the WireGuard paper, for the transport check. ----

const CONSTRUCTION: &[u8] = b"Noise_IKpsk2_25519_ChaChaPoly_BLAKE2s";
const IDENTIFIER: &[u8] = b"WireGuard v1 zx2c4 Jason@zx2c4.com";

fn hash(parts: &[&[u8]]) -> [u8; 32] {
    let mut h = Blake2s256::new();
    for p in parts {
        h.update(p);
    }
    h.finalize().into()
}

/// HMAC-BLAKE2s (RFC 2104, 64-byte block), keys up to 32 bytes.
fn hmac(key: &[u8], parts: &[&[u8]]) -> [u8; 32] {
    let mut k = [0u8; 64];
    k[..key.len()].copy_from_slice(key);
    let ipad: Vec<u8> = k.iter().map(|b| b ^ 0x36).collect();
    let opad: Vec<u8> = k.iter().map(|b| b ^ 0x5c).collect();
    let mut inner_parts: Vec<&[u8]> = vec![&ipad];
    inner_parts.extend_from_slice(parts);
    let inner = hash(&inner_parts);
    hash(&[&opad, &inner])
}

/// KDF_n: returns (T1, T2, T3).
fn kdf(ck: &[u8; 32], input: &[u8]) -> ([u8; 32], [u8; 32], [u8; 32]) {
    let prk = hmac(ck, &[input]);
    let t1 = hmac(&prk, &[&[1]]);
    let t2 = hmac(&prk, &[&t1, &[2]]);
    let t3 = hmac(&prk, &[&t2, &[3]]);
    (t1, t2, t3)
}

fn aead_zero_nonce(
    key: &[u8; 32],
    aad: &[u8],
    buf: &mut [u8],
    tag_in: Option<&[u8]>,
) -> Option<[u8; 16]> {
    let c = ChaCha20Poly1305::new(key.into());
    let nonce = [0u8; 12];
    match tag_in {
        Some(tag) => c
            .decrypt_in_place_detached((&nonce).into(), aad, buf, tag.into())
            .ok()
            .map(|_| [0; 16]),
        None => c
            .encrypt_in_place_detached((&nonce).into(), aad, buf)
            .ok()
            .map(Into::into),
    }
}

/// Consumes an initiation and returns (response message, our keypair as responder).
fn respond(
    init: &[u8],
    r_priv: &StaticSecret,
    i_pub: &PublicKey,
    local_index: u32,
) -> (Vec<u8>, Keypair) {
    let r_pub = PublicKey::from(r_priv);
    let mut ck = hash(&[CONSTRUCTION]);
    let mut h = hash(&[&hash(&[&ck, IDENTIFIER]), r_pub.as_bytes()]);
    let sender = u32::from_le_bytes(init[4..8].try_into().unwrap());
    let e_i: [u8; 32] = init[8..40].try_into().unwrap();
    h = hash(&[&h, &e_i]);
    ck = kdf(&ck, &e_i).0;
    let (c, k, _) = kdf(&ck, r_priv.diffie_hellman(&PublicKey::from(e_i)).as_bytes());
    ck = c;
    let mut stat = init[40..72].to_vec();
    aead_zero_nonce(&k, &h, &mut stat, Some(&init[72..88])).expect("static decrypts");
    assert_eq!(&stat[..], i_pub.as_bytes());
    h = hash(&[&h, &init[40..88]]);
    let (c, k, _) = kdf(&ck, r_priv.diffie_hellman(i_pub).as_bytes());
    ck = c;
    let mut ts = init[88..100].to_vec();
    aead_zero_nonce(&k, &h, &mut ts, Some(&init[100..116])).expect("timestamp decrypts");
    h = hash(&[&h, &init[88..116]]);

    let e_r = StaticSecret::from([0x77; 32]);
    let e_r_pub = PublicKey::from(&e_r);
    let mut resp = vec![0u8; 92];
    resp[..4].copy_from_slice(&2u32.to_le_bytes());
    resp[4..8].copy_from_slice(&local_index.to_le_bytes());
    resp[8..12].copy_from_slice(&sender.to_le_bytes());
    resp[12..44].copy_from_slice(e_r_pub.as_bytes());
    h = hash(&[&h, e_r_pub.as_bytes()]);
    ck = kdf(&ck, e_r_pub.as_bytes()).0;
    ck = kdf(&ck, e_r.diffie_hellman(&PublicKey::from(e_i)).as_bytes()).0;
    ck = kdf(&ck, e_r.diffie_hellman(i_pub).as_bytes()).0;
    let (c, tau, k) = kdf(&ck, &[0u8; 32]);
    ck = c;
    h = hash(&[&h, &tau]);
    let tag = aead_zero_nonce(&k, &h, &mut [], None).unwrap();
    resp[44..60].copy_from_slice(&tag);
    CookieGenerator::new(i_pub.as_bytes()).add_macs(&mut resp, Instant::ZERO);

    let (t_recv, t_send, _) = kdf(&ck, &[]);
    let kp = Keypair::new(&t_send, &t_recv, local_index, sender, false, Instant::ZERO);
    (resp, kp)
}

fn ipv4_packet(payload_len: usize) -> Vec<u8> {
    let total = 20 + payload_len;
    let mut p = vec![0u8; total];
    p[0] = 0x45;
    p[2..4].copy_from_slice(&(total as u16).to_be_bytes());
    p[8] = 64;
    p[9] = 17;
    p[12..16].copy_from_slice(&[100, 64, 0, 1]);
    p[16..20].copy_from_slice(&[100, 64, 0, 2]);
    for (i, b) in p[20..].iter_mut().enumerate() {
        *b = i as u8;
    }
    p
}

#[test]
fn transport_messages_interoperate_with_boringtun() {
    let (i_priv, i_pub) = keys(11);
    let (r_priv, r_pub) = keys(12);
    let mut tunn = Tunn::new(i_priv, r_pub, None, None, 3, None);
    let init = initiation(&mut tunn, false);
    let (resp, kp) = respond(&init, &r_priv, &i_pub, 0xabcd_0123);

    // boringtun consumes our response and confirms the session with a keepalive.
    let mut dst = vec![0u8; 4096];
    let peer_ip = Some(IpAddr::V4(Ipv4Addr::new(198, 18, 0, 1)));
    let mut keepalive = match tunn.decapsulate(peer_ip, &resp, &mut dst) {
        TunnResult::WriteToNetwork(p) => p.to_vec(),
        other => panic!("response not accepted: {}", describe(&other)),
    };
    assert_eq!(keepalive.len(), 32);
    assert_eq!(&keepalive[4..8], &0xabcd_0123u32.to_le_bytes());
    let counter = u64::from_le_bytes(keepalive[8..16].try_into().unwrap());
    assert_eq!(kp.open(counter, &mut keepalive), Ok(0));

    // boringtun → us, at several sizes (boringtun does not pad).
    for len in [0usize, 1, 15, 16, 17, 1400] {
        let packet = ipv4_packet(len);
        let mut out = vec![0u8; 4096];
        let mut msg = match tunn.encapsulate(&packet, &mut out) {
            TunnResult::WriteToNetwork(p) => p.to_vec(),
            other => panic!("encapsulate: {}", describe(&other)),
        };
        let counter = u64::from_le_bytes(msg[8..16].try_into().unwrap());
        let n = kp
            .open(counter, &mut msg)
            .expect("our open of boringtun's message");
        assert_eq!(&msg[16..16 + n], &packet[..]);
        let mut tampered = tunn_encapsulate(&mut tunn, &packet);
        let c2 = u64::from_le_bytes(tampered[8..16].try_into().unwrap());
        tampered[20] ^= 1;
        assert!(kp.open(c2, &mut tampered).is_err());
    }

    // us → boringtun, padded to a multiple of 16 (`docs/protocol.md`, "Sending"); boringtun trims to the IP total length.
    for len in [0usize, 1, 15, 16, 17, 1400] {
        let packet = ipv4_packet(len);
        let padded = padded_len(packet.len(), 1420);
        let mut buf = vec![0u8; 16 + padded + 16];
        buf[16..16 + packet.len()].copy_from_slice(&packet);
        let n = kp
            .seal(kp.reserve_nonces(1), &mut buf, packet.len(), padded)
            .unwrap();
        let mut out = vec![0u8; 4096];
        match tunn.decapsulate(peer_ip, &buf[..n], &mut out) {
            TunnResult::WriteToTunnelV4(p, src) => {
                assert_eq!(&p[..], &packet[..]);
                assert_eq!(src, Ipv4Addr::new(100, 64, 0, 1));
            }
            other => panic!(
                "boringtun refused our message of {len}: {}",
                describe(&other)
            ),
        }
    }
    // Our keepalive is accepted too.
    let mut ka = [0u8; 32];
    let n = kp.seal(kp.reserve_nonces(1), &mut ka, 0, 0).unwrap();
    let r = tunn.decapsulate(peer_ip, &ka[..n], &mut dst);
    assert!(matches!(r, TunnResult::Done), "keepalive: {}", describe(&r));
    // A replayed message is refused by boringtun's own window (same counter as above).
    let r = tunn.decapsulate(peer_ip, &ka[..n], &mut dst);
    assert!(matches!(r, TunnResult::Err(_)), "replay: {}", describe(&r));
}

fn tunn_encapsulate(tunn: &mut Tunn, packet: &[u8]) -> Vec<u8> {
    let mut out = vec![0u8; 4096];
    match tunn.encapsulate(packet, &mut out) {
        TunnResult::WriteToNetwork(p) => p.to_vec(),
        other => panic!("encapsulate: {}", describe(&other)),
    }
}
