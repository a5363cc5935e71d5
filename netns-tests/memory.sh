#!/usr/bin/env bash
# Peak memory of the daemon under a UDP flood from N connected peers: namespace A runs one `vpn`
# daemon with N peers and connected sockets on; namespace B runs N in-process WireGuard peers
# (`vpn-peers`, one process) that flood it with 64-byte datagrams at full speed for SECS seconds.
# Prints the daemon's peak RSS (VmHWM), its RSS at the end, the pair sockets it opened and the
# datagrams it received on them, for 1, 8, 64 and 256 peers, at the default memory budget and at 16 MiB.
# Not a timed test: a measurement (docs/performance.md, "Memory").
#
# Usage (root): netns-tests/memory.sh [path/to/release/vpn] [path/to/release/vpn-peers]
#   PEERS="1 8 64 256" BUDGETS="default 16M" SECS=8
set -uo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=nskill.sh
source netns-tests/nskill.sh
VPN="$(realpath -m "${1:-target/release/vpn}")"
GEN="$(realpath -m "${2:-target/release/vpn-peers}")"
PEERS="${PEERS:-1 8 64 256}"; BUDGETS="${BUDGETS:-default 16M}"; SECS="${SECS:-8}"
[ "$(id -u)" -eq 0 ] || { echo "memory.sh: needs root"; exit 0; }
for b in "$VPN" "$GEN"; do
    [ -x "$b" ] || { echo "memory.sh: $b not found (cargo build --release -p vpn-cli -p vpn-tests)"; exit 1; }
done
A="slb-a-$$"; B="slb-b-$$"; DIR="$(mktemp -d)"; GENPID=""
cleanup() {
    [ -n "$GENPID" ] && kill "$GENPID" 2>/dev/null
    ns_kill_delete "$A" "$B"
    rm -f /var/run/wireguard/slbw.sock
    rm -rf "$DIR"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

hex() { base64 -d | od -An -tx1 | tr -d ' \n'; }

# run N BUDGET: one measurement, one table row.
run() {
    local n="$1" budget="$2" j
    ip netns add "$A"; ip netns add "$B"
    ip link add slbva netns "$A" type veth peer name slbvb netns "$B"
    ip -n "$A" addr add 198.18.0.1/24 dev slbva; ip -n "$A" link set slbva up; ip -n "$A" link set lo up
    ip -n "$B" addr add 198.18.0.2/24 dev slbvb; ip -n "$B" link set slbvb up; ip -n "$B" link set lo up
    local ka pa; ka="$("$VPN" genkey)"; pa="$(echo "$ka" | "$VPN" pubkey)"
    : >"$DIR/keys"
    { echo "[Interface]"; echo "PrivateKey = $ka"; echo "ListenPort = 51820"; } >"$DIR/slbw.conf"
    for j in $(seq 0 $((n - 1))); do
        local kb; kb="$("$VPN" genkey)"
        echo "$kb" | hex >>"$DIR/keys"; echo >>"$DIR/keys"
        echo "Address = 100.64.$j.1/32" >>"$DIR/slbw.conf"
        printf '[Peer]\nPublicKey = %s\nEndpoint = 198.18.0.2:%d\nAllowedIPs = 100.64.%d.2/32\n' \
            "$(echo "$kb" | "$VPN" pubkey)" $((51821 + j)) "$j" >>"$DIR/peers"
    done
    cat "$DIR/peers" >>"$DIR/slbw.conf"; rm -f "$DIR/peers"; chmod 600 "$DIR/slbw.conf"
    local env=(VPN_CONNECTED_SOCKETS=1)
    [ "$budget" != default ] && env+=(VPN_MEMORY_BUDGET="$budget")
    ip netns exec "$A" env "${env[@]}" "$VPN" up "$DIR/slbw.conf" >"$DIR/up.log" 2>&1 \
        || { echo "memory.sh: vpn up failed: $(cat "$DIR/up.log")"; return 1; }
    local pid
    pid="$(for p in $(ip netns pids "$A"); do [ "$(cat /proc/"$p"/comm)" = vpn ] && echo "$p"; done | head -1)"
    ip netns exec "$B" timeout $((SECS + 30)) "$GEN" "$DIR/keys" 198.18.0.1:51820 "$(echo "$pa" | hex)" "$SECS" \
        >"$DIR/gen.out" 2>&1 &
    GENPID=$!
    wait "$GENPID"; GENPID=""
    ip netns exec "$A" "$VPN" show slbw >"$DIR/show" 2>&1; [ -n "${MEMORY_SHOW:-}" ] && cat "$DIR/show" >&2
    local hwm rss pairs rx
    hwm="$(awk '/VmHWM/ {print $2}' /proc/"$pid"/status)"
    rss="$(awk '/VmRSS/ {print $2}' /proc/"$pid"/status)"
    pairs="$(sed -n 's/.*connected sockets: \([0-9]*\) open.*/\1/p' "$DIR/show")"
    rx="$(sed -n 's/.* and \([0-9]*\) received on them.*/\1/p' "$DIR/show")"
    printf '%-6s %-8s %10.1f %10.1f %6s %14s   %s\n' "$n" "$budget" "$(echo "$hwm/1024" | bc -l)" \
        "$(echo "$rss/1024" | bc -l)" "${pairs:-0}" "${rx:-0}" "$(cat "$DIR/gen.out")"
    cleanup; DIR="$(mktemp -d)"
}

echo "load: $(uptime)"
printf '%-6s %-8s %10s %10s %6s %14s   %s\n' peers budget "VmHWM MiB" "VmRSS MiB" pairs "rx on pairs" generator
for budget in $BUDGETS; do
    for n in $PEERS; do
        run "$n" "$budget"
    done
done
