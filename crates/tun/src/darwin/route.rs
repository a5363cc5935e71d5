//! Interface events from darwin's routing socket: `RTM_IFINFO` messages for our interface
//! become Up/Down on a change of `IFF_UP` and MtuUpdate on a change of the MTU.
//!
//! The parser is portable (it reads `struct if_msghdr` at fixed offsets, which the macOS
//! build checks against the SDK's layout) and fuzzed (`fuzz/fuzz_targets/tun_route.rs`).

#[cfg(any(target_vendor = "apple", test))]
use std::io;

#[cfg(any(target_vendor = "apple", test))]
use crate::Event;

/// `RTM_VERSION`.
const RTM_VERSION: u8 = 5;
/// `RTM_IFINFO`.
const RTM_IFINFO: u8 = 0xe;
/// `IFF_UP`.
#[cfg(any(target_vendor = "apple", test))]
const IFF_UP: u32 = 0x1;
/// Field offsets in `struct if_msghdr`: msglen, version, type, flags, index, ifm_data.ifi_mtu.
pub const IF_MSGHDR_OFFSETS: [usize; 6] = [0, 2, 3, 8, 12, 24];
/// Bytes up to and including `ifi_mtu`.
const MIN_LEN: usize = 28;
/// How often an MTU query that fails with ENOMEM is retried.
pub const ENOMEM_RETRIES: usize = 20;

/// What an `RTM_IFINFO` message says about an interface.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IfInfo {
    /// Interface index.
    pub index: u16,
    /// Interface flags (`IFF_UP`, ...).
    pub flags: u32,
    /// The MTU in the message's `if_data`.
    pub mtu: u32,
}

fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_ne_bytes([b[at], b[at + 1]])
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_ne_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

/// Parses one routing message; `None` unless it is a well-formed `RTM_IFINFO` of the version
/// we know.
pub fn parse_ifinfo(msg: &[u8]) -> Option<IfInfo> {
    let [len, ver, ty, flags, index, mtu] = IF_MSGHDR_OFFSETS;
    if msg.len() < MIN_LEN {
        return None;
    }
    let msglen = usize::from(u16_at(msg, len));
    if msglen < MIN_LEN || msglen > msg.len() || msg[ver] != RTM_VERSION || msg[ty] != RTM_IFINFO {
        return None;
    }
    Some(IfInfo {
        index: u16_at(msg, index),
        flags: u32_at(msg, flags),
        mtu: u32_at(msg, mtu),
    })
}

#[cfg(any(target_vendor = "apple", test))]
/// Calls `f` again while it fails with ENOMEM, at most [`ENOMEM_RETRIES`] more times.
pub(crate) fn retry_enomem<T>(mut f: impl FnMut() -> io::Result<T>) -> io::Result<T> {
    let mut tries = 0;
    loop {
        match f() {
            Err(e) if e.raw_os_error() == Some(libc::ENOMEM) && tries < ENOMEM_RETRIES => {
                tries += 1;
            }
            r => return r,
        }
    }
}

#[cfg(any(target_vendor = "apple", test))]
/// The listener's memory of our interface: whether it was up and its last MTU.
#[derive(Debug)]
pub(crate) struct RouteWatch {
    index: u32,
    up: bool,
    mtu: u32,
}

#[cfg(any(target_vendor = "apple", test))]
impl RouteWatch {
    pub(crate) fn new(index: u32, up: bool, mtu: u32) -> RouteWatch {
        RouteWatch { index, up, mtu }
    }

