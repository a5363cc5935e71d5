//! The darwin bind's datagram rules, written against the [`Kernel`] seam of `vpn-darwinbatch`
//! so that they compile on every host and run, in this crate's unit tests, against its
//! simulated darwin kernel on Linux. The bind itself (`darwin/bind.rs`, Apple targets only)
//! is the glue: sockets, locks and parking around these functions.
//!
//! - **Receiving** ([`Receiver`]): a batch per `recvmsg_x` with source names, or one datagram
//!   per `recvfrom`. A datagram that fills its slot may have been cut (neither call tells
//!   reliably), so it is dropped and counted as oversize.
//! - **Sending** ([`send`]): batched, one `sendmsg_x` after another, each continuing where the
//!   kernel's accepted count left off; a call that accepts nothing drops the rest instead of
//!   spinning on a full queue. One datagram per `sendto`/`write` otherwise. EAGAIN parks
//!   the caller (sockets are non-blocking), EINTR is retried.
//! - **Pair sockets** ([`PairRx`]): the slot tiers and the coalescing pause of
//!   `connected/slots.rs` on top of a [`Receiver`].
//! - **Choices**: whether the shared sockets batch ([`shared_batching`]), which option means
//!   don't-fragment ([`dont_fragment_option`]), how a socket shares the port
//!   ([`port_sharing`]), and what a read's outcome means for the reader loop
//!   ([`after_read`]).

use std::ffi::c_int;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::RawFd;

use smallvec::SmallVec;
use socket2::Socket;
use vpn_darwinbatch::{Kernel, RecvBatch, SendBatch, MAX_BATCH};

use crate::connected::canonical;
use crate::connected::slots::{initial_tier, should_pause, stride_for, SLOT_TIERS};
use crate::{Endpoint, StickySource};

/// A descriptor and the kernel its calls go to (the system's, or a simulated one in tests).
#[derive(Clone, Copy)]
pub(crate) struct Fd<'a> {
    pub k: &'a dyn Kernel,
    pub fd: RawFd,
}

/// darwin's `IP_DONTFRAG` (`netinet/in.h`; Linux has no option of that name).
pub(crate) const IP_DONTFRAG: c_int = 28;
/// darwin's `IPV6_DONTFRAG` (`netinet6/in6.h`).
pub(crate) const IPV6_DONTFRAG: c_int = 62;
/// The largest UDP payload (IPv6: 65 535 − 8). A slot at least this large cannot be overflowed.
pub(crate) const MAX_UDP_PAYLOAD: usize = 65_527;
/// The largest datagram a shared-socket read offers room for.
pub(crate) const MAX_DATAGRAM: usize = 65_535;

/// The (level, name) of the don't-fragment option for a socket of the family.
pub(crate) fn dont_fragment_option(v6: bool) -> (c_int, c_int) {
    if v6 {
        (libc::IPPROTO_IPV6, IPV6_DONTFRAG)
    } else {
        (libc::IPPROTO_IP, IP_DONTFRAG)
    }
}

/// Sets don't-fragment on `fd`: datagrams above the path MTU are dropped instead of
/// fragmented, and IPv4 datagrams leave without darwin's random IP ID (slow to generate, and
/// it keeps a Linux receiver from coalescing them with GRO).
pub(crate) fn set_dont_fragment(k: &dyn Kernel, fd: RawFd, v6: bool) -> io::Result<()> {
    let (level, name) = dont_fragment_option(v6);
    k.set_option(fd, level, name, 1)
}

/// Whether `sock` is an IPv6 socket: only those answer the `IPV6_V6ONLY` query (a control
/// hook gets the socket, not its family).
pub(crate) fn socket_is_v6(sock: &Socket) -> bool {
    sock.only_v6().is_ok()
}

/// How sockets share the bind's port with connected sockets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum PortSharing {
    /// `SO_REUSEPORT` alone (Linux: a reuse-port group is limited to one effective UID).
    ReusePort,
    /// `SO_REUSEADDR` alone (darwin and the BSDs: a specific-address socket may bind beside
    /// the wildcard one, and the wildcard may be rebound while they hold the port).
    /// `SO_REUSEPORT` there would let any local user bind the port on the wildcard address.
    ReuseAddr,
}

/// The port-sharing option of the platform (`linux`: Linux, otherwise darwin/BSD).
pub(crate) const fn port_sharing(linux: bool) -> PortSharing {
    if linux {
        PortSharing::ReusePort
    } else {
        PortSharing::ReuseAddr
    }
}

