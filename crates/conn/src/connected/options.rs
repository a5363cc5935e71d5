//! The connected-socket options of a [`StdNetBind`](crate::StdNetBind) (the same on every
//! platform that has connected sockets).

use std::sync::Arc;
use std::time::Duration;

use super::{ConnectedConfig, Control};
use crate::ReceiveFuncStarter;

/// Whether and how a [`StdNetBind`](crate::StdNetBind) uses connected sockets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConnectedOptions {
    /// Connected sockets on.
    pub enabled: bool,
    /// Bytes (sent + received within one idle interval) before a pair gets a socket.
    pub open_after: u64,
    /// Most pair sockets at once.
    pub max_sockets: usize,
    /// Largest datagram expected (sizes the first receive slots; 0: smallest).
    pub max_datagram: usize,
    /// Idle-check period.
    pub idle_interval: Duration,
}

impl Default for ConnectedOptions {
    fn default() -> Self {
        ConnectedOptions {
            enabled: false,
            open_after: super::DEFAULT_OPEN_AFTER,
            max_sockets: super::DEFAULT_MAX_SOCKETS,
            max_datagram: 0,
            idle_interval: super::DEFAULT_IDLE_INTERVAL,
        }
    }
}

impl ConnectedOptions {
    /// From the environment, for daemons: `VPN_CONNECTED_SOCKETS=1` turns them on;
    /// `VPN_CONNECTED_OPEN_AFTER` (bytes), `VPN_CONNECTED_MAX_SOCKETS` and
    /// `VPN_CONNECTED_IDLE_MS` override the defaults (tests use a short idle interval).
    pub fn from_env() -> Self {
        Self::from_vars(|k| std::env::var(k).ok())
    }

    /// The configuration of the set a bind opened on `port` creates: its readers go to the
    /// device's `starter`, which also names the datagrams that count toward a pair
    /// ([`ReceiveFuncStarter::counts_toward_pair`]); `control` runs on every pair socket before
    /// it connects.
    pub(crate) fn config(
        &self,
        port: u16,
        starter: Arc<dyn ReceiveFuncStarter>,
        control: Control,
        offload: bool,
    ) -> ConnectedConfig {
        let counter = starter.clone();
        let mut cfg = ConnectedConfig::new(
            port,
            Arc::new(move |f, buf, batch| starter.start(f, buf, batch)),
        );
        cfg.counts = Arc::new(move |d| counter.counts_toward_pair(d));
        cfg.control = Some(control);
        cfg.max_sockets = self.max_sockets;
        cfg.max_datagram = self.max_datagram;
        cfg.open_after = self.open_after;
        cfg.idle_interval = self.idle_interval;
        cfg.offload = offload;
        cfg
    }

    pub(crate) fn from_vars(get: impl Fn(&str) -> Option<String>) -> Self {
        let num = |k: &str| get(k).and_then(|v| v.trim().parse::<u64>().ok());
        let d = Self::default();
        ConnectedOptions {
            enabled: get("VPN_CONNECTED_SOCKETS").is_some_and(|v| v.trim() == "1"),
            open_after: num("VPN_CONNECTED_OPEN_AFTER").unwrap_or(d.open_after),
            max_sockets: num("VPN_CONNECTED_MAX_SOCKETS")
                .and_then(|v| usize::try_from(v).ok())
                .unwrap_or(d.max_sockets),
            max_datagram: d.max_datagram,
            idle_interval: num("VPN_CONNECTED_IDLE_MS")
                .filter(|&ms| ms > 0)
                .map_or(d.idle_interval, Duration::from_millis),
        }
    }
}
