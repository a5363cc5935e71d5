#!/usr/bin/env bash
# Same-run benchmark of the tunnel without a TUN: `vpn forward` (the userspace stack) against
# onetun 0.3.10 (boringtun + smoltcp), with the TUN tunnel (a `vpn` daemon and the kernel's TCP)
# between the same namespaces as the reference. Namespace B runs one `vpn` daemon with a TUN,
# an iperf3 server and a TCP echo server on 100.64.0.2; namespace A runs, one arm at a time:
#   tun      a `vpn` daemon with a TUN (tunnel address 100.64.0.1); iperf3 -c 100.64.0.2
#   forward  `vpn forward CONF -L 127.0.0.1:15201:100.64.0.2:5201` (tunnel address .3, as uid
#            65534); iperf3 -c 127.0.0.1 -p 15201
#   onetun   `onetun 127.0.0.1:15201:100.64.0.2:5201` (tunnel address .4); the same iperf3
# A's side (client and tunnel process) is pinned to CPU 0, B's to CPU 1.
#
# Per arm and run: TCP 1 stream and 4 streams each way, one-byte TCP round trips (median of
# RTT_N, through the same path to B's echo server), and the CPU seconds per GB of A's tunnel
# process around each 1-stream run (utime+stime; for the TUN arm that is the daemon only, the
# kernel's TCP work is not in it). B to A is iperf3 -R. A to B is counted where it arrives: B's
# sink counts what reached it in SECS seconds from the first byte (netstack_peer.py tcp-send and
# tcp-sink), because a forwarder that buffers the sender's data without bound (onetun does)
# makes iperf3's sender finish long before the data does, and its own figure meaningless. Runs are interleaved; medians of
# RUNS runs go to docs/performance.md, section "## Netstack benchmark (netns)" (replaced).
#
# Usage (root): netns-tests/bench_netstack.sh [path/to/release/vpn]
#   RUNS=3 SECS=5 RTT_N=2000 ONETUN=path (default: cargo install --locked onetun 0.3.10 into
#   target/tools) DOC=docs/performance.md ARMS="tun forward onetun"
#   PROFILE=dir: perf record -g of A's tunnel process during each 1-stream run, to
#   dir/<arm>-<up|down>-<run>.perf (nothing is written to DOC then)
set -uo pipefail

HERE="$(cd "$(dirname "$0")" && pwd)"
ROOT="$(cd "$HERE/.." && pwd)"
VPN="$(realpath "${1:-$ROOT/target/release/vpn}")"
RUNS="${RUNS:-3}"; SECS="${SECS:-5}"; RTT_N="${RTT_N:-2000}"
DOC="${DOC:-$ROOT/docs/performance.md}"
ARMS=(${ARMS:-tun forward onetun})
SCENARIO_TIMEOUT=600
# shellcheck source=lib.sh
source "$HERE/lib.sh"
trap lab_cleanup EXIT
trap 'exit 130' INT TERM
need_root
[ -x "$VPN" ] || { echo "bench_netstack.sh: $VPN not found (cargo build --release -p vpn-cli)" >&2; exit 1; }
ensure_tools
ONETUN="${ONETUN:-$TOOLS_ROOT/bin/onetun}"
if [ ! -x "$ONETUN" ]; then
    echo "== installing onetun 0.3.10 into $TOOLS_ROOT (cargo install --locked)"
    cargo install --locked --root "$TOOLS_ROOT" onetun --version 0.3.10 >/dev/null 2>&1 ||
        { echo "bench_netstack.sh: onetun could not be installed" >&2; exit 1; }
fi
ONETUN_VERSION="$("$ONETUN" --version 2>/dev/null | head -1)"
NSPEER="$HERE/netstack_peer.py"

# --- the lab -------------------------------------------------------------------------------
make_pair nb
WB="$(ifname "$B")"; WA="$(ifname "$A")"
KB="$(wg genkey)"; PB="$(pubkey "$KB")"
KT="$(wg genkey)"; KF="$(wg genkey)"; KO="$(wg genkey)"
start_daemon vpn "$B" "$WB" 1; PIDB=$DAEMON_PID
n "$B" wg set "$WB" private-key <(echo "$KB") listen-port 51820 \
    peer "$(pubkey "$KT")" allowed-ips 100.64.0.1/32 \
    peer "$(pubkey "$KF")" allowed-ips 100.64.0.3/32 \
    peer "$(pubkey "$KO")" allowed-ips 100.64.0.4/32
