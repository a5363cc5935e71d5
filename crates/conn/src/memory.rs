//! An in-memory network of binds for tests: datagrams move between binds through channels, with
//! fake addresses, so pipeline tests run without sockets and can do what sockets make awkward —
//! move a bind to another address (roaming), inject datagrams from arbitrary sources (floods,
//! hostile input) and count what was sent. With [`faults`] configured it also loses,
//! duplicates, corrupts, reorders and delays datagrams, seeded so a failing run reproduces.

pub mod faults;

use crate::{err_closed, Bind, Endpoint, ReceiveFunc};
use crossbeam_channel::{bounded, Receiver, Sender, TryRecvError};
use faults::{FaultConfig, FaultStats, Faults};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicU16, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Weak};

/// Datagrams queued per bind before further ones are dropped (like a full socket buffer).
const QUEUE: usize = 8192;

/// How long a send waits for room in a full receive queue before dropping.
const DELIVERY_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

type Datagram = (SocketAddr, Vec<u8>);

/// A copy of a delivered datagram: (from, to, bytes).
pub type Captured = (SocketAddr, SocketAddr, Vec<u8>);

/// A set of in-memory binds that can reach each other by address.
#[derive(Clone, Default)]
pub struct MemoryNetwork {
    inner: Arc<NetInner>,
}

#[derive(Default)]
struct NetInner {
    sockets: Mutex<HashMap<SocketAddr, Sender<Datagram>>>,
    next_port: AtomicU16,
    /// Datagrams dropped because no bind had the address or its queue stayed full.
    dropped: AtomicU64,
    tap: Mutex<Option<Sender<Captured>>>,
    faults: Mutex<Option<Arc<Faults>>>,
    /// Whether `faults` is set: datagrams skip its lock when not (benchmarks run over this
    /// network too).
    faulty: AtomicBool,
}

impl MemoryNetwork {
    /// An empty network.
    pub fn new() -> Self {
        let n = MemoryNetwork::default();
        n.inner.next_port.store(40000, Ordering::Relaxed);
        n
    }

    /// A bind on this network that listens on `ip` (port chosen at `open`), reading and sending
    /// up to `batch` datagrams per call.
    pub fn bind(&self, ip: IpAddr, batch: usize) -> MemoryBind {
        MemoryBind {
            net: self.clone(),
            ip: Mutex::new(ip),
            batch: batch.max(1),
            state: Mutex::new(None),
            mark: AtomicU32::new(0),
            sent: AtomicU64::new(0),
            send_calls: AtomicU64::new(0),
        }
    }

    /// Delivers one datagram to `to` as if sent from `from` (through the faults, if any).
    /// Returns whether a bind took it (or, with faults, whether it is still in flight: false
    /// when the injector lost it).
    pub fn inject(&self, from: SocketAddr, to: SocketAddr, data: Vec<u8>) -> bool {
        self.deliver(from, to, data)
    }

    /// Runs every datagram sent from now on (and every injected one) through `faults`, or
    /// through none. What the previous faults held back or delayed is delivered first, so
    /// nothing stays in limbo (a datagram being sent at that very moment may still meet the
    /// previous faults: replace them between a scenario's phases, not in the middle of one).
    pub fn set_faults(&self, faults: Option<FaultConfig>) {
        self.inner.faulty.store(faults.is_some(), Ordering::Release);
        let old = std::mem::replace(
            &mut *self.inner.faults.lock(),
            faults.map(Faults::new).map(Arc::new),
        );
        if let Some(old) = old {
            old.flush(self);
        }
    }

    /// What the current faults did so far (all zero without faults).
    pub fn fault_stats(&self) -> FaultStats {
        self.inner
            .faults
            .lock()
            .as_ref()
            .map(|f| f.stats())
            .unwrap_or_default()
    }

    /// Delivers, now, every datagram the faults hold back or delay (a reordered datagram waits
    /// for later ones on its link: when the link goes quiet, this lets it go). One the delay
    /// line is handing over at that moment arrives by its hand, just after.
    pub fn flush_faults(&self) {
        let faults = self.inner.faults.lock().clone();
        if let Some(f) = faults {
            f.flush(self);
        }
    }

    /// Copies every datagram delivered from now on to `tap` (for replay and capture tests).
    pub fn set_tap(&self, tap: Option<Sender<Captured>>) {
        *self.inner.tap.lock() = tap;
    }

