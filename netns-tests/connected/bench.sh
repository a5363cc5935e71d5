#!/usr/bin/env bash
# Connected sockets benchmark: TCP throughput (iperf3, B -> A, 8 s) and the receiving daemon's
# CPU per bit, with connected sockets off and on, for 1 peer and for 8 peers (8 parallel
# streams, one per peer), all in one run. Prints one line per case and `uptime` first (the
# machine is shared: state the load with the figures).
#
# Usage (root): netns-tests/connected/bench.sh [path/to/vpn]   (default target/release/vpn)
set -euo pipefail
cd "$(dirname "$0")/../.."
VPN="$(realpath -m "${1:-target/release/vpn}")"
. netns-tests/connected/lib.sh
require_root_and_tools
SECS="${BENCH_SECS:-8}"
HZ=$(getconf CLK_TCK)

echo "load: $(uptime)"
printf '%-6s %-9s %12s %16s %14s\n' peers connected "Mbit/s" "rx CPU ns/kbit" "pair sockets"
for n in 1 8; do
    for connected in 0 1; do
        topology "$n" "$connected"
        iperf_servers "$A" 5200 "$n"
        pid=$(daemon_pid "$A" ${WA})
        t0=$(cpu_ticks "$pid")
        for k in $(seq "$n"); do
            ip netns exec "$B" iperf3 -c "100.64.$k.1" -p $((5200 + k)) -t "$SECS" -J \
                >"$DIR/b$k.json" 2>&1 &
        done
        wait
        t1=$(cpu_ticks "$pid")
        bits=0
        for k in $(seq "$n"); do
            b=$(python3 -c 'import json,sys; print(int(json.load(open(sys.argv[1]))["end"]["sum_received"]["bytes"]) * 8)' "$DIR/b$k.json")
            bits=$((bits + b))
        done
        pairs=$(uapi_stat "$A" "$WA" bind.connected_open)
        python3 - "$n" "$connected" "$bits" "$SECS" "$((t1 - t0))" "$HZ" "$pairs" <<'PY'
import sys
n, c, bits, secs, ticks, hz, pairs = sys.argv[1:]
bits, secs, ticks, hz = int(bits), float(secs), int(ticks), int(hz)
mbps = bits / secs / 1e6
ns_per_kbit = ticks / hz * 1e9 / (bits / 1000) if bits else float("nan")
print(f"{n:<6} {'on' if c == '1' else 'off':<9} {mbps:12.0f} {ns_per_kbit:16.1f} {pairs:>14}")
PY
        cleanup
        A="${NS_PREFIX:-}vpn-cs-a-$$-$n$connected"; B="${NS_PREFIX:-}vpn-cs-b-$$-$n$connected"; DIR="$(mktemp -d)"
    done
done
