//! The Linux TUN's system calls: opening `/dev/net/tun` (`TUNSETIFF`), reading its flags back
//! (`TUNGETIFF`), the offload mask (`TUNSETOFFLOAD`), non-blocking mode, `read`/`write`/`writev`
//! of frames, the interface ioctls (MTU, index, flags) on a control socket, and the netlink
//! socket that reports link changes.
//!
//! The interface ioctls go through a [`ControlSocket`] the caller creates and keeps: it belongs
//! to the network namespace it was created in, so they keep working from any thread even when
//! the device's namespace is not the caller's.

use std::ffi::CStr;
use std::io;
use std::mem;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

/// The TUN flags `TUNSETIFF` takes and `TUNGETIFF` reports.
pub use libc::{IFF_NO_PI, IFF_TAP, IFF_TUN, IFF_VNET_HDR};
/// Interface flags ([`ControlSocket::flags`]).
pub use libc::{IFF_RUNNING, IFF_UP};
/// `TUNSETOFFLOAD` flags.
pub use libc::{TUN_F_CSUM, TUN_F_TSO4, TUN_F_TSO6, TUN_F_USO4, TUN_F_USO6};

fn cvt(r: libc::c_int) -> io::Result<libc::c_int> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

fn cvt_size(r: libc::ssize_t) -> io::Result<usize> {
    usize::try_from(r).map_err(|_| io::Error::last_os_error())
}

fn owned(fd: libc::c_int) -> io::Result<OwnedFd> {
    let fd = cvt(fd)?;
    // SAFETY: fd was just returned by the kernel and is owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
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

/// Opens `/dev/net/tun` and attaches it to the layer-3 interface `name` (creating it if it does
/// not exist; empty: the kernel picks `tunN`), without packet information, and with a virtio-net
/// header in front of every frame when `vnet_hdr` is set. The descriptor is blocking and
/// close-on-exec.
pub fn open(name: &str, vnet_hdr: bool) -> io::Result<OwnedFd> {
    let mut req = ifreq_named(name)?;
    let flags = IFF_TUN | IFF_NO_PI | if vnet_hdr { IFF_VNET_HDR } else { 0 };
    req.ifr_ifru.ifru_flags = flags as libc::c_short;
    // std opens with O_CLOEXEC.
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/net/tun")?;
    let fd = OwnedFd::from(file);
    // SAFETY: TUNSETIFF reads and writes one ifreq, which req is and which outlives the call.
    cvt(unsafe { libc::ioctl(fd.as_raw_fd(), libc::TUNSETIFF as _, &mut req) })?;
    Ok(fd)
}

/// `TUNGETIFF`: the interface name and the TUN flags ([`IFF_TUN`], [`IFF_VNET_HDR`], ...).
pub fn get_iff(fd: BorrowedFd<'_>) -> io::Result<(String, libc::c_int)> {
    // SAFETY: ifreq is plain old data; all-zero is a valid value.
    let mut req: libc::ifreq = unsafe { mem::zeroed() };
    // SAFETY: TUNGETIFF writes at most sizeof(ifreq) bytes into req, which lives for the call.
    cvt(unsafe { libc::ioctl(fd.as_raw_fd(), libc::TUNGETIFF as _, &mut req) })?;
    // The kernel NUL-terminates ifr_name; a zeroed last byte guards against one that did not.
    req.ifr_name[req.ifr_name.len() - 1] = 0;
    // SAFETY: ifr_name is NUL-terminated (just made sure of it) and lives while `name` does.
    let name = unsafe { CStr::from_ptr(req.ifr_name.as_ptr()) };
    // SAFETY: TUNGETIFF fills ifru_flags, so reading that union member is initialized data.
    let flags = unsafe { req.ifr_ifru.ifru_flags };
    Ok((
        name.to_string_lossy().into_owned(),
        libc::c_int::from(flags) & 0xffff,
    ))
}

/// `TUNSETOFFLOAD` with `TUN_F_*` flags (0 clears them). The mask is per device, not per fd.
pub fn set_offload(fd: BorrowedFd<'_>, flags: libc::c_uint) -> io::Result<()> {
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

/// Sets `O_NONBLOCK` (reads and writes then wait in [`crate::poll::poll_or_wake`], where a
/// close can wake them).
pub fn set_nonblocking(fd: BorrowedFd<'_>) -> io::Result<()> {
    // SAFETY: F_GETFL passes no memory.
    let fl = cvt(unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GETFL) })?;
    // SAFETY: F_SETFL with an int argument passes no memory.
    cvt(unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_SETFL, fl | libc::O_NONBLOCK) })?;
    Ok(())
}

