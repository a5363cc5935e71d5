//! What the daemon's seccomp filter needs beyond the filter itself (which `seccompiler`
//! compiles and installs, `cmd/vpn/src/daemon/sandbox/seccomp.rs`): the SIGSYS handler that
//! names a refused call before the process ends, the table of system call names it reads,
//! installing a ready filter in a process with no threads (the socket cleaner), and a few
//! calls outside the allowlist for the test that the filter bites.
//!
//! The filter answers a call outside its list with `SECCOMP_RET_TRAP`: the kernel sends the
//! calling thread SIGSYS with the call's number in `si_syscall`. [`install_sigsys_reporter`]'s
//! handler writes one line naming the call to the log descriptor with `write(2)` (nothing in
//! it allocates or locks), then restores SIGSYS's default action and raises it again, so the
//! whole process ends "killed by SIGSYS" as with `SECCOMP_RET_KILL_PROCESS`, but with a line
//! in the log saying why. Every call the handler makes is in the daemon's allowlist.

use std::io;
use std::sync::atomic::{AtomicI32, Ordering};

/// The descriptor the SIGSYS handler writes to (stderr, the detached daemon's log).
static REPORT_FD: AtomicI32 = AtomicI32::new(2);

/// The name of system call `nr` on this architecture, if the table has it.
pub fn syscall_name(nr: i64) -> Option<&'static str> {
    let nr = u32::try_from(nr).ok()?;
    names()
        .binary_search_by_key(&nr, |&(n, _)| n)
        .ok()
        .map(|i| names()[i].1)
}

/// The number of system call `name` on this architecture (`None`: no such call here, e.g.
/// `open` on aarch64).
pub fn syscall_number(name: &str) -> Option<i64> {
    names()
        .iter()
        .find(|&&(_, n)| n == name)
        .map(|&(nr, _)| i64::from(nr))
}

#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
fn names() -> &'static [(u32, &'static str)] {
    crate::syscall_names::NAMES
}

#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
fn names() -> &'static [(u32, &'static str)] {
    &[]
}

/// `siginfo_t` as the kernel fills it for SIGSYS on a 64-bit architecture
/// (`include/uapi/asm-generic/siginfo.h`: three ints, padding, then the union's `_sigsys`).
#[repr(C)]
struct SigsysInfo {
    signo: libc::c_int,
    errno: libc::c_int,
    code: libc::c_int,
    _pad: libc::c_int,
    call_addr: *mut libc::c_void,
    syscall: libc::c_int,
    arch: libc::c_uint,
}

/// A line built in a stack buffer, without allocating (the SIGSYS handler's).
struct Line {
    buf: [u8; 256],
    len: usize,
}

impl Line {
    fn push(&mut self, s: &[u8]) {
        for &b in s {
            if self.len < self.buf.len() {
                self.buf[self.len] = b;
                self.len += 1;
            }
        }
    }

    fn push_num(&mut self, mut n: u64) {
        let mut digits = [0u8; 20];
        let mut i = digits.len();
        loop {
            i -= 1;
            digits[i] = b'0' + (n % 10) as u8;
            n /= 10;
            if n == 0 {
                break;
            }
        }
        self.push(&digits[i..]);
    }
}

/// The line the handler writes for call `nr`.
fn report_line(nr: i64) -> Line {
    let mut l = Line {
        buf: [0; 256],
        len: 0,
    };
    l.push(b"vpn: seccomp: system call ");
    match syscall_name(nr) {
        Some(name) => l.push(name.as_bytes()),
        None => l.push(b"(unknown)"),
    }
    l.push(b" (number ");
    if nr < 0 {
        l.push(b"-");
    }
    l.push_num(nr.unsigned_abs());
    l.push(
        b") is not in the daemon's allowlist; stopping (--no-sandbox runs without the filter)\n",
    );
    l
}

extern "C" fn on_sigsys(_sig: libc::c_int, info: *mut libc::siginfo_t, _ctx: *mut libc::c_void) {
    // SAFETY: the kernel passes a valid siginfo for a SA_SIGINFO handler; for SIGSYS it has
    // the `_sigsys` layout `SigsysInfo` mirrors.
    let nr = unsafe { (*info.cast::<SigsysInfo>()).syscall };
    let line = report_line(i64::from(nr));
    let fd = REPORT_FD.load(Ordering::Relaxed);
    // SAFETY: write(2) of a stack buffer; async-signal-safe.
    unsafe { libc::write(fd, line.buf.as_ptr().cast(), line.len) };
    // SAFETY: signal, sigprocmask, getpid, gettid, tgkill and _exit are async-signal-safe
    // system calls with integer arguments or pointers to locals.
    unsafe {
        libc::signal(libc::SIGSYS, libc::SIG_DFL);
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGSYS);
        libc::pthread_sigmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut());
        libc::syscall(
            libc::SYS_tgkill,
            libc::getpid(),
            libc::syscall(libc::SYS_gettid),
            libc::SIGSYS,
        );
        libc::_exit(128 + libc::SIGSYS);
    }
}

