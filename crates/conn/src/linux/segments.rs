//! Splitting what one `recvmmsg` read straight into the caller's buffers (used by the shared
//! sockets' reader and the pair sockets' readers alike).
//!
//! Message `j` of a read lands in buffer `j * stride`. With UDP GRO it may be a super-datagram
//! of equal-size segments (the last may be shorter): its first segment stays where it is and
//! the others are copied into the following buffers of its run of `stride` (the device's
//! buffers hold one packet each). Entries a read leaves unused get size 0, which the device
//! skips.
//!
//! The shared socket's reader saves that copy in bulk: it asks the kernel to scatter each
//! message over its run in pieces of the segment size its previous read was coalesced by
//! ([`Layout::scatter`]), so that a super-datagram of that size arrives one segment per buffer.
//! A message no longer than a piece is whole in its first buffer as before; a longer one of
//! another layout is gathered back into its first buffer (a copy) and split as above.
//! Scattering moves the copy into the kernel rather than removing it, but the data is then
//! written once instead of written and moved: +1.8 % TCP throughput and 1.4 % less CPU per
//! byte over 8 + 8 interleaved runs (`docs/design-notes.md`).

use vpn_sys::mmsg::RecvMeta;

use crate::Endpoint;

/// Most segments the kernel coalesces into one GRO read (`UDP_GRO_CNT_MAX`).
pub(crate) const GRO_SEGMENTS: usize = 64;

/// What splitting one read produced.
#[derive(Default, Debug, PartialEq, Eq)]
pub(crate) struct Filled {
    /// Entries up to and including the last one filled (the receive function's result).
    pub entries: usize,
    pub datagrams: usize,
    pub gro: usize,
    /// Coalesced datagrams that landed one segment per buffer (scattered reads).
    pub in_place: usize,
    pub oversize: usize,
    /// A datagram filled (or overflowed) its slot: move to the next tier.
    pub grow: bool,
}

/// How a read placed its datagrams: message `j` in buffer `j * stride`, at most `slot` bytes,
/// GRO super-datagrams to split or not.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Layout {
    pub stride: usize,
    pub slot: usize,
    pub gro: bool,
    /// Non-zero: the read scattered each message over its whole run of `stride` buffers in
    /// pieces of this many bytes, the run's last buffer taking the rest
    /// (`RecvBatch::recv_scattered`); `slot` is the most it offered in all.
    pub scatter: usize,
}

/// Turns the `got` messages of a read into entries: message `j` sits in `bufs[j * stride]`
/// (or, scattered, starts there); with `gro`, its segments are spread over the following
/// buffers of its run. Sizes of unused entries are set to 0.
pub(crate) fn split(
    bufs: &mut [&mut [u8]],
    sizes: &mut [usize],
    eps: &mut [Endpoint],
    meta: &[RecvMeta],
    layout: Layout,
    ep_for: impl Fn(&RecvMeta) -> Endpoint,
) -> Filled {
    let Layout {
        stride,
        slot,
        gro,
        scatter,
    } = layout;
    let n = bufs.len().min(sizes.len()).min(eps.len());
    let mut out = Filled::default();
    for (j, m) in meta.iter().enumerate() {
        let base = j * stride;
        if base >= n {
            break;
        }
        let room = stride.min(n - base);
        for s in sizes.iter_mut().skip(base).take(room) {
            *s = 0;
        }
        if m.truncated {
            out.oversize += 1;
            out.grow = true;
            continue;
        }
        if m.len == 0 {
            continue;
        }
        if !gro && m.len >= slot {
            // Complete (the kernel would have said MSG_TRUNC) but as large as the slot: the
            // next one may not fit. Grow now rather than lose it.
            out.grow = true;
        }
        let seg = match usize::from(m.gro_size) {
            g if g > 0 && m.len > g => g,
            _ => m.len,
        };
        let ep = ep_for(m);
        let segments = m.len.div_ceil(seg);
        if segments > 1 {
            out.gro += 1;
        }
        // Scattered over a whole run (a one-buffer run took the message whole): in pieces of
        // the segment size every segment is where it belongs; a message longer than a piece
        // is put back together otherwise. A run cut short (fewer entries than the read had
        // buffers) cannot be read back reliably.
        let scattered = scatter > 0 && stride > 1 && m.len > scatter;
        let in_place = scattered && scatter == seg && segments > 1;
        if scattered && (room < stride || !in_place && !gather(bufs, base, room, scatter, m.len)) {
            out.oversize += segments;
            continue;
        }
        if in_place {
            out.in_place += 1;
        }
        let run = Run {
            base,
            room,
            seg,
            len: m.len,
            in_place,
        };
        let filled = spread_segments(bufs, sizes, eps, run, ep, &mut out);
        out.datagrams += filled;
        if filled > 0 {
            out.entries = base + filled;
        }
    }
    out
}

