#!/usr/bin/env bash
# Installs, idempotently, what building for other systems on Linux needs (`make darwin-tools`,
# `make android-tools`, `make ios-tools`):
#   - zig, the C compiler and the Mach-O and ELF linker, from PyPI (`ziglang`, run as
#     `python3 -m ziglang`);
#   - cargo-zigbuild from crates.io, which points cargo's linker and the cc crate at zig (for
#     the Apple targets; the Android ones use scripts/android-zig.sh);
#   - llvm-nm, llvm-readelf and llvm-objdump (Debian's `llvm`) to read binaries, and `file`;
#   - the Rust targets (rustup) of the systems named as arguments: darwin (the default),
#     android, ios.
# Versions are pinned so that a CI run links with what was tested. A tool already present at the
# pinned version is left alone; nothing is downloaded then.
set -euo pipefail

ZIG_VERSION=${ZIG_VERSION:-0.15.2}
ZIGBUILD_VERSION=${ZIGBUILD_VERSION:-0.24.1}
TARGETS=()
for system in "${@:-darwin}"; do
    case $system in
        darwin) TARGETS+=(aarch64-apple-darwin x86_64-apple-darwin) ;;
        android) TARGETS+=(aarch64-linux-android armv7-linux-androideabi x86_64-linux-android) ;;
        ios) TARGETS+=(aarch64-apple-ios aarch64-apple-ios-sim) ;;
        *) echo "darwin-tools: unknown system '$system' (darwin, android, ios)"; exit 2 ;;
    esac
done

say() { echo "darwin-tools: $*"; }

apt_install() {
    command -v apt-get >/dev/null 2>&1 || { say "no apt-get: install $* by hand"; return 1; }
    if [ -z "${DARWIN_TOOLS_APT_UPDATED:-}" ]; then
        apt-get update -qq
        DARWIN_TOOLS_APT_UPDATED=1
    fi
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}

# --- zig (PyPI) -------------------------------------------------------------------------
zig_version() { python3 -m ziglang version 2>/dev/null || true; }
if [ "$(zig_version)" = "$ZIG_VERSION" ]; then
    say "zig $ZIG_VERSION present"
else
    command -v python3 >/dev/null 2>&1 || apt_install python3
    python3 -m pip --version >/dev/null 2>&1 || apt_install python3-pip
    # A Debian python refuses system-wide pip installs (PEP 668) unless told otherwise.
    python3 -m pip install -q "ziglang==$ZIG_VERSION" 2>/dev/null \
        || python3 -m pip install -q --break-system-packages "ziglang==$ZIG_VERSION"
    [ "$(zig_version)" = "$ZIG_VERSION" ] || { say "zig $ZIG_VERSION did not install"; exit 1; }
    say "zig $ZIG_VERSION installed"
fi

# --- cargo-zigbuild (crates.io) ---------------------------------------------------------
if cargo-zigbuild --version 2>/dev/null | grep -qw "$ZIGBUILD_VERSION"; then
    say "cargo-zigbuild $ZIGBUILD_VERSION present"
else
    cargo install --locked --quiet cargo-zigbuild --version "$ZIGBUILD_VERSION"
    say "cargo-zigbuild $ZIGBUILD_VERSION installed"
fi

# --- llvm-nm, llvm-readelf, llvm-objdump and file (Debian) -----------------------------------
for t in llvm-nm llvm-readelf llvm-objdump; do
    command -v "$t" >/dev/null 2>&1 || { apt_install llvm; break; }
done
command -v file >/dev/null 2>&1 || apt_install file
say "$(llvm-nm --version | grep -m1 -i version | sed 's/^ *//'), $(file --version | head -1)"

# --- Rust targets (rustup) --------------------------------------------------------------
installed=()
for t in "${TARGETS[@]}"; do
    if rustup target list --installed | grep -qx "$t" || rustup target add "$t" >/dev/null 2>&1; then
        installed+=("$t")
    elif [ "$t" = aarch64-apple-ios-sim ]; then
        # Some mirrors of rustup's server lack this target's std: scripts/ffi-ios.sh then builds
        # it from rust-src (-Z build-std), so the simulator slice is still built and checked.
        rustup component add rust-src >/dev/null
        say "$t: rustup could not fetch its std; rust-src installed to build it"
    else
        say "$t: rustup could not install it"; exit 1
    fi
done
say "targets ${installed[*]} installed"
