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
