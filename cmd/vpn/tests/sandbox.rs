//! The daemon's seccomp filter bites (no root needed: `no_new_privs` lets any process install
//! one): `vpn sandbox-probe <call>` installs exactly the daemon's filter, then makes the call.
//! A call outside the list ends the process with SIGSYS and a line naming the call; the calls
//! the daemon needs (a new thread, a UDP socket) pass.

#![cfg(all(
    target_os = "linux",
    any(target_arch = "x86_64", target_arch = "aarch64")
))]

use std::os::unix::process::ExitStatusExt;
use std::process::Command;

const VPN: &str = env!("CARGO_BIN_EXE_vpn");

fn probe(call: &str) -> (std::process::ExitStatus, String) {
    let out = Command::new(VPN)
        .args(["sandbox-probe", call])
        .output()
        .unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    (out.status, text)
}

#[test]
fn a_call_outside_the_list_ends_the_process_naming_the_call() {
    for (call, named) in [
        ("mount", "mount"),
        ("ptrace", "ptrace"),
        ("execve", "execve"),
        ("socket-packet", "socket"),
    ] {
        let (status, text) = probe(call);
        assert_eq!(
            status.signal(),
            Some(libc::SIGSYS),
            "{call}: {status} {text}"
        );
        let want = format!("vpn: seccomp: system call {named} (number ");
        assert!(text.contains(&want), "{call}: {text}");
        assert!(!text.contains("not stopped"), "{call}: {text}");
    }
}

#[test]
fn a_new_process_is_refused_and_the_daemons_own_calls_pass() {
    let (status, text) = probe("fork");
    assert_eq!(status.signal(), Some(libc::SIGSYS), "fork: {status} {text}");
    for call in ["thread", "udp"] {
        let (status, text) = probe(call);
        assert!(status.success(), "{call}: {status} {text}");
        assert!(text.contains("not stopped (Ok(()))"), "{call}: {text}");
    }
}
