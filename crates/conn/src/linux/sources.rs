//! Sticky sources re-checked after route and address changes (wireguard-go's Linux route
//! listener, `device/sticky_linux.go`).
//!
//! A peer's endpoint remembers the local address and interface its datagrams arrived on, and
//! replies are sent from them. When the host's routes or addresses change, that source can be
//! wrong: the address may be gone (the kernel then refuses it, see `send::is_bad_source`), or
//! the route to the peer may now leave through another interface while the old one is still
//! accepted, so replies keep taking a path the routing table no longer chooses.
//!
//! A thread per bind waits for route and address notifications ([`RouteEvents`]) and counts
//! them in a generation number. Until the first change the send path only reads that number.
//! After one, each `(peer, source, interface)` the device sends with is checked once per
//! generation: the kernel is asked which interface a datagram to the peer from that source
//! (with the bind's fwmark) would take now ([`route_oif`]); if it is not the remembered one,
//! or the kernel refuses the source, the datagram is sent without a source (the routing table
//! picks one) until the peer's next datagram gives the endpoint a fresh one. wireguard-go
//! marks the peer for clearing once; checking the tuple also covers a peer whose next
//! datagram re-teaches the stale source before a reply left.

use std::collections::HashMap;
use std::io;
use std::net::IpAddr;
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::thread::JoinHandle;
use std::time::Duration;

use parking_lot::{Mutex, RwLock};
use vpn_sys::poll::EventFd;
use vpn_sys::route_events::{route_oif, RouteEvents};

use crate::StickySource;

/// How long the listener's socket read waits; the listener is woken at once when its check is
/// dropped, so this only bounds a read that found a notification it could not take.
const LISTEN_TIMEOUT: Duration = Duration::from_millis(500);
/// Verdicts kept; the table is emptied when full (each costs one route query to redo).
const MAX_VERDICTS: usize = 4096;

type Lookup = dyn Fn(IpAddr, IpAddr, u32) -> io::Result<u32> + Send + Sync;
type Key = (IpAddr, IpAddr, u32);

/// The route generation and the verdicts on sticky sources in it.
pub(crate) struct SourceCheck {
    /// Route and address changes seen; 0 until the first.
    generation: AtomicU64,
    /// `(peer, source, ifindex)` → (generation checked in, source still right).
    verdicts: RwLock<HashMap<Key, (u64, bool)>>,
    lookup: Box<Lookup>,
    /// The listener thread and what wakes it, stopped and joined when the check is dropped, so
    /// a closed bind leaves no thread or descriptor behind.
    listener: Mutex<Option<Listener>>,
}

struct Listener {
    wake: Arc<EventFd>,
    thread: JoinHandle<()>,
}

impl Drop for SourceCheck {
    fn drop(&mut self) {
        let Some(l) = self.listener.get_mut().take() else {
            return;
        };
        if let Err(e) = l.wake.signal() {
            tracing::warn!("route listener not woken: {e}");
            return;
        }
        // The listener holds the check only while it records a change; if that is the last
        // reference, the drop runs on the listener itself, which ends on its own after it.
        if l.thread.thread().id() != std::thread::current().id() {
            let _ = l.thread.join();
        }
    }
}

impl SourceCheck {
    /// A check against the kernel's routes, with its listener thread (stopped and joined when
    /// the check is dropped). Without a netlink subscription the generation never moves and
    /// sources are only dropped when the kernel refuses them.
    pub(crate) fn start() -> Arc<SourceCheck> {
        let check = Arc::new(SourceCheck::with_lookup(Box::new(route_oif)));
        match Self::spawn_listener(Arc::downgrade(&check)) {
            Ok(l) => *check.listener.lock() = Some(l),
            Err(e) => tracing::warn!("route listener not started: {e}"),
        }
        check
    }

    fn spawn_listener(check: Weak<SourceCheck>) -> io::Result<Listener> {
        let events = RouteEvents::subscribe(LISTEN_TIMEOUT)?;
        let wake = Arc::new(EventFd::new()?);
        let woken = wake.clone();
        let thread = std::thread::Builder::new()
            .name("route-events".into())
            .spawn(move || listen(events, &woken, &check))?;
        Ok(Listener { wake, thread })
    }

    fn with_lookup(lookup: Box<Lookup>) -> SourceCheck {
        SourceCheck {
            generation: AtomicU64::new(0),
            verdicts: RwLock::new(HashMap::new()),
            lookup,
            listener: Mutex::new(None),
        }
    }

    /// Records a route or address change.
    fn changed(&self) {
        self.generation.fetch_add(1, Ordering::AcqRel);
    }

