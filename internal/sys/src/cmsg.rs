//! Control messages (ancillary data) of UDP sockets: the sticky source (`IP_PKTINFO`,
//! `IPV6_PKTINFO`), the GSO segment size on send (`UDP_SEGMENT`) and the GRO segment size on
//! receive (`UDP_GRO`).
//!
//! A [`CmsgBuf`] is a fixed, aligned buffer with room for exactly what one datagram needs (one
//! IPv6 pktinfo plus one UDP segment size), so a batch keeps one per message without
//! allocating. Parsing is bounds-checked: a malformed or truncated control area yields what
//! could be read, never a panic or an out-of-bounds read.

use std::mem::{align_of, size_of};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::ptr;

use libc::c_int;

/// `UDP_SEGMENT` (linux/udp.h): GSO segment size, a `u16`, as a socket option or a cmsg.
pub const UDP_SEGMENT: c_int = 103;
/// `UDP_GRO` (linux/udp.h): enables GRO as a socket option; as a cmsg, the segment size.
pub const UDP_GRO: c_int = 104;

/// `CMSG_SPACE(len)`: header, data and padding to the next header.
const fn space(len: usize) -> usize {
    // SAFETY: CMSG_SPACE is pure arithmetic on its argument; it dereferences nothing.
    unsafe { libc::CMSG_SPACE(len as libc::c_uint) as usize }
}

/// `CMSG_LEN(len)`: header plus data, the value of `cmsg_len`.
const fn cmsg_len(len: usize) -> usize {
    // SAFETY: CMSG_LEN is pure arithmetic on its argument; it dereferences nothing.
    unsafe { libc::CMSG_LEN(len as libc::c_uint) as usize }
}

/// Bytes from a header to its data (`CMSG_DATA(h) - h`).
const DATA_OFFSET: usize = cmsg_len(0);
/// The alignment the kernel rounds every control message up to (`CMSG_ALIGN(1)`).
const ALIGN: usize = space(1) - space(0);
const IN_PKTINFO_LEN: usize = size_of::<libc::in_pktinfo>();
const IN6_PKTINFO_LEN: usize = size_of::<libc::in6_pktinfo>();

/// Room for one IPv6 pktinfo (the larger family) and one `int`-sized segment size.
pub const CMSG_BUF_LEN: usize = space(IN6_PKTINFO_LEN) + space(size_of::<c_int>());

// The byte layouts below are written by hand; pin the structures they mirror.
const _: () = assert!(IN_PKTINFO_LEN == 12);
const _: () = assert!(IN6_PKTINFO_LEN == 20);
const _: () = assert!(DATA_OFFSET >= size_of::<libc::cmsghdr>());

/// The local end of a datagram: the address the peer sent to and the interface it arrived
/// on. Attached to a send, it makes the kernel use that source address (and interface).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct PktInfo {
    /// Local address (IPv4 `ipi_spec_dst`, IPv6 `ipi6_addr`).
    pub addr: IpAddr,
    /// Interface index; 0 lets routing choose.
    pub ifindex: u32,
}

/// A control-message buffer aligned like `cmsghdr`, sized by [`CMSG_BUF_LEN`].
#[derive(Clone, Copy)]
#[repr(C, align(8))]
pub struct CmsgBuf {
    bytes: [u8; CMSG_BUF_LEN],
}

const _: () = assert!(align_of::<CmsgBuf>() >= align_of::<libc::cmsghdr>());

impl Default for CmsgBuf {
    fn default() -> Self {
        CmsgBuf {
            bytes: [0; CMSG_BUF_LEN],
        }
    }
}

impl CmsgBuf {
    /// An empty buffer.
    pub fn new() -> Self {
        Self::default()
    }

    /// The whole buffer.
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// Pointer for `msg_control`.
    pub(crate) fn as_mut_ptr(&mut self) -> *mut libc::c_void {
        self.bytes.as_mut_ptr().cast()
    }

    /// Starts writing control messages at the beginning of the buffer.
    pub fn writer(&mut self) -> CmsgWriter<'_> {
        CmsgWriter { buf: self, len: 0 }
    }
}

/// The buffer has no room for another control message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CmsgFull;

impl std::fmt::Display for CmsgFull {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("control message buffer full")
    }
}

impl std::error::Error for CmsgFull {}

/// Appends control messages to a [`CmsgBuf`]; [`len`](Self::len) is the `msg_controllen`.
pub struct CmsgWriter<'a> {
    buf: &'a mut CmsgBuf,
    len: usize,
}

