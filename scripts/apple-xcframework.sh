#!/usr/bin/env bash
# `make apple` (on a Mac with Xcode): WireGuardFFI.xcframework, the C ABI (crates/ffi) as one
# universal static library for macOS (arm64 + x86_64) with its header and module map, ready to
# drag into an Xcode project (docs/embedding.md, "The network extension").
# APPSTORE=1 builds without the private batch calls (`--no-default-features`).
set -euo pipefail
cd "$(dirname "$0")/.."
[ "$(uname -s)" = Darwin ] || { echo "make apple: needs macOS (xcodebuild, lipo); on Linux, make ffi-darwin"; exit 1; }

export MACOSX_DEPLOYMENT_TARGET=${MACOSX_DEPLOYMENT_TARGET:-11.0}
out=${CARGO_TARGET_DIR:-target}
flags=()
[ "${APPSTORE:-0}" = 1 ] && flags=(--no-default-features)
libs=()
for target in aarch64-apple-darwin x86_64-apple-darwin; do
    rustup target list --installed | grep -qx "$target" || rustup target add "$target"
    cargo build -p vpn-ffi --lib --release --target "$target" "${flags[@]}"
    libs+=("$out/$target/release/libvpn_ffi.a")
done
dest="$out/apple"
rm -rf "$dest"
mkdir -p "$dest"
lipo -create "${libs[@]}" -output "$dest/libvpn_ffi.a"
xcodebuild -create-xcframework -library "$dest/libvpn_ffi.a" -headers crates/ffi/include \
    -output "$dest/WireGuardFFI.xcframework"
echo "make apple: $dest/WireGuardFFI.xcframework"
