//! Creating the UAPI socket: directory 0755, socket 0600, stale-socket replacement.

use std::fs;
use std::io;
use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};

/// A bound, listening UAPI socket, not yet served.
pub struct UapiListener {
    pub(crate) listener: UnixListener,
    pub(crate) path: PathBuf,
    /// Device and inode of the socket file we created: the watcher and `close` act only on
    /// that file, never on a newer daemon's socket at the same path.
    pub(crate) ident: Option<(u64, u64)>,
}

impl UapiListener {
    /// Creates `<dir>/<ifname>.sock`.
    ///
    /// `dir` is created with mode 0755 if missing; the socket is bound under umask 077, so
    /// only root (the owner) can configure the interface. If the path is taken, a connection
    /// attempt tells a live daemon (fail with [`io::ErrorKind::AddrInUse`]) from a file a
    /// dead one left behind (deleted, and the bind retried once).
    pub fn bind(dir: &Path, ifname: &str) -> io::Result<UapiListener> {
        if ifname.is_empty() || ifname.contains('/') || ifname == "." || ifname == ".." {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("invalid interface name {ifname:?}"),
            ));
        }
        make_dir(dir)?;
        let path = crate::socket_path(dir, ifname);
        let listener = match bind_private(&path) {
            Err(e) if e.kind() == io::ErrorKind::AddrInUse => {
                if UnixStream::connect(&path).is_ok() {
                    return Err(io::Error::new(
                        io::ErrorKind::AddrInUse,
                        format!("{}: in use by a running daemon", path.display()),
                    ));
                }
                tracing::info!("removing stale UAPI socket {}", path.display());
                match fs::remove_file(&path) {
                    Ok(()) => {}
                    Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                    Err(e) => return Err(e),
                }
                bind_private(&path)?
            }
            other => other?,
        };
        let ident = identity(&path);
        Ok(UapiListener {
            listener,
            path,
            ident,
        })
    }

    /// Wraps a listening socket inherited from a parent (`WG_UAPI_FD`). Its path (if it has
    /// one) is watched and removed on close like a socket [`bind`](Self::bind) created.
    ///
    /// Anything but a listening Unix stream socket is refused with an error saying what the
    /// descriptor is instead (a file, another kind of socket, a socket nobody called
    /// `listen(2)` on), so a supervisor's mistake stops the daemon at start, not at the first
    /// `wg` call.
    pub fn from_listener(listener: UnixListener) -> io::Result<UapiListener> {
        check_listening_stream(&listener)?;
        let addr = listener.local_addr()?;
        let path = addr.as_pathname().map(Path::to_path_buf).ok_or_else(|| {
            io::Error::new(io::ErrorKind::InvalidInput, "UAPI socket has no path")
        })?;
        let ident = identity(&path);
        Ok(UapiListener {
            listener,
            path,
            ident,
        })
    }

    /// The socket's path.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// Is `listener` really a listening Unix stream socket? `UnixListener::from(OwnedFd)` takes any
/// descriptor on trust.
fn check_listening_stream(listener: &UnixListener) -> io::Result<()> {
    let invalid = |what: String| io::Error::new(io::ErrorKind::InvalidInput, what);
    let sock = socket2::SockRef::from(listener);
    let ty = sock.r#type().map_err(|e| match e.raw_os_error() {
        Some(libc::ENOTSOCK) => invalid("not a socket".into()),
        _ => e,
    })?;
    // `local_addr` fails for any family but AF_UNIX.
    listener
        .local_addr()
        .map_err(|e| invalid(format!("not a Unix socket ({e})")))?;
    if ty != socket2::Type::STREAM {
        return Err(invalid(format!(
            "a Unix socket of type {}, not a stream socket",
            libc::c_int::from(ty)
        )));
    }
    if !is_listening(listener)? {
        return Err(invalid(
            "a Unix stream socket that is not listening (listen(2) was not called)".into(),
        ));
    }
    Ok(())
}

/// `SO_ACCEPTCONN`, where the system reports it for Unix sockets (Linux).
#[cfg(any(target_os = "linux", target_os = "android"))]
fn is_listening(listener: &UnixListener) -> io::Result<bool> {
    use std::os::fd::AsFd;
    Ok(vpn_sys::sockopt::get_int(listener.as_fd(), libc::SOL_SOCKET, libc::SO_ACCEPTCONN)? != 0)
}

/// Elsewhere an unlistened socket shows itself at the first `accept`.
#[cfg(not(any(target_os = "linux", target_os = "android")))]
fn is_listening(_: &UnixListener) -> io::Result<bool> {
    Ok(true)
}

/// Creates `dir` (and parents) with mode 0755 (through the umask, as wireguard-go's
/// `MkdirAll` does); an existing directory is left as it is.
fn make_dir(dir: &Path) -> io::Result<()> {
    match fs::DirBuilder::new()
        .recursive(true)
        .mode(0o755)
        .create(dir)
    {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(e),
    }
    let meta = fs::metadata(dir)?;
    if !meta.is_dir() {
        return Err(io::Error::new(
            io::ErrorKind::AlreadyExists,
            format!("{} is not a directory", dir.display()),
        ));
    }
    Ok(())
}

fn bind_private(path: &Path) -> io::Result<UnixListener> {
    vpn_sys::daemon::with_umask(0o077, || UnixListener::bind(path))
}

pub(crate) fn identity(path: &Path) -> Option<(u64, u64)> {
    fs::symlink_metadata(path).ok().map(|m| (m.dev(), m.ino()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use socket2::{Domain, SockAddr, Socket, Type};
    use std::os::fd::OwnedFd;

    fn scratch(name: &str) -> PathBuf {
        let p = std::env::temp_dir().join(format!("vpn-uapi-{name}-{}", std::process::id()));
        let _ = fs::remove_file(&p);
        p
    }

    fn refused(fd: OwnedFd) -> String {
        match UapiListener::from_listener(UnixListener::from(fd)) {
            Ok(_) => panic!("accepted"),
            Err(e) => {
                assert_eq!(e.kind(), io::ErrorKind::InvalidInput, "{e}");
                e.to_string()
            }
        }
    }

    #[test]
    fn inherited_listener_must_be_a_listening_unix_stream_socket() {
        let file = fs::File::open("/dev/null").unwrap();
        assert_eq!(refused(file.into()), "not a socket");

        let tcp = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        assert!(refused(tcp.into()).starts_with("not a Unix socket"));

        let p = scratch("dgram");
        let dgram = std::os::unix::net::UnixDatagram::bind(&p).unwrap();
        assert!(refused(dgram.into()).contains("not a stream socket"));
        fs::remove_file(&p).unwrap();

        // Only Linux reports SO_ACCEPTCONN for Unix sockets.
        if cfg!(any(target_os = "linux", target_os = "android")) {
            let p = scratch("unlistened");
            let s = Socket::new(Domain::UNIX, Type::STREAM, None).unwrap();
            s.bind(&SockAddr::unix(&p).unwrap()).unwrap();
            assert!(refused(s.into()).contains("not listening"));
            fs::remove_file(&p).unwrap();
        }

        let p = scratch("listening");
        let l = UnixListener::bind(&p).unwrap();
        let u = UapiListener::from_listener(l).unwrap();
        assert_eq!(u.path(), p);
        drop(u);
        let _ = fs::remove_file(&p);
    }
}
