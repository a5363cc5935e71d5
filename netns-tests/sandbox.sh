# The daemon after setup (sourced by run.sh, which defines fail/must/ping4 and the runner):
# every thread unprivileged and sandboxed by default, every later operation still working under
# the sandbox, the seccomp filter stopping a call outside its list with the call named, hostile
# input under the sandbox (docs/design-notes.md, "The daemon holds only what it needs").

SANDBOX=(sandbox_status sandbox_options sandbox_operations sandbox_vpn_up_down sandbox_bites sandbox_hostile)

# Capability masks as /proc/<pid>/status prints them.
CAPS_KEPT=0000000000001400      # CAP_NET_ADMIN (12) and CAP_NET_BIND_SERVICE (10)
CAPS_ADMIN=0000000000001000     # CAP_NET_ADMIN alone (--low-ports=off)
CAPS_NONE=0000000000000000

# status_field <status file> <field>: the value(s) after "Field:".
status_field() { awk -v f="$2:" '$1 == f { $1 = ""; sub(/^ /, ""); print; exit }' "$1"; }

# threads_are <pid> <uid> <capeff> <seccomp mode> <no_new_privs>: every thread of the process
# has these credentials (real, effective, saved and filesystem uid all <uid>; permitted,
# effective and bounding sets <capeff>, inheritable and ambient empty). Prints the count.
threads_are() {
    local pid="$1" uid="$2" caps="$3" mode="$4" nnp="$5" t n=0 v
    for t in /proc/"$pid"/task/*; do
        [ -r "$t/status" ] || continue
        local name; name="$(cat "$t/comm" 2>/dev/null)"
        v="$(status_field "$t/status" Uid)"
        [ "$(echo $v)" = "$uid $uid $uid $uid" ] || fail "pid $pid thread $name: Uid $v, want $uid"
        v="$(status_field "$t/status" Gid)"
        [ "$uid" = 0 ] || [ "$(echo $v | awk '{ print ($1 != 0 && $1 == $2 && $2 == $3) }')" = 1 ] ||
            fail "pid $pid thread $name: Gid $v"
        for f in CapPrm CapEff CapBnd; do
            [ "$f" = CapBnd ] && [ "$uid" = 0 ] && continue
            v="$(status_field "$t/status" $f)"
            [ "$v" = "$caps" ] || fail "pid $pid thread $name: $f $v, want $caps"
        done
        [ "$uid" = 0 ] || [ "$(status_field "$t/status" CapInh)" = "$CAPS_NONE" ] || fail "pid $pid thread $name: CapInh"
        [ "$(status_field "$t/status" CapAmb)" = "$CAPS_NONE" ] || fail "pid $pid thread $name: CapAmb"
        v="$(status_field "$t/status" Seccomp)"
        [ "$v" = "$mode" ] || fail "pid $pid thread $name: Seccomp $v, want $mode"
        v="$(status_field "$t/status" NoNewPrivs)"
        [ "$v" = "$nnp" ] || fail "pid $pid thread $name: NoNewPrivs $v, want $nnp"
        n=$((n + 1))
    done
    [ "$n" -gt 3 ] || fail "pid $pid: only $n threads seen"
    echo "$n"
}

# daemon_in <ns>: the pid of the (first) vpn daemon in the namespace.
daemon_in() {
    local p
    for p in $(ip netns pids "$(ns "$1")"); do
        if [ "$(cat /proc/"$p"/comm 2>/dev/null)" = vpn ]; then echo "$p"; return 0; fi
    done
    return 0
}

# The socket cleaner forked by daemon <pid>: its pid (one, in the daemon's namespace).
cleaner_of() {
    local c
    for c in $(cat /proc/"$1"/task/*/children 2>/dev/null); do
        if [ "$(cat /proc/"$c"/comm 2>/dev/null)" = vpn-sock-clean ]; then echo "$c"; fi
    done
    return 0
}

# No daemon log of this scenario holds a seccomp report.
no_seccomp_reports() { seccomp_reports_since ""; }

