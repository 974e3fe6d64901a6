#!/bin/sh
# slow_link.sh - the timeout means "without progress": two ranks in two network namespaces
# joined through the namespace cluster's bridge, each link throttled to RATE (tc tbf), CHORUS_TIMEOUT_S=2, one allreduce that
# needs several times that to cross the link (tests/mp/slow_link). It must complete with exact
# results on both ranks. Needs root, `ip netns` and `tc`; prints SKIP and exits 0 otherwise.
# tests/net/cluster.sh removes the namespaces on every exit path.
BUILD=${BUILD:-build}
prog=$BUILD/tests/mp/slow_link
rate=${1:-8mbit}
count=${2:-1000000}
. tests/net/cluster.sh
cluster_up slow_link 2 "$rate" 10.214.0
ns1=$(cluster_host 1) ns2=$(cluster_host 2)
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
