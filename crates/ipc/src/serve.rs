//! The request framing of a UAPI connection: [`serve`] for every server (the daemon's socket,
//! `Device::ipc_handle`, app hosts), [`request`] and [`Reply`] for clients.
//!
//! Each request starts with an `<op>=1` line. `set=1` is followed by a body ending in an empty
//! line; `get=1` and any other operation by an empty line at once. Every reply ends with
//! `errno=<n>` and an empty line, a dump before it. An operation the [`Handler`] does not know
//! ends the connection without a reply, as wireguard-go does.

use crate::error::{IpcError, IPC_ERROR_PROTOCOL};
use std::io::{self, BufRead, Read, Write};

/// The longest request line accepted; a longer one ends the connection with an error (a `set`
/// body is read line by line, so this bounds the memory one client can pin per line).
pub const MAX_LINE: u64 = 64 * 1024;

/// What a connection's requests act on.
pub trait Handler {
    /// Applies a `set` body (the lines after `set=1`, without the empty line).
    fn set(&self, body: &str) -> Result<(), IpcError>;

    /// The `get` dump (without the `errno=` trailer).
    fn get(&self) -> Result<String, IpcError>;

    /// Whether `<op>=1` (other than `set` and `get`) is an operation of this handler; an
    /// unknown one closes the connection.
    fn has_operation(&self, op: &str) -> bool {
        let _ = op;
        false
    }

    /// The reply lines of another operation `<op>=1` (followed by an empty line), one
    /// [`has_operation`](Self::has_operation) accepted.
    fn other(&self, op: &str) -> Result<String, IpcError> {
        Err(IpcError::protocol(format!("unknown operation {op}")))
    }

    /// Whether the server is shutting down: checked after every request line, and `true` ends
    /// the connection.
    fn closing(&self) -> bool {
        false
    }
}

/// Why [`serve`] returned without an I/O error.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Ended {
    /// The peer closed the connection (possibly in the middle of a `set` body, which was
    /// applied as far as it went).
    Eof,
    /// An operation the handler does not know (its request line, without the line break).
    UnknownOperation(String),
    /// [`Handler::closing`] said so.
    Closing,
}

/// Reads one line (with its `\n`) of at most [`MAX_LINE`] bytes; `Ok(false)` at EOF.
fn read_line<R: BufRead>(r: &mut R, line: &mut String) -> io::Result<bool> {
    line.clear();
    let n = r.by_ref().take(MAX_LINE).read_line(line)?;
    if n as u64 == MAX_LINE && !line.ends_with('\n') {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "request line too long",
        ));
    }
    Ok(n > 0)
}

/// Serves requests from `r` to `h`, answering on `w`, until EOF, an unknown operation or
/// [`Handler::closing`].
pub fn serve<H, R, W>(h: &H, r: &mut R, w: &mut W) -> io::Result<Ended>
where
    H: Handler + ?Sized,
    R: BufRead,
    W: Write,
{
    let mut line = String::new();
    let mut body = String::new();
    loop {
        if !read_line(r, &mut line)? {
            return Ok(Ended::Eof);
        }
        if h.closing() {
            return Ok(Ended::Closing);
        }
        let op = line.strip_suffix('\n').unwrap_or(&line).to_owned();
        let status = match op.as_str() {
            "set=1" => {
                body.clear();
                let mut complete = false;
                while read_line(r, &mut line)? {
                    if line == "\n" {
                        complete = true;
                        break;
                    }
                    body.push_str(&line);
                }
                // A body cut short by EOF is applied, as wireguard-go applies what it read.
                let code = h.set(&body).err().map_or(0, |e| e.code());
                if !complete {
                    return Ok(Ended::Eof);
                }
                code
            }
            _ => {
                let name = match op.strip_suffix("=1") {
                    Some(n) if n == "get" || (!n.contains('=') && h.has_operation(n)) => n,
                    _ => return Ok(Ended::UnknownOperation(op)),
                };
                if !read_line(r, &mut line)? || line != "\n" {
                    IPC_ERROR_PROTOCOL
                } else {
                    let reply = if name == "get" {
                        h.get()
                    } else {
                        h.other(name)
                    };
                    match reply {
                        Ok(dump) => {
                            w.write_all(dump.as_bytes())?;
                            0
                        }
                        Err(e) => e.code(),
                    }
                }
            }
        };
        write!(w, "errno={status}\n\n")?;
        w.flush()?;
    }
}

/// The text of a request: `<op>=1`, then for `set` the body's lines, then the empty line.
///
/// `op` is letters, digits and `_`; a body must not hold an empty line (it would end the
/// request early); a missing final line break is added.
pub fn request(op: &str, body: &str) -> Result<String, IpcError> {
    if op.is_empty() || !op.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
        return Err(IpcError::invalid(format!("bad UAPI operation {op:?}")));
    }
    let body = body.strip_suffix('\n').unwrap_or(body);
    if body.contains("\n\n") || body.starts_with('\n') {
        return Err(IpcError::invalid(
            "a request body must not contain an empty line (it would end the request early)",
        ));
    }
    let mut msg = String::with_capacity(op.len() + body.len() + 5);
    msg.push_str(op);
    msg.push_str("=1\n");
    if !body.is_empty() {
        msg.push_str(body);
        msg.push('\n');
    }
    msg.push('\n');
    Ok(msg)
}

/// A reply as a client reads it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reply {
    /// The lines before `errno=`, each ending in `\n` (empty for `set`).
    pub body: String,
    /// The `errno=` value: 0 for success, a negative errno otherwise.
    pub errno: i64,
}

