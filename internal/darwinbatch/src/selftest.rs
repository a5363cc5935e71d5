//! The self-tests' send-receive-compare logic, portable so it runs against the simulated
//! kernel on any host. On Apple targets [`crate::supported`] and
//! [`crate::unconnected_supported`] run it once per process on loopback sockets.

use std::net::SocketAddr;
use std::os::fd::RawFd;

use crate::{Kernel, RecvBatch, SendBatch};

/// Datagrams per self-test.
const PROBES: usize = 4;
/// Receive slots are larger than any probe, so a correct kernel never truncates one.
const SLOT: usize = 256;

/// Probe `i`: a distinct length and content, so a reordered, truncated, merged or lost
/// datagram cannot compare equal.
fn probe(i: usize) -> Vec<u8> {
    (0..40 + 13 * i)
        .map(|j| (j as u8).wrapping_mul(7) ^ (0xa5 + i as u8))
        .collect()
}

/// A received datagram and its reported source.
type Received = (Vec<u8>, Option<SocketAddr>);

/// Sends `bufs` with as many `sendmsg_x` calls as partial accepts need (a kernel that accepts
/// none fails the test rather than looping).
fn send_all(
    k: &dyn Kernel,
    fd: RawFd,
    bufs: &[&[u8]],
    dsts: Option<&[SocketAddr]>,
) -> Result<(), String> {
    let mut st = SendBatch::new(bufs.len());
    let mut done = 0;
    while done < bufs.len() {
        let d = dsts.map(|d| &d[done..]);
        match st.send_with(k, fd, &bufs[done..], d) {
            Ok(0) => return Err(format!("sendmsg_x accepted 0 of {}", bufs.len() - done)),
            Ok(n) => done += n,
            Err(e) => return Err(format!("sendmsg_x: {e}")),
        }
    }
    Ok(())
}

/// Receives `want` datagrams on `fd` with `recvmsg_x` (several calls if the kernel hands them
/// out in parts): payloads and, when `names`, sources.
fn recv_n(k: &dyn Kernel, fd: RawFd, want: usize, names: bool) -> Result<Vec<Received>, String> {
    let mut st = RecvBatch::new(want, names);
    let mut slab = vec![0u8; SLOT * want];
    let mut out = Vec::new();
    // Each call returns at least one datagram or an error, so `want` calls suffice.
    for _ in 0..want {
        if out.len() == want {
            break;
        }
        let left = want - out.len();
        let mut bufs: Vec<&mut [u8]> = slab.chunks_mut(SLOT).take(left).collect();
        let mut sizes = vec![0; left];
        let mut srcs = vec![None; left];
        let got = st
            .recv_with(k, fd, &mut bufs, &mut sizes, names.then_some(&mut srcs[..]))
            .map_err(|e| format!("recvmsg_x after {} of {want}: {e}", out.len()))?;
        if got == 0 {
            break;
        }
        for i in 0..got {
            out.push((bufs[i][..sizes[i]].to_vec(), srcs[i]));
        }
    }
    if out.len() != want {
        return Err(format!("received {} of {want} datagrams", out.len()));
    }
    Ok(out)
}

fn compare(got: &[u8], want: &[u8], what: &str) -> Result<(), String> {
    if got == want {
        Ok(())
    } else {
        Err(format!(
            "{what}: got {} bytes, want {} (reordered, truncated or corrupted)",
            got.len(),
            want.len()
        ))
    }
}

/// The connected self-test: 4 datagrams in one `sendmsg_x` from `a` to its connected peer
/// `b`, read back with `recvmsg_x` on `b`, compared in order, length and content.
pub fn check_connected(k: &dyn Kernel, a: RawFd, b: RawFd) -> Result<(), String> {
    let probes: Vec<Vec<u8>> = (0..PROBES).map(probe).collect();
    let bufs: Vec<&[u8]> = probes.iter().map(|p| &p[..]).collect();
    send_all(k, a, &bufs, None)?;
    let got = recv_n(k, b, PROBES, false)?;
    for (i, (g, _)) in got.iter().enumerate() {
        compare(g, &probes[i], &format!("datagram {i}"))?;
    }
    Ok(())
}

