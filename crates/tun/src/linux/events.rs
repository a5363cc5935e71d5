//! Interface events from rtnetlink: every `RTM_NEWLINK` for our ifindex becomes Up (running) or
//! Down (not running, once it has been up) followed by MtuUpdate, as in wireguard-go's
//! `routineNetlinkListener`.
//!
//! One thread blocks in `poll` on the netlink socket and the device's close eventfd, so it
//! costs no wake-ups while idle and exits as soon as the device closes. A full event channel
//! blocks it in a `select!` that also watches the close signal, so close never waits on a
//! consumer that stopped reading.

use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::sync::Arc;
use std::thread::JoinHandle;

use crossbeam_channel::{select, Receiver, Sender};

use crate::Event;
use vpn_sys::poll::EventFd;
use vpn_sys::tun as sys;

const NLMSG_HDR_LEN: usize = 16;
const IFINFOMSG_LEN: usize = 16;
const NLMSG_ERROR: u16 = 2;
const NLMSG_DONE: u16 = 3;

/// Calls `emit` for each event the netlink datagram `msgs` carries for interface `ifindex`;
/// `was_up` remembers whether Up was ever seen (Down is only reported after it). Stops early
/// when `emit` returns false. Truncated or malformed messages end the parse.
pub(crate) fn link_events(
    msgs: &[u8],
    ifindex: i32,
    was_up: &mut bool,
    emit: &mut dyn FnMut(Event) -> bool,
) {
    let mut rest = msgs;
    while rest.len() >= NLMSG_HDR_LEN {
        let len = u32::from_ne_bytes([rest[0], rest[1], rest[2], rest[3]]) as usize;
        let kind = u16::from_ne_bytes([rest[4], rest[5]]);
        if len < NLMSG_HDR_LEN || len > rest.len() || kind == NLMSG_DONE || kind == NLMSG_ERROR {
            return;
        }
        let msg = &rest[..len];
        rest = rest.get(len.next_multiple_of(4)..).unwrap_or(&[]);
        if kind != libc::RTM_NEWLINK || msg.len() < NLMSG_HDR_LEN + IFINFOMSG_LEN {
            continue;
        }
        let info = &msg[NLMSG_HDR_LEN..];
        let index = i32::from_ne_bytes([info[4], info[5], info[6], info[7]]);
        let flags = u32::from_ne_bytes([info[8], info[9], info[10], info[11]]);
        if index != ifindex {
            continue;
        }
        let ev = if flags & libc::IFF_RUNNING as u32 != 0 {
            *was_up = true;
            Some(Event::Up)
        } else if *was_up {
            Some(Event::Down)
        } else {
            None
        };
        if ev.is_some_and(|e| !emit(e)) || !emit(Event::MtuUpdate) {
            return;
        }
    }
}

/// Starts the listener. `initially_up` is reported first (as wireguard-go's first probe does).
/// The thread ends when `wake` becomes readable or `stop` disconnects; `tx` drops with it.
pub(crate) fn spawn(
    nl: OwnedFd,
    wake: Arc<EventFd>,
    ifindex: i32,
    initially_up: bool,
    tx: Sender<Event>,
    stop: Receiver<()>,
) -> io::Result<JoinHandle<()>> {
    std::thread::Builder::new()
        .name("tun-events".into())
        .spawn(move || {
            let send = |ev: Event| -> bool {
                select! {
                    send(tx, ev) -> r => r.is_ok(),
                    recv(stop) -> _ => false,
                }
            };
            let mut was_up = initially_up;
            if initially_up && !send(Event::Up) {
                return;
            }
            // Allocated once per device: the largest link notification is a few KiB.
            let mut buf = vec![0u8; 16 * 1024];
            loop {
                match vpn_sys::poll::poll_or_wake(nl.as_raw_fd(), libc::POLLIN, wake.as_fd()) {
                    Ok(false) => {}
                    Ok(true) => return,
                    Err(e) => {
                        tracing::warn!("tun events: poll failed, events stop: {e}");
                        return;
                    }
                }
                loop {
                    match sys::read(nl.as_fd(), &mut buf) {
                        Ok(n) => {
                            let mut keep = true;
                            link_events(&buf[..n], ifindex, &mut was_up, &mut |e| {
                                keep = send(e);
                                keep
                            });
                            if !keep {
                                return;
                            }
                        }
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                        // Notifications were lost; the MTU may have changed meanwhile.
                        Err(e) if e.raw_os_error() == Some(libc::ENOBUFS) => {
                            if !send(Event::MtuUpdate) {
                                return;
                            }
                        }
                        Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                        Err(e) => {
                            tracing::warn!("tun events: netlink read failed, events stop: {e}");
                            return;
                        }
                    }
                }
            }
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn newlink(index: i32, flags: u32) -> Vec<u8> {
        let mut m = Vec::new();
        m.extend_from_slice(&36u32.to_ne_bytes()); // 16 + 16 + 4 bytes of attributes
        m.extend_from_slice(&libc::RTM_NEWLINK.to_ne_bytes());
        m.extend_from_slice(&[0; 10]);
        m.extend_from_slice(&[0, 0, 0xfe, 0xff]);
        m.extend_from_slice(&index.to_ne_bytes());
        m.extend_from_slice(&flags.to_ne_bytes());
        m.extend_from_slice(&[0; 4]);
        m.extend_from_slice(&[0; 4]);
        m
    }

    fn events(msgs: &[u8], was_up: &mut bool) -> Vec<Event> {
        let mut out = Vec::new();
        link_events(msgs, 7, was_up, &mut |e| {
            out.push(e);
            true
        });
        out
    }

    #[test]
    fn up_down_and_mtu_for_our_index_only() {
        let running = (libc::IFF_UP | libc::IFF_RUNNING) as u32;
        let mut was_up = false;
        // Down before any Up is not reported; MtuUpdate always is.
        assert_eq!(events(&newlink(7, 0), &mut was_up), [Event::MtuUpdate]);
        let mut batch = newlink(7, running);
        batch.extend(newlink(8, running));
        batch.extend(newlink(7, libc::IFF_UP as u32));
        assert_eq!(
            events(&batch, &mut was_up),
            [Event::Up, Event::MtuUpdate, Event::Down, Event::MtuUpdate]
        );
        assert!(was_up);
    }

    #[test]
    fn malformed_datagrams_end_the_parse() {
        let mut was_up = false;
        let mut m = newlink(7, libc::IFF_RUNNING as u32);
        m[0] = 200; // longer than the datagram
        assert!(events(&m, &mut was_up).is_empty());
        let mut m = newlink(7, libc::IFF_RUNNING as u32);
        m[0] = 3; // shorter than a header
        assert!(events(&m, &mut was_up).is_empty());
        assert!(events(&newlink(7, 1)[..20], &mut was_up).is_empty());
        let mut short = newlink(7, libc::IFF_RUNNING as u32);
        short.truncate(20);
        short[0] = 20; // a NEWLINK without a full ifinfomsg
        assert!(events(&short, &mut was_up).is_empty());
    }
}