/// One message's place in a read: its run starts at buffer `base` and has `room` entries; its
/// `len` bytes are segments of `seg`, already one per buffer when `in_place`.
#[derive(Clone, Copy)]
struct Run {
    base: usize,
    room: usize,
    seg: usize,
    len: usize,
    in_place: bool,
}

/// Gives each segment of the message in `run` an entry of its own, copying all but the first
/// out of the run's first buffer unless they are in place already; segments beyond the run's
/// room, or that a buffer cannot take, count as oversize. Returns the entries filled.
fn spread_segments(
    bufs: &mut [&mut [u8]],
    sizes: &mut [usize],
    eps: &mut [Endpoint],
    run: Run,
    ep: Endpoint,
    out: &mut Filled,
) -> usize {
    let Run {
        base,
        room,
        seg,
        len,
        in_place,
    } = run;
    let segments = len.div_ceil(seg);
    let mut filled = 0;
    for k in 0..segments {
        if k >= room {
            out.oversize += segments - k;
            break;
        }
        let start = k * seg;
        let end = (start + seg).min(len);
        if k > 0 && !in_place {
            // Buffers `base` (source) and `base + k` (destination) are distinct slices.
            let (head, tail) = bufs.split_at_mut(base + k);
            let (Some(src), Some(dst)) = (
                head.get(base).and_then(|b| b.get(start..end)),
                tail.first_mut().and_then(|b| b.get_mut(..end - start)),
            ) else {
                out.oversize += 1;
                continue;
            };
            dst.copy_from_slice(src);
        }
        sizes[base + k] = end - start;
        eps[base + k] = ep;
        filled = k + 1;
    }
    filled
}

/// Moves a message scattered over the whole run `bufs[base..base + room]` in `piece`-byte
/// pieces (the last buffer holding the rest) back into `bufs[base]` as `len` contiguous
/// bytes, for the split to cut at the real segment size (a read whose guess of that size was
/// wrong). False if the first buffer cannot hold it or the pieces do not cover `len`.
fn gather(bufs: &mut [&mut [u8]], base: usize, room: usize, piece: usize, len: usize) -> bool {
    let (head, tail) = bufs.split_at_mut(base + 1);
    let Some(dst) = head.get_mut(base).and_then(|b| b.get_mut(..len)) else {
        return false;
    };
    let mut at = piece.min(len);
    let rest = room.saturating_sub(1);
    for (k, src) in tail.iter().take(rest).enumerate() {
        if at >= len {
            break;
        }
        // Pieces are `piece` bytes but for the run's last, which took the rest (scattered
        // reads are of whole runs: `room` is the stride).
        let n = if k + 1 == rest {
            len - at
        } else {
            piece.min(len - at)
        }
        .min(src.len());
        dst[at..at + n].copy_from_slice(&src[..n]);
        at += n;
    }
    at >= len
}

#[cfg(test)]
mod tests {
    use super::*;

    const PIECE: usize = 100;
    const STRIDE: usize = 8;

