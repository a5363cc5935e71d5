#!/usr/bin/env bash
# `make check-android`: clippy with warnings denied, all targets (tests, benches, examples), for
# every crate libwg-go.so (crates/jni) and the C ABI (crates/ffi) need, and the library crates
# an app may embed, for aarch64-linux-android, armv7-linux-androideabi and x86_64-linux-android.
# Build scripts that compile C (ring) get zig as the Android C compiler (scripts/android-env.sh);
# clippy links nothing for the target. Then, per target, the dependency tree is checked for
# io_uring crates: an Android app's seccomp filter kills a process that calls io_uring_setup.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/android-env.sh
source scripts/android-env.sh
android_env

CRATES=(vpn-sys vpn-darwinbatch vpn-proto vpn-tun vpn-conn vpn-ipc vpn-device vpn-uapi
        vpn-config vpn-ffi vpn-jni vpn-wireguard vpn-netstack vpn-proxy)

# Only the packages this workspace has (crates from branches not merged yet are named, not
# silently skipped).
members=$(cargo metadata --no-deps --format-version 1 \
    | grep -o '"name":"vpn-[a-z0-9-]*"' | sed 's/"name":"\(.*\)"/\1/' | sort -u)
pkgs=()
for c in "${CRATES[@]}"; do
    if grep -qx "$c" <<<"$members"; then pkgs+=(-p "$c"); else echo "check-android: $c is not in this workspace"; fi
done

fail=0
for target in "${ANDROID_TARGETS[@]}"; do
    echo "== clippy --target $target"
    cargo clippy --quiet --target "$target" "${pkgs[@]}" --all-targets -- -D warnings
    # Every package in the target's normal dependency tree, by name.
    deps=$(cargo tree --quiet --target "$target" "${pkgs[@]}" -e normal --prefix none \
        --format '{p}' | awk '{print $1}' | sort -u)
    uring=$(grep -iE 'uring' <<<"$deps" || true)
    if [ -n "$uring" ]; then
        echo "FAIL $target: io_uring crates in the dependency tree: $(tr '\n' ' ' <<<"$uring")"; fail=1
    else
        echo "ok   $target: $(wc -l <<<"$deps") packages in the dependency tree, none for io_uring"
    fi
done
[[ $fail -eq 0 ]] || { echo "make check-android: checks failed"; exit 1; }
echo "check-android: $(( ${#pkgs[@]} / 2 )) crates clippy-clean for ${ANDROID_TARGETS[*]}"
