//! Batched datagram I/O: `recvmmsg` and `sendmmsg` with per-message addresses and control
//! messages.
//!
//! [`RecvBatch`] and [`SendBatch`] own the kernel-facing arrays (message headers, iovecs,
//! address and control buffers), allocated once for a maximum batch size and reused by every
//! call, so the data path does not allocate. The raw pointers inside those arrays are
//! rewritten at the start of every call and point only into the call's arguments and the
//! batch's own buffers.

use std::io;
use std::mem::size_of;
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::ptr;

use crate::cmsg::{self, CmsgBuf, PktInfo, CMSG_BUF_LEN};
use crate::sockaddr::from_storage;

/// What the kernel reported for one received datagram.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RecvMeta {
    /// Bytes written to the buffer (at most its length).
    pub len: usize,
    /// The datagram did not fit its buffer and was cut (`MSG_TRUNC`).
    pub truncated: bool,
    /// The sender's address.
    pub addr: Option<SocketAddr>,
    /// The local address and interface it arrived on, when packet info is enabled.
    pub pktinfo: Option<PktInfo>,
    /// GRO segment size when the kernel coalesced several datagrams into this one; else 0.
    pub gro_size: u16,
}

fn zeroed_mmsghdr() -> libc::mmsghdr {
    // SAFETY: all-zero is a valid `mmsghdr`: null pointers, zero lengths and flags.
    unsafe { std::mem::zeroed() }
}

fn zeroed_msghdr() -> libc::msghdr {
    // SAFETY: all-zero is a valid `msghdr`: null pointers, zero lengths and flags.
    unsafe { std::mem::zeroed() }
}

/// One datagram to `dst` with `sendmsg(2)`, `src` as the sticky source when given. Header,
/// address and control message live on the stack: a lone packet on an idle tunnel would
/// otherwise touch a batch's worth of header arrays, each cold memory.
pub fn send_one(
    fd: BorrowedFd<'_>,
    dst: &SocketAddr,
    src: Option<&PktInfo>,
    buf: &[u8],
) -> io::Result<usize> {
    let name = socket2::SockAddr::from(*dst);
    let mut ctrl = CmsgBuf::new();
    let clen = {
        let mut w = ctrl.writer();
        if let Some(s) = src {
            w.pktinfo(s)
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
        }
        w.len()
    };
    // The kernel only reads through a send iovec; the `*mut` is the C type's.
    let mut iov = libc::iovec {
        iov_base: buf.as_ptr() as *mut libc::c_void,
        iov_len: buf.len(),
    };
    let mut h = zeroed_msghdr();
    h.msg_name = name.as_ptr() as *mut libc::c_void;
    h.msg_namelen = name.len();
    h.msg_iov = &mut iov;
    h.msg_iovlen = 1;
    if clen > 0 {
        h.msg_control = ctrl.as_mut_ptr();
        h.msg_controllen = clen as _;
    }
    // SAFETY: `h` points to the address in `name` (length from socket2), to one iovec covering
    // the borrowed `buf` (read-only for sendmsg) and to `clen` written bytes of `ctrl`; all
    // live until the call returns, and nothing is retained after it.
    let r = unsafe { libc::sendmsg(fd.as_raw_fd(), &h, 0) };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(r as usize)
}

fn zeroed_iovec() -> libc::iovec {
    libc::iovec {
        iov_base: ptr::null_mut(),
        iov_len: 0,
    }
}

/// Reusable state for `recvmmsg`.
pub struct RecvBatch {
    /// `recvmmsg` takes the headers as one array.
    hdrs: Vec<libc::mmsghdr>,
    /// Everything else a datagram's header points to, side by side: a lone datagram on an idle
    /// tunnel then finds its iovec, address and control message in one cold page, not three.
    slots: Vec<RecvSlot>,
    /// The iovecs of [`recv_scattered`](Self::recv_scattered): one run of `stride` per datagram,
    /// grown on first use.
    scatter: Vec<libc::iovec>,
}

