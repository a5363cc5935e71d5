#!/usr/bin/env bash
# The network-namespace integration suite: the `vpn` daemon, configured by the real `wg` tool,
# against itself, wireguard-go and boringtun-cli, in namespaces joined by veth pairs (the model
# is wireguard-go's tests/netns.sh and the kernel's netns.sh).
#
# Usage (root): netns-tests/run.sh [path/to/vpn] [scenario...]
#   Without scenario names every scenario runs. Each one gets fresh namespaces, runs in a
#   subshell under a watchdog (SCENARIO_TIMEOUT seconds), prints PASS/FAIL and its log on
#   failure; the last line is "N passed, N failed" and the exit status is non-zero if any failed.
set -uo pipefail

HERE="$(cd "$(dirname "$0")" && pwd)"
ROOT="$(cd "$HERE/.." && pwd)"
VPN="$(realpath "${1:-$ROOT/target/debug/vpn}")"
shift || true
SCENARIO_TIMEOUT="${SCENARIO_TIMEOUT:-90}"
# shellcheck source=lib.sh
source "$HERE/lib.sh"
trap lab_cleanup EXIT
trap 'exit 130' INT TERM

need_root
[ -x "$VPN" ] || { echo "run.sh: $VPN not found (cargo build -p vpn-cli)" >&2; exit 1; }
ensure_tools
HOSTILE="${HOSTILE:-}"
if [ -z "$HOSTILE" ]; then
    (cd "$ROOT" && cargo build -q -p vpn-netns-tools) || { echo "run.sh: cannot build vpn-netns-tools" >&2; exit 1; }
    HOSTILE="${CARGO_TARGET_DIR:-$ROOT/target}/debug/vpn-hostile"
fi

fail() { echo "FAILED: $*"; exit 1; }
# Substring test without a pipe (`echo | grep -q` fails under pipefail when grep exits early).
contains() { [[ "$1" == *"$2"* ]]; }
# Runs a command, failing the scenario with its description when it fails.
must() { local what="$1"; shift; "$@" || fail "$what"; }
must_not() { local what="$1"; shift; ! "$@" || fail "$what"; }

ping4() { n "$1" timeout 10 ping -c "${3:-2}" -i 0.2 -W 2 "$2" >/dev/null; }
ping6() { n "$1" timeout 10 ping -6 -c "${3:-2}" -i 0.2 -W 2 "$2" >/dev/null; }
pings_both_ways() {
    must "ping A->B v4" ping4 "$A" 100.64.0.2
    must "ping B->A v4" ping4 "$B" 100.64.0.1
    must "ping A->B v6" ping6 "$A" fd00::2
    must "ping B->A v6" ping6 "$B" fd00::1
}
handshake_time() { n "$1" wg show "$2" latest-handshakes | awk -v k="$3" '$1 == k { print $2 }'; }
endpoint_of() { n "$1" wg show "$2" endpoints | awk -v k="$3" '$1 == k { print $2 }'; }

# iperf3 TCP and UDP, both directions, to tunnel address $1 from A (server in B), 2 s each.
traffic_battery() {
    local dst="$1" dir bps lost
    for dir in "" "-R"; do
        bps="$(iperf "$A" -c "$dst" -t 2 $dir | iperf_field tcp_bps)"
        echo "  tcp $dst ${dir:-fwd}: $(mbps "$bps") Mbit/s"
        awk -v b="${bps:-0}" 'BEGIN { exit !(b > 1e6) }' || fail "iperf3 TCP to $dst $dir carried nothing"
        # A modest fixed rate: this checks that UDP is carried, capacity is the benchmark's job
        # (a debug build on a busy 2-core machine drops at a few hundred Mbit/s).
        # -w 1M reaches the server too: its default socket buffer holds about 90 datagrams.
        local j; j="$(iperf "$A" -c "$dst" -t 2 -u -b 20M -l 1200 -w 1M $dir)"
        bps="$(echo "$j" | iperf_field udp_bps)"; lost="$(echo "$j" | iperf_field udp_lost_percent)"
        echo "  udp $dst ${dir:-fwd}: $(mbps "$bps") Mbit/s received, ${lost:-?}% lost"
        awk -v b="${bps:-0}" -v l="${lost:-100}" 'BEGIN { exit !(b > 15e6 && l < 10) }' ||
            fail "iperf3 UDP to $dst $dir: ${bps:-0} bit/s, ${lost:-?}% lost"
    done
}

# --- scenarios -----------------------------------------------------------------------------

