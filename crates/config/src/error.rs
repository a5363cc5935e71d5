//! The one error type: a message tied to the line that caused it.

use std::fmt;

/// Why a configuration was refused.
///
/// `line` is 1-based. Errors that do not come from one line of the file (an endpoint that
/// does not resolve while building the UAPI body) carry line 0 and print only the message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigError {
    /// 1-based line number; 0 when the error is not about one line.
    pub line: usize,
    /// What is wrong, for a person.
    pub message: String,
}

impl ConfigError {
    pub(crate) fn new(line: usize, message: impl Into<String>) -> Self {
        ConfigError {
            line,
            message: message.into(),
        }
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.line == 0 {
            f.write_str(&self.message)
        } else {
            write!(f, "line {}: {}", self.line, self.message)
        }
    }
}

impl std::error::Error for ConfigError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_names_the_line() {
        assert_eq!(
            ConfigError::new(7, "unknown key `Foo`").to_string(),
            "line 7: unknown key `Foo`"
        );
        assert_eq!(ConfigError::new(0, "no line").to_string(), "no line");
    }
}
