//! The daemon's seccomp allowlist: the system calls its threads make after setup (collected by
//! running the netns suite with the filter in audit mode, `VPN_SECCOMP_AUDIT=1`, and reading
//! the kernel's log; docs/design-notes.md lists them and why each is there), with `socket`
//! narrowed to the families the daemon opens, `ioctl` to the requests it makes, and `clone` to
//! new threads (no new process). Anything else traps: the SIGSYS handler of
//! `vpn_sys::seccomp` names the call in the log and the process ends with SIGSYS.
//!
//! Two programs: the allowlist, and a second one that answers `clone3` with `ENOSYS`. glibc
//! then creates threads with `clone`, whose flags (unlike `clone3`'s, which are in memory) the
//! allowlist can check; the kernel applies the strictest answer of all filters.

use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule, TargetArch,
};
use std::collections::BTreeMap;

/// The architecture the filter is compiled for (`None`: no filter on this one).
#[cfg(target_arch = "x86_64")]
pub const ARCH: Option<TargetArch> = Some(TargetArch::x86_64);
#[cfg(target_arch = "aarch64")]
pub const ARCH: Option<TargetArch> = Some(TargetArch::aarch64);
#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
pub const ARCH: Option<TargetArch> = None;

/// Calls allowed with any arguments, on every architecture that has them.
const ANY_ARGS: &[&str] = &[
    // Memory (the allocator, thread stacks).
    "brk",
    "mmap",
    "munmap",
    "mremap",
    "mprotect",
    "madvise",
    // Threads and their synchronisation.
    "futex",
    "set_robust_list",
    "rseq",
    "sched_yield",
    "sched_getaffinity",
    "sched_setscheduler",
    "sched_getscheduler",
    "sched_getparam",
    "sched_setattr",
    "sched_getattr",
    "sigaltstack",
    "exit",
    "exit_group",
    "getpid",
    "gettid",
    "restart_syscall",
    // Signals: sigwait for SIGINT/SIGTERM, the SIGSYS reporter's calls, masks of new threads.
    "rt_sigaction",
    "rt_sigprocmask",
    "rt_sigreturn",
    "rt_sigtimedwait",
    "tgkill",
    // Time.
    "clock_gettime",
    "clock_getres",
    "clock_nanosleep",
    "nanosleep",
    "gettimeofday",
    // Descriptors: the TUN, sockets, eventfds, inotify, the cleaner's socket.
    "read",
    "write",
    "readv",
    "writev",
    "close",
    "fcntl",
    "dup",
    "dup3",
    "eventfd2",
    "poll",
    "ppoll",
    // Paths: the UAPI socket's identity (stat), and opens Landlock refuses (a library's
    // optional look at a /proc or /sys file, answered with EACCES instead of a kill).
    "newfstatat",
    "fstat",
    "statx",
    "stat",
    "lstat",
    "openat",
    // Sockets: UDP batches, the UAPI server's connections, netlink route events.
    "bind",
    "connect",
    "getsockname",
    "getpeername",
    "setsockopt",
    "getsockopt",
    "recvmmsg",
    "sendmmsg",
    "recvmsg",
    "sendmsg",
    "recvfrom",
    "sendto",
    "accept4",
    "shutdown",
    // Keys and handshake nonces.
    "getrandom",
    // Waiting for the socket cleaner at shutdown.
    "wait4",
    // The kernel's version, for the offloads it supports (vpn_sys::sockopt::kernel_version).
    "uname",
    // Thread names (PR_SET_NAME); narrowed below.
];

/// Calls allowed only to a daemon that removes its UAPI socket itself (it kept its user, so no
/// cleaner does it).
const SELF_REMOVING: &[&str] = &["unlink", "unlinkat"];

/// `socket(2)` families the daemon opens after setup: UDP binds and connected sockets
/// (AF_INET, AF_INET6), the route listener and the TUN's link events (AF_NETLINK), and the
/// interface ioctl socket (AF_INET). AF_UNIX is left out: the UAPI server accepts, never opens.
const SOCKET_FAMILIES: &[libc::c_int] = &[libc::AF_INET, libc::AF_INET6, libc::AF_NETLINK];

