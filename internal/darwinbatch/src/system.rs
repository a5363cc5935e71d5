//! The system's kernel (libSystem) behind [`Kernel`], and the self-tests' loopback sockets.

use std::ffi::c_int;
use std::io;
use std::net::SocketAddr;
use std::os::fd::RawFd;

use crate::sockaddr::{self, NameBuf};
use crate::{Kernel, MsgHdrX};

pub(crate) struct System;

fn cvt_len(r: isize) -> io::Result<usize> {
    usize::try_from(r).map_err(|_| io::Error::last_os_error())
}

impl Kernel for System {
    unsafe fn recvmsg_x(&self, fd: RawFd, msgs: &mut [MsgHdrX], flags: c_int) -> io::Result<usize> {
        #[cfg(feature = "spi")]
        {
            // SAFETY: forwarded from this function's contract.
            unsafe { crate::spi::recv(fd, msgs, flags) }
        }
        #[cfg(not(feature = "spi"))]
        {
            let _ = (fd, msgs, flags);
            Err(crate::unsupported())
        }
    }

    unsafe fn sendmsg_x(&self, fd: RawFd, msgs: &[MsgHdrX], flags: c_int) -> io::Result<usize> {
        #[cfg(feature = "spi")]
        {
            // SAFETY: forwarded from this function's contract.
            unsafe { crate::spi::send(fd, msgs, flags) }
        }
        #[cfg(not(feature = "spi"))]
        {
            let _ = (fd, msgs, flags);
            Err(crate::unsupported())
        }
    }

    fn read(&self, fd: RawFd, buf: &mut [u8]) -> io::Result<usize> {
        // SAFETY: `buf` is valid for writes of `buf.len()` bytes for the call.
        cvt_len(unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) })
    }

    fn write(&self, fd: RawFd, buf: &[u8]) -> io::Result<usize> {
        // SAFETY: `buf` is valid for reads of `buf.len()` bytes for the call.
        cvt_len(unsafe { libc::write(fd, buf.as_ptr().cast(), buf.len()) })
    }

    fn recv_from(&self, fd: RawFd, buf: &mut [u8]) -> io::Result<(usize, Option<SocketAddr>)> {
        let mut name = NameBuf::default();
        let mut len = name.0.len() as libc::socklen_t;
        // SAFETY: `buf` is writable for its length; `name` is a 128-byte, 8-aligned
        // sockaddr_storage whose size is in `len`; all live for the call.
        let r = unsafe {
            libc::recvfrom(
                fd,
                buf.as_mut_ptr().cast(),
                buf.len(),
                0,
                name.0.as_mut_ptr().cast(),
                &mut len,
            )
        };
        let n = cvt_len(r)?;
        Ok((n, sockaddr::decode(&name.0, len as usize)))
    }

    fn send_to(&self, fd: RawFd, buf: &[u8], dst: &SocketAddr) -> io::Result<usize> {
        let mut name = NameBuf::default();
        let len = sockaddr::encode(dst, &mut name);
        // SAFETY: `buf` is readable for its length; `name` holds a darwin sockaddr of `len`
        // bytes; both live for the call.
        let r = unsafe {
            libc::sendto(
                fd,
                buf.as_ptr().cast(),
                buf.len(),
                0,
                name.0.as_ptr().cast(),
                len as libc::socklen_t,
            )
        };
        cvt_len(r)
    }

    fn set_option(&self, fd: RawFd, level: c_int, name: c_int, value: c_int) -> io::Result<()> {
        // SAFETY: the option value is one `int` on the stack, its size passed alongside.
        let r = unsafe {
            libc::setsockopt(
                fd,
                level,
                name,
                (&value as *const c_int).cast(),
                std::mem::size_of::<c_int>() as libc::socklen_t,
            )
        };
        if r == 0 {
            Ok(())
        } else {
            Err(io::Error::last_os_error())
        }
    }
}

#[cfg(feature = "spi")]
mod loopback {
    use std::net::UdpSocket;
    use std::os::fd::AsRawFd;
    use std::time::Duration;

    /// A bound loopback socket that gives up waiting after a second (the self-test must not
    /// hang a process whose kernel never delivers).
    fn socket() -> Result<UdpSocket, String> {
        let s = UdpSocket::bind("127.0.0.1:0").map_err(|e| format!("bind: {e}"))?;
        s.set_read_timeout(Some(Duration::from_secs(1)))
            .map_err(|e| format!("SO_RCVTIMEO: {e}"))?;
        Ok(s)
    }

    fn addr(s: &UdpSocket) -> Result<std::net::SocketAddr, String> {
        s.local_addr().map_err(|e| format!("getsockname: {e}"))
    }

    pub(crate) fn connected() -> Result<(), String> {
        let (a, b) = (socket()?, socket()?);
        a.connect(addr(&b)?).map_err(|e| format!("connect: {e}"))?;
        b.connect(addr(&a)?).map_err(|e| format!("connect: {e}"))?;
        crate::check_connected(crate::system(), a.as_raw_fd(), b.as_raw_fd())
    }

    pub(crate) fn unconnected() -> Result<(), String> {
        let (s, r0, r1) = (socket()?, socket()?, socket()?);
        crate::check_unconnected(
            crate::system(),
            (s.as_raw_fd(), addr(&s)?),
            [(r0.as_raw_fd(), addr(&r0)?), (r1.as_raw_fd(), addr(&r1)?)],
        )
    }
}

#[cfg(feature = "spi")]
pub(crate) use loopback::{connected as self_test_connected, unconnected as self_test_unconnected};
