# Hardening scenarios of the netns suite (sourced by run.sh, which defines fail/must/ping4 and
# the runner): route MTU and padding, routing loops, `ping -I` and fwmark policy routing, ICMP
# errors through a NAT router, and deleting the namespaces that hold the TUN or the socket.
# The kernel's own netns.sh checks the same things for the in-kernel WireGuard.

HARDENING=(mtu_padding routing_loop ping_dev_fwmark nat_icmp netns_delete inherited_fds anti_spoofing route_change route_change_v6)

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

# A namespace "$1" on its own veth to A: 198.18.$2.2/24 and fd00:18:$2::2/64 (A has .1 and ::1),
# its routes to the tunnel networks via A.
namespace_on_a() {
    local C="$1" net="$2" c1 a1
    c1="$(ifname "${C}c")"; a1="$(ifname "${C}r")"
    ns_add "$C"
    ip link add "$c1" netns "$(ns "$C")" type veth peer name "$a1" netns "$(ns "$A")"
    n "$C" ip addr add "198.18.$net.2/24" dev "$c1"; n "$C" ip addr add "fd00:18:$net::2/64" dev "$c1" nodad
    n "$A" ip addr add "198.18.$net.1/24" dev "$a1"; n "$A" ip addr add "fd00:18:$net::1/64" dev "$a1" nodad
    n "$C" ip link set "$c1" up; n "$A" ip link set "$a1" up
    n "$C" ip route add 100.64.0.0/24 via "198.18.$net.1"
    n "$C" ip -6 route add fd00::/64 via "fd00:18:$net::1"
}

