//! The two faces smoltcp sees of the TUN, both over the device's own buffers.
//!
//! [`Ingress`] hands smoltcp the packets the device writes (decrypted tunnel traffic) straight
//! from the device's slabs; what smoltcp answers while taking them in (a reset, an ICMP error,
//! an echo reply) goes to a bounded reply queue. [`Egress`] lets smoltcp write the packets it
//! sends directly into the buffers of the device's TUN read: one copy per packet, from the
//! socket's send buffer into the slab the device then encrypts in place.

use smoltcp::phy::{self, Checksum, ChecksumCapabilities, DeviceCapabilities, Medium};
use smoltcp::time::Instant;
use std::collections::VecDeque;

/// At most this many replies wait for the next TUN read; more are dropped, as a full NIC
/// queue would drop them.
pub(crate) const MAX_REPLIES: usize = 1024;

/// What smoltcp is told about the link: IP packets, the tunnel MTU, and checksums computed on
/// send but not verified on receipt (what arrives was authenticated by the tunnel's AEAD;
/// the peer's kernel verifies what it receives).
fn capabilities(mtu: usize, burst: usize) -> DeviceCapabilities {
    let mut checksum = ChecksumCapabilities::default();
    checksum.ipv4 = Checksum::Tx;
    checksum.udp = Checksum::Tx;
    checksum.tcp = Checksum::Tx;
    checksum.icmpv4 = Checksum::Tx;
    checksum.icmpv6 = Checksum::Tx;
    let mut caps = DeviceCapabilities::default();
    caps.medium = Medium::Ip;
    caps.max_transmission_unit = mtu;
    caps.max_burst_size = Some(burst);
    caps.checksum = checksum;
    caps
}

/// The device's write: packets from the tunnel, in order.
pub(crate) struct Ingress<'a> {
    packets: &'a [&'a [u8]],
    next: usize,
    replies: &'a mut VecDeque<Vec<u8>>,
    mtu: usize,
}

impl<'a> Ingress<'a> {
    pub(crate) fn new(
        packets: &'a [&'a [u8]],
        replies: &'a mut VecDeque<Vec<u8>>,
        mtu: usize,
    ) -> Self {
        Ingress {
            packets,
            next: 0,
            replies,
            mtu,
        }
    }
}

/// One packet from the tunnel.
pub(crate) struct PacketRx<'a>(&'a [u8]);

impl phy::RxToken for PacketRx<'_> {
    fn consume<R, F: FnOnce(&[u8]) -> R>(self, f: F) -> R {
        f(self.0)
    }
}

/// A reply produced while taking packets in, queued for the next TUN read.
pub(crate) struct ReplyTx<'a> {
    replies: &'a mut VecDeque<Vec<u8>>,
}

impl phy::TxToken for ReplyTx<'_> {
    fn consume<R, F: FnOnce(&mut [u8]) -> R>(self, len: usize, f: F) -> R {
        let mut packet = vec![0; len];
        let r = f(&mut packet);
        if self.replies.len() < MAX_REPLIES {
            self.replies.push_back(packet);
        }
        r
    }
}

impl phy::Device for Ingress<'_> {
    type RxToken<'b>
        = PacketRx<'b>
    where
        Self: 'b;
    type TxToken<'b>
        = ReplyTx<'b>
    where
        Self: 'b;

    fn receive(&mut self, _: Instant) -> Option<(PacketRx<'_>, ReplyTx<'_>)> {
        let packet = *self.packets.get(self.next)?;
        self.next += 1;
        Some((
            PacketRx(packet),
            ReplyTx {
                replies: self.replies,
            },
        ))
    }

    fn transmit(&mut self, _: Instant) -> Option<ReplyTx<'_>> {
        Some(ReplyTx {
            replies: self.replies,
        })
    }

    fn capabilities(&self) -> DeviceCapabilities {
        capabilities(self.mtu, self.packets.len().max(1))
    }
}

/// The device's read: smoltcp fills the read's buffers, packet `i` at `bufs[i][offset..]`.
pub(crate) struct Egress<'a, 'b> {
    bufs: &'a mut [&'b mut [u8]],
    sizes: &'a mut [usize],
    offset: usize,
    used: usize,
    mtu: usize,
}

