//! The utun kernel control: creating an interface, naming it, and its socket options. (On iOS
//! the sandbox refuses an app the control socket: [`open_utun`] fails there; the network
//! extension's utun comes from the system and [`utun_ifname`] names it.)

use std::io;
use std::mem::size_of;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

use super::cvt;
use super::kctl::{
    ctl_info, sockaddr_ctl, AF_SYS_CONTROL, CTLIOCGINFO, MAX_KCTL_NAME, SYSPROTO_CONTROL,
};

/// The kernel control that creates utun interfaces.
const UTUN_CONTROL_NAME: &[u8] = b"com.apple.net.utun_control";
/// `UTUN_OPT_IFNAME`: the interface name of a utun socket.
const UTUN_OPT_IFNAME: libc::c_int = 2;

/// `sizeof(struct sockaddr_ctl)`.
const SOCKADDR_CTL_LEN: usize = size_of::<sockaddr_ctl>();
const _: () = assert!(SOCKADDR_CTL_LEN == 32);

/// A kernel-control socket (`AF_SYSTEM`, `SYSPROTO_CONTROL`), close-on-exec.
fn control_socket() -> io::Result<OwnedFd> {
    // SAFETY: socket(2) with constant arguments; a new descriptor on success.
    let fd = cvt(unsafe { libc::socket(libc::AF_SYSTEM, libc::SOCK_DGRAM, SYSPROTO_CONTROL) })?;
    // SAFETY: `fd` is new and owned by nobody else.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: F_SETFD with an int argument.
    cvt(unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_SETFD, libc::FD_CLOEXEC) })?;
    Ok(fd)
}

/// The utun control's id (`CTLIOCGINFO` on a control socket).
pub fn utun_control_id(ctl: BorrowedFd<'_>) -> io::Result<u32> {
    let mut info = ctl_info {
        ctl_id: 0,
        ctl_name: [0; MAX_KCTL_NAME],
    };
    for (d, s) in info.ctl_name.iter_mut().zip(UTUN_CONTROL_NAME) {
        *d = *s as libc::c_char;
    }
    // SAFETY: CTLIOCGINFO reads the name from and writes the id into `info`, which lives for
    // the call and has the size the request encodes.
    cvt(unsafe { libc::ioctl(ctl.as_raw_fd(), CTLIOCGINFO, &mut info) })?;
    Ok(info.ctl_id)
}

/// Creates a utun interface: `unit` None lets the kernel pick the unit ("utun"), `Some(n)`
/// asks for `utunN`. Returns the (blocking) descriptor.
pub fn open_utun(unit: Option<u32>) -> io::Result<OwnedFd> {
    let fd = control_socket()?;
    let id = utun_control_id(std::os::fd::AsFd::as_fd(&fd))?;
    let sc_unit = match unit {
        None => 0,
        Some(n) => n
            .checked_add(1)
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "utun unit too large"))?,
    };
    let addr = sockaddr_ctl {
        sc_len: SOCKADDR_CTL_LEN as u8,
        sc_family: libc::AF_SYSTEM as u8,
        ss_sysaddr: AF_SYS_CONTROL as u16,
        sc_id: id,
        sc_unit,
        sc_reserved: [0; 5],
    };
    // SAFETY: `addr` is a sockaddr_ctl of the length passed, living for the call.
    cvt(unsafe {
        libc::connect(
            fd.as_raw_fd(),
            (&addr as *const sockaddr_ctl).cast(),
            SOCKADDR_CTL_LEN as libc::socklen_t,
        )
    })?;
    Ok(fd)
}

/// The interface name of a utun descriptor (`UTUN_OPT_IFNAME`).
pub fn utun_ifname(fd: BorrowedFd<'_>) -> io::Result<String> {
    let mut name = [0u8; libc::IFNAMSIZ];
    let mut len = name.len() as libc::socklen_t;
    // SAFETY: getsockopt writes at most `len` bytes into `name` and updates `len`.
    cvt(unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            SYSPROTO_CONTROL,
            UTUN_OPT_IFNAME,
            name.as_mut_ptr().cast(),
            &mut len,
        )
    })?;
    let bytes = &name[..(len as usize).min(name.len())];
    let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
    String::from_utf8(bytes[..end].to_vec())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "interface name not UTF-8"))
}
