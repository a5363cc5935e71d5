#!/usr/bin/env bash
# The main job in one command: two network namespaces joined by a veth pair, a WireGuard tunnel
# between two `vpn` daemons brought up from wg-quick-style config files, a handshake, a ping,
# 1 GiB through the tunnel, then everything removed.
#
# Usage (as root): netns-tests/demo.sh [path/to/vpn]     (make demo builds it first)
set -euo pipefail

VPN="${1:-target/release/vpn}"
VPN="$(realpath "$VPN")"
[ "$(id -u)" -eq 0 ] || { echo "demo: needs root (network namespaces, TUN devices)" >&2; exit 1; }
[ -x "$VPN" ] || { echo "demo: $VPN not found; run 'make demo'" >&2; exit 1; }

need() { command -v "$1" >/dev/null 2>&1; }
if ! need ip || ! need iperf3 || ! need ping; then
    echo "== installing iproute2, iperf3, iputils-ping"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq && apt-get install -y -qq --no-install-recommends iproute2 iperf3 iputils-ping >/dev/null
fi

A="vpn-demo-a-$$"; B="vpn-demo-b-$$"
WA=wgdemoa; WB=wgdemob
DIR="$(mktemp -d)"
IPERF_PID=""

cleanup() {
    set +e
    [ -n "$IPERF_PID" ] && kill "$IPERF_PID" 2>/dev/null
    ip netns exec "$A" "$VPN" down "$DIR/$WA.conf" >/dev/null 2>&1
    ip netns exec "$B" "$VPN" down "$DIR/$WB.conf" >/dev/null 2>&1
    for ns in "$A" "$B"; do
        # Stop only what runs inside our own namespaces.
        for pid in $(ip netns pids "$ns" 2>/dev/null); do kill "$pid" 2>/dev/null; done
    done
    sleep 0.2
    for ns in "$A" "$B"; do
        for pid in $(ip netns pids "$ns" 2>/dev/null); do kill -9 "$pid" 2>/dev/null; done
        ip netns del "$ns" 2>/dev/null
    done
    rm -f "/var/run/wireguard/$WA.sock" "/var/run/wireguard/$WB.sock"
    rm -rf "$DIR"
}
trap cleanup EXIT INT TERM

step() { echo; echo "== $*"; }

step "namespaces $A and $B, joined by a veth pair (underlay 198.18.0.0/24)"
ip netns add "$A"; ip netns add "$B"
ip link add vdemoa netns "$A" type veth peer name vdemob netns "$B"
ip -n "$A" addr add 198.18.0.1/24 dev vdemoa; ip -n "$A" link set vdemoa up; ip -n "$A" link set lo up
ip -n "$B" addr add 198.18.0.2/24 dev vdemob; ip -n "$B" link set vdemob up; ip -n "$B" link set lo up

step "keys"
KA="$("$VPN" genkey)"; KB="$("$VPN" genkey)"
PA="$(echo "$KA" | "$VPN" pubkey)"; PB="$(echo "$KB" | "$VPN" pubkey)"
echo "A public key: $PA"; echo "B public key: $PB"

umask 077
# conf <private key> <own tunnel host> <peer public key> <peer underlay address> <peer host>
conf() {
    cat <<CONF
[Interface]
PrivateKey = $1
ListenPort = 51820
Address = 100.64.0.$2/24, fd00::$2/64

[Peer]
PublicKey = $3
Endpoint = $4:51820
AllowedIPs = 100.64.0.$5/32, fd00::$5/128
CONF
}
conf "$KA" 1 "$PB" 198.18.0.2 2 >"$DIR/$WA.conf"
conf "$KB" 2 "$PA" 198.18.0.1 1 >"$DIR/$WB.conf"
step "config of A ($DIR/$WA.conf, keys elided)"
sed 's/^\(PrivateKey = \).*/\1(secret)/' "$DIR/$WA.conf"

step "vpn up in both namespaces"
ip netns exec "$A" "$VPN" up "$DIR/$WA.conf"
ip netns exec "$B" "$VPN" up "$DIR/$WB.conf"

step "ping across the tunnel (IPv4, then IPv6)"
ip netns exec "$A" ping -c 3 -i 0.2 -W 5 100.64.0.2
ip netns exec "$A" ping -6 -c 3 -i 0.2 -W 5 fd00::2

step "vpn show (handshake and counters)"
ip netns exec "$A" "$VPN" show "$WA"

step "1 GiB through the tunnel (iperf3, TCP, A -> B)"
ip netns exec "$B" iperf3 -s -1 -B 100.64.0.2 >/dev/null 2>&1 &
IPERF_PID=$!
for _ in $(seq 50); do
    ip netns exec "$B" ss -ltn 2>/dev/null | grep -q '100.64.0.2:5201' && break
    sleep 0.1
done
ip netns exec "$A" timeout 120 iperf3 -c 100.64.0.2 -n 1G -f m | grep -E 'sender|receiver'
wait "$IPERF_PID" 2>/dev/null || true
IPERF_PID=""

step "counters after the transfer (A sent, B received)"
ip netns exec "$A" "$VPN" show "$WA"
ip netns exec "$B" "$VPN" show "$WB" | sed -n '/^batching:/,$p'

step "vpn down"
ip netns exec "$A" "$VPN" down "$DIR/$WA.conf"
ip netns exec "$B" "$VPN" down "$DIR/$WB.conf"
echo; echo "demo: ok"
