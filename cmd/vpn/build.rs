//! Release builds of `vpn` on Linux link with the per-packet functions side by side.
//!
//! A packet on a quiet tunnel finds the code it runs through cold: every 4 KiB page of it is a
//! TLB miss and a cache miss. `hot-symbols.txt` (written by `netns-tests/hot-symbols.sh` from a
//! profile) lists those functions; lld's `--symbol-ordering-file` puts them first in `.text`,
//! about 25 pages instead of about 50 spread over 2 MiB (`docs/design-notes.md`, "Packet path on
//! a quiet tunnel"). Names the linker does not find are skipped, so a stale list costs only the
//! gain.
//!
//! Whether the linker takes the option is not guessed from the toolchain: rustc's own lld does
//! (the default on x86_64-unknown-linux-gnu since 1.90), GNU ld does not, and a distribution's
//! rustc or a configured linker may be either. The script links an empty program with the
//! build's own rustc, target, flags and linker and the option, and passes the option only if
//! that link succeeds. `VPN_NO_SYMBOL_ORDER=1` skips it.

use std::env;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

fn main() {
    println!("cargo:rerun-if-changed=hot-symbols.txt");
    println!("cargo:rerun-if-env-changed=VPN_NO_SYMBOL_ORDER");
    println!("cargo:rerun-if-env-changed=RUSTC_LINKER");
    // Debug builds are not measured; the option is for ELF linkers.
    if env::var("PROFILE").as_deref() != Ok("release")
        || env::var("CARGO_CFG_TARGET_OS").as_deref() != Ok("linux")
        || env::var_os("VPN_NO_SYMBOL_ORDER").is_some_and(|v| v != "0")
    {
        return;
    }
    let list = PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").unwrap_or_default())
        .join("hot-symbols.txt");
    let (Some(list), Some(out)) = (list.to_str(), env::var_os("OUT_DIR")) else {
        return; // a path the linker arguments cannot carry: leave the layout alone
    };
    if !linker_takes_ordering(Path::new(&out)) {
        return;
    }
    for arg in ordering_args(list) {
        println!("cargo:rustc-link-arg-bins={arg}");
    }
}

/// The linker arguments for the layout from `list`: `-Xlinker` pairs, not `-Wl,`, since a
/// comma in the path would split it.
fn ordering_args(list: &str) -> [String; 4] {
    [
        "-Xlinker".to_string(),
        format!("--symbol-ordering-file={list}"),
        "-Xlinker".to_string(),
        "--no-warn-symbol-ordering".to_string(),
    ]
}

/// Links an empty program the way this build links `vpn`, with the ordering options and an
/// empty list. False if anything fails: the build then goes on without the layout.
fn linker_takes_ordering(out: &Path) -> bool {
    let dir = out.join("symbol-order-probe");
    if std::fs::create_dir_all(&dir).is_err() {
        return false;
    }
    let src = dir.join("probe.rs");
    let list = dir.join("empty.txt");
    if std::fs::write(&src, "fn main() {}\n").is_err() || std::fs::write(&list, "").is_err() {
        return false;
    }
    let Some(list) = list.to_str() else {
        return false;
    };
    let rustc = env::var_os("RUSTC").unwrap_or_else(|| "rustc".into());
    let mut cmd = Command::new(rustc);
    cmd.arg("--crate-name=probe")
        .arg("--crate-type=bin")
        .arg("--edition=2021")
        .arg("-Copt-level=0")
        .arg("-Cdebuginfo=0")
        .arg("--out-dir")
        .arg(&dir)
        .arg("--target")
        .arg(env::var("TARGET").unwrap_or_default());
    // The build's own flags: they may choose the linker or its features.
    if let Ok(flags) = env::var("CARGO_ENCODED_RUSTFLAGS") {
        cmd.args(flags.split('\x1f').filter(|f| !f.is_empty()));
    }
    // The linker cargo resolved for the target (`target.<triple>.linker`), if one is set.
    if let Some(linker) = env::var_os("RUSTC_LINKER") {
        let mut arg = std::ffi::OsString::from("-Clinker=");
        arg.push(linker);
        cmd.arg(arg);
    }
    cmd.args(ordering_args(list).map(|a| format!("-Clink-arg={a}")))
        .arg(&src)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    cmd.status().is_ok_and(|s| s.success())
}
