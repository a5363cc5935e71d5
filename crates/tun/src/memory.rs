//! An in-memory TUN for tests and benchmarks: the "operating system" side is a pair of channels.
//!
//! Packets the test [`inject`](MemoryTunHandle::inject)s are what the device reads; packets the
//! device writes come out of [`MemoryTunHandle::recv`]. Batched like a real offloading TUN: one
//! `read` drains up to a whole batch.

use crate::{Device, Event};
use crossbeam_channel::{bounded, Receiver, Sender, TryRecvError};
use parking_lot::Mutex;
use std::io;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Queue depth on each side, in packets.
const QUEUE: usize = 8192;

/// The device side of an in-memory TUN.
pub struct MemoryTun {
    inner: Arc<Inner>,
    outbound_rx: Receiver<Vec<u8>>,
    batch: usize,
}

/// The "operating system" side of an in-memory TUN, for the test.
#[derive(Clone)]
pub struct MemoryTunHandle {
    inner: Arc<Inner>,
    outbound_tx: Sender<Vec<u8>>,
    inbound_rx: Receiver<Vec<u8>>,
}

struct Inner {
    name: String,
    mtu: AtomicU32,
    closed: AtomicBool,
    inbound_tx: Sender<Vec<u8>>,
    events_tx: Mutex<Option<Sender<Event>>>,
    events_rx: Receiver<Event>,
    close_tx: Mutex<Option<Sender<Vec<u8>>>>,
}

impl MemoryTun {
    /// A TUN named `name` with the given MTU that reads up to `batch` packets per call. Emits
    /// [`Event::Up`] at creation, as wireguard-go's test TUN does.
    pub fn new(name: &str, mtu: u32, batch: usize) -> (MemoryTun, MemoryTunHandle) {
        let (outbound_tx, outbound_rx) = bounded(QUEUE);
        let (inbound_tx, inbound_rx) = bounded(QUEUE);
        let (events_tx, events_rx) = bounded(16);
        let _ = events_tx.send(Event::Up);
        let inner = Arc::new(Inner {
            name: name.to_string(),
            mtu: AtomicU32::new(mtu),
            closed: AtomicBool::new(false),
            inbound_tx,
            events_tx: Mutex::new(Some(events_tx)),
            events_rx,
            close_tx: Mutex::new(Some(outbound_tx.clone())),
        });
        let tun = MemoryTun {
            inner: inner.clone(),
            outbound_rx,
            batch: batch.max(1),
        };
        let handle = MemoryTunHandle {
            inner,
            outbound_tx,
            inbound_rx,
        };
        (tun, handle)
    }
}

impl MemoryTunHandle {
    /// Hands a packet to the device as if the OS routed it into the interface. Blocks while the
    /// queue is full. Returns false once the TUN is closed.
    pub fn inject(&self, packet: Vec<u8>) -> bool {
        !self.inner.closed.load(Ordering::Acquire) && self.outbound_tx.send(packet).is_ok()
    }

    /// The next packet the device wrote, waiting up to `timeout`.
    pub fn recv(&self, timeout: Duration) -> Option<Vec<u8>> {
        self.inbound_rx.recv_timeout(timeout).ok()
    }

    /// A packet the device wrote, if one is waiting.
    pub fn try_recv(&self) -> Option<Vec<u8>> {
        self.inbound_rx.try_recv().ok()
    }

    /// Emits an interface event to the device.
    pub fn send_event(&self, ev: Event) {
        if let Some(tx) = self.inner.events_tx.lock().as_ref() {
            let _ = tx.try_send(ev);
        }
    }

    /// Changes the MTU and emits [`Event::MtuUpdate`].
    pub fn set_mtu(&self, mtu: u32) {
        self.inner.mtu.store(mtu, Ordering::Release);
        self.send_event(Event::MtuUpdate);
    }
}

