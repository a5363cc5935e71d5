//! Giving up root: the user database look-ups, the capability sets, the bounding and ambient
//! sets, securebits, `no_new_privs`, and the uid/gid switch the daemon makes once its setup is
//! done (policy in `cmd/vpn/src/daemon/sandbox/`).
//!
//! Capabilities, securebits and `no_new_privs` belong to a thread; a thread inherits them from
//! the one that creates it. [`drop_to`] therefore changes the calling thread only, and the
//! daemon calls it while its main thread is the only one (every later thread starts with the
//! credentials it leaves). glibc's `setresuid`/`setresgid`/`setgroups` would switch every
//! thread, but the capability calls could not follow them there.

use std::ffi::{CStr, CString};
use std::io;

/// `CAP_NET_BIND_SERVICE` (linux/capability.h): bind a port below
/// `net.ipv4.ip_unprivileged_port_start`.
pub const CAP_NET_BIND_SERVICE: u32 = 10;
/// `CAP_NET_ADMIN`: `SO_MARK`, `SO_RCVBUFFORCE`/`SO_SNDBUFFORCE`, an interface's MTU.
pub const CAP_NET_ADMIN: u32 = 12;
/// `CAP_NET_RAW`.
pub const CAP_NET_RAW: u32 = 13;

/// The names `capabilities(7)` gives capabilities 0..=40, lower case without `cap_`.
const CAP_NAMES: [&str; 41] = [
    "chown",
    "dac_override",
    "dac_read_search",
    "fowner",
    "fsetid",
    "kill",
    "setgid",
    "setuid",
    "setpcap",
    "linux_immutable",
    "net_bind_service",
    "net_broadcast",
    "net_admin",
    "net_raw",
    "ipc_lock",
    "ipc_owner",
    "sys_module",
    "sys_rawio",
    "sys_chroot",
    "sys_ptrace",
    "sys_pacct",
    "sys_admin",
    "sys_boot",
    "sys_nice",
    "sys_resource",
    "sys_time",
    "sys_tty_config",
    "mknod",
    "lease",
    "audit_write",
    "audit_control",
    "setfcap",
    "mac_override",
    "mac_admin",
    "syslog",
    "wake_alarm",
    "block_suspend",
    "audit_read",
    "perfmon",
    "bpf",
    "checkpoint_restore",
];

/// The name of capability `cap` (`net_admin`), or its number for one this table predates.
pub fn cap_name(cap: u32) -> String {
    CAP_NAMES
        .get(cap as usize)
        .map_or_else(|| format!("cap{cap}"), |n| (*n).to_owned())
}

/// The names of the capabilities in the mask `set`, in number order.
pub fn cap_names(set: u64) -> Vec<String> {
    (0..64)
        .filter(|c| set & (1 << c) != 0)
        .map(cap_name)
        .collect()
}

/// A user from the user database (`getpwnam_r`/`getpwuid_r`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct User {
    /// The login name.
    pub name: String,
    /// The user id.
    pub uid: u32,
    /// The primary group id.
    pub gid: u32,
}

/// Looks a user up by name; `Ok(None)` if there is no such user.
pub fn user_by_name(name: &str) -> io::Result<Option<User>> {
    let c = CString::new(name)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "user name contains NUL"))?;
    passwd_lookup(&|pw, buf, len, out| {
        // SAFETY: every pointer is valid for the call: `c` is NUL-terminated, `pw` and `out`
        // are writable locals of the caller, `buf` is `len` writable bytes.
        unsafe { libc::getpwnam_r(c.as_ptr(), pw, buf, len, out) }
    })
}

/// Looks a user up by uid; `Ok(None)` if no entry has it.
pub fn user_by_uid(uid: u32) -> io::Result<Option<User>> {
    passwd_lookup(&|pw, buf, len, out| {
        // SAFETY: as in `user_by_name`.
        unsafe { libc::getpwuid_r(uid, pw, buf, len, out) }
    })
}

type PasswdCall<'a> =
    dyn Fn(*mut libc::passwd, *mut libc::c_char, usize, *mut *mut libc::passwd) -> libc::c_int + 'a;

