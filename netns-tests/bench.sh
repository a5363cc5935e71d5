#!/usr/bin/env bash
# Same-run tunnel benchmark: `vpn`, wireguard-go (Debian) and boringtun-cli between two network
# namespaces joined by a veth pair, with plain veth as the ceiling. Side A (its daemon and the
# iperf3 client) is pinned to CPU 0, side B (daemon and iperf3 server) to CPU 1.
#
# Per implementation and run: iperf3 TCP 1 stream and 4 streams, iperf3 UDP with 64-byte
# payloads at unlimited rate (datagrams delivered per second and loss), and the CPU time of both
# daemons per GB carried (utime+stime from /proc/<pid>/stat around the TCP 1-stream run) and the
# local timer interrupts CPU 0 takes per second in that run (/proc/interrupts); then
# ping RTT with all tunnels up at once, in alternating bursts. Runs are interleaved across
# implementations. Medians of RUNS runs (default 3) with min..max go into docs/performance.md, section
# "## Tunnel benchmark (netns)" (replaced, the rest of the file untouched), with an SVG chart
# docs/tunnel-benchmark.svg and the same-run ratios.
#
# iperf3's TCP sockets use congestion control $CC (default cubic, the kernel's default), set
# per route in both namespaces so a socket has it from its first packet. If the host's default
# differs (this VM's is bbr, which without the fq qdisc paces every TSO frame with a timer
# interrupt), each run also measures TCP 1 stream under the host's default, reported in a table
# of its own.
#
# Usage (root): netns-tests/bench.sh [path/to/release/vpn]
#        netns-tests/bench.sh --chart   (no root: redraws docs/tunnel-benchmark.svg from the
#                                        figures already in $DOC, nothing measured)
#   CC=cubic (empty: the host's default only)
#   RUNS=3 SECS=4 (seconds per iperf3 run) RTT_ROUNDS=10 RTT_PINGS=20 RTT_INTERVAL=0.05
#   MAX_LOAD=1 LOAD_WAIT=300 (seconds to wait for a quiet machine) DOC=docs/performance.md
#   IMPLS="veth vpn wggo boringtun"
#   PIN=split (default: side A on CPU 0, side B on CPU 1) | unpinned (no affinity at all) |
#   onecore (both daemons on CPU 0, both iperf3 ends and ping on CPU 1: each daemon has one CPU,
#   so a device sizes itself for one core, while the load runs elsewhere). The non-default modes
#   write sections of their own, "## Tunnel benchmark (netns, unpinned)" and "(netns, onecore)",
#   each with its own chart.
#   BASE=main: same-run A/B against a baseline `vpn` built from that git ref in its own
#   worktree and target directory (target/bench-base/); its runs are interleaved with the
#   others and the ratios vpn/base are printed and written to the section.
#   BASE_BIN=path/to/vpn (or BASE_VPN=): the baseline arm runs that binary (nothing is built;
#   BASE, if set, is only its label).
#   BASE_ENV="VPN_X=0 ...": environment for the baseline arm's daemons only, so one binary
#   runs both arms of a runtime switch's A/B (BASE_BIN defaults to the measured binary then).
set -uo pipefail

