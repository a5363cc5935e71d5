#!/usr/bin/env bash
# The soak (`make soak`, SOAK_SECONDS, 1200 by default; CI runs 120): one tunnel carrying TCP,
# UDP and ping for the whole run while its keys rotate on their own schedule (REKEY_AFTER_TIME,
# 120 s), peers are added and removed through UAPI every 3 s, A's endpoint roams (its listen
# port moves every 30 s, and B follows), UDP floods of 5 s (at 20 s, then every 60 s), and a second tunnel
# idles with keepalives beside it. All four daemons run as they do by default: unprivileged,
# under seccomp and Landlock. Every 10 s it samples each daemon's RSS, descriptors, threads
# and packet memory in use (the private `stats=1` request); at the end soak_report.py fails
# the run on an upward trend past the stated slack, a TCP stall longer than 5 s, a lost ping
# outside the flood windows, a daemon gone or no longer sandboxed, and draws the curves.
#
# Usage (root): netns-tests/soak.sh [path/to/vpn]
#   SOAK_SECONDS  run length (1200)
#   SOAK_OUT      where samples and logs go (target/soak/<date>)
#   SOAK_DOCS=1   also write docs/soak.svg (the chart docs/performance.md shows)
set -uo pipefail

HERE="$(cd "$(dirname "$0")" && pwd)"
ROOT="$(cd "$HERE/.." && pwd)"
VPN="$(realpath "${1:-$ROOT/target/release/vpn}")"
SECS="${SOAK_SECONDS:-1200}"
OUT="${SOAK_OUT:-$ROOT/target/soak/$(date +%Y%m%d-%H%M%S)}"
# shellcheck source=lib.sh
source "$HERE/lib.sh"
trap lab_cleanup EXIT
trap 'exit 130' INT TERM
need_root
[ -x "$VPN" ] || { echo "soak.sh: $VPN not found" >&2; exit 1; }
ensure_tools
mkdir -p "$OUT"
echo "== soak: $SECS s with $VPN; samples and logs in $OUT"

# TCP at a fixed rate (the soak is about time, not capacity), UDP beside it; the floods are
# unlimited UDP.
TCP_RATE=100M
UDP_RATE=20M
FLOOD_FIRST=20
FLOOD_EVERY=60
FLOOD_SECS=5
ROAM_EVERY=30
CHURN_EVERY=3
SAMPLE_EVERY=10

make_pair sk
tunnel vpn vpn 4
must_up() { n "$1" timeout 10 ping -c 3 -i 0.2 -W 2 "$2" >/dev/null || { echo "soak: no ping to $2" >&2; exit 1; }; }
must_up "$A" 100.64.0.2
# The idle tunnel: its own daemons and port, keepalives every 25 s.
WA2="$(ifname ska2)"; WB2="$(ifname skb2)"
KA2="$(wg genkey)"; KB2="$(wg genkey)"
start_daemon vpn "$A" "$WA2"; PIDA2=$DAEMON_PID
start_daemon vpn "$B" "$WB2"; PIDB2=$DAEMON_PID
n "$A" wg set "$WA2" private-key <(echo "$KA2") listen-port 51821 peer "$(pubkey "$KB2")" \
    endpoint 198.18.0.2:51821 allowed-ips 100.65.0.2/32 persistent-keepalive 25
n "$B" wg set "$WB2" private-key <(echo "$KB2") listen-port 51821 peer "$(pubkey "$KA2")" \
    endpoint 198.18.0.1:51821 allowed-ips 100.65.0.1/32 persistent-keepalive 25
n "$A" ip addr add 100.65.0.1/24 dev "$WA2"; n "$A" ip link set "$WA2" up
n "$B" ip addr add 100.65.0.2/24 dev "$WB2"; n "$B" ip link set "$WB2" up
must_up "$A" 100.65.0.2

# Each daemon: name, pid, UAPI socket.
DAEMONS=("A:$PIDA:$SOCK_DIR/$WA.sock" "B:$PIDB:$SOCK_DIR/$WB.sock"
         "idleA:$PIDA2:$SOCK_DIR/$WA2.sock" "idleB:$PIDB2:$SOCK_DIR/$WB2.sock")

