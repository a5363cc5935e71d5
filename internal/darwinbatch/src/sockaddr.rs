//! Socket addresses in darwin's layout (`sockaddr_in` / `sockaddr_in6` with the leading
//! `sa_len` byte, AF_INET6 = 30), encoded and decoded by hand so the same code runs against the
//! real kernel on Apple targets and the simulated one everywhere.

use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};

/// darwin's AF_INET.
pub const AF_INET: u8 = 2;
/// darwin's AF_INET6 (Linux's is 10).
pub const AF_INET6: u8 = 30;
/// `sizeof(struct sockaddr_in)`.
pub const SOCKADDR_IN_LEN: usize = 16;
/// `sizeof(struct sockaddr_in6)`.
pub const SOCKADDR_IN6_LEN: usize = 28;

/// Storage for one address (`struct sockaddr_storage`: 128 bytes, 8-aligned).
#[repr(C, align(8))]
#[derive(Clone, Copy)]
pub struct NameBuf(pub [u8; 128]);

impl Default for NameBuf {
    fn default() -> Self {
        NameBuf([0; 128])
    }
}

/// Writes `addr` into `out` in darwin's layout; returns its length.
pub fn encode(addr: &SocketAddr, out: &mut NameBuf) -> usize {
    let b = &mut out.0;
    b.fill(0);
    match addr {
        SocketAddr::V4(a) => {
            b[0] = SOCKADDR_IN_LEN as u8;
            b[1] = AF_INET;
            b[2..4].copy_from_slice(&a.port().to_be_bytes());
            b[4..8].copy_from_slice(&a.ip().octets());
            SOCKADDR_IN_LEN
        }
        SocketAddr::V6(a) => {
            b[0] = SOCKADDR_IN6_LEN as u8;
            b[1] = AF_INET6;
            b[2..4].copy_from_slice(&a.port().to_be_bytes());
            b[4..8].copy_from_slice(&a.flowinfo().to_be_bytes());
            b[8..24].copy_from_slice(&a.ip().octets());
            // sin6_scope_id is in host order.
            b[24..28].copy_from_slice(&a.scope_id().to_ne_bytes());
            SOCKADDR_IN6_LEN
        }
    }
}

/// Reads an address the kernel wrote (`len` bytes of `name`); `None` for other families or a
/// short length.
pub fn decode(name: &[u8], len: usize) -> Option<SocketAddr> {
    let b = name.get(..len)?;
    match *b.get(1)? {
        AF_INET if len >= SOCKADDR_IN_LEN => {
            let port = u16::from_be_bytes([b[2], b[3]]);
            let ip = Ipv4Addr::new(b[4], b[5], b[6], b[7]);
            Some(SocketAddr::V4(SocketAddrV4::new(ip, port)))
        }
        AF_INET6 if len >= SOCKADDR_IN6_LEN => {
            let port = u16::from_be_bytes([b[2], b[3]]);
            let flow = u32::from_be_bytes(b[4..8].try_into().ok()?);
            let ip: [u8; 16] = b[8..24].try_into().ok()?;
            let scope = u32::from_ne_bytes(b[24..28].try_into().ok()?);
            Some(SocketAddr::V6(SocketAddrV6::new(
                Ipv6Addr::from(ip),
                port,
                flow,
                scope,
            )))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_round_trip_in_darwin_layout() {
        for a in [
            "198.18.0.1:51820".parse::<SocketAddr>().unwrap(),
            SocketAddr::V6(SocketAddrV6::new("fe80::1".parse().unwrap(), 443, 7, 4)),
        ] {
            let mut n = NameBuf::default();
            let len = encode(&a, &mut n);
            assert_eq!(n.0[0] as usize, len, "sa_len");
            assert_eq!(decode(&n.0, len), Some(a));
        }
    }

    #[test]
    fn short_or_foreign_names_decode_to_none() {
        let mut n = NameBuf::default();
        let len = encode(&"[fd00::1]:1".parse().unwrap(), &mut n);
        assert_eq!(decode(&n.0, len - 1), None);
        assert_eq!(decode(&n.0, 0), None);
        n.0[1] = 10; // Linux's AF_INET6 is not darwin's
        assert_eq!(decode(&n.0, len), None);
    }

    #[cfg(target_vendor = "apple")]
    #[test]
    fn layout_matches_the_sdk() {
        assert_eq!(SOCKADDR_IN_LEN, std::mem::size_of::<libc::sockaddr_in>());
        assert_eq!(SOCKADDR_IN6_LEN, std::mem::size_of::<libc::sockaddr_in6>());
        assert_eq!(AF_INET6 as libc::c_int, libc::AF_INET6);
    }
}
