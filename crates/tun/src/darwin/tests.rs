//! The utun rules against the simulated darwin kernel.

use std::io;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering::Relaxed};
use std::sync::Arc;

use vpn_darwinbatch::sim::SimKernel;
use vpn_darwinbatch::{Kernel, MAX_BATCH, SYSPROTO_CONTROL, UTUN_OPT_MAX_PENDING_PACKETS};

use super::io::{batch_size, raise_pending_queue, MtuCache, Ready, UtunIo, SLOT_SLACK};

const OFFSET: usize = 16;

/// A utun on a fresh simulated kernel (leaked: the data path holds `&'static dyn Kernel`).
struct Rig {
    k: &'static SimKernel,
    fd: RawFd,
    io: UtunIo,
    /// What the interface's MTU is now (the MTU cache's source).
    mtu: Arc<AtomicU32>,
    /// How often the MTU was queried.
    queries: Arc<AtomicUsize>,
}

fn rig(batch: usize, page: usize, mtu: u32) -> Rig {
    let k: &'static SimKernel = Box::leak(Box::new(SimKernel::new()));
    let fd = k.utun();
    raise_pending_queue(k, fd, "utun9");
    let (src, queries) = (Arc::new(AtomicU32::new(mtu)), Arc::new(AtomicUsize::new(0)));
    let (s, q) = (src.clone(), queries.clone());
    let cache = Arc::new(MtuCache::new(Box::new(move || {
        q.fetch_add(1, Relaxed);
        Ok(s.load(Relaxed))
    })));
    let io = UtunIo::new(k, fd, batch, page, cache);
    Rig {
        k,
        fd,
        io,
        mtu: src,
        queries,
    }
}

/// An IPv4 packet of `len` bytes whose header claims `len`, marked with `tag`.
fn v4(len: usize, tag: u8) -> Vec<u8> {
    let mut p = vec![tag; len];
    p[0] = 0x45;
    p[2..4].copy_from_slice(&(len as u16).to_be_bytes());
    p
}

/// An IPv6 packet of `len` (≥ 40) bytes whose header claims `len`, marked with `tag`.
fn v6(len: usize, tag: u8) -> Vec<u8> {
    let mut p = vec![tag; len];
    p[0] = 0x60;
    p[4..6].copy_from_slice(&((len - 40) as u16).to_be_bytes());
    p
}

/// A wait that must not happen (the test queued everything it reads).
fn no_wait(r: Ready) -> io::Result<()> {
    Err(io::Error::other(format!("unexpected wait for {r:?}")))
}

/// Reads with `n` buffers of `size` bytes; the packets read.
fn read(
    rig: &Rig,
    n: usize,
    size: usize,
    wait: &dyn Fn(Ready) -> io::Result<()>,
) -> io::Result<Vec<Vec<u8>>> {
    let mut store = vec![vec![0u8; size]; n];
    let mut bufs: Vec<&mut [u8]> = store.iter_mut().map(|b| &mut b[..]).collect();
    let mut sizes = vec![0; n];
    let got = rig.io.read(&mut bufs, &mut sizes, OFFSET, wait)?;
    Ok((0..got)
        .map(|i| bufs[i][OFFSET..OFFSET + sizes[i]].to_vec())
        .collect())
}

/// Writes `packets`, each at `OFFSET` in a buffer with `spare` bytes after it; returns the
/// result and the buffers (to check the headroom).
fn write(
    rig: &Rig,
    packets: &[Vec<u8>],
    wait: &dyn Fn(Ready) -> io::Result<()>,
) -> (io::Result<usize>, Vec<Vec<u8>>) {
    let mut store: Vec<Vec<u8>> = packets
        .iter()
        .map(|p| {
            let mut b = vec![0xee; OFFSET + p.len() + 8];
            b[OFFSET..OFFSET + p.len()].copy_from_slice(p);
            b
        })
        .collect();
    let sizes: Vec<usize> = packets.iter().map(Vec::len).collect();
    let mut bufs: Vec<&mut [u8]> = store.iter_mut().map(|b| &mut b[..]).collect();
    let r = rig.io.write(&mut bufs, &sizes, OFFSET, wait);
    (r, store)
}

