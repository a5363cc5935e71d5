//! Fuzzes message classification and the zero-copy views of vpn-proto: no input may panic,
//! the typed parsers (and `Received`, `sender_index`) must agree with `classify`, and a parsed transport header must write back
//! to the bytes it came from.
#![no_main]

use libfuzzer_sys::fuzz_target;
use vpn_proto::messages::{
    classify, sender_index, CookieReply, Initiation, MessageType, Received, Response,
    TransportHeader, TRANSPORT_HEADER_SIZE,
};

fuzz_target!(|data: &[u8]| {
    let kind = classify(data);
    let init = Initiation::parse(data);
    let resp = Response::parse(data);
    let cookie = CookieReply::parse(data);
    let transport = TransportHeader::parse(data);
    assert_eq!(init.is_ok(), kind == Ok(MessageType::Initiation));
    assert_eq!(resp.is_ok(), kind == Ok(MessageType::Response));
    assert_eq!(cookie.is_ok(), kind == Ok(MessageType::CookieReply));
    assert_eq!(transport.is_ok(), kind == Ok(MessageType::Transport));
    match Received::parse(data) {
        Ok(Received::Transport(h)) => assert_eq!(Ok(h), transport),
        Ok(Received::Handshake(k)) => assert!(kind == Ok(k) && k != MessageType::Transport),
        Err(e) => assert_eq!(Err(e), kind),
    }
    assert_eq!(sender_index(data).is_ok(), init.is_ok() || resp.is_ok());
    if let Err(e) = kind {
        let _ = e.to_string();
    }
    if let Ok(i) = init {
        let _ = (i.sender_index(), i.ephemeral(), i.encrypted_static());
        let _ = (i.encrypted_timestamp(), i.mac1(), i.mac2(), i.bytes());
    }
    if let Ok(r) = resp {
        let _ = (r.sender_index(), r.receiver_index(), r.ephemeral());
        let _ = (r.encrypted_nothing(), r.mac1(), r.mac2(), r.bytes());
    }
    if let Ok(c) = cookie {
        let _ = (
            c.receiver_index(),
            c.nonce(),
            c.encrypted_cookie(),
            c.bytes(),
        );
    }
    if let Ok(h) = transport {
        let mut out = [0u8; TRANSPORT_HEADER_SIZE];
        h.write(&mut out);
        assert_eq!(&out[..], &data[..TRANSPORT_HEADER_SIZE]);
    }
});
