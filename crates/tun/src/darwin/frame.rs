//! utun framing: every packet on a utun descriptor carries a 4-byte header, three zero bytes
//! and the address family (darwin's AF_INET 2 or AF_INET6 30), a big-endian `u32` in effect.

use std::io;

use vpn_packet::ip;

/// Bytes of the address-family header in front of every utun packet.
pub(crate) const HEADER_LEN: usize = 4;
/// darwin's AF_INET.
pub(crate) const AF_INET: u8 = 2;
/// darwin's AF_INET6.
pub(crate) const AF_INET6: u8 = 30;

/// The header for `packet`, chosen from its IP version nibble; `None` for anything that is
/// not IPv4 or IPv6 (empty included).
pub(crate) fn header_for(packet: &[u8]) -> Option<[u8; HEADER_LEN]> {
    match ip::version(packet).ok()? {
        4 => Some([0, 0, 0, AF_INET]),
        6 => Some([0, 0, 0, AF_INET6]),
        _ => None,
    }
}

/// The length the packet's IP header claims (IPv4 total length, IPv6 40 + payload length);
/// `None` when the header is too short to say or the version is neither.
pub(crate) fn claimed_len(packet: &[u8]) -> Option<usize> {
    ip::declared_len(packet)
}

/// The error for a packet that is neither IPv4 nor IPv6 (EAFNOSUPPORT, as wireguard-go).
pub(crate) fn not_ip() -> io::Error {
    io::Error::from_raw_os_error(libc::EAFNOSUPPORT)
}

/// The page size of the Apple target this is built for: 16 KiB on Apple Silicon, 4 KiB on
/// Intel. A batched utun write with a frame above it falls back to one `write` per packet.
pub(crate) const fn page_size() -> usize {
    if cfg!(target_arch = "aarch64") {
        16 * 1024
    } else {
        4 * 1024
    }
}

/// The unit a utun name asks for: `"utun"` lets the kernel pick (`None`), `"utunN"` is unit
/// N. Anything else is an error.
pub(crate) fn parse_utun_name(name: &str) -> io::Result<Option<u32>> {
    let bad = || {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("interface name {name:?} is not \"utun\" or \"utunN\""),
        )
    };
    let digits = name.strip_prefix("utun").ok_or_else(bad)?;
    if digits.is_empty() {
        return Ok(None);
    }
    if !digits.bytes().all(|b| b.is_ascii_digit()) || (digits.len() > 1 && digits.starts_with('0'))
    {
        return Err(bad());
    }
    digits.parse().map(Some).map_err(|_| bad())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_carries_the_address_family_of_the_ip_version() {
        assert_eq!(header_for(&[0x45, 0]), Some([0, 0, 0, 2]));
        assert_eq!(header_for(&[0x60, 0]), Some([0, 0, 0, 30]));
    }

    #[test]
    fn non_ip_packets_have_no_header() {
        assert_eq!(header_for(&[]), None);
        assert_eq!(header_for(&[0x00]), None);
        assert_eq!(header_for(&[0x55]), None);
        assert_eq!(not_ip().raw_os_error(), Some(libc::EAFNOSUPPORT));
    }

    #[test]
    fn claimed_length_comes_from_the_ip_header() {
        assert_eq!(claimed_len(&[0x45, 0, 0x05, 0xdc]), Some(1500));
        assert_eq!(claimed_len(&[0x60, 0, 0, 0, 0x05, 0xb4]), Some(1500));
        assert_eq!(claimed_len(&[0x45, 0, 5]), None);
        assert_eq!(claimed_len(&[0x10, 0, 0, 0, 0, 0]), None);
    }

    #[test]
    fn page_size_is_16k_on_arm64_and_4k_on_x86_64() {
        let want = if cfg!(target_arch = "aarch64") {
            16384
        } else {
            4096
        };
        assert_eq!(page_size(), want);
    }

    #[test]
    fn utun_names_select_the_unit() {
        assert_eq!(parse_utun_name("utun").unwrap(), None);
        assert_eq!(parse_utun_name("utun0").unwrap(), Some(0));
        assert_eq!(parse_utun_name("utun17").unwrap(), Some(17));
        for bad in [
            "",
            "tun0",
            "utun-1",
            "utun+1",
            "utun01",
            "utunx",
            "utun99999999999",
        ] {
            assert!(parse_utun_name(bad).is_err(), "{bad}");
        }
    }
}