HERE="$(cd "$(dirname "$0")" && pwd)"
ROOT="$(cd "$HERE/.." && pwd)"
# The SVG chart, from rows "label|tcp1|tcp4|tcp1host|cpugb" (medians; empty where not
# measured) on stdin. Left: TCP 1 and 4 streams (and 1 stream under the host's congestion
# control) in Gbit/s for the tunnels, on a scale of their own; plain veth, many times faster,
# would flatten them to slivers, so its figures are a line of text. Right: the daemons' CPU
# seconds per GB for the same tunnels (lower is better). $1: the host's congestion control.
chart() {
    awk -F'|' -v cc="${1:-host}" '
        function esc(t) { gsub(/&/, "\\&amp;", t); gsub(/</, "\\&lt;", t); return t }
        $1 == "plain veth" { veth1 = $2; veth4 = $3; vethh = $4; next }
        { n++; sub(/ \([^)]*\)$/, "", $1); name[n] = $1; cpu[n] = $5
          for (s = 1; s <= 3; s++) { v[n, s] = $(s + 1); if (v[n, s] != "" && v[n, s] + 0 > mx) mx = v[n, s] + 0
                                     if (v[n, s] != "") has[s] = 1 }
          if (cpu[n] != "" && cpu[n] + 0 > cmx) cmx = cpu[n] + 0 }
        END {
            split("1 stream|4 streams|1 stream, " cc, lg, "|"); split("#4472c4 #ed7d31 #a5a5a5", col, " ")
            ns = 0; for (s = 1; s <= 3; s++) if (has[s]) idx[++ns] = s
            W = 820; H = 360; L = 50; T = 66; B = 56; PR = 470; ph = H - T - B
            if (mx <= 0) mx = 1; if (cmx <= 0) cmx = 1
            # Four grid steps of 1, 2, 2.5 or 5 times a power of ten, the top above the tallest bar.
            raw = mx * 1.1 / 4; p = 1; while (p * 10 <= raw) p *= 10; while (p > raw) p /= 10
            step = (raw <= p) ? p : (raw <= 2 * p) ? 2 * p : (raw <= 2.5 * p) ? 2.5 * p : (raw <= 5 * p) ? 5 * p : 10 * p
            top = step * 4; gw = (PR - L) / (n ? n : 1)
            printf "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" font-family=\"sans-serif\" font-size=\"12\">\n", W, H
            printf "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n"
            printf "<text x=\"%d\" y=\"18\" font-size=\"14\">iperf3 TCP through the tunnel, Gbit/s (median)</text>\n", L
            if (veth1 != "") {
                t = sprintf("%.1f", veth1); if (veth4 != "") t = t sprintf(" · %.1f", veth4); if (vethh != "") t = t sprintf(" · %.1f", vethh)
                printf "<text x=\"%d\" y=\"38\" font-size=\"11\" fill=\"#555\">Reference, plain veth without a tunnel (off this scale):</text>\n", L
                printf "<text x=\"%d\" y=\"52\" font-size=\"11\" fill=\"#555\">%s Gbit/s, in the legend\x27s order</text>\n", L, t }
            printf "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"black\"/>\n", L, T, L, T + ph
            printf "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"black\"/>\n", L, T + ph, PR, T + ph
            for (k = 0; k <= 4; k++) { y = T + ph - ph * k / 4
                printf "<text x=\"%d\" y=\"%.1f\" text-anchor=\"end\">%g</text>\n", L - 5, y + 4, step * k
                printf "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"#ddd\"/>\n", L, y, PR, y }
            bw = gw * 0.75 / (ns ? ns : 1)
            for (i = 1; i <= n; i++) { x = L + (i - 1) * gw + gw * 0.125
                for (j = 1; j <= ns; j++) { s = idx[j]; if (v[i, s] == "") continue
                    h = ph * v[i, s] / top; xs = x + (j - 1) * bw
                    printf "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"%s\"/>\n", xs, T + ph - h, bw, h, col[s]
                    printf "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" font-size=\"10\">%.2f</text>\n", xs + bw / 2, T + ph - h - 3, v[i, s] }
                printf "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\" font-size=\"11\">%s</text>\n", x + ns * bw / 2, T + ph + 16, esc(name[i]) }
            for (j = 1; j <= ns; j++) { s = idx[j]
                printf "<rect x=\"%d\" y=\"%d\" width=\"12\" height=\"12\" fill=\"%s\"/><text x=\"%d\" y=\"%d\">%s</text>\n", L + (j - 1) * 120, H - 22, col[s], L + (j - 1) * 120 + 16, H - 12, lg[s] }
            # CPU per GB: one horizontal bar per tunnel.
            CL = 610; CR = W - 50; cw = CR - CL; rh = ph / (n ? n : 1)
            printf "<text x=\"%d\" y=\"18\" font-size=\"14\">CPU-s per GB, TCP 1 stream</text>\n", PR + 60
            printf "<text x=\"%d\" y=\"38\" font-size=\"11\" fill=\"#555\">both daemons\x27 CPU time; lower is better</text>\n", PR + 60
            printf "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"black\"/>\n", CL, T, CL, T + ph
            for (i = 1; i <= n; i++) { y = T + (i - 1) * rh + rh * 0.2
                printf "<text x=\"%d\" y=\"%.1f\" text-anchor=\"end\" font-size=\"11\">%s</text>\n", CL - 6, y + rh * 0.3 + 4, esc(name[i])
                if (cpu[i] == "") { printf "<text x=\"%d\" y=\"%.1f\" font-size=\"10\">not measured</text>\n", CL + 4, y + rh * 0.3 + 4; continue }
                w = cw * cpu[i] / (cmx * 1.1)
                printf "<rect x=\"%d\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"#70ad47\"/>\n", CL, y, w, rh * 0.6
                printf "<text x=\"%.1f\" y=\"%.1f\" font-size=\"10\">%.2f</text>\n", CL + w + 4, y + rh * 0.3 + 4, cpu[i] }
            print "</svg>"
        }'
}

