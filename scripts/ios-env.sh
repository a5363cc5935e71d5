# Sourced by scripts/ffi-ios.sh and scripts/check-darwin.sh: zig as the C compiler and archiver
# for Rust's iOS targets (scripts/ios-zig.sh). Sets IOS_TARGETS, IPHONEOS_DEPLOYMENT_TARGET and,
# per target, CC_<triple> and AR_<triple> (ios_env); ios_std_flags prints what cargo needs for
# a target whose std rustup could not install (`make ios-tools` says so): -Z build-std, from
# rust-src, with RUSTC_BOOTSTRAP=1 set for that command.

IOS_TARGETS=(aarch64-apple-ios aarch64-apple-ios-sim)

ios_env() {
    local root out bin t env_t
    root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
    out=${CARGO_TARGET_DIR:-$root/target}
    case $out in /*) ;; *) out=$root/$out ;; esac
    if ! python3 -m ziglang version >/dev/null 2>&1 && [ -z "${ZIG:-}" ]; then
        echo "ios: zig missing (make ios-tools, or pip install ziglang)" >&2
        return 1
    fi
    export IPHONEOS_DEPLOYMENT_TARGET=${IPHONEOS_DEPLOYMENT_TARGET:-15.0}
    # cc-rs asks xcrun for the SDK unless SDKROOT names one; there is none here, and
    # ios-zig.sh drops the -isysroot it would pass.
    export SDKROOT=${SDKROOT:-$out/ios/no-sdk}
    mkdir -p "$SDKROOT"
    bin=$out/ios/bin
    mkdir -p "$bin"
    for t in "${IOS_TARGETS[@]}"; do
        env_t=${t//-/_}
        for tool in cc ar; do
            ln -sfn "$root/scripts/ios-zig.sh" "$bin/$t-$tool"
        done
        export "CC_$env_t=$bin/$t-cc" "AR_$env_t=$bin/$t-ar"
    done
}

# ios_std_flags <target>: nothing when rustup installed the target's std; otherwise -Z
# build-std (which needs rust-src), or an error.
ios_std_flags() {
    if rustup target list --installed | grep -qx "$1"; then return 0; fi
    local sysroot
    sysroot=$(rustc --print sysroot)
    if [ -d "$sysroot/lib/rustlib/src/rust/library/std" ]; then
        echo "-Zbuild-std"
    else
        echo "ios: no std for $1 and no rust-src to build it (make ios-tools)" >&2
        return 1
    fi
}
