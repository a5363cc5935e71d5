//! The send policy: how a batch becomes `sendmmsg` messages (UDP GSO coalescing) and what
//! happens when the kernel refuses (stale sticky source, GSO unsupported by the device).
//!
//! The syscall is passed in as a function so the retry rules are tested with injected errors;
//! the real one is [`vpn_sys::mmsg::SendBatch::send`].

use std::io;
use std::sync::atomic::{AtomicBool, Ordering};

use vpn_sys::cmsg::PktInfo;
use vpn_sys::mmsg::MsgPlan;

use crate::ErrUdpGsoDisabled;

/// Most datagrams in one GSO message (`udpSegmentMaxDatagrams`; older kernels cap at 64).
pub(super) const MAX_GSO_SEGMENTS: usize = 64;
/// Largest UDP payload of one IPv4 message (65 535 − 20 − 8).
pub(super) const MAX_V4_PAYLOAD: usize = 65_507;
/// Largest UDP payload of one IPv6 message (65 535 − 8).
pub(super) const MAX_V6_PAYLOAD: usize = 65_527;

/// Groups `bufs` into messages. With `gso`, a run of equal-size datagrams becomes one message
/// of at most [`MAX_GSO_SEGMENTS`] and `max_total` bytes; a shorter datagram may end a run,
/// never continue it. Empty datagrams are always sent alone (a zero-byte segment would
/// vanish inside a GSO message). Scatter-gather: a plan only names buffers, nothing is copied.
pub(super) fn plan(bufs: &[&[u8]], gso: bool, max_total: usize, plans: &mut Vec<MsgPlan>) {
    plans.clear();
    let mut i = 0;
    while i < bufs.len() {
        let seg = bufs[i].len();
        let mut count = 1;
        let mut total = seg;
        if gso && seg > 0 && seg <= usize::from(u16::MAX) {
            while let Some(next) = bufs.get(i + count) {
                let len = next.len();
                if count == MAX_GSO_SEGMENTS || len == 0 || len > seg || total + len > max_total {
                    break;
                }
                total += len;
                count += 1;
                if len < seg {
                    break;
                }
            }
        }
        let gso_size = if count > 1 {
            u16::try_from(seg).unwrap_or(0)
        } else {
            0
        };
        plans.push(MsgPlan {
            start: i,
            count,
            gso_size,
        });
        i += count;
    }
}

/// What a batch achieved, for the statistics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Sent {
    pub datagrams: usize,
    pub gso_messages: usize,
}

/// The kernel refused the sticky source: EINVAL/EADDRNOTAVAIL as documented, ENETUNREACH
/// for a source address no longer on any interface (what 6.x kernels return), ENODEV for a
/// vanished interface index. A genuinely unreachable destination fails the same way again
/// without the source, so the retry costs one syscall only on failures.
pub(super) fn is_bad_source(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EINVAL | libc::EADDRNOTAVAIL | libc::ENODEV | libc::ENETUNREACH)
    )
}

/// Sends all of `bufs` through `sys` (one `sendmmsg`: returns how many messages of the given
/// plans were accepted), continuing after partial acceptance.
///
/// * A sticky source refused ([`is_bad_source`]): the rest is retried once
///   without it, so the route chooses.
/// * EIO while GSO is on: GSO is switched off for good in `gso` (one log line), the rest is
///   resent without it and the result is [`ErrUdpGsoDisabled`] carrying the retry's outcome.
///   Messages the kernel had already accepted are not sent twice.
pub(super) fn send_all<F>(
    bufs: &[&[u8]],
    src: Option<PktInfo>,
    max_total: usize,
    gso: &AtomicBool,
    plans: &mut Vec<MsgPlan>,
    sent: &mut Sent,
    mut sys: F,
) -> io::Result<()>
where
    F: FnMut(Option<&PktInfo>, &[&[u8]], &[MsgPlan]) -> io::Result<usize>,
{
    let mut src = src;
    let mut use_gso = gso.load(Ordering::Relaxed);
    let mut first = 0usize;
    let mut gso_disabled = false;
    let result = loop {
        let rest = bufs.get(first..).unwrap_or_default();
        plan(rest, use_gso, max_total, plans);
        let err = match send_planned(rest, src.as_ref(), plans, sent, &mut sys) {
            Ok(()) => break Ok(()),
            Err((done_bufs, e)) => {
                first += done_bufs;
                e
            }
        };
        if src.is_some() && is_bad_source(&err) {
            src = None;
            continue;
        }
        if use_gso && err.raw_os_error() == Some(libc::EIO) {
            use_gso = false;
            gso_disabled = true;
            if gso.swap(false, Ordering::Relaxed) {
                tracing::warn!("UDP GSO failed with EIO (no checksum offload on the device?); disabled on this socket");
            }
            continue;
        }
        break Err(err);
    };
    if gso_disabled {
        return Err(ErrUdpGsoDisabled {
            retry: result.err(),
        }
        .into_io());
    }
    result
}

