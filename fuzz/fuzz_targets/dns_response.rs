//! Fuzzes vpn-netstack's DNS response parser: no input may panic; an answer is only taken
//! from a response (QR set, RCODE 0) to our id, and holds only addresses of the family asked.
//! The first two bytes are the id, the next two pick the type (A, AAAA, or any raw type).
#![no_main]

use libfuzzer_sys::fuzz_target;
use vpn_netstack::dns::{parse_response, DnsError, TYPE_A, TYPE_AAAA};

fuzz_target!(|data: &[u8]| {
    if data.len() < 4 {
        return;
    }
    let id = u16::from_be_bytes([data[0], data[1]]);
    let qtype = match data[2] % 4 {
        0 | 1 => TYPE_A,
        2 => TYPE_AAAA,
        _ => u16::from_be_bytes([data[2], data[3]]),
    };
    let msg = &data[4..];
    match parse_response(msg, id, qtype) {
        Ok(answer) => {
            assert_eq!(u16::from_be_bytes([msg[0], msg[1]]), id);
            assert!(msg[2] & 0x80 != 0, "a response");
            assert_eq!(msg[3] & 0x0f, 0, "RCODE 0");
            assert_eq!(answer.truncated, msg[2] & 0x02 != 0);
            for ip in &answer.addrs {
                match qtype {
                    TYPE_A => assert!(ip.is_ipv4()),
                    TYPE_AAAA => assert!(ip.is_ipv6()),
                    _ => panic!("an address for type {qtype}"),
                }
            }
        }
        Err(DnsError::Rcode(r)) => assert!(r != 0 && r <= 15),
        Err(e) => assert!(!e.to_string().is_empty()),
    }
});
