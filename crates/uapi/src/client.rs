//! A minimal UAPI client: what `wg` does over `/var/run/wireguard/<ifname>.sock`.
//!
//! One request per connection: `set=1\n<body>\n\n` or `get=1\n\n`; the reply is any dump
//! lines, then `errno=<n>` and an empty line (the framing is `vpn_ipc::serve`'s, see
//! `docs/ipc.md`). Nothing but the protocol is assumed, so `vpn up`/`vpn down` can talk to any
//! implementation (ours, wireguard-go).

use std::io::{self, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

pub use super::{socket_path, DEFAULT_DIR};

/// How long a reply may take before the request fails (a wedged daemon must not hang `vpn`).
const REPLY_TIMEOUT: Duration = Duration::from_secs(10);

/// Largest reply accepted (a dump of tens of thousands of peers fits easily).
const MAX_REPLY: usize = 64 << 20;

/// The reply to a request (framing by `vpn-ipc`).
pub use vpn_ipc::serve::Reply as Response;

/// Applies a `set` body (`key=value` lines, with or without a final newline).
///
/// The outer result is a transport failure; the inner one is the daemon's verdict, `Err`
/// holding its (negative) errno.
pub fn set(dir: &Path, ifname: &str, body: &str) -> io::Result<Result<(), i64>> {
    let r = exchange(dir, ifname, &framed("set", body)?)?;
    Ok(if r.errno == 0 { Ok(()) } else { Err(r.errno) })
}

/// The request text, or `InvalidInput` for a bad operation name or a body with an empty line.
fn framed(op: &str, body: &str) -> io::Result<String> {
    vpn_ipc::serve::request(op, body)
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e.message().to_owned()))
}

/// The `get` dump, without the `errno=` trailer. A non-zero errno is an error.
pub fn get(dir: &Path, ifname: &str) -> io::Result<String> {
    let r = request(dir, ifname, "get")?;
    if r.errno != 0 {
        return Err(errno_error("get", r.errno));
    }
    Ok(r.body)
}

/// Sends `<op>=1` with an empty body and returns the reply as is.
pub fn request(dir: &Path, ifname: &str, op: &str) -> io::Result<Response> {
    exchange(dir, ifname, &framed(op, "")?)
}

fn errno_error(op: &str, errno: i64) -> io::Error {
    match i32::try_from(errno.unsigned_abs()) {
        Ok(code) => {
            let os = io::Error::from_raw_os_error(code);
            io::Error::new(os.kind(), format!("UAPI {op} failed: {os} (errno={errno})"))
        }
        Err(_) => io::Error::other(format!("UAPI {op} failed: errno={errno}")),
    }
}

fn exchange(dir: &Path, ifname: &str, msg: &str) -> io::Result<Response> {
    let path = socket_path(dir, ifname);
    let mut s = UnixStream::connect(&path)
        .map_err(|e| io::Error::new(e.kind(), format!("connect {}: {e}", path.display())))?;
    s.set_read_timeout(Some(REPLY_TIMEOUT))?;
    s.set_write_timeout(Some(REPLY_TIMEOUT))?;
    s.write_all(msg.as_bytes())?;
    let reply = read_reply(&mut s)?;
    parse_reply(&reply)
}

/// Reads until the blank line that ends the reply (dump lines are never empty).
fn read_reply(s: &mut impl Read) -> io::Result<Vec<u8>> {
    let mut buf = Vec::with_capacity(4096);
    let mut chunk = [0u8; 4096];
    loop {
        if Response::is_complete(&buf) {
            return Ok(buf);
        }
        let n = s.read(&mut chunk)?;
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "UAPI connection closed before the reply ended",
            ));
        }
        if buf.len() + n > MAX_REPLY {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "UAPI reply too large",
            ));
        }
        let start = buf.len().saturating_sub(1);
        buf.extend_from_slice(chunk.get(..n).unwrap_or(&[]));
        // Only the new bytes (and the one before them) can complete a "\n\n".
        if buf
            .get(start..)
            .is_some_and(|t| t.windows(2).any(|w| w == b"\n\n"))
        {
            return Ok(buf);
        }
    }
}

