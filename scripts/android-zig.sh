#!/usr/bin/env bash
# zig as the C compiler, archiver and linker for Rust's Android targets, for cargo and the cc
# crate (docs/android-build.md). Not run by hand: scripts/android-env.sh links it as
# target/android/bin/<rust-triple>-{cc,ar,linker} and points CC_<triple>, AR_<triple> and
# CARGO_TARGET_<TRIPLE>_LINKER at those names; the name says the tool and the target. (The
# linker's name must not end in -ld: rustc would then pass it ld's arguments, not a C
# compiler driver's.)
#
# zig ships no bionic (no Android libc headers or libraries), so:
#   cc      compiles for the Android target (zig's name for it, and the CPU of Rust's
#           armv7 target); the flags for compiling without libc headers are CFLAGS_<triple>
#           (android-env.sh), so that changing them rebuilds what they compiled.
#   linker  links the shared library for the Android target with what scripts/android-link.sh
#           prepared in $ANDROID_ZIG_STUBS/<triple>: stub libraries with the sonames of the
#           NDK's sysroot stubs (libc.so, libm.so, libdl.so, liblog.so) for rustc's
#           -lc -lm -ldl -llog, so that the result has the DT_NEEDED entries an NDK link gives;
#           LLVM's libunwind for -lunwind, static as the NDK links it; crtbegin_so.o first, as
#           the NDK's clang puts it. -lgcc goes: Rust's compiler_builtins has the rest of the
#           compiler's runtime (also __emutls_get_address, which Rust's emulated TLS on Android
#           calls). The stubs define no symbols: undefined references stay undefined
#           (`-z undefs`, the default for a shared library, said explicitly) and the dynamic
#           linker binds them to bionic at load time; android-link.sh checks them by name.
#           Every segment is aligned for 16 KiB pages (`-z max-page-size=16384`).
set -euo pipefail

self=$(basename "$0")
triple=${self%-*}
tool=${self##*-}
case $triple in
    aarch64-linux-android) zt=aarch64-linux-android; cpu=() ;;
    # Rust's armv7-linux-androideabi: ARMv7-A, Thumb-2, VFPv3-D16, no NEON, soft-float calls.
    armv7-linux-androideabi) zt=arm-linux-androideabi; cpu=(-mcpu=generic+v7a+vfp3d16+thumb2-neon) ;;
    x86_64-linux-android) zt=x86_64-linux-android; cpu=() ;;
    *) echo "android-zig: called as $self: no Android target '$triple'" >&2; exit 2 ;;
esac

zig() {
    if [ -n "${ZIG:-}" ]; then "$ZIG" "$@"; else python3 -m ziglang "$@"; fi
}

# The flags that name another target or CPU: cc and rustc pass clang's, zig takes its own.
filter_target_flags() {
    args=()
    local skip=0 a
    for a in "$@"; do
        if [ $skip -eq 1 ]; then skip=0; continue; fi
        case $a in
            -target) skip=1 ;;
            --target=* | -march=* | -mcpu=* | -mfpu=* | -mfloat-abi=*) ;;
            *) args+=("$a") ;;
        esac
    done
}

# ANDROID_ZIG_LOG=<file>: append each call's arguments (what rustc and cc pass).
[ -z "${ANDROID_ZIG_LOG:-}" ] || printf '%s %s\n' "$self" "$*" >>"$ANDROID_ZIG_LOG"

case $tool in
    cc)
        filter_target_flags "$@"
        exec_args=(cc -target "$zt" "${cpu[@]}")
        zig "${exec_args[@]}" ${args[@]+"${args[@]}"}
        ;;
    ar)
        zig ar "$@"
        ;;
    linker)
        rt=${ANDROID_ZIG_STUBS:?android-zig: ANDROID_ZIG_STUBS (the stub libraries) not set}/$triple
        [ -f "$rt/libc.so" ] || { echo "android-zig: no stub libraries in $rt" >&2; exit 1; }
        filter_target_flags "$@"
        out=("$rt/crtbegin_so.o")
        for a in ${args[@]+"${args[@]}"}; do
            case $a in
                # bionic's libraries: the stubs, by path, so that no other libc.so is found;
                # needed whatever --as-needed says, since an empty stub satisfies nothing
                # (rustc passes --as-needed first; zig takes no --push-state).
                -lc | -lm | -ldl | -llog)
                    out+=(-Wl,--no-as-needed "$rt/lib${a#-l}.so" -Wl,--as-needed) ;;
                # LLVM's libunwind, static as in an NDK link.
                -lunwind) out+=("$rt/libunwind.a") ;;
                # Rust's compiler_builtins has what libgcc would give.
                -lgcc | -lgcc_s) ;;
                *) out+=("$a") ;;
            esac
        done
        zig cc -target "$zt" "${cpu[@]}" -nostdlib -Wl,-z,undefs -Wl,-z,max-page-size=16384 \
            "${out[@]}"
        ;;
    *)
        echo "android-zig: unknown tool '$tool' (cc, ar, linker)" >&2
        exit 2
        ;;
esac
