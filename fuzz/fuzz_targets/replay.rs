//! `ReplayFilter::check` against a naive model (a set of accepted counters and the highest
//! seen) over arbitrary counter sequences. Each 9-byte record is an operation: a small step
//! forward or back from the current highest (to exercise the window edges), or an absolute
//! counter (to exercise far jumps and the reject limit).
#![no_main]

use libfuzzer_sys::fuzz_target;
use std::collections::HashSet;
use vpn_proto::consts::{REJECT_AFTER_MESSAGES, REPLAY_WINDOW_SIZE};
use vpn_proto::replay::ReplayFilter;

fuzz_target!(|data: &[u8]| {
    let mut filter = ReplayFilter::new();
    let mut seen = HashSet::new();
    let mut last = 0u64;
    for rec in data.chunks_exact(9) {
        let op = rec[0];
        let mut v = [0u8; 8];
        v.copy_from_slice(&rec[1..]);
        let v = u64::from_le_bytes(v);
        let counter = match op % 4 {
            0 => last.saturating_add(v % 20_000),
            1 => last.saturating_sub(v % 20_000),
            2 => REJECT_AFTER_MESSAGES
                .saturating_sub(v % 20_000)
                .saturating_add(u64::from(op >> 4)),
            _ => v,
        };
        if op == 0xff {
            filter.reset();
            seen.clear();
            last = 0;
            continue;
        }
        let expect = if counter >= REJECT_AFTER_MESSAGES
            || (counter < last && last - counter > REPLAY_WINDOW_SIZE)
        {
            false
        } else {
            last = last.max(counter);
            seen.insert(counter)
        };
        assert_eq!(
            filter.check(counter),
            expect,
            "counter {counter} last {last}"
        );
    }
});
