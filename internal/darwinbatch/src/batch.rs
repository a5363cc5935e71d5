//! The batch states: reusable header, iovec and name arrays for one `recvmsg_x` or
//! `sendmsg_x` at a time.
//!
//! Every call stages its headers afresh from the caller's buffers: each iovec length and
//! `msg_datalen` restored to the slot's size and `msg_flags` cleared. darwin writes the received
//! length into the iovec, the datagram's length into `msg_datalen` and sets MSG_TRUNC on a
//! datagram that did not fit; a header left that way makes the next call fail with EINVAL (and
//! a shrunken iovec would cut the next datagram). After the call the pointers are cleared, so a
//! state never holds references to a caller's buffers between calls.

use std::io;
use std::net::SocketAddr;
use std::os::fd::RawFd;
use std::ptr;

use crate::msghdr::{IoVec, MsgHdrX};
use crate::sockaddr::{self, NameBuf};
use crate::Kernel;

/// Calls `f` until it returns something other than EINTR.
fn retry_eintr<T>(mut f: impl FnMut() -> io::Result<T>) -> io::Result<T> {
    loop {
        match f() {
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            r => return r,
        }
    }
}

/// Reusable arrays for batched receives (`recvmsg_x`).
pub struct RecvBatch {
    hdrs: Vec<MsgHdrX>,
    iovs: Vec<IoVec>,
    names: Vec<NameBuf>,
    record_names: bool,
}

// SAFETY: the raw pointers in `hdrs`/`iovs` are set only for the duration of one call on
// `&mut self` and reset to null before it returns, so a state holds no references between calls
// and moving it to another thread moves plain data.
unsafe impl Send for RecvBatch {}

impl RecvBatch {
    /// A state for up to `capacity` datagrams per call (at least one), recording each
    /// datagram's source address when `record_names` (unconnected sockets).
    pub fn new(capacity: usize, record_names: bool) -> RecvBatch {
        let capacity = capacity.max(1);
        RecvBatch {
            hdrs: (0..capacity).map(|_| MsgHdrX::EMPTY).collect(),
            iovs: vec![IoVec::EMPTY; capacity],
            names: if record_names {
                vec![NameBuf::default(); capacity]
            } else {
                Vec::new()
            },
            record_names,
        }
    }

    /// The most datagrams one call receives.
    pub fn capacity(&self) -> usize {
        self.hdrs.len()
    }

    /// One `recvmsg_x` on the system's kernel: datagram `i` into `bufs[i]`, its length
    /// (`min(datalen, slot)`) into `sizes[i]`, its source into `names[i]` when this state records
    /// names. Returns how many datagrams arrived. EAGAIN comes back as
    /// [`io::ErrorKind::WouldBlock`] for the caller to wait; EINTR is retried. Off Apple targets
    /// (and without the `spi` feature) it fails with [`io::ErrorKind::Unsupported`].
    pub fn recv(
        &mut self,
        fd: std::os::fd::BorrowedFd<'_>,
        bufs: &mut [&mut [u8]],
        sizes: &mut [usize],
        names: Option<&mut [Option<SocketAddr>]>,
    ) -> io::Result<usize> {
        #[cfg(target_vendor = "apple")]
        {
            use std::os::fd::AsRawFd;
            self.recv_with(crate::system(), fd.as_raw_fd(), bufs, sizes, names)
        }
        #[cfg(not(target_vendor = "apple"))]
        {
            let _ = (fd, bufs, sizes, names);
            Err(crate::unsupported())
        }
    }