# seccomp_reports_since <stamp file or "">: fails if a daemon log written since the stamp (or
# any daemon log) holds a seccomp report (the runner checks after every scenario).
seccomp_reports_since() {
    local f
    for f in "$STATE"/*.log; do
        [ -e "$f" ] || continue
        [ -z "$1" ] || [ "$f" -nt "$1" ] || continue
        case "$f" in *.scenario.log) continue ;; esac
        ! grep -q 'vpn: seccomp: system call' "$f" || fail "$(basename "$f"): $(grep 'vpn: seccomp' "$f")"
    done
}

# By default both daemons run as uid 65534 with CAP_NET_ADMIN and CAP_NET_BIND_SERVICE only,
# no_new_privs and two seccomp filters in every thread; the cleaner keeps uid 0 with no
# capability and a filter of its own; `wg` as root still talks to the UAPI socket, which keeps
# root's owner and mode; `vpn show` reports the sandbox; the tunnel works.
scenario_sandbox_status() {
    make_pair sbs; tunnel vpn vpn 4
    pings_both_ways
    local pid n c sock
    for pid in "$PIDA" "$PIDB"; do
        n="$(threads_are "$pid" 65534 "$CAPS_KEPT" 2 1)"
        local filters; filters="$(status_field /proc/"$pid"/status Seccomp_filters)"
        [ "$filters" = 2 ] || fail "pid $pid: $filters seccomp filters, want 2"
        c="$(cleaner_of "$pid")"
        [ -n "$c" ] || fail "daemon $pid has no socket cleaner"
        [ "$(status_field /proc/"$c"/status Uid | awk '{ print $2 }')" = 0 ] || fail "the cleaner is not uid 0"
        [ "$(status_field /proc/"$c"/status CapEff)" = "$CAPS_NONE" ] || fail "the cleaner has capabilities"
        [ "$(status_field /proc/"$c"/status Seccomp)" = 2 ] || fail "the cleaner has no seccomp filter"
        [ "$(ls /proc/"$c"/fd | wc -l)" -le 4 ] || fail "the cleaner holds descriptors: $(ls -l /proc/"$c"/fd)"
        echo "  daemon $pid: $n threads, each uid 65534, CapEff $CAPS_KEPT, NoNewPrivs 1, Seccomp 2; cleaner $c uid 0, no capabilities, Seccomp 2"
    done
    sock="$SOCK_DIR/$WA.sock"
    # As wireguard-go leaves it: bound under umask 077 (srwx------), root's.
    [ "$(stat -c '%U %a %F' "$sock")" = "root 700 socket" ] || fail "socket $(stat -c '%U %a %F' "$sock")"
    [ "$(stat -c '%U %a' "$SOCK_DIR")" = "root 755" ] || fail "socket directory $(stat -c '%U %a' "$SOCK_DIR")"
    must "wg show as root" n "$A" wg show "$WA" >/dev/null
    local show; show="$(n "$A" "$VPN" show "$WA")"
    echo "$show" | sed -n '/packet memory/,$p' | sed 's/^/  A /'
    contains "$show" "user: uid 65534 gid 65534, no_new_privs" || fail "vpn show: no user line"
    contains "$show" "capabilities: CAP_NET_BIND_SERVICE, CAP_NET_ADMIN" || fail "vpn show: capabilities"
    contains "$show" "system calls allowed" || fail "vpn show: seccomp"
    contains "$show" "landlock: enforced" || contains "$show" "landlock: not supported" || fail "vpn show: landlock"
    grep -q 'running as uid 65534' "$STATE/$WA.log" || fail "the log does not say whom the daemon runs as"
    grep -q 'landlock: ' "$STATE/$WA.log" || fail "the log does not report landlock"
    no_seccomp_reports
}

# The switches: --low-ports=off keeps CAP_NET_ADMIN alone, --no-sandbox leaves no filter (and
# Landlock off), --no-drop-privileges keeps uid 0 (sandboxed), --user picks the uid and group;
# each daemon still carries traffic.
scenario_sandbox_options() {
    make_pair sbo
    local spec flags uid caps mode nnp
    for spec in "--low-ports=off|65534|$CAPS_ADMIN|2|1" "--no-sandbox|65534|$CAPS_KEPT|0|1" \
                "--no-drop-privileges|0|x|2|1" "--user=4242:4343|4242|$CAPS_KEPT|2|1" \
                "VPN_NO_SANDBOX=1 VPN_NO_DROP_PRIVILEGES=1|0|x|0|0"; do
        IFS='|' read -r flags uid caps mode nnp <<<"$spec"
        WA="$(ifname sboa)"; WB="$(ifname sbob)"
        KA="$(wg genkey)"; KB="$(wg genkey)"; PA="$(pubkey "$KA")"; PB="$(pubkey "$KB")"
        local envs=() args=()
        case "$flags" in VPN_*) read -ra envs <<<"$flags" ;; *) args=("$flags") ;; esac
        echo "$SOCK_DIR/$WA.sock" >>"$STATE/socks"
        (exec ip netns exec "$(ns "$A")" env "${envs[@]}" "$VPN" --foreground "${args[@]}" "$WA" >"$STATE/$WA.log" 2>&1) &
        PIDA=$!; track_pid "$PIDA"
        wait_for "[ -S $SOCK_DIR/$WA.sock ] && grep -q 'device started' $STATE/$WA.log" 10 || fail "$flags: daemon did not start: $(cat "$STATE/$WA.log")"
        start_daemon vpn "$B" "$WB"; PIDB=$DAEMON_PID
        n "$A" wg set "$WA" private-key <(echo "$KA") listen-port 51820 peer "$PB" endpoint 198.18.0.2:51820 allowed-ips 100.64.0.2/32,fd00::2/128
        n "$B" wg set "$WB" private-key <(echo "$KB") listen-port 51820 peer "$PA" endpoint 198.18.0.1:51820 allowed-ips 100.64.0.1/32,fd00::1/128
        tunnel_addrs "$A" 1 "$WA"; tunnel_addrs "$B" 2 "$WB"
        must "$flags: ping" ping4 "$A" 100.64.0.2
        if [ "$caps" = x ]; then
            caps="$(status_field /proc/self/status CapEff)"
        fi
        local nthreads; nthreads="$(threads_are "$PIDA" "$uid" "$caps" "$mode" "$nnp")"
        echo "  $flags: $nthreads threads with uid $uid, CapEff $caps, Seccomp $mode, NoNewPrivs $nnp"
        kill -TERM "$PIDA" "$PIDB"
        wait_for "! kill -0 $PIDA && ! kill -0 $PIDB" 10 || fail "$flags: daemons did not stop"
        wait_for "[ ! -e $SOCK_DIR/$WA.sock ] && [ ! -e $SOCK_DIR/$WB.sock ]" 5 || fail "$flags: a UAPI socket was left behind"
        no_seccomp_reports
        rm -f "$STATE/$WA.log" "$STATE/$WB.log"
    done
    # A bad --user stops the daemon at start with a clear message, leaving nothing.
    local out rc=0
    out="$(n "$A" "$VPN" --foreground --user=no-such-user-vpn "$(ifname sbox)" 2>&1)" || rc=$?
    [ "$rc" -ne 0 ] && contains "$out" 'no user "no-such-user-vpn"' || fail "--user=no-such-user-vpn: $rc $out"
    ! n "$A" ip link show "$(ifname sbox)" >/dev/null 2>&1 || fail "a TUN left after a refused --user"
    echo "  --user=no-such-user-vpn: refused ($(echo "$out" | tail -1))"
}

# Every later operation under the sandbox, each followed by traffic: listen-port changes above
# and below 1024 (and below 1024 refused with --low-ports=off), fwmark set and cleared (the
# daemon's datagrams carry it), peers added and removed, a private-key change, the endpoint
# roaming (address and port), a route change (the route listener), an MTU change.
scenario_sandbox_operations() {
    make_pair sbp; tunnel vpn vpn 4
    must "first ping" ping4 "$A" 100.64.0.2
    local port
    for port in 51900 853 40000; do
        n "$A" wg set "$WA" listen-port "$port" || fail "wg set listen-port $port"
        [ "$(n "$A" wg show "$WA" listen-port)" = "$port" ] || fail "listen-port $port not taken"
        n "$A" ss -lun | grep -q ":$port " || fail "nothing listens on $port"
        must "ping A->B after listen-port $port" ping4 "$A" 100.64.0.2
        must "ping B->A after listen-port $port" ping4 "$B" 100.64.0.1
        [ "$(endpoint_of "$B" "$WB" "$PA")" = "198.18.0.1:$port" ] || fail "B did not follow A to port $port"
    done
    echo "  listen-port 51900, 853, 40000: bound, B followed each"
    n "$A" nft -f - <<NFT
table inet sbmark {
    chain out { type filter hook output priority 0; udp sport 40000 meta mark 0x1234 counter; }
}
NFT
    n "$A" wg set "$WA" fwmark 0x1234 || fail "wg set fwmark"
    must "ping with fwmark" ping4 "$A" 100.64.0.2 3
    local marked; marked="$(n "$A" nft list chain inet sbmark out | grep -o 'packets [0-9]*' | cut -d' ' -f2)"
    [ "${marked:-0}" -ge 3 ] || fail "datagrams not marked after wg set fwmark ($marked)"
    n "$A" wg set "$WA" fwmark 0 || fail "wg set fwmark 0"
    must "ping without fwmark" ping4 "$A" 100.64.0.2
    echo "  fwmark 0x1234: $marked datagrams marked; cleared again"
    local i extra=()
    for i in $(seq 1 20); do extra+=("$(wg genkey | wg pubkey)"); done
    for i in "${!extra[@]}"; do n "$A" wg set "$WA" peer "${extra[$i]}" allowed-ips "100.64.1.$((i + 1))/32" endpoint "198.18.0.2:$((10000 + i))"; done
    [ "$(n "$A" wg show "$WA" peers | wc -l)" -eq 21 ] || fail "peers not added"
    for p in "${extra[@]}"; do n "$A" wg set "$WA" peer "$p" remove; done
    [ "$(n "$A" wg show "$WA" peers | wc -l)" -eq 1 ] || fail "peers not removed"
    must "ping after peers came and went" ping4 "$A" 100.64.0.2
    echo "  20 peers added and removed"
    local k2 p2; k2="$(wg genkey)"; p2="$(pubkey "$k2")"
    n "$A" wg set "$WA" private-key <(echo "$k2")
    n "$B" wg set "$WB" peer "$PA" remove peer "$p2" endpoint 198.18.0.1:40000 allowed-ips 100.64.0.1/32,fd00::1/128
    must "ping after the key change" ping4 "$A" 100.64.0.2 3
    [ "$(handshake_time "$B" "$WB" "$p2")" -gt 0 ] || fail "no handshake with the new key"
    PA="$p2"
    echo "  private key changed: handshake with the new key"
    n "$A" ip addr add 198.18.0.11/24 dev "$VA"
    n "$A" ip addr del 198.18.0.1/24 dev "$VA"
    n "$A" wg set "$WA" listen-port 51901
    must "ping after roaming" ping4 "$A" 100.64.0.2 3
    [ "$(endpoint_of "$B" "$WB" "$PA")" = "198.18.0.11:51901" ] || fail "B did not follow A's roam: $(endpoint_of "$B" "$WB" "$PA")"
    must "ping B->A after roaming" ping4 "$B" 100.64.0.1
    echo "  roamed to 198.18.0.11:51901: B followed"
    # A route change: B's endpoint reached over a second veth; the route listener lets the
    # kernel pick the new source, and B follows.
    local VA2 VB2; VA2="$(ifname sbpa2)"; VB2="$(ifname sbpb2)"
    ip link add "$VA2" netns "$(ns "$A")" type veth peer name "$VB2" netns "$(ns "$B")"
    n "$A" ip addr add 198.18.1.1/24 dev "$VA2"; n "$B" ip addr add 198.18.1.2/24 dev "$VB2"
    n "$A" ip link set "$VA2" up; n "$B" ip link set "$VB2" up
    n "$B" ip addr add 198.19.9.2 dev lo
    n "$A" ip route add 198.19.9.2 via 198.18.0.2 dev "$VA"
    n "$A" wg set "$WA" peer "$PB" endpoint 198.19.9.2:51820
    must "ping over the first path" ping4 "$A" 100.64.0.2
    n "$A" ip route replace 198.19.9.2 via 198.18.1.2 dev "$VA2"
    n "$A" ip addr del 198.18.0.11/24 dev "$VA"
    must "ping after the route change" n "$A" timeout 10 ping -c 3 -i 0.3 -W 2 100.64.0.2 >/dev/null
    [ "$(endpoint_of "$B" "$WB" "$PA")" = "198.18.1.1:51901" ] || fail "B sees A at $(endpoint_of "$B" "$WB" "$PA") after the route change"
    echo "  route to B moved to a second veth: B sees A at 198.18.1.1:51901"
    n "$A" ip link set "$WA" mtu 1300
    must "ping after an MTU change" n "$A" timeout 10 ping -c 2 -i 0.2 -W 2 -M do -s 1272 100.64.0.2 >/dev/null
    must "daemon A alive" kill -0 "$PIDA"; must "daemon B alive" kill -0 "$PIDB"
    threads_are "$PIDA" 65534 "$CAPS_KEPT" 2 1 >/dev/null
    no_seccomp_reports
    # With --low-ports=off a port below 1024 is refused, and the daemon keeps its port.
    local WC; WC="$(ifname sbpc)"
    echo "$SOCK_DIR/$WC.sock" >>"$STATE/socks"
    (exec ip netns exec "$(ns "$A")" "$VPN" --foreground --low-ports=off "$WC" >"$STATE/$WC.log" 2>&1) &
    local pc=$!; track_pid "$pc"
    wait_for "[ -S $SOCK_DIR/$WC.sock ]" 10 || fail "--low-ports=off daemon did not start"
    n "$A" ip link set "$WC" up
    n "$A" wg set "$WC" private-key <(wg genkey) listen-port 41000 || fail "listen-port 41000 with --low-ports=off"
    wait_for "n $A ss -lun | grep -q ':41000 '" 5 || fail "nothing listens on 41000"
    local out; out="$(n "$A" wg set "$WC" listen-port 853 2>&1)" && fail "listen-port 853 accepted with --low-ports=off"
    ! n "$A" ss -lun | grep -q ':853 ' || fail "port 853 bound with --low-ports=off"
    must "--low-ports=off daemon alive" kill -0 "$pc"
    must "--low-ports=off daemon answers wg" n "$A" wg show "$WC" >/dev/null
    n "$A" wg set "$WC" listen-port 41001 || fail "listen-port 41001 after the refusal"
    wait_for "n $A ss -lun | grep -q ':41001 '" 5 || fail "nothing listens on 41001 after the refusal"
    echo "  --low-ports=off: listen-port 853 refused ($(echo "$out" | tail -1)); 41001 taken afterwards"
    no_seccomp_reports
}

# `vpn up` starts a sandboxed daemon (its options passed through), `vpn down` ends it: the
# interface, the socket, the daemon and its cleaner are gone.
scenario_sandbox_vpn_up_down() {
    make_pair sbu
    WA="$(ifname sbuaw)"; WB="$(ifname sbubw)"
    KA="$(wg genkey)"; KB="$(wg genkey)"; PA="$(pubkey "$KA")"; PB="$(pubkey "$KB")"
    start_daemon vpn "$B" "$WB"
    n "$B" wg set "$WB" private-key <(echo "$KB") listen-port 51820 peer "$PA" allowed-ips 100.64.0.1/32
    tunnel_addrs "$B" 2 "$WB"
    local conf="$STATE/$WA.conf" flags
    cat >"$conf" <<CONF
[Interface]
PrivateKey = $KA
Address = 100.64.0.1/24
ListenPort = 853

[Peer]
PublicKey = $PB
Endpoint = 198.18.0.2:51820
AllowedIPs = 100.64.0.2/32
CONF
    chmod 600 "$conf"
    echo "$SOCK_DIR/$WA.sock" >>"$STATE/socks"
    for flags in "" "--low-ports=off"; do
        local port=853; [ -n "$flags" ] && { sed -i 's/^ListenPort = .*/ListenPort = 41853/' "$conf"; port=41853; }
        n "$A" "$VPN" up $flags --log-file="$STATE/up.$port.log" "$conf" >"$STATE/up.out" 2>&1 || fail "vpn up $flags: $(cat "$STATE/up.out")"
        must "ping through the vpn up tunnel ($flags)" ping4 "$A" 100.64.0.2
        local pid; pid="$(daemon_in "$A")"
        [ -n "$pid" ] || fail "no daemon after vpn up"
        local want="$CAPS_KEPT"; [ -n "$flags" ] && want="$CAPS_ADMIN"
        local nt; nt="$(threads_are "$pid" 65534 "$want" 2 1)"
        [ "$(n "$A" wg show "$WA" listen-port)" = "$port" ] || fail "listen port $port"
        local c; c="$(cleaner_of "$pid")"
        n "$A" "$VPN" down "$conf" >"$STATE/down.out" 2>&1 || fail "vpn down: $(cat "$STATE/down.out")"
        wait_for "! kill -0 $pid" 10 || fail "daemon still running after vpn down"
        wait_for "[ -z \"\$(ip netns pids $(ns "$A"))\" ]" 5 || fail "processes left in A: $(ip netns pids "$(ns "$A")")"
        [ ! -e "$SOCK_DIR/$WA.sock" ] || fail "UAPI socket left after vpn down"
        ! n "$A" ip link show "$WA" >/dev/null 2>&1 || fail "link left after vpn down"
        echo "  vpn up ${flags:-(defaults)}: port $port, $nt threads with CapEff $want; vpn down: daemon $pid and cleaner $c gone, socket removed"
        ! grep -q 'vpn: seccomp: system call' "$STATE/up.$port.log" || fail "$(grep 'vpn: seccomp' "$STATE/up.$port.log")"
    done
}