fn passwd_lookup(call: &PasswdCall<'_>) -> io::Result<Option<User>> {
    let mut len = 1024usize;
    loop {
        let mut buf = vec![0 as libc::c_char; len];
        // SAFETY: passwd is plain data, filled in by the call before any read.
        let mut pw: libc::passwd = unsafe { std::mem::zeroed() };
        let mut out: *mut libc::passwd = std::ptr::null_mut();
        let rc = call(&mut pw, buf.as_mut_ptr(), buf.len(), &mut out);
        if rc == libc::ERANGE && len < 1 << 20 {
            len *= 4;
            continue;
        }
        if rc != 0 {
            return Err(io::Error::from_raw_os_error(rc));
        }
        if out.is_null() {
            return Ok(None);
        }
        // SAFETY: on success `pw_name` points to a NUL-terminated string inside `buf`, which
        // is still alive.
        let name = unsafe { CStr::from_ptr(pw.pw_name) }
            .to_string_lossy()
            .into_owned();
        return Ok(Some(User {
            name,
            uid: pw.pw_uid,
            gid: pw.pw_gid,
        }));
    }
}

/// Looks a group up by name (`getgrnam_r`); `Ok(None)` if there is no such group.
pub fn group_by_name(name: &str) -> io::Result<Option<u32>> {
    let c = CString::new(name)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "group name contains NUL"))?;
    let mut len = 1024usize;
    loop {
        let mut buf = vec![0 as libc::c_char; len];
        // SAFETY: group is plain data, filled in by the call before any read.
        let mut gr: libc::group = unsafe { std::mem::zeroed() };
        let mut out: *mut libc::group = std::ptr::null_mut();
        // SAFETY: `c` is NUL-terminated; `gr`, `out` and `buf` (of `buf.len()` bytes) are
        // writable and outlive the call.
        let rc =
            unsafe { libc::getgrnam_r(c.as_ptr(), &mut gr, buf.as_mut_ptr(), buf.len(), &mut out) };
        if rc == libc::ERANGE && len < 1 << 20 {
            len *= 4;
            continue;
        }
        if rc != 0 {
            return Err(io::Error::from_raw_os_error(rc));
        }
        return Ok((!out.is_null()).then_some(gr.gr_gid));
    }
}

/// The calling thread's capability sets, as masks of capability numbers.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Capabilities {
    /// What the thread can use now.
    pub effective: u64,
    /// What it may make effective.
    pub permitted: u64,
    /// What an `execve` may pass on.
    pub inheritable: u64,
}