# Ping and iperf3 TCP/UDP both ways over both tunnel families, on an IPv4 then IPv6 underlay.
scenario_basic_v4_underlay() { basic 4; }
scenario_basic_v6_underlay() { basic 6; }
basic() {
    make_pair "b$1"; tunnel vpn vpn "$1"
    pings_both_ways
    iperf_server "$B"
    traffic_battery 100.64.0.2
    traffic_battery fd00::2
    # Standard MTU: TCP leaves the kernel as TSO super-packets the daemon splits.
    offload_counters yes yes yes ""
    must "daemon A alive" kill -0 "$PIDA"; must "daemon B alive" kill -0 "$PIDB"
}

# Jumbo tunnel MTU over a 64 KiB underlay: TCP both ways, then the batching counters must show
# the offload paths in use (TUN GSO split on send, GRO on the TUN write, UDP GSO).
scenario_big_mtu_offload() {
    make_pair bm
    n "$A" ip link set "$VA" mtu 65535; n "$B" ip link set "$VB" mtu 65535
    tunnel vpn vpn 4 $((34816 - 1500 + 1420))
    if ! n "$A" timeout 10 ping -c 2 -i 0.2 -W 2 -s 20000 100.64.0.2; then
        n "$A" "$VPN" show "$WA"; n "$B" "$VPN" show "$WB"
        n "$A" ip -s link show "$WA"; n "$B" ip -s link show "$WB"
        fail "ping with 20000-byte payload"
    fi
    iperf_server "$B"
    traffic_battery 100.64.0.2
    # Segments of 34 KB leave the kernel unsplit; what must show is GRO and UDP GSO/GRO.
    offload_counters "" yes yes yes
}

