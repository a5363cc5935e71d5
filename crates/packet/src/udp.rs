//! UDP headers: a read-only view ([`UdpHeader`]) and a writable one ([`UdpHeaderMut`]) over the
//! bytes that start with the header. Construction checks the 8 bytes; the length field is read
//! as it is (the offload code sets it, and what it covers is the caller's question).

use core::fmt;

use crate::{get16, set16};

/// Size of a UDP header.
pub const UDP_HEADER_LEN: usize = 8;

/// Why bytes do not start with a UDP header.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum UdpError {
    /// Fewer bytes than the 8-byte header.
    Truncated {
        /// Bytes given.
        len: usize,
    },
}

impl fmt::Display for UdpError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            UdpError::Truncated { len } => write!(
                f,
                "{len} bytes are shorter than a {UDP_HEADER_LEN}-byte UDP header"
            ),
        }
    }
}

impl std::error::Error for UdpError {}

/// The fields of a UDP header, for a view with a `header: &[u8; 8]`.
macro_rules! udp_fields {
    () => {
        /// The source port.
        #[inline]
        pub fn source_port(&self) -> u16 {
            get16::<0, UDP_HEADER_LEN>(self.header)
        }

        /// The destination port.
        #[inline]
        pub fn destination_port(&self) -> u16 {
            get16::<2, UDP_HEADER_LEN>(self.header)
        }

        /// The length field (header and payload), unchecked.
        #[inline]
        pub fn length(&self) -> u16 {
            get16::<4, UDP_HEADER_LEN>(self.header)
        }

        /// The checksum field (0: none, over IPv4).
        #[inline]
        pub fn checksum(&self) -> u16 {
            get16::<6, UDP_HEADER_LEN>(self.header)
        }
    };
}

/// A UDP header at the start of some bytes, and the payload after it (to the end of the bytes
/// given, whatever the length field says).
#[derive(Copy, Clone, Debug)]
pub struct UdpHeader<'a> {
    header: &'a [u8; UDP_HEADER_LEN],
    payload: &'a [u8],
}

impl<'a> UdpHeader<'a> {
    /// Parses the header at the start of `bytes` (a UDP datagram: an IP packet's payload).
    #[inline]
    pub fn parse(bytes: &'a [u8]) -> Result<Self, UdpError> {
        let len = bytes.len();
        let (header, payload) = bytes
            .split_first_chunk::<UDP_HEADER_LEN>()
            .ok_or(UdpError::Truncated { len })?;
        Ok(UdpHeader { header, payload })
    }

    udp_fields!();

    /// The payload: the bytes after the header.
    #[inline]
    pub fn payload(&self) -> &'a [u8] {
        self.payload
    }
}

/// A UDP header to rewrite.
#[derive(Debug)]
pub struct UdpHeaderMut<'a> {
    header: &'a mut [u8; UDP_HEADER_LEN],
    payload: &'a mut [u8],
}

impl<'a> UdpHeaderMut<'a> {
    /// Parses the header at the start of `bytes`.
    #[inline]
    pub fn parse(bytes: &'a mut [u8]) -> Result<Self, UdpError> {
        let len = bytes.len();
        let (header, payload) = bytes
            .split_first_chunk_mut::<UDP_HEADER_LEN>()
            .ok_or(UdpError::Truncated { len })?;
        Ok(UdpHeaderMut { header, payload })
    }

    udp_fields!();

    /// The payload.
    #[inline]
    pub fn payload(&self) -> &[u8] {
        self.payload
    }

    /// The payload to rewrite.
    #[inline]
    pub fn payload_mut(&mut self) -> &mut [u8] {
        self.payload
    }

    /// Sets the source port.
    #[inline]
    pub fn set_source_port(&mut self, port: u16) {
        set16::<0, UDP_HEADER_LEN>(self.header, port);
    }

    /// Sets the destination port.
    #[inline]
    pub fn set_destination_port(&mut self, port: u16) {
        set16::<2, UDP_HEADER_LEN>(self.header, port);
    }

    /// Sets the length field.
    #[inline]
    pub fn set_length(&mut self, len: u16) {
        set16::<4, UDP_HEADER_LEN>(self.header, len);
    }

    /// Sets the checksum field.
    #[inline]
    pub fn set_checksum(&mut self, checksum: u16) {
        set16::<6, UDP_HEADER_LEN>(self.header, checksum);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_read_and_write_back() {
        let mut bytes = vec![0u8; 11];
        {
            let mut u = UdpHeaderMut::parse(&mut bytes).unwrap();
            u.set_source_port(51820);
            u.set_destination_port(53);
            u.set_length(11);
            u.set_checksum(0xffff);
            u.payload_mut().copy_from_slice(b"abc");
            assert_eq!(u.payload(), b"abc");
            assert_eq!((u.length(), u.checksum()), (11, 0xffff));
        }
        assert_eq!(&bytes[..8], &[0xca, 0x6c, 0, 53, 0, 11, 0xff, 0xff]);
        let u = UdpHeader::parse(&bytes).unwrap();
        assert_eq!((u.source_port(), u.destination_port()), (51820, 53));
        assert_eq!(
            (u.length(), u.checksum(), u.payload()),
            (11, 0xffff, &b"abc"[..])
        );
    }

    #[test]
    fn fewer_than_eight_bytes_are_an_error() {
        for n in 0..8 {
            let e = UdpError::Truncated { len: n };
            assert_eq!(UdpHeader::parse(&vec![0; n]).unwrap_err(), e);
            assert_eq!(UdpHeaderMut::parse(&mut vec![0; n]).unwrap_err(), e);
            assert!(e.to_string().contains(&n.to_string()));
        }
        assert!(UdpHeader::parse(&[0; 8]).unwrap().payload().is_empty());
    }
}
