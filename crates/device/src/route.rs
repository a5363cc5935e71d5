//! The inner IP header reads of the packet path (destination, source and length, UDP) and the
//! allowed-IPs lookups made with them.

use crate::allowedips::AllowedIps;
use crate::peer::PeerRef;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Weak};

/// The destination address of an IP packet.
pub(crate) fn destination(pkt: &[u8]) -> Option<IpAddr> {
    match pkt.first().map(|b| b >> 4) {
        Some(4) if pkt.len() >= 20 => {
            let dst: [u8; 4] = pkt[16..20].try_into().ok()?;
            Some(IpAddr::from(dst))
        }
        Some(6) if pkt.len() >= 40 => {
            let dst: [u8; 16] = pkt[24..40].try_into().ok()?;
            Some(IpAddr::from(dst))
        }
        _ => None,
    }
}

/// The UDP source port and the destination of an IP packet that is a whole (unfragmented) UDP
/// datagram, with no IPv6 extension headers. The TUN reader uses it to recognise the device's own
/// datagrams coming back through the TUN (a routing loop).
pub(crate) fn udp_source_port_and_destination(pkt: &[u8]) -> Option<(u16, SocketAddr)> {
    let (l4, dst) = match pkt.first().map(|b| b >> 4) {
        Some(4) if pkt.len() >= 20 => {
            let fragment = u16::from_be_bytes([pkt[6], pkt[7]]) & 0x3fff;
            if pkt[9] != 17 || fragment != 0 {
                return None;
            }
            let dst: [u8; 4] = pkt[16..20].try_into().ok()?;
            (usize::from(pkt[0] & 0x0f) * 4, IpAddr::from(dst))
        }
        Some(6) if pkt.len() >= 40 => {
            if pkt[6] != 17 {
                return None;
            }
            let dst: [u8; 16] = pkt[24..40].try_into().ok()?;
            (40, IpAddr::from(dst))
        }
        _ => return None,
    };
    let udp = pkt.get(l4..l4 + 4)?;
    let sport = u16::from_be_bytes([udp[0], udp[1]]);
    let dport = u16::from_be_bytes([udp[2], udp[3]]);
    Some((sport, SocketAddr::new(dst, dport)))
}

/// Validates the inner IP header and returns the packet's declared length and source address.
pub(crate) fn inner_packet_len(p: &[u8]) -> Option<(usize, std::net::IpAddr)> {
    match p.first()? >> 4 {
        4 if p.len() >= 20 => {
            let len = usize::from(u16::from_be_bytes([p[2], p[3]]));
            if len < 20 || len > p.len() {
                return None;
            }
            Some((len, std::net::IpAddr::from([p[12], p[13], p[14], p[15]])))
        }
        6 if p.len() >= 40 => {
            let len = usize::from(u16::from_be_bytes([p[4], p[5]])) + 40;
            if len > p.len() {
                return None;
            }
            let mut src = [0u8; 16];
            src.copy_from_slice(&p[8..24]);
            Some((len, std::net::IpAddr::from(src)))
        }
        _ => None,
    }
}

/// Whether a packet `inner_packet_len` accepted carries UDP (IPv6: as its first next header;
/// extension headers are rare enough on this path not to look past them).
pub(crate) fn is_udp(p: &[u8]) -> bool {
    const UDP: u8 = 17;
    match p.first().map(|b| b >> 4) {
        Some(4) => p.get(9) == Some(&UDP),
        Some(6) => p.get(6) == Some(&UDP),
        _ => false,
    }
}

/// The previous packet's answer within one batch, under one read lock of the table: a batch is
/// mostly one flow (a TSO frame's segments share a destination, a GRO run a source), so the
/// next packet from or to the same address needs no walk of the trie.
pub(crate) struct BatchMemo<V>(Option<(IpAddr, V)>);

impl<V: Copy> BatchMemo<V> {
    pub(crate) fn new() -> Self {
        Self(None)
    }

    /// The answer for `addr`: the previous one if it was for `addr`, else `look()`'s.
    pub(crate) fn get(&mut self, addr: IpAddr, look: impl FnOnce() -> V) -> V {
        match self.0 {
            Some((a, v)) if a == addr => v,
            _ => {
                let v = look();
                self.0 = Some((addr, v));
                v
            }
        }
    }
}

/// The last lone packet's lookup, kept by a reader thread: the TUN reader's destination
/// route, a socket reader's inner-source check. On a quiet tunnel the packets mostly go to and
/// come from one place, and the trie they would be looked up in is cold memory (a few µs per
/// packet on this project's VM); the table's generation says when the answer may have changed.
#[derive(Default)]
pub(crate) struct LastRoute(Option<(u64, IpAddr, Weak<crate::Peer>)>);

