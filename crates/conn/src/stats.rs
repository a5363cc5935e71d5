//! Counters of a [`StdNetBind`](crate::StdNetBind): relaxed atomics bumped once per call (not
//! per datagram), cheap enough to stay on.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// A snapshot of a bind's counters since it was created (they survive close and reopen).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BindStats {
    /// Calls of the receive functions that read from a socket.
    pub recv_calls: u64,
    /// Datagrams handed to the caller (GRO segments counted one by one).
    pub datagrams_received: u64,
    /// Received datagrams the kernel had coalesced (UDP GRO) from two or more.
    pub gro_super_datagrams: u64,
    /// Of those, the ones read straight into one buffer per segment (scattered by the segment
    /// size of the previous read), with nothing to split after the read.
    pub gro_in_place: u64,
    /// `send` calls.
    pub send_calls: u64,
    /// Datagrams the kernel accepted.
    pub datagrams_sent: u64,
    /// Messages sent with UDP GSO (each carrying two or more datagrams).
    pub gso_messages: u64,
    /// Datagrams dropped because they did not fit the receive buffer.
    pub truncated_drops: u64,
    /// Datagrams dropped because a batched send call accepted none of them (a full queue; darwin
    /// `sendmsg_x`). Not counted in `datagrams_sent`.
    pub send_drops: u64,
    /// Connected sockets open now.
    pub connected_open: u64,
    /// Connected sockets dialled and handed to a reader.
    pub connected_dials: u64,
    /// Datagrams sent on connected sockets (not counted in `datagrams_sent`).
    pub connected_datagrams_sent: u64,
    /// Datagrams received on connected sockets (not counted in `datagrams_received`).
    pub connected_datagrams_received: u64,
}

#[derive(Default)]
pub(crate) struct Stats {
    recv_calls: AtomicU64,
    datagrams_received: AtomicU64,
    gro_super_datagrams: AtomicU64,
    gro_in_place: AtomicU64,
    send_calls: AtomicU64,
    datagrams_sent: AtomicU64,
    gso_messages: AtomicU64,
    truncated_drops: AtomicU64,
    send_drops: AtomicU64,
}

/// Adds `n` to a counter; a zero is not written (no cache-line traffic for it).
pub(crate) fn add(c: &AtomicU64, n: usize) {
    if n != 0 {
        c.fetch_add(n as u64, Relaxed);
    }
}

impl Stats {
    /// One socket read that yielded `datagrams` for the caller, `gro` coalesced datagrams and
    /// `truncated` drops.
    pub(crate) fn recv(&self, datagrams: usize, gro: usize, truncated: usize) {
        add(&self.recv_calls, 1);
        add(&self.datagrams_received, datagrams);
        add(&self.gro_super_datagrams, gro);
        add(&self.truncated_drops, truncated);
    }

    /// Coalesced datagrams of a read that landed one segment per buffer.
    #[cfg(any(target_os = "linux", target_os = "android"))]
    pub(crate) fn in_place(&self, n: usize) {
        add(&self.gro_in_place, n);
    }

    /// Datagrams handed over from an earlier read (no socket call), and drops found there.
    #[cfg(any(target_os = "linux", target_os = "android"))]
    pub(crate) fn delivered(&self, datagrams: usize, truncated: usize) {
        add(&self.datagrams_received, datagrams);
        add(&self.truncated_drops, truncated);
    }

    /// Datagrams a full send queue refused.
    #[cfg(any(target_vendor = "apple", test))]
    pub(crate) fn send_dropped(&self, n: usize) {
        add(&self.send_drops, n);
    }

    pub(crate) fn send(&self, datagrams: usize, gso_messages: usize) {
        add(&self.send_calls, 1);
        add(&self.datagrams_sent, datagrams);
        add(&self.gso_messages, gso_messages);
    }

    pub(crate) fn snapshot(&self) -> BindStats {
        BindStats {
            recv_calls: self.recv_calls.load(Relaxed),
            datagrams_received: self.datagrams_received.load(Relaxed),
            gro_super_datagrams: self.gro_super_datagrams.load(Relaxed),
            gro_in_place: self.gro_in_place.load(Relaxed),
            send_calls: self.send_calls.load(Relaxed),
            datagrams_sent: self.datagrams_sent.load(Relaxed),
            gso_messages: self.gso_messages.load(Relaxed),
            truncated_drops: self.truncated_drops.load(Relaxed),
            send_drops: self.send_drops.load(Relaxed),
            ..BindStats::default()
        }
    }
}
