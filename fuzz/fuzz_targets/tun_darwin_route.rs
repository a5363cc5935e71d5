//! Fuzzes the darwin parsers of kernel-written bytes: routing messages (`RTM_IFINFO`, the
//! utun's up/down and MTU events) and darwin-layout socket addresses (sources `recvmsg_x`
//! reports). Neither may panic; an address that decodes must encode back to the same bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use vpn_darwinbatch::sockaddr::{decode, encode, NameBuf};
use vpn_tun::darwin::route::parse_ifinfo;

fuzz_target!(|data: &[u8]| {
    if let Some(info) = parse_ifinfo(data) {
        let msglen = usize::from(u16::from_ne_bytes([data[0], data[1]]));
        assert!(msglen <= data.len());
        let _ = info;
    }
    let len = data.first().map_or(0, |&b| usize::from(b));
    let name = data.get(1..).unwrap_or(&[]);
    if let Some(addr) = decode(name, len.min(name.len())) {
        let mut back = NameBuf::default();
        let n = encode(&addr, &mut back);
        assert_eq!(decode(&back.0, n), Some(addr));
    }
});
