#!/usr/bin/env bash
# A smoke test of `vpn` on a Mac (run as root; needs `wg` from wireguard-tools, e.g. Homebrew's).
#
#   sudo scripts/macos-smoke.sh [path/to/vpn]
#
# Two tunnels on this Mac, peers of each other over 127.0.0.1, each brought up with `vpn up`
# from a wg-quick config (addresses and routes in 100.64.0.0/10, no DNS, no default route, so
# the Mac's own networking is not touched). It checks, step by step:
#   1. `vpn up` started a daemon on a kernel-chosen utun and found it through WG_TUN_NAME_FILE;
#      `wg show` reads the interface through the UAPI socket;
#   2. a ping into tunnel A's route makes A and B handshake, B's receive counter grow and B's
#      utun deliver the packets to the kernel (its input counter grows): utun read, encryption,
#      the UDP bind, decryption and utun write all worked;
#   3. `vpn down` removes the socket, the daemon notices (kqueue watch), stops and the utun is
#      gone.
# Set VPN_BATCHED_IO=1 to run the shared sockets batched (recvmsg_x/sendmsg_x), and run it again
# with a binary built with --no-default-features for the App Store variant.
set -euo pipefail

VPN=${1:-vpn}
command -v "$VPN" >/dev/null 2>&1 || [ -x "$VPN" ] || { echo "no vpn binary: $VPN"; exit 1; }
VPN=$(cd "$(dirname "$(command -v "$VPN" || echo "$VPN")")" && pwd)/$(basename "$VPN")
command -v wg >/dev/null || { echo "wg not found (brew install wireguard-tools)"; exit 1; }
[ "$(id -u)" -eq 0 ] || { echo "run as root (sudo)"; exit 1; }
[ "$(uname -s)" = Darwin ] || { echo "this is the macOS smoke test"; exit 1; }

dir=$(mktemp -d /tmp/vpn-smoke.XXXXXX)
A=vpnsmoke-a
B=vpnsmoke-b
passed=0
failed=0
ok() { echo "ok   $*"; passed=$((passed + 1)); }
bad() { echo "FAIL $*"; failed=$((failed + 1)); }
cleanup() {
    "$VPN" down "$dir/$A.conf" >/dev/null 2>&1 || true
    "$VPN" down "$dir/$B.conf" >/dev/null 2>&1 || true
    rm -rf "$dir"
}
trap cleanup EXIT

ka=$("$VPN" genkey); kb=$("$VPN" genkey)
pa=$(echo "$ka" | "$VPN" pubkey); pb=$(echo "$kb" | "$VPN" pubkey)
# write_conf <name> <private key> <port> <address> <peer public key> <peer port> <allowed IPs>
write_conf() {
    printf '[Interface]\nPrivateKey = %s\nListenPort = %s\nAddress = %s\n\n' "$2" "$3" "$4" >"$dir/$1.conf"
    printf '[Peer]\nPublicKey = %s\nEndpoint = 127.0.0.1:%s\nAllowedIPs = %s\n' "$5" "$6" "$7" >>"$dir/$1.conf"
}
write_conf "$A" "$ka" 51871 100.64.98.1/32 "$pb" 51872 100.64.99.0/24
write_conf "$B" "$kb" 51872 100.64.99.1/32 "$pa" 51871 100.64.98.0/24
chmod 600 "$dir"/*.conf

"$VPN" up "$dir/$A.conf"
"$VPN" up "$dir/$B.conf"
ua=$(cat /var/run/wireguard/$A.name)
ub=$(cat /var/run/wireguard/$B.name)
[[ $ua == utun* && $ub == utun* ]] && ok "1. tunnels on $ua and $ub" || bad "1. name files: '$ua' '$ub'"
wg show "$ua" public-key | grep -qx "$pa" && ok "1. wg show $ua through the UAPI socket" \
    || bad "1. wg show $ua"
ifconfig "$ua" | grep -q 'inet 100.64.98.1' && ok "1. $ua has its address" || bad "1. address"

ipkts() { netstat -I "$1" -n | awk 'NR == 2 {print $5}'; }
before=$(ipkts "$ub")
# 100.64.99.2 is routed into tunnel A and arrives on B's utun; no host answers it, so the
# ping itself fails: the counters say whether the packets made it.
ping -c 3 -i 0.2 -t 3 -S 100.64.98.1 100.64.99.2 >/dev/null 2>&1 || true
sleep 1
hs=$(wg show "$ub" latest-handshakes | awk '{print $2}')
rx=$(wg show "$ub" transfer | awk '{print $2}')
after=$(ipkts "$ub")
[ "${hs:-0}" -gt 0 ] && ok "2. handshake between $ua and $ub" || bad "2. no handshake"
[ "${rx:-0}" -gt 0 ] && ok "2. $ub received $rx bytes" || bad "2. $ub received nothing"
[ "${after:-0}" -gt "${before:-0}" ] && ok "2. $ub delivered $((after - before)) packets to the kernel" \
    || bad "2. $ub delivered nothing (ipkts $before -> $after)"

"$VPN" down "$dir/$A.conf"
gone=0
for _ in $(seq 30); do ifconfig "$ua" >/dev/null 2>&1 || { gone=1; break; }; sleep 0.1; done
[ $gone -eq 1 ] && ok "3. vpn down: $ua is gone" || bad "3. $ua still exists after vpn down"
[ ! -e /var/run/wireguard/$ua.sock ] && ok "3. socket removed" || bad "3. socket left behind"
"$VPN" down "$dir/$B.conf"

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
