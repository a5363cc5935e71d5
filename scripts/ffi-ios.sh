#!/usr/bin/env bash
# `make ffi-ios`: the C ABI's static library (crates/ffi, package vpn-ffi) for aarch64-apple-ios
# (devices) and aarch64-apple-ios-sim (the simulator on Apple silicon), built on Linux with zig
# as the C compiler (scripts/ios-zig.sh; cargo-zigbuild has no iOS targets), and checked with
# llvm-nm as ffi-darwin.sh checks the macOS ones:
#   - every function `include/wireguard.h` declares is a defined, exported text symbol
#     (`T _wgTurnOn`, …);
#   - the objects are Mach-O for arm64 built for the right platform (iOS or iOS simulator) and
#     minimum version $IPHONEOS_DEPLOYMENT_TARGET (LC_BUILD_VERSION);
#   - built with `--no-default-features` (the App Store variant) the library does not reference
#     the private batch calls `_recvmsg_x`/`_sendmsg_x`; with the defaults it does.
# Only the static library: an iOS app links it into its network extension (a dylib is not
# needed). Where rustup could not install aarch64-apple-ios-sim's std, it is built from
# rust-src (-Z build-std, RUSTC_BOOTSTRAP=1 for that build), and the script says so.
# The libraries and the header (with its module map) land in
# $out/ffi-ios/<target>[-appstore]/; `make apple` (on a Mac) builds the same slices with Xcode.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/ios-env.sh
source scripts/ios-env.sh
ios_env

command -v llvm-nm >/dev/null 2>&1 || { echo "ffi-ios: llvm-nm missing (make ios-tools)"; exit 1; }
command -v llvm-objdump >/dev/null 2>&1 || { echo "ffi-ios: llvm-objdump missing (make ios-tools)"; exit 1; }

profile=${IOS_PROFILE:-release}
case "$profile" in dev) dir=debug ;; *) dir=$profile ;; esac
out=${CARGO_TARGET_DIR:-target}
header=crates/ffi/include/wireguard.h
mapfile -t functions < <(grep -oE '\bwg[A-Za-z0-9]+\(' "$header" | tr -d '(' | sort -u)
[ "${#functions[@]}" -gt 0 ] || { echo "ffi-ios: no wg* function in $header"; exit 1; }
fail=0
bad() { echo "FAIL $*"; fail=1; }

# check <library> <target> <spi|appstore>
check() {
    local lib=$1 target=$2 variant=$3 defined undefined f s platforms want headers minos
    # --no-llvm-bc: std's objects carry bitcode that an older llvm-nm cannot read.
    defined=$(llvm-nm --no-llvm-bc -g --defined-only "$lib" 2>/dev/null | awk '$2 == "T" {print $3}' | sort -u)
    local missing=0
    for f in "${functions[@]}"; do
        grep -qx "_$f" <<<"$defined" || { bad "$lib: _$f is not exported"; missing=1; }
    done
    [[ $missing -eq 1 ]] || echo "ok   $lib: exports all ${#functions[@]} wg* functions of the header"
    # The platform of every object that names one (LC_BUILD_VERSION): 2 is iOS, 7 the iOS
    # simulator; and the minimum version of ours.
    case $target in *-sim) want=7 ;; *) want=2 ;; esac
    headers=$(llvm-objdump --macho --private-headers "$lib" 2>/dev/null || true)
    platforms=$(awk '$1 == "platform" {print $2}' <<<"$headers" | sort | uniq -c | sed 's/^ *//' | tr '\n' ' ')
    if [ -n "$platforms" ] && ! awk '$1 == "platform" {print $2}' <<<"$headers" | grep -qvx "$want"; then
        echo "ok   $lib: every object is for platform $want (count platform: $platforms)"
    else
        bad "$lib: want platform $want, objects say (count platform): ${platforms:-none}"
    fi
    minos=$(awk '$1 == "minos" {print $2}' <<<"$headers" | sort | uniq -c | sed 's/^ *//' | tr '\n' ' ')
    if grep -qx "$IPHONEOS_DEPLOYMENT_TARGET" <<<"$(awk '$1 == "minos" {print $2}' <<<"$headers")"; then
        echo "ok   $lib: minimum iOS $IPHONEOS_DEPLOYMENT_TARGET (count minos: $minos)"
    else
        bad "$lib: no object for iOS $IPHONEOS_DEPLOYMENT_TARGET (count minos: ${minos:-none})"
    fi
    undefined=$(llvm-nm --no-llvm-bc -u "$lib" 2>/dev/null | awk '{print $NF}' | sort -u)
    for s in _recvmsg_x _sendmsg_x; do
        if grep -qx "$s" <<<"$undefined"; then
            if [[ $variant == appstore ]]; then bad "$lib: references $s without the darwin-spi feature"
            else echo "ok   $lib: references $s"; fi
        elif [[ $variant == spi ]]; then
            bad "$lib: does not reference $s"
        else
            echo "ok   $lib: no $s"
        fi
    done
}

for target in "${IOS_TARGETS[@]}"; do
    std=$(ios_std_flags "$target")
    for variant in spi appstore; do
        flags=()
        suffix=
        if [[ $variant == appstore ]]; then flags=(--no-default-features); suffix=-appstore; fi
        echo "== vpn-ffi for $target ($variant, profile $profile, iOS $IPHONEOS_DEPLOYMENT_TARGET${std:+, std built from rust-src})"
        if [ -n "$std" ]; then
            RUSTC_BOOTSTRAP=1 cargo rustc --quiet -p vpn-ffi --lib --crate-type staticlib \
                --target "$target" --profile "$profile" "$std" "${flags[@]}"
        else
            cargo rustc --quiet -p vpn-ffi --lib --crate-type staticlib --target "$target" \
                --profile "$profile" "${flags[@]}"
        fi
        dest="$out/ffi-ios/$target$suffix"
        mkdir -p "$dest/include"
        cp "$out/$target/$dir/libvpn_ffi.a" "$dest/"
        cp "$header" crates/ffi/include/module.modulemap "$dest/include/"
        check "$dest/libvpn_ffi.a" "$target" "$variant"
    done
done
[[ $fail -eq 0 ]] || { echo "make ffi-ios: checks failed"; exit 1; }
echo "make ffi-ios: ${IOS_TARGETS[*]} built and checked ($out/ffi-ios)"