/// The buffers one received datagram's header points to, starting a cache line so that a lone
/// datagram's touch the fewest lines.
#[repr(align(64))]
struct RecvSlot {
    iov: libc::iovec,
    name: libc::sockaddr_storage,
    ctrl: CmsgBuf,
}

// SAFETY: the raw pointers in `hdrs`, `slots` and `scatter` are only written and handed to
// the kernel inside the receive calls, which overwrite every one they use before the syscall; they are never
// dereferenced by this code, so moving the batch to another thread cannot make it touch
// memory it does not own.
unsafe impl Send for RecvBatch {}

impl RecvBatch {
    /// Room for up to `max` datagrams per call.
    pub fn new(max: usize) -> Self {
        RecvBatch {
            hdrs: (0..max).map(|_| zeroed_mmsghdr()).collect(),
            slots: (0..max)
                .map(|_| RecvSlot {
                    iov: zeroed_iovec(),
                    // SAFETY: all-zero is a valid `sockaddr_storage` (AF_UNSPEC).
                    name: unsafe { std::mem::zeroed() },
                    ctrl: CmsgBuf::new(),
                })
                .collect(),
            scatter: Vec::new(),
        }
    }

    /// The largest batch one call reads.
    pub fn capacity(&self) -> usize {
        self.hdrs.len()
    }

    /// Blocks until at least one datagram arrives, then reads up to
    /// `min(bufs.len(), meta.len(), capacity)` without waiting further (`MSG_WAITFORONE`).
    /// Datagram `i` goes to `bufs[i]`, what the kernel said about it to `meta[i]`. Returns the
    /// number of datagrams read.
    pub fn recv(
        &mut self,
        fd: BorrowedFd<'_>,
        bufs: &mut [&mut [u8]],
        meta: &mut [RecvMeta],
    ) -> io::Result<usize> {
        self.recv_strided(fd, bufs, 1, usize::MAX, meta)
    }

    /// Like [`recv`](Self::recv), but datagram `i` goes to `bufs[i * stride]` and at most
    /// `max_len` bytes of each buffer are offered to the kernel (a longer datagram is reported
    /// as truncated). Reads up to `min(ceil(bufs.len() / stride), meta.len(), capacity)`
    /// datagrams; `meta[i]` describes the one in `bufs[i * stride]`.
    ///
    /// The stride leaves room behind each datagram for the segments of a UDP GRO
    /// super-datagram to be split into, buffer by buffer, without moving the first segment.
    pub fn recv_strided(
        &mut self,
        fd: BorrowedFd<'_>,
        bufs: &mut [&mut [u8]],
        stride: usize,
        max_len: usize,
        meta: &mut [RecvMeta],
    ) -> io::Result<usize> {
        self.recv_runs(fd, bufs, stride, max_len, 0, meta)
    }

    /// Like [`recv_strided`](Self::recv_strided), but datagram `i`'s bytes are scattered over
    /// its run of `stride` buffers: the first `seg` bytes into `bufs[i * stride]`, the next
    /// `seg` into the buffer after it, and so on, the run's last buffer taking what remains,
    /// up to `max_len` bytes in all. A UDP GRO super-datagram of `seg`-byte segments then
    /// lands one segment per buffer, each at its buffer's start, with nothing to move after
    /// the read; a datagram of any other layout is spread over the run in `seg`-byte pieces
    /// (`RecvMeta::len` counts all pieces). A run of one buffer (a last, shorter chunk of
    /// `bufs`) takes its datagram whole; a buffer shorter than its piece ends the run there,
    /// offering less in all. `stride` must not exceed `IOV_MAX` (1 024), or the call fails.
    pub fn recv_scattered(
        &mut self,
        fd: BorrowedFd<'_>,
        bufs: &mut [&mut [u8]],
        stride: usize,
        seg: usize,
        max_len: usize,
        meta: &mut [RecvMeta],
    ) -> io::Result<usize> {
        self.recv_runs(fd, bufs, stride, max_len, seg.max(1), meta)
    }

