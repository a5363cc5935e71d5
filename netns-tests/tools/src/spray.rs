//! Hostile datagrams at a WireGuard listen port: every shape a parser can trip on. Paced in
//! bursts so the daemon under test must cope while its tunnel still carries traffic.

use crate::rng::Rng;
use std::net::{SocketAddr, ToSocketAddrs, UdpSocket};
use std::time::{Duration, Instant};

/// WireGuard message sizes (type 1 initiation, 2 response, 3 cookie reply, 4 transport minimum).
const SIZES: [usize; 4] = [148, 92, 64, 32];
/// The largest UDP payload over IPv4; over IPv6 the same fits (65 527 would too).
const MAX_UDP: usize = 65_507;
/// Datagrams per burst and the pause between bursts: about 30 000 datagrams per second at most.
const BURST: usize = 32;
const PAUSE: Duration = Duration::from_millis(1);

/// The shapes sent, in rotation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Uniformly random bytes of a random length up to 1500.
    Random,
    /// A valid type byte, zero reserved bytes, the exact message size, random content.
    Shaped,
    /// A valid type byte cut short of its message size (including zero-length datagrams).
    Truncated,
    /// A transport header followed by far more than any MTU: up to the largest UDP payload.
    Oversized,
    /// A valid size and type with non-zero reserved bytes.
    BadReserved,
    /// Types 0 and 5..=255.
    BadType,
}

pub const KINDS: [Kind; 6] = [
    Kind::Random,
    Kind::Shaped,
    Kind::Truncated,
    Kind::Oversized,
    Kind::BadReserved,
    Kind::BadType,
];

/// Writes one datagram of `kind` into `buf` (at least [`MAX_UDP`] bytes) and returns its length.
pub fn datagram(kind: Kind, rng: &mut Rng, buf: &mut [u8]) -> usize {
    let t = rng.below(4);
    let len = match kind {
        Kind::Random => rng.below(1501),
        Kind::Shaped | Kind::BadReserved | Kind::BadType => {
            // Transport messages carry a random payload length on top of the 32-byte minimum.
            SIZES[t] + if t == 3 { rng.below(1420) } else { 0 }
        }
        Kind::Truncated => rng.below(SIZES[t]),
        Kind::Oversized => 1501 + rng.below(MAX_UDP - 1500),
    }
    .min(buf.len());
    let out = &mut buf[..len];
    rng.fill(out);
    if len >= 4 && kind != Kind::Random {
        out[0] = match kind {
            Kind::BadType => [0u8, 5, 0x81, 0xff][t],
            Kind::Oversized => 4,
            _ => t as u8 + 1,
        };
        if kind != Kind::BadReserved {
            out[1..4].fill(0);
        } else if out[1..4] == [0, 0, 0] {
            out[1] = 1;
        }
    } else if let (Kind::Truncated, Some(b)) = (kind, out.first_mut()) {
        *b = t as u8 + 1;
    }
    len
}

pub fn run(addr: &str, dur: Duration) -> Result<String, String> {
    let target: SocketAddr = addr
        .to_socket_addrs()
        .map_err(|e| format!("{addr}: {e}"))?
        .next()
        .ok_or_else(|| format!("{addr}: no address"))?;
    let bind: SocketAddr = if target.is_ipv4() {
        "0.0.0.0:0"
    } else {
        "[::]:0"
    }
    .parse()
    .map_err(|e| format!("{e}"))?;
    let sock = UdpSocket::bind(bind).map_err(|e| format!("bind: {e}"))?;
    let mut rng = Rng::from_env();
    let seed = rng.seed();
    let mut buf = vec![0u8; MAX_UDP];
    let mut counts = [0u64; KINDS.len()];
    let mut errors = 0u64;
    let deadline = Instant::now() + dur;
    let mut i = 0usize;
    while Instant::now() < deadline {
        for _ in 0..BURST {
            let k = i % KINDS.len();
            i += 1;
            let n = datagram(KINDS[k], &mut rng, &mut buf);
            match sock.send_to(&buf[..n], target) {
                Ok(_) => counts[k] += 1,
                // ECONNREFUSED from an earlier ICMP, EMSGSIZE on a small MTU: keep going.
                Err(_) => errors += 1,
            }
        }
        std::thread::sleep(PAUSE);
    }
    let total: u64 = counts.iter().sum();
    let per_kind: Vec<String> = KINDS
        .iter()
        .zip(counts)
        .map(|(k, c)| format!("{k:?}={c}"))
        .collect();
    Ok(format!(
        "spray: {total} datagrams to {target} ({}), {errors} send errors, seed {seed}",
        per_kind.join(" ")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shapes_have_the_promised_headers_and_lengths() {
        let mut rng = Rng::new(1);
        let mut buf = vec![0u8; MAX_UDP];
        for _ in 0..2000 {
            for kind in KINDS {
                let n = datagram(kind, &mut rng, &mut buf);
                let d = &buf[..n];
                match kind {
                    Kind::Random => assert!(n <= 1500),
                    Kind::Shaped => {
                        let t = usize::from(d[0]);
                        assert!((1..=4).contains(&t) && d[1..4] == [0, 0, 0]);
                        assert!(if t == 4 { n >= 32 } else { n == SIZES[t - 1] });
                    }
                    Kind::Truncated => {
                        if let Some(&t) = d.first() {
                            assert!((1..=4).contains(&t));
                            assert!(n < SIZES[usize::from(t) - 1]);
                        }
                    }
                    Kind::Oversized => assert!(n > 1500 && n <= MAX_UDP && d[0] == 4),
                    Kind::BadReserved => assert!(d[1..4] != [0, 0, 0]),
                    Kind::BadType => assert!(!(1..=4).contains(&d[0])),
                }
            }
        }
    }

    #[test]
    fn spray_reaches_a_local_socket() {
        let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
        rx.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        let addr = rx.local_addr().unwrap().to_string();
        let summary = run(&addr, Duration::from_millis(50)).unwrap();
        assert!(summary.starts_with("spray: "), "{summary}");
        let mut buf = vec![0u8; MAX_UDP];
        assert!(rx.recv_from(&mut buf).is_ok());
    }
}
