//! [`NetTun`]: the stack seen by the device as a TUN.

use crate::stack::Stack;
use crossbeam_channel::{Receiver, Sender};
use parking_lot::Mutex;
use smallvec::SmallVec;
use std::io;
use std::sync::Arc;
use vpn_tun::{Device, Event};

/// The TUN half of [`create_net_tun`](crate::create_net_tun), for `Device::new`.
///
/// Its reads are the packets the stack sends (written by smoltcp straight into the read's
/// buffers); its writes are the tunnel's packets, handed to the stack from the device's
/// buffers without a copy. Closing it closes the stack: every socket is reset and every
/// blocked call on the [`Net`](crate::Net) side returns an error.
pub struct NetTun {
    stack: Arc<Stack>,
    events: Receiver<Event>,
    /// Held until close, so the event channel stays connected while the TUN is open.
    events_tx: Mutex<Option<Sender<Event>>>,
}

impl std::fmt::Debug for NetTun {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NetTun")
            .field("addresses", &self.stack.addrs)
            .finish()
    }
}

impl NetTun {
    pub(crate) fn new(stack: Arc<Stack>) -> NetTun {
        let (tx, rx) = crossbeam_channel::unbounded();
        // The interface is up from the start, as wireguard-go's netstack TUN reports.
        let _ = tx.send(Event::Up);
        NetTun {
            stack,
            events: rx,
            events_tx: Mutex::new(Some(tx)),
        }
    }
}

impl Device for NetTun {
    fn read(
        &self,
        bufs: &mut [&mut [u8]],
        sizes: &mut [usize],
        offset: usize,
    ) -> io::Result<usize> {
        self.stack.egress(bufs, sizes, offset)
    }

    fn write(&self, bufs: &mut [&mut [u8]], sizes: &[usize], offset: usize) -> io::Result<usize> {
        if self.stack.is_closed() {
            return Err(crate::stack::closed());
        }
        let n = bufs.len().min(sizes.len());
        let packets: SmallVec<[&[u8]; 128]> = bufs[..n]
            .iter()
            .zip(sizes)
            .filter_map(|(b, &len)| b.get(offset..offset.checked_add(len)?))
            .collect();
        self.stack.ingest(packets.into_iter());
        Ok(n)
    }

    fn mtu(&self) -> io::Result<u32> {
        Ok(self.stack.mtu() as u32)
    }

    fn name(&self) -> io::Result<String> {
        Ok("netstack".to_string())
    }

    fn events(&self) -> Receiver<Event> {
        self.events.clone()
    }

    fn close(&self) -> io::Result<()> {
        self.stack.close();
        self.events_tx.lock().take();
        Ok(())
    }

    fn batch_size(&self) -> usize {
        self.stack.opts.batch
    }
}