    /// The events one routing message means for our interface (none for other interfaces
    /// and other messages). The MTU is re-queried with `query_mtu` (ENOMEM retried), the
    /// message's own value used when the query fails.
    pub(crate) fn on_message(
        &mut self,
        msg: &[u8],
        query_mtu: &mut dyn FnMut() -> io::Result<u32>,
    ) -> Vec<Event> {
        let Some(info) = parse_ifinfo(msg) else {
            return Vec::new();
        };
        if u32::from(info.index) != self.index {
            return Vec::new();
        }
        let mut events = Vec::new();
        let up = info.flags & IFF_UP != 0;
        if up != self.up {
            self.up = up;
            events.push(if up { Event::Up } else { Event::Down });
        }
        let mtu = retry_enomem(&mut *query_mtu).unwrap_or(info.mtu);
        if mtu != self.mtu {
            self.mtu = mtu;
            events.push(Event::MtuUpdate);
        }
        events
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An `RTM_IFINFO` message as darwin lays it out.
    pub(crate) fn ifinfo(index: u16, flags: u32, mtu: u32) -> Vec<u8> {
        let mut m = vec![0u8; 112];
        m[0..2].copy_from_slice(&112u16.to_ne_bytes());
        m[2] = RTM_VERSION;
        m[3] = RTM_IFINFO;
        m[8..12].copy_from_slice(&flags.to_ne_bytes());
        m[12..14].copy_from_slice(&index.to_ne_bytes());
        m[24..28].copy_from_slice(&mtu.to_ne_bytes());
        m
    }

    #[test]
    fn ifinfo_messages_parse() {
        let info = parse_ifinfo(&ifinfo(7, 0x8051, 1420)).unwrap();
        assert_eq!(
            info,
            IfInfo {
                index: 7,
                flags: 0x8051,
                mtu: 1420
            }
        );
    }

    #[test]
    fn other_messages_and_short_or_inconsistent_ones_are_ignored() {
        let good = ifinfo(7, 1, 1420);
        let mut other = good.clone();
        other[3] = 0xc; // RTM_NEWADDR
        let mut version = good.clone();
        version[2] = 4;
        let mut long = good.clone();
        long[0..2].copy_from_slice(&200u16.to_ne_bytes());
        for m in [&other[..], &version[..], &long[..], &good[..27], &[]] {
            assert_eq!(parse_ifinfo(m), None);
        }
    }

    #[test]
    fn up_and_down_transitions_of_our_interface_are_reported_once() {
        let mut w = RouteWatch::new(7, false, 1420);
        let mut mtu = || Ok(1420);
        assert_eq!(
            w.on_message(&ifinfo(7, IFF_UP, 1420), &mut mtu),
            vec![Event::Up]
        );
        assert_eq!(w.on_message(&ifinfo(7, IFF_UP, 1420), &mut mtu), vec![]);
        assert_eq!(w.on_message(&ifinfo(8, 0, 1420), &mut mtu), vec![]);
        assert_eq!(
            w.on_message(&ifinfo(7, 0, 1420), &mut mtu),
            vec![Event::Down]
        );
    }

    #[test]
    fn mtu_changes_are_reported_from_a_fresh_query() {
        let mut w = RouteWatch::new(7, true, 1420);
        let mut mtu = || Ok(1280);
        // The message's MTU is stale; the query's wins.
        assert_eq!(
            w.on_message(&ifinfo(7, IFF_UP, 1420), &mut mtu),
            vec![Event::MtuUpdate]
        );
        assert_eq!(w.on_message(&ifinfo(7, IFF_UP, 1420), &mut mtu), vec![]);
    }

    #[test]
    fn mtu_query_retries_enomem_up_to_twenty_times() {
        let mut w = RouteWatch::new(7, true, 1420);
        let mut calls = 0;
        let mut mtu = || {
            calls += 1;
            if calls <= ENOMEM_RETRIES {
                Err(io::Error::from_raw_os_error(libc::ENOMEM))
            } else {
                Ok(1300)
            }
        };
        assert_eq!(
            w.on_message(&ifinfo(7, IFF_UP, 1420), &mut mtu),
            vec![Event::MtuUpdate]
        );
        assert_eq!(calls, ENOMEM_RETRIES + 1);
        let mut calls = 0;
        let r: io::Result<()> = retry_enomem(|| {
            calls += 1;
            Err(io::Error::from_raw_os_error(libc::ENOMEM))
        });
        assert!(r.is_err());
        assert_eq!(calls, ENOMEM_RETRIES + 1);
    }

    #[test]
    fn a_failed_mtu_query_falls_back_to_the_message() {
        let mut w = RouteWatch::new(7, true, 1420);
        let mut mtu = || Err(io::Error::from_raw_os_error(libc::ENXIO));
        assert_eq!(
            w.on_message(&ifinfo(7, IFF_UP, 1380), &mut mtu),
            vec![Event::MtuUpdate]
        );
    }
}