/// Makes `sock` share its port as `how` says, setting that one option only.
pub(crate) fn share_port(sock: &Socket, how: PortSharing) -> io::Result<()> {
    match how {
        PortSharing::ReusePort => sock.set_reuse_port(true),
        PortSharing::ReuseAddr => sock.set_reuse_address(true),
    }
}

/// Whether the shared (unconnected) sockets batch: only when asked for and the once-per-process
/// unconnected self-test (`vpn_darwinbatch::unconnected_supported`) passed; otherwise, with the
/// reason logged, one datagram per call.
pub(crate) fn shared_batching(requested: bool, self_test: impl FnOnce() -> io::Result<()>) -> bool {
    if !requested {
        return false;
    }
    match self_test() {
        Ok(()) => true,
        Err(e) => {
            tracing::info!(
                "batched I/O on the shared sockets unavailable, one datagram per call: {e}"
            );
            false
        }
    }
}

/// Whether a datagram of `size` bytes read into a slot of `slot` bytes may have been cut: it
/// filled the slot, and the slot is small enough for a datagram to overflow it.
pub(crate) fn maybe_truncated(size: usize, slot: usize) -> bool {
    size >= slot && slot <= MAX_UDP_PAYLOAD
}

/// What one receive call produced.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Read {
    /// Entries `0..got` were written (a dropped one with size 0).
    pub got: usize,
    /// Datagrams handed on (size > 0).
    pub datagrams: usize,
    /// Datagrams dropped because they filled their slot.
    pub oversize: usize,
}

/// Reads datagrams from one socket: a batch per `recvmsg_x` recording source names, or one
/// per `recvfrom`.
pub(crate) struct Receiver {
    batch: Option<RecvBatch>,
    srcs: Vec<Option<SocketAddr>>,
}

impl Receiver {
    /// Batched when `batched` (the caller checked the self-test), else one per call.
    pub(crate) fn new(batched: bool) -> Self {
        Receiver {
            batch: batched.then(|| RecvBatch::new(MAX_BATCH, true)),
            srcs: vec![None; MAX_BATCH],
        }
    }

    /// The most datagrams one call returns.
    pub(crate) fn capacity(&self) -> usize {
        self.batch.as_ref().map_or(1, RecvBatch::capacity)
    }

    /// One receive call into the first `n` buffers (each offered at most `slot` bytes):
    /// datagram `i` goes to `bufs[i]`, its length to `sizes[i]` and its endpoint, from
    /// `ep_for(source)`, to `eps[i]`. A datagram that may have been cut, or that `ep_for`
    /// refuses, gets size 0. EAGAIN comes back as [`io::ErrorKind::WouldBlock`]; EINTR is
    /// retried.
    pub(crate) fn recv(
        &mut self,
        Fd { k, fd }: Fd<'_>,
        bufs: &mut [&mut [u8]],
        sizes: &mut [usize],
        eps: &mut [Endpoint],
        slot: usize,
        ep_for: impl Fn(Option<SocketAddr>) -> Option<Endpoint>,
    ) -> io::Result<Read> {
        let n = bufs
            .len()
            .min(sizes.len())
            .min(eps.len())
            .min(self.capacity());
        if n == 0 {
            return Ok(Read::default());
        }
        let got = match self.batch.as_mut() {
            Some(batch) => {
                let mut views: SmallVec<[&mut [u8]; MAX_BATCH]> = bufs[..n]
                    .iter_mut()
                    .map(|b| {
                        let len = b.len().min(slot);
                        &mut b[..len]
                    })
                    .collect();
                let srcs = &mut self.srcs[..n];
                batch.recv_with(k, fd, &mut views, &mut sizes[..n], Some(srcs))?
            }
            None => {
                let len = bufs[0].len().min(slot);
                let (size, src) = retry_eintr(|| k.recv_from(fd, &mut bufs[0][..len]))?;
                sizes[0] = size;
                self.srcs[0] = src;
                1
            }
        };
        let mut read = Read {
            got: got.min(n),
            ..Read::default()
        };
        for i in 0..read.got {
            let offered = bufs[i].len().min(slot);
            if maybe_truncated(sizes[i], offered) {
                sizes[i] = 0;
                read.oversize += 1;
                continue;
            }
            match ep_for(self.srcs[i]) {
                Some(ep) if sizes[i] > 0 => {
                    eps[i] = ep;
                    read.datagrams += 1;
                }
                _ => sizes[i] = 0,
            }
        }
        Ok(read)
    }
}

