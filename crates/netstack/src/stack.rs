//! The stack: one smoltcp interface and its sockets behind one lock, driven by the device.
//!
//! The device's TUN write hands packets from the tunnel to [`Stack::ingest`]; its TUN read
//! calls [`Stack::egress`], which lets smoltcp write what the sockets have to send into the
//! read's buffers and otherwise sleeps until a socket has something to send or a timer is due.
//! App threads block on their own sockets' [`Signal`]s, never on the device.
//!
//! Every socket is accounted: its buffers are charged to the stack's memory budget when it is
//! made and given back when it is removed, and the number of sockets is capped. A listener
//! makes one socket per SYN only while its backlog has room, so a SYN flood costs at most
//! `backlog` half-open sockets per listener, each removed after the handshake timeout.

use crate::options::Options;
use crate::phy::{Egress, Ingress};
use crate::send_edge::SendEdges;
use crate::signal::Signal;
use parking_lot::{Mutex, MutexGuard};
use smoltcp::iface::{
    Config, Interface, PollIngressSingleResult, PollResult, SocketHandle, SocketSet,
};
use smoltcp::socket::tcp;
use smoltcp::time::{Duration as SmolDuration, Instant as SmolInstant};
use smoltcp::wire::{
    HardwareAddress, IpAddress, IpCidr, IpEndpoint, IpProtocol, Ipv4Packet, Ipv6Packet, TcpPacket,
};
use std::collections::{HashMap, HashSet, VecDeque};
use std::io;
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::Poll;
use std::time::{Duration, Instant};

/// How long the TUN read sleeps at most before it looks at the timers again.
const MAX_IDLE: Duration = Duration::from_millis(250);
/// How often closed and abandoned sockets are swept.
const HOUSEKEEPING: Duration = Duration::from_millis(250);
/// The smallest TCP buffer a connection gets when the budget is tight.
const MIN_TCP_BUFFER: usize = 16 << 10;
/// Ephemeral ports, as IANA and most stacks use them.
const EPHEMERAL: std::ops::RangeInclusive<u16> = 49152..=65535;

/// The transport a port is bound on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Proto {
    Tcp,
    Udp,
    Icmp,
}

/// What the stack keeps about one socket besides smoltcp's own state.
struct Entry {
    kind: Proto,
    /// Budget charged for the socket's buffers.
    cost: usize,
    /// The port it holds in [`State::ports`], if any (dials and binds; accepted connections
    /// share their listener's port and hold none).
    port: Option<(Proto, u16)>,
    /// When its owner dropped it; it is removed once closed, or reset after the linger time.
    orphan: Option<Instant>,
    /// Whether it was reset while orphaned (removed at the next sweep, after the reset went).
    aborted: bool,
    created: Instant,
}

/// A TCP listener: the connections it set up and nobody has accepted yet.
pub(crate) struct Listener {
    addr: Option<IpAddress>,
    pub(crate) pending: VecDeque<SocketHandle>,
    pub(crate) signal: Arc<Signal>,
}

/// Everything behind the stack's lock.
pub(crate) struct State {
    pub(crate) iface: Interface,
    pub(crate) sockets: SocketSet<'static>,
    replies: VecDeque<Vec<u8>>,
    /// What each connection has sent, so its bare ACKs never claim less.
    edges: SendEdges,
    entries: HashMap<SocketHandle, Entry>,
    pub(crate) listeners: HashMap<u16, Listener>,
    ports: HashSet<(Proto, u16)>,
    used: usize,
    next_housekeeping: Instant,
    counters: Counters,
}

/// Packet and call counts, for [`crate::StackStats`].
#[derive(Default)]
struct Counters {
    packets_in: u64,
    packets_out: u64,
    reads: u64,
    writes: u64,
}

