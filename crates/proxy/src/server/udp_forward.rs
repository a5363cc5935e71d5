//! UDP port forwards: each client address gets its own socket on the far side (a "flow"), so
//! replies find their way back; a flow ends after `udp_idle` without a datagram either way.
//!
//! The listener thread receives every client datagram and sends it out of the client's
//! flow socket; each flow has a thread that receives on its socket and sends what comes from
//! the target back to the client out of the listening socket. Flows are capped at
//! `max_connections`; over the cap a new client's datagrams are dropped.

use super::{is_timeout, RateLimited, Server, Slot, State, POLL};
use crate::forward::split_target;
use crate::network::{any_for, resolve, Datagram, Network};
use crate::Limits;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// The largest datagram forwarded.
const DATAGRAM: usize = 65536;
/// How often idle flows are looked for.
const SWEEP: Duration = Duration::from_secs(1);
/// How long the target's resolved address is reused before the name is looked up again.
const TARGET_TTL: Duration = Duration::from_secs(60);

/// Starts forwarding datagrams arriving on `listen` to `target` through `dial`.
pub(crate) fn spawn(
    listen: Box<dyn Datagram>,
    dial: Arc<dyn Network>,
    target: &str,
    limits: Limits,
) -> io::Result<Server> {
    let (host, port) = split_target(target).ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{target:?} is not host:port"),
        )
    })?;
    let local = listen.local_addr()?;
    listen.set_read_timeout(Some(POLL))?;
    let mut forwarder = Forwarder {
        listen: Arc::from(listen),
        dial,
        host: host.to_string(),
        port,
        limits,
        flows: HashMap::new(),
        ended: Vec::new(),
        resolved: None,
        last_sweep: Instant::now(),
    };
    Server::spawn(local, "udp-forward", move |state| {
        forwarder.run(&state);
        tracing::debug!(%local, "udp forward: stopped");
    })
}

/// One client's flow.
struct Flow {
    client: SocketAddr,
    target: SocketAddr,
    /// On the far side, bound to a free port.
    socket: Box<dyn Datagram>,
    last: Mutex<Instant>,
    closed: AtomicBool,
}

impl Flow {
    fn touch(&self) {
        *self.last.lock() = Instant::now();
    }
    fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }
    fn close(&self) {
        self.closed.store(true, Ordering::Release);
    }
}

/// The listener thread's state.
struct Forwarder {
    listen: Arc<dyn Datagram>,
    dial: Arc<dyn Network>,
    host: String,
    port: u16,
    limits: Limits,
    flows: HashMap<SocketAddr, (Arc<Flow>, JoinHandle<()>)>,
    /// Threads of flows that were closed, joined when the server stops.
    ended: Vec<JoinHandle<()>>,
    resolved: Option<(SocketAddr, Instant)>,
    last_sweep: Instant,
}

impl Forwarder {
    fn run(&mut self, state: &Arc<State>) {
        let mut buf = vec![0u8; DATAGRAM];
        let errors = RateLimited::default();
        while !state.stopping() {
            match self.listen.recv_from(&mut buf) {
                Ok((n, from)) => self.forward(&buf[..n], from, state),
                Err(e) if is_timeout(&e) || is_transient(&e) => {}
                Err(e) if e.kind() == io::ErrorKind::NotConnected => {
                    tracing::warn!("udp forward: socket closed: {e}");
                    break;
                }
                Err(e) => {
                    if let Some(n) = errors.tick() {
                        tracing::warn!(errors = n, "udp forward: receive failed: {e}");
                    }
                    std::thread::sleep(Duration::from_millis(50));
                }
            }
            if self.last_sweep.elapsed() >= SWEEP {
                self.sweep();
            }
        }
        self.close_all();
    }

    /// Sends a client's datagram out of its flow, opening the flow if it has none.
    fn forward(&mut self, data: &[u8], client: SocketAddr, state: &Arc<State>) {
        let flow = match self.flows.get(&client) {
            Some((f, _)) if !f.is_closed() => f.clone(),
            _ => match self.open_flow(client, state) {
                Some(f) => f,
                None => return,
            },
        };
        flow.touch();
        if let Err(e) = flow.socket.send_to(data, flow.target) {
            tracing::debug!(%client, target = %flow.target, "udp forward: send: {e}");
        }
    }

