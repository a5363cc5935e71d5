//! Conversions between `SocketAddr` and the kernel's `sockaddr_storage`.

use std::mem::size_of;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};

/// Reads the address the kernel wrote into `storage` (`len` bytes of it). `None` for families
/// other than IPv4/IPv6 or a length too short for the family.
pub(crate) fn from_storage(
    storage: &libc::sockaddr_storage,
    len: libc::socklen_t,
) -> Option<SocketAddr> {
    let len = len as usize;
    match storage.ss_family as libc::c_int {
        libc::AF_INET if len >= size_of::<libc::sockaddr_in>() => {
            // SAFETY: `sockaddr_storage` is large enough and aligned for every sockaddr type,
            // the family says the kernel wrote a `sockaddr_in`, and any bit pattern is a valid
            // `sockaddr_in` (plain integers).
            let sin =
                unsafe { &*(storage as *const libc::sockaddr_storage).cast::<libc::sockaddr_in>() };
            let ip = Ipv4Addr::from(sin.sin_addr.s_addr.to_ne_bytes());
            Some(SocketAddr::V4(SocketAddrV4::new(
                ip,
                u16::from_be(sin.sin_port),
            )))
        }
        libc::AF_INET6 if len >= size_of::<libc::sockaddr_in6>() => {
            // SAFETY: as above, for `sockaddr_in6`.
            let sin6 = unsafe {
                &*(storage as *const libc::sockaddr_storage).cast::<libc::sockaddr_in6>()
            };
            let ip = Ipv6Addr::from(sin6.sin6_addr.s6_addr);
            Some(SocketAddr::V6(SocketAddrV6::new(
                ip,
                u16::from_be(sin6.sin6_port),
                u32::from_be(sin6.sin6_flowinfo),
                sin6.sin6_scope_id,
            )))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_through_socket2() {
        for s in ["127.0.0.2:51820", "[fd00::1]:7", "[::1]:65535", "0.0.0.0:0"] {
            let sa: SocketAddr = s.parse().unwrap();
            let s2 = socket2::SockAddr::from(sa);
            let len = s2.len();
            let back = from_storage(&s2.as_storage(), len);
            assert_eq!(back, Some(sa), "{s}");
        }
    }

    #[test]
    fn rejects_short_or_foreign() {
        let sa: SocketAddr = "[fd00::1]:7".parse().unwrap();
        let s2 = socket2::SockAddr::from(sa);
        assert_eq!(from_storage(&s2.as_storage(), 8), None);
        // SAFETY: all-zero is a valid sockaddr_storage (AF_UNSPEC).
        let zero: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
        assert_eq!(
            from_storage(&zero, size_of::<libc::sockaddr_storage>() as _),
            None
        );
    }
}
