//! The stack's settings: a typed builder, defaults sized for a tunnel at gigabit rates.

use std::time::Duration;

/// TCP congestion control for the stack's connections.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum CongestionControl {
    /// CUBIC, as Linux uses by default.
    #[default]
    Cubic,
    /// No congestion control: the window is the peer's receive window (for lossless links).
    None,
}

/// Settings for [`create_net_tun_with`](crate::create_net_tun_with).
#[derive(Clone, Debug)]
pub struct Options {
    pub(crate) tcp_rx: usize,
    pub(crate) tcp_tx: usize,
    pub(crate) udp_buffer: usize,
    pub(crate) budget: usize,
    pub(crate) max_sockets: usize,
    pub(crate) backlog: usize,
    pub(crate) handshake_timeout: Duration,
    pub(crate) linger: Duration,
    pub(crate) congestion: CongestionControl,
    pub(crate) batch: usize,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            tcp_rx: 8 << 20,
            tcp_tx: 1 << 20,
            udp_buffer: 256 << 10,
            budget: 512 << 20,
            max_sockets: 4096,
            backlog: 128,
            handshake_timeout: Duration::from_secs(20),
            linger: Duration::from_secs(30),
            congestion: CongestionControl::Cubic,
            batch: 128,
        }
    }
}

impl Options {
    /// The defaults: TCP buffers of 8 MiB to receive and 1 MiB to send, a 512 MiB budget,
    /// 4096 sockets.
    pub fn new() -> Options {
        Options::default()
    }

    /// Each TCP connection's receive and send buffer, both the same size. Clamped to
    /// 4 KiB ..= 64 MiB.
    pub fn tcp_buffer(self, bytes: usize) -> Options {
        self.tcp_receive_buffer(bytes).tcp_send_buffer(bytes)
    }

    /// Each TCP connection's receive buffer: the window it offers, so a connection receives at
    /// most buffer / round trip (8 MiB is 4 Gbit/s at 16 ms, a loaded tunnel's queueing
    /// included; 1 MiB held a single stream to a quarter of that in the benchmark). Pages are
    /// touched only as data passes through, but the whole size is charged to the budget.
    /// Clamped to 4 KiB ..= 64 MiB.
    pub fn tcp_receive_buffer(mut self, bytes: usize) -> Options {
        self.tcp_rx = bytes.clamp(4 << 10, 64 << 20);
        self
    }

    /// Each TCP connection's send buffer: what it keeps in flight and unsent. Clamped to
    /// 4 KiB ..= 64 MiB.
    pub fn tcp_send_buffer(mut self, bytes: usize) -> Options {
        self.tcp_tx = bytes.clamp(4 << 10, 64 << 20);
        self
    }

    /// Each UDP socket's receive and send buffer. Clamped to 4 KiB ..= 16 MiB.
    pub fn udp_buffer(mut self, bytes: usize) -> Options {
        self.udp_buffer = bytes.clamp(4 << 10, 16 << 20);
        self
    }

    /// The most socket buffer memory the stack allocates in all. A connection or socket that
    /// would go over it is refused (an incoming SYN is dropped, a dial fails with
    /// `OutOfMemory`), so a flood cannot grow the process.
    pub fn memory_budget(mut self, bytes: usize) -> Options {
        self.budget = bytes;
        self
    }

    /// The most sockets open at once (TCP, UDP and ICMP, including connections not yet
    /// accepted).
    pub fn max_sockets(mut self, n: usize) -> Options {
        self.max_sockets = n.max(1);
        self
    }

    /// How many connections a listener holds that are being set up or not yet accepted.
    pub fn backlog(mut self, n: usize) -> Options {
        self.backlog = n.max(1);
        self
    }

    /// How long a connection may take to be set up (a dial's default timeout, and how long a
    /// half-open incoming connection holds its slot).
    pub fn handshake_timeout(mut self, d: Duration) -> Options {
        self.handshake_timeout = d;
        self
    }

    /// How long a closed connection may keep sending what was still buffered before it is
    /// reset.
    pub fn linger(mut self, d: Duration) -> Options {
        self.linger = d;
        self
    }

    /// The congestion control of new TCP connections.
    pub fn congestion_control(mut self, cc: CongestionControl) -> Options {
        self.congestion = cc;
        self
    }

    /// The TUN's batch size: the most packets one read or write moves.
    pub fn batch_size(mut self, n: usize) -> Options {
        self.batch = n.clamp(1, 1024);
        self
    }
}
