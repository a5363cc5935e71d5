//! Serving the UAPI socket: the accept loop, one thread per connection, the request framing
//! and the watch on the socket path (`watch.rs`).

use crate::listener::{identity, UapiListener};
use crate::watch::SocketWatch;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::io::{self, BufReader};
use std::net::Shutdown;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use vpn_device::Device;
use vpn_ipc::serve::{self, Ended, Handler};
use vpn_ipc::{IpcError, Statistics};
use vpn_sys::daemon::Watch;

/// Adds counters to a `stats=1` reply (the daemon's TUN and bind groups), after the device's.
pub type StatsFn = Box<dyn Fn(&mut Statistics) + Send + Sync>;

/// What [`UapiListener::serve_with`] adds to plain serving.
#[derive(Default)]
pub struct ServeOptions {
    /// Extra lines for `stats=1`, after the device's own counters.
    pub extra_stats: Option<StatsFn>,
    /// Called once, from the watcher thread, when the socket file is deleted or replaced.
    /// It must not call [`UapiServer::close`] itself and wait for it (send a message instead).
    pub on_removed: Option<Box<dyn FnOnce() + Send>>,
    /// The watch on the socket path, opened earlier with [`PreparedWatch::open`]; `None`: it
    /// is opened when serving starts. A daemon that gives up root before serving opens it while
    /// still root: inotify needs read access to the socket file, which only root has.
    pub watch: Option<PreparedWatch>,
    /// Leave the socket file in place on [`UapiServer::close`]: someone else removes it (the
    /// daemon's cleaner process, once the daemon no longer may).
    pub keep_socket_file: bool,
}

/// A watch on a socket path opened ahead of [`UapiListener::serve_with`].
pub struct PreparedWatch(SocketWatch);

impl PreparedWatch {
    /// Opens the watch on `listener`'s socket path now (falling back, with a warning, to a
    /// periodic look where the system watch cannot be set up).
    pub fn open(listener: &UapiListener) -> PreparedWatch {
        PreparedWatch(SocketWatch::open(&listener.path))
    }
}

struct Shared {
    dev: Arc<Device>,
    listener: std::os::unix::net::UnixListener,
    path: PathBuf,
    ident: Option<(u64, u64)>,
    closing: AtomicBool,
    extra_stats: Option<StatsFn>,
    /// Open connections (a clone of each stream, to shut them down on close) and their threads.
    conns: Mutex<HashMap<u64, UnixStream>>,
    threads: Mutex<Vec<JoinHandle<()>>>,
    next_id: AtomicU64,
    watch: SocketWatch,
    removed: AtomicBool,
    keep_socket_file: bool,
}

/// A running UAPI server. [`close`](Self::close) (or drop) stops it and removes the socket.
pub struct UapiServer {
    shared: Arc<Shared>,
    accept: Option<JoinHandle<()>>,
    watcher: Option<JoinHandle<()>>,
}

impl UapiListener {
    /// Serves `dev` on this socket until [`UapiServer::close`].
    pub fn serve(self, dev: Arc<Device>) -> UapiServer {
        self.serve_with(dev, ServeOptions::default())
    }

    /// [`serve`](Self::serve) with extra statistics and a removal callback.
    pub fn serve_with(self, dev: Arc<Device>, mut opts: ServeOptions) -> UapiServer {
        let watch = match opts.watch.take() {
            Some(PreparedWatch(w)) => w,
            None => SocketWatch::open(&self.path),
        };
        self.serve_watched(dev, opts, watch)
    }

    /// [`serve_with`](Self::serve_with) with the given watch on the socket path.
    pub(crate) fn serve_watched(
        self,
        dev: Arc<Device>,
        opts: ServeOptions,
        watch: SocketWatch,
    ) -> UapiServer {
        let shared = Arc::new(Shared {
            dev,
            listener: self.listener,
            path: self.path,
            ident: self.ident,
            closing: AtomicBool::new(false),
            extra_stats: opts.extra_stats,
            conns: Mutex::new(HashMap::new()),
            threads: Mutex::new(Vec::new()),
            next_id: AtomicU64::new(0),
            watch,
            removed: AtomicBool::new(false),
            keep_socket_file: opts.keep_socket_file,
        });
        let s = shared.clone();
        let accept = std::thread::Builder::new()
            .name("uapi-accept".into())
            .spawn(move || accept_loop(&s))
            .map_err(|e| tracing::error!("UAPI accept thread: {e}"))
            .ok();
        let watcher = {
            let s = shared.clone();
            let on_removed = opts.on_removed;
            std::thread::Builder::new()
                .name("uapi-watch".into())
                .spawn(move || watch_loop(&s, on_removed))
                .map_err(|e| tracing::error!("UAPI watcher thread: {e}"))
                .ok()
        };
        UapiServer {
            shared,
            accept,
            watcher,
        }
    }
}

impl UapiServer {
    /// The socket's path.
    pub fn path(&self) -> &Path {
        &self.shared.path
    }

    /// Whether the watcher has seen the socket file deleted or replaced.
    pub fn removed(&self) -> bool {
        self.shared.removed.load(Ordering::Acquire)
    }

