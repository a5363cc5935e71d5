//! Malformed requests on a UAPI socket, one per connection, for a given time, while `hold` idle
//! connections stay open. The daemon must answer or close each one and keep serving `wg`; the
//! one peer these requests may create (a fixed junk key) is removed at the end.

use crate::rng::Rng;
use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

/// A public key no test configures (and not a low-order point).
const JUNK_KEY: &str = "5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a";

/// The fixed malformed requests; `{K}` stands for [`JUNK_KEY`].
const REQUESTS: &[&str] = &[
    "garbage\n\n",
    "\n\n\n",
    "\0\0\0\n\n",
    "get=2\n\n",
    "get=1\nextra=1\n\n",
    "set=1\nnoequals\n\n",
    "set=1\nunknown_key=1\n\n",
    "set=1\nprivate_key=zz\n\n",
    "set=1\nprivate_key=000000000000000000000000000000000000000000000000000000000000000\n\n",
    "set=1\nlisten_port=99999\n\n",
    "set=1\nlisten_port=-1\n\n",
    "set=1\nfwmark=-1\n\n",
    "set=1\nreplace_peers=yes\n\n",
    "set=1\npublic_key=nothex\n\n",
    "set=1\npublic_key={K}0\n\n",
    "set=1\npublic_key={K}\nendpoint=not-an-endpoint\n\n",
    "set=1\npublic_key={K}\nendpoint=[fd00::1:51820\n\n",
    "set=1\npublic_key={K}\nendpoint=198.18.0.9:99999\n\n",
    "set=1\npublic_key={K}\nallowed_ip=100.64.0.9/33\n\n",
    "set=1\npublic_key={K}\nallowed_ip=fd00::9/129\n\n",
    "set=1\npublic_key={K}\nallowed_ip=-100.64.99.0/24\n\n",
    "set=1\npublic_key={K}\npersistent_keepalive_interval=70000\n\n",
    "set=1\npublic_key={K}\nprotocol_version=2\n\n",
    "set=1\npublic_key={K}\npreshared_key=xyz\n\n",
    "set=1\npublic_key={K}\nprivate_key=0101010101010101010101010101010101010101010101010101010101010101\n\n",
    "set=1\npublic_key={K}\n",
];

/// How a request ended.
#[derive(Default)]
struct Tally {
    errno_nonzero: u64,
    errno_zero: u64,
    closed: u64,
    connect_failed: u64,
}

fn request(path: &str, body: &[u8], tally: &mut Tally) {
    let Ok(mut s) = UnixStream::connect(path) else {
        tally.connect_failed += 1;
        return;
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
    let _ = s.set_write_timeout(Some(Duration::from_secs(2)));
    let _ = s.write_all(body);
    let _ = s.shutdown(std::net::Shutdown::Write);
    let mut reply = Vec::new();
    let _ = s.take(1 << 20).read_to_end(&mut reply);
    let text = String::from_utf8_lossy(&reply);
    match text.lines().rev().find_map(|l| l.strip_prefix("errno=")) {
        Some("0") => tally.errno_zero += 1,
        Some(_) => tally.errno_nonzero += 1,
        None => tally.closed += 1,
    }
}

pub fn run(path: &str, dur: Duration, hold: usize) -> Result<String, String> {
    let held: Vec<UnixStream> = (0..hold)
        .map(|_| UnixStream::connect(path).map_err(|e| format!("{path}: {e}")))
        .collect::<Result<_, _>>()?;
    let mut rng = Rng::from_env();
    let seed = rng.seed();
    let mut tally = Tally::default();
    let long_line = {
        let mut v = b"set=1\nprivate_key=".to_vec();
        v.resize(1 << 20, b'a');
        v
    };
    let mut random = vec![0u8; 4096];
    let deadline = Instant::now() + dur;
    let mut i = 0usize;
    let mut sent = 0u64;
    while Instant::now() < deadline {
        let k = i % (REQUESTS.len() + 2);
        i += 1;
        if k < REQUESTS.len() {
            let body = REQUESTS[k].replace("{K}", JUNK_KEY);
            request(path, body.as_bytes(), &mut tally);
        } else if k == REQUESTS.len() {
            request(path, &long_line, &mut tally);
        } else {
            let n = rng.below(random.len() + 1);
            rng.fill(&mut random[..n]);
            request(path, &random[..n], &mut tally);
        }
        sent += 1;
    }
    let mut cleanup = Tally::default();
    let remove = format!("set=1\npublic_key={JUNK_KEY}\nremove=true\n\n");
    request(path, remove.as_bytes(), &mut cleanup);
    drop(held);
    if cleanup.errno_zero != 1 {
        return Err("the daemon did not accept removing the junk peer afterwards".into());
    }
    Ok(format!(
        "uapi: {sent} malformed requests ({} errno!=0, {} errno=0, {} closed without errno, {} connect failures), {hold} idle connections held, seed {seed}",
        tally.errno_nonzero, tally.errno_zero, tally.closed, tally.connect_failed
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::BufRead;
    use std::os::unix::net::UnixListener;

    /// A fake daemon that answers every request with errno=-22 (0 for a remove) proves the tool
    /// counts replies and sends the cleanup request last.
    #[test]
    fn talks_to_a_socket_and_removes_the_junk_peer() {
        let dir = std::env::temp_dir().join(format!("vpn-hostile-test-{}", std::process::id()));
        let _ = std::fs::create_dir_all(&dir);
        let path = dir.join("x.sock");
        let _ = std::fs::remove_file(&path);
        let l = UnixListener::bind(&path).unwrap();
        let server = std::thread::spawn(move || {
            let mut last = String::new();
            for c in l.incoming() {
                let Ok(c) = c else { continue };
                let mut r = std::io::BufReader::new(c.try_clone().unwrap());
                let mut first = String::new();
                let _ = c.set_read_timeout(Some(Duration::from_millis(200)));
                let mut all = String::new();
                while r.read_line(&mut first).unwrap_or(0) > 0 {
                    all.push_str(&first);
                    first.clear();
                }
                let errno = if all.contains("remove=true") { 0 } else { -22 };
                let _ = (&c).write_all(format!("errno={errno}\n\n").as_bytes());
                last = all;
                if errno == 0 {
                    break;
                }
            }
            last
        });
        let p = path.to_str().unwrap().to_owned();
        let summary = run(&p, Duration::from_millis(30), 0).unwrap();
        assert!(summary.contains(" 0 errno=0,"), "{summary}");
        assert!(summary.contains(" 0 connect failures"), "{summary}");
        assert!(server.join().unwrap().contains("remove=true"));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