    /// [`recv`](Self::recv) through the kernel `k` (the system's or a simulated one).
    pub fn recv_with(
        &mut self,
        k: &dyn Kernel,
        fd: RawFd,
        bufs: &mut [&mut [u8]],
        sizes: &mut [usize],
        mut names: Option<&mut [Option<SocketAddr>]>,
    ) -> io::Result<usize> {
        let mut n = bufs.len().min(sizes.len()).min(self.capacity());
        if let Some(names) = names.as_deref() {
            n = n.min(names.len());
        }
        if n == 0 {
            return Ok(0);
        }
        let got = retry_eintr(|| {
            self.stage_recv(bufs, n);
            // SAFETY: stage_recv pointed the first `n` headers at this state's own iovecs and
            // name buffers and the iovecs at `bufs[..n]` with their lengths; all of them are
            // borrowed mutably for this call and outlive it.
            unsafe { k.recvmsg_x(fd, &mut self.hdrs[..n], 0) }
        });
        let got = got.map(|c| c.min(n));
        if let Ok(c) = got {
            for i in 0..c {
                sizes[i] = self.hdrs[i].datalen.min(bufs[i].len());
                if let Some(names) = names.as_deref_mut() {
                    names[i] = if self.record_names {
                        sockaddr::decode(&self.names[i].0, self.hdrs[i].namelen as usize)
                    } else {
                        None
                    };
                }
            }
        }
        self.reset(n);
        got
    }

    /// Points header `i < n` at `bufs[i]` (full length) and name buffer `i`, with `datalen`
    /// restored and `flags` cleared.
    fn stage_recv(&mut self, bufs: &mut [&mut [u8]], n: usize) {
        let iovs = self.iovs.as_mut_ptr();
        for (i, b) in bufs.iter_mut().take(n).enumerate() {
            self.iovs[i] = IoVec {
                base: b.as_mut_ptr(),
                len: b.len(),
            };
            let h = &mut self.hdrs[i];
            *h = MsgHdrX::EMPTY;
            // wrapping_add: plain pointer arithmetic inside the iovec array (i < n <= len).
            h.iov = iovs.wrapping_add(i);
            h.iovlen = 1;
            h.datalen = b.len();
            if self.record_names {
                let name = &mut self.names[i];
                h.name = name.0.as_mut_ptr().cast();
                h.namelen = name.0.len() as u32;
            }
        }
    }

    /// Drops every reference to the last call's buffers.
    fn reset(&mut self, n: usize) {
        for h in &mut self.hdrs[..n] {
            h.name = ptr::null_mut();
            h.iov = ptr::null_mut();
        }
        for v in &mut self.iovs[..n] {
            *v = IoVec::EMPTY;
        }
    }
}

/// Reusable arrays for batched sends (`sendmsg_x`).
pub struct SendBatch {
    hdrs: Vec<MsgHdrX>,
    iovs: Vec<IoVec>,
    names: Vec<NameBuf>,
}

// SAFETY: as for RecvBatch: the pointers live only for one call on `&mut self`.
unsafe impl Send for SendBatch {}

impl SendBatch {
    /// A state for up to `capacity` datagrams per call (at least one).
    pub fn new(capacity: usize) -> SendBatch {
        let capacity = capacity.max(1);
        SendBatch {
            hdrs: (0..capacity).map(|_| MsgHdrX::EMPTY).collect(),
            iovs: vec![IoVec::EMPTY; capacity],
            names: vec![NameBuf::default(); capacity],
        }
    }

    /// The most datagrams one call sends.
    pub fn capacity(&self) -> usize {
        self.hdrs.len()
    }

    /// One `sendmsg_x` of `bufs` (at most [`capacity`](Self::capacity) of them) on the
    /// system's kernel, datagram `i` to `dsts[i]` when given (unconnected sockets). Returns how
    /// many the kernel accepted: possibly fewer than staged, even 0. EAGAIN comes back as
    /// [`io::ErrorKind::WouldBlock`]; EINTR is retried. Off Apple targets (and without the `spi`
    /// feature) it fails with [`io::ErrorKind::Unsupported`].
    pub fn send(
        &mut self,
        fd: std::os::fd::BorrowedFd<'_>,
        bufs: &[&[u8]],
        dsts: Option<&[SocketAddr]>,
    ) -> io::Result<usize> {
        #[cfg(target_vendor = "apple")]
        {
            use std::os::fd::AsRawFd;
            self.send_with(crate::system(), fd.as_raw_fd(), bufs, dsts)
        }
        #[cfg(not(target_vendor = "apple"))]
        {
            let _ = (fd, bufs, dsts);
            Err(crate::unsupported())
        }
    }