    /// `recv_strided` (`seg == 0`) and `recv_scattered`.
    fn recv_runs(
        &mut self,
        fd: BorrowedFd<'_>,
        bufs: &mut [&mut [u8]],
        stride: usize,
        max_len: usize,
        seg: usize,
        meta: &mut [RecvMeta],
    ) -> io::Result<usize> {
        let stride = stride.max(1);
        let slots = bufs.len().div_ceil(stride);
        let n = slots.min(meta.len()).min(self.hdrs.len());
        if n == 0 {
            return Ok(0);
        }
        if seg > 0 && self.scatter.len() < n * stride {
            self.scatter.resize_with(n * stride, zeroed_iovec);
        }
        // One iterator per array, so that each pointer stored into a header stays derived from
        // a borrow no later iteration re-takes.
        let mut iov_runs = self.scatter.chunks_mut(stride);
        let headers = self.hdrs.iter_mut().zip(self.slots.iter_mut());
        let mut set = 0;
        for (run, (h, slot)) in bufs.chunks_mut(stride).take(n).zip(headers) {
            if seg == 0 {
                let buf = &mut run[0];
                slot.iov = libc::iovec {
                    iov_base: buf.as_mut_ptr().cast(),
                    iov_len: buf.len().min(max_len),
                };
                h.msg_hdr.msg_iov = &mut slot.iov;
                h.msg_hdr.msg_iovlen = 1;
            } else {
                // `scatter` holds `n * stride` entries (resized above).
                let Some(iovs) = iov_runs.next() else { break };
                let (total, pieces) = scatter_run(run, iovs, seg, max_len);
                slot.iov.iov_len = total; // for `RecvMeta::len`
                h.msg_hdr.msg_iov = iovs.as_mut_ptr();
                h.msg_hdr.msg_iovlen = pieces as _;
            }
            h.msg_len = 0;
            point_at_slot(&mut h.msg_hdr, slot);
            set += 1;
        }
        let n = set;
        if n == 0 {
            return Ok(0);
        }
        // SAFETY: the first `n` headers point to iovecs covering prefixes of the exclusively
        // borrowed buffers of their run `bufs[i * stride..]` (pointers from the slices, lengths
        // at most the slices'; `slot.iov` or `self.scatter`, both owned by `self` and not
        // touched again before the call returns), to address buffers of the size given in
        // `msg_namelen` and to control buffers of `CMSG_BUF_LEN` bytes, all owned by `self`
        // or borrowed for this call. The kernel writes only within those bounds.
        let r = unsafe {
            libc::recvmmsg(
                fd.as_raw_fd(),
                self.hdrs.as_mut_ptr(),
                n as libc::c_uint,
                libc::MSG_WAITFORONE,
                ptr::null_mut(),
            )
        };
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
        let got = (r as usize).min(n);
        for (m, (h, slot)) in meta
            .iter_mut()
            .zip(self.hdrs.iter().zip(&self.slots))
            .take(got)
        {
            *m = received(h, slot);
        }
        Ok(got)
    }
}

/// Lays one run of buffers out for a scattered read: the first `stride - 1` pieces of `seg`
/// bytes, the last taking what is left of `max_len`; a buffer shorter than its piece ends the
/// run (later bytes would not line up). Returns the bytes offered and the pieces used.
fn scatter_run(
    run: &mut [&mut [u8]],
    iovs: &mut [libc::iovec],
    seg: usize,
    max_len: usize,
) -> (usize, usize) {
    let (mut left, mut pieces) = (max_len, 0);
    let last = run.len() - 1;
    for (k, buf) in run.iter_mut().enumerate() {
        if left == 0 {
            break;
        }
        let want = if k == last { left } else { seg.min(left) };
        let len = buf.len().min(want);
        iovs[k] = libc::iovec {
            iov_base: buf.as_mut_ptr().cast(),
            iov_len: len,
        };
        left -= len;
        pieces += 1;
        if len < want {
            break;
        }
    }
    (max_len - left, pieces)
}

