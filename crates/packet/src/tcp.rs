//! TCP headers: a read-only view ([`TcpHeader`]) and a writable one ([`TcpHeaderMut`]) over the
//! bytes that start with the header (an IP packet's payload).
//!
//! Construction checks the 20-byte fixed header, a data offset of at least 5 words and that the
//! options it declares are in the bytes; the fields are then plain loads and stores.

use core::fmt;

use crate::{get16, get32, set16, set32};

/// Size of a TCP header without options.
pub const TCP_HEADER_LEN: usize = 20;

/// FIN: no more data from the sender.
pub const FIN: u8 = 0x01;
/// SYN: synchronise sequence numbers.
pub const SYN: u8 = 0x02;
/// RST: reset the connection.
pub const RST: u8 = 0x04;
/// PSH: push the data to the application.
pub const PSH: u8 = 0x08;
/// ACK: the acknowledgment number is significant.
pub const ACK: u8 = 0x10;
/// URG: the urgent pointer is significant.
pub const URG: u8 = 0x20;
/// ECE: ECN echo.
pub const ECE: u8 = 0x40;
/// CWR: congestion window reduced.
pub const CWR: u8 = 0x80;

/// Why bytes do not start with a TCP header.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum TcpError {
    /// Fewer bytes than the 20-byte fixed header.
    Truncated {
        /// Bytes given.
        len: usize,
    },
    /// A data offset below 5 words (a header shorter than its fixed part).
    BadHeaderLength {
        /// The header length in bytes (data offset × 4).
        header_len: usize,
    },
    /// A header (options included) longer than the bytes given.
    HeaderPastEnd {
        /// The header length in bytes (data offset × 4).
        header_len: usize,
        /// Bytes given.
        len: usize,
    },
}

impl fmt::Display for TcpError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TcpError::Truncated { len } => write!(
                f,
                "{len} bytes are shorter than a {TCP_HEADER_LEN}-byte TCP header"
            ),
            TcpError::BadHeaderLength { header_len } => {
                write!(
                    f,
                    "TCP header length {header_len} is below {TCP_HEADER_LEN}"
                )
            }
            TcpError::HeaderPastEnd { header_len, len } => write!(
                f,
                "TCP header of {header_len} bytes is longer than the {len} given"
            ),
        }
    }
}

impl std::error::Error for TcpError {}

/// Checks the data offset of `header` against the `bytes_len` bytes it starts: the length of
/// the options it declares.
#[inline]
fn check(bytes_len: usize, header: &[u8; TCP_HEADER_LEN]) -> Result<usize, TcpError> {
    let header_len = usize::from(header[12] >> 4) * 4;
    if header_len < TCP_HEADER_LEN {
        return Err(TcpError::BadHeaderLength { header_len });
    }
    if header_len > bytes_len {
        return Err(TcpError::HeaderPastEnd {
            header_len,
            len: bytes_len,
        });
    }
    Ok(header_len - TCP_HEADER_LEN)
}

/// The fields of a TCP fixed header, for a view with a `header: &[u8; 20]`.
macro_rules! tcp_fields {
    () => {
        /// The source port.
        #[inline]
        pub fn source_port(&self) -> u16 {
            get16::<0, TCP_HEADER_LEN>(self.header)
        }

        /// The destination port.
        #[inline]
        pub fn destination_port(&self) -> u16 {
            get16::<2, TCP_HEADER_LEN>(self.header)
        }

        /// The sequence number.
        #[inline]
        pub fn seq(&self) -> u32 {
            get32::<4, TCP_HEADER_LEN>(self.header)
        }

        /// The acknowledgment number.
        #[inline]
        pub fn ack(&self) -> u32 {
            get32::<8, TCP_HEADER_LEN>(self.header)
        }

        /// The header length (data offset × 4, options included): 20 to 60, checked.
        #[inline]
        pub fn header_len(&self) -> usize {
            TCP_HEADER_LEN + self.options.len()
        }

        /// The flags byte: [`CWR`] to [`FIN`] (the NS bit, in the data offset's byte, is not
        /// in it).
        #[inline]
        pub fn flags(&self) -> u8 {
            self.header[13]
        }

        /// The receive window.
        #[inline]
        pub fn window(&self) -> u16 {
            get16::<14, TCP_HEADER_LEN>(self.header)
        }

        /// The checksum field.
        #[inline]
        pub fn checksum(&self) -> u16 {
            get16::<16, TCP_HEADER_LEN>(self.header)
        }

        /// The urgent pointer.
        #[inline]
        pub fn urgent_pointer(&self) -> u16 {
            get16::<18, TCP_HEADER_LEN>(self.header)
        }

        /// The fixed header's 20 bytes.
        #[inline]
        pub fn header(&self) -> &[u8; TCP_HEADER_LEN] {
            self.header
        }
    };
}