#[repr(C)]
struct CapHeader {
    version: u32,
    pid: libc::c_int,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

/// `_LINUX_CAPABILITY_VERSION_3`: 64-bit sets in two words.
const CAP_V3: u32 = 0x2008_0522;

/// The calling thread's capability sets (`capget`).
pub fn capabilities() -> io::Result<Capabilities> {
    let mut hdr = CapHeader {
        version: CAP_V3,
        pid: 0,
    };
    let mut data = [CapData::default(); 2];
    // SAFETY: capget reads the header and writes two CapData records (version 3), both
    // locals that outlive the call.
    let rc = unsafe { libc::syscall(libc::SYS_capget, &mut hdr, data.as_mut_ptr()) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    let join = |lo: u32, hi: u32| u64::from(lo) | (u64::from(hi) << 32);
    Ok(Capabilities {
        effective: join(data[0].effective, data[1].effective),
        permitted: join(data[0].permitted, data[1].permitted),
        inheritable: join(data[0].inheritable, data[1].inheritable),
    })
}

/// Sets the calling thread's capability sets (`capset`): the permitted set can only shrink,
/// the effective set must lie within it.
pub fn set_capabilities(c: Capabilities) -> io::Result<()> {
    let mut hdr = CapHeader {
        version: CAP_V3,
        pid: 0,
    };
    let lo = |v: u64| (v & 0xffff_ffff) as u32;
    let hi = |v: u64| (v >> 32) as u32;
    let data = [
        CapData {
            effective: lo(c.effective),
            permitted: lo(c.permitted),
            inheritable: lo(c.inheritable),
        },
        CapData {
            effective: hi(c.effective),
            permitted: hi(c.permitted),
            inheritable: hi(c.inheritable),
        },
    ];
    // SAFETY: capset reads the header and two CapData records, locals that outlive the call.
    let rc = unsafe { libc::syscall(libc::SYS_capset, &mut hdr, data.as_ptr()) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

fn prctl(op: libc::c_int, a: libc::c_ulong, b: libc::c_ulong) -> io::Result<libc::c_int> {
    // SAFETY: the prctl operations used here take integer arguments only.
    let rc = unsafe { libc::prctl(op, a, b, 0 as libc::c_ulong, 0 as libc::c_ulong) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(rc)
}

/// The highest capability number the kernel knows (probes the bounding set).
pub fn last_cap() -> u32 {
    let mut last = 0;
    for cap in 0..64 {
        if prctl(libc::PR_CAPBSET_READ, cap, 0).is_err() {
            break;
        }
        last = cap as u32;
    }
    last
}

/// The calling thread's bounding set, as a mask.
pub fn bounding_set() -> u64 {
    (0..64u64)
        .take_while(|&c| prctl(libc::PR_CAPBSET_READ, c as libc::c_ulong, 0).is_ok())
        .filter(|&c| prctl(libc::PR_CAPBSET_READ, c as libc::c_ulong, 0).is_ok_and(|v| v == 1))
        .fold(0, |m, c| m | (1 << c))
}

/// Sets `no_new_privs` on the calling thread (and the threads it creates): no `execve` can
/// gain privileges again, and an unprivileged thread may install seccomp filters.
pub fn set_no_new_privs() -> io::Result<()> {
    prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0).map(drop)
}

/// Whether `no_new_privs` is set on the calling thread.
pub fn no_new_privs() -> bool {
    prctl(libc::PR_GET_NO_NEW_PRIVS, 0, 0).is_ok_and(|v| v == 1)
}

/// The calling thread's real, effective and saved user ids.
pub fn uids() -> (u32, u32, u32) {
    let (mut r, mut e, mut s) = (0, 0, 0);
    // SAFETY: three writable locals.
    unsafe { libc::getresuid(&mut r, &mut e, &mut s) };
    (r, e, s)
}

/// The calling thread's real, effective and saved group ids.
pub fn gids() -> (u32, u32, u32) {
    let (mut r, mut e, mut s) = (0, 0, 0);
    // SAFETY: three writable locals.
    unsafe { libc::getresgid(&mut r, &mut e, &mut s) };
    (r, e, s)
}

/// The number of supplementary groups of the calling thread.
pub fn supplementary_groups() -> usize {
    // SAFETY: a size of 0 asks for the count only; no buffer is written.
    let n = unsafe { libc::getgroups(0, std::ptr::null_mut()) };
    usize::try_from(n).unwrap_or(0)
}

/// Switches the calling thread from root to `uid`/`gid` with no supplementary groups, keeping
/// only the capabilities in `keep` (a mask): permitted and effective are `keep`, inheritable
/// and ambient empty, the bounding set `keep`; securebits lock root's special treatment and
/// the ambient set away; `no_new_privs` is set. Then checks what it did: the ids, the sets,
/// and that uid 0 cannot be taken back.
///
/// Only this thread changes (raw system calls, not glibc's process-wide wrappers): call it
/// while it is the only thread, so that every thread created afterwards inherits the result.
pub fn drop_to(uid: u32, gid: u32, keep: u64) -> io::Result<()> {
    let step = |what: &str, r: io::Result<()>| {
        r.map_err(|e| io::Error::new(e.kind(), format!("{what}: {e}")))
    };
    let last = last_cap();
    // The bounding set first, while CAP_SETPCAP is still effective.
    for cap in 0..=last {
        if keep & (1 << cap) == 0 {
            step(
                "dropping from the bounding set",
                prctl(libc::PR_CAPBSET_DROP, cap as libc::c_ulong, 0).map(drop),
            )?;
        }
    }
    // Permitted capabilities survive the uid change (KEEP_CAPS, cleared again below); no
    // exec can make uid 0 special again or raise an ambient capability.
    let bits = libc::SECBIT_KEEP_CAPS
        | libc::SECBIT_NOROOT
        | libc::SECBIT_NOROOT_LOCKED
        | libc::SECBIT_NO_CAP_AMBIENT_RAISE
        | libc::SECBIT_NO_CAP_AMBIENT_RAISE_LOCKED;
    step(
        "securebits",
        prctl(libc::PR_SET_SECUREBITS, bits as libc::c_ulong, 0).map(drop),
    )?;
    step(
        "clearing the ambient set",
        prctl(
            libc::PR_CAP_AMBIENT,
            libc::PR_CAP_AMBIENT_CLEAR_ALL as libc::c_ulong,
            0,
        )
        .map(drop),
    )?;
    // SAFETY: setgroups with a count of 0 reads no memory.
    let rc = unsafe { libc::syscall(libc::SYS_setgroups, 0, std::ptr::null::<libc::gid_t>()) };
    step("setgroups", errno(rc))?;
    // SAFETY: integer arguments only.
    let rc = unsafe { libc::syscall(libc::SYS_setresgid, gid, gid, gid) };
    step("setresgid", errno(rc))?;
    // SAFETY: integer arguments only.
    let rc = unsafe { libc::syscall(libc::SYS_setresuid, uid, uid, uid) };
    step("setresuid", errno(rc))?;
    step(
        "capset",
        set_capabilities(Capabilities {
            effective: keep,
            permitted: keep,
            inheritable: 0,
        }),
    )?;
    step(
        "clearing keep-caps",
        prctl(libc::PR_SET_KEEPCAPS, 0, 0).map(drop),
    )?;
    step("no_new_privs", set_no_new_privs())?;
    verify(uid, gid, keep)
}

fn errno(rc: libc::c_long) -> io::Result<()> {
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

fn verify(uid: u32, gid: u32, keep: u64) -> io::Result<()> {
    let bad = |what: String| Err(io::Error::other(format!("after the switch: {what}")));
    if uids() != (uid, uid, uid) {
        return bad(format!("uids {:?}, wanted {uid}", uids()));
    }
    if gids() != (gid, gid, gid) {
        return bad(format!("gids {:?}, wanted {gid}", gids()));
    }
    if supplementary_groups() != 0 {
        return bad(format!("{} supplementary groups", supplementary_groups()));
    }
    let caps = capabilities()?;
    if caps.effective != keep || caps.permitted != keep || caps.inheritable != 0 {
        return bad(format!("capabilities {caps:?}, wanted {keep:#x}"));
    }
    if uid != 0 {
        // SAFETY: integer arguments only; expected to fail.
        let rc = unsafe { libc::syscall(libc::SYS_setresuid, 0, 0, 0) };
        if rc == 0 {
            return bad("uid 0 could be taken back".into());
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capability_names() {
        assert_eq!(cap_name(CAP_NET_ADMIN), "net_admin");
        assert_eq!(cap_name(CAP_NET_BIND_SERVICE), "net_bind_service");
        assert_eq!(cap_name(63), "cap63");
        assert_eq!(
            cap_names((1 << CAP_NET_ADMIN) | (1 << CAP_NET_BIND_SERVICE)),
            ["net_bind_service", "net_admin"]
        );
    }

    #[test]
    fn user_database() {
        let root = user_by_name("root")
            .unwrap()
            .expect("root in the user database");
        assert_eq!((root.uid, root.gid), (0, 0));
        assert_eq!(user_by_uid(0).unwrap().unwrap().name, "root");
        assert_eq!(user_by_name("no-such-user-vpn-test").unwrap(), None);
        assert_eq!(group_by_name("root").unwrap(), Some(0));
        assert_eq!(group_by_name("no-such-group-vpn-test").unwrap(), None);
    }

    #[test]
    fn the_sets_read_back() {
        let c = capabilities().unwrap();
        assert_eq!(c.effective & !c.permitted, 0);
        assert!(last_cap() >= 37, "a kernel older than 5.8?");
        assert_eq!(bounding_set() & !((2u64 << last_cap()) - 1), 0);
    }

    /// The whole switch, in a child process (it cannot be undone): uid and gid 65534, only
    /// CAP_NET_ADMIN left, `no_new_privs`, and no way back to uid 0.
    #[test]
    fn drop_to_an_unprivileged_user_keeps_only_what_was_asked() {
        if uids().1 != 0 {
            eprintln!("skipped: needs root");
            return;
        }
        let keep = 1u64 << CAP_NET_ADMIN;
        // SAFETY: the child runs only the calls below (no locks the parent's other threads
        // may hold are taken) and leaves with _exit.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0);
        if pid == 0 {
            let code = match drop_to(65534, 65534, keep) {
                Ok(()) if no_new_privs() && bounding_set() == keep => 0,
                Ok(()) => 2,
                Err(_) => 1,
            };
            // SAFETY: ends the child without running the parent's destructors.
            unsafe { libc::_exit(code) };
        }
        let mut status = 0;
        // SAFETY: waits for our own child; `status` is a writable local.
        unsafe { libc::waitpid(pid, &mut status, 0) };
        assert!(libc::WIFEXITED(status), "child status {status:#x}");
        assert_eq!(libc::WEXITSTATUS(status), 0);
    }
}
