//! The send edge of every connection, so that an acknowledgment never claims less than the
//! connection has already sent.
//!
//! smoltcp rewinds a connection's "next sequence to send" to the oldest unacknowledged byte
//! when its retransmission timer fires (go-back-N), and every segment it then sends without
//! data carries that rewound number. A receiver that already holds those bytes finds such an
//! acknowledgment below its window, and RFC 9293 has it drop the segment, acknowledgment field
//! and all, and answer with an acknowledgment of its own. When both ends are smoltcp and both
//! are retransmitting (a transfer each way, losses on both), each end drops the other's
//! acknowledgments forever: each keeps retransmitting a segment the other already has, and
//! the connection stalls under exponential backoff (`tests/tests/netstack_wire.rs` sets this
//! up packet by packet; the loss scenario in `tests/tests/netstack.rs` met it as a 60-s read
//! timeout). Linux never rewinds: its acknowledgments carry the highest sequence it has sent.
//!
//! [`SendEdges`] does what Linux does, from outside smoltcp: it notes the end of every segment
//! the stack sends, per connection, and lifts the sequence number of a bare acknowledgment
//! that lies below that edge up to it (and refills its checksum). Segments that carry data,
//! SYN or FIN keep their numbers; so do keep-alives, which carry one byte.

use smoltcp::wire::{
    IpAddress, IpEndpoint, IpProtocol, Ipv4Packet, Ipv6Packet, TcpPacket, TcpSeqNumber,
};
use std::collections::hash_map::Entry;
use std::collections::HashMap;

/// A connection as the stack sends on it: (local, remote).
pub(crate) type Connection = (IpEndpoint, IpEndpoint);

/// The highest sequence number each connection has put on the wire.
#[derive(Default)]
pub(crate) struct SendEdges {
    edges: HashMap<Connection, TcpSeqNumber>,
}

/// What [`SendEdges::on_send`] did with a packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Sent {
    /// Not a TCP segment the stack tracks, or one sent as it was.
    AsIs,
    /// A bare acknowledgment whose sequence number was lifted to the connection's edge.
    Lifted,
}

impl SendEdges {
    /// Notes what `packet` (an IP packet the stack is about to send) sends, and lifts its
    /// sequence number to the connection's edge when it is a bare acknowledgment below it.
    pub(crate) fn on_send(&mut self, packet: &mut [u8]) -> Sent {
        match packet.first().map(|b| b >> 4) {
            Some(4) => {
                let Ok(mut ip) = Ipv4Packet::new_checked(&mut *packet) else {
                    return Sent::AsIs;
                };
                if ip.next_header() != IpProtocol::Tcp || ip.more_frags() || ip.frag_offset() != 0 {
                    return Sent::AsIs;
                }
                let (src, dst) = (ip.src_addr().into(), ip.dst_addr().into());
                self.on_segment(src, dst, ip.payload_mut())
            }
            Some(6) => {
                let Ok(mut ip) = Ipv6Packet::new_checked(&mut *packet) else {
                    return Sent::AsIs;
                };
                // smoltcp puts no extension header before the TCP header it sends.
                if ip.next_header() != IpProtocol::Tcp {
                    return Sent::AsIs;
                }
                let (src, dst) = (ip.src_addr().into(), ip.dst_addr().into());
                self.on_segment(src, dst, ip.payload_mut())
            }
            _ => Sent::AsIs,
        }
    }

    fn on_segment(&mut self, src: IpAddress, dst: IpAddress, segment: &mut [u8]) -> Sent {
        let Ok(mut tcp) = TcpPacket::new_checked(segment) else {
            return Sent::AsIs;
        };
        let key = (
            IpEndpoint::new(src, tcp.src_port()),
            IpEndpoint::new(dst, tcp.dst_port()),
        );
        let seq = tcp.seq_number();
        let end = seq + tcp.segment_len();
        if tcp.rst() {
            self.edges.remove(&key);
            return Sent::AsIs;
        }
        if tcp.syn() {
            // A new connection (perhaps on the tuple of an old one) starts its own edge.
            self.edges.insert(key, end);
            return Sent::AsIs;
        }
        match self.edges.entry(key) {
            Entry::Occupied(mut e) => {
                let edge = *e.get();
                if tcp.segment_len() == 0 && seq < edge {
                    tcp.set_seq_number(edge);
                    tcp.fill_checksum(&src, &dst);
                    return Sent::Lifted;
                }
                if end > edge {
                    e.insert(end);
                }
            }
            Entry::Vacant(v) => {
                v.insert(end);
            }
        }
        Sent::AsIs
    }