/// A TCP header at the start of some bytes: the fixed 20 bytes, the options the data offset
/// declares, then the payload (everything after them, to the end of the bytes given).
#[derive(Copy, Clone, Debug)]
pub struct TcpHeader<'a> {
    header: &'a [u8; TCP_HEADER_LEN],
    options: &'a [u8],
    payload: &'a [u8],
}

impl<'a> TcpHeader<'a> {
    /// Parses the header at the start of `bytes` (a TCP segment: an IP packet's payload).
    #[inline]
    pub fn parse(bytes: &'a [u8]) -> Result<Self, TcpError> {
        let len = bytes.len();
        let (header, rest) = bytes
            .split_first_chunk::<TCP_HEADER_LEN>()
            .ok_or(TcpError::Truncated { len })?;
        let options_len = check(len, header)?;
        // `check` keeps the options within `rest`; `min` says so to the split.
        let (options, payload) = rest.split_at(options_len.min(rest.len()));
        Ok(TcpHeader {
            header,
            options,
            payload,
        })
    }

    tcp_fields!();

    /// The options (0 to 40 bytes).
    #[inline]
    pub fn options(&self) -> &'a [u8] {
        self.options
    }

    /// The payload: the bytes after the header.
    #[inline]
    pub fn payload(&self) -> &'a [u8] {
        self.payload
    }
}

/// A TCP header to rewrite; construction checks what [`TcpHeader::parse`] checks.
#[derive(Debug)]
pub struct TcpHeaderMut<'a> {
    header: &'a mut [u8; TCP_HEADER_LEN],
    options: &'a mut [u8],
    payload: &'a mut [u8],
}

impl<'a> TcpHeaderMut<'a> {
    /// Parses the header at the start of `bytes`.
    #[inline]
    pub fn parse(bytes: &'a mut [u8]) -> Result<Self, TcpError> {
        let len = bytes.len();
        let (header, rest) = bytes
            .split_first_chunk_mut::<TCP_HEADER_LEN>()
            .ok_or(TcpError::Truncated { len })?;
        let options_len = check(len, header)?;
        let n = options_len.min(rest.len());
        let (options, payload) = rest.split_at_mut(n);
        Ok(TcpHeaderMut {
            header,
            options,
            payload,
        })
    }

    tcp_fields!();

    /// The options.
    #[inline]
    pub fn options(&self) -> &[u8] {
        self.options
    }

    /// The payload.
    #[inline]
    pub fn payload(&self) -> &[u8] {
        self.payload
    }

    /// The options to rewrite.
    #[inline]
    pub fn options_mut(&mut self) -> &mut [u8] {
        self.options
    }

    /// The payload to rewrite.
    #[inline]
    pub fn payload_mut(&mut self) -> &mut [u8] {
        self.payload
    }

    /// Sets the source port.
    #[inline]
    pub fn set_source_port(&mut self, port: u16) {
        set16::<0, TCP_HEADER_LEN>(self.header, port);
    }

    /// Sets the destination port.
    #[inline]
    pub fn set_destination_port(&mut self, port: u16) {
        set16::<2, TCP_HEADER_LEN>(self.header, port);
    }

    /// Sets the sequence number.
    #[inline]
    pub fn set_seq(&mut self, seq: u32) {
        set32::<4, TCP_HEADER_LEN>(self.header, seq);
    }

    /// Sets the acknowledgment number.
    #[inline]
    pub fn set_ack(&mut self, ack: u32) {
        set32::<8, TCP_HEADER_LEN>(self.header, ack);
    }

    /// Sets the flags byte.
    #[inline]
    pub fn set_flags(&mut self, flags: u8) {
        self.header[13] = flags;
    }

    /// Sets the receive window.
    #[inline]
    pub fn set_window(&mut self, window: u16) {
        set16::<14, TCP_HEADER_LEN>(self.header, window);
    }

    /// Sets the checksum field.
    #[inline]
    pub fn set_checksum(&mut self, checksum: u16) {
        set16::<16, TCP_HEADER_LEN>(self.header, checksum);
    }

