//! The darwin system calls of the data plane other than the batch calls (those are in
//! `vpn-darwinbatch`): the utun control socket ([`utun`]), the routing socket and interface
//! ioctls ([`iface`]), descriptors and waiting ([`fd`]), the clock that counts sleep
//! ([`clock`]) and the kqueue watch the UAPI server puts on its socket's directory
//! ([`dirwatch`]), and the kernel-control definitions the utun calls use ([`kctl`]). One file
//! per topic; each wraps the raw calls in small safe functions. All of it builds for every
//! Apple target; on iOS an app cannot create a utun (only its network extension is handed one).

pub mod clock;
pub mod dirwatch;
pub mod fd;
pub mod iface;
pub mod kctl;
pub mod utun;

use std::io;

/// `r` as a result: negative means the call failed with `errno`.
pub(crate) fn cvt(r: libc::c_int) -> io::Result<libc::c_int> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}
