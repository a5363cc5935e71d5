//! A peer whose endpoint is routed through the tunnel itself: our own datagrams to it come back
//! through the TUN and must be dropped there, not sealed and sent round the loop again.

#![forbid(unsafe_code)]

use std::time::Duration;
use vpn_conn::memory::MemoryNetwork;
use vpn_tests::*;

fn own_datagrams_routed_back_to_their_peer_are_dropped(batch: usize) {
    let net = MemoryNetwork::new();
    let (a, b) = pair(&net, batch, None);
    assert!(ping(&a, &b, false, Duration::from_secs(5)));
    // b's underlay address becomes one of its allowed IPs: a datagram to b's endpoint read from
    // a's TUN is routed to b.
    a.dev
        .ipc_set(&format!(
            "public_key={}\nallowed_ip={}/32\n",
            b.public_hex(),
            b.underlay
        ))
        .unwrap();
    // And b accepts packets from a's underlay address, so whatever a sends to it arrives on b's
    // TUN and can be seen there.
    b.dev
        .ipc_set(&format!(
            "public_key={}\nallowed_ip={}/32\n",
            a.public_hex(),
            a.underlay
        ))
        .unwrap();
    let (src, dst) = (a.underlay, b.underlay);
    let own = udp_packet(src, dst, a.dev.listen_port(), b.addr().port(), b"loop");
    for _ in 0..3 {
        assert!(a.tun.inject(own.clone()));
    }
    assert!(
        wait_for(Duration::from_secs(5), || a.dev.stats().drop_loop == 3),
        "looping datagrams not counted: {:?}",
        a.dev.stats()
    );
    // Another source port to the same endpoint is ordinary traffic for the tunnel. The peer's
    // packets stay in order, so a looping datagram that had been sent would reach b's TUN
    // before this one.
    let other = udp_packet(src, dst, 1000, b.addr().port(), b"not a loop");
    assert!(a.tun.inject(other.clone()));
    loop {
        let got = b
            .tun
            .recv(Duration::from_secs(5))
            .expect("traffic to the endpoint's address from another port was not sent");
        assert_ne!(got, own, "a looping datagram was sent");
        if got == other {
            break;
        }
    }
    assert_eq!(a.dev.stats().drop_loop, 3);
}

#[test]
fn own_datagrams_routed_back_to_their_peer_are_dropped_when_read_alone() {
    own_datagrams_routed_back_to_their_peer_are_dropped(1);
}

#[test]
fn own_datagrams_routed_back_to_their_peer_are_dropped_in_a_batch() {
    own_datagrams_routed_back_to_their_peer_are_dropped(16);
}
