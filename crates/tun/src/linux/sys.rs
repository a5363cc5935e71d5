//! The system calls the Linux TUN needs and tun-rs does not expose on a bare fd: TUN flag and
//! offload ioctls, interface MTU/index/flags ioctls on a control socket we keep (so they work
//! from any thread, even when the device lives in another network namespace than the caller),
//! an eventfd to wake blocked readers, `poll`, `read`/`write`, and a netlink link socket.
//!
//! Every `unsafe` block of the crate's Linux code lives here.

use std::ffi::CStr;
use std::io;
use std::mem;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};

fn cvt(r: libc::c_int) -> io::Result<libc::c_int> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

fn cvt_size(r: libc::ssize_t) -> io::Result<usize> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r as usize)
    }
}

/// An `ifreq` with `name` copied in (NUL-terminated); error if it does not fit.
fn ifreq_named(name: &str) -> io::Result<libc::ifreq> {
    // SAFETY: ifreq is plain old data (bytes and integers); all-zero is a valid value.
    let mut req: libc::ifreq = unsafe { mem::zeroed() };
    let bytes = name.as_bytes();
    if bytes.len() >= req.ifr_name.len() || bytes.contains(&0) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "bad interface name",
        ));
    }
    for (d, s) in req.ifr_name.iter_mut().zip(bytes) {
        *d = *s as libc::c_char;
    }
    Ok(req)
}

/// Takes the descriptor out of a tun-rs device.
pub(crate) fn into_owned_fd(dev: tun_rs::SyncDevice) -> OwnedFd {
    use std::os::fd::IntoRawFd;
    // SAFETY: into_raw_fd consumes the device and gives up its ownership of the descriptor.
    unsafe { OwnedFd::from_raw_fd(dev.into_raw_fd()) }
}

/// `TUNGETIFF`: the interface name and the TUN flags (IFF_TUN, IFF_NO_PI, IFF_VNET_HDR, ...).
pub(crate) fn tun_get_iff(fd: BorrowedFd<'_>) -> io::Result<(String, libc::c_int)> {
    // SAFETY: ifreq is plain old data; all-zero is a valid value.
    let mut req: libc::ifreq = unsafe { mem::zeroed() };
    // SAFETY: TUNGETIFF writes at most sizeof(ifreq) bytes into req, which lives for the call.
    cvt(unsafe { libc::ioctl(fd.as_raw_fd(), libc::TUNGETIFF as _, &mut req) })?;
    // SAFETY: the kernel NUL-terminates ifr_name (IFNAMSIZ bytes including the NUL).
    let name = unsafe { CStr::from_ptr(req.ifr_name.as_ptr()) };
    // SAFETY: TUNGETIFF fills ifru_flags, so reading that union member is initialized data.
    let flags = unsafe { req.ifr_ifru.ifru_flags };
    Ok((
        name.to_string_lossy().into_owned(),
        libc::c_int::from(flags) & 0xffff,
    ))
}

/// `TUNSETOFFLOAD` with `TUN_F_*` flags.
pub(crate) fn tun_set_offload(fd: BorrowedFd<'_>, flags: libc::c_uint) -> io::Result<()> {
    // SAFETY: TUNSETOFFLOAD takes its argument by value; no memory is passed.
    cvt(unsafe {
        libc::ioctl(
            fd.as_raw_fd(),
            libc::TUNSETOFFLOAD as _,
            flags as libc::c_ulong,
        )
    })?;
    Ok(())
}

/// Sets `O_NONBLOCK` (reads and writes wait in `poll`, where close can wake them).
pub(crate) fn set_nonblocking(fd: BorrowedFd<'_>) -> io::Result<()> {
    // SAFETY: F_GETFL/F_SETFL on a valid fd pass no memory.
    unsafe {
        let fl = cvt(libc::fcntl(fd.as_raw_fd(), libc::F_GETFL))?;
        cvt(libc::fcntl(
            fd.as_raw_fd(),
            libc::F_SETFL,
            fl | libc::O_NONBLOCK,
        ))?;
    }
    Ok(())
}

fn owned(fd: libc::c_int) -> io::Result<OwnedFd> {
    let fd = cvt(fd)?;
    // SAFETY: fd was just returned by the kernel and is owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// An `AF_INET` datagram socket for interface ioctls, bound to the caller's network namespace.
pub(crate) fn control_socket() -> io::Result<OwnedFd> {
    // SAFETY: socket(2) with constant arguments; the result is checked by owned().
    owned(unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) })
}

fn if_ioctl(ctl: BorrowedFd<'_>, req: libc::Ioctl, ifr: &mut libc::ifreq) -> io::Result<()> {
    // SAFETY: every request used here reads or writes one ifreq, which ifr points to.
    cvt(unsafe { libc::ioctl(ctl.as_raw_fd(), req as _, ifr as *mut libc::ifreq) })?;
    Ok(())
}

/// `SIOCGIFMTU`.
pub(crate) fn if_mtu(ctl: BorrowedFd<'_>, name: &str) -> io::Result<u32> {
    let mut req = ifreq_named(name)?;
    if_ioctl(ctl, libc::SIOCGIFMTU, &mut req)?;
    // SAFETY: SIOCGIFMTU filled ifru_mtu.
    let mtu = unsafe { req.ifr_ifru.ifru_mtu };
    u32::try_from(mtu).map_err(|_| io::Error::other("negative MTU"))
}