fn parse_reply(raw: &[u8]) -> io::Result<Response> {
    Response::parse(raw)
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e.message().to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::BufRead;
    use std::os::unix::net::UnixListener;
    use std::path::PathBuf;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::thread;

    /// A fresh directory under the system temp dir, removed on drop.
    struct TempDir(PathBuf);
    impl TempDir {
        fn new() -> Self {
            static N: AtomicUsize = AtomicUsize::new(0);
            let p = std::env::temp_dir().join(format!(
                "vpn-uapi-client-{}-{}",
                std::process::id(),
                N.fetch_add(1, Ordering::Relaxed)
            ));
            std::fs::create_dir_all(&p).unwrap();
            TempDir(p)
        }
    }
    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    /// Serves one connection: reads a request up to its blank line, answers `reply`, and
    /// returns what it read.
    fn serve_once(dir: &Path, ifname: &str, reply: &'static str) -> thread::JoinHandle<String> {
        let l = UnixListener::bind(socket_path(dir, ifname)).unwrap();
        thread::spawn(move || {
            let (s, _) = l.accept().unwrap();
            let mut r = io::BufReader::new(s.try_clone().unwrap());
            let mut req = String::new();
            loop {
                let mut line = String::new();
                if r.read_line(&mut line).unwrap() == 0 {
                    break;
                }
                req.push_str(&line);
                if line == "\n" {
                    break;
                }
            }
            (&s).write_all(reply.as_bytes()).unwrap();
            req
        })
    }

    #[test]
    fn set_sends_the_body_and_reads_errno() {
        let d = TempDir::new();
        let h = serve_once(&d.0, "wg0", "errno=0\n\n");
        assert_eq!(
            set(&d.0, "wg0", "private_key=00\nlisten_port=1\n").unwrap(),
            Ok(())
        );
        assert_eq!(
            h.join().unwrap(),
            "set=1\nprivate_key=00\nlisten_port=1\n\n"
        );

        let h = serve_once(&d.0, "wg1", "errno=-22\n\n");
        assert_eq!(set(&d.0, "wg1", "bogus=1").unwrap(), Err(-22));
        assert_eq!(h.join().unwrap(), "set=1\nbogus=1\n\n");
    }

    #[test]
    fn set_refuses_an_embedded_blank_line() {
        let d = TempDir::new();
        let e = set(&d.0, "none", "a=1\n\nb=2").unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
    }

    #[test]
    fn get_returns_the_dump_without_errno() {
        let d = TempDir::new();
        let h = serve_once(&d.0, "wg0", "listen_port=51820\npublic_key=ab\nerrno=0\n\n");
        assert_eq!(
            get(&d.0, "wg0").unwrap(),
            "listen_port=51820\npublic_key=ab\n"
        );
        assert_eq!(h.join().unwrap(), "get=1\n\n");

        let h = serve_once(&d.0, "wg1", "errno=-5\n\n");
        let e = get(&d.0, "wg1").unwrap_err();
        assert!(e.to_string().contains("errno=-5"), "{e}");
        h.join().unwrap();
    }

    #[test]
    fn request_other_ops_and_bad_replies() {
        let d = TempDir::new();
        let h = serve_once(&d.0, "a", "x=1\nerrno=-55\n\n");
        let r = request(&d.0, "a", "stats").unwrap();
        assert_eq!(
            r,
            Response {
                body: "x=1\n".into(),
                errno: -55
            }
        );
        assert_eq!(h.join().unwrap(), "stats=1\n\n");
        assert!(request(&d.0, "a", "get=1\nset").is_err());

        for (name, reply) in [
            ("b", "x=1\n\n"),
            ("c", "errno=zero\n\n"),
            ("d", "errno=0\n"),
        ] {
            let h = serve_once(&d.0, name, reply);
            assert!(request(&d.0, name, "get").is_err(), "{reply:?}");
            h.join().unwrap();
        }
        let e = get(&d.0, "nobody").unwrap_err();
        assert!(e.to_string().contains("nobody.sock"), "{e}");
    }

    #[test]
    fn reply_split_across_reads() {
        struct Trickle(Vec<u8>, usize);
        impl Read for Trickle {
            fn read(&mut self, b: &mut [u8]) -> io::Result<usize> {
                match (self.0.get(self.1), b.first_mut()) {
                    (Some(&c), Some(o)) => {
                        *o = c;
                        self.1 += 1;
                        Ok(1)
                    }
                    _ => Ok(0),
                }
            }
        }
        let mut t = Trickle(b"a=1\nerrno=0\n\nleftover".to_vec(), 0);
        let raw = read_reply(&mut t).unwrap();
        assert_eq!(
            parse_reply(&raw).unwrap(),
            Response {
                body: "a=1\n".into(),
                errno: 0
            }
        );
    }
}