/// Installs the SIGSYS handler that reports a call the seccomp filter refused on `fd`
/// (usually 2) and ends the process with SIGSYS. Install it before the filter.
pub fn install_sigsys_reporter(fd: i32) -> io::Result<()> {
    REPORT_FD.store(fd, Ordering::Relaxed);
    // SAFETY: sigaction is plain data, initialised field by field below.
    let mut sa: libc::sigaction = unsafe { std::mem::zeroed() };
    sa.sa_sigaction = on_sigsys as *const () as libc::sighandler_t;
    sa.sa_flags = libc::SA_SIGINFO;
    // SAFETY: `sa.sa_mask` is a writable sigset_t.
    unsafe { libc::sigemptyset(&mut sa.sa_mask) };
    // SAFETY: `sa` is initialised and outlives the call; the old action is not asked for.
    if unsafe { libc::sigaction(libc::SIGSYS, &sa, std::ptr::null_mut()) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Installs a compiled filter on the calling thread (`PR_SET_SECCOMP`), with `no_new_privs`
/// set first. For a process that has one thread (the socket cleaner); the daemon's threads
/// get theirs through `seccompiler`.
pub fn apply_filter(filter: &[libc::sock_filter]) -> io::Result<()> {
    let len = u16::try_from(filter.len())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "filter too long"))?;
    let prog = libc::sock_fprog {
        len,
        filter: filter.as_ptr().cast_mut(),
    };
    crate::privileges::set_no_new_privs()?;
    // SAFETY: `prog` points to `len` instructions that outlive the call; the kernel copies
    // them.
    let rc = unsafe {
        libc::prctl(
            libc::PR_SET_SECCOMP,
            libc::SECCOMP_MODE_FILTER as libc::c_ulong,
            &prog as *const libc::sock_fprog,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// The calling thread's seccomp mode (`/proc/self/status`'s `Seccomp`: 0 none, 2 filter).
pub fn mode() -> i32 {
    // SAFETY: integer arguments only.
    unsafe { libc::prctl(libc::PR_GET_SECCOMP, 0, 0, 0, 0) }
}

/// Calls outside the daemon's allowlist, for the test that its filter bites
/// (`vpn sandbox-probe`). Each one is harmless where no filter stops it.
pub mod probes {
    use std::ffi::CString;
    use std::io;

    /// `mount(2)` with no arguments (`EFAULT` without a filter).
    pub fn mount() -> io::Result<()> {
        // SAFETY: null pointers: the kernel refuses them with EFAULT before using any.
        let rc = unsafe {
            libc::mount(
                std::ptr::null(),
                std::ptr::null(),
                std::ptr::null(),
                0,
                std::ptr::null(),
            )
        };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// `ptrace(PTRACE_TRACEME)`.
    pub fn ptrace() -> io::Result<()> {
        // SAFETY: PTRACE_TRACEME takes no pointers.
        let rc = unsafe { libc::ptrace(libc::PTRACE_TRACEME, 0, 0, 0) };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// `execve(path, [path], [])`: replaces the process where nothing stops it.
    pub fn execve(path: &str) -> io::Result<()> {
        let p = CString::new(path)
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "path contains NUL"))?;
        let argv = [p.as_ptr(), std::ptr::null()];
        let envp = [std::ptr::null()];
        // SAFETY: NUL-terminated path and NULL-terminated argument and environment arrays
        // that outlive the call.
        unsafe { libc::execve(p.as_ptr(), argv.as_ptr(), envp.as_ptr()) };
        Err(io::Error::last_os_error())
    }

    /// `socket(domain, SOCK_DGRAM, 0)`, closed again if it opened.
    pub fn socket(domain: libc::c_int) -> io::Result<()> {
        // SAFETY: integer arguments only.
        let fd = unsafe { libc::socket(domain, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` was just opened here and is closed once.
        unsafe { libc::close(fd) };
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
    #[test]
    fn names_and_numbers() {
        assert_eq!(syscall_number("mount"), Some(libc::SYS_mount));
        assert_eq!(syscall_name(libc::SYS_mount), Some("mount"));
        assert_eq!(syscall_name(libc::SYS_recvmmsg), Some("recvmmsg"));
        assert_eq!(syscall_name(libc::SYS_clone3), Some("clone3"));
        assert_eq!(syscall_name(-1), None);
        assert_eq!(syscall_name(100_000), None);
        assert!(
            names().windows(2).all(|w| w[0].0 < w[1].0),
            "sorted, no duplicates"
        );
    }

    #[test]
    fn the_report_names_the_call() {
        let l = report_line(libc::SYS_ptrace);
        let s = std::str::from_utf8(&l.buf[..l.len]).unwrap();
        assert!(
            s.starts_with("vpn: seccomp: system call ptrace (number "),
            "{s}"
        );
        assert!(
            s.ends_with("--no-sandbox runs without the filter)\n"),
            "{s}"
        );
        let l = report_line(99_999);
        let s = std::str::from_utf8(&l.buf[..l.len]).unwrap();
        assert!(s.contains("(unknown) (number 99999)"), "{s}");
    }
}
