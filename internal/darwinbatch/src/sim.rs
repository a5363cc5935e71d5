//! A simulated darwin kernel: the behaviour the batching rules depend on, on any host.
//!
//! Descriptors are numbers the simulation hands out (never real fds): UDP sockets bound to an
//! address (optionally connected) and utun descriptors. What it models, each because the darwin
//! data plane has a rule for it:
//!
//! - **Sticky MSG_TRUNC.** A datagram larger than its slot is cut, `msg_flags` gets
//!   [`MSG_TRUNC`](crate::MSG_TRUNC), and any later `recvmsg_x` handed a header that still
//!   carries it fails with EINVAL (as macOS 12 does until the flag is cleared).
//! - **Kernel-written lengths.** After a receive each iovec's length is the bytes written into
//!   it and `msg_datalen` the datagram's full length, so a caller that does not restore them
//!   cuts its next datagrams.
//! - **Partial accepts.** [`SimKernel::limit_accepts`] makes the next `sendmsg_x` calls accept
//!   at most the given counts (0 included).
//! - **Injected errors.** [`SimKernel::fail_next`] makes the next calls on a descriptor fail
//!   with an errno (EAGAIN, EINTR, ...). An empty receive queue is EAGAIN (all descriptors are
//!   non-blocking).
//! - **utun framing.** Every frame on a utun carries the 4-byte address-family header
//!   (`0, 0, 0, AF`); [`SimKernel::inject_packet`] frames what the stack sends, written frames
//!   must carry AF_INET (2) or AF_INET6 (30) or the write fails with EINVAL.
//! - **The utun pending queue.** One receive returns at most the utun's pending-packet limit:
//!   1 by default, raised with `UTUN_OPT_MAX_PENDING_PACKETS` (option 16 at level
//!   SYSPROTO_CONTROL).
//! - **Faults** ([`Fault`]) for the self-tests: a kernel that reorders, truncates or drops
//!   datagrams, ignores per-datagram destinations or reports no sources.

use std::collections::{HashMap, VecDeque};
use std::ffi::c_int;
use std::io;
use std::net::SocketAddr;
use std::os::fd::RawFd;
use std::sync::{Mutex, MutexGuard};

use crate::sockaddr::{self, NameBuf};
use crate::{Kernel, MsgHdrX, MSG_TRUNC, SYSPROTO_CONTROL, UTUN_OPT_MAX_PENDING_PACKETS};

/// Datagrams a simulated UDP socket queues before dropping (its receive buffer).
const UDP_QUEUE: usize = 4096;
/// The utun pending-packet limit before the option raises it.
pub const DEFAULT_MAX_PENDING: usize = 1;

/// A misbehaving kernel, for the self-tests.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// A receive hands its datagrams out in reverse order.
    Reorder,
    /// A receive delivers every datagram one byte short (and says so in `msg_datalen`).
    Truncate,
    /// A receive of more than one datagram loses the last.
    Drop,
    /// `sendmsg_x` sends every datagram to the first one's destination.
    IgnoreDestinations,
    /// A receive reports no source addresses.
    NoSources,
}

/// Per-descriptor call counts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SimStats {
    /// `recvmsg_x` calls (failed ones included).
    pub recvmsg_x: usize,
    /// `sendmsg_x` calls (failed ones included).
    pub sendmsg_x: usize,
    /// `read` and `recv_from` calls.
    pub reads: usize,
    /// `write` and `send_to` calls.
    pub writes: usize,
    /// Calls that failed with EINVAL because a header still carried MSG_TRUNC.
    pub sticky_trunc_einval: usize,
}

enum Kind {
    Udp {
        local: SocketAddr,
        peer: Option<SocketAddr>,
    },
    Utun,
}

struct SimFd {
    kind: Kind,
    queue: VecDeque<(Option<SocketAddr>, Vec<u8>)>,
    errors: VecDeque<c_int>,
    accepts: VecDeque<usize>,
    max_pending: usize,
    options: HashMap<(c_int, c_int), c_int>,
    refuse_options: bool,
    written: Vec<Vec<u8>>,
    stats: SimStats,
}

impl SimFd {
    fn new(kind: Kind) -> SimFd {
        SimFd {
            kind,
            queue: VecDeque::new(),
            errors: VecDeque::new(),
            accepts: VecDeque::new(),
            max_pending: DEFAULT_MAX_PENDING,
            options: HashMap::new(),
            refuse_options: false,
            written: Vec::new(),
            stats: SimStats::default(),
        }
    }

    fn injected(&mut self) -> io::Result<()> {
        match self.errors.pop_front() {
            Some(e) => Err(io::Error::from_raw_os_error(e)),
            None => Ok(()),
        }
    }