# Chart rows from a written section (the medians in its tables) on stdin, for `--chart`.
rows_from_doc() {
    awk '
        function med(c) { gsub(/^ +| +$/, "", c); return (c ~ /^[0-9.]+/) ? c + 0 : "" }
        /^## Tunnel benchmark \(netns\)/ { in_s = 1; next }
        in_s && /^## / { in_s = 0 }
        !in_s { next }
        !/^\|/ { tbl = 0; next }
        /^\| implementation \| TCP 1 stream Gbit\/s \|/ { tbl = 1; next }
        /^\| implementation \| TCP 1 stream Gbit\/s \(/ { tbl = 2; next }
        /^\| implementation/ { tbl = 0; next }
        /^\|---/ || !tbl { next }
        { split($0, c, "|"); label = c[2]; gsub(/^ +| +$/, "", label)
          if (tbl == 1) { order[++n] = label; t1[label] = med(c[3]); t4[label] = med(c[4]); cpu[label] = med(c[8]) }
          else th[label] = med(c[3]) }
        END { for (i = 1; i <= n; i++) { l = order[i]; print l "|" t1[l] "|" t4[l] "|" th[l] "|" cpu[l] } }'
}

# `bench.sh --chart`: only the chart, redrawn from the figures already in $DOC.
if [ "${1:-}" = "--chart" ]; then
    DOC="${DOC:-$ROOT/docs/performance.md}"; SVG="$(dirname "$DOC")/tunnel-benchmark.svg"
    rows="$(rows_from_doc <"$DOC")"
    [ -n "$rows" ] || { echo "bench.sh: no \"Tunnel benchmark (netns)\" tables in $DOC" >&2; exit 1; }
    cc="$(sed -n 's/^| implementation | TCP 1 stream Gbit\/s (\([^)]*\)).*/\1/p' "$DOC" | head -1)"
    printf '%s\n' "$rows" | chart "${cc:-host}" >"$SVG"
    echo "== written: $SVG (from the figures in $DOC)"
    exit 0
fi

VPN="$(realpath "${1:-$ROOT/target/release/vpn}")"
RUNS="${RUNS:-3}"; SECS="${SECS:-4}"; RTT_ROUNDS="${RTT_ROUNDS:-10}"; RTT_PINGS="${RTT_PINGS:-20}"
RTT_INTERVAL="${RTT_INTERVAL:-0.05}"; MAX_LOAD="${MAX_LOAD:-1}"; LOAD_WAIT="${LOAD_WAIT:-300}"
PIN="${PIN:-split}"
case "$PIN" in
    split) TITLE="Tunnel benchmark (netns)"; SVG_NAME=tunnel-benchmark.svg
           CPU_DA=0; CPU_DB=1; CPU_IA=0; CPU_IB=1 ;;
    unpinned) TITLE="Tunnel benchmark (netns, unpinned)"; SVG_NAME=tunnel-benchmark-unpinned.svg
           CPU_DA=; CPU_DB=; CPU_IA=; CPU_IB= ;;
    onecore) TITLE="Tunnel benchmark (netns, onecore)"; SVG_NAME=tunnel-benchmark-onecore.svg
           CPU_DA=0; CPU_DB=0; CPU_IA=1; CPU_IB=1 ;;
    *) echo "bench.sh: PIN=$PIN is not split, unpinned or onecore" >&2; exit 2 ;;
esac
# `taskset -c N` for a CPU, nothing for none.
on_cpu() { [ -n "$1" ] && echo "taskset -c $1"; }
DOC="${DOC:-$ROOT/docs/performance.md}"; SVG="$(dirname "$DOC")/$SVG_NAME"
IMPLS="${IMPLS:-veth vpn wggo boringtun}"
HOST_CC="$(sysctl -n net.ipv4.tcp_congestion_control 2>/dev/null || echo unknown)"
CC="${CC-cubic}"
[ "$CC" = "$HOST_CC" ] && CC=""
# BENCH_NOTES=file: text appended to the section (none by default; the run log lives in
# docs/history.md).
BENCH_NOTES="${BENCH_NOTES:-}"
# shellcheck source=lib.sh
source "$HERE/lib.sh"
trap lab_cleanup EXIT
trap 'exit 130' INT TERM
need_root
[ -x "$VPN" ] || { echo "bench.sh: $VPN not found (cargo build --release -p vpn-cli)" >&2; exit 1; }
BASE="${BASE:-}"; BASE_BIN="${BASE_BIN:-${BASE_VPN:-}}"; export BASE_ENV="${BASE_ENV:-}"
if [ -n "$BASE_BIN" ] || { [ -z "$BASE" ] && [ -n "$BASE_ENV" ]; }; then
    # A prebuilt baseline and/or the same binary under other switches: no build.
    BASE_VPN="$(realpath "${BASE_BIN:-$VPN}")"; export BASE_VPN
    [ -x "$BASE_VPN" ] || { echo "bench.sh: $BASE_VPN not found" >&2; exit 1; }
    [ -n "$BASE" ] || BASE="${BASE_BIN:+${BASE_VPN#"$ROOT"/}}${BASE_BIN:+${BASE_ENV:+ }}$BASE_ENV"
    BASE_REV="${BASE_BIN:+prebuilt}"; BASE_REV="${BASE_REV:-same binary}"
    case " $IMPLS " in *" base "*) ;; *) IMPLS="${IMPLS/vpn/vpn base}" ;; esac
