#!/usr/bin/env bash
# Fairness under a flood: one TCP transfer and one unlimited-rate UDP flood share a tunnel.
# For vpn, wireguard-go (Debian package), boringtun-cli and plain veth: TCP alone, then TCP while
# an iperf3 UDP flood (`-u -b 0`) runs the same way; the TCP rate under the flood, its share of
# the TCP-alone rate and the UDP rate delivered. Side A (daemon, iperf3 clients) on CPU 0, side
# B (daemon, iperf3 servers) on CPU 1; TCP with cubic (per-route congctl, as bench.sh). Runs are
# interleaved across implementations; prints every run, then medians with min..max.
#
# Usage (root): netns-tests/fairness.sh [path/to/release/vpn]
#   RUNS=5 SECS=4 (TCP seconds) LEN=1200 (UDP payload) IMPLS="veth vpn wggo boringtun"
#   VPN_ENV="VPN_SCHED_BATCH=0 ..." (environment for the vpn daemons, for experiments)
#   QDISC="fq_codel" (a root qdisc for A's tunnel interface: `tc qdisc replace ... root $QDISC`)
set -uo pipefail

HERE="$(cd "$(dirname "$0")" && pwd)"
ROOT="$(cd "$HERE/.." && pwd)"
VPN="$(realpath "${1:-$ROOT/target/release/vpn}")"
RUNS="${RUNS:-5}"; SECS="${SECS:-4}"; LEN="${LEN:-1200}"
IMPLS="${IMPLS:-veth vpn wggo boringtun}"
# shellcheck source=lib.sh
source "$HERE/lib.sh"
trap lab_cleanup EXIT
trap 'exit 130' INT TERM
need_root
[ -x "$VPN" ] || { echo "fairness.sh: $VPN not found (cargo build --release -p vpn-cli)" >&2; exit 1; }
ensure_tools
RES="$STATE/results"; : >"$RES"
echo "== load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "== wireguard-go: $(wireguard-go --version 2>&1 | head -1) (Debian $(dpkg-query -W -f '${Version}' wireguard-go 2>/dev/null))"
echo "== boringtun-cli: $("$BORINGTUN" --version 2>&1 | head -1)"

# Where packets were lost during the flood: A's tunnel interface (the TUN's queue, or the veth),
# the outer UDP socket of B's daemon (its receive buffer), TCP retransmissions.
tx_dropped() { n "$1" cat "/sys/class/net/$2/statistics/tx_dropped"; }
socket_drops() {
    n "$1" ss -uamnH "sport = :51820" | grep -o 'd[0-9]*)' | tr -dc '0-9\n' | awk '{ s += $1 } END { print s + 0 }'
}

# One run for one implementation on a pair of its own: "tcp_alone tcp_flood udp_flood
# tun_drops socket_drops retransmits" (rates in Mbit/s).
fair_run() {
    local impl="$1" name="$2" dst src deva devb
    make_pair "$name"
    if [ "$impl" = veth ]; then
        dst=198.18.0.2; src=198.18.0.1; deva="$VA"; devb="$VB"
    else
        CPU_A=0 CPU_B=1 tunnel "$impl" "$impl" 4 || return 1
        dst=100.64.0.2; src=100.64.0.1; deva="$WA"; devb="$WB"
        n "$A" timeout 10 ping -c 3 -i 0.2 -W 2 "$dst" >/dev/null || { echo "$impl: no tunnel" >&2; return 1; }
    fi
    [ -n "${QDISC:-}" ] && n "$A" tc qdisc replace dev "$deva" root $QDISC
    n "$A" ip route add "$dst/32" dev "$deva" congctl cubic
    n "$B" ip route add "$src/32" dev "$devb" congctl cubic
    local p
    for p in 5201 5202; do
        timeout 120 ip netns exec "$(ns "$B")" taskset -c 1 iperf3 -s -p "$p" >/dev/null 2>&1 &
        track_pid $!
    done
    wait_for "n $B ss -ltn | grep -q ':5202 '" 5
    cli() { timeout $((SECS + 20)) ip netns exec "$(ns "$A")" taskset -c 0 iperf3 --json -c "$dst" "$@"; }
    local alone flood udp j d0 d1 s0 s1
    alone="$(cli -t "$SECS" | iperf_field tcp_bps)"
    d0="$(tx_dropped "$A" "$deva")"; s0="$(socket_drops "$B")"
    cli -p 5202 -u -b 0 -l "$LEN" -w 4M -t $((SECS + 2)) >"$STATE/udp.json" &
    local upid=$!
    sleep 1
    j="$(cli -t "$SECS")"
    flood="$(echo "$j" | iperf_field tcp_bps)"
    wait "$upid"
    d1="$(tx_dropped "$A" "$deva")"; s1="$(socket_drops "$B")"
    local retr; retr="$(echo "$j" | tr -d ' \t\n' | grep -o '"sum_sent":{[^}]*' | grep -o '"retransmits":[0-9]*' | head -1 | cut -d: -f2)"
    udp="$(iperf_field udp_bps <"$STATE/udp.json")"
    ns_del "$A" "$B"
    echo "$(mbps "$alone") $(mbps "$flood") $(mbps "$udp") $((d1 - d0)) $(( ${s1:-0} - ${s0:-0} )) ${retr:-0}"
}

for run in $(seq 1 "$RUNS"); do
    for impl in $IMPLS; do
        if [ "$impl" = vpn ] && [ -n "${VPN_ENV:-}" ]; then
            # shellcheck disable=SC2086
            r="$(export ${VPN_ENV}; fair_run "$impl" "f$run${impl:0:2}")"
        else
            r="$(fair_run "$impl" "f$run${impl:0:2}")"
        fi
        [ -n "$r" ] || { echo "run $run $impl: failed"; continue; }
        read -r alone flood udp tund sockd retr <<<"$r"
        share="$(awk -v a="$alone" -v f="$flood" 'BEGIN { printf "%.0f", (a > 0 ? 100 * f / a : 0) }')"
        echo "run $run $impl: TCP alone $alone Mbit/s, TCP under the flood $flood ($share %), UDP delivered $udp; during the flood: $tund dropped at A's tunnel interface, $sockd at B's daemon socket, $retr TCP retransmissions"
        echo "$impl alone $alone" >>"$RES"; echo "$impl flood $flood" >>"$RES"
        echo "$impl share $share" >>"$RES"; echo "$impl udp $udp" >>"$RES"
    done
done

cell() {
    awk -v i="$1" -v m="$2" '$1 == i && $2 == m { print $3 }' "$RES" | sort -g |
        awk '{ v[NR] = $1 } END { if (NR == 0) { print "–"; exit }
             med = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
             printf "%g (%g..%g)", med, v[1], v[NR] }'
}
echo
echo "| path | TCP alone, Mbit/s | TCP under the UDP flood, Mbit/s | TCP share, % of alone | UDP delivered, Mbit/s |"
echo "|---|---|---|---|---|"
for impl in $IMPLS; do
    echo "| $impl | $(cell "$impl" alone) | $(cell "$impl" flood) | $(cell "$impl" share) | $(cell "$impl" udp) |"
done
echo "== load average at end: $(cut -d' ' -f1-3 /proc/loadavg)"