/// `ioctl(2)` requests after setup: the interface's MTU, index and flags (MTU events and
/// the namespace watch), close-on-exec and non-blocking on new sockets (std and socket2).
const IOCTLS: &[libc::c_ulong] = &[
    libc::SIOCGIFMTU,
    libc::SIOCGIFINDEX,
    libc::SIOCGIFFLAGS,
    libc::FIOCLEX,
    libc::FIONBIO,
];

/// `prctl(2)` operations: a new thread's name; reading no_new_privs and the seccomp mode for
/// `vpn show`.
const PRCTLS: &[libc::c_int] = &[
    libc::PR_SET_NAME,
    libc::PR_GET_NO_NEW_PRIVS,
    libc::PR_GET_SECCOMP,
];

fn eq(arg: u8, v: u64) -> SeccompCondition {
    SeccompCondition::new(arg, SeccompCmpArgLen::Dword, SeccompCmpOp::Eq, v)
        .expect("argument index in range")
}

fn nr(name: &str) -> Option<i64> {
    vpn_sys::seccomp::syscall_number(name)
}

/// The allowlist as rules per call number (the names this architecture has).
fn rules(removes_socket: bool) -> BTreeMap<i64, Vec<SeccompRule>> {
    let mut m = BTreeMap::new();
    let extra = if removes_socket { SELF_REMOVING } else { &[] };
    for n in ANY_ARGS.iter().chain(extra).filter_map(|n| nr(n)) {
        m.insert(n, Vec::new());
    }
    let one_of = |arg: u8, vals: &mut dyn Iterator<Item = u64>| -> Vec<SeccompRule> {
        vals.map(|v| SeccompRule::new(vec![eq(arg, v)]).expect("one condition"))
            .collect()
    };
    if let Some(n) = nr("socket") {
        m.insert(n, one_of(0, &mut SOCKET_FAMILIES.iter().map(|&f| f as u64)));
    }
    if let Some(n) = nr("ioctl") {
        // The request is an unsigned int in the kernel: compare the low 32 bits.
        m.insert(n, one_of(1, &mut IOCTLS.iter().map(|&r| r & 0xffff_ffff)));
    }
    if let Some(n) = nr("prctl") {
        m.insert(n, one_of(0, &mut PRCTLS.iter().map(|&p| p as u64)));
    }
    if let Some(n) = nr("clone") {
        let thread = libc::CLONE_THREAD as u64;
        let c = SeccompCondition::new(
            0,
            SeccompCmpArgLen::Qword,
            SeccompCmpOp::MaskedEq(thread),
            thread,
        )
        .expect("argument index in range");
        m.insert(n, vec![SeccompRule::new(vec![c]).expect("one condition")]);
    }
    if let Some(n) = nr("clone3") {
        // Allowed here, answered ENOSYS by the second program.
        m.insert(n, Vec::new());
    }
    // The netns test that a running daemon stops on a call outside its list takes one off
    // (`VPN_SECCOMP_TEST_DENY=getsockname`): the list only ever gets shorter.
    if let Some(n) = std::env::var("VPN_SECCOMP_TEST_DENY")
        .ok()
        .as_deref()
        .and_then(nr)
    {
        m.remove(&n);
    }
    m
}

/// The number of calls the allowlist names on this architecture.
pub fn allowed_calls(removes_socket: bool) -> usize {
    rules(removes_socket).len()
}

/// The daemon's two programs. `audit`: calls outside the list are allowed and logged by the
/// kernel instead of trapped (`VPN_SECCOMP_AUDIT=1`, for collecting the list).
pub fn daemon_filter(
    arch: TargetArch,
    removes_socket: bool,
    audit: bool,
) -> Result<[BpfProgram; 2], crate::Error> {
    let outside = if audit {
        SeccompAction::Log
    } else {
        SeccompAction::Trap
    };
    let main: BpfProgram =
        SeccompFilter::new(rules(removes_socket), outside, SeccompAction::Allow, arch)
            .map_err(|e| format!("seccomp: {e}"))?
            .try_into()
            .map_err(|e| format!("seccomp: {e}"))?;
    let clone3 = nr("clone3").ok_or("seccomp: no clone3 on this architecture")?;
    let no_clone3: BpfProgram = SeccompFilter::new(
        BTreeMap::from([(clone3, Vec::new())]),
        SeccompAction::Allow,
        SeccompAction::Errno(libc::ENOSYS as u32),
        arch,
    )
    .map_err(|e| format!("seccomp: {e}"))?
    .try_into()
    .map_err(|e| format!("seccomp: {e}"))?;
    Ok([main, no_clone3])
}