elif [ -n "$BASE" ]; then
    # The baseline: the ref checked out in a worktree of its own, built into a target
    # directory of its own (nothing of this tree's build is reused or disturbed).
    BASE_TREE="$ROOT/target/bench-base/tree"
    BASE_REV="$(git -C "$ROOT" rev-parse --short "$BASE^{commit}")" || { echo "bench.sh: unknown ref $BASE" >&2; exit 1; }
    if [ -d "$BASE_TREE" ]; then
        git -C "$BASE_TREE" checkout -q --detach "$BASE_REV"
    else
        git -C "$ROOT" worktree add -q --detach "$BASE_TREE" "$BASE_REV"
    fi
    echo "== building the baseline $BASE ($BASE_REV)"
    (cd "$BASE_TREE" && cargo build -q --release -p vpn-cli --target-dir "$ROOT/target/bench-base/target") ||
        { echo "bench.sh: baseline build failed" >&2; exit 1; }
    export BASE_VPN="$ROOT/target/bench-base/target/release/vpn"
    case " $IMPLS " in *" base "*) ;; *) IMPLS="${IMPLS/vpn/vpn base}" ;; esac
fi
ensure_tools
[ "$(nproc)" -ge 2 ] || { echo "bench.sh: needs 2 CPUs to pin the two sides" >&2; exit 1; }
HZ="$(getconf CLK_TCK)"
RES="$STATE/results"; : >"$RES"

load1() { cut -d' ' -f1 /proc/loadavg; }
waited=0
while awk -v l="$(load1)" -v m="$MAX_LOAD" 'BEGIN { exit !(l >= m) }' && [ "$waited" -lt "$LOAD_WAIT" ]; do
    [ "$waited" -eq 0 ] && echo "== waiting for load < $MAX_LOAD (now $(load1)), up to ${LOAD_WAIT}s"
    sleep 10; waited=$((waited + 10))
done
LOAD_START="$(cut -d' ' -f1-3 /proc/loadavg)"
echo "== load average at start: $LOAD_START"
label() { case "$1" in veth) echo "plain veth" ;; vpn) echo "vpn" ;; base) echo "vpn $BASE ($BASE_REV)" ;; wggo) echo "wireguard-go" ;; boringtun) echo "boringtun-cli" ;; esac; }
# impl metric value [run]: RUN, set by the run loop, pairs an A/B's arms run by run.
record() { echo "$1 $2 $3 ${RUN:-}" >>"$RES"; }

# median, min, max of a metric: "med min max" (empty if no values).
stat() {
    awk -v i="$1" -v m="$2" '$1 == i && $2 == m && $3 != "nan" { print $3 }' "$RES" | sort -g |
        awk '{ v[NR] = $1 } END { if (NR == 0) exit; med = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2; print med, v[1], v[NR] }'
}
cell() {
    local s; s="$(stat "$1" "$2")"
    [ -n "$s" ] || { echo "–"; return; }
    read -r med lo hi <<<"$s"
    awk -v a="$med" -v b="$lo" -v c="$hi" -v f="$3" 'BEGIN { printf f " (" f ".." f ")", a, b, c }'
}
med() { stat "$1" "$2" | cut -d' ' -f1; }
# median, 10th and 90th percentile and mean of a metric's samples: "med p10 p90 mean".
pct() {
    awk -v i="$1" -v m="$2" '$1 == i && $2 == m && $3 != "nan" { print $3 }' "$RES" | sort -g |
        awk '{ v[NR] = $1; s += $1 } END { if (NR == 0) exit; printf "%.3f %.3f %.3f %.3f\n", v[int((NR + 1) / 2)], v[int(NR * 0.1) + 1], v[int(NR * 0.9) + (NR * 0.9 == int(NR * 0.9) ? 0 : 1)], s / NR }'
}
rtt_cell() {
    local s; s="$(pct "$1" rtt)"
    [ -n "$s" ] || { echo "–"; return; }
    read -r m lo hi mean <<<"$s"
    echo "$m ($lo..$hi; mean $mean)"
}
# The A/B's ratios $1/$2 of metric $3 paired by run (both arms ran back to back, so a pair
# shares the machine's state): "median geometric-mean standard-error pairs higher", higher
# counting the pairs where $1's figure is the larger. The medians' ratio alone can swing by
# 10-20 % between A/Bs of one tree on this VM, whose runs fall into a fast and a slow mode
# that takes either arm; the pairs and their spread say how far a ratio can be trusted.
paired() {
    awk -v a="$1" -v b="$2" -v m="$3" '
        $2 == m && $3 != "nan" && $4 != "" { if ($1 == a) x[$4] = $3; else if ($1 == b) y[$4] = $3 }
        END {
            for (r in x) if ((r in y) && x[r] > 0 && y[r] > 0) { q = x[r] / y[r]; v[++n] = q; s += log(q); up += q > 1 }
            if (n == 0) exit
            for (i = 2; i <= n; i++) { t = v[i]; for (j = i - 1; j >= 1 && v[j] > t; j--) v[j + 1] = v[j]; v[j + 1] = t }
            med = (n % 2) ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2
            g = s / n; for (i = 1; i <= n; i++) d += (log(v[i]) - g) ^ 2
            se = (n > 1) ? exp(g) * sqrt(d / (n - 1) / n) : 0
            printf "%.3f %.3f %.3f %d %d\n", med, exp(g), se, n, up
        }' "$RES"
}
# paired()'s figures as text: "0.98× (geometric mean 0.97× ± 0.03, higher in 7 of 16)".
paired_cell() {
    local s; s="$(paired "$@")"
    [ -n "$s" ] || { echo "n/a"; return; }
    read -r med g se n up <<<"$s"
    echo "${med}× (geometric mean ${g}× ± ${se}, higher in $up of $n)"
}
ratio() {
    local a b; a="$(med "$1" "$3")"; b="$(med "$2" "$3")"
    awk -v a="${a:-0}" -v b="${b:-0}" 'BEGIN { if (a > 0 && b > 0) printf "%.2f×", a / b; else print "n/a" }'
}

