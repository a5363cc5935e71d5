//! Inner IP packets: zero-copy, read-only views of the IPv4 and IPv6 headers the tunnel routes
//! by.
//!
//! A transport message carries one IP packet. The device reads a few fields of it: the
//! destination (which peer a packet read from the TUN goes to), the source and the declared
//! length (whether a decrypted packet may come from the peer that sent it, and where its
//! padding starts), and the UDP ports of a whole datagram (the device's own datagrams coming
//! back through the TUN). These views are the one place those bytes are read.
//!
//! Parsing never panics. A view checks the version nibble and the length of its fixed header
//! once, at construction, and holds the header's fields as fixed-size array references, so
//! every accessor is a plain load. What depends on more than the fixed header is checked where
//! it is asked for: [`IpPacket::packet_len`] checks the declared length against the bytes
//! received, [`IpPacket::udp_ports`] that the UDP header is there. IPv6 extension headers are
//! not walked: the first next header is the protocol, so a datagram behind a hop-by-hop or
//! fragment header has no ports here (such packets are rare on this path and are simply not
//! recognised as datagrams).

use core::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Size of an IPv4 header without options (IHL 5).
pub const IPV4_HEADER_LEN: usize = 20;
/// Size of the IPv6 fixed header.
pub const IPV6_HEADER_LEN: usize = 40;
/// The protocol number of UDP (IPv4 protocol, IPv6 next header).
pub const PROTOCOL_UDP: u8 = 17;

/// IPv4 header bytes before the addresses: version and IHL, DSCP/ECN, total length,
/// identification, flags and fragment offset, TTL, protocol, checksum.
const V4_FIXED: usize = 12;
/// IPv6 header bytes before the addresses: version, traffic class and flow label, payload
/// length, next header, hop limit.
const V6_FIXED: usize = 8;
/// The flags-and-offset bits that make an IPv4 packet a fragment: More Fragments and the
/// 13-bit offset (Don't Fragment and the reserved bit do not).
const V4_FRAGMENT_MASK: u16 = 0x3fff;

/// Why bytes are not an IP packet, or not one whose length can be trusted.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum IpError {
    /// No bytes at all.
    Empty,
    /// The version nibble is neither 4 nor 6 (or not the one a typed parser handles).
    WrongVersion(u8),
    /// Fewer bytes than the version's fixed header.
    Truncated {
        /// The IP version (4 or 6).
        version: u8,
        /// Bytes received.
        len: usize,
    },
    /// An IPv4 header length (IHL) below the 20 bytes of the fixed header.
    BadHeaderLength {
        /// The header length in bytes (IHL × 4).
        header_len: usize,
    },
    /// A declared packet length shorter than the header or longer than the bytes received.
    BadLength {
        /// The packet length the header declares (IPv6: payload length + 40).
        declared: usize,
        /// Bytes received.
        len: usize,
    },
}

impl fmt::Display for IpError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            IpError::Empty => f.write_str("empty IP packet"),
            IpError::WrongVersion(v) => write!(f, "IP version {v} is not handled"),
            IpError::Truncated { version, len } => {
                write!(
                    f,
                    "IPv{version} packet of {len} bytes is shorter than its header"
                )
            }
            IpError::BadHeaderLength { header_len } => {
                write!(
                    f,
                    "IPv4 header length {header_len} is below {IPV4_HEADER_LEN}"
                )
            }
            IpError::BadLength { declared, len } => write!(
                f,
                "IP packet declares {declared} bytes: less than its header or more than the {len} received"
            ),
        }
    }
}

impl std::error::Error for IpError {}

/// The ports of a UDP datagram.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub struct UdpPorts {
    /// The source port.
    pub source: u16,
    /// The destination port.
    pub destination: u16,
}

impl UdpPorts {
    /// The ports at the start of `l4` (a UDP header's first four bytes), if it is long enough.
    #[inline]
    fn read(l4: Option<&[u8]>) -> Option<Self> {
        let [s0, s1, d0, d1] = *l4?.first_chunk::<4>()?;
        Some(UdpPorts {
            source: u16::from_be_bytes([s0, s1]),
            destination: u16::from_be_bytes([d0, d1]),
        })
    }
}

/// The version nibble of a packet.
#[inline]
fn version(bytes: &[u8]) -> Result<u8, IpError> {
    bytes.first().map(|b| b >> 4).ok_or(IpError::Empty)
}

