//! What the Linux and darwin `StdNetBind`s share: the open state (one socket per family and the
//! connected set of this open), the counters, the connected-socket options and the device's
//! receive-function starter, and the steps of `open`, `close` and `send` that do not depend on
//! how a socket moves datagrams.

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use parking_lot::{Mutex, RwLock};

use crate::connected::{self, canonical, ConnectedOptions, ConnectedSockets, Control};
use crate::stats::{BindStats, Stats};
use crate::{err_closed, Endpoint, ReceiveFuncStarter};

/// The public methods both `StdNetBind`s have in the same words (the bind keeps its [`Core`]
/// in a field `core`).
macro_rules! common_methods {
    () => {
        /// Turns connected sockets on or off (default off) for later `open`s. They take
        /// effect only once the device installs a receive-function starter.
        pub fn with_connected_sockets(mut self, on: bool) -> Self {
            self.core.set_connected(on);
            self
        }

        /// Sets every connected-socket option at once.
        pub fn with_connected_options(mut self, opts: $crate::ConnectedOptions) -> Self {
            self.core.connected_opts = opts;
            self
        }

        /// The connected sockets of the current open, if any.
        pub fn connected_sockets(
            &self,
        ) -> ::std::option::Option<::std::sync::Arc<$crate::ConnectedSockets>> {
            self.core.connected_sockets()
        }

        /// The counters since creation.
        pub fn stats(&self) -> $crate::BindStats {
            self.core.stats()
        }
    };
}
pub(crate) use common_methods;

/// A family's socket as the bind holds it.
pub(crate) trait Shared: Send + Sync {
    /// Wakes and stops its reader and senders, then closes the descriptor.
    fn close(&self);
}

/// The sockets of the current open.
pub(crate) struct State<F> {
    pub open: bool,
    pub v4: Option<Arc<F>>,
    pub v6: Option<Arc<F>>,
    /// The connected sockets of this open (with connected sockets on and a starter installed).
    pub connected: Option<Arc<ConnectedSockets>>,
}

impl<F> Default for State<F> {
    fn default() -> Self {
        State {
            open: false,
            v4: None,
            v6: None,
            connected: None,
        }
    }
}

impl<F> State<F> {
    /// The open families, IPv4 first.
    pub fn families(&self) -> impl Iterator<Item = &Arc<F>> {
        [&self.v4, &self.v6].into_iter().flatten()
    }

    /// `[v4, v6]` mapped through `f` (`None` for a family that is not open).
    pub fn per_family<T>(&self, f: impl Fn(&F) -> T) -> [Option<T>; 2] {
        [&self.v4, &self.v6].map(|fam| fam.as_deref().map(&f))
    }
}

/// Where [`Core::route`] sends a datagram: the family for its destination, and the connected
/// set that may carry it instead.
pub(crate) struct Route<F> {
    pub dst: SocketAddr,
    pub fam: Arc<F>,
    pub connected: Option<Arc<ConnectedSockets>>,
}

/// The state and options both binds keep.
pub(crate) struct Core<F> {
    pub state: RwLock<State<F>>,
    pub stats: Arc<Stats>,
    pub connected_opts: ConnectedOptions,
    starter: Mutex<Option<Arc<dyn ReceiveFuncStarter>>>,
    counters: Arc<connected::Counters>,
}

impl<F: Shared> Core<F> {
    pub fn new() -> Self {
        Core {
            state: RwLock::new(State::default()),
            stats: Arc::default(),
            connected_opts: ConnectedOptions::default(),
            starter: Mutex::new(None),
            counters: Arc::default(),
        }
    }

    /// Connected sockets on or off, the other options kept.
    pub fn set_connected(&mut self, on: bool) {
        self.connected_opts.enabled = on;
    }

    /// The connected sockets of the current open, if any.
    pub fn connected_sockets(&self) -> Option<Arc<ConnectedSockets>> {
        self.state.read().connected.clone()
    }

    /// The bind's counters and its connected sockets' since creation.
    pub fn stats(&self) -> BindStats {
        let c = self.counters.snapshot();
        BindStats {
            connected_open: c.open,
            connected_dials: c.dials,
            connected_datagrams_sent: c.datagrams_sent,
            connected_datagrams_received: c.datagrams_received,
            ..self.stats.snapshot()
        }
    }

    pub fn set_starter(&self, starter: Arc<dyn ReceiveFuncStarter>) {
        *self.starter.lock() = Some(starter);
    }

    /// The connected set for a fresh open on `port`, when connected sockets are on and a
    /// starter is installed; `control` runs on every pair socket.
    pub fn new_connected(
        &self,
        port: u16,
        control: Control,
        offload: bool,
    ) -> Option<Arc<ConnectedSockets>> {
        if !self.connected_opts.enabled {
            return None;
        }
        let starter = self.starter.lock().clone()?;
        let cfg = self.connected_opts.config(port, starter, control, offload);
        Some(Arc::new(ConnectedSockets::with_counters(
            cfg,
            self.counters.clone(),
        )))
    }

    /// Fails if already open.
    pub fn check_closed(st: &State<F>) -> io::Result<()> {
        if st.open {
            return Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                "bind already open",
            ));
        }
        Ok(())
    }

    /// Closes the connected set first (so that its started readers end and a following open
    /// can dial again), then the families. The state lock is held throughout, so a following
    /// `open` finds the port free.
    pub fn close(&self) {
        let mut st = self.state.write();
        st.open = false;
        if let Some(c) = st.connected.take() {
            c.close();
        }
        for fam in [st.v4.take(), st.v6.take()].into_iter().flatten() {
            fam.close();
        }
    }

    /// The family for `ep`'s destination (v4-mapped addresses leave through IPv4) and the
    /// connected set of this open. A family the bind lacks is `EAFNOSUPPORT`.
    pub fn route(&self, ep: &Endpoint) -> io::Result<Route<F>> {
        let dst = canonical(ep.dst);
        let st = self.state.read();
        if !st.open {
            return Err(err_closed());
        }
        let fam = if dst.is_ipv6() { &st.v6 } else { &st.v4 };
        let fam = fam
            .clone()
            .ok_or_else(|| io::Error::from_raw_os_error(libc::EAFNOSUPPORT))?;
        Ok(Route {
            dst,
            fam,
            connected: st.connected.clone(),
        })
    }
}

impl<F> Route<F> {
    /// Sends on a connected pair socket when the set takes the batch: a sticky source picks
    /// the pair directly (replies leave through the socket the peer reached), otherwise the
    /// route's choice. `None`: the shared socket sends.
    pub fn send_connected(&self, bufs: &[&[u8]], local: Option<IpAddr>) -> Option<io::Result<()>> {
        self.connected
            .as_ref()
            .and_then(|c| c.send_from(self.dst, local, bufs))
    }
}
