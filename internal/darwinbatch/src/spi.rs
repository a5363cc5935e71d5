//! The only place that names libSystem's private batch calls. Compiled only with the `spi`
//! feature on Apple targets: without it the binary does not reference the symbols at all.

use std::ffi::{c_int, c_uint};
use std::io;
use std::os::fd::RawFd;

use crate::MsgHdrX;

extern "C" {
    // xnu bsd/sys/socket.h (PRIVATE):
    // ssize_t recvmsg_x(int s, const struct msghdr_x *msgp, u_int cnt, int flags);
    // ssize_t sendmsg_x(int s, const struct msghdr_x *msgp, u_int cnt, int flags);
    fn recvmsg_x(s: c_int, msgp: *mut MsgHdrX, cnt: c_uint, flags: c_int) -> isize;
    fn sendmsg_x(s: c_int, msgp: *const MsgHdrX, cnt: c_uint, flags: c_int) -> isize;
}

fn count(r: isize) -> io::Result<usize> {
    usize::try_from(r).map_err(|_| io::Error::last_os_error())
}

fn len(msgs: usize) -> io::Result<c_uint> {
    c_uint::try_from(msgs).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))
}

/// `recvmsg_x` on `msgs`.
///
/// # Safety
/// As [`crate::Kernel::recvmsg_x`].
pub(crate) unsafe fn recv(fd: RawFd, msgs: &mut [MsgHdrX], flags: c_int) -> io::Result<usize> {
    let cnt = len(msgs.len())?;
    // SAFETY: `msgs` is a valid array of `cnt` headers; the caller guarantees the memory they
    // point to is writable for the stated lengths during the call.
    count(unsafe { recvmsg_x(fd, msgs.as_mut_ptr(), cnt, flags) })
}

/// `sendmsg_x` on `msgs`.
///
/// # Safety
/// As [`crate::Kernel::sendmsg_x`].
pub(crate) unsafe fn send(fd: RawFd, msgs: &[MsgHdrX], flags: c_int) -> io::Result<usize> {
    let cnt = len(msgs.len())?;
    // SAFETY: `msgs` is a valid array of `cnt` headers; the caller guarantees the memory they
    // point to is readable for the stated lengths during the call.
    count(unsafe { sendmsg_x(fd, msgs.as_ptr(), cnt, flags) })
}