/// Points a receive header's address and control buffers at `slot`'s and clears its flags.
fn point_at_slot(hdr: &mut libc::msghdr, slot: &mut RecvSlot) {
    hdr.msg_name = (&mut slot.name as *mut libc::sockaddr_storage).cast();
    hdr.msg_namelen = size_of::<libc::sockaddr_storage>() as libc::socklen_t;
    hdr.msg_control = slot.ctrl.as_mut_ptr();
    hdr.msg_controllen = CMSG_BUF_LEN as _;
    hdr.msg_flags = 0;
}

/// What the kernel reported for one received message: its length (at most what its buffers
/// offered), truncation, sender, and the control messages' destination and GRO size.
fn received(h: &libc::mmsghdr, slot: &RecvSlot) -> RecvMeta {
    // `msg_controllen` is `size_t` on glibc but `socklen_t` on musl.
    #[allow(clippy::unnecessary_cast)]
    let clen = (h.msg_hdr.msg_controllen as usize).min(CMSG_BUF_LEN);
    let parsed = cmsg::parse(&slot.ctrl.as_bytes()[..clen]);
    RecvMeta {
        len: (h.msg_len as usize).min(slot.iov.iov_len),
        truncated: h.msg_hdr.msg_flags & libc::MSG_TRUNC != 0,
        addr: from_storage(&slot.name, h.msg_hdr.msg_namelen),
        pktinfo: parsed.pktinfo,
        gro_size: parsed.gro_size,
    }
}

/// One outgoing message of a [`SendBatch`]: `count` consecutive buffers from `start`, sent as
/// one datagram, or, when `count > 1`, as one GSO message the kernel splits into datagrams of
/// `gso_size` bytes (`UDP_SEGMENT`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MsgPlan {
    /// Index of the first buffer.
    pub start: usize,
    /// Number of buffers (iovecs) in the message, at least 1.
    pub count: usize,
    /// Segment size for `count > 1`; ignored otherwise.
    pub gso_size: u16,
}

/// Reusable state for `sendmmsg`.
pub struct SendBatch {
    hdrs: Vec<libc::mmsghdr>,
    iovs: Vec<libc::iovec>,
    ctrl: Vec<CmsgBuf>,
}

// SAFETY: as for `RecvBatch`: the pointers are rewritten inside `send` before each syscall and
// never dereferenced by this code.
unsafe impl Send for SendBatch {}

impl SendBatch {
    /// Room for up to `max` messages and `max` buffers per call.
    pub fn new(max: usize) -> Self {
        SendBatch {
            hdrs: (0..max).map(|_| zeroed_mmsghdr()).collect(),
            iovs: (0..max).map(|_| zeroed_iovec()).collect(),
            ctrl: vec![CmsgBuf::new(); max],
        }
    }

    /// The most messages and buffers one call takes.
    pub fn capacity(&self) -> usize {
        self.hdrs.len()
    }

    /// One `sendmmsg` of the messages `plans` describes, all to `dst`, each with `src` as the
    /// sticky source when given. Returns how many messages the kernel accepted (a prefix of
    /// `plans`; the caller continues with the rest). Plans that do not fit `bufs` or the
    /// capacity are an `InvalidInput` error.
    pub fn send(
        &mut self,
        fd: BorrowedFd<'_>,
        dst: &SocketAddr,
        src: Option<&PktInfo>,
        bufs: &[&[u8]],
        plans: &[MsgPlan],
    ) -> io::Result<usize> {
        self.send_to(fd, Some(dst), src, bufs, plans)
    }

