//! The UAPI socket's cleaner: a small process, forked by the daemon before it gives up root,
//! that removes the socket file once the daemon is done with it.
//!
//! The socket lives in root's `/var/run/wireguard` (mode 0755, as wireguard-go leaves it), so
//! a daemon that has switched to an unprivileged user can no longer unlink it. The cleaner
//! keeps uid 0 for that one call and nothing else: it closes every descriptor but its end of a
//! socket pair (and stderr, for its one possible complaint), drops every capability, sets
//! `no_new_privs`, installs a filter that allows only the handful of calls below, and waits.
//! When the daemon asks (one byte) or dies (end of file: a crash or a kill leaves no stale
//! socket either), it removes the path if it is still the file the daemon created (device and
//! inode compared, so a newer daemon's socket at the same path is left alone), answers, and
//! exits.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// The cleaner's name in `/proc/<pid>/comm` (at most 15 bytes).
pub const COMM: &str = "vpn-sock-clean";

/// The daemon's handle on its cleaner.
pub struct Cleaner {
    pid: libc::pid_t,
    sock: Option<OwnedFd>,
}

/// Forks the cleaner for the socket at `path`, whose device and inode are `ident`; `filter`
/// is the seccomp program it installs on itself (allowing `read`, `write`, `close`, the stat
/// calls, `unlink`/`unlinkat` and `exit`/`exit_group`).
///
/// Call it while the calling thread is the process's only one: the child runs Rust code no
/// further than these functions, which take no lock and allocate nothing after the fork.
pub fn spawn(path: &Path, ident: (u64, u64), filter: &[libc::sock_filter]) -> io::Result<Cleaner> {
    let cpath = CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "path contains NUL"))?;
    let mut fds = [0 as libc::c_int; 2];
    // SAFETY: `fds` is a writable array of two ints.
    if unsafe {
        libc::socketpair(
            libc::AF_UNIX,
            libc::SOCK_STREAM | libc::SOCK_CLOEXEC,
            0,
            fds.as_mut_ptr(),
        )
    } != 0
    {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: both fds were just created and are owned here.
    let (ours, theirs) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    let filter = filter.to_vec();
    // SAFETY: fork(2). The caller guarantees a single thread, so no lock can be held by a
    // thread that does not exist in the child; the child calls only `child` and `_exit`.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(io::Error::last_os_error());
    }
    if pid == 0 {
        child(theirs.as_raw_fd(), &cpath, ident, &filter);
    }
    drop(theirs);
    Ok(Cleaner {
        pid,
        sock: Some(ours),
    })
}

impl Cleaner {
    /// The cleaner's process id.
    pub fn pid(&self) -> i32 {
        self.pid
    }

    /// Asks the cleaner to remove the socket now, waits for its answer and for it to exit.
    /// Returns whether it removed the file (false: it was gone or is another file now).
    pub fn remove_now(mut self) -> io::Result<bool> {
        let sock = self.sock.take().ok_or_else(|| io::Error::other("used"))?;
        let fd = sock.as_raw_fd();
        // SAFETY: a one-byte write from a local.
        if unsafe { libc::write(fd, b"r".as_ptr().cast(), 1) } != 1 {
            return Err(io::Error::last_os_error());
        }
        let mut ans = [0u8; 1];
        let n = loop {
            // SAFETY: a one-byte read into a local.
            let n = unsafe { libc::read(fd, ans.as_mut_ptr().cast(), 1) };
            if n < 0 && io::Error::last_os_error().kind() == io::ErrorKind::Interrupted {
                continue;
            }
            break n;
        };
        drop(sock);
        self.reap();
        match n {
            1 => Ok(ans[0] == b'1'),
            _ => Err(io::Error::other("the cleaner exited without answering")),
        }
    }

    fn reap(&mut self) {
        let mut status = 0;
        loop {
            // SAFETY: waits for our own child; `status` is a writable local.
            let rc = unsafe { libc::waitpid(self.pid, &mut status, 0) };
            if rc >= 0 || io::Error::last_os_error().kind() != io::ErrorKind::Interrupted {
                return;
            }
        }
    }
}

