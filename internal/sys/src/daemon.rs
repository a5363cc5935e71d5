//! What the `vpn` daemon and its UAPI socket need from the OS beyond std: a suspend-aware
//! clock and inotify (Linux), and on every Unix the file-creation mask, blocked signals, a new
//! session and inherited fds. (The macOS counterpart of the inotify watch is
//! `darwin::dirwatch`.)
//!
//! Each function is a thin, safe wrapper around one or two system calls; the `unsafe` blocks
//! only pass pointers to locals or to NUL-terminated strings that outlive the call.

#[cfg(any(target_os = "linux", target_os = "android"))]
use std::ffi::CString;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
#[cfg(any(target_os = "linux", target_os = "android"))]
use std::os::unix::ffi::OsStrExt;
#[cfg(any(target_os = "linux", target_os = "android"))]
use std::path::Path;
#[cfg(any(target_os = "linux", target_os = "android"))]
use std::time::Duration;

#[cfg(any(target_os = "linux", target_os = "android"))]
/// Time since boot including time spent suspended (`CLOCK_BOOTTIME`): the protocol's key
/// lifetimes must keep running while the machine sleeps.
pub fn boottime() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec that lives across the call.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_BOOTTIME, &mut ts) };
    if rc != 0 {
        // CLOCK_BOOTTIME exists since Linux 2.6.39; fall back to the monotonic clock rather
        // than panicking should a sandbox refuse it.
        // SAFETY: as above.
        unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    }
    Duration::new(
        u64::try_from(ts.tv_sec).unwrap_or(0),
        u32::try_from(ts.tv_nsec).unwrap_or(0),
    )
}

/// Whether the process runs with effective uid 0 (tests that need CAP_NET_ADMIN skip
/// otherwise).
pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and passes no memory.
    unsafe { libc::geteuid() == 0 }
}

/// Runs `f` with the process umask set to `mask`, then restores the previous mask.
///
/// The umask is process-wide: files other threads create meanwhile get the same mask. The
/// UAPI socket is created this way (umask 077) because `bind(2)` on a Unix socket has no mode
/// argument, and a `chmod` afterwards would leave a window with a wider mode.
pub fn with_umask<T>(mask: u32, f: impl FnOnce() -> T) -> T {
    // SAFETY: umask only swaps an integer in the process; it cannot fail.
    let old = unsafe { libc::umask(mask as libc::mode_t) };
    let out = f();
    // SAFETY: as above.
    unsafe { libc::umask(old) };
    out
}

#[cfg(any(target_os = "linux", target_os = "android"))]
/// inotify: the inode was modified in its metadata (link count drops on unlink).
pub const IN_ATTRIB: u32 = libc::IN_ATTRIB;
#[cfg(any(target_os = "linux", target_os = "android"))]
/// inotify: a file in a watched directory was deleted.
pub const IN_DELETE: u32 = libc::IN_DELETE;
#[cfg(any(target_os = "linux", target_os = "android"))]
/// inotify: the watched file itself was deleted.
pub const IN_DELETE_SELF: u32 = libc::IN_DELETE_SELF;
#[cfg(any(target_os = "linux", target_os = "android"))]
/// inotify: the watch was removed (the file is gone or the watch was dropped).
pub const IN_IGNORED: u32 = libc::IN_IGNORED;

/// What a file watch's `wait` saw ([`Inotify::wait`] on Linux, `DirWatch::wait` on macOS).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Watch {
    /// One or more events; the union of their masks.
    Events(u32),
    /// [`Inotify::wake`] was called.
    Woken,
}

#[cfg(any(target_os = "linux", target_os = "android"))]
/// An inotify instance watching one path, with an eventfd so another thread can wake a
/// waiter promptly (closing an fd does not wake a thread blocked on it).
pub struct Inotify {
    fd: OwnedFd,
    wake: crate::poll::EventFd,
}