/// `read(2)`: one frame (TUN) or one datagram (netlink).
#[inline]
pub fn read(fd: BorrowedFd<'_>, buf: &mut [u8]) -> io::Result<usize> {
    // SAFETY: the kernel writes at most buf.len() bytes into buf.
    cvt_size(unsafe { libc::read(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) })
}

/// `readv(2)`: one frame into the pieces in turn. At most `IOV_MAX` (1024) pieces. A TUN frame
/// longer than the pieces together is cut to their length (and the rest lost), as with `read`.
#[inline]
pub fn readv(fd: BorrowedFd<'_>, pieces: &mut [io::IoSliceMut<'_>]) -> io::Result<usize> {
    let n = libc::c_int::try_from(pieces.len())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "too many pieces"))?;
    // SAFETY: IoSliceMut is ABI-compatible with iovec on Unix (std guarantees it); the kernel
    // reads `n` iovecs from the slice and writes at most each one's length into its buffer.
    cvt_size(unsafe { libc::readv(fd.as_raw_fd(), pieces.as_mut_ptr().cast(), n) })
}

/// `write(2)`: one frame.
#[inline]
pub fn write(fd: BorrowedFd<'_>, buf: &[u8]) -> io::Result<usize> {
    // SAFETY: the kernel reads at most buf.len() bytes from buf.
    cvt_size(unsafe { libc::write(fd.as_raw_fd(), buf.as_ptr().cast(), buf.len()) })
}

/// `writev(2)`: the pieces written as one frame. At most `IOV_MAX` (1024) pieces.
#[inline]
pub fn writev(fd: BorrowedFd<'_>, pieces: &[io::IoSlice<'_>]) -> io::Result<usize> {
    let n = libc::c_int::try_from(pieces.len())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "too many pieces"))?;
    // SAFETY: IoSlice is ABI-compatible with iovec on Unix (std guarantees it); the kernel
    // reads `n` iovecs from the slice and at most each one's length from its buffer.
    cvt_size(unsafe { libc::writev(fd.as_raw_fd(), pieces.as_ptr().cast(), n) })
}

/// An `AF_INET` datagram socket for interface ioctls, bound to the network namespace of the
/// thread that created it.
#[derive(Debug)]
pub struct ControlSocket(OwnedFd);

impl ControlSocket {
    /// A control socket in the calling thread's network namespace.
    pub fn new() -> io::Result<Self> {
        // SAFETY: socket(2) with constant arguments; the result is checked by owned().
        owned(unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) })
            .map(Self)
    }

    /// One interface ioctl: `req` reads or writes the `ifreq` for `name`.
    fn ioctl(
        &self,
        name: &str,
        req: libc::c_ulong,
        set: Option<libc::c_int>,
    ) -> io::Result<libc::ifreq> {
        let mut ifr = ifreq_named(name)?;
        if let Some(v) = set {
            ifr.ifr_ifru.ifru_mtu = v;
        }
        // SAFETY: every request used here reads or writes one ifreq, which ifr is and which
        // outlives the call.
        cvt(unsafe { libc::ioctl(self.0.as_raw_fd(), req as _, &mut ifr as *mut libc::ifreq) })?;
        Ok(ifr)
    }

    /// `SIOCGIFMTU`.
    pub fn mtu(&self, name: &str) -> io::Result<u32> {
        let ifr = self.ioctl(name, libc::SIOCGIFMTU, None)?;
        // SAFETY: SIOCGIFMTU filled ifru_mtu (an int: every bit pattern is valid).
        let mtu = unsafe { ifr.ifr_ifru.ifru_mtu };
        u32::try_from(mtu).map_err(|_| io::Error::other("negative MTU"))
    }

    /// `SIOCSIFMTU`.
    pub fn set_mtu(&self, name: &str, mtu: u32) -> io::Result<()> {
        let mtu = libc::c_int::try_from(mtu)
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "MTU too large"))?;
        self.ioctl(name, libc::SIOCSIFMTU, Some(mtu)).map(drop)
    }

    /// `SIOCGIFINDEX`.
    pub fn index(&self, name: &str) -> io::Result<i32> {
        let ifr = self.ioctl(name, libc::SIOCGIFINDEX, None)?;
        // SAFETY: SIOCGIFINDEX filled ifru_ifindex (an int: every bit pattern is valid).
        Ok(unsafe { ifr.ifr_ifru.ifru_ifindex })
    }

    /// `SIOCGIFFLAGS` ([`IFF_UP`], [`IFF_RUNNING`], ...).
    pub fn flags(&self, name: &str) -> io::Result<libc::c_int> {
        let ifr = self.ioctl(name, libc::SIOCGIFFLAGS, None)?;
        // SAFETY: SIOCGIFFLAGS filled ifru_flags (a short: every bit pattern is valid).
        Ok(libc::c_int::from(unsafe { ifr.ifr_ifru.ifru_flags }) & 0xffff)
    }
}

