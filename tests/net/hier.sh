#!/bin/sh
# hier.sh LAYOUT - the collectives of a job spanning the hosts of a namespace cluster
# (tests/net/cluster.sh), LAYOUT ranks per host, e.g. 2,2 or 1,1,1 or 1,3. Ranks start the
# torchrun way (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT) inside their host's namespace and
# run tests/mp/hier: every collective by the rules and forced, bitwise against serial folds.
# Then each rank's INFO log must say which path the rules take: hierarchical where some host
# has several ranks, else flat TCP with hier only when forced. Needs root (SKIP otherwise).
BUILD=${BUILD:-build}
prog=$BUILD/tests/mp/hier
[ -x "$prog" ] || { echo "hier: $prog is not built"; exit 1; }
layout=${1:?usage: hier.sh LAYOUT (ranks per host, e.g. 2,2)}
nh=$(echo "$layout" | tr ',' '\n' | wc -l)
size=0
for n in $(echo "$layout" | tr ',' ' '); do size=$((size + n)); done
. tests/net/cluster.sh
cluster_up hier "$nh"

r=0
h=1
for n in $(echo "$layout" | tr ',' ' '); do
    l=0
    while [ $l -lt "$n" ]; do
        ip netns exec "$(cluster_host $h)" env -u CHORUS_RANK -u CHORUS_SIZE -u CHORUS_STORE_ADDR \
            -u CHORUS_LOCAL_RANK -u CHORUS_LOCAL_SIZE -u CHORUS_IFACE -u CHORUS_ALGO_ALLREDUCE \
            -u CHORUS_ALGO_BROADCAST -u CHORUS_ALGO_ALLGATHER \
            RANK=$r WORLD_SIZE=$size LOCAL_RANK=$l LOCAL_WORLD_SIZE=$n \
            MASTER_ADDR="$(cluster_addr 1)" MASTER_PORT=29512 CHORUS_JOB_ID="hier-$tag" \
            CHORUS_TIMEOUT_S=30 CHORUS_DEBUG=INFO CHORUS_DEBUG_SUBSYS=COLL \
            "$prog" > "$logs/rank$r.log" 2>&1 &
        pids="$pids $!"
        r=$((r + 1))
        l=$((l + 1))
    done
    h=$((h + 1))
done
fail=0
r=0
for p in $pids; do
    wait "$p" || { echo "hier: rank $r failed (exit $?)"; fail=1; }
    r=$((r + 1))
done
for r in $(seq 0 $((size - 1))); do sed "s/^/rank$r| /" "$logs/rank$r.log" | grep -v "^rank$r| ok "; done
[ $fail = 0 ] || exit 1
if [ "$size" -gt "$nh" ]; then
    want="($size ranks, $nh hosts): hierarchical allreduce, broadcast and allgather (shared memory within each host, TCP between hosts"
else
    want="($size ranks, $nh hosts): TCP; .*; one rank per host, so the hierarchical path (hier) runs only when forced"
fi
for r in $(seq 0 $((size - 1))); do
    grep -q "$want" "$logs/rank$r.log" ||
        { echo "hier: rank $r did not log the expected path: $want"; exit 1; }
done
echo "hier: OK ($layout ranks on $nh hosts)"
