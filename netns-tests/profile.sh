#!/usr/bin/env bash
# Where a packet's time goes: per-packet costs of `vpn` and boringtun-cli on the bench's two
# small-packet workloads, split-pinned as `make bench` runs them (side A, daemon and client, on
# CPU 0; side B on CPU 1). The profile behind docs/performance.md's account of a missed goal.
#
#   udp64: iperf3 `-u -b 0 -l 64` for SECS s; per datagram delivered, each daemon's CPU time,
#          context switches and system calls (perf stat), and where A's and B's cycles go
#          (perf record, self time by symbol, the top PROFILE_TOP).
#   ping:  PINGS pings at 0.05 s (the bench's RTT phase); per ping, each daemon's CPU time,
#          context switches and system calls, and the RTT's median.
#
# Usage (root): netns-tests/profile.sh [path/to/release/vpn]
#   IMPLS="vpn boringtun"  SECS=6  PINGS=200  PROFILE_TOP=14  OUT=target/profile/<date>
# perf's data and reports stay in OUT; the summary goes to stdout.
set -uo pipefail

HERE="$(cd "$(dirname "$0")" && pwd)"
ROOT="$(cd "$HERE/.." && pwd)"
VPN="$(realpath "${1:-$ROOT/target/release/vpn}")"
IMPLS="${IMPLS:-vpn boringtun}"
SECS="${SECS:-6}"
PINGS="${PINGS:-200}"
SCHED_PINGS="${SCHED_PINGS:-40}"
TOP="${PROFILE_TOP:-14}"
OUT="${OUT:-$ROOT/target/profile/$(date +%Y%m%d-%H%M%S)}"
# shellcheck source=lib.sh
source "$HERE/lib.sh"
trap lab_cleanup EXIT
trap 'exit 130' INT TERM
need_root
command -v perf >/dev/null || { echo "profile.sh: perf not found (apt-get install linux-perf)" >&2; exit 1; }
ensure_tools
mkdir -p "$OUT"
CPU_A=0 CPU_B=1
EVENTS="task-clock,context-switches,cpu-migrations,raw_syscalls:sys_enter"

# perf stat of both daemons while "$@" runs; prints "msA csA scA msB csB scB".
stat_both() {
    local f="$OUT/stat.$$"
    perf stat -x, -e "$EVENTS" -p "$PIDA" -o "$f.a" -- sleep 1000 >/dev/null 2>&1 & local sa=$!
    perf stat -x, -e "$EVENTS" -p "$PIDB" -o "$f.b" -- sleep 1000 >/dev/null 2>&1 & local sb=$!
    sleep 0.3
    "$@"
    # perf stat ends with its workload; a background job ignores SIGINT, so end the sleeps.
    pkill -P "$sa" sleep; pkill -P "$sb" sleep
    wait "$sa" "$sb" 2>/dev/null
    for s in a b; do
        awk -F, '$3 == "task-clock" { ms = $1 } $3 == "context-switches" { cs = $1 }
                 $3 == "raw_syscalls:sys_enter" { sc = $1 } END { printf "%s %s %s ", ms, cs, sc }' "$f.$s"
    done
    echo
    rm -f "$f.a" "$f.b"
}

# us <ms>: microseconds.
us() { awk -v m="$1" 'BEGIN { printf "%.0f", m * 1000 }'; }

# per <value> <count>: value / count, 2 decimals.
per() { awk -v v="$1" -v c="$2" 'BEGIN { printf "%.2f", (c > 0 ? v / c : 0) }'; }