impl Device for MemoryTun {
    fn read(
        &self,
        bufs: &mut [&mut [u8]],
        sizes: &mut [usize],
        offset: usize,
    ) -> io::Result<usize> {
        let n = bufs.len().min(sizes.len()).min(self.batch);
        if n == 0 {
            return Ok(0);
        }
        let mut got;
        let place = |p: Vec<u8>, i: usize, bufs: &mut [&mut [u8]], sizes: &mut [usize]| {
            let room = bufs[i].len().saturating_sub(offset);
            if p.len() > room {
                sizes[i] = 0; // would not fit: dropped, as a real TUN truncation would be
            } else {
                bufs[i][offset..offset + p.len()].copy_from_slice(&p);
                sizes[i] = p.len();
            }
        };
        match self.outbound_rx.recv() {
            Ok(p) if p.is_empty() && self.inner.closed.load(Ordering::Acquire) => {
                return Err(closed())
            }
            Ok(p) => {
                place(p, 0, bufs, sizes);
                got = 1;
            }
            Err(_) => return Err(closed()),
        }
        while got < n {
            match self.outbound_rx.try_recv() {
                Ok(p) if p.is_empty() && self.inner.closed.load(Ordering::Acquire) => break,
                Ok(p) => {
                    place(p, got, bufs, sizes);
                    got += 1;
                }
                Err(TryRecvError::Empty | TryRecvError::Disconnected) => break,
            }
        }
        Ok(got)
    }

    fn write(&self, bufs: &mut [&mut [u8]], sizes: &[usize], offset: usize) -> io::Result<usize> {
        if self.inner.closed.load(Ordering::Acquire) {
            return Err(closed());
        }
        for (buf, &size) in bufs.iter().zip(sizes) {
            let p = buf.get(offset..offset + size).ok_or_else(|| {
                io::Error::new(io::ErrorKind::InvalidInput, "packet outside buffer")
            })?;
            // A full queue pushes back for a while (lossless tests), then drops as a TUN whose
            // reader is stuck would.
            let _ = self
                .inner
                .inbound_tx
                .send_timeout(p.to_vec(), Duration::from_secs(2));
        }
        Ok(bufs.len())
    }

    fn mtu(&self) -> io::Result<u32> {
        Ok(self.inner.mtu.load(Ordering::Acquire))
    }

    fn name(&self) -> io::Result<String> {
        Ok(self.inner.name.clone())
    }

    fn events(&self) -> Receiver<Event> {
        self.inner.events_rx.clone()
    }

    fn close(&self) -> io::Result<()> {
        if self.inner.closed.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        self.inner.events_tx.lock().take();
        // Wake a blocked reader: an empty packet after `closed` is set means "closed".
        if let Some(tx) = self.inner.close_tx.lock().take() {
            let _ = tx.try_send(Vec::new());
        }
        Ok(())
    }

    fn batch_size(&self) -> usize {
        self.batch
    }
}

fn closed() -> io::Error {
    io::Error::new(io::ErrorKind::BrokenPipe, "tun closed")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn read_batches_and_close_wakes() {
        let (tun, h) = MemoryTun::new("mem0", 1420, 4);
        for i in 0..6u8 {
            assert!(h.inject(vec![i; 10]));
        }
        let mut store = vec![vec![0u8; 64]; 4];
        let mut bufs: Vec<&mut [u8]> = store.iter_mut().map(|b| b.as_mut_slice()).collect();
        let mut sizes = [0usize; 4];
        assert_eq!(tun.read(&mut bufs, &mut sizes, 16).unwrap(), 4);
        assert_eq!(sizes, [10; 4]);
        assert_eq!(bufs[3][16], 3);
        assert_eq!(tun.read(&mut bufs, &mut sizes, 16).unwrap(), 2);
        let tun = Arc::new(tun);
        let t2 = tun.clone();
        let th = std::thread::spawn(move || {
            let mut store = vec![0u8; 64];
            let mut bufs: Vec<&mut [u8]> = vec![store.as_mut_slice()];
            let mut sizes = [0usize; 1];
            t2.read(&mut bufs, &mut sizes, 16)
        });
        std::thread::sleep(Duration::from_millis(20));
        tun.close().unwrap();
        assert!(th.join().unwrap().is_err());
        assert!(tun.events().iter().any(|e| e == Event::Up));
    }

    #[test]
    fn write_reaches_handle() {
        let (tun, h) = MemoryTun::new("mem0", 1420, 1);
        let mut a = vec![0u8; 40];
        a[16..20].copy_from_slice(&[1, 2, 3, 4]);
        let mut bufs: Vec<&mut [u8]> = vec![a.as_mut_slice()];
        tun.write(&mut bufs, &[4], 16).unwrap();
        assert_eq!(h.recv(Duration::from_secs(1)).unwrap(), vec![1, 2, 3, 4]);
        assert!(tun.write(&mut bufs, &[100], 16).is_err());
    }
}
