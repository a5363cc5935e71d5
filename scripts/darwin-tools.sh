#!/usr/bin/env bash
# Installs, idempotently, what linking Mach-O binaries on Linux needs (`make darwin-tools`):
#   - zig, the C compiler and Mach-O linker, from PyPI (`ziglang`, run as `python3 -m ziglang`);
#   - cargo-zigbuild from crates.io, which points cargo's linker and the cc crate at zig;
#   - llvm-nm (Debian's `llvm`) to list a binary's undefined symbols, and `file`;
#   - the two darwin Rust targets (rustup).
# Versions are pinned so that a CI run links with what was tested. A tool already present at the
# pinned version is left alone; nothing is downloaded then.
set -euo pipefail

ZIG_VERSION=${ZIG_VERSION:-0.15.2}
ZIGBUILD_VERSION=${ZIGBUILD_VERSION:-0.24.1}
TARGETS=(aarch64-apple-darwin x86_64-apple-darwin)

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

# --- llvm-nm and file (Debian) ----------------------------------------------------------
command -v llvm-nm >/dev/null 2>&1 || apt_install llvm
command -v file >/dev/null 2>&1 || apt_install file
say "$(llvm-nm --version | grep -m1 -i version | sed 's/^ *//'), $(file --version | head -1)"

# --- Rust targets (rustup) --------------------------------------------------------------
for t in "${TARGETS[@]}"; do
    rustup target list --installed | grep -qx "$t" || rustup target add "$t"
done
say "targets ${TARGETS[*]} installed"