tunnel_addrs "$B" 2 "$WB"
(exec timeout 3600 ip netns exec "$(ns "$B")" taskset -c 1 iperf3 -s >/dev/null 2>&1) & track_pid $!
(exec timeout 3600 ip netns exec "$(ns "$B")" taskset -c 1 "$PY" "$NSPEER" tcp-echo 100.64.0.2 7000 >/dev/null 2>&1) & track_pid $!
(exec timeout 3600 ip netns exec "$(ns "$B")" taskset -c 1 "$PY" "$NSPEER" tcp-sink 100.64.0.2 7001 "$SECS" "$STATE/sink.log" >/dev/null 2>&1) & track_pid $!
wait_for "n $B ss -ltn | grep -q ':5201 '" 10 || { echo "no iperf3 server" >&2; exit 1; }

nobody_home; HOME_N="$NOBODY_HOME"
cat >"$HOME_N/forward.conf" <<EOF
[Interface]
PrivateKey = $KF
Address = 100.64.0.3/32
MTU = 1420

[Peer]
PublicKey = $PB
Endpoint = 198.18.0.2:51820
AllowedIPs = 100.64.0.0/24
EOF
chown -R 65534:65534 "$HOME_N"; chmod 600 "$HOME_N/forward.conf"

# arm_up <arm>: starts A's tunnel for the arm; sets ARM_PID (the process whose CPU is counted),
# DST and PORT (where iperf3 connects), SINK_PORT (B's sink by the same way) and RTT_DST/RTT_PORT
# (the echo server's way).
arm_up() {
    case "$1" in
        tun)
            start_daemon vpn "$A" "$WA" 0; ARM_PID=$DAEMON_PID
            n "$A" wg set "$WA" private-key <(echo "$KT") peer "$PB" endpoint 198.18.0.2:51820 \
                allowed-ips 100.64.0.0/24
            n "$A" ip addr add 100.64.0.1/24 dev "$WA"; n "$A" ip link set "$WA" mtu 1420 up
            DST=100.64.0.2; PORT=5201; SINK_PORT=7001; RTT_DST=100.64.0.2; RTT_PORT=7000 ;;
        forward)
            (exec ip netns exec "$(ns "$A")" taskset -c 0 "${NOBODY[@]}" env ${FORWARD_ENV:-} "$HOME_N/vpn" forward \
                "$HOME_N/forward.conf" -L 127.0.0.1:15201:100.64.0.2:5201 \
                -L 127.0.0.1:17000:100.64.0.2:7000 -L 127.0.0.1:17001:100.64.0.2:7001 \
                >"$STATE/forward.log" 2>&1) &
            ARM_PID=$!; track_pid "$ARM_PID"
            DST=127.0.0.1; PORT=15201; SINK_PORT=17001; RTT_DST=127.0.0.1; RTT_PORT=17000 ;;
        onetun)
            (exec ip netns exec "$(ns "$A")" taskset -c 0 "${NOBODY[@]}" "$ONETUN" --log error \
                127.0.0.1:15201:100.64.0.2:5201 127.0.0.1:17000:100.64.0.2:7000 \
                127.0.0.1:17001:100.64.0.2:7001 \
                --endpoint-addr 198.18.0.2:51820 --endpoint-public-key "$PB" \
                --private-key "$KO" --source-peer-ip 100.64.0.4 --keep-alive 10 \
                >"$STATE/onetun.log" 2>&1) &
            ARM_PID=$!; track_pid "$ARM_PID"
            DST=127.0.0.1; PORT=15201; SINK_PORT=17001; RTT_DST=127.0.0.1; RTT_PORT=17000 ;;
    esac
    # Ready when a round trip to the echo server goes through.
    wait_for "n $A timeout 5 $PY $NSPEER tcp-rtt $RTT_DST $RTT_PORT 3" 30 ||
        { echo "arm $1 did not come up" >&2; tail -5 "$STATE/$1.log" 2>/dev/null >&2; return 1; }
}

