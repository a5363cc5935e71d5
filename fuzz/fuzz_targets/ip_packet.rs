//! Fuzzes vpn-proto's inner IP views: no input may panic; a view exists exactly when the bytes
//! hold the fixed header of version 4 or 6, and its fields depend on that header alone; a
//! checked packet length holds the header and fits the bytes (and the packet cut to it checks
//! the same); UDP ports come only from an unfragmented UDP datagram whose UDP header starts in
//! the bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use vpn_proto::ip::{
    IpPacket, Ipv4Packet, Ipv6Packet, IPV4_HEADER_LEN, IPV6_HEADER_LEN, PROTOCOL_UDP,
};

fuzz_target!(|data: &[u8]| {
    let fixed = match data.first().map(|b| b >> 4) {
        Some(4) => IPV4_HEADER_LEN,
        Some(6) => IPV6_HEADER_LEN,
        _ => usize::MAX,
    };
    let ip = IpPacket::parse(data);
    assert_eq!(ip.is_ok(), data.len() >= fixed);
    assert_eq!(
        Ipv4Packet::parse(data).is_ok(),
        fixed == IPV4_HEADER_LEN && ip.is_ok()
    );
    assert_eq!(
        Ipv6Packet::parse(data).is_ok(),
        fixed == IPV6_HEADER_LEN && ip.is_ok()
    );
    let ip = match ip {
        Ok(ip) => ip,
        Err(e) => {
            assert!(!e.to_string().is_empty());
            return;
        }
    };
    // The fixed header alone gives the same fields.
    let header = IpPacket::parse(&data[..fixed]).expect("the fixed header parses");
    assert_eq!(ip.version(), header.version());
    assert_eq!(ip.source(), header.source());
    assert_eq!(ip.destination(), header.destination());
    assert_eq!(ip.protocol(), header.protocol());

    match ip.packet_len() {
        Ok(len) => {
            assert!(fixed <= len && len <= data.len());
            let cut = IpPacket::parse(&data[..len]).expect("the packet cut to its length parses");
            assert_eq!(cut.packet_len(), Ok(len));
        }
        Err(e) => assert!(!e.to_string().is_empty()),
    }

    let ports = ip.udp_ports();
    if ports.is_some() {
        assert_eq!(ip.protocol(), PROTOCOL_UDP);
    }
    match ip {
        IpPacket::V4(p) => {
            if let Ok(len) = p.packet_len() {
                assert_eq!(len, usize::from(p.total_len()));
                assert!(len >= p.header_len() && p.header_len() >= IPV4_HEADER_LEN);
            }
            if ports.is_some() {
                assert!(!p.is_fragment());
                assert!(p.header_len() >= IPV4_HEADER_LEN && p.header_len() + 4 <= data.len());
            }
        }
        IpPacket::V6(p) => {
            if let Ok(len) = p.packet_len() {
                assert_eq!(len, IPV6_HEADER_LEN + usize::from(p.payload_len()));
            }
            if ports.is_some() {
                assert!(IPV6_HEADER_LEN + 4 <= data.len());
            }
        }
    }
});
