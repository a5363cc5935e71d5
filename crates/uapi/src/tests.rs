//! The UAPI socket end to end, in a temporary directory (no root needed): permissions, stale
//! and live sockets, get/set/stats through the socket, removal reporting, close.

use crate::{socket_path, ServeOptions, UapiListener, UapiServer};
use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};
use vpn_conn::memory::MemoryNetwork;
use vpn_device::{Device, Logger};
use vpn_proto::keys::PrivateKey;
use vpn_tun::memory::MemoryTun;

/// A fresh directory under the system temp dir, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new() -> TempDir {
        static N: AtomicUsize = AtomicUsize::new(0);
        let p = std::env::temp_dir().join(format!(
            "vpn-uapi-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&p);
        TempDir(p)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn device() -> Arc<Device> {
    let net = MemoryNetwork::new();
    let bind = Arc::new(net.bind([198, 18, 0, 1].into(), 4));
    let (tun, _handle) = MemoryTun::new("mem0", 1420, 4);
    Arc::new(Device::new(Arc::new(tun), bind, Logger::new("uapi-test")))
}

/// Sends `req` and reads the reply up to and including the `errno=N` line and blank line.
fn request(stream: &mut UnixStream, req: &str) -> (String, i64) {
    stream.write_all(req.as_bytes()).unwrap();
    let mut r = BufReader::new(stream.try_clone().unwrap());
    let mut body = String::new();
    loop {
        let mut line = String::new();
        assert!(
            r.read_line(&mut line).unwrap() > 0,
            "EOF before errno; got {body:?}"
        );
        if let Some(code) = line.strip_prefix("errno=") {
            let mut blank = String::new();
            r.read_line(&mut blank).unwrap();
            assert_eq!(blank, "\n");
            return (body, code.trim_end().parse().unwrap());
        }
        body.push_str(&line);
    }
}

fn wait_until(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn socket_and_directory_permissions() {
    let tmp = TempDir::new();
    let dir = tmp.0.join("run/wireguard");
    let l = UapiListener::bind(&dir, "wg0").unwrap();
    assert_eq!(l.path(), socket_path(&dir, "wg0"));
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    // umask 077: the kernel gives the socket 0777 & !077 = 0700, as wireguard-go's is.
    assert_eq!(
        mode(l.path()) & 0o077,
        0,
        "socket is owner-only: {:o}",
        mode(l.path())
    );
    assert_eq!(mode(l.path()) & 0o600, 0o600);
    assert!(
        mode(&dir) & 0o022 == 0 && mode(&dir) & 0o700 == 0o700,
        "dir {:o}",
        mode(&dir)
    );
    assert!(UapiListener::bind(&dir, "../x").is_err());
    assert!(UapiListener::bind(&dir, "").is_err());
}

#[test]
fn stale_socket_is_replaced() {
    let tmp = TempDir::new();
    let path = socket_path(&tmp.0, "wg1");
    std::fs::create_dir_all(&tmp.0).unwrap();
    // A listener that went away without removing its file.
    drop(UnixListener::bind(&path).unwrap());
    assert!(path.exists());
    assert!(UnixStream::connect(&path).is_err(), "nobody listens");
    let l = UapiListener::bind(&tmp.0, "wg1").unwrap();
    let _srv = l.serve(device());
    UnixStream::connect(&path).expect("the new socket answers");
}

#[test]
fn live_socket_is_not_taken_over() {
    let tmp = TempDir::new();
    let first = UapiListener::bind(&tmp.0, "wg2").unwrap();
    let _srv = first.serve(device());
    let err = UapiListener::bind(&tmp.0, "wg2")
        .err()
        .expect("second bind must fail");
    assert_eq!(err.kind(), std::io::ErrorKind::AddrInUse);
    let mut s = UnixStream::connect(socket_path(&tmp.0, "wg2")).unwrap();
    let (_, errno) = request(&mut s, "get=1\n\n");
    assert_eq!(errno, 0, "the first server still answers");
}

#[test]
fn set_get_and_stats_round_trip() {
    let tmp = TempDir::new();
    let dev = device();
    let opts = ServeOptions {
        extra_stats: Some(Box::new(|st: &mut vpn_ipc::Statistics| {
            st.push("tun", "reads", 42);
        })),
        ..ServeOptions::default()
    };
    let _srv = UapiListener::bind(&tmp.0, "wg3")
        .unwrap()
        .serve_with(dev.clone(), opts);
    let key = PrivateKey::from_bytes([7; 32]);
    let peer = PrivateKey::from_bytes([9; 32]).public_key();
    let mut s = UnixStream::connect(socket_path(&tmp.0, "wg3")).unwrap();
    let set = format!(
        "set=1\nprivate_key={}\nfwmark=51\npublic_key={}\nendpoint=198.18.0.2:51820\nallowed_ip=100.64.0.2/32\npersistent_keepalive_interval=25\n\n",
        key.to_hex(),
        peer.to_hex()
    );
    let (body, errno) = request(&mut s, &set);
    assert_eq!((body.as_str(), errno), ("", 0));
    // Several requests on one connection, as `wg` sends them.
    let (dump, errno) = request(&mut s, "get=1\n\n");
    assert_eq!(errno, 0);
    assert!(
        dump.contains(&format!("private_key={}\n", key.to_hex())),
        "{dump}"
    );
    assert!(dump.contains("fwmark=51\n"), "{dump}");
    assert!(
        dump.contains(&format!("public_key={}\n", peer.to_hex())),
        "{dump}"
    );
    assert!(dump.contains("endpoint=198.18.0.2:51820\n"), "{dump}");
    assert!(dump.contains("allowed_ip=100.64.0.2/32\n"), "{dump}");
    assert!(
        dump.contains("persistent_keepalive_interval=25\n"),
        "{dump}"
    );
    assert_eq!(
        dump,
        dev.ipc_get().unwrap(),
        "the socket serves the device's own dump"
    );

    let (stats, errno) = request(&mut s, "stats=1\n\n");
    assert_eq!(errno, 0);
    assert!(stats.contains("device.tun_reads="), "{stats}");
    assert!(stats.contains("device.drop_replay="), "{stats}");
    assert!(
        stats.ends_with("tun.reads=42\n"),
        "extra lines come last: {stats}"
    );

    // Errors are reported with the device's codes and the connection stays usable.
    let (_, errno) = request(&mut s, "set=1\nlisten_port=notaport\n\n");
    assert_eq!(errno, -22);
    let (_, errno) = request(&mut s, "set=1\nno_equals_sign\n\n");
    assert_eq!(errno, -71);
    let (_, errno) = request(&mut s, "get=1\nextra\n");
    assert_eq!(errno, -71);
    let (_, errno) = request(&mut s, "get=1\n\n");
    assert_eq!(errno, 0);

    // An unknown operation closes the connection.
    s.write_all(b"bogus=1\n\n").unwrap();
    let mut rest = String::new();
    let n = BufReader::new(&s).read_line(&mut rest).unwrap();
    assert_eq!(n, 0, "connection closed, got {rest:?}");
}

#[test]
fn overlong_line_closes_the_connection() {
    let tmp = TempDir::new();
    let _srv = UapiListener::bind(&tmp.0, "wg4").unwrap().serve(device());
    let mut s = UnixStream::connect(socket_path(&tmp.0, "wg4")).unwrap();
    let mut req = b"set=1\nprivate_key=".to_vec();
    req.extend(std::iter::repeat_n(b'a', 70 * 1024));
    // The server may close before reading everything: a write error is fine too.
    let _ = s.write_all(&req);
    let mut rest = String::new();
    let n = BufReader::new(&s).read_line(&mut rest).unwrap_or(0);
    assert_eq!(n, 0, "got {rest:?}");
}

/// Options whose removal callback sends on the returned channel.
fn removal_reporting() -> (ServeOptions, mpsc::Receiver<()>) {
    let (tx, rx) = mpsc::channel();
    let opts = ServeOptions {
        extra_stats: None,
        on_removed: Some(Box::new(move || {
            let _ = tx.send(());
        })),
        ..ServeOptions::default()
    };
    (opts, rx)
}

/// Deletes the server's socket file and waits for the callback and `removed()` to say so.
fn delete_and_expect_report(srv: &UapiServer, rx: &mpsc::Receiver<()>) {
    assert!(!srv.removed());
    std::fs::remove_file(srv.path()).unwrap();
    rx.recv_timeout(Duration::from_secs(5))
        .expect("removal reported");
    assert!(srv.removed());
}

#[test]
fn removal_is_reported_and_close_cleans_up() {
    let tmp = TempDir::new();
    let (opts, rx) = removal_reporting();
    let mut srv: UapiServer = UapiListener::bind(&tmp.0, "wg5")
        .unwrap()
        .serve_with(device(), opts);
    assert!(
        rx.recv_timeout(Duration::from_millis(100)).is_err(),
        "nothing removed yet"
    );
    delete_and_expect_report(&srv, &rx);
    srv.close();
    srv.close();
}

#[test]
fn close_wakes_accept_ends_connections_and_removes_the_socket() {
    let tmp = TempDir::new();
    let mut srv = UapiListener::bind(&tmp.0, "wg6").unwrap().serve(device());
    let path = srv.path().to_path_buf();
    let mut idle = UnixStream::connect(&path).unwrap();
    let (_, errno) = request(&mut idle, "get=1\n\n");
    assert_eq!(errno, 0);
    let t = Instant::now();
    srv.close();
    assert!(
        t.elapsed() < Duration::from_secs(2),
        "close took {:?}",
        t.elapsed()
    );
    assert!(!path.exists(), "socket removed");
    let mut buf = String::new();
    assert_eq!(
        BufReader::new(&idle).read_line(&mut buf).unwrap_or(0),
        0,
        "open connection ended"
    );
    assert!(UnixStream::connect(&path).is_err());
    // A later daemon can bind the same name at once.
    let _again = UapiListener::bind(&tmp.0, "wg6").unwrap();
}

#[test]
fn close_leaves_a_replacement_socket_alone() {
    let tmp = TempDir::new();
    let mut srv = UapiListener::bind(&tmp.0, "wg7").unwrap().serve(device());
    let path = srv.path().to_path_buf();
    std::fs::remove_file(&path).unwrap();
    wait_until("removal", || srv.removed());
    // Another daemon took the name meanwhile: its socket must survive our close.
    let other = UapiListener::bind(&tmp.0, "wg7").unwrap();
    srv.close();
    assert!(path.exists());
    drop(other);
}

/// A watch opened before serving (a daemon about to give up root) reports the removal as the
/// one `serve_with` opens would; `keep_socket_file` leaves the file to someone else on close.
#[test]
fn a_prepared_watch_reports_removal_and_a_kept_file_survives_close() {
    let tmp = TempDir::new();
    let (mut opts, rx) = removal_reporting();
    let listener = UapiListener::bind(&tmp.0, "wg9").unwrap();
    opts.watch = Some(crate::PreparedWatch::open(&listener));
    let srv = listener.serve_with(device(), opts);
    delete_and_expect_report(&srv, &rx);
    drop(srv);
    let listener = UapiListener::bind(&tmp.0, "wg9").unwrap();
    let mut srv = listener.serve_with(
        device(),
        ServeOptions {
            keep_socket_file: true,
            ..ServeOptions::default()
        },
    );
    let path = srv.path().to_path_buf();
    srv.close();
    assert!(path.exists(), "the socket file is someone else's to remove");
    assert!(
        UnixStream::connect(&path).is_err(),
        "but nobody answers on it"
    );
}

/// Where no OS watch can be set up, the portable poll still notices the socket's removal.
#[test]
fn removal_is_reported_by_the_portable_poll() {
    use crate::watch::{PollWatch, SocketWatch};
    let tmp = TempDir::new();
    let (opts, rx) = removal_reporting();
    let watch = SocketWatch::Poll(PollWatch::new(Duration::from_millis(20)));
    let mut srv = UapiListener::bind(&tmp.0, "wg8")
        .unwrap()
        .serve_watched(device(), opts, watch);
    let mut c = UnixStream::connect(srv.path()).unwrap();
    assert_eq!(request(&mut c, "get=1\n\n").1, 0);
    delete_and_expect_report(&srv, &rx);
    srv.close();
}
