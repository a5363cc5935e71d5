#!/usr/bin/env bash
# Connected sockets (docs/bind.md) in network namespaces: one daemon (A) with 8 peers, each peer a
# daemon of its own in namespace B, connected sockets on everywhere (VPN_CONNECTED_SOCKETS=1)
# with a 3 s idle interval (VPN_CONNECTED_IDLE_MS) so idling out takes seconds, not a minute.
#
# Checks: every peer crosses the threshold and gets a pair socket sharing A's port (ss -uanp);
# UDP through the tunnels while sockets open mid-stream loses nothing; idle sockets close; a
# rebind (new listen port) and a route change (new source address) redial; reading goes on
# while a peer restarts.
#
# Usage (root): netns-tests/connected/test.sh [path/to/vpn]   (default target/release/vpn)
set -euo pipefail
cd "$(dirname "$0")/../.."
VPN="$(realpath -m "${1:-target/release/vpn}")"
. netns-tests/connected/lib.sh
require_root_and_tools

IDLE_MS=3000
export VPN_CONNECTED_IDLE_MS=$IDLE_MS
N=8
FAILS=0; PASSES=0
ok() { echo "  ok: $*"; PASSES=$((PASSES + 1)); }
bad() { echo "  FAIL: $*"; FAILS=$((FAILS + 1)); }
check() { local what="$1"; shift; if "$@"; then ok "$what"; else bad "$what"; fi; }
step() { echo; echo "== $*"; }

step "topology: A with $N peers, connected sockets on, idle interval ${IDLE_MS} ms"
topology "$N" 1
iperf_servers "$A" 5200 "$N"

step "bulk B -> A, all $N peers at once (each far above the 1 MiB threshold)"
for k in $(seq "$N"); do
    ip netns exec "$B" iperf3 -c "100.64.$k.1" -p $((5200 + k)) -t 3 -f m >"$DIR/tcp$k.txt" 2>&1 &
done
wait
for k in $(seq "$N"); do
    grep -q receiver "$DIR/tcp$k.txt" || bad "iperf3 to peer $k: $(tail -1 "$DIR/tcp$k.txt")"
done
echo "  ss -uanp in A (port 51820):"
ip netns exec "$A" ss -uanp | awk '$4 ~ /:51820$/' | sed 's/^/    /'
have=$(connected_sockets "$A" 51820)
check "$N connected sockets share port 51820 in A (found $have)" [ "$have" -eq "$N" ]
owners=$(ip netns exec "$A" ss -uanp | awk '$4 ~ /:51820$/' | grep -o 'pid=[0-9]*' | sort -u | wc -l)
check "one process owns the wildcard and every connected socket" [ "$owners" -eq 1 ]
dials=$(uapi_stat "$A" wgcsa bind.connected_dials)
check "A dialled $N pairs (bind.connected_dials=$dials)" [ "$dials" -ge "$N" ]

step "UDP through every tunnel while pair sockets open mid-stream (fresh daemons)"
cleanup; trap cleanup EXIT INT TERM
A="vpn-cs-a2-$$"; B="vpn-cs-b2-$$"; DIR="$(mktemp -d)"
topology "$N" 1
iperf_servers "$A" 5200 "$N"
for k in $(seq "$N"); do
    # 1200-byte datagrams at 10 Mbit/s for 4 s: ~4 200 datagrams, threshold after ~900. The
    # servers get 1 MiB socket buffers (-w is passed on to them): the default 208 KiB holds about
    # 90 datagrams, and on 2 busy cores an iperf3 server can sit unscheduled longer than that
    # while a daemon that fell behind delivers its backlog in batches. The daemons' own sockets
    # have large buffers; what is measured is loss in the tunnel, not in iperf3's socket.
    ip netns exec "$B" iperf3 -u -c "100.64.$k.1" -p $((5200 + k)) -b 10M -l 1200 -t 4 -w 1M \
        -J >"$DIR/udp$k.json" 2>"$DIR/udp$k.err" &
