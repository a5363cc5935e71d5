#!/usr/bin/env bash
# `make android`: libwg-go.so (crates/jni, package vpn-jni) for arm64-v8a, armeabi-v7a and
# x86_64, linked on Linux with zig (no NDK), then checked with llvm-readelf and llvm-nm:
#   - the six Java_com_wireguard_android_backend_GoBackend_* methods are defined and exported
#     (`T` in the dynamic symbol table), and nothing else is;
#   - every PT_LOAD segment is aligned to 16 KiB (0x4000): devices with 16 KiB pages (Android
#     15+) do not load a library aligned for 4 KiB; no PT_TLS (ELF TLS loads from API 29 on);
#   - DT_SONAME is libwg-go.so; DT_NEEDED names only bionic's libc.so, libm.so, libdl.so and
#     liblog.so;
#   - no undefined symbol is a glibc-only name (bionic has none of __errno_location,
#     __libc_start_main, gnu_get_libc_version, ...) or carries a symbol version, and none is
#     part of the compiler's runtime (the unwinder, emulated TLS, __aeabi_*, 128-bit
#     arithmetic), which bionic does not export: those must be linked in.
# The libraries land in $out/android/<abi>/libwg-go.so, the directories Gradle's jniLibs takes.
# docs/android-build.md explains the link and gives the NDK command that replaces it.
#
# How zig stands in for the NDK (scripts/android-zig.sh is the compiler/linker wrapper):
#   - bionic's libraries: stub shared libraries with the NDK stubs' sonames, so the dynamic
#     linker loads the device's libc.so/libm.so/libdl.so/liblog.so;
#   - crtbegin_so.o: __dso_handle, atexit and the __cxa_finalize call at unload that every NDK
#     shared library gets from bionic's crtbegin_so (compiled here from the source below);
#   - libunwind.a: LLVM's libunwind, which the NDK links statically (-lunwind), built from the
#     copy zig ships. zig has no bionic headers, so it is compiled against zig's musl headers
#     for the architecture, with bionic's errno accessor (__errno) for musl's and its messages
#     written to fd 2 (UNWIND_STDIO); the few libc functions it calls (dl_iterate_phdr,
#     pthread_rwlock_*, malloc, vsnprintf, write, ...) have the same ABI in bionic (checked
#     below by name).
# Package without vpn-jni in the workspace: vpn-ffi's cdylib stands in (its wg* exports are
# checked instead), so the toolchain stays checked.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/android-env.sh
source scripts/android-env.sh
android_env

for tool in llvm-readelf llvm-nm; do
    command -v "$tool" >/dev/null 2>&1 || { echo "android: $tool missing (make android-tools)"; exit 1; }
done

profile=${ANDROID_PROFILE:-release}
case "$profile" in dev) dir=debug ;; *) dir=$profile ;; esac
out=${CARGO_TARGET_DIR:-target}
zig() { if [ -n "${ZIG:-}" ]; then "$ZIG" "$@"; else python3 -m ziglang "$@"; fi; }
zig_lib=$(zig env | sed -n 's/^ *\.lib_dir = "\(.*\)",$/\1/p')
[ -d "$zig_lib/libunwind/src" ] || { echo "android: no libunwind in zig's lib directory '$zig_lib'"; exit 1; }
zig_version=$(zig version)

members=$(cargo metadata --no-deps --format-version 1 \
    | grep -o '"name":"vpn-[a-z0-9-]*"' | sed 's/"name":"\(.*\)"/\1/' | sort -u)
if grep -qx vpn-jni <<<"$members"; then
    package=vpn-jni
    built=libwg_go.so
    mapfile -t exports < <(printf 'Java_com_wireguard_android_backend_GoBackend_%s\n' \
        wgTurnOn wgTurnOff wgGetSocketV4 wgGetSocketV6 wgGetConfig wgVersion)
