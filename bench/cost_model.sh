#!/bin/sh
# cost_model.sh - measures what bench/cost_model.py needs and checks its predictions, on a
# namespace cluster (tests/net/cluster.sh) of 4 hosts whose links are shaped to RATE:
#
#   calibration   alpha: allreduce of 8 B between 2 hosts x 1 rank (one message each way);
#                 beta: broadcast (pipelined chain) of 4 and 16 MiB between them (the slope);
#                 the same on one host over TCP (CHORUS_SHM=0) and over shared memory, plus
#                 shared-memory reduce-scatter and allgather of 16 MiB; per-message overhead
#                 from allreduce of 8 B on 4 hosts x 2 ranks (7 messages) against 2 x 1 (one)
#   validation    every algorithm of allreduce, broadcast and allgather (forced with
#                 CHORUS_ALGO_*) on 2, 3 and 4 hosts x 1 and 2 ranks, at 1 and 16 MiB
#
# then prints the fitted parameters, measured against predicted times with the error, and the
# prediction for 1,000 ranks on 8-rank hosts at 100 Gbit/s. Ranks are started the torchrun way
# inside the namespaces; times are chorus-bench's slowest rank, mean of ITERS iterations.
#
#   sudo sh bench/cost_model.sh                 RATE=1gbit ITERS=3 OUT=<file for the raw rows>
#   BENCH=/path/to/chorus-bench sh bench/cost_model.sh     another build (hier rows need one
#                                                           that has CHORUS_ALGO_*=hier)
# Needs root (namespaces) and python3; run after make. Nothing outside the namespaces is used.
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT" || exit 1
BUILD=${BUILD:-build}
BENCH=${BENCH:-$ROOT/$BUILD/bin/chorus-bench}
RATE=${RATE:-1gbit}
ITERS=${ITERS:-3}
[ -x "$BENCH" ] || { echo "cost_model: $BENCH is missing (make)" >&2; exit 1; }
[ "$(id -u)" = 0 ] || { echo "cost_model: needs root (network namespaces)" >&2; exit 1; }
OUT=${OUT:-$(mktemp "${TMPDIR:-/tmp}/cost_model.XXXXXX")}
: > "$OUT"
load() { cut -d' ' -f1-3 /proc/loadavg; }

. tests/net/cluster.sh
cluster_up cost 4 "$RATE"
port=29700

# run H N COLL ALGO BYTES [VAR=VALUE...]: one chorus-bench run on H hosts x N ranks; appends
# "H N COLL ALGO BYTES time_us" to $OUT (time "failed" when a rank failed).
run() {
    h=$1 n=$2 coll=$3 algo=$4 bytes=$5
    shift 5
    p=$((h * n))
    # Allgather and reduce-scatter sizes are whole float32 blocks per rank (chorus-bench rounds).
    case $coll in allgather | reduce_scatter) bytes=$((bytes / (4 * p) * 4 * p)) ;; esac
    port=$((port + 1))
    rp=""
    r=0
    while [ $r -lt $p ]; do
        ip netns exec "$(cluster_host $((r / n + 1)))" env RANK=$r WORLD_SIZE=$p \
            LOCAL_RANK=$((r % n)) LOCAL_WORLD_SIZE=$n MASTER_ADDR="$(cluster_addr 1)" \
            MASTER_PORT=$port CHORUS_JOB_ID="cost-$tag-$port" "$@" \
            "$BENCH" --coll "$coll" -b "$bytes" -e "$bytes" -n "$ITERS" -w 1 -a 3 -c 0 \
            > "$logs/run.$r" 2>&1 &
        rp="$rp $!"
        pids="$pids $!"
        r=$((r + 1))
    done
    ok=1
    for q in $rp; do wait "$q" || ok=0; done
    t=$(awk -v b="$bytes" '!/^#/ && $1 == b { print ($6 != "N/A" ? $6 : $10) }' "$logs/run.0")
    [ $ok = 1 ] && [ -n "$t" ] || { t=failed; echo "cost_model: $h x $n $coll $algo $bytes failed: $(tail -n 2 "$logs/run.0" | tr '\n' ' ')" >&2; }
    echo "$h $n $coll $algo $bytes $t" | tee -a "$OUT"
}

echo "# cost_model: links $RATE, $(nproc) cores, load before: $(load)"
M=1048576
# Three times each: the model takes the quickest (the least disturbed by other work).
for i in 1 2 3; do
    run 2 1 allreduce cal_alpha 8
    run 2 1 broadcast cal_beta $((4 * M)) CHORUS_ALGO_BROADCAST=chain
    run 2 1 broadcast cal_beta $((16 * M)) CHORUS_ALGO_BROADCAST=chain
    run 1 2 allreduce cal_alpha_l 8 CHORUS_SHM=0
    run 1 2 broadcast cal_beta_l $((4 * M)) CHORUS_SHM=0 CHORUS_ALGO_BROADCAST=chain
    run 1 2 broadcast cal_beta_l $((16 * M)) CHORUS_SHM=0 CHORUS_ALGO_BROADCAST=chain
    run 1 2 allreduce cal_alpha_s 8
    run 1 2 broadcast cal_shm_bc $((16 * M))
    run 1 2 reduce_scatter cal_shm_rs $((16 * M))
    run 1 2 allgather cal_shm_ag $((16 * M))
    run 4 2 allreduce cal_o 8 CHORUS_ALGO_ALLREDUCE=oneshot
done

for h in 2 3 4; do
    for n in 1 2; do
        p=$((h * n))
        for S in $M $((16 * M)); do
            [ "$S" = $M ] && run $h $n allreduce oneshot $S CHORUS_ALGO_ALLREDUCE=oneshot
            run $h $n allreduce direct_ring $S CHORUS_ALGO_ALLREDUCE=direct_ring
            run $h $n allreduce ring $S CHORUS_ALGO_ALLREDUCE=ring
            [ $((p & (p - 1))) = 0 ] && run $h $n allreduce rd $S CHORUS_ALGO_ALLREDUCE=rd
            [ $n = 2 ] && run $h $n allreduce hier $S CHORUS_ALGO_ALLREDUCE=hier
            run $h $n broadcast tree $S CHORUS_ALGO_BROADCAST=tree
            run $h $n broadcast chain $S CHORUS_ALGO_BROADCAST=chain
            [ $n = 2 ] && run $h $n broadcast hier $S CHORUS_ALGO_BROADCAST=hier
            run $h $n allgather ring $S CHORUS_ALGO_ALLGATHER=ring
            [ $n = 2 ] && run $h $n allgather hier $S CHORUS_ALGO_ALLGATHER=hier
        done
    done
done
echo "# load after: $(load); raw rows in $OUT"
echo
python3 bench/cost_model.py fit "$OUT"
python3 bench/cost_model.py scale "$OUT"