/// The unconnected self-test: 4 datagrams in one `sendmsg_x` from the unconnected `sender`,
/// destinations alternating between the two receivers; each receiver must get its two in order
/// with the sender's address as their source.
pub fn check_unconnected(
    k: &dyn Kernel,
    sender: (RawFd, SocketAddr),
    receivers: [(RawFd, SocketAddr); 2],
) -> Result<(), String> {
    let probes: Vec<Vec<u8>> = (0..PROBES).map(probe).collect();
    let bufs: Vec<&[u8]> = probes.iter().map(|p| &p[..]).collect();
    let dsts: Vec<SocketAddr> = (0..PROBES).map(|i| receivers[i % 2].1).collect();
    send_all(k, sender.0, &bufs, Some(&dsts))?;
    for (r, (fd, _)) in receivers.iter().enumerate() {
        let got = recv_n(k, *fd, PROBES / 2, true)?;
        for (j, (g, src)) in got.iter().enumerate() {
            let i = r + 2 * j;
            compare(g, &probes[i], &format!("datagram {i} at receiver {r}"))?;
            if *src != Some(sender.1) {
                return Err(format!(
                    "datagram {i}: source reported as {src:?}, sent from {}",
                    sender.1
                ));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::{Fault, SimKernel};

    fn connected_pair(k: &SimKernel) -> (RawFd, RawFd) {
        let (a_addr, b_addr) = (
            "127.0.0.1:3001".parse().unwrap(),
            "127.0.0.1:3002".parse().unwrap(),
        );
        let (a, b) = (k.udp_socket(a_addr), k.udp_socket(b_addr));
        k.connect(a, b_addr);
        k.connect(b, a_addr);
        (a, b)
    }

    fn connected_with(fault: Option<Fault>) -> Result<(), String> {
        let k = SimKernel::new();
        k.set_fault(fault);
        let (a, b) = connected_pair(&k);
        check_connected(&k, a, b)
    }

    fn unconnected_with(fault: Option<Fault>) -> Result<(), String> {
        let k = SimKernel::new();
        k.set_fault(fault);
        let s_addr: SocketAddr = "127.0.0.1:4000".parse().unwrap();
        let r: [SocketAddr; 2] = [
            "127.0.0.1:4001".parse().unwrap(),
            "[::1]:4002".parse().unwrap(),
        ];
        let s = k.udp_socket(s_addr);
        let (r0, r1) = (k.udp_socket(r[0]), k.udp_socket(r[1]));
        check_unconnected(&k, (s, s_addr), [(r0, r[0]), (r1, r[1])])
    }

    #[test]
    fn probes_differ_in_length_and_content() {
        for i in 0..PROBES {
            for j in 0..i {
                assert_ne!(probe(i).len(), probe(j).len());
                assert_ne!(probe(i)[..probe(j).len()], probe(j)[..]);
            }
        }
    }

    #[test]
    fn connected_self_test_passes_on_a_faithful_kernel() {
        connected_with(None).unwrap();
    }

    #[test]
    fn connected_self_test_fails_when_the_kernel_reorders() {
        assert!(connected_with(Some(Fault::Reorder)).is_err());
    }

    #[test]
    fn connected_self_test_fails_when_the_kernel_truncates() {
        assert!(connected_with(Some(Fault::Truncate)).is_err());
    }

    #[test]
    fn connected_self_test_fails_when_the_kernel_drops() {
        let e = connected_with(Some(Fault::Drop)).unwrap_err();
        assert!(e.contains("3 of 4"), "{e}");
    }

    #[test]
    fn connected_self_test_resumes_after_partial_accepts() {
        let k = SimKernel::new();
        let (a, b) = connected_pair(&k);
        k.limit_accepts(a, &[1, 2]);
        check_connected(&k, a, b).unwrap();
        assert_eq!(k.stats(a).sendmsg_x, 3);
    }

    #[test]
    fn connected_self_test_fails_when_the_kernel_accepts_nothing() {
        let k = SimKernel::new();
        let (a, b) = connected_pair(&k);
        k.limit_accepts(a, &[0]);
        let e = check_connected(&k, a, b).unwrap_err();
        assert!(e.contains("accepted 0"), "{e}");
    }

    #[test]
    fn connected_self_test_fails_when_the_receive_fails() {
        let k = SimKernel::new();
        let (a, b) = connected_pair(&k);
        k.fail_next(b, &[libc::EINVAL]);
        assert!(check_connected(&k, a, b).is_err());
    }

    #[test]
    fn unconnected_self_test_passes_on_a_faithful_kernel() {
        unconnected_with(None).unwrap();
    }

    #[test]
    fn unconnected_self_test_fails_when_destinations_are_ignored() {
        assert!(unconnected_with(Some(Fault::IgnoreDestinations)).is_err());
    }

    #[test]
    fn unconnected_self_test_fails_when_sources_are_not_reported() {
        let e = unconnected_with(Some(Fault::NoSources)).unwrap_err();
        assert!(e.contains("source"), "{e}");
    }

    #[test]
    fn unconnected_self_test_fails_when_the_kernel_reorders() {
        assert!(unconnected_with(Some(Fault::Reorder)).is_err());
    }
}