impl LastRoute {
    /// The peer for `pkt`'s destination.
    pub(crate) fn lookup_dst(
        &mut self,
        table: &AllowedIps<PeerRef>,
        pkt: &[u8],
    ) -> Option<PeerRef> {
        self.lookup(table, destination(pkt)?)
    }

    /// The peer whose allowed IPs hold `dst`.
    pub(crate) fn lookup(&mut self, table: &AllowedIps<PeerRef>, dst: IpAddr) -> Option<PeerRef> {
        let generation = table.generation();
        if let Some((g, d, peer)) = &self.0 {
            if (*g, *d) == (generation, dst) {
                if let Some(peer) = peer.upgrade() {
                    return Some(PeerRef(peer));
                }
            }
        }
        let peer = table.lookup(dst)?.clone();
        self.0 = Some((generation, dst, Arc::downgrade(&peer.0)));
        Some(peer)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v4_udp(sport: u16, dport: u16, frag: u16) -> Vec<u8> {
        let mut p = vec![
            0x45, 0, 0, 28, 0, 0, 0, 0, 64, 17, 0, 0, 198, 18, 0, 1, 198, 18, 0, 2,
        ];
        p[6..8].copy_from_slice(&frag.to_be_bytes());
        p.extend_from_slice(&sport.to_be_bytes());
        p.extend_from_slice(&dport.to_be_bytes());
        p.extend_from_slice(&[0, 8, 0, 0]);
        p
    }

    #[test]
    fn udp_ports_and_destination_of_an_ipv4_datagram() {
        let got = udp_source_port_and_destination(&v4_udp(51820, 7, 0x4000));
        assert_eq!(got, Some((51820, "198.18.0.2:7".parse().unwrap())));
    }

    #[test]
    fn fragments_other_protocols_and_short_packets_are_not_datagrams() {
        // A later fragment (offset 1) and a first fragment (MF set).
        assert_eq!(udp_source_port_and_destination(&v4_udp(1, 2, 1)), None);
        assert_eq!(udp_source_port_and_destination(&v4_udp(1, 2, 0x2000)), None);
        let mut tcp = v4_udp(1, 2, 0);
        tcp[9] = 6;
        assert_eq!(udp_source_port_and_destination(&tcp), None);
        assert_eq!(
            udp_source_port_and_destination(&v4_udp(1, 2, 0)[..22]),
            None
        );
        assert_eq!(udp_source_port_and_destination(&[]), None);
    }

    #[test]
    fn udp_ports_and_destination_of_an_ipv6_datagram() {
        let mut p = vec![0x60, 0, 0, 0, 0, 8, 17, 64];
        p.extend_from_slice(&[0xfd, 0, 0, 0x18, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]);
        p.extend_from_slice(&[0xfd, 0, 0, 0x18, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2]);
        p.extend_from_slice(&[0xca, 0x6c, 0, 7, 0, 8, 0, 0]);
        let got = udp_source_port_and_destination(&p);
        assert_eq!(got, Some((51820, "[fd00:18::2]:7".parse().unwrap())));
        p[6] = 0; // a hop-by-hop header first: not looked into
        assert_eq!(udp_source_port_and_destination(&p), None);
    }

    #[test]
    fn inner_header_checks() {
        let mut v4 = vec![0u8; 40];
        v4[0] = 0x45;
        v4[2..4].copy_from_slice(&28u16.to_be_bytes());
        v4[12..16].copy_from_slice(&[100, 64, 0, 1]);
        assert_eq!(inner_packet_len(&v4).unwrap().0, 28);
        v4[2..4].copy_from_slice(&41u16.to_be_bytes());
        assert!(inner_packet_len(&v4).is_none());
        v4[2..4].copy_from_slice(&19u16.to_be_bytes());
        assert!(inner_packet_len(&v4).is_none());
        let mut v6 = vec![0u8; 48];
        v6[0] = 0x60;
        v6[4..6].copy_from_slice(&8u16.to_be_bytes());
        assert_eq!(inner_packet_len(&v6).unwrap().0, 48);
        v6[4..6].copy_from_slice(&9u16.to_be_bytes());
        assert!(inner_packet_len(&v6).is_none());
        assert!(inner_packet_len(&[0x50; 60]).is_none());
        assert!(inner_packet_len(&[]).is_none());
    }

    #[test]
    fn udp_is_told_from_other_protocols() {
        let mut v4 = vec![0u8; 28];
        v4[0] = 0x45;
        v4[9] = 17;
        assert!(is_udp(&v4));
        v4[9] = 6;
        assert!(!is_udp(&v4));
        let mut v6 = vec![0u8; 48];
        v6[0] = 0x60;
        v6[6] = 17;
        assert!(is_udp(&v6));
        v6[6] = 58;
        assert!(!is_udp(&v6));
        assert!(!is_udp(&[]));
        assert!(!is_udp(&[0x45; 5]));
    }
}
