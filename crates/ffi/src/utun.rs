//! Finding the utun fd inside a macOS/iOS network extension.
//!
//! `NEPacketTunnelProvider` never hands the extension its utun descriptor. It is one of the
//! process's open fds: a socket connected to the kernel control `com.apple.net.utun_control`.
//! WireGuardKit's way, kept here: scan fds 0 through 1024, keep those whose peer address is an
//! `AF_SYSTEM` control address, learn the utun control's id once (`CTLIOCGINFO` on the first
//! such fd) and return the fd whose peer has that id.
//!
//! The decision is [`find_utun_fd`] over an [`FdProbe`]; the syscalls are the Apple-only
//! [`SystemFds`]. Tests drive the decision with a fake fd table.

use std::os::fd::RawFd;

/// The kernel control every utun socket is connected to.
pub const UTUN_CONTROL_NAME: &str = "com.apple.net.utun_control";
/// The highest fd scanned (WireGuardKit's bound).
pub const MAX_SCANNED_FD: RawFd = 1024;

/// The two questions the scan asks about an fd.
pub trait FdProbe {
    /// If `fd` is a socket whose peer is an `AF_SYSTEM` kernel-control address, that
    /// control's id (`sockaddr_ctl.sc_id` from `getpeername`); otherwise `None`.
    fn peer_control_id(&self, fd: RawFd) -> Option<u32>;
    /// The id of the kernel control named `name`, asked through `fd` (`CTLIOCGINFO`);
    /// `None` if the call fails.
    fn control_id(&self, fd: RawFd, name: &str) -> Option<u32>;
}

/// The utun fd among fds 0..=[`MAX_SCANNED_FD`], if there is one.
pub fn find_utun_fd(probe: &dyn FdProbe) -> Option<RawFd> {
    let mut utun_id = None;
    for fd in 0..=MAX_SCANNED_FD {
        let Some(peer) = probe.peer_control_id(fd) else {
            continue;
        };
        let id = match utun_id {
            Some(id) => id,
            None => {
                let Some(id) = probe.control_id(fd, UTUN_CONTROL_NAME) else {
                    continue;
                };
                *utun_id.insert(id)
            }
        };
        if peer == id {
            return Some(fd);
        }
    }
    None
}

/// The real fd table (Apple targets).
#[cfg(target_vendor = "apple")]
pub struct SystemFds;

#[cfg(target_vendor = "apple")]
use vpn_sys::darwin::kctl;

#[cfg(target_vendor = "apple")]
impl FdProbe for SystemFds {
    fn peer_control_id(&self, fd: RawFd) -> Option<u32> {
        // SAFETY: sockaddr_ctl is plain old data; all zeros is a valid value.
        let mut addr: kctl::sockaddr_ctl = unsafe { std::mem::zeroed() };
        let mut len = std::mem::size_of::<kctl::sockaddr_ctl>() as libc::socklen_t;
        // SAFETY: `addr` is writable for `len` bytes and outlives the call; getpeername on an
        // fd that is not a socket (or not open) only fails.
        let rc =
            unsafe { libc::getpeername(fd, (&raw mut addr).cast::<libc::sockaddr>(), &mut len) };
        (rc == 0 && i32::from(addr.sc_family) == libc::AF_SYSTEM).then_some(addr.sc_id)
    }

    fn control_id(&self, fd: RawFd, name: &str) -> Option<u32> {
        // SAFETY: ctl_info is plain old data; all zeros is a valid value.
        let mut info: kctl::ctl_info = unsafe { std::mem::zeroed() };
        let bytes = name.as_bytes();
        if bytes.len() >= info.ctl_name.len() {
            return None;
        }
        for (dst, &b) in info.ctl_name.iter_mut().zip(bytes) {
            *dst = b as libc::c_char;
        }
        // SAFETY: CTLIOCGINFO reads and writes one ctl_info, which `info` is; it lives across
        // the call. On an fd that is not a control socket the ioctl only fails.
        let rc = unsafe { libc::ioctl(fd, kctl::CTLIOCGINFO, &raw mut info) };
        (rc == 0).then_some(info.ctl_id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;
    use std::collections::HashMap;

    /// A process's fd table: fds not listed are closed or not sockets.
    struct FakeFds {
        /// fd → the kernel control its peer is (by name).
        controls: HashMap<RawFd, &'static str>,
        /// The ids the kernel gives each control name.
        ids: HashMap<&'static str, u32>,
        /// CTLIOCGINFO fails on these fds.
        ioctl_fails: Vec<RawFd>,
        ioctls: Cell<u32>,
    }

    impl FakeFds {
        fn new(controls: &[(RawFd, &'static str)]) -> Self {
            FakeFds {
                controls: controls.iter().copied().collect(),
                ids: [(UTUN_CONTROL_NAME, 7), ("com.apple.network.statistics", 3)].into(),
                ioctl_fails: Vec::new(),
                ioctls: Cell::new(0),
            }
        }
    }

    impl FdProbe for FakeFds {
        fn peer_control_id(&self, fd: RawFd) -> Option<u32> {
            self.controls.get(&fd).map(|name| self.ids[name])
        }

        fn control_id(&self, fd: RawFd, name: &str) -> Option<u32> {
            self.ioctls.set(self.ioctls.get() + 1);
            if self.ioctl_fails.contains(&fd) || !self.controls.contains_key(&fd) {
                return None;
            }
            self.ids.get(name).copied()
        }
    }

    #[test]
    fn the_utun_socket_is_found_among_other_kernel_controls() {
        let fds = FakeFds::new(&[(5, "com.apple.network.statistics"), (9, UTUN_CONTROL_NAME)]);
        assert_eq!(find_utun_fd(&fds), Some(9));
        assert_eq!(fds.ioctls.get(), 1, "the utun control id is asked once");
    }

    #[test]
    fn no_utun_socket_means_none() {
        assert_eq!(find_utun_fd(&FakeFds::new(&[])), None);
        let other = FakeFds::new(&[(4, "com.apple.network.statistics")]);
        assert_eq!(find_utun_fd(&other), None);
    }

    #[test]
    fn a_failed_control_lookup_is_retried_on_the_next_control_socket() {
        let mut fds = FakeFds::new(&[(3, "com.apple.network.statistics"), (8, UTUN_CONTROL_NAME)]);
        fds.ioctl_fails.push(3);
        assert_eq!(find_utun_fd(&fds), Some(8));
        assert_eq!(fds.ioctls.get(), 2);
    }

    #[test]
    fn the_scan_covers_fds_up_to_1024_and_no_further() {
        assert_eq!(
            find_utun_fd(&FakeFds::new(&[(1024, UTUN_CONTROL_NAME)])),
            Some(1024)
        );
        assert_eq!(
            find_utun_fd(&FakeFds::new(&[(1025, UTUN_CONTROL_NAME)])),
            None
        );
    }

    #[test]
    fn the_lowest_utun_fd_wins() {
        let fds = FakeFds::new(&[(12, UTUN_CONTROL_NAME), (6, UTUN_CONTROL_NAME)]);
        assert_eq!(find_utun_fd(&fds), Some(6));
    }
}
