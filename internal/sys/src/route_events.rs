//! Route and address changes over `NETLINK_ROUTE`, and the one-route query that says which
//! interface the kernel would send a datagram from a given source out of (Linux).
//!
//! The bind keeps a sticky source address and interface per endpoint (the address a peer
//! reached us at, so replies leave from it). When routes or addresses change, that choice may
//! be stale: the source may be gone, or the route to the peer may now leave through another
//! interface. [`RouteEvents`] reports that something changed; [`route_oif`] asks the kernel
//! (`RTM_GETROUTE` with destination, source and fwmark, as wireguard-go's route listener does)
//! where the datagram would go now. Messages are built and parsed here as plain bytes; only
//! the socket calls are `unsafe`.

use std::io;
use std::mem::size_of;
use std::net::IpAddr;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::time::Duration;

const NLMSG_HDRLEN: usize = 16;
const RTMSG_LEN: usize = 12;
const NLMSG_ERROR: u16 = 2;
const NLMSG_DONE: u16 = 3;
const RTA_DST: u16 = 1;
const RTA_SRC: u16 = 2;
const RTA_OIF: u16 = 4;
const RTA_MARK: u16 = 16;

/// A `NETLINK_ROUTE` socket bound to `groups` (0: none, for requests), with a receive timeout.
fn netlink_socket(groups: u32, timeout: Option<Duration>) -> io::Result<OwnedFd> {
    // SAFETY: plain socket(2) call; the result is checked before use.
    let raw = unsafe {
        libc::socket(
            libc::AF_NETLINK,
            libc::SOCK_RAW | libc::SOCK_CLOEXEC,
            libc::NETLINK_ROUTE,
        )
    };
    if raw < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `raw` is a fresh descriptor nothing else owns.
    let fd = unsafe { OwnedFd::from_raw_fd(raw) };
    // SAFETY: sockaddr_nl is plain old data; all-zero is a valid value.
    let mut addr: libc::sockaddr_nl = unsafe { std::mem::zeroed() };
    addr.nl_family = libc::AF_NETLINK as libc::sa_family_t;
    addr.nl_groups = groups;
    // SAFETY: `addr` is a valid sockaddr_nl of the length passed.
    let r = unsafe {
        libc::bind(
            fd.as_raw_fd(),
            (&addr as *const libc::sockaddr_nl).cast(),
            size_of::<libc::sockaddr_nl>() as libc::socklen_t,
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    if let Some(t) = timeout {
        let tv = libc::timeval {
            tv_sec: t.as_secs() as libc::time_t,
            tv_usec: t.subsec_micros() as libc::suseconds_t,
        };
        // SAFETY: `tv` is a valid timeval of the length passed; the kernel only reads it.
        let r = unsafe {
            libc::setsockopt(
                fd.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_RCVTIMEO,
                (&tv as *const libc::timeval).cast(),
                size_of::<libc::timeval>() as libc::socklen_t,
            )
        };
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(fd)
}

fn recv(fd: &OwnedFd, buf: &mut [u8]) -> io::Result<usize> {
    // SAFETY: `buf` is valid for writes of its length for the duration of the call.
    let n = unsafe { libc::recv(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0) };
    if n < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(n as usize)
    }
}

/// A subscription to IPv4 and IPv6 route and address changes in the calling thread's network
/// namespace.
pub struct RouteEvents {
    fd: OwnedFd,
    buf: Vec<u8>,
}

impl RouteEvents {
    /// Subscribes; each [`wait`](Self::wait) returns after at most `timeout`.
    pub fn subscribe(timeout: Duration) -> io::Result<RouteEvents> {
        let groups = (crate::abi::RTMGRP_IPV4_ROUTE
            | crate::abi::RTMGRP_IPV6_ROUTE
            | crate::abi::RTMGRP_IPV4_IFADDR
            | crate::abi::RTMGRP_IPV6_IFADDR) as u32;
        Ok(RouteEvents {
            fd: netlink_socket(groups, Some(timeout))?,
            buf: vec![0; 64 * 1024],
        })
    }

    /// Waits for the next notification or for `wake` to become readable: `Ok(None)` when woken
    /// (the owner is closing), otherwise what [`wait`](Self::wait) returns. An idle listener
    /// costs no wake-ups beyond the subscription's timeout, and a close does not wait for it.
    pub fn wait_or_wake(&mut self, wake: BorrowedFd<'_>) -> io::Result<Option<bool>> {
        if crate::poll::poll_or_wake(self.fd.as_raw_fd(), libc::POLLIN, wake)? {
            return Ok(None);
        }
        self.wait().map(Some)
    }

    /// Waits for the next notification: `Ok(true)` if it announced a route or address being
    /// added or removed, `Ok(false)` after the timeout or for anything else. A lost
    /// notification (`ENOBUFS`: the socket overflowed) counts as a change.
    pub fn wait(&mut self) -> io::Result<bool> {
        match recv(&self.fd, &mut self.buf) {
            Ok(n) => Ok(carries_change(&self.buf[..n])),
            Err(e) if e.raw_os_error() == Some(libc::ENOBUFS) => Ok(true),
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock
                        | io::ErrorKind::TimedOut
                        | io::ErrorKind::Interrupted
                ) =>
            {
                Ok(false)
            }
            Err(e) => Err(e),
        }
    }
}

/// The netlink messages in one datagram: `(type, payload)`; stops at the first malformed one.
fn messages(mut b: &[u8]) -> impl Iterator<Item = (u16, &[u8])> {
    std::iter::from_fn(move || {
        let len = u32::from_ne_bytes(b.get(0..4)?.try_into().ok()?) as usize;
        let ty = u16::from_ne_bytes(b.get(4..6)?.try_into().ok()?);
        if len < NLMSG_HDRLEN || len > b.len() {
            return None;
        }
        let payload = &b[NLMSG_HDRLEN..len];
        b = b.get(align4(len)..).unwrap_or(&[]);
        Some((ty, payload))
    })
}

fn align4(n: usize) -> usize {
    (n + 3) & !3
}

/// Does a notification datagram announce a route or an address added or removed? (Public for
/// the fuzz target: kernel-written bytes, parsed without trusting their lengths.)
pub fn carries_change(datagram: &[u8]) -> bool {
    messages(datagram).any(|(ty, _)| {
        matches!(
            ty,
            libc::RTM_NEWROUTE | libc::RTM_DELROUTE | libc::RTM_NEWADDR | libc::RTM_DELADDR
        )
    })
}

fn push_attr(m: &mut Vec<u8>, ty: u16, data: &[u8]) {
    m.extend_from_slice(&((4 + data.len()) as u16).to_ne_bytes());
    m.extend_from_slice(&ty.to_ne_bytes());
    m.extend_from_slice(data);
    m.resize(align4(m.len()), 0);
}

fn addr_bytes(a: IpAddr) -> Vec<u8> {
    match a {
        IpAddr::V4(a) => a.octets().to_vec(),
        IpAddr::V6(a) => a.octets().to_vec(),
    }
}

/// The `RTM_GETROUTE` request for `dst` from `src` with `mark`.
fn route_request(dst: IpAddr, src: IpAddr, mark: u32, seq: u32) -> Vec<u8> {
    let (family, bits) = match dst {
        IpAddr::V4(_) => (libc::AF_INET as u8, 32u8),
        IpAddr::V6(_) => (libc::AF_INET6 as u8, 128u8),
    };
    let mut m = vec![0u8; NLMSG_HDRLEN];
    m[4..6].copy_from_slice(&libc::RTM_GETROUTE.to_ne_bytes());
    m[6..8].copy_from_slice(&(libc::NLM_F_REQUEST as u16).to_ne_bytes());
    m[8..12].copy_from_slice(&seq.to_ne_bytes());
    // rtmsg: family, dst_len, src_len, then zeros.
    let mut rt = [0u8; RTMSG_LEN];
    rt[0] = family;
    rt[1] = bits;
    rt[2] = bits;
    m.extend_from_slice(&rt);
    push_attr(&mut m, RTA_DST, &addr_bytes(dst));
    push_attr(&mut m, RTA_SRC, &addr_bytes(src));
    if mark != 0 {
        push_attr(&mut m, RTA_MARK, &mark.to_ne_bytes());
    }
    let len = m.len() as u32;
    m[0..4].copy_from_slice(&len.to_ne_bytes());
    m
}

/// The answer to a route request: the output interface, or the kernel's error. (Public for the
/// fuzz target.)
pub fn parse_route_reply(datagram: &[u8]) -> io::Result<u32> {
    let bad = || io::Error::new(io::ErrorKind::InvalidData, "malformed RTM_GETROUTE reply");
    for (ty, payload) in messages(datagram) {
        match ty {
            NLMSG_ERROR => {
                let code = i32::from_ne_bytes(
                    payload
                        .get(0..4)
                        .ok_or_else(bad)?
                        .try_into()
                        .map_err(|_| bad())?,
                );
                // A negative errno; 0 would be an acknowledgement, which was not asked for.
                let errno = code.checked_neg().filter(|&e| e > 0).ok_or_else(bad)?;
                return Err(io::Error::from_raw_os_error(errno));
            }
            libc::RTM_NEWROUTE => {
                let mut attrs = payload.get(RTMSG_LEN..).ok_or_else(bad)?;
                while attrs.len() >= 4 {
                    let len = u16::from_ne_bytes([attrs[0], attrs[1]]) as usize;
                    let ty = u16::from_ne_bytes([attrs[2], attrs[3]]);
                    if len < 4 || len > attrs.len() {
                        return Err(bad());
                    }
                    if ty == RTA_OIF && len >= 8 {
                        return Ok(u32::from_ne_bytes(
                            attrs[4..8].try_into().map_err(|_| bad())?,
                        ));
                    }
                    attrs = attrs.get(align4(len)..).unwrap_or(&[]);
                }
                return Err(io::Error::new(
                    io::ErrorKind::NotFound,
                    "route has no output interface",
                ));
            }
            NLMSG_DONE => break,
            _ => {}
        }
    }
    Err(bad())
}

/// The interface index the kernel would send a datagram to `dst` from `src` with fwmark `mark`
/// out of, in the calling thread's network namespace; an error when it would not (the source
/// is no longer a local address, no route).
pub fn route_oif(dst: IpAddr, src: IpAddr, mark: u32) -> io::Result<u32> {
    if dst.is_ipv4() != src.is_ipv4() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "mixed address families",
        ));
    }
    let fd = netlink_socket(0, Some(Duration::from_secs(1)))?;
    let req = route_request(dst, src, mark, 1);
    // SAFETY: `req` is valid for reads of its length; the socket is unconnected netlink,
    // so a null destination means the kernel.
    let n = unsafe { libc::send(fd.as_raw_fd(), req.as_ptr().cast(), req.len(), 0) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    let mut buf = vec![0u8; 8192];
    let n = recv(&fd, &mut buf)?;
    parse_route_reply(&buf[..n])
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{Ipv4Addr, Ipv6Addr};

    #[test]
    fn request_layout() {
        let m = route_request(
            IpAddr::V4(Ipv4Addr::new(198, 18, 0, 2)),
            IpAddr::V4(Ipv4Addr::new(198, 18, 0, 1)),
            51820,
            7,
        );
        // header 16 + rtmsg 12 + three 8-byte attributes.
        assert_eq!(m.len(), 16 + 12 + 24);
        assert_eq!(
            u32::from_ne_bytes(m[0..4].try_into().unwrap()) as usize,
            m.len()
        );
        assert_eq!(&m[16..19], &[libc::AF_INET as u8, 32, 32]);
        assert_eq!(&m[32..36], &[198, 18, 0, 2]);
        assert_eq!(&m[40..44], &[198, 18, 0, 1]);
        let v6 = route_request(
            IpAddr::V6(Ipv6Addr::LOCALHOST),
            IpAddr::V6(Ipv6Addr::LOCALHOST),
            0,
            1,
        );
        assert_eq!(v6.len(), 16 + 12 + 2 * 20);
    }

    fn error_reply(code: i32) -> Vec<u8> {
        let mut m = 20u32.to_ne_bytes().to_vec();
        m.extend_from_slice(&NLMSG_ERROR.to_ne_bytes());
        m.extend_from_slice(&[0; 10]);
        m.extend_from_slice(&code.to_ne_bytes());
        m
    }

    #[test]
    fn error_replies_carry_the_errno() {
        let e = parse_route_reply(&error_reply(-libc::EINVAL)).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EINVAL));
        // Found by the fuzz target: i32::MIN cannot be negated; 0 and positive codes are no errno.
        for code in [i32::MIN, 0, 5] {
            let e = parse_route_reply(&error_reply(code)).unwrap_err();
            assert_eq!(e.kind(), io::ErrorKind::InvalidData, "{code}");
        }
    }

    #[test]
    fn malformed_replies_are_errors_not_panics() {
        for d in [
            &[][..],
            &[1, 2, 3],
            &[255; 16],
            &[16, 0, 0, 0, 24, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0],
        ] {
            assert!(parse_route_reply(d).is_err());
            let _ = carries_change(d);
        }
    }

    /// The loopback route answers with lo's index; a source that is not local is refused.
    #[test]
    fn loopback_route_and_foreign_source() {
        let lo = IpAddr::V4(Ipv4Addr::LOCALHOST);
        let oif = route_oif(lo, lo, 0).unwrap();
        assert_eq!(oif, 1, "lo is interface 1");
        let foreign = IpAddr::V4(Ipv4Addr::new(198, 51, 100, 77));
        assert!(route_oif(lo, foreign, 0).is_err());
        assert!(route_oif(lo, IpAddr::V6(Ipv6Addr::LOCALHOST), 0).is_err());
    }

    #[test]
    fn subscription_times_out_quietly() {
        let mut ev = RouteEvents::subscribe(Duration::from_millis(20)).unwrap();
        // Whatever happens on the machine meanwhile, a wait returns.
        ev.wait().unwrap();
    }
}