/// `SIOCSIFMTU`.
pub(crate) fn set_if_mtu(ctl: BorrowedFd<'_>, name: &str, mtu: u32) -> io::Result<()> {
    let mut req = ifreq_named(name)?;
    req.ifr_ifru.ifru_mtu = libc::c_int::try_from(mtu)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "MTU too large"))?;
    if_ioctl(ctl, libc::SIOCSIFMTU, &mut req)
}

/// `SIOCGIFINDEX`.
pub(crate) fn if_index(ctl: BorrowedFd<'_>, name: &str) -> io::Result<i32> {
    let mut req = ifreq_named(name)?;
    if_ioctl(ctl, libc::SIOCGIFINDEX, &mut req)?;
    // SAFETY: SIOCGIFINDEX filled ifru_ifindex.
    Ok(unsafe { req.ifr_ifru.ifru_ifindex })
}

/// `SIOCGIFFLAGS` (IFF_UP, IFF_RUNNING, ...).
pub(crate) fn if_flags(ctl: BorrowedFd<'_>, name: &str) -> io::Result<libc::c_int> {
    let mut req = ifreq_named(name)?;
    if_ioctl(ctl, libc::SIOCGIFFLAGS, &mut req)?;
    // SAFETY: SIOCGIFFLAGS filled ifru_flags.
    Ok(libc::c_int::from(unsafe { req.ifr_ifru.ifru_flags }) & 0xffff)
}

/// A non-blocking eventfd: once signalled it stays readable, so it wakes every poller.
pub(crate) fn eventfd() -> io::Result<OwnedFd> {
    // SAFETY: eventfd(2) with constant arguments; checked by owned().
    owned(unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) })
}

/// Makes `fd` (an eventfd) readable.
pub(crate) fn eventfd_signal(fd: BorrowedFd<'_>) -> io::Result<()> {
    let one: u64 = 1;
    // SAFETY: writes the 8 bytes of `one`, which outlives the call.
    let r = unsafe { libc::write(fd.as_raw_fd(), (&one as *const u64).cast(), 8) };
    match cvt_size(r) {
        Ok(_) => Ok(()),
        // The counter is saturated: it is readable already.
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(()),
        Err(e) => Err(e),
    }
}

/// `read(2)`.
pub(crate) fn read(fd: RawFd, buf: &mut [u8]) -> io::Result<usize> {
    // SAFETY: the kernel writes at most buf.len() bytes into buf.
    cvt_size(unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) })
}

/// `write(2)`.
pub(crate) fn write(fd: RawFd, buf: &[u8]) -> io::Result<usize> {
    // SAFETY: the kernel reads at most buf.len() bytes from buf.
    cvt_size(unsafe { libc::write(fd, buf.as_ptr().cast(), buf.len()) })
}

/// `writev(2)`: the pieces written as one frame. At most `IOV_MAX` (1024) pieces.
pub(crate) fn writev(fd: RawFd, pieces: &[io::IoSlice<'_>]) -> io::Result<usize> {
    let n = libc::c_int::try_from(pieces.len())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "too many pieces"))?;
    // SAFETY: IoSlice is ABI-compatible with iovec on Unix (std guarantees it); the kernel
    // reads `n` iovecs from the slice and at most each one's length from its buffer.
    cvt_size(unsafe { libc::writev(fd, pieces.as_ptr().cast(), n) })
}

/// A non-blocking `NETLINK_ROUTE` socket subscribed to link notifications.
pub(crate) fn netlink_link_socket() -> io::Result<OwnedFd> {
    // SAFETY: socket(2) with constant arguments; checked by owned().
    let fd = owned(unsafe {
        libc::socket(
            libc::AF_NETLINK,
            libc::SOCK_RAW | libc::SOCK_CLOEXEC | libc::SOCK_NONBLOCK,
            libc::NETLINK_ROUTE,
        )
    })?;
    // SAFETY: sockaddr_nl is plain old data; all-zero is valid.
    let mut sa: libc::sockaddr_nl = unsafe { mem::zeroed() };
    sa.nl_family = libc::AF_NETLINK as libc::sa_family_t;
    sa.nl_groups = libc::RTMGRP_LINK as u32;
    // SAFETY: sa is a valid sockaddr_nl and its size is passed.
    cvt(unsafe {
        libc::bind(
            fd.as_raw_fd(),
            (&sa as *const libc::sockaddr_nl).cast(),
            mem::size_of::<libc::sockaddr_nl>() as libc::socklen_t,
        )
    })?;
    Ok(fd)
}

/// Whether the process runs as root (tests that need CAP_NET_ADMIN skip otherwise).
#[cfg(test)]
pub(crate) fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// Moves the calling thread into the network namespace at `path` (`/run/netns/NAME`).
#[cfg(test)]
pub(crate) fn setns_net(path: &str) -> io::Result<()> {
    let f = std::fs::File::open(path)?;
    // SAFETY: setns on an open namespace fd; affects only the calling thread.
    cvt(unsafe { libc::setns(f.as_raw_fd(), libc::CLONE_NEWNET) })?;
    Ok(())
}
