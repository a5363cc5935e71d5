//! Where a tunnel's UAPI socket goes and how much packet memory it may use.
//!
//! The Go library fixes its socket directory at link time, to
//! `/data/data/<package>/cache/wireguard`. Here the directory is, in order: the environment
//! variable `VPN_JNI_SOCKET_DIR` at run time (an app sets it with `android.system.Os.setenv`
//! before the first `wgTurnOn`), the same variable when the library was built, or
//! `/data/data/<package>/cache/wireguard` with the package read from the process's command
//! line (Android names an app's process after its package, `com.example.app` or
//! `com.example.app:vpn`). `VPN_JNI_MEMORY_BUDGET` (bytes; 0 for none) overrides
//! [`PHONE_MEMORY_BUDGET`].

use std::path::PathBuf;

/// The packet-memory cap of a tunnel started here, in bytes: 8 MiB. `make bench-android`
/// (`docs/android.md`) measured the same throughput from 4 MiB to no cap, with the process
/// holding 14 MiB more under load at 8 MiB against 43 MiB uncapped; 8 rather than 4 leaves room
/// for the crypto workers of a phone's 8 cores.
pub const PHONE_MEMORY_BUDGET: usize = 8 << 20;

/// The run-time and build-time variable naming the UAPI socket directory.
pub const SOCKET_DIR_VAR: &str = "VPN_JNI_SOCKET_DIR";
/// The run-time variable overriding [`PHONE_MEMORY_BUDGET`].
pub const MEMORY_BUDGET_VAR: &str = "VPN_JNI_MEMORY_BUDGET";

/// The settings a tunnel starts with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Settings {
    /// The directory of `<ifname>.sock`; `None` when none could be worked out (no UAPI socket
    /// then, as when the Go library fails to open one: logged, not fatal).
    pub socket_dir: Option<PathBuf>,
    /// The cap on packet memory, bytes (0: none).
    pub memory_budget: usize,
}

impl Settings {
    /// The settings from this process's environment and command line.
    pub fn from_env() -> Settings {
        let cmdline = std::fs::read("/proc/self/cmdline").unwrap_or_default();
        Settings::from_sources(
            |k| std::env::var(k).ok(),
            option_env!("VPN_JNI_SOCKET_DIR"),
            &cmdline,
        )
    }

    /// The settings from `var` (the environment), `built_dir` (the build-time directory) and
    /// the process's NUL-separated command line.
    pub fn from_sources(
        var: impl Fn(&str) -> Option<String>,
        built_dir: Option<&str>,
        cmdline: &[u8],
    ) -> Settings {
        let socket_dir = var(SOCKET_DIR_VAR)
            .filter(|d| !d.is_empty())
            .or_else(|| built_dir.filter(|d| !d.is_empty()).map(str::to_owned))
            .map(PathBuf::from)
            .or_else(|| {
                package_name(cmdline)
                    .map(|p| PathBuf::from(format!("/data/data/{p}/cache/wireguard")))
            });
        let memory_budget = match var(MEMORY_BUDGET_VAR) {
            None => PHONE_MEMORY_BUDGET,
            Some(v) => match v.trim().parse::<usize>() {
                Ok(0) => 0,
                Ok(b) => b.max(vpn_device::MIN_MEMORY_BUDGET),
                Err(_) => {
                    tracing::warn!("{MEMORY_BUDGET_VAR}={v:?} is not a number of bytes; using {PHONE_MEMORY_BUDGET}");
                    PHONE_MEMORY_BUDGET
                }
            },
        };
        Settings {
            socket_dir,
            memory_budget,
        }
    }
}

/// The app's package from its process's command line: the first argument up to a `:`
/// (a process of its own within the app), if it looks like a package (`a.b`, no `/`).
fn package_name(cmdline: &[u8]) -> Option<String> {
    let argv0 = cmdline.split(|&b| b == 0).next()?;
    let argv0 = std::str::from_utf8(argv0).ok()?;
    let package = argv0.split(':').next()?;
    let valid = package.contains('.')
        && !package.starts_with('.')
        && package
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'_');
    valid.then(|| package.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn none(_: &str) -> Option<String> {
        None
    }

    #[test]
    fn the_package_directory_is_the_default() {
        let s = Settings::from_sources(none, None, b"com.wireguard.android\0");
        assert_eq!(
            s.socket_dir,
            Some(PathBuf::from(
                "/data/data/com.wireguard.android/cache/wireguard"
            ))
        );
        assert_eq!(s.memory_budget, PHONE_MEMORY_BUDGET);
        let s = Settings::from_sources(none, None, b"com.example.vpn:tunnel\0--x\0");
        assert_eq!(
            s.socket_dir,
            Some(PathBuf::from("/data/data/com.example.vpn/cache/wireguard"))
        );
    }

    #[test]
    fn no_package_no_directory() {
        for cmdline in [
            &b""[..],
            b"/usr/bin/java\0-cp\0.",
            b"java\0",
            b"../x.y\0",
            b"\xff.a\0",
        ] {
            let s = Settings::from_sources(none, None, cmdline);
            assert_eq!(s.socket_dir, None, "{cmdline:?}");
        }
    }

    #[test]
    fn the_environment_wins_over_the_build_and_the_package() {
        let env = |k: &str| (k == SOCKET_DIR_VAR).then(|| "/run/app".to_owned());
        let s = Settings::from_sources(env, Some("/built"), b"com.a.b\0");
        assert_eq!(s.socket_dir, Some(PathBuf::from("/run/app")));
        let s = Settings::from_sources(none, Some("/built"), b"com.a.b\0");
        assert_eq!(s.socket_dir, Some(PathBuf::from("/built")));
        let empty = |k: &str| (k == SOCKET_DIR_VAR).then(String::new);
        let s = Settings::from_sources(empty, None, b"com.a.b\0");
        assert_eq!(
            s.socket_dir,
            Some(PathBuf::from("/data/data/com.a.b/cache/wireguard"))
        );
    }

    #[test]
    fn the_memory_budget_takes_bytes_zero_or_falls_back() {
        let budget = |v: &'static str| {
            Settings::from_sources(
                move |k: &str| (k == MEMORY_BUDGET_VAR).then(|| v.to_owned()),
                None,
                b"",
            )
            .memory_budget
        };
        assert_eq!(budget("0"), 0);
        assert_eq!(budget("67108864"), 64 << 20);
        assert_eq!(budget("10"), vpn_device::MIN_MEMORY_BUDGET);
        assert_eq!(budget("lots"), PHONE_MEMORY_BUDGET);
        assert_eq!(budget("-1"), PHONE_MEMORY_BUDGET);
    }
}
