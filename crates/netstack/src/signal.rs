//! Wake-ups between the stack and the threads blocked on it.
//!
//! smoltcp calls a socket's [`Waker`] when data arrives, buffer space frees or its state
//! changes. Each blocking call registers the waker of its own [`Signal`] under the stack's
//! lock and then sleeps on the signal without the lock, so a wake that happens between the
//! two is kept in the flag and never lost.

use parking_lot::{Condvar, Mutex};
use std::sync::Arc;
use std::task::{Wake, Waker};
use std::time::Instant;

/// A one-bit mailbox with a condition variable: `notify` sets it, `wait` takes it.
#[derive(Default)]
pub(crate) struct Signal {
    flag: Mutex<bool>,
    cv: Condvar,
}

impl Signal {
    pub(crate) fn new() -> Arc<Signal> {
        Arc::new(Signal::default())
    }

    /// Sets the flag and wakes every waiter.
    pub(crate) fn notify(&self) {
        *self.flag.lock() = true;
        self.cv.notify_all();
    }

    /// Waits for the flag (clearing it) until `deadline`; `false` if the deadline passed first.
    pub(crate) fn wait(&self, deadline: Option<Instant>) -> bool {
        let mut flag = self.flag.lock();
        while !*flag {
            match deadline {
                Some(d) => {
                    if self.cv.wait_until(&mut flag, d).timed_out() {
                        let set = *flag;
                        *flag = false;
                        return set;
                    }
                }
                None => self.cv.wait(&mut flag),
            }
        }
        *flag = false;
        true
    }

    /// A [`Waker`] that notifies this signal, for smoltcp's socket wakers.
    pub(crate) fn waker(self: &Arc<Self>) -> Waker {
        Waker::from(self.clone())
    }
}

impl Wake for Signal {
    fn wake(self: Arc<Self>) {
        self.notify();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.notify();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn a_notify_before_the_wait_is_kept() {
        let s = Signal::new();
        s.waker().wake();
        assert!(s.wait(Some(Instant::now())));
        assert!(!s.wait(Some(Instant::now() + Duration::from_millis(5))));
    }

    #[test]
    fn a_notify_from_another_thread_ends_the_wait() {
        let s = Signal::new();
        let t = {
            let s = s.clone();
            std::thread::spawn(move || s.wait(Some(Instant::now() + Duration::from_secs(10))))
        };
        std::thread::sleep(Duration::from_millis(20));
        s.notify();
        assert!(t.join().unwrap());
    }
}
