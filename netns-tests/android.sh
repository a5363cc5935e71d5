# Android's backend from a real JVM (sourced by run.sh): netns-tests/android/GoBackend.java
# declares the six native methods exactly as wireguard-android's GoBackend does, loads our
# library by the name `wg-go` (libwg-go.so, crates/jni) and gets its TUN fd the way
# VpnService.establish() + detachFd() give one (android/TestVpnService.c: a layer-3 TUN, no
# packet-information or virtio header, blocking, attached to an interface configured first).
#
# Namespace A is the phone (the JVM), B the server: a `vpn` daemon or wireguard-go.
# Checked: handshake, ping both ways on both families, a checked TCP transfer both ways, the
# statistics read from wgGetConfig as GoBackend reads them, the UAPI socket, the sockets
# wgGetSocketV4/V6 return being the only UDP sockets of the process and the ones carrying the
# tunnel during a 30 s transfer while the phone's address changes twice; bad arguments and
# invalid handles; 200 turn-on/turn-off cycles with fds, threads and memory before and after.

ANDROID_BIG=$((64 << 20))
JSEQ=0

# Compiles the Java classes and the fake VpnService, and puts libwg-go.so beside it; sets AND.
android_build() {
    AND="$STATE/android"
    mkdir -p "$AND/classes" "$AND/lib"
    local lib="${JNI_LIB:-${CARGO_TARGET_DIR:-$ROOT/target}/debug/libwg_go.so}"
    [ -f "$lib" ] || fail "$lib not found (cargo build -p vpn-jni)"
    # System.loadLibrary("wg-go") looks for libwg-go.so, the name the app packages it under.
    install -m 755 "$lib" "$AND/lib/libwg-go.so"
    local jhome; jhome="$(dirname "$(dirname "$(readlink -f "$(command -v javac)")")")"
    must "compile the fake VpnService" gcc -shared -fPIC -O2 -Wall -Werror \
        -I"$jhome/include" -I"$jhome/include/linux" \
        -o "$AND/lib/libtestvpnservice.so" "$HERE/android/TestVpnService.c"
    must "compile GoBackend.java" javac -Xlint:all -Werror -d "$AND/classes" \
        "$HERE/android/com/wireguard/android/backend/"*.java
}

# android_host <ns>: the JVM in namespace $1 reading commands from a FIFO; sets JPID.
android_host() {
    local fifo="$STATE/jvm.fifo"
    JOUT="$STATE/jvm.out"
    rm -f "$fifo"; mkfifo "$fifo"; : >"$JOUT"
    (exec timeout "$((SCENARIO_TIMEOUT * 4))" ip netns exec "$(ns "$1")" \
        env VPN_JNI_SOCKET_DIR="$SOCK_DIR" RUST_LOG="${RUST_LOG:-info}" \
        java -Xmx64m -Djava.library.path="$AND/lib" -cp "$AND/classes" \
        com.wireguard.android.backend.GoBackend "$fifo" >"$JOUT" 2>"$STATE/jvm.err") &
    JPID=$!
    track_pid "$JPID"
    exec 7>"$fifo"
    must "the JVM loads libwg-go.so" wait_for "grep -q '^version ' '$JOUT'" 30
    # `timeout` ran java as its child: the JVM's own PID, for /proc and ss.
    JPID="$(pgrep -P "$JPID" java || pgrep -P "$(pgrep -P "$JPID")" java)"
    echo "  $(grep '^version ' "$JOUT") (JVM pid $JPID)"
}

# jcall <command...>: sends a command to the JVM and waits for its reply; the reply's lines
# (without the id) are in JREPLY. Fails the scenario on "FAIL" or no reply in JTIMEOUT s.
jcall() {
    JSEQ=$((JSEQ + 1))
    echo "$JSEQ $*" >&7
    wait_for "grep -qE '^$JSEQ (done|FAIL)' '$JOUT'" "${JTIMEOUT:-30}" \
        || { tail -20 "$STATE/jvm.err"; fail "JVM: no reply to '$*'"; }
    JREPLY="$(grep "^$JSEQ " "$JOUT" | sed "s/^$JSEQ //")"
    if grep -q '^FAIL' <<<"$JREPLY"; then
        tail -20 "$STATE/jvm.err"
        fail "JVM: $* -> $(grep '^FAIL' <<<"$JREPLY")"
    fi
}

hexkey() { echo "$1" | base64 -d | od -An -tx1 -v | tr -d ' \n'; }

# android_tun <ns> <dev> <addr-suffix>: the interface VpnService would have configured.
android_tun() {
    n "$1" ip tuntap add dev "$2" mode tun
    n "$1" ip addr add "100.64.0.$3/24" dev "$2"
    n "$1" ip addr add "fd00::$3/64" dev "$2" nodad
    n "$1" ip link set "$2" mtu 1280 up
}

