# netpair.sh - two hosts on this machine, for tests to source: netpair_up NAME SUBNET [RATE]
# makes two network namespaces, $ns1 and $ns2, joined by a veth pair with the addresses
# SUBNET.1 and SUBNET.2 (/24, existing only inside them), loopback up in each, and with RATE
# (a tc rate such as 8mbit) both ends shaped with tbf. It sets $tag, $logs (a temporary
# directory) and $pids (add the pids of what you start: they are killed), and removes it all on
# every exit path. Where it cannot (not root, no `ip netns`, no `tc` when RATE is given), it
# prints "SKIP NAME: why" and exits 0.
netpair_up() {
    _np_name=$1 _np_net=$2 _np_rate=${3:-}
    [ "$(id -u)" = 0 ] || { echo "SKIP $_np_name: needs root to create network namespaces"; exit 0; }
    command -v ip > /dev/null 2>&1 && ip netns list > /dev/null 2>&1 ||
        { echo "SKIP $_np_name: 'ip netns' is not available"; exit 0; }
    if [ -n "$_np_rate" ] && ! command -v tc > /dev/null 2>&1; then
        echo "SKIP $_np_name: 'tc' is not available"
        exit 0
    fi
    tag=$$
    ns1=chorus-$_np_name-1-$tag
    ns2=chorus-$_np_name-2-$tag
    logs=$(mktemp -d)
    pids=""
    trap netpair_down EXIT
    trap 'netpair_down; exit 1' INT TERM HUP
    if ! ip netns add "$ns1" 2> "$logs/err" || ! ip netns add "$ns2" 2>> "$logs/err"; then
        echo "SKIP $_np_name: cannot create network namespaces: $(cat "$logs/err")"
        exit 0
    fi
    set -e
    ip link add "nv1-$tag" netns "$ns1" type veth peer name "nv2-$tag" netns "$ns2"
    ip -n "$ns1" addr add "$_np_net.1/24" dev "nv1-$tag"
    ip -n "$ns2" addr add "$_np_net.2/24" dev "nv2-$tag"
    for _np_ns in "$ns1" "$ns2"; do ip -n "$_np_ns" link set lo up; done
    ip -n "$ns1" link set "nv1-$tag" up
    ip -n "$ns2" link set "nv2-$tag" up
    if [ -n "$_np_rate" ]; then
        tc -n "$ns1" qdisc add dev "nv1-$tag" root tbf rate "$_np_rate" burst 16kb latency 400ms
        tc -n "$ns2" qdisc add dev "nv2-$tag" root tbf rate "$_np_rate" burst 16kb latency 400ms
    fi
    set +e
}

netpair_down() {
    trap '' INT TERM HUP # a second signal must not cut the cleanup short
    trap - EXIT
    for _np_p in $pids; do kill -9 "$_np_p" 2> /dev/null; done
    ip netns del "$ns1" 2> /dev/null
    ip netns del "$ns2" 2> /dev/null
    rm -rf "$logs"
}