impl CmsgWriter<'_> {
    /// Bytes written so far (the value for `msg_controllen`).
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether nothing was written.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Appends one control message with `data` as payload.
    pub fn push(&mut self, level: c_int, ty: c_int, data: &[u8]) -> Result<(), CmsgFull> {
        let start = self.len;
        let end = start.checked_add(space(data.len())).ok_or(CmsgFull)?;
        let area = self.buf.bytes.get_mut(start..end).ok_or(CmsgFull)?;
        area.fill(0);
        let data_area = area
            .get_mut(DATA_OFFSET..DATA_OFFSET + data.len())
            .ok_or(CmsgFull)?;
        data_area.copy_from_slice(data);
        // SAFETY: all-zero bytes are a valid `cmsghdr` (integers and, on musl, padding).
        let mut hdr: libc::cmsghdr = unsafe { std::mem::zeroed() };
        hdr.cmsg_len = cmsg_len(data.len()) as _;
        hdr.cmsg_level = level;
        hdr.cmsg_type = ty;
        // SAFETY: `area` is at least `space(0) >= size_of::<cmsghdr>()` bytes long (checked by
        // the `get_mut` above) and exclusively borrowed; `write_unaligned` needs no alignment.
        unsafe { ptr::write_unaligned(area.as_mut_ptr().cast::<libc::cmsghdr>(), hdr) };
        self.len = end;
        Ok(())
    }

    /// Appends the sticky source: `IP_PKTINFO` (source in `ipi_spec_dst`) or `IPV6_PKTINFO`.
    pub fn pktinfo(&mut self, info: &PktInfo) -> Result<(), CmsgFull> {
        match info.addr {
            IpAddr::V4(a) => {
                let mut d = [0u8; IN_PKTINFO_LEN];
                d[0..4].copy_from_slice(&(info.ifindex as c_int).to_ne_bytes());
                d[4..8].copy_from_slice(&a.octets());
                self.push(libc::IPPROTO_IP, libc::IP_PKTINFO, &d)
            }
            IpAddr::V6(a) => {
                let mut d = [0u8; IN6_PKTINFO_LEN];
                d[0..16].copy_from_slice(&a.octets());
                d[16..20].copy_from_slice(&info.ifindex.to_ne_bytes());
                self.push(libc::IPPROTO_IPV6, libc::IPV6_PKTINFO, &d)
            }
        }
    }

    /// Appends `UDP_SEGMENT`: split this message into datagrams of `size` bytes (a `u16`,
    /// exactly as the kernel demands).
    pub fn udp_segment(&mut self, size: u16) -> Result<(), CmsgFull> {
        self.push(libc::SOL_UDP, UDP_SEGMENT, &size.to_ne_bytes())
    }

    /// Appends `UDP_GRO` as the kernel reports it on receive (an `int`); for tests and fakes.
    pub fn udp_gro(&mut self, size: u16) -> Result<(), CmsgFull> {
        self.push(libc::SOL_UDP, UDP_GRO, &c_int::from(size).to_ne_bytes())
    }
}

/// What a received control area said.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Parsed {
    /// Local address and interface (`IP_PKTINFO` / `IPV6_PKTINFO`).
    pub pktinfo: Option<PktInfo>,
    /// GRO segment size (`UDP_GRO`); 0 when the datagram was not coalesced.
    pub gro_size: u16,
    /// `UDP_SEGMENT` size, as found on a send-side buffer; 0 when absent.
    pub gso_size: u16,
}

fn read_ne<const N: usize>(data: &[u8], at: usize) -> Option<[u8; N]> {
    data.get(at..at + N)?.try_into().ok()
}

