#!/usr/bin/env bash
# `make ffi-darwin`: the C ABI's libraries (crates/ffi, package vpn-ffi) for aarch64-apple-darwin
# and x86_64-apple-darwin, built on Linux with zig (cargo-zigbuild), and checked with llvm-nm:
#   - every function `include/wireguard.h` declares is a defined, exported text symbol
#     (`T _wgTurnOn`, …) of the static library and of the dynamic one;
#   - built with `--no-default-features` (the App Store variant) neither library references the
#     private batch calls `_recvmsg_x`/`_sendmsg_x`; with the defaults they are referenced
#     when vpn-ffi forwards the `darwin-spi` feature.
# The libraries and the header (with its module map) land in $out/ffi-darwin/<target>[-appstore]/.
# `make apple` (on a Mac) turns them into an xcframework. Needs zig, cargo-zigbuild and llvm-nm
# (`make darwin-tools`, or `pip install ziglang` and `cargo install --locked cargo-zigbuild`).
set -euo pipefail
cd "$(dirname "$0")/.."

for tool in cargo-zigbuild llvm-nm; do
    command -v "$tool" >/dev/null 2>&1 || { echo "ffi-darwin: $tool missing (make darwin-tools)"; exit 1; }
done
python3 -m ziglang version >/dev/null 2>&1 || command -v zig >/dev/null 2>&1 \
    || { echo "ffi-darwin: zig missing (make darwin-tools)"; exit 1; }

export MACOSX_DEPLOYMENT_TARGET=${MACOSX_DEPLOYMENT_TARGET:-11.0}
profile=${DARWIN_PROFILE:-release}
case "$profile" in dev) dir=debug ;; *) dir=$profile ;; esac
out=${CARGO_TARGET_DIR:-target}
header=crates/ffi/include/wireguard.h
mapfile -t functions < <(grep -oE '\bwg[A-Za-z0-9]+\(' "$header" | tr -d '(' | sort -u)
[ "${#functions[@]}" -gt 0 ] || { echo "ffi-darwin: no wg* function in $header"; exit 1; }
spi_feature=no
grep -q '^darwin-spi *=' crates/ffi/Cargo.toml && spi_feature=yes
fail=0

# check <library> <spi|appstore>
check() {
    local lib=$1 variant=$2 defined undefined f s
    # --no-llvm-bc: std's objects carry bitcode that an older llvm-nm cannot read; the symbol
    # tables are what counts.
    defined=$(llvm-nm --no-llvm-bc -g --defined-only "$lib" 2>/dev/null | awk '$2 == "T" {print $3}' | sort -u)
    local missing=0
    for f in "${functions[@]}"; do
        if ! grep -qx "_$f" <<<"$defined"; then
            echo "FAIL $lib: _$f is not exported"; missing=1; fail=1
        fi
    done
    [[ $missing -eq 1 ]] || echo "ok   $lib: exports all ${#functions[@]} wg* functions of the header"
    undefined=$(llvm-nm --no-llvm-bc -u "$lib" 2>/dev/null | awk '{print $NF}' | sort -u)
    for s in _recvmsg_x _sendmsg_x; do
        if grep -qx "$s" <<<"$undefined"; then
            if [[ $variant == appstore ]]; then
                echo "FAIL $lib: references $s without the darwin-spi feature"; fail=1
            else echo "ok   $lib: references $s"; fi
        elif [[ $variant == spi && $spi_feature == yes ]]; then
            echo "FAIL $lib: does not reference $s"; fail=1
        else
            echo "ok   $lib: no $s"
        fi
    done
}

for target in aarch64-apple-darwin x86_64-apple-darwin; do
    for variant in spi appstore; do
        flags=()
        suffix=
        if [[ $variant == appstore ]]; then flags=(--no-default-features); suffix=-appstore; fi
        echo "== vpn-ffi for $target ($variant, profile $profile, macOS $MACOSX_DEPLOYMENT_TARGET)"
        cargo zigbuild --quiet -p vpn-ffi --lib --target "$target" --profile "$profile" "${flags[@]}"
        dest="$out/ffi-darwin/$target$suffix"
        mkdir -p "$dest/include"
        cp "$out/$target/$dir/libvpn_ffi.a" "$out/$target/$dir/libvpn_ffi.dylib" "$dest/"
        cp "$header" crates/ffi/include/module.modulemap "$dest/include/"
        check "$dest/libvpn_ffi.a" "$variant"
        check "$dest/libvpn_ffi.dylib" "$variant"
    done
done
[[ $fail -eq 0 ]] || { echo "make ffi-darwin: checks failed"; exit 1; }
echo "make ffi-darwin: both targets built and checked ($out/ffi-darwin)"
