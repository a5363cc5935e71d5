#!/usr/bin/env bash
# `make darwin`: links `vpn` (package vpn-cli) as Mach-O for aarch64-apple-darwin and
# x86_64-apple-darwin with zig (cargo-zigbuild), and checks what was linked:
#   - `file` says Mach-O 64-bit executable of the right architecture;
#   - the load commands ask for macOS $MACOSX_DEPLOYMENT_TARGET (zig's default would be its
#     newest SDK, marking the binary as needing macOS 15);
#   - ring's ChaCha20-Poly1305 assembly (NEON on arm64, AVX2/SSE4.1 on x86_64) is linked in;
#   - with the default features (`darwin-spi`) the binary references the private batch calls
#     `_recvmsg_x` and `_sendmsg_x` (zig's libSystem stub lists them, so a misspelt symbol fails
#     to link); built with `--no-default-features` (the App Store opt-out) it references neither.
# The binaries are copied to $out/darwin/vpn-<target>[-appstore]. Run `make darwin-tools` first.
set -euo pipefail
cd "$(dirname "$0")/.."

export MACOSX_DEPLOYMENT_TARGET=${MACOSX_DEPLOYMENT_TARGET:-11.0}
profile=${DARWIN_PROFILE:-release}
case "$profile" in dev) dir=debug ;; *) dir=$profile ;; esac
out=${CARGO_TARGET_DIR:-target}
dest="$out/darwin"
mkdir -p "$dest"
SPI_SYMBOLS=(_recvmsg_x _sendmsg_x)
fail=0

check() { # check <binary> <file-arch> <spi|appstore>
    local bin=$1 arch=$2 variant=$3 desc defined undefined headers minos s
    desc=$(file -b "$bin")
    if [[ $desc != "Mach-O 64-bit $arch executable"* ]]; then
        echo "FAIL $bin: file says: $desc"; fail=1
    else
        echo "ok   $bin: $desc"
    fi
    headers=$(llvm-objdump --macho --private-headers "$bin" 2>/dev/null || true)
    minos=$(awk '/cmd LC_BUILD_VERSION/ {b=1} b && $1 == "minos" {print $2; exit}' <<<"$headers")
    if [[ $minos != "$MACOSX_DEPLOYMENT_TARGET" ]]; then
        echo "FAIL $bin: minimum macOS is '${minos:-?}', wanted $MACOSX_DEPLOYMENT_TARGET"; fail=1
    else
        echo "ok   $bin: minimum macOS $minos"
    fi
    # Into a variable first: `grep -q` closing the pipe early would fail llvm-nm (pipefail).
    defined=$(llvm-nm "$bin")
    if grep -Eq ' t _ring_core_[0-9_]+__chacha20_poly1305_seal(_avx2|_sse41)?$' <<<"$defined"; then
        echo "ok   $bin: ring's ChaCha20-Poly1305 assembly linked"
    else
        echo "FAIL $bin: ring's ChaCha20-Poly1305 assembly missing"; fail=1
    fi
    undefined=$(llvm-nm -u "$bin")
    for s in "${SPI_SYMBOLS[@]}"; do
        if grep -qx "$s" <<<"$undefined"; then
            if [[ $variant == spi ]]; then echo "ok   $bin: references $s"
            else echo "FAIL $bin: references $s without the darwin-spi feature"; fail=1; fi
        else
            if [[ $variant == spi ]]; then echo "FAIL $bin: does not reference $s"; fail=1
            else echo "ok   $bin: no $s"; fi
        fi
    done
}

for target in aarch64-apple-darwin x86_64-apple-darwin; do
    case $target in aarch64-*) arch=arm64 ;; *) arch=x86_64 ;; esac
    for variant in spi appstore; do
        flags=()
        suffix=
        if [[ $variant == appstore ]]; then flags=(--no-default-features); suffix=-appstore; fi
        echo "== vpn for $target ($variant, profile $profile, macOS $MACOSX_DEPLOYMENT_TARGET)"
        cargo zigbuild --quiet -p vpn-cli --bin vpn --target "$target" --profile "$profile" \
            "${flags[@]}"
        cp "$out/$target/$dir/vpn" "$dest/vpn-$target$suffix"
        check "$dest/vpn-$target$suffix" "$arch" "$variant"
    done
done
[[ $fail -eq 0 ]] || { echo "make darwin: checks failed"; exit 1; }
echo "make darwin: both targets linked and checked ($dest)"
