#!/usr/bin/env bash
# `make apple` (on a Mac with Xcode): WireGuardFFI.xcframework, the C ABI (crates/ffi) as static
# libraries with its header and module map, one slice per platform, ready to drag into an Xcode
# project (docs/embedding.md, "The network extension"):
#   - macOS: one universal library (arm64 + x86_64);
#   - iOS devices: arm64 (aarch64-apple-ios);
#   - iOS simulator: one universal library (arm64 + x86_64: aarch64-apple-ios-sim,
#     x86_64-apple-ios).
# APPSTORE=1 builds without the private batch calls (`--no-default-features`). On Linux,
# `make ffi-darwin` and `make ffi-ios` build and check the same libraries.
set -euo pipefail
cd "$(dirname "$0")/.."
[ "$(uname -s)" = Darwin ] || { echo "make apple: needs macOS (xcodebuild, lipo); on Linux, make ffi-darwin ffi-ios"; exit 1; }

export MACOSX_DEPLOYMENT_TARGET=${MACOSX_DEPLOYMENT_TARGET:-11.0}
export IPHONEOS_DEPLOYMENT_TARGET=${IPHONEOS_DEPLOYMENT_TARGET:-15.0}
out=${CARGO_TARGET_DIR:-target}
flags=()
[ "${APPSTORE:-0}" = 1 ] && flags=(--no-default-features)

# build <target>: the static library only (an app links it; no dylib is needed).
build() {
    rustup target list --installed | grep -qx "$1" || rustup target add "$1"
    cargo rustc -p vpn-ffi --lib --crate-type staticlib --release --target "$1" ${flags[@]+"${flags[@]}"}
}

dest="$out/apple"
rm -rf "$dest"
mkdir -p "$dest/macos" "$dest/ios" "$dest/ios-simulator"
for target in aarch64-apple-darwin x86_64-apple-darwin aarch64-apple-ios aarch64-apple-ios-sim x86_64-apple-ios; do
    build "$target"
done
lib() { echo "$out/$1/release/libvpn_ffi.a"; }
lipo -create "$(lib aarch64-apple-darwin)" "$(lib x86_64-apple-darwin)" -output "$dest/macos/libvpn_ffi.a"
cp "$(lib aarch64-apple-ios)" "$dest/ios/libvpn_ffi.a"
lipo -create "$(lib aarch64-apple-ios-sim)" "$(lib x86_64-apple-ios)" -output "$dest/ios-simulator/libvpn_ffi.a"
args=()
for slice in macos ios ios-simulator; do
    args+=(-library "$dest/$slice/libvpn_ffi.a" -headers crates/ffi/include)
done
xcodebuild -create-xcframework "${args[@]}" -output "$dest/WireGuardFFI.xcframework"
echo "make apple: $dest/WireGuardFFI.xcframework (macOS, iOS, iOS simulator)"
