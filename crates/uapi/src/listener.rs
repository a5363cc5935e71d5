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
    pub fn from_listener(listener: UnixListener) -> io::Result<UapiListener> {
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
