//! Interfaces: MTU and flags ioctls on a datagram socket, the interface index, and the
//! routing socket that reports interface changes (`RTM_IFINFO`).

use std::ffi::CString;
use std::io;
use std::mem::{offset_of, size_of};
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

use super::cvt;

// <sys/sockio.h>: _IOWR('i', 51, struct ifreq), _IOW('i', 52, struct ifreq),
// _IOWR('i', 17, struct ifreq); the size of ifreq (32) is encoded in the request.
const SIOCGIFMTU: libc::c_ulong = 0xc020_6933;
const SIOCSIFMTU: libc::c_ulong = 0x8020_6934;
const SIOCGIFFLAGS: libc::c_ulong = 0xc020_6911;
const _: () = assert!(size_of::<libc::ifreq>() == 32);

/// `struct if_msghdr` field offsets a portable parser of routing messages relies on
/// (`ifm_msglen`, `ifm_version`, `ifm_type`, `ifm_flags`, `ifm_index`, `ifm_data.ifi_mtu`).
pub const IF_MSGHDR_OFFSETS: [usize; 6] = [
    offset_of!(libc::if_msghdr, ifm_msglen),
    offset_of!(libc::if_msghdr, ifm_version),
    offset_of!(libc::if_msghdr, ifm_type),
    offset_of!(libc::if_msghdr, ifm_flags),
    offset_of!(libc::if_msghdr, ifm_index),
    offset_of!(libc::if_msghdr, ifm_data) + offset_of!(libc::if_data, ifi_mtu),
];

/// An `ifreq` for interface `name` (error if the name does not fit or holds a NUL).
fn ifreq(name: &str) -> io::Result<libc::ifreq> {
    // SAFETY: ifreq is plain old data (bytes, integers, a union of them); all-zero is valid.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    let b = name.as_bytes();
    if b.is_empty() || b.len() >= req.ifr_name.len() || b.contains(&0) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "bad interface name",
        ));
    }
    for (d, s) in req.ifr_name.iter_mut().zip(b) {
        *d = *s as libc::c_char;
    }
    Ok(req)
}

/// A datagram socket for interface ioctls.
pub fn ioctl_socket() -> io::Result<OwnedFd> {
    // SAFETY: socket(2) with constant arguments; a new descriptor on success.
    let fd = cvt(unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM, 0) })?;
    // SAFETY: `fd` is new and owned by nobody else.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: F_SETFD with an int argument.
    cvt(unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_SETFD, libc::FD_CLOEXEC) })?;
    Ok(fd)
}

/// `SIOCGIFMTU`.
pub fn if_mtu(ctl: BorrowedFd<'_>, name: &str) -> io::Result<u32> {
    let mut req = ifreq(name)?;
    // SAFETY: the ioctl reads the name from and writes the MTU into `req`, 32 bytes that live
    // for the call (the size is encoded in the request).
    cvt(unsafe { libc::ioctl(ctl.as_raw_fd(), SIOCGIFMTU, &mut req) })?;
    // SAFETY: SIOCGIFMTU filled the union's `ifru_mtu` member (an int).
    let mtu = unsafe { req.ifr_ifru.ifru_mtu };
    u32::try_from(mtu).map_err(|_| io::Error::other("negative MTU"))
}

/// `SIOCSIFMTU`.
pub fn set_if_mtu(ctl: BorrowedFd<'_>, name: &str, mtu: u32) -> io::Result<()> {
    let mut req = ifreq(name)?;
    req.ifr_ifru.ifru_mtu = libc::c_int::try_from(mtu)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "MTU out of range"))?;
    // SAFETY: the ioctl reads the name and MTU from `req`, which lives for the call.
    cvt(unsafe { libc::ioctl(ctl.as_raw_fd(), SIOCSIFMTU, &mut req) }).map(drop)
}

/// `SIOCGIFFLAGS`: the interface flags (`IFF_UP`, `IFF_RUNNING`, ...).
pub fn if_flags(ctl: BorrowedFd<'_>, name: &str) -> io::Result<u32> {
    let mut req = ifreq(name)?;
    // SAFETY: as for if_mtu; the flags go into `ifru_flags`.
    cvt(unsafe { libc::ioctl(ctl.as_raw_fd(), SIOCGIFFLAGS, &mut req) })?;
    // SAFETY: SIOCGIFFLAGS filled `ifru_flags` (a short).
    Ok(u32::from(unsafe { req.ifr_ifru.ifru_flags } as u16))
}

/// `if_nametoindex`.
pub fn if_index(name: &str) -> io::Result<u32> {
    let c = CString::new(name)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "NUL in name"))?;
    // SAFETY: `c` is a NUL-terminated string that lives for the call.
    match unsafe { libc::if_nametoindex(c.as_ptr()) } {
        0 => Err(io::Error::last_os_error()),
        i => Ok(i),
    }
}

/// A routing socket (`PF_ROUTE`, all families), non-blocking: interface and address changes
/// arrive as routing messages.
pub fn route_socket() -> io::Result<OwnedFd> {
    // SAFETY: socket(2) with constant arguments; a new descriptor on success.
    let fd = cvt(unsafe { libc::socket(libc::PF_ROUTE, libc::SOCK_RAW, libc::AF_UNSPEC) })?;
    // SAFETY: `fd` is new and owned by nobody else.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: F_SETFD with an int argument.
    cvt(unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_SETFD, libc::FD_CLOEXEC) })?;
    super::fd::set_nonblocking(std::os::fd::AsFd::as_fd(&fd))?;
    Ok(fd)
}
