//! The data path's one scheduling heuristic: a thread that has just written a burst of
//! inbound datagrams to the TUN yields its CPU.
//!
//! Why: a reader that always finds more datagrams waiting keeps its CPU through the scheduler's
//! slice, and the application it feeds on that CPU, woken by the first write, waits meanwhile.
//! TCP applications lose nothing by waiting (their window closes), datagram receivers lose
//! whatever overflows their socket buffer. A yield with nothing else runnable is one cheap
//! system call, so the bar is low; TCP-only writes never pay it (yielding after them cost a TCP
//! stream 13 % in context switches). Measured on `make bench` (64-byte UDP delivered, see
//! `docs/design-notes.md`, "Tuning artifacts, each measured"); `Options::datagram_yield` (the
//! daemon's `VPN_DATAGRAM_YIELD=0`) turns it off.
//!
//! Every other tuning artifact this module once held (marking the thread carrying a bulk
//! transfer's ACKs `SCHED_BATCH`) measured no gain and is gone; a new one goes here, behind a
//! switch of its own in [`crate::Options`], with its same-run A/B in the design notes.

/// Inbound datagrams (UDP) in one TUN write after which the writing thread yields its CPU.
pub(crate) const DATAGRAM_BURST: usize = 16;

/// Whether and when a thread writing inbound datagrams to the TUN yields.
pub(crate) struct DatagramYield {
    on: bool,
}

impl DatagramYield {
    pub(crate) fn new(on: bool) -> Self {
        DatagramYield { on }
    }

    /// A thread wrote `datagrams` inbound UDP packets to the TUN in one write: after a burst,
    /// give the CPU to whatever that woke (see [`DATAGRAM_BURST`]). Returns whether it yielded.
    #[inline]
    pub(crate) fn after_write(&self, datagrams: usize) -> bool {
        let burst = self.on && datagrams >= DATAGRAM_BURST;
        if burst {
            std::thread::yield_now();
        }
        burst
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn yields_after_datagram_bursts_only_when_enabled() {
        let on = DatagramYield::new(true);
        assert!(!on.after_write(0));
        assert!(!on.after_write(DATAGRAM_BURST - 1));
        assert!(on.after_write(DATAGRAM_BURST));
        assert!(on.after_write(128));
        let off = DatagramYield::new(false);
        assert!(!off.after_write(128));
    }
}