# Under bulk traffic the reader carrying the light direction (the ACKs) becomes SCHED_BATCH and
# stops preempting the one carrying the data; the data readers stay SCHED_OTHER; a quiet tunnel
# puts every thread back to SCHED_OTHER so a lone packet is not delayed.
scenario_bulk_scheduling() {
    make_pair bs; tunnel vpn vpn 4
    iperf_server "$B"
    # Threads of a daemon by scheduling policy (field 41 of /proc/<pid>/task/<tid>/stat, the
    # 39th after the name; 3 = SCHED_BATCH): "name:policy ..." for the data-path threads.
    policies() {
        local t
        for t in /proc/"$1"/task/*; do
            echo "$(cat "$t/comm" 2>/dev/null):$(sed 's/.*) //' "$t/stat" 2>/dev/null | cut -d' ' -f39)"
        done | grep -E '^(tun-reader|receive|crypto-[0-9]+):' | sort | tr '\n' ' '
    }
    iperf "$A" -c 100.64.0.2 -t 5 >"$STATE/bs.json" &
    local ip=$! busy_a="" busy_b="" i
    sleep 1
    # Five looks, 0.4 s apart: an ACK reader that once reads 16 ACKs counts as heavy for a
    # moment (a slow debug build), so "marked" needs one look and "not marked" all of them.
    for i in 1 2 3 4 5; do
        busy_a+="$(policies "$PIDA")"; busy_b+="$(policies "$PIDB")"
        sleep 0.4
    done
    wait "$ip"
    echo "  during bulk: A $busy_a/ B $busy_b"
    [[ "$busy_a" == *"receive:3"* ]] || fail "A's ACK reader (receive) not SCHED_BATCH under bulk: $busy_a"
    [[ "$busy_a" != *"tun-reader:3"* ]] || fail "A's data reader (TUN) marked under bulk: $busy_a"
    [[ "$busy_b" == *"tun-reader:3"* ]] || fail "B's ACK reader (TUN) not SCHED_BATCH under bulk: $busy_b"
    [[ "$busy_b" != *"receive:3"* ]] || fail "B's data reader (receive) marked under bulk: $busy_b"
    sleep 0.5
    must "ping after bulk" n "$A" timeout 10 ping -c 3 -i 0.2 -W 2 100.64.0.2 >/dev/null
    must "ping back after bulk" n "$B" timeout 10 ping -c 3 -i 0.2 -W 2 100.64.0.1 >/dev/null
    local quiet_a quiet_b; quiet_a="$(policies "$PIDA")"; quiet_b="$(policies "$PIDB")"
    echo "  quiet again: A $quiet_a/ B $quiet_b"
    [[ "$quiet_a$quiet_b" != *":3 "* ]] || fail "a data-path thread stayed SCHED_BATCH on a quiet tunnel"
}

# offload_counters <tun split> <tun gro> <udp gso> <udp gro>: each "yes" must be non-zero in
# `vpn show` on A (sender of the forward run) or B; prints both batching sections.
offload_counters() {
    local sa sb
    sa="$(n "$A" "$VPN" show "$WA")"; sb="$(n "$B" "$VPN" show "$WB")"
    echo "$sa" | sed -n '/batching/,$p' | sed 's/^/  A /'; echo "$sb" | sed -n '/batching/,$p' | sed 's/^/  B /'
    local all="$sa$sb" v
    if [ "$1" = yes ]; then
        v="$(grep -o '[0-9.]*% split from GSO' <<<"$sa" | cut -d% -f1)"
        awk -v x="${v:-0}" 'BEGIN { exit !(x > 0) }' || fail "no TUN GSO super-packets split on the sender"
    fi
    if [ "$2" = yes ]; then
        v="$(grep -o '[0-9.]*% merged by GRO' <<<"$sb" | cut -d% -f1)"
        awk -v x="${v:-0}" 'BEGIN { exit !(x > 0) }' || fail "no GRO on the receiver's TUN writes"
    fi
    if [ "$3" = yes ]; then
        v="$(grep -o '[0-9]* GSO messages' <<<"$all" | cut -d' ' -f1 | awk '{ s += $1 } END { print s + 0 }')"
        [ "${v:-0}" -gt 0 ] || fail "no UDP GSO messages sent"
    fi
    if [ "$4" = yes ]; then
        v="$(grep -o '[0-9]* GRO super-datagrams' <<<"$all" | cut -d' ' -f1 | awk '{ s += $1 } END { print s + 0 }')"
        [ "${v:-0}" -gt 0 ] || fail "no UDP GRO super-datagrams received"
    fi
}

# Exact byte counters after pings (plaintext padded to 16 and capped at the MTU, +32 per
# transport packet; 148/92 for the handshake), as the kernel suite checks, and a handshake time.
scenario_counters() {
    make_pair ct; tunnel vpn vpn 4
    pad() { local p=$(( ($1 + 15) / 16 * 16 )); [ "$p" -gt 1420 ] && p=1420; echo $((p + 32)); }
    local exp=0 size fam ip hdr
    for spec in "4 56" "6 56" "4 1391" "6 1000"; do
        read -r fam size <<<"$spec"
        if [ "$fam" = 4 ]; then ip=100.64.0.2; hdr=28; else ip=fd00::2; hdr=48; fi
        # -w, not -W: once a reply has come back, -W waits only twice the largest RTT after the
        # last send, so a reply a busy debug daemon delays would count as lost.
        local out; out="$(n "$A" timeout 15 ping -"$fam" -f -c 10 -w 10 -s "$size" "$ip")" ||
            fail "ping -$fam -s $size: $out"
        contains "$out" " 10 received" || fail "ping -$fam -s $size lost packets: $out"
        exp=$((exp + 10 * $(pad $((size + hdr)))))
    done
    read -r _ rxa txa < <(n "$A" wg show "$WA" transfer)
    read -r _ rxb txb < <(n "$B" wg show "$WB" transfer)
    echo "  A rx=$rxa tx=$txa, B rx=$rxb tx=$txb; expected data $exp each way (+148/+92 handshake)"
    [ "$rxa" -eq $((exp + 92)) ] || fail "A rx $rxa != $((exp + 92))"
    [ "$txa" -eq $((exp + 148)) ] || [ "$txa" -eq $((exp + 148 + 32)) ] || fail "A tx $txa != $((exp + 148))"
    [ "$rxb" -eq $((exp + 148)) ] || [ "$rxb" -eq $((exp + 148 + 32)) ] || fail "B rx $rxb != $((exp + 148))"
    [ "$txb" -eq $((exp + 92)) ] || fail "B tx $txb != $((exp + 92))"
    [ "$rxb" -eq "$txa" ] && [ "$rxa" -eq "$txb" ] || fail "the two sides disagree"
    local t; t="$(handshake_time "$A" "$WA" "$PB")"
    [ "${t:-0}" -gt 0 ] || fail "latest handshake not set on A"
    awk -v t="$t" -v now="$(date +%s)" 'BEGIN { exit !(now - t < 60 && t <= now + 1) }' ||
        fail "latest handshake $t is not recent"
}

# One side changes its underlay address and listen port mid-traffic; the other follows after
# the next authenticated packet (wg show endpoints).
scenario_roaming_v4() { roaming 4 198.18.0.11 "198.18.0.11:51900"; }
scenario_roaming_v6() { roaming 6 fd00:18::11 "[fd00:18::11]:51900"; }
roaming() {
    local fam="$1" new="$2" want="$3" old
    make_pair "r$fam"; tunnel vpn vpn "$fam"
    must "first ping" ping4 "$A" 100.64.0.2
    n "$A" timeout 20 ping -i 0.05 -W 1 -c 200 100.64.0.2 >/dev/null 2>&1 &
    track_pid $!
    sleep 0.5
    if [ "$fam" = 6 ]; then old=fd00:18::1/64; else old=198.18.0.1/24; fi
    n "$A" ip addr add "$new/${old#*/}" dev "$VA" $([ "$fam" = 6 ] && echo nodad)
    n "$A" ip addr del "$old" dev "$VA"
    n "$A" wg set "$WA" listen-port 51900
    must "ping after the move" ping4 "$A" 100.64.0.2 3
    local ep; ep="$(endpoint_of "$B" "$WB" "$PA")"
    echo "  B's endpoint for A: $ep"
    [ "$ep" = "$want" ] || fail "B did not follow A: endpoint $ep, want $want"
    must "ping B->A after the move" ping4 "$B" 100.64.0.1
}