/// Parses the first `len` bytes of a control area. Unknown messages are skipped; a malformed
/// one ends the walk (whatever came before it is kept).
pub fn parse(area: &[u8]) -> Parsed {
    let mut out = Parsed::default();
    let mut off = 0usize;
    while let Some(rest) = area.get(off..) {
        if rest.len() < size_of::<libc::cmsghdr>() {
            break;
        }
        // SAFETY: `rest` holds at least `size_of::<cmsghdr>()` readable bytes (checked above);
        // `read_unaligned` copies them out without an alignment requirement, and every bit
        // pattern is a valid `cmsghdr` (plain integers).
        let hdr: libc::cmsghdr = unsafe { ptr::read_unaligned(rest.as_ptr().cast()) };
        let len = hdr.cmsg_len as usize;
        if len < DATA_OFFSET || len > rest.len() {
            break;
        }
        let data = &rest[DATA_OFFSET..len];
        match (hdr.cmsg_level, hdr.cmsg_type) {
            (libc::IPPROTO_IP, libc::IP_PKTINFO) => {
                if let (Some(idx), Some(spec)) = (read_ne::<4>(data, 0), read_ne::<4>(data, 4)) {
                    out.pktinfo = Some(PktInfo {
                        addr: IpAddr::V4(Ipv4Addr::from(spec)),
                        ifindex: c_int::from_ne_bytes(idx) as u32,
                    });
                }
            }
            (libc::IPPROTO_IPV6, libc::IPV6_PKTINFO) => {
                if let (Some(a), Some(idx)) = (read_ne::<16>(data, 0), read_ne::<4>(data, 16)) {
                    out.pktinfo = Some(PktInfo {
                        addr: IpAddr::V6(Ipv6Addr::from(a)),
                        ifindex: u32::from_ne_bytes(idx),
                    });
                }
            }
            (libc::SOL_UDP, ty) if ty == UDP_GRO || ty == UDP_SEGMENT => {
                // The kernel reports GRO as an int; UDP_SEGMENT is a u16.
                let size = if let Some(v) = read_ne::<4>(data, 0) {
                    u16::try_from(c_int::from_ne_bytes(v)).unwrap_or(0)
                } else if let Some(v) = read_ne::<2>(data, 0) {
                    u16::from_ne_bytes(v)
                } else {
                    0
                };
                if ty == UDP_GRO {
                    out.gro_size = size;
                } else {
                    out.gso_size = size;
                }
            }
            _ => {}
        }
        let step = (len + ALIGN - 1) & !(ALIGN - 1);
        off = match off.checked_add(step) {
            Some(o) => o,
            None => break,
        };
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip(build: impl FnOnce(&mut CmsgWriter<'_>)) -> Parsed {
        let mut buf = CmsgBuf::new();
        let mut w = buf.writer();
        build(&mut w);
        let n = w.len();
        parse(&buf.as_bytes()[..n])
    }

    #[test]
    fn ipv4_pktinfo_round_trip() {
        let info = PktInfo {
            addr: "127.0.0.2".parse().unwrap(),
            ifindex: 7,
        };
        let p = round_trip(|w| w.pktinfo(&info).unwrap());
        assert_eq!(p.pktinfo, Some(info));
        assert_eq!(p.gro_size, 0);
    }

    #[test]
    fn ipv6_pktinfo_round_trip() {
        let info = PktInfo {
            addr: "fd00::1:2".parse().unwrap(),
            ifindex: 0x0102_0304,
        };
        let p = round_trip(|w| w.pktinfo(&info).unwrap());
        assert_eq!(p.pktinfo, Some(info));
    }

    #[test]
    fn udp_segment_and_gro_round_trip() {
        let p = round_trip(|w| w.udp_segment(1420).unwrap());
        assert_eq!((p.gso_size, p.gro_size), (1420, 0));
        let p = round_trip(|w| w.udp_gro(65535).unwrap());
        assert_eq!((p.gso_size, p.gro_size), (0, 65535));
    }

    #[test]
    fn combined_messages_fit_and_parse() {
        let info = PktInfo {
            addr: "fd00::9".parse().unwrap(),
            ifindex: 3,
        };
        let mut buf = CmsgBuf::new();
        let mut w = buf.writer();
        w.pktinfo(&info).unwrap();
        w.udp_gro(1200).unwrap();
        // The buffer is sized exactly for these two: a third does not fit.
        assert_eq!(w.udp_segment(1), Err(CmsgFull));
        let n = w.len();
        assert_eq!(n, CMSG_BUF_LEN);
        let p = parse(&buf.as_bytes()[..n]);
        assert_eq!(p.pktinfo, Some(info));
        assert_eq!(p.gro_size, 1200);
    }

    #[test]
    fn unknown_messages_are_skipped() {
        let info = PktInfo {
            addr: "10.1.2.3".parse().unwrap(),
            ifindex: 2,
        };
        let p = round_trip(|w| {
            w.push(libc::SOL_SOCKET, libc::SO_TIMESTAMP, &[1, 2, 3])
                .unwrap();
            w.pktinfo(&info).unwrap();
        });
        assert_eq!(p.pktinfo, Some(info));
    }

    #[test]
    fn malformed_areas_do_not_panic() {
        let info = PktInfo {
            addr: "10.1.2.3".parse().unwrap(),
            ifindex: 2,
        };
        let mut buf = CmsgBuf::new();
        let mut w = buf.writer();
        w.pktinfo(&info).unwrap();
        w.udp_gro(1000).unwrap();
        let n = w.len();
        let good = buf.as_bytes()[..n].to_vec();
        // Every truncation keeps what fully fits and never reads past the end.
        for cut in 0..n {
            let p = parse(&good[..cut]);
            if cut < cmsg_len(IN_PKTINFO_LEN) {
                assert_eq!(p.pktinfo, None, "cut {cut}");
            }
        }
        // A length field pointing past the end, or below the header size, stops the walk.
        for bad_len in [0usize, 1, DATA_OFFSET - 1, n + 1, usize::MAX] {
            let mut b = good.clone();
            b[..size_of::<usize>()].copy_from_slice(&bad_len.to_ne_bytes());
            let p = parse(&b);
            assert_eq!(p.pktinfo, None);
        }
        // A pktinfo too short for its type is ignored.
        let p = round_trip(|w| {
            w.push(libc::IPPROTO_IPV6, libc::IPV6_PKTINFO, &[1; 8])
                .unwrap()
        });
        assert_eq!(p.pktinfo, None);
        // Random garbage.
        let mut x = 0x9e37_79b9_u32;
        for _ in 0..2000 {
            let mut b = [0u8; CMSG_BUF_LEN];
            for byte in b.iter_mut() {
                x ^= x << 13;
                x ^= x >> 17;
                x ^= x << 5;
                *byte = x as u8;
            }
            let _ = parse(&b);
        }
    }
}
