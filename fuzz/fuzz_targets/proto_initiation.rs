//! Fuzzes the responder side: `decrypt_initiation` then `accept` (and, when accepted,
//! `create_response` and `derive_keys`). No input may panic; a rejected initiation must leave
//! the peer's handshake untouched.
#![no_main]

#[path = "common/proto_handshake.rs"]
mod common;

use common::{initiator, initiator_in_flight, mutate, responder, DetRng, PSK};
use libfuzzer_sys::fuzz_target;
use std::sync::OnceLock;
use vpn_proto::keys::PresharedKey;
use vpn_proto::noise::{decrypt_initiation, Handshake, HandshakeState};
use vpn_proto::time::Instant;

struct Fixture {
    i: vpn_proto::noise::StaticIdentity,
    r: vpn_proto::noise::StaticIdentity,
    init: [u8; 148],
}

fn fixture() -> &'static Fixture {
    static F: OnceLock<Fixture> = OnceLock::new();
    F.get_or_init(|| {
        let (i, r) = (initiator(), responder());
        let (_, init) = initiator_in_flight(&i, &r);
        Fixture { i, r, init }
    })
}

fuzz_target!(|data: &[u8]| {
    let f = fixture();
    let msg = mutate(&f.init, data);
    let Ok(cand) = decrypt_initiation(&f.r, &msg) else {
        return;
    };
    // Only the genuine initiator's key can decrypt; the peer is looked up by it.
    let mut peer = Handshake::new(&f.r, *cand.remote_static(), PresharedKey::from_bytes(PSK));
    match cand.accept(&mut peer, Instant::from_nanos(1)) {
        Ok(()) => {
            assert_eq!(peer.state(), HandshakeState::InitiationConsumed);
            assert_eq!(peer.remote_static(), f.i.public_key());
            peer.create_response(7, &mut DetRng(3))
                .expect("response after accept");
            peer.derive_keys().expect("keys after response");
        }
        Err(e) => {
            let _ = e.to_string();
            assert_eq!(peer.state(), HandshakeState::Zeroed);
        }
    }
});
