//! What the daemon keeps once its setup is done (Linux): an unprivileged user with only the
//! capabilities later work needs, a Landlock ruleset and a seccomp allowlist. The decisions,
//! the figures and the paths not taken are in docs/design-notes.md ("The daemon holds only
//! what it needs"); the README lists the options.
//!
//! The order, in the daemon's main thread (`daemon::serve`):
//! 1. [`Plan::new`] resolves `--user` and the kept capabilities (the user database and
//!    `/proc/sys` are read while files may still be opened).
//! 2. As root, with no other thread yet: the TUN descriptor, the UAPI listener and its watch.
//! 3. [`Plan::confine`]: the socket cleaner is forked (it keeps uid 0 to remove the socket
//!    file later), the thread switches user and capabilities (`vpn_sys::privileges::drop_to`)
//!    and restricts itself with Landlock. Capabilities and Landlock domains are per thread and
//!    inherited by the threads a thread creates, so doing this before any thread exists gives
//!    every later thread the same credentials.
//! 4. The rest of the setup, unprivileged (the TUN wrapped, its MTU set, the bind, the device
//!    and the UAPI server with their threads).
//! 5. [`Confined::seal`]: the seccomp programs on every thread at once (TSYNC), and on every
//!    thread created afterwards.
//!
//! The library and the C ABI never call any of this: a host process is the host's to confine.

mod landlock;
mod privileges;
mod seccomp;

pub use self::landlock::Status as LandlockStatus;
pub use seccomp::probe;

use super::DaemonOptions;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use vpn_ipc::Statistics;
use vpn_sys::cleaner::Cleaner;
use vpn_sys::privileges as sys;

/// What the daemon will do after setup, decided before anything is opened.
pub struct Plan {
    /// `None`: keep the current user (`--no-drop-privileges`, or not started as root).
    target: Option<privileges::Target>,
    keep: u64,
    sandbox: bool,
}

/// What it did; `stats=1` reports it (`sandbox.*`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Report {
    pub uid: u32,
    pub gid: u32,
    /// The effective capabilities.
    pub caps: u64,
    pub no_new_privs: bool,
    /// Calls the seccomp allowlist names (0: no filter).
    pub seccomp_calls: usize,
    pub landlock: u64,
}

impl Report {
    /// The `sandbox.*` lines of `stats=1`.
    pub fn write(&self, out: &mut Statistics) {
        out.push_group(
            "sandbox",
            [
                ("uid", u64::from(self.uid)),
                ("gid", u64::from(self.gid)),
                ("capabilities", self.caps),
                ("no_new_privs", u64::from(self.no_new_privs)),
                ("seccomp_calls", self.seccomp_calls as u64),
                ("landlock", self.landlock),
            ],
        );
    }
}

/// The daemon after [`Plan::confine`].
pub struct Confined {
    /// No cleaner: the daemon removes its UAPI socket itself (and may `unlink`).
    removes_socket: bool,
    sandbox: bool,
    cleaner: Option<Cleaner>,
    landlock: LandlockStatus,
    report: Arc<OnceLock<Report>>,
}

impl Plan {
    pub fn new(opts: &DaemonOptions) -> Result<Plan, crate::Error> {
        let root = sys::uids().1 == 0;
        let target = if opts.no_drop_privileges {
            None
        } else if !root {
            tracing::info!(
                "not started as root (uid {}): no privileges to give up",
                sys::uids().1
            );
            None
        } else {
            Some(privileges::resolve(&opts.user)?)
        };
        Ok(Plan {
            target,
            keep: privileges::kept(opts.low_ports, privileges::unprivileged_port_start()),
            sandbox: !opts.no_sandbox,
        })
    }

