//! IP packets: zero-copy views of the IPv4 and IPv6 headers, read-only ([`Ipv4Packet`],
//! [`Ipv6Packet`], [`IpPacket`]) and writable ([`Ipv4PacketMut`], [`Ipv6PacketMut`],
//! [`IpPacketMut`]).
//!
//! The device reads a few fields of the inner packets: the destination (which peer a packet
//! read from the TUN goes to), the source and the declared length (whether a decrypted packet
//! may come from the peer that sent it, and where its padding starts), and the UDP ports of a
//! whole datagram (the device's own datagrams coming back through the TUN). The TUN's offload
//! code reads the rest of the fixed header (GRO compares TTL, ToS and the fragment bits before
//! it merges) and rewrites the lengths and checksums of the packets it merges.
//!
//! Parsing never panics. A view checks the version nibble and the length of its fixed header
//! once, at construction, and holds the header as a fixed-size array reference, so every
//! accessor is a plain load. What depends on more than the fixed header is checked where it is
//! asked for: [`IpPacket::packet_len`] checks the declared length against the bytes received,
//! [`IpPacket::payload`] the same and returns what follows the header, [`IpPacket::udp_ports`]
//! that the UDP header is there. IPv6 extension headers are not walked: the first next header
//! is the protocol, so a datagram behind a hop-by-hop or fragment header has no ports here (such
//! packets are rare on this path and are simply not recognised as datagrams).

use core::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use crate::{get16, set16};

/// Size of an IPv4 header without options (IHL 5).
pub const IPV4_HEADER_LEN: usize = 20;
/// Size of the IPv6 fixed header.
pub const IPV6_HEADER_LEN: usize = 40;
/// The protocol number of TCP (IPv4 protocol, IPv6 next header).
pub const PROTOCOL_TCP: u8 = 6;
/// The protocol number of UDP (IPv4 protocol, IPv6 next header).
pub const PROTOCOL_UDP: u8 = 17;

