//! Closing an OS-backed TUN, the same on every OS: a closed flag the data path checks, the
//! pollers woken through the device's wake descriptor, the event listener stopped and joined.

use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;

use crossbeam_channel::Sender;
use parking_lot::Mutex;

pub(crate) struct Shutdown {
    closed: AtomicBool,
    /// Dropping it unblocks a listener waiting on a full event channel.
    stop_events: Mutex<Option<Sender<()>>>,
    listener: Mutex<Option<JoinHandle<()>>>,
}

impl Shutdown {
    /// `listener` is the event thread to stop, if the device has one.
    pub(crate) fn new(stop_events: Sender<()>, listener: Option<JoinHandle<()>>) -> Shutdown {
        Shutdown {
            closed: AtomicBool::new(false),
            stop_events: Mutex::new(Some(stop_events)),
            listener: Mutex::new(listener),
        }
    }

    pub(crate) fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    /// Closes once (later calls return Ok): marks the device closed, calls `wake` to wake
    /// every poller, stops the listener and waits for it.
    pub(crate) fn close(
        &self,
        name: &str,
        wake: impl FnOnce() -> io::Result<()>,
    ) -> io::Result<()> {
        if self.closed.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        let woke = wake();
        drop(self.stop_events.lock().take());
        if let Some(h) = self.listener.lock().take() {
            if h.join().is_err() {
                tracing::warn!("TUN {name}: event listener panicked");
            }
        }
        woke
    }
}

/// The error reads and writes return once the device is closed.
pub(crate) fn closed() -> io::Error {
    io::Error::new(io::ErrorKind::BrokenPipe, "tun closed")
}