# A client namespace "$1" behind A (from make_pair/tunnel): veth 198.18.2.0/24 and
# fd00:18:2::/64, routes to the tunnel networks via A, A forwarding, B routing the client's
# networks back into its tunnel (and allowing them from A).
client_behind_a() {
    local C="$1"
    namespace_on_a "$C" 2
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

# Nested tunnels and a routing loop. A second tunnel (100.65.0.0/24) runs inside the first one
# (its endpoint is B's tunnel address) and carries traffic. Then the outer tunnel's endpoint is
# moved inside itself, as the kernel suite does: every datagram A sends to B would re-enter A's
# TUN and be sealed again. A 10-packet flood must not turn into a storm (the outer counters grow
# by less than the kernel suite's 70 000-byte bound and stop growing at once), the daemon stays
# up, and both tunnels carry traffic again once the endpoint is fixed.
scenario_routing_loop() {
    make_pair rl; tunnel vpn vpn 4
    must "outer tunnel" ping4 "$A" 100.64.0.2
    local WA2 WB2 KA2 KB2
    WA2="$(ifname rla2)"; WB2="$(ifname rlb2)"
    KA2="$(wg genkey)"; KB2="$(wg genkey)"
    start_daemon vpn "$A" "$WA2"; start_daemon vpn "$B" "$WB2"
    n "$A" wg set "$WA2" private-key <(echo "$KA2") listen-port 51821 \
        peer "$(pubkey "$KB2")" endpoint 100.64.0.2:51821 allowed-ips 100.65.0.2/32
    n "$B" wg set "$WB2" private-key <(echo "$KB2") listen-port 51821 \
        peer "$(pubkey "$KA2")" endpoint 100.64.0.1:51821 allowed-ips 100.65.0.1/32
    n "$A" ip addr add 100.65.0.1/24 dev "$WA2"; n "$A" ip link set "$WA2" mtu 1340 up
    n "$B" ip addr add 100.65.0.2/24 dev "$WB2"; n "$B" ip link set "$WB2" mtu 1340 up
    must "nested tunnel A->B" ping4 "$A" 100.65.0.2
    must "nested tunnel B->A" ping4 "$B" 100.65.0.1
    must "nested tunnel, full-size packets" n "$A" timeout 10 ping -c 2 -i 0.2 -W 2 -M do -s $((1340 - 28)) 100.65.0.2 >/dev/null
    # The loop: the outer endpoint is B's tunnel address, reached only through the outer tunnel.
    n "$A" wg set "$WA" peer "$PB" endpoint 100.64.0.2:51820
    local tx0 tx1 tx2 c0 c1 reads0 reads1
    read -r tx0 _ < <(peer_transfer "$A" "$WA")
    c0="$(cpu_ticks "$PIDA")"
    reads0="$(n "$A" "$VPN" show "$WA" | grep -c . || true)"
    n "$A" timeout 15 ping -f -c 10 -W 1 100.64.0.2 >/dev/null 2>&1 && fail "a ping passed through the loop"
    sleep 1
    read -r tx1 _ < <(peer_transfer "$A" "$WA")
    sleep 2
    read -r tx2 _ < <(peer_transfer "$A" "$WA")
    c1="$(cpu_ticks "$PIDA")"
    echo "  loop: A's tx grew by $((tx1 - tx0)) bytes during a 10-packet flood, then by $((tx2 - tx1)) in 2 s; daemon CPU $((c1 - c0)) ticks; loop drops $(vpn_drops "$A" "$WA" loop)"
    [ $((tx1 - tx0)) -lt 70000 ] || fail "a storm: $((tx1 - tx0)) bytes sent into the loop"
    [ "$tx2" -eq "$tx1" ] || fail "still sending into the loop after the flood ($((tx2 - tx1)) bytes in 2 s)"
    must "daemon A alive" kill -0 "$PIDA"
    # Fixed: the endpoint on the underlay again.
    n "$A" wg set "$WA" peer "$PB" endpoint "$EPB"
    must "outer tunnel after the loop" ping4 "$A" 100.64.0.2 3
    must "nested tunnel after the loop" ping4 "$A" 100.65.0.2 3
}

# `ping -I` through a specific interface, and wg-quick's fwmark policy routing. `ping -I <wg>`
# to B's underlay address (bound to the tunnel interface, sk_bound_dev_if) goes through the
# tunnel while the daemon's own datagrams to that same address take the veth. Then every
# route of A points into the tunnel (table 51820 for everything without the mark, the main
# table's specific routes only) and the daemon marks its socket: a flood of pings and a TCP
# transfer pass, the mark is seen on the daemon's datagrams, and the daemon's datagrams never
# re-enter the TUN. Without the mark the same setup is a loop: dropped, nothing passes; with
# the mark back, traffic flows again.
scenario_ping_dev_fwmark() {
    make_pair pf; tunnel vpn vpn 4
    must "ping" ping4 "$A" 100.64.0.2
    n "$A" wg set "$WA" peer "$PB" allowed-ips 100.64.0.2/32,fd00::2/128,198.18.0.2/32
    local rx0 rx1
    read -r _ rx0 < <(peer_transfer "$B" "$WB")
    must "ping -I <tunnel> to B's underlay address" \
        n "$A" timeout 10 ping -I "$WA" -c 3 -i 0.2 -W 2 198.18.0.2 >/dev/null
    read -r _ rx1 < <(peer_transfer "$B" "$WB")
    echo "  ping -I $WA 198.18.0.2: B received $((rx1 - rx0)) bytes through the tunnel"
    [ $((rx1 - rx0)) -ge $((3 * 128)) ] || fail "ping -I did not go through the tunnel"
    must "ping -I <veth> to B's underlay address" n "$A" timeout 10 ping -I "$VA" -c 2 -i 0.2 -W 2 198.18.0.2 >/dev/null
    # wg-quick's policy routing for a default route through the tunnel, with B's endpoint
    # reached by A's default route (198.19.5.2 on B's veth), as on a real host.
    n "$B" ip addr add 198.19.5.2/32 dev "$VB"
    n "$B" ip addr add 198.18.9.2/32 dev "$WB"
    n "$A" ip route add default dev "$VA"
    n "$A" wg set "$WA" fwmark 51820 peer "$PB" endpoint 198.19.5.2:51820 allowed-ips 0.0.0.0/0,::/0
    n "$A" ip route add default dev "$WA" table 51820
    n "$A" ip rule add not fwmark 51820 table 51820
    n "$A" ip rule add table main suppress_prefixlength 0
    n "$A" nft -f - <<NFT
table inet hrdmark {
    chain out {
        type filter hook output priority 0;
        udp dport 51820 meta mark 51820 counter
        udp dport 51820 meta mark != 51820 counter
    }
}
NFT
    [ "$(n "$A" ip route get 198.19.5.2 | grep -o "dev [^ ]*")" = "dev $WA" ] || fail "unmarked traffic to B's endpoint is not routed into the tunnel"
    [ "$(n "$A" ip route get 198.19.5.2 mark 51820 | grep -o "dev [^ ]*")" = "dev $VA" ] || fail "marked traffic to B's endpoint is not routed to the veth"
    must "ping B's endpoint address through the tunnel" ping4 "$A" 198.19.5.2
    must "ping an address only B's tunnel has" ping4 "$A" 198.18.9.2
    local out; out="$(n "$A" timeout 20 ping -f -c 2000 -W 1 100.64.0.2 2>&1)" || true
    echo "  flood under policy routing: $(grep -o '[0-9]* received, [0-9.]*% packet loss' <<<"$out")"
    contains "$out" " 0% packet loss" || contains "$out" " 0.0% packet loss" || fail "flood ping lost packets: $out"
    iperf_server "$B"
    local bps; bps="$(iperf "$A" -c 198.19.5.2 -t 2 | iperf_field tcp_bps)"
    echo "  tcp to B's endpoint address through the tunnel: $(mbps "$bps") Mbit/s"
    awk -v b="${bps:-0}" 'BEGIN { exit !(b > 1e6) }' || fail "TCP through the tunnel carried nothing"
    local counters marked unmarked
    counters="$(n "$A" nft list chain inet hrdmark out)"
    marked="$(grep 'mark 0x0000ca6c counter' <<<"$counters" | grep -o 'packets [0-9]*' | cut -d' ' -f2)"
    unmarked="$(grep 'mark != 0x0000ca6c counter' <<<"$counters" | grep -o 'packets [0-9]*' | cut -d' ' -f2)"
    echo "  daemon datagrams to port 51820: $marked marked, $unmarked unmarked; loop drops $(vpn_drops "$A" "$WA" loop)"
    [ "${marked:-0}" -gt 2000 ] || fail "the daemon's datagrams are not marked ($marked)"
    [ "${unmarked:-1}" -eq 0 ] || fail "$unmarked unmarked datagrams to port 51820"
    [ "$(vpn_drops "$A" "$WA" loop)" -eq 0 ] || fail "a datagram looped although the socket is marked"
    # Without the mark the daemon's own datagrams enter the tunnel: a loop, dropped at once.
    n "$A" wg set "$WA" fwmark 0
    must_not "ping passed with the mark removed" n "$A" timeout 10 ping -c 3 -i 0.2 -W 1 100.64.0.2 >/dev/null
    local drops; drops="$(vpn_drops "$A" "$WA" loop)"
    echo "  without the mark: loop drops $drops"
    [ "$drops" -ge 3 ] || fail "looping datagrams not dropped ($drops)"
    n "$A" wg set "$WA" fwmark 51820
    must "ping with the mark back" ping4 "$A" 100.64.0.2 3
}

# ICMP errors through a NAT router (client C, router R masquerading, server S; the server's
# daemon uses connected sockets, on which an ICMP error becomes a socket error). An inner ICMP
# error (port unreachable from S's kernel) comes back to C through the tunnel and the NAT. Then
# C's daemon moves to another port: S's datagrams to the old mapping are answered by C's kernel
# with port unreachable, which R translates back to S's socket; S's daemon stays up, and once C
# speaks from the new port S follows it and traffic flows both ways again.
scenario_nat_icmp() {
    local C=nic R=nir S=nis
    nat_lab "$C" "$R" "$S"
    n "$R" nft -f - <<NFT
table inet hrdicmp {
    chain forward_errors {
        type filter hook forward priority 0;
        oifname "$R2" icmp type destination-unreachable counter
    }
}
NFT
    must "underlay C->S through the router" n "$C" timeout 5 ping -c 1 -W 2 198.19.0.2 >/dev/null
    A="$C"; B="$S"
    WA="$(ifname nicw)"; WB="$(ifname nisw)"
    KA="$(wg genkey)"; KB="$(wg genkey)"; PA="$(pubkey "$KA")"; PB="$(pubkey "$KB")"
    start_daemon vpn "$C" "$WA"; PIDA=$DAEMON_PID
    VPN_CONNECTED_SOCKETS=1 start_daemon vpn "$S" "$WB"; PIDB=$DAEMON_PID
    n "$S" wg set "$WB" private-key <(echo "$KB") listen-port 51820 peer "$PA" allowed-ips 100.64.0.1/32
    tunnel_addrs "$S" 2 "$WB"
    n "$C" wg set "$WA" private-key <(echo "$KA") listen-port 51820 peer "$PB" endpoint 198.19.0.2:51820 \
        allowed-ips 100.64.0.2/32
    tunnel_addrs "$C" 1 "$WA"
    must "ping client->server through NAT" ping4 "$C" 100.64.0.2
    must "ping server->client through NAT" ping4 "$S" 100.64.0.1
    # Inner: UDP to a closed port of S's tunnel address; bash's /dev/udp socket is connected,
    # so the port unreachable S's kernel sends back fails the second write.
    local out
    out="$(n "$C" timeout 5 bash -c 'exec 3>/dev/udp/100.64.0.2/9; echo a >&3; sleep 0.5; echo b >&3' 2>&1)" &&
        fail "no ICMP port unreachable came back through the tunnel"
    echo "  inner UDP to a closed port: $(echo "$out" | grep -o 'Connection refused' | head -1)"
    contains "$out" "Connection refused" || fail "inner ICMP error not delivered: $out"
    # Outer: C's daemon leaves the port R's mapping points at.
    n "$C" wg set "$WA" listen-port 51999
    n "$S" timeout 10 ping -c 3 -i 0.3 -W 1 100.64.0.1 >/dev/null 2>&1 || true
    local errors
    errors="$(n "$R" nft list chain inet hrdicmp forward_errors | grep -o 'packets [0-9]*' | cut -d' ' -f2)"
    echo "  port unreachable errors R forwarded to S: ${errors:-0}"
    [ "${errors:-0}" -gt 0 ] || fail "no ICMP error reached S (the scenario did not exercise it)"
    must "server daemon alive after ICMP errors" kill -0 "$PIDB"
    must "server answers wg" n "$S" wg show "$WB" >/dev/null
    must "ping client->server from the new port" ping4 "$C" 100.64.0.2 3
    local ep; ep="$(endpoint_of "$S" "$WB" "$PA")"
    echo "  server follows the client to $ep"
    must "ping server->client after the move" ping4 "$S" 100.64.0.1 3
    must "inner traffic both ways again" ping4 "$C" 100.64.0.2
}

# Deleting the namespaces that hold the TUN and the socket. The daemon runs in D (its UDP and
# UAPI sockets are there) with its TUN moved into T (as wireguard-go's netns.sh runs it), peer E
# behind a veth. D's name is deleted first: the kernel keeps D while the daemon is in it and it
# still answers on its UAPI socket. The TUN is brought up in T after it moved, where the
# daemon's netlink listener (in D) cannot see it: the daemon notices it through the TUN
# descriptor itself (as wireguard-go's probe does) and traffic flows from T, before and after
# D's name is deleted. Then T is deleted, destroying the TUN: the daemon must stop by itself,
# cleanly (exit status 0, UAPI socket removed), and leave nothing behind: once it has exited, D
# is freed, which the kernel shows by removing the veth end in E (any process, thread or fd left
# in D would keep D, and so that veth, alive).
scenario_netns_delete() {
    local D=ndd T=ndt E=nde
    ns_add "$D"; ns_add "$T"; ns_add "$E"
    local vd ve; vd="$(ifname ndvd)"; ve="$(ifname ndve)"
    ip link add "$vd" netns "$(ns "$D")" type veth peer name "$ve" netns "$(ns "$E")"
    n "$D" ip addr add 198.18.0.1/24 dev "$vd"; n "$D" ip link set "$vd" up
    n "$E" ip addr add 198.18.0.2/24 dev "$ve"; n "$E" ip link set "$ve" up
    local WD WE KD KE
    WD="$(ifname ndw)"; WE="$(ifname new)"
    KD="$(wg genkey)"; KE="$(wg genkey)"
    start_daemon vpn "$D" "$WD"; local pid=$DAEMON_PID
    start_daemon vpn "$E" "$WE"
    n "$D" wg set "$WD" private-key <(echo "$KD") listen-port 51820 \
        peer "$(pubkey "$KE")" endpoint 198.18.0.2:51820 allowed-ips 100.64.0.2/32
    n "$E" wg set "$WE" private-key <(echo "$KE") listen-port 51820 \
        peer "$(pubkey "$KD")" endpoint 198.18.0.1:51820 allowed-ips 100.64.0.1/32
    tunnel_addrs "$E" 2 "$WE"
    ip -n "$(ns "$D")" link set "$WD" netns "$(ns "$T")"
    tunnel_addrs "$T" 1 "$WD"
    must "daemon alive after its TUN moved" kill -0 "$pid"
    wait_for "grep -q 'another network namespace: Up' $STATE/$WD.log" 5 ||
        fail "the daemon did not notice its TUN came up in another namespace: $(cat "$STATE/$WD.log")"
    must "ping from the TUN's namespace" ping4 "$T" 100.64.0.2 3
    must "ping to the TUN's namespace" ping4 "$E" 100.64.0.1 3
    echo "  TUN up in another namespace: seen by the daemon, pings pass both ways"
    echo "  daemon: $(ls /proc/"$pid"/task | wc -l) threads, $(ls /proc/"$pid"/fd | wc -l) fds"
    ip netns del "$(ns "$D")"
    must "daemon alive after its namespace's name was deleted" kill -0 "$pid"
    must "ping after D's name was deleted" ping4 "$T" 100.64.0.2
    must "wg answers on the UAPI socket" wg show "$WD" >/dev/null
    ip netns del "$(ns "$T")"
    wait_for "! kill -0 $pid" 10 || fail "the daemon kept running after its TUN was destroyed"
    local rc=0; wait "$pid" || rc=$?
    local log="$STATE/$WD.log"
    echo "  after T was deleted the daemon exited with status $rc: $(tail -1 "$log" | sed 's/.*INFO //')"
    [ "$rc" -eq 0 ] || fail "daemon exit status $rc: $(cat "$log")"
    ! grep -q panicked "$log" || fail "the daemon panicked: $(cat "$log")"
    [ ! -e "$SOCK_DIR/$WD.sock" ] || fail "UAPI socket left behind"
    wait_for "! n $E ip link show $ve" 20 || fail "D is still alive (its veth end is still in E): something holds it"
    echo "  D freed: its veth end is gone from E"
    must "E's daemon unaffected" n "$E" wg show "$WE" >/dev/null
}

# Started with inherited descriptors, as a supervisor starts wireguard-go: a small supervisor
# (fdpass.py) opens the TUN and the listening UAPI socket in A and exec()s the daemon with
# WG_TUN_FD and WG_UAPI_FD. `wg` configures it through that socket, traffic flows both ways
# (plain TUN and one with the virtio-net header), the daemon uses the descriptors it was given
# (it made no interface of its own) and stops cleanly on SIGTERM. Then every kind of bad descriptor
# (not a number, stdio, closed, not a TUN, not a listening Unix stream socket) stops the daemon
# at start with an error naming the variable and a non-zero status, in the foreground and
# through the detaching parent, never a panic.
scenario_inherited_fds() {
    make_pair fd
    local FDPASS="$HERE/fdpass.py" spec
    WA="$(ifname fdaw)"; WB="$(ifname fdbw)"
    KA="$(wg genkey)"; KB="$(wg genkey)"; PA="$(pubkey "$KA")"; PB="$(pubkey "$KB")"
    start_daemon vpn "$B" "$WB"
    n "$B" wg set "$WB" private-key <(echo "$KB") listen-port 51820 \
        peer "$PA" endpoint 198.18.0.1:51820 allowed-ips 100.64.0.1/32,fd00::1/128
    tunnel_addrs "$B" 2 "$WB"
    for spec in tun tun-vnet; do
        local sock="$SOCK_DIR/$WA.sock" log="$STATE/$WA.$spec.log"
        echo "$sock" >>"$STATE/socks"
        # The supervisor names the daemon something else: the TUN's own name wins, as in
        # wireguard-go, and the UAPI socket is the supervisor's.
        (exec ip netns exec "$(ns "$A")" python3 "$FDPASS" --tun "$spec:$WA" --uapi "listen:$sock" \
            -- "$VPN" --foreground "$(ifname fdxx)" >"$log" 2>&1) &
        local pid=$!; track_pid "$pid"
        wait_for "grep -q 'device started' $log" 10 || fail "$spec: daemon did not start: $(cat "$log")"
        # The inherited descriptor is the daemon's TUN, and it made no interface of its own.
        local tunfd; tunfd="$(tr '\0' '\n' <"/proc/$pid/environ" | sed -n 's/^WG_TUN_FD=//p')"
        [ "$(readlink "/proc/$pid/fd/$tunfd")" = /dev/net/tun ] || fail "$spec: fd $tunfd is not the TUN in the daemon"
        grep -q "iff:.*$WA" "/proc/$pid/fdinfo/$tunfd" || fail "$spec: fd $tunfd is not attached to $WA"
        ! n "$A" ip link show "$(ifname fdxx)" >/dev/null 2>&1 || fail "$spec: the daemon created a TUN of its own"
        n "$A" wg set "$WA" private-key <(echo "$KA") listen-port 51820 \
            peer "$PB" endpoint 198.18.0.2:51820 allowed-ips 100.64.0.2/32,fd00::2/128
        tunnel_addrs "$A" 1 "$WA"
        must "$spec: ping A->B through inherited fds" ping4 "$A" 100.64.0.2
        must "$spec: ping B->A through inherited fds" ping4 "$B" 100.64.0.1
        must "$spec: ping -6 A->B through inherited fds" ping6 "$A" fd00::2
        [ "$(n "$A" wg show "$WA" public-key)" = "$PA" ] || fail "$spec: wg show through the inherited socket"
        echo "  $spec: daemon $pid on inherited TUN and UAPI fds; pings both ways"
        kill -TERM "$pid"
        wait_for "! kill -0 $pid" 10 || fail "$spec: daemon did not stop on SIGTERM"
        local rc=0; wait "$pid" || rc=$?
        [ "$rc" -eq 0 ] || fail "$spec: exit status $rc: $(cat "$log")"
        [ ! -e "$sock" ] || fail "$spec: UAPI socket left behind"
        # The TUN was the supervisor's (non-persistent): gone with the last descriptor.
        wait_for "! n $A ip link show $WA" 5 || fail "$spec: TUN still there after the daemon exited"
    done
    # Bad descriptors: <tun spec> <uapi spec> <expected words>.
    local sock="$SOCK_DIR/$(ifname fdbad).sock"
    echo "$sock" >>"$STATE/socks"
    local cases=(
        "text:abc|listen:$sock|WG_TUN_FD=\"abc\" is not a file descriptor number"
        "text:-3|listen:$sock|WG_TUN_FD=\"-3\" is not a file descriptor number"
        "text:1|listen:$sock|WG_TUN_FD=1: fd 1 is standard input, output or error"
        "closed|listen:$sock|is not open in this process"
        "file|listen:$sock|not a usable TUN device"
        "udp|listen:$sock|not a usable TUN device"
        "unattached|listen:$sock|not a usable TUN device"
        "tun:$(ifname fdbad)|text:x1|WG_UAPI_FD=\"x1\" is not a file descriptor number"
        "tun:$(ifname fdbad)|closed|is not open in this process"
        "tun:$(ifname fdbad)|file|not a socket"
        "tun:$(ifname fdbad)|udp|not a Unix socket"
        "tun:$(ifname fdbad)|dgram:$sock|not a stream socket"
        "tun:$(ifname fdbad)|unlistened:$sock|not listening"
    )
    local c t u want out rc mode fg checked=0
    for c in "${cases[@]}"; do
        IFS='|' read -r t u want <<<"$c"
        for mode in foreground detached; do
            fg=(--foreground); [ "$mode" = detached ] && fg=()
            rc=0
            out="$(n "$A" timeout 10 python3 "$FDPASS" --tun "$t" --uapi "$u" -- "$VPN" "${fg[@]}" "$(ifname fdbad)" 2>&1)" || rc=$?
            [ "$rc" -ne 0 ] || fail "$mode WG_TUN_FD=$t WG_UAPI_FD=$u: the daemon started"
            [ "$rc" -ne 124 ] || fail "$mode WG_TUN_FD=$t WG_UAPI_FD=$u: still running after 10 s"
            ! contains "$out" "panicked" || fail "$mode $t/$u: panic: $out"
            contains "$out" "$want" || fail "$mode $t/$u: expected \"$want\", got: $out"
            checked=$((checked + 1))
        done
        echo "  refused ($t, $u): $(echo "$out" | head -1)"
    done
    echo "  $checked bad starts refused with a clear error and a non-zero status"
    must_not "a TUN left after the refused starts" n "$A" ip link show "$(ifname fdbad)" 2>/dev/null
}

# `vpn up` with a default route installs wg-quick's anti-spoofing rules and `vpn down` removes
# them. A (vpn up, AllowedIPs 0.0.0.0/0 and ::/0) reaches B through the tunnel; X, on a second
# veth of A, sends pings to A's tunnel addresses (100.64.0.1, fd00::1) through that veth: they
# must be dropped while the rules are in place, with nftables and (nft out of PATH) with
# iptables; the same pings pass once the rules are gone (so the rules are what dropped them).
# Without either tool `vpn up` refuses with a clear message and leaves nothing behind.
scenario_anti_spoofing() {
    make_pair as
    local X=asx
    WA="$(ifname asaw)"; WB="$(ifname asbw)"
    KA="$(wg genkey)"; KB="$(wg genkey)"; PA="$(pubkey "$KA")"; PB="$(pubkey "$KB")"
    start_daemon vpn "$B" "$WB"
    n "$B" wg set "$WB" private-key <(echo "$KB") listen-port 51820 peer "$PA" allowed-ips 100.64.0.1/32,fd00::1/128
    tunnel_addrs "$B" 2 "$WB"
    namespace_on_a "$X" 3
    local conf="$STATE/$WA.conf"
    cat >"$conf" <<CONF
[Interface]
PrivateKey = $KA
Address = 100.64.0.1/24, fd00::1/64
ListenPort = 51820

[Peer]
PublicKey = $PB
Endpoint = 198.18.0.2:51820
AllowedIPs = 0.0.0.0/0, ::/0
CONF
    chmod 600 "$conf"
    echo "$SOCK_DIR/$WA.sock" >>"$STATE/socks"
    must "ping X->A's veth address" n "$X" timeout 5 ping -c 1 -W 2 198.18.3.1 >/dev/null
    # PATH directories with only the tools `vpn up` runs: one without nft, one without either.
    local bin_ipt="$STATE/bin-iptables" bin_none="$STATE/bin-none" t
    mkdir -p "$bin_ipt" "$bin_none"
    for t in ip sysctl sh; do ln -sf "$(command -v "$t")" "$bin_ipt/$t"; ln -sf "$(command -v "$t")" "$bin_none/$t"; done
    for t in iptables-restore ip6tables-restore iptables-save ip6tables-save; do
        command -v "$t" >/dev/null || fail "$t is not installed (apt-get install iptables)"
        ln -sf "$(command -v "$t")" "$bin_ipt/$t"
    done
    local out rc=0
    out="$(n "$A" env PATH="$bin_none" "$VPN" up "$conf" 2>&1)" || rc=$?
    echo "  no firewall tool: vpn up exits $rc: $(echo "$out" | tail -1)"
    [ "$rc" -ne 0 ] || fail "vpn up succeeded without nft or iptables"
    contains "$out" "neither nft (package nftables) nor iptables-restore" || fail "unclear message: $out"
    contains "$out" "nothing was changed" || fail "unclear message: $out"
    ! n "$A" ip link show "$WA" >/dev/null 2>&1 || fail "link $WA left behind"
    [ ! -e "$SOCK_DIR/$WA.sock" ] || fail "UAPI socket left behind"
    local rules; rules="$(n "$A" ip rule show)"
    ! contains "$rules" 51820 && ! contains "$rules" 0xca6c || fail "policy rules left behind: $rules"
    [ -z "$(ip netns pids "$(ns "$A")")" ] || fail "a process left running in A"
    local mode
    for mode in nft iptables nft-removed; do
        local path="$PATH"; [ "$mode" = iptables ] && path="$bin_ipt"
        n "$A" env PATH="$path" "$VPN" up "$conf" >"$STATE/up.$mode.log" 2>&1 || fail "$mode: vpn up: $(cat "$STATE/up.$mode.log")"
        case "$mode" in
            nft|nft-removed)
                rules="$(n "$A" nft list table ip "wg-quick-$WA")"
                contains "$rules" "iifname != \"$WA\" ip daddr 100.64.0.1 fib saddr type != local drop" ||
                    fail "nft: no IPv4 anti-spoofing rule: $rules"
                rules="$(n "$A" nft list table ip6 "wg-quick-$WA")"
                contains "$rules" "iifname != \"$WA\" ip6 daddr fd00::1 fib saddr type != local drop" ||
                    fail "nft: no IPv6 anti-spoofing rule: $rules" ;;
            iptables)
                rules="$(n "$A" nft list tables 2>/dev/null)"
                ! contains "$rules" "wg-quick-$WA" || fail "iptables mode used nft"
                rules="$(n "$A" iptables-save -t raw)"
                contains "$rules" "-A PREROUTING -d 100.64.0.1/32 ! -i $WA -m addrtype ! --src-type LOCAL -m comment --comment \"wg-quick(8) rule for $WA\" -j DROP" ||
                    fail "iptables: no IPv4 anti-spoofing rule: $rules"
                rules="$(n "$A" ip6tables-save -t raw)"
                contains "$rules" "-A PREROUTING -d fd00::1/128 ! -i $WA -m addrtype ! --src-type LOCAL -m comment --comment \"wg-quick(8) rule for $WA\" -j DROP" ||
                    fail "iptables: no IPv6 anti-spoofing rule: $rules" ;;
        esac
        must "$mode: ping A->B through the default route" ping4 "$A" 100.64.0.2
        must "$mode: ping -6 A->B through the default route" ping6 "$A" fd00::2
        must "$mode: ping B->A" ping4 "$B" 100.64.0.1
        if [ "$mode" = nft-removed ]; then
            # The control: the same topology without the rules delivers the spoofed pings.
            n "$A" nft delete table ip "wg-quick-$WA"; n "$A" nft delete table ip6 "wg-quick-$WA"
            must "$mode: X's ping to A's tunnel address passes without the rules" \
                n "$X" timeout 5 ping -c 1 -W 2 100.64.0.1 >/dev/null
            must "$mode: X's ping -6 to A's tunnel address passes without the rules" \
                n "$X" timeout 5 ping -6 -c 1 -W 2 fd00::1 >/dev/null
            echo "  without the rules X reaches A's tunnel addresses (the control)"
        else
            must_not "$mode: a spoofed ping from X to A's tunnel address was answered" \
                n "$X" timeout 5 ping -c 2 -i 0.3 -W 1 100.64.0.1 >/dev/null
            must_not "$mode: a spoofed ping -6 from X to A's tunnel address was answered" \
                n "$X" timeout 5 ping -6 -c 2 -i 0.3 -W 1 fd00::1 >/dev/null
            must "$mode: X still reaches A's veth address" n "$X" timeout 5 ping -c 1 -W 2 198.18.3.1 >/dev/null
            echo "  $mode: packets to the tunnel addresses from X's interface dropped, tunnel traffic passes"
        fi
        n "$A" env PATH="$path" "$VPN" down "$conf" >"$STATE/down.$mode.log" 2>&1 || fail "$mode: vpn down: $(cat "$STATE/down.$mode.log")"
        rules="$(n "$A" nft list tables 2>/dev/null; n "$A" iptables-save 2>/dev/null; n "$A" ip6tables-save 2>/dev/null)"
        ! contains "$rules" "wg-quick-$WA" || fail "$mode: nft table left after vpn down: $rules"
        ! contains "$rules" "wg-quick(8) rule for $WA" || fail "$mode: iptables rules left after vpn down: $rules"
        rules="$(n "$A" ip rule show)"
        ! contains "$rules" 51820 && ! contains "$rules" 0xca6c || fail "$mode: policy rules left after vpn down: $rules"
        wait_for "[ ! -e $SOCK_DIR/$WA.sock ]" 5 || fail "$mode: daemon still running after vpn down"
    done
    echo "  vpn down removed the rules each time"
}