# The filter bites: a process that installs the daemon's filter and then calls mount, ptrace,
# execve, or socket(AF_PACKET) (a family outside the list), or forks, is killed by SIGSYS, and
# (but for the fork, whose signals glibc blocks) the log line names the call; new threads and
# UDP sockets, which the daemon needs, pass. A daemon whose allowlist is made to miss a call it
# makes (the test hook VPN_SECCOMP_TEST_DENY=bind) stops with the line in
# its log and its socket cleaned up.
scenario_sandbox_bites() {
    local call rc out
    for call in mount ptrace execve socket-packet fork; do
        rc=0; out="$("$VPN" sandbox-probe "$call" 2>&1)" || rc=$?
        [ "$rc" -eq $((128 + 31)) ] || fail "$call: exit status $rc, want 159 (SIGSYS): $out"
        local want="$call"; [ "$call" = socket-packet ] && want=socket
        if [ "$call" = fork ]; then
            ! contains "$out" "not stopped" || fail "fork: $out"
            echo "  fork: killed by SIGSYS (status $rc)"
        else
            contains "$out" "vpn: seccomp: system call $want (number " || fail "$call: the message does not name it: $out"
            echo "  $call: killed by SIGSYS (status $rc): $out"
        fi
    done
    for call in thread udp; do
        out="$("$VPN" sandbox-probe "$call" 2>&1)" || fail "$call was stopped: $out"
        contains "$out" "not stopped (Ok(()))" || fail "$call: $out"
    done
    echo "  thread, udp: allowed"
    # The running daemon: a call taken off its list stops it, named in its log.
    ns_add sbb
    local w; w="$(ifname sbb)"
    echo "$SOCK_DIR/$w.sock" >>"$STATE/socks"
    (exec ip netns exec "$(ns sbb)" env VPN_SECCOMP_TEST_DENY=bind "$VPN" --foreground "$w" >"$STATE/$w.bite" 2>&1) &
    local pid=$!; track_pid "$pid"
    wait_for "[ -S $SOCK_DIR/$w.sock ] && grep -q 'device started' $STATE/$w.bite" 10 || fail "daemon did not start: $(cat "$STATE/$w.bite")"
    # The interface up: the device binds its listen port.
    n sbb wg set "$w" private-key <(wg genkey) listen-port 51820 >/dev/null 2>&1 || true
    n sbb ip link set "$w" up
    wait_for "! kill -0 $pid" 10 || fail "the daemon survived a call outside its list"
    rc=0; wait "$pid" || rc=$?
    [ "$rc" -eq $((128 + 31)) ] || fail "daemon exit status $rc, want 159"
    grep -q 'vpn: seccomp: system call bind (number ' "$STATE/$w.bite" || fail "no report in the log: $(cat "$STATE/$w.bite")"
    wait_for "[ ! -e $SOCK_DIR/$w.sock ]" 5 || fail "the cleaner did not remove the killed daemon's socket"
    echo "  running daemon: $(grep 'vpn: seccomp' "$STATE/$w.bite"); status $rc; socket removed by the cleaner"
}

# Hostile input under the sandbox: the hostile scenario (replays, junk datagrams at both
# ports, malformed UAPI requests with idle connections held), then both daemons still
# sandboxed in every thread and no seccomp report in their logs.
scenario_sandbox_hostile() {
    scenario_hostile
    threads_are "$PIDA" 65534 "$CAPS_KEPT" 2 1 >/dev/null
    threads_are "$PIDB" 65534 "$CAPS_KEPT" 2 1 >/dev/null
    no_seccomp_reports
    echo "  after the hostile input: both daemons alive, every thread still uid 65534 under seccomp"
}