    fn meta(len: usize, gro_size: u16) -> RecvMeta {
        RecvMeta {
            len,
            truncated: false,
            addr: Some("10.0.0.1:5".parse().unwrap()),
            pktinfo: None,
            gro_size,
        }
    }

    /// What `recv_scattered` makes of `msg` in a run of `bufs`: `piece`-byte pieces, the last
    /// buffer taking the rest.
    fn scatter(bufs: &mut [Vec<u8>], msg: &[u8], piece: usize) {
        let mut at = 0;
        let last = bufs.len() - 1;
        for (k, b) in bufs.iter_mut().enumerate() {
            let n = if k == last {
                msg.len() - at
            } else {
                piece.min(msg.len() - at)
            };
            b[..n].copy_from_slice(&msg[at..at + n]);
            at += n;
            if at == msg.len() {
                break;
            }
        }
    }

    /// Splits one message `m` scattered in `piece`-byte pieces over a run of `stride` buffers,
    /// with `entries` entries offered; the entries it filled, and what the split counted.
    fn split_one(
        storage: &mut [Vec<u8>],
        entries: usize,
        m: RecvMeta,
        stride: usize,
        piece: usize,
    ) -> (Vec<Vec<u8>>, Filled) {
        let mut bufs: Vec<&mut [u8]> = storage.iter_mut().map(|b| &mut b[..]).collect();
        let (mut sizes, mut eps) = (vec![0; entries], vec![Endpoint::default(); entries]);
        let layout = Layout {
            stride,
            slot: 4000,
            gro: stride > 1,
            scatter: piece,
        };
        let f = split(&mut bufs, &mut sizes, &mut eps, &[m], layout, |_| {
            Endpoint::default()
        });
        let got = (0..f.entries)
            .map(|i| bufs[i][..sizes[i]].to_vec())
            .collect();
        (got, f)
    }

    /// One scattered read of `msg`, split; the entries it filled.
    fn split_scattered(msg: &[u8], gro_size: u16, first_len: usize) -> (Vec<Vec<u8>>, Filled) {
        let mut storage: Vec<Vec<u8>> = (0..STRIDE)
            .map(|k| vec![0xcc; if k == 0 { first_len } else { 2000 }])
            .collect();
        scatter(&mut storage, msg, PIECE);
        split_one(
            &mut storage,
            STRIDE,
            meta(msg.len(), gro_size),
            STRIDE,
            PIECE,
        )
    }

    fn datagrams(n: usize, size: usize, tail: usize) -> (Vec<Vec<u8>>, Vec<u8>) {
        let mut d: Vec<Vec<u8>> = (0..n).map(|i| vec![i as u8 + 1; size]).collect();
        if tail > 0 {
            d.push(vec![0xee; tail]);
        }
        let joined = d.concat();
        (d, joined)
    }

    #[test]
    fn segments_of_the_guessed_size_are_used_where_they_landed() {
        let (want, msg) = datagrams(5, PIECE, 37);
        let (got, f) = split_scattered(&msg, PIECE as u16, 4000);
        assert_eq!(got, want);
        assert_eq!((f.datagrams, f.gro, f.in_place, f.oversize), (6, 1, 1, 0));
    }

    #[test]
    fn a_full_run_of_segments_uses_the_last_buffer_too() {
        // As many segments as buffers: the last lands in the piece that takes the rest.
        let (want, msg) = datagrams(STRIDE - 1, PIECE, 64);
        let (got, f) = split_scattered(&msg, PIECE as u16, 4000);
        assert_eq!(got, want);
        assert_eq!((f.datagrams, f.in_place, f.oversize), (STRIDE, 1, 0));
        // More segments than buffers: the excess is dropped, the rest delivered in place.
        let (want, msg) = datagrams(STRIDE + 2, PIECE, 0);
        let mut storage: Vec<Vec<u8>> = vec![vec![0; 2000]; STRIDE];
        scatter(&mut storage, &msg, PIECE);
        let m = meta(msg.len(), PIECE as u16);
        let (got, f) = split_one(&mut storage, STRIDE, m, STRIDE, PIECE);
        assert_eq!(got, want[..STRIDE]);
        assert_eq!(f.oversize, 2);
    }