    /// [`send`](Self::send) on a connected socket: no destination address in the messages,
    /// so the kernel uses the route it cached at `connect` instead of looking one up per
    /// message.
    pub fn send_connected(
        &mut self,
        fd: BorrowedFd<'_>,
        bufs: &[&[u8]],
        plans: &[MsgPlan],
    ) -> io::Result<usize> {
        self.send_to(fd, None, None, bufs, plans)
    }

    /// [`send`](Self::send) with `dst` (none: connected) and `src`.
    fn send_to(
        &mut self,
        fd: BorrowedFd<'_>,
        dst: Option<&SocketAddr>,
        src: Option<&PktInfo>,
        bufs: &[&[u8]],
        plans: &[MsgPlan],
    ) -> io::Result<usize> {
        if plans.is_empty() {
            return Ok(0);
        }
        if plans.len() > self.hdrs.len() {
            return Err(invalid("too many messages"));
        }
        let name = dst.map(|d| socket2::SockAddr::from(*d));
        let mut iov_at = 0usize;
        for (i, p) in plans.iter().enumerate() {
            let group = plan_group(bufs, p)?;
            let iov_end = iov_at + group.len();
            let iovs = self
                .iovs
                .get_mut(iov_at..iov_end)
                .ok_or_else(|| invalid("too many buffers"))?;
            for (iov, b) in iovs.iter_mut().zip(group) {
                // The kernel only reads through a send iovec; the `*mut` is the C type's.
                *iov = libc::iovec {
                    iov_base: b.as_ptr() as *mut libc::c_void,
                    iov_len: b.len(),
                };
            }
            let clen = self.write_control(i, src, p)?;
            let h = &mut self.hdrs[i];
            h.msg_len = 0;
            set_destination(&mut h.msg_hdr, name.as_ref());
            h.msg_hdr.msg_iov = &mut self.iovs[iov_at];
            h.msg_hdr.msg_iovlen = group.len() as _;
            h.msg_hdr.msg_control = if clen == 0 {
                ptr::null_mut()
            } else {
                self.ctrl[i].as_mut_ptr()
            };
            h.msg_hdr.msg_controllen = clen as _;
            h.msg_hdr.msg_flags = 0;
            iov_at = iov_end;
        }
        // SAFETY: the first `plans.len()` headers point to the address in `name` (alive until
        // the end of this function, length from socket2) or to none (null, length 0), to iovecs inside `self.iovs` that
        // cover the borrowed `bufs` (read-only for sendmmsg), and to control buffers owned by
        // `self` with the length written. Nothing is retained after the call.
        let r = unsafe {
            libc::sendmmsg(
                fd.as_raw_fd(),
                self.hdrs.as_mut_ptr(),
                plans.len() as libc::c_uint,
                0,
            )
        };
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(r as usize)
    }

    /// Writes message `i`'s control data, the sticky source and, for a GSO message, the
    /// segment size; returns its length.
    fn write_control(&mut self, i: usize, src: Option<&PktInfo>, p: &MsgPlan) -> io::Result<usize> {
        let mut w = self.ctrl[i].writer();
        if let Some(s) = src {
            w.pktinfo(s).map_err(|_| invalid("control buffer"))?;
        }
        if p.count > 1 {
            w.udp_segment(p.gso_size)
                .map_err(|_| invalid("control buffer"))?;
        }
        Ok(w.len())
    }
}

/// A send batch's refusal of the plans it was given.
fn invalid(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, format!("send batch: {what}"))
}

/// The buffers of plan `p` within `bufs`, or why it has none.
fn plan_group<'a, 'b>(bufs: &'a [&'b [u8]], p: &MsgPlan) -> io::Result<&'a [&'b [u8]]> {
    let end = p
        .start
        .checked_add(p.count)
        .ok_or_else(|| invalid("plan overflows"))?;
    let group = bufs
        .get(p.start..end)
        .ok_or_else(|| invalid("plan outside buffers"))?;
    if group.is_empty() {
        return Err(invalid("empty message"));
    }
    Ok(group)
}

