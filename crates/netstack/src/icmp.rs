//! Echo requests through the stack (`Net::ping`).

use crate::signal::Signal;
use crate::stack::{Proto, Stack};
use smoltcp::socket::icmp;
use smoltcp::wire::{Icmpv4Message, Icmpv4Packet, Icmpv6Message, Icmpv6Packet, IpAddress};
use std::io;
use std::net::IpAddr;
use std::sync::Arc;
use std::task::Poll;
use std::time::{Duration, Instant};

/// The echo payload: the request's own bytes come back, so the reply can be checked.
const PAYLOAD: &[u8] = b"vpn-netstack ping";

/// Sends one echo request to `to` and waits for its reply; returns the round trip.
pub(crate) fn ping(stack: &Arc<Stack>, to: IpAddr, timeout: Duration) -> io::Result<Duration> {
    if to.is_unspecified() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "cannot ping an unspecified address",
        ));
    }
    let signal = Signal::new();
    let ident = rand::random::<u16>();
    let seq = rand::random::<u16>();
    let dst = IpAddress::from(to);
    let handle = {
        let mut st = stack.lock();
        let buffer =
            || icmp::PacketBuffer::new(vec![icmp::PacketMetadata::EMPTY; 4], vec![0; 1024]);
        let mut socket = icmp::Socket::new(buffer(), buffer());
        socket
            .bind(icmp::Endpoint::Ident(ident))
            .map_err(|e| io::Error::new(io::ErrorKind::AddrInUse, e.to_string()))?;
        let src = st.iface.get_source_address(&dst).ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::AddrNotAvailable,
                format!("no source address for {to}"),
            )
        })?;
        let request = echo_request(src, dst, ident, seq);
        socket
            .send_slice(&request, dst)
            .map_err(|e| io::Error::new(io::ErrorKind::AddrNotAvailable, e.to_string()))?;
        st.add(&stack.opts, Proto::Icmp, socket, 2048, None)?
    };
    stack.kick();
    let sent = Instant::now();
    let r = stack.block(&signal, Some(timeout), |st| {
        let s = st.sockets.get_mut::<icmp::Socket>(handle);
        let mut buf = [0u8; 1024];
        while let Ok((n, from)) = s.recv_slice(&mut buf) {
            if from == dst && is_our_reply(&buf[..n], ident, seq) {
                return Poll::Ready(Ok(sent.elapsed()));
            }
        }
        s.register_recv_waker(&signal.waker());
        Poll::Pending
    });
    stack.lock().remove(handle);
    r
}

/// An echo request with the checksum filled (the stack does not fill ICMP checksums of
/// messages an app builds).
fn echo_request(src: IpAddress, dst: IpAddress, ident: u16, seq: u16) -> Vec<u8> {
    let mut buf = vec![0u8; 8 + PAYLOAD.len()];
    match (src, dst) {
        (IpAddress::Ipv6(s), IpAddress::Ipv6(d)) => {
            let mut p = Icmpv6Packet::new_unchecked(&mut buf);
            p.set_msg_type(Icmpv6Message::EchoRequest);
            p.set_msg_code(0);
            p.set_echo_ident(ident);
            p.set_echo_seq_no(seq);
            p.payload_mut().copy_from_slice(PAYLOAD);
            p.fill_checksum(&s, &d);
        }
        _ => {
            let mut p = Icmpv4Packet::new_unchecked(&mut buf);
            p.set_msg_type(Icmpv4Message::EchoRequest);
            p.set_msg_code(0);
            p.set_echo_ident(ident);
            p.set_echo_seq_no(seq);
            p.data_mut().copy_from_slice(PAYLOAD);
            p.fill_checksum();
        }
    }
    buf
}

/// Whether `msg` is the echo reply to our request.
fn is_our_reply(msg: &[u8], ident: u16, seq: u16) -> bool {
    if let Ok(p) = Icmpv4Packet::new_checked(msg) {
        if p.msg_type() == Icmpv4Message::EchoReply {
            return p.echo_ident() == ident && p.echo_seq_no() == seq && p.data() == PAYLOAD;
        }
    }
    if let Ok(p) = Icmpv6Packet::new_checked(msg) {
        if p.msg_type() == Icmpv6Message::EchoReply {
            return p.echo_ident() == ident && p.echo_seq_no() == seq && p.payload() == PAYLOAD;
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_turned_into_a_reply_is_recognised() {
        let (s, d) = (IpAddress::v4(100, 64, 0, 1), IpAddress::v4(100, 64, 0, 2));
        let mut msg = echo_request(s, d, 7, 9);
        assert!(!is_our_reply(&msg, 7, 9), "a request is not a reply");
        Icmpv4Packet::new_unchecked(&mut msg).set_msg_type(Icmpv4Message::EchoReply);
        assert!(is_our_reply(&msg, 7, 9));
        assert!(!is_our_reply(&msg, 7, 10));
        assert!(!is_our_reply(&msg[..4], 7, 9));
    }
}