arm_down() {
    kill "$ARM_PID" 2>/dev/null; wait "$ARM_PID" 2>/dev/null
    # SHOW_LOGS=1: what the tunnel process said (vpn forward logs its packet counts on exit).
    [ -n "${SHOW_LOGS:-}" ] && [ -f "$STATE/$1.log" ] && tail -2 "$STATE/$1.log" | sed 's/^/   | /'
    [ "$1" = tun ] && { n "$A" ip link del "$WA" 2>/dev/null; rm -f "$SOCK_DIR/$WA.sock"; }
    sleep 0.5
}

json_bps() { tr -d ' \t\n' | grep -o '"sum_received":{[^}]*' | grep -o '"bits_per_second":[0-9.e+]*' | head -1 | cut -d: -f2; }
client() { timeout $((SECS + 30)) ip netns exec "$(ns "$A")" taskset -c 0 iperf3 --json -c "$DST" -p "$PORT" -t "$SECS" "$@"; }

RES="$STATE/results"; : >"$RES"
record() { echo "$1 $2 $3" >>"$RES"; }

# CPU seconds per GB of A's tunnel process between tick counts $1 and $2 for $3 bit/s.
cpu_per_gb() {
    awk -v t=$(($2 - $1)) -v hz="$(getconf CLK_TCK)" -v b="${3:-0}" -v s="$SECS" \
        'BEGIN { if (b > 0) printf "%.3f", t / hz / (b * s / 8 / 1e9) }'
}
# A to B: what B's sink received, in bit/s, over K streams (the sink logs each stream SECS
# seconds after its first byte, whatever the sender or the tunnel does after that). A stream of
# which no byte reached the sink while the sender sent and held the connection open (SECS + 2
# seconds more) counts as 0: onetun sometimes wedges before it forwards anything.
send() {
    : >"$STATE/sink.log"
    timeout $((SECS * 2 + 30)) ip netns exec "$(ns "$A")" taskset -c 0 "$PY" "$NSPEER" tcp-send "$DST" "$SINK_PORT" "$SECS" "$1"
    wait_for "[ \$(wc -l <$STATE/sink.log) -ge $1 ]" $((SECS + 2))
    local got; got="$(wc -l <"$STATE/sink.log")"
    while [ "$got" -lt "$1" ]; do echo "0 $SECS" >>"$STATE/sink.log"; got=$((got + 1)); done
    "$PY" "$NSPEER" sink-rate "$STATE/sink.log" "$1"
}

# Each measurement gets a freshly started tunnel process: onetun wedges after a saturating run
# (its event bus overflows: "Failed to read event bus"), and one arm's state must not carry
# over into the next figure.
# profile <name>: perf record of $ARM_PID in the background while the next measurement runs.
profile() {
    [ -n "${PROFILE:-}" ] || return 0
    mkdir -p "$PROFILE"
    perf record -g -o "$PROFILE/$1-$run.perf" -p "$ARM_PID" -- sleep "$SECS" >/dev/null 2>&1 &
}

bench_arm() {
    local arm="$1" t0 t1 bps
    arm_up "$arm" || return 1
    profile "$arm-up"
    t0="$(cpu_ticks "$ARM_PID")"; bps="$(send 1)"; t1="$(cpu_ticks "$ARM_PID")"
    record "$arm" up1 "${bps:-}"; record "$arm" cpuup "$(cpu_per_gb "$t0" "$t1" "$bps")"
    arm_down "$arm"; arm_up "$arm" || return 1
    record "$arm" up4 "$(send 4)"
    arm_down "$arm"; arm_up "$arm" || return 1
    profile "$arm-down"
    t0="$(cpu_ticks "$ARM_PID")"; bps="$(client -R | json_bps)"; t1="$(cpu_ticks "$ARM_PID")"
    record "$arm" down1 "${bps:-}"; record "$arm" cpudown "$(cpu_per_gb "$t0" "$t1" "$bps")"
    arm_down "$arm"; arm_up "$arm" || return 1
    record "$arm" down4 "$(client -R -P 4 | json_bps)"
    arm_down "$arm"; arm_up "$arm" || return 1
    record "$arm" rtt "$(n "$A" timeout 120 taskset -c 0 "$PY" "$NSPEER" tcp-rtt "$RTT_DST" "$RTT_PORT" "$RTT_N")"
    arm_down "$arm"
}