    /// How many datagrams one receive may return.
    fn receive_limit(&self) -> usize {
        match self.kind {
            Kind::Utun => self.max_pending.max(1),
            Kind::Udp { .. } => usize::MAX,
        }
    }
}

#[derive(Default)]
struct State {
    next: RawFd,
    fds: HashMap<RawFd, SimFd>,
    fault: Option<Fault>,
}

/// The simulated kernel. Cheap to create; every test makes its own.
#[derive(Default)]
pub struct SimKernel {
    state: Mutex<State>,
}

fn errno(e: c_int) -> io::Error {
    io::Error::from_raw_os_error(e)
}

/// The utun header for an IP packet (AF from the version nibble; 0 for anything else).
pub fn utun_header(packet: &[u8]) -> [u8; 4] {
    let af = match packet.first().map(|b| b >> 4) {
        Some(4) => sockaddr::AF_INET,
        Some(6) => sockaddr::AF_INET6,
        _ => 0,
    };
    [0, 0, 0, af]
}

fn valid_utun_frame(frame: &[u8]) -> bool {
    frame.len() >= 4
        && frame[..3] == [0, 0, 0]
        && matches!(frame[3], sockaddr::AF_INET | sockaddr::AF_INET6)
}

impl SimKernel {
    /// An empty kernel.
    pub fn new() -> SimKernel {
        SimKernel {
            state: Mutex::new(State {
                next: 1000,
                ..State::default()
            }),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn add(&self, kind: Kind) -> RawFd {
        let mut st = self.lock();
        let fd = st.next;
        st.next += 1;
        st.fds.insert(fd, SimFd::new(kind));
        fd
    }

    fn with_fd<T>(&self, fd: RawFd, f: impl FnOnce(&mut SimFd) -> T) -> T {
        let mut st = self.lock();
        let sfd = st
            .fds
            .get_mut(&fd)
            .unwrap_or_else(|| panic!("simulated fd {fd} does not exist"));
        f(sfd)
    }

    /// A UDP socket bound to `local`.
    pub fn udp_socket(&self, local: SocketAddr) -> RawFd {
        self.add(Kind::Udp { local, peer: None })
    }

    /// Connects the UDP socket `fd` to `peer`: sends without a destination go there, and only
    /// datagrams from `peer` are received.
    pub fn connect(&self, fd: RawFd, peer: SocketAddr) {
        self.with_fd(fd, |s| {
            if let Kind::Udp { peer: p, .. } = &mut s.kind {
                *p = Some(peer);
            }
        })
    }

    /// A utun descriptor.
    pub fn utun(&self) -> RawFd {
        self.add(Kind::Utun)
    }

    /// The stack sends `packet` out of the utun: queued for the reader with its 4-byte header.
    pub fn inject_packet(&self, fd: RawFd, packet: &[u8]) {
        let mut frame = utun_header(packet).to_vec();
        frame.extend_from_slice(packet);
        self.inject_frame(fd, &frame);
    }

    /// Queues `frame` as is for the reader of `fd`.
    pub fn inject_frame(&self, fd: RawFd, frame: &[u8]) {
        self.with_fd(fd, |s| s.queue.push_back((None, frame.to_vec())))
    }

    /// Frames written to the utun `fd` so far (headers included), oldest first.
    pub fn take_written(&self, fd: RawFd) -> Vec<Vec<u8>> {
        self.with_fd(fd, |s| std::mem::take(&mut s.written))
    }

    /// Datagrams waiting to be read on `fd`.
    pub fn pending(&self, fd: RawFd) -> usize {
        self.with_fd(fd, |s| s.queue.len())
    }

    /// The next calls on `fd` fail with these errnos, one each, in order.
    pub fn fail_next(&self, fd: RawFd, errnos: &[c_int]) {
        self.with_fd(fd, |s| s.errors.extend(errnos))
    }

    /// The next `sendmsg_x` calls on `fd` accept at most these many datagrams, one limit per
    /// call, in order.
    pub fn limit_accepts(&self, fd: RawFd, limits: &[usize]) {
        self.with_fd(fd, |s| s.accepts.extend(limits))
    }

    /// Makes every `setsockopt` on `fd` fail with ENOPROTOOPT.
    pub fn refuse_options(&self, fd: RawFd) {
        self.with_fd(fd, |s| s.refuse_options = true)
    }

    /// The value last set for option (`level`, `name`) on `fd`.
    pub fn option(&self, fd: RawFd, level: c_int, name: c_int) -> Option<c_int> {
        self.with_fd(fd, |s| s.options.get(&(level, name)).copied())
    }

    /// The utun's pending-packet limit (datagrams per receive).
    pub fn max_pending(&self, fd: RawFd) -> usize {
        self.with_fd(fd, |s| s.max_pending)
    }

    /// Makes the kernel misbehave (`None`: behave).
    pub fn set_fault(&self, fault: Option<Fault>) {
        self.lock().fault = fault;
    }

    /// Call counts on `fd`.
    pub fn stats(&self, fd: RawFd) -> SimStats {
        self.with_fd(fd, |s| s.stats)
    }

    /// Routes a datagram from `from` (a UDP socket) to the socket bound to `dst`; lost, as UDP
    /// would lose it, when nobody is bound there, the receiver is connected elsewhere or its
    /// queue is full.
    fn deliver(st: &mut State, from: SocketAddr, dst: SocketAddr, data: Vec<u8>) {
        let target = st.fds.values_mut().find(|f| match f.kind {
            Kind::Udp { local, peer } => local == dst && peer.is_none_or(|p| p == from),
            Kind::Utun => false,
        });
        if let Some(t) = target {
            if t.queue.len() < UDP_QUEUE {
                t.queue.push_back((Some(from), data));
            }
        }
    }

    /// One outgoing datagram on `fd` to `dst` (or the connected peer); for a utun, a frame.
    fn send_one(
        st: &mut State,
        fd: RawFd,
        data: Vec<u8>,
        dst: Option<SocketAddr>,
    ) -> io::Result<()> {
        let f = st.fds.get_mut(&fd).ok_or_else(|| errno(libc::EBADF))?;
        match f.kind {
            Kind::Utun => {
                if !valid_utun_frame(&data) {
                    return Err(errno(libc::EINVAL));
                }
                f.written.push(data);
                Ok(())
            }
            Kind::Udp { local, peer } => {
                let to = dst.or(peer).ok_or_else(|| errno(libc::EDESTADDRREQ))?;
                Self::deliver(st, local, to, data);
                Ok(())
            }
        }
    }
}

/// Copies `data` into the header's iovecs the way the kernel does: as much as fits, each iovec's
/// length rewritten to what it received. Returns the bytes copied.
///
/// # Safety
/// `h.iov` points to `h.iovlen` iovecs whose buffers are writable for their lengths.
unsafe fn scatter(h: &mut MsgHdrX, data: &[u8]) -> usize {
    let mut done = 0;
    for j in 0..h.iovlen.max(0) as usize {
        // SAFETY: j < iovlen, and the caller guarantees the iovec array.
        let v = unsafe { &mut *h.iov.add(j) };
        let n = v.len.min(data.len() - done);
        if n > 0 {
            // SAFETY: the iovec's buffer is writable for v.len >= n bytes.
            let dst = unsafe { std::slice::from_raw_parts_mut(v.base, n) };
            dst.copy_from_slice(&data[done..done + n]);
        }
        v.len = n;
        done += n;
    }
    done
}

/// Gathers the bytes of one outgoing message.
///
/// # Safety
/// `h.iov` points to `h.iovlen` iovecs whose buffers are readable for their lengths.
unsafe fn gather(h: &MsgHdrX) -> Vec<u8> {
    let mut out = Vec::new();
    for j in 0..h.iovlen.max(0) as usize {
        // SAFETY: j < iovlen, and the caller guarantees the iovec array and buffers.
        let v = unsafe { &*h.iov.add(j) };
        if v.len > 0 {
            // SAFETY: as above.
            out.extend_from_slice(unsafe { std::slice::from_raw_parts(v.base, v.len) });
        }
    }
    out
}

fn valid_header(h: &MsgHdrX) -> bool {
    h.iovlen >= 1 && !h.iov.is_null() && (h.namelen == 0 || !h.name.is_null())
}

impl Kernel for SimKernel {
    unsafe fn recvmsg_x(
        &self,
        fd: RawFd,
        msgs: &mut [MsgHdrX],
        _flags: c_int,
    ) -> io::Result<usize> {
        let mut st = self.lock();
        let fault = st.fault;
        let f = st.fds.get_mut(&fd).ok_or_else(|| errno(libc::EBADF))?;
        f.stats.recvmsg_x += 1;
        f.injected()?;
        if msgs.iter().any(|h| h.flags & MSG_TRUNC != 0) {
            f.stats.sticky_trunc_einval += 1;
            return Err(errno(libc::EINVAL));
        }
        if msgs.is_empty() || !msgs.iter().all(valid_header) {
            return Err(errno(libc::EINVAL));
        }
        if f.queue.is_empty() {
            return Err(errno(libc::EAGAIN));
        }
        let take = msgs.len().min(f.receive_limit()).min(f.queue.len());
        let mut batch: Vec<_> = f.queue.drain(..take).collect();
        match fault {
            Some(Fault::Reorder) => batch.reverse(),
            Some(Fault::Drop) if batch.len() > 1 => {
                batch.pop();
            }
            Some(Fault::Truncate) => batch.iter_mut().for_each(|(_, d)| {
                d.pop();
            }),
            _ => {}
        }
        for (h, (src, data)) in msgs.iter_mut().zip(&batch) {
            // SAFETY: the caller guarantees every header's iovecs (Kernel::recvmsg_x).
            let copied = unsafe { scatter(h, data) };
            h.datalen = data.len();
            h.flags = if copied < data.len() { MSG_TRUNC } else { 0 };
            let src = src.filter(|_| fault != Some(Fault::NoSources));
            match src {
                Some(a) if h.namelen > 0 => {
                    let mut name = NameBuf::default();
                    let len = sockaddr::encode(&a, &mut name);
                    let n = len.min(h.namelen as usize);
                    // SAFETY: the caller guarantees `name` is writable for `namelen` bytes.
                    let dst = unsafe { std::slice::from_raw_parts_mut(h.name.cast::<u8>(), n) };
                    dst.copy_from_slice(&name.0[..n]);
                    h.namelen = len as u32;
                }
                _ => h.namelen = 0,
            }
        }
        Ok(batch.len())
    }

    unsafe fn sendmsg_x(&self, fd: RawFd, msgs: &[MsgHdrX], _flags: c_int) -> io::Result<usize> {
        let mut st = self.lock();
        let fault = st.fault;
        let f = st.fds.get_mut(&fd).ok_or_else(|| errno(libc::EBADF))?;
        f.stats.sendmsg_x += 1;
        f.injected()?;
        if msgs.is_empty() || !msgs.iter().all(valid_header) {
            return Err(errno(libc::EINVAL));
        }
        let limit = f.accepts.pop_front().unwrap_or(usize::MAX);
        let mut first_dst = None;
        let mut sent = 0;
        for h in msgs.iter().take(limit) {
            // SAFETY: the caller guarantees every header's iovecs (Kernel::sendmsg_x).
            let data = unsafe { gather(h) };
            let mut dst = if h.namelen > 0 {
                // SAFETY: the caller guarantees `name` is readable for `namelen` bytes.
                let name =
                    unsafe { std::slice::from_raw_parts(h.name.cast::<u8>(), h.namelen as usize) };
                Some(sockaddr::decode(name, name.len()).ok_or_else(|| errno(libc::EINVAL))?)
            } else {
                None
            };
            if fault == Some(Fault::IgnoreDestinations) {
                dst = *first_dst.get_or_insert(dst);
            }
            match Self::send_one(&mut st, fd, data, dst) {
                Ok(()) => sent += 1,
                Err(e) if sent == 0 => return Err(e),
                Err(_) => break,
            }
        }
        Ok(sent)
    }

    fn read(&self, fd: RawFd, buf: &mut [u8]) -> io::Result<usize> {
        self.recv_from(fd, buf).map(|(n, _)| n)
    }

    fn write(&self, fd: RawFd, buf: &[u8]) -> io::Result<usize> {
        let mut st = self.lock();
        let f = st.fds.get_mut(&fd).ok_or_else(|| errno(libc::EBADF))?;
        f.stats.writes += 1;
        f.injected()?;
        Self::send_one(&mut st, fd, buf.to_vec(), None)?;
        Ok(buf.len())
    }

    fn recv_from(&self, fd: RawFd, buf: &mut [u8]) -> io::Result<(usize, Option<SocketAddr>)> {
        let mut st = self.lock();
        let f = st.fds.get_mut(&fd).ok_or_else(|| errno(libc::EBADF))?;
        f.stats.reads += 1;
        f.injected()?;
        let (src, data) = f.queue.pop_front().ok_or_else(|| errno(libc::EAGAIN))?;
        let n = data.len().min(buf.len());
        buf[..n].copy_from_slice(&data[..n]);
        Ok((n, src))
    }

    fn send_to(&self, fd: RawFd, buf: &[u8], dst: &SocketAddr) -> io::Result<usize> {
        let mut st = self.lock();
        let f = st.fds.get_mut(&fd).ok_or_else(|| errno(libc::EBADF))?;
        f.stats.writes += 1;
        f.injected()?;
        Self::send_one(&mut st, fd, buf.to_vec(), Some(*dst))?;
        Ok(buf.len())
    }

    fn set_option(&self, fd: RawFd, level: c_int, name: c_int, value: c_int) -> io::Result<()> {
        let mut st = self.lock();
        let f = st.fds.get_mut(&fd).ok_or_else(|| errno(libc::EBADF))?;
        f.injected()?;
        if f.refuse_options {
            return Err(errno(libc::ENOPROTOOPT));
        }
        if matches!(f.kind, Kind::Utun)
            && (level, name) == (SYSPROTO_CONTROL, UTUN_OPT_MAX_PENDING_PACKETS)
        {
            f.max_pending = usize::try_from(value).map_err(|_| errno(libc::EINVAL))?;
        }
        f.options.insert((level, name), value);
        Ok(())
    }
}