/// A fixed header: `F` bytes of fields, then the source and destination addresses of `A`
/// bytes each (IPv4: 12 + 4 + 4, IPv6: 8 + 16 + 16).
#[derive(Copy, Clone, Debug)]
struct FixedHeader<'a, const F: usize, const A: usize> {
    fields: &'a [u8; F],
    source: &'a [u8; A],
    destination: &'a [u8; A],
}

impl<'a, const F: usize, const A: usize> FixedHeader<'a, F, A> {
    /// Splits the first `H` bytes (`F + 2A`, checked when it compiles) of a packet of
    /// `version`. Only the first check depends on the input; the splits of the array that
    /// follow are on known lengths, which the optimiser folds away.
    #[inline]
    fn parse<const H: usize>(bytes: &'a [u8], version: u8) -> Result<Self, IpError> {
        const {
            assert!(
                H == F + 2 * A,
                "a fixed header is its fields and two addresses"
            )
        };
        let truncated = IpError::Truncated {
            version,
            len: bytes.len(),
        };
        let header = bytes.first_chunk::<H>().ok_or(truncated)?;
        let (fields, addresses) = header.split_first_chunk::<F>().ok_or(truncated)?;
        let (source, rest) = addresses.split_first_chunk::<A>().ok_or(truncated)?;
        let destination = rest.first_chunk::<A>().ok_or(truncated)?;
        Ok(FixedHeader {
            fields,
            source,
            destination,
        })
    }
}

/// Checks a declared packet length against the header it must hold and the bytes received.
#[inline]
fn checked_len(declared: usize, header_len: usize, received: usize) -> Result<usize, IpError> {
    if declared < header_len || declared > received {
        return Err(IpError::BadLength {
            declared,
            len: received,
        });
    }
    Ok(declared)
}

/// An IPv4 packet: at least its 20-byte fixed header, version 4.
#[derive(Copy, Clone, Debug)]
pub struct Ipv4Packet<'a> {
    bytes: &'a [u8],
    header: FixedHeader<'a, V4_FIXED, 4>,
}

impl<'a> Ipv4Packet<'a> {
    /// Parses the fixed header: version 4, at least 20 bytes.
    #[inline]
    pub fn parse(bytes: &'a [u8]) -> Result<Self, IpError> {
        match version(bytes)? {
            4 => Self::parse_v4(bytes),
            v => Err(IpError::WrongVersion(v)),
        }
    }

    /// Parses bytes whose version nibble is known to be 4.
    #[inline]
    fn parse_v4(bytes: &'a [u8]) -> Result<Self, IpError> {
        let header = FixedHeader::parse::<IPV4_HEADER_LEN>(bytes, 4)?;
        Ok(Ipv4Packet { bytes, header })
    }

    /// The bytes the view was made from (the whole buffer, not cut to the declared length).
    #[inline]
    pub fn bytes(&self) -> &'a [u8] {
        self.bytes
    }

    /// The header length the IHL field declares, in bytes (options included). Unchecked: below
    /// 20 in a malformed packet.
    #[inline]
    pub fn header_len(&self) -> usize {
        usize::from(self.header.fields[0] & 0x0f) * 4
    }

    /// The total length field (header and payload), unchecked.
    #[inline]
    pub fn total_len(&self) -> u16 {
        u16::from_be_bytes([self.header.fields[2], self.header.fields[3]])
    }

    /// Whether the packet is a fragment of a larger one: More Fragments set or a nonzero
    /// offset (a first fragment is one too).
    #[inline]
    pub fn is_fragment(&self) -> bool {
        u16::from_be_bytes([self.header.fields[6], self.header.fields[7]]) & V4_FRAGMENT_MASK != 0
    }

    /// The protocol of the payload (17: UDP).
    #[inline]
    pub fn protocol(&self) -> u8 {
        self.header.fields[9]
    }

    /// The source address.
    #[inline]
    pub fn source(&self) -> Ipv4Addr {
        Ipv4Addr::from(*self.header.source)
    }

    /// The destination address.
    #[inline]
    pub fn destination(&self) -> Ipv4Addr {
        Ipv4Addr::from(*self.header.destination)
    }

    /// The header length, checked: at least the 20 bytes of the fixed header.
    #[inline]
    fn checked_header_len(&self) -> Result<usize, IpError> {
        match self.header_len() {
            header_len if header_len < IPV4_HEADER_LEN => {
                Err(IpError::BadHeaderLength { header_len })
            }
            header_len => Ok(header_len),
        }
    }

    /// The total length, checked: it holds the header and fits in the bytes received. The bytes
    /// past it are padding (a decrypted packet is padded to a multiple of 16).
    #[inline]
    pub fn packet_len(&self) -> Result<usize, IpError> {
        let header_len = self.checked_header_len()?;
        checked_len(usize::from(self.total_len()), header_len, self.bytes.len())
    }

    /// The ports of an unfragmented UDP datagram whose UDP header starts in the bytes received
    /// (after the options); `None` for another protocol, a fragment or a malformed header
    /// length.
    #[inline]
    pub fn udp_ports(&self) -> Option<UdpPorts> {
        if self.protocol() != PROTOCOL_UDP || self.is_fragment() {
            return None;
        }
        let header_len = self.checked_header_len().ok()?;
        UdpPorts::read(self.bytes.get(header_len..))
    }
}

