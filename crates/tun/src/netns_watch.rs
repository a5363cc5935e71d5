//! Up and down for a TUN interface moved into another network namespace.
//!
//! [`LinuxTun`] learns that its interface came up or went down from rtnetlink, in the network
//! namespace it was created in. Moved elsewhere (`ip link set wg0 netns other`, as wireguard-go's
//! own netns test runs its daemon), the interface vanishes from that namespace and its
//! notifications stop: brought up over there, the device would never hear of it.
//!
//! wireguard-go covers this with its "hack listener": once a second it writes an empty buffer to
//! the TUN descriptor; the driver answers `EINVAL` (bad packet) while the interface is up and
//! `EIO` while it is down, wherever the interface lives, and the listener reports Up or Down when
//! the answer changes. [`NamespaceWatch`] does the same, but only while the interface cannot be
//! found in the namespace the TUN was made in (its MTU query answers `ENODEV`): there rtnetlink
//! already says everything, and some kernels answer `EINVAL` whatever the state (seen here on
//! 6.18), which would bring up a device whose interface is down.

use std::fs::File;
use std::io::{self, Write};
use std::os::fd::AsFd;
use std::sync::{Arc, Weak};
use std::time::Duration;

use crossbeam_channel::{bounded, select, Receiver, Sender};

use crate::{Device, Event, LinuxTun};

/// wireguard-go's probe period.
const PERIOD: Duration = Duration::from_secs(1);
/// Room for a burst of link events before the forwarder waits for the device.
const CAPACITY: usize = 16;

/// A [`LinuxTun`] whose events also cover its interface living in another network namespace.
/// Everything else is the TUN's own.
pub struct NamespaceWatch {
    inner: Arc<LinuxTun>,
    events: Receiver<Event>,
    /// Dropped (by [`Device::close`] or with the watch) to stop the thread.
    stop: parking_lot::Mutex<Option<Sender<()>>>,
}

impl NamespaceWatch {
    /// Wraps `tun`, starting the thread that forwards its events and probes it once a second
    /// while its interface is out of sight.
    pub fn new(tun: Arc<LinuxTun>) -> io::Result<NamespaceWatch> {
        // Our own handle on the descriptor, closed when the thread ends (an empty write on a
        // shared descriptor is harmless to the reader and writers).
        let probe = File::from(tun.as_fd().try_clone_to_owned()?);
        let (tx, events) = bounded(CAPACITY);
        let (stop_tx, stop_rx) = bounded::<()>(0);
        let inner_events = tun.events();
        let weak = Arc::downgrade(&tun);
        std::thread::Builder::new()
            .name("tun-netns-watch".into())
            .spawn(move || watch(&weak, probe, &inner_events, &tx, &stop_rx))?;
        Ok(NamespaceWatch {
            inner: tun,
            events,
            stop: parking_lot::Mutex::new(Some(stop_tx)),
        })
    }
}

/// What the probe's answer means, given the last state it reported: the event to report, if
/// any, and the new state. `None` as answer: the interface is in our namespace (rtnetlink
/// reports it; the probe forgets its state). A descriptor that no longer works ends the probe.
fn probe_verdict(
    last: Option<Event>,
    answer: Option<io::Result<usize>>,
) -> Result<(Option<Event>, Option<Event>), ()> {
    let Some(answer) = answer else {
        return Ok((None, None));
    };
    let now = match answer.map_err(|e| e.raw_os_error()) {
        Err(Some(libc::EINVAL)) => Event::Up,
        Err(Some(libc::EIO)) => Event::Down,
        _ => return Err(()),
    };
    Ok(((last != Some(now)).then_some(now), Some(now)))
}

fn watch(
    tun: &Weak<LinuxTun>,
    mut probe: File,
    inner: &Receiver<Event>,
    tx: &Sender<Event>,
    stop: &Receiver<()>,
) {
    let send = |ev: Event| -> bool {
        select! {
            send(tx, ev) -> r => r.is_ok(),
            recv(stop) -> _ => false,
        }
    };
    let mut last = None;
    loop {
        select! {
            recv(inner) -> ev => match ev {
                Ok(ev) => if !send(ev) { return },
                Err(_) => return,
            },
            recv(stop) -> _ => return,
            default(PERIOD) => {
                let Some(t) = tun.upgrade() else { return };
                let moved = matches!(t.mtu(), Err(e) if e.raw_os_error() == Some(libc::ENODEV));
                drop(t);
                let answer = moved.then(|| probe.write(&[]));
                match probe_verdict(last, answer) {
                    Ok((ev, now)) => {
                        if let Some(ev) = ev {
                            tracing::info!("TUN interface in another network namespace: {ev:?}");
                            if !send(ev) || !send(Event::MtuUpdate) {
                                return;
                            }
                        }
                        last = now;
                    }
                    Err(()) => return,
                }
            }
        }
    }
}

impl Device for NamespaceWatch {
    fn read(
        &self,
        bufs: &mut [&mut [u8]],
        sizes: &mut [usize],
        offset: usize,
    ) -> io::Result<usize> {
        self.inner.read(bufs, sizes, offset)
    }

    fn write(&self, bufs: &mut [&mut [u8]], sizes: &[usize], offset: usize) -> io::Result<usize> {
        self.inner.write(bufs, sizes, offset)
    }

    fn mtu(&self) -> io::Result<u32> {
        self.inner.mtu()
    }

    fn name(&self) -> io::Result<String> {
        self.inner.name()
    }

    fn events(&self) -> Receiver<Event> {
        self.events.clone()
    }

    fn close(&self) -> io::Result<()> {
        drop(self.stop.lock().take());
        self.inner.close()
    }

    fn batch_size(&self) -> usize {
        self.inner.batch_size()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(code: i32) -> Option<io::Result<usize>> {
        Some(Err(io::Error::from_raw_os_error(code)))
    }

    #[test]
    fn probe_reports_changes_only_while_out_of_sight() {
        // In our namespace: nothing, and no state kept.
        assert_eq!(probe_verdict(Some(Event::Up), None), Ok((None, None)));
        // Moved and up: Up once, then nothing while it stays up.
        assert_eq!(
            probe_verdict(None, err(libc::EINVAL)),
            Ok((Some(Event::Up), Some(Event::Up)))
        );
        assert_eq!(
            probe_verdict(Some(Event::Up), err(libc::EINVAL)),
            Ok((None, Some(Event::Up)))
        );
        // Down over there.
        assert_eq!(
            probe_verdict(Some(Event::Up), err(libc::EIO)),
            Ok((Some(Event::Down), Some(Event::Down)))
        );
        assert_eq!(
            probe_verdict(Some(Event::Down), err(libc::EIO)),
            Ok((None, Some(Event::Down)))
        );
        // A dead descriptor (the interface destroyed) or an accepted write ends the probe.
        assert!(probe_verdict(None, err(libc::EBADFD)).is_err());
        assert!(probe_verdict(None, Some(Ok(0))).is_err());
    }
}
