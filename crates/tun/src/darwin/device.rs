//! [`DarwinTun`]: a utun interface on macOS.
//!
//! Creation opens the utun kernel control (`vpn_sys::darwin::utun`); from there on
//! [`DarwinTun::create`] and [`DarwinTun::from_fd`] run the same code: non-blocking mode, the
//! name from `UTUN_OPT_IFNAME`, the pending-packet queue raised to 512, the MTU set when asked,
//! the routing-socket listener started. Reads and writes go through the portable data path
//! (`super::io`) with the system's kernel; they wait in `poll` on the utun fd plus a wake pipe,
//! which `close` makes readable for good so every blocked reader and writer returns.

use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::sync::Arc;
use std::thread::JoinHandle;

use crossbeam_channel::{select, Receiver, Sender};
use vpn_sys::darwin::{fd as sysfd, iface, utun};

use super::frame::{page_size, parse_utun_name};
use super::io::{batch_size, raise_pending_queue, MtuCache, Ready, UtunIo};
use super::route::{self, retry_enomem, RouteWatch};
use crate::shutdown::{closed, Shutdown};
use crate::{Device, Event};

/// wireguard-go's event channel capacity.
const EVENT_CAPACITY: usize = 5;

// The portable routing-message parser reads `struct if_msghdr` at the SDK's offsets.
const _: () = {
    let (a, b) = (route::IF_MSGHDR_OFFSETS, iface::IF_MSGHDR_OFFSETS);
    let mut i = 0;
    while i < a.len() {
        assert!(a[i] == b[i]);
        i += 1;
    }
};

/// A utun interface (layer 3, 4-byte address-family header on every packet).
pub struct DarwinTun {
    fd: OwnedFd,
    name: String,
    io: UtunIo,
    /// Interface ioctls (MTU) go through this socket.
    ctl: Arc<OwnedFd>,
    /// Readable once `close` ran; every poller watches it.
    wake_rx: Arc<OwnedFd>,
    wake_tx: OwnedFd,
    events: Receiver<Event>,
    shutdown: Shutdown,
}

impl DarwinTun {
    /// Creates a utun interface: `"utun"` lets the kernel pick the unit, `"utunN"` asks for
    /// unit N. Sets the MTU unless `mtu` is 0. The interface is left down.
    pub fn create(name: &str, mtu: u32) -> io::Result<DarwinTun> {
        let unit = parse_utun_name(name)?;
        Self::from_fd(utun::open_utun(unit)?, mtu)
    }

    /// Wraps a utun descriptor the host opened (a network extension's, `WG_TUN_FD`): made
    /// non-blocking, named from `UTUN_OPT_IFNAME`; the MTU is set only if `mtu > 0`.
    pub fn from_fd(fd: OwnedFd, mtu: u32) -> io::Result<DarwinTun> {
        sysfd::set_nonblocking(fd.as_fd())?;
        let name = utun::utun_ifname(fd.as_fd())?;
        let k = vpn_darwinbatch::system();
        raise_pending_queue(k, fd.as_raw_fd(), &name);
        let ctl = Arc::new(iface::ioctl_socket()?);
        if mtu > 0 {
            iface::set_if_mtu(ctl.as_fd(), &name, mtu)?;
        }
        let index = iface::if_index(&name)?;
        let up = iface::if_flags(ctl.as_fd(), &name)? & libc::IFF_UP as u32 != 0;
        let current_mtu = iface::if_mtu(ctl.as_fd(), &name)?;
        let cache = Arc::new(MtuCache::new(Box::new({
            let (ctl, name) = (ctl.clone(), name.clone());
            move || iface::if_mtu(ctl.as_fd(), &name)
        })));
        let batch = batch_size(vpn_darwinbatch::supported());
        let io = UtunIo::new(k, fd.as_raw_fd(), batch, page_size(), cache.clone());
        let (wake_rx, wake_tx) = sysfd::pipe()?;
        let wake_rx = Arc::new(wake_rx);
        let (tx, events) = crossbeam_channel::bounded(EVENT_CAPACITY);
        let (stop_tx, stop_rx) = crossbeam_channel::bounded(0);
        let listener = Listener {
            route: iface::route_socket()?,
            wake: wake_rx.clone(),
            watch: RouteWatch::new(index, up, current_mtu),
            ctl: ctl.clone(),
            name: name.clone(),
            cache,
            tx,
            stop: stop_rx,
        }
        .spawn(up)?;
        tracing::debug!("utun {name}: index {index}, batch {batch}, up {up}");
        Ok(DarwinTun {
            fd,
            name,
            io,
            ctl,
            wake_rx,
            wake_tx,
            events,
            shutdown: Shutdown::new(stop_tx, Some(listener)),
        })
    }

