//! Splitting what one `recvmmsg` read straight into the caller's buffers (used by the shared
//! sockets' reader and the pair sockets' readers alike).
//!
//! Message `j` of a read lands in buffer `j * stride`. With UDP GRO it may be a super-datagram
//! of equal-size segments (the last may be shorter): its first segment stays where it is and
//! the others are copied into the following buffers of its run of `stride`, the only copy on
//! this path (the device's buffers hold one packet each). Entries a read leaves unused get size
//! 0, which the device skips.

use vpn_sys::mmsg::RecvMeta;

use crate::Endpoint;

/// Most segments the kernel coalesces into one GRO read (`UDP_GRO_CNT_MAX`).
pub(in crate::linux) const GRO_SEGMENTS: usize = 64;

/// What splitting one read produced.
#[derive(Default, Debug, PartialEq, Eq)]
pub(in crate::linux) struct Filled {
    /// Entries up to and including the last one filled (the receive function's result).
    pub entries: usize,
    pub datagrams: usize,
    pub gro: usize,
    pub oversize: usize,
    /// A datagram filled (or overflowed) its slot: move to the next tier.
    pub grow: bool,
}

/// How a read placed its datagrams: message `j` in buffer `j * stride`, at most `slot` bytes,
/// GRO super-datagrams to split or not.
#[derive(Clone, Copy, Debug)]
pub(in crate::linux) struct Layout {
    pub stride: usize,
    pub slot: usize,
    pub gro: bool,
}

/// Turns the `got` messages of a read into entries: message `j` sits in `bufs[j * stride]`;
/// with `gro`, its segments are spread over the following buffers of its run. Sizes of unused
/// entries are set to 0.
pub(in crate::linux) fn split(
    bufs: &mut [&mut [u8]],
    sizes: &mut [usize],
    eps: &mut [Endpoint],
    meta: &[RecvMeta],
    layout: Layout,
    ep_for: impl Fn(&RecvMeta) -> Endpoint,
) -> Filled {
    let Layout { stride, slot, gro } = layout;
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
        let mut filled = 0;
        for k in 0..segments {
            if k >= room {
                out.oversize += segments - k;
                break;
            }
            let start = k * seg;
            let end = (start + seg).min(m.len);
            if k > 0 {
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
        out.datagrams += filled;
        if filled > 0 {
            out.entries = base + filled;
        }
    }
    out
}