/// The stack shared by the TUN, the [`Net`](crate::Net) and every socket.
pub(crate) struct Stack {
    state: Mutex<State>,
    /// Notified when a socket may have something to send; the TUN read sleeps on it.
    egress: Arc<Signal>,
    pub(crate) opts: Options,
    closed: AtomicBool,
    epoch: Instant,
    mtu: usize,
    pub(crate) dns: Vec<IpAddr>,
    pub(crate) addrs: Vec<IpAddr>,
}

impl Stack {
    pub(crate) fn new(
        addrs: &[IpAddr],
        dns: &[IpAddr],
        mtu: usize,
        opts: Options,
    ) -> io::Result<Arc<Stack>> {
        if addrs.is_empty() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "the stack needs at least one address",
            ));
        }
        if addrs.len() > 8 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "the stack takes at most 8 addresses",
            ));
        }
        if !(576..=65535).contains(&mtu) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("MTU {mtu} is outside 576..=65535"),
            ));
        }
        let epoch = Instant::now();
        let mut replies = VecDeque::new();
        let mut probe = Ingress::new(&[], &mut replies, mtu);
        let mut iface = Interface::new(
            Config::new(HardwareAddress::Ip),
            &mut probe,
            SmolInstant::ZERO,
        );
        iface.update_ip_addrs(|ips| {
            for a in addrs {
                let prefix = if a.is_ipv4() { 32 } else { 128 };
                let _ = ips.push(IpCidr::new(IpAddress::from(*a), prefix));
            }
        });
        // Every destination is behind the tunnel: a default route through our own address
        // (on an IP link the gateway is never looked up, only required to exist).
        // The first address of each family is the gateway of that family's default route.
        if let Some(IpAddr::V4(v4)) = addrs.iter().find(|a| a.is_ipv4()) {
            let _ = iface.routes_mut().add_default_ipv4_route(*v4);
        }
        if let Some(IpAddr::V6(v6)) = addrs.iter().find(|a| a.is_ipv6()) {
            let _ = iface.routes_mut().add_default_ipv6_route(*v6);
        }
        Ok(Arc::new(Stack {
            state: Mutex::new(State {
                iface,
                sockets: SocketSet::new(Vec::new()),
                replies,
                edges: SendEdges::default(),
                entries: HashMap::new(),
                listeners: HashMap::new(),
                ports: HashSet::new(),
                used: 0,
                next_housekeeping: epoch,
                counters: Counters::default(),
            }),
            egress: Signal::new(),
            opts,
            closed: AtomicBool::new(false),
            epoch,
            mtu,
            dns: dns.to_vec(),
            addrs: addrs.to_vec(),
        }))
    }

    /// smoltcp's clock: microseconds since the stack was made.
    fn now(&self) -> SmolInstant {
        self.smol_time(Instant::now())
    }

    /// `t` on smoltcp's clock.
    fn smol_time(&self, t: Instant) -> SmolInstant {
        SmolInstant::from_micros(t.duration_since(self.epoch).as_micros() as i64)
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock()
    }

    pub(crate) fn mtu(&self) -> usize {
        self.mtu
    }

    pub(crate) fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    /// Tells the TUN read that a socket may have something to send.
    pub(crate) fn kick(&self) {
        self.egress.notify();
    }

    /// Runs `f` under the lock until it is ready, sleeping on `signal` in between (`f`
    /// registers the signal's waker with the socket it waits on before returning `Pending`).
    pub(crate) fn block<T>(
        &self,
        signal: &Arc<Signal>,
        timeout: Option<Duration>,
        mut f: impl FnMut(&mut State) -> Poll<io::Result<T>>,
    ) -> io::Result<T> {
        let deadline = timeout.map(|t| Instant::now() + t);
        loop {
            if self.is_closed() {
                return Err(closed());
            }
            if let Poll::Ready(r) = f(&mut self.lock()) {
                return r;
            }
            if !signal.wait(deadline) && deadline.is_some_and(|d| Instant::now() >= d) {
                return Err(io::Error::new(io::ErrorKind::TimedOut, "timed out"));
            }
        }
    }

    /// Takes in packets from the tunnel (the TUN's write).
    pub(crate) fn ingest<'p>(&self, packets: impl Iterator<Item = &'p [u8]>) {
        let now = self.now();
        let mut guard = self.lock();
        let st = &mut *guard;
        st.counters.writes += 1;
        for packet in packets {
            st.counters.packets_in += 1;
            let made = st.listen_for_syn(packet, &self.opts);
            let one = [packet];
            let mut dev = Ingress::new(&one, &mut st.replies, self.mtu);
            while st.iface.poll_ingress_single(now, &mut dev, &mut st.sockets)
                != PollIngressSingleResult::None
            {}
            if let Some((h, port)) = made {
                st.settle_new_connection(h, port);
            }
        }
        drop(guard);
        self.egress.notify();
    }

    /// Fills the TUN read's buffers with what the stack has to send, waiting until there is
    /// something (or the stack closes).
    pub(crate) fn egress(
        &self,
        bufs: &mut [&mut [u8]],
        sizes: &mut [usize],
        offset: usize,
    ) -> io::Result<usize> {
        let n = bufs.len().min(sizes.len());
        if n == 0 {
            return Ok(0);
        }
        loop {
            if self.is_closed() {
                return Err(closed());
            }
            let wall = Instant::now();
            let now = self.smol_time(wall);
            let mut st = self.lock();
            let st_ref = &mut *st;
            if wall >= st_ref.next_housekeeping {
                st_ref.housekeeping(&self.opts);
            }
            let mut used = 0;
            while used < n {
                let Some(reply) = st_ref.replies.pop_front() else {
                    break;
                };
                let Some(room) = bufs[used].get_mut(offset..) else {
                    continue;
                };
                if reply.len() <= room.len() {
                    room[..reply.len()].copy_from_slice(&reply);
                    st_ref.edges.on_send(&mut room[..reply.len()]);
                    sizes[used] = reply.len();
                    used += 1;
                }
            }
            let mut dev = Egress::new(&mut bufs[used..n], &mut sizes[used..n], offset, self.mtu);
            while !dev.is_full()
                && st_ref.iface.poll_egress(now, &mut dev, &mut st_ref.sockets)
                    == PollResult::SocketStateChanged
            {}
            let made = used..used + dev.used();
            for (buf, &size) in bufs[made.clone()].iter_mut().zip(&sizes[made.clone()]) {
                if let Some(packet) = buf.get_mut(offset..offset + size) {
                    st_ref.edges.on_send(packet);
                }
            }
            used = made.end;
            if used > 0 {
                st_ref.counters.reads += 1;
                st_ref.counters.packets_out += used as u64;
                return Ok(used);
            }
            let delay = st_ref.iface.poll_delay(now, &st_ref.sockets);
            drop(st);
            let wait = match delay {
                // Due now yet nothing went out: do not spin on it.
                Some(d) if d == SmolDuration::ZERO => Duration::from_millis(1),
                Some(d) => Duration::from_micros(d.total_micros()).min(MAX_IDLE),
                None => MAX_IDLE,
            };
            self.egress.wait(Some(Instant::now() + wait));
        }
    }

    /// Closes the stack: every socket is reset, every blocked call returns an error.
    pub(crate) fn close(&self) {
        if self.closed.swap(true, Ordering::AcqRel) {
            return;
        }
        let mut st = self.lock();
        for (_, s) in st.sockets.iter_mut() {
            match s {
                smoltcp::socket::Socket::Tcp(t) => t.abort(),
                smoltcp::socket::Socket::Udp(u) => u.close(),
                smoltcp::socket::Socket::Icmp(_) => {}
            }
        }
        for l in st.listeners.values() {
            l.signal.notify();
        }
        drop(st);
        self.egress.notify();
    }
}