#[cfg(any(target_os = "linux", target_os = "android"))]
impl Inotify {
    /// Watches `path` for the events in `mask` (e.g. `IN_ATTRIB | IN_DELETE_SELF`).
    pub fn watch(path: &Path, mask: u32) -> io::Result<Inotify> {
        let cpath = CString::new(path.as_os_str().as_bytes())
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "path contains NUL"))?;
        // SAFETY: no pointers; returns a new fd or -1.
        let raw = unsafe { libc::inotify_init1(libc::IN_CLOEXEC | libc::IN_NONBLOCK) };
        if raw < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `raw` is a fresh fd nobody else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        // SAFETY: `cpath` is NUL-terminated and outlives the call.
        let wd = unsafe { libc::inotify_add_watch(fd.as_raw_fd(), cpath.as_ptr(), mask) };
        if wd < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(Inotify {
            fd,
            wake: crate::poll::EventFd::new()?,
        })
    }

    /// Blocks until an event arrives or [`wake`](Self::wake) is called. A wake stays pending
    /// until a wait sees it (and consumes it), so a wake before the wait is not lost.
    pub fn wait(&self) -> io::Result<Watch> {
        loop {
            if crate::poll::poll_or_wake(self.fd.as_raw_fd(), libc::POLLIN, self.wake.as_fd())? {
                self.wake.reset();
                return Ok(Watch::Woken);
            }
            let mask = self.read_events()?;
            if mask != 0 {
                return Ok(Watch::Events(mask));
            }
        }
    }

    /// Wakes the thread in [`wait`](Self::wait) (or the next call to it).
    pub fn wake(&self) {
        // Fails only if the eventfd were not one; nothing to report to a waker.
        let _ = self.wake.signal();
    }

    /// Drains queued events and returns the union of their masks (0 if none were queued).
    fn read_events(&self) -> io::Result<u32> {
        let mut buf = [0u8; 4096];
        let mut mask = 0u32;
        loop {
            // SAFETY: reads at most `buf.len()` bytes into a local buffer.
            let n = unsafe { libc::read(self.fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
            if n < 0 {
                let e = io::Error::last_os_error();
                return match e.kind() {
                    io::ErrorKind::WouldBlock => Ok(mask),
                    io::ErrorKind::Interrupted => continue,
                    _ => Err(e),
                };
            }
            let n = usize::try_from(n).unwrap_or(0);
            if n == 0 {
                return Ok(mask);
            }
            mask |= parse_event_masks(buf.get(..n).unwrap_or(&[]));
        }
    }
}

#[cfg(any(target_os = "linux", target_os = "android"))]
/// The union of the masks of the `struct inotify_event` records in `buf` (wd i32, mask u32,
/// cookie u32, len u32, then `len` bytes of name).
fn parse_event_masks(buf: &[u8]) -> u32 {
    const HEADER: usize = 16;
    let mut mask = 0u32;
    let mut off = 0usize;
    while let Some(h) = buf.get(off..off + HEADER) {
        let word = |i: usize| {
            h.get(i..i + 4)
                .and_then(|b| b.try_into().ok())
                .map(u32::from_ne_bytes)
                .unwrap_or(0)
        };
        mask |= word(4);
        off += HEADER + word(12) as usize;
    }
    mask
}

fn sigset(signals: &[i32]) -> io::Result<libc::sigset_t> {
    // SAFETY: sigset_t is plain data; sigemptyset initialises it before any use.
    let mut set: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: `set` is a valid, writable sigset_t.
    unsafe { libc::sigemptyset(&mut set) };
    for &s in signals {
        // SAFETY: as above; invalid signal numbers are reported as -1/EINVAL.
        if unsafe { libc::sigaddset(&mut set, s) } != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(set)
}

/// Blocks `signals` in the calling thread, and so in every thread it creates afterwards.
/// Call it before any thread is spawned, then take the signals with [`wait_signal`].
pub fn block_signals(signals: &[i32]) -> io::Result<()> {
    let set = sigset(signals)?;
    // SAFETY: `set` is initialised; the old mask is not requested.
    let rc = unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) };
    if rc != 0 {
        return Err(io::Error::from_raw_os_error(rc));
    }
    Ok(())
}

/// Waits until one of `signals` (blocked with [`block_signals`]) is pending and returns it.
pub fn wait_signal(signals: &[i32]) -> io::Result<i32> {
    let set = sigset(signals)?;
    let mut sig: libc::c_int = 0;
    // SAFETY: `set` and `sig` are valid locals for the duration of the call.
    let rc = unsafe { libc::sigwait(&set, &mut sig) };
    if rc != 0 {
        return Err(io::Error::from_raw_os_error(rc));
    }
    Ok(sig)
}

/// Starts a new session (`setsid(2)`): the daemon leaves the terminal's process group, so a
/// Ctrl-C or hang-up aimed at whoever started it does not reach it.
pub fn setsid() -> io::Result<()> {
    // SAFETY: no arguments.
    if unsafe { libc::setsid() } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Sets or clears `FD_CLOEXEC`: a child started with `Command` inherits exactly the fds
/// that have it cleared.
pub fn set_inheritable(fd: BorrowedFd<'_>, inheritable: bool) -> io::Result<()> {
    // SAFETY: F_GETFD on a borrowed, open fd.
    let flags = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GETFD) };
    if flags < 0 {
        return Err(io::Error::last_os_error());
    }
    let new = if inheritable {
        flags & !libc::FD_CLOEXEC
    } else {
        flags | libc::FD_CLOEXEC
    };
    // SAFETY: F_SETFD with an integer argument on a borrowed, open fd.
    if unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_SETFD, new) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Takes ownership of an fd the process inherited from its parent and was told about by
