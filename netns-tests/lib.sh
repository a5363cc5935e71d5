# Common setup for the network-namespace suite (run.sh) and the benchmark (bench.sh); sourced.
#
# Every namespace is named "$NS_PREFIX<name>" (a unique prefix with our PID) and recorded in
# $STATE/ns, every process we start in $STATE/pids, every UAPI socket in $STATE/socks (files,
# so scenarios running in subshells register what the top-level trap removes). `lab_cleanup`
# kills only those PIDs and whatever runs inside our own namespaces, then deletes them.
#
# Addresses: underlay 198.18.0.0/15 and fd00:18::/64, tunnel 100.64.0.0/10 and fd00::/64.

# shellcheck source=nskill.sh
source "$(dirname "${BASH_SOURCE[0]}")/nskill.sh"

NS_PREFIX="${NS_PREFIX:-vpnt$$-}"
STATE="$(mktemp -d /tmp/vpn-netns.XXXXXX)"
: >"$STATE/ns"; : >"$STATE/pids"; : >"$STATE/socks"
SOCK_DIR=/var/run/wireguard
TOOLS_ROOT="${TOOLS_ROOT:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/target/tools}"

# A short interface name unique to this run (IFNAMSIZ 16 incl. NUL); IF_PREFIX (default
# "v<pid>") lets parallel users of one machine keep their interface names apart.
IF_PREFIX="${IF_PREFIX:-v$$}"
ifname() { echo "$IF_PREFIX$1" | cut -c1-15; }

ns() { echo "$NS_PREFIX$1"; }
n() { local s="$1"; shift; ip netns exec "$(ns "$s")" "$@"; }

ns_add() {
    local name; name="$(ns "$1")"
    ip netns add "$name"
    echo "$name" >>"$STATE/ns"
    ip -n "$name" link set lo up
    # No IPv6 duplicate-address detection delays; removing an IPv4 primary address promotes a
    # secondary instead of deleting every address of the subnet (roaming and sticky scenarios).
    ip netns exec "$name" sysctl -qw net.ipv6.conf.all.accept_dad=0 net.ipv6.conf.default.accept_dad=0 \
        net.ipv4.conf.all.promote_secondaries=1 net.ipv4.conf.default.promote_secondaries=1
}

# Deletes our namespaces whose short names are given (a scenario's teardown).
ns_del() {
    local s names=()
    for s in "$@"; do names+=("$(ns "$s")"); done
    NS_KILL_GRACE=0.2 ns_kill_delete "${names[@]}"
}

track_pid() { echo "$1" >>"$STATE/pids"; }

lab_cleanup() {
    set +e
    local pid name sock
    while read -r pid; do kill "$pid" 2>/dev/null; done <"$STATE/pids"
    while read -r name; do
        for pid in $(ip netns pids "$name" 2>/dev/null); do kill "$pid" 2>/dev/null; done
    done <"$STATE/ns"
    sleep 0.3
    while read -r pid; do kill -9 "$pid" 2>/dev/null; done <"$STATE/pids"
    while read -r name; do
        for pid in $(ip netns pids "$name" 2>/dev/null); do kill -9 "$pid" 2>/dev/null; done
        ip netns del "$name" 2>/dev/null
    done <"$STATE/ns"
    while read -r sock; do rm -f "$sock"; done <"$STATE/socks"
    rm -rf "$STATE"
}

need_root() {
    [ "$(id -u)" -eq 0 ] || { echo "$0: needs root (network namespaces, TUN devices)" >&2; exit 1; }
    [ -c /dev/net/tun ] || { echo "$0: no /dev/net/tun" >&2; exit 1; }
}

# Installs what the suite needs when it is missing: Debian packages, then boringtun-cli with
# cargo into $TOOLS_ROOT (as the README says).
ensure_tools() {
    local missing=() t
    for t in ip:iproute2 ping:iputils-ping wg:wireguard-tools wireguard-go:wireguard-go \
             iperf3:iperf3 nft:nftables iptables-restore:iptables ip6tables-restore:iptables \
             taskset:util-linux ss:iproute2 python3:python3 setpriv:util-linux curl:curl \
             dnsmasq:dnsmasq-base javac:openjdk-17-jdk-headless gcc:gcc; do
        command -v "${t%%:*}" >/dev/null 2>&1 || missing+=("${t#*:}")
    done
    if [ "${#missing[@]}" -gt 0 ]; then
        echo "== installing ${missing[*]}"
        DEBIAN_FRONTEND=noninteractive apt-get update -qq &&
            DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
    fi
    BORINGTUN="${BORINGTUN:-$TOOLS_ROOT/bin/boringtun-cli}"
    if [ ! -x "$BORINGTUN" ]; then
        echo "== installing boringtun-cli into $TOOLS_ROOT (cargo install --locked)"
        cargo install --locked --root "$TOOLS_ROOT" boringtun-cli >/dev/null 2>&1 ||
            echo "== boringtun-cli could not be installed; its scenarios will fail"
    fi
}