    /// Sets the urgent pointer.
    #[inline]
    pub fn set_urgent_pointer(&mut self, ptr: u16) {
        set16::<18, TCP_HEADER_LEN>(self.header, ptr);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A TCP header with `words` 32-bit words (options 0x01 NOPs) and `payload`.
    fn segment(words: u8, payload: &[u8]) -> Vec<u8> {
        let mut s = vec![0u8; usize::from(words.max(5)) * 4];
        s[12] = words << 4;
        s[20..].fill(1);
        s.extend_from_slice(payload);
        s
    }

    #[test]
    fn fields_read_and_write_back() {
        let mut bytes = segment(8, b"data");
        {
            let mut t = TcpHeaderMut::parse(&mut bytes).unwrap();
            t.set_source_port(40000);
            t.set_destination_port(5201);
            t.set_seq(0xdead_beef);
            t.set_ack(7);
            t.set_flags(ACK | PSH);
            t.set_window(0xffff);
            t.set_checksum(0x1234);
            t.set_urgent_pointer(9);
            assert_eq!(t.options(), &[1; 12]);
            assert_eq!(t.payload(), b"data");
            t.options_mut()[0] = 0;
            t.payload_mut()[0] = b'D';
            assert_eq!(t.header_len(), 32);
        }
        let t = TcpHeader::parse(&bytes).unwrap();
        assert_eq!((t.source_port(), t.destination_port()), (40000, 5201));
        assert_eq!((t.seq(), t.ack()), (0xdead_beef, 7));
        assert_eq!((t.flags(), t.window()), (ACK | PSH, 0xffff));
        assert_eq!((t.checksum(), t.urgent_pointer()), (0x1234, 9));
        assert_eq!(t.header_len(), 32);
        assert_eq!(t.options()[..2], [0, 1]);
        assert_eq!(t.payload(), b"Data");
        assert_eq!(t.header()[12], 8 << 4);
        assert_eq!(
            &bytes[..20],
            &[
                0x9c, 0x40, 0x14, 0x51, 0xde, 0xad, 0xbe, 0xef, 0, 0, 0, 7, 0x80, 0x18, 0xff, 0xff,
                0x12, 0x34, 0, 9
            ]
        );
    }

    #[test]
    fn short_headers_and_bad_data_offsets_are_errors() {
        assert_eq!(
            TcpHeader::parse(&[0; 19]).unwrap_err(),
            TcpError::Truncated { len: 19 }
        );
        for words in 0..5 {
            let mut s = segment(5, &[]);
            s[12] = words << 4;
            let e = TcpError::BadHeaderLength {
                header_len: usize::from(words) * 4,
            };
            assert_eq!(TcpHeader::parse(&s).unwrap_err(), e);
            assert_eq!(TcpHeaderMut::parse(&mut s).unwrap_err(), e);
        }
        let mut s = segment(15, &[]);
        assert_eq!(TcpHeader::parse(&s).unwrap().header_len(), 60);
        let e = TcpError::HeaderPastEnd {
            header_len: 60,
            len: 59,
        };
        assert_eq!(TcpHeader::parse(&s[..59]).unwrap_err(), e);
        assert_eq!(TcpHeaderMut::parse(&mut s[..59]).unwrap_err(), e);
        for e in [
            e,
            TcpError::Truncated { len: 3 },
            TcpError::BadHeaderLength { header_len: 4 },
        ] {
            assert!(!e.to_string().is_empty());
        }
    }

    #[test]
    fn every_prefix_parses_exactly_when_it_holds_the_header() {
        let s = segment(7, b"xyz");
        for n in 0..=s.len() {
            let t = TcpHeader::parse(&s[..n]);
            assert_eq!(t.is_ok(), n >= 28, "prefix of {n}");
            if let Ok(t) = t {
                assert_eq!(t.options().len(), 8);
                assert_eq!(t.payload().len(), n - 28);
            }
            let mut m = s[..n].to_vec();
            assert_eq!(TcpHeaderMut::parse(&mut m).err(), t.err());
        }
    }

    #[test]
    fn garbage_never_panics() {
        let mut x: u32 = 0x1234_5678;
        for n in 0..2_000usize {
            let bytes: Vec<u8> = (0..n % 80)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 17;
                    x ^= x << 5;
                    x as u8
                })
                .collect();
            if let Ok(t) = TcpHeader::parse(&bytes) {
                assert!((20..=60).contains(&t.header_len()));
                assert_eq!(t.header_len() + t.payload().len(), bytes.len());
            }
        }
    }
}
