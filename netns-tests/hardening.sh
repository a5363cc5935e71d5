# Hardening scenarios of the netns suite (sourced by run.sh, which defines fail/must/ping4 and
# the runner): route MTU and padding, routing loops, `ping -I` and fwmark policy routing, ICMP
# errors through a NAT router, and deleting the namespaces that hold the TUN or the socket.
# The kernel's own netns.sh checks the same things for the in-kernel WireGuard.

HARDENING=(mtu_padding)

# Plaintext on the wire for an inner packet of $1 bytes under TUN MTU $2: padded to a multiple
# of 16 but never beyond the MTU, plus the 32-byte transport header and tag.
wire_len() {
    local p=$(( ($1 + 15) / 16 * 16 ))
    [ "$p" -gt "$2" ] && p="$2"
    echo $((p + 32))
}

# tx and rx bytes of the one peer of interface $2 in namespace $1: "tx rx".
peer_transfer() { n "$1" wg show "$2" transfer | awk 'NR == 1 { print $3, $2 }'; }

# A drop counter of `vpn show` ("drops: loop 3, no route 1"): vpn_drops <ns> <ifname> <name>.
vpn_drops() {
    n "$1" "$VPN" show "$2" | awk -v k="$3" '/drops:/ {
        sub(/.*drops: /, ""); n = split($0, a, /, /)
        for (i = 1; i <= n; i++) { v = a[i]; sub(/ [0-9]+$/, "", v); if (v == k) { sub(/.* /, "", a[i]); print a[i]; exit } }
    }' | grep . || echo 0
}

# A client namespace "$1" behind A (from make_pair/tunnel): veth 198.18.2.0/24 and
# fd00:18:2::/64, routes to the tunnel networks via A, A forwarding, B routing the client's
# networks back into its tunnel (and allowing them from A).
client_behind_a() {
    local C="$1" c1 a1
    c1="$(ifname "${C}c")"; a1="$(ifname "${C}r")"
    ns_add "$C"
    ip link add "$c1" netns "$(ns "$C")" type veth peer name "$a1" netns "$(ns "$A")"
    n "$C" ip addr add 198.18.2.2/24 dev "$c1"; n "$C" ip addr add fd00:18:2::2/64 dev "$c1" nodad
    n "$A" ip addr add 198.18.2.1/24 dev "$a1"; n "$A" ip addr add fd00:18:2::1/64 dev "$a1" nodad
    n "$C" ip link set "$c1" up; n "$A" ip link set "$a1" up
    n "$C" ip route add 100.64.0.0/24 via 198.18.2.1
    n "$C" ip -6 route add fd00::/64 via fd00:18:2::1
    n "$A" sysctl -qw net.ipv4.ip_forward=1 net.ipv6.conf.all.forwarding=1
    n "$B" wg set "$WB" peer "$PA" allowed-ips 100.64.0.1/32,fd00::1/128,198.18.2.0/24,fd00:18:2::/64
    n "$B" ip route add 198.18.2.0/24 dev "$WB"
    n "$B" ip -6 route add fd00:18:2::/64 dev "$WB"
}