fn framed(p: &[u8]) -> Vec<u8> {
    let mut f = vec![0, 0, 0, if p[0] >> 4 == 6 { 30 } else { 2 }];
    f.extend_from_slice(p);
    f
}

#[test]
fn pending_queue_is_raised_to_512_with_option_16_at_level_2() {
    let r = rig(MAX_BATCH, 4096, 1500);
    assert_eq!((SYSPROTO_CONTROL, UTUN_OPT_MAX_PENDING_PACKETS), (2, 16));
    assert_eq!(r.k.option(r.fd, 2, 16), Some(512));
    assert_eq!(r.k.max_pending(r.fd), 512);
}

#[test]
fn a_refused_pending_queue_option_is_ignored_and_reads_still_work() {
    let k: &'static SimKernel = Box::leak(Box::new(SimKernel::new()));
    let fd = k.utun();
    k.refuse_options(fd);
    raise_pending_queue(k, fd, "utun9");
    assert_eq!(k.max_pending(fd), 1);
    let io = UtunIo::new(
        k,
        fd,
        MAX_BATCH,
        4096,
        Arc::new(MtuCache::new(Box::new(|| Ok(1500)))),
    );
    k.inject_packet(fd, &v4(60, 1));
    k.inject_packet(fd, &v4(60, 2));
    let mut a = [0u8; 100];
    let mut b = [0u8; 100];
    let mut sizes = [0; 2];
    // The kernel's default queue hands out one packet per receive.
    assert_eq!(
        io.read(&mut [&mut a, &mut b], &mut sizes, OFFSET, &no_wait)
            .unwrap(),
        1
    );
    assert_eq!(
        io.read(&mut [&mut a, &mut b], &mut sizes, OFFSET, &no_wait)
            .unwrap(),
        1
    );
}

#[test]
fn batch_size_is_128_when_batching_is_supported_else_1() {
    assert_eq!(batch_size(true), 128);
    assert_eq!(batch_size(false), 1);
    assert_eq!(rig(batch_size(false), 4096, 1500).io.batch_size(), 1);
}

#[test]
fn batched_read_strips_headers_into_the_callers_buffers_in_one_call() {
    let r = rig(MAX_BATCH, 4096, 1500);
    let packets = [v4(60, 1), v6(1280, 2), v4(1500, 3)];
    for p in &packets {
        r.k.inject_packet(r.fd, p);
    }
    assert_eq!(read(&r, 8, 2048, &no_wait).unwrap(), packets.to_vec());
    assert_eq!(r.k.stats(r.fd).recvmsg_x, 1);
}

#[test]
fn batched_read_fills_at_most_as_many_buffers_as_given() {
    let r = rig(MAX_BATCH, 4096, 1500);
    for i in 0..5 {
        r.k.inject_packet(r.fd, &v4(40, i));
    }
    assert_eq!(
        read(&r, 2, 2048, &no_wait).unwrap(),
        vec![v4(40, 0), v4(40, 1)]
    );
    assert_eq!(r.k.pending(r.fd), 3);
}

#[test]
fn a_packet_filling_its_slot_at_stride_mtu_plus_64_is_delivered_whole() {
    let r = rig(MAX_BATCH, 4096, 1280);
    // Slot = MTU + 64 bytes, 4 of them the header: the largest packet that fits whole.
    let p = v4(1280 + SLOT_SLACK - 4, 7);
    r.k.inject_packet(r.fd, &p);
    assert_eq!(read(&r, 4, 2048, &no_wait).unwrap(), vec![p]);
    assert_eq!(r.io.drops.mtu_races.load(Relaxed), 0);
}

