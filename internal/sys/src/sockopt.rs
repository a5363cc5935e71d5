//! Integer socket options the standard library and `socket2` do not cover (UDP GSO/GRO,
//! forced buffer sizes, packet info), and the kernel version that decides whether UDP GRO may
//! be enabled.

use std::io;
use std::mem::size_of;
use std::os::fd::{AsRawFd, BorrowedFd};

use libc::c_int;

pub use crate::cmsg::{UDP_GRO, UDP_SEGMENT};

/// `SO_MARK` (asm-generic/socket.h).
pub const SO_MARK: c_int = 36;
/// `SO_SNDBUFFORCE`: like `SO_SNDBUF` but above `wmem_max`; needs `CAP_NET_ADMIN`.
pub const SO_SNDBUFFORCE: c_int = 32;
/// `SO_RCVBUFFORCE`: like `SO_RCVBUF` but above `rmem_max`; needs `CAP_NET_ADMIN`.
pub const SO_RCVBUFFORCE: c_int = 33;

/// `setsockopt(fd, level, name, &value, sizeof(int))`.
pub fn set_int(fd: BorrowedFd<'_>, level: c_int, name: c_int, value: c_int) -> io::Result<()> {
    // SAFETY: `fd` is a live descriptor for the borrow's duration; the option value points to
    // a local `c_int` whose size is passed as the length; the kernel only reads it.
    let r = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            level,
            name,
            (&value as *const c_int).cast(),
            size_of::<c_int>() as libc::socklen_t,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// `getsockopt(fd, level, name)` for an option of at most `int` size (a shorter answer, such
/// as `UDP_SEGMENT`'s, is zero-extended).
pub fn get_int(fd: BorrowedFd<'_>, level: c_int, name: c_int) -> io::Result<c_int> {
    let mut value: c_int = 0;
    let mut len = size_of::<c_int>() as libc::socklen_t;
    // SAFETY: `fd` is live; `value` and `len` are locals the kernel writes at most
    // `len` (= sizeof(int)) bytes into.
    let r = unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            level,
            name,
            (&mut value as *mut c_int).cast(),
            &mut len,
        )
    };
    if r == 0 {
        Ok(value)
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Parses `major.minor` from a kernel release string (`6.1.0-18-amd64`, `5.12`).
pub fn parse_kernel_release(release: &str) -> Option<(u32, u32)> {
    let mut parts = release.split(|c: char| !c.is_ascii_digit());
    let major = parts.next()?.parse().ok()?;
    let minor = parts.next()?.parse().ok()?;
    Some((major, minor))
}

/// The running kernel's `(major, minor)` from `uname(2)`.
pub fn kernel_version() -> Option<(u32, u32)> {
    // SAFETY: all-zero is a valid `utsname` (arrays of c_char).
    let mut uts: libc::utsname = unsafe { std::mem::zeroed() };
    // SAFETY: `uts` is a valid, writable `utsname` for the kernel to fill.
    if unsafe { libc::uname(&mut uts) } != 0 {
        return None;
    }
    let bytes: Vec<u8> = uts
        .release
        .iter()
        .take_while(|&&c| c != 0)
        // c_char is i8 or u8 by architecture; its byte either way.
        .flat_map(|&c| c.to_ne_bytes())
        .collect();
    parse_kernel_release(std::str::from_utf8(&bytes).ok()?)
}

/// Whether the kernel is at least `major.minor` (false when unknown).
pub fn kernel_at_least(major: u32, minor: u32) -> bool {
    kernel_version().is_some_and(|v| v >= (major, minor))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::UdpSocket;
    use std::os::fd::AsFd;

    #[test]
    fn int_options_round_trip() {
        let s = UdpSocket::bind("127.0.0.1:0").unwrap();
        set_int(s.as_fd(), libc::IPPROTO_IP, libc::IP_PKTINFO, 1).unwrap();
        assert_eq!(
            get_int(s.as_fd(), libc::IPPROTO_IP, libc::IP_PKTINFO).unwrap(),
            1
        );
        set_int(s.as_fd(), libc::IPPROTO_IP, libc::IP_PKTINFO, 0).unwrap();
        assert_eq!(
            get_int(s.as_fd(), libc::IPPROTO_IP, libc::IP_PKTINFO).unwrap(),
            0
        );
        let e = set_int(s.as_fd(), libc::SOL_SOCKET, 0x7fff, 1).unwrap_err();
        assert!(e.raw_os_error().is_some());
    }

    #[test]
    fn udp_offload_options_answer_on_modern_kernels() {
        if !kernel_at_least(5, 12) {
            println!("skipped: kernel older than 5.12");
            return;
        }
        let s = UdpSocket::bind("127.0.0.1:0").unwrap();
        assert_eq!(get_int(s.as_fd(), libc::SOL_UDP, UDP_SEGMENT).unwrap(), 0);
        set_int(s.as_fd(), libc::SOL_UDP, UDP_GRO, 1).unwrap();
        assert_eq!(get_int(s.as_fd(), libc::SOL_UDP, UDP_GRO).unwrap(), 1);
    }

    #[test]
    fn kernel_release_parsing() {
        assert_eq!(parse_kernel_release("6.1.0-18-amd64"), Some((6, 1)));
        assert_eq!(parse_kernel_release("5.12"), Some((5, 12)));
        assert_eq!(parse_kernel_release("4.19.0+"), Some((4, 19)));
        assert_eq!(parse_kernel_release("6"), None);
        assert_eq!(parse_kernel_release("x.y"), None);
        assert_eq!(parse_kernel_release(""), None);
        assert!(kernel_version().is_some());
        assert!((5, 12) < (6, 0) && (5, 11) < (5, 12));
    }
}
