# The tunnel without a TUN, in network namespaces (sourced by run.sh): `vpn proxy` and
# `vpn forward` run as an unprivileged user (uid 65534, no capabilities, no TUN) in namespace A
# against a `vpn` daemon or wireguard-go with a real TUN in namespace B. B serves HTTP (a
# checked byte pattern), UDP echo and DNS (dnsmasq: peer.test is 100.64.0.2 and fd00::2).
#
# Checked: curl through SOCKS5 with --socks5-hostname (the name resolved by B's dnsmasq through
# the tunnel) and through the HTTP proxy (plain and CONNECT), 256 MiB each way with SHA-256,
# SOCKS5 UDP ASSOCIATE, username/password, IPv4 and IPv6, -L and -R forwards for TCP and UDP.

NSPEER="$HERE/netstack_peer.py"
NS_BIG=$((256 << 20))

# Runs a command in namespace $1 in the background, bounded by the scenario's timeout.
ns_bg() {
    local s="$1"; shift
    (exec timeout "$((SCENARIO_TIMEOUT * 4))" ip netns exec "$(ns "$s")" "$@" >>"$STATE/bg.log" 2>&1) &
    track_pid $!
}
# The same as uid 65534.
ns_bg_nobody() { local s="$1"; shift; ns_bg "$s" "${NOBODY[@]}" "$@"; }
# A command in namespace $1 as uid 65534, in the foreground.
nobody() { local s="$1"; shift; ip netns exec "$(ns "$s")" "${NOBODY[@]}" "$@"; }

# netstack_lab <vpn|wggo>: the peer daemon in $B with the services; in $A only a config file
# owned by uid 65534 (mode 600) and the vpn binary where that user can run it. Sets CONF, NSVPN.
netstack_lab() {
    local kind="$1"
    make_pair "n${kind:0:2}"
    WB="$(ifname "${B}")"
    KA="$(wg genkey)"; KB="$(wg genkey)"; PA="$(pubkey "$KA")"; PB="$(pubkey "$KB")"
    start_daemon "$kind" "$B" "$WB"; PIDB=$DAEMON_PID
    n "$B" wg set "$WB" private-key <(echo "$KB") listen-port 51820 \
        peer "$PA" allowed-ips 100.64.0.1/32,fd00::1/128
    tunnel_addrs "$B" 2 "$WB"
    # What uid 65534 may reach: the state directory (traverse only) and its own directory.
    nobody_home
    local home="$NOBODY_HOME"
    install -m 644 "$NSPEER" "$home/peer.py"
    NSVPN="$home/vpn"; NSPY="$home/peer.py"
    CONF="$home/tunnel.conf"
    cat >"$CONF" <<EOF
[Interface]
PrivateKey = $KA
Address = 100.64.0.1/32, fd00::1/128
DNS = 100.64.0.2
MTU = 1420

[Peer]
PublicKey = $PB
Endpoint = 198.18.0.2:51820
AllowedIPs = 100.64.0.0/24, fd00::/64
EOF
    chown -R 65534:65534 "$home"; chmod 700 "$home"; chmod 600 "$CONF"
    ns_bg "$B" "$PY" "$NSPY" http 100.64.0.2 8080
    ns_bg "$B" "$PY" "$NSPY" http fd00::2 8080
    ns_bg "$B" "$PY" "$NSPY" udp-echo 100.64.0.2 7777
    ns_bg "$B" "$PY" "$NSPY" udp-echo fd00::2 7777
    ns_bg "$B" dnsmasq --keep-in-foreground --conf-file=/dev/null --no-resolv --no-hosts \
        --bind-interfaces --listen-address=100.64.0.2 --port=53 --pid-file="$STATE/dnsmasq.pid" \
        --address=/peer.test/100.64.0.2 --address=/peer.test/fd00::2
    must "B's HTTP server" wait_for "n $B ss -ltn | grep -q '100.64.0.2:8080 '" 10
    must "B's DNS server" wait_for "n $B ss -lun | grep -q '100.64.0.2:53 '" 10
}

