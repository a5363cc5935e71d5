//! The relay: bytes both ways between a client and its target, one thread per direction.

use crate::network::Stream;
use std::io;

/// The buffer of each direction.
const BUFFER: usize = 64 * 1024;

/// Copies `client` to `target` on this thread and `target` to `client` on a second one,
/// until both directions end; `early` (what the client sent after its handshake) goes to the
/// target first. An EOF is passed on as a half-close (shutdown of the write side), so
/// protocols that half-close work; a failure in either direction shuts both connections, so
/// the other direction does not wait forever.
pub(crate) fn relay(
    mut client: Box<dyn Stream>,
    mut target: Box<dyn Stream>,
    early: &[u8],
    what: &str,
) {
    if !early.is_empty() {
        if let Err(e) = target.write_all(early) {
            tracing::debug!("{what}: target write failed: {e}");
            return;
        }
    }
    let (client2, target2) = match (client.try_clone_stream(), target.try_clone_stream()) {
        (Ok(c), Ok(t)) => (c, t),
        (Err(e), _) | (_, Err(e)) => {
            tracing::warn!("{what}: cannot clone a connection for the relay: {e}");
            return;
        }
    };
    let back = std::thread::Builder::new()
        .name("relay".to_string())
        .spawn(move || {
            let (mut from, mut to) = (target2, client2);
            copy_half(&mut *from, &mut *to)
        });
    let back = match back {
        Ok(t) => t,
        Err(e) => {
            tracing::warn!("{what}: cannot start a relay thread: {e}");
            return;
        }
    };
    let up = copy_half(&mut *client, &mut *target);
    let down = back
        .join()
        .unwrap_or(Err(io::Error::other("relay thread panicked")));
    match (up, down) {
        (Ok(up), Ok(down)) => tracing::debug!(up, down, "{what}: closed"),
        (up, down) => tracing::debug!(?up, ?down, "{what}: ended with an error"),
    }
}

/// Copies until EOF, then half-closes `to`; returns the bytes copied. On an error both
/// connections are shut in both directions, which ends the other direction's blocked read.
fn copy_half(from: &mut dyn Stream, to: &mut dyn Stream) -> io::Result<u64> {
    let mut buf = vec![0u8; BUFFER];
    let mut total = 0u64;
    let result = loop {
        let n = match from.read(&mut buf) {
            Ok(0) => break Ok(total),
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => break Err(e),
        };
        if let Err(e) = to.write_all(&buf[..n]) {
            break Err(e);
        }
        total += n as u64;
    };
    match result {
        Ok(_) => {
            let _ = to.shutdown_write();
        }
        Err(_) => {
            let _ = from.shutdown_both();
            let _ = to.shutdown_both();
        }
    }
    result
}