/// number (`WG_TUN_FD`, `WG_UAPI_FD`, the daemon's readiness pipe), marking it close-on-exec.
///
/// Fails with `EBADF` if `raw` is not open or is 0–2 (stdio). The caller must take each
/// number at most once and only for fds nothing else in the process owns, which holds for
/// fds named in the environment at start-up.
pub fn take_inherited_fd(raw: RawFd) -> io::Result<OwnedFd> {
    if raw <= 2 {
        return Err(io::Error::from_raw_os_error(libc::EBADF));
    }
    // SAFETY: F_GETFD only queries whether `raw` is open.
    if unsafe { libc::fcntl(raw, libc::F_GETFD) } < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `raw` is open and, per the contract above, owned by nobody else.
    let fd = unsafe { OwnedFd::from_raw_fd(raw) };
    set_inheritable(fd.as_fd(), false)?;
    Ok(fd)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;
    use std::os::unix::net::UnixStream;
    #[cfg(any(target_os = "linux", target_os = "android"))]
    use std::time::Duration;

    #[cfg(any(target_os = "linux", target_os = "android"))]
    #[test]
    fn boottime_moves_forward_and_is_at_least_monotonic() {
        let a = boottime();
        std::thread::sleep(Duration::from_millis(5));
        let b = boottime();
        assert!(b >= a + Duration::from_millis(5), "{a:?} {b:?}");
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: valid local timespec.
        unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
        let mono = Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32);
        assert!(
            boottime() >= mono,
            "boot time counts at least as much as monotonic time"
        );
    }

    fn current_umask() -> libc::mode_t {
        // SAFETY: reading the mask requires setting it; it is put back at once.
        let now = unsafe { libc::umask(0o022) };
        // SAFETY: as above.
        unsafe { libc::umask(now) };
        now
    }

    #[test]
    fn umask_applies_and_is_restored() {
        let dir = std::env::temp_dir().join(format!("vpn-sys-umask-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("f");
        let before = current_umask();
        with_umask(0o077, || std::fs::write(&f, b"x")).unwrap();
        let mode = std::fs::metadata(&f).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        assert_eq!(current_umask(), before, "the previous umask is back");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[cfg(any(target_os = "linux", target_os = "android"))]
    #[test]
    fn inotify_reports_delete_and_wakes() {
        let dir = std::env::temp_dir().join(format!("vpn-sys-inotify-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("watched");
        std::fs::write(&f, b"x").unwrap();
        let w = Inotify::watch(&f, IN_ATTRIB | IN_DELETE_SELF).unwrap();
        w.wake();
        assert_eq!(w.wait().unwrap(), Watch::Woken);
        std::fs::remove_file(&f).unwrap();
        match w.wait().unwrap() {
            Watch::Events(m) => assert!(m & (IN_ATTRIB | IN_DELETE_SELF) != 0, "{m:#x}"),
            Watch::Woken => panic!("expected an event"),
        }
        assert!(
            Inotify::watch(&f, IN_ATTRIB).is_err(),
            "a missing path cannot be watched"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[cfg(any(target_os = "linux", target_os = "android"))]
    #[test]
    fn event_parsing_is_bounded() {
        let mut buf = Vec::new();
        for (mask, name_len) in [(IN_ATTRIB, 0u32), (IN_DELETE_SELF, 16)] {
            buf.extend_from_slice(&1i32.to_ne_bytes());
            buf.extend_from_slice(&mask.to_ne_bytes());
            buf.extend_from_slice(&0u32.to_ne_bytes());
            buf.extend_from_slice(&name_len.to_ne_bytes());
            buf.extend(std::iter::repeat_n(0u8, name_len as usize));
        }
        assert_eq!(parse_event_masks(&buf), IN_ATTRIB | IN_DELETE_SELF);
        // A truncated record and a huge name length are ignored, not read past the end.
        assert_eq!(parse_event_masks(&buf[..10]), 0);
        let mut bad = buf[..16].to_vec();
        bad[12..16].copy_from_slice(&u32::MAX.to_ne_bytes());
        assert_eq!(parse_event_masks(&bad), IN_ATTRIB);
    }

    #[test]
    fn inherited_fds() {
        assert!(take_inherited_fd(1).is_err());
        assert!(take_inherited_fd(1 << 20).is_err());
        let (a, _b) = UnixStream::pair().unwrap();
        set_inheritable(a.as_fd(), true).unwrap();
        // SAFETY: F_GETFD query on an open fd.
        let flags = unsafe { libc::fcntl(a.as_raw_fd(), libc::F_GETFD) };
        assert_eq!(flags & libc::FD_CLOEXEC, 0);
        let raw = std::os::fd::IntoRawFd::into_raw_fd(OwnedFd::from(a));
        let owned = take_inherited_fd(raw).unwrap();
        // SAFETY: as above.
        let flags = unsafe { libc::fcntl(owned.as_raw_fd(), libc::F_GETFD) };
        assert_ne!(flags & libc::FD_CLOEXEC, 0);
    }

    #[test]
    fn blocked_signal_is_taken_by_sigwait() {
        // Only this thread blocks SIGUSR2; the signal is sent to this thread.
        block_signals(&[libc::SIGUSR2]).unwrap();
        // SAFETY: sends a blocked signal to the calling thread.
        unsafe { libc::pthread_kill(libc::pthread_self(), libc::SIGUSR2) };
        assert_eq!(wait_signal(&[libc::SIGUSR2]).unwrap(), libc::SIGUSR2);
    }
}