/// The IPv4 flags (the top three bits of the flags-and-offset field): Don't Fragment.
pub const IPV4_FLAG_DF: u8 = 0b010;
/// The IPv4 flags: More Fragments.
pub const IPV4_FLAG_MF: u8 = 0b001;
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
    /// An IPv4 header length (options included) longer than the bytes received.
    HeaderPastEnd {
        /// The header length in bytes (IHL × 4).
        header_len: usize,
        /// Bytes received.
        len: usize,
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
            IpError::HeaderPastEnd { header_len, len } => write!(
                f,
                "IPv4 header of {header_len} bytes is longer than the {len} received"
            ),
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

/// The version nibble of a packet (the high four bits of its first byte), whatever it is; an
/// error only for no bytes at all.
#[inline]
pub fn version(bytes: &[u8]) -> Result<u8, IpError> {
    bytes.first().map(|b| b >> 4).ok_or(IpError::Empty)
}

/// The packet length the first bytes declare, read from the fewest bytes that hold it: IPv4's
/// total length (4 bytes), IPv6's payload length plus 40 (6 bytes); `None` for fewer bytes or
/// another version. Nothing else is checked: this is for a reader that asks whether a read was
/// cut short (it declares more than arrived) before anything else is known of the packet.
#[inline]
pub fn declared_len(bytes: &[u8]) -> Option<usize> {
    match version(bytes).ok()? {
        4 => {
            let [_, _, hi, lo] = *bytes.first_chunk::<4>()?;
            Some(usize::from(u16::from_be_bytes([hi, lo])))
        }
        6 => {
            let [_, _, _, _, hi, lo] = *bytes.first_chunk::<6>()?;
            Some(IPV6_HEADER_LEN + usize::from(u16::from_be_bytes([hi, lo])))
        }
        _ => None,
    }
}

/// The first `H` bytes of `bytes` as an array, or the error for a packet of `version` too
/// short for its fixed header.
#[inline]
fn fixed<const H: usize>(bytes: &[u8], version: u8) -> Result<&[u8; H], IpError> {
    bytes.first_chunk::<H>().ok_or(IpError::Truncated {
        version,
        len: bytes.len(),
    })
}

/// [`fixed`] for writing: the fixed header and the bytes after it.
#[inline]
fn fixed_mut<const H: usize>(
    bytes: &mut [u8],
    version: u8,
) -> Result<(&mut [u8; H], &mut [u8]), IpError> {
    let len = bytes.len();
    bytes
        .split_first_chunk_mut::<H>()
        .ok_or(IpError::Truncated { version, len })
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

// The addresses of the fixed headers, as arrays cut out by patterns (sizes checked when it
// compiles, nothing to fail at run time).

/// IPv4 source (bytes 12..16) and destination (16..20).
#[inline(always)]
fn v4_addresses(h: &[u8; IPV4_HEADER_LEN]) -> (&[u8; 4], &[u8; 4]) {
    let [_, _, _, _, _, _, _, _, _, _, _, _, source @ .., _, _, _, _] = h;
    let [_, _, _, _, _, _, _, _, _, _, _, _, _, _, _, _, destination @ ..] = h;
    (source, destination)
}

#[inline(always)]
fn v4_source_mut(h: &mut [u8; IPV4_HEADER_LEN]) -> &mut [u8; 4] {
    let [_, _, _, _, _, _, _, _, _, _, _, _, source @ .., _, _, _, _] = h;
    source
}

#[inline(always)]
fn v4_destination_mut(h: &mut [u8; IPV4_HEADER_LEN]) -> &mut [u8; 4] {
    let [_, _, _, _, _, _, _, _, _, _, _, _, _, _, _, _, destination @ ..] = h;
    destination
}

/// IPv6 source (bytes 8..24) and destination (24..40).
#[inline(always)]
fn v6_addresses(h: &[u8; IPV6_HEADER_LEN]) -> (&[u8; 16], &[u8; 16]) {
    #[rustfmt::skip]
    let [_, _, _, _, _, _, _, _, source @ .., _, _, _, _, _, _, _, _, _, _, _, _, _, _, _, _] = h;
    #[rustfmt::skip]
    let [_, _, _, _, _, _, _, _, _, _, _, _, _, _, _, _, _, _, _, _, _, _, _, _, destination @ ..] = h;
    (source, destination)
}

#[inline(always)]
fn v6_source_mut(h: &mut [u8; IPV6_HEADER_LEN]) -> &mut [u8; 16] {
    #[rustfmt::skip]
    let [_, _, _, _, _, _, _, _, source @ .., _, _, _, _, _, _, _, _, _, _, _, _, _, _, _, _] = h;
    source
}

#[inline(always)]
fn v6_destination_mut(h: &mut [u8; IPV6_HEADER_LEN]) -> &mut [u8; 16] {
    #[rustfmt::skip]
    let [_, _, _, _, _, _, _, _, _, _, _, _, _, _, _, _, _, _, _, _, _, _, _, _, destination @ ..] = h;
    destination
}

/// The scalar fields of an IPv4 fixed header, for a view with a `header: &[u8; 20]` (shared or
/// mutable).
macro_rules! ipv4_fields {
    () => {
        /// The header length the IHL field declares, in bytes (options included). Unchecked:
        /// below 20 in a malformed packet.
        #[inline]
        pub fn header_len(&self) -> usize {
            usize::from(self.header[0] & 0x0f) * 4
        }

        /// The DSCP and ECN bits (the former type-of-service byte).
        #[inline]
        pub fn dscp_ecn(&self) -> u8 {
            self.header[1]
        }

        /// The total length field (header and payload), unchecked.
        #[inline]
        pub fn total_len(&self) -> u16 {
            get16::<2, IPV4_HEADER_LEN>(self.header)
        }

        /// The identification field.
        #[inline]
        pub fn identification(&self) -> u16 {
            get16::<4, IPV4_HEADER_LEN>(self.header)
        }

        /// The three flag bits: reserved, Don't Fragment ([`IPV4_FLAG_DF`]), More Fragments
        /// ([`IPV4_FLAG_MF`]).
        #[inline]
        pub fn flags(&self) -> u8 {
            self.header[6] >> 5
        }

        /// The fragment offset, in 8-byte units.
        #[inline]
        pub fn fragment_offset(&self) -> u16 {
            get16::<6, IPV4_HEADER_LEN>(self.header) & 0x1fff
        }

        /// Whether the packet is a fragment of a larger one: More Fragments set or a nonzero
        /// offset (a first fragment is one too).
        #[inline]
        pub fn is_fragment(&self) -> bool {
            get16::<6, IPV4_HEADER_LEN>(self.header) & V4_FRAGMENT_MASK != 0
        }

        /// The time to live.
        #[inline]
        pub fn ttl(&self) -> u8 {
            self.header[8]
        }

        /// The protocol of the payload (6: TCP, 17: UDP).
        #[inline]
        pub fn protocol(&self) -> u8 {
            self.header[9]
        }

        /// The header checksum field.
        #[inline]
        pub fn header_checksum(&self) -> u16 {
            get16::<10, IPV4_HEADER_LEN>(self.header)
        }

        /// The source address.
        #[inline]
        pub fn source(&self) -> Ipv4Addr {
            Ipv4Addr::from(*v4_addresses(self.header).0)
        }

        /// The destination address.
        #[inline]
        pub fn destination(&self) -> Ipv4Addr {
            Ipv4Addr::from(*v4_addresses(self.header).1)
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
    };
}

/// The scalar fields of an IPv6 fixed header, for a view with a `header: &[u8; 40]`.
macro_rules! ipv6_fields {
    () => {
        /// The traffic class (DSCP and ECN).
        #[inline]
        pub fn traffic_class(&self) -> u8 {
            (self.header[0] << 4) | (self.header[1] >> 4)
        }

        /// The 20-bit flow label.
        #[inline]
        pub fn flow_label(&self) -> u32 {
            u32::from_be_bytes([0, self.header[1] & 0x0f, self.header[2], self.header[3]])
        }

        /// The payload length field (what follows the fixed header), unchecked.
        #[inline]
        pub fn payload_len(&self) -> u16 {
            get16::<4, IPV6_HEADER_LEN>(self.header)
        }

        /// The first next header: the payload's protocol when there are no extension headers.
        #[inline]
        pub fn next_header(&self) -> u8 {
            self.header[6]
        }

        /// The hop limit.
        #[inline]
        pub fn hop_limit(&self) -> u8 {
            self.header[7]
        }

        /// The source address.
        #[inline]
        pub fn source(&self) -> Ipv6Addr {
            Ipv6Addr::from(*v6_addresses(self.header).0)
        }

        /// The destination address.
        #[inline]
        pub fn destination(&self) -> Ipv6Addr {
            Ipv6Addr::from(*v6_addresses(self.header).1)
        }
    };
}

/// An IPv4 packet: at least its 20-byte fixed header, version 4.
#[derive(Copy, Clone, Debug)]
pub struct Ipv4Packet<'a> {
    bytes: &'a [u8],
    header: &'a [u8; IPV4_HEADER_LEN],
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
        let header = fixed::<IPV4_HEADER_LEN>(bytes, 4)?;
        Ok(Ipv4Packet { bytes, header })
    }

    /// The bytes the view was made from (the whole buffer, not cut to the declared length).
    #[inline]
    pub fn bytes(&self) -> &'a [u8] {
        self.bytes
    }

    ipv4_fields!();

    /// The source address as bytes (what a pseudo-header sum is taken over).
    #[inline]
    pub fn source_bytes(&self) -> &'a [u8; 4] {
        v4_addresses(self.header).0
    }

    /// The destination address as bytes.
    #[inline]
    pub fn destination_bytes(&self) -> &'a [u8; 4] {
        v4_addresses(self.header).1
    }

    /// The whole header, options included (what the header checksum covers), checked: at least
    /// 20 bytes and within the bytes received.
    #[inline]
    pub fn header_bytes(&self) -> Result<&'a [u8], IpError> {
        let header_len = self.checked_header_len()?;
        self.bytes.get(..header_len).ok_or(IpError::HeaderPastEnd {
            header_len,
            len: self.bytes.len(),
        })
    }

    /// The options: the header bytes after the fixed 20, checked as [`header_bytes`](Self::header_bytes).
    #[inline]
    pub fn options(&self) -> Result<&'a [u8], IpError> {
        Ok(self
            .header_bytes()?
            .get(IPV4_HEADER_LEN..)
            .unwrap_or_default())
    }

    /// The total length, checked: it holds the header and fits in the bytes received. The bytes
    /// past it are padding (a decrypted packet is padded to a multiple of 16).
    #[inline]
    pub fn packet_len(&self) -> Result<usize, IpError> {
        let header_len = self.checked_header_len()?;
        checked_len(usize::from(self.total_len()), header_len, self.bytes.len())
    }

    /// The payload: the bytes after the header (options included) up to the total length,
    /// checked as [`packet_len`](Self::packet_len).
    #[inline]
    pub fn payload(&self) -> Result<&'a [u8], IpError> {
        let header_len = self.checked_header_len()?;
        let len = checked_len(usize::from(self.total_len()), header_len, self.bytes.len())?;
        Ok(self.bytes.get(header_len..len).unwrap_or_default())
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
    header: &'a [u8; IPV6_HEADER_LEN],
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
        let header = fixed::<IPV6_HEADER_LEN>(bytes, 6)?;
        Ok(Ipv6Packet { bytes, header })
    }

    /// The bytes the view was made from (the whole buffer, not cut to the declared length).
    #[inline]
    pub fn bytes(&self) -> &'a [u8] {
        self.bytes
    }

    ipv6_fields!();

    /// The source address as bytes (what a pseudo-header sum is taken over).
    #[inline]
    pub fn source_bytes(&self) -> &'a [u8; 16] {
        v6_addresses(self.header).0
    }

    /// The destination address as bytes.
    #[inline]
    pub fn destination_bytes(&self) -> &'a [u8; 16] {
        v6_addresses(self.header).1
    }

    /// The packet length (40 + payload length), checked: it fits in the bytes received. The
    /// bytes past it are padding.
    #[inline]
    pub fn packet_len(&self) -> Result<usize, IpError> {
        let declared = IPV6_HEADER_LEN + usize::from(self.payload_len());
        checked_len(declared, IPV6_HEADER_LEN, self.bytes.len())
    }

    /// The payload: the bytes after the fixed header (extension headers included) up to the
    /// declared length, checked as [`packet_len`](Self::packet_len).
    #[inline]
    pub fn payload(&self) -> Result<&'a [u8], IpError> {
        let len = self.packet_len()?;
        Ok(self.bytes.get(IPV6_HEADER_LEN..len).unwrap_or_default())
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

    /// The source address as bytes: 4 or 16.
    #[inline]
    pub fn source_bytes(&self) -> &'a [u8] {
        match self {
            IpPacket::V4(p) => p.source_bytes(),
            IpPacket::V6(p) => p.source_bytes(),
        }
    }

    /// The destination address as bytes: 4 or 16.
    #[inline]
    pub fn destination_bytes(&self) -> &'a [u8] {
        match self {
            IpPacket::V4(p) => p.destination_bytes(),
            IpPacket::V6(p) => p.destination_bytes(),
        }
    }

    /// The header length: IPv4's IHL × 4 (unchecked, as [`Ipv4Packet::header_len`]), IPv6's
    /// fixed 40 bytes.
    #[inline]
    pub fn header_len(&self) -> usize {
        match self {
            IpPacket::V4(p) => p.header_len(),
            IpPacket::V6(_) => IPV6_HEADER_LEN,
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

    /// What follows the header (IPv4: its options; IPv6: the fixed header) up to the declared
    /// length, checked as [`packet_len`](Self::packet_len).
    #[inline]
    pub fn payload(&self) -> Result<&'a [u8], IpError> {
        match self {
            IpPacket::V4(p) => p.payload(),
            IpPacket::V6(p) => p.payload(),
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

/// An IPv4 packet to rewrite: at least its 20-byte fixed header, version 4. The fields read as
/// in [`Ipv4Packet`]; the setters store at constant offsets of the fixed header.
#[derive(Debug)]
pub struct Ipv4PacketMut<'a> {
    header: &'a mut [u8; IPV4_HEADER_LEN],
    /// Everything after the fixed header: options, payload, padding.
    rest: &'a mut [u8],
}

impl<'a> Ipv4PacketMut<'a> {
    /// Parses the fixed header: version 4, at least 20 bytes.
    #[inline]
    pub fn parse(bytes: &'a mut [u8]) -> Result<Self, IpError> {
        match version(bytes)? {
            4 => Self::parse_v4(bytes),
            v => Err(IpError::WrongVersion(v)),
        }
    }

    #[inline]
    fn parse_v4(bytes: &'a mut [u8]) -> Result<Self, IpError> {
        let (header, rest) = fixed_mut::<IPV4_HEADER_LEN>(bytes, 4)?;
        Ok(Ipv4PacketMut { header, rest })
    }

    ipv4_fields!();

    /// The source address as bytes.
    #[inline]
    pub fn source_bytes(&self) -> &[u8; 4] {
        v4_addresses(self.header).0
    }

    /// The destination address as bytes.
    #[inline]
    pub fn destination_bytes(&self) -> &[u8; 4] {
        v4_addresses(self.header).1
    }

    /// The fixed header's 20 bytes. With [`options`](Self::options) after them, what the
    /// header checksum covers (both have even lengths, so a ones'-complement sum may be taken
    /// over one and continued over the other).
    #[inline]
    pub fn header(&self) -> &[u8; IPV4_HEADER_LEN] {
        self.header
    }

    /// The options (the header bytes after the fixed 20), checked: the header length is at
    /// least 20 and within the bytes. Not checked against the total length, which a writer may
    /// have set to more than these bytes (GRO sets a merged length on its first packet).
    #[inline]
    pub fn options(&self) -> Result<&[u8], IpError> {
        let header_len = self.checked_header_len()?;
        let len = IPV4_HEADER_LEN + self.rest.len();
        self.rest
            .get(..header_len - IPV4_HEADER_LEN)
            .ok_or(IpError::HeaderPastEnd { header_len, len })
    }

    /// The total length, checked as [`Ipv4Packet::packet_len`].
    #[inline]
    pub fn packet_len(&self) -> Result<usize, IpError> {
        let header_len = self.checked_header_len()?;
        let received = IPV4_HEADER_LEN + self.rest.len();
        checked_len(usize::from(self.total_len()), header_len, received)
    }

    /// The payload to rewrite, checked as [`Ipv4Packet::payload`].
    #[inline]
    pub fn payload_mut(&mut self) -> Result<&mut [u8], IpError> {
        let (start, end) = self.payload_range()?;
        Ok(self.rest.get_mut(start..end).unwrap_or_default())
    }

    /// The payload to rewrite, for as long as the bytes are borrowed (the view is used up).
    #[inline]
    pub fn into_payload(self) -> Result<&'a mut [u8], IpError> {
        let (start, end) = self.payload_range()?;
        Ok(self.rest.get_mut(start..end).unwrap_or_default())
    }

    /// The payload's range in `rest`.
    #[inline]
    fn payload_range(&self) -> Result<(usize, usize), IpError> {
        let header_len = self.checked_header_len()?;
        let len = self.packet_len()?;
        Ok((header_len - IPV4_HEADER_LEN, len - IPV4_HEADER_LEN))
    }

    /// Sets the DSCP and ECN bits.
    #[inline]
    pub fn set_dscp_ecn(&mut self, v: u8) {
        self.header[1] = v;
    }

    /// Sets the total length field.
    #[inline]
    pub fn set_total_len(&mut self, len: u16) {
        set16::<2, IPV4_HEADER_LEN>(self.header, len);
    }

    /// Sets the identification field.
    #[inline]
    pub fn set_identification(&mut self, id: u16) {
        set16::<4, IPV4_HEADER_LEN>(self.header, id);
    }

    /// Sets the three flag bits (the low three bits of `flags`), keeping the offset.
    #[inline]
    pub fn set_flags(&mut self, flags: u8) {
        self.header[6] = (self.header[6] & 0x1f) | ((flags & 0b111) << 5);
    }

    /// Sets the 13-bit fragment offset (in 8-byte units), keeping the flags.
    #[inline]
    pub fn set_fragment_offset(&mut self, offset: u16) {
        let v = (get16::<6, IPV4_HEADER_LEN>(self.header) & !0x1fff) | (offset & 0x1fff);
        set16::<6, IPV4_HEADER_LEN>(self.header, v);
    }

    /// Sets the time to live.
    #[inline]
    pub fn set_ttl(&mut self, ttl: u8) {
        self.header[8] = ttl;
    }

    /// Sets the protocol.
    #[inline]
    pub fn set_protocol(&mut self, protocol: u8) {
        self.header[9] = protocol;
    }

    /// Sets the header checksum field.
    #[inline]
    pub fn set_header_checksum(&mut self, checksum: u16) {
        set16::<10, IPV4_HEADER_LEN>(self.header, checksum);
    }

    /// Sets the source address.
    #[inline]
    pub fn set_source(&mut self, addr: Ipv4Addr) {
        *v4_source_mut(self.header) = addr.octets();
    }

    /// Sets the destination address.
    #[inline]
    pub fn set_destination(&mut self, addr: Ipv4Addr) {
        *v4_destination_mut(self.header) = addr.octets();
    }
}

/// An IPv6 packet to rewrite: at least its 40-byte fixed header, version 6.
#[derive(Debug)]
pub struct Ipv6PacketMut<'a> {
    header: &'a mut [u8; IPV6_HEADER_LEN],
    /// Everything after the fixed header.
    rest: &'a mut [u8],
}

