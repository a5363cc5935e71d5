//! [`Server`]: a listener thread and a thread per connection, with the connection cap.

pub(crate) mod forward;
pub(crate) mod handshake;
pub(crate) mod http;
pub(crate) mod relay;
pub(crate) mod socks5;
pub(crate) mod udp_associate;
pub(crate) mod udp_forward;

use crate::network::{Listener, Stream};
use parking_lot::Mutex;
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How long the listener thread waits for a connection (or a datagram) before it looks at
/// the stop flag: how long [`Server::stop`] takes at most.
pub(crate) const POLL: Duration = Duration::from_millis(200);

/// A running server (listener thread + connection threads). Dropping it or stop() stops
/// accepting and closes its listener; live relays may finish on their own.
pub struct Server {
    local: SocketAddr,
    state: Arc<State>,
    thread: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Server")
            .field("local", &self.local)
            .field("connections", &self.connections())
            .finish()
    }
}

impl Server {
    /// Where it listens (with the port picked when asked for port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// Stops accepting and closes the listener (within 200 ms); returns once the
    /// listener is closed. Connections already relaying go on until either side closes.
    pub fn stop(self) {
        drop(self)
    }

    /// The connections (for UDP forwards: the flows) live now.
    pub fn connections(&self) -> usize {
        self.state.live.load(Ordering::Acquire)
    }

    /// Runs `run` on the listener thread; it returns when `State::stopping` says so.
    pub(crate) fn spawn(
        local: SocketAddr,
        name: &str,
        run: impl FnOnce(Arc<State>) + Send + 'static,
    ) -> io::Result<Server> {
        let state = Arc::new(State::default());
        let for_thread = state.clone();
        let thread = std::thread::Builder::new()
            .name(name.to_string())
            .spawn(move || run(for_thread))?;
        Ok(Server {
            local,
            state,
            thread: Some(thread),
        })
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.state.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// What a server's threads share: the stop flag and the count of live connections.
#[derive(Default)]
pub(crate) struct State {
    stop: AtomicBool,
    live: AtomicUsize,
    refused: RateLimited,
}

impl State {
    pub(crate) fn stopping(&self) -> bool {
        self.stop.load(Ordering::Acquire)
    }

    /// A slot for one more connection, unless `max` are live.
    pub(crate) fn claim(self: &Arc<Self>, max: usize) -> Option<Slot> {
        let before = self.live.fetch_add(1, Ordering::AcqRel);
        if before >= max {
            self.live.fetch_sub(1, Ordering::AcqRel);
            return None;
        }
        Some(Slot(self.clone()))
    }

    /// Logs that the cap refused a connection (at most once a second, with the count).
    pub(crate) fn log_refused(&self, what: &str, from: SocketAddr, max: usize) {
        if let Some(n) = self.refused.tick() {
            tracing::warn!(%from, max, refused = n, "{what}: connection cap reached, refusing");
        }
    }
}

/// One live connection; dropping it frees the slot.
pub(crate) struct Slot(Arc<State>);

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.live.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Counts events and says when to log them: at most once a second.
#[derive(Default)]
pub(crate) struct RateLimited {
    last: Mutex<Option<Instant>>,
    count: AtomicUsize,
}

impl RateLimited {
    /// `Some(events since the last log)` when it is time to log.
    pub(crate) fn tick(&self) -> Option<usize> {
        let n = self.count.fetch_add(1, Ordering::AcqRel) + 1;
        let mut last = self.last.lock();
        if last.is_some_and(|t| t.elapsed() < Duration::from_secs(1)) {
            return None;
        }
        *last = Some(Instant::now());
        self.count.fetch_sub(n, Ordering::AcqRel);
        Some(n)
    }
}

/// A TCP service: what a connection gets, and what one over the cap gets.
pub(crate) struct TcpService {
    /// For logs and thread names: `socks5`, `http`, `forward`.
    pub(crate) name: &'static str,
    pub(crate) max_connections: usize,
    /// Writes the protocol's refusal to a connection over the cap (it is closed after).
    pub(crate) refuse: fn(&mut dyn Stream),
    /// Serves one connection on its own thread, to the end of the relay.
    pub(crate) handle: Arc<dyn Fn(Box<dyn Stream>, SocketAddr) + Send + Sync>,
}

/// Starts the listener thread of a TCP service.
pub(crate) fn spawn_tcp(listener: Box<dyn Listener>, service: TcpService) -> io::Result<Server> {
    let local = listener.local_addr()?;
    let name = format!("{}-accept", service.name);
    Server::spawn(local, &name, move |state| {
        accept_loop(&*listener, &service, &state);
        tracing::debug!(%local, "{}: stopped listening", service.name);
    })
}

fn accept_loop(listener: &dyn Listener, service: &TcpService, state: &Arc<State>) {
    let errors = RateLimited::default();
    while !state.stopping() {
        match listener.accept_timeout(Some(POLL)) {
            Ok((stream, peer)) => dispatch(stream, peer, service, state),
            Err(e) if is_timeout(&e) || e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) if e.kind() == io::ErrorKind::NotConnected => {
                // The tunnel's stack is closed: this listener will never accept again.
                tracing::warn!("{}: listener closed: {e}", service.name);
                return;
            }
            Err(e) => {
                // Out of descriptors and the like: wait for connections to end.
                if let Some(n) = errors.tick() {
                    tracing::warn!(errors = n, "{}: accept failed: {e}", service.name);
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        }
    }
}

/// Hands the connection to its own thread, or refuses it when the cap is reached.
fn dispatch(
    mut stream: Box<dyn Stream>,
    peer: SocketAddr,
    service: &TcpService,
    state: &Arc<State>,
) {
    let Some(slot) = state.claim(service.max_connections) else {
        state.log_refused(service.name, peer, service.max_connections);
        (service.refuse)(&mut *stream);
        let _ = stream.shutdown_write();
        return;
    };
    let handle = service.handle.clone();
    let spawned = std::thread::Builder::new()
        .name(format!("{}-conn", service.name))
        .spawn(move || {
            let _slot = slot;
            handle(stream, peer);
        });
    if let Err(e) = spawned {
        tracing::warn!(%peer, "{}: cannot start a connection thread: {e}", service.name);
    }
}

/// Whether an I/O error is a timeout (std reports a read timeout as `WouldBlock` on Unix).
pub(crate) fn is_timeout(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_are_capped_and_given_back() {
        let state = Arc::new(State::default());
        let a = state.claim(2).unwrap();
        let _b = state.claim(2).unwrap();
        assert!(state.claim(2).is_none());
        assert_eq!(state.live.load(Ordering::Acquire), 2);
        drop(a);
        assert!(state.claim(2).is_some());
        assert!(state.claim(0).is_none());
    }

    #[test]
    fn rate_limited_logs_once_a_second() {
        let r = RateLimited::default();
        assert_eq!(r.tick(), Some(1));
        assert_eq!(r.tick(), None);
        assert_eq!(r.tick(), None);
        *r.last.lock() = Some(Instant::now() - Duration::from_secs(2));
        assert_eq!(r.tick(), Some(3));
    }
}