# sched_summary <perf sched data> <pings> <pid A> <pid B>: per thread of A's and B's daemon and
# of ping, the wake-ups, scheduling delay and run time per ping (µs), from perf sched timehist.
sched_summary() {
    perf sched timehist -i "$1" 2>/dev/null | awk -v pings="$2" -v pa="$3" -v pb="$4" '
        $2 ~ /^\[[0-9]+\]$/ && $3 ~ /\[[0-9]+(\/[0-9]+)?\]$/ {
            # time [cpu] task[tid/pid] wait sch-delay run
            i = 3; task = $i; pid = task; sub(/\]$/, "", pid); sub(/.*[\/\[]/, "", pid)
            name = task; sub(/\[.*/, "", name)
            side = pid == pa ? "A" : pid == pb ? "B" : name == "ping" ? "ping" : ""
            if (side == "") next
            key = side " " name
            n[key]++; delay[key] += $(i + 2); run[key] += $(i + 3)
        }
        END {
            for (k in n) printf "    %-28s %6.2f switches, %7.1f µs delay, %7.1f µs run per ping\n", k, n[k] / pings, delay[k] * 1000 / pings, run[k] * 1000 / pings
        }' | sort
}

# Top symbols by self time of a perf.data.
top_symbols() {
    perf report -i "$1" --no-children --sort symbol --stdio 2>/dev/null |
        awk '/^ +[0-9.]+%/ { print }' | head -n "$TOP" | sed 's/^ */    /'
}

for impl in $IMPLS; do
    make_pair "pf${impl:0:2}"
    tunnel "$impl" "$impl" 4
    n "$A" timeout 10 ping -c 3 -i 0.2 -W 2 100.64.0.2 >/dev/null || { echo "$impl: no tunnel" >&2; exit 1; }
    (exec timeout $((SECS * 4 + 60)) ip netns exec "$(ns "$B")" taskset -c "$CPU_B" iperf3 -s >/dev/null 2>&1) &
    track_pid $!
    wait_for "n $B ss -ltn | grep -q ':5201 '" 5
    udp() { n "$A" taskset -c "$CPU_A" timeout $((SECS + 10)) iperf3 --json -c 100.64.0.2 -u -b 0 -l 64 -t "$SECS" >"$OUT/$impl-udp.json"; }

    # UDP 64 B: counters, then a profile of a second run.
    read -r msA csA scA msB csB scB < <(stat_both udp)
    pkts="$("$PY" -c 'import json,sys; e=json.load(open(sys.argv[1]))["end"]["sum"]; print(e["packets"] - e["lost_packets"])' "$OUT/$impl-udp.json")"
    perf record -g -o "$OUT/$impl-udp-A.data" -p "$PIDA" -- sleep "$SECS" >/dev/null 2>&1 & ra=$!
    perf record -g -o "$OUT/$impl-udp-B.data" -p "$PIDB" -- sleep "$SECS" >/dev/null 2>&1 & rb=$!
    udp; wait "$ra" "$rb"
    echo "== $impl, UDP 64 B: $pkts datagrams delivered in $SECS s ($(per "$pkts" "$((SECS * 1000))") k/s)"
    echo "  per datagram delivered: A $(per "$(us "$msA")" "$pkts") CPU-µs, $(per "$csA" "$pkts") context switches, $(per "$scA" "$pkts") system calls;" \
         "B $(per "$(us "$msB")" "$pkts") CPU-µs, $(per "$csB" "$pkts") context switches, $(per "$scB" "$pkts") system calls"
    echo "  A's cycles (sender: TUN read, seal, UDP send), self time:"; top_symbols "$OUT/$impl-udp-A.data"
    echo "  B's cycles (receiver: UDP receive, open, TUN write), self time:"; top_symbols "$OUT/$impl-udp-B.data"

    # Ping: counters per ping and the RTT.
    pinged() { n "$A" taskset -c "$CPU_A" timeout 60 ping -c "$PINGS" -i 0.05 -W 2 100.64.0.2 >"$OUT/$impl-ping.txt"; }
    read -r msA csA scA msB csB scB < <(stat_both pinged)
    rtt="$(grep -o 'time=[0-9.]*' "$OUT/$impl-ping.txt" | cut -d= -f2 | sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }')"
    # Where a ping waits: every context switch on both CPUs during SCHED_PINGS pings, and per
    # thread of either daemon (and ping) the time from its wake-up to running (scheduling
    # delay) and its run time, per ping.
    perf sched record -a -o "$OUT/$impl-sched.data" -- sleep "$(awk -v p="$SCHED_PINGS" 'BEGIN { print p * 0.05 + 0.5 }')" >/dev/null 2>&1 & rs=$!
    sleep 0.2
    n "$A" taskset -c "$CPU_A" timeout 30 ping -c "$SCHED_PINGS" -i 0.05 -W 2 100.64.0.2 >/dev/null
    wait "$rs"
    sched_summary "$OUT/$impl-sched.data" "$SCHED_PINGS" "$PIDA" "$PIDB"
    echo "== $impl, ping: $PINGS pings, median RTT $rtt ms"
    echo "  per ping: A $(per "$(us "$msA")" "$PINGS") CPU-µs, $(per "$csA" "$PINGS") context switches, $(per "$scA" "$PINGS") system calls;" \
         "B $(per "$(us "$msB")" "$PINGS") CPU-µs, $(per "$csB" "$PINGS") context switches, $(per "$scB" "$PINGS") system calls"
done
echo "(perf data and the full reports: $OUT)"
