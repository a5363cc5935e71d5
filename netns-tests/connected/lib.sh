# Shared by test.sh and bench.sh: namespace A with one `vpn` daemon serving N peers, namespace B
# with N daemons (one per peer, ports 51821..), joined by a veth pair on 198.18.0.0/24.
# Tunnel addresses: A is 100.64.K.1 towards peer K, peer K is 100.64.K.2.
# Sourced; expects VPN (the binary) and sets A, B, DIR.

# shellcheck source=../nskill.sh
source "$(dirname "${BASH_SOURCE[0]}")/../nskill.sh"

need() { command -v "$1" >/dev/null 2>&1; }

require_root_and_tools() {
    if [ "$(id -u)" -ne 0 ]; then
        echo "skipped: needs root (network namespaces, TUN devices)"
        exit 0
    fi
    if ! need ip || ! need iperf3 || ! need ss || ! need ping || ! need python3; then
        echo "== installing iproute2, iperf3, iputils-ping, python3"
        export DEBIAN_FRONTEND=noninteractive
        apt-get update -qq && apt-get install -y -qq --no-install-recommends \
            iproute2 iperf3 iputils-ping python3 >/dev/null
    fi
    if [ ! -x "$VPN" ]; then
        echo "skipped: $VPN not found (cargo build --release -p vpn-cli)"
        exit 0
    fi
}

# NS_PREFIX and IF_PREFIX (optional) prefix the namespaces and the WireGuard interfaces (whose
# UAPI sockets share /var/run/wireguard with every other run on the machine).
A="${NS_PREFIX:-}vpn-cs-a-$$"; B="${NS_PREFIX:-}vpn-cs-b-$$"
WA="${IF_PREFIX:-}wgcsa"; WB="${IF_PREFIX:-}wgcsb"
DIR="$(mktemp -d)"

cleanup() {
    local -  # `set +e` only for this function: test.sh calls it between steps
    set +e
    ns_kill_delete "$A" "$B"
    rm -f "/var/run/wireguard/$WA.sock" "/var/run/wireguard/$WB"*.sock
    rm -rf "$DIR"
}
trap cleanup EXIT INT TERM

# topology N CONNECTED(0|1) — namespaces, keys, configs, daemons up.
topology() {
    local n="$1" connected="$2" k
    ip netns add "$A"; ip netns add "$B"
    ip link add vcsa netns "$A" type veth peer name vcsb netns "$B"
    ip -n "$A" addr add 198.18.0.1/24 dev vcsa; ip -n "$A" link set vcsa up; ip -n "$A" link set lo up
    ip -n "$B" addr add 198.18.0.2/24 dev vcsb; ip -n "$B" link set vcsb up; ip -n "$B" link set lo up
    KA="$("$VPN" genkey)"; PA="$(echo "$KA" | "$VPN" pubkey)"
    local addrs="" peers=""
    for k in $(seq "$n"); do
        local kb pb
        kb="$("$VPN" genkey)"; pb="$(echo "$kb" | "$VPN" pubkey)"
        echo "$kb" >"$DIR/b$k.key"
        addrs="$addrs${addrs:+, }100.64.$k.1/32"
        peers="$peers
[Peer]
PublicKey = $pb
Endpoint = 198.18.0.2:$((51820 + k))
AllowedIPs = 100.64.$k.2/32
"
        cat >"$DIR/${WB}$k.conf" <<CONF
[Interface]
PrivateKey = $kb
ListenPort = $((51820 + k))
Address = 100.64.$k.2/32

[Peer]
PublicKey = $PA
Endpoint = 198.18.0.1:51820
AllowedIPs = 100.64.$k.1/32
CONF
    done
    cat >"$DIR/${WA}.conf" <<CONF
[Interface]
PrivateKey = $KA
ListenPort = 51820
Address = $addrs
$peers
CONF
    chmod 600 "$DIR"/*.conf
    export VPN_CONNECTED_SOCKETS="$connected"
    ip netns exec "$A" "$VPN" up "$DIR/${WA}.conf" >/dev/null 2>&1
    for k in $(seq "$n"); do
        ip netns exec "$B" "$VPN" up "$DIR/${WB}$k.conf" >/dev/null 2>&1
    done
    for k in $(seq "$n"); do
        ip netns exec "$A" ping -c 1 -W 5 -I "100.64.$k.1" "100.64.$k.2" >/dev/null
    done
}

# uapi NS IFACE REQUEST — one UAPI exchange, reply on stdout.
uapi() {
    ip netns exec "$1" python3 - "/var/run/wireguard/$2.sock" "$3" <<'PY'
import socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
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

# uapi_stat NS IFACE KEY — one counter of the stats=1 reply.
uapi_stat() {
    uapi "$1" "$2" 'stats=1\n\n' | sed -n "s/^$3=//p"
}

# daemon_pid NS IFACE
daemon_pid() {
    local pid
    for pid in $(ip netns pids "$1"); do
        if [ "$(cat /proc/"$pid"/comm 2>/dev/null)" = vpn ] &&
            tr '\0' ' ' <"/proc/$pid/cmdline" | grep -qw "$2"; then
            echo "$pid"; return
        fi
    done
}

# cpu_ticks PID — user+system clock ticks so far.
cpu_ticks() {
    awk '{print $14 + $15}' "/proc/$1/stat"
}

# connected_sockets NS PORT — UDP sockets on PORT connected to a remote (not *).
connected_sockets() {
    ip netns exec "$1" ss -uanp | awk -v p=":$2" '$4 ~ p"$" && $5 !~ /\*/' | wc -l
}

# iperf_servers NS FIRST_PORT COUNT — server K on 100.64.K.1 (bound, so that UDP replies
# leave from the address peer K's allowed IPs name).
iperf_servers() {
    local k
    for k in $(seq "$3"); do
        ip netns exec "$1" iperf3 -s -D -B "100.64.$k.1" -p "$(($2 + k))" >/dev/null 2>&1
    done
    for k in $(seq "$3"); do
        listening "$1" "$(($2 + k))" || echo "  warning: iperf3 server on port $(($2 + k)) not listening"
    done
}

# listening NS PORT — waits (10 s at most) until a TCP socket listens on PORT in NS.
listening() {
    local i
    for ((i = 0; i < 200; i++)); do
        [ -n "$(ip netns exec "$1" ss -Hltn "sport = :$2")" ] && return 0
        sleep 0.05
    done
    return 1
}
