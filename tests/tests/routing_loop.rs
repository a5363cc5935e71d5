//! A peer whose endpoint is routed through the tunnel itself: our own datagrams to it come back
//! through the TUN and must be dropped there, not sealed and sent round the loop again.

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
    let peer = a.dev.peer(&b.key.public_key()).unwrap();
    let (_, tx0) = peer.rx_tx_bytes();
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
    assert_eq!(peer.rx_tx_bytes().1, tx0, "a looping datagram was sent");
    // Another source port to the same endpoint is ordinary traffic for the tunnel.
    let other = udp_packet(src, dst, 1000, b.addr().port(), b"not a loop");
    assert!(a.tun.inject(other));
    assert!(
        wait_for(Duration::from_secs(5), || peer.rx_tx_bytes().1 > tx0),
        "traffic to the endpoint's address from another port was not sent"
    );
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