impl State {
    /// Adds a socket whose buffers cost `cost` bytes, within the budget and the socket cap.
    pub(crate) fn add(
        &mut self,
        opts: &Options,
        kind: Proto,
        socket: impl smoltcp::socket::AnySocket<'static>,
        cost: usize,
        port: Option<(Proto, u16)>,
    ) -> io::Result<SocketHandle> {
        if self.entries.len() >= opts.max_sockets || self.used + cost > opts.budget {
            // Closed connections not yet swept still count: sweep them now, not at the tick.
            self.housekeeping(opts);
        }
        if self.entries.len() >= opts.max_sockets {
            return Err(io::Error::new(
                io::ErrorKind::OutOfMemory,
                "too many sockets open in the stack",
            ));
        }
        if self.used + cost > opts.budget {
            return Err(io::Error::new(
                io::ErrorKind::OutOfMemory,
                "the stack's memory budget is spent",
            ));
        }
        let h = self.sockets.add(socket);
        self.used += cost;
        if let Some(p) = port {
            self.ports.insert(p);
        }
        self.entries.insert(
            h,
            Entry {
                kind,
                cost,
                port,
                orphan: None,
                aborted: false,
                created: Instant::now(),
            },
        );
        Ok(h)
    }

    /// Removes a socket and gives back what it held.
    pub(crate) fn remove(&mut self, h: SocketHandle) {
        if let Some(e) = self.entries.remove(&h) {
            self.used -= e.cost;
            if let Some(p) = e.port {
                self.ports.remove(&p);
            }
            self.sockets.remove(h);
        }
    }

