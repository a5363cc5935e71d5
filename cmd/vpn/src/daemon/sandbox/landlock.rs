//! The daemon's Landlock ruleset: after setup it may open no file at all, bind or connect no
//! TCP port, connect to no abstract Unix socket and signal no process outside itself.
//!
//! Nothing the daemon does after setup needs a path: its log is the stderr its parent opened,
//! the TUN and every socket are descriptors it already has (or makes without a path), the UAPI
//! socket's watch was opened before, and the socket file is removed by the cleaner process
//! (`vpn_sys::cleaner`), which this ruleset does not cover. Only a daemon that keeps root
//! (`--no-drop-privileges`) removes the socket itself: it may remove files beneath the
//! socket's directory, nothing else.
//!
//! Best effort, as Landlock's author recommends: every right the running kernel knows is
//! handled (ABI 6's at most: files, TCP, scopes), and a kernel without Landlock leaves the
//! daemon as it is, which the log and `vpn show` say.

use landlock::{
    path_beneath_rules, Access, AccessFs, AccessNet, CompatLevel, Compatible, Ruleset, RulesetAttr,
    RulesetCreatedAttr, RulesetStatus, Scope, ABI,
};
use std::path::Path;

/// The newest Landlock ABI whose rights this ruleset was tested with.
const TESTED: ABI = ABI::V6;

/// What the kernel enforced.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Status {
    /// `--no-sandbox`.
    Off,
    /// No Landlock in this kernel (or not enabled at boot).
    Unsupported,
    /// Some of the rights are handled (an older ABI).
    Partial,
    /// Every right of the tested ABI is handled.
    Enforced,
}

impl Status {
    /// The `sandbox.landlock` value of `stats=1`.
    pub fn code(self) -> u64 {
        match self {
            Status::Off => 0,
            Status::Unsupported => 1,
            Status::Partial => 2,
            Status::Enforced => 3,
        }
    }

    /// What `vpn show` prints for a `sandbox.landlock` value.
    pub fn describe(code: u64) -> &'static str {
        match code {
            0 => "off",
            1 => "not supported by this kernel",
            2 => "partially enforced (older kernel)",
            3 => "enforced",
            _ => "unknown",
        }
    }
}

/// Restricts the calling thread and every thread it creates from now on. `removable`: a
/// directory whose files the daemon may still remove (its UAPI socket's, when it keeps root).
pub fn restrict(removable: Option<&Path>) -> Result<Status, crate::Error> {
    let err = |e: landlock::RulesetError| format!("landlock: {e}");
    let mut created = Ruleset::default()
        .set_compatibility(CompatLevel::BestEffort)
        .handle_access(AccessFs::from_all(TESTED))
        .map_err(err)?
        .handle_access(AccessNet::from_all(TESTED))
        .map_err(err)?
        .scope(Scope::from_all(TESTED))
        .map_err(err)?
        .create()
        .map_err(err)?;
    if let Some(dir) = removable {
        created = created
            .add_rules(path_beneath_rules([dir], AccessFs::RemoveFile))
            .map_err(err)?;
    }
    let status = created.restrict_self().map_err(err)?;
    Ok(match status.ruleset {
        RulesetStatus::FullyEnforced => Status::Enforced,
        RulesetStatus::PartiallyEnforced => Status::Partial,
        RulesetStatus::NotEnforced => Status::Unsupported,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// In a child process (a ruleset cannot be lifted): no file opens, an inherited
    /// descriptor still works, a TCP connect is refused where the kernel handles TCP.
    #[test]
    fn a_restricted_process_opens_nothing_but_keeps_its_descriptors() {
        const VAR: &str = "VPN_LANDLOCK_TEST_CHILD";
        if std::env::var_os(VAR).is_some() {
            let keep = std::fs::File::open("/proc/self/status").unwrap();
            let st = restrict(None).unwrap();
            let opened = std::fs::File::open("/etc/hostname");
            match st {
                Status::Unsupported => assert!(opened.is_ok()),
                _ => assert!(opened.is_err(), "opened a file under {st:?}"),
            }
            use std::io::Read;
            let mut s = String::new();
            (&keep).read_to_string(&mut s).unwrap();
            assert!(s.contains("Name:"));
            println!("landlock status {st:?}");
            return;
        }
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "daemon::sandbox::landlock::tests::a_restricted_process_opens_nothing_but_keeps_its_descriptors",
                "--exact",
                "--nocapture",
            ])
            .env(VAR, "1")
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{text}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(text.contains("landlock status"), "{text}");
    }
}