/// Pushes `plans` through `sys` until all are accepted; on error returns how many buffers
/// were accepted before it.
fn send_planned<F>(
    bufs: &[&[u8]],
    src: Option<&PktInfo>,
    plans: &[MsgPlan],
    sent: &mut Sent,
    sys: &mut F,
) -> Result<(), (usize, io::Error)>
where
    F: FnMut(Option<&PktInfo>, &[&[u8]], &[MsgPlan]) -> io::Result<usize>,
{
    let mut done = 0usize;
    let mut done_bufs = 0usize;
    while let Some(pending) = plans.get(done..).filter(|p| !p.is_empty()) {
        match sys(src, bufs, pending) {
            Ok(0) => return Err((done_bufs, io::Error::from(io::ErrorKind::WriteZero))),
            Ok(n) => {
                for p in pending.iter().take(n) {
                    done_bufs += p.count;
                    sent.datagrams += p.count;
                    sent.gso_messages += usize::from(p.count > 1);
                }
                done += n;
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err((done_bufs, e)),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plans_for(sizes: &[usize], gso: bool, max_total: usize) -> Vec<(usize, usize, u16)> {
        let data: Vec<Vec<u8>> = sizes.iter().map(|&n| vec![0; n]).collect();
        let refs: Vec<&[u8]> = data.iter().map(|d| d.as_slice()).collect();
        let mut out = Vec::new();
        plan(&refs, gso, max_total, &mut out);
        out.iter().map(|p| (p.start, p.count, p.gso_size)).collect()
    }

    #[test]
    fn coalesces_equal_runs_with_a_short_tail() {
        assert_eq!(
            plans_for(&[100, 100, 100, 40, 100], true, MAX_V4_PAYLOAD),
            [(0, 4, 100), (4, 1, 0)]
        );
        // Without GSO every datagram is its own message.
        assert_eq!(
            plans_for(&[100, 100], false, MAX_V4_PAYLOAD),
            [(0, 1, 0), (1, 1, 0)]
        );
        // A larger datagram starts a new run.
        assert_eq!(
            plans_for(&[100, 200, 200], true, MAX_V4_PAYLOAD),
            [(0, 1, 0), (1, 2, 200)]
        );
        // Empty datagrams are sent alone.
        assert_eq!(
            plans_for(&[10, 0, 10], true, MAX_V4_PAYLOAD),
            [(0, 1, 0), (1, 1, 0), (2, 1, 0)]
        );
    }

    #[test]
    fn respects_segment_and_size_limits() {
        let p = plans_for(&[10; 130], true, MAX_V4_PAYLOAD);
        assert_eq!(p, [(0, 64, 10), (64, 64, 10), (128, 2, 10)]);
        // 1500 × 43 = 64 500 fits IPv4, a 44th would not.
        let p = plans_for(&[1500; 50], true, MAX_V4_PAYLOAD);
        assert_eq!(p[0], (0, 43, 1500));
        let p = plans_for(&[1500; 50], true, MAX_V6_PAYLOAD);
        assert_eq!(p[0], (0, 43, 1500));
        let p = plans_for(&[65_000, 65_000], true, MAX_V6_PAYLOAD);
        assert_eq!(p, [(0, 1, 0), (1, 1, 0)]);
        for p in plans_for(&[1200; 128], true, MAX_V4_PAYLOAD) {
            assert!(p.1 <= MAX_GSO_SEGMENTS && p.1 * 1200 <= MAX_V4_PAYLOAD);
        }
    }

    fn run(
        sizes: &[usize],
        src: Option<PktInfo>,
        gso: &AtomicBool,
        sys: impl FnMut(Option<&PktInfo>, &[&[u8]], &[MsgPlan]) -> io::Result<usize>,
    ) -> (io::Result<()>, Sent) {
        let data: Vec<Vec<u8>> = sizes.iter().map(|&n| vec![0; n]).collect();
        let refs: Vec<&[u8]> = data.iter().map(|d| d.as_slice()).collect();
        let mut plans = Vec::new();
        let mut sent = Sent::default();
        let r = send_all(&refs, src, MAX_V4_PAYLOAD, gso, &mut plans, &mut sent, sys);
        (r, sent)
    }

    #[test]
    fn partial_acceptance_continues() {
        let gso = AtomicBool::new(false);
        let mut calls = 0;
        let (r, sent) = run(&[10; 5], None, &gso, |_, _, plans| {
            calls += 1;
            Ok(plans.len().min(2))
        });
        r.unwrap();
        assert_eq!(calls, 3);
        assert_eq!(
            sent,
            Sent {
                datagrams: 5,
                gso_messages: 0
            }
        );
    }

    #[test]
    fn eio_disables_gso_and_resends_only_the_rest() {
        let gso = AtomicBool::new(true);
        let mut log = Vec::new();
        // 70 equal datagrams: message 0 (64 segments) accepted, message 1 (6) fails with EIO.
        let (r, sent) = run(&[100; 70], None, &gso, |_, bufs, plans| {
            log.push((bufs.len(), plans.len(), plans[0].count));
            if plans[0].count > 1 && log.len() > 1 {
                return Err(io::Error::from_raw_os_error(libc::EIO));
            }
            Ok(1)
        });
        let e = r.unwrap_err();
        assert!(
            matches!(ErrUdpGsoDisabled::retry_outcome(&e), Some(None)),
            "{e}"
        );
        assert!(!gso.load(Ordering::Relaxed));
        assert_eq!(
            sent,
            Sent {
                datagrams: 70,
                gso_messages: 1
            }
        );
        // The retry covers only the 6 datagrams not yet accepted, one per message.
        assert_eq!(log[0], (70, 2, 64));
        assert_eq!(log[1], (70, 1, 6));
        assert_eq!(
            &log[2..],
            &[
                (6, 6, 1),
                (6, 5, 1),
                (6, 4, 1),
                (6, 3, 1),
                (6, 2, 1),
                (6, 1, 1)
            ]
        );
    }

    #[test]
    fn eio_retry_failure_is_carried() {
        let gso = AtomicBool::new(true);
        let (r, _) = run(&[100; 3], None, &gso, |_, _, plans| {
            if plans[0].count > 1 {
                Err(io::Error::from_raw_os_error(libc::EIO))
            } else {
                Err(io::Error::from_raw_os_error(libc::ENOBUFS))
            }
        });
        let e = r.unwrap_err();
        let retry = ErrUdpGsoDisabled::retry_outcome(&e).expect("gso disabled error");
        assert_eq!(retry.and_then(|e| e.raw_os_error()), Some(libc::ENOBUFS));
    }

    #[test]
    fn eio_without_gso_is_a_plain_error() {
        let gso = AtomicBool::new(false);
        let (r, _) = run(&[100; 3], None, &gso, |_, _, _| {
            Err(io::Error::from_raw_os_error(libc::EIO))
        });
        let e = r.unwrap_err();
        assert!(ErrUdpGsoDisabled::retry_outcome(&e).is_none());
        assert_eq!(e.raw_os_error(), Some(libc::EIO));
    }

    #[test]
    fn stale_source_is_retried_once_without_it() {
        let gso = AtomicBool::new(false);
        let src = PktInfo {
            addr: "198.18.0.99".parse().unwrap(),
            ifindex: 0,
        };
        let mut seen = Vec::new();
        let (r, sent) = run(&[10; 3], Some(src), &gso, |s, _, plans| {
            seen.push(s.is_some());
            if s.is_some() {
                Err(io::Error::from_raw_os_error(libc::EADDRNOTAVAIL))
            } else {
                Ok(plans.len())
            }
        });
        r.unwrap();
        assert_eq!(seen, [true, false]);
        assert_eq!(sent.datagrams, 3);

        // Without a source the same error is returned, not retried.
        let mut calls = 0;
        let (r, _) = run(&[10; 3], None, &gso, |_, _, _| {
            calls += 1;
            Err(io::Error::from_raw_os_error(libc::EINVAL))
        });
        assert_eq!(r.unwrap_err().raw_os_error(), Some(libc::EINVAL));
        assert_eq!(calls, 1);
    }

    #[test]
    fn interrupted_is_retried_and_zero_progress_is_an_error() {
        let gso = AtomicBool::new(false);
        let mut calls = 0;
        let (r, _) = run(&[10; 2], None, &gso, |_, _, plans| {
            calls += 1;
            if calls == 1 {
                Err(io::Error::from(io::ErrorKind::Interrupted))
            } else {
                Ok(plans.len())
            }
        });
        r.unwrap();
        let (r, _) = run(&[10; 2], None, &gso, |_, _, _| Ok(0));
        assert_eq!(r.unwrap_err().kind(), io::ErrorKind::WriteZero);
    }
}
