//! `wgSetLogger`: the device's log lines (the `tracing` facade) delivered to a C callback.
//!
//! The first call installs a process-wide subscriber that formats each event as one line and
//! hands it to whatever callback is current; later calls only swap the callback. If the process
//! already has a subscriber (a Rust app that set its own), that one keeps the log.

use parking_lot::RwLock;
use std::ffi::{c_char, c_int, c_void, CString};
use std::io;
use std::sync::Once;
use tracing::Level;
use tracing_subscriber::fmt::MakeWriter;

/// The callback's level for verbose lines (WireGuardKit's `0`).
pub(crate) const LEVEL_VERBOSE: c_int = 0;
/// The callback's level for errors and warnings (WireGuardKit's `1`).
pub(crate) const LEVEL_ERROR: c_int = 1;

/// A C log callback: `fn(context, level, message)`.
pub(crate) type Callback = unsafe extern "C" fn(*mut c_void, c_int, *const c_char);

#[derive(Clone, Copy)]
struct Sink {
    /// The host's context pointer, kept as an integer: it is only ever handed back.
    context: usize,
    f: Callback,
}

static SINK: RwLock<Option<Sink>> = RwLock::new(None);
static INSTALL: Once = Once::new();

/// Makes `f` (with `context`) the log callback; `None` drops log lines from now on.
pub(crate) fn set(context: *mut c_void, f: Option<Callback>) {
    *SINK.write() = f.map(|f| Sink {
        context: context as usize,
        f,
    });
    INSTALL.call_once(|| {
        let subscriber = tracing_subscriber::fmt()
            .with_writer(ToCallback)
            .with_ansi(false)
            .without_time()
            .with_target(false)
            .with_max_level(Level::DEBUG)
            .finish();
        if tracing::subscriber::set_global_default(subscriber).is_err() {
            tracing::warn!(
                "wgSetLogger: the process already has a log subscriber; it keeps the log"
            );
        }
    });
}

/// The callback level of an event: warnings count as errors for the host.
fn callback_level(level: &Level) -> c_int {
    if *level <= Level::WARN {
        LEVEL_ERROR
    } else {
        LEVEL_VERBOSE
    }
}

/// Delivers a formatted line to the current sink (nothing if there is none).
fn deliver(level: c_int, line: &[u8]) {
    let Some(sink) = *SINK.read() else {
        return;
    };
    let line = line.strip_suffix(b"\n").unwrap_or(line);
    let text: Vec<u8> = line
        .iter()
        .map(|&b| if b == 0 { b' ' } else { b })
        .collect();
    let Ok(msg) = CString::new(text) else {
        return;
    };
    // SAFETY: the host gave this function pointer and context to wgSetLogger and keeps them
    // valid until it installs another; `msg` is a NUL-terminated string alive for the call.
    unsafe { (sink.f)(sink.context as *mut c_void, level, msg.as_ptr()) };
}

/// The subscriber's writer factory: one [`Line`] per event, tagged with its level.
struct ToCallback;

impl<'a> MakeWriter<'a> for ToCallback {
    type Writer = Line;

    fn make_writer(&'a self) -> Line {
        Line {
            level: LEVEL_VERBOSE,
            buf: Vec::new(),
        }
    }

    fn make_writer_for(&'a self, meta: &tracing::Metadata<'_>) -> Line {
        Line {
            level: callback_level(meta.level()),
            buf: Vec::new(),
        }
    }
}

/// Collects one formatted event and delivers it when dropped.
struct Line {
    level: c_int,
    buf: Vec<u8>,
}

impl io::Write for Line {
    fn write(&mut self, b: &[u8]) -> io::Result<usize> {
        self.buf.extend_from_slice(b);
        Ok(b.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Drop for Line {
    fn drop(&mut self) {
        if !self.buf.is_empty() {
            deliver(self.level, &self.buf);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn warnings_and_errors_reach_the_host_as_errors() {
        assert_eq!(callback_level(&Level::ERROR), LEVEL_ERROR);
        assert_eq!(callback_level(&Level::WARN), LEVEL_ERROR);
        assert_eq!(callback_level(&Level::INFO), LEVEL_VERBOSE);
        assert_eq!(callback_level(&Level::DEBUG), LEVEL_VERBOSE);
    }
}
