//! `wgBumpSockets`: after the host's network changed, re-open the bind in the background
//! (retried, since the new network may not be usable yet), then send keepalives so peers learn
//! the new source address at once.

use parking_lot::{Condvar, Mutex};
use std::io;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

/// Attempts before giving up (WireGuardKit's figure).
pub(crate) const ATTEMPTS: u32 = 10;
/// Pause between attempts.
pub(crate) const INTERVAL: Duration = Duration::from_millis(500);

/// What a bump acts on: the device, or a fake in tests.
pub(crate) trait Rebind: Send + Sync + 'static {
    /// Closes and re-opens the sockets.
    fn bind_update(&self) -> io::Result<()>;
    /// Keepalives to every peer with a usable current keypair.
    fn send_keepalives(&self);
}

impl Rebind for vpn_device::Device {
    fn bind_update(&self) -> io::Result<()> {
        vpn_device::Device::bind_update(self)
    }

    fn send_keepalives(&self) {
        self.send_keepalives_to_peers_with_current_keypair()
    }
}

/// How a bump ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// The bind re-opened on this attempt (1-based) and keepalives went out.
    Rebound(u32),
    /// Every attempt failed.
    GaveUp,
    /// The tunnel was turned off while the bump waited.
    Stopped,
}

/// Set once when the tunnel is turned off; wakes bumps sleeping between attempts.
#[derive(Default)]
struct Stop {
    stopped: Mutex<bool>,
    cv: Condvar,
}

impl Stop {
    /// Waits `d` or until stopped; true if stopped.
    fn wait(&self, d: Duration) -> bool {
        let mut s = self.stopped.lock();
        if !*s {
            self.cv.wait_for(&mut s, d);
        }
        *s
    }

    fn is_stopped(&self) -> bool {
        *self.stopped.lock()
    }
}

/// Runs one bump to its end (on the calling thread).
fn run(target: &dyn Rebind, stop: &Stop, attempts: u32, interval: Duration) -> Outcome {
    for attempt in 1..=attempts {
        if stop.is_stopped() {
            return Outcome::Stopped;
        }
        match target.bind_update() {
            Ok(()) => {
                target.send_keepalives();
                return Outcome::Rebound(attempt);
            }
            Err(e) => tracing::error!("unable to update bind, try {attempt}: {e}"),
        }
        if attempt < attempts && stop.wait(interval) {
            return Outcome::Stopped;
        }
    }
    tracing::error!("gave up trying to update bind; tunnel is likely dysfunctional");
    Outcome::GaveUp
}

/// The bumps of one tunnel: their threads, and the switch that ends them when it is turned
/// off (so turning off leaves no thread behind).
pub(crate) struct Bumper {
    stop: Arc<Stop>,
    threads: Mutex<Vec<JoinHandle<Outcome>>>,
    attempts: u32,
    interval: Duration,
}

impl Bumper {
    pub(crate) fn new(attempts: u32, interval: Duration) -> Self {
        Bumper {
            stop: Arc::default(),
            threads: Mutex::new(Vec::new()),
            attempts,
            interval,
        }
    }

    /// Starts a bump in the background; returns at once.
    pub(crate) fn bump(&self, target: Arc<dyn Rebind>) -> io::Result<()> {
        let mut threads = self.threads.lock();
        // Reap finished bumps so a host bumping on every path change keeps no handles.
        let (done, running): (Vec<_>, Vec<_>) =
            threads.drain(..).partition(JoinHandle::is_finished);
        *threads = running;
        for t in done {
            let _ = t.join();
        }
        if self.stop.is_stopped() {
            return Ok(());
        }
        let stop = self.stop.clone();
        let (attempts, interval) = (self.attempts, self.interval);
        let t = std::thread::Builder::new()
            .name("wg-bump".into())
            .spawn(move || run(&*target, &stop, attempts, interval))?;
        threads.push(t);
        Ok(())
    }

    /// Ends every bump (waking those between attempts) and joins their threads; later bumps
    /// do nothing. Returns how the bumps ended.
    pub(crate) fn stop(&self) -> Vec<Outcome> {
        *self.stop.stopped.lock() = true;
        self.stop.cv.notify_all();
        let threads: Vec<_> = self.threads.lock().drain(..).collect();
        threads
            .into_iter()
            .map(|t| t.join().unwrap_or(Outcome::Stopped))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};

    /// Fails the first `failures` rebinds; counts calls.
    #[derive(Default)]
    struct Fake {
        failures: u32,
        rebinds: AtomicU32,
        keepalives: AtomicU32,
    }

    impl Rebind for Fake {
        fn bind_update(&self) -> io::Result<()> {
            let n = self.rebinds.fetch_add(1, Ordering::SeqCst);
            if n < self.failures {
                Err(io::Error::from(io::ErrorKind::AddrNotAvailable))
            } else {
                Ok(())
            }
        }

        fn send_keepalives(&self) {
            self.keepalives.fetch_add(1, Ordering::SeqCst);
        }
    }

    #[test]
    fn a_bump_retries_until_the_bind_reopens_then_sends_keepalives() {
        let f = Fake {
            failures: 3,
            ..Fake::default()
        };
        let out = run(&f, &Stop::default(), ATTEMPTS, Duration::from_millis(1));
        assert_eq!(out, Outcome::Rebound(4));
        assert_eq!(f.rebinds.load(Ordering::SeqCst), 4);
        assert_eq!(f.keepalives.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn a_bump_gives_up_after_ten_attempts_without_keepalives() {
        let f = Fake {
            failures: u32::MAX,
            ..Fake::default()
        };
        let out = run(&f, &Stop::default(), ATTEMPTS, Duration::from_millis(1));
        assert_eq!(out, Outcome::GaveUp);
        assert_eq!(f.rebinds.load(Ordering::SeqCst), 10);
        assert_eq!(f.keepalives.load(Ordering::SeqCst), 0);
    }

    #[test]
    fn turning_off_ends_a_bump_waiting_between_attempts() {
        let f = Arc::new(Fake {
            failures: u32::MAX,
            ..Fake::default()
        });
        // An hour between attempts: only the stop can end this bump.
        let b = Bumper::new(ATTEMPTS, Duration::from_secs(3600));
        b.bump(f.clone()).unwrap();
        while f.rebinds.load(Ordering::SeqCst) == 0 {
            std::thread::yield_now();
        }
        assert_eq!(b.stop(), vec![Outcome::Stopped]);
        assert_eq!(f.rebinds.load(Ordering::SeqCst), 1);
        // After the stop a bump is a no-op.
        b.bump(f.clone()).unwrap();
        assert!(b.stop().is_empty());
        assert_eq!(f.rebinds.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn finished_bumps_are_reaped_by_the_next_one() {
        let f = Arc::new(Fake::default());
        let b = Bumper::new(ATTEMPTS, Duration::from_millis(1));
        let wait_finished = || {
            while !b.threads.lock()[0].is_finished() {
                std::thread::yield_now();
            }
        };
        b.bump(f.clone()).unwrap();
        wait_finished();
        b.bump(f.clone()).unwrap();
        assert_eq!(
            b.threads.lock().len(),
            1,
            "the first bump's thread was joined"
        );
        wait_finished();
        assert_eq!(b.stop(), vec![Outcome::Rebound(1)]);
        assert_eq!(f.keepalives.load(Ordering::SeqCst), 2);
    }
}
