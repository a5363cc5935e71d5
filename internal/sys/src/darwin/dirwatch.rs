//! A kqueue watch on a directory: the macOS counterpart of the daemon's inotify watch.
//!
//! A Unix socket file cannot be opened on macOS, so its removal cannot be watched on the file
//! itself. As wireguard-go's BSD UAPI code does, the directory holding it is watched instead:
//! adding or removing an entry writes the directory (`NOTE_WRITE`), and the caller re-checks
//! the socket path after every event. A second, user-triggered filter lets another thread
//! wake the waiter promptly (closing an fd does not wake a thread blocked in `kevent`).

use super::cvt;
use crate::daemon::Watch;
use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// The ident of the user filter [`DirWatch::wake`] triggers.
const WAKE_IDENT: usize = 1;

/// The vnode events that can mean an entry of the directory went away or the directory did.
const DIR_EVENTS: u32 = libc::NOTE_WRITE
    | libc::NOTE_DELETE
    | libc::NOTE_RENAME
    | libc::NOTE_REVOKE
    | libc::NOTE_LINK
    | libc::NOTE_ATTRIB;

/// A kqueue with a vnode filter on one directory and a user filter for wake-ups.
pub struct DirWatch {
    kq: OwnedFd,
    /// Kept open for the lifetime of the watch: the vnode filter is bound to this fd.
    _dir: OwnedFd,
}

fn kevent_change(ident: usize, filter: i16, flags: u16, fflags: u32) -> libc::kevent {
    libc::kevent {
        ident,
        filter,
        flags,
        fflags,
        data: 0,
        udata: std::ptr::null_mut(),
    }
}

impl DirWatch {
    /// Watches the directory `dir` (opened for event notification only, so it does not keep a
    /// volume busy).
    pub fn watch(dir: &Path) -> io::Result<DirWatch> {
        let cpath = CString::new(dir.as_os_str().as_bytes())
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "path contains NUL"))?;
        // SAFETY: `cpath` is NUL-terminated and outlives the call; returns a new fd or -1.
        let raw = cvt(unsafe {
            libc::open(
                cpath.as_ptr(),
                libc::O_EVTONLY | libc::O_DIRECTORY | libc::O_CLOEXEC,
            )
        })?;
        // SAFETY: `raw` is a fresh fd nobody else owns.
        let dir_fd = unsafe { OwnedFd::from_raw_fd(raw) };
        // SAFETY: no pointers; returns a new fd or -1.
        let raw = cvt(unsafe { libc::kqueue() })?;
        // SAFETY: `raw` is a fresh fd nobody else owns.
        let kq = unsafe { OwnedFd::from_raw_fd(raw) };
        // SAFETY: F_SETFD with an integer argument on our own open fd.
        cvt(unsafe { libc::fcntl(kq.as_raw_fd(), libc::F_SETFD, libc::FD_CLOEXEC) })?;
        let changes = [
            kevent_change(
                usize::try_from(dir_fd.as_raw_fd()).unwrap_or(usize::MAX),
                libc::EVFILT_VNODE,
                libc::EV_ADD | libc::EV_ENABLE | libc::EV_CLEAR,
                DIR_EVENTS,
            ),
            kevent_change(
                WAKE_IDENT,
                libc::EVFILT_USER,
                libc::EV_ADD | libc::EV_ENABLE | libc::EV_CLEAR,
                0,
            ),
        ];
        let w = DirWatch { kq, _dir: dir_fd };
        w.apply(&changes)?;
        Ok(w)
    }

    /// Registers `changes` without collecting events.
    fn apply(&self, changes: &[libc::kevent]) -> io::Result<()> {
        let n = libc::c_int::try_from(changes.len())
            .map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
        // SAFETY: `changes` points at `n` initialised kevents; no event list is passed.
        cvt(unsafe {
            libc::kevent(
                self.kq.as_raw_fd(),
                changes.as_ptr(),
                n,
                std::ptr::null_mut(),
                0,
                std::ptr::null(),
            )
        })
        .map(|_| ())
    }

    /// Blocks until the directory changes or [`wake`](Self::wake) is called. A wake stays
    /// pending until a wait sees it (`EV_CLEAR` resets it then), so a wake before the wait is
    /// not lost.
    pub fn wait(&self) -> io::Result<Watch> {
        loop {
            let mut events = [kevent_change(0, 0, 0, 0), kevent_change(0, 0, 0, 0)];
            // SAFETY: `events` is a writable array of two kevents for the duration of the
            // call; no change list; no timeout (block).
            let n = unsafe {
                libc::kevent(
                    self.kq.as_raw_fd(),
                    std::ptr::null(),
                    0,
                    events.as_mut_ptr(),
                    2,
                    std::ptr::null(),
                )
            };
            if n < 0 {
                let e = io::Error::last_os_error();
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(e);
            }
            let seen = events.get(..usize::try_from(n).unwrap_or(0)).unwrap_or(&[]);
            if seen.iter().any(|e| e.filter == libc::EVFILT_USER) {
                return Ok(Watch::Woken);
            }
            if let Some(e) = seen.iter().find(|e| e.flags & libc::EV_ERROR != 0) {
                return Err(io::Error::from_raw_os_error(
                    i32::try_from(e.data).unwrap_or(libc::EIO),
                ));
            }
            let mask = seen.iter().fold(0u32, |m, e| m | e.fflags);
            if mask != 0 {
                return Ok(Watch::Events(mask));
            }
        }
    }

    /// Wakes the thread in [`wait`](Self::wait) (or the next call to it).
    pub fn wake(&self) {
        let trigger = [kevent_change(
            WAKE_IDENT,
            libc::EVFILT_USER,
            0,
            libc::NOTE_TRIGGER,
        )];
        // Only a closed kqueue fails here, and then nobody is waiting on it.
        let _ = self.apply(&trigger);
    }
}
