//! The single-datagram calls of the darwin batch layer's `Kernel` seam, answered by this
//! host's kernel (Linux), so that the darwin bind's glue (non-blocking sockets, parking,
//! wake-up on close, the fallback from batched to single-datagram I/O) runs against real
//! sockets in `vpn-conn`'s tests. The batch calls (`recvmsg_x`, `sendmsg_x`) do not exist
//! here and fail with [`io::ErrorKind::Unsupported`], exactly as `vpn-darwinbatch` reports
//! them off Apple targets. Test support only (cargo feature `posix-kernel`).

use std::ffi::c_int;
use std::io;
use std::mem::size_of;
use std::net::SocketAddr;
use std::os::fd::{BorrowedFd, RawFd};

use vpn_darwinbatch::{Kernel, MsgHdrX};

use crate::sockaddr::from_storage;

/// This host's kernel behind the `Kernel` seam (single-datagram calls only).
pub struct PosixKernel;

fn unsupported() -> io::Error {
    io::Error::new(
        io::ErrorKind::Unsupported,
        "recvmsg_x/sendmsg_x exist only on Apple targets",
    )
}

fn cvt_len(r: isize) -> io::Result<usize> {
    usize::try_from(r).map_err(|_| io::Error::last_os_error())
}

impl Kernel for PosixKernel {
    unsafe fn recvmsg_x(&self, _: RawFd, _: &mut [MsgHdrX], _: c_int) -> io::Result<usize> {
        Err(unsupported())
    }

    unsafe fn sendmsg_x(&self, _: RawFd, _: &[MsgHdrX], _: c_int) -> io::Result<usize> {
        Err(unsupported())
    }

    fn read(&self, fd: RawFd, buf: &mut [u8]) -> io::Result<usize> {
        // SAFETY: `buf` is writable for its length for the duration of the call.
        cvt_len(unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) })
    }

    fn write(&self, fd: RawFd, buf: &[u8]) -> io::Result<usize> {
        // SAFETY: `buf` is readable for its length for the duration of the call.
        cvt_len(unsafe { libc::write(fd, buf.as_ptr().cast(), buf.len()) })
    }

    fn recv_from(&self, fd: RawFd, buf: &mut [u8]) -> io::Result<(usize, Option<SocketAddr>)> {
        // SAFETY: all-zero is a valid `sockaddr_storage` (AF_UNSPEC).
        let mut name: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
        let mut len = size_of::<libc::sockaddr_storage>() as libc::socklen_t;
        // SAFETY: `buf` is writable for its length; `name` is a local `sockaddr_storage` whose
        // size is in `len`; both live for the call.
        let r = unsafe {
            libc::recvfrom(
                fd,
                buf.as_mut_ptr().cast(),
                buf.len(),
                0,
                (&mut name as *mut libc::sockaddr_storage).cast(),
                &mut len,
            )
        };
        let n = cvt_len(r)?;
        Ok((n, from_storage(&name, len)))
    }

    fn send_to(&self, fd: RawFd, buf: &[u8], dst: &SocketAddr) -> io::Result<usize> {
        crate::mmsg::send_one(borrow(fd), dst, None, buf)
    }

    fn set_option(&self, fd: RawFd, level: c_int, name: c_int, value: c_int) -> io::Result<()> {
        crate::sockopt::set_int(borrow(fd), level, name, value)
    }
}

/// The seam passes raw descriptors; the `Kernel` contract is that they stay open for the call.
fn borrow<'a>(fd: RawFd) -> BorrowedFd<'a> {
    // SAFETY: callers of `Kernel` pass the descriptor of a live socket they hold for the whole
    // call, and the borrow does not outlive that call (it is used only inside it).
    unsafe { BorrowedFd::borrow_raw(fd) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::UdpSocket;
    use std::os::fd::AsRawFd;

    #[test]
    fn single_datagram_calls_reach_real_sockets_and_batches_are_unsupported() {
        let a = UdpSocket::bind("127.0.0.1:0").unwrap();
        let b = UdpSocket::bind("127.0.0.1:0").unwrap();
        let k = PosixKernel;
        let to = b.local_addr().unwrap();
        assert_eq!(k.send_to(a.as_raw_fd(), b"hello", &to).unwrap(), 5);
        let mut buf = [0u8; 16];
        let (n, from) = k.recv_from(b.as_raw_fd(), &mut buf).unwrap();
        assert_eq!(
            (&buf[..n], from),
            (&b"hello"[..], Some(a.local_addr().unwrap()))
        );
        b.connect(a.local_addr().unwrap()).unwrap();
        assert_eq!(k.write(b.as_raw_fd(), b"back").unwrap(), 4);
        assert_eq!(k.read(a.as_raw_fd(), &mut buf).unwrap(), 4);
        k.set_option(a.as_raw_fd(), libc::SOL_SOCKET, libc::SO_REUSEADDR, 1)
            .unwrap();
        // SAFETY: no header is passed, so nothing is read or written through pointers.
        let e = unsafe { k.sendmsg_x(a.as_raw_fd(), &[], 0) }.unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::Unsupported);
    }
}
