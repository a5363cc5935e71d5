//! The request framing of a UAPI connection, shared by every server (the daemon's socket,
//! `Device::ipc_handle`, app hosts).
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
    fn overlong_line_is_an_error() {
        let mut req = b"set=1\nprivate_key=".to_vec();
        req.extend(std::iter::repeat_n(b'a', MAX_LINE as usize + 10));
        let (_, ended) = run(&Fake::default(), &req);
        assert_eq!(ended.unwrap_err().kind(), io::ErrorKind::InvalidData);
    }
}