for ((run = 1; run <= RUNS; run++)); do
    for arm in "${ARMS[@]}"; do
        echo "== run $run: $arm"
        bench_arm "$arm" || echo "   $arm failed"
        # A figure missing: show what the tunnel process said.
        awk -v a="$arm" '$1 == a && NF < 3 { bad = 1 } END { exit !bad }' "$RES" &&
            [ -f "$STATE/$arm.log" ] && tail -5 "$STATE/$arm.log" | sed 's/^/   | /'
        grep "^$arm " "$RES" | tail -7 | sed 's/^/   /'
    done
done

# The SVG chart docs/netstack-benchmark.svg from rows "label|up1|down1|up4|down4" (Gbit/s) on
# stdin: grouped bars per path, one scale.
chart() {
    awk -F'|' '
        { n++; name[n] = $1; for (k = 2; k <= 5; k++) { v[n, k] = $k + 0; if (v[n, k] > mx) mx = v[n, k] } }
        END {
            split("A→B 1 stream|B→A 1 stream|A→B 4 streams|B→A 4 streams", lg, "|")
            split("#4472c4 #ed7d31 #a5a5a5 #ffc000", col, " ")
            W = 760; H = 340; L = 50; T = 50; B = 60; ph = H - T - B
            if (mx <= 0) mx = 1; top = (int(mx) + 1); gw = (W - L - 20) / n; bw = gw * 0.8 / 4
            printf "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" font-family=\"sans-serif\" font-size=\"12\">\n", W, H
            printf "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n"
            printf "<text x=\"%d\" y=\"20\" font-size=\"14\">TCP through the tunnel, Gbit/s (make bench-netstack, medians)</text>\n", L
            for (g = 0; g <= top; g++) { y = T + ph - g / top * ph
                printf "<line x1=\"%d\" x2=\"%d\" y1=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/><text x=\"%d\" y=\"%.1f\" text-anchor=\"end\">%d</text>\n", L, W - 20, y, y, L - 6, y + 4, g }
            for (i = 1; i <= n; i++) {
                x0 = L + (i - 1) * gw + gw * 0.1
                for (k = 2; k <= 5; k++) { h = v[i, k] / top * ph
                    printf "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"%s\"/>\n", x0 + (k - 2) * bw, T + ph - h, bw - 2, h, col[k - 1]
                    printf "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" font-size=\"10\">%.2f</text>\n", x0 + (k - 2) * bw + bw / 2, T + ph - h - 3, v[i, k] }
                printf "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">%s</text>\n", x0 + 2 * bw, T + ph + 18, name[i] }
            for (k = 1; k <= 4; k++) printf "<rect x=\"%d\" y=\"%d\" width=\"10\" height=\"10\" fill=\"%s\"/><text x=\"%d\" y=\"%d\">%s</text>\n", L + (k - 1) * 170, H - 22, col[k], L + (k - 1) * 170 + 14, H - 13, lg[k]
            print "</svg>"
        }'
}

# --- report --------------------------------------------------------------------------------
med() { awk -v a="$1" -v k="$2" '$1 == a && $2 == k && $3 != "" { print $3 }' "$RES" | sort -g |
        awk '{ v[NR] = $1 } END { if (NR) print (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2) }'; }
# "min..max" of a figure, divided by $3 (default 1) and printed with $4 decimals (default 0).
rng() { awk -v a="$1" -v k="$2" '$1 == a && $2 == k && $3 != "" { print $3 }' "$RES" | sort -g |
        awk -v d="${3:-1}" -v p="${4:-0}" 'NR == 1 { lo = $1 } { hi = $1 } END { if (NR) printf "%.*f..%.*f", p, lo / d, p, hi / d }'; }
gb() { awk -v b="${1:-0}" 'BEGIN { printf "%.2f", b / 1e9 }'; }
div() { awk -v a="${1:-0}" -v b="${2:-0}" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "n/a" }'; }
label() { case "$1" in tun) echo "TUN tunnel (vpn daemon, kernel TCP)" ;; forward) echo "vpn forward (userspace stack)" ;; onetun) echo "onetun ($ONETUN_VERSION)" ;; esac; }

