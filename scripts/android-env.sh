# Sourced by scripts/check-android.sh and scripts/android-link.sh: zig as the C compiler,
# archiver and linker for Rust's Android targets (scripts/android-zig.sh,
# docs/android-build.md). Sets ANDROID_TARGETS and, per target, CC_<triple>, AR_<triple>,
# CFLAGS_<triple> and CARGO_TARGET_<TRIPLE>_LINKER (android_env); checks that zig and the Rust targets are there
# (`make android-tools` installs them).

ANDROID_TARGETS=(aarch64-linux-android armv7-linux-androideabi x86_64-linux-android)

# The directory Gradle's jniLibs uses for each target.
android_abi() {
    case $1 in
        aarch64-linux-android) echo arm64-v8a ;;
        armv7-linux-androideabi) echo armeabi-v7a ;;
        x86_64-linux-android) echo x86_64 ;;
        *) echo "android-env: no ABI for $1" >&2; return 1 ;;
    esac
}

# C without libc headers (zig has no bionic): `-nostdlibinc` and RING_CORE_NOSTDLIBINC, ring's
# own mode for building without a sysroot (its C then needs only the compiler's stdint.h and
# stddef.h; ring is the only C in the Android build); `-ffreestanding`, without which the x86
# intrinsics headers include stdlib.h; no sanitizers (zig cc turns UBSan on in unoptimised C,
# and its runtime would bring ELF TLS, which Android loads only from API 29 on).
ANDROID_CFLAGS="-ffreestanding -nostdlibinc -DRING_CORE_NOSTDLIBINC=1 -fno-sanitize=all"

android_env() {
    local root out bin t env_t upper
    root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
    out=${CARGO_TARGET_DIR:-$root/target}
    case $out in /*) ;; *) out=$root/$out ;; esac
    if ! python3 -m ziglang version >/dev/null 2>&1 && [ -z "${ZIG:-}" ]; then
        echo "android: zig missing (make android-tools, or pip install ziglang)" >&2
        return 1
    fi
    local installed
    installed=$(rustup target list --installed)
    for t in "${ANDROID_TARGETS[@]}"; do
        grep -qx "$t" <<<"$installed" \
            || { echo "android: Rust target $t missing (make android-tools)" >&2; return 1; }
    done
    # The wrapper learns its tool and target from its name.
    bin=$out/android/bin
    mkdir -p "$bin"
    for t in "${ANDROID_TARGETS[@]}"; do
        env_t=${t//-/_}
        upper=$(tr '[:lower:]' '[:upper:]' <<<"$env_t")
        for tool in cc ar linker; do
            ln -sfn "$root/scripts/android-zig.sh" "$bin/$t-$tool"
        done
        export "CC_$env_t=$bin/$t-cc" "AR_$env_t=$bin/$t-ar" "CFLAGS_$env_t=$ANDROID_CFLAGS"
        export "CARGO_TARGET_${upper}_LINKER=$bin/$t-linker"
    done
    export ANDROID_ZIG_STUBS=$out/android/stubs
}