/// An IPv6 packet: at least its 40-byte fixed header, version 6.
#[derive(Copy, Clone, Debug)]
pub struct Ipv6Packet<'a> {
    bytes: &'a [u8],
    header: FixedHeader<'a, V6_FIXED, 16>,
}

impl<'a> Ipv6Packet<'a> {
    /// Parses the fixed header: version 6, at least 40 bytes.
    #[inline]
    pub fn parse(bytes: &'a [u8]) -> Result<Self, IpError> {
        match version(bytes)? {
            6 => Self::parse_v6(bytes),
            v => Err(IpError::WrongVersion(v)),
        }
    }

    /// Parses bytes whose version nibble is known to be 6.
    #[inline]
    fn parse_v6(bytes: &'a [u8]) -> Result<Self, IpError> {
        let header = FixedHeader::parse::<IPV6_HEADER_LEN>(bytes, 6)?;
        Ok(Ipv6Packet { bytes, header })
    }

    /// The bytes the view was made from (the whole buffer, not cut to the declared length).
    #[inline]
    pub fn bytes(&self) -> &'a [u8] {
        self.bytes
    }

    /// The payload length field (what follows the fixed header), unchecked.
    #[inline]
    pub fn payload_len(&self) -> u16 {
        u16::from_be_bytes([self.header.fields[4], self.header.fields[5]])
    }

    /// The first next header: the payload's protocol when there are no extension headers.
    #[inline]
    pub fn next_header(&self) -> u8 {
        self.header.fields[6]
    }

    /// The source address.
    #[inline]
    pub fn source(&self) -> Ipv6Addr {
        Ipv6Addr::from(*self.header.source)
    }

    /// The destination address.
    #[inline]
    pub fn destination(&self) -> Ipv6Addr {
        Ipv6Addr::from(*self.header.destination)
    }

    /// The packet length (40 + payload length), checked: it fits in the bytes received. The
    /// bytes past it are padding.
    #[inline]
    pub fn packet_len(&self) -> Result<usize, IpError> {
        let declared = IPV6_HEADER_LEN + usize::from(self.payload_len());
        checked_len(declared, IPV6_HEADER_LEN, self.bytes.len())
    }

    /// The ports of a UDP datagram that directly follows the fixed header (no extension
    /// headers) and starts in the bytes received; `None` otherwise.
    #[inline]
    pub fn udp_ports(&self) -> Option<UdpPorts> {
        if self.next_header() != PROTOCOL_UDP {
            return None;
        }
        UdpPorts::read(self.bytes.get(IPV6_HEADER_LEN..))
    }
}

