//! A UDP relay that replays: datagrams from the front peer go to the target from a second
//! socket, answers come back to the last front sender. Every datagram is forwarded twice, and
//! every eighth one is followed by a datagram from up to 64 forwards earlier, so the receiver
//! sees exact duplicates and old counters of authentic packets: its replay filter must drop
//! them while the originals keep the tunnel going.

use std::net::{SocketAddr, ToSocketAddrs, UdpSocket};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const RING: usize = 64;
const OLD_EVERY: u64 = 8;

/// Remembers recent datagrams of one direction for replay, in one preallocated ring.
pub struct Replayer {
    slots: Vec<Vec<u8>>,
    next: usize,
    seen: u64,
}

impl Replayer {
    pub fn new() -> Replayer {
        Replayer {
            slots: (0..RING).map(|_| Vec::with_capacity(2048)).collect(),
            next: 0,
            seen: 0,
        }
    }

    /// Records `d`; returns an older datagram to replay now, if it is time for one.
    pub fn record(&mut self, d: &[u8]) -> Option<&[u8]> {
        let slot = &mut self.slots[self.next];
        slot.clear();
        slot.extend_from_slice(d);
        self.next = (self.next + 1) % RING;
        self.seen += 1;
        if self.seen % OLD_EVERY != 0 || self.seen <= RING as u64 {
            return None;
        }
        // The slot about to be overwritten next is the oldest one.
        Some(&self.slots[self.next])
    }
}

impl Default for Replayer {
    fn default() -> Self {
        Replayer::new()
    }
}

fn resolve(a: &str) -> Result<SocketAddr, String> {
    a.to_socket_addrs()
        .map_err(|e| format!("{a}: {e}"))?
        .next()
        .ok_or_else(|| format!("{a}: no address"))
}

pub fn run(listen: &str, target: &str, dur: Duration) -> Result<String, String> {
    let listen = resolve(listen)?;
    let target = resolve(target)?;
    let front = UdpSocket::bind(listen).map_err(|e| format!("bind {listen}: {e}"))?;
    let any = if target.is_ipv4() {
        "0.0.0.0:0"
    } else {
        "[::]:0"
    };
    let back = UdpSocket::bind(any).map_err(|e| format!("bind {any}: {e}"))?;
    for s in [&front, &back] {
        s.set_read_timeout(Some(Duration::from_millis(100)))
            .map_err(|e| e.to_string())?;
    }
    let deadline = Instant::now() + dur;
    let peer: Arc<Mutex<Option<SocketAddr>>> = Arc::new(Mutex::new(None));
    let (fwd, replayed) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));

    // Answers: target -> last front sender, duplicated and replayed the same way.
    let (front2, back2) = (
        front.try_clone().map_err(|e| e.to_string())?,
        back.try_clone().map_err(|e| e.to_string())?,
    );
    let (peer2, fwd2, replayed2) = (peer.clone(), fwd.clone(), replayed.clone());
    let answers = std::thread::spawn(move || {
        let mut buf = vec![0u8; 65_536];
        let mut rep = Replayer::new();
        while Instant::now() < deadline {
            let Ok((n, _)) = back2.recv_from(&mut buf) else {
                continue;
            };
            let Some(to) = *peer2.lock().unwrap_or_else(|p| p.into_inner()) else {
                continue;
            };
            let d = &buf[..n];
            let _ = front2.send_to(d, to);
            let _ = front2.send_to(d, to);
            fwd2.fetch_add(1, Ordering::Relaxed);
            if let Some(old) = rep.record(d) {
                let _ = front2.send_to(old, to);
                replayed2.fetch_add(1, Ordering::Relaxed);
            }
        }
    });

    let mut buf = vec![0u8; 65_536];
    let mut rep = Replayer::new();
    while Instant::now() < deadline {
        let Ok((n, from)) = front.recv_from(&mut buf) else {
            continue;
        };
        *peer.lock().unwrap_or_else(|p| p.into_inner()) = Some(from);
        let d = &buf[..n];
        let _ = back.send_to(d, target);
        let _ = back.send_to(d, target);
        fwd.fetch_add(1, Ordering::Relaxed);
        if let Some(old) = rep.record(d) {
            let _ = back.send_to(old, target);
            replayed.fetch_add(1, Ordering::Relaxed);
        }
    }
    let _ = answers.join();
    Ok(format!(
        "relay: {} datagrams forwarded twice, {} old ones replayed",
        fwd.load(Ordering::Relaxed),
        replayed.load(Ordering::Relaxed)
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replays_only_old_datagrams_at_the_stated_rate() {
        let mut r = Replayer::new();
        let mut replays = Vec::new();
        for i in 0..(RING as u32 * 4) {
            if let Some(old) = r.record(&i.to_le_bytes()) {
                let old = u32::from_le_bytes(old.try_into().unwrap());
                assert_eq!(old, i + 1 - RING as u32, "the oldest slot");
                replays.push(old);
            }
        }
        assert_eq!(replays.len() as u64, (RING as u64 * 3) / OLD_EVERY);
    }

    #[test]
    fn relays_both_ways_with_duplicates() {
        let target = UdpSocket::bind("127.0.0.1:0").unwrap();
        target
            .set_read_timeout(Some(Duration::from_secs(2)))
            .unwrap();
        let probe = UdpSocket::bind("127.0.0.1:0").unwrap();
        let port = probe.local_addr().unwrap().port();
        drop(probe);
        let listen = format!("127.0.0.1:{port}");
        let t = target.local_addr().unwrap().to_string();
        let l2 = listen.clone();
        let relay = std::thread::spawn(move || run(&l2, &t, Duration::from_millis(800)));
        std::thread::sleep(Duration::from_millis(100));
        let client = UdpSocket::bind("127.0.0.1:0").unwrap();
        client
            .set_read_timeout(Some(Duration::from_secs(2)))
            .unwrap();
        client.send_to(b"hello", &listen).unwrap();
        let mut buf = [0u8; 16];
        let (n, back) = target.recv_from(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"hello");
        assert_eq!(target.recv_from(&mut buf).unwrap().0, 5, "the duplicate");
        target.send_to(b"world", back).unwrap();
        let (n, _) = client.recv_from(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"world");
        let summary = relay.join().unwrap().unwrap();
        assert!(summary.contains("2 datagrams forwarded"), "{summary}");
    }
}
