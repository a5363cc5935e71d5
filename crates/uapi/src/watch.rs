//! Noticing that the socket file went away: an administrator stops a userspace WireGuard daemon
//! by deleting its socket (`wg-quick down` on macOS does exactly that).
//!
//! Linux watches the socket file itself with inotify. macOS cannot open a socket file, so it
//! watches the directory holding it with kqueue (adding or removing an entry writes the
//! directory), as wireguard-go does on the BSDs. Where neither can be set up (an exotic
//! filesystem, a sandbox, another Unix), a portable fallback wakes up every
//! [`POLL_INTERVAL`]. Whatever woke it, the server then compares the path's device and inode
//! with the socket it created: every watch only says "look again".

use parking_lot::{Condvar, Mutex};
use std::io;
use std::path::Path;
use std::time::Duration;
use vpn_sys::daemon::Watch;

/// How often the portable fallback looks at the socket path.
pub(crate) const POLL_INTERVAL: Duration = Duration::from_secs(1);

/// One of the ways to wait for a change of the socket path; see the module doc.
pub(crate) enum SocketWatch {
    #[cfg(any(target_os = "linux", target_os = "android"))]
    Inotify(vpn_sys::daemon::Inotify),
    #[cfg(target_vendor = "apple")]
    Kqueue(vpn_sys::darwin::dirwatch::DirWatch),
    Poll(PollWatch),
}

impl SocketWatch {
    /// The operating system's watch for `path`, else the portable poll (with a warning).
    pub(crate) fn open(path: &Path) -> SocketWatch {
        match os_watch(path) {
            Ok(w) => w,
            Err(e) => {
                tracing::warn!(
                    "cannot watch {} ({e}); checking it every {:?} instead",
                    path.display(),
                    POLL_INTERVAL
                );
                SocketWatch::Poll(PollWatch::new(POLL_INTERVAL))
            }
        }
    }

    /// Blocks until the path may have changed ([`Watch::Events`]) or [`wake`](Self::wake).
    pub(crate) fn wait(&self) -> io::Result<Watch> {
        match self {
            #[cfg(any(target_os = "linux", target_os = "android"))]
            SocketWatch::Inotify(w) => w.wait(),
            #[cfg(target_vendor = "apple")]
            SocketWatch::Kqueue(w) => w.wait(),
            SocketWatch::Poll(w) => Ok(w.wait()),
        }
    }

    /// Wakes the thread in [`wait`](Self::wait), or the next call to it.
    pub(crate) fn wake(&self) {
        match self {
            #[cfg(any(target_os = "linux", target_os = "android"))]
            SocketWatch::Inotify(w) => w.wake(),
            #[cfg(target_vendor = "apple")]
            SocketWatch::Kqueue(w) => w.wake(),
            SocketWatch::Poll(w) => w.wake(),
        }
    }
}

#[cfg(any(target_os = "linux", target_os = "android"))]
fn os_watch(path: &Path) -> io::Result<SocketWatch> {
    use vpn_sys::daemon::{Inotify, IN_ATTRIB, IN_DELETE, IN_DELETE_SELF};
    Inotify::watch(path, IN_ATTRIB | IN_DELETE | IN_DELETE_SELF).map(SocketWatch::Inotify)
}

#[cfg(target_vendor = "apple")]
fn os_watch(path: &Path) -> io::Result<SocketWatch> {
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    vpn_sys::darwin::dirwatch::DirWatch::watch(dir).map(SocketWatch::Kqueue)
}

#[cfg(not(any(target_os = "linux", target_os = "android", target_vendor = "apple")))]
fn os_watch(_path: &Path) -> io::Result<SocketWatch> {
    Err(io::Error::new(
        io::ErrorKind::Unsupported,
        "no file watch on this platform",
    ))
}

/// The portable fallback: a timed wait that a wake cuts short.
pub(crate) struct PollWatch {
    woken: Mutex<bool>,
    cv: Condvar,
    interval: Duration,
}

impl PollWatch {
    pub(crate) fn new(interval: Duration) -> PollWatch {
        PollWatch {
            woken: Mutex::new(false),
            cv: Condvar::new(),
            interval,
        }
    }

    /// [`Watch::Woken`] if woken (now or since the last wait), else `Events(0)` after the
    /// interval: "look again".
    fn wait(&self) -> Watch {
        let mut woken = self.woken.lock();
        if !*woken {
            self.cv.wait_for(&mut woken, self.interval);
        }
        if std::mem::take(&mut *woken) {
            Watch::Woken
        } else {
            Watch::Events(0)
        }
    }

    fn wake(&self) {
        *self.woken.lock() = true;
        self.cv.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn poll_watch_keeps_a_wake_that_comes_before_the_wait() {
        let w = PollWatch::new(Duration::from_secs(3600));
        w.wake();
        assert_eq!(w.wait(), Watch::Woken);
    }

    #[test]
    fn poll_watch_says_look_again_after_its_interval() {
        let w = PollWatch::new(Duration::from_millis(1));
        assert_eq!(w.wait(), Watch::Events(0));
    }

    #[test]
    fn poll_watch_wake_reaches_a_blocked_waiter() {
        let w = std::sync::Arc::new(PollWatch::new(Duration::from_secs(3600)));
        let waiter = {
            let w = w.clone();
            std::thread::spawn(move || w.wait())
        };
        // Whether the wake lands before or during the wait, the waiter returns Woken.
        w.wake();
        assert_eq!(waiter.join().unwrap(), Watch::Woken);
    }

    #[cfg(any(target_os = "linux", target_os = "android", target_vendor = "apple"))]
    #[test]
    fn the_operating_system_watch_is_used_where_there_is_one() {
        let dir = std::env::temp_dir().join(format!("vpn-uapi-watch-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("s");
        std::fs::write(&f, b"").unwrap();
        let w = SocketWatch::open(&f);
        assert!(!matches!(w, SocketWatch::Poll(_)));
        w.wake();
        assert_eq!(w.wait().unwrap(), Watch::Woken);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