    /// Forgets the connections `live` does not name (the stack's sweep passes its sockets').
    pub(crate) fn retain(&mut self, live: impl Fn(&Connection) -> bool) {
        self.edges.retain(|c, _| live(c));
    }

    /// How many connections have an edge.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.edges.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use smoltcp::phy::ChecksumCapabilities;
    use smoltcp::wire::{Ipv4Address, Ipv4Repr, Ipv6Address, Ipv6Repr, TcpControl, TcpRepr};

    const A: Ipv4Address = Ipv4Address::new(100, 64, 0, 1);
    const B: Ipv4Address = Ipv4Address::new(100, 64, 0, 2);

    fn tcp_repr(control: TcpControl, seq: u32, payload: &[u8]) -> TcpRepr<'_> {
        TcpRepr {
            src_port: 40000,
            dst_port: 80,
            control,
            seq_number: TcpSeqNumber(seq as i32),
            ack_number: (control != TcpControl::Syn).then_some(TcpSeqNumber(7)),
            window_len: 1000,
            window_scale: None,
            max_seg_size: None,
            sack_permitted: false,
            sack_ranges: [None; 3],
            timestamp: None,
            payload,
        }
    }

    /// An IPv4 segment from A:40000 to B:80 with valid checksums.
    fn v4(control: TcpControl, seq: u32, payload: &[u8]) -> Vec<u8> {
        let tcp = tcp_repr(control, seq, payload);
        let ip = Ipv4Repr {
            src_addr: A,
            dst_addr: B,
            next_header: IpProtocol::Tcp,
            payload_len: tcp.buffer_len(),
            hop_limit: 64,
        };
        let mut p = vec![0; ip.buffer_len() + tcp.buffer_len()];
        let caps = ChecksumCapabilities::default();
        let mut pkt = Ipv4Packet::new_unchecked(&mut p[..]);
        ip.emit(&mut pkt, &caps);
        tcp.emit(
            &mut TcpPacket::new_unchecked(pkt.payload_mut()),
            &A.into(),
            &B.into(),
            &caps,
        );
        p
    }

    fn v6(control: TcpControl, seq: u32, payload: &[u8]) -> Vec<u8> {
        let (a, b) = (
            Ipv6Address::new(0xfd00, 0, 0, 0, 0, 0, 0, 1),
            Ipv6Address::new(0xfd00, 0, 0, 0, 0, 0, 0, 2),
        );
        let tcp = tcp_repr(control, seq, payload);
        let ip = Ipv6Repr {
            src_addr: a,
            dst_addr: b,
            next_header: IpProtocol::Tcp,
            payload_len: tcp.buffer_len(),
            hop_limit: 64,
        };
        let mut p = vec![0; ip.buffer_len() + tcp.buffer_len()];
        let caps = ChecksumCapabilities::default();
        ip.emit(&mut Ipv6Packet::new_unchecked(&mut p[..]));
        tcp.emit(
            &mut TcpPacket::new_unchecked(&mut p[40..]),
            &a.into(),
            &b.into(),
            &caps,
        );
        p
    }

    /// The sequence number of an IPv4 segment, after checking both checksums.
    fn seq_v4(p: &[u8]) -> u32 {
        let ip = Ipv4Packet::new_checked(p).unwrap();
        assert!(ip.verify_checksum());
        let tcp = TcpPacket::new_checked(ip.payload()).unwrap();
        assert!(tcp.verify_checksum(&A.into(), &B.into()), "TCP checksum");
        tcp.seq_number().0 as u32
    }

    #[test]
    fn a_rewound_bare_ack_is_lifted_to_the_highest_sequence_sent() {
        let mut e = SendEdges::default();
        assert_eq!(e.on_send(&mut v4(TcpControl::Syn, 1000, &[])), Sent::AsIs);
        for seq in [1001, 1101, 1201] {
            assert_eq!(
                e.on_send(&mut v4(TcpControl::None, seq, &[1; 100])),
                Sent::AsIs
            );
        }
        // Sent up to 1301; after a timeout smoltcp retransmits 1001 and acknowledges from 1101.
        let mut again = v4(TcpControl::None, 1001, &[1; 100]);
        assert_eq!(e.on_send(&mut again), Sent::AsIs);
        assert_eq!(seq_v4(&again), 1001, "a retransmission keeps its number");
        let mut ack = v4(TcpControl::None, 1101, &[]);
        assert_eq!(e.on_send(&mut ack), Sent::Lifted);
        assert_eq!(seq_v4(&ack), 1301);
    }

    #[test]
    fn acks_at_the_edge_keep_alives_and_fins_go_as_they_are() {
        let mut e = SendEdges::default();
        e.on_send(&mut v4(TcpControl::Syn, 1000, &[]));
        e.on_send(&mut v4(TcpControl::None, 1001, &[1; 100]));
        let mut at_edge = v4(TcpControl::None, 1101, &[]);
        let before = at_edge.clone();
        assert_eq!(e.on_send(&mut at_edge), Sent::AsIs);
        assert_eq!(at_edge, before);
        // A keep-alive: one byte just below the edge.
        let mut keep_alive = v4(TcpControl::None, 1100, &[0]);
        assert_eq!(e.on_send(&mut keep_alive), Sent::AsIs);
        assert_eq!(seq_v4(&keep_alive), 1100);
        let mut fin = v4(TcpControl::Fin, 1050, &[]);
        assert_eq!(e.on_send(&mut fin), Sent::AsIs);
        assert_eq!(seq_v4(&fin), 1050);
        // The FIN at the edge takes a sequence number: the ACK after it is one higher.
        e.on_send(&mut v4(TcpControl::Fin, 1101, &[]));
        let mut ack = v4(TcpControl::None, 1101, &[]);
        assert_eq!(e.on_send(&mut ack), Sent::Lifted);
        assert_eq!(seq_v4(&ack), 1102);
    }

    #[test]
    fn a_new_syn_on_the_same_tuple_starts_a_new_edge_and_a_reset_forgets_it() {
        let mut e = SendEdges::default();
        e.on_send(&mut v4(TcpControl::Syn, 5000, &[]));
        e.on_send(&mut v4(TcpControl::None, 5001, &[1; 100]));
        e.on_send(&mut v4(TcpControl::Syn, 10, &[]));
        let mut ack = v4(TcpControl::None, 11, &[]);
        assert_eq!(e.on_send(&mut ack), Sent::AsIs);
        assert_eq!(seq_v4(&ack), 11);
        e.on_send(&mut v4(TcpControl::Rst, 11, &[]));
        assert_eq!(e.len(), 0);
    }

    #[test]
    fn the_edge_follows_sequence_numbers_across_the_wrap() {
        let mut e = SendEdges::default();
        e.on_send(&mut v4(TcpControl::Syn, u32::MAX - 50, &[]));
        e.on_send(&mut v4(TcpControl::None, u32::MAX - 49, &[1; 100]));
        let mut ack = v4(TcpControl::None, u32::MAX - 49, &[]);
        assert_eq!(e.on_send(&mut ack), Sent::Lifted);
        assert_eq!(seq_v4(&ack), 50);
    }

    #[test]
    fn ipv6_segments_are_tracked_and_lifted_too() {
        let mut e = SendEdges::default();
        e.on_send(&mut v6(TcpControl::Syn, 1, &[]));
        e.on_send(&mut v6(TcpControl::None, 2, &[1; 10]));
        let mut ack = v6(TcpControl::None, 2, &[]);
        assert_eq!(e.on_send(&mut ack), Sent::Lifted);
        let ip = Ipv6Packet::new_checked(&ack[..]).unwrap();
        let tcp = TcpPacket::new_checked(ip.payload()).unwrap();
        assert_eq!(tcp.seq_number(), TcpSeqNumber(12));
        assert!(tcp.verify_checksum(&ip.src_addr().into(), &ip.dst_addr().into()));
    }

    #[test]
    fn what_is_not_a_whole_tcp_segment_is_left_alone() {
        let mut e = SendEdges::default();
        for mut p in [
            vec![],
            vec![0x45; 10],
            vec![0x60; 30],
            v4(TcpControl::None, 1, &[])[..30].to_vec(),
        ] {
            let before = p.clone();
            assert_eq!(e.on_send(&mut p), Sent::AsIs);
            assert_eq!(p, before);
        }
        assert_eq!(e.len(), 0);
    }

    #[test]
    fn the_sweep_keeps_only_live_connections() {
        let mut e = SendEdges::default();
        e.on_send(&mut v4(TcpControl::Syn, 1, &[]));
        e.on_send(&mut v6(TcpControl::Syn, 1, &[]));
        let live = IpEndpoint::new(A.into(), 40000);
        e.retain(|(local, _)| *local == live);
        assert_eq!(e.len(), 1);
    }
}