    #[test]
    fn a_one_buffer_run_holds_its_message_whole() {
        let msg: Vec<u8> = (0..500).map(|i| i as u8).collect();
        let mut storage = [msg.clone()];
        let (got, f) = split_one(&mut storage, 1, meta(500, 0), 1, PIECE);
        assert_eq!((f.datagrams, f.oversize, got[0].len()), (1, 0, 500));
        assert_eq!(storage[0], msg);
    }

    #[test]
    fn a_scattered_run_cut_short_is_dropped_not_misread() {
        let (_, msg) = datagrams(4, 130, 0);
        let mut storage: Vec<Vec<u8>> = vec![vec![0; 2000]; STRIDE];
        scatter(&mut storage, &msg, PIECE);
        // Fewer entries than the read's run had buffers.
        let (_, f) = split_one(&mut storage, 5, meta(msg.len(), 130), STRIDE, PIECE);
        assert_eq!((f.datagrams, f.oversize), (0, 4));
    }

    #[test]
    fn segments_of_another_size_are_gathered_and_split() {
        for (size, gro) in [(70, 70u16), (130, 130), (250, 250)] {
            let (want, msg) = datagrams(6, size, 11);
            let (got, f) = split_scattered(&msg, gro, 4000);
            assert_eq!(got, want, "segments of {size}");
            assert_eq!((f.datagrams, f.oversize), (7, 0));
        }
    }

    #[test]
    fn a_lone_datagram_longer_or_shorter_than_a_piece_is_whole() {
        for len in [1, PIECE - 1, PIECE, PIECE + 1, 1000, 1500] {
            let msg: Vec<u8> = (0..len).map(|i| (i % 251) as u8).collect();
            let (got, f) = split_scattered(&msg, 0, 4000);
            assert_eq!(got, [msg], "{len} bytes");
            assert_eq!((f.datagrams, f.gro, f.oversize), (1, 0, 0));
        }
    }

    #[test]
    fn scattered_reads_split_like_contiguous_ones() {
        // Differential: for many message lengths, segment sizes and pieces, a scattered read
        // must give exactly the datagrams the kernel coalesced, in order.
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = |n: usize| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x % n as u64) as usize
        };
        for round in 0..3000 {
            let piece = 1 + next(300);
            let seg = 1 + next(400);
            let count = 1 + next(STRIDE + 2);
            let tail = next(seg);
            let len = (seg * count + tail).clamp(1, 3900);
            let msg: Vec<u8> = (0..len).map(|i| (i * 7 + round) as u8).collect();
            let gro = if len > seg { seg as u16 } else { 0 };
            let mut storage: Vec<Vec<u8>> = (0..STRIDE).map(|_| vec![0xcc; 4000]).collect();
            scatter(&mut storage, &msg, piece);
            let (got, f) = split_one(&mut storage, STRIDE, meta(len, gro), STRIDE, piece);
            let cut = if gro > 0 { seg } else { len };
            let want: Vec<&[u8]> = msg.chunks(cut).take(STRIDE).collect();
            assert_eq!(got, want, "len {len} seg {seg} piece {piece}");
            assert_eq!(f.oversize, msg.chunks(cut).count().saturating_sub(STRIDE));
        }
    }

    #[test]
    fn a_run_too_short_to_gather_into_is_dropped_not_fatal() {
        let (_, msg) = datagrams(4, 130, 0);
        let (got, f) = split_scattered(&msg, 130, 300);
        assert!(got.iter().all(|g| g.is_empty()));
        assert_eq!((f.datagrams, f.oversize), (0, 4));
    }
}