/// Installs both programs on every thread of the process (TSYNC) and on the threads created
/// later. Returns the number of calls allowed.
pub fn install(arch: TargetArch, removes_socket: bool, audit: bool) -> Result<usize, crate::Error> {
    let programs = daemon_filter(arch, removes_socket, audit)?;
    vpn_sys::seccomp::install_sigsys_reporter(2)?;
    // The clone3 program first: the allowlist, once on, would refuse the second install.
    for p in programs.iter().rev() {
        seccompiler::apply_filter_all_threads(p).map_err(|e| format!("seccomp: {e}"))?;
    }
    Ok(allowed_calls(removes_socket))
}

/// The cleaner's program (`vpn_sys::cleaner`): read and answer on its socket, look at and
/// remove one path, exit. Anything else kills it.
pub fn cleaner_filter(arch: TargetArch) -> Result<Vec<libc::sock_filter>, crate::Error> {
    let calls = [
        "read",
        "write",
        "close",
        "newfstatat",
        "fstat",
        "statx",
        "stat",
        "lstat",
        "unlink",
        "unlinkat",
        "exit",
        "exit_group",
        "rt_sigreturn",
    ];
    let rules: BTreeMap<i64, Vec<SeccompRule>> = calls
        .iter()
        .filter_map(|n| nr(n))
        .map(|n| (n, Vec::new()))
        .collect();
    let p: BpfProgram = SeccompFilter::new(
        rules,
        SeccompAction::KillProcess,
        SeccompAction::Allow,
        arch,
    )
    .map_err(|e| format!("seccomp: {e}"))?
    .try_into()
    .map_err(|e| format!("seccomp: {e}"))?;
    Ok(p.iter()
        .map(|i| libc::sock_filter {
            code: i.code,
            jt: i.jt,
            jf: i.jf,
            k: i.k,
        })
        .collect())
}

/// `vpn sandbox-probe <call>`: installs the daemon's filter on this process exactly as the
/// daemon does, then makes `call`, which the filter must stop (the test that it bites). Returns
/// only if the call was let through.
pub fn probe(call: &str) -> Result<(), crate::Error> {
    let arch = ARCH.ok_or("no seccomp filter on this architecture")?;
    vpn_sys::privileges::set_no_new_privs()?;
    install(arch, false, false)?;
    let r = match call {
        "mount" => vpn_sys::seccomp::probes::mount(),
        "ptrace" => vpn_sys::seccomp::probes::ptrace(),
        "execve" => vpn_sys::seccomp::probes::execve("/bin/true"),
        "socket-packet" => vpn_sys::seccomp::probes::socket(libc::AF_PACKET),
        "fork" => std::process::Command::new("/bin/true").status().map(drop),
        "thread" => std::thread::spawn(|| ())
            .join()
            .map_err(|_| std::io::Error::other("panicked")),
        "udp" => std::net::UdpSocket::bind("127.0.0.1:0").map(drop),
        other => return Err(format!("unknown probe {other:?}").into()),
    };
    println!("{call}: not stopped ({r:?})");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every name in the lists is a system call of x86_64 or aarch64 (a typo would silently
    /// allow nothing).
    #[test]
    fn every_listed_call_exists_here_or_is_x86_64_only() {
        let x86_only = ["poll", "nanosleep", "stat", "lstat", "unlink"];
        for name in ANY_ARGS.iter().chain(SELF_REMOVING) {
            assert!(
                nr(name).is_some() || (cfg!(target_arch = "aarch64") && x86_only.contains(name)),
                "{name} is no system call here"
            );
        }
    }

    #[test]
    fn both_programs_compile_and_the_list_is_small() {
        let Some(arch) = ARCH else { return };
        let [main, no_clone3] = daemon_filter(arch, false, false).unwrap();
        assert!(!main.is_empty() && !no_clone3.is_empty());
        let n = allowed_calls(false);
        assert!((50..90).contains(&n), "{n} calls");
        assert_eq!(
            allowed_calls(true),
            n + SELF_REMOVING.iter().filter(|c| nr(c).is_some()).count()
        );
        assert!(!cleaner_filter(arch).unwrap().is_empty());
    }
}