#[test]
fn a_packet_that_fills_its_slot_while_claiming_more_is_dropped_and_the_mtu_cache_cleared() {
    let r = rig(MAX_BATCH, 4096, 1280);
    assert!(read(&r, 1, 2048, &no_wait).is_err()); // learns MTU 1280
    assert_eq!(r.queries.load(Relaxed), 1);
    // The MTU grew to 1500 behind our back: a 1500-byte packet is cut at the old stride.
    r.mtu.store(1500, Relaxed);
    let big = v4(1500, 9);
    r.k.inject_packet(r.fd, &big);
    r.k.inject_packet(r.fd, &v6(100, 1));
    assert_eq!(read(&r, 4, 2048, &no_wait).unwrap(), vec![v6(100, 1)]);
    assert_eq!(r.io.drops.mtu_races.load(Relaxed), 1);
    // The next read re-queries the MTU and takes the packet whole.
    r.k.inject_packet(r.fd, &big);
    assert_eq!(read(&r, 4, 2048, &no_wait).unwrap(), vec![big]);
    assert_eq!(r.queries.load(Relaxed), 2);
}

#[test]
fn a_read_whose_packets_were_all_dropped_reads_again() {
    let r = rig(MAX_BATCH, 4096, 1280);
    r.k.inject_frame(r.fd, &[0, 0]); // a runt
    let waits = AtomicUsize::new(0);
    let wait = |_: Ready| {
        waits.fetch_add(1, Relaxed);
        r.k.inject_packet(r.fd, &v4(40, 5));
        Ok(())
    };
    assert_eq!(read(&r, 4, 2048, &wait).unwrap(), vec![v4(40, 5)]);
    assert_eq!(
        (waits.load(Relaxed), r.io.drops.runts.load(Relaxed)),
        (1, 1)
    );
}

#[test]
fn read_waits_for_readability_on_eagain() {
    for batch in [1, MAX_BATCH] {
        let r = rig(batch, 4096, 1500);
        let waits = AtomicUsize::new(0);
        let wait = |what: Ready| {
            assert_eq!(what, Ready::Read);
            waits.fetch_add(1, Relaxed);
            r.k.inject_packet(r.fd, &v4(40, 5));
            Ok(())
        };
        r.k.fail_next(r.fd, &[libc::EINTR]);
        assert_eq!(read(&r, 4, 2048, &wait).unwrap(), vec![v4(40, 5)]);
        assert_eq!(waits.load(Relaxed), 1, "batch {batch}");
    }
}

#[test]
fn a_wait_error_ends_the_read() {
    let r = rig(MAX_BATCH, 4096, 1500);
    let closed = |_: Ready| Err(io::Error::new(io::ErrorKind::BrokenPipe, "closed"));
    assert_eq!(
        read(&r, 4, 2048, &closed).unwrap_err().kind(),
        io::ErrorKind::BrokenPipe
    );
}

#[test]
fn unbatched_read_lands_the_header_in_the_4_bytes_before_offset() {
    let r = rig(1, 4096, 1500);
    let p = v6(200, 4);
    r.k.inject_packet(r.fd, &p);
    let mut buf = vec![0u8; 2048];
    let mut sizes = [0];
    assert_eq!(
        r.io.read(&mut [&mut buf[..]], &mut sizes, OFFSET, &no_wait)
            .unwrap(),
        1
    );
    assert_eq!(sizes[0], 200);
    assert_eq!(&buf[OFFSET - 4..OFFSET], &[0, 0, 0, 30]);
    assert_eq!(&buf[OFFSET..OFFSET + 200], &p[..]);
}

