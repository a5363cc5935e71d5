//! The darwin side of connected sockets: port sharing with `SO_REUSEADDR` alone, 1 MiB
//! buffers, and pair I/O through a darwin [`Family`]: `sendmsg_x`/`recvmsg_x` when the batch
//! self-test passed (sends continue from the accepted count and drop the rest on a zero
//! accept; reads record source names), else one datagram per call. The rules are in
//! `darwin/io.rs`; this file is the glue.

use std::io;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, Weak};

use socket2::Socket;

use super::slots::{READ_BATCH, SLOT_TIERS};
use super::sock::Dialled;
use super::{Inner, Pair};
pub(crate) use crate::darwin::family::{Family, PairReader, SendPool};
use crate::darwin::io::{port_sharing, share_port, Sent};
use crate::{err_closed, ReceiveFunc};

/// `SO_SNDBUF` of each pair socket (`connectedBufSize`).
pub(super) const PAIR_SEND_BUFFER: usize = 1 << 20;
/// `SO_RCVBUF` a pair socket is raised to (1 MiB off Linux); never lowered.
pub(super) const PAIR_RECV_BUFFER: usize = 1 << 20;

/// Makes `sock` share its port with the bind's other sockets: `SO_REUSEADDR` alone.
///
/// It lets a specific-address socket bind beside the wildcard one and the wildcard be rebound
/// while pair sockets hold the port. `SO_REUSEPORT` is deliberately not set: on a wildcard
/// socket it would let any local user bind the port and take its traffic.
pub fn reuse_port_control(sock: &Socket) -> io::Result<()> {
    share_port(sock, port_sharing(false))
}

/// Options every pair socket gets before `bind`: port sharing, a 1 MiB send buffer, a receive
/// buffer raised (never lowered) to 1 MiB, and non-blocking I/O (the reader parks in `poll`).
pub(super) fn prepare(sock: &Socket, _offload: bool) -> io::Result<()> {
    reuse_port_control(sock)?;
    let _ = sock.set_send_buffer_size(PAIR_SEND_BUFFER);
    if sock.recv_buffer_size().unwrap_or(0) < PAIR_RECV_BUFFER {
        let _ = sock.set_recv_buffer_size(PAIR_RECV_BUFFER);
    }
    sock.set_nonblocking(true)
}

/// darwin has no UDP GSO or GRO.
pub(super) fn offloads(_sock: &Socket, _offload: bool) -> (bool, bool) {
    (false, false)
}

/// The pair socket's I/O state: batched when `offload` allows it and the connected self-test
/// passed. (Non-blocking was set in [`prepare`], so this cannot fail.)
pub(super) fn family(d: Dialled, _v6: bool, offload: bool) -> Family {
    let batched = offload && vpn_darwinbatch::supported();
    Family::connected(d.sock, batched)
}

/// Sends `bufs` on the pair socket; the result, how many datagrams the kernel accepted and how
/// many a full queue dropped.
pub(super) fn send(
    fam: &Family,
    pool: &SendPool,
    bufs: &[&[u8]],
) -> (io::Result<()>, usize, usize) {
    let mut sent = Sent::default();
    let result = fam.send(pool, bufs, None, &mut sent);
    (result, sent.datagrams, sent.dropped)
}

/// The receive function for `pair`, the buffer size and the batch to ask the device for.
pub(super) fn receive_func(
    pair: Arc<Pair>,
    set: Weak<Inner>,
    max_datagram: usize,
) -> (ReceiveFunc, usize, usize) {
    let (remote, local) = (pair.key.remote, pair.key.local);
    let mut reader = PairReader::new(pair.fam.batched, max_datagram, remote, local);
    let f: ReceiveFunc = Box::new(move |bufs, sizes, eps| {
        if bufs.is_empty() {
            // A wait for data (see `ReceiveFunc`); a pair socket's errors are for the read.
            return pair.fam.wait_readable().map(|()| 0);
        }
        let r = reader.read(&pair.fam, bufs, sizes, eps, |read| {
            pair.used.store(true, Relaxed);
            if let Some(set) = set.upgrade() {
                set.counters.received(read.datagrams, 0, read.oversize);
            }
        });
        match r {
            Err(e) if !crate::is_err_closed(&e) => {
                tracing::debug!(pair = ?pair.key, "connected socket read failed: {e}");
                if let Some(set) = set.upgrade() {
                    set.remove(&pair);
                }
                Err(err_closed())
            }
            r => r,
        }
    });
    (f, SLOT_TIERS[SLOT_TIERS.len() - 1], READ_BATCH)
}