    /// Stops accepting, ends open connections, joins every thread and removes the socket
    /// file if it is still ours (unless [`ServeOptions::keep_socket_file`]). Idempotent.
    pub fn close(&mut self) {
        let s = &self.shared;
        s.closing.store(true, Ordering::Release);
        // shutdown(2) on a listening socket wakes a thread blocked in accept(2) at once.
        if let Err(e) = socket2::SockRef::from(&s.listener).shutdown(Shutdown::Both) {
            tracing::debug!("UAPI listener shutdown: {e}");
        }
        s.watch.wake();
        for h in [self.accept.take(), self.watcher.take()]
            .into_iter()
            .flatten()
        {
            if h.thread().id() != std::thread::current().id() {
                let _ = h.join();
            }
        }
        for c in s.conns.lock().values() {
            let _ = c.shutdown(Shutdown::Both);
        }
        let threads = std::mem::take(&mut *s.threads.lock());
        for h in threads {
            if h.thread().id() != std::thread::current().id() {
                let _ = h.join();
            }
        }
        if !s.keep_socket_file && s.ident.is_some() && identity(&s.path) == s.ident {
            if let Err(e) = std::fs::remove_file(&s.path) {
                tracing::warn!("removing {}: {e}", s.path.display());
            }
        }
    }
}

impl Drop for UapiServer {
    fn drop(&mut self) {
        self.close();
    }
}

fn accept_loop(s: &Arc<Shared>) {
    loop {
        let res = s.listener.accept();
        if s.closing.load(Ordering::Acquire) {
            return;
        }
        match res {
            Ok((stream, _)) => spawn_conn(s, stream),
            Err(e) => match e.raw_os_error() {
                Some(libc::EINTR) | Some(libc::ECONNABORTED) => {}
                Some(libc::EMFILE) | Some(libc::ENFILE) | Some(libc::ENOBUFS)
                | Some(libc::ENOMEM) => {
                    tracing::warn!("UAPI accept: {e}");
                    std::thread::sleep(std::time::Duration::from_millis(50));
                }
                _ => {
                    tracing::error!("UAPI accept failed, no longer serving: {e}");
                    return;
                }
            },
        }
    }
}

fn spawn_conn(s: &Arc<Shared>, stream: UnixStream) {
    let id = s.next_id.fetch_add(1, Ordering::Relaxed);
    match stream.try_clone() {
        Ok(c) => {
            s.conns.lock().insert(id, c);
        }
        Err(e) => {
            tracing::warn!("UAPI connection: {e}");
            return;
        }
    }
    let sh = s.clone();
    let spawned = std::thread::Builder::new()
        .name("uapi-conn".into())
        .spawn(move || {
            if let Err(e) = handle(&sh, &stream) {
                tracing::debug!("UAPI connection ended: {e}");
            }
            sh.conns.lock().remove(&id);
        });
    let mut threads = s.threads.lock();
    threads.retain(|h| !h.is_finished());
    match spawned {
        Ok(h) => threads.push(h),
        Err(e) => {
            tracing::warn!("UAPI connection thread: {e}");
            s.conns.lock().remove(&id);
        }
    }
}

/// Serves requests on one connection until EOF or an unknown operation (which closes it,
/// as wireguard-go does).
fn handle(s: &Shared, stream: &UnixStream) -> io::Result<()> {
    let mut r = BufReader::new(stream);
    let mut w = io::BufWriter::new(stream);
    if let Ended::UnknownOperation(op) = serve::serve(s, &mut r, &mut w)? {
        tracing::info!("UAPI: unknown operation {op:?}, closing the connection");
    }
    Ok(())
}

/// The daemon's requests: the device's `set` and `get`, and the private `stats=1`.
impl Handler for Shared {
    fn set(&self, body: &str) -> Result<(), IpcError> {
        let res = self.dev.ipc_set(body);
        if let Err(e) = &res {
            tracing::info!("UAPI set: {}", e.message());
        }
        res
    }

    fn get(&self) -> Result<String, IpcError> {
        self.dev.ipc_get()
    }

    fn has_operation(&self, op: &str) -> bool {
        op == "stats"
    }

    fn other(&self, _op: &str) -> Result<String, IpcError> {
        let mut st = self.dev.statistics();
        if let Some(f) = &self.extra_stats {
            f(&mut st);
        }
        Ok(st.to_string())
    }

    fn closing(&self) -> bool {
        self.closing.load(Ordering::Acquire)
    }
}

/// Reports the socket file's removal: checked once at start (it may already be gone), then
/// after every event of the watch (inotify: an unlink changes the link count, IN_ATTRIB, and
/// the last one deletes the inode, IN_DELETE_SELF; kqueue: the directory was written; the
/// poll: its interval passed).
fn watch_loop(s: &Shared, on_removed: Option<Box<dyn FnOnce() + Send>>) {
    let w = &s.watch;
    loop {
        if s.closing.load(Ordering::Acquire) {
            return;
        }
        if identity(&s.path) != s.ident || s.ident.is_none() {
            tracing::info!("UAPI socket {} removed", s.path.display());
            s.removed.store(true, Ordering::Release);
            if let Some(f) = on_removed {
                f();
            }
            return;
        }
        match w.wait() {
            Ok(Watch::Events(_)) => {}
            Ok(Watch::Woken) => return,
            Err(e) => {
                tracing::warn!("watching {}: {e}", s.path.display());
                return;
            }
        }
    }
}
