#!/bin/sh
# slow_link.sh - the timeout means "without progress": two ranks in two network namespaces
# joined by a veth pair throttled to RATE (tc tbf), CHORUS_TIMEOUT_S=2, one allreduce that
# needs several times that to cross the link (tests/mp/slow_link). It must complete with exact
# results on both ranks. Needs root, `ip netns` and `tc`; prints SKIP and exits 0 otherwise.
# The namespaces (and the veth pair with them) are removed on every exit path.
BUILD=${BUILD:-build}
prog=$BUILD/tests/mp/slow_link
rate=${1:-8mbit}
count=${2:-1000000}
[ "$(id -u)" = 0 ] || { echo "SKIP slow_link: needs root for network namespaces"; exit 0; }
command -v tc > /dev/null 2>&1 && command -v ip > /dev/null 2>&1 && ip netns list > /dev/null 2>&1 ||
    { echo "SKIP slow_link: 'ip netns' or 'tc' is not available"; exit 0; }
tag=$$
ns1=chorus-s1-$tag
ns2=chorus-s2-$tag
logs=$(mktemp -d)
pids=""
cleanup() {
    trap '' INT TERM HUP
    trap - EXIT
    for p in $pids; do kill -9 "$p" 2> /dev/null; done
    ip netns del "$ns1" 2> /dev/null
    ip netns del "$ns2" 2> /dev/null
    rm -rf "$logs"
}
trap cleanup EXIT
trap 'cleanup; exit 1' INT TERM HUP
if ! ip netns add "$ns1" 2> "$logs/err" || ! ip netns add "$ns2" 2>> "$logs/err"; then
    echo "SKIP slow_link: cannot create network namespaces: $(cat "$logs/err")"
    exit 0
fi
set -e
ip link add "sv1-$tag" netns "$ns1" type veth peer name "sv2-$tag" netns "$ns2"
ip -n "$ns1" addr add 10.214.0.1/24 dev "sv1-$tag"
ip -n "$ns2" addr add 10.214.0.2/24 dev "sv2-$tag"
for ns in "$ns1" "$ns2"; do ip -n "$ns" link set lo up; done
ip -n "$ns1" link set "sv1-$tag" up
ip -n "$ns2" link set "sv2-$tag" up
tc -n "$ns1" qdisc add dev "sv1-$tag" root tbf rate "$rate" burst 16kb latency 400ms
tc -n "$ns2" qdisc add dev "sv2-$tag" root tbf rate "$rate" burst 16kb latency 400ms
set +e
for r in 0 1; do
    ns=$ns1
    [ $r = 1 ] && ns=$ns2
    ip netns exec "$ns" env -u CHORUS_RANK -u CHORUS_SIZE -u CHORUS_STORE_ADDR \
        -u CHORUS_LOCAL_RANK -u CHORUS_LOCAL_SIZE -u CHORUS_IFACE \
        RANK=$r WORLD_SIZE=2 LOCAL_RANK=0 LOCAL_WORLD_SIZE=1 \
        MASTER_ADDR=10.214.0.1 MASTER_PORT=29517 CHORUS_JOB_ID="slow-$tag" \
        CHORUS_TIMEOUT_S=2 CHORUS_HEARTBEAT_S=0.5 timeout 60 "$prog" "$count" > "$logs/rank$r.log" 2>&1 &
    pids="$pids $!"
done
fail=0
for p in $pids; do wait "$p" || fail=1; done
pids=""
cat "$logs/rank0.log" "$logs/rank1.log"
[ $fail = 0 ] && [ "$(cat "$logs"/rank*.log | grep -c 'results exact')" = 2 ] || { echo "FAILED: the slow allreduce did not complete on both ranks"; exit 1; }
echo "ok: a transfer slower than CHORUS_TIMEOUT_S but moving completed"
