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
    pub(crate) tcp_buffer: usize,
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
            tcp_buffer: 1 << 20,
            udp_buffer: 256 << 10,
            budget: 128 << 20,
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
    /// The defaults: 1 MiB TCP buffers each way, a 128 MiB budget, 4096 sockets.
    pub fn new() -> Options {
        Options::default()
    }

    /// Each TCP connection's receive and send buffer (the window it can offer and keep in
    /// flight). A connection's rate is at most buffer / round trip: 1 MiB is 4 Gbit/s at 2 ms.
    /// Clamped to 4 KiB ..= 64 MiB.
    pub fn tcp_buffer(mut self, bytes: usize) -> Options {
        self.tcp_buffer = bytes.clamp(4 << 10, 64 << 20);
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