# Interrupts of one kind (a /proc/interrupts row: LOC, CAL, ...) taken so far by one CPU.
irqs() { awk -v r="$1:" -v c="$2" '$1 == r { print $(c + 2); exit }' /proc/interrupts; }

# The flattened iperf3 JSON's "end" object.
json_end() { tr -d ' \t\n' | grep -o '"end":{.*'; }
num() { grep -o "\"$1\":[0-9.e+-]*" | head -1 | cut -d: -f2; }
# A field of the receiver's TCP summary in json_end's output.
received() { grep -o '"sum_received":{[^}]*' | num "$1"; }

# Brings up the pair for one implementation ("veth": no tunnel) and sets DST, the address to
# reach side B at. Namespaces are named after $1 so several pairs can be up at once.
bench_pair() {
    local impl="$1" name="$2"
    make_pair "$name"
    if [ "$impl" = veth ]; then
        DST=198.18.0.2; SRC=198.18.0.1; DEVA="$VA"; DEVB="$VB"; PIDA=""; PIDB=""
    else
        CPU_A="$CPU_DA" CPU_B="$CPU_DB" tunnel "$impl" "$impl" 4
        DST=100.64.0.2; SRC=100.64.0.1; DEVA="$WA"; DEVB="$WB"
        n "$A" timeout 10 ping -c 3 -i 0.2 -W 2 "$DST" >/dev/null || { echo "$impl: tunnel did not come up" >&2; return 1; }
    fi
}

# Makes TCP between the pair's sides use congestion control $1: a host route with `congctl`
# on both sides, which a socket takes at connect (or accept), before its first packet. (`iperf3
# -C` cannot do this: iperf3 3.12 sets TCP_CONGESTION after connect, and BBR's pacing, set when
# the connection was established, stays on the socket under the new algorithm.)
use_cc() {
    n "$A" ip route add "$DST/32" dev "$DEVA" congctl "$1" &&
        n "$B" ip route add "$SRC/32" dev "$DEVB" congctl "$1"
}

