#!/bin/sh
# cluster.sh - N hosts on this machine for tests and benchmarks: N network namespaces, each
# joined by a veth pair to a bridge that lives in a namespace of its own (the "switch"), so that
# every address used exists only inside namespaces this script made. Host i (1..N) is the
# namespace "chorus-NAME-TAG-hI" with the address SUBNET.I/24 on its interface "eth0", loopback
# up, and /etc/netns/<namespace>/hosts naming every host (the namespace name and the short name
# hI), which `ip netns exec` shows to the programs it starts as /etc/hosts. With a RATE (a tc
# rate such as 1gbit) each host's link is shaped with tbf in both directions: on the host's end
# (what it sends) and on the switch's end (what it receives).
#
# Sourced by a test:
#     . tests/net/cluster.sh
#     cluster_up NAME N [RATE] [SUBNET]
# sets $cluster_hosts (the namespace names in order), $cluster_subnet, $tag, $logs (a temporary
# directory) and $pids (add the pids of what you start: they are killed), and removes it all on
# every exit path (exit, INT, TERM, HUP). cluster_host I and cluster_addr I print host I's name
# and address; cluster_link_down I cuts host I's link; cluster_alias I NAME... gives host I
# more names on every host (the first is the canonical one, as in a Kubernetes pod's own
# /etc/hosts line "IP <pod>.<subdomain>.<namespace>.svc.cluster.local <pod>"). Where it
# cannot (not root, no `ip netns`, no `tc` for a RATE), it prints "SKIP NAME: why" and exits 0.
#
# Run as a command (benchmarks, or by hand):
#     tests/net/cluster.sh up NAME N [RATE] [SUBNET]   # prints the host namespaces, one a line
#     tests/net/cluster.sh down NAME                    # removes every cluster called NAME
# A cluster made with "up" stays until "down".

cluster_host() { echo "chorus-$_cl_name-$tag-h$1"; }
cluster_addr() { echo "$cluster_subnet.$1"; }
cluster_switch() { echo "chorus-$_cl_name-$tag-sw"; }

cluster_link_down() {
    ip -n "$(cluster_host "$1")" link set eth0 down
    ip -n "$(cluster_switch)" link set "p$1" down
}

# cluster_alias I NAME...: one more /etc/hosts line for host I's address on every host. A
# lookup of any of the NAMEs finds this line, and its first NAME is the canonical name.
cluster_alias() {
    _cl_a=$(cluster_addr "$1")
    shift
    for _cl_h in $cluster_hosts; do echo "$_cl_a $*" >> "/etc/netns/$_cl_h/hosts"; done
}