# The UAPI `set` text the app builds (Config.toWgUserspaceString), to file $1: our key, the
# server as the one peer routing everything.
android_settings() {
    cat >"$1" <<EOF
private_key=$(hexkey "$KA")
replace_peers=true
public_key=$(hexkey "$PB")
endpoint=198.18.0.2:51820
persistent_keepalive_interval=25
replace_allowed_ips=true
allowed_ip=0.0.0.0/0
allowed_ip=::/0
EOF
}

# The UDP sockets the JVM holds in namespace $1, as "fd:inode" lines (from ss).
jvm_udp_sockets() {
    n "$1" ss -uanpe 2>/dev/null | grep "pid=$JPID," \
        | sed -nE 's/.*pid=[0-9]+,fd=([0-9]+).* ino:([0-9]+).*/\1:\2/p' | sort -u
}

fd_inode() { readlink "/proc/$JPID/fd/$1" | sed -nE 's/^socket:\[([0-9]+)\]$/\1/p'; }

a_curl() { n "$A" timeout 120 curl -sS --fail --max-time 110 "$@"; }

scenario_android_vpn() { android_tunnel vpn; }
scenario_android_wireguard_go() { android_tunnel wggo; }
android_tunnel() {
    local kind="$1"
    android_build
    make_pair "j${kind:0:2}"
    WB="$(ifname "$B")"
    KA="$(wg genkey)"; KB="$(wg genkey)"; PA="$(pubkey "$KA")"; PB="$(pubkey "$KB")"
    start_daemon "$kind" "$B" "$WB"
    n "$B" wg set "$WB" private-key <(echo "$KB") listen-port 51820 \
        peer "$PA" allowed-ips 100.64.0.1/32,fd00::1/128
    tunnel_addrs "$B" 2 "$WB"
    local tun jif set="$STATE/settings"
    tun="$(ifname "t$A")"; jif="$(ifname "w$A")"
    echo "$SOCK_DIR/$jif.sock" >>"$STATE/socks"
    android_tun "$A" "$tun" 1
    android_settings "$set"
    android_host "$A"

    jcall turnon "$jif" "$tun" "$set"
    local h v4 v6
    h="$(sed -n 's/^handle //p' <<<"$JREPLY")"
    read -r v4 v6 < <(sed -n 's/^sockets //p' <<<"$JREPLY")
    echo "  handle $h, wgGetSocketV4 $v4, wgGetSocketV6 $v6"
    [ "$h" = 0 ] || fail "the first tunnel got handle $h"
    [ "$v4" -ge 0 ] && [ "$v6" -ge 0 ] || fail "sockets $v4 $v6"

    must "ping phone->server v4" ping4 "$A" 100.64.0.2 3
    must "ping server->phone v4" ping4 "$B" 100.64.0.1
    must "ping phone->server v6" ping6 "$A" fd00::2
    must "ping server->phone v6" ping6 "$B" fd00::1

    # Statistics as GoBackend reads them.
    jcall stats "$h"
    local key rx tx hs now
    read -r key rx tx hs < <(sed -nE 's/^peer (\S+) rx ([0-9]+) tx ([0-9]+) handshake_ms ([0-9]+)$/\1 \2 \3 \4/p' <<<"$JREPLY")
    now="$(date +%s%3N)"
    echo "  statistics: peer $key rx $rx tx $tx handshake $(( (now - hs) / 1000 )) s ago"
    [ "$key" = "$PB" ] || fail "statistics name peer $key, want $PB"
    [ "${rx:-0}" -gt 0 ] && [ "${tx:-0}" -gt 0 ] || fail "no traffic counted (rx $rx, tx $tx)"
    [ $((now - hs)) -lt 60000 ] && [ $((now - hs)) -ge 0 ] || fail "handshake time $hs vs now $now"
    # The UAPI socket answers wg (root) as the Go library's does.
    must "wg show on the backend's UAPI socket" wait_for "n $A wg show $jif latest-handshakes | grep -q '$PB'" 5

    # A checked TCP transfer both ways.
    ns_bg "$B" "$PY" "$NSPEER" http 100.64.0.2 8080
    must "server's HTTP" wait_for "n $B ss -ltn | grep -q '100.64.0.2:8080 '" 10
    local want got
    want="$("$PY" "$NSPEER" pattern-sha "$ANDROID_BIG")"
    got="$(a_curl "http://100.64.0.2:8080/bytes/$ANDROID_BIG" | sha256sum | cut -d' ' -f1)"
    [ "$got" = "$want" ] || fail "64 MiB download: sha256 $got, want $want"
    got="$("$PY" "$NSPEER" pattern "$ANDROID_BIG" | a_curl -T - http://100.64.0.2:8080/sha256)"
    [ "$got" = "$want" ] || fail "64 MiB upload: sha256 $got, want $want"
    echo "  64 MiB each way through the JVM's tunnel, sha256 checked"

    # The returned sockets are the JVM's only UDP sockets: what `ss` lists for the process is
    # exactly those two fds, by inode as /proc/<pid>/fd names them.
    local expect
    expect="$(printf '%s:%s\n%s:%s\n' "$v4" "$(fd_inode "$v4")" "$v6" "$(fd_inode "$v6")" | sort)"
    [ "$(jvm_udp_sockets "$A")" = "$expect" ] \
        || fail "UDP sockets of the JVM: $(jvm_udp_sockets "$A" | tr '\n' ' '), want $(tr '\n' ' ' <<<"$expect")"
    local port
    port="$(n "$A" ss -uanpe 2>/dev/null | grep -F "pid=$JPID,fd=$v4)" | awk '{print $4}' | sed 's/.*://')"
    echo "  sockets: v4 fd $v4 inode $(fd_inode "$v4") port $port, v6 fd $v6 inode $(fd_inode "$v6")"

    # 30 s of TCP while the phone's address changes twice (its network changes); every half
    # second the JVM's UDP sockets are listed again: nothing may appear beside the two.
    iperf_server "$B" 60
    (timeout 45 ip netns exec "$(ns "$A")" iperf3 --json -c 100.64.0.2 -t 30 >"$STATE/iperf.json" 2>&1) &
    local ipid=$! t extra=0 seen
    for t in $(seq 1 62); do
        sleep 0.5
        seen="$(jvm_udp_sockets "$A")"
        [ "$seen" = "$expect" ] || { extra=1; echo "  at $t/2 s: $(tr '\n' ' ' <<<"$seen")"; }
        if [ "$t" = 16 ]; then
            n "$A" ip addr add 198.18.0.11/24 dev "$VA"; n "$A" ip addr del 198.18.0.1/24 dev "$VA"
        elif [ "$t" = 36 ]; then
            n "$A" ip addr add 198.18.0.21/24 dev "$VA"; n "$A" ip addr del 198.18.0.11/24 dev "$VA"
        fi
    done
    wait "$ipid" || true
    [ "$extra" = 0 ] || fail "another UDP socket appeared during the transfer"
    local bps stalls
    bps="$(iperf_field tcp_bps <"$STATE/iperf.json")"
    stalls="$(tr -d ' \t\n' <"$STATE/iperf.json" | grep -o '"sum":{"start":[^}]*' \
        | grep -o '"bytes":[0-9]*' | grep -c '"bytes":0$' || true)"
    echo "  30 s TCP while roaming: $(mbps "$bps") Mbit/s, $stalls empty 1 s intervals; endpoint at the server $(endpoint_of "$B" "$WB" "$PA")"
    awk -v b="${bps:-0}" 'BEGIN { exit !(b > 1e6) }' || fail "the 30 s transfer carried nothing"
    [ "${stalls:-0}" -le 3 ] || fail "the transfer stalled for $stalls s"
    [[ "$(endpoint_of "$B" "$WB" "$PA")" == 198.18.0.21:"$port" ]] \
        || fail "the server did not follow the phone to 198.18.0.21:$port"
    jcall sockets "$h"
    [ "$(sed -n 's/^sockets //p' <<<"$JREPLY")" = "$v4 $v6" ] || fail "the sockets changed: $JREPLY"
    must "ping after roaming" ping4 "$A" 100.64.0.2

    jcall off "$h"
    [ -z "$(jvm_udp_sockets "$A")" ] || fail "UDP sockets left after wgTurnOff"
    [ ! -e "$SOCK_DIR/$jif.sock" ] || fail "the UAPI socket outlived wgTurnOff"
    jcall proc
    echo "  after wgTurnOff: $JREPLY"
    jcall quit
}

# Bad input and 200 cycles need no server: the peer's endpoint is a veth address nobody
# answers on.
scenario_android_lifecycle() {
    android_build
    make_pair jl
    KA="$(wg genkey)"; KB="$(wg genkey)"; PB="$(pubkey "$KB")"
    local tun set="$STATE/settings"
    tun="$(ifname "t$A")"
    echo "$SOCK_DIR/wgbad.sock" >>"$STATE/socks"; echo "$SOCK_DIR/wgcycle.sock" >>"$STATE/socks"
    android_tun "$A" "$tun" 1
    android_settings "$set"
    android_host "$A"
    jcall bad "$tun" "$set"
    sed 's/^/  /' <<<"$JREPLY" | grep -v '^  done$'
    JTIMEOUT=240 jcall cycles 200 "$tun" "$set"
    sed 's/^/  /' <<<"$JREPLY" | grep -v '^  done$'
    jcall quit
}

ANDROID=(android_vpn android_wireguard_go android_lifecycle)
