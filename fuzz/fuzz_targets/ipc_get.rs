//! `vpn_ipc::DeviceState` and `Statistics` parsing arbitrary text (a `get` dump or a `stats=1`
//! reply from a daemon): never a panic, and what parses renders as text that parses back to
//! the same value.
#![no_main]

#[path = "common/uapi_lines.rs"]
mod common;

use libfuzzer_sys::fuzz_target;
use vpn_ipc::{DeviceState, Statistics};

fuzz_target!(|data: &[u8]| {
    let text = common::text(data);
    if let Ok(state) = text.parse::<DeviceState>() {
        let rendered = state.to_string();
        assert_eq!(
            rendered.parse::<DeviceState>().as_ref(),
            Ok(&state),
            "get round trip changed: {rendered:?}"
        );
    }
    if let Ok(stats) = text.parse::<Statistics>() {
        let rendered = stats.to_string();
        assert_eq!(
            rendered.parse::<Statistics>().as_ref(),
            Ok(&stats),
            "stats round trip changed: {rendered:?}"
        );
    }
});