# cluster_make NAME N RATE SUBNET: makes the namespaces; returns non-zero with the reason in
# $logs/err when the kernel refuses.
cluster_make() {
    _cl_name=$1 _cl_n=$2 _cl_rate=$3 cluster_subnet=$4
    _cl_sw=$(cluster_switch)
    cluster_hosts=""
    ip netns add "$_cl_sw" 2> "$logs/err" || return 1
    ip -n "$_cl_sw" link set lo up
    ip -n "$_cl_sw" link add br0 type bridge 2>> "$logs/err" || return 1
    ip -n "$_cl_sw" link set br0 up
    _cl_i=1
    while [ "$_cl_i" -le "$_cl_n" ]; do
        _cl_h=$(cluster_host "$_cl_i")
        ip netns add "$_cl_h" 2>> "$logs/err" || return 1
        cluster_hosts="$cluster_hosts $_cl_h"
        ip link add "c$tag-$_cl_i" netns "$_cl_h" type veth peer name "p$_cl_i" netns "$_cl_sw" \
            2>> "$logs/err" || return 1
        ip -n "$_cl_h" link set "c$tag-$_cl_i" name eth0
        ip -n "$_cl_h" addr add "$cluster_subnet.$_cl_i/24" dev eth0
        ip -n "$_cl_h" link set lo up
        ip -n "$_cl_h" link set eth0 up
        ip -n "$_cl_sw" link set "p$_cl_i" master br0
        ip -n "$_cl_sw" link set "p$_cl_i" up
        if [ -n "$_cl_rate" ]; then
            tc -n "$_cl_h" qdisc add dev eth0 root tbf rate "$_cl_rate" burst 256kb latency 50ms \
                2>> "$logs/err" || return 1
            tc -n "$_cl_sw" qdisc add dev "p$_cl_i" root tbf rate "$_cl_rate" burst 256kb \
                latency 50ms 2>> "$logs/err" || return 1
        fi
        _cl_i=$((_cl_i + 1))
    done
    cluster_hosts=${cluster_hosts# }
    # Every host can name every other one, by namespace name and by short name.
    _cl_i=1
    for _cl_h in $cluster_hosts; do
        mkdir -p "/etc/netns/$_cl_h"
        {
            echo "127.0.0.1 localhost"
            _cl_j=1
            for _cl_o in $cluster_hosts; do
                echo "$cluster_subnet.$_cl_j $_cl_o h$_cl_j"
                _cl_j=$((_cl_j + 1))
            done
        } > "/etc/netns/$_cl_h/hosts"
        echo "$_cl_h" > "/etc/netns/$_cl_h/hostname"
        _cl_i=$((_cl_i + 1))
    done
}

# cluster_remove NAME [TAG]: removes the namespaces (and with them the veth pairs, the bridge
# and the shaping) of the cluster NAME made by this process (TAG) or, without TAG, all of them.
cluster_remove() {
    _cl_pre="chorus-$1-${2:+$2-}"
    for _cl_ns in $(ip netns list 2> /dev/null | awk '{print $1}'); do
        case "$_cl_ns" in
        "$_cl_pre"*h[0-9]* | "$_cl_pre"*sw)
            # Processes still inside the namespace would keep nothing alive (the namespace goes
            # with its last process or mount), but they must not outlive the test either.
            for _cl_p in $(ip netns pids "$_cl_ns" 2> /dev/null); do kill -9 "$_cl_p" 2> /dev/null; done
            ip netns del "$_cl_ns" 2> /dev/null
            rm -rf "/etc/netns/$_cl_ns"
            ;;
        esac
    done
}

cluster_up() {
    _cl_name=$1 _cl_n=$2 _cl_rate=${3:-} _cl_subnet=${4:-10.231.0}
    [ "$(id -u)" = 0 ] || { echo "SKIP $_cl_name: needs root to create network namespaces"; exit 0; }
    command -v ip > /dev/null 2>&1 && ip netns list > /dev/null 2>&1 ||
        { echo "SKIP $_cl_name: 'ip netns' is not available"; exit 0; }
    if [ -n "$_cl_rate" ] && ! command -v tc > /dev/null 2>&1; then
        echo "SKIP $_cl_name: 'tc' is not available"
        exit 0
    fi
    tag=$$
    logs=$(mktemp -d)
    pids=""
    trap cluster_down EXIT
    trap 'cluster_down; exit 1' INT TERM HUP
    if ! cluster_make "$_cl_name" "$_cl_n" "$_cl_rate" "$_cl_subnet"; then
        echo "SKIP $_cl_name: cannot build the namespace cluster: $(cat "$logs/err")"
        exit 0
    fi
}

cluster_down() {
    trap '' INT TERM HUP # a second signal must not cut the cleanup short
    trap - EXIT
    for _cl_p in $pids; do kill -9 "$_cl_p" 2> /dev/null; done
    cluster_remove "$_cl_name" "$tag"
    rm -rf "$logs"
}

# As a command.
case "${0##*/}" in
cluster.sh)
    set -eu
    case "${1:-}" in
    up)
        [ $# -ge 3 ] || { echo "usage: $0 up NAME N [RATE] [SUBNET]" >&2; exit 2; }
        [ "$(id -u)" = 0 ] || { echo "cluster.sh: needs root to create network namespaces" >&2; exit 1; }
        tag=$$
        logs=$(mktemp -d)
        if ! cluster_make "$2" "$3" "${4:-}" "${5:-10.231.0}"; then
            echo "cluster.sh: cannot build the namespace cluster: $(cat "$logs/err")" >&2
            cluster_remove "$2" "$tag"
            rm -rf "$logs"
            exit 1
        fi
        rm -rf "$logs"
        for h in $cluster_hosts; do echo "$h"; done
        ;;
    down)
        [ $# -ge 2 ] || { echo "usage: $0 down NAME" >&2; exit 2; }
        cluster_remove "$2"
        ;;
    *)
        echo "usage: $0 up NAME N [RATE] [SUBNET] | down NAME" >&2
        exit 2
        ;;
    esac
    ;;
esac
