//! [`Statistics`]: the counters of the private `stats=1` request, as `group.name=value` lines.
//!
//! The device's pipeline counters are the `device` group; a daemon adds its TUN's (`tun`) and
//! its bind's (`bind`). `vpn show` turns them into its "batching:" section.

use crate::error::IpcError;
use crate::text::{body_lines, decimal, split_line};
use std::fmt;
use std::str::FromStr;

/// Named counters in the order they were recorded.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Statistics {
    entries: Vec<(String, u64)>,
}

/// Whether `key` can be written as a `key=value` line and read back as the same key.
fn valid_key(key: &str) -> bool {
    !key.is_empty() && !key.contains(['=', '\n', '\r'])
}

impl Statistics {
    /// No counters.
    pub fn new() -> Statistics {
        Statistics::default()
    }

    /// Records `group.name=value`. A name that could not be read back (empty, or holding
    /// `=` or a line break) is not recorded and `false` is returned.
    pub fn push(&mut self, group: &str, name: &str, value: u64) -> bool {
        let key = format!("{group}.{name}");
        if group.contains('.') || !valid_key(group) || !valid_key(name) {
            return false;
        }
        self.entries.push((key, value));
        true
    }

    /// Records every `(name, value)` of `fields` under `group`.
    pub fn push_group<'a>(
        &mut self,
        group: &str,
        fields: impl IntoIterator<Item = (&'a str, u64)>,
    ) {
        for (name, value) in fields {
            self.push(group, name, value);
        }
    }

    /// The value of `key` (`group.name`); the last one if recorded twice.
    pub fn get(&self, key: &str) -> Option<u64> {
        self.entries
            .iter()
            .rev()
            .find(|(k, _)| k == key)
            .map(|&(_, v)| v)
    }

    /// Every counter, in order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, u64)> {
        self.entries.iter().map(|(k, v)| (k.as_str(), *v))
    }

    /// True when no counter is recorded.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

impl fmt::Display for Statistics {
    /// One `group.name=value` line per counter.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (k, v) in &self.entries {
            writeln!(f, "{k}={v}")?;
        }
        Ok(())
    }
}

impl FromStr for Statistics {
    type Err = IpcError;

    /// Parses a `stats=1` reply body: `key=value` lines with unsigned decimal values, up to
    /// an empty line.
    fn from_str(text: &str) -> Result<Statistics, IpcError> {
        let mut st = Statistics::new();
        for line in body_lines(text) {
            let (key, value) = split_line(line)?;
            let value =
                decimal(value).ok_or_else(|| IpcError::invalid(format!("bad counter: {line}")))?;
            match key.split_once('.') {
                Some((group, name)) if st.push(group, name, value) => {}
                _ => return Err(IpcError::invalid(format!("bad counter name: {key}"))),
            }
        }
        Ok(st)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::{IPC_ERROR_INVALID, IPC_ERROR_PROTOCOL};

    #[test]
    fn counters_render_as_group_dot_name_lines_in_order() {
        let mut st = Statistics::new();
        st.push_group("device", [("tun_reads", 3), ("drop_replay", 7)]);
        assert!(st.push("bind", "v4_gso", 1));
        assert_eq!(
            st.to_string(),
            "device.tun_reads=3\ndevice.drop_replay=7\nbind.v4_gso=1\n"
        );
        assert_eq!(st.get("device.drop_replay"), Some(7));
        assert_eq!(st.get("device.nothing"), None);
        assert_eq!(st.to_string().parse::<Statistics>().unwrap(), st);
    }

    #[test]
    fn names_that_would_not_read_back_are_refused() {
        let mut st = Statistics::new();
        for (g, n) in [
            ("", "x"),
            ("a", ""),
            ("a.b", "c"),
            ("a", "b=c"),
            ("a", "b\nc=1"),
        ] {
            assert!(!st.push(g, n, 1), "{g:?} {n:?}");
        }
        assert!(st.is_empty());
    }

    #[test]
    fn bad_stats_lines_are_errors() {
        for (bad, code) in [
            ("not a line", IPC_ERROR_PROTOCOL),
            ("device.x=-1", IPC_ERROR_INVALID),
            ("device.x=y", IPC_ERROR_INVALID),
            ("nodot=1", IPC_ERROR_INVALID),
        ] {
            assert_eq!(bad.parse::<Statistics>().unwrap_err().code(), code, "{bad}");
        }
    }
}