#[test]
fn packets_larger_than_the_callers_buffer_are_dropped() {
    let r = rig(MAX_BATCH, 4096, 1500);
    r.k.inject_packet(r.fd, &v4(1400, 1));
    r.k.inject_packet(r.fd, &v4(100, 2));
    assert_eq!(
        read(&r, 4, OFFSET + 200, &no_wait).unwrap(),
        vec![v4(100, 2)]
    );
    assert_eq!(r.io.drops.oversized.load(Relaxed), 1);
}

#[test]
fn offsets_without_room_for_the_header_are_rejected() {
    let r = rig(MAX_BATCH, 4096, 1500);
    let mut buf = [0u8; 64];
    let e =
        r.io.read(&mut [&mut buf[..]], &mut [0], 3, &no_wait)
            .unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
    let e =
        r.io.write(&mut [&mut buf[..]], &[20], 3, &no_wait)
            .unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
}

#[test]
fn batched_write_sends_from_the_callers_buffers_with_the_header_before_offset() {
    let r = rig(MAX_BATCH, 4096, 1500);
    let packets = vec![v4(60, 1), v6(1280, 2), v4(1500, 3)];
    let (res, bufs) = write(&r, &packets, &no_wait);
    assert_eq!(res.unwrap(), 3);
    let want: Vec<Vec<u8>> = packets.iter().map(|p| framed(p)).collect();
    assert_eq!(r.k.take_written(r.fd), want);
    assert_eq!(r.k.stats(r.fd).sendmsg_x, 1);
    assert_eq!(&bufs[1][OFFSET - 4..OFFSET], &[0, 0, 0, 30]);
    assert_eq!(
        &bufs[0][..OFFSET - 4],
        &[0xee; OFFSET - 4],
        "only 4 bytes of headroom used"
    );
}

#[test]
fn batched_write_falls_back_to_one_write_per_packet_above_the_page_size() {
    for page in [4096, 16384] {
        let r = rig(MAX_BATCH, page, 65535);
        // packet + header exactly a page: still batched.
        let (res, _) = write(&r, &[v4(40, 1), v4(page - 4, 2)], &no_wait);
        res.unwrap();
        assert_eq!((r.k.stats(r.fd).sendmsg_x, r.k.stats(r.fd).writes), (1, 0));
        // One byte more: every packet gets its own write.
        let packets = vec![v4(40, 1), v4(page - 3, 2), v6(80, 3)];
        let (res, _) = write(&r, &packets, &no_wait);
        res.unwrap();
        assert_eq!(
            (r.k.stats(r.fd).sendmsg_x, r.k.stats(r.fd).writes),
            (1, 3),
            "page {page}"
        );
        let written = r.k.take_written(r.fd);
        assert_eq!(
            written[2..],
            packets.iter().map(|p| framed(p)).collect::<Vec<_>>()[..]
        );
    }
}

#[test]
fn write_stops_at_the_first_non_ip_packet() {
    for batch in [1, MAX_BATCH] {
        let r = rig(batch, 4096, 1500);
        let packets = vec![v4(40, 1), vec![0x00; 30], v6(60, 3)];
        let (res, _) = write(&r, &packets, &no_wait);
        assert_eq!(res.unwrap_err().raw_os_error(), Some(libc::EAFNOSUPPORT));
        assert_eq!(
            r.k.take_written(r.fd),
            vec![framed(&packets[0])],
            "batch {batch}"
        );
    }
}

#[test]
fn an_empty_packet_is_not_ip_and_an_out_of_range_size_is_invalid() {
    let r = rig(MAX_BATCH, 4096, 1500);
    let (res, _) = write(&r, &[vec![]], &no_wait);
    assert_eq!(res.unwrap_err().raw_os_error(), Some(libc::EAFNOSUPPORT));
    let mut buf = [0x45u8; 40];
    let e =
        r.io.write(&mut [&mut buf[..]], &[100], OFFSET, &no_wait)
            .unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
    assert!(r.k.take_written(r.fd).is_empty());
}