    /// The owner dropped `h`: it closes gracefully and is removed once closed.
    pub(crate) fn orphan(&mut self, h: SocketHandle) {
        if let Some(e) = self.entries.get_mut(&h) {
            e.orphan = Some(Instant::now());
        }
    }

    /// TCP buffer sizes (receive, send) that fit the budget: the configured ones, or both
    /// halved as often as needed (down to 16 KiB) when the budget is nearly spent, so new
    /// connections keep working, more slowly.
    pub(crate) fn tcp_buffers(&self, opts: &Options) -> (usize, usize) {
        let left = opts.budget.saturating_sub(self.used);
        let (mut rx, mut tx) = (opts.tcp_rx, opts.tcp_tx);
        while rx + tx > left && (rx > MIN_TCP_BUFFER || tx > MIN_TCP_BUFFER) {
            rx = (rx / 2).max(MIN_TCP_BUFFER);
            tx = (tx / 2).max(MIN_TCP_BUFFER);
        }
        (rx, tx)
    }

    /// A new TCP socket with the stack's settings and the given buffers.
    pub(crate) fn tcp_socket(opts: &Options, (rx, tx): (usize, usize)) -> tcp::Socket<'static> {
        let mut s = tcp::Socket::new(
            tcp::SocketBuffer::new(vec![0; rx]),
            tcp::SocketBuffer::new(vec![0; tx]),
        );
        s.set_congestion_control(match opts.congestion {
            crate::CongestionControl::Cubic => tcp::CongestionControl::Cubic,
            crate::CongestionControl::None => tcp::CongestionControl::None,
        });
        s
    }

    /// Binds a free port: `port`, or an ephemeral one when `port` is 0.
    pub(crate) fn claim_port(&mut self, proto: Proto, port: u16) -> io::Result<u16> {
        if port != 0 {
            if self.ports.contains(&(proto, port)) {
                return Err(io::Error::new(
                    io::ErrorKind::AddrInUse,
                    format!("port {port} is in use"),
                ));
            }
            return Ok(port);
        }
        let span = (EPHEMERAL.end() - EPHEMERAL.start()) as u32 + 1;
        let start = rand::random::<u32>() % span;
        for i in 0..span {
            let p = EPHEMERAL.start() + ((start + i) % span) as u16;
            if !self.ports.contains(&(proto, p)) {
                return Ok(p);
            }
        }
        Err(io::Error::new(
            io::ErrorKind::AddrInUse,
            "no ephemeral port is free",
        ))
    }

    /// Registers a TCP listener on `port`.
    pub(crate) fn add_listener(
        &mut self,
        addr: Option<IpAddress>,
        port: u16,
    ) -> io::Result<(u16, Arc<Signal>)> {
        let port = self.claim_port(Proto::Tcp, port)?;
        self.ports.insert((Proto::Tcp, port));
        let signal = Signal::new();
        self.listeners.insert(
            port,
            Listener {
                addr,
                pending: VecDeque::new(),
                signal: signal.clone(),
            },
        );
        Ok((port, signal))
    }

    /// Removes the listener on `port` and resets the connections nobody accepted.
    pub(crate) fn remove_listener(&mut self, port: u16) {
        self.ports.remove(&(Proto::Tcp, port));
        if let Some(l) = self.listeners.remove(&port) {
            for h in l.pending {
                self.sockets.get_mut::<tcp::Socket>(h).abort();
                self.orphan(h);
                if let Some(e) = self.entries.get_mut(&h) {
                    e.aborted = true;
                }
            }
        }
    }

    /// Before a packet is taken in: when it opens a connection to one of our listeners that
    /// has room and no socket holds that connection yet, a socket is made to listen for it.
    fn listen_for_syn(&mut self, packet: &[u8], opts: &Options) -> Option<(SocketHandle, u16)> {
        if self.listeners.is_empty() {
            // A stack that only dials never parses a header of its own.
            return None;
        }
        let (src, dst) = syn_endpoints(packet)?;
        let l = self.listeners.get(&dst.port)?;
        if l.addr.is_some_and(|a| a != dst.addr) {
            return None;
        }
        if l.pending.len() >= opts.backlog && !self.evict_half_open(dst.port) {
            return None;
        }
        let taken = self.sockets.iter().any(|(_, s)| match s {
            smoltcp::socket::Socket::Tcp(t) => {
                t.state() == tcp::State::Listen && t.listen_endpoint().port == dst.port
                    || t.remote_endpoint() == Some(src) && t.local_endpoint() == Some(dst)
            }
            _ => false,
        });
        if taken {
            return None;
        }
        let sizes = self.tcp_buffers(opts);
        let mut socket = Self::tcp_socket(opts, sizes);
        socket.listen(dst).ok()?;
        let h = self
            .add(opts, Proto::Tcp, socket, sizes.0 + sizes.1, None)
            .ok()?;
        Some((h, dst.port))
    }

    /// Makes room in a full backlog by dropping its oldest half-open connection (a SYN flood
    /// then only churns half-open slots, and a real client's handshake, which finishes within
    /// a round trip, still gets in); `false` when every slot holds a finished connection.
    fn evict_half_open(&mut self, port: u16) -> bool {
        let Some(l) = self.listeners.get_mut(&port) else {
            return false;
        };
        let sockets = &mut self.sockets;
        let Some(i) = l
            .pending
            .iter()
            .position(|&h| sockets.get_mut::<tcp::Socket>(h).state() == tcp::State::SynReceived)
        else {
            return false;
        };
        let h = l.pending.remove(i).expect("index from position");
        self.remove(h);
        true
    }

    /// What the stack holds now.
    pub(crate) fn stats(&self, opts: &Options) -> crate::StackStats {
        crate::StackStats {
            sockets: self.entries.len(),
            max_sockets: opts.max_sockets,
            memory_used: self.used,
            memory_budget: opts.budget,
            packets_in: self.counters.packets_in,
            packets_out: self.counters.packets_out,
            reads: self.counters.reads,
            writes: self.counters.writes,
        }
    }

    /// After the SYN that made `h` was taken in: keep it as the listener's pending connection
    /// if it took the SYN, drop it otherwise.
    fn settle_new_connection(&mut self, h: SocketHandle, port: u16) {
        let s = self.sockets.get_mut::<tcp::Socket>(h);
        if s.state() == tcp::State::Listen || s.state() == tcp::State::Closed {
            self.remove(h);
            return;
        }
        match self.listeners.get_mut(&port) {
            Some(l) => {
                s.register_recv_waker(&l.signal.waker());
                l.pending.push_back(h);
            }
            None => {
                s.abort();
                self.orphan(h);
            }
        }
    }

    /// Sweeps sockets: orphans that finished closing, orphans past the linger time, half-open
    /// connections past the handshake timeout, pending connections that were reset.
    fn housekeeping(&mut self, opts: &Options) {
        let now = Instant::now();
        self.next_housekeeping = now + HOUSEKEEPING;
        let mut gone = Vec::new();
        for (&h, e) in self.entries.iter_mut() {
            let Some(since) = e.orphan else { continue };
            let done = match e.kind {
                Proto::Tcp => {
                    let t = self.sockets.get_mut::<tcp::Socket>(h);
                    if e.aborted || matches!(t.state(), tcp::State::Closed | tcp::State::TimeWait) {
                        true
                    } else if now.duration_since(since) >= opts.linger {
                        t.abort();
                        e.aborted = true;
                        false
                    } else {
                        false
                    }
                }
                // A datagram socket has nothing to finish beyond the sweep's delay.
                Proto::Udp | Proto::Icmp => true,
            };
            if done {
                gone.push(h);
            }
        }
        for l in self.listeners.values_mut() {
            l.pending.retain(|&h| {
                let t = self.sockets.get_mut::<tcp::Socket>(h);
                let stale = match t.state() {
                    tcp::State::Closed | tcp::State::Listen => true,
                    tcp::State::SynReceived => self
                        .entries
                        .get(&h)
                        .is_some_and(|e| now.duration_since(e.created) >= opts.handshake_timeout),
                    _ => false,
                };
                if stale {
                    t.abort();
                    gone.push(h);
                }
                !stale
            });
        }
        for h in gone {
            self.remove(h);
        }
        let live: HashSet<_> = self
            .sockets
            .iter()
            .filter_map(|(_, s)| match s {
                smoltcp::socket::Socket::Tcp(t) => {
                    Some((t.local_endpoint()?, t.remote_endpoint()?))
                }
                _ => None,
            })
            .collect();
        self.edges.retain(|c| live.contains(c));
    }
}