# Route and address changes clear stale sticky sources. A reaches B's endpoint (198.19.9.2 on
# B's loopback) over a first veth; A's sticky source is 198.18.0.1 on that veth. Mid-traffic
# the route to B moves to a second veth and the first path stops carrying B's port (B drops it
# on arrival): a datagram still sent from the old source and interface would leave through the
# dead path (the kernel takes a source's interface as on-link), so the tunnel recovers only if
# the daemon notices the change, lets the routing table pick the new source, and B follows it.
# Then the address in use is removed (a secondary one on the same veth takes over): traffic
# flows again from the remaining address. `route_change_v6` does the same over an IPv6 underlay
# (wireguard-go's listener checks IPv4 endpoints only).
scenario_route_change() { route_change 4; }
scenario_route_change_v6() { route_change 6; }
# route_change <4|6>: the underlay family (the tunnel addresses stay IPv4).
route_change() {
    local fam="$1" a1 a2 a2b b1 b2 ep0 len nd=()
    if [ "$fam" = 6 ]; then
        a1=fd00:18::1 a2=fd00:18:1::1 a2b=fd00:18:1::11 b1=fd00:18::2 b2=fd00:18:1::2 ep0=fd00:19::2 len=64 nd=(nodad)
    else
        a1=198.18.0.1 a2=198.18.1.1 a2b=198.18.1.11 b1=198.18.0.2 b2=198.18.1.2 ep0=198.19.9.2 len=24
    fi
    hp() { if [ "$fam" = 6 ]; then echo "[$1]:$2"; else echo "$1:$2"; fi; }
    make_pair "rc$fam"
    local VA2 VB2 i
    VA2="$(ifname rc${fam}a2)"; VB2="$(ifname rc${fam}b2)"
    ip link add "$VA2" netns "$(ns "$A")" type veth peer name "$VB2" netns "$(ns "$B")"
    n "$A" ip addr add "$a2/$len" dev "$VA2" "${nd[@]}"; n "$A" ip addr add "$a2b/$len" dev "$VA2" "${nd[@]}"
    n "$B" ip addr add "$b2/$len" dev "$VB2" "${nd[@]}"
    n "$A" ip link set "$VA2" up; n "$B" ip link set "$VB2" up
    n "$B" ip addr add "$ep0" dev lo "${nd[@]}"
    n "$A" ip route add "$ep0" via "$b1" dev "$VA"
    WA="$(ifname rc${fam}aw)"; WB="$(ifname rc${fam}bw)"
    KA="$(wg genkey)"; KB="$(wg genkey)"; PA="$(pubkey "$KA")"; PB="$(pubkey "$KB")"
    start_daemon vpn "$A" "$WA"; PIDA=$DAEMON_PID
    start_daemon vpn "$B" "$WB"
    n "$A" wg set "$WA" private-key <(echo "$KA") listen-port 51820 \
        peer "$PB" endpoint "$(hp "$ep0" 51820)" allowed-ips 100.64.0.2/32
    n "$B" wg set "$WB" private-key <(echo "$KB") listen-port 51820 peer "$PA" allowed-ips 100.64.0.1/32
    tunnel_addrs "$A" 1 "$WA"; tunnel_addrs "$B" 2 "$WB"
    must "ping over the first path" ping4 "$A" 100.64.0.2
    must "ping back over the first path" ping4 "$B" 100.64.0.1
    local ep; ep="$(endpoint_of "$B" "$WB" "$PA")"
    [ "$ep" = "$(hp "$a1" 51820)" ] || fail "B sees A at $ep before the change"
    # Traffic while the route changes: a ping every 0.1 s, bounded.
    n "$A" timeout 20 ping -i 0.1 -c 150 -W 1 100.64.0.2 >"$STATE/rc.ping" 2>&1 &
    local ppid=$!; track_pid "$ppid"
    sleep 1
    n "$B" nft -f - <<NFT
table inet rcdead {
    chain in { type filter hook prerouting priority -300; iifname "$VB" udp dport 51820 counter drop; }
}
NFT
    n "$A" ip route replace "$ep0" via "$b2" dev "$VA2"
    for i in $(seq 1 40); do
        ep="$(endpoint_of "$B" "$WB" "$PA")"
        [ "$ep" = "$(hp "$a2" 51820)" ] || [ "$ep" = "$(hp "$a2b" 51820)" ] && break
        sleep 0.25
    done
    echo "  route to B moved to the second veth: B sees A at $ep"
    [ "$ep" = "$(hp "$a2" 51820)" ] || [ "$ep" = "$(hp "$a2b" 51820)" ] || fail "A kept its old source: B sees A at $ep"
    must "ping A->B over the new path" n "$A" timeout 10 ping -c 3 -i 0.2 -W 2 100.64.0.2 >/dev/null
    must "ping B->A over the new path" ping4 "$B" 100.64.0.1
    local dropped; dropped="$(n "$B" nft list chain inet rcdead in | grep -o 'packets [0-9]*' | cut -d' ' -f2)"
    wait "$ppid" 2>/dev/null || true
    echo "  during the change: $(grep -o '[0-9]* received, [0-9.]*% packet loss' "$STATE/rc.ping"); $dropped datagrams hit the dead path"
    # The address in use removed: the other one on the same veth takes over (IPv4 picks the
    # primary, IPv6 may pick either).
    local used="$a2" other="$a2b"
    [ "$ep" = "$(hp "$a2b" 51820)" ] && used="$a2b" other="$a2"
    n "$A" ip addr del "$used/$len" dev "$VA2"
    must "ping A->B after the address in use was removed" n "$A" timeout 10 ping -c 3 -i 0.2 -W 2 100.64.0.2 >/dev/null
    ep="$(endpoint_of "$B" "$WB" "$PA")"
    echo "  address $used removed: B sees A at $ep"
    [ "$ep" = "$(hp "$other" 51820)" ] || fail "B sees A at $ep after the address was removed"
    must "ping B->A after the address was removed" ping4 "$B" 100.64.0.1
    must "daemon A alive" kill -0 "$PIDA"
}
