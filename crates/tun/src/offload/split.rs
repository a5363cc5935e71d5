//! GSO on the read path: turn one frame read from an `IFF_VNET_HDR` TUN (virtio header plus a
//! super-packet of up to 64 KiB) into MTU-sized packets with complete checksums
//! (`handleVirtioRead` in wireguard-go).
//!
//! The segmentation itself is tun-rs's `gso_split` (a port of wireguard-go's `gsoSplit`). This
//! module adds what it lacks for our contract: bounds-checked completion of a partial checksum
//! (tun-rs's `gso_none_checksum` indexes without checks), the header-length recomputation, and
//! "fill what fits" when the batch is too small (tun-rs refuses the whole frame instead).

use std::io;

use vpn_packet::ip;
use vpn_packet::tcp::{
    TcpError, TcpHeader, TcpHeaderMut, FIN as TCP_FLAG_FIN, PSH as TCP_FLAG_PSH,
};
use vpn_packet::udp::UDP_HEADER_LEN;

use super::checksum::checksum;
use super::{
    VirtioHdr, VIRTIO_NET_HDR_F_NEEDS_CSUM, VIRTIO_NET_HDR_GSO_ECN, VIRTIO_NET_HDR_GSO_NONE,
    VIRTIO_NET_HDR_GSO_TCPV4, VIRTIO_NET_HDR_GSO_TCPV6, VIRTIO_NET_HDR_GSO_UDP_L4,
    VIRTIO_NET_HDR_LEN,
};

/// What [`split_frame`] produced (the default: nothing).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Split {
    /// Packets written to `bufs[..packets]`.
    pub packets: usize,
    /// The frame was a GSO super-packet (it was segmented).
    pub segmented: bool,
    /// It had more segments than buffers: every buffer was filled and the rest dropped.
    pub truncated: bool,
}

/// What a frame holds, from its virtio header and packet headers (nothing written yet).
enum Layout {
    /// One packet; `NEEDS_CSUM` asks for its checksum to be completed.
    Single { needs_csum: bool },
    /// A super-packet of `segments` segments.
    Gso {
        v6: bool,
        tcp: bool,
        hdr_len: usize,
        segments: usize,
    },
}

/// Parses and validates a frame's layout. Malformed frames are errors, never panics.
fn layout(frame: &[u8]) -> io::Result<(VirtioHdr, Layout)> {
    let hdr =
        VirtioHdr::decode(frame).ok_or_else(|| invalid("frame shorter than virtio header"))?;
    let pkt = frame.get(VIRTIO_NET_HDR_LEN..).unwrap_or_default();
    if pkt.is_empty() {
        return Err(invalid("empty packet after virtio header"));
    }
    if hdr.gso_type == VIRTIO_NET_HDR_GSO_NONE {
        let needs_csum = hdr.flags & VIRTIO_NET_HDR_F_NEEDS_CSUM != 0;
        return Ok((hdr, Layout::Single { needs_csum }));
    }
    if hdr.gso_size == 0 {
        return Err(invalid("GSO frame with gso_size 0"));
    }
    let v6 = match ip::version(pkt) {
        Ok(4) => false,
        Ok(6) => true,
        _ => return Err(invalid("GSO frame is not IPv4 or IPv6")),
    };
    let base = hdr.gso_type & !VIRTIO_NET_HDR_GSO_ECN;
    let ecn = hdr.gso_type & VIRTIO_NET_HDR_GSO_ECN != 0;
    let tcp = match base {
        VIRTIO_NET_HDR_GSO_TCPV4 if !v6 => true,
        VIRTIO_NET_HDR_GSO_TCPV6 if v6 => true,
        VIRTIO_NET_HDR_GSO_UDP_L4 if !ecn => false,
        _ => return Err(invalid("GSO type does not match the packet")),
    };
    // hdr_len is not trusted: on forwarded traffic it can cover the whole first packet.
    let csum_start = usize::from(hdr.csum_start);
    let hdr_len = if tcp {
        let segment = pkt.get(csum_start..).unwrap_or_default();
        let tcph_len = match TcpHeader::parse(segment) {
            Ok(tcp) => tcp.header_len(),
            Err(TcpError::BadHeaderLength { .. }) => {
                return Err(invalid("TCP header length outside 20..=60"))
            }
            Err(_) => return Err(invalid("GSO packet shorter than its TCP header")),
        };
        csum_start + tcph_len
    } else {
        csum_start + UDP_HEADER_LEN
    };
    if pkt.len() < hdr_len || u16::try_from(hdr_len).is_err() {
        return Err(invalid("GSO packet shorter than its headers"));
    }
    let segments = (pkt.len() - hdr_len).div_ceil(usize::from(hdr.gso_size));
    Ok((
        hdr,
        Layout::Gso {
            v6,
            tcp,
            hdr_len,
            segments,
        },
    ))
}

/// How many packets [`split_frame`] would make of `frame`, without touching it: lets a reader
/// that batches several frames check that the next one fits before splitting it.
pub fn frame_packets(frame: &[u8]) -> io::Result<usize> {
    Ok(match layout(frame)?.1 {
        Layout::Single { .. } => 1,
        Layout::Gso { segments, .. } => segments,
    })
}