# Waits up to $2 seconds (default 5) for a command to succeed.
wait_for() {
    local secs="${2:-5}" i
    for ((i = 0; i < secs * 20; i++)); do
        eval "$1" >/dev/null 2>&1 && return 0
        sleep 0.05
    done
    return 1
}

# start_daemon <kind: vpn|base|wggo|boringtun> <ns> <ifname> [cpu]: starts a userspace WireGuard
# daemon in the foreground inside the namespace (optionally pinned to a CPU), records its PID
# in DAEMON_PID, waits for its UAPI socket.
start_daemon() {
    local kind="$1" s="$2" ifn="$3" cpu="${4:-}" pin=() log="$STATE/$3.log"
    [ -n "$cpu" ] && pin=(taskset -c "$cpu")
    echo "$SOCK_DIR/$ifn.sock" >>"$STATE/socks"
    local cmd benv
    case "$kind" in
        vpn) cmd=("$VPN" --foreground "$ifn") ;;
        # BASE_ENV (bench.sh): switches for the baseline arm only.
        base) read -ra benv <<<"${BASE_ENV:-}"; cmd=(env "${benv[@]}" "${BASE_VPN:?BASE_VPN not set}" --foreground "$ifn") ;;
        wggo) cmd=(env LOG_LEVEL=error wireguard-go -f "$ifn") ;;
        boringtun) cmd=(env WG_SUDO=1 "$BORINGTUN" -f --disable-drop-privileges -l "$log.bt" "$ifn") ;;
        *) echo "unknown daemon $kind" >&2; return 1 ;;
    esac
    # exec all the way down (subshell -> ip netns exec -> taskset/env -> daemon): $! is the
    # daemon's own PID, whose /proc entries give RSS and CPU time.
    (exec ip netns exec "$(ns "$s")" "${pin[@]}" "${cmd[@]}" >"$log" 2>&1) &
    DAEMON_PID=$!
    track_pid "$DAEMON_PID"
    if ! wait_for "[ -S $SOCK_DIR/$ifn.sock ] && n $s ip link show $ifn" 10; then
        echo "$kind daemon for $ifn did not come up:" >&2; cat "$log" >&2
        return 1
    fi
}

# Two namespaces "$1a"/"$1b" joined by a veth pair, addresses on both underlay families.
# Sets A, B (short namespace names).
make_pair() {
    A="${1}a"; B="${1}b"
    ns_add "$A"; ns_add "$B"
    ip link add "$(ifname e${1}a)" netns "$(ns "$A")" type veth peer name "$(ifname e${1}b)" netns "$(ns "$B")"
    VA="$(ifname e${1}a)"; VB="$(ifname e${1}b)"
    n "$A" ip addr add 198.18.0.1/24 dev "$VA"; n "$A" ip addr add fd00:18::1/64 dev "$VA" nodad
    n "$B" ip addr add 198.18.0.2/24 dev "$VB"; n "$B" ip addr add fd00:18::2/64 dev "$VB" nodad
    n "$A" ip link set "$VA" up; n "$B" ip link set "$VB" up
}

# Brings a WireGuard interface up with tunnel addresses 100.64.0.$2/24 and fd00::$2/64.
tunnel_addrs() {
    local s="$1" i="$2" ifn="$3" mtu="${4:-1420}"
    n "$s" ip addr add "100.64.0.$i/24" dev "$ifn"
    n "$s" ip addr add "fd00::$i/64" dev "$ifn" nodad
    n "$s" ip link set "$ifn" mtu "$mtu" up
}

pubkey() { echo "$1" | wg pubkey; }

