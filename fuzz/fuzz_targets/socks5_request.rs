//! Fuzzes vpn-proxy's SOCKS5 parsers (greeting, RFC 1929 login, request, UDP header): no
//! input may panic; a message parsed takes at most the input; every prefix of the input
//! parses as "incomplete" or exactly as the whole does (the server reads piece by piece);
//! an address parsed encodes back (in a reply or a UDP datagram) to the same address.
#![no_main]

use libfuzzer_sys::fuzz_target;
use std::fmt::Debug;
use vpn_proxy::socks5::{self, Address, Parsed, Socks5Error};

/// Inputs longer than any SOCKS5 message get their prefixes checked only this far.
const PREFIXES: usize = 600;

fn check<T: PartialEq + Debug>(data: &[u8], parse: fn(&[u8]) -> Parsed<T>) -> Parsed<T> {
    let whole = parse(data);
    match &whole {
        Ok((_, used)) => assert!(*used <= data.len()),
        Err(e) => {
            assert!(!e.to_string().is_empty());
            assert!([0x01, 0x07, 0x08].contains(&e.reply_code()));
        }
    }
    for n in 0..data.len().min(PREFIXES) {
        let part = parse(&data[..n]);
        assert!(
            part == Err(Socks5Error::Incomplete) || part == whole,
            "prefix {n}: {part:?}, whole: {whole:?}"
        );
    }
    whole
}

fuzz_target!(|data: &[u8]| {
    if let Ok((g, used)) = check(data, socks5::parse_greeting) {
        assert_eq!(g.methods.len() + 2, used);
        for auth in [false, true] {
            let m = g.choose_method(auth);
            assert!(m == socks5::METHOD_NONE_ACCEPTABLE || g.methods.contains(&m));
        }
    }
    if let Ok((up, _)) = check(data, socks5::parse_user_pass) {
        let user = String::from_utf8_lossy(&up.username).into_owned();
        let pass = String::from_utf8_lossy(&up.password).into_owned();
        let exact = user.as_bytes() == up.username && pass.as_bytes() == up.password;
        assert_eq!(up.matches(&user, &pass), exact);
    }
    if let Ok((req, _)) = check(data, socks5::parse_request) {
        round_trip(&req.destination);
    }
    let _ = check(data, socks5::parse_address);
    if let Ok((h, at)) = check(data, socks5::parse_udp_header) {
        assert!(at <= data.len());
        assert_eq!(data[2], 0, "fragments are refused");
        round_trip(&h.address);
    }
});

/// An IP address goes out in a reply and a UDP header and parses back the same (an
/// IPv4-mapped IPv6 address as plain IPv4).
fn round_trip(a: &Address) {
    let Address::Ip(addr) = a else {
        return;
    };
    let canonical = Address::Ip(std::net::SocketAddr::new(
        addr.ip().to_canonical(),
        addr.port(),
    ));
    let reply = socks5::reply(socks5::REP_SUCCEEDED, *addr);
    let (back, used) = socks5::parse_address(&reply[3..]).expect("a reply's address parses");
    assert_eq!((back, used), (canonical.clone(), reply.len() - 3));
    let d = socks5::udp_datagram(*addr, b"x");
    let (h, at) = socks5::parse_udp_header(&d).expect("a datagram we build parses");
    assert_eq!(h.address, canonical);
    assert_eq!(&d[at..], b"x");
}
