//! Release builds of `vpn` on x86_64 Linux link with the per-packet functions side by side.
//!
//! A packet on a quiet tunnel finds the code it runs through cold: every 4 KiB page of it is a
//! TLB miss and a cache miss. `hot-symbols.txt` (written by `netns-tests/hot-symbols.sh` from a
//! profile) lists those functions; lld's `--symbol-ordering-file` puts them first in `.text`,
//! about 25 pages instead of about 50 spread over 2 MiB (`docs/design-notes.md`, "Packet path on
//! a quiet tunnel"). Names the linker does not find are skipped, so a stale list costs only the
//! gain. Only where lld is the linker: rustc's default on x86_64-unknown-linux-gnu since 1.90,
//! unless the build picks another linker.

use std::env;
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-changed=hot-symbols.txt");
    println!("cargo:rerun-if-env-changed=VPN_NO_SYMBOL_ORDER");
    println!("cargo:rerun-if-env-changed=CARGO_TARGET_X86_64_UNKNOWN_LINUX_GNU_LINKER");
    // Debug builds are not measured: nothing to say.
    if env::var("PROFILE").as_deref() != Ok("release") {
        return;
    }
    if let Err(why) = linker_is_lld() {
        println!("cargo:warning=hot-symbol ordering off: {why}");
        return;
    }
    let dir = env::var("CARGO_MANIFEST_DIR").unwrap_or_default();
    println!("cargo:rustc-link-arg-bins=-Wl,--symbol-ordering-file={dir}/hot-symbols.txt");
    println!("cargo:rustc-link-arg-bins=-Wl,--no-warn-symbol-ordering");
}

/// Whether this build links with rustc's default lld (the option is lld's: another linker would
/// fail on it).
fn linker_is_lld() -> Result<(), String> {
    if env::var_os("VPN_NO_SYMBOL_ORDER").is_some() {
        return Err("VPN_NO_SYMBOL_ORDER is set".into());
    }
    let target = env::var("TARGET").unwrap_or_default();
    if target != "x86_64-unknown-linux-gnu" {
        return Err(format!("{target} does not link with lld by default"));
    }
    if env::var_os("CARGO_TARGET_X86_64_UNKNOWN_LINUX_GNU_LINKER").is_some() {
        return Err("a linker is configured for the target".into());
    }
    let flags = env::var("CARGO_ENCODED_RUSTFLAGS").unwrap_or_default();
    if flags.split('\x1f').any(|f| {
        f.contains("linker=") || f.contains("linker-features=-lld") || f.contains("fuse-ld")
    }) {
        return Err("RUSTFLAGS choose the linker".into());
    }
    let rustc = env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    let version = Command::new(rustc)
        .arg("-vV")
        .output()
        .map_err(|e| format!("rustc -vV: {e}"))?;
    let text = String::from_utf8_lossy(&version.stdout);
    let minor = text
        .lines()
        .find_map(|l| l.strip_prefix("release: "))
        .and_then(|v| v.split('.').nth(1))
        .and_then(|m| m.parse::<u32>().ok())
        .ok_or("rustc version not recognised")?;
    if minor < 90 {
        return Err(format!("rustc 1.{minor} links with the system linker"));
    }
    Ok(())
}
