//! Fuzzes the route listener's parsers of kernel-written netlink bytes: the notification check
//! and the `RTM_GETROUTE` reply. Neither may panic; a reply that parses to an interface must
//! have carried a full message of the length its header says.
#![no_main]

use libfuzzer_sys::fuzz_target;
use vpn_sys::route_events::{carries_change, parse_route_reply};

fuzz_target!(|data: &[u8]| {
    let _ = carries_change(data);
    if parse_route_reply(data).is_ok() {
        let len = u32::from_ne_bytes(data[0..4].try_into().unwrap()) as usize;
        assert!(len <= data.len());
    }
});