    /// Should a datagram to `dst` still be sent from `src`?
    pub(crate) fn keep(&self, dst: IpAddr, src: &StickySource, mark: u32) -> bool {
        let generation = self.generation.load(Ordering::Acquire);
        if generation == 0 {
            return true;
        }
        let key = (dst, src.ip, src.ifindex);
        if let Some(&(g, ok)) = self.verdicts.read().get(&key) {
            if g == generation {
                return ok;
            }
        }
        let ok = match (self.lookup)(dst, src.ip, mark) {
            Ok(oif) => src.ifindex == 0 || oif == src.ifindex,
            Err(_) => false,
        };
        if !ok {
            tracing::debug!(
                "sticky source {} (interface {}) for {dst} is stale after a route change",
                src.ip,
                src.ifindex
            );
        }
        let mut v = self.verdicts.write();
        if v.len() >= MAX_VERDICTS {
            v.clear();
        }
        v.insert(key, (generation, ok));
        ok
    }
}

/// The listener thread: counts changes until woken (the check is being dropped), the check is
/// gone, or the socket fails.
fn listen(mut events: RouteEvents, wake: &EventFd, check: &Weak<SourceCheck>) {
    loop {
        let changed = events.wait_or_wake(wake.as_fd());
        if matches!(changed, Ok(None)) {
            return;
        }
        let Some(check) = check.upgrade() else {
            return;
        };
        match changed {
            Ok(Some(true)) => check.changed(),
            Ok(Some(false)) | Ok(None) => {}
            Err(e) => {
                tracing::warn!("route listener stopped: {e}");
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;
    use std::sync::atomic::AtomicU32;

    fn ip(last: u8) -> IpAddr {
        IpAddr::V4(Ipv4Addr::new(198, 18, 0, last))
    }

    /// A check whose kernel says: everything leaves through interface `oif` (0: refused).
    fn check(oif: Arc<AtomicU32>, queries: Arc<AtomicU32>) -> SourceCheck {
        SourceCheck::with_lookup(Box::new(move |_, _, _| {
            queries.fetch_add(1, Ordering::Relaxed);
            match oif.load(Ordering::Relaxed) {
                0 => Err(io::Error::from_raw_os_error(libc::EINVAL)),
                i => Ok(i),
            }
        }))
    }

    #[test]
    fn sources_are_kept_without_a_query_until_routes_change() {
        let queries = Arc::new(AtomicU32::new(0));
        let c = check(Arc::new(AtomicU32::new(9)), queries.clone());
        let src = StickySource {
            ip: ip(1),
            ifindex: 3,
        };
        assert!(c.keep(ip(2), &src, 0));
        assert_eq!(queries.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn a_source_whose_route_moved_or_vanished_is_dropped_once_checked_per_change() {
        let oif = Arc::new(AtomicU32::new(3));
        let queries = Arc::new(AtomicU32::new(0));
        let c = check(oif.clone(), queries.clone());
        let src = StickySource {
            ip: ip(1),
            ifindex: 3,
        };
        c.changed();
        assert!(
            c.keep(ip(2), &src, 0),
            "route still leaves through interface 3"
        );
        assert!(c.keep(ip(2), &src, 0));
        assert_eq!(
            queries.load(Ordering::Relaxed),
            1,
            "one query per tuple and change"
        );
        // The route now leaves through interface 4.
        oif.store(4, Ordering::Relaxed);
        assert!(
            c.keep(ip(2), &src, 0),
            "verdict holds until the next change"
        );
        c.changed();
        assert!(!c.keep(ip(2), &src, 0));
        assert!(
            !c.keep(ip(2), &src, 0),
            "a re-taught stale source stays dropped"
        );
        assert_eq!(queries.load(Ordering::Relaxed), 2);
        // The new source the peer's next datagram teaches is right.
        assert!(c.keep(
            ip(2),
            &StickySource {
                ip: ip(11),
                ifindex: 4
            },
            0
        ));
        // The address removed: the kernel refuses the source.
        oif.store(0, Ordering::Relaxed);
        c.changed();
        assert!(!c.keep(
            ip(2),
            &StickySource {
                ip: ip(11),
                ifindex: 4
            },
            0
        ));
        // An unknown interface only needs the source to be accepted.
        oif.store(7, Ordering::Relaxed);
        c.changed();
        assert!(c.keep(
            ip(2),
            &StickySource {
                ip: ip(11),
                ifindex: 0
            },
            0
        ));
    }

    #[test]
    fn verdict_table_is_bounded() {
        let c = check(Arc::new(AtomicU32::new(1)), Arc::new(AtomicU32::new(0)));
        c.changed();
        for i in 0..(MAX_VERDICTS as u32 + 10) {
            let dst = IpAddr::V4(Ipv4Addr::from(0x0a00_0000 + i));
            assert!(c.keep(
                dst,
                &StickySource {
                    ip: ip(1),
                    ifindex: 1
                },
                0
            ));
        }
        assert!(c.verdicts.read().len() <= MAX_VERDICTS);
    }
}
