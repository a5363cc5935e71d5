#!/usr/bin/env bash
# `make bench-android` (root): what a packet-memory budget costs and buys the Android backend.
# For each budget, a fresh JVM in namespace A starts a tunnel through libwg-go.so (the release
# build) with VPN_JNI_MEMORY_BUDGET set, to a release `vpn` daemon in B; iperf3 runs one TCP
# stream each way for $SECS s. Printed per budget: Mbit/s both ways and the JVM's resident
# memory above what it held before wgTurnOn (the peak of samples every 0.2 s), in MiB.
#
# Usage: netns-tests/bench_android.sh [libwg_go.so] [vpn] ; BUDGETS="mib..." (0: no cap), SECS.
set -uo pipefail

HERE="$(cd "$(dirname "$0")" && pwd)"
ROOT="$(cd "$HERE/.." && pwd)"
JNI_LIB="$(realpath "${1:-$ROOT/target/release/libwg_go.so}")"
VPN="$(realpath "${2:-$ROOT/target/release/vpn}")"
BUDGETS="${BUDGETS:-4 8 16 32 64 0}"
SECS="${SECS:-8}"
SCENARIO_TIMEOUT=300
# shellcheck source=lib.sh
source "$HERE/lib.sh"
trap lab_cleanup EXIT
trap 'exit 130' INT TERM
fail() { echo "FAILED: $*"; exit 1; }
must() { local what="$1"; shift; "$@" || fail "$what"; }
ping4() { n "$1" timeout 10 ping -c "${3:-2}" -i 0.2 -W 2 "$2" >/dev/null; }
# shellcheck source=android.sh
source "$HERE/android.sh"

need_root
ensure_tools
[ -f "$JNI_LIB" ] && [ -x "$VPN" ] || { echo "bench_android: build first (cargo build --release -p vpn-jni -p vpn-cli)"; exit 1; }

android_build
make_pair ba
WB="$(ifname "$B")"
KA="$(wg genkey)"; KB="$(wg genkey)"; PA="$(pubkey "$KA")"; PB="$(pubkey "$KB")"
start_daemon vpn "$B" "$WB"
n "$B" wg set "$WB" private-key <(echo "$KB") listen-port 51820 peer "$PA" allowed-ips 100.64.0.1/32,fd00::1/128
tunnel_addrs "$B" 2 "$WB"
TUN="$(ifname "t$A")"
android_tun "$A" "$TUN" 1
SET="$STATE/settings"
android_settings "$SET"
iperf_server "$B" 3600

# peak_rss <pid> <file>: samples VmRSS every 0.2 s into <file> (max) until killed.
peak_rss() {
    local max=0 r
    while :; do
        r="$(rss_kib "$1")"; [ "$r" -gt "$max" ] && max=$r && echo "$max" >"$2"
        sleep 0.2
    done
}

printf '%-8s %12s %12s %12s\n' "budget" "up Mbit/s" "down Mbit/s" "+RSS MiB"
for mib in $BUDGETS; do
    export VPN_JNI_MEMORY_BUDGET=$((mib << 20))
    android_host "$A" >/dev/null
    jcall proc
    base="$(sed -nE 's/.*rss_kib ([0-9]+).*/\1/p' <<<"$JREPLY")"
    jif="$(ifname "b$mib")"
    echo "$SOCK_DIR/$jif.sock" >>"$STATE/socks"
    jcall turnon "$jif" "$TUN" "$SET"
    must "handshake" wait_for "ping4 $A 100.64.0.2 1" 10
    echo 0 >"$STATE/peak"
    peak_rss "$JPID" "$STATE/peak" & sampler=$!
    up="$(timeout $((SECS + 15)) ip netns exec "$(ns "$A")" iperf3 --json -c 100.64.0.2 -t "$SECS" | iperf_field tcp_bps)"
    down="$(timeout $((SECS + 15)) ip netns exec "$(ns "$A")" iperf3 --json -R -c 100.64.0.2 -t "$SECS" | iperf_field tcp_bps)"
    kill "$sampler" 2>/dev/null; wait "$sampler" 2>/dev/null
    peak="$(cat "$STATE/peak")"
    printf '%-8s %12s %12s %12s\n' "$([ "$mib" = 0 ] && echo none || echo "$mib MiB")" \
        "$(mbps "$up")" "$(mbps "$down")" "$(awk -v p="$peak" -v b="$base" 'BEGIN { printf "%.1f", (p - b) / 1024 }')"
    jcall off 0
    jcall quit
    exec 7>&-
    wait "$JPID" 2>/dev/null
done