# One run of the throughput metrics for one implementation, on a pair of its own.
bench_run() {
    local impl="$1" run="$2" j end bps
    bench_pair "$impl" "b$run${impl:0:2}" || { ns_del "$A" "$B"; return 1; }
    # shellcheck disable=SC2046 # on_cpu's words are the command prefix
    timeout 600 ip netns exec "$(ns "$B")" $(on_cpu "$CPU_IB") iperf3 -s >/dev/null 2>&1 &
    track_pid $!
    wait_for "n $B ss -ltn | grep -q ':5201 '" 5
    # shellcheck disable=SC2046
    cli() { timeout $((SECS + 20)) ip netns exec "$(ns "$A")" $(on_cpu "$CPU_IA") iperf3 --json -c "$DST" -t "$SECS" "$@"; }
    # TCP 1 stream with the daemons' CPU time and CPU 0's timer interrupts; metric names end
    # in $1.
    tcp1() {
        local t0=0 t1=0 i0 i1 w0 w1 bytes
        [ -n "$PIDA" ] && t0=$(( $(cpu_ticks "$PIDA") + $(cpu_ticks "$PIDB") ))
        i0="$(irqs LOC 0)"; w0="$(date +%s.%N)"
        j="$(cli)"
        i1="$(irqs LOC 0)"; w1="$(date +%s.%N)"
        end="$(echo "$j" | json_end)"
        [ -n "$PIDA" ] && t1=$(( $(cpu_ticks "$PIDA") + $(cpu_ticks "$PIDB") ))
        bps="$(echo "$end" | received bits_per_second)"
        # nan (left out of the medians) without a LOC row (not x86) or a result.
        record "$impl" "irq0$1" "$(awk -v a="$i0" -v b="$i1" -v w0="$w0" -v w1="$w1" -v ok="${bps:-}" 'BEGIN { if (a == "" || b == "" || ok == "") print "nan"; else printf "%.0f", (b - a) / (w1 - w0) }')"
        bytes="$(echo "$end" | received bytes)"
        record "$impl" "tcp1$1" "$(awk -v b="${bps:-0}" 'BEGIN { printf "%.3f", b / 1e9 }')"
        [ -n "$PIDA" ] && record "$impl" "cpugb$1" "$(awk -v t=$((t1 - t0)) -v hz="$HZ" -v b="${bytes:-0}" 'BEGIN { if (b > 0) printf "%.3f", (t / hz) / (b / 1e9); else print "nan" }')"
    }
    if [ -n "$CC" ]; then
        tcp1 host
        use_cc "$CC" || { echo "$impl: could not set congestion control $CC" >&2; ns_del "$A" "$B"; return 1; }
    fi
    tcp1 ""
    j="$(cli -P 4)"; end="$(echo "$j" | json_end)"
    bps="$(echo "$end" | received bits_per_second)"
    record "$impl" tcp4 "$(awk -v b="${bps:-0}" 'BEGIN { printf "%.3f", b / 1e9 }')"
    j="$(cli -u -b 0 -l 64)"; end="$(echo "$j" | json_end)"
    local s pk lost secs
    s="$(echo "$end" | grep -o '"sum":{[^}]*' | head -1)"
    pk="$(echo "$s" | num packets)"; lost="$(echo "$s" | num lost_packets)"; secs="$(echo "$s" | num seconds)"
    record "$impl" udppps "$(awk -v p="${pk:-0}" -v l="${lost:-0}" -v s="${secs:-1}" 'BEGIN { printf "%.0f", (p - l) / s }')"
    record "$impl" udploss "$(awk -v p="${pk:-0}" -v l="${lost:-0}" 'BEGIN { if (p > 0) printf "%.1f", 100 * l / p; else print "nan" }')"
    # The metrics this run recorded, for the progress line: the TCP 1-stream ones (three with
    # daemons, two for plain veth) once or twice, then TCP 4 streams and UDP's two.
    local per=3 metrics; [ -n "$PIDA" ] || per=2
    metrics=$((per + 3)); [ -n "$CC" ] && metrics=$((metrics + per))
    echo "   $(label "$impl") run $run: $(grep "^$impl " "$RES" | tail -n "$metrics" | awk '{ printf "%s=%s ", $2, $3 }')"
    ns_del "$A" "$B"
}

# Runs are interleaved (run 1 of every implementation, then run 2, ...) so that a change in
# the machine's speed during the benchmark touches every implementation alike; every other run
# goes through them backwards, so that none always runs first after the pause between runs.
for run in $(seq "$RUNS"); do
    order="$IMPLS"
    [ $((run % 2)) -eq 0 ] && order="$(echo "$IMPLS" | tr ' ' '\n' | tac | tr '\n' ' ')"
    for impl in $order; do
        echo "== $(label "$impl") run $run"
        RUN="$run" bench_run "$impl" "$run" || echo "== $(label "$impl") run $run failed"
    done
done

# RTT: every implementation's tunnel up at once (all idle but the one being pinged), then
# RTT_ROUNDS rounds of one burst of RTT_PINGS pings per implementation, ping pinned with side A.
# Single pings on this VM vary far more between minutes than between implementations, so the
# bursts alternate and each implementation's figure pools its pings from across the whole phase.
declare -A RTT_NS RTT_DST
k=0
for impl in $IMPLS; do
    k=$((k + 1))
    if bench_pair "$impl" "r$k"; then RTT_NS[$impl]="$A"; RTT_DST[$impl]="$DST"; fi
