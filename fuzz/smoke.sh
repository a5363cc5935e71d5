#!/usr/bin/env bash
# Builds every cargo-fuzz target listed in fuzz/Cargo.toml and runs each for FUZZ_SECONDS
# (default 10). Exits non-zero on the first crash, assertion failure, timeout or build error;
# the crashing input is left in fuzz/artifacts/<target>/.
#
# Only a stable toolchain exists on the project's machines. cargo-fuzz needs nightly only for
# sanitizers and a few -Z flags: `--sanitizer none` drops the sanitizer, and RUSTC_BOOTSTRAP=1
# lets stable rustc/cargo accept the remaining unstable flags. Coverage instrumentation
# (-Cpasses=sancov-module) and libFuzzer itself work on stable.
set -euo pipefail
cd "$(dirname "$0")"

FUZZ_SECONDS="${FUZZ_SECONDS:-10}"
export RUSTC_BOOTSTRAP=1

if ! cargo fuzz --version >/dev/null 2>&1; then
    cargo install cargo-fuzz --locked
fi

# Target names straight from the [[bin]] sections, so targets others add are run too.
mapfile -t targets < <(cargo fuzz list)
if [ "${#targets[@]}" -eq 0 ]; then
    echo "smoke.sh: no fuzz targets found in fuzz/Cargo.toml" >&2
    exit 1
fi

# -a: debug assertions and overflow checks on, so arithmetic bugs crash instead of wrapping.
cargo fuzz build --sanitizer none -a

for t in "${targets[@]}"; do
    echo "== fuzz target $t: ${FUZZ_SECONDS}s"
    mkdir -p "corpus/$t"
    log="$(mktemp)"
    status=0
    cargo fuzz run --sanitizer none -a "$t" "corpus/$t" -- \
        -max_total_time="$FUZZ_SECONDS" -rss_limit_mb=2048 -timeout=10 -print_final_stats=1 \
        >"$log" 2>&1 || status=$?
    if [ "$status" -ne 0 ]; then
        tail -n 60 "$log" >&2
        rm -f "$log"
        echo "smoke.sh: fuzz target $t FAILED (exit $status; input saved under fuzz/artifacts/$t)" >&2
        exit 1
    fi
    grep -E "^(#[0-9]+ +DONE|stat::number_of_executed_units)" "$log" || true
    rm -f "$log"
done
echo "smoke.sh: all ${#targets[@]} targets ran ${FUZZ_SECONDS}s without a crash"
