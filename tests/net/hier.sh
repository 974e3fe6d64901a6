#!/bin/sh
# hier.sh LAYOUT [kill VICTIM BYTES] - the collectives of a job spanning the hosts of a
# namespace cluster (tests/net/cluster.sh), LAYOUT ranks per host, e.g. 2,2 or 1,1,1 or 1,3.
# Ranks start the torchrun way (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT) inside their
# host's namespace and run tests/mp/hier: every collective by the rules and forced, bitwise
# against serial folds. Then each rank's INFO log must say which path the rules take:
# hierarchical where some host has several ranks, else flat TCP with hier only when forced.
# With "kill VICTIM BYTES" they run tests/mp/peer_death instead: rank VICTIM kills itself in
# the middle of allreduces of BYTES, and every other rank must fail naming it (exit 3) within
# the timeout. With "mismatch MODE..." they run tests/mp/mismatch MODE... (every rank must see
# CHORUS_ERR_MISMATCH at the mismatched call). LAYOUT "alternate" puts ranks 0 and 2 on one host, 1 and 3 on the other, and
# runs tests/mp/coll_select (every algorithm name, hier included, correct): the hierarchical
# path is off (a host's ranks are not consecutive) and the INFO lines must say so.
# With "autotune" they run tests/mp/engine_autotune under CHORUS_AUTOTUNE=1: rank 0 must try the
# hierarchical path (the rules) against flat direct_ring and every rank apply its choice.
# Needs root (SKIP otherwise).
BUILD=${BUILD:-build}
layout=${1:?usage: hier.sh LAYOUT (ranks per host, e.g. 2,2, or alternate) [kill VICTIM BYTES | mismatch MODE...]}
victim=-1 alternate=0 mismatch=0 autotune=0 prog=$BUILD/tests/mp/hier subsys=COLL tune=""
case "${2:-}" in
kill) victim=$3 prog=$BUILD/tests/mp/peer_death args="$3 $4" ;;
mismatch) mismatch=1 prog=$BUILD/tests/mp/mismatch args=$(shift 2; echo "$*") ;;
autotune) autotune=1 prog=$BUILD/tests/mp/engine_autotune args=40 subsys=COLL,ENGINE
    tune="CHORUS_AUTOTUNE=1 CHORUS_AUTOTUNE_STEPS=1 CHORUS_AUTOTUNE_WARMUP=1" ;;
*) args="" ;;
esac
if [ "$layout" = alternate ]; then
    alternate=1 layout=2,2 prog=$BUILD/tests/mp/coll_select
fi
# shellcheck disable=SC2086 # the program's arguments are words
set -- $args
[ -x "$prog" ] || { echo "hier: $prog is not built"; exit 1; }
nh=$(echo "$layout" | tr ',' '\n' | wc -l)
size=0
for n in $(echo "$layout" | tr ',' ' '); do size=$((size + n)); done
. tests/net/cluster.sh
cluster_up hier "$nh"

# place: "host local-rank ranks-on-host" of every rank, in rank order
place=""
h=1
for n in $(echo "$layout" | tr ',' ' '); do
    l=0
    while [ $l -lt "$n" ]; do
        place="$place $h:$l:$n"
        l=$((l + 1))
    done
    h=$((h + 1))
