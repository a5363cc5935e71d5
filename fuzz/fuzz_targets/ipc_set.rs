//! `vpn_ipc::Change::parse_partial` on arbitrary text (a UAPI `set` body from a client): it
//! must never panic, and what it accepted must render as a body without an empty line that
//! parses back, error-free, to the same change.
#![no_main]

#[path = "common/uapi_lines.rs"]
mod common;

use libfuzzer_sys::fuzz_target;
use vpn_ipc::Change;

fuzz_target!(|data: &[u8]| {
    let text = common::text(data);
    let (change, _error) = Change::parse_partial(&text);
    let rendered = change.to_string();
    assert!(!rendered.contains("\n\n"), "empty line in {rendered:?}");
    let (again, error) = Change::parse_partial(&rendered);
    assert_eq!(error, None, "rendered change does not parse: {rendered:?}");
    assert_eq!(
        again, change,
        "render/parse round trip changed: {rendered:?}"
    );
});