fn retry_eintr<T>(mut f: impl FnMut() -> io::Result<T>) -> io::Result<T> {
    loop {
        match f() {
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            r => return r,
        }
    }
}

/// The endpoint of a datagram on a shared socket: its source (none reported: skipped). darwin
/// reports no local address, so there is no sticky source.
pub(crate) fn shared_endpoint(src: Option<SocketAddr>) -> Option<Endpoint> {
    src.map(|s| Endpoint {
        dst: canonical(s),
        src: None,
    })
}

/// What the reader loop does after a read.
#[derive(Debug)]
pub(crate) enum Next {
    /// Hand this many entries to the caller.
    Return(usize),
    /// Read again at once (interrupted, a transient error, or nothing left after drops).
    Again,
    /// Park until the socket is readable or the family closes, then read again.
    Park,
    /// The socket was closed: return `err_closed`.
    Closed,
    /// Give up with this error.
    Fail(io::Error),
}

/// The reader loop's rule: a closed socket ends it whatever the read said; EAGAIN parks;
/// EINTR and `transient` errors read again; a read that kept nothing reads again.
pub(crate) fn after_read(
    r: io::Result<Read>,
    closed: bool,
    transient: impl Fn(&io::Error) -> bool,
) -> Next {
    if closed {
        return Next::Closed;
    }
    match r {
        Ok(read) if read.datagrams > 0 => Next::Return(read.got),
        Ok(_) => Next::Again,
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => Next::Park,
        Err(e) if e.kind() == io::ErrorKind::Interrupted || transient(&e) => Next::Again,
        Err(e) => Next::Fail(e),
    }
}

/// What a send achieved.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Sent {
    /// Datagrams the kernel accepted.
    pub datagrams: usize,
    /// Datagrams dropped after a batch call accepted none.
    pub dropped: usize,
}

/// The arrays of one batched sender (pooled: one per concurrent sender).
pub(crate) struct SendState {
    batch: SendBatch,
    dsts: Vec<SocketAddr>,
}

impl SendState {
    pub(crate) fn new() -> Self {
        SendState {
            batch: SendBatch::new(MAX_BATCH),
            dsts: Vec::with_capacity(MAX_BATCH),
        }
    }
}

/// Sends all of `bufs` on `fd`, each to `dst` (an unconnected socket) or to the connected peer
/// (`dst` `None`), batched when `state` is given. EAGAIN calls `park` (which fails once the
/// socket closes) and tries again; EINTR is retried; any other error ends the send with what
/// was accepted so far in `sent`.
pub(crate) fn send(
    Fd { k, fd }: Fd<'_>,
    state: Option<&mut SendState>,
    bufs: &[&[u8]],
    dst: Option<SocketAddr>,
    park: &mut dyn FnMut() -> io::Result<()>,
    sent: &mut Sent,
) -> io::Result<()> {
    match state {
        Some(st) => send_batched(k, fd, st, bufs, dst, park, sent),
        None => send_each(k, fd, bufs, dst, park, sent),
    }
}