/// The endpoints of a TCP SYN (without ACK), source first; `None` for any other packet.
fn syn_endpoints(packet: &[u8]) -> Option<(IpEndpoint, IpEndpoint)> {
    let (src, dst, payload) = match packet.first()? >> 4 {
        4 => {
            let ip = Ipv4Packet::new_checked(packet).ok()?;
            if ip.next_header() != IpProtocol::Tcp || ip.more_frags() || ip.frag_offset() != 0 {
                return None;
            }
            (
                IpAddress::Ipv4(ip.src_addr()),
                IpAddress::Ipv4(ip.dst_addr()),
                ip.payload(),
            )
        }
        6 => {
            let ip = Ipv6Packet::new_checked(packet).ok()?;
            if ip.next_header() != IpProtocol::Tcp {
                return None;
            }
            (
                IpAddress::Ipv6(ip.src_addr()),
                IpAddress::Ipv6(ip.dst_addr()),
                ip.payload(),
            )
        }
        _ => return None,
    };
    let tcp = TcpPacket::new_checked(payload).ok()?;
    if !tcp.syn() || tcp.ack() || tcp.rst() {
        return None;
    }
    Some((
        IpEndpoint::new(src, tcp.src_port()),
        IpEndpoint::new(dst, tcp.dst_port()),
    ))
}