done
wait
total_lost=0
for k in $(seq "$N"); do
    read -r lost pkts why < <(python3 -c '
import json, sys
try:
    d = json.load(open(sys.argv[1]))
    s = d["end"]["sum"]
    print(s["lost_packets"], s["packets"], "-")
except Exception as e:
    print(-1, 0, (d.get("error") if isinstance(d, dict) else None) or repr(e))
' "$DIR/udp$k.json" 2>/dev/null || echo "-1 0 unreadable")
    if [ "$lost" -lt 0 ] || [ "$pkts" -eq 0 ]; then
        bad "peer $k: no UDP result ($why)"
        continue
    fi
    echo "  peer $k: $lost of $pkts datagrams lost"
    total_lost=$((total_lost + lost))
done
recv_conn=$(uapi_stat "$A" wgcsa bind.connected_datagrams_received)
check "pair sockets carried traffic (bind.connected_datagrams_received=$recv_conn)" [ "$recv_conn" -gt 0 ]
[ "$total_lost" -eq 0 ] || { ip netns exec "$A" nstat -az UdpRcvbufErrors UdpInErrors Udp6RcvbufErrors | sed 's/^/    A: /'; ip netns exec "$A" ss -uanmp | tr -s ' ' | paste - - | grep -v 'd0)' | sed 's/^/    A: /'; }
check "no datagram lost or misattributed (lost $total_lost)" [ "$total_lost" -eq 0 ]
dials=$(uapi_stat "$A" wgcsa bind.connected_dials)
check "every peer's pair opened mid-stream (bind.connected_dials=$dials)" [ "$dials" -ge "$N" ]

step "flood: unlimited UDP from all $N peers; the receive pool's cap bounds memory"
pid=$(daemon_pid "$A" wgcsa)
for k in $(seq "$N"); do
    ip netns exec "$B" iperf3 -u -c "100.64.$k.1" -p $((5200 + k)) -b 0 -l 1400 -t 3 \
        >/dev/null 2>&1 &
done
wait
hwm_kib=$(awk '/^VmHWM/ {print $2}' "/proc/$pid/status")
# Receive pool (32 MiB + 16 pair readers' 2 × 64 buffers) + send pool (32 MiB) + sockets'
# user-space scratch: about 210 MiB of buffers at most; allow 64 MiB for the rest.
limit_kib=$(((32 + 134 + 32 + 64) * 1024))
check "peak RSS ${hwm_kib} KiB within ${limit_kib} KiB" [ "$hwm_kib" -le "$limit_kib" ]
check "readers resume after the flood (ping through every tunnel)" \
    bash -c "for k in \$(seq $N); do ip netns exec $A ping -c 1 -w 15 -I 100.64.\$k.1 100.64.\$k.2 >/dev/null || exit 1; done"

step "idle sockets close within two idle intervals"
sleep $((2 * IDLE_MS / 1000 + 2))
# Two intervals is when they should be gone; a loaded machine gets two more before it counts.
for ((i = 0; i < 2 * IDLE_MS / 100; i++)); do
    have=$(connected_sockets "$A" 51820)
    open_now=$(uapi_stat "$A" wgcsa bind.connected_open)
    [ "$have" -eq 0 ] && [ "$open_now" -eq 0 ] && break
    sleep 0.1
done
check "no connected sockets left (ss: $have, bind.connected_open=$open_now)" \
    test "$have" -eq 0 -a "$open_now" -eq 0

step "reading goes on while a peer restarts"
ip netns exec "$B" iperf3 -c 100.64.1.1 -p 5201 -t 2 >/dev/null 2>&1
before=$(uapi_stat "$A" wgcsa bind.connected_datagrams_received)
ip netns exec "$B" "$VPN" down "$DIR/wgcsb1.conf" >/dev/null 2>&1
ip netns exec "$A" ping -c 3 -i 0.2 -W 1 -I 100.64.1.1 100.64.1.2 >/dev/null 2>&1 || true   # ICMP errors now
ip netns exec "$B" "$VPN" up "$DIR/wgcsb1.conf" >/dev/null 2>&1
ip netns exec "$B" iperf3 -c 100.64.1.1 -p 5201 -t 2 >/dev/null 2>&1
after=$(uapi_stat "$A" wgcsa bind.connected_datagrams_received)
check "A's pair reader still receives after the restart ($before -> $after)" [ "$after" -gt "$before" ]

step "rebind: A moves to port 51830, pairs redial there"
dials=$(uapi_stat "$A" wgcsa bind.connected_dials)
uapi "$A" wgcsa 'set=1\nlisten_port=51830\n\n' >/dev/null
ip netns exec "$A" ping -c 2 -W 2 -I 100.64.2.1 100.64.2.2 >/dev/null   # B2 learns the new port
ip netns exec "$B" iperf3 -c 100.64.2.1 -p 5202 -t 2 >/dev/null 2>&1
after=$(uapi_stat "$A" wgcsa bind.connected_dials)
check "a pair redialled after the rebind (dials $dials -> $after)" [ "$after" -gt "$dials" ]
have=$(connected_sockets "$A" 51830)
check "connected socket on the new port (found $have)" [ "$have" -ge 1 ]

step "address change: A's source towards B moves to 198.18.0.11; the pair follows"
ip netns exec "$A" sysctl -qw net.ipv4.conf.vcsa.promote_secondaries=1
ip -n "$A" addr add 198.18.0.11/24 dev vcsa
ip -n "$A" route replace 198.18.0.2/32 dev vcsa src 198.18.0.11
# The old address goes away: its pair socket fails (EADDRNOTAVAIL/EINVAL) or idles out, the
# send falls back to the route's choice, B2 roams to the new address and a new pair opens.
ip -n "$A" addr del 198.18.0.1/24 dev vcsa
timeout 60 ip netns exec "$B" iperf3 -s -1 -p 5301 -B 100.64.2.2 >/dev/null 2>&1 &
listening "$B" 5301 || echo "  warning: iperf3 server on port 5301 not listening"
ip netns exec "$A" iperf3 -c 100.64.2.2 -B 100.64.2.1 -p 5301 -t $((2 * IDLE_MS / 1000 + 2)) >/dev/null 2>&1 || true
wait
echo "  ss -uanp in A (port 51830):"
ip netns exec "$A" ss -uanp | awk '$4 ~ /:51830$/' | sed 's/^/    /'
moved=$(ip netns exec "$A" ss -uan | awk '$4 == "198.18.0.11:51830" && $5 ~ /^198.18.0.2:/' | wc -l)
check "a pair socket from the new source 198.18.0.11 (found $moved)" [ "$moved" -ge 1 ]

echo
echo "connected sockets netns: $PASSES passed, $FAILS failed"
[ "$FAILS" -eq 0 ]