else
    package=vpn-ffi
    built=libvpn_ffi.so
    mapfile -t exports < <(grep -oE '\bwg[A-Za-z0-9]+\(' crates/ffi/include/wireguard.h | tr -d '(' | sort -u)
    echo "android: vpn-jni is not in this workspace; linking vpn-ffi's cdylib in its place"
fi

# Bionic's libraries as the NDK's sysroot stubs name them. The NDK's also list each function
# and its API level; these are empty (see android-zig.sh: undefined symbols stay undefined,
# and the checks below stand in for the NDK's).
BIONIC_LIBS=(c m dl log)

# What bionic's crtbegin_so gives an NDK shared library.
CRTBEGIN_SO='
extern void __cxa_finalize(void *);
extern int __cxa_atexit(void (*)(void *), void *, void *);
__attribute__((visibility("hidden"))) void *__dso_handle = &__dso_handle;
__attribute__((visibility("hidden"))) int atexit(void (*f)(void)) {
    return __cxa_atexit((void (*)(void *))f, (void *)0, &__dso_handle);
}
__attribute__((visibility("hidden"), destructor)) void __on_dlclose(void) {
    __cxa_finalize(&__dso_handle);
}
'

# Put in front of libunwind's sources: its abort and log messages go to fd 2 with vsnprintf and
# write (bionic has both at every API level) instead of fprintf on stderr (bionic's `stderr`
# variable exists from API 23 on; the library is to load from API 21).
UNWIND_STDIO='
#ifndef __ASSEMBLER__
#include <stdarg.h>
#include <stdio.h>
#include <unistd.h>
static inline void wg_unwind_log(const char *fmt, ...) {
    char line[256];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    if (n > 0) (void)!write(2, line, n < (int)sizeof line ? (size_t)n : sizeof line - 1);
}
#define fprintf(stream, ...) wg_unwind_log(__VA_ARGS__)
#define fflush(stream) ((void)0)
#endif
'

# zig's target name and musl header directory name for a Rust triple.
zig_arch() {
    case $1 in
        aarch64-*) echo aarch64 ;;
        armv7-*) echo arm ;;
        x86_64-*) echo x86_64 ;;
    esac
}

# The stubs, crtbegin_so.o and libunwind.a for <triple>, made once per zig version.
runtime() {
    local t=$1 arch dest cc stamp f inc flags
    arch=$(zig_arch "$t")
    dest=$ANDROID_ZIG_STUBS/$t
    stamp="zig $zig_version, $(sha256sum "$0" | cut -c1-16)"
    [ "$(cat "$dest/stamp" 2>/dev/null)" = "$stamp" ] && return 0
    rm -rf "$dest"
    mkdir -p "$dest/obj"
    cc=("$out/android/bin/$t-cc")
    : >"$dest/obj/empty.c"
    for l in "${BIONIC_LIBS[@]}"; do
        "${cc[@]}" -shared -nostdlib -Wl,-soname,"lib$l.so" -o "$dest/lib$l.so" "$dest/obj/empty.c"
    done
    printf '%s' "$CRTBEGIN_SO" >"$dest/obj/crtbegin_so.c"
    printf '%s' "$UNWIND_STDIO" >"$dest/obj/unwind_stdio.h"
    "${cc[@]}" -fPIC -O2 -c "$dest/obj/crtbegin_so.c" -o "$dest/crtbegin_so.o"
    # libunwind: as zig builds it for its own targets, against musl's headers.
    inc=(-nostdinc -isystem "$zig_lib/include"
         -isystem "$zig_lib/libc/include/$arch-linux-musl" -isystem "$zig_lib/libc/include/generic-musl"
         -isystem "$zig_lib/libc/include/$arch-linux-any" -isystem "$zig_lib/libc/include/any-linux-any")
    flags=(-fPIC -O2 -DNDEBUG -D_LIBUNWIND_IS_NATIVE_ONLY -D_LIBUNWIND_HIDE_SYMBOLS
           -fvisibility=hidden -funwind-tables -fno-sanitize=all -D__errno_location=__errno
           -I "$zig_lib/libunwind/include" "${inc[@]}" -include "$dest/obj/unwind_stdio.h")
    local srcs=(UnwindLevel1.c UnwindLevel1-gcc-ext.c libunwind.cpp UnwindRegistersRestore.S
                UnwindRegistersSave.S)
    [[ $arch == arm ]] && srcs+=(Unwind-EHABI.cpp)
    for f in "${srcs[@]}"; do
        case $f in
            *.cpp) zig c++ -target "$(zig_target "$t")" $(zig_cpu "$t") "${flags[@]}" -std=c++17 \
                       -nostdinc++ -fno-exceptions -fno-rtti -c "$zig_lib/libunwind/src/$f" \
                       -o "$dest/obj/${f%.*}.o" ;;
            *.c) zig cc -target "$(zig_target "$t")" $(zig_cpu "$t") "${flags[@]}" -std=c99 \
                     -c "$zig_lib/libunwind/src/$f" -o "$dest/obj/${f%.*}.o" ;;
            *.S) zig cc -target "$(zig_target "$t")" $(zig_cpu "$t") "${flags[@]}" \
                     -c "$zig_lib/libunwind/src/$f" -o "$dest/obj/${f%.*}.o" ;;
        esac
    done
    local objs=()
    for f in "${srcs[@]}"; do objs+=("$dest/obj/${f%.*}.o"); done
    zig ar rcs "$dest/libunwind.a" "${objs[@]}"
    echo "$stamp" >"$dest/stamp"
}