impl<'a> Ipv6PacketMut<'a> {
    /// Parses the fixed header: version 6, at least 40 bytes.
    #[inline]
    pub fn parse(bytes: &'a mut [u8]) -> Result<Self, IpError> {
        match version(bytes)? {
            6 => Self::parse_v6(bytes),
            v => Err(IpError::WrongVersion(v)),
        }
    }

    #[inline]
    fn parse_v6(bytes: &'a mut [u8]) -> Result<Self, IpError> {
        let (header, rest) = fixed_mut::<IPV6_HEADER_LEN>(bytes, 6)?;
        Ok(Ipv6PacketMut { header, rest })
    }

    ipv6_fields!();

    /// The source address as bytes.
    #[inline]
    pub fn source_bytes(&self) -> &[u8; 16] {
        v6_addresses(self.header).0
    }

    /// The destination address as bytes.
    #[inline]
    pub fn destination_bytes(&self) -> &[u8; 16] {
        v6_addresses(self.header).1
    }

    /// The packet length, checked as [`Ipv6Packet::packet_len`].
    #[inline]
    pub fn packet_len(&self) -> Result<usize, IpError> {
        let declared = IPV6_HEADER_LEN + usize::from(self.payload_len());
        checked_len(declared, IPV6_HEADER_LEN, IPV6_HEADER_LEN + self.rest.len())
    }