fn send_batched(
    k: &dyn Kernel,
    fd: RawFd,
    st: &mut SendState,
    bufs: &[&[u8]],
    dst: Option<SocketAddr>,
    park: &mut dyn FnMut() -> io::Result<()>,
    sent: &mut Sent,
) -> io::Result<()> {
    let SendState { batch, dsts } = st;
    let mut done = 0;
    while let Some(rest) = bufs.get(done..).filter(|r| !r.is_empty()) {
        let staged = dst.map(|d| {
            dsts.clear();
            dsts.resize(rest.len().min(batch.capacity()), d);
            &dsts[..]
        });
        match batch.send_with(k, fd, rest, staged) {
            Ok(0) => {
                // A full queue that takes nothing: UDP may lose these, spinning would not help.
                sent.dropped += rest.len();
                return Ok(());
            }
            Ok(accepted) => {
                done += accepted;
                sent.datagrams += accepted;
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => park()?,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

fn send_each(
    k: &dyn Kernel,
    fd: RawFd,
    bufs: &[&[u8]],
    dst: Option<SocketAddr>,
    park: &mut dyn FnMut() -> io::Result<()>,
    sent: &mut Sent,
) -> io::Result<()> {
    for buf in bufs {
        loop {
            let r = match &dst {
                Some(d) => k.send_to(fd, buf, d),
                None => k.write(fd, buf),
            };
            match r {
                Ok(_) => {
                    sent.datagrams += 1;
                    break;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => park()?,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    }
    Ok(())
}

/// The reading state of one connected pair socket.
pub(crate) struct PairRx {
    rx: Receiver,
    tier: usize,
    pause: bool,
}

impl PairRx {
    /// Batched when `batched`; first slots large enough for `max_datagram`.
    pub(crate) fn new(batched: bool, max_datagram: usize) -> Self {
        PairRx {
            rx: Receiver::new(batched),
            tier: initial_tier(max_datagram),
            pause: false,
        }
    }

    /// The slot offered per datagram now.
    pub(crate) fn slot(&self) -> usize {
        SLOT_TIERS[self.tier]
    }

    /// Whether the previous read asks for the coalescing pause before the next one (cleared).
    pub(crate) fn take_pause(&mut self) -> bool {
        std::mem::take(&mut self.pause)
    }

    /// One read into the device's buffers. Entries carry the reported source (datagrams
    /// queued before `connect` may come from anyone), or `remote` when none is reported, and
    /// `local` as sticky source so replies leave through this socket. A datagram that filled
    /// its slot is dropped and moves the socket to the next tier for good; a partial batch of
    /// some depth asks for the pause.
    pub(crate) fn read(
        &mut self,
        sock: Fd<'_>,
        bufs: &mut [&mut [u8]],
        sizes: &mut [usize],
        eps: &mut [Endpoint],
        remote: SocketAddr,
        local: IpAddr,
    ) -> io::Result<Read> {
        let src = Some(StickySource {
            ip: local,
            ifindex: 0,
        });
        let ep_for = |from: Option<SocketAddr>| {
            Some(Endpoint {
                dst: from.map_or(remote, canonical),
                src,
            })
        };
        let slot = self.slot();
        let n = bufs.len().min(sizes.len()).min(eps.len());
        let stride = stride_for(&bufs[..n], slot, false);
        let capacity = n.div_ceil(stride).min(self.rx.capacity());
        let read = if stride == 1 {
            self.rx.recv(sock, bufs, sizes, eps, slot, ep_for)?
        } else {
            self.recv_into_run_heads(sock, &mut bufs[..n], sizes, eps, stride, ep_for)?
        };
        if read.oversize > 0 && self.tier + 1 < SLOT_TIERS.len() {
            self.tier += 1;
        }
        // Datagrams the read took: one per entry, or one per run of entries.
        self.pause = should_pause(read.got.div_ceil(stride), capacity);
        Ok(read)
    }

    /// A read for a slot larger than the MTU's buffers: datagram `j` into `bufs[j * stride]`
    /// (the head of a run, which holds any datagram), the buffers between them left empty.
    fn recv_into_run_heads(
        &mut self,
        sock: Fd<'_>,
        bufs: &mut [&mut [u8]],
        sizes: &mut [usize],
        eps: &mut [Endpoint],
        stride: usize,
        ep_for: impl Fn(Option<SocketAddr>) -> Option<Endpoint>,
    ) -> io::Result<Read> {
        let n = bufs.len();
        let mut heads: SmallVec<[&mut [u8]; MAX_BATCH]> =
            bufs.iter_mut().step_by(stride).map(|b| &mut **b).collect();
        let mut head_sizes: SmallVec<[usize; MAX_BATCH]> = smallvec::smallvec![0; heads.len()];
        let mut head_eps: SmallVec<[Endpoint; MAX_BATCH]> =
            smallvec::smallvec![Endpoint::default(); heads.len()];
        let slot = self.slot();
        let mut read = self.rx.recv(
            sock,
            &mut heads,
            &mut head_sizes,
            &mut head_eps,
            slot,
            ep_for,
        )?;
        let entries = match read.got {
            0 => 0,
            got => ((got - 1) * stride + 1).min(n),
        };
        sizes[..entries].fill(0);
        for j in 0..read.got {
            sizes[j * stride] = head_sizes[j];
            eps[j * stride] = head_eps[j];
        }
        read.got = entries;
        Ok(read)
    }
}

#[cfg(test)]
mod tests;
