//! `vpn_ffi::settings::network_settings` (what `wgNetworkSettings` and `wgUapiFromConfig` run
//! on a host's text) on arbitrary input: it never panics, and what it accepts is consistent:
//! the JSON reparses, routes are masked, every excluded route is a host route, the UAPI text
//! has no empty line (which would end a `set` early).
#![no_main]

use libfuzzer_sys::fuzz_target;
use std::net::{IpAddr, SocketAddr};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    // No DNS in a fuzzer: literals resolve to themselves, names to one fixed address.
    let resolve = |host: &str, port: u16| {
        let ip = host
            .parse::<IpAddr>()
            .unwrap_or(IpAddr::from([198, 18, 0, 1]));
        Ok(SocketAddr::new(ip, port))
    };
    let Ok(s) = vpn_ffi::settings::network_settings(text, resolve) else {
        return;
    };
    let json = s.to_json().to_string();
    let back: serde_json::Value = serde_json::from_str(&json).expect("the JSON reparses");
    assert_eq!(back["uapi"].as_str(), Some(s.uapi.as_str()));
    for r in &s.included_routes {
        assert_eq!(*r, r.masked(), "route {r} not masked");
    }
    for r in &s.excluded_routes {
        assert_eq!(r.prefix_len(), if r.is_ipv6() { 128 } else { 32 });
    }
    assert!(!s.uapi.contains("\n\n"));
});