/// The error of any call on a closed stack.
pub(crate) fn closed() -> io::Error {
    io::Error::new(io::ErrorKind::NotConnected, "the network stack is closed")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn syn_v4(flags: u8) -> Vec<u8> {
        let mut p = vec![0u8; 40];
        p[0] = 0x45;
        p[2..4].copy_from_slice(&40u16.to_be_bytes());
        p[8] = 64;
        p[9] = 6;
        p[12..16].copy_from_slice(&[100, 64, 0, 2]);
        p[16..20].copy_from_slice(&[100, 64, 0, 1]);
        p[20..22].copy_from_slice(&40000u16.to_be_bytes());
        p[22..24].copy_from_slice(&80u16.to_be_bytes());
        p[32] = 5 << 4;
        p[33] = flags;
        p
    }

    #[test]
    fn a_syn_is_recognised_and_nothing_else() {
        let (src, dst) = syn_endpoints(&syn_v4(0x02)).unwrap();
        assert_eq!(src.port, 40000);
        assert_eq!(dst.port, 80);
        assert_eq!(dst.addr, IpAddress::Ipv4([100, 64, 0, 1].into()));
        assert!(syn_endpoints(&syn_v4(0x12)).is_none(), "SYN-ACK");
        assert!(syn_endpoints(&syn_v4(0x10)).is_none(), "ACK");
        assert!(syn_endpoints(&syn_v4(0x02)[..30]).is_none(), "truncated");
        assert!(syn_endpoints(&[]).is_none());
        assert!(syn_endpoints(&[0x60; 10]).is_none());
    }

    #[test]
    fn the_tcp_buffers_shrink_when_the_budget_is_nearly_spent() {
        let opts = Options::new()
            .tcp_receive_buffer(1 << 20)
            .tcp_send_buffer(256 << 10)
            .memory_budget(3 << 20);
        let stack = Stack::new(&["100.64.0.1".parse().unwrap()], &[], 1420, opts).unwrap();
        let mut st = stack.lock();
        assert_eq!(st.tcp_buffers(&stack.opts), (1 << 20, 256 << 10));
        st.used = 2 << 20;
        assert_eq!(st.tcp_buffers(&stack.opts), (512 << 10, 128 << 10));
        st.used = 3 << 20;
        assert_eq!(
            st.tcp_buffers(&stack.opts),
            (MIN_TCP_BUFFER, MIN_TCP_BUFFER)
        );
    }

    #[test]
    fn a_socket_over_the_budget_or_the_cap_is_refused() {
        let opts = Options::new().memory_budget(100 << 10).max_sockets(2);
        let stack = Stack::new(&["100.64.0.1".parse().unwrap()], &[], 1420, opts).unwrap();
        let mut st = stack.lock();
        let o = stack.opts.clone();
        let a = st
            .add(
                &o,
                Proto::Tcp,
                State::tcp_socket(&o, (16 << 10, 16 << 10)),
                32 << 10,
                None,
            )
            .unwrap();
        let e = st
            .add(
                &o,
                Proto::Tcp,
                State::tcp_socket(&o, (64 << 10, 64 << 10)),
                128 << 10,
                None,
            )
            .unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::OutOfMemory);
        st.add(
            &o,
            Proto::Tcp,
            State::tcp_socket(&o, (16 << 10, 16 << 10)),
            32 << 10,
            None,
        )
        .unwrap();
        let e = st
            .add(
                &o,
                Proto::Tcp,
                State::tcp_socket(&o, (4 << 10, 4 << 10)),
                8 << 10,
                None,
            )
            .unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::OutOfMemory);
        st.remove(a);
        assert_eq!(st.used, 32 << 10);
    }

    #[test]
    fn ephemeral_ports_are_unique_per_protocol() {
        let stack =
            Stack::new(&["100.64.0.1".parse().unwrap()], &[], 1420, Options::new()).unwrap();
        let mut st = stack.lock();
        let p = st.claim_port(Proto::Tcp, 0).unwrap();
        assert!(EPHEMERAL.contains(&p));
        st.ports.insert((Proto::Tcp, p));
        assert_eq!(
            st.claim_port(Proto::Tcp, p).unwrap_err().kind(),
            io::ErrorKind::AddrInUse
        );
        assert_eq!(st.claim_port(Proto::Udp, p).unwrap(), p);
    }
}
