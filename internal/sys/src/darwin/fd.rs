//! Descriptors: non-blocking mode, a wake pipe (for `crate::poll::poll_or_wake`), `read`.

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};

use super::cvt;

/// Sets `O_NONBLOCK` on `fd`.
pub fn set_nonblocking(fd: BorrowedFd<'_>) -> io::Result<()> {
    // SAFETY: F_GETFL takes no argument and only reads the descriptor's flags.
    let flags = cvt(unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GETFL) })?;
    if flags & libc::O_NONBLOCK == 0 {
        // SAFETY: F_SETFL with an int argument; changes only the descriptor's flags.
        cvt(unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_SETFL, flags | libc::O_NONBLOCK) })?;
    }
    Ok(())
}

/// Sets close-on-exec on `fd`.
fn set_cloexec(fd: BorrowedFd<'_>) -> io::Result<()> {
    // SAFETY: F_SETFD with an int argument; changes only the descriptor's flags.
    cvt(unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_SETFD, libc::FD_CLOEXEC) }).map(drop)
}

/// A pipe, both ends non-blocking and close-on-exec: (read end, write end).
pub fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0 as libc::c_int; 2];
    // SAFETY: `fds` has room for the two descriptors pipe(2) writes.
    cvt(unsafe { libc::pipe(fds.as_mut_ptr()) })?;
    // SAFETY: pipe succeeded: both descriptors are new and owned by nobody else.
    let (r, w) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    for fd in [&r, &w] {
        set_nonblocking(fd.as_fd())?;
        set_cloexec(fd.as_fd())?;
    }
    Ok((r, w))
}

/// Makes the pipe's read end readable for good (one byte; a full pipe is readable already).
pub fn signal(write_end: BorrowedFd<'_>) -> io::Result<()> {
    let b = [1u8];
    // SAFETY: writes one byte from a live buffer.
    let r = unsafe { libc::write(write_end.as_raw_fd(), b.as_ptr().cast(), 1) };
    if r < 0 {
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::WouldBlock {
            return Err(e);
        }
    }
    Ok(())
}

/// `read(2)`.
pub fn read(fd: RawFd, buf: &mut [u8]) -> io::Result<usize> {
    // SAFETY: the kernel writes at most buf.len() bytes into buf.
    let r = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) };
    usize::try_from(r).map_err(|_| io::Error::last_os_error())
}