zig_target() {
    case $1 in
        aarch64-linux-android) echo aarch64-linux-android ;;
        armv7-linux-androideabi) echo arm-linux-androideabi ;;
        x86_64-linux-android) echo x86_64-linux-android ;;
    esac
}
zig_cpu() { [[ $1 == armv7-* ]] && echo "-mcpu=generic+v7a+vfp3d16+thumb2-neon" || true; }

fail=0
bad() { echo "FAIL $*"; fail=1; }

# Symbols bionic does not have although glibc does (or glibc's names for what bionic calls
# otherwise: errno is __errno, assert is __assert2, h_errno is __get_h_errno).
GLIBC_ONLY='^(__libc_start_main|__errno_location|gnu_get_libc_version|gnu_get_libc_release|__h_errno_location|__assert_fail|__ctype_b_loc|__ctype_tolower_loc|__ctype_toupper_loc|__xstat|__xstat64|__lxstat|__lxstat64|__fxstat|__fxstat64|__fxstatat|__fxstatat64|__xmknod|__libc_single_threaded|__res_init|__isoc99_[a-z]+|__isoc23_[a-z]+|__fprintf_chk|__printf_chk|__sprintf_chk|__snprintf_chk|__vfprintf_chk|__explicit_bzero_chk|__memcpy_chk|__memset_chk|__longjmp_chk|__tls_get_addr|__cxa_thread_atexit|secure_getenv|__secure_getenv|__gmon_start__|_ITM_[A-Za-z]+|__libc_[a-z_]+)$'
# The compiler's runtime: in libgcc/compiler-rt and libunwind, which an NDK link puts into the
# library (bionic exports none of them for new code).
RUNTIME='^(_Unwind_[A-Za-z_]+|__unw_[a-z_]+|__emutls_[a-z_]+|__aeabi_[a-z0-9]+|__gnu_[a-z_]+|__[a-z]+[dst]i[23]|__[a-z]+[dst]f[23]|__[a-z]+ti[23]|__clear_cache|__gcc_personality_v0|__cxa_(allocate|throw|begin_catch|end_catch)[a-z_]*)$'