done
echo "== RTT: $RTT_ROUNDS rounds of $RTT_PINGS pings at ${RTT_INTERVAL}s per implementation, interleaved"
# The order rotates every round and runs backwards every other round: a burst's figures depend
# on what ran just before it (in probes with two copies of one binary, the one pinged first in
# each round measured up to 1.5x faster), so every implementation leads and follows each of the
# others in turn.
read -ra RTT_ORDER <<<"$IMPLS"
nimpl=${#RTT_ORDER[@]}
for round in $(seq "$RTT_ROUNDS"); do
    for ((j = 0; j < nimpl; j++)); do
        # Rounds 1, 2: start at the first, forwards then backwards; 3, 4: at the second; ...
        off=$(( (round - 1) / 2 ))
        if [ $((round % 2)) -eq 1 ]; then k=$(( (off + j) % nimpl )); else k=$(( (off + nimpl - j) % nimpl )); fi
        impl="${RTT_ORDER[$k]}"
        [ -n "${RTT_NS[$impl]:-}" ] || continue
        # shellcheck disable=SC2046
        n "${RTT_NS[$impl]}" $(on_cpu "$CPU_IA") timeout 30 ping -c "$RTT_PINGS" -i "$RTT_INTERVAL" -W 2 "${RTT_DST[$impl]}" |
            grep -o 'time=[0-9.]*' | cut -d= -f2 | while read -r t; do record "$impl" rtt "$t"; done
    done
done
for impl in $IMPLS; do echo "   $(label "$impl") RTT median/p10/p90/mean: $(pct "$impl" rtt) ms"; done
LOAD_END="$(cut -d' ' -f1-3 /proc/loadavg)"

# How the run was pinned, for the section's first sentence.
pin_text() {
    case "$PIN" in
        split) echo "side A (daemon and iperf3 client) pinned to CPU 0, side B (daemon and iperf3 server) to CPU 1" ;;
        unpinned) echo "nothing pinned: daemons, iperf3 and ping go wherever the scheduler puts them" ;;
        onecore) echo "both daemons pinned to CPU 0 (each device sees one CPU and sizes itself for it), both iperf3 ends and ping to CPU 1" ;;
    esac
}

