//! Fuzzes the initiator side: `consume_response` on a handshake with an initiation in
//! flight. No input may panic; a rejected response must leave the handshake waiting, and the
//! genuine response must still complete it afterwards.
#![no_main]

#[path = "common/proto_handshake.rs"]
mod common;

use common::{genuine_response, initiator, initiator_in_flight, mutate, responder};
use libfuzzer_sys::fuzz_target;
use std::sync::OnceLock;
use vpn_proto::noise::{HandshakeState, StaticIdentity};

struct Fixture {
    i: StaticIdentity,
    r: StaticIdentity,
    resp: [u8; 92],
}

fn fixture() -> &'static Fixture {
    static F: OnceLock<Fixture> = OnceLock::new();
    F.get_or_init(|| {
        let (i, r) = (initiator(), responder());
        let (_, init) = initiator_in_flight(&i, &r);
        let resp = genuine_response(&i, &r, &init);
        Fixture { i, r, resp }
    })
}

fuzz_target!(|data: &[u8]| {
    let f = fixture();
    let (mut hs, _) = initiator_in_flight(&f.i, &f.r);
    let msg = mutate(&f.resp, data);
    match hs.consume_response(&f.i, &msg) {
        Ok(()) => {
            assert_eq!(hs.state(), HandshakeState::ResponseConsumed);
            hs.derive_keys().expect("keys after a consumed response");
        }
        Err(e) => {
            let _ = e.to_string();
            assert_eq!(hs.state(), HandshakeState::InitiationCreated);
            hs.consume_response(&f.i, &f.resp)
                .expect("genuine response after a forgery");
        }
    }
});