#[test]
fn batched_write_resumes_after_a_short_send() {
    let r = rig(MAX_BATCH, 4096, 1500);
    r.k.limit_accepts(r.fd, &[1, 2]);
    let packets: Vec<Vec<u8>> = (0..5).map(|i| v4(40 + i, i as u8)).collect();
    let (res, _) = write(&r, &packets, &no_wait);
    assert_eq!(res.unwrap(), 5);
    let want: Vec<Vec<u8>> = packets.iter().map(|p| framed(p)).collect();
    assert_eq!(r.k.take_written(r.fd), want);
    assert_eq!(r.k.stats(r.fd).sendmsg_x, 3);
}

#[test]
fn a_send_that_accepts_nothing_drops_the_rest_instead_of_spinning() {
    let r = rig(MAX_BATCH, 4096, 1500);
    r.k.limit_accepts(r.fd, &[2, 0]);
    let packets: Vec<Vec<u8>> = (0..5).map(|i| v4(40, i)).collect();
    let (res, _) = write(&r, &packets, &no_wait);
    assert_eq!(res.unwrap_err().kind(), io::ErrorKind::WriteZero);
    assert_eq!(r.k.take_written(r.fd).len(), 2);
    assert_eq!(r.k.stats(r.fd).sendmsg_x, 2);
}

#[test]
fn write_waits_for_writability_on_eagain() {
    for batch in [1, MAX_BATCH] {
        let r = rig(batch, 4096, 1500);
        r.k.fail_next(r.fd, &[libc::EAGAIN, libc::EINTR]);
        let waits = AtomicUsize::new(0);
        let wait = |what: Ready| {
            assert_eq!(what, Ready::Write);
            waits.fetch_add(1, Relaxed);
            Ok(())
        };
        let (res, _) = write(&r, &[v4(40, 1), v4(40, 2)], &wait);
        assert_eq!(res.unwrap(), 2);
        assert_eq!(waits.load(Relaxed), 1);
        assert_eq!(r.k.take_written(r.fd).len(), 2);
    }
}

#[test]
fn unbatched_write_uses_one_write_per_packet() {
    let r = rig(1, 4096, 1500);
    let (res, _) = write(&r, &[v4(40, 1), v6(60, 2), v4(50, 3)], &no_wait);
    assert_eq!(res.unwrap(), 3);
    assert_eq!((r.k.stats(r.fd).writes, r.k.stats(r.fd).sendmsg_x), (3, 0));
}

#[test]
fn writes_larger_than_a_batch_take_several_calls() {
    let r = rig(MAX_BATCH, 4096, 1500);
    let packets: Vec<Vec<u8>> = (0..200).map(|i| v4(40, i as u8)).collect();
    let (res, _) = write(&r, &packets, &no_wait);
    assert_eq!(res.unwrap(), 200);
    assert_eq!(r.k.stats(r.fd).sendmsg_x, 2);
    assert_eq!(r.k.take_written(r.fd).len(), 200);
}

#[test]
fn concurrent_writers_each_take_a_pooled_send_state() {
    let r = rig(MAX_BATCH, 4096, 1500);
    std::thread::scope(|s| {
        for t in 0..4u8 {
            let r = &r;
            s.spawn(move || {
                for _ in 0..50 {
                    let (res, _) = write(r, &[v4(40, t), v4(41, t)], &no_wait);
                    assert_eq!(res.unwrap(), 2);
                }
            });
        }
    });
    let written = r.k.take_written(r.fd);
    assert_eq!(written.len(), 400);
    for t in 0..4u8 {
        assert_eq!(written.iter().filter(|f| f[5] == t).count(), 100);
    }
}

#[test]
fn sim_rejects_frames_without_an_ip_family_header() {
    // The simulated kernel checks what we write: a frame without its header fails.
    let k = SimKernel::new();
    let fd = k.utun();
    assert!(k.write(fd, &v4(40, 1)).is_err());
    assert!(k.write(fd, &framed(&v4(40, 1))).is_ok());
}