section() {
    echo "## $TITLE"
    echo
    echo "\`make bench\` → \`netns-tests/bench.sh\` (PIN=$PIN): two namespaces joined by a veth pair (MTU 1500), a"
    echo "tunnel between two daemons of the same implementation (tunnel MTU 1420), $(pin_text). Plain veth is the"
    echo "ceiling (no tunnel). Medians of $RUNS runs, min..max in brackets; ${SECS} s per iperf3 run."
    echo "CPU-s/GB: utime+stime of both daemons during the TCP 1-stream run per 10⁹ bytes received."
    echo "UDP: iperf3 \`-u -b 0 -l 64\` (64-byte payloads, unlimited rate), datagrams delivered per second."
    echo "RTT: every implementation's tunnel up at once, $RTT_ROUNDS rounds of \`ping -c $RTT_PINGS -i $RTT_INTERVAL\` per"
    echo "implementation, interleaved in an order that rotates (and reverses) every round, ping $([ -n "$CPU_IA" ] && echo "pinned to CPU $CPU_IA" || echo "unpinned") with"
    echo "iperf3's client; median of all $((RTT_ROUNDS * RTT_PINGS)) pings with the 10th..90th percentile and the mean in"
    echo "brackets. Timer irq/s: local timer interrupts CPU 0 took per second during the TCP 1-stream run."
    if [ -n "$CC" ]; then
        echo "TCP: iperf3's sockets use $CC, the kernel's default congestion control (per-route \`congctl\` in"
        echo "both namespaces). This host's default is $HOST_CC; TCP 1 stream under it is in the second table."
    else
        echo "TCP: iperf3's sockets use the host's default congestion control, $HOST_CC."
    fi
    echo
    echo "Run $(date -u "+%Y-%m-%d %H:%M UTC"), vpn binary ${VPN#"$ROOT"/}, kernel $(uname -r), load average at start"
    echo "$LOAD_START, at end $LOAD_END (1/5/15 min; other engineers compile on this machine at times)."
    echo "wireguard-go $(wireguard-go --version 2>/dev/null | head -1 | awk '{ print $2 }') (Debian), boringtun-cli $("$BORINGTUN" --version 2>/dev/null | awk '{ print $2 }') (default 4 threads)."
    echo "Debian's wireguard-go predates wireguard-go's batching and GSO/GRO offload work (2023): ratios against it do not describe a current wireguard-go build."
    echo
    echo "| implementation | TCP 1 stream Gbit/s | TCP 4 streams Gbit/s | UDP 64 B kpps delivered | UDP loss % | RTT ms | CPU-s/GB | timer irq/s on CPU 0 (TCP 1) |"
    echo "|---|---:|---:|---:|---:|---:|---:|---:|"
    for impl in $IMPLS; do
        local pps; pps="$(stat "$impl" udppps | awk '{ printf "%.0f (%.0f..%.0f)", $1 / 1000, $2 / 1000, $3 / 1000 }')"
        echo "| $(label "$impl") | $(cell "$impl" tcp1 %.2f) | $(cell "$impl" tcp4 %.2f) | ${pps:-–} | $(cell "$impl" udploss %.1f) | $(rtt_cell "$impl") | $(cell "$impl" cpugb %.2f) | $(cell "$impl" irq0 %.0f) |"
    done
    echo
    if [ -n "$CC" ]; then
        echo "TCP 1 stream under the host's default congestion control, $HOST_CC, in the same runs (before"
        echo "\`congctl\` was set). Without the \`fq\` qdisc (this kernel has none) BBR paces inside TCP:"
        echo "a high-resolution timer per TSO frame the iperf3 client sends, which is most of the timer"
        echo "interrupts below. Each costs the sending CPU time whichever implementation runs (17–25 µs"
        echo "on the VM of 2026-12-04, measured separately: \`docs/design-notes.md\`, \"The sending CPU's"
        echo "hidden tax\"), so the tax grows with the rate."
        echo
        echo "| implementation | TCP 1 stream Gbit/s ($HOST_CC) | CPU-s/GB | timer irq/s on CPU 0 |"
        echo "|---|---:|---:|---:|"
        for impl in $IMPLS; do
            echo "| $(label "$impl") | $(cell "$impl" tcp1host %.2f) | $(cell "$impl" cpugbhost %.2f) | $(cell "$impl" irq0host %.0f) |"
        done
    fi
    echo
    echo "![TCP throughput and CPU per GB per tunnel, plain veth as a reference figure]($SVG_NAME)"
    echo
    echo "Same-run ratios (medians):"
    echo "- TCP 1 stream: vpn/boringtun-cli $(ratio vpn boringtun tcp1), vpn/wireguard-go $(ratio vpn wggo tcp1) (targets ≥ 3.5× and ≥ 6×);"
    echo "  vpn reaches $(ratio vpn veth tcp1) of plain veth."
    [ -n "$CC" ] && echo "- TCP 1 stream under $HOST_CC: vpn/boringtun-cli $(ratio vpn boringtun tcp1host), vpn/wireguard-go $(ratio vpn wggo tcp1host); CPU-s/GB vpn/boringtun-cli $(ratio vpn boringtun cpugbhost)."
    echo "- TCP 4 streams: vpn/boringtun-cli $(ratio vpn boringtun tcp4), vpn/wireguard-go $(ratio vpn wggo tcp4)."
    echo "- CPU-s/GB: vpn/boringtun-cli $(ratio vpn boringtun cpugb), vpn/wireguard-go $(ratio vpn wggo cpugb) (target ≤ 0.3× boringtun-cli)."
    echo "- RTT (median; mean): vpn $(pct vpn rtt | awk '{ print $1 "; " $4 }') ms, boringtun-cli $(pct boringtun rtt | awk '{ print $1 "; " $4 }') ms,"
    echo "  wireguard-go $(pct wggo rtt | awk '{ print $1 "; " $4 }') ms; vpn/boringtun-cli $(pct vpn rtt | awk -v b="$(pct boringtun rtt | cut -d' ' -f1)" '{ if (b > 0) printf "%.2f×", $1 / b; else print "n/a" }') (target ≤ 1)."
    echo "- UDP 64 B delivered: vpn/boringtun-cli $(ratio vpn boringtun udppps), vpn/wireguard-go $(ratio vpn wggo udppps)."
    if [ -n "$BASE" ]; then
        echo "- A/B against $BASE ($BASE_REV), same run: TCP 1 stream $(ratio vpn base tcp1), TCP 4 streams $(ratio vpn base tcp4),"
        echo "  UDP 64 B delivered $(ratio vpn base udppps), CPU-s/GB $(ratio vpn base cpugb) (lower is better),"
        echo "  RTT median vpn $(pct vpn rtt | cut -d' ' -f1) ms, base $(pct base rtt | cut -d' ' -f1) ms."
        echo "- The same A/B paired by run (vpn/base of each run's two arms, which ran back to back: the"
        echo "  median of the $RUNS ratios, their geometric mean ± its standard error, and in how many runs"
        echo "  vpn's figure was the higher):"
        echo "  TCP 1 stream $(paired_cell vpn base tcp1); TCP 4 streams $(paired_cell vpn base tcp4);"
        echo "  UDP 64 B delivered $(paired_cell vpn base udppps); CPU-s/GB $(paired_cell vpn base cpugb)."
    fi
    if [ -n "${BENCH_NOTES:-}" ] && [ -f "$BENCH_NOTES" ]; then echo; cat "$BENCH_NOTES"; fi
}

for impl in $IMPLS; do
    echo "$(label "$impl")|$(med "$impl" tcp1)|$(med "$impl" tcp4)|$(med "$impl" tcp1host)|$(med "$impl" cpugb)"
done | chart "$HOST_CC" >"$SVG"
new="$STATE/section.md"
section >"$new"
cat "$new"
# Replace our section (from its heading to the next "## " heading) or append it.
if grep -qxF "## $TITLE" "$DOC" 2>/dev/null; then
    awk -v f="$new" -v h="## $TITLE" '
        $0 == h { while ((getline l < f) > 0) print l; skip = 1; next }
        skip && /^## / { skip = 0; print ""; }
        !skip { print }' "$DOC" >"$STATE/doc.md"
else
    { cat "$DOC" 2>/dev/null; echo; cat "$new"; } >"$STATE/doc.md"
fi
cat "$STATE/doc.md" >"$DOC"
echo "== written: $DOC (section \"$TITLE\"), $SVG"