# Waits for a TCP listener on 127.0.0.1:$2 in namespace $1.
wait_listen() { wait_for "n $1 ss -ltn | grep -q '127.0.0.1:$2 '" "${3:-15}"; }

# curl in $A as uid 65534, bounded; extra arguments pass through.
ns_curl() { nobody "$A" timeout 120 curl -sS --fail --max-time 110 "$@"; }

# Checks that $1 (a curl download of the pattern, arguments after) gets $2 bytes intact.
check_download() {
    local n="$1" want got; shift
    want="$("$PY" "$NSPEER" pattern-sha "$n")"
    got="$(ns_curl "$@" | sha256sum | cut -d' ' -f1)"
    [ "$got" = "$want" ] || fail "download of $n bytes ($*): sha256 $got, want $want"
}

# Checks that an upload of $1 bytes of the pattern (curl arguments after) arrives intact.
check_upload() {
    local n="$1" want got; shift
    want="$("$PY" "$NSPEER" pattern-sha "$n")"
    got="$("$PY" "$NSPEER" pattern "$n" | ns_curl -T - "$@")"
    [ "$got" = "$want" ] || fail "upload of $n bytes ($*): sha256 $got, want $want"
}

# Seconds since the epoch with decimals, for the transfer rates we print.
now_s() { date +%s.%N; }
rate() { awk -v n="$1" -v a="$2" -v b="$3" 'BEGIN { printf "%.0f Mbit/s", n * 8 / (b - a) / 1e6 }'; }

scenario_netstack_proxy_vpn() { netstack_proxy vpn; }
scenario_netstack_proxy_wireguard_go() { netstack_proxy wggo; }
netstack_proxy() {
    netstack_lab "$1"
    ns_bg_nobody "$A" "$NSVPN" proxy "$CONF" --socks5 127.0.0.1:1080 --http 127.0.0.1:8118
    must "vpn proxy listens (SOCKS5)" wait_listen "$A" 1080
    must "vpn proxy listens (HTTP)" wait_listen "$A" 8118
    local s5=(--socks5-hostname 127.0.0.1:1080)
    # The first request waits for the handshake; then the names, both families, both proxies.
    must "SOCKS5 by name" wait_for "ns_curl ${s5[*]} -o /dev/null http://peer.test:8080/bytes/1000" 20
    check_download 1000000 "${s5[@]}" http://peer.test:8080/bytes/1000000
    check_download 1000000 "${s5[@]}" "http://[fd00::2]:8080/bytes/1000000"
    check_download 1000000 -x http://127.0.0.1:8118 http://peer.test:8080/bytes/1000000
    check_download 1000000 -p -x http://127.0.0.1:8118 "http://[fd00::2]:8080/bytes/1000000"
    local t0 t1
    t0="$(now_s)"; check_download "$NS_BIG" "${s5[@]}" "http://peer.test:8080/bytes/$NS_BIG"; t1="$(now_s)"
    echo "  256 MiB down through SOCKS5: $(rate "$NS_BIG" "$t0" "$t1")"
    t0="$(now_s)"; check_upload "$NS_BIG" "${s5[@]}" http://peer.test:8080/sha256; t1="$(now_s)"
    echo "  256 MiB up through SOCKS5: $(rate "$NS_BIG" "$t0" "$t1")"
    check_upload 1000000 -p -x http://127.0.0.1:8118 "http://[fd00::2]:8080/sha256"
    must "SOCKS5 UDP ASSOCIATE echo v4" nobody "$A" timeout 60 "$PY" "$NSPY" socks-udp 1080 100.64.0.2 7777
    must "SOCKS5 UDP ASSOCIATE echo v6" nobody "$A" timeout 60 "$PY" "$NSPY" socks-udp 1080 fd00::2 7777
    # A name nobody serves is the proxy's error, not a hang.
    must_not "SOCKS5 to a name dnsmasq does not know" ns_curl "${s5[@]}" -o /dev/null http://nowhere.test:8080/
    # Credentials: a second proxy that asks for them.
    ns_bg_nobody "$A" "$NSVPN" proxy "$CONF" --socks5 127.0.0.1:1081 --http 127.0.0.1:8119 \
        --username alice --password 's3cret'
    must "authenticating proxy listens" wait_listen "$A" 1081
    must "SOCKS5 with the password" wait_for "ns_curl --socks5-hostname alice:s3cret@127.0.0.1:1081 -o /dev/null http://peer.test:8080/bytes/10" 20
    must_not "SOCKS5 with a wrong password" ns_curl --socks5-hostname alice:wrong@127.0.0.1:1081 -o /dev/null http://peer.test:8080/bytes/10
    must_not "SOCKS5 without credentials" ns_curl --socks5-hostname 127.0.0.1:1081 -o /dev/null http://peer.test:8080/bytes/10
    check_download 1000 -x http://alice:s3cret@127.0.0.1:8119 http://peer.test:8080/bytes/1000
    local code; code="$(nobody "$A" timeout 20 curl -s -o /dev/null -w '%{http_code}' -x http://127.0.0.1:8119 http://peer.test:8080/bytes/10)"
    [ "$code" = 407 ] || fail "HTTP proxy without credentials answered $code, want 407"
    must "peer daemon alive" kill -0 "$PIDB"
}

