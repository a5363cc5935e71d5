//! The inner IP header reads of the packet path (destination, source and length, UDP), made
//! through `vpn-proto`'s views ([`vpn_proto::ip`]), and the allowed-IPs lookups made with them.

use crate::allowedips::AllowedIps;
use crate::peer::PeerRef;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Weak};
use vpn_proto::ip::{IpPacket, PROTOCOL_UDP};

/// The destination address of an IP packet (one that holds at least its fixed header).
#[inline]
pub(crate) fn destination(pkt: &[u8]) -> Option<IpAddr> {
    IpPacket::parse(pkt).ok().map(|ip| ip.destination())
}

/// The UDP source port and the destination of an IP packet that is a whole (unfragmented) UDP
/// datagram, with no IPv6 extension headers. The TUN reader uses it to recognise the device's own
/// datagrams coming back through the TUN (a routing loop).
#[inline]
pub(crate) fn udp_source_port_and_destination(pkt: &[u8]) -> Option<(u16, SocketAddr)> {
    let ip = IpPacket::parse(pkt).ok()?;
    let ports = ip.udp_ports()?;
    Some((
        ports.source,
        SocketAddr::new(ip.destination(), ports.destination),
    ))
}

/// What the receive path needs of a decrypted inner packet, from one parse of its header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Inner {
    /// The declared length (the rest of the plaintext is padding).
    pub len: usize,
    pub source: IpAddr,
    /// Carries UDP (IPv6: as its first next header; extension headers are rare enough on this
    /// path not to look past them).
    pub udp: bool,
}

/// Validates the inner IP header: its declared length, source and whether it is UDP.
#[inline]
pub(crate) fn inner_packet(p: &[u8]) -> Option<Inner> {
    let ip = IpPacket::parse(p).ok()?;
    Some(Inner {
        len: ip.packet_len().ok()?,
        source: ip.source(),
        udp: ip.protocol() == PROTOCOL_UDP,
    })
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
    fn a_padded_packet_gives_its_declared_length_source_and_destination() {
        // Decrypted packets arrive padded to a multiple of 16: the IP length says where the
        // packet ends, the source whether the peer may send it.
        let mut p = v4_udp(1, 2, 0);
        p.resize(32, 0);
        let source = "198.18.0.1".parse().unwrap();
        let udp = Inner {
            len: 28,
            source,
            udp: true,
        };
        assert_eq!(inner_packet(&p), Some(udp));
        assert_eq!(destination(&p), Some("198.18.0.2".parse().unwrap()));
        p[2..4].copy_from_slice(&33u16.to_be_bytes()); // longer than what arrived
        assert_eq!(inner_packet(&p), None);
        assert_eq!(destination(&p[..19]), None);
        p[2..4].copy_from_slice(&28u16.to_be_bytes());
        p[9] = 6; // TCP
        assert_eq!(inner_packet(&p).map(|i| i.udp), Some(false));
    }
}