impl AsFd for ControlSocket {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.0.as_fd()
    }
}

/// A non-blocking `NETLINK_ROUTE` socket subscribed to link notifications (`RTMGRP_LINK`); read
/// it with [`read`].
pub fn netlink_link_socket() -> io::Result<OwnedFd> {
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
    sa.nl_groups = crate::abi::RTMGRP_LINK as u32;
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

/// Moves the calling thread into the network namespace at `path` (e.g. `/run/netns/NAME`).
/// Other threads stay where they are.
pub fn enter_netns(path: &str) -> io::Result<()> {
    let f = std::fs::File::open(path)?;
    // SAFETY: setns on an open namespace fd passes no memory; it affects only this thread.
    cvt(unsafe { libc::setns(f.as_raw_fd(), libc::CLONE_NEWNET) })?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interface_names_that_do_not_fit_an_ifreq_are_refused() {
        assert!(ifreq_named("tun0").is_ok());
        assert!(ifreq_named("").is_ok());
        let long = "x".repeat(libc::IFNAMSIZ);
        assert_eq!(
            ifreq_named(&long).unwrap_err().kind(),
            io::ErrorKind::InvalidInput
        );
        assert_eq!(
            ifreq_named("a\0b").unwrap_err().kind(),
            io::ErrorKind::InvalidInput
        );
    }

    #[test]
    fn the_loopback_interface_answers_the_control_socket() {
        let ctl = ControlSocket::new().unwrap();
        assert!(ctl.index("lo").unwrap() > 0);
        assert!(ctl.mtu("lo").unwrap() > 0);
        assert_ne!(ctl.flags("lo").unwrap() & IFF_UP, 0);
        assert!(ctl.mtu("no-such-if0").is_err());
    }

    #[test]
    fn tun_flags_are_refused_on_a_descriptor_that_is_no_tun() {
        let (a, _b) = std::os::unix::net::UnixStream::pair().unwrap();
        assert!(get_iff(a.as_fd()).is_err());
        assert!(set_offload(a.as_fd(), 0).is_err());
    }

    #[test]
    fn an_opened_tun_reports_its_name_and_flags() {
        if !crate::daemon::is_root() {
            eprintln!("skipped: needs CAP_NET_ADMIN");
            return;
        }
        // Not persistent: the interface goes away with the fd.
        let prefix = std::env::var("IF_PREFIX").unwrap_or_else(|_| "vpn".into());
        let want = format!("{prefix}t{}", std::process::id() % 100_000);
        let fd = open(&want, true).unwrap();
        let (name, flags) = get_iff(fd.as_fd()).unwrap();
        assert_eq!(name, want);
        assert_ne!(flags & IFF_TUN, 0);
        assert_ne!(flags & IFF_VNET_HDR, 0);
        assert_eq!(flags & IFF_NO_PI, IFF_NO_PI);
        set_offload(fd.as_fd(), TUN_F_CSUM | TUN_F_TSO4 | TUN_F_TSO6).unwrap();
        set_nonblocking(fd.as_fd()).unwrap();
        let mut buf = [0u8; 64];
        // Down, so nothing is queued: a non-blocking read says so.
        assert_eq!(
            read(fd.as_fd(), &mut buf).unwrap_err().kind(),
            io::ErrorKind::WouldBlock
        );
    }
}
