use std::fmt;
use std::io;

/// Marker carried inside the [`io::Error`] that receive functions return once their bind or
/// socket is closed.
#[derive(Debug)]
struct Closed;

impl fmt::Display for Closed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("use of closed network connection")
    }
}

impl std::error::Error for Closed {}

/// The error a receive function returns after its source is closed (`net.ErrClosed`).
pub fn err_closed() -> io::Error {
    io::Error::new(io::ErrorKind::NotConnected, Closed)
}

/// Whether `e` is [`err_closed`]: the reader that saw it should stop.
pub fn is_err_closed(e: &io::Error) -> bool {
    e.get_ref().is_some_and(|inner| inner.is::<Closed>())
}

/// UDP segmentation offload failed (EIO) and has been disabled for good on this socket; the
/// batch was resent without it. `retry` is the outcome of that resend (`None`: it succeeded).
#[derive(Debug)]
pub struct ErrUdpGsoDisabled {
    /// Error of the un-offloaded resend, if it failed too.
    pub retry: Option<io::Error>,
}

impl fmt::Display for ErrUdpGsoDisabled {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.retry {
            None => f.write_str("disabled UDP GSO on socket; retried without it"),
            Some(e) => write!(f, "disabled UDP GSO on socket; retry failed: {e}"),
        }
    }
}

impl std::error::Error for ErrUdpGsoDisabled {}

impl ErrUdpGsoDisabled {
    /// Wraps into an [`io::Error`] as `Bind::send` returns it.
    pub fn into_io(self) -> io::Error {
        io::Error::other(self)
    }

    /// If `e` reports disabled GSO, the error of the retry (`Ok(None)` when the retry worked).
    pub fn retry_outcome(e: &io::Error) -> Option<Option<&io::Error>> {
        e.get_ref()
            .and_then(|inner| inner.downcast_ref::<ErrUdpGsoDisabled>())
            .map(|g| g.retry.as_ref())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn closed_is_recognised() {
        assert!(is_err_closed(&err_closed()));
        assert!(!is_err_closed(&io::Error::from(
            io::ErrorKind::NotConnected
        )));
        assert!(!is_err_closed(&io::Error::other("x")));
    }

    #[test]
    fn gso_disabled_carries_retry() {
        let e = ErrUdpGsoDisabled { retry: None }.into_io();
        assert!(matches!(ErrUdpGsoDisabled::retry_outcome(&e), Some(None)));
        assert!(ErrUdpGsoDisabled::retry_outcome(&io::Error::other("x")).is_none());
    }
}