    /// Datagrams lost so far (no such address, or the receiver's queue stayed full).
    pub fn dropped(&self) -> u64 {
        self.inner.dropped.load(Ordering::Relaxed)
    }

    fn deliver(&self, from: SocketAddr, to: SocketAddr, data: Vec<u8>) -> bool {
        if !self.inner.faulty.load(Ordering::Acquire) {
            return self.deliver_now(from, to, data);
        }
        let faults = self.inner.faults.lock().clone();
        match faults {
            Some(f) if f.matches(from, to, &data) => f.offer(self, from, to, data),
            _ => self.deliver_now(from, to, data),
        }
    }

    fn downgrade(&self) -> Weak<NetInner> {
        Arc::downgrade(&self.inner)
    }

    /// Hands a datagram to the bind at `to` (no faults); the tap sees it here.
    fn deliver_now(&self, from: SocketAddr, to: SocketAddr, data: Vec<u8>) -> bool {
        if let Some(tap) = self.inner.tap.lock().as_ref() {
            let _ = tap.try_send((from, to, data.clone()));
        }
        let tx = self.inner.sockets.lock().get(&to).cloned();
        // A full queue pushes back for a while (tests want lossless bulk transfers), then drops
        // as a full socket buffer would, so nothing can wait forever.
        let ok = tx.is_some_and(|tx| tx.send_timeout((from, data), DELIVERY_WAIT).is_ok());
        if !ok {
            self.inner.dropped.fetch_add(1, Ordering::Relaxed);
        }
        ok
    }
}

/// One endpoint of a [`MemoryNetwork`].
pub struct MemoryBind {
    net: MemoryNetwork,
    ip: Mutex<IpAddr>,
    batch: usize,
    state: Mutex<Option<Open>>,
    mark: AtomicU32,
    sent: AtomicU64,
    send_calls: AtomicU64,
}

struct Open {
    addr: SocketAddr,
    // Dropping this (with the network's entry) disconnects the receiver: readers see "closed".
    _tx: Sender<Datagram>,
}

impl MemoryBind {
    /// The address the bind listens on, once open.
    pub fn local_addr(&self) -> Option<SocketAddr> {
        self.state.lock().as_ref().map(|o| o.addr)
    }

    /// Moves the bind to another IP; takes effect at the next `open` (as a new address would
    /// after a rebind).
    pub fn set_ip(&self, ip: IpAddr) {
        *self.ip.lock() = ip;
    }

    /// The fwmark last set.
    pub fn mark(&self) -> u32 {
        self.mark.load(Ordering::Relaxed)
    }

    /// Datagrams and `send` calls so far.
    pub fn sent(&self) -> (u64, u64) {
        (
            self.sent.load(Ordering::Relaxed),
            self.send_calls.load(Ordering::Relaxed),
        )
    }
}

impl Bind for MemoryBind {
    fn open(&self, port: u16) -> io::Result<(Vec<ReceiveFunc>, u16)> {
        let mut st = self.state.lock();
        if st.is_some() {
            return Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                "bind already open",
            ));
        }
        let ip = *self.ip.lock();
        let mut sockets = self.net.inner.sockets.lock();
        let port = if port != 0 {
            port
        } else {
            loop {
                let p = self
                    .net
                    .inner
                    .next_port
                    .fetch_add(1, Ordering::Relaxed)
                    .max(1024);
                if !sockets.contains_key(&SocketAddr::new(ip, p)) {
                    break p;
                }
            }
        };
        let addr = SocketAddr::new(ip, port);
        if sockets.contains_key(&addr) {
            return Err(io::Error::from(io::ErrorKind::AddrInUse));
        }
        let (tx, rx) = bounded::<Datagram>(QUEUE);
        sockets.insert(addr, tx.clone());
        drop(sockets);
        *st = Some(Open { addr, _tx: tx });
        Ok((vec![receive_func(rx, self.batch)], port))
    }

    fn close(&self) -> io::Result<()> {
        if let Some(open) = self.state.lock().take() {
            self.net.inner.sockets.lock().remove(&open.addr);
        }
        Ok(())
    }

    fn set_mark(&self, mark: u32) -> io::Result<()> {
        self.mark.store(mark, Ordering::Relaxed);
        Ok(())
    }

    fn send(&self, bufs: &[&[u8]], ep: &Endpoint) -> io::Result<()> {
        let from = self.local_addr().ok_or_else(err_closed)?;
        self.send_calls.fetch_add(1, Ordering::Relaxed);
        for b in bufs {
            self.net.deliver(from, ep.dst, b.to_vec());
            self.sent.fetch_add(1, Ordering::Relaxed);
        }
        Ok(())
    }

    fn batch_size(&self) -> usize {
        self.batch
    }
}