# Crypto-key routing as a reverse-path filter: A accepts 100.64.0.0/24 from B until a more
# specific 100.64.0.2/32 is given to another key; then B's packets from .2 are dropped, from
# .3 still accepted, and removing the other key restores .2.
scenario_cryptokey_routing() {
    make_pair kr; tunnel vpn vpn 4
    n "$A" wg set "$WA" peer "$PB" allowed-ips 100.64.0.0/24
    n "$B" ip addr add 100.64.0.3/24 dev "$WB"
    n "$B" wg set "$WB" peer "$PA" allowed-ips 100.64.0.0/24
    must "ping from .2 with the broad range" ping4 "$B" 100.64.0.1
    local other; other="$(wg genkey | wg pubkey)"
    n "$A" wg set "$WA" peer "$other" allowed-ips 100.64.0.2/32
    must_not "ping from .2 passed after .2/32 moved to another key" \
        n "$B" timeout 10 ping -c 2 -i 0.2 -W 1 -I 100.64.0.2 100.64.0.1 >/dev/null
    must "ping from .3 (still B's)" n "$B" timeout 10 ping -c 2 -i 0.2 -W 2 -I 100.64.0.3 100.64.0.1 >/dev/null
    n "$A" wg set "$WA" peer "$other" remove
    must "ping from .2 after the other key is removed" \
        n "$B" timeout 10 ping -c 2 -i 0.2 -W 2 -I 100.64.0.2 100.64.0.1 >/dev/null
}

# NAT: client C behind router R (nftables masquerade, conntrack UDP timeouts 2 s); the server S
# learns the translated endpoint; a 1 s persistent keepalive keeps the mapping, so S can still
# reach C after 3 s of silence.
# nat_lab <client> <router> <server>: three namespaces, the client 198.18.1.2/24 behind the
# router (198.18.1.1 and 198.19.0.1), which masquerades what it forwards to the server
# 198.19.0.2/24 (nftables). Sets R2 (the router's server-side veth).
nat_lab() {
    local C="$1" R="$2" S="$3"
    ns_add "$C"; ns_add "$R"; ns_add "$S"
    local c1 r1 r2 s1
    c1="$(ifname ${C}c)"; r1="$(ifname ${C}r1)"; r2="$(ifname ${C}r2)"; s1="$(ifname ${C}s)"
    R2="$r2"
    ip link add "$c1" netns "$(ns "$C")" type veth peer name "$r1" netns "$(ns "$R")"
    ip link add "$r2" netns "$(ns "$R")" type veth peer name "$s1" netns "$(ns "$S")"
    n "$C" ip addr add 198.18.1.2/24 dev "$c1"; n "$C" ip link set "$c1" up
    n "$R" ip addr add 198.18.1.1/24 dev "$r1"; n "$R" ip link set "$r1" up
    n "$R" ip addr add 198.19.0.1/24 dev "$r2"; n "$R" ip link set "$r2" up
    n "$S" ip addr add 198.19.0.2/24 dev "$s1"; n "$S" ip link set "$s1" up
    n "$C" ip route add default via 198.18.1.1
    n "$R" sysctl -qw net.ipv4.ip_forward=1
    n "$R" nft -f - <<NFT
table ip nat {
    chain post {
        type nat hook postrouting priority 100;
        oifname "$r2" masquerade
    }
}
NFT
}