    /// [`send`](Self::send) through the kernel `k`.
    pub fn send_with(
        &mut self,
        k: &dyn Kernel,
        fd: RawFd,
        bufs: &[&[u8]],
        dsts: Option<&[SocketAddr]>,
    ) -> io::Result<usize> {
        let mut n = bufs.len().min(self.capacity());
        if let Some(d) = dsts {
            n = n.min(d.len());
        }
        if n == 0 {
            return Ok(0);
        }
        let sent = retry_eintr(|| {
            self.stage_send(bufs, dsts, n);
            // SAFETY: the first `n` headers point at this state's iovecs and names and the
            // iovecs at `bufs[..n]` (the kernel only reads them for a send); all outlive the call.
            unsafe { k.sendmsg_x(fd, &self.hdrs[..n], 0) }
        })
        .map(|c| c.min(n));
        for h in &mut self.hdrs[..n] {
            h.name = ptr::null_mut();
            h.iov = ptr::null_mut();
        }
        for v in &mut self.iovs[..n] {
            *v = IoVec::EMPTY;
        }
        sent
    }

    fn stage_send(&mut self, bufs: &[&[u8]], dsts: Option<&[SocketAddr]>, n: usize) {
        let iovs = self.iovs.as_mut_ptr();
        for (i, b) in bufs.iter().take(n).enumerate() {
            // The kernel only reads through a send iovec; `*mut` is the C type's.
            self.iovs[i] = IoVec {
                base: b.as_ptr().cast_mut(),
                len: b.len(),
            };
            let h = &mut self.hdrs[i];
            *h = MsgHdrX::EMPTY;
            h.iov = iovs.wrapping_add(i);
            h.iovlen = 1;
            h.datalen = b.len();
            if let Some(d) = dsts {
                let name = &mut self.names[i];
                h.namelen = sockaddr::encode(&d[i], name) as u32;
                h.name = name.0.as_mut_ptr().cast();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::SimKernel;
    use crate::{MSG_TRUNC, SYSPROTO_CONTROL, UTUN_OPT_MAX_PENDING_PACKETS};

    fn addr(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    /// A connected pair of simulated UDP sockets.
    fn pair(k: &SimKernel) -> (RawFd, RawFd) {
        let (a_addr, b_addr) = (addr("127.0.0.1:1001"), addr("127.0.0.1:1002"));
        let (a, b) = (k.udp_socket(a_addr), k.udp_socket(b_addr));
        k.connect(a, b_addr);
        k.connect(b, a_addr);
        (a, b)
    }

    fn send(k: &SimKernel, fd: RawFd, datagrams: &[&[u8]]) {
        let n = SendBatch::new(8).send_with(k, fd, datagrams, None).unwrap();
        assert_eq!(n, datagrams.len());
    }

    /// Receives into `slots` slots of `slot` bytes; the datagrams received.
    fn recv(
        k: &SimKernel,
        st: &mut RecvBatch,
        fd: RawFd,
        slots: usize,
        slot: usize,
    ) -> io::Result<Vec<Vec<u8>>> {
        let mut slab = vec![0u8; slots * slot];
        let mut bufs: Vec<&mut [u8]> = slab.chunks_mut(slot).collect();
        let mut sizes = vec![0; slots];
        let n = st.recv_with(k, fd, &mut bufs, &mut sizes, None)?;
        Ok((0..n).map(|i| bufs[i][..sizes[i]].to_vec()).collect())
    }

    #[test]
    fn received_length_is_the_smaller_of_datalen_and_slot() {
        let k = SimKernel::new();
        let (a, b) = pair(&k);
        send(&k, a, &[&[1; 300], &[2; 50]]);
        let got = recv(&k, &mut RecvBatch::new(4, false), b, 2, 100).unwrap();
        assert_eq!(got, vec![vec![1; 100], vec![2; 50]]);
    }

    #[test]
    fn receive_after_a_truncated_datagram_restores_lengths_and_clears_flags() {
        let k = SimKernel::new();
        let (a, b) = pair(&k);
        let mut st = RecvBatch::new(4, false);
        send(&k, a, &[&[1; 300]]);
        assert_eq!(recv(&k, &mut st, b, 1, 100).unwrap(), vec![vec![1; 100]]);
        // The kernel left MSG_TRUNC in the header; the next receive then shrinks the iovec to
        // 40 bytes. Both must be undone before each call, or it fails (EINVAL) or cuts the
        // datagram.
        send(&k, a, &[&[2; 40]]);
        assert_eq!(recv(&k, &mut st, b, 1, 100).unwrap(), vec![vec![2; 40]]);
        send(&k, a, &[&[3; 100]]);
        assert_eq!(recv(&k, &mut st, b, 1, 100).unwrap(), vec![vec![3; 100]]);
        assert_eq!(k.stats(b).sticky_trunc_einval, 0);
    }

    #[test]
    fn sim_fails_with_einval_while_a_header_carries_msg_trunc() {
        let k = SimKernel::new();
        let (a, b) = pair(&k);
        send(&k, a, &[&[1; 10]]);
        let mut buf = [0u8; 16];
        let mut iov = IoVec {
            base: buf.as_mut_ptr(),
            len: buf.len(),
        };
        let mut h = MsgHdrX::EMPTY;
        h.iov = &mut iov;
        h.iovlen = 1;
        h.flags = MSG_TRUNC;
        // SAFETY: the header points at `iov`, which covers `buf`; both outlive the call.
        let r = unsafe { k.recvmsg_x(b, std::slice::from_mut(&mut h), 0) };
        assert_eq!(r.unwrap_err().raw_os_error(), Some(libc::EINVAL));
        h.flags = 0;
        // SAFETY: as above.
        let r = unsafe { k.recvmsg_x(b, std::slice::from_mut(&mut h), 0) };
        assert_eq!(r.unwrap(), 1);
        assert_eq!(h.datalen(), 10);
    }

    #[test]
    fn eagain_is_returned_as_would_block() {
        let k = SimKernel::new();
        let (_, b) = pair(&k);
        let err = recv(&k, &mut RecvBatch::new(4, false), b, 4, 64).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::WouldBlock);
        let (a, _) = pair(&k);
        k.fail_next(a, &[libc::EAGAIN]);
        let err = SendBatch::new(4).send_with(&k, a, &[&[0; 8]], None);
        assert_eq!(err.unwrap_err().kind(), io::ErrorKind::WouldBlock);
    }

    #[test]
    fn eintr_is_retried_on_receive_and_send() {
        let k = SimKernel::new();
        let (a, b) = pair(&k);
        k.fail_next(a, &[libc::EINTR, libc::EINTR]);
        send(&k, a, &[&[7; 20], &[8; 21]]);
        assert_eq!(k.stats(a).sendmsg_x, 3);
        k.fail_next(b, &[libc::EINTR]);
        let got = recv(&k, &mut RecvBatch::new(4, false), b, 4, 64).unwrap();
        assert_eq!(got, vec![vec![7; 20], vec![8; 21]]);
        assert_eq!(k.stats(b).recvmsg_x, 2);
    }

    #[test]
    fn send_returns_partial_accepts_including_zero() {
        let k = SimKernel::new();
        let (a, b) = pair(&k);
        k.limit_accepts(a, &[2, 0]);
        let mut st = SendBatch::new(8);
        let d: [&[u8]; 4] = [&[1], &[2], &[3], &[4]];
        assert_eq!(st.send_with(&k, a, &d, None).unwrap(), 2);
        assert_eq!(st.send_with(&k, a, &d[2..], None).unwrap(), 0);
        assert_eq!(st.send_with(&k, a, &d[2..], None).unwrap(), 2);
        let got = recv(&k, &mut RecvBatch::new(8, false), b, 8, 8).unwrap();
        assert_eq!(got, vec![vec![1], vec![2], vec![3], vec![4]]);
    }

    #[test]
    fn send_stages_per_datagram_destinations_and_recv_reports_sources() {
        let k = SimKernel::new();
        let (s_addr, r0_addr, r1_addr) = (
            addr("127.0.0.1:2000"),
            addr("127.0.0.1:2001"),
            addr("[::1]:2002"),
        );
        let s = k.udp_socket(s_addr);
        let (r0, r1) = (k.udp_socket(r0_addr), k.udp_socket(r1_addr));
        let d: [&[u8]; 3] = [&[1], &[2], &[3]];
        let n = SendBatch::new(4)
            .send_with(&k, s, &d, Some(&[r0_addr, r1_addr, r0_addr]))
            .unwrap();
        assert_eq!(n, 3);
        let mut st = RecvBatch::new(4, true);
        let mut slab = [0u8; 64];
        let mut bufs: Vec<&mut [u8]> = slab.chunks_mut(16).collect();
        let mut sizes = [0; 4];
        let mut names = [None; 4];
        let n = st
            .recv_with(&k, r0, &mut bufs, &mut sizes, Some(&mut names))
            .unwrap();
        assert_eq!(n, 2);
        assert_eq!(
            (&bufs[0][..sizes[0]], &bufs[1][..sizes[1]]),
            (&[1u8][..], &[3u8][..])
        );
        assert_eq!(names[..2], [Some(s_addr), Some(s_addr)]);
        assert_eq!(k.pending(r1), 1);
    }

    #[test]
    fn recv_without_recorded_names_reports_none() {
        let k = SimKernel::new();
        let (a, b) = pair(&k);
        send(&k, a, &[&[1; 4]]);
        let mut buf = [0u8; 8];
        let mut names = [Some(addr("1.1.1.1:1"))];
        let n = RecvBatch::new(2, false)
            .recv_with(&k, b, &mut [&mut buf[..]], &mut [0], Some(&mut names))
            .unwrap();
        assert_eq!((n, names[0]), (1, None));
    }

    #[test]
    fn a_call_moves_at_most_capacity_datagrams() {
        let k = SimKernel::new();
        let (a, b) = pair(&k);
        let d: [&[u8]; 5] = [&[1], &[2], &[3], &[4], &[5]];
        assert_eq!(SendBatch::new(3).send_with(&k, a, &d, None).unwrap(), 3);
        let got = recv(&k, &mut RecvBatch::new(2, false), b, 8, 8).unwrap();
        assert_eq!(got.len(), 2);
    }

    #[test]
    fn utun_receive_returns_at_most_the_pending_queue_limit() {
        let k = SimKernel::new();
        let t = k.utun();
        for i in 0..5u8 {
            k.inject_packet(t, &[0x45, i]);
        }
        let mut st = RecvBatch::new(8, false);
        let got = recv(&k, &mut st, t, 8, 64).unwrap();
        assert_eq!(
            got,
            vec![vec![0, 0, 0, 2, 0x45, 0]],
            "kernel default: one per call"
        );
        k.set_option(t, SYSPROTO_CONTROL, UTUN_OPT_MAX_PENDING_PACKETS, 512)
            .unwrap();
        assert_eq!(recv(&k, &mut st, t, 8, 64).unwrap().len(), 4);
    }

    #[test]
    fn states_hold_no_buffer_references_between_calls() {
        let k = SimKernel::new();
        let (a, b) = pair(&k);
        let mut s = SendBatch::new(4);
        s.send_with(&k, a, &[&[1; 3]], Some(&[addr("127.0.0.1:1002")]))
            .unwrap();
        assert!(s.hdrs.iter().all(|h| h.iov.is_null() && h.name.is_null()));
        assert!(s.iovs.iter().all(|v| v.base.is_null()));
        let mut r = RecvBatch::new(4, true);
        let mut buf = [0u8; 8];
        r.recv_with(&k, b, &mut [&mut buf[..]], &mut [0], None)
            .unwrap();
        assert!(r.hdrs.iter().all(|h| h.iov.is_null() && h.name.is_null()));
        assert!(r.iovs.iter().all(|v| v.base.is_null()));
    }
}