    /// The payload to rewrite, checked as [`Ipv6Packet::payload`].
    #[inline]
    pub fn payload_mut(&mut self) -> Result<&mut [u8], IpError> {
        let len = self.packet_len()? - IPV6_HEADER_LEN;
        Ok(self.rest.get_mut(..len).unwrap_or_default())
    }

    /// The payload to rewrite, for as long as the bytes are borrowed (the view is used up).
    #[inline]
    pub fn into_payload(self) -> Result<&'a mut [u8], IpError> {
        let len = self.packet_len()? - IPV6_HEADER_LEN;
        Ok(self.rest.get_mut(..len).unwrap_or_default())
    }

    /// Sets the traffic class, keeping the version and the flow label.
    #[inline]
    pub fn set_traffic_class(&mut self, tc: u8) {
        self.header[0] = (self.header[0] & 0xf0) | (tc >> 4);
        self.header[1] = (self.header[1] & 0x0f) | (tc << 4);
    }

    /// Sets the payload length field.
    #[inline]
    pub fn set_payload_len(&mut self, len: u16) {
        set16::<4, IPV6_HEADER_LEN>(self.header, len);
    }

    /// Sets the first next header.
    #[inline]
    pub fn set_next_header(&mut self, next: u8) {
        self.header[6] = next;
    }

    /// Sets the hop limit.
    #[inline]
    pub fn set_hop_limit(&mut self, hops: u8) {
        self.header[7] = hops;
    }

    /// Sets the source address.
    #[inline]
    pub fn set_source(&mut self, addr: Ipv6Addr) {
        *v6_source_mut(self.header) = addr.octets();
    }

    /// Sets the destination address.
    #[inline]
    pub fn set_destination(&mut self, addr: Ipv6Addr) {
        *v6_destination_mut(self.header) = addr.octets();
    }
}