impl<'a, 'b> Egress<'a, 'b> {
    pub(crate) fn new(
        bufs: &'a mut [&'b mut [u8]],
        sizes: &'a mut [usize],
        offset: usize,
        mtu: usize,
    ) -> Self {
        Egress {
            bufs,
            sizes,
            offset,
            used: 0,
            mtu,
        }
    }

    /// How many buffers hold a packet.
    pub(crate) fn used(&self) -> usize {
        self.used
    }

    /// Whether every buffer holds a packet.
    pub(crate) fn is_full(&self) -> bool {
        self.used >= self.bufs.len().min(self.sizes.len())
    }
}

/// One buffer of the device's read.
pub(crate) struct SlotTx<'t> {
    buf: &'t mut [u8],
    size: &'t mut usize,
    used: &'t mut usize,
}

impl phy::TxToken for SlotTx<'_> {
    fn consume<R, F: FnOnce(&mut [u8]) -> R>(self, len: usize, f: F) -> R {
        if len > self.buf.len() {
            // Larger than the device's buffer (its MTU shrank under us): build it aside and
            // drop it, as a link drops an oversized frame; TCP sends it again smaller.
            return f(&mut vec![0; len]);
        }
        let r = f(&mut self.buf[..len]);
        *self.size = len;
        *self.used += 1;
        r
    }
}

/// A read's receive side: nothing arrives through a read.
pub(crate) struct NoRx;

impl phy::RxToken for NoRx {
    fn consume<R, F: FnOnce(&[u8]) -> R>(self, f: F) -> R {
        f(&[])
    }
}

impl phy::Device for Egress<'_, '_> {
    type RxToken<'c>
        = NoRx
    where
        Self: 'c;
    type TxToken<'c>
        = SlotTx<'c>
    where
        Self: 'c;

    fn receive(&mut self, _: Instant) -> Option<(NoRx, SlotTx<'_>)> {
        None
    }

    fn transmit(&mut self, _: Instant) -> Option<SlotTx<'_>> {
        if self.is_full() {
            return None;
        }
        let i = self.used;
        let buf = self.bufs[i].get_mut(self.offset..)?;
        Some(SlotTx {
            buf,
            size: &mut self.sizes[i],
            used: &mut self.used,
        })
    }

    fn capabilities(&self) -> DeviceCapabilities {
        capabilities(self.mtu, self.bufs.len().max(1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use smoltcp::phy::{Device, RxToken, TxToken};

    #[test]
    fn egress_fills_buffers_after_the_offset_and_stops_when_full() {
        let mut a = [0u8; 64];
        let mut b = [0u8; 64];
        let mut bufs: Vec<&mut [u8]> = vec![&mut a, &mut b];
        let mut sizes = [0usize; 2];
        let mut e = Egress::new(&mut bufs, &mut sizes, 16, 48);
        for n in [10usize, 20] {
            let t = e.transmit(Instant::ZERO).unwrap();
            t.consume(n, |p| p.fill(n as u8));
        }
        assert!(e.is_full() && e.transmit(Instant::ZERO).is_none());
        assert_eq!(e.used(), 2);
        assert_eq!(sizes, [10, 20]);
        assert_eq!(&a[16..26], &[10; 10]);
        assert_eq!(a[15], 0);
        assert_eq!(&b[16..36], &[20; 20]);
    }

    #[test]
    fn an_oversized_packet_is_dropped_not_truncated() {
        let mut a = [0u8; 32];
        let mut bufs: Vec<&mut [u8]> = vec![&mut a];
        let mut sizes = [0usize; 1];
        let mut e = Egress::new(&mut bufs, &mut sizes, 16, 1420);
        e.transmit(Instant::ZERO)
            .unwrap()
            .consume(17, |p| p.fill(1));
        assert_eq!(e.used(), 0);
    }

    #[test]
    fn ingress_yields_each_packet_once_and_queues_replies_up_to_the_cap() {
        let (p1, p2) = ([1u8, 2], [3u8]);
        let packets: Vec<&[u8]> = vec![&p1, &p2];
        let mut replies = VecDeque::new();
        let mut i = Ingress::new(&packets, &mut replies, 1420);
        let mut seen = Vec::new();
        while let Some((rx, _)) = i.receive(Instant::ZERO) {
            rx.consume(|p| seen.push(p.to_vec()));
        }
        assert_eq!(seen, vec![vec![1, 2], vec![3]]);
        for _ in 0..MAX_REPLIES + 5 {
            i.transmit(Instant::ZERO).unwrap().consume(3, |p| p.fill(9));
        }
        assert_eq!(replies.len(), MAX_REPLIES);
    }
}
