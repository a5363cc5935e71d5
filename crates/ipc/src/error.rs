//! [`IpcError`]: why a request failed, with the negative errno the protocol reports.

use std::fmt;

/// The kinds of failure the protocol distinguishes, each with its own errno.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum IpcErrorKind {
    /// The request could not be read or written (`EIO`).
    Io,
    /// A line without `=`, or a malformed request (`EPROTO`).
    Protocol,
    /// An unknown key or a bad value (`EINVAL`).
    Invalid,
    /// The listen port could not be bound or the mark not set (`EADDRINUSE`).
    PortInUse,
    /// Anything else (wireguard-go's `ipcErrorUnknown`, 55).
    Unknown,
}

impl IpcErrorKind {
    /// The negative errno reported as `errno=` for this kind on this operating system.
    pub const fn code(self) -> i64 {
        match self {
            IpcErrorKind::Io => IPC_ERROR_IO,
            IpcErrorKind::Protocol => IPC_ERROR_PROTOCOL,
            IpcErrorKind::Invalid => IPC_ERROR_INVALID,
            IpcErrorKind::PortInUse => IPC_ERROR_PORT_IN_USE,
            IpcErrorKind::Unknown => IPC_ERROR_UNKNOWN,
        }
    }
}

/// `-EIO`: the request could not be read or written.
pub const IPC_ERROR_IO: i64 = -5;
/// `-EINVAL`: an unknown key or a bad value.
pub const IPC_ERROR_INVALID: i64 = -22;
/// Anything else (not an errno: wireguard-go's fixed code).
pub const IPC_ERROR_UNKNOWN: i64 = -55;

/// `-EPROTO`: a line without `=`, or a malformed request.
#[cfg(not(target_vendor = "apple"))]
pub const IPC_ERROR_PROTOCOL: i64 = -71;
/// `-EPROTO`: a line without `=`, or a malformed request.
#[cfg(target_vendor = "apple")]
pub const IPC_ERROR_PROTOCOL: i64 = -100;

/// `-EADDRINUSE`: the listen port could not be bound.
#[cfg(not(target_vendor = "apple"))]
pub const IPC_ERROR_PORT_IN_USE: i64 = -98;
/// `-EADDRINUSE`: the listen port could not be bound.
#[cfg(target_vendor = "apple")]
pub const IPC_ERROR_PORT_IN_USE: i64 = -48;

/// A failed configuration request: its kind (hence its errno) and a message for the log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IpcError {
    kind: IpcErrorKind,
    message: String,
}

impl IpcError {
    /// An error of `kind` explained by `message`.
    pub fn new(kind: IpcErrorKind, message: impl Into<String>) -> IpcError {
        IpcError {
            kind,
            message: message.into(),
        }
    }

    /// An [`IpcErrorKind::Invalid`] error.
    pub fn invalid(message: impl Into<String>) -> IpcError {
        IpcError::new(IpcErrorKind::Invalid, message)
    }

    /// An [`IpcErrorKind::Protocol`] error.
    pub fn protocol(message: impl Into<String>) -> IpcError {
        IpcError::new(IpcErrorKind::Protocol, message)
    }

    /// What kind of failure this is.
    pub fn kind(&self) -> IpcErrorKind {
        self.kind
    }

    /// The negative errno printed as `errno=` (and returned by C hosts' `wgSetConfig`).
    pub fn code(&self) -> i64 {
        self.kind.code()
    }

    /// What went wrong, for a person.
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl fmt::Display for IpcError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "IPC error {}: {}", self.code(), self.message)
    }
}

impl std::error::Error for IpcError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_wireguard_go_errnos() {
        assert_eq!(IpcErrorKind::Io.code(), -5);
        assert_eq!(IpcErrorKind::Invalid.code(), -22);
        assert_eq!(IpcErrorKind::Unknown.code(), -55);
        #[cfg(any(target_os = "linux", target_os = "android"))]
        {
            assert_eq!(IpcErrorKind::Protocol.code(), -71);
            assert_eq!(IpcErrorKind::PortInUse.code(), -98);
        }
        let e = IpcError::invalid("bad value");
        assert_eq!(e.code(), -22);
        assert_eq!(e.to_string(), "IPC error -22: bad value");
    }
}