T0=$(date +%s.%N)
echo "t0 $T0" >"$OUT/events"
event() { echo "$(awk -v t0="$T0" -v now="$(date +%s.%N)" 'BEGIN { printf "%.1f", now - t0 }') $*" >>"$OUT/events"; }

# Traffic for the whole run (bounded by timeout).
(exec timeout $((SECS + 60)) ip netns exec "$(ns "$B")" iperf3 -s -p 5201 >/dev/null 2>&1) & track_pid $!
(exec timeout $((SECS + 60)) ip netns exec "$(ns "$B")" iperf3 -s -p 5202 >/dev/null 2>&1) & track_pid $!
(exec timeout $((SECS + 60)) ip netns exec "$(ns "$B")" iperf3 -s -p 5203 >/dev/null 2>&1) & track_pid $!
wait_for "n $B ss -ltn | grep -q ':5203 '" 5
(exec timeout $((SECS + 30)) ip netns exec "$(ns "$A")" iperf3 --json -c 100.64.0.2 -p 5201 -t "$SECS" -b "$TCP_RATE" -i 1 >"$OUT/tcp.json" 2>&1) &
TCP_PID=$!; track_pid "$TCP_PID"
# TCP's retransmission timer on A each second (the report shows it around a stall): the data
# connection's line (the control connection to the same port carries a few bytes).
(exec timeout $((SECS + 5)) ip netns exec "$(ns "$A")" bash -c '
    t0=$1; while :; do
        printf "%s %s\n" "$(awk -v t0="$t0" -v now="$(date +%s.%N)" "BEGIN { printf \"%.1f\", now - t0 }")" \
            "$(ss -tin dst 100.64.0.2:5201 | grep -E "bytes_acked:[0-9]{7,}" | head -1 | grep -o -E "\b(rto|backoff|retrans):[0-9./]+" | tr "\n" " ")"
        sleep 1
    done' _ "$T0" >"$OUT/tcp_backoff.log" 2>&1) & track_pid $!
(exec timeout $((SECS + 30)) ip netns exec "$(ns "$A")" iperf3 --json -c 100.64.0.2 -p 5202 -u -t "$SECS" -b "$UDP_RATE" -l 1200 -w 1M -i 10 >"$OUT/udp.json" 2>&1) &
UDP_PID=$!; track_pid "$UDP_PID"
(exec timeout $((SECS + 30)) ip netns exec "$(ns "$A")" ping -D -O -i 0.2 -W 1 -w "$SECS" 100.64.0.2 >"$OUT/ping.log" 2>&1) &
PING_PID=$!; track_pid "$PING_PID"
event start

# One UAPI request on a daemon's socket (the text until the blank line).
uapi() { "$PY" - "$1" "$2" <<'PY'
import socket, sys
s = socket.socket(socket.AF_UNIX)
s.settimeout(5)
s.connect(sys.argv[1])
s.sendall(sys.argv[2].encode().decode("unicode_escape").encode())
out = b""
while not out.endswith(b"\n\n"):
    chunk = s.recv(65536)
    if not chunk:
        break
    out += chunk
sys.stdout.write(out.decode())
PY
}

sample() {
    local t d name pid sock rss fds threads mem
    t="$(awk -v t0="$T0" -v now="$(date +%s.%N)" 'BEGIN { printf "%.1f", now - t0 }')"
    for d in "${DAEMONS[@]}"; do
        IFS=: read -r name pid sock <<<"$d"
        if [ ! -d "/proc/$pid" ]; then echo "$t,$name,dead,,," >>"$OUT/samples.csv"; continue; fi
        rss="$(awk '/^VmRSS:/ { print $2 }' "/proc/$pid/status")"
        threads="$(awk '/^Threads:/ { print $2 }' "/proc/$pid/status")"
        fds="$(ls "/proc/$pid/fd" | wc -l)"
        mem="$(uapi "$sock" 'stats=1\n\n' | sed -n 's/^memory.in_use=//p')"
        echo "$t,$name,$rss,$fds,$threads,${mem:-}" >>"$OUT/samples.csv"
    done
    # The tunnel's handshakes: a new time is a rekey.
    echo "$t $(n "$A" wg show "$WA" latest-handshakes | awk -v k="$PB" '$1 == k { print $2 }')" >>"$OUT/handshakes"
}
echo "t,daemon,rss_kib,fds,threads,packet_bytes" >"$OUT/samples.csv"

# Churn: every CHURN_EVERY s five peers added (allowed IPs and an endpoint each) and the five
# of the round before removed, on A; roaming every ROAM_EVERY s; floods every FLOOD_EVERY s.
churn_round=0; prev=(); port=51820
next_sample=0; next_churn=$CHURN_EVERY; next_roam=$ROAM_EVERY; next_flood=$FLOOD_FIRST
while :; do
    now=$(awk -v t0="$T0" -v now="$(date +%s.%N)" 'BEGIN { printf "%d", now - t0 }')
    [ "$now" -ge "$SECS" ] && break
    if [ "$now" -ge "$next_sample" ]; then sample; next_sample=$((next_sample + SAMPLE_EVERY)); fi
    if [ "$now" -ge "$next_churn" ]; then
        args=(); fresh=()
        for i in 1 2 3 4 5; do
            k="$(wg genkey | wg pubkey)"; fresh+=("$k")
            args+=(peer "$k" allowed-ips "100.66.$((churn_round % 250)).$i/32,fd00:66::$((churn_round % 250)):$i/128" endpoint "198.18.0.2:$((20000 + i))")
        done
        for k in "${prev[@]}"; do args+=(peer "$k" remove); done
        n "$A" wg set "$WA" "${args[@]}" || event "churn-failed"
        prev=("${fresh[@]}"); churn_round=$((churn_round + 1))
        next_churn=$((next_churn + CHURN_EVERY))
    fi
    if [ "$now" -ge "$next_roam" ]; then
        port=$(( port == 51820 ? 51830 : 51820 ))
        n "$A" wg set "$WA" listen-port "$port" && event "roam $port" || event "roam-failed $port"
        next_roam=$((next_roam + ROAM_EVERY))
    fi
    if [ "$now" -ge "$next_flood" ] && [ $((now + FLOOD_SECS + 5)) -lt "$SECS" ]; then
        (
            event "flood-start"
            n "$A" timeout $((FLOOD_SECS + 10)) iperf3 -c 100.64.0.2 -p 5203 -u -b 0 -l 1200 -t "$FLOOD_SECS" >/dev/null 2>&1 || true
            event "flood-end"
        ) &
        track_pid $!
        next_flood=$((next_flood + FLOOD_EVERY))
    fi
    sleep 0.5
done
sample
event end
wait "$TCP_PID" "$UDP_PID" "$PING_PID" 2>/dev/null
for d in "${DAEMONS[@]}"; do
    IFS=: read -r name pid sock <<<"$d"
    {
        echo "== $name (pid $pid)"
        grep -E '^(Uid|CapEff|NoNewPrivs|Seccomp):' "/proc/$pid/status" 2>/dev/null || echo "gone"
        for t in /proc/"$pid"/task/*; do grep -E '^(Uid|CapEff|Seccomp):' "$t/status"; done 2>/dev/null | sort | uniq -c
    } >>"$OUT/sandbox.txt"
done
n "$A" wg show "$WA" >"$OUT/wg-show-A.txt" 2>&1
n "$A" "$VPN" show "$WA" >"$OUT/vpn-show-A.txt" 2>&1
cp "$STATE"/*.log "$OUT/" 2>/dev/null
args=("$OUT" --seconds "$SECS")
[ "${SOAK_DOCS:-0}" = 1 ] && args+=(--svg "$ROOT/docs/soak.svg")
"$PY" "$HERE/soak_report.py" "${args[@]}"