# Route MTU and padding. A client C pings through A's tunnel to B with DF set, IP sizes from
# MTU-28 to MTU+28: every size up to the MTU passes, every larger one gets ICMP "fragmentation
# needed" (IPv6 "packet too big") from A naming the tunnel MTU, and A's byte counters grow by
# exactly the padded sizes (a multiple of 16, capped at the MTU, +32). Then a route MTU below
# the TUN's (A's kernel answers with that MTU) and a TUN MTU change at run time (the padding cap
# follows it).
scenario_mtu_padding() {
    make_pair mp; tunnel vpn vpn 4
    local C=mpc mtu=1420
    client_behind_a "$C"
    must "ping C->B through the tunnel" n "$C" timeout 10 ping -c 2 -i 0.2 -W 2 100.64.0.2 >/dev/null
    must "ping -6 C->B through the tunnel" n "$C" timeout 10 ping -6 -c 2 -i 0.2 -W 2 fd00::2 >/dev/null
    local tx0 rx0 tx1 rx1 exp=0 len out passed=0 icmp=0
    read -r tx0 rx0 < <(peer_transfer "$A" "$WA")
    for len in $(seq $((mtu - 28)) $((mtu + 28))); do
        out="$(n "$C" timeout 5 ping -c 1 -W 2 -M do -s $((len - 28)) 100.64.0.2 2>&1)" || true
        if [ "$len" -le "$mtu" ]; then
            contains "$out" " 1 received" || fail "IPv4 packet of $len bytes (MTU $mtu) lost: $out"
            exp=$((exp + $(wire_len "$len" "$mtu")))
            passed=$((passed + 1))
        else
            contains "$out" "Frag needed and DF set (mtu = $mtu)" ||
                fail "IPv4 packet of $len bytes: no ICMP fragmentation needed with mtu $mtu: $out"
            icmp=$((icmp + 1))
            # Forget the learnt path MTU, so the next size is answered by A again.
            n "$C" ip route flush cache
        fi
    done
    read -r tx1 rx1 < <(peer_transfer "$A" "$WA")
    echo "  IPv4 sizes $((mtu - 28))..$((mtu + 28)) with DF: $passed passed, $icmp got ICMP frag needed (mtu $mtu)"
    echo "  A's counters: tx +$((tx1 - tx0)) rx +$((rx1 - rx0)), expected $exp each (padding to 16, cap $mtu)"
    [ $((tx1 - tx0)) -eq "$exp" ] || fail "A tx grew by $((tx1 - tx0)), expected $exp"
    [ $((rx1 - rx0)) -eq "$exp" ] || fail "A rx grew by $((rx1 - rx0)), expected $exp"
    # IPv6 at the edge: 40-byte header + 8-byte ICMPv6 header.
    for len in $((mtu - 1)) "$mtu"; do
        must "IPv6 packet of $len bytes" n "$C" timeout 5 ping -6 -c 1 -W 2 -M do -s $((len - 48)) fd00::2 >/dev/null
    done
    out="$(n "$C" timeout 5 ping -6 -c 1 -W 2 -M do -s $((mtu + 1 - 48)) fd00::2 2>&1)" || true
    contains "$out" "Packet too big: mtu=$mtu" || fail "IPv6 packet of $((mtu + 1)) bytes: no packet too big: $out"
    # A's own packets: its kernel refuses a DF packet above the TUN MTU locally.
    out="$(n "$A" timeout 5 ping -c 1 -W 2 -M do -s $((mtu + 1 - 28)) 100.64.0.2 2>&1)" || true
    contains "$out" "mtu=$mtu" || fail "A's own oversized DF ping: $out"
    # A route MTU below the TUN MTU: A's kernel answers with it. The padding cap stays the TUN
    # MTU (a TUN reader cannot see the route a packet took): 1299 bytes go out as 1312 + 32.
    n "$A" ip route add 100.64.0.2/32 dev "$WA" mtu 1299
    read -r tx0 rx0 < <(peer_transfer "$A" "$WA")
    must "1299 bytes under route MTU 1299" n "$C" timeout 5 ping -c 1 -W 2 -M do -s $((1299 - 28)) 100.64.0.2 >/dev/null
    read -r tx1 rx1 < <(peer_transfer "$A" "$WA")
    [ $((tx1 - tx0)) -eq "$(wire_len 1299 "$mtu")" ] || fail "1299 bytes sent as $((tx1 - tx0)) on the wire"
    n "$C" ip route flush cache
    out="$(n "$C" timeout 5 ping -c 1 -W 2 -M do -s $((1300 - 28)) 100.64.0.2 2>&1)" || true
    contains "$out" "Frag needed and DF set (mtu = 1299)" || fail "route MTU 1299 not reported: $out"
    n "$A" ip route del 100.64.0.2/32 dev "$WA"
    # The TUN MTU lowered at run time to 1300 (not a multiple of 16): a 1300-byte packet is
    # padded to 1300, not 1312, once the daemon has seen the change; B still pads to 1312.
    n "$A" ip link set "$WA" mtu 1300
    n "$C" ip route flush cache
    local want i got=0; want="$(wire_len 1300 1300)"
    # The daemon learns the MTU from a netlink event: a few tries.
    for i in 1 2 3 4 5 6 7 8 9 10; do
        read -r tx0 rx0 < <(peer_transfer "$A" "$WA")
        n "$C" timeout 5 ping -c 1 -W 2 -M do -s 1272 100.64.0.2 >/dev/null || true
        read -r tx1 rx1 < <(peer_transfer "$A" "$WA")
        got=$((tx1 - tx0)); [ "$got" -eq "$want" ] && break
        sleep 0.5
    done
    [ "$got" -eq "$want" ] || fail "after MTU 1300 a 1300-byte packet went out as $got, expected $want"
    read -r tx0 rx0 < <(peer_transfer "$A" "$WA")
    n "$C" timeout 5 ping -c 1 -W 2 -M do -s 1272 100.64.0.2 >/dev/null
    read -r tx1 rx1 < <(peer_transfer "$A" "$WA")
    echo "  TUN MTU 1300: a 1300-byte packet is sent as $((tx1 - tx0)), its reply received as $((rx1 - rx0))"
    [ $((rx1 - rx0)) -eq "$(wire_len 1300 "$mtu")" ] || fail "B's reply arrived as $((rx1 - rx0))"
    out="$(n "$C" timeout 5 ping -c 1 -W 2 -M do -s $((1301 - 28)) 100.64.0.2 2>&1)" || true
    contains "$out" "mtu = 1300" || fail "MTU 1300 not reported to the client: $out"
}