scenario_nat() {
    local C=natc R=natr S=nats
    nat_lab "$C" "$R" "$S"
    n "$R" sysctl -qw net.netfilter.nf_conntrack_udp_timeout=2 net.netfilter.nf_conntrack_udp_timeout_stream=2
    # Neighbours resolved first: the client's keepalive sends the initiation at once.
    must "underlay C->S through the router" n "$C" timeout 5 ping -c 1 -W 2 198.19.0.2 >/dev/null
    A="$C"; B="$S"
    WA="$(ifname natc)"; WB="$(ifname nats)"
    KA="$(wg genkey)"; KB="$(wg genkey)"; PA="$(pubkey "$KA")"; PB="$(pubkey "$KB")"
    start_daemon vpn "$C" "$WA"; start_daemon vpn "$S" "$WB"
    # The server up first: the client's keepalive starts a handshake at once, and a lost
    # initiation is only retried after REKEY_TIMEOUT (5 s).
    n "$S" wg set "$WB" private-key <(echo "$KB") listen-port 51820 peer "$PA" allowed-ips 100.64.0.1/32
    tunnel_addrs "$S" 2 "$WB"
    n "$C" wg set "$WA" private-key <(echo "$KA") peer "$PB" endpoint 198.19.0.2:51820 \
        allowed-ips 100.64.0.2/32 persistent-keepalive 1
    tunnel_addrs "$C" 1 "$WA"
    must "ping client->server through NAT" ping4 "$C" 100.64.0.2
    local ep; ep="$(endpoint_of "$S" "$WB" "$PA")"
    echo "  server sees the client at $ep"
    [ "${ep%:*}" = 198.19.0.1 ] || fail "server did not learn the NATed endpoint (got $ep)"
    sleep 3
    must "ping server->client after 3 s (keepalive kept the mapping)" ping4 "$S" 100.64.0.1
}

# Sticky source, not too sticky: the client's underlay address is replaced (the old one removed)
# and traffic still flows both ways.
scenario_sticky_source_v4() { sticky 4 198.18.0.1/24 198.18.0.31/24 100.64.0.2; }
scenario_sticky_source_v6() { sticky 6 fd00:18::1/64 fd00:18::31/64 fd00::2; }
sticky() {
    local fam="$1" old="$2" new="$3" dst="$4"
    make_pair "s$fam"; tunnel vpn vpn "$fam"
    must "ping before" n "$A" timeout 10 ping -c 2 -i 0.2 -W 2 "$dst" >/dev/null
    n "$A" ip addr add "$new" dev "$VA" $([ "$fam" = 6 ] && echo nodad)
    n "$A" ip addr del "$old" dev "$VA"
    must "ping A->B after the source address was replaced" n "$A" timeout 10 ping -c 3 -i 0.2 -W 2 "$dst" >/dev/null
    must "ping B->A after the source address was replaced" ping4 "$B" 100.64.0.1
    local ep; ep="$(endpoint_of "$B" "$WB" "$PA")"
    echo "  B's endpoint for A: $ep"
    case "$ep" in *"${new%/*}"*) ;; *) fail "B still sends to $ep" ;; esac
    # A second address that is then removed: back to the first one.
    n "$A" ip addr add "$old" dev "$VA" $([ "$fam" = 6 ] && echo nodad)
    n "$A" ip addr del "$new" dev "$VA"
    must "ping after the address was removed again" n "$A" timeout 10 ping -c 3 -i 0.2 -W 2 "$dst" >/dev/null
}

# Key edge cases: private-key change then an immediate handshake; peer replacement; a peer
# with our own public key is ignored; low-order public keys never produce a datagram, even
# with a persistent keepalive and traffic routed to them.
scenario_keys() {
    make_pair ky; tunnel vpn vpn 4
    must "ping" ping4 "$A" 100.64.0.2
    local k2 p2; k2="$(wg genkey)"; p2="$(pubkey "$k2")"
    n "$A" wg set "$WA" private-key <(echo "$k2")
    [ "$(n "$A" wg show "$WA" public-key)" = "$p2" ] || fail "public key not updated"
    n "$B" wg set "$WB" peer "$PA" remove peer "$p2" endpoint 198.18.0.1:51820 allowed-ips 100.64.0.1/32,fd00::1/128
    must "ping right after the key change" ping4 "$A" 100.64.0.2
    [ "$(handshake_time "$B" "$WB" "$p2")" -gt 0 ] || fail "no handshake with the new key"
    [ "$(n "$B" wg show "$WB" peers | wc -l)" -eq 1 ] || fail "replaced peer still listed"
    # Our own public key as a peer: ignored.
    n "$A" wg set "$WA" peer "$p2" allowed-ips 100.64.0.99/32 || true
    must_not "a peer with our own public key was added" sh -c "ip netns exec $(ns "$A") wg show $WA peers | grep -qF '$p2'"
    # Low-order points (the kernel suite's list) aimed at a counting port in B.
    local lo
    for lo in AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA= AQAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA= \
        4Ot6fDtBuK4WVuP68Z/EatoJjeucMrH9hmIFFl9JuAA= X5yVvKNQjCSx0LFVnIPvWwREXMRYHI6G2CJO3dCfEVc= \
        7P///////////////////////////////////////38= 7f///////////////////////////////////////38= \
        7v///////////////////////////////////////38=; do
        n "$A" wg set "$WA" peer "$lo" persistent-keepalive 1 endpoint 198.18.0.2:1111
    done
    n "$A" wg set "$WA" peer AQAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA= allowed-ips 100.64.0.77/32
    local cnt="$STATE/lowcount"
    n "$B" timeout 10 "$HOSTILE" count 198.18.0.2:1111 3 >"$cnt" &
    local cpid=$!; track_pid "$cpid"
    sleep 0.3
    n "$A" timeout 5 ping -c 3 -i 0.3 -W 1 100.64.0.77 >/dev/null 2>&1 || true
    wait "$cpid"
    echo "  low-order peers: $(cat "$cnt")"
    grep -q '^count: 0 datagrams' "$cnt" || fail "a low-order peer sent traffic: $(cat "$cnt")"
    n "$A" wg show "$WA" transfer | awk -v good="$PB" '$1 != good && $1 != "'"$p2"'" && $3 != 0 { bad = 1 } END { exit bad }' ||
        fail "a low-order peer has tx bytes"
    must "tunnel still up" ping4 "$A" 100.64.0.2
}