impl Reply {
    /// Whether `raw` holds a whole reply (its terminating empty line).
    pub fn is_complete(raw: &[u8]) -> bool {
        raw.starts_with(b"\n") || raw.windows(2).any(|w| w == b"\n\n")
    }

    /// Parses a reply up to its empty line: dump lines, then `errno=<n>`. Anything after the
    /// empty line is ignored.
    pub fn parse(raw: &[u8]) -> Result<Reply, IpcError> {
        let bad = |why: &str| IpcError::protocol(format!("bad UAPI reply: {why}"));
        let text = std::str::from_utf8(raw).map_err(|_| bad("not UTF-8"))?;
        let end = text
            .find("\n\n")
            .ok_or_else(|| bad("no terminating empty line"))?;
        let lines = text.get(..end).unwrap_or("");
        let (body, last) = match lines.rsplit_once('\n') {
            Some((body, last)) => (body, last),
            None => ("", lines),
        };
        let value = last
            .strip_prefix("errno=")
            .ok_or_else(|| bad("last line is not errno="))?;
        let errno: i64 = value.parse().map_err(|_| bad("errno is not a number"))?;
        let mut body = body.to_owned();
        if !body.is_empty() {
            body.push('\n');
        }
        Ok(Reply { body, errno })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;
    use std::io::Cursor;

    /// Records `set` bodies; `get` answers a fixed dump; `stats` is the one extra operation.
    #[derive(Default)]
    struct Fake {
        sets: RefCell<Vec<String>>,
    }

    impl Handler for Fake {
        fn set(&self, body: &str) -> Result<(), IpcError> {
            self.sets.borrow_mut().push(body.to_owned());
            body.parse::<crate::Change>().map(|_| ())
        }
        fn get(&self) -> Result<String, IpcError> {
            Ok("listen_port=1\n".into())
        }
        fn has_operation(&self, op: &str) -> bool {
            op == "stats"
        }
        fn other(&self, _op: &str) -> Result<String, IpcError> {
            Ok("device.x=1\n".into())
        }
    }

    fn run(h: &Fake, input: &[u8]) -> (String, io::Result<Ended>) {
        let mut out = Vec::new();
        let ended = serve(h, &mut Cursor::new(input.to_vec()), &mut out);
        (String::from_utf8(out).unwrap(), ended)
    }

    #[test]
    fn requests_on_one_connection_get_errno_replies() {
        let h = Fake::default();
        let (out, ended) = run(
            &h,
            b"set=1\nfwmark=3\n\nget=1\n\nset=1\nbad\n\nstats=1\n\nget=1\nextra\n",
        );
        assert_eq!(
            out,
            format!(
                "errno=0\n\nlisten_port=1\nerrno=0\n\nerrno={IPC_ERROR_PROTOCOL}\n\n\
                 device.x=1\nerrno=0\n\nerrno={IPC_ERROR_PROTOCOL}\n\n"
            )
        );
        assert_eq!(ended.unwrap(), Ended::Eof);
        assert_eq!(*h.sets.borrow(), ["fwmark=3\n", "bad\n"]);
    }

    #[test]
    fn unknown_operation_ends_the_connection_without_a_reply() {
        for req in [
            &b"bogus=1\n\nget=1\n\n"[..],
            b"get=2\n\n",
            b"get\n\n",
            b"a=b=1\n\n",
        ] {
            let (out, ended) = run(&Fake::default(), req);
            assert!(out.is_empty(), "{out:?}");
            assert!(matches!(ended.unwrap(), Ended::UnknownOperation(_)));
        }
    }

    #[test]
    fn set_cut_short_by_eof_is_applied_without_a_reply() {
        let h = Fake::default();
        let (out, ended) = run(&h, b"set=1\nfwmark=3\n");
        assert!(out.is_empty());
        assert_eq!(ended.unwrap(), Ended::Eof);
        assert_eq!(*h.sets.borrow(), ["fwmark=3\n"]);
    }

    #[test]
    fn requests_are_framed_and_bad_ones_refused() {
        assert_eq!(request("set", "a=1\nb=2").unwrap(), "set=1\na=1\nb=2\n\n");
        assert_eq!(request("set", "a=1\n").unwrap(), "set=1\na=1\n\n");
        assert_eq!(request("get", "").unwrap(), "get=1\n\n");
        for (op, body) in [
            ("get=1\nset", ""),
            ("", ""),
            ("set", "a=1\n\nb=2"),
            ("set", "\na=1"),
        ] {
            assert!(request(op, body).is_err(), "{op:?} {body:?}");
        }
    }

    #[test]
    fn replies_parse_to_body_and_errno() {
        let r = Reply::parse(b"a=1\nb=2\nerrno=-22\n\nleftover").unwrap();
        assert_eq!((r.body.as_str(), r.errno), ("a=1\nb=2\n", -22));
        assert_eq!(Reply::parse(b"errno=0\n\n").unwrap().body, "");
        for bad in [
            &b"x=1\n\n"[..],
            b"errno=zero\n\n",
            b"errno=0\n",
            b"\xff\n\n",
        ] {
            assert!(Reply::parse(bad).is_err(), "{bad:?}");
        }
        assert!(Reply::is_complete(b"errno=0\n\n") && !Reply::is_complete(b"errno=0\n"));
    }

    #[test]
    fn overlong_line_is_an_error() {
        let mut req = b"set=1\nprivate_key=".to_vec();
        req.extend(std::iter::repeat_n(b'a', MAX_LINE as usize + 10));
        let (_, ended) = run(&Fake::default(), &req);
        assert_eq!(ended.unwrap_err().kind(), io::ErrorKind::InvalidData);
    }
}