# tunnel <kindA> <kindB> <underlay 4|6> [tunnel mtu]: daemons in $A and $B (from make_pair)
# configured as each other's peer on port 51820, A initiating to B. Sets WA, WB, KA, KB, PA,
# PB, PIDA, PIDB, EPA, EPB (underlay endpoints).
tunnel() {
    local ka="$1" kb="$2" fam="$3" mtu="${4:-1420}"
    WA="$(ifname "${A}")"; WB="$(ifname "${B}")"
    KA="$(wg genkey)"; KB="$(wg genkey)"; PA="$(pubkey "$KA")"; PB="$(pubkey "$KB")"
    if [ "$fam" = 6 ]; then EPA="[fd00:18::1]:51820"; EPB="[fd00:18::2]:51820"
    else EPA="198.18.0.1:51820"; EPB="198.18.0.2:51820"; fi
    start_daemon "$ka" "$A" "$WA" "${CPU_A:-}"; PIDA=$DAEMON_PID
    start_daemon "$kb" "$B" "$WB" "${CPU_B:-}"; PIDB=$DAEMON_PID
    n "$A" wg set "$WA" private-key <(echo "$KA") listen-port 51820 \
        peer "$PB" endpoint "$EPB" allowed-ips 100.64.0.2/32,fd00::2/128
    n "$B" wg set "$WB" private-key <(echo "$KB") listen-port 51820 \
        peer "$PA" endpoint "$EPA" allowed-ips 100.64.0.1/32,fd00::1/128
    tunnel_addrs "$A" 1 "$WA" "$mtu"
    tunnel_addrs "$B" 2 "$WB" "$mtu"
}

# An iperf3 server in namespace $1, bounded in time; sets IPERF_PID.
iperf_server() {
    timeout "${2:-120}" ip netns exec "$(ns "$1")" iperf3 -s >/dev/null 2>&1 &
    IPERF_PID=$!
    track_pid "$IPERF_PID"
    wait_for "n $1 ss -ltn | grep -q ':5201 '" 5
}

# iperf <ns> <args...>: a client run bounded in time; prints the JSON summary.
iperf() {
    local s="$1"; shift
    timeout 30 ip netns exec "$(ns "$s")" iperf3 --json "$@"
}

# Reads a field of an iperf3 --json summary from stdin: tcp_bps, udp_bps, udp_lost_percent,
# udp_packets (the receiver's figures).
iperf_field() {
    local json; json="$(cat)"
    case "$1" in
        tcp_bps) echo "$json" | tr -d ' \t\n' | grep -o '"sum_received":{[^}]*' | grep -o '"bits_per_second":[0-9.e+]*' | head -1 | cut -d: -f2 ;;
        udp_bps|udp_lost_percent|udp_packets)
            local key=bits_per_second
            [ "$1" = udp_lost_percent ] && key=lost_percent
            [ "$1" = udp_packets ] && key=packets
            # iperf 3.12 puts the receiver's view in end.sum (sum_received only from 3.13).
            local end; end="$(echo "$json" | tr -d ' \t\n' | grep -o '"end":{.*')"
            local s; s="$(echo "$end" | grep -o '"sum_received":{[^}]*')"
            [ -n "$s" ] || s="$(echo "$end" | grep -o '"sum":{[^}]*' | head -1)"
            echo "$s" | grep -o "\"$key\":[0-9.e+-]*" | head -1 | cut -d: -f2 ;;
    esac
}

mbps() { awk -v b="${1:-0}" 'BEGIN { printf "%.0f", b / 1e6 }'; }

# VmRSS of a process in KiB.
rss_kib() { awk '/^VmRSS:/ { print $2 }' "/proc/$1/status" 2>/dev/null || echo 0; }

# utime+stime of a process in clock ticks.
cpu_ticks() { awk '{ sub(/.*\) /, ""); print $12 + $13 }' "/proc/$1/stat" 2>/dev/null || echo 0; }

# --- unprivileged users of a tunnel (netstack.sh, bench_netstack.sh) -------------------------

# The system python (root's PATH may lead to one uid 65534 cannot read) and the way to run a
# command as uid 65534 with no groups and no capabilities.
PY=/usr/bin/python3
NOBODY=(setpriv --reuid=65534 --regid=65534 --clear-groups --inh-caps=-all)

# nobody_home: a directory only uid 65534 may use, under the state directory (which becomes
# traversable), holding a copy of $VPN it can run; sets NOBODY_HOME. Files the caller adds are
# handed over with `chown -R 65534:65534 "$NOBODY_HOME"`.
nobody_home() {
    chmod 711 "$STATE"
    NOBODY_HOME="$STATE/nobody"
    mkdir -p "$NOBODY_HOME"
    install -m 755 "$VPN" "$NOBODY_HOME/vpn"
}