    fn open_flow(&mut self, client: SocketAddr, state: &Arc<State>) -> Option<Arc<Flow>> {
        if let Some((_, thread)) = self.flows.remove(&client) {
            self.ended.push(thread);
        }
        let Some(slot) = state.claim(self.limits.max_connections) else {
            state.log_refused("udp forward", client, self.limits.max_connections);
            return None;
        };
        let opened = self.target().and_then(|target| {
            let socket = self.dial.bind_udp(any_for(target.ip()))?;
            socket.set_read_timeout(Some(POLL))?;
            Ok(Arc::new(Flow {
                client,
                target,
                socket,
                last: Mutex::new(Instant::now()),
                closed: AtomicBool::new(false),
            }))
        });
        let flow = match opened {
            Ok(f) => f,
            Err(e) => {
                tracing::debug!(%client, "udp forward: {}:{}: {e}", self.host, self.port);
                return None;
            }
        };
        let (f, listen) = (flow.clone(), self.listen.clone());
        let thread = std::thread::Builder::new()
            .name("udp-flow".into())
            .spawn(move || {
                let _slot: Slot = slot;
                replies(&f, &*listen);
            });
        match thread {
            Ok(t) => {
                tracing::debug!(%client, target = %flow.target, "udp forward: new flow");
                self.flows.insert(client, (flow.clone(), t));
                Some(flow)
            }
            Err(e) => {
                tracing::warn!("udp forward: cannot start a flow thread: {e}");
                None
            }
        }
    }

    /// The target's address, resolved through the far side's network (the first address).
    fn target(&mut self) -> io::Result<SocketAddr> {
        if let Some((addr, at)) = self.resolved {
            if at.elapsed() < TARGET_TTL {
                return Ok(addr);
            }
        }
        let ip = resolve(&*self.dial, &self.host)?[0];
        let addr = SocketAddr::new(ip, self.port);
        self.resolved = Some((addr, Instant::now()));
        Ok(addr)
    }

    /// Closes the flows idle for `udp_idle` and those whose thread ended.
    fn sweep(&mut self) {
        self.last_sweep = Instant::now();
        let idle = self.limits.udp_idle;
        let expired: Vec<SocketAddr> = self
            .flows
            .iter()
            .filter(|(_, (f, _))| f.is_closed() || f.last.lock().elapsed() >= idle)
            .map(|(c, _)| *c)
            .collect();
        for client in expired {
            if let Some((flow, thread)) = self.flows.remove(&client) {
                tracing::debug!(%client, "udp forward: flow closed");
                flow.close();
                self.ended.push(thread);
            }
        }
        self.ended.retain(|t| !t.is_finished());
    }

    fn close_all(&mut self) {
        for (_, (flow, thread)) in self.flows.drain() {
            flow.close();
            self.ended.push(thread);
        }
        for t in self.ended.drain(..) {
            let _ = t.join();
        }
    }
}

/// A flow's thread: what the target sends back goes to the client, until the flow is closed.
fn replies(flow: &Flow, listen: &dyn Datagram) {
    let mut buf = vec![0u8; DATAGRAM];
    while !flow.is_closed() {
        match flow.socket.recv_from(&mut buf) {
            Ok((n, from)) if same_address(from, flow.target) => {
                flow.touch();
                if let Err(e) = listen.send_to(&buf[..n], flow.client) {
                    tracing::debug!(client = %flow.client, "udp forward: reply: {e}");
                }
            }
            Ok((_, from)) => {
                tracing::trace!(%from, "udp forward: datagram from a stranger dropped")
            }
            Err(e) if is_timeout(&e) || is_transient(&e) => {}
            Err(e) => {
                tracing::debug!(client = %flow.client, "udp forward: flow socket: {e}");
                break;
            }
        }
    }
    flow.close();
}

/// A receive error that leaves the socket usable (a signal, or an ICMP error reported for an
/// earlier send on some systems).
fn is_transient(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::Interrupted
            | io::ErrorKind::ConnectionReset
            | io::ErrorKind::ConnectionRefused
    )
}

/// Whether two addresses are the same, an IPv4-mapped IPv6 address matching its IPv4 one.
fn same_address(a: SocketAddr, b: SocketAddr) -> bool {
    a.port() == b.port() && a.ip().to_canonical() == b.ip().to_canonical()
}
