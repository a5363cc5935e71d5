//! Pipeline counters: incremented once per batch (or per rare event), read by `vpn show`.

use std::sync::atomic::{AtomicU64, Ordering};

macro_rules! stats {
    ($($(#[$doc:meta])* $name:ident),* $(,)?) => {
        #[derive(Default)]
        pub(crate) struct DeviceStats { $(pub $name: AtomicU64,)* }

        /// A snapshot of the device's counters.
        #[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
        pub struct Stats { $($(#[$doc])* pub $name: u64,)* }

        impl DeviceStats {
            pub fn snapshot(&self) -> Stats {
                Stats { $($name: self.$name.load(Ordering::Relaxed),)* }
            }
        }

        impl Stats {
            /// Every counter with its name, in declaration order (for dumps such as `vpn show`).
            pub fn fields(&self) -> Vec<(&'static str, u64)> {
                vec![$((stringify!($name), self.$name),)*]
            }
        }
    };
}

stats! {
    /// TUN read calls.
    tun_reads,
    /// Packets those reads returned.
    tun_packets_read,
    /// TUN write calls.
    tun_writes,
    /// Packets handed to those writes.
    tun_packets_written,
    /// Times a thread yielded its CPU after writing a burst of inbound datagrams (UDP).
    datagram_yields,
    /// Bind receive calls.
    recv_calls,
    /// Datagrams those calls returned, counted once each batch's work is handed over.
    datagrams_received,
    /// Per-peer inbound batches opened (a datagram read alone and opened by its reader counts
    /// as one).
    inbound_containers,
    /// Bind send calls that succeeded.
    send_calls,
    /// Datagrams in those calls.
    datagrams_sent,
    /// Failed bind sends.
    send_errors,
    /// Handshake initiations and responses sent.
    handshakes_sent,
    /// Cookie replies sent (we were under load).
    cookie_replies_sent,
    /// Cookie replies received and decrypted: our next handshake message carries MAC2.
    cookie_replies_consumed,
    /// Outbound packets with no peer for their destination.
    drop_no_route,
    /// Transport packets for an unknown receiver index.
    drop_unknown_index,
    /// Transport packets for a keypair older than RejectAfterTime.
    drop_expired_keypair,
    /// Datagrams that were not WireGuard messages.
    drop_malformed,
    /// Transport packets that failed authentication.
    drop_decrypt,
    /// Replayed or too old counters.
    drop_replay,
    /// Inner source address not allowed for the sending peer.
    drop_source_not_allowed,
    /// Handshake messages with a bad MAC1.
    drop_bad_mac,
    /// Handshake messages refused past their MAC1: an initiation that does not decrypt, names
    /// no peer of ours, or is replayed or too soon after the last; a response to no initiation
    /// of ours in flight; a cookie reply for one of ours that does not decrypt.
    drop_handshake_refused,
    /// Handshake messages dropped by the per-source rate limiter.
    drop_rate_limited,
    /// Handshake messages dropped because the handshake queue was full.
    drop_handshake_queue_full,
    /// Our own datagrams to a peer that came back through the TUN to be routed to that same
    /// peer (its endpoint is routed through the tunnel): dropped, or they would loop.
    drop_loop,
}

impl Stats {
    /// Average packets per TUN read.
    pub fn packets_per_tun_read(&self) -> f64 {
        ratio(self.tun_packets_read, self.tun_reads)
    }

    /// Average datagrams per bind receive call.
    pub fn datagrams_per_recv(&self) -> f64 {
        ratio(self.datagrams_received, self.recv_calls)
    }

    /// Average datagrams per bind send call.
    pub fn datagrams_per_send(&self) -> f64 {
        ratio(self.datagrams_sent, self.send_calls)
    }
}

fn ratio(a: u64, b: u64) -> f64 {
    if b == 0 {
        0.0
    } else {
        a as f64 / b as f64
    }
}