done
[ $alternate = 1 ] && place="1:0:2 2:0:2 1:1:2 2:1:2"
r=0
for p in $place; do
    h=${p%%:*} l=${p#*:} n=${p##*:}
    l=${l%%:*}
    ip netns exec "$(cluster_host $h)" env -u CHORUS_RANK -u CHORUS_SIZE -u CHORUS_STORE_ADDR \
        -u CHORUS_LOCAL_RANK -u CHORUS_LOCAL_SIZE -u CHORUS_IFACE -u CHORUS_ALGO_ALLREDUCE \
        -u CHORUS_ALGO_BROADCAST -u CHORUS_ALGO_ALLGATHER \
        RANK=$r WORLD_SIZE=$size LOCAL_RANK=$l LOCAL_WORLD_SIZE=$n \
        MASTER_ADDR="$(cluster_addr 1)" MASTER_PORT=29512 CHORUS_JOB_ID="hier-$tag" \
        CHORUS_TIMEOUT_S=30 CHORUS_DEBUG=INFO CHORUS_DEBUG_SUBSYS=$subsys $tune \
        "$prog" "$@" > "$logs/rank$r.log" 2>&1 &
    pids="$pids $!"
    r=$((r + 1))
done
fail=0
r=0
for p in $pids; do
    wait "$p"
    st=$?
    if [ "$victim" -lt 0 ]; then
        [ $st = 0 ] || { echo "hier: rank $r failed (exit $st)"; fail=1; }
        [ $mismatch = 0 ] || grep -q "rank $r: CHORUS_ERR_MISMATCH: " "$logs/rank$r.log" ||
            { echo "hier: rank $r did not report the mismatch"; fail=1; }
    elif [ $r = "$victim" ]; then
        [ $st = 137 ] || { echo "hier: rank $r, the victim, exited $st, not by SIGKILL"; fail=1; }
    else
        [ $st = 3 ] || { echo "hier: survivor rank $r exited $st, not 3"; fail=1; }
    fi
    r=$((r + 1))
done
for r in $(seq 0 $((size - 1))); do sed "s/^/rank$r| /" "$logs/rank$r.log" | grep -v "^rank$r| ok "; done
[ $fail = 0 ] || exit 1
if [ $alternate = 1 ]; then
    for r in 0 1 2 3; do
        for want in "no hierarchical collectives: the ranks of a host are not consecutive" \
            "(4 ranks, 2 hosts): TCP; allreduce one-shot"; do
            grep -qF "$want" "$logs/rank$r.log" || { echo "hier: rank $r did not say: $want"; exit 1; }
        done
    done
    echo "hier: OK (alternating hosts: flat TCP, every algorithm name correct)"
    exit 0
fi
if [ "$size" -gt "$nh" ]; then
    want="($size ranks, $nh hosts): hierarchical allreduce, broadcast and allgather (shared memory within each host, TCP between hosts"
else
    want="($size ranks, $nh hosts): TCP; .*; one rank per host, so the hierarchical path (hier) runs only when forced"
fi
for r in $(seq 0 $((size - 1))); do
    grep -q "$want" "$logs/rank$r.log" ||
        { echo "hier: rank $r did not log the expected path: $want"; exit 1; }
done
if [ $autotune = 1 ]; then
    grep "autotune: " "$logs/rank0.log"
    grep -q "autotune: allreduce algorithm: auto [0-9.]* ms, direct_ring [0-9.]* ms" "$logs/rank0.log" ||
        { echo "hier: rank 0 did not try hier (auto) against flat direct_ring"; exit 1; }
    c=$(sed -n 's/.*autotune: chose \(allreduce [^ ,]*\), \(fusion threshold [0-9]* B\), \(cycle time [0-9.]* ms\) after.*/\1, \2, \3/p' "$logs/rank0.log")
    for r in $(seq 0 $((size - 1))); do
        grep -q "autotune: rank $r applies $c\$" "$logs/rank$r.log" ||
            { echo "hier: rank $r did not apply rank 0's choice: $c"; exit 1; }
    done
    echo "hier: OK ($layout ranks on $nh hosts; every rank applied: $c)"
    exit 0
fi
if [ "$victim" -ge 0 ]; then
    for r in $(seq 0 $((size - 1))); do
        [ $r = "$victim" ] && continue
        grep -q "allreduce failed after .*rank $victim" "$logs/rank$r.log" ||
            { echo "hier: survivor rank $r did not name rank $victim"; exit 1; }
    done
    echo "hier: OK ($layout ranks on $nh hosts; rank $victim killed, every survivor named it)"
    exit 0
fi
echo "hier: OK ($layout ranks on $nh hosts)"
