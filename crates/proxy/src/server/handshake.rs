//! Reading a protocol's opening messages with a sans-IO parser, under one deadline.

use crate::network::Stream;
use crate::server::is_timeout;
use std::io;
use std::time::{Duration, Instant};

/// A parse result that may just need more bytes.
pub(crate) trait NeedsMore {
    fn needs_more(&self) -> bool;
}

impl NeedsMore for crate::socks5::Socks5Error {
    fn needs_more(&self) -> bool {
        *self == crate::socks5::Socks5Error::Incomplete
    }
}

impl NeedsMore for crate::http::HttpError {
    fn needs_more(&self) -> bool {
        *self == crate::http::HttpError::Incomplete
    }
}

/// Why a message could not be read.
#[derive(Debug)]
pub(crate) enum Failure<E> {
    /// The bytes are invalid: answer with the protocol's error.
    Invalid(E),
    /// The client closed, went silent past the deadline (`TimedOut`), or the read failed.
    Io(io::Error),
}

/// A client connection during its handshake: what was read and not yet parsed, and the
/// deadline of the whole handshake (so a client trickling bytes cannot stretch it).
pub(crate) struct Handshake<'s> {
    stream: &'s mut dyn Stream,
    buf: Vec<u8>,
    deadline: Instant,
    cap: usize,
}

impl<'s> Handshake<'s> {
    /// Starts a handshake that must be done within `timeout`, buffering at most `cap` bytes.
    pub(crate) fn new(stream: &'s mut dyn Stream, timeout: Duration, cap: usize) -> Self {
        Handshake {
            stream,
            buf: Vec::new(),
            deadline: Instant::now() + timeout,
            cap,
        }
    }

    /// The next message, read with `parse`; more bytes are read while it needs them.
    pub(crate) fn read<T, E: NeedsMore>(
        &mut self,
        parse: impl Fn(&[u8]) -> Result<(T, usize), E>,
    ) -> Result<T, Failure<E>> {
        loop {
            match parse(&self.buf) {
                Ok((message, used)) => {
                    self.buf.drain(..used.min(self.buf.len()));
                    return Ok(message);
                }
                Err(e) if e.needs_more() => self.fill().map_err(Failure::Io)?,
                Err(e) => return Err(Failure::Invalid(e)),
            }
        }
    }

    /// Writes a reply to the client.
    pub(crate) fn reply(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.stream.write_all(bytes)?;
        self.stream.flush()
    }

    /// Ends the handshake: the read timeout is cleared for the relay, and the bytes the
    /// client sent after its last message (the first bytes for the target) are returned.
    pub(crate) fn finish(self) -> io::Result<Vec<u8>> {
        self.stream.set_read_timeout(None)?;
        Ok(self.buf)
    }

    /// Reads what the client sent next, waiting at most until the deadline.
    fn fill(&mut self) -> io::Result<()> {
        let room = self.cap.saturating_sub(self.buf.len());
        if room == 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "handshake message too long",
            ));
        }
        let mut chunk = [0u8; 4096];
        let want = room.min(chunk.len());
        loop {
            let left = self.deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(handshake_timed_out());
            }
            self.stream.set_read_timeout(Some(left))?;
            match self.stream.read(&mut chunk[..want]) {
                Ok(0) => {
                    return Err(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        "the client closed during the handshake",
                    ))
                }
                Ok(n) => {
                    self.buf.extend_from_slice(&chunk[..n]);
                    return Ok(());
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if is_timeout(&e) => return Err(handshake_timed_out()),
                Err(e) => return Err(e),
            }
        }
    }
}

fn handshake_timed_out() -> io::Error {
    io::Error::new(io::ErrorKind::TimedOut, "handshake timed out")
}

/// Closes a connection after an error reply, reading (for at most a second) what the client
/// still sends: closing with unread data makes the kernel reset the connection, and the
/// client could lose the reply.
pub(crate) fn close_after_reply(stream: &mut dyn Stream) {
    let _ = stream.shutdown_write();
    let deadline = Instant::now() + Duration::from_secs(1);
    let mut buf = [0u8; 4096];
    let mut drained = 0usize;
    while drained < 256 << 10 {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() || stream.set_read_timeout(Some(left)).is_err() {
            return;
        }
        match stream.read(&mut buf) {
            Ok(0) | Err(_) => return,
            Ok(n) => drained += n,
        }
    }
}
