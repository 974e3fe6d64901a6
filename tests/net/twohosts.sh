#!/bin/sh
# twohosts.sh - a job over two hosts on one machine: two network namespaces of the namespace
# cluster (tests/net/cluster.sh; 10.213.0.1 and 10.213.0.2, addresses that exist only inside them) count as two hosts,
# since a host's identity includes its network namespace. Two ranks run in each, started the
# torchrun way (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT); tests/mp/coll_select then checks
# that world collectives are correct over TCP and that the communicator of each host's ranks
# uses shared memory, and the ranks' INFO logs must say so too. The cluster is removed on every exit
# path. Needs root and `ip netns`; prints SKIP with
# the reason and exits 0 otherwise.
BUILD=${BUILD:-build}
prog=$BUILD/tests/mp/coll_select
[ -x "$prog" ] || { echo "twohosts: $prog is not built"; exit 1; }
. tests/net/cluster.sh
cluster_up twohosts 2 "" 10.213.0
ns1=$(cluster_host 1) ns2=$(cluster_host 2)

# Ranks 0 and 1 on the first host (rank 0 serves the store at MASTER_ADDR), 2 and 3 on the
# second. Variables a launcher of the test runner may have set are removed.
for r in 0 1 2 3; do
    ns=$ns1
    [ $r -ge 2 ] && ns=$ns2
    ip netns exec "$ns" env -u CHORUS_RANK -u CHORUS_SIZE -u CHORUS_STORE_ADDR \
        -u CHORUS_LOCAL_RANK -u CHORUS_LOCAL_SIZE -u CHORUS_IFACE \
        RANK=$r WORLD_SIZE=4 LOCAL_RANK=$((r % 2)) LOCAL_WORLD_SIZE=2 \
        MASTER_ADDR=10.213.0.1 MASTER_PORT=29511 CHORUS_JOB_ID="twohosts-$tag" \
        CHORUS_DEBUG=INFO CHORUS_DEBUG_SUBSYS=INIT,SHM \
        "$prog" > "$logs/rank$r.log" 2>&1 &
    pids="$pids $!"
done
fail=0
r=0
for p in $pids; do
    wait "$p" || { echo "twohosts: rank $r failed (exit $?)"; fail=1; }
    r=$((r + 1))
done
for r in 0 1 2 3; do sed "s/^/rank$r| /" "$logs/rank$r.log"; done
[ $fail = 0 ] || exit 1
for r in 0 1 2 3; do
    log=$logs/rank$r.log
    grep -q "world of 4 ranks on 2 hosts (TCP); host-local communicator of 2 ranks (shared memory)" "$log" ||
        { echo "twohosts: rank $r did not report TCP for the world and shared memory on its host"; exit 1; }
    grep -q ", 2 hosts, listening on 10.213.0.$((r / 2 + 1)):" "$log" ||
        { echo "twohosts: rank $r did not listen on its own namespace's address"; exit 1; }
    grep -q "shared memory for 2 ranks" "$log" ||
        { echo "twohosts: rank $r logged no shared-memory group of 2 ranks"; exit 1; }
done
echo "twohosts: OK (2 hosts x 2 ranks; world over TCP, each host's communicator over shared memory)"