# Functions and variables bionic added after API 21 that Rust code, std or libunwind reach for.
AFTER_API_21='^(stdin|stdout|stderr|getrandom|getentropy|__cxa_thread_atexit_impl|memfd_create|copy_file_range|statx|preadv|pwritev|preadv2|pwritev2|pidfd_open|posix_spawn|posix_spawnp|pthread_getname_np|getifaddrs|freeifaddrs|if_nameindex|android_set_abort_message)$'

check() { # check <library> <triple>
    local lib=$1 t=$2 dyn defined extra undef loads aligns soname needed s
    dyn=$(llvm-readelf --dyn-syms --wide "$lib")
    # Exported: defined (Ndx not UND), global or weak, default visibility.
    defined=$(awk '$7 != "UND" && ($5 == "GLOBAL" || $5 == "WEAK") && $6 == "DEFAULT" {print $8}' <<<"$dyn" \
        | sed 's/@.*//' | sort -u)
    local missing=0 nm_dyn nm_all
    # Into variables first: `grep -q` closing a pipe early would fail llvm-nm (pipefail).
    nm_dyn=$(llvm-nm -D --defined-only "$lib" | awk '{print $2, $3}')
    nm_all=$(llvm-nm --defined-only "$lib" | awk '{print $3}')
    for s in "${exports[@]}"; do
        grep -qx "$s" <<<"$defined" || { bad "$lib: $s is not exported"; missing=1; }
        # llvm-nm's view: a text symbol in the dynamic table.
        grep -qx "T $s" <<<"$nm_dyn" || { bad "$lib: llvm-nm -D does not list 'T $s'"; missing=1; }
    done
    [[ $missing -eq 1 ]] || echo "ok   $lib: exports the ${#exports[@]} functions (T): ${exports[*]##*_}"
    extra=$(comm -23 <(echo "$defined") <(printf '%s\n' "${exports[@]}" | sort -u) | grep -v '^$' || true)
    if [[ $package == vpn-jni && -n $extra ]]; then
        bad "$lib: exports more than the six methods: $(head -5 <<<"$extra" | tr '\n' ' ')"
    fi
    # Every PT_LOAD aligned to 16 KiB.
    loads=$(llvm-readelf --program-headers --wide "$lib" | awk '$1 == "LOAD" {print $NF}')
    aligns=$(sort -u <<<"$loads" | tr '\n' ' ')
    if [ -n "$loads" ] && ! grep -qvx '0x4000' <<<"$loads"; then
        echo "ok   $lib: $(wc -l <<<"$loads") PT_LOAD segments, all aligned to 0x4000 (16 KiB)"
    else
        bad "$lib: PT_LOAD alignments are ${aligns:-none}, want 0x4000"
    fi
    # No ELF TLS: Android's dynamic linker takes a PT_TLS segment only from API 29 on.
    if grep -q '^ *TLS ' <<<"$(llvm-readelf --program-headers --wide "$lib")"; then
        bad "$lib: has a PT_TLS segment (ELF TLS)"
    else
        echo "ok   $lib: no PT_TLS segment"
    fi
    # Rust's armv7-linux-androideabi passes floats in integer registers (soft-float calls, as
    # the NDK's armeabi-v7a): so must every object linked in.
    if [[ $t == armv7-* ]]; then
        local flags
        flags=$(llvm-readelf --file-header "$lib" | awk '/Flags:/ {print $2}')
        if (( flags & 0x200 )) && ! (( flags & 0x400 )); then
            echo "ok   $lib: EABI5, soft-float calls (ELF flags $flags)"
        else
            bad "$lib: ELF flags $flags are not EABI soft-float"
        fi
    fi
    soname=$(llvm-readelf --dynamic-table "$lib" | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
    if [[ $soname == libwg-go.so ]]; then echo "ok   $lib: DT_SONAME $soname"
    else bad "$lib: DT_SONAME is '${soname:-none}', want libwg-go.so"; fi
    needed=$(llvm-readelf --dynamic-table "$lib" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' | sort)
    if [ -n "$needed" ] && ! grep -qvxE 'lib(c|m|dl|log)\.so' <<<"$needed"; then
        echo "ok   $lib: DT_NEEDED $(tr '\n' ' ' <<<"$needed")"
    else
        bad "$lib: DT_NEEDED $(tr '\n' ' ' <<<"$needed"), want only libc.so libm.so libdl.so liblog.so"
    fi
    undef=$(awk '$7 == "UND" && $8 != "" {print $8}' <<<"$dyn" | sort -u)
    local versioned glibc rt
    versioned=$(grep '@' <<<"$undef" || true)
    undef=$(sed 's/@.*//' <<<"$undef" | sort -u)
    glibc=$(grep -E "$GLIBC_ONLY" <<<"$undef" || true)
    rt=$(grep -E "$RUNTIME" <<<"$undef" || true)
    [ -z "$versioned" ] || bad "$lib: versioned undefined symbols: $(tr '\n' ' ' <<<"$versioned")"
    [ -z "$glibc" ] || bad "$lib: glibc-only symbols bionic lacks: $(tr '\n' ' ' <<<"$glibc")"
    [ -z "$rt" ] || bad "$lib: compiler-runtime symbols left to the system: $(tr '\n' ' ' <<<"$rt")"
    grep -qx __errno <<<"$undef" || bad "$lib: does not reference bionic's __errno"
    if [ -z "$versioned$glibc$rt" ]; then
        echo "ok   $lib: $(wc -l <<<"$undef") undefined symbols, none glibc-only, versioned or compiler runtime"
    fi
    # The unwinder is in the library (panics unwind to the JNI boundary, where they are caught).
    grep -qx _Unwind_RaiseException <<<"$nm_all" || bad "$lib: the unwinder is not linked in"
    # Emulated TLS (Rust's Android targets): linked in if used (std's own thread-locals are
    # pthread keys there, so it may not be).
    if grep -qx __emutls_get_address <<<"$nm_all"; then
        echo "ok   $lib: emulated TLS (__emutls_get_address) linked in"
    else
        echo "ok   $lib: no emulated TLS used (no __emutls_get_address, none undefined)"
    fi
    # Strong references to what bionic only has from a later API level than 21 (Android 5.0)
    # would keep the library from loading there; weak ones (std looks such functions up) may stay.
    local strong late
    strong=$(awk '$7 == "UND" && $5 == "GLOBAL" && $8 != "" {print $8}' <<<"$dyn" | sed 's/@.*//' | sort -u)
    late=$(grep -E "$AFTER_API_21" <<<"$strong" || true)
    if [ -n "$late" ]; then bad "$lib: strong references to functions newer than API 21: $(tr '\n' ' ' <<<"$late")"
    else echo "ok   $lib: no strong reference to $(tr '|' ' ' <<<"${AFTER_API_21:2:-2}")"; fi
    echo "     $lib: undefined: $(tr '\n' ' ' <<<"$undef")"
}

for t in "${ANDROID_TARGETS[@]}"; do
    abi=$(android_abi "$t")
    echo "== $package for $t ($abi, profile $profile)"
    runtime "$t"
    if [[ $package == vpn-jni ]]; then
        cargo build --quiet -p vpn-jni --lib --target "$t" --profile "$profile"
    else
        cargo rustc --quiet -p vpn-ffi --lib --crate-type cdylib --target "$t" --profile "$profile" \
            -- -C link-arg=-Wl,-soname,libwg-go.so
    fi
    dest="$out/android/$abi"
    mkdir -p "$dest"
    cp "$out/$t/$dir/$built" "$dest/libwg-go.so"
    check "$dest/libwg-go.so" "$t"
done
[[ $fail -eq 0 ]] || { echo "make android: checks failed"; exit 1; }
echo "make android: libwg-go.so linked and checked for ${ANDROID_TARGETS[*]} ($out/android/<abi>)"