scenario_netstack_forward_vpn() { netstack_forward vpn; }
scenario_netstack_forward_wireguard_go() { netstack_forward wggo; }
netstack_forward() {
    netstack_lab "$1"
    # Local services in A for the -R forwards, run by the same unprivileged user.
    ns_bg_nobody "$A" "$PY" "$NSPY" http 127.0.0.1 8090
    ns_bg_nobody "$A" "$PY" "$NSPY" udp-echo 127.0.0.1 7790
    must "A's local HTTP server" wait_listen "$A" 8090
    ns_bg_nobody "$A" "$NSVPN" forward "$CONF" \
        -L 127.0.0.1:9000:100.64.0.2:8080 -L 9006:[fd00::2]:8080 -L 9001:peer.test:7777/udp \
        -L 9002:[fd00::2]:7777/udp -R 8081:127.0.0.1:8090 -R 7778:127.0.0.1:7790/udp
    must "vpn forward listens (-L)" wait_listen "$A" 9000
    must "-L TCP v4" wait_for "ns_curl -o /dev/null http://127.0.0.1:9000/bytes/1000" 20
    check_download 1000000 http://127.0.0.1:9006/bytes/1000000
    local t0 t1
    t0="$(now_s)"; check_download "$NS_BIG" "http://127.0.0.1:9000/bytes/$NS_BIG"; t1="$(now_s)"
    echo "  256 MiB down through -L: $(rate "$NS_BIG" "$t0" "$t1")"
    t0="$(now_s)"; check_upload "$NS_BIG" http://127.0.0.1:9000/sha256; t1="$(now_s)"
    echo "  256 MiB up through -L: $(rate "$NS_BIG" "$t0" "$t1")"
    must "-L UDP v4 (name resolved through the tunnel)" nobody "$A" timeout 60 "$PY" "$NSPY" udp-check 127.0.0.1 9001
    must "-L UDP v6" nobody "$A" timeout 60 "$PY" "$NSPY" udp-check 127.0.0.1 9002
    # -R: B reaches A's local services on A's tunnel addresses.
    local want; want="$("$PY" "$NSPEER" pattern-sha 1000000)"
    must "-R TCP v4" wait_for "[ \"\$(n $B timeout 30 curl -sS --fail http://100.64.0.1:8081/bytes/1000000 | sha256sum | cut -d' ' -f1)\" = $want ]" 20
    must "-R TCP v6" wait_for "[ \"\$(n $B timeout 30 curl -sS --fail http://[fd00::1]:8081/bytes/1000000 | sha256sum | cut -d' ' -f1)\" = $want ]" 20
    must "-R UDP v4" n "$B" timeout 60 "$PY" "$NSPEER" udp-check 100.64.0.1 7778
    must "-R UDP v6" n "$B" timeout 60 "$PY" "$NSPEER" udp-check fd00::1 7778
    must "peer daemon alive" kill -0 "$PIDB"
}

NETSTACK=(netstack_proxy_vpn netstack_proxy_wireguard_go netstack_forward_vpn netstack_forward_wireguard_go)
