#!/usr/bin/env bash
# `make check-darwin`: clippy with warnings denied, all targets (tests, benches, examples), for
# every crate that builds for macOS, for aarch64-apple-darwin and x86_64-apple-darwin (and all but
# the `vpn` binary for aarch64-apple-ios and aarch64-apple-ios-sim), with the
# private batch calls compiled in (default features) and without them (--no-default-features,
# the App Store build). Runs through cargo-zigbuild, which gives build scripts that compile C
# (ring) zig as the darwin C compiler; `make darwin-tools` installs it.
set -euo pipefail
cd "$(dirname "$0")/.."
export MACOSX_DEPLOYMENT_TARGET=${MACOSX_DEPLOYMENT_TARGET:-11.0}

CRATES=(vpn-darwinbatch vpn-sys vpn-packet vpn-proto vpn-tun vpn-conn vpn-device vpn-uapi vpn-config
        vpn-ipc vpn-wireguard vpn-ffi vpn-cli vpn-netstack vpn-proxy)

# Only the packages this workspace has (crates from branches not merged yet are named, not
# silently skipped).
members=$(cargo metadata --no-deps --format-version 1 \
    | grep -o '"name":"vpn-[a-z0-9-]*"' | sed 's/"name":"\(.*\)"/\1/' | sort -u)
pkgs=()
for c in "${CRATES[@]}"; do
    if grep -qx "$c" <<<"$members"; then pkgs+=(-p "$c"); else echo "check-darwin: $c is not in this workspace"; fi
done

for target in aarch64-apple-darwin x86_64-apple-darwin; do
    for features in default --no-default-features; do
        flags=()
        [[ $features == default ]] || flags=("$features")
        echo "== clippy --target $target ${flags[*]:-(default features)}"
        cargo-zigbuild clippy --quiet --target "$target" "${pkgs[@]}" --all-targets "${flags[@]}" \
            -- -D warnings
    done
done

# iOS (devices and the simulator): the same crates but the `vpn` binary, with zig as the C
# compiler (scripts/ios-env.sh; cargo-zigbuild has no iOS targets). The simulator's std is built
# from rust-src where rustup could not install it (ios_std_flags).
# shellcheck source=scripts/ios-env.sh
source scripts/ios-env.sh
ios_env
ios_pkgs=()
for ((i = 0; i < ${#pkgs[@]}; i += 2)); do
    [[ ${pkgs[i + 1]} == vpn-cli ]] || ios_pkgs+=(-p "${pkgs[i + 1]}")
done
for target in "${IOS_TARGETS[@]}"; do
    std=$(ios_std_flags "$target")
    for features in default --no-default-features; do
        flags=()
        [[ $features == default ]] || flags=("$features")
        echo "== clippy --target $target ${flags[*]:-(default features)}${std:+ (std from rust-src)}"
        if [ -n "$std" ]; then
            RUSTC_BOOTSTRAP=1 cargo clippy --quiet --target "$target" "$std" "${ios_pkgs[@]}" \
                --all-targets "${flags[@]}" -- -D warnings
        else
            cargo clippy --quiet --target "$target" "${ios_pkgs[@]}" --all-targets "${flags[@]}" \
                -- -D warnings
        fi
    done
done
echo "check-darwin: $(( ${#pkgs[@]} / 2 )) crates clippy-clean for both darwin targets, $(( ${#ios_pkgs[@]} / 2 )) for ${IOS_TARGETS[*]}, SPI on and off"