section="$STATE/section.md"
{
    echo "## Netstack benchmark (netns)"
    echo
    echo "\`make bench-netstack\` (netns-tests/bench_netstack.sh), $(date -u +%Y-%m-%d), commit $(cd "$ROOT" && git rev-parse --short HEAD),"
    echo "$(nproc) CPUs ($(awk -F: '/model name/ { print $2; exit }' /proc/cpuinfo | sed 's/^ *//')), RUNS=$RUNS, SECS=$SECS."
    echo "The peer is a \`vpn\` daemon with a TUN in namespace B; A's side runs on CPU 0, B's on CPU 1."
    echo "Medians (min..max) of Gbit/s, µs and CPU seconds per GB (A's tunnel process only: the"
    echo "TUN arm's kernel TCP work is not in it). A→B is what reached B's sink; RTT is one-byte TCP"
    echo "round trips to B's echo server."
    echo
    echo "![TCP through the tunnel](netstack-benchmark.svg)"
    echo
    echo "| path | A→B 1 stream | A→B 4 streams | B→A 1 stream | B→A 4 streams | RTT µs | CPU s/GB A→B | CPU s/GB B→A |"
    echo "|---|---|---|---|---|---|---|---|"
    for arm in "${ARMS[@]}"; do
        printf '| %s |' "$(label "$arm")"
        for k in up1 up4 down1 down4; do printf ' %s (%s) |' "$(gb "$(med "$arm" $k)")" "$(rng "$arm" $k 1e9 2)"; done
        printf ' %s (%s) |' "$(med "$arm" rtt)" "$(rng "$arm" rtt)"
        for k in cpuup cpudown; do printf ' %s (%s) |' "$(med "$arm" $k)" "$(rng "$arm" $k 1 3)"; done
        echo
    done
    echo
    echo "Same-run ratios, vpn forward / onetun: A→B 1 stream $(div "$(med forward up1)" "$(med onetun up1)")x,"
    echo "B→A 1 stream $(div "$(med forward down1)" "$(med onetun down1)")x, 4 streams $(div "$(med forward up4)" "$(med onetun up4)")x"
    echo "and $(div "$(med forward down4)" "$(med onetun down4)")x, CPU per GB $(div "$(med forward cpuup)" "$(med onetun cpuup)")x"
    echo "and $(div "$(med forward cpudown)" "$(med onetun cpudown)")x, RTT $(div "$(med forward rtt)" "$(med onetun rtt)")x."
    echo "vpn forward / TUN tunnel: A→B 1 stream $(div "$(med forward up1)" "$(med tun up1)")x, B→A 1 stream"
    echo "$(div "$(med forward down1)" "$(med tun down1)")x, 4 streams $(div "$(med forward up4)" "$(med tun up4)")x and $(div "$(med forward down4)" "$(med tun down4)")x."
    echo
    for arm in "${ARMS[@]}"; do
        for k in up1 up4; do
            local_zero="$(awk -v a="$arm" -v k="$k" '$1 == a && $2 == k && $3 == 0 { z++ } $1 == a && $2 == k { t++ } END { if (z) print z " of " t }' "$RES")"
            [ -n "$local_zero" ] && echo "$(label "$arm"): nothing reached the sink A→B ($k) in $local_zero runs while the sender sent for SECS seconds and held the connection open SECS + 2 seconds more; a ratio against 0 is n/a. Its log said \"Failed to read event bus\" (its internal queue overflowing under a sender faster than the tunnel)."
        done
    done
    echo
} >"$section"
cat "$section"
if [ -f "$DOC" ] && [ -z "${PROFILE:-}" ]; then
    for arm in "${ARMS[@]}"; do
        case "$arm" in tun) l="TUN tunnel" ;; forward) l="vpn forward" ;; onetun) l="onetun 0.3.10" ;; esac
        echo "$l|$(gb "$(med "$arm" up1)")|$(gb "$(med "$arm" down1)")|$(gb "$(med "$arm" up4)")|$(gb "$(med "$arm" down4)")"
    done | chart >"$(dirname "$DOC")/netstack-benchmark.svg"
    awk -v sec="$section" '
        /^## Netstack benchmark \(netns\)/ { skip = 1; while ((getline l < sec) > 0) print l; done = 1; next }
        skip && /^## / { skip = 0 }
        !skip { print }
        END { if (!done) { print ""; while ((getline l < sec) > 0) print l } }' "$DOC" >"$DOC.new" && mv "$DOC.new" "$DOC"
    echo "== written to $DOC"
fi
