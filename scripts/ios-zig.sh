#!/usr/bin/env bash
# zig as the C compiler and archiver for Rust's iOS targets (cargo-zigbuild has none for them).
# Not run by hand: scripts/ios-env.sh links it as target/ios/bin/<rust-triple>-{cc,ar} and
# points CC_<triple> and AR_<triple> at those names; the name says the tool and the target.
# zig ships the macOS SDK's libc headers but no iOS SDK: the C (ring's, which needs string.h
# and TargetConditionals.h) is compiled for the iOS target against those macOS headers. For
# memcpy/memset and the target macros they declare the same as the iOS SDK's
# (TargetConditionals.h asks the compiler which OS it targets). Nothing is linked: iOS takes
# the static library (the app's Xcode build links it).
set -euo pipefail

self=$(basename "$0")
triple=${self%-*}
tool=${self##*-}
version=${IPHONEOS_DEPLOYMENT_TARGET:?ios-zig: IPHONEOS_DEPLOYMENT_TARGET not set}
case $triple in
    aarch64-apple-ios) zt=aarch64-ios.$version ;;
    aarch64-apple-ios-sim) zt=aarch64-ios.$version-simulator ;;
    *) echo "ios-zig: called as $self: no iOS target '$triple'" >&2; exit 2 ;;
esac

zig() { if [ -n "${ZIG:-}" ]; then "$ZIG" "$@"; else python3 -m ziglang "$@"; fi; }

case $tool in
    cc)
        args=()
        skip=0
        for a in "$@"; do
            if [ $skip -eq 1 ]; then skip=0; continue; fi
            case $a in
                -target | -arch | -isysroot) skip=1 ;;
                --target=* | -mios-version-min=* | -mios-simulator-version-min=* | \
                    -miphoneos-version-min=* | -miphonesimulator-version-min=*) ;;
                *) args+=("$a") ;;
            esac
        done
        lib=$(zig env | sed -n 's/^ *\.lib_dir = "\(.*\)",$/\1/p')
        zig cc -target "$zt" -isystem "$lib/libc/include/any-macos-any" -fno-sanitize=all \
            ${args[@]+"${args[@]}"}
        ;;
    ar) zig ar "$@" ;;
    *) echo "ios-zig: unknown tool '$tool' (cc, ar)" >&2; exit 2 ;;
esac