# Interop: vpn (A) against another implementation (B). A initiates, traffic both ways; then B
# loses its session (peer removed and re-added) and initiates; then A does the same. Every new
# handshake must show in both sides' latest-handshake.
scenario_interop_wireguard_go() { interop wggo; }
scenario_interop_boringtun() { interop boringtun; }
interop() {
    make_pair "i${1:0:2}"; tunnel vpn "$1" 4
    must "A->B ping (A initiates)" ping4 "$A" 100.64.0.2
    must "B->A ping" ping4 "$B" 100.64.0.1
    must "A->B ping v6" ping6 "$A" fd00::2
    iperf_server "$B"
    local bps dir
    for dir in "" "-R"; do
        bps="$(iperf "$A" -c 100.64.0.2 -t 2 $dir | iperf_field tcp_bps)"
        echo "  tcp vpn->$1 ${dir:-fwd}: $(mbps "$bps") Mbit/s"
        awk -v b="${bps:-0}" 'BEGIN { exit !(b > 1e6) }' || fail "TCP $dir carried nothing"
    done
    local h1 h2 h3 side
    h1="$(handshake_time "$A" "$WA" "$PB")"
    for side in B A; do
        sleep 1.1
        if [ "$side" = B ]; then
            n "$B" wg set "$WB" peer "$PA" remove
            n "$B" wg set "$WB" peer "$PA" endpoint 198.18.0.1:51820 allowed-ips 100.64.0.1/32,fd00::1/128
            must "B->A ping (B initiates)" ping4 "$B" 100.64.0.1 3
        else
            n "$A" wg set "$WA" peer "$PB" remove
            n "$A" wg set "$WA" peer "$PB" endpoint 198.18.0.2:51820 allowed-ips 100.64.0.2/32,fd00::2/128
            must "A->B ping (A initiates again)" ping4 "$A" 100.64.0.2 3
        fi
        h2="$(handshake_time "$A" "$WA" "$PB")"; h3="$(handshake_time "$B" "$WB" "$PA")"
        echo "  after $side initiated: handshake at A $h2 (was $h1), at B $h3"
        [ "${h2:-0}" -gt "${h1:-0}" ] || fail "no new handshake seen by A after $side initiated"
        # boringtun-cli reports the time since the handshake, not its time: check only others.
        [ "$1" = boringtun ] || [ "${h3:-0}" -gt "${h1:-0}" ] || fail "no new handshake seen by B after $side initiated"
        h1="$h2"
    done
    must "A->B ping v6 after rekeys" ping6 "$A" fd00::2
    must "B->A ping v6 after rekeys" ping6 "$B" fd00::1
}

