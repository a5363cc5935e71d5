#!/usr/bin/env bash
# Connected sockets on or off, by measurement: TCP from namespace B to A (iperf3, SECS seconds;
# 1 peer, or 8 peers with one stream each), and for the receiving daemon in A its CPU per bit
# (user + system ticks from /proc/PID/stat over the transfer) and its peak RSS (VmHWM). The
# two settings alternate within each round (off first in odd rounds, on first in even ones), so
# load from whatever else runs on the machine falls on both alike. Prints one line per case,
# then per peer count the medians and the on/off ratio of each round with their spread.
# Bounded: ROUNDS x 2 peer counts x 2 settings x (SECS + setup) seconds; every namespace goes
# with the trap.
#
# Usage (root): netns-tests/connected/measure.sh [path/to/vpn]   (default target/release/vpn)
#   ROUNDS=3 SECS=8 PEERS="1 8"; NS_PREFIX / IF_PREFIX prefix namespaces and interfaces.
set -euo pipefail
cd "$(dirname "$0")/../.."
VPN="$(realpath -m "${1:-target/release/vpn}")"
. netns-tests/connected/lib.sh
require_root_and_tools
SECS="${SECS:-8}"; ROUNDS="${ROUNDS:-3}"; PEERS="${PEERS:-1 8}"
HZ=$(getconf CLK_TCK)
RESULTS="$(mktemp)"
trap 'cleanup; rm -f "$RESULTS"' EXIT INT TERM

# one N CONNECTED ROUND — one case, one line in $RESULTS and on stdout.
one() {
    local n="$1" connected="$2" round="$3" k pid t0 t1 bits b pairs hwm
    topology "$n" "$connected"
    iperf_servers "$A" 5200 "$n"
    pid=$(daemon_pid "$A" "$WA")
    t0=$(cpu_ticks "$pid")
    for k in $(seq "$n"); do
        ip netns exec "$B" timeout $((SECS + 20)) iperf3 -c "100.64.$k.1" -p $((5200 + k)) \
            -t "$SECS" -J >"$DIR/b$k.json" 2>&1 &
    done
    wait
    t1=$(cpu_ticks "$pid")
    bits=0
    for k in $(seq "$n"); do
        b=$(python3 -c 'import json,sys; print(int(json.load(open(sys.argv[1]))["end"]["sum_received"]["bytes"]) * 8)' "$DIR/b$k.json" 2>/dev/null || echo 0)
        bits=$((bits + b))
    done
    pairs=$(uapi_stat "$A" "$WA" bind.connected_open)
    hwm=$(awk '/VmHWM/ {print $2}' "/proc/$pid/status")
    python3 - "$n" "$connected" "$round" "$bits" "$SECS" "$((t1 - t0))" "$HZ" "${pairs:-0}" "$hwm" <<'PY' | tee -a "$RESULTS"
import sys
n, c, r, bits, secs, ticks, hz, pairs, hwm = sys.argv[1:]
bits, secs, ticks, hz = int(bits), float(secs), int(ticks), int(hz)
mbps = bits / secs / 1e6
ns_per_kbit = ticks / hz * 1e9 / (bits / 1000) if bits else float("nan")
print(f"{n:<6} {'on' if c == '1' else 'off':<9} {r:<6} {mbps:10.0f} {ns_per_kbit:15.1f} {int(hwm) / 1024:10.1f} {pairs:>6}")
PY
    cleanup
    A="${NS_PREFIX:-}vpn-cs-a-$$-$n$connected$round"; B="${NS_PREFIX:-}vpn-cs-b-$$-$n$connected$round"
    DIR="$(mktemp -d)"
}

echo "load: $(uptime)"
printf '%-6s %-9s %-6s %10s %15s %10s %6s\n' peers connected round "Mbit/s" "rx ns/kbit" "VmHWM MiB" pairs
for round in $(seq "$ROUNDS"); do
    for n in $PEERS; do
        if [ $((round % 2)) -eq 1 ]; then order="0 1"; else order="1 0"; fi
        for connected in $order; do
            one "$n" "$connected" "$round"
        done
    done
done
echo "load: $(uptime)"
python3 - "$RESULTS" <<'PY'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1]) if l.strip()]
cases = {}
for n, c, r, mbps, ns, hwm, pairs in rows:
    cases.setdefault((n, c), {})[r] = (float(mbps), float(ns), float(hwm))
print("\nmedians (Mbit/s, rx ns/kbit, VmHWM MiB) and per-round on/off ratios [min-max]")
for n in sorted({k[0] for k in cases}, key=int):
    off, on = cases.get((n, "off"), {}), cases.get((n, "on"), {})
    for name, d in (("off", off), ("on", on)):
        if d:
            m = [statistics.median(v[i] for v in d.values()) for i in range(3)]
            print(f"  {n} peer(s), {name:<3}: {m[0]:.0f} Mbit/s, {m[1]:.1f} ns/kbit, {m[2]:.1f} MiB")
    rounds = sorted(set(off) & set(on))
    for i, what in enumerate(("throughput", "rx CPU per bit", "peak RSS")):
        ratios = [on[r][i] / off[r][i] for r in rounds if off[r][i]]
        if ratios:
            print(f"  {n} peer(s), on/off {what}: median {statistics.median(ratios):.2f}x "
                  f"[{min(ratios):.2f}-{max(ratios):.2f}] over {len(ratios)} rounds")
PY