    /// Steps 3 of the module doc: the cleaner for the UAPI socket at `socket`, the user
    /// switch, Landlock. Call it from the only thread of the process.
    pub fn confine(self, socket: Option<&Path>) -> Result<Confined, crate::Error> {
        let mut cleaner = None;
        if let Some(t) = &self.target {
            if let Some(path) = socket {
                cleaner = Some(spawn_cleaner(path)?);
            }
            sys::drop_to(t.uid, t.gid, self.keep).map_err(|e| {
                format!(
                    "cannot switch to --user={} ({e}); --no-drop-privileges keeps root",
                    t.spec
                )
            })?;
            tracing::info!(
                "running as uid {} gid {} (--user={}) with {}",
                t.uid,
                t.gid,
                t.spec,
                describe_caps(self.keep)
            );
        } else if sys::uids().1 == 0 {
            tracing::info!("keeping root and every capability (--no-drop-privileges)");
        }
        // Without a cleaner (a daemon that kept its user) the daemon removes its socket itself.
        let removes_socket = cleaner.is_none();
        let landlock = if self.sandbox {
            // Then files beneath the socket's directory may still be removed; nothing else.
            let removable: Option<PathBuf> = removes_socket
                .then(|| socket.and_then(Path::parent).map(Path::to_path_buf))
                .flatten();
            let st = landlock::restrict(removable.as_deref())?;
            tracing::info!("landlock: {}", LandlockStatus::describe(st.code()));
            st
        } else {
            LandlockStatus::Off
        };
        Ok(Confined {
            removes_socket,
            sandbox: self.sandbox,
            cleaner,
            landlock,
            report: Arc::new(OnceLock::new()),
        })
    }
}

impl Confined {
    /// Step 5: the seccomp programs on every thread (unless `--no-sandbox`, or on an
    /// architecture without a filter), then the report.
    pub fn seal(&self) -> Result<(), crate::Error> {
        // Read before the filter, which leaves out the calls that read them.
        let caps = sys::capabilities().map(|c| c.effective).unwrap_or(0);
        let (_, uid, _) = sys::uids();
        let (_, gid, _) = sys::gids();
        let no_new_privs = sys::no_new_privs();
        let mut calls = 0;
        if self.sandbox {
            match seccomp::ARCH {
                Some(arch) => {
                    let audit = std::env::var("VPN_SECCOMP_AUDIT").is_ok_and(|v| v == "1");
                    calls = seccomp::install(arch, self.removes_socket, audit)?;
                    tracing::info!(
                        "seccomp: {calls} system calls allowed{}",
                        if audit {
                            " (audit mode: others are logged by the kernel, not refused)"
                        } else {
                            "; any other stops the daemon"
                        }
                    );
                }
                None => tracing::info!("seccomp: no filter for this architecture"),
            }
        }
        let _ = self.report.set(Report {
            uid,
            gid,
            caps,
            // seccomp sets it where it was not yet (a root daemon without a user switch).
            no_new_privs: no_new_privs || calls > 0,
            seccomp_calls: calls,
            landlock: self.landlock.code(),
        });
        Ok(())
    }

    /// Writes the report into `stats=1` replies (from any thread, once sealed).
    pub fn stats_fn(&self) -> impl Fn(&mut Statistics) + Send + Sync + 'static {
        let r = self.report.clone();
        move |out: &mut Statistics| {
            if let Some(r) = r.get() {
                r.write(out);
            }
        }
    }

    /// Whether the UAPI socket file is the cleaner's to remove.
    pub fn cleaner_removes_socket(&self) -> bool {
        self.cleaner.is_some()
    }

    /// At shutdown: has the cleaner remove the UAPI socket file, and waits for it.
    pub fn finish(&mut self) {
        if let Some(c) = self.cleaner.take() {
            match c.remove_now() {
                Ok(true) => tracing::debug!("the cleaner removed the UAPI socket"),
                Ok(false) => tracing::debug!("the UAPI socket was gone or replaced"),
                Err(e) => tracing::warn!("UAPI socket cleaner: {e}"),
            }
        }
    }
}

fn spawn_cleaner(path: &Path) -> Result<Cleaner, crate::Error> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::symlink_metadata(path)
        .map_err(|e| format!("UAPI socket {}: {e}", path.display()))?;
    let filter = match seccomp::ARCH {
        Some(arch) => seccomp::cleaner_filter(arch)?,
        None => Vec::new(),
    };
    let c = vpn_sys::cleaner::spawn(path, (m.dev(), m.ino()), &filter)
        .map_err(|e| format!("starting the UAPI socket cleaner: {e}"))?;
    tracing::debug!("UAPI socket cleaner: pid {}", c.pid());
    Ok(c)
}

/// `CAP_NET_ADMIN and CAP_NET_BIND_SERVICE`.
pub fn describe_caps(set: u64) -> String {
    let names: Vec<String> = sys::cap_names(set)
        .into_iter()
        .map(|n| format!("CAP_{}", n.to_uppercase()))
        .collect();
    match names.len() {
        0 => "no capabilities".into(),
        _ => names.join(" and "),
    }
}
