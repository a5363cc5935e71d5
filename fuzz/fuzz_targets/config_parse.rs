//! `vpn_config::parse` on arbitrary text: it must never panic, and whatever it accepts must
//! survive render → parse unchanged and produce a UAPI body without an empty line (which
//! would end the `set` request early).
#![no_main]

use libfuzzer_sys::fuzz_target;
use std::net::SocketAddr;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(config) = vpn_config::parse(text) else {
        return;
    };
    let rendered = config.render();
    match vpn_config::parse(&rendered) {
        Ok(again) => assert_eq!(
            again, config,
            "render/parse round trip changed:\n{rendered}"
        ),
        Err(e) => panic!("rendered config does not parse ({e}):\n{rendered}"),
    }
    let body = config
        .to_uapi(|_, port| Ok(SocketAddr::from(([198, 18, 0, 1], port))))
        .expect("a fixed resolver cannot fail");
    assert!(!body.contains("\n\n"));
});
