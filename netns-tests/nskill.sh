# Removes network namespaces by full name: every process inside them gets SIGTERM, then, after a
# short grace, SIGKILL, and the namespace is deleted. Missing namespaces are skipped. Sourced by
# lib.sh, memory.sh and connected/lib.sh, so every teardown stops processes the same way.
ns_kill_delete() {
    local name pid
    for name in "$@"; do
        for pid in $(ip netns pids "$name" 2>/dev/null); do kill "$pid" 2>/dev/null; done
    done
    sleep "${NS_KILL_GRACE:-0.3}"
    for name in "$@"; do
        for pid in $(ip netns pids "$name" 2>/dev/null); do kill -9 "$pid" 2>/dev/null; done
        ip netns del "$name" 2>/dev/null
    done
    return 0
}
