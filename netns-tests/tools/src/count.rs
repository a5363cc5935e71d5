//! Counts datagrams arriving at a UDP port for a while: the witness that a peer stayed silent.

use std::net::UdpSocket;
use std::time::{Duration, Instant};

pub fn run(addr: &str, dur: Duration) -> Result<String, String> {
    let sock = UdpSocket::bind(addr).map_err(|e| format!("bind {addr}: {e}"))?;
    sock.set_read_timeout(Some(Duration::from_millis(100)))
        .map_err(|e| e.to_string())?;
    let deadline = Instant::now() + dur;
    let (mut n, mut bytes) = (0u64, 0u64);
    let mut buf = vec![0u8; 65_536];
    while Instant::now() < deadline {
        if let Ok((len, _)) = sock.recv_from(&mut buf) {
            n += 1;
            bytes += len as u64;
        }
    }
    Ok(format!("count: {n} datagrams, {bytes} bytes"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_what_arrives() {
        let probe = UdpSocket::bind("127.0.0.1:0").unwrap();
        let addr = probe.local_addr().unwrap().to_string();
        drop(probe);
        let a2 = addr.clone();
        let t = std::thread::spawn(move || run(&a2, Duration::from_millis(600)));
        std::thread::sleep(Duration::from_millis(150));
        let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
        tx.send_to(b"abc", &addr).unwrap();
        tx.send_to(b"de", &addr).unwrap();
        assert_eq!(t.join().unwrap().unwrap(), "count: 2 datagrams, 5 bytes");
    }
}