/// Points a send header at the destination `name`, or at none (a connected socket).
fn set_destination(hdr: &mut libc::msghdr, name: Option<&socket2::SockAddr>) {
    match name {
        Some(name) => {
            hdr.msg_name = name.as_ptr() as *mut libc::c_void;
            hdr.msg_namelen = name.len();
        }
        None => {
            hdr.msg_name = ptr::null_mut();
            hdr.msg_namelen = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sockopt;
    use std::net::UdpSocket;
    use std::os::fd::AsFd;

    fn pair(v6: bool) -> (UdpSocket, UdpSocket) {
        let lo = if v6 { "[::1]:0" } else { "127.0.0.1:0" };
        let a = UdpSocket::bind(lo).unwrap();
        let b = UdpSocket::bind(lo).unwrap();
        if v6 {
            sockopt::set_int(b.as_fd(), libc::IPPROTO_IPV6, libc::IPV6_RECVPKTINFO, 1).unwrap();
        } else {
            sockopt::set_int(b.as_fd(), libc::IPPROTO_IP, libc::IP_PKTINFO, 1).unwrap();
        }
        (a, b)
    }

    fn batch_round_trip(v6: bool) {
        let (a, b) = pair(v6);
        let dst = b.local_addr().unwrap();
        let datagrams: Vec<Vec<u8>> = (0..10u8).map(|i| vec![i; 100 + i as usize]).collect();
        let refs: Vec<&[u8]> = datagrams.iter().map(|d| d.as_slice()).collect();
        let plans: Vec<MsgPlan> = (0..10)
            .map(|i| MsgPlan {
                start: i,
                count: 1,
                gso_size: 0,
            })
            .collect();
        let mut sb = SendBatch::new(16);
        let mut sent = 0;
        while sent < plans.len() {
            sent += sb
                .send(a.as_fd(), &dst, None, &refs, &plans[sent..])
                .unwrap();
        }
        let mut rb = RecvBatch::new(16);
        let mut storage = vec![[0u8; 256]; 16];
        let mut meta = [RecvMeta::default(); 16];
        let mut got = Vec::new();
        while got.len() < 10 {
            let mut bufs: Vec<&mut [u8]> = storage.iter_mut().map(|s| &mut s[..]).collect();
            let n = rb.recv(b.as_fd(), &mut bufs, &mut meta).unwrap();
            for (i, m) in meta.iter().take(n).enumerate() {
                assert!(!m.truncated);
                assert_eq!(m.addr, Some(a.local_addr().unwrap()));
                assert_eq!(m.pktinfo.map(|p| p.addr), Some(dst.ip()));
                got.push(bufs[i][..m.len].to_vec());
            }
        }
        assert_eq!(got, datagrams);
    }

    #[test]
    fn ipv4_batch_round_trip_with_pktinfo() {
        batch_round_trip(false);
    }

    #[test]
    fn ipv6_batch_round_trip_with_pktinfo() {
        batch_round_trip(true);
    }

    #[test]
    fn gso_message_is_split_for_a_plain_receiver() {
        let (a, b) = pair(false);
        let dst = b.local_addr().unwrap();
        let segs = [[1u8; 500], [2u8; 500], [3u8; 500]];
        let tail = [4u8; 123];
        let refs: Vec<&[u8]> = vec![&segs[0], &segs[1], &segs[2], &tail];
        let plan = [MsgPlan {
            start: 0,
            count: 4,
            gso_size: 500,
        }];
        let mut sb = SendBatch::new(8);
        assert_eq!(sb.send(a.as_fd(), &dst, None, &refs, &plan).unwrap(), 1);
        let mut buf = [0u8; 2048];
        for want in &refs {
            let (n, _) = b.recv_from(&mut buf).unwrap();
            assert_eq!(&buf[..n], *want);
        }
    }

    #[test]
    fn strided_reads_leave_gaps_and_cap_lengths() {
        let (a, b) = pair(false);
        let dst = b.local_addr().unwrap();
        for i in 0..3u8 {
            a.send_to(&[i; 300], dst).unwrap();
        }
        let mut rb = RecvBatch::new(8);
        let mut storage = vec![[0xffu8; 512]; 6];
        let mut meta = [RecvMeta::default(); 8];
        let mut bufs: Vec<&mut [u8]> = storage.iter_mut().map(|s| &mut s[..]).collect();
        // Stride 2 over 6 buffers: at most 3 datagrams, into buffers 0, 2 and 4.
        let mut got = 0;
        while got < 3 {
            let n = rb
                .recv_strided(b.as_fd(), &mut bufs[got * 2..], 2, 400, &mut meta)
                .unwrap();
            for m in &meta[..n] {
                assert_eq!((m.len, m.truncated), (300, false));
            }
            got += n;
        }
        for i in 0..3 {
            assert_eq!(bufs[i * 2][..300], [i as u8; 300]);
            assert_eq!(bufs[i * 2 + 1][0], 0xff, "gap written");
        }
        // A length cap below the datagram truncates it.
        a.send_to(&[7u8; 300], dst).unwrap();
        let n = rb
            .recv_strided(b.as_fd(), &mut bufs, 1, 100, &mut meta)
            .unwrap();
        assert_eq!(n, 1);
        assert!(meta[0].truncated);
        assert_eq!(meta[0].len, 100);
    }

    #[test]
    fn connected_send_needs_no_address() {
        let (a, b) = pair(false);
        let dst = b.local_addr().unwrap();
        a.connect(dst).unwrap();
        let x = [5u8; 40];
        let refs: Vec<&[u8]> = vec![&x, &x];
        let plans = [MsgPlan {
            start: 0,
            count: 2,
            gso_size: 40,
        }];
        let mut sb = SendBatch::new(2);
        assert_eq!(sb.send_connected(a.as_fd(), &refs, &plans).unwrap(), 1);
        let mut buf = [0u8; 100];
        for _ in 0..2 {
            let (n, from) = b.recv_from(&mut buf).unwrap();
            assert_eq!((n, from), (40, a.local_addr().unwrap()));
        }
        // Unconnected, the kernel refuses a message without destination.
        let (c, _) = pair(false);
        let e = sb.send_connected(c.as_fd(), &refs, &plans).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EDESTADDRREQ));
    }

    #[test]
    fn truncation_is_reported() {
        let (a, b) = pair(false);
        a.send_to(&[9u8; 300], b.local_addr().unwrap()).unwrap();
        let mut rb = RecvBatch::new(1);
        let mut small = [0u8; 100];
        let mut bufs: [&mut [u8]; 1] = [&mut small];
        let mut meta = [RecvMeta::default()];
        assert_eq!(rb.recv(b.as_fd(), &mut bufs, &mut meta).unwrap(), 1);
        assert!(meta[0].truncated);
        assert_eq!(meta[0].len, 100);
    }

    #[test]
    fn invalid_plans_are_errors() {
        let (a, b) = pair(false);
        let dst = b.local_addr().unwrap();
        let x = [0u8; 4];
        let refs: Vec<&[u8]> = vec![&x, &x];
        let mut sb = SendBatch::new(2);
        for bad in [
            vec![MsgPlan {
                start: 1,
                count: 2,
                gso_size: 4,
            }],
            vec![MsgPlan {
                start: 0,
                count: 0,
                gso_size: 0,
            }],
            vec![MsgPlan {
                start: usize::MAX,
                count: 2,
                gso_size: 0,
            }],
            vec![
                MsgPlan {
                    start: 0,
                    count: 1,
                    gso_size: 0
                };
                3
            ],
        ] {
            let e = sb.send(a.as_fd(), &dst, None, &refs, &bad).unwrap_err();
            assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
        }
    }
}