# `wg setconf` then `wg showconf` gives the same content (peers, keys, endpoints, keepalive,
# 300 allowed IPs in one peer); `wg show` reports the fields.
scenario_wg_fidelity() {
    ns_add wf
    local w; w="$(ifname wf)"
    start_daemon vpn wf "$w"
    local k psk p1 p2 p3 conf="$STATE/wf.conf"
    k="$(wg genkey)"; psk="$(wg genpsk)"
    p1="$(wg genkey | wg pubkey)"; p2="$(wg genkey | wg pubkey)"; p3="$(wg genkey | wg pubkey)"
    local many; many="$(for i in $(seq 0 299); do printf '100.65.%d.%d/32, ' $((i / 250)) $((i % 250 + 1)); done)"
    cat >"$conf" <<CONF
[Interface]
ListenPort = 51999
FwMark = 0x1234
PrivateKey = $k

[Peer]
PublicKey = $p1
PresharedKey = $psk
AllowedIPs = 100.64.1.0/24, fd00:1::/64
Endpoint = 198.18.5.5:51820
PersistentKeepalive = 25

[Peer]
PublicKey = $p2
AllowedIPs = ${many%, }
Endpoint = [fd00:18::5]:4444

[Peer]
PublicKey = $p3
AllowedIPs = 0.0.0.0/0
CONF
    n wf wg setconf "$w" "$conf"
    local got="$STATE/wf.got"
    n wf wg showconf "$w" >"$got"
    # Compare content: one line per section with its keys, allowed IPs sorted.
    canon() {
        awk '/^\[/ { if (sec != "") print sec; sec = $0; next }
             /=/ { sub(/ = /, "="); if ($0 ~ /^AllowedIPs=/) { sub(/^AllowedIPs=/, ""); n = split($0, a, /, */);
                     for (i = 1; i <= n; i++) print "  " a[i] > "/dev/stderr"; $0 = "AllowedIPs=" n }
                   sec = sec "|" $0 }
             END { print sec }' "$1" 2>"$1.ips" | sort
        sort "$1.ips"
    }
    diff <(canon "$conf") <(canon "$got") || fail "showconf differs from setconf (diff above)"
    local show; show="$(n wf wg show "$w")"
    contains "$show" "public key: $(pubkey "$k")" || fail "wg show: public key"
    contains "$show" "private key: (hidden)" || fail "wg show: private key line"
    contains "$show" "listening port: 51999" || fail "wg show: listening port"
    contains "$show" "fwmark: 0x1234" || fail "wg show: fwmark"
    contains "$show" "persistent keepalive: every 25 seconds" || fail "wg show: keepalive"
    contains "$show" "preshared key: (hidden)" || fail "wg show: preshared key"
    contains "$show" "endpoint: [fd00:18::5]:4444" || fail "wg show: IPv6 endpoint"
    ! contains "$show" "latest handshake" || fail "wg show: handshake reported for peers that never handshook"
    [ "$(n wf wg show "$w" peers | wc -l)" -eq 3 ] || fail "wg show peers"
    [ "$(n wf wg show "$w" private-key)" = "$k" ] || fail "wg show private-key"
    [ "$(n wf wg show "$w" preshared-keys | awk -v p="$p1" '$1 == p { print $2 }')" = "$psk" ] || fail "wg show preshared-keys"
    [ "$(n wf wg show "$w" allowed-ips | awk -v p="$p2" '$1 == p { print NF - 1 }')" -eq 300 ] || fail "wg show allowed-ips"
    # A second setconf replaces everything: one peer left.
    printf '[Interface]\nPrivateKey = %s\n\n[Peer]\nPublicKey = %s\nAllowedIPs = 100.64.2.0/24\n' "$k" "$p3" >"$conf"
    n wf wg setconf "$w" "$conf"
    [ "$(n wf wg show "$w" peers)" = "$p3" ] || fail "setconf did not replace the peers"
}

# Hostile input while the tunnel carries traffic: a relay that duplicates and replays every
# datagram both ways, random/truncated/oversized datagrams at both listen ports, malformed UAPI
# requests with idle connections held open. The daemons stay up and answer `wg`, the tunnel
# keeps working, replays are counted as drops, and RSS stops growing.
scenario_hostile() {
    make_pair h; tunnel vpn vpn 4
    # A reaches B only through the replaying relay at 198.18.0.2:40000 (inside B).
    n "$B" timeout 50 "$HOSTILE" relay 198.18.0.2:40000 127.0.0.1:51820 40 >"$STATE/relay.out" &
    track_pid $!
    sleep 0.3
    n "$A" wg set "$WA" peer "$PB" endpoint 198.18.0.2:40000
    must "ping through the relay" ping4 "$A" 100.64.0.2 3
    iperf_server "$B" 60
    iperf "$A" -c 100.64.0.2 -t 2 >/dev/null || fail "warm-up iperf3"
    local rss0 rss1 rss2 phase
    rss0="$(rss_kib "$PIDB")"
    for phase in 1 2; do
        n "$A" timeout 15 "$HOSTILE" spray 198.18.0.2:51820 5 >"$STATE/spray$phase.out" &
        local sp1=$!; track_pid "$sp1"
        n "$B" timeout 15 "$HOSTILE" spray 198.18.0.1:51820 5 >"$STATE/sprayb$phase.out" &
        local sp2=$!; track_pid "$sp2"
        n "$B" timeout 15 "$HOSTILE" uapi "$SOCK_DIR/$WB.sock" 5 2 >"$STATE/uapi$phase.out" &
        local upid=$!; track_pid "$upid"
        sleep 0.5
        must "wg show answers while idle UAPI connections are held" timeout 5 wg show "$WB" >/dev/null
        local bps; bps="$(iperf "$A" -c 100.64.0.2 -t 3 | iperf_field tcp_bps)"
        echo "  phase $phase: tcp under attack $(mbps "$bps") Mbit/s"
        awk -v b="${bps:-0}" 'BEGIN { exit !(b > 1e5) }' || fail "no TCP throughput under attack"
        wait "$upid" || fail "uapi tool: $(cat "$STATE/uapi$phase.out")"
        wait "$sp1" "$sp2"
        must "daemon A alive" kill -0 "$PIDA"; must "daemon B alive" kill -0 "$PIDB"
        [ "$phase" = 1 ] && rss1="$(rss_kib "$PIDB")"
    done
    rss2="$(rss_kib "$PIDB")"
    cat "$STATE/spray1.out" "$STATE/uapi1.out"
    echo "  B's RSS: $rss0 KiB after warm-up, $rss1 after phase 1, $rss2 after phase 2"
    [ $((rss2 - rss1)) -lt 8192 ] || fail "RSS grew by $((rss2 - rss1)) KiB in the second phase"
    pings_both_ways
    local drops; drops="$(n "$B" "$VPN" show "$WB" | grep 'drops:')"
    echo "  B $drops"
    [[ "$drops" =~ replay\ [1-9] ]] || fail "replayed datagrams not counted as replay drops"
    cat "$STATE/relay.out" 2>/dev/null || true
}