/// The cleaner's whole life. Only system calls and stack data from here on.
fn child(sock: libc::c_int, path: &CString, ident: (u64, u64), filter: &[libc::sock_filter]) -> ! {
    const FD: libc::c_int = 3;
    // SAFETY: integer arguments and pointers to locals or to `path`, alive until `_exit`.
    unsafe {
        libc::prctl(
            libc::PR_SET_NAME,
            c"vpn-sock-clean".as_ptr() as libc::c_ulong,
            0,
            0,
            0,
        );
        // The terminal's hang-up and interrupt are the daemon's business, not ours.
        libc::signal(libc::SIGHUP, libc::SIG_IGN);
        libc::signal(libc::SIGINT, libc::SIG_IGN);
        libc::signal(libc::SIGPIPE, libc::SIG_IGN);
        if sock != FD && libc::dup2(sock, FD) != FD {
            libc::_exit(1);
        }
        // Nothing of the daemon's stays open here (the TUN above all: a descriptor held here
        // would keep the interface alive after the daemon exits). stderr stays for one line.
        if libc::syscall(libc::SYS_close_range, FD + 1, libc::c_uint::MAX, 0) != 0 {
            for fd in FD + 1..65536 {
                libc::close(fd);
            }
        }
        libc::close(0);
        libc::close(1);
        // Root's uid owns the directory; no capability is needed to unlink in it.
        let _ = crate::privileges::set_capabilities(crate::privileges::Capabilities::default());
        if !filter.is_empty() && crate::seccomp::apply_filter(filter).is_err() {
            complain(b"vpn: socket cleaner: cannot install its seccomp filter\n");
        }
        let mut b = [0u8; 1];
        loop {
            let n = libc::read(FD, b.as_mut_ptr().cast(), 1);
            if n < 0 && *libc::__errno_location() == libc::EINTR {
                continue;
            }
            break;
        }
        let mut st: libc::stat = std::mem::zeroed();
        let removed = libc::stat(path.as_ptr(), &mut st) == 0
            && (st.st_dev, st.st_ino) == ident
            && libc::unlink(path.as_ptr()) == 0;
        if !removed && libc::stat(path.as_ptr(), &mut st) == 0 && (st.st_dev, st.st_ino) == ident {
            complain(b"vpn: socket cleaner: cannot remove the UAPI socket\n");
        }
        let ans = if removed { b"1" } else { b"0" };
        libc::write(FD, ans.as_ptr().cast(), 1);
        libc::_exit(0);
    }
}

fn complain(msg: &[u8]) {
    // SAFETY: write(2) of a static message to stderr.
    unsafe { libc::write(2, msg.as_ptr().cast(), msg.len()) };
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    fn ident(p: &Path) -> (u64, u64) {
        let m = std::fs::metadata(p).unwrap();
        (m.dev(), m.ino())
    }

    /// A test binary has other threads: fork only in a child that has none (a fresh process
    /// of this test, re-run with a variable naming what to do).
    fn in_child(test: &str, f: impl FnOnce()) {
        const VAR: &str = "VPN_SYS_CLEANER_CHILD";
        if std::env::var(VAR).as_deref() == Ok(test) {
            f();
            std::process::exit(0);
        }
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args([test, "--exact", "--test-threads=1", "--nocapture"])
            .env(VAR, test)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }

    #[test]
    fn removes_the_file_when_asked_and_leaves_a_replaced_one() {
        in_child(
            "cleaner::tests::removes_the_file_when_asked_and_leaves_a_replaced_one",
            || {
                let dir = std::env::temp_dir().join(format!("vpn-cleaner-{}", std::process::id()));
                std::fs::create_dir_all(&dir).unwrap();
                let f = dir.join("a.sock");
                std::fs::write(&f, b"").unwrap();
                let c = spawn(&f, ident(&f), &[]).unwrap();
                assert!(c.remove_now().unwrap());
                assert!(!f.exists());
                // Replaced meanwhile: not ours, left alone.
                std::fs::write(&f, b"").unwrap();
                let old = ident(&f);
                std::fs::remove_file(&f).unwrap();
                std::fs::write(dir.join("other"), b"").unwrap();
                std::fs::write(&f, b"x").unwrap();
                let c = spawn(&f, old, &[]).unwrap();
                if ident(&f) != old {
                    assert!(!c.remove_now().unwrap());
                    assert!(f.exists());
                }
                std::fs::remove_dir_all(&dir).unwrap();
            },
        );
    }

    #[test]
    fn removes_the_file_when_the_daemon_goes_away() {
        in_child(
            "cleaner::tests::removes_the_file_when_the_daemon_goes_away",
            || {
                let dir =
                    std::env::temp_dir().join(format!("vpn-cleaner-eof-{}", std::process::id()));
                std::fs::create_dir_all(&dir).unwrap();
                let f = dir.join("b.sock");
                std::fs::write(&f, b"").unwrap();
                let mut c = spawn(&f, ident(&f), &[]).unwrap();
                drop(c.sock.take());
                c.reap();
                assert!(!f.exists());
                std::fs::remove_dir_all(&dir).unwrap();
            },
        );
    }
}
