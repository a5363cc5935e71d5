//! The body of the private `stats=1` reply: device counters as `device.<name>=<n>` lines.
//!
//! `vpn show` turns them into the "batching:" section. The daemon appends the TUN's and the
//! bind's counters (`tun.*`, `bind.*`) through [`crate::StatsFn`], since only it knows the
//! concrete TUN and bind types.

use std::fmt::Write as _;
use vpn_device::Stats;

/// Appends one `device.<counter>=<value>` line per device counter to `out`.
pub fn write_device_stats(s: &Stats, out: &mut String) {
    let fields = s.fields();
    for (k, v) in fields {
        let _ = writeln!(out, "device.{k}={v}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every field of `Stats` (as its `Debug` output names them) has a line, so a counter
    /// added to the device cannot silently go missing from `vpn show`.
    #[test]
    fn every_counter_is_dumped() {
        let s = Stats {
            drop_replay: 7,
            ..Stats::default()
        };
        let mut out = String::new();
        write_device_stats(&s, &mut out);
        assert!(out.contains("device.drop_replay=7\n"));
        let dbg = format!("{s:?}");
        let inner = dbg.trim_start_matches("Stats {").trim_end_matches('}');
        let mut n = 0;
        for field in inner.split(',') {
            let name = field.split(':').next().unwrap().trim();
            if name.is_empty() {
                continue;
            }
            n += 1;
            assert!(out.contains(&format!("device.{name}=")), "{name} missing");
        }
        assert_eq!(out.lines().count(), n);
    }
}