/// An IPv4 or IPv6 packet to rewrite, by its version nibble.
#[derive(Debug)]
pub enum IpPacketMut<'a> {
    /// Version 4.
    V4(Ipv4PacketMut<'a>),
    /// Version 6.
    V6(Ipv6PacketMut<'a>),
}

impl<'a> IpPacketMut<'a> {
    /// Parses the fixed header of either version, as [`IpPacket::parse`].
    #[inline]
    pub fn parse(bytes: &'a mut [u8]) -> Result<Self, IpError> {
        match version(bytes)? {
            4 => Ipv4PacketMut::parse_v4(bytes).map(IpPacketMut::V4),
            6 => Ipv6PacketMut::parse_v6(bytes).map(IpPacketMut::V6),
            v => Err(IpError::WrongVersion(v)),
        }
    }

    /// The header length, as [`IpPacket::header_len`].
    #[inline]
    pub fn header_len(&self) -> usize {
        match self {
            IpPacketMut::V4(p) => p.header_len(),
            IpPacketMut::V6(_) => IPV6_HEADER_LEN,
        }
    }

    /// The payload's protocol: IPv4's protocol field, IPv6's first next header.
    #[inline]
    pub fn protocol(&self) -> u8 {
        match self {
            IpPacketMut::V4(p) => p.protocol(),
            IpPacketMut::V6(p) => p.next_header(),
        }
    }

    /// The source address as bytes: 4 or 16.
    #[inline]
    pub fn source_bytes(&self) -> &[u8] {
        match self {
            IpPacketMut::V4(p) => p.source_bytes(),
            IpPacketMut::V6(p) => p.source_bytes(),
        }
    }

    /// The destination address as bytes: 4 or 16.
    #[inline]
    pub fn destination_bytes(&self) -> &[u8] {
        match self {
            IpPacketMut::V4(p) => p.destination_bytes(),
            IpPacketMut::V6(p) => p.destination_bytes(),
        }
    }

    /// The payload to rewrite, checked as [`IpPacket::payload`].
    #[inline]
    pub fn payload_mut(&mut self) -> Result<&mut [u8], IpError> {
        match self {
            IpPacketMut::V4(p) => p.payload_mut(),
            IpPacketMut::V6(p) => p.payload_mut(),
        }
    }

    /// The payload to rewrite, for as long as the bytes are borrowed (the view is used up).
    #[inline]
    pub fn into_payload(self) -> Result<&'a mut [u8], IpError> {
        match self {
            IpPacketMut::V4(p) => p.into_payload(),
            IpPacketMut::V6(p) => p.into_payload(),
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

    #[test]
    fn ipv4_fixed_header_fields_read_and_write_back() {
        let mut bytes = v4(5, PROTOCOL_UDP, 0x4000, &udp(51820, 7));
        {
            let mut p = Ipv4PacketMut::parse(&mut bytes).unwrap();
            assert_eq!((p.header_len(), p.total_len(), p.ttl()), (20, 28, 64));
            assert_eq!((p.flags(), p.fragment_offset()), (IPV4_FLAG_DF, 0));
            p.set_dscp_ecn(0xb8);
            p.set_total_len(27);
            p.set_identification(0xbeef);
            p.set_flags(IPV4_FLAG_MF);
            p.set_fragment_offset(0x1abc);
            p.set_ttl(3);
            p.set_protocol(PROTOCOL_TCP);
            p.set_header_checksum(0x1234);
            p.set_source(Ipv4Addr::new(10, 0, 0, 1));
            p.set_destination(Ipv4Addr::new(10, 0, 0, 2));
            assert_eq!(p.header()[..2], [0x45, 0xb8]);
        }
        let p = Ipv4Packet::parse(&bytes).unwrap();
        assert_eq!(p.dscp_ecn(), 0xb8);
        assert_eq!(p.total_len(), 27);
        assert_eq!(p.identification(), 0xbeef);
        assert_eq!(p.flags(), IPV4_FLAG_MF);
        assert_eq!(p.fragment_offset(), 0x1abc);
        assert!(p.is_fragment());
        assert_eq!((p.ttl(), p.protocol(), p.header_checksum()), (3, 6, 0x1234));
        assert_eq!(p.source(), Ipv4Addr::new(10, 0, 0, 1));
        assert_eq!(p.destination_bytes(), &[10, 0, 0, 2]);
        assert_eq!(
            &bytes[..20],
            &[
                0x45, 0xb8, 0, 27, 0xbe, 0xef, 0x3a, 0xbc, 3, 6, 0x12, 0x34, 10, 0, 0, 1, 10, 0, 0,
                2
            ]
        );
        // Flags and offset are set independently of each other.
        let mut p = Ipv4PacketMut::parse(&mut bytes).unwrap();
        p.set_flags(0b111);
        assert_eq!((p.flags(), p.fragment_offset()), (0b111, 0x1abc));
        p.set_fragment_offset(0xffff);
        assert_eq!((p.flags(), p.fragment_offset()), (0b111, 0x1fff));
    }

    #[test]
    fn ipv6_fixed_header_fields_read_and_write_back() {
        let mut bytes = v6(PROTOCOL_UDP, &udp(1, 2));
        {
            let mut p = Ipv6PacketMut::parse(&mut bytes).unwrap();
            assert_eq!(
                (p.traffic_class(), p.flow_label(), p.hop_limit()),
                (0, 0, 64)
            );
            p.set_traffic_class(0xa5);
            p.set_payload_len(7);
            p.set_next_header(PROTOCOL_TCP);
            p.set_hop_limit(1);
            p.set_source("fd00::a".parse().unwrap());
            p.set_destination("fd00::b".parse().unwrap());
            assert_eq!(
                p.flow_label(),
                0,
                "the traffic class leaves the flow label alone"
            );
        }
        assert_eq!(&bytes[..8], &[0x6a, 0x50, 0, 0, 0, 7, 6, 1]);
        let p = Ipv6Packet::parse(&bytes).unwrap();
        assert_eq!((p.traffic_class(), p.payload_len()), (0xa5, 7));
        assert_eq!((p.next_header(), p.hop_limit()), (PROTOCOL_TCP, 1));
        assert_eq!(p.source(), "fd00::a".parse::<Ipv6Addr>().unwrap());
        assert_eq!(p.destination(), "fd00::b".parse::<Ipv6Addr>().unwrap());
        assert_eq!(p.source_bytes()[15], 0xa);
        bytes[1] = 0x5f;
        bytes[2] = 0x12;
        bytes[3] = 0x34;
        let p = Ipv6Packet::parse(&bytes).unwrap();
        assert_eq!((p.traffic_class(), p.flow_label()), (0xa5, 0xf1234));
        let ip = IpPacket::parse(&bytes).unwrap();
        assert_eq!(ip.source_bytes(), p.source_bytes());
        assert_eq!(ip.destination_bytes().len(), 16);
    }

    #[test]
    fn payload_options_and_header_bytes_are_checked_where_asked() {
        let p = v4(7, PROTOCOL_UDP, 0, &udp(1, 2));
        let ip = Ipv4Packet::parse(&p).unwrap();
        assert_eq!(ip.header_bytes().unwrap(), &p[..28]);
        assert_eq!(ip.options().unwrap(), &[0u8; 8]);
        assert_eq!(ip.payload().unwrap(), &udp(1, 2)[..]);
        // Padding past the total length is not payload.
        let mut padded = p.clone();
        padded.extend_from_slice(&[0xee; 5]);
        assert_eq!(
            IpPacket::parse(&padded).unwrap().payload().unwrap(),
            &udp(1, 2)[..]
        );
        // Options past the bytes: the fixed header reads, the options do not.
        let short = &p[..24];
        let ip = Ipv4Packet::parse(short).unwrap();
        let past = IpError::HeaderPastEnd {
            header_len: 28,
            len: 24,
        };
        assert_eq!(ip.header_bytes(), Err(past));
        assert_eq!(ip.options(), Err(past));
        assert!(ip.payload().is_err());
        let mut short = short.to_vec();
        assert_eq!(
            Ipv4PacketMut::parse(&mut short).unwrap().options(),
            Err(past)
        );
        // IHL below 5.
        let mut bad = p.clone();
        bad[0] = 0x44;
        let e = IpError::BadHeaderLength { header_len: 16 };
        assert_eq!(Ipv4Packet::parse(&bad).unwrap().payload(), Err(e));
        assert_eq!(Ipv4Packet::parse(&bad).unwrap().header_bytes(), Err(e));
        assert_eq!(Ipv4PacketMut::parse(&mut bad).unwrap().options(), Err(e));
        // IPv6: the payload is cut to the payload length.
        let mut p = v6(PROTOCOL_UDP, &udp(1, 2));
        p.extend_from_slice(&[0xee; 3]);
        assert_eq!(
            Ipv6Packet::parse(&p).unwrap().payload().unwrap(),
            &udp(1, 2)[..]
        );
        p.truncate(47);
        assert!(Ipv6Packet::parse(&p).unwrap().payload().is_err());
    }

    #[test]
    fn writable_views_reach_the_payload_within_the_declared_length() {
        let mut p = v4(6, PROTOCOL_UDP, 0, &udp(1, 2));
        p.push(0xee);
        let mut ip = Ipv4PacketMut::parse(&mut p).unwrap();
        assert_eq!(ip.packet_len(), Ok(32));
        assert_eq!(ip.payload_mut().unwrap().len(), 8);
        ip.payload_mut().unwrap()[0] = 0xaa;
        ip.into_payload().unwrap()[1] = 0xbb;
        assert_eq!(&p[24..26], &[0xaa, 0xbb]);
        assert_eq!(p[32], 0xee, "padding untouched");

        let mut p = v6(PROTOCOL_UDP, &udp(1, 2));
        let mut ip = IpPacketMut::parse(&mut p).unwrap();
        assert_eq!(ip.protocol(), PROTOCOL_UDP);
        assert_eq!(ip.source_bytes().len(), 16);
        assert_eq!(ip.destination_bytes()[15], 2);
        ip.payload_mut().unwrap()[7] = 0xcc;
        ip.into_payload().unwrap()[6] = 0xdd;
        assert_eq!(&p[46..48], &[0xdd, 0xcc]);

        // A total length past the bytes: the header is writable, the payload is not.
        let mut p = v4(5, PROTOCOL_UDP, 0, &udp(1, 2));
        let mut ip = Ipv4PacketMut::parse(&mut p).unwrap();
        ip.set_total_len(100);
        assert!(ip.payload_mut().is_err());
        assert_eq!(
            ip.options(),
            Ok(&[][..]),
            "options do not depend on the total length"
        );
        assert!(IpPacketMut::parse(&mut p).unwrap().into_payload().is_err());
        let mut p = v6(PROTOCOL_UDP, &udp(1, 2));
        let mut ip = Ipv6PacketMut::parse(&mut p).unwrap();
        ip.set_payload_len(9);
        assert!(ip.payload_mut().is_err());
        assert!(ip.into_payload().is_err());
    }

    #[test]
    fn writable_views_refuse_what_the_read_views_refuse() {
        for bytes in [
            vec![],
            vec![0x45; 19],
            vec![0x60; 39],
            vec![0x50; 60],
            v4(5, 6, 0, &[]),
            v6(6, &[]),
        ] {
            let mut m = bytes.clone();
            assert_eq!(
                IpPacketMut::parse(&mut m).err(),
                IpPacket::parse(&bytes).err(),
                "{bytes:x?}"
            );
            let mut m = bytes.clone();
            assert_eq!(
                Ipv4PacketMut::parse(&mut m).err(),
                Ipv4Packet::parse(&bytes).err()
            );
            let mut m = bytes.clone();
            assert_eq!(
                Ipv6PacketMut::parse(&mut m).err(),
                Ipv6Packet::parse(&bytes).err()
            );
        }
    }

    #[test]
    fn the_declared_length_reads_from_the_fewest_bytes() {
        assert_eq!(declared_len(&[0x45, 0, 0x05, 0xdc]), Some(1500));
        assert_eq!(declared_len(&[0x60, 0, 0, 0, 0x05, 0xb4]), Some(1500));
        assert_eq!(declared_len(&[0x45, 0, 5]), None);
        assert_eq!(declared_len(&[0x60, 0, 0, 0, 5]), None);
        assert_eq!(declared_len(&[0x10, 0, 0, 0, 0, 0]), None);
        assert_eq!(declared_len(&[]), None);
        assert_eq!(version(&[0x4f]), Ok(4));
        assert_eq!(version(&[0xf0]), Ok(15));
        assert_eq!(version(&[]), Err(IpError::Empty));
    }

    /// Deterministic pseudo-random bytes.
    fn noise(seed: u32, n: usize) -> Vec<u8> {
        let mut x = seed | 1;
        (0..n)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 17;
                x ^= x << 5;
                x as u8
            })
            .collect()
    }

    #[test]
    fn garbage_never_panics_and_both_views_agree() {
        for round in 0..20_000u32 {
            let mut bytes = noise(round, (round % 97) as usize);
            if let Some(b) = bytes.first_mut() {
                // Mostly versions 4 and 6, so the views get past the first check.
                *b = (*b & 0x0f) | [0x40, 0x60, 0x40, 0x60, 0x50][round as usize % 5];
            }
            let read = IpPacket::parse(&bytes);
            if let Ok(ip) = read {
                let _ = (ip.source(), ip.destination(), ip.protocol(), ip.udp_ports());
                let len = ip.packet_len();
                let payload = ip.payload();
                assert_eq!(len.is_ok(), payload.is_ok());
                if let (Ok(len), Ok(payload)) = (len, payload) {
                    assert!(payload.len() <= len && len <= bytes.len());
                }
                if let IpPacket::V4(p) = ip {
                    if let Ok(h) = p.header_bytes() {
                        assert_eq!(h.len(), p.header_len());
                        assert_eq!(p.options().unwrap().len(), h.len() - 20);
                    }
                }
            }
            let _ = declared_len(&bytes);
            let mut copy = bytes.clone();
            let write = IpPacketMut::parse(&mut copy);
            assert_eq!(write.is_ok(), read.is_ok());
            if let Ok(mut ip) = write {
                let want = read.unwrap().payload().map(<[u8]>::len);
                assert_eq!(ip.payload_mut().map(|p| p.len()), want);
            }
        }
    }

    #[test]
    fn new_errors_say_what_is_wrong() {
        let e = IpError::HeaderPastEnd {
            header_len: 60,
            len: 40,
        };
        assert!(e.to_string().contains("60") && e.to_string().contains("40"));
    }
}