/// An IPv4 or IPv6 packet, by its version nibble.
#[derive(Copy, Clone, Debug)]
pub enum IpPacket<'a> {
    /// Version 4.
    V4(Ipv4Packet<'a>),
    /// Version 6.
    V6(Ipv6Packet<'a>),
}

impl<'a> IpPacket<'a> {
    /// Parses the fixed header of either version: at least 20 bytes for version 4, 40 for
    /// version 6. The declared length is not checked here (see [`packet_len`](Self::packet_len)):
    /// routing by destination needs only the fixed header.
    #[inline]
    pub fn parse(bytes: &'a [u8]) -> Result<Self, IpError> {
        match version(bytes)? {
            4 => Ipv4Packet::parse_v4(bytes).map(IpPacket::V4),
            6 => Ipv6Packet::parse_v6(bytes).map(IpPacket::V6),
            v => Err(IpError::WrongVersion(v)),
        }
    }

    /// The IP version: 4 or 6.
    #[inline]
    pub fn version(&self) -> u8 {
        match self {
            IpPacket::V4(_) => 4,
            IpPacket::V6(_) => 6,
        }
    }

    /// The source address.
    #[inline]
    pub fn source(&self) -> IpAddr {
        match self {
            IpPacket::V4(p) => p.source().into(),
            IpPacket::V6(p) => p.source().into(),
        }
    }

    /// The destination address.
    #[inline]
    pub fn destination(&self) -> IpAddr {
        match self {
            IpPacket::V4(p) => p.destination().into(),
            IpPacket::V6(p) => p.destination().into(),
        }
    }

    /// The payload's protocol: IPv4's protocol field, IPv6's first next header.
    #[inline]
    pub fn protocol(&self) -> u8 {
        match self {
            IpPacket::V4(p) => p.protocol(),
            IpPacket::V6(p) => p.next_header(),
        }
    }

    /// The declared packet length, checked against the header and the bytes received.
    #[inline]
    pub fn packet_len(&self) -> Result<usize, IpError> {
        match self {
            IpPacket::V4(p) => p.packet_len(),
            IpPacket::V6(p) => p.packet_len(),
        }
    }

    /// The ports of a whole UDP datagram (IPv4: not a fragment; IPv6: no extension headers).
    #[inline]
    pub fn udp_ports(&self) -> Option<UdpPorts> {
        match self {
            IpPacket::V4(p) => p.udp_ports(),
            IpPacket::V6(p) => p.udp_ports(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An IPv4 packet from 198.18.0.1 to 198.18.0.2: `ihl` words of header (options zero),
    /// `protocol`, flags and offset `frag`, then `payload`; the total length is the sum.
    fn v4(ihl: u8, protocol: u8, frag: u16, payload: &[u8]) -> Vec<u8> {
        let header_len = usize::from(ihl.max(5)) * 4;
        let mut p = vec![0u8; header_len];
        p[0] = 0x40 | ihl;
        let total = u16::try_from(header_len + payload.len()).unwrap();
        p[2..4].copy_from_slice(&total.to_be_bytes());
        p[6..8].copy_from_slice(&frag.to_be_bytes());
        p[8] = 64;
        p[9] = protocol;
        p[12..16].copy_from_slice(&[198, 18, 0, 1]);
        p[16..20].copy_from_slice(&[198, 18, 0, 2]);
        p.extend_from_slice(payload);
        p
    }

    /// An IPv6 packet from fd00:18::1 to fd00:18::2 with first next header `next` and `payload`.
    fn v6(next: u8, payload: &[u8]) -> Vec<u8> {
        let mut p = vec![0x60, 0, 0, 0];
        let len = u16::try_from(payload.len()).unwrap();
        p.extend_from_slice(&len.to_be_bytes());
        p.extend_from_slice(&[next, 64]);
        p.extend_from_slice(&[0xfd, 0, 0, 0x18, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]);
        p.extend_from_slice(&[0xfd, 0, 0, 0x18, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2]);
        p.extend_from_slice(payload);
        p
    }

    /// A UDP header from `sport` to `dport` with an empty payload.
    fn udp(sport: u16, dport: u16) -> Vec<u8> {
        let mut u = Vec::new();
        u.extend_from_slice(&sport.to_be_bytes());
        u.extend_from_slice(&dport.to_be_bytes());
        u.extend_from_slice(&[0, 8, 0, 0]);
        u
    }

    fn ports(source: u16, destination: u16) -> Option<UdpPorts> {
        Some(UdpPorts {
            source,
            destination,
        })
    }

    #[test]
    fn ipv4_header_fields() {
        let bytes = v4(5, PROTOCOL_UDP, 0x4000, &udp(51820, 7));
        let p = Ipv4Packet::parse(&bytes).unwrap();
        assert_eq!(p.source(), Ipv4Addr::new(198, 18, 0, 1));
        assert_eq!(p.destination(), Ipv4Addr::new(198, 18, 0, 2));
        assert_eq!((p.header_len(), p.total_len()), (20, 28));
        assert_eq!(p.protocol(), PROTOCOL_UDP);
        assert!(!p.is_fragment(), "Don't Fragment alone is no fragment");
        assert_eq!(p.packet_len(), Ok(28));
        let ip = IpPacket::parse(&bytes).unwrap();
        assert_eq!(ip.version(), 4);
        assert_eq!(ip.source(), IpAddr::from([198, 18, 0, 1]));
        assert_eq!(ip.destination(), IpAddr::from([198, 18, 0, 2]));
    }

    #[test]
    fn ipv6_header_fields() {
        let bytes = v6(PROTOCOL_UDP, &udp(51820, 7));
        let p = Ipv6Packet::parse(&bytes).unwrap();
        assert_eq!(p.source(), "fd00:18::1".parse::<Ipv6Addr>().unwrap());
        assert_eq!(p.destination(), "fd00:18::2".parse::<Ipv6Addr>().unwrap());
        assert_eq!((p.payload_len(), p.next_header()), (8, PROTOCOL_UDP));
        assert_eq!(p.packet_len(), Ok(48));
        let ip = IpPacket::parse(&bytes).unwrap();
        assert_eq!(ip.version(), 6);
        assert_eq!(ip.protocol(), PROTOCOL_UDP);
        assert_eq!(ip.destination(), "fd00:18::2".parse::<IpAddr>().unwrap());
    }

    #[test]
    fn short_empty_and_unknown_packets_are_refused() {
        assert_eq!(IpPacket::parse(&[]).unwrap_err(), IpError::Empty);
        let short = IpError::Truncated {
            version: 4,
            len: 19,
        };
        assert_eq!(IpPacket::parse(&v4(5, 6, 0, &[])[..19]).unwrap_err(), short);
        let short = IpError::Truncated {
            version: 6,
            len: 39,
        };
        assert_eq!(IpPacket::parse(&v6(6, &[])[..39]).unwrap_err(), short);
        assert_eq!(
            IpPacket::parse(&[0x50; 60]).unwrap_err(),
            IpError::WrongVersion(5)
        );
        assert!(Ipv4Packet::parse(&v6(6, &[])).is_err());
        assert!(Ipv6Packet::parse(&v4(5, 6, 0, &[0; 20])).is_err());
    }

    #[test]
    fn every_prefix_parses_exactly_when_it_holds_the_fixed_header() {
        for (bytes, fixed) in [
            (v4(6, PROTOCOL_UDP, 0, &udp(1, 2)), IPV4_HEADER_LEN),
            (v6(PROTOCOL_UDP, &udp(1, 2)), IPV6_HEADER_LEN),
        ] {
            for n in 0..=bytes.len() {
                let p = IpPacket::parse(&bytes[..n]);
                assert_eq!(p.is_ok(), n >= fixed, "prefix of {n} bytes");
                if let Ok(p) = p {
                    let len = p.packet_len();
                    assert_eq!(len.is_ok(), n == bytes.len(), "prefix of {n} bytes");
                }
            }
        }
    }

    #[test]
    fn ipv4_declared_length_must_hold_the_header_and_fit_the_bytes() {
        let mut p = v4(5, 6, 0, &[0; 20]);
        assert_eq!(IpPacket::parse(&p).unwrap().packet_len(), Ok(40));
        // Padding after the packet is fine: the declared length is what counts.
        p[2..4].copy_from_slice(&28u16.to_be_bytes());
        assert_eq!(IpPacket::parse(&p).unwrap().packet_len(), Ok(28));
        p[2..4].copy_from_slice(&41u16.to_be_bytes());
        let long = IpError::BadLength {
            declared: 41,
            len: 40,
        };
        assert_eq!(IpPacket::parse(&p).unwrap().packet_len(), Err(long));
        p[2..4].copy_from_slice(&19u16.to_be_bytes());
        assert!(IpPacket::parse(&p).unwrap().packet_len().is_err());
        // Options: the total length must hold all 24 bytes of header.
        let mut p = v4(6, 6, 0, &[0; 16]);
        p[2..4].copy_from_slice(&23u16.to_be_bytes());
        assert!(IpPacket::parse(&p).unwrap().packet_len().is_err());
        p[2..4].copy_from_slice(&24u16.to_be_bytes());
        assert_eq!(IpPacket::parse(&p).unwrap().packet_len(), Ok(24));
    }

    #[test]
    fn ipv6_declared_length_must_fit_the_bytes() {
        let mut p = v6(6, &[0; 8]);
        assert_eq!(IpPacket::parse(&p).unwrap().packet_len(), Ok(48));
        p[4..6].copy_from_slice(&0u16.to_be_bytes());
        assert_eq!(IpPacket::parse(&p).unwrap().packet_len(), Ok(40));
        p[4..6].copy_from_slice(&9u16.to_be_bytes());
        let long = IpError::BadLength {
            declared: 49,
            len: 48,
        };
        assert_eq!(IpPacket::parse(&p).unwrap().packet_len(), Err(long));
    }

    #[test]
    fn an_ipv4_header_length_below_twenty_bytes_is_malformed() {
        for ihl in 0..5 {
            let mut p = v4(5, PROTOCOL_UDP, 0, &udp(1, 2));
            p[0] = 0x40 | ihl;
            let p = Ipv4Packet::parse(&p).unwrap();
            let bad = IpError::BadHeaderLength {
                header_len: usize::from(ihl) * 4,
            };
            assert_eq!(p.packet_len(), Err(bad), "IHL {ihl}");
            assert_eq!(p.udp_ports(), None, "IHL {ihl}");
        }
    }

    #[test]
    fn udp_ports_of_whole_datagrams() {
        let p = v4(5, PROTOCOL_UDP, 0, &udp(51820, 7));
        assert_eq!(IpPacket::parse(&p).unwrap().udp_ports(), ports(51820, 7));
        // The UDP header starts after the options.
        let p = v4(7, PROTOCOL_UDP, 0, &udp(51820, 7));
        assert_eq!(IpPacket::parse(&p).unwrap().udp_ports(), ports(51820, 7));
        let p = v6(PROTOCOL_UDP, &udp(51820, 7));
        assert_eq!(IpPacket::parse(&p).unwrap().udp_ports(), ports(51820, 7));
    }

    #[test]
    fn fragments_and_other_protocols_have_no_ports() {
        for (f, fragment) in [
            (1, true),
            (0x2000, true),
            (0x1fff, true),
            (0x6001, true),
            (0x8000, false),
        ] {
            let bytes = v4(5, PROTOCOL_UDP, f, &udp(1, 2));
            let p = Ipv4Packet::parse(&bytes).unwrap();
            assert_eq!(p.is_fragment(), fragment, "flags and offset {f:#06x}");
            let want = if fragment { None } else { ports(1, 2) };
            assert_eq!(p.udp_ports(), want, "flags and offset {f:#06x}");
        }
        let tcp = v4(5, 6, 0, &udp(1, 2));
        assert_eq!(IpPacket::parse(&tcp).unwrap().udp_ports(), None);
        // IPv6: a hop-by-hop header first is not looked past.
        let hop_by_hop = v6(0, &udp(1, 2));
        assert_eq!(IpPacket::parse(&hop_by_hop).unwrap().udp_ports(), None);
    }

    #[test]
    fn a_udp_header_cut_short_has_no_ports() {
        let p = v4(5, PROTOCOL_UDP, 0, &udp(1, 2));
        assert_eq!(IpPacket::parse(&p[..23]).unwrap().udp_ports(), None);
        assert_eq!(IpPacket::parse(&p[..24]).unwrap().udp_ports(), ports(1, 2));
        let p = v4(15, PROTOCOL_UDP, 0, &[]);
        assert_eq!(IpPacket::parse(&p).unwrap().udp_ports(), None);
        let p = v6(PROTOCOL_UDP, &udp(1, 2));
        assert_eq!(IpPacket::parse(&p[..43]).unwrap().udp_ports(), None);
    }

    #[test]
    fn the_protocol_is_read_from_either_version() {
        assert_eq!(IpPacket::parse(&v4(5, 6, 0, &[])).unwrap().protocol(), 6);
        assert_eq!(IpPacket::parse(&v6(58, &[])).unwrap().protocol(), 58);
    }

    #[test]
    fn errors_say_what_is_wrong() {
        let e = IpError::BadLength {
            declared: 41,
            len: 40,
        };
        assert!(e.to_string().contains("41") && e.to_string().contains("40"));
        assert!(IpError::WrongVersion(5).to_string().contains('5'));
    }
}