fn receive_func(rx: Receiver<Datagram>, batch: usize) -> ReceiveFunc {
    // A datagram taken off the channel by a wait (no buffers), delivered by the next read.
    let mut waiting: Option<Datagram> = None;
    Box::new(
        move |bufs: &mut [&mut [u8]], sizes: &mut [usize], eps: &mut [Endpoint]| {
            let n = bufs.len().min(sizes.len()).min(eps.len()).min(batch);
            if n == 0 {
                // Wait until a datagram is there (see `ReceiveFunc`).
                if waiting.is_none() {
                    waiting = Some(rx.recv().map_err(|_| err_closed())?);
                }
                return Ok(0);
            }
            let mut put = |i: usize, (from, data): Datagram| {
                if data.len() > bufs[i].len() {
                    sizes[i] = 0; // truncated datagram: dropped
                } else {
                    bufs[i][..data.len()].copy_from_slice(&data);
                    sizes[i] = data.len();
                }
                eps[i] = Endpoint::from(from);
            };
            let first = match waiting.take() {
                Some(d) => d,
                None => rx.recv().map_err(|_| err_closed())?,
            };
            put(0, first);
            let mut got = 1;
            while got < n {
                match rx.try_recv() {
                    Ok(d) => {
                        put(got, d);
                        got += 1;
                    }
                    Err(TryRecvError::Empty | TryRecvError::Disconnected) => break,
                }
            }
            Ok(got)
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::is_err_closed;

    #[test]
    fn two_binds_exchange_and_close_ends_reader() {
        let net = MemoryNetwork::new();
        let a = net.bind("10.0.0.1".parse().unwrap(), 8);
        let b = net.bind("10.0.0.2".parse().unwrap(), 8);
        let (_fa, _pa) = a.open(0).unwrap();
        let (mut fb, pb) = b.open(0).unwrap();
        assert!(a.open(0).is_err());
        let to = Endpoint::from(SocketAddr::new("10.0.0.2".parse().unwrap(), pb));
        a.send(&[b"one", b"two"], &to).unwrap();
        let mut s1 = [0u8; 16];
        let mut s2 = [0u8; 16];
        let mut bufs: Vec<&mut [u8]> = vec![&mut s1, &mut s2];
        let mut sizes = [0; 2];
        let mut eps = [Endpoint::default(); 2];
        assert_eq!(fb[0](&mut bufs, &mut sizes, &mut eps).unwrap(), 2);
        assert_eq!(&bufs[1][..sizes[1]], b"two");
        assert_eq!(eps[0].dst, a.local_addr().unwrap());
        b.close().unwrap();
        let e = fb[0](&mut bufs, &mut sizes, &mut eps).unwrap_err();
        assert!(is_err_closed(&e));
        assert!(!net.inject(a.local_addr().unwrap(), to.dst, vec![1]));
    }

    #[test]
    fn a_call_without_buffers_waits_for_a_datagram_and_keeps_it_for_the_read() {
        let net = MemoryNetwork::new();
        let a = net.bind("10.0.0.1".parse().unwrap(), 8);
        let b = net.bind("10.0.0.2".parse().unwrap(), 8);
        let (_fa, _pa) = a.open(0).unwrap();
        let (mut fb, pb) = b.open(0).unwrap();
        let to = Endpoint::from(SocketAddr::new("10.0.0.2".parse().unwrap(), pb));
        let waiter = std::thread::spawn(move || {
            let r = fb[0](&mut [], &mut [], &mut []);
            (fb, r.map_err(|e| e.kind()))
        });
        a.send(&[b"one"], &to).unwrap();
        let (mut fb, r) = waiter.join().unwrap();
        assert_eq!(r, Ok(0));
        let mut s1 = [0u8; 16];
        let mut bufs: Vec<&mut [u8]> = vec![&mut s1];
        let (mut sizes, mut eps) = ([0; 1], [Endpoint::default(); 1]);
        assert_eq!(fb[0](&mut bufs, &mut sizes, &mut eps).unwrap(), 1);
        assert_eq!(&bufs[0][..sizes[0]], b"one");
        b.close().unwrap();
        let e = fb[0](&mut [], &mut [], &mut []).unwrap_err();
        assert!(is_err_closed(&e), "a wait on a closed bind ends the reader");
    }
}