/// For a frame read straight into a packet buffer (virtio header just before the packet):
/// completes a single packet in place and returns its length, or `None` for a super-packet,
/// which has to be split out of a copy.
pub fn finish_single_in_place(frame: &mut [u8]) -> io::Result<Option<usize>> {
    let (hdr, layout) = layout(frame)?;
    match layout {
        Layout::Single { needs_csum } => {
            let pkt = &mut frame[VIRTIO_NET_HDR_LEN..];
            finish_single(&hdr, needs_csum, pkt)?;
            Ok(Some(pkt.len()))
        }
        Layout::Gso { .. } => Ok(None),
    }
}

/// Completes a single packet's checksum if its header asks for it.
fn finish_single(hdr: &VirtioHdr, needs_csum: bool, pkt: &mut [u8]) -> io::Result<()> {
    if needs_csum {
        complete_checksum(hdr, pkt)?;
    }
    Ok(())
}

/// Splits `frame` (virtio header + packet, as read from the fd) into `bufs[i][offset..]`,
/// setting `sizes[i]`. Malformed frames are errors, never panics.
pub fn split_frame<B: AsRef<[u8]> + AsMut<[u8]>>(
    frame: &mut [u8],
    bufs: &mut [B],
    sizes: &mut [usize],
    offset: usize,
) -> io::Result<Split> {
    if bufs.is_empty() || sizes.len() < bufs.len() {
        return Err(invalid("need at least one buffer and a size per buffer"));
    }
    let (hdr, layout) = layout(frame)?;
    let pkt = &mut frame[VIRTIO_NET_HDR_LEN..];
    let (v6, tcp, hdr_len, segments) = match layout {
        Layout::Single { needs_csum } => {
            finish_single(&hdr, needs_csum, pkt)?;
            let out = bufs[0]
                .as_mut()
                .get_mut(offset..)
                .and_then(|b| b.get_mut(..pkt.len()))
                .ok_or_else(crate::packet_too_big)?;
            out.copy_from_slice(pkt);
            sizes[0] = pkt.len();
            return Ok(Split {
                packets: 1,
                segmented: false,
                truncated: false,
            });
        }
        Layout::Gso {
            v6,
            tcp,
            hdr_len,
            segments,
        } => (v6, tcp, hdr_len, segments),
    };
    let csum_start = usize::from(hdr.csum_start);
    let gso = usize::from(hdr.gso_size);
    let mut len = pkt.len();
    let truncated = segments > bufs.len();
    if truncated {
        // Keep the segments that fit; none of them is the last, so FIN and PSH go.
        len = hdr_len + bufs.len() * gso;
        if tcp {
            // layout() found the TCP header at csum_start.
            let segment = pkt.get_mut(csum_start..).unwrap_or_default();
            if let Ok(mut th) = TcpHeaderMut::parse(segment) {
                th.set_flags(th.flags() & !(TCP_FLAG_FIN | TCP_FLAG_PSH));
            }
        }
    }
    // layout() checked that hdr_len fits a u16.
    let packets = segment(
        &mut pkt[..len],
        &hdr,
        hdr_len as u16,
        bufs,
        sizes,
        offset,
        v6,
    )?;
    Ok(Split {
        packets,
        segmented: true,
        truncated,
    })
}

/// The segmentation of a super-packet (its header length recomputed): tun-rs's `gso_split`.
#[cfg(target_os = "linux")]
fn segment<B: AsRef<[u8]> + AsMut<[u8]>>(
    pkt: &mut [u8],
    hdr: &VirtioHdr,
    hdr_len: u16,
    bufs: &mut [B],
    sizes: &mut [usize],
    offset: usize,
    v6: bool,
) -> io::Result<usize> {
    let tun_hdr = tun_rs::VirtioNetHdr {
        flags: hdr.flags,
        gso_type: hdr.gso_type,
        hdr_len,
        gso_size: hdr.gso_size,
        csum_start: hdr.csum_start,
        csum_offset: hdr.csum_offset,
    };
    tun_rs::gso_split(pkt, tun_hdr, bufs, sizes, offset, v6)
}

/// tun-rs has no `gso_split` for Android, so an Android TUN never asks the kernel for
/// super-packets (`LinuxTun` keeps its read offloads off there): one that comes anyway is
/// refused, not split.
#[cfg(target_os = "android")]
fn segment<B>(
    _pkt: &mut [u8],
    _hdr: &VirtioHdr,
    _hdr_len: u16,
    _bufs: &mut [B],
    _sizes: &mut [usize],
    _offset: usize,
    _v6: bool,
) -> io::Result<usize> {
    Err(invalid(
        "a GSO super-packet from a TUN without read offloads",
    ))
}

/// Completes a CHECKSUM_PARTIAL packet: the field the header points at holds the
/// pseudo-header sum; replace it with the full checksum over the bytes from `csum_start`.
fn complete_checksum(hdr: &VirtioHdr, pkt: &mut [u8]) -> io::Result<()> {
    let mut field = hdr
        .partial_checksum(pkt)
        .ok_or_else(|| invalid("checksum field outside the packet"))?;
    let seed = u64::from(field.get());
    field.set(0);
    let c = !checksum(field.covered(), seed);
    field.set(c);
    Ok(())
}

fn invalid(msg: &'static str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, msg)
}

#[cfg(test)]
mod tests;