# shellcheck source=hardening.sh
source "$HERE/hardening.sh"
# shellcheck source=netstack.sh
source "$HERE/netstack.sh"
# shellcheck source=android.sh
source "$HERE/android.sh"
# shellcheck source=sandbox.sh
source "$HERE/sandbox.sh"

# --- runner --------------------------------------------------------------------------------

# Removes every namespace created so far (with whatever runs in it) and forgets it.
scenario_cleanup() {
    set +e
    local names; names="$(cat "$STATE/ns")"
    : >"$STATE/ns"
    [ -n "$names" ] && ns_del $(for x in $names; do echo "${x#"$NS_PREFIX"}"; done)
    return 0
}

ALL=(basic_v4_underlay basic_v6_underlay big_mtu_offload bulk_scheduling counters roaming_v4 roaming_v6
    cryptokey_routing nat sticky_source_v4 sticky_source_v6 keys interop_wireguard_go
    interop_boringtun wg_fidelity hostile "${HARDENING[@]}" "${NETSTACK[@]}" "${ANDROID[@]}" "${SANDBOX[@]}")
if [ "$#" -gt 0 ]; then SELECTED=("$@"); else SELECTED=("${ALL[@]}"); fi

# The netstack scenarios move 512 MiB through a debug build's userspace TCP: more time.
scenario_timeout() { case "$1" in netstack_*|android_*) echo $((SCENARIO_TIMEOUT * 4)) ;; *) echo "$SCENARIO_TIMEOUT" ;; esac; }

passed=0; failed=0; failed_names=()
for s in "${SELECTED[@]}"; do
    declare -F "scenario_$s" >/dev/null || { echo "unknown scenario $s" >&2; failed=$((failed + 1)); continue; }
    log="$STATE/$s.scenario.log"
    start=$(date +%s)
    touch "$STATE/$s.start"
    # A subshell per scenario: its own namespaces, removed when it ends (pass, fail or timeout).
    # Every daemon runs under its seccomp filter: a call outside it, named in a daemon's log,
    # fails the scenario even where the test did not notice the daemon stop.
    (
        trap scenario_cleanup EXIT
        set -e
        "scenario_$s"
        seccomp_reports_since "$STATE/$s.start"
    ) >"$log" 2>&1 &
    spid=$!
    # The watchdog's sleep dies with it: a sleep left behind would hold the caller's pipe
    # (`make test | tee`) open until it ran out.
    ( trap 'kill "$nap" 2>/dev/null; exit 0' TERM
      sleep "$(scenario_timeout "$s")" & nap=$!
      wait "$nap"; kill -TERM "$spid" 2>/dev/null ) &
    wpid=$!
    wait "$spid"; rc=$?
    kill "$wpid" 2>/dev/null; wait "$wpid" 2>/dev/null
    scenario_cleanup  # again, in case a timeout killed the subshell before its trap ran
    secs=$(( $(date +%s) - start ))
    if [ "$rc" -eq 0 ]; then
        passed=$((passed + 1)); echo "PASS $s (${secs}s)"
        grep -E '^  ' "$log" || true
    else
        failed=$((failed + 1)); failed_names+=("$s")
        [ "$rc" -eq 143 ] && echo "FAIL $s (timed out after ${SCENARIO_TIMEOUT}s)" || echo "FAIL $s (${secs}s)"
        sed 's/^/    | /' "$log" | tail -40
    fi
done
[ "$failed" -gt 0 ] && echo "failed: ${failed_names[*]}"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