    /// Sets the interface MTU (`SIOCSIFMTU`); the read path re-reads it.
    pub fn set_mtu(&self, mtu: u32) -> io::Result<()> {
        iface::set_if_mtu(self.ctl.as_fd(), &self.name, mtu)?;
        self.io.mtu.clear();
        Ok(())
    }

    fn is_closed(&self) -> bool {
        self.shutdown.is_closed()
    }

    /// Waits for the utun to be readable or writable; an error once the device is closed.
    fn wait(&self, what: Ready) -> io::Result<()> {
        let events = match what {
            Ready::Read => libc::POLLIN,
            Ready::Write => libc::POLLOUT,
        };
        if self.is_closed()
            || vpn_sys::poll::poll_or_wake(self.fd.as_raw_fd(), events, self.wake_rx.as_fd())?
        {
            return Err(closed());
        }
        Ok(())
    }
}

impl Device for DarwinTun {
    fn read(
        &self,
        bufs: &mut [&mut [u8]],
        sizes: &mut [usize],
        offset: usize,
    ) -> io::Result<usize> {
        if self.is_closed() {
            return Err(closed());
        }
        self.io.read(bufs, sizes, offset, &|r| self.wait(r))
    }

    fn write(&self, bufs: &mut [&mut [u8]], sizes: &[usize], offset: usize) -> io::Result<usize> {
        if self.is_closed() {
            return Err(closed());
        }
        self.io.write(bufs, sizes, offset, &|r| self.wait(r))
    }

    fn mtu(&self) -> io::Result<u32> {
        iface::if_mtu(self.ctl.as_fd(), &self.name)
    }

    fn name(&self) -> io::Result<String> {
        Ok(self.name.clone())
    }

    fn events(&self) -> Receiver<Event> {
        self.events.clone()
    }

    fn close(&self) -> io::Result<()> {
        self.shutdown
            .close(&self.name, || sysfd::signal(self.wake_tx.as_fd()))
    }

    fn batch_size(&self) -> usize {
        self.io.batch_size()
    }
}

impl Drop for DarwinTun {
    fn drop(&mut self) {
        if let Err(e) = self.close() {
            tracing::warn!("utun {}: close failed: {e}", self.name);
        }
    }
}

/// The routing-socket listener: one thread in `poll` on the routing socket and the wake pipe.
struct Listener {
    route: OwnedFd,
    wake: Arc<OwnedFd>,
    watch: RouteWatch,
    ctl: Arc<OwnedFd>,
    name: String,
    cache: Arc<MtuCache>,
    tx: Sender<Event>,
    stop: Receiver<()>,
}

impl Listener {
    fn spawn(self, initially_up: bool) -> io::Result<JoinHandle<()>> {
        std::thread::Builder::new()
            .name("tun-events".into())
            .spawn(move || self.run(initially_up))
    }

    /// Sends an event unless the device is closing.
    fn send(&self, ev: Event) -> bool {
        select! {
            send(self.tx, ev) -> r => r.is_ok(),
            recv(self.stop) -> _ => false,
        }
    }

    fn run(mut self, initially_up: bool) {
        if initially_up && !self.send(Event::Up) {
            return;
        }
        let mut buf = vec![0u8; 2048];
        loop {
            match retry_enomem(|| sysfd::read(self.route.as_raw_fd(), &mut buf)) {
                Ok(n) => {
                    let (ctl, name) = (&self.ctl, &self.name);
                    let events = self
                        .watch
                        .on_message(&buf[..n], &mut || iface::if_mtu(ctl.as_fd(), name));
                    for ev in events {
                        if ev == Event::MtuUpdate {
                            self.cache.clear();
                        }
                        if !self.send(ev) {
                            return;
                        }
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    match vpn_sys::poll::poll_or_wake(
                        self.route.as_raw_fd(),
                        libc::POLLIN,
                        self.wake.as_fd(),
                    ) {
                        Ok(false) => {}
                        Ok(true) => return,
                        Err(e) => {
                            tracing::warn!("utun {}: routing socket poll: {e}", self.name);
                            return;
                        }
                    }
                }
                // Messages were lost to a full socket buffer; the MTU may have changed.
                Err(e) if e.raw_os_error() == Some(libc::ENOBUFS) => {
                    self.cache.clear();
                    if !self.send(Event::MtuUpdate) {
                        return;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    tracing::warn!("utun {}: routing socket: {e}", self.name);
                    return;
                }
            }
        }
    }
}
